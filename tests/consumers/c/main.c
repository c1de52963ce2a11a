/* A program that uses tensor.h as an installed (or vendored) library would:
   sum(exp(x / 2) + x) through a compiled function, checked against plain C.
   Built by tests/check_consumers.sh with CMake (add_subdirectory and
   find_package) and with pkg-config + cc. */
#include <math.h>
#include <stdio.h>
#include <tensor.h>

int main(void) {
    const double xs[] = { -1.5, -0.25, 0.0, 0.75, 2.0, 3.5 };
    const int64_t n = 6;
    double want = 0;
    for (int64_t i = n - 1; i >= 0; i--) want += xs[i] + exp(0.5 * xs[i]);

    if (tn_init(NULL) != TN_OK) { fprintf(stderr, "%s\n", tn_last_error()); return 1; }
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *y = tn_sum(tn_add(tn_exp(tn_mul(x, tn_scalar_const(g, 0.5))), x), NULL, 0, false);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    tn_array *in = tn_array_from_data(TN_F64, 1, &n, xs), *out = NULL;
    if (!f || !in || tn_call(f, &in, &out) != TN_OK) { fprintf(stderr, "%s\n", tn_last_error()); return 1; }
    double got = tn_array_get(out, NULL);
    tn_array_free(out); tn_array_free(in); tn_function_free(f); tn_graph_free(g);

    printf("tensor.h %s: sum = %.12f, plain C %.12f\n", TENSOR_VERSION, got, want);
    if (!(fabs(got - want) <= 1e-12 * fabs(want))) { printf("FAIL: the sums differ\n"); return 1; }
    printf("OK\n");
    return 0;
}
