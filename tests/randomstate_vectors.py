#!/usr/bin/env python3
"""Writes tests/randomstate_vectors.h: NumPy's legacy RandomState draws (rand,
randn, uniform, normal, randint for int64 and int32 ranges, seeds given as
ints and as arrays, and one state drawn from by a sequence of calls), first
values and values far into the stream, for tests/test_randomstate.c.

Made with NumPy 1.24.2 (Debian bookworm's python3-numpy):
    /usr/bin/python3 tests/randomstate_vectors.py > tests/randomstate_vectors.h
Floats are written as C hex literals (exact).
"""
import numpy as np

print("/* tests/randomstate_vectors.h - written by tests/randomstate_vectors.py with NumPy %s; do not edit. */"
      % np.__version__)
print("#include <stdint.h>\n")
print("""typedef struct rs_case {
    const char *what;       /* the NumPy call */
    int nkey;               /* 0: RandomState(key[0]); else RandomState(key[:nkey]) */
    uint32_t key[4];
    char kind;              /* r rand, n randn, u uniform, g normal, i randint int64, j randint int32 */
    double p0, p1;          /* uniform low, high; normal loc, scale */
    int64_t lo, hi;         /* randint [lo, hi) */
    int64_t n;              /* elements drawn */
    int nchk;
    int64_t at[10];         /* checked indices */
    double f[10];           /* float results there */
    int64_t i[10];          /* int results there */
} rs_case;
""")


def flit(x):
    return float(x).hex()


def ilit(x):
    x = int(x)
    if x == -2**63:
        return "INT64_MIN"
    return str(x) + "LL"


def indices(n):
    first = list(range(min(n, 6)))
    far = [n // 2 + 1, n - 3, n - 2, n - 1] if n > 6 else []
    return first + [i for i in far if i not in first]


cases = []


def case(seed, kind, n, p=(0.0, 0.0), lohi=(0, 0)):
    rs = np.random.RandomState(seed)
    if kind == "r":
        v, call = rs.rand(n), "rand(%d)" % n
    elif kind == "n":
        v, call = rs.randn(n), "randn(%d)" % n
    elif kind == "u":
        v, call = rs.uniform(p[0], p[1], n), "uniform(%r, %r, %d)" % (p[0], p[1], n)
    elif kind == "g":
        v, call = rs.normal(p[0], p[1], n), "normal(%r, %r, %d)" % (p[0], p[1], n)
    elif kind == "i":
        v, call = rs.randint(lohi[0], lohi[1], n, dtype=np.int64), "randint(%d, %d, %d)" % (lohi[0], lohi[1], n)
    elif kind == "j":
        v, call = rs.randint(lohi[0], lohi[1], n, dtype=np.int32), "randint(%d, %d, %d, int32)" % (lohi[0], lohi[1], n)
    key = [seed] if isinstance(seed, int) else list(seed)
    at = indices(n)
    is_int = kind in "ij"
    cases.append("    { \"RandomState(%s).%s\", %d, { %s }, '%s', %s, %s, %s, %s, %d, %d,\n      { %s },\n      { %s },\n      { %s } }" % (
        seed, call, 0 if isinstance(seed, int) else len(key), ", ".join("%du" % k for k in key), kind,
        flit(p[0]), flit(p[1]), ilit(lohi[0]), ilit(lohi[1]), n, len(at),
        ", ".join(str(i) for i in at),
        ", ".join("0.0" if is_int else flit(v[i]) for i in at),
        ", ".join(ilit(v[i]) if is_int else "0" for i in at)))


for seed in (0, 1, 22, 123, 5489, 2**32 - 1, [1, 2, 3], [0x123, 0x234, 0x345, 0x456]):
    case(seed, "r", 1000003)
    case(seed, "n", 100001)
for seed in (0, 22, 123):
    case(seed, "n", 100000)
    case(seed, "u", 50001, (-3.0, 5.5))
    case(seed, "g", 9, (2.0, 0.25))
    case(seed, "i", 100001, lohi=(0, 2))
    case(seed, "i", 10001, lohi=(-5, 7))
    case(seed, "i", 10001, lohi=(0, 2**32))
    case(seed, "i", 10001, lohi=(-7, 2**33 + 5))
    case(seed, "i", 10001, lohi=(-2**63, 2**63 - 1))
    case(seed, "i", 10, lohi=(42, 43))
    case(seed, "j", 10001, lohi=(-2**31, 2**31 - 1))
    case(seed, "j", 10001, lohi=(-100, 1000))
print("static const rs_case rs_cases[] = {\n%s,\n};\n" % ",\n".join(cases))

# One state, a sequence of calls: the gaussian's cached second value carries over.
rs = np.random.RandomState(7)
seq = [("r", 3, rs.rand(3)), ("n", 3, rs.randn(3)), ("n", 2, rs.randn(2)), ("i", 5, rs.randint(0, 10, 5)),
       ("n", 1, rs.randn(1)), ("u", 2, rs.uniform(-1, 1, 2)), ("n", 1, rs.randn(1)), ("i", 3, rs.randint(0, 2**40, 3)),
       ("r", 2, rs.rand(2))]
print("/* RandomState(7): rand(3), randn(3), randn(2), randint(0, 10, 5), randn(1), uniform(-1, 1, 2), randn(1),\n"
      "   randint(0, 2**40, 3), rand(2), in that order on one state */")
print("static const struct { char kind; int n; double v[5]; } rs_seq[] = {\n%s,\n};\n" % ",\n".join(
    "    { '%s', %d, { %s } }" % (k, n, ", ".join(flit(x) for x in v)) for k, n, v in seq))

# The seed's check1: exp(RandomState(22).rand(230400).astype(float32)) in float32.
x = np.random.RandomState(22).rand(230400).astype(np.float32)
e = np.exp(x)
print("/* RandomState(22).rand(230400).astype(float32), and numpy.exp of it (float32) */")
print("static const float rs_check1_x[6] = { %s };" % ", ".join(flit(v) + "f" for v in np.concatenate([x[:3], x[-3:]])))
print("static const float rs_check1_exp[6] = { %s };" % ", ".join(flit(v) + "f" for v in np.concatenate([e[:3], e[-3:]])))
