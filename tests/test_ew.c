/* tests/test_ew.c - the elementwise op catalogue: every op of TN_EW_OPS on
   every dtype it takes, over several shapes, layouts (contiguous, transposed,
   sliced with step 2, negative step) and broadcasts, against a float64
   reference computed here with <math.h> (Python semantics for floor
   division, mod and int pow; NumPy's NaN rules and clip; round half to even;
   tests/test_numerics.c holds NumPy's own answers at the edges). Runs the
   CPU engine directly (tn__cpu_ew_run) and through tn_function/tn_call. */
#ifndef TEST_EW_PRIVATE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#endif
#include "harness.h"
#include <stdint.h>

/* >>reference ------------------------------------------------------------ */

static double ref_round_even(double x) {
    double r = floor(x + 0.5);
    if (r - x == 0.5 && fmod(r, 2.0) != 0) r -= 1;
    return r;
}
static int64_t ref_ifloordiv(int64_t a, int64_t b) { return (int64_t)floor((double)a / (double)b); }
static int64_t ref_imod(int64_t a, int64_t b) { return a - b * ref_ifloordiv(a, b); }
static int64_t ref_ipow(int64_t a, int64_t b) {
    int64_t r = 1;
    for (int64_t k = 0; k < b; k++) r *= a;
    return r;
}
/* Float floor division by exact reasoning: floor(a / b) rounded may be one
   too big (a / b just below an integer rounds up to it), which the sign of
   the remainder a - q b shows; fma computes that remainder rounded once,
   which is also the mod NumPy gives (for the quotients the cases draw). */
static double ref_floordiv(double a, double b) {
    double q = floor(a / b), r = fma(-q, b, a);
    return r != 0 && (r < 0) != (b < 0) ? q - 1 : q;
}
static double ref_floormod(double a, double b) {
    double r = fma(-ref_floordiv(a, b), b, a);
    return r == 0 ? copysign(0.0, b) : r;
}

/* op on values already of the operand dtype; isint: the int column */
static double ref_op(int op, bool isint, double a, double b, double c) {
    switch (op) {
    case TN_OP_IDENTITY: return a;
    case TN_OP_ADD: return a + b;
    case TN_OP_SUB: return a - b;
    case TN_OP_MUL: return a * b;
    case TN_OP_TRUE_DIV: return a / b;
    case TN_OP_INT_DIV: return isint ? (double)ref_ifloordiv((int64_t)a, (int64_t)b) : ref_floordiv(a, b);
    case TN_OP_MOD: return isint ? (double)ref_imod((int64_t)a, (int64_t)b) : ref_floormod(a, b);
    case TN_OP_POW: return isint ? (double)ref_ipow((int64_t)a, (int64_t)b) : pow(a, b);
    case TN_OP_NEG: return -a;
    case TN_OP_ABS: return fabs(a);
    case TN_OP_SIGN: return isnan(a) ? a : (a > 0) - (a < 0);
    case TN_OP_EXP: return exp(a);
    case TN_OP_EXP2: return exp2(a);
    case TN_OP_EXPM1: return expm1(a);
    case TN_OP_LOG: return log(a);
    case TN_OP_LOG2: return log2(a);
    case TN_OP_LOG1P: return log1p(a);
    case TN_OP_SQRT: return sqrt(a);
    case TN_OP_RSQRT: return 1 / sqrt(a);
    case TN_OP_SQR: return a * a;
    case TN_OP_RECIPROCAL: return 1 / a;
    case TN_OP_SIN: return sin(a);
    case TN_OP_COS: return cos(a);
    case TN_OP_TAN: return tan(a);
    case TN_OP_ASIN: return asin(a);
    case TN_OP_ACOS: return acos(a);
    case TN_OP_ATAN: return atan(a);
    case TN_OP_SINH: return sinh(a);
    case TN_OP_COSH: return cosh(a);
    case TN_OP_TANH: return tanh(a);
    case TN_OP_ASINH: return asinh(a);
    case TN_OP_ACOSH: return acosh(a);
    case TN_OP_ATANH: return atanh(a);
    case TN_OP_SIGMOID: return 1 / (1 + exp(-a));
    case TN_OP_SOFTPLUS: return log1p(exp(a));
    case TN_OP_ERF: return erf(a);
    case TN_OP_ERFC: return erfc(a);
    case TN_OP_RELU: return isnan(a) ? a : a > 0 ? a : 0.0;   /* NumPy's maximum(x, 0); -0 gives +0 */
    /* activations: the textbook formulas (the kernels use stabler forms); infinities by their limits */
    case TN_OP_LEAKY_RELU: return a > 0 ? a : a * b;
    case TN_OP_ELU: return a > 0 ? a : b * expm1(a);   /* elu(-0) is -0 */
    case TN_OP_SELU: return 1.0507009873554804934 * (a > 0 ? a : 1.6732632423543772848 * expm1(a));
    case TN_OP_GELU: return a == -INFINITY ? -0.0 : 0.5 * a * (1 + erf(a / sqrt(2.0)));
    case TN_OP_GELU_TANH: return a == -INFINITY ? -0.0 : 0.5 * a * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (a + 0.044715 * pow(a, 3))));
    case TN_OP_SOFTSIGN: return isinf(a) ? copysign(1.0, a) : a / (1 + fabs(a));
    case TN_OP_HARD_SIGMOID: return isnan(a) ? a : fmin(fmax(a / 6 + 0.5, 0.0), 1.0);   /* PyTorch's relu6(x + 3) / 6 */
    case TN_OP_SILU: return a == -INFINITY ? -0.0 : a < -700 ? a * exp(a) : a / (1 + exp(-a));
    case TN_OP_MISH: return a == -INFINITY ? -0.0 : a * tanh(a > 30 ? a : log(1 + exp(a)));
    case TN_OP_FLOOR: return floor(a);
    case TN_OP_CEIL: return ceil(a);
    case TN_OP_ROUND: return ref_round_even(a);
    case TN_OP_MINIMUM: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
    case TN_OP_MAXIMUM: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
    case TN_OP_CLIP: return isnan(a) || isnan(b) || isnan(c) ? NAN : fmin(fmax(a, b), c);   /* lo > hi gives hi */
    case TN_OP_LT: return a < b;
    case TN_OP_LE: return a <= b;
    case TN_OP_GT: return a > b;
    case TN_OP_GE: return a >= b;
    case TN_OP_EQ: return a == b;
    case TN_OP_NEQ: return a != b;
    case TN_OP_AND: return (a != 0) && (b != 0);
    case TN_OP_OR: return (a != 0) || (b != 0);
    case TN_OP_XOR: return (a != 0) != (b != 0);
    case TN_OP_NOT: return a == 0;
    case TN_OP_WHERE: return a != 0 ? b : c;
    default: return NAN;
    }
}

/* A double as dtype t would store it (NumPy's casting; float to int
   truncates, NaN or out of range gives the minimum). */
static double ref_store(tn_dtype t, double v) {
    switch (t) {
    case TN_BOOL: return v != 0;
    case TN_I32: return v >= -2147483648.0 && v < 2147483648.0 ? trunc(v) : (isnan(v) || fabs(v) >= 2147483648.0 ? -2147483648.0 : v);
    case TN_I64: return v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? trunc(v) : -9223372036854775808.0;
    case TN_F16: return tn_f16_to_f32(tn_f32_to_f16((float)v));
    case TN_F32: return (float)v;
    default: return v;
    }
}

static void tol_of(tn_dtype t, double *rtol, double *atol) {
    switch (t) {
    case TN_F16: *rtol = 2e-3; *atol = 2e-3; break;
    case TN_F32: *rtol = 2e-6; *atol = 1e-6; break;
    case TN_F64: *rtol = 1e-12; *atol = 1e-12; break;
    default: *rtol = 0; *atol = 0; break;
    }
}

/* >>inputs --------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double rnd(void) {   /* [0, 1) */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* Input domains: where an op's arguments are drawn from. */
enum { D_ANY, D_POS, D_NONZERO, D_UNIT, D_QUANT, D_SMALLINT, D_EXPO, D_TAN, D_BOOL, D_LO, D_LOG1P, D_WIDE, D_ACOSH };
static double draw(int dom, bool isint) {
    double u = rnd();
    switch (dom) {
    case D_POS: return isint ? 1 + floor(u * 5) : 0.1 + 4.9 * u;
    case D_NONZERO: { double m = isint ? 1 + floor(u * 5) : 0.5 + 2.5 * u; return rnd() < 0.5 ? -m : m; }
    case D_QUANT: return floor(u * 9) * 0.5 - 2;                 /* ties for round, equal pairs for comparisons */
    case D_SMALLINT: return isint ? floor(u * 13) - 6 : 0.5 + 2.5 * u;   /* pow bases */
    case D_EXPO: return isint ? floor(u * 7) : -2 + 4 * u;       /* pow exponents */
    case D_TAN: return -1.2 + 2.4 * u;
    case D_BOOL: return u < 0.5;
    case D_LO: return isint ? -floor(u * 3) : -2 * u;
    case D_LOG1P: return -0.5 + 3.5 * u;
    case D_WIDE: return isint ? floor(u * 41) - 20 : -10 + 20 * u;
    case D_UNIT: return isint ? floor(u * 3) - 1 : -0.97 + 1.94 * u;    /* asin, acos, atanh; ints hit +-1 */
    case D_ACOSH: return isint ? 1 + floor(u * 9) : 1 + 9 * u;        /* acosh; ints hit 1 */
    default: return isint ? floor(u * 7) - 3 : -3 + 6 * u;
    }
}

typedef enum { L_CONTIG, L_TRANSPOSED, L_STEP2, L_NEGSTEP, L_COUNT } layout;
static const char *layout_name[L_COUNT] = { "contiguous", "transposed", "step2", "negstep" };

/* An array of shape `shape` in layout L with values from `dom`. */
static tn_array *make_input(tn_dtype t, int ndim, const int64_t *shape, layout L, int dom) {
    int64_t bshape[TN_MAX_DIMS];
    for (int d = 0; d < ndim; d++) bshape[d] = shape[d];
    if (ndim == 0) L = L_CONTIG;
    if (L == L_TRANSPOSED) for (int d = 0; d < ndim; d++) bshape[d] = shape[ndim - 1 - d];
    if (L == L_STEP2) bshape[ndim - 1] = 2 * shape[ndim - 1];
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= bshape[d];
    double *v = (double *)malloc((size_t)(n ? n : 1) * sizeof *v);
    bool isint = !tn_dtype_is_float(t);
    for (int64_t i = 0; i < n; i++) v[i] = t == TN_BOOL && dom != D_BOOL ? (rnd() < 0.5) : draw(dom, isint);
    tn_array *b64 = tn_array_from_data(TN_F64, ndim, bshape, v);
    free(v);
    tn_array *base = tn_array_astype(b64, t);
    tn_array_free(b64);
    tn_array *r = NULL;
    switch (L) {
    case L_CONTIG: r = tn_array_view(base); break;
    case L_TRANSPOSED: r = tn_array_transpose(base, NULL); break;
    case L_STEP2: r = tn_array_slice(base, ndim - 1, 0, TN_NONE, 2); break;
    case L_NEGSTEP: r = tn_array_slice(base, 0, TN_NONE, TN_NONE, -1); break;
    default: break;
    }
    tn_array_free(base);
    return r;
}

/* >>op cases ------------------------------------------------------------- */

#define F_ALL (1u << TN_F16 | 1u << TN_F32 | 1u << TN_F64)
#define I_ALL (1u << TN_I32 | 1u << TN_I64)
#define NUM (F_ALL | I_ALL)
#define LOGIC_DT (1u << TN_BOOL | I_ALL)

typedef struct op_case { int op; unsigned dtypes; int dom[3]; } op_case;
static const op_case cases[] = {
    { TN_OP_IDENTITY, NUM, { D_ANY } },
    { TN_OP_ADD, NUM, { D_ANY, D_ANY } },
    { TN_OP_SUB, NUM, { D_ANY, D_ANY } },
    { TN_OP_MUL, NUM, { D_ANY, D_ANY } },
    { TN_OP_TRUE_DIV, F_ALL, { D_ANY, D_NONZERO } },
    { TN_OP_INT_DIV, NUM, { D_WIDE, D_NONZERO } },
    { TN_OP_MOD, NUM, { D_WIDE, D_NONZERO } },
    { TN_OP_POW, NUM, { D_SMALLINT, D_EXPO } },
    { TN_OP_NEG, NUM, { D_ANY } },
    { TN_OP_ABS, NUM, { D_ANY } },
    { TN_OP_SIGN, NUM, { D_QUANT } },
    { TN_OP_EXP, F_ALL, { D_ANY } },
    { TN_OP_EXP2, F_ALL, { D_ANY } },
    { TN_OP_EXPM1, F_ALL, { D_ANY } },
    { TN_OP_LOG, F_ALL, { D_POS } },
    { TN_OP_LOG2, F_ALL, { D_POS } },
    { TN_OP_LOG1P, F_ALL, { D_LOG1P } },
    { TN_OP_SQRT, F_ALL, { D_POS } },
    { TN_OP_RSQRT, F_ALL, { D_POS } },
    { TN_OP_SQR, NUM, { D_ANY } },
    { TN_OP_RECIPROCAL, F_ALL, { D_NONZERO } },
    { TN_OP_SIN, F_ALL, { D_WIDE } },
    { TN_OP_COS, F_ALL, { D_WIDE } },
    { TN_OP_TAN, F_ALL, { D_TAN } },
    { TN_OP_ASIN, F_ALL, { D_UNIT } },
    { TN_OP_ACOS, F_ALL, { D_UNIT } },
    { TN_OP_ATAN, F_ALL, { D_WIDE } },
    { TN_OP_SINH, F_ALL, { D_WIDE } },
    { TN_OP_COSH, F_ALL, { D_WIDE } },
    { TN_OP_TANH, F_ALL, { D_ANY } },
    { TN_OP_ASINH, F_ALL, { D_WIDE } },
    { TN_OP_ACOSH, F_ALL, { D_ACOSH } },
    { TN_OP_ATANH, F_ALL, { D_UNIT } },
    { TN_OP_SIGMOID, F_ALL, { D_WIDE } },
    { TN_OP_SOFTPLUS, F_ALL, { D_WIDE } },
    { TN_OP_ERF, F_ALL, { D_ANY } },
    { TN_OP_ERFC, F_ALL, { D_ANY } },
    { TN_OP_RELU, NUM, { D_QUANT } },
    { TN_OP_LEAKY_RELU, F_ALL, { D_ANY, D_POS } },
    { TN_OP_ELU, F_ALL, { D_ANY, D_POS } },
    { TN_OP_SELU, F_ALL, { D_ANY } },
    { TN_OP_GELU, F_ALL, { D_ANY } },
    { TN_OP_GELU_TANH, F_ALL, { D_ANY } },
    { TN_OP_SOFTSIGN, F_ALL, { D_WIDE } },
    { TN_OP_HARD_SIGMOID, F_ALL, { D_ANY } },
    { TN_OP_SILU, F_ALL, { D_WIDE } },
    { TN_OP_MISH, F_ALL, { D_WIDE } },
    { TN_OP_FLOOR, NUM, { D_WIDE } },
    { TN_OP_CEIL, NUM, { D_WIDE } },
    { TN_OP_ROUND, NUM, { D_QUANT } },
    { TN_OP_MINIMUM, NUM, { D_QUANT, D_QUANT } },
    { TN_OP_MAXIMUM, NUM, { D_QUANT, D_QUANT } },
    { TN_OP_CLIP, NUM, { D_ANY, D_LO, D_ANY } },   /* hi < lo a third of the time */
    { TN_OP_LT, NUM | 1u << TN_BOOL, { D_QUANT, D_QUANT } },
    { TN_OP_LE, NUM, { D_QUANT, D_QUANT } },
    { TN_OP_GT, NUM, { D_QUANT, D_QUANT } },
    { TN_OP_GE, NUM, { D_QUANT, D_QUANT } },
    { TN_OP_EQ, NUM | 1u << TN_BOOL, { D_QUANT, D_QUANT } },
    { TN_OP_NEQ, NUM, { D_QUANT, D_QUANT } },
    { TN_OP_AND, LOGIC_DT, { D_QUANT, D_QUANT } },
    { TN_OP_OR, LOGIC_DT, { D_QUANT, D_QUANT } },
    { TN_OP_XOR, LOGIC_DT, { D_QUANT, D_QUANT } },
    { TN_OP_NOT, LOGIC_DT, { D_QUANT } },
    { TN_OP_WHERE, NUM | 1u << TN_BOOL, { D_BOOL, D_ANY, D_ANY } },
};
#define N_CASES ((int)(sizeof cases / sizeof cases[0]))

/* Shapes of each operand for one run: same shape, or a broadcasting set. */
typedef struct shape_set { int ndim[3]; int64_t shape[3][TN_MAX_DIMS]; } shape_set;
static const shape_set shape_sets[] = {
    { { 1, 1, 1 }, { { 1 }, { 1 }, { 1 } } },
    { { 1, 1, 1 }, { { 7 }, { 7 }, { 7 } } },
    { { 1, 1, 1 }, { { 1000 }, { 1000 }, { 1000 } } },
    { { 3, 3, 3 }, { { 3, 5, 4 }, { 3, 5, 4 }, { 3, 5, 4 } } },
    { { 0, 0, 0 }, { { 0 }, { 0 }, { 0 } } },
    { { 2, 2, 2 }, { { 3, 1 }, { 1, 4 }, { 3, 4 } } },
    { { 1, 3, 2 }, { { 4 }, { 2, 3, 4 }, { 3, 1 } } },
    { { 3, 0, 1 }, { { 2, 3, 4 }, { 0 }, { 4 } } },
};
#define N_SHAPES ((int)(sizeof shape_sets / sizeof shape_sets[0]))

static int kind_of(int op) { return tn__ew_info(op)->kind; }

/* Output dtype of op on operand dtype t. */
static tn_dtype out_dtype_of(int op, tn_dtype t) {
    int k = kind_of(op);
    if (k == TN_EWK_CMP || k == TN_EWK_LOGIC) return TN_BOOL;
    return t;
}

/* Broadcast shape of the operands. */
static int bshape(int n, const int *ndim, const int64_t (*shape)[TN_MAX_DIMS], int64_t *out) {
    int nd = 0;
    for (int i = 0; i < n; i++) nd = ndim[i] > nd ? ndim[i] : nd;
    for (int d = 0; d < nd; d++) {
        out[d] = 1;
        for (int i = 0; i < n; i++) {
            int id = d - (nd - ndim[i]);
            if (id >= 0 && shape[i][id] != 1) out[d] = shape[i][id];
        }
    }
    return nd;
}

/* Compares out (shape nd/oshape) with the reference of op over in[]. Returns
   the number of mismatches (first few printed). */
static int compare(int op, tn_dtype opd, int n, tn_array *const *in, const tn_array *out, const char *what) {
    int nd = out->ndim, bad = 0;
    int64_t total = tn_array_size(out), idx[TN_MAX_DIMS], sub[TN_MAX_DIMS];
    double rtol, atol;
    tol_of(out->dtype, &rtol, &atol);
    bool isint = !tn_dtype_is_float(opd);
    for (int64_t k = 0; k < total; k++) {
        int64_t r = k;
        for (int d = nd - 1; d >= 0; d--) { idx[d] = r % out->shape[d]; r /= out->shape[d]; }
        double v[3] = { 0, 0, 0 };
        for (int i = 0; i < n; i++) {
            const tn_array *a = in[i];
            for (int d = 0; d < a->ndim; d++) {
                int64_t j = idx[nd - a->ndim + d];
                sub[d] = a->shape[d] == 1 ? 0 : j;
            }
            v[i] = tn_array_get(a, sub);
            /* operands are read as the operand dtype (bool inputs of logic ops: != 0) */
            if (!(kind_of(op) == TN_EWK_WHERE && i == 0)) v[i] = ref_store(opd, v[i]);
        }
        double want = ref_store(out->dtype, ref_op(op, isint, v[0], v[1], v[2]));
        double got = tn_array_get(out, idx);
        if (!th_close(got, want, rtol, atol)) {
            if (bad++ < 3)
                fprintf(stderr, "  %s %s %s: element %lld: got %.17g want %.17g (inputs %g %g %g)\n", tn__ew_info(op)->name,
                        tn_dtype_name(opd), what, (long long)k, got, want, v[0], v[1], v[2]);
        }
    }
    return bad;
}

/* The one-instruction program of op over operand dtype t (inputs stored as t). */
static tn_ew_program one_op(int op, int n, tn_dtype t, tn_dtype *in_dt, tn_ew_instr *ins, int32_t *out_reg, tn_dtype *out_dt) {
    for (int i = 0; i < n; i++) in_dt[i] = t;
    if (kind_of(op) == TN_EWK_WHERE) in_dt[0] = TN_BOOL;
    if (kind_of(op) == TN_EWK_LOGIC) for (int i = 0; i < n; i++) in_dt[i] = TN_BOOL;
    *ins = (tn_ew_instr){ .op = (int16_t)op, .dtype = (int8_t)out_dtype_of(op, t), .in_dtype = (int8_t)(kind_of(op) == TN_EWK_LOGIC ? TN_BOOL : t),
                          .a = 0, .b = n > 1 ? 1 : -1, .c = n > 2 ? 2 : -1 };
    *out_reg = n;
    *out_dt = out_dtype_of(op, t);
    return (tn_ew_program){ n, in_dt, 1, ins, 1, out_reg, out_dt, NULL, NULL };
}

/* Every op, dtype, shape set and layout through tn__cpu_ew_run. Logic ops
   take bool registers: int inputs go through their constructors (below). */
TEST(test_engine_all_ops) {
    int runs = 0;
    for (int c = 0; c < N_CASES; c++) {
        const op_case *oc = &cases[c];
        int n = tn__ew_info(oc->op)->arity;
        for (int t = TN_BOOL; t < TN_DTYPE_COUNT; t++) {
            if (!(oc->dtypes & (1u << t))) continue;
            if (kind_of(oc->op) == TN_EWK_LOGIC && t != TN_BOOL) continue;
            for (int s = 0; s < N_SHAPES; s++) {
                for (int L = 0; L < L_COUNT; L++) {
                    const shape_set *ss = &shape_sets[s];
                    tn_array *in[3] = { NULL, NULL, NULL };
                    for (int i = 0; i < n; i++) {
                        tn_dtype it = (kind_of(oc->op) == TN_EWK_WHERE && i == 0) ? TN_BOOL : (tn_dtype)t;
                        /* vary the layout per operand so mixed layouts meet */
                        layout li = (layout)((L + i) % L_COUNT);
                        if (L == L_CONTIG) li = L_CONTIG;
                        in[i] = make_input(it, ss->ndim[i], ss->shape[i], li, oc->dom[i]);
                    }
                    int64_t osh[TN_MAX_DIMS];
                    int ond = bshape(n, ss->ndim, ss->shape, osh);
                    tn_array *out = tn_array_empty(out_dtype_of(oc->op, (tn_dtype)t), ond, osh);
                    tn_dtype in_dt[3], out_dt;
                    tn_ew_instr ins;
                    int32_t oreg;
                    tn_ew_program prog = one_op(oc->op, n, (tn_dtype)t, in_dt, &ins, &oreg, &out_dt);
                    tn_result r = tn__cpu_ew_run(&prog, in, &out);
                    char what[64];
                    snprintf(what, sizeof what, "shapes#%d %s", s, layout_name[L]);
                    CHECK(r == TN_OK, "%s %s %s: %s", tn__ew_info(oc->op)->name, tn_dtype_name((tn_dtype)t), what, tn_last_error());
                    if (r == TN_OK) {
                        int bad = compare(oc->op, (tn_dtype)t, n, in, out, what);
                        CHECK(bad == 0, "%s %s %s: %d mismatches", tn__ew_info(oc->op)->name, tn_dtype_name((tn_dtype)t), what, bad);
                    }
                    runs++;
                    for (int i = 0; i < n; i++) tn_array_free(in[i]);
                    tn_array_free(out);
                }
            }
        }
    }
    CHECK(runs > 1000, "only %d runs", runs);
}

/* Casts between every pair of dtypes, with the awkward values: NaN, inf,
   out of range, negative fractions, float16 ties. */
TEST(test_engine_casts) {
    static const double vals[] = { 0.0, -0.0, 1.0, -2.7, 2.7, 0.5, 1.5, -1.5, 100.25, -100.75, 65504.0, 65520.0, 1e6,
                                   3e9, -3e9, 1e20, -1e20, INFINITY, -INFINITY, NAN, 1.0009765625, 1.00048828125,
                                   1.0 + 1.0 / 2048 + 1.0 / 1099511627776.0, 6e-8, 2147483647.0, -2147483648.0 };
    const int64_t n = (int64_t)(sizeof vals / sizeof vals[0]);
    for (int src = TN_BOOL; src < TN_DTYPE_COUNT; src++) {
        tn_array *a64 = tn_array_from_data(TN_F64, 1, &n, vals);
        tn_array *a = tn_array_astype(a64, (tn_dtype)src);
        for (int dst = TN_BOOL; dst < TN_DTYPE_COUNT; dst++) {
            tn_dtype in_dt = (tn_dtype)src, out_dt = (tn_dtype)dst;
            tn_ew_instr ins = { .op = TN_OP_CAST, .dtype = (int8_t)dst, .in_dtype = (int8_t)src, .a = 0, .b = -1, .c = -1 };
            int32_t oreg = 1;
            tn_ew_program prog = { 1, &in_dt, 1, &ins, 1, &oreg, &out_dt, NULL, NULL };
            tn_array *out = tn_array_empty(out_dt, 1, &n);
            CHECK(tn__cpu_ew_run(&prog, &a, &out) == TN_OK, "%s", tn_last_error());
            for (int64_t i = 0; i < n; i++) {
                double x = tn_array_get(a, &i);
                /* exact reference for the float64 -> float16 case with a sticky bit */
                double want = out_dt == TN_F16 && src == TN_F64 && i == 22 ? 1.0009765625 : ref_store(out_dt, x);
                if (!tn_dtype_is_float(in_dt)) {      /* exact int source: wrap, or convert once */
                    int64_t xi = src == TN_BOOL ? ((const uint8_t *)a->data)[i] : src == TN_I32 ? ((const int32_t *)a->data)[i]
                                                                                             : ((const int64_t *)a->data)[i];
                    want = out_dt == TN_I32 ? (double)(int32_t)(uint32_t)(uint64_t)xi : out_dt == TN_I64 ? (double)xi
                         : out_dt == TN_F32 ? (double)(float)xi : ref_store(out_dt, (double)xi);
                }
                double got = tn_array_get(out, &i);
                CHECK(th_close(got, want, 0, 0), "cast %s -> %s of %.17g: got %.17g want %.17g", tn_dtype_name(in_dt),
                      tn_dtype_name(out_dt), x, got, want);
            }
            tn_array_free(out);
        }
        tn_array_free(a);
        tn_array_free(a64);
    }
}

/* The engine's inline float16 conversions agree with the library's. */
TEST(test_f16_conversions) {
    for (uint32_t h = 0; h < 65536; h++) {
        float a = tn__ew_h2f((uint16_t)h), b = tn_f16_to_f32((uint16_t)h);
        CHECK(isnan(b) ? isnan(a) : memcmp(&a, &b, 4) == 0, "h2f(0x%04x) = %g, want %g", h, a, b);
        if (th_failed > 100) break;
    }
    int bad = 0;
    for (int k = 0; k < 2000000; k++) {
        uint32_t u = (uint32_t)(rnd() * 4294967296.0);
        if (k < 65536) { u = (uint32_t)k << 13 | (uint32_t)(rnd() * 8192); }
        float f;
        memcpy(&f, &u, 4);
        uint16_t x = tn__ew_f2h(f), y = tn_f32_to_f16(f);
        if (isnan(f) ? !((x & 0x7c00) == 0x7c00 && (x & 0x3ff)) : x != y) { if (bad++ < 3) fprintf(stderr, "  f2h(%a) = 0x%04x want 0x%04x\n", (double)f, x, y); }
    }
    CHECK(bad == 0, "%d float -> half mismatches", bad);
}

/* A multi-output program with casts and immediates:
   x int32, y float16 ->  u = float32(x) * 1.5 + y   (float32)
                          v = float16(u)             (float16)
                          w = u < 0                  (bool)
                          z = where(w, -3, x)        (int64, via cast)    */
TEST(test_engine_composite) {
    tn_dtype in_dt[2] = { TN_I32, TN_F16 };
    tn_ew_instr ins[] = {
        /* 2 */ { .op = TN_OP_CAST, .dtype = TN_F32, .in_dtype = TN_I32, .a = 0, .b = -1, .c = -1 },
        /* 3 */ { .op = TN_OP_CONSTANT, .dtype = TN_F32, .a = -1, .b = -1, .c = -1, .imm = 1.5 },
        /* 4 */ { .op = TN_OP_MUL, .dtype = TN_F32, .in_dtype = TN_F32, .a = 2, .b = 3, .c = -1 },
        /* 5 */ { .op = TN_OP_ADD, .dtype = TN_F32, .in_dtype = TN_F32, .a = 4, .b = 1, .c = -1 },
        /* 6 */ { .op = TN_OP_CAST, .dtype = TN_F16, .in_dtype = TN_F32, .a = 5, .b = -1, .c = -1 },
        /* 7 */ { .op = TN_OP_CONSTANT, .dtype = TN_F32, .a = -1, .b = -1, .c = -1, .imm = 0 },
        /* 8 */ { .op = TN_OP_LT, .dtype = TN_BOOL, .in_dtype = TN_F32, .a = 5, .b = 7, .c = -1 },
        /* 9 */ { .op = TN_OP_CAST, .dtype = TN_I64, .in_dtype = TN_I32, .a = 0, .b = -1, .c = -1 },
        /* 10 */ { .op = TN_OP_CONSTANT, .dtype = TN_I64, .a = -1, .b = -1, .c = -1, .imm = -3 },
        /* 11 */ { .op = TN_OP_WHERE, .dtype = TN_I64, .in_dtype = TN_I64, .a = 8, .b = 10, .c = 9 },
    };
    int32_t out_reg[4] = { 5, 6, 8, 11 };
    tn_dtype out_dt[4] = { TN_F32, TN_F16, TN_BOOL, TN_I64 };
    tn_ew_program prog = { 2, in_dt, (int)(sizeof ins / sizeof ins[0]), ins, 4, out_reg, out_dt, NULL, NULL };
    const int64_t shapes[][2] = { { 3, 1 }, { 1, 700 }, { 300, 9 } };
    for (int s = 0; s < 3; s++) {
        int64_t xs[2] = { shapes[s][0], 1 }, ys[1] = { shapes[s][1] }, os[2] = { shapes[s][0], shapes[s][1] };
        tn_array *x = make_input(TN_I32, 2, xs, L_NEGSTEP, D_WIDE);
        tn_array *y = make_input(TN_F16, 1, ys, L_STEP2, D_WIDE);
        tn_array *in[2] = { x, y }, *out[4];
        for (int j = 0; j < 4; j++) out[j] = tn_array_empty(out_dt[j], 2, os);
        CHECK(tn__cpu_ew_run(&prog, in, out) == TN_OK, "%s", tn_last_error());
        int bad = 0;
        for (int64_t i = 0; i < os[0]; i++)
            for (int64_t j = 0; j < os[1]; j++) {
                int64_t xi[2] = { i, 0 }, yi[1] = { j }, oi[2] = { i, j };
                double xv = tn_array_get(x, xi), yv = tn_array_get(y, yi);
                double u = (double)(float)((float)xv * 1.5f + (float)yv);
                double want[4] = { u, ref_store(TN_F16, u), u < 0, u < 0 ? -3 : xv };
                for (int k = 0; k < 4; k++) {
                    double got = tn_array_get(out[k], oi);
                    if (!th_close(got, want[k], 1e-7, 0) && bad++ < 3)
                        fprintf(stderr, "  output %d at (%lld, %lld): got %g want %g\n", k, (long long)i, (long long)j, got, want[k]);
                }
            }
        CHECK(bad == 0, "%d mismatches", bad);
        for (int j = 0; j < 4; j++) tn_array_free(out[j]);
        tn_array_free(x);
        tn_array_free(y);
    }
}

/* A fused program computes what the unfused ops would: int32 intermediates
   wrap, bool intermediates are 0/1, float16 intermediates round. */
TEST(test_engine_intermediate_storage) {
    tn_dtype in_dt[2] = { TN_I32, TN_I32 };
    tn_ew_instr ins[] = {
        { .op = TN_OP_ADD, .dtype = TN_I32, .in_dtype = TN_I32, .a = 0, .b = 1, .c = -1 },    /* 2: wraps */
        { .op = TN_OP_INT_DIV, .dtype = TN_I32, .in_dtype = TN_I32, .a = 2, .b = 1, .c = -1 },/* 3 */
    };
    int32_t oreg = 3;
    tn_dtype odt = TN_I32;
    tn_ew_program prog = { 2, in_dt, 2, ins, 1, &oreg, &odt, NULL, NULL };
    int32_t xv[3] = { INT32_MAX, INT32_MIN, 7 }, yv[3] = { 2, -1, -2 };
    int64_t n = 3;
    tn_array *in[2] = { tn_array_from_data(TN_I32, 1, &n, xv), tn_array_from_data(TN_I32, 1, &n, yv) };
    tn_array *out = tn_array_empty(TN_I32, 1, &n);
    CHECK(tn__cpu_ew_run(&prog, in, &out) == TN_OK, "%s", tn_last_error());
    for (int64_t i = 0; i < n; i++) {
        int32_t s = (int32_t)(uint32_t)((uint32_t)xv[i] + (uint32_t)yv[i]);
        int64_t q = (int64_t)floor((double)s / yv[i]);
        double want = (double)(int32_t)(uint32_t)(uint64_t)q;
        CHECK(tn_array_get(out, &i) == want, "element %lld: got %g want %g", (long long)i, tn_array_get(out, &i), want);
    }
    tn_array_free(in[0]); tn_array_free(in[1]); tn_array_free(out);
}

/* Large arrays take the threaded path; results must not depend on the split. */
TEST(test_engine_threads) {
    int64_t n = (1 << 21) + 37, sh2[2] = { 1031, 2053 }, row[1] = { 2053 };
    tn_array *a = make_input(TN_F32, 1, &n, L_CONTIG, D_ANY), *b = make_input(TN_F32, 1, &n, L_STEP2, D_ANY);
    tn_array *out = tn_array_empty(TN_F32, 1, &n);
    tn_dtype in_dt[3], odt;
    tn_ew_instr ins;
    int32_t oreg;
    tn_ew_program prog = one_op(TN_OP_MUL, 2, TN_F32, in_dt, &ins, &oreg, &odt);
    tn_array *in[2] = { a, b };
    CHECK(tn__cpu_ew_run(&prog, in, &out) == TN_OK, "%s", tn_last_error());
    const float *pa = (const float *)a->data, *po = (const float *)out->data;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float bv = *(const float *)((const char *)b->data + i * b->strides[0]);
        if (po[i] != pa[i] * bv) bad++;
    }
    CHECK(bad == 0, "%d mismatches in the threaded contiguous case", bad);
    tn_array_free(a); tn_array_free(b); tn_array_free(out);

    /* transposed matrix + broadcast row, float64 out */
    tn_array *m = make_input(TN_F64, 2, sh2, L_TRANSPOSED, D_ANY), *r = make_input(TN_F64, 1, row, L_NEGSTEP, D_ANY);
    tn_array *o2 = tn_array_empty(TN_F64, 2, sh2);
    prog = one_op(TN_OP_SUB, 2, TN_F64, in_dt, &ins, &oreg, &odt);
    tn_array *in2[2] = { m, r };
    CHECK(tn__cpu_ew_run(&prog, in2, &o2) == TN_OK, "%s", tn_last_error());
    bad = 0;
    for (int64_t i = 0; i < sh2[0]; i += 7)
        for (int64_t j = 0; j < sh2[1]; j++) {
            int64_t ij[2] = { i, j };
            if (tn_array_get(o2, ij) != tn_array_get(m, ij) - tn_array_get(r, &j)) bad++;
        }
    CHECK(bad == 0, "%d mismatches in the threaded strided case", bad);
    tn_array_free(m); tn_array_free(r); tn_array_free(o2);
}

/* NaN rules: minimum/maximum propagate NaN (NumPy), sign(NaN) is NaN,
   comparisons with NaN are false except !=. */
TEST(test_engine_nan) {
    double xv[4] = { NAN, 1, NAN, -2 }, yv[4] = { 1, NAN, NAN, 3 };
    int64_t n = 4;
    int ops[] = { TN_OP_MINIMUM, TN_OP_MAXIMUM, TN_OP_SIGN, TN_OP_LT, TN_OP_NEQ, TN_OP_EQ };
    for (int t = TN_F16; t <= TN_F64; t++) {
        tn_array *x64 = tn_array_from_data(TN_F64, 1, &n, xv), *y64 = tn_array_from_data(TN_F64, 1, &n, yv);
        tn_array *in[2] = { tn_array_astype(x64, (tn_dtype)t), tn_array_astype(y64, (tn_dtype)t) };
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            int ar = tn__ew_info(ops[k])->arity;
            tn_dtype in_dt[3], odt;
            tn_ew_instr ins;
            int32_t oreg;
            tn_ew_program prog = one_op(ops[k], ar, (tn_dtype)t, in_dt, &ins, &oreg, &odt);
            tn_array *out = tn_array_empty(odt, 1, &n);
            CHECK(tn__cpu_ew_run(&prog, in, &out) == TN_OK, "%s", tn_last_error());
            CHECK(compare(ops[k], (tn_dtype)t, ar, in, out, "nan") == 0, "%s %s", tn__ew_info(ops[k])->name, tn_dtype_name((tn_dtype)t));
            tn_array_free(out);
        }
        tn_array_free(in[0]); tn_array_free(in[1]); tn_array_free(x64); tn_array_free(y64);
    }
}

/* Int edge cases: Python floor division and mod by negative numbers, pow
   with wrap, int32 add wraps like NumPy, division by zero gives 0 (no trap). */
TEST(test_engine_int_edges) {
    int64_t a[] = { 7, -7, 7, -7, INT64_MIN, 3, -3, 2, 0, -1 };
    int64_t b[] = { 2, 2, -2, -2, -1, 0, 40, 63, 0, -3 };
    int64_t n = 10;
    tn_array *in[2] = { tn_array_from_data(TN_I64, 1, &n, a), tn_array_from_data(TN_I64, 1, &n, b) };
    int ops[] = { TN_OP_INT_DIV, TN_OP_MOD, TN_OP_POW };
    for (int k = 0; k < 3; k++) {
        tn_dtype in_dt[3], odt;
        tn_ew_instr ins;
        int32_t oreg;
        tn_ew_program prog = one_op(ops[k], 2, TN_I64, in_dt, &ins, &oreg, &odt);
        tn_array *out = tn_array_empty(TN_I64, 1, &n);
        CHECK(tn__cpu_ew_run(&prog, in, &out) == TN_OK, "%s", tn_last_error());
        const int64_t *o = (const int64_t *)out->data;
        for (int i = 0; i < n; i++) {
            int64_t want;
            if (ops[k] == TN_OP_POW && b[i] < 0) {   /* no int result: 1 and -1 have one, others truncate to 0 */
                want = a[i] == 1 ? 1 : a[i] == -1 ? ((b[i] & 1) ? -1 : 1) : 0;
            } else if (ops[k] == TN_OP_POW) {
                uint64_t r = 1;
                for (int64_t e = 0; e < b[i]; e++) r *= (uint64_t)a[i];
                want = (int64_t)r;
            } else if (b[i] == 0) want = 0;
            else if (b[i] == -1) want = ops[k] == TN_OP_MOD ? 0 : (int64_t)(0 - (uint64_t)a[i]);
            else want = ops[k] == TN_OP_INT_DIV ? ref_ifloordiv(a[i], b[i]) : ref_imod(a[i], b[i]);
            CHECK(o[i] == want, "%s(%lld, %lld) = %lld, want %lld", tn__ew_info(ops[k])->name, (long long)a[i], (long long)b[i],
                  (long long)o[i], (long long)want);
        }
        tn_array_free(out);
    }
    tn_array_free(in[0]); tn_array_free(in[1]);
}

/* The inverse trigonometric and hyperbolic ops, erfc and relu at their
   special values, in float16/32/64: domain edges (asin(1), acosh(1),
   atanh(+-1) = +-inf), out of domain (NaN), NaN, +-inf, -0 (the sign of a
   zero result is checked), overflow; against libm in float64. */
TEST(test_engine_new_ops_edges) {
    static const double vals[] = { 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.0, 30.0, -30.0, 1000.0, -1000.0,
                                   INFINITY, -INFINITY, NAN, 1e-30, -1e-30 };
    const int64_t n = (int64_t)(sizeof vals / sizeof vals[0]);
    const int ops[] = { TN_OP_ASIN, TN_OP_ACOS, TN_OP_ATAN, TN_OP_SINH, TN_OP_COSH, TN_OP_ASINH, TN_OP_ACOSH,
                        TN_OP_ATANH, TN_OP_ERFC, TN_OP_RELU };
    /* a few exact values the reference must give (so the test checks the cases named) */
    CHECK(asin(1.0) == 1.57079632679489661923 && acosh(1.0) == 0 && atanh(1.0) == INFINITY && atanh(-1.0) == -INFINITY && isnan(asin(1.5)) &&
          isnan(acosh(0.5)) && isnan(atanh(2.0)) && erfc(-INFINITY) == 2, "libm reference");
    for (int t = TN_F16; t <= TN_F64; t++) {
        tn_array *x64 = tn_array_from_data(TN_F64, 1, &n, vals);
        tn_array *x = tn_array_astype(x64, (tn_dtype)t);
        for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
            tn_dtype in_dt[3], odt;
            tn_ew_instr ins;
            int32_t oreg;
            tn_ew_program prog = one_op(ops[k], 1, (tn_dtype)t, in_dt, &ins, &oreg, &odt);
            tn_array *out = tn_array_empty(odt, 1, &n);
            CHECK(tn__cpu_ew_run(&prog, &x, &out) == TN_OK, "%s", tn_last_error());
            CHECK(compare(ops[k], (tn_dtype)t, 1, &x, out, "edges") == 0, "%s %s", tn__ew_info(ops[k])->name, tn_dtype_name((tn_dtype)t));
            for (int64_t i = 0; i < n; i++) {
                double xv = tn_array_get(x, &i), want = ref_store((tn_dtype)t, ref_op(ops[k], false, xv, 0, 0)), got = tn_array_get(out, &i);
                if (want == 0 && got == 0)
                    CHECK(!signbit(want) == !signbit(got), "%s(%g) %s: the zero's sign: got %g want %g", tn__ew_info(ops[k])->name, xv,
                          tn_dtype_name((tn_dtype)t), got, want);
            }
            tn_array_free(out);
        }
        /* spot values by name */
        int64_t i1 = 2, im1 = 3, iz = 1;   /* 1.0, -1.0, -0.0 */
        double r[5];
        int spot_ops[5] = { TN_OP_ASIN, TN_OP_ACOSH, TN_OP_ATANH, TN_OP_ATANH, TN_OP_RELU };
        int64_t spot_at[5] = { i1, i1, i1, im1, iz };
        for (int s = 0; s < 5; s++) {
            tn_dtype in_dt[3], odt;
            tn_ew_instr ins;
            int32_t oreg;
            tn_ew_program prog = one_op(spot_ops[s], 1, (tn_dtype)t, in_dt, &ins, &oreg, &odt);
            tn_array *out = tn_array_empty(odt, 1, &n);
            tn__cpu_ew_run(&prog, &x, &out);
            r[s] = tn_array_get(out, &spot_at[s]);
            tn_array_free(out);
        }
        CHECK(th_close(r[0], ref_store((tn_dtype)t, 1.57079632679489661923), 1e-6, 0), "asin(1) = %g", r[0]);
        CHECK(r[1] == 0 && !signbit(r[1]), "acosh(1) = %g", r[1]);
        CHECK(r[2] == INFINITY && r[3] == -INFINITY, "atanh(+-1) = %g, %g", r[2], r[3]);
        CHECK(r[4] == 0 && !signbit(r[4]), "relu(-0) = %g is +0", r[4]);
        tn_array_free(x);
        tn_array_free(x64);
    }
}

/* The activations at their special values, in float16/32/64: NaN, +-inf,
   -0 (the sign of a zero result is checked: gelu(-inf) and silu(-1000) are
   -0, hard_sigmoid(-0) is 0.5), denormals, values where exp overflows or
   erfc underflows; leaky_relu and elu with alpha 0.2 and 1.5. Then spot
   values worked out by hand. */
TEST(test_engine_activation_edges) {
    static const double vals[] = { 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 2.9, -2.9, 30.0, -30.0, 100.0, -100.0,
                                   1000.0, -1000.0, 1e35, -1e35, INFINITY, -INFINITY, NAN, 1e-30, -1e-30, 4e-310, -4e-310 };
    const int64_t n = (int64_t)(sizeof vals / sizeof vals[0]);
    const int ops[] = { TN_OP_LEAKY_RELU, TN_OP_ELU, TN_OP_SELU, TN_OP_GELU, TN_OP_GELU_TANH, TN_OP_SOFTSIGN,
                        TN_OP_HARD_SIGMOID, TN_OP_SILU, TN_OP_MISH };
    const double alphas[] = { 0.2, 1.5 };
    for (int t = TN_F16; t <= TN_F64; t++)
        for (int al = 0; al < 2; al++) {
            tn_array *x64 = tn_array_from_data(TN_F64, 1, &n, vals);
            tn_array *in[2] = { tn_array_astype(x64, (tn_dtype)t), tn_array_full((tn_dtype)t, 1, &n, alphas[al]) };
            for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
                int ar = tn__ew_info(ops[k])->arity;
                if (ar == 1 && al == 1) continue;
                tn_dtype in_dt[3], odt;
                tn_ew_instr ins;
                int32_t oreg;
                tn_ew_program prog = one_op(ops[k], ar, (tn_dtype)t, in_dt, &ins, &oreg, &odt);
                tn_array *out = tn_array_empty(odt, 1, &n);
                CHECK(tn__cpu_ew_run(&prog, in, &out) == TN_OK, "%s", tn_last_error());
                CHECK(compare(ops[k], (tn_dtype)t, ar, in, out, "edges") == 0, "%s %s", tn__ew_info(ops[k])->name, tn_dtype_name((tn_dtype)t));
                for (int64_t i = 0; i < n; i++) {
                    double xv = tn_array_get(in[0], &i), av = tn_array_get(in[1], &i);
                    double want = ref_store((tn_dtype)t, ref_op(ops[k], false, xv, av, 0)), got = tn_array_get(out, &i);
                    if (want == 0 && got == 0)
                        CHECK(!signbit(want) == !signbit(got), "%s(%g) %s: the zero's sign: got %g want %g", tn__ew_info(ops[k])->name, xv,
                              tn_dtype_name((tn_dtype)t), got, want);
                }
                tn_array_free(out);
            }
            tn_array_free(in[0]);
            tn_array_free(in[1]);
            tn_array_free(x64);
        }
    /* by hand, float64 */
    struct { int op; double x, alpha, want; } spot[] = {
        { TN_OP_LEAKY_RELU, -2.0, 0.25, -0.5 }, { TN_OP_LEAKY_RELU, 2.0, 0.25, 2.0 }, { TN_OP_ELU, -INFINITY, 1.5, -1.5 },
        { TN_OP_ELU, 0.0, 1.5, 0.0 }, { TN_OP_SELU, 1.0, 0, 1.0507009873554805 }, { TN_OP_SELU, -INFINITY, 0, -1.7580993408473766 },
        { TN_OP_GELU, 1.0, 0, 0.8413447460685429 }, { TN_OP_GELU, -1.0, 0, -0.15865525393145707 },
        { TN_OP_GELU_TANH, 1.0, 0, 0.8411919906082768 }, { TN_OP_SOFTSIGN, 3.0, 0, 0.75 }, { TN_OP_SOFTSIGN, -INFINITY, 0, -1.0 },
        { TN_OP_HARD_SIGMOID, 0.0, 0, 0.5 }, { TN_OP_HARD_SIGMOID, 1.5, 0, 0.75 }, { TN_OP_HARD_SIGMOID, -3.5, 0, 0.0 },
        { TN_OP_HARD_SIGMOID, 3.0, 0, 1.0 }, { TN_OP_SILU, 1.0, 0, 0.7310585786300049 }, { TN_OP_MISH, 1.0, 0, 0.8650983882673103 },
        { TN_OP_MISH, INFINITY, 0, INFINITY },
    };
    for (size_t k = 0; k < sizeof spot / sizeof spot[0]; k++) {
        int64_t one = 1;
        tn_array *in[2] = { tn_array_full(TN_F64, 1, &one, spot[k].x), tn_array_full(TN_F64, 1, &one, spot[k].alpha) };
        tn_dtype in_dt[3], odt;
        tn_ew_instr ins;
        int32_t oreg;
        tn_ew_program prog = one_op(spot[k].op, tn__ew_info(spot[k].op)->arity, TN_F64, in_dt, &ins, &oreg, &odt);
        tn_array *out = tn_array_empty(odt, 1, &one);
        int64_t i0 = 0;
        double got = tn__cpu_ew_run(&prog, in, &out) == TN_OK ? tn_array_get(out, &i0) : NAN;
        CHECK(th_close(got, spot[k].want, 1e-15, 0), "%s(%g) = %.17g, want %.17g", tn__ew_info(spot[k].op)->name, spot[k].x, got, spot[k].want);
        tn_array_free(out);
        tn_array_free(in[0]);
        tn_array_free(in[1]);
    }
}

/* Engine errors: inputs that do not broadcast to the output, bad programs. */
TEST(test_engine_errors) {
    int64_t s34[2] = { 3, 4 }, s54[2] = { 5, 4 };
    tn_array *a = tn_array_zeros(TN_F32, 2, s34), *b = tn_array_zeros(TN_F32, 2, s54), *o = tn_array_empty(TN_F32, 2, s34);
    tn_dtype in_dt[3], odt;
    tn_ew_instr ins;
    int32_t oreg;
    tn_ew_program prog = one_op(TN_OP_ADD, 2, TN_F32, in_dt, &ins, &oreg, &odt);
    tn_array *in[2] = { a, b };
    CHECK(tn__cpu_ew_run(&prog, in, &o) == TN_ERR_SHAPE, "want a shape error");
    CHECK_ERR(TN_ERR_SHAPE, "(5, 4)");
    CHECK_ERR(TN_ERR_SHAPE, "(3, 4)");
    ins.a = 7;
    in[1] = a;
    CHECK(tn__cpu_ew_run(&prog, in, &o) == TN_ERR_INTERNAL, "want an internal error");
    CHECK_ERR(TN_ERR_INTERNAL, "register 7");
    ins.a = 0;
    in_dt[0] = TN_I64;       /* register 0 holds int64 but add reads float */
    CHECK(tn__cpu_ew_run(&prog, in, &o) == TN_ERR_INTERNAL, "want an internal error");
    CHECK_ERR(TN_ERR_INTERNAL, "add");
    tn_array_free(a); tn_array_free(b); tn_array_free(o);
}

/* >>constructors --------------------------------------------------------- */

TEST(test_constructor_types) {
    tn_graph *g = tn_graph_new();
    tn_var *xf = tn_matrix(g, "xf", TN_F32), *xi = tn_vector(g, "xi", TN_I32), *xd = tn_vector(g, "xd", TN_F64);
    tn_var *xb = tn_vector(g, "xb", TN_BOOL), *xh = tn_vector(g, "xh", TN_F16), *xl = tn_vector(g, "xl", TN_I64);
    tn_var *v = tn_add(xf, xi);
    CHECK(v && v->type.dtype == TN_F32 && v->type.ndim == 2, "f32 + i32 is a f32 matrix");
    CHECK(v && v->in[1]->op == TN_OP_CAST && v->in[1]->in[0] == xi, "the int operand is cast");
    v = tn_add(xf, xd);
    CHECK(v && v->type.dtype == TN_F64 && v->in[0]->op == TN_OP_CAST, "f32 + f64 is f64");
    v = tn_mul(xh, tn_lit(xh, 2.0));
    CHECK(v && v->type.dtype == TN_F16, "f16 * 2.0 stays f16");
    CHECK(v && v->in[1]->op == TN_OP_CONSTANT && v->in[1]->type.dtype == TN_F16, "the literal becomes a f16 constant, not a cast");
    v = tn_mul(xi, tn_lit(xi, 3.0));
    CHECK(v && v->type.dtype == TN_I32 && v->in[1]->op == TN_OP_CONSTANT, "i32 * 3 stays i32");
    v = tn_mul(xi, tn_lit(xi, 2.5));
    CHECK(v && v->type.dtype == TN_F64, "i32 * 2.5 is f64");
    v = tn_add(xb, tn_lit(xb, 1));
    CHECK(v && v->type.dtype == TN_I64, "bool + 1 is i64");
    CHECK(tn_exp(xi) && tn_exp(xi)->type.dtype == TN_F64, "exp(int32) is f64");
    CHECK(tn_exp(xh) && tn_exp(xh)->type.dtype == TN_F16, "exp(f16) stays f16");
    CHECK(tn_div(xi, xl) && tn_div(xi, xl)->type.dtype == TN_F64, "int / int is f64");
    CHECK(tn_int_div(xi, xl) && tn_int_div(xi, xl)->type.dtype == TN_I64, "int // int is int");
    v = tn_lt(xf, xi);
    CHECK(v && v->type.dtype == TN_BOOL && v->in[1]->type.dtype == TN_F32, "compare promotes, gives bool");
    v = tn_and(xb, xi);
    CHECK(v && v->type.dtype == TN_BOOL && v->in[1]->op == TN_OP_CAST, "logic casts ints to bool");
    v = tn_where(xi, xf, xd);
    CHECK(v && v->type.dtype == TN_F64 && v->in[0]->type.dtype == TN_BOOL, "where(cond, f32, f64) is f64, cond bool");
    CHECK(tn_switch(xb, xi, xl) && tn_switch(xb, xi, xl)->type.dtype == TN_I64, "switch");
    CHECK(tn_cast(xf, TN_F32) == xf, "a cast to the same dtype is the variable itself");
    v = tn_cast(xf, TN_I64);
    CHECK(v && v->op == TN_OP_CAST && v->type.dtype == TN_I64 && tn__p_cast_dtype(&v->p) == TN_I64, "cast");
    v = tn_clip(xf, tn_lit(xf, 0), tn_lit(xf, 1));
    CHECK(v && v->type.dtype == TN_F32, "clip with literals");
    /* the new ops: FLOAT kinds make ints float64, relu keeps ints */
    tn_var *(*const fl_ops[])(tn_var *) = { tn_atan, tn_asin, tn_acos, tn_sinh, tn_cosh, tn_asinh, tn_acosh, tn_atanh, tn_erfc };
    for (size_t k = 0; k < sizeof fl_ops / sizeof fl_ops[0]; k++) {
        CHECK(fl_ops[k](xi) && fl_ops[k](xi)->type.dtype == TN_F64, "op %zu of int32 is f64", k);
        CHECK(fl_ops[k](xh) && fl_ops[k](xh)->type.dtype == TN_F16, "op %zu of f16 stays f16", k);
    }
    CHECK(tn_relu(xi) && tn_relu(xi)->type.dtype == TN_I32 && tn_relu(xh)->type.dtype == TN_F16, "relu keeps the dtype");
    /* broadcasting at build time: (3, 1) + (1, 4) is (3, 4); unknowns stay unknown */
    tn_var *c31 = tn_input(g, "c", TN_F32, 2, (int64_t[]){ 3, 1 }, NULL), *r14 = tn_input(g, "r", TN_F32, 2, (int64_t[]){ 1, 4 }, NULL);
    v = tn_add(c31, r14);
    CHECK(v && v->type.shape[0] == 3 && v->type.shape[1] == 4 && !v->type.bcast[0] && !v->type.bcast[1], "(3,1)+(1,4)");
    tn_var *u = tn_input(g, "u", TN_F32, 3, (int64_t[]){ -1, -1, 4 }, NULL);
    v = tn_mul(u, r14);
    CHECK(v && v->type.ndim == 3 && v->type.shape[0] == -1 && v->type.shape[1] == -1 && v->type.shape[2] == 4, "(?,?,4)*(1,4)");
    tn_var *rr = tn_row(g, "row", TN_F32);
    v = tn_add(rr, tn_row(g, "row2", TN_F32));
    CHECK(v && v->type.bcast[0] && !v->type.bcast[1], "row + row keeps dim 0 broadcastable");
    v = tn_add(rr, xf);
    CHECK(v && !v->type.bcast[0], "row + matrix: not broadcastable");
    tn_graph_free(g);
}

TEST(test_constructor_errors) {
    tn_graph *g = tn_graph_new(), *g2 = tn_graph_new();
    tn_var *a = tn_input(g, "a", TN_F32, 2, (int64_t[]){ 3, 4 }, NULL), *b = tn_input(g, "b", TN_F32, 2, (int64_t[]){ 5, 4 }, NULL);
    CHECK(tn_add(a, b) == NULL, "(3,4) + (5,4) must fail");
    CHECK_ERR(TN_ERR_SHAPE, "tn_add");
    CHECK_ERR(TN_ERR_SHAPE, "(3, 4)");
    CHECK_ERR(TN_ERR_SHAPE, "(5, 4)");
    CHECK_ERR(TN_ERR_SHAPE, "'b'");
    /* a known 0 meets a known 3 whatever the order, and with an unknown dim between them */
    tn_var *z = tn_input(g, "z", TN_F32, 1, (int64_t[]){ 0 }, NULL), *t = tn_input(g, "t", TN_F32, 1, (int64_t[]){ 3 }, NULL);
    tn_var *q = tn_vector(g, "q", TN_F32);
    CHECK(tn_add(z, t) == NULL, "(0,) + (3,) must fail");
    CHECK_ERR(TN_ERR_SHAPE, "cannot broadcast");
    CHECK(tn_add(t, z) == NULL, "(3,) + (0,) must fail");
    CHECK_ERR(TN_ERR_SHAPE, "cannot broadcast");
    CHECK(tn_where(tn_cast(z, TN_BOOL), q, t) == NULL, "where((0,), (?,), (3,)) must fail");
    CHECK_ERR(TN_ERR_SHAPE, "tn_where: cannot broadcast");
    tn_var *c = tn_vector(g2, "c", TN_F32);
    CHECK(tn_mul(a, c) == NULL, "graphs differ");
    CHECK_ERR(TN_ERR_GRAPH, "tn_mul");
    CHECK_ERR(TN_ERR_GRAPH, "'c'");
    tn_clear_error();
    CHECK(tn_sub(a, NULL) == NULL, "NULL b");
    CHECK_ERR(TN_ERR_NULL, "tn_sub: argument b is NULL");
    /* an earlier failure's message is kept */
    tn_var *bad = tn_add(a, b);
    CHECK(tn_exp(bad) == NULL, "NULL from an earlier failure");
    CHECK_ERR(TN_ERR_NULL, "tn_exp: argument a is NULL");
    CHECK_ERR(TN_ERR_NULL, "(5, 4)");
    tn_var *f = tn_vector(g, "f", TN_F64);
    CHECK(tn_and(f, tn_vector(g, "bb", TN_BOOL)) == NULL, "logic on floats");
    CHECK_ERR(TN_ERR_DTYPE, "tn_and");
    CHECK_ERR(TN_ERR_DTYPE, "float64");
    CHECK(tn_not(f) == NULL, "not on floats");
    CHECK_ERR(TN_ERR_DTYPE, "'f'");
    CHECK(tn_sub(tn_vector(g, "p", TN_BOOL), tn_vector(g, "q", TN_BOOL)) == NULL, "bool - bool");
    CHECK_ERR(TN_ERR_DTYPE, "tn_xor");
    CHECK(tn_cast(f, (tn_dtype)42) == NULL, "bad dtype");
    CHECK_ERR(TN_ERR_DTYPE, "tn_cast");
    CHECK(tn_where(NULL, f, f) == NULL, "NULL cond");
    CHECK_ERR(TN_ERR_NULL, "argument cond");
    CHECK(tn_lit(NULL, 1) == NULL, "tn_lit(NULL)");
    CHECK_ERR(TN_ERR_NULL, "tn_lit");
    tn_graph_free(g);
    tn_graph_free(g2);
}

/* >>labels and the op table ---------------------------------------------- */

static void label_of(const tn_var *v, char *buf, size_t cap) {
    buf[0] = 0;
    const tn_op_def *d = tn__op_def(v->op);
    if (d && d->label) d->label(v, buf, cap);
}

TEST(test_labels_and_info) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32), *y = tn_vector(g, "y", TN_F32);
    char buf[256];
    label_of(tn_exp(x), buf, sizeof buf);
    CHECK(strcmp(buf, "Elemwise{exp,no_inplace}") == 0, "got '%s'", buf);
    tn_var *s = tn_add(x, y);
    s->inplace = 1;
    label_of(s, buf, sizeof buf);
    CHECK(strcmp(buf, "Elemwise{add,inplace}") == 0, "got '%s'", buf);
    label_of(tn_cast(x, TN_F64), buf, sizeof buf);
    CHECK(strcmp(buf, "Elemwise{Cast{float64}}") == 0, "got '%s'", buf);
    label_of(tn_atanh(x), buf, sizeof buf);
    CHECK(strcmp(buf, "Elemwise{atanh,no_inplace}") == 0, "got '%s'", buf);
    label_of(tn_relu(x), buf, sizeof buf);
    CHECK(strcmp(buf, "Elemwise{relu,no_inplace}") == 0, "got '%s'", buf);
    /* Composite{exp((i0 * i1))} */
    tn_dtype in_dt[2] = { TN_F32, TN_F32 }, odt = TN_F32;
    tn_ew_instr ins[2] = { { .op = TN_OP_MUL, .dtype = TN_F32, .in_dtype = TN_F32, .a = 0, .b = 1, .c = -1 },
                           { .op = TN_OP_EXP, .dtype = TN_F32, .in_dtype = TN_F32, .a = 2, .b = -1, .c = -1 } };
    int32_t oreg = 3;
    tn_ew_program prog = { 2, in_dt, 2, ins, 1, &oreg, &odt, NULL, NULL };
    tn_var *xy[2] = { x, y };
    tn_var *comp = tn__node(g, TN_OP_COMPOSITE, 2, xy, NULL, &prog, "test");
    CHECK(comp != NULL, "%s", tn_last_error());
    if (comp) {
        label_of(comp, buf, sizeof buf);
        CHECK(strcmp(buf, "Elemwise{Composite{exp((i0 * i1))}}") == 0, "got '%s'", buf);
        CHECK(comp->type.dtype == TN_F32 && comp->type.ndim == 1, "composite type");
        label_of(comp, buf, 12);
        CHECK(strlen(buf) == 11, "a short buffer truncates: '%s'", buf);
    }
    /* every elementwise op is registered, its expressions are text */
    for (int op = TN_OP_IDENTITY; op <= TN_OP_CAST; op++) {
        const tn_op_def *d = tn__op_def(op);
        const tn_ew_info *e = tn__ew_info(op);
        CHECK(d && d->kind == TN_OPK_ELEMWISE && d->infer && d->cpu && d->label, "op %d registered", op);
        CHECK(e && e->name && e->fexpr && e->iexpr && e->arity == d->arity, "op %d info", op);
        if (!d || !e) continue;
        /* the row is the whole op: derivative, flags; its name is the table's */
        CHECK(d->vjp && d->jvp, "%s: vjp and jvp from the derivative column", e->name);
        CHECK((d->flags & (TN_OPF_ELEMWISE | TN_OPF_INPLACE)) == (TN_OPF_ELEMWISE | TN_OPF_INPLACE), "%s: flags %#x", e->name, d->flags);
        CHECK(strcmp(d->name, op == TN_OP_CAST ? "Cast" : e->name) == 0, "row name %s, table name %s", d->name, e->name);
        bool discrete = op == TN_OP_INT_DIV || op == TN_OP_SIGN || op == TN_OP_FLOOR || op == TN_OP_CEIL || op == TN_OP_ROUND ||
                        e->kind == TN_EWK_CMP || e->kind == TN_EWK_LOGIC;
        CHECK(!(d->flags & TN_OPF_DISCRETE) == !discrete, "%s: TN_DISCRETE in the derivative column %s", e->name, discrete ? "expected" : "unexpected");
    }
    CHECK(strstr(tn__ew_info(TN_OP_EXP)->fexpr, "TN_F(exp)(a)") != NULL, "exp text: %s", tn__ew_info(TN_OP_EXP)->fexpr);
    CHECK(strstr(tn__scalar_helpers_source(), "tn__ifloordiv") != NULL, "helpers text");
    CHECK(strstr(tn__scalar_helpers_source(), "tn__floordivf(") && strstr(tn__scalar_helpers_source(), "tn__floormod("),
          "helpers text: float floor division for float and double: %s", tn__scalar_helpers_source());
    CHECK(tn__ew_info(TN_OP_SUM) == NULL && tn__ew_info(0) == NULL, "non-elementwise ops have no info");
    CHECK(tn__op_def(TN_OP_COMPOSITE)->kind == TN_OPK_COMPOSITE, "composite registered");
    /* the cached program of a node */
    tn_var *e1 = tn_exp(tn_vector(g, "i", TN_I32));
    tn_ew_program *p1 = tn__ew_program_of(e1);
    CHECK(p1 && p1 == tn__ew_program_of(e1), "program cached");
    CHECK(p1 && p1->n_in == 1 && p1->n_out == 1 && p1->instr[p1->n_instr - 1].op == TN_OP_EXP, "program of exp");
    tn_graph_free(g);
}

/* >>through tn_function -------------------------------------------------- */

/* The public constructor of each op, from the same table. */
typedef void (*any_fn)(void);
static any_fn op_ctor(int op) {
    switch (op) {
#define X_CTOR(E, n, ar, k, fe, ie, d) X_CTOR_##k(E, n)
#define X_CTOR_TN_EWK_ARITH(E, n) case TN_OP_##E: return (any_fn)tn_##n;
#define X_CTOR_TN_EWK_FLOAT(E, n) case TN_OP_##E: return (any_fn)tn_##n;
#define X_CTOR_TN_EWK_CMP(E, n) case TN_OP_##E: return (any_fn)tn_##n;
#define X_CTOR_TN_EWK_LOGIC(E, n) case TN_OP_##E: return (any_fn)tn_##n;
#define X_CTOR_TN_EWK_WHERE(E, n) case TN_OP_##E: return (any_fn)tn_##n;
#define X_CTOR_TN_EWK_CAST(E, n)
    TN_EW_OPS(X_CTOR)
    default: return NULL;
    }
}

/* Each op on each dtype through a compiled function, with broadcast inputs
   and a non-contiguous one. */
TEST(test_function_ops) {
    int shapes_nd[3] = { 2, 2, 1 };
    const int64_t shapes[3][TN_MAX_DIMS] = { { 3, 1 }, { 1, 4 }, { 4 } };
    int done = 0;
    for (int c = 0; c < N_CASES; c++) {
        const op_case *oc = &cases[c];
        int n = tn__ew_info(oc->op)->arity;
        for (int t = TN_BOOL; t < TN_DTYPE_COUNT; t++) {
            unsigned ok = oc->dtypes | (kind_of(oc->op) == TN_EWK_FLOAT ? I_ALL : 0);   /* ints go to float64 */
            if (!(ok & (1u << t))) continue;
            tn_graph *g = tn_graph_new();
            tn_var *v[3];
            tn_array *in[3];
            for (int i = 0; i < n; i++) {
                tn_dtype it = (kind_of(oc->op) == TN_EWK_WHERE && i == 0) ? TN_BOOL : (tn_dtype)t;
                char name[16];
                snprintf(name, sizeof name, "x%d", i);
                v[i] = tn_input(g, name, it, shapes_nd[i], shapes[i], NULL);
                in[i] = make_input(it, shapes_nd[i], shapes[i], i == 1 ? L_STEP2 : L_NEGSTEP, oc->dom[i]);
            }
            tn_var *y = NULL;
            switch (n) {
            case 1: y = ((tn_var *(*)(tn_var *))op_ctor(oc->op))(v[0]); break;
            case 2: y = ((tn_var *(*)(tn_var *, tn_var *))op_ctor(oc->op))(v[0], v[1]); break;
            default: y = ((tn_var *(*)(tn_var *, tn_var *, tn_var *))op_ctor(oc->op))(v[0], v[1], v[2]); break;
            }
            CHECK(y != NULL, "%s(%s): %s", tn__ew_info(oc->op)->name, tn_dtype_name((tn_dtype)t), tn_last_error());
            tn_func *f = y ? tn_function(g, &(tn_func_desc){ .n_inputs = n, .inputs = v, .n_outputs = 1, .outputs = &y }) : NULL;
            CHECK(!y || f, "tn_function: %s", tn_last_error());
            tn_array *out = NULL;
            if (f) {
                tn_result r = tn_call(f, in, &out);
                CHECK(r == TN_OK, "tn_call %s(%s): %s", tn__ew_info(oc->op)->name, tn_dtype_name((tn_dtype)t), tn_last_error());
                if (r == TN_OK) {
                    tn_dtype opd = (tn_dtype)t;
                    int k = kind_of(oc->op);
                    if (k == TN_EWK_FLOAT && !tn_dtype_is_float(opd)) opd = TN_F64;
                    if (k == TN_EWK_LOGIC) opd = TN_BOOL;
                    CHECK(out->dtype == (k == TN_EWK_CMP || k == TN_EWK_LOGIC ? TN_BOOL : opd), "output dtype %s", tn_dtype_name(out->dtype));
                    CHECK(compare(oc->op, opd, n, in, out, "function") == 0, "%s(%s) through tn_call", tn__ew_info(oc->op)->name,
                          tn_dtype_name((tn_dtype)t));
                    done++;
                }
            }
            tn_array_free(out);
            tn_function_free(f);
            for (int i = 0; i < n; i++) tn_array_free(in[i]);
            tn_graph_free(g);
        }
    }
    CHECK(done > 150, "only %d ops ran through tn_call", done);
}

/* The activations fuse: one Composite for a chain of them with literal
   alphas (the literals become immediates of the operand's dtype), on float32. */
TEST(test_activations_fuse) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    tn_var *l = tn_leaky_relu(x, tn_lit(x, 0.125)), *e = tn_elu(x, tn_lit(x, 1.5));
    CHECK(l && e && l->type.dtype == TN_F32 && e->type.dtype == TN_F32 && l->in[1]->type.dtype == TN_F32, "literal alphas keep float32");
    tn_var *y = tn_add(tn_add(tn_mul(tn_gelu(x), tn_silu(l)), tn_sub(tn_mish(e), tn_softsign(x))),
                       tn_add(tn_hard_sigmoid(x), tn_mul(tn_selu(x), tn_gelu_tanh(x))));
    tn_func *f = y ? tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y }) : NULL;
    CHECK(f, "%s", tn_last_error());
    if (f) {
        FILE *m = tmpfile();
        char buf[4096] = { 0 };
        tn_debugprint_function(f, m);
        rewind(m);
        size_t len = fread(buf, 1, sizeof buf - 1, m);
        fclose(m);
        buf[len] = 0;
        int comps = 0;
        for (const char *q = buf; (q = strstr(q, "Composite{")); q++) comps++;
        CHECK(comps == 1 && strstr(buf, "gelu_tanh") && strstr(buf, "leaky_relu"), "one fused kernel:\n%s", buf);
        int64_t n = 257;
        tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &n, -4, 4, 5), *out = NULL;
        CHECK(tn_call(f, &xv, &out) == TN_OK, "%s", tn_last_error());
        double worst = 0;
        for (int64_t i = 0; out && i < n; i++) {
            double v = ((const float *)xv->data)[i];
            double lv = ref_op(TN_OP_LEAKY_RELU, false, v, 0.125, 0), ev = ref_op(TN_OP_ELU, false, v, 1.5, 0);
            double want = ref_op(TN_OP_GELU, false, v, 0, 0) * ref_op(TN_OP_SILU, false, lv, 0, 0) + ref_op(TN_OP_MISH, false, ev, 0, 0) -
                          ref_op(TN_OP_SOFTSIGN, false, v, 0, 0) + ref_op(TN_OP_HARD_SIGMOID, false, v, 0, 0) +
                          ref_op(TN_OP_SELU, false, v, 0, 0) * ref_op(TN_OP_GELU_TANH, false, v, 0, 0);
            worst = fmax(worst, fabs(((const float *)out->data)[i] - want) / fmax(1, fabs(want)));
        }
        CHECK(out && worst < 1e-5, "fused activations: error %g", worst);
        tn_array_free(xv);
        tn_array_free(out);
    }
    tn_function_free(f);
    tn_graph_free(g);
}

/* A call-time shape mismatch names both shapes. */
TEST(test_function_shape_error) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32), *y = tn_vector(g, "y", TN_F32);
    tn_var *z = tn_add(x, y), *in[2] = { x, y };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = in, .n_outputs = 1, .outputs = &z });
    CHECK(f != NULL, "%s", tn_last_error());
    if (f) {
        tn_array *a = tn_array_zeros(TN_F32, 1, (int64_t[]){ 3 }), *b = tn_array_zeros(TN_F32, 1, (int64_t[]){ 5 });
        tn_array *ins[2] = { a, b }, *out = NULL;
        CHECK(tn_call(f, ins, &out) == TN_ERR_SHAPE, "want a shape error");
        CHECK_ERR(TN_ERR_SHAPE, "(3,)");
        CHECK_ERR(TN_ERR_SHAPE, "(5,)");
        tn_array_free(a); tn_array_free(b); tn_array_free(out);
        tn_function_free(f);
    }
    tn_graph_free(g);
}

int main(void) {
    TH_RUN(test_engine_all_ops);
    TH_RUN(test_engine_casts);
    TH_RUN(test_f16_conversions);
    TH_RUN(test_engine_composite);
    TH_RUN(test_engine_intermediate_storage);
    TH_RUN(test_engine_threads);
    TH_RUN(test_engine_nan);
    TH_RUN(test_engine_int_edges);
    TH_RUN(test_engine_new_ops_edges);
    TH_RUN(test_engine_activation_edges);
    TH_RUN(test_engine_errors);
    TH_RUN(test_constructor_types);
    TH_RUN(test_constructor_errors);
    TH_RUN(test_labels_and_info);
    TH_RUN(test_function_ops);
    TH_RUN(test_activations_fuse);
    TH_RUN(test_function_shape_error);
    tn_shutdown();      /* joins the worker threads (valgrind) */
    TH_END();
}
