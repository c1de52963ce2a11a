/* Device selection without a usable GPU: device=cpu and device=auto run on
   the CPU silently; device=cuda (or cudaN) says why in exactly one line and
   runs on the CPU; results are the CPU's. The driver is pointed at a missing
   file (TN_LIBCUDA_PATH) so the test means the same on a machine with a GPU,
   and at the toolkit's stub libcuda when present (a driver that cannot init).
   A CUDA_PATH longer than 1024 characters is searched whole. */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"
#include <dlfcn.h>

static int n_warn;
static char last_warn[1024];
static void capture(tn_log_level level, const char *msg, void *user) {
    (void)user;
    if (level != TN_LOG_WARN) return;
    n_warn++;
    snprintf(last_warn, sizeof last_warn, "%s", msg);
}

static tn_result init_with(tn_device_kind dev, int ordinal) {
    tn_config cfg = { .device = dev, .device_ordinal = ordinal };
    tn_init(&cfg);
    tn__cuda_forget_failure();
    n_warn = 0;
    last_warn[0] = 0;
    return tn_cuda_init();
}

TEST(test_cpu_never_loads_cuda) {
    CHECK(init_with(TN_DEVICE_CPU, 0) == TN_ERR_DEVICE, "device=cpu: CUDA not used");
    CHECK(n_warn == 0, "device=cpu is silent, got '%s'", last_warn);
    CHECK(!tn_cuda_available() && strstr(tn_cuda_status(), "device=cpu"), "status '%s'", tn_cuda_status());
    CHECK(tn__cuda.h_cuda == NULL, "libcuda not opened");
}

TEST(test_auto_without_driver_is_silent) {
    CHECK(init_with(TN_DEVICE_AUTO, 0) == TN_ERR_DEVICE, "no driver: not available");
    CHECK_ERR(TN_ERR_DEVICE, "libcuda.so.1 was not found (no NVIDIA driver)");
    CHECK(n_warn == 0, "device=auto falls back silently, got '%s'", last_warn);
    CHECK(strstr(tn_cuda_status(), "libcuda.so.1 was not found") != NULL, "status '%s'", tn_cuda_status());
    CHECK(tn__get_backend() == NULL && tn__get_device_ops() == NULL, "no back end registered");
}

TEST(test_cuda_without_driver_says_why_once) {
    CHECK(init_with(TN_DEVICE_CUDA, 0) == TN_ERR_DEVICE, "no driver");
    CHECK(n_warn == 1, "one line, got %d", n_warn);
    CHECK(strstr(last_warn, "device=cuda requested but libcuda.so.1 was not found (no NVIDIA driver); running on the CPU") != NULL,
          "line: '%s'", last_warn);
    CHECK(strchr(last_warn, '\n') == NULL, "a single line");
    tn_cuda_init();
    tn_cuda_available();
    CHECK(n_warn == 1, "said once, not at every call (%d)", n_warn);
    CHECK(init_with(TN_DEVICE_CUDA, 3) == TN_ERR_DEVICE && strstr(last_warn, "device=cuda3 requested but") != NULL,
          "the ordinal is named: '%s'", last_warn);
}

/* tn_print_info without a GPU: the reason, and the kernel cache directory the disk cache would use. */
TEST(test_info_says_why_no_gpu) {
    init_with(TN_DEVICE_AUTO, 0);
    setenv("XDG_CACHE_HOME", "/tmp/tn_info_cache", 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    CHECK(tn_print_info(m) == TN_OK, "%s", tn_last_error());
    fclose(m);
    CHECK(buf && strstr(buf, "  GPU:          none: libcuda.so.1 was not found (no NVIDIA driver)\n"), "the reason:\n%s", buf);
    CHECK(buf && strstr(buf, "  kernel cache: /tmp/tn_info_cache/tensor\n"), "the cache directory:\n%s", buf);
    CHECK(buf && !strstr(buf, "not compiled in"), "the back end is compiled in");
    free(buf);
    unsetenv("XDG_CACHE_HOME");
}

TEST(test_stub_driver) {
    const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
    FILE *f = fopen(stub, "rb");
    if (!f) { TH_SKIP("no %s", stub); return; }
    fclose(f);
    setenv("TN_LIBCUDA_PATH", stub, 1);
    CHECK(init_with(TN_DEVICE_CUDA, 0) == TN_ERR_DEVICE, "a stub driver cannot be used");
    CHECK(strstr(last_warn, "cuInit failed: CUDA_ERROR_STUB_LIBRARY") != NULL, "line: '%s'", last_warn);
    CHECK(tn__cuda.h_cuda == NULL, "the stub was closed again");
    setenv("TN_LIBCUDA_PATH", "/nonexistent/libcuda.so.1", 1);
}

TEST(test_compile_for_device_without_gpu) {
    init_with(TN_DEVICE_AUTO, 0);
    const void *bin;
    size_t n;
    CHECK(tn_cuda_compile("extern \"C\" __global__ void k() {}", NULL, &bin, &n) == TN_ERR_DEVICE, "no device arch");
    CHECK_ERR(TN_ERR_DEVICE, "no usable GPU");
}

/* CUDA_PATH/lib64/libcuda.so.1 under a 1500-character CUDA_PATH is opened
   (here a link to the C library, which then lacks cuInit), not cut short
   and missed. */
TEST(test_long_cuda_path_is_searched_whole) {
    void *real = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (real) {
        dlclose(real);
        TH_SKIP("a libcuda.so.1 on the loader's path is found before CUDA_PATH");
        return;
    }
    Dl_info libc;
    CHECK(dladdr((void *)&printf, &libc) && libc.dli_fname, "dladdr(printf)");
    char root[] = "/tmp/tn_cuda_path_XXXXXX";
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    char path[1600];
    size_t n = (size_t)snprintf(path, sizeof path, "%s", root);
    while (n < 1500) n += (size_t)snprintf(path + n, sizeof path - n, "/%.99s",
                                           "ddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd");
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/lib64' && ln -s '%s' '%s/lib64/libcuda.so.1'", path, libc.dli_fname, path);
    CHECK(system(cmd) == 0, "%s", cmd);
    unsetenv("TN_LIBCUDA_PATH");
    setenv("CUDA_PATH", path, 1);
    CHECK(init_with(TN_DEVICE_AUTO, 0) == TN_ERR_DEVICE, "not a driver");
    CHECK(strstr(tn_cuda_status(), "lacks cu") != NULL, "the library under CUDA_PATH was opened: status '%s'", tn_cuda_status());
    unsetenv("CUDA_PATH");
    setenv("TN_LIBCUDA_PATH", "/nonexistent/libcuda.so.1", 1);
    tn__cuda_forget_failure();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0, "%s", cmd);
}

/* The fallback computes: y = exp(x) * 2 under device=cuda with no GPU. */
TEST(test_function_runs_on_cpu) {
    init_with(TN_DEVICE_CUDA, 0);
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_mul(tn_exp(x), tn_scalar_const(g, 2.0));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f != NULL, "tn_function: %s", tn_last_error());
    tn_array *in = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 1001 }, -3, 3, 7), *out = NULL;
    if (f && in) {
        CHECK(tn_call(f, &in, &out) == TN_OK, "tn_call: %s", tn_last_error());
        if (out) {
            CHECK(out->device == TN_HOST, "result on the host");
            double worst = 0;
            for (int64_t i = 0; i < 1001; i++) {
                double xv = tn_array_get(in, &i), ref = exp(xv) * 2, got = tn_array_get(out, &i);
                double err = fabs(got - ref) / fmax(1, fabs(ref));
                if (err > worst) worst = err;
            }
            CHECK(worst < 1e-6, "max relative error %g", worst);
        }
    }
    tn_array_free(out);
    tn_array_free(in);
    tn_function_free(f);
    tn_graph_free(g);
}

int main(void) {
    setenv("TN_LIBCUDA_PATH", "/nonexistent/libcuda.so.1", 1);
    tn_set_log(capture, NULL);
    TH_RUN(test_cpu_never_loads_cuda);
    TH_RUN(test_auto_without_driver_is_silent);
    TH_RUN(test_cuda_without_driver_says_why_once);
    TH_RUN(test_info_says_why_no_gpu);
    TH_RUN(test_stub_driver);
    TH_RUN(test_long_cuda_path_is_searched_whole);
    TH_RUN(test_compile_for_device_without_gpu);
    TH_RUN(test_function_runs_on_cpu);
    tn_shutdown();
    TH_END();
}
