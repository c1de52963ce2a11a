/* bench/bench_multi.c - several GPUs: a larger MLP training step replicated
   with tn_function_replicate on 1, 2, 4, ... GPUs and on every GPU (weak
   scaling: the same rows per GPU), as samples/s and the per-GPU throughput
   against one GPU, each count run three times in turn (the median shown); then NCCL's all-reduce (tn_nccl_allreduce, float32, in place) from
   1 MB to 1 GB, as nccl-tests reports it: algbw = bytes / time, busbw =
   algbw * 2 (n - 1) / n. One table each.
   Build and run (tests/gpu/run_multi.sh does both):
       cc -std=c11 -O2 -I. -o build/bench_multi bench/bench_multi.c -lm -lpthread -ldl
       build/bench_multi [--quick] */
#define _POSIX_C_SOURCE 200809L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum { IN = 1024, HID = 4096, OUT = 16, ROWS = 2048 };   /* rows per GPU */

/* samples/s of the replicated MLP step on n GPUs (n * ROWS rows a step); 0 on error. */
static double mlp_rate(int n, int steps) {
    tn_graph *g = tn_graph_new();
    tn_array *w1v = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ IN, HID }, 0, 0.02, 1);
    tn_array *w2v = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ HID, OUT }, 0, 0.02, 2);
    tn_array *b1v = tn_array_zeros(TN_F32, 1, (int64_t[]){ HID }), *b2v = tn_array_zeros(TN_F32, 1, (int64_t[]){ OUT });
    tn_var *x = tn_matrix(g, "x", TN_F32), *y = tn_matrix(g, "y", TN_F32);
    tn_var *W1 = tn_shared(g, "W1", w1v), *b1 = tn_shared(g, "b1", b1v), *W2 = tn_shared(g, "W2", w2v), *b2 = tn_shared(g, "b2", b2v);
    tn_var *h = tn_relu(tn_add(tn_dot(x, W1), b1));
    tn_var *o = tn_add(tn_dot(h, W2), b2);
    tn_var *cost = tn_mean(tn_sqr(tn_sub(o, y)), NULL, 0, false);
    tn_var *wrt[4] = { W1, b1, W2, b2 }, *gr[4];
    tn_replicated *R = NULL;
    double rate = 0;
    if (tn_grad(cost, 4, wrt, gr, NULL) == TN_OK) {
        tn_update up[4];
        for (int i = 0; i < 4; i++) up[i] = (tn_update){ wrt[i], tn_sub(wrt[i], tn_mul(tn_lit(wrt[i], 0.01), gr[i])) };
        tn_var *ins[2] = { x, y };
        R = tn_function_replicate(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 1, .outputs = &cost, .n_updates = 4, .updates = up },
                                  &(tn_replicate_desc){ .n_replicas = n, .n_grads = 4, .grads = gr });
    }
    if (!R) { fprintf(stderr, "bench_multi: %d GPUs: %s\n", n, tn_last_error()); goto done; }
    int64_t rows = (int64_t)n * ROWS;
    tn_array *X = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ rows, IN }, 0, 1, 3), *Y = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ rows, OUT }, 0, 1, 4);
    tn_array *in[2] = { X, Y };
    double t0 = 0;
    for (int s = 0; s < steps + 3; s++) {
        if (s == 3) { tn__cuda_synchronize(); t0 = now(); }   /* after the warm-up (compiles, first plans) */
        tn_array *c = NULL;
        if (tn_replicated_call(R, in, &c) != TN_OK) { fprintf(stderr, "bench_multi: %s\n", tn_last_error()); t0 = -1; break; }
        tn_array_free(c);      /* the cost comes back to the host: each step ends synchronised */
    }
    if (t0 >= 0) rate = (double)rows * steps / (now() - t0);
    printf("  mlp step  %d GPU%s  (%s)  %7lld rows  %10.0f samples/s\n", n, n == 1 ? " " : "s", tn_replicated_allreduce(R), (long long)rows, rate);
    tn_array_free(X); tn_array_free(Y);
done:
    tn_replicated_free(R);
    tn_graph_free(g);
    tn_array_free(w1v); tn_array_free(w2v); tn_array_free(b1v); tn_array_free(b2v);
    return rate;
}

static void allreduce_table(int n, bool quick) {
    if (tn_nccl_load() != TN_OK) { printf("all-reduce: %s\n", tn_last_error()); return; }
    printf("\nall-reduce over %d GPU%s, NCCL %d, float32 in place, busbw = algbw * 2(n-1)/n\n", n, n == 1 ? "" : "s", tn_nccl_version());
    printf("  %10s %10s %12s %12s\n", "bytes", "time us", "algbw GB/s", "busbw GB/s");
    for (size_t bytes = (size_t)1 << 20; bytes <= ((size_t)1 << 30); bytes <<= (quick ? 4 : 1)) {
        int64_t cnt = (int64_t)(bytes / 4);
        tn_array *d[TN__CUDA_MAX_DEVICES] = { 0 };
        bool ok = true;
        for (int k = 0; k < n && ok; k++) ok = (d[k] = tn__array_alloc(TN_F32, 1, &cnt, k)) != NULL;
        int iters = bytes >= ((size_t)256 << 20) ? 5 : 20;
        double t = 0;
        for (int i = 0; ok && i < iters + 2; i++) {
            if (i == 2) { ok = tn__cuda_synchronize() == TN_OK; t = now(); }
            ok = ok && tn_nccl_allreduce(n, d) == TN_OK;
        }
        ok = ok && tn__cuda_synchronize() == TN_OK;
        if (!ok) { printf("  %10zu failed: %s\n", bytes, tn_last_error()); for (int k = 0; k < n; k++) tn_array_free(d[k]); break; }
        double sec = (now() - t) / iters, alg = (double)bytes / sec / 1e9;
        printf("  %10zu %10.1f %12.2f %12.2f\n", bytes, sec * 1e6, alg, alg * 2.0 * (n - 1) / n);
        for (int k = 0; k < n; k++) tn_array_free(d[k]);
    }
}

int main(int argc, char **argv) {
    bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    tn_init(&(tn_config){ .device = TN_DEVICE_CUDA, .floatX = TN_F32, .allow_gc = true });
    if (tn_cuda_init() != TN_OK) { printf("SKIP (no usable GPU: %s)\n", tn_cuda_status()); return 0; }
    int n = tn__cuda.device_count;
    printf("%s; %d GPU%s\n", tn_cuda_status(), n, n == 1 ? "" : "s");
    int steps = quick ? 5 : 30, counts[8], nc = 0, rounds = quick ? 1 : 3;
    for (int c = 1; c < n && nc < 7; c *= 2) counts[nc++] = c;
    counts[nc++] = n;
    printf("MLP %d-%d-%d (relu, squared error), %d rows per GPU, %d steps, float32, %d round%s\n", IN, HID, OUT, ROWS, steps, rounds,
           rounds == 1 ? "" : "s");
    double rate[8][3];
    bool ok = true;
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < nc; c++) ok &= (rate[c][r] = mlp_rate(counts[c], steps)) > 0;
    for (int c = 0; ok && c < nc; c++) {            /* medians of the rounds */
        for (int a = 0; a < rounds; a++)
            for (int b = a + 1; b < rounds; b++)
                if (rate[c][b] < rate[c][a]) { double t = rate[c][a]; rate[c][a] = rate[c][b]; rate[c][b] = t; }
        double med = rate[c][rounds / 2], one = rate[0][rounds / 2];
        printf("  scaling: %d GPU%s give %.2fx one GPU's samples/s, %.0f%% per GPU (median %.0f samples/s)\n", counts[c],
               counts[c] == 1 ? "" : "s", med / one, 100.0 * med / one / counts[c], med);
    }
    allreduce_table(n, quick);
    return ok ? 0 : 1;
}
