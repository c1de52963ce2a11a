/* CPU-only checks of the CUDA back end's phase 2 that need no GPU: the
   transfer ops (types, labels, errors, their host fallback when no device
   is used), the cuBLAS operand mapping of row-major views (no transpose
   copies), and, where NVRTC is installed, that the device copy kernel the
   back end generates (identity program, contiguous and broadcast) compiles. */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"

TEST(test_transfer_ops_build_and_label) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32);
    tn_var *d = tn_gpu_from_host(tn_exp(x));
    tn_var *h = tn_host_from_gpu(d);
    CHECK(d && h, "%s", tn_last_error());
    CHECK(tn_var_dtype(h) == TN_F32 && tn_var_ndim(h) == 2, "the type passes through");
    CHECK(tn__op_kind(TN_OP_GPU_FROM_HOST) == TN_OPK_TRANSFER && tn__op_kind(TN_OP_HOST_FROM_GPU) == TN_OPK_TRANSFER, "kind");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    tn_debugprint(h, m);
    fclose(m);
    CHECK(strstr(buf, "HostFromGpu(gpuarray) [id A]") && strstr(buf, " |GpuFromHost<None> [id B]") &&
          strstr(buf, "  |Elemwise{exp,no_inplace} [id C]"), "debugprint:\n%s", buf);
    free(buf);
    tn_clear_error();
    CHECK(tn_gpu_from_host(NULL) == NULL, "NULL gives NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_gpu_from_host");
    tn_clear_error();
    CHECK(tn_host_from_gpu(NULL) == NULL, "NULL gives NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_host_from_gpu");
    tn_graph_free(g);
}

/* Without a device the transfers are host copies: a program written for the
   GPU gives the same numbers on the CPU. */
TEST(test_transfers_fall_back_to_host_copies) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32);
    tn_var *y = tn_gpu_from_host(tn_exp(tn_transpose(x, NULL)));
    tn_var *z = tn_host_from_gpu(tn_mul(x, x));
    tn_var *outs[2] = { y, z };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = outs });
    CHECK(f, "%s", tn_last_error());
    tn_array *in = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 3, 5 }, -2, 2, 9), *r[2] = { 0 };
    if (f) {
        CHECK(tn_call(f, &in, r) == TN_OK, "%s", tn_last_error());
        for (int i = 0; r[0] && r[1] && i < 3; i++)
            for (int j = 0; j < 5; j++) {
                double v = tn_array_get(in, (int64_t[]){ i, j });
                CHECK(r[0]->device == TN_HOST && th_close(tn_array_get(r[0], (int64_t[]){ j, i }), (double)expf((float)v), 1e-6, 0), "exp at %d %d", i, j);
                CHECK(th_close(tn_array_get(r[1], (int64_t[]){ i, j }), (double)((float)v * (float)v), 1e-6, 0), "mul at %d %d", i, j);
            }
    }
    tn_array_free(r[0]); tn_array_free(r[1]); tn_array_free(in);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Row-major views read column-major: rows contiguous -> OP_N with ld = row
   stride; a transposed view -> OP_T with ld = column stride; steps in both
   dims -> not expressible (copied first). */
TEST(test_blas_operand_mapping) {
    unsigned op;
    int64_t ld;
    CHECK(tn__blas_mat(4, 3, 3, 1, &op, &ld) && op == TN__CUBLAS_OP_N && ld == 3, "contiguous (4,3): op %u ld %lld", op, (long long)ld);
    CHECK(tn__blas_mat(4, 3, 10, 1, &op, &ld) && op == TN__CUBLAS_OP_N && ld == 10, "row-sliced (4,3) of width 10");
    CHECK(tn__blas_mat(4, 3, 1, 4, &op, &ld) && op == TN__CUBLAS_OP_T && ld == 4, "transposed (3,4)^T: op %u ld %lld", op, (long long)ld);
    CHECK(tn__blas_mat(1, 5, 0, 2, &op, &ld) && op == TN__CUBLAS_OP_T && ld == 2, "a stepped row vector: op %u ld %lld", op, (long long)ld);
    CHECK(tn__blas_mat(5, 1, 1, 0, &op, &ld) && ld >= 1, "a column vector");
    CHECK(!tn__blas_mat(4, 3, 6, 2, &op, &ld), "steps in both dims need a copy");
    CHECK(!tn__blas_mat(4, 3, 0, 1, &op, &ld), "a broadcast row dim needs a copy");
}

/* The device copy kernel the back end writes (identity program) compiles. */
TEST(test_copy_kernel_compiles) {
    if (tn__nvrtc_load(0) != TN_OK) { printf("  (NVRTC not found: copy kernel compile not checked)\n"); tn_clear_error(); return; }
    tn_dtype dts[3] = { TN_F16, TN_F32, TN_F64 };
    for (int i = 0; i < 3; i++) {
        tn_dtype t = dts[i];
        int32_t reg = 0;
        tn_ew_program p = { 1, &t, 0, NULL, 1, &reg, &t, NULL, NULL };
        tn__cuda_layout L[2] = { { TN__CUDA_CONTIG, 0, 0 }, { TN__CUDA_STRIDED, 2, 0 } };
        for (int k = 0; k < 2; k++) {
            char *src = NULL;
            CHECK(tn__cuda_ew_source(&p, &L[k], &src) == TN_OK, "%s", tn_last_error());
            const void *bin;
            size_t n;
            if (src) CHECK(tn_cuda_compile(src, "sm_90", &bin, &n) == TN_OK && n > 0, "%s %s: %s", tn_dtype_name(t), k ? "strided" : "contiguous", tn_last_error());
            tn__free(src);
        }
    }
}

/* cumsum and cumprod have a row in the CUDA back end's table (it claims
   every dtype), and the kernel tensor_ops.h writes for each op and dtype
   compiles with NVRTC (no GPU needed). */
TEST(test_cumulative_gpu_row) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32);
    tn_var *s = tn_cumsum(x, 1), *p = tn_cumprod(x, 0);
    CHECK(s && p, "%s", tn_last_error());
    CHECK(tn__backend_runs(&tn__cuda_backend, s) && tn__backend_runs(&tn__cuda_backend, p), "the CUDA back end has no cumulative row");
    if (tn__nvrtc_load(0) != TN_OK) { printf("  (NVRTC not found: cumulative kernels not compiled)\n"); tn_clear_error(); tn_graph_free(g); return; }
    for (int op = TN_OP_CUMSUM; op <= TN_OP_CUMPROD; op++)
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t++) {
            char src[2048];
            int n = tn__cum_cuda_source(op, t, src, sizeof src);
            CHECK(n > 0 && (size_t)n < sizeof src, "no source for %s", tn_dtype_name(t));
            const void *bin = NULL;
            size_t sz = 0;
            if (n > 0 && (size_t)n < sizeof src)
                CHECK(tn_cuda_compile(src, "sm_90", &bin, &sz) == TN_OK && sz > 0, "%s %s: %s", op == TN_OP_CUMSUM ? "cumsum" : "cumprod",
                      tn_dtype_name(t), tn_last_error());
        }
    CHECK(tn__cum_cuda_source(TN_OP_CUMSUM, TN_DTYPE_NONE, NULL, 0) < 0 && tn__cum_cuda_source(TN_OP_SUM, TN_F32, NULL, 0) < 0,
          "a source for what has no kernel");
    tn_graph_free(g);
}

/* Eye of symbolic sizes (tn_eye_var) has a row in the CUDA back end's table
   (tn_eye's constant sizes fold instead: no row), and tensor_ops.h's kernel
   for each element size compiles with NVRTC (no GPU needed). */
TEST(test_eye_gpu_row) {
    tn_graph *g = tn_graph_new();
    tn_var *n = tn_scalar(g, "n", TN_I32), *k = tn_scalar(g, "k", TN_I32);
    tn_var *e = tn_eye_var(TN_F16, n, NULL, k), *c = tn_eye(g, TN_F16, 3, 3, 0);
    CHECK(e && c, "%s", tn_last_error());
    CHECK(e && tn__backend_runs(&tn__cuda_backend, e), "the CUDA back end has no row for tn_eye_var's Eye");
    CHECK(c && !tn__backend_runs(&tn__cuda_backend, c), "a row for tn_eye's constant Eye");
    CHECK(tn__eye_cuda_source(3, NULL, 0) < 0 && tn__eye_cuda_source(16, NULL, 0) < 0, "a source for an element size without a kernel");
    unsigned char one[8];
    CHECK(tn__eye_one_bits(TN_F16, one) == 2 && one[0] == 0x00 && one[1] == 0x3c, "float16's 1 is 0x3c00");
    CHECK(tn__eye_one_bits(TN_F64, one) == 8 && one[7] == 0x3f && one[6] == 0xf0, "float64's 1 is 0x3ff0...");
    if (tn__nvrtc_load(0) != TN_OK) { printf("  (NVRTC not found: eye kernels not compiled)\n"); tn_clear_error(); tn_graph_free(g); return; }
    for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t++) {
        char src[1024];
        int len = tn__eye_cuda_source(tn_dtype_size(t), src, sizeof src);
        CHECK(len > 0 && (size_t)len < sizeof src, "no source for %s", tn_dtype_name(t));
        const void *bin = NULL;
        size_t sz = 0;
        if (len > 0 && (size_t)len < sizeof src)
            CHECK(tn_cuda_compile(src, "sm_90", &bin, &sz) == TN_OK && sz > 0, "eye %s: %s", tn_dtype_name(t), tn_last_error());
    }
    tn_graph_free(g);
}

/* Random draws have a row in the CUDA back end's table, and the kernel
   tensor_ops.h writes for each distribution and dtype compiles with NVRTC
   (no GPU needed); what has no kernel has no source. */
TEST(test_random_gpu_row) {
    tn_graph *g = tn_graph_new();
    tn_rstream *s = tn_random_stream(g, 3);
    tn_var *u = tn_random_normal(s, TN_F32, 1, (int64_t[]){ 5 }, 0, 1);
    CHECK(u && tn__backend_runs(&tn__cuda_backend, u), "the CUDA back end has no random row: %s", tn_last_error());
    if (tn__nvrtc_load(0) != TN_OK) { printf("  (NVRTC not found: random kernels not compiled)\n"); tn_clear_error(); tn_graph_free(g); return; }
    int compiled = 0;
    for (int dist = TN_RAND_UNIFORM; dist <= TN_RAND_RANDINT; dist++)
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t++) {
            char src[12288];
            int n = tn__random_cuda_source(dist, t, src, sizeof src);
            bool want = dist == TN_RAND_BERNOULLI || (dist == TN_RAND_RANDINT ? t == TN_I32 || t == TN_I64 : tn_dtype_is_float(t));
            CHECK(want == (n > 0), "distribution %d %s: source length %d", dist, tn_dtype_name(t), n);
            if (n <= 0) continue;
            CHECK((size_t)n < sizeof src, "source of %d bytes", n);
            const void *bin = NULL;
            size_t sz = 0;
            CHECK(tn_cuda_compile(src, "sm_90", &bin, &sz) == TN_OK && sz > 0, "distribution %d %s: %s", dist, tn_dtype_name(t), tn_last_error());
            compiled++;
        }
    CHECK(compiled == 14, "%d random kernels compiled", compiled);
    CHECK(tn__random_cuda_source(0, TN_F32, NULL, 0) < 0 && tn__random_cuda_source(TN_RAND_UNIFORM, TN_DTYPE_NONE, NULL, 0) < 0, "a source for nothing");
    tn_graph_free(g);
}

int main(void) {
    tn_config cfg = { .device = TN_DEVICE_CPU };
    tn_init(&cfg);
    TH_RUN(test_transfer_ops_build_and_label);
    TH_RUN(test_transfers_fall_back_to_host_copies);
    TH_RUN(test_blas_operand_mapping);
    TH_RUN(test_copy_kernel_compiles);
    TH_RUN(test_cumulative_gpu_row);
    TH_RUN(test_random_gpu_row);
    TH_RUN(test_eye_gpu_row);
    tn_shutdown();
    TH_END();
}
