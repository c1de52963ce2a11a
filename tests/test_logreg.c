/* tests/test_logreg.c - the seed's logistic regression (Theano tutorial),
   trained with gradients from tn_grad and updates of shared variables:
   N = 400 points with 784 normal features and random 0/1 labels,
   p_1 = 1 / (1 + exp(-x.w - b)), xent = -y log p_1 - (1-y) log(1-p_1),
   cost = mean(xent) + 0.01 sum(w^2), w -= 0.1 gw, b -= 0.1 gb.
   Checked against a float64 reference loop written out by hand, for the
   default mode and fast_compile (optimizer on and off). */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

enum { N = 400, FEATS = 784, STEPS = 300 };

typedef struct {
    tn_graph *g;
    tn_var *x, *y, *w, *b, *cost, *pred;
    tn_func *train, *predict;
} logreg;

static tn_result logreg_build(logreg *m, const tn_array *w0, tn_mode mode) {
    memset(m, 0, sizeof *m);
    m->g = tn_graph_new();
    m->x = tn_matrix(m->g, "x", TN_F64);
    m->y = tn_vector(m->g, "y", TN_I64);
    tn_array *b0 = tn_array_scalar(TN_F64, 0.0);
    m->w = tn_shared(m->g, "w", w0);
    m->b = tn_shared(m->g, "b", b0);
    tn_array_free(b0);
    tn_var *one = tn_lit(m->w, 1.0);
    tn_var *p1 = tn_div(one, tn_add(one, tn_exp(tn_sub(tn_neg(tn_dot(m->x, m->w)), m->b))));
    m->pred = tn_gt(p1, tn_lit(p1, 0.5));
    tn_var *xent = tn_sub(tn_neg(tn_mul(m->y, tn_log(p1))), tn_mul(tn_sub(one, m->y), tn_log(tn_sub(one, p1))));
    m->cost = tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_lit(one, 0.01), tn_sum(tn_sqr(m->w), NULL, 0, false)));
    tn_var *wrt[2] = {m->w, m->b}, *gr[2];
    tn_result r = tn_grad(m->cost, 2, wrt, gr, NULL);
    if (r != TN_OK) return r;
    tn_update up[2] = { { m->w, tn_sub(m->w, tn_mul(tn_lit(m->w, 0.1), gr[0])) },
                        { m->b, tn_sub(m->b, tn_mul(tn_lit(m->b, 0.1), gr[1])) } };
    tn_var *ins[2] = {m->x, m->y}, *outs[2] = {m->pred, m->cost};
    m->train = tn_function(m->g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 2, .outputs = outs,
                                                  .n_updates = 2, .updates = up, .mode = mode, .name = "train" });
    m->predict = tn_function(m->g, &(tn_func_desc){ .n_inputs = 1, .inputs = &m->x, .n_outputs = 1, .outputs = &m->pred,
                                                    .mode = mode, .name = "predict" });
    return m->train && m->predict ? TN_OK : tn_last_result();
}

static void logreg_free(logreg *m) {
    tn_function_free(m->train); tn_function_free(m->predict); tn_graph_free(m->g);
}

/* data as the tutorial: rng.randn(N, feats), rng.randint(size=N, low=0, high=2) */
static tn_array *X, *Y, *W0;
static double *Xd, Yd[N], W0d[FEATS];

static void make_data(void) {
    X = tn_array_rand_normal(TN_F64, 2, (int64_t[]){N, FEATS}, 0, 1, 7000000);
    tn_array *u = tn_array_rand_uniform(TN_F64, 1, (int64_t[]){N}, 0, 1, 8000000);
    /* the tutorial's rng.randn(feats) saturates p_1 to exactly 1.0 in float64
       (x.w ~ N(0, 784)), where log(1 - p_1) is -inf before the optimizer
       rewrites it: start from randn(feats) / sqrt(feats) instead */
    W0 = tn_array_rand_normal(TN_F64, 1, (int64_t[]){FEATS}, 0, 1.0 / 28.0, 9000000);
    int64_t yv[N];
    double uv[N];
    tn_array_copy_to(u, TN_F64, uv, sizeof uv);
    for (int i = 0; i < N; i++) { yv[i] = uv[i] < 0.5 ? 0 : 1; Yd[i] = (double)yv[i]; }
    Y = tn_array_from_data(TN_I64, 1, (int64_t[]){N}, yv);
    Xd = (double *)malloc(sizeof(double) * N * FEATS);
    tn_array_copy_to(X, TN_F64, Xd, sizeof(double) * N * FEATS);
    tn_array_copy_to(W0, TN_F64, W0d, sizeof W0d);
    tn_array_free(u);
}

/* the float64 reference: gradients written out by hand */
TH_NO_SANITIZE static double ref_step(double *w, double *b) {
    static double p[N], gw[FEATS];
    double cost = 0, gb = 0, reg = 0;
    for (int i = 0; i < N; i++) {
        double z = *b;
        for (int j = 0; j < FEATS; j++) z += Xd[i * FEATS + j] * w[j];
        p[i] = 1 / (1 + exp(-z));
        cost += -Yd[i] * log(p[i]) - (1 - Yd[i]) * log(1 - p[i]);
    }
    for (int j = 0; j < FEATS; j++) { gw[j] = 0.02 * w[j]; reg += w[j] * w[j]; }
    for (int i = 0; i < N; i++) {
        double d = (p[i] - Yd[i]) / N;
        gb += d;
        for (int j = 0; j < FEATS; j++) gw[j] += d * Xd[i * FEATS + j];
    }
    for (int j = 0; j < FEATS; j++) w[j] -= 0.1 * gw[j];
    *b -= 0.1 * gb;
    return cost / N + 0.01 * reg;
}

typedef struct { double w[FEATS], b, first_cost, last_cost, acc; } trained;

static void train_mode(tn_mode mode, trained *t, const char *what) {
    logreg m;
    tn_result r = logreg_build(&m, W0, mode);
    CHECK(r == TN_OK, "%s: build: %s", what, tn_last_error());
    if (r != TN_OK) { logreg_free(&m); return; }
    tn_array *ins[2] = {X, Y};
    for (int s = 0; s < STEPS; s++) {
        tn_array *out[2] = {0};
        r = tn_call(m.train, ins, out);
        if (r != TN_OK) { CHECK(0, "%s: step %d: %s", what, s, tn_last_error()); break; }
        double c = tn_array_get(out[1], NULL);
        if (s == 0) t->first_cost = c;
        t->last_cost = c;
        tn_array_free(out[0]); tn_array_free(out[1]);
    }
    tn_array *pred = NULL;
    CHECK(tn_call(m.predict, &X, &pred) == TN_OK, "%s: predict: %s", what, tn_last_error());
    if (pred) {
        int ok = 0;
        for (int64_t i = 0; i < N; i++) ok += (tn_array_get(pred, &i) != 0) == (Yd[i] != 0);
        t->acc = (double)ok / N;
        tn_array_free(pred);
    }
    tn_array *wv = tn_shared_get_value(m.w), *bv = tn_shared_get_value(m.b);
    if (wv) tn_array_copy_to(wv, TN_F64, t->w, sizeof t->w);
    if (bv) t->b = tn_array_get(bv, NULL);
    tn_array_free(wv); tn_array_free(bv);
    if (getenv("TN_LOGREG_PRINT")) tn_debugprint_function(m.train, stdout);
    logreg_free(&m);
}

static trained T_ref, T_def, T_fc;

TEST(test_reference) {
    memcpy(T_ref.w, W0d, sizeof W0d);
    T_ref.b = 0;
    for (int s = 0; s < STEPS; s++) {
        double c = ref_step(T_ref.w, &T_ref.b);
        if (s == 0) T_ref.first_cost = c;
        T_ref.last_cost = c;
    }
    CHECK(T_ref.last_cost < T_ref.first_cost, "reference cost goes down");
}

static double wdiff(const trained *a, const trained *b) {
    double m = fabs(a->b - b->b);
    for (int j = 0; j < FEATS; j++) m = fmax(m, fabs(a->w[j] - b->w[j]));
    return m;
}

TEST(test_train_default) {
    train_mode(TN_MODE_DEFAULT, &T_def, "default");
    printf("logreg default: cost %.4f -> %.4f, train accuracy %.1f%%\n", T_def.first_cost, T_def.last_cost, 100 * T_def.acc);
    CHECK(T_def.last_cost < 0.5 * T_def.first_cost, "cost %g -> %g", T_def.first_cost, T_def.last_cost);
    CHECK(T_def.acc >= 0.99, "accuracy %g", T_def.acc);
    CHECK(th_close(T_def.first_cost, T_ref.first_cost, 1e-10, 0) && th_close(T_def.last_cost, T_ref.last_cost, 1e-8, 0),
          "cost %.12g/%.12g vs reference %.12g/%.12g", T_def.first_cost, T_def.last_cost, T_ref.first_cost, T_ref.last_cost);
    CHECK(wdiff(&T_def, &T_ref) < 1e-8, "weights vs reference: %g", wdiff(&T_def, &T_ref));
}

TEST(test_train_fast_compile) {
    train_mode(TN_MODE_FAST_COMPILE, &T_fc, "fast_compile");
    CHECK(T_fc.acc >= 0.99, "accuracy %g", T_fc.acc);
    CHECK(wdiff(&T_fc, &T_def) < 1e-8, "fast_compile vs default weights: %g", wdiff(&T_fc, &T_def));
    CHECK(wdiff(&T_fc, &T_ref) < 1e-8, "fast_compile vs reference: %g", wdiff(&T_fc, &T_ref));
}

/* float32 (floatX) training reaches the same accuracy */
TEST(test_train_f32) {
    logreg m;
    tn_array *w32 = tn_array_astype(W0, TN_F32), *x32 = tn_array_astype(X, TN_F32);
    memset(&m, 0, sizeof m);
    m.g = tn_graph_new();
    tn_var *x = tn_matrix(m.g, "x", TN_F32), *y = tn_vector(m.g, "y", TN_I64), *w = tn_shared(m.g, "w", w32);
    tn_var *one = tn_lit(w, 1.0);
    tn_var *p1 = tn_sigmoid(tn_dot(x, w));
    tn_var *xent = tn_sub(tn_neg(tn_mul(tn_cast(y, TN_F32), tn_log(p1))), tn_mul(tn_sub(one, tn_cast(y, TN_F32)), tn_log(tn_sub(one, p1))));
    tn_var *cost = tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_lit(one, 0.01), tn_sum(tn_sqr(w), NULL, 0, false)));
    tn_var *gw = tn_grad1(cost, w);
    CHECK(gw && tn_var_dtype(gw) == TN_F32, "gw float32: %s", tn_last_error());
    tn_update up = { w, tn_sub(w, tn_mul(tn_lit(w, 0.1), gw)) };
    tn_var *ins[2] = {x, y};
    tn_func *f = tn_function(m.g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 1, .outputs = &cost,
                                                   .n_updates = 1, .updates = &up });
    CHECK(f, "%s", tn_last_error());
    double c0 = 0, c1 = 0;
    for (int s = 0; f && s < STEPS; s++) {
        tn_array *out = NULL;
        if (tn_call(f, (tn_array *[]){x32, Y}, &out) != TN_OK) { CHECK(0, "step %d: %s", s, tn_last_error()); break; }
        c1 = tn_array_get(out, NULL);
        if (!s) c0 = c1;
        tn_array_free(out);
    }
    CHECK(c1 < 0.5 * c0, "f32 cost %g -> %g", c0, c1);
    tn_function_free(f);
    tn_graph_free(m.g);
    tn_array_free(w32); tn_array_free(x32);
}

int main(void) {
    tn_init(NULL);
    make_data();
    TH_RUN(test_reference);
    TH_RUN(test_train_default);
    TH_RUN(test_train_fast_compile);
    TH_RUN(test_train_f32);
    tn_array_free(X); tn_array_free(Y); tn_array_free(W0); free(Xd);
    tn_shutdown();
    TH_END();
}
