/* Print options (tensor.h >>print): tn_array_print_with and
   tn_set_print_options against NumPy's own str() under set_printoptions
   (tests/print_vectors.h, made by tests/print_vectors.py): precision on
   float64, float32 and float16, fixed and scientific columns, NaN and inf,
   rounding ties, linewidth wrapping, summaries at several thresholds and
   edgeitems in 1 to 3 dims, a whole array printed with TN_PRINT_ALL; and the
   options checked by code and words. */
#define _POSIX_C_SOURCE 200809L
#include "tensor.h"
#include "harness.h"
#include "print_vectors.h"

static tn_array *case_array(const struct print_case *c) {
    int64_t n = 1;
    for (int d = 0; d < c->ndim; d++) n *= c->shape[d];
    double *v = (double *)malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = c->values ? c->values[i] : (double)i * c->step + c->start;
    tn_array *f = tn_array_from_data(TN_F64, c->ndim, c->shape, v), *a = tn_array_astype(f, c->t);
    tn_array_free(f);
    free(v);
    return a;
}

static char *print_to_string(const tn_array *a, const tn_print_options *o) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    tn_result r = o ? tn_array_print_with(a, o, m) : tn_array_print(a, m);
    fclose(m);
    if (r != TN_OK) { free(buf); return NULL; }
    if (len && buf[len - 1] == '\n') buf[len - 1] = 0;     /* print ends the line; str() does not */
    return buf;
}

TEST(test_as_numpy) {
    for (size_t k = 0; k < sizeof print_cases / sizeof print_cases[0]; k++) {
        const struct print_case *c = &print_cases[k];
        tn_print_options o = { c->precision, c->threshold, c->edgeitems, c->linewidth };
        tn_array *a = case_array(c);
        char *got = print_to_string(a, &o);
        CHECK(got && !strcmp(got, c->want), "case %zu (%s, precision %d, threshold %lld, edgeitems %d, linewidth %d):\ngot\n%s\nNumPy\n%s",
              k, tn_dtype_name(c->t), c->precision, (long long)c->threshold, c->edgeitems, c->linewidth, got ? got : tn_last_error(), c->want);
        free(got);
        tn_array_free(a);
    }
}

/* The process-wide options: set, followed by tn_array_print and tn_array_snprint, reset to NumPy's. */
TEST(test_global_options) {
    const struct print_case *c = &print_cases[1];                  /* precision 3 */
    tn_array *a = case_array(c);
    tn_print_options d = tn_get_print_options(), o = d;
    CHECK(d.precision == 8 && d.threshold == 1000 && d.edgeitems == 3 && d.linewidth == 75, "NumPy's defaults");
    o.precision = 3;
    CHECK(tn_set_print_options(&o) == TN_OK, "%s", tn_last_error());
    char *got = print_to_string(a, NULL), buf[256];
    CHECK(got && !strcmp(got, c->want), "tn_array_print follows:\n%s", got);
    CHECK(tn_array_snprint(a, buf, sizeof buf) > 0 && !strcmp(buf, c->want), "tn_array_snprint follows:\n%s", buf);
    free(got);
    CHECK(tn_set_print_options(NULL) == TN_OK && tn_get_print_options().precision == 8, "reset");
    got = print_to_string(a, NULL);
    CHECK(got && !strcmp(got, print_cases[0].want), "NumPy's defaults again:\n%s", got);
    free(got);
    tn_array_free(a);
}

TEST(test_bad_options) {
    tn_print_options good = tn_get_print_options();
    struct { tn_print_options o; const char *words; } bad[] = {
        { { -1, 1000, 3, 75 }, "precision -1 is outside [0, 100]" },
        { { 8, -5, 3, 75 }, "threshold -5 is negative" },
        { { 8, 1000, 0, 75 }, "edgeitems 0 is below 1" },
        { { 8, 1000, 3, 0 }, "linewidth 0 is below 1" },
    };
    tn_array *a = tn_array_zeros(TN_F32, 1, (int64_t[]){ 3 });
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tn_clear_error();
        CHECK(tn_set_print_options(&bad[k].o) == TN_ERR_INVALID, "case %zu refused", k);
        CHECK_ERR(TN_ERR_INVALID, bad[k].words);
        CHECK(strstr(tn_last_error(), "tn_set_print_options: "), "names the function: %s", tn_last_error());
        CHECK(tn_array_print_with(a, &bad[k].o, stdout) == TN_ERR_INVALID, "case %zu refused by a print", k);
        CHECK_ERR(TN_ERR_INVALID, "tn_array_print_with: ");
    }
    tn_print_options now = tn_get_print_options();
    /* field by field: memcmp would compare the padding after precision too */
    CHECK(now.precision == good.precision && now.threshold == good.threshold && now.edgeitems == good.edgeitems &&
          now.linewidth == good.linewidth, "a refused set changes nothing");
    tn_array_free(a);
}

int main(void) {
    TH_RUN(test_as_numpy);
    TH_RUN(test_global_options);
    TH_RUN(test_bad_options);
    TH_END();
}
