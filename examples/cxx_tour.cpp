/* cxx_tour.cpp - tensor.h from C++: the implementation compiles as C++ too,
   so one C++ file is the whole program. Builds a small graph with TN_SHAPE
   and TN_AXES (C++'s spelling of C's (int64_t[]){...} and (int[]){...}),
   compiles it into a function, calls it and prints the result.

   Build: c++ -std=c++17 -O2 -I.. cxx_tour.cpp -o cxx_tour -lm -lpthread -ldl
   (from the repository root: c++ -std=c++17 -O2 -I. examples/cxx_tour.cpp -o cxx_tour -lm -lpthread -ldl) */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <cstdio>

int main() {
    tn_init(nullptr);
    tn_graph *g = tn_graph_new();
    // softmax(x . w) over each row: x (batch, 4), w (4, 3)
    tn_var *x = tn_input(g, "x", TN_F32, TN_SHAPE(-1, 4), nullptr);
    tn_var *w = tn_input(g, "w", TN_F32, TN_SHAPE(4, 3), nullptr);
    tn_var *p = tn_softmax(tn_dot(x, w), 1);
    tn_var *total = tn_sum(p, TN_AXES(0, 1), false);   // every row sums to 1: total = batch
    tn_var *ins[2] = { x, w }, *outs[2] = { p, total };
    tn_func_desc d = {};
    d.n_inputs = 2; d.inputs = ins; d.n_outputs = 2; d.outputs = outs;
    tn_func *f = tn_function(g, &d);
    if (!f) { std::fprintf(stderr, "error: %s\n", tn_last_error()); return 1; }
    tn_debugprint_function(f, stdout);

    tn_array *xa = tn_array_rand_normal(TN_F32, TN_SHAPE(5, 4), 0, 1, 7);
    tn_array *wa = tn_array_rand_uniform(TN_F32, TN_SHAPE(4, 3), -1, 1, 8);
    tn_array *in[2] = { xa, wa }, *out[2] = { nullptr, nullptr };
    if (tn_call(f, in, out) != TN_OK) { std::fprintf(stderr, "error: %s\n", tn_last_error()); return 1; }
    std::printf("softmax(x . w) =\n");
    tn_array_print(out[0], stdout);
    std::printf("sum of all rows = %g (5 rows)\n", tn_array_get(out[1], nullptr));

    for (tn_array *a : { out[0], out[1], xa, wa }) tn_array_free(a);
    tn_function_free(f);
    tn_graph_free(g);
    tn_shutdown();
    return 0;
}
