/* tests/test_grad.c - symbolic differentiation: verify_grad (central finite
   differences in float64) for every differentiable op, broadcasts, second
   derivatives, forward mode, options and errors. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

/* >>helpers */

/* tn_array_rand_*'s element i of seed s equals element i-1 of seed s+1:
   seeds a million apart keep test arrays independent */
static uint64_t seed_ctr = 1000003;
static uint64_t next_seed(void) { return seed_ctr += 1000003; }

static tn_array *rnd(int nd, const int64_t *sh, double lo, double hi) {
    return tn_array_rand_uniform(TN_F64, nd, sh, lo, hi, next_seed());
}

typedef tn_var *(*build_fn)(tn_graph *g, tn_var *const *in, void *user);

/* verify_grad at random points of the given shapes in [lo, hi]; static or not */
static tn_result vg(build_fn b, void *user, int n, const int *nds, const int64_t (*shapes)[TN_MAX_DIMS],
                    const double (*range)[2], bool static_shapes, const char *what) {
    tn_array *pts[4] = {0};
    for (int i = 0; i < n; i++) pts[i] = rnd(nds[i], shapes[i], range[i][0], range[i][1]);
    tn_verify_grad_report rep;
    tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b, .user = user, .n_inputs = n, .points = pts,
                                                         .seed = next_seed(), .static_shapes = static_shapes }, &rep);
    CHECK(r == TN_OK, "%s: %s", what, tn_last_error());
    for (int i = 0; i < n; i++) tn_array_free(pts[i]);
    return r;
}

/* one input of shape sh in [lo, hi], both with static and unknown shapes */
static void vg1(build_fn b, void *user, int nd, const int64_t *sh, double lo, double hi, const char *what) {
    int64_t shapes[1][TN_MAX_DIMS] = {{0}};
    memcpy(shapes[0], sh, sizeof(int64_t) * (size_t)nd);
    double range[1][2] = {{lo, hi}};
    vg(b, user, 1, &nd, (const int64_t (*)[TN_MAX_DIMS])shapes, (const double (*)[2])range, true, what);
    vg(b, user, 1, &nd, (const int64_t (*)[TN_MAX_DIMS])shapes, (const double (*)[2])range, false, what);
}

static void vg2(build_fn b, void *user, int na, const int64_t *sa, int nb, const int64_t *sb,
                double lo, double hi, bool static_shapes, const char *what) {
    int nds[2] = {na, nb};
    int64_t shapes[2][TN_MAX_DIMS] = {{0}};
    memcpy(shapes[0], sa, sizeof(int64_t) * (size_t)na);
    memcpy(shapes[1], sb, sizeof(int64_t) * (size_t)nb);
    double range[2][2] = {{lo, hi}, {lo, hi}};
    vg(b, user, 2, nds, (const int64_t (*)[TN_MAX_DIMS])shapes, (const double (*)[2])range, static_shapes, what);
}

/* compiles outs from ins and runs it once; outputs are caller-owned */
static tn_result run(tn_graph *g, int ni, tn_var *const *ins, tn_array *const *vals, int no, tn_var *const *outs, tn_array **res, tn_mode mode) {
    tn_func *f = tn_function(g, &(tn_func_desc){ .on_unused_input = TN_UNUSED_IGNORE, .n_inputs = ni, .inputs = ins, .n_outputs = no, .outputs = outs, .mode = mode });
    if (!f) return tn_last_result();
    tn_result r = tn_call(f, vals, res);
    tn_function_free(f);
    return r;
}

static double maxabsdiff(const tn_array *a, const double *ref, int64_t n) {
    double *buf = (double *)malloc(sizeof(double) * (size_t)(n ? n : 1)), m = 0;
    if (tn_array_copy_to(a, TN_F64, buf, sizeof(double) * (size_t)n) != TN_OK) { free(buf); return INFINITY; }
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(buf[i] - ref[i]) / fmax(1, fabs(ref[i])));
    free(buf);
    return m;
}

static void vals_of(const tn_array *a, double *out) { tn_array_copy_to(a, TN_F64, out, sizeof(double) * (size_t)tn_array_size(a)); }

/* >>unary */

typedef struct { const char *name; tn_var *(*f)(tn_var *); double lo, hi; } unary_case;
static tn_var *b_unary(tn_graph *g, tn_var *const *in, void *u) { (void)g; return ((unary_case *)u)->f(in[0]); }

TEST(test_unary_ops) {
    unary_case cs[] = {
        {"identity", tn_identity, -2, 2}, {"neg", tn_neg, -2, 2}, {"abs+", tn_abs, 0.2, 2}, {"abs-", tn_abs, -2, -0.2},
        {"exp", tn_exp, -2, 2}, {"exp2", tn_exp2, -2, 2}, {"expm1", tn_expm1, -2, 2}, {"log", tn_log, 0.2, 3},
        {"log2", tn_log2, 0.2, 3}, {"log1p", tn_log1p, -0.5, 3}, {"sqrt", tn_sqrt, 0.2, 3}, {"rsqrt", tn_rsqrt, 0.2, 3},
        {"sqr", tn_sqr, -2, 2}, {"reciprocal", tn_reciprocal, 0.3, 2}, {"sin", tn_sin, -3, 3}, {"cos", tn_cos, -3, 3},
        {"tan", tn_tan, -1.2, 1.2}, {"tanh", tn_tanh, -2, 2}, {"sigmoid", tn_sigmoid, -4, 4},
        {"softplus", tn_softplus, -4, 4}, {"erf", tn_erf, -2, 2},
        /* interior points of each domain (relu away from its kink) */
        {"asin", tn_asin, -0.9, 0.9}, {"acos", tn_acos, -0.9, 0.9}, {"atan", tn_atan, -3, 3},
        {"sinh", tn_sinh, -2, 2}, {"cosh", tn_cosh, -2, 2}, {"asinh", tn_asinh, -3, 3},
        {"acosh", tn_acosh, 1.1, 3}, {"atanh", tn_atanh, -0.9, 0.9}, {"erfc", tn_erfc, -2, 2},
        {"relu+", tn_relu, 0.2, 2}, {"relu-", tn_relu, -2, -0.2},
        /* activations, on each side of a kink */
        {"selu+", tn_selu, 0.2, 2}, {"selu-", tn_selu, -3, -0.2}, {"gelu", tn_gelu, -4, 4}, {"gelu_tanh", tn_gelu_tanh, -4, 4},
        {"softsign+", tn_softsign, 0.2, 3}, {"softsign-", tn_softsign, -3, -0.2}, {"hard_sigmoid", tn_hard_sigmoid, -2.5, 2.5},
        {"hard_sigmoid flat", tn_hard_sigmoid, 3.2, 5}, {"silu", tn_silu, -5, 5}, {"mish", tn_mish, -5, 5},
    };
    int64_t shapes[3][2] = {{3, 4}, {5, 0}, {0, 0}};
    int nds[3] = {2, 1, 0};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int s = 0; s < 3; s++) vg1(b_unary, &cs[i], nds[s], shapes[s], cs[i].lo, cs[i].hi, cs[i].name);
}

/* discrete ops pass zero: floor(x) * x has gradient floor(x) */
static tn_var *b_discrete(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;
    tn_var *x = in[0];
    tn_var *m = tn_cast(tn_gt(x, tn_lit(x, 0.0)), TN_F64);
    return tn_add(tn_add(tn_mul(tn_floor(x), x), tn_mul(m, x)), tn_mul(tn_sign(x), tn_round(tn_mul(x, tn_lit(x, 3.0)))));
}

TEST(test_discrete_zero) {
    vg1(b_discrete, NULL, 2, (int64_t[]){3, 4}, 0.1, 0.9, "discrete 0.1..0.9");
    vg1(b_discrete, NULL, 2, (int64_t[]){3, 4}, -1.9, -1.1, "discrete -1.9..-1.1");
}

/* >>binary (with broadcasting) */

typedef struct { const char *name; tn_var *(*f)(tn_var *, tn_var *); double lo, hi; } binary_case;
static tn_var *b_binary(tn_graph *g, tn_var *const *in, void *u) { (void)g; return ((binary_case *)u)->f(in[0], in[1]); }
static tn_var *my_mod(tn_var *a, tn_var *b) {   /* a in [2.3, 2.8], b in [1, 1.1]: away from the jumps */
    return tn_mod(tn_add(a, tn_lit(a, 2.3)), tn_add(tn_mul(b, tn_lit(b, 0.1)), tn_lit(b, 1.0)));
}

TEST(test_binary_ops_broadcast) {
    binary_case cs[] = {
        {"add", tn_add, -2, 2}, {"sub", tn_sub, -2, 2}, {"mul", tn_mul, -2, 2}, {"div", tn_div, 0.5, 2},
        {"pow", tn_pow, 0.5, 2}, {"maximum", tn_maximum, -2, 2}, {"minimum", tn_minimum, -2, 2}, {"mod", my_mod, 0, 0.5},
        {"leaky_relu+", tn_leaky_relu, 0.2, 2}, {"leaky_relu-", tn_leaky_relu, -2, -0.2},
        {"elu+", tn_elu, 0.2, 2}, {"elu-", tn_elu, -2, -0.2},
    };
    struct { int na; int64_t sa[3]; int nb; int64_t sb[3]; } sh[] = {
        {2, {3, 4}, 2, {3, 4}}, {2, {3, 4}, 1, {4}}, {2, {3, 1}, 2, {1, 4}}, {3, {2, 3, 4}, 2, {3, 1}},
        {0, {0}, 2, {3, 4}}, {1, {5}, 0, {0}},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
            char what[64];
            snprintf(what, sizeof what, "%s shapes %zu", cs[i].name, s);
            vg2(b_binary, &cs[i], sh[s].na, sh[s].sa, sh[s].nb, sh[s].sb, cs[i].lo, cs[i].hi, s % 2 == 0, what);
        }
}

/* a variable used several times, and a weak literal */
static tn_var *b_reuse(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;
    tn_var *x = in[0];
    return tn_mul(tn_mul(x, x), tn_add(tn_sin(x), tn_lit(x, 2.0)));
}

static tn_var *b_where_clip(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;
    tn_var *c = tn_gt(in[0], in[1]);
    tn_var *w = tn_where(c, tn_mul(in[0], in[0]), tn_exp(in[1]));
    return tn_add(w, tn_clip(in[0], tn_lit(in[0], -0.5), tn_lit(in[0], 0.5)));
}

static tn_var *b_clip3(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;   /* bounds are variables: lo in [-1.5, -0.5], hi in [0.5, 1.5] */
    tn_var *lo = tn_sub(tn_mul(in[1], tn_lit(in[1], 0.25)), tn_lit(in[1], 1.0));
    tn_var *hi = tn_add(tn_mul(in[1], tn_lit(in[1], 0.25)), tn_lit(in[1], 1.0));
    return tn_mul(tn_clip(in[0], lo, hi), tn_lit(in[0], 3.0));
}

/* crossed bounds: lo in [0.5, 1.5] above hi in [-1.5, -0.5]; the value is hi */
static tn_var *b_clip_crossed(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;
    tn_var *lo = tn_add(tn_mul(in[1], tn_lit(in[1], 0.25)), tn_lit(in[1], 1.0));
    tn_var *hi = tn_sub(tn_mul(in[1], tn_lit(in[1], 0.25)), tn_lit(in[1], 1.0));
    return tn_mul(tn_clip(in[0], lo, hi), tn_lit(in[0], 3.0));
}

TEST(test_reuse_where_clip) {
    vg1(b_reuse, NULL, 2, (int64_t[]){4, 3}, -2, 2, "x*x*(sin x + 2)");
    vg2(b_where_clip, NULL, 2, (int64_t[]){4, 5}, 1, (int64_t[]){5}, -1.2, 1.2, false, "where/clip");
    vg2(b_clip3, NULL, 1, (int64_t[]){40}, 0, (int64_t[]){0}, -2, 2, true, "clip with variable bounds");
    vg2(b_clip_crossed, NULL, 1, (int64_t[]){40}, 0, (int64_t[]){0}, -2, 2, true, "clip with lo > hi");
}

static tn_var *b_cast(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;   /* f64 -> f32 -> f64 loses precision: the test uses a loose tolerance */
    return tn_mul(tn_cast(tn_sqr(tn_cast(in[0], TN_F32)), TN_F64), in[0]);
}

TEST(test_cast) {
    tn_array *p = rnd(1, (int64_t[]){6}, 0.5, 1.5);
    tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_cast, .n_inputs = 1, .points = &p,
                                                         .eps = 1e-3, .abs_tol = 1e-3, .rel_tol = 1e-3 }, NULL);
    CHECK(r == TN_OK, "cast: %s", tn_last_error());
    tn_array_free(p);
}

/* >>reductions */

typedef struct { int op; int naxes; int axes[3]; bool keep; } red_case;
static tn_var *b_red(tn_graph *g, tn_var *const *in, void *u) {
    (void)g;
    red_case *c = (red_case *)u;
    const int *ax = c->naxes < 0 ? NULL : c->axes;
    int na = c->naxes < 0 ? 0 : c->naxes;
    tn_var *x = in[0], *r = NULL;
    switch (c->op) {
    case TN_OP_SUM: r = tn_sum(x, ax, na, c->keep); break;
    case TN_OP_MEAN: r = tn_mean(x, ax, na, c->keep); break;
    case TN_OP_PROD: r = tn_prod(x, ax, na, c->keep); break;
    case TN_OP_MAX: r = tn_max(x, ax, na, c->keep); break;
    case TN_OP_MIN: r = tn_min(x, ax, na, c->keep); break;
    case TN_OP_LOGSUMEXP: r = tn_logsumexp(x, ax, na, c->keep); break;
    }
    return tn_mul(r, r);   /* a non-constant upstream gradient */
}

TEST(test_reductions) {
    int ops[] = {TN_OP_SUM, TN_OP_MEAN, TN_OP_PROD, TN_OP_MAX, TN_OP_MIN, TN_OP_LOGSUMEXP};
    red_case axes[] = { {0, -1, {0}, false}, {0, 1, {0}, false}, {0, 1, {1}, true}, {0, 1, {-1}, false},
                        {0, 2, {0, 2}, false}, {0, 2, {0, 2}, true}, {0, 3, {0, 1, 2}, true} };
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (size_t a = 0; a < sizeof axes / sizeof axes[0]; a++) {
            red_case c = axes[a];
            c.op = ops[o];
            char what[64];
            snprintf(what, sizeof what, "%s axes case %zu", tn__op_def(ops[o])->name, a);
            double lo = ops[o] == TN_OP_PROD ? 0.5 : -2, hi = ops[o] == TN_OP_PROD ? 1.5 : 2;
            vg1(b_red, &c, 3, (int64_t[]){2, 3, 4}, lo, hi, what);
        }
    red_case c = {TN_OP_SUM, 1, {0}, false};
    vg1(b_red, &c, 1, (int64_t[]){7}, -1, 1, "sum of a vector");
}

/* prod with zeros: exact (one zero: the others' product; two: zero) */
TEST(test_prod_zeros) {
    red_case c = {TN_OP_PROD, 1, {1}, false};
    tn_array *p = rnd(2, (int64_t[]){3, 4}, 0.5, 1.5);
    tn_array_set(p, (int64_t[]){0, 1}, 0.0);                                    /* row 0: one zero */
    tn_array_set(p, (int64_t[]){1, 0}, 0.0); tn_array_set(p, (int64_t[]){1, 3}, 0.0);   /* row 1: two */
    tn_verify_grad_report rep;
    tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_red, .user = &c, .n_inputs = 1, .points = &p }, &rep);
    CHECK(r == TN_OK, "prod with zeros: %s", tn_last_error());
    /* and directly: d prod(row 0) / d x[0,1] is the product of the rest */
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F64, 2, (int64_t[]){3, 4}, NULL);
    tn_var *gx = tn_grad1(tn_sum(tn_prod(x, (int[]){1}, 1, false), NULL, 0, false), x);
    tn_array *out = NULL;
    CHECK(run(g, 1, &x, &p, 1, &gx, &out, TN_MODE_DEFAULT) == TN_OK, "run: %s", tn_last_error());
    if (out) {
        double want = 1;
        for (int k = 0; k < 4; k++) if (k != 1) want *= tn_array_get(p, (int64_t[]){0, k});
        CHECK(th_close(tn_array_get(out, (int64_t[]){0, 1}), want, 1e-12, 0), "one zero");
        CHECK(tn_array_get(out, (int64_t[]){0, 0}) == 0, "next to one zero");
        for (int k = 0; k < 4; k++) CHECK(tn_array_get(out, (int64_t[]){1, k}) == 0, "two zeros");
        tn_array_free(out);
    }
    tn_array_free(p);
    tn_graph_free(g);
}

/* max ties: every maximum gets the whole gradient (Theano's rule) */
TEST(test_max_ties) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *gx = tn_grad1(tn_max(x, NULL, 0, false), x);
    double d[4] = {1, 3, 3, 2};
    tn_array *a = tn_array_from_data(TN_F64, 1, (int64_t[]){4}, d), *out = NULL;
    CHECK(run(g, 1, &x, &a, 1, &gx, &out, TN_MODE_DEFAULT) == TN_OK, "run: %s", tn_last_error());
    double want[4] = {0, 1, 1, 0};
    if (out) CHECK(maxabsdiff(out, want, 4) == 0, "ties");
    tn_array_free(out); tn_array_free(a); tn_graph_free(g);
}

typedef struct { bool log; int axis; } sm_case;
static tn_var *b_softmax(tn_graph *g, tn_var *const *in, void *u) {
    (void)g;
    sm_case *c = (sm_case *)u;
    tn_var *y = c->log ? tn_log_softmax(in[0], c->axis) : tn_softmax(in[0], c->axis);
    return tn_mul(y, tn_sin(in[0]));
}

TEST(test_softmax) {
    for (int l = 0; l < 2; l++)
        for (int ax = -1; ax < 2; ax++) {
            sm_case c = { l != 0, ax };
            vg1(b_softmax, &c, 2, (int64_t[]){3, 5}, -2, 2, l ? "log_softmax" : "softmax");
        }
    sm_case c = { false, 1 };
    vg1(b_softmax, &c, 3, (int64_t[]){2, 3, 4}, -2, 2, "softmax 3d");
}

/* >>linalg */

static tn_var *b_dot(tn_graph *g, tn_var *const *in, void *u) { (void)g; (void)u; return tn_dot(in[0], in[1]); }
static tn_var *b_outer(tn_graph *g, tn_var *const *in, void *u) { (void)g; (void)u; return tn_outer(in[0], in[1]); }

TEST(test_dot_all_ranks) {
    struct { int na; int64_t sa[3]; int nb; int64_t sb[3]; } sh[] = {
        {1, {4}, 1, {4}}, {2, {3, 4}, 1, {4}}, {1, {3}, 2, {3, 4}}, {2, {3, 4}, 2, {4, 5}},
        {3, {2, 3, 4}, 2, {4, 5}}, {3, {2, 3, 4}, 3, {2, 4, 5}}, {2, {3, 4}, 3, {2, 4, 5}},
        {1, {4}, 3, {2, 4, 5}}, {3, {2, 3, 4}, 1, {4}}, {3, {1, 3, 4}, 3, {2, 4, 5}},
    };
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        char what[64];
        snprintf(what, sizeof what, "dot case %zu", s);
        vg2(b_dot, NULL, sh[s].na, sh[s].sa, sh[s].nb, sh[s].sb, -1, 1, true, what);
        vg2(b_dot, NULL, sh[s].na, sh[s].sa, sh[s].nb, sh[s].sb, -1, 1, false, what);
    }
    vg2(b_outer, NULL, 1, (int64_t[]){3}, 1, (int64_t[]){5}, -1, 1, false, "outer");
}

static tn_var *b_gemm(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;
    tn_var *a = tn_reshape(in[0], 2, (int64_t[]){3, 4});
    tn_var *b = tn_reshape(in[0], 2, (int64_t[]){4, 3});
    tn_var *y = tn_sum(in[1], (int[]){1}, 1, false), *x = tn_sum(tn_tanh(b), (int[]){1}, 1, false);
    tn_var *gv = tn_dimshuffle(tn_gemv(y, 2.0, a, x, 0.5), 2, (int[]){0, -1});
    return tn_add(tn_gemm(in[1], 0.7, a, tn_tanh(b), -1.3), gv);
}

TEST(test_gemm_gemv) {
    int nds[2] = {1, 2};
    int64_t shapes[2][TN_MAX_DIMS] = {{12}, {3, 3}};
    double range[2][2] = {{-1, 1}, {-1, 1}};
    vg(b_gemm, NULL, 2, nds, (const int64_t (*)[TN_MAX_DIMS])shapes, (const double (*)[2])range, true, "gemm+gemv");
}

/* >>shape ops */

static tn_var *b_shapes_ok(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;   /* in[0]: (2, 3, 4) */
    tn_var *x = in[0];
    tn_var *r = tn_reshape(x, 2, (int64_t[]){6, 4});
    tn_var *f = tn_flatten(x, 2);
    tn_var *t = tn_transpose(x, (int[]){2, 0, 1});
    tn_var *d = tn_dimshuffle(x, 5, (int[]){1, -1, 0, 2, -1});
    tn_var *s = tn_sum(tn_mul(r, tn_sin(r)), NULL, 0, false);
    s = tn_add(s, tn_sum(tn_sqr(f), NULL, 0, false));
    s = tn_add(s, tn_sum(tn_mul(t, tn_cos(t)), NULL, 0, false));
    return tn_add(s, tn_sum(tn_exp(d), NULL, 0, false));
}

typedef struct { int axis; int64_t a, b, s; } slice_case;
static tn_var *b_slice(tn_graph *g, tn_var *const *in, void *u) {
    (void)g;
    slice_case *c = (slice_case *)u;
    tn_var *y = tn_slice(in[0], c->axis, c->a, c->b, c->s);
    return tn_mul(y, tn_cos(y));
}
static tn_var *b_slice2(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;   /* two dims sliced in one expression, steps 2 and -1 */
    tn_var *y = tn_slice(tn_slice(in[0], 0, 1, TN_NONE, 2), 1, TN_NONE, TN_NONE, -1);
    return tn_mul(y, tn_exp(y));
}

/* one input of shape sh, static shapes only */
static void vg1s(build_fn b, void *user, int nd, const int64_t *sh, double lo, double hi, const char *what) {
    int64_t shapes[1][TN_MAX_DIMS] = {{0}};
    memcpy(shapes[0], sh, sizeof(int64_t) * (size_t)nd);
    double range[1][2] = {{lo, hi}};
    vg(b, user, 1, &nd, (const int64_t (*)[TN_MAX_DIMS])shapes, (const double (*)[2])range, true, what);
}

TEST(test_shape_ops) {
    vg1s(b_shapes_ok, NULL, 3, (int64_t[]){2, 3, 4}, -1, 1, "reshape/flatten/transpose/dimshuffle");
    slice_case sc[] = { {0, 1, 4, 1}, {0, TN_NONE, 3, 1}, {1, 2, TN_NONE, 1}, {1, -3, -1, 1}, {0, 1, TN_NONE, 2},
                        {0, TN_NONE, TN_NONE, 3}, {1, TN_NONE, TN_NONE, -1}, {0, 5, 0, -2}, {1, -1, TN_NONE, -3},
                        {0, 2, TN_NONE, INT64_MAX}, {1, -2, TN_NONE, INT64_MIN + 1} };   /* steps of any size */
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "slice case %zu", i);
        int64_t shapes[1][TN_MAX_DIMS] = {{7, 5}};
        double range[1][2] = {{-1, 1}};
        int nd = 2;
        vg(b_slice, &sc[i], 1, &nd, (const int64_t (*)[TN_MAX_DIMS])shapes, (const double (*)[2])range, true, what);
        if (sc[i].s == 1)   /* steps of 1 work with unknown sizes too */
            vg(b_slice, &sc[i], 1, &nd, (const int64_t (*)[TN_MAX_DIMS])shapes, (const double (*)[2])range, false, what);
    }
    vg1s(b_slice2, NULL, 2, (int64_t[]){6, 4}, -1, 1, "slices in two dims");
    /* reshape of an input with unknown dims: the message says what is missing */
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_tensor3(g, "x", TN_F64), *gr = NULL;
    CHECK(tn_grad(tn_sum(tn_sqr(tn_flatten(x, 2)), NULL, 0, false), 1, &x, &gr, NULL) == TN_ERR_UNSUPPORTED, "flatten unknown");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "'x', known only as (?, ?, ?)");
    tn_var *v = tn_vector(g, "v", TN_F64);
    CHECK(tn_grad(tn_sum(tn_sqr(tn_slice(v, 0, 1, TN_NONE, 2)), NULL, 0, false), 1, &v, &gr, NULL) == TN_ERR_UNSUPPORTED, "slice step 2 unknown");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "step 2");
    tn_graph_free(g);
}

static tn_var *b_concat(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;   /* in[0] (2, 3), in[1] (4, 3) */
    tn_var *xs[3] = { in[0], tn_sin(in[1]), in[0] };
    tn_var *c = tn_concatenate(3, xs, 0);                         /* (8, 3) */
    tn_var *ys[2] = { tn_slice(in[1], 0, 0, 2, 1), in[0] };
    tn_var *st = tn_stack(2, ys, 1);                              /* (2, 2, 3) */
    return tn_add(tn_sum(tn_mul(c, c), NULL, 0, false), tn_sum(tn_exp(st), NULL, 0, false));
}

static tn_var *b_concat_unknown(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;   /* sizes along the axis unknown: only the last piece's may be */
    tn_var *xs[3] = { tn_sum(in[0], (int[]){1}, 1, true), tn_sin(in[1]), tn_max(in[0], (int[]){1}, 1, true) };   /* (?, 1), (?, ?), (?, 1) */
    tn_var *c = tn_concatenate(3, xs, 1);
    return tn_sum(tn_mul(c, c), NULL, 0, false);
}

static tn_var *b_concat_repeat(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;   /* more inputs than the graph has nodes */
    tn_var *xs[7] = { in[0], in[0], in[0], in[0], in[0], in[0], in[0] };
    tn_var *c = tn_concatenate(7, xs, 0);
    return tn_sum(tn_mul(c, tn_sin(c)), NULL, 0, false);
}

static tn_var *b_bcast(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;   /* in[0] (3, 1), in[1] () */
    tn_var *b = tn_broadcast_to(in[0], 3, (int64_t[]){2, 3, 4});
    tn_var *a = tn_alloc(in[1], 2, (int64_t[]){3, 4});
    tn_var *f = tn_fill(b, in[1]);
    return tn_sum(tn_add(tn_mul(b, tn_sin(b)), tn_mul(tn_mul(a, a), f)), NULL, 0, false);
}

TEST(test_concat_stack_broadcast) {
    vg2(b_concat, NULL, 2, (int64_t[]){2, 3}, 2, (int64_t[]){4, 3}, -1, 1, true, "concatenate/stack");
    vg2(b_concat_unknown, NULL, 2, (int64_t[]){4, 2}, 2, (int64_t[]){4, 3}, -1, 1, false, "concatenate/stack unknown");
    vg1s(b_concat_repeat, NULL, 1, (int64_t[]){3}, -1, 1, "concatenate of one variable 7 times");
    vg2(b_bcast, NULL, 2, (int64_t[]){3, 1}, 0, (int64_t[]){0}, -1, 1, true, "broadcast_to/alloc/fill");
}

/* the seed's logistic-regression cost, as one expression */
static tn_var *b_logreg(tn_graph *g, tn_var *const *in, void *u) {
    (void)u;   /* in[0] x (5, 3), in[1] w (3), in[2] b () */
    double yv[5] = {1, 0, 0, 1, 1};
    tn_array *ya = tn_array_from_data(TN_F64, 1, (int64_t[]){5}, yv);
    tn_var *y = tn_constant(g, ya);
    tn_array_free(ya);
    tn_var *one = tn_lit(in[1], 1.0);
    tn_var *p1 = tn_div(one, tn_add(one, tn_exp(tn_sub(tn_neg(tn_dot(in[0], in[1])), in[2]))));
    tn_var *xent = tn_sub(tn_neg(tn_mul(y, tn_log(p1))), tn_mul(tn_sub(one, y), tn_log(tn_sub(one, p1))));
    return tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_lit(one, 0.01), tn_sum(tn_sqr(in[1]), NULL, 0, false)));
}

TEST(test_logreg_cost) {
    int nds[3] = {2, 1, 0};
    int64_t shapes[3][TN_MAX_DIMS] = {{5, 3}, {3}, {0}};
    double range[3][2] = {{-1, 1}, {-1, 1}, {-1, 1}};
    vg(b_logreg, NULL, 3, nds, (const int64_t (*)[TN_MAX_DIMS])shapes, (const double (*)[2])range, false, "logreg cost");
}

/* >>second derivatives */

static tn_var *b_grad_of(tn_graph *g, tn_var *const *in, void *u) {
    (void)g;
    int which = *(int *)u;
    tn_var *x = in[0], *f;
    switch (which) {
    case 0: f = tn_sum(tn_mul(tn_tanh(x), x), NULL, 0, false); break;
    case 1: f = tn_sum(tn_softmax(x, -1), NULL, 0, false); f = tn_sum(tn_mul(tn_softmax(x, -1), tn_sin(x)), NULL, 0, false); break;
    case 2: f = tn_logsumexp(x, NULL, 0, false); break;
    case 3: f = tn_sum(tn_prod(x, (int[]){1}, 1, false), NULL, 0, false); break;
    default: f = tn_sum(tn_mul(tn_dot(x, tn_transpose(x, NULL)), tn_sigmoid(tn_dot(x, tn_transpose(x, NULL)))), NULL, 0, false); break;
    }
    return tn_grad1(f, x);   /* a non-scalar output: verify_grad projects it */
}

TEST(test_second_derivatives) {
    for (int w = 0; w < 5; w++) {
        char what[64];
        snprintf(what, sizeof what, "grad of grad case %d", w);
        vg1(b_grad_of, &w, 2, (int64_t[]){3, 4}, w == 3 ? 0.5 : -1, 1, what);
    }
}

/* The gradient of a projection of a gradient, h = sum(p * d/dx sum(softmax(x) * sin(x))),
   against central differences of h, with static and with unknown shapes: the
   fused kernels of the second derivative share members (sin, the softmax's
   products) with reductions between them, where a fusion that joins groups
   across a reduction builds a cycle (a kernel reading one it feeds). */
TEST(test_second_derivative_fused) {
    for (int fixed = 0; fixed < 2; fixed++) {
        tn_graph *g = tn_graph_new();
        int64_t sh[2] = { 3, 4 };
        tn_var *x = fixed ? tn_input(g, "x", TN_F64, 2, sh, NULL) : tn_matrix(g, "x", TN_F64);
        tn_var *p = fixed ? tn_input(g, "p", TN_F64, 2, sh, NULL) : tn_matrix(g, "p", TN_F64);
        tn_var *gx = tn_grad1(tn_sum(tn_mul(tn_softmax(x, -1), tn_sin(x)), NULL, 0, false), x);
        tn_var *h = tn_sum(tn_mul(gx, p), NULL, 0, false), *hx = tn_grad1(h, x), *in[2] = { x, p };
        tn_func *fh = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = in, .n_outputs = 1, .outputs = &h, .name = "h" });
        tn_func *fx = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = in, .n_outputs = 1, .outputs = &hx, .name = "hx" });
        CHECK(fh && fx, "%s", tn_last_error());
        tn_array *X = rnd(2, sh, -1, 1), *P = rnd(2, sh, -1, 1), *o = NULL, *args[2] = { X, P };
        CHECK(fx && tn_call(fx, args, &o) == TN_OK, "%s", tn_last_error());
        double *xd = (double *)X->data, worst = 0;
        for (int i = 0; o && fh && i < 12; i++) {
            double e = 1e-6, x0 = xd[i], hp = 0, hm = 0;
            tn_array *a = NULL;
            xd[i] = x0 + e;
            if (tn_call(fh, args, &a) == TN_OK) hp = *(double *)a->data;
            tn_array_free(a);
            a = NULL;
            xd[i] = x0 - e;
            if (tn_call(fh, args, &a) == TN_OK) hm = *(double *)a->data;
            tn_array_free(a);
            xd[i] = x0;
            double d = fabs((hp - hm) / (2 * e) - ((double *)o->data)[i]);
            if (!(d <= worst)) worst = d;
        }
        CHECK(o && worst < 1e-7, "%s shapes: the second derivative differs from central differences by %g",
              fixed ? "static" : "unknown", worst);
        tn_array_free(o); tn_array_free(X); tn_array_free(P);
        tn_function_free(fh); tn_function_free(fx);
        tn_graph_free(g);
    }
}

/* Hessian-vector product of f(x) = x.A.x + sum(tanh(x)) against (A + A^T) v + tanh''(x) v */
TEST(test_hessian_vector) {
    const int n = 6;
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64), *v = tn_vector(g, "v", TN_F64), *A = tn_matrix(g, "A", TN_F64);
    tn_var *f = tn_add(tn_dot(x, tn_dot(A, x)), tn_sum(tn_tanh(x), NULL, 0, false));
    tn_var *gx = tn_grad1(f, x);
    tn_var *hv = tn_grad1(tn_sum(tn_mul(gx, v), NULL, 0, false), x);
    tn_var *jv = tn_rop(gx, 1, &x, &v);   /* forward over reverse: the same product */
    CHECK(hv && jv, "build: %s", tn_last_error());
    tn_array *xa = rnd(1, (int64_t[]){n}, -1, 1), *va = rnd(1, (int64_t[]){n}, -1, 1), *Aa = rnd(2, (int64_t[]){n, n}, -1, 1);
    tn_array *out[2] = {0};
    tn_var *ins[3] = {x, v, A}, *outs[2] = {hv, jv};
    tn_array *vals[3] = {xa, va, Aa};
    CHECK(run(g, 3, ins, vals, 2, outs, out, TN_MODE_DEFAULT) == TN_OK, "run: %s", tn_last_error());
    double X[6], V[6], M[36], ref[6];
    vals_of(xa, X); vals_of(va, V); vals_of(Aa, M);
    for (int i = 0; i < n; i++) {
        double t = tanh(X[i]);
        ref[i] = -2 * t * (1 - t * t) * V[i];
        for (int j = 0; j < n; j++) ref[i] += (M[i * n + j] + M[j * n + i]) * V[j];
    }
    if (out[0]) CHECK(maxabsdiff(out[0], ref, n) < 1e-12, "Hv");
    if (out[1]) CHECK(maxabsdiff(out[1], ref, n) < 1e-12, "Jv of the gradient");
    tn_array_free(out[0]); tn_array_free(out[1]);
    tn_array_free(xa); tn_array_free(va); tn_array_free(Aa);
    tn_graph_free(g);
}

/* >>forward mode: J v against a central difference along v */

static tn_var *f_rop(tn_var *x, tn_var *W, int which) {
    switch (which) {
    case 0: return tn_tanh(tn_dot(W, x));
    case 1: return tn_softmax(tn_outer(x, tn_sin(x)), 1);
    case 2: return tn_log_softmax(tn_reshape(tn_mul(x, x), 2, (int64_t[]){2, 3}), 0);
    case 3: return tn_sum(tn_mul(tn_dimshuffle(x, 2, (int[]){-1, 0}), W), (int[]){1}, 1, false);
    case 4: return tn_concatenate(2, (tn_var *[]){ tn_slice(x, 0, 1, TN_NONE, 2), tn_exp(x) }, 0);
    case 5: return tn_logsumexp(tn_mul(W, x), (int[]){0}, 1, true);
    case 6: return tn_max(tn_dot(W, x), NULL, 0, false);
    case 7: return tn_mean(tn_prod(tn_add(W, x), (int[]){0}, 1, false), NULL, 0, false);
    case 8: {   /* the new elementwise ops: x in [0.2, 1] */
        tn_var *u = tn_mul(x, tn_lit(x, 0.9));
        tn_var *a = tn_add(tn_add(tn_asin(u), tn_acos(tn_neg(u))), tn_atanh(u));
        tn_var *b = tn_add(tn_add(tn_sinh(x), tn_cosh(x)), tn_add(tn_asinh(x), tn_acosh(tn_add(x, tn_lit(x, 1.5)))));
        tn_var *c = tn_add(tn_mul(tn_atan(x), tn_erfc(x)), tn_relu(tn_sub(x, tn_lit(x, 0.5))));
        return tn_add(tn_add(tn_mul(a, b), c), tn_sum(tn_atan(tn_dot(W, x)), NULL, 0, false));
    }
    case 9: return tn_cumprod(tn_add(W, x), 1);
    default: return tn_cumsum(tn_mul(W, x), 0);
    }
}

TEST(test_rop) {
    const double eps = 1e-6;
    for (int w = 0; w < 11; w++) {
        tn_graph *g = tn_graph_new();
        tn_var *x = tn_input(g, "x", TN_F64, 1, (int64_t[]){6}, NULL), *v = tn_vector(g, "v", TN_F64);
        tn_var *W = tn_input(g, "W", TN_F64, 2, (int64_t[]){4, 6}, NULL);
        tn_var *f = f_rop(x, W, w), *jv = tn_rop(f, 1, &x, &v);
        CHECK(jv, "case %d: %s", w, tn_last_error());
        if (!jv) { tn_graph_free(g); continue; }
        tn_array *xa = rnd(1, (int64_t[]){6}, 0.2, 1), *va = rnd(1, (int64_t[]){6}, -1, 1), *Wa = rnd(2, (int64_t[]){4, 6}, -1, 1);
        double X[6], V[6], xp[6], xm[6];
        vals_of(xa, X); vals_of(va, V);
        for (int i = 0; i < 6; i++) { xp[i] = X[i] + eps * V[i]; xm[i] = X[i] - eps * V[i]; }
        tn_array *xpa = tn_array_from_data(TN_F64, 1, (int64_t[]){6}, xp), *xma = tn_array_from_data(TN_F64, 1, (int64_t[]){6}, xm);
        tn_var *ins[3] = {x, v, W};
        tn_array *r[1] = {0}, *fp[1] = {0}, *fm[1] = {0};
        CHECK(run(g, 3, ins, (tn_array *[]){xa, va, Wa}, 1, &jv, r, TN_MODE_DEFAULT) == TN_OK, "run: %s", tn_last_error());
        CHECK(run(g, 3, ins, (tn_array *[]){xpa, va, Wa}, 1, &f, fp, TN_MODE_DEFAULT) == TN_OK, "run: %s", tn_last_error());
        CHECK(run(g, 3, ins, (tn_array *[]){xma, va, Wa}, 1, &f, fm, TN_MODE_DEFAULT) == TN_OK, "run: %s", tn_last_error());
        if (r[0] && fp[0] && fm[0]) {
            int64_t m = tn_array_size(fp[0]);
            CHECK(tn_array_size(r[0]) == m, "case %d: J v has %lld elements, f %lld", w, (long long)tn_array_size(r[0]), (long long)m);
            double *P = malloc(sizeof(double) * (size_t)m), *M = malloc(sizeof(double) * (size_t)m);
            vals_of(fp[0], P); vals_of(fm[0], M);
            for (int64_t i = 0; i < m; i++) P[i] = (P[i] - M[i]) / (2 * eps);
            if (tn_array_size(r[0]) == m) CHECK(maxabsdiff(r[0], P, m) < 1e-6, "case %d: J v", w);
            free(P); free(M);
        }
        tn_array_free(r[0]); tn_array_free(fp[0]); tn_array_free(fm[0]);
        tn_array_free(xa); tn_array_free(va); tn_array_free(Wa); tn_array_free(xpa); tn_array_free(xma);
        tn_graph_free(g);
    }
}

TEST(test_rop_unsupported) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64), *v = tn_vector(g, "v", TN_F64), *y = tn_vector(g, "y", TN_F64);
    CHECK(tn_rop(tn_exp(y), 1, &x, &v) == NULL, "disconnected");
    CHECK_ERR(TN_ERR_DISCONNECTED, "does not depend");
    tn_graph_free(g);
}

/* An eval point of another shape than its wrt is an error, at build time
   when the dims are known and at call time when not; before, the R-op took
   the eval point's shape instead of f's. */
TEST(test_rop_eval_point_shape) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F64, 2, (int64_t[]){ 2, 3 }, NULL), *v23 = tn_input(g, "v", TN_F64, 2, (int64_t[]){ 3, 3 }, NULL);
    CHECK(tn_rop(tn_exp(x), 1, &x, &v23) == NULL, "(3, 3) for (2, 3)");
    CHECK_ERR(TN_ERR_SHAPE, "tn_rop: eval_points[0] of shape (3, 3) does not match wrt[0] 'x' of shape (2, 3)");
    tn_var *c = tn_col(g, "c", TN_F64), *r = tn_row(g, "r", TN_F64);     /* (?, 1) and (1, ?): known only at call time */
    tn_var *jv = tn_rop(tn_sin(c), 1, &c, &r);
    CHECK(jv && jv->type.ndim == 2 && jv->type.shape[1] == 1, "J v has f's static shape: %s", tn_last_error());
    tn_func *f = jv ? tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ c, r }, .n_outputs = 1, .outputs = &jv }) : NULL;
    tn_array *cv = tn_array_ones(TN_F64, 2, (int64_t[]){ 3, 1 }), *rv = tn_array_ones(TN_F64, 2, (int64_t[]){ 1, 3 });
    tn_array *rv1 = tn_array_ones(TN_F64, 2, (int64_t[]){ 1, 1 }), *o = NULL;
    CHECK(f && tn_call(f, (tn_array *[]){ cv, rv }, &o) == TN_ERR_SHAPE, "a (1, 3) eval point for a (3, 1) wrt");
    CHECK_ERR(TN_ERR_SHAPE, "cannot broadcast (1, 3) to (3, 1)");
    CHECK(f && tn_call(f, (tn_array *[]){ cv, rv1 }, &o) == TN_OK, "a (1, 1) eval point broadcasts: %s", tn_last_error());
    CHECK(o && o->ndim == 2 && o->shape[0] == 3 && o->shape[1] == 1, "J v of shape (3, 1)");
    for (int64_t i = 0; o && i < 3; i++) CHECK(fabs(tn_array_get(o, (int64_t[]){ i, 0 }) - cos(1.0)) < 1e-15, "cos(1) * 1");
    tn_array_free(o); tn_array_free(cv); tn_array_free(rv); tn_array_free(rv1);
    tn_function_free(f);
    tn_graph_free(g);
}

/* >>options */

static tn_array *eval1(tn_graph *g, tn_var *in, tn_array *val, tn_var *out) {
    tn_array *r = NULL;
    if (run(g, 1, &in, &val, 1, &out, &r, TN_MODE_DEFAULT) != TN_OK) return NULL;
    return r;
}

TEST(test_consider_constant_stop_gradient) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *y = tn_mul(x, tn_lit(x, 2.0));
    tn_var *cost = tn_sum(tn_mul(x, y), NULL, 0, false);    /* 2 x^2: 4x, or 2x with y constant */
    tn_var *gr = NULL;
    CHECK(tn_grad(cost, 1, &x, &gr, &(tn_grad_options){ .n_consider_constant = 1, .consider_constant = &y }) == TN_OK, "%s", tn_last_error());
    tn_var *gs = tn_grad1(tn_sum(tn_mul(x, tn_stop_gradient(y)), NULL, 0, false), x);
    tn_var *gf = tn_grad1(cost, x);
    tn_array *xa = rnd(1, (int64_t[]){5}, -1, 1);
    double X[5], r2[5], r4[5];
    vals_of(xa, X);
    for (int i = 0; i < 5; i++) { r2[i] = 2 * X[i]; r4[i] = 4 * X[i]; }
    tn_array *a = eval1(g, x, xa, gr), *b = eval1(g, x, xa, gs), *c = eval1(g, x, xa, gf);
    CHECK(a && b && c, "run: %s", tn_last_error());
    if (a) CHECK(maxabsdiff(a, r2, 5) < 1e-15, "consider_constant");
    if (b) CHECK(maxabsdiff(b, r2, 5) < 1e-15, "stop_gradient");
    if (c) CHECK(maxabsdiff(c, r4, 5) < 1e-15, "full");
    /* a wrt reached only through a constant is disconnected */
    tn_var *gy = NULL;
    CHECK(tn_grad(tn_sum(tn_stop_gradient(x), NULL, 0, false), 1, &x, &gy, NULL) == TN_ERR_DISCONNECTED, "stopped");
    CHECK_ERR(TN_ERR_DISCONNECTED, "'x'");
    tn_array_free(a); tn_array_free(b); tn_array_free(c); tn_array_free(xa);
    tn_graph_free(g);
}

TEST(test_known_grads) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64), *h = tn_tanh(x), *gh = tn_sin(x);
    tn_var *gx = NULL;
    CHECK(tn_grad(NULL, 1, &x, &gx, &(tn_grad_options){ .n_known_grads = 1, .known_vars = &h, .known_grads = &gh }) == TN_OK,
          "%s", tn_last_error());
    tn_array *xa = rnd(1, (int64_t[]){5}, -1, 1), *r = eval1(g, x, xa, gx);
    double X[5], ref[5];
    vals_of(xa, X);
    for (int i = 0; i < 5; i++) ref[i] = sin(X[i]) * (1 - tanh(X[i]) * tanh(X[i]));
    CHECK(r && maxabsdiff(r, ref, 5) < 1e-14, "known_grads: %s", tn_last_error());
    tn_array_free(r); tn_array_free(xa);
    tn_graph_free(g);
}

static int warn_count;
static char warn_msg[512];
static void on_log(tn_log_level lv, const char *msg, void *user) {
    (void)user;
    if (lv == TN_LOG_WARN) { warn_count++; snprintf(warn_msg, sizeof warn_msg, "%s", msg); }
}

TEST(test_errors) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F64, 2, (int64_t[]){3, 4}, NULL), *other = tn_vector(g, "other", TN_F64);
    tn_var *n = tn_vector(g, "n", TN_I64), *gr[2] = {0};
    /* non-scalar cost */
    CHECK(tn_grad(tn_exp(x), 1, &x, gr, NULL) == TN_ERR_SHAPE && !gr[0], "non-scalar");
    CHECK_ERR(TN_ERR_SHAPE, "(3, 4)");
    tn_var *cost = tn_sum(tn_exp(x), NULL, 0, false);
    /* wrt not in the cost's graph: raise */
    tn_var *w2[2] = {x, other};
    CHECK(tn_grad(cost, 2, w2, gr, NULL) == TN_ERR_DISCONNECTED && !gr[0] && !gr[1], "raise");
    CHECK_ERR(TN_ERR_DISCONNECTED, "'other'");
    /* warn: zeros and one warning naming it */
    warn_count = 0;
    tn_set_log(on_log, NULL);
    CHECK(tn_grad(cost, 2, w2, gr, &(tn_grad_options){ .disconnected_inputs = TN_DISCONNECTED_WARN }) == TN_OK, "%s", tn_last_error());
    tn_set_log(NULL, NULL);
    CHECK(warn_count == 1 && strstr(warn_msg, "'other'"), "warning: %d '%s'", warn_count, warn_msg);
    tn_var *gi = NULL;
    CHECK(tn_grad(cost, 1, &other, &gi, &(tn_grad_options){ .disconnected_inputs = TN_DISCONNECTED_IGNORE }) == TN_OK, "%s", tn_last_error());
    if (gr[1] && gi) {
        tn_array *oa = rnd(1, (int64_t[]){4}, -1, 1), *z1 = eval1(g, other, oa, gr[1]), *z2 = eval1(g, other, oa, gi);
        double zero[4] = {0, 0, 0, 0};
        CHECK(z1 && z2 && maxabsdiff(z1, zero, 4) == 0 && maxabsdiff(z2, zero, 4) == 0 && z1->shape[0] == 4, "zeros");
        tn_array_free(z1); tn_array_free(z2); tn_array_free(oa);
    }
    /* return_disconnected NULL: the connected one computed, the other NULL; add_names */
    tn_var_set_name(cost, "cost");
    CHECK(tn_grad(cost, 2, w2, gr, &(tn_grad_options){ .disconnected_inputs = TN_DISCONNECTED_IGNORE, .return_disconnected = TN_RETURN_NULL,
                                                        .add_names = true }) == TN_OK && gr[0] && !gr[1], "NULL for the disconnected: %s", tn_last_error());
    CHECK(gr[0] && tn_var_name(gr[0]) && !strcmp(tn_var_name(gr[0]), "(dcost/dx)"), "add_names: '%s'", gr[0] ? tn_var_name(gr[0]) : "(null)");
    CHECK(tn_grad(cost, 2, w2, gr, &(tn_grad_options){ .return_disconnected = TN_RETURN_NULL }) == TN_ERR_DISCONNECTED,
          "return_disconnected does not override raise");
    /* integer wrt */
    tn_var *c2 = tn_add(cost, tn_sum(tn_cast(n, TN_F64), NULL, 0, false));
    CHECK(tn_grad(c2, 1, &n, gr, NULL) == TN_ERR_DTYPE, "int wrt");
    CHECK_ERR(TN_ERR_DTYPE, "'n' is int64");
    /* another graph */
    tn_graph *g2 = tn_graph_new();
    tn_var *z = tn_vector(g2, "z", TN_F64);
    CHECK(tn_grad(cost, 1, &z, gr, NULL) == TN_ERR_GRAPH, "graph");
    CHECK_ERR(TN_ERR_GRAPH, "'z'");
    /* NULL cost (a failed constructor) */
    CHECK(tn_grad(NULL, 1, &x, gr, NULL) == TN_ERR_NULL, "null");
    CHECK_ERR(TN_ERR_NULL, "cost is NULL");
    tn_graph_free(g2);
    tn_graph_free(g);
}

/* verify_grad itself fails on a wrong gradient and names the worst element */
static tn_var *b_wrong(tn_graph *g, tn_var *const *in, void *u) {
    (void)g; (void)u;
    return tn_sum(tn_mul(in[0], tn_stop_gradient(in[0])), NULL, 0, false);
}

static tn_var *b_dot_0d(tn_graph *g, tn_var *const *in, void *u) { (void)u; return tn_dot(tn_sum(in[0], NULL, 0, false), tn_scalar_const(g, 2)); }
static tn_var *b_null(tn_graph *g, tn_var *const *in, void *u) { (void)g; (void)in; (void)u; return NULL; }

TEST(test_verify_grad_fails) {
    tn_array *p = rnd(2, (int64_t[]){2, 3}, 1, 2);
    tn_verify_grad_report rep;
    tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_wrong, .n_inputs = 1, .points = &p }, &rep);
    CHECK(r == TN_ERR_INVALID, "got %s", tn_result_string(r));
    CHECK_ERR(TN_ERR_INVALID, "by finite differences");
    double want = tn_array_get(p, rep.index);   /* symbolic x, numeric 2x */
    CHECK(rep.input == 0 && th_close(rep.symbolic, want, 1e-12, 0) && th_close(rep.numeric, 2 * want, 1e-6, 0),
          "report %g %g (x %g)", rep.symbolic, rep.numeric, want);
    /* what fails inside (the builder, its graph) is reported as tn_verify_grad's, and a builder
       that returns NULL without an error is named, not an earlier unrelated error */
    r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_dot_0d, .n_inputs = 1, .points = &p }, NULL);
    CHECK(r == TN_ERR_SHAPE, "got %s", tn_result_string(r));
    CHECK_ERR(TN_ERR_SHAPE, "tn_verify_grad: tn_dot: a () is 0-d");
    CHECK(!tn_array_ones((tn_dtype)99, 0, NULL), "an earlier error");
    r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_null, .n_inputs = 1, .points = &p }, NULL);
    CHECK_ERR(TN_ERR_NULL, "tn_verify_grad: the builder returned NULL");
    tn_array_free(p);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_unary_ops);
    TH_RUN(test_discrete_zero);
    TH_RUN(test_binary_ops_broadcast);
    TH_RUN(test_reuse_where_clip);
    TH_RUN(test_cast);
    TH_RUN(test_reductions);
    TH_RUN(test_prod_zeros);
    TH_RUN(test_max_ties);
    TH_RUN(test_softmax);
    TH_RUN(test_dot_all_ranks);
    TH_RUN(test_gemm_gemv);
    TH_RUN(test_shape_ops);
    TH_RUN(test_concat_stack_broadcast);
    TH_RUN(test_logreg_cost);
    TH_RUN(test_second_derivatives);
    TH_RUN(test_second_derivative_fused);
    TH_RUN(test_hessian_vector);
    TH_RUN(test_rop);
    TH_RUN(test_rop_unsupported);
    TH_RUN(test_rop_eval_point_shape);
    TH_RUN(test_consider_constant_stop_gradient);
    TH_RUN(test_known_grads);
    TH_RUN(test_errors);
    TH_RUN(test_verify_grad_fails);
    tn_shutdown();
    TH_END();
}
