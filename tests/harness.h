/* tests/harness.h - a tiny test harness: TEST(name) { CHECK(...); } and
   TH_RUN(name) in main; main ends with TH_END(), which prints
   "N passed, N failed" (counting tests, not checks), after "N skipped" when
   a test called TH_SKIP. A binary that cannot run here at all (no GPU, no
   NVRTC) calls th_skip_all: one line "SKIP (reason)", exit 0, no counts;
   tests/run.sh counts it as skipped, never as passed. */
#ifndef TN_HARNESS_H
#define TN_HARNESS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>

static int th_passed, th_failed, th_skipped, th_cur_failed, th_cur_skipped;
static const char *th_cur_name;

#define TEST(name) static void name(void)
#define CHECK(cond, ...) do { \
        if (!(cond)) { \
            th_cur_failed++; \
            fprintf(stderr, "FAIL %s (%s:%d): %s: ", th_cur_name, __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); \
        } } while (0)
/* Checks that a call failed with exactly result `want`, and that the message
   contains `needle` (the function, variable or shape it must name). */
#define CHECK_ERR(want, needle) do { \
        tn_result th_r_ = tn_last_result(); const char *th_m_ = tn_last_error(); \
        CHECK(th_r_ == (want), "got %s (%s), want %s", tn_result_string(th_r_), th_m_, tn_result_string(want)); \
        CHECK(strstr(th_m_, (needle)) != NULL, "message '%s' lacks '%s'", th_m_, (needle)); \
    } while (0)
/* Inside a TEST, before returning: what it needs is missing here. The test
   counts as skipped (unless a CHECK already failed), and the line says why. */
#define TH_SKIP(...) do { \
        th_cur_skipped = 1; printf("SKIP %s (", th_cur_name); printf(__VA_ARGS__); printf(")\n"); \
    } while (0)
#define TH_RUN(name) do { \
        th_cur_name = #name; th_cur_failed = 0; th_cur_skipped = 0; name(); \
        if (th_cur_failed) { th_failed++; fprintf(stderr, "FAILED %s\n", #name); } \
        else if (th_cur_skipped) th_skipped++; \
        else th_passed++; \
    } while (0)
#define TH_END() do { if (th_skipped) printf("%d skipped\n", th_skipped); \
        printf("%d passed, %d failed\n", th_passed, th_failed); \
        return th_failed ? 1 : 0; } while (0)

/* The whole binary cannot run here: "SKIP (reason)" and exit 0, no counts. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 1, 2), noreturn))
#endif
static inline void th_skip_all(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("SKIP (");
    vprintf(fmt, ap);
    printf(")\n");
    va_end(ap);
    (void)th_cur_failed; (void)th_cur_name; (void)th_passed; (void)th_failed; (void)th_skipped; (void)th_cur_skipped;
    fflush(stdout);
    exit(0);
}

/* On a test's own reference arithmetic (plain loops over buffers it
   allocated, checked against the library's results): the sanitizers leave
   it uninstrumented, so make sanitize spends its time checking the library.
   test_linalg's reference product was 84% of its time under ASan+UBSan. */
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8)
#define TH_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))
#else
#define TH_NO_SANITIZE
#endif

/* max |a-b| / max(1, |ref|) style comparison helper */
/* What was written to t (from its start), as a string the caller frees;
   closes t. NULL when t is NULL or memory runs out. */
static inline char *th_read_stream(FILE *t) {
    if (!t) return NULL;
    long n = ftell(t);
    if (n < 0) n = 0;
    rewind(t);
    char *s = (char *)malloc((size_t)n + 1);
    if (s) { size_t got = fread(s, 1, (size_t)n, t); s[got] = 0; }
    fclose(t);
    return s;
}

/* The lines of a profile report's Apply table (tn_profile_print), one at a
   time: th_apply_next(report, &at, &a) from at = NULL gives each line in
   turn (false after the last); a.ok says whether it parsed. */
typedef struct th_apply { double pc, cum, t, tpc; char type[16]; unsigned long long calls; int id; bool ok; } th_apply;
static inline bool th_apply_next(const char *report, const char **at, th_apply *a) {
    const char *p = *at ? *at : (report ? strstr(report, "<Apply name>") : NULL);
    p = p ? strchr(p, '\n') : NULL;
    if (!p || !p[1] || p[1] == '\n') return false;
    *at = ++p;
    a->ok = sscanf(p, " %lf%% %lf%% %les %les %15s %llu %d", &a->pc, &a->cum, &a->t, &a->tpc, a->type, &a->calls, &a->id) == 7;
    return true;
}

static inline int th_close(double got, double ref, double rtol, double atol) {
    if (isnan(ref)) return isnan(got);
    if (isinf(ref)) return got == ref;
    return fabs(got - ref) <= atol + rtol * fabs(ref);
}
#endif
