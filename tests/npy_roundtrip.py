"""The NumPy side of tests/test_files.c (run with Debian's /usr/bin/python3).
  npy_roundtrip.py write DIR   writes .npy files in every form the C reader takes
  npy_roundtrip.py check DIR   checks the files the C writer made
Values are v(i) of the flat C-order index, computed here independently:
floats ((i * 37) % 101) / 8 - 6, ints (i * 37) % 101 - 50, bool i % 3 == 0."""
import sys
import numpy as np


def values(shape, dtype):
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        v = i % 3 == 0
    elif dt.kind == "i":
        v = (i * 37) % 101 - 50
    else:
        v = ((i * 37) % 101) / 8.0 - 6.0
    return v.astype(dt).reshape(shape)


WRITES = {   # name: (shape, dtype as written, fortran order)
    "f4_le": ((3, 4), "<f4", False),
    "f8_be": ((2, 3), ">f8", False),
    "i4_be": ((5,), ">i4", False),
    "i8_f": ((3, 4, 2), "<i8", True),
    "f2_le": ((2, 5), "<f2", False),
    "b1": ((7,), "|b1", False),
    "f4_f": ((4, 3), "<f4", True),
    "scalar": ((), "<f8", False),
    "empty": ((0, 3), "<f4", False),
}

if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    if mode == "write":
        for name, (shape, dt, fortran) in WRITES.items():
            a = values(shape, dt.replace(">", "<"))
            a = np.asfortranarray(a.astype(dt)) if fortran else a.astype(dt)
            np.save("%s/%s.npy" % (d, name), a)
        np.lib.format.write_array(open(d + "/v2.npy", "wb"), values((2, 2), "<f4"), version=(2, 0))
        np.lib.format.write_array(open(d + "/v3.npy", "wb"), values((3,), "<i8"), version=(3, 0))
        np.save(d + "/c8.npy", np.zeros(3, np.complex64))
        np.save(d + "/u2.npy", np.zeros(3, np.uint16))
        raw = open(d + "/f4_le.npy", "rb").read()
        open(d + "/truncated.npy", "wb").write(raw[:-5])
        print("wrote", len(WRITES) + 5, "files")
    else:
        want = {"c_f4": ((3, 4), "<f4"), "c_f8": ((), "<f8"), "c_i4": ((5,), "<i4"), "c_i8": ((2, 3, 2), "<i8"),
                "c_b1": ((4,), "|b1"), "c_f2": ((2, 2), "<f2"), "c_empty": ((0, 3), "<f4"), "c_view": ((4, 3), "<f4")}
        bad = 0
        for name, (shape, dt) in want.items():
            a = np.load("%s/%s.npy" % (d, name))
            ok = a.shape == shape and a.dtype == np.dtype(dt) and np.array_equal(a, values(shape, dt)) and a.flags.c_contiguous
            if not ok:
                bad += 1
                print("MISMATCH", name, a.dtype, a.shape, a.ravel()[:6])
        print("checked %d files written by the library, %d mismatched" % (len(want), bad))
        sys.exit(1 if bad else 0)
