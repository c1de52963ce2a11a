/* check1.c - the seed's GPU test: exp of 10*30*768 float32 numbers held in a
   shared variable, computed 1000 times. Prints the compiled graph (its
   toposort), the loop time, the first and last values, and whether the GPU
   ran it - decided from the compiled graph, not from a flag.

   Build: cc -std=c11 -O2 -I. examples/check1.c -o check1 -lm -lpthread -ldl
   Run:   ./check1 [iterations]          (TENSOR_FLAGS=device=cuda ./check1 for the GPU) */
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

#define TRY(x) do { if (!(x)) { fprintf(stderr, "check1: %s\n", tn_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    TRY(tn_init(NULL) == TN_OK);
    int64_t vlen = 10 * 30 * 768;   /* 10 x #cores x #threads per core */
    tn_graph *g = tn_graph_new();
    /* rng = numpy.random.RandomState(22); x = shared(rng.rand(vlen)) */
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &vlen, 0, 1, 22);
    tn_var *x = tn_shared(g, "x", xv);
    tn_var *y = tn_exp(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .name = "check1" });
    TRY(f);
    tn_print_toposort(f, stdout);
    tn_array *r = NULL;
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        tn_array_free(r);                    /* each call returns a fresh copy the caller owns */
        TRY(tn_call(f, NULL, &r) == TN_OK);
    }
    double t1 = now();
    printf("Looping %d times took %f seconds (%.1f us a call)\n", iters, t1 - t0, 1e6 * (t1 - t0) / (iters > 0 ? iters : 1));
    if (r) {
        printf("Result is [");
        for (int64_t i = 0; i < 4; i++) printf("%s%.8f", i ? " " : "", tn_array_get(r, &i));
        int64_t last = vlen - 1;
        printf(" ... %.8f]\n", tn_array_get(r, &last));
    }
    printf(tn_function_device_steps(f) > 0 ? "Used the gpu\n" : "Used the cpu\n");
    tn_array_free(r);
    tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
    return 0;
}
