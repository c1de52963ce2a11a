/* On a GPU: compiled functions run through the CUDA back end end to end:
   placement (GpuElemwise, GpuFromHost, HostFromGpu in debugprint), shared
   variables living on the device, outputs copied, borrowed and kept on the
   device (tn_gpu_from_host), updates, cuBLAS products (gemv, gemm with a row
   bias, transposed operands, batched; gemm's addend as a bias, a matrix, a
   slice, a column, through cuBLASLt or the copy), a fused chain, a reduction, device=cpu
   against device=cuda, and no driver allocation in a steady loop; copied
   outputs written in place (new device arrays, pinned host arrays from the
   back end's cache) and update targets moved to the device; CUDA graph
   replay of a training step (against cuda_graph=0 and float64); mode=check
   over a fused chain, a gemm and a reduction; functions on several threads
   (a shared variable updated from two, one function from four); the newer
   elementwise ops on the GPU with cumsum/cumprod kept on the host; custom
   ops (strided kernel signature with params, pointer signature on strided
   inputs, a gradient through the op) and raw kernels (the seed's
   multiply_them, in/out/inout/device/scalar arguments, float16 helpers,
   argument errors); eye of symbolic sizes (GpuEye, every dtype, shapes
   changing between calls). Every result is compared with
   a float64 reference computed here.
   Without a usable GPU it prints "SKIP (no usable GPU: why)" and counts nothing. */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"

/* The configured device's context (opened by tn_cuda_init). */
#define CUDA_DEV() tn__cuda_dev_get(tn__cuda.ordinal)
#include "harness.h"
#include "scan_seed.h"
#include "scan_device.h"
#include <time.h>

static tn_config base_cfg;   /* device=cuda plus TENSOR_FLAGS (launch_blocking=1 in one run) */

/* The CPU back end for what follows (tn_init(&base_cfg) returns to the GPU). */
static void on_cpu(void) {
    tn_config cpu = base_cfg;
    cpu.device = TN_DEVICE_CPU;
    tn_init(&cpu);
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Largest |got - ref| / max(1, |ref|) over every element (got: any device). */
static double max_err(const tn_array *got, const double *ref, int64_t n) {
    tn_array *h = tn_array_astype(got, TN_F64);
    if (!h) return INFINITY;
    if (tn_array_size(h) != n) { tn_array_free(h); return INFINITY; }
    const double *g = (const double *)h->data;
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(g[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (!(d <= e)) e = isnan(d) ? INFINITY : d;
    }
    tn_array_free(h);
    return e;
}

static double *as_f64(const tn_array *a) {
    tn_array *h = tn_array_astype(a, TN_F64);
    if (!h) return NULL;
    int64_t n = tn_array_size(h);
    double *d = (double *)malloc((size_t)(n ? n : 1) * sizeof *d);
    memcpy(d, h->data, (size_t)n * sizeof *d);
    tn_array_free(h);
    return d;
}

/* debugprint of f into a string (caller frees). */
static char *dprint(const tn_func *f) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    tn_debugprint_function(f, m);
    fclose(m);
    return buf;
}

/* The seed: x shared (10*30*768 float32), f = exp(x), 1000 calls, three ways. */
TEST(test_seed_exp_loop) {
    int64_t n = 10 * 30 * 768;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -3, 3, 22);
    double *x64 = as_f64(xv), *ref = (double *)malloc((size_t)n * sizeof *ref);
    for (int64_t i = 0; i < n; i++) ref[i] = exp(x64[i]);
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_shared(g, "x", xv);
    tn_var *y = tn_exp(x);
    tn_var *yd = tn_gpu_from_host(y);
    tn_func *fc = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .name = "exp_copy" });
    tn_func *fb = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .borrow = true, .name = "exp_borrow" });
    tn_func *fd = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &yd, .borrow = true, .name = "exp_device" });
    CHECK(fc && fb && fd, "compile: %s", tn_last_error());
    if (!fc || !fb || !fd) goto out;
    CHECK(tn_shared_get(x)->device == 0, "x moved to the device (device %d)", tn_shared_get(x)->device);
    char *s = dprint(fc);
    CHECK(strstr(s, "HostFromGpu(gpuarray) [id A]") && strstr(s, " |GpuElemwise{exp,no_inplace} [id B]"),
          "debugprint of the copy function:\n%s", s);
    free(s);
    s = dprint(fd);
    CHECK(strstr(s, "GpuElemwise{exp,no_inplace} [id A]") && !strstr(s, "HostFromGpu"), "debugprint of the device function:\n%s", s);
    free(s);
    const char *names[3] = { "copied", "borrowed", "on the device" };
    tn_func *fs[3] = { fc, fb, fd };
    for (int w = 0; w < 3; w++) {
        tn_array *r = NULL;
        CHECK(tn_call(fs[w], NULL, &r) == TN_OK, "%s: %s", names[w], tn_last_error());
        if (!r) continue;
        CHECK(r->device == (w == 2 ? 0 : TN_HOST), "%s: result on device %d", names[w], r->device);
        double e = max_err(r, ref, n);
        CHECK(e <= 2e-6, "%s: max error %g", names[w], e);
        if (w < 2) CHECK(r->base && r->base->free_fn == tn__cuda_host_free, "%s: HostFromGpu wrote pinned memory", names[w]);
        if (w == 0) tn_array_free(r);
        uint64_t a0 = CUDA_DEV()->dmem.driver_allocs;
        for (int it = 0; it < 10; it++) { CHECK(tn_call(fs[w], NULL, &r) == TN_OK, "%s", tn_last_error()); if (w == 0) tn_array_free(r); }
        tn__cuda_synchronize();
        double t0 = now_us();
        for (int it = 0; it < 1000; it++) { tn_call(fs[w], NULL, &r); if (w == 0) tn_array_free(r); }
        tn__cuda_synchronize();
        double t1 = now_us();
        CHECK(CUDA_DEV()->dmem.driver_allocs == a0, "%s: %llu driver allocations in the steady loop", names[w],
              (unsigned long long)(CUDA_DEV()->dmem.driver_allocs - a0));
        printf("  func exp 230400 f32, result %-14s %8.2f us per call (1000 calls, wall clock)\n", names[w], (t1 - t0) / 1000);
    }
    /* get_value copies back; set_value copies in and keeps the variable on the device */
    tn_array *back = tn_shared_get_value(x);
    CHECK(back && back->device == TN_HOST && max_err(back, x64, n) == 0, "tn_shared_get_value copies the device value back");
    tn_array_free(back);
    for (int64_t i = 0; i < n; i++) { x64[i] = 0.5 * x64[i]; ref[i] = exp(x64[i]); }
    tn_array *nv = tn_array_astype(xv, TN_F32);
    for (int64_t i = 0; i < n; i++) ((float *)nv->data)[i] = (float)x64[i];
    CHECK(tn_shared_set_value(x, nv) == TN_OK, "%s", tn_last_error());
    CHECK(tn_shared_get(x)->device == 0, "set_value keeps x on the device (device %d)", tn_shared_get(x)->device);
    tn_array *r = NULL;
    CHECK(tn_call(fc, NULL, &r) == TN_OK && max_err(r, ref, n) <= 2e-6, "after set_value: %s", tn_last_error());
    tn_array_free(r);
    tn_array_free(nv);
out:
    tn_function_free(fc); tn_function_free(fb); tn_function_free(fd);
    tn_graph_free(g);
    tn_array_free(xv);
    free(x64); free(ref);
}

/* An input (host array) crosses through GpuFromHost. */
TEST(test_input_transfer_debugprint) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_exp(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f, "%s", tn_last_error());
    if (f) {
        char *s = dprint(f);
        CHECK(strstr(s, "HostFromGpu(gpuarray) [id A]") && strstr(s, " |GpuElemwise{exp,no_inplace} [id B]") &&
              strstr(s, "  |GpuFromHost<None> [id C]"), "debugprint:\n%s", s);
        free(s);
        int64_t sizes[3] = { 1, 31, (1 << 20) + 3 };
        for (int k = 0; k < 3; k++) {
            tn_array *in = tn_array_rand_uniform(TN_F32, 1, &sizes[k], -2, 2, 7 + (uint64_t)k), *r = NULL;
            double *a = as_f64(in);
            for (int64_t i = 0; i < sizes[k]; i++) a[i] = exp(a[i]);
            CHECK(tn_call(f, &in, &r) == TN_OK, "size %lld: %s", (long long)sizes[k], tn_last_error());
            if (r) CHECK(max_err(r, a, sizes[k]) <= 2e-6, "size %lld: error %g", (long long)sizes[k], max_err(r, a, sizes[k]));
            tn_array_free(r); tn_array_free(in); free(a);
        }
        /* a strided host view goes through the staging buffer packed */
        tn_array *big = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 999 }, -1, 1, 3);
        tn_array *view = tn_array_slice(big, 0, 1, 999, 3), *r = NULL;
        double *a = as_f64(view);
        int64_t m = tn_array_size(view);
        for (int64_t i = 0; i < m; i++) a[i] = exp(a[i]);
        CHECK(tn_call(f, &view, &r) == TN_OK && max_err(r, a, m) <= 2e-6, "strided input: %s", tn_last_error());
        tn_array_free(r); tn_array_free(view); tn_array_free(big); free(a);
    }
    tn_function_free(f);
    tn_graph_free(g);
}

/* y = W.x + b, all shared, with the update b <- b + 0.5 * y; three calls
   against float64; then no driver allocation in a loop. */
TEST(test_linear_shared_update) {
    const int M = 300, K = 200;
    tn_array *Wv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ M, K }, -1, 1, 1);
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ K }, -1, 1, 2);
    tn_array *bv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ M }, -1, 1, 3);
    double *W = as_f64(Wv), *x = as_f64(xv), *b = as_f64(bv), *y = (double *)malloc(M * sizeof *y);
    tn_graph *g = tn_graph_new();
    tn_var *sW = tn_shared(g, "W", Wv), *sx = tn_shared(g, "x", xv), *sb = tn_shared(g, "b", bv);
    tn_var *out = tn_add(tn_dot(sW, sx), sb);
    tn_update up = { sb, tn_add(sb, tn_mul(tn_scalar_const(g, 0.5), out)) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &out, .n_updates = 1, .updates = &up, .name = "linear" });
    CHECK(f, "%s", tn_last_error());
    if (f) {
        char *s = dprint(f);
        CHECK(strstr(s, "GpuGemv") || strstr(s, "GpuGemm") || strstr(s, "GpuDot"), "the product runs on the GPU:\n%s", s);
        free(s);
        CHECK(tn_shared_get(sb)->device == 0 && tn_shared_get(sW)->device == 0, "W and b live on the device");
        for (int call = 0; call < 3; call++) {
            for (int i = 0; i < M; i++) {
                double acc = b[i];
                for (int k = 0; k < K; k++) acc += W[(size_t)i * K + k] * x[k];
                y[i] = acc;
            }
            tn_array *r = NULL;
            CHECK(tn_call(f, NULL, &r) == TN_OK, "call %d: %s", call, tn_last_error());
            double e = r ? max_err(r, y, M) : INFINITY;
            CHECK(e <= 1e-4, "call %d: y error %g", call, e);
            tn_array_free(r);
            for (int i = 0; i < M; i++) b[i] = (double)(float)(b[i] + (double)(float)(0.5 * (float)y[i]));
            tn_array *bn = tn_shared_get_value(sb);
            e = bn ? max_err(bn, b, M) : INFINITY;
            CHECK(e <= 1e-4, "call %d: updated b error %g", call, e);
            if (bn) { double *bb = as_f64(bn); memcpy(b, bb, M * sizeof *b); free(bb); }   /* follow the device's rounding */
            tn_array_free(bn);
        }
        uint64_t a0 = CUDA_DEV()->dmem.driver_allocs;
        for (int it = 0; it < 100; it++) { tn_array *r = NULL; tn_call(f, NULL, &r); tn_array_free(r); }
        CHECK(CUDA_DEV()->dmem.driver_allocs == a0, "%llu driver allocations in 100 steady calls", (unsigned long long)(CUDA_DEV()->dmem.driver_allocs - a0));
    }
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(Wv); tn_array_free(xv); tn_array_free(bv);
    free(W); free(x); free(b); free(y);
}

/* Products through cuBLAS: gemm with a row bias and a transposed operand,
   float32/float64/float16, batched dot, outer. */
/* Matrix-vector products on the GPU, small (the back end's own kernel) and
   past its sizes (cuBLAS), against float64 loops: alpha and beta, a
   transposed (strided) matrix, a sum of products made in place, and a NaN
   in the addend with beta 0, which must not reach the result (BLAS). */
TEST(test_small_gemv) {
    /* past 65536 elements: the logistic step's products on the small kernel (to 2^19), and cuBLAS's past it */
    static const int shapes[8][3] = { { 6, 6, 0 }, { 5, 3, 1 }, { 37, 1024, 0 }, { 64, 1025, 0 }, { 300, 200, 1 },
                                      { 400, 784, 0 }, { 784, 400, 1 }, { 1000, 600, 1 } };
    int cases = 0;
    for (int di = 0; di < 2; di++) {
        tn_dtype t = di ? TN_F64 : TN_F32;
        double tol = t == TN_F64 ? 1e-12 : 1e-4;
        for (int si = 0; si < 8; si++) {
            int m = shapes[si][0], k = shapes[si][1], tr = shapes[si][2];
            tn_array *Av = tn_array_rand_uniform(t, 2, tr ? (int64_t[]){ k, m } : (int64_t[]){ m, k }, -1, 1, 31 + si);
            tn_array *xv = tn_array_rand_uniform(t, 1, (int64_t[]){ k }, -1, 1, 41 + si);
            tn_array *cv = tn_array_rand_uniform(t, 1, (int64_t[]){ m }, -1, 1, 51 + si);
            tn_array *nv = tn_array_astype(cv, t);
            double *A = as_f64(Av), *x = as_f64(xv), *c = as_f64(cv), *ref = (double *)malloc((size_t)m * 3 * sizeof *ref);
            if (t == TN_F32) ((float *)nv->data)[m / 2] = NAN;
            else ((double *)nv->data)[m / 2] = NAN;
            for (int i = 0; i < m; i++) {
                double acc = 0;
                for (int p = 0; p < k; p++) acc += (tr ? A[(size_t)p * m + i] : A[(size_t)i * k + p]) * x[p];
                ref[i] = -2 * acc + 0.5 * c[i];
                ref[m + i] = 1.5 * acc;
                ref[2 * m + i] = acc + 4 * c[i];
            }
            tn_graph *g = tn_graph_new();
            tn_var *a = tn_matrix(g, "A", t), *xx = tn_vector(g, "x", t), *cc = tn_vector(g, "c", t), *cn = tn_vector(g, "cnan", t);
            tn_var *M = tr ? tn_transpose(a, NULL) : a;
            /* the third: a Gemv of beta 4 reading c itself (the factor folded), its output apart from c */
            tn_var *y[3] = { tn_gemv(cc, -2.0, M, xx, 0.5), tn_gemv(cn, 1.5, M, xx, 0.0), tn_add(tn_dot(M, xx), tn_mul(cc, tn_lit(cc, 4.0))) };
            tn_var *ins[4] = { a, xx, cc, cn };
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 4, .inputs = ins, .n_outputs = 3, .outputs = y });
            CHECK(f, "%s: %s", tn_dtype_name(t), tn_last_error());
            if (f) {
                char *p = dprint(f);
                CHECK(strstr(p, "GpuGemv") && !strstr(p, "mul"), "%s (%d, %d): no GpuGemv, or c scaled by a kernel\n%s", tn_dtype_name(t), m, k, p);
                free(p);
                tn_array *vals[4] = { Av, xv, cv, nv }, *r[3] = { NULL, NULL, NULL };
                CHECK(tn_call(f, vals, r) == TN_OK, "%s: %s", tn_dtype_name(t), tn_last_error());
                for (int j = 0; j < 3 && r[0]; j++) {
                    double e = max_err(r[j], ref + (size_t)j * m, m);
                    CHECK(e <= tol, "%s gemv %d of (%d, %d)%s: error %g", tn_dtype_name(t), j, m, k, tr ? " transposed" : "", e);
                    cases++;
                }
                for (int j = 0; j < 3; j++) tn_array_free(r[j]);
            }
            tn_function_free(f);
            tn_graph_free(g);
            free(A); free(x); free(c); free(ref);
            tn_array_free(Av); tn_array_free(xv); tn_array_free(cv); tn_array_free(nv);
        }
    }
    CHECK(cases == 48, "%d cases", cases);
}

/* Join on the GPU: slabs along each axis of 3-d inputs, one of them a
   transposed view, every dtype the device stores; the bits equal the CPU's. */
static tn_array *join_run(tn_dtype t, int axis, tn_array *const *v, char *placed, size_t cap) {
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_input(g, "a", t, 3, NULL, NULL), *b = tn_input(g, "b", t, 3, NULL, NULL), *c = tn_input(g, "c", t, 3, NULL, NULL);
    int perm[3] = { 0, 2, 1 };
    tn_var *j = tn_concatenate(3, (tn_var *[]){ a, tn_dimshuffle(b, 3, perm), c }, axis), *ins[3] = { a, b, c };
    tn_func *f = j ? tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 1, .outputs = &j }) : NULL;
    tn_array *r = NULL;
    if (f && tn_call(f, v, &r) != TN_OK) r = NULL;
    if (f && placed) { char *p = dprint(f); snprintf(placed, cap, "%s", p); free(p); }
    tn_function_free(f);
    tn_graph_free(g);
    return r;
}

TEST(test_join_on_gpu) {
    tn_dtype dts[5] = { TN_F16, TN_F32, TN_F64, TN_I32, TN_BOOL };
    int cases = 0;
    for (int di = 0; di < 5; di++)
        for (int axis = 0; axis < 3; axis++) {
            tn_dtype t = dts[di];
            int64_t sa[3] = { 2, 3, 4 }, sb[3] = { 2, 4, 3 }, sc[3] = { 2, 3, 4 };   /* b is used as (2, 3, 4)^T of its last two */
            sa[axis] = 3; sc[axis] = 5;
            if (axis == 1) sb[2] = 2;     /* b^T: (2, 2, 4) */
            if (axis == 2) sb[1] = 6;     /* b^T: (2, 3, 6) */
            if (axis == 0) sb[0] = 1;
            tn_array *v[3];
            for (int i = 0; i < 3; i++) {
                tn_array *d = tn_array_rand_uniform(TN_F64, 3, i == 0 ? sa : i == 1 ? sb : sc, -50, 50, 60 + (uint64_t)(10 * di + 3 * axis + i));
                v[i] = tn_array_astype(d, t);
                tn_array_free(d);
            }
            char pg[8192];
            tn_array *rg = join_run(t, axis, v, pg, sizeof pg);
            on_cpu();
            tn_array *rc = join_run(t, axis, v, NULL, 0);
            tn_init(&base_cfg);
            CHECK(rg && rc, "Join of %s on axis %d: %s", tn_dtype_name(t), axis, tn_last_error());
            CHECK(strstr(pg, "GpuJoin"), "Join of %s on axis %d is not on the GPU:\n%s", tn_dtype_name(t), axis, pg);
            if (rg && rc) {
                tn_array *h = tn_array_to_host(rg);
                bool same = h && tn_array_size(h) == tn_array_size(rc) && !memcmp(h->data, rc->data, tn_array_nbytes(rc));
                CHECK(same, "Join of %s on axis %d: the GPU's bits differ from the CPU's", tn_dtype_name(t), axis);
                tn_array_free(h);
                cases++;
            }
            tn_array_free(rg); tn_array_free(rc);
            for (int i = 0; i < 3; i++) tn_array_free(v[i]);
        }
    CHECK(cases == 15, "%d cases", cases);
}

TEST(test_products) {
    tn_dtype dts[3] = { TN_F32, TN_F64, TN_F16 };
    for (int di = 0; di < 3; di++) {
        tn_dtype t = dts[di];
        double tol = t == TN_F64 ? 1e-12 : t == TN_F32 ? 1e-4 : 2e-2;
        const int M = 67, K = 45, N = 33;
        tn_array *Av = tn_array_rand_uniform(t, 2, (int64_t[]){ K, M }, -1, 1, 11);    /* used transposed */
        tn_array *Bv = tn_array_rand_uniform(t, 2, (int64_t[]){ K, N }, -1, 1, 12);
        tn_array *cv = tn_array_rand_uniform(t, 1, (int64_t[]){ N }, -1, 1, 13);
        double *A = as_f64(Av), *B = as_f64(Bv), *c = as_f64(cv), *ref = (double *)malloc((size_t)M * N * sizeof *ref);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double acc = c[j];
                for (int k = 0; k < K; k++) acc += A[(size_t)k * M + i] * B[(size_t)k * N + j];
                ref[(size_t)i * N + j] = acc;
            }
        tn_graph *g = tn_graph_new();
        tn_var *a = tn_matrix(g, "A", t), *b = tn_matrix(g, "B", t), *cc = tn_vector(g, "c", t);
        tn_var *y = tn_add(tn_dot(tn_transpose(a, NULL), b), cc);
        tn_var *ins[3] = { a, b, cc };
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 1, .outputs = &y });
        CHECK(f, "%s: %s", tn_dtype_name(t), tn_last_error());
        if (f) {
            tn_array *vals[3] = { Av, Bv, cv }, *r = NULL;
            CHECK(tn_call(f, vals, &r) == TN_OK, "%s: %s", tn_dtype_name(t), tn_last_error());
            double e = r ? max_err(r, ref, (int64_t)M * N) : INFINITY;
            CHECK(e <= tol * K, "%s gemm (A^T B + row bias): error %g", tn_dtype_name(t), e);
            tn_array_free(r);
        }
        tn_function_free(f);
        tn_graph_free(g);
        free(A); free(B); free(c); free(ref);
        tn_array_free(Av); tn_array_free(Bv); tn_array_free(cv);
    }
    /* batched: (4, 5, 6) . (6, 7), and outer */
    tn_array *Xv = tn_array_rand_uniform(TN_F32, 3, (int64_t[]){ 4, 5, 6 }, -1, 1, 21);
    tn_array *Yv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 6, 7 }, -1, 1, 22);
    tn_array *uv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 9 }, -1, 1, 23);
    double *X = as_f64(Xv), *Y = as_f64(Yv), *u = as_f64(uv), ref[4 * 5 * 7], ro[81];
    for (int p = 0; p < 4; p++)
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 7; j++) {
                double acc = 0;
                for (int k = 0; k < 6; k++) acc += X[(p * 5 + i) * 6 + k] * Y[k * 7 + j];
                ref[(p * 5 + i) * 7 + j] = acc;
            }
    for (int i = 0; i < 9; i++) for (int j = 0; j < 9; j++) ro[i * 9 + j] = u[i] * u[j];
    tn_graph *g = tn_graph_new();
    tn_var *xs = tn_tensor3(g, "X", TN_F32), *ys = tn_matrix(g, "Y", TN_F32), *us = tn_vector(g, "u", TN_F32);
    tn_var *outs[2] = { tn_dot(xs, ys), tn_outer(us, us) };
    tn_var *ins[3] = { xs, ys, us };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 2, .outputs = outs });
    CHECK(f, "%s", tn_last_error());
    if (f) {
        tn_array *vals[3] = { Xv, Yv, uv }, *r[2] = { 0 };
        CHECK(tn_call(f, vals, r) == TN_OK, "%s", tn_last_error());
        if (r[0]) CHECK(max_err(r[0], ref, 4 * 5 * 7) <= 1e-5, "batched dot error %g", max_err(r[0], ref, 140));
        if (r[1]) CHECK(max_err(r[1], ro, 81) <= 1e-6, "outer error %g", max_err(r[1], ro, 81));
        tn_array_free(r[0]); tn_array_free(r[1]);
    }
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(Xv); tn_array_free(Yv); tn_array_free(uv);
    free(X); free(Y); free(u);
}

/* gemm's addend, every way it can lie: a row broadcast with beta 1 (the bias
   cuBLASLt adds in its epilogue) and with beta 0.5, a whole matrix, a matrix
   of longer rows (a slice: leading dim 2N), a column; A used transposed or
   not; the shapes changed between calls (a new plan, a new algorithm), in
   float32, float64 and float16, against a float64 reference. */
TEST(test_gemm_addends) {
    tn_dtype dts[3] = { TN_F32, TN_F64, TN_F16 };
    for (int di = 0; di < 3; di++) for (int kind = 0; kind < 5; kind++) for (int tr = 0; tr < 2; tr++) {
        tn_dtype t = dts[di];
        double tol = t == TN_F64 ? 1e-12 : t == TN_F32 ? 1e-4 : 2e-2, beta = kind == 0 ? 1.0 : kind == 1 ? 0.5 : -1.25, alpha = 0.75;
        tn_graph *g = tn_graph_new();
        tn_var *a = tn_matrix(g, "A", t), *b = tn_matrix(g, "B", t);
        tn_var *c = kind <= 1 ? tn_vector(g, "c", t) : kind == 4 ? tn_col(g, "c", t) : tn_matrix(g, "c", t);
        tn_var *cc = kind == 3 ? tn_slice(c, 1, 1, TN_NONE, 1) : c;      /* c is (M, N + 1): its last N columns */
        tn_var *y = tn_gemm(cc, alpha, tr ? tn_transpose(a, NULL) : a, b, beta);
        tn_var *ins[3] = { a, b, c };
        tn_func *f = y ? tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 1, .outputs = &y }) : NULL;
        CHECK(f, "%s kind %d: %s", tn_dtype_name(t), kind, tn_last_error());
        for (int call = 0; f && call < 2; call++) {
            int M = call ? 40 : 67, K = call ? 29 : 45, N = call ? 51 : 33, CN = kind == 3 ? N + 1 : N;
            tn_array *Av = tn_array_rand_uniform(t, 2, tr ? (int64_t[]){ K, M } : (int64_t[]){ M, K }, -1, 1, 11 + call);
            tn_array *Bv = tn_array_rand_uniform(t, 2, (int64_t[]){ K, N }, -1, 1, 12 + call);
            tn_array *cv = kind <= 1 ? tn_array_rand_uniform(t, 1, (int64_t[]){ N }, -1, 1, 13)
                         : tn_array_rand_uniform(t, 2, (int64_t[]){ M, kind == 4 ? 1 : CN }, -1, 1, 13);
            double *A = as_f64(Av), *B = as_f64(Bv), *C = as_f64(cv), *ref = (double *)malloc((size_t)M * N * sizeof *ref);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    double acc = 0, add = kind <= 1 ? C[j] : kind == 4 ? C[i] : C[(size_t)i * CN + (CN - N) + j];
                    for (int k = 0; k < K; k++) acc += (tr ? A[(size_t)k * M + i] : A[(size_t)i * K + k]) * B[(size_t)k * N + j];
                    ref[(size_t)i * N + j] = alpha * acc + beta * add;
                }
            tn_array *vals[3] = { Av, Bv, cv }, *r = NULL;
            CHECK(tn_call(f, vals, &r) == TN_OK, "%s kind %d call %d: %s", tn_dtype_name(t), kind, call, tn_last_error());
            double e = r ? max_err(r, ref, (int64_t)M * N) : INFINITY;
            CHECK(e <= tol * K, "%s gemm addend kind %d, A%s, call %d: error %g", tn_dtype_name(t), kind, tr ? "^T" : "", call, e);
            tn_array_free(r);
            free(A); free(B); free(C); free(ref);
            tn_array_free(Av); tn_array_free(Bv); tn_array_free(cv);
        }
        if (f) {
            char *dp = dprint(f);
            CHECK(dp && strstr(dp, "GpuGemm"), "%s kind %d: the product runs on the GPU:\n%s", tn_dtype_name(t), kind, dp ? dp : "");
            free(dp);
        }
        tn_function_free(f);
        tn_graph_free(g);
    }
}

/* A fused chain (one GPU kernel) and a reduction of it, odd sizes. */
TEST(test_fused_chain_and_reduction) {
    int64_t shape[2] = { 37, (1 << 14) + 3 }, n = shape[0] * shape[1];
    tn_array *xv = tn_array_rand_uniform(TN_F32, 2, shape, -2, 2, 31), *yv = tn_array_rand_uniform(TN_F32, 2, shape, -2, 2, 32);
    double *x = as_f64(xv), *y = as_f64(yv), *ref = (double *)malloc((size_t)n * sizeof *ref), rs[37];
    for (int64_t i = 0; i < n; i++) ref[i] = tanh(x[i] * y[i] + exp(-x[i])) * 0.5 + y[i];
    for (int i = 0; i < 37; i++) { rs[i] = 0; for (int64_t j = 0; j < shape[1]; j++) rs[i] += ref[i * shape[1] + j]; }
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_matrix(g, "x", TN_F32), *b = tn_matrix(g, "y", TN_F32);
    tn_var *z = tn_add(tn_mul(tn_tanh(tn_add(tn_mul(a, b), tn_exp(tn_neg(a)))), tn_scalar_const(g, 0.5)), b);
    tn_var *outs[2] = { z, tn_sum(z, (int[]){ 1 }, 1, false) };
    tn_var *ins[2] = { a, b };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 2, .outputs = outs });
    CHECK(f, "%s", tn_last_error());
    if (f) {
        char *s = dprint(f);
        CHECK(strstr(s, "GpuElemwise{Composite{"), "the chain is one fused GPU kernel:\n%s", s);
        printf("  the reduction runs on the %s\n", strstr(s, "GpuSum") ? "GPU" : "CPU (no GPU reduction kernel yet)");
        free(s);
        tn_array *vals[2] = { xv, yv }, *r[2] = { 0 };
        CHECK(tn_call(f, vals, r) == TN_OK, "%s", tn_last_error());
        if (r[0]) CHECK(max_err(r[0], ref, n) <= 1e-5, "chain error %g", max_err(r[0], ref, n));
        if (r[1]) CHECK(max_err(r[1], rs, 37) <= 1e-5 * (double)shape[1], "sum error %g", max_err(r[1], rs, 37));
        tn_array_free(r[0]); tn_array_free(r[1]);
    }
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(xv); tn_array_free(yv);
    free(x); free(y); free(ref);
}

/* The inverse trigonometric and hyperbolic ops, erfc and relu run in GPU
   kernels, and so do cumsum and cumprod between them (no host round trip);
   the results match float64. */
TEST(test_new_ops_and_cumulative_on_gpu) {
    int64_t shape[2] = { 64, 257 }, n = shape[0] * shape[1];
    tn_array *xv = tn_array_rand_uniform(TN_F32, 2, shape, -0.9, 0.9, 61);
    double *x = as_f64(xv), *rz = (double *)malloc((size_t)n * sizeof *rz), *rq = (double *)malloc((size_t)n * sizeof *rq);
    for (int64_t i = 0; i < shape[0]; i++) {
        double acc = 0;
        for (int64_t j = 0; j < shape[1]; j++) {
            int64_t k = i * shape[1] + j;
            acc += (double)(float)atanh(x[k]) * 0.5;
            rz[k] = asinh(acc) + (x[k] > 0 ? x[k] : 0);
        }
    }
    for (int64_t j = 0; j < shape[1]; j++) {
        double p = 1;
        for (int64_t i = 0; i < shape[0]; i++) {
            int64_t k = i * shape[1] + j;
            p *= (double)(float)cosh(x[k]);
            rq[k] = erfc(p) + atan(x[k]);
        }
    }
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_matrix(g, "x", TN_F32);
    tn_var *z = tn_add(tn_asinh(tn_cumsum(tn_mul(tn_atanh(a), tn_scalar_const(g, 0.5)), 1)), tn_relu(a));
    tn_var *q = tn_add(tn_erfc(tn_cumprod(tn_cosh(a), 0)), tn_atan(a));
    tn_var *outs[2] = { z, q };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &a, .n_outputs = 2, .outputs = outs });
    CHECK(f, "%s", tn_last_error());
    if (f) {
        char *s = dprint(f);
        CHECK(strstr(s, "GpuCumSum{axis=1}") && strstr(s, "GpuCumProd{axis=0}"), "the cumulative ops run on the GPU:\n%s", s);
        CHECK(strstr(s, "GpuElemwise") && tn_function_device_steps(f) > 0, "the elementwise ops run on the GPU:\n%s", s);
        /* one transfer to the device, the input's: every GpuFromHost line names the same node */
        const char *first = strstr(s, "GpuFromHost"), *p = first;
        const char *id0 = first ? strstr(first, "[id ") : NULL;
        bool one = id0 != NULL;
        while (one && (p = strstr(p + 1, "GpuFromHost"))) {
            const char *id = strstr(p, "[id ");
            one = id && strncmp(id, id0, (size_t)(strchr(id0, ']') - id0)) == 0;
        }
        CHECK(one, "one transfer to the device (the input):\n%s", s);
        free(s);
        tn_array *r[2] = { 0 };
        CHECK(tn_call(f, &xv, r) == TN_OK, "%s", tn_last_error());
        if (r[0]) CHECK(max_err(r[0], rz, n) <= 1e-4, "asinh(cumsum(..)) + relu: error %g", max_err(r[0], rz, n));
        if (r[1]) CHECK(max_err(r[1], rq, n) <= 1e-4, "erfc(cumprod(cosh)) + atan: error %g", max_err(r[1], rq, n));
        tn_array_free(r[0]); tn_array_free(r[1]);
    }
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(xv);
    free(x); free(rz); free(rq);
}

/* Eye of symbolic sizes (tn_eye_var) on the GPU, every dtype: GpuEye, with
   n and m read on the host (no GpuFromHost for them: one transfer, k's);
   one function called with new n, m, k each call (k < 0, k >= m, n = 0,
   m = 0) and with k changing at the same shape (replayed graphs must see
   the new k); the same n, m, k call after call makes no driver allocation.
   The reference is j - i == k, computed here. */
static double eye_err(const tn_array *got, int64_t n, int64_t m, int64_t k) {
    if (!got || got->ndim != 2 || got->shape[0] != n || got->shape[1] != m) return INFINITY;
    int64_t size = n * m;
    double *ref = (double *)malloc((size_t)(size > 0 ? size : 1) * sizeof *ref);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) ref[i * m + j] = j - i == k ? 1.0 : 0.0;
    double e = size > 0 ? max_err(got, ref, size) : 0;
    free(ref);
    return e;
}

TEST(test_eye_var_on_gpu) {
    static const tn_dtype dts[] = { TN_F16, TN_F32, TN_F64, TN_I32, TN_I64, TN_BOOL };
    static const int64_t cs[][3] = { {3, 4, 0}, {300, 257, -2}, {5, 3, 7}, {0, 3, 0}, {4, 0, 1}, {64, 64, 1}, {64, 64, -63},
                                     {64, 64, 0}, {64, 64, 5}, {1, 1, 0} };
    for (size_t c = 0; c < sizeof dts / sizeof dts[0]; c++) {
        tn_graph *g = tn_graph_new();
        tn_var *n = tn_scalar(g, "n", TN_I64), *m = tn_scalar(g, "m", TN_I32), *k = tn_scalar(g, "k", TN_I64);
        tn_var *e = tn_eye_var(dts[c], n, m, k);
        tn_func *f = e ? tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = (tn_var *[]){ n, m, k }, .n_outputs = 1,
                                                         .outputs = &e }) : NULL;
        CHECK(f, "%s: %s", tn_dtype_name(dts[c]), tn_last_error());
        if (f) {
            char *s = dprint(f);
            const char *h2d = strstr(s, "GpuFromHost");
            CHECK(strstr(s, "GpuEye") && h2d && !strstr(h2d + 1, "GpuFromHost") && tn_function_device_steps(f) > 0,
                  "%s: GpuEye, one transfer (k's):\n%s", tn_dtype_name(dts[c]), s);
            free(s);
        }
        for (size_t i = 0; f && i < sizeof cs / sizeof cs[0]; i++) {
            tn_array *in[3] = { tn_array_scalar(TN_I64, (double)cs[i][0]), tn_array_scalar(TN_I32, (double)cs[i][1]),
                                tn_array_scalar(TN_I64, (double)cs[i][2]) }, *r = NULL;
            CHECK(tn_call(f, in, &r) == TN_OK, "%s eye(%lld, %lld, %lld): %s", tn_dtype_name(dts[c]), (long long)cs[i][0],
                  (long long)cs[i][1], (long long)cs[i][2], tn_last_error());
            double err = eye_err(r, cs[i][0], cs[i][1], cs[i][2]);
            CHECK(err == 0, "%s eye(%lld, %lld, %lld): error %g", tn_dtype_name(dts[c]), (long long)cs[i][0], (long long)cs[i][1],
                  (long long)cs[i][2], err);
            tn_array_free(r);
            for (int j = 0; j < 3; j++) tn_array_free(in[j]);
        }
        tn_function_free(f);
        tn_graph_free(g);
    }
    /* a steady loop at one n (borrowed output on the device): no driver allocation; k still read each call */
    tn_graph *g = tn_graph_new();
    tn_var *n = tn_scalar(g, "n", TN_I32), *k = tn_scalar(g, "k", TN_I32);
    tn_var *e = tn_gpu_from_host(tn_eye_var(TN_F16, n, NULL, k));
    tn_func *f = e ? tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ n, k }, .n_outputs = 1, .outputs = &e,
                                                     .borrow = true }) : NULL;
    CHECK(f, "%s", tn_last_error());
    tn_array *nv = tn_array_scalar(TN_I32, 200), *kv[3] = { tn_array_scalar(TN_I32, 0), tn_array_scalar(TN_I32, 3), tn_array_scalar(TN_I32, -199) };
    for (int i = 0; f && i < 3; i++) { tn_array *r = NULL; CHECK(tn_call(f, (tn_array *[]){ nv, kv[i % 3] }, &r) == TN_OK, "warm-up: %s", tn_last_error()); }
    uint64_t a0 = CUDA_DEV()->dmem.driver_allocs;
    for (int i = 0; f && i < 30; i++) {
        tn_array *r = NULL;
        int64_t kk = i % 3 == 0 ? 0 : i % 3 == 1 ? 3 : -199;
        CHECK(tn_call(f, (tn_array *[]){ nv, kv[i % 3] }, &r) == TN_OK, "call %d: %s", i, tn_last_error());
        double err = eye_err(r, 200, 200, kk);
        CHECK(err == 0 && r && r->device != TN_HOST, "call %d, k = %lld: error %g", i, (long long)kk, err);
    }
    tn__cuda_synchronize();
    CHECK(CUDA_DEV()->dmem.driver_allocs == a0, "%llu driver allocations in 30 calls of one n",
          (unsigned long long)(CUDA_DEV()->dmem.driver_allocs - a0));
    tn_array_free(nv); for (int i = 0; i < 3; i++) tn_array_free(kv[i]);
    tn_function_free(f);
    tn_graph_free(g);
}

/* cumsum and cumprod on the GPU give the CPU kernel's bits (the same
   sequential loop in the same accumulator type), for every dtype, both
   axes, contiguous and transposed inputs, lines longer and shorter than a
   block; values drawn so products neither vanish nor overflow. */
static tn_array *cum_run(int op, tn_array *x, int axis, bool transpose, char *dp, size_t cap) {
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_matrix(g, "x", x->dtype);
    tn_var *v = transpose ? tn_transpose(a, NULL) : a;
    tn_var *y = tn_gpu_from_host(op == TN_OP_CUMSUM ? tn_cumsum(v, axis) : tn_cumprod(v, axis));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &a, .n_outputs = 1, .outputs = &y });
    tn_array *r = NULL, *h = NULL;
    if (f && dp) {
        FILE *m = fmemopen(dp, cap, "w");
        if (m) { tn_debugprint_function(f, m); fclose(m); }
    }
    if (f && tn_call(f, &x, &r) == TN_OK) h = r && r->device != TN_HOST ? tn_array_to_host(r) : (r ? tn_array_copy(r) : NULL);
    tn_array_free(r);
    tn_function_free(f);
    tn_graph_free(g);
    return h;
}

TEST(test_cumulative_gpu_equals_cpu) {
    static const tn_dtype dts[] = { TN_BOOL, TN_I32, TN_I64, TN_F16, TN_F32, TN_F64 };
    static const int64_t shapes[][2] = { { 3, 700 }, { 300, 5 } };
    int cases = 0;
    for (int di = 0; di < 6; di++)
        for (int si = 0; si < 2; si++)
            for (int op = TN_OP_CUMSUM; op <= TN_OP_CUMPROD; op++)
                for (int axis = 0; axis < 2; axis++)
                    for (int tr = 0; tr < 2; tr++) {
                        tn_dtype t = dts[di];
                        bool prod = op == TN_OP_CUMPROD;
                        tn_array *u = tn_array_rand_uniform(TN_F64, 2, shapes[si], prod ? 0.9 : -3, prod ? 1.1 : 3, 900 + (uint64_t)cases);
                        if (t == TN_BOOL || t == TN_I32 || t == TN_I64) {   /* small ints, negatives too; bools 0/1 */
                            for (int64_t k = 0; k < tn_array_size(u); k++) {
                                int64_t idx[2] = { k / shapes[si][1], k % shapes[si][1] };
                                double v = tn_array_get(u, idx);
                                tn_array_set(u, idx, t == TN_BOOL ? (double)(v > 0) : floor(v * 3));
                            }
                        }
                        tn_array *x = tn_array_astype(u, t);
                        char dp[4096] = "";
                        tn_array *rg = cum_run(op, x, axis, tr, dp, sizeof dp);
                        on_cpu();
                        tn_array *rc = cum_run(op, x, axis, tr, NULL, 0);
                        tn_init(&base_cfg);
                        CHECK(rg && rc, "%s %s axis %d: %s", tn_dtype_name(t), prod ? "cumprod" : "cumsum", axis, tn_last_error());
                        CHECK(strstr(dp, prod ? "GpuCumProd" : "GpuCumSum"), "%s on the GPU:\n%s", prod ? "cumprod" : "cumsum", dp);
                        if (rg && rc) {
                            CHECK(rg->dtype == rc->dtype && tn_array_size(rg) == tn_array_size(rc), "dtype/size");
                            size_t bytes = (size_t)tn_array_size(rc) * tn_dtype_size(rc->dtype);
                            CHECK(tn_array_is_contiguous(rg) && tn_array_is_contiguous(rc) && memcmp(rg->data, rc->data, bytes) == 0,
                                  "%s %s axis %d%s shape (%lld, %lld): GPU bits differ from the CPU's", tn_dtype_name(t),
                                  prod ? "cumprod" : "cumsum", axis, tr ? " transposed" : "", (long long)shapes[si][0], (long long)shapes[si][1]);
                        }
                        tn_array_free(rg); tn_array_free(rc); tn_array_free(x); tn_array_free(u);
                        cases++;
                    }
    printf("  %d cumulative cases, GPU bits equal the CPU's\n", cases);
}

/* Indexing and sorting on the GPU give the CPU kernels' bits: gathers,
   sets, sorts exactly; increments with repeated indices too, since the
   values added are small integers (exact in every order of the atomics).
   Each case: its graph on inputs typed like the arrays, run under
   device=cuda (its debugprint must show the Gpu op) and device=cpu. */
enum { IC_TAKE, IC_ALONG, IC_INDEX, IC_INC, IC_SET, IC_SLICE_INC, IC_SORT, IC_ARGSORT_LONG, IC_TOPK, IC_NLL, IC_COUNT };
static tn_var *ic_build(int c, tn_var *const *in) {
    tn_graph *g = tn_var_graph(in[0]);
    tn_var *v;
    switch (c) {
    case IC_TAKE: return tn_take(tn_transpose(in[0], NULL), in[1], 1);
    case IC_ALONG: return tn_take_along_axis(in[0], in[1], 1);
    case IC_INDEX: return tn_index(in[0], 0, 2, (tn_var *[]){ tn_arange(g, TN_I64, 0, (double)tn_var_dim(in[1], 0), 1), in[1] });
    case IC_INC: return tn_inc_subtensor(tn_take(in[0], in[1], 0), in[2]);
    case IC_SET: return tn_set_subtensor(tn_take(in[0], in[1], 1), in[2]);
    case IC_SLICE_INC: return tn_inc_subtensor(tn_slice(tn_slice(in[0], 0, 1, TN_NONE, 2), 1, TN_NONE, TN_NONE, -1), in[1]);
    case IC_SORT: return tn_sort(in[0], 0);
    case IC_ARGSORT_LONG: return tn_argsort(in[0], 1);
    case IC_TOPK: tn_top_k(in[0], 3, 1, &v, NULL); return v;
    default: {   /* the negative log-likelihood of softmax and its gradient, summed into one output */
        tn_var *ll = tn_index(tn_log(tn_softmax(in[0], 1)), 0, 2, (tn_var *[]){ tn_arange(g, TN_I64, 0, (double)tn_var_dim(in[1], 0), 1), in[1] });
        tn_var *cost = tn_neg(tn_mean(ll, NULL, 0, false));
        return tn_add(tn_grad1(cost, in[0]), cost);
    }
    }
}

static tn_array *ic_run(int c, int n, tn_array *const *x, char *dp, size_t cap) {
    tn_graph *g = tn_graph_new();
    tn_var *in[3];
    for (int i = 0; i < n; i++) in[i] = tn_input(g, "in", x[i]->dtype, x[i]->ndim, x[i]->shape, NULL);
    tn_var *y = ic_build(c, in);
    y = y ? tn_gpu_from_host(y) : NULL;
    tn_func *f = y ? tn_function(g, &(tn_func_desc){ .n_inputs = n, .inputs = in, .n_outputs = 1, .outputs = &y }) : NULL;
    tn_array *r = NULL, *h = NULL;
    if (f && dp) {
        FILE *m = fmemopen(dp, cap, "w");
        if (m) { tn_debugprint_function(f, m); fclose(m); }
    }
    if (f && tn_call(f, x, &r) == TN_OK) h = r && r->device != TN_HOST ? tn_array_to_host(r) : (r ? tn_array_copy(r) : NULL);
    tn_array_free(r);
    tn_function_free(f);
    tn_graph_free(g);
    return h;
}

static tn_array *ic_ints(tn_dtype t, int nd, const int64_t *sh, int64_t lo, int64_t hi, uint64_t seed) {
    tn_array *u = tn_array_rand_uniform(TN_F64, nd, sh, (double)lo, (double)hi, seed);
    for (int64_t k = 0; k < tn_array_size(u); k++) ((double *)u->data)[k] = floor(((double *)u->data)[k]);
    tn_array *r = tn_array_astype(u, t);
    tn_array_free(u);
    return r;
}

TEST(test_index_gpu_equals_cpu) {
    static const char *const gpu_op[IC_COUNT] = { "GpuAdvancedSubtensor{axis=1}", "GpuTakeAlongAxis{axis=1}", "GpuAdvancedSubtensor{axis=0}",
        "GpuAdvancedIncSubtensor1", "GpuAdvancedIncSubtensor{axis=1", "GpuIncSubtensor{", "GpuArgSort{axis=0}", "GpuArgSort{axis=1}",
        "GpuTopK{axis=1, k=3}", "GpuAdvancedIncSubtensor{axis=0" };
    static const tn_dtype dts[] = { TN_BOOL, TN_I32, TN_I64, TN_F16, TN_F32, TN_F64 };
    int cases = 0;
    for (int c = 0; c < IC_COUNT; c++)
        for (int di = 0; di < 6; di++) {
            tn_dtype t = dts[di];
            if (c == IC_NLL && !tn_dtype_is_float(t)) continue;
            tn_array *x[3] = { 0 };
            int n = 2;
            switch (c) {
            case IC_TAKE: x[0] = ic_ints(t, 2, (int64_t[]){ 7, 40 }, -9, 9, 1); x[1] = ic_ints(TN_I32, 2, (int64_t[]){ 3, 5 }, -7, 7, 2); break;
            case IC_ALONG: x[0] = ic_ints(t, 2, (int64_t[]){ 6, 9 }, -9, 9, 3); x[1] = ic_ints(TN_I64, 2, (int64_t[]){ 1, 20 }, -9, 9, 4); break;
            case IC_INDEX: case IC_NLL:
                x[0] = c == IC_NLL ? tn_array_rand_uniform(t, 2, (int64_t[]){ 64, 10 }, -1000, 1000, 5) : ic_ints(t, 2, (int64_t[]){ 64, 10 }, -9, 9, 5);
                x[1] = ic_ints(TN_I64, 1, (int64_t[]){ 64 }, -10, 10, 6); break;
            case IC_INC: x[0] = ic_ints(t, 2, (int64_t[]){ 5, 33 }, -9, 9, 7); x[1] = ic_ints(TN_I64, 1, (int64_t[]){ 4000 }, -5, 5, 8);
                x[2] = ic_ints(t, 2, (int64_t[]){ 4000, 1 }, -2, 3, 9); n = 3; break;
            case IC_SET: x[0] = ic_ints(t, 2, (int64_t[]){ 5, 33 }, -9, 9, 10); x[1] = tn_array_arange(TN_I32, -33, 0, 3);
                x[2] = ic_ints(t, 2, (int64_t[]){ 5, 11 }, -9, 9, 11); n = 3; break;
            case IC_SLICE_INC: x[0] = ic_ints(t, 2, (int64_t[]){ 9, 300 }, -9, 9, 12); x[1] = ic_ints(t, 1, (int64_t[]){ 300 }, -3, 3, 13); break;
            case IC_SORT: x[0] = ic_ints(t, 2, (int64_t[]){ 900, 7 }, -20, 20, 14); n = 1; break;
            case IC_ARGSORT_LONG: x[0] = ic_ints(t, 2, (int64_t[]){ 3, 9000 }, -50, 50, 15); n = 1; break;
            default: x[0] = ic_ints(t, 2, (int64_t[]){ 50, 30 }, -4, 4, 16); n = 1; break;
            }
            if (tn_dtype_is_float(t) && (c == IC_SORT || c == IC_ARGSORT_LONG)) {   /* NaN, -0 and inf among the keys */
                tn_array *f = tn_array_astype(x[0], TN_F64);
                for (int64_t k = 0; k < tn_array_size(f); k += 97) ((double *)f->data)[k] = k % 3 == 0 ? NAN : k % 3 == 1 ? -0.0 : -INFINITY;
                tn_array_free(x[0]);
                x[0] = tn_array_astype(f, t);
                tn_array_free(f);
            }
            char dp[8192] = "";
            tn_array *rg = ic_run(c, n, x, dp, sizeof dp);
            on_cpu();
            tn_array *rc = ic_run(c, n, x, NULL, 0);
            tn_init(&base_cfg);
            CHECK(rg && rc, "case %d %s: %s", c, tn_dtype_name(t), tn_last_error());
            CHECK(strstr(dp, gpu_op[c]) != NULL, "case %d %s: %s not on the GPU:\n%s", c, tn_dtype_name(t), gpu_op[c], dp);
            if (rg && rc && c == IC_NLL) {
                double worst = 0;
                for (int64_t k = 0; k < tn_array_size(rc); k++) {
                    double a = tn_array_get(rg, (int64_t[]){ k / rc->shape[1], k % rc->shape[1] }), b = tn_array_get(rc, (int64_t[]){ k / rc->shape[1], k % rc->shape[1] });
                    CHECK(isfinite(a), "NLL on the GPU: not finite at %lld", (long long)k);
                    worst = fmax(worst, fabs(a - b) / fmax(1, fabs(b)));
                }
                CHECK(worst <= (t == TN_F16 ? 2e-2 : t == TN_F32 ? 1e-4 : 1e-12), "NLL %s: GPU vs CPU %g", tn_dtype_name(t), worst);
            } else if (rg && rc) {
                size_t bytes = (size_t)tn_array_size(rc) * tn_dtype_size(rc->dtype);
                CHECK(rg->dtype == rc->dtype && tn_array_size(rg) == tn_array_size(rc) && memcmp(rg->data, rc->data, bytes) == 0,
                      "case %d %s: GPU bits differ from the CPU's", c, tn_dtype_name(t));
            }
            tn_array_free(rg); tn_array_free(rc);
            for (int i = 0; i < 3; i++) tn_array_free(x[i]);
            cases++;
        }
    printf("  %d index op cases, GPU equals the CPU\n", cases);

    /* an index out of range on the device: the CPU's error, after the kernel */
    tn_array *x = ic_ints(TN_F32, 2, (int64_t[]){ 5, 4 }, -9, 9, 20), *i = tn_array_arange(TN_I64, 0, 5, 1);
    tn_array *r = ic_run(IC_INDEX, 2, (tn_array *[]){ x, i }, NULL, 0);     /* x[arange(5), i]: only i[4] = 4 is out */
    CHECK(r == NULL, "out of range on the GPU must fail");
    CHECK_ERR(TN_ERR_INVALID, "index 4 is out of bounds for axis 1 with size 4");
    tn_array_free(r); tn_array_free(x); tn_array_free(i);

    /* rows of 8 float32 (32 bytes) gathered as 16-byte units: a bad row still names its index */
    tn_graph *g = tn_graph_new();
    tn_var *tv = tn_input(g, "table", TN_F32, 2, (int64_t[]){ 5, 8 }, NULL), *iv = tn_input(g, "rows", TN_I64, 1, (int64_t[]){ 3 }, NULL);
    tn_var *y = tn_gpu_from_host(tn_take(tv, iv, 0));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ tv, iv }, .n_outputs = 1, .outputs = &y });
    x = ic_ints(TN_F32, 2, (int64_t[]){ 5, 8 }, -9, 9, 21);
    i = tn_array_from_data(TN_I64, 1, (int64_t[]){ 3 }, (int64_t[]){ 4, 0, 5 });
    r = NULL;
    CHECK(f && tn_call(f, (tn_array *[]){ x, i }, &r) != TN_OK, "row 5 of 5 on the GPU must fail");
    CHECK_ERR(TN_ERR_INVALID, "index 5 is out of bounds for axis 0 with size 5");
    tn_array_free(r); tn_array_free(i);
    i = tn_array_from_data(TN_I64, 1, (int64_t[]){ 3 }, (int64_t[]){ 4, 0, -5 });
    CHECK(f && tn_call(f, (tn_array *[]){ x, i }, &r) == TN_OK && r, "rows 4, 0, -5: %s", tn_last_error());
    {   /* the gather reads its index check back as it runs: no graph is tried (none fails to capture) */
        int64_t caps = -1;
        const char *why = NULL;
        tn_array_free(r);
        r = NULL;
        CHECK(f && tn_call(f, (tn_array *[]){ x, i }, &r) == TN_OK && r, "rows 4, 0, -5 again: %s", tn_last_error());
        if (f) tn__replay_stats(f, NULL, &caps, &why);
        CHECK(caps == 0 && why && strstr(why, "AdvancedSubtensor1") && strstr(why, "waits for the device as it runs"), "captures %lld: %s",
              (long long)caps, why ? why : "(null)");
    }
    tn_array *h = r ? tn_array_to_host(r) : NULL;
    for (int k = 0; h && k < 24; k++) {
        int64_t src = (k / 8 == 0 ? 4 : 0) * 8 + k % 8;
        CHECK(((float *)h->data)[k] == ((float *)x->data)[src], "row gather: element %d is %g, want %g", k, ((float *)h->data)[k], ((float *)x->data)[src]);
    }
    tn_array_free(h); tn_array_free(r); tn_array_free(i); tn_array_free(x);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Convolutions and pooling on the GPU: im2col/col2im and pooling kernels
   and cuBLAS products, forward and gradients (a LeNet-like step: conv, relu, max pool,
   conv transpose, avg pool), float32, float64 and float16 storage, equal to
   the CPU's (the gathers give the same bits; the products differ by cuBLAS's
   summation order). */
static int cv_run(tn_dtype t, bool gpu, tn_array **res, char *dp, size_t cap) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", t, 4, (int64_t[]){ -1, 3, 12, 10 }, NULL), *w = tn_input(g, "w", t, 4, (int64_t[]){ 8, 3, 3, 3 }, NULL);
    tn_var *wt = tn_input(g, "wt", t, 4, (int64_t[]){ 8, 2, 2, 2 }, NULL);
    tn_conv_opts o, pool, tr, ap;
    memset(&o, 0, sizeof o);
    o.padding[0] = o.padding[1] = 1;
    pool = tr = ap = o;
    pool.padding[0] = pool.padding[1] = 0; pool.kernel[0] = pool.kernel[1] = 2;
    tr.padding[0] = tr.padding[1] = 0; tr.stride[0] = tr.stride[1] = 2; tr.groups = 2;
    ap.kernel[0] = 3; ap.kernel[1] = 2; ap.avg_exclude_pad = true; ap.padding[1] = 1; ap.padding[0] = 1;
    tn_var *h = tn_max_pool2d(tn_relu(tn_conv2d(x, w, &o)), &pool);            /* (N, 8, 6, 5) */
    tn_var *u = tn_avg_pool2d(tn_conv2d_transpose(h, wt, &tr), &ap);          /* (N, 4, 12, 10) -> avg */
    tn_var *cost = tn_sum(tn_sqr(u), NULL, 0, false);
    tn_var *gr[3];
    tn_var *wrt[3] = { x, w, wt };
    tn_result r = tn_grad(cost, 3, wrt, gr, NULL);
    int n_out = 0;
    if (r == TN_OK) {
        tn_var *outs[4] = { tn_gpu_from_host(u), tn_gpu_from_host(gr[0]), tn_gpu_from_host(gr[1]), tn_gpu_from_host(gr[2]) };
        tn_config c = base_cfg;
        c.device = gpu ? TN_DEVICE_CUDA : TN_DEVICE_CPU;
        tn_init(&c);
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = wrt, .n_outputs = 4, .outputs = outs });
        if (f && dp) { FILE *m = fmemopen(dp, cap, "w"); if (m) { tn_debugprint_function(f, m); fclose(m); } }
        tn_array *xa = tn_array_rand_uniform(t, 4, (int64_t[]){ 5, 3, 12, 10 }, -1, 1, 31), *wa = tn_array_rand_uniform(t, 4, (int64_t[]){ 8, 3, 3, 3 }, -0.5, 0.5, 32);
        tn_array *ta = tn_array_rand_uniform(t, 4, (int64_t[]){ 8, 2, 2, 2 }, -0.5, 0.5, 33), *o4[4] = { 0 };
        if (f && tn_call(f, (tn_array *[]){ xa, wa, ta }, o4) == TN_OK)
            for (int i = 0; i < 4; i++) { res[i] = tn_array_astype(o4[i], TN_F64); n_out++; }
        else fprintf(stderr, "conv on the %s: %s\n", gpu ? "GPU" : "CPU", tn_last_error());
        for (int i = 0; i < 4; i++) tn_array_free(o4[i]);
        tn_array_free(xa); tn_array_free(wa); tn_array_free(ta);
        tn_function_free(f);
        tn_init(&base_cfg);
    }
    tn_graph_free(g);
    return n_out;
}

TEST(test_conv_gpu_equals_cpu) {
    static const tn_dtype ts[3] = { TN_F32, TN_F64, TN_F16 };
    static const double tol[3] = { 2e-5, 1e-12, 2e-2 };
    for (int k = 0; k < 3; k++) {
        tn_array *rg[4] = { 0 }, *rc[4] = { 0 };
        char dp[16384] = "";
        int ng = cv_run(ts[k], true, rg, dp, sizeof dp), nc = cv_run(ts[k], false, rc, NULL, 0);
        CHECK(ng == 4 && nc == 4, "%s: ran %d and %d", tn_dtype_name(ts[k]), ng, nc);
        CHECK(strstr(dp, "GpuIm2Col{") && strstr(dp, "GpuCol2Im{") && strstr(dp, "GpuPool{") && !strstr(dp, " Im2Col{") && !strstr(dp, " Col2Im{") &&
              !strstr(dp, " Pool{"), "%s: im2col, col2im and pooling on the GPU:\n%s", tn_dtype_name(ts[k]), dp);
        const char *what[4] = { "forward", "d/dx", "d/dw", "d/dwt" };
        for (int i = 0; i < 4 && ng == 4 && nc == 4; i++) {
            int64_t n = tn_array_size(rc[i]);
            double worst = 0, scale = 0;
            const double *a = (const double *)rg[i]->data, *b = (const double *)rc[i]->data;
            for (int64_t j = 0; j < n; j++) scale = fmax(scale, fabs(b[j]));
            for (int64_t j = 0; j < n; j++) worst = fmax(worst, fabs(a[j] - b[j]) / fmax(fabs(b[j]), scale * 1e-2));
            CHECK(n == tn_array_size(rg[i]) && worst <= tol[k], "%s %s: GPU vs CPU %g", tn_dtype_name(ts[k]), what[i], worst);
        }
        for (int i = 0; i < 4; i++) { tn_array_free(rg[i]); tn_array_free(rc[i]); }
    }
    printf("  conv, pool, conv_transpose and their gradients: GPU equals the CPU (float32, float64, float16)\n");
}

/* The Print op in a GPU function: the value is copied to the host to be
   printed, and the results are the CPU's. */
TEST(test_print_on_gpu) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *p = tn_print(tn_exp(x), "exp of x", TN_PRINT_SHAPE | TN_PRINT_MAX);
    tn_var *y = tn_gpu_from_host(tn_mul(p, tn_lit(p, 3)));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    char *dp = f ? dprint(f) : NULL;
    CHECK(dp && strstr(dp, "GpuPrint{exp of x}") && strstr(dp, "GpuElemwise"), "debugprint:\n%s", dp ? dp : "");
    free(dp);
    tn_array *xa = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 1000 }, -2, 2, 5), *o = NULL;
    fflush(stdout);
    FILE *t = tmpfile();
    int saved = dup(1);
    if (t && saved >= 0) dup2(fileno(t), 1);
    tn_result rc = f ? tn_call(f, &xa, &o) : TN_ERR_NULL;
    fflush(stdout);
    if (t && saved >= 0) { dup2(saved, 1); close(saved); }
    char txt[512] = "";
    if (t) { rewind(t); size_t got = fread(txt, 1, sizeof txt - 1, t); txt[got] = 0; fclose(t); }
    CHECK(rc == TN_OK && o, "call: %s", tn_last_error());
    double mx = -INFINITY, got_max = NAN;
    for (int64_t k = 0; k < 1000; k++) mx = fmax(mx, exp(tn_array_get(xa, &k)));
    const char *at = strstr(txt, "exp of x max = ");
    if (at) got_max = strtod(at + 15, NULL);
    CHECK(strstr(txt, "exp of x shape = (1000,)\n") && at && !strstr(at + 1, "exp of x max") && fabs(got_max - mx) / mx < 1e-6,
          "printed once, after the exp ran (max %g, want %g):\n%s", got_max, mx, txt);
    tn_array *h = o ? tn_array_to_host(o) : NULL;
    double worst = 0;
    for (int64_t k = 0; h && k < 1000; k++) {
        double xv = tn_array_get(xa, &k), want = 3.0 * exp(xv);
        worst = fmax(worst, fabs(tn_array_get(h, &k) - want) / want);
    }
    CHECK(h && worst < 1e-6, "values through the print: error %g", worst);
    tn_array_free(h); tn_array_free(o); tn_array_free(xa);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Copied outputs are the arrays their steps wrote: a device output is a new
   device array each call (caching allocator), a host output is pinned memory
   HostFromGpu copied straight into; both go back to their caches when freed,
   so a steady loop that frees each result makes no driver allocation. */
TEST(test_fresh_outputs_on_device_and_pinned) {
    int64_t n = 10 * 30 * 768;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -3, 3, 23);
    double *x64 = as_f64(xv), *ref = (double *)malloc((size_t)n * sizeof *ref);
    for (int64_t i = 0; i < n; i++) ref[i] = exp(x64[i]);
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_shared(g, "x", xv);
    tn_var *y = tn_exp(x), *yd = tn_gpu_from_host(y);
    tn_func *fh = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .name = "exp_host" });
    tn_func *fd = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &yd, .name = "exp_device_copy" });
    CHECK(fh && fd, "compile: %s", tn_last_error());
    if (!fh || !fd) goto out;
    const char *names[2] = { "pinned host", "device" };
    tn_func *fs[2] = { fh, fd };
    for (int w = 0; w < 2; w++) {
        tn_array *r1 = NULL, *r2 = NULL;
        CHECK(tn_call(fs[w], NULL, &r1) == TN_OK && tn_call(fs[w], NULL, &r2) == TN_OK, "%s: %s", names[w], tn_last_error());
        if (!r1 || !r2) { tn_array_free(r1); tn_array_free(r2); continue; }
        CHECK(r1 != r2 && r1->base != r2->base && r1->data != r2->data && !r1->live_gen && !r2->live_gen,
              "%s: two calls, two caller-owned arrays", names[w]);
        CHECK(r1->device == (w ? 0 : TN_HOST) && r2->device == r1->device, "%s: on device %d", names[w], r1->device);
        if (w == 0) CHECK(r1->base->free_fn == tn__cuda_host_free && r2->base->free_fn == tn__cuda_host_free,
                          "host outputs are pinned blocks of the back end's cache");
        else CHECK(r1->base->free_fn == NULL, "device outputs come from the device allocator");
        CHECK(max_err(r1, ref, n) <= 2e-6 && max_err(r2, ref, n) <= 2e-6, "%s: errors %g %g", names[w], max_err(r1, ref, n), max_err(r2, ref, n));
        size_t cached = CUDA_DEV()->hmem.cached_bytes, dlive = CUDA_DEV()->dmem.live_bytes, hlive = CUDA_DEV()->hmem.live_bytes;
        tn_array_free(r1);
        tn_array_free(r2);
        if (w == 0) CHECK(CUDA_DEV()->hmem.cached_bytes >= cached + 2 * (size_t)n * 4 && CUDA_DEV()->hmem.live_bytes + 2 * (size_t)n * 4 <= hlive,
                          "freed pinned outputs went back to the cache (cached %zu -> %zu)", cached, CUDA_DEV()->hmem.cached_bytes);
        else CHECK(CUDA_DEV()->dmem.live_bytes + 2 * (size_t)n * 4 <= dlive, "freed device outputs went back to the cache");
        uint64_t d0 = CUDA_DEV()->dmem.driver_allocs, h0 = CUDA_DEV()->hmem.driver_allocs;
        size_t dl0 = CUDA_DEV()->dmem.live_bytes, hl0 = CUDA_DEV()->hmem.live_bytes;
        tn__cuda_synchronize();
        double t0 = now_us();
        tn_array *r = NULL;
        for (int it = 0; it < 500; it++) { if (tn_call(fs[w], NULL, &r) != TN_OK) break; tn_array_free(r); }
        tn__cuda_synchronize();
        double t1 = now_us();
        CHECK(CUDA_DEV()->dmem.driver_allocs == d0 && CUDA_DEV()->hmem.driver_allocs == h0, "%s: %llu device and %llu pinned driver allocations in a steady loop",
              names[w], (unsigned long long)(CUDA_DEV()->dmem.driver_allocs - d0), (unsigned long long)(CUDA_DEV()->hmem.driver_allocs - h0));
        CHECK(CUDA_DEV()->dmem.live_bytes == dl0 && CUDA_DEV()->hmem.live_bytes == hl0, "%s: the loop kept no memory", names[w]);
        printf("  func exp 230400 f32, result %-14s %8.2f us per call (500 calls, copied, freed each call)\n", names[w], (t1 - t0) / 500);
    }
out:
    tn_function_free(fh); tn_function_free(fd);
    tn_graph_free(g);
    tn_array_free(xv);
    free(x64); free(ref);
}

/* Inputs passed each call reach the device by one DMA from the caller's
   buffer once it is page-locked (registered at its second copy, unregistered
   when freed), and outputs come back with one wait: the caller's array is
   changed in place between calls and each result follows it; an owned
   array, a view of a larger one and a tn_array_wrap of malloc'd memory;
   under 64 KiB it stages. Freed, the memory is no longer page-locked. */
static bool host_locked(void *p) {      /* asked only where it should be (a failed driver call is an error to the sanitizer) */
    unsigned fl = 0;
    return tn__cuda.cu.cuMemHostGetFlags && tn__cuda.cu.cuMemHostGetFlags(&fl, p) == TN__CUDA_SUCCESS;
}
static bool host_unlocked(void *p, size_t n) {   /* registering it succeeds: nobody had it page-locked */
    if (tn__cuda.cu.cuMemHostRegister_v2(p, n, 0) != TN__CUDA_SUCCESS) return false;
    return tn__cuda.cu.cuMemHostUnregister(p) == TN__CUDA_SUCCESS;
}

TEST(test_passed_inputs_registered) {
    enum { R = 300, C = 200 };        /* 234 KiB of float32 */
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F32, 2, (int64_t[]){ -1, C }, NULL), *v = tn_input(g, "v", TN_F32, 1, (int64_t[]){ C }, NULL);
    int ax = 1;
    tn_var *outs[2] = { tn_sum(tn_mul(tn_exp(tn_mul(x, tn_lit(x, 0.25))), v), &ax, 1, false), tn_mul(x, tn_lit(x, 2)) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, v }, .n_outputs = 2, .outputs = outs, .name = "passed" });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array *big = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 2 * R, C }, -2, 2, 5);
    tn_array *own = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ R, C }, -2, 2, 6);
    tn_array *view = tn_array_slice(big, 0, R / 2, R / 2 + R, 1);
    float *mem = (float *)malloc((size_t)R * C * sizeof(float));
    for (int64_t i = 0; i < (int64_t)R * C; i++) mem[i] = (float)sin(0.37 * (double)i);
    tn_array *wrap = tn_array_wrap(TN_F32, 2, (int64_t[]){ R, C }, NULL, mem);
    tn_array *small = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 8, C }, -2, 2, 7);
    tn_array *vv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ C }, -1, 1, 8);
    tn_array *xs[4] = { own, view, wrap, small };
    const char *names[4] = { "owned", "view", "wrap", "small" };
    CHECK(f && view && wrap && big && own && small && vv, "setup: %s", tn_last_error());
    for (int w = 0; f && w < 4; w++) {
        tn_array *X = xs[w];
        int64_t rows = X->shape[0];
        for (int call = 0; call < 4; call++) {
            /* the caller writes new values in place before each call */
            for (int64_t i = 0; i < rows; i++)
                for (int j = 0; j < C; j++) {
                    float *e = (float *)((char *)X->data + i * X->strides[0] + j * X->strides[1]);
                    *e = (float)cos(0.011 * (double)(i * C + j) + 0.7 * call + w);
                }
            tn_array *o[2] = { NULL, NULL };
            tn_result r = tn_call(f, (tn_array *[]){ X, vv }, o);
            CHECK(r == TN_OK, "%s call %d: %s", names[w], call, tn_last_error());
            if (r != TN_OK) break;
            double e0 = 0, e1 = 0;
            const float *V = (const float *)vv->data, *O0 = (const float *)o[0]->data, *O1 = (const float *)o[1]->data;
            for (int64_t i = 0; i < rows; i++) {
                double acc = 0;
                for (int j = 0; j < C; j++) {
                    double xe = (double)*(const float *)((const char *)X->data + i * X->strides[0] + j * X->strides[1]);
                    acc += exp(xe / 4) * V[j];
                    e1 = fmax(e1, fabs(O1[i * C + j] - 2 * xe));
                }
                e0 = fmax(e0, fabs(O0[i] - acc) / fmax(1, fabs(acc)));
            }
            CHECK(e0 < 1e-5 && e1 == 0, "%s call %d: errors %g %g (the result follows the caller's new values)", names[w], call, e0, e1);
            CHECK(o[0]->device == TN_HOST && o[1]->device == TN_HOST, "%s: host outputs", names[w]);
            tn_array_free(o[0]); tn_array_free(o[1]);
        }
        char *p = w == 2 ? (char *)mem : (char *)X->base->data;
        if (w != 3) CHECK(X->base->pin == 1 && host_locked(p), "%s: page-locked after 4 calls (state %d)", names[w], X->base->pin);
        else CHECK(X->base->pin == 0 && host_unlocked(X->data, tn_array_nbytes(X)), "small: staged, not page-locked");
    }
    /* a loop as the seed's: the same arrays, new values each call, outputs
       freed: after the first calls the kernels and copies replay as one graph
       (x by DMA from its page-locked buffer, v packed into the staging
       buffer before each launch), and each result follows the new values */
    int64_t rep0 = 0, rep1 = 0;
    const char *why = "";
    if (f) tn__replay_stats(f, &rep0, NULL, &why);
    for (int call = 0; f && call < 12; call++) {
        float *xd = (float *)own->data, *vd = (float *)vv->data;
        for (int64_t i = 0; i < (int64_t)R * C; i++) xd[i] = (float)sin(0.003 * (double)i + call);
        for (int j = 0; j < C; j++) vd[j] = (float)cos(0.05 * j - call);
        tn_array *o[2] = { NULL, NULL };
        CHECK(tn_call(f, (tn_array *[]){ own, vv }, o) == TN_OK, "replay loop call %d: %s", call, tn_last_error());
        if (!o[0] || !o[1]) break;
        double e0 = 0;
        for (int i = 0; i < R; i += 37) {
            double acc = 0;
            for (int j = 0; j < C; j++) acc += exp((double)xd[i * C + j] / 4) * vd[j];
            e0 = fmax(e0, fabs(((const float *)o[0]->data)[i] - acc) / fmax(1, fabs(acc)));
        }
        CHECK(e0 < 1e-5 && ((const float *)o[1]->data)[R * C - 1] == 2 * xd[R * C - 1], "replay loop call %d: error %g", call, e0);
        tn_array_free(o[0]); tn_array_free(o[1]);
    }
    if (f) tn__replay_stats(f, &rep1, NULL, &why);
    CHECK(tn_get_config()->no_cuda_graph || tn_get_config()->launch_blocking || rep1 - rep0 >= 8,
          "passed inputs and host outputs replay as one graph: %lld replays in 12 calls (%s)", (long long)(rep1 - rep0), why);
    printf("  passed inputs, host outputs: %lld of 12 calls replayed%s%s\n", (long long)(rep1 - rep0), *why ? ": " : "", why);
    /* freed: unregistered; malloc'd memory at the same place registers again */
    tn_array_free(wrap);
    CHECK(host_unlocked(mem, (size_t)R * C * sizeof(float)), "the wrap freed, its memory is no longer page-locked");
    wrap = tn_array_wrap(TN_F32, 2, (int64_t[]){ R, C }, NULL, mem);
    for (int call = 0; f && call < 3; call++) {
        tn_array *o[2] = { NULL, NULL };
        CHECK(tn_call(f, (tn_array *[]){ wrap, vv }, o) == TN_OK, "wrap again, call %d: %s", call, tn_last_error());
        CHECK(o[1] && ((const float *)o[1]->data)[7] == 2 * mem[7], "wrap again: output follows the memory");
        tn_array_free(o[0]); tn_array_free(o[1]);
    }
    CHECK(wrap->base->pin == 1 && host_locked(mem), "a new wrap of the memory registers again");
    tn_array_free(wrap);
    tn_array_free(view);
    CHECK(big->base->pin == 1 && host_locked(big->base->data), "a view freed: the buffer is still alive and page-locked");
    tn_array_free(big);
    tn_array_free(own); tn_array_free(small); tn_array_free(vv);
    free(mem);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Update targets computed on the device live there: y <- exp(x) and the
   all-shared lin <- m.x + b (Gemm: b copied into the destination, beta = 1)
   run with no transfer, swap device buffers, and get_value reads them back. */
TEST(test_update_targets_on_device) {
    int64_t n = 4099;
    const int M = 130, K = 70, N = 90;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -2, 2, 71), *zv = tn_array_zeros(TN_F32, 1, &n);
    tn_array *Mv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ M, K }, -1, 1, 72);
    tn_array *Xv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ K, N }, -1, 1, 73);
    tn_array *Bv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ M, N }, -1, 1, 74), *Lv = tn_array_zeros(TN_F32, 2, (int64_t[]){ M, N });
    double *x = as_f64(xv), *m = as_f64(Mv), *xm = as_f64(Xv), *b = as_f64(Bv);
    double *ry = (double *)malloc((size_t)n * sizeof *ry), *rl = (double *)malloc((size_t)M * N * sizeof *rl);
    for (int64_t i = 0; i < n; i++) ry[i] = exp(x[i]);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = b[i * N + j];
            for (int k = 0; k < K; k++) acc += m[i * K + k] * xm[k * N + j];
            rl[i * N + j] = acc;
        }
    tn_graph *g = tn_graph_new();
    tn_var *sx = tn_shared(g, "x", xv), *sy = tn_shared(g, "y", zv);
    tn_var *sm = tn_shared(g, "m", Mv), *sxm = tn_shared(g, "xm", Xv), *sb = tn_shared(g, "b", Bv), *sl = tn_shared(g, "lin", Lv);
    tn_update ups[2] = { { sy, tn_exp(sx) }, { sl, tn_add(tn_dot(sm, sxm), sb) } };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_updates = 2, .updates = ups, .name = "device_updates" });
    CHECK(f, "compile: %s", tn_last_error());
    if (f) {
        char *s = dprint(f);
        CHECK(tn_shared_get(sy)->device == 0 && tn_shared_get(sl)->device == 0, "targets on the device (y %d, lin %d)\n%s",
              tn_shared_get(sy)->device, tn_shared_get(sl)->device, s);
        CHECK(strstr(s, "GpuGemm") && strstr(s, "GpuElemwise{exp") && !strstr(s, "HostFromGpu") && !strstr(s, "GpuFromHost"),
              "no transfers:\n%s", s);
        free(s);
        for (int call = 0; call < 3; call++) {
            const void *before = tn_shared_get(sl)->data;
            CHECK(tn_call(f, NULL, NULL) == TN_OK, "call %d: %s", call, tn_last_error());
            CHECK(tn_shared_get(sl)->device == 0 && tn_shared_get(sl)->data != before, "call %d: lin swapped device buffers", call);
            tn_array *gy = tn_shared_get_value(sy), *gl = tn_shared_get_value(sl);
            CHECK(gy && gy->device == TN_HOST && max_err(gy, ry, n) <= 2e-6, "call %d: y error %g", call, gy ? max_err(gy, ry, n) : INFINITY);
            CHECK(gl && max_err(gl, rl, (int64_t)M * N) <= 1e-5 * K, "call %d: lin error %g (bias copied each call, beta = 1)", call,
                  gl ? max_err(gl, rl, (int64_t)M * N) : INFINITY);
            tn_array_free(gy); tn_array_free(gl);
        }
        uint64_t d0 = CUDA_DEV()->dmem.driver_allocs, h0 = CUDA_DEV()->hmem.driver_allocs;
        for (int it = 0; it < 100; it++) tn_call(f, NULL, NULL);
        tn__cuda_synchronize();
        CHECK(CUDA_DEV()->dmem.driver_allocs == d0 && CUDA_DEV()->hmem.driver_allocs == h0, "%llu driver allocations in 100 steady calls",
              (unsigned long long)(CUDA_DEV()->dmem.driver_allocs - d0 + CUDA_DEV()->hmem.driver_allocs - h0));
        /* set_value keeps the target on the device; the next call overwrites it */
        CHECK(tn_shared_set_value(sl, Bv) == TN_OK && tn_shared_get(sl)->device == 0, "set_value: %s", tn_last_error());
        CHECK(tn_call(f, NULL, NULL) == TN_OK, "%s", tn_last_error());
        tn_array *gl = tn_shared_get_value(sl);
        CHECK(gl && max_err(gl, rl, (int64_t)M * N) <= 1e-5 * K, "after set_value: lin error %g", gl ? max_err(gl, rl, (int64_t)M * N) : INFINITY);
        tn_array_free(gl);
    }
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(xv); tn_array_free(zv); tn_array_free(Mv); tn_array_free(Xv); tn_array_free(Bv); tn_array_free(Lv);
    free(x); free(m); free(xm); free(b); free(ry); free(rl);
}

/* The same graph compiled under device=cuda and device=cpu gives the same numbers. */
static tn_array *run_softplus_chain(const tn_array *in, char *placed, size_t cap) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32);
    tn_var *y = tn_softplus(tn_sub(tn_mul(x, x), tn_scalar_const(g, 1.5)));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    tn_array *r = NULL;
    if (f) {
        char *s = dprint(f);
        snprintf(placed, cap, "%s", s);
        free(s);
        if (tn_call(f, (tn_array *const *)&in, &r) != TN_OK) r = NULL;
    }
    tn_function_free(f);
    tn_graph_free(g);
    return r;
}

TEST(test_cuda_and_cpu_agree) {
    tn_array *in = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 123, 77 }, -3, 3, 41);
    char pg[4096], pc[4096];
    tn_array *rg = run_softplus_chain(in, pg, sizeof pg);
    on_cpu();
    tn_array *rc = run_softplus_chain(in, pc, sizeof pc);
    tn_init(&base_cfg);
    CHECK(rg && rc, "%s", tn_last_error());
    CHECK(strstr(pg, "Gpu") && !strstr(pc, "Gpu"), "placement: cuda\n%s\ncpu\n%s", pg, pc);
    if (rg && rc) {
        double *c = as_f64(rc);
        double e = max_err(rg, c, tn_array_size(rc));
        CHECK(e <= 2e-6, "device=cuda vs device=cpu: max error %g", e);
        free(c);
    }
    tn_array_free(rg); tn_array_free(rc); tn_array_free(in);
}

/* Random draws on the GPU give the CPU's bits: every distribution and dtype
   (odd sizes, two calls, a second draw of the stream), device=cuda against
   device=cpu, compared bit for bit; and dropout's mask fuses with its
   neighbours into one kernel after the draw. */
static tn_array *run_draws(int dist, tn_dtype t, char *placed, size_t cap) {
    tn_graph *g = tn_graph_new();
    tn_rstream *s = tn_random_stream(g, 0xfeedbeefcafe1234ull);
    int64_t sh[2] = { 333, 1001 };
    tn_var *skip = tn_random_uniform(s, TN_F32, 1, sh, 0, 1);
    tn_var *y = dist == TN_RAND_UNIFORM ? tn_random_uniform(s, t, 2, sh, -1.5, 2.5)
              : dist == TN_RAND_NORMAL ? tn_random_normal(s, t, 2, sh, 0.5, 2)
              : dist == TN_RAND_BERNOULLI ? tn_random_bernoulli(s, t, 2, sh, 0.3) : tn_random_randint(s, t, 2, sh, -1000, 1000003);
    tn_var *outs[2] = { y, skip };
    tn_func *f = skip && y ? tn_function(g, &(tn_func_desc){ .n_outputs = 2, .outputs = outs }) : NULL;
    tn_array *r[2] = { 0 }, *keep = NULL;
    for (int call = 0; f && call < 2; call++) {
        tn_array_free(r[0]); tn_array_free(r[1]);
        r[0] = r[1] = NULL;
        if (tn_call(f, NULL, r) != TN_OK) break;
    }
    if (f) { char *p = dprint(f); snprintf(placed, cap, "%s", p); free(p); }
    keep = r[0];
    tn_array_free(r[1]);
    tn_function_free(f);
    tn_graph_free(g);
    return keep;
}

TEST(test_random_gpu_equals_cpu) {
    int dists[] = { TN_RAND_UNIFORM, TN_RAND_NORMAL, TN_RAND_BERNOULLI, TN_RAND_RANDINT };
    int cases = 0;
    for (int k = 0; k < 4; k++)
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
            if (tn__random_cuda_source(dists[k], t, NULL, 0) <= 0) continue;
            char pg[4096], pc[4096];
            tn_array *rg = run_draws(dists[k], t, pg, sizeof pg);
            on_cpu();
            tn_array *rc = run_draws(dists[k], t, pc, sizeof pc);
            tn_init(&base_cfg);
            CHECK(rg && rc, "distribution %d %s: %s", dists[k], tn_dtype_name(t), tn_last_error());
            CHECK(strstr(pg, "GpuRandom{") && !strstr(pc, "Gpu"), "placement: cuda\n%s\ncpu\n%s", pg, pc);
            if (rg && rc) {
                tn_array *h = tn_array_to_host(rg);
                int64_t n = tn_array_size(rc), bad = 0, first = -1;
                size_t es = tn_dtype_size(t);
                for (int64_t i = 0; h && i < n; i++)
                    if (memcmp((const char *)h->data + i * (int64_t)es, (const char *)rc->data + i * (int64_t)es, es)) { bad++; if (first < 0) first = i; }
                CHECK(h && bad == 0, "distribution %d %s: %lld of %lld elements differ from the CPU's bits (first: %lld)", dists[k],
                      tn_dtype_name(t), (long long)bad, (long long)n, (long long)first);
                tn_array_free(h);
                cases++;
            }
            tn_array_free(rg); tn_array_free(rc);
        }
    printf("  %d random draws bit-equal on the GPU and the CPU\n", cases);
    CHECK(cases == 14, "%d cases", cases);
    /* exp(dropout(x)): one fused kernel (the mask drawn where it is used, the scaling, exp) */
    tn_graph *g = tn_graph_new();
    tn_rstream *s = tn_random_stream(g, 3);
    tn_var *x = tn_matrix(g, "x", TN_F32), *y = tn_exp(tn_dropout(s, x, 0.25));
    tn_func *f = y ? tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y }) : NULL;
    CHECK(f, "%s", tn_last_error());
    if (f) {
        char *p = dprint(f);
        int comps = 0;
        for (const char *q = p; (q = strstr(q, "Composite{")); q++) comps++;
        CHECK(!strstr(p, "Random{") && strstr(p, "GpuElemwise{Composite{exp(where(random{bernoulli,draw=0}(") && comps == 1,
              "dropout on the GPU:\n%s", p);
        free(p);
    }
    tn_function_free(f);
    tn_graph_free(g);
}

/* Draws fused into elementwise kernels on the GPU give the CPU's bits (the
   CPU's fused draw is compared with the unfused op in test_random): every
   distribution and dtype, beside float16, float32 and float64 operands (a
   Philox block shared by a thread's vector, or drawn per element), a
   variable broadcast at call time and a transposed one (the strided kernel,
   the draw's index apart from the element's), two draws in one kernel, two
   calls. */
static tn_array *run_fused_draw(int dist, tn_dtype t, tn_dtype xt, int v, tn_array *const *in, char *placed, size_t cap) {
    tn_graph *g = tn_graph_new();
    tn_rstream *s = tn_random_stream(g, 0x5eed0123456789ull);
    tn_var *x = tn_matrix(g, "x", xt), *u = tn_matrix(g, "u", xt), *xs = v == 2 ? tn_transpose(x, NULL) : x;
    double a = dist == TN_RAND_RANDINT ? -7 : dist == TN_RAND_BERNOULLI ? 0.3 : -1, b = dist == TN_RAND_RANDINT ? 100003 : 2;
    tn_var *d = tn_random_like(s, (tn_rdist)dist, t, v == 1 ? u : xs, a, b);
    tn_var *y = tn_add(tn_cast(d, xt), xs);
    if (v == 0) y = tn_mul(y, tn_random_like(s, TN_RAND_UNIFORM, xt, x, 1, 2));
    tn_var *ins[2] = { x, u };
    tn_func *f = y ? tn_function(g, &(tn_func_desc){ .n_inputs = v == 1 ? 2 : 1, .inputs = ins, .n_outputs = 1, .outputs = &y }) : NULL;
    tn_array *r = NULL;
    for (int call = 0; f && call < 2; call++) {
        tn_array_free(r);
        r = NULL;
        if (tn_call(f, in, &r) != TN_OK) break;
    }
    if (f) { char *p = dprint(f); snprintf(placed, cap, "%s", p); free(p); }
    tn_function_free(f);
    tn_graph_free(g);
    return r;
}

TEST(test_fused_draws_gpu_equals_cpu) {
    enum { R = 37, C = 65 };
    int dists[] = { TN_RAND_UNIFORM, TN_RAND_NORMAL, TN_RAND_BERNOULLI, TN_RAND_RANDINT }, cases = 0;
    for (int k = 0; k < 4; k++)
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1))
            for (int xk = 0; xk < 3; xk++)
                for (int v = 0; v < 3; v++) {
                    const tn_dtype xt = (tn_dtype[]){ TN_F32, TN_F16, TN_F64 }[xk];
                    if (tn__random_cuda_source(dists[k], t, NULL, 0) <= 0) continue;
                    if (xk && (v || (t != TN_F32 && t != TN_BOOL))) continue;     /* other operands: the vector paths */
                    tn_array *x = tn_array_rand_uniform(xt, 2, (int64_t[]){ R, C }, -1, 1, 90 + (uint64_t)k);
                    tn_array *u = tn_array_rand_uniform(xt, 2, (int64_t[]){ R, 1 }, -1, 1, 91);
                    tn_array *in[2] = { x, u };
                    char pg[8192], pc[8192];
                    tn_array *rg = run_fused_draw(dists[k], t, xt, v, in, pg, sizeof pg);
                    on_cpu();
                    tn_array *rc = run_fused_draw(dists[k], t, xt, v, in, pc, sizeof pc);
                    tn_init(&base_cfg);
                    CHECK(rg && rc, "draw %d %s beside %s, variant %d: %s", dists[k], tn_dtype_name(t), tn_dtype_name(xt), v, tn_last_error());
                    CHECK(strstr(pg, "GpuElemwise{Composite{") && strstr(pg, "random{") && !strstr(pg, "Random{"),
                          "fused on the GPU:\n%s", pg);
                    if (rg && rc) {
                        tn_array *h = tn_array_to_host(rg);
                        int64_t n = tn_array_size(rc), bad = 0;
                        size_t es = tn_dtype_size(xt);
                        for (int64_t i = 0; h && i < n; i++) bad += memcmp((const char *)h->data + i * (int64_t)es, (const char *)rc->data + i * (int64_t)es, es) != 0;
                        CHECK(h && n == (int64_t)R * C && bad == 0, "draw %d %s beside %s, variant %d: %lld of %lld elements differ from the CPU's",
                              dists[k], tn_dtype_name(t), tn_dtype_name(xt), v, (long long)bad, (long long)n);
                        tn_array_free(h);
                        cases++;
                    }
                    tn_array_free(rg); tn_array_free(rc); tn_array_free(x); tn_array_free(u);
                }
    printf("  %d fused draws bit-equal on the GPU and the CPU\n", cases);
    CHECK(cases == 14 * 3 + 4 * 2, "%d cases", cases);
}

/* Reductions with an epilogue on the GPU (tensor.h >>fuse_epilogue): each
   case's fused function (one GpuSum{...,epilogue} node) gives the bits of the
   same graph with the reduction's result an output too (the reduction kernel,
   then the elementwise one; a column widened at run time: within a rounding,
   see below), and agrees with a float64 loop on the host.
   The layouts: columns (a bias's update, and its split path), rows with
   vector loads, a long full reduction (the split path) and the logistic
   step's 400 elements, a prologue with an epilogue, float16, a column
   widened at run time, keepdims, a change of dtype. */
typedef struct ep_case { const char *name; int kind; int64_t r, c; tn_dtype t; } ep_case;

static tn_var *ep_build(const ep_case *k, tn_graph *g, tn_var **in, int *ni, tn_var **red) {
    tn_var *x = k->kind == 2 || k->kind == 3 ? tn_vector(g, "x", k->t) : tn_matrix(g, "x", k->t);
    tn_var *v = k->kind == 2 || k->kind == 3 ? tn_scalar(g, "b", k->t) : tn_vector(g, "b", k->t);
    in[0] = x; in[1] = v; *ni = 2;
    switch (k->kind) {
    case 0: *red = tn_sum(x, (int[]){ 0 }, 1, false); return tn_sub(v, tn_mul(*red, tn_lit(v, 0.1)));     /* columns */
    case 1: *red = tn_sum(x, (int[]){ 1 }, 1, false); return tn_add(tn_exp(*red), v);                    /* rows */
    case 2: case 3: *red = tn_sum(x, NULL, 0, false); return tn_sub(v, tn_mul(*red, tn_lit(v, 0.1)));   /* full */
    case 4: *ni = 1; *red = tn_sum(tn_mul(x, x), (int[]){ 1 }, 1, false); return tn_sqrt(*red);          /* prologue + epilogue */
    case 5: { tn_var *m = tn_input(g, "m", k->t, 2, (int64_t[]){ -1, 1 }, (bool[]){ false, true });
              in[1] = m; *red = tn_max(x, (int[]){ 1 }, 1, true); return tn_exp(tn_sub(*red, m)); }      /* keepdims */
    default: *ni = 1; *red = tn_mean(x, (int[]){ 0 }, 1, false); return tn_gt(*red, tn_lit(x, 0.0));     /* to bool */
    }
}

/* The float64 loop: out[i] of case k on host data (x r x c or r; v). */
static double ep_ref(const ep_case *k, const double *x, const double *v, int64_t r, int64_t c, int64_t i) {
    double acc = 0, mx = -INFINITY;
    switch (k->kind) {
    case 0: for (int64_t n = 0; n < r; n++) acc += x[n * c + (c == 1 ? 0 : i)]; return v[i] - acc * 0.1;   /* c == 1: one column, widened */
    case 1: for (int64_t n = 0; n < c; n++) acc += x[i * c + n]; return exp(acc) + v[i];
    case 2: case 3: for (int64_t n = 0; n < r; n++) acc += x[n]; return v[0] - acc * 0.1;
    case 4: for (int64_t n = 0; n < c; n++) acc += x[i * c + n] * x[i * c + n]; return sqrt(acc);
    case 5: for (int64_t n = 0; n < c; n++) mx = fmax(mx, x[i * c + n]); return exp(mx - v[i]);
    default: for (int64_t n = 0; n < r; n++) acc += x[n * c + i]; return acc / (double)r > 0.0;
    }
}

TEST(test_reduce_epilogue_on_gpu) {
    const ep_case cases[] = {
        { "a bias's update, columns", 0, 1000, 300, TN_F32 },
        { "a bias's update, split columns", 0, 100000, 4, TN_F32 },
        { "rows, vector loads", 1, 300, 5000, TN_F32 },
        { "full, split", 2, 1 << 20, 1, TN_F32 },
        { "full, the logistic step's 400", 3, 400, 1, TN_F32 },
        { "float64 prologue and epilogue", 4, 70, 1000, TN_F64 },
        { "float16 rows", 1, 64, 3000, TN_F16 },
        { "keepdims", 5, 90, 700, TN_F32 },
        { "mean > 0 (bool)", 6, 500, 200, TN_F32 },
        { "a column widened at run time", 0, 3000, 1, TN_F32 },
    };
    int done = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const ep_case *k = &cases[ci];
        bool vec1 = k->kind == 2 || k->kind == 3;
        int64_t r = k->r, c = k->c, vn = k->kind == 0 ? (c == 1 ? 37 : c) : vec1 ? 1 : r;
        tn_array *X = vec1 ? tn_array_rand_normal(k->t, 1, (int64_t[]){ r }, 0, 1, 700 + ci)
                           : tn_array_rand_uniform(k->t, 2, (int64_t[]){ r, c }, -0.05, 0.05, 700 + ci);
        tn_array *V = k->kind == 5 ? tn_array_rand_normal(k->t, 2, (int64_t[]){ r, 1 }, 0, 1, 800 + ci)
                    : vec1 ? tn_array_rand_normal(k->t, 0, NULL, 0, 1, 800 + ci) : tn_array_rand_normal(k->t, 1, (int64_t[]){ vn }, 0, 1, 800 + ci);
        tn_array *vals[2] = { X, V }, *out[2] = { NULL, NULL }, *ref[2] = { NULL, NULL };
        char *dp = NULL;
        for (int alone = 0; alone < 2; alone++) {     /* 1: the reduction's result an output too, so its reader stays a node */
            tn_graph *g = tn_graph_new();
            tn_var *in[2], *y[2];
            int ni;
            y[0] = ep_build(k, g, in, &ni, &y[1]);
            tn_func *f = y[0] ? tn_function(g, &(tn_func_desc){ .n_inputs = ni, .inputs = in, .n_outputs = 1 + alone, .outputs = y }) : NULL;
            CHECK(f && tn_call(f, vals, alone ? ref : &out[0]) == TN_OK, "%s, %s: %s", k->name, alone ? "unfused" : "fused", tn_last_error());
            if (f && !alone) dp = dprint(f);
            tn_function_free(f);
            tn_graph_free(g);
        }
        out[1] = ref[0];
        tn_array_free(ref[1]);
        CHECK(dp && strstr(dp, "epilogue=") && strstr(dp, "Gpu") && !strstr(dp, "GpuElemwise"), "%s: not one GPU reduction with its epilogue:\n%s",
              k->name, dp ? dp : "");
        free(dp);
        tn_array *a = out[0] ? tn_array_to_host(out[0]) : NULL, *b = out[1] ? tn_array_to_host(out[1]) : NULL;
        int64_t n = a ? tn_array_size(a) : -1, bad = 0;
        CHECK(a && b && n == tn_array_size(b) && a->dtype == b->dtype, "%s: outputs differ in size or dtype", k->name);
        /* widened: the unfused kernel reads the one result broadcast, and NVRTC
           (--fmad=true, its default) computes r * 0.1 once, rounded, where the
           epilogue contracts b - r * 0.1 into one fma: a rounding apart */
        bool widened = k->kind == 0 && c == 1;
        for (int64_t i = 0; a && b && n == tn_array_size(b) && i < n; i++) {
            size_t es = tn_dtype_size(a->dtype);
            const char *pa = (const char *)a->data + i * (int64_t)es, *pb = (const char *)b->data + i * (int64_t)es;
            float fa, fb;
            memcpy(&fa, pa, sizeof fa); memcpy(&fb, pb, sizeof fb);
            bad += widened ? !(fabsf(fa - fb) <= 2 * FLT_EPSILON * fabsf(fb)) : memcmp(pa, pb, es) != 0;
        }
        CHECK(bad == 0, "%s: %lld of %lld elements differ from the unfused kernels'%s", k->name, (long long)bad, (long long)n,
              widened ? " by more than a rounding" : "");
        double *xh = as_f64(X), *vh = as_f64(V), *got = a ? as_f64(a) : NULL, worst = 0;
        int64_t len = k->kind == 0 ? vn : k->kind == 1 || k->kind == 4 || k->kind == 5 ? r : vec1 ? 1 : c;
        CHECK(n == len, "%s: %lld results, want %lld", k->name, (long long)n, (long long)len);
        for (int64_t i = 0; got && n == len && i < n; i++) {
            double want = ep_ref(k, xh, vh, r, c, i);
            double e = fabs(got[i] - want) / fmax(1.0, fabs(want));
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
        double tol = k->t == TN_F16 ? 8e-3 : k->t == TN_F32 ? 2e-5 : 1e-12;
        CHECK(worst <= tol, "%s: off the float64 loop by %.3g (tolerance %.1g)", k->name, worst, tol);
        done += bad == 0 && worst <= tol;
        free(xh); free(vh); free(got);
        tn_array_free(a); tn_array_free(b); tn_array_free(out[0]); tn_array_free(out[1]); tn_array_free(X); tn_array_free(V);
    }
    printf("  %d reductions with an epilogue: the unfused bits, and the float64 loop's values\n", done);
}

/* Gemvs with an epilogue on the GPU (tensor.h >>fuse_epilogue): the
   logistic step's weight update after the transposed 400x784 product (the
   library's kernel, one launch), tanh(A x + c) at 3000x2000 (cuBLAS's
   product, then the epilogue in place), float64, a product of one row its
   epilogue widens, and an empty product (k = 0). Each gives the bits of the same graph with the
   product an output too, and agrees with a float64 loop. */
TEST(test_gemv_epilogue_on_gpu) {
    const struct { const char *name; int rows, k; tn_dtype t; int kind; } cases[] = {
        { "the logistic step's weight update", 784, 400, TN_F32, 0 },
        { "tanh(A x + c) past the small kernel", 3000, 2000, TN_F32, 1 },
        { "float64 weight update", 300, 200, TN_F64, 0 },
        { "one row widened", 1, 500, TN_F32, 2 },
        { "an empty product (k = 0): beta * c through the epilogue", 30, 0, TN_F32, 0 },
    };
    int done = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int R = cases[ci].rows, K = cases[ci].k, kind = cases[ci].kind;
        tn_dtype t = cases[ci].t;
        int64_t n_out = kind == 2 ? 7 : R;
        /* kind 0: A is (K, R), used transposed */
        tn_array *Av = kind == 0 ? tn_array_rand_normal(t, 2, (int64_t[]){ K, R }, 0, 1, 900 + ci) : tn_array_rand_normal(t, 2, (int64_t[]){ R, K }, 0, 1, 900 + ci);
        tn_array *Xv = tn_array_rand_normal(t, 1, (int64_t[]){ K }, 0, 0.05, 910 + ci);
        tn_array *Cv = tn_array_rand_normal(t, 1, (int64_t[]){ kind == 2 ? 1 : R }, 0, 1, 920 + ci);
        tn_array *Ev = tn_array_rand_normal(t, 1, (int64_t[]){ n_out }, 0, 1, 930 + ci);
        tn_array *vals[4] = { Av, Xv, Cv, Ev }, *res[2] = { NULL, NULL };
        char *dp = NULL;
        for (int alone = 0; alone < 2; alone++) {
            tn_graph *g = tn_graph_new();
            tn_var *A = tn_matrix(g, "A", t), *x = tn_vector(g, "x", t), *c = tn_vector(g, "c", t), *e = tn_vector(g, "e", t);
            tn_var *p = kind == 0 ? tn_gemv(c, 1.0, tn_transpose(A, NULL), x, 0.5) : tn_gemv(c, kind == 2 ? 2.0 : 1.0, A, x, 1.0);
            tn_var *y[2] = { kind == 0 ? tn_sub(c, tn_mul(p, tn_lit(c, 0.1))) : kind == 1 ? tn_tanh(p) : tn_mul(p, e), p };
            tn_var *in[4] = { A, x, c, e };
            int ni = kind == 2 ? 4 : 3;
            tn_array *o[2] = { NULL, NULL };
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = ni, .inputs = in, .n_outputs = 1 + alone, .outputs = y });
            CHECK(f && tn_call(f, vals, o) == TN_OK, "%s, %s: %s", cases[ci].name, alone ? "unfused" : "fused", tn_last_error());
            if (f && !alone) dp = dprint(f);
            res[alone] = o[0];
            tn_array_free(o[1]);
            tn_function_free(f);
            tn_graph_free(g);
        }
        CHECK(dp && strstr(dp, "GpuGemv{no_inplace,epilogue=") && !strstr(dp, "GpuElemwise"), "%s: not one GPU product with its epilogue:\n%s",
              cases[ci].name, dp ? dp : "");
        free(dp);
        tn_array *a = res[0] ? tn_array_to_host(res[0]) : NULL, *b = res[1] ? tn_array_to_host(res[1]) : NULL;
        size_t es = tn_dtype_size(t);
        bool same = a && b && tn_array_size(a) == n_out && tn_array_size(b) == n_out && !memcmp(a->data, b->data, (size_t)n_out * es);
        CHECK(same, "%s: not the unfused kernels' bits", cases[ci].name);
        double *A64 = as_f64(Av), *X64 = as_f64(Xv), *C64 = as_f64(Cv), *E64 = as_f64(Ev), *ref = (double *)malloc((size_t)n_out * sizeof *ref);
        for (int64_t i = 0; i < n_out; i++) {
            double acc = 0;
            int64_t row = kind == 2 ? 0 : i;
            for (int p = 0; p < K; p++) acc += (kind == 0 ? A64[(int64_t)p * R + row] : A64[row * K + p]) * X64[p];
            double c0 = C64[kind == 2 ? 0 : i];
            ref[i] = kind == 0 ? c0 - (acc + 0.5 * c0) * 0.1 : kind == 1 ? tanh(acc + c0) : (2.0 * acc + c0) * E64[i];
        }
        double err = res[0] ? max_err(res[0], ref, n_out) : INFINITY, tol = t == TN_F32 ? 1e-5 : 1e-12;
        CHECK(err <= tol, "%s: off the float64 loop by %.3g", cases[ci].name, err);
        done += same && err <= tol;
        free(A64); free(X64); free(C64); free(E64); free(ref);
        tn_array_free(a); tn_array_free(b); tn_array_free(res[0]); tn_array_free(res[1]);
        tn_array_free(Av); tn_array_free(Xv); tn_array_free(Cv); tn_array_free(Ev);
    }
    printf("  %d products with an epilogue: the unfused bits, and the float64 loop's values\n", done);
}

/* The seed's recurrence (tests/test_scan.c) with the scan on the GPU: its
   sequences, states and stacked outputs stay in device memory, the step runs
   no transfer, and the results equal the float64 C loop. */
TEST(test_scan_seed_on_gpu) {
    int64_t L = 64, T = L - 4;
    tn_graph *g = tn_graph_new();
    tn_var *ins[8], *outs[2];
    CHECK(seed_scan(g, ins, outs, false, L) == TN_OK, "tn_scan: %s", tn_last_error());
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 8, .inputs = ins, .n_outputs = 2, .outputs = outs });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    if (!f) { tn_graph_free(g); return; }
    int n, on_dev, xfers;
    scan_steps(f, &n, &on_dev, &xfers);
    CHECK(n == 1 && on_dev == 1 && xfers == 0, "scans %d, on the GPU %d, transfers per step %d", n, on_dev, xfers);
    char *s = dprint(f);
    const char *inner = strstr(s, "Inner graphs of the scan ops:");
    CHECK(strstr(s, "GpuScan{seed}") && inner && strstr(inner, "GpuGemv") && !strstr(inner, "FromHost") && !strstr(inner, "FromGpu"),
          "debugprint:\n%s", s);
    free(s);
    int64_t sh[8][2] = { {NX, NX}, {NX, NU}, {NX, NU}, {NX, NY}, {NY, NX}, {L, NU}, {3, NX}, {NY, 0} };
    tn_array *a[8];
    double *P[8], *xs = (double *)calloc((size_t)(T * NX), sizeof(double)), *ys = (double *)calloc((size_t)(T * NY), sizeof(double));
    for (int i = 0; i < 8; i++) { a[i] = tn_array_rand_uniform(TN_F64, i == 7 ? 1 : 2, sh[i], -0.8, 0.8, 300 + (uint64_t)i); P[i] = as_f64(a[i]); }
    seed_ref(P, L, xs, ys);
    double t0 = 0;
    for (int rep = 0; rep < 3; rep++) {
        if (rep == 1) t0 = now_us();
        tn_array *res[2] = { NULL, NULL };
        CHECK(tn_call(f, a, res) == TN_OK, "call: %s", tn_last_error());
        if (!res[0]) break;
        CHECK(max_err(res[0], xs, T * NX) <= 1e-12 && max_err(res[1], ys, T * NY) <= 1e-12, "x err %g, y err %g",
              max_err(res[0], xs, T * NX), max_err(res[1], ys, T * NY));
        tn_array_free(res[0]); tn_array_free(res[1]);
    }
    printf("  GpuScan seed: %lld steps, %.1f us per call\n", (long long)T, (now_us() - t0) / 2);
    for (int i = 0; i < 8; i++) { tn_array_free(a[i]); free(P[i]); }
    free(xs); free(ys);
    tn_function_free(f);
    tn_graph_free(g);
}

/* BPTT with both scans on the GPU against the same graph run on the CPU. */
TEST(test_scan_grad_on_gpu) {
    tn_graph *gd = tn_graph_new(), *gh = tn_graph_new();
    tn_var *ind[4], *inh[4];
    tn_func *fd = rnn_grad_fn(gd, true, ind, NULL), *fh = rnn_grad_fn(gh, false, inh, NULL);
    CHECK(fd && fh, "compile: %s", tn_last_error());
    if (fd && fh) {
        int n, on_dev, xfers;
        scan_steps(fd, &n, &on_dev, &xfers);
        CHECK(n == 2 && on_dev == 2 && xfers == 0, "scans %d, on the GPU %d, transfers per step %d", n, on_dev, xfers);
        int64_t m = 16, T = 30;
        tn_array *a[4] = { tn_array_rand_uniform(TN_F64, 2, (int64_t[]){m, m}, -0.4, 0.4, 11),
                           tn_array_rand_uniform(TN_F64, 2, (int64_t[]){T, m}, -1, 1, 12),
                           tn_array_rand_uniform(TN_F64, 1, &m, -1, 1, 13),
                           tn_array_rand_uniform(TN_F64, 2, (int64_t[]){T, m}, -1, 1, 14) };
        tn_array *rd[3] = { NULL, NULL, NULL }, *rh[3] = { NULL, NULL, NULL };
        CHECK(tn_call(fd, a, rd) == TN_OK, "GPU call: %s", tn_last_error());
        CHECK(tn_call(fh, a, rh) == TN_OK, "CPU call: %s", tn_last_error());
        for (int i = 0; i < 3 && rd[i] && rh[i]; i++) {
            double *ref = as_f64(rh[i]);
            CHECK(max_err(rd[i], ref, tn_array_size(rh[i])) <= 1e-12, "gradient %d: error %g", i, max_err(rd[i], ref, tn_array_size(rh[i])));
            free(ref);
        }
        for (int i = 0; i < 3; i++) { tn_array_free(rd[i]); tn_array_free(rh[i]); }
        for (int i = 0; i < 4; i++) tn_array_free(a[i]);
    }
    tn_function_free(fd); tn_function_free(fh);
    tn_graph_free(gd); tn_graph_free(gh);
}

/* A function with scans on the GPU is captured whole and replayed: the
   gradient of the recurrence (a forward and a backward loop) agrees with the
   CPU on every call, replays read each call's inputs, and a step function
   that plans again for other shapes (a second function of the same scan)
   moves its buffers, which keeps the first function's captured loops from
   replaying stale addresses. */
static void rnn_inputs(tn_array **a, int64_t m, int64_t T, uint64_t seed) {
    a[0] = tn_array_rand_uniform(TN_F64, 2, (int64_t[]){m, m}, -0.4, 0.4, seed);
    a[1] = tn_array_rand_uniform(TN_F64, 2, (int64_t[]){T, m}, -1, 1, seed + 1);
    a[2] = tn_array_rand_uniform(TN_F64, 1, &m, -1, 1, seed + 2);
    a[3] = tn_array_rand_uniform(TN_F64, 2, (int64_t[]){T, m}, -1, 1, seed + 3);
}

/* The three gradients of fd on a against fh's (the CPU); returns the worst error. */
static double rnn_grad_err(tn_func *fd, tn_func *fh, tn_array **a) {
    tn_array *rd[3] = { NULL, NULL, NULL }, *rh[3] = { NULL, NULL, NULL };
    double worst = INFINITY;
    if (tn_call(fd, a, rd) == TN_OK && tn_call(fh, a, rh) == TN_OK) {
        worst = 0;
        for (int i = 0; i < 3; i++) {
            double *ref = as_f64(rh[i]);
            worst = fmax(worst, max_err(rd[i], ref, tn_array_size(rh[i])));
            free(ref);
        }
    }
    for (int i = 0; i < 3; i++) { tn_array_free(rd[i]); tn_array_free(rh[i]); }
    return worst;
}

TEST(test_scan_replayed_on_gpu) {
    tn_graph *gd = tn_graph_new(), *gh = tn_graph_new();
    tn_var *ind[4], *inh[4];
    tn_func *ffd = NULL, *ffh = NULL;
    tn_func *fd = rnn_grad_fn(gd, true, ind, &ffd), *fh = rnn_grad_fn(gh, false, inh, &ffh);
    CHECK(fd && fh && ffd && ffh, "compile: %s", tn_last_error());
    if (fd && fh && ffd && ffh) {
        tn_array *a[4], *b[4];
        rnn_inputs(a, 16, 30, 21);
        int64_t rep = 0, cap = 0;
        const char *why = "";
        for (int call = 0; call < 5; call++) {
            double e = rnn_grad_err(fd, fh, a);
            CHECK(e <= 1e-12, "call %d: gradient error %g: %s", call, e, tn_last_error());
        }
        /* with cuda_graph=0 or launch_blocking=1 nothing is captured: the same values, plainly run */
        bool graphs = !tn_get_config()->no_cuda_graph && !tn_get_config()->launch_blocking;
        tn__replay_stats(fd, &rep, &cap, &why);
        CHECK(graphs ? cap >= 1 && rep >= 1 : cap == 0 && rep == 0, "5 calls: %lld captures, %lld replays (%s)", (long long)cap,
              (long long)rep, why);
        /* a replay reads this call's values */
        double *c = (double *)a[3]->data;
        for (int64_t i = 0; i < tn_array_size(a[3]); i++) c[i] = -0.5 * c[i] + 0.25;
        int64_t rep0 = rep;
        double e = rnn_grad_err(fd, fh, a);
        tn__replay_stats(fd, &rep, &cap, &why);
        CHECK(e <= 1e-12 && rep == rep0 + graphs, "new values: error %g, replays %lld -> %lld", e, (long long)rep0, (long long)rep);
        /* the forward function plans the shared step function again for other shapes */
        rnn_inputs(b, 8, 12, 31);
        tn_array *hd = NULL, *hh = NULL;
        CHECK(tn_call(ffd, b, &hd) == TN_OK && tn_call(ffh, b, &hh) == TN_OK, "forward: %s", tn_last_error());
        if (hd && hh) {
            double *ref = as_f64(hh);
            CHECK(max_err(hd, ref, tn_array_size(hh)) <= 1e-12, "forward at m=8: error %g", max_err(hd, ref, tn_array_size(hh)));
            free(ref);
        }
        tn_array_free(hd); tn_array_free(hh);
        for (int call = 0; call < 4; call++) {
            e = rnn_grad_err(fd, fh, a);
            CHECK(e <= 1e-12, "after the other shapes, call %d: gradient error %g", call, e);
        }
        tn__replay_stats(fd, &rep, &cap, &why);
        CHECK(graphs ? cap >= 2 : cap == 0, "the loop is captured again for its new buffers: %lld captures, %lld replays (%s)",
              (long long)cap, (long long)rep, why);
        printf("  scans in a captured graph: %lld captures, %lld replays%s\n", (long long)cap, (long long)rep,
               graphs ? "" : " (graphs off: the replay checks are that none happened)");
        for (int i = 0; i < 4; i++) { tn_array_free(a[i]); tn_array_free(b[i]); }
    }
    tn_function_free(fd); tn_function_free(fh); tn_function_free(ffd); tn_function_free(ffh);
    tn_graph_free(gd); tn_graph_free(gh);
}

/* The profiler's GPU times come from events: a big fused kernel's reported
   time matches the same kernel timed with our own events around unprofiled
   calls, its call count is exact, and profiled calls do not wait for the
   stream. (Under launch_blocking=1 the host times are checked instead.) */
static double event_ms(tn_func *f, int calls) {
    tn__CUevent a = NULL, b = NULL;
    float ms = -1;
    tn_array *o = NULL;
    if (tn__cuda.cu.cuEventCreate(&a, TN__CU_EVENT_DEFAULT) || tn__cuda.cu.cuEventCreate(&b, TN__CU_EVENT_DEFAULT)) return -1;
    double sum = 0;
    for (int i = 0; i < calls && ms != -2; i++) {
        tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(CUDA_DEV()));
        tn__cuda.cu.cuEventRecord(a, tn__cuda_stream(CUDA_DEV()));
        if (tn_call(f, NULL, &o) != TN_OK) ms = -2;
        tn__cuda.cu.cuEventRecord(b, tn__cuda_stream(CUDA_DEV()));
        tn__cuda.cu.cuEventSynchronize(b);
        if (ms != -2 && tn__cuda.cu.cuEventElapsedTime(&ms, a, b) == TN__CUDA_SUCCESS) sum += ms;
    }
    tn__cuda.cu.cuEventDestroy_v2(a);
    tn__cuda.cu.cuEventDestroy_v2(b);
    return ms == -2 ? -1 : sum / calls;
}

TEST(test_profile_event_times) {
    int64_t n = (int64_t)1 << 25;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -2, 2, 51);
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_shared(g, "x", xv);
    tn_var *y = tn_gpu_from_host(tn_add(tn_tanh(tn_mul(tn_exp(tn_sin(x)), tn_cos(x))), tn_log1p(tn_mul(x, x))));
    tn_func *ref = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .borrow = true, .name = "big_ref" });
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .borrow = true, .name = "big_prof" });
    CHECK(ref && f, "compile: %s", tn_last_error());
    if (!ref || !f) goto out;
    char *s = dprint(f);
    CHECK(strstr(s, "GpuElemwise{Composite{") && !strstr(s, "HostFromGpu"), "one fused kernel, output on the device:\n%s", s);
    free(s);
    tn_array *o = NULL;
    CHECK(tn_call(ref, NULL, &o) == TN_OK && tn_call(f, NULL, &o) == TN_OK, "warm-up: %s", tn_last_error());   /* compiles */
    double want = event_ms(ref, 10);
    CHECK(want > 0, "reference timing: %s", tn_last_error());
    CHECK(tn_profile_enable(f, true) == TN_OK, "enable");
    enum { CALLS = 12 };
    tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(CUDA_DEV()));
    double t0 = now_us(), t_two = 0;
    for (int i = 0; i < CALLS; i++) {
        CHECK(tn_call(f, NULL, &o) == TN_OK, "call: %s", tn_last_error());
        if (i == 1) t_two = now_us() - t0;
    }
    FILE *m;
    char *rep = NULL;
    size_t len = 0;
    m = open_memstream(&rep, &len);
    tn_profile_print(f, m);
    fclose(m);
    const char *line = strstr(rep, "\nApply\n");
    line = line ? strstr(line, "GpuElemwise{Composite{") : NULL;
    while (line && line > rep && line[-1] != '\n') line--;
    double pc, cum, t = -1, tpc = -1;
    char type[16] = "";
    unsigned long long nc = 0;
    int id = -1;
    CHECK(line && sscanf(line, " %lf%% %lf%% %les %les %15s %llu %d", &pc, &cum, &t, &tpc, type, &nc, &id) == 7,
          "the kernel's Apply line:\n%s", rep);
    bool lb = tn_get_config()->launch_blocking;
    CHECK(nc == CALLS && !strcmp(type, "gpu"), "%llu calls of type %s, want %d gpu", nc, type, CALLS);
    CHECK(strstr(rep, lb ? "launch_blocking=1: host time" : "from events recorded around each step"), "the note:\n%s", rep);
    double got = 1e3 * tpc;
    printf("  profiled kernel %.3f ms a call (%s), separately timed %.3f ms; two profiled calls returned in %.3f ms\n",
           got, lb ? "host, launch_blocking" : "events", want, 1e-3 * t_two);
    CHECK(fabs(got - want) <= 0.2 * want + 0.02, "profiled %.4f ms vs separately timed %.4f ms:\n%s", got, want, rep);
    if (!lb) CHECK(1e-3 * t_two < want, "two profiled calls waited for the GPU: %.3f ms (one kernel: %.3f ms)", 1e-3 * t_two, want);
    free(rep);
out:
    tn_function_free(f);
    tn_function_free(ref);
    tn_graph_free(g);
    tn_array_free(xv);
}

/* mode=check: every GPU op also runs on the CPU and is compared; a correct
   fused chain, row-bias gemm and reduction pass, in float32 and float64. */
TEST(test_check_mode) {
    const int M = 37, K = 1001, N = 19;
    for (int di = 0; di < 2; di++) {
        tn_dtype t = di ? TN_F64 : TN_F32;
        tn_array *xv = tn_array_rand_uniform(t, 2, (int64_t[]){ M, K }, -2, 2, 71), *yv = tn_array_rand_uniform(t, 2, (int64_t[]){ M, K }, -2, 2, 72);
        tn_array *Wv = tn_array_rand_uniform(t, 2, (int64_t[]){ K, N }, -1, 1, 73), *cv = tn_array_rand_uniform(t, 1, (int64_t[]){ N }, -1, 1, 74);
        double *x = as_f64(xv), *y = as_f64(yv), *W = as_f64(Wv), *c = as_f64(cv);
        double *z = (double *)malloc((size_t)M * K * sizeof *z), s[37], p[37 * 19];
        for (int64_t i = 0; i < (int64_t)M * K; i++) z[i] = tanh(x[i] * y[i] + exp(-x[i])) * 0.5 + y[i];
        for (int i = 0; i < M; i++) {
            s[i] = 0;
            for (int j = 0; j < K; j++) s[i] += z[(size_t)i * K + j];
            for (int k = 0; k < N; k++) {
                double acc = c[k];
                for (int j = 0; j < K; j++) acc += z[(size_t)i * K + j] * W[(size_t)j * N + k];
                p[i * N + k] = acc;
            }
        }
        tn_graph *g = tn_graph_new();
        tn_var *a = tn_matrix(g, "x", t), *b = tn_matrix(g, "y", t), *w = tn_shared(g, "W", Wv), *cc = tn_shared(g, "c", cv);
        tn_var *zz = tn_add(tn_mul(tn_tanh(tn_add(tn_mul(a, b), tn_exp(tn_neg(a)))), tn_scalar_const(g, 0.5)), b);
        tn_var *outs[3] = { zz, tn_sum(zz, (int[]){ 1 }, 1, false), tn_add(tn_dot(zz, w), cc) };
        tn_var *ins[2] = { a, b };
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 3, .outputs = outs,
                                                     .mode = TN_MODE_CHECK, .name = "checked" });
        CHECK(f, "%s: %s", tn_dtype_name(t), tn_last_error());
        if (f) {
            char *d = dprint(f);
            CHECK(strstr(d, "GpuElemwise{Composite{") && strstr(d, "GpuSum") && (strstr(d, "GpuGemm") || strstr(d, "GpuDot")),
                  "chain, reduction and product on the GPU:\n%s", d);
            free(d);
            for (int call = 0; call < 2; call++) {
                tn_array *vals[2] = { xv, yv }, *r[3] = { 0 };
                tn_result res = tn_call(f, vals, r);
                CHECK(res == TN_OK, "%s, call %d, mode=check: %s: %s", tn_dtype_name(t), call, tn_result_string(res), tn_last_error());
                double tol = di ? 1e-12 : 1e-5;
                if (r[0]) CHECK(max_err(r[0], z, (int64_t)M * K) <= tol, "chain error %g", max_err(r[0], z, (int64_t)M * K));
                if (r[1]) CHECK(max_err(r[1], s, M) <= tol * K, "sum error %g", max_err(r[1], s, M));
                if (r[2]) CHECK(max_err(r[2], p, M * N) <= tol * K, "gemm error %g", max_err(r[2], p, M * N));
                for (int i = 0; i < 3; i++) tn_array_free(r[i]);
            }
            int64_t rep = -1;
            const char *why = NULL;
            tn__replay_stats(f, &rep, NULL, &why);
            CHECK(rep == 0 && (strstr(why, "mode=check") || strstr(why, "launch_blocking") || strstr(why, "cuda_graph=0")),
                  "check mode replays no graph: %lld (%s)", (long long)rep, why);
        }
        tn_function_free(f);
        tn_graph_free(g);
        tn_array_free(xv); tn_array_free(yv); tn_array_free(Wv); tn_array_free(cv);
        free(x); free(y); free(W); free(c); free(z);
    }
}

/* A training step with only GPU kernels (gemv, fused elementwise, sum, a
   transposed gemv, updates of w and b, h returned borrowed on the device),
   replayed from CUDA graphs: the update swaps alternate two pointer sets, so
   two graphs; each call is checked against float64, and the graphs and
   plain launches (cuda_graph=0) agree. */
typedef struct tstep { tn_graph *g; tn_var *w, *b; tn_func *f; double *X; } tstep;
static void tstep_build(tstep *t, int R, int C) {
    tn_array *Xv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ R, C }, -1, 1, 81);
    tn_array *wv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ C }, -0.1, 0.1, 82), *bv = tn_array_scalar(TN_F32, 0.1);
    t->X = as_f64(Xv);
    t->g = tn_graph_new();
    tn_var *X = tn_shared(t->g, "X", Xv);
    t->w = tn_shared(t->g, "w", wv);
    t->b = tn_shared(t->g, "b", bv);
    tn_array_free(Xv); tn_array_free(wv); tn_array_free(bv);
    tn_var *h = tn_tanh(tn_add(tn_dot(X, t->w), t->b));
    tn_var *nw = tn_add(tn_mul(t->w, tn_lit(t->w, 0.99)), tn_mul(tn_lit(t->w, 0.001), tn_dot(h, X)));
    tn_var *nb = tn_sub(t->b, tn_mul(tn_lit(t->b, 0.01 / R), tn_sum(tn_mul(h, h), NULL, 0, false)));
    tn_var *o = tn_gpu_from_host(h);
    tn_update up[2] = { { t->w, nw }, { t->b, nb } };
    t->f = tn_function(t->g, &(tn_func_desc){ .n_outputs = 1, .outputs = &o, .n_updates = 2, .updates = up, .borrow = true, .name = "train" });
}
/* calls steps checked against float64 (following the device's float32 w and b); largest error */
static double tstep_run(tstep *t, int R, int C, int calls) {
    double *h = (double *)malloc((size_t)R * sizeof *h), *nw = (double *)malloc((size_t)C * sizeof *nw), e = 0;
    for (int call = 0; call < calls; call++) {
        tn_array *wa = tn_shared_get_value(t->w), *ba = tn_shared_get_value(t->b);
        double *w = as_f64(wa), *b = as_f64(ba), ss = 0;
        for (int i = 0; i < R; i++) {
            double acc = b[0];
            for (int j = 0; j < C; j++) acc += t->X[(size_t)i * C + j] * w[j];
            h[i] = tanh(acc);
            ss += h[i] * h[i];
        }
        for (int j = 0; j < C; j++) {
            double acc = 0;
            for (int i = 0; i < R; i++) acc += h[i] * t->X[(size_t)i * C + j];
            nw[j] = 0.99 * w[j] + 0.001 * acc;
        }
        double nb = b[0] - 0.01 / R * ss;
        tn_array *r = NULL;
        if (tn_call(t->f, NULL, &r) != TN_OK || !r) { e = INFINITY; free(w); free(b); tn_array_free(wa); tn_array_free(ba); break; }
        e = fmax(e, max_err(r, h, R) / 1e-5);
        tn_array *w2 = tn_shared_get_value(t->w), *b2 = tn_shared_get_value(t->b);
        e = fmax(e, fmax(max_err(w2, nw, C) / 1e-5, max_err(b2, &nb, 1) / 1e-5));
        tn_array_free(w2); tn_array_free(b2); tn_array_free(wa); tn_array_free(ba);
        free(w); free(b);
    }
    free(h); free(nw);
    return e;          /* in units of the tolerance 1e-5: <= 1 passes */
}
static void tstep_free(tstep *t) { tn_function_free(t->f); tn_graph_free(t->g); free(t->X); }

TEST(test_graph_replay) {
    const int R = 300, C = 77;
    bool blocking = tn_get_config()->launch_blocking;
    tstep t;
    tstep_build(&t, R, C);
    CHECK(t.f, "%s", tn_last_error());
    if (!t.f) { tstep_free(&t); return; }
    double e = tstep_run(&t, R, C, 10);
    int64_t rep = 0, cap = 0;
    const char *why = NULL;
    tn__replay_stats(t.f, &rep, &cap, &why);
    CHECK(e <= 1, "10 steps against float64: error %g x 1e-5 (%s)", e, tn_last_error());
    if (blocking) CHECK(rep == 0 && strstr(why, "launch_blocking=1"), "launch_blocking: %lld replays (%s)", (long long)rep, why);
    else if (base_cfg.no_cuda_graph) CHECK(rep == 0 && cap == 0 && strstr(why, "cuda_graph=0"), "cuda_graph=0: %lld replays (%s)", (long long)rep, why);
    else CHECK(cap == 2 && rep == 6, "captures %lld, replays %lld (%s)", (long long)cap, (long long)rep, why);
    /* steady loop: no driver allocation, then the state still matches float64 */
    uint64_t a0 = CUDA_DEV()->dmem.driver_allocs;
    double t0 = now_us();
    for (int i = 0; i < 200; i++) { tn_array *r = NULL; CHECK(tn_call(t.f, NULL, &r) == TN_OK, "%s", tn_last_error()); }
    tn__cuda_synchronize();
    double us_graph = (now_us() - t0) / 200;
    CHECK(CUDA_DEV()->dmem.driver_allocs == a0, "%llu driver allocations in 200 steady calls", (unsigned long long)(CUDA_DEV()->dmem.driver_allocs - a0));
    e = tstep_run(&t, R, C, 3);
    CHECK(e <= 1, "after 200 replays: error %g x 1e-5", e);
    int steps = t.f->n_steps;
    tstep_free(&t);
    /* the same with cuda_graph=0 */
    tn_config off = *tn_get_config();
    off.no_cuda_graph = true;
    tn_init(&off);
    tstep_build(&t, R, C);
    e = t.f ? tstep_run(&t, R, C, 6) : INFINITY;
    tn__replay_stats(t.f, &rep, &cap, &why);
    CHECK(e <= 1 && rep == 0 && cap == 0 && strstr(why, "cuda_graph=0"), "cuda_graph=0: error %g, %lld replays (%s)", e, (long long)rep, why);
    t0 = now_us();
    for (int i = 0; t.f && i < 200; i++) { tn_array *r = NULL; tn_call(t.f, NULL, &r); }
    tn__cuda_synchronize();
    double us_plain = (now_us() - t0) / 200;
    tstep_free(&t);
    tn_init(&base_cfg);
    printf("  train step (%d steps): graph replay %.2f us, cuda_graph=0 %.2f us per call%s\n", steps, us_graph, us_plain,
           blocking ? " (launch_blocking: no graphs)" : "");
}

/* A profiled function is replayed (tensor.h >>profile: the first call and
   one in TN__PROF_EVERY run step by step with events around each device
   step; the others launch the graph, one launch in TN__PROF_GRAPH_EVERY
   with a pair of events around it). Every step is counted once at every
   call, a view of device memory too, and every device step is given time;
   the results are the step's (against float64). Turning the profile off
   keeps the graphs. Where graphs are off (launch_blocking, cuda_graph=0)
   nothing is replayed and the profiled step is still right. */
static void profile_counts(tn_func *f, int calls, int *dev, int *bad, char **txt) {
    size_t len = 0;
    FILE *m = open_memstream(txt, &len);
    CHECK(m && tn_profile_print(f, m) == TN_OK, "print: %s", tn_last_error());
    if (m) fclose(m);
    const char *at = NULL;
    th_apply a;
    *dev = *bad = 0;
    while (th_apply_next(*txt, &at, &a)) {
        *bad += !a.ok || a.calls != (unsigned long long)calls;
        if (!a.ok || !strcmp(a.type, "cpu")) continue;
        (*dev)++;
        *bad += !(a.t > 0);
    }
}
TEST(test_profile_replayed) {
    const int R = 300, C = 77;
    bool graphs = !tn_get_config()->launch_blocking && !base_cfg.no_cuda_graph;
    tstep t;
    tstep_build(&t, R, C);
    CHECK(t.f != NULL, "%s", tn_last_error());
    if (!t.f) { tstep_free(&t); return; }
    CHECK(tn_profile_enable(t.f, true) == TN_OK, "enable: %s", tn_last_error());
    enum { CALLS = TN__PROF_EVERY + 6 };
    double e = tstep_run(&t, R, C, CALLS);
    int64_t rep = 0, cap = 0;
    const char *why = NULL;
    tn__replay_stats(t.f, &rep, &cap, &why);
    CHECK(e <= 1, "%d profiled steps against float64: error %g x 1e-5 (%s)", CALLS, e, tn_last_error());
    /* calls 0 and TN__PROF_EVERY step by step; its outputs alternate between
       two buffers (two signatures, as test_graph_replay's): two calls
       remembered, two captured, the rest replayed */
    if (graphs) CHECK(cap == 2 && rep == CALLS - 6, "profiled: %lld captures, %lld replays (%s)", (long long)cap, (long long)rep, why);
    else CHECK(rep == 0, "graphs off: %lld replays (%s)", (long long)rep, why);
    char *txt = NULL;
    int dev = 0, bad = 0;
    profile_counts(t.f, CALLS, &dev, &bad, &txt);
    CHECK(dev >= 3 && bad == 0, "%d device steps, %d not counted at each of %d calls or without time:\n%s", dev, bad, CALLS, txt ? txt : "");
    /* the launches (the replays and the captures' first runs), the first and one in TN__PROF_GRAPH_EVERY timed */
    char note[64], note2[64];
    snprintf(note, sizeof note, "%d calls replayed as CUDA graphs", CALLS - 4);
    snprintf(note2, sizeof note2, "%d of the graphs timed whole", (CALLS - 4 + TN__PROF_GRAPH_EVERY - 1) / TN__PROF_GRAPH_EVERY);
    if (graphs) CHECK(txt && strstr(txt, note) && strstr(txt, note2), "the note on the replayed calls (%s; %s):\n%s", note, note2, txt ? txt : "");
    free(txt);
    CHECK(tn_profile_enable(t.f, false) == TN_OK, "disable: %s", tn_last_error());
    e = tstep_run(&t, R, C, 6);
    int64_t rep1 = 0, cap1 = 0;
    tn__replay_stats(t.f, &rep1, &cap1, &why);
    CHECK(e <= 1, "6 more steps, profiler off: error %g x 1e-5", e);
    if (graphs) CHECK(cap1 == cap && rep1 == rep + 6, "profiler off, the same graphs: %lld captures, %lld replays more (%s)",
                      (long long)(cap1 - cap), (long long)(rep1 - rep), why);
    tstep_free(&t);

    /* a view of device memory among the steps (the output's transpose) */
    tn_graph *g = tn_graph_new();
    tn_array *Xv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ R, C }, -1, 1, 83);
    tn_var *X = tn_shared(g, "X", Xv);
    tn_array_free(Xv);
    tn_var *o = tn_gpu_from_host(tn_transpose(tn_tanh(X), NULL));
    tn_update up = { X, tn_mul(X, tn_lit(X, 0.5)) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &o, .n_updates = 1, .updates = &up, .borrow = true, .name = "view" });
    CHECK(f != NULL, "%s", tn_last_error());
    int views = 0;
    for (int k = 0; f && k < f->n_steps; k++) views += f->steps[k].view && f->steps[k].node->device != TN_HOST;
    CHECK(views == 1, "%d views of device memory among the steps", views);
    if (f) {
        CHECK(tn_profile_enable(f, true) == TN_OK, "enable: %s", tn_last_error());
        for (int i = 0; i < CALLS; i++) {
            tn_array *r = NULL;
            CHECK(tn_call(f, NULL, &r) == TN_OK, "call %d: %s", i, tn_last_error());
        }
        tn__replay_stats(f, &rep, &cap, &why);
        if (graphs) CHECK(rep >= CALLS - 6, "the view's function: %lld replays (%s)", (long long)rep, why);
        txt = NULL;
        profile_counts(f, CALLS, &dev, &bad, &txt);
        CHECK(dev >= 2 && bad == 0, "%d device steps; %d steps not counted at each of %d calls or without time:\n%s", dev, bad, CALLS, txt ? txt : "");
        free(txt);
    }
    tn_function_free(f);
    tn_graph_free(g);
}

/* One stream per function: f1 updates w on its stream, f2 reads w on another;
   called in turn 40 times, f2 always sees f1's last update (each switch orders
   the new stream after the old), and the streams are distinct. */
TEST(test_streams_per_function) {
    int64_t n = (int64_t)1 << 22;
    tn_array *wv = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 91);
    float *w = (float *)malloc((size_t)n * sizeof *w);
    memcpy(w, wv->data, (size_t)n * sizeof *w);
    tn_graph *g = tn_graph_new();
    tn_var *ws = tn_shared(g, "w", wv);
    tn_update up = { ws, tn_add(tn_mul(ws, tn_lit(ws, 0.5)), tn_lit(ws, 1.0)) };
    tn_var *total = tn_sum(tn_sqr(ws), NULL, 0, false);
    tn_func *f1 = tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &up, .name = "f1" });
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &total, .name = "f2" });
    CHECK(f1 && f2 && f1->bfstate && f2->bfstate, "both functions have streams: %s", tn_last_error());
    if (f1 && f2 && f1->bfstate && f2->bfstate) {
        tn__CUstream s1 = ((tn__cuda_fstream *)f1->bfstate)->s, s2 = ((tn__cuda_fstream *)f2->bfstate)->s;
        CHECK(s1 != s2 && s1 != CUDA_DEV()->home.s && s2 != CUDA_DEV()->home.s, "distinct streams");
        double worst = 0;
        for (int it = 0; it < 40; it++) {
            CHECK(tn_call(f1, NULL, NULL) == TN_OK, "f1: %s", tn_last_error());
            CHECK(tn__cuda_stream(CUDA_DEV()) == s1, "f1's call ran on f1's stream");
            tn_array *r = NULL;
            CHECK(tn_call(f2, NULL, &r) == TN_OK && r, "f2: %s", tn_last_error());
            CHECK(tn__cuda_stream(CUDA_DEV()) == s2, "f2's call ran on f2's stream");
            double ref = 0;
            for (int64_t i = 0; i < n; i++) { w[i] = w[i] * 0.5f + 1.0f; ref += (double)w[i] * w[i]; }
            if (r) worst = fmax(worst, fabs(((const float *)r->data)[0] - ref) / ref);
            tn_array_free(r);
        }
        CHECK(worst < 1e-4, "f2 saw every update of f1: worst relative error %g", worst);
    }
    tn_function_free(f1);
    CHECK(tn__cuda_stream(CUDA_DEV()) != NULL, "a current stream remains after freeing f1");
    tn_function_free(f2);
    CHECK(tn__cuda_stream(CUDA_DEV()) == CUDA_DEV()->home.s, "freeing the current function hands back to the home stream");
    tn_graph_free(g);
    tn_array_free(wv);
    free(w);
}

/* Threads on the GPU: two functions updating one device-resident shared
   variable from two threads (each on its own stream) lose no update; one
   function called from 4 threads answers right or TN_ERR_BUSY. */
#include <pthread.h>
typedef struct gpu_job { tn_func *f; tn_array *x; int calls, ok, busy, bad; } gpu_job;
static pthread_barrier_t gpu_bar;
static void *gpu_run(void *arg) {
    gpu_job *j = (gpu_job *)arg;
    pthread_barrier_wait(&gpu_bar);
    for (int c = 0; c < j->calls; c++) {
        tn_array *y = NULL;
        tn_result r = tn_call(j->f, j->x ? &j->x : NULL, j->x ? &y : NULL);
        if (r == TN_ERR_BUSY) { j->busy++; continue; }
        if (r != TN_OK) { j->bad++; continue; }
        if (y) {
            tn_array *h = tn_array_to_host(y);
            bool right = h != NULL;
            for (int64_t i = 0; h && i < tn_array_size(h); i++) {
                double xv = tn_array_get(j->x, &i), ref = exp(1.5 * xv), got = tn_array_get(h, &i);
                if (!th_close(got, ref, 1e-5, 1e-6)) right = false;
            }
            tn_array_free(h);
            tn_array_free(y);
            if (!right) { j->bad++; continue; }
        }
        j->ok++;
    }
    return NULL;
}

/* Products from two threads: each function's stream has a cuBLAS handle of
   its own (no shared handle or workspace), and both results stay right. */
typedef struct blas_job { tn_func *f; tn_array *x; const tn_array *W; int calls, bad; } blas_job;
static void *blas_run(void *arg) {
    blas_job *j = (blas_job *)arg;
    pthread_barrier_wait(&gpu_bar);
    for (int c = 0; c < j->calls; c++) {
        tn_array *y = NULL;
        if (tn_call(j->f, &j->x, &y) != TN_OK || !y) { j->bad++; continue; }
        for (int64_t r = 0; r < y->shape[0]; r++) {    /* float64 row sums, not cuBLAS's blocking */
            double ref = 0;
            for (int64_t k = 0; k < j->W->shape[1]; k++)
                ref += tn_array_get(j->W, (int64_t[]){ r, k }) * tn_array_get(j->x, &k);
            if (!th_close(tn_array_get(y, &r), ref, 1e-4, 1e-4)) { j->bad++; break; }
        }
        tn_array_free(y);
    }
    return NULL;
}

TEST(test_products_on_two_streams) {
    const int64_t M = 96, K = 200;
    tn_graph *g = tn_graph_new();
    tn_array *Wv[2], *xv[2];
    tn_func *f[2];
    for (int i = 0; i < 2; i++) {
        Wv[i] = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ M, K }, -1, 1, 40 + (uint64_t)i);
        xv[i] = tn_array_rand_uniform(TN_F32, 1, &K, -2, 2, 50 + (uint64_t)i);
        tn_array_set(xv[i], (int64_t[]){ 0 }, -0.0);
        tn_var *W = tn_shared(g, i ? "W1" : "W0", Wv[i]), *x = tn_vector(g, "x", TN_F32), *y = tn_dot(W, x);
        f[i] = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .name = i ? "mv1" : "mv0" });
    }
    CHECK(f[0] && f[1] && f[0]->bfstate && f[1]->bfstate, "two device functions: %s", tn_last_error());
    if (f[0] && f[1] && f[0]->bfstate && f[1]->bfstate) {
        blas_job jobs[2];
        pthread_t t[2];
        pthread_barrier_init(&gpu_bar, NULL, 2);
        for (int i = 0; i < 2; i++) {
            jobs[i] = (blas_job){ .f = f[i], .x = xv[i], .W = Wv[i], .calls = 50 };
            pthread_create(&t[i], NULL, blas_run, &jobs[i]);
        }
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        pthread_barrier_destroy(&gpu_bar);
        CHECK(jobs[0].bad == 0 && jobs[1].bad == 0, "wrong or failed products: %d and %d of 50", jobs[0].bad, jobs[1].bad);
        const tn__cuda_fstream *s0 = (const tn__cuda_fstream *)f[0]->bfstate, *s1 = (const tn__cuda_fstream *)f[1]->bfstate;
        CHECK(s0->blas && s1->blas && s0->blas != s1->blas && s0->blas_ws != s1->blas_ws,
              "each function's stream has its own cuBLAS handle and workspace");
    }
    for (int i = 0; i < 2; i++) { tn_function_free(f[i]); tn_array_free(Wv[i]); tn_array_free(xv[i]); }
    tn_graph_free(g);
}

TEST(test_threads_on_gpu) {
    const int64_t n = 1 << 16;
    tn_graph *g = tn_graph_new();
    tn_array *z = tn_array_zeros(TN_F32, 1, &n);
    tn_var *acc = tn_shared(g, "acc", z);
    tn_array_free(z);
    tn_update u1 = { acc, tn_add(acc, tn_lit(acc, 1.0)) }, u2 = { acc, tn_add(acc, tn_lit(acc, 1.0)) };
    tn_func *f1 = tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &u1, .name = "inc1" });
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &u2, .name = "inc2" });
    CHECK(f1 && f2 && f1->bfstate && f2->bfstate, "two device functions: %s", tn_last_error());
    enum { N = 300 };
    gpu_job jobs[4] = { { .f = f1, .calls = N }, { .f = f2, .calls = N } };
    pthread_t t[4];
    pthread_barrier_init(&gpu_bar, NULL, 2);
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, gpu_run, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&gpu_bar);
    CHECK(jobs[0].ok == N && jobs[1].ok == N, "updates: %d and %d of %d ran", jobs[0].ok, jobs[1].ok, N);
    CHECK(tn_shared_get(acc)->device != TN_HOST, "acc lives on the device");
    tn_array *v = tn_shared_get_value(acc);
    int wrong = 0;
    for (int64_t i = 0; v && i < n; i++) wrong += tn_array_get(v, &i) != 2.0 * N;
    CHECK(v && wrong == 0, "%d elements of acc differ from %d (acc[0] = %g)", wrong, 2 * N, v ? tn_array_get(v, (int64_t[]){ 0 }) : NAN);
    tn_array_free(v);

    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_exp(tn_mul(x, tn_lit(x, 1.5)));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .name = "one_f" });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array *xs[4];
    pthread_barrier_init(&gpu_bar, NULL, 4);
    for (int i = 0; i < 4; i++) {
        xs[i] = tn_array_rand_uniform(TN_F32, 1, &n, -3, 3, 700 + (uint64_t)i);
        jobs[i] = (gpu_job){ .f = f, .x = xs[i], .calls = 40 };
        pthread_create(&t[i], NULL, gpu_run, &jobs[i]);
    }
    int ok = 0, busy = 0, bad = 0;
    for (int i = 0; i < 4; i++) { pthread_join(t[i], NULL); ok += jobs[i].ok; busy += jobs[i].busy; bad += jobs[i].bad; }
    pthread_barrier_destroy(&gpu_bar);
    CHECK(bad == 0 && ok > 0 && ok + busy == 160, "one function from 4 threads: %d right, %d busy, %d wrong or failed", ok, busy, bad);
    for (int i = 0; i < 4; i++) tn_array_free(xs[i]);
    tn_function_free(f);
    tn_function_free(f1);
    tn_function_free(f2);
    tn_graph_free(g);
}


/* ---- custom ops and raw kernels on the GPU -------------------------------- */

/* out = params[0] * x, float32, x any layout (TN_CUSTOM_ABI_STRIDED), or the
   same with the pointer signature (contiguous operands). */
static const char *GK_SCALE_STRIDED =
    "extern \"C\" __global__ void scale_strided(tn_operand x, tn_operand out, tn_params p) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i >= out.size) return;\n"
    "    ((float *)out.data)[i] = (float)p.v[0] * ((const float *)x.data)[tn_offset(x, i)];\n"
    "}\n";
static const char *GK_SCALE_PTR =
    "extern \"C\" __global__ void scale_ptr(const float *x, float *out, long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) out[i] = 2.5f * x[i];\n"
    "}\n";
static tn_result gk_same_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    (void)op;
    if (in[0].dtype != TN_F32) { snprintf(why, cap, "float32 only"); return TN_ERR_DTYPE; }
    out[0] = in[0];
    return TN_OK;
}
static int gk_cpu_calls;
static tn_result gk_scale_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)why; (void)cap;
    gk_cpu_calls++;
    double s = op->n_params > 0 ? op->params[0] : 2.5;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) ((float *)out[0]->data)[i] = (float)s * ((const float *)in[0]->data)[i];
    return TN_OK;
}

/* A transposed and a row-sliced input: the strided kernel reads them in
   place (its params reach it), the pointer kernel gets contiguous copies;
   both run on the GPU (GpuCustom), never through the CPU function. */
TEST(test_custom_strided_on_gpu) {
    const double prm[1] = { -1.75 };
    tn_custom_op ops[2] = {
        { .name = "scale_strided", .n_inputs = 1, .infer = gk_same_infer, .cpu = gk_scale_cpu, .cuda_source = GK_SCALE_STRIDED,
          .cuda_kernel = "scale_strided", .cuda_abi = TN_CUSTOM_ABI_STRIDED, .params = prm, .n_params = 1 },
        { .name = "scale_ptr", .n_inputs = 1, .infer = gk_same_infer, .cpu = gk_scale_cpu, .cuda_source = GK_SCALE_PTR,
          .cuda_kernel = "scale_ptr" },
    };
    for (int k = 0; k < 2; k++)
        for (int layout = 0; layout < 3; layout++) {
            const int64_t R = 37, C = 53;
            tn_graph *g = tn_graph_new();
            tn_var *x = tn_matrix(g, "x", TN_F32);
            tn_var *v = layout == 0 ? x : layout == 1 ? tn_transpose(x, NULL) : tn_slice(x, 0, 0, TN_NONE, 2);
            tn_var *y = tn_custom(NULL, &ops[k], 1, &v);
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
            CHECK(f != NULL, "%s layout %d: compile: %s", ops[k].name, layout, tn_last_error());
            char *dp = f ? dprint(f) : NULL;
            CHECK(dp && strstr(dp, ops[k].name) && strstr(dp, "GpuCustom"), "placed on the GPU:\n%s", dp ? dp : "");
            free(dp);
            tn_array *xv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ R, C }, -2, 2, 70 + (uint64_t)layout), *out = NULL;
            int calls = gk_cpu_calls;
            CHECK(f && tn_call(f, &xv, &out) == TN_OK, "%s layout %d: call: %s", ops[k].name, layout, tn_last_error());
            CHECK(gk_cpu_calls == calls, "the CPU function did not run");
            double s = k == 0 ? prm[0] : 2.5, worst = 0;
            int64_t oR = layout == 1 ? C : layout == 2 ? (R + 1) / 2 : R, oC = layout == 1 ? R : C;
            CHECK(out && out->ndim == 2 && out->shape[0] == oR && out->shape[1] == oC, "output shape");
            for (int64_t i = 0; out && out->shape[0] == oR && i < oR; i++)
                for (int64_t j = 0; j < oC; j++) {
                    int64_t xi = layout == 1 ? j : layout == 2 ? 2 * i : i, xj = layout == 1 ? i : j;
                    double want = (double)(float)(s * tn_array_get(xv, (int64_t[]){ xi, xj }));
                    worst = fmax(worst, fabs(tn_array_get(out, (int64_t[]){ i, j }) - want));
                }
            CHECK(out && worst == 0, "%s layout %d: worst error %g", ops[k].name, layout, worst);
            tn_array_free(out); tn_array_free(xv);
            tn_function_free(f);
            tn_graph_free(g);
        }
}

/* A custom op with value inputs on the GPU, the seed's GpuEye(n, m, k): the
   type rule sees n and m's values, the kernel reads n, m and k as device
   pointers (copied in like any input); a new shape each call, the CPU
   function never runs. The reference is j - i == k. */
static int gk_eye_cpu_calls;
static tn_result gk_eye_infer(const tn_custom_op *op, const tn_type *in, const tn_array *const *val, tn_type *out, char *why, size_t cap) {
    (void)op; (void)in; (void)why; (void)cap;
    int64_t n = val[0] ? (int64_t)tn_array_get(val[0], NULL) : -1, m = val[1] ? (int64_t)tn_array_get(val[1], NULL) : -1;
    out[0] = (tn_type){ TN_F32, 2, { n, m }, { n == 1, m == 1 } };
    return TN_OK;
}
static tn_result gk_eye_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)in; (void)why; (void)cap;
    gk_eye_cpu_calls++;
    memset(out[0]->data, 0, tn_array_nbytes(out[0]));
    return TN_OK;
}
static const char *GK_EYE =
    "extern \"C\" __global__ void gk_eye(const long long *n, const long long *m, const long long *k, float *out, long long count) {\n"
    "    long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (t < count) out[t] = t % *m - t / *m == *k ? 1.0f : 0.0f;\n"
    "}\n";

TEST(test_custom_value_inputs_on_gpu) {
    tn_custom_op eye = { .name = "GpuEye", .n_inputs = 3, .value_inputs = 1 | 2, .infer_values = gk_eye_infer, .cpu = gk_eye_cpu,
                         .cuda_source = GK_EYE, .cuda_kernel = "gk_eye" };
    tn_graph *g = tn_graph_new();
    tn_var *n = tn_scalar(g, "n", TN_I64), *m = tn_scalar(g, "m", TN_I64), *k = tn_scalar(g, "k", TN_I64);
    tn_var *e = tn_custom(NULL, &eye, 3, (tn_var *[]){ n, m, k });
    tn_func *f = e ? tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = (tn_var *[]){ n, m, k }, .n_outputs = 1, .outputs = &e }) : NULL;
    CHECK(f, "compile: %s", tn_last_error());
    char *dp = f ? dprint(f) : NULL;
    CHECK(dp && strstr(dp, "GpuCustom{GpuEye}"), "placed on the GPU:\n%s", dp ? dp : "");
    free(dp);
    static const int64_t cs[][3] = { {3, 5, 1}, {300, 257, -2}, {0, 4, 0}, {4, 4, 9}, {64, 64, 0} };
    for (int c = 0; f && c < 5; c++) {
        tn_array *in[3], *r = NULL;
        for (int j = 0; j < 3; j++) in[j] = tn_array_scalar(TN_I64, (double)cs[c][j]);
        CHECK(tn_call(f, in, &r) == TN_OK, "eye(%lld, %lld, %lld): %s", (long long)cs[c][0], (long long)cs[c][1], (long long)cs[c][2], tn_last_error());
        double err = eye_err(r, cs[c][0], cs[c][1], cs[c][2]);
        CHECK(err == 0, "eye(%lld, %lld, %lld): error %g", (long long)cs[c][0], (long long)cs[c][1], (long long)cs[c][2], err);
        tn_array_free(r);
        for (int j = 0; j < 3; j++) tn_array_free(in[j]);
    }
    CHECK(gk_eye_cpu_calls == 0, "the CPU function ran %d times", gk_eye_cpu_calls);
    tn_function_free(f);
    tn_graph_free(g);
}

/* The seed's PyCUDADoubleOp: a CUDA kernel doubling x, whose gradient is the
   op again applied to the output gradient; cost sum(double(x)^2), gradient 8x. */
static const char *GK_DOUBLE =
    "extern \"C\" __global__ void double_it(const float *x, float *y, long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = 2 * x[i];\n"
    "}\n";
static tn_result gk_double_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    gk_cpu_calls++;
    for (int64_t i = 0, n = tn_array_size(out[0]); i < n; i++) ((float *)out[0]->data)[i] = 2 * ((const float *)in[0]->data)[i];
    return TN_OK;
}
static tn_result gk_double_grad(const tn_custom_op *op, tn_var *const *in, tn_var *const *out, tn_var *const *gout,
                                const bool *need, tn_var **gin, char *why, size_t cap) {
    (void)in; (void)out; (void)why; (void)cap;
    if (need[0]) gin[0] = tn_custom(NULL, op, 1, gout);
    return TN_OK;
}
TEST(test_custom_grad_on_gpu) {
    tn_custom_op dbl = { .name = "PyCUDADoubleOp", .n_inputs = 1, .infer = gk_same_infer, .cpu = gk_double_cpu,
                         .cuda_source = GK_DOUBLE, .cuda_kernel = "double_it", .grad = gk_double_grad };
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *d = tn_custom(NULL, &dbl, 1, &x);
    tn_var *c = tn_sum(tn_sqr(d), NULL, 0, false);
    tn_var *gx = tn_grad1(c, x);
    CHECK(gx != NULL, "grad: %s", tn_last_error());
    tn_var *outs[2] = { d, gx };
    tn_func *f = gx ? tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = outs }) : NULL;
    CHECK(f != NULL, "compile: %s", tn_last_error());
    const int64_t n = 1000;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -3, 3, 81), *res[2] = { NULL, NULL };
    int calls = gk_cpu_calls;
    CHECK(f && tn_call(f, &xv, res) == TN_OK, "call: %s", tn_last_error());
    CHECK(gk_cpu_calls == calls, "both custom nodes ran on the GPU");
    double *x64 = as_f64(xv), *r0 = (double *)malloc((size_t)n * sizeof *r0), *r1 = (double *)malloc((size_t)n * sizeof *r1);
    for (int64_t i = 0; i < n; i++) { r0[i] = 2 * x64[i]; r1[i] = 8 * x64[i]; }
    CHECK(res[0] && max_err(res[0], r0, n) == 0 && res[1] && max_err(res[1], r1, n) <= 1e-6, "values: %g %g",
          res[0] ? max_err(res[0], r0, n) : -1.0, res[1] ? max_err(res[1], r1, n) : -1.0);
    free(x64); free(r0); free(r1);
    tn_array_free(res[0]); tn_array_free(res[1]); tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* The seed: multiply_them(drv.Out(dest), drv.In(a), drv.In(b), block=(400,1,1)). */
TEST(test_raw_kernel_multiply_them) {
    tn_cuda_module *m = tn_cuda_module_new(
        "extern \"C\" __global__ void multiply_them(float *dest, const float *a, const float *b) {\n"
        "    const int i = threadIdx.x;\n"
        "    dest[i] = a[i] * b[i];\n"
        "}\n", NULL);
    CHECK(m != NULL, "module: %s", tn_last_error());
    tn_cuda_kernel *k = m ? tn_cuda_module_get(m, "multiply_them") : NULL;
    CHECK(k != NULL, "kernel: %s", tn_last_error());
    CHECK(!m || tn_cuda_module_get(m, "multiply_them") == k, "the same handle again");
    const int64_t n = 400;
    tn_array *a = tn_array_rand_normal(TN_F32, 1, &n, 0, 1, 91), *b = tn_array_rand_normal(TN_F32, 1, &n, 0, 1, 92);
    tn_array *dest = tn_array_zeros(TN_F32, 1, &n);
    tn_cuda_arg args[3] = { tn_cuda_arg_out(dest), tn_cuda_arg_in(a), tn_cuda_arg_in(b) };
    CHECK(k && tn_cuda_launch(k, (tn_cuda_dim3){ 1, 1, 1 }, (tn_cuda_dim3){ 400, 1, 1 }, 0, 3, args) == TN_OK, "launch: %s", tn_last_error());
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += ((float *)dest->data)[i] != ((float *)a->data)[i] * ((float *)b->data)[i];
    CHECK(bad == 0, "%d of 400 differ from a*b", bad);
    CHECK(m && tn_cuda_module_get(m, "no_such_kernel") == NULL, "unknown name");
    CHECK_ERR(TN_ERR_DEVICE, "no kernel 'no_such_kernel' in the module");
    tn_array_free(a); tn_array_free(b); tn_array_free(dest);
    tn_cuda_module_free(m);
}

/* inout, a strided in, scalars of each kind, a device array, float16 through
   load_w/write_w; and the argument errors. */
TEST(test_raw_kernel_arguments) {
    tn_cuda_module *m = tn_cuda_module_new(
        "extern \"C\" __global__ void axpy(float *y, const float *x, float a, int n, long long add, double scale, float *dev) {\n"
        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (i >= n) return;\n"
        "    y[i] = (float)(scale * (a * x[i] + y[i])) + (float)add;\n"
        "    dev[i] = y[i];\n"
        "}\n"
        "extern \"C\" __global__ void half_twice(const tn_half *x, tn_half *y, long long n) {\n"
        "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
        "    if (i < n) { work_dtype(tn_half) w = load_w(x[i]); y[i] = write_w<tn_half>(w * 2.0f); }\n"
        "}\n", "--use_fast_math");
    CHECK(m != NULL, "module: %s", tn_last_error());
    tn_cuda_kernel *k = m ? tn_cuda_module_get(m, "axpy") : NULL, *h = m ? tn_cuda_module_get(m, "half_twice") : NULL;
    CHECK(k && h, "kernels: %s", tn_last_error());
    const int64_t n = 1000;
    tn_array *y = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 101);
    tn_array *xb = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ n, 2 }, -1, 1, 102);
    tn_array *x = tn_array_slice(xb, 1, 1, 2, 1), *xr = tn_array_reshape(x, 1, &n);    /* column 1: stride 2 */
    tn_array *y0 = tn_array_copy(y), *zeros = tn_array_zeros(TN_F32, 1, &n);
    tn_array *dev = tn__copy_on(zeros, tn__cuda.ordinal);
    CHECK(xr && !tn_array_is_contiguous(xr) && dev && dev->device == tn__cuda.ordinal, "a strided host input and a device array");
    tn_cuda_arg args[7] = { tn_cuda_arg_inout(y), tn_cuda_arg_in(xr), tn_cuda_arg_f32(0.5f), tn_cuda_arg_i32((int32_t)n),
                            tn_cuda_arg_i64(3), tn_cuda_arg_f64(-2.0), tn_cuda_arg_device(dev) };
    CHECK(k && tn_cuda_launch(k, (tn_cuda_dim3){ 4, 1, 1 }, (tn_cuda_dim3){ 256, 1, 1 }, 0, 7, args) == TN_OK, "launch: %s", tn_last_error());
    tn_array *back = dev ? tn_array_to_host(dev) : NULL;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = (float)(-2.0 * (0.5f * (float)tn_array_get(xr, &i) + ((float *)y0->data)[i])) + 3.0f;
        bad += ((float *)y->data)[i] != want || !back || ((float *)back->data)[i] != want;
    }
    CHECK(bad == 0, "%d of %lld elements differ", bad, (long long)n);

    tn_array *hx = tn_array_rand_uniform(TN_F16, 1, &n, -8, 8, 103), *hy = tn_array_zeros(TN_F16, 1, &n);
    tn_cuda_arg hargs[3] = { tn_cuda_arg_in(hx), tn_cuda_arg_out(hy), tn_cuda_arg_i64(n) };
    CHECK(h && tn_cuda_launch(h, (tn_cuda_dim3){ 4, 1, 1 }, (tn_cuda_dim3){ 256, 1, 1 }, 0, 3, hargs) == TN_OK, "half: %s", tn_last_error());
    bad = 0;
    for (int64_t i = 0; i < n; i++) bad += tn_array_get(hy, &i) != 2 * tn_array_get(hx, &i);
    CHECK(bad == 0, "float16: %d of %lld elements differ", bad, (long long)n);

    /* errors: an out that is not contiguous, a device array as in, a host array as device, a bad kind */
    tn_cuda_arg e1[1] = { tn_cuda_arg_out(xr) };
    CHECK(k && tn_cuda_launch(k, (tn_cuda_dim3){ 1, 1, 1 }, (tn_cuda_dim3){ 1, 1, 1 }, 0, 1, e1) == TN_ERR_INVALID, "strided out");
    CHECK_ERR(TN_ERR_INVALID, "kernel 'axpy': argument 0 (out/inout) is not contiguous");
    tn_cuda_arg e2[1] = { tn_cuda_arg_in(dev) };
    CHECK(k && tn_cuda_launch(k, (tn_cuda_dim3){ 1, 1, 1 }, (tn_cuda_dim3){ 1, 1, 1 }, 0, 1, e2) == TN_ERR_DEVICE, "device as in");
    CHECK_ERR(TN_ERR_DEVICE, "pass it with tn_cuda_arg_device");
    tn_cuda_arg e3[1] = { tn_cuda_arg_device(y) };
    CHECK(k && tn_cuda_launch(k, (tn_cuda_dim3){ 1, 1, 1 }, (tn_cuda_dim3){ 1, 1, 1 }, 0, 1, e3) == TN_ERR_DEVICE, "host as device");
    CHECK_ERR(TN_ERR_DEVICE, "argument 0 is a device argument but lives on the host");
    tn_cuda_arg e4[1];
    memset(e4, 0, sizeof e4);
    CHECK(k && tn_cuda_launch(k, (tn_cuda_dim3){ 1, 1, 1 }, (tn_cuda_dim3){ 1, 1, 1 }, 0, 1, e4) == TN_ERR_INVALID, "kind 0");
    CHECK_ERR(TN_ERR_INVALID, "argument 0 has kind 0");
    CHECK(k && tn_cuda_launch(k, (tn_cuda_dim3){ 1, 1, 1 }, (tn_cuda_dim3){ 1, 1, 1 }, 0, TN_CUDA_MAX_ARGS + 1, args) == TN_ERR_INVALID, "too many");
    tn_array_free(back); tn_array_free(hx); tn_array_free(hy);
    tn_array_free(y); tn_array_free(y0); tn_array_free(x); tn_array_free(xr); tn_array_free(xb); tn_array_free(zeros); tn_array_free(dev);
    tn_cuda_module_free(m);
}

int main(void) {
    base_cfg.device = TN_DEVICE_CUDA;
    base_cfg.floatX = TN_F32;
    base_cfg.allow_gc = true;
    if (tn_parse_flags(getenv("TENSOR_FLAGS"), &base_cfg) != TN_OK) printf("TENSOR_FLAGS: %s\n", tn_last_error());
    base_cfg.device = TN_DEVICE_CUDA;
    tn_init(&base_cfg);
    if (tn_cuda_init() != TN_OK || !tn__get_backend()) {
        th_skip_all("no usable GPU: %s", tn_cuda_status());
    }
    printf("%s\n", tn_cuda_status());
    TH_RUN(test_seed_exp_loop);
    TH_RUN(test_input_transfer_debugprint);
    TH_RUN(test_linear_shared_update);
    TH_RUN(test_products);
    TH_RUN(test_small_gemv);
    TH_RUN(test_join_on_gpu);
    TH_RUN(test_gemm_addends);
    TH_RUN(test_fused_chain_and_reduction);
    TH_RUN(test_new_ops_and_cumulative_on_gpu);
    TH_RUN(test_cumulative_gpu_equals_cpu);
    TH_RUN(test_eye_var_on_gpu);
    TH_RUN(test_index_gpu_equals_cpu);
    TH_RUN(test_conv_gpu_equals_cpu);
    TH_RUN(test_print_on_gpu);
    TH_RUN(test_cuda_and_cpu_agree);
    TH_RUN(test_random_gpu_equals_cpu);
    TH_RUN(test_fused_draws_gpu_equals_cpu);
    TH_RUN(test_reduce_epilogue_on_gpu);
    TH_RUN(test_gemv_epilogue_on_gpu);
    TH_RUN(test_scan_seed_on_gpu);
    TH_RUN(test_scan_grad_on_gpu);
    TH_RUN(test_scan_replayed_on_gpu);
    TH_RUN(test_profile_event_times);
    TH_RUN(test_check_mode);
    TH_RUN(test_graph_replay);
    TH_RUN(test_profile_replayed);
    TH_RUN(test_streams_per_function);
    TH_RUN(test_fresh_outputs_on_device_and_pinned);
    TH_RUN(test_passed_inputs_registered);
    TH_RUN(test_update_targets_on_device);
    TH_RUN(test_threads_on_gpu);
    TH_RUN(test_products_on_two_streams);
    TH_RUN(test_custom_strided_on_gpu);
    TH_RUN(test_custom_grad_on_gpu);
    TH_RUN(test_custom_value_inputs_on_gpu);
    TH_RUN(test_raw_kernel_multiply_them);
    TH_RUN(test_raw_kernel_arguments);
    tn_shutdown();
    TH_END();
}
