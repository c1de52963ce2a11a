/* tests/test_scan.c - scan: the seed's recurrence with sequence and output
   taps against a plain C loop (float64), gradients through time (verify_grad,
   truncate_gradient against a hand-written BPTT), go_backwards, n_steps 0
   and 1, updates, captured and hoisted variables, the dot rewrite, debugprint
   and errors. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

static uint64_t seed_ctr = 7000003;
static uint64_t next_seed(void) { return seed_ctr += 1000003; }

static tn_array *rnd(int nd, const int64_t *sh, double lo, double hi) {
    return tn_array_rand_uniform(TN_F64, nd, sh, lo, hi, next_seed());
}

static double *vals(const tn_array *a) {     /* float64 copy, C order; caller frees */
    size_t n = (size_t)tn_array_size(a);
    double *d = (double *)malloc((n + 1) * sizeof *d);
    if (tn_array_copy_to(a, TN_F64, d, (n + 1) * sizeof *d) != TN_OK) { free(d); return NULL; }
    return d;
}

static void graph_free(tn_graph *g) { tn__scan_release_graph(g); tn_graph_free(g); }

static double max_abs_diff(const double *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) { double d = fabs(a[i] - b[i]); if (!(d <= m)) m = d; }
    return m;
}

#include "scan_seed.h"

static void check_seed(int64_t L, bool static_len) {
    tn_graph *g = tn_graph_new();
    tn_var *ins[8], *outs[2];
    CHECK(seed_scan(g, ins, outs, static_len, L) == TN_OK, "tn_scan: %s", tn_last_error());
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 8, .inputs = ins, .n_outputs = 2, .outputs = outs });
    CHECK(f, "tn_function: %s", tn_last_error());
    if (!f) { graph_free(g); return; }
    int64_t sh[8][2] = { {NX, NX}, {NX, NU}, {NX, NU}, {NX, NY}, {NY, NX}, {L, NU}, {3, NX}, {NY, 0} };
    tn_array *a[8];
    double *P[8];
    for (int i = 0; i < 8; i++) { a[i] = rnd(i == 7 ? 1 : 2, sh[i], -0.8, 0.8); P[i] = vals(a[i]); }
    int64_t T = L - 4;
    for (int rep = 0; rep < 2; rep++) {      /* a second call reuses the plan and the compiled step */
        tn_array *res[2] = {0};
        tn_result r = tn_call(f, a, res);
        CHECK(r == TN_OK, "tn_call L=%lld: %s", (long long)L, tn_last_error());
        if (r != TN_OK) break;
        CHECK(res[0]->ndim == 2 && res[0]->shape[0] == T && res[0]->shape[1] == NX, "x has shape (%lld, %lld)",
              (long long)res[0]->shape[0], (long long)res[0]->shape[1]);
        CHECK(res[1]->ndim == 2 && res[1]->shape[0] == T && res[1]->shape[1] == NY, "y shape");
        double *xs = (double *)calloc((size_t)(T * NX + 1), sizeof(double)), *ys = (double *)calloc((size_t)(T * NY + 1), sizeof(double));
        seed_ref(P, L, xs, ys);
        double *gx = vals(res[0]), *gy = vals(res[1]);
        CHECK(max_abs_diff(gx, xs, (size_t)(T * NX)) < 1e-12, "x differs from the C loop by %g (L=%lld)", max_abs_diff(gx, xs, (size_t)(T * NX)), (long long)L);
        CHECK(max_abs_diff(gy, ys, (size_t)(T * NY)) < 1e-12, "y differs from the C loop by %g (L=%lld)", max_abs_diff(gy, ys, (size_t)(T * NY)), (long long)L);
        free(xs); free(ys); free(gx); free(gy);
        tn_array_free(res[0]); tn_array_free(res[1]);
    }
    for (int i = 0; i < 8; i++) { tn_array_free(a[i]); free(P[i]); }
    tn_function_free(f);
    graph_free(g);
}

TEST(seed_recurrence) {
    check_seed(20, true);
    check_seed(20, false);
    check_seed(7, false);      /* 3 steps: x(n-3) still reads only initial rows */
    check_seed(5, true);       /* one step */
    check_seed(4, false);      /* zero steps: empty outputs */
}

/* >>simple RNN: h(t) = tanh(W h(t-1) + x(t)); cost-like projections by verify_grad */

typedef struct rnn_opts { bool backwards; int64_t truncate; bool nsteps; int64_t n; } rnn_opts;

static tn_result rnn_step(tn_scan_step *s, void *user) {
    (void)user;
    s->outputs[0] = tn_tanh(tn_add(tn_dot(s->non_seq[0], s->out[0][0]), s->seq[0][0]));
    return TN_OK;
}

static tn_var *rnn(tn_var *W, tn_var *X, tn_var *h0, const rnn_opts *o) {
    tn_scan_seq seq = { X, 0, NULL };
    tn_scan_out out = { h0, 0, NULL };
    tn_var *h = NULL;
    tn_result r = tn_scan(&(tn_scan_desc){ .step = rnn_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 1,
                                           .outputs = &out, .n_non_sequences = 1, .non_sequences = &W,
                                           .go_backwards = o && o->backwards, .truncate_gradient = o ? o->truncate : 0,
                                           .has_n_steps = o && o->nsteps, .n_steps = o ? o->n : 0, .name = "rnn" },
                          &h, NULL, NULL);
    return r == TN_OK ? h : NULL;
}

static tn_var *b_rnn(tn_graph *g, tn_var *const *in, void *user) {
    (void)g;
    return rnn(in[0], in[1], in[2], (const rnn_opts *)user);
}

static void vg_rnn(const rnn_opts *o, int64_t T, bool static_shapes, const char *what) {
    int64_t n = 4;
    tn_array *pts[3] = { rnd(2, (int64_t[]){n, n}, -0.7, 0.7), rnd(2, (int64_t[]){T, n}, -1, 1), rnd(1, &n, -1, 1) };
    tn_verify_grad_report rep;
    tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_rnn, .user = (void *)o, .n_inputs = 3, .points = pts,
                                                         .seed = next_seed(), .static_shapes = static_shapes }, &rep);
    CHECK(r == TN_OK, "%s: %s (input %d: symbolic %g numeric %g)", what, tn_last_error(), rep.input, rep.symbolic, rep.numeric);
    for (int i = 0; i < 3; i++) tn_array_free(pts[i]);
}

TEST(verify_grad_rnn) {
    vg_rnn(NULL, 6, true, "rnn");
    vg_rnn(NULL, 6, false, "rnn, unknown shapes");
    vg_rnn(&(rnn_opts){ .backwards = true }, 5, false, "rnn go_backwards");
    vg_rnn(&(rnn_opts){ .nsteps = true, .n = 3 }, 5, true, "rnn n_steps 3 of 5");
    vg_rnn(NULL, 1, true, "rnn one step");
}

/* seed recurrence gradient: taps -4/0 on the sequence, -3/-1 on x, -1 on y */
static tn_var *b_seed(tn_graph *g, tn_var *const *in, void *user) {
    (void)user;
    static const int utaps[2] = { -4, 0 }, xtaps[2] = { -3, -1 };
    tn_scan_seq seq = { in[5], 2, utaps };
    tn_scan_out oi[2] = { { in[6], 2, xtaps }, { in[7], 0, NULL } };
    tn_var *outs[2];
    (void)g;
    if (tn_scan(&(tn_scan_desc){ .step = seed_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 2, .outputs = oi,
                                 .n_non_sequences = 5, .non_sequences = in }, outs, NULL, NULL) != TN_OK) return NULL;
    return tn_add(tn_sum(tn_sqr(outs[0]), NULL, 0, false), tn_sum(tn_mul(outs[1], outs[1]), NULL, 0, false));
}

TEST(verify_grad_seed) {
    int64_t sh[8][2] = { {NX, NX}, {NX, NU}, {NX, NU}, {NX, NY}, {NY, NX}, {9, NU}, {3, NX}, {NY, 0} };
    tn_array *pts[8];
    for (int i = 0; i < 8; i++) pts[i] = rnd(i == 7 ? 1 : 2, sh[i], -0.6, 0.6);
    tn_verify_grad_report rep;
    tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_seed, .n_inputs = 8, .points = pts, .seed = next_seed(),
                                                         .static_shapes = true }, &rep);
    CHECK(r == TN_OK, "seed gradient: %s (input %d: symbolic %g numeric %g)", tn_last_error(), rep.input, rep.symbolic, rep.numeric);
    for (int i = 0; i < 8; i++) tn_array_free(pts[i]);
}

/* truncated BPTT by hand: cost = sum_t sum(h_t); steps t >= T-k back-propagate */
static void bptt_ref(const double *W, const double *X, const double *h0, int n, int64_t T, int64_t k,
                     double *dW, double *dX, double *dh0) {
    double *H = (double *)malloc((size_t)((T + 1) * n) * sizeof(double));
    memcpy(H, h0, (size_t)n * sizeof(double));
    for (int64_t t = 0; t < T; t++) {
        matvec(W, H + t * n, H + (t + 1) * n, n, n);
        for (int i = 0; i < n; i++) H[(t + 1) * n + i] = tanh(H[(t + 1) * n + i] + X[t * n + i]);
    }
    double *dh = (double *)calloc((size_t)n, sizeof(double)), *dz = (double *)calloc((size_t)n, sizeof(double));
    memset(dW, 0, (size_t)(n * n) * sizeof(double));
    memset(dX, 0, (size_t)(T * n) * sizeof(double));
    int64_t stop = k > 0 && k < T ? T - k : 0;
    for (int64_t t = T - 1; t >= stop; t--) {
        for (int i = 0; i < n; i++) {
            double ht = H[(t + 1) * n + i];
            dz[i] = (dh[i] + 1.0) * (1 - ht * ht);
            dX[t * n + i] = dz[i];
        }
        for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) dW[i * n + j] += dz[i] * H[t * n + j];
        for (int j = 0; j < n; j++) { double s = 0; for (int i = 0; i < n; i++) s += W[i * n + j] * dz[i]; dh[j] = s; }
    }
    for (int j = 0; j < n; j++) dh0[j] = stop == 0 ? dh[j] : 0;
    free(H); free(dh); free(dz);
}

static void check_truncate(int64_t T, int64_t k) {
    int n = 3;
    tn_graph *g = tn_graph_new();
    tn_var *W = tn_matrix(g, "W", TN_F64), *X = tn_matrix(g, "X", TN_F64), *h0 = tn_vector(g, "h0", TN_F64);
    tn_var *h = rnn(W, X, h0, &(rnn_opts){ .truncate = k });
    CHECK(h, "scan: %s", tn_last_error());
    tn_var *cost = tn_sum(h, NULL, 0, false);
    tn_var *gr[3];
    tn_var *wrt[3] = { W, X, h0 };
    CHECK(tn_grad(cost, 3, wrt, gr, NULL) == TN_OK, "tn_grad: %s", tn_last_error());
    tn_var *ins[3] = { W, X, h0 };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 3, .outputs = gr });
    CHECK(f, "tn_function: %s", tn_last_error());
    if (f) {
        tn_array *a[3] = { rnd(2, (int64_t[]){n, n}, -0.8, 0.8), rnd(2, (int64_t[]){T, n}, -1, 1), rnd(1, (int64_t[]){n}, -1, 1) };
        tn_array *res[3] = {0};
        CHECK(tn_call(f, a, res) == TN_OK, "tn_call: %s", tn_last_error());
        double *Wv = vals(a[0]), *Xv = vals(a[1]), *hv = vals(a[2]);
        double dW[9], *dX = (double *)malloc((size_t)(T * n + 1) * sizeof(double)), dh0[3];
        bptt_ref(Wv, Xv, hv, n, T, k, dW, dX, dh0);
        double *gW = vals(res[0]), *gX = vals(res[1]), *gh = vals(res[2]);
        CHECK(gW && max_abs_diff(gW, dW, 9) < 1e-12, "dW (T=%lld, truncate %lld) off by %g", (long long)T, (long long)k, gW ? max_abs_diff(gW, dW, 9) : -1.0);
        CHECK(gX && max_abs_diff(gX, dX, (size_t)(T * n)) < 1e-12, "dX (T=%lld, truncate %lld) off by %g", (long long)T, (long long)k, gX ? max_abs_diff(gX, dX, (size_t)(T * n)) : -1.0);
        CHECK(gh && max_abs_diff(gh, dh0, 3) < 1e-12, "dh0 (T=%lld, truncate %lld)", (long long)T, (long long)k);
        if (k > 0 && k < T) CHECK(gX && gX[0] == 0 && gh && gh[0] == 0, "rows before the truncation get no gradient");
        free(Wv); free(Xv); free(hv); free(dX); free(gW); free(gX); free(gh);
        for (int i = 0; i < 3; i++) { tn_array_free(a[i]); tn_array_free(res[i]); }
        tn_function_free(f);
    }
    graph_free(g);
}

TEST(truncate_gradient) {
    check_truncate(7, 0);
    check_truncate(7, 3);
    check_truncate(7, 1);
    check_truncate(4, 10);    /* longer than the loop: everything */
}

/* >>go_backwards and n_steps, against C loops */

static tn_result acc_step(tn_scan_step *s, void *user) {   /* a(t) = 0.5 a(t-1) + u(t) * c */
    (void)user;
    s->outputs[0] = tn_add(tn_mul(s->out[0][0], tn_lit(s->out[0][0], 0.5)), tn_mul(s->seq[0][0], s->non_seq[0]));
    return TN_OK;
}

TEST(go_backwards) {
    tn_graph *g = tn_graph_new();
    tn_var *U = tn_matrix(g, "U", TN_F64), *a0 = tn_vector(g, "a0", TN_F64), *c = tn_vector(g, "c", TN_F64);
    tn_scan_seq seq = { U, 0, NULL };
    tn_scan_out out = { a0, 0, NULL };
    tn_var *A = NULL;
    CHECK(tn_scan(&(tn_scan_desc){ .step = acc_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 1, .outputs = &out,
                                   .n_non_sequences = 1, .non_sequences = &c, .go_backwards = true }, &A, NULL, NULL) == TN_OK,
          "%s", tn_last_error());
    tn_var *ins[3] = { U, a0, c };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 1, .outputs = &A });
    CHECK(f, "%s", tn_last_error());
    int64_t T = 6, n = 4;
    /* a transposed (non-contiguous) sequence: views must be read with their strides */
    tn_array *Ut = rnd(2, (int64_t[]){n, T}, -1, 1), *Uv = tn_array_transpose(Ut, NULL);
    tn_array *a[3] = { Uv, rnd(1, &n, -1, 1), rnd(1, &n, -1, 1) };
    tn_array *res = NULL;
    CHECK(f && tn_call(f, a, &res) == TN_OK, "%s", tn_last_error());
    if (res) {
        double *u = vals(Uv), *s = vals(a[1]), *cv = vals(a[2]), *got = vals(res);
        double ref[24];
        for (int64_t t = 0; t < T; t++)
            for (int i = 0; i < n; i++) {
                double prev = t ? ref[(t - 1) * n + i] : s[i];
                ref[t * n + i] = 0.5 * prev + u[(T - 1 - t) * n + i] * cv[i];
            }
        CHECK(res->shape[0] == T && max_abs_diff(got, ref, (size_t)(T * n)) < 1e-14, "go_backwards differs by %g", max_abs_diff(got, ref, (size_t)(T * n)));
        free(u); free(s); free(cv); free(got);
    }
    tn_array_free(res);
    tn_array_free(Ut); for (int i = 0; i < 3; i++) tn_array_free(a[i]);
    tn_function_free(f);
    graph_free(g);
}

static tn_result pow_step(tn_scan_step *s, void *user) {   /* x(t) = M x(t-1), no sequences */
    (void)user;
    s->outputs[0] = tn_dot(s->non_seq[0], s->out[0][0]);
    return TN_OK;
}

static void check_nsteps(int64_t N) {
    tn_graph *g = tn_graph_new();
    tn_var *M = tn_matrix(g, "M", TN_F64), *x0 = tn_vector(g, "x0", TN_F64);
    tn_scan_out out = { x0, 0, NULL };
    tn_var *X = NULL;
    CHECK(tn_scan(&(tn_scan_desc){ .step = pow_step, .n_outputs = 1, .outputs = &out, .n_non_sequences = 1,
                                   .non_sequences = &M, .has_n_steps = true, .n_steps = N }, &X, NULL, NULL) == TN_OK,
          "%s", tn_last_error());
    CHECK(X && X->type.shape[0] == N, "static length %lld", X ? (long long)X->type.shape[0] : -1LL);
    tn_var *ins[2] = { M, x0 };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 1, .outputs = &X });
    int64_t n = 3;
    tn_array *a[2] = { rnd(2, (int64_t[]){n, n}, -1, 1), rnd(1, &n, -1, 1) };
    tn_array *res = NULL;
    CHECK(f && tn_call(f, a, &res) == TN_OK, "%s", tn_last_error());
    if (res) {
        CHECK(res->ndim == 2 && res->shape[0] == N && res->shape[1] == n, "n_steps %lld: shape (%lld, %lld)", (long long)N,
              (long long)res->shape[0], (long long)res->shape[1]);
        double *m = vals(a[0]), *x = vals(a[1]), *got = vals(res), ref[3 * 8];
        for (int64_t t = 0; t < N; t++) matvec(m, t ? ref + (t - 1) * n : x, ref + t * n, (int)n, (int)n);
        CHECK(max_abs_diff(got, ref, (size_t)(N * n)) < 1e-14, "n_steps %lld differs", (long long)N);
        free(m); free(x); free(got);
    }
    tn_array_free(res); tn_array_free(a[0]); tn_array_free(a[1]);
    tn_function_free(f);
    graph_free(g);
}

TEST(n_steps_0_1) {
    check_nsteps(0);
    check_nsteps(1);
    check_nsteps(5);
    /* gradient with zero steps: the init gets the gradient of nothing (zeros), W zeros */
    vg_rnn(&(rnn_opts){ .nsteps = true, .n = 0 }, 3, true, "rnn n_steps 0");
}

/* >>updates, captured variables, hoisting */

static tn_result upd_step(tn_scan_step *s, void *user) {   /* y(t) = u(t) * k + acc; acc += u(t) */
    tn_var *k = (tn_var *)user;                          /* an outer shared variable, captured */
    tn_var *acc = s->non_seq[0];
    s->outputs[0] = tn_add(tn_mul(s->seq[0][0], k), acc);
    s->updates[0] = tn_add(acc, s->seq[0][0]);
    return TN_OK;
}

TEST(updates_and_capture) {
    tn_graph *g = tn_graph_new();
    int64_t n = 3, T = 5;
    tn_array *acc0 = rnd(1, &n, -1, 1), *k0 = rnd(1, &n, -1, 1);
    tn_var *acc = tn_shared(g, "acc", acc0), *k = tn_shared(g, "k", k0);
    tn_var *U = tn_matrix(g, "U", TN_F64);
    tn_scan_seq seq = { U, 0, NULL };
    tn_scan_out out = { NULL, 0, NULL };
    tn_var *Y = NULL;
    tn_update ups[1];
    int nu = -1;
    CHECK(tn_scan(&(tn_scan_desc){ .step = upd_step, .user = k, .n_sequences = 1, .sequences = &seq, .n_outputs = 1,
                                   .outputs = &out, .n_non_sequences = 1, .non_sequences = &acc }, &Y, ups, &nu) == TN_OK,
          "%s", tn_last_error());
    CHECK(nu == 1 && ups[0].shared == acc, "one update of acc, got %d", nu);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &U, .n_outputs = 1, .outputs = &Y,
                                                 .n_updates = nu, .updates = ups });
    CHECK(f, "%s", tn_last_error());
    tn_array *u = rnd(2, (int64_t[]){T, n}, -1, 1), *res = NULL;
    double *uv = vals(u), *a = vals(acc0), *kv = vals(k0), ref[15];
    for (int call = 0; f && call < 2; call++) {
        CHECK(tn_call(f, &u, &res) == TN_OK, "%s", tn_last_error());
        for (int64_t t = 0; t < T; t++)
            for (int i = 0; i < n; i++) { ref[t * n + i] = uv[t * n + i] * kv[i] + a[i]; a[i] += uv[t * n + i]; }
        double *got = vals(res), *nacc = vals(tn_shared_get(acc));
        CHECK(max_abs_diff(got, ref, (size_t)(T * n)) < 1e-14, "outputs (call %d)", call);
        CHECK(max_abs_diff(nacc, a, (size_t)n) < 1e-14, "the update carried acc (call %d)", call);
        free(got); free(nacc);
        tn_array_free(res); res = NULL;
    }
    /* the gradient needs every state: updates are refused by name */
    tn_var *gk = tn_grad1(tn_sum(Y, NULL, 0, false), k);
    CHECK(!gk, "gradient through updates");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "updates shared variable 'acc'");
    CHECK(strstr(tn_last_error(), "scan 'scan'") && strstr(tn_last_error(), "outputs_info"), "names the scan and a way out: %s",
          tn_last_error());
    free(uv); free(a); free(kv);
    tn_array_free(u); tn_array_free(acc0); tn_array_free(k0);
    tn_function_free(f);
    graph_free(g);
}

static tn_result hoist_step(tn_scan_step *s, void *user) {   /* h(t) = tanh((W W^T) h(t-1) + x(t)) */
    (void)user;
    tn_var *W = s->non_seq[0];
    tn_var *WW = tn_var_set_name(tn_dot(W, tn_transpose(W, NULL)), "WWt");
    s->outputs[0] = tn_tanh(tn_add(tn_dot(WW, s->out[0][0]), s->seq[0][0]));
    return TN_OK;
}

TEST(hoist_invariant) {
    tn_graph *g = tn_graph_new();
    tn_var *W = tn_matrix(g, "W", TN_F64), *X = tn_matrix(g, "X", TN_F64), *h0 = tn_vector(g, "h0", TN_F64);
    tn_scan_seq seq = { X, 0, NULL };
    tn_scan_out out = { h0, 0, NULL };
    tn_var *H = NULL;
    CHECK(tn_scan(&(tn_scan_desc){ .step = hoist_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 1,
                                   .outputs = &out, .n_non_sequences = 1, .non_sequences = &W, .name = "hoist" }, &H, NULL, NULL) == TN_OK,
          "%s", tn_last_error());
    /* H = slice(Scan): the scan got W W^T as an extra non_sequence, computed outside */
    tn_var *scan = H ? H->in[0] : NULL;
    CHECK(scan && scan->op == TN_OP_SCAN && scan->n_in == 4, "scan inputs: %d", scan ? scan->n_in : -1);
    if (scan && scan->n_in == 4) CHECK(scan->in[3]->op == TN_OP_DOT, "the hoisted input is the product W W^T");
    tn_var *ins[3] = { W, X, h0 };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 1, .outputs = &H });
    int64_t n = 3, T = 4;
    tn_array *a[3] = { rnd(2, (int64_t[]){n, n}, -0.6, 0.6), rnd(2, (int64_t[]){T, n}, -1, 1), rnd(1, &n, -1, 1) };
    tn_array *res = NULL;
    CHECK(f && tn_call(f, a, &res) == TN_OK, "%s", tn_last_error());
    if (res) {
        double *w = vals(a[0]), *x = vals(a[1]), *h = vals(a[2]), *got = vals(res), M[9], ref[12];
        for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) { double s = 0; for (int q = 0; q < n; q++) s += w[i * n + q] * w[j * n + q]; M[i * n + j] = s; }
        for (int t = 0; t < T; t++) {
            matvec(M, t ? ref + (t - 1) * n : h, ref + t * n, (int)n, (int)n);
            for (int i = 0; i < n; i++) ref[t * n + i] = tanh(ref[t * n + i] + x[t * n + i]);
        }
        CHECK(max_abs_diff(got, ref, (size_t)(T * n)) < 1e-13, "hoisted scan differs by %g", max_abs_diff(got, ref, (size_t)(T * n)));
        free(w); free(x); free(h); free(got);
    }
    tn_array_free(res); for (int i = 0; i < 3; i++) tn_array_free(a[i]);
    tn_function_free(f);
    graph_free(g);
}

static tn_var *b_hoist(tn_graph *g, tn_var *const *in, void *user) {
    (void)g; (void)user;
    tn_scan_seq seq = { in[1], 0, NULL };
    tn_scan_out out = { in[2], 0, NULL };
    tn_var *H = NULL;
    return tn_scan(&(tn_scan_desc){ .step = hoist_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 1, .outputs = &out,
                                    .n_non_sequences = 1, .non_sequences = &in[0] }, &H, NULL, NULL) == TN_OK ? H : NULL;
}

TEST(verify_grad_hoisted) {
    int64_t n = 3, T = 4;
    tn_array *pts[3] = { rnd(2, (int64_t[]){n, n}, -0.6, 0.6), rnd(2, (int64_t[]){T, n}, -1, 1), rnd(1, &n, -1, 1) };
    tn_verify_grad_report rep;
    tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_hoist, .n_inputs = 3, .points = pts, .seed = next_seed() }, &rep);
    CHECK(r == TN_OK, "%s", tn_last_error());
    for (int i = 0; i < 3; i++) tn_array_free(pts[i]);
}

/* >>the seed's warning case: scan(lambda x: dot(W, x), sequences=X) is one product */

static tn_result dot_step(tn_scan_step *s, void *user) {
    (void)user;
    s->outputs[0] = tn_dot(s->non_seq[0], s->seq[0][0]);
    return TN_OK;
}

static tn_result dot_step_right(tn_scan_step *s, void *user) {   /* dot(x, W) */
    (void)user;
    s->outputs[0] = tn_dot(s->seq[0][0], s->non_seq[0]);
    return TN_OK;
}

/* One case: the scan is built as a SCAN node; compiling rewrites it into one
   product (rule scan_dot_to_gemm), equal to the loop computed here. */
static void check_dot_scan(bool right, bool backwards, int64_t n_steps) {
    tn_graph *g = tn_graph_new();
    int64_t L = 7, m = 4, k = 3, T = n_steps >= 0 ? n_steps : L;
    tn_var *W = tn_matrix(g, "W", TN_F64), *X = tn_matrix(g, "X", TN_F64);
    tn_scan_seq seq = { X, 0, NULL };
    tn_var *Y = NULL;
    tn_scan_out out = { NULL, 0, NULL };
    CHECK(tn_scan(&(tn_scan_desc){ .step = right ? dot_step_right : dot_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 1,
                                   .outputs = &out, .n_non_sequences = 1, .non_sequences = &W, .go_backwards = backwards,
                                   .has_n_steps = n_steps >= 0, .n_steps = n_steps }, &Y, NULL, NULL) == TN_OK, "%s", tn_last_error());
    CHECK(Y && Y->op == TN_OP_SCAN, "built as a scan: op %d", Y ? Y->op : -1);
    tn_var *ins[2] = { W, X };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 1, .outputs = &Y });
    CHECK(f != NULL, "%s", tn_last_error());
    CHECK(tn__rewrite_count("scan_dot_to_gemm") == 1, "rule fired %d times", tn__rewrite_count("scan_dot_to_gemm"));
    FILE *tmp = tmpfile();
    if (f && tmp) {
        tn_debugprint_function(f, tmp);
        rewind(tmp);
        char buf[4096];
        size_t n = fread(buf, 1, sizeof buf - 1, tmp);
        buf[n] = 0;
        CHECK(!strstr(buf, "Scan") && (strstr(buf, "Dot") || strstr(buf, "Gemm")), "one product, no scan:\n%s", buf);
    }
    if (tmp) fclose(tmp);
    tn_array *a[2] = { rnd(2, right ? (int64_t[]){k, m} : (int64_t[]){m, k}, -1, 1), rnd(2, (int64_t[]){L, k}, -1, 1) }, *res = NULL;
    CHECK(f && tn_call(f, a, &res) == TN_OK, "%s", tn_last_error());
    if (res) {
        double *w = vals(a[0]), *x = vals(a[1]), *got = vals(res), ref[64];
        for (int64_t t = 0; t < T; t++) {
            const double *row = x + (backwards ? L - 1 - t : t) * k;
            for (int64_t i = 0; i < m; i++) {
                double acc = 0;
                for (int64_t j = 0; j < k; j++) acc += (right ? w[j * m + i] : w[i * k + j]) * row[j];
                ref[t * m + i] = acc;
            }
        }
        CHECK(res->shape[0] == T && res->shape[1] == m && max_abs_diff(got, ref, (size_t)(T * m)) < 1e-14,
              "product differs from the loop (right %d, backwards %d, n_steps %lld)", right, backwards, (long long)n_steps);
        free(w); free(x); free(got);
    }
    tn_array_free(res); tn_array_free(a[0]); tn_array_free(a[1]);
    tn_function_free(f);
    graph_free(g);
}

TEST(dot_becomes_one_product) {
    check_dot_scan(false, false, -1);
    check_dot_scan(true, false, -1);
    check_dot_scan(false, true, -1);
    check_dot_scan(false, false, 5);
    check_dot_scan(true, true, 3);
    /* not the case: the step adds a bias, so the loop stays */
    tn_graph *g = tn_graph_new();
    tn_var *W = tn_matrix(g, "W", TN_F64), *X = tn_matrix(g, "X", TN_F64), *h0 = tn_vector(g, "h0", TN_F64);
    tn_var *H = rnn(W, X, h0, NULL), *ins[3] = { W, X, h0 };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 1, .outputs = &H });
    CHECK(f && tn__rewrite_count("scan_dot_to_gemm") == 0, "the rule fired on a real loop");
    tn_function_free(f);
    graph_free(g);
}

/* >>debugprint */

static char *read_all(FILE *f) {
    static char buf[16384];
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    return buf;
}

static int count_str(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

TEST(debugprint_inner) {
    tn_graph *g = tn_graph_new();
    tn_var *W = tn_matrix(g, "W", TN_F64), *X = tn_matrix(g, "X", TN_F64), *h0 = tn_vector(g, "h0", TN_F64);
    tn_var *H = rnn(W, X, h0, NULL);
    /* the graph as built: tn_debugprint itself shows the step under the main graph */
    FILE *tmp = tmpfile();
    CHECK(tmp && tn_debugprint(H, tmp) == TN_OK, "%s", tn_last_error());
    if (tmp) {
        const char *buf = read_all(tmp);
        const char *inner = strstr(buf, "\nInner graphs of the scan ops:\n");
        CHECK(inner != NULL, "no inner-graph section:\n%s", buf);
        CHECK(count_str(buf, "Scan{rnn} [id B]") == 2, "the scan's line twice, same id:\n%s", buf);
        CHECK(inner && strstr(inner, "\n >Elemwise{tanh") && strstr(inner, "\n >   |Dot [id") &&
              strstr(inner, "\n >   | |h0[t-1]") && strstr(inner, "\n >   |X[t]"), "inner graph indented under ' >':\n%s", buf);
        CHECK(!strstr(buf, "tanh") || strstr(buf, "tanh") > inner, "the step's ops only in the inner section:\n%s", buf);
        fclose(tmp);
    }
    /* tn_scan_debugprint is the same print */
    tmp = tmpfile();
    CHECK(tmp && tn_scan_debugprint(H, tmp) == TN_OK, "%s", tn_last_error());
    if (tmp) { CHECK(strstr(read_all(tmp), "Inner graphs of the scan ops:") != NULL, "tn_scan_debugprint"); fclose(tmp); }
    /* a compiled function shows the compiled step, with its own step numbers */
    tn_var *ins[3] = { W, X, h0 };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins, .n_outputs = 1, .outputs = &H });
    CHECK(f != NULL, "%s", tn_last_error());
    tmp = tmpfile();
    if (f && tmp) {
        CHECK(tn_debugprint_function(f, tmp) == TN_OK, "%s", tn_last_error());
        const char *buf = read_all(tmp);
        const char *inner = strstr(buf, "\nInner graphs of the scan ops:\n");
        CHECK(inner && strstr(inner, "Scan{rnn} [id B]"), "scan line in the section:\n%s", buf);
        CHECK(inner && strstr(inner, "\n >Gemv{no_inplace,epilogue=Composite{tanh(") && strstr(inner, "   0\n"),
              "compiled step (a Gemv with tanh as its epilogue, step numbers):\n%s", buf);
    }
    if (tmp) fclose(tmp);
    tn_function_free(f);
    graph_free(g);
}

/* >>errors */

static tn_result bad_step(tn_scan_step *s, void *user) {
    (void)s; (void)user;
    return tn__err(TN_ERR_INVALID, "my step refuses");
}
static tn_result cast_step(tn_scan_step *s, void *user) {
    (void)user;
    s->outputs[0] = tn_cast(s->out[0][0], TN_F32);
    return TN_OK;
}
static tn_result id_step(tn_scan_step *s, void *user) {
    (void)user;
    s->outputs[0] = tn_neg(s->seq[0][0]);
    return TN_OK;
}
static tn_result two_seq_step(tn_scan_step *s, void *user) {
    (void)user;
    s->outputs[0] = tn_add(s->seq[0][0], s->seq[1][0]);
    return TN_OK;
}

static tn_result fib_step(tn_scan_step *s, void *u) {
    (void)u;
    s->outputs[0] = tn_add(s->out[0][0], s->out[0][1]);
    return TN_OK;
}

/* What a scan's step is called with: tn__call_into writes an output
   straight into the array given for it where its step can (a fused
   elementwise output, a sum), and leaves it alone where it cannot (an
   output that is the input itself) or where the array does not fit this
   call (another shape); the values are right either way. */
TEST(call_into_destinations) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *outs[3] = { tn_mul(tn_exp(x), tn_scalar_const(g, 2.0)), x, tn_sum(x, NULL, 0, false) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 3, .outputs = outs, .borrow = true });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    int64_t n = 37;
    tn_array *xv = tn_array_rand_uniform(TN_F64, 1, &n, -3, 3, 77);
    tn_array *d[3] = { tn_array_full(TN_F64, 1, &n, -7), tn_array_full(TN_F64, 1, &n, -7), tn_array_full(TN_F64, 0, NULL, -7) };
    tn_array *small = tn_array_full(TN_F64, 1, (int64_t[]){ n - 1 }, -7);
    const double *xs = (const double *)xv->data;
    long double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += xs[i];
    for (int pass = 0; f && pass < 2; pass++) {        /* pass 1: output 0's array has the wrong shape */
        tn_array *dd[3] = { pass ? small : d[0], d[1], d[2] }, *r[3] = { NULL, NULL, NULL };
        CHECK(tn__call_into(f, &xv, r, dd) == TN_OK, "call: %s", tn_last_error());
        if (!r[0]) break;
        CHECK((r[0]->data == dd[0]->data) == (pass == 0), "pass %d: output 0 %s its array", pass, pass ? "written into" : "not written into");
        CHECK(r[1]->data != d[1]->data && ((const double *)d[1]->data)[3] == -7, "output 1 (the input) left its array alone");
        CHECK(r[2]->data == d[2]->data, "the sum written into its array");
        double e = 0;
        for (int64_t i = 0; i < n; i++) {
            e = fmax(e, fabs(((const double *)r[0]->data)[i] - 2 * (expm1(xs[i]) + 1)) / (2 * exp(xs[i])));
            CHECK(((const double *)r[1]->data)[i] == xs[i], "output 1 at %lld", (long long)i);
        }
        CHECK(e < 1e-15, "pass %d: 2 exp(x) off by %g", pass, e);
        CHECK(fabs(*(const double *)r[2]->data - (double)sum) < 1e-13, "sum %.17g vs %.17g", *(const double *)r[2]->data, (double)sum);
        CHECK(((const double *)small->data)[0] == -7, "the array of the wrong shape is left alone");
    }
    for (int i = 0; i < 3; i++) tn_array_free(d[i]);
    tn_array_free(small);
    tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

TEST(errors) {
    tn_graph *g = tn_graph_new();
    tn_var *u = tn_input(g, "u", TN_F64, 2, (int64_t[]){10, 3}, NULL), *v = tn_input(g, "v", TN_F64, 2, (int64_t[]){8, 3}, NULL);
    tn_var *y = NULL;
    tn_scan_seq seqs[2] = { { u, 0, NULL }, { v, 0, NULL } };
    tn_scan_out none = { NULL, 0, NULL };
    /* lengths known at build time */
    CHECK(tn_scan(&(tn_scan_desc){ .step = two_seq_step, .n_sequences = 2, .sequences = seqs, .n_outputs = 1, .outputs = &none },
                  &y, NULL, NULL) == TN_ERR_SHAPE, "mismatched lengths");
    CHECK_ERR(TN_ERR_SHAPE, "different lengths");
    CHECK(strstr(tn_last_error(), "'v'") && strstr(tn_last_error(), "'u'") && strstr(tn_last_error(), "8 rows"), "names both: %s", tn_last_error());
    /* lengths known at call time only */
    tn_var *p = tn_matrix(g, "p", TN_F64), *q = tn_matrix(g, "q", TN_F64);
    tn_scan_seq seqs2[2] = { { p, 0, NULL }, { q, 0, NULL } };
    CHECK(tn_scan(&(tn_scan_desc){ .step = two_seq_step, .n_sequences = 2, .sequences = seqs2, .n_outputs = 1, .outputs = &none },
                  &y, NULL, NULL) == TN_OK, "%s", tn_last_error());
    tn_var *ins[2] = { p, q };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 1, .outputs = &y });
    tn_array *a[2] = { rnd(2, (int64_t[]){6, 2}, -1, 1), rnd(2, (int64_t[]){7, 2}, -1, 1) }, *res = NULL;
    CHECK(f && tn_call(f, a, &res) == TN_ERR_SHAPE, "call-time mismatch");
    CHECK_ERR(TN_ERR_SHAPE, "different lengths");
    CHECK(strstr(tn_last_error(), "7 rows") || strstr(tn_last_error(), "6 rows"), "rows named: %s", tn_last_error());
    tn_array_free(a[0]); tn_array_free(a[1]); tn_function_free(f);
    /* n_steps longer than a sequence */
    CHECK(tn_scan(&(tn_scan_desc){ .step = id_step, .n_sequences = 1, .sequences = seqs, .n_outputs = 1, .outputs = &none,
                                   .has_n_steps = true, .n_steps = 11 }, &y, NULL, NULL) == TN_ERR_SHAPE, "n_steps too long");
    CHECK_ERR(TN_ERR_SHAPE, "n_steps is 11");
    /* output taps must look back */
    tn_var *x0 = tn_vector(g, "x0", TN_F64);
    tn_scan_out bad = { x0, 1, (const int[]){ 0 } };
    CHECK(tn_scan(&(tn_scan_desc){ .step = cast_step, .n_sequences = 1, .sequences = seqs, .n_outputs = 1, .outputs = &bad },
                  &y, NULL, NULL) == TN_ERR_INVALID, "tap 0");
    CHECK_ERR(TN_ERR_INVALID, "tap 0 is not negative");
    /* the step's output type must match its state */
    tn_scan_out st = { x0, 0, NULL };
    CHECK(tn_scan(&(tn_scan_desc){ .step = cast_step, .n_sequences = 1, .sequences = seqs, .n_outputs = 1, .outputs = &st,
                                   .name = "casty" }, &y, NULL, NULL) == TN_ERR_DTYPE, "dtype mismatch");
    CHECK_ERR(TN_ERR_DTYPE, "casty");
    /* the callback's own error comes through */
    CHECK(tn_scan(&(tn_scan_desc){ .step = bad_step, .n_sequences = 1, .sequences = seqs, .n_outputs = 1, .outputs = &st },
                  &y, NULL, NULL) == TN_ERR_INVALID, "callback error");
    CHECK_ERR(TN_ERR_INVALID, "my step refuses");
    /* more steps and initial rows than a dim holds */
    tn_var *x2 = tn_input(g, "x2", TN_F64, 2, (int64_t[]){ 2, 3 }, NULL);
    tn_scan_out two = { x2, 2, (const int[]){ -2, -1 } };
    for (int k = 0; k < 2; k++) {
        int64_t n = k ? INT64_MAX : 1000;
        tn_result r = tn_scan(&(tn_scan_desc){ .step = fib_step, .n_outputs = 1, .outputs = &two, .has_n_steps = true, .n_steps = n,
                                               .name = "fib" }, &y, NULL, NULL);
        if (k) {
            CHECK(r == TN_ERR_SHAPE, "INT64_MAX steps");
            CHECK_ERR(TN_ERR_SHAPE, "tn_scan 'fib': 9223372036854775807 steps after 2 initial rows");
        } else CHECK(r == TN_OK && y->type.shape[0] == 1000, "1000 steps: %s", tn_last_error());
    }
    /* no sequences and no n_steps */
    CHECK(tn_scan(&(tn_scan_desc){ .step = cast_step, .n_outputs = 1, .outputs = &st }, &y, NULL, NULL) == TN_ERR_INVALID, "no steps");
    CHECK_ERR(TN_ERR_INVALID, "n_steps");
    graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(seed_recurrence);
    TH_RUN(verify_grad_rnn);
    TH_RUN(verify_grad_seed);
    TH_RUN(truncate_gradient);
    TH_RUN(go_backwards);
    TH_RUN(n_steps_0_1);
    TH_RUN(updates_and_capture);
    TH_RUN(hoist_invariant);
    TH_RUN(verify_grad_hoisted);
    TH_RUN(dot_becomes_one_product);
    TH_RUN(debugprint_inner);
    TH_RUN(call_into_destinations);
    TH_RUN(errors);
    TH_END();
}
