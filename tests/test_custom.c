/* Custom ops (the >>custom section): a user type rule and CPU function used inside
   a graph, compared with a float64 reference on random inputs (contiguous,
   transposed and sliced views); errors from the callbacks name the op; ops
   with no inputs (eye), with value inputs (the seed's GpuEye(n, m, k): the
   shape from n and m at each call) and with two outputs; gradients (tn_verify_grad and
   analytic values) and R-ops (finite differences) through the ops' grad and
   rop, one and two outputs. */
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
    /* the description's other fields, each refused with its value named */
    tn_custom_op half = MUL;
    half.cuda_source = "extern \"C\" __global__ void k() {}";
    CHECK(tn_custom(NULL, &half, 2, (tn_var *[]){ a, a }) == NULL, "source without a kernel name");
    CHECK_ERR(TN_ERR_INVALID, "cuda_source and cuda_kernel go together");
    tn_custom_op badout = MUL;
    badout.n_outputs = -2;
    CHECK(tn_custom(NULL, &badout, 2, (tn_var *[]){ a, a }) == NULL, "negative n_outputs");
    CHECK_ERR(TN_ERR_INVALID, "n_outputs is -2");
    double prm[TN_CUSTOM_MAX_PARAMS + 1] = { 1.5 };
    tn_custom_op badp = MUL;
    badp.n_params = 1;                      /* params NULL */
    CHECK(tn_custom(NULL, &badp, 2, (tn_var *[]){ a, a }) == NULL, "n_params without params");
    CHECK_ERR(TN_ERR_INVALID, "n_params is 1 with params NULL");
    badp.params = prm;
    badp.n_params = TN_CUSTOM_MAX_PARAMS + 1;
    CHECK(tn_custom(NULL, &badp, 2, (tn_var *[]){ a, a }) == NULL, "too many params");
    char want[96];
    snprintf(want, sizeof want, "n_params is %d with params given (0 to %d values)", TN_CUSTOM_MAX_PARAMS + 1, TN_CUSTOM_MAX_PARAMS);
    CHECK_ERR(TN_ERR_INVALID, want);
    badp.n_params = -1;
    CHECK(tn_custom(NULL, &badp, 2, (tn_var *[]){ a, a }) == NULL, "negative n_params");
    CHECK_ERR(TN_ERR_INVALID, "n_params is -1");
    badp.n_params = TN_CUSTOM_MAX_PARAMS;   /* the most is fine */
    tn_var *ok = tn_custom(NULL, &badp, 2, (tn_var *[]){ a, a });
    CHECK(ok != NULL, "%d params: %s", TN_CUSTOM_MAX_PARAMS, tn_last_error());
    tn_custom_op abi = MUL;
    abi.cuda_abi = 7;
    CHECK(tn_custom(NULL, &abi, 2, (tn_var *[]){ a, a }) == NULL, "unknown cuda_abi");
    CHECK_ERR(TN_ERR_INVALID, "cuda_abi is 7");
    abi.cuda_abi = TN_CUSTOM_ABI_STRIDED;
    abi.n_inputs = -1;                      /* any count: one past the strided kernel's operands */
    tn_var *many[TN_CUSTOM_MAX_STRIDED_OPERANDS];
    for (int i = 0; i < TN_CUSTOM_MAX_STRIDED_OPERANDS; i++) many[i] = a;
    CHECK(tn_custom(NULL, &abi, TN_CUSTOM_MAX_STRIDED_OPERANDS, many) == NULL, "too many strided operands");
    snprintf(want, sizeof want, "%d operands; a TN_CUSTOM_ABI_STRIDED kernel takes at most %d", TN_CUSTOM_MAX_STRIDED_OPERANDS + 1,
             TN_CUSTOM_MAX_STRIDED_OPERANDS);
    CHECK_ERR(TN_ERR_INVALID, want);

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

/* The seed's GpuEye(n, m, k): n and m are value inputs (the type rule sees
   their values), k an ordinary input the CPU function reads. */
static tn_result eyev_infer(const tn_custom_op *op, const tn_type *in, const tn_array *const *val, tn_type *out, char *why, size_t cap) {
    (void)op; (void)in;
    int64_t s[2];
    for (int d = 0; d < 2; d++) {
        s[d] = val[d] ? (int64_t)tn_array_get(val[d], NULL) : -1;
        if (val[d] && s[d] < 0) { snprintf(why, cap, "%s = %lld is negative", d ? "m" : "n", (long long)s[d]); return TN_ERR_SHAPE; }
    }
    out[0] = (tn_type){ TN_F32, 2, { s[0], s[1] }, { s[0] == 1, s[1] == 1 } };
    return TN_OK;
}
static tn_result eyev_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    int64_t n = out[0]->shape[0], m = out[0]->shape[1], k = (int64_t)tn_array_get(in[2], NULL);
    float *o = (float *)out[0]->data;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) o[i * m + j] = j - i == k ? 1.0f : 0.0f;
    return TN_OK;
}
TEST(test_custom_value_inputs) {
    tn_custom_op eye = { .name = "GpuEye", .n_inputs = 3, .cpu = eyev_cpu, .value_inputs = 3, .infer_values = eyev_infer };
    tn_graph *g = tn_graph_new();
    tn_var *n = tn_scalar(g, "n", TN_I64), *m = tn_scalar(g, "m", TN_I64), *k = tn_scalar(g, "k", TN_I64);
    tn_var *e = tn_custom(NULL, &eye, 3, (tn_var *[]){ n, m, k });
    CHECK(e && tn_var_dim(e, 0) == -1 && tn_var_dim(e, 1) == -1, "(?, ?) at build time: %s", tn_last_error());
    tn_func *f = e ? tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = (tn_var *[]){ n, m, k }, .n_outputs = 1, .outputs = &e }) : NULL;
    CHECK(f, "compile: %s", tn_last_error());
    int64_t cs[][3] = { {3, 5, 1}, {4, 2, -1}, {0, 2, 0}, {2, 2, 9}, {3, 5, -3} };
    for (int c = 0; f && c < 5; c++) {
        tn_array *in[3], *out = NULL;
        for (int j = 0; j < 3; j++) in[j] = tn_array_scalar(TN_I64, (double)cs[c][j]);
        CHECK(tn_call(f, in, &out) == TN_OK, "eye(%lld, %lld, %lld): %s", (long long)cs[c][0], (long long)cs[c][1], (long long)cs[c][2], tn_last_error());
        CHECK(out && out->shape[0] == cs[c][0] && out->shape[1] == cs[c][1], "shape of eye(%lld, %lld)", (long long)cs[c][0], (long long)cs[c][1]);
        int bad = 0;
        for (int64_t i = 0; out && out->shape[0] == cs[c][0] && out->shape[1] == cs[c][1] && i < cs[c][0]; i++)
            for (int64_t j = 0; j < cs[c][1]; j++) bad += tn_array_get(out, (int64_t[]){ i, j }) != (j - i == cs[c][2] ? 1.0 : 0.0);
        CHECK(bad == 0, "eye(%lld, %lld, %lld): %d elements differ from j - i == k", (long long)cs[c][0], (long long)cs[c][1], (long long)cs[c][2], bad);
        tn_array_free(out);
        for (int j = 0; j < 3; j++) tn_array_free(in[j]);
    }
    /* a failing rule at call time names the op and the value */
    tn_array *neg[3] = { tn_array_scalar(TN_I64, -4), tn_array_scalar(TN_I64, 2), tn_array_scalar(TN_I64, 0) }, *out = NULL;
    CHECK(f && tn_call(f, neg, &out) == TN_ERR_SHAPE && !out, "n = -4 at call time");
    CHECK_ERR(TN_ERR_SHAPE, "op 'GpuEye': type rule failed: n = -4 is negative");
    for (int j = 0; j < 3; j++) tn_array_free(neg[j]);
    tn_function_free(f);
    /* constants: the shape is known at build time */
    tn_array *c3 = tn_array_scalar(TN_I64, 3);
    tn_var *c = tn_constant(g, c3), *ec = tn_custom(NULL, &eye, 3, (tn_var *[]){ c, c, k });
    CHECK(ec && tn_var_dim(ec, 0) == 3 && tn_var_dim(ec, 1) == 3, "constant sizes: (3, 3) at build time: %s", tn_last_error());
    /* errors: which input, why */
    tn_var *v = tn_vector(g, "v", TN_I64);
    CHECK(!tn_custom(NULL, &eye, 3, (tn_var *[]){ v, m, k }), "a vector value input");
    CHECK_ERR(TN_ERR_SHAPE, "tn_custom: op 'GpuEye': value input 0 ('v') must be 0-d, got TensorType(int64, (?,))");
    CHECK(!tn_custom(NULL, &eye, 3, (tn_var *[]){ n, tn_add(m, m), k }), "a computed value input");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "tn_custom: op 'GpuEye': value input 1 ('') is computed in the graph (by add)");
    CHECK(tn_custom(NULL, &eye, 3, (tn_var *[]){ n, m, tn_add(k, k) }), "a computed ordinary input is fine: %s", tn_last_error());
    tn_custom_op bad = eye;
    bad.infer_values = NULL;
    CHECK(!tn_custom(NULL, &bad, 3, (tn_var *[]){ n, m, k }), "value inputs without infer_values");
    CHECK_ERR(TN_ERR_NULL, "tn_custom: op 'GpuEye' has value inputs but no type rule for them (infer_values is NULL)");
    bad = eye;
    bad.value_inputs = 1u << 3;
    CHECK(!tn_custom(NULL, &bad, 3, (tn_var *[]){ n, m, k }), "a value input past the inputs");
    CHECK_ERR(TN_ERR_INVALID, "tn_custom: op 'GpuEye': value_inputs 0x8 names inputs past its 3");
    tn_array_free(c3);
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

/* A custom op without grad: tn_grad through it says so by name, through
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


/* ---- gradients and R-ops of custom ops ---------------------------------- */

/* double_op(x) = 2x in float32 or float64 (the seed's PyCUDADoubleOp), with
   grad 2 gout and R-op 2 eval. */
static tn_result same_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    for (int i = 0; i < op->n_inputs; i++)
        if (in[i].dtype != TN_F32 && in[i].dtype != TN_F64) { snprintf(why, cap, "input %d must be float32 or float64", i); return TN_ERR_DTYPE; }
    for (int k = 0; k < (op->n_outputs > 0 ? op->n_outputs : 1); k++) out[k] = in[0];
    return TN_OK;
}
static double el(const tn_array *a, int64_t i) {
    return a->dtype == TN_F32 ? (double)((const float *)a->data)[i] : ((const double *)a->data)[i];
}
static void set_el(tn_array *a, int64_t i, double v) {
    if (a->dtype == TN_F32) ((float *)a->data)[i] = (float)v;
    else ((double *)a->data)[i] = v;
}
static tn_result double_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) set_el(out[0], i, 2 * el(in[0], i));
    return TN_OK;
}
static tn_result double_grad(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *gout,
                             const bool *need, tn_var **gin, char *why, size_t cap) {
    (void)op; (void)in; (void)out; (void)why; (void)cap;
    if (need[0]) gin[0] = tn_mul(gout[0], tn_lit(gout[0], 2.0));
    return TN_OK;
}
static tn_result double_rop(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *ev,
                            tn_var **rout, char *why, size_t cap) {
    (void)op; (void)in; (void)out; (void)why; (void)cap;
    rout[0] = tn_mul(ev[0], tn_lit(ev[0], 2.0));
    return TN_OK;
}
static const tn_custom_op DOUBLE = { .name = "PyCUDADoubleOp", .n_inputs = 1, .infer = same_infer, .cpu = double_cpu,
                                     .grad = double_grad, .rop = double_rop };

/* xy(x, y) = x * y: grad (gout y, gout x), R-op ex y + x ey. */
static tn_result xy_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) set_el(out[0], i, el(in[0], i) * el(in[1], i));
    return TN_OK;
}
static tn_result xy_grad(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *gout,
                         const bool *need, tn_var **gin, char *why, size_t cap) {
    (void)op; (void)out; (void)why; (void)cap;
    if (need[0]) gin[0] = tn_mul(gout[0], in[1]);
    if (need[1]) gin[1] = tn_mul(gout[0], in[0]);
    return TN_OK;
}
static tn_result xy_rop(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *ev,
                        tn_var **rout, char *why, size_t cap) {
    (void)op; (void)out; (void)why; (void)cap;
    rout[0] = tn_add(tn_mul(ev[0], in[1]), tn_mul(in[0], ev[1]));
    return TN_OK;
}
static const tn_custom_op XY = { .name = "xy", .n_inputs = 2, .infer = same_infer, .cpu = xy_cpu, .grad = xy_grad, .rop = xy_rop };

/* sd(x, y) = (x * y, x + y): two outputs, each with its gradient. */
static tn_result sd_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) {
        set_el(out[0], i, el(in[0], i) * el(in[1], i));
        set_el(out[1], i, el(in[0], i) + el(in[1], i));
    }
    return TN_OK;
}
static tn_result sd_grad(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *gout,
                         const bool *need, tn_var **gin, char *why, size_t cap) {
    (void)op; (void)out; (void)why; (void)cap;
    if (need[0]) gin[0] = tn_add(tn_mul(gout[0], in[1]), gout[1]);
    if (need[1]) gin[1] = tn_add(tn_mul(gout[0], in[0]), gout[1]);
    return TN_OK;
}
static tn_result sd_rop(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *ev,
                        tn_var **rout, char *why, size_t cap) {
    (void)op; (void)out; (void)why; (void)cap;
    rout[0] = tn_add(tn_mul(ev[0], in[1]), tn_mul(in[0], ev[1]));
    rout[1] = tn_add(ev[0], ev[1]);
    return TN_OK;
}
static const tn_custom_op SD = { .name = "prod_sum", .n_inputs = 2, .n_outputs = 2, .infer = same_infer, .cpu = sd_cpu,
                                 .grad = sd_grad, .rop = sd_rop };

/* cost = sum(sin(op(x, y))) for verify_grad; kind 2 and 3 use outputs of SD. */
static tn_var *custom_cost(tn_graph *g, tn_var *const *in, void *user) {
    (void)g;
    int kind = *(const int *)user;
    tn_var *o[2] = { NULL, NULL };
    if (kind == 0) return tn_sin(tn_custom(NULL, &DOUBLE, 1, in));
    if (kind == 1) return tn_sin(tn_custom(NULL, &XY, 2, in));
    if (tn_custom_multi(NULL, &SD, 2, in, o) != TN_OK) return NULL;
    if (kind == 2) return tn_add(tn_sin(o[0]), tn_sqr(o[1]));
    return tn_exp(o[1]);          /* output 0 receives no gradient */
}

TEST(test_custom_verify_grad) {
    tn_array *x = tn_array_rand_uniform(TN_F64, 2, (int64_t[]){ 3, 4 }, -1, 1, 21);
    tn_array *y = tn_array_rand_uniform(TN_F64, 2, (int64_t[]){ 3, 4 }, -1, 1, 22);
    for (int kind = 0; kind < 4; kind++) {
        tn_verify_grad_report rep;
        tn_verify_grad_desc d = { .build = custom_cost, .user = &kind, .n_inputs = kind == 0 ? 1 : 2,
                                  .points = (tn_array *[]){ x, y }, .seed = 5 };
        tn_result r = tn_verify_grad(&d, &rep);
        CHECK(r == TN_OK, "kind %d: %s", kind, tn_last_error());
    }
    tn_array_free(x); tn_array_free(y);
}

/* The gradients against their analytic values, in float32. */
TEST(test_custom_grad_values) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32), *y = tn_vector(g, "y", TN_F32), *o[2];
    tn_var *d = tn_custom(NULL, &DOUBLE, 1, &x);
    tn_var *m = tn_custom(NULL, &XY, 2, (tn_var *[]){ x, y });
    CHECK(tn_custom_multi(NULL, &SD, 2, (tn_var *[]){ x, y }, o) == TN_OK, "multi: %s", tn_last_error());
    /* c = sum(d^2) + sum(m) + sum(o0 * o1) */
    tn_var *c = tn_add(tn_add(tn_sum(tn_sqr(d), NULL, 0, false), tn_sum(m, NULL, 0, false)), tn_sum(tn_mul(o[0], o[1]), NULL, 0, false));
    tn_var *gr[2] = { NULL, NULL };
    CHECK(tn_grad(c, 2, (tn_var *[]){ x, y }, gr, NULL) == TN_OK, "grad: %s", tn_last_error());
    tn_var *outs[3] = { c, gr[0], gr[1] };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 3, .outputs = outs });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 9 }, -2, 2, 31);
    tn_array *yv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 9 }, -2, 2, 32), *res[3] = { NULL, NULL, NULL };
    CHECK(f && tn_call(f, (tn_array *[]){ xv, yv }, res) == TN_OK, "call: %s", tn_last_error());
    for (int64_t i = 0; res[1] && i < 9; i++) {
        double a = el(xv, i), b = el(yv, i);
        /* d/dx: 8x + y + (y(x+y) + xy); d/dy: x + (x(x+y) + xy) */
        double gx = 8 * a + b + b * (a + b) + a * b, gy = a + a * (a + b) + a * b;
        CHECK(fabs(el(res[1], i) - gx) <= 1e-5 * fmax(1, fabs(gx)) && fabs(el(res[2], i) - gy) <= 1e-5 * fmax(1, fabs(gy)),
              "element %lld: (%g, %g) vs (%g, %g)", (long long)i, el(res[1], i), el(res[2], i), gx, gy);
    }
    for (int k = 0; k < 3; k++) tn_array_free(res[k]);
    tn_array_free(xv); tn_array_free(yv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* R-op against central finite differences of the compiled op: f(p + h v). */
static void rop_case(int kind, int out_k) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64), *y = tn_vector(g, "y", TN_F64), *vx = tn_vector(g, "vx", TN_F64), *vy = tn_vector(g, "vy", TN_F64);
    tn_var *o[2] = { NULL, NULL }, *f;
    if (kind == 0) f = tn_custom(NULL, &DOUBLE, 1, &x);
    else if (kind == 1) f = tn_custom(NULL, &XY, 2, (tn_var *[]){ x, y });
    else { tn_custom_multi(NULL, &SD, 2, (tn_var *[]){ x, y }, o); f = o[out_k]; }
    f = tn_tanh(f);
    int nw = kind == 0 ? 1 : 2;
    tn_var *r = tn_rop(f, nw, (tn_var *[]){ x, y }, (tn_var *[]){ vx, vy });
    CHECK(r != NULL, "kind %d output %d: rop: %s", kind, out_k, tn_last_error());
    tn_var *outs[2] = { f, r };
    tn_func *fn = tn_function(g, &(tn_func_desc){ .n_inputs = 4, .inputs = (tn_var *[]){ x, y, vx, vy }, .n_outputs = 2,
                                                  .outputs = outs, .on_unused_input = TN_UNUSED_IGNORE });
    CHECK(fn != NULL, "compile: %s", tn_last_error());
    const int64_t n = 7;
    tn_array *p[4];
    for (int i = 0; i < 4; i++) p[i] = tn_array_rand_uniform(TN_F64, 1, &n, -1, 1, 40 + (uint64_t)i);
    tn_array *base[2] = { NULL, NULL }, *hi[2] = { NULL, NULL }, *lo[2] = { NULL, NULL };
    CHECK(fn && tn_call(fn, p, base) == TN_OK, "call: %s", tn_last_error());
    const double h = 1e-6;
    tn_array *xp = tn_array_copy(p[0]), *yp = tn_array_copy(p[1]), *xm = tn_array_copy(p[0]), *ym = tn_array_copy(p[1]);
    for (int64_t i = 0; i < n; i++) {
        set_el(xp, i, el(p[0], i) + h * el(p[2], i)); set_el(yp, i, el(p[1], i) + h * el(p[3], i));
        set_el(xm, i, el(p[0], i) - h * el(p[2], i)); set_el(ym, i, el(p[1], i) - h * el(p[3], i));
    }
    CHECK(fn && tn_call(fn, (tn_array *[]){ xp, yp, p[2], p[3] }, hi) == TN_OK, "call +");
    CHECK(fn && tn_call(fn, (tn_array *[]){ xm, ym, p[2], p[3] }, lo) == TN_OK, "call -");
    double worst = 0;
    for (int64_t i = 0; base[1] && hi[0] && lo[0] && i < n; i++) {
        double fd = (el(hi[0], i) - el(lo[0], i)) / (2 * h);
        worst = fmax(worst, fabs(fd - el(base[1], i)));
    }
    CHECK(base[1] && worst < 1e-7, "kind %d output %d: R-op vs finite differences: %g", kind, out_k, worst);
    for (int k = 0; k < 2; k++) { tn_array_free(base[k]); tn_array_free(hi[k]); tn_array_free(lo[k]); }
    for (int i = 0; i < 4; i++) tn_array_free(p[i]);
    tn_array_free(xp); tn_array_free(yp); tn_array_free(xm); tn_array_free(ym);
    tn_function_free(fn);
    tn_graph_free(g);
}
TEST(test_custom_rop) {
    rop_case(0, 0);
    rop_case(1, 0);
    rop_case(2, 0);
    rop_case(2, 1);
}

static int bad_mode;
static tn_result bad_grad(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *gout,
                          const bool *need, tn_var **gin, char *why, size_t cap) {
    (void)op; (void)out; (void)need;
    if (bad_mode == 0) { snprintf(why, cap, "no gradient today"); return TN_ERR_INVALID; }
    gin[0] = tn_outer(gout[0], in[1]);
    return TN_OK;
}

/* Without grad or rop: the errors name the op, the node and the field. A
   failed pass leaves nothing behind for the next one: output 1's gradient,
   received before the failure, is not reused. */
TEST(test_custom_no_rule_and_failed_pass) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64), *y = tn_vector(g, "y", TN_F64), *o[2];
    tn_custom_op bare = XY;
    bare.name = "bare";
    bare.grad = NULL;
    bare.rop = NULL;
    tn_var *b = tn_custom(NULL, &bare, 2, (tn_var *[]){ x, y });
    b->name = "b";
    CHECK(tn_grad1(tn_sum(b, NULL, 0, false), x) == NULL, "no grad");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "custom op 'bare' (node 'b') has no gradient rule: give tn_custom_op.grad");
    CHECK(tn_rop(b, 1, &x, &y) == NULL, "no rop");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "custom op 'bare' (node 'b') has no R-op (forward-mode rule): give tn_custom_op.rop");

    CHECK(tn_custom_multi(NULL, &SD, 2, (tn_var *[]){ x, y }, o) == TN_OK, "multi: %s", tn_last_error());
    tn_var *mid = tn_custom(NULL, &bare, 2, (tn_var *[]){ x, y });     /* id between the node and p1 */
    tn_var *p1 = tn__proj(o[0]->in[0], 1);
    tn_var *c1 = tn_add(tn_sum(p1, NULL, 0, false), tn_sum(mid, NULL, 0, false));
    tn_var *gr = NULL;
    CHECK(tn_grad(c1, 1, &y, &gr, NULL) == TN_ERR_UNSUPPORTED, "the pass fails at 'bare'");
    tn_var *c2 = tn_sum(o[0], NULL, 0, false);     /* d/dy sum(x y) = x */
    CHECK(tn_grad(c2, 1, &y, &gr, NULL) == TN_OK, "second pass: %s", tn_last_error());
    tn_var *outs[1] = { gr };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 1, .outputs = outs });
    tn_array *xv = tn_array_rand_uniform(TN_F64, 1, (int64_t[]){ 5 }, -1, 1, 51);
    tn_array *yv = tn_array_rand_uniform(TN_F64, 1, (int64_t[]){ 5 }, -1, 1, 52), *res = NULL;
    CHECK(f && tn_call(f, (tn_array *[]){ xv, yv }, &res) == TN_OK, "call: %s", tn_last_error());
    for (int64_t i = 0; res && i < 5; i++) CHECK(fabs(el(res, i) - el(xv, i)) < 1e-12, "element %lld: %g vs %g", (long long)i, el(res, i), el(xv, i));
    tn_array_free(res); tn_array_free(xv); tn_array_free(yv);
    tn_function_free(f);

    /* a rule that fails, and one that gives a gradient of the wrong rank */
    tn_custom_op bad = XY;
    bad.name = "bad";
    bad.grad = bad_grad;
    tn_var *bv = tn_custom(NULL, &bad, 2, (tn_var *[]){ x, y });
    bad_mode = 0;
    CHECK(tn_grad1(tn_sum(bv, NULL, 0, false), x) == NULL, "failing rule");
    CHECK_ERR(TN_ERR_INVALID, "custom op 'bad': its grad failed: no gradient today");
    bad_mode = 1;
    CHECK(tn_grad1(tn_sum(bv, NULL, 0, false), x) == NULL, "wrong rank");
    CHECK_ERR(TN_ERR_SHAPE, "custom op 'bad': the gradient of input 0 has shape (?, ?), not of the rank of (?,)");
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_custom_in_graph);
    TH_RUN(test_custom_errors);
    TH_RUN(test_custom_cpu_error);
    TH_RUN(test_custom_eye);
    TH_RUN(test_custom_value_inputs);
    TH_RUN(test_custom_two_outputs);
    TH_RUN(test_custom_gradient);
    TH_RUN(test_custom_verify_grad);
    TH_RUN(test_custom_grad_values);
    TH_RUN(test_custom_rop);
    TH_RUN(test_custom_no_rule_and_failed_pass);
    TH_END();
}
