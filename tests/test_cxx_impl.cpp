// The implementation compiled as C++: this file is its one translation unit
// (tensor.h, tensor_ops.h and tensor_cuda.h), built with g++ or clang++ at
// -Wall -Wextra -Werror; a small graph runs and is checked against values
// worked out by hand. tests/check_cxx.sh checks the C++11 and C++17 compiles
// with both compilers.
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_ops.h"
#include "tensor_cuda.h"
#include "harness.h"

// y = sum over axis 1 of (x * 2 + 1), x (2, 3) = 0..5: rows 0,1,2 and 3,4,5
// give 1+3+5 = 9 and 7+9+11 = 27.
TEST(test_graph_runs) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F32, TN_SHAPE(-1, 3), NULL);
    tn_var *y = tn_sum(tn_add(tn_mul(x, tn_scalar_const(g, 2.0)), tn_scalar_const(g, 1.0)), TN_AXES(1), false);
    tn_var *ins[1] = { x }, *outs[1] = { y };
    tn_func_desc d = {};
    d.n_inputs = 1; d.inputs = ins; d.n_outputs = 1; d.outputs = outs;
    tn_func *f = tn_function(g, &d);
    CHECK(f != nullptr, "tn_function: %s", tn_last_error());
    tn_array *r = tn_array_arange(TN_F32, 0, 6, 1), *a = r ? tn_array_reshape(r, TN_SHAPE(2, 3)) : nullptr;
    tn_array *out[1] = { nullptr };
    tn_result res = f && a ? tn_call(f, &a, out) : tn_last_result();
    CHECK(res == TN_OK, "tn_call: %s", tn_last_error());
    if (res == TN_OK) {
        CHECK(out[0]->ndim == 1 && out[0]->shape[0] == 2 && out[0]->dtype == TN_F32, "result shape or dtype");
        const double want[2] = { 9, 27 };
        for (int64_t i = 0; i < 2 && out[0]->ndim == 1; i++)
            CHECK(tn_array_get(out[0], &i) == want[i], "y[%d] = %g, want %g", (int)i, tn_array_get(out[0], &i), want[i]);
    }
    tn_array_free(out[0]); tn_array_free(a); tn_array_free(r);
    tn_function_free(f);
    tn_graph_free(g);
}

// The gradient of sum(x^2) is 2x; x = (1, -2, 3).
TEST(test_grad_runs) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *c = tn_sum(tn_mul(x, x), nullptr, 0, false), *gx = nullptr;
    CHECK(tn_grad(c, 1, &x, &gx, nullptr) == TN_OK, "tn_grad: %s", tn_last_error());
    tn_var *ins[1] = { x }, *outs[1] = { gx };
    tn_func_desc d = {};
    d.n_inputs = 1; d.inputs = ins; d.n_outputs = 1; d.outputs = outs;
    tn_func *f = gx ? tn_function(g, &d) : nullptr;
    const double xs[3] = { 1, -2, 3 }, want[3] = { 2, -4, 6 };
    tn_array *a = tn_array_from_data(TN_F64, TN_SHAPE(3), xs), *out[1] = { nullptr };
    CHECK(f && tn_call(f, &a, out) == TN_OK, "tn_call: %s", tn_last_error());
    for (int64_t i = 0; out[0] && i < 3; i++)
        CHECK(tn_array_get(out[0], &i) == want[i], "dx[%d] = %g, want %g", (int)i, tn_array_get(out[0], &i), want[i]);
    tn_array_free(out[0]); tn_array_free(a);
    tn_function_free(f);
    tn_graph_free(g);
}

int main() {
    TH_RUN(test_graph_runs);
    TH_RUN(test_grad_runs);
    TH_END();
}
