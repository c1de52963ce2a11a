#!/usr/bin/env python3
"""Writes scikit-learn's 8x8 digits (1797 images, 10 classes) for the
examples (mlp.c, convnet.c, denoising_autoencoder.c) to examples/digits.bin:
    bytes 0-3   b"TNDG"
    int32 n, int32 d (64), little-endian
    float32 pixels[n][d], scaled to [0, 1] (the data's 0..16 divided by 16)
    int32 labels[n]
Needs Debian's python3-sklearn (apt-get install python3-sklearn); run it
with the system Python:  /usr/bin/python3 examples/digits.py"""
import os
import struct
import sys

try:
    import numpy as np
    from sklearn.datasets import load_digits
except ImportError as e:
    sys.exit("digits.py: %s; install it with: apt-get install python3-sklearn" % e)

d = load_digits()
x = (d.data / 16.0).astype("<f4")
y = d.target.astype("<i4")
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.bin")
with open(out, "wb") as f:
    f.write(b"TNDG" + struct.pack("<ii", x.shape[0], x.shape[1]))
    f.write(x.tobytes())
    f.write(y.tobytes())
print("wrote %s: %d images of %d pixels, labels %d..%d" % (out, x.shape[0], x.shape[1], y.min(), y.max()))
