/* mlp.c - the tutorial deck's MLP exercise: a multilayer perceptron (64
   inputs, 100 tanh hidden units, a softmax over 10 classes) trained by
   minibatch SGD on scikit-learn's 8x8 digits, with two initialisations of
   the weights side by side:
     Glorot:  uniform in [-sqrt(6 / (fan_in + fan_out)), +sqrt(...)]
     1/fan_in: uniform in [-1 / fan_in, +1 / fan_in]
   Each epoch prints both models' training cost and held-out accuracy in two
   columns. The cost is the negative log-likelihood written as the deck does,
   -mean(sum(one_hot(y) * log(softmax(z)), 1)); the optimizer computes it
   through log_softmax. Without examples/digits.bin (examples/digits.py
   writes it) it trains on a synthetic stand-in of the same shape.

   Build: cc -std=c11 -O2 -I. examples/mlp.c -o mlp -lm -lpthread -ldl
   Run:   ./mlp [epochs]      (default 20; TENSOR_FLAGS=device=cuda for the GPU) */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "digits.h"
#include <math.h>

enum { IN = 64, HID = 100, OUT = 10, BATCH = 50 };

typedef struct model {
    tn_graph *g;
    tn_func *train, *predict;
} model;

/* W1, b1, W2, b2 as shared variables; train(x, y) -> cost with the SGD
   updates, predict(x) -> class. */
static bool model_build(model *m, tn_random_state *rs, bool glorot, double lr) {
    m->g = tn_graph_new();
    double a1 = glorot ? sqrt(6.0 / (IN + HID)) : 1.0 / IN, a2 = glorot ? sqrt(6.0 / (HID + OUT)) : 1.0 / HID;
    tn_array *w1 = tn_rs_uniform(rs, TN_F32, 2, (int64_t[]){ IN, HID }, -a1, a1), *w2 = tn_rs_uniform(rs, TN_F32, 2, (int64_t[]){ HID, OUT }, -a2, a2);
    tn_array *b1 = tn_array_zeros(TN_F32, 1, (int64_t[]){ HID }), *b2 = tn_array_zeros(TN_F32, 1, (int64_t[]){ OUT });
    tn_var *W1 = tn_shared(m->g, "W1", w1), *B1 = tn_shared(m->g, "b1", b1), *W2 = tn_shared(m->g, "W2", w2), *B2 = tn_shared(m->g, "b2", b2);
    tn_array_free(w1); tn_array_free(w2); tn_array_free(b1); tn_array_free(b2);
    tn_var *x = tn_matrix(m->g, "x", TN_F32), *y = tn_vector(m->g, "y", TN_I32);
    tn_var *h = tn_tanh(tn_add(tn_dot(x, W1), B1));
    tn_var *z = tn_add(tn_dot(h, W2), B2);
    int one = 1;
    tn_var *nll = tn_neg(tn_mean(tn_sum(tn_mul(tn_one_hot(y, OUT, TN_F32), tn_log(tn_softmax(z, 1))), &one, 1, false), NULL, 0, false));
    tn_var *wrt[4] = { W1, B1, W2, B2 }, *gr[4];
    if (tn_grad(nll, 4, wrt, gr, NULL) != TN_OK) return false;
    tn_update up[4];
    for (int i = 0; i < 4; i++) up[i] = (tn_update){ wrt[i], tn_sub(wrt[i], tn_mul(tn_lit(wrt[i], lr), gr[i])) };
    tn_var *cls = tn_argmax(z, 1, false);
    m->train = tn_function(m->g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 1, .outputs = &nll,
                                                 .n_updates = 4, .updates = up, .name = glorot ? "train (Glorot)" : "train (1/fan_in)" });
    m->predict = tn_function(m->g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &cls, .name = "predict" });
    return m->train && m->predict;
}

/* One epoch of minibatches; the mean training cost. */
static double epoch(model *m, const digits *D) {
    double sum = 0;
    int nb = 0;
    for (int lo = 0; lo + BATCH <= D->ntr; lo += BATCH, nb++) {
        tn_array *xb = rows(D->xtr, lo, lo + BATCH), *yb = rows(D->ytr, lo, lo + BATCH), *c = NULL;
        if (tn_call(m->train, (tn_array *[]){ xb, yb }, &c) == TN_OK) sum += tn_array_get(c, NULL);
        else { fprintf(stderr, "train: %s\n", tn_last_error()); sum = NAN; }
        tn_array_free(c); tn_array_free(xb); tn_array_free(yb);
    }
    return sum / nb;
}

static double accuracy(model *m, const digits *D) {
    tn_array *p = NULL;
    if (tn_call(m->predict, &D->xte, &p) != TN_OK) { fprintf(stderr, "predict: %s\n", tn_last_error()); return NAN; }
    int ok = 0;
    for (int i = 0; i < D->nte; i++) ok += (int32_t)tn_array_get(p, (int64_t[]){ i }) == ((const int32_t *)D->yte->data)[i];
    tn_array_free(p);
    return 100.0 * ok / D->nte;
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 20;
    tn_init(NULL);
    digits D;
    digits_load("examples/digits.bin", false, &D);
    printf("MLP %d-%d-%d (tanh, softmax), SGD lr 0.1, batches of %d, on %s: %d training and %d held-out images\n", IN, HID, OUT, BATCH,
           D.real ? "scikit-learn's digits" : "a synthetic stand-in (no examples/digits.bin)", D.ntr, D.nte);
    tn_random_state *rs = tn_random_state_new(1234);
    model m[2];
    for (int k = 0; k < 2; k++)
        if (!model_build(&m[k], rs, k == 0, 0.1)) { fprintf(stderr, "mlp: %s\n", tn_last_error()); return 1; }
    printf("epoch   %-26s %-26s\n", "Glorot uniform", "uniform +-1/fan_in");
    printf("        %-12s %-13s %-12s %-13s\n", "train cost", "test acc", "train cost", "test acc");
    double acc[2] = { 0, 0 };
    for (int e = 1; e <= epochs; e++) {
        double c[2];
        for (int k = 0; k < 2; k++) { c[k] = epoch(&m[k], &D); acc[k] = accuracy(&m[k], &D); }
        printf("%5d   %-12.4f %5.1f%%        %-12.4f %5.1f%%\n", e, c[0], acc[0], c[1], acc[1]);
    }
    printf("held-out accuracy after %d epochs: Glorot %.1f%%, 1/fan_in %.1f%%\n", epochs, acc[0], acc[1]);
    for (int k = 0; k < 2; k++) { tn_function_free(m[k].train); tn_function_free(m[k].predict); tn_graph_free(m[k].g); }
    tn_random_state_free(rs);
    digits_free(&D);
    tn_shutdown();
    return 0;
}
