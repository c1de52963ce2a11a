/* tests/test_vmath.c - the float32 vector math of the CPU kernels (tensor_ops.h
   >>vmath): exp, expm1, log, log1p, tanh, sigmoid and softplus, run by the CPU
   engine (a one-instruction program) at every instruction set level this CPU
   has, against libm in double. Every 521st float32 bit pattern and the edge
   regions densely (thresholds of overflow and underflow, around 0, 1 and -1,
   subnormals, the switch points of the formulas; at the levels below the
   best every 16411th pattern and a tenth as dense): at most 4 ulp of the double result. The special values
   (NaN, +-inf, +-0, subnormals, FLT_MAX) bit for bit as libm's float
   functions give them, the sign of zero included. Prints each function's
   worst error (README's "Numerics" table quotes them). */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
#include <float.h>
#include <stdint.h>

#define MAX_ULP 4.0

typedef struct vfn { int op; const char *name; double (*ref)(double); float (*lib)(float); } vfn;

static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double ref_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static float lib_sigmoid(float x) { return (float)ref_sigmoid(x); }
static float lib_softplus(float x) { return (float)ref_softplus(x); }

static const vfn fns[] = {
    { TN_OP_EXP, "exp", exp, expf },
    { TN_OP_EXPM1, "expm1", expm1, expm1f },
    { TN_OP_LOG, "log", log, logf },
    { TN_OP_LOG1P, "log1p", log1p, log1pf },
    { TN_OP_TANH, "tanh", tanh, tanhf },
    { TN_OP_SIGMOID, "sigmoid", ref_sigmoid, lib_sigmoid },
    { TN_OP_SOFTPLUS, "softplus", ref_softplus, lib_softplus },
};
#define NFNS ((int)(sizeof fns / sizeof fns[0]))

static float f_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t u_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Runs op over n floats through the CPU engine. */
static bool run_op(int op, int64_t n, float *in, float *out) {
    tn_array *a = tn_array_wrap(TN_F32, 1, &n, NULL, in), *o = tn_array_wrap(TN_F32, 1, &n, NULL, out);
    tn_dtype idt = TN_F32, odt = TN_F32;
    tn_ew_instr ins;
    memset(&ins, 0, sizeof ins);
    ins.op = (int16_t)op; ins.dtype = TN_F32; ins.in_dtype = TN_F32; ins.a = 0; ins.b = -1; ins.c = -1;
    int32_t oreg = 1;
    tn_ew_program p = { 1, &idt, 1, &ins, 1, &oreg, &odt };
    tn_result r = a && o ? tn__cpu_ew_run(&p, &a, &o) : TN_ERR_OOM;
    tn_array_free(a);
    tn_array_free(o);
    return r == TN_OK;
}

/* |got - want| in units of the float32 spacing at want (2^-149 at the
   least; inf counts as 2^128, the next power of two past FLT_MAX). */
static double ulps(float got, double want) {
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

/* The inputs: every `stride`th bit pattern, then each edge region densely. */
static int64_t fill_inputs(float *x, int64_t cap, uint32_t stride, int dense) {
    int64_t n = 0;
    for (uint64_t u = 0; u <= 0xffffffffu && n < cap; u += stride) x[n++] = f_of((uint32_t)u);
    static const float edges[][2] = {
        { 88.0f, 89.5f }, { -89.0f, -86.0f }, { -104.5f, -102.5f }, { -31.0f, -15.0f },     /* exp and expm1 limits */
        { -1e-3f, 1e-3f }, { 0.6f, 0.65f }, { -0.65f, -0.6f }, { 8.0f, 10.0f }, { -10.0f, -8.0f },
        { 0.5f, 2.0f }, { -1.0f, -0.99f }, { 0.3f, 0.4f }, { -0.4f, -0.3f },
    };
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) {
        float lo = edges[k][0], hi = edges[k][1];
        for (int i = 0; i < dense && n < cap; i++) x[n++] = lo + (hi - lo) * (float)i / (float)dense;
    }
    for (uint32_t u = 0; u < 0x00900000u && n + 1 < cap; u += 40000000u / (uint32_t)dense) { x[n++] = f_of(u); x[n++] = f_of(u | 0x80000000u); }   /* subnormals, smallest normals */
    for (uint32_t u = 0x33000000u; u < 0x3a000000u && n + 1 < cap; u += 400000000u / (uint32_t)dense) { x[n++] = f_of(u); x[n++] = f_of(u | 0x80000000u); }   /* 2^-25 .. 2^-11 */
    return n;
}

static const float specials[] = { NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, FLT_MIN, -FLT_MIN, 1e-45f, -1e-45f,
                                  FLT_MAX, -FLT_MAX, 1.0f, -1.0f, 88.7228394f, 88.7228470f, -103.972084f, -103.972092f,
                                  -87.3365479f, 0.625f, -0.625f };
#define NSPEC ((int64_t)(sizeof specials / sizeof specials[0]))

static float *xs, *ys;

TEST(test_sweep) {
    const int64_t cap = 18000000;
    xs = (float *)malloc((size_t)cap * sizeof *xs);
    ys = (float *)malloc((size_t)cap * sizeof *ys);
    CHECK(xs && ys, "out of memory");
    if (!xs || !ys) return;
    int best = tn__vm_level(-1);
    for (int f = 0; f < NFNS; f++) {
        double worst = 0;
        float worst_x = 0;
        for (int level = best; level >= 0; level--) {
            CHECK(tn__vm_level(level) == level, "level %d", level);
            int64_t n = level == best ? fill_inputs(xs, cap, 521u, 100000) : fill_inputs(xs, cap, 16411u, 10000);
            CHECK(run_op(fns[f].op, n, xs, ys), "%s: %s", fns[f].name, tn_last_error());
            int bad = 0;
            for (int64_t i = 0; i < n; i++) {
                double want = fns[f].ref(xs[i]);
                double e = ulps(ys[i], want);
                if (e > worst) { worst = e; worst_x = xs[i]; }
                if (!(e <= MAX_ULP) && bad++ < 5)
                    CHECK(0, "%s(%.9g) at level %d: %.9g, want %.17g (%.2f ulp)", fns[f].name, xs[i], level, ys[i], want, e);
            }
        }
        printf("%-9s max %.2f ulp (at %.9g)\n", fns[f].name, worst, worst_x);
    }
    tn__vm_level(-1);
}

/* Special values bit for bit as libm's float functions, at every level. */
TEST(test_specials) {
    int best = tn__vm_level(-1);
    float in[NSPEC], out[NSPEC];
    for (int level = 0; level <= best; level++) {
        tn__vm_level(level);
        for (int f = 0; f < NFNS; f++) {
            memcpy(in, specials, sizeof in);
            CHECK(run_op(fns[f].op, NSPEC, in, out), "%s: %s", fns[f].name, tn_last_error());
            for (int64_t i = 0; i < NSPEC; i++) {
                float x = specials[i], want = fns[f].lib(x), got = out[i];
                bool special = isnan(want) || isinf(want) || want == 0 || isnan(x) || isinf(x) || x == 0;
                if (special)
                    CHECK(isnan(want) ? isnan(got) : u_of(got) == u_of(want), "%s(%.9g) at level %d: %.9g, libm %.9g",
                          fns[f].name, x, level, got, want);
                else
                    CHECK(ulps(got, fns[f].ref(x)) <= MAX_ULP, "%s(%.9g) at level %d: %.9g, want %.17g", fns[f].name, x,
                          level, got, fns[f].ref(x));
            }
        }
    }
    tn__vm_level(-1);
}

/* A compiled function's exp runs these kernels: the same bits as the engine. */
TEST(test_function_path) {
    float in[37], a[37], b[37];
    for (int i = 0; i < 37; i++) in[i] = -40.0f + 2.3f * (float)i;
    memcpy(a, in, sizeof a);
    CHECK(run_op(TN_OP_EXP, 37, a, b), "engine: %s", tn_last_error());
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_exp(x);
    tn_func *fn = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    tn_array *ia = tn_array_from_data(TN_F32, 1, (int64_t[]){ 37 }, in), *out = NULL;
    CHECK(fn && ia && tn_call(fn, &ia, &out) == TN_OK && out, "call: %s", tn_last_error());
    if (out) {
        float got[37];
        tn_array_copy_to(out, TN_F32, got, sizeof got);
        CHECK(memcmp(got, b, sizeof got) == 0, "exp through a function differs from the engine");
    }
    tn_array_free(out); tn_array_free(ia); tn_function_free(fn); tn_graph_free(g);
}

int main(void) {
    TH_RUN(test_specials);
    TH_RUN(test_sweep);
    TH_RUN(test_function_path);
    free(xs); free(ys);
    TH_END();
}
