/* Convolutions and pooling (tensor_ops.h >>ops_conv): conv1d/2d/3d with
   stride, padding (explicit, 'same', 'valid'), dilation and groups,
   conv_transpose with output_padding, max and average pooling, against
   float64 references written here as direct loops over the output and the
   kernel taps (the library goes through im2col and a product; pooling is
   its own op, checked bit for bit); float32 and float16 storage; NaN, inf
   and -0 in windows; gradients by finite differences and by value, the
   forward mode of pooling; a batch that varies; the errors, by code and
   words. */
#include "tensor.h"
#include "harness.h"
#include <math.h>
#include <string.h>

/* Shapes as 3 spatial dims (missing ones of size 1), so one reference does 1, 2 and 3. */
typedef struct geo {
    int nsp, N, C, Co, G;
    int in[3], k[3], s[3], p[3], d[3], op[3];
} geo;

static int outsz(const geo *g, int a) { return (g->in[a] + 2 * g->p[a] - g->d[a] * (g->k[a] - 1) - 1) / g->s[a] + 1; }
static int64_t prod3(const int *v) { return (int64_t)v[0] * v[1] * v[2]; }

/* y[n, co, o] = sum over the group's channels and taps of x * w, taps inside the image only */
static void ref_conv(const geo *g, const double *x, const double *w, double *y) {
    int o[3] = { outsz(g, 0), outsz(g, 1), outsz(g, 2) }, Cg = g->C / g->G, Cog = g->Co / g->G;
    for (int n = 0; n < g->N; n++)
        for (int co = 0; co < g->Co; co++)
            for (int a = 0; a < o[0]; a++) for (int b = 0; b < o[1]; b++) for (int c = 0; c < o[2]; c++) {
                double acc = 0;
                for (int ci = 0; ci < Cg; ci++)
                    for (int ka = 0; ka < g->k[0]; ka++) for (int kb = 0; kb < g->k[1]; kb++) for (int kc = 0; kc < g->k[2]; kc++) {
                        int ia = a * g->s[0] - g->p[0] + ka * g->d[0], ib = b * g->s[1] - g->p[1] + kb * g->d[1],
                            ic = c * g->s[2] - g->p[2] + kc * g->d[2];
                        if (ia < 0 || ib < 0 || ic < 0 || ia >= g->in[0] || ib >= g->in[1] || ic >= g->in[2]) continue;
                        int cin = (co / Cog) * Cg + ci;
                        acc += x[(((int64_t)n * g->C + cin) * g->in[0] + ia) * g->in[1] * g->in[2] + (int64_t)ib * g->in[2] + ic] *
                               w[(((int64_t)co * Cg + ci) * g->k[0] + ka) * g->k[1] * g->k[2] + (int64_t)kb * g->k[2] + kc];
                    }
                y[(((int64_t)n * g->Co + co) * o[0] + a) * o[1] * o[2] + (int64_t)b * o[2] + c] = acc;
            }
}

/* PyTorch's conv_transpose: every input element scatters x * w over its taps; w (C, Co/G, k) */
static void ref_conv_t(const geo *g, const double *x, const double *w, double *y, const int *out) {
    int Cg = g->C / g->G, Cog = g->Co / g->G;
    memset(y, 0, (size_t)(g->N * g->Co * prod3(out)) * sizeof *y);
    for (int n = 0; n < g->N; n++)
        for (int ci = 0; ci < g->C; ci++)
            for (int a = 0; a < g->in[0]; a++) for (int b = 0; b < g->in[1]; b++) for (int c = 0; c < g->in[2]; c++) {
                double xv = x[(((int64_t)n * g->C + ci) * g->in[0] + a) * g->in[1] * g->in[2] + (int64_t)b * g->in[2] + c];
                for (int j = 0; j < Cog; j++)
                    for (int ka = 0; ka < g->k[0]; ka++) for (int kb = 0; kb < g->k[1]; kb++) for (int kc = 0; kc < g->k[2]; kc++) {
                        int oa = a * g->s[0] - g->p[0] + ka * g->d[0], ob = b * g->s[1] - g->p[1] + kb * g->d[1], oc = c * g->s[2] - g->p[2] + kc * g->d[2];
                        if (oa < 0 || ob < 0 || oc < 0 || oa >= out[0] || ob >= out[1] || oc >= out[2]) continue;
                        int co = (ci / Cg) * Cog + j;
                        y[(((int64_t)n * g->Co + co) * out[0] + oa) * out[1] * out[2] + (int64_t)ob * out[2] + oc] +=
                            xv * w[(((int64_t)ci * Cog + j) * g->k[0] + ka) * g->k[1] * g->k[2] + (int64_t)kb * g->k[2] + kc];
                    }
            }
}

static tn_array *arr(tn_dtype t, int nd, const int64_t *sh, const double *v) {
    tn_array *a = tn_array_zeros(t, nd, sh);
    int64_t n = tn_array_size(a), idx[TN_MAX_DIMS] = { 0 };
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i;
        for (int dd = nd - 1; dd >= 0; dd--) { idx[dd] = r % sh[dd]; r /= sh[dd]; }
        tn_array_set(a, idx, v[i]);
    }
    return a;
}

static double *vals(int64_t n, uint64_t seed) {
    double *v = (double *)malloc((size_t)(n ? n : 1) * sizeof *v);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; i++) { s = s * 6364136223846793005ull + 1442695040888963407ull; v[i] = (double)(s >> 11) / 9007199254740992.0 * 4 - 2; }
    return v;
}

static void shape_of(const geo *g, int ch, const int *sp, int64_t *sh) {
    sh[0] = g->N; sh[1] = ch;
    for (int a = 0; a < g->nsp; a++) sh[2 + a] = sp[3 - g->nsp + a];
}

/* The library's conv (or conv_transpose) of x, w at dtype t, as doubles. */
static double *run2(tn_var *(*build)(tn_var *, tn_var *, const tn_conv_opts *), const tn_conv_opts *o, tn_dtype t,
                    int xnd, const int64_t *xsh, const double *xv, int wnd, const int64_t *wsh, const double *wv, int64_t *n_out) {
    tn_graph *gr = tn_graph_new();
    tn_var *X = tn_input(gr, "x", t, xnd, xsh, NULL), *W = tn_input(gr, "w", t, wnd, wsh, NULL);
    tn_var *y = build(X, W, o);
    double *res = NULL;
    if (!y) { fprintf(stderr, "build: %s\n", tn_last_error()); tn_graph_free(gr); return NULL; }
    tn_func *f = tn_function(gr, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ X, W }, .n_outputs = 1, .outputs = &y });
    tn_array *xa = arr(t, xnd, xsh, xv), *wa = arr(t, wnd, wsh, wv), *out = NULL;
    if (f && tn_call(f, (tn_array *[]){ xa, wa }, &out) == TN_OK) {
        tn_array *d = tn_array_astype(out, TN_F64);
        *n_out = tn_array_size(d);
        res = (double *)malloc((size_t)(*n_out ? *n_out : 1) * sizeof *res);
        memcpy(res, d->data, (size_t)*n_out * sizeof *res);
        tn_array_free(d);
    } else fprintf(stderr, "run: %s\n", tn_last_error());
    tn_array_free(out); tn_array_free(xa); tn_array_free(wa);
    tn_function_free(f);
    tn_graph_free(gr);
    return res;
}

static double max_rel(const double *a, const double *b, int64_t n) {
    double e = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i])) { if (isnan(a[i]) != isnan(b[i])) return INFINITY; continue; }
        e = fmax(e, fabs(a[i] - b[i]) / fmax(1e-300, fmax(fabs(b[i]), scale * 1e-2)));   /* near-zero sums: relative to the scale */
    }
    return e;
}

static tn_conv_opts opts_of(const geo *g) {
    tn_conv_opts o;
    memset(&o, 0, sizeof o);
    for (int a = 0; a < g->nsp; a++) {
        int q = 3 - g->nsp + a;
        o.stride[a] = g->s[q]; o.padding[a] = g->p[q]; o.dilation[a] = g->d[q]; o.output_padding[a] = g->op[q]; o.kernel[a] = g->k[q];
    }
    o.groups = g->G;
    return o;
}

static tn_var *b_conv(tn_var *x, tn_var *w, const tn_conv_opts *o) { return tn_conv(x, w, o); }
static tn_var *b_conv_t(tn_var *x, tn_var *w, const tn_conv_opts *o) { return tn_conv_transpose(x, w, o); }

/* One convolution case at each dtype against the reference (tolerances: float64 1e-12, float32 1e-5, float16 4e-3). */
static void conv_case(const char *name, geo g, uint64_t seed) {
    for (int a = 0; a < 3; a++) { if (!g.k[a]) g.k[a] = 1; if (!g.s[a]) g.s[a] = 1; if (!g.d[a]) g.d[a] = 1; if (!g.in[a]) g.in[a] = 1; }
    int o[3] = { outsz(&g, 0), outsz(&g, 1), outsz(&g, 2) };
    int64_t nx = (int64_t)g.N * g.C * prod3(g.in), nw = (int64_t)g.Co * (g.C / g.G) * prod3(g.k), ny = (int64_t)g.N * g.Co * prod3(o);
    double *x = vals(nx, seed), *w = vals(nw, seed + 1), *want = (double *)malloc((size_t)ny * sizeof *want);
    ref_conv(&g, x, w, want);
    int64_t xsh[5], wsh[5];
    shape_of(&g, g.C, g.in, xsh);
    wsh[0] = g.Co; wsh[1] = g.C / g.G;
    for (int a = 0; a < g.nsp; a++) wsh[2 + a] = g.k[3 - g.nsp + a];
    tn_conv_opts op = opts_of(&g);
    const tn_dtype ts[3] = { TN_F64, TN_F32, TN_F16 };
    const double tol[3] = { 1e-12, 1e-5, 4e-3 };
    for (int k = 0; k < 3; k++) {
        double *xr = x, *wr = w, *wantr = want, *q1 = NULL, *q2 = NULL, *q3 = NULL;
        if (ts[k] != TN_F64) {   /* the reference on the inputs rounded to the dtype */
            q1 = (double *)malloc((size_t)nx * sizeof *q1); q2 = (double *)malloc((size_t)nw * sizeof *q2); q3 = (double *)malloc((size_t)ny * sizeof *q3);
            for (int64_t i = 0; i < nx; i++) q1[i] = ts[k] == TN_F16 ? tn_f16_to_f32(tn_f32_to_f16((float)x[i])) : (float)x[i];
            for (int64_t i = 0; i < nw; i++) q2[i] = ts[k] == TN_F16 ? tn_f16_to_f32(tn_f32_to_f16((float)w[i])) : (float)w[i];
            ref_conv(&g, q1, q2, q3);
            xr = q1; wr = q2; wantr = q3;
        }
        int64_t n = 0;
        double *got = run2(b_conv, &op, ts[k], g.nsp + 2, xsh, xr, g.nsp + 2, wsh, wr, &n);
        CHECK(got && n == ny, "%s %s: ran (%lld of %lld)", name, tn_dtype_name(ts[k]), (long long)n, (long long)ny);
        if (got && n == ny) CHECK(max_rel(got, wantr, ny) <= tol[k], "%s %s: error %g", name, tn_dtype_name(ts[k]), max_rel(got, wantr, ny));
        free(got); free(q1); free(q2); free(q3);
    }
    free(x); free(w); free(want);
}

TEST(test_conv_values) {
    conv_case("2d stride, pad, dilation, groups", (geo){ 2, 2, 4, 6, 2, { 1, 7, 6 }, { 1, 3, 2 }, { 1, 1, 2 }, { 0, 1, 0 }, { 1, 1, 2 }, { 0 } }, 1);
    conv_case("2d 3x3 pad 1", (geo){ 2, 3, 3, 5, 1, { 1, 8, 8 }, { 1, 3, 3 }, { 1, 1, 1 }, { 0, 1, 1 }, { 1, 1, 1 }, { 0 } }, 2);
    conv_case("2d stride 2 valid", (geo){ 2, 2, 3, 4, 1, { 1, 9, 7 }, { 1, 2, 2 }, { 1, 2, 2 }, { 0 }, { 1, 1, 1 }, { 0 } }, 3);
    conv_case("depthwise", (geo){ 2, 2, 3, 3, 3, { 1, 6, 5 }, { 1, 3, 3 }, { 1, 1, 1 }, { 0, 1, 1 }, { 1, 1, 1 }, { 0 } }, 4);
    conv_case("1x1", (geo){ 2, 3, 8, 5, 1, { 1, 4, 4 }, { 1, 1, 1 }, { 1, 1, 1 }, { 0 }, { 1, 1, 1 }, { 0 } }, 5);
    conv_case("1d", (geo){ 1, 2, 3, 4, 1, { 1, 1, 9 }, { 1, 1, 3 }, { 1, 1, 2 }, { 0, 0, 1 }, { 1, 1, 1 }, { 0 } }, 6);
    conv_case("3d", (geo){ 3, 1, 2, 3, 1, { 4, 5, 3 }, { 2, 3, 2 }, { 1, 1, 1 }, { 1, 1, 0 }, { 1, 1, 1 }, { 0 } }, 7);
    conv_case("2d groups 2, dilation 2", (geo){ 2, 1, 4, 4, 2, { 1, 9, 9 }, { 1, 3, 3 }, { 1, 2, 1 }, { 0, 2, 2 }, { 1, 2, 2 }, { 0 } }, 8);
    /* stride 1, rows as long as the image's: im2col's lines are shifted planes (one copy, then the pads) */
    conv_case("2d stride 1, dilation 2, pad 2", (geo){ 2, 2, 3, 4, 1, { 1, 7, 9 }, { 1, 3, 3 }, { 1, 1, 1 }, { 0, 2, 2 }, { 1, 2, 2 }, { 0 } }, 9);
    conv_case("2d window wider than the image, rows of pad", (geo){ 2, 2, 2, 3, 1, { 1, 6, 5 }, { 1, 5, 13 }, { 1, 1, 1 }, { 0, 3, 6 }, { 1, 1, 1 }, { 0 } }, 10);
}

/* padding 'same' keeps the size (an even kernel pads one more after, as PyTorch), 'valid' pads nothing */
TEST(test_conv_pad_modes) {
    int64_t xsh[4] = { 1, 2, 6, 5 }, wsh[4] = { 3, 2, 4, 3 };
    double *x = vals(60, 11), *w = vals(72, 12);
    for (int mode = TN_PAD_VALID; mode <= TN_PAD_SAME; mode++) {
        tn_conv_opts o;
        memset(&o, 0, sizeof o);
        o.pad_mode = mode;
        geo g = { 2, 1, 2, 3, 1, { 1, 6, 5 }, { 1, 4, 3 }, { 1, 1, 1 }, { 0 }, { 1, 1, 1 }, { 0 } };
        int64_t n = 0;
        double *got = run2(b_conv, &o, TN_F64, 4, xsh, x, 4, wsh, w, &n);
        /* 'same': the reference on the input padded (1 before, 2 after) rows and (1, 1) columns */
        int H = mode == TN_PAD_SAME ? 9 : 6, Wd = mode == TN_PAD_SAME ? 7 : 5, top = mode == TN_PAD_SAME ? 1 : 0, left = top;
        double *xp = (double *)calloc((size_t)(2 * H * Wd), sizeof *xp);
        for (int c = 0; c < 2; c++) for (int i = 0; i < 6; i++) for (int j = 0; j < 5; j++) xp[(c * H + i + top) * Wd + j + left] = x[(c * 6 + i) * 5 + j];
        g.in[1] = H; g.in[2] = Wd;
        int64_t ny = 3 * (int64_t)outsz(&g, 1) * outsz(&g, 2);
        double *want = (double *)malloc((size_t)ny * sizeof *want);
        ref_conv(&g, xp, w, want);
        CHECK(got && n == ny && (mode != TN_PAD_SAME || n == 3 * 30) && max_rel(got, want, ny) <= 1e-12, "pad mode %d: %lld values, error %g",
              mode, (long long)n, got && n == ny ? max_rel(got, want, ny) : -1.0);
        free(got); free(xp); free(want);
    }
    free(x); free(w);
}

TEST(test_conv_transpose_values) {
    const geo cases[] = {
        { 2, 2, 4, 6, 2, { 1, 4, 5 }, { 1, 3, 2 }, { 1, 2, 1 }, { 0, 1, 0 }, { 1, 1, 1 }, { 0, 1, 0 } },
        { 2, 1, 3, 2, 1, { 1, 3, 3 }, { 1, 2, 2 }, { 1, 2, 2 }, { 0 }, { 1, 1, 1 }, { 0 } },
        { 1, 2, 2, 3, 1, { 1, 1, 6 }, { 1, 1, 3 }, { 1, 1, 3 }, { 0, 0, 1 }, { 1, 1, 2 }, { 0, 0, 1 } },
        /* stride 1, the image's rows as long as the columns': col2im adds shifted rows (odd and even lengths) */
        { 2, 2, 3, 4, 1, { 1, 5, 7 }, { 1, 3, 3 }, { 1, 1, 1 }, { 0, 1, 1 }, { 1, 1, 1 }, { 0 } },
        { 2, 1, 3, 2, 1, { 1, 6, 10 }, { 1, 3, 3 }, { 1, 1, 1 }, { 0, 2, 2 }, { 1, 2, 2 }, { 0 } },
        { 2, 2, 2, 3, 1, { 1, 6, 5 }, { 1, 5, 13 }, { 1, 1, 1 }, { 0, 3, 6 }, { 1, 1, 1 }, { 0 } },
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        geo g = cases[c];
        int out[3];
        for (int a = 0; a < 3; a++) out[a] = (g.in[a] - 1) * g.s[a] - 2 * g.p[a] + g.d[a] * (g.k[a] - 1) + g.op[a] + 1;
        int64_t nx = (int64_t)g.N * g.C * prod3(g.in), nw = (int64_t)g.C * (g.Co / g.G) * prod3(g.k), ny = (int64_t)g.N * g.Co * prod3(out);
        double *x = vals(nx, 20 + c), *w = vals(nw, 30 + c), *want = (double *)malloc((size_t)ny * sizeof *want);
        ref_conv_t(&g, x, w, want, out);
        int64_t xsh[5], wsh[5], n = 0;
        shape_of(&g, g.C, g.in, xsh);
        wsh[0] = g.C; wsh[1] = g.Co / g.G;
        for (int a = 0; a < g.nsp; a++) wsh[2 + a] = g.k[3 - g.nsp + a];
        tn_conv_opts o = opts_of(&g);
        for (int k = 0; k < 2; k++) {
            tn_dtype t = k ? TN_F32 : TN_F64;
            double *got = run2(b_conv_t, &o, t, g.nsp + 2, xsh, x, g.nsp + 2, wsh, w, &n);
            CHECK(got && n == ny && max_rel(got, want, ny) <= (k ? 1e-5 : 1e-12), "conv_transpose case %zu %s: %lld of %lld, error %g", c,
                  tn_dtype_name(t), (long long)n, (long long)ny, got && n == ny ? max_rel(got, want, ny) : -1.0);
            free(got);
        }
        free(x); free(w); free(want);
    }
}

/* Pooling: windows 3x2, stride 2, padding (1, 0), with NaN, inf, -inf and -0 placed in the image. */
TEST(test_pool_values) {
    const int N = 2, C = 3, H = 7, W = 6, kh = 3, kw = 2, sh = 2, sw = 2, ph = 1, pw = 0;
    int OH = (H + 2 * ph - kh) / sh + 1, OW = (W + 2 * pw - kw) / sw + 1;
    int64_t nx = (int64_t)N * C * H * W, xsh[4] = { N, C, H, W };
    double *x = vals(nx, 40);
    x[5] = NAN; x[50] = INFINITY; x[51] = -INFINITY; x[90] = -0.0; x[91] = -0.0; x[92] = -0.0; x[97] = -0.0; x[98] = -0.0; x[99] = -0.0;
    for (int kind = 0; kind < 3; kind++) {
        tn_graph *gr = tn_graph_new();
        tn_var *X = tn_input(gr, "x", TN_F32, 4, (int64_t[]){ -1, C, H, W }, NULL);
        tn_conv_opts o;
        memset(&o, 0, sizeof o);
        o.kernel[0] = kh; o.kernel[1] = kw; o.stride[0] = sh; o.stride[1] = sw; o.padding[0] = ph; o.padding[1] = pw;
        o.avg_exclude_pad = kind == 2;
        tn_var *y = kind == 0 ? tn_max_pool2d(X, &o) : tn_avg_pool2d(X, &o);
        tn_func *f = y ? tn_function(gr, &(tn_func_desc){ .n_inputs = 1, .inputs = &X, .n_outputs = 1, .outputs = &y }) : NULL;
        tn_array *xa = arr(TN_F32, 4, xsh, x), *out = NULL;
        CHECK(f && tn_call(f, &xa, &out) == TN_OK && out && out->shape[2] == OH && out->shape[3] == OW, "pool %d: %s", kind, tn_last_error());
        for (int n = 0; out && n < N; n++) for (int c = 0; c < C; c++) for (int i = 0; i < OH; i++) for (int j = 0; j < OW; j++) {
            double m = -INFINITY, s = 0;
            int cnt = 0;
            bool nan = false;
            for (int a = 0; a < kh; a++) for (int b = 0; b < kw; b++) {
                int ii = i * sh - ph + a, jj = j * sw - pw + b;
                if (ii < 0 || ii >= H || jj < 0 || jj >= W) continue;
                double v = (double)(float)x[((n * C + c) * H + ii) * W + jj];
                nan |= isnan(v);
                if (v > m) m = v;
                s += v;
                cnt++;
            }
            double want = kind == 0 ? (nan ? NAN : m) : kind == 1 ? s / (kh * kw) : s / cnt;
            double got = tn_array_get(out, (int64_t[]){ n, c, i, j });
            bool ok = isnan(want) ? isnan(got) : isinf(want) ? got == want : fabs(got - want) <= 1e-6 * fmax(1, fabs(want));
            if (ok && want == 0 && kind == 0) ok = signbit(got) == signbit(want) || 1;   /* max of -0 and +0: either, as NumPy */
            CHECK(ok, "pool %d at (%d,%d,%d,%d): %g, want %g", kind, n, c, i, j, got, want);
        }
        tn_array_free(out); tn_array_free(xa);
        tn_function_free(f);
        tn_graph_free(gr);
    }
    /* global average pooling: the spatial mean, kept as 1s */
    tn_graph *gr = tn_graph_new();
    tn_var *X = tn_input(gr, "x", TN_F64, 4, xsh, NULL), *y = tn_global_avg_pool(X);
    tn_func *f = tn_function(gr, &(tn_func_desc){ .n_inputs = 1, .inputs = &X, .n_outputs = 1, .outputs = &y });
    double *xf = vals(nx, 41);
    tn_array *xa = arr(TN_F64, 4, xsh, xf), *out = NULL;
    CHECK(f && tn_call(f, &xa, &out) == TN_OK && out->ndim == 4 && out->shape[2] == 1 && out->shape[3] == 1, "global pool: %s", tn_last_error());
    for (int n = 0; out && n < N; n++) for (int c = 0; c < C; c++) {
        double s = 0;
        for (int i = 0; i < H * W; i++) s += xf[(n * C + c) * H * W + i];
        CHECK(fabs(tn_array_get(out, (int64_t[]){ n, c, 0, 0 }) - s / (H * W)) < 1e-14, "global pool (%d, %d)", n, c);
    }
    tn_array_free(out); tn_array_free(xa); free(xf);
    tn_function_free(f);
    tn_graph_free(gr);
    free(x);
}

/* Direct pooling (the Pool op) against a float64 reference of its own loops:
   the window's positions in row-major order, max with NaN winning (the first
   of equal values kept, so -0 and +0 keep their order), sums in double,
   average / K or / the in-image count, rounded to the dtype as the op
   defines it (tensor_ops.h >>pool_cpu: float16 and float32 through float,
   the count-only-in-image average divides the stored sum). Results must be
   bit-identical; NaN only as NaN. Where the columns would have one
   position per row (N*L == 1) the op folds four partial results, as the
   reduction of IM2COL's rows did; the reference does so too. */
typedef struct pcase { const char *name; int nsp, N, C, in[3], k[3], s[3], p[3], d[3]; } pcase;

static double pool_round(tn_dtype t, double v) {
    return t == TN_F64 ? v : t == TN_F32 ? (double)(float)v : (double)tn_f16_to_f32(tn_f32_to_f16((float)v));
}

static void ref_pool(const pcase *c, int mode, tn_dtype t, const double *x, double *y) {
    int o[3], K = c->k[0] * c->k[1] * c->k[2];
    for (int a = 0; a < 3; a++) o[a] = (c->in[a] + 2 * c->p[a] - c->d[a] * (c->k[a] - 1) - 1) / c->s[a] + 1;
    bool box = c->N * o[0] * o[1] * o[2] == 1, mx = mode == 0;
    int lim = !box ? 0 : mx ? (K >= 8 ? K / 4 * 4 : 0) : K / 4 * 4;
    for (int n = 0; n < c->N; n++) for (int ch = 0; ch < c->C; ch++)
        for (int a = 0; a < o[0]; a++) for (int b = 0; b < o[1]; b++) for (int e = 0; e < o[2]; e++) {
            double acc = mx ? -INFINITY : 0, part[4] = { acc, acc, acc, acc };
            int cnt = 0, j = 0;
            for (int ka = 0; ka < c->k[0]; ka++) for (int kb = 0; kb < c->k[1]; kb++) for (int kc = 0; kc < c->k[2]; kc++, j++) {
                int ia = a * c->s[0] - c->p[0] + ka * c->d[0], ib = b * c->s[1] - c->p[1] + kb * c->d[1], ic = e * c->s[2] - c->p[2] + kc * c->d[2];
                bool in = ia >= 0 && ib >= 0 && ic >= 0 && ia < c->in[0] && ib < c->in[1] && ic < c->in[2];
                double v = !in ? (mx ? -INFINITY : 0) : x[(((int64_t)n * c->C + ch) * c->in[0] + ia) * c->in[1] * c->in[2] + (int64_t)ib * c->in[2] + ic];
                cnt += in;
                double *to = j < lim ? &part[j % 4] : &acc;
                if (j == lim && lim) {   /* the partial results, combined as the reduction combines them */
                    if (mx) { for (int q = 0; q < 4; q++) if (part[q] > acc || isnan(part[q])) acc = part[q]; }
                    else acc += (part[0] + part[1]) + (part[2] + part[3]);
                }
                if (mx) { if (v > *to || isnan(v)) *to = v; } else *to += v;
            }
            if (lim == K && lim) {
                if (mx) { for (int q = 0; q < 4; q++) if (part[q] > acc || isnan(part[q])) acc = part[q]; }
                else acc += (part[0] + part[1]) + (part[2] + part[3]);
            }
            double r;
            if (mode == 2) {
                double s = pool_round(t, acc);
                r = t == TN_F64 ? s / cnt : pool_round(t, (double)((float)s / (float)cnt));
            } else r = pool_round(t, mode == 1 ? acc / K : acc);
            *y++ = r;
        }
}

/* tn_debugprint_function's text of f into buf (cap bytes, cut there; "" if it could not print). */
static void function_text(const tn_func *f, char *buf, size_t cap) {
    FILE *fp = tmpfile();
    size_t nb = 0;
    if (fp) { tn_debugprint_function(f, fp); rewind(fp); nb = fread(buf, 1, cap - 1, fp); fclose(fp); }
    buf[nb] = 0;
}

static const pcase pool_cases[] = {
    { "2d 2x2", 2, 2, 3, { 8, 6, 1 }, { 2, 2, 1 }, { 2, 2, 1 }, { 0 }, { 1, 1, 1 } },
    { "2d 3x2 stride (2,1) pad 1", 2, 2, 2, { 9, 8, 1 }, { 3, 2, 1 }, { 2, 1, 1 }, { 1, 1, 0 }, { 1, 1, 1 } },
    { "2d 3x3 stride (1,2) pad 1 dilation (2,1)", 2, 2, 2, { 9, 8, 1 }, { 3, 3, 1 }, { 1, 2, 1 }, { 1, 1, 0 }, { 2, 1, 1 } },
    { "1d 3 stride 2 pad 1", 1, 3, 2, { 15, 1, 1 }, { 3, 1, 1 }, { 2, 1, 1 }, { 1, 0, 0 }, { 1, 1, 1 } },
    { "1d 4 stride 3 pad 2 dilation 2", 1, 2, 2, { 20, 1, 1 }, { 4, 1, 1 }, { 3, 1, 1 }, { 2, 0, 0 }, { 2, 1, 1 } },
    { "3d 2x2x3 pad (0,1,1)", 3, 2, 2, { 4, 6, 5 }, { 2, 2, 3 }, { 2, 2, 3 }, { 0, 1, 1 }, { 1, 1, 1 } },
    { "3d 3x3x3 stride 1 pad 1", 3, 1, 2, { 3, 4, 3 }, { 3, 3, 3 }, { 1, 1, 1 }, { 1, 1, 1 }, { 1, 1, 1 } },
    { "2d one window per channel (4x4)", 2, 1, 3, { 4, 4, 1 }, { 4, 4, 1 }, { 4, 4, 1 }, { 0 }, { 1, 1, 1 } },
    { "2d one window, pad 1 dilation 2", 2, 1, 2, { 3, 3, 1 }, { 3, 3, 1 }, { 3, 3, 1 }, { 1, 1, 0 }, { 2, 2, 1 } },
    { "1d one window of 7", 1, 1, 2, { 7, 1, 1 }, { 7, 1, 1 }, { 7, 1, 1 }, { 0 }, { 1, 1, 1 } },
    { "2d 2x2 stride 3, odd sizes (elements in no window)", 2, 2, 2, { 9, 7, 1 }, { 2, 2, 1 }, { 3, 3, 1 }, { 0 }, { 1, 1, 1 } },
    { "2d 2x3 stride (2,4) pad (1,1) (windows apart)", 2, 1, 3, { 7, 10, 1 }, { 2, 3, 1 }, { 2, 4, 1 }, { 1, 1, 0 }, { 1, 1, 1 } },
    /* lines of 16 or more windows inside the image (the CPU's kernel across outputs), by strides of 1, 2 and 3 */
    { "1d 3 stride 1 pad 1, lines of 130", 1, 2, 2, { 130, 1, 1 }, { 3, 1, 1 }, { 1, 1, 1 }, { 1, 0, 0 }, { 1, 1, 1 } },
    { "2d 2x2, lines of 40", 2, 1, 2, { 4, 80, 1 }, { 2, 2, 1 }, { 2, 2, 1 }, { 0 }, { 1, 1, 1 } },
    { "1d 2 stride 3 dilation 2, lines of 20", 1, 2, 1, { 62, 1, 1 }, { 2, 1, 1 }, { 3, 1, 1 }, { 0 }, { 2, 1, 1 } },
};
#define N_POOL_CASES (sizeof pool_cases / sizeof pool_cases[0])

TEST(test_pool_direct) {
    const pcase *cases = pool_cases;
    const tn_dtype ts[3] = { TN_F64, TN_F32, TN_F16 };
    int checked = 0;
    for (size_t ci = 0; ci < N_POOL_CASES; ci++) for (int k = 0; k < 3; k++) for (int mode = 0; mode < 3; mode++) {
        const pcase *c = &cases[ci];
        int64_t xsh[5] = { c->N, c->C, c->in[0], c->in[1], c->in[2] }, nx = (int64_t)c->N * c->C * prod3(c->in);
        double *xv = vals(nx, 300 + ci);
        for (int64_t i = 0; i < nx; i++) {   /* specials, and repeats so that -0, +0 and equal values meet in windows */
            int64_t h = (i * 7 + (int64_t)ci) % 23;
            xv[i] = h == 0 ? NAN : h == 1 ? INFINITY : h == 2 ? -INFINITY : h == 3 || h == 4 ? -0.0 : h == 5 || h == 6 ? 0.0 : h == 7 ? 1.25 : xv[i];
        }
        if (ci == 7) for (int64_t i = 0; i < nx; i++) xv[i] = i % 3 == 0 ? -0.0 : i % 3 == 1 ? 0.0 : xv[i];   /* one channel without specials but zeros */
        tn_graph *gr = tn_graph_new();
        tn_var *X = tn_input(gr, "x", ts[k], c->nsp + 2, xsh, NULL);
        tn_conv_opts o;
        memset(&o, 0, sizeof o);
        for (int a = 0; a < c->nsp; a++) { o.kernel[a] = c->k[a]; o.stride[a] = c->s[a]; o.padding[a] = c->p[a]; o.dilation[a] = c->d[a]; }
        o.avg_exclude_pad = mode == 2;
        tn_var *y = mode == 0 ? tn_max_pool(X, &o) : tn_avg_pool(X, &o);
        tn_func *f = y ? tn_function(gr, &(tn_func_desc){ .n_inputs = 1, .inputs = &X, .n_outputs = 1, .outputs = &y }) : NULL;
        tn_array *xa = arr(ts[k], c->nsp + 2, xsh, xv), *out = NULL;
        CHECK(f && tn_call(f, &xa, &out) == TN_OK, "%s %s mode %d: %s", c->name, tn_dtype_name(ts[k]), mode, tn_last_error());
        for (int lv = tn__vm_level(-1) - 1; lv >= 0 && out; lv--) {   /* each lower vector level: the best level's bits */
            tn_array *o2 = NULL;
            tn__vm_level(lv);
            CHECK(tn_call(f, &xa, &o2) == TN_OK && !memcmp(o2->data, out->data, (size_t)tn_array_size(out) * tn_dtype_size(ts[k])),
                  "%s %s mode %d: level %d differs from the best: %s", c->name, tn_dtype_name(ts[k]), mode, lv, tn_last_error());
            tn_array_free(o2);
        }
        tn__vm_level(-1);
        if (f && ci == 0 && k == 0) {   /* one op, reading the image: no columns */
            char buf[4096];
            function_text(f, buf, sizeof buf);
            CHECK(strstr(buf, mode == 0 ? "Pool{mode=max, kernel=(2, 2), stride=(2, 2)" : mode == 1 ? "Pool{mode=average_inc_pad" : "Pool{mode=average_exc_pad") &&
                  !strstr(buf, "Im2Col"), "mode %d: %s", mode, buf);
        }
        tn_array *xq = tn_array_astype(xa, TN_F64), *got = out ? tn_array_astype(out, TN_F64) : NULL;
        int64_t ny = got ? tn_array_size(got) : 0;
        double *want = (double *)malloc((size_t)(ny ? ny : 1) * sizeof *want);
        if (got) ref_pool(c, mode, ts[k], (const double *)xq->data, want);
        int bad = 0;
        for (int64_t i = 0; i < ny; i++) {
            double g = ((const double *)got->data)[i];
            bool ok = isnan(want[i]) ? isnan(g) : memcmp(&g, &want[i], sizeof g) == 0;
            if (!ok && bad++ < 3) CHECK(ok, "%s %s mode %d at %lld: %a, want %a", c->name, tn_dtype_name(ts[k]), mode, (long long)i, g, want[i]);
            checked++;
        }
        free(want); free(xv);
        tn_array_free(xq); tn_array_free(got); tn_array_free(out); tn_array_free(xa);
        tn_function_free(f);
        tn_graph_free(gr);
    }
    CHECK(checked > 3000, "%d outputs checked", checked);
}

/* Max pooling's gradient goes whole to every position equal to its window's
   max (ties share it, as Theano's), none to padding; average pooling's is
   g / K spread over the window (padding counted) or g / count. */
TEST(test_pool_grad_values) {
    tn_graph *gr = tn_graph_new();
    int64_t sh[4] = { 1, 1, 4, 4 };
    tn_var *X = tn_input(gr, "x", TN_F64, 4, sh, NULL);
    tn_conv_opts o;
    memset(&o, 0, sizeof o);
    o.kernel[0] = o.kernel[1] = 2;
    tn_var *ys[3];
    ys[0] = tn_max_pool2d(X, &o);
    o.kernel[0] = o.kernel[1] = 3; o.stride[0] = o.stride[1] = 2; o.padding[0] = o.padding[1] = 1;
    ys[1] = tn_avg_pool2d(X, &o);
    o.avg_exclude_pad = true;
    ys[2] = tn_avg_pool2d(X, &o);
    tn_var *gs[3];
    for (int k = 0; k < 3; k++) gs[k] = tn_grad1(tn_sum(ys[k], NULL, 0, false), X);
    tn_func *f = tn_function(gr, &(tn_func_desc){ .n_inputs = 1, .inputs = &X, .n_outputs = 3, .outputs = gs });
    /* window (0,0): two 5s tie; (0,1): one 7; (1,0): all 1; (1,1): a NaN-free distinct max */
    double xv[16] = { 5, 1, 7, 2,  0, 5, 3, 4,  1, 1, 9, 8,  1, 1, 8, 8.5 };
    tn_array *xa = arr(TN_F64, 4, sh, xv), *r[3] = { 0 };
    CHECK(f && tn_call(f, &xa, r) == TN_OK, "%s", tn_last_error());
    const double want_max[16] = { 1, 0, 1, 0,  0, 1, 0, 0,  1, 1, 1, 0,  1, 1, 0, 0 };
    /* 3x3 stride 2 pad 1 over 4x4: out 2x2, windows rows/cols {-1,0,1} and {1,2,3} */
    double want_avg[16], want_ex[16];
    for (int i = 0; i < 4; i++) for (int j = 0; j < 4; j++) {
        double s = 0, se = 0;
        for (int a = 0; a < 2; a++) for (int b = 0; b < 2; b++) {
            int r0 = 2 * a - 1, c0 = 2 * b - 1;
            if (i < r0 || i > r0 + 2 || j < c0 || j > c0 + 2) continue;
            int cnt = 0;
            for (int u = r0; u <= r0 + 2; u++) for (int v = c0; v <= c0 + 2; v++) cnt += u >= 0 && v >= 0 && u < 4 && v < 4;
            s += 1.0 / 9; se += 1.0 / cnt;
        }
        want_avg[i * 4 + j] = s; want_ex[i * 4 + j] = se;
    }
    for (int i = 0; r[0] && r[1] && r[2] && i < 16; i++) {
        double g0 = ((double *)r[0]->data)[i], g1 = ((double *)r[1]->data)[i], g2 = ((double *)r[2]->data)[i];
        CHECK(g0 == want_max[i] && fabs(g1 - want_avg[i]) < 1e-15 && fabs(g2 - want_ex[i]) < 1e-15, "at %d: %g %g %g, want %g %g %g", i, g0, g1, g2,
              want_max[i], want_avg[i], want_ex[i]);
    }
    for (int k = 0; k < 3; k++) tn_array_free(r[k]);
    tn_array_free(xa);
    tn_function_free(f);
    tn_graph_free(gr);
}

/* Forward mode: max pooling's tangent is the tangent at the window's max
   (padded positions take no part: they are not -inf times a zero weight);
   average pooling's is the average of the tangents. */
TEST(test_pool_rop) {
    tn_graph *gr = tn_graph_new();
    int64_t sh[3] = { 1, 2, 9 };
    tn_var *X = tn_input(gr, "x", TN_F64, 3, sh, NULL), *T = tn_input(gr, "t", TN_F64, 3, sh, NULL);
    tn_conv_opts o;
    memset(&o, 0, sizeof o);
    o.kernel[0] = 3; o.stride[0] = 2; o.padding[0] = 1;
    tn_var *outs[2] = { tn_rop(tn_max_pool(X, &o), 1, &X, &T), tn_rop(tn_avg_pool(X, &o), 1, &X, &T) };
    tn_func *f = outs[0] && outs[1] ? tn_function(gr, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ X, T }, .n_outputs = 2, .outputs = outs }) : NULL;
    double xv[18], tv[18];
    for (int i = 0; i < 18; i++) { xv[i] = (double)((i * 7) % 18) - 9; tv[i] = 0.5 + i; }
    tn_array *xa = arr(TN_F64, 3, sh, xv), *ta = arr(TN_F64, 3, sh, tv), *r[2] = { 0 };
    CHECK(f && tn_call(f, (tn_array *[]){ xa, ta }, r) == TN_OK && r[0]->shape[2] == 5, "%s", tn_last_error());
    for (int c = 0; r[0] && c < 2; c++) for (int j = 0; j < 5; j++) {
        int best = -1;
        double s = 0;
        for (int a = 0; a < 3; a++) {
            int i = 2 * j - 1 + a;
            if (i < 0 || i >= 9) continue;
            if (best < 0 || xv[c * 9 + i] > xv[c * 9 + best]) best = i;
            s += tv[c * 9 + i];
        }
        double g0 = tn_array_get(r[0], (int64_t[]){ 0, c, j }), g1 = tn_array_get(r[1], (int64_t[]){ 0, c, j });
        CHECK(g0 == tv[c * 9 + best] && fabs(g1 - s / 3) < 1e-15, "(%d, %d): %g %g, want %g %g", c, j, g0, g1, tv[c * 9 + best], s / 3);
    }
    tn_array_free(r[0]); tn_array_free(r[1]); tn_array_free(xa); tn_array_free(ta);
    tn_function_free(f);
    tn_graph_free(gr);
}

/* NaN in the image reaches exactly the outputs whose window covers it; a batch that changes between calls. */
TEST(test_conv_nan_and_batch) {
    tn_graph *gr = tn_graph_new();
    tn_var *X = tn_input(gr, "x", TN_F32, 4, (int64_t[]){ -1, 2, 6, 6 }, NULL), *W = tn_input(gr, "w", TN_F32, 4, (int64_t[]){ 3, 2, 3, 3 }, NULL);
    tn_conv_opts o;
    memset(&o, 0, sizeof o);
    o.padding[0] = o.padding[1] = 1;
    tn_var *y = tn_conv2d(X, W, &o);
    tn_func *f = y ? tn_function(gr, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ X, W }, .n_outputs = 1, .outputs = &y }) : NULL;
    CHECK(f != NULL, "compile: %s", tn_last_error());
    double *wv = vals(54, 50);
    tn_array *wa = arr(TN_F32, 4, (int64_t[]){ 3, 2, 3, 3 }, wv);
    for (int N = 1; f && N <= 3; N += 2) {
        double *xv = vals((int64_t)N * 72, 60 + N);
        xv[1 * 36 + 2 * 6 + 3] = NAN;          /* n 0, c 1, (2, 3) */
        tn_array *xa = arr(TN_F32, 4, (int64_t[]){ N, 2, 6, 6 }, xv), *out = NULL;
        CHECK(tn_call(f, (tn_array *[]){ xa, wa }, &out) == TN_OK && out && out->shape[0] == N, "batch %d: %s", N, tn_last_error());
        for (int n = 0; out && n < N; n++) for (int c = 0; c < 3; c++) for (int i = 0; i < 6; i++) for (int j = 0; j < 6; j++) {
            bool covers = n == 0 && abs(i - 2) <= 1 && abs(j - 3) <= 1;
            double v = tn_array_get(out, (int64_t[]){ n, c, i, j });
            CHECK(isnan(v) == covers, "batch %d: (%d,%d,%d,%d) = %g", N, n, c, i, j, v);
        }
        tn_array_free(out); tn_array_free(xa); free(xv);
    }
    tn_array_free(wa); free(wv);
    tn_function_free(f);
    tn_graph_free(gr);
}

typedef struct gcase { int kind; } gcase;
static tn_var *b_grad(tn_graph *g, tn_var *const *in, void *user) {
    (void)g;
    const gcase *c = (const gcase *)user;
    tn_conv_opts o;
    memset(&o, 0, sizeof o);
    switch (c->kind) {
    case 0: o.stride[0] = 2; o.padding[0] = 1; o.padding[1] = 1; o.dilation[1] = 2; o.groups = 2; return tn_conv2d(in[0], in[1], &o);
    case 1: o.stride[0] = 2; o.padding[1] = 1; o.output_padding[0] = 1; return tn_conv2d_transpose(in[0], in[1], &o);
    case 2: o.kernel[0] = 2; o.kernel[1] = 3; o.stride[1] = 2; o.padding[1] = 1; return tn_avg_pool2d(in[0], &o);
    case 3: o.kernel[0] = 2; o.kernel[1] = 2; return tn_max_pool2d(in[0], &o);
    case 4: o.stride[0] = 2; o.padding[0] = 1; return tn_conv1d(in[0], in[1], &o);
    case 6: o.kernel[0] = 3; o.stride[0] = 2; o.padding[0] = 1; o.dilation[0] = 2; return tn_max_pool(in[0], &o);
    case 7: o.kernel[0] = 2; o.kernel[1] = 3; o.kernel[2] = 2; o.stride[2] = 1; o.padding[1] = 1; return tn_avg_pool(in[0], &o);
    case 8: o.kernel[0] = o.kernel[1] = o.kernel[2] = 2; o.padding[2] = 1; return tn_max_pool(in[0], &o);
    case 9: o.kernel[0] = 3; o.stride[0] = 2; o.padding[0] = 1; o.dilation[0] = 2; o.avg_exclude_pad = true; return tn_avg_pool(in[0], &o);
    default: o.kernel[0] = 3; o.kernel[1] = 2; o.stride[0] = 1; o.padding[0] = 1; o.avg_exclude_pad = true; return tn_avg_pool2d(in[0], &o);
    }
}

TEST(test_conv_gradients) {
    const char *names[10] = { "conv2d", "conv2d_transpose", "avg_pool2d", "max_pool2d", "conv1d", "avg_pool2d exclude pad",
                              "max_pool1d stride 2 pad 1 dilation 2", "avg_pool3d pad", "max_pool3d pad", "avg_pool1d exclude pad dilation 2" };
    const int64_t xs[10][5] = { { 2, 4, 5, 6 }, { 2, 3, 3, 4 }, { 2, 2, 4, 5 }, { 1, 2, 4, 6 }, { 2, 3, 7, 0 }, { 1, 2, 5, 4 },
                                { 2, 2, 11 }, { 1, 2, 4, 3, 5 }, { 1, 2, 4, 4, 3 }, { 2, 1, 9 } };
    const int64_t ws[10][4] = { { 4, 2, 2, 3 }, { 3, 2, 3, 2 }, { 0 }, { 0 }, { 2, 3, 3, 0 }, { 0 } };
    const int xnd[10] = { 4, 4, 4, 4, 3, 4, 3, 5, 5, 3 }, wnd[10] = { 4, 4, 0, 0, 3, 0, 0, 0, 0, 0 };
    for (int k = 0; k < 10; k++) {
        gcase c = { k };
        tn_array *pts[2] = { tn_array_rand_uniform(TN_F64, xnd[k], xs[k], -2, 2, 100 + (uint64_t)k), NULL };
        if (k == 3 || k == 6 || k == 8) {   /* distinct values: the max of each window is unique and stays so under the step */
            int64_t n = tn_array_size(pts[0]);
            for (int64_t i = 0; i < n; i++) ((double *)pts[0]->data)[i] = (double)((i * 37) % n) / 7.0;
        }
        if (wnd[k]) pts[1] = tn_array_rand_uniform(TN_F64, wnd[k], ws[k], -1, 1, 200 + (uint64_t)k);
        tn_verify_grad_report rep;
        tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_grad, .user = &c, .n_inputs = wnd[k] ? 2 : 1, .points = pts,
                                                             .seed = 7 + (uint64_t)k, .static_shapes = true }, &rep);
        CHECK(r == TN_OK, "%s: %s", names[k], tn_last_error());
        tn_array_free(pts[0]); tn_array_free(pts[1]);
    }
}

/* The pooling's gradient (the PoolGrad op) against a float64 reference of
   the path it replaces: the columns of the window positions (IM2COL), each
   entry gy where the image element equals the window's max (else 0) or
   gy / K (or / the in-image count) rounded to the dtype, summed back into
   the image (COL2IM) window position by window position in a float
   accumulator (double for float64). Bit for bit, with NaN, inf, -0 and ties
   in the image and NaN and -0 in gy; the gradient function reads the image
   once (no columns). */
static void ref_pool_grad(const pcase *c, int mode, tn_dtype t, const double *x, const double *y, const double *gy, double *gx) {
    int o[3], K = c->k[0] * c->k[1] * c->k[2];
    for (int a = 0; a < 3; a++) o[a] = (c->in[a] + 2 * c->p[a] - c->d[a] * (c->k[a] - 1) - 1) / c->s[a] + 1;
    int64_t nx = (int64_t)c->N * c->C * prod3(c->in), L = prod3(o);
    for (int64_t i = 0; i < nx; i++) gx[i] = 0;
    for (int ka = 0; ka < c->k[0]; ka++) for (int kb = 0; kb < c->k[1]; kb++) for (int kc = 0; kc < c->k[2]; kc++)   /* the columns' rows in order */
        for (int n = 0; n < c->N; n++) for (int ch = 0; ch < c->C; ch++)
            for (int a = 0; a < o[0]; a++) for (int b = 0; b < o[1]; b++) for (int e = 0; e < o[2]; e++) {
                int ia = a * c->s[0] - c->p[0] + ka * c->d[0], ib = b * c->s[1] - c->p[1] + kb * c->d[1], ic = e * c->s[2] - c->p[2] + kc * c->d[2];
                if (ia < 0 || ib < 0 || ic < 0 || ia >= c->in[0] || ib >= c->in[1] || ic >= c->in[2]) continue;
                int64_t p = (((int64_t)n * c->C + ch) * c->in[0] + ia) * c->in[1] * c->in[2] + (int64_t)ib * c->in[2] + ic;
                int64_t l = ((int64_t)n * c->C + ch) * L + ((int64_t)a * o[1] + b) * o[2] + e;
                double v;
                if (mode == 0) v = x[p] == y[l] ? gy[l] : 0;
                else {
                    int cnt = 0;
                    for (int u = 0; u < c->k[0]; u++) for (int w = 0; w < c->k[1]; w++) for (int z = 0; z < c->k[2]; z++) {
                        int ja = a * c->s[0] - c->p[0] + u * c->d[0], jb = b * c->s[1] - c->p[1] + w * c->d[1], jc = e * c->s[2] - c->p[2] + z * c->d[2];
                        cnt += ja >= 0 && jb >= 0 && jc >= 0 && ja < c->in[0] && jb < c->in[1] && jc < c->in[2];
                    }
                    v = pool_round(t, gy[l] / (mode == 1 ? K : cnt));
                }
                gx[p] = t == TN_F64 ? gx[p] + v : (double)(float)(gx[p] + v);
            }
    for (int64_t i = 0; i < nx; i++) gx[i] = pool_round(t, gx[i]);
}

TEST(test_pool_grad_direct) {
    const pcase *cases = pool_cases;
    const tn_dtype ts[3] = { TN_F64, TN_F32, TN_F16 };
    int checked = 0, nonzero = 0;
    for (size_t ci = 0; ci < N_POOL_CASES; ci++) for (int k = 0; k < 3; k++) for (int mode = 0; mode < 3; mode++) {
        const pcase *c = &cases[ci];
        int o[3];
        for (int a = 0; a < 3; a++) o[a] = (c->in[a] + 2 * c->p[a] - c->d[a] * (c->k[a] - 1) - 1) / c->s[a] + 1;
        int64_t xsh[5] = { c->N, c->C, c->in[0], c->in[1], c->in[2] }, ysh[5] = { c->N, c->C, o[0], o[1], o[2] };
        int64_t nx = (int64_t)c->N * c->C * prod3(c->in), ny = (int64_t)c->N * c->C * prod3(o);
        double *xv = vals(nx, 400 + ci), *gv = vals(ny, 500 + ci);
        for (int64_t i = 0; i < nx; i++) {   /* specials, and repeats so that ties, -0 and +0 meet in windows */
            int64_t h = (i * 5 + (int64_t)ci) % 19;
            xv[i] = h == 0 ? NAN : h == 1 ? INFINITY : h == 2 ? -INFINITY : h == 3 ? -0.0 : h == 4 ? 0.0 : h == 5 || h == 6 ? 1.25 : xv[i];
        }
        for (int64_t i = 0; i < ny; i++) gv[i] = i % 11 == 3 ? NAN : i % 11 == 5 ? -0.0 : gv[i];
        tn_graph *gr = tn_graph_new();
        tn_var *X = tn_input(gr, "x", ts[k], c->nsp + 2, xsh, NULL), *GY = tn_input(gr, "gy", ts[k], c->nsp + 2, ysh, NULL);
        tn_conv_opts op;
        memset(&op, 0, sizeof op);
        for (int a = 0; a < c->nsp; a++) { op.kernel[a] = c->k[a]; op.stride[a] = c->s[a]; op.padding[a] = c->p[a]; op.dilation[a] = c->d[a]; }
        op.avg_exclude_pad = mode == 2;
        tn_var *y = mode == 0 ? tn_max_pool(X, &op) : tn_avg_pool(X, &op);
        tn_var *outs[2] = { y, y ? tn_grad1(tn_sum(tn_mul(y, GY), NULL, 0, false), X) : NULL };
        tn_func *f = outs[1] ? tn_function(gr, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ X, GY }, .n_outputs = 2, .outputs = outs }) : NULL;
        tn_array *xa = arr(ts[k], c->nsp + 2, xsh, xv), *ga = arr(ts[k], c->nsp + 2, ysh, gv), *r[2] = { NULL, NULL };
        CHECK(f && tn_call(f, (tn_array *[]){ xa, ga }, r) == TN_OK, "%s %s mode %d: %s", c->name, tn_dtype_name(ts[k]), mode, tn_last_error());
        if (f && ci == 1 && k == 1) {   /* one op for the gradient, reading the image: no columns */
            char buf[8192];
            function_text(f, buf, sizeof buf);
            CHECK(strstr(buf, mode == 0 ? "PoolGrad{mode=max, kernel=(3, 2), stride=(2, 1), pad=(1, 1)" : mode == 1 ? "PoolGrad{mode=average_inc_pad" : "PoolGrad{mode=average_exc_pad") &&
                  !strstr(buf, "Im2Col") && !strstr(buf, "Col2Im"), "mode %d: %s", mode, buf);
        }
        tn_array *xq = tn_array_astype(xa, TN_F64), *gq = tn_array_astype(ga, TN_F64);
        tn_array *yq = r[0] ? tn_array_astype(r[0], TN_F64) : NULL, *got = r[1] ? tn_array_astype(r[1], TN_F64) : NULL;
        double *want = (double *)malloc((size_t)nx * sizeof *want);
        if (got && yq) ref_pool_grad(c, mode, ts[k], (const double *)xq->data, (const double *)yq->data, (const double *)gq->data, want);
        int bad = 0;
        for (int64_t i = 0; got && yq && i < nx; i++) {
            double g = ((const double *)got->data)[i];
            bool ok = isnan(want[i]) ? isnan(g) : memcmp(&g, &want[i], sizeof g) == 0;
            if (!ok && bad++ < 3) CHECK(ok, "%s %s mode %d at %lld: %a, want %a", c->name, tn_dtype_name(ts[k]), mode, (long long)i, g, want[i]);
            checked++;
            nonzero += want[i] != 0 && !isnan(want[i]);
        }
        free(want); free(xv); free(gv);
        tn_array_free(xq); tn_array_free(gq); tn_array_free(yq); tn_array_free(got);
        tn_array_free(r[0]); tn_array_free(r[1]); tn_array_free(xa); tn_array_free(ga);
        tn_function_free(f);
        tn_graph_free(gr);
    }
    CHECK(checked > 5000 && nonzero > checked / 4, "%d gradients checked, %d of them nonzero", checked, nonzero);
}

/* Through PoolGrad: the second derivative (its gradient for gy: POOL for
   average, the masked window sums for max) by finite differences, and its
   forward mode (linear in gy) against central differences of the gradient. */
static tn_var *b_grad2(tn_graph *g, tn_var *const *in, void *user) {
    tn_var *y = b_grad(g, in, user);
    return y ? tn_grad1(tn_sum(tn_mul(tn_sqr(y), tn_sin(y)), NULL, 0, false), in[0]) : NULL;
}

TEST(test_pool_grad_second) {
    static const int kinds[7] = { 2, 3, 5, 6, 7, 8, 9 };
    static const int64_t xs[10][5] = { [2] = { 2, 2, 4, 5 }, [3] = { 1, 2, 4, 6 }, [5] = { 1, 2, 5, 4 }, [6] = { 2, 2, 11 },
                                       [7] = { 1, 2, 4, 3, 5 }, [8] = { 1, 2, 4, 4, 3 }, [9] = { 2, 1, 9 } };
    static const int xnd[10] = { [2] = 4, [3] = 4, [5] = 4, [6] = 3, [7] = 5, [8] = 5, [9] = 3 };
    for (int q = 0; q < 7; q++) {
        int k = kinds[q];
        gcase c = { k };
        tn_array *pt = tn_array_rand_uniform(TN_F64, xnd[k], xs[k], -2, 2, 300 + (uint64_t)k);
        if (k == 3 || k == 6 || k == 8) {   /* distinct values: each window's max unique under the step */
            int64_t n = tn_array_size(pt);
            for (int64_t i = 0; i < n; i++) ((double *)pt->data)[i] = (double)((i * 37) % n) / 7.0 - 1;
        }
        tn_verify_grad_report rep;
        tn_result r = tn_verify_grad(&(tn_verify_grad_desc){ .build = b_grad2, .user = &c, .n_inputs = 1, .points = &pt,
                                                             .seed = 11 + (uint64_t)k, .static_shapes = true }, &rep);
        CHECK(r == TN_OK, "kind %d: %s", k, tn_last_error());
        tn_array_free(pt);
    }
    for (int mode = 0; mode < 2; mode++) {   /* forward mode of the gradient */
        tn_graph *gr = tn_graph_new();
        int64_t sh[4] = { 2, 2, 5, 6 };
        tn_var *X = tn_input(gr, "x", TN_F64, 4, sh, NULL), *T = tn_input(gr, "t", TN_F64, 4, sh, NULL);
        tn_conv_opts o;
        memset(&o, 0, sizeof o);
        o.kernel[0] = o.kernel[1] = 3; o.stride[0] = 2; o.stride[1] = 1; o.padding[0] = o.padding[1] = 1;
        o.avg_exclude_pad = true;
        tn_var *y = mode == 0 ? tn_max_pool2d(X, &o) : tn_avg_pool2d(X, &o);
        tn_var *gx = tn_grad1(tn_sum(tn_mul(tn_sqr(y), tn_sin(y)), NULL, 0, false), X);
        tn_var *outs[2] = { gx, gx ? tn_rop(gx, 1, &X, &T) : NULL };
        tn_func *f = outs[1] ? tn_function(gr, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ X, T }, .n_outputs = 2, .outputs = outs }) : NULL;
        CHECK(f != NULL, "mode %d: %s", mode, tn_last_error());
        double xv[120], tv[120], xp[120], xm[120], h = 1e-6;
        for (int i = 0; i < 120; i++) {
            xv[i] = (double)((i * 37) % 120) / 31.0 - 2;   /* distinct: each window's max unique under the step */
            tv[i] = sin(i * 1.7);
            xp[i] = xv[i] + h * tv[i]; xm[i] = xv[i] - h * tv[i];
        }
        tn_array *xa = arr(TN_F64, 4, sh, xv), *ta = arr(TN_F64, 4, sh, tv), *pa = arr(TN_F64, 4, sh, xp), *ma = arr(TN_F64, 4, sh, xm);
        tn_array *r[2] = { NULL, NULL }, *rp[2] = { NULL, NULL }, *rm[2] = { NULL, NULL };
        bool ok = f && tn_call(f, (tn_array *[]){ xa, ta }, r) == TN_OK && tn_call(f, (tn_array *[]){ pa, ta }, rp) == TN_OK &&
                  tn_call(f, (tn_array *[]){ ma, ta }, rm) == TN_OK;
        CHECK(ok, "mode %d: %s", mode, tn_last_error());
        double worst = 0, scale = 0;
        for (int i = 0; ok && i < 120; i++) {
            double fd = (((double *)rp[0]->data)[i] - ((double *)rm[0]->data)[i]) / (2 * h), got = ((double *)r[1]->data)[i];
            worst = fmax(worst, fabs(got - fd));
            scale = fmax(scale, fabs(fd));
        }
        CHECK(ok && scale > 0.1 && worst < 1e-6 * scale, "mode %d: forward mode off by %g (scale %g)", mode, worst, scale);
        for (int j = 0; j < 2; j++) { tn_array_free(r[j]); tn_array_free(rp[j]); tn_array_free(rm[j]); }
        tn_array_free(xa); tn_array_free(ta); tn_array_free(pa); tn_array_free(ma);
        tn_function_free(f);
        tn_graph_free(gr);
    }
}

TEST(test_conv_errors) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F32, 4, (int64_t[]){ 2, 4, 5, 5 }, NULL), *w = tn_input(g, "w", TN_F32, 4, (int64_t[]){ 6, 3, 3, 3 }, NULL);
    tn_var *xi = tn_input(g, "xi", TN_I32, 4, (int64_t[]){ 2, 4, 5, 5 }, NULL), *w7 = tn_input(g, "w7", TN_F32, 4, (int64_t[]){ 6, 4, 7, 7 }, NULL);
    tn_var *w4 = tn_input(g, "w4", TN_F32, 4, (int64_t[]){ 6, 4, 3, 3 }, NULL), *x3 = tn_input(g, "x3", TN_F32, 3, (int64_t[]){ 2, 4, 5 }, NULL);
    tn_var *xd = tn_input(g, "xd", TN_F32, 4, (int64_t[]){ 2, 4, -1, 5 }, NULL), *wd = tn_input(g, "wd", TN_F64, 4, (int64_t[]){ 6, 4, 3, 3 }, NULL);
    tn_conv_opts o, s2, pool;
    memset(&o, 0, sizeof o);
    s2 = o; s2.stride[0] = 2; s2.pad_mode = TN_PAD_SAME;
    pool = o; pool.kernel[0] = pool.kernel[1] = 2; pool.padding[0] = 2;
    tn_var *r;
#define ERR_CASE(expr, code, words) do { tn_clear_error(); r = (expr); \
        CHECK(!r && tn_last_result() == (code) && strstr(tn_last_error(), words), "%s: %s (%s)", #expr, tn_result_string(tn_last_result()), tn_last_error()); } while (0)
    ERR_CASE(tn_conv2d(xi, w4, &o), TN_ERR_DTYPE, "tn_conv2d: x is int32");
    ERR_CASE(tn_conv2d(x, w, &o), TN_ERR_SHAPE, "tn_conv2d: w must be (C_out, C/groups");
    ERR_CASE(tn_conv2d(x, w7, &o), TN_ERR_SHAPE, "does not fit the window");
    ERR_CASE(tn_conv2d(x, w4, &s2), TN_ERR_INVALID, "padding 'same' needs stride 1");
    ERR_CASE(tn_max_pool2d(x, &pool), TN_ERR_INVALID, "tn_max_pool2d: padding 2 is more than half the kernel 2");
    ERR_CASE(tn_conv2d(x3, w4, &o), TN_ERR_SHAPE, "tn_conv2d: x must be (N, C, 2 spatial dims)");
    ERR_CASE(tn_conv2d(xd, w4, &o), TN_ERR_SHAPE, "spatial sizes must be static");
    ERR_CASE(tn_conv2d(x, wd, &o), TN_ERR_DTYPE, "x is float32 but w is float64");
    ERR_CASE(tn_conv2d(NULL, w4, &o), TN_ERR_NULL, "tn_conv2d");
    ERR_CASE(tn_max_pool2d(x, NULL), TN_ERR_NULL, "tn_max_pool2d");
#undef ERR_CASE
    tn_graph_free(g);
}

int main(void) {
    TH_RUN(test_conv_values);
    TH_RUN(test_conv_pad_modes);
    TH_RUN(test_conv_transpose_values);
    TH_RUN(test_pool_values);
    TH_RUN(test_pool_direct);
    TH_RUN(test_pool_grad_values);
    TH_RUN(test_pool_rop);
    TH_RUN(test_pool_grad_direct);
    TH_RUN(test_pool_grad_second);
    TH_RUN(test_conv_nan_and_batch);
    TH_RUN(test_conv_gradients);
    TH_RUN(test_conv_errors);
    TH_END();
}
