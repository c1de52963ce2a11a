/* tests/test_fuzz.c - an API fuzzer. Bytes are read as a program of calls
   over the public API: arrays of random dtypes and shapes (0-d, empty,
   overflowing and negative dims), views of them, two graphs with inputs,
   constants and shared variables, every kind of constructor with random
   (and invalid) axes, shapes and dtypes, NULL arguments and arguments from
   the other graph, gradients and R-ops of random costs, scans, functions
   compiled in random modes and called with good and bad inputs, shared
   values read and replaced, printers, frees in random order. Each call must
   either succeed or fail with an error code and a message that opens with
   the public function's name; what succeeds is checked against NumPy's shape
   rules (written here from NumPy's documentation) and against value bounds
   where cheap. Everything is freed at the end of each program, so the leak
   checker sees leaks.

   libFuzzer: clang -fsanitize=fuzzer,address,undefined -DFUZZ_LIBFUZZER
   (make fuzz-libfuzzer). Otherwise main runs seeds 0..N-1, each a
   pseudo-random byte string: TN_FUZZ_SEEDS=N (or argv[1]) sets N, TN_FUZZ_FIRST=k starts at seed k,
   TN_FUZZ_SEED=k replays seed k and prints the program it runs (to stderr,
   as it runs), TN_FUZZ_TRACE=1 prints every program, TN_FUZZ_PROGRESS=k
   names every k-th seed as it starts. make fuzz runs 100000 seeds under
   ASan and UBSan. */
#define _POSIX_C_SOURCE 200809L     /* clock_gettime */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Known bugs being fixed elsewhere: 0 keeps the generator away from them (or
   accepts their messages); set each to 1 once its fix lands. */
#define FZ_FIXED_FLATTEN_0D 1      /* tn_flatten(s, k >= 2) of a 0-d input writes past the shape */
#define FZ_FIXED_SHAPE_OVERFLOW 1  /* signed overflow in tn_reshape's size check ({2^62, 8}) and in
                                      tn_array_zeros' strides ({0, 2^62, 2^62}) */
#define FZ_FIXED_ERROR_NAMES 1     /* out-of-memory messages name tn__array_alloc; errors inside
                                      tn_grad and tn_rop name the inner constructor */
/* Found here, left to a design decision: the gradient with respect to a
   variable whose dim is unknown at build time and broadcasts at call time
   (size 1 against 3) keeps the broadcast size (3). 0: gradients are checked
   only for variables of fully known static shape. */
#define FZ_FIXED_RUNTIME_BCAST_GRAD 0

#if defined(__SANITIZE_ADDRESS__)
#define FZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FZ_ASAN 1
#endif
#endif
#ifdef FZ_ASAN
/* Huge shapes are part of the program: their allocations must fail with
   TN_ERR_OOM, not abort the run. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

#define FZ_MAX_EXTENT (INT64_MAX / 16)
enum { FZ_MAXV = 96, FZ_MAXA = 24, FZ_MAXF = 4, FZ_MAXWRAP = 8, FZ_STEPS = 64, FZ_SMALL = 4096 };
static const int64_t FZ_HUGE_DIMS[] = { (int64_t)1 << 48, (int64_t)1 << 56, (int64_t)1 << 62, INT64_MAX };

/* >>fuzz_bytes: the program's bytes (zeros once they run out) */

static const uint8_t *fz_p;
static size_t fz_n, fz_i;
static unsigned fz_u8(void) { return fz_i < fz_n ? fz_p[fz_i++] : 0; }
static int fz_pick(int n) {
    unsigned v = fz_u8();
    if (n > 256) v = v << 8 | fz_u8();
    return n > 1 ? (int)(v % (unsigned)n) : 0;
}

static const double FZ_DOUBLES[] = { 0, 1, -1, 0.5, 2, -2.5, 3, 7, 1e-300, 1e10, -1e300, NAN, INFINITY, -INFINITY };
static double fz_double(void) { return FZ_DOUBLES[fz_pick((int)(sizeof FZ_DOUBLES / sizeof FZ_DOUBLES[0]))]; }
static double fz_small_double(void) { return FZ_DOUBLES[fz_pick(9)]; }
static const int64_t FZ_INTS[] = { 0, 1, 2, 3, -1, -2, -3, 4, 5, -5, 7, 100, INT64_MIN, INT64_MAX, INT64_MIN + 1,
                                   (int64_t)1 << 62, -((int64_t)1 << 62) };
static int64_t fz_int(void) { return fz_u8() < 200 ? FZ_INTS[fz_pick(12)] : FZ_INTS[fz_pick((int)(sizeof FZ_INTS / sizeof FZ_INTS[0]))]; }
static int fz_axis(int nd) {                 /* mostly in range, sometimes not */
    int k = fz_u8();
    if (k < 200) return nd > 0 ? fz_pick(2 * nd) - nd : 0;
    static const int bad[] = { 8, 9, -9, 100, -100, INT32_MIN, INT32_MAX };
    return k < 230 ? nd + fz_pick(2) : bad[fz_pick(7)];
}
static tn_dtype fz_dtype(void) {
    int k = fz_u8();
    if (k < 232) return (tn_dtype)(TN_BOOL + k % 6);
    if (k < 246) return TN_DTYPE_NONE;
    static const int bad[] = { -1, TN_DTYPE_COUNT, 99 };
    return (tn_dtype)bad[k % 3];
}
static bool fz_dtype_ok(tn_dtype t) { return t > TN_DTYPE_NONE && t < TN_DTYPE_COUNT; }
static const char *fz_dname(tn_dtype t) { return fz_dtype_ok(t) || t == TN_DTYPE_NONE ? tn_dtype_name(t) : "BAD"; }

/* Names a user may pass: NULL, empty, long, and a printf format (a name
   used as a format string would show). */
static const char *fz_name(void) {
    static char longname[300];
    if (!longname[0]) memset(longname, 'n', sizeof longname - 1);
    static const char *const names[] = { "x", "y", "w", "b", NULL, "", "%s%n%d", "a'b\"c\nd" };
    int k = fz_pick(9);
    return k == 8 ? longname : names[k];
}

/* >>fuzz_trace: the program as run, printed when a check fails */

static char fz_tr[1 << 16];
static size_t fz_trn;
static bool fz_replay, fz_trace_all;
static uint64_t fz_seed_now;
static int fz_fails, fz_fail_prints;
static const char *fz_argv0 = "build/test_fuzz";
static uint64_t fz_stat[7];      /* vars made, functions compiled, calls run, calls refused, steps, constructor failures,
                                    calls that ran although NumPy's rules refuse a node they held */

static void fz_log(const char *fmt, ...) {
    if (fz_trn + 2 >= sizeof fz_tr) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(fz_tr + fz_trn, sizeof fz_tr - fz_trn - 1, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if (fz_replay) fprintf(stderr, "%s\n", fz_tr + fz_trn);    /* as it runs: a sanitizer may end it */
    fz_trn += (size_t)k < sizeof fz_tr - fz_trn - 2 ? (size_t)k : sizeof fz_tr - fz_trn - 2;
    fz_tr[fz_trn++] = '\n';
    fz_tr[fz_trn] = 0;
}

static void fz_print_trace(FILE *out) {
    fprintf(out, "---- program of seed %llu ----\n%s---- end of program ----\n", (unsigned long long)fz_seed_now, fz_tr);
}

static void fz_fail(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fz_log("  ^^^ CHECK FAILED: %s", msg);
    fz_fails++;
    fprintf(stderr, "FAIL fuzz seed %llu: %s\n", (unsigned long long)fz_seed_now, msg);
    if (!fz_replay && fz_fail_prints++ < 2) {
        fz_print_trace(stderr);
        fprintf(stderr, "replay: TN_FUZZ_SEED=%llu %s\n", (unsigned long long)fz_seed_now, fz_argv0);
    }
#ifdef FUZZ_LIBFUZZER
    abort();
#endif
}

#ifdef FZ_ASAN
/* A sanitizer report ends the process: say which program it was. */
void __sanitizer_set_death_callback(void (*cb)(void));
static void fz_on_death(void) { if (!fz_replay) fz_print_trace(stderr); }
#endif

/* The error of a call that failed: a code, and a message that opens with
   `who` (the public function) followed by ':' or ' '. */
static bool fz_prefix(const char *msg, const char *who) {
    size_t k = strlen(who);
    return strncmp(msg, who, k) == 0 && (msg[k] == ':' || msg[k] == ' ');
}
static void fz_check_error(const char *who, const char *alt) {
    tn_result r = tn_last_result();
    const char *m = tn_last_error();
    fz_log("  -> %s: %s", tn_result_string(r), m);
    if (r == TN_OK || r >= TN_RESULT_COUNT) { fz_fail("%s failed with result %d (%s)", who, (int)r, m); return; }
    if (!m[0]) { fz_fail("%s failed with an empty message", who); return; }
    if (fz_prefix(m, who) || (alt && fz_prefix(m, alt))) return;
    if (!strncmp(m, "tn_call: ", 9) && fz_prefix(m + 9, who)) return;    /* tn_call, then the function's name */
    if (alt && !strcmp(alt, "tn_") && !strncmp(m, alt, 3)) return;      /* any public name (a known bug's) */
#if !FZ_FIXED_ERROR_NAMES
    if (r == TN_ERR_OOM && fz_prefix(m, "tn__array_alloc")) return;
#endif
    fz_fail("%s's message does not open with its name: '%s'", who, m);
}
/* Before a call: the previous error stays half of the time, so a failure
   that sets no message of its own shows. */
static void fz_pre(void) { if (fz_u8() & 1) tn_clear_error(); }

/* >>fuzz_state: what the program has made */

typedef enum {
    K_INPUT, K_CONST, K_SHARED, K_EYE, K_ARANGE, K_EW, K_CAST, K_RED, K_AXIS, K_DOT, K_OUTER, K_GEMM, K_GEMV,
    K_RESHAPE, K_DIMSHUFFLE, K_TRANSPOSE, K_SLICE, K_FLATTEN, K_BCAST, K_CONCAT, K_STACK, K_FILL, K_SAME,
    K_LIKE, K_OPAQUE
} fz_kind;

/* A model of a variable: st 1 (shape sh; in static mode -1 dims are
   unknown), 0 (unknown), -1 (the op must fail); b bounds |value| (INFINITY:
   no bound, NaN allowed). */
typedef struct fz_m { int st, nd; int64_t sh[TN_MAX_DIMS]; double b; } fz_m;

typedef struct fz_var {
    tn_var *v;
    int g, kind, sub;           /* sub: which op of the kind */
    int n_in, in[8];            /* variables it reads (their pool indices) */
    int nip;
    int64_t ip[12];
    double fp[3];
    bool huge;                  /* a static dim is large: never run */
    bool bad;                   /* an argument the call must refuse (a dtype out of range, ...) */
    fz_m stat;                  /* the static model, at construction */
    fz_m cval;                  /* K_CONST: its value's shape and bound */
    int64_t plan[TN_MAX_DIMS];  /* K_INPUT: the shape calls give it */
} fz_var;

/* fn >= 0: borrowed from function fn; ro: the function's memory (a borrowed
   output or a view of one), which the user must not write. */
typedef struct fz_arr { tn_array *a; int fn; int call; bool huge, ro; } fz_arr;

typedef struct fz_fn {
    tn_func *f;
    int n_in, in[FZ_MAXV];
    int n_out, out[4];
    int n_upd, upd_sh[3], upd_val[3];
    bool borrow[4];
    const char *name;
    int calls;
} fz_fn;

static tn_graph *G[2];
static fz_var V[FZ_MAXV + 1];           /* V[nV]: the record of the call being made */
static int nV;
static fz_arr A[FZ_MAXA];
static int nA;
static fz_fn F[FZ_MAXF];
static void *wraps[FZ_MAXWRAP];
static int nwraps;
static FILE *fz_null;

static tn_var *VAR(int i) { return i >= 0 ? V[i].v : NULL; }

/* >>fuzz_model: NumPy's rules over the recorded program */

static int fz_gen;                              /* the current call's models */
static int fz_mgen[FZ_MAXV + 1];
static fz_m fz_memo[FZ_MAXV + 1];
static const tn_array *fz_arg[FZ_MAXV + 1];     /* the current call's input arrays */
static double fz_argb[FZ_MAXV + 1];

static bool fz_mul(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r) && *r <= ((int64_t)1 << 62); }

/* Largest |element| of a small host array (INFINITY if large, non-finite or unreadable). */
static double fz_array_bound(const tn_array *a) {
    int64_t n = tn_array_size(a);
    if (n > FZ_SMALL || n < 0) return INFINITY;
    double *buf = (double *)malloc(((size_t)n + 1) * sizeof *buf), m = 0;
    if (!buf || tn_array_copy_to(a, TN_F64, buf, ((size_t)n + 1) * sizeof *buf) != TN_OK) { free(buf); return INFINITY; }
    for (int64_t k = 0; k < n && isfinite(m); k++) if (!(fabs(buf[k]) <= m)) m = isnan(buf[k]) ? INFINITY : fabs(buf[k]);
    free(buf);
    return isfinite(m) ? m : INFINITY;
}

static double fz_limit(tn_dtype t) {
    switch (t) {
    case TN_BOOL: return 1;
    case TN_I32: return 2147483647.0;
    case TN_I64: return 9007199254740992.0;
    case TN_F16: return 65504.0;
    case TN_F32: return 3.0e38;
    default: return 1.0e307;
    }
}

static fz_m fz_unknown(void) { fz_m m; memset(&m, 0, sizeof m); m.b = INFINITY; return m; }
static fz_m fz_error(void) { fz_m m = fz_unknown(); m.st = -1; return m; }

/* NumPy broadcasting of two shapes (dims -1: unknown, static mode). */
static bool fz_bcast2(fz_m *o, const fz_m *x) {
    int nd = o->nd > x->nd ? o->nd : x->nd;
    int64_t sh[TN_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - o->nd), db = d - (nd - x->nd);
        int64_t a = da >= 0 ? o->sh[da] : 1, b = db >= 0 ? x->sh[db] : 1;
        if (a == b || b == 1) sh[d] = a;
        else if (a == 1) sh[d] = b;
        else if (a < 0 || b < 0) sh[d] = -1;
        else return false;
    }
    o->nd = nd;
    memcpy(o->sh, sh, sizeof sh);
    return true;
}

/* Elements of a shape; -1 when a dim is unknown (even beside a 0: the
   library may leave that to call time) or the count is huge. */
static int64_t fz_size(const fz_m *m) {
    int64_t n = 1;
    for (int d = 0; d < m->nd; d++) if (m->sh[d] < 0) return -1;
    for (int d = 0; d < m->nd; d++) if (m->sh[d] == 0) return 0;
    for (int d = 0; d < m->nd; d++) if (!fz_mul(n, m->sh[d], &n)) return -1;
    return n;
}

/* Python's slice of a dim of n: how many elements. */
static int64_t fz_slice_len(int64_t n, int64_t start, int64_t stop, int64_t step) {
    if (step == TN_NONE) step = 1;
    bool neg = step < 0;
    if (start == TN_NONE) start = neg ? n - 1 : 0;
    else if (start < 0) { start += n; if (start < 0) start = neg ? -1 : 0; }
    else if (start >= n) start = neg ? n - 1 : n;
    if (stop == TN_NONE) stop = neg ? -1 : n;
    else if (stop < 0) { stop += n; if (stop < 0) stop = neg ? -1 : 0; }
    else if (stop >= n) stop = neg ? n - 1 : n;
    uint64_t mag = neg ? 0 - (uint64_t)step : (uint64_t)step;
    if (neg) return stop < start ? (int64_t)((uint64_t)(start - stop - 1) / mag + 1) : 0;
    return start < stop ? (int64_t)((uint64_t)(stop - start - 1) / mag + 1) : 0;
}

/* Bound rules of the elementwise ops (by name; the rest: none). */
enum { B_UNK, B_SAME, B_ONE, B_TWO, B_ADD, B_MUL, B_SQR, B_EXP, B_EXP2, B_COSH, B_PLUS1, B_MAX, B_WHERE };
typedef struct fz_ew { const char *name; int arity, kind, rule; tn_var *(*f1)(tn_var *); tn_var *(*f2)(tn_var *, tn_var *);
                       tn_var *(*f3)(tn_var *, tn_var *, tn_var *); } fz_ew;
#define FZ_EW_1(n) { "tn_" #n, 1, 0, 0, tn_##n, NULL, NULL },
#define FZ_EW_2(n) { "tn_" #n, 2, 0, 0, NULL, tn_##n, NULL },
#define FZ_EW_3(n) { "tn_" #n, 3, 0, 0, NULL, NULL, tn_##n },
#define FZ_X(E, n, ar, k, fe, ie, d) FZ_X_##k(n, ar)
#define FZ_X_TN_EWK_ARITH(n, ar) FZ_EW_##ar(n)
#define FZ_X_TN_EWK_FLOAT(n, ar) FZ_EW_##ar(n)
#define FZ_X_TN_EWK_CMP(n, ar)   FZ_EW_##ar(n)
#define FZ_X_TN_EWK_LOGIC(n, ar) FZ_EW_##ar(n)
#define FZ_X_TN_EWK_WHERE(n, ar) FZ_EW_##ar(n)
#define FZ_X_TN_EWK_CAST(n, ar)
static fz_ew FZ_EWS[] = { TN_EW_OPS(FZ_X) { "tn_div", 2, 0, 0, NULL, tn_div, NULL }, { "tn_switch", 3, 0, 0, NULL, NULL, tn_switch } };
enum { FZ_NEW = (int)(sizeof FZ_EWS / sizeof FZ_EWS[0]) };

static void fz_ew_init(void) {
    static const struct { const char *n; int r; } R[] = {
        { "identity", B_SAME }, { "neg", B_SAME }, { "abs", B_SAME }, { "relu", B_SAME }, { "asinh", B_SAME },
        { "add", B_ADD }, { "sub", B_ADD }, { "mul", B_MUL }, { "sqr", B_SQR }, { "exp", B_EXP }, { "expm1", B_EXP },
        { "exp2", B_EXP2 }, { "sinh", B_COSH }, { "cosh", B_COSH }, { "sign", B_ONE }, { "sin", B_ONE }, { "cos", B_ONE },
        { "tanh", B_ONE }, { "sigmoid", B_ONE }, { "erf", B_ONE }, { "erfc", B_TWO }, { "atan", B_TWO },
        { "softplus", B_PLUS1 }, { "floor", B_PLUS1 }, { "ceil", B_PLUS1 }, { "round", B_PLUS1 },
        { "minimum", B_MAX }, { "maximum", B_MAX }, { "where", B_WHERE }, { "switch", B_WHERE },
    };
    for (int k = 0; k < FZ_NEW; k++) {
        const char *n = FZ_EWS[k].name + 3;
        for (int op = 1; op < TN_OP_CAST; op++)
            if (strcmp(tn__ew_info(op)->name, n) == 0) FZ_EWS[k].kind = tn__ew_info(op)->kind;
        if (FZ_EWS[k].kind == TN_EWK_CMP || FZ_EWS[k].kind == TN_EWK_LOGIC) FZ_EWS[k].rule = B_ONE;
        for (size_t r = 0; r < sizeof R / sizeof R[0]; r++) if (strcmp(R[r].n, n) == 0) FZ_EWS[k].rule = R[r].r;
    }
}

static double fz_ew_bound(int rule, const fz_m *m, int n) {
    double a = m[0].b, b = n > 1 ? m[1].b : 0, c = n > 2 ? m[2].b : 0;
    switch (rule) {
    case B_SAME: return a;
    case B_ONE: return 1;
    case B_TWO: return 2;
    case B_ADD: return a + b;
    case B_MUL: return a * b;
    case B_SQR: return a * a;
    case B_EXP: return exp(a);
    case B_EXP2: return exp2(a);
    case B_COSH: return cosh(a);
    case B_PLUS1: return a + 1;
    case B_MAX: return a > b ? a : b;
    case B_WHERE: return b > c ? b : c;
    default: return INFINITY;
    }
}

/* Which axes a reduction's (axes, naxes) names, as NumPy: false if one is
   out of range or repeated. */
static bool fz_axes_mask(const fz_var *r, int nd, unsigned *mask) {
    *mask = 0;
    if (r->ip[1]) { *mask = (1u << nd) - 1; return true; }       /* axes NULL: all */
    if (r->ip[2] > TN_MAX_DIMS) return false;                   /* more axes than dims: one repeats */
    for (int k = 0; k < r->ip[2]; k++) {
        int64_t a = r->ip[4 + k];
        if (a < -nd || a >= nd) return false;
        if (a < 0) a += nd;
        if (*mask >> a & 1) return false;
        *mask |= 1u << a;
    }
    return true;
}

static fz_m fz_model(int i, bool run);

/* The model of an op from its inputs' models. */
static fz_m fz_model_op(const fz_var *r, const fz_m *in, bool run) {
    fz_m o = fz_unknown();
    o.st = 1;
    switch (r->kind) {
    case K_EW: {
        o = in[0];
        for (int k = 1; k < r->n_in; k++) if (!fz_bcast2(&o, &in[k])) return fz_error();
        o.b = fz_ew_bound(FZ_EWS[r->sub].rule, in, r->n_in);
        return o;
    }
    case K_CAST: case K_SAME:
        return in[0];
    case K_RED: {                  /* sub: sum prod mean max min all any logsumexp argmax argmin */
        unsigned mask;
        if (!fz_axes_mask(r, in[0].nd, &mask)) return fz_error();
        int64_t cnt = 1;
        bool zero = false, unk = false, ovf = false;
        o.nd = 0;
        for (int d = 0; d < in[0].nd; d++) {
            int64_t s = in[0].sh[d];
            if (mask >> d & 1) {
                if (s == 0) zero = true;
                else if (s < 0) unk = true;
                else if (!fz_mul(cnt, s, &cnt)) ovf = true;
                if (r->ip[3]) o.sh[o.nd++] = 1;
            } else o.sh[o.nd++] = s;
        }
        cnt = unk ? -1 : zero ? 0 : ovf ? -1 : cnt;
        int64_t osz = fz_size(&o);
        bool needs = r->sub == 3 || r->sub == 4 || r->sub >= 8;
        if (needs && cnt == 0 && osz > 0) return fz_error();
        double a = in[0].b, n = (double)cnt;
        switch (r->sub) {
        case 0: o.b = cnt >= 0 ? a * n : INFINITY; break;
        case 1: o.b = cnt >= 0 ? pow(a > 1 ? a : 1, n) : INFINITY; break;
        case 2: case 3: case 4: o.b = cnt > 0 ? a : INFINITY; break;
        case 5: case 6: o.b = 1; break;
        case 7: o.b = cnt > 0 ? a + log(n) : INFINITY; break;
        default: o.b = cnt > 0 ? n : INFINITY; break;
        }
        if (needs && cnt == 0) o.st = 0;
        return o;
    }
    case K_AXIS: {                 /* sub: softmax log_softmax cumsum cumprod; ip[0]: axis */
        int nd = in[0].nd;
        int64_t ax = r->ip[0];
        if (ax < -nd || ax >= nd) return fz_error();
        o = in[0];
        double n = (double)in[0].sh[ax < 0 ? ax + nd : ax], a = in[0].b;
        o.b = n < 0 ? INFINITY : r->sub == 0 ? 1 : r->sub == 1 ? 2 * a + log(n + 1) + 1 : r->sub == 2 ? a * n : pow(a > 1 ? a : 1, n);
        return o;
    }
    case K_DOT: case K_GEMM: case K_GEMV: {
        const fz_m *a = &in[r->kind == K_DOT ? 0 : 1], *b = &in[r->kind == K_DOT ? 1 : 2];
        if (a->nd == 0 || b->nd == 0) return fz_error();
        if (r->kind == K_GEMV && (a->nd != 2 || b->nd != 1)) return fz_error();
        int64_t ka = a->sh[a->nd - 1], kb = b->nd == 1 ? b->sh[0] : b->sh[b->nd - 2];
        if (ka >= 0 && kb >= 0 && ka != kb) return fz_error();
        fz_m ba = *a, bb = *b;
        ba.nd = a->nd >= 2 ? a->nd - 2 : 0;
        bb.nd = b->nd >= 2 ? b->nd - 2 : 0;
        if (!fz_bcast2(&ba, &bb)) return fz_error();
        o = ba;
        if (a->nd >= 2) o.sh[o.nd++] = a->sh[a->nd - 2];
        if (b->nd >= 2) o.sh[o.nd++] = b->sh[b->nd - 1];
        if (o.nd > TN_MAX_DIMS) return fz_error();
        double k = ka >= 0 ? (double)ka : kb >= 0 ? (double)kb : INFINITY;
        o.b = a->b * b->b * k;
        if (r->kind != K_DOT) {    /* the addend broadcasts to the product, which keeps its shape */
            const fz_m *c = &in[0];
            if (c->nd > o.nd) return fz_error();
            for (int d = 0; d < c->nd; d++) {
                int64_t s = c->sh[d], t = o.sh[o.nd - c->nd + d];
                if (!(s == t || s == 1 || s < 0 || t < 0)) return fz_error();
            }
            /* alpha 0 does not make a product that overflowed (in float16) 0: 0 * inf is NaN */
            o.b = o.b <= 6.0e4 ? fabs(r->fp[0]) * o.b + fabs(r->fp[1]) * c->b : INFINITY;
        }
        if (k == 0) o.b = fabs(r->fp[1]) * (r->kind != K_DOT ? in[0].b : 0);
        return o;
    }
    case K_OUTER:
        if (in[0].nd != 1 || in[1].nd != 1) return fz_error();
        o.nd = 2; o.sh[0] = in[0].sh[0]; o.sh[1] = in[1].sh[0];
        o.b = in[0].b * in[1].b;
        return o;
    case K_RESHAPE: {              /* ip[0]: ndim, ip[1..]: the shape */
        int nd = (int)r->ip[0], unk = -1;
        if (nd < 0 || nd > TN_MAX_DIMS) return fz_error();
        int64_t known = 1, ext = 1, n = fz_size(&in[0]);
        o.nd = nd;
        for (int d = 0; d < nd; d++) {
            int64_t s = r->ip[1 + d];
            o.sh[d] = s;
            if (s == -1) { if (unk >= 0) return fz_error(); unk = d; continue; }
            if (s < 0) return fz_error();
            /* the library's limit on a shape (tensor.h TN__MAX_EXTENT): the product of its dims (0 counted as 1) */
            if (!fz_mul(known, s, &known) || !fz_mul(ext, s > 1 ? s : 1, &ext) || ext > FZ_MAX_EXTENT) return fz_unknown();
        }
        bool all_known = true;
        for (int d = 0; d < in[0].nd; d++) all_known = all_known && in[0].sh[d] >= 0;
        if (n < 0 && all_known) return fz_unknown();   /* a known size too large to model */
        if (n < 0) { if (unk >= 0) o.sh[unk] = -1; o.b = in[0].b; return o; }
        if (unk >= 0) {
            if (known == 0) return fz_unknown();      /* (0, -1) of an empty array: NumPy refuses; so may the library */
            if (n % known) return fz_error();
            o.sh[unk] = n / known;
        } else if (known != n) return fz_error();
        o.b = in[0].b;
        return o;
    }
    case K_DIMSHUFFLE: {           /* ip[0]: ndim, ip[1..]: the pattern */
        int nd = (int)r->ip[0];
        if (nd < 0 || nd > TN_MAX_DIMS) return fz_error();
        bool used[TN_MAX_DIMS] = { false };
        o.nd = nd;
        for (int k = 0; k < nd; k++) {
            int64_t ax = r->ip[1 + k];
            if (ax == -1) { o.sh[k] = 1; continue; }
            if (ax < 0 || ax >= in[0].nd || used[ax]) return fz_error();
            used[ax] = true;
            o.sh[k] = in[0].sh[ax];
        }
        /* only dims of size 1 may be dropped; known at build time or not at all */
        for (int d = 0; d < in[0].nd; d++)
            if (!used[d] && (run ? V[r->in[0]].stat.sh[d] : in[0].sh[d]) != 1) return fz_error();
        o.b = in[0].b;
        return o;
    }
    case K_TRANSPOSE: {            /* ip[0]: perm given; ip[1..]: perm */
        int nd = in[0].nd;
        bool used[TN_MAX_DIMS] = { false };
        o.nd = nd;
        for (int k = 0; k < nd; k++) {
            int64_t ax = r->ip[0] ? r->ip[1 + k] : nd - 1 - k;
            if (ax < 0) ax += nd;
            if (ax < 0 || ax >= nd || used[ax]) return fz_error();
            used[ax] = true;
            o.sh[k] = in[0].sh[ax];
        }
        o.b = in[0].b;
        return o;
    }
    case K_SLICE: {                /* ip: axis, start, stop, step */
        int nd = in[0].nd;
        int64_t ax = r->ip[0];
        if (ax < -nd || ax >= nd || r->ip[3] == 0) return fz_error();
        if (ax < 0) ax += nd;
        o = in[0];
        if (o.sh[ax] >= 0) o.sh[ax] = fz_slice_len(o.sh[ax], r->ip[1], r->ip[2], r->ip[3]);
        return o;
    }
    case K_FLATTEN: {              /* ip[0]: outdim */
        int64_t k = r->ip[0];
        int nd = in[0].nd;
        if (k < 1 || k > (nd > 0 ? nd : 1)) return fz_error();
        o.nd = (int)k;
        for (int d = 0; d < k - 1; d++) o.sh[d] = in[0].sh[d];
        fz_m rest = in[0];
        rest.nd = nd - (int)k + 1;
        if (rest.nd < 0) rest.nd = 0;
        memmove(rest.sh, in[0].sh + k - 1, (size_t)rest.nd * sizeof rest.sh[0]);
        o.sh[k - 1] = fz_size(&rest);
        o.b = in[0].b;
        return o;
    }
    case K_BCAST: {                /* broadcast_to, alloc: ip[0]: ndim, ip[1..]: the shape */
        int nd = (int)r->ip[0];
        if (nd < 0 || nd > TN_MAX_DIMS) return fz_error();
        if (in[0].nd > nd) return fz_error();
        o.nd = nd;
        for (int d = 0; d < nd; d++) {
            o.sh[d] = r->ip[1 + d];
            if (o.sh[d] < 0) return fz_error();
            int e = d - (nd - in[0].nd);
            if (e >= 0 && in[0].sh[e] >= 0 && in[0].sh[e] != 1 && in[0].sh[e] != o.sh[d]) return fz_error();
        }
        o.b = in[0].b;
        return o;
    }
    case K_FILL: {                 /* in: like, value */
        o = in[0];
        fz_m t = in[0];
        if (!fz_bcast2(&t, &in[1]) || t.nd != o.nd) return fz_error();
        for (int d = 0; d < o.nd; d++) if (t.sh[d] >= 0 && o.sh[d] >= 0 && t.sh[d] != o.sh[d]) return fz_error();
        o.b = in[1].b;
        return o;
    }
    case K_CONCAT: case K_STACK: { /* ip[0]: axis */
        int nd = in[0].nd, n = r->n_in;
        int64_t ax = r->ip[0];
        bool stack = r->kind == K_STACK;
        if (ax < -(nd + stack) || ax >= nd + stack || nd + stack > TN_MAX_DIMS) return fz_error();
        if (ax < 0) ax += nd + stack;
        o = in[0];
        o.b = 0;
        int64_t total = 0;
        for (int k = 0; k < n; k++) {
            if (in[k].nd != nd) return fz_error();
            for (int d = 0; d < nd; d++) {
                if (!stack && d == ax) continue;
                if (in[k].sh[d] >= 0 && o.sh[d] >= 0 && in[k].sh[d] != o.sh[d]) return fz_error();
                if (o.sh[d] < 0) o.sh[d] = in[k].sh[d];
            }
            if (!stack && (total < 0 || in[k].sh[ax] < 0)) total = -1;
            else if (!stack && __builtin_add_overflow(total, in[k].sh[ax], &total)) return fz_error();
            if (in[k].b > o.b) o.b = in[k].b;
        }
        if (stack) {
            memmove(o.sh + ax + 1, o.sh + ax, (size_t)(nd - ax) * sizeof o.sh[0]);
            o.sh[ax] = n;
            o.nd = nd + 1;
        } else o.sh[ax] = total;
        return o;
    }
    case K_LIKE:                   /* a gradient or R-op: in[0]'s shape once it runs */
#if !FZ_FIXED_RUNTIME_BCAST_GRAD
        for (int d = 0; r->sub == 0 && d < V[r->in[0]].stat.nd; d++) if (V[r->in[0]].stat.sh[d] < 0) return fz_unknown();
#endif
        for (int k = 1; r->sub == 1 && k + 1 < r->n_in; k += 2) {   /* R-op: each eval point broadcasts to its wrt */
            if (in[k + 1].nd > in[k].nd) return fz_unknown();             /* (unless f does not read that wrt) */
            for (int d = 0; d < in[k + 1].nd; d++) {
                int64_t e = in[k + 1].sh[d], w = in[k].sh[d + in[k].nd - in[k + 1].nd];
                if (e >= 0 && w >= 0 && e != 1 && e != w) return fz_unknown();
            }
        }
        o = in[0];
        o.b = INFINITY;
        return o;
    default:
        return fz_unknown();
    }
}

static fz_m fz_model_leaf(const fz_var *r, int i, bool run) {
    fz_m o = fz_unknown();
    o.st = 1;
    switch (r->kind) {
    case K_INPUT:                  /* ip[0]: ndim, ip[1..]: the static shape (-1: unknown) */
        if (run) {
            if (!fz_arg[i]) return fz_unknown();
            o.nd = fz_arg[i]->ndim;
            memcpy(o.sh, fz_arg[i]->shape, sizeof o.sh);
            o.b = fz_argb[i];
            return o;
        }
        if (r->ip[0] < 0 || r->ip[0] > TN_MAX_DIMS) return fz_error();
        o.nd = (int)r->ip[0];
        for (int d = 0; d < o.nd; d++) {           /* ip[9]: the broadcastable dims (known to be 1) */
            if ((o.sh[d] = r->ip[1 + d]) < -1) return fz_error();
            if (r->ip[9] >> d & 1) { if (o.sh[d] != -1 && o.sh[d] != 1) return fz_error(); o.sh[d] = 1; }
        }
        return o;
    case K_CONST: return r->cval;
    case K_SHARED: {
        if (!run) { o.nd = r->cval.nd; for (int d = 0; d < o.nd; d++) o.sh[d] = -1; return o; }
        const tn_array *a = tn_shared_get(r->v);
        if (!a) return fz_unknown();
        o.nd = a->ndim;
        memcpy(o.sh, a->shape, sizeof o.sh);
        o.b = fz_array_bound(a);
        return o;
    }
    case K_EYE:                    /* ip: n, m, k */
        if (r->ip[0] < 0) return fz_error();
        o.nd = 2; o.sh[0] = r->ip[0]; o.sh[1] = r->ip[1] < 0 ? r->ip[0] : r->ip[1];
        o.b = 1;
        return o;
    case K_ARANGE: {               /* fp: start, stop, step */
        double a = r->fp[0], b = r->fp[1], s = r->fp[2];
        if (!isfinite(a) || !isfinite(b) || !isfinite(s) || s == 0) return fz_error();
        double len = ceil((b - a) / s);
        if (!(len > 0)) len = 0;
        if (len > 9.0e15) return fz_error();
        o.nd = 1; o.sh[0] = (int64_t)len;
        o.b = fmax(fabs(a), fabs(b)) + fabs(s);
        return o;
    }
    default: return fz_unknown();
    }
}

/* The model of variable i: static (build-time shapes) or for the current call. */
static fz_m fz_model(int i, bool run) {
    if (!run && i < nV) return V[i].stat;
    if (run && fz_mgen[i] == fz_gen) return fz_memo[i];
    const fz_var *r = &V[i];
    fz_m o;
    if (r->n_in == 0) o = fz_model_leaf(r, i, run);
    else {
        fz_m in[8];
        int st = 1;
        for (int k = 0; k < r->n_in; k++) {
            in[k] = fz_model(r->in[k], run);
            if (in[k].st < st) st = in[k].st;
        }
        if (st == -1 && r->kind == K_LIKE) st = 0;     /* a gradient need not run its wrt or cost */
        o = st == 1 ? fz_model_op(r, in, run) : st == 0 || !run ? fz_unknown() : fz_error();
        for (int k = 0; k < r->n_in; k++)          /* no bound in, none out (NaN stays NaN) */
            if (!isfinite(in[k].b) && r->v && tn_dtype_is_float(tn_var_dtype(r->v))) o.b = INFINITY;
    }
    if (o.st == 1 && r->v) {
        tn_dtype t = tn_var_dtype(r->v);
        if (t == TN_BOOL) o.b = 1;
        else if (!(o.b * 1.1 <= fz_limit(t))) o.b = INFINITY;
    }
    if (run) { fz_memo[i] = o; fz_mgen[i] = fz_gen; }
    return o;
}

/* >>fuzz_vars: recording a constructor's result */

static int fz_graph_of(int i) { return i >= 0 ? V[i].g : -1; }

/* Picks an operand: mostly of graph g (-1: any), sometimes the other graph's
   or NULL. */
static int fz_operand(int g) {
    int k = fz_u8();
    if (nV == 0 || k < 6) return -1;
    int i = nV > 6 && k < 160 ? nV - 1 - fz_pick(6) : fz_pick(nV);
    if (g < 0 || k >= 250) return i;
    for (int t = 0; t < 8 && V[i].g != g; t++) i = fz_pick(nV);
    return V[i].g == g ? i : i;
}

static void fz_type_str(tn_var *v, char *buf, size_t cap) {
    int n = snprintf(buf, cap, "%s (", fz_dname(tn_var_dtype(v)));
    for (int d = 0; d < tn_var_ndim(v) && n < (int)cap - 24; d++) n += snprintf(buf + n, cap - (size_t)n, "%s%lld", d ? ", " : "", (long long)tn_var_dim(v, d));
    snprintf(buf + n, cap - (size_t)n, ")");
}

/* The library's limit on a shape (its strides must fit 64 bits): the
   product of the dims, unknown and zero dims as 1, below INT64_MAX / 16. */
static bool fz_extent_fits(const fz_m *m) {
    int64_t n = 1;
    for (int d = 0; d < m->nd; d++) {
        int64_t k = m->sh[d] > 1 ? m->sh[d] : 1;
        if (n > INT64_MAX / 16 / k) return false;
        n *= k;
    }
    return true;
}

/* After a constructor: r is its result for the record R (already in V[nV],
   not yet counted). Checks the result against the operands (NULL or mixed
   graphs must fail) and the static model, and keeps it. */
static int fz_done(tn_var *r, const char *who, const char *alt) {
    fz_var *R = &V[nV];
    bool null_arg = R->g == -2, mixed = false;
    int g = R->g < 0 ? -1 : R->g;
    for (int k = 0; k < R->n_in; k++) {
        if (R->in[k] < 0) null_arg = true;
        else if (g < 0) g = V[R->in[k]].g;
        else if (V[R->in[k]].g != g) mixed = true;
    }
    fz_m m = fz_unknown(), mlib = fz_unknown();
    if (!null_arg && !mixed) {
        fz_m in[8], inlib[8];
        int st = 1;
        bool known = true;
        for (int k = 0; k < R->n_in; k++) {
            in[k] = V[R->in[k]].stat;
            if (in[k].st < st) st = in[k].st;
            for (int d = 0; d < in[k].nd; d++) known = known && in[k].sh[d] >= 0;
            inlib[k] = in[k];                           /* what the library knows of the operand */
            for (int d = 0; d < in[k].nd; d++) inlib[k].sh[d] = tn_var_dim(V[R->in[k]].v, d);
        }
        m = R->n_in == 0 ? fz_model_leaf(R, nV, false) : st == 1 ? fz_model_op(R, in, false) : fz_unknown();
        mlib = R->n_in == 0 ? m : st == 1 ? fz_model_op(R, inlib, false) : fz_unknown();
        if (m.st == 1 && !known) m.st = 2;              /* consistent if the library succeeds */
    }
    if (!r) {
        fz_stat[5]++;
        fz_check_error(who, alt);
        tn_result e = tn_last_result();
        bool too_large = e == TN_ERR_SHAPE && !fz_extent_fits(&m) && strstr(tn_last_error(), "too large");
        if (m.st == 1 && (e == TN_ERR_SHAPE || e == TN_ERR_AXIS) && !too_large)
            fz_fail("%s failed (%s) although NumPy's rules accept the shapes", who, tn_result_string(e));
        return -1;
    }
    char ts[200];
    fz_type_str(r, ts, sizeof ts);
    fz_log("  -> v%d: %s", nV, ts);
    fz_stat[0]++;
    if (null_arg) fz_fail("%s succeeded with a NULL operand", who);
    if (R->bad) fz_fail("%s succeeded with an invalid argument", who);
    if (mixed) fz_fail("%s succeeded with operands of two graphs", who);
    if (g >= 0 && tn_var_graph(r) != G[g]) fz_fail("%s: the result is in another graph", who);
    int nd = tn_var_ndim(r);
    if (nd < 0 || nd > TN_MAX_DIMS || !fz_dtype_ok(tn_var_dtype(r))) fz_fail("%s: bad type %s", who, ts);
    /* refused by what the library itself knows of the operands (where it knows less than the
       model, it may leave the error to call time) */
    if (mlib.st == -1) fz_fail("%s succeeded although NumPy's rules refuse the shapes", who);
    if (m.st >= 1) {
        if (m.nd != nd) fz_fail("%s: ndim %d, NumPy's rules say %d", who, nd, m.nd);
        for (int d = 0; d < nd && d < m.nd; d++) {
            int64_t s = tn_var_dim(r, d);
            if (s < -1 || (s >= 0 && m.sh[d] >= 0 && s != m.sh[d]))
                fz_fail("%s: dim %d is %lld, NumPy's rules say %lld", who, d, (long long)s, (long long)m.sh[d]);
        }
    }
    for (int j = 0; j < nV; j++) if (V[j].v == r) { fz_log("  (v%d itself)", j); return j; }
    if (nV >= FZ_MAXV) return -1;
    R->v = r;
    R->g = g;
    R->stat = m.st >= 1 ? m : fz_unknown();
    R->stat.st = 1;
    R->stat.nd = nd;
    for (int d = 0; d < nd; d++) {                   /* the library's static dims where it knows more */
        int64_t s = tn_var_dim(r, d);
        if (m.st < 1 || m.sh[d] < 0) R->stat.sh[d] = s;
        if (s > 64) R->huge = true;
    }
    for (int k = 0; k < R->n_in; k++) if (V[R->in[k]].huge) R->huge = true;
    return nV++;
}

/* A fresh record for a constructor of kind k reading n operands. */
static fz_var *fz_rec(int kind, int sub, int n, const int *in) {
    fz_var *R = &V[nV];
    memset(R, 0, sizeof *R);
    R->kind = kind; R->sub = sub; R->n_in = n; R->g = -1;
    for (int k = 0; k < n; k++) R->in[k] = in[k];
    return R;
}

/* >>fuzz_arrays ---------------------------------------------------------- */

static int64_t fz_array_size(const tn_array *a) {      /* without overflow; -1 when huge */
    fz_m m = fz_unknown();
    m.nd = a->ndim;
    memcpy(m.sh, a->shape, sizeof m.sh);
    return fz_size(&m);
}

/* Keeps a in the pool (fn >= 0: borrowed from function fn); a copy the pool
   has no room for is freed. The index, or -1. */
static int fz_arr_add(tn_array *a, int fn) {
    if (!a) return -1;
    if (nA >= FZ_MAXA) { if (fn < 0) tn_array_free(a); return -1; }
    int64_t n = fz_array_size(a);
    A[nA] = (fz_arr){ a, fn, fn >= 0 ? F[fn].calls : 0, n < 0 || n > FZ_SMALL, fn >= 0 };
    fz_log("  -> a%d", nA);
    return nA++;
}
static void fz_arr_drop(int k) {
    if (A[k].fn < 0) tn_array_free(A[k].a);
    A[k] = A[--nA];
}
static int fz_arr_pick(void) { return nA == 0 || fz_u8() < 8 ? -1 : fz_pick(nA); }
static tn_array *ARR(int k) { return k >= 0 ? A[k].a : NULL; }

/* Until the fix of FZ_FIXED_SHAPE_OVERFLOW lands: contiguous strides
   overflow for an empty shape whose other dims multiply past int64 (the
   strides of {0, 2^62, 2^62}): one huge dim of 2^48 at most beside a 0. */
static void fz_tame(int nd, int64_t *sh) {
#if !FZ_FIXED_SHAPE_OVERFLOW
    bool zero = false;
    for (int d = 0; d < nd && d < TN_MAX_DIMS; d++) zero = zero || sh[d] == 0;
    for (int d = 0, h = 0; zero && d < nd && d < TN_MAX_DIMS; d++) if (sh[d] > 64) sh[d] = h++ ? 1 : (int64_t)1 << 48;
#else
    (void)nd; (void)sh;
#endif
}

/* A shape for an array: mostly small dims; sometimes negative, huge, or a
   bad rank. Returns ndim. */
static int fz_array_shape(int64_t *sh) {
    int k = fz_u8(), nd = k < 250 ? fz_pick(5) : k < 253 ? -1 : TN_MAX_DIMS + 1;
    for (int d = 0; d < nd && d < TN_MAX_DIMS; d++) {
        int c = fz_u8();
        sh[d] = c < 120 ? 3 : c < 245 ? c % 5 : c < 249 ? -(int64_t)(c % 3) - 1 : FZ_HUGE_DIMS[c % 4];
    }
    fz_tame(nd, sh);
    return nd;
}

/* A host array of small values of dtype t (the range a call's inputs use). */
static tn_array *fz_values(tn_dtype t, int nd, const int64_t *sh) {
    double lo = t == TN_BOOL ? 0 : tn_dtype_is_float(t) ? -2 : -3, hi = t == TN_BOOL ? 2 : tn_dtype_is_float(t) ? 2 : 4;
    return tn_array_rand_uniform(t, nd, sh, lo, hi, fz_u8());
}

static const char *fz_shape_str(int nd, const int64_t *sh, char *buf) {
    int n = sprintf(buf, "{");
    for (int d = 0; d < nd && d < TN_MAX_DIMS; d++) n += sprintf(buf + n, "%s%lld", d ? ", " : "", (long long)sh[d]);
    sprintf(buf + n, "}");
    return buf;
}

/* Element k (C order) of a small array as a double. */
static bool fz_read(const tn_array *a, double **out) {
    int64_t n = fz_array_size(a);
    *out = NULL;
    if (n < 0 || n > FZ_SMALL) return false;
    *out = (double *)malloc(((size_t)n + 1) * sizeof **out);
    return *out && tn_array_copy_to(a, TN_F64, *out, ((size_t)n + 1) * sizeof **out) == TN_OK;
}

static void act_array_new(void) {
    int64_t sh[TN_MAX_DIMS] = { 0 };
    char ss[200];
    tn_dtype t = fz_dtype();
    int nd = fz_array_shape(sh), how = fz_pick(10);
    bool bad = !fz_dtype_ok(t) || nd < 0 || nd > TN_MAX_DIMS;
    for (int d = 0; d < nd && d < TN_MAX_DIMS; d++) bad = bad || sh[d] < 0;
    const int64_t *shp = fz_u8() < 4 ? NULL : sh;
    if (!shp && nd > 0) bad = true;
    tn_array *a = NULL;
    const char *who;
    double v = fz_double(), v2 = fz_double();
    fz_pre();
    fz_log("a = create#%d(%s, %d, %s)", how, fz_dname(t), nd, shp ? fz_shape_str(nd, sh, ss) : "NULL");
    switch (how) {
    case 0: who = "tn_array_zeros"; a = tn_array_zeros(t, nd, shp); break;
    case 1: who = "tn_array_ones"; a = tn_array_ones(t, nd, shp); break;
    case 2: who = "tn_array_full"; a = tn_array_full(t, nd, shp, v); break;
    case 3: who = "tn_array_scalar"; bad = !fz_dtype_ok(t); a = tn_array_scalar(t, v); break;
    case 4: who = "tn_array_empty"; a = tn_array_empty(t, nd, shp);
            if (a && t == TN_BOOL) memset(a->data, 1, tn_array_nbytes(a));   /* bool storage must hold 0 or 1 */
            break;
    case 5: {
        who = "tn_array_from_data";
        static unsigned char data[FZ_SMALL * 8];
        for (size_t k = 0; k < 64; k++) data[k] = (unsigned char)fz_u8();
        bool nodata = fz_u8() < 8;
        int64_t n = bad ? 0 : fz_array_size(&(tn_array){ .ndim = nd, .shape = { sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], sh[7] } });
        if (!bad && (n < 0 || n > FZ_SMALL)) { fz_log("  (skipped: too big for the data buffer)"); return; }
        if (nodata && n > 0) bad = true;
        if (t == TN_BOOL) memset(data, 1, sizeof data);          /* bool storage is 0 or 1 */
        a = tn_array_from_data(t, nd, shp, nodata ? NULL : data);
        break;
    }
    case 6: {
        who = "tn_array_wrap";
        int64_t n = bad ? 0 : fz_array_size(&(tn_array){ .ndim = nd, .shape = { sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], sh[7] } });
        if (bad || n < 0 || n > FZ_SMALL || nwraps >= FZ_MAXWRAP) { fz_log("  (skipped)"); return; }
        size_t es = tn_dtype_size(t);
        void *mem = calloc((size_t)n + 1, es);
        wraps[nwraps++] = mem;
        int64_t st[TN_MAX_DIMS];
        bool zero_strides = fz_u8() < 64;             /* every element the first one: a broadcast */
        for (int d = 0; d < nd; d++) {
            st[d] = 0;
            if (sh[d] > FZ_SMALL) zero_strides = true;  /* an empty array with a huge dim: its contiguous
                                                           strides overflow here (the library refuses it) */
        }
        if (!zero_strides) tn__contiguous_strides(t, nd, sh, st);
        a = tn_array_wrap(t, nd, shp, zero_strides ? st : fz_u8() < 128 ? NULL : st, mem);
        break;
    }
    case 7: {
        who = "tn_array_arange";
        bad = !fz_dtype_ok(t);
        double start = fz_small_double(), stop = fz_double(), step = fz_double();
        if (fabs((stop - start) / step) > 1e6 && isfinite((stop - start) / step)) stop = start + step * 100;
        fz_log("  arange(%g, %g, %g)", start, stop, step);
        if (!isfinite(start) || !isfinite(stop) || !isfinite(step) || step == 0) bad = true;
        a = tn_array_arange(t, start, stop, step);
        break;
    }
    case 8: who = "tn_array_rand_uniform"; if (!isfinite(v) || !isfinite(v2)) bad = true;
            a = tn_array_rand_uniform(t, nd, shp, v, v2, fz_u8()); break;
    default: who = "tn_array_rand_normal"; if (!isfinite(v) || !isfinite(v2)) bad = true;
             a = tn_array_rand_normal(t, nd, shp, v, v2, fz_u8()); break;
    }
    if (!a) { fz_check_error(who, NULL); return; }
    if (bad) fz_fail("%s succeeded with a bad argument", who);
    if (a->dtype != t || (how != 3 && how != 7 && a->ndim != nd)) fz_fail("%s: made %s of %d dims", who, fz_dname(a->dtype), a->ndim);
    for (int d = 0; how < 7 && how != 3 && d < nd && d < a->ndim; d++)
        if (a->shape[d] != sh[d]) fz_fail("%s: dim %d is %lld, asked %lld", who, d, (long long)a->shape[d], (long long)sh[d]);
    double *x = NULL;
    if ((how <= 2 || how == 8) && fz_read(a, &x)) {  /* values: zeros, ones, full, uniform in [lo, hi] */
        int64_t n = fz_array_size(a);
        double want = how == 0 ? 0 : how == 1 ? 1 : v;
        for (int64_t k = 0; k < n; k++) {
            double lo = t == TN_F32 ? (double)(float)fmin(v, v2) : fmin(v, v2), hi = t == TN_F32 ? (double)(float)fmax(v, v2) : fmax(v, v2);
            bool ok = how == 8 ? (!tn_dtype_is_float(t) || t == TN_F16 || (x[k] >= lo && x[k] <= hi))
                               : !tn_dtype_is_float(t) || t == TN_F16 || x[k] == (t == TN_F32 ? (double)(float)want : want) || (isnan(want) && isnan(x[k]));
            if (!ok) { fz_fail("%s: element %lld is %g", who, (long long)k, x[k]); break; }
        }
    }
    free(x);
    fz_arr_add(a, -1);
}

/* Views and copies of an array, compared element by element with NumPy's
   indexing of the source. */
static void act_array_view(void) {
    int s = fz_arr_pick(), how = fz_pick(7);
    tn_array *a = ARR(s), *r = NULL;
    const char *who;
    int nd = a ? a->ndim : 0, perm[TN_MAX_DIMS], ax = fz_axis(nd);
    int64_t start = fz_int(), stop = fz_int(), step = fz_u8() < 128 ? 1 : fz_int(), sh[TN_MAX_DIMS] = { 0 };
    tn_dtype t = fz_dtype();
    bool pnull = fz_u8() < 100;
    for (int d = 0; d < nd; d++) perm[d] = nd - 1 - d;
    for (int d = 0; d < nd && !pnull && fz_u8() < 128; d++) { int e = fz_pick(nd), tmp = perm[d]; perm[d] = perm[e]; perm[e] = tmp; }
    if (!pnull && fz_u8() < 16 && nd) perm[fz_pick(nd)] = fz_axis(nd);
    int tnd = fz_array_shape(sh);
    if (a && fz_u8() < 160) {         /* a target shape the array broadcasts or reshapes to */
        tnd = nd + (fz_u8() < 64);
        for (int d = 0; d < tnd && d < TN_MAX_DIMS; d++) { int e = d - (tnd - nd); sh[d] = e >= 0 ? a->shape[e] : 2; if (e >= 0 && sh[d] == 1 && fz_u8() < 128) sh[d] = 3; }
        if (how == 4 && tnd > 0) { int64_t n = fz_array_size(a); sh[0] = fz_u8() < 128 ? -1 : n; tnd = 1; }
    }
#if !FZ_FIXED_SHAPE_OVERFLOW
    if (how == 4) for (int d = 0; d < tnd && d < TN_MAX_DIMS; d++) if (sh[d] > 64) sh[d] = 2;
#endif
    fz_pre();
    fz_log("a = view#%d(a%d) axis %d slice %lld:%lld:%lld dtype %s", how, s, ax, (long long)start, (long long)stop, (long long)step, fz_dname(t));
    switch (how) {
    case 0: who = "tn_array_view"; r = tn_array_view(a); break;
    case 1: who = "tn_array_transpose"; r = tn_array_transpose(a, pnull ? NULL : perm); break;
    case 2: who = "tn_array_slice"; r = tn_array_slice(a, ax, start, stop, step); break;
    case 3: who = "tn_array_broadcast_to"; r = tn_array_broadcast_to(a, tnd, sh); break;
    case 4: who = "tn_array_reshape"; if (a && A[s].huge) return; r = tn_array_reshape(a, tnd, sh); break;
    case 5: who = "tn_array_copy"; if (a && A[s].huge) return; r = tn_array_copy(a); break;
    default: who = "tn_array_astype"; if (a && A[s].huge) return; r = tn_array_astype(a, t); break;
    }
    if (!r) {
        fz_check_error(who, NULL);
        if (!a && tn_last_result() != TN_ERR_NULL) fz_fail("%s(NULL) gave %s", who, tn_result_string(tn_last_result()));
        return;
    }
    if (!a) { fz_fail("%s(NULL) succeeded", who); tn_array_free(r); return; }
    /* the result's elements against NumPy's indexing of a's */
    double *x = NULL, *y = NULL;
    int64_t n = fz_array_size(r);
    if (n >= 0 && n <= FZ_SMALL && fz_array_size(a) <= FZ_SMALL && fz_array_size(a) >= 0 && fz_read(a, &x) && fz_read(r, &y)) {
        int64_t idx[TN_MAX_DIMS] = { 0 }, first = 0;
        if (how == 2) {
            int axn = ax < 0 ? ax + nd : ax;
            int64_t len = fz_slice_len(a->shape[axn], start, stop, step);
            if (r->shape[axn] != len) fz_fail("tn_array_slice: %lld elements on axis %d, Python says %lld", (long long)r->shape[axn], axn, (long long)len);
            int64_t st = step == TN_NONE ? 1 : step, n0 = a->shape[axn];
            first = start == TN_NONE ? (st > 0 ? 0 : n0 - 1) : start < 0 ? start + n0 : start;
            if (first < 0) first = st > 0 ? 0 : -1;
            if (first >= n0) first = st > 0 ? n0 : n0 - 1;
        }
        for (int64_t k = 0; k < n; k++) {
            int64_t src = 0, mul = 1;
            for (int d = a->ndim - 1; d >= 0; d--) {          /* a's flat index of r's element idx */
                int64_t i;
                switch (how) {
                case 1: { int e = 0; while (e < r->ndim && (pnull ? r->ndim - 1 - e : (perm[e] < 0 ? perm[e] + nd : perm[e])) != d) e++; i = idx[e]; break; }
                case 2: { int axn = ax < 0 ? ax + nd : ax; int64_t st = step == TN_NONE ? 1 : step; i = d == axn ? first + idx[d] * st : idx[d]; break; }
                case 3: { int e = d + (r->ndim - a->ndim); i = a->shape[d] == 1 ? 0 : idx[e]; break; }
                default: i = idx[d]; break;
                }
                src += i * mul;
                mul *= a->shape[d];
            }
            if (how == 4) src = k;
            double want = x[src];
            if (how == 6 && !(fz_dtype_ok(t) && tn_dtype_is_float(t))) want = y[k];   /* conversions to ints: tested elsewhere */
            if (how == 6 && t == TN_F16) want = y[k];
            if (how == 6 && t == TN_F32) want = (double)(float)want;
            if (!(y[k] == want || (isnan(y[k]) && isnan(want)))) {
                fz_fail("%s: element %lld is %g, NumPy's indexing of the source gives %g", who, (long long)k, y[k], want);
                break;
            }
            for (int d = r->ndim - 1; d >= 0; d--) { if (++idx[d] < r->shape[d]) break; idx[d] = 0; }
        }
    }
    free(x);
    free(y);
    int k = fz_arr_add(r, -1);
    if (k >= 0 && how <= 4) A[k].ro = A[s].ro;         /* a view shares the source's memory */
}

static void act_array_misc(void) {
    int s = fz_arr_pick(), how = fz_pick(9);
    tn_array *a = ARR(s);
    int64_t idx[TN_MAX_DIMS];
    for (int d = 0; d < TN_MAX_DIMS; d++) idx[d] = fz_u8() < 240 ? fz_pick(4) : fz_int();
    char ss[200];
    fz_pre();
    fz_log("array_misc#%d(a%d: %s %s)", how, s, a ? fz_dname(a->dtype) : "-", a ? fz_shape_str(a->ndim, a->shape, ss) : "-");
    switch (how) {
    case 0: {
        double v = tn_array_get(a, idx);
        bool in = a && a->device == TN_HOST;         /* negative indices count from the end */
        for (int d = 0; in && d < a->ndim; d++) in = idx[d] >= -a->shape[d] && idx[d] < a->shape[d];
        if (!in && !isnan(v)) fz_fail("tn_array_get out of range gave %g", v);
        if (!in) fz_check_error("tn_array_get", NULL);
        break;
    }
    case 1: {
        if (a && A[s].ro) return;                      /* a function's memory */
        double v = fz_small_double();
        tn_result r = tn_array_set(a, idx, v);
        if (r != TN_OK) { fz_check_error("tn_array_set", NULL); break; }
        double g = tn_array_get(a, idx);
        if (tn_dtype_is_float(a->dtype) && a->dtype != TN_F16 && g != (a->dtype == TN_F32 ? (double)(float)v : v))
            fz_fail("tn_array_set %g then tn_array_get gives %g", v, g);
        break;
    }
    case 2: {
        if (a && A[s].huge) return;
        static double buf[FZ_SMALL + 8];
        tn_dtype t = fz_dtype();
        size_t cap = fz_u8() < 200 ? sizeof buf : (size_t)fz_pick(64);
        fz_log("  tn_array_copy_to(%s, %zu bytes)", fz_dname(t), cap);
        tn_result r = tn_array_copy_to(a, t, fz_u8() < 8 ? NULL : buf, cap);
        if (r != TN_OK) fz_check_error("tn_array_copy_to", NULL);
        else if (!a || !(fz_dtype_ok(t) || t == TN_DTYPE_NONE) || (size_t)fz_array_size(a) * tn_dtype_size(t ? t : a->dtype) > cap)
            fz_fail("tn_array_copy_to succeeded into %zu bytes", cap);
        break;
    }
    case 3: {
        int d = fz_arr_pick();
        if ((d >= 0 && (A[d].ro || A[d].huge)) || (a && A[s].huge)) return;
        fz_log("  tn_array_assign(a%d: %s, a%d)", d, d >= 0 ? fz_shape_str(A[d].a->ndim, A[d].a->shape, ss) : "-", s);
        tn_result r = tn_array_assign(ARR(d), a);
        fz_m ms = fz_unknown(), md = fz_unknown();
        if (a && ARR(d)) {                             /* src broadcasts to dst's shape, which stays */
            ms.nd = a->ndim; memcpy(ms.sh, a->shape, sizeof ms.sh);
            md.nd = ARR(d)->ndim; memcpy(md.sh, ARR(d)->shape, sizeof md.sh);
        }
        fz_m mb = md;
        bool fits = a && ARR(d) && fz_bcast2(&mb, &ms) && mb.nd == md.nd && !memcmp(mb.sh, md.sh, (size_t)md.nd * sizeof mb.sh[0]);
        if (r != TN_OK) {
            fz_check_error("tn_array_assign", NULL);
            char s2[200];
            if (fits) fz_fail("tn_array_assign refused src %s for dst %s", fz_shape_str(ms.nd, ms.sh, ss), fz_shape_str(md.nd, md.sh, s2));
        } else if (!fits) fz_fail("tn_array_assign succeeded across shapes");
        break;
    }
    case 4: {
        char buf[256];
        size_t cap = fz_u8() < 128 ? sizeof buf : (size_t)fz_pick(16);
        memset(buf, 'Z', sizeof buf);
        int n = tn_array_snprint(a, buf, cap);
        if (n < 0) { fz_check_error("tn_array_snprint", NULL); break; }
        if (!a) fz_fail("tn_array_snprint(NULL) gave %d", n);
        if (cap > 0 && (memchr(buf, 0, cap) == NULL || strlen(buf) != ((size_t)n < cap ? (size_t)n : cap - 1)))
            fz_fail("tn_array_snprint into %zu bytes returned %d, wrote %zu", cap, n, memchr(buf, 0, cap) ? strlen(buf) : cap);
        if (cap < sizeof buf && buf[cap] != 'Z') fz_fail("tn_array_snprint wrote past %zu bytes", cap);
        break;
    }
    case 5:
        if (tn_array_print(a, fz_null) != TN_OK) fz_check_error("tn_array_print", NULL);
        break;
    case 6: {
        tn_result r = tn_array_check(a);
        if (r != TN_OK) fz_check_error("tn_array_check", NULL);
        (void)tn_array_is_contiguous(a);
        (void)tn_array_nbytes(a);
        if (tn_array_size(a) != (a ? fz_array_size(a) : 0) && (!a || fz_array_size(a) >= 0)) fz_fail("tn_array_size disagrees");
        break;
    }
    case 7: {
        if (a && A[s].huge) return;
        tn_array *h = tn_array_to_host(a);
        if (!h) fz_check_error("tn_array_to_host", NULL);
        fz_arr_add(h, -1);
        break;
    }
    default:
        if (s >= 0) { fz_log("  free a%d", s); fz_arr_drop(s); }
        break;
    }
}

/* >>fuzz_graph ----------------------------------------------------------- */

/* A graph argument: G[0] or G[1], rarely NULL (*g = -2). */
static tn_graph *fz_graph(int *g) {
    if (fz_u8() < 5) { *g = -2; return NULL; }
    *g = fz_pick(2);
    return G[*g];
}

static void act_input(void) {
    int g;
    tn_graph *gr = fz_graph(&g);
    fz_var *R = fz_rec(K_INPUT, 0, 0, NULL);
    R->g = g;
    tn_dtype t = fz_dtype();
    int k = fz_u8(), nd = k < 248 ? fz_pick(5) : k < 252 ? -1 : TN_MAX_DIMS + 1, form = fz_pick(10);
    int64_t sh[TN_MAX_DIMS] = { 0 };
    bool bc[TN_MAX_DIMS] = { false }, shnull = fz_u8() < 20, bcnull = fz_u8() < 128;
    for (int d = 0; d < nd && d < TN_MAX_DIMS; d++) {
        int c = fz_u8();
        sh[d] = shnull ? -1 : c < 90 ? -1 : c < 160 ? 3 : c < 190 ? 1 : c < 246 ? c % 5 : c < 250 ? (c & 1 ? -2 : INT64_MIN) : FZ_HUGE_DIMS[c % 4];
        bc[d] = !bcnull && (fz_u8() < 60 || (fz_u8() < 4 && sh[d] != 1));
    }
    fz_tame(nd, sh);
    const char *name = fz_name();
    R->bad = !fz_dtype_ok(t) && t != TN_DTYPE_NONE;
    fz_pre();
    tn_var *v;
    char ss[200];
    if (form < 4) {
        fz_log("v%d = tn_input(G%d, '%s', %s, %d, %s, bcast %s)", nV, g, name ? name : "(null)", fz_dname(t), nd, shnull ? "NULL" : fz_shape_str(nd, sh, ss), bcnull ? "NULL" : "...");
        R->ip[0] = nd;
        for (int d = 0; d < nd && d < TN_MAX_DIMS; d++) { R->ip[1 + d] = sh[d]; R->ip[9] |= (int64_t)bc[d] << d; }
        v = tn_input(gr, name, t, nd, shnull ? NULL : sh, bcnull ? NULL : bc);
    } else {
        static const char *const forms[] = { "tn_scalar", "tn_vector", "tn_matrix", "tn_tensor3", "tn_row", "tn_col" };
        static const int fnd[] = { 0, 1, 2, 3, 2, 2 };
        tn_var *(*const fns[])(tn_graph *, const char *, tn_dtype) = { tn_scalar, tn_vector, tn_matrix, tn_tensor3, tn_row, tn_col };
        int f = form - 4;
        fz_log("v%d = %s(G%d, '%s', %s)", nV, forms[f], g, name ? name : "(null)", fz_dname(t));
        R->ip[0] = fnd[f];
        for (int d = 0; d < fnd[f]; d++) R->ip[1 + d] = -1;
        if (f == 4) R->ip[9] = 1;
        if (f == 5) R->ip[9] = 2;
        v = fns[f](gr, name, t);
    }
    int i = fz_done(v, "tn_input", form >= 4 ? (const char *[]){ "tn_scalar", "tn_vector", "tn_matrix", "tn_tensor3", "tn_row", "tn_col" }[form - 4] : NULL);
    if (i < 0) return;
    for (int d = 0; d < V[i].stat.nd; d++) {
        int64_t s = V[i].stat.sh[d];
        int c = fz_u8();
        V[i].plan[d] = s >= 0 ? s : c < 150 ? 3 : c % 5;
    }
}

/* A leaf from an array: tn_constant or tn_shared. */
static void act_value_leaf(bool shared) {
    int g, s = fz_arr_pick();
    tn_graph *gr = fz_graph(&g);
    if (s >= 0 && A[s].huge && fz_array_size(A[s].a) != 0) return;     /* a copy of it would not fit */
    fz_var *R = fz_rec(shared ? K_SHARED : K_CONST, 0, 0, NULL);
    R->g = g;
    tn_array *a = ARR(s);
    R->bad = !a;
    if (a) {
        R->cval = fz_unknown();
        R->cval.st = 1;
        R->cval.nd = a->ndim;
        memcpy(R->cval.sh, a->shape, sizeof R->cval.sh);
        R->cval.b = fz_array_bound(a);
    }
    const char *name = fz_name();
    fz_pre();
    fz_log("v%d = %s(G%d, a%d)", nV, shared ? "tn_shared" : "tn_constant", g, s);
    tn_var *v = shared ? tn_shared(gr, name, a) : tn_constant(gr, a);
    fz_done(v, shared ? "tn_shared" : "tn_constant", NULL);
}

static void act_literal(void) {
    double x = fz_double();
    int g = -1, like = fz_u8() < 128 ? fz_operand(-1) : -3;
    tn_graph *gr = like == -3 ? fz_graph(&g) : NULL;
    fz_var *R = fz_rec(K_CONST, 0, 0, NULL);
    R->cval = fz_unknown();
    R->cval.st = 1;
    R->cval.b = isfinite(x) ? fabs(x) : INFINITY;
    fz_pre();
    tn_var *v;
    if (like == -3) {
        R->g = g;
        fz_log("v%d = tn_scalar_const(G%d, %g)", nV, g, x);
        v = tn_scalar_const(gr, x);
        fz_done(v, "tn_scalar_const", NULL);
    } else {
        R->g = like >= 0 ? V[like].g : -2;
        fz_log("v%d = tn_lit(v%d, %g)", nV, like, x);
        v = tn_lit(VAR(like), x);
        fz_done(v, "tn_lit", NULL);
    }
}

static void act_eye_arange(void) {
    int g;
    tn_graph *gr = fz_graph(&g);
    tn_dtype t = fz_dtype();
    fz_var *R;
    tn_var *v;
    fz_pre();
    if (fz_u8() & 1) {
        R = fz_rec(K_EYE, 0, 0, NULL);
        for (int k = 0; k < 3; k++) R->ip[k] = fz_u8() < 240 ? fz_pick(6) - 1 : fz_int();
        int64_t em[2] = { R->ip[0], R->ip[1] < 0 ? R->ip[0] : R->ip[1] };
        fz_tame(2, em);
        if (em[0] != R->ip[0]) R->ip[0] = em[0];
        if (R->ip[1] >= 0 && em[1] != R->ip[1]) R->ip[1] = em[1];
        fz_log("v%d = tn_eye(G%d, %s, %lld, %lld, %lld)", nV, g, fz_dname(t), (long long)R->ip[0], (long long)R->ip[1], (long long)R->ip[2]);
        R->g = g;
        R->bad = !fz_dtype_ok(t) && t != TN_DTYPE_NONE;
        v = tn_eye(gr, t, R->ip[0], R->ip[1], R->ip[2]);
        fz_done(v, "tn_eye", NULL);
    } else {
        R = fz_rec(K_ARANGE, 0, 0, NULL);
        R->fp[0] = fz_small_double(); R->fp[1] = fz_double(); R->fp[2] = fz_u8() < 128 ? 1 : fz_double();
        fz_log("v%d = tn_arange(G%d, %s, %g, %g, %g)", nV, g, fz_dname(t), R->fp[0], R->fp[1], R->fp[2]);
        R->g = g;
        R->bad = !fz_dtype_ok(t) && t != TN_DTYPE_NONE;
        v = tn_arange(gr, t, R->fp[0], R->fp[1], R->fp[2]);
        fz_done(v, "tn_arange", NULL);
    }
}

static void act_ew(void) {
    int k = fz_pick(FZ_NEW), a = fz_operand(-1), b = fz_operand(fz_graph_of(a)), c = fz_operand(fz_graph_of(a));
    const fz_ew *e = &FZ_EWS[k];
    fz_rec(K_EW, k, e->arity, (int[]){ a, b, c });
    fz_pre();
    fz_log("v%d = %s(v%d, v%d, v%d)", nV, e->name, a, e->arity > 1 ? b : -9, e->arity > 2 ? c : -9);
    tn_var *v = e->arity == 1 ? e->f1(VAR(a)) : e->arity == 2 ? e->f2(VAR(a), VAR(b)) : e->f3(VAR(a), VAR(b), VAR(c));
    fz_done(v, e->name, NULL);
}

static void act_cast(void) {
    int a = fz_operand(-1);
    tn_dtype t = fz_dtype();
    fz_var *R = fz_rec(K_CAST, 0, 1, &a);
    R->bad = !fz_dtype_ok(t) && t != TN_DTYPE_NONE;
    fz_pre();
    fz_log("v%d = tn_cast(v%d, %s)", nV, a, fz_dname(t));
    fz_done(tn_cast(VAR(a), t), "tn_cast", NULL);
}

static void act_same(void) {
    static const char *const names[] = { "tn_stop_gradient", "tn_gpu_from_host", "tn_host_from_gpu" };
    tn_var *(*const fns[])(tn_var *) = { tn_stop_gradient, tn_gpu_from_host, tn_host_from_gpu };
    int k = fz_pick(3), a = fz_operand(-1);
    fz_rec(K_SAME, k, 1, &a);
    fz_pre();
    fz_log("v%d = %s(v%d)", nV, names[k], a);
    fz_done(fns[k](VAR(a)), names[k], NULL);
}

static void act_reduce(void) {
    static const char *const names[] = { "tn_sum", "tn_prod", "tn_mean", "tn_max", "tn_min", "tn_all", "tn_any", "tn_logsumexp", "tn_argmax", "tn_argmin" };
    tn_var *(*const fns[])(tn_var *, const int *, int, bool) = { tn_sum, tn_prod, tn_mean, tn_max, tn_min, tn_all, tn_any, tn_logsumexp };
    int k = fz_pick(10), a = fz_operand(-1), nd = a >= 0 ? tn_var_ndim(VAR(a)) : 0;
    fz_var *R = fz_rec(K_RED, k, 1, &a);
    int axes[TN_MAX_DIMS + 1], c = fz_u8();
    int naxes = k >= 8 ? 1 : c < 250 ? fz_pick(nd + 1) : c < 253 ? -1 : TN_MAX_DIMS + 1;
    bool anull = k < 8 && fz_u8() < 80, keep = fz_u8() & 1;
    for (int i = 0; i < naxes; i++) axes[i] = fz_axis(nd);
    if (naxes > 0 && fz_u8() < 128) for (int i = 0; i < naxes && i < nd; i++) axes[i] = (i + nd - naxes + (int)(fz_u8() & 1) * 0) % (nd ? nd : 1);
    R->ip[1] = anull; R->ip[2] = naxes; R->ip[3] = keep;
    for (int i = 0; i < naxes && i < 8; i++) R->ip[4 + i] = axes[i];
    R->bad = !anull && naxes < 0;
    fz_pre();
    fz_log("v%d = %s(v%d, axes %s n %d [%d %d], keepdims %d)", nV, names[k], a, anull ? "NULL" : "", naxes, naxes > 0 ? axes[0] : 0, naxes > 1 ? axes[1] : 0, keep);
    tn_var *v = k < 8 ? fns[k](VAR(a), anull ? NULL : axes, naxes, keep) : (k == 8 ? tn_argmax : tn_argmin)(VAR(a), axes[0], keep);
    fz_done(v, names[k], NULL);
}

static void act_axis_op(void) {
    static const char *const names[] = { "tn_softmax", "tn_log_softmax", "tn_cumsum", "tn_cumprod" };
    tn_var *(*const fns[])(tn_var *, int) = { tn_softmax, tn_log_softmax, tn_cumsum, tn_cumprod };
    int k = fz_pick(4), a = fz_operand(-1), ax = fz_axis(a >= 0 ? tn_var_ndim(VAR(a)) : 0);
    fz_var *R = fz_rec(K_AXIS, k, 1, &a);
    R->ip[0] = ax;
    fz_pre();
    fz_log("v%d = %s(v%d, %d)", nV, names[k], a, ax);
    fz_done(fns[k](VAR(a), ax), names[k], NULL);
}

static void act_linalg(void) {
    int k = fz_pick(4), a = fz_operand(-1), b = fz_operand(fz_graph_of(a)), c = fz_operand(fz_graph_of(a));
    double alpha = fz_u8() < 200 ? fz_pick(3) - 1 : fz_double(), beta = fz_u8() < 200 ? fz_pick(3) : fz_double();
    fz_var *R;
    tn_var *v;
    fz_pre();
    switch (k) {
    case 0: fz_rec(K_DOT, 0, 2, (int[]){ a, b }); fz_log("v%d = tn_dot(v%d, v%d)", nV, a, b); v = tn_dot(VAR(a), VAR(b)); fz_done(v, "tn_dot", NULL); break;
    case 1: fz_rec(K_OUTER, 0, 2, (int[]){ a, b }); fz_log("v%d = tn_outer(v%d, v%d)", nV, a, b); v = tn_outer(VAR(a), VAR(b)); fz_done(v, "tn_outer", NULL); break;
    default:
        R = fz_rec(k == 2 ? K_GEMM : K_GEMV, 0, 3, (int[]){ c, a, b });
        R->fp[0] = alpha; R->fp[1] = beta;
        fz_log("v%d = %s(v%d, %g, v%d, v%d, %g)", nV, k == 2 ? "tn_gemm" : "tn_gemv", c, alpha, a, b, beta);
        v = (k == 2 ? tn_gemm : tn_gemv)(VAR(c), alpha, VAR(a), VAR(b), beta);
        fz_done(v, k == 2 ? "tn_gemm" : "tn_gemv", NULL);
        break;
    }
}

/* A target shape for reshape, broadcast_to or alloc: from x's static
   shape (so it often fits) or random. Returns ndim. */
static int fz_target_shape(int x, int64_t *sh, bool reshape) {
    const fz_m *m = x >= 0 ? &V[x].stat : NULL;
    int c = fz_u8(), nd;
    if (m && c < 170) {
        nd = reshape ? fz_pick(4) : m->nd + (fz_u8() < 80);
        if (nd > TN_MAX_DIMS) nd = TN_MAX_DIMS;
        for (int d = 0; d < nd; d++) sh[d] = 1;
        if (reshape) {
            int64_t n = fz_size(m);
            if (nd > 0) sh[fz_pick(nd)] = fz_u8() < 128 || n < 0 ? -1 : n;
        } else {
            for (int d = 0; d < nd; d++) {
                int e = d - (nd - m->nd);
                sh[d] = e >= 0 && m->sh[e] >= 0 ? m->sh[e] : 3;
                if (sh[d] == 1 && fz_u8() < 100) sh[d] = 3;
            }
        }
    } else {
        nd = c < 250 ? fz_pick(5) : c < 253 ? -1 : TN_MAX_DIMS + 1;
        for (int d = 0; d < nd && d < TN_MAX_DIMS; d++) {
            int e = fz_u8();
            sh[d] = e < 230 ? e % 5 - (reshape && e < 40) : e < 245 ? -(e % 3) - 1 : FZ_HUGE_DIMS[e % 4];
        }
    }
#if !FZ_FIXED_SHAPE_OVERFLOW
    if (reshape) for (int d = 0; d < nd && d < TN_MAX_DIMS; d++) if (sh[d] > 64) sh[d] = 4;
#endif
    fz_tame(nd, sh);
    return nd;
}

static void act_shape_op(void) {
    int k = fz_pick(7), a = fz_operand(-1), nd = a >= 0 ? tn_var_ndim(VAR(a)) : 0;
    int64_t sh[TN_MAX_DIMS] = { 0 };
    char ss[200];
    fz_var *R;
    tn_var *v;
    fz_pre();
    switch (k) {
    case 0: {
#if !FZ_FIXED_SHAPE_OVERFLOW
        if (a >= 0 && V[a].huge) return;
#endif
        int tnd = fz_target_shape(a, sh, true);
        R = fz_rec(K_RESHAPE, 0, 1, &a);
        R->ip[0] = tnd;
        for (int d = 0; d < tnd && d < TN_MAX_DIMS; d++) R->ip[1 + d] = sh[d];
        R->bad = tnd < 0 || tnd > TN_MAX_DIMS;
        bool shnull = tnd > 0 && fz_u8() < 4;
        R->bad = R->bad || shnull;
        fz_log("v%d = tn_reshape(v%d, %d, %s)", nV, a, tnd, shnull ? "NULL" : fz_shape_str(tnd, sh, ss));
        v = tn_reshape(VAR(a), tnd, shnull ? NULL : sh);
        fz_done(v, "tn_reshape", NULL);
        break;
    }
    case 1: {
        int pat[TN_MAX_DIMS + 1], pnd = 0;
        for (int d = 0; d < nd && pnd < TN_MAX_DIMS; d++) {
            if (fz_u8() < 40 && pnd < TN_MAX_DIMS) pat[pnd++] = -1;
            if (pnd < TN_MAX_DIMS && fz_u8() < 240) pat[pnd++] = d;
        }
        for (int d = 0; d < pnd; d++) if (fz_u8() < 60) { int e = fz_pick(pnd), t = pat[d]; pat[d] = pat[e]; pat[e] = t; }
        if (pnd > 0 && fz_u8() < 16) { int bad = fz_axis(nd); pat[fz_pick(pnd)] = bad > INT32_MIN ? bad - 1 : bad; }
        if (fz_u8() < 4) pnd = fz_u8() & 1 ? -1 : TN_MAX_DIMS + 1;
        R = fz_rec(K_DIMSHUFFLE, 0, 1, &a);
        R->ip[0] = pnd;
        for (int d = 0; d < pnd && d < TN_MAX_DIMS; d++) R->ip[1 + d] = pat[d];
        R->bad = pnd < 0 || pnd > TN_MAX_DIMS;
        fz_log("v%d = tn_dimshuffle(v%d, %d, [%d %d %d])", nV, a, pnd, pnd > 0 ? pat[0] : 0, pnd > 1 ? pat[1] : 0, pnd > 2 ? pat[2] : 0);
        v = tn_dimshuffle(VAR(a), pnd, pat);
        fz_done(v, "tn_dimshuffle", NULL);
        break;
    }
    case 2: {
        int perm[TN_MAX_DIMS];
        bool pnull = fz_u8() < 100;
        for (int d = 0; d < nd; d++) perm[d] = d;
        for (int d = 0; d < nd; d++) { int e = fz_pick(nd), t = perm[d]; perm[d] = perm[e]; perm[e] = t; }
        for (int d = 0; d < nd; d++) if (fz_u8() < 30) perm[d] -= nd;
        if (nd > 0 && fz_u8() < 16) perm[fz_pick(nd)] = fz_axis(nd);
        R = fz_rec(K_TRANSPOSE, 0, 1, &a);
        R->ip[0] = !pnull;
        for (int d = 0; d < nd; d++) R->ip[1 + d] = perm[d];
        fz_log("v%d = tn_transpose(v%d, %s)", nV, a, pnull ? "NULL" : "perm");
        v = tn_transpose(VAR(a), pnull ? NULL : perm);
        fz_done(v, "tn_transpose", NULL);
        break;
    }
    case 3: {
        static const int64_t steps[] = { 1, 1, 2, -1, -2, 3, INT64_MIN, 0, INT64_MAX, INT64_MIN + 1, 100 };
        R = fz_rec(K_SLICE, 0, 1, &a);
        R->ip[0] = fz_axis(nd);
        R->ip[1] = fz_u8() < 64 ? INT64_MIN : fz_int();
        R->ip[2] = fz_u8() < 64 ? INT64_MIN : fz_int();
        R->ip[3] = steps[fz_pick(11)];
        fz_log("v%d = tn_slice(v%d, %lld, %lld, %lld, %lld)", nV, a, (long long)R->ip[0], (long long)R->ip[1], (long long)R->ip[2], (long long)R->ip[3]);
        v = tn_slice(VAR(a), (int)R->ip[0], R->ip[1], R->ip[2], R->ip[3]);
        fz_done(v, "tn_slice", NULL);
        break;
    }
    case 4: {
        static const int outs[] = { 1, 1, 2, 3, 0, -1, 4, 9 };
        int od = fz_u8() < 128 ? outs[fz_pick(8)] : nd;
#if !FZ_FIXED_FLATTEN_0D
        if (nd == 0 && od >= 2) od = 1;
#endif
#if !FZ_FIXED_SHAPE_OVERFLOW
        if (a >= 0 && V[a].huge) return;
#endif
        R = fz_rec(K_FLATTEN, 0, 1, &a);
        R->ip[0] = od;
        fz_log("v%d = tn_flatten(v%d, %d)", nV, a, od);
        v = tn_flatten(VAR(a), od);
        fz_done(v, "tn_flatten", NULL);
        break;
    }
    case 5: {
        bool alloc = fz_u8() & 1;
        int tnd = fz_target_shape(a, sh, false);
        R = fz_rec(K_BCAST, alloc, 1, &a);
        R->ip[0] = tnd;
        for (int d = 0; d < tnd && d < TN_MAX_DIMS; d++) R->ip[1 + d] = sh[d];
        bool shnull = tnd > 0 && fz_u8() < 4;
        R->bad = tnd < 0 || tnd > TN_MAX_DIMS || shnull;
        fz_log("v%d = %s(v%d, %d, %s)", nV, alloc ? "tn_alloc" : "tn_broadcast_to", a, tnd, shnull ? "NULL" : fz_shape_str(tnd, sh, ss));
        v = (alloc ? tn_alloc : tn_broadcast_to)(VAR(a), tnd, shnull ? NULL : sh);
        fz_done(v, alloc ? "tn_alloc" : "tn_broadcast_to", NULL);
        break;
    }
    default: {
        int b = fz_operand(fz_graph_of(a));
        fz_rec(K_FILL, 0, 2, (int[]){ a, b });
        fz_log("v%d = tn_fill(v%d, v%d)", nV, a, b);
        v = tn_fill(VAR(a), VAR(b));
        fz_done(v, "tn_fill", NULL);
        break;
    }
    }
}

static void act_join(void) {
    bool stack = fz_u8() & 1;
    int n = fz_u8() < 250 ? 1 + fz_pick(4) : 0, ix[4];
    tn_var *xs[4];
    for (int k = 0; k < n; k++) { ix[k] = fz_operand(k ? fz_graph_of(ix[0]) : -1); xs[k] = VAR(ix[k]); }
    int nd = n > 0 && ix[0] >= 0 ? tn_var_ndim(xs[0]) : 0, ax = fz_axis(nd + stack);
    fz_var *R = fz_rec(stack ? K_STACK : K_CONCAT, 0, n, ix);
    R->ip[0] = ax;
    R->bad = n == 0;
    bool xnull = fz_u8() < 4;
    R->bad = R->bad || xnull;
    fz_pre();
    fz_log("v%d = %s(%d, [v%d v%d v%d v%d], %d)", nV, stack ? "tn_stack" : "tn_concatenate", n, n > 0 ? ix[0] : -9, n > 1 ? ix[1] : -9, n > 2 ? ix[2] : -9, n > 3 ? ix[3] : -9, ax);
    tn_var *v = (stack ? tn_stack : tn_concatenate)(n, xnull ? NULL : xs, ax);
    fz_done(v, stack ? "tn_stack" : "tn_concatenate", NULL);
}

/* Some vars of graph g that are floats (wrt candidates) */
static int fz_float_var(int g) {
    for (int t = 0; t < 8; t++) {
        int i = fz_operand(g);
        if (i < 0 || tn_dtype_is_float(tn_var_dtype(V[i].v))) return i;
    }
    return fz_operand(g);
}

static const char *fz_grad_who(void) {
#if FZ_FIXED_ERROR_NAMES
    return NULL;
#else
    return "tn_";            /* the inner constructor's name for now */
#endif
}

static void act_grad(void) {
    int c = fz_operand(-1), g = fz_graph_of(c), n = fz_u8() < 250 ? 1 + fz_pick(3) : fz_pick(2) - 1, wrt[3];
    tn_var *w[3], *grads[3] = { NULL, NULL, NULL }, *cost = VAR(c);
    int how = fz_pick(4);
#if !FZ_FIXED_SHAPE_OVERFLOW
    if (c >= 0 && V[c].huge) return;          /* gradients reshape: tn_reshape's size check overflows on huge dims */
#endif
    fz_pre();
    if (cost && tn_var_ndim(cost) != 0 && fz_u8() < 200) {     /* a 0-d cost */
        fz_log("v%d = tn_sum(v%d)", nV, c);
        fz_rec(K_RED, 0, 1, &c)->ip[1] = 1;
        int s = fz_done(tn_sum(cost, NULL, 0, false), "tn_sum", NULL);
        if (s < 0) return;
        c = s;
        cost = V[s].v;
    }
    for (int k = 0; k < n && k < 3; k++) { wrt[k] = fz_float_var(g); w[k] = VAR(wrt[k]); }
    if (how == 3) {                  /* forward mode: tn_rop with eval points of each wrt's shape */
        tn_var *ev[3];
        int evi[3];
        for (int k = 0; k < n && k < 3; k++) {
            int e = fz_u8() < 128 && wrt[k] >= 0 ? wrt[k] : fz_operand(g);
            if (e >= 0 && fz_u8() < 128) {
                fz_rec(K_EW, 0, 1, &e);
                for (int q = 0; q < FZ_NEW; q++) if (strcmp(FZ_EWS[q].name, "tn_sin") == 0) V[nV].sub = q;
                fz_log("v%d = tn_sin(v%d)", nV, e);
                e = fz_done(tn_sin(VAR(e)), "tn_sin", NULL);
            }
            evi[k] = e;
            ev[k] = VAR(e);
        }
        int deps[7] = { c }, nd = 1;                 /* f, and what the tangents read */
        for (int k = 0; k < n && k < 3; k++) { deps[nd++] = wrt[k]; deps[nd++] = evi[k]; }
        fz_rec(K_LIKE, 1, nd, deps);
        fz_log("v%d = tn_rop(v%d, %d, [v%d v%d v%d], [v%d v%d v%d])", nV, c, n, n > 0 ? wrt[0] : -9, n > 1 ? wrt[1] : -9,
               n > 2 ? wrt[2] : -9, n > 0 ? evi[0] : -9, n > 1 ? evi[1] : -9, n > 2 ? evi[2] : -9);
        tn_var *v = tn_rop(VAR(c), n, fz_u8() < 4 ? NULL : w, fz_u8() < 4 ? NULL : ev);
        if (!v) fz_check_error("tn_rop", fz_grad_who());
        else if (n < 0) fz_fail("tn_rop succeeded with %d variables", n);
        else fz_done(v, "tn_rop", NULL);
        return;
    }
    tn_grad_options opt = { 0 };
    opt.disconnected_inputs = (tn_disconnected)fz_pick(3);
    int cc = fz_operand(g);
    tn_var *constant[1] = { VAR(cc) };
    if (fz_u8() < 60) { opt.n_consider_constant = 1; opt.consider_constant = constant; }
    fz_log("tn_grad(v%d, %d, [v%d v%d v%d], how %d, disconnected %d, constant v%d)", c, n, n > 0 ? wrt[0] : -9, n > 1 ? wrt[1] : -9, n > 2 ? wrt[2] : -9, how, (int)opt.disconnected_inputs, opt.n_consider_constant ? cc : -9);
    if (how == 2 && n >= 1) {
        tn_var *v = tn_grad1(cost, w[0]);
        if (!v) { fz_check_error("tn_grad1", fz_grad_who()); return; }
        fz_rec(K_LIKE, 0, 2, (int[]){ wrt[0], c });
        fz_done(v, "tn_grad1", NULL);
        return;
    }
    tn_result r = tn_grad(cost, n, fz_u8() < 4 ? NULL : w, fz_u8() < 4 ? NULL : grads, how ? &opt : NULL);
    if (r != TN_OK) {
        fz_check_error("tn_grad", fz_grad_who());
        for (int k = 0; k < n && k < 3; k++) if (grads[k]) fz_fail("tn_grad failed but grads[%d] is set", k);
        return;
    }
    if (n < 0 || !cost) fz_fail("tn_grad succeeded with n %d, cost v%d", n, c);
    for (int k = 0; k < n && k < 3; k++) {
        if (!grads[k]) { fz_fail("tn_grad succeeded but grads[%d] is NULL", k); continue; }
        fz_rec(K_LIKE, 0, 2, (int[]){ wrt[k], c });
        fz_log("v%d = grad %d", nV, k);
        fz_done(grads[k], "tn_grad", NULL);
    }
}

/* scan: out(t) = op(seq(t), out(t-1)) (or of out(t-2)), op from the program. */
typedef struct fz_scan_user { int op, n_seq; bool bad_out; } fz_scan_user;
static tn_result fz_scan_step(tn_scan_step *s, void *user) {
    const fz_scan_user *u = (const fz_scan_user *)user;
    tn_var *prev = s->out[0] ? s->out[0][0] : NULL, *x = u->n_seq ? s->seq[0][0] : NULL;
    tn_var *a = prev ? prev : x, *b = x ? x : prev;
    if (!a) a = tn_scalar_const(s->g, 1.0);
    if (!b) b = a;
    switch (u->op) {
    case 0: s->outputs[0] = tn_add(a, b); break;
    case 1: s->outputs[0] = tn_mul(tn_tanh(a), b); break;
    case 2: s->outputs[0] = tn_maximum(a, tn_sum(b, NULL, 0, false)); break;
    default: s->outputs[0] = u->bad_out ? NULL : tn_neg(a); break;
    }
    return s->outputs[0] || !u->bad_out ? TN_OK : TN_ERR_INVALID;
}

static void act_scan(void) {
    int seq = fz_operand(-1), g = fz_graph_of(seq), init = fz_u8() < 200 ? fz_operand(g) : -1;
    static const int seq_taps[][2] = { { 0, 0 }, { -1, 0 }, { 1, 0 }, { -4, 0 } }, out_taps[][2] = { { -1, 0 }, { -2, -1 }, { 1, 0 }, { 0, 0 } };
    int st = fz_pick(4), ot = fz_pick(4);
    fz_scan_user u = { fz_pick(4), seq >= 0 || fz_u8() < 128, fz_u8() < 16 };
    tn_scan_seq sq = { VAR(seq), st == 0 ? 0 : st == 3 ? 2 : 1, seq_taps[st] };
    tn_scan_out so = { VAR(init), ot == 0 ? 0 : ot == 1 ? 2 : 1, out_taps[ot] };
    tn_scan_desc d = { 0 };
    d.step = fz_u8() < 4 ? NULL : fz_scan_step;
    d.user = &u;
    d.n_sequences = u.n_seq;
    d.sequences = &sq;
    d.n_outputs = fz_u8() < 4 ? 0 : 1;
    d.outputs = &so;
    d.has_n_steps = fz_u8() < 80;
    d.n_steps = fz_u8() < 200 ? fz_pick(5) : fz_int();
    d.go_backwards = fz_u8() & 1;
    d.truncate_gradient = fz_u8() < 200 ? 0 : fz_int();
    d.graph = g >= 0 ? G[g] : NULL;
    d.name = fz_name();
    tn_var *outs[1] = { NULL };
    fz_pre();
    fz_log("tn_scan(seq v%d taps#%d, init v%d taps#%d, op %d, n_steps %d:%lld, back %d)", seq, st, init, ot, u.op, d.has_n_steps, (long long)d.n_steps, d.go_backwards);
    tn_result r = tn_scan(&d, outs, NULL, NULL);
    if (r != TN_OK) { fz_check_error("tn_scan", NULL); return; }
    if (!outs[0]) { fz_fail("tn_scan succeeded without an output"); return; }
    int ins[2] = { seq >= 0 ? seq : init, init >= 0 ? init : seq };
    fz_rec(K_OPAQUE, 0, ins[0] >= 0 ? 2 : 0, ins)->g = g;
    fz_done(outs[0], "tn_scan", NULL);
}

/* A custom op: y = x + 1 elementwise on x's type (float inputs), whose type
   rule refuses other dtypes with a long reason; the CPU function writes
   every element the type promises. */
static tn_result fz_custom_infer(const tn_custom_op *op, const tn_type *in, tn_type *out, char *why, size_t cap) {
    if (*(const int *)op->user == 0) {           /* no inputs (the rule is not told how many: user says) */
        memset(out, 0, sizeof *out);
        out->dtype = TN_F64;
        return TN_OK;
    }
    if (!tn_dtype_is_float(in[0].dtype)) {
        for (size_t k = 0; k + 1 < cap; k++) why[k] = 'z';     /* a reason that fills the buffer */
        if (cap) why[cap - 1] = 0;
        return TN_ERR_DTYPE;
    }
    for (int k = 0; k < op->n_outputs || k < 1; k++) out[k] = in[0];
    return TN_OK;
}
static tn_result fz_custom_cpu(const tn_custom_op *op, tn_array *const *in, tn_array *const *out, char *why, size_t cap) {
    for (int k = 0; k < op->n_outputs || k < 1; k++) {
        tn_array *src = *(const int *)op->user ? in[0] : tn_array_scalar(TN_F64, 1.0);
        tn_result r = tn_array_assign(out[k], src);
        if (src != in[0]) tn_array_free(src);
        if (r != TN_OK) { snprintf(why, cap, "%s", tn_last_error()); return r; }
    }
    return TN_OK;
}

static void act_custom(void) {
    static const char *const names[] = { "plus", NULL, "", "%s%n" };
    tn_custom_op op = { .name = names[fz_pick(4)], .n_inputs = fz_pick(3) - 1, .n_outputs = fz_pick(3),
                        .infer = fz_u8() < 8 ? NULL : fz_custom_infer, .cpu = fz_u8() < 8 ? NULL : fz_custom_cpu };
    int a = fz_operand(-1), g = -1;
    tn_graph *gr = fz_u8() < 128 ? NULL : fz_graph(&g);
    static int counts[3] = { 0, 1, 2 };          /* user outlives the graph */
    int n = fz_u8() < 240 ? 1 : fz_pick(3);
    op.user = &counts[n];
    tn_var *in[2] = { VAR(a), VAR(a) };
    fz_pre();
    fz_log("v%d = tn_custom(%s, '%s' n_inputs %d n_outputs %d, v%d x%d)", nV, gr ? "G" : "NULL", op.name ? op.name : "(null)", op.n_inputs, op.n_outputs, a, n);
    if (op.n_outputs > 1) {
        tn_var *outs[2] = { NULL, NULL };
        tn_result r = tn_custom_multi(gr, &op, n, in, outs);
        if (r != TN_OK) { fz_check_error("tn_custom_multi", "tn_custom"); return; }
        fz_rec(n == 1 ? K_SAME : K_OPAQUE, 0, n > 0, &a)->g = gr ? g : n ? -1 : -2;
        fz_done(outs[0], "tn_custom_multi", NULL);
        return;
    }
    fz_rec(n == 1 ? K_SAME : K_OPAQUE, 0, n > 0, &a)->g = gr ? g : n ? -1 : -2;   /* g may be NULL only with inputs */
    fz_done(tn_custom(gr, &op, n, in), "tn_custom", NULL);
}

/* tn_verify_grad of a smooth expression (it must pass) or a bad one. */
static tn_var *fz_vg_build(tn_graph *g, tn_var *const *in, void *user) {
    (void)g;
    switch (*(const int *)user) {
    case 0: return tn_sin(in[0]);
    case 1: return tn_mul(tn_tanh(in[0]), in[0]);
    case 2: return tn_sum(tn_exp(tn_tanh(in[0])), NULL, 0, false);
    case 3: return tn_mul(in[0], in[1]);
    case 4: return tn_dot(in[0], in[1]);
    default: return NULL;                       /* a builder that fails */
    }
}

static void act_verify_grad(void) {
    int op = fz_pick(6), n = op >= 3 && op < 5 ? 2 : 1, src[2];
    tn_array *pts[2] = { NULL, NULL };
    bool fresh[2] = { false, false }, small = true;
    for (int k = 0; k < n; k++) {
        src[k] = fz_u8() < 100 ? fz_arr_pick() : -2;
        if (src[k] >= 0 && fz_array_size(A[src[k]].a) >= 0 && fz_array_size(A[src[k]].a) <= 16) pts[k] = A[src[k]].a;
#if !FZ_FIXED_SHAPE_OVERFLOW
        for (int d = 0; pts[k] && d < pts[k]->ndim; d++) if (pts[k]->shape[d] > 64) pts[k] = NULL;   /* products like (0, 2^48, 2^48) */
#endif
        else if (src[k] == -2) {
            int64_t sh[2] = { 1 + fz_pick(3), 1 + fz_pick(3) };
            pts[k] = tn_array_rand_uniform(TN_F64, fz_pick(3), sh, -1, 1, fz_u8());
            fresh[k] = true;
        }
        small = small && pts[k];
    }
    tn_verify_grad_desc d = { .build = fz_u8() < 4 ? NULL : fz_vg_build, .user = &op, .n_inputs = fz_u8() < 4 ? 0 : n,
                              .points = fz_u8() < 4 ? NULL : pts, .seed = fz_u8(), .static_shapes = fz_u8() & 1,
                              .mode = fz_u8() < 128 ? TN_MODE_FAST_COMPILE : TN_MODE_DEFAULT };
    tn_verify_grad_report rep;
    fz_pre();
    fz_log("tn_verify_grad(op %d, n %d, points a%d a%d, static %d)", op, d.n_inputs, n > 0 ? src[0] : -9, n > 1 ? src[1] : -9, d.static_shapes);
    tn_result r = small || !d.points ? tn_verify_grad(&d, fz_u8() < 128 ? &rep : NULL) : TN_OK;
    if (r != TN_OK) {
        fz_check_error("tn_verify_grad", NULL);
        bool fine = d.build && d.n_inputs && d.points && op <= 2 && tn_array_check(pts[0]) == TN_OK && tn_array_size(pts[0]) > 0;
        for (int k = 0; fine && k < n; k++) fine = fz_array_bound(pts[k]) <= 4 && pts[k]->dtype != TN_BOOL;
        if (fine && r == TN_ERR_INVALID) fz_fail("tn_verify_grad refused a smooth expression: %s", tn_last_error());
    } else fz_log("  -> ok");
    for (int k = 0; k < n; k++) if (fresh[k]) tn_array_free(pts[k]);
}

/* >>fuzz_functions ------------------------------------------------------- */

/* The inputs that variable i reads, by the recorded program (marks seen[]). */
static void fz_inputs_of(int i, bool *seen) {
    if (i < 0 || seen[i]) return;
    seen[i] = true;
    for (int k = 0; k < V[i].n_in; k++) fz_inputs_of(V[i].in[k], seen);
}

static bool fz_is_huge(int i) { return i >= 0 && V[i].huge; }

static void act_compile(void) {
    int slot = 0;
    while (slot < FZ_MAXF && F[slot].f) slot++;
    if (slot == FZ_MAXF) return;
    int g;
    tn_graph *gr = fz_graph(&g);
    fz_fn *fn = &F[slot];
    memset(fn, 0, sizeof *fn);
    int gg = g < 0 ? 0 : g;
    fn->n_out = fz_u8() < 8 ? 0 : 1 + fz_pick(3);
    for (int k = 0; k < fn->n_out; k++) { fn->out[k] = fz_operand(gg); fn->borrow[k] = fz_u8() < 60; }
    tn_update ups[3];
    if (fz_u8() < 70) {
        for (int k = 0; k < nV && fn->n_upd < 3; k++) {
            if (V[k].kind != K_SHARED || V[k].g != gg || fz_u8() < 100) continue;
            int val = fz_u8() < 160 ? k : fz_operand(gg);
            if (val == k) {                   /* w + literal, or w's op: same type mostly */
                int lit = -1, op = fz_pick(3);
                fz_rec(K_CONST, 0, 0, NULL);
                V[nV].cval = fz_unknown(); V[nV].cval.st = 1; V[nV].cval.b = 1; V[nV].g = gg;
                fz_log("v%d = tn_lit(v%d, 1)", nV, k);
                lit = fz_done(tn_lit(V[k].v, 1.0), "tn_lit", NULL);
                if (lit < 0) continue;
                static const char *const ops[] = { "tn_add", "tn_mul", "tn_maximum" };
                int q = 0;
                while (q < FZ_NEW && strcmp(FZ_EWS[q].name, ops[op]) != 0) q++;
                fz_rec(K_EW, q, 2, (int[]){ k, lit });
                fz_log("v%d = %s(v%d, v%d)", nV, ops[op], k, lit);
                val = fz_done(FZ_EWS[q].f2(V[k].v, V[lit].v), ops[op], NULL);
                if (val < 0) continue;
            }
            fn->upd_sh[fn->n_upd] = k;
            fn->upd_val[fn->n_upd] = val;
            ups[fn->n_upd] = (tn_update){ V[k].v, VAR(val) };
            fn->n_upd++;
        }
    }
    /* inputs: those the outputs read, in some order; sometimes one more or one less */
    bool seen[FZ_MAXV + 1] = { false };
    for (int k = 0; k < fn->n_out; k++) fz_inputs_of(fn->out[k], seen);
    for (int k = 0; k < fn->n_upd; k++) fz_inputs_of(fn->upd_val[k], seen);
    tn_var *ins[FZ_MAXV];
    for (int i = 0; i < nV; i++) {
        bool take = (seen[i] && V[i].kind == K_INPUT) || (V[i].kind == K_INPUT && fz_u8() < 8);
        if (take && fz_u8() < 4) take = false;
        if (take) fn->in[fn->n_in++] = i;
    }
    for (int k = 0; k < fn->n_in; k++) { int e = fz_pick(fn->n_in), t = fn->in[k]; fn->in[k] = fn->in[e]; fn->in[e] = t; }
    if (fn->n_in > 0 && fz_u8() < 6) fn->in[fz_pick(fn->n_in)] = fz_operand(-1);     /* a non-input, NULL or the other graph's */
    for (int k = 0; k < fn->n_in; k++) ins[k] = VAR(fn->in[k]);
    static const char *const fnames[] = { NULL, NULL, "f", "step", "%s%n" };
    fn->name = fnames[fz_pick(5)];
    bool bo[4];
    for (int k = 0; k < 4; k++) bo[k] = fn->borrow[k];
    tn_var *outs[4];
    for (int k = 0; k < fn->n_out; k++) outs[k] = VAR(fn->out[k]);
    tn_func_desc d = { 0 };
    d.n_inputs = fn->n_in;
    d.inputs = fz_u8() < 4 && fn->n_in ? NULL : ins;
    d.n_outputs = fn->n_out;
    d.outputs = outs;
    d.n_updates = fn->n_upd;
    d.updates = ups;
    bool all_borrow = fz_u8() < 40;
    d.borrow = all_borrow;
    d.borrow_outputs = fz_u8() < 128 ? bo : NULL;
    for (int k = 0; k < fn->n_out; k++) fn->borrow[k] = d.borrow_outputs ? bo[k] : all_borrow;
    static const tn_mode modes[] = { TN_MODE_DEFAULT, TN_MODE_FAST_RUN, TN_MODE_FAST_COMPILE, TN_MODE_CHECK, (tn_mode)7 };
    d.mode = modes[fz_u8() < 250 ? fz_pick(4) : 4];
    d.name = fn->name;
    static const int fused[] = { 0, 0, -1, 1, 2, 3, 64, -5 };
    d.max_fused_inputs = fused[fz_pick(8)];
#if !FZ_FIXED_SHAPE_OVERFLOW
    /* constant folding allocates shapes like {0, 2^48, 2^48}, whose strides overflow */
    for (int k = 0; k < fn->n_out; k++) if (fz_is_huge(fn->out[k])) return;
    for (int k = 0; k < fn->n_upd; k++) if (fz_is_huge(fn->upd_val[k])) return;
#endif
    fz_pre();
    fz_log("F%d = tn_function(G%d, in %d [v%d v%d ..], out %d [v%d v%d v%d], upd %d [v%d<-v%d], mode %d, borrow %d/%s, fused %d, name %s)",
           slot, g, fn->n_in, fn->n_in > 0 ? fn->in[0] : -9, fn->n_in > 1 ? fn->in[1] : -9, fn->n_out, fn->n_out > 0 ? fn->out[0] : -9,
           fn->n_out > 1 ? fn->out[1] : -9, fn->n_out > 2 ? fn->out[2] : -9, fn->n_upd, fn->n_upd ? fn->upd_sh[0] : -9,
           fn->n_upd ? fn->upd_val[0] : -9, (int)d.mode, all_borrow, d.borrow_outputs ? "per output" : "NULL", d.max_fused_inputs,
           fn->name ? fn->name : "NULL");
    fn->f = tn_function(gr, &d);
    bool must_fail = !gr || (d.n_inputs && !d.inputs) || (fn->n_out == 0 && fn->n_upd == 0) || (unsigned)d.mode > TN_MODE_CHECK;
    for (int k = 0; k < fn->n_out; k++) must_fail = must_fail || fn->out[k] < 0 || V[fn->out[k]].g != g;
    for (int k = 0; k < fn->n_in; k++) must_fail = must_fail || fn->in[k] < 0 || V[fn->in[k]].g != g || V[fn->in[k]].kind != K_INPUT;
    if (!fn->f) { fz_check_error("tn_function", NULL); return; }
    fz_log("  -> F%d", slot);
    fz_stat[1]++;
    if (must_fail) fz_fail("tn_function succeeded with a bad description");
}

/* Whether tn_call converts an array of dtype a for an input of dtype b:
   NumPy's can_cast(a, b, 'safe'), as its table lists the library's dtypes. */
static bool fz_safe_cast(tn_dtype a, tn_dtype b) {
    static const char *const ok[] = { "bool>int32", "bool>int64", "bool>float16", "bool>float32", "bool>float64",
                                      "int32>int64", "int32>float64", "int64>float64", "float16>float32", "float16>float64",
                                      "float32>float64" };
    char k[40];
    if (a == b) return true;
    snprintf(k, sizeof k, "%s>%s", tn_dtype_name(a), tn_dtype_name(b));
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) if (!strcmp(ok[i], k)) return true;
    return false;
}

/* The array a call passes for input i: its planned shape, as a plain,
   strided or broadcast array, or sometimes a wrong one. *bad: the call must
   fail because of it. */
static tn_array *fz_call_arg(int i, int f, bool *bad, bool *fresh) {
    const fz_var *r = &V[i];
    tn_dtype t = tn_var_dtype(r->v);
    int nd = tn_var_ndim(r->v), c = fz_u8();
    int64_t sh[TN_MAX_DIMS];
    memcpy(sh, r->plan, sizeof sh);
    *fresh = true;
    if (c < 4) { *bad = true; *fresh = false; return NULL; }
    if (c < 8 && nA > 0) {                         /* some array of the pool */
        int k = fz_pick(nA);
        if (A[k].huge) return NULL;
        *fresh = false;
        tn_array *a = A[k].a;
        if (A[k].fn == f || tn_array_check(a) != TN_OK || !fz_safe_cast(a->dtype, t) || a->ndim != nd) *bad = true;   /* its own borrowed output too */
        for (int d = 0; !*bad && d < nd; d++) {
            int64_t s = tn_var_dim(r->v, d);
            if (s >= 0 && a->shape[d] != s) *bad = true;
        }
        return a;
    }
    if (c < 12) { tn_dtype w = (tn_dtype)(t % 6 + 1); if (!fz_safe_cast(w, t)) *bad = true; t = w; }
    else if (c < 16) { nd = nd ? nd - 1 : 1; sh[0] = 2; *bad = true; }
    else if (c < 24 && nd > 0) {                   /* another size: fine where the static dim is unknown */
        int d = fz_pick(nd);
        sh[d] = sh[d] == 2 ? 3 : 2;
        int64_t s = tn_var_dim(r->v, d);
        if (s >= 0) *bad = true;
    }
    int form = fz_pick(4);
    for (int d = 0; d < nd; d++) if (sh[d] > 64) {  /* empty, or too big to make */
#if !FZ_FIXED_SHAPE_OVERFLOW
        int64_t n = 8;
        for (int e = 0; e < nd; e++) if (sh[e] > 0 && !fz_mul(n, sh[e], &n)) { *bad = true; return NULL; }
#endif
        tn_array *z = tn_array_zeros(t, nd, sh);
        if (!z) *bad = true;
        return z;
    }
    if (form == 1 && nd > 0) {                     /* a strided view: every other element of a longer array */
        int d = fz_pick(nd);
        int64_t big[TN_MAX_DIMS];
        memcpy(big, sh, sizeof big);
        big[d] = 2 * sh[d] + 1;
        tn_array *b = fz_values(t, nd, big), *v = tn_array_slice(b, d, 1, TN_NONE, 2);
        tn_array_free(b);
        return v;
    }
    if (form == 2 && nd > 1) {                     /* a transposed view */
        int64_t rsh[TN_MAX_DIMS];
        for (int d = 0; d < nd; d++) rsh[d] = sh[nd - 1 - d];
        tn_array *b = fz_values(t, nd, rsh), *v = tn_array_transpose(b, NULL);
        tn_array_free(b);
        return v;
    }
    if (form == 3 && nd > 0) {                     /* a broadcast view */
        int64_t one[TN_MAX_DIMS];
        memcpy(one, sh, sizeof one);
        one[0] = 1;
        tn_array *b = fz_values(t, nd, one), *v = tn_array_broadcast_to(b, nd, sh);
        tn_array_free(b);
        return v;
    }
    return fz_values(t, nd, sh);
}

/* Checks output o of a call against variable i's type and model. */
static void fz_check_output(const char *what, const tn_array *o, int i, const fz_m *m) {
    tn_var *v = V[i].v;
    if (!o) { fz_fail("%s is NULL after a successful call", what); return; }
    if (o->dtype != tn_var_dtype(v) || o->ndim != tn_var_ndim(v))
        { fz_fail("%s is %s of %d dims; the variable is %s of %d", what, fz_dname(o->dtype), o->ndim, fz_dname(tn_var_dtype(v)), tn_var_ndim(v)); return; }
    char s1[200], s2[200];
    for (int d = 0; d < o->ndim; d++) {
        int64_t s = tn_var_dim(v, d);
        if (s >= 0 && o->shape[d] != s) { fz_fail("%s has shape %s; the static shape says dim %d is %lld", what, fz_shape_str(o->ndim, o->shape, s1), d, (long long)s); return; }
    }
    if (m->st == 1 && (m->nd != o->ndim || memcmp(m->sh, o->shape, (size_t)o->ndim * sizeof o->shape[0])))
        { fz_fail("%s has shape %s; NumPy's rules say %s", what, fz_shape_str(o->ndim, o->shape, s1), fz_shape_str(m->nd, m->sh, s2)); return; }
    if (o->device != TN_HOST) fz_fail("%s is on device %d", what, o->device);
    if (m->st == 1 && isfinite(m->b) && tn_dtype_is_float(o->dtype)) {
        double *x = NULL;
        if (fz_read(o, &x)) {
            int64_t n = fz_array_size(o);
            for (int64_t k = 0; k < n; k++)
                if (!(fabs(x[k]) <= m->b * 1.1 + 1e-3)) { fz_fail("%s: element %lld is %g, beyond the bound %g of its inputs", what, (long long)k, x[k], m->b); break; }
        }
        free(x);
    }
}

/* Borrowed outputs of function f are stale once it runs again. */
static void fz_stale_borrows(int f, bool ran) {
    for (int k = nA - 1; k >= 0; k--) {
        if (A[k].fn != f) continue;
        if (ran && F[f].calls - A[k].call < 7 && tn_array_check(A[k].a) != TN_ERR_STALE)
            fz_fail("a borrowed output of F%d from call %d is not stale at call %d", f, A[k].call, F[f].calls);
        fz_arr_drop(k);
    }
}

static void act_call(void) {
    int live[FZ_MAXF], n = 0;
    for (int k = 0; k < FZ_MAXF; k++) if (F[k].f) live[n++] = k;
    if (n == 0) return;
    int f = live[fz_pick(n)];
    fz_fn *fn = &F[f];
    for (int k = 0; k < fn->n_out; k++) if (fz_is_huge(fn->out[k])) return;   /* may run for ever */
    for (int k = 0; k < fn->n_upd; k++) if (fz_is_huge(fn->upd_val[k])) return;
    tn_array *args[FZ_MAXV];
    bool fresh[FZ_MAXV], bad = false;
    fz_gen++;
    memset(fz_arg, 0, sizeof fz_arg);
    for (int k = 0; k < fn->n_in; k++) {
        args[k] = fz_call_arg(fn->in[k], f, &bad, &fresh[k]);
        if (!args[k] && fresh[k]) bad = true;         /* a view could not be made */
        fz_arg[fn->in[k]] = args[k];
        fz_argb[fn->in[k]] = args[k] ? fz_array_bound(args[k]) : INFINITY;
    }
    /* what NumPy's rules expect of the outputs and the updated values */
    fz_m mo[4], mu[3];
    int expect = 1;
    for (int k = 0; k < fn->n_out; k++) { mo[k] = fz_model(fn->out[k], true); if (mo[k].st < expect) expect = mo[k].st; }
    for (int k = 0; k < fn->n_upd; k++) { mu[k] = fz_model(fn->upd_val[k], true); if (mu[k].st < expect) expect = mu[k].st; }
    tn_array *outs[5] = { NULL, NULL, NULL, NULL, NULL };
    int how = fz_pick(8), nin = fn->n_in, nout = fn->n_out;
    if (how == 1 && fz_u8() < 128) nin += fz_u8() & 1 ? 1 : -1;
    if (how == 1 && fz_u8() < 64) nout += 1;
    bool in_null = how == 2 && fn->n_in > 0, out_null = how == 3 && fn->n_out > 0;
    bool must_fail = bad || in_null || out_null || nin != fn->n_in || nout != fn->n_out;   /* a wrong call */
    if (must_fail) expect = -1;
    fz_pre();
    fz_log("tn_call%s(F%d, %d inputs, %d outputs)%s%s expect %d", how == 1 ? "_n" : "", f, nin, nout, in_null ? " inputs NULL" : "", out_null ? " outputs NULL" : "", expect);
    tn_result r = how == 1 ? tn_call_n(fn->f, nin, in_null ? NULL : args, nout, out_null ? NULL : outs)
                           : tn_call(fn->f, in_null ? NULL : args, out_null ? NULL : outs);
    if (r == TN_OK) fn->calls++;
    fz_stat[r == TN_OK ? 2 : 3]++;
    fz_stale_borrows(f, r == TN_OK);
    if (r != TN_OK) {
        fz_check_error(fn->name ? fn->name : "tn_call", how == 1 ? "tn_call_n" : NULL);
        if (expect == 1 && r != TN_ERR_OOM) fz_fail("the call failed although NumPy's rules accept its shapes");
        for (int k = 0; k < 5; k++) if (outs[k]) fz_fail("the call failed but output %d is set", k);
    } else {
        fz_log("  -> ok");
        /* A call NumPy's rules refuse may still run where the optimizer dropped the failing node
           (fill(alloc(x, S), v) needs only S): counted; the outputs must still fit their types. */
        if (must_fail) fz_fail("the call succeeded although an argument is wrong");
        else if (expect == -1) fz_stat[6]++;
        for (int k = 0; k < fn->n_out; k++) {
            char what[32];
            snprintf(what, sizeof what, "output %d (v%d)", k, fn->out[k]);
            fz_check_output(what, outs[k], fn->out[k], &mo[k]);
            if (outs[k] && fn->borrow[k] != (outs[k]->live_gen != NULL)) fz_fail("output %d: borrowed %d, asked %d", k, outs[k]->live_gen != NULL, fn->borrow[k]);
        }
        for (int k = 0; k < fn->n_upd; k++) {
            char what[40];
            snprintf(what, sizeof what, "shared v%d after its update", fn->upd_sh[k]);
            fz_check_output(what, tn_shared_get(V[fn->upd_sh[k]].v), fn->upd_val[k], &mu[k]);
        }
        for (int k = 0; k < fn->n_out; k++) {
            if (!outs[k]) continue;
            if (outs[k]->live_gen) { fz_arr_add(outs[k], f); continue; }      /* the function's: never freed */
            if (fz_u8() < 40) { fz_arr_add(outs[k], -1); continue; }           /* the pool owns it (or frees it when full) */
            tn_array_free(outs[k]);
        }
    }
    for (int k = 0; k < fn->n_in; k++) if (fresh[k]) tn_array_free(args[k]);
}

static void fz_function_free(int f) {
    fz_log("tn_function_free(F%d)", f);
    for (int k = nA - 1; k >= 0; k--) if (A[k].fn == f) fz_arr_drop(k);
    tn_function_free(F[f].f);
    F[f].f = NULL;
}

static void act_shared(void) {
    int i = fz_operand(-1), how = fz_pick(3), s = fz_arr_pick();
    tn_var *v = VAR(i);
    bool is_sh = i >= 0 && V[i].kind == K_SHARED;
    fz_pre();
    fz_log("shared#%d(v%d, a%d)", how, i, s);
    if (how == 0) {
        const tn_array *a = tn_shared_get(v);
        if (!a) fz_check_error("tn_shared_get", NULL);
        else if (!is_sh) fz_fail("tn_shared_get of a non-shared variable succeeded");
    } else if (how == 1) {
        tn_array *a = tn_shared_get_value(v);
        if (!a) { fz_check_error("tn_shared_get_value", NULL); return; }
        if (!is_sh) fz_fail("tn_shared_get_value of a non-shared variable succeeded");
        fz_arr_add(a, -1);
    } else {
        tn_array *a = ARR(s);
        if (s >= 0 && A[s].huge && fz_array_size(a) != 0) return;
        tn_result r = tn_shared_set_value(v, a);
        if (r != TN_OK) { fz_check_error("tn_shared_set_value", NULL); return; }
        if (!is_sh || !a || a->dtype != tn_var_dtype(v) || a->ndim != tn_var_ndim(v)) fz_fail("tn_shared_set_value succeeded with a bad value");
        const tn_array *now = tn_shared_get(v);
        if (!now || memcmp(now->shape, a->shape, (size_t)a->ndim * sizeof a->shape[0])) fz_fail("tn_shared_set_value: the shape did not change");
    }
}

/* Printers, accessors, profiles and flags: they must not crash, and name themselves when they fail. */
static void act_misc(void) {
    int i = fz_operand(-1), f = fz_pick(FZ_MAXF), how = fz_pick(12);
    tn_var *v = VAR(i);
    tn_func *fn = F[f].f;
    FILE *out = fz_u8() < 8 ? NULL : fz_null;
    tn_result r = TN_OK;
    const char *who = "";
    fz_pre();
    fz_log("misc#%d(v%d, F%d, out %s)", how, i, f, out ? "null" : "NULL");
    switch (how) {
    case 0: who = "tn_debugprint"; r = tn_debugprint(v, out); break;
    case 1: who = "tn_write_dot_var"; r = tn_write_dot_var(v, out); break;
    case 2: who = "tn_scan_debugprint"; r = tn_scan_debugprint(v, out); break;
    case 3: who = "tn_debugprint_function"; r = tn_debugprint_function(fn, out); break;
    case 4: who = "tn_print_toposort"; r = tn_print_toposort(fn, out); break;
    case 5: who = "tn_write_dot"; r = tn_write_dot(fn, out); break;
    case 6: who = "tn_profile_enable"; r = tn_profile_enable(fn, fz_u8() & 1); break;
    case 7:
        who = "tn_profile_print";
        if ((r = tn_profile_print(fn, out)) != TN_OK) fz_check_error(who, NULL);
        tn_profile_reset(fn);
        (void)tn_profile_input_unchanged(fn, fz_pick(3) - 1);
        return;
    case 8: {
        int ax = fz_axis(tn_var_ndim(v));
        int64_t d = tn_var_dim(v, ax);
        int nd = tn_var_ndim(v);
        if (v && ax >= -nd && ax < nd && d != V[i].stat.sh[ax < 0 ? ax + nd : ax] && V[i].stat.sh[ax < 0 ? ax + nd : ax] >= 0)
            fz_fail("tn_var_dim(v%d, %d) is %lld", i, ax, (long long)d);
        if (v && (ax < -nd || ax >= nd) && d != -1) fz_fail("tn_var_dim out of range gave %lld", (long long)d);
        (void)tn_var_name(v); (void)tn_var_graph(v); (void)tn_var_dtype(v); (void)tn_function_device_steps(fn);
        return;
    }
    case 9: {
        who = "tn_var_set_name";
        const char *nm = fz_name();
        tn_var *w = tn_var_set_name(v, nm);
        if (!w) { fz_check_error(who, NULL); return; }
        if (w != v) fz_fail("tn_var_set_name returned another variable");
        if (nm && (!tn_var_name(v) || strcmp(tn_var_name(v), nm))) fz_fail("tn_var_set_name did not set the name");
        return;
    }
    case 10: {
        who = "tn_parse_flags";
        static const char *const toks[] = { "device=cpu", "floatX=float64", "mode=fast_run", "profile=1", "threads=", "cache_dir=",
                                            "=", ",", "cuda99", "mode=", "bogus=3", "threads=99999999999", "floatX=int8", "" };
        char flags[128] = "";
        int n = fz_pick(5);
        for (int k = 0; k < n; k++) strncat(flags, toks[fz_pick(14)], sizeof flags - strlen(flags) - 1);
        tn_config cfg;
        memset(&cfg, 0, sizeof cfg);
        fz_log("  flags '%s'", flags);
        r = tn_parse_flags(fz_u8() < 8 ? NULL : flags, fz_u8() < 8 ? NULL : &cfg);
        break;
    }
    default:
        if (fn && fz_u8() < 128) fz_function_free(f);
        return;
    }
    if (r != TN_OK) fz_check_error(who, NULL);
}

/* >>fuzz_driver ---------------------------------------------------------- */

static void fz_sink(tn_log_level level, const char *msg, void *user) {
    (void)user;
    if (!msg || !msg[0]) fz_fail("an empty %s message", level == TN_LOG_ERROR ? "error" : "log");
}

/* Runs one program; returns the number of failed checks. */
static int fz_run(const uint8_t *data, size_t size) {
    fz_p = data; fz_n = size; fz_i = 0;
    fz_trn = 0; fz_tr[0] = 0;
    int fails0 = fz_fails;
    if (!fz_null) fz_null = fopen("/dev/null", "w");
    static bool inited;
    if (!inited) { fz_ew_init(); inited = true; }
    tn_set_log(fz_sink, NULL);
    G[0] = tn_graph_new(); G[1] = tn_graph_new();
    nV = 0; nA = 0; nwraps = 0;
    memset(F, 0, sizeof F);
    for (int step = 0; step < FZ_STEPS && fz_i < fz_n; step++) {
        fz_stat[4]++;
        int act = fz_pick(32);
        if (nV < 3 && act >= 7 && act <= 20) act = act % 7;     /* leaves first */
        switch (act) {
        case 0: case 1: case 2: act_input(); break;
        case 3: act_value_leaf(false); break;
        case 4: act_value_leaf(true); break;
        case 5: act_literal(); break;
        case 6: act_eye_arange(); break;
        case 7: case 8: case 9: act_ew(); break;
        case 10: act_cast(); break;
        case 11: act_same(); break;
        case 12: case 13: act_reduce(); break;
        case 14: act_axis_op(); break;
        case 15: act_linalg(); break;
        case 16: case 17: act_shape_op(); break;
        case 18: act_join(); break;
        case 19: act_grad(); break;
        case 20: { int w = fz_pick(4); if (w == 0) act_verify_grad(); else if (w == 1) act_custom(); else act_scan(); break; }
        case 21: case 22: act_array_new(); break;
        case 23: act_array_view(); break;
        case 24: act_array_misc(); break;
        case 25: act_shared(); break;
        case 26: case 27: act_compile(); break;
        case 28: case 29: case 30: act_call(); break;
        default: act_misc(); break;
        }
    }
    /* free everything, in an order the bytes choose */
    fz_i = fz_n;
    int order = fz_seed_now % 3;
    fz_log("free everything (order %d)", order);
    if (order == 0) { tn_graph_free(G[0]); tn_graph_free(G[1]); G[0] = G[1] = NULL; }
    for (int f = FZ_MAXF - 1; f >= 0; f--) if (F[f].f) fz_function_free(f);
    if (order == 1) { tn_graph_free(G[1]); tn_graph_free(G[0]); G[0] = G[1] = NULL; }
    while (nA > 0) fz_arr_drop(nA - 1);
    if (order == 2) { tn_graph_free(G[0]); tn_graph_free(G[1]); G[0] = G[1] = NULL; }
    for (int k = 0; k < nwraps; k++) free(wraps[k]);
    tn_set_log(NULL, NULL);
    if (fz_trace_all) fz_print_trace(stdout);
    return fz_fails - fails0;
}

#ifdef FUZZ_LIBFUZZER
int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
#ifdef FZ_ASAN
    __sanitizer_set_death_callback(fz_on_death);
#endif
    return 0;
}
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_run(data, size);
    return 0;
}
#else
#include "harness.h"

/* Seed k's program: splitmix64 bytes, 256 to 2047 of them. */
static size_t fz_seed_bytes(uint64_t seed, uint8_t *buf, size_t cap) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    size_t n = 0, len = 256 + (size_t)(seed % 1792);
    while (n < len && n < cap) {
        z += 0x9E3779B97F4A7C15ull;
        uint64_t x = z;
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
        x ^= x >> 31;
        for (int k = 0; k < 8 && n < len; k++) buf[n++] = (uint8_t)(x >> (8 * k));
    }
    return n;
}

static int fz_run_seed(uint64_t seed) {
    static uint8_t buf[2048];
    fz_seed_now = seed;
    size_t n = fz_seed_bytes(seed, buf, sizeof buf);
    return fz_run(buf, n);
}

static uint64_t fz_n_seeds = 40000, fz_first;   /* about 20 s under ASan and UBSan on two cores */
TEST(fuzz_seeds) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t failed = 0;
    /* A UBSan report ends the run without a word of the seed: TN_FUZZ_PROGRESS=k
       names every k-th seed as it starts. */
    const char *pe = getenv("TN_FUZZ_PROGRESS");
    uint64_t progress = pe ? strtoull(pe, NULL, 10) : 0;
    for (uint64_t s = fz_first; s < fz_first + fz_n_seeds; s++) {
        if (progress && s % progress == 0) fprintf(stderr, "seed %llu\n", (unsigned long long)s);
        failed += fz_run_seed(s) != 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("fuzz: seeds %llu..%llu in %.1f s (%.0f seeds/s), %llu failed; per seed: %.1f steps, %.1f variables (%.1f refused), "
           "%.2f functions, %.2f calls run, %.2f refused; %llu calls ran past a node NumPy refuses\n", (unsigned long long)fz_first, (unsigned long long)(fz_first + fz_n_seeds - 1), sec,
           (double)fz_n_seeds / (sec > 0 ? sec : 1), (unsigned long long)failed, (double)fz_stat[4] / (double)fz_n_seeds,
           (double)fz_stat[0] / (double)fz_n_seeds, (double)fz_stat[5] / (double)fz_n_seeds, (double)fz_stat[1] / (double)fz_n_seeds,
           (double)fz_stat[2] / (double)fz_n_seeds, (double)fz_stat[3] / (double)fz_n_seeds, (unsigned long long)fz_stat[6]);
    CHECK(failed == 0, "%llu of %llu seeds failed", (unsigned long long)failed, (unsigned long long)fz_n_seeds);
}

int main(int argc, char **argv) {
#ifdef FZ_ASAN
    __sanitizer_set_death_callback(fz_on_death);
#endif
    const char *one = getenv("TN_FUZZ_SEED"), *n = argc > 1 ? argv[1] : getenv("TN_FUZZ_SEEDS"), *tr = getenv("TN_FUZZ_TRACE");
    fz_argv0 = argv[0];
    fz_trace_all = tr && tr[0] == '1';
    if (one) {
        fz_replay = true;
        int f = fz_run_seed(strtoull(one, NULL, 10));      /* the program goes to stderr as it runs */
        printf("seed %s: %d failed checks\n", one, f);
        return f != 0;
    }
    if (n) fz_n_seeds = strtoull(n, NULL, 10);
    if (getenv("TN_FUZZ_FIRST")) fz_first = strtoull(getenv("TN_FUZZ_FIRST"), NULL, 10);
    TH_RUN(fuzz_seeds);
    TH_END();
}
#endif
