/* tests/test_random.c - random streams inside graphs (tn_random_stream and
   its draws, tn_dropout) on the CPU: Philox-4x32-10 against Random123's
   known answers and a second Philox written here; every draw's bits against
   a reference built from that second Philox and the documented counter
   layout (uniform, bernoulli, randint exactly; normal against libm's log,
   sin and cos); distributions (mean, variance, Kolmogorov-Smirnov against
   the float64 CDF, fixed seeds); statefulness (each call draws anew, the
   state counts calls), reproducibility across calls, functions and graphs,
   independence of streams and draws; dropout's scaling and its gradient
   reading the forward's mask; errors. The GPU's bits are compared with
   these in tests/test_cuda_func.c. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
#include <stdint.h>

#define PI 3.14159265358979323846

/* >>reference: Philox-4x32-10 as Random123 writes it (the key bumped before
   rounds 2..10, mulhilo through a 64-bit product) ------------------------- */
static void ref_philox(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]) {
    uint32_t k[2] = { key[0], key[1] }, c[4] = { ctr[0], ctr[1], ctr[2], ctr[3] };
    for (int round = 1; round <= 10; round++) {
        if (round > 1) { k[0] += 0x9E3779B9u; k[1] += 0xBB67AE85u; }
        uint64_t a = (uint64_t)c[0] * 0xD2511F53u, b = (uint64_t)c[2] * 0xCD9E8D57u;
        uint32_t hi0 = (uint32_t)(a >> 32), lo0 = (uint32_t)a, hi1 = (uint32_t)(b >> 32), lo1 = (uint32_t)b;
        uint32_t n[4] = { hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0 };
        memcpy(c, n, sizeof c);
    }
    memcpy(out, c, sizeof c);
}

/* The words of block j of draw d at call c of seed s (the layout README documents). */
static void ref_block(uint64_t seed, uint32_t draw, uint64_t calls, uint64_t j, uint32_t x[4]) {
    uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) }, ctr[4] = { (uint32_t)j, (uint32_t)(j >> 32), draw, (uint32_t)calls };
    ref_philox(key, ctr, x);
}
static double ref_u53(uint32_t lo, uint32_t hi) { return (double)((((uint64_t)hi << 32) | lo) >> 11) / 9007199254740992.0; }

/* Element i of a draw, by the documented formulas (uniform: low + u (high - low)
   with one rounding, as fma; normal: libm's Box-Muller). */
static double ref_value(int dist, tn_dtype t, uint64_t seed, uint32_t draw, uint64_t calls, int64_t i, double a, double b) {
    uint32_t x[4];
    int per = (dist == TN_RAND_UNIFORM || dist == TN_RAND_NORMAL) && t != TN_F64 ? 4 : 2, k = (int)(i % per);
    ref_block(seed, draw, calls, (uint64_t)(i / per), x);
    switch (dist) {
    case TN_RAND_UNIFORM:
        if (t == TN_F32) return fmaf((float)(x[k] >> 8) / 16777216.0f, (float)(b - a), (float)a);
        if (t == TN_F16) return tn_f16_to_f32(tn_f32_to_f16(fmaf((float)(x[k] >> 21) / 2048.0f, (float)(b - a), (float)a)));
        return fma(ref_u53(x[2 * k], x[2 * k + 1]), b - a, a);
    case TN_RAND_NORMAL: {
        if (t != TN_F64) {   /* pair k / 2: u1 = fmaf(word, 2^-32, 2^-33) (exact in double, then rounded), u2 = 24 bits */
            int h = k / 2;
            double u1 = (float)((double)(float)x[2 * h] * 0x1p-32 + 0x1p-33), u2 = (double)(x[2 * h + 1] >> 8) * 0x1p-24;
            double z = sqrt(-2 * log(u1)) * (k % 2 ? sin(2 * PI * u2) : cos(2 * PI * u2));
            return (float)a + (float)b * z;
        }
        double u1 = ((double)((((uint64_t)x[1] << 32) | x[0]) >> 11) + 1) / 9007199254740992.0, u2 = ref_u53(x[2], x[3]);
        double z = sqrt(-2 * log(u1)) * (k ? sin(2 * PI * u2) : cos(2 * PI * u2));
        return a + b * z;
    }
    case TN_RAND_BERNOULLI: return ref_u53(x[2 * k], x[2 * k + 1]) < a;
    default: return NAN;
    }
}

/* One compiled function of one output; its values as doubles (n of them). */
static double *run1(tn_graph *g, tn_var *y, int calls, tn_func **keep) {
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y });
    if (!f) return NULL;
    double *v = NULL;
    for (int c = 0; c < calls; c++) {
        tn_array *r = NULL;
        if (tn_call(f, NULL, &r) != TN_OK) { free(v); v = NULL; break; }
        int64_t n = tn_array_size(r);
        free(v);
        v = (double *)malloc((size_t)(n ? n : 1) * sizeof *v);
        tn_array_copy_to(r, TN_F64, v, (size_t)n * sizeof *v);
        tn_array_free(r);
    }
    if (keep) *keep = f;
    else tn_function_free(f);
    return v;
}

static int64_t state_calls(tn_rstream *s) {
    tn_array *a = tn_shared_get_value(tn_rstream_state(s));
    int64_t i1 = 1, c = a ? (int64_t)tn_array_get(a, &i1) : -1;
    tn_array_free(a);
    return c;
}

/* >>tests -------------------------------------------------------------------- */

/* Random123's kat_vectors (philox4x32 10), and the library's Philox equals
   the one above on random counters and keys. */
TEST(test_philox_known_answers) {
    static const uint32_t kat[3][10] = {
        { 0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 },
        { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd },
        { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 },
    };
    for (int k = 0; k < 3; k++) {
        uint32_t c[4] = { kat[k][0], kat[k][1], kat[k][2], kat[k][3] }, r[4];
        tn__philox10(kat[k][4], kat[k][5], c);
        ref_philox(&kat[k][4], kat[k], r);
        for (int w = 0; w < 4; w++) {
            CHECK(c[w] == kat[k][6 + w], "vector %d word %d: %08x, want %08x", k, w, c[w], kat[k][6 + w]);
            CHECK(r[w] == kat[k][6 + w], "the test's Philox: vector %d word %d: %08x, want %08x", k, w, r[w], kat[k][6 + w]);
        }
    }
    uint64_t z = 88172645463325252ull;
    for (int t = 0; t < 1000; t++) {
        uint32_t in[6], c[4], r[4];
        for (int w = 0; w < 6; w++) { z ^= z << 13; z ^= z >> 7; z ^= z << 17; in[w] = (uint32_t)(z >> 16); }
        memcpy(c, in, sizeof c);
        tn__philox10(in[4], in[5], c);
        ref_philox(&in[4], in, r);
        CHECK(!memcmp(c, r, sizeof c), "random input %d differs", t);
    }
}

/* The library's log and sin/cos of 2 pi u (normal's) against libm. */
TEST(test_own_log_and_sincos) {
    double worst_l = 0, worst_t = 0;
    uint64_t z = 1234567;
    for (int t = 0; t < 200000; t++) {
        z ^= z << 13; z ^= z >> 7; z ^= z << 17;
        double u = (double)((z >> 11) + 1) / 9007199254740992.0;
        if (t < 64) u = ldexp(1.0, -t);             /* powers of two down to 2^-63: the reduction's edges */
        double l = tn__rnd_log(u), want = log(u);
        worst_l = fmax(worst_l, want == 0 ? fabs(l) : fabs(l - want) / fabs(want));
        uint64_t w = z >> 11;                        /* the angle 2 pi w 2^-53 */
        if (t < 9) w = (uint64_t)t << 50;            /* the octants */
        if (t >= 9 && t < 17) w = ((uint64_t)(t - 9) << 51) + (1ull << 50) + (t & 1 ? 1 : 0);   /* halfway between quarters, and past */
        double c, s, v = (double)w / 9007199254740992.0;
        tn__rnd_sincos2pi(w, &c, &s);
        worst_t = fmax(worst_t, fabs(c - cos(2 * PI * v)));
        worst_t = fmax(worst_t, fabs(s - sin(2 * PI * v)));
    }
    CHECK(worst_l < 1e-15, "log: relative error %g", worst_l);
    CHECK(worst_t < 2e-15, "sin/cos: error %g", worst_t);
    /* float32's (normal float32/float16): over every u1 a draw can give (2^-33 to 1) and angles */
    double worst_lf = 0, worst_tf = 0;
    for (int t = 0; t < 200000; t++) {
        z ^= z << 13; z ^= z >> 7; z ^= z << 17;
        float u = fmaf((float)(uint32_t)(z >> 32), 0x1p-32f, 0x1p-33f);
        if (t < 34) u = ldexpf(1.0f, -t);
        double want = log((double)u), l = tn__rnd_logf(u);
        worst_lf = fmax(worst_lf, want == 0 ? fabs(l) : fabs(l - want) / fabs(want));
        uint32_t w = (uint32_t)z >> 8;               /* the angle 2 pi w 2^-24 */
        if (t < 9) w = (uint32_t)t << 21;
        if (t >= 9 && t < 17) w = ((uint32_t)(t - 9) << 22) + (1u << 21) + (t & 1 ? 1u : 0u);
        float c, s;
        double v = (double)w * 0x1p-24;
        tn__rnd_sincos2pif(w, &c, &s);
        worst_tf = fmax(worst_tf, fmax(fabs(c - cos(2 * PI * v)), fabs(s - sin(2 * PI * v))));
    }
    printf("  float32 log: worst relative error %.3g; sin/cos of 2 pi u: %.3g\n", worst_lf, worst_tf);
    CHECK(worst_lf < 2.5e-7, "logf: relative error %g", worst_lf);
    CHECK(worst_tf < 2.5e-7, "sin/cos in float32: error %g", worst_tf);
    double c0, s0, c1, s1;
    tn__rnd_sincos2pi(0, &c0, &s0);
    tn__rnd_sincos2pi(1ull << 51, &c1, &s1);    /* a quarter turn */
    CHECK(tn__rnd_log(1.0) == 0 && c0 == 1 && s0 == 0 && s1 == 1,
          "exact values: log(1) = %g, cos(0) = %g, sin(0) = %g, sin(pi/2) = %g", tn__rnd_log(1.0), c0, s0, s1);
}

/* Every draw's elements against the reference: uniform (float16/32/64) and
   bernoulli bit for bit; normal within 1e-14 of libm's Box-Muller (float32
   and float16: the double value rounded once); randint in range with the
   documented formula (exact). Odd sizes: the last block is partial. */
#define TOL_F32 1e-6   /* float32 normals: relative to max(1, |z|), against libm in double from the same words */
TEST(test_draws_match_reference) {
    const uint64_t seed = 0x0123456789abcdefull;
    int64_t n = 1003;
    double worst_f32 = 0;
    struct { int dist; tn_dtype t; double a, b; } cs[] = {
        { TN_RAND_UNIFORM, TN_F32, 0, 1 }, { TN_RAND_UNIFORM, TN_F32, -2.5, 7 }, { TN_RAND_UNIFORM, TN_F64, 0, 1 },
        { TN_RAND_UNIFORM, TN_F64, -1e3, 1e-3 }, { TN_RAND_UNIFORM, TN_F16, -1, 1 }, { TN_RAND_NORMAL, TN_F64, 0, 1 },
        { TN_RAND_NORMAL, TN_F64, 3, 0.25 }, { TN_RAND_NORMAL, TN_F32, -1, 2 }, { TN_RAND_NORMAL, TN_F16, 0, 1 },
        { TN_RAND_BERNOULLI, TN_F32, 0.3, 0 }, { TN_RAND_BERNOULLI, TN_BOOL, 0.75, 0 }, { TN_RAND_BERNOULLI, TN_I32, 1, 0 },
        { TN_RAND_BERNOULLI, TN_F64, 0, 0 },
    };
    /* at every instruction-set level this CPU has (the CPU's 16-block Philox and uniform kernels) */
    int best = tn__vm_level(99), levels = 0;
    for (int lv = 0; lv <= best; lv++, levels++)
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        if (c == 0) tn__vm_level(lv);
        tn_graph *g = tn_graph_new();
        tn_rstream *s = tn_random_stream(g, seed);
        tn_var *skip = tn_random_uniform(s, TN_F32, 1, &n, 0, 1);     /* draw 0: the case is draw 1 */
        tn_var *y = cs[c].dist == TN_RAND_UNIFORM ? tn_random_uniform(s, cs[c].t, 1, &n, cs[c].a, cs[c].b)
                  : cs[c].dist == TN_RAND_NORMAL ? tn_random_normal(s, cs[c].t, 1, &n, cs[c].a, cs[c].b)
                  : tn_random_bernoulli(s, cs[c].t, 1, &n, cs[c].a);
        CHECK(skip && y && y->type.dtype == cs[c].t, "case %zu: %s", c, tn_last_error());
        double *v = y ? run1(g, y, 3, NULL) : NULL;        /* the third call: calls = 2 */
        CHECK(v, "case %zu: %s", c, tn_last_error());
        int bad = 0;
        for (int64_t i = 0; v && i < n; i++) {
            double want = ref_value(cs[c].dist, cs[c].t, seed, 1, 2, i, cs[c].a, cs[c].b);
            if (cs[c].dist == TN_RAND_NORMAL) {
                if (cs[c].t == TN_F32) want = (float)want;
                if (cs[c].t == TN_F16) want = tn_f16_to_f32(tn_f32_to_f16((float)want));
            }
            double tol = cs[c].dist != TN_RAND_NORMAL ? 0 : cs[c].t == TN_F64 ? 1e-14 * fmax(1, fabs(want)) : cs[c].t == TN_F32 ? TOL_F32 * fmax(1, fabs(want)) : 1e-3 * fmax(1, fabs(want));
            if (cs[c].dist == TN_RAND_NORMAL && cs[c].t == TN_F32) worst_f32 = fmax(worst_f32, fabs(v[i] - want) / fmax(1, fabs(want)));
            if (!(fabs(v[i] - want) <= tol) && bad++ < 3)
                CHECK(0, "level %d, case %zu element %lld: %.17g, want %.17g", lv, c, (long long)i, v[i], want);
        }
        CHECK(bad == 0, "level %d, case %zu: %d elements differ", lv, c, bad);
        free(v);
        tn_graph_free(g);
    }
    tn__vm_level(-1);
    printf("  float32 normals: worst error %.3g (relative to max(1, |z|)); draws checked at %d instruction-set level%s\n", worst_f32, levels,
           levels == 1 ? "" : "s");
    /* randint: low + floor(r * range / 2^64), r the 64 bits of words 2t, 2t+1 */
    struct { tn_dtype t; int64_t lo, hi; } ri[] = { { TN_I64, -5, 7 }, { TN_I32, -2147483647 - 1, 2147483647 }, { TN_I64, INT64_MIN, INT64_MAX },
                                                    { TN_I64, 0, 1 }, { TN_I32, 10, 11000 } };
    for (size_t c = 0; c < sizeof ri / sizeof ri[0]; c++) {
        tn_graph *g = tn_graph_new();
        tn_rstream *s = tn_random_stream(g, 99);
        tn_var *y = tn_random_randint(s, ri[c].t, 1, &n, ri[c].lo, ri[c].hi);
        tn_func *f = y ? tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y }) : NULL;
        tn_array *r = NULL;
        CHECK(f && tn_call(f, NULL, &r) == TN_OK, "randint %zu: %s", c, tn_last_error());
        tn_array_free(r);
        r = NULL;
        CHECK(f && tn_call(f, NULL, &r) == TN_OK && r->dtype == ri[c].t, "randint %zu: %s", c, tn_last_error());   /* calls = 1 */
        int bad = 0;
        for (int64_t i = 0; r && i < n; i++) {
            uint32_t x[4];
            ref_block(99, 0, 1, (uint64_t)(i / 2), x);
            int k = (int)(i % 2);
            uint64_t w = ((uint64_t)x[2 * k + 1] << 32) | x[2 * k], range = (uint64_t)ri[c].hi - (uint64_t)ri[c].lo;
            unsigned __int128 prod = (unsigned __int128)w * range;
            int64_t want = (int64_t)((uint64_t)ri[c].lo + (uint64_t)(prod >> 64));
            int64_t got = ri[c].t == TN_I64 ? ((const int64_t *)r->data)[i] : ((const int32_t *)r->data)[i];
            if ((got != want || got < ri[c].lo || got >= ri[c].hi) && bad++ < 3)
                CHECK(0, "randint %zu element %lld: %lld, want %lld", c, (long long)i, (long long)got, (long long)want);
        }
        CHECK(bad == 0, "randint %zu: %d elements differ", c, bad);
        tn_array_free(r);
        tn_function_free(f);
        tn_graph_free(g);
    }
}

static int cmp_dbl(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
/* Kolmogorov-Smirnov statistic of v[n] against cdf. */
static double ks(double *v, int64_t n, double (*cdf)(double)) {
    qsort(v, (size_t)n, sizeof *v, cmp_dbl);
    double d = 0;
    for (int64_t i = 0; i < n; i++) {
        double F = cdf(v[i]);
        d = fmax(d, fmax(F - (double)i / n, (double)(i + 1) / n - F));
    }
    return d;
}
static double cdf_u(double x) { return x < 0 ? 0 : x > 1 ? 1 : x; }
static double cdf_n(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* Mean, variance and KS (the 0.1% critical value 1.95 / sqrt(n)), fixed seeds. */
TEST(test_distributions) {
    int64_t n = 200000;
    struct { int dist; tn_dtype t; double a, b; } cs[] = {
        { TN_RAND_UNIFORM, TN_F32, 0, 1 }, { TN_RAND_UNIFORM, TN_F64, 0, 1 }, { TN_RAND_NORMAL, TN_F32, 0, 1 }, { TN_RAND_NORMAL, TN_F64, 0, 1 },
    };
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        tn_graph *g = tn_graph_new();
        tn_rstream *s = tn_random_stream(g, 20240 + c);
        tn_var *y = cs[c].dist == TN_RAND_UNIFORM ? tn_random_uniform(s, cs[c].t, 2, (int64_t[]){ 400, 500 }, cs[c].a, cs[c].b)
                                                  : tn_random_normal(s, cs[c].t, 2, (int64_t[]){ 400, 500 }, cs[c].a, cs[c].b);
        double *v = run1(g, y, 1, NULL);
        CHECK(v, "%s", tn_last_error());
        if (v) {
            double m = 0, q = 0;
            for (int64_t i = 0; i < n; i++) m += v[i];
            m /= n;
            for (int64_t i = 0; i < n; i++) q += (v[i] - m) * (v[i] - m);
            q /= n - 1;
            bool u = cs[c].dist == TN_RAND_UNIFORM;
            double em = u ? 0.5 : 0, ev = u ? 1.0 / 12 : 1, sm = sqrt(ev / n);
            CHECK(fabs(m - em) < 4 * sm, "case %zu: mean %g, want %g (+- %g)", c, m, em, 4 * sm);
            CHECK(fabs(q / ev - 1) < 0.02, "case %zu: variance %g, want %g", c, q, ev);
            double d = ks(v, n, u ? cdf_u : cdf_n);
            CHECK(d < 1.95 / sqrt((double)n), "case %zu: KS statistic %g (critical %g)", c, d, 1.95 / sqrt((double)n));
            double lo = v[0], hi = v[n - 1];
            if (u) CHECK(lo >= 0 && hi < 1, "uniform in [0, 1): %g .. %g", lo, hi);
            else CHECK(lo > -6 && hi < 6 && lo < -3.5 && hi > 3.5, "normal tails: %g .. %g", lo, hi);
        }
        free(v);
        tn_graph_free(g);
    }
    /* bernoulli: the fraction of ones; randint: every value of a small range about equally often */
    tn_graph *g = tn_graph_new();
    tn_rstream *s = tn_random_stream(g, 5);
    double *b = run1(g, tn_random_bernoulli(s, TN_I64, 1, &n, 0.3), 1, NULL);
    double *r = run1(g, tn_random_randint(s, TN_I32, 1, &n, -3, 4), 1, NULL);
    CHECK(b && r, "%s", tn_last_error());
    if (b && r) {
        double ones = 0;
        int64_t cnt[7] = { 0 };
        for (int64_t i = 0; i < n; i++) {
            ones += b[i];
            if (r[i] >= -3 && r[i] < 4) cnt[(int)r[i] + 3]++;
        }
        CHECK(fabs(ones / n - 0.3) < 4 * sqrt(0.21 / n), "bernoulli(0.3): %g ones", ones / n);
        double chi = 0, e = n / 7.0;
        int64_t tot = 0;
        for (int k = 0; k < 7; k++) { chi += (cnt[k] - e) * (cnt[k] - e) / e; tot += cnt[k]; }
        CHECK(tot == n && chi < 22.46, "randint(-3, 4): %lld in range, chi-square %g (6 dof, 0.1%%: 22.46)", (long long)tot, chi);
    }
    free(b); free(r);
    tn_graph_free(g);
}

/* Each call draws new numbers; the state counts the calls; reseeding
   repeats the first call; a second function and a second graph with the
   same seed give the same numbers; a function that draws nothing leaves the
   state alone; two draws and two streams differ and are uncorrelated. */
TEST(test_state_and_reproducibility) {
    int64_t n = 4096;
    tn_graph *g = tn_graph_new();
    tn_rstream *s = tn_random_stream(g, 42);
    tn_var *u = tn_random_uniform(s, TN_F64, 1, &n, 0, 1), *w = tn_random_uniform(s, TN_F64, 1, &n, 0, 1);
    tn_var *outs[2] = { u, w };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 2, .outputs = outs });
    CHECK(f, "%s", tn_last_error());
    if (!f) { tn_graph_free(g); return; }
    tn_array *r1[2] = { 0 }, *r2[2] = { 0 }, *r3[2] = { 0 };
    CHECK(state_calls(s) == 0, "a new stream has made no call");
    CHECK(tn_call(f, NULL, r1) == TN_OK && tn_call(f, NULL, r2) == TN_OK, "%s", tn_last_error());
    CHECK(state_calls(s) == 2, "two calls: the state says %lld", (long long)state_calls(s));
    const double *a = (const double *)r1[0]->data, *b = (const double *)r2[0]->data, *c = (const double *)r1[1]->data;
    int same12 = 0, sameuw = 0;
    double cor = 0;
    for (int64_t i = 0; i < n; i++) { same12 += a[i] == b[i]; sameuw += a[i] == c[i]; cor += (a[i] - 0.5) * (c[i] - 0.5); }
    cor = cor / n * 12;
    CHECK(same12 == 0, "two calls share %d values", same12);
    CHECK(sameuw == 0 && fabs(cor) < 4 / sqrt((double)n), "two draws of one stream: %d equal values, correlation %g", sameuw, cor);
    /* a function of another draw of the same stream advances it too */
    tn_var *z = tn_random_normal(s, TN_F32, 0, NULL, 0, 1);
    tn_func *fz = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &z });
    tn_array *rz = NULL;
    CHECK(fz && tn_call(fz, NULL, &rz) == TN_OK && state_calls(s) == 3, "another function of the stream: state %lld", (long long)state_calls(s));
    /* reseed: the first call again, from the same function and from a new one */
    CHECK(tn_rstream_seed(s, 42) == TN_OK && state_calls(s) == 0, "reseed: %s", tn_last_error());
    CHECK(tn_call(f, NULL, r3) == TN_OK && !memcmp(r3[0]->data, r1[0]->data, (size_t)n * 8) && !memcmp(r3[1]->data, r1[1]->data, (size_t)n * 8),
          "the first call again after tn_rstream_seed");
    tn_rstream_seed(s, 42);
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &w });
    tn_array *rw = NULL;
    CHECK(f2 && tn_call(f2, NULL, &rw) == TN_OK && !memcmp(rw->data, r1[1]->data, (size_t)n * 8), "a second function: %s", tn_last_error());
    /* a second graph, the same seed and draw numbers: the same values */
    tn_graph *g2 = tn_graph_new();
    tn_rstream *s2 = tn_random_stream(g2, 42), *s3 = tn_random_stream(g2, 43);
    tn_var *v2 = tn_random_uniform(s2, TN_F64, 1, &n, 0, 1), *v3 = tn_random_uniform(s3, TN_F64, 1, &n, 0, 1);
    double *d2 = run1(g2, v2, 1, NULL), *d3 = run1(g2, v3, 1, NULL);
    CHECK(d2 && !memcmp(d2, r1[0]->data, (size_t)n * 8), "another graph with the same seed");
    int same23 = 0;
    cor = 0;
    for (int64_t i = 0; d2 && d3 && i < n; i++) { same23 += d2[i] == d3[i]; cor += (d2[i] - 0.5) * (d3[i] - 0.5); }
    cor = cor / n * 12;
    CHECK(d3 && same23 == 0 && fabs(cor) < 4 / sqrt((double)n), "seeds 42 and 43: %d equal values, correlation %g", same23, cor);
    /* a function without draws leaves the state alone; an update of the state the user writes wins */
    tn_var *sum = tn_sum(tn_rstream_state(s), NULL, 0, false);
    tn_func *fs = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &sum });
    tn_array *rs = NULL;
    int64_t before = state_calls(s);
    CHECK(fs && tn_call(fs, NULL, &rs) == TN_OK && state_calls(s) == before, "a function that draws nothing: state %lld", (long long)state_calls(s));
    int64_t two = 2, keep[2] = { 7, 100 };
    tn_array *kv = tn_array_from_data(TN_I64, 1, &two, keep);
    tn_update up = { tn_rstream_state(s), tn_constant(g, kv) };
    tn_func *fu = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &u, .n_updates = 1, .updates = &up });
    tn_array *ru = NULL;
    CHECK(fu && tn_call(fu, NULL, &ru) == TN_OK && state_calls(s) == 100, "the user's update of the state: %lld", (long long)state_calls(s));
    tn_array_free(kv);
    tn_array_free(ru); tn_array_free(rs); tn_array_free(rz); tn_array_free(rw);
    for (int k = 0; k < 2; k++) { tn_array_free(r1[k]); tn_array_free(r2[k]); tn_array_free(r3[k]); }
    free(d2); free(d3);
    tn_function_free(f); tn_function_free(f2); tn_function_free(fz); tn_function_free(fs); tn_function_free(fu);
    tn_graph_free(g);
    tn_graph_free(g2);
}

/* Dropout: kept elements are x / (1 - p), the others 0, about 1 - p of them
   kept; d sum(y * w) / dx is w / (1 - p) exactly where y kept x and 0
   elsewhere, in the same call (the gradient reads the forward's mask); the
   next call drops others. The mask and the scaling fuse into one kernel
   after the draw. p = 0 is x itself, p = 1 gives zeros. A draw of a
   variable's shape follows the shape given at call time. */
TEST(test_dropout) {
    tn_graph *g = tn_graph_new();
    tn_rstream *s = tn_random_stream(g, 7);
    tn_var *x = tn_matrix(g, "x", TN_F64), *w = tn_matrix(g, "w", TN_F64);
    const double p = 0.3, scale = 1 / (1 - p);
    tn_var *y = tn_dropout(s, x, p);
    tn_var *gx = tn_grad1(tn_sum(tn_mul(y, w), NULL, 0, false), x);
    tn_var *outs[2] = { y, gx }, *ins[2] = { x, w };
    tn_func *f = y && gx ? tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 2, .outputs = outs }) : NULL;
    CHECK(f, "%s", tn_last_error());
    if (f) {
        FILE *m = tmpfile();
        char buf[8192] = { 0 };
        tn_debugprint_function(f, m);
        rewind(m);
        buf[fread(buf, 1, sizeof buf - 1, m)] = 0;
        fclose(m);
        /* the mask is drawn inside the kernels that read it, never by its own op; a
           kernel of the gradient may draw it again: the same draw, the same bits */
        CHECK(strstr(buf, "random{bernoulli,draw=0}") && !strstr(buf, "Random{"), "one draw, fused:\n%s", buf);
        CHECK(!strstr(buf, "draw=1"), "the gradient draws no second mask:\n%s", buf);
    }
    int64_t shapes[2][2] = { { 301, 17 }, { 5, 3 } };
    double *prev = NULL;
    for (int call = 0; f && call < 3; call++) {
        int64_t *sh = shapes[call == 2], n = sh[0] * sh[1];
        tn_array *xv = tn_array_rand_uniform(TN_F64, 2, sh, 0.5, 2, 11 + (uint64_t)call), *wv = tn_array_rand_uniform(TN_F64, 2, sh, -1, 1, 12);
        tn_array *in[2] = { xv, wv }, *r[2] = { 0 };
        CHECK(tn_call(f, in, r) == TN_OK, "%s", tn_last_error());
        if (r[0] && r[1]) {
            CHECK(r[0]->ndim == 2 && r[0]->shape[0] == sh[0] && r[0]->shape[1] == sh[1], "the mask takes x's shape at call time");
            const double *X = (const double *)xv->data, *W = (const double *)wv->data, *Y = (const double *)r[0]->data, *G = (const double *)r[1]->data;
            int64_t kept = 0, bad = 0, same = 0;
            for (int64_t i = 0; i < n; i++) {
                bool k = Y[i] != 0;
                kept += k;
                if (k ? Y[i] != X[i] * scale || G[i] != W[i] * scale : G[i] != 0) bad++;
                if (prev && call == 1 && k == (prev[i] != 0)) same++;
            }
            CHECK(bad == 0, "call %d: %lld elements where y or the gradient disagree with the mask", call, (long long)bad);
            if (call < 2) CHECK(fabs((double)kept / n - (1 - p)) < 4 * sqrt(p * (1 - p) / n), "call %d: %lld of %lld kept", call, (long long)kept, (long long)n);
            if (call == 1) CHECK(same < n * 0.7, "the second call keeps other elements (%lld of %lld agree)", (long long)same, (long long)n);
            if (call == 0) { prev = (double *)malloc((size_t)n * sizeof *prev); memcpy(prev, Y, (size_t)n * sizeof *prev); }
        }
        tn_array_free(r[0]); tn_array_free(r[1]); tn_array_free(xv); tn_array_free(wv);
    }
    free(prev);
    tn_function_free(f);
    CHECK(tn_dropout(s, x, 0) == x, "p = 0: x itself");
    tn_var *z = tn_dropout(s, x, 1);
    tn_func *fz = z ? tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &z }) : NULL;
    tn_array *xv = tn_array_full(TN_F64, 2, (int64_t[]){ 4, 4 }, INFINITY), *rz = NULL;
    CHECK(fz && tn_call(fz, &xv, &rz) == TN_OK, "%s", tn_last_error());
    for (int64_t i = 0; rz && i < 16; i++) CHECK(((const double *)rz->data)[i] == 0, "p = 1: element %lld is %g", (long long)i, ((const double *)rz->data)[i]);
    tn_array_free(rz); tn_array_free(xv);
    tn_function_free(fz);
    tn_graph_free(g);
}

TEST(test_labels_and_errors) {
    tn_graph *g = tn_graph_new(), *g2 = tn_graph_new();
    tn_rstream *s = tn_random_stream(g, 1);
    int64_t sh[2] = { 3, 4 };
    tn_var *y = tn_random_normal(s, TN_F32, 2, sh, 0, 1);
    char buf[128] = { 0 };
    if (y) tn__op_def(y->op)->label(y, buf, sizeof buf);
    CHECK(y && y->type.ndim == 2 && y->type.shape[1] == 4 && strcmp(buf, "Random{normal,draw=0}") == 0, "label '%s'", buf);
    CHECK(tn_random_uniform(s, TN_DTYPE_NONE, 1, sh, 0, 1)->type.dtype == TN_F32, "floatX by default");
    CHECK(tn_random_randint(s, TN_DTYPE_NONE, 1, sh, 0, 9)->type.dtype == TN_I64, "randint: int64 by default");
    CHECK(!tn_random_uniform(NULL, TN_F32, 1, sh, 0, 1), "NULL stream");
    CHECK_ERR(TN_ERR_NULL, "tn_random_uniform");
    CHECK(!tn_random_uniform(s, TN_I32, 1, sh, 0, 1), "int uniform");
    CHECK_ERR(TN_ERR_DTYPE, "tn_random_uniform: dtype int32");
    CHECK(!tn_random_uniform(s, TN_F32, 1, sh, 2, 1), "low > high");
    CHECK_ERR(TN_ERR_INVALID, "low 2 must not exceed high 1");
    CHECK(!tn_random_uniform(s, TN_F64, 1, sh, -1e308, 1e308), "high - low overflows");
    CHECK_ERR(TN_ERR_INVALID, "finite");
    CHECK(!tn_random_normal(s, TN_F32, 1, sh, 0, -1), "negative std");
    CHECK_ERR(TN_ERR_INVALID, "tn_random_normal: std -1 is negative");
    CHECK(!tn_random_normal(s, TN_F32, 1, sh, NAN, 1), "NaN mean");
    CHECK_ERR(TN_ERR_INVALID, "must be finite");
    CHECK(!tn_random_bernoulli(s, TN_F32, 1, sh, 1.5), "p > 1");
    CHECK_ERR(TN_ERR_INVALID, "tn_random_bernoulli: p 1.5 is not in [0, 1]");
    CHECK(!tn_random_randint(s, TN_I64, 1, sh, 5, 5), "empty range");
    CHECK_ERR(TN_ERR_INVALID, "tn_random_randint: the range [5, 5) is empty");
    CHECK(!tn_random_randint(s, TN_I32, 1, sh, 0, 3000000000LL), "range beyond int32");
    CHECK_ERR(TN_ERR_INVALID, "does not fit int32");
    CHECK(!tn_random_randint(s, TN_F32, 1, sh, 0, 3), "float randint");
    CHECK_ERR(TN_ERR_DTYPE, "randint draws int32 or int64");
    CHECK(!tn_random_normal(s, TN_F32, 2, (int64_t[]){ 3, -1 }, 0, 1), "unknown dim");
    CHECK_ERR(TN_ERR_SHAPE, "tn_random_normal: shape (3, ?)");
    CHECK(!tn_random_like(s, TN_RAND_RANDINT, TN_I64, tn_vector(g, "v", TN_F32), 0.5, 3), "fractional randint bound");
    CHECK_ERR(TN_ERR_INVALID, "tn_random_like: randint's bounds");
    CHECK(!tn_random_like(s, TN_RAND_NORMAL, TN_F32, tn_vector(g2, "v", TN_F32), 0, 1), "another graph");
    CHECK_ERR(TN_ERR_GRAPH, "tn_random_like");
    CHECK(!tn_dropout(s, tn_vector(g, "iv", TN_I32), 0.5), "int dropout");
    CHECK_ERR(TN_ERR_DTYPE, "tn_dropout: x 'iv' is int32");
    CHECK(!tn_dropout(s, tn_vector(g, "fv", TN_F32), -0.1), "negative p");
    CHECK_ERR(TN_ERR_INVALID, "tn_dropout: p -0.1");
    CHECK(!tn_random_stream(NULL, 1), "NULL graph");
    CHECK_ERR(TN_ERR_NULL, "tn_random_stream");
    CHECK(tn_rstream_seed(NULL, 1) == TN_ERR_NULL, "NULL stream seed");
    /* a state set to another shape is refused when the function runs */
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y });
    int64_t three = 3;
    tn_array *bad = tn_array_zeros(TN_I64, 1, &three), *r = NULL;
    CHECK(f && tn_shared_set_value(tn_rstream_state(s), bad) != TN_OK, "the state's shape is fixed");
    CHECK(f && tn_call(f, NULL, &r) == TN_OK, "%s", tn_last_error());
    tn_array_free(r); tn_array_free(bad);
    tn_function_free(f);
    tn_graph_free(g);
    tn_graph_free(g2);
}

/* The debugprint of a function, into buf. */
static void fused_dump(tn_func *f, char *buf, size_t cap) {
    FILE *m = tmpfile();
    buf[0] = 0;
    if (!m) return;
    tn_debugprint_function(f, m);
    rewind(m);
    buf[fread(buf, 1, cap - 1, m)] = 0;
    fclose(m);
}

static void fused_set_state(tn_rstream *s, int64_t seed, int64_t calls) {
    int64_t two = 2, v[2] = { seed, calls };
    tn_array *a = tn_array_from_data(TN_I64, 1, &two, v);
    CHECK(a && tn_shared_set_value(tn_rstream_state(s), a) == TN_OK, "%s", tn_last_error());
    tn_array_free(a);
}

/* A draw of a variable's shape joins the elementwise kernel that reads it
   (a TN_OP_RANDOM instruction of the fused program). Every distribution and
   dtype gives, fused, the bits of the Random op unfused (the same graph
   compiled in fast_compile mode, which fuses nothing) at the same seed and
   call: with the variable an input, computed inside the kernel, broadcast
   at call time ((R, 1) against (R, C)), a transposed input (the tiled
   walk), and two draws in one kernel. The next call draws other numbers. */
TEST(test_fused_draws) {
    enum { R = 37, C = 65 };
    const struct { int dist; tn_dtype t; double a, b; } cases[] = {
        { TN_RAND_UNIFORM, TN_F16, -2, 3 }, { TN_RAND_UNIFORM, TN_F32, -2, 3 }, { TN_RAND_UNIFORM, TN_F64, -2, 3 },
        { TN_RAND_NORMAL, TN_F16, 1, 2 }, { TN_RAND_NORMAL, TN_F32, 1, 2 }, { TN_RAND_NORMAL, TN_F64, 1, 2 },
        { TN_RAND_BERNOULLI, TN_BOOL, 0.3, 0 }, { TN_RAND_BERNOULLI, TN_I32, 0.6, 0 }, { TN_RAND_BERNOULLI, TN_I64, 0.5, 0 },
        { TN_RAND_BERNOULLI, TN_F16, 0.7, 0 }, { TN_RAND_BERNOULLI, TN_F32, 0.2, 0 }, { TN_RAND_BERNOULLI, TN_F64, 0.5, 0 },
        { TN_RAND_RANDINT, TN_I32, -5, 1000 }, { TN_RAND_RANDINT, TN_I64, -3, 7 },
    };
    static const char *variant[5] = { "of an input", "of a value computed in the kernel", "broadcast at call time",
                                      "of a transposed input", "two draws" };
    int checked = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int v = 0; v < 5; v++) {
            tn_graph *g = tn_graph_new();
            tn_rstream *s = tn_random_stream(g, 5);
            tn_var *x = tn_matrix(g, "x", TN_F64), *u = tn_matrix(g, "u", TN_F64), *like = v == 1 ? tn_exp(x) : v == 2 ? u : x;
            tn_var *d = tn_random_like(s, (tn_rdist)cases[c].dist, cases[c].t, like, cases[c].a, cases[c].b);
            tn_var *y = tn_add(tn_cast(d, TN_F64), v == 1 ? like : x);
            if (v == 4) y = tn_mul(y, tn_random_like(s, TN_RAND_UNIFORM, TN_F64, x, 1, 2));
            tn_var *ins[2] = { x, u };
            int nin = v == 2 ? 2 : 1;
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = nin, .inputs = ins, .n_outputs = 1, .outputs = &y });
            tn_func *f0 = tn_function(g, &(tn_func_desc){ .n_inputs = nin, .inputs = ins, .n_outputs = 1, .outputs = &y,
                                                         .mode = TN_MODE_FAST_COMPILE });
            CHECK(f && f0, "case %zu %s: %s", c, variant[v], tn_last_error());
            char buf[8192], buf0[8192];
            if (f && f0) {
                fused_dump(f, buf, sizeof buf);
                fused_dump(f0, buf0, sizeof buf0);
                CHECK(strstr(buf, "random{") && !strstr(buf, "Random{") && strstr(buf0, "Random{"),
                      "case %zu (%s %s) %s: fused\n%s\nunfused\n%s", c, tn_dtype_name(cases[c].t), variant[v], variant[v], buf, buf0);
            }
            tn_array *xb = tn_array_rand_uniform(TN_F64, 2, v == 3 ? (int64_t[]){ C, R } : (int64_t[]){ R, C }, -1, 1, 40 + (uint64_t)c);
            tn_array *xv = v == 3 ? tn_array_transpose(xb, NULL) : tn_array_view(xb);
            tn_array *uv = tn_array_rand_uniform(TN_F64, 2, (int64_t[]){ R, 1 }, -1, 1, 41);
            double *first = NULL;
            for (int call = 0; f && f0 && call < 2; call++) {
                tn_array *in[2] = { xv, uv }, *r = NULL, *r0 = NULL;
                fused_set_state(s, 5, call);
                CHECK(tn_call(f, in, &r) == TN_OK, "%s", tn_last_error());
                fused_set_state(s, 5, call);
                CHECK(tn_call(f0, in, &r0) == TN_OK, "%s", tn_last_error());
                if (r && r0) {
                    CHECK(r->ndim == 2 && r->shape[0] == R && r->shape[1] == C && tn_array_is_contiguous(r) && tn_array_is_contiguous(r0),
                          "shape");
                    int64_t bad = 0, same = 0;
                    const double *Y = (const double *)r->data, *Y0 = (const double *)r0->data;
                    for (int64_t i = 0; i < (int64_t)R * C; i++) {
                        bad += memcmp(&Y[i], &Y0[i], sizeof Y[i]) != 0;
                        if (first) same += Y[i] == first[i];
                    }
                    CHECK(bad == 0, "case %zu (%s %s), call %d: %lld of %d elements differ from the unfused draw", c,
                          tn_dtype_name(cases[c].t), variant[v], call, (long long)bad, R * C);
                    if (first) CHECK(same < (int64_t)R * C * 9 / 10, "case %zu %s: the next call draws again (%lld the same)", c, variant[v], (long long)same);
                    if (!first && (first = (double *)malloc(sizeof(double) * R * C))) memcpy(first, Y, sizeof(double) * R * C);
                    checked++;
                }
                tn_array_free(r);
                tn_array_free(r0);
            }
            free(first);
            tn_array_free(xv); tn_array_free(xb); tn_array_free(uv);
            tn_function_free(f);
            tn_function_free(f0);
            tn_graph_free(g);
        }
    }
    CHECK(checked == 2 * 5 * (int)(sizeof cases / sizeof cases[0]), "%d calls compared", checked);
}

int main(void) {
    tn_config cfg = { .device = TN_DEVICE_CPU, .floatX = TN_F32 };
    tn_init(&cfg);
    TH_RUN(test_philox_known_answers);
    TH_RUN(test_own_log_and_sincos);
    TH_RUN(test_draws_match_reference);
    TH_RUN(test_distributions);
    TH_RUN(test_state_and_reproducibility);
    TH_RUN(test_dropout);
    TH_RUN(test_fused_draws);
    TH_RUN(test_labels_and_errors);
    tn_shutdown();
    TH_END();
}
