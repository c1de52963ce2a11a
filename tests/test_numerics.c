/* tests/test_numerics.c - the elementwise ops where NumPy's edge cases are
   subtle, against NumPy 1.24 itself: float and int floor division and mod,
   clip with crossed and NaN bounds, minimum/maximum with NaN and signed
   zeros (tests/numpy_vectors.h, written by tests/numpy_vectors.py from
   NumPy's own results; bit for bit, the sign of a zero included). Each runs
   on the CPU engine, through a compiled function, and through one whose
   constant inputs the optimizer folds. Then the deliberate differences that
   README's "Numerics" lists: int pow with a negative exponent, the sign of
   minimum(+0, -0) in float16, dtype promotion; and the gradients of mod and
   clip under the new definitions. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"
#include "numpy_vectors.h"
#include <stdint.h>

#define NROWS(t) ((int64_t)(sizeof t / sizeof t[0]))

/* Equal bit for bit, any NaN meeting any NaN. */
static bool same(double got, double want) {
    if (isnan(want)) return isnan(got);
    return got == want && !signbit(got) == !signbit(want);
}

/* A table of NumPy's: rows of 4, floats or ints. */
typedef struct table { const double (*f)[4]; const int64_t (*i)[4]; int64_t rows; } table;
#define FTAB(x) ((table){ x, NULL, NROWS(x) })
#define ITAB(x) ((table){ NULL, x, NROWS(x) })

/* Column k of a table as an array of dtype t. */
static tn_array *column(table tb, int k, tn_dtype t) {
    int64_t n = tb.rows, *iv = (int64_t *)malloc((size_t)n * sizeof *iv);
    double *fv = (double *)malloc((size_t)n * sizeof *fv);
    for (int64_t r = 0; r < n; r++) {
        if (tb.f) fv[r] = tb.f[r][k];
        else iv[r] = tb.i[r][k];
    }
    tn_array *a64 = tb.f ? tn_array_from_data(TN_F64, 1, &n, fv) : tn_array_from_data(TN_I64, 1, &n, iv);
    tn_array *a = tn_array_astype(a64, t);
    tn_array_free(a64);
    free(iv);
    free(fv);
    return a;
}

static void cell_text(table tb, int64_t r, int k, char *buf, size_t cap) {
    tb.f ? snprintf(buf, cap, "%.17g", tb.f[r][k]) : snprintf(buf, cap, "%lld", (long long)tb.i[r][k]);
}

/* The three ways an op runs on the CPU. */
enum { VIA_ENGINE, VIA_FUNCTION, VIA_FOLDED, VIA_COUNT };
static const char *via_name[VIA_COUNT] = { "engine", "function", "folded constants" };

static tn_var *apply(int op, int n, tn_var *const *v) {
    switch (op) {
    case TN_OP_INT_DIV: return tn_int_div(v[0], v[1]);
    case TN_OP_MOD: return tn_mod(v[0], v[1]);
    case TN_OP_POW: return tn_pow(v[0], v[1]);
    case TN_OP_MINIMUM: return tn_minimum(v[0], v[1]);
    case TN_OP_MAXIMUM: return tn_maximum(v[0], v[1]);
    case TN_OP_CLIP: return n == 3 ? tn_clip(v[0], v[1], v[2]) : NULL;
    default: return NULL;
    }
}

/* True when the compiled function computes nothing: its output was folded. */
static bool folded(const tn_func *f) {
    FILE *fp = tmpfile();
    if (!fp) return false;
    tn_print_toposort(f, fp);
    rewind(fp);
    char buf[512] = { 0 };
    size_t len = fread(buf, 1, sizeof buf - 1, fp);
    fclose(fp);
    buf[len] = 0;
    return strstr(buf, "Elemwise") == NULL;
}

/* op (arity n, operands and result of dtype t) over in[]: the result, or NULL. */
static tn_array *run_op(int op, int n, tn_dtype t, tn_array *const *in, int via) {
    tn_array *out = NULL;
    if (via == VIA_ENGINE) {
        tn_dtype in_dt[3] = { t, t, t }, odt = t;
        tn_ew_instr ins = { .op = (int16_t)op, .dtype = (int8_t)t, .in_dtype = (int8_t)t, .a = 0, .b = n > 1 ? 1 : -1, .c = n > 2 ? 2 : -1 };
        int32_t oreg = n;
        tn_ew_program prog = { n, in_dt, 1, &ins, 1, &oreg, &odt, NULL, NULL };
        out = tn_array_empty(t, 1, in[0]->shape);
        if (tn__cpu_ew_run(&prog, in, &out) != TN_OK) { tn_array_free(out); out = NULL; }
        return out;
    }
    tn_graph *g = tn_graph_new();
    tn_var *v[3];
    for (int i = 0; i < n; i++)
        v[i] = via == VIA_FOLDED ? tn_constant(g, in[i]) : tn_input(g, i == 0 ? "a" : i == 1 ? "b" : "c", t, 1, in[0]->shape, NULL);
    tn_var *y = apply(op, n, v);
    tn_func *f = y ? tn_function(g, &(tn_func_desc){ .n_inputs = via == VIA_FOLDED ? 0 : n, .inputs = v, .n_outputs = 1,
                                                     .outputs = &y, .mode = TN_MODE_FAST_RUN }) : NULL;
    CHECK(f != NULL, "%s: %s", tn__ew_info(op)->name, tn_last_error());
    if (f && via == VIA_FOLDED) CHECK(folded(f), "%s of constants: the optimizer did not fold it", tn__ew_info(op)->name);
    if (f && tn_call(f, in, &out) != TN_OK) { tn_array_free(out); out = NULL; }
    tn_function_free(f);
    tn_graph_free(g);
    return out;
}

/* Runs op over the columns 0..n-1 of a table in dtype t, every way; the
   result column `want` must match exactly (floats bit for bit). */
static int check_table(int op, int n, tn_dtype t, table tb, int want, const char *what) {
    tn_array *in[3] = { NULL, NULL, NULL };
    for (int i = 0; i < n; i++) in[i] = column(tb, i, t);
    int bad = 0;
    int64_t rows = tb.rows;
    double *gf = (double *)malloc((size_t)rows * sizeof *gf);
    int64_t *gi = (int64_t *)malloc((size_t)rows * sizeof *gi);
    for (int via = 0; via < VIA_COUNT; via++) {
        tn_array *out = run_op(op, n, t, in, via);
        CHECK(out != NULL, "%s %s %s: %s", what, tn_dtype_name(t), via_name[via], tn_last_error());
        if (!out) { bad++; continue; }
        if (tb.f) tn_array_copy_to(out, TN_F64, gf, (size_t)rows * sizeof *gf);
        else tn_array_copy_to(out, TN_I64, gi, (size_t)rows * sizeof *gi);
        for (int64_t r = 0; r < rows; r++) {
            if (tb.f ? same(gf[r], tb.f[r][want]) : gi[r] == tb.i[r][want]) continue;
            char args[96] = "", c[32], w[32];
            for (int i = 0; i < n; i++) {
                cell_text(tb, r, i, c, sizeof c);
                size_t len = strlen(args);
                snprintf(args + len, sizeof args - len, "%s%s", i ? ", " : "", c);
            }
            cell_text(tb, r, want, w, sizeof w);
            if (bad++ < 8)
                fprintf(stderr, "  %s %s %s: row %lld (%s): got %.17g, NumPy %s\n", what, tn_dtype_name(t), via_name[via],
                        (long long)r, args, tb.f ? gf[r] : (double)gi[r], w);
        }
        tn_array_free(out);
    }
    free(gf);
    free(gi);
    for (int i = 0; i < n; i++) tn_array_free(in[i]);
    return bad;
}

/* >>floor division and mod ------------------------------------------------ */

/* NumPy's divmod: 1.0 // 0.1 is 9 (0.1 is a little above 1/10; 1.0 % 0.1
   is 0.09999999999999995), tiny // -2.5 is -1, inf // 2 is NaN, a zero
   remainder has the divisor's sign, x // 0 is x / 0; float16 is computed in
   float32, as NumPy does. */
TEST(test_float_floor_div_and_mod) {
    const struct { tn_dtype t; table tab; } sets[] = {
        { TN_F64, FTAB(np_divmod_float64) }, { TN_F32, FTAB(np_divmod_float32) }, { TN_F16, FTAB(np_divmod_float16) },
    };
    /* the cases are in the table, with NumPy's answers */
    bool seen[3] = { false, false, false };
    for (int64_t r = 0; r < NROWS(np_divmod_float64); r++) {
        const double *x = np_divmod_float64[r];
        if (x[0] == 1.0 && x[1] == 0.1) seen[0] = x[2] == 9.0;
        if (x[0] == 5e-324 && x[1] == -2.5) seen[1] = x[2] == -1.0;
        if (x[0] == INFINITY && x[1] == 2.0) seen[2] = isnan(x[2]);
    }
    CHECK(seen[0] && seen[1] && seen[2], "the table holds 1.0 // 0.1 = 9, tiny // -2.5 = -1, inf // 2 = NaN");
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        CHECK(check_table(TN_OP_INT_DIV, 2, sets[s].t, sets[s].tab, 2, "floor_div") == 0, "floor_div %s differs from NumPy",
              tn_dtype_name(sets[s].t));
        CHECK(check_table(TN_OP_MOD, 2, sets[s].t, sets[s].tab, 3, "mod") == 0, "mod %s differs from NumPy",
              tn_dtype_name(sets[s].t));
    }
}

/* x // 0 and x % 0 are 0; MIN // -1 wraps to MIN, MIN % -1 is 0 (NumPy 1.24,
   which warns where tensor.h cannot). */
TEST(test_int_floor_div_and_mod) {
    CHECK(check_table(TN_OP_INT_DIV, 2, TN_I64, ITAB(np_idivmod_int64), 2, "floor_div") == 0, "int64 floor_div");
    CHECK(check_table(TN_OP_MOD, 2, TN_I64, ITAB(np_idivmod_int64), 3, "mod") == 0, "int64 mod");
    CHECK(check_table(TN_OP_INT_DIV, 2, TN_I32, ITAB(np_idivmod_int32), 2, "floor_div") == 0, "int32 floor_div");
    CHECK(check_table(TN_OP_MOD, 2, TN_I32, ITAB(np_idivmod_int32), 3, "mod") == 0, "int32 mod");
}

/* Random pairs with quotients below 2^31, against exact reasoning: q is the
   integer with q <= a / b < q + 1, which the remainder a - q b shows by its
   sign and size (fma computes it with one rounding, as NumPy's a % b is
   rounded once); a zero remainder has the divisor's sign. */
TEST(test_divmod_exact) {
    uint64_t s = 0x2545f4914f6cdd1dull;
    int bad = 0;
    const int64_t n = 4096;
    double *a = (double *)malloc((size_t)n * sizeof *a), *b = (double *)malloc((size_t)n * sizeof *b);
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        double u = (double)(s >> 11) / 9007199254740992.0;
        int sh = (int)(s & 7), ea = (int)((s >> 3) % 24);
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        double w = (double)(s >> 11) / 9007199254740992.0, sign = s >> 63 ? -1.0 : 1.0;
        a[i] = ldexp(u - 0.5, ea);                       /* |a| < 2^22 */
        b[i] = sign * ldexp(0.5 + w, -sh);               /* 2^-8 <= |b| < 1.5 */
        if (i % 5 == 0) {                                /* exact multiples: zero remainders, both signs */
            b[i] = sign * ldexp(floor(w * 64) + 1, -6);
            a[i] = b[i] * (double)((int64_t)(u * 2001) - 1000);
        }
    }
    tn_array *in[2] = { tn_array_from_data(TN_F64, 1, &n, a), tn_array_from_data(TN_F64, 1, &n, b) };
    tn_array *q = run_op(TN_OP_INT_DIV, 2, TN_F64, in, VIA_ENGINE), *m = run_op(TN_OP_MOD, 2, TN_F64, in, VIA_ENGINE);
    CHECK(q && m, "%s", tn_last_error());
    int zeros = 0;
    for (int64_t i = 0; q && m && i < n; i++) {
        double qi = ((const double *)q->data)[i], mi = ((const double *)m->data)[i];
        double r = fma(-qi, b[i], a[i]);                 /* a - q b, rounded once */
        zeros += r == 0;
        bool ok = qi == floor(qi) && (r == 0 || (r < 0) == (b[i] < 0)) && fabs(r) <= fabs(b[i]) &&
                  same(mi, r == 0 ? copysign(0.0, b[i]) : r);
        if (!ok && bad++ < 5) fprintf(stderr, "  a %.17g b %.17g: q %.17g m %.17g, a - q b = %.17g\n", a[i], b[i], qi, mi, r);
    }
    CHECK(bad == 0, "%d of %lld pairs", bad, (long long)n);
    CHECK(zeros > n / 10, "only %d zero remainders", zeros);
    tn_array_free(q); tn_array_free(m); tn_array_free(in[0]); tn_array_free(in[1]);
    free(a); free(b);
}

/* >>clip, minimum, maximum ------------------------------------------------ */

/* clip is minimum(maximum(x, lo), hi): lo > hi gives hi; a NaN in x, lo or
   hi gives NaN; the signs of zeros as NumPy's float32/float64 (float16 in
   NumPy differs there: README's Numerics). */
TEST(test_clip) {
    for (tn_dtype t = TN_F16; t <= TN_F64; t = (tn_dtype)(t + 1))
        CHECK(check_table(TN_OP_CLIP, 3, t, FTAB(np_clip), 3, "clip") == 0, "clip %s differs from NumPy", tn_dtype_name(t));
    CHECK(check_table(TN_OP_CLIP, 3, TN_I64, ITAB(np_iclip), 3, "clip") == 0, "int64 clip differs from NumPy");
    CHECK(check_table(TN_OP_CLIP, 3, TN_I32, ITAB(np_iclip), 3, "clip") == 0, "int32 clip differs from NumPy");
}

/* NaN propagates; +0 and -0 give the second operand (NumPy float32/float64). */
TEST(test_minimum_maximum) {
    for (tn_dtype t = TN_F16; t <= TN_F64; t = (tn_dtype)(t + 1)) {
        CHECK(check_table(TN_OP_MINIMUM, 2, t, FTAB(np_minmax), 2, "minimum") == 0, "minimum %s", tn_dtype_name(t));
        CHECK(check_table(TN_OP_MAXIMUM, 2, t, FTAB(np_minmax), 3, "maximum") == 0, "maximum %s", tn_dtype_name(t));
    }
}

/* >>documented differences ------------------------------------------------ */

/* NumPy refuses ints to negative int powers; tensor.h gives the integer part
   of the real power: 1, -1 (odd exponent) or 1 (even) for a base of -1, and
   0 for every other base, 0 included (as x // 0 is 0). */
TEST(test_int_pow_negative_exponent) {
    static const int64_t base[] = { -3, -2, -1, 0, 1, 2, 3, 1000, INT64_MIN, INT64_MAX };
    static const int64_t expo[] = { -1, -2, -3, -62, -63, INT64_MIN };
    enum { NB = sizeof base / sizeof base[0], NE = sizeof expo / sizeof expo[0] };
    int64_t tab[NB * NE][4], tab32[NB * NE][4];
    int n32 = 0;
    for (int i = 0; i < NB; i++)
        for (int j = 0; j < NE; j++) {
            int64_t *r = tab[i * NE + j];
            double p = base[i] == 0 ? 0 : pow((double)base[i], (double)expo[j]);   /* |p| <= 1 */
            r[0] = base[i]; r[1] = expo[j]; r[2] = (int64_t)trunc(p); r[3] = 0;
            if (r[0] >= INT32_MIN && r[0] <= INT32_MAX && r[1] >= INT32_MIN) memcpy(tab32[n32++], r, sizeof tab[0]);
        }
    CHECK(tab[2 * NE + 0][2] == -1 && tab[2 * NE + 1][2] == 1 && tab[5 * NE][2] == 0, "reference: (-1)^-1, (-1)^-2, 2^-1");
    CHECK(check_table(TN_OP_POW, 2, TN_I64, (table){ NULL, (const int64_t (*)[4])tab, NB * NE }, 2, "pow") == 0, "int64 pow");
    CHECK(check_table(TN_OP_POW, 2, TN_I32, (table){ NULL, (const int64_t (*)[4])tab32, n32 }, 2, "pow") == 0, "int32 pow");
}

/* The promotion rule README states, case by case (NumPy 1.24's answer in
   the comment where it differs). */
TEST(test_promotion_rule) {
    tn_graph *g = tn_graph_new();
    tn_var *b = tn_vector(g, "b", TN_BOOL), *i32 = tn_vector(g, "i32", TN_I32), *i64 = tn_vector(g, "i64", TN_I64);
    tn_var *f16 = tn_vector(g, "f16", TN_F16), *f32 = tn_vector(g, "f32", TN_F32), *f64 = tn_vector(g, "f64", TN_F64);
    struct { tn_var *v; tn_dtype want; const char *what; } cs[] = {
        { tn_add(i32, i64), TN_I64, "int32 + int64" },
        { tn_add(f16, f32), TN_F32, "float16 + float32" },
        { tn_add(i32, f64), TN_F64, "int32 + float64" },
        { tn_add(i64, f32), TN_F32, "int64 + float32 (NumPy: float64)" },
        { tn_add(i32, f16), TN_F16, "int32 + float16 (NumPy: float64)" },
        { tn_add(b, f16), TN_F16, "bool + float16" },
        { tn_mul(i32, tn_lit(i32, 2.5)), TN_F64, "int32 * 2.5" },
        { tn_mul(i32, tn_lit(i32, 2.0)), TN_I32, "int32 * 2.0 (NumPy: float64; a literal is a double, 2.0 is 2)" },
        { tn_add(i32, tn_lit(i32, 1099511627776.0)), TN_I64, "int32 + 2^40" },
        { tn_add(b, tn_lit(b, 1)), TN_I64, "bool + 1" },
        { tn_mul(f16, tn_lit(f16, 1e10)), TN_F16, "float16 * 1e10 (NumPy 1.24: float32)" },
        { tn_exp(i32), TN_F64, "exp(int32)" },
        { tn_exp(b), TN_F64, "exp(bool) (NumPy: float16)" },
        { tn_div(i32, i32), TN_F64, "int32 / int32" },
        { tn_int_div(b, b), TN_BOOL, "bool // bool (NumPy: int8, which tensor.h lacks)" },
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
        CHECK(cs[k].v && cs[k].v->type.dtype == cs[k].want, "%s: got %s, want %s", cs[k].what,
              cs[k].v ? tn_dtype_name(cs[k].v->type.dtype) : tn_last_error(), tn_dtype_name(cs[k].want));
    tn_graph_free(g);
}

/* >>gradients ------------------------------------------------------------- */

/* d(a % b)/db is -(a // b), the floor division the op defines: at a = 1,
   b = 0.1 that is -9 (NumPy's 1.0 // 0.1), not -floor(1.0 / 0.1) = -10.
   clip's gradient goes to whichever of x, lo, hi the value is: with lo > hi
   it is hi; minimum's and maximum's to the operand the value is. */
TEST(test_gradients) {
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_vector(g, "a", TN_F64), *b = tn_vector(g, "b", TN_F64), *c = tn_vector(g, "c", TN_F64);
    tn_var *y = tn_sum(tn_mod(a, b), NULL, 0, false), *wrt[2] = { a, b }, *gr[2] = { NULL, NULL };
    CHECK(tn_grad(y, 2, wrt, gr, NULL) == TN_OK, "%s", tn_last_error());
    const int64_t n = 3;
    double av[3] = { 1.0, 7.5, -7.5 }, bv[3] = { 0.1, -2.0, 2.0 };   /* NumPy: 1.0 // 0.1 = 9, 7.5 // -2 = -4, -7.5 // 2 = -4 */
    double want_db[3] = { -9.0, 4.0, 4.0 };
    tn_array *in[2] = { tn_array_from_data(TN_F64, 1, &n, av), tn_array_from_data(TN_F64, 1, &n, bv) }, *out[2] = { NULL, NULL };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = wrt, .n_outputs = 2, .outputs = gr });
    CHECK(f && tn_call(f, in, out) == TN_OK, "%s", tn_last_error());
    for (int64_t i = 0; out[1] && i < n; i++) {
        CHECK(((const double *)out[0]->data)[i] == 1.0, "d(a %% b)/da at %g, %g", av[i], bv[i]);
        CHECK(((const double *)out[1]->data)[i] == want_db[i], "d(a %% b)/db at %g, %g: got %g, want %g", av[i], bv[i],
              ((const double *)out[1]->data)[i], want_db[i]);
    }
    tn_function_free(f);
    tn_array_free(in[0]); tn_array_free(in[1]); tn_array_free(out[0]); tn_array_free(out[1]);

    /* clip: x, lo, hi; want the gradient of each (from which one the value is) */
    static const double xs[][6] = {
        { 0.5, 0.0, 1.0, 1, 0, 0 },      /* inside */
        { -1.0, 0.0, 1.0, 0, 1, 0 },     /* below lo */
        { 2.0, 0.0, 1.0, 0, 0, 1 },      /* above hi */
        { 5.0, 3.0, 2.0, 0, 0, 1 },      /* lo > hi: hi, whatever x is */
        { 1.0, 3.0, 2.0, 0, 0, 1 },
        { 2.5, 3.0, 2.0, 0, 0, 1 },
    };
    const int64_t m = (int64_t)(sizeof xs / sizeof xs[0]);
    double cv[3][6];
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < m; i++) cv[k][i] = xs[i][k];
    tn_var *z = tn_sum(tn_clip(a, b, c), NULL, 0, false), *w3[3] = { a, b, c }, *g3[3] = { NULL, NULL, NULL };
    CHECK(tn_grad(z, 3, w3, g3, NULL) == TN_OK, "%s", tn_last_error());
    tn_array *ci[3], *co[3] = { NULL, NULL, NULL };
    for (int k = 0; k < 3; k++) ci[k] = tn_array_from_data(TN_F64, 1, &m, cv[k]);
    f = tn_function(g, &(tn_func_desc){ .n_inputs = 3, .inputs = w3, .n_outputs = 3, .outputs = g3 });
    CHECK(f && tn_call(f, ci, co) == TN_OK, "%s", tn_last_error());
    for (int k = 0; k < 3 && co[2]; k++)
        for (int64_t i = 0; i < m; i++)
            CHECK(((const double *)co[k]->data)[i] == xs[i][3 + k], "d clip(%g, %g, %g) / d %s: got %g, want %g", xs[i][0], xs[i][1],
                  xs[i][2], k == 0 ? "x" : k == 1 ? "lo" : "hi", ((const double *)co[k]->data)[i], xs[i][3 + k]);
    tn_function_free(f);
    for (int k = 0; k < 3; k++) { tn_array_free(ci[k]); tn_array_free(co[k]); }

    /* minimum, maximum: the gradient goes to the operand the value is; on a
       tie that is the second (maximum(x, x) has gradient 1, not 2) */
    for (int op = 0; op < 2; op++) {
        tn_var *mm = op ? tn_maximum(a, b) : tn_minimum(a, b), *s1 = tn_sum(mm, NULL, 0, false);
        tn_var *s2 = tn_sum(op ? tn_maximum(a, a) : tn_minimum(a, a), NULL, 0, false);
        tn_var *gg[3] = { NULL, NULL, NULL };
        CHECK(tn_grad(s1, 2, wrt, gg, NULL) == TN_OK && (gg[2] = tn_grad1(s2, a)) != NULL, "%s", tn_last_error());
        const double mav[3] = { 1.0, 2.0, -0.0 }, mbv[3] = { 2.0, 2.0, 0.0 };
        const double want[2][3][3] = { { { 1, 0, 0 }, { 0, 1, 1 }, { 1, 1, 1 } },      /* minimum: d/da, d/db, d min(a, a)/da */
                                       { { 0, 0, 0 }, { 1, 1, 1 }, { 1, 1, 1 } } };    /* maximum */
        tn_array *mi[2] = { tn_array_from_data(TN_F64, 1, &n, mav), tn_array_from_data(TN_F64, 1, &n, mbv) };
        tn_array *mo[3] = { NULL, NULL, NULL };
        f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = wrt, .n_outputs = 3, .outputs = gg });
        CHECK(f && tn_call(f, mi, mo) == TN_OK, "%s", tn_last_error());
        for (int k = 0; k < 3 && mo[2]; k++)
            for (int64_t i = 0; i < n; i++)
                CHECK(((const double *)mo[k]->data)[i] == want[op][k][i], "%s(%g, %g): gradient %d is %g, want %g", op ? "maximum" : "minimum",
                      mav[i], mbv[i], k, ((const double *)mo[k]->data)[i], want[op][k][i]);
        tn_function_free(f);
        for (int k = 0; k < 3; k++) tn_array_free(mo[k]);
        tn_array_free(mi[0]); tn_array_free(mi[1]);
    }
    tn_graph_free(g);
}

int main(void) {
    TH_RUN(test_float_floor_div_and_mod);
    TH_RUN(test_int_floor_div_and_mod);
    TH_RUN(test_divmod_exact);
    TH_RUN(test_clip);
    TH_RUN(test_minimum_maximum);
    TH_RUN(test_int_pow_negative_exponent);
    TH_RUN(test_promotion_rule);
    TH_RUN(test_gradients);
    tn_shutdown();
    TH_END();
}
