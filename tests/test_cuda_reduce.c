/* On a GPU: the generated reduction and softmax kernels (the >>cuda_reduce section)
   against the CPU kernels (the >>ops_reduce section) on the same random inputs:
   every op x dtype x axis subset of 3-d shapes x keepdims; transposed and
   step-sliced inputs; fused prologues (with inputs broadcast along and
   across the reduced axes); special values (NaN, +-inf, an all -inf row);
   sizes 1, 31, 2^20+3 (full reductions, split across blocks) and 4096x4096
   rows and columns; softmax/log_softmax along each axis, also in place.
   Floats are compared by normalised error (the GPU sums float32 in float32
   along a tree, the CPU in double), ints, bools and indices exactly, NaN
   with NaN. Then the speed line: sum over 2^24 float32 (plain and with a
   fused x*x) against a device-to-device copy of the same bytes in the same
   run (copy GB/s counts read + write; the sum counts its bytes read once).
   Without a usable GPU it prints "SKIP (no usable GPU: why)" and counts nothing.
   TN_TEST_QUICK=1 (compute-sanitizer): small cases only, no timing. */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"

/* The configured device's context (opened by tn_cuda_init). */
#define CUDA_DEV() tn__cuda_dev_get(tn__cuda.ordinal)
#include "harness.h"
#include "gpu/ew_programs.h"

static const int RDEV = 0;
static bool quick;

/* Random values of dtype t for op: floats in [-3, 3] (prod: [0.5, 1.5], so
   float32 neither overflows nor underflows where double does not), ints in
   [-50, 50] (many ties: first-index rules are exercised), bools. special:
   NaN, +inf and a row of -inf planted. */
static tn_array *red_rand_array(int op, tn_dtype t, int ndim, const int64_t *shape, uint64_t seed, bool special) {
    bool prod = op == TN_OP_PROD;
    tn_array *a = tn_array_rand_uniform(TN_F64, ndim, shape, prod ? 0.5 : -3, prod ? 1.5 : 3, seed);
    if (!a) return NULL;
    int64_t n = tn_array_size(a), last = ndim ? shape[ndim - 1] : 1;
    double *d = (double *)a->data;
    for (int64_t i = 0; i < n; i++) {
        if (t == TN_BOOL) d[i] = d[i] > (prod ? 0.7 : -1.5);
        else if (t == TN_I32 || t == TN_I64) d[i] = prod ? (d[i] > 1 ? 1 : -1) : floor(d[i] * 16.7);
        if (special && tn_dtype_is_float(t)) {
            if (i < last) d[i] = -INFINITY;                 /* the first row along the last axis */
            else if (i % 53 == 7) d[i] = NAN;
            else if (i % 71 == 3) d[i] = INFINITY;
            else if (i % 89 == 5) d[i] = -INFINITY;
        }
    }
    tn_array *c = tn_array_astype(a, t);
    tn_array_free(a);
    return c;
}

static tn_array *red_to_device(const tn_array *h) {
    if (tn_array_size(h) == 0) return tn__array_alloc(h->dtype, h->ndim, h->shape, RDEV);
    int64_t lo = 0, hi = (int64_t)tn_dtype_size(h->dtype);
    for (int d = 0; d < h->ndim; d++) {
        int64_t span = (h->shape[d] - 1) * h->strides[d];
        if (span < 0) lo += span; else hi += span;
    }
    int64_t n = hi - lo;
    tn_array *buf = tn__array_alloc(TN_BOOL, 1, &n, RDEV);
    if (!buf) return NULL;
    if (tn__cuda_copy(buf->data, RDEV, (const char *)h->data + lo, TN_HOST, (size_t)n) != TN_OK) { tn_array_free(buf); return NULL; }
    tn_array *v = tn__array_from_buffer(buf->base, h->dtype, h->ndim, h->shape, h->strides, (char *)buf->data - lo, RDEV);
    tn_array_free(buf);
    return v;
}

/* Normalised comparison: |gpu - cpu| <= tol * (1 + |cpu| + scale), scale the
   spread a sum of n terms of size 3 may carry; exact for ints and bools. */
static bool red_outputs_match(const tn_array *cpu, const tn_array *gpu_dev, double tol, double scale, char *why, size_t cap) {
    tn_array *g = tn_array_to_host(gpu_dev);
    if (!g) { snprintf(why, cap, "copy back: %.150s", tn_last_error()); return false; }
    int64_t n = tn_array_size(cpu);
    bool ok = true;
    tn_array *cf = tn_array_astype(cpu, TN_F64), *gf = tn_array_astype(g, TN_F64);
    const double *c = (const double *)cf->data, *q = (const double *)gf->data;
    bool exact = !tn_dtype_is_float(cpu->dtype);
    double worst = 0;
    for (int64_t i = 0; i < n && ok; i++) {
        if (isnan(c[i]) || isnan(q[i])) ok = isnan(c[i]) && isnan(q[i]);
        else if (isinf(c[i]) || isinf(q[i])) ok = c[i] == q[i];
        else {
            double e = fabs(c[i] - q[i]) / (1 + fabs(c[i]) + scale);
            if (e > worst) worst = e;
            ok = exact ? c[i] == q[i] : e <= tol;
        }
        if (!ok) snprintf(why, cap, "element %lld of %lld: cpu %.17g gpu %.17g", (long long)i, (long long)n, c[i], q[i]);
    }
    tn_array_free(cf);
    tn_array_free(gf);
    tn_array_free(g);
    return ok;
}

static double red_tol_for(tn_dtype t) { return t == TN_F16 ? 2e-3 : t == TN_F32 ? 2e-5 : t == TN_F64 ? 1e-12 : 0; }

enum { RLAY_CONTIG, RLAY_TRANSPOSED, RLAY_SLICED };
static const char *red_lay_name[] = { "contiguous", "transposed", "sliced" };

/* One case: op over inputs of shape (nd, shape) laid out as lay; prologue
   kind 0 none, 1 x*b with b of shape bshape (nb dims), 2 maximum(x*b, -0.25)
   (an immediate in the prologue). param: axis mask, or
   the softmax axis. */
typedef struct rcase {
    int op;
    tn_dtype t;
    int nd;
    int64_t shape[3];
    int64_t param;
    bool keep;
    int lay;
    int pro;
    int nb;
    int64_t bshape[3];
    bool special;
    bool inplace;
    uint64_t seed;
} rcase;

static void case_str(const rcase *c, char *buf, size_t cap) {
    char sb[128], bb[128];
    snprintf(buf, cap, "%s %s %s %s param %lld keep %d%s%s%s%s", tn__op_def(c->op)->name, tn_dtype_name(c->t),
             tn__shape_str(c->nd, c->shape, sb), red_lay_name[c->lay], (long long)c->param, (int)c->keep,
             c->pro ? " prologue b" : "", c->pro ? tn__shape_str(c->nb, c->bshape, bb) : "", c->special ? " specials" : "",
             c->inplace ? " in place" : "");
}

static bool red_run_case(const rcase *c, char *why, size_t cap) {
    tn_array *hin[2] = { 0 }, *din[2] = { 0 }, *keep[2] = { 0 }, *hout = NULL, *dout = NULL;
    bool ok = true, sm = tn__cred_is_softmax(c->op);
    why[0] = 0;
    int ns = c->pro ? 2 : 1;
    prog_buf pb;
    if (c->pro == 1) build_op_program(&pb, TN_OP_MUL, c->t);
    else if (c->pro == 2) {
        const tn_dtype in2[2] = { c->t, c->t };
        pb_init(&pb, 2, in2);
        int m = pb_op(&pb, TN_OP_MUL, c->t, c->t, 0, 1, -1);
        pb_out(&pb, pb_op(&pb, TN_OP_MAXIMUM, c->t, c->t, m, pb_imm(&pb, c->t, -0.25), -1), c->t);
    }
    for (int i = 0; i < ns && ok; i++) {
        int nd = i ? c->nb : c->nd;
        const int64_t *sh = i ? c->bshape : c->shape;
        int64_t s2[3];
        if (c->lay == RLAY_TRANSPOSED && nd > 1) {
            for (int d = 0; d < nd; d++) s2[d] = sh[nd - 1 - d];
            keep[i] = red_rand_array(c->op, c->t, nd, s2, c->seed + (uint64_t)i, c->special && !i);
            hin[i] = keep[i] ? tn_array_transpose(keep[i], NULL) : NULL;
        } else if (c->lay == RLAY_SLICED && nd > 0) {
            memcpy(s2, sh, sizeof(int64_t) * (size_t)nd);
            s2[nd - 1] = 2 * sh[nd - 1] + 1;
            keep[i] = red_rand_array(c->op, c->t, nd, s2, c->seed + (uint64_t)i, c->special && !i);
            hin[i] = keep[i] ? tn_array_slice(keep[i], nd - 1, 1, s2[nd - 1], 2) : NULL;
        } else hin[i] = red_rand_array(c->op, c->t, nd, sh, c->seed + (uint64_t)i, c->special && !i);
        ok = hin[i] && (din[i] = red_to_device(hin[i]));
    }
    /* a node as the graph would record it, with its input variables' types */
    tn_var vin[2], *vp[2] = { &vin[0], &vin[1] }, node;
    tn_type tin[2], tout;
    memset(&tout, 0, sizeof tout);
    memset(vin, 0, sizeof vin);
    memset(&node, 0, sizeof node);
    for (int i = 0; i < ns && ok; i++) {
        memset(&tin[i], 0, sizeof tin[i]);
        tin[i].dtype = c->t;
        tin[i].ndim = hin[i]->ndim;
        for (int d = 0; d < tin[i].ndim; d++) { tin[i].shape[d] = hin[i]->shape[d]; tin[i].bcast[d] = hin[i]->shape[d] == 1; }
        vin[i].type = tin[i];
    }
    node.op = c->op;
    node.id = 1;
    node.n_in = ns;
    node.in = vp;
    node.n_out = 1;
    if (c->op == TN_OP_SOFTMAX || c->op == TN_OP_LOG_SOFTMAX) tn__p_set_axis(&node.p, (int)c->param);
    else tn__p_set_red(&node.p, (uint64_t)c->param, c->keep);
    node.ext = c->pro ? &pb.p : NULL;
    if (ok && tn__op_def(c->op)->infer(&node, tin, &tout) != TN_OK) { snprintf(why, cap, "infer: %.300s", tn_last_error()); ok = false; }
    node.type = tout;
    if (ok) {
        hout = tn__array_alloc(tout.dtype, tout.ndim, tout.shape, TN_HOST);
        dout = c->inplace ? tn_array_view(din[0]) : tn__array_alloc(tout.dtype, tout.ndim, tout.shape, RDEV);
        ok = hout && dout;
        if (!ok) snprintf(why, cap, "alloc: %.300s", tn_last_error());
    }
    if (ok && tn__op_def(c->op)->cpu(&node, hin, &hout) != TN_OK) { snprintf(why, cap, "cpu: %.300s", tn_last_error()); ok = false; }
    void *state = NULL;
    if (ok && !tn__cuda_reduce_supports(&node)) { snprintf(why, cap, "not supported on the GPU"); ok = false; }
    if (ok && (tn__cuda_reduce_prepare(&node, &state) != TN_OK || tn__cuda_reduce_run(&node, state, din, &dout) != TN_OK ||
               tn__cuda_synchronize() != TN_OK)) {
        snprintf(why, cap, "gpu: %.300s", tn_last_error());
        ok = false;
    }
    if (ok) {
        int64_t nred = 1;
        for (int d = 0; d < c->nd; d++) if (sm ? d == c->param : (c->param >> d & 1)) nred *= c->shape[d];
        bool sumlike = c->op == TN_OP_SUM || c->op == TN_OP_MEAN;
        char w[240];
        if (!red_outputs_match(hout, dout, red_tol_for(tout.dtype), sumlike ? 3 * sqrt((double)nred) : 0, w, sizeof w)) {
            snprintf(why, cap, "%.300s", w);
            ok = false;
        }
    }
    tn__cuda_reduce_release(state);
    for (int i = 0; i < 2; i++) { tn_array_free(hin[i]); tn_array_free(din[i]); tn_array_free(keep[i]); }
    tn_array_free(hout);
    tn_array_free(dout);
    return ok;
}

static int cases, bad;
static void check_case(const rcase *c) {
    char why[400], cs[300];
    cases++;
    if (!red_run_case(c, why, sizeof why) && ++bad <= 25) {
        case_str(c, cs, sizeof cs);
        CHECK(0, "%s: %s", cs, why);
    }
}

static const int64_t shapes3[][3] = { { 1, 1, 1 }, { 2, 31, 3 }, { 5, 7, 31 } };

TEST(test_every_op_dtype_axes_keepdims) {
    cases = bad = 0;
    for (int op = TN_OP_SUM; op <= TN_OP_LOGSUMEXP; op++)
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1))
            for (size_t s = 0; s < 3; s++) {
                if (quick && s != 1) continue;
                for (int mask = 0; mask < 8; mask++) {
                    bool arg = op == TN_OP_ARGMAX || op == TN_OP_ARGMIN;
                    if (arg && mask != 1 && mask != 2 && mask != 4) continue;   /* one axis */
                    for (int keep = 0; keep < 2; keep++) {
                        rcase c = { .op = op, .t = t, .nd = 3, .param = mask, .keep = keep, .seed = 100 + (uint64_t)cases };
                        memcpy(c.shape, shapes3[s], sizeof c.shape);
                        check_case(&c);
                        if (s == 2 && !keep) {
                            c.lay = RLAY_TRANSPOSED; check_case(&c);
                            c.lay = RLAY_SLICED; check_case(&c);
                            if (tn_dtype_is_float(t)) { c.lay = RLAY_CONTIG; c.special = true; check_case(&c); }
                        }
                    }
                }
            }
    printf("  %d reduction cases, %d mismatches\n", cases, bad);
    CHECK(bad == 0, "%d of %d cases differ from the CPU", bad, cases);
}

TEST(test_fused_prologue) {
    cases = bad = 0;
    static const int64_t bshapes[][3] = { { 5, 7, 1 }, { 31, 0, 0 }, { 1, 7, 31 } };
    static const int bnd[] = { 3, 1, 3 };
    const tn_dtype ts[] = { TN_F32, TN_I64, TN_F16 };
    for (int op = TN_OP_SUM; op <= TN_OP_LOGSUMEXP; op++)
        for (size_t ti = 0; ti < 3; ti++)
            for (int mask = 1; mask < 8; mask++) {
                bool arg = op == TN_OP_ARGMAX || op == TN_OP_ARGMIN;
                if (arg && mask != 1 && mask != 2 && mask != 4) continue;
                for (int bi = 0; bi < 3; bi++) {
                    if (quick && bi) continue;
                    rcase c = { .op = op, .t = ts[ti], .nd = 3, .shape = { 5, 7, 31 }, .param = mask, .pro = 1,
                                .nb = bnd[bi], .seed = 900 + (uint64_t)cases };
                    memcpy(c.bshape, bshapes[bi], sizeof c.bshape);
                    check_case(&c);
                    if (bi == 0 && mask == 4) { c.lay = RLAY_TRANSPOSED; check_case(&c); c.lay = RLAY_SLICED; check_case(&c); }
                    if (bi == 0 && ts[ti] != TN_I64) { c.lay = RLAY_CONTIG; c.pro = 2; check_case(&c); }
                }
            }
    printf("  %d prologue cases, %d mismatches\n", cases, bad);
    CHECK(bad == 0, "%d of %d prologue cases differ from the CPU", bad, cases);
}

TEST(test_large_sizes) {
    if (quick) return;
    cases = bad = 0;
    /* full reductions of 2^20+3 elements: split across blocks, last block combines */
    for (int op = TN_OP_SUM; op <= TN_OP_LOGSUMEXP; op++)
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
            rcase c = { .op = op, .t = t, .nd = 1, .shape = { (1 << 20) + 3 }, .param = 1, .seed = 5000 + (uint64_t)cases };
            check_case(&c);
            c.lay = RLAY_SLICED; check_case(&c);
            if (t == TN_F32) { c.lay = RLAY_CONTIG; c.special = true; check_case(&c); }
        }
    /* 4096 x 4096 rows and columns; 3 x 2^20+3 columns (few outputs, split); with a prologue */
    const int ops[] = { TN_OP_SUM, TN_OP_MEAN, TN_OP_MAX, TN_OP_ARGMAX, TN_OP_LOGSUMEXP, TN_OP_ANY };
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        for (int mask = 1; mask < 4; mask++) {
            if ((ops[k] == TN_OP_ARGMAX) && mask == 3) continue;
            rcase c = { .op = ops[k], .t = TN_F32, .nd = 2, .shape = { 4096, 4096 }, .param = mask, .seed = 7000 + (uint64_t)cases };
            check_case(&c);
            c.shape[0] = (1 << 20) + 3; c.shape[1] = 3;
            check_case(&c);
            c.shape[0] = 4096; c.shape[1] = 4096;
            c.pro = 1; c.nb = 2; c.bshape[0] = 1; c.bshape[1] = 4096;
            check_case(&c);
        }
    printf("  %d large cases, %d mismatches\n", cases, bad);
    CHECK(bad == 0, "%d of %d large cases differ from the CPU", bad, cases);
}

TEST(test_softmax) {
    cases = bad = 0;
    for (int op = TN_OP_SOFTMAX; op <= TN_OP_LOG_SOFTMAX; op++)
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1))
            for (size_t s = 0; s < 3; s++)
                for (int axis = 0; axis < 3; axis++) {
                    if (quick && s != 1) continue;
                    rcase c = { .op = op, .t = t, .nd = 3, .param = axis, .seed = 300 + (uint64_t)cases };
                    memcpy(c.shape, shapes3[s], sizeof c.shape);
                    check_case(&c);
                    if (s == 2) {
                        c.lay = RLAY_TRANSPOSED; check_case(&c);
                        c.lay = RLAY_SLICED; check_case(&c);
                        c.lay = RLAY_CONTIG;
                        if (tn_dtype_is_float(t)) { c.special = true; check_case(&c); c.special = false; }
                        if (t == TN_F32 || t == TN_F64) { c.inplace = true; check_case(&c); }
                    }
                }
    if (!quick)
        for (int op = TN_OP_SOFTMAX; op <= TN_OP_LOG_SOFTMAX; op++)
            for (int axis = 0; axis < 2; axis++) {
                rcase c = { .op = op, .t = TN_F32, .nd = 2, .shape = { 4096, 4096 }, .param = axis, .seed = 8000 + (uint64_t)cases };
                check_case(&c);
            }
    printf("  %d softmax cases, %d mismatches\n", cases, bad);
    CHECK(bad == 0, "%d of %d softmax cases differ from the CPU", bad, cases);
}

TEST(test_empty_and_errors) {
    /* empty boxes: identities (sum 0, prod 1, mean NaN, all true, any false,
       logsumexp -inf) as the CPU; max of an empty box is an error */
    for (int op = TN_OP_SUM; op <= TN_OP_LOGSUMEXP; op++) {
        if (tn__rop_needs_nonempty(op)) continue;
        rcase c = { .op = op, .t = TN_F32, .nd = 3, .shape = { 4, 0, 3 }, .param = 2, .seed = 11 };
        char why[400];
        CHECK(red_run_case(&c, why, sizeof why), "%s over an empty axis: %s", tn__op_def(op)->name, why);
    }
    /* arrays that only claim to be on the device: the checks fail before any access */
    int64_t one = 1;
    tn_array fx, fy, fy3, *x = &fx, *y = &fy, *y3 = &fy3;
    memset(&fx, 0, sizeof fx);
    fx.dtype = TN_F32; fx.ndim = 2; fx.shape[0] = 3; fx.shape[1] = 0; fx.strides[0] = 0; fx.strides[1] = 4;
    fx.data = (void *)(uintptr_t)256; fx.device = RDEV;
    fy3 = fx; fy3.ndim = 1; fy3.strides[0] = 4;
    fy = fy3; fy.shape[0] = 1;
    tn_var vx, *vp = &vx, node;
    memset(&vx, 0, sizeof vx);
    memset(&node, 0, sizeof node);
    vx.type.dtype = TN_F32; vx.type.ndim = 2; vx.type.shape[0] = 3; vx.type.shape[1] = 0;
    node.op = TN_OP_MAX; node.n_in = 1; node.in = &vp; node.n_out = 1; tn__p_set_red(&node.p, 2, false); node.id = 9;
    void *st = NULL;
    CHECK(tn__cuda_reduce_prepare(&node, &st) == TN_OK, "%s", tn_last_error());
    CHECK(tn__cuda_reduce_run(&node, st, &x, &y3) == TN_ERR_SHAPE, "empty max is an error");
    CHECK_ERR(TN_ERR_SHAPE, "has no identity");
    /* a host array where device memory is expected */
    tn_array *h = tn_array_zeros(TN_F32, 1, &one);
    tn__p_set_red(&node.p, 1, false);
    CHECK(tn__cuda_reduce_run(&node, st, &h, &y) == TN_ERR_DEVICE, "host input rejected");
    CHECK_ERR(TN_ERR_DEVICE, "GpuMax{axis=[0]} (node 9): an input lives on the host");
    tn__cuda_reduce_release(st);
    tn_array_free(h);
}

/* Milliseconds per call of fn over `reps` calls after a warm-up, with events. */
static float time_ms(tn_result (*fn)(void *), void *ctx, int reps) {
    tn__CUevent e0, e1;
    tn__cuda.cu.cuEventCreate(&e0, 0);
    tn__cuda.cu.cuEventCreate(&e1, 0);
    for (int i = 0; i < 10; i++) fn(ctx);
    tn__cuda.cu.cuEventRecord(e0, tn__cuda_stream(CUDA_DEV()));
    for (int i = 0; i < reps; i++) fn(ctx);
    tn__cuda.cu.cuEventRecord(e1, tn__cuda_stream(CUDA_DEV()));
    tn__cuda.cu.cuEventSynchronize(e1);
    float ms = 0;
    tn__cuda.cu.cuEventElapsedTime(&ms, e0, e1);
    tn__cuda.cu.cuEventDestroy_v2(e0);
    tn__cuda.cu.cuEventDestroy_v2(e1);
    return ms / (float)reps;
}

typedef struct tctx { tn_var *node; void *st; tn_array *x, *y, *dst; size_t bytes; } tctx;
static tn_result run_sum(void *p) { tctx *c = (tctx *)p; return tn__cuda_reduce_run(c->node, c->st, &c->x, &c->y); }
static tn_result run_copy(void *p) {
    tctx *c = (tctx *)p;
    return tn__cuda.cu.cuMemcpyDtoDAsync_v2((tn__CUdeviceptr)(uintptr_t)c->dst->data, (tn__CUdeviceptr)(uintptr_t)c->x->data,
                                            c->bytes, tn__cuda_stream(CUDA_DEV())) == TN__CUDA_SUCCESS ? TN_OK : TN_ERR_DEVICE;
}

TEST(test_sum_bandwidth) {
    if (quick) return;
    int64_t n = (int64_t)1 << 24, one = 1;
    tn_array *h = tn_array_rand_uniform(TN_F32, 1, &n, -1, 1, 3);
    tn_array *x = h ? red_to_device(h) : NULL, *y = tn__array_alloc(TN_F32, 0, &one, RDEV), *dst = tn__array_alloc(TN_F32, 1, &n, RDEV);
    CHECK(x && y && dst, "%s", tn_last_error());
    if (!x || !y || !dst) return;
    tn_var vx, *vp = &vx, node;
    memset(&vx, 0, sizeof vx);
    memset(&node, 0, sizeof node);
    vx.type.dtype = TN_F32; vx.type.ndim = 1; vx.type.shape[0] = n;
    node.op = TN_OP_SUM; node.n_in = 1; node.in = &vp; node.n_out = 1; tn__p_set_red(&node.p, 1, false); node.id = 1;
    prog_buf pb;                                  /* x*x as a one-input prologue */
    const tn_dtype f[1] = { TN_F32 };
    pb_init(&pb, 1, f);
    pb_out(&pb, pb_op(&pb, TN_OP_SQR, TN_F32, TN_F32, 0, -1, -1), TN_F32);
    tctx c = { &node, NULL, x, y, dst, (size_t)n * 4 };
    CHECK(tn__cuda_reduce_prepare(&node, &c.st) == TN_OK, "%s", tn_last_error());
    float copy_ms = time_ms(run_copy, &c, 100);
    float sum_ms = time_ms(run_sum, &c, 100);
    tn__cuda_reduce_release(c.st);
    node.ext = &pb.p;
    CHECK(tn__cuda_reduce_prepare(&node, &c.st) == TN_OK, "%s", tn_last_error());
    float pro_ms = time_ms(run_sum, &c, 100);
    tn__cuda_reduce_release(c.st);
    double copy_gbs = 2.0 * (double)c.bytes / (copy_ms * 1e6), sum_gbs = (double)c.bytes / (sum_ms * 1e6),
           pro_gbs = (double)c.bytes / (pro_ms * 1e6);
    printf("  sum over 2^24 float32: %.1f us, %.0f GB/s; with x*x prologue: %.1f us, %.0f GB/s; "
           "device copy %.1f us, %.0f GB/s (read+write): ratios %.2f, %.2f\n",
           sum_ms * 1e3, sum_gbs, pro_ms * 1e3, pro_gbs, copy_ms * 1e3, copy_gbs, sum_gbs / copy_gbs, pro_gbs / copy_gbs);
    /* a report, not an assertion: the bandwidth target is judged in bench/ */
    CHECK(sum_gbs > 0 && pro_gbs > 0, "timings were taken");
    tn_array_free(h); tn_array_free(x); tn_array_free(y); tn_array_free(dst);
}

int main(void) {
    tn_config cfg = { .device = TN_DEVICE_CUDA };
    tn_init(&cfg);
    if (tn_cuda_init() != TN_OK) {
        th_skip_all("no usable GPU: %s", tn_cuda_status());
    }
    printf("%s\n", tn_cuda_status());
    quick = getenv("TN_TEST_QUICK") && !strcmp(getenv("TN_TEST_QUICK"), "1");
    TH_RUN(test_empty_and_errors);
    TH_RUN(test_every_op_dtype_axes_keepdims);
    TH_RUN(test_fused_prologue);
    TH_RUN(test_softmax);
    TH_RUN(test_large_sizes);
    TH_RUN(test_sum_bandwidth);
    tn_shutdown();
    TH_END();
}
