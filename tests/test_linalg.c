/* tests/test_linalg.c - dot, gemm, gemv, outer: every dtype, shapes from 1x1
   to multi-tile, batched and broadcast batches, transposed / stepped /
   reversed views, the CBLAS and built-in paths, type rules and errors.
   Each result is checked against a float64 (or wrapping int64) reference
   computed here by a plain triple loop. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
#include <pthread.h>

static uint64_t g_seed = 1234;
static int g_checks;              /* individual comparisons made */

/* ---- operands ----------------------------------------------------------- */

enum { V_CONTIG, V_TRANS, V_STEP, V_NEG, V_COUNT };
static const char *const v_name[V_COUNT] = { "contig", "trans", "step", "neg" };

static tn_array *rnd_base(tn_dtype t, int ndim, const int64_t *shape) {
    double lo = -1, hi = 1;
    if (t == TN_I32) { lo = -2147483648.0; hi = 2147483647.0; }      /* products overflow: wrapping */
    if (t == TN_I64) { lo = -4611686018427387904.0; hi = 4611686018427387904.0; }
    return tn_array_rand_uniform(t, ndim, shape, lo, hi, g_seed++);
}

/* A random operand of `shape` laid out as view kind v: a transposed view of
   the last two dims, a slice with steps (2 and 3) of a larger array, or a
   reversed (negative-stride) view of the last dim. */
static tn_array *operand(tn_dtype t, int ndim, const int64_t *shape, int v) {
    int64_t sh[TN_MAX_DIMS];
    memcpy(sh, shape, sizeof(int64_t) * (size_t)ndim);
    if (ndim == 0) return rnd_base(t, 0, sh);
    if (v == V_TRANS && ndim >= 2) {
        int64_t x = sh[ndim - 1]; sh[ndim - 1] = sh[ndim - 2]; sh[ndim - 2] = x;
        tn_array *b = rnd_base(t, ndim, sh);
        int perm[TN_MAX_DIMS];
        for (int d = 0; d < ndim; d++) perm[d] = d;
        perm[ndim - 1] = ndim - 2; perm[ndim - 2] = ndim - 1;
        tn_array *r = tn_array_transpose(b, perm);
        tn_array_free(b);
        return r;
    }
    if (v == V_STEP) {
        sh[ndim - 1] = shape[ndim - 1] * 3 + 1;
        if (ndim >= 2) sh[ndim - 2] = shape[ndim - 2] * 2;
        tn_array *b = rnd_base(t, ndim, sh);
        tn_array *s1 = tn_array_slice(b, ndim - 1, 1, TN_NONE, 3);
        tn_array *r = ndim >= 2 ? tn_array_slice(s1, ndim - 2, 0, TN_NONE, 2) : tn_array_view(s1);
        tn_array_free(b); tn_array_free(s1);
        return r;
    }
    if (v == V_NEG) {
        tn_array *b = rnd_base(t, ndim, sh);
        tn_array *r = tn_array_slice(b, ndim - 1, TN_NONE, TN_NONE, -1);
        tn_array_free(b);
        return r;
    }
    return rnd_base(t, ndim, sh);
}

/* ---- reference ---------------------------------------------------------- */

typedef struct ref {
    int ndim;
    int64_t shape[TN_MAX_DIMS];
    double *d;                    /* C order */
    int64_t *i;
} ref;

static ref load(const tn_array *a) {
    ref r;
    memset(&r, 0, sizeof r);
    r.ndim = a->ndim;
    memcpy(r.shape, a->shape, sizeof r.shape);
    size_t n = (size_t)tn_array_size(a);
    r.d = (double *)malloc((n ? n : 1) * sizeof(double));
    r.i = (int64_t *)malloc((n ? n : 1) * sizeof(int64_t));
    tn_array_copy_to(a, TN_F64, r.d, n * sizeof(double));
    tn_array_copy_to(a, TN_I64, r.i, n * sizeof(int64_t));
    return r;
}
static void unload(ref *r) { free(r->d); free(r->i); }

/* Flat C-order offset of `idx` (aligned to the right of out_nd dims) in r,
   broadcasting size-1 and missing dims. */
static int64_t bidx(const ref *r, int out_nd, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < r->ndim; d++) {
        int64_t i = idx[out_nd - r->ndim + d];
        off = off * r->shape[d] + (r->shape[d] == 1 ? 0 : i);
    }
    return off;
}

/* Expected out = alpha * A@B (matmul rules) + beta * C, for every element of
   an out of shape (ond, osh): value, sum of |terms| (for the error bound) and
   the wrapping integer value. */
TH_NO_SANITIZE static void expect(const ref *A, const ref *B, const ref *C, double alpha, double beta,
                   int ond, const int64_t *osh, double *val, double *mag, uint64_t *ival) {
    bool a1 = A->ndim == 1, b1 = B->ndim == 1;
    int64_t k = A->shape[A->ndim - 1];
    int64_t n_out = 1;
    for (int d = 0; d < ond; d++) n_out *= osh[d];
    for (int64_t e = 0; e < n_out; e++) {
        int64_t idx[TN_MAX_DIMS], rem = e;
        for (int d = ond - 1; d >= 0; d--) { idx[d] = rem % osh[d]; rem /= osh[d]; }
        /* out index -> (batch..., i, j) in a 2+2-d frame */
        int nb = ond - (a1 ? 0 : 1) - (b1 ? 0 : 1);
        int64_t i = a1 ? 0 : idx[nb], j = b1 ? 0 : idx[ond - 1];
        double s = 0, m = 0;
        uint64_t is = 0;
        /* C-order offsets of (i, 0) in A and (0, j) in B; steps along k */
        int64_t ia[TN_MAX_DIMS + 2], ib[TN_MAX_DIMS + 2];
        memcpy(ia, idx, sizeof(int64_t) * (size_t)nb);
        memcpy(ib, idx, sizeof(int64_t) * (size_t)nb);
        ia[nb] = i; ia[nb + 1] = 0;
        ib[nb] = 0; ib[nb + 1] = j;
        int64_t oa = a1 ? 0 : bidx(A, nb + 2, ia), ob = b1 ? 0 : bidx(B, nb + 2, ib);
        int64_t sa = 1, sb = b1 ? 1 : (B->shape[B->ndim - 2] == 1 ? 0 : B->shape[B->ndim - 1]);
        const double *ad = A->d, *bd = B->d;
        const int64_t *ai = A->i, *bi = B->i;
        for (int64_t p = 0; p < k; p++, oa += sa, ob += sb) {
            double t = ad[oa] * bd[ob];
            s += t;
            m += fabs(t);
            is += (uint64_t)ai[oa] * (uint64_t)bi[ob];
        }
        val[e] = alpha * s;
        mag[e] = fabs(alpha) * m;
        ival[e] = (uint64_t)(int64_t)alpha * is;
        if (C && beta != 0) {
            int64_t oc = bidx(C, ond, idx);
            val[e] += beta * C->d[oc];
            mag[e] += fabs(beta * C->d[oc]);
            ival[e] += (uint64_t)(int64_t)beta * (uint64_t)C->i[oc];
        }
    }
}

/* Compares out with the reference; returns the number of bad elements. */
static int check_out(const tn_array *out, int k, const double *val, const double *mag, const uint64_t *ival,
                   const char *what) {
    int64_t n = tn_array_size(out);
    ref o = load(out);
    int bad = 0;
    double eps = out->dtype == TN_F64 ? 2.3e-16 : 1.2e-7;
    double store = out->dtype == TN_F16 ? 4.9e-4 : out->dtype == TN_F32 ? 6e-8 : 1.2e-16;
    double sub = out->dtype == TN_F16 ? 2.99e-8 : 0;       /* float16's subnormals: half their spacing 2^-24 */
    for (int64_t e = 0; e < n; e++) {
        bool ok;
        if (out->dtype == TN_I32) ok = o.i[e] == (int64_t)(int32_t)(uint32_t)ival[e];
        else if (out->dtype == TN_I64) ok = o.i[e] == (int64_t)ival[e];
        else ok = fabs(o.d[e] - val[e]) <= 4 * eps * (k + 2) * mag[e] + 2 * store * fabs(val[e]) + sub + 1e-300;
        if (!ok && bad++ < 3)
            fprintf(stderr, "  %s: element %lld: got %.17g want %.17g (int %lld)\n", what, (long long)e, o.d[e],
                    val[e], (long long)ival[e]);
    }
    unload(&o);
    g_checks++;
    return bad;
}

/* ---- running one op through its definition ------------------------------- */

static tn_type type_of(const tn_array *a) {
    tn_type t;
    memset(&t, 0, sizeof t);
    t.dtype = a->dtype;
    t.ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) t.shape[d] = a->shape[d];
    return t;
}

/* Infers the output type, allocates it (or uses C's array when inplace) and
   runs the CPU kernel. */
static tn_result run_op(int op, int n, tn_array **in, double alpha, double beta, bool inplace, tn_array **out) {
    tn_var node;
    memset(&node, 0, sizeof node);
    node.op = op;
    node.n_in = n;
    tn__p_set_gemm(&node.p, alpha, beta);
    node.inplace = inplace ? 1 : 0;
    tn_type t[3], o;
    for (int i = 0; i < n; i++) t[i] = type_of(in[i]);
    const tn_op_def *def = tn__op_def(op);
    *out = NULL;
    tn_result r = def->infer(&node, t, &o);
    if (r != TN_OK) return r;
    *out = inplace ? tn_array_view(in[0]) : tn__array_alloc(o.dtype, o.ndim, o.shape, TN_HOST);
    return def->cpu(&node, in, out);
}

static const tn_dtype all_dtypes[] = { TN_F32, TN_F64, TN_F16, TN_I32, TN_I64 };
#define N_DTYPES 5

static bool has_blas(void) { tn__blas_enable(true); return tn__blas_name() != NULL; }

/* One case: out = op(inputs) vs the reference, on each path (BLAS where the
   library exists and the dtype is float32/float64, and built-in). */
static void check_case(int op, tn_dtype t, int n, const int *nd, const int64_t (*shapes)[TN_MAX_DIMS],
                       const int *views, double alpha, double beta, const char *label) {
    for (int path = 0; path < 2; path++) {
        bool blas = path == 0;
        if (blas && (!has_blas() || (t != TN_F32 && t != TN_F64))) continue;
        tn__blas_enable(blas);
        tn_array *in[3];
        for (int i = 0; i < n; i++) in[i] = operand(t, nd[i], shapes[i], views[i]);
        tn_array *out = NULL;
        tn_result r = run_op(op, n, in, alpha, beta, false, &out);
        char what[256];
        snprintf(what, sizeof what, "%s %s %s", label, tn_dtype_name(t), blas ? "blas" : "builtin");
        CHECK(r == TN_OK, "%s: %s", what, tn_last_error());
        if (r == TN_OK) {
            int first = (op == TN_OP_GEMM || op == TN_OP_GEMV) ? 1 : 0;
            ref A = load(in[first]), B = load(in[first + 1]), C;
            if (op == TN_OP_OUTER) {                      /* as (m,1) @ (1,n) */
                A.ndim = 2; A.shape[1] = 1;
                B.ndim = 2; B.shape[1] = B.shape[0]; B.shape[0] = 1;
            }
            if (first) C = load(in[0]);
            int64_t nel = tn_array_size(out);
            double *val = (double *)malloc(sizeof(double) * (size_t)(nel ? nel : 1));
            double *mag = (double *)malloc(sizeof(double) * (size_t)(nel ? nel : 1));
            uint64_t *iv = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)(nel ? nel : 1));
            expect(&A, &B, first ? &C : NULL, first ? alpha : 1, first ? beta : 0, out->ndim, out->shape, val, mag, iv);
            int k = (int)A.shape[A.ndim - 1];
            int bad = check_out(out, k, val, mag, iv, what);
            CHECK(bad == 0, "%s: %d elements differ", what, bad);
            free(val); free(mag); free(iv);
            unload(&A); unload(&B);
            if (first) unload(&C);
        }
        for (int i = 0; i < n; i++) tn_array_free(in[i]);
        tn_array_free(out);
    }
    tn__blas_enable(true);
}

/* ---- tests -------------------------------------------------------------- */

typedef struct mm_shape { int nda, ndb; int64_t a[TN_MAX_DIMS], b[TN_MAX_DIMS]; } mm_shape;

static void dot_cases(const mm_shape *cases, int ncases, const tn_dtype *dts, int ndt, const int (*vs)[2], int nvs) {
    for (int c = 0; c < ncases; c++)
        for (int di = 0; di < ndt; di++)
            for (int v = 0; v < nvs; v++) {
                int64_t sh[2][TN_MAX_DIMS];
                memcpy(sh[0], cases[c].a, sizeof sh[0]);
                memcpy(sh[1], cases[c].b, sizeof sh[1]);
                int nd[2] = { cases[c].nda, cases[c].ndb };
                char sa[128], sb[128], label[400];
                snprintf(label, sizeof label, "dot %s%s @ %s%s", tn__shape_str(nd[0], sh[0], sa), v_name[vs[v][0]],
                         tn__shape_str(nd[1], sh[1], sb), v_name[vs[v][1]]);
                check_case(TN_OP_DOT, dts[di], 2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, vs[v], 1, 0, label);
            }
}

static const int views_all[][2] = {
    { V_CONTIG, V_CONTIG }, { V_TRANS, V_CONTIG }, { V_CONTIG, V_TRANS }, { V_TRANS, V_TRANS },
    { V_STEP, V_STEP }, { V_NEG, V_STEP }, { V_STEP, V_NEG },
};

TEST(test_dot_matrix_shapes) {
    static const mm_shape cases[] = {
        { 2, 2, {1, 1}, {1, 1} },
        { 2, 2, {1, 9}, {9, 1} },
        { 2, 2, {1, 7}, {7, 5} },
        { 2, 2, {6, 1}, {1, 8} },
        { 2, 2, {17, 33}, {33, 9} },
        { 2, 2, {7, 300}, {300, 19} },       /* k spans two slabs */
    };
    dot_cases(cases, 6, all_dtypes, N_DTYPES, views_all, 7);
}

TEST(test_dot_large) {
    /* multi-tile in m, n and k; threads split it */
    static const mm_shape cases[] = {
        { 2, 2, {128, 256}, {256, 64} },
        { 2, 2, {130, 520}, {520, 270} },
    };
    static const int vs[][2] = { { V_CONTIG, V_CONTIG }, { V_TRANS, V_STEP } };
    dot_cases(cases, 2, all_dtypes, N_DTYPES, vs, 2);
}

TEST(test_dot_vectors) {
    static const mm_shape cases[] = {
        { 1, 1, {37}, {37} },                /* 0-d result */
        { 1, 1, {1}, {1} },
        { 2, 1, {5, 7}, {7} },
        { 1, 2, {7}, {7, 3} },
        { 2, 1, {300, 200}, {200} },
        { 1, 2, {200}, {200, 300} },
        { 1, 3, {5}, {2, 5, 3} },
        { 3, 1, {2, 4, 5}, {5} },
    };
    static const int vs[][2] = { { V_CONTIG, V_CONTIG }, { V_TRANS, V_CONTIG }, { V_CONTIG, V_TRANS },
                                 { V_STEP, V_STEP }, { V_NEG, V_NEG } };
    dot_cases(cases, 8, all_dtypes, N_DTYPES, vs, 5);
}

TEST(test_dot_batched) {
    static const mm_shape cases[] = {
        { 4, 2, {2, 3, 4, 5}, {5, 6} },
        { 4, 3, {2, 1, 4, 5}, {3, 5, 2} },
        { 2, 3, {4, 5}, {3, 5, 2} },
        { 3, 3, {1, 4, 5}, {3, 5, 2} },
        { 3, 4, {3, 7, 9}, {2, 1, 9, 4} },
    };
    static const int vs[][2] = { { V_CONTIG, V_CONTIG }, { V_TRANS, V_STEP }, { V_NEG, V_TRANS } };
    dot_cases(cases, 5, all_dtypes, N_DTYPES, vs, 3);
}

TEST(test_gemm_bias_shapes) {
    /* C as scalar, (n,), (1, n), (m, 1), full (m, n); alpha not 1, beta
       not 1 and 1 (C copied as it is: every path's initial value) */
    int64_t m = 13, k = 21, n = 10;
    struct { int nd; int64_t sh[2]; } cs[] = { {0, {0}}, {1, {n}}, {2, {1, n}}, {2, {m, 1}}, {2, {m, n}} };
    for (int c = 0; c < 10; c++)
        for (int di = 0; di < N_DTYPES; di++)
            for (int v = 0; v < 3; v++) {
                tn_dtype t = all_dtypes[di];
                bool is_int = !tn_dtype_is_float(t);
                double alpha = is_int ? 3 : 0.75, beta = c >= 5 ? 1 : is_int ? -2 : -1.25;
                int64_t sh[3][TN_MAX_DIMS] = { {0}, {m, k}, {k, n} };
                memcpy(sh[0], cs[c % 5].sh, sizeof cs[c % 5].sh);
                int nd[3] = { cs[c % 5].nd, 2, 2 };
                int views[3] = { v == 2 ? V_STEP : V_CONTIG, v == 1 ? V_TRANS : V_CONTIG, v == 2 ? V_NEG : V_TRANS };
                char sc[128], label[256];
                snprintf(label, sizeof label, "gemm c %s views %d beta %g", tn__shape_str(nd[0], sh[0], sc), v, beta);
                check_case(TN_OP_GEMM, t, 3, nd, (const int64_t (*)[TN_MAX_DIMS])sh, views, alpha, beta, label);
            }
}

TEST(test_gemm_batched_and_large) {
    for (int di = 0; di < N_DTYPES; di++) {
        tn_dtype t = all_dtypes[di];
        bool is_int = !tn_dtype_is_float(t);
        double alpha = is_int ? -1 : 0.5, beta = is_int ? 5 : 2.0;
        {
            int64_t sh[3][TN_MAX_DIMS] = { {4, 3}, {2, 4, 5}, {5, 3} };
            int nd[3] = { 2, 3, 2 }, views[3] = { V_CONTIG, V_CONTIG, V_TRANS };
            check_case(TN_OP_GEMM, t, 3, nd, (const int64_t (*)[TN_MAX_DIMS])sh, views, alpha, beta, "gemm batched");
        }
        {
            int64_t sh[3][TN_MAX_DIMS] = { {1, 270}, {130, 520}, {520, 270} };
            int nd[3] = { 2, 2, 2 }, views[3] = { V_CONTIG, V_CONTIG, V_CONTIG };
            check_case(TN_OP_GEMM, t, 3, nd, (const int64_t (*)[TN_MAX_DIMS])sh, views, alpha, beta, "gemm large");
        }
    }
}

/* beta == 0 never reads C (BLAS semantics): a NaN there stays out. */
TEST(test_gemm_beta_zero_ignores_c) {
    for (int path = 0; path < 2; path++) {
        tn__blas_enable(path == 0);
        for (int di = 0; di < 3; di++) {
            tn_dtype t = all_dtypes[di];
            tn_array *c = tn_array_full(t, 2, (int64_t[]){4, 6}, NAN);
            tn_array *a = operand(t, 2, (int64_t[]){4, 5}, V_CONTIG), *b = operand(t, 2, (int64_t[]){5, 6}, V_CONTIG);
            tn_array *in[3] = { c, a, b }, *out;
            CHECK(run_op(TN_OP_GEMM, 3, in, 1.5, 0.0, false, &out) == TN_OK, "%s", tn_last_error());
            ref A = load(a), B = load(b);
            double val[24], mag[24];
            uint64_t iv[24];
            expect(&A, &B, NULL, 1.5, 0, 2, out->shape, val, mag, iv);
            CHECK(check_out(out, 5, val, mag, iv, "gemm beta 0") == 0, "%s path %d", tn_dtype_name(t), path);
            unload(&A); unload(&B);
            tn_array_free(out); tn_array_free(a); tn_array_free(b); tn_array_free(c);
        }
    }
    tn__blas_enable(true);
}

/* In place: out is C's own buffer. */
TEST(test_gemm_inplace) {
    for (int path = 0; path < 2; path++)
        for (int di = 0; di < N_DTYPES; di++) {
            tn__blas_enable(path == 0);
            tn_dtype t = all_dtypes[di];
            bool is_int = !tn_dtype_is_float(t);
            double alpha = is_int ? 2 : 0.5, beta = is_int ? -3 : 1.5;
            tn_array *c = operand(t, 2, (int64_t[]){9, 11}, V_CONTIG);
            tn_array *a = operand(t, 2, (int64_t[]){9, 300}, V_TRANS), *b = operand(t, 2, (int64_t[]){300, 11}, V_CONTIG);
            ref A = load(a), B = load(b), C = load(c);
            tn_array *in[3] = { c, a, b }, *out;
            CHECK(run_op(TN_OP_GEMM, 3, in, alpha, beta, true, &out) == TN_OK, "%s", tn_last_error());
            CHECK(out->data == c->data, "in place");
            double val[99], mag[99];
            uint64_t iv[99];
            expect(&A, &B, &C, alpha, beta, 2, out->shape, val, mag, iv);
            CHECK(check_out(c, 300, val, mag, iv, "gemm inplace") == 0, "%s path %d", tn_dtype_name(t), path);
            unload(&A); unload(&B); unload(&C);
            tn_array_free(out); tn_array_free(a); tn_array_free(b); tn_array_free(c);
        }
    tn__blas_enable(true);
}

TEST(test_gemv) {
    int64_t m = 23, n = 31;
    for (int di = 0; di < N_DTYPES; di++)
        for (int v = 0; v < 4; v++)
            for (int yk = 0; yk < 3; yk++) {
                tn_dtype t = all_dtypes[di];
                bool is_int = !tn_dtype_is_float(t);
                int64_t sh[3][TN_MAX_DIMS] = { {m}, {m, n}, {n} };
                int nd[3] = { 1, 2, 1 };
                if (yk == 1) nd[0] = 0;                  /* scalar y */
                if (yk == 2) sh[0][0] = 1;               /* (1,) broadcasts */
                int views[3] = { v == 2 ? V_STEP : V_CONTIG, v, v == 3 ? V_NEG : V_CONTIG };
                char label[128];
                snprintf(label, sizeof label, "gemv view %s y kind %d", v_name[v], yk);
                check_case(TN_OP_GEMV, t, 3, nd, (const int64_t (*)[TN_MAX_DIMS])sh, views,
                           is_int ? 7 : -0.5, is_int ? 2 : 0.25, label);
            }
}

TEST(test_outer) {
    for (int di = 0; di < N_DTYPES; di++)
        for (int v = 0; v < 4; v++) {
            if (v == V_TRANS) continue;
            int64_t sh[2][TN_MAX_DIMS] = { {19}, {27} };
            int nd[2] = { 1, 1 }, views[2] = { v, v == V_NEG ? V_STEP : v };
            check_case(TN_OP_OUTER, all_dtypes[di], 2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, views, 1, 0, "outer");
            int64_t sh1[2][TN_MAX_DIMS] = { {1}, {300} };
            check_case(TN_OP_OUTER, all_dtypes[di], 2, nd, (const int64_t (*)[TN_MAX_DIMS])sh1, views, 1, 0, "outer 1x300");
        }
}

/* Empty dims: k = 0 gives beta*C (or zeros); m = 0 gives an empty result. */
TEST(test_empty_dims) {
    for (int di = 0; di < N_DTYPES; di++) {
        tn_dtype t = all_dtypes[di];
        int64_t sh[3][TN_MAX_DIMS] = { {4, 3}, {4, 0}, {0, 3} };
        int nd[3] = { 2, 2, 2 }, views[3] = { V_CONTIG, V_CONTIG, V_CONTIG };
        check_case(TN_OP_GEMM, t, 3, nd, (const int64_t (*)[TN_MAX_DIMS])sh, views, 1, tn_dtype_is_float(t) ? 0.5 : 3, "gemm k=0");
        check_case(TN_OP_DOT, t, 2, nd + 1, (const int64_t (*)[TN_MAX_DIMS])sh + 1, views, 1, 0, "dot k=0");
        int64_t sh2[2][TN_MAX_DIMS] = { {0, 5}, {5, 3} };
        check_case(TN_OP_DOT, t, 2, nd, (const int64_t (*)[TN_MAX_DIMS])sh2, views, 1, 0, "dot m=0");
    }
}

/* Runs infer alone on arrays of the given shapes and dtypes. */
static tn_result infer_only(int op, int n, const tn_dtype *dts, const int *nd, const int64_t (*sh)[TN_MAX_DIMS],
                            double alpha, double beta, tn_type *out) {
    tn_var node;
    memset(&node, 0, sizeof node);
    node.op = op;
    tn__p_set_gemm(&node.p, alpha, beta);
    tn_type t[3];
    memset(t, 0, sizeof t);
    for (int i = 0; i < n; i++) {
        t[i].dtype = dts[i];
        t[i].ndim = nd[i];
        memcpy(t[i].shape, sh[i], sizeof t[i].shape);
    }
    tn_clear_error();
    return tn__op_def(op)->infer(&node, t, out);
}

TEST(test_infer_errors) {
    tn_type o;
    tn_dtype f2[3] = { TN_F32, TN_F32, TN_F32 };
    {
        int nd[2] = { 2, 2 };
        int64_t sh[2][TN_MAX_DIMS] = { {3, 4}, {5, 2} };
        CHECK(infer_only(TN_OP_DOT, 2, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) == TN_ERR_SHAPE, "dot inner");
        CHECK_ERR(TN_ERR_SHAPE, "tn_dot: inner dimensions differ: a (3, 4) and b (5, 2)");
    }
    {
        int nd[2] = { 4, 3 };
        int64_t sh[2][TN_MAX_DIMS] = { {2, 3, 4, 5}, {4, 5, 6} };
        CHECK(infer_only(TN_OP_DOT, 2, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) != TN_OK, "batch");
        CHECK_ERR(TN_ERR_SHAPE, "batch dimensions do not broadcast: a (2, 3, 4, 5) and b (4, 5, 6)");
    }
    {
        int nd[2] = { 0, 1 };
        int64_t sh[2][TN_MAX_DIMS] = { {0}, {3} };
        CHECK(infer_only(TN_OP_DOT, 2, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) != TN_OK, "0-d");
        CHECK_ERR(TN_ERR_SHAPE, "tn_dot: a () is 0-d");
    }
    {
        int nd[2] = { 1, 1 };
        int64_t sh[2][TN_MAX_DIMS] = { {3}, {4} };
        CHECK(infer_only(TN_OP_DOT, 2, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) != TN_OK, "1-d");
        CHECK_ERR(TN_ERR_SHAPE, "tn_dot: inner dimensions differ: a (3,) and b (4,)");
    }
    {
        tn_dtype d[2] = { TN_BOOL, TN_BOOL };
        int nd[2] = { 2, 2 };
        int64_t sh[2][TN_MAX_DIMS] = { {3, 4}, {4, 2} };
        CHECK(infer_only(TN_OP_DOT, 2, d, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) != TN_OK, "bool");
        CHECK_ERR(TN_ERR_DTYPE, "tn_dot: a (3, 4) has dtype bool");
    }
    {
        tn_dtype d[2] = { TN_F32, TN_F64 };
        int nd[2] = { 2, 2 };
        int64_t sh[2][TN_MAX_DIMS] = { {3, 4}, {4, 2} };
        CHECK(infer_only(TN_OP_DOT, 2, d, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) != TN_OK, "mixed");
        CHECK_ERR(TN_ERR_DTYPE, "a (3, 4) is float32, b (4, 2) is float64");
    }
    {
        int nd[3] = { 2, 2, 2 };
        int64_t sh[3][TN_MAX_DIMS] = { {3, 5}, {4, 2}, {2, 5} };
        CHECK(infer_only(TN_OP_GEMM, 3, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 1, &o) != TN_OK, "gemm c");
        CHECK_ERR(TN_ERR_SHAPE, "tn_gemm: c (3, 5) does not broadcast to the product's shape (4, 5) of a (4, 2) and b (2, 5)");
    }
    {
        tn_dtype d[3] = { TN_I32, TN_I32, TN_I32 };
        int nd[3] = { 2, 2, 2 };
        int64_t sh[3][TN_MAX_DIMS] = { {4, 5}, {4, 2}, {2, 5} };
        CHECK(infer_only(TN_OP_GEMM, 3, d, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 0.5, 1, &o) != TN_OK, "int alpha");
        CHECK_ERR(TN_ERR_INVALID, "tn_gemm: alpha 0.5 is not an integer, but the operands are int32");
    }
    {
        int nd[3] = { 1, 3, 1 };
        int64_t sh[3][TN_MAX_DIMS] = { {4}, {2, 4, 5}, {5} };
        CHECK(infer_only(TN_OP_GEMV, 3, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 1, &o) != TN_OK, "gemv 3d");
        CHECK_ERR(TN_ERR_SHAPE, "tn_gemv: needs a matrix (2-d) and a vector (1-d), got a (2, 4, 5) and x (5,)");
    }
    {
        int nd[3] = { 1, 2, 1 };
        int64_t sh[3][TN_MAX_DIMS] = { {4}, {3, 5}, {5} };
        CHECK(infer_only(TN_OP_GEMV, 3, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 1, &o) != TN_OK, "gemv y");
        CHECK_ERR(TN_ERR_SHAPE, "tn_gemv: y (4,) does not broadcast to the product's shape (3,) of a (3, 5) and x (5,)");
    }
    {
        int nd[2] = { 2, 1 };
        int64_t sh[2][TN_MAX_DIMS] = { {3, 2}, {4} };
        CHECK(infer_only(TN_OP_OUTER, 2, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) != TN_OK, "outer");
        CHECK_ERR(TN_ERR_SHAPE, "tn_outer: operands must be vectors (1-d), got a (3, 2) and b (4,)");
    }
}

/* Unknown dims (-1) pass at build time; broadcast batch dims resolve. */
TEST(test_infer_shapes) {
    tn_type o;
    tn_dtype f2[3] = { TN_F64, TN_F64, TN_F64 };
    {
        int nd[2] = { 4, 3 };
        int64_t sh[2][TN_MAX_DIMS] = { {2, 1, 4, 5}, {3, 5, 2} };
        CHECK(infer_only(TN_OP_DOT, 2, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) == TN_OK, "%s", tn_last_error());
        CHECK(o.ndim == 4 && o.shape[0] == 2 && o.shape[1] == 3 && o.shape[2] == 4 && o.shape[3] == 2 && o.dtype == TN_F64,
              "shape");
    }
    {
        int nd[2] = { 2, 2 };
        int64_t sh[2][TN_MAX_DIMS] = { {-1, 4}, {-1, -1} };
        CHECK(infer_only(TN_OP_DOT, 2, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) == TN_OK, "%s", tn_last_error());
        CHECK(o.ndim == 2 && o.shape[0] == -1 && o.shape[1] == -1, "unknown dims");
    }
    {
        int nd[2] = { 1, 1 };
        int64_t sh[2][TN_MAX_DIMS] = { {6}, {6} };
        CHECK(infer_only(TN_OP_DOT, 2, f2, nd, (const int64_t (*)[TN_MAX_DIMS])sh, 1, 0, &o) == TN_OK, "%s", tn_last_error());
        CHECK(o.ndim == 0, "1-d . 1-d is 0-d");
    }
}

TEST(test_labels) {
    tn_var node;
    memset(&node, 0, sizeof node);
    char buf[64];
    node.op = TN_OP_DOT; tn__op_def(TN_OP_DOT)->label(&node, buf, sizeof buf);
    CHECK(!strcmp(buf, "Dot"), "%s", buf);
    node.op = TN_OP_GEMM; tn__op_def(TN_OP_GEMM)->label(&node, buf, sizeof buf);
    CHECK(!strcmp(buf, "Gemm{no_inplace}"), "%s", buf);
    node.inplace = 1; tn__op_def(TN_OP_GEMM)->label(&node, buf, sizeof buf);
    CHECK(!strcmp(buf, "Gemm{inplace}"), "%s", buf);
    node.inplace = 0; node.op = TN_OP_GEMV; tn__op_def(TN_OP_GEMV)->label(&node, buf, sizeof buf);
    CHECK(!strcmp(buf, "Gemv{no_inplace}"), "%s", buf);
    node.op = TN_OP_OUTER; tn__op_def(TN_OP_OUTER)->label(&node, buf, sizeof buf);
    CHECK(!strcmp(buf, "Outer"), "%s", buf);
}

/* The loader: a library with the CBLAS symbols is used, or none is reported.
   Loading it sets OpenBLAS's spin before sleeping to 2^16 cycles where the
   process had not set it (it runs first: nothing loaded the library yet). */
TEST(test_blas_loader) {
    const char *before = getenv("OPENBLAS_THREAD_TIMEOUT");
    char had[32] = "";
    if (before) snprintf(had, sizeof had, "%s", before);
    tn__blas_enable(true);
    const char *name = tn__blas_name(), *after = getenv("OPENBLAS_THREAD_TIMEOUT");
    CHECK(after && !strcmp(after, before ? had : "16"), "OPENBLAS_THREAD_TIMEOUT was %s, is %s", before ? had : "unset", after ? after : "unset");
    if (name) {
        printf("blas: using %s\n", name);
        CHECK(strstr(name, "blas") != NULL, "%s", name);
        tn__blas_enable(false);
        CHECK(tn__blas_name() == NULL, "disabled");
        tn__blas_enable(true);
        CHECK(tn__blas_name() == name, "re-enabled");
    } else {
        printf("blas: no CBLAS library found; only the built-in kernels are tested\n");
        CHECK(tn__blas_name() == NULL, "none");
    }
}

/* The micro-kernels of every vector level the CPU has (the level forced as
   the vector math's is: 0 the portable vector-extension kernels, 1 AVX2+FMA,
   2 AVX-512F), each on shapes that reach its edges: short panels along m
   and n, k over two slabs, A read in place (contiguous along k or m) and
   packed (other strides), float16 packed; and tasks as tiles, as one
   rectangle a thread, and batched. */
TEST(test_kernel_levels) {
    static const mm_shape cases[] = {
        { 2, 2, {17, 33}, {33, 9} },
        { 2, 2, {130, 300}, {300, 270} },
        { 2, 2, {203, 300}, {300, 301} },    /* one rectangle a thread (2 to 16 threads) */
        { 3, 2, {2, 5, 7}, {7, 3} },
        { 3, 2, {3, 150, 200}, {200, 170} },  /* batched: tiles over threads */
    };
    static const int vs[][2] = { { V_CONTIG, V_CONTIG }, { V_TRANS, V_STEP }, { V_STEP, V_TRANS } };
    static const tn_dtype dts[] = { TN_F32, TN_F64, TN_F16 };
    int best = tn__vm_level(-1);
    tn__blas_enable(false);
    for (int level = 0; level <= best; level++) {
        CHECK(tn__vm_level(level) == level, "level %d forced", level);
        printf("kernels at level %d: %d x %d float32\n", level, tn__ukr_now()->mr32, tn__ukr_now()->nr32);
        dot_cases(cases, 5, dts, 3, vs, 3);
        for (int c = 0; c < 3; c++) {   /* C contiguous (written by the kernel), strided, broadcast */
            int64_t sh[3][TN_MAX_DIMS] = { {203, 301}, {203, 300}, {300, 301} };
            int nd[3] = { c == 2 ? 1 : 2, 2, 2 }, views[3] = { c == 1 ? V_STEP : V_CONTIG, V_CONTIG, V_CONTIG };
            if (c == 2) sh[0][0] = 301;
            for (int di = 0; di < 2; di++)
                check_case(TN_OP_GEMM, dts[di], 3, nd, (const int64_t (*)[TN_MAX_DIMS])sh, views, 0.75, -1.25, "gemm levels");
        }
    }
    /* AVX2+FMA and AVX-512F compute every element by the same operations in
       the same order: the same bits, C written by the kernel or by the tile */
    tn__blas_enable(false);    /* check_case turned it back on */
    for (int di = 0; best >= 2 && di < 2; di++)
        for (int c = 0; c < 2; c++) {
            tn_array *in[3] = { operand(dts[di], 2, (int64_t[]){203, 301}, c ? V_STEP : V_CONTIG),
                                operand(dts[di], 2, (int64_t[]){203, 600}, c ? V_TRANS : V_CONTIG),
                                operand(dts[di], 2, (int64_t[]){600, 301}, V_CONTIG) };
            tn_array *o[2] = { NULL, NULL };
            for (int l = 0; l < 2; l++) {
                tn__vm_level(1 + l);
                CHECK(run_op(TN_OP_GEMM, 3, in, 0.75, -1.25, false, &o[l]) == TN_OK, "gemm at level %d: %s", 1 + l, tn_last_error());
            }
            size_t bytes = (size_t)203 * 301 * tn_dtype_size(dts[di]);
            CHECK(o[0] && o[1] && !memcmp(o[0]->data, o[1]->data, bytes), "%s gemm (views %d): AVX2 and AVX-512 differ",
                  tn_dtype_name(dts[di]), c);
            for (int i = 0; i < 3; i++) tn_array_free(in[i]);
            tn_array_free(o[0]); tn_array_free(o[1]);
        }
    tn__vm_level(-1);
    tn__blas_enable(true);
    if (best < 2) printf("this CPU has no AVX-512F: its kernels were not run\n");
}

/* ---- through the graph: constructors, promotion, tn_function / tn_call ---- */

/* Compiles outputs = {y} of inputs xs, calls it on vals and returns out[0]. */
static tn_array *call1(tn_graph *g, int n, tn_var **xs, tn_var *y, tn_array **vals, tn_result *res) {
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = n, .inputs = xs, .n_outputs = 1, .outputs = &y });
    tn_array *out = NULL;
    *res = f ? tn_call(f, vals, &out) : tn_last_result();
    tn_function_free(f);
    return out;
}

TEST(test_graph_dot_promotes) {
    tn_graph *g = tn_graph_new();
    tn_var *W = tn_matrix(g, "W", TN_F32), *v = tn_vector(g, "v", TN_I32);
    tn_var *y = tn_dot(W, v);
    CHECK(y && tn_var_dtype(y) == TN_F32 && tn_var_ndim(y) == 1, "dot(f32, i32) is a f32 vector: %s", tn_last_error());
    CHECK(y && y->in[1]->op == TN_OP_CAST && y->in[0] == W, "a cast was inserted for v");
    tn_array *wv = operand(TN_F32, 2, (int64_t[]){6, 5}, V_TRANS);
    tn_array *vv = tn_array_rand_uniform(TN_I32, 1, (int64_t[]){5}, -9, 9, g_seed++);
    tn_array *vals[2] = { wv, vv };
    tn_var *xs[2] = { W, v };
    tn_result r;
    tn_array *out = call1(g, 2, xs, y, vals, &r);
    CHECK(r == TN_OK && out, "call: %s", tn_last_error());
    if (out) {
        ref A = load(wv), B = load(vv);
        double val[6], mag[6];
        uint64_t iv[6];
        expect(&A, &B, NULL, 1, 0, 1, out->shape, val, mag, iv);
        CHECK(out->dtype == TN_F32 && check_out(out, 5, val, mag, iv, "graph dot") == 0, "values");
        unload(&A); unload(&B);
    }
    tn_array_free(out); tn_array_free(wv); tn_array_free(vv);
    tn_graph_free(g);
}

TEST(test_graph_gemm_gemv_outer) {
    tn_graph *g = tn_graph_new();
    tn_var *A = tn_matrix(g, "A", TN_F64), *B = tn_matrix(g, "B", TN_F64), *b = tn_row(g, "b", TN_F64);
    tn_var *x = tn_vector(g, "x", TN_F64), *yv = tn_vector(g, "y", TN_F64);
    tn_var *z = tn_gemm(b, 0.5, A, B, -2.0);
    tn_var *zs = tn_gemm(tn_scalar_const(g, 3.0), 1.0, A, B, 0.25);   /* weak scalar C stays float64 */
    tn_var *gv = tn_gemv(yv, 1.5, A, x, 0.5);
    tn_var *o = tn_outer(x, yv);
    CHECK(z && zs && gv && o, "%s", tn_last_error());
    if (!(z && zs && gv && o)) { tn_graph_free(g); return; }
    CHECK(tn_var_dtype(zs) == TN_F64 && tn_var_ndim(zs) == 2, "weak C");
    tn_array *av = operand(TN_F64, 2, (int64_t[]){7, 9}, V_STEP), *bv = operand(TN_F64, 2, (int64_t[]){9, 4}, V_TRANS);
    tn_array *rowv = operand(TN_F64, 2, (int64_t[]){1, 4}, V_CONTIG), *xv = operand(TN_F64, 1, (int64_t[]){9}, V_NEG);
    tn_array *yvv = operand(TN_F64, 1, (int64_t[]){7}, V_CONTIG), *c3 = tn_array_scalar(TN_F64, 3.0);
    ref RA = load(av), RB = load(bv), Rrow = load(rowv), Rx = load(xv), Ry = load(yvv), R3 = load(c3);
    struct { tn_var *y; int n; tn_var *xs[3]; tn_array *vals[3]; ref *a, *b, *c; double al, be; int k; } cs[] = {
        { z, 3, { b, A, B }, { rowv, av, bv }, &RA, &RB, &Rrow, 0.5, -2.0, 9 },
        { zs, 2, { A, B }, { av, bv }, &RA, &RB, &R3, 1.0, 0.25, 9 },
        { gv, 3, { yv, A, x }, { yvv, av, xv }, &RA, &Rx, &Ry, 1.5, 0.5, 9 },
    };
    for (int c = 0; c < 3; c++) {
        tn_result r;
        tn_array *out = call1(g, cs[c].n, cs[c].xs, cs[c].y, cs[c].vals, &r);
        CHECK(r == TN_OK && out, "case %d: %s", c, tn_last_error());
        if (!out) continue;
        double val[64], mag[64];
        uint64_t iv[64];
        expect(cs[c].a, cs[c].b, cs[c].c, cs[c].al, cs[c].be, out->ndim, out->shape, val, mag, iv);
        CHECK(check_out(out, cs[c].k, val, mag, iv, "graph gemm/gemv") == 0, "case %d", c);
        tn_array_free(out);
    }
    {   /* outer of x (9) and y (7): (9, 7) */
        tn_var *xs[2] = { x, yv };
        tn_array *vals[2] = { xv, yvv };
        tn_result r;
        tn_array *out = call1(g, 2, xs, o, vals, &r);
        CHECK(r == TN_OK && out && out->ndim == 2 && out->shape[0] == 9 && out->shape[1] == 7, "outer: %s", tn_last_error());
        if (out) {
            ref X2 = Rx, Y2 = Ry;
            X2.ndim = 2; X2.shape[1] = 1;
            Y2.ndim = 2; Y2.shape[1] = 7; Y2.shape[0] = 1;
            double val[63], mag[63];
            uint64_t iv[63];
            expect(&X2, &Y2, NULL, 1, 0, 2, out->shape, val, mag, iv);
            CHECK(check_out(out, 1, val, mag, iv, "graph outer") == 0, "outer values");
        }
        tn_array_free(out);
    }
    unload(&RA); unload(&RB); unload(&Rrow); unload(&Rx); unload(&Ry); unload(&R3);
    tn_array_free(av); tn_array_free(bv); tn_array_free(rowv); tn_array_free(xv); tn_array_free(yvv); tn_array_free(c3);
    tn_graph_free(g);
}

TEST(test_graph_errors) {
    tn_graph *g = tn_graph_new();
    tn_var *W = tn_input(g, "W", TN_F32, 2, (int64_t[]){3, 4}, NULL);
    tn_var *x = tn_input(g, "x", TN_F32, 2, (int64_t[]){5, 2}, NULL);
    tn_clear_error();
    CHECK(tn_dot(W, x) == NULL, "inner mismatch at build time");
    CHECK_ERR(TN_ERR_SHAPE, "tn_dot: inner dimensions differ: a 'W' (3, 4) and b 'x' (5, 2)");
    tn_var *xi = tn_input(g, "xi", TN_I64, 2, (int64_t[]){5, 2}, NULL);
    int nv = tn__graph_nvars(g);
    CHECK(tn_dot(W, xi) == NULL, "promoted mismatch");
    CHECK_ERR(TN_ERR_SHAPE, "a 'W' (3, 4) and b 'xi' (5, 2)");
    CHECK(tn__graph_nvars(g) == nv, "a failed constructor records no cast");
    tn_var *Bm = tn_matrix(g, "B", TN_BOOL);
    CHECK(tn_dot(Bm, W) == NULL, "bool");
    CHECK_ERR(TN_ERR_DTYPE, "tn_dot: a 'B' (?, ?) has dtype bool");
    tn_clear_error();
    CHECK(tn_dot(NULL, W) == NULL, "NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_dot");
    CHECK(tn_gemm(tn_matrix(g, "C", TN_I32), 0.5, tn_matrix(g, "P", TN_I32), tn_matrix(g, "Q", TN_I32), 1) == NULL, "int alpha");
    CHECK_ERR(TN_ERR_INVALID, "tn_gemm: alpha 0.5 is not an integer");
    tn_var *s = tn_scalar(g, "s", TN_F32);
    CHECK(tn_dot(s, W) == NULL, "0-d");
    CHECK_ERR(TN_ERR_SHAPE, "tn_dot: a 's' () is 0-d");
    tn_graph *g2 = tn_graph_new();
    tn_var *other = tn_matrix(g2, "O", TN_F32);
    CHECK(tn_dot(W, other) == NULL, "graphs");
    CHECK_ERR(TN_ERR_GRAPH, "tn_dot");
    tn_graph_free(g2);
    /* unknown shapes: the mismatch is found at call time */
    tn_var *P = tn_matrix(g, "P2", TN_F32), *Q = tn_matrix(g, "Q2", TN_F32);
    tn_var *y = tn_dot(P, Q);
    CHECK(y != NULL, "%s", tn_last_error());
    tn_array *pv = operand(TN_F32, 2, (int64_t[]){3, 4}, V_CONTIG), *qv = operand(TN_F32, 2, (int64_t[]){5, 2}, V_CONTIG);
    tn_var *xs[2] = { P, Q };
    tn_array *vals[2] = { pv, qv };
    tn_result r;
    tn_array *out = call1(g, 2, xs, y, vals, &r);
    CHECK(r == TN_ERR_SHAPE && out == NULL, "call-time mismatch: %s", tn_last_error());
    CHECK_ERR(TN_ERR_SHAPE, "inner dimensions differ: a 'P2' (3, 4) and b 'Q2' (5, 2)");
    tn_array_free(out); tn_array_free(pv); tn_array_free(qv);
    tn_graph_free(g);
}

int main(void) {
    TH_RUN(test_blas_loader);
    TH_RUN(test_labels);
    TH_RUN(test_infer_shapes);
    TH_RUN(test_infer_errors);
    TH_RUN(test_dot_matrix_shapes);
    TH_RUN(test_dot_vectors);
    TH_RUN(test_dot_batched);
    TH_RUN(test_dot_large);
    TH_RUN(test_gemm_bias_shapes);
    TH_RUN(test_gemm_batched_and_large);
    TH_RUN(test_gemm_beta_zero_ignores_c);
    TH_RUN(test_gemm_inplace);
    TH_RUN(test_gemv);
    TH_RUN(test_outer);
    TH_RUN(test_empty_dims);
    TH_RUN(test_kernel_levels);
    TH_RUN(test_graph_dot_promotes);
    TH_RUN(test_graph_gemm_gemv_outer);
    TH_RUN(test_graph_errors);
    printf("%d comparisons against the reference\n", g_checks);
    tn_shutdown();
    TH_END();
}
