/* bench/bench_cpu_gemm.c - GFLOP/s of the CPU matrix product (Dot), with
   CBLAS and with the built-in packed kernel, for square float32 and float64.
   Build and run:
       cc -std=c11 -O2 -I. -o build/bench_cpu_gemm bench/bench_cpu_gemm.c -lm -lpthread -ldl && ./build/bench_cpu_gemm [n]
*/
#define _POSIX_C_SOURCE 200809L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Best of `reps` runs of the Dot kernel on a, b into out, in GFLOP/s. */
static double run(tn_array *a, tn_array *b, tn_array *out, int reps) {
    tn_var node;
    memset(&node, 0, sizeof node);
    node.op = TN_OP_DOT;
    tn_array *in[2] = { a, b };
    const tn_op_def *def = tn__op_def(TN_OP_DOT);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        if (def->cpu(&node, in, &out) != TN_OK) { fprintf(stderr, "%s\n", tn_last_error()); exit(1); }
        double t = now() - t0;
        if (t < best) best = t;
    }
    return 2.0 * (double)a->shape[0] * (double)a->shape[1] * (double)b->shape[1] / best * 1e-9;
}

int main(int argc, char **argv) {
    int64_t n = argc > 1 ? atoll(argv[1]) : 1000;
    tn__blas_enable(true);
    const char *blas = tn__blas_name();
    printf("n = %lld, %d threads, CBLAS: %s\n", (long long)n, tn__num_threads(), blas ? blas : "none");
    printf("%-8s %-10s %10s\n", "dtype", "path", "GFLOP/s");
    tn_dtype dts[2] = { TN_F32, TN_F64 };
    for (int d = 0; d < 2; d++) {
        int64_t sh[2] = { n, n };
        tn_array *a = tn_array_rand_uniform(dts[d], 2, sh, -1, 1, 1);
        tn_array *b = tn_array_rand_uniform(dts[d], 2, sh, -1, 1, 2);
        tn_array *out = tn_array_empty(dts[d], 2, sh);
        for (int path = 0; path < 2; path++) {
            if (path == 0 && !blas) continue;
            tn__blas_enable(path == 0);
            run(a, b, out, 1);                      /* warm up: scratch, threads, BLAS */
            printf("%-8s %-10s %10.1f\n", tn_dtype_name(dts[d]), path == 0 ? "cblas" : "built-in", run(a, b, out, 5));
        }
        tn__blas_enable(true);
        tn_array_free(a); tn_array_free(b); tn_array_free(out);
    }
    tn_shutdown();
    return 0;
}
