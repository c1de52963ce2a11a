/* rnn_scan.c - the seed deck's scan example: a recurrent network with taps,
       x(n) = tanh(W x(n-1) + W1 u(n) + W2 u(n-4) + Wf y(n-1))
       y(n) = Wout x(n-3)
   built with tn_scan (sequence taps -4 and 0, output taps -3 and -1), run,
   printed, and checked against a plain C loop in float64. Then the gradient
   of sum(y^2) with respect to W through time (BPTT), checked against finite
   differences. With a GPU (TENSOR_FLAGS=device=cuda) both loops run on it:
   the compiled function's debugprint shows GpuScan and its step's graph.

   Build: cc -std=c11 -O2 -I. examples/rnn_scan.c -o rnn_scan -lm -lpthread -ldl
*/
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"
#include <math.h>
#include <stdlib.h>

enum { NX = 6, NU = 3, NY = 2, LEN = 24 };

static tn_result step(tn_scan_step *s, void *user) {
    (void)user;
    tn_var *u_tm4 = s->seq[0][0], *u_t = s->seq[0][1];
    tn_var *x_tm3 = s->out[0][0], *x_tm1 = s->out[0][1], *y_tm1 = s->out[1][0];
    tn_var *W = s->non_seq[0], *W1 = s->non_seq[1], *W2 = s->non_seq[2], *Wf = s->non_seq[3], *Wout = s->non_seq[4];
    s->outputs[0] = tn_tanh(tn_add(tn_add(tn_dot(W, x_tm1), tn_dot(W1, u_t)), tn_add(tn_dot(W2, u_tm4), tn_dot(Wf, y_tm1))));
    s->outputs[1] = tn_dot(Wout, x_tm3);
    return TN_OK;
}

static void matvec(const double *A, const double *x, double *y, int m, int n) {
    for (int i = 0; i < m; i++) { double s = 0; for (int j = 0; j < n; j++) s += A[i * n + j] * x[j]; y[i] = s; }
}

/* the same recurrence as a plain loop; returns sum(y^2) */
static double plain_loop(double *const *P, double *xs, double *ys) {
    const double *W = P[0], *W1 = P[1], *W2 = P[2], *Wf = P[3], *Wout = P[4], *u = P[5], *x0 = P[6], *y0 = P[7];
    double cost = 0;
    for (int n = 0; n < LEN - 4; n++) {
        const double *xm1 = n >= 1 ? xs + (n - 1) * NX : x0 + 2 * NX;
        const double *xm3 = n >= 3 ? xs + (n - 3) * NX : x0 + n * NX;
        const double *ym1 = n >= 1 ? ys + (n - 1) * NY : y0;
        double a[NX], b[NX], c[NX], d[NX];
        matvec(W, xm1, a, NX, NX); matvec(W1, u + (n + 4) * NU, b, NX, NU);
        matvec(W2, u + n * NU, c, NX, NU); matvec(Wf, ym1, d, NX, NY);
        for (int i = 0; i < NX; i++) xs[n * NX + i] = tanh(a[i] + b[i] + c[i] + d[i]);
        matvec(Wout, xm3, ys + n * NY, NY, NX);
        for (int i = 0; i < NY; i++) cost += ys[n * NY + i] * ys[n * NY + i];
    }
    return cost;
}

static double *to_f64(const tn_array *a) {
    size_t n = (size_t)tn_array_size(a) + 1;
    double *d = (double *)malloc(n * sizeof *d);
    if (d) tn_array_copy_to(a, TN_F64, d, n * sizeof *d);
    return d;
}

int main(void) {
    if (tn_init(NULL) != TN_OK) { fprintf(stderr, "%s\n", tn_last_error()); return 1; }
    tn_graph *g = tn_graph_new();
    const char *names[8] = { "W", "W1", "W2", "Wf", "Wout", "u", "x0", "y0" };
    int64_t shapes[8][2] = { {NX, NX}, {NX, NU}, {NX, NU}, {NX, NY}, {NY, NX}, {LEN, NU}, {3, NX}, {NY, 0} };
    tn_var *in[8];
    for (int i = 0; i < 8; i++) in[i] = tn_input(g, names[i], TN_F64, i == 7 ? 1 : 2, shapes[i], NULL);

    static const int utaps[2] = { -4, 0 }, xtaps[2] = { -3, -1 };
    tn_scan_seq seq = { in[5], 2, utaps };                          /* u(n-4), u(n) */
    tn_scan_out outs_info[2] = { { in[6], 2, xtaps }, { in[7], 0, NULL } };   /* x(n-3), x(n-1); y(n-1) */
    tn_var *xy[2];
    if (tn_scan(&(tn_scan_desc){ .step = step, .n_sequences = 1, .sequences = &seq, .n_outputs = 2, .outputs = outs_info,
                                 .n_non_sequences = 5, .non_sequences = in, .name = "rnn" }, xy, NULL, NULL) != TN_OK) {
        fprintf(stderr, "tn_scan: %s\n", tn_last_error());
        return 1;
    }
    tn_var *cost = tn_sum(tn_sqr(xy[1]), NULL, 0, false);
    tn_var *gW = tn_grad1(cost, in[0]);
    tn_var *outs[4] = { xy[0], xy[1], cost, gW };
    tn_func *f = gW ? tn_function(g, &(tn_func_desc){ .n_inputs = 8, .inputs = in, .n_outputs = 4, .outputs = outs, .name = "rnn" }) : NULL;
    if (!f) { fprintf(stderr, "%s\n", tn_last_error()); return 1; }
    puts("y = scan(...)[1]:");
    tn_debugprint(xy[1], stdout);
    puts("\nthe compiled function:");
    tn_debugprint_function(f, stdout);

    tn_array *a[8];
    double *P[8];
    for (int i = 0; i < 8; i++) {
        a[i] = tn_array_rand_uniform(TN_F64, i == 7 ? 1 : 2, shapes[i], -0.7, 0.7, 100 + (uint64_t)i * 1000003);
        P[i] = to_f64(a[i]);
    }
    tn_array *res[4];
    if (tn_call(f, a, res) != TN_OK) { fprintf(stderr, "tn_call: %s\n", tn_last_error()); return 1; }
    printf("\ny (%lld steps, first 5 rows):\n", (long long)res[1]->shape[0]);
    tn_array *head = tn_array_slice(res[1], 0, 0, 5, 1);
    tn_array_print(head, stdout);
    tn_array_free(head);

    double xs[(LEN - 4) * NX], ys[(LEN - 4) * NY];
    double c_ref = plain_loop(P, xs, ys);
    double *gx = to_f64(res[0]), *gy = to_f64(res[1]), *gc = to_f64(res[2]), *gw = to_f64(res[3]);
    double ex = 0, ey = 0;
    for (int i = 0; i < (LEN - 4) * NX; i++) ex = fmax(ex, fabs(gx[i] - xs[i]));
    for (int i = 0; i < (LEN - 4) * NY; i++) ey = fmax(ey, fabs(gy[i] - ys[i]));
    printf("\ncheck against the plain C loop: max |x - ref| = %.3g, max |y - ref| = %.3g, cost %.12g vs %.12g\n",
           ex, ey, gc[0], c_ref);

    /* d cost / d W by central differences on the plain loop */
    double eg = 0, h = 1e-6;
    for (int k = 0; k < NX * NX; k++) {
        double keep = P[0][k];
        P[0][k] = keep + h; double cp = plain_loop(P, xs, ys);
        P[0][k] = keep - h; double cm = plain_loop(P, xs, ys);
        P[0][k] = keep;
        eg = fmax(eg, fabs(gw[k] - (cp - cm) / (2 * h)));
    }
    printf("gradient through time: max |dcost/dW - finite differences| = %.3g\n", eg);
    bool ok = ex < 1e-12 && ey < 1e-12 && fabs(gc[0] - c_ref) < 1e-10 && eg < 1e-6;
    printf("%s\n", tn_function_device_steps(f) > 0 ? "Used the gpu" : "Used the cpu");
    puts(ok ? "OK" : "MISMATCH");

    free(gx); free(gy); free(gc); free(gw);
    for (int i = 0; i < 4; i++) tn_array_free(res[i]);
    for (int i = 0; i < 8; i++) { tn_array_free(a[i]); free(P[i]); }
    tn_function_free(f);
    tn_graph_free(g);
    tn_shutdown();
    return ok ? 0 : 1;
}
