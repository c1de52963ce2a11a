/* tests/nvrtc_env.h - start and end of the tests that compile with NVRTC
   without a GPU (after tensor.h, tensor_cuda.h and harness.h).
   th_nvrtc_start: device=cpu, NVRTC loaded, a fresh cache_dir /tmp/NAME_XXXXXX.
   Without libnvrtc the test fails, unless TN_TEST_ALLOW_NO_NVRTC=1, which
   skips the whole binary ("SKIP (reason)").
   th_nvrtc_finish: tn_shutdown, the cache_dir removed. */
#ifndef TN_NVRTC_ENV_H
#define TN_NVRTC_ENV_H

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
   A whole table compiles to PTX, and a sample of it (each op and dtype in
   one layout, so every inline-asm use and the widest parameters are met)
   to a cubin; a smaller sample compiles through tn_cuda_compile, with the
   options the back end uses. */
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
