/* speed_test.c - the seed blog's transfer-cost experiment: m, x and b are
   1000x1000 float32 matrices from RandomState(123).randn, y = dot(m, x) + b
   (one Gemm), called 100 times in the blog's four versions:
     0. NumPy's numpy.dot(m, x) + b: plain C calling CBLAS's sgemm (the BLAS
        NumPy would call; loaded with dlopen, a plain C loop without one),
     1. m, x and b passed on every call,
     2. m and b shared, x passed,
     3. everything shared and y written into a shared variable by an update.
   Each version prints its compiled graph (debugprint), its time, how far it
   is from version 0, and its profile's summary lines (where the time went,
   and the advice: which input to make shared).

   Build: cc -std=c11 -O2 -I. examples/speed_test.c -o speed_test -lm -lpthread -ldl
   Run:   ./speed_test [calls]          (TENSOR_FLAGS=device=cuda ./speed_test for the GPU) */
#define _POSIX_C_SOURCE 199309L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define TRY(x) do { if (!(x)) { fprintf(stderr, "speed_test: %s\n", tn_last_error()); exit(1); } } while (0)
enum { N = 1000 };

/* cblas_sgemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); 101 row major, 111 no transpose */
typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *, int);

static sgemm_fn load_sgemm(const char **name) {
    static const char *const libs[] = { "libopenblas.so.0", "libcblas.so.3", "libblas.so.3" };
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        void *h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
        void *fn = h ? dlsym(h, "cblas_sgemm") : NULL;
        if (fn) { *name = libs[i]; sgemm_fn f; memcpy(&f, &fn, sizeof f); return f; }
    }
    *name = "a plain C loop (no CBLAS found)";
    return NULL;
}

/* y = m.x + b, C order */
static void numpy_version(sgemm_fn sgemm, const float *m, const float *x, const float *b, float *y) {
    memcpy(y, b, sizeof(float) * N * N);
    if (sgemm) { sgemm(101, 111, 111, N, N, N, 1.0f, m, N, x, N, 1.0f, y, N); return; }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < N; k++) {
            float a = m[(size_t)i * N + k];
            for (int j = 0; j < N; j++) y[(size_t)i * N + j] += a * x[(size_t)k * N + j];
        }
}

static double max_diff(const tn_array *a, const float *ref) {
    tn_array *h = tn_array_to_host(a);
    double d = INFINITY;
    if (h && tn_array_size(h) == (int64_t)N * N) {
        tn_array *c = tn_array_astype(h, TN_F32);
        d = 0;
        for (int64_t i = 0; c && i < (int64_t)N * N; i++) d = fmax(d, fabs((double)((const float *)c->data)[i] - ref[i]));
        tn_array_free(c);
    }
    tn_array_free(h);
    return d;
}

/* Calls f `calls` times; seconds per call. The last output in *last (owned). */
static double run(tn_func *f, tn_array *const *in, int calls, tn_array **last) {
    tn_array *out = NULL;
    TRY(tn_call(f, in, last ? &out : NULL) == TN_OK);   /* warm-up: plans buffers, compiles kernels */
    tn_profile_reset(f);
    double t0 = now();
    for (int i = 0; i < calls; i++) {
        tn_array_free(out);
        out = NULL;
        TRY(tn_call(f, in, last ? &out : NULL) == TN_OK);
    }
    double t = (now() - t0) / calls;
    if (last) *last = out;
    return t;
}

/* The profile's summary: where the time went, and the advice. */
static void profile_lines(const tn_func *f) {
    FILE *t = tmpfile();
    char line[1024];
    if (!t || tn_profile_print(f, t) != TN_OK) { if (t) fclose(t); return; }
    rewind(t);
    while (fgets(line, sizeof line, t))
        if (!strncmp(line, "Spent ", 6) || !strncmp(line, "  - ", 4)) printf("   profile: %s", line[0] == ' ' ? line + 4 : line);
    fclose(t);
}

static void show(const char *title, tn_func *f, double t, double diff) {
    printf("== %s\n", title);
    tn_debugprint_function(f, stdout);
    printf("   %.3f ms a call, max |y - numpy's y| = %.3g, on the %s\n", 1e3 * t, diff, tn_function_device_steps(f) > 0 ? "gpu" : "cpu");
    profile_lines(f);
    printf("\n");
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 100;
    if (calls < 1) calls = 1;
    TRY(tn_init(NULL) == TN_OK);
    int64_t sh[2] = { N, N };
    tn_random_state *rng = tn_random_state_new(123);
    tn_array *mv = tn_rs_randn(rng, TN_F32, 2, sh), *xv = tn_rs_randn(rng, TN_F32, 2, sh), *bv = tn_rs_randn(rng, TN_F32, 2, sh);
    TRY(mv && xv && bv);
    printf("y = dot(m, x) + b, m, x, b %dx%d float32 (RandomState(123).randn), %d calls\n\n", N, N, calls);

    /* 0. NumPy: y = numpy.dot(m, x) + b */
    const char *blas;
    sgemm_fn sgemm = load_sgemm(&blas);
    float *ny = (float *)malloc(sizeof(float) * N * N);
    TRY(ny);
    numpy_version(sgemm, (const float *)mv->data, (const float *)xv->data, (const float *)bv->data, ny);
    double t0 = now();
    for (int c = 0; c < calls; c++) numpy_version(sgemm, (const float *)mv->data, (const float *)xv->data, (const float *)bv->data, ny);
    double tnp = (now() - t0) / calls;
    printf("== 0. numpy.dot(m, x) + b (%s)\n   %.3f ms a call, y[0, 0:3] = %.6f %.6f %.6f\n\n", blas, 1e3 * tnp, ny[0], ny[1], ny[2]);

    /* 1. every input passed on every call */
    tn_graph *g1 = tn_graph_new();
    tn_var *m1 = tn_matrix(g1, "m", TN_F32), *x1 = tn_matrix(g1, "x", TN_F32), *b1 = tn_matrix(g1, "b", TN_F32);
    tn_var *y1 = tn_add(tn_dot(m1, x1), b1);
    tn_func *f1 = tn_function(g1, &(tn_func_desc){ .n_inputs = 3, .inputs = (tn_var *[]){ m1, x1, b1 }, .n_outputs = 1,
                                                   .outputs = &y1, .name = "inputs" });
    TRY(f1 && tn_profile_enable(f1, true) == TN_OK);
    tn_array *r = NULL;
    double t1 = run(f1, (tn_array *[]){ mv, xv, bv }, calls, &r);
    show("1. m, x, b passed on every call", f1, t1, max_diff(r, ny));
    tn_array_free(r);

    /* 2. m and b shared */
    tn_graph *g2 = tn_graph_new();
    tn_var *m2 = tn_shared(g2, "m", mv), *b2 = tn_shared(g2, "b", bv), *x2 = tn_matrix(g2, "x", TN_F32);
    tn_var *y2 = tn_add(tn_dot(m2, x2), b2);
    tn_func *f2 = tn_function(g2, &(tn_func_desc){ .n_inputs = 1, .inputs = &x2, .n_outputs = 1, .outputs = &y2, .name = "m_b_shared" });
    TRY(f2 && tn_profile_enable(f2, true) == TN_OK);
    double t2 = run(f2, &xv, calls, &r);
    show("2. m and b shared, x passed", f2, t2, max_diff(r, ny));
    tn_array_free(r);

    /* 3. everything shared; y written by an update, nothing returned */
    tn_graph *g3 = tn_graph_new();
    tn_array *yinit = tn_array_zeros(TN_F32, 2, sh);
    tn_var *m3 = tn_shared(g3, "m", mv), *b3 = tn_shared(g3, "b", bv), *x3 = tn_shared(g3, "x", xv), *ys = tn_shared(g3, "y", yinit);
    tn_update up = { ys, tn_add(tn_dot(m3, x3), b3) };
    tn_func *f3 = tn_function(g3, &(tn_func_desc){ .n_updates = 1, .updates = &up, .name = "all_shared" });
    TRY(f3 && tn_profile_enable(f3, true) == TN_OK);
    double t3 = run(f3, NULL, calls, NULL);
    tn_array *yh = tn_shared_get_value(ys);
    TRY(yh);
    show("3. all shared, y updated", f3, t3, max_diff(yh, ny));
    tn_array_free(yh);

    printf("summary (ms a call): numpy %.3f | passed %.3f | m, b shared %.3f | all shared %.3f\n", 1e3 * tnp, 1e3 * t1, 1e3 * t2, 1e3 * t3);
    free(ny);
    tn_function_free(f1); tn_function_free(f2); tn_function_free(f3);
    tn_graph_free(g1); tn_graph_free(g2); tn_graph_free(g3);
    tn_array_free(mv); tn_array_free(xv); tn_array_free(bv); tn_array_free(yinit);
    tn_random_state_free(rng);
    return 0;
}
