/* tests/test_array.c - arrays: creation, views, conversion, printing, random, errors */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

/* reference: element at a multi-index through byte strides */
static double ref_get(const tn_array *a, const int64_t *idx) {
    const char *p = (const char *)a->data;
    for (int d = 0; d < a->ndim; d++) p += idx[d] * a->strides[d];
    switch (a->dtype) {
    case TN_BOOL: return *(const uint8_t *)p;
    case TN_I32: return *(const int32_t *)p;
    case TN_I64: return (double)*(const int64_t *)p;
    case TN_F16: return tn_f16_to_f32(*(const uint16_t *)p);
    case TN_F32: return *(const float *)p;
    default: return *(const double *)p;
    }
}

static bool next_index(int ndim, const int64_t *shape, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        if (++idx[d] < shape[d]) return true;
        idx[d] = 0;
    }
    return false;
}

TEST(test_create) {
    int64_t sh[] = {3, 4};
    tn_array *z = tn_array_zeros(TN_F32, 2, sh), *o = tn_array_ones(TN_I32, 2, sh);
    tn_array *f = tn_array_full(TN_F64, 2, sh, -2.5), *s = tn_array_scalar(TN_I64, 7);
    CHECK(z && o && f && s, "create: %s", tn_last_error());
    CHECK(((uintptr_t)z->data & 63) == 0, "64-byte aligned");
    CHECK(tn_array_size(z) == 12 && tn_array_nbytes(z) == 48, "size");
    CHECK(z->strides[0] == 16 && z->strides[1] == 4, "C strides");
    int64_t idx[2] = {0, 0};
    do {
        CHECK(tn_array_get(z, idx) == 0 && tn_array_get(o, idx) == 1 && tn_array_get(f, idx) == -2.5, "values");
    } while (next_index(2, sh, idx));
    CHECK(s->ndim == 0 && tn_array_get(s, NULL) == 7, "scalar");
    double data[6] = {1, -2, 3.5, 4, 5, 6};
    tn_array *d = tn_array_from_data(TN_F64, 2, (int64_t[]){2, 3}, data);
    data[0] = 100;                               /* copied, not wrapped */
    CHECK(tn_array_get(d, (int64_t[]){0, 0}) == 1 && tn_array_get(d, (int64_t[]){1, 2}) == 6, "from_data");
    tn_array *w = tn_array_wrap(TN_F64, 2, (int64_t[]){2, 3}, NULL, data);
    CHECK(tn_array_get(w, (int64_t[]){0, 0}) == 100, "wrap aliases");
    CHECK(tn_array_set(w, (int64_t[]){1, 1}, 42) == TN_OK && data[4] == 42, "set through wrap");
    CHECK(tn_array_get(w, (int64_t[]){-1, -1}) == 6, "negative index");
    /* arange sizes as numpy: ceil((stop-start)/step) */
    struct { double a, b, s; int64_t n; } ar[] = { {0, 10, 1, 10}, {0, 10, 3, 4}, {10, 0, -3, 4}, {0, 1, 0.1, 10}, {5, 0, 1, 0} };
    for (int i = 0; i < 5; i++) {
        tn_array *r = tn_array_arange(TN_F64, ar[i].a, ar[i].b, ar[i].s);
        CHECK(r && r->shape[0] == ar[i].n, "arange %d len %lld", i, r ? (long long)r->shape[0] : -1LL);
        for (int64_t k = 0; r && k < r->shape[0]; k++)
            CHECK(tn_array_get(r, &k) == ar[i].a + (double)k * ar[i].s, "arange value");
        tn_array_free(r);
    }
    tn_array_free(z); tn_array_free(o); tn_array_free(f); tn_array_free(s); tn_array_free(d); tn_array_free(w);
}

/* Reference splitmix64 at a counter, written independently of the library. */
static uint64_t ref_splitmix_next(uint64_t *state) {   /* the published splitmix64 step */
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static uint64_t ref_splitmix(uint64_t seed, uint64_t i) {
    uint64_t s = seed, state = ref_splitmix_next(&s), z = 0;   /* stream state: first output of the seed */
    for (uint64_t k = 0; k <= i; k++) z = ref_splitmix_next(&state);
    return z;
}

TEST(test_random) {
    int64_t sh[] = {1000, 37};
    tn_array *a = tn_array_rand_uniform(TN_F64, 2, sh, -2, 3, 42), *b = tn_array_rand_uniform(TN_F64, 2, sh, -2, 3, 42);
    tn_array *c = tn_array_rand_uniform(TN_F64, 2, sh, -2, 3, 43);
    CHECK(a && b && c, "%s", tn_last_error());
    CHECK(memcmp(a->data, b->data, tn_array_nbytes(a)) == 0, "same seed, same numbers");
    CHECK(memcmp(a->data, c->data, tn_array_nbytes(a)) != 0, "other seed, other numbers");
    /* neighbouring seeds must not give shifted copies of one stream */
    CHECK(memcmp((const double *)a->data + 1, c->data, tn_array_nbytes(a) - 8) != 0 &&
          memcmp(a->data, (const double *)c->data + 1, tn_array_nbytes(a) - 8) != 0, "seed 43 is not seed 42 shifted");
    const double *x = (const double *)a->data;
    double sum = 0, mn = 1e9, mx = -1e9;
    for (int i = 0; i < 37000; i++) { sum += x[i]; mn = fmin(mn, x[i]); mx = fmax(mx, x[i]); }
    CHECK(fabs(sum / 37000 - 0.5) < 0.03 && mn >= -2 && mx < 3 && mn < -1.99 && mx > 2.99, "uniform stats %g %g %g", sum / 37000, mn, mx);
    for (uint64_t i = 0; i < 50; i++) {
        double u = (double)(ref_splitmix(42, i) >> 11) * 0x1.0p-53;
        CHECK(x[i] == -2 + 5 * u, "documented generator at %llu", (unsigned long long)i);
    }
    tn_array *n = tn_array_rand_normal(TN_F32, 2, sh, 1.5, 2.0, 7);
    const float *y = (const float *)n->data;
    double s1 = 0, s2 = 0;
    for (int i = 0; i < 37000; i++) { s1 += y[i]; s2 += (double)y[i] * y[i]; }
    double mean = s1 / 37000, sd = sqrt(s2 / 37000 - mean * mean);
    CHECK(fabs(mean - 1.5) < 0.05 && fabs(sd - 2.0) < 0.05, "normal stats %g %g", mean, sd);
    for (uint64_t k = 0; k < 10; k++) {
        double u0 = (double)(ref_splitmix(7, 2 * k) >> 11) * 0x1.0p-53, u1 = (double)(ref_splitmix(7, 2 * k + 1) >> 11) * 0x1.0p-53;
        double r = sqrt(-2 * log(1 - u0));
        CHECK(th_close(y[2 * k], 1.5 + 2 * r * cos(6.283185307179586 * u1), 1e-6, 1e-6), "box-muller even %llu", (unsigned long long)k);
        CHECK(th_close(y[2 * k + 1], 1.5 + 2 * r * sin(6.283185307179586 * u1), 1e-6, 1e-6), "box-muller odd %llu", (unsigned long long)k);
    }
    tn_array *ri = tn_array_rand_uniform(TN_I32, 1, (int64_t[]){5000}, 0, 10, 3);
    int hist[10] = {0};
    bool inrange = true;
    for (int i = 0; i < 5000; i++) { int v = ((int32_t *)ri->data)[i]; if (v < 0 || v > 9) inrange = false; else hist[v]++; }
    CHECK(inrange, "int uniform in [0, 10)");
    for (int k = 0; k < 10; k++) CHECK(hist[k] > 400 && hist[k] < 600, "int hist %d: %d", k, hist[k]);
    tn_array_free(a); tn_array_free(b); tn_array_free(c); tn_array_free(n); tn_array_free(ri);
}

TEST(test_views) {
    int64_t sh[] = {4, 5, 6};
    tn_array *a = tn_array_rand_uniform(TN_F32, 3, sh, -1, 1, 5);
    /* transpose */
    tn_array *t = tn_array_transpose(a, (int[]){2, 0, 1});
    CHECK(t && t->shape[0] == 6 && t->shape[1] == 4 && t->shape[2] == 5 && t->data == a->data, "transpose is a view");
    int64_t i3[3] = {0, 0, 0};
    do {
        CHECK(tn_array_get(t, i3) == ref_get(a, (int64_t[]){i3[1], i3[2], i3[0]}), "transpose value");
    } while (next_index(3, t->shape, i3));
    /* slices with every step sign, Python semantics */
    struct { int axis; int64_t start, stop, step; } sl[] = {
        {0, 1, 3, 1}, {1, TN_NONE, TN_NONE, 2}, {2, TN_NONE, TN_NONE, -1}, {2, -2, 0, -2}, {1, 10, -10, -1},
        {0, -100, 100, 3}, {2, 4, 1, 1}, {1, 3, TN_NONE, -2}, {-1, TN_NONE, -4, 1},
        {1, 2, TN_NONE, INT64_MAX}, {2, -1, TN_NONE, INT64_MIN + 1},   /* one element: no overflow in length or stride */
    };
    for (size_t k = 0; k < sizeof sl / sizeof sl[0]; k++) {
        tn_array *s = tn_array_slice(a, sl[k].axis, sl[k].start, sl[k].stop, sl[k].step);
        CHECK(s != NULL, "slice %zu: %s", k, tn_last_error());
        if (!s) continue;
        int ax = sl[k].axis < 0 ? sl[k].axis + 3 : sl[k].axis;
        /* reference: Python's range over resolved indices */
        int64_t n = sh[ax], st = sl[k].step, lo, hi, idx[64], cnt = 0;
        if (st > 0) {
            lo = sl[k].start == TN_NONE ? 0 : sl[k].start < 0 ? sl[k].start + n : sl[k].start;
            hi = sl[k].stop == TN_NONE ? n : sl[k].stop < 0 ? sl[k].stop + n : sl[k].stop;
            lo = lo < 0 ? 0 : lo > n ? n : lo; hi = hi < 0 ? 0 : hi > n ? n : hi;
            for (int64_t i = lo; i < hi; i += st) { idx[cnt++] = i; if (st >= hi - i) break; }
        } else {
            lo = sl[k].start == TN_NONE ? n - 1 : sl[k].start < 0 ? sl[k].start + n : sl[k].start;
            hi = sl[k].stop == TN_NONE ? -1 : sl[k].stop < 0 ? sl[k].stop + n : sl[k].stop;
            lo = lo < -1 ? -1 : lo > n - 1 ? n - 1 : lo; hi = hi < -1 ? -1 : hi > n - 1 ? n - 1 : hi;
            for (int64_t i = lo; i > hi; i += st) { idx[cnt++] = i; if (-st >= i - hi) break; }
        }
        CHECK(s->shape[ax] == cnt, "slice %zu: len %lld want %lld", k, (long long)s->shape[ax], (long long)cnt);
        int64_t j[3] = {0, 0, 0};
        if (tn_array_size(s) > 0) do {
            int64_t src[3] = {j[0], j[1], j[2]};
            src[ax] = idx[j[ax]];
            CHECK(tn_array_get(s, j) == ref_get(a, src), "slice %zu value", k);
        } while (next_index(3, s->shape, j));
        /* a copy of the slice is contiguous with the same values */
        tn_array *c = tn_array_copy(s);
        CHECK(c && tn_array_is_contiguous(c), "copy contiguous");
        int64_t q[3] = {0, 0, 0};
        if (c && tn_array_size(c) > 0) do { CHECK(tn_array_get(c, q) == tn_array_get(s, q), "copy value"); } while (next_index(3, c->shape, q));
        tn_array_free(c);
        tn_array_free(s);
    }
    /* broadcast_to: stride 0 */
    tn_array *row = tn_array_slice(a, 0, 0, 1, 1);   /* (1, 5, 6) */
    tn_array *bc = tn_array_broadcast_to(row, 4, (int64_t[]){2, 3, 5, 6});
    CHECK(bc && bc->strides[0] == 0 && bc->strides[1] == 0, "broadcast strides");
    int64_t b4[4] = {0, 0, 0, 0};
    do {
        CHECK(tn_array_get(bc, b4) == ref_get(a, (int64_t[]){0, b4[2], b4[3]}), "broadcast value");
    } while (next_index(4, bc->shape, b4));
    /* views keep the buffer alive after the base is freed */
    tn_array *v = tn_array_view(a);
    tn_array_free(a);
    CHECK(tn_array_get(v, (int64_t[]){3, 4, 5}) == ref_get(t, (int64_t[]){5, 3, 4}), "view outlives base");
    tn_array_free(t); tn_array_free(row); tn_array_free(bc); tn_array_free(v);
}

TEST(test_reshape) {
    tn_array *a = tn_array_arange(TN_F64, 0, 24, 1);
    tn_array *r = tn_array_reshape(a, 3, (int64_t[]){2, -1, 4});
    CHECK(r && r->shape[1] == 3 && r->data == a->data, "reshape contiguous is a view");
    tn_array *t = tn_array_transpose(r, NULL);     /* (4, 3, 2) */
    tn_array *f = tn_array_reshape(t, 1, (int64_t[]){24});
    CHECK(f && f->data != a->data && tn_array_is_contiguous(f), "reshape of a transpose copies");
    int64_t idx[3] = {0, 0, 0};
    int64_t k = 0;
    do {
        CHECK(tn_array_get(f, &k) == idx[2] * 12 + idx[1] * 4 + idx[0], "copied reshape order");
        k++;
    } while (next_index(3, t->shape, idx));
    /* a step slice reshaped by splitting a dim stays a view */
    tn_array *s = tn_array_slice(a, 0, TN_NONE, TN_NONE, 2);   /* 12 elements, stride 16 */
    tn_array *s2 = tn_array_reshape(s, 2, (int64_t[]){3, 4});
    CHECK(s2 && s2->data == a->data && s2->strides[1] == 16 && s2->strides[0] == 64, "split dim of a strided view");
    CHECK(tn_array_get(s2, (int64_t[]){2, 3}) == 22, "value");
    tn_array *bad = tn_array_reshape(r, 2, (int64_t[]){5, 3});
    CHECK(!bad, "bad reshape");
    CHECK_ERR(TN_ERR_SHAPE, "tn_array_reshape: cannot reshape an array of size 24 (2, 3, 4) into (5, 3)");
    bad = tn_array_reshape(r, 2, (int64_t[]){-1, -1});
    CHECK_ERR(TN_ERR_SHAPE, "one unknown dimension");
    tn_array_free(a); tn_array_free(r); tn_array_free(t); tn_array_free(f); tn_array_free(s); tn_array_free(s2);
}

TEST(test_convert) {
    int64_t sh[] = {7, 9};
    tn_dtype types[] = {TN_BOOL, TN_I32, TN_I64, TN_F16, TN_F32, TN_F64};
    tn_array *src = tn_array_rand_uniform(TN_F64, 2, sh, -300, 300, 9);
    tn_array *srcT = tn_array_transpose(src, NULL);   /* non-contiguous source */
    for (int i = 0; i < 6; i++) for (int j = 0; j < 6; j++) {
        tn_array *x = tn_array_astype(srcT, types[i]);
        tn_array *y = tn_array_astype(x, types[j]);
        CHECK(x && y && y->dtype == types[j], "astype %d %d", i, j);
        if (!x || !y) continue;
        int64_t idx[2] = {0, 0};
        do {
            double v = ref_get(srcT, idx), xv, yv;
            switch (types[i]) {                  /* reference conversion */
            case TN_BOOL: xv = v != 0; break;
            case TN_I32: case TN_I64: xv = trunc(v); break;
            case TN_F16: xv = tn_f16_to_f32(tn_f32_to_f16((float)v)); break;
            case TN_F32: xv = (float)v; break;
            default: xv = v;
            }
            switch (types[j]) {
            case TN_BOOL: yv = xv != 0; break;
            case TN_I32: case TN_I64: yv = trunc(xv); break;
            case TN_F16: yv = tn_f16_to_f32(tn_f32_to_f16((float)xv)); break;
            case TN_F32: yv = (float)xv; break;
            default: yv = xv;
            }
            CHECK(tn_array_get(y, idx) == yv, "%s->%s->%s: %g got %g want %g", tn_dtype_name(srcT->dtype),
                  tn_dtype_name(types[i]), tn_dtype_name(types[j]), v, tn_array_get(y, idx), yv);
        } while (next_index(2, srcT->shape, idx) && !th_cur_failed);
        tn_array_free(x); tn_array_free(y);
    }
    /* copy_to a user buffer: C order of the transposed view */
    float buf[63];
    CHECK(tn_array_copy_to(srcT, TN_F32, buf, sizeof buf) == TN_OK, "copy_to");
    for (int i = 0; i < 9; i++) for (int j = 0; j < 7; j++)
        CHECK(buf[i * 7 + j] == (float)ref_get(src, (int64_t[]){j, i}), "copy_to order");
    CHECK(tn_array_copy_to(srcT, TN_F64, buf, sizeof buf) == TN_ERR_INVALID, "too small");
    CHECK_ERR(TN_ERR_INVALID, "needs 504");
    /* int64 values beyond 2^53 survive int conversions exactly */
    int64_t big[2] = {(1LL << 62) + 1, -(1LL << 60) - 3};
    tn_array *bi = tn_array_from_data(TN_I64, 1, (int64_t[]){2}, big);
    int64_t back[2];
    CHECK(tn_array_copy_to(bi, TN_I64, back, sizeof back) == TN_OK && back[0] == big[0] && back[1] == big[1], "i64 exact");
    /* assign with broadcast and conversion, into a strided view */
    tn_array *dst = tn_array_zeros(TN_I32, 2, (int64_t[]){4, 6});
    tn_array *dv = tn_array_slice(dst, 1, TN_NONE, TN_NONE, 2);       /* (4, 3) */
    double rowv[3] = {1.7, -2.2, 3.9};
    tn_array *rw = tn_array_from_data(TN_F64, 1, (int64_t[]){3}, rowv);
    CHECK(tn_array_assign(dv, rw) == TN_OK, "assign: %s", tn_last_error());
    for (int i = 0; i < 4; i++) for (int j = 0; j < 6; j++)
        CHECK(tn_array_get(dst, (int64_t[]){i, j}) == (j % 2 ? 0 : trunc(rowv[j / 2])), "assign value");
    tn_array *wrong = tn_array_zeros(TN_F32, 1, (int64_t[]){4});
    CHECK(tn_array_assign(dv, wrong) == TN_ERR_SHAPE, "assign shape");
    CHECK_ERR(TN_ERR_SHAPE, "cannot assign src (4,) to dst (4, 3)");
    /* overlapping assign: reversed view of itself */
    tn_array *ov = tn_array_arange(TN_F64, 0, 10, 1), *rev = tn_array_slice(ov, 0, TN_NONE, TN_NONE, -1);
    CHECK(tn_array_assign(ov, rev) == TN_OK, "overlap assign");
    for (int64_t i = 0; i < 10; i++) CHECK(tn_array_get(ov, &i) == 9 - i, "overlap value");
    tn_array_free(src); tn_array_free(srcT); tn_array_free(bi); tn_array_free(dst); tn_array_free(dv);
    tn_array_free(rw); tn_array_free(wrong); tn_array_free(ov); tn_array_free(rev);
}

static void check_print(const tn_array *a, const char *want) {
    char buf[4096];
    int n = tn_array_snprint(a, buf, sizeof buf);
    CHECK(n == (int)strlen(want) && strcmp(buf, want) == 0, "printed\n%s\nwant\n%s", buf, want);
}

TEST(test_print) {
    /* expected strings are what numpy 1.26 prints with str() for the same values */
    float f1[] = {1.2317803f, 1.6187934f, 2.2996776f};
    tn_array *a = tn_array_from_data(TN_F32, 1, (int64_t[]){3}, f1);
    check_print(a, "[1.2317803 1.6187934 2.2996776]");
    float f2[] = {-1.5f, 2.25f, 0.0f, 10.0f};
    tn_array *b = tn_array_from_data(TN_F32, 2, (int64_t[]){2, 2}, f2);
    check_print(b, "[[-1.5   2.25]\n [ 0.   10.  ]]");
    double d1[] = {1.0 / 3.0, 2.0};
    tn_array *c = tn_array_from_data(TN_F64, 1, (int64_t[]){2}, d1);
    check_print(c, "[0.33333333 2.        ]");
    double d2[] = {1e-5, 1.5, NAN, -INFINITY};
    tn_array *d = tn_array_from_data(TN_F64, 1, (int64_t[]){4}, d2);
    check_print(d, "[1.0e-05 1.5e+00     nan    -inf]");
    int32_t i1[] = {1, -10, 100};
    tn_array *e = tn_array_from_data(TN_I32, 1, (int64_t[]){3}, i1);
    check_print(e, "[  1 -10 100]");
    uint8_t b1[] = {1, 0, 1};
    tn_array *f = tn_array_from_data(TN_BOOL, 1, (int64_t[]){3}, b1);
    check_print(f, "[ True False  True]");
    tn_array *g = tn_array_arange(TN_I64, 0, 2000, 1);
    check_print(g, "[   0    1    2 ... 1997 1998 1999]");
    tn_array *h = tn_array_arange(TN_F64, 0, 2000, 1);
    check_print(h, "[0.000e+00 1.000e+00 2.000e+00 ... 1.997e+03 1.998e+03 1.999e+03]");
    tn_array *i = tn_array_arange(TN_I32, 0, 30, 1);
    check_print(i, "[ 0  1  2  3  4  5  6  7  8  9 10 11 12 13 14 15 16 17 18 19 20 21 22 23\n 24 25 26 27 28 29]");
    tn_array *j0 = tn_array_arange(TN_I32, 0, 24, 1), *j = tn_array_reshape(j0, 3, (int64_t[]){2, 3, 4});
    check_print(j, "[[[ 0  1  2  3]\n  [ 4  5  6  7]\n  [ 8  9 10 11]]\n\n [[12 13 14 15]\n  [16 17 18 19]\n  [20 21 22 23]]]");
    tn_array *k0 = tn_array_arange(TN_I32, 0, 10000, 1), *k = tn_array_reshape(k0, 2, (int64_t[]){100, 100});
    check_print(k, "[[   0    1    2 ...   97   98   99]\n [ 100  101  102 ...  197  198  199]\n [ 200  201  202 ...  297  298  299]\n"
                   " ...\n [9700 9701 9702 ... 9797 9798 9799]\n [9800 9801 9802 ... 9897 9898 9899]\n [9900 9901 9902 ... 9997 9998 9999]]");
    tn_array *s = tn_array_scalar(TN_F64, 1.0);
    check_print(s, "1.0");
    tn_array *em = tn_array_zeros(TN_F32, 2, (int64_t[]){2, 0});
    check_print(em, "[]");
    double d3[] = {1e8, 1.0};
    tn_array *l = tn_array_from_data(TN_F64, 1, (int64_t[]){2}, d3);
    check_print(l, "[1.e+08 1.e+00]");
    uint16_t h1[] = {tn_f32_to_f16(0.1f), tn_f32_to_f16(-2.5f)};
    tn_array *m = tn_array_from_data(TN_F16, 1, (int64_t[]){2}, h1);
    check_print(m, "[ 0.1 -2.5]");
    FILE *tmp = tmpfile();
    CHECK(tn_array_print(a, tmp) == TN_OK, "print");
    rewind(tmp);
    char line[64] = {0};
    CHECK(fgets(line, sizeof line, tmp) && !strcmp(line, "[1.2317803 1.6187934 2.2996776]\n"), "print to FILE: %s", line);
    fclose(tmp);
    tn_array_free(a); tn_array_free(b); tn_array_free(c); tn_array_free(d); tn_array_free(e); tn_array_free(f);
    tn_array_free(g); tn_array_free(h); tn_array_free(i); tn_array_free(j0); tn_array_free(j); tn_array_free(k0);
    tn_array_free(k); tn_array_free(s); tn_array_free(em); tn_array_free(l); tn_array_free(m);
}

TEST(test_stale) {
    tn_array *a = tn_array_arange(TN_F32, 0, 4, 1);
    uint64_t live = 3;
    tn_array borrowed = *a;                  /* what a function hands out */
    borrowed.live_gen = &live;
    borrowed.gen = 3;
    CHECK(tn_array_check(&borrowed) == TN_OK, "fresh borrowed array");
    CHECK(tn_array_get(&borrowed, (int64_t[]){2}) == 2, "read fresh");
    live = 4;
    CHECK(tn_array_check(&borrowed) == TN_ERR_STALE, "stale");
    CHECK_ERR(TN_ERR_STALE, "call 3");
    CHECK(strstr(tn_last_error(), "now call 4") != NULL, "message names both calls: %s", tn_last_error());
#if TN_DEBUG_BORROW
    char buf[64];
    CHECK(tn_array_snprint(&borrowed, buf, sizeof buf) < 0, "print of stale refused");
    CHECK_ERR(TN_ERR_STALE, "tn_array_snprint: stale borrowed array");
#endif
    tn_array_free(&borrowed);                /* borrowed: no-op */
    CHECK(tn_array_get(a, (int64_t[]){3}) == 3, "buffer still alive");
    tn_array_free(a);
}

TEST(test_errors) {
    CHECK(!tn_array_zeros(TN_F32, 2, (int64_t[]){3, -1}), "negative dim");
    CHECK_ERR(TN_ERR_SHAPE, "tn_array_zeros: negative dimension in shape (3, ?)");
    CHECK(!tn_array_empty(TN_F32, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}), "too many dims");
    CHECK_ERR(TN_ERR_INVALID, "tn_array_empty: ndim 9");
    CHECK(!tn_array_ones((tn_dtype)42, 1, (int64_t[]){3}), "bad dtype");
    CHECK_ERR(TN_ERR_DTYPE, "tn_array_ones: invalid dtype");
    tn_array *a = tn_array_zeros(TN_F32, 2, (int64_t[]){3, 4});
    CHECK(!tn_array_slice(a, 2, 0, 1, 1), "axis");
    CHECK_ERR(TN_ERR_AXIS, "tn_array_slice: axis 2 is out of range for an array of shape (3, 4)");
    CHECK(!tn_array_slice(a, 0, 0, 1, 0), "step 0");
    CHECK_ERR(TN_ERR_INVALID, "step cannot be zero");
    CHECK(!tn_array_transpose(a, (int[]){0, 0}), "perm");
    CHECK_ERR(TN_ERR_AXIS, "repeated");
    CHECK(!tn_array_broadcast_to(a, 2, (int64_t[]){3, 5}), "broadcast");
    CHECK_ERR(TN_ERR_SHAPE, "cannot broadcast an array of shape (3, 4) to (3, 5)");
    CHECK(isnan(tn_array_get(a, (int64_t[]){3, 0})), "oob get");
    CHECK_ERR(TN_ERR_INVALID, "index 3 is out of bounds for axis 0");
    CHECK(!tn_array_arange(TN_F32, 0, 1, 0), "arange step 0");
    CHECK_ERR(TN_ERR_INVALID, "tn_array_arange: step is 0");
    CHECK(!tn_array_from_data(TN_F32, 1, (int64_t[]){2}, NULL), "null data");
    CHECK_ERR(TN_ERR_NULL, "tn_array_from_data: data is NULL");
    tn_array dev = *a;                       /* a device array with no back end loaded */
    dev.device = 0;
    dev.base = NULL;
    CHECK(isnan(tn_array_get(&dev, (int64_t[]){0, 0})), "device get without back end");
    CHECK_ERR(TN_ERR_DEVICE, "no device back end");
    tn_array_free(NULL);
    tn_array_free(a);
}

/* A fake device back end: "device memory" is host memory tagged by the ops. */
static int fake_copies;
static void *fake_alloc(int device, size_t bytes) { (void)device; return malloc(bytes); }
static void fake_free(int device, void *p) { (void)device; free(p); }
static tn_result fake_copy(void *dst, int dd, const void *src, int sd, size_t n) {
    (void)dd; (void)sd; fake_copies++; memcpy(dst, src, n); return TN_OK;
}

TEST(test_device_arrays) {
    static const tn_device_ops ops = { fake_alloc, fake_free, fake_copy, NULL, NULL, NULL, NULL, NULL, NULL };
    tn__set_device_ops(&ops);
    int64_t sh[] = {5, 6};
    tn_array *h = tn_array_rand_uniform(TN_F32, 2, sh, -1, 1, 11);
    tn_array *d = tn__array_alloc(TN_F32, 2, sh, 0);
    CHECK(d && d->device == 0, "device alloc");
    CHECK(tn_array_assign(d, h) == TN_OK, "upload: %s", tn_last_error());
    tn_array *dt = tn_array_transpose(d, NULL);
    fake_copies = 0;
    tn_array *back = tn_array_to_host(dt);
    CHECK(back && back->device == TN_HOST && fake_copies == 1, "download of a strided device view");
    int64_t idx[2] = {0, 0};
    do { CHECK(tn_array_get(back, idx) == ref_get(h, (int64_t[]){idx[1], idx[0]}), "device value"); } while (next_index(2, back->shape, idx));
    CHECK(tn_array_get(dt, (int64_t[]){4, 3}) == ref_get(h, (int64_t[]){3, 4}), "get on device");
    char b1[512], b2[512];
    tn_array_snprint(h, b1, sizeof b1);
    tn_array_snprint(d, b2, sizeof b2);
    CHECK(!strcmp(b1, b2), "print of a device array");
    tn_array_free(h); tn_array_free(d); tn_array_free(dt); tn_array_free(back);
    tn__set_device_ops(NULL);
}

/* Host buffers and the back end's DMA (tn__buffer_host_direct): a range of
   64 KiB .. 1 GiB is registered the second time a copy reads its buffer
   (the first stages), once, for the whole buffer (a wrap: the range read),
   and unregistered when the last view is freed; smaller ranges, refused
   registrations and memory already page-locked by its owner as the back
   end reports it. */
static int fake_regs, fake_unregs, fake_refuse, fake_elsewhere;
static void *fake_reg_p;
static size_t fake_reg_n;
static bool fake_register(int device, void *p, size_t n, bool *elsewhere) {
    (void)device;
    fake_regs++;
    fake_reg_p = p; fake_reg_n = n;
    *elsewhere = fake_elsewhere;
    return !fake_refuse;
}
static void fake_unregister(int device, void *p) { (void)device; CHECK(p == fake_reg_p, "unregisters what it registered"); fake_unregs++; }

TEST(test_host_register) {
    static const tn_device_ops ops = { fake_alloc, fake_free, fake_copy, NULL, NULL, NULL, fake_register, fake_unregister, NULL };
    tn__set_device_ops(&ops);
    int64_t big[] = { 256, 128 }, tiny[] = { 16, 16 };     /* 128 KiB and 1 KiB of float32 */
    tn_array *a = tn_array_zeros(TN_F32, 2, big), *t = tn_array_zeros(TN_F32, 2, tiny);
    size_t na = tn_array_nbytes(a);
    fake_regs = fake_unregs = 0;
    CHECK(!tn__buffer_host_direct(a->base, 0, a->data, na) && fake_regs == 0, "the first copy stages");
    CHECK(tn__buffer_host_direct(a->base, 0, a->data, na) && fake_regs == 1, "the second registers");
    CHECK(fake_reg_p == a->data && fake_reg_n >= na, "the whole buffer: %p %zu", fake_reg_p, fake_reg_n);
    tn_array *v = tn_array_slice(a, 0, 100, 200, 1);
    CHECK(tn__buffer_host_direct(v->base, 0, v->data, tn_array_nbytes(v)) && fake_regs == 1, "a view of it: direct, no new registration");
    CHECK(!tn__buffer_host_direct(a->base, 0, (char *)a->data + 64, na), "a range past the registered one stages");
    CHECK(!tn__buffer_host_direct(t->base, 0, t->data, tn_array_nbytes(t)) && !tn__buffer_host_direct(t->base, 0, t->data, tn_array_nbytes(t)) &&
          fake_regs == 1, "1 KiB: never registered");
    CHECK(!tn__buffer_host_direct(NULL, 0, a->data, na), "no buffer");
    tn_array_free(a);
    CHECK(fake_unregs == 0, "a view still holds the buffer");
    tn_array_free(v);
    CHECK(fake_unregs == 1, "the last view freed: unregistered (%d)", fake_unregs);
    /* a wrap: the range read is registered */
    float *mem = (float *)calloc(70000, sizeof(float));
    tn_array *w = tn_array_wrap(TN_F32, 1, (int64_t[]){ 70000 }, NULL, mem);
    tn_array *wv = tn_array_slice(w, 0, 1000, 70000, 1);
    size_t nwv = tn_array_nbytes(wv);
    CHECK(!tn__buffer_host_direct(wv->base, 0, wv->data, nwv) && tn__buffer_host_direct(wv->base, 0, wv->data, nwv), "wrap: second copy");
    CHECK(fake_reg_p == (void *)(mem + 1000) && fake_reg_n == nwv, "wrap: the bytes read are registered");
    CHECK(!tn__buffer_host_direct(w->base, 0, w->data, tn_array_nbytes(w)), "wrap: bytes outside the registered range stage");
    tn_array_free(wv); tn_array_free(w);
    CHECK(fake_unregs == 2, "wrap freed: unregistered");
    /* refused: stages for good, never unregistered; page-locked by its owner: direct, never unregistered */
    for (int k = 0; k < 2; k++) {
        fake_refuse = k == 0; fake_elsewhere = k == 1;
        tn_array *b = tn_array_zeros(TN_F32, 2, big);
        bool d1 = tn__buffer_host_direct(b->base, 0, b->data, na), d2 = tn__buffer_host_direct(b->base, 0, b->data, na),
             d3 = tn__buffer_host_direct(b->base, 0, b->data, na);
        CHECK(!d1 && d2 == (k == 1) && d3 == (k == 1), "%s: %d %d %d", k ? "owner's" : "refused", d1, d2, d3);
        int before = fake_unregs;
        tn_array_free(b);
        CHECK(fake_unregs == before, "%s: not unregistered", k ? "owner's" : "refused");
    }
    fake_refuse = fake_elsewhere = 0;
    free(mem);
    tn_array_free(t);
    tn__set_device_ops(NULL);
}

TEST(test_large_parallel) {
    /* big enough for the threaded paths of random fill and strided copy */
    int64_t sh[] = {600, 500};
    tn_array *a = tn_array_rand_uniform(TN_F64, 2, sh, 0, 1, 99);
    const double *x = (const double *)a->data;
    for (uint64_t i = 0; i < 300000; i += 7919)
        CHECK(x[i] == (double)(ref_splitmix(99, i) >> 11) * 0x1.0p-53, "element %llu independent of threads", (unsigned long long)i);
    tn_array *t = tn_array_transpose(a, NULL);
    tn_array *c = tn_array_astype(t, TN_F32);
    CHECK(c && c->shape[0] == 500 && c->shape[1] == 600, "shape");
    int bad = 0;
    const float *y = c ? (const float *)c->data : NULL;
    for (int64_t i = 0; y && i < 500; i++)
        for (int64_t j = 0; j < 600; j++)
            if (y[i * 600 + j] != (float)x[j * 500 + i]) bad++;
    CHECK(bad == 0, "%d mismatches in a threaded transposed copy", bad);
    /* a contiguous copy is one long row, split over threads in pieces (the
       last one shorter): every element converted once, in its place */
    tn_array *cc = tn_array_astype(a, TN_F32);
    bad = 0;
    y = cc ? (const float *)cc->data : NULL;
    for (int64_t i = 0; y && i < 300000; i++)
        if (y[i] != (float)x[i]) bad++;
    CHECK(cc && bad == 0, "%d mismatches in a threaded contiguous copy", bad);
    /* long strided rows: 3 rows of every other element of 280003, reversed (140002) */
    int64_t sh3[] = { 3, 280003 };
    tn_array *l = tn_array_rand_uniform(TN_F64, 2, sh3, -1, 1, 98);
    tn_array *lv = l ? tn_array_slice(l, 1, 280002, TN_NONE, -2) : NULL;
    tn_array *lc = lv ? tn_array_copy(lv) : NULL;
    CHECK(lc && lc->ndim == 2 && lc->shape[0] == 3 && lc->shape[1] == 140002, "shape of the strided copy");
    bad = 0;
    const double *lx = l ? (const double *)l->data : NULL, *ly = lc ? (const double *)lc->data : NULL;
    for (int64_t i = 0; ly && i < 3; i++)
        for (int64_t j = 0; j < 140002; j++)
            if (ly[i * 140002 + j] != lx[i * 280003 + 280002 - 2 * j]) bad++;
    CHECK(bad == 0, "%d mismatches in a threaded copy of long strided rows", bad);
    tn_array_free(a); tn_array_free(t); tn_array_free(c); tn_array_free(cc);
    tn_array_free(l); tn_array_free(lv); tn_array_free(lc);
}

/* Empty bool arrays hold valid bools (false): reading one is defined. */
TEST(test_empty_bool_is_false) {
    for (int round = 0; round < 3; round++) {
        tn_array *junk = tn_array_full(TN_I64, 1, (int64_t[]){ 4096 }, -1.0);   /* leaves 0xff bytes to reuse */
        tn_array_free(junk);
        tn_array *b = tn_array_empty(TN_BOOL, 2, (int64_t[]){ 64, 64 });
        CHECK(b != NULL, "%s", tn_last_error());
        if (!b) return;
        const unsigned char *p = (const unsigned char *)b->data;
        int bad = 0;
        for (int64_t i = 0; i < 4096; i++) bad += p[i] != 0;
        CHECK(bad == 0, "%d bytes are not false", bad);
        CHECK(tn_array_get(b, (int64_t[]){ 63, 63 }) == 0, "reads as false");
        tn_array_free(b);
    }
}

int main(void) {
    TH_RUN(test_empty_bool_is_false);
    TH_RUN(test_create);
    TH_RUN(test_random);
    TH_RUN(test_views);
    TH_RUN(test_reshape);
    TH_RUN(test_convert);
    TH_RUN(test_print);
    TH_RUN(test_stale);
    TH_RUN(test_errors);
    TH_RUN(test_device_arrays);
    TH_RUN(test_host_register);
    TH_RUN(test_large_parallel);
    TH_END();
}
