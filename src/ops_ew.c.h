/* >>elementwise: the TN_EW_OPS table as data (names, kinds, expression text),
   the CPU elementwise engine (tn__cpu_ew_run), the type rules, labels and CPU
   entry points of every elementwise op and of COMPOSITE, and the public
   constructors (tn_add, tn_exp, ..., tn_cast). */
#include <string.h>
#include <stdarg.h>
#include <math.h>

/* >>ew_info -------------------------------------------------------------- */

/* Expression text is taken with TN_T, TN_F and TN_I undefined, so a code
   generator sees them as written and defines them itself. */
static const tn_ew_info tn__ew_infos[] = {
#define TN__X_INFO(E, n, ar, k, fe, ie) [TN_OP_##E] = { #n, ar, k, TN__XSTRINGIFY(fe), TN__XSTRINGIFY(ie) },
    TN_EW_OPS(TN__X_INFO)
#undef TN__X_INFO
};

TN_API const tn_ew_info *tn__ew_info(int op) {
    if (op <= TN_OP_NONE || op > TN_OP_CAST) return NULL;
    return &tn__ew_infos[op];
}

/* The helpers as text; their qualifier is spelled TN__QUAL, which the
   generated source defines (e.g. `#define TN__QUAL __device__ inline`). */
TN_API const char *tn__scalar_helpers_source(void) {
    return TN__XSTRINGIFY(TN__SCALAR_HELPERS(TN__QUAL));
}

TN__SCALAR_HELPERS(static inline)

static bool tn__ew_is_ew(int op) { return op > TN_OP_NONE && op <= TN_OP_CAST; }

/* >>ew_convert: scalar conversions with storage semantics ---------------- */

/* Compute types: the register type of each dtype. */
enum { TN__CT_F = 0, TN__CT_D = 1, TN__CT_I = 2 };
static int tn__ew_ct(tn_dtype t) {
    return t == TN_F16 || t == TN_F32 ? TN__CT_F : t == TN_F64 ? TN__CT_D : TN__CT_I;
}

/* float <-> half, round to nearest even (F. Giesen's float_to_half_fast3_rtne
   and half_to_float), written as selects between the paths so loops vectorise. */
static inline uint16_t tn__ew_f2h(float f) {
    uint32_t u, sign, sub, big;
    memcpy(&u, &f, 4);
    sign = u & 0x80000000u;
    u ^= sign;
    uint32_t norm = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;   /* rebias exponent, round half even */
    float g;
    memcpy(&g, &u, 4);
    g += 0.5f;                                    /* subnormal: aligns the 10 mantissa bits; FPU rounds */
    memcpy(&sub, &g, 4);
    sub -= 0x3f000000u;
    big = u > 0x7f800000u ? 0x7e00u : 0x7c00u;    /* NaN, or inf and >= 65520 */
    uint32_t o = u >= 0x47800000u ? big : u < 0x38800000u ? sub : norm;
    return (uint16_t)(o | (sign >> 16));
}

static inline float tn__ew_h2f(uint16_t h) {
    uint32_t o = (uint32_t)(h & 0x7fffu) << 13, sub;
    uint32_t e = o & 0x0f800000u;
    o += 0x38000000u;                             /* (127 - 15) << 23 */
    uint32_t t = o + 0x00800000u;
    float f;
    memcpy(&f, &t, 4);
    f -= 6.103515625e-05f;                        /* zero, subnormal: renormalise through the FPU */
    memcpy(&sub, &f, 4);
    o = e == 0x0f800000u ? o + 0x38000000u : e == 0 ? sub : o;
    o |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &o, 4);
    return f;
}

/* double -> half without double rounding: round to odd into float first. */
static inline uint16_t tn__ew_d2h(double d) {
    double ad = fabs(d);
    if (!(ad < 65520.0)) return tn__ew_f2h((float)d);  /* inf, NaN, overflow */
    float f = (float)d;
    if ((double)f != d) {
        uint32_t u;
        memcpy(&u, &f, 4);
        if (fabs((double)f) > ad) u -= 1;                /* toward zero */
        u |= 1u;                                         /* sticky */
        memcpy(&f, &u, 4);
    }
    return tn__ew_f2h(f);
}

/* float -> int: truncate; NaN and out of range give the type's minimum (as
   x86 and NumPy do) without C's undefined behaviour. */
static inline int64_t tn__ew_d2i64(double x) {
    return x >= -9223372036854775808.0 && x < 9223372036854775808.0 ? (int64_t)x : INT64_MIN;
}
static inline int64_t tn__ew_d2i32(double x) {
    return x > -2147483649.0 && x < 2147483648.0 ? (int64_t)(int32_t)x : (int64_t)INT32_MIN;
}
static inline int64_t tn__ew_wrap32(int64_t x) { return (int64_t)(int32_t)(uint32_t)(uint64_t)x; }

/* Storage value of a register value (cv_<ct>_<dtype>), and register value of
   a storage value (ld_<dtype>_<ct>). */
#define tn__cv_f_F16(x) tn__ew_f2h(x)
#define tn__cv_d_F16(x) tn__ew_d2h(x)
#define tn__cv_i_F16(x) tn__ew_d2h((double)(x))
#define tn__cv_f_F32(x) (x)
#define tn__cv_d_F32(x) ((float)(x))
#define tn__cv_i_F32(x) ((float)(x))
#define tn__cv_f_F64(x) ((double)(x))
#define tn__cv_d_F64(x) (x)
#define tn__cv_i_F64(x) ((double)(x))
#define tn__cv_f_I32(x) ((int32_t)tn__ew_d2i32((double)(x)))
#define tn__cv_d_I32(x) ((int32_t)tn__ew_d2i32(x))
#define tn__cv_i_I32(x) ((int32_t)tn__ew_wrap32(x))
#define tn__cv_f_I64(x) tn__ew_d2i64((double)(x))
#define tn__cv_d_I64(x) tn__ew_d2i64(x)
#define tn__cv_i_I64(x) (x)
#define tn__cv_f_BOOL(x) ((uint8_t)((x) != 0))
#define tn__cv_d_BOOL(x) ((uint8_t)((x) != 0))
#define tn__cv_i_BOOL(x) ((uint8_t)((x) != 0))

#define tn__ld_F16_f(x) tn__ew_h2f(x)
#define tn__ld_F16_d(x) ((double)tn__ew_h2f(x))
#define tn__ld_F16_i(x) tn__ew_d2i64((double)tn__ew_h2f(x))
#define tn__ld_F32_f(x) (x)
#define tn__ld_F32_d(x) ((double)(x))
#define tn__ld_F32_i(x) tn__ew_d2i64((double)(x))
#define tn__ld_F64_f(x) ((float)(x))
#define tn__ld_F64_d(x) (x)
#define tn__ld_F64_i(x) tn__ew_d2i64(x)
#define tn__ld_I32_f(x) ((float)(x))
#define tn__ld_I32_d(x) ((double)(x))
#define tn__ld_I32_i(x) ((int64_t)(x))
#define tn__ld_I64_f(x) ((float)(x))
#define tn__ld_I64_d(x) ((double)(x))
#define tn__ld_I64_i(x) (x)
#define tn__ld_BOOL_f(x) ((float)((x) != 0))
#define tn__ld_BOOL_d(x) ((double)((x) != 0))
#define tn__ld_BOOL_i(x) ((int64_t)((x) != 0))

typedef uint16_t tn__st_F16;
typedef float tn__st_F32;
typedef double tn__st_F64;
typedef int32_t tn__st_I32;
typedef int64_t tn__st_I64;
typedef uint8_t tn__st_BOOL;
typedef float tn__ct_f;
typedef double tn__ct_d;
typedef int64_t tn__ct_i;

/* Block loads and stores: contiguous, broadcast (stride 0) and strided. */
typedef void (*tn__ew_io_fn)(void *reg, char *mem, int64_t stride, int64_t n);

#define TN__DEF_LOAD(DT, CT) \
    static void tn__load_##DT##_##CT(void *reg, char *mem, int64_t s, int64_t n) { \
        tn__ct_##CT *restrict d = (tn__ct_##CT *)reg; \
        if (s == (int64_t)sizeof(tn__st_##DT)) { \
            const tn__st_##DT *restrict p = (const tn__st_##DT *)mem; \
            for (int64_t i = 0; i < n; i++) d[i] = tn__ld_##DT##_##CT(p[i]); \
        } else if (s == 0) { \
            tn__ct_##CT v = tn__ld_##DT##_##CT(*(const tn__st_##DT *)mem); \
            for (int64_t i = 0; i < n; i++) d[i] = v; \
        } else { \
            for (int64_t i = 0; i < n; i++) d[i] = tn__ld_##DT##_##CT(*(const tn__st_##DT *)(mem + i * s)); \
        } }
#define TN__DEF_STORE(DT, CT) \
    static void tn__store_##CT##_##DT(void *reg, char *mem, int64_t s, int64_t n) { \
        const tn__ct_##CT *restrict d = (const tn__ct_##CT *)reg; \
        if (s == (int64_t)sizeof(tn__st_##DT)) { \
            tn__st_##DT *restrict p = (tn__st_##DT *)mem; \
            for (int64_t i = 0; i < n; i++) p[i] = tn__cv_##CT##_##DT(d[i]); \
        } else { \
            for (int64_t i = 0; i < n; i++) *(tn__st_##DT *)(mem + i * s) = tn__cv_##CT##_##DT(d[i]); \
        } }
/* Register to register with storage semantics: the value `x` would read back
   as after being stored as DT. */
#define TN__DEF_CAST(DT, CT, CT2) \
    static void tn__cast_##CT##_##DT(int64_t n, void *restrict o, const void *restrict a, \
                                     const void *restrict b, const void *restrict c) { \
        (void)b; (void)c; \
        const tn__ct_##CT *restrict x = (const tn__ct_##CT *)a; \
        tn__ct_##CT2 *restrict y = (tn__ct_##CT2 *)o; \
        for (int64_t i = 0; i < n; i++) y[i] = tn__ld_##DT##_##CT2(tn__cv_##CT##_##DT(x[i])); }

#define TN__DEF_IO3(DT, CT2) \
    TN__DEF_LOAD(DT, f) TN__DEF_LOAD(DT, d) TN__DEF_LOAD(DT, i) \
    TN__DEF_STORE(DT, f) TN__DEF_STORE(DT, d) TN__DEF_STORE(DT, i) \
    TN__DEF_CAST(DT, f, CT2) TN__DEF_CAST(DT, d, CT2) TN__DEF_CAST(DT, i, CT2)
TN__DEF_IO3(F16, f)
TN__DEF_IO3(F32, f)
TN__DEF_IO3(F64, d)
TN__DEF_IO3(I32, i)
TN__DEF_IO3(I64, i)
TN__DEF_IO3(BOOL, i)

typedef void (*tn__ew_kfn)(int64_t n, void *restrict o, const void *restrict a,
                           const void *restrict b, const void *restrict c);

#define TN__IO_ROW(DT) { tn__load_##DT##_f, tn__load_##DT##_d, tn__load_##DT##_i }
static const tn__ew_io_fn tn__ew_loads[TN_DTYPE_COUNT][3] = {
    [TN_BOOL] = TN__IO_ROW(BOOL), [TN_I32] = TN__IO_ROW(I32), [TN_I64] = TN__IO_ROW(I64),
    [TN_F16] = TN__IO_ROW(F16), [TN_F32] = TN__IO_ROW(F32), [TN_F64] = TN__IO_ROW(F64),
};
#undef TN__IO_ROW
#define TN__IO_ROW(DT) { tn__store_f_##DT, tn__store_d_##DT, tn__store_i_##DT }
static const tn__ew_io_fn tn__ew_stores[TN_DTYPE_COUNT][3] = {
    [TN_BOOL] = TN__IO_ROW(BOOL), [TN_I32] = TN__IO_ROW(I32), [TN_I64] = TN__IO_ROW(I64),
    [TN_F16] = TN__IO_ROW(F16), [TN_F32] = TN__IO_ROW(F32), [TN_F64] = TN__IO_ROW(F64),
};
#undef TN__IO_ROW
#define TN__IO_ROW(DT) { tn__cast_f_##DT, tn__cast_d_##DT, tn__cast_i_##DT }
/* [target dtype][source compute type] */
static const tn__ew_kfn tn__ew_casts[TN_DTYPE_COUNT][3] = {
    [TN_BOOL] = TN__IO_ROW(BOOL), [TN_I32] = TN__IO_ROW(I32), [TN_I64] = TN__IO_ROW(I64),
    [TN_F16] = TN__IO_ROW(F16), [TN_F32] = TN__IO_ROW(F32), [TN_F64] = TN__IO_ROW(F64),
};
#undef TN__IO_ROW

/* A register value of `v` converted to dtype t and back (immediates). */
static void tn__ew_imm(double v, tn_dtype t, void *out) {
    tn__ew_casts[t][TN__CT_D](1, out, &v, NULL, NULL);
}

/* >>ew_kernels: the table expanded once per compute type ----------------- */
/* Each kernel runs one op over a block: o[i] = expr(a[i], b[i], c[i]).
   Output type: TN_I for comparisons and logic; the condition of WHERE is TN_I. */
#define TN__KOUT_TN_EWK_ARITH TN_T
#define TN__KOUT_TN_EWK_FLOAT TN_T
#define TN__KOUT_TN_EWK_CMP   TN_I
#define TN__KOUT_TN_EWK_LOGIC TN_I
#define TN__KOUT_TN_EWK_WHERE TN_T
#define TN__KOUT_TN_EWK_CAST  TN_T
#define TN__KA_TN_EWK_ARITH TN_T
#define TN__KA_TN_EWK_FLOAT TN_T
#define TN__KA_TN_EWK_CMP   TN_T
#define TN__KA_TN_EWK_LOGIC TN_T
#define TN__KA_TN_EWK_WHERE TN_I
#define TN__KA_TN_EWK_CAST  TN_T
#define TN__CAT3_(a, b, c) a##b##c
#define TN__CAT3(a, b, c) TN__CAT3_(a, b, c)
#define TN__KDEF(E, n, ar, k, fe, ie) \
    TN__KDEF_##ar(TN__CAT3(tn__k_, n, TN__KSFX), TN__KOUT_##k, TN__KA_##k, TN__KEXPR(fe, ie))
#define TN__KHEAD(NAME, OT, AT) \
    static void NAME(int64_t cnt, void *restrict o_, const void *restrict a_, \
                     const void *restrict b_, const void *restrict c_) { \
        OT *restrict o = (OT *)o_; \
        const AT *restrict pa = (const AT *)a_;
#define TN__KDEF_1(NAME, OT, AT, EXPR) TN__KHEAD(NAME, OT, AT) \
        (void)b_; (void)c_; \
        for (int64_t i = 0; i < cnt; i++) { const AT a = pa[i]; (void)a; o[i] = (OT)(EXPR); } }
#define TN__KDEF_2(NAME, OT, AT, EXPR) TN__KHEAD(NAME, OT, AT) \
        const TN_T *restrict pb = (const TN_T *)b_; (void)c_; \
        for (int64_t i = 0; i < cnt; i++) { \
            const AT a = pa[i]; const TN_T b = pb[i]; (void)a; (void)b; o[i] = (OT)(EXPR); } }
#define TN__KDEF_3(NAME, OT, AT, EXPR) TN__KHEAD(NAME, OT, AT) \
        const TN_T *restrict pb = (const TN_T *)b_; const TN_T *restrict pc = (const TN_T *)c_; \
        for (int64_t i = 0; i < cnt; i++) { \
            const AT a = pa[i]; const TN_T b = pb[i]; const TN_T c = pc[i]; \
            (void)a; (void)b; (void)c; o[i] = (OT)(EXPR); } }

#define TN_I int64_t
#define TN__KEXPR(fe, ie) fe
#define TN_T float
#define TN_F(fn) fn##f
#define TN__KSFX _f
TN_EW_OPS(TN__KDEF)
#undef TN_T
#undef TN_F
#undef TN__KSFX
#define TN_T double
#define TN_F(fn) fn
#define TN__KSFX _d
TN_EW_OPS(TN__KDEF)
#undef TN__KEXPR
#undef TN__KSFX
#undef TN_T
#define TN__KEXPR(fe, ie) ie
#define TN_T int64_t
#define TN__KSFX _i
TN_EW_OPS(TN__KDEF)
#undef TN__KEXPR
#undef TN__KSFX
#undef TN_T
#undef TN_F
#undef TN_I

/* [op][compute type of the operands] */
static const tn__ew_kfn tn__ew_kern[TN_OP_CAST + 1][3] = {
#define TN__X_KROW(E, n, ar, k, fe, ie) [TN_OP_##E] = { tn__k_##n##_f, tn__k_##n##_d, tn__k_##n##_i },
    TN_EW_OPS(TN__X_KROW)
#undef TN__X_KROW
};

#undef TN__KDEF
#undef TN__KDEF_1
#undef TN__KDEF_2
#undef TN__KDEF_3
#undef TN__KHEAD
#undef TN__CAT3
#undef TN__CAT3_
#undef TN__DEF_LOAD
#undef TN__DEF_STORE
#undef TN__DEF_CAST
#undef TN__DEF_IO3

/* After an instruction: make the register hold what its dtype can store, so
   a fused program computes what the unfused ops would (int32 wraps, bool is
   0/1, float16 rounds). */
static void tn__norm_f16(int64_t n, void *restrict o, const void *restrict a, const void *restrict b, const void *restrict c) {
    (void)a; (void)b; (void)c;
    float *x = (float *)o;
    for (int64_t i = 0; i < n; i++) x[i] = tn__ew_h2f(tn__ew_f2h(x[i]));
}
static void tn__norm_i32(int64_t n, void *restrict o, const void *restrict a, const void *restrict b, const void *restrict c) {
    (void)a; (void)b; (void)c;
    int64_t *x = (int64_t *)o;
    for (int64_t i = 0; i < n; i++) x[i] = tn__ew_wrap32(x[i]);
}
static void tn__norm_bool(int64_t n, void *restrict o, const void *restrict a, const void *restrict b, const void *restrict c) {
    (void)a; (void)b; (void)c;
    int64_t *x = (int64_t *)o;
    for (int64_t i = 0; i < n; i++) x[i] = x[i] != 0;
}

/* >>ew_engine: tn__cpu_ew_run ---------------------------------------------- */
/* The broadcast iteration space is coalesced (adjacent dims merge when every
   operand's strides allow), then walked row by row; a row is processed in
   blocks: inputs are loaded into register blocks of their compute type, each
   instruction is one tight loop over the block, outputs are stored converted.
   An input whose storage is its compute type and whose row is contiguous is
   read in place; an output likewise is written in place by its instruction. */
#define TN__EW_MAX_OPERANDS 64
#define TN__EW_MAX_REGS 512
#define TN__EW_SCRATCH 4096          /* 8-byte slots of register blocks per thread */
#define TN__EW_BLOCK 256
#define TN__EW_GRAIN 32768

enum { TN__IN_LOAD = 0, TN__IN_INPLACE, TN__IN_ONCE };

typedef struct tn__ew_plan {
    const tn_ew_program *prog;
    int n_in, n_out, nreg, ndim, blk;
    int64_t shape[TN_MAX_DIMS];                      /* coalesced; the last is the row */
    int64_t st[TN__EW_MAX_OPERANDS][TN_MAX_DIMS];    /* byte strides: inputs, then outputs */
    char *base[TN__EW_MAX_OPERANDS];
    tn__ew_io_fn io[TN__EW_MAX_OPERANDS];            /* load (inputs) or store (outputs) */
    uint8_t in_mode[TN__EW_MAX_OPERANDS];
    bool out_direct[TN__EW_MAX_OPERANDS];
    int8_t regct[TN__EW_MAX_REGS];
    tn__ew_kfn fn[TN__EW_MAX_REGS];                  /* per instruction; NULL: immediate */
    tn__ew_kfn norm[TN__EW_MAX_REGS];
} tn__ew_plan;

static void tn__ew_fill_imm(void *reg, int ct, double imm, tn_dtype t, int64_t n) {
    union { float f; double d; int64_t i; } v;
    tn__ew_imm(imm, t, &v);
    for (int64_t i = 0; i < n; i++) {
        if (ct == TN__CT_F) ((float *)reg)[i] = v.f;
        else if (ct == TN__CT_D) ((double *)reg)[i] = v.d;
        else ((int64_t *)reg)[i] = v.i;
    }
}

static void tn__ew_segment(const tn__ew_plan *P, void **rp, char **p, int64_t m) {
    const tn_ew_program *prog = P->prog;
    const int n_in = P->n_in, nd = P->ndim;
    for (int64_t off = 0; off < m; off += P->blk) {
        int64_t n = m - off < P->blk ? m - off : P->blk;
        for (int i = 0; i < n_in; i++) {
            int64_t s = P->st[i][nd - 1];
            if (P->in_mode[i] == TN__IN_LOAD) P->io[i](rp[i], p[i] + off * s, s, n);
            else if (P->in_mode[i] == TN__IN_INPLACE) rp[i] = p[i] + off * s;
        }
        for (int j = 0; j < P->n_out; j++)
            if (P->out_direct[j]) rp[prog->out_reg[j]] = p[n_in + j] + off * P->st[n_in + j][nd - 1];
        for (int k = 0; k < prog->n_instr; k++) {
            const tn_ew_instr *in = &prog->instr[k];
            void *o = rp[n_in + k];
            if (P->fn[k])
                P->fn[k](n, o, rp[in->a], in->b >= 0 ? rp[in->b] : NULL, in->c >= 0 ? rp[in->c] : NULL);
            if (P->norm[k]) P->norm[k](n, o, NULL, NULL, NULL);
        }
        for (int j = 0; j < P->n_out; j++) {
            if (P->out_direct[j]) continue;
            int64_t s = P->st[n_in + j][nd - 1];
            P->io[n_in + j](rp[prog->out_reg[j]], p[n_in + j] + off * s, s, n);
        }
    }
}

/* Per thread: register blocks in `scratch`, loop-invariant inputs and
   immediates loaded once. */
static void tn__ew_thread_init(const tn__ew_plan *P, double *scratch, void **rp) {
    const tn_ew_program *prog = P->prog;
    for (int r = 0; r < P->nreg; r++) rp[r] = scratch + (size_t)r * (size_t)P->blk;
    for (int i = 0; i < P->n_in; i++)
        if (P->in_mode[i] == TN__IN_ONCE) P->io[i](rp[i], P->base[i], 0, P->blk);
    for (int k = 0; k < prog->n_instr; k++)
        if (!P->fn[k]) tn__ew_fill_imm(rp[P->n_in + k], P->regct[P->n_in + k], prog->instr[k].imm, (tn_dtype)prog->instr[k].dtype, P->blk);
}

/* Tiled walk, for operands that are contiguous along the second-to-last dim
   but not the last (a transposed input): items are TN__EW_TILE rows of one
   plane, walked a column block at a time so every cache line read is used. */
#define TN__EW_TILE 16
static void tn__ew_range_tiled(void *ctx, int64_t lo, int64_t hi) {
    const tn__ew_plan *P = (const tn__ew_plan *)ctx;
    const int nops = P->n_in + P->n_out, nd = P->ndim;
    _Alignas(64) double scratch[TN__EW_SCRATCH];
    void *rp[TN__EW_MAX_REGS];
    char *p[TN__EW_MAX_OPERANDS];
    tn__ew_thread_init(P, scratch, rp);
    int64_t R = P->shape[nd - 2], C = P->shape[nd - 1], tiles = (R + TN__EW_TILE - 1) / TN__EW_TILE;
    for (int64_t item = lo; item < hi; item++) {
        int64_t plane = item / tiles, r0 = item % tiles * TN__EW_TILE, r1 = r0 + TN__EW_TILE < R ? r0 + TN__EW_TILE : R;
        int64_t off[TN__EW_MAX_OPERANDS] = { 0 };
        for (int d = nd - 3; d >= 0; d--) {
            int64_t i = plane % P->shape[d];
            plane /= P->shape[d];
            for (int o = 0; o < nops; o++) off[o] += i * P->st[o][d];
        }
        int64_t cb = P->blk < 32 ? P->blk : 32;    /* the lines (and pages) of each strided operand stay cached */
        for (int64_t c0 = 0; c0 < C; c0 += cb) {
            int64_t m = C - c0 < cb ? C - c0 : cb;
            for (int64_t r = r0; r < r1; r++) {
                for (int o = 0; o < nops; o++) p[o] = P->base[o] + off[o] + r * P->st[o][nd - 2] + c0 * P->st[o][nd - 1];
                tn__ew_segment(P, rp, p, m);
            }
        }
    }
}

static void tn__ew_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__ew_plan *P = (const tn__ew_plan *)ctx;
    const int nops = P->n_in + P->n_out, nd = P->ndim;
    _Alignas(64) double scratch[TN__EW_SCRATCH];
    void *rp[TN__EW_MAX_REGS];
    char *p[TN__EW_MAX_OPERANDS];
    tn__ew_thread_init(P, scratch, rp);

    int64_t inner = P->shape[nd - 1], idx[TN_MAX_DIMS] = { 0 };
    int64_t q = lo / inner, j0 = lo % inner;
    for (int d = nd - 2; d >= 0; d--) { idx[d] = q % P->shape[d]; q /= P->shape[d]; }
    for (int64_t left = hi - lo; left > 0;) {
        int64_t m = inner - j0 < left ? inner - j0 : left;
        for (int o = 0; o < nops; o++) {
            int64_t off = j0 * P->st[o][nd - 1];
            for (int d = 0; d < nd - 1; d++) off += idx[d] * P->st[o][d];
            p[o] = P->base[o] + off;
        }
        tn__ew_segment(P, rp, p, m);
        left -= m;
        j0 = 0;
        for (int d = nd - 2; d >= 0; d--) {
            if (++idx[d] < P->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* [lo, hi) bytes an array's elements span. */
static void tn__ew_extent(const tn_array *a, uintptr_t *lo, uintptr_t *hi) {
    intptr_t l = 0, h = 0;
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] == 0) { *lo = *hi = (uintptr_t)a->data; return; }
        intptr_t span = (intptr_t)((a->shape[d] - 1) * a->strides[d]);
        if (span < 0) l += span; else h += span;
    }
    *lo = (uintptr_t)a->data + (uintptr_t)l;
    *hi = (uintptr_t)a->data + (uintptr_t)h + tn_dtype_size(a->dtype);
}

static bool tn__ew_repr_is_ct(tn_dtype t, int ct) {
    return (t == TN_F32 && ct == TN__CT_F) || (t == TN_F64 && ct == TN__CT_D) || (t == TN_I64 && ct == TN__CT_I);
}

static const char *tn__ew_opname(int op) {
    if (op == TN_OP_CONSTANT) return "constant";
    const tn_ew_info *e = tn__ew_info(op);
    return e ? e->name : "?";
}

/* Checks the program and picks each instruction's kernel. */
static tn_result tn__ew_plan_program(tn__ew_plan *P, const tn_ew_program *prog, tn_array *const *out) {
    static const char *who = "tn__cpu_ew_run";
    static const char *ctname[3] = { "float", "double", "int64" };
    int n_in = prog->n_in, nreg = prog->n_in + prog->n_instr;
    if (n_in < 0 || prog->n_instr < 0 || prog->n_out < 1 || (n_in && !prog->in_dtype) || (prog->n_instr && !prog->instr) ||
        !prog->out_reg)
        return tn__err(TN_ERR_INTERNAL, "%s: malformed program (%d inputs, %d instructions, %d outputs)", who, n_in, prog->n_instr, prog->n_out);
    if (n_in + prog->n_out > TN__EW_MAX_OPERANDS || nreg > TN__EW_MAX_REGS)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: program too large (%d inputs + %d outputs, %d registers; at most %d operands and %d registers)",
                       who, n_in, prog->n_out, nreg, TN__EW_MAX_OPERANDS, TN__EW_MAX_REGS);
    bool read_later[TN__EW_MAX_REGS];
    memset(read_later, 0, sizeof read_later);
    for (int i = 0; i < n_in; i++) {
        if ((unsigned)prog->in_dtype[i] - 1u >= (unsigned)TN_DTYPE_COUNT - 1u)
            return tn__err(TN_ERR_INTERNAL, "%s: input %d has invalid dtype %d", who, i, (int)prog->in_dtype[i]);
        P->regct[i] = (int8_t)tn__ew_ct(prog->in_dtype[i]);
    }
    for (int k = 0; k < prog->n_instr; k++) {
        const tn_ew_instr *in = &prog->instr[k];
        int r = n_in + k;
        tn_dtype dt = (tn_dtype)in->dtype, idt = (tn_dtype)in->in_dtype;
        if ((unsigned)dt - 1u >= (unsigned)TN_DTYPE_COUNT - 1u)
            return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) has invalid dtype %d", who, k, tn__ew_opname(in->op), (int)dt);
        P->regct[r] = (int8_t)tn__ew_ct(dt);
        P->fn[k] = NULL;
        P->norm[k] = NULL;
        if (in->op == TN_OP_CONSTANT) continue;
        const tn_ew_info *e = tn__ew_info(in->op);
        if (!e) return tn__err(TN_ERR_INTERNAL, "%s: instruction %d has op %d, not an elementwise op", who, k, (int)in->op);
        int opr[3] = { in->a, in->b, in->c };
        for (int x = 0; x < 3; x++) {
            if (x < e->arity ? (opr[x] < 0 || opr[x] >= r) : opr[x] >= r)
                return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) operand %d is register %d (valid: 0..%d)", who, k, e->name, x, opr[x], r - 1);
            if (x < e->arity) read_later[opr[x]] = true;
        }
        if (e->kind == TN_EWK_CAST) {
            P->fn[k] = tn__ew_casts[dt][P->regct[in->a]];
            continue;
        }
        if ((unsigned)idt - 1u >= (unsigned)TN_DTYPE_COUNT - 1u)
            return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) has invalid operand dtype %d", who, k, e->name, (int)idt);
        int ict = tn__ew_ct(idt);
        int want_out = (e->kind == TN_EWK_CMP || e->kind == TN_EWK_LOGIC) ? TN__CT_I : ict;
        if (P->regct[r] != want_out)
            return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) computes %s but its dtype is %s", who, k, e->name, ctname[want_out], tn_dtype_name(dt));
        for (int x = 0; x < e->arity; x++) {
            int want = (e->kind == TN_EWK_WHERE && x == 0) ? TN__CT_I : ict;
            if (P->regct[opr[x]] != want)
                return tn__err(TN_ERR_INTERNAL, "%s: instruction %d (%s) reads register %d as %s but it holds %s", who, k, e->name, opr[x],
                               ctname[want], ctname[(int)P->regct[opr[x]]]);
        }
        P->fn[k] = tn__ew_kern[in->op][ict];
    }
    for (int j = 0; j < prog->n_out; j++) {
        int r = prog->out_reg[j];
        if (r < 0 || r >= nreg) return tn__err(TN_ERR_INTERNAL, "%s: output %d reads register %d (valid: 0..%d)", who, j, r, nreg - 1);
        tn_dtype rdt = r < n_in ? prog->in_dtype[r] : (tn_dtype)prog->instr[r - n_in].dtype;
        if (out[j]->dtype != rdt) read_later[r] = true;     /* stored as another dtype: normalise first */
    }
    /* Normalise only registers that something reads again. */
    for (int k = 0; k < prog->n_instr; k++) {
        const tn_ew_instr *in = &prog->instr[k];
        if (!P->fn[k] || !read_later[n_in + k]) continue;
        int kind = tn__ew_info(in->op)->kind;
        if (kind == TN_EWK_CAST) continue;
        if (in->dtype == TN_F16) P->norm[k] = tn__norm_f16;
        else if (in->dtype == TN_I32 && kind != TN_EWK_CMP && kind != TN_EWK_LOGIC) P->norm[k] = tn__norm_i32;
        else if (in->dtype == TN_BOOL && kind != TN_EWK_CMP && kind != TN_EWK_LOGIC) P->norm[k] = tn__norm_bool;
    }
    P->prog = prog;
    P->n_in = n_in;
    P->n_out = prog->n_out;
    P->nreg = nreg;
    int blk = TN__EW_SCRATCH / (nreg > 0 ? nreg : 1);
    blk = blk > TN__EW_BLOCK ? TN__EW_BLOCK : blk & ~7;
    P->blk = blk;
    return TN_OK;
}

TN_API tn_result tn__cpu_ew_run(const tn_ew_program *prog, tn_array *const *in, tn_array *const *out) {
    static const char *who = "tn__cpu_ew_run";
    if (!prog || !out || (prog->n_in > 0 && !in)) return tn__err(TN_ERR_NULL, "%s: program, inputs or outputs are NULL", who);
    tn__ew_plan P;
    for (int j = 0; j < prog->n_out && j < TN__EW_MAX_OPERANDS; j++)
        if (!out[j]) return tn__err(TN_ERR_NULL, "%s: output %d is NULL", who, j);
    tn_result r = tn__ew_plan_program(&P, prog, out);
    if (r != TN_OK) return r;
    const int n_in = prog->n_in, n_out = prog->n_out, nops = n_in + n_out;
    const tn_array *arr[TN__EW_MAX_OPERANDS];
    for (int o = 0; o < nops; o++) {
        arr[o] = o < n_in ? in[o] : out[o - n_in];
        const tn_array *a = arr[o];
        if (!a) return tn__err(TN_ERR_NULL, "%s: input %d is NULL", who, o);
        if (a->device != TN_HOST)
            return tn__err(TN_ERR_DEVICE, "%s: %s %d lives on device %d; the CPU engine needs host arrays", who,
                           o < n_in ? "input" : "output", o < n_in ? o : o - n_in, a->device);
        if ((unsigned)a->dtype - 1u >= (unsigned)TN_DTYPE_COUNT - 1u || a->ndim < 0 || a->ndim > TN_MAX_DIMS)
            return tn__err(TN_ERR_INVALID, "%s: %s %d has dtype %d and ndim %d", who, o < n_in ? "input" : "output",
                           o < n_in ? o : o - n_in, (int)a->dtype, a->ndim);
    }
    /* The iteration space is the outputs' shape; inputs must broadcast to it. */
    const tn_array *o0 = out[0];
    int nd = o0->ndim;
    char b1[128], b2[128];
    for (int o = 0; o < nops; o++) {
        const tn_array *a = arr[o];
        bool ok = a->ndim <= nd && (o < n_in || a->ndim == nd);
        for (int d = 0; ok && d < a->ndim; d++) {
            int64_t s = a->shape[d], t = o0->shape[nd - a->ndim + d];
            ok = s == t || (o < n_in && s == 1);
        }
        if (!ok)
            return tn__err(TN_ERR_SHAPE, "%s: %s %d of shape %s does not broadcast to the output shape %s", who,
                           o < n_in ? "input" : "output", o < n_in ? o : o - n_in,
                           tn__shape_str(a->ndim, a->shape, b1), tn__shape_str(nd, o0->shape, b2));
    }
    int64_t total = 1;
    for (int d = 0; d < nd; d++) total *= o0->shape[d];
    if (total == 0) return TN_OK;

    /* Align, then coalesce: drop size-1 dims, merge dims whose strides chain. */
    int cd = 0;
    for (int d = 0; d < nd; d++) {
        int64_t n = o0->shape[d];
        if (n == 1) continue;
        bool merge = cd > 0;
        int64_t s[TN__EW_MAX_OPERANDS];
        for (int o = 0; o < nops; o++) {
            const tn_array *a = arr[o];
            int ad = d - (nd - a->ndim);
            s[o] = ad < 0 || a->shape[ad] == 1 ? 0 : a->strides[ad];
            if (merge && P.st[o][cd - 1] != s[o] * n) merge = false;
        }
        if (merge) P.shape[cd - 1] *= n;
        else P.shape[cd++] = n;
        for (int o = 0; o < nops; o++) P.st[o][cd - 1] = s[o];
    }
    if (cd == 0) {
        cd = 1;
        P.shape[0] = 1;
        for (int o = 0; o < nops; o++) P.st[o][0] = 0;
    }
    P.ndim = cd;

    uintptr_t lo[TN__EW_MAX_OPERANDS], hi[TN__EW_MAX_OPERANDS];
    for (int o = 0; o < nops; o++) {
        const tn_array *a = arr[o];
        P.base[o] = (char *)a->data;
        tn__ew_extent(a, &lo[o], &hi[o]);
    }
    for (int i = 0; i < n_in; i++) {
        const tn_array *a = arr[i];
        int ct = P.regct[i];
        size_t es = tn_dtype_size(a->dtype);
        bool invariant = true;
        for (int d = 0; d < cd; d++) invariant = invariant && P.st[i][d] == 0;
        P.io[i] = tn__ew_loads[a->dtype][ct];
        P.in_mode[i] = TN__IN_LOAD;
        if (invariant) P.in_mode[i] = TN__IN_ONCE;
        else if (tn__ew_repr_is_ct(a->dtype, ct) && P.st[i][cd - 1] == (int64_t)es && (uintptr_t)a->data % es == 0)
            P.in_mode[i] = TN__IN_INPLACE;
    }
    bool reg_direct[TN__EW_MAX_REGS];
    memset(reg_direct, 0, (size_t)P.nreg * sizeof reg_direct[0]);
    for (int j = 0; j < n_out; j++) {
        const tn_array *a = out[j];
        int o = n_in + j, reg = prog->out_reg[j];
        int ct = P.regct[reg];
        size_t es = tn_dtype_size(a->dtype);
        P.io[o] = tn__ew_stores[a->dtype][ct];
        bool direct = reg >= n_in && prog->instr[reg - n_in].op != TN_OP_CONSTANT && !reg_direct[reg] &&
                      tn__ew_repr_is_ct(a->dtype, ct) && P.st[o][cd - 1] == (int64_t)es && (uintptr_t)a->data % es == 0;
        for (int i = 0; direct && i < n_in; i++) direct = hi[i] <= lo[o] || hi[o] <= lo[i];
        P.out_direct[j] = direct;
        if (direct) reg_direct[reg] = true;
    }
    bool tiled = false;
    for (int o = 0; cd >= 2 && o < nops; o++) {
        int64_t s1 = P.st[o][cd - 1] < 0 ? -P.st[o][cd - 1] : P.st[o][cd - 1], s2 = P.st[o][cd - 2] < 0 ? -P.st[o][cd - 2] : P.st[o][cd - 2];
        tiled = tiled || (s1 > 64 && s2 > 0 && s2 <= 16 && P.shape[cd - 1] > P.blk);
    }
    if (tiled) {
        int64_t rows = P.shape[cd - 2], items = total / (rows * P.shape[cd - 1]) * ((rows + TN__EW_TILE - 1) / TN__EW_TILE);
        int64_t grain = TN__EW_GRAIN / (TN__EW_TILE * P.shape[cd - 1]);
        tn__parallel_for(items, grain > 1 ? grain : 1, tn__ew_range_tiled, &P);
    } else if (total >= 2 * TN__EW_GRAIN) {
        tn__parallel_for(total, TN__EW_GRAIN, tn__ew_range, &P);
    } else {
        tn__ew_range(&P, 0, total);
    }
    return TN_OK;
}

/* >>ew_types: type rules ----------------------------------------------------- */

/* Names of the operands in messages: tn_where(cond, a, b), the others a, b, c. */
static const char *tn__ew_argname(int op, int i) {
    static const char *abc[3] = { "a", "b", "c" }, *where[3] = { "cond", "a", "b" };
    return i < 0 || i > 2 ? "?" : op == TN_OP_WHERE ? where[i] : abc[i];
}

/* "a 'x' (3, 4)" or "input 1 (3, 4)" */
static const char *tn__ew_operand_str(const tn_var *node, int i, const tn_type *t, char buf[200]) {
    char sb[128];
    const char *vn = node && node->in && i < node->n_in && node->in[i] ? node->in[i]->name : NULL;
    if (node && node->op == TN_OP_COMPOSITE) snprintf(buf, 200, "input %d", i);
    else snprintf(buf, 200, "%s", tn__ew_argname(node ? node->op : 0, i));
    size_t n = strlen(buf);
    if (vn) snprintf(buf + n, 200 - n, " '%s'", vn);
    n = strlen(buf);
    snprintf(buf + n, 200 - n, " %s", tn__shape_str(t->ndim, t->shape, sb));
    return buf;
}

/* "b 'y' (3, 4)": a constructor's argument, by name when it has one. */
static const char *tn__ew_var_str(int op, int i, const tn_var *v, char buf[200]) {
    char sb[128];
    snprintf(buf, 200, "%s%s%s%s %s", tn__ew_argname(op, i), v->name ? " '" : "", v->name ? v->name : "",
             v->name ? "'" : "", tn__shape_str(v->type.ndim, v->type.shape, sb));
    return buf;
}

/* NumPy broadcasting of the inputs' static types (dims -1 unknown, bcast[d]
   known to be 1). The result is broadcastable where every input is. */
static tn_result tn__ew_broadcast(const tn_var *node, const char *who, int n, const tn_type *in, tn_type *out) {
    int nd = 0;
    for (int i = 0; i < n; i++) nd = in[i].ndim > nd ? in[i].ndim : nd;
    out->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t size = 1;          /* 1 until an input says otherwise */
        bool all_b = true;
        int from = -1;             /* the input that fixed a non-1 size */
        for (int i = 0; i < n; i++) {
            int id = d - (nd - in[i].ndim);
            if (id < 0) continue;
            int64_t s = in[i].shape[id];
            bool b = in[i].bcast[id] || s == 1;
            if (b) continue;
            all_b = false;
            if (s < 0) { if (size == 1) size = -1; continue; }
            if (size > 1 && s != size) {
                char x[200], y[200];
                return tn__err(TN_ERR_SHAPE, "%s: cannot broadcast %s with %s", who,
                               tn__ew_operand_str(node, from, &in[from], x), tn__ew_operand_str(node, i, &in[i], y));
            }
            size = s;
            from = i;
        }
        out->shape[d] = all_b ? 1 : size;
        out->bcast[d] = all_b;
    }
    return TN_OK;
}

/* The dtype the operands of an elementwise op are computed in (before the
   kind's own rule: FLOAT makes ints float64). WHERE: of its a and b. */
static tn_dtype tn__ew_operand_dtype(int op, int n, const tn_type *in) {
    int kind = tn__ew_info(op)->kind;
    if (kind == TN_EWK_LOGIC) return TN_BOOL;
    if (kind == TN_EWK_CAST) return in[0].dtype;
    tn_dtype t = TN_DTYPE_NONE;
    for (int i = kind == TN_EWK_WHERE ? 1 : 0; i < n; i++) t = tn_dtype_promote(t, in[i].dtype);
    if (kind == TN_EWK_FLOAT && !tn_dtype_is_float(t)) t = TN_F64;
    return t;
}

static tn_dtype tn__ew_result_dtype(const tn_var *node, int n, const tn_type *in) {
    int kind = tn__ew_info(node->op)->kind;
    if (kind == TN_EWK_CMP || kind == TN_EWK_LOGIC) return TN_BOOL;
    if (kind == TN_EWK_CAST) return (tn_dtype)node->p.i[0];
    return tn__ew_operand_dtype(node->op, n, in);
}

static tn_result tn__ew_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const tn_ew_info *e = tn__ew_info(node->op);
    char who[48];
    snprintf(who, sizeof who, "tn_%s", e ? e->name : "?");
    if (!e || node->n_in != e->arity)
        return tn__err(TN_ERR_INTERNAL, "%s: node has %d inputs, the op takes %d", who, node->n_in, e ? e->arity : -1);
    memset(out, 0, sizeof *out);
    if (e->kind == TN_EWK_CAST && (node->p.i[0] <= TN_DTYPE_NONE || node->p.i[0] >= TN_DTYPE_COUNT))
        return tn__err(TN_ERR_DTYPE, "tn_cast: invalid target dtype %lld", (long long)node->p.i[0]);
    tn_result r = tn__ew_broadcast(node, who, node->n_in, in, out);
    if (r != TN_OK) return r;
    out->dtype = tn__ew_result_dtype(node, node->n_in, in);
    return TN_OK;
}

static tn_result tn__composite_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const tn_ew_program *prog = (const tn_ew_program *)node->ext;
    if (!prog) return tn__err(TN_ERR_INTERNAL, "Composite: node has no program");
    if (prog->n_in != node->n_in || prog->n_out != node->n_out)
        return tn__err(TN_ERR_INTERNAL, "Composite: node has %d inputs and %d outputs, its program %d and %d",
                       node->n_in, node->n_out, prog->n_in, prog->n_out);
    tn_type t;
    memset(&t, 0, sizeof t);
    tn_result r = tn__ew_broadcast(node, "Composite", node->n_in, in, &t);
    if (r != TN_OK) return r;
    for (int j = 0; j < prog->n_out; j++) {
        out[j] = t;
        out[j].dtype = prog->out_dtype[j];
    }
    return TN_OK;
}

/* >>ew_program: programs of single nodes ------------------------------------- */

/* Room for the program of one elementwise node: up to 3 inputs, a cast per
   input whose dtype is not the operand dtype, and the op itself. */
typedef struct tn__ew_prog1 {
    const tn_var *owner;               /* the node it was built for (cache check) */
    tn_ew_program p;
    tn_dtype in_dtype[3];
    tn_ew_instr instr[4];
    int32_t out_reg[1];
    tn_dtype out_dtype[1];
} tn__ew_prog1;

static void tn__ew_prog1_build(const tn_var *node, const tn_dtype *in_dt, tn_dtype out_dt, tn__ew_prog1 *s) {
    memset(s, 0, sizeof *s);
    s->owner = node;
    int n = node->n_in, op = node->op, kind = tn__ew_info(op)->kind;
    tn_type tys[3];
    memset(tys, 0, sizeof tys);
    for (int i = 0; i < n; i++) tys[i].dtype = in_dt[i];
    tn_dtype opd = tn__ew_operand_dtype(op, n, tys);
    int reg[3] = { 0, 0, 0 }, ni = 0;
    for (int i = 0; i < n; i++) {
        s->in_dtype[i] = in_dt[i];
        tn_dtype want = (kind == TN_EWK_WHERE && i == 0) ? TN_BOOL : opd;
        reg[i] = i;
        if (in_dt[i] != want && kind != TN_EWK_CAST) {
            s->instr[ni] = (tn_ew_instr){ .op = TN_OP_CAST, .dtype = (int8_t)want, .in_dtype = (int8_t)in_dt[i], .a = i, .b = -1, .c = -1 };
            reg[i] = n + ni++;
        }
    }
    s->instr[ni] = (tn_ew_instr){ .op = (int16_t)op, .dtype = (int8_t)out_dt, .in_dtype = (int8_t)opd,
                                  .a = reg[0], .b = n > 1 ? reg[1] : -1, .c = n > 2 ? reg[2] : -1 };
    ni++;
    s->out_reg[0] = n + ni - 1;
    s->out_dtype[0] = out_dt;
    s->p = (tn_ew_program){ n, s->in_dtype, ni, s->instr, 1, s->out_reg, s->out_dtype };
}

TN_API tn_ew_program *tn__ew_program_of(tn_var *node) {
    if (!node) { tn__err(TN_ERR_NULL, "tn__ew_program_of: node is NULL"); return NULL; }
    if (node->op == TN_OP_COMPOSITE) return (tn_ew_program *)node->ext;
    if (!tn__ew_is_ew(node->op)) {
        tn__err(TN_ERR_INVALID, "tn__ew_program_of: op %d is not elementwise", node->op);
        return NULL;
    }
    /* ext is trusted only if it was built for this very node (a clone may copy ext). */
    if (node->ext) {
        tn__ew_prog1 *c = (tn__ew_prog1 *)((char *)node->ext - offsetof(tn__ew_prog1, p));
        if (c->owner == node) return &c->p;
    }
    tn__ew_prog1 *s = (tn__ew_prog1 *)tn__graph_alloc(node->graph, sizeof *s);
    if (!s) return NULL;
    tn_dtype dts[3] = { TN_DTYPE_NONE, TN_DTYPE_NONE, TN_DTYPE_NONE };
    for (int i = 0; i < node->n_in && i < 3; i++) dts[i] = node->in[i]->type.dtype;
    tn__ew_prog1_build(node, dts, node->type.dtype, s);
    node->ext = &s->p;
    return &s->p;
}

/* >>ew_cpu ------------------------------------------------------------------- */

/* The program is built on the stack for the arrays' dtypes: nothing is cached
   or allocated, so concurrent calls are safe. */
static tn_result tn__ew_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__ew_prog1 s;
    tn_dtype dts[3] = { TN_DTYPE_NONE, TN_DTYPE_NONE, TN_DTYPE_NONE };
    for (int i = 0; i < node->n_in && i < 3; i++) {
        if (!in[i]) return tn__err(TN_ERR_NULL, "tn_%s: input %d is NULL", tn__ew_info(node->op)->name, i);
        dts[i] = in[i]->dtype;
    }
    if (!out[0]) return tn__err(TN_ERR_NULL, "tn_%s: output is NULL", tn__ew_info(node->op)->name);
    tn__ew_prog1_build(node, dts, out[0]->dtype, &s);
    return tn__cpu_ew_run(&s.p, in, out);
}

static tn_result tn__composite_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    if (!node->ext) return tn__err(TN_ERR_INTERNAL, "Composite: node has no program");
    return tn__cpu_ew_run((const tn_ew_program *)node->ext, in, out);
}

/* >>ew_labels ---------------------------------------------------------------- */

typedef struct tn__sbuf { char *buf; size_t cap, len; } tn__sbuf;

static void tn__sb_put(tn__sbuf *b, const char *fmt, ...) {
    if (b->len + 1 >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n > 0) b->len = b->len + (size_t)n < b->cap ? b->len + (size_t)n : b->cap - 1;
}

static const char *tn__ew_infix(int op) {
    switch (op) {
    case TN_OP_ADD: return "+";      case TN_OP_SUB: return "-";     case TN_OP_MUL: return "*";
    case TN_OP_TRUE_DIV: return "/"; case TN_OP_INT_DIV: return "//"; case TN_OP_MOD: return "%";
    case TN_OP_POW: return "**";     case TN_OP_LT: return "<";      case TN_OP_LE: return "<=";
    case TN_OP_GT: return ">";       case TN_OP_GE: return ">=";     case TN_OP_EQ: return "==";
    case TN_OP_NEQ: return "!=";     case TN_OP_AND: return "&";     case TN_OP_OR: return "|";
    case TN_OP_XOR: return "^";      default: return NULL;
    }
}

/* Register r of prog as an expression, Theano style: (i0 * i1), exp(i0). */
static void tn__ew_expr(const tn_ew_program *prog, int r, tn__sbuf *b) {
    if (b->len + 1 >= b->cap) return;                /* full: stop expanding shared subtrees */
    if (r < prog->n_in) { tn__sb_put(b, "i%d", r); return; }
    if (r - prog->n_in >= prog->n_instr) { tn__sb_put(b, "?"); return; }
    const tn_ew_instr *in = &prog->instr[r - prog->n_in];
    if (in->op == TN_OP_CONSTANT) {
        char v[40];
        tn__fmt_value((tn_dtype)in->dtype, in->imm, v, sizeof v);
        tn__sb_put(b, "%s", v);
        return;
    }
    const tn_ew_info *e = tn__ew_info(in->op);
    if (!e) { tn__sb_put(b, "?"); return; }
    const char *inf = tn__ew_infix(in->op);
    if (inf) {
        tn__sb_put(b, "(");
        tn__ew_expr(prog, in->a, b);
        tn__sb_put(b, " %s ", inf);
        tn__ew_expr(prog, in->b, b);
        tn__sb_put(b, ")");
        return;
    }
    if (in->op == TN_OP_NEG || in->op == TN_OP_NOT) {
        tn__sb_put(b, in->op == TN_OP_NEG ? "(-" : "(~");
        tn__ew_expr(prog, in->a, b);
        tn__sb_put(b, ")");
        return;
    }
    if (in->op == TN_OP_CAST) tn__sb_put(b, "Cast{%s}(", tn_dtype_name((tn_dtype)in->dtype));
    else tn__sb_put(b, "%s(", e->name);
    int opr[3] = { in->a, in->b, in->c };
    for (int x = 0; x < e->arity; x++) {
        if (x) tn__sb_put(b, ", ");
        tn__ew_expr(prog, opr[x], b);
    }
    tn__sb_put(b, ")");
}

/* "Composite{exp((i0 * i1))}"; several outputs are separated by commas. */
static void tn__ew_program_label(const tn_ew_program *prog, tn__sbuf *b) {
    tn__sb_put(b, "Composite{");
    for (int j = 0; j < prog->n_out; j++) {
        if (j) tn__sb_put(b, ", ");
        tn__ew_expr(prog, prog->out_reg[j], b);
    }
    tn__sb_put(b, "}");
}

static void tn__ew_label(const tn_var *node, char *buf, size_t cap) {
    if (!cap) return;
    const tn_ew_info *e = tn__ew_info(node->op);
    if (node->op == TN_OP_CAST) snprintf(buf, cap, "Elemwise{Cast{%s}}", tn_dtype_name((tn_dtype)node->p.i[0]));
    else snprintf(buf, cap, "Elemwise{%s,%s}", e ? e->name : "?", node->inplace ? "inplace" : "no_inplace");
}

static void tn__composite_label(const tn_var *node, char *buf, size_t cap) {
    if (!cap) return;
    tn__sbuf b = { buf, cap, 0 };
    buf[0] = 0;
    tn__sb_put(&b, "Elemwise{");
    if (node->ext) tn__ew_program_label((const tn_ew_program *)node->ext, &b);
    else tn__sb_put(&b, "Composite{?}");
    tn__sb_put(&b, "}");
    if (node->inplace) tn__sb_put(&b, "[(0, %d)]", node->inplace - 1);
}

/* >>ew_constructors ----------------------------------------------------------- */

static bool tn__ew_is_weak(const tn_var *v) {
    return (v->flags & TN_VAR_WEAK) && v->op == TN_OP_CONSTANT && v->value && v->value->ndim == 0 &&
           v->value->device == TN_HOST && (unsigned)v->value->dtype - 1u < (unsigned)TN_DTYPE_COUNT - 1u;
}

static double tn__ew_scalar_value(const tn_array *a) {
    double d;
    tn__ew_loads[a->dtype][TN__CT_D](&d, (char *)a->data, 0, 1);
    return d;
}

static tn_var *tn__ew_null_arg(const char *fn, int op, int i) {
    const char *name = tn__ew_argname(op, i);
    if (tn_last_result() != TN_OK && tn_last_error()[0])
        tn__err(TN_ERR_NULL, "%s: argument %s is NULL (earlier error: %s)", fn, name, tn_last_error());
    else
        tn__err(TN_ERR_NULL, "%s: argument %s is NULL", fn, name);
    return NULL;
}

/* A 0-d constant of dtype t holding v (a weak literal made concrete). */
static tn_var *tn__ew_typed_const(tn_graph *g, tn_dtype t, double v, const char *fn) {
    tn_array *a = tn_array_scalar(t, v);
    if (!a) { tn__err(TN_ERR_OOM, "%s: out of memory", fn); return NULL; }
    tn_var *c = tn_constant(g, a);
    tn_array_free(a);
    return c;
}

/* The operand dtype of an elementwise op on `in`, after NumPy's promotion; a
   weak literal (tn_scalar_const) takes part only by its kind: a non-integral
   one makes int operands float64, an integral one makes bool operands int64
   and widens int32 when it does not fit. */
static tn_result tn__ew_promote(int op, const char *fn, int n, tn_var *const *in, tn_dtype *out) {
    int kind = tn__ew_info(op)->kind;
    char b[200];
    if (kind == TN_EWK_LOGIC) {
        for (int i = 0; i < n; i++) {
            tn_dtype t = in[i]->type.dtype;
            bool weak = tn__ew_is_weak(in[i]);
            double v = weak ? tn__ew_scalar_value(in[i]->value) : 0;
            if (weak ? v != floor(v) : tn_dtype_is_float(t))
                return tn__err(TN_ERR_DTYPE, "%s: logical ops take bool or int inputs; %s is %s (compare it, e.g. tn_neq(x, tn_lit(x, 0)), or cast it)",
                               fn, tn__ew_var_str(op, i, in[i], b), weak ? "a float literal" : tn_dtype_name(t));
        }
        *out = TN_BOOL;
        return TN_OK;
    }
    int first = kind == TN_EWK_WHERE ? 1 : 0;
    tn_dtype t = TN_DTYPE_NONE;
    for (int i = first; i < n; i++)
        if (!tn__ew_is_weak(in[i])) t = tn_dtype_promote(t, in[i]->type.dtype);
    if (t == TN_DTYPE_NONE) {                         /* only literals: their own dtypes */
        for (int i = first; i < n; i++) t = tn_dtype_promote(t, in[i]->type.dtype);
    } else if (!tn_dtype_is_float(t)) {
        for (int i = first; i < n; i++) {
            if (!tn__ew_is_weak(in[i])) continue;
            double v = tn__ew_scalar_value(in[i]->value);
            if (v != floor(v) || !(fabs(v) < 9223372036854775808.0)) t = TN_F64;
            else if (t == TN_BOOL) t = TN_I64;
            else if (t == TN_I32 && !(v >= -2147483648.0 && v <= 2147483647.0)) t = TN_I64;
            if (tn_dtype_is_float(t)) break;
        }
    }
    if (kind == TN_EWK_FLOAT && !tn_dtype_is_float(t)) t = TN_F64;
    if (t == TN_BOOL && (op == TN_OP_SUB || op == TN_OP_NEG))
        return tn__err(TN_ERR_DTYPE, "%s: %s of bool is not supported (as in NumPy); use %s", fn,
                       op == TN_OP_SUB ? "subtraction" : "negation", op == TN_OP_SUB ? "tn_xor" : "tn_not");
    *out = t;
    return TN_OK;
}

/* Checks the arguments, promotes, inserts casts (and concrete constants for
   weak literals), then records the node. */
static tn_var *tn__ew_make(int op, const char *fn, int n, tn_var *const *in) {
    for (int i = 0; i < n; i++)
        if (!in[i]) return tn__ew_null_arg(fn, op, i);
    tn_graph *g = in[0]->graph;
    for (int i = 1; i < n; i++) {
        if (in[i]->graph != g) {
            char x[200], y[200];
            tn__err(TN_ERR_GRAPH, "%s: %s and %s belong to different graphs", fn,
                    tn__ew_var_str(op, 0, in[0], x), tn__ew_var_str(op, i, in[i], y));
            return NULL;
        }
    }
    tn_dtype t;
    if (tn__ew_promote(op, fn, n, in, &t) != TN_OK) return NULL;
    int kind = tn__ew_info(op)->kind;
    tn_var *ops[3];
    for (int i = 0; i < n; i++) {
        tn_dtype want = (kind == TN_EWK_WHERE && i == 0) || kind == TN_EWK_LOGIC ? TN_BOOL : t;
        ops[i] = in[i];
        if (in[i]->type.dtype == want) continue;
        if (tn__ew_is_weak(in[i])) ops[i] = tn__ew_typed_const(g, want, tn__ew_scalar_value(in[i]->value), fn);
        else ops[i] = tn_cast(in[i], want);
        if (!ops[i]) return NULL;
    }
    tn_params p;
    memset(&p, 0, sizeof p);
    return tn__node(g, op, n, ops, &p, NULL, fn);
}

TN_API tn_var *tn_cast(tn_var *a, tn_dtype t) {
    if (!a) return tn__ew_null_arg("tn_cast", TN_OP_CAST, 0);
    if (t == TN_DTYPE_NONE) t = tn_get_config()->floatX != TN_DTYPE_NONE ? tn_get_config()->floatX : TN_F32;
    if (t <= TN_DTYPE_NONE || t >= TN_DTYPE_COUNT) {
        tn__err(TN_ERR_DTYPE, "tn_cast: invalid dtype %d for %s%s%s", (int)t, a->name ? "'" : "a variable", a->name ? a->name : "", a->name ? "'" : "");
        return NULL;
    }
    if (a->type.dtype == t) return a;
    tn_params p;
    memset(&p, 0, sizeof p);
    p.i[0] = t;
    return tn__node(a->graph, TN_OP_CAST, 1, &a, &p, NULL, "tn_cast");
}

#define TN__CTOR_1(E, n) TN_API tn_var *tn_##n(tn_var *a) { \
        tn_var *in[1] = { a }; return tn__ew_make(TN_OP_##E, "tn_" #n, 1, in); }
#define TN__CTOR_2(E, n) TN_API tn_var *tn_##n(tn_var *a, tn_var *b) { \
        tn_var *in[2] = { a, b }; return tn__ew_make(TN_OP_##E, "tn_" #n, 2, in); }
#define TN__CTOR_3(E, n) TN_API tn_var *tn_##n(tn_var *a, tn_var *b, tn_var *c) { \
        tn_var *in[3] = { a, b, c }; return tn__ew_make(TN_OP_##E, "tn_" #n, 3, in); }
#define TN__X_CTOR(E, n, ar, k, fe, ie) TN__CTOR_IF_##k(E, n, ar)
#define TN__CTOR_IF_TN_EWK_ARITH(E, n, ar) TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_FLOAT(E, n, ar) TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_CMP(E, n, ar)   TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_LOGIC(E, n, ar) TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_WHERE(E, n, ar) TN__CTOR_##ar(E, n)
#define TN__CTOR_IF_TN_EWK_CAST(E, n, ar)
TN_EW_OPS(TN__X_CTOR)

#undef TN__CTOR_1
#undef TN__CTOR_2
#undef TN__CTOR_3
#undef TN__X_CTOR

TN_API tn_var *tn_div(tn_var *a, tn_var *b) {
    tn_var *in[2] = { a, b };
    return tn__ew_make(TN_OP_TRUE_DIV, "tn_div", 2, in);
}
TN_API tn_var *tn_switch(tn_var *cond, tn_var *a, tn_var *b) {
    tn_var *in[3] = { cond, a, b };
    return tn__ew_make(TN_OP_WHERE, "tn_switch", 3, in);
}
TN_API tn_var *tn_lit(tn_var *like, double value) {
    if (!like) return tn__ew_null_arg("tn_lit", TN_OP_NONE, 0);
    return tn_scalar_const(like->graph, value);
}

/* >>registry: fills this part's rows of the op table */
static void tn__register_ew_ops(tn_op_def *t) {
#define TN__X_REG(E, n, ar, k, fe, ie) \
    t[TN_OP_##E] = (tn_op_def){ #n, TN_OPK_ELEMWISE, ar, tn__ew_infer, tn__ew_cpu, tn__ew_label };
    TN_EW_OPS(TN__X_REG)
#undef TN__X_REG
    t[TN_OP_CAST].name = "Cast";
    t[TN_OP_COMPOSITE] = (tn_op_def){ "Composite", TN_OPK_COMPOSITE, -1, tn__composite_infer, tn__composite_cpu, tn__composite_label };
}
