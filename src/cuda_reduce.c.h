/* >>cuda_reduce: reductions and softmax as generated CUDA kernels -----------------
   Included by tensor_cuda.h inside its implementation section (after the
   elementwise code generator, the NVRTC path and the kernel cache, which it
   reuses). Ops: Sum, Prod, Mean, Max, Min, Argmax, Argmin, All, Any,
   LogSumExp (i[0] axis bit mask, i[1] keepdims) and Softmax, LogSoftmax
   (i[0] axis), each with an optional fused elementwise prologue (node->ext,
   a tn_ew_program whose output 0 is the value reduced; its code is the
   elementwise generator's tn_eval, so fused equals unfused).

   Plan. The CPU planner (tn__rplan_build, src/ops_reduce.c.h) moves the
   reduced axes innermost, drops size-1 dims and merges chained dims: every
   output element folds a "box" of N elements given by nr reduced dims; the M
   outputs are indexed by nk kept dims. Strides are passed in elements. Kernel
   classes (the cache key holds the class, nk, nr, dtypes, op and prologue,
   never a size):
     ROW  a group of G threads (a warp, or a 256-thread block) per output:
          threads stride along the box, then warp shuffles (and shared memory
          across warps). A box that is one contiguous run (nr 1, unit stride;
          broadcast prologue inputs allowed) is read with 16-byte vector loads,
          four in flight per thread, when the run start is aligned.
     COL  the innermost kept dim has the smallest stride (sum over axis 0 of
          a row-major matrix): 32 consecutive outputs per block row, so a
          warp reads 32 neighbours; 8 rows of threads split the box.
   Few outputs and a long box (a full reduction): the box is cut into S
   chunks, one block each; every block writes its partial accumulator, and
   the last block to finish an output (an integer atomic counter, reset by
   that block) combines the S partials in a fixed order and writes the
   result. No float atomics: results are deterministic, run to run.
   Softmax: one group per row (ROW) or one thread per row (COL); pass 1 is an
   online max-and-sum (one read), pass 2 writes exp(x - m) / s or
   x - m - log(s). It reads each element before writing it, so y may alias x.

   Numerics (documented difference from the CPU kernels, which accumulate
   floats in double sequentially): float16/float32 accumulate in float32 along
   a tree (per-thread partials, then shuffles), whose error grows like
   log(N) rather than N; float64 accumulates in double; ints in wrapping
   int64 (exact, as the CPU); mean and logsumexp of ints in double. Special
   values match the CPU exactly: NaN propagates through max/min/logsumexp/
   softmax, argmax/argmin give the first NaN or else the first extremum (ties
   are broken by index, so the tree order cannot change the answer),
   logsumexp of a box whose max is not finite is that max, softmax of a row
   with no finite max is NaN, empty sums give 0, prod 1, mean NaN, all true,
   any false, logsumexp -inf; max/min/argmax/argmin of an empty box is an
   error. logsumexp and softmax use an online max (the running sum is
   rescaled when the max grows) instead of the CPU's two passes. */
#ifndef TN__CUDA_REDUCE_INCLUDED
#define TN__CUDA_REDUCE_INCLUDED

enum { TN__CRED_ROW = 1, TN__CRED_COL, TN__CRED_SMROW, TN__CRED_SMCOL };

/* The structure a reduction kernel is specialised for. vec (ROW, nr 1):
   every source has unit stride along the box, except those in bmask, which
   are constant along it (a broadcast prologue input). */
typedef struct tn__cred_layout {
    int kind, nk, nr;
    bool vec;
    uint64_t bmask;
} tn__cred_layout;

#define TN__CRED_THREADS 256
#define TN__CRED_ACC_BYTES 16      /* upper bound of sizeof(tn_acc) in every kernel */

static bool tn__cred_is_softmax(int op) { return op == TN_OP_SOFTMAX || op == TN_OP_LOG_SOFTMAX; }
static bool tn__cred_is_reduce(int op) { return op >= TN_OP_SUM && op <= TN_OP_LOGSUMEXP; }

/* Accumulator dtype: the register dtype the fold computes in. */
static tn_dtype tn__cred_acc_dtype(int op, tn_dtype xt) {
    switch (op) {
    case TN_OP_ALL: case TN_OP_ANY: return TN_I32;       /* a flag, as C int */
    case TN_OP_MEAN: case TN_OP_LOGSUMEXP: case TN_OP_SOFTMAX: case TN_OP_LOG_SOFTMAX:
        return xt == TN_F16 || xt == TN_F32 ? TN_F32 : TN_F64;
    default: return xt == TN_F16 || xt == TN_F32 ? TN_F32 : xt == TN_F64 ? TN_F64 : TN_I64;
    }
}

static const char *tn__cred_cname(tn_dtype at) {
    return at == TN_F32 ? "float" : at == TN_F64 ? "double" : at == TN_I32 ? "int" : "int64_t";
}

/* The accumulator struct and its device functions: tn_init, tn_fold (one
   element x of register type RT at box index k), tn_comb (order-free
   combination), tn_shfl (shuffle down), tn_ldp (an L2 load of a partial
   another block wrote) and, for reductions, tn_fin (store the result). */
static void tn__cred_emit_acc(tn__sb *b, int op, tn_dtype xt, tn_dtype yt) {
    tn_dtype at = tn__cred_acc_dtype(op, xt);
    const char *AT = tn__cred_cname(at), *RT = tn__cuda_ctype(xt);
    bool fl = at == TN_F32 || at == TN_F64;
    const char *INF = at == TN_F64 ? "__longlong_as_double(0x7ff0000000000000LL)" : "__int_as_float(0x7f800000)";
    const char *EXP = at == TN_F64 ? "exp" : "expf";
    bool arg = op == TN_OP_ARGMAX || op == TN_OP_ARGMIN;
    bool lse = op == TN_OP_LOGSUMEXP || tn__cred_is_softmax(op);
    tn__sb_printf(b, "typedef %s AT;\ntypedef %s RT;\n", AT, RT);
    if (arg) tn__sb_puts(b, "struct tn_acc { AT v; int64_t g; };\n");
    else if (lse) tn__sb_puts(b, "struct tn_acc { AT m; AT s; };\n");
    else tn__sb_puts(b, "struct tn_acc { AT v; };\n");
    tn__sb_printf(b, "#define TN_INF %s\n", INF);

    /* init */
    const char *init = "0";
    switch (op) {
    case TN_OP_PROD: case TN_OP_ALL: init = "1"; break;
    case TN_OP_MAX: case TN_OP_ARGMAX: init = fl ? "-TN_INF" : "(-9223372036854775807LL - 1)"; break;
    case TN_OP_MIN: case TN_OP_ARGMIN: init = fl ? "TN_INF" : "9223372036854775807LL"; break;
    default: break;
    }
    if (lse) tn__sb_puts(b, "static __device__ __forceinline__ void tn_init(tn_acc &a) { a.m = -TN_INF; a.s = (AT)0; }\n");
    else if (arg) tn__sb_printf(b, "static __device__ __forceinline__ void tn_init(tn_acc &a) { a.v = (AT)(%s); a.g = 9223372036854775807LL; }\n", init);
    else tn__sb_printf(b, "static __device__ __forceinline__ void tn_init(tn_acc &a) { a.v = (AT)(%s); }\n", init);

    /* fold and combine */
    const char *fold = "", *comb = "";
    switch (op) {
    case TN_OP_SUM: case TN_OP_MEAN:
        fold = fl ? "a.v += (AT)x;" : "a.v = (int64_t)((uint64_t)a.v + (uint64_t)x);";
        comb = fl ? "a.v += b.v;" : "a.v = (int64_t)((uint64_t)a.v + (uint64_t)b.v);";
        break;
    case TN_OP_PROD:
        fold = fl ? "a.v *= (AT)x;" : "a.v = (int64_t)((uint64_t)a.v * (uint64_t)x);";
        comb = fl ? "a.v *= b.v;" : "a.v = (int64_t)((uint64_t)a.v * (uint64_t)b.v);";
        break;
    case TN_OP_MAX:   /* NaN sticks: once a.v is NaN no comparison replaces it */
        fold = fl ? "const AT v = (AT)x; if (v > a.v || v != v) a.v = v;" : "if (x > a.v) a.v = x;";
        comb = fl ? "if (b.v > a.v || b.v != b.v) a.v = b.v;" : "if (b.v > a.v) a.v = b.v;";
        break;
    case TN_OP_MIN:
        fold = fl ? "const AT v = (AT)x; if (v < a.v || v != v) a.v = v;" : "if (x < a.v) a.v = x;";
        comb = fl ? "if (b.v < a.v || b.v != b.v) a.v = b.v;" : "if (b.v < a.v) a.v = b.v;";
        break;
    case TN_OP_ARGMAX: case TN_OP_ARGMIN: {
        /* (v, k) beats (w, g): NaN beats numbers, else the extremum; ties and
           NaN vs NaN go to the smaller index */
        const char *gt = op == TN_OP_ARGMAX ? ">" : "<";
        if (fl)
            tn__sb_printf(b, "static __device__ __forceinline__ bool tn_better(AT v, int64_t k, AT w, int64_t g) {\n"
                             "    return v != v ? (w == w || k < g) : (w == w && (v %s w || (v == w && k < g))); }\n", gt);
        else
            tn__sb_printf(b, "static __device__ __forceinline__ bool tn_better(AT v, int64_t k, AT w, int64_t g) {\n"
                             "    return v %s w || (v == w && k < g); }\n", gt);
        fold = "if (tn_better((AT)x, k, a.v, a.g)) { a.v = (AT)x; a.g = k; }";
        comb = "if (tn_better(b.v, b.g, a.v, a.g)) a = b;";
        break;
    }
    case TN_OP_ALL: fold = "a.v &= (x != 0);"; comb = "a.v &= b.v;"; break;
    case TN_OP_ANY: fold = "a.v |= (x != 0);"; comb = "a.v |= b.v;"; break;
    default: break;
    }
    if (lse) {
        /* online max and sum of exp(x - m); -inf adds nothing (and never
           computes -inf - -inf); a NaN max sticks; a +inf max makes s
           meaningless, and the result is then the max itself */
        tn__sb_printf(b,
            "static __device__ __forceinline__ void tn_fold(tn_acc &a, const RT x, const int64_t k) {\n"
            "    const AT v = (AT)x; (void)k;\n"
            "    if (a.m != a.m) return;\n"
            "    if (v != v) { a.m = v; return; }\n"
            "    if (v > a.m) { a.s = (a.m == -TN_INF ? (AT)0 : a.s * %s(a.m - v)) + (AT)1; a.m = v; }\n"
            "    else if (v != -TN_INF) a.s += %s(v - a.m);\n"
            "}\n"
            "static __device__ __forceinline__ void tn_comb(tn_acc &a, const tn_acc &b) {\n"
            "    if (a.m != a.m) return;\n"
            "    if (b.m != b.m) { a = b; return; }\n"
            "    const AT m = b.m > a.m ? b.m : a.m;\n"
            "    if (m == -TN_INF) return;\n"
            "    if (m == TN_INF) { a.m = m; return; }\n"
            "    a.s = (a.m == -TN_INF ? (AT)0 : a.s * %s(a.m - m)) + (b.m == -TN_INF ? (AT)0 : b.s * %s(b.m - m));\n"
            "    a.m = m;\n"
            "}\n", EXP, EXP, EXP, EXP);
    } else {
        tn__sb_printf(b, "static __device__ __forceinline__ void tn_fold(tn_acc &a, const RT x, const int64_t k) { (void)k; %s }\n", fold);
        tn__sb_printf(b, "static __device__ __forceinline__ void tn_comb(tn_acc &a, const tn_acc &b) { %s }\n", comb);
    }

    /* shuffles and partial loads, field by field */
    const char *f1 = arg ? "v" : lse ? "m" : "v", *f2 = arg ? "g" : lse ? "s" : NULL;
    tn__sb_printf(b, "static __device__ __forceinline__ tn_acc tn_shfl(const tn_acc &a, int off) {\n"
                     "    tn_acc r; r.%s = __shfl_down_sync(0xffffffffu, a.%s, off);", f1, f1);
    if (f2) tn__sb_printf(b, " r.%s = __shfl_down_sync(0xffffffffu, a.%s, off);", f2, f2);
    tn__sb_printf(b, " return r; }\n"
                     "static __device__ __forceinline__ tn_acc tn_bcast(const tn_acc &a) {\n"
                     "    tn_acc r; r.%s = __shfl_sync(0xffffffffu, a.%s, 0);", f1, f1);
    if (f2) tn__sb_printf(b, " r.%s = __shfl_sync(0xffffffffu, a.%s, 0);", f2, f2);
    tn__sb_printf(b, " return r; }\n"
                     "static __device__ __forceinline__ tn_acc tn_ldp(const tn_acc *p) {\n"
                     "    tn_acc r; r.%s = __ldcg(&p->%s);", f1, f1);
    if (f2) tn__sb_printf(b, " r.%s = __ldcg(&p->%s);", f2, f2);
    tn__sb_puts(b, " return r; }\n"
                   "static __device__ __forceinline__ tn_acc tn_wred(tn_acc a) {\n"
                   "#pragma unroll\n"
                   "    for (int off = 16; off > 0; off >>= 1) { const tn_acc b = tn_shfl(a, off); tn_comb(a, b); }\n"
                   "    return a; }\n"
                   /* whole-block reduction: the result is valid in thread 0 */
                   "static __device__ __forceinline__ tn_acc tn_bred(tn_acc a, tn_acc *sh) {\n"
                   "    a = tn_wred(a);\n"
                   "    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = a;\n"
                   "    __syncthreads();\n"
                   "    if (threadIdx.x < 32) {\n"
                   "        if (threadIdx.x < blockDim.x / 32) a = sh[threadIdx.x]; else tn_init(a);\n"
                   "        a = tn_wred(a);\n"
                   "    }\n"
                   "    __syncthreads();\n"
                   "    return a; }\n");

    if (tn__cred_is_softmax(op)) return;
    /* the result, stored as the CPU's tn__rfinish + tn__rstore would */
    tn_dtype from = at;
    char e[160];
    switch (op) {
    case TN_OP_MEAN:
        if (yt == TN_F16 || yt == TN_F32) { snprintf(e, sizeof e, "(float)((double)a.v / (double)n)"); from = TN_F32; }
        else { snprintf(e, sizeof e, "((double)a.v / (double)n)"); from = TN_F64; }
        break;
    case TN_OP_LOGSUMEXP:
        snprintf(e, sizeof e, "(isfinite(a.m) ? (double)a.m + log((double)a.s) : (double)a.m)");
        from = TN_F64;
        if (yt == TN_F16) { snprintf(e, sizeof e, "(float)(isfinite(a.m) ? (double)a.m + log((double)a.s) : (double)a.m)"); from = TN_F32; }
        break;
    case TN_OP_ARGMAX: case TN_OP_ARGMIN: snprintf(e, sizeof e, "a.g"); from = TN_I64; break;
    case TN_OP_ALL: case TN_OP_ANY: snprintf(e, sizeof e, "(int64_t)a.v"); from = TN_I64; break;
    default: snprintf(e, sizeof e, "a.v"); break;
    }
    tn__sb_printf(b, "static __device__ __forceinline__ void tn_fin(%s *y, const tn_acc &a, const int64_t n) {\n"
                     "    (void)n; *y = ", tn__cuda_stype(yt));
    tn__cuda_store(b, e, from, yt);
    tn__sb_puts(b, "; }\n");
}

/* Emits `const RT x = ...;` from the sources' register values reg[i]: the
   source itself, or the prologue's output 0 (stored as its dtype and read
   back, as the CPU's scratch buffer does). */
static void tn__cred_emit_x(tn__sb *b, const tn_ew_program *p, tn_dtype xt, char (*reg)[160], const char *ind) {
    if (!p) { tn__sb_printf(b, "%sconst RT x = %s;\n", ind, reg[0]); return; }
    tn__sb_printf(b, "%s%s t0", ind, tn__cuda_stype(p->out_dtype[0]));
    for (int j = 1; j < p->n_out; j++) tn__sb_printf(b, "; %s t%d", tn__cuda_stype(p->out_dtype[j]), j);
    tn__sb_printf(b, ";\n%stn_eval(", ind);
    for (int i = 0; i < p->n_in; i++) tn__sb_printf(b, "%s%s", i ? ", " : "", reg[i]);
    for (int j = 0; j < p->n_out; j++) tn__sb_printf(b, ", &t%d", j);
    tn__sb_printf(b, ");\n%sconst RT x = ", ind);
    tn__cuda_load(b, xt, "t0");
    tn__sb_puts(b, ";\n");
    (void)xt;
}

/* reg[i] = the loaded value of source i at in_i[f[i] + <off>], where off is a
   printf format taking the source index (e.g. "k * A.rx[%d][0]"). */
static void tn__cred_regs(char (*reg)[160], int ns, const tn_dtype *sd, const char *offfmt) {
    for (int i = 0; i < ns; i++) {
        char off[64], lv[128];
        tn__sb t = { 0 };
        snprintf(off, sizeof off, offfmt, i);
        snprintf(lv, sizeof lv, "in%d[f[%d] + %s]", i, i, off);
        tn__cuda_load(&t, sd[i], lv);
        snprintf(reg[i], 160, "%s", t.s ? t.s : "0");
        tn__free(t.s);
    }
}

/* Kept-dim offsets of output o (f[i] per source, yo into y) and box offsets
   of box element k (g[i]); N-d index paths, unrolled by the compiler. */
static void tn__cred_emit_index(tn__sb *b) {
    tn__sb_puts(b,
        "static __device__ __forceinline__ void tn_koff(const tn_args &A, int64_t o, int64_t *f, int64_t &yo) {\n"
        "    yo = 0;\n"
        "#pragma unroll\n"
        "    for (int i = 0; i < TN_NS; i++) f[i] = 0;\n"
        "#pragma unroll\n"
        "    for (int d = TN_NK - 1; d >= 0; d--) {\n"
        "        const int64_t q = d ? o / A.kn[d] : 0, c = o - q * A.kn[d];\n"
        "        o = q; yo += c * A.ky[d];\n"
        "#pragma unroll\n"
        "        for (int i = 0; i < TN_NS; i++) f[i] += c * A.kx[i][d];\n"
        "    }\n"
        "}\n"
        "static __device__ __forceinline__ void tn_roff(const tn_args &A, int64_t k, int64_t *g) {\n"
        "#pragma unroll\n"
        "    for (int i = 0; i < TN_NS; i++) g[i] = 0;\n"
        "#pragma unroll\n"
        "    for (int d = TN_NR - 1; d >= 0; d--) {\n"
        "        const int64_t q = d ? k / A.rn[d] : 0, c = k - q * A.rn[d];\n"
        "        k = q;\n"
        "#pragma unroll\n"
        "        for (int i = 0; i < TN_NS; i++) g[i] += c * A.rx[i][d];\n"
        "    }\n"
        "}\n");
}

/* The fold of box elements k in [k0, k1) stepping by `step` from `first`. */
static void tn__cred_emit_loop(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                               int nr, const char *first, const char *step, const char *ind) {
    char reg[TN__CUDA_MAX_OPERANDS][160];
    tn__sb_printf(b, "%sfor (int64_t k = %s; k < k1; k += %s) {\n", ind, first, step);
    if (nr == 1) tn__cred_regs(reg, ns, sd, "k * A.rx[%d][0]");
    else {
        tn__sb_printf(b, "%s    int64_t g[TN_NS]; tn_roff(A, k, g);\n", ind);
        tn__cred_regs(reg, ns, sd, "g[%d]");
    }
    char ind2[32];
    snprintf(ind2, sizeof ind2, "%s    ", ind);
    tn__cred_emit_x(b, p, xt, reg, ind2);
    tn__sb_printf(b, "%s    tn_fold(a, x, k);\n%s}\n", ind, ind);
}

/* ROW's vector path: 16-byte loads of every unit-stride source, four
   vectors in flight per thread, when every run start is aligned. */
static void tn__cred_emit_vec(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd, uint64_t bmask) {
    size_t widest = 1;
    for (int i = 0; i < ns; i++)
        if (!(bmask >> i & 1) && tn_dtype_size(sd[i]) > widest) widest = tn_dtype_size(sd[i]);
    int vec = (int)(16 / widest);
    char reg[TN__CUDA_MAX_OPERANDS][160];
    for (int i = 0; i < ns; i++) {
        if (!(bmask >> i & 1)) continue;
        char lv[64];
        tn__sb_printf(b, "        const %s s%d = ", tn__cuda_ctype(sd[i]), i);
        snprintf(lv, sizeof lv, "in%d[f[%d]]", i, i);
        tn__cuda_load(b, sd[i], lv);
        tn__sb_puts(b, ";\n");
    }
    tn__sb_puts(b, "        int64_t ks = k0;\n        if (((0");
    for (int i = 0; i < ns; i++)
        if (!(bmask >> i & 1))
            tn__sb_printf(b, " | ((unsigned long long)(in%d + f[%d] + k0) & %d)", i, i, (int)(vec * tn_dtype_size(sd[i])) - 1);
    tn__sb_printf(b, ")) == 0) {\n            const int64_t nv = (k1 - k0) / %d;\n", vec);
    for (int i = 0; i < ns; i++)
        if (!(bmask >> i & 1))
            tn__sb_printf(b, "            const tn_v%d *p%d = (const tn_v%d *)(in%d + f[%d] + k0);\n", (int)sd[i], i, (int)sd[i], i, i);
    tn__sb_puts(b, "            int64_t v = lane;\n"
                   "            for (; v + 3 * G < nv; v += 4 * G) {\n");
    for (int i = 0; i < ns; i++)
        if (!(bmask >> i & 1))
            tn__sb_printf(b, "                tn_v%d X%d[4];\n"
                             "#pragma unroll\n"
                             "                for (int u = 0; u < 4; u++) X%d[u] = p%d[v + u * G];\n", (int)sd[i], i, i, i);
    tn__sb_printf(b, "#pragma unroll\n                for (int u = 0; u < 4; u++)\n"
                     "#pragma unroll\n                for (int j = 0; j < %d; j++) {\n"
                     "                    const int64_t k = k0 + (v + u * G) * %d + j;\n", vec, vec);
    for (int i = 0; i < ns; i++) {
        tn__sb t = { 0 };
        char lv[32];
        snprintf(lv, sizeof lv, "X%d[u].v[j]", i);
        if (bmask >> i & 1) tn__sb_printf(&t, "s%d", i); else tn__cuda_load(&t, sd[i], lv);
        snprintf(reg[i], 160, "%s", t.s ? t.s : "0");
        tn__free(t.s);
    }
    tn__cred_emit_x(b, p, xt, reg, "                    ");
    tn__sb_puts(b, "                    tn_fold(a, x, k);\n                }\n            }\n");
    tn__sb_puts(b, "            for (; v < nv; v += G) {\n");
    for (int i = 0; i < ns; i++)
        if (!(bmask >> i & 1)) tn__sb_printf(b, "                const tn_v%d X%d = p%d[v];\n", (int)sd[i], i, i);
    tn__sb_printf(b, "#pragma unroll\n                for (int j = 0; j < %d; j++) {\n"
                     "                    const int64_t k = k0 + v * %d + j;\n", vec, vec);
    for (int i = 0; i < ns; i++) {
        tn__sb t = { 0 };
        char lv[32];
        snprintf(lv, sizeof lv, "X%d.v[j]", i);
        if (bmask >> i & 1) tn__sb_printf(&t, "s%d", i); else tn__cuda_load(&t, sd[i], lv);
        snprintf(reg[i], 160, "%s", t.s ? t.s : "0");
        tn__free(t.s);
    }
    tn__cred_emit_x(b, p, xt, reg, "                    ");
    tn__sb_printf(b, "                    tn_fold(a, x, k);\n                }\n            }\n"
                     "            ks = k0 + nv * %d;\n        }\n", vec);
    /* the tail (or everything, unaligned): scalar, broadcast sources as registers */
    tn__sb_puts(b, "        for (int64_t k = ks + lane; k < k1; k += G) {\n");
    for (int i = 0; i < ns; i++) {
        tn__sb t = { 0 };
        char lv[64];
        snprintf(lv, sizeof lv, "in%d[f[%d] + k]", i, i);
        if (bmask >> i & 1) tn__sb_printf(&t, "s%d", i); else tn__cuda_load(&t, sd[i], lv);
        snprintf(reg[i], 160, "%s", t.s ? t.s : "0");
        tn__free(t.s);
    }
    tn__cred_emit_x(b, p, xt, reg, "            ");
    tn__sb_puts(b, "            tn_fold(a, x, k);\n        }\n");
}

/* Kernel parameters: one struct of int64 fields (no padding), then pointers. */
static void tn__cred_emit_args(tn__sb *b, int nk, int nr, int ns) {
    int nk1 = nk ? nk : 1;
    tn__sb_printf(b, "enum { TN_NK = %d, TN_NR = %d, TN_NS = %d };\n", nk, nr, ns);
    tn__sb_printf(b, "struct tn_args { int64_t M, N, S, C, G, ry; int64_t kn[%d], ky[%d], rn[%d]; int64_t kx[%d][%d], rx[%d][%d]; };\n",
                  nk1, nk1, nr, ns, nk1, ns, nr);
}
static int tn__cred_args_count(int nk, int nr, int ns) { int nk1 = nk ? nk : 1; return 6 + 2 * nk1 + nr + ns * (nk1 + nr); }

static void tn__cred_emit_params(tn__sb *b, int ns, const tn_dtype *sd, tn_dtype yt, bool restrict_) {
    const char *R = restrict_ ? "__restrict__ " : "";
    tn__sb_puts(b, "const tn_args A");
    for (int i = 0; i < ns; i++) tn__sb_printf(b, ", const %s *%sin%d", tn__cuda_stype(sd[i]), R, i);
    tn__sb_printf(b, ", %s *%sy", tn__cuda_stype(yt), R);
}

/* ROW: group of G threads per work item (output o, chunk s). With S > 1 the
   block (G = 256) writes its partial and the last block of o combines. */
static void tn__cred_emit_row(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                              tn_dtype yt, const tn__cred_layout *L) {
    tn__sb_puts(b, "extern \"C\" __global__ void __launch_bounds__(256) tn_red(");
    tn__cred_emit_params(b, ns, sd, yt, true);
    tn__sb_puts(b, ", tn_acc *__restrict__ part, unsigned int *__restrict__ cnt) {\n"
                   "    __shared__ tn_acc sh[8];\n"
                   "    __shared__ bool last;\n"
                   "    const int G = (int)A.G, lane = threadIdx.x & (G - 1);\n"
                   "    const int64_t item = (int64_t)blockIdx.x * (256 / G) + threadIdx.x / G;\n"
                   "    const bool active = item < A.M * A.S;\n"
                   "    int64_t o = 0, s = 0, yo = 0, f[TN_NS];\n"
                   "    tn_acc a; tn_init(a);\n"
                   "    if (active) {\n"
                   "        o = item / A.S; s = item - o * A.S;\n"
                   "        tn_koff(A, o, f, yo);\n"
                   "        const int64_t k0 = s * A.C, k1 = k0 + A.C < A.N ? k0 + A.C : A.N;\n");
    if (L->vec) tn__cred_emit_vec(b, p, xt, ns, sd, L->bmask);
    else tn__cred_emit_loop(b, p, xt, ns, sd, L->nr, "k0 + lane", "G", "        ");
    tn__sb_puts(b, "    }\n"
                   "    if (G == 32) a = tn_wred(a); else a = tn_bred(a, sh);\n"
                   "    if (A.S == 1) { if (active && lane == 0) tn_fin(y + yo, a, A.N); return; }\n"
                   /* split (G == 256, one item per block, active for the whole block) */
                   "    if (threadIdx.x == 0) { part[s * A.M + o] = a; __threadfence(); last = atomicAdd(&cnt[o], 1u) == (unsigned int)A.S - 1; }\n"
                   "    __syncthreads();\n"
                   "    if (!last) return;\n"
                   "    __threadfence();\n"
                   "    tn_init(a);\n"
                   "    for (int64_t j = threadIdx.x; j < A.S; j += 256) { const tn_acc b = tn_ldp(part + j * A.M + o); tn_comb(a, b); }\n"
                   "    a = tn_bred(a, sh);\n"
                   "    if (threadIdx.x == 0) { tn_fin(y + yo, a, A.N); cnt[o] = 0; }\n"
                   "}\n");
}

/* COL: 32 consecutive outputs per block (threadIdx.x & 31), 8 rows of threads
   split chunk blockIdx.y of the box; the last block of a column group
   combines the S partials when S > 1. */
static void tn__cred_emit_col(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                              tn_dtype yt, const tn__cred_layout *L) {
    tn__sb_puts(b, "extern \"C\" __global__ void __launch_bounds__(256) tn_red(");
    tn__cred_emit_params(b, ns, sd, yt, true);
    tn__sb_puts(b, ", tn_acc *__restrict__ part, unsigned int *__restrict__ cnt) {\n"
                   "    __shared__ tn_acc sh[8][33];\n"
                   "    __shared__ bool last;\n"
                   "    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;\n"
                   "    const int64_t o = (int64_t)blockIdx.x * 32 + tx, s = blockIdx.y;\n"
                   "    const bool active = o < A.M;\n"
                   "    int64_t yo = 0, f[TN_NS];\n"
                   "    tn_acc a; tn_init(a);\n"
                   "    if (active) {\n"
                   "        tn_koff(A, o, f, yo);\n"
                   "        const int64_t k0 = s * A.C, k1 = k0 + A.C < A.N ? k0 + A.C : A.N;\n");
    tn__cred_emit_loop(b, p, xt, ns, sd, L->nr, "k0 + ty", "8", "        ");
    tn__sb_puts(b, "    }\n"
                   "    sh[ty][tx] = a;\n"
                   "    __syncthreads();\n"
                   "    if (ty == 0) for (int j = 1; j < 8; j++) tn_comb(a, sh[j][tx]);\n"
                   "    if (A.S == 1) { if (ty == 0 && active) tn_fin(y + yo, a, A.N); return; }\n"
                   "    if (ty == 0 && active) part[s * A.M + o] = a;\n"
                   "    __threadfence();\n"
                   "    __syncthreads();\n"
                   "    if (threadIdx.x == 0) last = atomicAdd(&cnt[blockIdx.x], 1u) == (unsigned int)A.S - 1;\n"
                   "    __syncthreads();\n"
                   "    if (!last) return;\n"
                   "    __threadfence();\n"
                   "    tn_init(a);\n"
                   "    if (active) for (int64_t j = ty; j < A.S; j += 8) { const tn_acc b = tn_ldp(part + j * A.M + o); tn_comb(a, b); }\n"
                   "    sh[ty][tx] = a;\n"
                   "    __syncthreads();\n"
                   "    if (ty == 0) {\n"
                   "        for (int j = 1; j < 8; j++) tn_comb(a, sh[j][tx]);\n"
                   "        if (active) tn_fin(y + yo, a, A.N);\n"
                   "    }\n"
                   "    if (threadIdx.x == 0) cnt[blockIdx.x] = 0;\n"
                   "}\n");
}

/* Softmax pass 2 for box element k: y = exp(x - m) / s, or x - m - log(s);
   NaN when the row has no finite max (as the CPU's 0/0). */
static void tn__cred_emit_smwrite(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                                  tn_dtype yt, int op, const char *ind) {
    char reg[TN__CUDA_MAX_OPERANDS][160], e[160];
    tn__cred_regs(reg, ns, sd, "k * A.rx[%d][0]");
    tn__sb_printf(b, "%sfor (int64_t k = k0; k < k1; k += step) {\n", ind);
    char ind2[32];
    snprintf(ind2, sizeof ind2, "%s    ", ind);
    tn__cred_emit_x(b, p, xt, reg, ind2);
    tn__sb_printf(b, "%s    const AT r = !ok ? (AT)__int_as_float(0x7fc00000) : %s;\n", ind,
                  op == TN_OP_LOG_SOFTMAX ? "(AT)x - a.m - ls" : (tn__cred_acc_dtype(op, xt) == TN_F64 ? "exp((AT)x - a.m) * inv" : "expf((AT)x - a.m) * inv"));
    snprintf(e, sizeof e, "r");
    tn__sb_printf(b, "%s    y[yo + k * A.ry] = ", ind);
    tn__cuda_store(b, e, tn__cred_acc_dtype(op, xt), yt);
    tn__sb_printf(b, ";\n%s}\n", ind);
}

/* Softmax kernels: ROW (a group per row) or COL (a thread per row). No
   __restrict__: y may alias x (each element is read before it is written). */
static void tn__cred_emit_softmax(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                                  tn_dtype yt, int op, const tn__cred_layout *L) {
    bool row = L->kind == TN__CRED_SMROW;
    tn__sb_puts(b, "extern \"C\" __global__ void __launch_bounds__(256) tn_red(");
    tn__cred_emit_params(b, ns, sd, yt, false);
    tn__sb_puts(b, ") {\n"
                   "    __shared__ tn_acc sh[8];\n");
    if (row)
        tn__sb_puts(b, "    const int G = (int)A.G, lane = threadIdx.x & (G - 1);\n"
                       "    const int64_t o = (int64_t)blockIdx.x * (256 / G) + threadIdx.x / G;\n"
                       "    const int64_t k0 = lane, step = G;\n");
    else
        tn__sb_puts(b, "    const int64_t o = (int64_t)blockIdx.x * 256 + threadIdx.x;\n"
                       "    const int64_t k0 = 0, step = 1;\n");
    tn__sb_puts(b, "    const bool active = o < A.M;\n"
                   "    const int64_t k1 = A.N;\n"
                   "    int64_t yo = 0, f[TN_NS];\n"
                   "    tn_acc a; tn_init(a);\n"
                   "    if (active) {\n"
                   "        tn_koff(A, o, f, yo);\n");
    tn__cred_emit_loop(b, p, xt, ns, sd, 1, "k0", "step", "        ");
    tn__sb_puts(b, "    }\n");
    if (row)
        tn__sb_puts(b, "    if (G == 32) a = tn_bcast(tn_wred(a));\n"
                       "    else { a = tn_bred(a, sh); if (threadIdx.x == 0) sh[0] = a; __syncthreads(); a = sh[0]; }\n");
    else
        tn__sb_puts(b, "    (void)sh;\n");
    tn__sb_puts(b, "    if (!active) return;\n"
                   "    const bool ok = isfinite(a.m);\n"
                   "    const AT ls = log(a.s), inv = (AT)1 / a.s;\n"
                   "    (void)ls; (void)inv;\n");
    tn__cred_emit_smwrite(b, p, xt, ns, sd, yt, op, "    ");
    tn__sb_puts(b, "}\n");
}

/* Checks op, dtypes and layout before generating, so bad input is an error. */
static tn_result tn__cred_check(int op, tn_dtype xt, const tn_ew_program *p, const tn__cred_layout *L) {
    if (!tn__cred_is_reduce(op) && !tn__cred_is_softmax(op))
        return tn__err(TN_ERR_INVALID, "tn_cuda reduce codegen: op %d is not a reduction or softmax", op);
    if (p) {
        tn_result r = tn__cuda_check_program(p);
        if (r != TN_OK) return r;
        if (p->n_in < 1 || p->n_in > TN__RED_MAX_SRC)
            return tn__err(TN_ERR_UNSUPPORTED, "tn_cuda reduce codegen: a prologue with %d inputs (1 to %d supported)",
                           p->n_in, TN__RED_MAX_SRC);
        xt = p->out_dtype[0];
    }
    if (!tn__cuda_stype(xt)) return tn__err(TN_ERR_DTYPE, "tn_cuda reduce codegen: input dtype %s", tn_dtype_name(xt));
    bool sm = tn__cred_is_softmax(op);
    bool kind_ok = sm ? (L->kind == TN__CRED_SMROW || L->kind == TN__CRED_SMCOL)
                      : (L->kind == TN__CRED_ROW || L->kind == TN__CRED_COL);
    if (!kind_ok || L->nk < 0 || L->nk > TN_MAX_DIMS || L->nr < 1 || L->nr > TN_MAX_DIMS || (sm && L->nr != 1) ||
        (L->vec && (L->kind != TN__CRED_ROW || L->nr != 1)) || (L->kind == TN__CRED_COL && L->nk < 1))
        return tn__err(TN_ERR_INVALID, "tn_cuda reduce codegen: layout kind %d nk %d nr %d vec %d does not fit %s",
                       L->kind, L->nk, L->nr, (int)L->vec, tn__op_def(op)->name);
    return TN_OK;
}

/* The CUDA C source of the kernel "tn_red" for op over input dtype xt (the
   prologue's output 0 when p is given; its sources are p's inputs). Caller frees. */
static tn_result tn__cuda_reduce_source(int op, tn_dtype xt, const tn_ew_program *p, const tn__cred_layout *L, char **out) {
    *out = NULL;
    tn_result r = tn__cred_check(op, xt, p, L);
    if (r != TN_OK) return r;
    if (p) xt = p->out_dtype[0];
    int ns = p ? p->n_in : 1;
    const tn_dtype *sd = p ? p->in_dtype : &xt;
    tn_dtype yt = tn__reduce_dtype(op, xt);
    static const char *kn[] = { "", "row", "column", "softmax row", "softmax column" };
    tn__sb b = { 0 };
    tn__sb_printf(&b, "/* tensor.h %s kernel: %s of %s -> %s, %s layout, %d kept dims, %d reduced dims%s, %d sources%s */\n",
                  tn__cred_is_softmax(op) ? "softmax" : "reduction", tn__op_def(op)->name, tn_dtype_name(xt),
                  tn_dtype_name(yt), kn[L->kind], L->nk, L->nr, L->vec ? ", vector loads" : "", ns, p ? ", fused prologue" : "");
    tn__cuda_prelude(&b);
    if (p) tn__cuda_emit_eval(&b, p);
    tn__cred_emit_acc(&b, op, xt, yt);
    tn__cred_emit_args(&b, L->nk, L->nr, ns);
    tn__cred_emit_index(&b);
    if (L->vec) {
        size_t widest = 1;
        for (int i = 0; i < ns; i++)
            if (!(L->bmask >> i & 1) && tn_dtype_size(sd[i]) > widest) widest = tn_dtype_size(sd[i]);
        int vec = (int)(16 / widest);
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
            bool used = false;
            for (int i = 0; i < ns; i++) used |= !(L->bmask >> i & 1) && sd[i] == t;
            if (used)
                tn__sb_printf(&b, "struct __align__(%d) tn_v%d { %s v[%d]; };\n", (int)(vec * tn_dtype_size(t)), (int)t,
                              tn__cuda_stype(t), vec);
        }
    }
    switch (L->kind) {
    case TN__CRED_ROW: tn__cred_emit_row(&b, p, xt, ns, sd, yt, L); break;
    case TN__CRED_COL: tn__cred_emit_col(&b, p, xt, ns, sd, yt, L); break;
    default: tn__cred_emit_softmax(&b, p, xt, ns, sd, yt, op, L); break;
    }
    tn__sb_puts(&b, "#undef TN_INF\n");
    if (b.oom) { tn__free(b.s); return tn__err(TN_ERR_OOM, "tn_cuda reduce codegen: out of memory writing the kernel source"); }
    *out = b.s;
    return TN_OK;
}

/* >>cuda_reduce_launch ------------------------------------------------------ */

/* Per node: the functions of the layouts it has met, and the split path's
   scratch (partials, and counters that the kernels leave at zero). */
#define TN__CRED_STATE_KERNELS 8
typedef struct tn__cred_state {
    const tn_ew_program *prog;
    int n;
    struct { tn__cred_layout L; tn__CUfunction fn; int bps; } k[TN__CRED_STATE_KERNELS];
    void *part;
    size_t part_bytes;
    void *cnt;
    size_t cnt_bytes;
} tn__cred_state;

static bool tn__cuda_reduce_supports(const tn_var *node) {
    if (!tn__cred_is_reduce(node->op) && !tn__cred_is_softmax(node->op)) return false;
    if (node->n_out != 1) return false;
    const tn_ew_program *p = (const tn_ew_program *)node->ext;
    if (p) {
        if (p->n_in != node->n_in || p->n_in < 1 || p->n_in > TN__RED_MAX_SRC || p->n_out < 1 ||
            p->n_in + p->n_out > TN__CUDA_MAX_OPERANDS || !tn__cuda_stype(p->out_dtype[0]))
            return false;
    } else if (node->n_in != 1) return false;
    for (int i = 0; i < node->n_in; i++)
        if (!tn__cuda_stype(node->in[i]->type.dtype)) return false;
    return true;
}

static tn_result tn__cuda_reduce_prepare(const tn_var *node, void **state) {
    *state = NULL;
    const tn_ew_program *p = (const tn_ew_program *)node->ext;
    if (!tn__cuda_reduce_supports(node))
        return tn__err(TN_ERR_UNSUPPORTED, "tn_cuda: node %d (%s) has no GPU reduction kernel", node->id, tn__op_def(node->op)->name);
    if (p) {
        tn_result r = tn__cuda_check_program(p);
        if (r != TN_OK) return r;
    }
    tn__cred_state *st = (tn__cred_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_cuda: out of memory preparing node %d", node->id);
    st->prog = p;
    *state = st;
    return TN_OK;
}

static void tn__cuda_reduce_release(void *state) {
    tn__cred_state *st = (tn__cred_state *)state;
    if (!st) return;
    if (st->part) tn__cuda_free(tn__cuda.ordinal, st->part);
    if (st->cnt) tn__cuda_free(tn__cuda.ordinal, st->cnt);
    tn__free(st);
}

/* The function of layout L, and how many of its 256-thread blocks fit on an
   SM at once (from its register count), so a split grid is one full wave. */
static tn_result tn__cred_function(tn__cred_state *st, int op, tn_dtype xt, const tn__cred_layout *L, tn__CUfunction *fn,
                                   int *bps) {
    for (int i = 0; i < st->n; i++) {
        const tn__cred_layout *K = &st->k[i].L;
        if (K->kind == L->kind && K->nk == L->nk && K->nr == L->nr && K->vec == L->vec && K->bmask == L->bmask) {
            *fn = st->k[i].fn;
            *bps = st->k[i].bps;
            return TN_OK;
        }
    }
    char *src = NULL;
    tn_result r = tn__cuda_reduce_source(op, xt, st->prog, L, &src);
    if (r != TN_OK) return r;
    if (tn_get_config()->print_kernels) fprintf(stderr, "tensor.h: kernel source:\n%s\n", src);
    tn__kentry *e;
    r = tn__cuda_kernel_get(src, tn__cuda.arch, tn_get_config()->fast_math, &e);
    tn__free(src);
    if (r == TN_OK) r = tn__cuda_entry_function(e, "tn_red", fn);
    if (r != TN_OK) return r;
    int regs = 0;
    *bps = 8;
    if (tn__cuda.cu.cuFuncGetAttribute(&regs, TN__CU_FUNC_ATTRIBUTE_NUM_REGS, *fn) == TN__CUDA_SUCCESS && regs > 0) {
        int b = 65536 / (((regs + 7) / 8) * 8 * TN__CRED_THREADS);
        *bps = b < 1 ? 1 : b > 8 ? 8 : b;
    }
    int slot = st->n < TN__CRED_STATE_KERNELS ? st->n++ : TN__CRED_STATE_KERNELS - 1;
    st->k[slot].L = *L;
    st->k[slot].fn = *fn;
    st->k[slot].bps = *bps;
    return TN_OK;
}

/* Grows a scratch buffer of the state (contents undefined; counters zeroed). */
static tn_result tn__cred_scratch(void **buf, size_t *have, size_t need, bool zero, const char *who) {
    if (*have >= need) return TN_OK;
    if (*buf) tn__cuda_free(tn__cuda.ordinal, *buf);
    *buf = NULL;
    *have = 0;
    void *p = tn__cuda_alloc(tn__cuda.ordinal, need);
    if (!p) return tn__err(TN_ERR_OOM, "%s: no device memory for %zu bytes of reduction scratch", who, need);
    if (zero) TN__CU_CHECK(tn__cuda.cu.cuMemsetD8Async((tn__CUdeviceptr)(uintptr_t)p, 0, need, tn__cuda.stream), who);
    *buf = p;
    *have = need;
    return TN_OK;
}

static int64_t tn__cred_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t tn__cred_abs(int64_t a) { return a < 0 ? -a : a; }

static tn_result tn__cuda_reduce_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    tn__cred_state *st = (tn__cred_state *)state;
    char lab[96], who[128];
    tn__reduce_label(node, lab, sizeof lab);
    snprintf(who, sizeof who, "Gpu%s (node %d)", lab, node->id);
    tn_result r = tn__cuda_bind();
    if (r != TN_OK) return r;
    const int op = node->op;
    const bool sm = tn__cred_is_softmax(op);
    const tn_ew_program *p = st->prog;
    const int ns = p ? p->n_in : 1;
    for (int i = 0; i <= ns; i++) {
        const tn_array *a = i < ns ? in[i] : out[0];
        if (a->device != tn__cuda.ordinal)
            return tn__err(TN_ERR_DEVICE, "%s: %s lives on %s, not cuda%d", who, i < ns ? "an input" : "the output",
                           a->device == TN_HOST ? "the host" : "another device", tn__cuda.ordinal);
        if (i < ns && p && a->dtype != p->in_dtype[i])
            return tn__err(TN_ERR_DTYPE, "%s: input %d is %s, the prologue expects %s", who, i, tn_dtype_name(a->dtype),
                           tn_dtype_name(p->in_dtype[i]));
    }
    if (!p && node->in[0]->type.dtype != in[0]->dtype)   /* kernels are cached per node for its input dtype */
        return tn__err(TN_ERR_DTYPE, "%s: the input is %s, the node was built for %s", who, tn_dtype_name(in[0]->dtype),
                       tn_dtype_name(node->in[0]->type.dtype));
    const tn_dtype xt = p ? p->out_dtype[0] : in[0]->dtype, yt = tn__reduce_dtype(op, xt);
    if (out[0]->dtype != yt)
        return tn__err(TN_ERR_DTYPE, "%s: the output is %s, the kernel writes %s", who, tn_dtype_name(out[0]->dtype), tn_dtype_name(yt));

    /* the CPU's plan (byte strides, merged dims), then element strides */
    static _Thread_local tn__rplan P;
    P.op = op;
    P.rk = sm ? TN__RK_MAX : tn__rk_of(op);
    const int axis = (int)node->p.i[0];
    if (sm && (axis < 0 || axis >= out[0]->ndim))
        return tn__err(TN_ERR_AXIS, "%s: axis %d out of range for an output of ndim %d", who, axis, out[0]->ndim);
    r = tn__rplan_build(&P, node, in, out[0], sm ? (uint64_t)1 << axis : (uint64_t)node->p.i[0], sm || node->p.i[1] != 0);
    if (r != TN_OK) return r;
    if (P.M == 0 || (sm && P.N == 0)) return TN_OK;
    if (P.N == 0 && tn__rop_needs_nonempty(op)) {
        char sb[128];
        return tn__err(TN_ERR_SHAPE, "%s: zero-size reduction of an input of shape %s: %s has no identity", lab,
                       tn__shape_str(in[0]->ndim, in[0]->shape, sb), tn__op_def(op)->name);
    }
    int64_t ry = 0;
    if (sm && P.N > 1) ry = out[0]->strides[axis];
    int64_t kx[TN__RED_MAX_SRC][TN_MAX_DIMS], rx[TN__RED_MAX_SRC][TN_MAX_DIMS], ky[TN_MAX_DIMS];
    const int64_t yes = (int64_t)tn_dtype_size(yt);
    bool whole = ry % yes == 0;          /* every stride a multiple of its element size */
    for (int s = 0; s < ns; s++) {
        const int64_t es = (int64_t)tn_dtype_size(in[s]->dtype);
        for (int d = 0; d < P.nk; d++) { whole &= P.kx[s][d] % es == 0; kx[s][d] = P.kx[s][d] / es; }
        for (int d = 0; d < P.nr; d++) { whole &= P.rx[s][d] % es == 0; rx[s][d] = P.rx[s][d] / es; }
    }
    for (int d = 0; d < P.nk; d++) { whole &= P.ky[d] % yes == 0; ky[d] = P.ky[d] / yes; }
    ry /= yes;
    if (!whole) return tn__err(TN_ERR_UNSUPPORTED, "%s: an operand has a stride that is not a multiple of its element size", who);

    /* layout class */
    tn__cred_layout L = { 0, P.nk, P.nr, false, 0 };
    bool col = P.nk > 0 && P.N > 1;
    if (col) {
        int64_t ks = 0;
        for (int s = 0; s < ns; s++) ks += tn__cred_abs(kx[s][P.nk - 1]);
        for (int d = 0; d < P.nr; d++) {
            int64_t rs = 0;
            for (int s = 0; s < ns; s++) rs += tn__cred_abs(rx[s][d]);
            if (rs <= ks) col = false;
        }
    }
    L.kind = sm ? (col ? TN__CRED_SMCOL : TN__CRED_SMROW) : (col ? TN__CRED_COL : TN__CRED_ROW);
    if (L.kind == TN__CRED_ROW && P.nr == 1 && P.N > 1) {
        bool unit = false, ok = true;
        for (int s = 0; s < ns; s++) {
            if (rx[s][0] == 1) unit = true;
            else if (rx[s][0] == 0) L.bmask |= (uint64_t)1 << s;
            else ok = false;
        }
        L.vec = ok && unit;
        if (!L.vec) L.bmask = 0;
    }

    tn__CUfunction fn;
    int bps = 8;
    if ((r = tn__cred_function(st, op, xt, &L, &fn, &bps)) != TN_OK) return r;

    /* grid: G threads per item; a long box with few outputs is split in S
       chunks, as many as the blocks that run at once (one wave) */
    const int64_t target = (int64_t)(tn__cuda.sm_count > 0 ? tn__cuda.sm_count : 80) * bps;
    int64_t S = 1, C = P.N, G = 32, gx = 1, gy = 1, slots = 0;
    switch (L.kind) {
    case TN__CRED_ROW:
        if (P.N >= 1024) G = 256;
        if (P.N > 8192 && P.M < target) {
            S = tn__cred_cdiv(target, P.M);
            if (S > tn__cred_cdiv(P.N, 4096)) S = tn__cred_cdiv(P.N, 4096);
            if (S > 1) {
                C = tn__cred_cdiv(tn__cred_cdiv(P.N, S), 256) * 256;   /* chunk starts stay 16-byte aligned */
                S = tn__cred_cdiv(P.N, C);
            }
            if (S > 1) { G = 256; slots = P.M; } else { S = 1; C = P.N; }
        }
        gx = tn__cred_cdiv(P.M * S, TN__CRED_THREADS / G);
        break;
    case TN__CRED_COL:
        gx = tn__cred_cdiv(P.M, 32);
        if (gx < target && P.N > 512) {
            S = tn__cred_cdiv(target, gx);
            if (S > tn__cred_cdiv(P.N, 64)) S = tn__cred_cdiv(P.N, 64);
            C = tn__cred_cdiv(P.N, S);
            S = tn__cred_cdiv(P.N, C);
            if (S > 1) slots = gx; else { S = 1; C = P.N; }
        }
        gy = S;
        break;
    case TN__CRED_SMROW:
        if (P.N >= 1024) G = 256;
        gx = tn__cred_cdiv(P.M, TN__CRED_THREADS / G);
        break;
    default:
        gx = tn__cred_cdiv(P.M, TN__CRED_THREADS);
        break;
    }
    if (gx > 0x7fffffff || gy > 65535)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: %lld outputs are more than one launch takes", who, (long long)P.M);
    if (slots) {
        if ((r = tn__cred_scratch(&st->part, &st->part_bytes, (size_t)(S * P.M) * TN__CRED_ACC_BYTES, false, who)) != TN_OK) return r;
        if ((r = tn__cred_scratch(&st->cnt, &st->cnt_bytes, (size_t)slots * sizeof(unsigned int), true, who)) != TN_OK) return r;
    }
    /* parameters: the tn_args struct, then the pointers */
    int64_t args[6 + 2 * TN_MAX_DIMS + TN_MAX_DIMS + TN__RED_MAX_SRC * 2 * TN_MAX_DIMS];
    const int nk1 = P.nk ? P.nk : 1;
    int n = 0;
    args[n++] = P.M; args[n++] = P.N; args[n++] = S; args[n++] = C; args[n++] = G; args[n++] = ry;
    for (int d = 0; d < nk1; d++) args[n++] = P.nk ? P.kn[d] : 1;
    for (int d = 0; d < nk1; d++) args[n++] = P.nk ? ky[d] : 0;
    for (int d = 0; d < P.nr; d++) args[n++] = P.rn[d];
    for (int s = 0; s < ns; s++) for (int d = 0; d < nk1; d++) args[n++] = P.nk ? kx[s][d] : 0;
    for (int s = 0; s < ns; s++) for (int d = 0; d < P.nr; d++) args[n++] = rx[s][d];
    TN_ASSERT(n == tn__cred_args_count(P.nk, P.nr, ns));
    void *ptrs[TN__RED_MAX_SRC + 3], *params[TN__RED_MAX_SRC + 4];
    int np = 0;
    params[np++] = args;
    for (int s = 0; s < ns; s++) { ptrs[s] = (void *)P.x[s]; params[np++] = &ptrs[s]; }
    ptrs[ns] = out[0]->data; params[np++] = &ptrs[ns];
    if (!sm) {
        ptrs[ns + 1] = st->part; params[np++] = &ptrs[ns + 1];
        ptrs[ns + 2] = st->cnt; params[np++] = &ptrs[ns + 2];
    }
    TN__CU_CHECK(tn__cuda.cu.cuLaunchKernel(fn, (unsigned)gx, (unsigned)gy, 1, TN__CRED_THREADS, 1, 1, 0, tn__cuda.stream,
                                            params, NULL), who);
    if (tn_get_config()->launch_blocking) TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda.stream), who);
    return TN_OK;
}

#endif /* TN__CUDA_REDUCE_INCLUDED */
