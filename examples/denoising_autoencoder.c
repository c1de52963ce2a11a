/* denoising_autoencoder.c - the tutorial deck's (denoising) autoencoder
   exercise: corrupt the input by zeroing a random 30% of its pixels, encode
   with tied weights, decode, and learn to reconstruct the clean input:
       x~ = x * bernoulli(0.7)              (an in-graph random stream)
       h  = sigmoid(x~ W + b),   z = sigmoid(h W^T + b')
       cost = mean over the batch of -sum(x log z + (1 - x) log(1 - z))
   trained by SGD on scikit-learn's 8x8 digits (examples/digits.bin, from
   examples/digits.py; a synthetic stand-in without it). Each call draws a
   new corruption mask; the stream's seed reproduces a run. Prints the
   training cost per epoch and the held-out reconstruction cost of clean
   and of corrupted inputs, against the same with no training.

   Build: cc -std=c11 -O2 -I. examples/denoising_autoencoder.c -o denoising_autoencoder -lm -lpthread -ldl
   Run:   ./denoising_autoencoder [epochs]      (default 30; TENSOR_FLAGS=device=cuda for the GPU) */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "digits.h"
#include <math.h>

enum { VIS = 64, HID = 32, BATCH = 20 };

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 30;
    tn_init(NULL);
    digits D;
    digits_load("examples/digits.bin", false, &D);
    tn_graph *g = tn_graph_new();
    tn_random_state *rs = tn_random_state_new(9);
    double a = 4 * sqrt(6.0 / (VIS + HID));              /* the deck's initialisation for sigmoid units */
    tn_array *wv = tn_rs_uniform(rs, TN_F32, 2, (int64_t[]){ VIS, HID }, -a, a);
    tn_array *bh = tn_array_zeros(TN_F32, 1, (int64_t[]){ HID }), *bv = tn_array_zeros(TN_F32, 1, (int64_t[]){ VIS });
    tn_var *W = tn_shared(g, "W", wv), *B = tn_shared(g, "b", bh), *Bp = tn_shared(g, "b_prime", bv);
    tn_array_free(wv); tn_array_free(bh); tn_array_free(bv);
    tn_rstream *noise = tn_random_stream(g, 2026);
    tn_var *x = tn_matrix(g, "x", TN_F32);
    /* the reconstruction cost of input v against the clean x */
    tn_var *xc = tn_mul(x, tn_random_like(noise, TN_RAND_BERNOULLI, TN_F32, x, 0.7, 0));
    tn_var *inputs[2] = { x, xc }, *cost[2];
    int one = 1;
    for (int k = 0; k < 2; k++) {
        tn_var *h = tn_sigmoid(tn_add(tn_dot(inputs[k], W), B));
        tn_var *z = tn_sigmoid(tn_add(tn_dot(h, tn_transpose(W, NULL)), Bp));
        tn_var *l = tn_add(tn_mul(x, tn_log(z)), tn_mul(tn_sub(tn_lit(x, 1), x), tn_log(tn_sub(tn_lit(z, 1), z))));
        cost[k] = tn_neg(tn_mean(tn_sum(l, &one, 1, false), NULL, 0, false));
    }
    tn_var *wrt[3] = { W, B, Bp }, *gr[3];
    if (tn_grad(cost[1], 3, wrt, gr, NULL) != TN_OK) { fprintf(stderr, "denoising_autoencoder: %s\n", tn_last_error()); return 1; }
    tn_update up[3];
    for (int i = 0; i < 3; i++) up[i] = (tn_update){ wrt[i], tn_sub(wrt[i], tn_mul(tn_lit(wrt[i], 0.1), gr[i])) };
    tn_func *train = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &cost[1], .n_updates = 3, .updates = up, .name = "train" });
    tn_func *eval = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = cost, .name = "eval" });
    if (!train || !eval) { fprintf(stderr, "denoising_autoencoder: %s\n", tn_last_error()); return 1; }
    printf("denoising autoencoder %d-%d-%d (tied weights, sigmoid), 30%% of the pixels zeroed, SGD lr 0.1, batches of %d, on %s\n",
           VIS, HID, VIS, BATCH, D.real ? "scikit-learn's digits" : "a synthetic stand-in (no examples/digits.bin)");
    tn_array *e[2] = { NULL, NULL };
    if (tn_call(eval, &D.xte, e) != TN_OK) { fprintf(stderr, "eval: %s\n", tn_last_error()); return 1; }
    double before[2] = { tn_array_get(e[0], NULL), tn_array_get(e[1], NULL) };
    tn_array_free(e[0]); tn_array_free(e[1]);
    for (int ep = 1; ep <= epochs; ep++) {
        double sum = 0;
        int nb = 0;
        for (int lo = 0; lo + BATCH <= D.ntr; lo += BATCH, nb++) {
            tn_array *xb = rows(D.xtr, lo, lo + BATCH), *c = NULL;
            if (tn_call(train, &xb, &c) != TN_OK) { fprintf(stderr, "train: %s\n", tn_last_error()); return 1; }
            sum += tn_array_get(c, NULL);
            tn_array_free(c); tn_array_free(xb);
        }
        if (ep == 1 || ep % 5 == 0 || ep == epochs) printf("epoch %3d: training cost (corrupted inputs) %.3f\n", ep, sum / nb);
    }
    if (tn_call(eval, &D.xte, e) != TN_OK) { fprintf(stderr, "eval: %s\n", tn_last_error()); return 1; }
    printf("held-out reconstruction cost: clean inputs %.3f -> %.3f, corrupted inputs %.3f -> %.3f\n", before[0], tn_array_get(e[0], NULL),
           before[1], tn_array_get(e[1], NULL));
    tn_array_free(e[0]); tn_array_free(e[1]);
    tn_function_free(train); tn_function_free(eval);
    tn_random_state_free(rs);
    tn_graph_free(g);
    digits_free(&D);
    tn_shutdown();
    return 0;
}
