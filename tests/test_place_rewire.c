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

int main(void) {
    tn_init(&(tn_config){ .device = TN_DEVICE_CPU, .floatX = TN_F32, .allow_gc = true });
    use_fake_device();
    TH_RUN(test_update_folded_into_gemv_after_placement);
    TH_RUN(test_fused_group_with_transfers);
    tn__set_backend(NULL);
    tn__set_device_ops(NULL);
    tn_shutdown();
    TH_END();
}
