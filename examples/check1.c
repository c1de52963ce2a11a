/* check1.c - the seed's GPU test (Theano's "Testing Theano with GPU"), line
   for line: x = shared(RandomState(22).rand(vlen) as floatX), f = function([],
   exp(x)), 1000 calls. Prints the compiled function's toposort, the loop
   time, the result (first and last three values), and "Used the cpu" when
   any elementwise op of the compiled function is not a GPU one, as the seed
   decides it, else "Used the gpu".

   Build: cc -std=c11 -O2 -I. examples/check1.c -o check1 -lm -lpthread -ldl
   Run:   ./check1 [iterations]          (TENSOR_FLAGS=device=cuda ./check1 for the GPU) */
#define _POSIX_C_SOURCE 199309L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* numpy.any([isinstance(x.op, Elemwise) and 'Gpu' not in type(x.op).__name__
              for x in f.maker.fgraph.toposort()]) */
static bool cpu_elemwise_left(const tn_func *f) {
    FILE *t = tmpfile();
    char line[4096];
    bool cpu = false;
    if (!t || tn_print_toposort(f, t) != TN_OK) { if (t) fclose(t); return true; }
    rewind(t);
    while (fgets(line, sizeof line, t)) cpu |= !strncmp(line, "Elemwise{", 9);
    fclose(t);
    return cpu;
}

#define TRY(x) do { if (!(x)) { fprintf(stderr, "check1: %s\n", tn_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    TRY(tn_init(NULL) == TN_OK);
    int64_t vlen = 10 * 30 * 768;   /* 10 x #cores x # threads per core */
    tn_random_state *rng = tn_random_state_new(22);
    tn_graph *g = tn_graph_new();
    tn_array *xv = tn_rs_rand(rng, tn_get_config()->floatX, 1, &vlen);
    TRY(xv);
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
    printf("Looping %d times took %f seconds\n", iters, t1 - t0);
    if (r) {
        int64_t at[6] = { 0, 1, 2, vlen - 3, vlen - 2, vlen - 1 };
        printf("Result is [");
        for (int i = 0; i < 6; i++) printf("%s%.8f", i == 0 ? "" : i == 3 ? " ... " : " ", tn_array_get(r, &at[i]));
        printf("]\n");
    }
    printf(cpu_elemwise_left(f) ? "Used the cpu\n" : "Used the gpu\n");
    tn_array_free(r);
    tn_array_free(xv);
    tn_random_state_free(rng);
    tn_function_free(f);
    tn_graph_free(g);
    return 0;
}
