/* NVRTC on a machine without a GPU: every reduction and softmax kernel the
   generator (the >>cuda_reduce section) can write compiles to a cubin for sm_90:
   each op x each dtype x each layout class (contiguous rows with vector
   loads, a strided N-d box, leading-axis columns, a full reduction)
   x without and with a fused elementwise prologue (also one with a
   broadcast input, one of mixed dtypes with a second output); the widest
   parameter struct fits the 4 KB budget; bad layouts are errors. The
   kernels of one op compile as one program (see "Cost" below); a failing
   program is searched kernel by kernel, and the culprit named, its NVRTC
   log and numbered source printed (tests/nvrtc_env.h).
   Without libnvrtc the test fails, unless TN_TEST_ALLOW_NO_NVRTC=1, which
   skips it (tests/nvrtc_env.h). */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"
#include "nvrtc_env.h"

static char th_dir[256];

#include "gpu/ew_programs.h"

/* Cost. NVRTC takes ~50 ms per program but ~0.2 s (up to 0.7 s for
   logsumexp) per reduction kernel at the default optimisation, most of it in
   NVVM and ptxas optimising code whose speed this test never measures. So
   the kernels of one op share a program (each in its own namespace), and
   compile with -Ofc=max (NVRTC 12.8+: fast compile): each op and dtype in
   its first layout through ptxas to a cubin (inline asm, parameters,
   resources; tests/nvrtc_env.h), the rest of the table to PTX (every
   syntax, type and name error): ~25 s of CPU instead of ~150 s. A sample
   of each op also compiles through tn_cuda_compile with the options the
   back end uses. */

typedef struct lay_case { tn__cred_layout L; const char *name; } lay_case;
static const lay_case red_layouts[] = {
    { { TN__CRED_ROW, 1, 1, true, 0 }, "contiguous rows, vector loads" },
    { { TN__CRED_ROW, 2, 2, false, 0 }, "strided N-d box" },
    { { TN__CRED_COL, 2, 1, false, 0 }, "leading axis (columns)" },
    { { TN__CRED_ROW, 0, 1, true, 0 }, "full, vector loads" },
};
static const lay_case sm_layouts[] = {
    { { TN__CRED_SMROW, 1, 1, false, 0 }, "softmax rows" },
    { { TN__CRED_SMROW, 0, 1, false, 0 }, "softmax one row" },
    { { TN__CRED_SMCOL, 2, 1, false, 0 }, "softmax columns" },
};

/* Prologue kinds: 0 none, 1 a*b of dtype t, 2 the same with b broadcast
   along the box (vector layouts: bmask bit 1), 3 mixed dtypes with two outputs. */
static bool build_prologue(prog_buf *b, int kind, tn_dtype t) {
    if (kind == 1 || kind == 2) return build_op_program(b, TN_OP_MUL, t);
    if (kind == 3) {
        /* exp(float(h)) * f, where(f > 0.5, ., -inf) as float32; also stored as t */
        const tn_dtype in[2] = { TN_F16, TN_F32 };
        pb_init(b, 2, in);
        int h = pb_as(b, 0, TN_F32);
        int e = pb_op(b, TN_OP_EXP, TN_F32, TN_F32, h, -1, -1);
        int m = pb_op(b, TN_OP_MUL, TN_F32, TN_F32, e, 1, -1);
        int half = pb_imm(b, TN_F32, 0.5), ninf = pb_imm(b, TN_F32, -INFINITY);
        int gt = pb_op(b, TN_OP_GT, TN_BOOL, TN_F32, 1, half, -1);
        int w = pb_op(b, TN_OP_WHERE, TN_F32, TN_F32, gt, m, ninf);
        pb_out(b, w, TN_F32);
        pb_out(b, w, t);
        return true;
    }
    return false;
}

static int kernels_total;

/* Every layout x prologue kind for op over dtype t: the first layout to
   the sample (with no prologue, and with each prologue kind for float16:
   inline asm is in the float16 conversions), the others to the batch. */
static void add_op_dtype(th_kbatch *batch, th_kbatch *sample, int op, tn_dtype t) {
    bool sm = tn__cred_is_softmax(op);
    const lay_case *lays = sm ? sm_layouts : red_layouts;
    size_t nl = sm ? sizeof sm_layouts / sizeof sm_layouts[0] : sizeof red_layouts / sizeof red_layouts[0];
    for (int pk = 0; pk < 4; pk++) {
        if (pk == 3 && t != TN_F32) continue;   /* the mixed program: its output dtype varies with t only in output 1 */
        prog_buf pb;
        bool has = build_prologue(&pb, pk, t), sampled = false;
        for (size_t l = 0; l < nl; l++) {
            tn__cred_layout L = lays[l].L;
            if (pk == 2) { if (!L.vec || L.nk == 0) continue; L.bmask = 2; }
            char *src = NULL;
            char what[128];
            snprintf(what, sizeof what, "%s of %s, %s, prologue %d", tn__op_def(op)->name, tn_dtype_name(t), lays[l].name, pk);
            tn_result r = tn__cuda_reduce_source(op, t, has ? &pb.p : NULL, &L, &src);
            CHECK(r == TN_OK, "codegen %s: %s", what, tn_last_error());
            if (!src) continue;
            if (L.vec) CHECK(strstr(src, "struct __align__(") && strstr(src, "X0[u] = p0[v + u * G]"), "%s: no vector path", what);
            if (!sm) CHECK(strstr(src, "atomicAdd(&cnt[") != NULL, "%s: no split epilogue", what);
            if (has) CHECK(strstr(src, "tn_eval(") != NULL, "%s: prologue not called", what);
            if (L.nr > 1) CHECK(strstr(src, "tn_roff(A, k, g)") != NULL, "%s: N-d box path", what);
            th_kb_add(!sampled && (pk == 0 || t == TN_F16) ? sample : batch, src, "%s", what);
            sampled = true;
            tn__free(src);
            kernels_total++;
        }
    }
}

TEST(test_every_reduction_kernel_compiles) {
    int compiled = 0, assembled = 0, programs = 0;
    for (int op = TN_OP_SUM; op <= TN_OP_LOG_SOFTMAX; op++) {
        th_kbatch batch = { 0 }, sample = { 0 };
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) add_op_dtype(&batch, &sample, op, t);
        char what[96];
        snprintf(what, sizeof what, "the kernels of %s", tn__op_def(op)->name);
        int n = batch.n, ns = sample.n;
        if (th_kb_compile(&batch, TH_PTX, what)) compiled += n;
        snprintf(what, sizeof what, "the kernels of %s in one layout each", tn__op_def(op)->name);
        if (th_kb_compile(&sample, TH_CUBIN, what)) assembled += ns;
        programs += 2;
    }
    printf("  %d of %d reduction and softmax kernels compiled: %d for sm_90, %d to PTX, in %d programs (%s)\n",
           compiled + assembled, kernels_total, assembled, compiled, programs, th_fast_opts[1] ? th_fast_opts[1] : "default options");
    CHECK(kernels_total > 600, "only %d kernels generated", kernels_total);
}

TEST(test_production_options_sample) {
    /* one kernel per op (float32, no prologue; the layout class rotates, so
       each class is met) with the options of tn_cuda_compile */
    th_kbatch batch = { 0 };
    for (int op = TN_OP_SUM; op <= TN_OP_LOG_SOFTMAX; op++) {
        int i = op - TN_OP_SUM;
        const tn__cred_layout *L = tn__cred_is_softmax(op) ? &sm_layouts[i % 3].L : &red_layouts[i % 4].L;
        char *src = NULL;
        CHECK(tn__cuda_reduce_source(op, TN_F32, NULL, L, &src) == TN_OK, "%s: %s", tn__op_def(op)->name, tn_last_error());
        if (src) th_kb_add(&batch, src, "%s of float32, %s", tn__op_def(op)->name, tn__cred_is_softmax(op) ? sm_layouts[i % 3].name : red_layouts[i % 4].name);
        tn__free(src);
    }
    th_kb_compile(&batch, TH_BACKEND, "one kernel of each op");
}

/* A broken kernel makes its batch fail, and the search names it: once
   broken in the C++ text (front end), once in an inline asm (ptxas). */
TEST(test_a_broken_kernel_is_named) {
    static const struct { const char *from, *to; } breaks[2] = {
        { "typedef float AT;", "typedef flaot AT;" },
        { "cvt.f32.f16", "cvt.f32.f61" },
    };
    for (int b = 0; b < 2; b++) {
        th_kbatch batch = { 0 };
        for (int i = 0; i < 3; i++) {
            char *src = NULL;
            CHECK(tn__cuda_reduce_source(TN_OP_SUM, TN_F16, NULL, &red_layouts[i].L, &src) == TN_OK, "%s", tn_last_error());
            /* a broken prelude is no longer the batch's: the kernel keeps its own, in its namespace */
            char *hit = src && i == 1 ? strstr(src, breaks[b].from) : NULL;
            CHECK(!src || i != 1 || hit, "no \"%s\" to break", breaks[b].from);
            if (hit) memcpy(hit, breaks[b].to, strlen(breaks[b].to));
            if (src) th_kb_add(&batch, src, "%s", red_layouts[i].name);
            tn__free(src);
        }
        fprintf(stderr, "(an NVRTC error report is expected below)\n");
        int first, bad = th_kb_run(&batch, TH_CUBIN, &first);
        CHECK(bad == 1 && first == 1, "break %d: blamed %d kernel(s), the first %d", b, bad, first);
        CHECK(strstr(tn_cuda_last_compile_log(), "FAILED kernel: strided N-d box\n") != NULL, "break %d: the report names it: %.200s", b,
              tn_cuda_last_compile_log());
        th_kb_free(&batch);
    }
}

TEST(test_widest_parameters_fit) {
    /* 16 prologue sources, 7 kept and 1 reduced dims (or 1 and 7): the args
       struct and the pointers stay inside cuLaunchKernel's 4 KB */
    static tn_dtype ind[TN__RED_MAX_SRC];
    static tn_ew_instr ins[TN__RED_MAX_SRC];
    static int32_t oreg[1];
    static tn_dtype od[1] = { TN_F32 };
    int reg = 0;
    for (int i = 0; i < TN__RED_MAX_SRC; i++) ind[i] = TN_F32;
    for (int i = 1; i < TN__RED_MAX_SRC; i++) {
        ins[i - 1] = (tn_ew_instr){ .op = TN_OP_ADD, .dtype = TN_F32, .in_dtype = TN_F32, .a = reg, .b = i, .c = -1 };
        reg = TN__RED_MAX_SRC + i - 1;
    }
    oreg[0] = reg;
    tn_ew_program wide = { .n_in = TN__RED_MAX_SRC, .in_dtype = ind, .n_instr = TN__RED_MAX_SRC - 1, .instr = ins,
                           .n_out = 1, .out_reg = oreg, .out_dtype = od };
    const tn__cred_layout Ls[2] = { { TN__CRED_ROW, 7, 1, false, 0 }, { TN__CRED_COL, 1, 7, false, 0 } };
    th_kbatch batch = { 0 };
    for (int l = 0; l < 2; l++) {
        char *src = NULL;
        CHECK(tn__cuda_reduce_source(TN_OP_ARGMAX, TN_F32, &wide, &Ls[l], &src) == TN_OK, "%s", tn_last_error());
        if (!src) continue;
        tn__sb text = TN__SB_INIT;    /* the kernel, then checks of its tn_args */
        tn__sb_printf(&text, "%s"
                             "typedef char tn_params_fit[(sizeof(tn_args) + %d * sizeof(void *) <= 4096) ? 1 : -1];\n"
                             "typedef char tn_args_count[(sizeof(tn_args) == %d * 8) ? 1 : -1];\n",
                      src, TN__RED_MAX_SRC + 3, tn__cred_args_count(Ls[l].nk, Ls[l].nr, TN__RED_MAX_SRC));
        CHECK(!text.oom, "out of memory");
        if (!text.oom) th_kb_add(&batch, text.s, "argmax of 16 sources, layout %d", l);
        tn__free(text.s);
        tn__free(src);
    }
    CHECK(batch.n == 2, "sources built");
    th_kb_compile(&batch, TH_BACKEND, "widest parameter structs");
}

TEST(test_reduce_codegen_errors) {
    char *src = NULL;
    tn__cred_layout bad = { TN__CRED_SMROW, 1, 1, false, 0 };
    CHECK(tn__cuda_reduce_source(TN_OP_SUM, TN_F32, NULL, &bad, &src) == TN_ERR_INVALID && !src, "softmax layout for a sum");
    CHECK_ERR(TN_ERR_INVALID, "Sum");
    tn__cred_layout vcol = { TN__CRED_COL, 1, 1, true, 0 };
    CHECK(tn__cuda_reduce_source(TN_OP_MAX, TN_F32, NULL, &vcol, &src) == TN_ERR_INVALID, "vector loads in columns");
    tn__cred_layout sm2 = { TN__CRED_SMROW, 1, 2, false, 0 };
    CHECK(tn__cuda_reduce_source(TN_OP_SOFTMAX, TN_F32, NULL, &sm2, &src) == TN_ERR_INVALID, "softmax over two dims");
    tn__cred_layout ok = { TN__CRED_ROW, 1, 1, false, 0 };
    CHECK(tn__cuda_reduce_source(TN_OP_DOT, TN_F32, NULL, &ok, &src) == TN_ERR_INVALID, "not a reduction");
    CHECK_ERR(TN_ERR_INVALID, "not a reduction");
    /* a malformed prologue is the elementwise checker's error */
    prog_buf pb;
    const tn_dtype f[1] = { TN_F32 };
    pb_init(&pb, 1, f);
    int r = pb_op(&pb, TN_OP_ADD, TN_F32, TN_F32, 0, 7, -1);
    pb_out(&pb, r, TN_F32);
    CHECK(tn__cuda_reduce_source(TN_OP_SUM, TN_F32, &pb.p, &ok, &src) == TN_ERR_INVALID, "bad prologue register");
    CHECK_ERR(TN_ERR_INVALID, "reads register 7");
}

TEST(test_sources_are_keyed_by_structure) {
    /* the same structure gives the same text (one cache entry), and the
       source holds no size: sizes travel in tn_args */
    tn__cred_layout L = { TN__CRED_ROW, 1, 1, true, 0 };
    char *a = NULL, *b = NULL;
    tn__cuda_reduce_source(TN_OP_SUM, TN_F32, NULL, &L, &a);
    tn__cuda_reduce_source(TN_OP_SUM, TN_F32, NULL, &L, &b);
    CHECK(a && b && !strcmp(a, b), "deterministic source");
    CHECK(a && strstr(a, "A.N") && strstr(a, "A.C"), "sizes are parameters");
    tn__free(a);
    tn__free(b);
}

/* Epilogues (a reduction's result through an elementwise program before it
   is stored, tensor.h >>fuse_epilogue): every reduction that takes a program,
   float16/32/64 input, in every layout, (a) alone: `e - r * 0.1` in the
   epilogue input's dtype (float16 read in float32), with the folded input as
   it is (an identity prologue), (b) after the prologue a*b, its output cast
   to int32 (a change of dtype), (c) with the epilogue input broadcast along
   the box in the vector layouts (its bmask bit). */
TEST(test_epilogue_kernels) {
    static const int ops[] = { TN_OP_SUM, TN_OP_PROD, TN_OP_MEAN, TN_OP_MAX, TN_OP_MIN, TN_OP_LOGSUMEXP };
    const tn_dtype ts[3] = { TN_F16, TN_F32, TN_F64 };
    th_kbatch batch = { 0 }, sample = { 0 };
    int n = 0;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
        for (int ti = 0; ti < 3; ti++) {
            tn_dtype t = ts[ti], rt = tn__reduce_dtype(ops[o], t);
            for (int kind = 0; kind < 2; kind++) {
                prog_buf pro, epi;
                if (kind == 0) { pb_init(&pro, 1, &t); pb_out(&pro, 0, t); }
                else build_op_program(&pro, TN_OP_MUL, t);
                const tn_dtype ein[2] = { rt, t };
                tn_dtype ct = t == TN_F16 ? TN_F32 : t;
                pb_init(&epi, 2, ein);
                int r = pb_as(&epi, 0, ct), e = pb_as(&epi, 1, ct);
                int m = pb_op(&epi, TN_OP_MUL, ct, ct, r, pb_imm(&epi, ct, 0.1), -1);
                int y = pb_op(&epi, TN_OP_SUB, ct, ct, e, m, -1);
                pb_out(&epi, y, kind ? TN_I32 : t);
                pro.p.epi = &epi.p;
                CHECK(kind || tn__ew_program_is_identity(&pro.p), "the pass-through prologue is not an identity");
                int nf = pro.p.n_in;
                for (size_t l = 0; l < sizeof red_layouts / sizeof red_layouts[0]; l++) {
                    tn__cred_layout L = red_layouts[l].L;
                    if (L.vec) L.bmask = (uint64_t)1 << nf;
                    char *src = NULL, what[128];
                    snprintf(what, sizeof what, "%s of %s, %s, epilogue %d", tn__op_def(ops[o])->name, tn_dtype_name(t), red_layouts[l].name, kind);
                    CHECK(tn__cuda_reduce_source(ops[o], t, &pro.p, &L, &src) == TN_OK, "codegen %s: %s", what, tn_last_error());
                    if (!src) continue;
                    CHECK(strstr(src, "tn_epilogue(tn_rval(a, A.N), f, in") && strstr(src, "TN_FIN(y + yo)") &&
                          (kind == 1) == (strstr(src, "tn_eval(") != NULL), "%s: the epilogue or prologue is not called", what);
                    th_kb_add(l == 0 && o == 0 ? &sample : &batch, src, "%s", what);
                    tn__free(src);
                    n++;
                }
            }
        }
    }
    /* an epilogue after softmax, or reading another dtype than the result's, is an error */
    prog_buf pro, epi;
    const tn_dtype f32 = TN_F32, f64[2] = { TN_F64, TN_F32 };
    pb_init(&pro, 1, &f32); pb_out(&pro, 0, TN_F32);
    pb_init(&epi, 2, f64); pb_out(&epi, 0, TN_F64);
    pro.p.epi = &epi.p;
    char *src = NULL;
    CHECK(tn__cuda_reduce_source(TN_OP_SUM, TN_F32, &pro.p, &red_layouts[0].L, &src) == TN_ERR_INVALID && !src, "a float64 epilogue after a float32 sum");
    CHECK_ERR(TN_ERR_INVALID, "an epilogue reading float64 after Sum");
    printf("  %d reductions with an epilogue generated\n", n);
    CHECK(n == 6 * 3 * 2 * 4, "%d kernels", n);
    th_kb_compile(&sample, TH_CUBIN, "reductions with an epilogue, one for sm_90");
    th_kb_compile(&batch, TH_PTX, "reductions with an epilogue");
}

int main(void) {
    th_nvrtc_start("test_nvrtc_reduce", th_dir, sizeof th_dir);
    TH_RUN(test_reduce_codegen_errors);
    TH_RUN(test_sources_are_keyed_by_structure);
    TH_RUN(test_epilogue_kernels);
    TH_RUN(test_widest_parameters_fit);
    TH_RUN(test_a_broken_kernel_is_named);
    TH_RUN(test_production_options_sample);
    TH_RUN(test_every_reduction_kernel_compiles);
    th_nvrtc_finish(th_dir);
    TH_END();
}
