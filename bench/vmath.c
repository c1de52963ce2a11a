/* bench/vmath.c - the CPU's vector math (tensor_ops.h >>vmath) one op at a
   time: y = op(x) over 230,400 elements (10x30x768, the exp case of
   bench.c), x shared, y borrowed, float32 and float64; median of 7 x 200
   calls. bench/vmath_numpy.py times NumPy on the same sizes and ranges.
       cc -O2 -I. -o build/vmath bench/vmath.c -lm -lpthread -ldl
       TENSOR_FLAGS=threads=1 build/vmath        (one thread, as NumPy)
   Prints one line per case: op, dtype, microseconds per call. */
#define _POSIX_C_SOURCE 200809L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

typedef struct vcase { const char *name; tn_var *(*fn)(tn_var *); double lo, hi; } vcase;
static const vcase cases[] = {
    { "exp", tn_exp, -10, 10 }, { "expm1", tn_expm1, -10, 10 }, { "log", tn_log, 0.01, 10 },
    { "log1p", tn_log1p, -0.99, 10 }, { "tanh", tn_tanh, -5, 5 }, { "sigmoid", tn_sigmoid, -10, 10 },
    { "softplus", tn_softplus, -10, 10 }, { "erf", tn_erf, -5, 5 }, { "sin", tn_sin, -10, 10 },
    { "cos", tn_cos, -10, 10 },
};

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    int64_t sh[3] = { 10, 30, 768 };
    enum { REPS = 7, ITERS = 200 };
    printf("threads %d\n", tn__num_threads());
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (only && strcmp(only, cases[c].name)) continue;
        for (int d = 0; d < 2; d++) {
            tn_dtype dt = d ? TN_F64 : TN_F32;
            tn_array *X = tn_array_rand_uniform(dt, 3, sh, cases[c].lo, cases[c].hi, 5);
            tn_graph *g = tn_graph_new();
            tn_var *x = tn_shared(g, "x", X), *y = cases[c].fn(x);
            tn_array_free(X);
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .borrow = true, .name = cases[c].name });
            double t[REPS];
            tn_array *out = NULL;
            for (int r = 0; r < REPS && f; r++) {
                double t0 = now();
                for (int i = 0; i < ITERS; i++)
                    if (tn_call(f, NULL, &out) != TN_OK) { fprintf(stderr, "%s: %s\n", cases[c].name, tn_last_error()); return 1; }
                t[r] = (now() - t0) / ITERS;
            }
            if (f) {
                qsort(t, REPS, sizeof t[0], cmp);
                printf("%-9s %-8s %8.1f us\n", cases[c].name, tn_dtype_name(dt), t[REPS / 2] * 1e6);
            }
            tn_function_free(f);
            tn_graph_free(g);
        }
    }
    return 0;
}
