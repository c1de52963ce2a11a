/* tests/test_cumulative.c - cumsum and cumprod (tensor_ops.h's >>ops_cumulative
   section): the CPU kernel on every dtype, shapes, axes (negative too),
   layouts (contiguous, transposed, sliced, reversed, broadcast, a strided
   output) and the threaded paths, against references computed here: float64
   for every dtype, and NumPy's sequential accumulation in the kernel's own
   precision (float32 results equal NumPy's running sums; float16 accumulates
   in float32). Edge values (NaN, +-inf, -0, zeros, int64 wrap), NumPy's dtype
   rules, labels, errors naming the constructor and the shape, compiled
   functions, gradients (tn_verify_grad, with zeros in cumprod's input, and
   exact values at zeros), second derivatives, and that the CUDA back end's
   op kind leaves them on the CPU. */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
#include <stdint.h>

/* >>helpers -------------------------------------------------------------- */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double rnd(void) {   /* [0, 1) */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

typedef enum { L_CONTIG, L_TRANSPOSED, L_STEP2, L_NEGSTEP, L_BCAST, L_COUNT } layout;
static const char *layout_name[L_COUNT] = { "contiguous", "transposed", "step2", "negstep", "broadcast" };

/* Values for sums (in [-3, 3], ints in -3..3) or products (magnitudes near 1,
   ints in -2..2, both signs; bool: random). */
static double draw(tn_dtype t, bool prod) {
    double u = rnd();
    if (t == TN_BOOL) return u < 0.6;
    if (!tn_dtype_is_float(t)) return prod ? floor(u * 5) - 2 : floor(u * 7) - 3;
    if (!prod) return -3 + 6 * u;
    double m = 0.6 + 0.8 * rnd();
    return u < 0.3 ? -m : m;
}

/* An array of `shape` in layout L. L_BCAST: dim 0 broadcast (stride 0). */
static tn_array *make_input(tn_dtype t, int nd, const int64_t *shape, layout L, bool prod) {
    int64_t bs[TN_MAX_DIMS];
    for (int d = 0; d < nd; d++) bs[d] = shape[d];
    if (nd == 0) L = L_CONTIG;
    if (L == L_TRANSPOSED) for (int d = 0; d < nd; d++) bs[d] = shape[nd - 1 - d];
    if (L == L_STEP2) bs[nd - 1] = 2 * shape[nd - 1];
    if (L == L_BCAST) bs[0] = 1;
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= bs[d];
    double *v = (double *)malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = draw(t, prod);
    tn_array *b64 = tn_array_from_data(TN_F64, nd, bs, v);
    free(v);
    tn_array *base = tn_array_astype(b64, t), *r = NULL;
    tn_array_free(b64);
    switch (L) {
    case L_CONTIG: r = tn_array_view(base); break;
    case L_TRANSPOSED: r = tn_array_transpose(base, NULL); break;
    case L_STEP2: r = tn_array_slice(base, nd - 1, 0, TN_NONE, 2); break;
    case L_NEGSTEP: r = tn_array_slice(base, 0, TN_NONE, TN_NONE, -1); break;
    default: r = tn_array_broadcast_to(base, nd, shape); break;
    }
    tn_array_free(base);
    return r;
}

/* A stack node, enough for the op's type rule and kernel. */
static tn_var cum_node(int op, int axis) {
    tn_var n;
    memset(&n, 0, sizeof n);
    n.op = op; n.n_in = 1; n.n_out = 1;
    tn__p_set_axis(&n.p, axis);
    return n;
}

/* Runs the op's kernel on x into a fresh output (transposed storage when
   `strided_out`); NULL with the error set on failure. */
static tn_array *run_kernel(int op, int axis, tn_array *x, bool strided_out) {
    tn_var node = cum_node(op, axis);
    tn_var vx;
    memset(&vx, 0, sizeof vx);
    tn_var *vp = &vx;
    node.in = &vp;
    tn_type tin, tout;
    memset(&tin, 0, sizeof tin);
    tin.dtype = x->dtype; tin.ndim = x->ndim;
    for (int d = 0; d < x->ndim; d++) tin.shape[d] = x->shape[d];
    vx.type = tin;
    const tn_op_def *def = tn__op_def(op);
    if (def->infer(&node, &tin, &tout) != TN_OK) return NULL;
    node.type = tout;
    tn_array *out;
    if (strided_out && tout.ndim >= 2) {
        int64_t rs[TN_MAX_DIMS];
        for (int d = 0; d < tout.ndim; d++) rs[d] = tout.shape[tout.ndim - 1 - d];
        tn_array *buf = tn_array_empty(tout.dtype, tout.ndim, rs);
        out = tn_array_transpose(buf, NULL);
        tn_array_free(buf);
    } else {
        out = tn_array_empty(tout.dtype, tout.ndim, tout.shape);
    }
    if (def->cpu(&node, &x, &out) != TN_OK) { tn_array_free(out); return NULL; }
    return out;
}

/* The element of a at flat (row-major) index k, as double, or as an exact
   int64 for int arrays. */
static int64_t get_i64(const tn_array *a, const int64_t *idx) {
    const char *p = (const char *)a->data;
    for (int d = 0; d < a->ndim; d++) p += idx[d] * a->strides[d];
    switch (a->dtype) {
    case TN_BOOL: return *(const uint8_t *)p;
    case TN_I32: return *(const int32_t *)(const void *)p;
    default: return *(const int64_t *)(const void *)p;
    }
}

/* Compares out with the references along every line. Returns mismatches. */
static int check_cum(int op, int axis, const tn_array *x, const tn_array *out, const char *what) {
    bool prod = op == TN_OP_CUMPROD, isf = tn_dtype_is_float(x->dtype);
    int nd = x->ndim, bad = 0;
    if (out->dtype != (isf ? x->dtype : TN_I64) || out->ndim != nd) {
        fprintf(stderr, "  %s: output %s of ndim %d\n", what, tn_dtype_name(out->dtype), out->ndim);
        return 1;
    }
    int64_t n = x->shape[axis], lines = 1, idx[TN_MAX_DIMS];
    for (int d = 0; d < nd; d++) if (d != axis) lines *= x->shape[d];
    if (n == 0 || lines == 0) return 0;
    int64_t oshape[TN_MAX_DIMS];   /* the other dims, to unravel a line index */
    int no = 0;
    for (int d = 0; d < nd; d++) if (d != axis) oshape[no++] = x->shape[d];
    for (int64_t l = 0; l < lines; l++) {
        int64_t r = l;
        for (int d = nd - 1, k = no - 1; d >= 0; d--) {
            if (d == axis) continue;
            idx[d] = r % oshape[k]; r /= oshape[k]; k--;
        }
        double a64 = 0, mag = 0;
        float a32 = 0;
        uint64_t ai = 0;
        for (int64_t j = 0; j < n; j++) {
            idx[axis] = j;
            double xv = tn_array_get(x, idx), got = tn_array_get(out, idx);
            if (!isf) {
                uint64_t xi = (uint64_t)get_i64(x, idx);
                ai = j == 0 ? xi : prod ? ai * xi : ai + xi;
                int64_t g = get_i64(out, idx);
                if (g != (int64_t)ai && bad++ < 3)
                    fprintf(stderr, "  %s line %lld j %lld: got %lld want %lld\n", what, (long long)l, (long long)j, (long long)g, (long long)(int64_t)ai);
                continue;
            }
            a64 = j == 0 ? xv : prod ? a64 * xv : a64 + xv;
            a32 = j == 0 ? (float)xv : prod ? a32 * (float)xv : a32 + (float)xv;
            mag = prod ? fabs(a64) : fmax(mag, fabs(a64));   /* the scale of the float32 accumulator's error */
            /* the kernel's own precision, exactly: float32 accumulators for float16 and float32 */
            double exact = x->dtype == TN_F64 ? a64 : x->dtype == TN_F32 ? (double)a32 : (double)tn_f16_to_f32(tn_f32_to_f16(a32));
            bool ok = isnan(exact) ? isnan(got) : got == exact;
            /* and the float64 reference: a float32 accumulator's rounding per step, and
               float16's half an ulp when stored (a float16 accumulator would be far off) */
            double acc_err = 1.2e-7 * (double)(j + 1) * mag + 1e-36;
            double tol = x->dtype == TN_F16 ? 4.9e-4 * fabs(a64) + acc_err + 6e-8 : x->dtype == TN_F32 ? acc_err : 0;
            if (isfinite(exact))   /* where the kernel's precision overflowed, float64's value tells nothing */
                ok = ok && (isnan(a64) ? isnan(got) : isinf(a64) ? got == a64 : fabs(got - a64) <= tol);
            if (!ok && bad++ < 3)
                fprintf(stderr, "  %s line %lld j %lld: got %.9g want %.9g (float64 %.9g)\n", what, (long long)l, (long long)j, got, exact, a64);
        }
    }
    return bad;
}

/* >>kernel --------------------------------------------------------------- */

TEST(test_kernel_all_dtypes_shapes_axes_layouts) {
    struct { int nd; int64_t sh[3]; } shapes[] = {
        { 1, { 0 } }, { 1, { 1 } }, { 1, { 7 } }, { 1, { 1000 } }, { 2, { 3, 5 } }, { 2, { 1, 6 } }, { 2, { 6, 1 } },
        { 3, { 2, 3, 4 } }, { 3, { 4, 0, 3 } }, { 3, { 5, 1, 7 } },
    };
    int runs = 0;
    for (int op = TN_OP_CUMSUM; op <= TN_OP_CUMPROD; op++)
        for (int t = TN_BOOL; t < TN_DTYPE_COUNT; t++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (int L = 0; L < L_COUNT; L++)
                    for (int ax = -shapes[s].nd; ax < shapes[s].nd; ax++) {
                        int nd = shapes[s].nd, axis = ax < 0 ? ax + nd : ax;
                        if (L == L_BCAST && shapes[s].sh[0] == 0) continue;
                        tn_array *x = make_input((tn_dtype)t, nd, shapes[s].sh, (layout)L, op == TN_OP_CUMPROD);
                        tn_array *out = run_kernel(op, axis, x, (L + ax) % 2 != 0);
                        char what[128], sb[128];
                        snprintf(what, sizeof what, "%s %s %s %s axis %d", tn__op_def(op)->name, tn_dtype_name((tn_dtype)t),
                                 tn__shape_str(nd, shapes[s].sh, sb), layout_name[L], ax);
                        CHECK(out != NULL, "%s: %s", what, tn_last_error());
                        if (out) CHECK(check_cum(op, axis, x, out, what) == 0, "%s: mismatches", what);
                        runs++;
                        tn_array_free(x);
                        tn_array_free(out);
                    }
    CHECK(runs > 1000, "only %d runs", runs);
}

/* Large inputs take the threaded paths: lines split over the pool, blocks of
   lanes when the axis is not the smallest stride. */
TEST(test_kernel_threads) {
    struct { int64_t r, c; int axis; tn_dtype t; } cs[] = {
        { 3000, 300, 0, TN_F32 }, { 3000, 300, 1, TN_F32 }, { 200000, 3, 0, TN_F64 }, { 40, 5000, 1, TN_F16 },
        { 700, 700, 0, TN_I64 }, { 700, 700, 1, TN_I32 },
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
        for (int op = TN_OP_CUMSUM; op <= TN_OP_CUMPROD; op++) {
            int64_t sh[2] = { cs[k].r, cs[k].c };
            tn_array *x = make_input(cs[k].t, 2, sh, k % 2 ? L_TRANSPOSED : L_CONTIG, op == TN_OP_CUMPROD);
            tn_array *out = run_kernel(op, cs[k].axis, x, false);
            char what[96];
            snprintf(what, sizeof what, "%s %s (%lld, %lld) axis %d", tn__op_def(op)->name, tn_dtype_name(cs[k].t),
                     (long long)cs[k].r, (long long)cs[k].c, cs[k].axis);
            CHECK(out && check_cum(op, cs[k].axis, x, out, what) == 0, "%s: %s", what, tn_last_error());
            tn_array_free(x);
            tn_array_free(out);
        }
}

/* NaN, infinities, signed zeros, zeros in products, int64 wrap, int32 not
   wrapping at 32 bits, bool counts. */
TEST(test_kernel_edges) {
    struct { int op; double in[5]; int n; double want[5]; bool negzero[5]; } fc[] = {
        { TN_OP_CUMSUM, { 1, NAN, 2 }, 3, { 1, NAN, NAN }, { 0 } },
        { TN_OP_CUMSUM, { INFINITY, 1, -INFINITY, 2 }, 4, { INFINITY, INFINITY, NAN, NAN }, { 0 } },
        { TN_OP_CUMSUM, { -0.0, -0.0, 0.0 }, 3, { -0.0, -0.0, 0.0 }, { 1, 1, 0 } },
        { TN_OP_CUMPROD, { 2, 0, 3, INFINITY }, 4, { 2, 0, 0, NAN }, { 0 } },
        { TN_OP_CUMPROD, { -1, 0, 5 }, 3, { -1, -0.0, -0.0 }, { 0, 1, 1 } },
        { TN_OP_CUMPROD, { NAN, 0, 1 }, 3, { NAN, NAN, NAN }, { 0 } },
        { TN_OP_CUMPROD, { -0.0 }, 1, { -0.0 }, { 1 } },
    };
    for (size_t k = 0; k < sizeof fc / sizeof fc[0]; k++)
        for (int t = TN_F16; t <= TN_F64; t++) {
            int64_t n = fc[k].n;
            tn_array *x64 = tn_array_from_data(TN_F64, 1, &n, fc[k].in), *x = tn_array_astype(x64, (tn_dtype)t);
            tn_array *out = run_kernel(fc[k].op, 0, x, false);
            CHECK(out != NULL, "%s", tn_last_error());
            for (int64_t i = 0; out && i < n; i++) {
                double got = tn_array_get(out, &i), want = fc[k].want[i];
                CHECK(isnan(want) ? isnan(got) : got == want && (got != 0 || !signbit(got) == !fc[k].negzero[i]),
                      "case %zu %s [%lld]: got %g want %s%g", k, tn_dtype_name((tn_dtype)t), (long long)i, got,
                      fc[k].negzero[i] ? "-" : "", want);
            }
            tn_array_free(out); tn_array_free(x); tn_array_free(x64);
        }
    /* ints: wrapping int64 arithmetic (NumPy's), int32 and bool widened to int64 */
    int64_t n3 = 3, n4 = 4, n2 = 2;
    int64_t big[3] = { INT64_MAX, 1, 1 }, pw[3] = { (int64_t)1 << 62, 2, 2 };
    int32_t i32[2] = { INT32_MAX, 1 };
    uint8_t b[4] = { 1, 0, 1, 1 }, bp[4] = { 1, 1, 0, 1 };
    struct { int op; tn_dtype t; const void *data; int64_t n; int64_t want[4]; } ic[] = {
        { TN_OP_CUMSUM, TN_I64, big, 3, { INT64_MAX, INT64_MIN, INT64_MIN + 1 } },
        { TN_OP_CUMPROD, TN_I64, pw, 3, { (int64_t)1 << 62, INT64_MIN, 0 } },
        { TN_OP_CUMSUM, TN_I32, i32, 2, { INT32_MAX, (int64_t)INT32_MAX + 1 } },
        { TN_OP_CUMSUM, TN_BOOL, b, 4, { 1, 1, 2, 3 } },
        { TN_OP_CUMPROD, TN_BOOL, bp, 4, { 1, 1, 0, 0 } },
    };
    (void)n3; (void)n4; (void)n2;
    for (size_t k = 0; k < sizeof ic / sizeof ic[0]; k++) {
        tn_array *x = tn_array_from_data(ic[k].t, 1, &ic[k].n, ic[k].data);
        tn_array *out = run_kernel(ic[k].op, 0, x, false);
        CHECK(out && out->dtype == TN_I64, "int case %zu: %s", k, tn_last_error());
        for (int64_t i = 0; out && i < ic[k].n; i++)
            CHECK(get_i64(out, &i) == ic[k].want[i], "int case %zu [%lld]: got %lld want %lld", k, (long long)i,
                  (long long)get_i64(out, &i), (long long)ic[k].want[i]);
        tn_array_free(out); tn_array_free(x);
    }
}

/* >>graph ---------------------------------------------------------------- */

TEST(test_types_labels_errors) {
    tn_graph *g = tn_graph_new();
    static const tn_dtype want[TN_DTYPE_COUNT] = { TN_DTYPE_NONE, TN_I64, TN_I64, TN_I64, TN_F16, TN_F32, TN_F64 };
    for (int t = TN_BOOL; t < TN_DTYPE_COUNT; t++) {
        tn_var *x = tn_input(g, "x", (tn_dtype)t, 2, (int64_t[]){ 3, -1 }, NULL);
        tn_var *s = tn_cumsum(x, 1), *p = tn_cumprod(x, -2);
        CHECK(s && p && s->type.dtype == want[t] && p->type.dtype == want[t], "%s: %s", tn_dtype_name((tn_dtype)t), tn_last_error());
        CHECK(s && s->type.ndim == 2 && s->type.shape[0] == 3 && s->type.shape[1] == -1, "the shape is x's");
    }
    tn_var *x = tn_input(g, "x", TN_F32, 2, (int64_t[]){ 3, 4 }, NULL);
    char buf[64];
    tn_var *s = tn_cumsum(x, -1), *p = tn_cumprod(x, 0);
    tn__op_def(TN_OP_CUMSUM)->label(s, buf, sizeof buf);
    CHECK(strcmp(buf, "CumSum{axis=1}") == 0, "label '%s'", buf);
    tn__op_def(TN_OP_CUMPROD)->label(p, buf, sizeof buf);
    CHECK(strcmp(buf, "CumProd{axis=0}") == 0, "label '%s'", buf);
    CHECK(tn__op_kind(TN_OP_CUMSUM) == TN_OPK_OTHER && tn__op_kind(TN_OP_CUMPROD) == TN_OPK_OTHER,
          "a kind the CUDA back end does not claim");
    /* errors name the constructor, the variable and its shape */
    CHECK(tn_cumsum(x, 2) == NULL, "axis 2 of a matrix");
    CHECK_ERR(TN_ERR_AXIS, "tn_cumsum");
    CHECK_ERR(TN_ERR_AXIS, "(3, 4)");
    CHECK_ERR(TN_ERR_AXIS, "'x'");
    CHECK(tn_cumprod(x, -3) == NULL, "axis -3 of a matrix");
    CHECK_ERR(TN_ERR_AXIS, "tn_cumprod");
    CHECK_ERR(TN_ERR_AXIS, "(3, 4)");
    tn_var *u = tn_input(g, "u", TN_F64, 2, (int64_t[]){ -1, 4 }, NULL);
    CHECK(tn_cumsum(u, 5) == NULL, "unknown dims");
    CHECK_ERR(TN_ERR_AXIS, "(?, 4)");
    CHECK(tn_cumsum(tn_scalar(g, "c", TN_F32), 0) == NULL, "a scalar has no axis");
    CHECK_ERR(TN_ERR_AXIS, "()");
    tn_clear_error();
    CHECK(tn_cumsum(NULL, 0) == NULL, "NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_cumsum");
    tn_graph_free(g);
}

/* Through a compiled function, between fused elementwise groups. */
TEST(test_function) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F64);
    tn_var *y = tn_add(tn_exp(tn_cumsum(tn_mul(x, tn_lit(x, 0.5)), 1)), tn_cumprod(tn_tanh(x), 0));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f != NULL, "%s", tn_last_error());
    int64_t sh[2] = { 4, 6 };
    tn_array *a = make_input(TN_F64, 2, sh, L_TRANSPOSED, false), *out = NULL;
    if (f && tn_call(f, &a, &out) == TN_OK) {
        for (int64_t i = 0; i < 4; i++)
            for (int64_t j = 0; j < 6; j++) {
                double cs = 0, cp = 1;
                for (int64_t k = 0; k <= j; k++) cs += 0.5 * tn_array_get(a, (int64_t[]){ i, k });
                for (int64_t k = 0; k <= i; k++) cp *= tanh(tn_array_get(a, (int64_t[]){ k, j }));
                double got = tn_array_get(out, (int64_t[]){ i, j }), want = exp(cs) + cp;
                CHECK(th_close(got, want, 1e-12, 1e-12), "(%lld, %lld): got %.17g want %.17g", (long long)i, (long long)j, got, want);
            }
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        tn_debugprint_function(f, m);
        fclose(m);
        CHECK(strstr(buf, "CumSum{axis=1}") && strstr(buf, "CumProd{axis=0}"), "debugprint:\n%s", buf);
        free(buf);
    } else {
        CHECK(0, "tn_call: %s", tn_last_error());
    }
    tn_array_free(a); tn_array_free(out);
    tn_function_free(f);
    tn_graph_free(g);
}

/* >>gradients ------------------------------------------------------------ */

typedef struct { int op, axis; } cum_case;
static tn_var *b_cum(tn_graph *g, tn_var *const *in, void *u) {
    (void)g;
    const cum_case *c = (const cum_case *)u;
    tn_var *y = c->op == TN_OP_CUMSUM ? tn_cumsum(in[0], c->axis) : tn_cumprod(in[0], c->axis);
    return tn_mul(y, tn_cos(in[0]));     /* a non-constant upstream gradient */
}

static uint64_t seed = 77;
static void vg(const cum_case *c, tn_array *pt, bool static_shapes, const char *what) {
    tn_verify_grad_report rep;
    tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_cum, .user = (void *)c, .n_inputs = 1, .points = &pt,
                                                         .seed = seed++, .static_shapes = static_shapes }, &rep);
    CHECK(r == TN_OK, "%s: %s", what, tn_last_error());
}

TEST(test_verify_grad) {
    struct { int nd; int64_t sh[3]; int axis; } cs[] = {
        { 1, { 5 }, 0 }, { 2, { 3, 4 }, 0 }, { 2, { 3, 4 }, 1 }, { 2, { 3, 4 }, -1 }, { 3, { 2, 3, 4 }, 1 }, { 2, { 1, 4 }, 0 },
    };
    for (int op = TN_OP_CUMSUM; op <= TN_OP_CUMPROD; op++)
        for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
            for (int st = 0; st < 2; st++) {
                cum_case c = { op, cs[k].axis };
                tn_array *pt = tn_array_rand_uniform(TN_F64, cs[k].nd, cs[k].sh, op == TN_OP_CUMPROD ? 0.5 : -2,
                                                     op == TN_OP_CUMPROD ? 1.5 : 2, seed++);
                if (op == TN_OP_CUMPROD && k % 2)   /* negative factors too */
                    for (int64_t i = 0; i < tn_array_size(pt); i += 3) ((double *)pt->data)[i] *= -1;
                char what[96];
                snprintf(what, sizeof what, "%s case %zu %s", tn__op_def(op)->name, k, st ? "static" : "unknown shapes");
                vg(&c, pt, st != 0, what);
                tn_array_free(pt);
            }
}

/* cumprod with zeros: one per line, two, at the ends, all zeros: exact (no
   division by x), so finite differences agree. */
TEST(test_cumprod_zeros) {
    static const double rows[][5] = {
        { 1.3, 0, 0.7, -1.2, 0.9 },   /* one zero */
        { 0, 1.1, -0.8, 1.4, 0.6 },   /* at the start */
        { 1.2, 0.9, -1.1, 0.8, 0 },   /* at the end */
        { 0.9, 0, 1.3, 0, 1.1 },      /* two */
        { 0, 0, 0, 0, 0 },            /* all */
    };
    int64_t sh[2] = { 5, 5 };
    tn_array *pt = tn_array_from_data(TN_F64, 2, sh, rows);
    cum_case c = { TN_OP_CUMPROD, 1 };
    vg(&c, pt, true, "cumprod with zeros along rows");
    vg(&c, pt, false, "cumprod with zeros, unknown shapes");
    tn_array *t = tn_array_transpose(pt, NULL), *tc = tn_array_copy(t);
    cum_case c0 = { TN_OP_CUMPROD, 0 };
    vg(&c0, tc, true, "cumprod with zeros along columns");
    tn_array_free(t); tn_array_free(tc); tn_array_free(pt);

    /* exact values: d sum(cumprod(x)) / d x for x = [2, 0, 3, 4] is [1, 2 + 2*3 + 2*3*4, 0, 0] */
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *gx = tn_grad1(tn_sum(tn_cumprod(x, 0), NULL, 0, false), x);
    tn_func *f = gx ? tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &gx }) : NULL;
    CHECK(f != NULL, "%s", tn_last_error());
    double xs[2][4] = { { 2, 0, 3, 4 }, { 0, 2, 0, 3 } }, want[2][4] = { { 1, 32, 0, 0 }, { 3, 0, 0, 0 } };
    for (int k = 0; f && k < 2; k++) {
        int64_t n = 4;
        tn_array *a = tn_array_from_data(TN_F64, 1, &n, xs[k]), *out = NULL;
        CHECK(tn_call(f, &a, &out) == TN_OK, "%s", tn_last_error());
        for (int64_t i = 0; out && i < 4; i++)
            CHECK(tn_array_get(out, &i) == want[k][i], "x %d: gradient[%lld] = %g, want %g", k, (long long)i, tn_array_get(out, &i), want[k][i]);
        tn_array_free(a); tn_array_free(out);
    }
    tn_function_free(f);
    tn_graph_free(g);
}

/* The gradients differentiate again (Hessian-vector products): cumsum's has
   whole reversals, cumprod's a cumprod of one more dim. */
static tn_var *b_grad_of(tn_graph *g, tn_var *const *in, void *u) {
    (void)g;
    int which = *(int *)u;
    tn_var *x = in[0];
    tn_var *y = which ? tn_cumprod(x, 1) : tn_cumsum(x, 0);
    return tn_grad1(tn_sum(tn_mul(tn_mul(y, y), tn_sin(x)), NULL, 0, false), x);
}

TEST(test_second_derivatives) {
    for (int w = 0; w < 2; w++)
        for (int st = 0; st < 2; st++) {
            tn_array *pt = tn_array_rand_uniform(TN_F64, 2, (int64_t[]){ 3, 4 }, 0.5, 1.5, seed++);
            tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_grad_of, .user = &w, .n_inputs = 1, .points = &pt,
                                                                 .seed = seed++, .static_shapes = st != 0 }, NULL);
            CHECK(r == TN_OK, "grad of grad of %s (%s): %s", w ? "cumprod" : "cumsum", st ? "static" : "unknown shapes", tn_last_error());
            tn_array_free(pt);
        }
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_kernel_all_dtypes_shapes_axes_layouts);
    TH_RUN(test_kernel_threads);
    TH_RUN(test_kernel_edges);
    TH_RUN(test_types_labels_errors);
    TH_RUN(test_function);
    TH_RUN(test_verify_grad);
    TH_RUN(test_cumprod_zeros);
    TH_RUN(test_second_derivatives);
    tn_shutdown();
    TH_END();
}
