/* borrow.c - check1 with the output borrowed: tn_call hands back the
   function's own buffer instead of a fresh copy, which saves an allocation
   and a copy per call. The hazard the seed warns about: a borrowed result is
   overwritten by the next call. A saved one goes stale, and tn_array_check
   (and any function given it as an input) reports it instead of reading
   changed data silently. Copy what you keep (tn_array_copy).

   Build: cc -std=c11 -O2 -I. examples/borrow.c -o borrow -lm -lpthread -ldl
   Run:   ./borrow [iterations]          (TENSOR_FLAGS=device=cuda ./borrow for the GPU) */
#define _POSIX_C_SOURCE 199309L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define TRY(x) do { if (!(x)) { fprintf(stderr, "borrow: %s\n", tn_last_error()); return 1; } } while (0)

/* Seconds for `iters` calls of exp(x), output copied or borrowed. */
static double time_loop(tn_graph *g, tn_var *x, bool borrow, int iters, tn_func **keep) {
    tn_var *y = tn_exp(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .borrow = borrow,
                                                 .name = borrow ? "exp_borrowed" : "exp_copied" });
    if (!f) return -1;
    tn_array *r = NULL;
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        if (!borrow) tn_array_free(r);      /* a borrowed array is the function's: never freed */
        if (tn_call(f, NULL, &r) != TN_OK) { tn_function_free(f); return -1; }
    }
    double t = now() - t0;
    if (!borrow) tn_array_free(r);
    *keep = f;
    return t;
}

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    TRY(tn_init(NULL) == TN_OK);
    int64_t vlen = 10 * 30 * 768;
    tn_graph *g = tn_graph_new();
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, &vlen, 0, 1, 22);
    tn_var *x = tn_shared(g, "x", xv);
    tn_func *fc = NULL, *fb = NULL;
    double tc = time_loop(g, x, false, iters, &fc);
    double tb = time_loop(g, x, true, iters, &fb);
    TRY(tc >= 0 && tb >= 0);
    printf("%d calls, output copied:   %f s (%.1f us a call)\n", iters, tc, 1e6 * tc / iters);
    printf("%d calls, output borrowed: %f s (%.1f us a call): %.2fx\n", iters, tb, 1e6 * tb / iters, tb > 0 ? tc / tb : 0.0);

    /* The hazard: keep a borrowed result, call again, read the old one. */
    tn_array *first = NULL, *second = NULL;
    TRY(tn_call(fb, NULL, &first) == TN_OK);
    tn_array *saved = tn_array_copy(first);             /* the right way to keep it */
    tn_array *zeros = tn_array_zeros(TN_F32, 1, &vlen);
    TRY(zeros && tn_shared_set_value(x, zeros) == TN_OK); /* x = 0, so the next result is exp(0) = 1 */
    tn_array_free(zeros);
    TRY(tn_call(fb, NULL, &second) == TN_OK);           /* overwrites first's buffer */
    int64_t i0 = 0;
    tn_result chk = tn_array_check(first);
    printf("after the next call, the saved borrowed result: tn_array_check -> %s\n  %s\n",
           tn_result_string(chk), chk == TN_OK ? "(not detected: build without NDEBUG or define TN_DEBUG_BORROW)" : tn_last_error());
    printf("its copy still holds exp(x[0]) = %.8f; the new result holds %.8f\n", tn_array_get(saved, &i0), tn_array_get(second, &i0));
    printf(tn_function_device_steps(fb) > 0 ? "Used the gpu\n" : "Used the cpu\n");
    tn_array_free(saved);
    tn_array_free(xv);
    tn_function_free(fc);
    tn_function_free(fb);
    tn_graph_free(g);
    return 0;
}
