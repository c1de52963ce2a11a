/* The kernel cache on disk (the >>cuda_cache section), through NVRTC on a
   machine without a GPU: the path a function's first tn_call takes. Entries
   round-trip; corrupt ones are recompiled; processes share a directory. A
   FIFO (any non-regular file) at an entry's path is a miss, left in place,
   and nothing blocks on it. A cache_dir of any length is used whole, given
   to tn_init or through TENSOR_FLAGS alike. An unusable cache_dir (a regular
   file, a path under a file, read-only, a write that fails, too long a path)
   is said once through the log, naming the directory and the reason, and
   kernels still compile. Without libnvrtc the test fails, unless
   TN_TEST_ALLOW_NO_NVRTC=1, which skips it (tests/nvrtc_env.h). */
#define _GNU_SOURCE
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"
#include "nvrtc_env.h"
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

static char th_dir[256];        /* a fresh cache_dir for this run */


static const char *kernel_src = "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] *= 2.0f; }\n";

static int count_files(const char *dir, const char *suffix, char *last, size_t cap) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name), sl = strlen(suffix);
        if (l > sl && !strcmp(e->d_name + l - sl, suffix)) {
            n++;
            if (last) snprintf(last, cap, "%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    return n;
}
static int count_tmp(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void set_cache_dir(const char *dir) {
    tn_config cfg = *tn_get_config();
    cfg.cache_dir = dir;
    tn_init(&cfg);
}

TEST(test_disk_cache_roundtrip_and_corruption) {
    char dir[300], file[600];
    snprintf(dir, sizeof dir, "%s/c1", th_dir);
    set_cache_dir(dir);
    tn__cuda_kcache_clear();
    tn_cuda_cache_stats s0, s;
    tn_cuda_get_cache_stats(&s0);
    const void *bin;
    size_t n;
    CHECK(tn_cuda_compile(kernel_src, "sm_90", &bin, &n) == TN_OK, "%s", tn_last_error());
    void *first = malloc(n);
    size_t first_n = n;
    memcpy(first, bin, n);
    tn_cuda_get_cache_stats(&s);
    CHECK(s.compiles == s0.compiles + 1 && s.disk_writes == s0.disk_writes + 1, "compiled and written");
    CHECK(count_files(dir, ".cubin", file, sizeof file) == 1, "one entry in %s", dir);

    /* in-memory hit: no file is opened */
    s0 = s;
    CHECK(tn_cuda_compile(kernel_src, "sm_90", &bin, &n) == TN_OK, "hit");
    tn_cuda_get_cache_stats(&s);
    CHECK(s.mem_hits == s0.mem_hits + 1 && s.disk_reads == s0.disk_reads && s.compiles == s0.compiles, "memory hit touches no disk");

    /* a new process (memory cleared): loaded from disk, same bytes */
    tn__cuda_kcache_clear();
    s0 = s;
    CHECK(tn_cuda_compile(kernel_src, "sm_90", &bin, &n) == TN_OK, "disk hit");
    tn_cuda_get_cache_stats(&s);
    CHECK(s.disk_hits == s0.disk_hits + 1 && s.compiles == s0.compiles, "served from disk");
    CHECK(n == first_n && !memcmp(bin, first, n), "same cubin from disk");

    /* truncated, a flipped byte in the cubin, a flipped byte in the key, an
       empty file: each rejected, recompiled, and rewritten valid */
    struct stat st;
    stat(file, &st);
    for (int mode = 0; mode < 4; mode++) {
        FILE *f = fopen(file, "r+b");
        CHECK(f != NULL, "open %s", file);
        if (!f) break;
        if (mode == 0) CHECK(truncate(file, st.st_size - 100) == 0, "truncate");
        if (mode == 1 || mode == 2) {
            long at = mode == 1 ? (long)st.st_size - 50 : 40 + 5;
            fseek(f, at, SEEK_SET);
            int c = fgetc(f);
            fseek(f, at, SEEK_SET);
            fputc(c ^ 0x10, f);
        }
        fclose(f);
        if (mode == 3) CHECK(truncate(file, 0) == 0, "empty");
        tn__cuda_kcache_clear();
        s0 = s;
        CHECK(tn_cuda_compile(kernel_src, "sm_90", &bin, &n) == TN_OK, "recompile after corruption %d: %s", mode, tn_last_error());
        tn_cuda_get_cache_stats(&s);
        CHECK(s.disk_rejects == s0.disk_rejects + 1 && s.compiles == s0.compiles + 1 && s.disk_writes == s0.disk_writes + 1,
              "corruption %d: rejected %llu, compiled %llu, written %llu", mode,
              (unsigned long long)(s.disk_rejects - s0.disk_rejects), (unsigned long long)(s.compiles - s0.compiles),
              (unsigned long long)(s.disk_writes - s0.disk_writes));
        CHECK(n == first_n && !memcmp(bin, first, n), "corruption %d: recompiled cubin equals the original", mode);
        struct stat st2;
        CHECK(stat(file, &st2) == 0 && st2.st_size == st.st_size, "corruption %d: entry rewritten whole", mode);
    }
    CHECK(count_tmp(dir) == 0, "no temporary files left");
    free(first);
}

TEST(test_disk_cache_concurrent_processes) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/c2", th_dir);
    set_cache_dir(dir);
    tn__cuda_kcache_clear();
    int go[2];
    CHECK(pipe(go) == 0, "pipe");
    pid_t kids[2];
    for (int i = 0; i < 2; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {           /* child: wait for the start signal, compile, check */
            char c;
            close(go[1]);
            if (read(go[0], &c, 1) != 0) _exit(3);
            const void *bin;
            size_t n;
            tn_cuda_cache_stats s0, s;
            tn_cuda_get_cache_stats(&s0);
            if (tn_cuda_compile(kernel_src, "sm_90", &bin, &n) != TN_OK) _exit(1);
            tn_cuda_get_cache_stats(&s);
            _exit(is_elf(bin, n) && (s.compiles - s0.compiles) + (s.disk_hits - s0.disk_hits) == 1 ? 0 : 2);
        }
    }
    close(go[0]);
    close(go[1]);                     /* EOF releases both children at once */
    for (int i = 0; i < 2; i++) {
        int status = 0;
        waitpid(kids[i], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d status %d", i, status);
    }
    CHECK(count_files(dir, ".cubin", NULL, 0) == 1, "exactly one entry");
    CHECK(count_tmp(dir) == 0, "no temporary files left");
    tn_cuda_cache_stats s0, s;
    tn_cuda_get_cache_stats(&s0);
    const void *bin;
    size_t n;
    CHECK(tn_cuda_compile(kernel_src, "sm_90", &bin, &n) == TN_OK, "%s", tn_last_error());
    tn_cuda_get_cache_stats(&s);
    CHECK(s.disk_hits == s0.disk_hits + 1 && s.disk_rejects == s0.disk_rejects, "the entry is valid");
}


/* ---- the log and unique kernels -------------------------------------------- */

static struct { int n_warn, n_error; char last[1024]; } th_log;

static void th_log_fn(tn_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == TN_LOG_WARN) th_log.n_warn++;
    else th_log.n_error++;
    snprintf(th_log.last, sizeof th_log.last, "%s", msg);
}
static void log_start(void) { memset(&th_log, 0, sizeof th_log); tn_set_log(th_log_fn, NULL); }
static void log_stop(void) { tn_set_log(NULL, NULL); }

/* The log got one warning, no error, and it has each of the needles. */
static void check_one_warning(const char *what, const char *needle1, const char *needle2) {
    CHECK(th_log.n_warn == 1 && th_log.n_error == 0, "%s: %d warnings and %d errors logged, want 1 warning (last: '%s')",
          what, th_log.n_warn, th_log.n_error, th_log.last);
    CHECK(strstr(th_log.last, needle1) != NULL, "%s: warning '%s' lacks '%s'", what, th_log.last, needle1);
    CHECK(strstr(th_log.last, needle2) != NULL, "%s: warning '%s' lacks '%s'", what, th_log.last, needle2);
}

/* Compiles n kernels never compiled before in this process (no memory hit)
   with the log captured, limit(true) before and limit(false) after when
   given (nothing is printed between: files may be limited); each must
   compile. Returns the change in the cache's counters. */
static tn_cuda_cache_stats compile_logged(int n, void (*limit)(bool on), const char *what) {
    static int serial;
    int failed = 0;
    char why[1100] = "";
    tn_cuda_cache_stats s0, s;
    log_start();
    tn_cuda_get_cache_stats(&s0);
    if (limit) limit(true);
    for (int i = 0; i < n; i++) {
        char src[160];
        snprintf(src, sizeof src, "extern \"C\" __global__ void k(float *p) { p[threadIdx.x] += %d.0f; }\n", ++serial);
        const void *bin;
        size_t size;
        tn_result r = tn_cuda_compile(src, "sm_90", &bin, &size);
        if (r != TN_OK || !is_elf(bin, size)) {
            failed++;
            snprintf(why, sizeof why, "kernel %d: %s", serial, r != TN_OK ? tn_last_error() : "not an ELF image");
        }
    }
    if (limit) limit(false);
    tn_cuda_get_cache_stats(&s);
    log_stop();
    CHECK(failed == 0, "%s: %d of %d kernels failed; %s", what, failed, n, why);
    s.compiles -= s0.compiles;
    s.disk_writes -= s0.disk_writes;
    s.disk_hits -= s0.disk_hits;
    s.disk_reads -= s0.disk_reads;
    s.disk_rejects -= s0.disk_rejects;
    s.mem_hits -= s0.mem_hits;
    return s;
}

/* ---- non-regular entries ------------------------------------------------- */

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "FAIL test_kcache: the kernel cache blocked for 30 s (a FIFO opened for reading?)\n";
    if (write(2, m, sizeof m - 1) < 0) _exit(2);
    _exit(1);
}

TEST(test_fifo_at_an_entry_is_a_miss) {
    char a[300], b[300], file[600], fifo[900];
    snprintf(a, sizeof a, "%s/fifo_a", th_dir);
    snprintf(b, sizeof b, "%s/fifo_b", th_dir);
    set_cache_dir(a);                 /* learns the entry's name */
    tn__cuda_kcache_clear();
    const void *bin;
    size_t n;
    CHECK(tn_cuda_compile(kernel_src, "sm_90", &bin, &n) == TN_OK, "%s", tn_last_error());
    CHECK(count_files(a, ".cubin", file, sizeof file) == 1, "one entry in %s", a);
    CHECK(mkdir(b, 0755) == 0, "mkdir %s", b);
    snprintf(fifo, sizeof fifo, "%s%s", b, strrchr(file, '/'));
    CHECK(mkfifo(fifo, 0644) == 0, "mkfifo %s: %s", fifo, strerror(errno));

    set_cache_dir(b);
    tn__cuda_kcache_clear();
    log_start();
    tn_cuda_cache_stats s0, s;
    tn_cuda_get_cache_stats(&s0);
    signal(SIGALRM, on_alarm);
    alarm(30);
    tn_result r = tn_cuda_compile(kernel_src, "sm_90", &bin, &n);
    alarm(0);
    log_stop();
    CHECK(r == TN_OK && is_elf(bin, n), "compiled past the FIFO: %s", tn_last_error());
    tn_cuda_get_cache_stats(&s);
    CHECK(s.compiles == s0.compiles + 1 && s.disk_hits == s0.disk_hits && s.disk_writes == s0.disk_writes,
          "a miss, compiled, not stored: compiles +%llu, disk hits +%llu, writes +%llu",
          (unsigned long long)(s.compiles - s0.compiles), (unsigned long long)(s.disk_hits - s0.disk_hits),
          (unsigned long long)(s.disk_writes - s0.disk_writes));
    struct stat st;
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode), "the FIFO is left in place");
    check_one_warning("FIFO entry", b, "not a regular file");
    CHECK(count_tmp(b) == 0, "no temporary files left");
}

/* ---- long paths ------------------------------------------------------------ */

/* base/ddd.../ddd...: a directory path of `len` characters (components of 99). */
static char *long_dir(const char *base, size_t len) {
    char *p = (char *)malloc(len + 1);
    size_t n = (size_t)snprintf(p, len + 1, "%s", base);
    while (n < len) {
        p[n++] = '/';
        for (int i = 0; i < 99 && n < len; i++) p[n++] = 'd';
    }
    if (p[n - 1] == '/') p[n - 1] = 'd';
    p[n] = 0;
    return p;
}

/* Sets cache_dir to dir through tn_init's config (route 0) or TENSOR_FLAGS (route 1). */
static tn_result init_cache_dir(int route, const char *dir) {
    if (route == 0) {
        tn_config cfg = { .device = TN_DEVICE_CPU, .cache_dir = dir };
        return tn_init(&cfg);
    }
    size_t n = strlen(dir) + 64;
    char *flags = (char *)malloc(n);
    snprintf(flags, n, "device=cpu,cache_dir=%s", dir);
    setenv("TENSOR_FLAGS", flags, 1);
    free(flags);
    tn_result r = tn_init(NULL);
    unsetenv("TENSOR_FLAGS");
    return r;
}

/* 1500 characters (past the old 1024-byte buffers, within PATH_MAX): the
   entry lands in that directory. 5000 (past PATH_MAX): the system refuses
   the path at the first compile, which is said once; kernels compile. The
   same whichever way cache_dir was given. */
TEST(test_cache_dir_of_any_length) {
    static const char *route[] = { "tn_init", "TENSOR_FLAGS" };
    for (int k = 0; k < 4; k++) {
        size_t len = k < 2 ? 1500 : 5000;
        char base[300], what[64];
        snprintf(base, sizeof base, "%s/long%d", th_dir, k);
        snprintf(what, sizeof what, "%zu characters through %s", len, route[k % 2]);
        char *dir = long_dir(base, len);
        CHECK(init_cache_dir(k % 2, dir) == TN_OK, "%s: %s", what, tn_last_error());
        CHECK(strcmp(tn_get_config()->cache_dir, dir) == 0, "%s: cache_dir kept whole", what);
        tn_cuda_cache_stats d = compile_logged(2, NULL, what);
        if (len < 4096) {
            CHECK(d.disk_writes == 2, "%s: both entries written (%llu)", what, (unsigned long long)d.disk_writes);
            CHECK(count_files(dir, ".cubin", NULL, 0) == 2, "%s: the entries are in that directory", what);
            CHECK(th_log.n_warn == 0 && th_log.n_error == 0, "%s: nothing logged (last: '%s')", what, th_log.last);
        } else {
            CHECK(d.compiles == 2 && d.disk_writes == 0, "%s: compiled, nothing stored", what);
            char head[120];
            snprintf(head, sizeof head, "%.100s", dir);
            check_one_warning(what, head, strerror(ENAMETOOLONG));
        }
        free(dir);
    }
    set_cache_dir(th_dir);
}

/* ---- unusable directories ------------------------------------------------- */

/* Two fresh kernels under `dir`: both compile, nothing is stored, and the
   log has one warning naming dir and strerror(err). */
static void check_unusable(const char *dir, int err, const char *what, void (*limit)(bool on)) {
    set_cache_dir(dir);
    tn_cuda_cache_stats d = compile_logged(2, limit, what);
    CHECK(d.compiles == 2 && d.disk_writes == 0, "%s: compiled twice, nothing stored", what);
    check_one_warning(what, dir, strerror(err));
    set_cache_dir(th_dir);
}

TEST(test_file_as_cache_dir_is_reported_once) {
    char file[300], under[320];
    snprintf(file, sizeof file, "%s/plain_file", th_dir);
    snprintf(under, sizeof under, "%s/sub/dir", file);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL, "create %s", file);
    if (!f) return;
    fputs("not a directory\n", f);
    fclose(f);
    check_unusable(file, ENOTDIR, "a regular file as cache_dir", NULL);
    check_unusable(under, ENOTDIR, "a cache_dir under a regular file", NULL);
}

/* A read-only directory still serves its entries; a new kernel is said once. */
TEST(test_read_only_cache_dir_is_reported_once) {
    char dir[300], probe[320];
    snprintf(dir, sizeof dir, "%s/read_only", th_dir);
    snprintf(probe, sizeof probe, "%s/probe", dir);
    set_cache_dir(dir);
    tn__cuda_kcache_clear();
    const void *bin;
    size_t n;
    CHECK(tn_cuda_compile(kernel_src, "sm_90", &bin, &n) == TN_OK, "%s", tn_last_error());
    CHECK(chmod(dir, 0555) == 0, "chmod %s: %s", dir, strerror(errno));
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {                    /* root: the mode does not stop writes */
        close(fd);
        unlink(probe);
        TH_SKIP("chmod 0555 does not stop writes for uid %d: the read-only case is not tested", (int)geteuid());
    } else {
        tn__cuda_kcache_clear();
        tn_cuda_cache_stats s0, s;
        tn_cuda_get_cache_stats(&s0);
        log_start();
        CHECK(tn_cuda_compile(kernel_src, "sm_90", &bin, &n) == TN_OK, "%s", tn_last_error());
        log_stop();
        tn_cuda_get_cache_stats(&s);
        CHECK(s.disk_hits == s0.disk_hits + 1 && th_log.n_warn == 0, "a read-only directory serves its entry silently");
        check_unusable(dir, EACCES, "a read-only cache_dir", NULL);
    }
    chmod(dir, 0755);
    set_cache_dir(th_dir);
}

/* Files this process writes stop at 64 bytes (RLIMIT_FSIZE; SIGXFSZ ignored):
   a cache entry's header fits, its key does not. */
static void limit_file_size(bool on) {
    static struct rlimit old;
    static void (*prev)(int);
    if (on) {
        struct rlimit lim;
        getrlimit(RLIMIT_FSIZE, &old);
        lim = old;
        lim.rlim_cur = 64;
        prev = signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &lim);
    } else {
        setrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, prev);
    }
}

/* A write that fails midway (EFBIG here, as a full disk gives ENOSPC): said
   once, no temporary file or entry left. */
TEST(test_failed_write_is_reported_once) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/write_fails", th_dir);
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    check_unusable(dir, EFBIG, "a write that fails", limit_file_size);
    CHECK(count_tmp(dir) == 0 && count_files(dir, ".cubin", NULL, 0) == 0, "no temporary file or entry left");
}

/* nvrtc_flags: parsed from TENSOR_FLAGS' comma-continued items, passed to
   NVRTC (a division kernel compiles to other code with --prec-div=false),
   part of the cache key, and a bad option is named in the error. */
static void set_nvrtc_flags(const char *flags) {
    tn_config cfg = *tn_get_config();
    cfg.nvrtc_flags = flags;
    CHECK(tn_init(&cfg) == TN_OK, "tn_init: %s", tn_last_error());
}
static const char *div_src =
    "extern \"C\" __global__ void k(float *o, const float *a, const float *b) {\n"
    "    int i = blockIdx.x * blockDim.x + threadIdx.x; o[i] = a[i] / b[i] + sqrtf(a[i]);\n}\n";
/* compiles only when both -D options reached NVRTC */
static const char *defs_src =
    "#if !defined(TN_FLAG_A) || TN_FLAG_B != 2\n#error the nvrtc_flags options did not arrive\n#endif\n"
    "extern \"C\" __global__ void k(float *o) { o[threadIdx.x] = TN_FLAG_A; }\n";

TEST(test_nvrtc_flags) {
    tn_config c = { 0 };
    CHECK(tn_parse_flags("nvrtc_flags=-ftz=true,--prec-div=false,device=cpu", &c) == TN_OK, "parse: %s", tn_last_error());
    CHECK(c.nvrtc_flags && !strcmp(c.nvrtc_flags, "-ftz=true --prec-div=false") && c.device == TN_DEVICE_CPU,
          "the items starting with '-' continue nvrtc_flags: '%s'", c.nvrtc_flags ? c.nvrtc_flags : "(null)");
    char big[512];
    memset(big, 'x', sizeof big - 1);
    memcpy(big, "nvrtc_flags=-D", 14);
    big[sizeof big - 1] = 0;
    CHECK(tn_parse_flags(big, &c) == TN_ERR_INVALID, "an overlong value");
    CHECK_ERR(TN_ERR_INVALID, "nvrtc_flags is over 400 characters");
    CHECK(tn_parse_flags("cuda_root=/opt/cuda-x", &c) == TN_OK && c.cuda_root && !strcmp(c.cuda_root, "/opt/cuda-x"), "cuda_root parsed");

    char dir[300];
    snprintf(dir, sizeof dir, "%s/flags", th_dir);
    set_cache_dir(dir);
    tn__cuda_kcache_clear();
    tn_cuda_cache_stats s0, s;
    const void *bin;
    size_t n;
    tn_cuda_get_cache_stats(&s0);
    CHECK(tn_cuda_compile(div_src, "sm_90", &bin, &n) == TN_OK, "plain: %s", tn_last_error());
    printf("(an NVRTC error report is expected below)\n");
    fflush(stdout);
    CHECK(tn_cuda_compile(defs_src, "sm_90", &bin, &n) == TN_ERR_DEVICE, "without the -D options the test kernel fails");
    set_nvrtc_flags("-ftz=true --prec-div=false  --prec-sqrt=false -DTN_FLAG_A=1 -DTN_FLAG_B=2");
    CHECK(tn_cuda_compile(defs_src, "sm_90", &bin, &n) == TN_OK, "every option reaches NVRTC: %s", tn_last_error());
    CHECK(tn_cuda_compile(div_src, "sm_90", &bin, &n) == TN_OK, "with flags: %s", tn_last_error());
    tn_cuda_get_cache_stats(&s);
    CHECK(s.compiles == s0.compiles + 3, "the flags are part of the key: %llu compiles", (unsigned long long)(s.compiles - s0.compiles));
    CHECK(tn_cuda_compile(div_src, "sm_90", &bin, &n) == TN_OK, "again");
    tn_cuda_get_cache_stats(&s0);
    CHECK(s0.mem_hits == s.mem_hits + 1 && s0.compiles == s.compiles, "then a memory hit");

    set_nvrtc_flags("--no-such-option");
    CHECK(tn_cuda_compile(div_src, "sm_90", &bin, &n) == TN_ERR_DEVICE, "a bad option fails");
    CHECK_ERR(TN_ERR_DEVICE, "with nvrtc_flags '--no-such-option'");
    set_nvrtc_flags(NULL);
    CHECK(tn_cuda_compile(div_src, "sm_90", &bin, &n) == TN_OK, "without the flags again: %s", tn_last_error());
}

int main(void) {
    th_nvrtc_start("test_kcache", th_dir, sizeof th_dir);
    TH_RUN(test_nvrtc_flags);
    TH_RUN(test_disk_cache_roundtrip_and_corruption);
    TH_RUN(test_disk_cache_concurrent_processes);
    TH_RUN(test_fifo_at_an_entry_is_a_miss);
    TH_RUN(test_cache_dir_of_any_length);
    TH_RUN(test_file_as_cache_dir_is_reported_once);
    TH_RUN(test_read_only_cache_dir_is_reported_once);
    TH_RUN(test_failed_write_is_reported_once);
    th_nvrtc_finish(th_dir);
    TH_END();
}
