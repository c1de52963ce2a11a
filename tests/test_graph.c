/* Graph builder: leaves, type inference with unknown dims, names, shared
   variables, the arena, PROJ nodes and builder errors. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

static bool shape_is(const tn_var *v, int ndim, const int64_t *want) {
    if (tn_var_ndim(v) != ndim) return false;
    for (int d = 0; d < ndim; d++) if (tn_var_dim(v, d) != want[d]) return false;
    return true;
}

TEST(test_leaves) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32);
    CHECK(x && tn_var_dtype(x) == TN_F32 && shape_is(x, 2, (int64_t[]){ -1, -1 }), "matrix");
    CHECK(x && tn_var_name(x) && strcmp(tn_var_name(x), "x") == 0, "name");
    CHECK(tn_var_graph(x) == g, "graph");
    tn_var *r = tn_row(g, "r", TN_F64);
    CHECK(r && r->type.bcast[0] && !r->type.bcast[1] && tn_var_dim(r, 0) == 1 && tn_var_dim(r, 1) == -1, "row");
    tn_var *c = tn_col(g, "c", TN_I32);
    CHECK(c && !c->type.bcast[0] && c->type.bcast[1] && tn_var_dim(c, -1) == 1, "col");
    tn_var *s = tn_scalar(g, NULL, TN_DTYPE_NONE);
    CHECK(s && tn_var_dtype(s) == tn_get_config()->floatX && tn_var_ndim(s) == 0 && tn_var_name(s) == NULL, "floatX scalar");
    tn_var *t = tn_input(g, "t", TN_F32, 3, (int64_t[]){ 2, -1, 4 }, NULL);
    CHECK(t && shape_is(t, 3, (int64_t[]){ 2, -1, 4 }), "static dims");
    tn_var *t3 = tn_tensor3(g, "t3", TN_F16);
    CHECK(t3 && tn_var_ndim(t3) == 3 && tn_var_dtype(t3) == TN_F16, "tensor3");
    CHECK(tn__graph_nvars(g) == 6 && tn__graph_var(g, 0) == x && tn__graph_var(g, 5) == t3 && tn__graph_var(g, 6) == NULL, "vars in order");
    for (int i = 0; i < tn__graph_nvars(g); i++) CHECK(tn__graph_var(g, i)->id == i, "id %d", i);
    CHECK(tn_var_set_name(s, "renamed") == s && strcmp(tn_var_name(s), "renamed") == 0, "rename");
    tn_graph_free(g);
}

TEST(test_constants) {
    tn_graph *g = tn_graph_new();
    double data[3] = { 1.5, -2.25, 3.0 };
    tn_array *a = tn_array_from_data(TN_F64, 1, (int64_t[]){ 3 }, data);
    tn_var *k = tn_constant(g, a);
    tn_array_free(a);                    /* the graph holds its own copy */
    CHECK(k && k->value && tn_var_dtype(k) == TN_F64 && shape_is(k, 1, (int64_t[]){ 3 }), "constant type");
    for (int i = 0; i < 3; i++) CHECK(tn_array_get(k->value, (int64_t[]){ i }) == data[i], "value %d", i);
    char lb[256];
    tn__op_def(k->op)->label(k, lb, sizeof lb);
    CHECK(strstr(lb, "TensorConstant{") == lb, "label %s", lb);
    tn_var *two = tn_scalar_const(g, 2.0);
    CHECK(two && (two->flags & TN_VAR_WEAK) && tn_var_ndim(two) == 0 && tn_var_dtype(two) == TN_F64, "weak scalar");
    tn__op_def(two->op)->label(two, lb, sizeof lb);
    CHECK(strcmp(lb, "TensorConstant{2.0}") == 0, "label %s", lb);
    tn_array *ones = tn_array_ones(TN_F32, 1, (int64_t[]){ 3 });
    tn_var *o = tn_constant(g, ones);
    tn_array_free(ones);
    tn__op_def(o->op)->label(o, lb, sizeof lb);
    CHECK(strcmp(lb, "TensorConstant{(3,) of 1.0}") == 0, "label %s", lb);
    tn_var *third = tn_scalar_const(g, 0.1);
    tn__op_def(third->op)->label(third, lb, sizeof lb);
    CHECK(strcmp(lb, "TensorConstant{0.1}") == 0, "label %s", lb);
    /* int64 values print exactly (through a double, INT64_MAX was 2^63, out of long long's range) */
    int64_t big[2] = { INT64_MAX, INT64_MAX };
    tn_array *bv = tn_array_from_data(TN_I64, 1, (int64_t[]){ 2 }, big), *bs = tn_array_from_data(TN_I64, 0, NULL, big);
    tn_var *kb = tn_constant(g, bv), *ks = tn_constant(g, bs);
    tn__op_def(kb->op)->label(kb, lb, sizeof lb);
    CHECK(strcmp(lb, "TensorConstant{(2,) of 9223372036854775807}") == 0, "label %s", lb);
    tn__op_def(ks->op)->label(ks, lb, sizeof lb);
    CHECK(strcmp(lb, "TensorConstant{9223372036854775807}") == 0, "label %s", lb);
    tn_array_free(bv); tn_array_free(bs);
    tn_graph_free(g);
}

TEST(test_shared_get_set) {
    tn_graph *g = tn_graph_new();
    tn_array *v = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 2, 3 }, -1, 1, 7);
    tn_var *w = tn_shared(g, "w", v);
    CHECK(w && tn_var_dtype(w) == TN_F32 && shape_is(w, 2, (int64_t[]){ -1, -1 }), "shared static type: dims free");
    const tn_array *cur = tn_shared_get(w);
    CHECK(cur && cur != v && cur->shape[0] == 2 && cur->shape[1] == 3, "copied in");
    int64_t i01[2] = { 0, 1 };
    double orig = tn_array_get(v, i01);
    tn_array_set(v, i01, 42.0);          /* the user's array is not the shared storage */
    CHECK(tn_array_get(cur, i01) == orig, "independent of the user's array");
    tn_array *got = tn_shared_get_value(w);
    CHECK(got && got != cur && tn_array_get(got, i01) == orig, "get_value copies");
    tn_array_set(got, i01, -5.0);
    CHECK(tn_array_get(tn_shared_get(w), i01) == orig, "get_value is a copy");
    /* set: a different size is fine, the pointer from tn_shared_get stays valid */
    tn_array *nv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 4, 5 }, -1, 1, 8);
    CHECK(tn_shared_set_value(w, nv) == TN_OK, "set: %s", tn_last_error());
    CHECK(cur->shape[0] == 4 && cur->shape[1] == 5, "same struct, new value");
    CHECK(tn_array_get(cur, (int64_t[]){ 3, 4 }) == tn_array_get(nv, (int64_t[]){ 3, 4 }), "value");
    tn_array_set(nv, (int64_t[]){ 3, 4 }, 99.0);
    CHECK(tn_array_get(cur, (int64_t[]){ 3, 4 }) != 99.0, "set copies");
    /* dtype and ndim must stay */
    tn_array *bad = tn_array_zeros(TN_F64, 2, (int64_t[]){ 4, 5 });
    CHECK(tn_shared_set_value(w, bad) == TN_ERR_DTYPE, "dtype change");
    CHECK_ERR(TN_ERR_DTYPE, "'w'");
    CHECK(strstr(tn_last_error(), "float32") && strstr(tn_last_error(), "float64"), "both dtypes: %s", tn_last_error());
    tn_array *bad2 = tn_array_zeros(TN_F32, 1, (int64_t[]){ 4 });
    CHECK(tn_shared_set_value(w, bad2) != TN_OK, "ndim change");
    CHECK_ERR(TN_ERR_SHAPE, "ndim");
    CHECK(cur->shape[0] == 4 && cur->ndim == 2, "unchanged after errors");
    CHECK(tn_shared_set_value(w, NULL) == TN_ERR_NULL, "NULL value");
    tn_var *x = tn_vector(g, "x", TN_F32);
    CHECK(tn_shared_get(x) == NULL, "not shared");
    CHECK_ERR(TN_ERR_INVALID, "'x' is not a shared variable");
    CHECK(tn_shared_set_value(x, nv) == TN_ERR_INVALID, "set on input");
    tn_array_free(v); tn_array_free(got); tn_array_free(nv); tn_array_free(bad); tn_array_free(bad2);
    tn_graph_free(g);
}

TEST(test_type_inference) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F32, 2, (int64_t[]){ -1, 3 }, NULL);
    tn_var *y = tn_row(g, "y", TN_F32);
    tn_var *z = tn_add(x, y);
    CHECK(z && tn_var_dtype(z) == TN_F32 && shape_is(z, 2, (int64_t[]){ -1, 3 }), "(?,3)+(1,?) -> (?,3)");
    tn_var *e = tn_exp(tn_mul(z, tn_scalar_const(g, 2.0)));
    CHECK(e && tn_var_dtype(e) == TN_F32, "weak scalar keeps float32: %s", e ? tn_dtype_name(tn_var_dtype(e)) : tn_last_error());
    tn_var *i = tn_vector(g, "i", TN_I32);
    tn_var *fi = tn_add(i, tn_vector(g, "f", TN_F32));
    CHECK(fi && tn_var_dtype(fi) == TN_F32, "int32 + float32 -> float32");
    tn_var *d = tn_add(tn_vector(g, "a", TN_F32), tn_vector(g, "b", TN_F64));
    CHECK(d && tn_var_dtype(d) == TN_F64, "float32 + float64 -> float64");
    /* a node records its inputs and op */
    CHECK(z->n_in == 2 && z->in[0] == x && z->in[1] == y && z->op == TN_OP_ADD && z->n_out == 1 && z->graph == g, "node");
    tn_graph_free(g);
}

TEST(test_build_errors) {
    tn_graph *g = tn_graph_new(), *h = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F32, 1, (int64_t[]){ 3 }, NULL);
    tn_var *y = tn_input(g, "y", TN_F32, 1, (int64_t[]){ 4 }, NULL);
    int before = tn__graph_nvars(g);
    CHECK(tn_add(x, y) == NULL, "(3,)+(4,)");
    CHECK_ERR(TN_ERR_SHAPE, "tn_add");
    CHECK(strstr(tn_last_error(), "(3,)") && strstr(tn_last_error(), "(4,)"), "shapes named: %s", tn_last_error());
    CHECK(tn__graph_nvars(g) == before, "a failed node leaves nothing behind");
    tn_var *other = tn_vector(h, "o", TN_F32);
    CHECK(tn_add(x, other) == NULL, "graphs");
    CHECK_ERR(TN_ERR_GRAPH, "tn_add");
    CHECK(tn__node(g, TN_OP_ADD, 2, (tn_var *[]){ x, other }, NULL, NULL, "tn_add") == NULL, "graphs (tn__node)");
    CHECK_ERR(TN_ERR_GRAPH, "tn_add: input 1 ('o') belongs to another graph");
    CHECK(tn_exp(NULL) == NULL, "NULL propagates");
    CHECK(tn_last_result() == TN_ERR_NULL, "NULL: %s", tn_last_error());
    CHECK(tn_add(x, tn_exp(NULL)) == NULL, "chain");
    CHECK(tn_input(g, "bad", TN_F32, TN_MAX_DIMS + 1, NULL, NULL) == NULL, "ndim");
    CHECK_ERR(TN_ERR_INVALID, "'bad'");
    CHECK(tn_input(g, "neg", TN_F32, 1, (int64_t[]){ -3 }, NULL) == NULL, "negative dim");
    CHECK_ERR(TN_ERR_SHAPE, "'neg'");
    CHECK(tn_input(g, "bc", TN_F32, 1, (int64_t[]){ 3 }, (const bool[]){ true }) == NULL, "broadcastable dim of size 3");
    CHECK_ERR(TN_ERR_SHAPE, "broadcastable");
    CHECK(tn_input(NULL, "x", TN_F32, 1, NULL, NULL) == NULL, "NULL graph");
    CHECK_ERR(TN_ERR_NULL, "tn_input");
    CHECK(tn_constant(g, NULL) == NULL, "NULL constant");
    CHECK_ERR(TN_ERR_NULL, "tn_constant");
    CHECK(tn_shared(g, "s", NULL) == NULL, "NULL shared");
    CHECK_ERR(TN_ERR_NULL, "'s'");
    CHECK(tn__node(g, TN_OP_ADD, 2, (tn_var *[]){ x, NULL }, NULL, NULL, "tn_add") == NULL, "NULL input");
    CHECK_ERR(TN_ERR_NULL, "tn_add: input 1 is NULL");
    CHECK(tn__node(g, TN_OP_EXP, 2, (tn_var *[]){ x, x }, NULL, NULL, "tn_exp") == NULL, "arity");
    CHECK_ERR(TN_ERR_INVALID, "tn_exp");
    tn_graph_free(g);
    tn_graph_free(h);
}

/* A two-output node read through PROJ: a composite whose program computes
   exp(a) and a*b. */
TEST(test_proj) {
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_vector(g, "a", TN_F32), *b = tn_vector(g, "b", TN_F32);
    tn_ew_program *prog = (tn_ew_program *)tn__graph_alloc(g, sizeof *prog);
    tn_dtype *idt = (tn_dtype *)tn__graph_alloc(g, 2 * sizeof *idt);
    tn_ew_instr *ins = (tn_ew_instr *)tn__graph_alloc(g, 2 * sizeof *ins);
    int32_t *oreg = (int32_t *)tn__graph_alloc(g, 2 * sizeof *oreg);
    tn_dtype *odt = (tn_dtype *)tn__graph_alloc(g, 2 * sizeof *odt);
    idt[0] = idt[1] = TN_F32;
    ins[0] = (tn_ew_instr){ .op = TN_OP_EXP, .dtype = TN_F32, .in_dtype = TN_F32, .a = 0, .b = -1, .c = -1 };
    ins[1] = (tn_ew_instr){ .op = TN_OP_MUL, .dtype = TN_F32, .in_dtype = TN_F32, .a = 0, .b = 1, .c = -1 };
    oreg[0] = 2; oreg[1] = 3;
    odt[0] = odt[1] = TN_F32;
    *prog = (tn_ew_program){ 2, idt, 2, ins, 2, oreg, odt, NULL, NULL };
    tn_var *node = tn__node_multi(g, TN_OP_COMPOSITE, 2, (tn_var *[]){ a, b }, NULL, prog, 2, "test");
    CHECK(node && node->n_out == 2, "multi-output node: %s", tn_last_error());
    tn_var *p0 = tn__proj(node, 0), *p1 = tn__proj(node, 1);
    CHECK(p0 && p1 && p1->op == TN_OP_PROJ && tn__p_proj_index(&p1->p) == 1 && tn_var_dtype(p1) == TN_F32 && tn_var_ndim(p1) == 1, "proj");
    CHECK(tn__proj(node, 2) == NULL, "out of range");
    CHECK_ERR(TN_ERR_INVALID, "output 2");
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ a, b }, .n_outputs = 2, .outputs = (tn_var *[]){ p1, p0 } });
    CHECK(f, "compile: %s", tn_last_error());
    tn_array *av = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 5 }, -1, 1, 1);
    tn_array *bv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 5 }, -1, 1, 2);
    tn_array *out[2] = { NULL, NULL };
    CHECK(f && tn_call(f, (tn_array *[]){ av, bv }, out) == TN_OK, "call: %s", tn_last_error());
    for (int i = 0; out[0] && out[1] && i < 5; i++) {
        double x = tn_array_get(av, (int64_t[]){ i }), y = tn_array_get(bv, (int64_t[]){ i });
        CHECK(th_close(tn_array_get(out[0], (int64_t[]){ i }), x * y, 1e-6, 1e-7), "a*b at %d", i);
        CHECK(th_close(tn_array_get(out[1], (int64_t[]){ i }), exp(x), 1e-6, 1e-7), "exp(a) at %d", i);
    }
    tn_array_free(out[0]); tn_array_free(out[1]); tn_array_free(av); tn_array_free(bv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Many nodes and deep chains: the arena grows, nothing recurses. */
TEST(test_big_graph) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *y = x;
    enum { N = 100000 };
    for (int i = 0; i < N && y; i++) y = tn_add(y, tn_lit(x, 1.0));
    CHECK(y && tn__graph_nvars(g) == 1 + 2 * N, "built %d", tn__graph_nvars(g));
    char *big = (char *)tn__graph_alloc(g, 1 << 20);    /* larger than a chunk */
    CHECK(big && big[0] == 0 && big[(1 << 20) - 1] == 0, "big alloc zeroed");
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f, "compile deep graph: %s", tn_last_error());
    tn_array *xv = tn_array_rand_uniform(TN_F64, 1, (int64_t[]){ 3 }, -1, 1, 4), *out = NULL;
    CHECK(f && tn_call(f, &xv, &out) == TN_OK, "call: %s", tn_last_error());
    for (int i = 0; out && i < 3; i++)
        CHECK(th_close(tn_array_get(out, (int64_t[]){ i }), tn_array_get(xv, (int64_t[]){ i }) + N, 1e-12, 1e-9), "value %d", i);
    FILE *devnull = fopen("/dev/null", "w");
    CHECK(tn_debugprint(y, devnull) == TN_OK, "debugprint deep");
    fclose(devnull);
    tn_array_free(out); tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_leaves);
    TH_RUN(test_constants);
    TH_RUN(test_shared_get_set);
    TH_RUN(test_type_inference);
    TH_RUN(test_build_errors);
    TH_RUN(test_proj);
    TH_RUN(test_big_graph);
    tn_shutdown();
    TH_END();
}
