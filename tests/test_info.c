/* tn_print_info (tensor.h >>print_info) in a build without the CUDA back
   end: the version, the compiler and SIMD target, the thread count and BLAS
   library as the library reports them elsewhere, and why there is no GPU. */
#define _POSIX_C_SOURCE 200809L
#include "tensor.h"
#include "harness.h"
#include <sys/wait.h>
#include <unistd.h>

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

/* The blas flag, in a child process each (the library loads at the first
   product, once per process): what tn__blas_name reports, that a product
   still computes the right value, and the warning for a path it cannot use. */
static char warned[512];
static void keep_warning(tn_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == TN_LOG_WARN) snprintf(warned, sizeof warned, "%s", msg);
}
static int blas_child(const char *flags, const char *want_name, const char *want_warning) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        tn_config c = { .floatX = TN_F32, .allow_gc = true };
        if (tn_parse_flags(flags, &c) != TN_OK || tn_init(&c) != TN_OK) _exit(10);
        tn_set_log(keep_warning, NULL);
        const char *name = tn__blas_name();
        if (want_name ? !name || strcmp(name, want_name) : name != NULL) _exit(11);
        if (want_warning ? !strstr(warned, want_warning) : warned[0] != 0) _exit(12);
        /* a 2x3 by 3x2 product: [[1,2,3],[4,5,6]] @ [[1,0],[0,1],[1,1]] */
        tn_graph *g = tn_graph_new();
        tn_var *a = tn_matrix(g, "a", TN_F64), *b = tn_matrix(g, "b", TN_F64);
        tn_var *ins[2] = { a, b }, *outs[1] = { tn_dot(a, b) };
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 1, .outputs = outs });
        double av[6] = { 1, 2, 3, 4, 5, 6 }, bv[6] = { 1, 0, 0, 1, 1, 1 };
        tn_array *A = tn_array_from_data(TN_F64, 2, (int64_t[]){ 2, 3 }, av);
        tn_array *B = tn_array_from_data(TN_F64, 2, (int64_t[]){ 3, 2 }, bv);
        tn_array *out[1] = { NULL };
        if (!f || tn_call(f, (tn_array *[]){ A, B }, out) != TN_OK) _exit(13);
        const double *o = (const double *)out[0]->data;
        _exit(o[0] == 4 && o[1] == 5 && o[2] == 10 && o[3] == 11 ? 0 : 14);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

TEST(test_blas_flag) {
    tn_config c = { 0 };
    CHECK(tn_parse_flags("blas=none", &c) == TN_OK && c.blas && !strcmp(c.blas, "none"), "blas=none parsed");
    int r = blas_child("blas=none", NULL, NULL);
    CHECK(r == 0, "blas=none: the built-in kernels (child exit %d)", r);
    r = blas_child("blas=/nonexistent/libcblas.so", NULL, "blas=/nonexistent/libcblas.so: it cannot be opened");
    CHECK(r == 0, "an unusable path is said once and the product still runs (child exit %d)", r);
    r = blas_child("blas=libm.so.6", NULL, "blas=libm.so.6: it lacks cblas_sgemm");
    CHECK(r == 0, "a library without CBLAS (child exit %d)", r);
    const char *lib = tn__blas_name();
    if (!lib) { TH_SKIP("no CBLAS library on this machine: the blas=auto and blas=PATH cases need one"); return; }
    char flags[128];
    snprintf(flags, sizeof flags, "blas=%s", lib);
    r = blas_child(flags, lib, NULL);
    CHECK(r == 0, "%s: loads it (child exit %d)", flags, r);
    r = blas_child("blas=auto", lib, NULL);
    CHECK(r == 0, "blas=auto finds %s (child exit %d)", lib, r);
}

int main(void) {
    TH_RUN(test_blas_flag);     /* first: the children must not inherit a loaded library */
    TH_RUN(test_info_lines);
    TH_END();
}
