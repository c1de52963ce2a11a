/* Debugging aids from Theano: test values (compute_test_value), shared
   variables that borrow the caller's array or fix a broadcastable pattern,
   and mode=check / nan_guard on CPU ops. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

/* Sets one flag over the current config; returns the config to go back to. */
static tn_config with_flags(const char *flags) {
    tn_config old = *tn_get_config(), c = old;
    if (tn_parse_flags(flags, &c) != TN_OK || tn_init(&c) != TN_OK) fprintf(stderr, "with_flags %s: %s\n", flags, tn_last_error());
    return old;
}

/* Warnings written through the log, joined. */
static char logged[4096];
static int n_warnings;
static void grab_log(tn_log_level level, const char *msg, void *user) {
    (void)user;
    if (level != TN_LOG_WARN) return;
    n_warnings++;
    size_t n = strlen(logged);
    snprintf(logged + n, sizeof logged - n, "%s\n", msg);
}
static void log_start(void) { logged[0] = 0; n_warnings = 0; tn_set_log(grab_log, NULL); }

static tn_array *seq(int ndim, const int64_t *shape) {   /* 1, 2, 3, ... */
    tn_array *a = tn_array_zeros(TN_F64, ndim, shape);
    double *p = (double *)a->data;
    for (int64_t i = 0; i < tn_array_size(a); i++) p[i] = (double)(i + 1);
    return a;
}

/* Test values */

TEST(test_value_shape_error_at_build) {
    tn_config old = with_flags("compute_test_value=raise");
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_matrix(g, "a", TN_F64), *b = tn_matrix(g, "b", TN_F64);   /* shapes unknown: (?, ?) */
    tn_array *av = seq(TN_SHAPE(3, 4)), *bv = seq(TN_SHAPE(5, 2)), *bok = seq(TN_SHAPE(4, 2));
    CHECK(tn_var_set_test_value(a, av) == a && tn_var_set_test_value(b, bv) == b, "%s", tn_last_error());
    tn_clear_error();
    int before = tn__graph_nvars(g);
    CHECK(tn_dot(a, b) == NULL, "a dot of (3, 4) and (5, 2) test values must fail under raise");
    CHECK_ERR(TN_ERR_SHAPE, "tn_dot: test values of shapes (3, 4) and (5, 2) do not fit");
    CHECK(tn__graph_nvars(g) == before, "the failed node is not left in the graph");
    /* a good value: computed eagerly, as a function would */
    CHECK(tn_var_set_test_value(b, bok) == b, "%s", tn_last_error());
    tn_var *y = tn_sum(tn_exp(tn_dot(a, b)), TN_AXES(0), false);
    const tn_array *yv = tn_var_test_value(y);
    CHECK(yv && yv->ndim == 1 && yv->shape[0] == 2, "y's test value has shape (2,)");
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ a, b }, .n_outputs = 1, .outputs = &y });
    tn_array *out = NULL;
    CHECK(f && tn_call(f, (tn_array *[]){ av, bok }, &out) == TN_OK, "%s", tn_last_error());
    if (yv && out)
        for (int64_t j = 0; j < 2; j++)
            CHECK(tn_array_get(yv, &j) == tn_array_get(out, &j), "test value [%lld] %g vs call %g", (long long)j,
                  tn_array_get(yv, &j), tn_array_get(out, &j));
    /* a view op's value is its own copy */
    tn_var *t = tn_transpose(a, NULL);
    const tn_array *tv = tn_var_test_value(t);
    CHECK(tv && tv->shape[0] == 4 && tv->shape[1] == 3 && tn_array_get(tv, (int64_t[]){ 1, 0 }) == 2.0, "transpose's test value");
    tn_array_free(out);
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(av); tn_array_free(bv); tn_array_free(bok);
    tn_init(&old);
}

TEST(test_value_missing_and_shared) {
    tn_config old = with_flags("compute_test_value=raise");
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_clear_error();
    CHECK(tn_exp(x) == NULL, "an input without a test value is an error under raise");
    CHECK_ERR(TN_ERR_INVALID, "input 0 ('x') has no test value");
    /* a shared variable's test value is its value; a constant's too */
    tn_array *wv = seq(TN_SHAPE(2, 3)), *xv = seq(TN_SHAPE(4));
    tn_var *w = tn_shared(g, "w", wv);
    CHECK(tn_var_test_value(w) == tn_shared_get(w), "a shared variable's test value is its value");
    CHECK(tn_var_set_test_value(x, xv) == x, "%s", tn_last_error());
    tn_clear_error();
    CHECK(tn_add(w, x) == NULL, "(2, 3) + (4,) fails at build time");
    CHECK_ERR(TN_ERR_SHAPE, "tn_add: test values of shapes (2, 3) and (4,)");
    tn_var *s = tn_mul(tn_sum(w, NULL, 0, false), tn_scalar_const(g, 2.0));
    CHECK(s && tn_var_test_value(s) && tn_array_get(tn_var_test_value(s), NULL) == 42.0, "sum(w) * 2 = 42");
    /* tn_var_set_test_value checks the static type and refuses non-inputs */
    tn_var *m = tn_input(g, "m", TN_F32, 2, (int64_t[]){ -1, 3 }, NULL);
    tn_clear_error();
    CHECK(tn_var_set_test_value(m, xv) == NULL, "rank 1 for a matrix");
    CHECK_ERR(TN_ERR_SHAPE, "'m' has type TensorType(float32, (?, 3)); the test value has shape (4,)");
    CHECK(tn_var_set_test_value(w, wv) == NULL, "not on a shared variable");
    CHECK_ERR(TN_ERR_INVALID, "'w' is not an input");
    CHECK(tn_var_set_test_value(m, wv) == m && tn_var_test_value(m)->dtype == TN_F32, "converted to the input's dtype");
    /* a scan's step graph (placeholders) needs no test values */
    tn_graph_free(g);
    tn_array_free(wv); tn_array_free(xv);
    tn_init(&old);
}

static tn_result scan_step(tn_scan_step *s, void *user) {
    (void)user;
    s->outputs[0] = tn_add(s->out[0][0], s->seq[0][0]);
    s->outputs[1] = tn_mul(s->seq[0][0], tn_lit(s->seq[0][0], 2.0));
    return TN_OK;
}

TEST(test_value_scan) {
    tn_config old = with_flags("compute_test_value=raise");
    tn_graph *g = tn_graph_new();
    tn_var *U = tn_matrix(g, "U", TN_F64), *a0 = tn_vector(g, "a0", TN_F64), *A[2] = { NULL, NULL };
    tn_array *Uv = seq(TN_SHAPE(3, 2)), *a0v = seq(TN_SHAPE(2));
    tn_var_set_test_value(U, Uv);
    tn_var_set_test_value(a0, a0v);
    tn_scan_seq sq = { U, 0, NULL };
    tn_scan_out o[2] = { { a0, 0, NULL }, { NULL, 0, NULL } };
    CHECK(tn_scan(&(tn_scan_desc){ .step = scan_step, .n_sequences = 1, .sequences = &sq, .n_outputs = 2, .outputs = o },
                  A, NULL, NULL) == TN_OK, "%s", tn_last_error());
    /* two outputs: each read through its projection of the scan node */
    const tn_array *Av = A[0] ? tn_var_test_value(A[0]) : NULL, *Bv = A[1] ? tn_var_test_value(A[1]) : NULL;
    /* a = [1, 2] + [1, 2] = [2, 4], + [3, 4] = [5, 8], + [5, 6] = [10, 14] */
    CHECK(Av && Av->shape[0] == 3 && tn_array_get(Av, (int64_t[]){ 2, 1 }) == 14.0, "the scan's test value");
    CHECK(Bv && Bv->shape[0] == 3 && tn_array_get(Bv, (int64_t[]){ 2, 1 }) == 12.0, "its second output's test value");
    tn_graph_free(g);
    tn_array_free(Uv); tn_array_free(a0v);
    tn_init(&old);
}

TEST(test_value_warn_and_off) {
    tn_config old = with_flags("compute_test_value=warn");
    log_start();
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_matrix(g, "a", TN_F64), *b = tn_matrix(g, "b", TN_F64), *x = tn_vector(g, "x", TN_F64);
    tn_array *av = seq(TN_SHAPE(3, 4)), *bv = seq(TN_SHAPE(5, 2));
    tn_var_set_test_value(a, av);
    tn_var_set_test_value(b, bv);
    tn_clear_error();
    tn_var *d = tn_dot(a, b);
    CHECK(d != NULL && tn_var_test_value(d) == NULL, "warn: the node is built, without a test value");
    CHECK(tn_last_result() == TN_OK, "warn leaves no error: %s", tn_last_error());
    CHECK(n_warnings == 1 && strstr(logged, "tn_dot: test values of shapes (3, 4) and (5, 2)"), "warned: %s", logged);
    tn_var *e = tn_exp(x);
    CHECK(e != NULL && n_warnings == 2 && strstr(logged, "input 0 ('x') has no test value"), "missing: %s", logged);
    tn_var *e2 = tn_log(e);      /* built on a node without one: no second warning */
    CHECK(e2 != NULL && n_warnings == 2, "one warning per missing input: %s", logged);
    tn_init(&old);
    tn_config c = *tn_get_config();
    CHECK(c.compute_test_value == TN_WR_OFF, "off by default");
    tn_var *d2 = tn_dot(a, b);
    CHECK(d2 != NULL && tn_var_test_value(d2) == NULL && n_warnings == 2, "off computes nothing");
    CHECK(tn_parse_flags("compute_test_value=maybe", &c) == TN_ERR_INVALID, "bad value");
    CHECK_ERR(TN_ERR_INVALID, "compute_test_value");
    tn_set_log(NULL, NULL);
    tn_graph_free(g);
    tn_array_free(av); tn_array_free(bv);
}

/* Shared variables: borrow and a broadcastable pattern */

TEST(test_shared_borrow) {
    tn_graph *g = tn_graph_new();
    tn_array *a = tn_array_from_data(TN_F64, TN_SHAPE(3), (const double[]){ 1, 2, 3 });
    double *mem = (double *)a->data;
    tn_var *s = tn_shared_ex(g, "s", a, &(tn_shared_opts){ .borrow = true });
    CHECK(s && tn_shared_get(s)->data == a->data, "borrowed: the variable reads the caller's memory");
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *y = tn_sum(s, NULL, 0, false);
    tn_update up = { s, tn_add(tn_mul(s, tn_lit(s, 2.0)), x) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y,
                                                 .n_updates = 1, .updates = &up });
    CHECK(f, "%s", tn_last_error());
    tn_array *xv = tn_array_from_data(TN_F64, TN_SHAPE(3), (const double[]){ 10, 20, 30 }), *out = NULL;
    CHECK(f && tn_call(f, &xv, &out) == TN_OK, "%s", tn_last_error());
    CHECK(out && tn_array_get(out, NULL) == 6.0, "the output read the old value");
    CHECK(mem[0] == 12 && mem[1] == 24 && mem[2] == 36, "the update is in the caller's array: %g %g %g", mem[0], mem[1], mem[2]);
    CHECK(tn_shared_get(s)->data == mem, "still the caller's memory after the update");
    tn_array_free(out); out = NULL;
    mem[0] = 100;                                      /* the caller's write is seen by the next call */
    CHECK(f && tn_call(f, &xv, &out) == TN_OK && out && tn_array_get(out, NULL) == 160.0, "sum after the caller's write");
    CHECK(mem[0] == 210 && mem[2] == 102, "second update in place: %g %g", mem[0], mem[2]);
    tn_array_free(out); out = NULL;
    /* set_value writes into the same memory; another shape is refused naming it */
    tn_array *nv = tn_array_from_data(TN_F64, TN_SHAPE(3), (const double[]){ 7, 8, 9 }), *bad = tn_array_zeros(TN_F64, TN_SHAPE(4));
    CHECK(tn_shared_set_value(s, nv) == TN_OK && mem[0] == 7 && mem[2] == 9 && tn_shared_get(s)->data == mem, "set_value in place");
    CHECK(tn_shared_set_value(s, bad) == TN_ERR_SHAPE, "a borrowed value keeps its shape");
    CHECK_ERR(TN_ERR_SHAPE, "shared variable 's' borrows the caller's array of shape (3,), which keeps its shape; the new value has shape (4,)");
    CHECK(mem[0] == 7, "unchanged after the refused value");
    /* an update of another shape: refused at the call, nothing applied */
    tn_update grow = { s, tn_concatenate(2, (tn_var *[]){ s, s }, 0) };
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &grow });
    CHECK(f2 && tn_call(f2, NULL, NULL) == TN_ERR_SHAPE, "the update's shape (6,) must fail");
    CHECK_ERR(TN_ERR_SHAPE, "update 0 has shape (6,)");
    CHECK(mem[0] == 7 && mem[1] == 8, "nothing written");
    /* the library keeps the buffer alive: the caller may free its struct */
    tn_array *keep = tn_array_view(a);
    tn_array_free(a);
    CHECK(f && tn_call(f, &xv, &out) == TN_OK && out && tn_array_get(out, NULL) == 24.0, "runs after the caller freed its array");
    CHECK(((double *)keep->data)[0] == 24, "and still writes the same memory");
    /* what cannot be borrowed */
    tn_array *row = tn_array_from_data(TN_F64, TN_SHAPE(1, 3), (const double[]){ 1, 2, 3 });
    tn_array *bc = tn_array_broadcast_to(row, TN_SHAPE(2, 3));
    CHECK(tn_shared_ex(g, "bc", bc, &(tn_shared_opts){ .borrow = true }) == NULL, "a broadcast array");
    CHECK_ERR(TN_ERR_INVALID, "cannot borrow a broadcast array");
    /* without borrow the value is copied, as tn_shared */
    tn_var *c = tn_shared_ex(g, "c", row, NULL);
    CHECK(c && tn_shared_get(c)->data != row->data, "copied");
    tn_array_free(out); tn_array_free(xv); tn_array_free(nv); tn_array_free(bad); tn_array_free(keep);
    tn_array_free(bc); tn_array_free(row);
    tn_function_free(f); tn_function_free(f2);
    tn_graph_free(g);
}

TEST(test_shared_broadcastable) {
    tn_graph *g = tn_graph_new();
    tn_array *bv = tn_array_from_data(TN_F64, TN_SHAPE(3, 1), (const double[]){ 1, 2, 3 });
    tn_array *wide = tn_array_zeros(TN_F64, TN_SHAPE(3, 2)), *taller = tn_array_ones(TN_F64, TN_SHAPE(5, 1));
    const bool pat[2] = { false, true };
    tn_var *b = tn_shared_ex(g, "b", bv, &(tn_shared_opts){ .broadcastable = pat });
    CHECK(b && b->type.bcast[1] && !b->type.bcast[0] && tn_var_dim(b, 1) == 1 && tn_var_dim(b, 0) == -1,
          "dim 1 is 1 in the static type; dim 0 stays free");
    CHECK(tn_shared_ex(g, "w", wide, &(tn_shared_opts){ .broadcastable = pat }) == NULL, "a value whose dim 1 is 2");
    CHECK_ERR(TN_ERR_SHAPE, "tn_shared_ex 'w': dim 1 is broadcastable but the value has shape (3, 2)");
    CHECK(tn_shared_set_value(b, wide) == TN_ERR_SHAPE, "set_value (3, 2)");
    CHECK_ERR(TN_ERR_SHAPE, "shared variable 'b' has the broadcastable pattern (False, True) (dim 1 is 1); the new value has shape (3, 2)");
    CHECK(tn_shared_set_value(b, taller) == TN_OK, "dim 0 may change: %s", tn_last_error());
    tn_shared_set_value(b, bv);
    /* it broadcasts against a matrix; an update that widens it is refused at the call */
    tn_var *m = tn_matrix(g, "m", TN_F64);
    tn_var *y = tn_add(b, m);
    tn_update up = { b, tn_sum(tn_add(b, m), TN_AXES(1), true) };      /* (3, 1): fine */
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &m, .n_outputs = 1, .outputs = &y,
                                                 .n_updates = 1, .updates = &up });
    tn_array *mv = tn_array_ones(TN_F64, TN_SHAPE(3, 4)), *out = NULL;
    CHECK(f && tn_call(f, &mv, &out) == TN_OK, "%s", tn_last_error());
    CHECK(out && out->shape[1] == 4 && tn_array_get(out, (int64_t[]){ 2, 3 }) == 4.0, "b broadcast over m");
    CHECK(tn_array_get(tn_shared_get(b), (int64_t[]){ 2, 0 }) == 16.0, "updated: sum over 4 of 3 + 1");
    tn_update widen = { b, tn_add(b, m) };                              /* (3, 4) */
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &m, .n_updates = 1, .updates = &widen });
    CHECK(f2 && tn_call(f2, &mv, NULL) == TN_ERR_SHAPE, "a (3, 4) update of a (?, 1) pattern");
    CHECK_ERR(TN_ERR_SHAPE, "has the broadcastable pattern (False, True) (dim 1 is 1); update 0 has shape (3, 4)");
    tn_array_free(out); tn_array_free(mv); tn_array_free(bv); tn_array_free(wide); tn_array_free(taller);
    tn_function_free(f); tn_function_free(f2);
    tn_graph_free(g);
}

/* mode=check and nan_guard on CPU ops */

static tn_result same_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    out[0] = in[0];
    return TN_OK;
}
/* out = 2 x; what else it does: op->user */
enum { BEHAVE, WRITE_INPUT, WRONG_SHAPE, MAKE_NAN };
static tn_result odd_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)why; (void)cap;
    int how = *(const int *)op->user;
    double *x = (double *)in[0]->data, *y = (double *)out[0]->data;
    for (int64_t i = 0; i < tn_array_size(in[0]); i++) y[i] = how == MAKE_NAN && x[i] < 0 ? sqrt(x[i]) : 2 * x[i];
    if (how == WRITE_INPUT) x[1] = -1;
    if (how == WRONG_SHAPE) out[0]->shape[0] = 2;
    return TN_OK;
}

/* Compiles odd(x) + 1 for the behaviour `how`; its call on [1, 2, 3] (or xs). */
static tn_result run_odd(int how, tn_mode mode, const double *xs, tn_array **out, double *x_after) {
    static int hows[4] = { BEHAVE, WRITE_INPUT, WRONG_SHAPE, MAKE_NAN };
    tn_custom_op op = { .name = "odd", .n_inputs = 1, .n_outputs = 1, .infer = same_infer, .cpu = odd_cpu, .user = &hows[how] };
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *y = tn_add(tn_custom(g, &op, 1, &x), tn_scalar_const(g, 1.0));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .mode = mode, .name = "odd_f" });
    tn_array *xv = tn_array_from_data(TN_F64, TN_SHAPE(3), xs ? xs : (const double[]){ 1, 2, 3 });
    tn_result r = f ? tn_call(f, &xv, out) : tn_last_result();
    *x_after = ((double *)xv->data)[1];
    tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
    return r;
}

TEST(test_check_cpu_ops) {
    tn_array *out = NULL;
    double x1;
    CHECK(run_odd(BEHAVE, TN_MODE_CHECK, NULL, &out, &x1) == TN_OK && out && tn_array_get(out, (int64_t[]){ 2 }) == 7.0,
          "a well-behaved op passes: %s", tn_last_error());
    tn_array_free(out); out = NULL;
    /* an op writing an input it does not declare destroyed */
    CHECK(run_odd(WRITE_INPUT, TN_MODE_FAST_RUN, NULL, &out, &x1) == TN_OK && x1 == -1, "unchecked, the write goes through");
    tn_array_free(out); out = NULL;
    CHECK(run_odd(WRITE_INPUT, TN_MODE_CHECK, NULL, &out, &x1) == TN_ERR_CHECK && !out, "mode=check catches the write");
    CHECK_ERR(TN_ERR_CHECK, "odd_f: Custom{odd} (step 0 of");
    CHECK_ERR(TN_ERR_CHECK, "wrote its input 0 (float64 (3,)) at (1,), which it does not declare destroyed (no inplace): -1, was 2");
    CHECK(x1 == 2, "the input is restored: %g", x1);
    /* an op leaving its output in another shape than its type */
    CHECK(run_odd(WRONG_SHAPE, TN_MODE_CHECK, NULL, &out, &x1) == TN_ERR_CHECK && !out, "mode=check catches the shape");
    CHECK_ERR(TN_ERR_CHECK, "Custom{odd} (step 0 of");
    CHECK_ERR(TN_ERR_CHECK, "left output 0 as float64 (2,) strides (8,) where its type is TensorType(float64, (?,)) and the executor gave float64 (3,) strides (8,)");
    /* NaN: only with nan_guard, and only from inputs without NaN */
    CHECK(run_odd(MAKE_NAN, TN_MODE_CHECK, (const double[]){ 1, -4, 3 }, &out, &x1) == TN_OK, "NaN without nan_guard: %s", tn_last_error());
    tn_array_free(out); out = NULL;
    tn_config old = with_flags("nan_guard=1");
    CHECK(run_odd(MAKE_NAN, TN_MODE_DEFAULT, (const double[]){ 1, -4, 3 }, &out, &x1) == TN_ERR_CHECK && !out, "nan_guard catches it");
    CHECK_ERR(TN_ERR_CHECK, "odd_f: Custom{odd} (step 0 of");
    CHECK_ERR(TN_ERR_CHECK, "nan_guard: node 1 made NaN in output 0 (float64 (3,)) at (1,) from inputs without NaN or inf (float64 (3,))");
    CHECK(run_odd(MAKE_NAN, TN_MODE_DEFAULT, (const double[]){ NAN, -4, 3 }, &out, &x1) == TN_OK, "a NaN input may give NaN: %s", tn_last_error());
    tn_array_free(out); out = NULL;
    /* a library op: log(0) is -inf */
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32), *y = tn_log(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    tn_array *xv = tn_array_from_data(TN_F32, TN_SHAPE(2), (const float[]){ 1, 0 });
    CHECK(f && tn_call(f, &xv, &out) == TN_ERR_CHECK, "log(0) under nan_guard");
    CHECK_ERR(TN_ERR_CHECK, "made inf in output 0 (float32 (2,)) at (1,)");
    tn_init(&old);
    tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Ordinary graphs give the same results under mode=check, inplace ops included. */
TEST(test_check_same_results) {
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_matrix(g, "a", TN_F64), *b = tn_matrix(g, "b", TN_F64), *v = tn_vector(g, "v", TN_F64);
    tn_var *h = tn_tanh(tn_add(tn_dot(a, b), v));
    tn_var *outs[3] = { tn_softmax(h, -1), tn_sum(tn_exp(tn_mul(h, h)), TN_AXES(1), false), tn_transpose(h, NULL) };
    tn_var *ins[3] = { a, b, v };
    tn_func *f[2];
    for (int m = 0; m < 2; m++)
        f[m] = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 3, .outputs = outs,
                                               .mode = m ? TN_MODE_CHECK : TN_MODE_FAST_RUN });
    tn_array *av = tn_array_rand_normal(TN_F64, TN_SHAPE(4, 5), 0, 1, 1), *bv = tn_array_rand_normal(TN_F64, TN_SHAPE(5, 3), 0, 1, 2);
    tn_array *vv = tn_array_rand_normal(TN_F64, TN_SHAPE(3), 0, 1, 3), *args[3] = { av, bv, vv };
    tn_array *res[2][3] = { { NULL } };
    for (int m = 0; m < 2; m++) CHECK(f[m] && tn_call(f[m], args, res[m]) == TN_OK, "mode %d: %s", m, tn_last_error());
    for (int k = 0; k < 3; k++)
        CHECK(res[0][k] && res[1][k] && tn_array_nbytes(res[0][k]) == tn_array_nbytes(res[1][k]) &&
              !memcmp(res[0][k]->data, res[1][k]->data, tn_array_nbytes(res[0][k])), "output %d identical", k);
    for (int m = 0; m < 2; m++) { for (int k = 0; k < 3; k++) tn_array_free(res[m][k]); tn_function_free(f[m]); }
    tn_array_free(av); tn_array_free(bv); tn_array_free(vv);
    tn_graph_free(g);
}

int main(void) {
    TH_RUN(test_value_shape_error_at_build);
    TH_RUN(test_value_missing_and_shared);
    TH_RUN(test_value_scan);
    TH_RUN(test_value_warn_and_off);
    TH_RUN(test_shared_borrow);
    TH_RUN(test_shared_broadcastable);
    TH_RUN(test_check_cpu_ops);
    TH_RUN(test_check_same_results);
    TH_END();
}
