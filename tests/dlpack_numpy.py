#!/bin/sh
# Run by sh first, which hands the file to Debian's Python (a missing one is a skip, as a missing NumPy):
""":"
[ -x /usr/bin/python3 ] || { echo "SKIP (no /usr/bin/python3: apt-get install python3-numpy)"; exit 0; }
exec /usr/bin/python3 "$0" "$@"
":"""
"""DLPack with a real peer: tensor.h and NumPy trade arrays both ways without a
copy (make test runs this; tests/test_dlpack.c checks the C side alone).
The library comes in through ctypes from tests/dlpack_peer.c, built as
$TN_DLPACK_PEER (make test sets it; default build/libdlpack_peer.so).

  tensor.h -> NumPy: arrays the library made, of every dtype, contiguous, a
  transposed strided slice (a byte offset), broadcast and 0-d, are exported by
  tn_array_to_dlpack_unversioned in a PyCapsule "dltensor" whose destructor
  calls the deleter only when no consumer took it (renamed "used_dltensor"),
  as DLPack's Python specification says; np.from_dlpack takes them through
  __dlpack__. NumPy's array has the values, dtype, shape and strides, the
  library's memory (a write through the library shows in NumPy, and one
  through NumPy where its array is writable shows in the library), outlives
  the library's array, and its release calls the deleter once.
  NumPy -> tensor.h: ndarray.__dlpack__() capsules go to
  tn_array_from_dlpack_unversioned (the capsule renamed "used_dltensor");
  the library reads the values in place and sums them in a compiled function,
  NumPy's array stays alive while the library holds it and is let go when the
  library's array is freed; dtypes the library lacks are refused by code and
  words, and the capsule's owner frees them.
  NumPy before 1.25 has no DLPack bool: there NumPy's refusal of a bool tensor
  is checked (the capsule, not consumed, deletes it).
  NumPy >= 2.1 speaks DLPack 1.x as well ("dltensor_versioned"): then both
  directions run again with tn_array_to_dlpack and tn_array_from_dlpack.
Prints "N passed, N failed" like the tests; without NumPy one SKIP line."""
import ctypes
import os
import sys
import weakref

try:
    import numpy as np
except ImportError:
    print("SKIP (no NumPy for /usr/bin/python3: apt-get install python3-numpy)")
    sys.exit(0)
sys.dont_write_bytecode = True   # no __pycache__ in tests/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from npy_roundtrip import values   # noqa: E402 (v(i) of tests/test_files.c's round trips)

passed = failed = 0
bad = None   # failed checks of the case open; None: none open


def case(last=False):
    """Ends the case open (a test, which passes when all its checks do) and, unless last, opens the next."""
    global passed, failed, bad
    if bad is not None:
        passed, failed = passed + (bad == 0), failed + (bad > 0)
    bad = None if last else 0


def check(ok, what):
    global bad
    if not ok:
        bad += 1
        print("FAIL " + what)


# DLPack's structs (dlpack.h), enough to read a tensor and call its deleter.
class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor)))]


class DLManagedTensorVersioned(ctypes.Structure):
    pass


DLManagedTensorVersioned._fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                                     ("manager_ctx", ctypes.c_void_p),
                                     ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensorVersioned))),
                                     ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


class TnArray(ctypes.Structure):   # tensor.h's tn_array
    _fields_ = [("dtype", ctypes.c_int), ("ndim", ctypes.c_int), ("shape", ctypes.c_int64 * 8),
                ("strides", ctypes.c_int64 * 8), ("data", ctypes.c_void_p), ("device", ctypes.c_int),
                ("base", ctypes.c_void_p), ("live_gen", ctypes.c_void_p), ("gen", ctypes.c_uint64)]


root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# PyDLL keeps the GIL in every call: freeing an imported array runs NumPy's deleter, which releases a Python object.
lib = ctypes.PyDLL(os.environ.get("TN_DLPACK_PEER") or os.path.join(root, "build", "libdlpack_peer.so"))
P = ctypes.POINTER(TnArray)
for name, res, args in [
        ("peer_array_size", ctypes.c_size_t, []), ("peer_arange", P, [ctypes.c_int, ctypes.c_double, ctypes.c_int,
                                                                      ctypes.POINTER(ctypes.c_int64)]),
        ("peer_sum", ctypes.c_double, [P]), ("peer_deletes", ctypes.c_int, []),
        ("peer_export", ctypes.c_void_p, [P, ctypes.c_int]),
        ("tn_array_from_dlpack_unversioned", P, [ctypes.c_void_p]), ("tn_array_from_dlpack", P, [ctypes.c_void_p]),
        ("tn_array_transpose", P, [P, ctypes.c_void_p]),
        ("tn_array_slice", P, [P, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]),
        ("tn_array_broadcast_to", P, [P, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]),
        ("tn_array_scalar", P, [ctypes.c_int, ctypes.c_double]), ("tn_array_free", None, [P]),
        ("tn_array_get", ctypes.c_double, [P, ctypes.POINTER(ctypes.c_int64)]),
        ("tn_array_set", ctypes.c_int, [P, ctypes.POINTER(ctypes.c_int64), ctypes.c_double]),
        ("tn_array_copy_to", ctypes.c_int, [P, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]),
        ("tn_dtype_from_name", ctypes.c_int, [ctypes.c_char_p]),
        ("tn_last_error", ctypes.c_char_p, []), ("tn_last_result", ctypes.c_int, []),
        ("tn_result_string", ctypes.c_char_p, [ctypes.c_int])]:
    getattr(lib, name).restype, getattr(lib, name).argtypes = res, args
case()
check(lib.peer_array_size() == ctypes.sizeof(TnArray), "tn_array's layout: %d bytes here, %d in C"
      % (ctypes.sizeof(TnArray), lib.peer_array_size()))
TN_F64 = lib.tn_dtype_from_name(b"float64")
TN_ERR_DTYPE = 4   # tn_result's order
check(lib.tn_result_string(TN_ERR_DTYPE) == b"TN_ERR_DTYPE", "TN_ERR_DTYPE is 4: %r" % lib.tn_result_string(TN_ERR_DTYPE))


def shape_arg(shape):
    return (ctypes.c_int64 * max(1, len(shape)))(*shape)


def tn_layout(a):
    """A tn_array's dtype (tensor.h's enum), shape, byte strides and first element's address."""
    t = a.contents
    return t.dtype, tuple(t.shape[:t.ndim]), tuple(t.strides[:t.ndim]), t.data


def tn_values(a):
    """a's elements in C order, as float64, read by the library."""
    t = a.contents
    out = np.empty(tuple(t.shape[:t.ndim]), np.float64)
    rc = lib.tn_array_copy_to(a, TN_F64, out.ctypes.data, out.nbytes)
    return out if rc == 0 else None


def address(x):
    return x.__array_interface__["data"][0]


# The capsule API of the running Python.
api = ctypes.pythonapi
DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
api.PyCapsule_New.restype, api.PyCapsule_New.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, DESTRUCTOR]
# The destructor gets the capsule as it dies: a plain address, so that no reference is taken.
api.PyCapsule_IsValid.restype, api.PyCapsule_IsValid.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]
api.PyCapsule_GetPointer.restype, api.PyCapsule_GetPointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.restype, api.PyCapsule_SetName.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_GetName.restype, api.PyCapsule_GetName.argtypes = ctypes.c_char_p, [ctypes.py_object]
get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", api))

# Capsule names (PyCapsule keeps the pointer: these bytes live as long as the module).
NAMES = {False: (b"dltensor", b"used_dltensor", DLManagedTensor),
         True: (b"dltensor_versioned", b"used_dltensor_versioned", DLManagedTensorVersioned)}


def make_destructor(versioned):
    name, used, struct = NAMES[versioned]

    def destructor(capsule):
        """DLPack's Python specification: a consumed (renamed) capsule is the consumer's; else call the deleter."""
        if api.PyCapsule_IsValid(capsule, used):
            return
        p = get_pointer(capsule, name)
        if p:
            mt = ctypes.cast(p, ctypes.POINTER(struct))
            if mt.contents.deleter:
                mt.contents.deleter(mt)
    return DESTRUCTOR(destructor)


DESTRUCTORS = {False: make_destructor(False), True: make_destructor(True)}   # kept alive: C holds their addresses


class Exported:
    """A tensor.h array behind the DLPack protocol, as a producer library offers one: a
    versioned tensor to a consumer that asks for one (max_version 1.x), unless legacy_only."""

    def __init__(self, a, legacy_only=False):
        self.a, self.legacy_only, self.taken = a, legacy_only, None

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        versioned = not self.legacy_only and max_version is not None and max_version[0] >= 1
        p = lib.peer_export(self.a, int(versioned))
        if not p:
            raise BufferError(lib.tn_last_error().decode())
        self.taken = "versioned" if versioned else "legacy"
        # Held here too, so that a refusing consumer's release of it happens outside NumPy's error path.
        self.capsule = api.PyCapsule_New(p, NAMES[versioned][0], DESTRUCTORS[versioned])
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)   # kDLCPU


NP_VERSION = tuple(int(p) for p in np.__version__.split(".")[:2])
NP_VERSIONED = NP_VERSION >= (2, 1)
probe = np.ones(1, np.bool_)
try:
    probe.__dlpack__()
    NP_BOOL = True
except BufferError:   # NumPy < 1.25: DLPack without bool, either way
    NP_BOOL = False
DTYPES = ["bool", "int32", "int64", "float16", "float32", "float64"]


def tn_arrays(dt):
    """(name, tn_array, the same values made by NumPy, arrays to free after)."""
    t = lib.tn_dtype_from_name(dt.encode())
    a = lib.peer_arange(t, -5, 2, shape_arg((5, 6)))
    want = np.arange(-5, 25, dtype=np.float64).reshape(5, 6).astype(dt)
    m = lib.peer_arange(t, -5, 2, shape_arg((5, 6)))   # its own memory: the checks write to a
    tr = lib.tn_array_transpose(m, None)
    v = lib.tn_array_slice(tr, 0, 1, 6, 2)   # (3, 5), strides (16, 48) for 8 bytes, a byte offset
    row = lib.peer_arange(t, 1, 1, shape_arg((6,)))
    b = lib.tn_array_broadcast_to(row, 2, shape_arg((4, 6)))
    s = lib.tn_array_scalar(t, 3)
    return [("contiguous", a, want, []), ("transposed slice", v, want.T[1:6:2], [tr, m]),
            ("broadcast", b, np.broadcast_to(np.arange(1, 7, dtype=np.float64).astype(dt), (4, 6)), [row]),
            ("0-d", s, np.array(3, dt), [])]


def to_numpy(versioned):
    kind = "versioned" if versioned else "legacy"
    for dt in DTYPES:
        for what, a, want, extra in tn_arrays(dt):
            label = "%s %s %s" % (kind, dt, what)
            case()
            check(bool(a), "%s: made: %s" % (label, lib.tn_last_error()))
            if not a:
                continue
            tdt, shape, strides, data = tn_layout(a)
            before = lib.peer_deletes()
            obj = Exported(a, legacy_only=not versioned)
            if dt == "bool" and not NP_BOOL:
                try:
                    np.from_dlpack(obj)
                    check(False, "%s: NumPy %s took a bool tensor" % (label, np.__version__))
                except (BufferError, RuntimeError, TypeError):
                    check(obj.taken is not None, "%s: NumPy asked for it" % label)
                del obj   # the capsule, not consumed, calls the deleter
                check(lib.peer_deletes() == before + 1, "%s: refused by NumPy %s, the capsule's destructor deleted it once"
                      % (label, np.__version__))
                for x in [a] + extra:
                    lib.tn_array_free(x)
                continue
            y = np.from_dlpack(obj)
            check(obj.taken == kind, "%s: NumPy took the %s tensor" % (label, obj.taken))
            check(api.PyCapsule_GetName(obj.capsule) == NAMES[versioned][1], "%s: NumPy renamed the capsule" % label)
            del obj
            check(y.dtype == np.dtype(dt) and y.shape == shape and y.strides == strides,
                  "%s: dtype, shape, strides %s %s %s, want %s %s %s"
                  % (label, y.dtype, y.shape, y.strides, dt, shape, strides))
            check(address(y) == data, "%s: NumPy reads the library's memory" % label)
            check(np.array_equal(y, want), "%s: values %s, want %s" % (label, y.ravel()[:6], want.ravel()[:6]))
            idx = (ctypes.c_int64 * 2)(0, 1)
            if y.ndim == 2 and what != "broadcast":
                lib.tn_array_set(a, idx, 0)
                check(y[0, 1] == 0, "%s: a write through the library shows in NumPy" % label)
                if y.flags.writeable:
                    y[0, 1] = 1
                    check(lib.tn_array_get(a, idx) == 1, "%s: a write through NumPy shows in the library" % label)
            for x in [a] + extra:
                lib.tn_array_free(x)
            check(lib.peer_deletes() == before and np.array_equal(y.ravel()[2:], want.ravel()[2:]),
                  "%s: NumPy's array outlives the library's" % label)
            del y
            check(lib.peer_deletes() == before + 1,
                  "%s: deleted once with NumPy's array (%d)" % (label, lib.peer_deletes() - before))


def from_numpy(versioned):
    kind = "versioned" if versioned else "legacy"
    name, used, _ = NAMES[versioned]
    imp = lib.tn_array_from_dlpack if versioned else lib.tn_array_from_dlpack_unversioned
    for dt in [d for d in DTYPES if d != "bool" or NP_BOOL]:
        # made afresh each: NumPy's array (and its base) must have no other owner here
        for what, make in [("contiguous", lambda: values((4, 6), dt)),
                           ("transposed", lambda: values((4, 6), dt).T),
                           ("strided slice", lambda: values((4, 6), dt)[1::2, ::-3]),
                           ("0-d", lambda: values((), dt))]:
            label = "%s %s %s from NumPy" % (kind, dt, what)
            case()
            x = make()
            want = x.astype(np.float64)
            capsule = x.__dlpack__(max_version=(1, 0)) if versioned else x.__dlpack__()
            a = imp(api.PyCapsule_GetPointer(capsule, name))
            check(bool(a), "%s: imported: %s" % (label, lib.tn_last_error()))
            if not a:
                continue
            api.PyCapsule_SetName(capsule, used)   # consumed: the library owns the tensor now
            del capsule
            tdt, shape, strides, data = tn_layout(a)
            check(tdt == lib.tn_dtype_from_name(dt.encode()) and shape == x.shape and strides == x.strides,
                  "%s: dtype, shape, strides %d %s %s, want %s %s %s"
                  % (label, tdt, shape, strides, dt, x.shape, x.strides))
            check(data == address(x), "%s: the library reads NumPy's memory" % label)
            got = tn_values(a)
            check(got is not None and np.array_equal(got, want), "%s: values %s, want %s" % (label, got, want))
            s = lib.peer_sum(a)
            check(s == float(want.sum()),
                  "%s: the library's sum %r, NumPy's %r (%s)" % (label, s, float(want.sum()), lib.tn_last_error()))
            if x.ndim == 2:
                x[0, 1] = 1
                check(lib.tn_array_get(a, (ctypes.c_int64 * 2)(0, 1)) == 1,
                      "%s: a write through NumPy shows in the library" % label)
            alive = weakref.ref(x)
            del x
            check(alive() is not None, "%s: NumPy's array lives while the library holds it" % label)
            lib.tn_array_free(a)
            check(alive() is None, "%s: freeing the library's array let NumPy's go" % label)

    # A dtype the library lacks: refused by code and words, the capsule left to NumPy (it deletes it).
    case()
    fn = "tn_array_from_dlpack" if versioned else "tn_array_from_dlpack_unversioned"
    x = np.arange(6, dtype=np.uint8)
    alive = weakref.ref(x)
    capsule = x.__dlpack__(max_version=(1, 0)) if versioned else x.__dlpack__()
    a = imp(api.PyCapsule_GetPointer(capsule, name))
    err = lib.tn_last_error().decode()
    check(not a and lib.tn_last_result() == TN_ERR_DTYPE and err.startswith(fn + ": ")
          and "DLPack dtype uint8 (code 1, bits 8, lanes 1) has no dtype here" in err, "%s uint8: refused: %s" % (kind, err))
    check(api.PyCapsule_GetName(capsule) == name, "%s uint8: the capsule is not consumed" % kind)
    del x, capsule
    check(alive() is None, "%s uint8: NumPy deleted its own tensor" % kind)


to_numpy(False)
from_numpy(False)
# A capsule nobody takes: its destructor calls the deleter, once.
case()
t = lib.peer_arange(lib.tn_dtype_from_name(b"float32"), 0, 1, shape_arg((3,)))
before = lib.peer_deletes()
Exported(t, legacy_only=True).__dlpack__()
check(lib.peer_deletes() == before + 1,
      "a capsule never consumed: the deleter ran %d times" % (lib.peer_deletes() - before))
lib.tn_array_free(t)
if NP_VERSIONED:
    to_numpy(True)
    from_numpy(True)
else:
    print("NumPy %s has no versioned DLPack (2.1 has): the legacy path only" % np.__version__)
case(last=True)
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
