#define _POSIX_C_SOURCE 200809L
/* The placement pass run on the CPU against a stand-in device (host memory
   tagged as device 0), so the rewrites around it are checked without a GPU:
   placement rewires nodes to read transfers created after them, and the
   optimizer's passes after it (fusion, inplace) must keep their use lists exact.
   The stand-in also runs functions: its "device kernels" are the CPU kernels
   (one can be made deliberately wrong, for mode=check), and its "CUDA graphs"
   record the kernels with the arrays they were given and replay exactly
   those (baked-in pointers, as a real graph), so the executor's graph cache
   and mode=check are tested without a GPU. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"
#include "print_text.h"
#include "fake_table.h"
#include "scan_seed.h"
#include "scan_device.h"
#include "logreg_step.h"


/* A stand-in kernel run: the op's CPU kernel on the (host) memory; with
   wrong_op set, that op's output 0 gets element wrong_at off by 0.5. */
static int wrong_op = -1;
static int64_t wrong_at = 5;
static tn_result fake_exec(const tn_var *n, tn_array *const *in, tn_array *const *out) {
    if (n->op == TN_OP_SCAN) {      /* its device loop (the step compiled for device arrays) with host copies */
        tn__scan_mem m = tn__scan_host_mem;
        m.device = 0;
        m.device_step = true;
        return tn__scan_run(n, in, out, &m);
    }
    if (n->op == TN_OP_GPU_FROM_HOST) return tn_array_assign(out[0], in[0]);
    if (n->op == TN_OP_HOST_FROM_GPU) {    /* a replayed copy back (the "device" array is host memory) */
        tn_array src = *in[0];
        src.device = TN_HOST;
        return tn_array_assign(out[0], &src);
    }
    if (tn__op_kind(n->op) == TN_OPK_VIEW) return tn__op_def(n->op)->cpu(n, in, out);
    /* the CPU kernels take host arrays: the same memory, tagged as host */
    tn_array ha[16], *hp[16];
    if (n->n_in + n->n_out > 16) return tn__err(TN_ERR_INTERNAL, "fake device: too many operands");
    for (int i = 0; i < n->n_in + n->n_out; i++) {
        ha[i] = *(i < n->n_in ? in[i] : out[i - n->n_in]);
        ha[i].device = TN_HOST;
        hp[i] = &ha[i];
    }
    tn_result r = tn__op_def(n->op)->cpu(n, hp, hp + n->n_in);
    if (r == TN_OK && n->op == wrong_op && out[0]->dtype == TN_F32 && tn_array_size(out[0]) > wrong_at)
        ((float *)out[0]->data)[wrong_at] += 0.5f;
    return r;
}

/* Stand-in graphs: while capturing, kernels are recorded with copies of
   their array structs (pointers and strides baked in), not run.
   Each recorded node keeps the nodes it follows (dep: indices of earlier
   records), set through replay_point and replay_follow as a real capture's
   dependency set is. */
typedef struct fake_rec { const tn_var *node; int n_in, n_out; tn_array arr[8]; int n_dep, dep[16]; } fake_rec;
typedef struct fake_graph { int n; fake_rec rec[64]; int n_cur, cur[16]; } fake_graph;
static fake_graph *capturing;
static int fake_fail_capture, graphs_live;
static tn_result fake_record(const tn_var *n, const tn_array *const *in, const tn_array *const *out) {
    if (capturing->n == 64 || n->n_in + n->n_out > 8) return tn__err(TN_ERR_INTERNAL, "fake graph full");
    fake_rec *r = &capturing->rec[capturing->n];
    r->node = n; r->n_in = n->n_in; r->n_out = n->n_out;
    for (int i = 0; i < n->n_in; i++) r->arr[i] = *in[i];
    for (int o = 0; o < n->n_out; o++) r->arr[n->n_in + o] = *out[o];
    r->n_dep = capturing->n_cur;
    memcpy(r->dep, capturing->cur, sizeof r->dep);
    capturing->n_cur = 1;                  /* what comes next follows this node */
    capturing->cur[0] = capturing->n++;
    return TN_OK;
}
static tn_result rewire_fake_run(const tn_var *n, void *s, tn_array *const *in, tn_array *const *out) {
    (void)s;
    if (!capturing || tn__op_kind(n->op) == TN_OPK_VIEW) return fake_exec(n, in, out);   /* views run on the host */
    return fake_record(n, (const tn_array *const *)in, (const tn_array *const *)out);
}
static tn_result fake_replay_point(void **nodes, size_t cap, size_t *n) {
    if (!capturing) return tn__err(TN_ERR_INTERNAL, "fake: replay_point outside a capture");
    for (int i = 0; i < capturing->n_cur && (size_t)i < cap; i++) nodes[i] = (void *)(intptr_t)(capturing->cur[i] + 1);
    *n = (size_t)capturing->n_cur;
    return TN_OK;
}
static tn_result fake_replay_follow(void *const *nodes, size_t n) {
    if (!capturing || n > 16) return tn__err(TN_ERR_INTERNAL, "fake: replay_follow of %zu nodes", n);
    for (size_t i = 0; i < n; i++) capturing->cur[i] = (int)((intptr_t)nodes[i] - 1);
    capturing->n_cur = (int)n;
    return TN_OK;
}
static tn_result fake_replay_begin(void) {
    capturing = (fake_graph *)calloc(1, sizeof *capturing);
    return capturing ? TN_OK : TN_ERR_OOM;
}
static fake_graph *last_graph;     /* the last graph captured */
static tn_result fake_replay_end(void **exec) {
    fake_graph *g = capturing;
    capturing = NULL;
    if (!exec || fake_fail_capture) { free(g); return exec ? tn__err(TN_ERR_DEVICE, "fake capture refused") : TN_OK; }
    *exec = last_graph = g;
    graphs_live++;
    return TN_OK;
}
static tn_result fake_replay_launch(void *exec) {
    fake_graph *g = (fake_graph *)exec;
    for (int k = 0; k < g->n; k++) {
        fake_rec *r = &g->rec[k];
        tn_array *in[8], *out[8];
        for (int i = 0; i < r->n_in; i++) in[i] = &r->arr[i];
        for (int o = 0; o < r->n_out; o++) out[o] = &r->arr[r->n_in + o];
        tn_result e = fake_exec(r->node, in, out);
        if (e != TN_OK) return e;
    }
    return TN_OK;
}
static void fake_replay_release(void *exec) {
    if (exec == last_graph) last_graph = NULL;
    free(exec);
    graphs_live--;
}

/* Stand-in streams: counted, so a test can see each function get one, enter
   it at every call and drop it when freed. */
static int streams_made, streams_live, stream_enters;
static void *rewire_fake_func_new(int device) { (void)device; streams_made++; streams_live++; return malloc(1); }
static tn_result rewire_fake_func_enter(void *s) { (void)s; stream_enters++; return TN_OK; }
static void rewire_fake_func_free(void *s) { if (s) streams_live--; free(s); }


static void use_fake_device(void) {
    static tn_backend be;
    static const tn_device_ops ops = { fake_alloc, fake_free, fake_copy, NULL, NULL, NULL, NULL, NULL, NULL };
    tn__cuda.state = 1;
    tn__cuda.ordinal = 0;
    be = tn__cuda_backend;
    be.ops = fake_table(fake_prepare, rewire_fake_run);
    be.replay_begin = fake_replay_begin;
    be.replay_end = fake_replay_end;
    be.replay_launch = fake_replay_launch;
    be.replay_release = fake_replay_release;
    be.func_new = rewire_fake_func_new;
    be.func_enter = rewire_fake_func_enter;
    be.func_free = rewire_fake_func_free;
    be.shared_order = NULL;     /* no events on the fake device */
    be.shared_free = NULL;
    tn__set_backend(&be);
    tn__set_device_ops(&ops);
}

static int count_in(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}


TEST(test_update_folded_into_gemv_after_placement) {
    /* b <- b + 0.5 * (W.x + b) specialises to one Gemv; placement then
       rewires it to read transfers made after it. */
    tn_graph *g = tn_graph_new();
    int64_t m = 7;
    tn_array *Wv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){m, m}, -1, 1, 1);
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &m, -1, 1, 2), *bv = tn_array_rand_uniform(TN_F32, 1, &m, -1, 1, 3);
    tn_var *W = tn_shared(g, "W", Wv), *x = tn_shared(g, "x", xv), *b = tn_shared(g, "b", bv);
    tn_var *out = tn_add(tn_dot(W, x), b);
    tn_update up = { b, tn_add(b, tn_mul(tn_scalar_const(g, 0.5), out)) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &out, .n_updates = 1, .updates = &up });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    if (f) {
        char *s = print_fn(f);
        CHECK(count_in(s, "GpuGemv") >= 1 && strstr(s, "HostFromGpu"), "placed graph:\n%s", s);
        free(s);
    }
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(Wv); tn_array_free(xv); tn_array_free(bv);
}

TEST(test_fused_group_with_transfers) {
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_matrix(g, "a", TN_F32), *b = tn_matrix(g, "b", TN_F32);
    tn_var *z = tn_add(tn_mul(tn_tanh(tn_add(tn_mul(a, b), tn_exp(tn_neg(a)))), tn_scalar_const(g, 0.5)), b);
    tn_var *outs[2] = { z, tn_sum(z, (int[]){ 1 }, 1, false) };
    tn_var *ins[2] = { a, b };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 2, .outputs = outs });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    if (f) {
        char *s = print_fn(f);
        CHECK(count_in(s, "GpuFromHost<None> [id") == 2, "one transfer per input:\n%s", s);
        CHECK(strstr(s, "GpuElemwise{Composite{") != NULL, "one fused kernel:\n%s", s);
        free(s);
    }
    tn_function_free(f);
    tn_graph_free(g);
}

static double *vals(const tn_array *a) {     /* float64 copy, C order; caller frees */
    size_t n = (size_t)tn_array_size(a);
    double *d = (double *)malloc((n + 1) * sizeof *d);
    if (tn_array_copy_to(a, TN_F64, d, (n + 1) * sizeof *d) != TN_OK) { free(d); return NULL; }
    return d;
}

static double max_abs_diff(const double *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) { double d = fabs(a[i] - b[i]); if (!(d <= m)) m = d; }
    return m;
}

TEST(test_scan_on_the_device) {
    /* the seed recurrence, scan placed on the stand-in device: no transfer per
       step, results equal to the float64 C loop */
    int64_t L = 12, T = L - 4;
    tn_graph *g = tn_graph_new();
    tn_var *ins[8], *outs[2];
    CHECK(seed_scan(g, ins, outs, false, L) == TN_OK, "tn_scan: %s", tn_last_error());
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 8, .inputs = ins, .n_outputs = 2, .outputs = outs });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    if (!f) { tn_graph_free(g); return; }
    int n, on_dev, xfers;
    scan_steps(f, &n, &on_dev, &xfers);
    CHECK(n == 1 && on_dev == 1 && xfers == 0, "scans %d, on the device %d, transfers per step %d", n, on_dev, xfers);
    char *s = print_fn(f);
    const char *inner = strstr(s, "Inner graphs of the scan ops:");
    CHECK(strstr(s, "GpuScan{seed}") != NULL && inner, "scan not on the device:\n%s", s);
    CHECK(inner && strstr(inner, " >GpuElemwise{Composite{tanh") && strstr(inner, "GpuGemv") && !strstr(inner, "FromHost") &&
          !strstr(inner, "FromGpu"), "the step's graph: device ops, no transfers:\n%s", s);
    free(s);
    int64_t sh[8][2] = { {NX, NX}, {NX, NU}, {NX, NU}, {NX, NY}, {NY, NX}, {L, NU}, {3, NX}, {NY, 0} };
    tn_array *a[8];
    double *P[8];
    for (int i = 0; i < 8; i++) { a[i] = tn_array_rand_uniform(TN_F64, i == 7 ? 1 : 2, sh[i], -0.8, 0.8, 100 + (uint64_t)i); P[i] = vals(a[i]); }
    double xs[64 * NX], ys[64 * NY];
    seed_ref(P, L, xs, ys);
    for (int rep = 0; rep < 2; rep++) {
        tn_array *res[2] = { NULL, NULL };
        CHECK(tn_call(f, a, res) == TN_OK, "call: %s", tn_last_error());
        if (!res[0]) break;
        CHECK(res[0]->device == TN_HOST && res[0]->shape[0] == T, "x comes back to the host, %lld rows", (long long)res[0]->shape[0]);
        double *gx = vals(res[0]), *gy = vals(res[1]);
        CHECK(max_abs_diff(gx, xs, (size_t)(T * NX)) < 1e-12, "x differs from the C loop by %g", max_abs_diff(gx, xs, (size_t)(T * NX)));
        CHECK(max_abs_diff(gy, ys, (size_t)(T * NY)) < 1e-12, "y differs from the C loop by %g", max_abs_diff(gy, ys, (size_t)(T * NY)));
        free(gx); free(gy);
        tn_array_free(res[0]); tn_array_free(res[1]);
    }
    for (int i = 0; i < 8; i++) { tn_array_free(a[i]); free(P[i]); }
    tn_function_free(f);
    tn_graph_free(g);
}

TEST(test_scan_gradient_on_the_device) {
    tn_graph *gd = tn_graph_new(), *gh = tn_graph_new();
    tn_var *ind[4], *inh[4];
    tn_func *fd = rnn_grad_fn(gd, true, ind, NULL);
    CHECK(fd != NULL, "device grad: %s", tn_last_error());
    tn_func *fh = rnn_grad_fn(gh, false, inh, NULL);
    CHECK(fh != NULL, "host grad: %s", tn_last_error());
    if (fd && fh) {
        int n, on_dev, xfers;
        scan_steps(fd, &n, &on_dev, &xfers);
        CHECK(n == 2 && on_dev == 2 && xfers == 0, "scans %d, on the device %d, transfers per step %d", n, on_dev, xfers);
        scan_steps(fh, &n, &on_dev, &xfers);
        CHECK(n == 2 && on_dev == 0, "host reference: scans %d, on the device %d", n, on_dev);
        char *s = print_fn(fd);
        CHECK(strstr(s, "GpuScanGrad{rnn}") != NULL, "gradient scan not on the device:\n%s", s);
        free(s);
        int64_t m = 4, T = 6;
        tn_array *a[4] = { tn_array_rand_uniform(TN_F64, 2, (int64_t[]){m, m}, -0.7, 0.7, 11),
                           tn_array_rand_uniform(TN_F64, 2, (int64_t[]){T, m}, -1, 1, 12),
                           tn_array_rand_uniform(TN_F64, 1, &m, -1, 1, 13),
                           tn_array_rand_uniform(TN_F64, 2, (int64_t[]){T, m}, -1, 1, 14) };
        tn_array *rd[3] = { NULL, NULL, NULL }, *rh[3] = { NULL, NULL, NULL };
        CHECK(tn_call(fd, a, rd) == TN_OK, "device call: %s", tn_last_error());
        CHECK(tn_call(fh, a, rh) == TN_OK, "host call: %s", tn_last_error());
        for (int i = 0; i < 3 && rd[i] && rh[i]; i++) {
            double *x = vals(rd[i]), *y = vals(rh[i]);
            size_t len = (size_t)tn_array_size(rh[i]);
            CHECK(tn_array_size(rd[i]) == (int64_t)len && max_abs_diff(x, y, len) < 1e-13, "gradient %d differs by %g", i, max_abs_diff(x, y, len));
            free(x); free(y);
        }
        for (int i = 0; i < 3; i++) { tn_array_free(rd[i]); tn_array_free(rh[i]); }
        for (int i = 0; i < 4; i++) tn_array_free(a[i]);
    }
    tn_function_free(fd); tn_function_free(fh);
    tn_graph_free(gd); tn_graph_free(gh);
}

/* >>check_mode ------------------------------------------------------------ */

/* z = tanh(x*y + exp(-x))*0.5 + y (one fused kernel), s = sum(z, axis 1), p = z . W */
typedef struct chk { tn_graph *g; tn_func *f; tn_array *xv, *yv, *Wv; double z[5 * 7], s[5], p[5 * 3]; } chk;
static void chk_build(chk *c, tn_mode mode) {
    memset(c, 0, sizeof *c);
    c->xv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 5, 7 }, -2, 2, 51);
    c->yv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 5, 7 }, -2, 2, 52);
    c->Wv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 7, 3 }, -1, 1, 53);
    tn_array *xd = tn_array_astype(c->xv, TN_F64), *yd = tn_array_astype(c->yv, TN_F64), *Wd = tn_array_astype(c->Wv, TN_F64);
    const double *x = (const double *)xd->data, *y = (const double *)yd->data, *W = (const double *)Wd->data;
    for (int i = 0; i < 35; i++) c->z[i] = tanh(x[i] * y[i] + exp(-x[i])) * 0.5 + y[i];
    for (int i = 0; i < 5; i++) {
        c->s[i] = 0;
        for (int j = 0; j < 7; j++) c->s[i] += c->z[i * 7 + j];
        for (int k = 0; k < 3; k++) { c->p[i * 3 + k] = 0; for (int j = 0; j < 7; j++) c->p[i * 3 + k] += c->z[i * 7 + j] * W[j * 3 + k]; }
    }
    tn_array_free(xd); tn_array_free(yd); tn_array_free(Wd);
    c->g = tn_graph_new();
    tn_var *a = tn_matrix(c->g, "x", TN_F32), *b = tn_matrix(c->g, "y", TN_F32), *w = tn_shared(c->g, "W", c->Wv);
    tn_var *z = tn_add(tn_mul(tn_tanh(tn_add(tn_mul(a, b), tn_exp(tn_neg(a)))), tn_scalar_const(c->g, 0.5)), b);
    tn_var *outs[3] = { z, tn_sum(z, (int[]){ 1 }, 1, false), tn_dot(z, w) };
    tn_var *ins[2] = { a, b };
    c->f = tn_function(c->g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 3, .outputs = outs, .mode = mode, .name = "chk" });
}
static void chk_free(chk *c) {
    tn_function_free(c->f);
    tn_graph_free(c->g);
    tn_array_free(c->xv); tn_array_free(c->yv); tn_array_free(c->Wv);
}
static double chk_err(const tn_array *a, const double *ref, int64_t n) {
    tn_array *h = a ? tn_array_astype(a, TN_F64) : NULL;
    double e = h ? 0 : INFINITY;
    for (int64_t i = 0; h && i < n; i++) e = fmax(e, fabs(((double *)h->data)[i] - ref[i]) / fmax(1, fabs(ref[i])));
    tn_array_free(h);
    return e;
}

TEST(test_check_mode_passes_correct_kernels) {
    chk c;
    chk_build(&c, TN_MODE_CHECK);
    CHECK(c.f != NULL, "compile: %s", tn_last_error());
    if (c.f) {
        char *s = print_fn(c.f);
        CHECK(strstr(s, "GpuElemwise{Composite{") && strstr(s, "GpuSum") && (strstr(s, "GpuDot") || strstr(s, "GpuGemm")),
              "fused chain, reduction and product on the stand-in device:\n%s", s);
        free(s);
        tn_array *in[2] = { c.xv, c.yv }, *r[3] = { 0 };
        CHECK(tn_call(c.f, in, r) == TN_OK, "mode=check with correct kernels: %s", tn_last_error());
        CHECK(chk_err(r[0], c.z, 35) < 1e-5 && chk_err(r[1], c.s, 5) < 1e-5 && chk_err(r[2], c.p, 15) < 1e-5,
              "results %g %g %g", chk_err(r[0], c.z, 35), chk_err(r[1], c.s, 5), chk_err(r[2], c.p, 15));
        for (int i = 0; i < 3; i++) tn_array_free(r[i]);
    }
    chk_free(&c);
}

TEST(test_check_mode_catches_a_wrong_kernel) {
    /* each of the three device ops made wrong in turn: mode=check names it;
       without check mode the wrong result comes back silently */
    const int ops[3] = { TN_OP_COMPOSITE, TN_OP_SUM, -2 };
    const char *names[3] = { "GpuElemwise{Composite{", "GpuSum", "Gpu" };
    for (int k = 0; k < 3; k++) {
        chk c;
        chk_build(&c, TN_MODE_CHECK);
        if (!c.f) { CHECK(0, "compile: %s", tn_last_error()); chk_free(&c); continue; }
        int prod = -1;
        for (int i = 0; i < c.f->n_steps; i++) {
            int op = c.f->steps[i].node->op;
            if (op == TN_OP_DOT || op == TN_OP_GEMM) prod = op;
        }
        wrong_op = ops[k] == -2 ? prod : ops[k];
        wrong_at = k == 1 ? 3 : 5;
        tn_array *in[2] = { c.xv, c.yv }, *r[3] = { 0 };
        tn_result res = tn_call(c.f, in, r);
        CHECK(res == TN_ERR_CHECK, "op %d: got %s: %s", wrong_op, tn_result_string(res), tn_last_error());
        CHECK_ERR(TN_ERR_CHECK, names[k]);
        CHECK_ERR(TN_ERR_CHECK, "mode=check");
        CHECK_ERR(TN_ERR_CHECK, "differs from its CPU reference");
        CHECK_ERR(TN_ERR_CHECK, k == 0 ? "at (0, 5)" : k == 1 ? "at (3,)" : "at (1, 2)");
        CHECK_ERR(TN_ERR_CHECK, k == 2 ? "float32 (7, 3)" : "float32 (5, 7)");
        CHECK_ERR(TN_ERR_CHECK, "node ");
        CHECK(strstr(tn_last_error(), "tn_call: chk: ") == tn_last_error(), "names tn_call and the function: %s", tn_last_error());
        for (int i = 0; i < 3; i++) tn_array_free(r[i]);
        chk_free(&c);
        /* the same wrong kernel without check mode: a silently wrong result */
        chk_build(&c, TN_MODE_FAST_RUN);
        in[0] = c.xv;
        in[1] = c.yv;
        CHECK(c.f && tn_call(c.f, in, r) == TN_OK, "fast_run: %s", tn_last_error());
        double e = k == 0 ? chk_err(r[0], c.z, 35) : k == 1 ? chk_err(r[1], c.s, 5) : chk_err(r[2], c.p, 15);
        CHECK(e > 0.05, "op %d: the stand-in kernel is wrong without check mode (error %g)", wrong_op, e);
        for (int i = 0; i < 3; i++) tn_array_free(r[i]);
        chk_free(&c);
        wrong_op = -1;
    }
    CHECK(strcmp(tn_result_string(TN_ERR_CHECK), "TN_ERR_CHECK") == 0, "%s", tn_result_string(TN_ERR_CHECK));
}

/* >>replay ---------------------------------------------------------- */

/* A training-like step with only device kernels: x <- 0.5 x + tanh(y),
   y <- y + 0.01 sum(x^2), output (borrowed, on the device) 2 x' + 1.
   The update swaps make the kernels' pointers alternate between two sets. */
typedef struct gstep { tn_graph *g; tn_var *x, *y; tn_func *f; } gstep;
static void gstep_build(gstep *s, int64_t n, bool borrow) {
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 61), *yv = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 62);
    s->g = tn_graph_new();
    s->x = tn_shared(s->g, "x", xv);
    s->y = tn_shared(s->g, "y", yv);
    tn_array_free(xv); tn_array_free(yv);
    tn_var *nx = tn_add(tn_mul(s->x, tn_lit(s->x, 0.5)), tn_tanh(s->y));
    tn_var *ny = tn_add(s->y, tn_mul(tn_lit(s->y, 0.01), tn_sum(tn_sqr(s->x), NULL, 0, false)));
    tn_var *o = tn_gpu_from_host(tn_add(tn_mul(nx, tn_lit(nx, 2.0)), tn_lit(nx, 1.0)));
    tn_update up[2] = { { s->x, nx }, { s->y, ny } };
    s->f = tn_function(s->g, &(tn_func_desc){ .n_outputs = 1, .outputs = &o, .n_updates = 2, .updates = up, .borrow = borrow, .name = "step" });
}
/* The same steps in float64 here; returns the largest error of x, y and the output over `calls` calls. */
static double gstep_run(gstep *s, int calls) {
    tn_array *hx = tn_shared_get_value(s->x), *hy = tn_shared_get_value(s->y);
    tn_array *dx = tn_array_astype(hx, TN_F64), *dy = tn_array_astype(hy, TN_F64);
    int64_t n = tn_array_size(hx);
    double *x = (double *)dx->data, *y = (double *)dy->data, *o = (double *)malloc((size_t)n * sizeof *o), e = 0;
    for (int c = 0; c < calls; c++) {
        double ss = 0;
        for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
        for (int64_t i = 0; i < n; i++) { x[i] = 0.5 * x[i] + tanh(y[i]); o[i] = 2 * x[i] + 1; y[i] += 0.01 * ss; }
        tn_array *r = NULL;
        if (tn_call(s->f, NULL, &r) != TN_OK) { e = INFINITY; break; }
        e = fmax(e, chk_err(r, o, n));
        if (!r->live_gen) tn_array_free(r);
        tn_array *gx = tn_shared_get_value(s->x), *gy = tn_shared_get_value(s->y);
        e = fmax(e, fmax(chk_err(gx, x, n), chk_err(gy, y, n)));
        tn_array *ax = tn_array_astype(gx, TN_F64), *ay = tn_array_astype(gy, TN_F64);   /* follow float32 rounding */
        memcpy(x, ax->data, (size_t)n * sizeof *x);
        memcpy(y, ay->data, (size_t)n * sizeof *y);
        tn_array_free(ax); tn_array_free(ay); tn_array_free(gx); tn_array_free(gy);
    }
    tn_array_free(hx); tn_array_free(hy); tn_array_free(dx); tn_array_free(dy);
    free(o);
    return e;
}
static void gstep_free(gstep *s) { tn_function_free(s->f); tn_graph_free(s->g); }

TEST(test_graph_replay_alternating_buffers) {
    gstep s;
    gstep_build(&s, 37, true);
    CHECK(s.f != NULL, "compile: %s", tn_last_error());
    if (!s.f) { gstep_free(&s); return; }
    double e = gstep_run(&s, 12);
    int64_t rep = 0, cap = 0;
    const char *why = NULL;
    tn__replay_stats(s.f, &rep, &cap, &why);
    CHECK(e < 1e-5, "12 calls against float64: error %g (%s)", e, tn_last_error());
    /* calls 1-2 run plainly (two signatures seen), 3-4 capture them, 5-12 replay */
    CHECK(cap == 2 && rep == 8, "captures %lld, replays %lld (%s)", (long long)cap, (long long)rep, why);
    CHECK(graphs_live == 2, "%d graphs alive", graphs_live);
    /* a new shape: re-plan, the old graphs are dropped, two new ones made */
    int64_t n2 = 53;
    tn_array *nx = tn_array_rand_uniform(TN_F32, 1, &n2, -1, 1, 63), *ny = tn_array_rand_uniform(TN_F32, 1, &n2, -1, 1, 64);
    CHECK(tn_shared_set_value(s.x, nx) == TN_OK && tn_shared_set_value(s.y, ny) == TN_OK, "%s", tn_last_error());
    e = gstep_run(&s, 6);
    tn__replay_stats(s.f, &rep, &cap, &why);
    CHECK(e < 1e-5, "after a new shape: error %g", e);
    CHECK(cap == 4 && rep == 10, "after re-plan: captures %lld, replays %lld (%s)", (long long)cap, (long long)rep, why);
    CHECK(graphs_live == 2, "%d graphs alive after the re-plan", graphs_live);
    tn_array_free(nx); tn_array_free(ny);
    gstep_free(&s);
    CHECK(graphs_live == 0, "tn_function_free releases its graphs (%d alive)", graphs_live);
}

TEST(test_graph_off_cases) {
    /* cuda_graph=0: the same results, nothing captured */
    tn_config cfg = *tn_get_config(), off = cfg;
    off.no_cuda_graph = true;
    tn_init(&off);
    use_fake_device();
    gstep s;
    gstep_build(&s, 29, true);
    double e = s.f ? gstep_run(&s, 6) : INFINITY;
    int64_t rep = -1, cap = -1;
    const char *why = NULL;
    tn__replay_stats(s.f, &rep, &cap, &why);
    CHECK(e < 1e-5 && rep == 0 && cap == 0 && strstr(why, "cuda_graph=0"), "cuda_graph=0: error %g, %lld/%lld (%s)", e,
          (long long)rep, (long long)cap, why);
    gstep_free(&s);
    tn_init(&cfg);
    use_fake_device();
    /* a copied output replays too: the copy for the caller is made after the graph */
    gstep_build(&s, 29, false);
    e = s.f ? gstep_run(&s, 6) : INFINITY;
    tn__replay_stats(s.f, &rep, &cap, &why);
    CHECK(e < 1e-5 && rep >= 1 && cap >= 1, "copied output: error %g, %lld/%lld (%s)", e, (long long)rep, (long long)cap, why);
    gstep_free(&s);
    /* a capture that fails: plain launches for good, correct results, no error left behind */
    fake_fail_capture = 1;
    gstep_build(&s, 29, true);
    e = s.f ? gstep_run(&s, 8) : INFINITY;
    tn__replay_stats(s.f, &rep, &cap, &why);
    CHECK(e < 1e-5 && rep == 0 && cap == 0 && strstr(why, "capture failed") && strstr(why, "fake capture refused"),
          "failed capture: error %g, %lld/%lld (%s)", e, (long long)rep, (long long)cap, why);
    CHECK(tn_last_result() == TN_OK, "no error left: %s", tn_last_error());
    gstep_free(&s);
    fake_fail_capture = 0;
    CHECK(graphs_live == 0, "%d graphs alive", graphs_live);
    /* outputs copied back without the back end's queued copy (the stand-in has
       no tn_device_ops.d2h): not eligible, and says which step */
    chk c;
    chk_build(&c, TN_MODE_FAST_RUN);
    tn_array *in[2] = { c.xv, c.yv }, *r[3] = { 0 };
    for (int k = 0; k < 3 && c.f; k++) {
        CHECK(tn_call(c.f, in, r) == TN_OK && chk_err(r[0], c.z, 35) < 1e-5, "call %d: %s", k, tn_last_error());
        for (int i = 0; i < 3; i++) tn_array_free(r[i]);
    }
    tn__replay_stats(c.f, &rep, &cap, &why);
    CHECK(rep == 0 && strstr(why, "HostFromGpu") && strstr(why, "without the back end"), "copied back: %lld replays (%s)", (long long)rep, why);
    chk_free(&c);
}

/* An update whose value is computed on the device moves its target there
   (the function never reads it on the host), so no HostFromGpu remains; a
   target read on the host (here: also an output) or given a host value stays. */
TEST(test_update_targets_move_to_device) {
    tn_graph *g = tn_graph_new();
    int64_t n = 13;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 5), *zv = tn_array_zeros(TN_F32, 1, &n);
    tn_var *x = tn_shared(g, "x", xv), *y = tn_shared(g, "y", zv), *w = tn_shared(g, "w", zv), *h = tn_shared(g, "h", zv);
    tn_array *mv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ n, n }, -1, 1, 6);
    tn_var *m = tn_shared(g, "m", mv);
    tn_var *b = tn_shared(g, "b", xv), *lin = tn_shared(g, "lin", zv);
    CHECK(tn_shared_get(y)->device == TN_HOST && tn_shared_get(lin)->device == TN_HOST, "targets start on the host");
    tn_update ups[3] = { { y, tn_exp(x) }, { h, x }, { lin, tn_add(tn_dot(m, x), b) } };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_updates = 3, .updates = ups, .name = "upd" });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    if (f) {
        char *s = print_fn(f);
        CHECK(tn_shared_get(y)->device == 0, "y (exp computed on the device) moved: device %d\n%s", tn_shared_get(y)->device, s);
        CHECK(tn_shared_get(lin)->device == 0, "lin (gemm on the device) moved: device %d\n%s", tn_shared_get(lin)->device, s);
        CHECK(tn_shared_get(h)->device == TN_HOST, "h <- x (no computation) stays on the host");
        CHECK(!strstr(s, "HostFromGpu"), "no copy back to the host:\n%s", s);
        CHECK(strstr(s, "GpuElemwise{exp") && (strstr(s, "GpuGemm") || strstr(s, "GpuGemv") || strstr(s, "GpuDot")), "ops on the device:\n%s", s);
        free(s);
    }
    tn_function_free(f);
    /* read on the host (an output): w stays, and so does its update's copy back */
    tn_var *ew = tn_exp(x);
    tn_update uw = { w, ew };
    f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &w, .n_updates = 1, .updates = &uw, .name = "upd2" });
    CHECK(f != NULL, "compile 2: %s", tn_last_error());
    CHECK(tn_shared_get(w)->device == TN_HOST, "w is an output (read on the host): stays, device %d", tn_shared_get(w)->device);
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(xv); tn_array_free(zv); tn_array_free(mv);
}

/* Each function with device steps gets a stream of its own, entered at every
   call and dropped with the function; a host-only function gets none, and a
   scan's step functions run on the stream of the function that calls them. */
TEST(test_one_stream_per_function) {
    int made0 = streams_made, live0 = streams_live, enters0 = stream_enters;
    tn_graph *g = tn_graph_new();
    int64_t n = 11;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 71);
    tn_var *x = tn_vector(g, "x", TN_F32), *y = tn_exp(tn_mul(x, x));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f && f->bfstate && streams_made == made0 + 1 && streams_live == live0 + 1, "a device function gets a stream: %s", tn_last_error());
    for (int i = 0; f && i < 3; i++) {
        tn_array *r = NULL;
        CHECK(tn_call(f, &xv, &r) == TN_OK, "%s", tn_last_error());
        tn_array_free(r);
    }
    CHECK(stream_enters == enters0 + 3, "entered at each call: %d", stream_enters - enters0);
    tn_function_free(f);
    CHECK(streams_live == live0, "freed with the function (%d live)", streams_live - live0);
    tn_func *fh = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &x });
    CHECK(fh && !fh->bfstate && streams_live == live0, "a function with no device step has no stream");
    tn_function_free(fh);
    tn_graph_free(g);
    tn_array_free(xv);
    /* the seed scan: one stream for the outer function, none for its steps */
    g = tn_graph_new();
    tn_var *ins[8], *outs[2];
    CHECK(seed_scan(g, ins, outs, false, 12) == TN_OK, "tn_scan: %s", tn_last_error());
    f = tn_function(g, &(tn_func_desc){ .n_inputs = 8, .inputs = ins, .n_outputs = 2, .outputs = outs });
    CHECK(f && f->bfstate, "the outer function has a stream: %s", tn_last_error());
    int scans = 0;
    for (int k = 0; f && k < f->n_steps; k++) {
        const tn_var *v = f->steps[k].node;
        if (v->op != TN_OP_SCAN || !v->ext) continue;
        const tn__scan *sc = (const tn__scan *)v->ext;
        scans++;
        CHECK(sc->fn && !sc->fn->bfstate && (!sc->dfn || !sc->dfn->bfstate), "a step function has no stream of its own");
    }
    CHECK(scans == 1, "%d scans", scans);
    tn_function_free(f);
    tn_graph_free(g);
    CHECK(streams_live == live0, "%d streams left", streams_live - live0);
}

/* assert_no_cpu_op names each op left on the CPU and why: an op without a
   row in the back end's table, or a row that declined the node. */
static tn_result copy_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    out[0] = in[0];
    return TN_OK;
}
static tn_result copy_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    (void)op; (void)why; (void)cap;
    return tn_array_assign(out[0], in[0]);
}
TEST(test_assert_no_cpu_op_says_why) {
    tn_config cfg = *tn_get_config(), warn = cfg;
    warn.assert_no_cpu_op = TN_WR_RAISE;
    tn_init(&warn);
    use_fake_device();
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *j = tn_exp(tn_concatenate(2, (tn_var *[]){ x, x }, 0));      /* Join: no row */
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &j });
    CHECK(!f && tn_last_result() == TN_ERR_UNSUPPORTED && strstr(tn_last_error(), "Join") &&
          strstr(tn_last_error(), "no GPU kernel in the cuda back end"), "no row: %s", tn_last_error());
    tn_function_free(f);
    static const tn_custom_op cp = { .name = "copy_it", .n_inputs = 1, .n_outputs = 1, .infer = copy_infer, .cpu = copy_cpu };
    tn_var *c = tn_exp(tn_custom(g, &cp, 1, &x));                        /* a row, but no CUDA source: declined */
    f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &c });
    CHECK(!f && strstr(tn_last_error(), "copy_it") && strstr(tn_last_error(), "has a row for this op, but it declined these inputs: float32") &&
          !strstr(tn_last_error(), "no GPU kernel"), "declined: %s", tn_last_error());
    tn_function_free(f);
    tn_var *e = tn_exp(x);                                               /* everything on the device: compiles */
    f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &e });
    CHECK(f != NULL, "all on the device: %s", tn_last_error());
    tn_function_free(f);
    tn_graph_free(g);
    tn_init(&cfg);
    use_fake_device();
}

/* Copies back to page-locked memory, queued (tn_device_ops.d2h): recorded under capture. */
static void *fake_pinned_alloc(int d, size_t b) { (void)d; return malloc(b ? b : 1); }
static void fake_pinned_free(int d, void *p, size_t b) { (void)d; (void)b; free(p); }
static tn_result fake_d2h(const tn_var *node, const tn_array *in, tn_array *out) {
    if (capturing) return fake_record(node, &in, (const tn_array *const *)&out);
    tn_array src = *in;
    src.device = TN_HOST;
    return tn_array_assign(out, &src);
}

/* Whether record a reaches record b through the nodes it follows. */
static bool rec_reaches(const fake_graph *g, int a, int b) {
    if (a == b) return true;
    for (int i = 0; i < g->rec[a].n_dep; i++)
        if (rec_reaches(g, g->rec[a].dep[i], b)) return true;
    return false;
}
/* Whether records a and b touch the same bytes, one of them writing. */
static bool rec_conflict(const fake_rec *a, const fake_rec *b) {
    for (int i = 0; i < a->n_in + a->n_out; i++)
        for (int j = 0; j < b->n_in + b->n_out; j++) {
            if (i < a->n_in && j < b->n_in) continue;      /* two reads */
            const tn_array *x = &a->arr[i], *y = &b->arr[j];
            const char *x0 = (const char *)x->data, *y0 = (const char *)y->data;
            if (x0 < y0 + tn_array_nbytes(y) && y0 < x0 + tn_array_nbytes(x)) return true;
        }
    return false;
}
static bool rec_is(const fake_rec *r, int op) { return r->node->op == op; }

TEST(test_graph_follows_the_data) {
    /* The seed's logistic step, x and y passed each call, the prediction
       and the per-example cost copied back: its captured graph orders each
       copy by the memory it touches, and the kernels in one chain. */
    static tn_backend be2;
    static const tn_device_ops ops2 = { fake_alloc, fake_free, fake_copy, fake_pinned_alloc, fake_pinned_free, fake_d2h, NULL, NULL, NULL };
    const tn_backend *be_saved = tn__get_backend();
    const tn_device_ops *ops_saved = tn__get_device_ops();
    be2 = *be_saved;
    be2.replay_point = fake_replay_point;
    be2.replay_follow = fake_replay_follow;
    tn__set_backend(&be2);
    tn__set_device_ops(&ops2);
    enum { N = 6, F = 5 };
    tn_array *X = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ N, F }, 0, 1, 71);
    tn_array *U = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ N }, 0, 1, 72);
    tn_array *W0 = tn_array_rand_normal(TN_F32, 1, (int64_t[]){ F }, 0, 0.5, 73);
    tn_array *Y = tn_array_astype(U, TN_F32);
    for (int i = 0; i < N; i++) ((float *)Y->data)[i] = ((float *)U->data)[i] < 0.5f ? 0.0f : 1.0f;
    lr_step m;
    bool built = lr_build(&m, true, X, Y, W0);
    CHECK(built, "compile: %s", tn_last_error());
    tn_func *f = built ? m.f : NULL;
    tn_var *w = m.w, *b = m.b;
    double wr[F], br = 0, err = 0;
    for (int j = 0; j < F; j++) wr[j] = ((float *)W0->data)[j];
    const float *xv = (const float *)X->data, *yv = (const float *)Y->data;
    int bad_pred = 0;
    for (int call = 0; f && call < 8; call++) {
        tn_array *o[2] = { 0 };
        tn_result r = tn_call(f, (tn_array *[]){ X, Y }, o);
        CHECK(r == TN_OK, "call %d: %s", call, tn_last_error());
        if (r != TN_OK) break;
        /* float64 reference: p = 1 / (1 + e^-(x.w + b)), the cost's gradient x^T (p - y) / N + 0.02 w */
        double gw[F] = { 0 }, gb = 0;
        for (int i = 0; i < N; i++) {
            double z = br;
            for (int j = 0; j < F; j++) z += (double)xv[i * F + j] * wr[j];
            double p = 1 / (1 + exp(-z)), t = yv[i];
            double ce = -(t * log(p) + (1 - t) * log1p(-p));
            err = fmax(err, fabs(((float *)o[1]->data)[i] - ce) / fmax(1, fabs(ce)));
            bad_pred += fabs(p - 0.5) > 1e-4 && ((bool *)o[0]->data)[i] != (p > 0.5);
            for (int j = 0; j < F; j++) gw[j] += (p - t) * xv[i * F + j] / N;
            gb += (p - t) / N;
        }
        tn_array *nw = tn_shared_get_value(w), *nb = tn_shared_get_value(b);
        for (int j = 0; j < F; j++) {
            double want = wr[j] - 0.1 * (gw[j] + 0.02 * wr[j]);
            err = fmax(err, fabs(((float *)nw->data)[j] - want));
            wr[j] = ((float *)nw->data)[j];        /* follow float32 rounding */
        }
        err = fmax(err, fabs(((float *)nb->data)[0] - (br - 0.1 * gb)));
        br = ((float *)nb->data)[0];
        tn_array_free(nw); tn_array_free(nb); tn_array_free(o[0]); tn_array_free(o[1]);
    }
    int64_t rep = 0, cap = 0;
    const char *why = "";
    if (f) tn__replay_stats(f, &rep, &cap, &why);
    CHECK(err < 1e-5 && bad_pred == 0, "8 calls against float64: error %g, %d predictions wrong", err, bad_pred);
    CHECK(cap >= 1 && rep >= 1, "captures %lld, replays %lld (%s)", (long long)cap, (long long)rep, why);
    const fake_graph *G = last_graph;
    CHECK(G != NULL, "a graph was captured");
    int h2d = 0, d2h = 0, kernels = 0, prev_kernel = -1;
    for (int k = 0; G && k < G->n; k++) {
        const fake_rec *r = &G->rec[k];
        char lb[160];
        tn__node_label(r->node, lb, sizeof lb);
        if (rec_is(r, TN_OP_GPU_FROM_HOST)) {
            h2d++;
            CHECK(r->n_dep == 0, "record %d (%s): a copy of an input follows %d nodes, none expected", k, lb, r->n_dep);
        } else if (rec_is(r, TN_OP_HOST_FROM_GPU)) {
            d2h++;
            int src = -1;      /* the record that wrote what it copies */
            for (int j = 0; j < k; j++)
                for (int o = 0; o < G->rec[j].n_out; o++)
                    if (G->rec[j].arr[G->rec[j].n_in + o].data == r->arr[0].data) src = j;
            CHECK(src >= 0 && r->n_dep == 1 && r->dep[0] == src, "record %d (%s): follows %d nodes (first %d), its source is record %d",
                  k, lb, r->n_dep, r->n_dep ? r->dep[0] : -1, src);
        } else {
            kernels++;
            bool after_prev = prev_kernel < 0;
            for (int i = 0; i < r->n_dep; i++) {
                after_prev |= r->dep[i] == prev_kernel;
                CHECK(!rec_is(&G->rec[r->dep[i]], TN_OP_HOST_FROM_GPU) || rec_conflict(r, &G->rec[r->dep[i]]),
                      "record %d (%s) waits for copy back %d without touching its memory", k, lb, r->dep[i]);
            }
            CHECK(after_prev, "record %d (%s): the kernels stay one chain (previous kernel %d)", k, lb, prev_kernel);
            prev_kernel = k;
        }
        for (int j = 0; j < k; j++)      /* every earlier record touching its memory comes first */
            CHECK(!rec_conflict(r, &G->rec[j]) || rec_reaches(G, k, j), "record %d (%s) does not follow record %d, which touches its memory", k, lb, j);
    }
    CHECK(h2d == 2 && d2h == 2 && kernels >= 5, "records: %d copies in, %d copies back, %d kernels", h2d, d2h, kernels);
    lr_free(&m);
    tn_array_free(X); tn_array_free(U); tn_array_free(W0); tn_array_free(Y);
    tn__set_backend(be_saved);
    tn__set_device_ops(ops_saved);
}

int main(void) {
    tn_init(&(tn_config){ .device = TN_DEVICE_CPU, .floatX = TN_F32, .allow_gc = true });
    use_fake_device();
    TH_RUN(test_update_folded_into_gemv_after_placement);
    TH_RUN(test_fused_group_with_transfers);
    TH_RUN(test_scan_on_the_device);
    TH_RUN(test_scan_gradient_on_the_device);
    TH_RUN(test_check_mode_passes_correct_kernels);
    TH_RUN(test_check_mode_catches_a_wrong_kernel);
    TH_RUN(test_graph_replay_alternating_buffers);
    TH_RUN(test_graph_off_cases);
    TH_RUN(test_graph_follows_the_data);
    TH_RUN(test_update_targets_move_to_device);
    TH_RUN(test_one_stream_per_function);
    TH_RUN(test_assert_no_cpu_op_says_why);
    tn__set_backend(NULL);
    tn__set_device_ops(NULL);
    tn_shutdown();
    TH_END();
}
