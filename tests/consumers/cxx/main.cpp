// A C++ program using tensor.h: the headers are included from C++, the
// implementation is compiled as C (tests/consumers/c/impl.c). Checked as C++11
// and C++17 by tests/check_consumers.sh. Computes max(a * b - 1) and compares
// it with a loop.
#include <tensor.h>
#include <tensor_cuda.h>
#include <cmath>
#include <cstdio>
#include <vector>

int main() {
    std::vector<float> a, b;
    for (int i = 0; i < 37; i++) { a.push_back(0.25f * float(i % 11) - 1.0f); b.push_back(1.5f - 0.125f * float(i % 7)); }
    float want = -INFINITY;
    for (size_t i = 0; i < a.size(); i++) want = std::fmax(want, a[i] * b[i] - 1.0f);

    if (tn_init(nullptr) != TN_OK) { std::fprintf(stderr, "%s\n", tn_last_error()); return 1; }
    tn_graph *g = tn_graph_new();
    tn_var *va = tn_vector(g, "a", TN_F32), *vb = tn_vector(g, "b", TN_F32);
    tn_var *y = tn_max(tn_sub(tn_mul(va, vb), tn_scalar_const(g, 1.0)), nullptr, 0, false);
    tn_var *ins[] = { va, vb };
    tn_func_desc desc = tn_func_desc();
    desc.n_inputs = 2; desc.inputs = ins; desc.n_outputs = 1; desc.outputs = &y;
    tn_func *f = tn_function(g, &desc);
    const int64_t n = int64_t(a.size());
    tn_array *in[] = { tn_array_from_data(TN_F32, 1, &n, a.data()), tn_array_from_data(TN_F32, 1, &n, b.data()) };
    tn_array *out = nullptr;
    if (!f || tn_call(f, in, &out) != TN_OK) { std::fprintf(stderr, "%s\n", tn_last_error()); return 1; }
    double got = tn_array_get(out, nullptr);
    tn_array_free(out); tn_array_free(in[0]); tn_array_free(in[1]); tn_function_free(f); tn_graph_free(g);

    std::printf("tensor.h %s from C++%ld: max = %g, loop %g (GPU: %s)\n", TENSOR_VERSION, long(__cplusplus / 100 % 100), got, double(want),
                tn_cuda_status());
    if (got != double(want)) { std::printf("FAIL: the maxima differ\n"); return 1; }
    std::printf("OK\n");
    return 0;
}
