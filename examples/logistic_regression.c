/* logistic_regression.c - the seed exercise (Theano's tutorial, "Using the
   GPU" exercise), line for line: N = 400 points with 784 features,
   D = (rng.randn(N, feats), rng.randint(size=N, low=0, high=2)), w =
   rng.randn(feats), b = 0, all floatX, with the tutorial's formulas as
   written:
       p_1 = 1 / (1 + exp(-dot(x, w) - b))
       prediction = p_1 > 0.5
       xent = -y * log(p_1) - (1 - y) * log(1 - p_1)
       cost = xent.mean() + 0.01 * (w ** 2).sum()
       gw, gb = grad(cost, [w, b])
       train = function([x, y], [prediction, xent], updates=[(w, w - 0.01 * gw), (b, b - 0.01 * gb)])
       predict = function([x], prediction)
   The optimizer makes the cost and its gradient stable (sigmoid and softplus
   forms), so nothing turns inf or NaN where |dot(x, w)| is large. Prints
   the initial and final model, targets and predictions, how often they
   agree, the compiled step, its profile, and the tutorial's check: a Gemv or
   Gemm in the step means the CPU, a GpuGemv or GpuGemm the GPU.

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

/* The tutorial's test over train.maker.fgraph.toposort(): 1 cpu, 2 gpu, 0 neither. */
static int which_device(const tn_func *f) {
    FILE *t = tmpfile();
    char line[4096];
    bool cpu = false, gpu = false;
    if (!t || tn_print_toposort(f, t) != TN_OK) { if (t) fclose(t); return 0; }
    rewind(t);
    while (fgets(line, sizeof line, t)) {
        cpu |= !strncmp(line, "Gemv", 4) || !strncmp(line, "CGemv", 5) || !strncmp(line, "Gemm", 4) || !strncmp(line, "CGemm", 5);
        gpu |= !strncmp(line, "GpuGemv", 7) || !strncmp(line, "GpuGemm", 7);
    }
    fclose(t);
    return cpu ? 1 : gpu ? 2 : 0;
}

#define TRY(x) do { if (!(x)) { fprintf(stderr, "logistic_regression: %s\n", tn_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    int training_steps = argc > 1 ? atoi(argv[1]) : 10000;
    bool dot = argc > 2 && !strcmp(argv[2], "--dot");   /* stdout is then the graph alone */
    TRY(tn_init(NULL) == TN_OK);
    tn_dtype floatX = tn_get_config()->floatX;
    const int64_t N = 400, feats = 784;
    tn_random_state *rng = tn_random_state_new(0);   /* the tutorial's rng = numpy.random, seeded */
    tn_array *Dx = tn_rs_randn(rng, floatX, 2, (int64_t[]){ N, feats });
    tn_array *Dyi = tn_rs_randint(rng, TN_I64, 1, &N, 0, 2);
    tn_array *Dy = Dyi ? tn_array_astype(Dyi, floatX) : NULL;
    tn_array *w0 = tn_rs_randn(rng, floatX, 1, &feats), *b0 = tn_array_scalar(floatX, 0.0);
    TRY(Dx && Dy && w0 && b0);

    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", floatX), *y = tn_vector(g, "y", floatX);
    tn_var *w = tn_shared(g, "w", w0), *b = tn_shared(g, "b", b0);
    if (!dot) {
        printf("Initial model:\n");
        tn_array_print(w0, stdout);
        tn_array_print(b0, stdout);
    }

    tn_var *one = tn_lit(x, 1.0);
    tn_var *p_1 = tn_div(one, tn_add(one, tn_exp(tn_sub(tn_neg(tn_dot(x, w)), b))));   /* probability that target = 1 */
    tn_var *prediction = tn_gt(p_1, tn_lit(p_1, 0.5));                                  /* the prediction thresholded */
    tn_var *xent = tn_sub(tn_mul(tn_neg(y), tn_log(p_1)), tn_mul(tn_sub(one, y), tn_log(tn_sub(one, p_1))));   /* cross-entropy */
    tn_var *cost = tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_lit(w, 0.01), tn_sum(tn_pow(w, tn_lit(w, 2)), NULL, 0, false)));
    tn_var *grads[2];                                                                   /* gw, gb */
    TRY(tn_grad(cost, 2, (tn_var *[]){ w, b }, grads, NULL) == TN_OK);
    tn_update ups[2] = { { w, tn_sub(w, tn_mul(tn_lit(w, 0.01), grads[0])) },
                         { b, tn_sub(b, tn_mul(tn_lit(b, 0.01), grads[1])) } };
    tn_func *train = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 2,
                                                     .outputs = (tn_var *[]){ prediction, xent },
                                                     .n_updates = 2, .updates = ups, .name = "train" });
    tn_func *predict = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &prediction,
                                                       .name = "predict" });
    TRY(train && predict);
    if (dot) {      /* ./logistic_regression 0 --dot > train.dot */
        tn_array *o[2] = { NULL, NULL };
        TRY(tn_call(train, (tn_array *[]){ Dx, Dy }, o) == TN_OK);   /* edges get real shapes */
        tn_array_free(o[0]); tn_array_free(o[1]);
        tn_write_dot(train, stdout);
        return 0;
    }
    /* The time is taken with the profiler off; the last steps (100 at most)
       run profiled, for the profile printed below. */
    int profiled = training_steps < 200 ? training_steps / 2 : 100, timed = training_steps - profiled;
    double t0 = now(), t = 0, first_xent = 0, last_xent = 0;
    for (int i = 0; i < training_steps; i++) {
        if (i == timed) {
            t = now() - t0;
            TRY(tn_profile_enable(train, true) == TN_OK);
        }
        tn_array *out[2];                             /* pred, err = train(D[0], D[1]) */
        TRY(tn_call(train, (tn_array *[]){ Dx, Dy }, out) == TN_OK);
        double m = 0;
        for (int64_t k = 0; k < N; k++) m += tn_array_get(out[1], &k);
        if (i == 0) first_xent = m / (double)N;
        last_xent = m / (double)N;
        tn_array_free(out[0]); tn_array_free(out[1]);
    }
    printf("Final model:\n");
    tn_array *wf = tn_shared_get_value(w), *bf = tn_shared_get_value(b);
    TRY(wf && bf);
    tn_array_print(wf, stdout);
    tn_array_print(bf, stdout);
    tn_array *pred = NULL;
    TRY(tn_call(predict, &Dx, &pred) == TN_OK);
    printf("target values for D:\n");
    tn_array_print(Dyi, stdout);
    printf("prediction on D:\n");
    tn_array_print(pred, stdout);
    int agree = 0;
    for (int64_t i = 0; i < N; i++) agree += tn_array_get(pred, &i) == tn_array_get(Dy, &i);
    printf("\n%d training steps, %d timed in %.3f s (%.1f us a step, profiler off); mean xent %.4f -> %.4f\n",
           training_steps, timed, t, 1e6 * t / (timed ? timed : 1), first_xent, last_xent);
    printf("prediction agrees with the target on %d of %lld points\n\n", agree, (long long)N);

    printf("the training step, as compiled:\n");
    tn_debugprint_function(train, stdout);
    printf("\n");
    tn_profile_print(train, stdout);
    int dev = which_device(train);
    printf("\n%s\n", dev == 1 ? "Used the cpu" : dev == 2 ? "Used the gpu" : "ERROR, not able to tell if the cpu or the gpu was used");
    if (!dev) tn_print_toposort(train, stdout);

    tn_array_free(pred); tn_array_free(wf); tn_array_free(bf);
    tn_function_free(train); tn_function_free(predict);
    tn_graph_free(g);
    tn_array_free(Dx); tn_array_free(Dyi); tn_array_free(Dy); tn_array_free(w0); tn_array_free(b0);
    tn_random_state_free(rng);
    return 0;
}
