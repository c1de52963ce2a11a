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
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
