/* tests/logreg_step.h - the seed's logistic regression training step as
   bench/bench.c's logreg_cases() builds it (issue 16), for the step-list
   checks of tests/test_rewrite.c and the kernels tests/test_nvrtc.c
   compiles: data shared and no outputs, or x and y passed with pred =
   p1 > 0.5 and xent the outputs; SGD updates of w and b. m->f is compiled
   in the default mode, m->ref unoptimized (fast_compile). */
#ifndef TN_TEST_LOGREG_STEP_H
#define TN_TEST_LOGREG_STEP_H

typedef struct lr_step { tn_graph *g; tn_func *f, *ref; tn_var *x, *y, *w, *b; const tn_array *w0; } lr_step;

/* false where a function did not compile (tn_last_error says why). */
static bool lr_build(lr_step *m, bool passed, const tn_array *X, const tn_array *Y, const tn_array *W0) {
    tn_array *B0 = tn_array_scalar(TN_F32, 0);
    memset(m, 0, sizeof *m);
    m->g = tn_graph_new();
    m->x = passed ? tn_matrix(m->g, "x", TN_F32) : tn_shared(m->g, "x", X);
    m->y = passed ? tn_vector(m->g, "y", TN_F32) : tn_shared(m->g, "y", Y);
    tn_var *w = m->w = tn_shared(m->g, "w", W0), *b = m->b = tn_shared(m->g, "b", B0), *one = tn_lit(w, 1.0);
    m->w0 = W0;
    tn_array_free(B0);
    tn_var *p1 = tn_div(one, tn_add(one, tn_exp(tn_sub(tn_neg(tn_dot(m->x, w)), b))));
    tn_var *pred = tn_gt(p1, tn_lit(p1, 0.5));
    tn_var *xent = tn_sub(tn_neg(tn_mul(m->y, tn_log(p1))), tn_mul(tn_sub(one, m->y), tn_log(tn_sub(one, p1))));
    tn_var *cost = tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_lit(one, 0.01), tn_sum(tn_sqr(w), NULL, 0, false)));
    tn_var *wrt[2] = { w, b }, *gr[2] = { 0 }, *outs[2] = { pred, xent }, *ins[2] = { m->x, m->y };
    if (tn_grad(cost, 2, wrt, gr, NULL) != TN_OK) return false;
    tn_update up[2] = { { w, tn_sub(w, tn_mul(tn_lit(w, 0.1), gr[0])) }, { b, tn_sub(b, tn_mul(tn_lit(b, 0.1), gr[1])) } };
    for (int k = 0; k < 2; k++) {
        tn_func_desc d = { .n_updates = 2, .updates = up, .mode = k ? TN_MODE_FAST_COMPILE : TN_MODE_DEFAULT };
        if (passed) { d.n_inputs = 2; d.inputs = ins; d.n_outputs = 2; d.outputs = outs; }
        *(k ? &m->ref : &m->f) = tn_function(m->g, &d);
    }
    return m->f && m->ref;
}

static void lr_free(lr_step *m) {
    tn_function_free(m->f);
    tn_function_free(m->ref);
    tn_graph_free(m->g);
}

#endif
