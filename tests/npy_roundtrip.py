"""The NumPy side of tests/test_files.c (run with Debian's /usr/bin/python3).
  npy_roundtrip.py write DIR   writes .npy, .npz and safetensors files in every
                               form the C reader takes
  npy_roundtrip.py check DIR   checks the files the C writer made
Values are v(i) of the flat C-order index, computed here independently:
floats ((i * 37) % 101) / 8 - 6, ints (i * 37) % 101 - 50 (unsigned ints
(i * 37) % 101), bool i % 3 == 0. Safetensors files are written and read
here from the format's description (an 8-byte little-endian header size, a
JSON header, the data): Debian has no safetensors package."""
import json
import struct
import sys
import numpy as np


def values(shape, dtype):
    i = np.arange(int(np.prod(shape)), dtype=np.int64)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        v = i % 3 == 0
    elif dt.kind == "i":
        v = (i * 37) % 101 - 50
    elif dt.kind == "u":
        v = (i * 37) % 101
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

NPZ = {   # member: (shape, dtype as written, fortran order)
    "w": ((3, 4), "<f4", False),
    "b": ((5,), ">f8", False),
    "idx": ((2, 3, 2), "<i8", True),
    "mask": ((7,), "|b1", False),
    "s": ((), "<i4", False),
    "e": ((0, 2), "<f2", False),
    "u": ((4,), "|u1", False),
}
NPZ_BIG = {   # compressed: long enough for dynamic Huffman blocks and back references
    "big": ((300, 70), "<f4", False),
    "ramp": ((5000,), "<i8", False),
    "ones": ((64, 64), "<f8", False),
}
NOISE_SEED, NOISE_N = 5, 20000   # uint8 noise that zlib stores uncompressed: RandomState(5).randint(0, 256, 20000)
ST_NAMES = {"BOOL": "|b1", "I8": "|i1", "U8": "|u1", "I16": "<i2", "U16": "<u2", "I32": "<i4", "U32": "<u4",
            "I64": "<i8", "U64": "<u8", "F16": "<f2", "F32": "<f4", "F64": "<f8"}
ST_CODES = {v: k for k, v in ST_NAMES.items()}


def st_write(path, tensors, metadata=None, raw_dtype=None):
    """tensors: name -> array (C order, little-endian); raw_dtype overrides one dtype string."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        code = (raw_dtype or {}).get(name) or ST_CODES[a.dtype.str]
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + end], dtype=ST_NAMES[e["dtype"]]).reshape(e["shape"])
    return out, meta


def arrays(spec):
    out = {}
    for name, (shape, dt, fortran) in spec.items():
        a = values(shape, dt.replace(">", "<")).astype(dt)
        out[name] = np.asfortranarray(a) if fortran else a
    return out


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
        for dt in ("|i1", "|u1", "<i2", ">u2", "<u4", ">u8"):   # ints the library widens
            np.save("%s/w_%s.npy" % (d, dt[1:]), values((2, 3), dt.replace(">", "<")).astype(dt))
        np.save(d + "/u8_big.npy", np.array([1, 2**63], np.uint64))
        np.save(d + "/struct.npy", np.zeros(2, [("a", "<f4"), ("b", "<i4")]))
        np.save(d + "/obj.npy", np.array([None, 1], dtype=object), allow_pickle=True)
        np.savez(d + "/plain.npz", **arrays(NPZ))
        np.savez_compressed(d + "/small_z.npz", **arrays(NPZ))
        noise = np.random.RandomState(NOISE_SEED).randint(0, 256, NOISE_N).astype(np.uint8)
        np.savez_compressed(d + "/big_z.npz", noise=noise, **arrays(NPZ_BIG))
        st = {"c" + k: values((2, 3), v) for k, v in ST_NAMES.items()}
        st["scalar"] = values((), "<f8")
        st["empty"] = values((0, 4), "<f4")
        st_write(d + "/all.safetensors", st, metadata={"format": "pt", "note": "written by hand"})
        st_write(d + "/bf16.safetensors", {"x": np.zeros(3, np.uint16)}, raw_dtype={"x": "BF16"})
        print("wrote", len(WRITES) + 17, "files")
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
        for name, (shape, dt) in want.items():   # byte for byte what np.save writes
            a = np.load("%s/%s.npy" % (d, name))
            ours = open("%s/%s.npy" % (d, name), "rb").read()
            path = "%s/%s_np.npy" % (d, name)
            np.save(path, a)
            if ours != open(path, "rb").read():
                bad += 1
                print("BYTES DIFFER", name, ours[:80])
        z = np.load(d + "/c.npz")
        zwant = {"w": ((3, 4), "<f4"), "scalar": ((), "<f8"), "flags": ((4,), "|b1"), "view": ((4, 3), "<f4"),
                 "empty": ((0, 3), "<f2")}
        for name, (shape, dt) in zwant.items():
            a = z[name]
            if a.shape != shape or a.dtype != np.dtype(dt) or not np.array_equal(a, values(shape, dt)):
                bad += 1
                print("NPZ MISMATCH", name, a.dtype, a.shape, a.ravel()[:6])
        if sorted(z.files) != sorted(zwant):
            bad += 1
            print("NPZ MEMBERS", z.files)
        t, meta = st_read(d + "/c.safetensors")
        if meta != {"source": "tensor.h", "q": "a \"quoted\" value"}:
            bad += 1
            print("ST METADATA", meta)
        for name, a in t.items():
            if name not in zwant or a.shape != zwant[name][0] or a.dtype != np.dtype(zwant[name][1]) \
                    or not np.array_equal(a, values(*zwant[name])):
                bad += 1
                print("ST MISMATCH", name, a.dtype, a.shape)
        if sorted(t) != sorted(zwant):
            bad += 1
            print("ST TENSORS", sorted(t))
        print("checked %d files written by the library, %d mismatched" % (len(want) + 2, bad))
        sys.exit(1 if bad else 0)
