/* bench/bench.c - every speed claim of tensor.h, measured (issues 4 and 7).

   Runs on the CPU and, where a GPU is usable, on the GPU, and prints ONE
   table: each case's time per call (median of repeats, with min and max),
   the limit it is compared to (measured in the same run: a bare driver,
   cuBLAS or memcpy loop doing the same work), the ratio, the target and
   pass/FAIL. A GPU feature that has not landed yet prints "n/a (reason)".
   Build and run (bench/README.md says what each case measures):
       make bench && build/bench [--quick] [--cpu-only] [--gpu-only]
       cc -std=c11 -O2 -I. -rdynamic bench/bench.c -o build/bench -lm -lpthread -ldl
   -rdynamic lets the bench find tn_gpu_from_host at run time (dlsym), so it
   builds before that entry point exists and uses it once it does.
   Exit status: 0 when every case ran (missed targets included), 1 when a
   case failed with an error, 2 on bad arguments. */
#define _POSIX_C_SOURCE 200809L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"

/* The configured device's context (opened by tn_cuda_init). */
#define CUDA_DEV() tn__cuda_dev_get(tn__cuda.ordinal)
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool Q;          /* --quick: fewer iterations and repeats (CI smoke) */
static int n_errors;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* >>table ---------------------------------------------------------------- */

enum { T_INFO = 0, T_RATIO, T_PCT, T_ABS, T_LIMIT };   /* how a row is judged */

typedef struct row {
    char sect[10], name[48];
    double med, lo, hi;      /* seconds per call; med <= 0: not measured */
    char limit[34];          /* what it is compared to */
    double lim;              /* seconds per call of the limit */
    int kind;                /* T_*: RATIO med/lim <= target; PCT lim/med >= target%; ABS med <= target s */
    double target;
    char rate[24];           /* GB/s, GFLOP/s, ... */
    char note[96];
    char na[160];            /* "n/a (...)" or "ERROR: ..." when set */
} row;
static row rows[160];
static int nrows;

static row *R(const char *sect, const char *name) {
    row *r = &rows[nrows < 159 ? nrows++ : 159];
    memset(r, 0, sizeof *r);
    snprintf(r->sect, sizeof r->sect, "%s", sect);
    snprintf(r->name, sizeof r->name, "%s", name);
    return r;
}
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void na(row *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(r->na, sizeof r->na, "n/a (");
    k += vsnprintf(r->na + k, sizeof r->na - (size_t)k, fmt, ap);
    va_end(ap);
    if (k < (int)sizeof r->na - 1) snprintf(r->na + k, sizeof r->na - (size_t)k, ")");
}
static void err(row *r, const char *what) {
    snprintf(r->na, sizeof r->na, "ERROR %s: %.120s", what, tn_last_error());
    n_errors++;
}
static void set_limit(row *r, const char *name, double lim, int kind, double target) {
    snprintf(r->limit, sizeof r->limit, "%s", name);
    r->lim = lim;
    r->kind = kind;
    r->target = target;
}

static void fmt_t(double s, char *b, size_t cap) {
    if (s <= 0) snprintf(b, cap, "-");
    else if (s < 1e-3) snprintf(b, cap, "%.2f us", s * 1e6);
    else if (s < 1) snprintf(b, cap, "%.2f ms", s * 1e3);
    else snprintf(b, cap, "%.2f s", s);
}

static void print_table(void) {
    printf("\n%-8s %-34s %10s %10s %10s  %-32s %10s %8s %9s %-6s %-12s %s\n", "section", "case", "median", "min", "max",
           "limit", "limit/call", "ratio", "target", "result", "rate", "note");
    char last[10] = "";
    for (int i = 0; i < nrows; i++) {
        row *r = &rows[i];
        if (strcmp(last, r->sect)) { if (last[0]) printf("\n"); snprintf(last, sizeof last, "%s", r->sect); }
        if (r->na[0]) { printf("%-8s %-34s %s\n", r->sect, r->name, r->na); continue; }
        char m[16], lo[16], hi[16], li[16], ratio[16] = "-", tgt[16] = "-";
        const char *res = "info";
        fmt_t(r->med, m, sizeof m); fmt_t(r->lo, lo, sizeof lo); fmt_t(r->hi, hi, sizeof hi); fmt_t(r->lim, li, sizeof li);
        if (r->lim > 0 && (r->kind == T_RATIO || r->kind == T_INFO)) snprintf(ratio, sizeof ratio, "%.2fx", r->med / r->lim);
        if (r->lim > 0 && r->kind == T_PCT) snprintf(ratio, sizeof ratio, "%.1f%%", 100 * r->lim / r->med);
        if (r->kind == T_RATIO) { snprintf(tgt, sizeof tgt, "<=%.2fx", r->target); res = r->med / r->lim <= r->target ? "pass" : "FAIL"; }
        if (r->kind == T_PCT && r->target > 0) { snprintf(tgt, sizeof tgt, ">=%.0f%%", r->target); res = 100 * r->lim / r->med >= r->target ? "pass" : "FAIL"; }
        if (r->kind == T_ABS) { fmt_t(r->target, tgt, sizeof tgt); memmove(tgt + 1, tgt, strlen(tgt) + 1); tgt[0] = '<'; res = r->med <= r->target ? "pass" : "FAIL"; }
        if (r->kind == T_LIMIT) res = "limit";
        printf("%-8s %-34s %10s %10s %10s  %-32s %10s %8s %9s %-6s %-12s %s\n", r->sect, r->name, m, lo, hi,
               r->limit[0] ? r->limit : "-", li, ratio, tgt, res, r->rate, r->note);
    }
}

/* >>measure --------------------------------------------------------------- */

/* A loop body: runs `iters` calls, then waits until the work is done, so
   wall time around it is the time of the work (clock "wall" in the table). */
typedef tn_result (*loop_fn)(void *ctx, int iters);

/* n loops timed in turn, each repeat running every one once (a slow spell of
   the machine falls on all of them alike): per-call medians, min and max
   into r[0..n-1]. */
static tn_result measure_n(int n, const loop_fn *fn, void *const *ctx, int iters, row *const *r) {
    int reps = Q ? 3 : 7;
    double t[4][16];
    tn_result e = TN_OK;
    for (int k = 0; e == TN_OK && k < n; k++) e = fn[k](ctx[k], iters / 10 > 0 ? iters / 10 : 1);   /* warm-up: compiles, allocations, caches */
    for (int i = 0; e == TN_OK && i < reps; i++)
        for (int k = 0; e == TN_OK && k < n; k++) {
            double t0 = now();
            e = fn[k](ctx[k], iters);
            t[k][i] = (now() - t0) / iters;
        }
    if (e != TN_OK) return e;
    for (int k = 0; k < n; k++) {
        double *v = t[k];
        for (int i = 1; i < reps; i++)       /* insertion sort */
            for (int j = i; j > 0 && v[j] < v[j - 1]; j--) { double x = v[j]; v[j] = v[j - 1]; v[j - 1] = x; }
        r[k]->med = v[reps / 2];
        r[k]->lo = v[0];
        r[k]->hi = v[reps - 1];
    }
    return TN_OK;
}

static tn_result measure(loop_fn fn, void *ctx, int iters, row *r) { return measure_n(1, &fn, &ctx, iters, &r); }

static void rate(row *r, double amount, const char *unit) {
    double v = amount / r->med;
    const char *p = v >= 1e12 ? "T" : v >= 1e9 ? "G" : v >= 1e6 ? "M" : "";
    double s = v >= 1e12 ? 1e12 : v >= 1e9 ? 1e9 : v >= 1e6 ? 1e6 : 1;
    snprintf(r->rate, sizeof r->rate, "%.1f %s%s", v / s, p, unit);
}

/* >>functions: compiled-function facts the cases check ------------------- */

static bool GPU;        /* the current phase runs on the GPU */
static double copy_bw;  /* bytes/s of this phase's copy limit (fusion_cases): the bandwidth cases' yardstick */

static tn_result dev_sync(void) {
    if (!GPU) return TN_OK;
    TN__CU_CHECK(tn__cuda.cu.cuCtxSynchronize(), "bench: waiting for the device");
    return TN_OK;
}

/* Compute steps (not views, transfers) on the device (dev) or the host, of
   op `op` (-1: any); *first gets the name of the first one found. */
static int steps_on(const tn_func *f, bool dev, int op, const char **first) {
    int n = 0;
    for (int i = 0; f && i < f->n_steps; i++) {
        const tn_var *v = f->steps[i].node;
        tn_op_kind k = tn__op_kind(v->op);
        if (k == TN_OPK_VIEW || k == TN_OPK_TRANSFER || (op >= 0 && v->op != op)) continue;
        if ((v->device != TN_HOST) != dev) continue;
        if (first && !n) *first = f->steps[i].def->name;
        n++;
    }
    return n;
}
static int device_products(const tn_func *f) {
    return steps_on(f, true, TN_OP_DOT, NULL) + steps_on(f, true, TN_OP_GEMM, NULL) + steps_on(f, true, TN_OP_GEMV, NULL);
}
/* "" when every compute step runs on the device, else why not (for n/a). */
static const char *all_on_device(const tn_func *f, char *buf, size_t cap) {
    const char *first = "?";
    int h = steps_on(f, false, -1, &first);
    buf[0] = 0;
    if (h) snprintf(buf, cap, "%d op%s still on the CPU, first %s: placement not landed for it", h, h > 1 ? "s" : "", first);
    return buf;
}

typedef struct callctx { tn_func *f; tn_array **in; } callctx;
static tn_result call_loop(void *p, int iters) {
    callctx *c = (callctx *)p;
    for (int i = 0; i < iters; i++) {
        tn_array *out[4] = { 0 };
        tn_result r = tn_call(c->f, c->in, out);
        if (r != TN_OK) return r;
        for (int k = 0; k < 4; k++) tn_array_free(out[k]);   /* borrowed: no-op */
    }
    return dev_sync();
}

static void run_func(row *r, tn_func *f, tn_array **in, int iters) {
    callctx c = { f, in };
    if (measure(call_loop, &c, iters, r) != TN_OK) err(r, "in tn_call");
}

/* tn_gpu_from_host(x) when the back end exports it (found with dlsym, so this
   file builds before it lands), else NULL. */
typedef tn_var *(*gfh_fn)(tn_var *);
static gfh_fn gpu_from_host(void) {
    void *self = dlopen(NULL, RTLD_NOW);
    void *s = self ? dlsym(self, "tn_gpu_from_host") : NULL;
    gfh_fn f;
    memcpy(&f, &s, sizeof f);
    return f;
}

static void nograph(tn_config *c);   /* cuda_graph=0 (the training steps) */

/* Sets one config field for what follows (tn_init with a modified copy). */
static tn_config saved_cfg;
static void cfg_push(void (*edit)(tn_config *)) {
    saved_cfg = *tn_get_config();
    tn_config c = saved_cfg;
    edit(&c);
    tn_init(&c);
}
static void cfg_pop(void) { tn_init(&saved_cfg); }

/* >>cases: the fusion chain --------------------------------------------- */

/* About ten ops, 3 inputs: sigmoid(tanh(a*b + c) * exp(-a) + sqrt(|b|) - 0.5c).
   *second: a second output sharing most of the chain (two-output group). */
static tn_var *chain(tn_var *a, tn_var *b, tn_var *c, tn_var **second) {
    tn_var *t = tn_tanh(tn_add(tn_mul(a, b), c));
    tn_var *s = tn_sqrt(tn_abs(b));
    tn_var *y = tn_sigmoid(tn_sub(tn_add(tn_mul(t, tn_exp(tn_neg(a))), s), tn_mul(c, tn_lit(c, 0.5))));
    if (second) *second = tn_add(tn_mul(t, c), s);
    return y;
}

typedef struct pcopy { char *dst, *src; } pcopy;
static void pcopy_range(void *ctx, int64_t lo, int64_t hi) {
    pcopy *p = (pcopy *)ctx;
    memcpy(p->dst + lo, p->src + lo, (size_t)(hi - lo));
}
typedef struct copyctx { size_t bytes; char *dst, *src; tn__CUdeviceptr ddst, dsrc; } copyctx;
static tn_result copy_loop(void *p, int iters) {
    copyctx *c = (copyctx *)p;
    for (int i = 0; i < iters; i++) {
        if (GPU) TN__CU_CHECK(tn__cuda.cu.cuMemcpyDtoDAsync_v2(c->ddst, c->dsrc, c->bytes, tn__cuda_stream(CUDA_DEV())), "bench: copy");
        else { pcopy pc = { c->dst, c->src }; tn__parallel_for((int64_t)c->bytes, (int64_t)1 << 20, pcopy_range, &pc); }
    }
    if (GPU) TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(CUDA_DEV())), "bench: copy");
    return TN_OK;
}

static void fusion_cases(void) {
    const char *S = GPU ? "fusion" : "cpu";
    int64_t n = (int64_t)1 << 24;
    size_t bytes = (size_t)n * 4;
    int iters = GPU ? (Q ? 20 : 100) : (Q ? 1 : 4);
    /* the limit: device-to-device (or parallel host) copy of one array, read + write */
    row *L = R(S, GPU ? "d2d copy 64 MiB (cuMemcpyDtoD)" : "host copy 64 MiB (threads)");
    copyctx cc = { bytes, NULL, NULL, 0, 0 };
    tn_result e = TN_OK;
    if (GPU) {
        if (tn__cuda.cu.cuMemAlloc_v2(&cc.ddst, bytes) || tn__cuda.cu.cuMemAlloc_v2(&cc.dsrc, bytes)) { na(L, "cuMemAlloc"); return; }
        tn__cuda.cu.cuMemsetD8Async(cc.dsrc, 1, bytes, tn__cuda_stream(CUDA_DEV()));
    } else {
        cc.dst = (char *)malloc(bytes); cc.src = (char *)malloc(bytes);
        if (!cc.dst || !cc.src) { na(L, "out of memory"); free(cc.dst); free(cc.src); return; }
        memset(cc.src, 1, bytes); memset(cc.dst, 0, bytes);
    }
    e = measure(copy_loop, &cc, GPU ? (Q ? 20 : 200) : (Q ? 2 : 10), L);
    if (GPU) { tn__cuda.cu.cuMemFree_v2(cc.ddst); tn__cuda.cu.cuMemFree_v2(cc.dsrc); }
    else { free(cc.dst); free(cc.src); }
    if (e != TN_OK) { err(L, "in the copy loop"); return; }
    set_limit(L, "", 0, T_LIMIT, 0);
    rate(L, 2.0 * (double)bytes, "B/s");
    double bw = 2.0 * (double)bytes / L->med;
    copy_bw = bw;

    tn_graph *g = tn_graph_new();
    tn_array *av = tn_array_rand_uniform(TN_F32, 1, &n, -2, 2, 101), *bv = tn_array_rand_uniform(TN_F32, 1, &n, -2, 2, 102);
    tn_array *cv = tn_array_rand_uniform(TN_F32, 1, &n, -2, 2, 103), *zv = tn_array_zeros(TN_F32, 1, &n);
    tn_array *z0 = tn_array_scalar(TN_F32, 0);
    tn_var *a = tn_shared(g, "a", av), *b = tn_shared(g, "b", bv), *c = tn_shared(g, "c", cv);
    tn_var *ys = tn_shared(g, "y", zv), *zs = tn_shared(g, "z", zv), *ss = tn_shared(g, "s", z0);
    tn_array_free(av); tn_array_free(bv); tn_array_free(cv); tn_array_free(zv); tn_array_free(z0);
    tn_var *second = NULL, *y = chain(a, b, c, &second);
    struct { const char *name; int n_upd; tn_update upd[2]; int nbytes; double target; bool unfused; } cs[4] = {
        { "chain 12 ops, 3 in 1 out", 1, { { ys, y } }, 4, 95, false },
        { "two-output group", 2, { { ys, y }, { zs, second } }, 5, 95, false },
        { "chain feeding a sum", 1, { { ss, tn_sum(y, NULL, 0, false) } }, 3, 90, false },
        { "chain unfused (contrast)", 1, { { ys, y } }, 4, 0, true },
    };
    for (int k = 0; k < 4; k++) {
        row *r = R(S, cs[k].name);
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_updates = cs[k].n_upd, .updates = cs[k].upd, .name = cs[k].name,
                                                     .max_fused_inputs = cs[k].unfused ? -1 : 0 });
        char why[160];
        if (!f) err(r, "in tn_function");
        else if (GPU && *all_on_device(f, why, sizeof why)) na(r, "%s", why);
        else {
            run_func(r, f, NULL, iters);
            if (!r->na[0]) {
                double moved = (double)cs[k].nbytes * (double)bytes;
                set_limit(r, "copy bandwidth, same bytes", moved / bw, GPU && cs[k].target > 0 ? T_PCT : T_INFO, cs[k].target);
                if (r->kind == T_INFO) r->kind = T_PCT, r->target = 0;   /* shown as %, judged only on the GPU */
                rate(r, moved, "B/s");
                int nk = steps_on(f, GPU, -1, NULL);
                snprintf(r->note, sizeof r->note, "%d kernel%s, %d arrays moved", nk, nk == 1 ? "" : "s", cs[k].nbytes);
            }
        }
        tn_function_free(f);
    }
    /* indexing: a gather and a scatter-add of n random int32 indices (repeats
       included), as a share of the copy bandwidth for the bytes they must
       move (gather: index, value, result; scatter-add into zeros: the
       zeros, index, value, and the target read and written). The gathered
       value counts 4 bytes an element, not a 32-byte sector per index: n
       draws over n elements touch nearly every sector of a (all but e^-8),
       so a is read about once whatever the order, and a kernel that moves
       more than that is what the share shows. */
    tn_array *u = tn_array_rand_uniform(TN_F64, 1, &n, 0, (double)n, 104), *iv = tn_array_astype(u, TN_I32);
    tn_var *ix = tn_shared(g, "idx", iv);
    tn_array_free(u); tn_array_free(iv);
    struct { const char *name; tn_var *val; int nbytes; } ic[2] = {
        { "gather a[idx], random int32 idx", tn_take(a, ix, 0), 12 },
        { "scatter-add zeros[idx] += a", tn_inc_subtensor(tn_take(tn_fill(a, tn_scalar_const(g, 0.0)), ix, 0), a), 20 },
    };
    for (int k = 0; k < 2; k++) {
        row *r = R(S, ic[k].name);
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &(tn_update){ ys, ic[k].val }, .name = ic[k].name });
        char why[160];
        if (!f) err(r, "in tn_function");
        else if (GPU && *all_on_device(f, why, sizeof why)) na(r, "%s", why);
        else {
            run_func(r, f, NULL, iters);
            if (!r->na[0]) {
                double moved = (double)ic[k].nbytes * (double)n;
                set_limit(r, "copy bandwidth, same bytes", moved / bw, T_PCT, 0);   /* shown as %, not judged */
                rate(r, moved, "B/s");
                snprintf(r->note, sizeof r->note, "%d bytes an element", ic[k].nbytes);
            }
        }
        tn_function_free(f);
    }
    tn_graph_free(g);
}

/* >>cases: memory-bound ops (issue 14): pooling and random draws ----------- */
/* Each as a share of the copy bandwidth fusion_cases measured in this
   phase, for the bytes it must move: the input read once and the output
   written once (pooling 2x2 stride 2: x, then a quarter of x; a draw: its
   output; dropout: x and its result, 8 bytes an element: the mask is drawn
   inside the fused kernel, neither stored nor read). x is
   shared and results stay on the device (borrowed) or go to a shared
   variable (updates). Judged on the GPU (>= 80%); shown on the CPU. */
/* The row's share of the copy bandwidth, judged against target % (0: info). */
static void bw_row_judged(row *r, tn_func *f, int iters, double moved, const char *what, double target) {
    char why[160];
    if (!f) { err(r, "in tn_function"); return; }
    if (GPU && *all_on_device(f, why, sizeof why)) { na(r, "%s", why); return; }
    run_func(r, f, NULL, iters);
    if (r->na[0]) return;
    if (copy_bw > 0) set_limit(r, "copy bandwidth, same bytes", moved / copy_bw, T_PCT, target);
    rate(r, moved, "B/s");
    int nk = steps_on(f, GPU, -1, NULL);
    snprintf(r->note, sizeof r->note, "%d kernel%s, %s", nk, nk == 1 ? "" : "s", what);
}

/* GPU rows judged at 80%, CPU rows info. */
static void bw_row(row *r, tn_func *f, int iters, double moved, const char *what) { bw_row_judged(r, f, iters, moved, what, GPU ? 80 : 0); }

/* max_pool2d and avg_pool2d 2x2 of (64, 128, 32, 32), the shape bench/peers.py
   times in PyTorch: the pooling, and the pooling with its gradient for a
   given gy (fwd+bwd: y and the gradient returned, Pool then PoolGrad). */
static void pool_cases(void) {
    const char *S = GPU ? "pool" : "cpu";
    int64_t sh[4] = { 64, 128, 32, 32 }, ysh[4] = { 64, 128, 16, 16 }, nx = 64 * 128 * 32 * 32;
    for (int dt = 0; dt < (GPU ? 2 : 1); dt++) {
        tn_dtype t = dt ? TN_F16 : TN_F32;
        tn_array *X = tn_array_rand_normal(t, 4, sh, 0, 1, 11), *GY = tn_array_rand_normal(t, 4, ysh, 0, 1, 12);
        tn_graph *g = tn_graph_new();
        tn_var *x = tn_shared_fixed(g, "x", X), *gy = tn_shared_fixed(g, "gy", GY);
        tn_array_free(X);
        tn_array_free(GY);
        tn_conv_opts o;
        memset(&o, 0, sizeof o);
        o.kernel[0] = o.kernel[1] = 2;
        for (int mx = 1; mx >= 0; mx--) for (int bwd = 0; bwd < 2; bwd++) {
            char name[64];
            snprintf(name, sizeof name, "%s 2x2 (64,128,32,32) %s%s", mx ? "max_pool2d" : "avg_pool2d", dt ? "f16" : "f32", bwd ? " fwd+bwd" : "");
            row *r = R(S, name);
            tn_var *y = mx ? tn_max_pool2d(x, &o) : tn_avg_pool2d(x, &o);
            tn_var *gx = y && bwd ? tn_grad1(tn_sum(tn_mul(y, gy), NULL, 0, false), x) : NULL;
            if (!y || (bwd && !gx)) { err(r, "building the graph"); continue; }
            tn_var *outs[2] = { GPU ? tn_gpu_from_host(y) : y, gx && GPU ? tn_gpu_from_host(gx) : gx };
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = bwd ? 2 : 1, .outputs = outs, .borrow = true, .name = name });
            /* the gradient: max reads x, y and gy and writes gx (2.5x x's bytes); average reads gy and writes gx (1.25x) */
            bw_row_judged(r, f, GPU ? (Q ? 50 : 500) : (Q ? 1 : 3), (1.25 + (bwd ? (mx ? 2.5 : 1.25) : 0)) * (double)nx * (double)tn_dtype_size(t),
                          !bwd ? "x read, y written" : mx ? "y and gx returned: x read twice, y written and read, gy read, gx written"
                                                       : "y and gx returned: x read, y written, gy read, gx written", GPU && !bwd ? 80 : 0);
            tn_function_free(f);
        }
        tn_graph_free(g);
    }
}

/* A gather of rows (an embedding lookup, PyTorch's index_select in
   peers.py): 2^20 random int64 indices into a (2^20, 64) float32 table;
   each index moves a row in and a row out (512 bytes) and itself (8). */
static void gather_rows_case(void) {
    tn_graph *g = tn_graph_new();
    int64_t rows = (int64_t)1 << 20, tsh[2] = { rows, 64 };
    tn_array *tv = tn_array_rand_uniform(TN_F32, 2, tsh, -1, 1, 105), *ov = tn_array_zeros(TN_F32, 2, tsh);
    tn_array *ru = tn_array_rand_uniform(TN_F64, 1, &rows, 0, (double)rows, 106), *riv = tn_array_astype(ru, TN_I64);
    tn_var *tab = tn_shared(g, "table", tv), *outs = tn_shared(g, "rows_out", ov), *rix = tn_shared(g, "row_idx", riv);
    tn_array_free(tv); tn_array_free(ov); tn_array_free(ru); tn_array_free(riv);
    row *r = R(GPU ? "fusion" : "cpu", "gather rows table[idx], (2^20, 64) f32");
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &(tn_update){ outs, tn_take(tab, rix, 0) }, .name = "gather rows" });
    bw_row(r, f, GPU ? (Q ? 20 : 100) : (Q ? 1 : 4), (double)rows * (8.0 + 2.0 * 64 * 4), "520 bytes an index");
    tn_function_free(f);
    tn_graph_free(g);
}

/* uniform and normal draws into 2^24 float32, and dropout 0.25 of a shared 2^24 float32 array. */
static void random_cases(void) {
    const char *S = GPU ? "random" : "cpu";
    int64_t n = (int64_t)1 << 24;
    tn_array *X = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 12), *Z = tn_array_zeros(TN_F32, 1, &n);
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_shared(g, "x", X), *ys = tn_shared(g, "y", Z);
    tn_array_free(X); tn_array_free(Z);
    tn_rstream *s = tn_random_stream(g, 13);
    struct { const char *name; tn_var *val; int nbytes; const char *what; } cs[3] = {
        { "uniform 2^24 f32", tn_random_uniform(s, TN_F32, 1, &n, 0, 1), 4, "the draw written" },
        { "normal 2^24 f32", tn_random_normal(s, TN_F32, 1, &n, 0, 1), 4, "the draw written" },
        { "dropout 0.25 of shared 2^24 f32", tn_dropout(s, x, 0.25), 8, "x read, result written" },
    };
    for (int k = 0; k < 3; k++) {
        row *r = R(S, cs[k].name);
        if (!cs[k].val) { err(r, "building the graph"); continue; }
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &(tn_update){ ys, cs[k].val }, .name = cs[k].name });
        bw_row(r, f, GPU ? (Q ? 20 : 100) : (Q ? 1 : 2), (double)cs[k].nbytes * (double)n, cs[k].what);
        tn_function_free(f);
    }
    tn_graph_free(g);
}

/* >>cases: CPU products ----------------------------------------------------- */

/* c += a @ b; with cin, c = cin first (one memcpy: what out = a @ b + cin
   into another buffer must add to the sgemm). */
typedef struct gemmctx { const float *a, *b, *cin; float *c; int n; } gemmctx;
static tn_result cblas_loop(void *p, int iters) {
    gemmctx *g = (gemmctx *)p;
    for (int i = 0; i < iters; i++) {
        if (g->cin) memcpy(g->c, g->cin, sizeof(float) * (size_t)g->n * (size_t)g->n);
        tn__blas.sgemm(TN__CBLAS_ROW_MAJOR, TN__CBLAS_NO_TRANS, TN__CBLAS_NO_TRANS, g->n, g->n, g->n, 1.0f, g->a, g->n,
                       g->b, g->n, 1.0f, g->c, g->n);
    }
    return TN_OK;
}

static void cpu_gemm_cases(void) {
    int64_t sh[2] = { 1000, 1000 };
    double flops = 2e9;
    int iters = Q ? 2 : 10;
    tn_array *M = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 1), *X = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 2);
    tn_array *B = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 3);
    tn__blas_enable(true);
    const char *blas = tn__blas_name();
    row *L = R("cpu", "bare cblas_sgemm 1000^2"), *L2 = R("cpu", "bare memcpy of b + cblas_sgemm");
    double lim2 = 0;
    tn_array *C = tn_array_zeros(TN_F32, 2, sh);
    gemmctx gc = { (const float *)M->data, (const float *)X->data, NULL, (float *)C->data, 1000 };
    if (!blas) {
        na(L, "no CBLAS library found (libopenblas.so.0, libcblas.so.3, libblas.so.3)");
        na(L2, "no CBLAS library");
    } else {
        if (measure(cblas_loop, &gc, iters, L) == TN_OK) {
            set_limit(L, "", 0, T_LIMIT, 0);
            rate(L, flops, "FLOP/s");
            snprintf(L->note, sizeof L->note, "%s, %d threads", blas, tn__num_threads());
        }
        gc.cin = (const float *)B->data;
        if (measure(cblas_loop, &gc, iters, L2) == TN_OK) {
            set_limit(L2, "", 0, T_LIMIT, 0);
            rate(L2, flops, "FLOP/s");
            snprintf(L2->note, sizeof L2->note, "the copy into another buffer, one thread, then c += m.x");
            lim2 = L2->med;
        }
        gc.cin = NULL;
    }
    tn_graph *g = tn_graph_new();
    tn_var *m = tn_shared(g, "m", M), *x = tn_shared(g, "x", X), *b = tn_shared(g, "b", B);
    tn_var *ys = tn_shared(g, "y", B);
    tn_update up = { ys, tn_add(tn_dot(m, x), b) };
    for (int k = 0; k < 2; k++) {
        row *r = R("cpu", k == 0 ? "y=m.x+b 1000^2, CBLAS" : "y=m.x+b 1000^2, built-in kernel");
        if (k == 0 && !blas) { na(r, "no CBLAS library"); continue; }
        tn__blas_enable(k == 0);
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &up, .name = "gemm" });
        if (!f) err(r, "in tn_function");
        else if (blas) {   /* timed in turn with the bare sgemm (the built-in row: BLAS off for the call only) */
            row bare;
            callctx cc = { f, NULL };
            const loop_fn fns[2] = { cblas_loop, call_loop };
            void *const ctxs[2] = { &gc, &cc };
            row *const rs[2] = { &bare, r };
            if (measure_n(2, fns, ctxs, iters, rs) != TN_OK) err(r, "in tn_call");
            else {   /* the CBLAS row is judged (issue 16: <= 1.02x) */
                set_limit(r, "bare cblas_sgemm, in turn", bare.med, k == 0 ? T_RATIO : T_INFO, k == 0 ? 1.02 : 0);
                rate(r, flops, "FLOP/s");
                if (k == 1) snprintf(r->note, sizeof r->note, "the addend read in place");
                else if (lim2 > 0) snprintf(r->note, sizeof r->note, "%.2fx bare memcpy of b + sgemm", r->med / lim2);
            }
        } else {
            run_func(r, f, NULL, iters);
            rate(r, flops, "FLOP/s");
        }
        tn_function_free(f);
    }
    tn__blas_enable(true);
    tn_graph_free(g);
    tn_array_free(C);
    tn_array_free(M); tn_array_free(X); tn_array_free(B);
}

/* >>cases: exp on the CPU (issue 16): 10*30*768 float32, 1000 calls --------- */

typedef struct expctx { const float *x; float *y; int64_t n; } expctx;
static tn_result libm_exp_loop(void *p, int iters) {
    expctx *c = (expctx *)p;
    for (int i = 0; i < iters; i++)
        for (int64_t j = 0; j < c->n; j++) c->y[j] = expf(c->x[j]);
    return TN_OK;
}

/* The function's exp (x shared, the output borrowed: no allocation) against a
   bare one-thread loop of libm's expf, the kernel's inner loop before the
   vector math (tensor_ops.h >>vmath). NumPy's np.exp: bench/peers.py. */
static void cpu_exp_cases(void) {
    int64_t sh[3] = { 10, 30, 768 };
    int iters = Q ? 100 : 1000;
    tn_array *X = tn_array_rand_uniform(TN_F32, 3, sh, -10, 10, 5), *Y = tn_array_zeros(TN_F32, 3, sh);
    row *L = R("cpu", "bare libm expf loop, 1 thread");
    expctx ec = { (const float *)X->data, (float *)Y->data, 230400 };
    double lim = 0;
    if (measure(libm_exp_loop, &ec, iters, L) == TN_OK) {
        set_limit(L, "", 0, T_LIMIT, 0);
        lim = L->med;
    }
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_shared(g, "x", X), *y = tn_exp(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .borrow = true, .name = "exp cpu" });
    row *r = R("cpu", "exp 230400 f32, borrowed");
    if (!f) err(r, "in tn_function");
    else {
        run_func(r, f, NULL, iters);
        if (!r->na[0] && lim > 0) set_limit(r, "bare libm expf loop", lim, T_INFO, 0);
        snprintf(r->note, sizeof r->note, "%d threads", tn__num_threads());
    }
    tn_function_free(f);
    tn_graph_free(g);
    tn_array_free(X); tn_array_free(Y);
}

/* >>cases: logistic regression (the seed's training loop) ------------------ */

static void nograph(tn_config *c) { c->no_cuda_graph = true; }

/* A training step (updates only, data shared): one row on the CPU; on the
   GPU with graph replay and with cuda_graph=0 (names: cpu, replay, no
   replay), judged against `target` seconds (0: shown only). e: the graph's
   build (tn_grad) result. */
static void train_rows(tn_graph *g, const char *const names[3], tn_result e, int n_upd, tn_update *up, int iters,
                       const char *target_name, double target) {
    const char *S = GPU ? "train" : "cpu";
    for (int k = 0; k < (GPU ? 2 : 1); k++) {
        row *r = R(S, names[GPU ? 1 + k : 0]);
        if (e != TN_OK) { err(r, "in tn_grad"); continue; }
        if (k == 1) cfg_push(nograph);
        tn_func *f = tn_function(g, &(tn_func_desc){ .n_updates = n_upd, .updates = up, .name = "train" });
        char why[160];
        if (!f) err(r, "in tn_function");
        else if (GPU && !steps_on(f, true, -1, NULL)) na(r, "%s", all_on_device(f, why, sizeof why));
        else {
            run_func(r, f, NULL, iters);
            if (!r->na[0]) {
                if (GPU && target > 0) set_limit(r, target_name, 0, T_ABS, target);
                int64_t rep = 0;
                const char *gwhy = "";
                tn__replay_stats(f, &rep, NULL, &gwhy);
                if (GPU && *all_on_device(f, why, sizeof why)) snprintf(r->note, sizeof r->note, "%.95s", why);
                else if (GPU) snprintf(r->note, sizeof r->note, "%d ops, %lld replays%s%.60s", f->n_steps, (long long)rep, *gwhy ? ": " : "", gwhy);
                else snprintf(r->note, sizeof r->note, "%d ops, data shared, no outputs", f->n_steps);
            }
        }
        tn_function_free(f);
        if (k == 1) cfg_pop();
    }
}

static void logreg_cases(void) {
    enum { N = 400, FEATS = 784 };
    const char *S = GPU ? "train" : "cpu";
    int iters = GPU ? (Q ? 500 : 10000) : (Q ? 20 : 300);
    tn_array *X = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ N, FEATS }, 0, 1, 7000000);
    tn_array *U = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ N }, 0, 1, 8000000);
    tn_array *W0 = tn_array_rand_normal(TN_F32, 1, (int64_t[]){ FEATS }, 0, 1.0 / 28.0, 9000000);
    tn_array *B0 = tn_array_scalar(TN_F32, 0);
    float yv[N], uv[N];
    tn_array_copy_to(U, TN_F32, uv, sizeof uv);
    for (int i = 0; i < N; i++) yv[i] = uv[i] < 0.5f ? 0.0f : 1.0f;
    tn_array *Y = tn_array_from_data(TN_F32, 1, (int64_t[]){ N }, yv);
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_shared(g, "x", X), *y = tn_shared(g, "y", Y), *w = tn_shared(g, "w", W0), *b = tn_shared(g, "b", B0);
    tn_var *one = tn_lit(w, 1.0);
    tn_var *p1 = tn_div(one, tn_add(one, tn_exp(tn_sub(tn_neg(tn_dot(x, w)), b))));
    tn_var *xent = tn_sub(tn_neg(tn_mul(y, tn_log(p1))), tn_mul(tn_sub(one, y), tn_log(tn_sub(one, p1))));
    tn_var *cost = tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_lit(one, 0.01), tn_sum(tn_sqr(w), NULL, 0, false)));
    tn_var *wrt[2] = { w, b }, *gr[2] = { 0 };
    tn_result e = tn_grad(cost, 2, wrt, gr, NULL);
    tn_update up[2] = { { w, tn_sub(w, tn_mul(tn_lit(w, 0.1), gr[0])) }, { b, tn_sub(b, tn_mul(tn_lit(b, 0.1), gr[1])) } };
    static const char *const names[3] = { "logreg step N=400x784 f32", "logreg step, graph replay", "logreg step, no graph replay" };
    train_rows(g, names, e, 2, up, iters, "issue 7 (JAX jit 79 us on H200)", 40e-6);
    tn_graph_free(g);
    /* The seed's own loop: x and y passed each call, prediction and cost copied back. */
    g = tn_graph_new();
    tn_var *xi = tn_matrix(g, "x", TN_F32), *yi = tn_vector(g, "y", TN_F32);
    w = tn_shared(g, "w", W0); b = tn_shared(g, "b", B0);
    one = tn_lit(w, 1.0);
    p1 = tn_div(one, tn_add(one, tn_exp(tn_sub(tn_neg(tn_dot(xi, w)), b))));
    tn_var *pred = tn_gt(p1, tn_lit(p1, 0.5));
    xent = tn_sub(tn_neg(tn_mul(yi, tn_log(p1))), tn_mul(tn_sub(one, yi), tn_log(tn_sub(one, p1))));
    cost = tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_lit(one, 0.01), tn_sum(tn_sqr(w), NULL, 0, false)));
    wrt[0] = w; wrt[1] = b;
    e = tn_grad(cost, 2, wrt, gr, NULL);
    tn_update up2[2] = { { w, tn_sub(w, tn_mul(tn_lit(w, 0.1), gr[0])) }, { b, tn_sub(b, tn_mul(tn_lit(b, 0.1), gr[1])) } };
    {
        row *r = R(S, "logreg step, data passed");
        tn_var *outs[2] = { pred, xent }, *ins[2] = { xi, yi };
        tn_func *f = e != TN_OK ? NULL
                   : tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 2, .outputs = outs,
                                                    .n_updates = 2, .updates = up2, .name = "train" });
        if (!f) err(r, "in tn_function");
        else {
            run_func(r, f, (tn_array *[]){ X, Y }, iters);
            if (!r->na[0]) {
                if (GPU) set_limit(r, "issue 16 (<= 60 us on an H100)", 0, T_ABS, 60e-6);
                int64_t rep = 0, cap = 0;
                const char *gwhy = "";
                tn__replay_stats(f, &rep, &cap, &gwhy);
                snprintf(r->note, sizeof r->note, "%d ops, data passed; %lld replays, %lld captures%s%.40s", f->n_steps,
                         (long long)rep, (long long)cap, *gwhy ? ": " : "", gwhy);
            }
            /* the same function profiled (issue 16: the profiler costs at most 10% of a step) */
            row *rp = R(S, "logreg step, data passed, profiled");
            if (r->na[0]) na(rp, "the unprofiled row did not run");
            else if (tn_profile_enable(f, true) != TN_OK) err(rp, "in tn_profile_enable");
            else {
                /* a long window even in --quick: the profile reads a passed input whole at calls 2^k
                   (a few a window, each a host stall of the step), and one call in 128 runs step by step */
                run_func(rp, f, (tn_array *[]){ X, Y }, Q ? 8 * iters : iters);
                if (!rp->na[0]) {
                    set_limit(rp, "the same step, profiler off", r->med, T_RATIO, 1.10);
                    snprintf(rp->note, sizeof rp->note, "tn_profile_enable(f, true)");
                }
                tn_profile_enable(f, false);
            }
        }
        tn_function_free(f);
    }
    tn_graph_free(g);
    tn_array_free(X); tn_array_free(U); tn_array_free(W0); tn_array_free(B0); tn_array_free(Y);
}

/* >>cases: the convnet training step (examples/convnet.c) ------------------ */
/* examples/convnet.c's LeNet-style net on a batch of 32 8x8 images: conv
   3x3 1->16 pad 1, relu, max pool 2x2, conv 3x3 16->32 pad 1, relu, max
   pool 2x2, flatten, dropout 0.25, dense 128->10, log_softmax NLL; one SGD
   step with momentum 0.9 (12 updates) per call, the batch shared (on the
   device), no outputs. bench/peers.py runs the same step in PyTorch (eager,
   torch.compile) and JAX. */
static tn_var *convnet_net(tn_var *x, tn_var *const *P, tn_rstream *drop) {
    tn_conv_opts c, p;
    memset(&c, 0, sizeof c);
    c.padding[0] = c.padding[1] = 1;
    memset(&p, 0, sizeof p);
    p.kernel[0] = p.kernel[1] = 2;
    tn_var *img = tn_reshape(x, 4, (int64_t[]){ -1, 1, 8, 8 });
    tn_var *h1 = tn_max_pool2d(tn_relu(tn_add(tn_conv2d(img, P[0], &c), tn_reshape(P[1], 4, (int64_t[]){ 1, 16, 1, 1 }))), &p);
    tn_var *h2 = tn_max_pool2d(tn_relu(tn_add(tn_conv2d(h1, P[2], &c), tn_reshape(P[3], 4, (int64_t[]){ 1, 32, 1, 1 }))), &p);
    return tn_add(tn_dot(tn_dropout(drop, tn_flatten(h2, 2), 0.25), P[4]), P[5]);
}

static void convnet_cases(void) {
    enum { B = 32 };
    int iters = GPU ? (Q ? 200 : 2000) : (Q ? 5 : 20);
    tn_graph *g = tn_graph_new();
    tn_random_state *rs = tn_random_state_new(5);
    static const int64_t shp[6][4] = { { 16, 1, 3, 3 }, { 16 }, { 32, 16, 3, 3 }, { 32 }, { 128, 10 }, { 10 } };
    static const int nd[6] = { 4, 1, 4, 1, 2, 1 }, fan[6] = { 9, 0, 144, 0, 128, 0 };
    tn_var *P[6];
    for (int i = 0; i < 6; i++) {
        double a = fan[i] ? sqrt(6.0 / fan[i]) : 0;
        tn_array *v = fan[i] ? tn_rs_uniform(rs, TN_F32, nd[i], shp[i], -a, a) : tn_array_zeros(TN_F32, nd[i], shp[i]);
        P[i] = tn_shared_fixed(g, "p", v);
        tn_array_free(v);
    }
    tn_array *X = tn_rs_uniform(rs, TN_F32, 2, (int64_t[]){ B, 64 }, 0, 1), *U = tn_rs_uniform(rs, TN_F64, 1, (int64_t[]){ B }, 0, 10);
    tn_array *Yv = tn_array_astype(U, TN_I32);
    tn_var *x = tn_shared_fixed(g, "x", X), *y = tn_shared_fixed(g, "y", Yv);
    tn_array_free(X); tn_array_free(U); tn_array_free(Yv);
    tn_random_state_free(rs);
    int one = 1;
    tn_var *nll = tn_neg(tn_mean(tn_sum(tn_mul(tn_one_hot(y, 10, TN_F32), tn_log_softmax(convnet_net(x, P, tn_random_stream(g, 42)), 1)),
                                        &one, 1, false), NULL, 0, false));
    tn_var *gr[6];
    tn_result e = nll ? tn_grad(nll, 6, P, gr, NULL) : TN_ERR_NULL;
    tn_update up[12];
    for (int i = 0; e == TN_OK && i < 6; i++) {      /* v <- 0.9 v - 0.05 g; p <- p + v */
        tn_array *z = tn_array_zeros(TN_F32, nd[i], shp[i]);
        tn_var *v = tn_shared(g, "velocity", z);
        tn_array_free(z);
        tn_var *nv = tn_sub(tn_mul(tn_lit(v, 0.9), v), tn_mul(tn_lit(v, 0.05), gr[i]));
        up[2 * i] = (tn_update){ v, nv };
        up[2 * i + 1] = (tn_update){ P[i], tn_add(P[i], nv) };
    }
    static const char *const names[3] = { "convnet step B=32 f32", "convnet step B=32, graph replay", "convnet step B=32, no graph replay" };
    train_rows(g, names, e, 12, up, iters, "", 0);
    tn_graph_free(g);
}

/* >>cases: the deck's recurrent network (examples/rnn_scan.c) --------------- */
/* x(n) = tanh(W x(n-1) + W1 u(n) + W2 u(n-4) + Wf y(n-1)), y(n) = Wout x(n-3):
   tn_scan with sequence taps -4/0 and output taps -3/-1, float64, 6 states,
   3 inputs, 2 outputs, over 1004 rows of u (1000 steps); the stacked x and y
   returned. Forward, and forward with the gradient of sum(y^2) by W (BPTT).
   Per step: a call's time over its 1000 steps. bench/peers.py runs the same
   loop as JAX's lax.scan and as a PyTorch loop. */
enum { RNN_X = 6, RNN_U = 3, RNN_Y = 2, RNN_L = 1004, RNN_T = RNN_L - 4 };

static tn_result rnn_bench_step(tn_scan_step *s, void *user) {
    (void)user;
    tn_var *W = s->non_seq[0], *W1 = s->non_seq[1], *W2 = s->non_seq[2], *Wf = s->non_seq[3], *Wout = s->non_seq[4];
    s->outputs[0] = tn_tanh(tn_add(tn_add(tn_dot(W, s->out[0][1]), tn_dot(W1, s->seq[0][1])),
                                   tn_add(tn_dot(W2, s->seq[0][0]), tn_dot(Wf, s->out[1][0]))));
    s->outputs[1] = tn_dot(Wout, s->out[0][0]);
    return TN_OK;
}

/* The loop's function: x and y, with grad also d sum(y^2) / dW. */
static tn_func *rnn_bench_fn(tn_graph *g, bool grad, tn_var **in) {
    static const int64_t shp[8][2] = { { RNN_X, RNN_X }, { RNN_X, RNN_U }, { RNN_X, RNN_U }, { RNN_X, RNN_Y }, { RNN_Y, RNN_X },
                                       { -1, RNN_U }, { 3, RNN_X }, { RNN_Y, 0 } };
    for (int i = 0; i < 8; i++) in[i] = tn_input(g, "p", TN_F64, i == 7 ? 1 : 2, shp[i], NULL);
    static const int utaps[2] = { -4, 0 }, xtaps[2] = { -3, -1 };
    tn_scan_seq seq = { in[5], 2, utaps };
    tn_scan_out oi[2] = { { in[6], 2, xtaps }, { in[7], 0, NULL } };
    tn_var *xy[3] = { NULL, NULL, NULL };
    if (tn_scan(&(tn_scan_desc){ .step = rnn_bench_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 2, .outputs = oi,
                                 .n_non_sequences = 5, .non_sequences = in, .name = "rnn" }, xy, NULL, NULL) != TN_OK)
        return NULL;
    if (grad && !(xy[2] = tn_grad1(tn_sum(tn_sqr(xy[1]), NULL, 0, false), in[0]))) return NULL;
    return tn_function(g, &(tn_func_desc){ .n_inputs = 8, .inputs = in, .n_outputs = grad ? 3 : 2, .outputs = xy, .name = "rnn" });
}

static void scan_cases(void) {
    const char *S = "scan";
    int iters = GPU ? (Q ? 20 : 100) : (Q ? 10 : 50);
    static const int64_t shp[8][2] = { { RNN_X, RNN_X }, { RNN_X, RNN_U }, { RNN_X, RNN_U }, { RNN_X, RNN_Y }, { RNN_Y, RNN_X },
                                       { RNN_L, RNN_U }, { 3, RNN_X }, { RNN_Y, 0 } };
    tn_array *a[8];
    for (int i = 0; i < 8; i++) a[i] = tn_array_rand_uniform(TN_F64, i == 7 ? 1 : 2, shp[i], -0.7, 0.7, 100 + (uint64_t)i);
    const char *names[2][2] = { { "rnn_scan forward, per step", "rnn_scan forward, cuda_graph=0" },
                                { "rnn_scan fwd + BPTT grad, per step", "rnn_scan fwd + grad, cuda_graph=0" } };
    for (int grad = 0; grad < 2; grad++)
        for (int plain = 0; plain < 1 + GPU; plain++) {
            row *r = R(S, names[grad][plain]);
            tn_graph *g = tn_graph_new();
            tn_var *in[8];
            if (plain) cfg_push(nograph);
            tn_func *f = rnn_bench_fn(g, grad, in);
            if (plain) cfg_pop();
            int on_dev = steps_on(f, true, TN_OP_SCAN, NULL), n = on_dev + steps_on(f, false, TN_OP_SCAN, NULL);
            if (!f) err(r, "in tn_function");
            else if (GPU && on_dev < n) na(r, "%d of %d scans on the GPU", on_dev, n);
            else {
                run_func(r, f, a, iters);
                if (!r->na[0]) {
                    r->med /= RNN_T; r->lo /= RNN_T; r->hi /= RNN_T;
                    int64_t rep = 0, cap = 0;
                    const char *why = "";
                    tn__replay_stats(f, &rep, &cap, &why);
                    int sk = 0;         /* the step functions' ops, of every loop (forward, backward) */
                    for (int k = 0; k < f->n_steps; k++) {
                        const tn__scan *sc = f->steps[k].node->op == TN_OP_SCAN ? (const tn__scan *)f->steps[k].node->ext : NULL;
                        if (sc) sk += steps_on(GPU && sc->dfn ? sc->dfn : sc->fn, GPU, -1, NULL);
                    }
                    if (GPU && !plain) {
                        if (!grad) set_limit(r, "", 0, T_ABS, 10e-6);
                        snprintf(r->note, sizeof r->note, "%d steps a call, %d kernels a step; %lld replays%s%.30s", RNN_T, sk,
                                 (long long)rep, *why ? ": " : "", why);
                    } else snprintf(r->note, sizeof r->note, "%d steps a call, %d ops a step", RNN_T, sk);
                }
            }
            tn_function_free(f);
            tn_graph_free(g);
        }
    for (int i = 0; i < 8; i++) tn_array_free(a[i]);
}

/* >>cases: convolutions (the peers' CONV_SHAPES: bench/peers.py) ---------------- */
/* conv2d of x (N, Ci, H, H) with w (Co, Ci, k, k), padding k/2, forward and
   forward + gradients with respect to x and w (the sum of the output as the
   cost), x and w shared, results kept on the device (borrowed): the
   library's im2col + product path, as TFLOP/s of the convolution's own
   2 N Co Ci k^2 H^2 (x3 with the gradients). PyTorch's cuDNN rows are in the
   peers' table. */
static void conv_cases(void) {
    static const int shapes[3][5] = { { 64, 3, 64, 3, 32 }, { 64, 64, 128, 3, 16 }, { 64, 128, 128, 1, 8 } };
    const char *S = GPU ? "conv" : "cpu";
    for (int dt = 0; dt < (GPU ? 2 : 1); dt++) {
        tn_dtype t = dt ? TN_F16 : TN_F32;
        for (int q = 0; q < 3; q++) {
            int n = shapes[q][0], ci = shapes[q][1], co = shapes[q][2], k = shapes[q][3], h = shapes[q][4];
            int iters = GPU ? (Q ? 20 : 200) : (Q ? 2 : 5);
            tn_array *X = tn_array_rand_normal(t, 4, (int64_t[]){ n, ci, h, h }, 0, 1, 5), *W = tn_array_rand_normal(t, 4, (int64_t[]){ co, ci, k, k }, 0, 0.1, 6);
            tn_graph *g = tn_graph_new();
            tn_var *x = tn_shared_fixed(g, "x", X), *w = tn_shared_fixed(g, "w", W);
            tn_conv_opts o;
            memset(&o, 0, sizeof o);
            o.padding[0] = o.padding[1] = k / 2;
            tn_var *y = tn_conv2d(x, w, &o);
            /* the backward from a given output gradient of ones, made once, as the peer's torch.autograd.grad(y, (x, w), gy) */
            tn_array *GY = tn_array_ones(t, 4, (int64_t[]){ n, co, h, h });
            tn_var *gy = tn_shared_fixed(g, "gy", GY), *wrt[2] = { x, w }, *gr[2] = { NULL, NULL };
            tn_grad_options go;
            memset(&go, 0, sizeof go);
            go.n_known_grads = 1; go.known_vars = &y; go.known_grads = &gy;
            tn_result ge = y && gy ? tn_grad(NULL, 2, wrt, gr, &go) : TN_ERR_NULL;
            for (int b = 0; b < 2; b++) {
                char name[96];
                snprintf(name, sizeof name, "conv2d %d->%d %dx%d @%d N=%d %s %s", ci, co, k, k, h, n, dt ? "f16" : "f32", b ? "fwd+bwd" : "fwd");
                row *r = R(S, name);
                if (!y || (b && ge != TN_OK)) { err(r, "building the graph"); continue; }
                tn_var *outs[3] = { GPU ? tn_gpu_from_host(y) : y, gr[0] && GPU ? tn_gpu_from_host(gr[0]) : gr[0], gr[1] && GPU ? tn_gpu_from_host(gr[1]) : gr[1] };
                tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = b ? 3 : 1, .outputs = outs, .borrow = true, .name = "conv" });
                if (!f) err(r, "in tn_function");
                else {
                    run_func(r, f, NULL, iters);
                    if (!r->na[0]) rate(r, (b ? 3.0 : 1.0) * 2.0 * n * co * ci * k * k * h * h, "FLOP/s");
                }
                tn_function_free(f);
            }
            tn_graph_free(g);
            tn_array_free(X); tn_array_free(W); tn_array_free(GY);
        }
    }
}

/* >>cases: compile time ------------------------------------------------------ */

/* About n nodes: repeated blocks of ~20 nodes with shared subexpressions
   (merged), constants (folded), reductions and products between them. */
static tn_var *big_graph(tn_graph *g, int n, tn_var **x, tn_var **W) {
    *x = tn_matrix(g, "x", TN_F32);
    *W = tn_matrix(g, "W", TN_F32);
    tn_var *h = *x;
    while (tn__graph_nvars(g) < n) {
        tn_var *a = tn_exp(tn_mul(h, tn_lit(h, 0.5)));
        tn_var *b = tn_exp(tn_mul(h, tn_lit(h, 0.5)));              /* merged with a */
        tn_var *c = tn_add(tn_add(tn_sub(a, tn_lit(a, 1)), tn_lit(a, 2)), tn_mul(b, tn_lit(b, 1)));
        tn_var *d = tn_log(tn_add(tn_lit(c, 1), tn_sigmoid(c)));
        if (tn__graph_nvars(g) % 7 == 0) d = tn_sub(d, tn_max(d, (int[]){ 1 }, 1, true));
        if (tn__graph_nvars(g) % 11 == 0) d = tn_add(tn_dot(d, *W), d);
        h = tn_tanh(tn_add(d, tn_mul(h, tn_lit(h, 0.25))));
    }
    return tn_sum(h, NULL, 0, false);
}

static void rewrite_cases(void) {
    const tn_backend *be = tn__get_backend();
    tn__set_backend(NULL);          /* the optimizer's time, not NVRTC's */
    int sizes[3] = { 1000, 10000, 100000 };
    for (int s = 0; s < 3; s++) {
        char name[48];
        snprintf(name, sizeof name, "tn_function, %dk-node graph", sizes[s] / 1000);
        row *r = R("compile", name);
        tn_graph *g = tn_graph_new();
        tn_var *x, *W, *y = big_graph(g, sizes[s], &x, &W), *in[2] = { x, W };
        int nv = tn__graph_nvars(g);
        int reps = Q ? (sizes[s] >= 100000 ? 1 : 2) : (sizes[s] >= 100000 ? 3 : 5);
        double t[8];
        for (int k = 0; k < reps; k++) {
            double t0 = now();
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = in, .n_outputs = 1, .outputs = &y });
            t[k] = now() - t0;
            if (!f) { err(r, "in tn_function"); break; }
            tn_function_free(f);
        }
        tn_graph_free(g);
        if (r->na[0]) continue;
        for (int i = 1; i < reps; i++)
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { double v = t[j]; t[j] = t[j - 1]; t[j - 1] = v; }
        r->med = t[reps / 2]; r->lo = t[0]; r->hi = t[reps - 1];
        if (sizes[s] == 10000) set_limit(r, "issue 7", 0, T_ABS, 50e-3);
        snprintf(r->note, sizeof r->note, "%d nodes, %.2f us/node, optimizer + schedule", nv, r->med * 1e6 / nv);
    }
    tn__set_backend(be);
}

/* NVRTC: first compile, disk-cache hit, in-memory hit of the fused chain's
   kernel. Needs NVRTC, not a GPU (then for sm_90). Runs last: a disk hit
   needs the in-memory cache emptied, which unloads every module. */
static char cache_dir[64];
static void use_cache_dir(tn_config *c) { c->cache_dir = cache_dir; }
typedef struct memhit { const char *src, *arch; } memhit;
static tn_result memhit_loop(void *p, int iters) {
    memhit *m = (memhit *)p;
    const void *bin;
    size_t size;
    for (int i = 0; i < iters; i++) {
        tn_result r = tn_cuda_compile(m->src, m->arch, &bin, &size);
        if (r != TN_OK) return r;
    }
    return TN_OK;
}

static void nvrtc_cases(void) {
    row *r1 = R("compile", "NVRTC first compile, chain kernel");
    row *r2 = R("compile", "disk-cache hit");
    row *r3 = R("compile", "in-memory hit (tn_cuda_compile)");
    if (tn__nvrtc_load(tn__cuda.driver_version / 1000) != TN_OK) {
        na(r1, "%s", tn_last_error()); snprintf(r2->na, sizeof r2->na, "%s", r1->na); snprintf(r3->na, sizeof r3->na, "%s", r1->na);
        return;
    }
    const char *arch = GPU ? CUDA_DEV()->arch : "sm_90";
    /* the chain's fused program, from a host compile */
    const tn_backend *be = tn__get_backend();
    tn__set_backend(NULL);
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_vector(g, "a", TN_F32), *b = tn_vector(g, "b", TN_F32), *c = tn_vector(g, "c", TN_F32);
    tn_var *in[3] = { a, b, c }, *y = chain(a, b, c, NULL);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = in, .n_outputs = 1, .outputs = &y });
    tn__set_backend(be);
    const tn_ew_program *prog = NULL;
    for (int i = 0; f && i < f->n_steps; i++)
        if (f->steps[i].node->op == TN_OP_COMPOSITE) prog = (const tn_ew_program *)f->steps[i].node->ext;
    char *src = NULL;
    tn__cuda_layout Lc = { TN__CUDA_CONTIG, 0, 0 };
    if (!prog) na(r1, "the chain did not fuse into one Composite");
    else if (tn__cuda_ew_source(prog, &Lc, &src) != TN_OK) err(r1, "generating the kernel");
    snprintf(cache_dir, sizeof cache_dir, "/tmp/tn_bench_XXXXXX");
    if (!r1->na[0] && !mkdtemp(cache_dir)) na(r1, "mkdtemp failed");
    if (r1->na[0]) {
        snprintf(r2->na, sizeof r2->na, "%s", r1->na); snprintf(r3->na, sizeof r3->na, "%s", r1->na);
        tn__free(src); tn_function_free(f); tn_graph_free(g);
        return;
    }
    cfg_push(use_cache_dir);
    enum { K = 5 };
    int reps = Q ? 3 : K;
    char *srcs[K];
    double t1[K], t2[K];
    tn_cuda_cache_stats s0, s1, s2;
    size_t sl = strlen(src) + 96;
    for (int k = 0; k < reps; k++) {    /* a unique comment: each is a real compile */
        srcs[k] = (char *)malloc(sl);
        snprintf(srcs[k], sl, "/* bench %ld %.0f %d */\n%s", (long)getpid(), now() * 1e6, k, src);
    }
    tn_cuda_get_cache_stats(&s0);
    const void *bin;
    size_t size;
    tn_result e = TN_OK;
    for (int k = 0; k < reps && e == TN_OK; k++) {
        double t0 = now();
        e = tn_cuda_compile(srcs[k], arch, &bin, &size);
        t1[k] = now() - t0;
    }
    tn_cuda_get_cache_stats(&s1);
    for (int k = 0; k < reps && e == TN_OK; k++) {
        tn__cuda_kcache_clear();
        double t0 = now();
        e = tn_cuda_compile(srcs[k], arch, &bin, &size);
        t2[k] = now() - t0;
    }
    tn_cuda_get_cache_stats(&s2);
    row *rr[2] = { r1, r2 };
    double *tt[2] = { t1, t2 }, tgt[2] = { 80e-3, 1e-3 };
    for (int j = 0; j < 2; j++) {
        if (e != TN_OK) { err(rr[j], "in tn_cuda_compile"); continue; }
        double *t = tt[j];
        for (int i = 1; i < reps; i++)
            for (int m = i; m > 0 && t[m] < t[m - 1]; m--) { double v = t[m]; t[m] = t[m - 1]; t[m - 1] = v; }
        rr[j]->med = t[reps / 2]; rr[j]->lo = t[0]; rr[j]->hi = t[reps - 1];
        set_limit(rr[j], "issue 7", 0, T_ABS, tgt[j]);
    }
    if (e == TN_OK) {
        snprintf(r1->note, sizeof r1->note, "%s, nvrtc %d.%d, %zu-byte source, %llu compiles", arch, tn__nvrtc.major,
                 tn__nvrtc.minor, strlen(srcs[0]), (unsigned long long)(s1.compiles - s0.compiles));
        snprintf(r2->note, sizeof r2->note, "%llu disk hits of %d", (unsigned long long)(s2.disk_hits - s1.disk_hits), reps);
        memhit m = { srcs[0], arch };
        if (measure(memhit_loop, &m, Q ? 2000 : 20000, r3) != TN_OK) err(r3, "in tn_cuda_compile");
        else { set_limit(r3, "issue 7", 0, T_ABS, 5e-6); snprintf(r3->note, sizeof r3->note, "hashes the source; a node's state skips it"); }
    } else snprintf(r3->na, sizeof r3->na, "%s", r1->na);
    cfg_pop();
    for (int k = 0; k < reps; k++) free(srcs[k]);
    DIR *d = opendir(cache_dir);          /* remove the temporary cache */
    for (struct dirent *de; d && (de = readdir(d)) != NULL;) {
        char p[400];
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", cache_dir, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(cache_dir);
    tn__free(src);
    tn_function_free(f);
    tn_graph_free(g);
}

/* >>cases: GPU, bare limits through the driver and cuBLAS ------------------- */

/* cuBLAS of our own (the back end's handle may not exist yet): NULL when
   loaded, else why not. */
static tn__cublas_api cb;
static tn__cublasHandle_t cbh;
static const char *cublas_open(void) {
    static char why[300];
    static int state;
    if (state) return state > 0 ? NULL : why;
    const char *names[] = { "libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so" };
    char path[256];
    void *h = tn__dlopen_first("TN_LIBCUBLAS_PATH", names, 4, path, sizeof path);
    const char *missing = h ? tn__cublas_syms(h, &cb) : NULL;
    state = -1;
    if (!h) snprintf(why, sizeof why, "libcublas.so.13/.12 not found");
    else if (missing) snprintf(why, sizeof why, "%.200s lacks %.40s", path, missing);
    else if (cb.cublasCreate_v2(&cbh) != TN__CUBLAS_STATUS_SUCCESS) snprintf(why, sizeof why, "cublasCreate failed");
    else {
        cb.cublasSetStream_v2(cbh, tn__cuda_stream(CUDA_DEV()));
        cb.cublasSetMathMode(cbh, TN__CUBLAS_DEFAULT_MATH);   /* TF32 off, as the back end's default */
        state = 1;
    }
    return state > 0 ? NULL : why;
}

/* One bare iteration: optional pinned host-to-device copies, a kernel, an
   sgemm, a device-to-host copy into pinned memory, and a wait. */
typedef struct bare {
    int n_h2d;
    tn__CUdeviceptr h2d_dst[3];
    size_t h2d_bytes;
    char *pin_in;
    tn__CUfunction fn;
    unsigned blocks;
    void **params;
    int gemm_n;
    tn__CUdeviceptr A, B, C;
    size_t d2h_bytes;
    tn__CUdeviceptr d2h_src;
    void *pin_out;
    bool sync_each;
} bare;

static tn_result bare_loop(void *p, int iters) {
    bare *b = (bare *)p;
    tn__CUstream s = tn__cuda_stream(CUDA_DEV());
    const float one = 1.0f;
    for (int i = 0; i < iters; i++) {
        for (int k = 0; k < b->n_h2d; k++)
            TN__CU_CHECK(tn__cuda.cu.cuMemcpyHtoDAsync_v2(b->h2d_dst[k], b->pin_in + (size_t)k * b->h2d_bytes, b->h2d_bytes, s), "bare h2d");
        if (b->fn) TN__CU_CHECK(tn__cuda.cu.cuLaunchKernel(b->fn, b->blocks, 1, 1, 256, 1, 1, 0, s, b->params, NULL), "bare launch");
        if (b->gemm_n) {
            int n = b->gemm_n;   /* row-major C = A@B is column-major C^T = B^T A^T */
            if (cb.cublasSgemm_v2(cbh, TN__CUBLAS_OP_N, TN__CUBLAS_OP_N, n, n, n, &one, (const float *)(uintptr_t)b->B, n,
                                  (const float *)(uintptr_t)b->A, n, &one, (float *)(uintptr_t)b->C, n) != TN__CUBLAS_STATUS_SUCCESS)
                return tn__err(TN_ERR_DEVICE, "bench: cublasSgemm failed");
        }
        if (b->d2h_bytes) TN__CU_CHECK(tn__cuda.cu.cuMemcpyDtoHAsync_v2(b->pin_out, b->d2h_src, b->d2h_bytes, s), "bare d2h");
        if (b->sync_each) TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(s), "bare sync");
    }
    TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(s), "bare sync");
    return TN_OK;
}

static bool bare_run(row *r, bare *b, int iters) {
    if (measure(bare_loop, b, iters, r) != TN_OK) { err(r, "in the bare loop"); return false; }
    set_limit(r, "", 0, T_LIMIT, 0);
    return true;
}

/* The generated kernel of `p` (contiguous layout), through the back end's cache. */
static tn_result bare_kernel(const tn_ew_program *p, tn__CUfunction *fn) {
    tn__cuda_layout L = { TN__CUDA_CONTIG, 0, 0 };
    char *src = NULL;
    tn_result r = tn__cuda_ew_source(p, &L, &src);
    tn__kentry *e = NULL;
    if (r == TN_OK) r = tn__cuda_kernel_get(src, CUDA_DEV()->arch, tn_get_config()->fast_math, &e);
    tn__free(src);
    return r == TN_OK ? tn__cuda_entry_function(CUDA_DEV(), e, "tn_ew", fn) : r;
}
/* The grid tn__cuda_ew_run launches for n contiguous elements. */
static unsigned bare_blocks(int64_t n) {
    int64_t blocks = ((n + 3) / 4 + 255) / 256, cap = (int64_t)CUDA_DEV()->sm_count * 16;
    if (blocks > cap && cap > 0) blocks = cap;
    return blocks < 1 ? 1u : (unsigned)blocks;
}

/* The program of f's first elementwise device step (the kernel the function
   launches), or NULL. */
static const tn_ew_program *device_program(tn_func *f) {
    for (int i = 0; f && i < f->n_steps; i++) {
        tn_var *v = f->steps[i].node;
        if (v->device == TN_HOST) continue;
        if (v->op == TN_OP_COMPOSITE) return (const tn_ew_program *)v->ext;
        if (tn__ew_info(v->op)) return tn__ew_program_of(v);
    }
    return NULL;
}

static tn_dtype exp_dt[1] = { TN_F32 };
static int32_t exp_out[1] = { 1 };
static tn_ew_instr exp_in = { TN_OP_EXP, TN_F32, TN_F32, 0, -1, -1, 0 };
static const tn_ew_program exp_prog = { .n_in = 1, .in_dtype = exp_dt, .n_instr = 1, .instr = &exp_in, .n_out = 1, .out_reg = exp_out, .out_dtype = exp_dt };

/* copy vs borrow vs shared: exp over 10*30*768 float32 (the seed's test). */
static void gpu_exp_cases(void) {
    const char *S = "exp";
    int64_t sh[3] = { 10, 30, 768 }, n = 10 * 30 * 768;
    size_t bytes = (size_t)n * 4;
    int iters = Q ? 200 : 1000;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 3, sh, -1, 1, 22), *zv = tn_array_zeros(TN_F32, 3, sh);
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_shared(g, "x", xv), *y = tn_exp(x), *ys = tn_shared(g, "y", zv);
    tn_array_free(xv); tn_array_free(zv);
    tn_func *fc = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .name = "exp copy" });

    /* limits: the same generated kernel in a bare cuLaunchKernel loop; and with a pinned copy back */
    row *L1 = R(S, "bare cuLaunchKernel");
    row *L2 = R(S, "bare launch + pinned d2h copy");
    const tn_ew_program *p = device_program(fc);
    tn__CUfunction fn = NULL;
    tn__CUdeviceptr din = 0, dout = 0;
    void *pin = NULL;
    if (bare_kernel(p ? p : &exp_prog, &fn) != TN_OK) { err(L1, "compiling the kernel"); err(L2, "compiling the kernel"); }
    else if (tn__cuda.cu.cuMemAlloc_v2(&din, bytes) || tn__cuda.cu.cuMemAlloc_v2(&dout, bytes) ||
             tn__cuda.cu.cuMemAllocHost_v2(&pin, bytes)) { na(L1, "device allocation failed"); na(L2, "device allocation failed"); }
    else {
        tn__cuda.cu.cuMemsetD8Async(din, 0, bytes, tn__cuda_stream(CUDA_DEV()));
        void *params[3] = { &n, &din, &dout };
        bare b = { .fn = fn, .blocks = bare_blocks(n), .params = params };
        if (bare_run(L1, &b, iters)) snprintf(L1->note, sizeof L1->note, "%s kernel, %u blocks", p ? "the function's" : "a generated exp", b.blocks);
        b.d2h_bytes = bytes; b.d2h_src = dout; b.pin_out = pin; b.sync_each = true;
        bare_run(L2, &b, iters);
    }
    double lim_launch = L1->na[0] ? 0 : L1->med, lim_copy = L2->na[0] ? 0 : L2->med;

    gfh_fn gfh = gpu_from_host();
    tn_var *yd = gfh ? gfh(y) : NULL;
    tn_update up = { ys, y };
    struct { const char *name; tn_func *f; const char *lim_name; double lim, target; bool dev_out; } cs[4] = {
        { "copy: result to host each call", fc, "bare launch + pinned copy", lim_copy, 1.2, false },
        { "device: new device array", NULL, "bare launch", lim_launch, 1.3, true },
        { "borrow: device output borrowed", NULL, "bare launch", lim_launch, 1.1, true },
        { "shared: update writes y", NULL, "bare launch", lim_launch, 1.1, false },
    };
    if (yd) {
        cs[1].f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &yd, .name = "exp device" });
        cs[2].f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &yd, .borrow = true, .name = "exp borrow" });
    }
    cs[3].f = tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &up, .name = "exp shared" });
    for (int k = 0; k < 4; k++) {
        row *r = R(S, cs[k].name);
        tn_func *f = cs[k].f;
        if ((k == 1 || k == 2) && !gfh) { na(r, "tn_gpu_from_host not found: not landed, or built without -rdynamic"); continue; }
        if (!f) { err(r, "in tn_function"); continue; }
        if (!steps_on(f, true, -1, NULL)) { na(r, "placement not landed: exp runs on the CPU"); continue; }
        if (cs[k].dev_out) {       /* the output must really stay on the device */
            tn_array *o = NULL;
            if (tn_call(f, NULL, &o) != TN_OK) { err(r, "in tn_call"); continue; }
            int dev = o->device;
            tn_array_free(o);
            if (dev == TN_HOST) { na(r, "output came back on the host"); continue; }
        }
        run_func(r, f, NULL, iters);
        if (r->na[0]) continue;
        if (cs[k].lim > 0) set_limit(r, cs[k].lim_name, cs[k].lim, T_RATIO, cs[k].target);
        if (k == 3) {
            const tn_array *v = tn_shared_get(ys);
            snprintf(r->note, sizeof r->note, "target as borrow; y lives on %s", v && v->device != TN_HOST ? "the device" : "the HOST");
        } else snprintf(r->note, sizeof r->note, "%d device step%s", steps_on(f, true, -1, NULL), steps_on(f, true, -1, NULL) == 1 ? "" : "s");
    }
    for (int k = 0; k < 4; k++) tn_function_free(cs[k].f);
    tn_graph_free(g);
    if (din) tn__cuda.cu.cuMemFree_v2(din);
    if (dout) tn__cuda.cu.cuMemFree_v2(dout);
    if (pin) tn__cuda.cu.cuMemFreeHost(pin);
}

/* >>cases: CUDA graph replay ------------------------------------------------ */

/* Two functions of small kernels, all data shared, per call with graph
   replay and with cuda_graph=0, both compared to a bare cuGraphLaunch loop
   of the function's own captured graph (the floor: what is left is the
   executor's work per call). chain: elementwise ops between reductions
   (nothing fuses across them), x (64, 256) float32, the result borrowed on
   the device; the GPU is the bottleneck there, so replay gains little.
   step: a training step, h = tanh(X.w + b) returned borrowed, w and b
   updated (X.h, sum(h^2)), X (300, 77): cuBLAS's host work per product
   dominates without a graph. */
static tn_func *graph_chain(tn_graph *g, gfh_fn gfh) {
    tn_array *xv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 64, 256 }, -1, 1, 91);
    tn_var *x = tn_shared(g, "x", xv);
    tn_array_free(xv);
    tn_var *a = tn_exp(x);
    tn_var *a2 = tn_div(a, tn_sum(a, (int[]){ 1 }, 1, true));
    tn_var *c = tn_tanh(tn_sub(a2, tn_max(a2, (int[]){ 0 }, 1, true)));
    tn_var *d = tn_div(c, tn_sqrt(tn_add(tn_sum(tn_mul(c, c), (int[]){ 1 }, 1, true), tn_lit(c, 1.0))));
    tn_var *e = tn_sub(d, tn_mean(d, (int[]){ 0 }, 1, true));
    tn_var *out = gfh(tn_sum(tn_mul(e, x), (int[]){ 1 }, 1, false));
    return tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &out, .borrow = true, .name = "graph chain" });
}
static tn_func *graph_step(tn_graph *g, gfh_fn gfh) {
    tn_array *Xv = tn_array_rand_uniform(TN_F32, 2, (int64_t[]){ 300, 77 }, -1, 1, 92);
    tn_array *wv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 77 }, -0.1, 0.1, 93), *bv = tn_array_scalar(TN_F32, 0.1);
    tn_var *X = tn_shared(g, "X", Xv), *w = tn_shared(g, "w", wv), *b = tn_shared(g, "b", bv);
    tn_array_free(Xv); tn_array_free(wv); tn_array_free(bv);
    tn_var *h = tn_tanh(tn_add(tn_dot(X, w), b));
    tn_var *nw = tn_add(tn_mul(w, tn_lit(w, 0.99)), tn_mul(tn_lit(w, 0.001), tn_dot(h, X)));
    tn_var *nb = tn_sub(b, tn_mul(tn_lit(b, 0.01 / 300), tn_sum(tn_mul(h, h), NULL, 0, false)));
    tn_var *o = gfh(h);
    tn_update up[2] = { { w, nw }, { b, nb } };
    return tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &o, .n_updates = 2, .updates = up, .borrow = true,
                                           .name = "graph step" });
}

/* The function's captured graphs launched in turn (an update swap makes it
   alternate between two), as it launches them. */
typedef struct gloop { void *exec[TN__REPLAY_SLOTS]; int n; } gloop;
static tn_result graph_loop(void *p, int iters) {
    gloop *g = (gloop *)p;
    for (int i = 0; i < iters; i++)
        TN__CU_CHECK(tn__cuda.cu.cuGraphLaunch(((tn__cuda_replay *)g->exec[i % g->n])->x, tn__cuda_stream(CUDA_DEV())), "bare graph launch");
    TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(CUDA_DEV())), "bare sync");
    return TN_OK;
}

static void gpu_graph_cases(void) {
    const char *S = "graph";
    int iters = Q ? 500 : 5000;
    gfh_fn gfh = gpu_from_host();
    const char *names[2][3] = { { "bare cuGraphLaunch, chain's graph", "9-kernel chain, graph replay", "9-kernel chain, cuda_graph=0" },
                                { "bare cuGraphLaunch, step's graph", "train step, graph replay", "train step, cuda_graph=0" } };
    tn_func *(*build[2])(tn_graph *, gfh_fn) = { graph_chain, graph_step };
    for (int c = 0; c < 2; c++) {
        row *L = R(S, names[c][0]), *A = R(S, names[c][1]), *B = R(S, names[c][2]);
        if (!gfh) { na(L, "tn_gpu_from_host not found"); na(A, "tn_gpu_from_host not found"); na(B, "tn_gpu_from_host not found"); continue; }
        tn_graph *g = tn_graph_new(), *g0 = tn_graph_new();
        tn_func *f = build[c](g, gfh);
        cfg_push(nograph);
        tn_func *f0 = build[c](g0, gfh);
        cfg_pop();
        int nk = steps_on(f, true, -1, NULL);
        char why[160];
        if (!f || !f0) { err(L, "in tn_function"); err(A, "in tn_function"); err(B, "in tn_function"); }
        else if (*all_on_device(f, why, sizeof why)) { na(L, "%s", why); na(A, "%s", why); na(B, "%s", why); }
        else {
            run_func(A, f, NULL, iters);
            int64_t rep = 0, cap = 0;
            const char *gwhy = "";
            tn__replay_stats(f, &rep, &cap, &gwhy);
            gloop gl = { { NULL }, 0 };
            for (int i = 0; f->rcache && i < TN__REPLAY_SLOTS; i++) if (f->rcache->e[i].exec) gl.exec[gl.n++] = f->rcache->e[i].exec;
            if (!gl.n) na(L, "no graph captured: %.100s", gwhy);
            else if (measure(graph_loop, &gl, iters, L) != TN_OK) err(L, "in the bare graph loop");
            else {
                set_limit(L, "", 0, T_LIMIT, 0);
                snprintf(L->note, sizeof L->note, "the function's %d captured graph%s in turn, %d kernels", gl.n, gl.n > 1 ? "s" : "", nk);
                if (gl.n > 1) {          /* for contrast: one of them alone */
                    row *L1 = R(S, "bare cuGraphLaunch, one graph only");
                    gl.n = 1;
                    if (measure(graph_loop, &gl, iters, L1) != TN_OK) err(L1, "in the bare graph loop");
                    else set_limit(L1, "", 0, T_LIMIT, 0);
                }
            }
            if (!A->na[0]) {
                if (!L->na[0]) set_limit(A, "bare cuGraphLaunch, same graph", L->med, T_RATIO, 1.2);
                snprintf(A->note, sizeof A->note, "%d kernels, %lld replays, %lld captures%s%.40s", nk, (long long)rep,
                         (long long)cap, *gwhy ? "; " : "", gwhy);
            }
            run_func(B, f0, NULL, iters);
            if (!B->na[0]) {
                if (!L->na[0]) set_limit(B, "bare cuGraphLaunch, same graph", L->med, T_INFO, 0);
                if (!A->na[0]) snprintf(B->note, sizeof B->note, "%d launches a call; graph replay is %.2fx faster", nk, B->med / A->med);
            }
        }
        tn_function_free(f);
        tn_function_free(f0);
        tn_graph_free(g);
        tn_graph_free(g0);
    }
}

/* transfers: y = m.x + b, 1000x1000 float32 (the blog's lesson). */
static void gpu_gemm_cases(void) {
    const char *S = "gemm";
    const int N = 1000;
    int64_t sh[2] = { N, N };
    size_t bytes = (size_t)N * N * 4;
    int iters = Q ? 50 : 500;
    double flops = 2.0 * N * N * N;
    row *L1 = R(S, "bare cublasSgemm");
    row *L2 = R(S, "bare 3 pinned h2d + sgemm + d2h");
    row *L3 = R(S, "bare 1 pinned h2d + sgemm + d2h");
    const char *why = cublas_open();
    tn__CUdeviceptr dm = 0, dx = 0, dy = 0, db = 0;
    void *pin_in = NULL, *pin_out = NULL;
    if (why) { na(L1, "%s", why); na(L2, "%s", why); na(L3, "%s", why); }
    else if (tn__cuda.cu.cuMemAlloc_v2(&dm, bytes) || tn__cuda.cu.cuMemAlloc_v2(&dx, bytes) || tn__cuda.cu.cuMemAlloc_v2(&dy, bytes) ||
             tn__cuda.cu.cuMemAlloc_v2(&db, bytes) || tn__cuda.cu.cuMemAllocHost_v2(&pin_in, 3 * bytes) ||
             tn__cuda.cu.cuMemAllocHost_v2(&pin_out, bytes)) { na(L1, "allocation failed"); na(L2, "allocation failed"); na(L3, "allocation failed"); }
    else {
        memset(pin_in, 0, 3 * bytes);         /* zeros: a bare loop's values do not matter, only their cost */
        tn__cuda.cu.cuMemsetD8Async(dm, 0, bytes, tn__cuda_stream(CUDA_DEV()));
        tn__cuda.cu.cuMemsetD8Async(dx, 0, bytes, tn__cuda_stream(CUDA_DEV()));
        tn__cuda.cu.cuMemsetD8Async(dy, 0, bytes, tn__cuda_stream(CUDA_DEV()));
        bare b = { .gemm_n = N, .A = dm, .B = dx, .C = dy };
        if (bare_run(L1, &b, iters)) rate(L1, flops, "FLOP/s");
        bare b2 = { .n_h2d = 3, .h2d_dst = { dm, dx, db }, .h2d_bytes = bytes, .pin_in = (char *)pin_in, .gemm_n = N, .A = dm, .B = dx, .C = dy,
                    .d2h_bytes = bytes, .d2h_src = dy, .pin_out = pin_out, .sync_each = true };
        bare_run(L2, &b2, iters);
        b2.n_h2d = 1; b2.h2d_dst[0] = dx;
        bare_run(L3, &b2, iters);
    }
    double lim[3] = { L1->na[0] ? 0 : L1->med, L2->na[0] ? 0 : L2->med, L3->na[0] ? 0 : L3->med };

    tn_array *M = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 1), *X = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 2);
    tn_array *B = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 3);
    tn_graph *g = tn_graph_new();
    tn_var *mi = tn_matrix(g, "m", TN_F32), *xi = tn_matrix(g, "x", TN_F32), *bi = tn_matrix(g, "b", TN_F32);
    tn_var *ms = tn_shared(g, "m", M), *xs = tn_shared(g, "x", X), *bs = tn_shared(g, "b", B), *ys = tn_shared(g, "y", B);
    tn_var *y_all = tn_add(tn_dot(mi, xi), bi), *y_x = tn_add(tn_dot(ms, xi), bs), *y_sh = tn_add(tn_dot(ms, xs), bs);
    tn_var *ins3[3] = { mi, xi, bi };
    tn_update up = { ys, y_sh };
    tn_array *in3[3] = { M, X, B }, *in1[1] = { X };
    struct { const char *name; tn_func *f; tn_array **in; int lim; double target; const char *lim_name; } cs[3] = {
        { "all inputs passed, y copied back", tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = ins3, .n_outputs = 1, .outputs = &y_all }),
          in3, 1, 1.2, "bare 3 h2d + sgemm + d2h" },
        { "m,b shared, x passed, y copied", tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &xi, .n_outputs = 1, .outputs = &y_x }),
          in1, 2, 1.2, "bare 1 h2d + sgemm + d2h" },
        { "all shared, update y", tn_function(g, &(tn_func_desc){ .n_updates = 1, .updates = &up }), NULL, 0, 1.02, "bare cublasSgemm" },
    };
    for (int k = 0; k < 3; k++) {
        row *r = R(S, cs[k].name);
        if (!cs[k].f) { err(r, "in tn_function"); continue; }
        if (!device_products(cs[k].f)) { na(r, "the product runs on the CPU: cuBLAS placement not landed"); continue; }
        run_func(r, cs[k].f, cs[k].in, iters);
        if (r->na[0]) continue;
        if (lim[cs[k].lim] > 0) set_limit(r, cs[k].lim_name, lim[cs[k].lim], T_RATIO, cs[k].target);
        rate(r, flops, "FLOP/s");
        char why2[160];
        snprintf(r->note, sizeof r->note, "%.95s", *all_on_device(cs[k].f, why2, sizeof why2) ? why2 : "all on the device");
    }
    for (int k = 0; k < 3; k++) tn_function_free(cs[k].f);
    tn_graph_free(g);
    tn_array_free(M); tn_array_free(X); tn_array_free(B);
    if (dm) tn__cuda.cu.cuMemFree_v2(dm);
    if (dx) tn__cuda.cu.cuMemFree_v2(dx);
    if (dy) tn__cuda.cu.cuMemFree_v2(dy);
    if (db) tn__cuda.cu.cuMemFree_v2(db);
    if (pin_in) tn__cuda.cu.cuMemFreeHost(pin_in);
    if (pin_out) tn__cuda.cu.cuMemFreeHost(pin_out);
}

/* >>main ------------------------------------------------------------------ */

static const char *only;    /* --only: case groups whose name contains it */
#define CASE(fn) do { if (!only || strstr(#fn, only) || (fn == fusion_cases && strstr(BW_CASES, only))) fn(); } while (0)
#define BW_CASES "gather_rows_case pool_cases random_cases"      /* they measure against fusion_cases' copy */

static void usage(void) {
    fprintf(stderr, "usage: build/bench [--quick] [--cpu-only] [--gpu-only] [--only NAME] [--vm-level N]\n"
                    "  --quick     fewer iterations and repeats (CI smoke)\n"
                    "  --only NAME the case groups whose function name contains NAME (e.g. scan, pool, gemm)\n"
                    "  --cpu-only  CPU back end, compile and NVRTC cases only\n"
                    "  --gpu-only  GPU cases (and compile cases) only\n"
                    "  --vm-level N the CPU's vector kernels at most at level N: 0 SSE2, 1 AVX2 and FMA, 2 AVX-512F\n"
                    "              (the clock an all-core AVX-512 loop runs at is lower on some Xeons)\n"
                    "TENSOR_FLAGS is read as usual (device=, fast_math=, threads=, ...).\n");
}

int main(int argc, char **argv) {
    bool cpu_only = false, gpu_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) Q = true;
        else if (!strcmp(argv[i], "--cpu-only")) cpu_only = true;
        else if (!strcmp(argv[i], "--gpu-only")) gpu_only = true;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--vm-level") && i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '2' && !argv[i + 1][1])
            printf("vector kernels at level %d\n", tn__vm_level(argv[++i][0] - '0'));
        else { usage(); return 2; }
    }
    if (cpu_only && gpu_only) { usage(); return 2; }
    tn_config base = { .floatX = TN_F32, .allow_gc = true };
    if (tn_parse_flags(getenv("TENSOR_FLAGS"), &base) != TN_OK) { fprintf(stderr, "TENSOR_FLAGS: %s\n", tn_last_error()); return 2; }
    time_t t = time(NULL);
    char date[32];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M", localtime(&t));
    printf("tensor.h bench, %s%s; every time is wall time around a loop that ends synchronised\n", date, Q ? ", --quick" : "");

    if (!gpu_only) {            /* CPU phase: the GPU is not touched */
        tn_config c = base;
        c.device = TN_DEVICE_CPU;
        tn_init(&c);
        GPU = false;
        printf("cpu: %d threads, CBLAS %s\n", tn__num_threads(), tn__blas_name() ? tn__blas_name() : "none");
        fflush(stdout);
        CASE(fusion_cases);
        CASE(gather_rows_case);
        CASE(pool_cases);
        CASE(random_cases);
        CASE(cpu_gemm_cases);
        CASE(cpu_exp_cases);
        CASE(logreg_cases);
        CASE(convnet_cases);
        CASE(conv_cases);
        CASE(scan_cases);
        CASE(rewrite_cases);
    }
    if (!cpu_only) {
        tn__cuda_forget_failure();
        tn_config c = base;
        if (c.device == TN_DEVICE_CPU) c.device = TN_DEVICE_AUTO;
        tn_init(&c);
        if (tn_cuda_available()) {
            GPU = true;
            tn__cuda_bind(CUDA_DEV());
            printf("gpu: %s\n", tn_cuda_status());
            fflush(stdout);
            CASE(gpu_exp_cases);
            CASE(gpu_gemm_cases);
            CASE(gpu_graph_cases);
            CASE(fusion_cases);
            CASE(gather_rows_case);
            CASE(pool_cases);
            CASE(random_cases);
            CASE(logreg_cases);
            CASE(convnet_cases);
            CASE(conv_cases);
            CASE(scan_cases);
        } else {
            row *r = R("gpu", "GPU cases");
            na(r, "%s", tn_cuda_status());
        }
        if (gpu_only) CASE(rewrite_cases);
    }
    CASE(nvrtc_cases);
    if (cbh) cb.cublasDestroy_v2(cbh);
    print_table();
    printf("\nratio: time / limit time (x), or the limit's rate as %% (bandwidth cases: bytes it must move at the\n"
           "measured copy bandwidth). Limits are measured in this run. n/a: feature not there yet (reason given).\n");
    if (n_errors) printf("%d case%s failed with an error\n", n_errors, n_errors > 1 ? "s" : "");
    tn_shutdown();
    return n_errors ? 1 : 0;
}
