/* scan_gemm.c - the seed deck's warning about scan: a loop over the rows of X
   whose step is only a product with a fixed matrix,
       results, updates = theano.scan(lambda x: T.dot(W, x), sequences=X)
   is one matrix product, dot(X, W^T), and should run as one GEMM, not 1000
   small products. The optimizer's rule scan_dot_to_gemm does it: the graph
   as built holds a Scan; the compiled function holds one product and no
   loop. Prints both debugprints, checks the result against a plain C loop
   in float64, and times the function against the loop it replaced
   (compiled in fast_compile mode, which keeps the Scan).

   Build: cc -std=c11 -O2 -I. examples/scan_gemm.c -o scan_gemm -lm -lpthread -ldl
   Run:   ./scan_gemm [calls]          (TENSOR_FLAGS=device=cuda ./scan_gemm for the GPU) */
#define _POSIX_C_SOURCE 199309L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <math.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define TRY(x) do { if (!(x)) { fprintf(stderr, "scan_gemm: %s\n", tn_last_error()); return 1; } } while (0)

/* lambda x: T.dot(W, x) */
static tn_result step(tn_scan_step *s, void *user) {
    (void)user;
    s->outputs[0] = tn_dot(s->non_seq[0], s->seq[0][0]);
    return TN_OK;
}

static double seconds_per_call(tn_func *f, tn_array *const *in, int calls, tn_array **last) {
    tn_array *out = NULL;
    double t0 = now();
    for (int i = 0; i < calls; i++) {
        tn_array_free(out);
        if (tn_call(f, in, &out) != TN_OK) return -1;
    }
    *last = out;
    return (now() - t0) / calls;
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 20;
    if (calls < 1) calls = 1;
    TRY(tn_init(NULL) == TN_OK);
    const int64_t rows = 1000, n = 300;
    tn_dtype floatX = tn_get_config()->floatX;
    tn_random_state *rng = tn_random_state_new(42);
    tn_array *Xv = tn_rs_randn(rng, floatX, 2, (int64_t[]){ rows, n }), *Wv = tn_rs_randn(rng, floatX, 2, (int64_t[]){ n, n });
    TRY(Xv && Wv);

    tn_graph *g = tn_graph_new();
    tn_var *X = tn_matrix(g, "X", floatX), *W = tn_matrix(g, "W", floatX), *Y = NULL;
    tn_scan_seq seq = { X, 0, NULL };
    tn_scan_out out = { NULL, 0, NULL };
    TRY(tn_scan(&(tn_scan_desc){ .step = step, .n_sequences = 1, .sequences = &seq, .n_outputs = 1, .outputs = &out,
                                 .n_non_sequences = 1, .non_sequences = &W, .name = "rows" }, &Y, NULL, NULL) == TN_OK);
    printf("results = scan(lambda x: dot(W, x), sequences=X), as built:\n");
    tn_debugprint(Y, stdout);

    tn_var *ins[2] = { X, W };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 1, .outputs = &Y, .name = "one_gemm" });
    tn_func *loop = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 1, .outputs = &Y,
                                                    .mode = TN_MODE_FAST_COMPILE, .name = "scan_loop" });
    TRY(f && loop);
    printf("\nas compiled (the scan is one product):\n");
    tn_debugprint_function(f, stdout);

    tn_array *r = NULL, *rl = NULL;
    tn_array *vals[2] = { Xv, Wv };
    double tf = seconds_per_call(f, vals, calls, &r), tl = seconds_per_call(loop, vals, calls, &rl);
    TRY(tf >= 0 && tl >= 0);

    /* plain C, float64: Y[t, i] = sum_j W[i, j] X[t, j] */
    tn_array *X64 = tn_array_astype(Xv, TN_F64), *W64 = tn_array_astype(Wv, TN_F64), *R64 = tn_array_astype(r, TN_F64);
    TRY(X64 && W64 && R64);
    const double *x = (const double *)X64->data, *w = (const double *)W64->data, *y = (const double *)R64->data;
    double err = 0, big = 0;
    for (int64_t t = 0; t < rows; t++)
        for (int64_t i = 0; i < n; i++) {
            double s = 0;
            for (int64_t j = 0; j < n; j++) s += w[i * n + j] * x[t * n + j];
            err = fmax(err, fabs(y[t * n + i] - s));
            big = fmax(big, fabs(s));
        }
    printf("\nmax |Y - plain C loop| = %.3g (largest |Y| %.3g)\n", err, big);
    printf("one product: %.3f ms a call; the scan loop it replaced: %.3f ms a call (%.1fx)\n", 1e3 * tf, 1e3 * tl, tf > 0 ? tl / tf : 0.0);
    printf("Used the %s\n", tn_function_device_steps(f) > 0 ? "gpu" : "cpu");
    printf("%s\n", err <= 1e-3 * (big > 1 ? big : 1) ? "OK" : "MISMATCH");

    tn_array_free(r); tn_array_free(rl); tn_array_free(X64); tn_array_free(W64); tn_array_free(R64);
    tn_function_free(f); tn_function_free(loop);
    tn_graph_free(g);
    tn_array_free(Xv); tn_array_free(Wv);
    tn_random_state_free(rng);
    return 0;
}
