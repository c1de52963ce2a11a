/* NVRTC on a machine without a GPU: every reduction and softmax kernel the
   generator (the >>cuda_reduce section) can write compiles to a cubin for sm_90:
   each op x each dtype x each layout class (contiguous rows with vector
   loads, a strided N-d box, leading-axis columns, a full reduction)
   x without and with a fused elementwise prologue (also one with a
   broadcast input, one of mixed dtypes with a second output); the widest
   parameter struct fits the 4 KB budget; bad layouts are errors. The
   kernels of one op compile as one program (see "Cost" below); a failing
   program is searched kernel by kernel, and the culprit's NVRTC log and
   numbered source printed.
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
   compile with -Ofc=max (NVRTC 12.8+: fast compile): the full table to PTX
   (every syntax, type and name error), and each op and dtype in its first
   layout through ptxas too (inline asm, parameters, resources;
   tests/nvrtc_env.h): ~25 s of CPU instead of ~150 s. A sample of each op
   also compiles through tn_cuda_compile with the options the back end uses. */

/* One generated kernel, described for a failure report. */
typedef struct kern { char *src; char what[128]; } kern;
typedef struct kbatch { kern *k; int n, cap; bool oom; } kbatch;

static void kb_add(kbatch *b, char *src, const char *what) {
    if (b->n == b->cap) {
        int cap = b->cap ? 2 * b->cap : 64;
        kern *k = (kern *)tn__realloc(b->k, (size_t)cap * sizeof *k);
        if (!k) { b->oom = true; tn__free(src); return; }
        b->k = k;
        b->cap = cap;
    }
    b->k[b->n].src = src;
    snprintf(b->k[b->n].what, sizeof b->k[b->n].what, "%s", what);
    b->n++;
}

static void kb_free(kbatch *b) {
    for (int i = 0; i < b->n; i++) tn__free(b->k[i].src);
    tn__free(b->k);
    memset(b, 0, sizeof *b);
}


/* Kernel k's source inside namespace k<k>, its entry renamed tn_red_<k>
   (extern "C" names are global: two tn_red would clash). */
static const char *entry_def = "__global__ void __launch_bounds__(256) tn_red(";

static bool wrap_kernel(tn__sb *out, const char *src, int k) {
    const char *hit = strstr(src, entry_def);
    if (!hit || strstr(hit + 1, entry_def)) return false;
    size_t pre = (size_t)(hit - src) + strlen(entry_def) - 1;
    tn__sb_printf(out, "namespace k%d {\n%.*s_%d%s}\n", k, (int)pre, src, k, src + pre);
    return true;
}

/* Compiles each kernel alone to name the ones a failing batch holds; prints
   (when asked) the log and numbered source of each. Returns how many failed;
   *first is the index of the first. */
static int find_bad_kernels(const kbatch *b, bool to_cubin, bool print, int *first) {
    int bad = 0;
    *first = -1;
    for (int i = 0; i < b->n; i++) {
        char *log = NULL;
        if (th_nvrtc_compile(b->k[i].src, to_cubin, &log) != TN_OK) {
            if (!bad++) *first = i;
            if (print) {
                char what[200];
                snprintf(what, sizeof what, "FAILED kernel: %s", b->k[i].what);
                tn__cuda_keep_log(what, log, b->k[i].src);
            }
        }
        tn__free(log);
    }
    return bad;
}

/* Compiles the kernels of b as one program, to a cubin or to PTX
   (tests/nvrtc_env.h); on failure finds and reports the kernel(s) to blame.
   Frees b. */
static bool compile_kernels(kbatch *b, bool to_cubin, const char *what) {
    CHECK(!b->oom, "out of memory collecting %s", what);
    tn__sb text = { 0 };
    bool wrapped = true;
    for (int i = 0; i < b->n; i++)
        if (!wrap_kernel(&text, b->k[i].src, i)) {
            CHECK(false, "%s: the source has no single \"%s\"", b->k[i].what, entry_def);
            wrapped = false;
        }
    CHECK(!text.oom, "out of memory building %s", what);
    bool ok = false;
    if (wrapped && !text.oom) {
        char *log = NULL;
        ok = th_nvrtc_compile(text.s, to_cubin, &log) == TN_OK;
        if (!ok) {
            int first;
            int bad = find_bad_kernels(b, to_cubin, true, &first);
            CHECK(bad == 0, "%s: %d kernel(s) fail to compile, the first: %s (NVRTC log and source printed above)", what,
                  bad, first >= 0 ? b->k[first].what : "");
            CHECK(bad > 0, "%s: the batch fails but every kernel compiles alone (namespace wrapping?): %.2000s", what,
                  log ? log : "no log");
        }
        tn__free(log);
    }
    tn__free(text.s);
    kb_free(b);
    return ok;
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

/* Every layout x prologue kind for op over dtype t, added to the batch;
   the first layout to the sample too: with no prologue, and with each
   prologue kind for float16 (inline asm is in the float16 conversions). */
static void add_op_dtype(kbatch *batch, kbatch *sample, int op, tn_dtype t) {
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
            if (!sampled && (pk == 0 || t == TN_F16)) {
                size_t len = strlen(src) + 1;
                char *copy = (char *)tn__malloc(len);
                if (copy) memcpy(copy, src, len);
                else sample->oom = true;
                if (copy) kb_add(sample, copy, what);
                sampled = true;
            }
            kb_add(batch, src, what);
            kernels_total++;
        }
    }
}

TEST(test_every_reduction_kernel_compiles) {
    int compiled = 0, assembled = 0, programs = 0;
    for (int op = TN_OP_SUM; op <= TN_OP_LOG_SOFTMAX; op++) {
        kbatch batch = { 0 }, sample = { 0 };
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) add_op_dtype(&batch, &sample, op, t);
        char what[96];
        snprintf(what, sizeof what, "the %d kernels of %s", batch.n, tn__op_def(op)->name);
        int n = batch.n, ns = sample.n;
        if (compile_kernels(&batch, false, what)) compiled += n;
        snprintf(what, sizeof what, "the %d kernels of %s in one layout each", ns, tn__op_def(op)->name);
        if (compile_kernels(&sample, true, what)) assembled += ns;
        programs += 2;
    }
    printf("  %d of %d reduction and softmax kernels compiled to PTX, %d of them for sm_90, in %d programs (%s)\n", compiled,
           kernels_total, assembled, programs, th_fast_opts[1] ? th_fast_opts[1] : "default options");
    CHECK(kernels_total > 600, "only %d kernels generated", kernels_total);
}

TEST(test_production_options_sample) {
    /* one kernel per op (float32, no prologue; the layout class rotates, so
       each class is met) with the options of tn_cuda_compile */
    tn__sb text = { 0 };
    int k = 0;
    for (int op = TN_OP_SUM; op <= TN_OP_LOG_SOFTMAX; op++) {
        int i = op - TN_OP_SUM;
        const tn__cred_layout *L = tn__cred_is_softmax(op) ? &sm_layouts[i % 3].L : &red_layouts[i % 4].L;
        char *src = NULL;
        CHECK(tn__cuda_reduce_source(op, TN_F32, NULL, L, &src) == TN_OK, "%s: %s", tn__op_def(op)->name, tn_last_error());
        if (src) CHECK(wrap_kernel(&text, src, k++), "%s: entry", tn__op_def(op)->name);
        tn__free(src);
    }
    CHECK(!text.oom, "out of memory");
    const void *bin;
    size_t n;
    tn_result r = text.oom ? TN_ERR_OOM : tn_cuda_compile(text.s, "sm_90", &bin, &n);
    CHECK(r == TN_OK && is_elf(bin, n), "%d kernels with the back end's options: %s", k, tn_last_error());
    tn__free(text.s);
}

/* A broken kernel makes its batch fail, and the search names it: once
   broken in the C++ text (front end), once in an inline asm (ptxas). */
TEST(test_a_broken_kernel_is_named) {
    static const struct { const char *from, *to; } breaks[2] = {
        { "typedef float AT;", "typedef flaot AT;" },
        { "cvt.f32.f16", "cvt.f32.f61" },
    };
    for (int b = 0; b < 2; b++) {
        kbatch batch = { 0 };
        for (int i = 0; i < 3; i++) {
            char *src = NULL;
            CHECK(tn__cuda_reduce_source(TN_OP_SUM, TN_F16, NULL, &red_layouts[i].L, &src) == TN_OK, "%s", tn_last_error());
            if (src && i == 1) {
                char *hit = strstr(src, breaks[b].from);
                CHECK(hit != NULL, "no \"%s\" to break", breaks[b].from);
                if (hit) memcpy(hit, breaks[b].to, strlen(breaks[b].to));
            }
            if (src) kb_add(&batch, src, red_layouts[i].name);
        }
        tn__sb text = { 0 };
        for (int i = 0; i < batch.n; i++) wrap_kernel(&text, batch.k[i].src, i);
        char *log = NULL;
        CHECK(text.s && th_fast_compile(text.s, &log) == TN_ERR_DEVICE, "break %d: the batch compiled", b);
        CHECK(log && strstr(log, "error"), "break %d: log %s", b, log ? log : "(none)");
        int first;
        CHECK(find_bad_kernels(&batch, true, false, &first) == 1 && first == 1, "break %d: blamed kernel %d", b, first);
        tn__free(log);
        tn__free(text.s);
        kb_free(&batch);
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
    tn__sb text = { 0 };
    for (int l = 0; l < 2; l++) {
        char *src = NULL;
        CHECK(tn__cuda_reduce_source(TN_OP_ARGMAX, TN_F32, &wide, &Ls[l], &src) == TN_OK, "%s", tn_last_error());
        if (!src) continue;
        CHECK(wrap_kernel(&text, src, l), "entry of layout %d", l);
        /* reopens the kernel's namespace: its tn_args */
        tn__sb_printf(&text, "namespace k%d {\n"
                             "typedef char tn_params_fit[(sizeof(tn_args) + %d * sizeof(void *) <= 4096) ? 1 : -1];\n"
                             "typedef char tn_args_count[(sizeof(tn_args) == %d * 8) ? 1 : -1];\n}\n",
                      l, TN__RED_MAX_SRC + 3, tn__cred_args_count(Ls[l].nk, Ls[l].nr, TN__RED_MAX_SRC));
        tn__free(src);
    }
    CHECK(!text.oom && text.s && strstr(text.s, "tn_params_fit"), "sources built");
    const void *bin;
    size_t n;
    tn_result r = text.s ? tn_cuda_compile(text.s, "sm_90", &bin, &n) : TN_ERR_OOM;
    CHECK(r == TN_OK && is_elf(bin, n), "widest parameter structs: %s", tn_last_error());
    tn__free(text.s);
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

int main(void) {
    th_nvrtc_start("test_nvrtc_reduce", th_dir, sizeof th_dir);
    TH_RUN(test_reduce_codegen_errors);
    TH_RUN(test_sources_are_keyed_by_structure);
    TH_RUN(test_widest_parameters_fit);
    TH_RUN(test_a_broken_kernel_is_named);
    TH_RUN(test_production_options_sample);
    TH_RUN(test_every_reduction_kernel_compiles);
    th_nvrtc_finish(th_dir);
    TH_END();
}
