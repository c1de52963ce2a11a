/* tests/test_vmath.c - the vector math of the CPU kernels (tensor_ops.h
   >>vmath): exp, expm1, log, log1p, tanh, sigmoid, softplus, erf, sin,
   cos and sqrt in float32 and float64, run by the CPU engine (a
   one-instruction program) at every instruction set level this CPU has.
   float32 against libm in double, float64 against libm in long double
   (x86-64's 80-bit format: 11 more bits; elsewhere the sweep of float64 is
   skipped). A strided sweep of the bit patterns (float32: every 521st;
   float64: about a million spread over all 2^64) and the edge regions
   densely (thresholds of overflow and underflow, around 0, 1 and -1,
   subnormals, the switch points of the formulas, sin's and cos's switch to
   libm, the values nearest k pi/2); at the levels below the best a sixteenth as many patterns and a
   tenth as dense: at most 4 ulp of the reference. The special values (NaN,
   +-inf, +-0, subnormals, the largest finite) bit for bit as libm's
   functions of the same type give them, the sign of zero included. Prints
   each function's worst error (README's "Numerics" table quotes them).
   TN_VMATH_SPARSE=k sweeps a k-th as many patterns, k times further apart,
   and the edge regions a k-th as densely (make sanitize: 16; the specials
   stay whole). The one-operation rows (add, mul, min, ...) built again for
   AVX2 and AVX-512: at every level the same bits as the SSE2 build. Every
   function run in place gives the bits of a run into another buffer. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
#include <float.h>
#include <stdint.h>

#define MAX_ULP 4.0

typedef struct vfn {
    int op; const char *name;
    double (*ref)(double); float (*lib)(float);                 /* float32: reference, libm */
    long double (*refl)(long double); double (*libd)(double);   /* float64 */
    double libm_above;          /* |x| past this is libm's own work: the sweep keeps every 64th */
} vfn;

static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double ref_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static float lib_sigmoid(float x) { return (float)ref_sigmoid(x); }
static float lib_softplus(float x) { return (float)ref_softplus(x); }
static long double refl_sigmoid(long double x) { return 1 / (1 + expl(-x)); }
static long double refl_softplus(long double x) { return x > 0 ? x + log1pl(expl(-x)) : log1pl(expl(x)); }
static double libd_sigmoid(double x) { return (double)refl_sigmoid(x); }
static double libd_softplus(double x) { return (double)refl_softplus(x); }

static const vfn fns[] = {
    { TN_OP_EXP, "exp", exp, expf, expl, exp, 0 },
    { TN_OP_EXPM1, "expm1", expm1, expm1f, expm1l, expm1, 0 },
    { TN_OP_LOG, "log", log, logf, logl, log, 0 },
    { TN_OP_LOG1P, "log1p", log1p, log1pf, log1pl, log1p, 0 },
    { TN_OP_TANH, "tanh", tanh, tanhf, tanhl, tanh, 0 },
    { TN_OP_SIGMOID, "sigmoid", ref_sigmoid, lib_sigmoid, refl_sigmoid, libd_sigmoid, 0 },
    { TN_OP_SOFTPLUS, "softplus", ref_softplus, lib_softplus, refl_softplus, libd_softplus, 0 },
    { TN_OP_ERF, "erf", erf, erff, erfl, erf, 0 },
    { TN_OP_SIN, "sin", sin, sinf, sinl, sin, 1e9 },
    { TN_OP_COS, "cos", cos, cosf, cosl, cos, 1e9 },
    { TN_OP_SQRT, "sqrt", sqrt, sqrtf, sqrtl, sqrt, 0 },
};
#define NFNS ((int)(sizeof fns / sizeof fns[0]))

/* What differs between float32 and float64: the spacing of values (2^(k -
   mant) in [2^k, 2^k+1), 2^emin at the least; inf counts as the next power
   of two past the largest finite, 2^emax). */
typedef struct vtype { tn_dtype dt; const char *name; int size, mant, emin, emax; } vtype;
static const vtype F32 = { TN_F32, "float32", 4, 23, -149, 128 }, F64 = { TN_F64, "float64", 8, 52, -1074, 1024 };

static long double get(const vtype *t, const void *p, int64_t i) {
    return t->dt == TN_F32 ? (long double)((const float *)p)[i] : (long double)((const double *)p)[i];
}
static void put(const vtype *t, void *p, int64_t i, long double v) {
    if (t->dt == TN_F32) ((float *)p)[i] = (float)v;
    else ((double *)p)[i] = (double)v;
}
static void put_bits(const vtype *t, void *p, int64_t i, uint64_t u) {
    memcpy((char *)p + i * t->size, &u, (size_t)t->size);       /* little-endian: the low bytes */
}
static uint64_t bits_of(const vtype *t, const void *p, int64_t i) {
    uint64_t u = 0;
    memcpy(&u, (const char *)p + i * t->size, (size_t)t->size);
    return u;
}
static long double ref_of(const vtype *t, int f, long double x) {
    return t->dt == TN_F32 ? (long double)fns[f].ref((double)x) : fns[f].refl(x);
}
static long double lib_of(const vtype *t, int f, long double x) {
    return t->dt == TN_F32 ? (long double)fns[f].lib((float)x) : (long double)fns[f].libd((double)x);
}

/* Runs op over n values of type t through the CPU engine. */
static bool run_op(const vtype *t, int op, int64_t n, void *in, void *out) {
    tn_array *a = tn_array_wrap(t->dt, 1, &n, NULL, in), *o = tn_array_wrap(t->dt, 1, &n, NULL, out);
    tn_dtype idt = t->dt, odt = t->dt;
    tn_ew_instr ins;
    memset(&ins, 0, sizeof ins);
    ins.op = (int16_t)op; ins.dtype = t->dt; ins.in_dtype = t->dt; ins.a = 0; ins.b = -1; ins.c = -1;
    int32_t oreg = 1;
    tn_ew_program p = { 1, &idt, 1, &ins, 1, &oreg, &odt, NULL, NULL };
    tn_result r = a && o ? tn__cpu_ew_run(&p, &a, &o) : TN_ERR_OOM;
    tn_array_free(a);
    tn_array_free(o);
    return r == TN_OK;
}

/* |got - want| in units of float32's spacing at want, in double (the
   sweep's hot loop; long double arithmetic is several times slower). */
static double ulps32(float got, double want) {
    const double top = 340282366920938463463374607431768211456.0;    /* 2^128 */
    if (isnan(want)) return isnan(got) ? 0 : INFINITY;
    if (isnan(got)) return INFINITY;
    double g = isinf(got) ? copysign(top, got) : (double)got, w = fabs(want) > top ? copysign(top, want) : want;
    uint64_t b;
    memcpy(&b, &w, 8);
    int e = (int)((b >> 52) & 0x7ff) - 1023 - 23;       /* w in [2^k, 2^k+1): spacing 2^(k-23) */
    e = e < -149 ? -149 : e;
    b = (uint64_t)(e + 1023) << 52;
    double ulp;
    memcpy(&ulp, &b, 8);
    return fabs(g - w) / ulp;
}

/* |got - want| in units of t's spacing at want. */
static double ulps(const vtype *t, long double got, long double want) {
    if (t->dt == TN_F32) return ulps32((float)got, (double)want);
    if (isnan(want)) return isnan(got) ? 0 : INFINITY;
    if (isnan(got)) return INFINITY;
    long double top = ldexpl(1.0L, t->emax);
    long double g = isinf(got) ? copysignl(top, got) : got, w = fabsl(want) > top ? copysignl(top, want) : want;
    int e;
    frexpl(w, &e);                                      /* w in [2^(e-1), 2^e) */
    return (double)(fabsl(g - w) / ldexpl(1.0L, e - 1 - t->mant < t->emin ? t->emin : e - 1 - t->mant));
}

/* The inputs: `count` bit patterns `stride` apart, then each edge region
   densely. */
static int64_t fill_inputs(const vtype *t, void *x, int64_t cap, uint64_t stride, int64_t count, int dense) {
    int64_t n = 0;
    for (uint64_t u = 0; n < count && n < cap; u += stride) put_bits(t, x, n++, u);
    static const double edges[][2] = {
        { 88.0, 89.5 }, { -89.0, -86.0 }, { -104.5, -102.5 }, { -31.0, -15.0 },     /* float32's exp and expm1 limits */
        { 709.0, 710.5 }, { -746.0, -744.0 }, { -709.0, -707.0 }, { -41.0, -35.0 }, /* float64's */
        { -1e-3, 1e-3 }, { 0.6, 0.65 }, { -0.65, -0.6 }, { 8.0, 10.0 }, { -10.0, -8.0 }, { 18.0, 20.0 },
        { 0.5, 2.0 }, { -1.0, -0.99 }, { 0.3, 0.4 }, { -0.4, -0.3 }, { -0.36, -0.33 }, { 0.33, 0.36 },
        { 1.2, 1.3 }, { 3.9, 4.1 }, { -4.1, -3.9 }, { 0.7, 0.9 }, { 3.0, 3.3 }, { 6.2, 6.4 },     /* erf's, sin's and cos's */
        { 0.95, 1.05 }, { 5.8, 6.1 }, { -6.1, -5.8 },
        { 1e5, 1.001e5 }, { -1.001e5, -1e5 }, { 4.0260e8, 4.0270e8 }, { -4.0270e8, -4.0260e8 },
        { 1048000.0, 1049000.0 }, { -1049000.0, -1048000.0 },
    };
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) {
        double lo = edges[k][0], hi = edges[k][1];
        for (int i = 0; i < dense && n < cap; i++) put(t, x, n++, lo + (hi - lo) * (double)i / dense);
    }
    /* the values of t nearest k pi/2 and their neighbours, where sin's or
       cos's reduction cancels most (k to 2^20 in steps that grow) */
    const long double pio2 = 1.570796326794896619231321691639751442L;
    for (double k = 1; k < 1048576.0 && n + 3 < cap; k = k < 4096 ? k + 1 : floor(k * 1.001)) {
        put(t, x, n, k * pio2);
        uint64_t u = bits_of(t, x, n++);
        put_bits(t, x, n++, u + 1); put_bits(t, x, n++, u - 1); put(t, x, n++, -k * pio2);
    }
    /* subnormals and the smallest normals; then 2^-25 .. 2^-11 (float32), 2^-60 .. 2^-20 (float64) */
    uint64_t sign = (uint64_t)1 << (8 * t->size - 1), mbit = (uint64_t)1 << t->mant;
    uint64_t lo2 = (uint64_t)(t->dt == TN_F32 ? 127 - 25 : 1023 - 60) << t->mant;
    uint64_t hi2 = (uint64_t)(t->dt == TN_F32 ? 127 - 11 : 1023 - 20) << t->mant;
    for (uint64_t u = 0, step = (mbit + mbit / 8) / (uint64_t)dense * 4; u < mbit + mbit / 8 && n + 1 < cap; u += step) {
        put_bits(t, x, n++, u); put_bits(t, x, n++, u | sign);
    }
    for (uint64_t u = lo2, step = (hi2 - lo2) / (uint64_t)dense * 4; u < hi2 && n + 1 < cap; u += step) {
        put_bits(t, x, n++, u); put_bits(t, x, n++, u | sign);
    }
    return n;
}

static void *xs, *ys;

static int64_t sparse(void) {
    const char *s = getenv("TN_VMATH_SPARSE");
    int64_t k = s ? atoll(s) : 1;
    return k < 1 ? 1 : k > 64 ? 64 : k;
}

/* The sweep of one type at every level; each function's worst error printed. */
static void sweep(const vtype *t, int64_t cap, uint64_t stride, int64_t count, int dense) {
    int best = tn__vm_level(-1);
    for (int f = 0; f < NFNS; f++) {
        double worst = 0;
        long double worst_x = 0;
        for (int level = best; level >= 0; level--) {
            CHECK(tn__vm_level(level) == level, "level %d", level);
            int64_t n = level == best ? fill_inputs(t, xs, cap, stride, count, dense)
                                      : fill_inputs(t, xs, cap, stride * 16, count / 16, dense / 10);
            if (fns[f].libm_above > 0) {
                int64_t m = 0;
                for (int64_t i = 0; i < n; i++)
                    if (!(fabsl(get(t, xs, i)) > fns[f].libm_above) || i % 64 == 0) put_bits(t, xs, m++, bits_of(t, xs, i));
                n = m;
            }
            CHECK(run_op(t, fns[f].op, n, xs, ys), "%s %s: %s", t->name, fns[f].name, tn_last_error());
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                long double x = get(t, xs, i), want;
                double e;
                if (t->dt == TN_F32) {
                    double w = fns[f].ref(((float *)xs)[i]);
                    e = ulps32(((float *)ys)[i], w);
                    want = w;
                } else {
                    want = fns[f].refl(x);
                    e = ulps(t, get(t, ys, i), want);
                }
                if (e > worst) { worst = e; worst_x = x; }
                if (!(e <= MAX_ULP) && bad++ < 5)
                    CHECK(0, "%s %s(%.17Lg) at level %d: %.17Lg, want %.21Lg (%.2f ulp)", t->name, fns[f].name, x, level,
                          get(t, ys, i), want, e);
            }
        }
        printf("%s %-9s max %.2f ulp (at %.17Lg)\n", t->name, fns[f].name, worst, worst_x);
    }
    tn__vm_level(-1);
}

TEST(test_sweep_f32) {
    const int64_t cap = 18000000;
    xs = malloc((size_t)cap * 8);
    ys = malloc((size_t)cap * 8);
    CHECK(xs && ys, "out of memory");
    if (!xs || !ys) return;
    int64_t k = sparse();
    sweep(&F32, cap, 521u * (uint64_t)k, (int64_t)(0x100000000u / 521u) / k + 1, (int)(100000 / k));
}

TEST(test_sweep_f64) {
    if (LDBL_MANT_DIG < 64) { TH_SKIP("long double has %d bits, no more than double", LDBL_MANT_DIG); return; }
    if (!xs || !ys) return;
    /* an odd stride near 2^64 / 2^20: every exponent, the mantissa bits stirred */
    int64_t k = sparse();
    sweep(&F64, 18000000, (((uint64_t)1 << 44) + 0x9e3779b97f4a7c15u % ((uint64_t)1 << 40)) * (uint64_t)k, ((int64_t)1 << 20) / k, (int)(20000 / k));
}

static const double specials[] = { NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, FLT_MIN, -FLT_MIN, 1e-45, -1e-45,
                                   FLT_MAX, -FLT_MAX, 1.0, -1.0, 88.7228394, 88.7228470, -103.972084, -103.972092,
                                   -87.3365479, 0.625, -0.625, DBL_MIN, -DBL_MIN, 4.9406564584124654e-324,
                                   -4.9406564584124654e-324, DBL_MAX, -DBL_MAX, 709.78271289338397, 709.78271289338409,
                                   -745.13321910194111, -745.13321910194122, -708.39641853226408, 1e-300, -1e-300, 3.14159274, 1.57079637, -1.57079637,
                                   402653184.0, 402653152.0, -402653184.0, 1e10, -1e30, 4.0, -4.0, 1.25, 3.92 };
#define NSPEC ((int64_t)(sizeof specials / sizeof specials[0]))

/* Special values bit for bit as libm's functions, at every level; the
   others within the bound. */
static void specials_of(const vtype *t) {
    int best = tn__vm_level(-1);
    double in[NSPEC], out[NSPEC];
    for (int level = 0; level <= best; level++) {
        tn__vm_level(level);
        for (int f = 0; f < NFNS; f++) {
            for (int64_t i = 0; i < NSPEC; i++) put(t, in, i, specials[i]);
            CHECK(run_op(t, fns[f].op, NSPEC, in, out), "%s %s: %s", t->name, fns[f].name, tn_last_error());
            for (int64_t i = 0; i < NSPEC; i++) {
                long double x = get(t, in, i), want = lib_of(t, f, x), got = get(t, out, i);
                bool special = isnan(want) || isinf(want) || want == 0 || isnan(x) || isinf(x) || x == 0;
                double wantv[1];
                put(t, wantv, 0, want);
                if (special)
                    CHECK(isnan(want) ? isnan(got) : bits_of(t, out, i) == bits_of(t, wantv, 0),
                          "%s %s(%.17Lg) at level %d: %.17Lg, libm %.17Lg", t->name, fns[f].name, x, level, got, want);
                else
                    CHECK(ulps(t, got, ref_of(t, f, x)) <= MAX_ULP, "%s %s(%.17Lg) at level %d: %.17Lg, want %.21Lg",
                          t->name, fns[f].name, x, level, got, ref_of(t, f, x));
            }
        }
    }
    tn__vm_level(-1);
}

TEST(test_specials) {
    specials_of(&F32);
    specials_of(&F64);
}

/* The one-operation rows built again for each level (tensor_ops.h, after
   the kernel table): at every level the bits of the SSE2 build (NaN as
   NaN), every pair of special values, 37 more than a multiple of 16 (the
   tail). */
static bool run_op3(const vtype *t, int op, int arity, int64_t n, void *const *in, void *out) {
    tn_array *a[3] = { NULL, NULL, NULL }, *o = tn_array_wrap(t->dt, 1, &n, NULL, out);
    tn_dtype dts[3] = { t->dt, t->dt, t->dt }, odt = t->dt;
    bool ok = o != NULL;
    for (int i = 0; i < arity; i++) ok = (a[i] = tn_array_wrap(t->dt, 1, &n, NULL, in[i])) != NULL && ok;
    tn_ew_instr ins;
    memset(&ins, 0, sizeof ins);
    ins.op = (int16_t)op; ins.dtype = t->dt; ins.in_dtype = t->dt;
    ins.a = 0; ins.b = arity > 1 ? 1 : -1; ins.c = arity > 2 ? 2 : -1;
    int32_t oreg = arity;
    tn_ew_program p = { arity, dts, 1, &ins, 1, &oreg, &odt, NULL, NULL };
    ok = ok && tn__cpu_ew_run(&p, a, &o) == TN_OK;
    for (int i = 0; i < arity; i++) tn_array_free(a[i]);
    tn_array_free(o);
    return ok;
}

TEST(test_arith_levels) {
    static const struct { int op, arity; const char *name; } ops[] = {
        { TN_OP_IDENTITY, 1, "identity" }, { TN_OP_ADD, 2, "add" }, { TN_OP_SUB, 2, "sub" }, { TN_OP_MUL, 2, "mul" },
        { TN_OP_TRUE_DIV, 2, "true_div" }, { TN_OP_NEG, 1, "neg" }, { TN_OP_ABS, 1, "abs" }, { TN_OP_SQR, 1, "sqr" },
        { TN_OP_RECIPROCAL, 1, "reciprocal" }, { TN_OP_RELU, 1, "relu" }, { TN_OP_MINIMUM, 2, "minimum" },
        { TN_OP_MAXIMUM, 2, "maximum" }, { TN_OP_CLIP, 3, "clip" },
    };
    enum { N = NSPEC * NSPEC + 37 };
    static double in[3][N], want[N], got[N];
    int best = tn__vm_level(-1);
    for (int d = 0; d < 2; d++) {
        const vtype *t = d ? &F64 : &F32;
        for (int64_t i = 0; i < N; i++) {
            put(t, in[0], i, specials[i % NSPEC]);
            put(t, in[1], i, specials[i / NSPEC % NSPEC]);
            put(t, in[2], i, specials[(i * 7 + 3) % NSPEC]);
        }
        void *ins[3] = { in[0], in[1], in[2] };
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            tn__vm_level(0);
            CHECK(run_op3(t, ops[k].op, ops[k].arity, N, ins, want), "%s %s: %s", t->name, ops[k].name, tn_last_error());
            for (int level = 1; level <= best; level++) {
                tn__vm_level(level);
                CHECK(run_op3(t, ops[k].op, ops[k].arity, N, ins, got), "%s %s: %s", t->name, ops[k].name, tn_last_error());
                int bad = 0;
                for (int64_t i = 0; i < N; i++) {
                    long double w = get(t, want, i), g = get(t, got, i);
                    bool same = isnan(w) ? isnan(g) : bits_of(t, want, i) == bits_of(t, got, i);
                    if (!same && bad++ < 5)
                        CHECK(0, "%s %s element %lld at level %d: %.17Lg, level 0 gives %.17Lg", t->name, ops[k].name,
                              (long long)i, level, g, w);
                }
            }
        }
    }
    tn__vm_level(-1);
}

/* A compiled function's exp runs these kernels: the same bits as the engine. */
TEST(test_function_path) {
    for (int d = 0; d < 2; d++) {
        const vtype *t = d ? &F64 : &F32;
        double in[37], a[37], b[37], got[37];
        for (int i = 0; i < 37; i++) put(t, in, i, -40.0 + 2.3 * i);
        memcpy(a, in, sizeof a);
        CHECK(run_op(t, TN_OP_EXP, 37, a, b), "engine: %s", tn_last_error());
        tn_graph *g = tn_graph_new();
        tn_var *x = tn_vector(g, "x", t->dt);
        tn_var *y = tn_exp(x);
        tn_func *fn = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
        tn_array *ia = tn_array_from_data(t->dt, 1, (int64_t[]){ 37 }, in), *out = NULL;
        CHECK(fn && ia && tn_call(fn, &ia, &out) == TN_OK && out, "%s call: %s", t->name, tn_last_error());
        if (out) {
            tn_array_copy_to(out, t->dt, got, (size_t)(37 * t->size));
            CHECK(memcmp(got, b, (size_t)(37 * t->size)) == 0, "%s exp through a function differs from the engine", t->name);
        }
        tn_array_free(out); tn_array_free(ia); tn_function_free(fn); tn_graph_free(g);
    }
}

/* Every function run in place (the output over its input, as an inplace
   elementwise op runs: the engine hands the kernel one pointer for both) at
   every level: the bits of the same run into another buffer. Each block of
   16 mixes lanes the vector code computes with lanes libm redoes (sin and
   cos past their reduction's range, NaN, infinities), so a kernel that
   redid a lane from an input it had already overwritten would differ. */
TEST(test_in_place) {
    enum { N = 16 * 5 + 7 };
    static double in[N], want[N], got[N];
    int best = tn__vm_level(-1);
    for (int d = 0; d < 2; d++) {
        const vtype *t = d ? &F64 : &F32;
        for (int i = 0; i < N; i++) {
            double v = i % 5 == 0 ? 3e9 * (i % 2 ? -1 : 1) + i : i % 7 == 0 ? (i % 2 ? -INFINITY : NAN) : 0.37 * i - 9.5;
            put(t, in, i, v);
        }
        for (int f = 0; f < NFNS; f++)
            for (int level = 0; level <= best; level++) {
                tn__vm_level(level);
                bool ok = run_op(t, fns[f].op, N, in, want);
                memcpy(got, in, sizeof got);
                ok = ok && run_op(t, fns[f].op, N, got, got);
                CHECK(ok, "%s %s: %s", t->name, fns[f].name, tn_last_error());
                int bad = 0;
                for (int64_t i = 0; ok && i < N; i++) {
                    long double w = get(t, want, i), g = get(t, got, i);
                    bool same = isnan(w) ? isnan(g) : bits_of(t, want, i) == bits_of(t, got, i);
                    if (!same && bad++ < 3)
                        CHECK(0, "%s %s in place, element %lld (x = %.17Lg) at level %d: %.17Lg, into another buffer %.17Lg",
                              t->name, fns[f].name, (long long)i, get(t, in, i), level, g, w);
                }
            }
    }
    tn__vm_level(-1);
}

int main(void) {
    TH_RUN(test_specials);
    TH_RUN(test_sweep_f32);
    TH_RUN(test_sweep_f64);
    TH_RUN(test_function_path);
    TH_RUN(test_arith_levels);
    TH_RUN(test_in_place);
    free(xs); free(ys);
    TH_END();
}
