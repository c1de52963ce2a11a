/* bench/bench_compile.c - compile time of tn_function (rewrites, fusion,
   schedule, memory plan; no kernel compilation) for graphs of 1k, 10k and
   100k nodes: long elementwise chains with branches, shared subexpressions
   (merged), constants (folded, combined), reductions and products between
   them. Target: 10k nodes < 50 ms on one core, growth no worse than n log n.
     cc -std=c11 -O2 -I. bench/bench_compile.c -o build/bench_compile -lm -lpthread -ldl && build/bench_compile */
#define _POSIX_C_SOURCE 200809L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

/* About n nodes: repeated blocks of ~20 nodes. */
static tn_var *build(tn_graph *g, int n, tn_var **x, tn_var **W) {
    *x = tn_matrix(g, "x", TN_F32);
    *W = tn_matrix(g, "W", TN_F32);
    tn_var *h = *x;
    while (tn__graph_nvars(g) < n) {
        tn_var *a = tn_exp(tn_mul(h, tn_lit(h, 0.5)));
        tn_var *b = tn_exp(tn_mul(h, tn_lit(h, 0.5)));              /* merged with a */
        tn_var *c = tn_add(tn_add(tn_sub(a, tn_lit(a, 1)), tn_lit(a, 2)), tn_mul(b, tn_lit(b, 1)));
        tn_var *d = tn_log(tn_add(tn_lit(c, 1), tn_sigmoid(c)));   /* log1p */
        if (tn__graph_nvars(g) % 7 == 0) d = tn_sub(d, tn_max(d, (int[]){ 1 }, 1, true));
        if (tn__graph_nvars(g) % 11 == 0) d = tn_add(tn_dot(d, *W), d);
        h = tn_tanh(tn_add(d, tn_mul(h, tn_lit(h, 0.25))));
    }
    return tn_sum(h, NULL, 0, false);
}

int main(void) {
    tn_init(&(tn_config){ .threads = 1, .allow_gc = true });
    printf("%10s %10s %12s %12s %14s\n", "nodes", "after", "compile ms", "us/node", "rewrites");
    int sizes[] = { 1000, 10000, 100000 };
    if (getenv("BENCH_SIZES")) { sizes[0] = 20000; sizes[1] = 40000; sizes[2] = 80000; }
    for (int s = 0; s < 3; s++) {
        tn_graph *g = tn_graph_new();
        tn_var *x, *W;
        tn_var *y = build(g, sizes[s], &x, &W);
        tn_var *in[2] = { x, W };
        int n = tn__graph_nvars(g);
        double best = 1e9;
        int reps = sizes[s] >= 100000 ? 3 : 5, fired = 0;
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = in, .n_outputs = 1, .outputs = &y });
            double t = now() - t0;
            if (!f) { printf("compile failed: %s\n", tn_last_error()); return 1; }
            fired = tn__rewrite_count(NULL);
            if (t < best) best = t;
            tn_function_free(f);
        }
        printf("%10d %10s %12.2f %12.3f %14d\n", n, "", best * 1e3, best * 1e6 / n, fired);
        tn_graph_free(g);
    }
    return 0;
}
