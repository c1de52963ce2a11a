#define _POSIX_C_SOURCE 200809L
/* Several devices without a GPU: the contexts flag and API, the context of
   each node and the error for mixed ones, transfers between contexts on the
   CPU fallback (every context runs on the CPU there), placement over two
   stand-in devices (host memory tagged cuda0 and cuda1, as
   tests/test_place_rewire.c does for one), tn_function_replicate on CPU
   replicas (gradients summed in host memory) against a float64 reference,
   and the NCCL loader's messages. tests/test_cuda_multi.c runs the same on
   GPUs. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"
#include "print_text.h"
#include "fake_table.h"
#include "multi_logreg.h"


TEST(test_contexts_flag) {
    tn_config c = { 0 };
    CHECK(tn_parse_flags("floatX=float64,contexts=dev0->cuda0;dev1->cuda1;host->cpu,profile=0", &c) == TN_OK, "%s", tn_last_error());
    CHECK(c.contexts && !strcmp(c.contexts, "dev0->cuda0;dev1->cuda1;host->cpu") && c.floatX == TN_F64, "contexts '%s'", c.contexts ? c.contexts : "(null)");
    tn_config bad = { 0 };
    CHECK(tn_parse_flags("contexts=dev0=cuda0", &bad) == TN_ERR_INVALID, "no arrow");
    CHECK_ERR(TN_ERR_INVALID, "'dev0=cuda0' is not name->target");
    CHECK(tn_parse_flags("contexts=dev0->tpu1", &bad) == TN_ERR_INVALID, "bad target");
    CHECK_ERR(TN_ERR_INVALID, "target 'tpu1' of 'dev0'");
    CHECK(tn_parse_flags("contexts=d-x->cuda0", &bad) == TN_ERR_INVALID, "bad name");
    CHECK_ERR(TN_ERR_INVALID, "context name 'd-x'");
    CHECK(tn_parse_flags("contexts=dev0->cuda640", &bad) == TN_ERR_INVALID, "ordinal too large");
    CHECK(!bad.contexts, "a bad value leaves the config alone");
    /* tn_init defines them; indices stay valid */
    c.device = TN_DEVICE_CPU;
    c.floatX = TN_F32;
    CHECK(tn_init(&c) == TN_OK, "%s", tn_last_error());
    int d0 = tn_context_get("dev0"), d1 = tn_context_get("dev1"), h = tn_context_get("host");
    CHECK(d0 >= 0 && d1 >= 0 && h >= 0 && d0 != d1, "indices %d %d %d", d0, d1, h);
    CHECK(tn_context_device(d0) == 0 && tn_context_device(d1) == 1 && tn_context_device(h) == TN_HOST, "devices %d %d %d",
          tn_context_device(d0), tn_context_device(d1), tn_context_device(h));
    CHECK(!strcmp(tn_context_name(d1), "dev1"), "name %s", tn_context_name(d1));
    CHECK(tn_context_name(-1) == NULL && tn_context_name(999) == NULL && tn_context_device(999) == TN_HOST, "bad index");
}

TEST(test_context_api) {
    int n0 = tn_context_count();
    int c3 = tn_context_get("cuda3");     /* a device name is its own context */
    CHECK(c3 >= 0 && tn_context_device(c3) == 3 && tn_context_count() == n0 + 1, "cuda3 -> %d (device %d)", c3, tn_context_device(c3));
    CHECK(tn_context_get("cuda3") == c3 && tn_context_count() == n0 + 1, "found again, not added");
    CHECK(tn_context_get("nope") == -1, "unknown");
    CHECK_ERR(TN_ERR_INVALID, "no context named 'nope'");
    CHECK(strstr(tn_last_error(), "dev1") != NULL, "the message lists the known ones: %s", tn_last_error());
    CHECK(tn_context_define("spare", "cuda") == TN_OK && tn_context_device(tn_context_get("spare")) == 0, "cuda is cuda0");
    CHECK(tn_context_define("spare", "cpu") == TN_OK && tn_context_device(tn_context_get("spare")) == TN_HOST, "remapped");
    CHECK(tn_context_define("bad name", "cuda0") == TN_ERR_INVALID, "space");
    CHECK_ERR(TN_ERR_INVALID, "tn_context_define: context name 'bad name'");
    CHECK(tn_context_define("x", "vulkan0") == TN_ERR_INVALID, "target");
    CHECK_ERR(TN_ERR_INVALID, "target 'vulkan0' of 'x'");
    CHECK(tn_context_define(NULL, "cpu") == TN_ERR_NULL, "NULL name");
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    CHECK(tn_var_set_context(x, "dev1") == x && !strcmp(tn_var_context(x), "dev1"), "input on dev1");
    CHECK(tn_var_set_context(x, "nope") == NULL, "unknown context");
    CHECK_ERR(TN_ERR_INVALID, "tn_var_set_context: no context named 'nope'");
    tn_var *e = tn_exp(x);
    CHECK(e && tn_var_context(e) && !strcmp(tn_var_context(e), "dev1"), "an op takes its input's context");
    CHECK(tn_var_set_context(e, "dev0") == NULL, "an op");
    CHECK_ERR(TN_ERR_INVALID, "not an input or a shared variable");
    CHECK(tn_var_set_context(x, NULL) == x && tn_var_context(x) == NULL, "cleared");
    tn_graph_free(g);
}

TEST(test_mixed_contexts_error) {
    tn_graph *g = tn_graph_new();
    tn_array *wv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 3, 4 }, -1, 1, 1);
    tn_var *W = tn_var_set_context(tn_shared(g, "W", wv), "dev0");
    tn_var *x = tn_var_set_context(tn_matrix(g, "x", TN_F32), "dev1");
    tn_var *c = tn_scalar_const(g, 2.0);
    CHECK(tn_dot(x, W) == NULL, "x on dev1, W on dev0");
    CHECK_ERR(TN_ERR_DEVICE, "tn_dot: input 0 ('x') is on context 'dev1' (cuda1) but input 1 ('W') is on context 'dev0' (cuda0)");
    tn_var *xw = tn_dot(tn_gpu_from_host_ctx(x, "dev0"), tn_mul(W, c));
    CHECK(xw && !strcmp(tn_var_context(xw), "dev0"), "moved to dev0: %s", tn_last_error());
    CHECK(tn_gpu_from_host_ctx(x, "nope") == NULL, "unknown target");
    CHECK_ERR(TN_ERR_INVALID, "tn_gpu_from_host_ctx: no context named 'nope'");
    CHECK(tn_gpu_from_host_ctx(NULL, "dev0") == NULL, "NULL x");
    CHECK_ERR(TN_ERR_NULL, "tn_gpu_from_host_ctx");
    /* a context-free input follows the other */
    tn_var *z = tn_matrix(g, "z", TN_F32);
    tn_var *s = tn_add(z, x);
    CHECK(s && !strcmp(tn_var_context(s), "dev1"), "z + x on dev1");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    tn_debugprint(xw, m);
    fclose(m);
    CHECK(buf && strstr(buf, "GpuFromHost<dev0>") && strstr(buf, "ctx=dev1") && strstr(buf, "ctx=dev0"), "debugprint:\n%s", buf);
    free(buf);
    tn_graph_free(g);
    tn_array_free(wv);
}

/* On the CPU every context runs on the host: values as without contexts. */
TEST(test_cpu_fallback_values) {
    tn_graph *g = tn_graph_new();
    int64_t sh[2] = { 5, 3 };
    tn_array *av = tn_array_rand_uniform(TN_F32, 2, sh, -2, 2, 7), *bv = tn_array_rand_uniform(TN_F32, 2, sh, -2, 2, 8);
    tn_var *A = tn_var_set_context(tn_shared(g, "A", av), "dev0");
    tn_var *B = tn_var_set_context(tn_shared(g, "B", bv), "dev1");
    tn_var *t = tn_tanh(B);                                   /* on dev1 */
    tn_var *y = tn_mul(tn_exp(A), tn_gpu_from_host_ctx(t, "dev0"));   /* on dev0 */
    tn_var *gB = tn_grad1(tn_sum(y, NULL, 0, false), B);
    CHECK(gB && tn_var_context(gB) && !strcmp(tn_var_context(gB), "dev1"), "the gradient comes back to B's context: %s",
          gB ? (tn_var_context(gB) ? tn_var_context(gB) : "none") : tn_last_error());
    tn_var *outs[2] = { y, gB };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 2, .outputs = outs });
    CHECK(f != NULL, "%s", tn_last_error());
    tn_array *o[2] = { 0 };
    if (f) CHECK(tn_call(f, NULL, o) == TN_OK, "%s", tn_last_error());
    int bad = 0;
    for (int i = 0; o[0] && o[1] && i < 15; i++) {
        double a = tn_array_get(av, (int64_t[]){ i / 3, i % 3 }), b = tn_array_get(bv, (int64_t[]){ i / 3, i % 3 });
        double ry = exp(a) * tanh(b), rg = exp(a) * (1 - tanh(b) * tanh(b));
        bad += !th_close(tn_array_get(o[0], (int64_t[]){ i / 3, i % 3 }), ry, 1e-5, 1e-6);
        bad += !th_close(tn_array_get(o[1], (int64_t[]){ i / 3, i % 3 }), rg, 1e-5, 1e-6);
    }
    CHECK(o[0] && o[1] && bad == 0, "%d values differ from exp(a) tanh(b) and its gradient", bad);
    tn_array_free(o[0]); tn_array_free(o[1]);
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(av); tn_array_free(bv);
}

/* ---- tn_function_replicate on CPU replicas ---- */

enum { LN = 400, LF = 784, LSTEPS = 3 };

typedef struct lr_data { tn_array *X, *Y, *w0; double *Xd, *Yd; } lr_data;

static void lr_data_make(lr_data *d, tn_dtype t) {
    d->X = tn_array_rand_normal(t, 2, (int64_t[]){ LN, LF }, 0, 1, 11);
    tn_array *u = tn_array_rand_uniform(TN_F64, 1, (int64_t[]){ LN }, 0, 1, 12);
    d->Y = tn_array_empty(t, 1, (int64_t[]){ LN });
    for (int64_t i = 0; i < LN; i++) tn_array_set(d->Y, &i, tn_array_get(u, &i) > 0.5);
    tn_array_free(u);
    d->w0 = tn_array_rand_normal(t, 1, (int64_t[]){ LF }, 0, 0.01, 13);
    d->Xd = (double *)malloc(sizeof(double) * LN * LF);
    d->Yd = (double *)malloc(sizeof(double) * LN);
    tn_array_copy_to(d->X, TN_F64, d->Xd, sizeof(double) * LN * LF);
    tn_array_copy_to(d->Y, TN_F64, d->Yd, sizeof(double) * LN);
}

static void lr_data_free(lr_data *d) {
    tn_array_free(d->X); tn_array_free(d->Y); tn_array_free(d->w0);
    free(d->Xd); free(d->Yd);
}

/* n replicas, LSTEPS steps: weights, costs and predictions against the reference. */
static void check_replicated_logreg(tn_dtype t, int n, tn_allreduce how, const char *want_mode, double tol) {
    lr_data D;
    lr_data_make(&D, t);
    mlr m;
    CHECK(mlr_build(&m, t, D.w0) == TN_OK, "%s", tn_last_error());
    m.rd.n_replicas = n;
    m.rd.allreduce = how;
    tn_replicated *R = tn_function_replicate(m.g, &m.desc, &m.rd);
    CHECK(R != NULL, "n=%d: %s", n, tn_last_error());
    if (!R) { tn_graph_free(m.g); lr_data_free(&D); return; }
    CHECK(tn_replicated_count(R) == n && !strcmp(tn_replicated_allreduce(R), want_mode), "%d replicas, mode %s", tn_replicated_count(R),
          tn_replicated_allreduce(R));
    double w[LF], b = 0, cost[LSTEPS], pred[LN];
    tn_array_copy_to(D.w0, TN_F64, w, sizeof w);
    mlr_reference(D.Xd, D.Yd, LN, LF, LSTEPS, w, &b, cost, pred);
    tn_array *in[2] = { D.X, D.Y }, *out[2] = { 0 };
    double worst_cost = 0;
    for (int s = 0; s < LSTEPS; s++) {
        tn_result r = tn_replicated_call(R, in, out);
        CHECK(r == TN_OK, "step %d: %s", s, tn_last_error());
        if (r != TN_OK) break;
        double e = out[1] ? fabs(tn_array_get(out[1], NULL) - cost[s]) / (1 + fabs(cost[s])) : INFINITY;
        if (!(e <= worst_cost)) worst_cost = e;
        if (s < LSTEPS - 1) { tn_array_free(out[0]); tn_array_free(out[1]); out[0] = out[1] = NULL; }
    }
    CHECK(worst_cost <= tol, "n=%d: cost off by %g", n, worst_cost);
    CHECK(out[0] && out[0]->ndim == 1 && out[0]->shape[0] == LN, "pred: the whole batch's rows");
    int wrong = 0;
    for (int64_t i = 0; out[0] && i < LN; i++) wrong += tn_array_get(out[0], &i) != pred[i];
    CHECK(wrong <= 1, "n=%d: %d predictions differ", n, wrong);     /* a p within rounding of 0.5 may flip */
    double ew = mlr_err(tn_shared_get(m.w), w, LF), eb = mlr_err(tn_shared_get(m.b), &b, 1);
    CHECK(ew <= tol && eb <= tol, "n=%d: w off by %g, b by %g", n, ew, eb);
    /* every replica holds the same values, bit for bit */
    for (int k = 1; k < n; k++) {
        tn_array *a0 = tn_shared_get_value(m.w), *ak = tn_shared_get_value(tn_replicated_shared(R, m.w, k));
        CHECK(a0 && ak && tn_array_nbytes(a0) == tn_array_nbytes(ak) && !memcmp(a0->data, ak->data, tn_array_nbytes(a0)),
              "replica %d's w differs from replica 0's", k);
        tn_array_free(a0); tn_array_free(ak);
    }
    CHECK(tn_replicated_shared(R, m.w, 0) == m.w && tn_replicated_shared(R, m.x, 0) == NULL && tn_replicated_shared(R, m.w, n) == NULL,
          "replica 0 uses the user's variables");
    CHECK(tn_replicated_function(R, n - 1, 0) && tn_replicated_function(R, n - 1, 1) && !tn_replicated_function(R, n, 0), "functions");
    tn_array_free(out[0]); tn_array_free(out[1]);
    tn_replicated_free(R);
    tn_graph_free(m.g);
    lr_data_free(&D);
}

TEST(test_replicate_cpu_f64) {
    check_replicated_logreg(TN_F64, 1, TN_ALLREDUCE_AUTO, "none", 1e-12);
    check_replicated_logreg(TN_F64, 2, TN_ALLREDUCE_AUTO, "host", 1e-12);
    check_replicated_logreg(TN_F64, 3, TN_ALLREDUCE_AUTO, "host", 1e-12);    /* 133, 133, 134 rows */
}

TEST(test_replicate_cpu_f32) {
    check_replicated_logreg(TN_F32, 2, TN_ALLREDUCE_HOST, "host", 2e-5);
    check_replicated_logreg(TN_F32, 4, TN_ALLREDUCE_AUTO, "host", 2e-5);
}

TEST(test_replicate_errors) {
    lr_data D;
    lr_data_make(&D, TN_F32);
    mlr m;
    CHECK(mlr_build(&m, TN_F32, D.w0) == TN_OK, "%s", tn_last_error());
    m.rd.n_replicas = 3;
    tn_replicated *R = tn_function_replicate(m.g, &m.desc, &m.rd);
    CHECK(R != NULL, "%s", tn_last_error());
    tn_array *y399 = tn_array_zeros(TN_F32, 1, (int64_t[]){ LN - 1 }), *out[2] = { 0 };
    tn_array *in[2] = { D.X, y399 };
    CHECK(tn_replicated_call(R, in, out) == TN_ERR_SHAPE, "rows differ");
    CHECK_ERR(TN_ERR_SHAPE, "input 0 has 400 rows, input 1 399");
    tn_array *x2 = tn_array_zeros(TN_F32, 2, (int64_t[]){ 2, LF }), *y2 = tn_array_zeros(TN_F32, 1, (int64_t[]){ 2 });
    tn_array *in2[2] = { x2, y2 };
    CHECK(tn_replicated_call(R, in2, out) == TN_ERR_SHAPE, "2 rows, 3 replicas");
    CHECK_ERR(TN_ERR_SHAPE, "a batch of 2 rows cannot feed 3 replicas");
    CHECK(tn_replicated_call(R, NULL, out) == TN_ERR_NULL, "inputs NULL");
    CHECK_ERR(TN_ERR_NULL, "tn_replicated_call: the step takes 2 inputs");
    CHECK(tn_replicated_call(NULL, in, out) == TN_ERR_NULL, "NULL r");
    /* a call while another runs (its flag held here as that call would hold it): refused, nothing done */
    tn_array *y400 = tn_array_zeros(TN_F32, 1, (int64_t[]){ LN }), *in3[2] = { D.X, y400 };
    tn_array *w_before = tn_shared_get_value(m.w);
    CHECK(R && !tn__atomic_flag_test_and_set_explicit(&R->busy, TN__ACQUIRE), "the flag was clear");
    CHECK(tn_replicated_call(R, in3, out) == TN_ERR_BUSY && !out[0] && !out[1], "a second concurrent call");
    CHECK_ERR(TN_ERR_BUSY, "tn_replicated_call: the replicated step is running in another thread");
    tn_array *w_after = tn_shared_get_value(m.w);
    CHECK(w_before && w_after && !memcmp(w_before->data, w_after->data, tn_array_nbytes(w_before)), "a refused call moved w");
    if (R) tn__atomic_flag_clear_explicit(&R->busy, TN__RELEASE);
    CHECK(tn_replicated_call(R, in3, out) == TN_OK, "the call after: %s", tn_last_error());
    tn_array_free(out[0]); tn_array_free(out[1]); tn_array_free(w_before); tn_array_free(w_after); tn_array_free(y400);
    tn_replicated_free(R);
    m.rd.allreduce = TN_ALLREDUCE_NCCL;
    CHECK(tn_function_replicate(m.g, &m.desc, &m.rd) == NULL, "NCCL without a GPU");
    CHECK_ERR(TN_ERR_DEVICE, "tn_function_replicate: allreduce=NCCL needs every replica on a GPU");
    m.rd.allreduce = TN_ALLREDUCE_AUTO;
    m.rd.n_replicas = -1;
    CHECK(tn_function_replicate(m.g, &m.desc, &m.rd) == NULL, "negative count");
    CHECK_ERR(TN_ERR_INVALID, "n_replicas is -1");
    m.rd.n_replicas = 2;
    const char *ctxs[2] = { "cuda0", "nope" };
    m.rd.contexts = ctxs;
    CHECK(tn_function_replicate(m.g, &m.desc, &m.rd) == NULL, "unknown context");
    CHECK_ERR(TN_ERR_INVALID, "tn_function_replicate: no context named 'nope'");
    m.rd.contexts = NULL;
    tn_var *bad[2] = { m.gr[0], m.pred };
    m.rd.grads = bad;
    CHECK(tn_function_replicate(m.g, &m.desc, &m.rd) == NULL, "a bool gradient");
    CHECK_ERR(TN_ERR_DTYPE, "gradient 1");
    m.rd.grads = m.gr;
    CHECK(tn_function_replicate(m.g, &m.desc, NULL) == NULL, "NULL rd");
    CHECK_ERR(TN_ERR_NULL, "tn_function_replicate: rd is NULL");
    tn_update twice[2] = { m.up[0], m.up[0] };
    m.desc.updates = twice;
    CHECK(tn_function_replicate(m.g, &m.desc, &m.rd) == NULL, "a bad desc");
    CHECK_ERR(TN_ERR_UPDATE, "tn_function_replicate: shared variable 'w' is updated twice");
    m.desc.updates = m.up;
    tn_var_set_context(m.w, "dev0");
    CHECK(tn_function_replicate(m.g, &m.desc, &m.rd) == NULL, "a graph naming contexts");
    CHECK_ERR(TN_ERR_INVALID, "'w' is on context 'dev0'");
    tn_var_set_context(m.w, NULL);
    tn_array_free(y399); tn_array_free(x2); tn_array_free(y2);
    tn_graph_free(m.g);
    lr_data_free(&D);
}

TEST(test_nccl_loader_messages) {
    const char *keep = getenv("TN_LIBNCCL_PATH");
    char saved[512] = "";
    if (keep) snprintf(saved, sizeof saved, "%s", keep);
    setenv("TN_LIBNCCL_PATH", "/nonexistent/libnccl.so.2", 1);
    CHECK(tn_nccl_load() == TN_ERR_DEVICE || tn_nccl_version() > 0, "a missing file");
    if (tn_nccl_version() == 0) CHECK_ERR(TN_ERR_DEVICE, "TN_LIBNCCL_PATH=/nonexistent/libnccl.so.2 could not be loaded");
    if (keep) setenv("TN_LIBNCCL_PATH", saved, 1); else unsetenv("TN_LIBNCCL_PATH");
    tn_result r = tn_nccl_load();
    if (r == TN_OK) CHECK(tn_nccl_version() >= 20000, "NCCL version %d", tn_nccl_version());   /* found here (no GPU needed) */
    else CHECK_ERR(TN_ERR_DEVICE, "libnccl.so.2) was not found: searched the loader's path");
    tn_array *a = tn_array_zeros(TN_F32, 1, (int64_t[]){ 4 });
    CHECK(tn_nccl_allreduce(1, &a) == TN_ERR_DEVICE, "host array");
    CHECK_ERR(TN_ERR_DEVICE, "tn_nccl_allreduce: arrays[0] lives on the host");
    CHECK(tn_nccl_allreduce(0, &a) == TN_ERR_INVALID, "n 0");
    tn_array_free(a);
}

/* ---- two stand-in devices: host memory tagged cuda0 and cuda1 ---- */

static int fake_d2d;        /* GpuToGpu steps run */
static tn_result multi_fake_run(const tn_var *n, void *s, tn_array *const *in, tn_array *const *out) {
    (void)s;
    if (tn__op_kind(n->op) == TN_OPK_VIEW) return tn__op_def(n->op)->cpu(n, in, out);
    tn_array ha[16], *hp[16];
    if (n->n_in + n->n_out > 16) return tn__err(TN_ERR_INTERNAL, "fake device: too many operands");
    for (int i = 0; i < n->n_in + n->n_out; i++) {
        ha[i] = *(i < n->n_in ? in[i] : out[i - n->n_in]);
        if (ha[i].device != n->device && i >= n->n_in) return tn__err(TN_ERR_INTERNAL, "output on device %d, node on %d", ha[i].device, n->device);
        ha[i].device = TN_HOST;
        hp[i] = &ha[i];
    }
    if (n->op == TN_OP_GPU_FROM_HOST) {
        fake_d2d += in[0]->device != TN_HOST;
        return tn_array_assign(hp[1], hp[0]);
    }
    for (int i = 0; i < n->n_in; i++)
        if (in[i]->device != n->device) return tn__err(TN_ERR_INTERNAL, "node %d on cuda%d reads input %d on device %d", n->id, n->device, i, in[i]->device);
    return tn__op_def(n->op)->cpu(n, hp, hp + n->n_in);
}
static int streams_on[2];
static void *multi_fake_func_new(int device) { if (device >= 0 && device < 2) streams_on[device]++; return malloc(1); }
static tn_result multi_fake_func_enter(void *s) { (void)s; return TN_OK; }
static void multi_fake_func_free(void *s) { free(s); }

static void use_two_fake_devices(void) {
    static tn_backend be;
    static const tn_device_ops ops = { fake_alloc, fake_free, fake_copy, NULL, NULL, NULL, NULL, NULL, NULL };
    tn__cuda.state = 1;
    tn__cuda.ordinal = 0;
    tn__cuda.device_count = 2;
    be = tn__cuda_backend;
    be.ops = fake_table(fake_prepare, multi_fake_run);
    be.prof_new = NULL; be.prof_mark = NULL; be.prof_collect = NULL; be.prof_free = NULL;
    be.replay_begin = NULL; be.replay_end = NULL; be.replay_launch = NULL; be.replay_release = NULL;
    be.func_new = multi_fake_func_new; be.func_enter = multi_fake_func_enter; be.func_free = multi_fake_func_free;
    be.shared_order = NULL; be.shared_free = NULL;
    tn__set_backend(&be);
    tn__set_device_ops(&ops);
}

TEST(test_placement_two_devices) {
    use_two_fake_devices();
    tn_graph *g = tn_graph_new();
    int64_t sh[2] = { 4, 6 };
    tn_array *av = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 21), *bv = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 22);
    tn_var *A = tn_var_set_context(tn_shared(g, "A", av), "dev0");
    tn_var *B = tn_var_set_context(tn_shared(g, "B", bv), "dev1");
    tn_var *x = tn_matrix(g, "x", TN_F32);
    /* tanh(B)^T on dev1, moved (a strided view) to dev0, times exp(A) + x */
    tn_var *t = tn_transpose(tn_tanh(B), NULL);
    tn_var *y = tn_mul(tn_add(tn_exp(A), x), tn_transpose(tn_gpu_from_host_ctx(t, "dev0"), NULL));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f != NULL, "%s", tn_last_error());
    if (f) {
        char *s = print_fn(f);
        CHECK(s && strstr(s, "GpuToGpu<dev0>") && strstr(s, "@cuda1 ctx=dev1") && strstr(s, "@cuda0 ctx=dev0") && strstr(s, "HostFromGpu"),
              "placed graph:\n%s", s ? s : "");
        free(s);
        CHECK(tn_shared_get(A)->device == 0 && tn_shared_get(B)->device == 1, "A on cuda%d, B on cuda%d", tn_shared_get(A)->device,
              tn_shared_get(B)->device);
        tn_array *xv = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 23), *o = NULL;
        fake_d2d = 0;
        CHECK(tn_call(f, &xv, &o) == TN_OK, "%s", tn_last_error());
        CHECK(fake_d2d == 1, "%d device-to-device copies", fake_d2d);
        tn_array *ah = tn_shared_get_value(A), *bh = tn_shared_get_value(B);
        int bad = 0;
        for (int64_t i = 0; o && ah && bh && i < 24; i++) {
            int64_t ix[2] = { i / 6, i % 6 };
            double ref = (exp(tn_array_get(ah, ix)) + tn_array_get(xv, ix)) * tanh(tn_array_get(bh, ix));
            bad += !th_close(tn_array_get(o, ix), ref, 1e-5, 1e-6);
        }
        CHECK(o && bad == 0, "%d of 24 values differ", bad);
        tn_array_free(ah); tn_array_free(bh); tn_array_free(o); tn_array_free(xv);
    }
    tn_function_free(f);
    /* a function's own context: everything on cuda1, its stream there */
    int before = streams_on[1];
    tn_var *z = tn_exp(x);
    tn_func *f1 = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &z, .context = "cuda1" });
    CHECK(f1 && streams_on[1] == before + 1, "%s", tn_last_error());
    if (f1) {
        char *s = print_fn(f1);
        CHECK(s && strstr(s, "GpuElemwise{exp") && !strstr(s, "@"), "one device, no tags:\n%s", s ? s : "");
        free(s);
    }
    tn_function_free(f1);
    CHECK(tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &z, .context = "nope" }) == NULL, "bad");
    CHECK_ERR(TN_ERR_INVALID, "tn_function: context: no context named 'nope'");
    /* a context on a device this machine lacks */
    tn_var *C = tn_var_set_context(tn_shared(g, "C", av), "cuda3");
    tn_var *e = tn_exp(C);
    CHECK(tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &e }) == NULL, "cuda3 of 2");
    CHECK_ERR(TN_ERR_DEVICE, "context 'cuda3' (cuda3) asks for cuda3, but there are only 2 CUDA devices");
    tn_graph_free(g);
    tn_array_free(av); tn_array_free(bv);
}

int main(void) {
    TH_RUN(test_contexts_flag);
    TH_RUN(test_context_api);
    TH_RUN(test_mixed_contexts_error);
    TH_RUN(test_cpu_fallback_values);
    TH_RUN(test_replicate_cpu_f64);
    TH_RUN(test_replicate_cpu_f32);
    TH_RUN(test_replicate_errors);
    TH_RUN(test_nccl_loader_messages);
    TH_RUN(test_placement_two_devices);    /* last: it installs the stand-in devices */
    TH_END();
}
