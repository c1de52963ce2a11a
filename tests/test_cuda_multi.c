#define _POSIX_C_SOURCE 200809L
/* On GPUs: several contexts and devices. With one GPU, two contexts on it
   ("da" and "db" both cuda0) and NCCL with one rank go through every path;
   with two or more, "db" is the last GPU: peer copies both ways (strided
   views, peer access and staged through pinned host memory), placement
   across devices, tn_nccl_allreduce over every GPU, and the replicated
   logistic regression (N=400, 784 features, 3 steps) equal to the one-GPU
   run and to a float64 reference. Every value is checked against a host
   reference. Without a usable GPU: "SKIP (no usable GPU: why)". */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"
#include "print_text.h"
#include "multi_logreg.h"

static int ngpu;


/* y = (exp(A) + x) * T(move(T(tanh(B)) to da)), z = move(exp(A)[::2] to db) * B[::2]:
   a strided view crosses each way. */
static void run_two_contexts(bool staged) {
    tn__cuda_peer_force_staged = staged;
    tn_graph *g = tn_graph_new();
    int64_t sh[2] = { 64, 48 };
    tn_array *av = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 31), *bv = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 32);
    tn_var *A = tn_var_set_context(tn_shared(g, "A", av), "da");
    tn_var *B = tn_var_set_context(tn_shared(g, "B", bv), "db");
    tn_var *x = tn_matrix(g, "x", TN_F32);
    tn_var *eA = tn_exp(A);
    tn_var *y = tn_mul(tn_add(eA, x), tn_transpose(tn_gpu_from_host_ctx(tn_transpose(tn_tanh(B), NULL), "da"), NULL));
    tn_var *z = tn_mul(tn_gpu_from_host_ctx(tn_slice(eA, 0, 0, 64, 2), "db"), tn_slice(B, 0, 0, 64, 2));
    tn_var *outs[2] = { y, z };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = outs });
    CHECK(f != NULL, "%s", tn_last_error());
    if (f) {
        char *s = print_fn(f);
        CHECK(s && strstr(s, "GpuToGpu<da>") && strstr(s, "GpuToGpu<db>"), "debugprint:\n%s", s ? s : "");
        char at_db[16];       /* db is the last GPU */
        snprintf(at_db, sizeof at_db, "@cuda%d", tn_context_device(tn_context_get("db")));
        if (ngpu >= 2) CHECK(s && strstr(s, at_db) && strstr(s, "@cuda0") && strcmp(at_db, "@cuda0"), "two devices (db %s):\n%s", at_db, s ? s : "");
        free(s);
        tn_array *xv = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 33);
        for (int rep = 0; rep < 3; rep++) {    /* the stage and events are reused */
            tn_array *o[2] = { 0 };
            CHECK(tn_call(f, &xv, o) == TN_OK, "%s", tn_last_error());
            int bad = 0;
            for (int64_t i = 0; o[0] && o[1] && i < 64 * 48; i++) {
                int64_t ix[2] = { i / 48, i % 48 };
                double a = tn_array_get(av, ix), b = tn_array_get(bv, ix);
                bad += !th_close(tn_array_get(o[0], ix), (exp(a) + tn_array_get(xv, ix)) * tanh(b), 1e-5, 1e-6);
                if (ix[0] % 2 == 0) {
                    int64_t iz[2] = { ix[0] / 2, ix[1] };
                    bad += !th_close(tn_array_get(o[1], iz), exp(a) * b, 1e-5, 1e-6);
                }
            }
            CHECK(o[0] && o[1] && bad == 0, "%s, call %d: %d values differ", staged ? "staged" : "peer", rep, bad);
            tn_array_free(o[0]); tn_array_free(o[1]);
        }
        tn_array_free(xv);
    }
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(av); tn_array_free(bv);
    tn__cuda_peer_force_staged = 0;
}

TEST(test_transfers_between_contexts_peer) { run_two_contexts(false); }
TEST(test_transfers_between_contexts_staged) { run_two_contexts(true); }

TEST(test_placement_across_devices) {
    if (ngpu < 2) { TH_SKIP("one GPU"); return; }
    tn_graph *g = tn_graph_new();
    int64_t n = 1000;
    tn_array *av = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 41), *bv = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 42);
    tn_var *A = tn_var_set_context(tn_shared(g, "A", av), "cuda0");
    tn_var *B = tn_var_set_context(tn_shared(g, "B", bv), "cuda1");
    tn_var *s = tn_sum(tn_mul(tn_gpu_from_host_ctx(tn_exp(A), "cuda1"), B), NULL, 0, false);   /* exp on 0, the rest on 1 */
    tn_update up = { B, tn_add(B, tn_lit(B, 1.0)) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &s, .n_updates = 1, .updates = &up });
    CHECK(f != NULL, "%s", tn_last_error());
    for (int rep = 0; f && rep < 2; rep++) {
        tn_array *o = NULL;
        CHECK(tn_call(f, NULL, &o) == TN_OK, "%s", tn_last_error());
        double ref = 0;
        for (int64_t i = 0; i < n; i++) ref += exp(tn_array_get(av, &i)) * (tn_array_get(bv, &i) + rep);
        CHECK(o && th_close(tn_array_get(o, NULL), ref, 1e-4, 1e-4), "call %d: %g, want %g", rep, o ? tn_array_get(o, NULL) : NAN, ref);
        tn_array_free(o);
    }
    CHECK(tn_shared_get(A)->device == 0 && tn_shared_get(B)->device == 1, "A on %d, B on %d", tn_shared_get(A)->device, tn_shared_get(B)->device);
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(av); tn_array_free(bv);
}

TEST(test_nccl_allreduce) {
    if (tn_nccl_load() != TN_OK) { TH_SKIP("%s", tn_last_error()); return; }
    printf("NCCL %d\n", tn_nccl_version());
    int n = ngpu;
    int64_t len = 3001;
    tn_array *h[8] = { 0 }, *d[8] = { 0 };
    for (int k = 0; k < n && k < 8; k++) {
        h[k] = tn_array_rand_uniform(TN_F32, 1, &len, -1, 1, 50 + (uint64_t)k);
        d[k] = tn__array_alloc(TN_F32, 1, &len, k);
        CHECK(d[k] && tn_array_assign(d[k], h[k]) == TN_OK, "%s", tn_last_error());
    }
    if (n > 8) n = 8;
    CHECK(tn_nccl_allreduce(n, d) == TN_OK, "%s", tn_last_error());
    int bad = 0;
    for (int k = 0; k < n; k++) {
        tn_array *back = tn_array_to_host(d[k]);
        for (int64_t i = 0; back && i < len; i++) {
            double ref = 0;
            for (int j = 0; j < n; j++) ref += tn_array_get(h[j], &i);
            bad += !th_close(tn_array_get(back, &i), ref, 1e-6, 1e-6);
        }
        bad += !back;
        tn_array_free(back);
    }
    CHECK(bad == 0, "%d sums over %d GPUs differ", bad, n);
    if (n >= 1) {
        tn_array *two[2] = { d[0], d[0] };
        CHECK(tn_nccl_allreduce(2, two) == TN_ERR_INVALID, "one GPU twice");
        CHECK_ERR(TN_ERR_INVALID, "ranks 0 and 1 are both on cuda0");
    }
    for (int k = 0; k < n; k++) { tn_array_free(h[k]); tn_array_free(d[k]); }
}

/* The replicated step; its final w (host, float64) in wout. */
static void replicated_logreg(int n, const char *const *ctx, tn_allreduce how, const char *want, double *wout, const double *wref, double bref) {
    enum { N = 400, F = 784, S = 3 };
    tn_array *X = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ N, F }, 0, 1, 61), *Y = tn_array_empty(TN_F32, 1, (int64_t[]){ N });
    tn_array *w0 = tn_array_rand_normal(TN_F32, 1, (int64_t[]){ F }, 0, 0.01, 63);
    for (int64_t i = 0; i < N; i++) tn_array_set(Y, &i, (i * 7919 % 13) < 6);
    mlr m;
    CHECK(mlr_build(&m, TN_F32, w0) == TN_OK, "%s", tn_last_error());
    m.rd.n_replicas = n;
    m.rd.contexts = ctx;
    m.rd.allreduce = how;
    tn_replicated *R = tn_function_replicate(m.g, &m.desc, &m.rd);
    CHECK(R != NULL, "%d replicas (%s): %s", n, want, tn_last_error());
    if (R) {
        CHECK(!strcmp(tn_replicated_allreduce(R), want), "mode %s, want %s", tn_replicated_allreduce(R), want);
        tn_array *in[2] = { X, Y };
        for (int s = 0; s < S; s++) {
            tn_array *o[2] = { 0 };
            CHECK(tn_replicated_call(R, in, o) == TN_OK, "step %d: %s", s, tn_last_error());
            tn_array_free(o[0]); tn_array_free(o[1]);
        }
        tn_array *wv = tn_shared_get_value(m.w);
        if (wv) tn_array_copy_to(wv, TN_F64, wout, F * sizeof(double));
        tn_array_free(wv);
        if (wref) {
            double e = mlr_err(tn_shared_get(m.w), wref, F), eb = mlr_err(tn_shared_get(m.b), &bref, 1);
            CHECK(e < 1e-4 && eb < 1e-4, "%d replicas (%s): w off the float64 reference by %g, b by %g", n, want, e, eb);
        }
        for (int k = 1; k < n; k++) {
            tn_array *a0 = tn_shared_get_value(m.w), *ak = tn_shared_get_value(tn_replicated_shared(R, m.w, k));
            CHECK(a0 && ak && !memcmp(a0->data, ak->data, tn_array_nbytes(a0)), "replica %d's w differs from replica 0's", k);
            tn_array_free(a0); tn_array_free(ak);
        }
    }
    tn_replicated_free(R);
    tn_graph_free(m.g);
    tn_array_free(X); tn_array_free(Y); tn_array_free(w0);
}

TEST(test_replicated_logreg) {
    enum { N = 400, F = 784 };
    /* the float64 reference on the same data */
    tn_array *X = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ N, F }, 0, 1, 61), *w0 = tn_array_rand_normal(TN_F32, 1, (int64_t[]){ F }, 0, 0.01, 63);
    double *Xd = (double *)malloc(sizeof(double) * N * F), Yd[N], w[F], b = 0, cost[3];
    tn_array_copy_to(X, TN_F64, Xd, sizeof(double) * N * F);
    tn_array_copy_to(w0, TN_F64, w, sizeof w);
    for (int64_t i = 0; i < N; i++) Yd[i] = (i * 7919 % 13) < 6;
    mlr_reference(Xd, Yd, N, F, 3, w, &b, cost, NULL);
    free(Xd); tn_array_free(X); tn_array_free(w0);
    double one[F], other[F];
    const char *c1[1] = { "cuda0" }, *same[2] = { "da", "da2" };
    replicated_logreg(1, c1, TN_ALLREDUCE_AUTO, "none", one, w, b);
    if (tn_nccl_load() == TN_OK) replicated_logreg(1, c1, TN_ALLREDUCE_NCCL, "nccl", other, w, b);   /* one rank */
    else TH_SKIP("%s", tn_last_error());
    replicated_logreg(2, same, TN_ALLREDUCE_AUTO, "host", other, w, b);     /* two contexts on cuda0 */
    if (ngpu >= 2) {
        replicated_logreg(0, NULL, TN_ALLREDUCE_AUTO, "nccl", other, w, b);   /* every GPU */
        double e = 0;
        for (int j = 0; j < F; j++) e = fmax(e, fabs(other[j] - one[j]) / (1 + fabs(one[j])));
        CHECK(e < 1e-5, "%d GPUs vs one: w differs by %g", ngpu, e);
        printf("  replicated logreg on %d GPUs: w within %.2g of the one-GPU run\n", ngpu, e);
        replicated_logreg(0, NULL, TN_ALLREDUCE_HOST, "host", other, w, b);
    }
}

/* A replica that fails mid-step (replica 0's w given a shape its rows
   cannot multiply) stops every replica before the all-reduce: the call
   fails with replica 0's error, no replica's w moves, nothing waits
   forever, and the next call with a good w runs. */
TEST(test_replicated_failure_stops_all) {
    if (ngpu < 2 || tn_nccl_load() != TN_OK) { TH_SKIP("needs 2 GPUs and NCCL"); return; }
    enum { N = 64, F = 32 };
    tn_array *X = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ N, F }, 0, 1, 81), *Y = tn_array_empty(TN_F32, 1, (int64_t[]){ N });
    tn_array *w0 = tn_array_rand_normal(TN_F32, 1, (int64_t[]){ F }, 0, 0.1, 82), *bad = tn_array_zeros(TN_F32, 1, (int64_t[]){ F + 3 });
    for (int64_t i = 0; i < N; i++) tn_array_set(Y, &i, i % 3 == 0);
    mlr m;
    CHECK(mlr_build(&m, TN_F32, w0) == TN_OK, "%s", tn_last_error());
    tn_replicated *R = tn_function_replicate(m.g, &m.desc, &m.rd);
    CHECK(R && !strcmp(tn_replicated_allreduce(R), "nccl"), "%s", R ? tn_replicated_allreduce(R) : tn_last_error());
    tn_array *in[2] = { X, Y }, *o[2] = { 0 };
    if (R) {
        CHECK(tn_replicated_call(R, in, o) == TN_OK, "the first step: %s", tn_last_error());
        tn_array_free(o[0]); tn_array_free(o[1]);
        tn_array *before = tn_shared_get_value(tn_replicated_shared(R, m.w, 1));
        CHECK(tn_shared_set_value(m.w, bad) == TN_OK, "%s", tn_last_error());
        o[0] = o[1] = NULL;
        CHECK(tn_replicated_call(R, in, o) == TN_ERR_SHAPE, "a step with replica 0's w of %d elements: %s", F + 3, tn_last_error());
        CHECK_ERR(TN_ERR_SHAPE, "replica 0 (cuda0)");
        CHECK(!o[0] && !o[1], "no outputs from a failed call");
        tn_array *after = tn_shared_get_value(tn_replicated_shared(R, m.w, 1));
        CHECK(before && after && !memcmp(before->data, after->data, tn_array_nbytes(before)), "replica 1's w moved in a failed call");
        tn_array_free(after);
        tn_array *ok = tn_shared_get_value(tn_replicated_shared(R, m.w, 1));
        CHECK(tn_shared_set_value(m.w, ok) == TN_OK, "%s", tn_last_error());   /* replica 0 back in step with the others */
        tn_array_free(ok);
        CHECK(tn_replicated_call(R, in, o) == TN_OK, "the step after: %s", tn_last_error());
        tn_array_free(o[0]); tn_array_free(o[1]);
        tn_array *a0 = tn_shared_get_value(m.w), *a1 = tn_shared_get_value(tn_replicated_shared(R, m.w, 1));
        CHECK(a0 && a1 && !memcmp(a0->data, a1->data, tn_array_nbytes(a0)), "replicas 0 and 1 differ after the step that followed");
        CHECK(before && a1 && memcmp(before->data, a1->data, tn_array_nbytes(a1)) != 0, "the step after did not move w");
        tn_array_free(a0); tn_array_free(a1); tn_array_free(before);
    }
    tn_replicated_free(R);
    tn_graph_free(m.g);
    tn_array_free(X); tn_array_free(Y); tn_array_free(w0); tn_array_free(bad);
}

/* A small convnet step (conv 3x3, relu, max pool, dense, softmax NLL with
   integer labels), replicated: the weights after three SGD steps on every
   GPU (NCCL), and on two contexts of one GPU (host sums), equal one GPU's. */
static tn_result cnn_run(int n, const char *const *ctx, tn_allreduce how, double *out, int nout) {
    tn_graph *g = tn_graph_new();
    tn_array *w1 = tn_array_rand_uniform(TN_F32, 4, (int64_t[]){ 4, 1, 3, 3 }, -0.5, 0.5, 71), *w2 = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 64, 10 }, -0.2, 0.2, 72);
    tn_var *W1 = tn_shared_fixed(g, "W1", w1), *W2 = tn_shared_fixed(g, "W2", w2);
    tn_var *x = tn_input(g, "x", TN_F32, 4, (int64_t[]){ -1, 1, 8, 8 }, NULL), *y = tn_vector(g, "y", TN_I32);
    tn_conv_opts c, p;
    memset(&c, 0, sizeof c);
    c.padding[0] = c.padding[1] = 1;
    memset(&p, 0, sizeof p);
    p.kernel[0] = p.kernel[1] = 2;
    tn_var *h = tn_flatten(tn_max_pool2d(tn_relu(tn_conv2d(x, W1, &c)), &p), 2);
    int one = 1;
    tn_var *cost = tn_neg(tn_mean(tn_sum(tn_mul(tn_one_hot(y, 10, TN_F32), tn_log_softmax(tn_dot(h, W2), 1)), &one, 1, false), NULL, 0, false));
    tn_var *wrt[2] = { W1, W2 }, *gr[2];
    tn_result r = tn_grad(cost, 2, wrt, gr, NULL);
    tn_replicated *R = NULL;
    if (r == TN_OK) {
        tn_update up[2] = { { W1, tn_sub(W1, tn_mul(tn_lit(W1, 0.1), gr[0])) }, { W2, tn_sub(W2, tn_mul(tn_lit(W2, 0.1), gr[1])) } };
        R = tn_function_replicate(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 1, .outputs = &cost,
                                                      .n_updates = 2, .updates = up },
                                  &(tn_replicate_desc){ .n_replicas = n, .contexts = ctx, .allreduce = how, .n_grads = 2, .grads = gr });
        r = R ? TN_OK : tn_last_result();
    }
    tn_array *X = tn_array_rand_uniform(TN_F32, 4, (int64_t[]){ 32, 1, 8, 8 }, 0, 1, 73), *Y = tn_array_empty(TN_I32, 1, (int64_t[]){ 32 });
    for (int64_t i = 0; i < 32; i++) tn_array_set(Y, &i, (double)(i * 7 % 10));
    for (int s = 0; r == TN_OK && s < 3; s++) {
        tn_array *o = NULL;
        r = tn_replicated_call(R, (tn_array *[]){ X, Y }, &o);
        tn_array_free(o);
    }
    if (r == TN_OK) {
        tn_array *a = tn_shared_get_value(W1), *b = tn_shared_get_value(W2);
        tn_array_copy_to(a, TN_F64, out, 36 * sizeof(double));
        tn_array_copy_to(b, TN_F64, out + 36, (size_t)(nout - 36) * sizeof(double));
        tn_array_free(a); tn_array_free(b);
    }
    tn_replicated_free(R);
    tn_graph_free(g);
    tn_array_free(w1); tn_array_free(w2); tn_array_free(X); tn_array_free(Y);
    return r;
}

TEST(test_replicated_convnet) {
    enum { NW = 36 + 640 };
    double one[NW], other[NW], w0[NW];
    const char *c1[1] = { "cuda0" }, *same[2] = { "da", "da2" };
    tn_array *a = tn_array_rand_uniform(TN_F32, 4, (int64_t[]){ 4, 1, 3, 3 }, -0.5, 0.5, 71);
    tn_array_copy_to(a, TN_F64, w0, 36 * sizeof(double));
    tn_array_free(a);
    CHECK(cnn_run(1, c1, TN_ALLREDUCE_AUTO, one, NW) == TN_OK, "one GPU: %s", tn_last_error());
    double moved = 0;
    for (int j = 0; j < 36; j++) moved = fmax(moved, fabs(one[j] - w0[j]));
    CHECK(moved > 1e-4, "the step moved the filters (%g)", moved);
    struct { int n; const char *const *ctx; tn_allreduce how; const char *what; } runs[2] = {
        { 2, same, TN_ALLREDUCE_AUTO, "two contexts on cuda0" }, { 0, NULL, TN_ALLREDUCE_AUTO, "every GPU" } };
    for (int k = 0; k < (ngpu >= 2 ? 2 : 1); k++) {
        CHECK(cnn_run(runs[k].n, runs[k].ctx, runs[k].how, other, NW) == TN_OK, "%s: %s", runs[k].what, tn_last_error());
        double e = 0;
        for (int j = 0; j < NW; j++) e = fmax(e, fabs(other[j] - one[j]) / (1e-3 + fabs(one[j])));
        CHECK(e < 1e-4, "%s vs one GPU: weights differ by %g", runs[k].what, e);
        printf("  replicated convnet step, %s: weights within %.2g of one GPU\n", runs[k].what, e);
    }
}

int main(void) {
    tn_config c = { .device = TN_DEVICE_CUDA, .floatX = TN_F32, .allow_gc = true };
    if (tn_parse_flags(getenv("TENSOR_FLAGS"), &c) != TN_OK) printf("TENSOR_FLAGS: %s\n", tn_last_error());
    c.device = TN_DEVICE_CUDA;
    c.contexts = NULL;
    tn_init(&c);
    if (tn_cuda_init() != TN_OK || !tn__get_backend()) th_skip_all("no usable GPU: %s", tn_cuda_status());
    ngpu = tn__cuda.device_count;
    char last[16];
    snprintf(last, sizeof last, "cuda%d", ngpu - 1);
    tn_context_define("da", "cuda0");
    tn_context_define("da2", "cuda0");
    tn_context_define("db", last);
    printf("%s; %d GPU%s\n", tn_cuda_status(), ngpu, ngpu == 1 ? "" : "s");
    TH_RUN(test_transfers_between_contexts_peer);
    TH_RUN(test_transfers_between_contexts_staged);
    TH_RUN(test_placement_across_devices);
    TH_RUN(test_nccl_allreduce);
    TH_RUN(test_replicated_logreg);
    TH_RUN(test_replicated_convnet);
    TH_RUN(test_replicated_failure_stops_all);
    TH_END();
}
