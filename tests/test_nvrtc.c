/* NVRTC on a machine without a GPU: every kernel the code generator writes
   for the elementwise table (each op, each dtype it accepts, contiguous,
   contiguous-with-scalar and strided layouts), fused multi-output programs,
   casts, immediates and float16 programs compile: a sample of each table
   (every op and dtype in one layout) to a cubin for sm_90 (and one for
   sm_80), through ptxas, the rest to PTX, in batches (tests/nvrtc_env.h:
   a kernel that fails is named); user kernels (raw modules, custom ops' sources) compile
   after their prelude (float16 helpers, strided operands), and their
   errors name the user's lines. The disk cache has its own test (test_kcache.c).
   Without libnvrtc the test fails, unless TN_TEST_ALLOW_NO_NVRTC=1, which
   skips it (tests/nvrtc_env.h). */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"
#include "nvrtc_env.h"

static char th_dir[256];        /* a fresh cache_dir for this run */

#include "gpu/ew_programs.h"
#include "gpu/ew_fused.h"
#include "logreg_step.h"

static const tn__cuda_layout layouts[] = {
    { TN__CUDA_CONTIG, 0, 0 },
    { TN__CUDA_CONTIG, 0, 1 },          /* input 0 is a broadcast scalar */
    { TN__CUDA_STRIDED, 3, 0 },
    { TN__CUDA_STRIDED, 1, 0 },          /* the last: only in the fused tests (compile time) */
};
#define N_OP_LAYOUTS 3


/* ---- tests ---------------------------------------------------------------- */

TEST(test_every_op_dtype_layout) {
    int kernels = 0;
    th_kbatch sample = { 0 };   /* each op and dtype's first layout, one program to a cubin (a program costs ~50 ms) */
    for (int op = TN_OP_NONE + 1; op <= TN_OP_CAST; op++) {
        /* the op's other kernels to PTX; the first op's, all of them, with the back end's options */
        th_kbatch batch = { 0 };
        const tn_ew_info *e = tn__ew_info(op);
        bool first_op = op == TN_OP_NONE + 1;
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
            prog_buf b;
            if (!build_op_program(&b, op, t)) continue;
            bool sampled = false;
            for (size_t l = 0; l < N_OP_LAYOUTS; l++) {
                if (layouts[l].scalar_in && e->arity < 2) continue;
                char *src = NULL;
                tn_result r = tn__cuda_ew_source(&b.p, &layouts[l], &src);
                CHECK(r == TN_OK, "codegen %s %s layout %zu: %s", e->name, tn_dtype_name(t), l, tn_last_error());
                if (!src) continue;
                if (layouts[l].kind == TN__CUDA_CONTIG)
                    CHECK(strstr(src, "struct __align__(") && strstr(src, "nv = n /"), "%s %s: no vector path", e->name, tn_dtype_name(t));
                th_kb_add(sampled || first_op ? &batch : &sample, src, "%s of %s, layout %zu", e->name, tn_dtype_name(t), l);
                sampled = true;
                kernels++;
                free(src);
            }
        }
        char what[64];
        snprintf(what, sizeof what, "kernels of %s", e->name);
        th_kb_compile(&batch, first_op ? TH_BACKEND : TH_PTX, what);
    }
    th_kb_compile(&sample, TH_CUBIN, "every op and dtype in one layout");
    printf("  %d elementwise kernels compiled: one layout of each op and dtype for sm_90, the others to PTX (%s)\n", kernels,
           th_fast_opts[1] ? th_fast_opts[1] : "default options");
    CHECK(kernels > 450, "only %d kernels generated", kernels);
}

TEST(test_casts) {
    th_kbatch batch = { 0 }, sample = { 0 };   /* the first layout of each cast with the back end's options, the others to PTX */
    int k = 0;
    for (tn_dtype s = TN_BOOL; s < TN_DTYPE_COUNT; s = (tn_dtype)(s + 1))
        for (tn_dtype d = TN_BOOL; d < TN_DTYPE_COUNT; d = (tn_dtype)(d + 1)) {
            prog_buf b;
            pb_init(&b, 1, &s);
            int r = pb_op(&b, TN_OP_CAST, d, s, 0, -1, -1);
            pb_out(&b, r, d);
            pb_out(&b, 0, d);                 /* and the input stored as d directly */
            for (size_t l = 0; l < N_OP_LAYOUTS; l++) {
                if (layouts[l].scalar_in) continue;
                char *src = NULL;
                CHECK(tn__cuda_ew_source(&b.p, &layouts[l], &src) == TN_OK, "cast %s->%s: %s", tn_dtype_name(s),
                      tn_dtype_name(d), tn_last_error());
                if (src) th_kb_add(l == 0 ? &sample : &batch, src, "cast %s->%s, layout %zu", tn_dtype_name(s), tn_dtype_name(d), l);
                k += src != NULL;
                free(src);
            }
        }
    th_kb_compile(&batch, TH_PTX, "casts");
    th_kb_compile(&sample, TH_BACKEND, "casts, one layout");
    CHECK(k == 6 * 6 * 2, "%d cast kernels", k);
}

/* A kernel broken in its body makes its batch fail, and the search names
   it (the prelude sits once at the batch's top: the break is the kernel's own). */
TEST(test_a_broken_ew_kernel_is_named) {
    prog_buf b;
    build_op_program(&b, TN_OP_ADD, TN_F32);
    th_kbatch batch = { 0 };
    for (size_t l = 0; l < N_OP_LAYOUTS; l++) {
        char *src = NULL;
        CHECK(tn__cuda_ew_source(&b.p, &layouts[l], &src) == TN_OK, "%s", tn_last_error());
        char *hit = src ? strstr(src, "gridDim.x") : NULL;
        CHECK(hit != NULL, "layout %zu: no gridDim.x to break", l);
        if (hit && l == 1) memcpy(hit, "gridDim.w", 9);
        if (src) th_kb_add(&batch, src, "add of float32, layout %zu", l);
        free(src);
    }
    fprintf(stderr, "(an NVRTC error report is expected below)\n");
    int first, bad = th_kb_run(&batch, TH_PTX, &first);
    CHECK(bad == 1 && first == 1, "blamed %d kernel(s), the first %d", bad, first);
    CHECK(strstr(tn_cuda_last_compile_log(), "FAILED kernel: add of float32, layout 1\n") != NULL, "the report names it: %.200s",
          tn_cuda_last_compile_log());
    CHECK(strstr(tn_cuda_last_compile_log(), "gridDim.w") != NULL, "the log and source are printed");
    th_kb_free(&batch);
}

TEST(test_fused_multi_output) {
    prog_buf b;
    build_fused(&b);
    th_kbatch batch = { 0 };
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        char *src = NULL;
        CHECK(tn__cuda_ew_source(&b.p, &layouts[l], &src) == TN_OK, "fused layout %zu: %s", l, tn_last_error());
        if (!src) continue;
        CHECK(strstr(src, "0x7ff0000000000000") != NULL, "the inf immediate is written as its bits");
        CHECK(strstr(src, "*o4 = ") != NULL, "five outputs stored");
        th_kb_add(&batch, src, "fused multi-output, layout %zu", l);
        free(src);
    }
    th_kb_compile(&batch, TH_BACKEND, "fused multi-output");
    /* the same source, for another architecture, and with fast math */
    char *src = NULL;
    tn__cuda_ew_source(&b.p, &layouts[0], &src);
    const void *bin;
    size_t n;
    CHECK(src && tn_cuda_compile(src, "sm_80", &bin, &n) == TN_OK && is_elf(bin, n), "sm_80: %s", tn_last_error());
    tn_config cfg = *tn_get_config();
    cfg.fast_math = true;
    tn_init(&cfg);
    tn_cuda_cache_stats s0, s1;
    tn_cuda_get_cache_stats(&s0);
    CHECK(src && tn_cuda_compile(src, "sm_90", &bin, &n) == TN_OK, "fast_math: %s", tn_last_error());
    tn_cuda_get_cache_stats(&s1);
    CHECK(s1.compiles == s0.compiles + 1, "fast_math is part of the key: a new compile");
    cfg.fast_math = false;
    tn_init(&cfg);
    free(src);
}

/* The kernels the optimizer fuses for issue 16's training step
   (tests/logreg_step.h), data shared and x, y passed: a bool output alone,
   two float outputs reading a count of shape (1,), 1/n computed inside, in
   every layout; the bias's sum with b's update as its epilogue, and the
   weight's product with w's update as its. */
TEST(test_logreg_step_kernels) {
    enum { NR = 8, FEATS = 5 };
    tn_array *X = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ NR, FEATS }, 0, 1, 1), *Y = tn_array_zeros(TN_F32, 1, (int64_t[]){ NR });
    tn_array *W0 = tn_array_rand_normal(TN_F32, 1, (int64_t[]){ FEATS }, 0, 1, 2);
    th_kbatch batch = { 0 };
    int composites = 0, epilogues = 0;
    for (int passed = 0; passed < 2; passed++) {
        lr_step m;
        CHECK(lr_build(&m, passed, X, Y, W0), "compile (%s): %s", passed ? "data passed" : "data shared", tn_last_error());
        for (int s = 0; m.f && s < m.f->n_steps; s++) {
            const tn_var *v = m.f->steps[s].node;
            const tn_ew_program *rp = v->op == TN_OP_SUM ? (const tn_ew_program *)v->ext : NULL;
            if (rp && rp->epi) {       /* the bias's sum with b's update as its epilogue: a full reduction */
                const tn__cred_layout L = { TN__CRED_ROW, 0, 1, true, (uint64_t)1 << rp->n_in };
                char *src = NULL;
                CHECK(tn__cuda_reduce_source(v->op, rp->out_dtype[0], rp, &L, &src) == TN_OK, "codegen, step %d: %s", s, tn_last_error());
                if (src) th_kb_add(&batch, src, "logistic step (%s), step %d, the sum and its epilogue", passed ? "data passed" : "data shared", s);
                free(src);
                epilogues++;
            }
            if (v->op == TN_OP_GEMV && v->ext) {      /* x^T g + 0.02 w with w's update as its epilogue */
                char *src = tn__cuda_gemv_epi_source(v->type.dtype, (const tn_ew_program *)v->ext);
                CHECK(src != NULL, "codegen, step %d: %s", s, tn_last_error());
                if (src) th_kb_add(&batch, src, "logistic step (%s), step %d, the gemv and its epilogue", passed ? "data passed" : "data shared", s);
                tn__free(src);
                epilogues++;
            }
            if (v->op != TN_OP_COMPOSITE) continue;
            composites++;
            for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
                char *src = NULL;
                CHECK(tn__cuda_ew_source((const tn_ew_program *)v->ext, &layouts[l], &src) == TN_OK, "codegen, step %d layout %zu: %s",
                      s, l, tn_last_error());
                if (src) th_kb_add(&batch, src, "logistic step (%s), step %d, layout %zu", passed ? "data passed" : "data shared", s, l);
                free(src);
            }
        }
        lr_free(&m);
    }
    CHECK(composites == 3 && epilogues == 4, "%d fused kernels and %d products and reductions with an epilogue in the two steps, want 3 and 4",
          composites, epilogues);
    th_kb_compile(&batch, TH_PTX, "the logistic regression step's kernels");
    tn_array_free(X); tn_array_free(Y); tn_array_free(W0);
}

/* Draws fused into elementwise kernels (a TN_OP_RANDOM instruction): every
   distribution and dtype beside float16, float32 and float64 operands (8,
   4 and 2 elements a thread: a Philox block shared by a vector, or drawn
   per element when the block is wider than the vector), two draws in one
   kernel, in every layout (the seed and call count broadcast, or not). */
TEST(test_fused_draw_kernels) {
    const struct { int dist; tn_dtype t; } cases[] = {
        { TN_RAND_UNIFORM, TN_F16 }, { TN_RAND_UNIFORM, TN_F32 }, { TN_RAND_UNIFORM, TN_F64 },
        { TN_RAND_NORMAL, TN_F16 }, { TN_RAND_NORMAL, TN_F32 }, { TN_RAND_NORMAL, TN_F64 },
        { TN_RAND_BERNOULLI, TN_BOOL }, { TN_RAND_BERNOULLI, TN_I32 }, { TN_RAND_BERNOULLI, TN_F16 }, { TN_RAND_BERNOULLI, TN_F64 },
        { TN_RAND_RANDINT, TN_I32 }, { TN_RAND_RANDINT, TN_I64 },
    };
    const tn_dtype xs[3] = { TN_F16, TN_F32, TN_F64 };
    th_kbatch batch = { 0 };
    int programs = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int k = 0; k < 3; k++) {
            tn_graph *g = tn_graph_new();
            tn_rstream *s = tn_random_stream(g, 3);
            tn_var *x = tn_matrix(g, "x", xs[k]);
            double a = cases[c].dist == TN_RAND_RANDINT ? -4 : cases[c].dist == TN_RAND_BERNOULLI ? 0.25 : 1;
            tn_var *d = tn_random_like(s, (tn_rdist)cases[c].dist, cases[c].t, x, a, 9);
            tn_var *y = tn_add(tn_cast(d, xs[k]), x);
            if (k == 2) y = tn_mul(y, tn_random_like(s, TN_RAND_NORMAL, TN_F32, x, 0, 1));
            tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
            CHECK(f, "case %zu: %s", c, tn_last_error());
            for (int st = 0; f && st < f->n_steps; st++) {
                const tn_var *v = f->steps[st].node;
                const tn_ew_program *p = v->op == TN_OP_COMPOSITE ? (const tn_ew_program *)v->ext : NULL;
                if (!p || !p->rand) continue;
                programs++;
                uint64_t scalars = 0;
                for (int i = 0; i < p->n_in; i++) scalars |= (uint64_t)(p->in_dtype[i] == TN_I64) << i;
                const tn__cuda_layout L[4] = { { TN__CUDA_CONTIG, 0, 0 }, { TN__CUDA_CONTIG, 0, scalars },
                                               { TN__CUDA_STRIDED, 2, 0 }, { TN__CUDA_STRIDED, 1, 0 } };
                for (int l = 0; l < 4; l++) {
                    char *src = NULL;
                    CHECK(tn__cuda_ew_source(p, &L[l], &src) == TN_OK, "case %zu: %s", c, tn_last_error());
                    if (src) {
                        CHECK(strstr(src, "tn__philox10") && strstr(src, "tn_re"), "case %zu: a draw in the kernel", c);
                        th_kb_add(&batch, src, "draw %zu (%s) beside %s, layout %d", c, tn_dtype_name(cases[c].t), tn_dtype_name(xs[k]), l);
                    }
                    free(src);
                }
            }
            tn_function_free(f);
            tn_graph_free(g);
        }
    }
    CHECK(programs == 3 * (int)(sizeof cases / sizeof cases[0]), "%d fused programs with draws", programs);
    th_kb_compile(&batch, TH_PTX, "fused draws");
}

TEST(test_float16_programs) {
    /* all-half: y = sigmoid(a) * b + sqrt(|c|), rounded to half after each op */
    const tn_dtype in[3] = { TN_F16, TN_F16, TN_F16 };
    prog_buf b;
    pb_init(&b, 3, in);
    int sg = pb_op(&b, TN_OP_SIGMOID, TN_F16, TN_F16, 0, -1, -1);
    int mu = pb_op(&b, TN_OP_MUL, TN_F16, TN_F16, sg, 1, -1);
    int ab = pb_op(&b, TN_OP_ABS, TN_F16, TN_F16, 2, -1, -1);
    int sq = pb_op(&b, TN_OP_SQRT, TN_F16, TN_F16, ab, -1, -1);
    int y = pb_op(&b, TN_OP_ADD, TN_F16, TN_F16, mu, sq, -1);
    int y64 = pb_as(&b, y, TN_F64);
    pb_out(&b, y, TN_F16);
    pb_out(&b, y64, TN_F16);          /* float64 register stored as half: one rounding */
    th_kbatch batch = { 0 };
    for (size_t l = 0; l < sizeof layouts / sizeof layouts[0]; l++) {
        char *src = NULL;
        CHECK(tn__cuda_ew_source(&b.p, &layouts[l], &src) == TN_OK, "f16 layout %zu: %s", l, tn_last_error());
        if (!src) continue;
        CHECK(strstr(src, "tn_rh(") && strstr(src, "tn_h2f(") && strstr(src, "tn_d2h("), "half conversions used");
        if (layouts[l].kind == TN__CUDA_CONTIG)
            CHECK(strstr(src, "__align__(16) tn_v4 { unsigned short v[8]; }") != NULL, "8 halves per 16-byte access");
        th_kb_add(&batch, src, "float16 program, layout %zu", l);
        free(src);
    }
    th_kb_compile(&batch, TH_BACKEND, "float16");
}

TEST(test_codegen_errors) {
    prog_buf b;
    const tn_dtype f[1] = { TN_F32 };
    pb_init(&b, 1, f);
    int r = pb_op(&b, TN_OP_ADD, TN_F32, TN_F32, 0, 5, -1);     /* register 5 does not exist */
    pb_out(&b, r, TN_F32);
    char *src = NULL;
    CHECK(tn__cuda_ew_source(&b.p, &layouts[0], &src) == TN_ERR_INVALID && !src, "bad register rejected");
    CHECK_ERR(TN_ERR_INVALID, "reads register 5");

    pb_init(&b, 1, f);
    r = pb_op(&b, TN_OP_EXP, TN_F32, TN_F64, 0, -1, -1);        /* reads a float register as double */
    pb_out(&b, r, TN_F32);
    CHECK(tn__cuda_ew_source(&b.p, &layouts[0], &src) == TN_ERR_INVALID, "compute type mismatch rejected");
    CHECK_ERR(TN_ERR_INVALID, "instruction 0 (exp)");

    /* wider than the parameter budget: an error naming the limit */
    int max = tn_cuda_max_fused_operands();
    CHECK(max >= 32 && max < 64, "max fused operands %d", max);
    static tn_dtype many[64];
    static int32_t outs[64];
    static tn_dtype outd[64];
    for (int i = 0; i < 64; i++) { many[i] = TN_F32; outs[i] = 0; outd[i] = TN_F32; }
    tn_ew_program wide = { .n_in = max, .in_dtype = many, .n_instr = 0, .instr = NULL, .n_out = 1, .out_reg = outs, .out_dtype = outd };
    CHECK(tn__cuda_ew_source(&wide, &layouts[2], &src) == TN_ERR_UNSUPPORTED, "too wide rejected");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "tn_cuda_max_fused_operands");
    wide.n_in = max - 1;                /* exactly at the limit: fits, compiles, and the struct stays in 4 KB */
    CHECK(tn__cuda_ew_source(&wide, &(tn__cuda_layout){ TN__CUDA_STRIDED, TN_MAX_DIMS, 0 }, &src) == TN_OK, "%s", tn_last_error());
    if (src) {
        tn__sb text = TN__SB_INIT;
        tn__sb_puts(&text, src);
        tn__sb_printf(&text, "typedef char tn_params_fit[(sizeof(tn_args) + %d * sizeof(void *) <= 4096) ? 1 : -1];\n", max);
        th_kbatch batch = { 0 };
        if (!text.oom) th_kb_add(&batch, text.s, "widest strided kernel");
        CHECK(!text.oom, "out of memory");
        th_kb_compile(&batch, TH_BACKEND, "widest strided kernel");
        tn__free(text.s);
        free(src);
    }
}

/* Every gather/scatter mode x dtype at several ranks and index counts, and
   every sort, compile; the kernel's plan struct is the host's, byte for byte. */
TEST(test_index_and_sort_kernels) {
    static const int shapes[][2] = { { 0, 1 }, { 1, 0 }, { 2, 1 }, { 3, 2 }, { TN_MAX_DIMS, TN_MAX_DIMS } };
    const size_t ns = sizeof shapes / sizeof *shapes;
    static char src[16384];
    int kernels = 0;
    for (int mode = 0; mode < 3; mode++) {
        /* the smallest and widest plans to a cubin (mode 0: with the back end's options), the others to PTX */
        th_kbatch batch = { 0 }, sample = { 0 };
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1))
            for (size_t q = 0; q < ns; q++) {
                int n = tn__index_cuda_source(mode, t, shapes[q][0], shapes[q][1], src, sizeof src);
                CHECK(n > 0 && (size_t)n < sizeof src, "mode %d %s: no source", mode, tn_dtype_name(t));
                if (n <= 0 || (size_t)n >= sizeof src) continue;
                if (q == 0) snprintf(src + n, sizeof src - (size_t)n, "typedef char tn_fits[sizeof(tn_ip) == %zu ? 1 : -1];\n", sizeof(tn__cuda_iplan));
                th_kb_add(q == 0 || q + 1 == ns ? &sample : &batch, src, "index mode %d of %s, %d dims, %d indices", mode,
                          tn_dtype_name(t), shapes[q][0], shapes[q][1]);
                kernels++;
            }
        for (size_t q = 0; mode < 2 && q < sizeof shapes / sizeof *shapes; q++) {   /* gathers and sets of 16-byte units */
            if (shapes[q][0] < 1) continue;
            int n = tn__index_cuda_source_wide(mode, shapes[q][0], shapes[q][1], src, sizeof src);
            CHECK(n > 0 && (size_t)n < sizeof src, "mode %d, 16-byte units: no source", mode);
            if (n > 0 && (size_t)n < sizeof src) th_kb_add(&batch, src, "index mode %d of 16-byte units, %d dims, %d indices", mode, shapes[q][0], shapes[q][1]);
            kernels += n > 0;
        }
        char what[64];
        snprintf(what, sizeof what, "index kernels of mode %d", mode);
        th_kb_compile(&batch, TH_PTX, what);
        th_kb_compile(&sample, mode == 0 ? TH_BACKEND : TH_CUBIN, what);
    }
    th_kbatch batch = { 0 }, sample = { 0 };   /* ascending to a cubin, descending to PTX */
    for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1))
        for (int desc = 0; desc < 2; desc++) {
            int n = tn__sort_cuda_source(t, desc, src, sizeof src);
            CHECK(n > 0 && (size_t)n < sizeof src, "sort %s: no source", tn_dtype_name(t));
            if (n > 0 && (size_t)n < sizeof src) th_kb_add(desc ? &batch : &sample, src, "sort of %s, %s", tn_dtype_name(t), desc ? "descending" : "ascending");
            kernels += n > 0;
        }
    th_kb_compile(&batch, TH_PTX, "sort kernels, descending");
    th_kb_compile(&sample, TH_CUBIN, "sort kernels, ascending");
    CHECK(tn__index_cuda_source(3, TN_F32, 1, 1, NULL, 0) < 0 && tn__index_cuda_source_wide(2, 1, 1, NULL, 0) < 0 &&
          tn__index_cuda_source_wide(0, 0, 1, NULL, 0) < 0 && tn__sort_cuda_source(TN_DTYPE_NONE, false, NULL, 0) < 0, "no kernel: -1");
    printf("  %d index and sort kernels compiled, a sample of them for sm_90, the others to PTX\n", kernels);
}

/* The float kernels of a source function with a geometry struct (st, host
   size host_size): one per float dtype, none for the others, the struct's
   size checked against the host's; float16's through ptxas (its
   conversions' inline asm), the others to PTX. */
static void geo_kernels(int (*source)(tn_dtype, char *, size_t), const char *st, size_t host_size, const char *what) {
    static char src[8192];
    th_kbatch batch = { 0 }, f16 = { 0 };
    int kernels = 0;
    for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
        int n = source(t, src, sizeof src);
        CHECK((n > 0) == (t == TN_F16 || t == TN_F32 || t == TN_F64) && n < (int)sizeof src, "%s %s: %d", what, tn_dtype_name(t), n);
        if (n <= 0 || n >= (int)sizeof src) continue;
        snprintf(src + n, sizeof src - (size_t)n, "typedef char tn_fits[sizeof(%s) == %zu ? 1 : -1];\n", st, host_size);
        th_kb_add(t == TN_F16 ? &f16 : &batch, src, "%s of %s", what, tn_dtype_name(t));
        kernels++;
    }
    th_kb_compile(&f16, TH_CUBIN, what);
    th_kb_compile(&batch, TH_PTX, what);
    printf("  %d %s compiled (float16's to a cubin for sm_90, the others to PTX)\n", kernels, what);
}

/* im2col and col2im (convolutions) for every float dtype; the geometry
   struct the kernels take is the host's, byte for byte. */
TEST(test_conv_kernels) { geo_kernels(tn__conv_cuda_source, "tn_cg", sizeof(tn__cgeo_dev), "im2col/col2im kernels"); }

/* Direct pooling (max, average, any spatial rank: one kernel per float
   dtype); the geometry struct it takes is the host's, byte for byte. */
TEST(test_pool_kernels) { geo_kernels(tn__pool_cuda_source, "tn_pg", sizeof(tn__pgeo_dev), "pooling kernels"); }

/* Pooling's gradient (max, average: one kernel per float dtype), on POOL's geometry struct. */
TEST(test_pool_grad_kernels) { geo_kernels(tn__pool_grad_cuda_source, "tn_pg", sizeof(tn__pgeo_dev), "pooling gradient kernels"); }

/* The kernels of a source function for float32 and float64 only (none for
   the other dtypes), to PTX; with st, the struct st the kernel takes is the
   host's (host_size bytes). */
static void f32_f64_kernels(int (*source)(tn_dtype, char *, size_t), const char *st, size_t host_size, const char *what) {
    static char src[4096];
    th_kbatch batch = { 0 };
    int kernels = 0;
    for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
        int n = source(t, src, sizeof src);
        CHECK((n > 0) == (t == TN_F32 || t == TN_F64) && n < (int)sizeof src, "%s %s: %d", what, tn_dtype_name(t), n);
        if (n <= 0 || n >= (int)sizeof src) continue;
        if (st) snprintf(src + n, sizeof src - (size_t)n, "typedef char tn_fits[sizeof(%s) == %zu ? 1 : -1];\n", st, host_size);
        th_kb_add(&batch, src, "%s of %s", what, tn_dtype_name(t));
        kernels++;
    }
    th_kb_compile(&batch, TH_PTX, what);
    CHECK(kernels == 2, "%s: %d kernels", what, kernels);
}

/* The small matrix-vector kernel the device back end runs in place of
   cuBLAS's gemv for small products. */
TEST(test_gemv_kernels) { f32_f64_kernels(tn__gemv_cuda_source, NULL, 0, "small gemv kernels"); }

/* The GPU scan's kernel that adds a gradient step's sums at once; the pair
   table it takes is the host's, byte for byte. */
TEST(test_scan_acc_kernels) { f32_f64_kernels(tn__cuda_acc_n_source, "tn_accn", sizeof(tn__cuda_accn), "gradient sum kernels"); }

TEST(test_compile_error_reports_log_and_source) {
    const void *bin;
    size_t n;
    fprintf(stderr, "(an NVRTC error report is expected below)\n");
    tn_result r = tn_cuda_compile("extern \"C\" __global__ void k() {\n    int x = undefined_name;\n}\n", "sm_90", &bin, &n);
    CHECK(r == TN_ERR_DEVICE, "bad source fails");
    CHECK_ERR(TN_ERR_DEVICE, "undefined_name");
    CHECK_ERR(TN_ERR_DEVICE, "tn_cuda_last_compile_log");
    const char *log = tn_cuda_last_compile_log();
    CHECK(strstr(log, "    2 |     int x = undefined_name;") != NULL, "numbered source in the log: %.300s", log);
    CHECK(strstr(log, "NVRTC_ERROR_COMPILATION") != NULL, "NVRTC error name in the log");
    r = tn_cuda_compile("extern \"C\" __global__ void k() {}\n", "sm_1", &bin, &n);
    CHECK(r == TN_ERR_DEVICE, "bad architecture fails");
}


/* ---- user kernels: the prelude, raw modules, custom ops' signatures -------- */

/* The seed's kernel, as PyCUDA's SourceModule compiles it. */
static const char *UK_MULTIPLY_THEM =
    "extern \"C\" __global__ void multiply_them(float *dest, const float *a, const float *b) {\n"
    "    const int i = threadIdx.x;\n"
    "    dest[i] = a[i] * b[i];\n"
    "}\n";

/* A TN_CUSTOM_ABI_STRIDED kernel: out = p.v[0] * x (x any layout), float32. */
static const char *UK_STRIDED =
    "extern \"C\" __global__ void scale_strided(tn_operand x, tn_operand out, tn_params p) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i >= out.size) return;\n"
    "    const float *xd = (const float *)x.data;\n"
    "    ((float *)out.data)[i] = (float)(p.n > 0 ? p.v[0] : 1.0) * xd[tn_offset(x, i)];\n"
    "}\n";

/* float16 through the prelude's helpers, generic over the storage type. */
static const char *UK_HALF =
    "template <class T> __device__ void twice(const T *x, T *y, long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i >= n) return;\n"
    "    work_dtype(T) w = load_w(x[i]);\n"
    "    y[i] = write_w<T>(w * 2);\n"
    "}\n"
    "extern \"C\" __global__ void twice_f16(const tn_half *x, tn_half *y, long long n) { twice(x, y, n); }\n"
    "extern \"C\" __global__ void twice_f32(const float *x, float *y, long long n) { twice(x, y, n); }\n"
    "extern \"C\" __global__ void twice_f64(const double *x, double *y, long long n) { twice(x, y, n); }\n";

TEST(test_user_kernels_nvrtc) {
    tn_cuda_cache_stats before, after;
    const char *srcs[3] = { UK_MULTIPLY_THEM, UK_STRIDED, UK_HALF };
    for (int i = 0; i < 3; i++) {
        tn_cuda_module *m = tn_cuda_module_new(srcs[i], "--gpu-architecture=sm_90");
        CHECK(m != NULL, "module %d: %s", i, tn_last_error());
        /* what a custom op's prepare compiles: the same prelude */
        char *full = tn__cuda_user_source(srcs[i]);
        const void *bin = NULL;
        size_t n = 0;
        CHECK(full && tn_cuda_compile(full, "sm_80", &bin, &n) == TN_OK && is_elf(bin, n), "custom op source %d for sm_80: %s", i,
              tn_last_error());
        tn__free(full);
        if (i == 0) {   /* no GPU here (device=cpu): the kernel cannot be had, and says why */
            CHECK(tn_cuda_module_get(m, "multiply_them") == NULL, "no kernel without a GPU");
            CHECK_ERR(TN_ERR_UNSUPPORTED, "tn_cuda_module_get: kernel 'multiply_them' needs a GPU to run on: device=cpu");
        }
        tn_cuda_module_free(m);
    }
    /* a second module of the same source is a cache hit */
    tn_cuda_get_cache_stats(&before);
    tn_cuda_module *m = tn_cuda_module_new(UK_MULTIPLY_THEM, "-arch=sm_90");
    tn_cuda_get_cache_stats(&after);
    CHECK(m && after.mem_hits == before.mem_hits + 1 && after.compiles == before.compiles, "cache hit (%llu -> %llu hits)",
          (unsigned long long)before.mem_hits, (unsigned long long)after.mem_hits);
    tn_cuda_module_free(m);
    /* other options are part of the key: a new compile */
    m = tn_cuda_module_new(UK_MULTIPLY_THEM, "-arch sm_90 --use_fast_math");
    tn_cuda_get_cache_stats(&before);
    CHECK(m && before.compiles == after.compiles + 1, "options in the key: %s", m ? "" : tn_last_error());
    tn_cuda_module_free(m);
    tn_cuda_module_free(NULL);
}

TEST(test_user_kernel_errors_nvrtc) {
    fprintf(stderr, "(an NVRTC error report is expected below)\n");
    tn_cuda_module *m = tn_cuda_module_new("extern \"C\" __global__ void k(float *p) {\n    p[0] = no_such_thing;\n}\n",
                                           "--gpu-architecture=sm_90");
    CHECK(m == NULL, "bad source");
    CHECK_ERR(TN_ERR_DEVICE, "tn_cuda_module_new: NVRTC");
    CHECK_ERR(TN_ERR_DEVICE, "no_such_thing");
    const char *log = tn_cuda_last_compile_log();
    CHECK(strstr(log, "(2): error") != NULL, "the log counts the user's lines, not the prelude's: %.400s", log);
    CHECK(strstr(log, "no_such_thing") != NULL, "the log: %.300s", log);
    CHECK(tn_cuda_module_new(UK_MULTIPLY_THEM, NULL) == NULL, "no architecture and no GPU");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "tn_cuda_module_new: no usable GPU (device=cpu: CUDA not used)");
    CHECK_ERR(TN_ERR_UNSUPPORTED, "--gpu-architecture=sm_90");
    CHECK(tn_cuda_module_new(NULL, NULL) == NULL, "NULL source");
    CHECK_ERR(TN_ERR_NULL, "src is NULL");
    CHECK(tn_cuda_module_new(UK_MULTIPLY_THEM, "-arch") == NULL, "dangling -arch");
    CHECK_ERR(TN_ERR_INVALID, "no architecture");
    char longopt[400];
    memset(longopt, 'x', sizeof longopt - 1);
    longopt[sizeof longopt - 1] = 0;
    CHECK(tn_cuda_module_new(UK_MULTIPLY_THEM, longopt) == NULL, "options too long");
    CHECK_ERR(TN_ERR_INVALID, "399 characters long (at most 256)");
    fprintf(stderr, "(an NVRTC error report is expected below)\n");
    CHECK(tn_cuda_module_new(UK_MULTIPLY_THEM, "-arch=sm_90 --no-such-option") == NULL, "unknown option");
    CHECK_ERR(TN_ERR_DEVICE, "with options '--no-such-option'");
    tn_cuda_arg a = tn_cuda_arg_i32(3);
    CHECK(tn_cuda_launch(NULL, (tn_cuda_dim3){ 1, 1, 1 }, (tn_cuda_dim3){ 1, 1, 1 }, 0, 1, &a) == TN_ERR_NULL, "no kernel");
    CHECK_ERR(TN_ERR_NULL, "tn_cuda_launch: kernel is NULL");
    CHECK(tn_cuda_module_get(NULL, "k") == NULL, "no module");
    CHECK_ERR(TN_ERR_NULL, "module or name is NULL");
    CHECK(a.kind == TN_CUDA_ARG_I32 && a.v.i32 == 3 && tn_cuda_arg_f64(2.5).v.f64 == 2.5 && tn_cuda_arg_out(NULL).kind == TN_CUDA_ARG_OUT,
          "argument helpers");
}

int main(void) {
    th_nvrtc_start("test_nvrtc", th_dir, sizeof th_dir);
    TH_RUN(test_every_op_dtype_layout);
    TH_RUN(test_casts);
    TH_RUN(test_a_broken_ew_kernel_is_named);
    TH_RUN(test_fused_multi_output);
    TH_RUN(test_logreg_step_kernels);
    TH_RUN(test_float16_programs);
    TH_RUN(test_fused_draw_kernels);
    TH_RUN(test_codegen_errors);
    TH_RUN(test_index_and_sort_kernels);
    TH_RUN(test_conv_kernels);
    TH_RUN(test_pool_kernels);
    TH_RUN(test_pool_grad_kernels);
    TH_RUN(test_gemv_kernels);
    TH_RUN(test_scan_acc_kernels);
    TH_RUN(test_compile_error_reports_log_and_source);
    TH_RUN(test_user_kernels_nvrtc);
    TH_RUN(test_user_kernel_errors_nvrtc);
    th_nvrtc_finish(th_dir);
    TH_END();
}
