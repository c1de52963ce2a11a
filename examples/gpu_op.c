/* gpu_op.c - the seed's GPU programs: PyCUDA's multiply_them as a raw kernel
   (tn_cuda_module_new, drv.Out/drv.In as tn_cuda_arg_out/_in, block=(400,1,1)),
   user ops with CUDA source used inside a graph (multiply_them, and GpuEye
   with symbolic n, m, k whose values give its shape at each call,
   PyCUDADoubleOp doubling x with its gradient) and the seed's three
   exercises: an op computing x*y (with its gradient), an op with two outputs
   (x*y and x+y), and a kernel reading strided inputs (a transposed x) with a
   parameter. Each op gives a shape rule, a CPU function (the fallback when no
   GPU is in use) and CUDA C source that the CUDA back end compiles with NVRTC
   (cached like its own kernels). Every result is checked against plain C,
   and the program says where it ran; without a GPU the raw kernel is skipped
   with the reason and the ops run their CPU functions.

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

/* ---- GpuEye(n, m, k): an n x m float32 matrix, ones on diagonal k; n, m, k
   symbolic int64 scalars, as the seed's. n and m are value inputs: the shape
   rule sees their values (unknown, -1, while the graph is built), and each
   call is planned with them. k is read by the kernels. ---- */
static const char *GPU_EYE_CU =
    "extern \"C\" __global__ void gpu_eye(const long long *n, const long long *m, const long long *k, float *out, long long count) {\n"
    "    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (t < count) out[t] = t % *m - t / *m == *k ? 1.0f : 0.0f;\n"
    "}\n";

static tn_result eye_infer(const tn_custom_op *op, const tn_type *in, const tn_array *const *val, tn_type *out, char *why, size_t cap) {
    (void)op;
    int64_t s[2];
    for (int d = 0; d < 2; d++) {
        if (in[d].dtype != TN_I64) { snprintf(why, cap, "%s must be int64", d ? "m" : "n"); return TN_ERR_DTYPE; }
        s[d] = val[d] ? (int64_t)tn_array_get(val[d], NULL) : -1;
        if (val[d] && s[d] < 0) { snprintf(why, cap, "%s is %lld", d ? "m" : "n", (long long)s[d]); return TN_ERR_SHAPE; }
    }
    if (in[2].dtype != TN_I64) { snprintf(why, cap, "k must be int64"); return TN_ERR_DTYPE; }
    out[0] = (tn_type){ TN_F32, 2, { s[0], s[1] }, { s[0] == 1, s[1] == 1 } };
    return TN_OK;
}

static tn_result eye_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    int64_t m = out[0]->shape[1], k = *(const int64_t *)in[2]->data;
    float *d = (float *)out[0]->data;
    for (int64_t t = 0, count = tn_array_size(out[0]); t < count; t++) d[t] = t % m - t / m == k ? 1.0f : 0.0f;
    return TN_OK;
}


/* ---- the raw kernel: PyCUDA's SourceModule example ---- */
static int raw_multiply_them(void) {
    tn_cuda_module *mod = tn_cuda_module_new(
        "extern \"C\" __global__ void multiply_them(float *dest, const float *a, const float *b) {\n"
        "    const int i = threadIdx.x;\n"
        "    dest[i] = a[i] * b[i];\n"
        "}\n", NULL);
    tn_cuda_kernel *k = mod ? tn_cuda_module_get(mod, "multiply_them") : NULL;
    if (!k) {
        printf("raw kernel multiply_them: skipped, it needs a GPU (%s)\n", tn_last_error());
        tn_cuda_module_free(mod);
        return 0;
    }
    const int64_t n = 400;
    tn_array *a = tn_array_rand_normal(TN_F32, 1, &n, 0, 1, 11), *b = tn_array_rand_normal(TN_F32, 1, &n, 0, 1, 12);
    tn_array *dest = tn_array_zeros(TN_F32, 1, &n);
    tn_cuda_arg args[3] = { tn_cuda_arg_out(dest), tn_cuda_arg_in(a), tn_cuda_arg_in(b) };
    tn_result r = tn_cuda_launch(k, (tn_cuda_dim3){ 1, 1, 1 }, (tn_cuda_dim3){ 400, 1, 1 }, 0, 3, args);
    int bad = 0;
    for (int64_t i = 0; r == TN_OK && i < n; i++) bad += ((float *)dest->data)[i] != ((float *)a->data)[i] * ((float *)b->data)[i];
    if (r != TN_OK) printf("raw kernel multiply_them failed: %s\n", tn_last_error());
    else printf("raw kernel multiply_them: dest - a*b is zero in %lld of 400 elements\n", (long long)(n - bad));
    tn_array_free(a); tn_array_free(b); tn_array_free(dest);
    tn_cuda_module_free(mod);
    return r == TN_OK && bad == 0 ? 0 : 1;
}

/* ---- PyCUDADoubleOp and the exercises: float32 ops on same-shape inputs ---- */
static tn_result same_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    for (int i = 0; i < op->n_inputs; i++)
        if (in[i].dtype != TN_F32 || in[i].ndim != in[0].ndim) { snprintf(why, cap, "input %d: float32 of x's rank please", i); return TN_ERR_DTYPE; }
    for (int k = 0; k < (op->n_outputs > 1 ? op->n_outputs : 1); k++) out[k] = in[0];
    return TN_OK;
}
static const float *F(const tn_array *a) { return (const float *)a->data; }

static const char *DOUBLE_CU =
    "extern \"C\" __global__ void double_it(const float *x, float *y, long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = 2 * x[i];\n"
    "}\n";
static tn_result double_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) ((float *)out[0]->data)[i] = 2 * F(in[0])[i];
    return TN_OK;
}
/* grad(inputs, output_grads): the op itself doubles the output gradient */
static tn_result double_grad(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *gout,
                             const bool *need, tn_var **gin, char *why, size_t cap) {
    (void)in; (void)out; (void)why; (void)cap;
    if (need[0]) gin[0] = tn_custom(NULL, op, 1, gout);
    return TN_OK;
}

/* exercise 1: x * y, with its gradient */
static const char *XY_CU =
    "extern \"C\" __global__ void mul_xy(const float *x, const float *y, float *z, long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) z[i] = x[i] * y[i];\n"
    "}\n";
static tn_result xy_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) ((float *)out[0]->data)[i] = F(in[0])[i] * F(in[1])[i];
    return TN_OK;
}
static tn_result xy_grad(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *gout,
                         const bool *need, tn_var **gin, char *why, size_t cap) {
    (void)op; (void)out; (void)why; (void)cap;
    if (need[0]) gin[0] = tn_mul(gout[0], in[1]);
    if (need[1]) gin[1] = tn_mul(gout[0], in[0]);
    return TN_OK;
}

/* exercise 2: two outputs, x * y and x + y */
static const char *PS_CU =
    "extern \"C\" __global__ void prod_sum(const float *x, const float *y, float *p, float *s, long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) { p[i] = x[i] * y[i]; s[i] = x[i] + y[i]; }\n"
    "}\n";
static tn_result ps_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) {
        ((float *)out[0]->data)[i] = F(in[0])[i] * F(in[1])[i];
        ((float *)out[1]->data)[i] = F(in[0])[i] + F(in[1])[i];
    }
    return TN_OK;
}

/* exercise 3: strides. The kernel reads x as it lives (a transposed view is
   not copied) and scales it by params[0]. */
static const char *SCALE_CU =
    "extern \"C\" __global__ void scale(tn_operand x, tn_operand out, tn_params p) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < out.size) ((float *)out.data)[i] = (float)p.v[0] * ((const float *)x.data)[tn_offset(x, i)];\n"
    "}\n";
static tn_result scale_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)why; (void)cap;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) ((float *)out[0]->data)[i] = (float)op->params[0] * F(in[0])[i];
    return TN_OK;
}

static int exercises(void) {
    tn_custom_op dbl = { .name = "PyCUDADoubleOp", .n_inputs = 1, .infer = same_infer, .cpu = double_cpu,
                         .cuda_source = DOUBLE_CU, .cuda_kernel = "double_it", .grad = double_grad };
    tn_custom_op xy = { .name = "mul_xy", .n_inputs = 2, .infer = same_infer, .cpu = xy_cpu,
                        .cuda_source = XY_CU, .cuda_kernel = "mul_xy", .grad = xy_grad };
    tn_custom_op ps = { .name = "prod_sum", .n_inputs = 2, .n_outputs = 2, .infer = same_infer, .cpu = ps_cpu,
                        .cuda_source = PS_CU, .cuda_kernel = "prod_sum" };
    const double k3 = 3.0;
    tn_custom_op sc = { .name = "scale_strided", .n_inputs = 1, .infer = same_infer, .cpu = scale_cpu, .cuda_source = SCALE_CU,
                        .cuda_kernel = "scale", .cuda_abi = TN_CUSTOM_ABI_STRIDED, .params = &k3, .n_params = 1 };
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32), *y = tn_matrix(g, "y", TN_F32), *o[2];
    tn_var *d = tn_custom(NULL, &dbl, 1, &x);
    tn_var *m = tn_custom(NULL, &xy, 2, (tn_var *[]){ x, y });
    TRY(d && m && tn_custom_multi(NULL, &ps, 2, (tn_var *[]){ x, y }, o) == TN_OK);
    tn_var *t = tn_custom(NULL, &sc, 1, (tn_var *[]){ tn_transpose(x, NULL) });
    /* d/dx sum(double(x)) = 2, d/dx sum(x*y) = y */
    tn_var *gd = tn_grad1(tn_sum(d, NULL, 0, false), x), *gm = tn_grad1(tn_sum(m, NULL, 0, false), x);
    TRY(t && gd && gm);
    tn_var *outs[6] = { d, m, o[0], o[1], t, tn_add(gd, gm) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 6, .outputs = outs,
                                                 .name = "exercises" });
    TRY(f);
    const int64_t R = 20, C = 30;
    tn_array *xv = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ R, C }, 0, 1, 3);
    tn_array *yv = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ R, C }, 0, 1, 4), *r[6] = { 0 };
    TRY(tn_call(f, (tn_array *[]){ xv, yv }, r) == TN_OK);
    double worst = 0;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) {
            float a = F(xv)[i * C + j], b = F(yv)[i * C + j];
            double want[5] = { 2 * a, a * b, a * b, a + b, 2 + b };
            int at[5] = { 0, 1, 2, 3, 5 };
            for (int q = 0; q < 5; q++) worst = fmax(worst, fabs(F(r[at[q]])[i * C + j] - want[q]));
            worst = fmax(worst, fabs(F(r[4])[j * R + i] - 3 * a));     /* scale(x^T) */
        }
    printf("PyCUDADoubleOp, x*y, two outputs, strided x^T, gradients: largest difference from plain C: %g (%s)\n", worst,
           tn_function_device_steps(f) > 0 ? "gpu" : "cpu");
    for (int q = 0; q < 6; q++) tn_array_free(r[q]);
    tn_array_free(xv); tn_array_free(yv);
    tn_function_free(f);
    tn_graph_free(g);
    return worst < 1e-5 ? 0 : 1;
}

int main(void) {
    TRY(tn_init(NULL) == TN_OK);
    if (raw_multiply_them() != 0 || exercises() != 0) return 1;
    const int64_t n = 300;
    tn_custom_op multiply_them = { .name = "multiply_them", .n_inputs = 2, .infer = mul_infer, .cpu = mul_cpu,
                                   .cuda_source = MULTIPLY_THEM_CU, .cuda_kernel = "multiply_them" };
    tn_custom_op eye = { .name = "GpuEye", .n_inputs = 3, .value_inputs = 1 | 2, .infer_values = eye_infer, .cpu = eye_cpu,
                         .cuda_source = GPU_EYE_CU, .cuda_kernel = "gpu_eye" };

    tn_graph *g = tn_graph_new();
    tn_var *a = tn_matrix(g, "a", TN_F32), *b = tn_matrix(g, "b", TN_F32);
    tn_var *vn = tn_scalar(g, "n", TN_I64), *vm = tn_scalar(g, "m", TN_I64), *vk = tn_scalar(g, "k", TN_I64);
    tn_var *prod = tn_custom(NULL, &multiply_them, 2, (tn_var *[]){ a, b });
    tn_var *I = tn_custom(NULL, &eye, 3, (tn_var *[]){ vn, vm, vk });
    tn_var *y = tn_add(prod, tn_mul(I, tn_lit(I, 10.0)));
    TRY(y);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 5, .inputs = (tn_var *[]){ a, b, vn, vm, vk }, .n_outputs = 1,
                                                 .outputs = &y, .name = "gpu_op" });
    TRY(f);
    tn_debugprint_function(f, stdout);

    /* a = numpy.random.randn(300, 300).astype(float32), as the seed; eye(300, 300, 0) */
    tn_array *av = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ n, n }, 0, 1, 1);
    tn_array *bv = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ n, n }, 0, 1, 2), *out = NULL;
    tn_array *nv = tn_array_scalar(TN_I64, (double)n), *kv = tn_array_scalar(TN_I64, 0);
    TRY(tn_call(f, (tn_array *[]){ av, bv, nv, nv, kv }, &out) == TN_OK);
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

    /* GpuEye alone, as the seed tests it: one function, a new shape each call */
    tn_func *fe = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = (tn_var *[]){ vn, vm, vk }, .n_outputs = 1, .outputs = &I });
    TRY(fe);
    static const int64_t sizes[][3] = { { 3, 5, 1 }, { 4, 4, -1 }, { 5, 3, 0 }, { 0, 2, 0 }, { 2, 3, 7 } };
    double eye_worst = 0;
    for (int c = 0; c < 5; c++) {
        tn_array *in[3], *e = NULL;
        for (int q = 0; q < 3; q++) in[q] = tn_array_scalar(TN_I64, (double)sizes[c][q]);
        TRY(tn_call(fe, in, &e) == TN_OK);
        if (e->shape[0] != sizes[c][0] || e->shape[1] != sizes[c][1]) eye_worst = INFINITY;
        for (int64_t i = 0; i < e->shape[0] && eye_worst < INFINITY; i++)
            for (int64_t j = 0; j < e->shape[1]; j++)
                eye_worst = fmax(eye_worst, fabs(tn_array_get(e, (int64_t[]){ i, j }) - (j - i == sizes[c][2] ? 1.0 : 0.0)));
        tn_array_free(e);
        for (int q = 0; q < 3; q++) tn_array_free(in[q]);
    }
    printf("GpuEye(n, m, k) for (3, 5, 1), (4, 4, -1), (5, 3, 0), (0, 2, 0), (2, 3, 7): largest difference from plain C: %g\n", eye_worst);
    worst = fmax(worst, eye_worst);
    tn_function_free(fe);

    /* a shape rule that fails names the op */
    tn_var *c = tn_input(g, "c", TN_F32, 2, (int64_t[]){ 3, 4 }, NULL), *d = tn_input(g, "d", TN_F32, 2, (int64_t[]){ 3, 5 }, NULL);
    if (!tn_custom(NULL, &multiply_them, 2, (tn_var *[]){ c, d })) printf("as expected: %s\n", tn_last_error());

    printf(tn_function_device_steps(f) > 0 ? "Used the gpu\n" : "Used the cpu (the ops' CPU functions)\n");
    tn_array_free(out); tn_array_free(av); tn_array_free(bv); tn_array_free(nv); tn_array_free(kv);
    tn_function_free(f);
    tn_graph_free(g);
    return worst < 1e-5 ? 0 : 1;
}
