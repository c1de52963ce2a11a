/* tests/test_rewrite_random.c - property test of the optimizer: thousands of
   random expression graphs (random ops, broadcast shapes, constants, the
   patterns the rewrites look for) in float32, a third of them on inputs
   that are at times special (+-0, +-inf, NaN, huge, tiny, subnormal) and
   with huge and tiny constants. Each graph is compiled optimized (fast_run)
   and as written (fast_compile: merge and constant folding, which change no
   value); the float64 copy of the graph (the same constants and input
   values) is the reference, as written and optimized.

   The default (fast_math=0). No fast_math rewrite fires (FAST_ONLY), and
   every output element of the optimized function is the one of the graph
   as written: the same kind (NaN where NaN, inf of the same sign, a zero of
   the same sign) and within ULPS float32 ulps. Only where a stabilising
   rewrite (STABILISING: README's list) reaches the output (the output alone
   optimized fires one) may it differ, by more than a few ulps where the
   formula as written is inaccurate, and then (judge):
     - it is at least as close to the float64 reference as the graph as
       written, up to ULPS ulps of the element or of the output's largest
       magnitude (at least 1), plus what rounding on the way can move it
       (SENS times the move when the inputs move by a few ulps);
     - or, where the float64 graph as written is no reference (it overflowed,
       or it loses what the stable form keeps: log(exp(t)) at tiny t), it is
       the float64 optimized graph's value to float32 accuracy (REL32 at the
       output's scale);
     - or, where float32 and float64 differ in kind on the way (overflow,
       underflow, cancellation of huge values; always possible in the graphs
       with special values), or a few ulps' move of the inputs changes the
       result's kind (a comparison at a tie): NaN only where the graph as
       written or the float64 optimized graph gives NaN. TN_STATS=1 prints how
       many elements each case took (a few dozen of a million go the last way).
   Products run on the built-in kernels (BLAS off): alpha*A@B + beta*C is
   then rounded as the separate ops are; BLAS may sum in another order.

   fast_math=1 (test_random_graphs_fast_math): the FAST_ONLY rewrites fire,
   and on ordinary inputs and constants the results agree with the float64
   reference to FAST_TOL of each output's largest value (at least 1).

   A failure prints its seed: TN_SEED=<seed> reruns just it (TN_DEBUG=1 also
   prints the graph as written and its values); TN_RANDOM_N=<n> runs seeds
   1..n (10000 by default; 2000 with fast_math). */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
#include <float.h>
#include <stdint.h>

static uint64_t rs;
static uint32_t rnd32(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (uint32_t)(rs >> 11); }
static int pick(int n) { return (int)(rnd32() % (uint32_t)n); }

enum { NIN = 5, MAXPOOL = 64, ULPS = 4 };
#define FAST_TOL 1e-4
#define REL32 1e-5       /* float32 evaluation of one formula against its float64 one, at the output's scale */
#define SENS 4           /* times the move of the result when the inputs move by a few ulps (PERTURB) */
#define PERTURB 0x1p-21
static const int64_t SH[NIN][2] = { { 3, 4 }, { 1, 4 }, { 3, 1 }, { 4, 0 }, { 0, 0 } };
static const int ND[NIN] = { 2, 2, 2, 1, 0 };

/* The rewrites that may change a value in the default mode, to a more accurate one. */
static const char *const STABILISING[] = { "local_log1p", "local_log1p_exp", "local_expm1", "local_log_sigmoid",
                                           "local_log_1m_sigmoid", "local_log_softmax", "local_logsumexp",
                                           "local_pow_two", "local_sum_alloc", "local_inv_1p_exp", "local_1m_sigmoid",
                                           "local_exp_over_1p_exp", "local_sigmoid_cancel" };
/* The rewrites that on float graphs run only with fast_math. */
static const char *const FAST_ONLY[] = { "local_pow_half", "local_gemm_zero_scale", "local_sub_self", "local_chain_const",
                                         "local_chain_hoist" };
static int count_of(const char *const *names, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += tn__rewrite_count(names[i]);
    return k;
}
#define COUNT(names) count_of(names, (int)(sizeof names / sizeof names[0]))

static tn_var *pool[MAXPOOL];
static int npool;
static int edge;                     /* this graph draws special constants and input values */
static uint64_t used;                /* pool entries the current grow() read (bit i: pool[i]) */
static uint64_t anc[MAXPOOL];        /* the entries pool[i] is computed from, itself included */

static int any_i(void) { return npool > 4 && pick(3) ? npool - 1 - pick(4) : pick(npool); }
static tn_var *any(void) { int i = any_i(); used |= 1ull << i; return pool[i]; }
static tn_var *mat(void) {           /* a (3, 4) operand, when the pool has one */
    for (int t = 0; t < 8; t++) {
        int i = any_i();
        tn_var *v = pool[i];
        if (tn_var_ndim(v) == 2 && tn_var_dim(v, 0) == 3 && tn_var_dim(v, 1) == 4) { used |= 1ull << i; return v; }
    }
    used |= 1;
    return pool[0];
}
/* A literal as float32 has it, so the float64 reference computes with the same constants. */
static tn_var *K(tn_var *like, double c) { return tn_lit(like, (double)(float)c); }
static const double CONSTS[] = { 0, 1, -1, 2, 0.5, 3, -0.0, 0x1p100, 0x1p-100 };
static tn_var *lit(tn_var *like) { return K(like, CONSTS[pick(edge ? 9 : 6)]); }

static tn_var *grow(tn_var *W) {
    tn_var *a = any(), *b = any();
    switch (pick(39)) {
    case 0: return tn_add(a, b);
    case 1: return tn_sub(a, b);
    case 2: return tn_mul(a, b);
    case 3: return tn_div(a, tn_add(tn_sqr(b), K(b, 1)));
    case 4: return tn_neg(a);
    case 5: return tn_exp(tn_tanh(a));
    case 6: return tn_log(tn_add(K(a, 1), tn_exp(a)));                  /* softplus */
    case 7: return pick(2) ? tn_mul(a, lit(a)) : tn_mul(lit(a), a);
    case 8: return pick(2) ? tn_add(a, lit(a)) : tn_sub(a, lit(a));
    case 9: { double e[] = { 1, 2, 0.5 }; int k = pick(3);
              return tn_pow(k == 2 ? tn_add(tn_abs(a), K(a, 0.1)) : a, K(a, e[k])); }
    case 10: return pick(2) ? tn_sub(a, a) : tn_neg(tn_neg(a));
    case 11: if (tn_var_ndim(a) == 2) { int ax = pick(2); return tn_sum(a, &ax, 1, true); } return tn_sum(a, NULL, 0, false);
    case 12: if (tn_var_ndim(a) == 2) return tn_transpose(tn_transpose(a, NULL), NULL); return tn_neg(a);
    case 13: { tn_var *d = tn_dot(mat(), W);                                 /* gemm patterns */
               switch (pick(5)) { case 0: return tn_add(d, b);
                                  case 1: return tn_sub(tn_mul(K(d, 2), d), tn_mul(b, K(b, 0.5)));
                                  case 2: return tn_add(d, tn_mul(pick(2) ? K(b, 0) : lit(b), b));   /* beta 0 */
                                  case 3: return tn_sub(b, tn_mul(d, pick(2) ? K(d, 0) : lit(d)));   /* alpha 0 */
                                  default: return tn_add(b, tn_exp(tn_tanh(d))); } }
    case 14: return tn_where(tn_gt(a, b), a, b);
    case 15: return tn_maximum(a, tn_mul(b, K(b, 0.5)));
    case 16: if (tn_var_ndim(a) == 2) return tn_log(tn_softmax(a, pick(2))); return tn_sigmoid(a);
    case 17: return tn_log(tn_sigmoid(a));
    case 18: return tn_log(tn_sub(K(a, 1), tn_sigmoid(a)));
    case 19: return tn_sub(tn_exp(tn_tanh(a)), K(a, 1));
    case 20: return tn_log(tn_add(tn_sqr(a), K(a, 1)));
    case 21: if (tn_var_ndim(a) == 2) { int ax = pick(2); return tn_log(tn_sum(tn_exp(a), &ax, 1, true)); } return tn_cos(a);
    case 22: return tn_add(tn_add(tn_add(a, lit(a)), b), lit(a));
    /* the inverse trigonometric and hyperbolic ops, erfc, relu: fused with their neighbours */
    case 23: return tn_add(tn_atan(a), tn_mul(tn_sinh(tn_tanh(b)), lit(b)));
    case 24: { tn_var *u = tn_mul(tn_tanh(a), K(a, 0.9));                /* in (-0.9, 0.9) */
               switch (pick(3)) { case 0: return tn_asin(u); case 1: return tn_acos(u); default: return tn_atanh(u); } }
    case 25: return tn_add(tn_asinh(a), tn_cosh(tn_tanh(b)));
    case 26: return tn_acosh(tn_add(tn_sqr(a), K(a, 1.5)));
    case 27: return tn_mul(tn_erfc(a), pick(2) ? tn_relu(b) : tn_relu(tn_sub(a, b)));
    case 28: return tn_relu(tn_add(a, lit(a)));
    /* cumulative ops between elementwise groups */
    case 29: if (tn_var_ndim(a) >= 1) return tn_cumsum(tn_exp(tn_tanh(a)), -1 - pick(tn_var_ndim(a))); return tn_relu(a);
    case 30: if (tn_var_ndim(a) >= 1) return tn_mul(tn_cumprod(tn_tanh(a), pick(tn_var_ndim(a))), b); return tn_atan(a);
    /* constant chains: (a*2^100)*2^-100, (a+1)-1 */
    case 32: return tn_mul(tn_mul(a, lit(a)), pick(2) ? lit(a) : tn_mul(b, lit(a)));
    case 33: return tn_add(tn_sub(a, lit(a)), lit(a));
    /* an Alloc an elementwise node reads, as gradients make them: a fill of a's
       shape or of a+b's (which b alone may not give), by a scalar */
    case 31: { tn_var *f = tn_fill(pick(2) ? a : tn_add(a, b), pick(2) ? lit(a) : tn_sum(b, NULL, 0, false));
               return pick(2) ? tn_mul(f, pick(2) ? a : b) : tn_sub(tn_exp(tn_tanh(pick(2) ? a : b)), f); }
    /* the logistic function written out, and the forms its gradient takes */
    case 34: switch (pick(3)) { case 0: return tn_div(K(a, 1), tn_add(K(a, 1), tn_exp(a)));
                                case 1: return tn_mul(tn_sub(K(a, 1), tn_sigmoid(a)), b);
                                default: return tn_div(tn_exp(a), tn_add(tn_exp(a), K(a, 1))); }
    case 35: { tn_var *s = tn_sigmoid(a), *e = tn_exp(a);
               if (pick(2)) return tn_mul(tn_mul(tn_sub(tn_div(b, s), tn_div(a, tn_sub(K(a, 1), s))), s), tn_sub(K(a, 1), s));
               return tn_mul(tn_div(b, tn_add(e, K(a, 1))), e); }
    /* mean's gradient as tn_grad writes it: 1/n (n the Size of e, 1 given
       e's dims), filled to e's shape and read where the inputs that give it
       meet; or 1/n read by two nodes of a larger shape */
    case 38: { tn_var *e = tn_mul(a, b), *one = K(a, 1);
               int nd = tn_var_ndim(e), xs[2] = { -1, -1 };
               tn_var *s = tn_div(nd ? tn_dimshuffle(one, nd, xs) : one, tn_size(e, NULL, 0, true));
               if (pick(2)) return tn_mul(tn_mul(tn_fill(e, s), tn_tanh(a)), b);
               return tn_sub(tn_mul(s, a), tn_mul(s, tn_exp(tn_tanh(b)))); }
    /* activations, fused with their neighbours (alphas as literals) */
    case 36: return tn_add(tn_leaky_relu(a, K(a, 0.125)), tn_mul(tn_gelu(b), pick(2) ? tn_silu(a) : tn_mish(b)));
    case 37: switch (pick(5)) { case 0: return tn_elu(tn_sub(a, b), K(a, 1.5));
                                case 1: return tn_mul(tn_selu(a), tn_softsign(b));
                                case 2: return tn_sub(tn_hard_sigmoid(a), tn_gelu_tanh(b));
                                case 3: return tn_leaky_relu(a, tn_sigmoid(b));
                                default: return tn_mish(tn_add(a, lit(a))); }
    default: if (tn_var_ndim(a) == 2) { int ax = 1; return tn_max(tn_mul(tn_exp(tn_tanh(a)), b), &ax, 1, true); } return tn_sin(a);
    }
}

/* Input values: uniform in [-2, 2]; in an edge graph, some entries special. */
static const float SPECIAL[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 3e38f, 1e-30f, -1e-30f,
                                 1e-40f, -1e-40f, 100.0f, -100.0f };
static void draw_values(uint64_t seed, float *v, int64_t n) {
    uint64_t save = rs;
    rs = seed * 0xD1B54A32D192ED03ull + 7;
    int special = edge && pick(2);
    for (int64_t i = 0; i < n; i++) {
        v[i] = (float)(-2.0 + 4.0 * (double)rnd32() / 4294967296.0);
        if (special && pick(3) == 0) v[i] = SPECIAL[pick((int)(sizeof SPECIAL / sizeof SPECIAL[0]))];
    }
    rs = save;
}

/* A graph: outputs out[0, nout), then (for the reference) every pool entry. */
typedef struct built {
    tn_graph *g;
    tn_var *in[NIN], *out[3 + MAXPOOL];
    int nout, npool, oi[3];
} built;

/* The graph of seed in dtype t (the same graph in float32 and float64); a
   third of the graphs draw special values, unless fast. */
static int build(uint64_t seed, tn_dtype t, int fast, const float *wv, built *b) {
    rs = seed * 0x9E3779B97F4A7C15ull + 1;
    edge = pick(3) == 0 && !fast;
    b->g = tn_graph_new();
    for (int i = 0; i < NIN; i++) {
        char nm[4] = { 'a', (char)('0' + i), 0, 0 };
        b->in[i] = tn_input(b->g, nm, t, ND[i], SH[i], NULL);
        pool[i] = b->in[i];
        anc[i] = 1ull << i;
    }
    npool = NIN;
    double w64[16];
    for (int i = 0; i < 16; i++) w64[i] = wv[i];
    tn_array *wa = t == TN_F32 ? tn_array_from_data(TN_F32, 2, (int64_t[]){ 4, 4 }, wv)
                               : tn_array_from_data(TN_F64, 2, (int64_t[]){ 4, 4 }, w64);
    tn_var *W = tn_constant(b->g, wa);
    tn_array_free(wa);
    int nops = 3 + pick(20);
    for (int k = 0; k < nops && npool < MAXPOOL; k++) {
        used = 0;
        tn_var *v = grow(W);
        if (!v) { fprintf(stderr, "seed %llu: builder failed: %s\n", (unsigned long long)seed, tn_last_error()); return 0; }
        anc[npool] = 1ull << npool;
        for (int j = 0; j < npool; j++) if (used >> j & 1) anc[npool] |= anc[j];
        pool[npool++] = v;
    }
    b->oi[0] = npool - 1;
    b->oi[1] = NIN + pick(npool - NIN);
    b->oi[2] = NIN + pick(npool - NIN);
    b->nout = 1 + pick(3);
    b->npool = npool;
    for (int o = 0; o < 3; o++) b->out[o] = pool[b->oi[o]];
    for (int j = NIN; j < npool; j++) b->out[b->nout + j - NIN] = pool[j];
    return 1;
}

/* Float32 ulps as integers in the order of the values (-0 and +0 are one point). */
static int64_t ord32(float x) {
    int32_t i;
    memcpy(&i, &x, 4);
    return i < 0 ? -(int64_t)(i & 0x7fffffff) : (int64_t)i;
}
/* The same kind (NaN, inf of a sign, zero of a sign) and within ULPS ulps. */
static int same32(float o, float u) {
    if (isnan(o) || isnan(u)) return isnan(o) && isnan(u);
    if (isinf(o) || isinf(u)) return o == u;
    if (o == 0 && u == 0) return signbit(o) == signbit(u);
    int64_t d = ord32(o) - ord32(u);
    return (d < 0 ? -d : d) <= ULPS;
}
/* Float32 ulps at |r| (the subnormal spacing below FLT_MIN). */
static double ulp32(double r) { double a = fabs(r); return a < FLT_MIN ? 0x1p-149 : ldexp(1.0, ilogb(a) - 23); }
/* Distance of x from the reference r in float32 ulps at r; HUGE_VAL: another kind. */
static double dist(float x, double r) {
    if (isnan(r)) return isnan(x) ? 0 : HUGE_VAL;
    if (isinf((float)r)) return x == (float)r ? 0 : HUGE_VAL;     /* beyond float32's range: its inf */
    if (!isfinite(x)) return HUGE_VAL;
    return fabs((double)x - r) / ulp32(r);
}

/* One element: o optimized, u the float32 graph as written; the float64
   references: r as written, rn as written without NaN inputs, rs optimized;
   s, ss: the largest finite |r|, |rs| of the output, at least 1; sens: how
   much o or u move when the inputs move by a few ulps (HUGE_VAL: they change
   kind), the element's sensitivity to rounding on the way. */
typedef struct elem { float o, u; double r, rn, rs, s, ss, sens; } elem;
/* What the output depends on: stab, a stabilising rewrite fired on the way;
   lost64, a value that is not finite in the float64 graph as written (an
   overflow that later ops may turn finite again: then that reference is
   off); range, a value of another kind in float32 than in float64 (finite
   in one, inf or NaN in the other: the float64 references do not describe
   the float32 computation); edge, the graph draws special values. */
typedef struct why { int stab, lost64, range, edge; } why;
enum { SAME, CLOSER, STABLE_REF, NO_REF, BAD, NJUDGE };
static const char *const JUDGE_NAME[NJUDGE] = { "the same", "closer to the float64 reference",
                                                "the float64 optimized graph's", "no reference", "bad" };
static int judge(const elem *e, why w) {
    if (same32(e->o, e->u)) return SAME;
    if (!w.stab) return BAD;
    double du = dist(e->u, e->r), dz = dist(e->o, e->r), slack = ULPS * ulp32(e->s) + SENS * e->sens;
    /* at least as close to the reference as the graph as written, up to ULPS ulps of the element or of the
       output's scale, and what rounding on the way moves the result by */
    if (du < HUGE_VAL && (dz <= du + ULPS || (dz < HUGE_VAL && fabs(e->o - e->r) <= fabs(e->u - e->r) + slack))) return CLOSER;
    /* the float64 graph as written is no reference: it loses what the stable form keeps (log(exp(t)) at tiny t: the
       two float64 graphs agree but for that), it overflowed (as the float32 one did), or the float32 one overflowed
       alone. Then the optimized float64 graph is, to float32 accuracy at the output's scale. */
    int f64_agree = isfinite(e->r) && isfinite(e->rs) && fabs(e->r - e->rs) <= 1e-12 * fmax(1, fabs(e->r));
    int overflowed = isinf(e->r) || (isnan(e->r) && isnan(e->rn)) || du == HUGE_VAL;
    double ds = dist(e->o, e->rs);
    if ((f64_agree || overflowed || w.lost64) && (ds <= ULPS || (ds < HUGE_VAL && fabs(e->o - e->rs) <= REL32 * e->ss + SENS * e->sens)))
        return STABLE_REF;
    /* no reference: the float32 and float64 computations differ in kind on the way (inf, NaN or 0 in one and not in
       the other), the result changes kind when the inputs move by a few ulps, or the graph draws special values (huge,
       tiny: float32 and float64 over- and underflow and cancel in other places, also in the optimized graph where
       this test cannot see): NaN only where another value is NaN */
    if ((w.range || w.edge || e->sens == HUGE_VAL) && (!isnan(e->o) || isnan(e->u) || isnan(e->rs))) return NO_REF;
    return BAD;
}

static double *as_f64(const tn_array *a, int64_t *n) {
    *n = tn_array_size(a);
    double *d = (double *)malloc((size_t)(*n + 1) * sizeof *d);
    tn_array_copy_to(a, TN_F64, d, (size_t)*n * sizeof *d);
    return d;
}

/* The kind of a value: nonzero finite, NaN, +inf, -inf, zero. */
static int kind(double x) { return isnan(x) ? 1 : isinf(x) ? (x > 0 ? 2 : 3) : x == 0 ? 4 : 0; }

/* Pool entries (outputs from `first` on) of the float64 graph as written
   (a64) with a value that is not finite, into *lost; and those where the
   float32 graph as written (a32) has another kind of value somewhere, into
   *range. */
static void lost_values(tn_array **a32, tn_array **a64, int first, int npool, uint64_t *lost, uint64_t *range) {
    *lost = *range = 0;
    for (int j = NIN; j < npool; j++) {
        int64_t n, n2;
        double *x = as_f64(a32[first + j - NIN], &n), *y = as_f64(a64[first + j - NIN], &n2);
        for (int64_t i = 0; i < n && i < n2; i++) {
            if (!isfinite(y[i])) *lost |= 1ull << j;
            if (kind(x[i]) != kind(y[i])) *range |= 1ull << j;
        }
        free(x); free(y);
    }
}

typedef struct tally { int graphs, fired, stab, fast_only, edge, alloc_ew, judged[NJUDGE]; } tally;

/* b's outputs [first, first + n_outputs) */
static tn_func *compile(built *b, int first, int n_outputs, tn_mode mode, int fast_math) {
    tn_config cfg = *tn_get_config();
    cfg.fast_math = fast_math;
    if (fast_math) tn_init(&cfg);
    tn_func *f = tn_function(b->g, &(tn_func_desc){ .on_unused_input = TN_UNUSED_IGNORE, .n_inputs = NIN, .inputs = b->in, .n_outputs = n_outputs,
                                                     .outputs = b->out + first, .mode = mode });
    cfg.fast_math = false;
    if (fast_math) tn_init(&cfg);
    if (!f) fprintf(stderr, "compile failed: %s\n", tn_last_error());
    return f;
}

/* One random graph; fast: fast_math=1 and its comparison. */
static int one_graph(uint64_t seed, int fast, tally *t) {
    float wv[16];
    rs = seed * 0x2545F4914F6CDD1Dull + 3;
    for (int i = 0; i < 16; i++) wv[i] = (float)(-1.0 + 2.0 * (double)rnd32() / 4294967296.0);
    built b32, b64;
    if (!build(seed, TN_F32, fast, wv, &b32) || !build(seed, TN_F64, fast, wv, &b64)) return 0;
    t->graphs++;
    t->edge += edge;
    tn_array *v32[NIN], *vp32[NIN], *v64[NIN], *vn64[NIN];
    for (int i = 0; i < NIN; i++) {
        int64_t n = ND[i] == 0 ? 1 : ND[i] == 1 ? SH[i][0] : SH[i][0] * SH[i][1];
        float fv[12], fp[12];
        double dv[12], dn[12];
        draw_values(seed * 31 + (uint64_t)i, fv, n);
        for (int64_t k = 0; k < n; k++) {
            dv[k] = fv[k];
            dn[k] = isnan(fv[k]) ? 0.5 : fv[k];
            fp[k] = (float)(fv[k] * (1 + PERTURB * (1 + k % 3) * ((k + i) % 2 ? 1 : -1)));   /* a few ulps */
        }
        v32[i] = tn_array_from_data(TN_F32, ND[i], SH[i], fv);
        vp32[i] = tn_array_from_data(TN_F32, ND[i], SH[i], fp);
        v64[i] = tn_array_from_data(TN_F64, ND[i], SH[i], dv);
        vn64[i] = tn_array_from_data(TN_F64, ND[i], SH[i], dn);
    }
    /* which outputs a stabilising rewrite reaches: each optimized alone */
    int stab[3] = { 0, 0, 0 };
    for (int o = 0; o < b32.nout; o++) {
        tn_func *fo = compile(&b32, o, 1, TN_MODE_FAST_RUN, 0);
        stab[o] = COUNT(STABILISING) > 0;
        t->stab += stab[o];
        tn_function_free(fo);
    }
    /* the unoptimized ones also return every pool entry; the optimized one last (the counters are its) */
    int nall = b32.nout + b32.npool - NIN;
    tn_func *ref = compile(&b64, 0, nall, TN_MODE_FAST_COMPILE, 0), *refs = compile(&b64, 0, b64.nout, TN_MODE_FAST_RUN, 0);
    tn_func *u = compile(&b32, 0, nall, TN_MODE_FAST_COMPILE, 0), *f = compile(&b32, 0, b32.nout, TN_MODE_FAST_RUN, fast);
    t->fired += tn__rewrite_count(NULL);
    t->fast_only += COUNT(FAST_ONLY);
    t->alloc_ew += tn__rewrite_count("local_alloc_elemwise");
    int ok = f && u && ref && refs;
    if (ok && !fast && COUNT(FAST_ONLY)) {
        fprintf(stderr, "seed %llu: a fast_math rewrite fired by default\n", (unsigned long long)seed);
        tn_debugprint_function(f, stderr);
        ok = 0;
    }
    tn_array *ao[3] = { 0 }, *au[3 + MAXPOOL] = { 0 }, *ar[3 + MAXPOOL] = { 0 }, *arn[3 + MAXPOOL] = { 0 }, *ars[3] = { 0 };
    tn_array *aop[3] = { 0 }, *aup[3 + MAXPOOL] = { 0 };
    if (ok && (tn_call(f, v32, ao) != TN_OK || tn_call(u, v32, au) != TN_OK || tn_call(ref, v64, ar) != TN_OK ||
               tn_call(ref, vn64, arn) != TN_OK || tn_call(refs, v64, ars) != TN_OK || tn_call(f, vp32, aop) != TN_OK ||
               tn_call(u, vp32, aup) != TN_OK)) {
        fprintf(stderr, "seed %llu: call failed: %s\n", (unsigned long long)seed, tn_last_error());
        ok = 0;
    }
    uint64_t lost64 = 0, range = 0;
    if (ok) lost_values(au, ar, b32.nout, b32.npool, &lost64, &range);
    for (int o = 0; ok && o < b32.nout; o++) {
        uint64_t a = anc[b32.oi[o]];
        why w = { stab[o], (a & lost64) != 0, (a & range) != 0, edge };
        int64_t n, n2, n3, n4, n5, n6, n7;
        double *x = as_f64(ao[o], &n), *y = as_f64(au[o], &n2), *r = as_f64(ar[o], &n3), *rn = as_f64(arn[o], &n4),
               *rz = as_f64(ars[o], &n5), *xp = as_f64(aop[o], &n6), *yp = as_f64(aup[o], &n7);
        if (n != n2 || n != n3 || n != n4 || n != n5 || n != n6 || n != n7) {
            fprintf(stderr, "seed %llu: output %d sizes differ\n", (unsigned long long)seed, o);
            ok = 0;
        }
        double scale = 1, scale_s = 1;
        for (int64_t i = 0; i < n; i++) {
            if (isfinite(r[i]) && fabs(r[i]) > scale) scale = fabs(r[i]);
            if (isfinite(rz[i]) && fabs(rz[i]) > scale_s) scale_s = fabs(rz[i]);
        }
        for (int64_t i = 0; ok && i < n; i++) {
            double sens = kind(x[i]) != kind(xp[i]) || kind(y[i]) != kind(yp[i]) ? HUGE_VAL
                        : fmax(isfinite(x[i]) ? fabs(x[i] - xp[i]) : 0, isfinite(y[i]) ? fabs(y[i] - yp[i]) : 0);
            elem e = { (float)x[i], (float)y[i], r[i], rn[i], rz[i], scale, scale_s, sens };
            int j = fast ? (!isfinite(r[i]) || !isfinite(y[i]) || fabs(x[i] - r[i]) <= FAST_TOL * scale ? SAME : BAD) : judge(&e, w);
            t->judged[j]++;
            if (j == BAD) {
                fprintf(stderr, "seed %llu: output %d [%lld]: %.9g%s, as written %.9g; float64: %.17g, optimized %.17g (%s)\n",
                        (unsigned long long)seed, o, (long long)i, x[i], fast ? " with fast_math" : "", y[i], r[i], rz[i],
                        stab[o] ? "a stabilising rewrite fired" : "no stabilising rewrite fired");
                tn_debugprint_function(f, stderr);
                if (getenv("TN_DEBUG")) {
                    tn_debugprint_function(u, stderr);
                    for (int q = NIN; q < b32.npool; q++) {
                        int64_t m, m2;
                        double *p1 = as_f64(au[b32.nout + q - NIN], &m), *p2 = as_f64(ar[b32.nout + q - NIN], &m2);
                        fprintf(stderr, "pool %d (anc %d):", q, (int)(a >> q & 1));
                        for (int64_t k = 0; k < m; k++) fprintf(stderr, " %g/%g", p1[k], p2[k]);
                        fputc('\n', stderr);
                        free(p1); free(p2);
                    }
                    for (int q = 0; q < NIN; q++) { tn_array_print(v32[q], stderr); fputc(10, stderr); }
                }
                ok = 0;
            }
        }
        free(x); free(y); free(r); free(rn); free(rz); free(xp); free(yp);
    }
    for (int o = 0; o < 3; o++) { tn_array_free(ao[o]); tn_array_free(ars[o]); tn_array_free(aop[o]); }
    for (int o = 0; o < nall; o++) { tn_array_free(au[o]); tn_array_free(ar[o]); tn_array_free(arn[o]); tn_array_free(aup[o]); }
    for (int i = 0; i < NIN; i++) { tn_array_free(v32[i]); tn_array_free(vp32[i]); tn_array_free(v64[i]); tn_array_free(vn64[i]); }
    tn_function_free(f); tn_function_free(u); tn_function_free(ref); tn_function_free(refs);
    tn_graph_free(b32.g); tn_graph_free(b64.g);
    return ok;
}

static void run_graphs(int fast, int n_default) {
    /* TN_RANDOM_N=50000: more graphs (a fifth as many with fast_math);
       TN_RANDOM_FIRST=k: seeds from k + 1 (make sanitize draws other graphs) */
    const char *one = getenv("TN_SEED"), *many = getenv("TN_RANDOM_N"), *first = getenv("TN_RANDOM_FIRST");
    int bad = 0, n = one ? 1 : many ? atoi(many) / (fast ? 5 : 1) : n_default;     /* graphs; t.stab counts outputs */
    uint64_t seed0 = first ? strtoull(first, NULL, 10) : 0;
    tally t = { 0 };
    for (int s = 0; s < n && bad < 5; s++) {
        uint64_t seed = one ? strtoull(one, NULL, 10) : seed0 + (uint64_t)s + 1;
        if (!one_graph(seed, fast, &t)) bad++;
    }
    if (getenv("TN_STATS")) {
        fprintf(stderr, "%d graphs (%d with special values), %d outputs with stabilising rewrites, %d Allocs read as values; elements:",
                t.graphs, t.edge, t.stab, t.alloc_ew);
        for (int j = 0; j < NJUDGE; j++) fprintf(stderr, " %s %d;", JUDGE_NAME[j], t.judged[j]);
        fputc('\n', stderr);
    }
    CHECK(bad == 0, "%d random graphs disagree (seeds above)", bad);
    CHECK(one || t.fired > n, "the optimizer hardly fired (%d rewrites)", t.fired);
    CHECK(one || t.stab > n / 10, "stabilising rewrites reached %d outputs of %d graphs", t.stab, n);
    CHECK(one || fast || t.edge > n / 5, "%d graphs of %d drew special values", t.edge, n);
    CHECK(one || t.alloc_ew > n / 100, "local_alloc_elemwise fired %d times in %d graphs", t.alloc_ew, n);
    CHECK(one || !fast || t.fast_only > n / 10, "fast_math rewrites fired %d times in %d graphs", t.fast_only, n);
}

TEST(test_random_graphs) { run_graphs(0, 10000); }
TEST(test_random_graphs_fast_math) { run_graphs(1, 2000); }

int main(void) {
    tn_init(NULL);
    tn__blas_enable(false);
    TH_RUN(test_random_graphs);
    TH_RUN(test_random_graphs_fast_math);
    TH_END();
}
