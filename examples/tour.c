/* tour.c - a first look at tensor.h: build a graph, compile it, call it.
   Shows the rewritten graph (one Gemv for m.x + b, one fused kernel for an
   elementwise chain), copied vs borrowed outputs, and an update rule.

   Build: cc -std=c11 -O2 -I.. tour.c -o tour -lm -lpthread -ldl
   (from the repository root: cc -std=c11 -O2 -I. examples/tour.c -o tour -lm -lpthread -ldl)
   Run: ./tour [calls]   (calls timed per function; default 1000, half as many for m.x + b) */
#define _POSIX_C_SOURCE 199309L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define TRY(x) do { if (!(x)) { fprintf(stderr, "error: %s\n", tn_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 1000;
    if (calls < 2) calls = 2;
    TRY(tn_init(NULL) == TN_OK);
    TRY(tn_print_info(stdout) == TN_OK);    /* what this build runs with */
    tn_graph *g = tn_graph_new();
    int64_t n = 1000;

    /* 1. y = m.x + b with m and b shared: compiled into one Gemv. */
    tn_array *mv = tn_array_rand_normal(TN_F32, 2, (int64_t[]){n, n}, 0, 1, 1);
    tn_array *bv = tn_array_rand_normal(TN_F32, 1, (int64_t[]){n}, 0, 1, 2);
    tn_var *m = tn_shared(g, "m", mv), *b = tn_shared(g, "b", bv);
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_add(tn_dot(m, x), b);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .name = "mxb" });
    TRY(f);
    puts("== y = m.x + b, as compiled:");
    tn_debugprint_function(f, stdout);
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){n}, -1, 1, 3), *yv = NULL;
    double t0 = now();
    for (int i = 0; i < calls / 2; i++) {
        tn_array_free(yv);
        TRY(tn_call(f, &xv, &yv) == TN_OK);
    }
    printf("%d calls: %.3f ms per call\ny = ", calls / 2, 1e3 * (now() - t0) / (calls / 2));
    tn_array_print(yv, stdout);

    /* 2. An elementwise chain, fused into one pass; copy vs borrow. */
    tn_var *v = tn_vector(g, "v", TN_F32);
    tn_var *e = tn_tanh(tn_add(tn_mul(tn_exp(v), tn_lit(v, 0.5)), tn_sqr(v)));
    tn_func *fc = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &v, .n_outputs = 1, .outputs = &e, .name = "copy" });
    tn_func *fb = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &v, .n_outputs = 1, .outputs = &e, .borrow = true, .name = "borrow" });
    TRY(fc && fb);
    puts("\n== tanh(exp(v)*0.5 + v**2), as compiled:");
    tn_debugprint_function(fc, stdout);
    tn_array *vv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){230400}, -1, 1, 22), *ev;
    t0 = now();
    for (int i = 0; i < calls; i++) { TRY(tn_call(fc, &vv, &ev) == TN_OK); tn_array_free(ev); }
    double tc = (now() - t0) / calls;
    t0 = now();
    for (int i = 0; i < calls; i++) TRY(tn_call(fb, &vv, &ev) == TN_OK);
    double tb = (now() - t0) / calls;
    printf("copy: %.1f us per call, borrow: %.1f us per call\n", 1e6 * tc, 1e6 * tb);
    tn_array *saved = ev;                                   /* borrowed: the next call overwrites it */
    TRY(tn_call(fb, &vv, &ev) == TN_OK);
    printf("a borrowed result kept across a call: %s\n",
           tn_array_check(saved) == TN_ERR_STALE ? "detected as stale" : "not detected");

    /* 3. An update: w <- w - 0.1 * w, applied after the outputs are computed. */
    tn_array *wv = tn_array_full(TN_F64, 1, (int64_t[]){3}, 1.0);
    tn_var *w = tn_shared(g, "w", wv);
    tn_var *loss = tn_sum(tn_sqr(w), NULL, 0, false);
    tn_update up = { w, tn_sub(w, tn_mul(tn_lit(w, 0.1), w)) };
    tn_func *fu = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &loss, .n_updates = 1, .updates = &up });
    TRY(fu);
    puts("\n== loss = sum(w**2) with w <- 0.9 w:");
    for (int i = 0; i < 3; i++) {
        tn_array *l;
        TRY(tn_call(fu, NULL, &l) == TN_OK);
        printf("call %d: loss = %g\n", i, tn_array_get(l, NULL));
        tn_array_free(l);
    }

    tn_array_free(yv); tn_array_free(xv); tn_array_free(mv); tn_array_free(bv); tn_array_free(vv); tn_array_free(wv);
    tn_function_free(f); tn_function_free(fc); tn_function_free(fb); tn_function_free(fu);
    tn_graph_free(g);
    tn_shutdown();
    return 0;
}
