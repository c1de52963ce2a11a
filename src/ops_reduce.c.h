/* >>reductions: sum, prod, mean, max, min, argmax, argmin, all, any,
   logsumexp (params: i[0] bit mask of reduced axes, i[1] keepdims) and
   softmax, log_softmax (i[0] axis). Type rules, CPU kernels, labels,
   constructors.

   Kernel plan. The reduced axes are moved innermost logically (no copy):
   every output element folds one "box" of the input. Size-1 dims are dropped
   and adjacent dims merged where the strides allow, so a contiguous reduction
   becomes one run. Three shapes of loop:
     box     per output element, fold the box run by run (innermost reduced dim);
     lanes   when a kept dim is the one with the smallest stride (sum over
             axis 0 of a row-major matrix): fold whole rows into a block of
             accumulators, walking memory in order;
     split   one output, a large box: per-thread partial results, combined.
   Accumulators: double for floats (and for mean/logsumexp of ints), so a
   float32 sum of 2^24 elements is exact to float32 rounding; wrapping int64
   for int sums and products (NumPy); max/min/arg* compare exactly (int64 for
   ints). NaN propagates through max/min; argmax/argmin give the first NaN, or
   else the first extremum.
   logsumexp subtracts the max m: m + log(sum exp(x - m)); when m is not finite
   (every element -inf, a +inf, or a NaN) the result is m itself, so an all
   -inf row gives -inf without computing -inf - -inf. softmax uses the same
   max; a row with no finite maximum gives NaN (0/0) as SciPy and PyTorch do.

   Prologue (node->ext, set by the fusion pass): a tn_ew_program whose output 0
   is the reduction's input, computed from the node's inputs (broadcast). The
   box loop evaluates it run by run into a stack scratch buffer with
   tn__cpu_ew_run, so the fused input is never materialised. Limits: up to
   TN__RED_MAX_SRC inputs, output 0 only, the box loop only (no lanes/split
   shortcuts yet), none for softmax (its kind is TN_OPK_OTHER: i[0] is an axis).
   softmax may run in place (y aliasing x, same dtype and layout): each
   element is read before it is written. */
#include <math.h>
#include <string.h>

/* >>reduce_kinds: fold kinds of the kernel */
enum {
    TN__RK_SUM, TN__RK_PROD, TN__RK_MEAN, TN__RK_MAX, TN__RK_MIN,
    TN__RK_ARGMAX, TN__RK_ARGMIN, TN__RK_ALL, TN__RK_ANY,
    TN__RK_LSE1,      /* logsumexp pass 1: the max, in double */
    TN__RK_LSE2,      /* logsumexp pass 2: sum of exp(x - m) */
    TN__RK_COUNT
};

/* One accumulator: d for float folds, i for int folds and all/any, g the
   argmax index, m the max subtracted by logsumexp's second pass. */
typedef struct tn__racc { double d, m; int64_t i, g; } tn__racc;

/* Folds n elements at p (byte stride s) into one accumulator; k0 is the flat
   index of the first within the reduced box (for argmax). */
typedef void (*tn__rfold1_fn)(tn__racc *a, const char *p, int64_t n, int64_t s, int64_t k0);
#define TN__RED_LANES 256      /* accumulators per block in the lanes loop */
/* A block of accumulators, one array per field so the lanes loop streams. */
typedef struct tn__rlanes { double d[TN__RED_LANES], m[TN__RED_LANES]; int64_t i[TN__RED_LANES], g[TN__RED_LANES]; } tn__rlanes;
/* Folds element j of n (byte stride s) into lane j; k is their index. */
typedef void (*tn__rfoldl_fn)(tn__rlanes *a, const char *p, int64_t n, int64_t s, int64_t k);

/* Steps: D, I, G, MV are the accumulator's fields, v the element, K its index. */
#define TN__RSTEP_F_sum     D += v
#define TN__RSTEP_I_sum     I = (int64_t)((uint64_t)I + (uint64_t)v)
#define TN__RSTEP_F_prod    D *= v
#define TN__RSTEP_I_prod    I = (int64_t)((uint64_t)I * (uint64_t)v)
#define TN__RSTEP_F_mean    D += v
#define TN__RSTEP_I_mean    (void)v
#define TN__RSTEP_F_max     if (v > D || v != v) D = v
#define TN__RSTEP_I_max     if (v > I) I = v
#define TN__RSTEP_F_min     if (v < D || v != v) D = v
#define TN__RSTEP_I_min     if (v < I) I = v
#define TN__RSTEP_F_argmax  if (v > D || (v != v && D == D)) { D = v; G = K; }
#define TN__RSTEP_I_argmax  if (v > I) { I = v; G = K; }
#define TN__RSTEP_F_argmin  if (v < D || (v != v && D == D)) { D = v; G = K; }
#define TN__RSTEP_I_argmin  if (v < I) { I = v; G = K; }
#define TN__RSTEP_F_all     I &= (v != 0)
#define TN__RSTEP_I_all     I &= (v != 0)
#define TN__RSTEP_F_any     I |= (v != 0)
#define TN__RSTEP_I_any     I |= (v != 0)
#define TN__RSTEP_F_lse1    if (v > D || v != v) D = v
#define TN__RSTEP_I_lse1    (void)v
#define TN__RSTEP_F_lse2    D += EXPFN(v - MV)
#define TN__RSTEP_I_lse2    (void)v

/* FORCEF: the fold reads ints as double (mean, logsumexp). */
#define TN__RFORCEF_sum 0
#define TN__RFORCEF_prod 0
#define TN__RFORCEF_mean 1
#define TN__RFORCEF_max 0
#define TN__RFORCEF_min 0
#define TN__RFORCEF_argmax 0
#define TN__RFORCEF_argmin 0
#define TN__RFORCEF_all 0
#define TN__RFORCEF_any 0
#define TN__RFORCEF_lse1 1
#define TN__RFORCEF_lse2 1

/* KIND: 0 value in D or I by class, 1 boolean in I (all/any), 2 also an index in G. */
#define TN__RKIND_sum 0
#define TN__RKIND_prod 0
#define TN__RKIND_mean 0
#define TN__RKIND_max 0
#define TN__RKIND_min 0
#define TN__RKIND_argmax 2
#define TN__RKIND_argmin 2
#define TN__RKIND_all 1
#define TN__RKIND_any 1
#define TN__RKIND_lse1 0
#define TN__RKIND_lse2 0
/* MAXLIKE: the contiguous float loop may use partial extrema (1 max, 2 min). */
#define TN__RMAXLIKE_sum 0
#define TN__RMAXLIKE_prod 0
#define TN__RMAXLIKE_mean 0
#define TN__RMAXLIKE_max 1
#define TN__RMAXLIKE_min 2
#define TN__RMAXLIKE_argmax 0
#define TN__RMAXLIKE_argmin 0
#define TN__RMAXLIKE_all 0
#define TN__RMAXLIKE_any 0
#define TN__RMAXLIKE_lse1 1
#define TN__RMAXLIKE_lse2 0

/* exp for logsumexp's terms: float precision is enough for float16/float32 data. */
static double tn__rexp_d(double z) { return exp(z); }
static double tn__rexp_f(double z) { return (double)expf((float)z); }

/* SUMLIKE: the contiguous float loop may use partial sums. */
#define TN__RSUMLIKE_sum 1
#define TN__RSUMLIKE_mean 1
#define TN__RSUMLIKE_prod 0
#define TN__RSUMLIKE_max 0
#define TN__RSUMLIKE_min 0
#define TN__RSUMLIKE_argmax 0
#define TN__RSUMLIKE_argmin 0
#define TN__RSUMLIKE_all 0
#define TN__RSUMLIKE_any 0
#define TN__RSUMLIKE_lse1 0
#define TN__RSUMLIKE_lse2 0

#define TN__RELEM(OP, ISF, LF, LI) \
    if (ISF || TN__RFORCEF_##OP) { double v = (LF); TN__RSTEP_F_##OP; } \
    else { int64_t v = (LI); TN__RSTEP_I_##OP; }

#define TN__RFL(OP, ISF) (ISF || TN__RFORCEF_##OP)
#define TN__RFOLD_T(OP, SUF, T, ISF, LF, LI, EXPF) \
static void tn__rf1_##OP##_##SUF(tn__racc *a, const char *p, int64_t n, int64_t s, int64_t k0) { \
    double (*const EXPFN)(double) = EXPF; \
    double D = a->d; int64_t I = a->i, G = a->g; const double MV = a->m; \
    (void)MV; (void)k0; (void)EXPFN; \
    if (s == (int64_t)sizeof(T)) { \
        const T *q = (const T *)(const void *)p; \
        int64_t j = 0; \
        if (TN__RFL(OP, ISF) && TN__RSUMLIKE_##OP) { \
            /* four partial sums: independent chains the CPU can overlap */ \
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0; \
            for (; j + 4 <= n; j += 4) { \
                T x = q[j]; s0 += (LF); x = q[j + 1]; s1 += (LF); \
                x = q[j + 2]; s2 += (LF); x = q[j + 3]; s3 += (LF); \
            } \
            D += (s0 + s1) + (s2 + s3); \
        } \
        if (TN__RFL(OP, ISF) && TN__RMAXLIKE_##OP && n >= 8) { \
            /* four partial extrema; NaN wins in any of them */ \
            double m0 = D, m1 = D, m2 = D, m3 = D; \
            for (; j + 4 <= n; j += 4) { \
                double v0, v1, v2, v3; T x = q[j]; v0 = (LF); x = q[j + 1]; v1 = (LF); \
                x = q[j + 2]; v2 = (LF); x = q[j + 3]; v3 = (LF); \
                if (TN__RMAXLIKE_##OP == 1) { \
                    m0 = (v0 > m0 || v0 != v0) ? v0 : m0; m1 = (v1 > m1 || v1 != v1) ? v1 : m1; \
                    m2 = (v2 > m2 || v2 != v2) ? v2 : m2; m3 = (v3 > m3 || v3 != v3) ? v3 : m3; \
                } else { \
                    m0 = (v0 < m0 || v0 != v0) ? v0 : m0; m1 = (v1 < m1 || v1 != v1) ? v1 : m1; \
                    m2 = (v2 < m2 || v2 != v2) ? v2 : m2; m3 = (v3 < m3 || v3 != v3) ? v3 : m3; \
                } \
            } \
            const int64_t K = 0; (void)K;   /* unused: extrema carry no index */ \
            { double v = m0; TN__RSTEP_F_##OP; } { double v = m1; TN__RSTEP_F_##OP; } \
            { double v = m2; TN__RSTEP_F_##OP; } { double v = m3; TN__RSTEP_F_##OP; } \
        } \
        for (; j < n; j++) { T x = q[j]; const int64_t K = k0 + j; (void)K; TN__RELEM(OP, ISF, LF, LI) } \
    } else { \
        for (int64_t j = 0; j < n; j++) { \
            T x = *(const T *)(const void *)(p + j * s); const int64_t K = k0 + j; (void)K; \
            TN__RELEM(OP, ISF, LF, LI) \
        } \
    } \
    a->d = D; a->i = I; a->g = G; \
} \
static void tn__rfl_##OP##_##SUF(tn__rlanes *a, const char *p, int64_t n, int64_t s, int64_t K) { \
    double (*const EXPFN)(double) = EXPF; \
    double *restrict Da = a->d; const double *restrict Ma = a->m; \
    int64_t *restrict Ia = a->i, *restrict Ga = a->g; \
    (void)K; (void)EXPFN; \
    if (s == (int64_t)sizeof(T)) { \
        const T *restrict q = (const T *)(const void *)p; \
        int64_t j = 0; \
        for (; j + 4 <= n; j += 4) { /* four independent lanes per step */ \
            { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI) } j++; \
            { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI) } j++; \
            { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI) } j++; \
            { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI) } j -= 3; \
        } \
        for (; j < n; j++) { T x = q[j]; TN__RLANE_BODY(OP, ISF, LF, LI) } \
    } else { \
        for (int64_t j = 0; j < n; j++) { T x = *(const T *)(const void *)(p + j * s); TN__RLANE_BODY(OP, ISF, LF, LI) } \
    } \
}
/* Loads and stores only the fields the fold uses, so the loop can stream. */
#define TN__RLANE_BODY(OP, ISF, LF, LI) { \
    double D = Da[j]; int64_t I = Ia[j], G = TN__RKIND_##OP == 2 ? Ga[j] : 0; \
    const double MV = TN__RK_##OP##_USES_M ? Ma[j] : 0; (void)MV; (void)G; \
    TN__RELEM(OP, ISF, LF, LI) \
    if (TN__RFL(OP, ISF) && TN__RKIND_##OP != 1) Da[j] = D; \
    if (!TN__RFL(OP, ISF) || TN__RKIND_##OP != 0) Ia[j] = I; \
    if (TN__RKIND_##OP == 2) Ga[j] = G; }
#define TN__RK_sum_USES_M 0
#define TN__RK_prod_USES_M 0
#define TN__RK_mean_USES_M 0
#define TN__RK_max_USES_M 0
#define TN__RK_min_USES_M 0
#define TN__RK_argmax_USES_M 0
#define TN__RK_argmin_USES_M 0
#define TN__RK_all_USES_M 0
#define TN__RK_any_USES_M 0
#define TN__RK_lse1_USES_M 0
#define TN__RK_lse2_USES_M 1

#define TN__RFOLD_OP(OP) \
    TN__RFOLD_T(OP, b8,  uint8_t,  0, (double)x, (int64_t)x, tn__rexp_d) \
    TN__RFOLD_T(OP, i32, int32_t,  0, (double)x, (int64_t)x, tn__rexp_d) \
    TN__RFOLD_T(OP, i64, int64_t,  0, (double)x, (int64_t)x, tn__rexp_d) \
    TN__RFOLD_T(OP, f16, uint16_t, 1, (double)tn_f16_to_f32(x), 0, tn__rexp_f) \
    TN__RFOLD_T(OP, f32, float,    1, (double)x, 0, tn__rexp_f) \
    TN__RFOLD_T(OP, f64, double,   1, (double)x, 0, tn__rexp_d)

#define TN__RFOLD_OPS(X) X(sum) X(prod) X(mean) X(max) X(min) X(argmax) X(argmin) X(all) X(any) X(lse1) X(lse2)
TN__RFOLD_OPS(TN__RFOLD_OP)

#define TN__RTAB_ROW1(OP) { NULL, tn__rf1_##OP##_b8, tn__rf1_##OP##_i32, tn__rf1_##OP##_i64, tn__rf1_##OP##_f16, tn__rf1_##OP##_f32, tn__rf1_##OP##_f64 },
#define TN__RTAB_ROWL(OP) { NULL, tn__rfl_##OP##_b8, tn__rfl_##OP##_i32, tn__rfl_##OP##_i64, tn__rfl_##OP##_f16, tn__rfl_##OP##_f32, tn__rfl_##OP##_f64 },
static const tn__rfold1_fn tn__rfold1[TN__RK_COUNT][TN_DTYPE_COUNT] = { TN__RFOLD_OPS(TN__RTAB_ROW1) };
static const tn__rfoldl_fn tn__rfoldl[TN__RK_COUNT][TN_DTYPE_COUNT] = { TN__RFOLD_OPS(TN__RTAB_ROWL) };
_Static_assert(TN_DTYPE_COUNT == 7, "reduction fold tables list one column per dtype");

/* Folds in double: floats, and ints where the fold converts them. */
static bool tn__rk_float(int rk, tn_dtype t) {
    return tn_dtype_is_float(t) || rk == TN__RK_MEAN || rk == TN__RK_LSE1 || rk == TN__RK_LSE2;
}

static void tn__racc_init(tn__racc *a, int rk) {
    a->m = 0; a->g = 0; a->d = 0; a->i = 0;
    switch (rk) {
    case TN__RK_PROD: a->d = 1; a->i = 1; break;
    case TN__RK_MAX: case TN__RK_ARGMAX: case TN__RK_LSE1: a->d = -INFINITY; a->i = INT64_MIN; break;
    case TN__RK_MIN: case TN__RK_ARGMIN: a->d = INFINITY; a->i = INT64_MAX; break;
    case TN__RK_ALL: a->i = 1; break;
    default: break;
    }
}

/* Combines partial b (a later part of the box) into a. */
static void tn__racc_combine(tn__racc *a, const tn__racc *b, int rk, bool fl) {
    switch (rk) {
    case TN__RK_SUM: case TN__RK_MEAN: case TN__RK_LSE2:
        a->d += b->d; a->i = (int64_t)((uint64_t)a->i + (uint64_t)b->i); break;
    case TN__RK_PROD: a->d *= b->d; a->i = (int64_t)((uint64_t)a->i * (uint64_t)b->i); break;
    case TN__RK_MAX: case TN__RK_LSE1:
        if (fl) { if (b->d > a->d || b->d != b->d) a->d = b->d; } else if (b->i > a->i) a->i = b->i;
        break;
    case TN__RK_MIN:
        if (fl) { if (b->d < a->d || b->d != b->d) a->d = b->d; } else if (b->i < a->i) a->i = b->i;
        break;
    case TN__RK_ARGMAX:
        if (fl ? (b->d > a->d || (b->d != b->d && a->d == a->d)) : b->i > a->i) *a = *b;
        break;
    case TN__RK_ARGMIN:
        if (fl ? (b->d < a->d || (b->d != b->d && a->d == a->d)) : b->i < a->i) *a = *b;
        break;
    case TN__RK_ALL: a->i &= b->i; break;
    case TN__RK_ANY: a->i |= b->i; break;
    default: break;
    }
}

/* >>reduce_store: one output element from its accumulator */
static void tn__rstore(char *y, tn_dtype t, double d, int64_t i, bool use_int) {
    switch (t) {
    case TN_BOOL: *(uint8_t *)y = (uint8_t)(use_int ? i != 0 : d != 0); break;
    case TN_I32: *(int32_t *)(void *)y = (int32_t)i; break;
    case TN_I64: *(int64_t *)(void *)y = i; break;
    case TN_F16: *(uint16_t *)(void *)y = tn_f32_to_f16((float)(use_int ? (double)i : d)); break;
    case TN_F32: *(float *)(void *)y = (float)(use_int ? (double)i : d); break;
    case TN_F64: *(double *)(void *)y = use_int ? (double)i : d; break;
    default: break;
    }
}

/* >>reduce_plan */
#define TN__RED_MAX_SRC 16     /* prologue inputs the kernel accepts */
#define TN__RED_SCRATCH 1024   /* prologue elements evaluated per block */

typedef struct tn__rplan {
    int op, rk;                 /* TN_OP_*, TN__RK_* (pass 1 for logsumexp) */
    tn_dtype xt, yt;            /* dtype of the reduction's input, of its output */
    bool fl;                    /* accumulate in double */
    int nsrc;                   /* 1, or the prologue's inputs */
    const tn_ew_program *prog;  /* NULL: no prologue */
    tn_array *const *in;
    const char *x[TN__RED_MAX_SRC];
    char *y;
    int nk, nr;                 /* kept and reduced dims after merging */
    int64_t kn[TN_MAX_DIMS], ky[TN_MAX_DIMS], kx[TN__RED_MAX_SRC][TN_MAX_DIMS];
    int64_t rn[TN_MAX_DIMS], rx[TN__RED_MAX_SRC][TN_MAX_DIMS];
    int64_t M, N;               /* output elements, reduced elements */
    int64_t split_lo[65];       /* split loop: part boundaries on reduced dim 0 */
    tn__racc part[64];          /* split loop: partial results */
    int split_rk;               /* split loop: the pass being run */
    double split_m;             /* split loop: logsumexp's max in pass 2 */
} tn__rplan;

/* Broadcast strides of a (right-aligned) against a shape of ndim dims. */
static void tn__rbcast_strides(const tn_array *a, int ndim, const int64_t *shape, int64_t *st) {
    int off = ndim - a->ndim;
    for (int d = 0; d < ndim; d++) {
        int ad = d - off;
        st[d] = (ad < 0 || (a->shape[ad] == 1 && shape[d] != 1)) ? 0 : a->strides[ad];
    }
}

static bool tn__rmergeable(const int64_t *n, const int64_t (*st)[TN_MAX_DIMS], int nsrc,
                           const int64_t *extra, int a, int b) {
    for (int s = 0; s < nsrc; s++) if (st[s][a] != n[b] * st[s][b]) return false;
    return !extra || extra[a] == n[b] * extra[b];
}

/* Builds the plan: logical input shape, per-source strides, kept/reduced dims. */
static tn_result tn__rplan_build(tn__rplan *P, const tn_var *node, tn_array *const *in,
                                 const tn_array *y, uint64_t mask, bool keepdims) {
    int ndim;
    int64_t shape[TN_MAX_DIMS], st[TN__RED_MAX_SRC][TN_MAX_DIMS];
    P->prog = (const tn_ew_program *)node->ext;
    P->in = in;
    P->yt = y->dtype;
    P->y = (char *)y->data;
    if (P->prog) {
        P->nsrc = P->prog->n_in;
        if (P->nsrc > TN__RED_MAX_SRC || P->prog->n_out < 1)
            return tn__err(TN_ERR_UNSUPPORTED, "%s: a fused prologue with %d inputs and %d outputs (the CPU kernel takes up to %d inputs)",
                           tn__op_def(node->op)->name, P->nsrc, P->prog->n_out, TN__RED_MAX_SRC);
        P->xt = P->prog->out_dtype[0];
        ndim = 0;
        for (int s = 0; s < P->nsrc; s++) if (in[s]->ndim > ndim) ndim = in[s]->ndim;
        for (int d = 0; d < ndim; d++) {
            shape[d] = 1;
            for (int s = 0; s < P->nsrc; s++) {
                int ad = d - (ndim - in[s]->ndim);
                if (ad >= 0 && in[s]->shape[ad] != 1) shape[d] = in[s]->shape[ad];
            }
        }
        for (int s = 0; s < P->nsrc; s++) {
            tn__rbcast_strides(in[s], ndim, shape, st[s]);
            P->x[s] = (const char *)in[s]->data;
        }
    } else {
        P->nsrc = 1;
        P->xt = in[0]->dtype;
        ndim = in[0]->ndim;
        memcpy(shape, in[0]->shape, sizeof(int64_t) * (size_t)ndim);
        memcpy(st[0], in[0]->strides, sizeof(int64_t) * (size_t)ndim);
        P->x[0] = (const char *)in[0]->data;
    }
    P->nk = P->nr = 0;
    P->M = P->N = 1;
    int od = 0;
    for (int d = 0; d < ndim; d++) {
        bool red = (mask >> d) & 1;
        if (red) P->N *= shape[d]; else P->M *= shape[d];
        int64_t ys = 0;
        if (!red || keepdims) { ys = y->strides[od]; od++; }
        if (shape[d] == 1) continue;
        if (red) {
            int r = P->nr++;
            P->rn[r] = shape[d];
            for (int s = 0; s < P->nsrc; s++) P->rx[s][r] = st[s][d];
            if (r > 0 && tn__rmergeable(P->rn, (const int64_t (*)[TN_MAX_DIMS])P->rx, P->nsrc, NULL, r - 1, r)) {
                P->rn[r - 1] *= P->rn[r];
                for (int s = 0; s < P->nsrc; s++) P->rx[s][r - 1] = P->rx[s][r];
                P->nr--;
            }
        } else {
            int k = P->nk++;
            P->kn[k] = shape[d]; P->ky[k] = ys;
            for (int s = 0; s < P->nsrc; s++) P->kx[s][k] = st[s][d];
            if (k > 0 && tn__rmergeable(P->kn, (const int64_t (*)[TN_MAX_DIMS])P->kx, P->nsrc, P->ky, k - 1, k)) {
                P->kn[k - 1] *= P->kn[k];
                P->ky[k - 1] = P->ky[k];
                for (int s = 0; s < P->nsrc; s++) P->kx[s][k - 1] = P->kx[s][k];
                P->nk--;
            }
        }
    }
    TN_ASSERT(od == y->ndim);
    if (P->nr == 0) {   /* nothing left to reduce: one run of one element */
        P->nr = 1; P->rn[0] = 1;
        for (int s = 0; s < P->nsrc; s++) P->rx[s][0] = 0;
    }
    P->fl = tn__rk_float(P->rk, P->xt);
    return TN_OK;
}

/* Offsets of output element o: per source into the input, and into y. */
static void tn__rplan_outer(const tn__rplan *P, int64_t o, int64_t *xoff, int64_t *yoff) {
    for (int s = 0; s < P->nsrc; s++) xoff[s] = 0;
    *yoff = 0;
    for (int k = P->nk - 1; k >= 0; k--) {
        int64_t i = o % P->kn[k];
        o /= P->kn[k];
        *yoff += i * P->ky[k];
        for (int s = 0; s < P->nsrc; s++) xoff[s] += i * P->kx[s][k];
    }
}

/* One run of the prologue, n elements from offsets xoff along reduced dim
   rd, evaluated in blocks into scratch and folded. */
static tn_result tn__rprologue_run(const tn__rplan *P, tn__rfold1_fn f, tn__racc *a,
                                   const int64_t *xoff, int rd, int64_t n, int64_t k0) {
    double scratch[TN__RED_SCRATCH];
    tn_array views[TN__RED_MAX_SRC], outv;
    tn_array *vp[TN__RED_MAX_SRC], *op = &outv;
    size_t es = tn_dtype_size(P->xt);
    for (int64_t j = 0; j < n; j += TN__RED_SCRATCH) {
        int64_t m = n - j < TN__RED_SCRATCH ? n - j : TN__RED_SCRATCH;
        for (int s = 0; s < P->nsrc; s++) {
            memset(&views[s], 0, sizeof views[s]);
            views[s].dtype = P->in[s]->dtype;
            views[s].ndim = 1;
            views[s].shape[0] = m;
            views[s].strides[0] = P->rx[s][rd];
            views[s].data = (void *)(P->x[s] + xoff[s] + j * P->rx[s][rd]);
            views[s].device = TN_HOST;
            vp[s] = &views[s];
        }
        memset(&outv, 0, sizeof outv);
        outv.dtype = P->xt; outv.ndim = 1; outv.shape[0] = m;
        outv.strides[0] = (int64_t)es; outv.data = scratch; outv.device = TN_HOST;
        tn_result r = tn__cpu_ew_run(P->prog, vp, &op);
        if (r != TN_OK) return r;
        f(a, (const char *)scratch, m, (int64_t)es, k0 + j);
    }
    return TN_OK;
}

/* Folds the box at xoff (reduced dim 0 restricted to [lo, hi)) into a. */
static tn_result tn__rbox(const tn__rplan *P, int rk, tn__racc *a, const int64_t *xoff0, int64_t lo, int64_t hi) {
    tn__rfold1_fn f = tn__rfold1[rk][P->xt];
    int nr = P->nr, last = nr - 1;
    if (P->N == 0) return TN_OK;
    int64_t idx[TN_MAX_DIMS] = {0}, inner[TN_MAX_DIMS];
    inner[last] = 1;
    for (int d = last - 1; d >= 0; d--) inner[d] = inner[d + 1] * P->rn[d + 1];
    if (nr == 1) {   /* the box is one run */
        int64_t xoff[TN__RED_MAX_SRC];
        for (int s = 0; s < P->nsrc; s++) xoff[s] = xoff0[s] + lo * P->rx[s][0];
        if (P->prog) return tn__rprologue_run(P, f, a, xoff, 0, hi - lo, lo);
        f(a, P->x[0] + xoff[0], hi - lo, P->rx[0][0], lo);
        return TN_OK;
    }
    idx[0] = lo;
    if (lo >= hi) return TN_OK;
    for (;;) {
        int64_t xoff[TN__RED_MAX_SRC], k0 = 0;
        for (int d = 0; d < last; d++) k0 += idx[d] * inner[d];
        for (int s = 0; s < P->nsrc; s++) {
            xoff[s] = xoff0[s];
            for (int d = 0; d < last; d++) xoff[s] += idx[d] * P->rx[s][d];
        }
        if (P->prog) {
            tn_result r = tn__rprologue_run(P, f, a, xoff, last, P->rn[last], k0);
            if (r != TN_OK) return r;
        } else {
            f(a, P->x[0] + xoff[0], P->rn[last], P->rx[0][last], k0);
        }
        int d = last - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < (d == 0 ? hi : P->rn[d])) break;
            idx[d] = 0;
        }
        if (d < 0) return TN_OK;
    }
}

/* Writes the final value of accumulator a at y. */
static void tn__rfinish(const tn__rplan *P, const tn__racc *a, char *y) {
    switch (P->op) {
    case TN_OP_MEAN: tn__rstore(y, P->yt, a->d / (double)P->N, 0, false); break;
    case TN_OP_ARGMAX: case TN_OP_ARGMIN: tn__rstore(y, P->yt, 0, a->g, true); break;
    case TN_OP_ALL: case TN_OP_ANY: tn__rstore(y, P->yt, 0, a->i, true); break;
    case TN_OP_LOGSUMEXP: tn__rstore(y, P->yt, isfinite(a->m) ? a->m + log(a->d) : a->m, 0, false); break;
    default: tn__rstore(y, P->yt, a->d, a->i, !P->fl); break;
    }
}

/* Between logsumexp's passes: m takes the max, the sum restarts. A
   non-finite max is the answer (see the top of the file): no second pass. */
static void tn__rlse_mid(tn__racc *a) {
    a->m = a->d;
    a->d = 0;
}

/* The whole box of one output element, both passes for logsumexp. */
static tn_result tn__rbox_full(const tn__rplan *P, tn__racc *a, const int64_t *xoff, int64_t lo, int64_t hi) {
    tn__racc_init(a, P->rk);
    tn_result r = tn__rbox(P, P->rk, a, xoff, lo, hi);
    if (r != TN_OK || P->op != TN_OP_LOGSUMEXP) return r;
    tn__rlse_mid(a);
    if (!isfinite(a->m)) return TN_OK;
    return tn__rbox(P, TN__RK_LSE2, a, xoff, lo, hi);
}

typedef struct tn__rjob { tn__rplan *P; tn_result r; } tn__rjob;

static void tn__rbox_range(void *ctx, int64_t lo, int64_t hi) {
    tn__rjob *J = (tn__rjob *)ctx;
    const tn__rplan *P = J->P;
    for (int64_t o = lo; o < hi; o++) {
        int64_t xoff[TN__RED_MAX_SRC], yoff;
        tn__racc a;
        tn__rplan_outer(P, o, xoff, &yoff);
        tn_result r = tn__rbox_full(P, &a, xoff, 0, P->rn[0]);
        if (r != TN_OK) { J->r = r; return; }
        tn__rfinish(P, &a, P->y + yoff);
    }
}

/* Lanes loop: units are (outer output index, block of the innermost kept dim). */
static void tn__rlanes_pass(const tn__rplan *P, int rk, tn__rlanes *acc, int64_t nl, const char *x0) {
    tn__rfoldl_fn f = tn__rfoldl[rk][P->xt];
    int nr = P->nr;
    int64_t idx[TN_MAX_DIMS] = {0}, ls = P->kx[0][P->nk - 1];
    for (int64_t k = 0;; k++) {
        int64_t off = 0;
        for (int d = 0; d < nr; d++) off += idx[d] * P->rx[0][d];
        f(acc, x0 + off, nl, ls, k);
        int d = nr - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < P->rn[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

static void tn__rlanes_range(void *ctx, int64_t lo, int64_t hi) {
    tn__rjob *J = (tn__rjob *)ctx;
    const tn__rplan *P = J->P;
    tn__rlanes acc;
    tn__racc a;
    int64_t n0 = P->kn[P->nk - 1], nb = (n0 + TN__RED_LANES - 1) / TN__RED_LANES;
    for (int64_t u = lo; u < hi; u++) {
        int64_t outer = u / nb, b = u % nb, j0 = b * TN__RED_LANES;
        int64_t nl = n0 - j0 < TN__RED_LANES ? n0 - j0 : TN__RED_LANES;
        int64_t xoff[1], yoff;
        tn__rplan_outer(P, outer * n0 + j0, xoff, &yoff);
        const char *x0 = P->x[0] + xoff[0];
        tn__racc_init(&a, P->rk);
        for (int64_t j = 0; j < nl; j++) { acc.d[j] = a.d; acc.m[j] = a.m; acc.i[j] = a.i; acc.g[j] = a.g; }
        tn__rlanes_pass(P, P->rk, &acc, nl, x0);
        if (P->op == TN_OP_LOGSUMEXP) {
            /* lanes with a non-finite max are done (their sum runs with 0
               and is ignored); the others sum exp(x - max) */
            double keep[TN__RED_LANES];
            for (int64_t j = 0; j < nl; j++) {
                keep[j] = acc.d[j];
                acc.m[j] = isfinite(acc.d[j]) ? acc.d[j] : 0;
                acc.d[j] = 0;
            }
            tn__rlanes_pass(P, TN__RK_LSE2, &acc, nl, x0);
            for (int64_t j = 0; j < nl; j++) acc.m[j] = keep[j];
        }
        int64_t ys = P->ky[P->nk - 1];
        for (int64_t j = 0; j < nl; j++) {
            a.d = acc.d[j]; a.m = acc.m[j]; a.i = acc.i[j]; a.g = acc.g[j];
            tn__rfinish(P, &a, P->y + yoff + j * ys);
        }
    }
}

/* Split loop (one output): part p folds reduced dim 0 over [split_lo[p], split_lo[p+1]). */
static void tn__rsplit_range(void *ctx, int64_t lo, int64_t hi) {
    tn__rjob *J = (tn__rjob *)ctx;
    tn__rplan *P = J->P;
    int64_t xoff[TN__RED_MAX_SRC] = {0};
    for (int64_t p = lo; p < hi; p++) {
        tn__racc_init(&P->part[p], P->split_rk);
        P->part[p].m = P->split_m;
        tn_result r = tn__rbox(P, P->split_rk, &P->part[p], xoff, P->split_lo[p], P->split_lo[p + 1]);
        if (r != TN_OK) J->r = r;
    }
}

static tn_result tn__rsplit_pass(tn__rplan *P, int rk, int nparts, tn__racc *a) {
    tn__rjob J = { P, TN_OK };
    P->split_rk = rk;
    tn__parallel_for(nparts, 1, tn__rsplit_range, &J);
    if (J.r != TN_OK) return J.r;
    *a = P->part[0];
    for (int p = 1; p < nparts; p++) tn__racc_combine(a, &P->part[p], rk, P->fl);
    return TN_OK;
}

static tn_result tn__rsplit(tn__rplan *P, int nparts) {
    tn__racc a;
    for (int p = 0; p <= nparts; p++) P->split_lo[p] = P->rn[0] * p / nparts;
    P->split_m = 0;
    tn_result r = tn__rsplit_pass(P, P->rk, nparts, &a);
    if (r != TN_OK) return r;
    if (P->op == TN_OP_LOGSUMEXP) {
        tn__rlse_mid(&a);
        if (isfinite(a.m)) {
            double m = a.m;
            P->split_m = m;
            r = tn__rsplit_pass(P, TN__RK_LSE2, nparts, &a);
            if (r != TN_OK) return r;
            a.m = m;
        }
    }
    tn__rfinish(P, &a, P->y);
    return TN_OK;
}

#define TN__RED_GRAIN 32768    /* input elements per thread before splitting pays */

static int tn__rk_of(int op) {
    switch (op) {
    case TN_OP_SUM: return TN__RK_SUM;
    case TN_OP_PROD: return TN__RK_PROD;
    case TN_OP_MEAN: return TN__RK_MEAN;
    case TN_OP_MAX: return TN__RK_MAX;
    case TN_OP_MIN: return TN__RK_MIN;
    case TN_OP_ARGMAX: return TN__RK_ARGMAX;
    case TN_OP_ARGMIN: return TN__RK_ARGMIN;
    case TN_OP_ALL: return TN__RK_ALL;
    case TN_OP_ANY: return TN__RK_ANY;
    default: return TN__RK_LSE1;
    }
}

static bool tn__rop_needs_nonempty(int op) {
    return op == TN_OP_MAX || op == TN_OP_MIN || op == TN_OP_ARGMAX || op == TN_OP_ARGMIN;
}

static void tn__reduce_label(const tn_var *node, char *buf, size_t cap);

static tn_result tn__reduce_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__rplan *P, plan;
    P = &plan;
    P->op = node->op;
    P->rk = tn__rk_of(node->op);
    uint64_t mask = (uint64_t)node->p.i[0];
    tn_result r = tn__rplan_build(P, node, in, out[0], mask, node->p.i[1] != 0);
    if (r != TN_OK) return r;
    if (P->M == 0) return TN_OK;
    if (P->N == 0 && tn__rop_needs_nonempty(node->op)) {
        char lab[96], sb[128];
        tn__reduce_label(node, lab, sizeof lab);
        const tn_array *x = in[0];
        return tn__err(TN_ERR_SHAPE, "%s: zero-size reduction of an input of shape %s: %s has no identity",
                       lab, tn__shape_str(x->ndim, x->shape, sb), tn__op_def(node->op)->name);
    }
    tn__rjob J = { P, TN_OK };
    int nt = tn__num_threads();
    int64_t total = P->M * (P->N ? P->N : 1);
    bool lanes = !P->prog && P->nk > 0 && P->N > 1;
    if (lanes) {
        int64_t ls = P->kx[0][P->nk - 1];
        ls = ls < 0 ? -ls : ls;
        for (int d = 0; d < P->nr; d++) {
            int64_t rs = P->rx[0][d] < 0 ? -P->rx[0][d] : P->rx[0][d];
            if (rs <= ls) lanes = false;
        }
    }
    if (lanes) {
        int64_t n0 = P->kn[P->nk - 1], nb = (n0 + TN__RED_LANES - 1) / TN__RED_LANES;
        int64_t units = P->M / n0 * nb, per = P->N * (n0 < TN__RED_LANES ? n0 : TN__RED_LANES);
        tn__parallel_for(units, TN__RED_GRAIN / per + 1, tn__rlanes_range, &J);
    } else if (P->M == 1 && nt > 1 && total >= 2 * TN__RED_GRAIN && P->rn[0] >= 2) {
        int64_t parts = total / TN__RED_GRAIN;
        if (parts > nt * 4) parts = nt * 4;
        if (parts > 63) parts = 63;
        if (parts > P->rn[0]) parts = P->rn[0];
        return tn__rsplit(P, (int)parts);
    } else {
        tn__parallel_for(P->M, TN__RED_GRAIN / (P->N ? P->N : 1) + 1, tn__rbox_range, &J);
    }
    return J.r;
}

/* >>softmax: rows along the axis, three passes (max, sum of exp, write). */
typedef struct tn__smplan {
    tn__rplan r;                /* kept dims and the axis run, as a reduction */
    bool logsm;
    int64_t ys;                 /* output stride along the axis */
} tn__smplan;

/* SE: the output holds exp(x - m) exactly enough to be scaled in place
   (float32, float64): one exp per element; float16 output recomputes it. */
#define TN__SMAX_T(SUF, T, LF, OT, STORE, LOADY, SE, EXPF) \
static void tn__smrow_##SUF(const char *xp, int64_t n, int64_t xs, char *yp, int64_t ys, bool logsm) { \
    double m = -INFINITY, s = 0; \
    for (int64_t j = 0; j < n; j++) { T x = *(const T *)(const void *)(xp + j * xs); double v = (LF); if (v > m || v != v) m = v; } \
    for (int64_t j = 0; j < n; j++) { \
        T x = *(const T *)(const void *)(xp + j * xs); double e = EXPF((LF) - m); s += e; \
        if (SE && !logsm) { double r = e; OT *q = (OT *)(void *)(yp + j * ys); STORE; } \
    } \
    double ls = log(s), inv = 1.0 / s; \
    for (int64_t j = 0; j < n; j++) { \
        T x = *(const T *)(const void *)(xp + j * xs); \
        OT *q = (OT *)(void *)(yp + j * ys); \
        double r = logsm ? (LF) - m - ls : SE ? (double)(LOADY) * inv : EXPF((LF) - m) * inv; \
        (void)x; STORE; \
    } \
} \
static void tn__smlanes_##SUF(const char *xp, int64_t n, int64_t xs, int64_t nl, int64_t ls_, \
                              char *yp, int64_t ys, int64_t yls, bool logsm) { \
    double m[TN__RED_LANES], s[TN__RED_LANES]; \
    for (int64_t l = 0; l < nl; l++) { m[l] = -INFINITY; s[l] = 0; } \
    for (int64_t j = 0; j < n; j++) for (int64_t l = 0; l < nl; l++) { \
        T x = *(const T *)(const void *)(xp + j * xs + l * ls_); double v = (LF); \
        if (v > m[l] || v != v) m[l] = v; } \
    for (int64_t j = 0; j < n; j++) for (int64_t l = 0; l < nl; l++) { \
        T x = *(const T *)(const void *)(xp + j * xs + l * ls_); double e = EXPF((LF) - m[l]); s[l] += e; \
        if (SE && !logsm) { double r = e; OT *q = (OT *)(void *)(yp + j * ys + l * yls); STORE; } } \
    for (int64_t l = 0; l < nl; l++) s[l] = logsm ? log(s[l]) : 1.0 / s[l]; \
    for (int64_t j = 0; j < n; j++) for (int64_t l = 0; l < nl; l++) { \
        T x = *(const T *)(const void *)(xp + j * xs + l * ls_); \
        OT *q = (OT *)(void *)(yp + j * ys + l * yls); \
        double r = logsm ? (LF) - m[l] - s[l] : SE ? (double)(LOADY) * s[l] : EXPF((LF) - m[l]) * s[l]; \
        (void)x; STORE; \
    } \
}
TN__SMAX_T(b8,  uint8_t,  (double)x, double, *q = r, *q, 1, tn__rexp_d)
TN__SMAX_T(i32, int32_t,  (double)x, double, *q = r, *q, 1, tn__rexp_d)
TN__SMAX_T(i64, int64_t,  (double)x, double, *q = r, *q, 1, tn__rexp_d)
TN__SMAX_T(f16, uint16_t, (double)tn_f16_to_f32(x), uint16_t, *q = tn_f32_to_f16((float)r), 0, 0, tn__rexp_f)
TN__SMAX_T(f32, float,    (double)x, float, *q = (float)r, *q, 1, tn__rexp_f)
TN__SMAX_T(f64, double,   (double)x, double, *q = r, *q, 1, tn__rexp_d)

typedef void (*tn__smrow_fn)(const char *, int64_t, int64_t, char *, int64_t, bool);
typedef void (*tn__smlanes_fn)(const char *, int64_t, int64_t, int64_t, int64_t, char *, int64_t, int64_t, bool);
static const tn__smrow_fn tn__smrow[TN_DTYPE_COUNT] = { NULL, tn__smrow_b8, tn__smrow_i32, tn__smrow_i64, tn__smrow_f16, tn__smrow_f32, tn__smrow_f64 };
static const tn__smlanes_fn tn__smlanes[TN_DTYPE_COUNT] = { NULL, tn__smlanes_b8, tn__smlanes_i32, tn__smlanes_i64, tn__smlanes_f16, tn__smlanes_f32, tn__smlanes_f64 };

static void tn__smrow_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__smplan *S = (const tn__smplan *)ctx;
    const tn__rplan *P = &S->r;
    for (int64_t o = lo; o < hi; o++) {
        int64_t xoff[1], yoff;
        tn__rplan_outer(P, o, xoff, &yoff);
        tn__smrow[P->xt](P->x[0] + xoff[0], P->rn[0], P->rx[0][0], P->y + yoff, S->ys, S->logsm);
    }
}

static void tn__smlanes_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__smplan *S = (const tn__smplan *)ctx;
    const tn__rplan *P = &S->r;
    int64_t n0 = P->kn[P->nk - 1], nb = (n0 + TN__RED_LANES - 1) / TN__RED_LANES;
    for (int64_t u = lo; u < hi; u++) {
        int64_t outer = u / nb, j0 = (u % nb) * TN__RED_LANES;
        int64_t nl = n0 - j0 < TN__RED_LANES ? n0 - j0 : TN__RED_LANES;
        int64_t xoff[1], yoff;
        tn__rplan_outer(P, outer * n0 + j0, xoff, &yoff);
        tn__smlanes[P->xt](P->x[0] + xoff[0], P->rn[0], P->rx[0][0], nl, P->kx[0][P->nk - 1],
                           P->y + yoff, S->ys, P->ky[P->nk - 1], S->logsm);
    }
}

static tn_result tn__softmax_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__smplan S;
    int axis = (int)node->p.i[0];
    if (node->ext)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: a fused prologue is not supported", tn__op_def(node->op)->name);
    S.r.op = node->op;
    S.r.rk = TN__RK_MAX;
    tn_result r = tn__rplan_build(&S.r, node, in, out[0], (uint64_t)1 << axis, true);
    if (r != TN_OK) return r;
    S.logsm = node->op == TN_OP_LOG_SOFTMAX;
    S.ys = out[0]->strides[axis];
    tn__rplan *P = &S.r;
    if (P->M == 0 || P->N == 0) return TN_OK;
    if (P->N == 1) S.ys = 0;   /* the axis was dropped; its one element sits at offset 0 */
    bool lanes = P->nk > 0 && P->N > 1;
    if (lanes) {
        int64_t ls = P->kx[0][P->nk - 1], rs = P->rx[0][0];
        lanes = (ls < 0 ? -ls : ls) < (rs < 0 ? -rs : rs);
    }
    if (lanes) {
        int64_t n0 = P->kn[P->nk - 1], nb = (n0 + TN__RED_LANES - 1) / TN__RED_LANES;
        int64_t per = P->N * (n0 < TN__RED_LANES ? n0 : TN__RED_LANES);
        tn__parallel_for(P->M / n0 * nb, TN__RED_GRAIN / per + 1, tn__smlanes_range, &S);
    } else {
        tn__parallel_for(P->M, TN__RED_GRAIN / P->N + 1, tn__smrow_range, &S);
    }
    return TN_OK;
}

/* >>reduce_infer: NumPy's dtype rules */
static tn_dtype tn__reduce_dtype(int op, tn_dtype t) {
    switch (op) {
    case TN_OP_SUM: case TN_OP_PROD: return tn_dtype_is_float(t) ? t : TN_I64;
    case TN_OP_MEAN: case TN_OP_LOGSUMEXP: case TN_OP_SOFTMAX: case TN_OP_LOG_SOFTMAX:
        return tn_dtype_is_float(t) ? t : TN_F64;
    case TN_OP_ARGMAX: case TN_OP_ARGMIN: return TN_I64;
    case TN_OP_ALL: case TN_OP_ANY: return TN_BOOL;
    default: return t;   /* max, min */
    }
}

/* The type of the reduction's input: in[0], or the prologue's output 0 over
   the broadcast of the node's inputs. */
static tn_result tn__reduce_src_type(const tn_var *node, const tn_type *in, tn_type *src, const char *lab) {
    const tn_ew_program *prog = (const tn_ew_program *)node->ext;
    if (!prog) {
        if (node->n_in != 1) return tn__err(TN_ERR_INVALID, "%s takes 1 input, got %d", lab, node->n_in);
        *src = in[0];
        return TN_OK;
    }
    if (prog->n_in != node->n_in || prog->n_out < 1)
        return tn__err(TN_ERR_INTERNAL, "%s: prologue takes %d inputs, node has %d", lab, prog->n_in, node->n_in);
    memset(src, 0, sizeof *src);
    src->dtype = prog->out_dtype[0];
    for (int s = 0; s < node->n_in; s++) if (in[s].ndim > src->ndim) src->ndim = in[s].ndim;
    for (int d = 0; d < src->ndim; d++) {
        int64_t n = 1;
        bool bc = true;
        for (int s = 0; s < node->n_in; s++) {
            int ad = d - (src->ndim - in[s].ndim);
            if (ad < 0 || in[s].bcast[ad] || in[s].shape[ad] == 1) continue;
            bc = false;
            int64_t m = in[s].shape[ad];
            if (m < 0) continue;
            if (n != 1 && n != -1 && n != m) {
                char sb[128];
                return tn__err(TN_ERR_SHAPE, "%s: prologue input %d of shape %s does not broadcast (dim %d: %lld vs %lld)",
                               lab, s, tn__shape_str(in[s].ndim, in[s].shape, sb), d, (long long)n, (long long)m);
            }
            n = m;
        }
        if (!bc && n == 1) {   /* only unknown dims besides 1s */
            for (int s = 0; s < node->n_in; s++) {
                int ad = d - (src->ndim - in[s].ndim);
                if (ad >= 0 && in[s].shape[ad] < 0 && !in[s].bcast[ad]) n = -1;
            }
        }
        src->shape[d] = n;
        src->bcast[d] = bc;
    }
    return TN_OK;
}

static tn_result tn__reduce_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    char lab[96], sb[128];
    tn_type x;
    tn__reduce_label(node, lab, sizeof lab);
    tn_result r = tn__reduce_src_type(node, in, &x, lab);
    if (r != TN_OK) return r;
    uint64_t mask = (uint64_t)node->p.i[0];
    bool keep = node->p.i[1] != 0;
    if (x.ndim < 64 && (mask >> x.ndim) != 0)
        return tn__err(TN_ERR_AXIS, "%s: axis out of range for an input of ndim %d", lab, x.ndim);
    bool empty_red = false, empty_out = false, unknown = false;
    memset(out, 0, sizeof *out);
    out->dtype = tn__reduce_dtype(node->op, x.dtype);
    for (int d = 0; d < x.ndim; d++) {
        bool red = (mask >> d) & 1;
        if (x.shape[d] < 0) unknown = true;
        if (red) {
            if (x.shape[d] == 0) empty_red = true;
            if (keep) { out->shape[out->ndim] = 1; out->bcast[out->ndim] = true; out->ndim++; }
        } else {
            if (x.shape[d] == 0) empty_out = true;
            out->shape[out->ndim] = x.shape[d];
            out->bcast[out->ndim] = x.bcast[d];
            out->ndim++;
        }
    }
    if (empty_red && !empty_out && !unknown && tn__rop_needs_nonempty(node->op))
        return tn__err(TN_ERR_SHAPE, "%s: zero-size reduction of an input of shape %s: %s has no identity",
                       lab, tn__shape_str(x.ndim, x.shape, sb), tn__op_def(node->op)->name);
    return TN_OK;
}

static tn_result tn__softmax_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    char lab[96];
    tn__reduce_label(node, lab, sizeof lab);
    if (node->ext) return tn__err(TN_ERR_UNSUPPORTED, "%s: a fused prologue is not supported", lab);
    int64_t axis = node->p.i[0];
    if (axis < 0 || axis >= in[0].ndim)
        return tn__err(TN_ERR_AXIS, "%s: axis %lld out of range for an input of ndim %d", lab, (long long)axis, in[0].ndim);
    *out = in[0];
    out->dtype = tn__reduce_dtype(node->op, in[0].dtype);
    return TN_OK;
}

/* >>reduce_label: Sum{axis=[0,2]}, Softmax{axis=1} */
static void tn__reduce_label(const tn_var *node, char *buf, size_t cap) {
    static const char *names[] = { "Sum", "Prod", "Mean", "Max", "Min", "Argmax", "Argmin", "All", "Any", "LogSumExp" };
    size_t n;
    if (node->op == TN_OP_SOFTMAX || node->op == TN_OP_LOG_SOFTMAX) {
        snprintf(buf, cap, "%s{axis=%lld}", node->op == TN_OP_SOFTMAX ? "Softmax" : "LogSoftmax", (long long)node->p.i[0]);
        return;
    }
    int k = node->op - TN_OP_SUM;
    n = (size_t)snprintf(buf, cap, "%s{axis=[", (k >= 0 && k < 10) ? names[k] : "Reduce");
    uint64_t mask = (uint64_t)node->p.i[0];
    bool first = true;
    for (int d = 0; d < 64 && n < cap; d++) {
        if (!((mask >> d) & 1)) continue;
        n += (size_t)snprintf(buf + n, cap - n, first ? "%d" : ",%d", d);
        first = false;
    }
    if (n < cap) n += (size_t)snprintf(buf + n, cap - n, "]%s%s}", node->p.i[1] ? ",keepdims=True" : "",
                                       node->ext ? ",prologue" : "");
}

/* >>reduce_constructors */
static const char *tn__rvar_name(const tn_var *x) { return x->name ? x->name : "x"; }

/* Axis bit mask from a user's list (NULL: all axes); 0 with the error set on failure. */
static bool tn__reduce_mask(const char *who, tn_var *x, const int *axes, int naxes, uint64_t *mask) {
    int nd = x->type.ndim;
    *mask = 0;
    if (!axes) { *mask = nd ? (((uint64_t)1 << nd) - 1) : 0; return true; }
    if (naxes < 0) { tn__err(TN_ERR_INVALID, "%s: naxes is %d", who, naxes); return false; }
    for (int k = 0; k < naxes; k++) {
        int a = axes[k];
        if (a < -nd || a >= nd) {
            tn__err(TN_ERR_AXIS, "%s: axis %d is out of range for '%s' of ndim %d", who, a, tn__rvar_name(x), nd);
            return false;
        }
        if (a < 0) a += nd;
        if ((*mask >> a) & 1) {
            tn__err(TN_ERR_AXIS, "%s: axis %d is repeated (axes of '%s' of ndim %d)", who, axes[k], tn__rvar_name(x), nd);
            return false;
        }
        *mask |= (uint64_t)1 << a;
    }
    return true;
}

static tn_var *tn__reduce_make(const char *who, int op, tn_var *x, const int *axes, int naxes, bool keepdims) {
    uint64_t mask;
    if (!x) { tn__err(TN_ERR_NULL, "%s: x is NULL (did an earlier constructor fail?)", who); return NULL; }
    if (!tn__reduce_mask(who, x, axes, naxes, &mask)) return NULL;
    tn_params p;
    memset(&p, 0, sizeof p);
    p.i[0] = (int64_t)mask;
    p.i[1] = keepdims;
    return tn__node(x->graph, op, 1, &x, &p, NULL, who);
}

TN_API tn_var *tn_sum(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_sum", TN_OP_SUM, x, axes, naxes, keepdims); }
TN_API tn_var *tn_prod(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_prod", TN_OP_PROD, x, axes, naxes, keepdims); }
TN_API tn_var *tn_mean(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_mean", TN_OP_MEAN, x, axes, naxes, keepdims); }
TN_API tn_var *tn_max(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_max", TN_OP_MAX, x, axes, naxes, keepdims); }
TN_API tn_var *tn_min(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_min", TN_OP_MIN, x, axes, naxes, keepdims); }
TN_API tn_var *tn_all(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_all", TN_OP_ALL, x, axes, naxes, keepdims); }
TN_API tn_var *tn_any(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_any", TN_OP_ANY, x, axes, naxes, keepdims); }
TN_API tn_var *tn_logsumexp(tn_var *x, const int *axes, int naxes, bool keepdims) { return tn__reduce_make("tn_logsumexp", TN_OP_LOGSUMEXP, x, axes, naxes, keepdims); }
TN_API tn_var *tn_argmax(tn_var *x, int axis, bool keepdims) { return tn__reduce_make("tn_argmax", TN_OP_ARGMAX, x, &axis, 1, keepdims); }
TN_API tn_var *tn_argmin(tn_var *x, int axis, bool keepdims) { return tn__reduce_make("tn_argmin", TN_OP_ARGMIN, x, &axis, 1, keepdims); }

static tn_var *tn__softmax_make(const char *who, int op, tn_var *x, int axis) {
    if (!x) { tn__err(TN_ERR_NULL, "%s: x is NULL (did an earlier constructor fail?)", who); return NULL; }
    int nd = x->type.ndim;
    if (axis < -nd || axis >= nd) {
        tn__err(TN_ERR_AXIS, "%s: axis %d is out of range for '%s' of ndim %d", who, axis, tn__rvar_name(x), nd);
        return NULL;
    }
    tn_params p;
    memset(&p, 0, sizeof p);
    p.i[0] = axis < 0 ? axis + nd : axis;
    return tn__node(x->graph, op, 1, &x, &p, NULL, who);
}
TN_API tn_var *tn_softmax(tn_var *x, int axis) { return tn__softmax_make("tn_softmax", TN_OP_SOFTMAX, x, axis); }
TN_API tn_var *tn_log_softmax(tn_var *x, int axis) { return tn__softmax_make("tn_log_softmax", TN_OP_LOG_SOFTMAX, x, axis); }

/* >>registry: fills this part's rows of the op table */
static void tn__register_reduce_ops(tn_op_def *t) {
    static const char *names[] = { "Sum", "Prod", "Mean", "Max", "Min", "Argmax", "Argmin", "All", "Any", "LogSumExp" };
    /* arity -1: a fused prologue brings its own inputs (the type rule checks) */
    for (int k = 0; k < 10; k++)
        t[TN_OP_SUM + k] = (tn_op_def){ names[k], TN_OPK_REDUCE, -1, tn__reduce_infer, tn__reduce_cpu, tn__reduce_label };
    /* softmax is not a reduction to the fusion pass: i[0] is an axis, not a mask */
    t[TN_OP_SOFTMAX] = (tn_op_def){ "Softmax", TN_OPK_OTHER, 1, tn__softmax_infer, tn__softmax_cpu, tn__reduce_label };
    t[TN_OP_LOG_SOFTMAX] = (tn_op_def){ "LogSoftmax", TN_OPK_OTHER, 1, tn__softmax_infer, tn__softmax_cpu, tn__reduce_label };
}
