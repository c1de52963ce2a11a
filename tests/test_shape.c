/* tests/test_shape.c - shape ops: reshape, dimshuffle, slice, flatten,
   broadcast_to, concatenate, stack, alloc/fill, eye, arange. Each op runs
   twice: through its op definition (infer + CPU kernel, as the executor
   calls it) and through tn_function/tn_call; both are compared with index
   arithmetic written here. Inputs are random and often non-contiguous. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

static double ref_get(const tn_array *a, const int64_t *idx) {
    const char *p = (const char *)a->data;
    for (int d = 0; d < a->ndim; d++) p += idx[d] * a->strides[d];
    switch (a->dtype) {
    case TN_BOOL: return *(const uint8_t *)p;
    case TN_I32: return *(const int32_t *)p;
    case TN_I64: return (double)*(const int64_t *)p;
    case TN_F16: return tn_f16_to_f32(*(const uint16_t *)p);
    case TN_F32: return *(const float *)p;
    default: return *(const double *)p;
    }
}

static bool next_index(int ndim, const int64_t *shape, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

/* element k (C order) of a */
static double flat_get(const tn_array *a, int64_t k) {
    int64_t idx[TN_MAX_DIMS];
    for (int d = a->ndim - 1; d >= 0; d--) { idx[d] = k % a->shape[d]; k /= a->shape[d]; }
    return ref_get(a, idx);
}

static tn_var *input_like(tn_graph *g, const char *name, const tn_array *a, bool known_shape) {
    return tn_input(g, name, a->dtype, a->ndim, known_shape ? a->shape : NULL, NULL);
}

/* Runs node's op directly, as the executor does: infer with concrete input
   types, then the kernel into an aliasing struct (views) or a new array. */
static tn_array *run_direct(tn_var *node, tn_array *const *in) {
    const tn_op_def *def = tn__op_def(node->op);
    tn_type it[16], ot;
    for (int i = 0; i < node->n_in; i++) {
        memset(&it[i], 0, sizeof it[i]);
        it[i].dtype = in[i]->dtype;
        it[i].ndim = in[i]->ndim;
        for (int d = 0; d < in[i]->ndim; d++) { it[i].shape[d] = in[i]->shape[d]; it[i].bcast[d] = in[i]->shape[d] == 1; }
    }
    memset(&ot, 0, sizeof ot);
    if (def->infer(node, it, &ot) != TN_OK) return NULL;
    tn_array *o;
    if (def->kind == TN_OPK_VIEW) {
        o = tn__array_from_buffer(in[0]->base, ot.dtype, ot.ndim, ot.shape, NULL, in[0]->data, in[0]->device);
    } else {
        o = tn__array_alloc(ot.dtype, ot.ndim, ot.shape, TN_HOST);
    }
    if (!o) return NULL;
    if (def->cpu(node, in, &o) != TN_OK) { tn_array_free(o); return NULL; }
    return o;
}

/* Through a compiled function; NULL (and a note) while the executor is missing. */
static tn_array *run_function(tn_graph *g, int n_in, tn_var *const *vars, tn_var *out, tn_array *const *in) {
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = n_in, .inputs = vars, .n_outputs = 1, .outputs = &out });
    if (!f) return NULL;
    tn_array *r = NULL;
    if (tn_call(f, in, &r) != TN_OK) r = NULL;
    tn_function_free(f);
    return r;
}

typedef double (*ref_fn)(void *ctx, const int64_t *idx);

/* Compares a result with ref at every index, and its shape with want. */
static void check_result(const char *what, const tn_array *got, int nd, const int64_t *want, ref_fn ref, void *ctx) {
    CHECK(got != NULL, "%s: %s", what, tn_last_error());
    if (!got) return;
    bool shape_ok = got->ndim == nd;
    for (int d = 0; shape_ok && d < nd; d++) shape_ok = got->shape[d] == want[d];
    char s1[128], s2[128];
    CHECK(shape_ok, "%s: shape %s want %s", what, tn__shape_str(got->ndim, got->shape, s1), tn__shape_str(nd, want, s2));
    if (!shape_ok || tn_array_size(got) == 0) return;
    int64_t idx[TN_MAX_DIMS] = {0};
    int bad = 0;
    do {
        double g = ref_get(got, idx), r = ref(ctx, idx);
        if (!(g == r) && bad++ < 3) CHECK(g == r, "%s: at flat index got %g want %g", what, g, r);
    } while (next_index(nd, got->shape, idx));
}

/* Checks a node both ways. */
static void check_node(const char *what, tn_graph *g, int n_in, tn_var *const *vars, tn_var *node, tn_array *const *in,
                       int nd, const int64_t *want, ref_fn ref, void *ctx) {
    CHECK(node != NULL, "%s: constructor: %s", what, tn_last_error());
    if (!node) return;
    tn_array *d = run_direct(node, in);
    char w[160];
    snprintf(w, sizeof w, "%s (kernel)", what);
    check_result(w, d, nd, want, ref, ctx);
    tn_array_free(d);
    tn_array *f = run_function(g, n_in, vars, node, in);
    snprintf(w, sizeof w, "%s (tn_call)", what);
    check_result(w, f, nd, want, ref, ctx);
    tn_array_free(f);
}

/* ---- reshape / flatten: same C-order sequence */
typedef struct { const tn_array *x; const int64_t *shape; int nd; } flat_ctx;
static double ref_flat(void *c, const int64_t *idx) {
    flat_ctx *f = (flat_ctx *)c;
    int64_t k = 0;
    for (int d = 0; d < f->nd; d++) k = k * f->shape[d] + idx[d];
    return flat_get(f->x, k);
}

TEST(test_reshape) {
    tn_array *base = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){6, 4}, -1, 1, 1);
    tn_array *xt = tn_array_transpose(base, NULL);                           /* (4, 6), non-contiguous */
    tn_array *xs = tn_array_slice(base, 0, TN_NONE, TN_NONE, 2);              /* (3, 4), step 2 */
    const tn_array *xs_list[] = {base, xt, xs};
    struct { int nd; int64_t shape[4]; int64_t want[4]; } cases[] = {
        {3, {2, -1, 3}, {2, 0, 3}}, {1, {-1}, {0}}, {4, {1, 2, 1, -1}, {1, 2, 1, 0}},
    };
    for (int xi = 0; xi < 3; xi++) for (int c = 0; c < 3; c++) {
        const tn_array *x = xs_list[xi];
        int64_t n = tn_array_size(x), want[4];
        int64_t known = 1;
        for (int d = 0; d < cases[c].nd; d++) if (cases[c].shape[d] > 0) known *= cases[c].shape[d];
        for (int d = 0; d < cases[c].nd; d++) want[d] = cases[c].shape[d] > 0 ? cases[c].shape[d] : n / known;
        if (n % known) continue;
        for (int ks = 0; ks < 2; ks++) {
            tn_graph *g = tn_graph_new();
            tn_var *v = input_like(g, "x", x, ks);
            tn_var *r = tn_reshape(v, cases[c].nd, cases[c].shape);
            if (r && ks) {
                bool ok = r->type.ndim == cases[c].nd;
                for (int d = 0; ok && d < cases[c].nd; d++) ok = r->type.shape[d] == want[d];
                CHECK(ok, "build-time shape of reshape %d/%d", xi, c);
            }
            if (r && !ks) CHECK(r->type.shape[0] == (cases[c].shape[0] < 0 ? -1 : cases[c].shape[0]), "unknown stays unknown");
            flat_ctx fc = { x, want, cases[c].nd };
            char what[64];
            snprintf(what, sizeof what, "reshape x%d case %d known=%d", xi, c, ks);
            check_node(what, g, 1, &v, r, (tn_array *const *)&x, cases[c].nd, want, ref_flat, &fc);
            tn_graph_free(g);
        }
    }
    /* errors: at build time when shapes are known; at call time otherwise */
    tn_graph *g = tn_graph_new();
    tn_var *m = tn_matrix(g, "m", TN_F32);
    tn_var *k = tn_input(g, "k", TN_F32, 2, (int64_t[]){3, 4}, NULL);
    CHECK(tn_reshape(m, 2, (int64_t[]){5, 3}) != NULL, "unknown size: no build-time error");
    CHECK(!tn_reshape(k, 2, (int64_t[]){5, 3}), "known size mismatch");
    CHECK_ERR(TN_ERR_SHAPE, "cannot reshape an array of size 12 (3, 4) into (5, 3)");
    CHECK(!tn_reshape(k, 2, (int64_t[]){-1, -1}), "two -1");
    CHECK_ERR(TN_ERR_SHAPE, "only specify one unknown dimension");
    tn_var *bad = tn_reshape(m, 2, (int64_t[]){5, 3});
    tn_array *in = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){3, 4}, 0, 1, 3);
    tn_array *out = run_function(g, 1, &m, bad, &in);
    if (tn_last_result() != TN_ERR_UNSUPPORTED) {     /* when the executor runs */
        CHECK(!out, "call-time reshape mismatch");
        CHECK_ERR(TN_ERR_SHAPE, "cannot reshape an array of size 12 (3, 4) into (5, 3)");
    }
    char lb[64];
    tn__op_def(TN_OP_RESHAPE)->label(bad, lb, sizeof lb);
    CHECK(!strcmp(lb, "Reshape{2}"), "label %s", lb);
    tn_array_free(out); tn_array_free(in);
    tn_graph_free(g);
    tn_array_free(base); tn_array_free(xt); tn_array_free(xs);
}

TEST(test_flatten) {
    tn_array *base = tn_array_rand_uniform(TN_F64, 3, (int64_t[]){3, 4, 5}, -1, 1, 4);
    tn_array *xt = tn_array_transpose(base, (int[]){1, 2, 0});               /* (4, 5, 3) */
    const tn_array *xs_list[] = {base, xt};
    for (int xi = 0; xi < 2; xi++) for (int outdim = 1; outdim <= 3; outdim++) {
        const tn_array *x = xs_list[xi];
        int64_t want[3];
        for (int d = 0; d < outdim - 1; d++) want[d] = x->shape[d];
        want[outdim - 1] = 1;
        for (int d = outdim - 1; d < 3; d++) want[outdim - 1] *= x->shape[d];
        tn_graph *g = tn_graph_new();
        tn_var *v = input_like(g, "x", x, false);
        tn_var *r = tn_flatten(v, outdim);
        flat_ctx fc = { x, want, outdim };
        char what[64];
        snprintf(what, sizeof what, "flatten x%d outdim %d", xi, outdim);
        check_node(what, g, 1, &v, r, (tn_array *const *)&x, outdim, want, ref_flat, &fc);
        tn_graph_free(g);
    }
    tn_graph *g = tn_graph_new();
    tn_var *m = tn_matrix(g, "m", TN_F32);
    CHECK(!tn_flatten(m, 3), "outdim too big");
    CHECK_ERR(TN_ERR_INVALID, "outdim 3 must be in [1, 2]");
    tn_graph_free(g);
    tn_array_free(base); tn_array_free(xt);
}

/* A reshape of a kernel's output is a view (no copy): borrowed outputs share
   the kernel's buffer. A reshape of a caller's array or of a transposing view
   copies. Values against exp in double; an in-place step after the view
   (y * 2, y's last reader) must not write the buffer the view returns. */
TEST(test_reshape_views_kernel_outputs) {
    tn_array *X = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){4, 6}, -2, 2, 11);
    for (int borrow = 0; borrow < 2; borrow++) {
        tn_graph *g = tn_graph_new();
        tn_var *x = tn_input(g, "x", TN_F32, 2, (int64_t[]){4, 6}, NULL);
        tn_var *e = tn_exp(x);
        tn_var *outs[6] = {
            e,
            tn_reshape(e, TN_SHAPE(2, 12)),                                   /* view */
            tn_reshape(tn_dimshuffle(e, 2, (int[]){1, 0}), TN_SHAPE(24)),     /* copy: transposed input */
            tn_flatten(tn_reshape(e, TN_SHAPE(3, 8)), 1),                     /* a view of a view */
            tn_reshape(x, TN_SHAPE(24)),                                      /* copy: the caller's array */
            tn_mul(e, tn_lit(e, 2.0)),
        };
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 6, .outputs = outs, .borrow = borrow });
        CHECK(f != NULL, "tn_function: %s", tn_last_error());
        tn_array *r[6] = { NULL };
        CHECK(f && tn_call(f, &X, r) == TN_OK, "tn_call: %s", tn_last_error());
        if (f && r[0]) {
            if (borrow) {
                CHECK(r[1]->data == r[0]->data, "reshape of exp(x) is a view of its buffer");
                CHECK(r[3]->data == r[0]->data, "flatten(reshape(exp(x))) is a view of its buffer");
            }
            CHECK(r[2]->data != r[0]->data, "reshape of a transposed view copies");
            CHECK(r[4]->data != X->data, "reshape of the caller's array copies");
            int bad = 0;
            for (int64_t k = 0; k < 24; k++) {
                int64_t i = k / 6, j = k % 6, ti = k % 4, tj = k / 4;     /* C order of (4, 6); of its transpose (6, 4) */
                double xv = ((const float *)X->data)[k], want = exp(xv), wt = exp((double)((const float *)X->data)[ti * 6 + tj]);
                double got[6] = { flat_get(r[0], k), flat_get(r[1], k), flat_get(r[2], k), flat_get(r[3], k), flat_get(r[4], k), flat_get(r[5], k) };
                bool ok = fabs(got[0] - want) <= 1e-6 * want && got[1] == got[0] && got[3] == got[0] && got[4] == xv &&
                          fabs(got[2] - wt) <= 1e-6 * wt && fabs(got[5] - 2 * want) <= 2e-6 * want;
                if (!ok && bad++ < 3)
                    CHECK(ok, "borrow=%d element %lld (%lld, %lld): %g %g %g %g %g %g, want exp %g, transposed %g", borrow, (long long)k, (long long)i,
                          (long long)j, got[0], got[1], got[2], got[3], got[4], got[5], want, wt);
            }
            CHECK(bad == 0, "borrow=%d: %d wrong elements", borrow, bad);
        }
        if (!borrow) for (int i = 0; i < 6; i++) tn_array_free(r[i]);
        tn_function_free(f);
        tn_graph_free(g);
    }
    tn_array_free(X);
}

/* ---- dimshuffle */
typedef struct { const tn_array *x; const int *pat; int nd; } ds_ctx;
static double ref_ds(void *c, const int64_t *idx) {
    ds_ctx *s = (ds_ctx *)c;
    int64_t src[TN_MAX_DIMS] = {0};
    for (int k = 0; k < s->nd; k++) if (s->pat[k] >= 0) src[s->pat[k]] = idx[k];
    return ref_get(s->x, src);
}

TEST(test_dimshuffle) {
    tn_array *base = tn_array_rand_normal(TN_F32, 3, (int64_t[]){2, 1, 5}, 0, 1, 5);
    tn_array *sl = tn_array_slice(base, 2, TN_NONE, TN_NONE, -2);              /* (2, 1, 3), negative stride */
    const tn_array *xs_list[] = {base, sl};
    struct { int nd; int pat[5]; } cases[] = {
        {3, {2, 1, 0}}, {2, {0, 2}}, {4, {-1, 0, 2, -1}}, {5, {2, -1, 1, 0, -1}}, {3, {0, 1, 2}},
    };
    for (int xi = 0; xi < 2; xi++) for (int c = 0; c < 5; c++) {
        const tn_array *x = xs_list[xi];
        int64_t want[5];
        for (int k = 0; k < cases[c].nd; k++) want[k] = cases[c].pat[k] < 0 ? 1 : x->shape[cases[c].pat[k]];
        tn_graph *g = tn_graph_new();
        tn_var *v = tn_input(g, "x", x->dtype, 3, NULL, (bool[]){false, true, false});
        tn_var *r = tn_dimshuffle(v, cases[c].nd, cases[c].pat);
        if (r) for (int k = 0; k < cases[c].nd; k++)
            CHECK(r->type.bcast[k] == (cases[c].pat[k] < 0 || cases[c].pat[k] == 1), "bcast of out dim %d", k);
        ds_ctx dc = { x, cases[c].pat, cases[c].nd };
        char what[64];
        snprintf(what, sizeof what, "dimshuffle x%d case %d", xi, c);
        check_node(what, g, 1, &v, r, (tn_array *const *)&x, cases[c].nd, want, ref_ds, &dc);
        /* the kernel makes a view */
        tn_array *d = r ? run_direct(r, (tn_array *const *)&x) : NULL;
        CHECK(d && d->base == x->base, "dimshuffle shares the buffer");
        tn_array_free(d);
        if (c == 3 && r) {
            char lb[64];
            tn__op_def(TN_OP_DIMSHUFFLE)->label(r, lb, sizeof lb);
            CHECK(!strcmp(lb, "DimShuffle{2,x,1,0,x}"), "label %s", lb);
        }
        tn_graph_free(g);
    }
    tn_graph *g = tn_graph_new();
    tn_var *m = tn_matrix(g, "m", TN_F32);
    tn_var *t = tn_transpose(m, NULL);
    char lb[64];
    if (t) { tn__op_def(TN_OP_DIMSHUFFLE)->label(t, lb, sizeof lb); CHECK(!strcmp(lb, "DimShuffle{1,0}"), "label %s", lb); }
    CHECK(!tn_dimshuffle(m, 1, (int[]){0}), "drop a non-broadcastable dim");
    CHECK_ERR(TN_ERR_SHAPE, "cannot drop axis 1");
    CHECK(!tn_dimshuffle(m, 2, (int[]){0, 2}), "axis out of range");
    CHECK_ERR(TN_ERR_AXIS, "axis 2");
    CHECK(!tn_dimshuffle(m, 2, (int[]){0, 0}), "repeat");
    CHECK_ERR(TN_ERR_AXIS, "appears twice");
    CHECK(!tn_transpose(m, (int[]){1, 1}), "transpose repeat");
    CHECK_ERR(TN_ERR_AXIS, "tn_transpose: perm[1] = 1 is repeated");
    tn_graph_free(g);
    tn_array_free(base); tn_array_free(sl);
}

/* ---- slice: Python's range over the resolved bounds */
typedef struct { const tn_array *x; int ax; int64_t idx[64]; } sl_ctx;
static double ref_sl(void *c, const int64_t *idx) {
    sl_ctx *s = (sl_ctx *)c;
    int64_t src[TN_MAX_DIMS];
    for (int d = 0; d < s->x->ndim; d++) src[d] = idx[d];
    src[s->ax] = s->idx[idx[s->ax]];
    return ref_get(s->x, src);
}
static int64_t py_range(int64_t n, int64_t start, int64_t stop, int64_t step, int64_t *out) {
    int64_t lo, hi, cnt = 0;
    if (step == TN_NONE) step = 1;
    if (step > 0) {
        lo = start == TN_NONE ? 0 : start < 0 ? start + n : start;
        hi = stop == TN_NONE ? n : stop < 0 ? stop + n : stop;
        lo = lo < 0 ? 0 : lo > n ? n : lo; hi = hi < 0 ? 0 : hi > n ? n : hi;
        for (int64_t i = lo; i < hi; i += step) { out[cnt++] = i; if (step >= hi - i) break; }   /* no overflow */
    } else {
        lo = start == TN_NONE ? n - 1 : start < 0 ? start + n : start;
        hi = stop == TN_NONE ? -1 : stop < 0 ? stop + n : stop;
        lo = lo < -1 ? -1 : lo > n - 1 ? n - 1 : lo; hi = hi < -1 ? -1 : hi > n - 1 ? n - 1 : hi;
        for (int64_t i = lo; i > hi; i += step) { out[cnt++] = i; if (-step >= i - hi) break; }
    }
    return cnt;
}

TEST(test_slice) {
    tn_array *base = tn_array_rand_uniform(TN_I32, 2, (int64_t[]){7, 9}, -100, 100, 6);
    tn_array *xt = tn_array_transpose(base, NULL);                            /* (9, 7) */
    const tn_array *xs_list[] = {base, xt};
    struct { int axis; int64_t a, b, s; } cases[] = {
        {0, 1, 5, 1}, {1, TN_NONE, TN_NONE, 2}, {0, TN_NONE, TN_NONE, -1}, {1, -2, 1, -3}, {-1, -100, 100, 4},
        {0, 6, 2, 1}, {1, TN_NONE, -3, TN_NONE}, {0, -1, TN_NONE, -2},
        /* steps of any size: one element, no overflow in the length or the stride */
        {0, 1, TN_NONE, INT64_MAX}, {1, TN_NONE, TN_NONE, INT64_MAX}, {0, -2, TN_NONE, INT64_MIN + 1}, {1, 3, -100, -INT64_MAX},
    };
    for (int xi = 0; xi < 2; xi++) for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const tn_array *x = xs_list[xi];
        sl_ctx sc = { x, cases[c].axis < 0 ? cases[c].axis + 2 : cases[c].axis, {0} };
        int64_t want[2] = { x->shape[0], x->shape[1] };
        want[sc.ax] = py_range(x->shape[sc.ax], cases[c].a, cases[c].b, cases[c].s, sc.idx);
        for (int ks = 0; ks < 2; ks++) {
            tn_graph *g = tn_graph_new();
            tn_var *v = input_like(g, "x", x, ks);
            tn_var *r = tn_slice(v, cases[c].axis, cases[c].a, cases[c].b, cases[c].s);
            if (r && ks) CHECK(r->type.shape[sc.ax] == want[sc.ax], "build-time slice length");
            char what[64];
            snprintf(what, sizeof what, "slice x%d case %zu known=%d", xi, c, ks);
            check_node(what, g, 1, &v, r, (tn_array *const *)&x, 2, want, ref_sl, &sc);
            tn_graph_free(g);
        }
    }
    /* labels like Theano */
    tn_graph *g = tn_graph_new();
    tn_var *m = tn_matrix(g, "m", TN_F32), *v = tn_vector(g, "v", TN_F32);
    struct { tn_var *x; int ax; int64_t a, b, s; const char *want; } lbl[] = {
        {v, 0, TN_NONE, TN_NONE, 2, "Subtensor{::2}"}, {v, 0, 1, 3, 1, "Subtensor{1:3:}"},
        {m, 1, 1, TN_NONE, 1, "Subtensor{::, 1::}"}, {v, 0, TN_NONE, TN_NONE, -1, "Subtensor{::-1}"},
    };
    for (int i = 0; i < 4; i++) {
        tn_var *s = tn_slice(lbl[i].x, lbl[i].ax, lbl[i].a, lbl[i].b, lbl[i].s);
        char lb[64] = "";
        if (s) tn__op_def(TN_OP_SLICE)->label(s, lb, sizeof lb);
        CHECK(!strcmp(lb, lbl[i].want), "label %s want %s", lb, lbl[i].want);
    }
    CHECK(!tn_slice(m, 2, 0, 1, 1), "axis");
    CHECK_ERR(TN_ERR_AXIS, "tn_slice: axis 2 is out of range for 'm'");
    CHECK(!tn_slice(m, 0, 0, 1, 0), "step 0");
    CHECK_ERR(TN_ERR_INVALID, "step cannot be zero");
    tn_graph_free(g);
    tn_array_free(base); tn_array_free(xt);
}

/* ---- broadcast_to and alloc/fill: value broadcast NumPy-style */
typedef struct { const tn_array *x; int nd; } bc_ctx;
static double ref_bc(void *c, const int64_t *idx) {
    bc_ctx *b = (bc_ctx *)c;
    int64_t src[TN_MAX_DIMS];
    int off = b->nd - b->x->ndim;
    for (int d = 0; d < b->x->ndim; d++) src[d] = b->x->shape[d] == 1 ? 0 : idx[d + off];
    return ref_get(b->x, src);
}

TEST(test_broadcast_alloc) {
    tn_array *col = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){4, 1}, -5, 5, 7);
    tn_array *rowb = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){3, 6}, -5, 5, 8);
    tn_array *row = tn_array_slice(rowb, 0, 1, 2, 1);                          /* (1, 6) strided view */
    tn_array *sc = tn_array_scalar(TN_F64, 2.75);
    struct { const tn_array *x; int nd; int64_t shape[4]; } cases[] = {
        {col, 3, {2, 4, 5}}, {row, 2, {3, 6}}, {row, 4, {2, 1, 5, 6}}, {sc, 2, {3, 2}}, {col, 2, {4, 1}},
    };
    for (int c = 0; c < 5; c++) {
        const tn_array *x = cases[c].x;
        bc_ctx bc = { x, cases[c].nd };
        tn_graph *g = tn_graph_new();
        tn_var *v = input_like(g, "x", x, true);
        char what[64];
        snprintf(what, sizeof what, "broadcast_to case %d", c);
        check_node(what, g, 1, &v, tn_broadcast_to(v, cases[c].nd, cases[c].shape), (tn_array *const *)&x,
                   cases[c].nd, cases[c].shape, ref_bc, &bc);
        snprintf(what, sizeof what, "alloc case %d", c);
        tn_var *al = tn_alloc(v, cases[c].nd, cases[c].shape);
        check_node(what, g, 1, &v, al, (tn_array *const *)&x, cases[c].nd, cases[c].shape, ref_bc, &bc);
        if (al) { char lb[32]; tn__op_def(TN_OP_ALLOC)->label(al, lb, sizeof lb); CHECK(!strcmp(lb, "Alloc"), "label %s", lb); }
        /* fill: like's shape, known only at call time */
        tn_var *like = tn_input(g, "like", TN_F32, cases[c].nd, NULL, NULL);
        tn_var *fl = tn_fill(like, v);
        tn_array *likev = tn_array_rand_uniform(TN_F32, cases[c].nd, cases[c].shape, 1, 2, 9);
        tn_array *ins[2] = { likev, (tn_array *)x };
        tn_var *vars[2] = { like, v };
        snprintf(what, sizeof what, "fill case %d", c);
        if (fl) {
            /* direct: ALLOC's inputs are (value, like) */
            tn_array *din[2] = { (tn_array *)x, likev };
            tn_array *d = run_direct(fl, din);
            check_result(what, d, cases[c].nd, cases[c].shape, ref_bc, &bc);
            tn_array_free(d);
            tn_array *f = run_function(g, 2, vars, fl, ins);
            check_result(what, f, cases[c].nd, cases[c].shape, ref_bc, &bc);
            tn_array_free(f);
        } else CHECK(fl, "tn_fill: %s", tn_last_error());
        tn_array_free(likev);
        tn_graph_free(g);
    }
    /* a weak literal takes like's dtype */
    tn_graph *g = tn_graph_new();
    tn_var *m = tn_matrix(g, "m", TN_F32), *k = tn_input(g, "k", TN_F32, 2, (int64_t[]){3, 4}, NULL);
    tn_var *fl = tn_fill(m, tn_scalar_const(g, 1.5));
    CHECK(fl && fl->type.dtype == TN_F32, "fill with a literal is float32");
    CHECK(tn_alloc(tn_scalar_const(g, 1.5), 1, (int64_t[]){2})->type.dtype == TN_F32, "alloc of a literal is floatX");
    /* a literal behind a no-op dimshuffle is a float64 value; the optimizer
       removes the dimshuffle, and the types stay as built */
    tn_var *lit = tn_dimshuffle(tn_scalar_const(g, 0.5), 0, NULL);
    tn_var *outs[2] = { tn_alloc(lit, 1, (int64_t[]){2}), tn_fill(k, lit) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &k, .n_outputs = 2, .outputs = outs });
    tn_array *kv = tn_array_zeros(TN_F32, 2, (int64_t[]){3, 4}), *res[2] = { NULL, NULL };
    CHECK(f && tn_call(f, &kv, res) == TN_OK, "alloc and fill of a shuffled literal: %s", tn_last_error());
    for (int i = 0; i < 2; i++)
        CHECK(res[i] && res[i]->dtype == TN_F64 && tn_array_get(res[i], (int64_t[]){1, 1}) == 0.5, "output %d: float64 0.5", i);
    tn_array_free(res[0]); tn_array_free(res[1]); tn_array_free(kv);
    tn_function_free(f);
    CHECK(!tn_broadcast_to(k, 2, (int64_t[]){3, 5}), "bad broadcast");
    CHECK_ERR(TN_ERR_SHAPE, "cannot broadcast (3, 4) to (3, 5)");
    CHECK(!tn_alloc(k, 1, (int64_t[]){4}), "alloc fewer dims");
    CHECK_ERR(TN_ERR_SHAPE, "the target has fewer dims");
    CHECK(tn_broadcast_to(m, 3, (int64_t[]){2, 3, 4}) != NULL, "unknown dims: checked at call time");
    tn_graph_free(g);
    tn_array_free(col); tn_array_free(rowb); tn_array_free(row); tn_array_free(sc);
}

/* ---- concatenate / stack */
typedef struct { const tn_array *const *xs; int n, ax; } cat_ctx;
static double ref_cat(void *c, const int64_t *idx) {
    cat_ctx *k = (cat_ctx *)c;
    int64_t src[TN_MAX_DIMS];
    int nd = k->xs[0]->ndim;
    for (int d = 0; d < nd; d++) src[d] = idx[d];
    for (int i = 0; i < k->n; i++) {
        if (src[k->ax] < k->xs[i]->shape[k->ax]) return ref_get(k->xs[i], src);
        src[k->ax] -= k->xs[i]->shape[k->ax];
    }
    return NAN;
}
static double ref_stack(void *c, const int64_t *idx) {
    cat_ctx *k = (cat_ctx *)c;
    int64_t src[TN_MAX_DIMS];
    int nd = k->xs[0]->ndim;
    for (int d = 0, j = 0; d <= nd; d++) if (d != k->ax) src[j++] = idx[d];
    return ref_get(k->xs[idx[k->ax]], src);
}

TEST(test_concatenate_stack) {
    tn_array *a = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){3, 4}, -1, 1, 10);
    tn_array *bb = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){4, 5}, -1, 1, 11);
    tn_array *b = tn_array_transpose(bb, NULL);                               /* (5, 4) */
    tn_array *c = tn_array_rand_uniform(TN_I32, 2, (int64_t[]){2, 4}, -50, 50, 12);   /* promotes to float32 */
    const tn_array *xs[3] = {a, b, c};
    tn_graph *g = tn_graph_new();
    tn_var *v[3] = { input_like(g, "a", a, false), input_like(g, "b", b, false), input_like(g, "c", c, false) };
    tn_var *r = tn_concatenate(3, v, 0);
    cat_ctx cc = { xs, 3, 0 };
    check_node("concatenate axis 0", g, 3, v, r, (tn_array *const *)xs, 2, (int64_t[]){10, 4}, ref_cat, &cc);
    CHECK(r && r->type.dtype == TN_F32, "promoted dtype");
    char lb[64];
    if (r) { tn__op_def(TN_OP_CONCATENATE)->label(r, lb, sizeof lb); CHECK(!strcmp(lb, "Join{axis=0}"), "label %s", lb); }
    tn_graph_free(g);
    /* axis 1 with negative axis, and a strided input */
    tn_array *d = tn_array_slice(bb, 1, TN_NONE, TN_NONE, -2);                 /* (4, 3) */
    tn_array *e = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){4, 2}, -1, 1, 13);
    const tn_array *ys[2] = {d, e};
    g = tn_graph_new();
    tn_var *w[2] = { input_like(g, "d", d, true), input_like(g, "e", e, true) };
    r = tn_concatenate(2, w, -1);
    CHECK(r && r->type.shape[1] == 5, "build-time concat length");
    cat_ctx cd = { ys, 2, 1 };
    check_node("concatenate axis -1", g, 2, w, r, (tn_array *const *)ys, 2, (int64_t[]){4, 5}, ref_cat, &cd);
    tn_var *k = tn_input(g, "k", TN_F32, 2, (int64_t[]){3, 3}, NULL);
    tn_var *bad[2] = { w[0], k };
    CHECK(!tn_concatenate(2, bad, 1), "known mismatch");
    CHECK_ERR(TN_ERR_SHAPE, "Join: input 1 has shape (3, 3)");
    /* lengths along the axis that add up past what strides address */
    tn_var *h = tn_input(g, "h", TN_F32, 2, (int64_t[]){0, (int64_t)1 << 58}, NULL);
    CHECK(!tn_concatenate(2, (tn_var *[]){ h, h }, 1), "2^58 + 2^58");
    CHECK_ERR(TN_ERR_SHAPE, "tn_concatenate: the result's shape (0, 576460752303423488) is too large");
    tn_graph_free(g);
    /* stack: every axis */
    tn_array *s0 = tn_array_rand_uniform(TN_F64, 2, (int64_t[]){3, 4}, -1, 1, 14);
    tn_array *s1b = tn_array_rand_uniform(TN_F64, 2, (int64_t[]){4, 3}, -1, 1, 15);
    tn_array *s1 = tn_array_transpose(s1b, NULL);
    const tn_array *ss[2] = {s0, s1};
    for (int ax = -3; ax <= 2; ax++) {
        g = tn_graph_new();
        tn_var *u[2] = { input_like(g, "s0", s0, false), input_like(g, "s1", s1, false) };
        tn_var *st = tn_stack(2, u, ax);
        int pa = ax < 0 ? ax + 3 : ax;
        int64_t want[3];
        for (int dd = 0, j = 0; dd < 3; dd++) want[dd] = dd == pa ? 2 : s0->shape[j++];
        cat_ctx cs = { ss, 2, pa };
        char what[64];
        snprintf(what, sizeof what, "stack axis %d", ax);
        if (st) {
            /* stack is dimshuffle + join: run it through tn_call only */
            tn_array *f = run_function(g, 2, u, st, (tn_array *const *)ss);
            if (f || tn_last_result() != TN_ERR_UNSUPPORTED) check_result(what, f, 3, want, ref_stack, &cs);
            tn_array_free(f);
        } else CHECK(st, "%s: %s", what, tn_last_error());
        tn_graph_free(g);
    }
    tn_array_free(a); tn_array_free(bb); tn_array_free(b); tn_array_free(c); tn_array_free(d); tn_array_free(e);
    tn_array_free(s0); tn_array_free(s1b); tn_array_free(s1);
}

/* ---- eye / arange */
typedef struct { int64_t k; } eye_ctx;
static double ref_eye(void *c, const int64_t *idx) { return idx[1] - idx[0] == ((eye_ctx *)c)->k; }
typedef struct { double a, s; tn_dtype t; } ar_ctx;
static double ref_ar(void *c, const int64_t *idx) {
    ar_ctx *r = (ar_ctx *)c;
    double v = r->a + (double)idx[0] * r->s;
    return r->t == TN_F32 ? (double)(float)v : r->t == TN_I32 ? trunc(v) : v;
}

TEST(test_eye_arange) {
    struct { int64_t n, m, k; } ec[] = { {3, 3, 0}, {3, 5, 1}, {5, 3, -2}, {4, -1, 0}, {2, 2, 5}, {3, 4, INT64_MAX}, {3, 4, INT64_MIN + 1} };
    for (size_t c = 0; c < sizeof ec / sizeof ec[0]; c++) {
        tn_graph *g = tn_graph_new();
        tn_var *e = tn_eye(g, TN_F32, ec[c].n, ec[c].m, ec[c].k);
        int64_t want[2] = { ec[c].n, ec[c].m < 0 ? ec[c].n : ec[c].m };
        eye_ctx ek = { ec[c].k };
        check_node("eye", g, 0, NULL, e, NULL, 2, want, ref_eye, &ek);
        tn_graph_free(g);
    }
    struct { tn_dtype t; double a, b, s; } ac[] = { {TN_F64, 0, 1, 0.1}, {TN_I32, -3, 10, 2}, {TN_F32, 5, -5, -1.5}, {TN_F64, 1, 1, 1} };
    for (int c = 0; c < 4; c++) {
        tn_graph *g = tn_graph_new();
        tn_var *e = tn_arange(g, ac[c].t, ac[c].a, ac[c].b, ac[c].s);
        int64_t n = (int64_t)fmax(0, ceil((ac[c].b - ac[c].a) / ac[c].s));
        ar_ctx ak = { ac[c].a, ac[c].s, ac[c].t };
        CHECK(e && e->type.shape[0] == n, "arange build-time length");
        check_node("arange", g, 0, NULL, e, NULL, 1, &n, ref_ar, &ak);
        if (e) { char lb[32]; tn__op_def(TN_OP_ARANGE)->label(e, lb, sizeof lb); CHECK(!strcmp(lb, "ARange"), "label %s", lb); }
        tn_graph_free(g);
    }
    tn_graph *g = tn_graph_new();
    CHECK(!tn_arange(g, TN_F32, 0, 1, 0), "step 0");
    CHECK_ERR(TN_ERR_INVALID, "tn_arange: step is 0");
    CHECK(!tn_eye(g, TN_F32, -1, 2, 0), "negative n");
    CHECK_ERR(TN_ERR_SHAPE, "tn_eye: n = -1 is negative");
    tn_graph_free(g);
}

/* eye with symbolic n, m, k (tn_eye_var): the shape comes from the values
   at each call. out must be n x m with ones exactly where j - i == k. */
static void check_eye_out(const char *what, const tn_array *o, tn_dtype t, int64_t n, int64_t m, int64_t k) {
    CHECK(o && o->dtype == t && o->ndim == 2 && o->shape[0] == n && o->shape[1] == m, "%s: got %s (%lld, %lld), want %s (%lld, %lld)",
          what, o ? tn_dtype_name(o->dtype) : "none", o && o->ndim == 2 ? (long long)o->shape[0] : -1LL,
          o && o->ndim == 2 ? (long long)o->shape[1] : -1LL, tn_dtype_name(t), (long long)n, (long long)m);
    if (!o || o->ndim != 2 || o->shape[0] != n || o->shape[1] != m) return;
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) bad += ref_get(o, (int64_t[]){ i, j }) != (j - i == k ? 1.0 : 0.0);
    CHECK(bad == 0, "%s: %d of %lld elements differ from j - i == %lld", what, bad, (long long)(n * m), (long long)k);
}

TEST(test_eye_var) {
    tn_dtype dts[] = { TN_F16, TN_F32, TN_F64, TN_I32, TN_I64, TN_BOOL };
    for (size_t c = 0; c < sizeof dts / sizeof dts[0]; c++) {
        tn_graph *g = tn_graph_new();
        tn_var *n = tn_input(g, "n", TN_I64, 0, NULL, NULL), *m = tn_input(g, "m", TN_I32, 0, NULL, NULL);
        tn_var *k = tn_input(g, "k", TN_I64, 0, NULL, NULL), *e = tn_eye_var(dts[c], n, m, k);
        CHECK(e && e->type.ndim == 2 && e->type.shape[0] == -1 && e->type.shape[1] == -1 && e->type.dtype == dts[c],
              "%s: build-time type: %s", tn_dtype_name(dts[c]), tn_last_error());
        tn_func *f = e ? tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = (tn_var *[]){ n, m, k }, .n_outputs = 1,
                                                         .outputs = &e }) : NULL;
        CHECK(f, "%s: compile: %s", tn_dtype_name(dts[c]), tn_last_error());
        /* the shape changes between calls of one function; k < 0, k >= m, n = 0, m = 0 */
        int64_t cs[][3] = { {3, 4, 0}, {5, 3, -2}, {2, 2, 5}, {0, 3, 0}, {4, 0, 1}, {3, 4, 1}, {3, 4, 1}, {6, 6, -6}, {1, 1, 0} };
        for (size_t i = 0; f && i < sizeof cs / sizeof cs[0]; i++) {
            tn_array *in[3] = { tn_array_scalar(TN_I64, (double)cs[i][0]), tn_array_scalar(TN_I32, (double)cs[i][1]),
                                tn_array_scalar(TN_I64, (double)cs[i][2]) }, *o = NULL;
            char what[96];
            snprintf(what, sizeof what, "%s eye(%lld, %lld, %lld)", tn_dtype_name(dts[c]), (long long)cs[i][0], (long long)cs[i][1], (long long)cs[i][2]);
            CHECK(tn_call(f, in, &o) == TN_OK, "%s: %s", what, tn_last_error());
            check_eye_out(what, o, dts[c], cs[i][0], cs[i][1], cs[i][2]);
            tn_array_free(o);
            for (int j = 0; j < 3; j++) tn_array_free(in[j]);
        }
        tn_function_free(f);
        tn_graph_free(g);
    }
    /* m and k omitted (n x n, diagonal 0); n a shared variable; k an int32 computed in the graph */
    tn_graph *g = tn_graph_new();
    tn_array *nv = tn_array_scalar(TN_I32, 3), *kv = tn_array_scalar(TN_I32, -1);
    tn_var *n = tn_shared(g, "n", nv), *kin = tn_input(g, "k", TN_I32, 0, NULL, NULL);
    tn_var *e1 = tn_eye_var(TN_F32, n, NULL, NULL), *e2 = tn_eye_var(TN_F16, n, n, tn_add(kin, kin));
    tn_func *f = e1 && e2 ? tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &kin, .n_outputs = 2,
                                                            .outputs = (tn_var *[]){ e1, e2 } }) : NULL;
    CHECK(f, "shared n: %s", tn_last_error());
    tn_array *o[2] = { NULL, NULL };
    CHECK(f && tn_call(f, &kv, o) == TN_OK, "shared n: %s", tn_last_error());
    check_eye_out("eye(n) with n shared", o[0], TN_F32, 3, 3, 0);
    check_eye_out("eye(n, n, k + k)", o[1], TN_F16, 3, 3, -2);
    tn_array_free(o[0]); tn_array_free(o[1]); o[0] = o[1] = NULL;
    tn_array *n5 = tn_array_scalar(TN_I32, 5);
    CHECK(tn_shared_set_value(n, n5) == TN_OK, "set n: %s", tn_last_error());
    CHECK(f && tn_call(f, &kv, o) == TN_OK, "shared n = 5: %s", tn_last_error());
    check_eye_out("eye(n) with n shared, set to 5", o[0], TN_F32, 5, 5, 0);
    check_eye_out("eye(n, n, k + k), n = 5", o[1], TN_F16, 5, 5, -2);
    tn_array_free(o[0]); tn_array_free(o[1]);
    tn_function_free(f);
    /* constants: the shape is known at build time, and the node folds */
    tn_array *c2 = tn_array_scalar(TN_I64, 2), *c4 = tn_array_scalar(TN_I64, 4);
    tn_var *ec = tn_eye_var(TN_F64, tn_constant(g, c2), tn_constant(g, c4), tn_constant(g, c2));
    CHECK(ec && ec->type.shape[0] == 2 && ec->type.shape[1] == 4, "constant sizes: (2, 4) at build time: %s", tn_last_error());
    tn_array *oc = NULL;
    f = ec ? tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &ec }) : NULL;
    CHECK(f && tn_call(f, NULL, &oc) == TN_OK, "constant sizes: %s", tn_last_error());
    check_eye_out("eye(2, 4, 2) of constants", oc, TN_F64, 2, 4, 2);
    tn_array_free(oc);
    tn_function_free(f);

    /* errors: which one, naming the function, the variable and its type or value */
    tn_var *x = tn_vector(g, "x", TN_I64), *fl = tn_input(g, "fl", TN_F32, 0, NULL, NULL), *ni = tn_input(g, "ni", TN_I64, 0, NULL, NULL);
    CHECK(!tn_eye_var(TN_F32, NULL, NULL, NULL), "n NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_eye_var: n");
    CHECK(!tn_eye_var(TN_F32, x, NULL, NULL), "n a vector");
    CHECK_ERR(TN_ERR_DTYPE, "tn_eye_var: n ('x') must be a 0-d int32 or int64 scalar, got TensorType(int64, (?,))");
    CHECK(!tn_eye_var(TN_F32, ni, fl, NULL), "m a float");
    CHECK_ERR(TN_ERR_DTYPE, "tn_eye_var: m ('fl') must be a 0-d int32 or int64 scalar, got TensorType(float32, ())");
    CHECK(!tn_eye_var(TN_F32, ni, ni, fl), "k a float");
    CHECK_ERR(TN_ERR_DTYPE, "tn_eye_var: k ('fl') must be a 0-d int32 or int64 scalar, got TensorType(float32, ())");
    CHECK(!tn_eye_var((tn_dtype)99, ni, NULL, NULL), "bad dtype");
    CHECK_ERR(TN_ERR_DTYPE, "tn_eye_var: invalid dtype 99");
    CHECK(!tn_eye_var(TN_F32, tn_add(ni, ni), NULL, NULL), "n computed");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "tn_eye_var: n ('') is computed in the graph (by add)");
    tn_array *cm1 = tn_array_scalar(TN_I64, -1);
    CHECK(!tn_eye_var(TN_F32, tn_constant(g, cm1), NULL, NULL), "n a negative constant");
    CHECK_ERR(TN_ERR_SHAPE, "tn_eye_var: n ('') = -1 is negative");
    tn_graph *g2 = tn_graph_new();
    tn_var *other = tn_input(g2, "o", TN_I64, 0, NULL, NULL);
    CHECK(!tn_eye_var(TN_F32, ni, other, NULL), "m of another graph");
    CHECK_ERR(TN_ERR_GRAPH, "tn_eye_var: input 1 ('o') belongs to another graph");
    tn_graph_free(g2);
    /* a negative value at call time: the call fails, naming the op, the variable and the value; the next call works */
    tn_var *ev = tn_eye_var(TN_F32, ni, NULL, NULL);
    f = ev ? tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &ni, .n_outputs = 1, .outputs = &ev }) : NULL;
    oc = NULL;
    CHECK(f && tn_call(f, &cm1, &oc) == TN_ERR_SHAPE && !oc, "n = -1 at call time");
    CHECK_ERR(TN_ERR_SHAPE, "Eye: n ('ni') = -1 is negative");
    CHECK(f && tn_call(f, &c2, &oc) == TN_OK, "n = 2 after a failed call: %s", tn_last_error());
    check_eye_out("eye(2) after a failed call", oc, TN_F32, 2, 2, 0);
    tn_array_free(oc);
    tn_function_free(f);
    /* gradients: through eye to a float that scales it (d sum(eye(n) * w) / dw = n); none reaches n */
    tn_var *w = tn_scalar(g, "w", TN_F32), *cost = tn_sum(tn_mul(tn_eye_var(TN_F32, ni, NULL, NULL), w), NULL, 0, false);
    tn_var *gw = cost ? tn_grad1(cost, w) : NULL;
    CHECK(gw, "grad through eye: %s", tn_last_error());
    f = gw ? tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ ni, w }, .n_outputs = 1, .outputs = &gw }) : NULL;
    tn_array *wv = tn_array_scalar(TN_F32, 2.5);
    oc = NULL;
    CHECK(f && tn_call(f, (tn_array *[]){ c4, wv }, &oc) == TN_OK && tn_array_get(oc, NULL) == 4.0, "d/dw sum(eye(4) * w) = %g: %s",
          oc ? tn_array_get(oc, NULL) : -1.0, tn_last_error());
    tn_array_free(oc); tn_array_free(wv);
    tn_function_free(f);
    tn_var *gn = cost ? tn_grad1(cost, ni) : NULL;
    CHECK(!gn, "a gradient wrt the integer n");
    CHECK_ERR(TN_ERR_DTYPE, "tn_grad1: wrt[0] 'ni' is int64: gradients are defined for float variables only");
    tn_graph_free(g);
    tn_array_free(nv); tn_array_free(kv); tn_array_free(n5); tn_array_free(c2); tn_array_free(c4); tn_array_free(cm1);
}

/* TN_SHAPE and TN_AXES expand to the (ndim, shape) and (axes, naxes) pairs. */
TEST(test_shape_and_axes_macros) {
    tn_array *r = tn_array_arange(TN_F64, 0, 24, 1), *a = tn_array_reshape(r, TN_SHAPE(2, 3, 4));
    CHECK(a && a->ndim == 3 && a->shape[0] == 2 && a->shape[1] == 3 && a->shape[2] == 4, "TN_SHAPE(2, 3, 4)");
    tn_array *one = tn_array_zeros(TN_F32, TN_SHAPE(7));
    CHECK(one && one->ndim == 1 && one->shape[0] == 7, "TN_SHAPE(7)");
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_tensor3(g, "x", TN_F64), *s = tn_sum(x, TN_AXES(0, -1), true), *m = tn_max(x, TN_AXES(1), false);
    CHECK(s && s->type.ndim == 3 && s->type.bcast[0] && s->type.bcast[2] && !s->type.bcast[1], "sum over axes 0 and -1, kept");
    CHECK(m && m->type.ndim == 2, "max over axis 1");
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = (tn_var *[]){ s, m } });
    tn_array *out[2] = { NULL, NULL };
    CHECK(f && a && tn_call(f, &a, out) == TN_OK, "call: %s", tn_last_error());
    if (out[0] && out[1]) {
        for (int64_t j = 0; j < 3; j++)    /* sum over i < 2, k < 4 of 12i + 4j + k; max over j of it: 12i + 8 + k */
            CHECK(tn_array_get(out[0], (int64_t[]){ 0, j, 0 }) == 60 + 32 * j, "sum at %lld", (long long)j);
        CHECK(tn_array_get(out[1], (int64_t[]){ 1, 3 }) == 23, "max at (1, 3)");
    }
    tn_array_free(out[0]); tn_array_free(out[1]);
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(one); tn_array_free(a); tn_array_free(r);
}

int main(void) {
    TH_RUN(test_shape_and_axes_macros);
    TH_RUN(test_reshape);
    TH_RUN(test_flatten);
    TH_RUN(test_reshape_views_kernel_outputs);
    TH_RUN(test_dimshuffle);
    TH_RUN(test_slice);
    TH_RUN(test_broadcast_alloc);
    TH_RUN(test_concatenate_stack);
    TH_RUN(test_eye_arange);
    TH_RUN(test_eye_var);
    TH_END();
}
