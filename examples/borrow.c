/* borrow.c - the seed's "returning a handle to device-allocated data": check2
   with the output borrowed, f = function([], Out(gpu_from_host(exp(x)),
   borrow=True)). tn_call hands back the function's own (device) buffer
   instead of a fresh array: no allocation and no copy per call. Then the
   hazard the seed warns about: a borrowed result is overwritten by the next
   call. A saved one goes stale, and tn_array_check (and any function given
   it as an input) reports it instead of reading changed data silently. Copy
   what you keep (tn_array_copy).

   Build: cc -std=c11 -O2 -I. examples/borrow.c -o borrow -lm -lpthread -ldl
   Run:   ./borrow [iterations]          (TENSOR_FLAGS=device=cuda ./borrow for the GPU) */
#define _POSIX_C_SOURCE 199309L
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The seed's test: an elementwise op that is not a GPU one means the CPU. */
static bool cpu_elemwise_left(const tn_func *f) {
    FILE *t = tmpfile();
    char line[4096];
    bool cpu = false;
    if (!t || tn_print_toposort(f, t) != TN_OK) { if (t) fclose(t); return true; }
    rewind(t);
    while (fgets(line, sizeof line, t)) cpu |= !strncmp(line, "Elemwise{", 9);
    fclose(t);
    return cpu;
}

/* Seconds for `iters` calls of f; the last result in *last (NULL: freed). */
static double time_loop(tn_func *f, bool borrowed, int iters, tn_array **last) {
    tn_array *r = NULL;
    double t0 = now();
    for (int i = 0; i < iters; i++) {
        if (!borrowed) tn_array_free(r);    /* a borrowed array is the function's: never freed */
        if (tn_call(f, NULL, &r) != TN_OK) return -1;
    }
    double t = now() - t0;
    if (last) *last = r;
    else if (!borrowed) tn_array_free(r);
    return t;
}

#define TRY(x) do { if (!(x)) { fprintf(stderr, "borrow: %s\n", tn_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    TRY(tn_init(NULL) == TN_OK);
    int64_t vlen = 10 * 30 * 768;
    tn_random_state *rng = tn_random_state_new(22);
    tn_graph *g = tn_graph_new();
    tn_array *xv = tn_rs_rand(rng, tn_get_config()->floatX, 1, &vlen);
    TRY(xv);
    tn_var *x = tn_shared(g, "x", xv);
    tn_var *y = tn_gpu_from_host(tn_exp(x));
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .borrow = true, .name = "borrowed" });
    tn_func *fc = tn_function(g, &(tn_func_desc){ .n_outputs = 1, .outputs = &y, .name = "copied" });
    TRY(f && fc);
    tn_array *r = NULL;
    double t = time_loop(f, true, iters, &r);
    TRY(t >= 0);
    printf("Looping %d times took %f seconds\n", iters, t);
    if (r) {
        printf("Result is <%s array of %lld %s values, borrowed>\n", r->device == TN_HOST ? "host" : "device", (long long)vlen,
               tn_dtype_name(r->dtype));
        tn_array *h = tn_array_to_host(r);
        TRY(h);
        int64_t at[6] = { 0, 1, 2, vlen - 3, vlen - 2, vlen - 1 };
        printf("Numpy result is [");
        for (int i = 0; i < 6; i++) printf("%s%.8f", i == 0 ? "" : i == 3 ? " ... " : " ", tn_array_get(h, &at[i]));
        printf("]\n");
        tn_array_free(h);
    }
    printf(cpu_elemwise_left(f) ? "Used the cpu\n" : "Used the gpu\n");

    double tc = time_loop(fc, false, iters, NULL);
    TRY(tc >= 0);
    printf("\nthe same %d calls with the output copied: %f seconds (%.2fx the borrowed time)\n", iters, tc, t > 0 ? tc / t : 0.0);

    /* The hazard: keep a borrowed result, call again, read the old one. */
    tn_array *first = NULL, *second = NULL;
    TRY(tn_call(f, NULL, &first) == TN_OK);
    tn_array *saved = tn_array_to_host(first);           /* the right way to keep it: a copy */
    tn_array *zeros = tn_array_zeros(xv->dtype, 1, &vlen);
    TRY(zeros && saved && tn_shared_set_value(x, zeros) == TN_OK); /* x = 0, so the next result is exp(0) = 1 */
    tn_array_free(zeros);
    TRY(tn_call(f, NULL, &second) == TN_OK);             /* overwrites first's buffer */
    tn_array *now_h = tn_array_to_host(second);
    TRY(now_h);
    int64_t i0 = 0;
    tn_result chk = tn_array_check(first);
    printf("after the next call, the saved borrowed result: tn_array_check -> %s\n  %s\n",
           tn_result_string(chk), chk == TN_OK ? "(not detected: build without NDEBUG or define TN_DEBUG_BORROW)" : tn_last_error());
    printf("its copy still holds exp(x[0]) = %.8f; the new result holds %.8f\n", tn_array_get(saved, &i0), tn_array_get(now_h, &i0));
    tn_array_free(saved);
    tn_array_free(now_h);
    tn_array_free(xv);
    tn_random_state_free(rng);
    tn_function_free(f);
    tn_function_free(fc);
    tn_graph_free(g);
    return 0;
}
