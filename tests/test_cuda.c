/* On a GPU: every generated elementwise kernel (each op, each dtype, and the
   fused multi-output and float16 programs) run on device arrays against the
   CPU engine (tn__cpu_ew_run) on the same inputs, for sizes 1, 31 and 2^20+3,
   contiguous, scalar-broadcast, transposed, step-sliced and broadcast layouts;
   the caching allocator (no driver allocation in a steady loop); the kernel
   cache (a second run compiles nothing); a launch timing line.
   Without a usable GPU it prints "SKIP (no usable GPU: why)" and counts nothing. */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"

/* The configured device's context (opened by tn_cuda_init). */
#define CUDA_DEV() tn__cuda_dev_get(tn__cuda.ordinal)
#include "harness.h"
#include "gpu/ew_programs.h"
#include "gpu/ew_fused.h"
#include <time.h>

static const int DEV = 0;
static bool quick;              /* TN_TEST_QUICK=1 (under compute-sanitizer): small sizes only */

/* Random values of dtype t, never all zeros: floats in [-3, 3] with a few
   specials, ints in [-50, 50] (no zero divisors needed: the int ops define /0). */
static tn_array *rand_array(tn_dtype t, int ndim, const int64_t *shape, uint64_t seed) {
    tn_array *a = tn_array_rand_uniform(TN_F64, ndim, shape, -3, 3, seed);
    if (!a) return NULL;
    int64_t n = tn_array_size(a);
    double *d = (double *)a->data;
    for (int64_t i = 0; i < n; i++) {
        if (t == TN_BOOL) d[i] = d[i] > 0;
        else if (t == TN_I32 || t == TN_I64) d[i] = floor(d[i] * 16.7);
        else if (i % 97 == 5) d[i] = i % 3 ? 0.0 : -0.5;
    }
    tn_array *c = tn_array_astype(a, t);
    tn_array_free(a);
    return c;
}

/* A device copy of host array h with the same strides (its whole buffer span). */
static tn_array *to_device(const tn_array *h) {
    int64_t lo = 0, hi = (int64_t)tn_dtype_size(h->dtype);
    for (int d = 0; d < h->ndim; d++) {
        int64_t span = (h->shape[d] - 1) * h->strides[d];
        if (span < 0) lo += span; else hi += span;
    }
    int64_t n = hi - lo;
    tn_array *buf = tn__array_alloc(TN_BOOL, 1, &n, DEV);
    if (!buf) return NULL;
    if (tn__cuda_copy(buf->data, DEV, (const char *)h->data + lo, TN_HOST, (size_t)n) != TN_OK) { tn_array_free(buf); return NULL; }
    tn_array *v = tn__array_from_buffer(buf->base, h->dtype, h->ndim, h->shape, h->strides, (char *)buf->data - lo, DEV);
    tn_array_free(buf);
    return v;
}

/* Largest normalised difference between the GPU and CPU outputs. Integers
   and bools must be equal; NaN must meet NaN; floats within tol. */
static bool outputs_match(const tn_array *cpu, const tn_array *gpu_dev, double tol, char *why, size_t cap) {
    tn_array *g = tn_array_to_host(gpu_dev);
    if (!g) { snprintf(why, cap, "copy back: %.150s", tn_last_error()); return false; }
    int64_t n = tn_array_size(cpu);
    bool ok = true;
    tn_array *cf = tn_array_astype(cpu, TN_F64), *gf = tn_array_astype(g, TN_F64);
    const double *c = (const double *)cf->data, *q = (const double *)gf->data;
    bool exact = !tn_dtype_is_float(cpu->dtype);
    for (int64_t i = 0; i < n && ok; i++) {
        if (isnan(c[i]) || isnan(q[i])) ok = isnan(c[i]) && isnan(q[i]);
        else if (isinf(c[i]) || isinf(q[i])) ok = c[i] == q[i];
        else ok = exact ? c[i] == q[i] : fabs(c[i] - q[i]) <= tol * fmax(1.0, fabs(c[i]));
        if (!ok) snprintf(why, cap, "element %lld: cpu %.17g gpu %.17g", (long long)i, c[i], q[i]);
    }
    tn_array_free(cf);
    tn_array_free(gf);
    tn_array_free(g);
    return ok;
}

static double tol_for(tn_dtype t) { return t == TN_F16 ? 2e-3 : t == TN_F32 ? 2e-5 : t == TN_F64 ? 1e-12 : 0; }

enum { LAY_CONTIG, LAY_SCALAR, LAY_TRANSPOSED, LAY_SLICED, LAY_BROADCAST, LAY_COUNT };
static const char *lay_name[LAY_COUNT] = { "contiguous", "scalar", "transposed", "sliced", "broadcast" };

/* Runs program p on the GPU and the CPU for output shape (rows, cols) with
   inputs laid out as `lay`; true when every output matches. */
static bool run_case(const tn_ew_program *p, int lay, int64_t rows, int64_t cols, uint64_t seed, char *why, size_t cap) {
    tn_array *hin[8] = { 0 }, *din[8] = { 0 }, *hout[8] = { 0 }, *dout[8] = { 0 }, *keep[8] = { 0 };
    int64_t shape[2] = { rows, cols };
    bool ok = true;
    why[0] = 0;
    for (int i = 0; i < p->n_in && ok; i++) {
        tn_dtype t = p->in_dtype[i];
        if (lay == LAY_SCALAR && i == 0) hin[i] = rand_array(t, 0, NULL, seed + (uint64_t)i);
        else if (lay == LAY_TRANSPOSED) {
            keep[i] = rand_array(t, 2, (int64_t[]){ cols, rows }, seed + (uint64_t)i);
            hin[i] = tn_array_transpose(keep[i], NULL);
        } else if (lay == LAY_SLICED) {
            keep[i] = rand_array(t, 2, (int64_t[]){ rows, 2 * cols + 1 }, seed + (uint64_t)i);
            hin[i] = tn_array_slice(keep[i], 1, 1, 2 * cols + 1, 2);
        } else if (lay == LAY_BROADCAST && i == 0) hin[i] = rand_array(t, 2, (int64_t[]){ 1, cols }, seed);
        else hin[i] = rand_array(t, 2, shape, seed + (uint64_t)i);
        ok = hin[i] && (din[i] = to_device(hin[i]));
    }
    for (int j = 0; j < p->n_out && ok; j++) {
        hout[j] = tn__array_alloc(p->out_dtype[j], 2, shape, TN_HOST);
        dout[j] = tn__array_alloc(p->out_dtype[j], 2, shape, DEV);
        ok = hout[j] && dout[j];
    }
    if (!ok) snprintf(why, cap, "setup: %.300s", tn_last_error());
    tn__cuda_ew_state st = { .prog = p };
    if (ok && tn__cpu_ew_run(p, hin, hout) != TN_OK) { snprintf(why, cap, "cpu: %.300s", tn_last_error()); ok = false; }
    if (ok && (tn__cuda_ew_run(&st, din, dout, "test") != TN_OK || tn__cuda_synchronize() != TN_OK)) {
        snprintf(why, cap, "gpu: %.300s", tn_last_error());
        ok = false;
    }
    for (int j = 0; j < p->n_out && ok; j++) {
        char w[200];
        if (!outputs_match(hout[j], dout[j], tol_for(p->out_dtype[j]), w, sizeof w)) {
            snprintf(why, cap, "output %d (%s): %.200s", j, tn_dtype_name(p->out_dtype[j]), w);
            ok = false;
        }
    }
    for (int i = 0; i < 8; i++) {
        tn_array_free(hin[i]); tn_array_free(din[i]); tn_array_free(hout[i]); tn_array_free(dout[i]); tn_array_free(keep[i]);
    }
    return ok;
}

static const int64_t sizes[][2] = { { 1, 1 }, { 1, 31 }, { 3, 31 }, { 1025, 1023 } };  /* 1, 31, 93, 2^20+1023 */

TEST(test_every_op_on_gpu) {
    int cases = 0, bad = 0;
    for (int op = TN_OP_NONE + 1; op <= TN_OP_CAST; op++)
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
            prog_buf b;
            if (!build_op_program(&b, op, t)) continue;
            for (int lay = 0; lay < LAY_COUNT; lay++)
                for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                    if ((lay == LAY_SCALAR || lay == LAY_BROADCAST) && b.p.n_in < 2) continue;
                    if (s == 3 && (quick || (lay != LAY_CONTIG && lay != LAY_TRANSPOSED))) continue;   /* big: two layouts */
                    char why[400];
                    cases++;
                    if (!run_case(&b.p, lay, sizes[s][0], sizes[s][1], 1000 + (uint64_t)cases, why, sizeof why)) {
                        if (++bad <= 20)
                            CHECK(0, "%s %s %s %lldx%lld: %s", tn__ew_info(op)->name, tn_dtype_name(t), lay_name[lay],
                                  (long long)sizes[s][0], (long long)sizes[s][1], why);
                    }
                }
        }
    printf("  %d op cases, %d mismatches\n", cases, bad);
    CHECK(bad == 0, "%d of %d cases differ from the CPU", bad, cases);
}

TEST(test_fused_and_f16_on_gpu) {
    prog_buf b;
    build_fused(&b);
    for (int lay = 0; lay < LAY_COUNT; lay++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            char why[400];
            CHECK(run_case(&b.p, lay, sizes[s][0], sizes[s][1], 77 + (uint64_t)s, why, sizeof why), "fused %s %lldx%lld: %s",
                  lay_name[lay], (long long)sizes[s][0], (long long)sizes[s][1], why);
        }
    for (tn_dtype s = TN_BOOL; s < TN_DTYPE_COUNT; s = (tn_dtype)(s + 1))
        for (tn_dtype d = TN_BOOL; d < TN_DTYPE_COUNT; d = (tn_dtype)(d + 1)) {
            pb_init(&b, 1, &s);
            int r = pb_op(&b, TN_OP_CAST, d, s, 0, -1, -1);
            pb_out(&b, r, d);
            char why[400];
            CHECK(run_case(&b.p, LAY_SLICED, 3, 31, 5, why, sizeof why), "cast %s->%s: %s", tn_dtype_name(s), tn_dtype_name(d), why);
        }
}

TEST(test_steady_loop_allocates_nothing_and_compiles_nothing) {
    prog_buf b;
    build_op_program(&b, TN_OP_EXP, TN_F32);
    tn__cuda_ew_state st = { .prog = &b.p };
    int64_t n = 230400;
    tn_array *x = tn__array_alloc(TN_F32, 1, &n, DEV), *y = NULL;
    CHECK(x != NULL, "%s", tn_last_error());
    tn_cuda_cache_stats s0 = { 0 }, s1;
    uint64_t a0 = 0;
    for (int it = 0; it < 50 && x; it++) {
        y = tn__array_alloc(TN_F32, 1, &n, DEV);
        CHECK(y && tn__cuda_ew_run(&st, &x, &y, "loop") == TN_OK, "%s", tn_last_error());
        tn_array_free(y);
        if (it == 0) { a0 = CUDA_DEV()->dmem.driver_allocs; tn_cuda_get_cache_stats(&s0); }
    }
    tn_cuda_get_cache_stats(&s1);
    CHECK(CUDA_DEV()->dmem.driver_allocs == a0, "driver allocations in the steady loop: %llu", (unsigned long long)(CUDA_DEV()->dmem.driver_allocs - a0));
    CHECK(s1.compiles == s0.compiles && s1.disk_reads == s0.disk_reads, "nothing compiled or read after the first call");

    /* timing: bare launches of the generated exp kernel, events after a warm-up */
    tn__CUevent e0, e1;
    tn__cuda.cu.cuEventCreate(&e0, 0);
    tn__cuda.cu.cuEventCreate(&e1, 0);
    y = tn__array_alloc(TN_F32, 1, &n, DEV);
    for (int it = 0; it < 100; it++) tn__cuda_ew_run(&st, &x, &y, "warm");
    tn__cuda.cu.cuEventRecord(e0, tn__cuda_stream(CUDA_DEV()));
    for (int it = 0; it < 1000; it++) tn__cuda_ew_run(&st, &x, &y, "timed");
    tn__cuda.cu.cuEventRecord(e1, tn__cuda_stream(CUDA_DEV()));
    tn__cuda.cu.cuEventSynchronize(e1);
    float ms = 0;
    tn__cuda.cu.cuEventElapsedTime(&ms, e0, e1);
    printf("  exp over 230400 float32: %.2f us per call (1000 calls, launch through tn__cuda_ew_run)\n", ms);
    tn__cuda.cu.cuEventDestroy_v2(e0);
    tn__cuda.cu.cuEventDestroy_v2(e1);
    tn_array_free(y);
    tn_array_free(x);
}

TEST(test_out_of_memory_is_an_error) {
    int64_t n = (int64_t)1 << 50;    /* 1 PiB */
    tn_array *a = tn__array_alloc(TN_BOOL, 1, &n, DEV);
    CHECK(a == NULL, "a 1 PiB allocation fails");
    CHECK(tn_last_result() == TN_ERR_OOM, "OOM, got %s: %s", tn_result_string(tn_last_result()), tn_last_error());
    int64_t m = 1000;
    a = tn__array_alloc(TN_F32, 1, &m, DEV);
    CHECK(a != NULL, "the device still works after OOM: %s", tn_last_error());
    tn_array_free(a);
}

/* Alloc runs on the device (the zeros and ones of gradient graphs): a value
   broadcast to a fixed shape, and a weak literal filled like a device array
   (cast from float64 to float32 on the way), both kept on the device. */
TEST(test_alloc_on_gpu) {
    int64_t shape[2] = { 37, 1029 }, n = shape[0] * shape[1];
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32), *s = tn_vector(g, "s", TN_F32);
    tn_var *outs[2] = { tn_gpu_from_host(tn_alloc(s, 2, shape)), tn_gpu_from_host(tn_fill(tn_exp(x), tn_scalar_const(g, 1.5))) };
    tn_var *ins[2] = { x, s };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 2, .outputs = outs });
    CHECK(f, "%s", tn_last_error());
    tn_array *xv = tn_array_rand_uniform(TN_F32, 2, shape, -2, 2, 7), *sv = tn_array_rand_uniform(TN_F32, 1, &shape[1], -2, 2, 8);
    if (f) {
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        tn_debugprint_function(f, m);
        fclose(m);
        const char *p1 = strstr(buf, "GpuAlloc"), *p2 = p1 ? strstr(p1 + 1, "GpuAlloc") : NULL;
        CHECK(p1 && p2 && !strstr(buf, "HostFromGpu"), "both Allocs on the GPU, nothing copied back:\n%s", buf);
        free(buf);
        tn_array *vals[2] = { xv, sv }, *r[2] = { 0 };
        for (int call = 0; call < 2; call++) {
            CHECK(tn_call(f, vals, r) == TN_OK, "%s", tn_last_error());
            if (!r[0] || !r[1]) break;
            CHECK(r[0]->device == DEV && r[1]->device == DEV, "outputs stay on the device");
            tn_array *h0 = tn_array_astype(r[0], TN_F64), *h1 = tn_array_astype(r[1], TN_F64);
            double e = h0 && h1 ? 0 : INFINITY;
            for (int64_t i = 0; h0 && h1 && i < n; i++) {
                double want0 = ((const float *)sv->data)[i % shape[1]];
                e = fmax(e, fabs(((const double *)h0->data)[i] - want0) + fabs(((const double *)h1->data)[i] - 1.5));
            }
            CHECK(e == 0, "call %d: Alloc values differ by %g", call, e);
            tn_array_free(h0); tn_array_free(h1);
            tn_array_free(r[0]); tn_array_free(r[1]);
        }
    }
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(xv); tn_array_free(sv);
}

/* DLPack on the device: a device array exports as kDLCUDA on its ordinal,
   with its device pointer, and comes back as a device array on the same
   memory; the deleter runs once, after the last array is freed. */
static int dl_deletes;
static void (*dl_inner)(DLManagedTensorVersioned *);
static void dl_counting(DLManagedTensorVersioned *mt) { dl_deletes++; dl_inner(mt); }
TEST(test_dlpack_on_gpu) {
    int64_t shape[2] = { 33, 70 };
    tn_array *h = tn_array_rand_uniform(TN_F32, 2, shape, -1, 1, 11), *d = tn__array_alloc(TN_F32, 2, shape, DEV);
    CHECK(d && tn_array_assign(d, h) == TN_OK, "to the device: %s", tn_last_error());
    tn_array *dv = d ? tn_array_slice(d, 1, 3, 70, 2) : NULL;
    DLManagedTensorVersioned *mt = dv ? tn_array_to_dlpack(dv) : NULL;
    CHECK(mt && mt->dl_tensor.device.device_type == kDLCUDA && mt->dl_tensor.device.device_id == DEV &&
          (char *)mt->dl_tensor.data + mt->dl_tensor.byte_offset == (char *)dv->data && mt->dl_tensor.strides[1] == 2,
          "kDLCUDA on device %d, the view's pointer and strides: %s", DEV, tn_last_error());
    if (!mt) { tn_array_free(dv); tn_array_free(d); tn_array_free(h); return; }
    dl_deletes = 0;
    dl_inner = mt->deleter;
    mt->deleter = dl_counting;
    tn_array *b = tn_array_from_dlpack(mt);
    CHECK(b && b->device == DEV && b->data == dv->data, "imported on the device without a copy: %s", tn_last_error());
    tn_array_free(dv);
    tn_array_free(d);
    tn_array *back = b ? tn_array_to_host(b) : NULL;
    bool same = back && back->shape[0] == 33 && back->shape[1] == 34;
    for (int i = 0; same && i < 33; i++)
        for (int j = 0; j < 34; j++) same = same && tn_array_get(back, (int64_t[]){ i, j }) == tn_array_get(h, (int64_t[]){ i, 3 + 2 * j });
    CHECK(same, "the device values, read back through the import");
    tn_array_free(back);
    tn_array_free(b);
    CHECK(dl_deletes == 1, "deleted once (%d)", dl_deletes);
    tn_array_free(h);
}

/* A shared variable moved to the device by one function stays readable by a
   function compiled with FAST_COMPILE (placement runs in every mode). */
TEST(test_fast_compile_reads_device_shared) {
    int64_t shape[2] = { 19, 33 }, n = shape[0] * shape[1];
    tn_array *wv = tn_array_rand_uniform(TN_F32, 2, shape, -2, 2, 11);
    tn_graph *g = tn_graph_new();
    tn_var *w = tn_shared(g, "w", wv);
    tn_var *y1 = tn_exp(w), *y2 = tn_mul(tn_sin(w), tn_scalar_const(g, 3.0));
    tn_func *f1 = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y1 });
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y2, .mode = TN_MODE_FAST_COMPILE });
    CHECK(f1 && f2, "%s", tn_last_error());
    const tn_array *sv = tn_shared_get(w);
    CHECK(sv && sv->device == DEV, "the first function moved w to the device");
    tn_array *r1 = NULL, *r2 = NULL;
    CHECK(f1 && tn_call(f1, NULL, &r1) == TN_OK, "%s", tn_last_error());
    CHECK(f2 && tn_call(f2, NULL, &r2) == TN_OK, "%s", tn_last_error());
    if (r1 && r2) {
        CHECK(r1->device == TN_HOST && r2->device == TN_HOST, "host results");
        double e = 0;
        for (int64_t i = 0; i < n; i++) {
            double x = ((const float *)wv->data)[i];
            e = fmax(e, fabs(((const float *)r1->data)[i] - exp(x)) / fmax(1, exp(x)));
            e = fmax(e, fabs(((const float *)r2->data)[i] - 3 * sin(x)));
        }
        CHECK(e < 1e-5, "max error %g", e);
    }
    tn_array_free(r1); tn_array_free(r2);
    tn_function_free(f1); tn_function_free(f2);
    tn_graph_free(g);
    tn_array_free(wv);
}

int main(void) {
    tn_config cfg = { .device = TN_DEVICE_CUDA };
    tn_init(&cfg);
    if (tn_cuda_init() != TN_OK) {
        th_skip_all("no usable GPU: %s", tn_cuda_status());
    }
    printf("%s\n", tn_cuda_status());
    quick = getenv("TN_TEST_QUICK") && !strcmp(getenv("TN_TEST_QUICK"), "1");
    TH_RUN(test_every_op_on_gpu);
    TH_RUN(test_fused_and_f16_on_gpu);
    TH_RUN(test_steady_loop_allocates_nothing_and_compiles_nothing);
    TH_RUN(test_out_of_memory_is_an_error);
    TH_RUN(test_alloc_on_gpu);
    TH_RUN(test_fast_compile_reads_device_shared);
    TH_RUN(test_dlpack_on_gpu);
    tn_shutdown();
    TH_END();
}
