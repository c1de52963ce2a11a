/* NVRTC on a machine without a GPU: every reduction and softmax kernel the
   generator (src/cuda_reduce.c.h) can write compiles to a cubin for sm_90:
   each op x each dtype x each layout class (contiguous rows with vector
   loads, a strided N-d box, leading-axis columns, a full reduction)
   x without and with a fused elementwise prologue (also one with a
   broadcast input, one of mixed dtypes with a second output); the widest
   parameter struct fits the 4 KB budget; bad layouts are errors.
   Without libnvrtc the test fails, unless TN_TEST_ALLOW_NO_NVRTC=1, which
   prints a SKIP line and counts nothing. */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "src/cuda_reduce.c.h"     /* no-op once tensor_cuda.h includes it */
#include "harness.h"

static char th_dir[256];

#include "gpu/ew_programs.h"

/* Wraps kernel k in a namespace with a unique name, so one NVRTC run compiles many. */
static void batch_add(tn__sb *batch, const char *src, int k) {
    static const char *def = "void __launch_bounds__(256) tn_red(";
    tn__sb_printf(batch, "namespace k%d {\n", k);
    const char *hit = strstr(src, def);
    if (!hit) tn__sb_puts(batch, src);
    else tn__sb_printf(batch, "%.*svoid __launch_bounds__(256) tn_red_%d(%s", (int)(hit - src), src, k, hit + strlen(def));
    tn__sb_puts(batch, "}\n");
}

static bool is_elf(const void *p, size_t n) { return n > 4 && !memcmp(p, "\x7f" "ELF", 4); }

static bool compile_batch(tn__sb *batch, const char *what) {
    const void *bin;
    size_t n;
    CHECK(!batch->oom, "out of memory building %s", what);
    tn_result r = tn_cuda_compile(batch->s, "sm_90", &bin, &n);
    CHECK(r == TN_OK, "%s: %s", what, tn_last_error());
    if (r == TN_OK) CHECK(is_elf(bin, n), "%s: cubin is not an ELF image", what);
    tn__free(batch->s);
    memset(batch, 0, sizeof *batch);
    return r == TN_OK;
}

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

/* Every layout x prologue kind for op over dtype t, added to the batch. */
static void add_op_dtype(tn__sb *batch, int op, tn_dtype t, int *in_batch) {
    bool sm = tn__cred_is_softmax(op);
    const lay_case *lays = sm ? sm_layouts : red_layouts;
    size_t nl = sm ? sizeof sm_layouts / sizeof sm_layouts[0] : sizeof red_layouts / sizeof red_layouts[0];
    for (int pk = 0; pk < 4; pk++) {
        if (pk == 3 && t != TN_F32) continue;   /* the mixed program: its output dtype varies with t only in output 1 */
        prog_buf pb;
        bool has = build_prologue(&pb, pk, t);
        for (size_t l = 0; l < nl; l++) {
            tn__cred_layout L = lays[l].L;
            if (pk == 2) { if (!L.vec || L.nk == 0) continue; L.bmask = 2; }
            char *src = NULL;
            tn_result r = tn__cuda_reduce_source(op, t, has ? &pb.p : NULL, &L, &src);
            CHECK(r == TN_OK, "codegen %s %s %s prologue %d: %s", tn__op_def(op)->name, tn_dtype_name(t), lays[l].name, pk,
                  tn_last_error());
            if (!src) continue;
            if (L.vec) CHECK(strstr(src, "struct __align__(") && strstr(src, "X0[u] = p0[v + u * G]"), "%s: no vector path", lays[l].name);
            if (!sm) CHECK(strstr(src, "atomicAdd(&cnt[") != NULL, "%s: no split epilogue", lays[l].name);
            if (has) CHECK(strstr(src, "tn_eval(") != NULL, "prologue not called");
            if (L.nr > 1) CHECK(strstr(src, "tn_roff(A, k, g)") != NULL, "%s: N-d box path", lays[l].name);
            batch_add(batch, src, kernels_total++);
            (*in_batch)++;
            tn__free(src);
        }
    }
}

TEST(test_every_reduction_kernel_compiles) {
    for (int op = TN_OP_SUM; op <= TN_OP_LOG_SOFTMAX; op++) {
        tn__sb batch = { 0 };
        int in_batch = 0;
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) add_op_dtype(&batch, op, t, &in_batch);
        char what[96];
        snprintf(what, sizeof what, "%d kernels of %s", in_batch, tn__op_def(op)->name);
        if (in_batch) compile_batch(&batch, what);
        else tn__free(batch.s);
    }
    printf("  %d reduction and softmax kernels compiled for sm_90\n", kernels_total);
    CHECK(kernels_total > 600, "only %d kernels generated", kernels_total);
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
    tn__sb batch = { 0 };
    for (int l = 0; l < 2; l++) {
        char *src = NULL;
        CHECK(tn__cuda_reduce_source(TN_OP_ARGMAX, TN_F32, &wide, &Ls[l], &src) == TN_OK, "%s", tn_last_error());
        if (!src) continue;
        tn__sb_printf(&batch, "namespace w%d {\n%s\n", l, src);
        tn__sb_printf(&batch, "typedef char tn_params_fit[(sizeof(tn_args) + %d * sizeof(void *) <= 4096) ? 1 : -1];\n"
                              "typedef char tn_args_count[(sizeof(tn_args) == %d * 8) ? 1 : -1];\n}\n",
                      TN__RED_MAX_SRC + 3, tn__cred_args_count(Ls[l].nk, Ls[l].nr, TN__RED_MAX_SRC));
        tn__free(src);
    }
    char *p = strstr(batch.s ? batch.s : "", "tn_red(");
    CHECK(p != NULL, "kernel present");
    /* the two kernels share a name inside different namespaces: rename one */
    if (batch.s) {
        char *second = strstr(strstr(batch.s, "namespace w1"), "tn_red(");
        if (second) memcpy(second, "tn_re2(", 7);
    }
    compile_batch(&batch, "widest parameter structs");
}

TEST(test_codegen_errors) {
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

int main(void) {
    tn_config cfg = { .device = TN_DEVICE_CPU };
    tn_init(&cfg);
    if (tn__nvrtc_load(0) != TN_OK) {
        const char *allow = getenv("TN_TEST_ALLOW_NO_NVRTC");
        if (allow && !strcmp(allow, "1")) {
            printf("SKIP test_nvrtc_reduce: %s (TN_TEST_ALLOW_NO_NVRTC=1)\n", tn_last_error());
            (void)th_cur_failed; (void)th_cur_name;
            TH_END();
        }
        fprintf(stderr, "FAIL test_nvrtc_reduce: %s; set TN_TEST_ALLOW_NO_NVRTC=1 to skip on a machine without NVRTC\n", tn_last_error());
        th_failed++;
        TH_END();
    }
    printf("NVRTC %d.%d from %s\n", tn__nvrtc.major, tn__nvrtc.minor, tn__nvrtc.path);
    snprintf(th_dir, sizeof th_dir, "/tmp/tn_nvrtc_reduce_XXXXXX");
    if (!mkdtemp(th_dir)) { perror("mkdtemp"); return 1; }
    cfg.cache_dir = th_dir;
    tn_init(&cfg);
    TH_RUN(test_codegen_errors);
    TH_RUN(test_sources_are_keyed_by_structure);
    TH_RUN(test_widest_parameters_fit);
    TH_RUN(test_every_reduction_kernel_compiles);
    tn_shutdown();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", th_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", th_dir);
    TH_END();
}
