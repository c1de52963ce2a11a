/* tests/test_randomstate.c - tn_random_state against NumPy's legacy RandomState,
   bit for bit: the MT19937 reference outputs, then NumPy's own draws
   (tests/randomstate_vectors.h, written by tests/randomstate_vectors.py). */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
#include "randomstate_vectors.h"

static tn_random_state *state_of(const rs_case *c) {
    return c->nkey ? tn_random_state_new_array(c->key, c->nkey) : tn_random_state_new(c->key[0]);
}

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* The reference generator's outputs (Matsumoto and Nishimura's mt19937ar.out,
   and the 10000th output of a default-seeded std::mt19937, fixed by C++11). */
TEST(test_mt19937_reference) {
    tn_random_state *rs = tn_random_state_new(5489);
    static const uint32_t first[5] = { 3499211612u, 581869302u, 3890346734u, 3586334585u, 545404204u };
    for (int i = 0; i < 5; i++) { uint32_t v = tn_rs_uint32(rs); CHECK(v == first[i], "seed 5489 output %d: %u, want %u", i, v, first[i]); }
    uint32_t v = 0;
    for (int i = 5; i < 10000; i++) v = tn_rs_uint32(rs);
    CHECK(v == 4123659995u, "10000th output %u", v);
    tn_random_state_free(rs);
    static const uint32_t key[4] = { 0x123, 0x234, 0x345, 0x456 };
    static const uint32_t arr[5] = { 1067595299u, 955945823u, 477289528u, 4107218783u, 4228976476u };
    rs = tn_random_state_new_array(key, 4);
    CHECK(rs, "%s", tn_last_error());
    for (int i = 0; i < 5 && rs; i++) { uint32_t w = tn_rs_uint32(rs); CHECK(w == arr[i], "init_by_array output %d: %u, want %u", i, w, arr[i]); }
    tn_random_state_free(rs);
}

static tn_array *draw(tn_random_state *rs, const rs_case *c, tn_dtype t) {
    int64_t n = c->n;
    switch (c->kind) {
    case 'r': return tn_rs_rand(rs, t, 1, &n);
    case 'n': return tn_rs_randn(rs, t, 1, &n);
    case 'u': return tn_rs_uniform(rs, t, 1, &n, c->p0, c->p1);
    case 'g': return tn_rs_normal(rs, t, 1, &n, c->p0, c->p1);
    case 'i': return tn_rs_randint(rs, TN_I64, 1, &n, c->lo, c->hi);
    default: return tn_rs_randint(rs, TN_I32, 1, &n, c->lo, c->hi);
    }
}

/* Every case of NumPy's table, float64 and ints exact; float32 is the float64 value rounded. */
TEST(test_numpy_cases) {
    int nc = (int)(sizeof rs_cases / sizeof rs_cases[0]);
    CHECK(nc > 40, "only %d cases", nc);
    for (int k = 0; k < nc; k++) {
        const rs_case *c = &rs_cases[k];
        bool is_int = c->kind == 'i' || c->kind == 'j';
        tn_random_state *rs = state_of(c);
        tn_array *a = draw(rs, c, TN_F64);
        CHECK(a, "%s: %s", c->what, tn_last_error());
        if (!a) { tn_random_state_free(rs); continue; }
        CHECK(a->dtype == (c->kind == 'j' ? TN_I32 : is_int ? TN_I64 : TN_F64), "%s: dtype", c->what);
        for (int j = 0; j < c->nchk; j++) {
            int64_t at = c->at[j];
            if (c->kind == 'i') {
                int64_t got = ((const int64_t *)a->data)[at];
                CHECK(got == c->i[j], "%s[%lld] = %lld, NumPy %lld", c->what, (long long)at, (long long)got, (long long)c->i[j]);
            } else if (c->kind == 'j') {
                int64_t got = ((const int32_t *)a->data)[at];
                CHECK(got == c->i[j], "%s[%lld] = %lld, NumPy %lld", c->what, (long long)at, (long long)got, (long long)c->i[j]);
            } else {
                double got = ((const double *)a->data)[at];
                CHECK(same_bits(got, c->f[j]), "%s[%lld] = %.17g, NumPy %.17g", c->what, (long long)at, got, c->f[j]);
            }
        }
        tn_array_free(a);
        tn_random_state_free(rs);
        if (is_int) continue;
        /* float32: the same draws, each float64 value rounded once */
        rs = state_of(c);
        tn_array *b = draw(rs, c, TN_F32);
        CHECK(b && b->dtype == TN_F32, "%s float32: %s", c->what, tn_last_error());
        for (int j = 0; b && j < c->nchk; j++) {
            float got = ((const float *)b->data)[c->at[j]];
            CHECK(got == (float)c->f[j], "%s float32 [%lld] = %.9g, want %.9g", c->what, (long long)c->at[j], got, (float)c->f[j]);
        }
        tn_array_free(b);
        tn_random_state_free(rs);
    }
}

/* One state through a sequence of calls: an odd randn leaves its pair's second value for the next. */
TEST(test_sequence) {
    tn_random_state *rs = tn_random_state_new(7);
    int ns = (int)(sizeof rs_seq / sizeof rs_seq[0]);
    for (int s = 0; s < ns; s++) {
        int64_t n = rs_seq[s].n;
        tn_array *a = NULL;
        switch (rs_seq[s].kind) {
        case 'r': a = tn_rs_rand(rs, TN_F64, 1, &n); break;
        case 'n': a = tn_rs_randn(rs, TN_F64, 1, &n); break;
        case 'u': a = tn_rs_uniform(rs, TN_F64, 1, &n, -1, 1); break;
        default: a = tn_rs_randint(rs, TN_I64, 1, &n, 0, s == 3 ? 10 : (int64_t)1 << 40); break;
        }
        CHECK(a, "step %d: %s", s, tn_last_error());
        for (int64_t i = 0; a && i < n; i++) {
            double got = tn_array_get(a, &i);
            CHECK(same_bits(got, rs_seq[s].v[i]), "step %d (%c) [%lld] = %.17g, NumPy %.17g", s, rs_seq[s].kind, (long long)i, got, rs_seq[s].v[i]);
        }
        tn_array_free(a);
    }
    tn_random_state_free(rs);
}

/* A shape draws in C order: rand(3, 4) is rand(12) reshaped; randn likewise; and the dtype default is float64. */
TEST(test_shapes) {
    tn_random_state *r1 = tn_random_state_new(123), *r2 = tn_random_state_new(123);
    int64_t sh[2] = { 3, 4 }, n = 12;
    tn_array *a = tn_rs_randn(r1, TN_DTYPE_NONE, 2, sh), *b = tn_rs_randn(r2, TN_F64, 1, &n);
    CHECK(a && b && a->dtype == TN_F64 && a->ndim == 2, "randn(3, 4): %s", tn_last_error());
    for (int64_t i = 0; a && b && i < 12; i++) {
        int64_t ix[2] = { i / 4, i % 4 };
        CHECK(same_bits(tn_array_get(a, ix), tn_array_get(b, &i)), "element %lld", (long long)i);
    }
    tn_array_free(a); tn_array_free(b);
    /* a 0-d draw takes one value; an empty one takes none */
    tn_array *s = tn_rs_rand(r1, TN_F64, 0, NULL), *e = tn_rs_rand(r1, TN_F64, 1, (int64_t[]){ 0 });
    tn_array *t = tn_rs_rand(r2, TN_F64, 1, (int64_t[]){ 2 });
    CHECK(s && e && t && tn_array_size(e) == 0, "0-d and empty: %s", tn_last_error());
    if (s && t) { int64_t i0 = 0; CHECK(tn_array_get(s, NULL) == tn_array_get(t, &i0), "0-d"); }
    tn_array_free(s); tn_array_free(e); tn_array_free(t);
    tn_random_state_free(r1); tn_random_state_free(r2);
}

/* The seed's check1: exp(RandomState(22).rand(230400).astype(float32)), as NumPy and as Theano's tutorial prints. */
TEST(test_check1_values) {
    tn_random_state *rs = tn_random_state_new(22);
    int64_t n = 230400;
    tn_array *x = tn_rs_rand(rs, TN_F32, 1, &n);
    CHECK(x, "%s", tn_last_error());
    if (!x) { tn_random_state_free(rs); return; }
    const float *xp = (const float *)x->data;
    char line[128];
    int at[6] = { 0, 1, 2, 230397, 230398, 230399 };
    for (int j = 0; j < 6; j++) {
        CHECK(xp[at[j]] == rs_check1_x[j], "x[%d] = %.9g, NumPy %.9g", at[j], xp[at[j]], rs_check1_x[j]);
        float e = expf(xp[at[j]]);
        CHECK(fabsf(e - rs_check1_exp[j]) <= 2.4e-7f * rs_check1_exp[j], "exp(x[%d]) = %.9g, NumPy %.9g", at[j], e, rs_check1_exp[j]);
    }
    snprintf(line, sizeof line, "%.8f %.8f %.8f ... %.8f %.8f %.8f", expf(xp[0]), expf(xp[1]), expf(xp[2]),
             expf(xp[230397]), expf(xp[230398]), expf(xp[230399]));
    CHECK(!strcmp(line, "1.23178029 1.61879337 1.52278066 ... 2.20771813 2.29967761 1.62323284"), "printed %s", line);
    tn_array_free(x);
    tn_random_state_free(rs);
}

TEST(test_errors) {
    int64_t n = 4;
    tn_random_state *rs = tn_random_state_new(1);
    CHECK(!tn_rs_rand(NULL, TN_F64, 1, &n), "NULL state");
    CHECK_ERR(TN_ERR_NULL, "tn_rs_rand: rs");
    CHECK(!tn_rs_randn(rs, TN_I32, 1, &n), "int randn");
    CHECK_ERR(TN_ERR_DTYPE, "tn_rs_randn: dtype int32");
    CHECK(!tn_rs_randint(rs, TN_F32, 1, &n, 0, 3), "float randint");
    CHECK_ERR(TN_ERR_DTYPE, "tn_rs_randint: dtype float32");
    CHECK(!tn_rs_randint(rs, TN_I64, 1, &n, 3, 3), "empty range");
    CHECK_ERR(TN_ERR_INVALID, "low >= high (3 >= 3)");
    CHECK(!tn_rs_randint(rs, TN_I32, 1, &n, 0, (int64_t)1 << 32), "int32 bounds");
    CHECK_ERR(TN_ERR_INVALID, "out of bounds for int32");
    CHECK(!tn_rs_uniform(rs, TN_F64, 1, &n, -1e308, 1e308), "infinite range");
    CHECK_ERR(TN_ERR_INVALID, "tn_rs_uniform: parameters");
    CHECK(!tn_rs_uniform(rs, TN_F64, 1, &n, 0, NAN), "NaN bound");
    CHECK_ERR(TN_ERR_INVALID, "tn_rs_uniform");
    CHECK(!tn_rs_normal(rs, TN_F64, 1, &n, 0, -1), "negative scale");
    CHECK_ERR(TN_ERR_INVALID, "the scale >= 0");
    CHECK(!tn_rs_rand(rs, TN_F64, 1, (int64_t[]){ -2 }), "negative dim");
    CHECK_ERR(TN_ERR_SHAPE, "tn_rs_rand");
    CHECK(!tn_random_state_new_array(NULL, 3), "NULL key");
    CHECK_ERR(TN_ERR_NULL, "tn_random_state_new_array: key");
    CHECK(!tn_random_state_new_array((const uint32_t[]){ 1 }, 0), "empty key");
    CHECK_ERR(TN_ERR_INVALID, "non-empty");
    /* a failed call draws nothing: the state goes on as if it had not been made */
    tn_random_state *ref = tn_random_state_new(1);
    CHECK(tn_rs_uint32(rs) == tn_rs_uint32(ref), "failed calls consumed draws");
    tn_random_state_free(ref);
    tn_random_state_free(rs);
    tn_random_state_free(NULL);
}

int main(void) {
    TH_RUN(test_mt19937_reference);
    TH_RUN(test_numpy_cases);
    TH_RUN(test_sequence);
    TH_RUN(test_shapes);
    TH_RUN(test_check1_values);
    TH_RUN(test_errors);
    TH_END();
}
