/* >>linalg: dot, gemm, gemv, outer; the CPU matrix product; the CBLAS loader.

   Every product, whatever the op, becomes one "plan": a batch of 2-d products
   out[b] = alpha * A[b] @ B[b] (+ beta * Cin[b]) given by byte strides, so 1-d
   operands, transposed and sliced views and broadcast batch dims need no copy.
   A plan runs on CBLAS when a library was found and the operands are row- or
   column-contiguous (float32/float64), else on the built-in kernels:
     float32/float64/float16  packed, cache-blocked, register-blocked (below)
     int32/int64              a blocked i-k-j loop, wrapping like NumPy
*/
#include <dlfcn.h>
#include <limits.h>
#include <stdatomic.h>

/* >>blas_loader --------------------------------------------------------- */
/* The few CBLAS entry points we use, declared here (no cblas.h): enums are
   passed as int, sizes as 32-bit int (LP64 builds of OpenBLAS and netlib). */
enum { TN__CBLAS_ROW_MAJOR = 101, TN__CBLAS_NO_TRANS = 111, TN__CBLAS_TRANS = 112 };
typedef void (*tn__cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                                   const float *, int, float, float *, int);
typedef void (*tn__cblas_dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                                   const double *, int, double, double *, int);
typedef void (*tn__cblas_sgemv_fn)(int, int, int, int, float, const float *, int,
                                   const float *, int, float, float *, int);
typedef void (*tn__cblas_dgemv_fn)(int, int, int, int, double, const double *, int,
                                   const double *, int, double, double *, int);

static struct {
    const char *name;            /* the library loaded, NULL if none */
    tn__cblas_sgemm_fn sgemm;
    tn__cblas_dgemm_fn dgemm;
    tn__cblas_sgemv_fn sgemv;
    tn__cblas_dgemv_fn dgemv;
} tn__blas;
static pthread_once_t tn__blas_once = PTHREAD_ONCE_INIT;
static atomic_bool tn__blas_on = true;

/* Tries the optimised library first. A library lacking any of the four
   symbols (a Fortran-only libblas) is closed and the next one tried. The
   environment variable TN_NO_BLAS=1 skips loading altogether. */
static void tn__blas_load(void) {
    static const char *const names[] = { "libopenblas.so.0", "libcblas.so.3", "libblas.so.3" };
    const char *off = getenv("TN_NO_BLAS");
    if (off && off[0] && strcmp(off, "0") != 0) return;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        tn__cblas_sgemm_fn sg = (tn__cblas_sgemm_fn)dlsym(h, "cblas_sgemm");
        tn__cblas_dgemm_fn dg = (tn__cblas_dgemm_fn)dlsym(h, "cblas_dgemm");
        tn__cblas_sgemv_fn sv = (tn__cblas_sgemv_fn)dlsym(h, "cblas_sgemv");
        tn__cblas_dgemv_fn dv = (tn__cblas_dgemv_fn)dlsym(h, "cblas_dgemv");
        if (sg && dg && sv && dv) {
            tn__blas.sgemm = sg; tn__blas.dgemm = dg; tn__blas.sgemv = sv; tn__blas.dgemv = dv;
            tn__blas.name = names[i];
            return;                  /* kept open for the life of the process */
        }
        dlclose(h);
    }
}

/* Name of the CBLAS library in use, or NULL (none found, or disabled). */
TN_API const char *tn__blas_name(void) {
    pthread_once(&tn__blas_once, tn__blas_load);
    return atomic_load(&tn__blas_on) ? tn__blas.name : NULL;
}

/* Tests switch BLAS off to compare it with the built-in kernels. */
TN_API void tn__blas_enable(bool on) { atomic_store(&tn__blas_on, on); }

/* >>matmul_plan --------------------------------------------------------- */

typedef struct tn__mm_plan {
    tn_dtype dt;                 /* dtype of A, B, Cin and out (one dtype) */
    int64_t m, n, k;
    double alpha, beta;          /* out = alpha*A@B + beta*Cin; Cin unread if NULL or beta == 0 */
    int nb;                      /* batch dims */
    int64_t nbatch;
    int64_t bshape[TN_MAX_DIMS];
    int64_t a_bs[TN_MAX_DIMS], b_bs[TN_MAX_DIMS], c_bs[TN_MAX_DIMS], ci_bs[TN_MAX_DIMS];
    const char *a, *b, *ci;
    char *c;
    int64_t a_rs, a_cs, b_rs, b_cs, c_rs, c_cs, ci_rs, ci_cs;  /* byte strides of the 2-d operands */
} tn__mm_plan;

/* Byte offsets of batch item `bi` in each operand. */
static void tn__mm_batch_offsets(const tn__mm_plan *p, int64_t bi, int64_t off[4]) {
    off[0] = off[1] = off[2] = off[3] = 0;
    for (int d = p->nb - 1; d >= 0; d--) {
        int64_t i = bi % p->bshape[d];
        bi /= p->bshape[d];
        off[0] += i * p->a_bs[d];
        off[1] += i * p->b_bs[d];
        off[2] += i * p->c_bs[d];
        off[3] += i * p->ci_bs[d];
    }
}

/* Fills a plan for out = A @ B under matmul rules (out already has the
   inferred shape); cin, when given, broadcasts to out. */
static void tn__mm_plan_init(tn__mm_plan *p, const tn_array *A, const tn_array *B, tn_array *out,
                             const tn_array *cin, double alpha, double beta) {
    memset(p, 0, sizeof *p);
    p->dt = out->dtype;
    p->alpha = alpha;
    p->beta = beta;
    bool a1 = A->ndim == 1, b1 = B->ndim == 1;
    size_t es = tn_dtype_size(out->dtype);
    p->a = (const char *)A->data;
    p->b = (const char *)B->data;
    p->c = (char *)out->data;
    if (a1) { p->m = 1; p->k = A->shape[0]; p->a_rs = 0; p->a_cs = A->strides[0]; }
    else {
        p->m = A->shape[A->ndim - 2]; p->k = A->shape[A->ndim - 1];
        p->a_rs = A->strides[A->ndim - 2]; p->a_cs = A->strides[A->ndim - 1];
    }
    if (b1) { p->n = 1; p->b_rs = B->strides[0]; p->b_cs = (int64_t)es; }
    else {
        p->n = B->shape[B->ndim - 1];
        p->b_rs = B->strides[B->ndim - 2]; p->b_cs = B->strides[B->ndim - 1];
    }
    int tail = (a1 ? 0 : 1) + (b1 ? 0 : 1);
    p->nb = out->ndim - tail;
    TN_ASSERT(p->nb >= 0);
    /* out's trailing dims: (m, n), (m), (n) or none */
    int od = out->ndim;
    p->c_rs = a1 ? 0 : out->strides[b1 ? od - 1 : od - 2];
    p->c_cs = b1 ? (int64_t)es : out->strides[od - 1];
    /* Cin's strides broadcast to out's shape, then split the same way. */
    int64_t cis[TN_MAX_DIMS] = {0};
    if (cin) {
        p->ci = (const char *)cin->data;
        for (int d = 0; d < cin->ndim; d++) {
            int od2 = od - cin->ndim + d;
            cis[od2] = cin->shape[d] == 1 ? 0 : cin->strides[d];
        }
        p->ci_rs = a1 ? 0 : cis[b1 ? od - 1 : od - 2];
        p->ci_cs = b1 ? 0 : cis[od - 1];
    }
    p->nbatch = 1;
    int an = a1 ? 0 : A->ndim - 2, bn = b1 ? 0 : B->ndim - 2;
    for (int d = 0; d < p->nb; d++) {
        p->bshape[d] = out->shape[d];
        p->nbatch *= out->shape[d];
        int da = d - (p->nb - an), db = d - (p->nb - bn);
        p->a_bs[d] = (da >= 0 && A->shape[da] != 1) ? A->strides[da] : 0;
        p->b_bs[d] = (db >= 0 && B->shape[db] != 1) ? B->strides[db] : 0;
        p->c_bs[d] = out->strides[d];
        p->ci_bs[d] = cis[d];
    }
}

/* >>blas_path ----------------------------------------------------------- */

/* A 2-d operand as CBLAS sees it: row-major with leading dimension ld,
   possibly transposed. Unit dims have meaningless strides: normalised. */
static bool tn__blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs, size_t es,
                            int *trans, int *ld) {
    if (rs % (int64_t)es || cs % (int64_t)es) return false;
    rs /= (int64_t)es; cs /= (int64_t)es;
    if (cols == 1) cs = 1;
    if (rows == 1) rs = cols;
    int64_t mc = cols > 1 ? cols : 1, mr = rows > 1 ? rows : 1;
    if (cs == 1 && rs >= mc && rs <= INT_MAX) { *trans = TN__CBLAS_NO_TRANS; *ld = (int)rs; return true; }
    if (rs == 1 && cs >= mr && cs <= INT_MAX) { *trans = TN__CBLAS_TRANS; *ld = (int)cs; return true; }
    return false;
}

/* A vector's increment in elements, for gemv: positive and a whole number. */
static bool tn__blas_inc(int64_t len, int64_t stride, size_t es, int *inc) {
    if (len == 1) { *inc = 1; return true; }
    if (stride <= 0 || stride % (int64_t)es || stride / (int64_t)es > INT_MAX) return false;
    *inc = (int)(stride / (int64_t)es);
    return true;
}

/* One 2-d product on CBLAS: c = alpha*a@b + beta*c. False: not expressible
   (layout, sizes), and nothing was written. probe: only say whether it is. */
static bool tn__blas_mm2d(bool probe, tn_dtype dt, int64_t m, int64_t n, int64_t k, double alpha,
                          const char *a, int64_t a_rs, int64_t a_cs,
                          const char *b, int64_t b_rs, int64_t b_cs,
                          double beta, char *c, int64_t c_rs, int64_t c_cs) {
    size_t es = tn_dtype_size(dt);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || m == 0 || n == 0 || k == 0) return false;
    int tc, ldc;
    if (!tn__blas_layout(m, n, c_rs, c_cs, es, &tc, &ldc)) return false;
    if (tc == TN__CBLAS_TRANS) {
        /* column-major out: compute out^T = B^T @ A^T instead */
        const char *t = a; a = b; b = t;
        int64_t t0 = m; m = n; n = t0;
        int64_t ars = b_cs, acs = b_rs, brs = a_cs, bcs = a_rs;
        a_rs = ars; a_cs = acs; b_rs = brs; b_cs = bcs;
        t0 = c_rs; c_rs = c_cs; c_cs = t0;
        if (!tn__blas_layout(m, n, c_rs, c_cs, es, &tc, &ldc) || tc != TN__CBLAS_NO_TRANS) return false;
    }
    int ta, lda, tb, ldb, incx, incy;
    if (n == 1) {                /* c[:,0] = A @ b[:,0] */
        if (!tn__blas_layout(m, k, a_rs, a_cs, es, &ta, &lda)) return false;
        if (!tn__blas_inc(k, b_rs, es, &incx) || !tn__blas_inc(m, c_rs, es, &incy)) return false;
        int M = ta == TN__CBLAS_NO_TRANS ? (int)m : (int)k, N = ta == TN__CBLAS_NO_TRANS ? (int)k : (int)m;
        if (probe) return true;
        if (dt == TN_F32) tn__blas.sgemv(TN__CBLAS_ROW_MAJOR, ta, M, N, (float)alpha, (const float *)a, lda,
                                         (const float *)b, incx, (float)beta, (float *)c, incy);
        else tn__blas.dgemv(TN__CBLAS_ROW_MAJOR, ta, M, N, alpha, (const double *)a, lda,
                            (const double *)b, incx, beta, (double *)c, incy);
        return true;
    }
    if (m == 1) {                /* c[0,:] = B^T @ a[0,:] */
        if (!tn__blas_layout(k, n, b_rs, b_cs, es, &tb, &ldb)) return false;
        if (!tn__blas_inc(k, a_cs, es, &incx) || !tn__blas_inc(n, c_cs, es, &incy)) return false;
        int tr = tb == TN__CBLAS_NO_TRANS ? TN__CBLAS_TRANS : TN__CBLAS_NO_TRANS;
        int M = tb == TN__CBLAS_NO_TRANS ? (int)k : (int)n, N = tb == TN__CBLAS_NO_TRANS ? (int)n : (int)k;
        if (probe) return true;
        if (dt == TN_F32) tn__blas.sgemv(TN__CBLAS_ROW_MAJOR, tr, M, N, (float)alpha, (const float *)b, ldb,
                                         (const float *)a, incx, (float)beta, (float *)c, incy);
        else tn__blas.dgemv(TN__CBLAS_ROW_MAJOR, tr, M, N, alpha, (const double *)b, ldb,
                            (const double *)a, incx, beta, (double *)c, incy);
        return true;
    }
    if (!tn__blas_layout(m, k, a_rs, a_cs, es, &ta, &lda) || !tn__blas_layout(k, n, b_rs, b_cs, es, &tb, &ldb))
        return false;
    if (probe) return true;
    if (dt == TN_F32) tn__blas.sgemm(TN__CBLAS_ROW_MAJOR, ta, tb, (int)m, (int)n, (int)k, (float)alpha,
                                     (const float *)a, lda, (const float *)b, ldb, (float)beta, (float *)c, ldc);
    else tn__blas.dgemm(TN__CBLAS_ROW_MAJOR, ta, tb, (int)m, (int)n, (int)k, alpha,
                        (const double *)a, lda, (const double *)b, ldb, beta, (double *)c, ldc);
    return true;
}

/* >>fill ---------------------------------------------------------------- */
/* Loads and stores of one element as double (float16 through float32). */
static inline double tn__mm_ld(tn_dtype dt, const char *p) {
    switch (dt) {
    case TN_F16: { uint16_t h; memcpy(&h, p, 2); return tn_f16_to_f32(h); }
    case TN_F32: return *(const float *)p;
    case TN_F64: return *(const double *)p;
    case TN_I32: return *(const int32_t *)p;
    case TN_I64: return (double)*(const int64_t *)p;
    default: return 0;
    }
}

/* out = beta*Cin (or 0) over the plan: the product of an empty k, the
   initial value for the BLAS and integer paths. Integers wrap. */
static void tn__mm_fill(const tn__mm_plan *p, bool scale) {
    int64_t off[4];
    for (int64_t bi = 0; bi < p->nbatch; bi++) {
        tn__mm_batch_offsets(p, bi, off);
        for (int64_t i = 0; i < p->m; i++)
            for (int64_t j = 0; j < p->n; j++) {
                char *o = p->c + off[2] + i * p->c_rs + j * p->c_cs;
                const char *ci = p->ci ? p->ci + off[3] + i * p->ci_rs + j * p->ci_cs : NULL;
                bool use = ci && p->beta != 0;
                switch (p->dt) {
                case TN_I32: {
                    uint32_t v = use ? (uint32_t)*(const int32_t *)ci : 0;
                    if (scale) v *= (uint32_t)(int64_t)p->beta;
                    *(int32_t *)o = (int32_t)v;
                    break;
                }
                case TN_I64: {
                    uint64_t v = use ? (uint64_t)*(const int64_t *)ci : 0;
                    if (scale) v *= (uint64_t)(int64_t)p->beta;
                    *(int64_t *)o = (int64_t)v;
                    break;
                }
                case TN_F16: {
                    float v = use ? (float)tn__mm_ld(TN_F16, ci) : 0.0f;
                    uint16_t h = tn_f32_to_f16(scale ? (float)p->beta * v : v);
                    memcpy(o, &h, 2);
                    break;
                }
                case TN_F32: {
                    float v = use ? *(const float *)ci : 0.0f;
                    *(float *)o = scale ? (float)p->beta * v : v;
                    break;
                }
                case TN_F64: {
                    double v = use ? *(const double *)ci : 0.0;
                    *(double *)o = scale ? p->beta * v : v;
                    break;
                }
                default: break;
                }
            }
    }
}

/* >>gemm_kernel ---------------------------------------------------------- */
/* The built-in float product, after Goto and van de Geijn: C is cut into
   tiles of TN__MC x TN__NC; for each slab of TN__KC along k, a tile's rows
   of A are packed into MR-row panels and its columns of B into NR-column
   panels (contiguous, zero-padded, float16 widened to float32, any strides),
   then an MR x NR micro-kernel runs over the panels with its accumulators in
   registers. Sizes (in elements):
     TN__KC 256  a B micro-panel (KC x NR) stays in L1 (8-16 KiB)
     TN__MC 96   the packed A block (MC x KC) stays in L2 (96 KiB f32, 192 KiB f64)
     TN__NC 256  the packed B panel (KC x NC) in L2/L3; also the thread task width
   MR x NR is 6 x 8 (float) or 6 x 4 (double) for SSE2: 12 vector accumulators
   of 16; and 6 x 16 / 6 x 8 with AVX2+FMA (chosen at run time on x86-64 when
   the CPU has it): 12 of 16 ymm registers. MC and NC are multiples of every
   MR and NR. Threads take whole tiles (batch, MC rows, NC cols), so they
   share nothing but the read-only inputs. */
#define TN__KC 256
#define TN__MC 96
#define TN__NC 256
#define TN__MR_MAX 6
#define TN__NR_MAX 16

/* Micro-kernels: acc[MR*NR] = Ap (kc x MR, packed) @ Bp (kc x NR, packed).
   The portable one uses GCC/clang vector extensions (16-byte vectors: SSE2
   on x86-64, NEON on arm64), so it is vectorised at -O2 whatever the cost
   model; rows are unrolled by hand so the 12 accumulators stay in registers.
   (Plain scalar loops were tried: gcc 12 -O2 vectorises them poorly, ~10x
   slower.) The AVX2+FMA one uses intrinsics in a target("avx2,fma")
   function, so the build needs no -mavx2; -std=c11 turns off FP
   contraction, so FMA must be explicit. Other compilers get scalar loops. */
#if defined(__GNUC__) || defined(__clang__)
typedef float tn__v4f __attribute__((vector_size(16)));
typedef double tn__v2d __attribute__((vector_size(16)));
#define TN__UKR_VEC(NAME, T, V, W) \
    static void NAME(int64_t kc, const T *restrict ap, const T *restrict bp, T *restrict acc) { \
        V c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, \
          c30 = {0}, c31 = {0}, c40 = {0}, c41 = {0}, c50 = {0}, c51 = {0}; \
        for (int64_t p = 0; p < kc; p++, ap += 6, bp += 2 * W) { \
            V b0, b1; \
            memcpy(&b0, bp, sizeof b0); \
            memcpy(&b1, bp + W, sizeof b1); \
            T a; \
            a = ap[0]; c00 += a * b0; c01 += a * b1; \
            a = ap[1]; c10 += a * b0; c11 += a * b1; \
            a = ap[2]; c20 += a * b0; c21 += a * b1; \
            a = ap[3]; c30 += a * b0; c31 += a * b1; \
            a = ap[4]; c40 += a * b0; c41 += a * b1; \
            a = ap[5]; c50 += a * b0; c51 += a * b1; \
        } \
        V *o = (V *)(void *)acc; /* acc is aligned for V */ \
        o[0] = c00; o[1] = c01; o[2] = c10; o[3] = c11; o[4] = c20; o[5] = c21; \
        o[6] = c30; o[7] = c31; o[8] = c40; o[9] = c41; o[10] = c50; o[11] = c51; \
    }
TN__UKR_VEC(tn__ukr_f32_vec, float, tn__v4f, 4)
TN__UKR_VEC(tn__ukr_f64_vec, double, tn__v2d, 2)
#define TN__UKR_F32_PORTABLE tn__ukr_f32_vec
#define TN__UKR_F64_PORTABLE tn__ukr_f64_vec
#else
#define TN__UKR_SCALAR(NAME, T, NR) \
    static void NAME(int64_t kc, const T *ap, const T *bp, T *acc) { \
        T c[6 * NR] = {0}; \
        for (int64_t p = 0; p < kc; p++) \
            for (int i = 0; i < 6; i++) \
                for (int j = 0; j < NR; j++) c[i * NR + j] += ap[p * 6 + i] * bp[p * NR + j]; \
        memcpy(acc, c, sizeof c); \
    }
TN__UKR_SCALAR(tn__ukr_f32_scalar, float, 8)
TN__UKR_SCALAR(tn__ukr_f64_scalar, double, 4)
#define TN__UKR_F32_PORTABLE tn__ukr_f32_scalar
#define TN__UKR_F64_PORTABLE tn__ukr_f64_scalar
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#  define TN__HAVE_AVX2_KERNELS 1
#  include <immintrin.h>
#define TN__UKR_AVX2(NAME, T, VT, W, LOAD, BCAST, FMA, STORE) \
    __attribute__((target("avx2,fma"))) \
    static void NAME(int64_t kc, const T *restrict ap, const T *restrict bp, T *restrict acc) { \
        VT c00 = _mm256_setzero_##W(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, \
           c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00; \
        const int L = (int)(32 / sizeof(T)); \
        for (int64_t p = 0; p < kc; p++, ap += 6, bp += 2 * L) { \
            VT b0 = LOAD(bp), b1 = LOAD(bp + L), a; \
            a = BCAST(ap + 0); c00 = FMA(a, b0, c00); c01 = FMA(a, b1, c01); \
            a = BCAST(ap + 1); c10 = FMA(a, b0, c10); c11 = FMA(a, b1, c11); \
            a = BCAST(ap + 2); c20 = FMA(a, b0, c20); c21 = FMA(a, b1, c21); \
            a = BCAST(ap + 3); c30 = FMA(a, b0, c30); c31 = FMA(a, b1, c31); \
            a = BCAST(ap + 4); c40 = FMA(a, b0, c40); c41 = FMA(a, b1, c41); \
            a = BCAST(ap + 5); c50 = FMA(a, b0, c50); c51 = FMA(a, b1, c51); \
        } \
        STORE(acc + 0 * L, c00); STORE(acc + 1 * L, c01); STORE(acc + 2 * L, c10); \
        STORE(acc + 3 * L, c11); STORE(acc + 4 * L, c20); STORE(acc + 5 * L, c21); \
        STORE(acc + 6 * L, c30); STORE(acc + 7 * L, c31); STORE(acc + 8 * L, c40); \
        STORE(acc + 9 * L, c41); STORE(acc + 10 * L, c50); STORE(acc + 11 * L, c51); \
    }
TN__UKR_AVX2(tn__ukr_f32_avx2, float, __m256, ps, _mm256_loadu_ps, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_storeu_ps)
TN__UKR_AVX2(tn__ukr_f64_avx2, double, __m256d, pd, _mm256_loadu_pd, _mm256_broadcast_sd, _mm256_fmadd_pd, _mm256_storeu_pd)
#endif

typedef void (*tn__ukr_f32_fn)(int64_t, const float *, const float *, float *);
typedef void (*tn__ukr_f64_fn)(int64_t, const double *, const double *, double *);
typedef struct tn__ukr_set {
    int mr32, nr32, mr64, nr64;
    tn__ukr_f32_fn f32;
    tn__ukr_f64_fn f64;
} tn__ukr_set;
static tn__ukr_set tn__ukr;
static pthread_once_t tn__ukr_once = PTHREAD_ONCE_INIT;

static void tn__ukr_pick(void) {
    tn__ukr = (tn__ukr_set){ 6, 8, 6, 4, TN__UKR_F32_PORTABLE, TN__UKR_F64_PORTABLE };
#ifdef TN__HAVE_AVX2_KERNELS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        tn__ukr = (tn__ukr_set){ 6, 16, 6, 8, tn__ukr_f32_avx2, tn__ukr_f64_avx2 };
#endif
}

/* Per-thread packing scratch: one block, sized for the largest case at a
   thread's first product and kept for its life (freed by the key's
   destructor when the thread exits), so steady-state calls never allocate. */
#define TN__SCRATCH_BYTES ((size_t)(TN__MC * TN__KC + TN__KC * TN__NC) * sizeof(double) \
                           + (size_t)TN__MC * TN__NC * sizeof(float) + 3 * 64)
static pthread_key_t tn__scratch_key;
static pthread_once_t tn__scratch_once = PTHREAD_ONCE_INIT;
static void tn__scratch_free(void *p) { tn__free(p); }
static void tn__scratch_key_make(void) { (void)pthread_key_create(&tn__scratch_key, tn__scratch_free); }
static char *tn__scratch(void) {
    pthread_once(&tn__scratch_once, tn__scratch_key_make);
    char *s = (char *)pthread_getspecific(tn__scratch_key);
    if (!s) {
        s = (char *)tn__malloc(TN__SCRATCH_BYTES);
        if (s && pthread_setspecific(tn__scratch_key, s) != 0) { tn__free(s); s = NULL; }
    }
    return s;
}
static inline char *tn__align64(char *p) { return (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63); }

static inline float tn__ld_f16(const char *p) { uint16_t h; memcpy(&h, p, 2); return tn_f16_to_f32(h); }
static inline float tn__ld_f32(const char *p) { return *(const float *)p; }
static inline double tn__ld_f64(const char *p) { return *(const double *)p; }

/* One tile of C (mc x nc at i0, j0 of batch item `off`), for element type T
   computed from storage read by LOAD. F16OUT: accumulate the whole k range
   in a float32 tile and round to float16 once at the end. */
#define TN__TILE(NAME, T, LOAD, F16OUT, UKR, MRF, NRF) \
static void NAME(const tn__mm_plan *P, const int64_t off[4], int64_t i0, int64_t mc, \
                 int64_t j0, int64_t nc, char *scratch) { \
    const int MR = tn__ukr.MRF, NR = tn__ukr.NRF; \
    T *ap = (T *)tn__align64(scratch); \
    T *bp = (T *)tn__align64((char *)(ap + TN__MC * TN__KC)); \
    float *ct = (float *)tn__align64((char *)(bp + TN__KC * TN__NC)); \
    const char *A = P->a + off[0] + i0 * P->a_rs, *B = P->b + off[1] + j0 * P->b_cs; \
    char *C = P->c + off[2] + i0 * P->c_rs + j0 * P->c_cs; \
    const char *CI = (P->ci && P->beta != 0) ? P->ci + off[3] + i0 * P->ci_rs + j0 * P->ci_cs : NULL; \
    _Alignas(64) T acc[TN__MR_MAX * TN__NR_MAX]; \
    const T alpha = (T)P->alpha, beta = (T)P->beta; \
    for (int64_t pc = 0; pc < P->k; pc += TN__KC) { \
        int64_t kc = P->k - pc < TN__KC ? P->k - pc : TN__KC; \
        for (int64_t jp = 0; jp < nc; jp += NR) \
            for (int64_t p = 0; p < kc; p++) { \
                const char *src = B + (pc + p) * P->b_rs + jp * P->b_cs; \
                T *dst = bp + jp * kc + p * NR; \
                int64_t w = nc - jp < NR ? nc - jp : NR; \
                for (int64_t j = 0; j < w; j++) dst[j] = (T)LOAD(src + j * P->b_cs); \
                for (int64_t j = w; j < NR; j++) dst[j] = 0; \
            } \
        for (int64_t ip = 0; ip < mc; ip += MR) { \
            int64_t h = mc - ip < MR ? mc - ip : MR; \
            for (int64_t p = 0; p < kc; p++) { \
                const char *src = A + ip * P->a_rs + (pc + p) * P->a_cs; \
                T *dst = ap + ip * kc + p * MR; \
                for (int64_t i = 0; i < h; i++) dst[i] = (T)LOAD(src + i * P->a_rs); \
                for (int64_t i = h; i < MR; i++) dst[i] = 0; \
            } \
        } \
        for (int64_t jr = 0; jr < nc; jr += NR) { \
            int64_t nr = nc - jr < NR ? nc - jr : NR; \
            for (int64_t ir = 0; ir < mc; ir += MR) { \
                int64_t mr = mc - ir < MR ? mc - ir : MR; \
                UKR(kc, ap + ir * kc, bp + jr * kc, acc); \
                for (int64_t i = 0; i < mr; i++) { \
                    const T *ar = acc + i * NR; \
                    if (F16OUT) { \
                        float *cr = ct + (ir + i) * TN__NC + jr; \
                        if (pc == 0) for (int64_t j = 0; j < nr; j++) cr[j] = (float)ar[j]; \
                        else for (int64_t j = 0; j < nr; j++) cr[j] += (float)ar[j]; \
                        continue; \
                    } \
                    char *cr = C + (ir + i) * P->c_rs + jr * P->c_cs; \
                    if (pc != 0) \
                        for (int64_t j = 0; j < nr; j++) *(T *)(cr + j * P->c_cs) += alpha * ar[j]; \
                    else if (CI) { \
                        const char *cir = CI + (ir + i) * P->ci_rs + jr * P->ci_cs; \
                        for (int64_t j = 0; j < nr; j++) \
                            *(T *)(cr + j * P->c_cs) = alpha * ar[j] + beta * (T)LOAD(cir + j * P->ci_cs); \
                    } else \
                        for (int64_t j = 0; j < nr; j++) *(T *)(cr + j * P->c_cs) = alpha * ar[j]; \
                } \
            } \
        } \
    } \
    if (F16OUT) \
        for (int64_t i = 0; i < mc; i++) \
            for (int64_t j = 0; j < nc; j++) { \
                float v = (float)alpha * ct[i * TN__NC + j]; \
                if (CI) v += (float)beta * tn__ld_f16(CI + i * P->ci_rs + j * P->ci_cs); \
                uint16_t hv = tn_f32_to_f16(v); \
                memcpy(C + i * P->c_rs + j * P->c_cs, &hv, 2); \
            } \
}
TN__TILE(tn__mm_tile_f32, float, tn__ld_f32, 0, tn__ukr.f32, mr32, nr32)
TN__TILE(tn__mm_tile_f16, float, tn__ld_f16, 1, tn__ukr.f32, mr32, nr32)
TN__TILE(tn__mm_tile_f64, double, tn__ld_f64, 0, tn__ukr.f64, mr64, nr64)

typedef struct tn__mm_job {
    const tn__mm_plan *p;
    int64_t mt, nt;              /* tiles along m and n */
    atomic_int oom;
} tn__mm_job;

static void tn__mm_float_range(void *ctx, int64_t lo, int64_t hi) {
    tn__mm_job *J = (tn__mm_job *)ctx;
    const tn__mm_plan *P = J->p;
    char *scratch = tn__scratch();
    if (!scratch) { atomic_store(&J->oom, 1); return; }
    int64_t off[4], last_bi = -1;
    for (int64_t t = lo; t < hi; t++) {
        int64_t bi = t / (J->mt * J->nt), r = t % (J->mt * J->nt);
        int64_t i0 = (r / J->nt) * TN__MC, j0 = (r % J->nt) * TN__NC;
        int64_t mc = P->m - i0 < TN__MC ? P->m - i0 : TN__MC, nc = P->n - j0 < TN__NC ? P->n - j0 : TN__NC;
        if (bi != last_bi) { tn__mm_batch_offsets(P, bi, off); last_bi = bi; }
        switch (P->dt) {
        case TN_F32: tn__mm_tile_f32(P, off, i0, mc, j0, nc, scratch); break;
        case TN_F16: tn__mm_tile_f16(P, off, i0, mc, j0, nc, scratch); break;
        case TN_F64: tn__mm_tile_f64(P, off, i0, mc, j0, nc, scratch); break;
        default: TN_ASSERT(0); break;
        }
    }
}

/* Below this many multiply-adds a product runs on the calling thread. */
#define TN__MM_PARALLEL_MIN ((int64_t)1 << 18)

static tn_result tn__mm_float(const tn__mm_plan *P, const char *who) {
    pthread_once(&tn__ukr_once, tn__ukr_pick);
    tn__mm_job J = { P, (P->m + TN__MC - 1) / TN__MC, (P->n + TN__NC - 1) / TN__NC, 0 };
    int64_t ntask = P->nbatch * J.mt * J.nt;
    double work = (double)P->nbatch * (double)P->m * (double)P->n * (double)P->k;
    tn__parallel_for(ntask, work >= (double)TN__MM_PARALLEL_MIN ? 1 : ntask + 1, tn__mm_float_range, &J);
    if (atomic_load(&J.oom))
        return tn__err(TN_ERR_OOM, "%s: out of memory for %zu bytes of packing scratch", who, (size_t)TN__SCRATCH_BYTES);
    return TN_OK;
}

/* >>gemv_kernel ---------------------------------------------------------- */
/* Matrix-vector products (m == 1 or n == 1) on the built-in path: packing
   for the micro-kernel would waste NR-fold work on one column. The product
   is seen as y[i] = sum_p M[i, p] x[p] over the `rows` outputs. "Dot form"
   walks each row of M (contiguous along k: vectorised with 8 partial sums);
   "axpy form" is used when M is contiguous along the outputs instead, and
   adds x[p] * M[:, p] into a block of accumulators held in the thread's
   scratch. Tasks are blocks of outputs of one batch item. */
#define TN__MV_BLK 2048
typedef struct tn__mv {
    const tn__mm_plan *P;
    bool axpy;
    int64_t rows, k, nblk;
    int64_t m_rs, m_cs, x_s, y_s, ci_s;   /* byte strides: M (output, k), x, y, Cin */
    int sel;                              /* 0: plan's (A, B) as (M, x); 1: (B^T, A) */
    atomic_int oom;
} tn__mv;

#define TN__MV_KERNEL(NAME, T, LOAD, STORE_T) \
static void NAME(const tn__mv *V, const char *M, const char *x, char *y, const char *ci, \
                 int64_t i0, int64_t i1, T *acc) { \
    const T alpha = (T)V->P->alpha, beta = (T)V->P->beta; \
    const int64_t k = V->k; \
    if (!V->axpy) { \
        for (int64_t i = i0; i < i1; i++) { \
            const char *row = M + i * V->m_rs; \
            T s8[8] = {0}; \
            int64_t p = 0; \
            if (STORE_T && V->m_cs == (int64_t)sizeof(T) && V->x_s == (int64_t)sizeof(T)) { \
                const T *a = (const T *)row, *b = (const T *)x; \
                for (; p + 8 <= k; p += 8) \
                    for (int j = 0; j < 8; j++) s8[j] += a[p + j] * b[p + j]; \
            } \
            for (; p < k; p++) s8[p & 7] += (T)LOAD(row + p * V->m_cs) * (T)LOAD(x + p * V->x_s); \
            acc[i - i0] = ((s8[0] + s8[4]) + (s8[1] + s8[5])) + ((s8[2] + s8[6]) + (s8[3] + s8[7])); \
        } \
    } else { \
        for (int64_t i = i0; i < i1; i++) acc[i - i0] = 0; \
        for (int64_t p = 0; p < k; p++) { \
            const T xp = (T)LOAD(x + p * V->x_s); \
            const char *col = M + p * V->m_cs; \
            if (STORE_T && V->m_rs == (int64_t)sizeof(T)) { \
                const T *a = (const T *)col; \
                for (int64_t i = i0; i < i1; i++) acc[i - i0] += xp * a[i]; \
            } else \
                for (int64_t i = i0; i < i1; i++) acc[i - i0] += xp * (T)LOAD(col + i * V->m_rs); \
        } \
    } \
    for (int64_t i = i0; i < i1; i++) { \
        T v = alpha * acc[i - i0]; \
        if (ci) v += beta * (T)LOAD(ci + i * V->ci_s); \
        char *o = y + i * V->y_s; \
        if (STORE_T) *(T *)o = v; \
        else { uint16_t h = tn_f32_to_f16((float)v); memcpy(o, &h, 2); } \
    } \
}
TN__MV_KERNEL(tn__mv_f32, float, tn__ld_f32, 1)
TN__MV_KERNEL(tn__mv_f64, double, tn__ld_f64, 1)
TN__MV_KERNEL(tn__mv_f16, float, tn__ld_f16, 0)

static void tn__mv_range(void *ctx, int64_t lo, int64_t hi) {
    tn__mv *V = (tn__mv *)ctx;
    const tn__mm_plan *P = V->P;
    char *scratch = tn__scratch();
    if (!scratch) { atomic_store(&V->oom, 1); return; }
    void *acc = tn__align64(scratch);
    int64_t off[4];
    for (int64_t t = lo; t < hi; t++) {
        int64_t bi = t / V->nblk, i0 = (t % V->nblk) * TN__MV_BLK;
        int64_t i1 = i0 + TN__MV_BLK < V->rows ? i0 + TN__MV_BLK : V->rows;
        tn__mm_batch_offsets(P, bi, off);
        const char *M = V->sel ? P->b + off[1] : P->a + off[0];
        const char *x = V->sel ? P->a + off[0] : P->b + off[1];
        const char *ci = (P->ci && P->beta != 0) ? P->ci + off[3] : NULL;
        char *y = P->c + off[2];
        switch (P->dt) {
        case TN_F32: tn__mv_f32(V, M, x, y, ci, i0, i1, (float *)acc); break;
        case TN_F64: tn__mv_f64(V, M, x, y, ci, i0, i1, (double *)acc); break;
        default: tn__mv_f16(V, M, x, y, ci, i0, i1, (float *)acc); break;
        }
    }
}

static tn_result tn__mv_float(const tn__mm_plan *P, const char *who) {
    tn__mv V;
    memset(&V, 0, sizeof V);
    V.P = P;
    V.k = P->k;
    if (P->n == 1) {             /* y = A @ b[:, 0] */
        V.rows = P->m; V.m_rs = P->a_rs; V.m_cs = P->a_cs; V.x_s = P->b_rs; V.y_s = P->c_rs; V.ci_s = P->ci_rs;
    } else {                     /* y = B^T @ a[0, :] */
        V.sel = 1;
        V.rows = P->n; V.m_rs = P->b_cs; V.m_cs = P->b_rs; V.x_s = P->a_cs; V.y_s = P->c_cs; V.ci_s = P->ci_cs;
    }
    int64_t es = (int64_t)tn_dtype_size(P->dt);
    V.axpy = V.rows > 1 && V.m_cs != es && V.m_rs == es;
    V.nblk = (V.rows + TN__MV_BLK - 1) / TN__MV_BLK;
    int64_t ntask = P->nbatch * V.nblk;
    double work = (double)P->nbatch * (double)V.rows * (double)P->k;
    tn__parallel_for(ntask, work >= (double)TN__MM_PARALLEL_MIN * 4 ? 1 : ntask + 1, tn__mv_range, &V);
    if (atomic_load(&V.oom))
        return tn__err(TN_ERR_OOM, "%s: out of memory for %zu bytes of scratch", who, (size_t)TN__SCRATCH_BYTES);
    return TN_OK;
}

/* >>int_kernel ----------------------------------------------------------- */
/* Integers: out (already beta*Cin) += alpha*A@B, in unsigned arithmetic so
   overflow wraps as in NumPy instead of being undefined. Blocked so a slab
   of B (TN__IKB x TN__INB) is reused across every row of A; the inner loop
   runs along a row of B and C. Threads take blocks of TN__IMB rows. */
#define TN__IKB 128
#define TN__INB 512
#define TN__IMB 32
#define TN__INT_KERNEL(NAME, ST, UT) \
static void NAME(const tn__mm_plan *P, const int64_t off[4], int64_t i0, int64_t i1) { \
    const UT alpha = (UT)(int64_t)P->alpha; \
    const char *A = P->a + off[0], *B = P->b + off[1]; \
    char *C = P->c + off[2]; \
    for (int64_t j0 = 0; j0 < P->n; j0 += TN__INB) { \
        int64_t j1 = P->n - j0 < TN__INB ? P->n : j0 + TN__INB; \
        for (int64_t p0 = 0; p0 < P->k; p0 += TN__IKB) { \
            int64_t p1 = P->k - p0 < TN__IKB ? P->k : p0 + TN__IKB; \
            for (int64_t i = i0; i < i1; i++) { \
                char *cr = C + i * P->c_rs; \
                for (int64_t p = p0; p < p1; p++) { \
                    UT a = alpha * (UT)*(const ST *)(A + i * P->a_rs + p * P->a_cs); \
                    if (!a) continue; \
                    const char *br = B + p * P->b_rs; \
                    if (P->b_cs == (int64_t)sizeof(ST) && P->c_cs == (int64_t)sizeof(ST)) { \
                        ST *restrict c = (ST *)cr; \
                        const ST *restrict b = (const ST *)br; \
                        for (int64_t j = j0; j < j1; j++) c[j] = (ST)((UT)c[j] + a * (UT)b[j]); \
                    } else \
                        for (int64_t j = j0; j < j1; j++) { \
                            ST *c = (ST *)(cr + j * P->c_cs); \
                            *c = (ST)((UT)*c + a * (UT)*(const ST *)(br + j * P->b_cs)); \
                        } \
                } \
            } \
        } \
    } \
}
TN__INT_KERNEL(tn__mm_int32, int32_t, uint32_t)
TN__INT_KERNEL(tn__mm_int64, int64_t, uint64_t)

static void tn__mm_int_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__mm_plan *P = (const tn__mm_plan *)ctx;
    int64_t mt = (P->m + TN__IMB - 1) / TN__IMB, off[4];
    for (int64_t t = lo; t < hi; t++) {
        int64_t bi = t / mt, i0 = (t % mt) * TN__IMB, i1 = i0 + TN__IMB < P->m ? i0 + TN__IMB : P->m;
        tn__mm_batch_offsets(P, bi, off);
        if (P->dt == TN_I32) tn__mm_int32(P, off, i0, i1);
        else tn__mm_int64(P, off, i0, i1);
    }
}

/* >>mm_run --------------------------------------------------------------- */
/* Runs a plan: CBLAS when it can, else the built-in kernels. */
static tn_result tn__mm_run(const tn__mm_plan *P, const char *who) {
    if (P->m == 0 || P->n == 0 || P->nbatch == 0) return TN_OK;
    bool have_c = P->ci && P->beta != 0;
    if (P->k == 0) { tn__mm_fill(P, true); return TN_OK; }
    if (P->dt == TN_I32 || P->dt == TN_I64) {
        tn__mm_fill(P, true);
        int64_t ntask = P->nbatch * ((P->m + TN__IMB - 1) / TN__IMB);
        double work = (double)P->nbatch * (double)P->m * (double)P->n * (double)P->k;
        tn__parallel_for(ntask, work >= (double)TN__MM_PARALLEL_MIN ? 1 : ntask + 1, tn__mm_int_range, (void *)P);
        return TN_OK;
    }
    if ((P->dt == TN_F32 || P->dt == TN_F64) && tn__blas_name() &&
        tn__blas_mm2d(true, P->dt, P->m, P->n, P->k, P->alpha, P->a, P->a_rs, P->a_cs,
                      P->b, P->b_rs, P->b_cs, 0.0, P->c, P->c_rs, P->c_cs)) {
        /* Every batch item has the same strides, so the probe holds for all.
           out starts as Cin (broadcast) and BLAS applies beta, unless out
           already is Cin (an in-place gemm). */
        bool same = have_c && P->ci == P->c && P->ci_rs == P->c_rs && P->ci_cs == P->c_cs &&
                    !memcmp(P->ci_bs, P->c_bs, sizeof P->c_bs);
        if (have_c && !same) tn__mm_fill(P, false);
        int64_t off[4];
        for (int64_t bi = 0; bi < P->nbatch; bi++) {
            tn__mm_batch_offsets(P, bi, off);
            bool ok = tn__blas_mm2d(false, P->dt, P->m, P->n, P->k, P->alpha, P->a + off[0], P->a_rs, P->a_cs,
                                    P->b + off[1], P->b_rs, P->b_cs, have_c ? P->beta : 0.0,
                                    P->c + off[2], P->c_rs, P->c_cs);
            TN_ASSERT(ok);
            (void)ok;
        }
        return TN_OK;
    }
    if (P->m == 1 || P->n == 1) return tn__mv_float(P, who);
    return tn__mm_float(P, who);
}

/* >>linalg_infer --------------------------------------------------------- */

static const char *tn__la_fn(int op) {
    switch (op) {
    case TN_OP_DOT: return "tn_dot";
    case TN_OP_GEMM: return "tn_gemm";
    case TN_OP_GEMV: return "tn_gemv";
    default: return "tn_outer";
    }
}

/* "a (3, 4)" or, when the variable (or what a promotion cast reads) has a
   name, "a 'W' (3, 4)". */
static const char *tn__la_desc(tn_var *const *vars, int k, const char *role, const tn_type *t, char buf[200]) {
    const tn_var *v = vars ? vars[k] : NULL;
    while (v && !v->name && v->op == TN_OP_CAST && v->n_in == 1) v = v->in[0];
    char sh[128];
    tn__shape_str(t->ndim, t->shape, sh);
    if (v && v->name) snprintf(buf, 200, "%s '%s' %s", role, v->name, sh);
    else snprintf(buf, 200, "%s %s", role, sh);
    return buf;
}

/* The operands' dtypes: one numeric dtype (constructors insert casts). */
static tn_result tn__la_dtypes(const char *fn, tn_var *const *vars, const tn_type *in, int n, const char *const *roles) {
    char d[200];
    for (int i = 0; i < n; i++)
        if (in[i].dtype == TN_BOOL || in[i].dtype == TN_DTYPE_NONE || in[i].dtype >= TN_DTYPE_COUNT)
            return tn__err(TN_ERR_DTYPE, "%s: %s has dtype %s; products need int or float operands", fn,
                           tn__la_desc(vars, i, roles[i], &in[i], d), tn_dtype_name(in[i].dtype));
    for (int i = 1; i < n; i++)
        if (in[i].dtype != in[0].dtype) {
            char d0[200];
            return tn__err(TN_ERR_DTYPE, "%s: operands differ in dtype: %s is %s, %s is %s", fn,
                           tn__la_desc(vars, 0, roles[0], &in[0], d0), tn_dtype_name(in[0].dtype),
                           tn__la_desc(vars, i, roles[i], &in[i], d), tn_dtype_name(in[i].dtype));
        }
    return TN_OK;
}

/* Matmul rule for operands ia, ib of the node (roles ra, rb). */
static tn_result tn__matmul_type(const char *fn, tn_var *const *vars, int ia, int ib, const char *ra, const char *rb,
                                 const tn_type *a, const tn_type *b, tn_type *out) {
    char da[200], db[200];
    if (a->ndim == 0 || b->ndim == 0)
        return tn__err(TN_ERR_SHAPE, "%s: %s is 0-d: a matrix product needs at least 1-d operands (use tn_mul for scalars)",
                       fn, a->ndim == 0 ? tn__la_desc(vars, ia, ra, a, da) : tn__la_desc(vars, ib, rb, b, db));
    int64_t ka = a->shape[a->ndim - 1], kb = b->ndim == 1 ? b->shape[0] : b->shape[b->ndim - 2];
    if (ka >= 0 && kb >= 0 && ka != kb)
        return tn__err(TN_ERR_SHAPE, "%s: inner dimensions differ: %s and %s", fn,
                       tn__la_desc(vars, ia, ra, a, da), tn__la_desc(vars, ib, rb, b, db));
    int na = a->ndim >= 2 ? a->ndim - 2 : 0, nb = b->ndim >= 2 ? b->ndim - 2 : 0;
    int nbt = na > nb ? na : nb;
    int tail = (a->ndim >= 2) + (b->ndim >= 2);
    if (nbt + tail > TN_MAX_DIMS)
        return tn__err(TN_ERR_SHAPE, "%s: the product of %s and %s has more than %d dims", fn,
                       tn__la_desc(vars, ia, ra, a, da), tn__la_desc(vars, ib, rb, b, db), TN_MAX_DIMS);
    memset(out, 0, sizeof *out);
    out->dtype = a->dtype;
    out->ndim = nbt + tail;
    for (int d = 0; d < nbt; d++) {
        int xa = d - (nbt - na), xb = d - (nbt - nb);
        int64_t sa = xa >= 0 ? a->shape[xa] : 1, sb = xb >= 0 ? b->shape[xb] : 1;
        bool ba = xa < 0 || a->bcast[xa] || sa == 1, bb = xb < 0 || b->bcast[xb] || sb == 1;
        int64_t r;
        if (sa == sb) r = sa;
        else if (ba) r = sb;
        else if (bb) r = sa;
        else if (sa < 0) r = sb;          /* unknown: checked again at call time */
        else if (sb < 0) r = sa;
        else
            return tn__err(TN_ERR_SHAPE, "%s: batch dimensions do not broadcast: %s and %s", fn,
                           tn__la_desc(vars, ia, ra, a, da), tn__la_desc(vars, ib, rb, b, db));
        out->shape[d] = r;
        out->bcast[d] = ba && bb;
    }
    int d = nbt;
    if (a->ndim >= 2) { out->shape[d] = a->shape[a->ndim - 2]; out->bcast[d] = a->bcast[a->ndim - 2]; d++; }
    if (b->ndim >= 2) { out->shape[d] = b->shape[b->ndim - 1]; out->bcast[d] = b->bcast[b->ndim - 1]; }
    return TN_OK;
}

/* The added term (C of gemm, y of gemv) must broadcast to the product
   without changing its shape. */
static tn_result tn__la_addend(const char *fn, tn_var *const *vars, const char *const *roles, const tn_type *in,
                               const tn_type *prod) {
    const tn_type *c = &in[0];
    bool ok = c->ndim <= prod->ndim;
    for (int d = 0; ok && d < c->ndim; d++) {
        int64_t s = c->shape[d], t = prod->shape[prod->ndim - c->ndim + d];
        ok = s == t || s == 1 || s < 0 || t < 0;
    }
    if (ok) return TN_OK;
    char dc[200], da[200], db[200], dp[128];
    return tn__err(TN_ERR_SHAPE, "%s: %s does not broadcast to the product's shape %s of %s and %s", fn,
                   tn__la_desc(vars, 0, roles[0], c, dc), tn__shape_str(prod->ndim, prod->shape, dp),
                   tn__la_desc(vars, 1, roles[1], &in[1], da), tn__la_desc(vars, 2, roles[2], &in[2], db));
}

/* Integer products take integer scales. */
static tn_result tn__la_scales(const char *fn, const tn_params *p, tn_dtype t) {
    if (!p || tn_dtype_is_float(t)) return TN_OK;
    for (int i = 0; i < 2; i++)
        if (p->f[i] != floor(p->f[i]) || fabs(p->f[i]) > 9.2e18)
            return tn__err(TN_ERR_INVALID, "%s: %s %g is not an integer, but the operands are %s", fn,
                           i ? "beta" : "alpha", p->f[i], tn_dtype_name(t));
    return TN_OK;
}

/* Type rule of each linalg op; vars (may be NULL) give names for messages. */
static tn_result tn__la_type(int op, tn_var *const *vars, const tn_params *p, const tn_type *in, tn_type *out) {
    static const char *const r_dot[] = { "a", "b" }, *const r_gemm[] = { "c", "a", "b" },
                             *const r_gemv[] = { "y", "a", "x" };
    const char *fn = tn__la_fn(op);
    char d0[200], d1[200];
    tn_result r;
    switch (op) {
    case TN_OP_DOT:
        if ((r = tn__la_dtypes(fn, vars, in, 2, r_dot)) != TN_OK) return r;
        return tn__matmul_type(fn, vars, 0, 1, "a", "b", &in[0], &in[1], out);
    case TN_OP_OUTER:
        if ((r = tn__la_dtypes(fn, vars, in, 2, r_dot)) != TN_OK) return r;
        if (in[0].ndim != 1 || in[1].ndim != 1)
            return tn__err(TN_ERR_SHAPE, "%s: operands must be vectors (1-d), got %s and %s", fn,
                           tn__la_desc(vars, 0, "a", &in[0], d0), tn__la_desc(vars, 1, "b", &in[1], d1));
        memset(out, 0, sizeof *out);
        out->dtype = in[0].dtype;
        out->ndim = 2;
        out->shape[0] = in[0].shape[0]; out->bcast[0] = in[0].bcast[0];
        out->shape[1] = in[1].shape[0]; out->bcast[1] = in[1].bcast[0];
        return TN_OK;
    case TN_OP_GEMM:
        if ((r = tn__la_dtypes(fn, vars, in, 3, r_gemm)) != TN_OK) return r;
        if ((r = tn__la_scales(fn, p, in[0].dtype)) != TN_OK) return r;
        if ((r = tn__matmul_type(fn, vars, 1, 2, "a", "b", &in[1], &in[2], out)) != TN_OK) return r;
        return tn__la_addend(fn, vars, r_gemm, in, out);
    case TN_OP_GEMV:
        if ((r = tn__la_dtypes(fn, vars, in, 3, r_gemv)) != TN_OK) return r;
        if ((r = tn__la_scales(fn, p, in[0].dtype)) != TN_OK) return r;
        if (in[1].ndim != 2 || in[2].ndim != 1)
            return tn__err(TN_ERR_SHAPE, "%s: needs a matrix (2-d) and a vector (1-d), got %s and %s", fn,
                           tn__la_desc(vars, 1, "a", &in[1], d0), tn__la_desc(vars, 2, "x", &in[2], d1));
        if ((r = tn__matmul_type(fn, vars, 1, 2, "a", "x", &in[1], &in[2], out)) != TN_OK) return r;
        return tn__la_addend(fn, vars, r_gemv, in, out);
    default:
        return tn__err(TN_ERR_INTERNAL, "tn__la_type: op %d is not a linalg op", op);
    }
}

static tn_result tn__la_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    return tn__la_type(node->op, node->in, &node->p, in, out);
}

/* >>linalg_cpu ------------------------------------------------------------ */

static tn_result tn__la_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__mm_plan P;
    const char *fn = tn__la_fn(node->op);
    switch (node->op) {
    case TN_OP_DOT:
        tn__mm_plan_init(&P, in[0], in[1], out[0], NULL, 1.0, 0.0);
        break;
    case TN_OP_GEMM:
    case TN_OP_GEMV:
        tn__mm_plan_init(&P, in[1], in[2], out[0], in[0], node->p.f[0], node->p.f[1]);
        break;
    case TN_OP_OUTER: {
        /* a (m) as an (m, 1) matrix, b (n) as (1, n): a product with k = 1 */
        tn_array a = *in[0], b = *in[1];
        int64_t es = (int64_t)tn_dtype_size(a.dtype);
        a.ndim = 2; a.shape[1] = 1; a.strides[1] = es;
        b.ndim = 2; b.shape[1] = b.shape[0]; b.strides[1] = b.strides[0]; b.shape[0] = 1; b.strides[0] = b.shape[1] * es;
        tn__mm_plan_init(&P, &a, &b, out[0], NULL, 1.0, 0.0);
        break;
    }
    default:
        return tn__err(TN_ERR_INTERNAL, "tn__la_cpu: op %d is not a linalg op", node->op);
    }
    return tn__mm_run(&P, fn);
}

static void tn__la_label(const tn_var *node, char *buf, size_t cap) {
    switch (node->op) {
    case TN_OP_DOT: snprintf(buf, cap, "Dot"); break;
    case TN_OP_GEMM: snprintf(buf, cap, "Gemm{%s}", node->inplace ? "inplace" : "no_inplace"); break;
    case TN_OP_GEMV: snprintf(buf, cap, "Gemv{%s}", node->inplace ? "inplace" : "no_inplace"); break;
    default: snprintf(buf, cap, "Outer"); break;
    }
}

/* >>linalg_constructors --------------------------------------------------- */

/* Promotes the operands to one dtype (a weak scalar addend, at index 0 when
   `weak0`, adopts the product's), checks the type rule before recording
   anything, then records the casts and the node. */
static tn_var *tn__la_build(int op, int n, tn_var **in, const tn_params *p) {
    const char *fn = tn__la_fn(op);
    for (int i = 0; i < n; i++)
        if (!in[i]) {
            if (tn_last_result() == TN_OK) tn__err(TN_ERR_NULL, "%s: operand %d is NULL", fn, i);
            return NULL;
        }
    for (int i = 1; i < n; i++)
        if (in[i]->graph != in[0]->graph) {
            tn__err(TN_ERR_GRAPH, "%s: operands belong to different graphs", fn);
            return NULL;
        }
    tn_type t[3];
    memset(t, 0, sizeof t);
    for (int i = 0; i < n; i++) t[i] = in[i]->type;
    bool has_addend = op == TN_OP_GEMM || op == TN_OP_GEMV;
    int first = has_addend ? 1 : 0;
    tn_dtype dt = TN_DTYPE_NONE;
    for (int i = 0; i < n; i++) {
        if (t[i].dtype == TN_BOOL) {
            tn_type out;
            tn__la_type(op, in, p, t, &out);     /* the rule names the bool operand */
            return NULL;
        }
        if (i >= first || !(in[i]->flags & TN_VAR_WEAK)) dt = tn_dtype_promote(dt, t[i].dtype);
    }
    for (int i = 0; i < n; i++) t[i].dtype = dt;
    tn_type out;
    if (tn__la_type(op, in, p, t, &out) != TN_OK) return NULL;
    tn_var *cin[3];
    for (int i = 0; i < n; i++) {
        cin[i] = in[i]->type.dtype == dt ? in[i] : tn_cast(in[i], dt);
        if (!cin[i]) return NULL;
    }
    return tn__node(in[0]->graph, op, n, cin, p, NULL, fn);
}

TN_API tn_var *tn_dot(tn_var *a, tn_var *b) {
    tn_var *in[2] = { a, b };
    return tn__la_build(TN_OP_DOT, 2, in, NULL);
}

TN_API tn_var *tn_outer(tn_var *a, tn_var *b) {
    tn_var *in[2] = { a, b };
    return tn__la_build(TN_OP_OUTER, 2, in, NULL);
}

TN_API tn_var *tn_gemm(tn_var *c, double alpha, tn_var *a, tn_var *b, double beta) {
    tn_var *in[3] = { c, a, b };
    tn_params p;
    memset(&p, 0, sizeof p);
    p.f[0] = alpha;
    p.f[1] = beta;
    return tn__la_build(TN_OP_GEMM, 3, in, &p);
}

TN_API tn_var *tn_gemv(tn_var *y, double alpha, tn_var *a, tn_var *x, double beta) {
    tn_var *in[3] = { y, a, x };
    tn_params p;
    memset(&p, 0, sizeof p);
    p.f[0] = alpha;
    p.f[1] = beta;
    return tn__la_build(TN_OP_GEMV, 3, in, &p);
}

/* >>registry: fills this part's rows of the op table */
static void tn__register_linalg_ops(tn_op_def *t) {
    t[TN_OP_DOT] = (tn_op_def){ "Dot", TN_OPK_LINALG, 2, tn__la_infer, tn__la_cpu, tn__la_label };
    t[TN_OP_GEMM] = (tn_op_def){ "Gemm", TN_OPK_LINALG, 3, tn__la_infer, tn__la_cpu, tn__la_label };
    t[TN_OP_GEMV] = (tn_op_def){ "Gemv", TN_OPK_LINALG, 3, tn__la_infer, tn__la_cpu, tn__la_label };
    t[TN_OP_OUTER] = (tn_op_def){ "Outer", TN_OPK_LINALG, 2, tn__la_infer, tn__la_cpu, tn__la_label };
}
