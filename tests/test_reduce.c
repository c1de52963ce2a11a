/* Reductions and softmax: every op, dtype, axis subset, keepdims and layout
   against a float64 reference computed here; dtype rules, empty reductions,
   NaN, stability, large inputs (threads, accuracy), errors, labels, a fused
   prologue, and the same ops through tn_function. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

static const int th_ops[] = { TN_OP_SUM, TN_OP_PROD, TN_OP_MEAN, TN_OP_MAX, TN_OP_MIN, TN_OP_ARGMAX,
                              TN_OP_ARGMIN, TN_OP_ALL, TN_OP_ANY, TN_OP_LOGSUMEXP };
static const tn_dtype th_dtypes[] = { TN_BOOL, TN_I32, TN_I64, TN_F16, TN_F32, TN_F64 };

/* A node on the stack: enough for an op's infer and cpu. i0, i1: a
   reduction's axis mask and keepdims, or softmax's axis. */
static tn_var th_node(int op, int64_t i0, int64_t i1) {
    tn_var n;
    memset(&n, 0, sizeof n);
    n.op = op; n.n_in = 1; n.n_out = 1;
    if (op == TN_OP_SOFTMAX || op == TN_OP_LOG_SOFTMAX) tn__p_set_axis(&n.p, (int)i0);
    else tn__p_set_red(&n.p, (uint64_t)i0, i1 != 0);
    return n;
}

static tn_type th_type_of(const tn_array *a) {
    tn_type t;
    memset(&t, 0, sizeof t);
    t.dtype = a->dtype; t.ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) { t.shape[d] = a->shape[d]; t.bcast[d] = false; }
    return t;
}

/* Runs node on x via its op def: infer, allocate, cpu. NULL with the error set. */
static tn_array *th_run(const tn_var *node, tn_array *x) {
    const tn_op_def *def = tn__op_def(node->op);
    tn_type in = th_type_of(x), out;
    if (def->infer(node, &in, &out) != TN_OK) return NULL;
    tn_array *y = tn__array_alloc(out.dtype, out.ndim, out.shape, TN_HOST);
    if (!y) return NULL;
    if (def->cpu(node, &x, &y) != TN_OK) { tn_array_free(y); return NULL; }
    return y;
}

/* An input of `shape` in one of three layouts: 0 contiguous, 1 a transposed
   view, 2 a view sliced with step -2 on axis 0 and step 2 on the last axis. */
static tn_array *th_input(tn_dtype t, int nd, const int64_t *shape, int layout, double lo, double hi, uint64_t seed) {
    int64_t sh[TN_MAX_DIMS];
    if (layout == 1 && nd >= 2) {
        for (int d = 0; d < nd; d++) sh[d] = shape[nd - 1 - d];
        tn_array *b = tn_array_rand_uniform(t, nd, sh, lo, hi, seed);
        tn_array *v = tn_array_transpose(b, NULL);
        tn_array_free(b);
        return v;
    }
    if (layout == 2 && nd >= 1) {
        memcpy(sh, shape, sizeof(int64_t) * (size_t)nd);
        sh[0] *= 2; sh[nd - 1] *= 2;
        if (nd == 1) sh[0] = shape[0] * 4;
        tn_array *b = tn_array_rand_uniform(t, nd, sh, lo, hi, seed);
        tn_array *v1 = tn_array_slice(b, 0, TN_NONE, TN_NONE, -2);
        tn_array *v = tn_array_slice(v1, nd - 1, 1, TN_NONE, 2);
        tn_array_free(b); tn_array_free(v1);
        return v;
    }
    return tn_array_rand_uniform(t, nd, shape, lo, hi, seed);
}

/* Reference of one reduction: the value (double) at every output element, in
   C order, plus the sum of |x| of its box (for tolerances). Int sums and
   products wrap in uint64 as NumPy's do. */
static void th_reference(int op, const tn_array *x, uint64_t mask, double *ref, double *mag) {
    int nd = x->ndim, kd[TN_MAX_DIMS], rd[TN_MAX_DIMS], nk = 0, nr = 0;
    int64_t M = 1, N = 1;
    for (int d = 0; d < nd; d++) {
        if ((mask >> d) & 1) { rd[nr++] = d; N *= x->shape[d]; }
        else { kd[nk++] = d; M *= x->shape[d]; }
    }
    bool isint = !tn_dtype_is_float(x->dtype);
    for (int64_t o = 0; o < M; o++) {
        int64_t idx[TN_MAX_DIMS] = {0}, rem = o;
        for (int k = nk - 1; k >= 0; k--) { idx[kd[k]] = rem % x->shape[kd[k]]; rem /= x->shape[kd[k]]; }
        double s = 0, p = 1, mx = -INFINITY, mn = INFINITY, m = 0;
        uint64_t is = 0, ip = 1;
        int64_t amax = -1, amin = -1;
        double vmax = 0, vmin = 0;
        bool all = true, any = false, nan = false;
        *mag = 0;
        for (int64_t r = 0; r < N; r++) {
            int64_t rr = r;
            for (int k = nr - 1; k >= 0; k--) { idx[rd[k]] = rr % x->shape[rd[k]]; rr /= x->shape[rd[k]]; }
            double v = tn_array_get(x, idx);
            s += v; p *= v; mag[0] += fabs(v);
            is += (uint64_t)(int64_t)v; ip *= (uint64_t)(int64_t)v;
            if (isnan(v)) nan = true;
            if (v > mx) mx = v;
            if (v < mn) mn = v;
            if (amax < 0 || (!isnan(vmax) && (isnan(v) || v > vmax))) { amax = r; vmax = v; }
            if (amin < 0 || (!isnan(vmin) && (isnan(v) || v < vmin))) { amin = r; vmin = v; }
            all = all && v != 0; any = any || v != 0;
        }
        if (nan) { mx = NAN; mn = NAN; }
        switch (op) {
        case TN_OP_SUM: ref[o] = isint ? (double)(int64_t)is : s; break;
        case TN_OP_PROD: ref[o] = isint ? (double)(int64_t)ip : p; break;
        case TN_OP_MEAN: ref[o] = s / (double)N; break;
        case TN_OP_MAX: ref[o] = mx; break;
        case TN_OP_MIN: ref[o] = mn; break;
        case TN_OP_ARGMAX: ref[o] = (double)amax; break;
        case TN_OP_ARGMIN: ref[o] = (double)amin; break;
        case TN_OP_ALL: ref[o] = all; break;
        case TN_OP_ANY: ref[o] = any; break;
        case TN_OP_LOGSUMEXP:
            m = mx;
            if (!isfinite(m)) { ref[o] = m; break; }
            s = 0;
            for (int64_t r = 0; r < N; r++) {
                int64_t rr = r;
                for (int k = nr - 1; k >= 0; k--) { idx[rd[k]] = rr % x->shape[rd[k]]; rr /= x->shape[rd[k]]; }
                s += exp(tn_array_get(x, idx) - m);
            }
            ref[o] = m + log(s);
            break;
        }
        mag++;
    }
}

static tn_dtype th_out_dtype(int op, tn_dtype t) {
    bool fl = tn_dtype_is_float(t);
    switch (op) {
    case TN_OP_SUM: case TN_OP_PROD: return fl ? t : TN_I64;
    case TN_OP_MEAN: case TN_OP_LOGSUMEXP: case TN_OP_SOFTMAX: case TN_OP_LOG_SOFTMAX: return fl ? t : TN_F64;
    case TN_OP_ARGMAX: case TN_OP_ARGMIN: return TN_I64;
    case TN_OP_ALL: case TN_OP_ANY: return TN_BOOL;
    default: return t;
    }
}

static double th_rtol(tn_dtype t) { return t == TN_F16 ? 2e-3 : t == TN_F32 ? 2e-6 : 1e-12; }

/* One case: returns false after reporting a mismatch. */
static bool th_case(int op, tn_dtype t, int nd, const int64_t *shape, uint64_t mask, bool keep, int layout, uint64_t seed) {
    double lo = -2, hi = 2;
    if (t == TN_BOOL) { lo = 0; hi = 2; }
    else if (!tn_dtype_is_float(t)) { lo = -20; hi = 20; }
    if (op == TN_OP_PROD && tn_dtype_is_float(t)) { lo = 0.7; hi = 1.4; }
    if (op == TN_OP_ALL && t != TN_BOOL) { lo = 0; hi = 3; }   /* some zeros */
    tn_array *x = th_input(t, nd, shape, layout, lo, hi, seed);
    tn_var node = th_node(op, (int64_t)mask, keep);
    tn_array *y = th_run(&node, x);
    bool ok = y != NULL;
    CHECK(y, "op %s dtype %s: %s", tn__op_def(op)->name, tn_dtype_name(t), tn_last_error());
    if (!y) { tn_array_free(x); return false; }
    int64_t M = tn_array_size(y);
    double *ref = (double *)malloc(sizeof(double) * (size_t)(M + 1) * 2), *mag = ref + M + 1;
    th_reference(op, x, mask, ref, mag);
    tn_dtype ot = th_out_dtype(op, t);
    CHECK(y->dtype == ot, "%s of %s gives %s, want %s", tn__op_def(op)->name, tn_dtype_name(t), tn_dtype_name(y->dtype), tn_dtype_name(ot));
    int want_nd = 0;
    for (int d = 0; d < nd; d++) if (!((mask >> d) & 1) || keep) want_nd++;
    CHECK(y->ndim == want_nd, "ndim %d want %d", y->ndim, want_nd);
    ok = ok && y->dtype == ot && y->ndim == want_nd;
    int64_t idx[TN_MAX_DIMS] = {0};
    for (int64_t o = 0; o < M && ok; o++) {
        int64_t rem = o;
        for (int d = y->ndim - 1; d >= 0; d--) { idx[d] = rem % y->shape[d]; rem /= y->shape[d]; }
        double got = tn_array_get(y, idx), r = ref[o];
        bool good;
        if (!tn_dtype_is_float(ot)) good = got == r;
        else if (op == TN_OP_MAX || op == TN_OP_MIN) good = (isnan(r) && isnan(got)) || got == r;
        else if (op == TN_OP_PROD) {   /* the product rounded to the output dtype may overflow */
            if (ot == TN_F16) r = tn_f16_to_f32(tn_f32_to_f16((float)r));
            if (ot == TN_F32) r = (float)r;
            good = th_close(got, r, th_rtol(ot) * 4, 0);
        }
        else {
            double scale = op == TN_OP_MEAN ? mag[o] / (double)(tn_array_size(x) / (M ? M : 1)) : mag[o];
            if (op == TN_OP_LOGSUMEXP) scale = fabs(r) + 1;
            good = th_close(got, r, 0, th_rtol(ot) * (scale + 1e-300) + 1e-300) || (isnan(r) && isnan(got));
        }
        if (!good) {
            char sb[128];
            CHECK(good, "%s dtype %s shape %s mask %llx keep %d layout %d: out[%lld] = %.17g, want %.17g",
                  tn__op_def(op)->name, tn_dtype_name(t), tn__shape_str(nd, shape, sb), (unsigned long long)mask,
                  keep, layout, (long long)o, got, r);
            ok = false;
        }
    }
    free(ref);
    tn_array_free(y);
    tn_array_free(x);
    return ok;
}

TEST(test_reduce_table) {
    static const int64_t s1[] = {1}, s7[] = {7}, s1000[] = {1000}, s354[] = {3, 5, 4}, s2345[] = {2, 3, 4, 5};
    static const uint64_t masks4[] = { 0x1, 0x8, 0x6, 0x9, 0xA, 0xE, 0xF, 0x0 };
    struct { int nd; const int64_t *shape; int nmask; const uint64_t *masks; } shapes[5];
    static const uint64_t m1[] = { 0x1, 0x0 };
    static const uint64_t m3[] = { 0, 1, 2, 3, 4, 5, 6, 7 };   /* every subset */
    shapes[0].nd = 1; shapes[0].shape = s1; shapes[0].nmask = 2; shapes[0].masks = m1;
    shapes[1].nd = 1; shapes[1].shape = s7; shapes[1].nmask = 2; shapes[1].masks = m1;
    shapes[2].nd = 1; shapes[2].shape = s1000; shapes[2].nmask = 1; shapes[2].masks = m1;
    shapes[3].nd = 3; shapes[3].shape = s354; shapes[3].nmask = 8; shapes[3].masks = m3;
    shapes[4].nd = 4; shapes[4].shape = s2345; shapes[4].nmask = 8; shapes[4].masks = masks4;
    int cases = 0, bad = 0;
    uint64_t seed = 1;
    for (size_t oi = 0; oi < sizeof th_ops / sizeof th_ops[0]; oi++)
        for (size_t ti = 0; ti < sizeof th_dtypes / sizeof th_dtypes[0]; ti++)
            for (int si = 0; si < 5; si++)
                for (int mi = 0; mi < shapes[si].nmask; mi++)
                    for (int keep = 0; keep < 2; keep++)
                        for (int layout = 0; layout < 3; layout++) {
                            cases++;
                            if (!th_case(th_ops[oi], th_dtypes[ti], shapes[si].nd, shapes[si].shape,
                                         shapes[si].masks[mi], keep, layout, seed++)) bad++;
                            if (bad > 10) return;
                        }
    CHECK(cases > 5000, "%d cases", cases);
}

/* Softmax rows (along the axis) against a double reference; rows sum to 1. */
static void th_softmax_case(int op, tn_dtype t, int nd, const int64_t *shape, int axis, int layout, uint64_t seed) {
    double lo = tn_dtype_is_float(t) ? -5 : -20, hi = tn_dtype_is_float(t) ? 5 : 20;
    if (t == TN_BOOL) { lo = 0; hi = 2; }
    tn_array *x = th_input(t, nd, shape, layout, lo, hi, seed);
    tn_var node = th_node(op, axis, 0);
    tn_array *y = th_run(&node, x);
    CHECK(y, "%s: %s", tn__op_def(op)->name, tn_last_error());
    if (!y) { tn_array_free(x); return; }
    CHECK(y->dtype == th_out_dtype(op, t), "dtype %s", tn_dtype_name(y->dtype));
    int64_t n = shape[axis], M = tn_array_size(x) / (n ? n : 1);
    double rtol = th_rtol(y->dtype) * 4;
    int fails = 0;
    for (int64_t o = 0; o < M && fails < 3; o++) {
        int64_t idx[TN_MAX_DIMS] = {0}, rem = o;
        for (int d = nd - 1; d >= 0; d--) { if (d == axis) continue; idx[d] = rem % shape[d]; rem /= shape[d]; }
        double m = -INFINITY, s = 0, tot = 0;
        for (int64_t j = 0; j < n; j++) { idx[axis] = j; double v = tn_array_get(x, idx); if (v > m) m = v; }
        for (int64_t j = 0; j < n; j++) { idx[axis] = j; s += exp(tn_array_get(x, idx) - m); }
        for (int64_t j = 0; j < n; j++) {
            idx[axis] = j;
            double v = tn_array_get(x, idx), got = tn_array_get(y, idx);
            double r = op == TN_OP_SOFTMAX ? exp(v - m) / s : v - m - log(s);
            tot += op == TN_OP_SOFTMAX ? got : exp(got);
            if (!th_close(got, r, rtol, rtol * 1e-3)) {
                fails++;
                CHECK(0, "%s %s axis %d layout %d row %lld elem %lld: %.17g want %.17g", tn__op_def(op)->name,
                      tn_dtype_name(t), axis, layout, (long long)o, (long long)j, got, r);
            }
        }
        if (n > 0) CHECK(fabs(tot - 1) < rtol * (double)n + 1e-12, "row %lld sums to %.17g", (long long)o, tot);
    }
    tn_array_free(y);
    tn_array_free(x);
}

TEST(test_softmax_table) {
    static const int64_t s7[] = {7}, s1000[] = {1000}, s354[] = {3, 5, 4}, s2345[] = {2, 3, 4, 5}, s300[] = {300, 600};
    uint64_t seed = 100;
    for (int op = TN_OP_SOFTMAX; op <= TN_OP_LOG_SOFTMAX; op++)
        for (size_t ti = 0; ti < sizeof th_dtypes / sizeof th_dtypes[0]; ti++)
            for (int layout = 0; layout < 3; layout++) {
                th_softmax_case(op, th_dtypes[ti], 1, s7, 0, layout, seed++);
                th_softmax_case(op, th_dtypes[ti], 1, s1000, 0, layout, seed++);
                for (int a = 0; a < 3; a++) th_softmax_case(op, th_dtypes[ti], 3, s354, a, layout, seed++);
                for (int a = 0; a < 4; a++) th_softmax_case(op, th_dtypes[ti], 4, s2345, a, layout, seed++);
            }
    /* large enough to run on several threads, both loop shapes */
    th_softmax_case(TN_OP_SOFTMAX, TN_F32, 2, s300, 0, 0, 7);
    th_softmax_case(TN_OP_SOFTMAX, TN_F32, 2, s300, 1, 0, 8);
    th_softmax_case(TN_OP_LOG_SOFTMAX, TN_F64, 2, s300, 0, 1, 9);
}

/* Exact values: f64 arrays from literal data. */
static tn_array *th_vec(int n, const double *v) {
    int64_t sh[1] = { n };
    return tn_array_from_data(TN_F64, 1, sh, v);
}

static double th_run_scalar(int op, tn_array *x, uint64_t mask) {
    tn_var node = th_node(op, (int64_t)mask, 0);
    tn_array *y = th_run(&node, x);
    if (!y) return -12345;
    double v = tn_array_get(y, NULL);
    tn_array_free(y);
    return v;
}

TEST(test_nan_and_ties) {
    double a[] = { 1, 3, NAN, 3, NAN, -1 }, b[] = { 2, 5, 5, -7, -7, 0 };
    tn_array *x = th_vec(6, a), *z = th_vec(6, b);
    CHECK(isnan(th_run_scalar(TN_OP_MAX, x, 1)), "max propagates NaN");
    CHECK(isnan(th_run_scalar(TN_OP_MIN, x, 1)), "min propagates NaN");
    CHECK(th_run_scalar(TN_OP_ARGMAX, x, 1) == 2, "argmax: first NaN");
    CHECK(th_run_scalar(TN_OP_ARGMIN, x, 1) == 2, "argmin: first NaN");
    CHECK(th_run_scalar(TN_OP_ARGMAX, z, 1) == 1, "argmax: first of ties");
    CHECK(th_run_scalar(TN_OP_ARGMIN, z, 1) == 3, "argmin: first of ties");
    CHECK(th_run_scalar(TN_OP_ANY, x, 1) == 1, "any of NaN is true");
    double c[] = { -INFINITY, -INFINITY };
    tn_array *w = th_vec(2, c);
    CHECK(th_run_scalar(TN_OP_ARGMAX, w, 1) == 0, "argmax of all -inf is 0");
    CHECK(th_run_scalar(TN_OP_MAX, w, 1) == -INFINITY, "max of all -inf");
    tn_array_free(x); tn_array_free(z); tn_array_free(w);
}

TEST(test_stability) {
    double a[] = { 1000, 1000 }, b[] = { -INFINITY, -INFINITY }, c[] = { 1000, 1001, 1002 }, d[] = { INFINITY, 1 };
    tn_array *x = th_vec(2, a), *ni = th_vec(2, b), *big = th_vec(3, c), *pi = th_vec(2, d);
    double v = th_run_scalar(TN_OP_LOGSUMEXP, x, 1);
    CHECK(fabs(v - (1000 + log(2.0))) < 1e-12, "logsumexp [1000,1000] = %.17g", v);
    CHECK(th_run_scalar(TN_OP_LOGSUMEXP, ni, 1) == -INFINITY, "logsumexp of all -inf is -inf");
    CHECK(th_run_scalar(TN_OP_LOGSUMEXP, pi, 1) == INFINITY, "logsumexp with +inf is +inf");
    tn_array *xf = tn_array_astype(x, TN_F32);
    v = th_run_scalar(TN_OP_LOGSUMEXP, xf, 1);
    CHECK(fabs(v - (1000 + log(2.0))) < 1e-3, "f32 logsumexp [1000,1000] = %.17g", v);
    for (int op = TN_OP_SOFTMAX; op <= TN_OP_LOG_SOFTMAX; op++) {
        tn_var node = th_node(op, 0, 0);
        tn_array *y = th_run(&node, big);
        CHECK(y, "%s", tn_last_error());
        if (!y) continue;
        double den = exp(-2.0) + exp(-1.0) + 1;
        for (int64_t j = 0; j < 3; j++) {
            double g = tn_array_get(y, &j), r = exp((double)j - 2) / den;
            if (op == TN_OP_LOG_SOFTMAX) r = log(r);
            CHECK(isfinite(g) && fabs(g - r) < 1e-14, "%s[%lld] = %.17g want %.17g", tn__op_def(op)->name, (long long)j, g, r);
        }
        tn_array_free(y);
    }
    /* f32 softmax of large values stays finite */
    tn_array *bigf = tn_array_astype(big, TN_F32);
    tn_var node = th_node(TN_OP_SOFTMAX, 0, 0);
    tn_array *y = th_run(&node, bigf);
    CHECK(y && isfinite(tn_array_get(y, (int64_t[]){0})) && tn_array_get(y, (int64_t[]){2}) > 0.6, "f32 softmax finite");
    tn_array_free(y);
    tn_array_free(x); tn_array_free(ni); tn_array_free(big); tn_array_free(pi); tn_array_free(xf); tn_array_free(bigf);
}

TEST(test_empty) {
    int64_t sh[2] = { 0, 3 };
    tn_array *x = tn_array_zeros(TN_F32, 2, sh), *xi = tn_array_zeros(TN_I32, 2, sh);
    struct { int op; double want; } c[] = { { TN_OP_SUM, 0 }, { TN_OP_PROD, 1 }, { TN_OP_MEAN, NAN },
                                          { TN_OP_ALL, 1 }, { TN_OP_ANY, 0 }, { TN_OP_LOGSUMEXP, -INFINITY } };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        for (int w = 0; w < 2; w++) {
            tn_var node = th_node(c[k].op, 1, 0);
            tn_array *y = th_run(&node, w ? xi : x);
            CHECK(y && y->ndim == 1 && y->shape[0] == 3, "%s of (0, 3): %s", tn__op_def(c[k].op)->name, tn_last_error());
            if (!y) continue;
            for (int64_t j = 0; j < 3; j++) {
                double g = tn_array_get(y, &j);
                CHECK(th_close(g, c[k].want, 0, 0), "%s of empty = %g want %g", tn__op_def(c[k].op)->name, g, c[k].want);
            }
            tn_array_free(y);
        }
    }
    int ops[] = { TN_OP_MAX, TN_OP_MIN, TN_OP_ARGMAX, TN_OP_ARGMIN };
    const char *names[] = { "Max{axis=[0]}", "Min{axis=[0]}", "Argmax{axis=[0]}", "Argmin{axis=[0]}" };
    for (int k = 0; k < 4; k++) {
        tn_var node = th_node(ops[k], 1, 0);
        tn_clear_error();
        CHECK(th_run(&node, x) == NULL, "%s of empty must fail", names[k]);
        CHECK_ERR(TN_ERR_SHAPE, names[k]);
        CHECK_ERR(TN_ERR_SHAPE, "(0, 3)");
        /* the kernel checks too (the shape may be unknown at infer time) */
        tn_array *y = tn__array_alloc(TN_F32, 1, sh + 1, TN_HOST);
        tn_clear_error();
        CHECK(tn__op_def(ops[k])->cpu(&node, &x, &y) == TN_ERR_SHAPE, "kernel of empty %s", names[k]);
        CHECK_ERR(TN_ERR_SHAPE, "(0, 3)");
        tn_array_free(y);
        /* reducing the non-empty axis is fine: an empty result */
        tn_var n2 = th_node(ops[k], 2, 0);
        y = th_run(&n2, x);
        CHECK(y && y->shape[0] == 0, "%s over axis 1 of (0, 3): %s", names[k], tn_last_error());
        tn_array_free(y);
    }
    tn_array_free(x); tn_array_free(xi);
}

/* Large inputs: accuracy of f32 sums and every loop shape on threads. */
TEST(test_large) {
    int64_t n = (int64_t)1 << 24;
    tn_array *x = tn_array_rand_uniform(TN_F32, 1, &n, 0, 1, 5);
    double ref = 0;
    const float *p = (const float *)x->data;
    for (int64_t i = 0; i < n; i++) ref += p[i];
    double got = th_run_scalar(TN_OP_SUM, x, 1);
    CHECK(fabs(got - (double)(float)ref) <= fabs(ref) * 6e-8, "sum of 2^24 f32 = %.10g want %.10g", got, (double)(float)ref);
    /* argmax across thread parts: plant the max late and a tie later */
    float *q = (float *)x->data;
    q[n - 100] = 2; q[n - 5] = 2;
    CHECK(th_run_scalar(TN_OP_ARGMAX, x, 1) == (double)(n - 100), "argmax of 2^24");
    q[123456] = 5;
    CHECK(th_run_scalar(TN_OP_MAX, x, 1) == 5, "max of 2^24");
    double lse = th_run_scalar(TN_OP_LOGSUMEXP, x, 1), lref = 0, m = 5;
    for (int64_t i = 0; i < n; i++) lref += exp((double)p[i] - m);
    lref = m + log(lref);
    CHECK(fabs(lse - lref) < 1e-5 * fabs(lref), "logsumexp of 2^24 = %.10g want %.10g", lse, lref);
    tn_array_free(x);
    /* sum over axis 0 (lanes loop) and axis 1 of a 2048 x 1536 matrix, f64 */
    int64_t sh[2] = { 2048, 1536 };
    tn_array *a = tn_array_rand_normal(TN_F64, 2, sh, 0, 1, 6);
    const double *ap = (const double *)a->data;
    for (int ax = 0; ax < 2; ax++) {
        tn_var node = th_node(ax == 0 ? TN_OP_SUM : TN_OP_MAX, (int64_t)1 << ax, 0);
        tn_array *y = th_run(&node, a);
        CHECK(y && y->shape[0] == sh[1 - ax], "axis %d", ax);
        if (!y) continue;
        const double *yp = (const double *)y->data;
        int bad = 0;
        for (int64_t k = 0; k < sh[1 - ax] && bad < 3; k++) {
            double r = ax == 0 ? 0 : -INFINITY, mag = 0;
            for (int64_t j = 0; j < sh[ax]; j++) {
                double v = ax == 0 ? ap[j * sh[1] + k] : ap[k * sh[1] + j];
                if (ax == 0) { r += v; mag += fabs(v); } else if (v > r) r = v;
            }
            if (!(fabs(yp[k] - r) <= 1e-13 * mag)) { bad++; CHECK(0, "axis %d out[%lld] = %.17g want %.17g", ax, (long long)k, yp[k], r); }
        }
        tn_array_free(y);
    }
    /* full reductions of a transposed view: split loop over two strided dims */
    tn_array *at = tn_array_transpose(a, NULL);
    double tot = 0, mag = 0, best = -INFINITY;
    int64_t arg = -1;
    for (int64_t i = 0; i < sh[1]; i++)
        for (int64_t j = 0; j < sh[0]; j++) {
            double v = ap[j * sh[1] + i];
            tot += v; mag += fabs(v);
            if (v > best) { best = v; arg = i * sh[0] + j; }
        }
    double gs = th_run_scalar(TN_OP_SUM, at, 3);
    CHECK(fabs(gs - tot) <= 1e-13 * mag, "sum of transposed = %.17g want %.17g", gs, tot);
    CHECK(th_run_scalar(TN_OP_ARGMAX, at, 3) == (double)arg, "argmax of transposed (flat index in its C order)");
    CHECK(th_run_scalar(TN_OP_MAX, at, 3) == best, "max of transposed");
    tn_array_free(at);
    tn_array_free(a);
}

TEST(test_dtype_rules) {
    for (size_t oi = 0; oi < sizeof th_ops / sizeof th_ops[0]; oi++)
        for (size_t ti = 0; ti < sizeof th_dtypes / sizeof th_dtypes[0]; ti++) {
            tn_var node = th_node(th_ops[oi], 1, 1);
            tn_type in, out;
            memset(&in, 0, sizeof in);
            in.dtype = th_dtypes[ti]; in.ndim = 2; in.shape[0] = -1; in.shape[1] = 4;
            CHECK(tn__op_def(th_ops[oi])->infer(&node, &in, &out) == TN_OK, "%s", tn_last_error());
            CHECK(out.dtype == th_out_dtype(th_ops[oi], th_dtypes[ti]), "%s of %s gives %s", tn__op_def(th_ops[oi])->name,
                  tn_dtype_name(th_dtypes[ti]), tn_dtype_name(out.dtype));
            CHECK(out.ndim == 2 && out.shape[0] == 1 && out.bcast[0] && out.shape[1] == 4 && !out.bcast[1], "keepdims type");
        }
}

TEST(test_labels) {
    struct { int op; int64_t i0, i1; const char *want; } c[] = {
        { TN_OP_SUM, 1, 0, "Sum{axis=[0]}" }, { TN_OP_MAX, 2, 0, "Max{axis=[1]}" },
        { TN_OP_ARGMAX, 2, 0, "Argmax{axis=[1]}" }, { TN_OP_LOGSUMEXP, 3, 0, "LogSumExp{axis=[0,1]}" },
        { TN_OP_SOFTMAX, 1, 0, "Softmax{axis=1}" }, { TN_OP_LOG_SOFTMAX, 1, 0, "LogSoftmax{axis=1}" },
        { TN_OP_MEAN, 5, 1, "Mean{axis=[0,2],keepdims=True}" },
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        tn_var node = th_node(c[k].op, c[k].i0, c[k].i1);
        char buf[96];
        tn__op_def(c[k].op)->label(&node, buf, sizeof buf);
        CHECK(!strcmp(buf, c[k].want), "label '%s' want '%s'", buf, c[k].want);
    }
}

/* A fused prologue: sum(a * b) with b broadcast, against a * b computed here. */
TEST(test_prologue) {
    int64_t sa[3] = { 4, 5, 300 }, sb[2] = { 1, 300 };
    tn_array *a = tn_array_rand_uniform(TN_F32, 3, sa, -1, 1, 11), *b = tn_array_rand_uniform(TN_F32, 2, sb, -1, 1, 12);
    tn_dtype in_dt[2] = { TN_F32, TN_F32 }, out_dt[1] = { TN_F32 };
    tn_ew_instr ins = { TN_OP_MUL, TN_F32, TN_F32, 0, 1, -1, 0 };
    int32_t out_reg[1] = { 2 };
    tn_ew_program prog = { 2, in_dt, 1, &ins, 1, out_reg, out_dt, NULL, NULL };
    for (uint64_t mask = 1; mask < 8; mask++) {
        tn_var node = th_node(TN_OP_SUM, (int64_t)mask, 0);
        node.n_in = 2;
        node.ext = &prog;
        tn_type ts[2], out;
        ts[0] = th_type_of(a); ts[1] = th_type_of(b); ts[1].bcast[0] = true;
        CHECK(tn__op_def(TN_OP_SUM)->infer(&node, ts, &out) == TN_OK, "%s", tn_last_error());
        tn_array *y = tn__array_alloc(out.dtype, out.ndim, out.shape, TN_HOST);
        tn_array *ins2[2] = { a, b };
        tn_result r = tn__op_def(TN_OP_SUM)->cpu(&node, ins2, &y);
        CHECK(r == TN_OK, "%s", tn_last_error());
        /* reference: the product materialised, then the plain kernel's reference */
        tn_array *prod = tn__array_alloc(TN_F32, 3, sa, TN_HOST);
        float *pp = (float *)prod->data;
        const float *ap = (const float *)a->data, *bp = (const float *)b->data;
        for (int64_t i = 0; i < 4 * 5 * 300; i++) pp[i] = ap[i] * bp[i % 300];
        double ref[1500], mag[1500];
        th_reference(TN_OP_SUM, prod, mask, ref, mag);
        for (int64_t o = 0; r == TN_OK && o < tn_array_size(y); o++) {
            double g = (double)((float *)y->data)[o];
            CHECK(fabs(g - ref[o]) <= 2e-6 * mag[o] + 1e-30, "mask %llx out[%lld] %.9g want %.9g", (unsigned long long)mask, (long long)o, g, ref[o]);
        }
        tn_array_free(prod);
        tn_array_free(y);
    }
    tn_array_free(a); tn_array_free(b);
}

TEST(test_constructor_errors) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_var_set_name(tn_matrix(g, "W", TN_F32), "W");
    CHECK(x, "%s", tn_last_error());
    int bad[] = { 2 }, rep[] = { 1, -1 }, neg[] = { -1 };
    CHECK(tn_sum(x, bad, 1, false) == NULL, "axis 2 of a matrix");
    CHECK_ERR(TN_ERR_AXIS, "tn_sum");
    CHECK_ERR(TN_ERR_AXIS, "axis 2");
    CHECK_ERR(TN_ERR_AXIS, "ndim 2");
    CHECK_ERR(TN_ERR_AXIS, "'W'");
    CHECK(tn_max(x, rep, 2, false) == NULL, "repeated axis");
    CHECK_ERR(TN_ERR_AXIS, "tn_max");
    CHECK_ERR(TN_ERR_AXIS, "repeated");
    CHECK(tn_argmax(x, -3, false) == NULL, "axis -3");
    CHECK_ERR(TN_ERR_AXIS, "tn_argmax: axis -3");
    CHECK(tn_softmax(x, 2) == NULL, "softmax axis 2");
    CHECK_ERR(TN_ERR_AXIS, "tn_softmax");
    CHECK(tn_mean(NULL, NULL, 0, false) == NULL, "NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_mean");
    tn_var *s = tn_sum(x, neg, 1, true);
    CHECK(s && s->type.ndim == 2 && tn__p_red_mask(&s->p) == 2 && s->type.bcast[1], "axis -1 wraps to 1, keepdims");
    tn_var *all = tn_sum(x, NULL, 0, false);
    CHECK(all && all->type.ndim == 0 && all->type.dtype == TN_F32, "axes NULL: all");
    tn_var *im = tn_mean(tn_matrix(g, "I", TN_I32), NULL, 0, false);
    CHECK(im && im->type.dtype == TN_F64, "mean of int32 is float64");
    tn_graph_free(g);
}

/* tn_size: the sum of ones over the axes, from the shape alone. Reference:
   tn_sum of an array of ones of the same shape and dtype (a running sum, the
   sum's dtype rule), in every dtype, axis subset and keepdims, with empty
   dims; x's values (NaN here) are never read. Errors name tn_size. */
TEST(test_size) {
    const tn_dtype ts[] = { TN_BOOL, TN_I32, TN_F16, TN_F32, TN_F64 };
    const int64_t shapes[3][3] = { { 3, 4, 5 }, { 3, 0, 5 }, { 1, 7, 2 } };
    const int axsets[5][3] = { { 0, 1, 2 }, { 0 }, { 1, 2 }, { -1 }, { 2, 0 } };
    const int nax[5] = { 3, 1, 2, 1, 2 };
    for (size_t ti = 0; ti < sizeof ts / sizeof ts[0]; ti++)
        for (int a = 0; a < 6; a++)
            for (int keep = 0; keep < 2; keep++) {
                tn_graph *g = tn_graph_new();
                tn_var *x = tn_input(g, "x", ts[ti], 3, NULL, NULL), *o = tn_input(g, "o", ts[ti], 3, NULL, NULL);
                const int *ax = a < 5 ? axsets[a] : NULL;
                int n = a < 5 ? nax[a] : 0;
                tn_var *y[2] = { tn_size(x, ax, n, keep), tn_sum(o, ax, n, keep) };
                CHECK(y[0] && y[1], "%s", tn_last_error());
                tn_func *f = y[0] && y[1] ? tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, o }, .n_outputs = 2, .outputs = y }) : NULL;
                CHECK(f, "%s", tn_last_error());
                for (int si = 0; f && si < 3; si++) {
                    tn_array *xv = tn_array_full(ts[ti], 3, shapes[si], NAN), *ov = tn_array_full(ts[ti], 3, shapes[si], 1.0), *r[2] = { 0 };
                    CHECK(tn_call(f, (tn_array *[]){ xv, ov }, r) == TN_OK, "%s", tn_last_error());
                    if (r[0] && r[1]) {
                        CHECK(r[0]->dtype == r[1]->dtype && r[0]->ndim == r[1]->ndim && tn_array_size(r[0]) == tn_array_size(r[1]),
                              "dtype %s axes %d keep %d shape %d: dtype or shape", tn_dtype_name(ts[ti]), a, keep, si);
                        for (int d = 0; d < r[0]->ndim && d < r[1]->ndim; d++) CHECK(r[0]->shape[d] == r[1]->shape[d], "dim %d", d);
                        int64_t m = tn_array_size(r[0]) < tn_array_size(r[1]) ? tn_array_size(r[0]) : tn_array_size(r[1]);
                        double *p0 = (double *)malloc((size_t)(m + 1) * 8), *p1 = (double *)malloc((size_t)(m + 1) * 8);
                        tn_array_copy_to(r[0], TN_F64, p0, (size_t)m * 8);
                        tn_array_copy_to(r[1], TN_F64, p1, (size_t)m * 8);
                        for (int64_t i = 0; i < m; i++)
                            CHECK(p0[i] == p1[i], "dtype %s axes %d keep %d shape %d [%lld]: size %g, sum of ones %g",
                                  tn_dtype_name(ts[ti]), a, keep, si, (long long)i, p0[i], p1[i]);
                        free(p0); free(p1);
                    }
                    tn_array_free(r[0]); tn_array_free(r[1]); tn_array_free(xv); tn_array_free(ov);
                }
                tn_function_free(f);
                tn_graph_free(g);
            }
    tn_graph *g = tn_graph_new();
    tn_var *w = tn_var_set_name(tn_matrix(g, "W", TN_F32), "W");
    CHECK(tn_size(w, (int[]){ 2 }, 1, false) == NULL, "axis 2 of a matrix");
    CHECK_ERR(TN_ERR_AXIS, "tn_size: axis 2");
    CHECK_ERR(TN_ERR_AXIS, "'W'");
    CHECK(tn_size(NULL, NULL, 0, false) == NULL, "NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_size");
    tn_graph_free(g);
}

/* The mean's gradient where the count is known only at call time: 1/N from
   the shape (a Size, no sum of ones), bit for bit the float32 division
   1/N of the gradient as it was (gk / sum(ones_like(x))) and within half an
   ulp of 1/N. */
TEST(test_mean_grad_unknown_count) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32), *gx = NULL;
    CHECK(tn_grad(tn_mean(x, NULL, 0, false), 1, &x, &gx, NULL) == TN_OK, "%s", tn_last_error());
    tn_var *old = tn_div(tn_fill(x, tn_lit(x, 1.0)), tn_sum(tn_fill(x, tn_lit(x, 1.0)), NULL, 0, true));
    tn_var *y[2] = { gx, old };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = y });
    CHECK(f, "%s", tn_last_error());
    tn_func *fg = f ? tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &gx }) : NULL;
    if (fg) {
        char buf[4096] = { 0 };
        FILE *m = tmpfile();
        if (m) { tn_debugprint_function(fg, m); rewind(m); buf[fread(buf, 1, sizeof buf - 1, m)] = 0; fclose(m); }
        CHECK(strstr(buf, "Size{axis=[0]") && !strstr(buf, "Sum"), "the count is a Size, no Sum:\n%s", buf);
    }
    const int64_t ns[] = { 1, 3, 7, 400, 1000001 };
    for (size_t k = 0; f && k < sizeof ns / sizeof ns[0]; k++) {
        tn_array *xv = tn_array_full(TN_F32, 1, &ns[k], 0.25), *r[2] = { 0 };
        CHECK(tn_call(f, &xv, r) == TN_OK, "%s", tn_last_error());
        if (r[0] && r[1]) {
            int64_t i0 = 0, il = ns[k] - 1;
            float a = (float)tn_array_get(r[0], &il), b = (float)tn_array_get(r[1], &il), c = (float)tn_array_get(r[0], &i0);
            long double exact = 1.0L / (long double)ns[k];
            CHECK(a == b && a == c, "N=%lld: %.9g, the sum of ones gives %.9g", (long long)ns[k], a, b);
            CHECK(fabsl((long double)a - exact) <= 0.5L * (nextafterf(a, INFINITY) - a), "N=%lld: %.9g vs 1/N", (long long)ns[k], a);
        }
        tn_array_free(r[0]); tn_array_free(r[1]); tn_array_free(xv);
    }
    tn_function_free(f);
    tn_function_free(fg);
    tn_graph_free(g);
}

/* The same ops through tn_function / tn_call. */
TEST(test_function) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_tensor3(g, "x", TN_F32);
    int ax[2] = { 0, 2 };
    tn_var *outs[5] = { tn_sum(x, ax, 2, false), tn_max(x, NULL, 0, false), tn_argmin(x, 1, true),
                        tn_softmax(x, -1), tn_logsumexp(x, ax + 1, 1, false) };
    for (int k = 0; k < 5; k++) CHECK(outs[k], "output %d: %s", k, tn_last_error());
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 5, .outputs = outs });
    CHECK(f, "%s", tn_last_error());
    if (!f) { tn_graph_free(g); return; }
    int64_t sh[3] = { 3, 5, 4 };
    tn_array *in = th_input(TN_F32, 3, sh, 1, -2, 2, 42);
    tn_array *res[5] = { 0 };
    CHECK(tn_call(f, &in, res) == TN_OK, "%s", tn_last_error());
    int ops[5] = { TN_OP_SUM, TN_OP_MAX, TN_OP_ARGMIN, TN_OP_SOFTMAX, TN_OP_LOGSUMEXP };
    int64_t masks[5] = { 5, 7, 2, 4, 4 }, keeps[5] = { 0, 0, 1, 0, 0 };
    for (int k = 0; k < 5; k++) {
        if (!res[k]) continue;
        tn_var node = th_node(ops[k], masks[k], keeps[k]);
        if (ops[k] == TN_OP_SOFTMAX) tn__p_set_axis(&node.p, 2);
        tn_array *want = th_run(&node, in);
        CHECK(want && tn_array_size(want) == tn_array_size(res[k]) && want->ndim == res[k]->ndim, "output %d shape", k);
        for (int64_t o = 0; want && o < tn_array_size(want); o++) {
            int64_t idx[TN_MAX_DIMS] = {0}, rem = o;
            for (int d = want->ndim - 1; d >= 0; d--) { idx[d] = rem % want->shape[d]; rem /= want->shape[d]; }
            CHECK(tn_array_get(res[k], idx) == tn_array_get(want, idx), "output %d elem %lld", k, (long long)o);
        }
        tn_array_free(want);
        tn_array_free(res[k]);
    }
    tn_array_free(in);
    tn_function_free(f);
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_labels);
    TH_RUN(test_dtype_rules);
    TH_RUN(test_nan_and_ties);
    TH_RUN(test_stability);
    TH_RUN(test_empty);
    TH_RUN(test_reduce_table);
    TH_RUN(test_softmax_table);
    TH_RUN(test_large);
    TH_RUN(test_prologue);
    TH_RUN(test_constructor_errors);
    TH_RUN(test_function);
    TH_RUN(test_size);
    TH_RUN(test_mean_grad_unknown_count);
    tn_shutdown();
    TH_END();
}
