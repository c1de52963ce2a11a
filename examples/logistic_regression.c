/* logistic_regression.c - the seed exercise (Theano's tutorial): N = 400
   points with 784 features and random 0/1 labels, a model
   p_1 = 1 / (1 + exp(-x.w - b)), cross-entropy plus 0.01 |w|^2, trained by
   gradient descent with updates of the shared w and b (train), then used to
   predict. Prints how often the prediction agrees with the target, the
   compiled training step, its profile, and which device ran the products.

   Build: cc -std=c11 -O2 -I. examples/logistic_regression.c -o logistic_regression -lm -lpthread -ldl
   Run:   ./logistic_regression [steps]     (default 10000; TENSOR_FLAGS=device=cuda for the GPU)
          ./logistic_regression 0 --dot > train.dot   (the training step for Graphviz: dot -Tpng train.dot -o train.png) */
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

#define TRY(x) do { if (!(x)) { fprintf(stderr, "logistic_regression: %s\n", tn_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 10000;
    TRY(tn_init(NULL) == TN_OK);
    const int64_t N = 400, feats = 784;
    /* D = (rng.randn(N, feats), rng.randint(size=N, low=0, high=2)) */
    tn_array *Dx = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ N, feats }, 0, 1, 1);
    tn_array *u = tn_array_rand_uniform(TN_F32, 1, &N, 0, 1, 2);
    tn_array *Dy = tn_array_empty(TN_F32, 1, &N);
    TRY(Dx && u && Dy);
    for (int64_t i = 0; i < N; i++) tn_array_set(Dy, &i, tn_array_get(u, &i) < 0.5 ? 0.0 : 1.0);
    tn_array *w0 = tn_array_rand_normal(TN_F32, 1, &feats, 0, 1, 3), *b0 = tn_array_scalar(TN_F32, 0.0);

    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32), *y = tn_vector(g, "y", TN_F32);
    tn_var *w = tn_shared(g, "w", w0), *b = tn_shared(g, "b", b0);
    tn_var *one = tn_lit(x, 1.0);
    tn_var *z = tn_add(tn_dot(x, w), b);
    tn_var *p1 = tn_sigmoid(z);                      /* the tutorial's 1 / (1 + exp(-x.w - b)) */
    tn_var *prediction = tn_gt(p1, tn_lit(p1, 0.5));
    /* -y log(p_1) - (1-y) log(1 - p_1), in the form Theano's stabilizer gives it
       (-log(sigmoid(z)) = softplus(-z)): finite in float32 however large x.w gets */
    tn_var *xent = tn_add(tn_mul(y, tn_softplus(tn_neg(z))), tn_mul(tn_sub(one, y), tn_softplus(z)));
    tn_var *cost = tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_lit(w, 0.01), tn_sum(tn_sqr(w), NULL, 0, false)));
    tn_var *grads[2];
    TRY(tn_grad(cost, 2, (tn_var *[]){ w, b }, grads, NULL) == TN_OK);
    tn_update ups[2] = { { w, tn_sub(w, tn_mul(tn_lit(w, 0.1), grads[0])) },
                         { b, tn_sub(b, tn_mul(tn_lit(b, 0.1), grads[1])) } };
    tn_func *train = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 2,
                                                     .outputs = (tn_var *[]){ prediction, cost }, .borrow = true,
                                                     .n_updates = 2, .updates = ups, .name = "train" });
    tn_func *predict = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &prediction,
                                                       .name = "predict" });
    TRY(train && predict);
    if (argc > 2 && !strcmp(argv[2], "--dot")) {      /* ./logistic_regression 0 --dot > train.dot */
        TRY(tn_call(train, (tn_array *[]){ Dx, Dy }, (tn_array *[2]){ NULL, NULL }) == TN_OK);   /* edges get real shapes */
        tn_write_dot(train, stdout);
        return 0;
    }
    TRY(tn_profile_enable(train, true) == TN_OK);

    tn_array *out[2];
    double t0 = now(), first_cost = 0, last_cost = 0;
    int64_t i0 = 0;
    for (int i = 0; i < steps; i++) {
        TRY(tn_call(train, (tn_array *[]){ Dx, Dy }, out) == TN_OK);   /* borrowed: nothing to free */
        last_cost = tn_array_get(out[1], &i0);
        if (i == 0) first_cost = last_cost;
    }
    double t = now() - t0;
    tn_array *pred = NULL;
    TRY(tn_call(predict, &Dx, &pred) == TN_OK);
    int agree = 0;
    for (int64_t i = 0; i < N; i++) agree += tn_array_get(pred, &i) == tn_array_get(Dy, &i);

    printf("%d training steps in %.3f s (%.1f us a step); cost %.4f -> %.4f\n", steps, t, 1e6 * t / (steps ? steps : 1), first_cost, last_cost);
    printf("target values for D:  ");
    for (int64_t i = 0; i < 20; i++) printf("%d", (int)tn_array_get(Dy, &i));
    printf(" ...\nprediction on D:      ");
    for (int64_t i = 0; i < 20; i++) printf("%d", (int)tn_array_get(pred, &i));
    printf(" ...\nprediction agrees with the target on %d of %lld points\n\n", agree, (long long)N);

    printf("the training step, as compiled:\n");
    tn_debugprint_function(train, stdout);
    printf("\n");
    tn_profile_print(train, stdout);
    printf("\nthe products (Gemv/Dot) ran on the %s: %d of the step's ops on a device\n",
           tn_function_device_steps(train) > 0 ? "gpu" : "cpu", tn_function_device_steps(train));

    tn_array_free(pred);
    tn_function_free(train); tn_function_free(predict);
    tn_graph_free(g);
    tn_array_free(Dx); tn_array_free(u); tn_array_free(Dy); tn_array_free(w0); tn_array_free(b0);
    return 0;
}
