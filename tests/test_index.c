/* tests/test_index.c - indexing and sorting (tensor_ops.h's >>ops_index
   section): take, take_along_axis, integer-array indexing on several axes,
   set_subtensor and inc_subtensor (slices and index arrays, repeated
   indices as np.add.at), one_hot, masking with where, sort, argsort and
   top_k, on every dtype, against references written here as plain loops
   over float64 (or int64) values; edge values (NaN, -0, inf, repeated and
   negative indices, empty index arrays, strided views), errors by code and
   message, gradients (tn_verify_grad), and the negative log-likelihood of
   softmax with logits of magnitude 1000 against a float64 reference. */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

/* >>helpers -------------------------------------------------------------- */

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static double urand(void) {
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}
static int64_t irand(int64_t lo, int64_t hi) { return lo + (int64_t)(urand() * (double)(hi - lo)); }   /* [lo, hi) */

static const tn_dtype all_dtypes[] = { TN_BOOL, TN_I32, TN_I64, TN_F16, TN_F32, TN_F64 };

static int64_t numel(int nd, const int64_t *sh) { int64_t n = 1; for (int d = 0; d < nd; d++) n *= sh[d]; return n; }

/* Random values representable in every dtype (small ints, halves). */
static tn_array *rand_array(tn_dtype t, int nd, const int64_t *sh) {
    int64_t n = numel(nd, sh);
    double *v = (double *)malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = t == TN_BOOL ? (double)(urand() < 0.5) : (double)irand(-40, 40) / (tn_dtype_is_float(t) ? 4.0 : 1.0);
    tn_array *a = tn_array_from_data(TN_F64, nd, sh, v), *b = tn_array_astype(a, t);
    tn_array_free(a);
    free(v);
    return b;
}

static tn_array *int_array(tn_dtype t, int nd, const int64_t *sh, const int64_t *vals) {
    int64_t n = numel(nd, sh);
    if (t == TN_I64) return tn_array_from_data(TN_I64, nd, sh, vals);
    int32_t *v = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (int32_t)vals[i];
    tn_array *a = tn_array_from_data(TN_I32, nd, sh, v);
    free(v);
    return a;
}

/* Random indices in [-n, n) (negative ones wrap). */
static tn_array *rand_idx(tn_dtype t, int nd, const int64_t *sh, int64_t n) {
    int64_t m = numel(nd, sh), *v = (int64_t *)malloc((size_t)(m ? m : 1) * sizeof *v);
    for (int64_t i = 0; i < m; i++) v[i] = irand(-n, n);
    tn_array *a = int_array(t, nd, sh, v);
    free(v);
    return a;
}

/* Element at flat C-order position i of a (any strides), as double. */
static double at(const tn_array *a, int64_t i) {
    int64_t ix[TN_MAX_DIMS];
    for (int d = a->ndim - 1; d >= 0; d--) { ix[d] = a->shape[d] ? i % a->shape[d] : 0; i = a->shape[d] ? i / a->shape[d] : 0; }
    return tn_array_get(a, ix);
}
static double at_ix(const tn_array *a, const int64_t *ix) { return tn_array_get(a, ix); }

static bool same_value(double got, double want) {
    if (isnan(want)) return isnan(got);
    return got == want && signbit(got) == signbit(want);
}

/* Compiles outputs from inputs, runs it once on vals; res owned by the caller. */
static tn_result run(tn_graph *g, int ni, tn_var *const *ins, tn_array *const *vals, int no, tn_var *const *outs, tn_array **res) {
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = ni, .inputs = ins, .n_outputs = no, .outputs = outs });
    if (!f) return tn_last_result();
    tn_result r = tn_call(f, vals, res);
    tn_function_free(f);
    return r;
}

/* A strided view of a (same values): every other element of a doubled last dim. */
static tn_array *strided_copy(const tn_array *a) {
    int64_t sh[TN_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) sh[d] = a->shape[d];
    if (a->ndim == 0) return tn_array_copy(a);
    sh[a->ndim - 1] *= 2;
    tn_array *big = tn_array_zeros(a->dtype, a->ndim, sh);
    tn_array *v = tn_array_slice(big, a->ndim - 1, 0, TN_NONE, 2);
    tn_array_assign(v, a);
    tn_array_free(big);
    return v;
}

/* >>take ------------------------------------------------------------------ */

/* np.take(x, idx, axis) by loops: out[pre, i..., post] = x[pre, wrap(idx[i...]), post]. */
static void check_take(tn_dtype t, tn_dtype it, int axis, bool strided) {
    int64_t xs[3] = { 4, 5, 3 }, is[2] = { 2, 3 };
    tn_array *x = rand_array(t, 3, xs), *idx = rand_idx(it, 2, is, xs[axis]);
    tn_array *xv = strided ? strided_copy(x) : tn_array_view(x), *iv = strided ? strided_copy(idx) : tn_array_view(idx);
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_tensor3(g, "x", t), *I = tn_matrix(g, "i", it), *Y = tn_take(X, I, axis - 3);
    tn_array *vals[2] = { xv, iv }, *y = NULL;
    tn_result r = run(g, 2, (tn_var *[]){ X, I }, vals, 1, &Y, &y);
    CHECK(r == TN_OK, "take %s axis %d: %s", tn_dtype_name(t), axis, tn_last_error());
    if (r == TN_OK) {
        CHECK(y->ndim == 4 && y->dtype == t, "ndim %d", y->ndim);
        int64_t bad = 0;
        for (int64_t o = 0; o < tn_array_size(y); o++) {
            int64_t oi[4], rem = o;
            for (int d = 3; d >= 0; d--) { oi[d] = rem % y->shape[d]; rem /= y->shape[d]; }
            int64_t xi[3], ii[2], k = 0;
            for (int d = 0; d < axis; d++) xi[d] = oi[k++];
            ii[0] = oi[k++]; ii[1] = oi[k++];
            int64_t j = (int64_t)at_ix(idx, ii);
            xi[axis] = j < 0 ? j + xs[axis] : j;
            for (int d = axis + 1; d < 3; d++) xi[d] = oi[k++];
            if (!same_value(tn_array_get(y, oi), at_ix(x, xi))) bad++;
        }
        CHECK(bad == 0, "take %s idx %s axis %d strided %d: %lld wrong", tn_dtype_name(t), tn_dtype_name(it), axis, strided, (long long)bad);
    }
    tn_array_free(y); tn_array_free(x); tn_array_free(idx); tn_array_free(xv); tn_array_free(iv);
    tn_graph_free(g);
}

TEST(test_take_values) {
    for (size_t i = 0; i < sizeof all_dtypes / sizeof *all_dtypes; i++)
        for (int axis = 0; axis < 3; axis++) {
            check_take(all_dtypes[i], axis == 1 ? TN_I32 : TN_I64, axis, false);
            check_take(all_dtypes[i], TN_I32, axis, true);
        }
}

/* NaN, -0 and inf travel unchanged; a 0-d index drops the axis; an empty index array gives an empty result. */
TEST(test_take_edges) {
    double xv[6] = { NAN, -0.0, INFINITY, -INFINITY, 1e-310, 5 };
    tn_array *x = tn_array_from_data(TN_F64, 1, (int64_t[]){ 6 }, xv);
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_vector(g, "x", TN_F64), *I = tn_vector(g, "i", TN_I64), *S = tn_scalar(g, "s", TN_I32);
    tn_var *outs[2] = { tn_take(X, I, 0), tn_take(X, S, 0) };
    tn_array *i1 = int_array(TN_I64, 1, (int64_t[]){ 7 }, (int64_t[]){ 0, 1, 2, 3, 4, -1, -6 });
    tn_array *s = tn_array_scalar(TN_I32, -5), *res[2] = { 0 };
    tn_result r = run(g, 3, (tn_var *[]){ X, I, S }, (tn_array *[]){ x, i1, s }, 2, outs, res);
    CHECK(r == TN_OK, "%s", tn_last_error());
    if (r == TN_OK) {
        double want[7] = { NAN, -0.0, INFINITY, -INFINITY, 1e-310, 5, NAN };
        for (int k = 0; k < 7; k++) CHECK(same_value(at(res[0], k), want[k]), "k %d: %g", k, at(res[0], k));
        CHECK(res[1]->ndim == 0 && same_value(at(res[1], 0), -0.0), "0-d index: ndim %d value %g", res[1]->ndim, at(res[1], 0));
    }
    tn_array_free(res[0]); tn_array_free(res[1]); tn_array_free(i1);
    tn_array *e = int_array(TN_I64, 1, (int64_t[]){ 0 }, NULL);
    res[0] = res[1] = NULL;
    r = run(g, 3, (tn_var *[]){ X, I, S }, (tn_array *[]){ x, e, s }, 2, outs, res);
    CHECK(r == TN_OK && res[0]->ndim == 1 && res[0]->shape[0] == 0, "empty: %s", tn_last_error());
    tn_array_free(res[0]); tn_array_free(res[1]); tn_array_free(e); tn_array_free(s); tn_array_free(x);
    tn_graph_free(g);
}

/* Calls of take(x, i, axis) with each index vector of `cases` (n of len
   indices): each fails with TN_ERR_INVALID and its message holds want[c]
   and the op's label. */
static void take_errors(tn_graph *g, tn_var *X, tn_var *I, int axis, tn_array *x, int n, int len, const int64_t *cases,
                        const char *const *want) {
    tn_var *Y = tn_take(X, I, axis);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ X, I }, .n_outputs = 1, .outputs = &Y });
    CHECK(f != NULL, "%s", tn_last_error());
    char label[48];
    snprintf(label, sizeof label, "AdvancedSubtensor%s", axis ? "{axis=1}" : "1");
    for (int c = 0; c < n && f; c++) {
        tn_array *i = int_array(TN_I64, 1, (int64_t[]){ len }, cases + c * len), *y = NULL;
        tn_result r = tn_call(f, (tn_array *[]){ x, i }, &y);
        CHECK(r == TN_ERR_INVALID, "axis %d case %d: %s", axis, c, tn_result_string(r));
        CHECK_ERR(TN_ERR_INVALID, want[c]);
        CHECK_ERR(TN_ERR_INVALID, label);
        tn_array_free(i);
        tn_array_free(y);
    }
    tn_function_free(f);
}

/* Out of range: NumPy's IndexError words, the op, the index, the axis and its size. */
TEST(test_take_out_of_range) {
    tn_array *x = rand_array(TN_F32, 2, (int64_t[]){ 3, 5 });
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_matrix(g, "x", TN_F32), *I = tn_vector(g, "i", TN_I64);
    const int64_t cases[3][3] = { { 0, 5, 1 }, { -6, 0, 0 }, { 2, 4, 99 } };
    const char *const want[3] = { "index 5 is out of bounds for axis 1 with size 5", "index -6 is out of bounds for axis 1 with size 5",
                                  "index 99 is out of bounds for axis 1 with size 5" };
    take_errors(g, X, I, 1, x, 3, 3, &cases[0][0], want);
    /* rows (axis 0: each index copies a whole row): the first bad row, at its first element */
    const int64_t rows[2][4] = { { 1, 2, 7, 0 }, { 0, -4, 1, 9 } };
    const char *const rwant[2] = { "index 7 is out of bounds for axis 0 with size 3 (index array 0, element 10 of the result)",
                                   "index -4 is out of bounds for axis 0 with size 3 (index array 0, element 5 of the result)" };
    take_errors(g, X, I, 0, x, 2, 4, &rows[0][0], rwant);
    tn_array_free(x);
    tn_graph_free(g);
}

/* >>take_along_axis ------------------------------------------------------- */

TEST(test_take_along_axis_values) {
    for (size_t q = 0; q < sizeof all_dtypes / sizeof *all_dtypes; q++) {
        tn_dtype t = all_dtypes[q];
        for (int axis = 0; axis < 2; axis++) {
            int64_t xs[2] = { 4, 6 }, is[2] = { 4, 6 };
            is[axis] = 7;                    /* more indices than the axis has */
            is[1 - axis] = 1;                /* broadcast over the other dim */
            tn_array *x = rand_array(t, 2, xs), *idx = rand_idx(TN_I64, 2, is, xs[axis]);
            tn_array *xv = strided_copy(x);
            tn_graph *g = tn_graph_new();
            tn_var *X = tn_matrix(g, "x", t), *I = tn_matrix(g, "i", TN_I64), *Y = tn_take_along_axis(X, I, axis);
            tn_array *y = NULL;
            tn_result r = run(g, 2, (tn_var *[]){ X, I }, (tn_array *[]){ xv, idx }, 1, &Y, &y);
            CHECK(r == TN_OK, "%s", tn_last_error());
            if (r == TN_OK) {
                int64_t bad = 0;
                CHECK(y->shape[axis] == 7 && y->shape[1 - axis] == xs[1 - axis], "shape");
                for (int64_t a = 0; a < y->shape[0]; a++)
                    for (int64_t b = 0; b < y->shape[1]; b++) {
                        int64_t oi[2] = { a, b }, ii[2] = { axis == 0 ? a : 0, axis == 1 ? b : 0 };
                        int64_t j = (int64_t)at_ix(idx, ii), xi[2] = { a, b };
                        xi[axis] = j < 0 ? j + xs[axis] : j;
                        if (!same_value(tn_array_get(y, oi), at_ix(x, xi))) bad++;
                    }
                CHECK(bad == 0, "%s axis %d: %lld wrong", tn_dtype_name(t), axis, (long long)bad);
            }
            tn_array_free(y); tn_array_free(x); tn_array_free(xv); tn_array_free(idx);
            tn_graph_free(g);
        }
    }
}

/* >>index ------------------------------------------------------------------ */

/* x[:, i, j] with i (4, 1) and j (3,) broadcast to (4, 3), and p[arange(n), y]. */
TEST(test_index_several_axes) {
    int64_t xs[4] = { 2, 5, 6, 3 };
    tn_array *x = rand_array(TN_F32, 4, xs);
    tn_array *i = rand_idx(TN_I32, 2, (int64_t[]){ 4, 1 }, 5), *j = rand_idx(TN_I64, 1, (int64_t[]){ 3 }, 6);
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_input(g, "x", TN_F32, 4, NULL, NULL), *I = tn_matrix(g, "i", TN_I32), *J = tn_vector(g, "j", TN_I64);
    tn_var *Y = tn_index(X, 1, 2, (tn_var *[]){ I, J });
    tn_array *y = NULL;
    tn_result r = run(g, 3, (tn_var *[]){ X, I, J }, (tn_array *[]){ x, i, j }, 1, &Y, &y);
    CHECK(r == TN_OK, "%s", tn_last_error());
    if (r == TN_OK) {
        CHECK(y->ndim == 4 && y->shape[0] == 2 && y->shape[1] == 4 && y->shape[2] == 3 && y->shape[3] == 3, "shape");
        int64_t bad = 0;
        for (int64_t a = 0; a < 2; a++) for (int64_t b = 0; b < 4; b++) for (int64_t c = 0; c < 3; c++) for (int64_t e = 0; e < 3; e++) {
            int64_t ib = (int64_t)at_ix(i, (int64_t[]){ b, 0 }), jc = (int64_t)at_ix(j, (int64_t[]){ c });
            int64_t xi[4] = { a, ib < 0 ? ib + 5 : ib, jc < 0 ? jc + 6 : jc, e };
            if (!same_value(tn_array_get(y, (int64_t[]){ a, b, c, e }), at_ix(x, xi))) bad++;
        }
        CHECK(bad == 0, "%lld wrong", (long long)bad);
    }
    tn_array_free(y); tn_array_free(x); tn_array_free(i); tn_array_free(j);
    tn_graph_free(g);

    /* p[arange(n), y], the tutorials' form */
    g = tn_graph_new();
    tn_array *p = rand_array(TN_F64, 2, (int64_t[]){ 5, 4 }), *lab = rand_idx(TN_I64, 1, (int64_t[]){ 5 }, 4);
    tn_var *P = tn_matrix(g, "p", TN_F64), *L = tn_vector(g, "y", TN_I64);
    tn_var *Z = tn_index(P, 0, 2, (tn_var *[]){ tn_arange(g, TN_I64, 0, 5, 1), L });
    y = NULL;
    r = run(g, 2, (tn_var *[]){ P, L }, (tn_array *[]){ p, lab }, 1, &Z, &y);
    CHECK(r == TN_OK && y->ndim == 1 && y->shape[0] == 5, "%s", tn_last_error());
    for (int64_t k = 0; r == TN_OK && k < 5; k++) {
        int64_t c = (int64_t)at(lab, k);
        CHECK(at(y, k) == tn_array_get(p, (int64_t[]){ k, c < 0 ? c + 4 : c }), "row %lld", (long long)k);
    }
    tn_array_free(y); tn_array_free(p); tn_array_free(lab);
    tn_graph_free(g);
}

/* >>scatter ---------------------------------------------------------------- */

/* Reference of one addition in dtype t, as NumPy's add.at does it. */
static double add_in(tn_dtype t, double a, double b) {
    switch (t) {
    case TN_BOOL: return (a != 0) || (b != 0);
    case TN_I32: return (double)(int32_t)(uint32_t)((uint32_t)(int32_t)a + (uint32_t)(int32_t)b);
    case TN_F16: return tn_f16_to_f32(tn_f32_to_f16((float)a + (float)b));
    case TN_F32: return (float)((float)a + (float)b);
    default: return a + b;
    }
}

/* inc_subtensor / set_subtensor(take(x, idx, axis), v) with repeated and negative indices, v broadcast. */
static void check_scatter(tn_dtype t, bool set, int axis) {
    int64_t xs[2] = { 5, 4 }, is[1] = { 9 };
    tn_array *x = rand_array(t, 2, xs), *idx = rand_idx(TN_I64, 1, is, xs[axis]);
    int64_t vs[2] = { 9, 9 };
    vs[1 - axis] = 1;                                  /* v broadcasts along the other dim */
    if (axis == 1) { vs[0] = 1; vs[1] = 9; }
    tn_array *v = rand_array(t, 2, vs);
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_matrix(g, "x", t), *I = tn_vector(g, "i", TN_I64), *V = tn_matrix(g, "v", t);
    tn_var *sub = tn_take(X, I, axis), *Y = set ? tn_set_subtensor(sub, V) : tn_inc_subtensor(sub, V);
    tn_array *xv = strided_copy(x), *y = NULL;
    tn_result r = run(g, 3, (tn_var *[]){ X, I, V }, (tn_array *[]){ xv, idx, v }, 1, &Y, &y);
    CHECK(r == TN_OK, "%s", tn_last_error());
    if (r == TN_OK) {
        double ref[5][4];
        for (int a = 0; a < 5; a++) for (int b = 0; b < 4; b++) ref[a][b] = tn_array_get(x, (int64_t[]){ a, b });
        for (int64_t q = 0; q < 9; q++) {                          /* in C order of the indexed shape */
            int64_t j = (int64_t)at(idx, q);
            j = j < 0 ? j + xs[axis] : j;
            for (int64_t o = 0; o < xs[1 - axis]; o++) {
                int a = (int)(axis == 0 ? j : o), b = (int)(axis == 0 ? o : j);
                double val = tn_array_get(v, axis == 0 ? (int64_t[]){ q, 0 } : (int64_t[]){ 0, q });
                ref[a][b] = set ? val : add_in(t, ref[a][b], val);
            }
        }
        /* axis 0: position (q, o) of the indexed shape (9, 4); v (9, 1) */
        int64_t bad = 0;
        for (int a = 0; a < 5; a++) for (int b = 0; b < 4; b++)
            if (!same_value(tn_array_get(y, (int64_t[]){ a, b }), ref[a][b])) bad++;
        CHECK(bad == 0, "%s %s axis %d: %lld wrong", set ? "set" : "inc", tn_dtype_name(t), axis, (long long)bad);
    }
    tn_array_free(y); tn_array_free(x); tn_array_free(xv); tn_array_free(idx); tn_array_free(v);
    tn_graph_free(g);
}

TEST(test_scatter_values) {
    for (size_t q = 0; q < sizeof all_dtypes / sizeof *all_dtypes; q++)
        for (int axis = 0; axis < 2; axis++) {
            check_scatter(all_dtypes[q], false, axis);
            check_scatter(all_dtypes[q], true, axis);
        }
}

/* Large scatters (300000 positions): the same values as np.add.at's serial
   order, repeated and negative indices, along axis 1 of a matrix; a
   reversed slice; a bad index still named. */
static void check_scatter_large(tn_dtype t, bool set) {
    enum { R = 300, C = 400, Q = 1000 };
    tn_array *x = rand_array(t, 2, (int64_t[]){ R, C }), *idx = rand_idx(TN_I64, 1, (int64_t[]){ Q }, C);
    tn_array *v = rand_array(t, 2, (int64_t[]){ R, Q });
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_matrix(g, "x", t), *I = tn_vector(g, "i", TN_I64), *V = tn_matrix(g, "v", t);
    tn_var *sub = tn_take(X, I, 1), *Y = set ? tn_set_subtensor(sub, V) : tn_inc_subtensor(sub, V);
    tn_array *y = NULL;
    tn_result r = run(g, 3, (tn_var *[]){ X, I, V }, (tn_array *[]){ x, idx, v }, 1, &Y, &y);
    CHECK(r == TN_OK, "%s", tn_last_error());
    if (r == TN_OK) {
        double *ref = (double *)malloc(sizeof(double) * R * C);
        tn_array_copy_to(x, TN_F64, ref, sizeof(double) * R * C);
        const int64_t *iv = (const int64_t *)idx->data;
        for (int64_t a = 0; a < R; a++)                         /* C order of the indexed shape (R, Q) */
            for (int64_t q = 0; q < Q; q++) {
                int64_t j = iv[q] < 0 ? iv[q] + C : iv[q];
                double val = tn_array_get(v, (int64_t[]){ a, q });
                ref[a * C + j] = set ? val : add_in(t, ref[a * C + j], val);
            }
        int64_t bad = 0;
        for (int64_t a = 0; a < R; a++)
            for (int64_t b = 0; b < C; b++) bad += !same_value(tn_array_get(y, (int64_t[]){ a, b }), ref[a * C + b]);
        CHECK(bad == 0, "%s %s, %d x %d positions: %lld of %d elements wrong", set ? "set" : "inc", tn_dtype_name(t), R, Q,
              (long long)bad, R * C);
        free(ref);
    }
    tn_array_free(y); tn_array_free(x); tn_array_free(idx); tn_array_free(v);
    tn_graph_free(g);
}

TEST(test_scatter_large) {
    const tn_dtype ts[4] = { TN_F16, TN_F32, TN_F64, TN_I32 };
    for (int q = 0; q < 4; q++) { check_scatter_large(ts[q], false); check_scatter_large(ts[q], true); }
    /* x[::-1] += v over 200000 float32: a target walked backwards */
    enum { N = 200000 };
    tn_array *x = rand_array(TN_F32, 1, (int64_t[]){ N }), *v = rand_array(TN_F32, 1, (int64_t[]){ N }), *y = NULL;
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_vector(g, "x", TN_F32), *V = tn_vector(g, "v", TN_F32);
    tn_var *Y = tn_inc_subtensor(tn_slice(X, 0, TN_NONE, TN_NONE, -1), V);
    tn_result r = run(g, 2, (tn_var *[]){ X, V }, (tn_array *[]){ x, v }, 1, &Y, &y);
    CHECK(r == TN_OK, "%s", tn_last_error());
    int64_t bad = 0;
    for (int64_t i = 0; r == TN_OK && i < N; i++) {
        int64_t k = N - 1 - i;
        bad += !same_value(tn_array_get(y, &i), add_in(TN_F32, tn_array_get(x, &i), tn_array_get(v, &k)));
    }
    CHECK(bad == 0, "x[::-1] += v: %lld wrong", (long long)bad);
    tn_array_free(y); tn_array_free(x); tn_array_free(v);
    tn_graph_free(g);
    /* one index out of range among 300000 positions: NumPy's IndexError, naming where */
    int64_t *iv = (int64_t *)malloc(sizeof(int64_t) * 1000);
    for (int k = 0; k < 1000; k++) iv[k] = k % 400;
    iv[700] = 400;
    tn_array *idx = int_array(TN_I64, 1, (int64_t[]){ 1000 }, iv), *xm = rand_array(TN_F32, 2, (int64_t[]){ 300, 400 });
    tn_array *vm = rand_array(TN_F32, 2, (int64_t[]){ 300, 1000 });
    g = tn_graph_new();
    tn_var *Xm = tn_matrix(g, "x", TN_F32), *I = tn_vector(g, "i", TN_I64), *Vm = tn_matrix(g, "v", TN_F32);
    tn_var *Ym = tn_inc_subtensor(tn_take(Xm, I, 1), Vm);
    y = NULL;
    CHECK(run(g, 3, (tn_var *[]){ Xm, I, Vm }, (tn_array *[]){ xm, idx, vm }, 1, &Ym, &y) == TN_ERR_INVALID, "a bad index ran");
    CHECK_ERR(TN_ERR_INVALID, "index 400 is out of bounds for axis 1 with size 400 (index array 0, element 700 of the result)");
    tn_array_free(y); tn_array_free(xm); tn_array_free(vm); tn_array_free(idx); free(iv);
    tn_graph_free(g);
}

/* Scatters along the first axis of a vector or of rows, large enough to run
   on threads by owners (each thread a range of the axis): the values of
   np.add.at's serial order, exactly (repeats, negative indices, the last
   of repeated sets); int32 and int64 indices; a bad index among them named
   as on one thread. */
static void check_scatter_owned(tn_dtype t, bool set, bool rows, tn_dtype it) {
    enum { R = 5000, D = 24 };
    int64_t Q = rows ? 4000 : 150000, xs[2] = { R, D }, vsh[2] = { Q, D };
    int nd = rows ? 2 : 1;
    tn_array *x = rand_array(t, nd, xs), *idx = rand_idx(it, 1, (int64_t[]){ Q }, R), *v = rand_array(t, nd, vsh);
    tn_graph *g = tn_graph_new();
    tn_var *X = rows ? tn_matrix(g, "x", t) : tn_vector(g, "x", t), *I = tn_vector(g, "i", it);
    tn_var *V = rows ? tn_matrix(g, "v", t) : tn_vector(g, "v", t);
    tn_var *sub = tn_take(X, I, 0), *Y = set ? tn_set_subtensor(sub, V) : tn_inc_subtensor(sub, V);
    tn_array *y = NULL;
    tn_result r = run(g, 3, (tn_var *[]){ X, I, V }, (tn_array *[]){ x, idx, v }, 1, &Y, &y);
    CHECK(r == TN_OK, "%s", tn_last_error());
    int64_t len = rows ? D : 1;
    if (r == TN_OK) {
        double *ref = (double *)malloc(sizeof(double) * R * (size_t)len);
        tn_array_copy_to(x, TN_F64, ref, sizeof(double) * R * (size_t)len);
        for (int64_t q = 0; q < Q; q++) {
            int64_t j = (int64_t)at(idx, q);
            j = j < 0 ? j + R : j;
            for (int64_t o = 0; o < len; o++) {
                double val = at(v, q * len + o);
                ref[j * len + o] = set ? val : add_in(t, ref[j * len + o], val);
            }
        }
        int64_t bad = 0;
        for (int64_t e = 0; e < R * len; e++) bad += !same_value(at(y, e), ref[e]);
        CHECK(bad == 0, "%s %s %s, %lld positions: %lld of %lld elements wrong", set ? "set" : "inc", tn_dtype_name(t),
              rows ? "rows" : "vector", (long long)(Q * len), (long long)bad, (long long)(R * len));
        free(ref);
    }
    tn_array_free(y);
    /* entry 7000 (rows: 3000) out of range */
    int64_t badq = rows ? 3000 : 7000;
    tn_array_set(idx, &badq, (double)R);
    y = NULL;
    CHECK(run(g, 3, (tn_var *[]){ X, I, V }, (tn_array *[]){ x, idx, v }, 1, &Y, &y) == TN_ERR_INVALID, "a bad index ran");
    char want[160];
    snprintf(want, sizeof want, "index %d is out of bounds for axis 0 with size %d (index array 0, element %lld of the result)",
             R, R, (long long)(badq * len));
    CHECK_ERR(TN_ERR_INVALID, want);
    tn_array_free(y); tn_array_free(x); tn_array_free(idx); tn_array_free(v);
    tn_graph_free(g);
}

TEST(test_scatter_owned) {
    const tn_dtype ts[4] = { TN_F16, TN_F32, TN_F64, TN_I32 };
    for (int q = 0; q < 4; q++)
        for (int rows = 0; rows < 2; rows++) {
            check_scatter_owned(ts[q], false, rows, q % 2 ? TN_I32 : TN_I64);
            check_scatter_owned(ts[q], true, rows, q % 2 ? TN_I64 : TN_I32);
        }
}

/* np.add.at with many repeats into one place: float16 rounds at each addition. */
TEST(test_inc_repeated_f16) {
    int64_t n = 3000, *iv = (int64_t *)calloc((size_t)n, sizeof *iv);
    tn_array *idx = int_array(TN_I64, 1, (int64_t[]){ n }, iv);
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_vector(g, "x", TN_F16), *I = tn_vector(g, "i", TN_I64);
    tn_var *Y = tn_inc_subtensor(tn_take(X, I, 0), tn_scalar_const(g, 1.0));
    tn_array *x = tn_array_zeros(TN_F16, 1, (int64_t[]){ 2 }), *y = NULL;
    tn_result r = run(g, 2, (tn_var *[]){ X, I }, (tn_array *[]){ x, idx }, 1, &Y, &y);
    CHECK(r == TN_OK, "%s", tn_last_error());
    double acc = 0;
    for (int64_t k = 0; k < n; k++) acc = add_in(TN_F16, acc, 1.0);     /* stops at 2048 */
    CHECK(r == TN_OK && at(y, 0) == acc && acc == 2048 && at(y, 1) == 0, "y[0] %g want %g", r == TN_OK ? at(y, 0) : 0, acc);
    tn_array_free(y); tn_array_free(x); tn_array_free(idx); free(iv);
    tn_graph_free(g);
}

/* Slices: x[1:5:2, ::-1] set and incremented, v broadcast; a chain of tn_slice on two axes. */
TEST(test_slice_set_inc) {
    for (size_t q = 0; q < sizeof all_dtypes / sizeof *all_dtypes; q++) {
        tn_dtype t = all_dtypes[q];
        for (int set = 0; set < 2; set++) {
            tn_array *x = rand_array(t, 2, (int64_t[]){ 6, 3 }), *v = rand_array(t, 1, (int64_t[]){ 3 });
            tn_graph *g = tn_graph_new();
            tn_var *X = tn_matrix(g, "x", t), *V = tn_vector(g, "v", t);
            tn_var *sub = tn_slice(tn_slice(X, 0, 1, 5, 2), 1, TN_NONE, TN_NONE, -1);
            tn_var *Y = set ? tn_set_subtensor(sub, V) : tn_inc_subtensor(sub, V);
            tn_array *y = NULL;
            tn_result r = run(g, 2, (tn_var *[]){ X, V }, (tn_array *[]){ x, v }, 1, &Y, &y);
            CHECK(r == TN_OK, "%s", tn_last_error());
            int64_t bad = 0;
            for (int a = 0; r == TN_OK && a < 6; a++)
                for (int b = 0; b < 3; b++) {
                    double want = tn_array_get(x, (int64_t[]){ a, b });
                    if (a == 1 || a == 3) {
                        double vv = tn_array_get(v, (int64_t[]){ 2 - b });     /* column b is v[2 - b] (reversed) */
                        want = set ? vv : add_in(t, want, vv);
                    }
                    if (!same_value(tn_array_get(y, (int64_t[]){ a, b }), want)) bad++;
                }
            CHECK(bad == 0, "%s %s: %lld wrong", set ? "set" : "inc", tn_dtype_name(t), (long long)bad);
            tn_array_free(y); tn_array_free(x); tn_array_free(v);
            tn_graph_free(g);
        }
    }
}

/* >>one_hot_where ------------------------------------------------------------ */

TEST(test_one_hot_and_where) {
    tn_graph *g = tn_graph_new();
    tn_var *L = tn_vector(g, "y", TN_I32), *H = tn_one_hot(L, 4, TN_F32);
    tn_var *X = tn_vector(g, "x", TN_F64), *M = tn_where(tn_gt(X, tn_scalar_const(g, 0.0)), X, tn_scalar_const(g, -1.0));
    tn_array *l = int_array(TN_I32, 1, (int64_t[]){ 5 }, (int64_t[]){ 0, 3, 1, 4, -1 });
    double xv[4] = { -0.0, 2, NAN, -3 };
    tn_array *x = tn_array_from_data(TN_F64, 1, (int64_t[]){ 4 }, xv), *res[2] = { 0 };
    tn_result r = run(g, 2, (tn_var *[]){ L, X }, (tn_array *[]){ l, x }, 2, (tn_var *[]){ H, M }, res);
    CHECK(r == TN_OK, "%s", tn_last_error());
    if (r == TN_OK) {
        CHECK(res[0]->dtype == TN_F32 && res[0]->ndim == 2 && res[0]->shape[0] == 5 && res[0]->shape[1] == 4, "one_hot type");
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 4; b++) {
                double lab = at(l, a);
                CHECK(tn_array_get(res[0], (int64_t[]){ a, b }) == (lab == b ? 1.0 : 0.0), "one_hot[%d, %d]", a, b);
            }
        double want[4] = { -1, 2, -1, -1 };   /* NaN > 0 is false */
        for (int k = 0; k < 4; k++) CHECK(at(res[1], k) == want[k], "where %d: %g", k, at(res[1], k));
    }
    tn_array_free(res[0]); tn_array_free(res[1]); tn_array_free(l); tn_array_free(x);
    CHECK(tn_one_hot(X, 3, TN_F32) == NULL, "float labels");
    CHECK_ERR(TN_ERR_DTYPE, "tn_one_hot: labels 'x' are float64");
    tn_graph_free(g);
}

/* >>sort ------------------------------------------------------------------- */

/* a sorts strictly before b (NaN last; descending: NaN first). */
static bool ref_before(double a, double b, bool desc) {
    if (desc) return a > b || (isnan(a) && !isnan(b));
    return a < b || (isnan(b) && !isnan(a));
}

/* Stable insertion sort of the positions of v[0..n). */
static void ref_argsort(const double *v, int64_t n, bool desc, int64_t *out) {
    for (int64_t i = 0; i < n; i++) {
        int64_t j = i;
        while (j > 0 && ref_before(v[i], v[out[j - 1]], desc)) { out[j] = out[j - 1]; j--; }
        out[j] = i;
    }
}

static tn_array *edge_array(tn_dtype t, int nd, const int64_t *sh) {
    int64_t n = numel(nd, sh);
    double *v = (double *)calloc((size_t)n + 1, sizeof *v);
    double edge[6] = { NAN, -0.0, 0.0, INFINITY, -INFINITY, 1.5 };
    for (int64_t i = 0; i < n; i++) {
        double u = urand();
        v[i] = t == TN_BOOL ? (double)(u < 0.5) : !tn_dtype_is_float(t) ? (double)irand(-5, 5)
             : u < 0.3 ? edge[irand(0, 6)] : (double)irand(-6, 6) / 2;
    }
    tn_array *a = tn_array_from_data(TN_F64, nd, sh, v), *b = tn_array_astype(a, t);
    tn_array_free(a);
    free(v);
    return b;
}

/* argsort, sort and top_k along each axis of a (rows, cols) array, against the stable reference. */
static void check_sort(tn_dtype t, int64_t rows, int64_t cols, int axis, int64_t k) {
    int64_t sh[2] = { rows, cols };
    tn_array *x = edge_array(t, 2, sh), *xv = strided_copy(x);
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_matrix(g, "x", t), *TV, *TI;
    CHECK(tn_top_k(X, k, axis, &TV, &TI) == TN_OK, "%s", tn_last_error());
    tn_var *outs[4] = { tn_argsort(X, axis), tn_sort(X, axis), TV, TI };
    tn_array *res[4] = { 0 };
    tn_result r = run(g, 1, &X, &xv, 4, outs, res);
    CHECK(r == TN_OK, "%s", tn_last_error());
    int64_t n = sh[axis], lines = sh[1 - axis], bad = 0;
    double *v = (double *)calloc((size_t)n + 1, sizeof *v);
    int64_t *asc = (int64_t *)malloc((size_t)n * sizeof *asc), *dsc = (int64_t *)malloc((size_t)n * sizeof *dsc);
    for (int64_t l = 0; r == TN_OK && l < lines; l++) {
        for (int64_t j = 0; j < n; j++) v[j] = tn_array_get(x, axis == 0 ? (int64_t[]){ j, l } : (int64_t[]){ l, j });
        ref_argsort(v, n, false, asc);
        ref_argsort(v, n, true, dsc);
        for (int64_t j = 0; j < n; j++) {
            int64_t ix[2] = { axis == 0 ? j : l, axis == 0 ? l : j };
            if (tn_array_get(res[0], ix) != (double)asc[j]) bad++;
            if (!same_value(tn_array_get(res[1], ix), v[asc[j]])) bad++;
            if (j < k && tn_array_get(res[3], ix) != (double)dsc[j]) bad++;
            if (j < k && !same_value(tn_array_get(res[2], ix), v[dsc[j]])) bad++;
        }
    }
    CHECK(r != TN_OK || res[2]->shape[axis] == k, "top_k shape");
    CHECK(bad == 0, "%s (%lld, %lld) axis %d k %lld: %lld wrong", tn_dtype_name(t), (long long)rows, (long long)cols, axis, (long long)k, (long long)bad);
    free(v); free(asc); free(dsc);
    for (int i = 0; i < 4; i++) tn_array_free(res[i]);
    tn_array_free(x); tn_array_free(xv);
    tn_graph_free(g);
}

TEST(test_sort_values) {
    for (size_t q = 0; q < sizeof all_dtypes / sizeof *all_dtypes; q++)
        for (int axis = 0; axis < 2; axis++) {
            check_sort(all_dtypes[q], 7, 13, axis, 3);
            check_sort(all_dtypes[q], 3, 1, axis, 1);
        }
    check_sort(TN_F32, 3, 5000, 1, 40);      /* long lines: several merge passes */
    check_sort(TN_I64, 2, 1, 0, 0);           /* k = 0 */
}

/* >>grad ------------------------------------------------------------------- */

typedef struct gcase { int kind; } gcase;
static tn_var *b_grad(tn_graph *g, tn_var *const *in, void *user) {
    int kind = ((gcase *)user)->kind;
    tn_array *i = int_array(TN_I64, 2, (int64_t[]){ 2, 3 }, (int64_t[]){ 0, -1, 2, 2, 0, 0 });   /* repeats */
    tn_array *u = int_array(TN_I32, 1, (int64_t[]){ 3 }, (int64_t[]){ 3, 0, -2 });               /* no repeats */
    tn_array *al = int_array(TN_I64, 2, (int64_t[]){ 4, 2 }, (int64_t[]){ 1, 0, 2, 2, 0, 1, 3, 3 });
    tn_array *w = int_array(TN_I64, 1, (int64_t[]){ 1 }, (int64_t[]){ -2 });
    tn_var *I = tn_constant(g, i), *U = tn_constant(g, u), *A = tn_constant(g, al), *W = tn_constant(g, w), *r = NULL;
    tn_array_free(i); tn_array_free(u); tn_array_free(al); tn_array_free(w);
    switch (kind) {
    case 0: r = tn_take(in[0], I, 1); break;                                    /* x (4, 5) */
    case 1: r = tn_take_along_axis(in[0], A, 1); break;
    case 2: r = tn_index(in[0], 0, 2, (tn_var *[]){ U, W }); break;             /* x[u, w], w (1,) broadcast */
    case 3: r = tn_inc_subtensor(tn_take(in[0], I, 1), in[1]); break;           /* v (4, 2, 3) */
    case 4: r = tn_set_subtensor(tn_take(in[0], U, 0), in[1]); break;           /* v (3, 5): unique rows */
    case 5: r = tn_set_subtensor(tn_slice(tn_slice(in[0], 0, 1, 4, 2), 1, TN_NONE, TN_NONE, -2), in[1]); break;   /* v (2, 3) */
    case 6: r = tn_inc_subtensor(tn_slice(in[0], 1, 1, 3, 1), in[1]); break;    /* v (4, 2) */
    case 7: r = tn_mul(tn_sort(in[0], 1), tn_sort(in[0], 0)); break;
    case 9: r = tn_inc_subtensor(tn_slice(in[0], 1, 1, 3, 1), in[1]); break;    /* v (2,) broadcast over the rows */
    case 10: r = tn_set_subtensor(tn_take(in[0], U, 0), in[1]); break;         /* v (1, 5) broadcast over the rows */
    case 8: { tn_var *v; tn_top_k(in[0], 2, 0, &v, NULL); r = v; break; }
    default: break;
    }
    return r;
}

TEST(test_gradients) {
    const char *names[11] = { "take", "take_along_axis", "index", "inc_subtensor", "set_subtensor", "set slice", "inc slice", "sort", "top_k",
                              "inc slice, v broadcast", "set_subtensor, v broadcast" };
    int64_t vshape[11][3] = { { 0 }, { 0 }, { 0 }, { 4, 2, 3 }, { 3, 5 }, { 2, 3 }, { 4, 2 }, { 0 }, { 0 }, { 2 }, { 1, 5 } };
    int vnd[11] = { 0, 0, 0, 3, 2, 2, 2, 0, 0, 1, 2 };
    for (int kind = 0; kind < 11; kind++) {
        gcase c = { kind };
        tn_array *pts[2] = { tn_array_rand_uniform(TN_F64, 2, (int64_t[]){ 4, 5 }, -2, 2, 100 + (uint64_t)kind * 1000003), NULL };
        if (vnd[kind]) pts[1] = tn_array_rand_uniform(TN_F64, vnd[kind], vshape[kind], -2, 2, 7 + (uint64_t)kind * 1000003);
        tn_verify_grad_report rep;
        tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_grad, .user = &c, .n_inputs = vnd[kind] ? 2 : 1, .points = pts,
                                                             .seed = 11 + (uint64_t)kind, .static_shapes = true }, &rep);
        CHECK(r == TN_OK, "%s: %s", names[kind], tn_last_error());
        tn_array_free(pts[0]); tn_array_free(pts[1]);
    }
}

/* set_subtensor on a slice of float32 x: the gradient of x is g zeroed where
   x was overwritten, in x's dtype. */
TEST(test_set_slice_grad_float32) {
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_matrix(g, "x", TN_F32), *V = tn_vector(g, "v", TN_F32);
    tn_var *y = tn_set_subtensor(tn_slice(X, 1, 1, 4, 2), V);
    tn_var *gx = tn_grad1(tn_sum(tn_mul(y, y), NULL, 0, false), X);
    CHECK(gx && tn_var_dtype(gx) == TN_F32, "the gradient: %s", tn_last_error());
    tn_array *x = rand_array(TN_F32, 2, (int64_t[]){ 3, 5 }), *v = rand_array(TN_F32, 1, (int64_t[]){ 2 }), *r = NULL;
    tn_result rr = gx ? run(g, 2, (tn_var *[]){ X, V }, (tn_array *[]){ x, v }, 1, &gx, &r) : TN_ERR_INVALID;
    CHECK(rr == TN_OK, "%s", tn_last_error());
    for (int64_t i = 0; rr == TN_OK && i < 3; i++)
        for (int64_t j = 0; j < 5; j++) {
            double want = j == 1 || j == 3 ? 0 : 2 * at_ix(x, (int64_t[]){ i, j }), got = at_ix(r, (int64_t[]){ i, j });
            CHECK(got == want, "gx[%lld, %lld] = %g, want %g", (long long)i, (long long)j, got, want);
        }
    tn_array_free(r); tn_array_free(x); tn_array_free(v);
    tn_graph_free(g);
}

/* A gather's gradient scatter-adds: d sum(x[i]) / dx counts each index's repeats. */
TEST(test_gather_grad_counts) {
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_vector(g, "x", TN_F32), *I = tn_vector(g, "i", TN_I32);
    tn_var *gx = tn_grad1(tn_sum(tn_take(X, I, 0), NULL, 0, false), X);
    tn_array *x = rand_array(TN_F32, 1, (int64_t[]){ 4 }), *i = int_array(TN_I32, 1, (int64_t[]){ 6 }, (int64_t[]){ 1, 1, -1, 3, 1, 0 });
    tn_array *y = NULL;
    tn_result r = run(g, 2, (tn_var *[]){ X, I }, (tn_array *[]){ x, i }, 1, &gx, &y);
    CHECK(r == TN_OK, "%s", tn_last_error());
    double want[4] = { 1, 3, 0, 2 };
    for (int k = 0; r == TN_OK && k < 4; k++) CHECK(at(y, k) == want[k], "gx[%d] = %g", k, at(y, k));
    tn_array_free(y); tn_array_free(x); tn_array_free(i);
    tn_graph_free(g);
}

/* >>nll -------------------------------------------------------------------- */

/* -mean(log(softmax(x))[arange(n), y]) and its gradient with logits of
   magnitude 1000: finite, equal to the float64 reference written with the
   log-sum-exp (cost) and softmax - onehot (gradient). */
static void check_nll(tn_dtype t) {
    int64_t n = 6, m = 5;
    double xv[30];
    int64_t yv[6];
    for (int k = 0; k < 30; k++) xv[k] = (urand() < 0.5 ? -1000 : 1000) + (double)irand(-8, 8) * 0.25;
    for (int k = 0; k < 6; k++) yv[k] = irand(0, 5);
    tn_array *x64 = tn_array_from_data(TN_F64, 2, (int64_t[]){ n, m }, xv), *x = tn_array_astype(x64, t);
    tn_array *y = int_array(TN_I64, 1, (int64_t[]){ n }, yv);
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_matrix(g, "x", t), *Y = tn_vector(g, "y", TN_I64);
    tn_var *p = tn_softmax(X, 1);
    tn_var *ll = tn_index(tn_log(p), 0, 2, (tn_var *[]){ tn_arange(g, TN_I64, 0, (double)n, 1), Y });
    tn_var *cost = tn_neg(tn_mean(ll, NULL, 0, false)), *gx = tn_grad1(cost, X);
    tn_array *res[2] = { 0 };
    tn_result r = run(g, 2, (tn_var *[]){ X, Y }, (tn_array *[]){ x, y }, 2, (tn_var *[]){ cost, gx }, res);
    CHECK(r == TN_OK, "%s", tn_last_error());
    CHECK(tn__rewrite_count("local_log_softmax") >= 1 && tn__rewrite_count("local_log_softmax_grad") >= 1,
          "the stabilising rewrites fired %d and %d times", tn__rewrite_count("local_log_softmax"), tn__rewrite_count("local_log_softmax_grad"));
    if (r == TN_OK) {
        double cref = 0, gmax = 0, tol = t == TN_F64 ? 1e-12 : 1e-4;
        for (int64_t a = 0; a < n; a++) {
            double mx = -INFINITY, se = 0;
            for (int64_t b = 0; b < m; b++) mx = fmax(mx, at(x, a * m + b));
            for (int64_t b = 0; b < m; b++) se += exp(at(x, a * m + b) - mx);
            double lse = mx + log(se);
            cref += (lse - at(x, a * m + yv[a])) / (double)n;
            for (int64_t b = 0; b < m; b++) {
                double gref = (exp(at(x, a * m + b) - lse) - (b == yv[a])) / (double)n, got = at(res[1], a * m + b);
                CHECK(isfinite(got), "gradient [%lld, %lld] = %g", (long long)a, (long long)b, got);
                gmax = fmax(gmax, fabs(got - gref));
            }
        }
        double c = at(res[0], 0);
        CHECK(isfinite(c) && fabs(c - cref) <= tol * fmax(1, fabs(cref)), "%s cost %.17g want %.17g", tn_dtype_name(t), c, cref);
        CHECK(gmax <= tol, "%s gradient off by %g", tn_dtype_name(t), gmax);
    }
    tn_array_free(res[0]); tn_array_free(res[1]); tn_array_free(x); tn_array_free(x64); tn_array_free(y);
    tn_graph_free(g);
}

TEST(test_nll_stable) {
    check_nll(TN_F64);
    check_nll(TN_F32);
}

/* >>errors_labels ------------------------------------------------------------ */

TEST(test_errors) {
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_matrix(g, "x", TN_F32), *B = tn_vector(g, "mask", TN_BOOL), *F = tn_vector(g, "f", TN_F32);
    tn_var *I = tn_vector(g, "i", TN_I64), *J = tn_input(g, "j", TN_I64, 1, (int64_t[]){ 3 }, NULL);
    tn_var *K = tn_input(g, "k", TN_I64, 1, (int64_t[]){ 4 }, NULL);
    tn_var *S = tn_input(g, "s", TN_F32, 2, (int64_t[]){ 3, 4 }, NULL);
    CHECK(tn_take(X, B, 0) == NULL, "bool index");
    CHECK_ERR(TN_ERR_DTYPE, "tn_take: AdvancedSubtensor: index array 0 is bool; indices must be int32 or int64");
    CHECK(tn_take(X, F, 0) == NULL, "float index");
    CHECK_ERR(TN_ERR_DTYPE, "float32");
    CHECK(tn_take(X, I, 2) == NULL, "axis");
    CHECK_ERR(TN_ERR_AXIS, "tn_take: axis 2 is out of range for 'x'");
    CHECK(tn_index(X, 0, 2, (tn_var *[]){ J, K }) == NULL, "broadcast");
    CHECK_ERR(TN_ERR_SHAPE, "indexing arrays could not be broadcast together with shapes (3,) (4,)");
    CHECK(tn_index(X, 1, 2, (tn_var *[]){ I, I }) == NULL, "too many");
    CHECK_ERR(TN_ERR_AXIS, "2 index arrays from axis 1 do not fit x of shape");
    CHECK(tn_take_along_axis(X, I, 0) == NULL, "rank");
    CHECK_ERR(TN_ERR_SHAPE, "take_along_axis needs indices of x's rank");
    CHECK(tn_set_subtensor(tn_exp(X), X) == NULL, "not a subtensor");
    CHECK_ERR(TN_ERR_INVALID, "tn_set_subtensor: sub");
    CHECK(tn_inc_subtensor(tn_slice(tn_slice(X, 0, 1, 3, 1), 0, 0, 1, 1), X) == NULL, "sliced twice");
    CHECK_ERR(TN_ERR_INVALID, "axis 0 of sub is sliced twice");
    CHECK(tn_set_subtensor(tn_take(S, J, 0), tn_input(g, "w", TN_F32, 1, (int64_t[]){ 5 }, NULL)) == NULL, "v shape");
    CHECK_ERR(TN_ERR_SHAPE, "v of shape (5,) does not broadcast to the indexed shape (3, 4)");
    tn_var *tv;
    CHECK(tn_top_k(S, 5, 0, &tv, NULL) != TN_OK && tv == NULL, "k too large");
    CHECK_ERR(TN_ERR_SHAPE, "k = 5 is larger than axis 0 of shape (3, 4)");
    CHECK(tn_top_k(S, -1, 0, &tv, NULL) == TN_ERR_INVALID, "negative k");
    CHECK(tn_argsort(X, -3) == NULL, "sort axis");
    CHECK_ERR(TN_ERR_AXIS, "tn_argsort: axis -3 is out of range");
    CHECK(tn_take(NULL, I, 0) == NULL, "NULL x");
    CHECK_ERR(TN_ERR_NULL, "tn_take");
    tn_graph_free(g);
}

TEST(test_labels) {
    tn_graph *g = tn_graph_new();
    tn_var *X = tn_matrix(g, "x", TN_F32), *I = tn_vector(g, "i", TN_I64), *tv;
    tn_top_k(X, 2, 1, &tv, NULL);
    struct { tn_var *v; const char *want; } c[] = {
        { tn_take(X, I, 0), "AdvancedSubtensor1 " },
        { tn_take(X, I, 1), "AdvancedSubtensor{axis=1}" },
        { tn_take_along_axis(X, tn_matrix(g, "a", TN_I64), 1), "TakeAlongAxis{axis=1}" },
        { tn_set_subtensor(tn_take(X, I, 0), X), "AdvancedIncSubtensor1{no_inplace,set}" },
        { tn_inc_subtensor(tn_take(X, I, 1), X), "AdvancedIncSubtensor{axis=1, no_inplace,inc}" },
        { tn_inc_subtensor(tn_slice(X, 1, 1, 3, 1), X), "IncSubtensor{Inc;::, 1:3:}" },
        { tn_argsort(X, 0), "ArgSort{axis=0}" },
        { tv->in[1], "TopK{axis=1, k=2}" },
    };
    for (size_t k = 0; k < sizeof c / sizeof *c; k++) {
        char buf[256] = "";
        FILE *m = fmemopen(buf, sizeof buf, "w");
        tn_debugprint(c[k].v, m);
        fclose(m);
        CHECK(strstr(buf, c[k].want) != NULL, "label %zu: '%s' lacks '%s'", k, buf, c[k].want);
    }
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_take_values);
    TH_RUN(test_take_edges);
    TH_RUN(test_take_out_of_range);
    TH_RUN(test_take_along_axis_values);
    TH_RUN(test_index_several_axes);
    TH_RUN(test_scatter_values);
    TH_RUN(test_scatter_large);
    TH_RUN(test_scatter_owned);
    TH_RUN(test_inc_repeated_f16);
    TH_RUN(test_slice_set_inc);
    TH_RUN(test_one_hot_and_where);
    TH_RUN(test_sort_values);
    TH_RUN(test_gradients);
    TH_RUN(test_set_slice_grad_float32);
    TH_RUN(test_gather_grad_counts);
    TH_RUN(test_nll_stable);
    TH_RUN(test_errors);
    TH_RUN(test_labels);
    tn_shutdown();
    TH_END();
}
