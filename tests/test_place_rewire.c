#define _POSIX_C_SOURCE 200809L
/* The placement pass run on the CPU against a stand-in device (host memory
   tagged as device 0), so the rewrites around it are checked without a GPU:
   placement rewires nodes to read transfers created after them, and the
   optimizer's passes after it (fusion, inplace) must keep their use lists exact. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"

static tn_result fake_prepare(const tn_var *n, void **s) { (void)n; *s = NULL; return TN_OK; }
static void *fake_alloc(int d, size_t b) { (void)d; return malloc(b); }
static void fake_free(int d, void *p) { (void)d; free(p); }
static tn_result fake_copy(void *dst, int dd, const void *src, int sd, size_t b) { (void)dd; (void)sd; memcpy(dst, src, b); return TN_OK; }

static void use_fake_device(void) {
    static tn_backend be;
    static const tn_device_ops ops = { fake_alloc, fake_free, fake_copy };
    tn__cuda.state = 1;
    tn__cuda.ordinal = 0;
    be = tn__cuda_backend;
    be.prepare = fake_prepare;
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
    /* outside tn_function the pass has no targets: nothing else moves */
    CHECK(tn__func_update_targets == NULL, "targets are cleared after compiling");
    tn_graph_free(g);
    tn_array_free(xv); tn_array_free(zv); tn_array_free(mv);
}

int main(void) {
    tn_init(&(tn_config){ .device = TN_DEVICE_CPU, .floatX = TN_F32, .allow_gc = true });
    use_fake_device();
    TH_RUN(test_update_folded_into_gemv_after_placement);
    TH_RUN(test_fused_group_with_transfers);
    TH_RUN(test_update_targets_move_to_device);
    tn__set_backend(NULL);
    tn__set_device_ops(NULL);
    tn_shutdown();
    TH_END();
}
