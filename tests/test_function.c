/* Compiled functions: copy and borrow semantics, updates, shared variables,
   allocation-free steady state, shape changes, the memory plan, debugprint. */
#include <stdlib.h>
#include <sys/resource.h>
#include "alloc_hooks.h"    /* every allocation the library makes is counted */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

static double at1(const tn_array *a, int64_t i) { return tn_array_get(a, &i); }
static double at2(const tn_array *a, int64_t i, int64_t j) { return tn_array_get(a, (int64_t[]){ i, j }); }

static tn_array *rand_f32(int ndim, const int64_t *shape, uint64_t seed) {
    return tn_array_rand_uniform(TN_F32, ndim, shape, 0.5, 2.0, seed);
}

/* Captures what a printer writes. */
static char *capture(tn_result (*fn)(const void *, FILE *), const void *arg) {
    FILE *m = tmpfile();
    if (!m) return calloc(1, 1);
    fn(arg, m);
    long len = ftell(m);
    char *buf = (char *)calloc((size_t)len + 1, 1);
    rewind(m);
    if (buf && fread(buf, 1, (size_t)len, m) != (size_t)len) buf[0] = 0;
    fclose(m);
    return buf;
}
static tn_result dp_var(const void *v, FILE *o) { return tn_debugprint((const tn_var *)v, o); }
static tn_result dp_fn(const void *f, FILE *o) { return tn_debugprint_function((const tn_func *)f, o); }
static tn_result dp_topo(const void *f, FILE *o) { return tn_print_toposort((const tn_func *)f, o); }

TEST(test_copy_output_independent) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_exp(tn_mul(x, tn_scalar_const(g, 2.0)));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f, "compile: %s", tn_last_error());
    tn_array *a = rand_f32(1, (int64_t[]){ 7 }, 1), *b = rand_f32(1, (int64_t[]){ 7 }, 2);
    tn_array *o1 = NULL, *o2 = NULL;
    CHECK(tn_call(f, &a, &o1) == TN_OK, "call 1: %s", tn_last_error());
    CHECK(tn_call(f, &b, &o2) == TN_OK, "call 2: %s", tn_last_error());
    CHECK(o1 && o2 && o1 != o2 && o1->data != o2->data && o1->live_gen == NULL, "copies");
    for (int64_t i = 0; o1 && o2 && i < 7; i++) {
        CHECK(th_close(at1(o1, i), exp(2.0 * at1(a, i)), 1e-6, 0), "first result kept at %lld", (long long)i);
        CHECK(th_close(at1(o2, i), exp(2.0 * at1(b, i)), 1e-6, 0), "second result at %lld", (long long)i);
    }
    tn_array_free(o1); tn_array_free(o2); tn_array_free(a); tn_array_free(b);
    tn_function_free(f);
    tn_graph_free(g);
}

TEST(test_borrowed_output) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *y = tn_sqr(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .borrow = true });
    tn_array *a = tn_array_rand_normal(TN_F64, 1, (int64_t[]){ 5 }, 0, 1, 3);
    tn_array *b = tn_array_rand_normal(TN_F64, 1, (int64_t[]){ 5 }, 0, 1, 4);
    tn_array *o1 = NULL, *o2 = NULL;
    CHECK(f && tn_call(f, &a, &o1) == TN_OK, "call 1: %s", tn_last_error());
    CHECK(o1 && o1->live_gen != NULL && tn_array_check(o1) == TN_OK, "borrowed and fresh");
    for (int64_t i = 0; o1 && i < 5; i++) CHECK(at1(o1, i) == at1(a, i) * at1(a, i), "value %lld", (long long)i);
    const void *data1 = o1 ? o1->data : NULL;
    CHECK(tn_call(f, &b, &o2) == TN_OK, "call 2: %s", tn_last_error());
    CHECK(o2 && o2->data == data1, "the same internal buffer is reused");
    CHECK(tn_array_check(o1) == TN_ERR_STALE, "first borrowed array is stale");
    CHECK_ERR(TN_ERR_STALE, "stale");
    CHECK(tn_array_check(o2) == TN_OK, "second is fresh");
    for (int64_t i = 0; o2 && i < 5; i++) CHECK(at1(o2, i) == at1(b, i) * at1(b, i), "value %lld", (long long)i);
    /* a borrowed output is valid until the next call: as that call's input it is refused (that
       call overwrites it, or frees it when shapes change) */
    CHECK(tn_call(f, &o2, &o1) == TN_ERR_STALE, "the function's own borrowed output as its input");
    CHECK_ERR(TN_ERR_STALE, "input 0 ('x') is a borrowed output of this function");
    /* ... also when another input changes shape, where the new plan freed its buffer before
       the call read it (the sanitizers saw the read) */
    tn_var *yv = tn_vector(g, "y", TN_F64), *outs3[2] = { tn_neg(x), tn_neg(yv) };
    tn_func *f3 = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, yv }, .n_outputs = 2,
                                                  .outputs = outs3, .borrow = true });
    tn_array *b7 = tn_array_rand_normal(TN_F64, 1, (int64_t[]){ 7 }, 0, 1, 5), *o3[2] = { NULL, NULL };
    CHECK(f3 && tn_call(f3, (tn_array *[]){ a, b }, o3) == TN_OK, "f3: %s", tn_last_error());
    CHECK(tn_call(f3, (tn_array *[]){ o3[0], b7 }, o3) == TN_ERR_STALE, "its own output with a new shape beside it");
    CHECK_ERR(TN_ERR_STALE, "input 0 ('x') is a borrowed output of this function");
    tn_array_free(b7);
    tn_function_free(f3);
    tn_array_free(o2);                 /* no-op on a borrowed array */
    /* copy and borrow mixed per output */
    tn_var *outs[2] = { y, tn_neg(x) };
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = outs,
                                                  .borrow_outputs = (const bool[]){ false, true } });
    tn_array *r[2] = { NULL, NULL };
    CHECK(f2 && tn_call(f2, &a, r) == TN_OK, "mixed: %s", tn_last_error());
    CHECK(r[0] && !r[0]->live_gen && r[1] && r[1]->live_gen, "per-output borrow");
    for (int64_t i = 0; r[0] && r[1] && i < 5; i++) CHECK(at1(r[1], i) == -at1(a, i) && at1(r[0], i) == at1(a, i) * at1(a, i), "values");
    tn_array_free(r[0]);
    tn_array_free(a); tn_array_free(b);
    tn_function_free(f); tn_function_free(f2);
    tn_graph_free(g);
}

/* w <- w - 0.1 * w * x; the output w*x must use the old w, and so must the update. */
TEST(test_updates_read_old_values) {
    tn_graph *g = tn_graph_new();
    int64_t n = 6;
    tn_array *w0 = tn_array_rand_uniform(TN_F64, 1, &n, -1, 1, 5);
    tn_var *w = tn_shared(g, "w", w0);
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *wx = tn_mul(w, x);
    tn_var *neww = tn_sub(w, tn_mul(tn_scalar_const(g, 0.1), wx));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = (tn_var *[]){ wx, w },
                                                 .n_updates = 1, .updates = &(tn_update){ w, neww } });
    CHECK(f, "compile: %s", tn_last_error());
    double ref[6];
    for (int64_t i = 0; i < n; i++) ref[i] = at1(w0, i);
    for (int it = 0; f && it < 4; it++) {
        tn_array *xv = tn_array_rand_uniform(TN_F64, 1, &n, -1, 1, 100 + it), *o[2] = { NULL, NULL };
        CHECK(tn_call(f, &xv, o) == TN_OK, "call %d: %s", it, tn_last_error());
        for (int64_t i = 0; o[0] && o[1] && i < n; i++) {
            double xi = at1(xv, i);
            CHECK(th_close(at1(o[0], i), ref[i] * xi, 1e-14, 1e-15), "it %d: output w*x uses old w at %lld", it, (long long)i);
            CHECK(at1(o[1], i) == ref[i], "it %d: output w is the old w at %lld", it, (long long)i);
            ref[i] = ref[i] - 0.1 * (ref[i] * xi);
        }
        const tn_array *cur = tn_shared_get(w);
        for (int64_t i = 0; i < n; i++) CHECK(th_close(at1(cur, i), ref[i], 1e-14, 1e-15), "it %d: new w at %lld", it, (long long)i);
        tn_array_free(o[0]); tn_array_free(o[1]); tn_array_free(xv);
    }
    tn_array_free(w0);
    tn_function_free(f);
    tn_graph_free(g);
}

/* a <- b, b <- a: both read the values from before the call. */
TEST(test_swap_updates) {
    tn_graph *g = tn_graph_new();
    tn_array *av = tn_array_full(TN_F32, 1, (int64_t[]){ 3 }, 1.0), *bv = tn_array_full(TN_F32, 1, (int64_t[]){ 3 }, 2.0);
    tn_var *a = tn_shared(g, "a", av), *b = tn_shared(g, "b", bv);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_updates = 2, .updates = (tn_update[]){ { a, b }, { b, a } } });
    CHECK(f && tn_call(f, NULL, NULL) == TN_OK, "call: %s", tn_last_error());
    CHECK(at1(tn_shared_get(a), 2) == 2.0 && at1(tn_shared_get(b), 0) == 1.0, "swapped");
    CHECK(tn_call(f, NULL, NULL) == TN_OK, "call 2");
    CHECK(at1(tn_shared_get(a), 1) == 1.0 && at1(tn_shared_get(b), 1) == 2.0, "swapped back");
    tn_array_free(av); tn_array_free(bv);
    tn_function_free(f);
    tn_graph_free(g);
}

TEST(test_shared_between_calls) {
    tn_graph *g = tn_graph_new();
    tn_array *w0 = rand_f32(2, (int64_t[]){ 2, 3 }, 9);
    tn_var *w = tn_shared(g, "w", w0);
    tn_var *x = tn_matrix(g, "x", TN_F32);
    tn_var *y = tn_add(w, x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .borrow = true });
    tn_array *xv = rand_f32(2, (int64_t[]){ 2, 3 }, 10), *o = NULL;
    CHECK(f && tn_call(f, &xv, &o) == TN_OK, "call: %s", tn_last_error());
    CHECK(o && th_close(at2(o, 1, 2), (double)((float)at2(w0, 1, 2) + (float)at2(xv, 1, 2)), 1e-6, 0), "w + x");
    tn_array *w1 = rand_f32(2, (int64_t[]){ 2, 3 }, 11);
    CHECK(tn_shared_set_value(w, w1) == TN_OK, "set");
    CHECK(tn_call(f, &xv, &o) == TN_OK, "call 2: %s", tn_last_error());
    CHECK(o && th_close(at2(o, 0, 1), (double)((float)at2(w1, 0, 1) + (float)at2(xv, 0, 1)), 1e-6, 0), "uses the new w");
    /* a new shape for the shared value and the input: replanned */
    tn_array *w2 = rand_f32(2, (int64_t[]){ 4, 1 }, 12), *x2 = rand_f32(2, (int64_t[]){ 4, 5 }, 13);
    CHECK(tn_shared_set_value(w, w2) == TN_OK, "set new shape");
    CHECK(tn_call(f, &x2, &o) == TN_OK, "call 3: %s", tn_last_error());
    CHECK(o && o->shape[0] == 4 && o->shape[1] == 5, "broadcast shape");
    for (int i = 0; o && i < 4; i++)
        for (int j = 0; j < 5; j++)
            CHECK(th_close(at2(o, i, j), (double)((float)at2(w2, i, 0) + (float)at2(x2, i, j)), 1e-6, 0), "(%d,%d)", i, j);
    tn_array *got = tn_shared_get_value(w);
    CHECK(got && got->shape[0] == 4 && at2(got, 3, 0) == at2(w2, 3, 0), "get_value");
    tn_array_free(got);
    tn_array_free(w0); tn_array_free(w1); tn_array_free(w2); tn_array_free(xv); tn_array_free(x2);
    tn_function_free(f);
    tn_graph_free(g);
}

/* eye with symbolic n (tn_eye_var): the same n, m, k call after call
   allocates nothing; a new n re-plans (a new buffer), and back again. */
TEST(test_eye_var_steady_state) {
    tn_graph *g = tn_graph_new();
    tn_var *n = tn_scalar(g, "n", TN_I64), *k = tn_scalar(g, "k", TN_I64), *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_add(tn_eye_var(TN_F32, n, NULL, k), x);
    tn_func *f = y ? tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = (tn_var *[]){ n, k, x }, .n_outputs = 1,
                                                     .outputs = &y, .borrow = true }) : NULL;
    CHECK(f, "compile: %s", tn_last_error());
    tn_array *n4 = tn_array_scalar(TN_I64, 4), *n6 = tn_array_scalar(TN_I64, 6), *k1 = tn_array_scalar(TN_I64, 1);
    tn_array *x4 = tn_array_zeros(TN_F32, TN_SHAPE(4)), *x6 = tn_array_zeros(TN_F32, TN_SHAPE(6)), *o = NULL;
    CHECK(f && tn_call(f, (tn_array *[]){ n4, k1, x4 }, &o) == TN_OK, "n = 4: %s", tn_last_error());
    CHECK(f && tn_call(f, (tn_array *[]){ n4, k1, x4 }, &o) == TN_OK, "n = 4 again: %s", tn_last_error());
    long before = th_alloc_count;
    for (int i = 0; f && i < 20; i++) CHECK(tn_call(f, (tn_array *[]){ n4, k1, x4 }, &o) == TN_OK, "call %d: %s", i, tn_last_error());
    CHECK(th_alloc_count == before, "calls with the same n allocated %ld times", th_alloc_count - before);
    CHECK(o && o->shape[0] == 4 && o->shape[1] == 4 && at2(o, 0, 1) == 1 && at2(o, 1, 1) == 0 && at2(o, 3, 0) == 0, "eye(4, k=1)");
    CHECK(f && tn_call(f, (tn_array *[]){ n6, k1, x6 }, &o) == TN_OK, "n = 6: %s", tn_last_error());
    CHECK(o && o->shape[0] == 6 && o->shape[1] == 6 && at2(o, 4, 5) == 1 && at2(o, 5, 5) == 0, "eye(6, k=1)");
    CHECK(f && tn_call(f, (tn_array *[]){ n4, k1, x6 }, &o) == TN_ERR_SHAPE, "n = 4 with x of 6: a shape error");
    CHECK_ERR(TN_ERR_SHAPE, "(4, 4)");
    CHECK(f && tn_call(f, (tn_array *[]){ n4, k1, x4 }, &o) == TN_OK, "n = 4 once more: %s", tn_last_error());
    CHECK(o && o->shape[0] == 4 && at2(o, 2, 3) == 1, "eye(4, k=1) once more");
    tn_array_free(n4); tn_array_free(n6); tn_array_free(k1); tn_array_free(x4); tn_array_free(x6);
    tn_function_free(f);
    tn_graph_free(g);
}

/* The steady loop: same shapes, borrowed outputs, an update: no allocation. */
TEST(test_steady_state_allocates_nothing) {
    tn_graph *g = tn_graph_new();
    int64_t n = 1000;
    tn_array *w0 = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 21);
    tn_var *w = tn_shared(g, "w", w0);
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *h = tn_tanh(tn_add(tn_mul(w, x), tn_exp(x)));
    tn_var *neww = tn_sub(w, tn_mul(tn_scalar_const(g, 0.01), h));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &h, .borrow = true,
                                                 .n_updates = 1, .updates = &(tn_update){ w, neww } });
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 22), *o = NULL;
    CHECK(f && tn_call(f, &xv, &o) == TN_OK, "warm-up: %s", tn_last_error());
    CHECK(tn_call(f, &xv, &o) == TN_OK, "warm-up 2: %s", tn_last_error());
    long before = th_alloc_count;
    for (int i = 0; i < 50; i++) CHECK(tn_call(f, &xv, &o) == TN_OK, "call %d: %s", i, tn_last_error());
    CHECK(th_alloc_count == before, "steady calls allocated %ld times", th_alloc_count - before);
    /* and the values are still right: one more step against a float64 reference */
    tn_array *wold = tn_shared_get_value(w);
    CHECK(tn_call(f, &xv, &o) == TN_OK, "call");
    for (int64_t i = 0; wold && o && i < n; i += 97) {
        double wi = at1(wold, i), xi = at1(xv, i), hi = tanh(wi * xi + exp(xi));
        CHECK(th_close(at1(o, i), hi, 1e-5, 1e-6), "h at %lld", (long long)i);
        CHECK(th_close(at1(tn_shared_get(w), i), wi - 0.01 * hi, 1e-5, 1e-6), "w at %lld", (long long)i);
    }
    tn_array_free(wold); tn_array_free(w0); tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

static long minor_faults(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

/* A new 64 MB output each call, the caller freeing the last one: a fresh
   block would page-fault 16,384 times a call; the host pool's reused block
   none (minor faults, getrusage). With the pool off (host_cache_mb=0) the
   faults come back, so the count is the pool's doing: 32 a call with huge
   pages (2 MiB each), 16,384 without. */
TEST(test_host_pool_steady_loop_faults_nothing) {
    tn_graph *g = tn_graph_new();
    int64_t n = (int64_t)1 << 24;
    tn_array *x0 = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 23);
    tn_var *x = tn_shared(g, "x", x0);
    tn_var *y = tn_add(tn_mul(x, tn_scalar_const(g, 2.0)), tn_scalar_const(g, 1.0));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y });
    tn_array *o = NULL;
    CHECK(f, "compile: %s", tn_last_error());
    tn_config saved = *tn_get_config(), off = saved;
    off.host_cache_mb = -1;
    long per_call[2] = { 0, 0 };
    for (int pass = 0; f && pass < 2; pass++) {
        if (pass == 1) tn_init(&off);
        for (int i = 0; i < 3; i++) { tn_array_free(o); o = NULL; CHECK(tn_call(f, NULL, &o) == TN_OK, "warm-up: %s", tn_last_error()); }
        long f0 = minor_faults();
        for (int i = 0; i < 10; i++) { tn_array_free(o); o = NULL; CHECK(tn_call(f, NULL, &o) == TN_OK, "call %d: %s", i, tn_last_error()); }
        per_call[pass] = (minor_faults() - f0) / 10;
        int64_t k = 12345;
        CHECK(o && th_close(at1(o, k), 2 * at1(x0, k) + 1, 1e-6, 0), "value at %lld", (long long)k);
    }
    tn_init(&saved);
    printf("64 MB output each call: %ld minor faults a call with the pool, %ld without\n", per_call[0], per_call[1]);
    CHECK(per_call[0] == 0, "%ld minor page faults a steady call", per_call[0]);
    CHECK(per_call[1] >= 16, "without the pool only %ld faults a call: the test measures nothing", per_call[1]);
    tn_array_free(o); tn_array_free(x0);
    tn_function_free(f);
    tn_graph_free(g);
}

/* The pool's rules: a freed large block is reused for its size class, the
   cap holds, a failed allocation drains the pool and tries again, and with
   nothing to drain an injected failure is still TN_ERR_OOM naming the call. */
#define pool_cached() __atomic_load_n(&tn__hpool.cached, __ATOMIC_RELAXED)
TEST(test_host_pool_bounded_and_drained) {
    tn__host_pool_drain();
    long live0 = atomic_load(&th_alloc_live);
    CHECK(pool_cached() == 0, "drained pool holds %zu bytes", pool_cached());
    int64_t n3 = (3 << 20) / 4, n5 = (5 << 20) / 4;
    tn_array *a = tn_array_empty(TN_F32, 1, &n3), *b = tn_array_empty(TN_F32, 1, &n3);
    CHECK(a && b, "%s", tn_last_error());
    void *pa = a ? a->data : NULL;
    tn_array_free(a);
    CHECK(pool_cached() == (size_t)3 << 20, "after a free the pool holds %zu bytes", pool_cached());
    a = tn_array_zeros(TN_F32, 1, &n3);
    CHECK(a && a->data == pa && pool_cached() == 0, "the block is not reused");
    CHECK(a && tn_array_get(a, (int64_t[]){ n3 - 1 }) == 0, "a reused block is not zeroed by tn_array_zeros");
    /* the cap: 4 MiB keeps one of two 3 MiB blocks */
    tn_config saved = *tn_get_config(), small = saved;
    small.host_cache_mb = 4;
    tn_init(&small);
    tn_array_free(a); tn_array_free(b);
    CHECK(pool_cached() == (size_t)3 << 20, "cap 4 MiB: the pool holds %zu bytes", pool_cached());
    CHECK(atomic_load(&th_alloc_live) == live0 + 1, "%ld blocks live", atomic_load(&th_alloc_live) - live0);
    /* a failure with a block cached: drained, tried again, no error */
    th_alloc_fail_at = atomic_load(&th_alloc_count) + 1;
    tn_array *c = tn_array_empty(TN_F32, 1, &n5);
    th_alloc_fail_at = -1;
    CHECK(c, "a failed allocation with a cached block: %s", tn_last_error());
    CHECK(pool_cached() == 0, "the failure left %zu bytes cached", pool_cached());
    tn_array_free(c);
    tn__host_pool_drain();
    /* nothing to drain: the injected failure is the caller's error */
    th_alloc_fail_at = atomic_load(&th_alloc_count) + 2;     /* the block, after the buffer's record */
    c = tn_array_empty(TN_F32, 1, &n5);
    th_alloc_fail_at = -1;
    CHECK(!c && tn_last_result() == TN_ERR_OOM && !strncmp(tn_last_error(), "tn_array_empty: out of host memory", 34),
          "want TN_ERR_OOM from tn_array_empty: %s", tn_last_error());
    tn_array_free(c);
    tn_init(&saved);
    CHECK(atomic_load(&th_alloc_live) == live0, "%ld blocks not freed", atomic_load(&th_alloc_live) - live0);
}

TEST(test_changing_shapes) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F64), *v = tn_row(g, "v", TN_F64);
    tn_var *y = tn_exp(tn_sub(x, v));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, v }, .n_outputs = 1, .outputs = &y, .borrow = true });
    int64_t shapes[][2] = { { 3, 4 }, { 3, 4 }, { 1, 9 }, { 7, 2 }, { 0, 5 }, { 3, 4 } };
    for (int k = 0; f && k < 6; k++) {
        tn_array *xv = tn_array_rand_normal(TN_F64, 2, shapes[k], 0, 1, 30 + k);
        tn_array *vv = tn_array_rand_normal(TN_F64, 2, (int64_t[]){ 1, shapes[k][1] }, 0, 1, 40 + k);
        tn_array *o = NULL;
        CHECK(tn_call(f, (tn_array *[]){ xv, vv }, &o) == TN_OK, "shape %d: %s", k, tn_last_error());
        CHECK(o && o->shape[0] == shapes[k][0] && o->shape[1] == shapes[k][1], "out shape %d", k);
        for (int64_t i = 0; o && i < shapes[k][0]; i++)
            for (int64_t j = 0; j < shapes[k][1]; j++)
                CHECK(th_close(at2(o, i, j), exp(at2(xv, i, j) - at2(vv, 0, j)), 1e-14, 0), "k %d (%lld,%lld)", k, (long long)i, (long long)j);
        tn_array_free(xv); tn_array_free(vv);
    }
    tn_function_free(f);
    tn_graph_free(g);
}

/* Strided inputs (a transposed and a stepped view) are read in place. */
TEST(test_strided_inputs) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32), *y = tn_matrix(g, "y", TN_F32);
    tn_var *z = tn_mul(x, y);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 1, .outputs = &z });
    tn_array *base = rand_f32(2, (int64_t[]){ 4, 6 }, 50);
    tn_array *xt = tn_array_transpose(base, NULL);                    /* (6, 4) */
    tn_array *b2 = rand_f32(2, (int64_t[]){ 6, 8 }, 51);
    tn_array *ys = tn_array_slice(b2, 1, 0, 8, 2);                    /* (6, 4), step 2 */
    tn_array *o = NULL;
    CHECK(f && tn_call(f, (tn_array *[]){ xt, ys }, &o) == TN_OK, "call: %s", tn_last_error());
    for (int i = 0; o && i < 6; i++)
        for (int j = 0; j < 4; j++)
            CHECK(th_close(at2(o, i, j), (double)((float)at2(base, j, i) * (float)at2(b2, i, 2 * j)), 1e-6, 0), "(%d,%d)", i, j);
    tn_array_free(o); tn_array_free(xt); tn_array_free(ys); tn_array_free(base); tn_array_free(b2);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Outputs that are directly an input, a constant or a shared variable. */
TEST(test_outputs_that_are_leaves) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_array *cv = tn_array_arange(TN_F64, 0, 4, 1);
    tn_var *c = tn_constant(g, cv);
    tn_array *sv = rand_f32(1, (int64_t[]){ 2 }, 60);
    tn_var *s = tn_shared(g, "s", sv);
    tn_var *outs[3] = { x, c, s };
    for (int borrow = 0; borrow < 2; borrow++) {
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 3, .outputs = outs, .borrow = borrow });
        tn_array *xv = rand_f32(1, (int64_t[]){ 5 }, 61), *o[3] = { NULL, NULL, NULL };
        CHECK(f && tn_call(f, &xv, o) == TN_OK, "borrow %d: %s", borrow, tn_last_error());
        CHECK(o[0] && o[1] && o[2], "outputs");
        if (o[0] && o[1] && o[2]) {
            CHECK(borrow ? o[0]->data == xv->data : o[0]->data != xv->data, "input: copy or alias");
            for (int64_t i = 0; i < 5; i++) CHECK(at1(o[0], i) == at1(xv, i), "input value");
            for (int64_t i = 0; i < 4; i++) CHECK(at1(o[1], i) == (double)i, "constant value");
            CHECK(o[2]->shape[0] == 2 && at1(o[2], 1) == at1(sv, 1), "shared value");
            if (!borrow) {
                tn_array_set(o[2], (int64_t[]){ 1 }, 77.0);        /* a copy: the shared value is untouched */
                CHECK(at1(tn_shared_get(s), 1) == at1(sv, 1), "copied shared");
                CHECK(o[2] != tn_shared_get(s), "distinct");
            } else {
                CHECK(o[2]->live_gen != NULL && o[0]->live_gen != NULL, "borrowed leaves are marked");
            }
        }
        if (!borrow) for (int i = 0; i < 3; i++) tn_array_free(o[i]);
        if (borrow && o[0]) {
            double x0 = at1(xv, 0);
            tn_array_free(xv);                           /* the borrowed alias keeps the storage alive */
            xv = NULL;
            CHECK(at1(o[0], 0) == x0, "alias outlives the freed input");
        }
        tn_array_free(xv);
        tn_function_free(f);
    }
    /* no inputs at all, a constant output */
    tn_func *f0 = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &c });
    tn_array *o0 = NULL;
    CHECK(f0 && tn_call(f0, NULL, &o0) == TN_OK && o0 && at1(o0, 3) == 3.0, "constant-only function: %s", tn_last_error());
    tn_array_free(o0);
    tn_function_free(f0);
    tn_array_free(cv); tn_array_free(sv);
    tn_graph_free(g);
}

TEST(test_several_outputs_shared_subexpression) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *e = tn_exp(x);
    tn_var *outs[4] = { e, tn_add(e, x), tn_mul(e, e), e };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 4, .outputs = outs });
    tn_array *xv = tn_array_rand_normal(TN_F64, 1, (int64_t[]){ 9 }, 0, 1, 70), *o[4] = { 0 };
    CHECK(f && tn_call(f, &xv, o) == TN_OK, "call: %s", tn_last_error());
    for (int64_t i = 0; o[0] && o[3] && i < 9; i++) {
        double xi = at1(xv, i), ei = exp(xi);
        CHECK(th_close(at1(o[0], i), ei, 1e-15, 0) && th_close(at1(o[1], i), ei + xi, 1e-15, 0) &&
              th_close(at1(o[2], i), ei * ei, 1e-15, 0) && at1(o[3], i) == at1(o[0], i), "values at %lld", (long long)i);
    }
    CHECK(o[0] != o[3], "the same output twice gives two copies");
    for (int i = 0; i < 4; i++) tn_array_free(o[i]);
    tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* A copied output is the array its step wrote (no copy, no plan buffer):
   fresh each call, independent across calls, freeable in any order; one
   read later in the call (and by a would-be in-place step) stays intact. */
TEST(test_fresh_outputs) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *y = tn_exp(tn_mul(x, tn_scalar_const(g, 2.0)));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    CHECK(f, "compile: %s", tn_last_error());
    if (!f) { tn_graph_free(g); return; }
    int64_t n = 37;
    tn_array *in[3], *o[3] = { 0 };
    for (int c = 0; c < 3; c++) {
        in[c] = tn_array_rand_normal(TN_F64, 1, &n, 0, 1, 40 + (uint64_t)c);
        CHECK(tn_call(f, &in[c], &o[c]) == TN_OK, "call %d: %s", c, tn_last_error());
    }
    const tn__slot *sl = &f->slots[f->out_slot[0]];
    CHECK(sl->fresh && sl->phys < 0 && sl->own == NULL, "the output slot is written into the caller's array (fresh %d, phys %d)", sl->fresh, sl->phys);
    CHECK(f->n_phys == 0, "one fused step, its output fresh: %d plan buffers", f->n_phys);
    CHECK(o[0] && o[1] && o[2] && o[0]->base != o[1]->base && o[1]->base != o[2]->base && o[0]->data != o[2]->data,
          "three calls, three arrays");
    for (int c = 0; c < 3; c++)
        for (int64_t i = 0; o[c] && i < n; i++)
            CHECK(th_close(at1(o[c], i), exp(2.0 * at1(in[c], i)), 1e-15, 0), "call %d kept its value at %lld", c, (long long)i);
    tn_array_free(o[1]);                               /* any order */
    tn_array_free(o[0]);
    tn_array *again = NULL;
    CHECK(tn_call(f, &in[0], &again) == TN_OK && again && again != o[2], "after frees: %s", tn_last_error());
    for (int64_t i = 0; again && o[2] && i < n; i++)
        CHECK(th_close(at1(again, i), exp(2.0 * at1(in[0], i)), 1e-15, 0) && th_close(at1(o[2], i), exp(2.0 * at1(in[2], i)), 1e-15, 0),
              "values at %lld", (long long)i);
    tn_array_free(again); tn_array_free(o[2]);
    /* a shape change re-plans; the output follows */
    int64_t n2 = 5;
    tn_array *small = tn_array_rand_normal(TN_F64, 1, &n2, 0, 1, 44), *os = NULL;
    CHECK(tn_call(f, &small, &os) == TN_OK && os && os->shape[0] == 5, "new shape: %s", tn_last_error());
    for (int64_t i = 0; os && i < n2; i++)
        CHECK(th_close(at1(os, i), exp(2.0 * at1(small, i)), 1e-15, 0), "new shape value %lld", (long long)i);
    tn_array_free(os); tn_array_free(small);
    tn_function_free(f);

    /* e is an output and is read by sum(e) and by neg(e) marked in-place */
    tn_var *e = tn_exp(x), *s = tn_sum(e, NULL, 0, false), *ne = tn_neg(e);
    ne->inplace = 1;
    f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 3, .outputs = (tn_var *[]){ e, s, ne },
                                        .mode = TN_MODE_FAST_COMPILE });
    tn_array *r[3] = { 0 };
    CHECK(f && tn_call(f, &in[1], r) == TN_OK, "read later: %s", tn_last_error());
    double ref = 0;
    for (int64_t i = 0; r[0] && r[2] && i < n; i++) {
        double ei = exp(at1(in[1], i));
        ref += ei;
        CHECK(th_close(at1(r[0], i), ei, 1e-15, 0) && th_close(at1(r[2], i), -ei, 1e-15, 0), "e and -e at %lld", (long long)i);
    }
    CHECK(r[0] && r[2] && r[0]->data != r[2]->data, "neg(e) did not write over the output e");
    CHECK(r[1] && th_close(at1(r[1], 0), ref, 1e-13, 0), "sum(e) read the output: %g vs %g", r[1] ? at1(r[1], 0) : NAN, ref);
    for (int k = 0; k < 3; k++) tn_array_free(r[k]);
    tn_function_free(f);
    for (int c = 0; c < 3; c++) tn_array_free(in[c]);
    tn_graph_free(g);
}

/* Outputs that cannot be written in place are copies: listed twice, an
   input, a shared value, a constant, a view; each is the caller's own. */
TEST(test_copied_outputs_kinds) {
    tn_graph *g = tn_graph_new();
    int64_t n = 9;
    tn_array *sv = tn_array_rand_normal(TN_F64, 1, &n, 0, 1, 50), *cv = tn_array_rand_normal(TN_F64, 1, &n, 0, 1, 51);
    tn_var *x = tn_vector(g, "x", TN_F64), *sh = tn_shared(g, "s", sv), *k = tn_constant(g, cv);
    tn_var *y = tn_sqr(x);
    tn_var *outs[6] = { y, y, x, sh, k, tn_reshape(y, 2, (int64_t[]){ 3, 3 }) };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 6, .outputs = outs });
    CHECK(f, "compile: %s", tn_last_error());
    tn_array *xv = tn_array_rand_normal(TN_F64, 1, &n, 0, 1, 52), *o[6] = { 0 };
    CHECK(f && tn_call(f, &xv, o) == TN_OK, "call: %s", tn_last_error());
    bool all = true;
    for (int i = 0; i < 6; i++) all = all && o[i] && !o[i]->live_gen;
    CHECK(all, "six caller-owned arrays");
    if (f && all) {
        CHECK(!f->slots[f->out_slot[0]].fresh, "an output listed twice is copied");
        CHECK(o[0]->base != o[1]->base && o[2]->base != xv->base && o[3]->base != tn_shared_get(sh)->base &&
              o[4]->base != o[0]->base, "no output shares storage with another, the input, the shared value");
        for (int64_t i = 0; i < n; i++) {
            double xi = at1(xv, i);
            CHECK(at1(o[0], i) == xi * xi && at1(o[1], i) == xi * xi && at1(o[2], i) == xi, "y, y, x at %lld", (long long)i);
            CHECK(at1(o[3], i) == at1(sv, i) && at1(o[4], i) == at1(cv, i), "shared and constant at %lld", (long long)i);
            CHECK(at2(o[5], i / 3, i % 3) == xi * xi, "reshape at %lld", (long long)i);
        }
        /* changing one copy changes nothing else */
        tn_array_set(o[0], (int64_t[]){ 0 }, 1234.0);
        tn_array_set(o[2], (int64_t[]){ 1 }, 1234.0);
        tn_array_set(o[3], (int64_t[]){ 2 }, 1234.0);
        CHECK(at1(o[1], 0) != 1234.0 && at1(xv, 1) != 1234.0 && at1(tn_shared_get(sh), 2) != 1234.0, "independent copies");
        tn_array *sv2 = tn_array_full(TN_F64, 1, &n, 7.0);
        CHECK(tn_shared_set_value(sh, sv2) == TN_OK && at1(o[3], 4) == at1(sv, 4), "set_value leaves the returned copy");
        tn_array_free(sv2);
    }
    for (int i = 5; i >= 0; i--) tn_array_free(o[i]);
    tn_function_free(f);
    tn_array_free(xv); tn_array_free(sv); tn_array_free(cv);
    tn_graph_free(g);
}

/* An output that is also an update value: the caller gets the array its step
   wrote, the shared variable a copy; later calls change neither. Borrowed
   outputs beside it stay borrowed (and go stale). */
TEST(test_fresh_output_and_update) {
    tn_graph *g = tn_graph_new();
    int64_t n = 11;
    tn_array *a0 = tn_array_rand_normal(TN_F64, 1, &n, 0, 1, 60);
    tn_var *acc = tn_shared(g, "acc", a0), *x = tn_vector(g, "x", TN_F64);
    tn_var *na = tn_add(acc, x), *bo = tn_mul(x, x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = (tn_var *[]){ na, bo },
                                                 .borrow_outputs = (const bool[]){ false, true },
                                                 .n_updates = 1, .updates = &(tn_update){ acc, na } });
    CHECK(f, "compile: %s", tn_last_error());
    double ref[11];
    for (int64_t i = 0; i < n; i++) ref[i] = at1(a0, i);
    tn_array *keep[3] = { 0 }, *borrowed[3] = { 0 };
    tn_array *xv = tn_array_rand_normal(TN_F64, 1, &n, 0, 1, 61);
    for (int c = 0; f && c < 3; c++) {
        tn_array *o[2] = { 0 };
        CHECK(tn_call(f, &xv, o) == TN_OK, "call %d: %s", c, tn_last_error());
        keep[c] = o[0];
        borrowed[c] = o[1];
        CHECK(o[0] && !o[0]->live_gen && o[1] && o[1]->live_gen, "call %d: copied and borrowed", c);
        CHECK(o[0] && o[0]->base != tn_shared_get(acc)->base, "call %d: the shared value is not the caller's array", c);
        for (int64_t i = 0; i < n; i++) ref[i] += at1(xv, i);
        for (int64_t i = 0; o[0] && i < n; i++) CHECK(at1(o[0], i) == ref[i] && at1(tn_shared_get(acc), i) == ref[i], "call %d at %lld", c, (long long)i);
    }
    CHECK(borrowed[0] && tn_array_check(borrowed[0]) == TN_ERR_STALE && tn_array_check(borrowed[2]) == TN_OK, "borrow semantics unchanged");
    for (int64_t i = 0; keep[0] && keep[1] && i < n; i++)
        CHECK(at1(keep[1], i) - at1(keep[0], i) == at1(xv, i) || th_close(at1(keep[1], i) - at1(keep[0], i), at1(xv, i), 1e-12, 1e-15),
              "earlier outputs kept at %lld", (long long)i);
    tn_array_set(keep[2], (int64_t[]){ 0 }, 99.0);
    CHECK(at1(tn_shared_get(acc), 0) != 99.0, "the caller's array is not the shared value");
    for (int c = 0; c < 3; c++) tn_array_free(keep[c]);
    tn_array_free(xv); tn_array_free(a0);
    tn_function_free(f);
    tn_graph_free(g);
}

/* The memory plan reuses dead buffers; inplace nodes write over their input;
   allow_gc=0 keeps every buffer. */
TEST(test_memory_plan) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *y = x;
    for (int i = 0; i < 6; i++) y = tn_sin(y);          /* a chain: two buffers suffice */
    /* FAST_COMPILE: no fusion, no inplace pass, so the plan sees every node */
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .mode = TN_MODE_FAST_COMPILE });
    tn_array *xv = tn_array_rand_normal(TN_F64, 1, (int64_t[]){ 100 }, 0, 1, 80), *o = NULL;
    CHECK(f && tn_call(f, &xv, &o) == TN_OK, "call: %s", tn_last_error());
    CHECK(f && f->n_phys == 2, "chain of 6 uses %d buffers", f ? f->n_phys : -1);
    for (int64_t i = 0; o && i < 100; i++) {
        double r = at1(xv, i);
        for (int k = 0; k < 6; k++) r = sin(r);
        CHECK(th_close(at1(o, i), r, 1e-15, 0), "chain value %lld", (long long)i);
    }
    tn_array_free(o);
    tn_function_free(f);

    tn_config saved = *tn_get_config(), cfg = saved;
    cfg.allow_gc = false;
    tn_init(&cfg);
    f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .mode = TN_MODE_FAST_COMPILE });
    CHECK(f && tn_call(f, &xv, &o) == TN_OK, "no gc: %s", tn_last_error());
    /* five intermediates; the copied output has no plan buffer (its step writes a new array) */
    CHECK(f && f->n_phys == 5, "allow_gc=0 keeps %d buffers", f ? f->n_phys : -1);
    tn_array_free(o);
    tn_function_free(f);
    tn_init(&saved);

    /* inplace: neg(exp(x)) may write over exp's buffer, never over the input
       (borrowed outputs: a copied one gets a new array instead of sharing) */
    tn_var *e = tn_exp(x), *n = tn_neg(e), *m = tn_neg(x);
    n->inplace = 1;
    m->inplace = 1;
    f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = (tn_var *[]){ n, m }, .borrow = true,
                                        .mode = TN_MODE_FAST_COMPILE });
    tn_array *keep = tn_array_copy(xv), *r[2] = { 0 };
    CHECK(f && tn_call(f, &xv, r) == TN_OK, "inplace: %s", tn_last_error());
    CHECK(f && f->n_phys == 2, "inplace shares exp's buffer: %d buffers", f ? f->n_phys : -1);
    for (int64_t i = 0; r[0] && r[1] && i < 100; i++) {
        CHECK(th_close(at1(r[0], i), -exp(at1(keep, i)), 1e-15, 0), "neg(exp) %lld", (long long)i);
        CHECK(at1(r[1], i) == -at1(keep, i) && at1(xv, i) == at1(keep, i), "input untouched %lld", (long long)i);
    }
    tn_array_free(r[0]); tn_array_free(r[1]); tn_array_free(keep);
    tn_function_free(f);
    tn_array_free(xv);
    tn_graph_free(g);
}

/* View ops alias their input's buffer, recomputed every call (the input
   array changes); an output may be a view of an input or of an intermediate. */
TEST(test_views) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F64);
    tn_var *e = tn_exp(x);
    tn_var *et = tn_transpose(e, NULL);                      /* view of an intermediate */
    tn_var *xs = tn_slice(x, 1, 1, TN_NONE, 2);              /* view of the input */
    tn_var *s = tn_sin(tn_transpose(x, NULL));               /* a kernel reading a view */
    CHECK(et && xs && s, "build: %s", tn_last_error());
    for (int borrow = 0; borrow < 2 && et && xs && s; borrow++) {
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 3, .outputs = (tn_var *[]){ et, xs, s },
                                                     .borrow = borrow, .mode = TN_MODE_FAST_COMPILE });
        CHECK(f, "compile: %s", tn_last_error());
        for (int k = 0; f && k < 3; k++) {
            int64_t sh[2] = { 3 + k, 5 };
            tn_array *xv = tn_array_rand_normal(TN_F64, 2, sh, 0, 1, 90 + k), *o[3] = { 0 };
            CHECK(tn_call(f, &xv, o) == TN_OK, "call %d: %s", k, tn_last_error());
            if (!o[0] || !o[1] || !o[2]) { tn_array_free(xv); continue; }
            CHECK(o[0]->shape[0] == 5 && o[0]->shape[1] == sh[0] && o[1]->shape[1] == 2 && o[2]->shape[0] == 5, "shapes");
            if (borrow) CHECK(o[1]->data == (char *)xv->data + 8, "borrowed slice aliases the input");
            for (int i = 0; i < sh[0]; i++)
                for (int j = 0; j < 5; j++) {
                    CHECK(th_close(at2(o[0], j, i), exp(at2(xv, i, j)), 1e-15, 0), "exp(x).T");
                    CHECK(th_close(at2(o[2], j, i), sin(at2(xv, i, j)), 1e-15, 0), "sin(x.T)");
                    if (j % 2 == 1) CHECK(at2(o[1], i, j / 2) == at2(xv, i, j), "x[:, 1::2]");
                }
            if (!borrow) for (int i = 0; i < 3; i++) tn_array_free(o[i]);
            tn_array_free(xv);
        }
        tn_function_free(f);
    }
    tn_graph_free(g);
}

TEST(test_debugprint) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F32, 2, (int64_t[]){ -1, 3 }, NULL);
    tn_var *y = tn_vector(g, "y", TN_F32);
    tn_var *e = tn_exp(x);
    tn_var *z = tn_mul(tn_add(e, y), e);
    tn_var_set_name(z, "z");
    char *s = capture(dp_var, z);
    CHECK(strstr(s, "Elemwise{mul,no_inplace} [id A] <TensorType(float32, (?, 3))> 'z'"), "root line:\n%s", s);
    CHECK(strstr(s, "\n |Elemwise{add,no_inplace} [id B]"), "first child:\n%s", s);
    CHECK(strstr(s, "\n | |Elemwise{exp,no_inplace} [id C]"), "grandchild:\n%s", s);
    CHECK(strstr(s, "\n | | |x [id D] <TensorType(float32, (?, 3))>"), "leaf:\n%s", s);
    CHECK(strstr(s, "\n | |y [id E] <TensorType(float32, (?,))>"), "second input:\n%s", s);
    CHECK(strstr(s, "\n |Elemwise{exp,no_inplace} [id C]"), "repeat refers to C:\n%s", s);
    int lines = 0;
    for (char *p = s; *p; p++) lines += *p == '\n';
    CHECK(lines == 6, "a repeated node is printed once with its inputs: %d lines\n%s", lines, s);
    free(s);
    tn_var *two = tn_mul(tn_scalar_const(g, 2.0), x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 2, .outputs = (tn_var *[]){ z, two },
                                                 .mode = TN_MODE_FAST_COMPILE });
    s = capture(dp_fn, f);
    CHECK(strstr(s, "'z'   ") && strstr(s, "TensorConstant{2.0} [id"), "function:\n%s", s);
    free(s);
    s = capture(dp_topo, f);
    CHECK(strstr(s, "Elemwise{exp,no_inplace}(x)\n"), "toposort:\n%s", s);
    CHECK(strstr(s, "Elemwise{mul,no_inplace}(TensorConstant{2.0}, x)\n"), "toposort:\n%s", s);
    CHECK(strstr(s, "Elemwise{add,no_inplace}(Elemwise{exp,no_inplace}.0, y)\n"), "toposort:\n%s", s);
    char *exp_at = strstr(s, "{exp"), *add_at = strstr(s, "{add");
    CHECK(exp_at && add_at && exp_at < add_at, "exp before add:\n%s", s);
    free(s);
    tn_function_free(f);
    /* optimised: the fused node keeps the output's name and prints its program */
    f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, y }, .n_outputs = 1, .outputs = &z });
    s = capture(dp_fn, f);
    CHECK(f && strstr(s, "'z'   0") && strstr(s, " |x [id") && strstr(s, " |y [id"), "fused:\n%s", s);
    free(s);
    tn_function_free(f);
    tn_graph_free(g);
}

/* The user's graph may be freed before its functions: a function keeps a
   graph of its own, whose shared leaves only link to the user's (freeing it
   once read the user's freed shared variables as their locks; the
   sanitizers see it, make sanitize). */
TEST(test_free_graph_before_function) {
    tn_graph *g = tn_graph_new();
    tn_array *w0 = tn_array_ones(TN_F32, 1, (int64_t[]){ 3 });
    tn_var *w = tn_shared(g, "w", w0), *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_mul(w, x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y,
                                                 .n_updates = 1, .updates = &(tn_update){ w, tn_add(w, tn_lit(w, 1)) } });
    tn_array *o = NULL;
    CHECK(f && tn_call(f, &w0, &o) == TN_OK, "call: %s", tn_last_error());
    CHECK(o && tn_array_get(o, (int64_t[]){ 2 }) == 1, "w * x");
    tn_array_free(o);
    tn_graph_free(g);
    tn_function_free(f);
    tn_array_free(w0);
}

/* Theano's function options: givens (a substitution at compile time, of an
   input or a shared variable, by an expression), on_unused_input (raise by
   default, warn, ignore) and allow_input_downcast (safe casts always
   convert; a lossy one only when allowed, and then as NumPy's astype). */
static int warn_count;
static char warn_last[400];
static void warn_hook(tn_log_level lv, const char *msg, void *ud) {
    (void)ud;
    if (lv == TN_LOG_WARN) { warn_count++; snprintf(warn_last, sizeof warn_last, "%s", msg); }
}

TEST(test_function_options) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32), *y = tn_vector(g, "y", TN_F32), *k = tn_scalar(g, "k", TN_F32);
    tn_array *wv = tn_array_from_data(TN_F32, 1, (int64_t[]){ 3 }, (float[]){ 1.5f, -2.0f, 0.25f });
    tn_var *w = tn_shared(g, "w", wv);
    tn_var *out = tn_add(tn_mul(x, w), y);
    /* givens: y := 2x + k (an input by an expression), w := x (a shared variable by an input) */
    tn_var *twox = tn_add(tn_mul(x, tn_lit(x, 2)), k);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, k }, .n_outputs = 1, .outputs = &out,
                                                 .n_givens = 2, .givens = (tn_given[]){ { y, twox }, { w, x } } });
    CHECK(f != NULL, "givens: %s", tn_last_error());
    tn_array *xa = tn_array_from_data(TN_F32, 1, (int64_t[]){ 3 }, (float[]){ 0.5f, 3.0f, -1.0f }), *ka = tn_array_scalar(TN_F32, 0.75), *o = NULL;
    if (f) {
        CHECK(tn_call(f, (tn_array *[]){ xa, ka }, &o) == TN_OK, "call: %s", tn_last_error());
        const float xs[3] = { 0.5f, 3.0f, -1.0f };
        for (int i = 0; o && i < 3; i++) {
            double want = (double)xs[i] * xs[i] + (2.0 * xs[i] + 0.75);    /* x*x + (2x + k) */
            CHECK(fabs(at1(o, i) - want) < 1e-5, "givens: out[%d] = %g, want %g", i, at1(o, i), want);
        }
        tn_array_free(o); o = NULL;
    }
    tn_function_free(f);
    /* givens errors, each named */
    tn_var *xd = tn_vector(g, "xd", TN_F64), *m = tn_matrix(g, "m", TN_F32);
    struct { tn_given gv[2]; int n; tn_result code; const char *words; } bad[] = {
        { { { y, xd } }, 1, TN_ERR_DTYPE, "given 0: 'y' has type" },
        { { { y, m } }, 1, TN_ERR_DTYPE, "dtype and ndim must match" },
        { { { y, x }, { y, twox } }, 2, TN_ERR_INVALID, "'y' is given twice" },
        { { { x, y } }, 1, TN_ERR_INVALID, "'x' is both input 0 and replaced by given 0" },
        { { { y, tn_add(y, x) } }, 1, TN_ERR_GRAPH, "depends on 'y' itself" },
        { { { y, NULL } }, 1, TN_ERR_NULL, "given 0: value is NULL" },
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        tn_func *fb = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, k }, .n_outputs = 1, .outputs = &out,
                                                      .n_givens = bad[c].n, .givens = bad[c].gv, .on_unused_input = TN_UNUSED_IGNORE });
        CHECK(!fb && tn_last_result() == bad[c].code && strstr(tn_last_error(), bad[c].words),
              "bad given %zu: %s (%s)", c, tn_result_string(tn_last_result()), tn_last_error());
        tn_function_free(fb);
    }
    /* on_unused_input: k is not used by x*w */
    tn_var *xw = tn_mul(x, w);
    tn_func *fu = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, k }, .n_outputs = 1, .outputs = &xw });
    CHECK(!fu && tn_last_result() == TN_ERR_INVALID && strstr(tn_last_error(), "input 1 ('k') is not used") &&
          strstr(tn_last_error(), "on_unused_input"), "raise by default: %s", tn_last_error());
    tn_set_log(warn_hook, NULL);
    warn_count = 0;
    fu = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, k }, .n_outputs = 1, .outputs = &xw, .on_unused_input = TN_UNUSED_WARN });
    CHECK(fu && warn_count == 1 && strstr(warn_last, "input 1 ('k') is not used"), "warn: %d '%s'", warn_count, warn_last);
    tn_function_free(fu);
    warn_count = 0;
    fu = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, k }, .n_outputs = 1, .outputs = &xw, .on_unused_input = TN_UNUSED_IGNORE });
    CHECK(fu && warn_count == 0, "ignore: %d", warn_count);
    tn_set_log(NULL, NULL);
    if (fu) {      /* an unused input is still checked and counted */
        CHECK(tn_call(fu, (tn_array *[]){ xa, ka }, &o) == TN_OK && o && fabs(at1(o, 1) - 3.0 * -2.0) < 1e-6, "ignore: call %s", tn_last_error());
        tn_array_free(o); o = NULL;
    }
    tn_function_free(fu);
    tn_func *fo = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &xw, .on_unused_input = (tn_unused_input)7 });
    CHECK(!fo && tn_last_result() == TN_ERR_INVALID && strstr(tn_last_error(), "on_unused_input 7"), "bad on_unused_input: %s", tn_last_error());
    /* input dtypes: a safe cast converts; a lossy one is refused unless allowed */
    tn_func *fs = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &xw });
    tn_func *fd = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &xw, .allow_input_downcast = true });
    tn_array *xi = tn_array_from_data(TN_I32, 1, (int64_t[]){ 3 }, (int32_t[]){ 7, -3, 16777217 });      /* 2^24 + 1: not a float32 */
    tn_array *xh = tn_array_from_data(TN_F16, 1, (int64_t[]){ 3 }, (uint16_t[]){ tn_f32_to_f16(0.5f), tn_f32_to_f16(-1.25f), tn_f32_to_f16(4.0f) });
    tn_array *x64 = tn_array_from_data(TN_F64, 1, (int64_t[]){ 3 }, (double[]){ 0.1, 1e-50, 3e300 });
    CHECK(fs && fd, "compile: %s", tn_last_error());
    if (fs && fd) {
        CHECK(tn_call(fs, &xh, &o) == TN_OK && o && at1(o, 0) == 0.75 && at1(o, 1) == 2.5 && at1(o, 2) == 1.0, "float16 -> float32 converts: %s", tn_last_error());
        tn_array_free(o); o = NULL;
        CHECK(tn_call(fs, &xi, &o) == TN_ERR_DTYPE && strstr(tn_last_error(), "input 0 ('x') expects") && strstr(tn_last_error(), "int32") &&
              strstr(tn_last_error(), "allow_input_downcast"), "int32 -> float32 refused: %s", tn_last_error());
        CHECK(tn_call(fs, &x64, &o) == TN_ERR_DTYPE && strstr(tn_last_error(), "float64"), "float64 -> float32 refused: %s", tn_last_error());
        CHECK(tn_call(fd, &x64, &o) == TN_OK && o, "allowed: %s", tn_last_error());
        /* as NumPy: float32(0.1) * 1.5, float32(1e-50) = 0, float32(3e300) = inf */
        if (o) CHECK(at1(o, 0) == (double)((float)0.1 * 1.5f) && at1(o, 1) == -0.0 && isinf(at1(o, 2)) && signbit(at1(o, 1)),
                     "downcast values %g %g %g", at1(o, 0), at1(o, 1), at1(o, 2));
        tn_array_free(o); o = NULL;
        long before = th_alloc_count;
        for (int it = 0; it < 5; it++) { CHECK(tn_call(fd, &xa, &o) == TN_OK, "float32"); tn_array_free(o); o = NULL; }
        long same = th_alloc_count - before;        /* the output each call */
        before = th_alloc_count;
        for (int it = 0; it < 5; it++) { CHECK(tn_call(fd, &x64, &o) == TN_OK, "again"); tn_array_free(o); o = NULL; }
        CHECK(th_alloc_count - before == same, "the conversion buffer is kept: %ld allocations in 5 calls, %ld without conversion",
              th_alloc_count - before, same);
        CHECK(tn_call(fd, &xi, &o) == TN_OK && o && at1(o, 2) == (double)(float)16777217 * 0.25, "int32 -> float32 allowed: %g", o ? at1(o, 2) : 0);
        tn_array_free(o); o = NULL;
    }
    tn_function_free(fs); tn_function_free(fd);
    tn_array_free(xa); tn_array_free(ka); tn_array_free(wv); tn_array_free(xi); tn_array_free(xh); tn_array_free(x64);
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_copy_output_independent);
    TH_RUN(test_borrowed_output);
    TH_RUN(test_updates_read_old_values);
    TH_RUN(test_swap_updates);
    TH_RUN(test_shared_between_calls);
    TH_RUN(test_steady_state_allocates_nothing);
    TH_RUN(test_eye_var_steady_state);
    TH_RUN(test_host_pool_steady_loop_faults_nothing);
    TH_RUN(test_host_pool_bounded_and_drained);
    TH_RUN(test_changing_shapes);
    TH_RUN(test_strided_inputs);
    TH_RUN(test_outputs_that_are_leaves);
    TH_RUN(test_several_outputs_shared_subexpression);
    TH_RUN(test_memory_plan);
    TH_RUN(test_fresh_outputs);
    TH_RUN(test_copied_outputs_kinds);
    TH_RUN(test_fresh_output_and_update);
    TH_RUN(test_views);
    TH_RUN(test_debugprint);
    TH_RUN(test_free_graph_before_function);
    TH_RUN(test_function_options);
    tn_shutdown();
    TH_END();
}
