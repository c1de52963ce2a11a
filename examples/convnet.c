/* convnet.c - the tutorial deck's convolutional network exercise, LeNet
   style, on scikit-learn's 8x8 digits:
       conv 3x3 (1 -> 16, padding 1), relu, max pool 2x2      -> 16 x 4 x 4
       conv 3x3 (16 -> 32, padding 1), relu, max pool 2x2     -> 32 x 2 x 2
       flatten, dropout 0.25 (training only), dense 128 -> 10, softmax
   trained by SGD with momentum 0.9 on 80% of the images (integer labels,
   the negative log-likelihood through one_hot and log_softmax), and tested
   on the held-out 20%. The dropout mask is an in-graph random stream: each
   call draws a new one, and the seed makes a run reproducible.
   The data: /usr/bin/python3 examples/digits.py writes examples/digits.bin
   (it needs Debian's python3-sklearn); without it the example says so and
   exits.

   Build: cc -std=c11 -O2 -I. examples/convnet.c -o convnet -lm -lpthread -ldl
   Run:   ./convnet [epochs]      (default 30; TENSOR_FLAGS=device=cuda for the GPU) */
#define _POSIX_C_SOURCE 199309L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "digits.h"
#include <math.h>
#include <time.h>

enum { BATCH = 32 };

static tn_var *param(tn_graph *g, tn_random_state *rs, const char *name, int ndim, const int64_t *shape, int64_t fan_in) {
    double a = sqrt(6.0 / (double)fan_in);                     /* He uniform, for relu */
    tn_array *v = fan_in ? tn_rs_uniform(rs, TN_F32, ndim, shape, -a, a) : tn_array_zeros(TN_F32, ndim, shape);
    tn_var *s = tn_shared_fixed(g, name, v);          /* a static shape, as the convolutions need */
    tn_array_free(v);
    return s;
}

/* The network's class scores for x (N, 64), with dropout when rs is set. */
static tn_var *net(tn_var *x, tn_var *const *P, tn_rstream *drop) {
    tn_conv_opts c, p;
    memset(&c, 0, sizeof c);
    c.padding[0] = c.padding[1] = 1;
    memset(&p, 0, sizeof p);
    p.kernel[0] = p.kernel[1] = 2;
    tn_var *img = tn_reshape(x, 4, (int64_t[]){ -1, 1, 8, 8 });
    int64_t bs[4] = { 1, 16, 1, 1 }, bs2[4] = { 1, 32, 1, 1 };
    tn_var *h1 = tn_max_pool2d(tn_relu(tn_add(tn_conv2d(img, P[0], &c), tn_reshape(P[1], 4, bs))), &p);
    tn_var *h2 = tn_max_pool2d(tn_relu(tn_add(tn_conv2d(h1, P[2], &c), tn_reshape(P[3], 4, bs2))), &p);
    tn_var *f = tn_flatten(h2, 2);                                  /* (N, 128) */
    if (drop) f = tn_dropout(drop, f, 0.25);
    return tn_add(tn_dot(f, P[4]), P[5]);
}

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    int epochs = argc > 1 ? atoi(argv[1]) : 30;
    tn_init(NULL);
    digits D;
    if (!digits_load("examples/digits.bin", true, &D)) return 0;
    tn_graph *g = tn_graph_new();
    tn_random_state *rs = tn_random_state_new(5);
    tn_var *P[6] = {
        param(g, rs, "W1", 4, (int64_t[]){ 16, 1, 3, 3 }, 9), param(g, rs, "b1", 1, (int64_t[]){ 16 }, 0),
        param(g, rs, "W2", 4, (int64_t[]){ 32, 16, 3, 3 }, 144), param(g, rs, "b2", 1, (int64_t[]){ 32 }, 0),
        param(g, rs, "W3", 2, (int64_t[]){ 128, 10 }, 128), param(g, rs, "b3", 1, (int64_t[]){ 10 }, 0),
    };
    tn_rstream *drop = tn_random_stream(g, 42);
    tn_var *x = tn_matrix(g, "x", TN_F32), *y = tn_vector(g, "y", TN_I32);
    int one = 1;
    tn_var *nll = tn_neg(tn_mean(tn_sum(tn_mul(tn_one_hot(y, 10, TN_F32), tn_log_softmax(net(x, P, drop), 1)), &one, 1, false), NULL, 0, false));
    tn_var *gr[6];
    if (tn_grad(nll, 6, P, gr, NULL) != TN_OK) { fprintf(stderr, "convnet: %s\n", tn_last_error()); return 1; }
    tn_update up[12];
    for (int i = 0; i < 6; i++) {            /* v <- 0.9 v - lr g; p <- p + v (the new v) */
        tn_array *z = tn_shared_get_value(P[i]), *zero = tn_array_zeros(TN_F32, z->ndim, z->shape);
        tn_var *v = tn_shared(g, "velocity", zero);
        tn_array_free(z); tn_array_free(zero);
        tn_var *nv = tn_sub(tn_mul(tn_lit(v, 0.9), v), tn_mul(tn_lit(v, 0.05), gr[i]));
        up[2 * i] = (tn_update){ v, nv };
        up[2 * i + 1] = (tn_update){ P[i], tn_add(P[i], nv) };
    }
    tn_var *cls = tn_argmax(net(x, P, NULL), 1, false);
    tn_func *train = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 1, .outputs = &nll,
                                                    .n_updates = 12, .updates = up, .name = "train" });
    tn_func *predict = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &cls, .name = "predict" });
    if (!train || !predict) { fprintf(stderr, "convnet: %s\n", tn_last_error()); return 1; }
    printf("LeNet-style convnet on scikit-learn's digits: %d training, %d held-out images; SGD, momentum 0.9, lr 0.05, batches of %d\n",
           D.ntr, D.nte, BATCH);
    double acc = 0, t0 = seconds();
    for (int e = 1; e <= epochs; e++) {
        double sum = 0;
        int nb = 0;
        for (int lo = 0; lo + BATCH <= D.ntr; lo += BATCH, nb++) {
            tn_array *xb = rows(D.xtr, lo, lo + BATCH), *yb = rows(D.ytr, lo, lo + BATCH), *c = NULL;
            if (tn_call(train, (tn_array *[]){ xb, yb }, &c) != TN_OK) { fprintf(stderr, "train: %s\n", tn_last_error()); return 1; }
            sum += tn_array_get(c, NULL);
            tn_array_free(c); tn_array_free(xb); tn_array_free(yb);
        }
        tn_array *p = NULL;
        if (tn_call(predict, &D.xte, &p) != TN_OK) { fprintf(stderr, "predict: %s\n", tn_last_error()); return 1; }
        int ok = 0;
        for (int i = 0; i < D.nte; i++) ok += (int32_t)tn_array_get(p, (int64_t[]){ i }) == ((const int32_t *)D.yte->data)[i];
        tn_array_free(p);
        acc = 100.0 * ok / D.nte;
        if (e == 1 || e % 5 == 0 || e == epochs) printf("epoch %3d: training cost %.4f, held-out accuracy %.1f%%\n", e, sum / nb, acc);
    }
    printf("test accuracy on the held-out split: %.1f%% (%d epochs, %.1f s, %s)\n", acc, epochs, seconds() - t0,
           tn_cuda_available() ? "on the GPU" : "on the CPU");
    tn_function_free(train); tn_function_free(predict);
    tn_random_state_free(rs);
    tn_graph_free(g);
    digits_free(&D);
    tn_shutdown();
    return 0;
}
