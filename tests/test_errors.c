/* Every error a user can hit building, compiling and calling a function:
   the result code AND the words the message must contain. */
#define _POSIX_C_SOURCE 200809L     /* setenv */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

TEST(test_function_desc_errors) {
    tn_graph *g = tn_graph_new(), *h = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32), *y = tn_vector(g, "y", TN_F32);
    tn_var *z = tn_add(x, y);
    CHECK(tn_function(g, NULL) == NULL, "NULL desc");
    CHECK_ERR(TN_ERR_NULL, "tn_function: desc is NULL");
    CHECK(tn_function(NULL, &(tn_func_desc){ .n_outputs = 1, .outputs = &z }) == NULL, "NULL graph");
    CHECK_ERR(TN_ERR_NULL, "graph is NULL");
    CHECK(tn_function(g, &(tn_func_desc){ .n_outputs = 1 }) == NULL, "NULL outputs");
    CHECK_ERR(TN_ERR_NULL, "outputs is NULL");
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 2, .n_outputs = 1, .outputs = &z }) == NULL, "NULL inputs");
    CHECK_ERR(TN_ERR_NULL, "inputs is NULL");
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = -1, .n_outputs = 1, .outputs = &z }) == NULL, "negative count");
    CHECK_ERR(TN_ERR_NUM_INPUTS, "n_inputs -1");
    CHECK(tn_function(g, &(tn_func_desc){ 0 }) == NULL, "nothing to compute");
    CHECK_ERR(TN_ERR_INVALID, "no outputs");
    CHECK(tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &z, .mode = (tn_mode)7 }) == NULL, "mode 7");
    CHECK_ERR(TN_ERR_INVALID, "tn_function: mode 7 is not a tn_mode");
    tn_var *nul = NULL;
    CHECK(tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &nul }) == NULL, "NULL output var");
    CHECK_ERR(TN_ERR_NULL, "output 0 is NULL");
    /* unreachable input: the message names the output and the input */
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &z }) == NULL, "missing input");
    CHECK_ERR(TN_ERR_INVALID, "tn_function: output 0 depends on input 'y', which is not in inputs");
    /* inputs must be symbolic inputs of this graph, listed once */
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = (tn_var *[]){ x, y, x }, .n_outputs = 1, .outputs = &z }) == NULL, "dup");
    CHECK_ERR(TN_ERR_INVALID, "'x' is listed twice");
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, z }, .n_outputs = 1, .outputs = &z }) == NULL, "non-input");
    CHECK_ERR(TN_ERR_INVALID, "input 1");
    tn_var *hx = tn_vector(h, "hx", TN_F32);
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &hx, .n_outputs = 1, .outputs = &hx }) == NULL, "other graph");
    CHECK_ERR(TN_ERR_GRAPH, "input 0 ('hx') belongs to another graph");
    tn_graph_free(g);
    tn_graph_free(h);
}

TEST(test_update_errors) {
    tn_graph *g = tn_graph_new();
    tn_array *wv = tn_array_zeros(TN_F32, 1, (int64_t[]){ 3 });
    tn_var *w = tn_shared(g, "w", wv);
    tn_var *x = tn_vector(g, "x", TN_F32), *xd = tn_vector(g, "xd", TN_F64), *m = tn_matrix(g, "m", TN_F32);
    tn_var *upd_f64 = tn_add(w, xd);
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &xd, .n_updates = 1, .updates = &(tn_update){ w, upd_f64 } }) == NULL, "dtype");
    CHECK_ERR(TN_ERR_UPDATE, "'w'");
    CHECK(strstr(tn_last_error(), "float32") && strstr(tn_last_error(), "float64"), "both types named: %s", tn_last_error());
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &m, .n_updates = 1, .updates = &(tn_update){ w, m } }) == NULL, "ndim");
    CHECK_ERR(TN_ERR_UPDATE, "TensorType(float32, (?, ?))");
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_updates = 1, .updates = &(tn_update){ x, w } }) == NULL, "target");
    CHECK_ERR(TN_ERR_UPDATE, "'x' is not a shared variable");
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_updates = 2,
                                          .updates = (tn_update[]){ { w, x }, { w, tn_neg(x) } } }) == NULL, "twice");
    CHECK_ERR(TN_ERR_UPDATE, "'w' is updated twice");
    CHECK(tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &(tn_update){ w, NULL } }) == NULL, "NULL value");
    CHECK_ERR(TN_ERR_NULL, "update 0 ('w')");
    CHECK(tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &(tn_update){ w, tn_add(w, x) } }) == NULL, "update needs input");
    CHECK_ERR(TN_ERR_INVALID, "update 0 (of 'w') depends on input 'x'");
    tn_array_free(wv);
    tn_graph_free(g);
}

TEST(test_call_errors) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F32, 2, (int64_t[]){ -1, 3 }, NULL);
    tn_var *r = tn_row(g, "r", TN_F32);
    tn_var *y = tn_add(x, r);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, r }, .n_outputs = 1, .outputs = &y, .name = "step" });
    CHECK(f, "compile: %s", tn_last_error());
    tn_array *good = tn_array_ones(TN_F32, 2, (int64_t[]){ 2, 3 });
    tn_array *rv = tn_array_ones(TN_F32, 2, (int64_t[]){ 1, 3 });
    tn_array *o = NULL;
    CHECK(tn_call(f, NULL, &o) == TN_ERR_NUM_INPUTS, "no inputs");
    CHECK_ERR(TN_ERR_NUM_INPUTS, "step: expects 2 inputs");
    CHECK(tn_call_n(f, 1, (tn_array *[]){ good }, 1, &o) == TN_ERR_NUM_INPUTS, "one input of two");
    CHECK_ERR(TN_ERR_NUM_INPUTS, "step: expects 2 inputs ('x', 'r') but got 1");
    CHECK(tn_call_n(f, 2, (tn_array *[]){ good, rv }, 2, (tn_array *[]){ NULL, NULL }) == TN_ERR_NUM_INPUTS, "outputs count");
    CHECK_ERR(TN_ERR_NUM_INPUTS, "returns 1 output");
    CHECK(tn_call(f, (tn_array *[]){ good, NULL }, &o) == TN_ERR_NULL, "NULL input");
    CHECK_ERR(TN_ERR_NULL, "step: input 1 ('r') is NULL");
    CHECK(tn_call(f, (tn_array *[]){ good, rv }, NULL) == TN_ERR_NULL, "NULL outputs");
    CHECK_ERR(TN_ERR_NULL, "outputs is NULL");
    CHECK(tn_call(NULL, NULL, NULL) == TN_ERR_NULL, "NULL function");
    CHECK_ERR(TN_ERR_NULL, "tn_call");
    tn_array *d64 = tn_array_ones(TN_F64, 2, (int64_t[]){ 2, 3 });
    CHECK(tn_call(f, (tn_array *[]){ d64, rv }, &o) == TN_ERR_DTYPE, "dtype");
    CHECK_ERR(TN_ERR_DTYPE, "input 0 ('x') expects TensorType(float32, (?, 3)) but got a float64 array");
    tn_array *v1 = tn_array_ones(TN_F32, 1, (int64_t[]){ 3 });
    CHECK(tn_call(f, (tn_array *[]){ v1, rv }, &o) == TN_ERR_SHAPE, "ndim");
    CHECK_ERR(TN_ERR_SHAPE, "of 1 dims (3,)");
    tn_array *w4 = tn_array_ones(TN_F32, 2, (int64_t[]){ 2, 4 });
    CHECK(tn_call(f, (tn_array *[]){ w4, rv }, &o) == TN_ERR_SHAPE, "static dim");
    CHECK_ERR(TN_ERR_SHAPE, "expects shape (?, 3) but got (2, 4)");
    tn_array *r2 = tn_array_ones(TN_F32, 2, (int64_t[]){ 2, 3 });
    CHECK(tn_call(f, (tn_array *[]){ good, r2 }, &o) == TN_ERR_SHAPE, "broadcastable dim");
    CHECK_ERR(TN_ERR_SHAPE, "input 1 ('r')");
    CHECK(strstr(tn_last_error(), "broadcastable"), "says why: %s", tn_last_error());
    CHECK(tn_call_n(f, 2, (tn_array *[]){ good, rv }, 1, &o) == TN_OK, "and a good call works: %s", tn_last_error());
    tn_array_free(o);
    tn_array_free(good); tn_array_free(rv); tn_array_free(d64); tn_array_free(v1); tn_array_free(w4); tn_array_free(r2);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Shapes unknown at build time that do not match at call time: the error
   names the op and both shapes, and no shared value changes. */
TEST(test_call_time_shape_mismatch_keeps_state) {
    tn_graph *g = tn_graph_new();
    tn_array *w0 = tn_array_rand_uniform(TN_F64, 1, (int64_t[]){ 4 }, -1, 1, 1);
    tn_var *w = tn_shared(g, "w", w0);
    tn_var *a = tn_vector(g, "a", TN_F64), *b = tn_vector(g, "b", TN_F64);
    tn_var *s = tn_mul(a, b);
    tn_var *neww = tn_add(w, tn_lit(w, 1.0));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ a, b }, .n_outputs = 1, .outputs = &s,
                                                 .n_updates = 1, .updates = &(tn_update){ w, neww }, .mode = TN_MODE_FAST_COMPILE });
    CHECK(f, "compile: %s", tn_last_error());
    tn_array *av = tn_array_ones(TN_F64, 1, (int64_t[]){ 3 }), *bv = tn_array_ones(TN_F64, 1, (int64_t[]){ 5 }), *o = NULL;
    CHECK(tn_call(f, (tn_array *[]){ av, bv }, &o) == TN_ERR_SHAPE, "(3,) * (5,)");
    CHECK_ERR(TN_ERR_SHAPE, "(3,)");
    CHECK(strstr(tn_last_error(), "(5,)") && strstr(tn_last_error(), "mul"), "names op and shapes: %s", tn_last_error());
    CHECK(o == NULL, "no output");
    for (int64_t i = 0; i < 4; i++) CHECK(tn_array_get(tn_shared_get(w), &i) == tn_array_get(w0, &i), "w unchanged at %lld", (long long)i);
    tn_array *bv3 = tn_array_ones(TN_F64, 1, (int64_t[]){ 3 });
    CHECK(tn_call(f, (tn_array *[]){ av, bv3 }, &o) == TN_OK, "recovers: %s", tn_last_error());
    int64_t i0 = 0;
    CHECK(tn_array_get(tn_shared_get(w), &i0) == tn_array_get(w0, &i0) + 1.0, "updated once");
    tn_array_free(o); tn_array_free(av); tn_array_free(bv); tn_array_free(bv3); tn_array_free(w0);
    tn_function_free(f);
    tn_graph_free(g);
}

TEST(test_build_time_errors) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F32, 2, (int64_t[]){ 2, 3 }, NULL);
    tn_var *y = tn_input(g, "y", TN_F32, 2, (int64_t[]){ 4, 3 }, NULL);
    CHECK(tn_add(x, y) == NULL, "(2,3)+(4,3)");
    CHECK_ERR(TN_ERR_SHAPE, "tn_add");
    CHECK(strstr(tn_last_error(), "(2, 3)") && strstr(tn_last_error(), "(4, 3)"), "both shapes: %s", tn_last_error());
    CHECK(tn_sum(x, (const int[]){ 2 }, 1, false) == NULL, "axis out of range");
    CHECK(tn_last_result() == TN_ERR_AXIS && strstr(tn_last_error(), "tn_sum") && strstr(tn_last_error(), "2"), "axis: %s", tn_last_error());
    CHECK(tn_reshape(x, 2, (int64_t[]){ 4, 2 }) == NULL, "reshape to another size");
    CHECK(tn_last_result() == TN_ERR_SHAPE || tn_last_result() == TN_ERR_UNSUPPORTED, "reshape: %s", tn_last_error());
    if (tn_last_result() == TN_ERR_SHAPE)
        CHECK(strstr(tn_last_error(), "tn_reshape") && strstr(tn_last_error(), "(4, 2)"), "reshape message: %s", tn_last_error());
    tn_graph_free(g);
}

TEST(test_stale_input) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_neg(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .borrow = true });
    tn_array *xv = tn_array_ones(TN_F32, 1, (int64_t[]){ 3 }), *o1 = NULL, *o2 = NULL;
    CHECK(f && tn_call(f, &xv, &o1) == TN_OK, "call");
    CHECK(tn_call(f, &xv, &o2) == TN_OK, "call 2");
    CHECK(tn_call(f, &o1, &o2) == TN_ERR_STALE, "a stale borrowed array as input");
    CHECK_ERR(TN_ERR_STALE, "input 0 ('x')");
    tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* A 0-d input flattens to one dim (outdim 1); any other outdim is refused by
   the shape rule (it used to write past a buffer for 2..9). */
TEST(test_flatten_0d) {
    tn_graph *g = tn_graph_new();
    tn_var *s = tn_scalar(g, "s", TN_F32);
    tn_var *f1 = tn_flatten(s, 1);
    CHECK(f1 && tn_var_ndim(f1) == 1 && f1->type.shape[0] == 1, "flatten(0-d, 1): %s", tn_last_error());
    for (int k = -1; k <= 9; k++) {
        if (k == 1) continue;
        CHECK(tn_flatten(s, k) == NULL, "flatten(0-d, %d) accepted", k);
        CHECK_ERR(TN_ERR_INVALID, "tn_flatten: Flatten: outdim");
        CHECK(strstr(tn_last_error(), "[1, 1]"), "the range: %s", tn_last_error());
    }
    tn_var *m = tn_matrix(g, "m", TN_F32);
    CHECK(tn_flatten(m, 3) == NULL, "flatten(2-d, 3)");
    CHECK_ERR(TN_ERR_INVALID, "[1, 2]");
    tn_graph_free(g);
}

/* Shapes whose strides would overflow 64 bits are refused (signed overflow
   was undefined behaviour in the reshape check and the strides). */
TEST(test_shape_overflow) {
    const int64_t big = (int64_t)1 << 62;
    tn_graph *g = tn_graph_new();
    tn_var *v = tn_vector(g, "v", TN_F32);
    CHECK(tn_reshape(v, 2, (int64_t[]){ big, 8 }) == NULL, "reshape to (2^62, 8)");
    CHECK_ERR(TN_ERR_SHAPE, "tn_reshape");
    CHECK(strstr(tn_last_error(), "too large"), "%s", tn_last_error());
    CHECK(tn_reshape(v, 3, (int64_t[]){ 0, big, big }) == NULL, "reshape to (0, 2^62, 2^62)");
    CHECK_ERR(TN_ERR_SHAPE, "too large");
    CHECK(tn_array_zeros(TN_F32, 3, (int64_t[]){ 0, big, big }) == NULL, "zeros (0, 2^62, 2^62)");
    CHECK_ERR(TN_ERR_SHAPE, "tn_array_zeros: shape (0, 4611686018427387904, 4611686018427387904) is too large");
    CHECK(tn_array_empty(TN_F64, 2, (int64_t[]){ big / 8, 2 }) == NULL, "empty (2^59, 2) of float64");
    CHECK_ERR(TN_ERR_SHAPE, "tn_array_empty");
    tn_array *z = tn_array_zeros(TN_F32, 3, (int64_t[]){ 0, 1 << 20, 1 << 20 });
    CHECK(z && tn_array_size(z) == 0 && z->strides[0] == (int64_t)4 << 40, "an empty array with large dims: %s", tn_last_error());
    tn_array *r = z ? tn_array_reshape(z, 2, (int64_t[]){ big, 0 }) : NULL;
    CHECK(!r, "array reshape to (2^62, 0) has strides past 64 bits");
    CHECK_ERR(TN_ERR_SHAPE, "tn_array_reshape");
    tn_array_free(z);
    CHECK(tn_input(g, "h", TN_F64, 2, (int64_t[]){ 2, big }, NULL) == NULL, "input of shape (2, 2^62)");
    CHECK_ERR(TN_ERR_SHAPE, "tn_input: 'h': shape (2, 4611686018427387904) is too large");
    tn_var *a = tn_input(g, "a", TN_F32, 1, (int64_t[]){ big / 64 }, NULL);
    CHECK(a && tn_outer(a, a) == NULL, "outer of two (2^56,) vectors is (2^56, 2^56)");
    CHECK_ERR(TN_ERR_SHAPE, "tn_outer: the result's shape");
    tn_graph_free(g);
}

/* A freed function (or a pointer that never was one) is refused by name,
   without reading freed memory (ASan runs this test). */
TEST(test_freed_function) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32), *y = tn_neg(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    tn_array *xv = tn_array_ones(TN_F32, 1, (int64_t[]){ 3 }), *o = NULL;
    CHECK(f && tn_call(f, &xv, &o) == TN_OK, "call: %s", tn_last_error());
    tn_array_free(o); o = NULL;
    tn_function_free(f);
    CHECK(tn_call(f, &xv, &o) == TN_ERR_INVALID && !o, "tn_call on a freed function");
    CHECK_ERR(TN_ERR_INVALID, "tn_call: the function was freed");
    CHECK(tn_call_n(f, 1, &xv, 1, &o) == TN_ERR_INVALID, "tn_call_n on a freed function");
    CHECK_ERR(TN_ERR_INVALID, "tn_call_n: the function was freed");
    CHECK(tn_debugprint_function(f, stdout) == TN_ERR_INVALID, "debugprint of a freed function");
    CHECK_ERR(TN_ERR_INVALID, "tn_debugprint_function");
    tn_clear_error();
    tn_function_free(f);               /* twice: refused, nothing freed again */
    CHECK_ERR(TN_ERR_INVALID, "tn_function_free: the function was freed");
    uint64_t junk[64];
    for (int i = 0; i < 64; i++) junk[i] = 0x0123456789abcdefull * (uint64_t)(i + 1);
    CHECK(tn_call((tn_func *)junk, &xv, &o) == TN_ERR_INVALID, "a foreign pointer");
    CHECK_ERR(TN_ERR_INVALID, "not a function made by tn_function");
    /* a later function reuses the block: it works, and so does the old pointer (the documented limit) */
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f2 && tn_call(f2, &xv, &o) == TN_OK && o && tn_array_get(o, (int64_t[]){ 0 }) == -1.0, "a new function: %s", tn_last_error());
    tn_array_free(o);
    tn_function_free(f2);
    tn_array_free(xv);
    tn_graph_free(g);
}

/* A shared variable may fix its shape (tn_shared_fixed, Theano's strict
   shapes): set_value and updates of another shape are refused by name, all
   updates of the call or none applied; by default shapes may change. */
TEST(test_shared_fixed_shape) {
    tn_graph *g = tn_graph_new();
    tn_array *w34 = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 3, 4 }, -1, 1, 5);
    tn_array *w43 = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 4, 3 }, -1, 1, 6);
    tn_array *row = tn_array_ones(TN_F32, 2, (int64_t[]){ 1, 4 });
    tn_var *w = tn_shared_fixed(g, "w", w34), *free_w = tn_shared(g, "free_w", w34), *b = tn_shared_fixed(g, "b", row);
    CHECK(w && tn_var_dim(w, 0) == 3 && tn_var_dim(w, 1) == 4 && tn_var_dim(free_w, 0) == -1, "static shapes");
    CHECK(b && b->type.bcast[0] && !b->type.bcast[1], "a fixed dim of size 1 broadcasts");
    CHECK(tn_shared_set_value(w, w43) == TN_ERR_SHAPE, "set_value of another shape");
    CHECK_ERR(TN_ERR_SHAPE, "tn_shared_set_value: shared variable 'w' has the fixed shape (3, 4); the new value has shape (4, 3)");
    tn_array *cur = tn_shared_get_value(w);
    CHECK(cur && cur->shape[0] == 3 && tn_array_get(cur, (int64_t[]){ 2, 1 }) == tn_array_get(w34, (int64_t[]){ 2, 1 }), "w unchanged");
    tn_array_free(cur);
    CHECK(tn_shared_set_value(w, w34) == TN_OK, "the same shape: %s", tn_last_error());
    CHECK(tn_shared_set_value(free_w, w43) == TN_OK, "a free shape changes: %s", tn_last_error());
    /* compile time: the update's shape is known */
    tn_update bad = { w, tn_transpose(w, NULL) };
    CHECK(!tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &bad }), "update of a known other shape");
    CHECK_ERR(TN_ERR_UPDATE, "'w' has the fixed shape (3, 4); update 0 has shape (4, 3)");
    /* call time: known only then; nothing is applied */
    tn_var *x = tn_matrix(g, "x", TN_F32), *y = tn_add(x, b);
    CHECK(y && y->type.shape[1] == 4, "x + b of shape (?, 4): %s", tn_last_error());
    tn_update ups[2] = { { free_w, tn_neg(free_w) }, { w, x } };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_updates = 2, .updates = ups });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    CHECK(f && tn_call(f, &w43, NULL) == TN_ERR_SHAPE, "call with an update of another shape");
    CHECK_ERR(TN_ERR_SHAPE, "tn_call: shared variable 'w' has the fixed shape (3, 4); update 1 has shape (4, 3)");
    tn_array *fw = tn_shared_get_value(free_w);
    CHECK(fw && tn_array_get(fw, (int64_t[]){ 0, 0 }) == tn_array_get(w43, (int64_t[]){ 0, 0 }), "the other update was not applied either");
    tn_array_free(fw);
    CHECK(f && tn_call(f, &w34, NULL) == TN_OK, "the fixed shape: %s", tn_last_error());
    fw = tn_shared_get_value(free_w);
    CHECK(fw && tn_array_get(fw, (int64_t[]){ 0, 0 }) == -tn_array_get(w43, (int64_t[]){ 0, 0 }), "both applied");
    tn_array_free(fw);
    tn_function_free(f);
    tn_array_free(w34); tn_array_free(w43); tn_array_free(row);
    tn_graph_free(g);
}

/* A message opens with the name of the function the user called, also when
   that one calls another public function, and when a NULL operand follows
   an earlier failure (cases tests/test_fuzz.c found). */
TEST(test_messages_name_the_function) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    CHECK(!tn_shared_get_value(x), "not shared");
    CHECK_ERR(TN_ERR_INVALID, "tn_shared_get_value: 'x' is not a shared variable");
    CHECK(!tn_shared_get_value(NULL), "NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_shared_get_value: variable is NULL");
    CHECK(!tn_grad1(x, x), "a vector cost");
    CHECK_ERR(TN_ERR_SHAPE, "tn_grad1: the cost 'x' must be a scalar");
    CHECK(!tn_array_arange((tn_dtype)99, 0, 3, 1), "bad dtype");
    CHECK_ERR(TN_ERR_DTYPE, "tn_array_arange: invalid dtype 99");
    tn_config cfg;
    memset(&cfg, 0, sizeof cfg);
    CHECK(tn_parse_flags("threads=x", &cfg) == TN_ERR_INVALID, "bad value");
    CHECK_ERR(TN_ERR_INVALID, "tn_parse_flags: bad value 'x' for 'threads'");
    CHECK(tn_parse_flags("bogus=1", &cfg) == TN_ERR_INVALID, "unknown flag");
    CHECK_ERR(TN_ERR_INVALID, "tn_parse_flags: unknown flag 'bogus'");
    CHECK(tn_parse_flags("cpu", &cfg) == TN_ERR_INVALID, "no '='");
    CHECK_ERR(TN_ERR_INVALID, "tn_parse_flags: 'cpu' is not key=value");
    setenv("TENSOR_FLAGS", "threads=x", 1);
    CHECK(tn_init(NULL) == TN_ERR_INVALID, "bad TENSOR_FLAGS");
    CHECK_ERR(TN_ERR_INVALID, "tn_init: TENSOR_FLAGS: bad value 'x' for 'threads'");
    unsetenv("TENSOR_FLAGS");
    static const char *const who[] = { "tn_dot: operand 0 is NULL", "tn_outer: operand 1 is NULL", "tn_gemm: operand 0 is NULL",
                                       "tn_gemv: operand 1 is NULL", "tn_gpu_from_host: x is NULL", "tn_host_from_gpu: x is NULL" };
    for (int k = 0; k < 6; k++) {
        CHECK(!tn_reshape(x, -1, NULL), "an earlier failure");
        tn_var *r = k == 0 ? tn_dot(NULL, x) : k == 1 ? tn_outer(x, NULL) : k == 2 ? tn_gemm(NULL, 1, x, x, 1)
                  : k == 3 ? tn_gemv(x, 1, NULL, x, 0) : k == 4 ? tn_gpu_from_host(NULL) : tn_host_from_gpu(NULL);
        CHECK(!r, "%s", who[k]);
        CHECK_ERR(TN_ERR_NULL, who[k]);
        CHECK(strstr(tn_last_error(), "tn_reshape: ndim -1"), "and the earlier failure: %s", tn_last_error());
    }
    tn_graph_free(g);
}

/* A shape error found when the function runs names the op once, whether
   the op's own message already starts with its name or not. */
TEST(test_call_time_error_names_the_op_once) {
    tn_graph *g = tn_graph_new();
    tn_var *v = tn_vector(g, "v", TN_F32);
    tn_var *y = tn_alloc(v, 2, (int64_t[]){ 2, 3 });
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &v, .n_outputs = 1, .outputs = &y, .mode = TN_MODE_FAST_COMPILE });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array *a = tn_array_full(TN_F32, 1, (int64_t[]){ 4 }, 1.5), *o = NULL;
    CHECK(f && tn_call(f, &a, &o) == TN_ERR_SHAPE, "a (4,) value cannot fill (2, 3)");
    CHECK_ERR(TN_ERR_SHAPE, "tn_call: Alloc: cannot broadcast (4,) to (2, 3)");
    CHECK(!strstr(tn_last_error(), "Alloc: Alloc:"), "named twice: %s", tn_last_error());
    tn_array_free(a);
    tn_function_free(f);
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_call_time_error_names_the_op_once);
    TH_RUN(test_function_desc_errors);
    TH_RUN(test_update_errors);
    TH_RUN(test_call_errors);
    TH_RUN(test_call_time_shape_mismatch_keeps_state);
    TH_RUN(test_build_time_errors);
    TH_RUN(test_stale_input);
    TH_RUN(test_flatten_0d);
    TH_RUN(test_shape_overflow);
    TH_RUN(test_freed_function);
    TH_RUN(test_shared_fixed_shape);
    TH_RUN(test_messages_name_the_function);
    tn_shutdown();
    TH_END();
}
