// Proves the headers compile as C++ (declarations in extern "C") and link
// against an implementation compiled as C.
#include "tensor.h"
#include <cstdio>
#include <cstring>

int main() {
    int passed = 0, failed = 0;
    auto check = [&](bool ok, const char *what) {
        if (ok) passed++; else { failed++; std::fprintf(stderr, "FAIL %s\n", what); }
    };
    check(tn_dtype_size(TN_F32) == 4, "tn_dtype_size(float32) == 4");
    check(std::strcmp(tn_dtype_name(TN_F16), "float16") == 0, "tn_dtype_name(float16)");
    check(tn_f16_to_f32(tn_f32_to_f16(1.5f)) == 1.5f, "float16 round trip");
    check(tn_dtype_promote(TN_I32, TN_F32) == TN_F32, "int32 + float32 stays float32");
    // TN_SHAPE and TN_AXES, C++'s spelling of (int64_t[]){...} and (int[]){...}
    tn_array *r = tn_array_arange(TN_F64, 0, 24, 1), *a = tn_array_reshape(r, TN_SHAPE(2, 3, 4));
    tn_array_free(r);
    check(a && a->ndim == 3 && a->shape[0] == 2 && a->shape[1] == 3 && a->shape[2] == 4, "TN_SHAPE(2, 3, 4)");
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_tensor3(g, "x", TN_F64);
    tn_var *s = tn_sum(x, TN_AXES(0, 2), false);      // over axes 0 and 2: shape (3,)
    tn_var *ins[1] = { x }, *outs[1] = { s };
    tn_func_desc d = {};
    d.n_inputs = 1; d.inputs = ins; d.n_outputs = 1; d.outputs = outs;
    tn_func *f = tn_function(g, &d);
    tn_array *out[1] = { nullptr };
    bool ran = f && a && tn_call(f, &a, out) == TN_OK;
    // element j sums i*12 + j*4 + k over i < 2, k < 4: 8*(4j) + 4*12 + 2*6
    bool ok = ran && out[0]->ndim == 1 && out[0]->shape[0] == 3;
    for (int64_t j = 0; ok && j < 3; j++) ok = tn_array_get(out[0], &j) == 32.0 * j + 60;
    check(ok, "tn_sum(x, TN_AXES(0, 2), false)");
    tn_array_free(out[0]);
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(a);
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
