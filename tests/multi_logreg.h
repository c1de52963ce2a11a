/* tests/multi_logreg.h - the tutorial's logistic regression as one training
   step for tn_function_replicate (tests/test_multi.c on the CPU,
   tests/test_cuda_multi.c on GPUs), and a float64 reference written out by
   hand: the gradient of mean(xent) + 0.01 sum(w^2) in closed form,
   gw = X^T (p - y) / N + 0.02 w, gb = mean(p - y), not through tn_grad. */
#ifndef TN_TEST_MULTI_LOGREG_H
#define TN_TEST_MULTI_LOGREG_H
#include <math.h>
#include <string.h>

typedef struct mlr {
    tn_graph *g;
    tn_var *x, *y, *w, *b, *cost, *pred, *gr[2];
    tn_update up[2];
    tn_var *ins[2], *outs[2];
    tn_func_desc desc;
    tn_replicate_desc rd;
} mlr;

/* The step on a graph of its own: outputs pred (per row) and cost; updates w and b. */
static tn_result mlr_build(mlr *m, tn_dtype t, const tn_array *w0) {
    memset(m, 0, sizeof *m);
    m->g = tn_graph_new();
    m->x = tn_matrix(m->g, "x", t);
    m->y = tn_vector(m->g, "y", t);
    tn_array *b0 = tn_array_scalar(t, 0.0);
    m->w = tn_shared(m->g, "w", w0);
    m->b = tn_shared(m->g, "b", b0);
    tn_array_free(b0);
    tn_var *one = tn_lit(m->w, 1.0);
    tn_var *p1 = tn_div(one, tn_add(one, tn_exp(tn_sub(tn_neg(tn_dot(m->x, m->w)), m->b))));
    m->pred = tn_gt(p1, tn_lit(p1, 0.5));
    tn_var *xent = tn_sub(tn_neg(tn_mul(m->y, tn_log(p1))), tn_mul(tn_sub(one, m->y), tn_log(tn_sub(one, p1))));
    m->cost = tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_lit(one, 0.01), tn_sum(tn_sqr(m->w), NULL, 0, false)));
    tn_var *wrt[2] = { m->w, m->b };
    tn_result r = tn_grad(m->cost, 2, wrt, m->gr, NULL);
    if (r != TN_OK) return r;
    m->up[0] = (tn_update){ m->w, tn_sub(m->w, tn_mul(tn_lit(m->w, 0.1), m->gr[0])) };
    m->up[1] = (tn_update){ m->b, tn_sub(m->b, tn_mul(tn_lit(m->b, 0.1), m->gr[1])) };
    m->ins[0] = m->x; m->ins[1] = m->y;
    m->outs[0] = m->pred; m->outs[1] = m->cost;
    m->desc = (tn_func_desc){ .n_inputs = 2, .inputs = m->ins, .n_outputs = 2, .outputs = m->outs, .n_updates = 2, .updates = m->up,
                              .name = "logreg step" };
    m->rd = (tn_replicate_desc){ .n_grads = 2, .grads = m->gr };
    return TN_OK;
}

/* steps of full-batch gradient descent in float64: w (feats), *b; cost[s] and
   pred (of the last step) as the step computes them, before its update. */
static void mlr_reference(const double *X, const double *Y, int64_t n, int64_t feats, int steps, double *w, double *b,
                          double *cost, double *pred) {
    double *p = (double *)malloc((size_t)n * sizeof *p), *gw = (double *)malloc((size_t)feats * sizeof *gw);
    for (int s = 0; s < steps; s++) {
        double c = 0, gb = 0, ww = 0;
        for (int64_t j = 0; j < feats; j++) { gw[j] = 0; ww += w[j] * w[j]; }
        for (int64_t i = 0; i < n; i++) {
            double z = *b;
            for (int64_t j = 0; j < feats; j++) z += X[i * feats + j] * w[j];
            p[i] = 1 / (1 + exp(-z));
            c += -Y[i] * log(p[i]) - (1 - Y[i]) * log(1 - p[i]);
            if (pred) pred[i] = p[i] > 0.5;
            double e = p[i] - Y[i];
            gb += e;
            for (int64_t j = 0; j < feats; j++) gw[j] += e * X[i * feats + j];
        }
        cost[s] = c / (double)n + 0.01 * ww;
        for (int64_t j = 0; j < feats; j++) w[j] -= 0.1 * (gw[j] / (double)n + 0.02 * w[j]);
        *b -= 0.1 * gb / (double)n;
    }
    free(p);
    free(gw);
}

/* max |got - ref| / (1 + |ref|) over n values of a (any dtype, host or device) */
static double mlr_err(const tn_array *a, const double *ref, int64_t n) {
    tn_array *h = tn_array_to_host(a);
    double *v = (double *)malloc((size_t)(n + 1) * sizeof *v), m = h ? 0 : INFINITY;
    if (h && tn_array_size(h) == n && tn_array_copy_to(h, TN_F64, v, (size_t)(n + 1) * sizeof *v) == TN_OK)
        for (int64_t i = 0; i < n; i++) { double d = fabs(v[i] - ref[i]) / (1 + fabs(ref[i])); if (!(d <= m)) m = d; }
    else m = INFINITY;
    free(v);
    tn_array_free(h);
    return m;
}
#endif
