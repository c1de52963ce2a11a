"""bench/vmath_numpy.py - NumPy's side of bench/vmath.c: the same ops over
230,400 elements (10x30x768) with the same input ranges, float32 and float64,
median of 7 x 200 calls (one thread: NumPy's ufuncs do not split).
    /usr/bin/python3 bench/vmath_numpy.py [op]
sigmoid is 1 / (1 + exp(-x)) and softplus logaddexp(0, x); NumPy has no erf."""
import sys
import time
import numpy as np

CASES = [("exp", np.exp, -10, 10), ("expm1", np.expm1, -10, 10), ("log", np.log, 0.01, 10),
         ("log1p", np.log1p, -0.99, 10), ("tanh", np.tanh, -5, 5),
         ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), -10, 10),
         ("softplus", lambda x: np.logaddexp(0, x), -10, 10), ("sin", np.sin, -10, 10), ("cos", np.cos, -10, 10)]

def main():
    only = sys.argv[1] if len(sys.argv) > 1 else None
    rng = np.random.default_rng(5)
    print("numpy", np.__version__)
    for name, fn, lo, hi in CASES:
        if only and name != only:
            continue
        for dt in (np.float32, np.float64):
            x = rng.uniform(lo, hi, (10, 30, 768)).astype(dt)
            ts = []
            for _ in range(7):
                t0 = time.perf_counter()
                for _ in range(200):
                    fn(x)
                ts.append((time.perf_counter() - t0) / 200)
            ts.sort()
            print("%-9s %-8s %8.1f us" % (name, np.dtype(dt).name, ts[3] * 1e6))

main()
