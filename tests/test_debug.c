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

int main(void) {
    TH_RUN(test_value_shape_error_at_build);
    TH_RUN(test_value_missing_and_shared);
    TH_RUN(test_value_scan);
    TH_RUN(test_value_warn_and_off);
    TH_END();
}
