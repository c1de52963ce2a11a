/* check2.c - check1 with the result kept on the device: the output is
   tn_gpu_from_host(exp(x)), so no copy back to the host happens in the loop
   (the seed's gpu_from_host(T.exp(x))). The values are copied to the host
   once, at the end, to print them. On the CPU the transfer is a no-op and
   this is check1.

   Build: cc -std=c11 -O2 -I. examples/check2.c -o check2 -lm -lpthread -ldl
   Run:   ./check2 [iterations]          (TENSOR_FLAGS=device=cuda ./check2 for the GPU) */
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

#define TRY(x) do { if (!(x)) { fprintf(stderr, "check2: %s\n", tn_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    TRY(tn_init(NULL) == TN_OK);
    int64_t vlen = 10 * 30 * 768;
    tn_graph *g = tn_graph_new();
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &vlen, 0, 1, 22);
    tn_var *x = tn_shared(g, "x", xv);
    tn_var *y = tn_gpu_from_host(tn_exp(x));    /* the output stays where it was computed */
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .name = "check2" });
    TRY(f);
    tn_print_toposort(f, stdout);
    tn_array *r = NULL;
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        tn_array_free(r);
        TRY(tn_call(f, NULL, &r) == TN_OK);
    }
    double t1 = now();
    printf("Looping %d times took %f seconds (%.1f us a call)\n", iters, t1 - t0, 1e6 * (t1 - t0) / (iters > 0 ? iters : 1));
    if (r) {
        printf("The result lives on %s\n", r->device == TN_HOST ? "the host" : "the device");
        tn_array *h = tn_array_to_host(r);      /* numpy.asarray(r) */
        TRY(h);
        printf("Numpy result is [");
        for (int64_t i = 0; i < 4; i++) printf("%s%.8f", i ? " " : "", tn_array_get(h, &i));
        int64_t last = vlen - 1;
        printf(" ... %.8f]\n", tn_array_get(h, &last));
        tn_array_free(h);
    }
    printf(tn_function_device_steps(f) > 0 ? "Used the gpu\n" : "Used the cpu\n");
    tn_array_free(r);
    tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
    return 0;
}
