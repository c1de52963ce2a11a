/* tn_print_info (tensor.h >>print_info) in a build without the CUDA back
   end: the version, the compiler and SIMD target, the thread count and BLAS
   library as the library reports them elsewhere, and why there is no GPU. */
#define _POSIX_C_SOURCE 200809L
#include "tensor.h"
#include "harness.h"

static char *info(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    tn_result r = tn_print_info(m);
    fclose(m);
    CHECK(r == TN_OK, "tn_print_info: %s", tn_last_error());
    return buf;
}

TEST(test_info_lines) {
    tn_init(NULL);
    char *s = info(), want[256];
    CHECK(!strncmp(s, "tensor.h " TENSOR_VERSION "\n", strlen("tensor.h " TENSOR_VERSION "\n")), "first line: %s", s);
    snprintf(want, sizeof want, "  CPU threads:  %d\n", tn__num_threads());
    CHECK(strstr(s, want), "threads as tn__num_threads says (%s):\n%s", want, s);
    const char *blas = tn__blas_name();
    snprintf(want, sizeof want, "  BLAS:         %s\n", blas ? blas : "built-in kernels (no CBLAS library loaded)");
    CHECK(strstr(s, want), "BLAS as tn__blas_name says (%s):\n%s", want, s);
    CHECK(strstr(s, "  compiler:     ") && strstr(s, ", SIMD: "), "compiler and SIMD:\n%s", s);
#if defined(__AVX2__)
    CHECK(strstr(s, "AVX2"), "this build targets AVX2:\n%s", s);
#endif
    CHECK(strstr(s, "  GPU:          none: the CUDA back end is not compiled in"), "no GPU back end:\n%s", s);
    free(s);
    tn__blas_enable(false);
    s = info();
    CHECK(strstr(s, "  BLAS:         built-in kernels"), "BLAS switched off:\n%s", s);
    tn__blas_enable(true);
    free(s);
    tn_clear_error();
    CHECK(tn_print_info(NULL) == TN_ERR_NULL, "NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_print_info: out is NULL");
}

int main(void) {
    TH_RUN(test_info_lines);
    TH_END();
}
