#define _POSIX_C_SOURCE 200809L
/* The placement pass run on the CPU against a stand-in device (host memory
   tagged as device 0), so the rewrites around it are checked without a GPU:
   placement rewires nodes to read transfers created after them, and the
   optimizer's passes after it (fusion, inplace) must keep their use lists exact. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"
#include "scan_seed.h"

static tn_result fake_prepare(const tn_var *n, void **s) { (void)n; *s = NULL; return TN_OK; }
static void *fake_alloc(int d, size_t b) { (void)d; return malloc(b); }
static void fake_free(int d, void *p) { (void)d; free(p); }
static tn_result fake_copy(void *dst, int dd, const void *src, int sd, size_t b) { (void)dd; (void)sd; memcpy(dst, src, b); return TN_OK; }

/* Device nodes run their CPU kernels on the stand-in memory; a scan runs its
   device loop (the step compiled for device arrays) with host copies. */
static tn_result fake_run(const tn_var *n, void *st, tn_array *const *in, tn_array *const *out) {
    (void)st;
    if (n->op == TN_OP_SCAN) {
        tn__scan_mem m = tn__scan_host_mem;
        m.device = 0;
        m.device_step = true;
        return tn__scan_run(n, in, out, &m);
    }
    if (tn__op_kind(n->op) == TN_OPK_VIEW) return tn__op_def(n->op)->cpu(n, in, out);   /* strides only */
    /* the CPU kernels refuse device arrays: show them the stand-in's host memory */
    tn_array a[32], *pa[32];
    int ni = n->n_in, no = n->n_out;
    if (ni + no > 32) return tn__err(TN_ERR_INTERNAL, "fake_run: too many operands");
    for (int i = 0; i < ni + no; i++) {
        a[i] = i < ni ? *in[i] : *out[i - ni];
        a[i].device = TN_HOST;
        pa[i] = &a[i];
    }
    return tn__op_def(n->op)->cpu(n, pa, pa + ni);
}

static void use_fake_device(void) {
    static tn_backend be;
    static const tn_device_ops ops = { fake_alloc, fake_free, fake_copy };
    tn__cuda.state = 1;
    tn__cuda.ordinal = 0;
    be = tn__cuda_backend;
    be.prepare = fake_prepare;
    be.run = fake_run;
    tn__set_backend(&be);
    tn__set_device_ops(&ops);
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p++) n++;
    return n;
}

static char *print_fn(const tn_func *f) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    tn_debugprint_function(f, m);
    fclose(m);
    return buf;
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
        CHECK(count(s, "GpuGemv") >= 1 && strstr(s, "HostFromGpu"), "placed graph:\n%s", s);
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
        CHECK(count(s, "GpuFromHost<None> [id") == 2, "one transfer per input:\n%s", s);
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
    tn_func *fd = rnn_grad_fn(gd, true, ind);
    CHECK(fd != NULL, "device grad: %s", tn_last_error());
    tn_func *fh = rnn_grad_fn(gh, false, inh);
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

int main(void) {
    tn_init(&(tn_config){ .device = TN_DEVICE_CPU, .floatX = TN_F32, .allow_gc = true });
    use_fake_device();
    TH_RUN(test_update_folded_into_gemv_after_placement);
    TH_RUN(test_fused_group_with_transfers);
    TH_RUN(test_scan_on_the_device);
    TH_RUN(test_scan_gradient_on_the_device);
    tn__set_backend(NULL);
    tn__set_device_ops(NULL);
    tn_shutdown();
    TH_END();
}
