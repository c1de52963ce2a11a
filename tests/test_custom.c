/* Custom ops (the >>custom section): a user type rule and CPU function used inside
   a graph, compared with a float64 reference on random inputs (contiguous,
   transposed and sliced views); errors from the callbacks name the op; ops
   with no inputs (eye) and with two outputs. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

/* multiply_them(a, b) = a * b, same shapes (the seed's PyCUDA kernel). */
static tn_result mul_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    (void)op;
    if (in[0].dtype != TN_F32 || in[1].dtype != TN_F32) { snprintf(why, cap, "inputs must be float32"); return TN_ERR_DTYPE; }
    if (in[0].ndim != in[1].ndim) { snprintf(why, cap, "ranks differ (%d vs %d)", in[0].ndim, in[1].ndim); return TN_ERR_SHAPE; }
    for (int d = 0; d < in[0].ndim; d++)
        if (in[0].shape[d] >= 0 && in[1].shape[d] >= 0 && in[0].shape[d] != in[1].shape[d]) {
            snprintf(why, cap, "shapes differ at dim %d (%lld vs %lld)", d, (long long)in[0].shape[d], (long long)in[1].shape[d]);
            return TN_ERR_SHAPE;
        }
    out[0] = in[0];
    for (int d = 0; d < in[0].ndim; d++) if (out[0].shape[d] < 0) out[0].shape[d] = in[1].shape[d];
    return TN_OK;
}
static int mul_cpu_calls;
static tn_result mul_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    mul_cpu_calls++;
    const float *a = (const float *)in[0]->data, *b = (const float *)in[1]->data;
    float *o = (float *)out[0]->data;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) o[i] = a[i] * b[i];
    return TN_OK;
}
static const tn_custom_op MUL = { .name = "multiply_them", .n_inputs = 2, .n_outputs = 1, .infer = mul_infer, .cpu = mul_cpu };

static double ref_get(const tn_array *a, int64_t i, int64_t j) { return tn_array_get(a, (int64_t[]){ i, j }); }

/* exp(multiply_them(a, b)) + 1 over several shapes and layouts. */
TEST(test_custom_in_graph) {
    int64_t shapes[][2] = { { 1, 1 }, { 3, 5 }, { 17, 33 } };
    for (int s = 0; s < 3; s++) {
        int64_t R = shapes[s][0], C = shapes[s][1];
        for (int layout = 0; layout < 3; layout++) {
            tn_graph *g = tn_graph_new();
            tn_var *a = tn_matrix(g, "a", TN_F32), *b = tn_matrix(g, "b", TN_F32);
            tn_var *m = tn_custom(NULL, &MUL, 2, (tn_var *[]){ a, b });
            tn_var *y = tn_add(tn_exp(m), tn_lit(m, 1.0));
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ a, b }, .n_outputs = 1, .outputs = &y });
            CHECK(f != NULL, "compile: %s", tn_last_error());
            tn_array *av, *bv, *abase = NULL;
            bv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ R, C }, -1, 1, 100 + (uint64_t)s);
            if (layout == 0) av = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ R, C }, -1, 1, 200 + (uint64_t)s);
            else if (layout == 1) {   /* transposed view */
                abase = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ C, R }, -1, 1, 300 + (uint64_t)s);
                av = tn_array_transpose(abase, NULL);
            } else {                  /* every other row */
                abase = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 2 * R, C }, -1, 1, 400 + (uint64_t)s);
                av = tn_array_slice(abase, 0, 0, TN_NONE, 2);
            }
            tn_array *out = NULL;
            int before = mul_cpu_calls;
            CHECK(f && tn_call(f, (tn_array *[]){ av, bv }, &out) == TN_OK, "call: %s", tn_last_error());
            CHECK(mul_cpu_calls == before + 1, "the CPU function ran once");
            double worst = 0;
            for (int64_t i = 0; out && i < R; i++)
                for (int64_t j = 0; j < C; j++) {
                    double want = exp(ref_get(av, i, j) * ref_get(bv, i, j)) + 1.0;
                    double e = fabs(ref_get(out, i, j) - want) / fmax(1.0, fabs(want));
                    if (e > worst) worst = e;
                }
            CHECK(out && worst < 1e-6, "shape %lldx%lld layout %d: error %g", (long long)R, (long long)C, layout, worst);
            tn_array_free(out); tn_array_free(av); tn_array_free(bv); tn_array_free(abase);
            tn_function_free(f);
            tn_graph_free(g);
        }
    }
}

TEST(test_custom_errors) {
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_input(g, "a", TN_F32, 2, (int64_t[]){ 3, 4 }, NULL);
    tn_var *b = tn_input(g, "b", TN_F32, 2, (int64_t[]){ 3, 5 }, NULL);
    CHECK(tn_custom(NULL, &MUL, 2, (tn_var *[]){ a, b }) == NULL, "static shape mismatch");
    CHECK_ERR(TN_ERR_SHAPE, "op 'multiply_them'");
    CHECK(strstr(tn_last_error(), "shapes differ at dim 1 (4 vs 5)") != NULL, "reason: %s", tn_last_error());
    tn_var *d = tn_input(g, "d", TN_F64, 2, NULL, NULL);
    CHECK(tn_custom(NULL, &MUL, 2, (tn_var *[]){ a, d }) == NULL, "dtype");
    CHECK_ERR(TN_ERR_DTYPE, "float32");
    CHECK(tn_custom(NULL, &MUL, 1, (tn_var *[]){ a }) == NULL, "arity");
    CHECK_ERR(TN_ERR_NUM_INPUTS, "'multiply_them' takes 2 inputs, got 1");
    CHECK(tn_custom(NULL, NULL, 1, (tn_var *[]){ a }) == NULL, "NULL op");
    CHECK_ERR(TN_ERR_NULL, "op is NULL");
    tn_custom_op noinfer = MUL;
    noinfer.infer = NULL;
    CHECK(tn_custom(NULL, &noinfer, 2, (tn_var *[]){ a, a }) == NULL, "no infer");
    CHECK_ERR(TN_ERR_NULL, "no type rule");
    tn_custom_op nokernel = MUL;
    nokernel.cpu = NULL;
    CHECK(tn_custom(NULL, &nokernel, 2, (tn_var *[]){ a, a }) == NULL, "no kernel at all");
    CHECK_ERR(TN_ERR_INVALID, "neither a CPU function nor CUDA source");
    CHECK(tn_custom(NULL, &MUL, 2, (tn_var *[]){ a, NULL }) == NULL, "NULL input");
    CHECK_ERR(TN_ERR_NULL, "input 1 is NULL");

    /* unknown shapes at build time: the rule runs again at call time */
    tn_var *x = tn_matrix(g, "x", TN_F32), *y = tn_matrix(g, "y", TN_F32);
    tn_var *m = tn_custom(NULL, &MUL, 2, (tn_var *[]){ x, y });
    CHECK(m != NULL, "unknown shapes build: %s", tn_last_error());
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 1, .outputs = &m });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array *xv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 2, 3 }, 0, 1, 1);
    tn_array *yv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 2, 4 }, 0, 1, 2);
    tn_array *out = NULL;
    CHECK(f && tn_call(f, (tn_array *[]){ xv, yv }, &out) == TN_ERR_SHAPE, "call-time shape mismatch");
    CHECK_ERR(TN_ERR_SHAPE, "multiply_them");
    CHECK(strstr(tn_last_error(), "dim 1 (3 vs 4)") != NULL, "reason at call time: %s", tn_last_error());
    tn_array_free(out); tn_array_free(xv); tn_array_free(yv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* a CPU function that fails: the message names the op and the reason */
static tn_result fail_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)in; (void)out;
    snprintf(why, cap, "negative input");
    return TN_ERR_INVALID;
}
TEST(test_custom_cpu_error) {
    tn_custom_op bad = MUL;
    bad.name = "picky";
    bad.cpu = fail_cpu;
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *m = tn_custom(NULL, &bad, 2, (tn_var *[]){ x, x });
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &m });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 4 }, -1, 1, 3), *out = NULL;
    CHECK(f && tn_call(f, &xv, &out) == TN_ERR_INVALID, "call fails");
    CHECK_ERR(TN_ERR_INVALID, "op 'picky': CPU function failed: negative input");
    CHECK(out == NULL, "no output");
    char lb[64] = "";
    FILE *t = tmpfile();
    if (t) { tn_debugprint(m, t); rewind(t); if (!fgets(lb, sizeof lb, t)) lb[0] = 0; fclose(t); }
    CHECK(strstr(lb, "Custom{picky}") != NULL, "debugprint label: %s", lb);
    CHECK(tn_custom_of(m) && strcmp(tn_custom_of(m)->name, "picky") == 0 && tn_custom_of(x) == NULL, "tn_custom_of");
    tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* eye(n, m, k) with no inputs: sizes from the op's user data. */
typedef struct { int64_t n, m, k; } eye_params;
static tn_result eye_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    (void)in;
    const eye_params *p = (const eye_params *)op->user;
    if (p->n < 0 || p->m < 0) { snprintf(why, cap, "negative size %lldx%lld", (long long)p->n, (long long)p->m); return TN_ERR_INVALID; }
    out[0] = (tn_type){ TN_F64, 2, { p->n, p->m }, { p->n == 1, p->m == 1 } };
    return TN_OK;
}
static tn_result eye_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)in; (void)why; (void)cap;
    const eye_params *p = (const eye_params *)op->user;
    double *o = (double *)out[0]->data;
    for (int64_t i = 0; i < p->n; i++)
        for (int64_t j = 0; j < p->m; j++) o[i * p->m + j] = j - i == p->k ? 1.0 : 0.0;
    return TN_OK;
}
TEST(test_custom_eye) {
    eye_params prm = { 4, 6, 1 };
    tn_custom_op eye = { .name = "eye", .n_inputs = 0, .infer = eye_infer, .cpu = eye_cpu, .user = &prm };
    CHECK(tn_custom(NULL, &eye, 0, NULL) == NULL, "no graph");
    CHECK_ERR(TN_ERR_NULL, "pass its graph");
    tn_graph *g = tn_graph_new();
    tn_var *e = tn_custom(g, &eye, 0, NULL);
    CHECK(e && tn_var_dim(e, 0) == 4 && tn_var_dim(e, 1) == 6, "type");
    tn_var *x = tn_matrix(g, "x", TN_F64);
    tn_var *y = tn_mul(e, x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array *xv = tn_array_rand_normal(TN_F64, 2, (int64_t[]){ 4, 6 }, 0, 1, 9), *out = NULL;
    CHECK(f && tn_call(f, &xv, &out) == TN_OK, "call: %s", tn_last_error());
    for (int64_t i = 0; out && i < 4; i++)
        for (int64_t j = 0; j < 6; j++) {
            double want = j - i == 1 ? ref_get(xv, i, j) : 0.0;
            CHECK(ref_get(out, i, j) == want, "(%lld, %lld)", (long long)i, (long long)j);
        }
    prm.n = -2;
    CHECK(tn_custom(g, &eye, 0, NULL) == NULL, "negative size");
    CHECK_ERR(TN_ERR_INVALID, "op 'eye': type rule failed: negative size -2x6");
    tn_array_free(out); tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* two outputs: (a + b, a - b) */
static tn_result pm_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    tn_result r = mul_infer(op, in, out, why, cap);
    out[1] = out[0];
    return r;
}
static tn_result pm_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    const float *a = (const float *)in[0]->data, *b = (const float *)in[1]->data;
    float *s = (float *)out[0]->data, *d = (float *)out[1]->data;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) { s[i] = a[i] + b[i]; d[i] = a[i] - b[i]; }
    return TN_OK;
}
TEST(test_custom_two_outputs) {
    tn_custom_op pm = { .name = "plus_minus", .n_inputs = 2, .n_outputs = 2, .infer = pm_infer, .cpu = pm_cpu };
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_vector(g, "a", TN_F32), *b = tn_vector(g, "b", TN_F32), *o[2] = { NULL, NULL };
    CHECK(tn_custom(NULL, &pm, 2, (tn_var *[]){ a, b }) == NULL, "tn_custom refuses two outputs");
    CHECK_ERR(TN_ERR_INVALID, "use tn_custom_multi");
    CHECK(tn_custom_multi(NULL, &pm, 2, (tn_var *[]){ a, b }, o) == TN_OK, "multi: %s", tn_last_error());
    tn_var *y = tn_mul(o[0], o[1]);    /* a^2 - b^2 */
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ a, b }, .n_outputs = 1, .outputs = &y });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array *av = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 37 }, -2, 2, 5);
    tn_array *bv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 37 }, -2, 2, 6), *out = NULL;
    CHECK(f && tn_call(f, (tn_array *[]){ av, bv }, &out) == TN_OK, "call: %s", tn_last_error());
    for (int64_t i = 0; out && i < 37; i++) {
        double x = tn_array_get(av, &i), z = tn_array_get(bv, &i);
        double want = (double)((float)(x + z) * (float)(x - z));
        CHECK(fabs(tn_array_get(out, &i) - want) <= 1e-6 * fmax(1, fabs(want)), "element %lld", (long long)i);
    }
    tn_array_free(out); tn_array_free(av); tn_array_free(bv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* A custom op has no derivative: tn_grad through it says so by name, through
   the op table's row (the >>custom section's vjp); stopping the gradient
   at it works. */
TEST(test_custom_gradient) {
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_vector(g, "a", TN_F32), *b = tn_vector(g, "b", TN_F32);
    tn_var *m = tn_custom(NULL, &MUL, 2, (tn_var *[]){ a, b });
    m->name = "m";
    tn_var *gr = NULL;
    CHECK(tn_grad(tn_sum(tn_exp(m), NULL, 0, false), 1, &a, &gr, NULL) == TN_ERR_UNSUPPORTED && !gr, "no gradient rule");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "custom op 'multiply_them' (node 'm') has no gradient rule");
    CHECK(tn__op_def(TN_OP_CUSTOM)->vjp != NULL, "reached through the table");
    tn_var *c = tn_add(tn_sum(tn_stop_gradient(m), NULL, 0, false), tn_sum(tn_sqr(a), NULL, 0, false));
    CHECK(tn_grad(c, 1, &a, &gr, NULL) == TN_OK && gr, "stopped: %s", tn_last_error());
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_custom_in_graph);
    TH_RUN(test_custom_errors);
    TH_RUN(test_custom_cpu_error);
    TH_RUN(test_custom_eye);
    TH_RUN(test_custom_two_outputs);
    TH_RUN(test_custom_gradient);
    TH_END();
}
