/* gpu_op.c - user ops with CUDA source, used inside a graph: the seed's
   PyCUDA multiply_them kernel and its GpuEye op. Each op gives a shape rule,
   a CPU function (the fallback when no GPU is in use) and CUDA C source that
   the CUDA back end compiles with NVRTC (cached like its own kernels).
   Computes y = multiply_them(a, b) + eye(n) * 10, checks it against plain C,
   and says where it ran.

   Build: cc -std=c11 -O2 -I. examples/gpu_op.c -o gpu_op -lm -lpthread -ldl
   Run:   ./gpu_op                       (TENSOR_FLAGS=device=cuda ./gpu_op for the GPU) */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <math.h>
#include <stdlib.h>

#define TRY(x) do { if (!(x)) { fprintf(stderr, "gpu_op: %s\n", tn_last_error()); return 1; } } while (0)

/* ---- multiply_them(a, b) = a * b, float32, same shapes ---- */
static const char *MULTIPLY_THEM_CU =
    "extern \"C\" __global__ void multiply_them(const float *a, const float *b, float *dest, long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) dest[i] = a[i] * b[i];\n"
    "}\n";

static tn_result mul_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    (void)op;
    if (in[0].dtype != TN_F32 || in[1].dtype != TN_F32) { snprintf(why, cap, "a and b must be float32"); return TN_ERR_DTYPE; }
    if (in[0].ndim != in[1].ndim) { snprintf(why, cap, "a has %d dims, b %d", in[0].ndim, in[1].ndim); return TN_ERR_SHAPE; }
    out[0] = in[0];
    for (int d = 0; d < in[0].ndim; d++) {
        int64_t x = in[0].shape[d], y = in[1].shape[d];
        if (x >= 0 && y >= 0 && x != y) { snprintf(why, cap, "dim %d: a has %lld, b %lld", d, (long long)x, (long long)y); return TN_ERR_SHAPE; }
        out[0].shape[d] = x >= 0 ? x : y;
        out[0].bcast[d] = false;
    }
    return TN_OK;
}

static tn_result mul_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    const float *a = (const float *)in[0]->data, *b = (const float *)in[1]->data;
    float *d = (float *)out[0]->data;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) d[i] = a[i] * b[i];
    return TN_OK;
}

/* ---- eye(n): an n x n float32 identity; n is baked into the op (and its source) ---- */
typedef struct { int64_t n; char src[512]; } eye_data;

static tn_result eye_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    (void)in;
    int64_t n = ((const eye_data *)op->user)->n;
    if (n < 0) { snprintf(why, cap, "n is %lld", (long long)n); return TN_ERR_INVALID; }
    out[0] = (tn_type){ TN_F32, 2, { n, n }, { n == 1, n == 1 } };
    return TN_OK;
}

static tn_result eye_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)in; (void)why; (void)cap;
    int64_t n = ((const eye_data *)op->user)->n;
    float *d = (float *)out[0]->data;
    for (int64_t i = 0; i < n * n; i++) d[i] = i / n == i % n ? 1.0f : 0.0f;
    return TN_OK;
}

int main(void) {
    TRY(tn_init(NULL) == TN_OK);
    const int64_t n = 300;
    tn_custom_op multiply_them = { .name = "multiply_them", .n_inputs = 2, .infer = mul_infer, .cpu = mul_cpu,
                                   .cuda_source = MULTIPLY_THEM_CU, .cuda_kernel = "multiply_them" };
    eye_data ed = { .n = n };
    snprintf(ed.src, sizeof ed.src,
             "extern \"C\" __global__ void gpu_eye(float *out, long long count) {\n"
             "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
             "    if (i < count) out[i] = (i / %lld == i %% %lld) ? 1.0f : 0.0f;\n"
             "}\n", (long long)n, (long long)n);
    tn_custom_op eye = { .name = "GpuEye", .n_inputs = 0, .infer = eye_infer, .cpu = eye_cpu,
                         .cuda_source = ed.src, .cuda_kernel = "gpu_eye", .user = &ed };

    tn_graph *g = tn_graph_new();
    tn_var *a = tn_matrix(g, "a", TN_F32), *b = tn_matrix(g, "b", TN_F32);
    tn_var *prod = tn_custom(NULL, &multiply_them, 2, (tn_var *[]){ a, b });
    tn_var *I = tn_custom(g, &eye, 0, NULL);
    tn_var *y = tn_add(prod, tn_mul(I, tn_lit(I, 10.0)));
    TRY(y);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ a, b }, .n_outputs = 1,
                                                 .outputs = &y, .name = "gpu_op" });
    TRY(f);
    tn_debugprint_function(f, stdout);

    /* a = numpy.random.randn(300, 300).astype(float32), as the seed */
    tn_array *av = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ n, n }, 0, 1, 1);
    tn_array *bv = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ n, n }, 0, 1, 2), *out = NULL;
    TRY(tn_call(f, (tn_array *[]){ av, bv }, &out) == TN_OK);
    double worst = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            int64_t ix[2] = { i, j };
            double want = (double)((float)tn_array_get(av, ix) * (float)tn_array_get(bv, ix)) + (i == j ? 10.0 : 0.0);
            double e = fabs(tn_array_get(out, ix) - want);
            if (e > worst) worst = e;
        }
    printf("y[0, 0:3] = %.6f %.6f %.6f; largest difference from plain C: %g\n", tn_array_get(out, (int64_t[]){ 0, 0 }),
           tn_array_get(out, (int64_t[]){ 0, 1 }), tn_array_get(out, (int64_t[]){ 0, 2 }), worst);

    /* a shape rule that fails names the op */
    tn_var *c = tn_input(g, "c", TN_F32, 2, (int64_t[]){ 3, 4 }, NULL), *d = tn_input(g, "d", TN_F32, 2, (int64_t[]){ 3, 5 }, NULL);
    if (!tn_custom(NULL, &multiply_them, 2, (tn_var *[]){ c, d })) printf("as expected: %s\n", tn_last_error());

    printf(tn_function_device_steps(f) > 0 ? "Used the gpu\n" : "Used the cpu (the ops' CPU functions)\n");
    tn_array_free(out); tn_array_free(av); tn_array_free(bv);
    tn_function_free(f);
    tn_graph_free(g);
    return worst < 1e-5 ? 0 : 1;
}
