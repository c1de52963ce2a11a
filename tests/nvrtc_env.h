/* tests/nvrtc_env.h - start and end of the tests that compile with NVRTC
   without a GPU (after tensor.h, tensor_cuda.h and harness.h), and the
   batches they compile generated kernels in.
   th_nvrtc_start: device=cpu, NVRTC loaded, a fresh cache_dir /tmp/NAME_XXXXXX.
   Without libnvrtc the test fails, unless TN_TEST_ALLOW_NO_NVRTC=1, which
   skips the whole binary ("SKIP (reason)").
   th_nvrtc_finish: tn_shutdown, the cache_dir removed. */
#ifndef TN_NVRTC_ENV_H
#define TN_NVRTC_ENV_H
#include <ctype.h>

/* NVRTC gave a cubin: an ELF image. */
static inline bool is_elf(const void *p, size_t n) { return n > 4 && !memcmp(p, "\x7f" "ELF", 4); }

/* The fast compiles of the tests that compile whole tables: NVRTC takes
   ~50 ms per program but ~0.1-0.7 s per kernel at the default optimisation,
   most of it in NVVM and ptxas optimising code whose speed these tests never
   measure. So the kernels of one op share a program (each in its own
   namespace), and they compile with -Ofc=max where NVRTC has it (12.8+:
   fast compile; the same front end, PTX and ptxas). Two depths:
   - th_fast_compile: to a cubin for sm_90, through ptxas, which alone checks
     the kernels' inline asm (the float16 conversions), parameter space and
     resources;
   - th_ptx_compile: to PTX for compute_90 only (front end and NVVM: every
     syntax, type and name error), about a quarter of the time: ptxas is
     three quarters of a cubin's.
   A sample of each table (each op and dtype in one layout, so every
   inline-asm use and the widest parameters are met) compiles to a cubin,
   the rest of the table to PTX (a cubin's compile makes the PTX too: no
   kernel compiles twice); a smaller sample compiles through
   tn_cuda_compile, with the options the back end uses. */
static const char *th_fast_opts[2] = { "--gpu-architecture=sm_90", NULL };

/* Compiles src with th_fast_opts (to_cubin: for sm_90, else to PTX for
   compute_90); on failure *log is NVRTC's log (tn__malloc'd). */
static inline tn_result th_nvrtc_compile(const char *src, bool to_cubin, char **log) {
    const tn__nvrtc_api *nv = &tn__nvrtc.api;
    tn__nvrtcProgram prog = NULL;
    *log = NULL;
    if (nv->nvrtcCreateProgram(&prog, src, "tn_batch.cu", 0, NULL, NULL) != TN__NVRTC_SUCCESS)
        return tn__err(TN_ERR_DEVICE, "nvrtcCreateProgram failed");
    tn_result r = TN_OK;
    size_t n = 0;
    const char *opts[2] = { to_cubin ? th_fast_opts[0] : "--gpu-architecture=compute_90", th_fast_opts[1] };
    if (nv->nvrtcCompileProgram(prog, opts[1] ? 2 : 1, opts) != TN__NVRTC_SUCCESS) {
        if (nv->nvrtcGetProgramLogSize(prog, &n) == TN__NVRTC_SUCCESS && (*log = (char *)tn__malloc(n + 1)) != NULL) {
            if (nv->nvrtcGetProgramLog(prog, *log) != TN__NVRTC_SUCCESS) (*log)[0] = 0;
            (*log)[n] = 0;
        }
        r = tn__err(TN_ERR_DEVICE, "NVRTC: %.200s", *log ? *log : "no log");
    } else if (to_cubin) {
        char *bin = NULL;
        if (nv->nvrtcGetCUBINSize(prog, &n) != TN__NVRTC_SUCCESS || !(bin = (char *)tn__malloc(n ? n : 1)) ||
            nv->nvrtcGetCUBIN(prog, bin) != TN__NVRTC_SUCCESS || !is_elf(bin, n))
            r = tn__err(TN_ERR_DEVICE, "no cubin, or it is not an ELF image");
        tn__free(bin);
    }
    nv->nvrtcDestroyProgram(&prog);
    return r;
}
static inline tn_result th_fast_compile(const char *src, char **log) { return th_nvrtc_compile(src, true, log); }
static inline tn_result th_ptx_compile(const char *src, char **log) { return th_nvrtc_compile(src, false, log); }

/* -Ofc=max where this NVRTC has it; otherwise the default options (slower). */
static inline void th_use_fast_compile(void) {
    char *log = NULL;
    th_fast_opts[1] = "-Ofc=max";
    if (th_fast_compile("extern \"C\" __global__ void k(int *p) { *p = 1; }\n", &log) != TN_OK) {
        printf("  NVRTC has no -Ofc=max (%.80s): default options, several minutes\n", log ? log : "?");
        th_fast_opts[1] = NULL;
    }
    tn__free(log);
}

/* ---- batches: many generated kernels, one NVRTC program ------------------
   A batch holds kernels' sources (each as the generator wrote it, with a
   name for reports) and compiles as one program at one depth: TH_PTX or
   TH_CUBIN (th_nvrtc_compile), or TH_BACKEND (tn_cuda_compile for sm_90:
   the back end's options and caches). Each kernel sits in namespace k<i>,
   its extern "C" entries renamed <name>_<i> (extern "C" names are global)
   and the macros it defines undefined after it. The prelude every
   generated kernel starts with (tn__cuda_prelude: types, float16
   conversions, the scalar helpers) is written once, at the top, instead of
   once per kernel: an elementwise kernel is two thirds prelude, parsed
   for nothing (an elementwise batch to PTX: 0.22 -> 0.15 s of CPU). A
   failing batch is searched kernel by kernel: each kernel that fails alone
   (its own whole source, prelude included) has its NVRTC log and numbered
   source printed ("FAILED kernel: <its name>"), and the check names it. */
enum { TH_PTX, TH_CUBIN, TH_BACKEND };
typedef struct th_kern { char *src; char what[128]; } th_kern;
typedef struct th_kbatch { th_kern *k; int n, cap; bool oom; } th_kbatch;

/* Adds a copy of src, named what (printf-style) in reports. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static inline void th_kb_add(th_kbatch *b, const char *src, const char *what, ...) {
    size_t len = strlen(src) + 1;
    char *copy = (char *)tn__malloc(len);
    if (b->n == b->cap && !b->oom) {
        int cap = b->cap ? 2 * b->cap : 64;
        th_kern *k = (th_kern *)tn__realloc(b->k, (size_t)cap * sizeof *k);
        if (k) { b->k = k; b->cap = cap; }
    }
    if (!copy || b->n == b->cap) { b->oom = true; tn__free(copy); return; }
    memcpy(copy, src, len);
    th_kern *k = &b->k[b->n++];
    k->src = copy;
    va_list ap;
    va_start(ap, what);
    vsnprintf(k->what, sizeof k->what, what, ap);
    va_end(ap);
}

static inline void th_kb_free(th_kbatch *b) {
    for (int i = 0; i < b->n; i++) tn__free(b->k[i].src);
    tn__free(b->k);
    memset(b, 0, sizeof *b);
}

/* The generated kernels' prelude, as tn__cuda_prelude writes it. */
static inline const char *th_prelude(void) {
    static tn__sb pre = TN__SB_INIT;
    if (!pre.s) tn__cuda_prelude(&pre);
    return pre.oom ? NULL : pre.s;
}

/* Kernel src as batch member k: in namespace k<k>, without the prelude
   (skip_prelude: the batch has it at the top), each __global__ function's
   name followed by _<k>, then an #undef of each macro it defines. Returns
   the number of entries renamed. */
static inline int th_kb_wrap(tn__sb *out, const char *src, int k, bool skip_prelude) {
    static const char *const entry = "__global__ void ";
    const char *pre = skip_prelude ? th_prelude() : NULL, *cut = pre ? strstr(src, pre) : NULL;
    tn__sb body = TN__SB_INIT;
    if (cut) {
        tn__sb_putn(&body, src, (size_t)(cut - src));
        tn__sb_puts(&body, cut + strlen(pre));
    } else tn__sb_puts(&body, src);
    if (body.oom) { out->oom = true; tn__free(body.s); return 0; }
    int entries = 0;
    tn__sb_printf(out, "namespace k%d {\n", k);
    const char *p = body.s;
    for (const char *hit; (hit = strstr(p, entry)) != NULL; entries++) {
        const char *name = hit + strlen(entry);
        if (!strncmp(name, "__launch_bounds__(", 18)) {
            name = strchr(name, ')');
            name = name ? name + 1 : hit + strlen(entry);
            while (*name == ' ') name++;
        }
        size_t len = 0;
        while (name[len] == '_' || isalnum((unsigned char)name[len])) len++;
        tn__sb_putn(out, p, (size_t)(name + len - p));
        tn__sb_printf(out, "_%d", k);
        p = name + len;
    }
    tn__sb_puts(out, p);
    tn__sb_puts(out, "\n}\n");
    for (const char *d = body.s; (d = strstr(d, "#define ")) != NULL;) {
        d += strlen("#define ");
        size_t len = 0;
        while (d[len] == '_' || isalnum((unsigned char)d[len])) len++;
        tn__sb_printf(out, "#undef %.*s\n", (int)len, d);
    }
    tn__free(body.s);
    return entries;
}

/* Compiles src at depth; on failure *log is NVRTC's log (tn__malloc'd;
   TH_BACKEND: tn_cuda_last_compile_log's, printed already by the back end). */
static inline tn_result th_kb_compile_one(const char *src, int depth, char **log) {
    if (depth != TH_BACKEND) return th_nvrtc_compile(src, depth == TH_CUBIN, log);
    const void *bin;
    size_t n;
    tn_result r = tn_cuda_compile(src, "sm_90", &bin, &n);
    *log = NULL;
    if (r == TN_OK && !is_elf(bin, n)) r = tn__err(TN_ERR_DEVICE, "cubin is not an ELF image (%zu bytes)", n);
    return r;
}

/* Each kernel of b alone at depth: returns how many fail, *first the
   index of the first; prints each failure's log and numbered source
   ("FAILED kernel: <what>", stderr and tn_cuda_last_compile_log). */
static inline int th_kb_find_bad(const th_kbatch *b, int depth, int *first) {
    int bad = 0;
    *first = -1;
    for (int i = 0; i < b->n; i++) {
        char *log = NULL;
        if (th_kb_compile_one(b->k[i].src, depth, &log) != TN_OK) {
            if (!bad++) *first = i;
            if (depth != TH_BACKEND) {
                char what[200];
                snprintf(what, sizeof what, "FAILED kernel: %s", b->k[i].what);
                tn__cuda_keep_log(what, log, b->k[i].src);
            } else fprintf(stderr, "FAILED kernel: %s (the back end printed its log and source above)\n", b->k[i].what);
        }
        tn__free(log);
    }
    return bad;
}

/* The batch's program text (prelude once when a kernel has it); NULL
   when out of memory or a kernel has no __global__ entry. */
static inline char *th_kb_text(const th_kbatch *b) {
    const char *pre = th_prelude();
    bool has = false;
    for (int i = 0; i < b->n && pre && !has; i++) has = strstr(b->k[i].src, pre) != NULL;
    tn__sb text = TN__SB_INIT;
    if (has) tn__sb_puts(&text, pre);
    bool ok = pre && !b->oom;
    for (int i = 0; i < b->n; i++) ok &= th_kb_wrap(&text, b->k[i].src, i, has) > 0;
    if (ok && !text.oom) return text.s;
    tn__free(text.s);
    return NULL;
}

/* Compiles b as one program at depth; 0 when it compiles, else the number
   of kernels that fail alone (printed by th_kb_find_bad; *first: the
   first's index), or -1 when the batch cannot be built or fails with every
   kernel compiling alone (the batch's own log printed). */
static inline int th_kb_run(const th_kbatch *b, int depth, int *first) {
    *first = -1;
    char *text = th_kb_text(b), *log = NULL;
    if (!text) return -1;
    int bad = 0;
    if (th_kb_compile_one(text, depth, &log) != TN_OK) {
        bad = th_kb_find_bad(b, depth, first);
        if (!bad) { fprintf(stderr, "a batch of %d kernels fails, each compiles alone: %.2000s\n", b->n, log ? log : tn_last_error()); bad = -1; }
    }
    tn__free(log);
    tn__free(text);
    return bad;
}

/* th_kb_run as a check: a failure names the kernels to blame. Frees b;
   true when the batch compiled. */
static inline bool th_kb_compile(th_kbatch *b, int depth, const char *what) {
    static const char *const depths[3] = { "to PTX", "to a cubin for sm_90", "with the back end's options" };
    int first = -1, bad = b->n || b->oom ? th_kb_run(b, depth, &first) : 0;
    CHECK(bad == 0, "%s (%d kernels) %s: %s%s%s", what, b->n, depths[depth],
          bad < 0 ? (b->oom ? "out of memory" : "the batch fails or cannot be built, yet every kernel compiles alone") : "",
          bad > 0 ? "kernels fail to compile, the first: " : "", bad > 0 ? b->k[first].what : "");
    th_kb_free(b);
    return bad == 0;
}

static inline void th_nvrtc_start(const char *name, char *dir, size_t cap) {
    tn_config cfg = { .device = TN_DEVICE_CPU };
    tn_init(&cfg);
    if (tn__nvrtc_load(0) != TN_OK) {
        const char *allow = getenv("TN_TEST_ALLOW_NO_NVRTC");
        if (allow && !strcmp(allow, "1")) th_skip_all("%s (TN_TEST_ALLOW_NO_NVRTC=1)", tn_last_error());
        fprintf(stderr, "FAIL %s: %s; set TN_TEST_ALLOW_NO_NVRTC=1 to skip on a machine without NVRTC\n", name, tn_last_error());
        printf("0 passed, 1 failed\n");
        exit(1);
    }
    printf("NVRTC %d.%d from %s\n", tn__nvrtc.major, tn__nvrtc.minor, tn__nvrtc.path);
    snprintf(dir, cap, "/tmp/%s_XXXXXX", name);
    if (!mkdtemp(dir)) { perror("mkdtemp"); exit(1); }
    cfg.cache_dir = dir;
    tn_init(&cfg);
    th_use_fast_compile();
}

static inline void th_nvrtc_finish(const char *dir) {
    tn_shutdown();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}
#endif
