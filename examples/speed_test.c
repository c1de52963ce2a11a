/* speed_test.c - the seed blog's y = m.x + b, m 1000x1000, 500 calls, in its
   four versions: (1) m, x and b passed on every call, (2) m and b shared,
   (3) everything shared and the result written into a shared variable by an
   update (nothing crosses between host and device in the loop), (4) a plain
   C loop. Prints each compiled graph (one Gemv; GpuFromHost/HostFromGpu
   transfers where data crosses on a GPU) and its time.

   Build: cc -std=c11 -O2 -I. examples/speed_test.c -o speed_test -lm -lpthread -ldl
   Run:   ./speed_test [calls]          (TENSOR_FLAGS=device=cuda ./speed_test for the GPU) */
#define _POSIX_C_SOURCE 199309L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define TRY(x) do { if (!(x)) { fprintf(stderr, "speed_test: %s\n", tn_last_error()); exit(1); } } while (0)
enum { N = 1000 };

/* Calls f `calls` times with `in`; returns seconds per call and the last y[0]. */
static double run(tn_func *f, tn_array *const *in, int calls, bool has_output, double *y0) {
    tn_array *out = NULL;
    int64_t i0 = 0;
    TRY(tn_call(f, in, has_output ? &out : NULL) == TN_OK);   /* warm-up: plans buffers, compiles kernels */
    tn_array_free(out);
    out = NULL;
    double t0 = now();
    for (int i = 0; i < calls; i++) {
        tn_array_free(out);
        out = NULL;
        TRY(tn_call(f, in, has_output ? &out : NULL) == TN_OK);
    }
    double t = (now() - t0) / calls;
    if (out) *y0 = tn_array_get(out, &i0);
    tn_array_free(out);
    return t;
}

static void show(const char *title, tn_func *f, double t, double y0) {
    printf("== %s\n", title);
    tn_debugprint_function(f, stdout);
    printf("   %.1f us a call, y[0] = %.6f, %s\n\n", 1e6 * t, y0, tn_function_device_steps(f) > 0 ? "on the gpu" : "on the cpu");
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 500;
    if (calls < 1) calls = 1;
    TRY(tn_init(NULL) == TN_OK);
    int64_t n = N;
    tn_array *mv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ n, n }, -1, 1, 1);
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 2);
    tn_array *bv = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 3);
    double y0 = 0;
    printf("y = m.x + b, m %dx%d float32, %d calls\n\n", N, N, calls);

    /* 1. every input passed on every call */
    tn_graph *g1 = tn_graph_new();
    tn_var *m1 = tn_matrix(g1, "m", TN_F32), *x1 = tn_vector(g1, "x", TN_F32), *b1 = tn_vector(g1, "b", TN_F32);
    tn_var *y1 = tn_add(tn_dot(m1, x1), b1);
    tn_func *f1 = tn_function(g1, &(tn_func_desc){ .n_inputs = 3, .inputs = (tn_var *[]){ m1, x1, b1 }, .n_outputs = 1,
                                                   .outputs = &y1, .name = "all_inputs" });
    TRY(f1);
    double t1 = run(f1, (tn_array *[]){ mv, xv, bv }, calls, true, &y0);
    show("1. m, x, b passed on every call", f1, t1, y0);

    /* 2. m and b shared */
    tn_graph *g2 = tn_graph_new();
    tn_var *m2 = tn_shared(g2, "m", mv), *b2 = tn_shared(g2, "b", bv), *x2 = tn_vector(g2, "x", TN_F32);
    tn_var *y2 = tn_add(tn_dot(m2, x2), b2);
    tn_func *f2 = tn_function(g2, &(tn_func_desc){ .n_inputs = 1, .inputs = &x2, .n_outputs = 1, .outputs = &y2, .name = "m_b_shared" });
    TRY(f2);
    double t2 = run(f2, &xv, calls, true, &y0);
    show("2. m and b shared, x passed", f2, t2, y0);

    /* 3. everything shared; y written by an update, nothing returned */
    tn_graph *g3 = tn_graph_new();
    tn_array *yinit = tn_array_zeros(TN_F32, 1, &n);
    tn_var *m3 = tn_shared(g3, "m", mv), *b3 = tn_shared(g3, "b", bv), *x3 = tn_shared(g3, "x", xv), *ys = tn_shared(g3, "y", yinit);
    tn_update up = { ys, tn_add(tn_dot(m3, x3), b3) };
    tn_func *f3 = tn_function(g3, &(tn_func_desc){ .n_updates = 1, .updates = &up, .name = "all_shared" });
    TRY(f3);
    double t3 = run(f3, NULL, calls, false, &y0);
    tn_array *yh = tn_shared_get_value(ys);
    int64_t i0 = 0;
    y0 = yh ? tn_array_get(yh, &i0) : 0;
    tn_array_free(yh);
    show("3. all shared, y updated in place", f3, t3, y0);

    /* 4. plain C */
    const float *m = (const float *)mv->data, *x = (const float *)xv->data, *b = (const float *)bv->data;
    float *y = (float *)malloc(N * sizeof *y);
    TRY(y);
    double t0 = now();
    for (int c = 0; c < calls; c++)
        for (int i = 0; i < N; i++) {
            float s = 0;
            for (int j = 0; j < N; j++) s += m[(size_t)i * N + j] * x[j];
            y[i] = s + b[i];
        }
    double t4 = (now() - t0) / calls;
    printf("== 4. plain C loop (one thread)\n   %.1f us a call, y[0] = %.6f\n\n", 1e6 * t4, y[0]);

    printf("summary (us a call): passed %.1f | m, b shared %.1f | all shared %.1f | plain C %.1f\n", 1e6 * t1, 1e6 * t2, 1e6 * t3, 1e6 * t4);
    free(y);
    tn_function_free(f1); tn_function_free(f2); tn_function_free(f3);
    tn_graph_free(g1); tn_graph_free(g2); tn_graph_free(g3);
    tn_array_free(mv); tn_array_free(xv); tn_array_free(bv); tn_array_free(yinit);
    return 0;
}
