/* tests/scan_seed.h - the seed deck's recurrence as a scan, and the plain C
   loop it is checked against (float64); shared by the scan, stand-in device
   and GPU tests. Include after tensor.h. */
#ifndef TN_TESTS_SCAN_SEED_H
#define TN_TESTS_SCAN_SEED_H

/* y = A x for A (m, n) row-major */
static void matvec(const double *A, const double *x, double *y, int m, int n) {
    for (int i = 0; i < m; i++) { double s = 0; for (int j = 0; j < n; j++) s += A[i * n + j] * x[j]; y[i] = s; }
}

/* >>seed recurrence: x(n) = tanh(W x(n-1) + W1 u(n) + W2 u(n-4) + Wf y(n-1)), y(n) = Wout x(n-3) */

enum { NX = 5, NU = 3, NY = 2 };

static tn_result seed_step(tn_scan_step *s, void *user) {
    (void)user;
    tn_var *u_tm4 = s->seq[0][0], *u_t = s->seq[0][1];
    tn_var *x_tm3 = s->out[0][0], *x_tm1 = s->out[0][1], *y_tm1 = s->out[1][0];
    tn_var *W = s->non_seq[0], *W1 = s->non_seq[1], *W2 = s->non_seq[2], *Wf = s->non_seq[3], *Wout = s->non_seq[4];
    tn_var *pre = tn_add(tn_add(tn_dot(W, x_tm1), tn_dot(W1, u_t)), tn_add(tn_dot(W2, u_tm4), tn_dot(Wf, y_tm1)));
    s->outputs[0] = tn_tanh(pre);
    s->outputs[1] = tn_dot(Wout, x_tm3);
    return TN_OK;
}

/* builds the seed's scan over inputs ins[0..8): W W1 W2 Wf Wout u x0 y0 */
static tn_result seed_scan(tn_graph *g, tn_var **ins, tn_var **outs, bool static_len, int64_t L) {
    tn_dtype t = TN_F64;
    ins[0] = tn_input(g, "W", t, 2, (int64_t[]){NX, NX}, NULL);
    ins[1] = tn_input(g, "W1", t, 2, (int64_t[]){NX, NU}, NULL);
    ins[2] = tn_input(g, "W2", t, 2, (int64_t[]){NX, NU}, NULL);
    ins[3] = tn_input(g, "Wf", t, 2, (int64_t[]){NX, NY}, NULL);
    ins[4] = tn_input(g, "Wout", t, 2, (int64_t[]){NY, NX}, NULL);
    ins[5] = tn_input(g, "u", t, 2, (int64_t[]){static_len ? L : -1, NU}, NULL);
    ins[6] = tn_input(g, "x0", t, 2, (int64_t[]){3, NX}, NULL);
    ins[7] = tn_input(g, "y0", t, 1, (int64_t[]){NY}, NULL);
    static const int utaps[2] = { -4, 0 }, xtaps[2] = { -3, -1 };
    tn_scan_seq seq = { ins[5], 2, utaps };
    tn_scan_out outs_info[2] = { { ins[6], 2, xtaps }, { ins[7], 0, NULL } };
    return tn_scan(&(tn_scan_desc){ .step = seed_step, .n_sequences = 1, .sequences = &seq, .n_outputs = 2,
                                    .outputs = outs_info, .n_non_sequences = 5, .non_sequences = ins, .name = "seed" },
                   outs, NULL, NULL);
}

/* the plain C loop: xs (T, NX), ys (T, NY) */
static void seed_ref(double *const *P, int64_t L, double *xs, double *ys) {
    const double *W = P[0], *W1 = P[1], *W2 = P[2], *Wf = P[3], *Wout = P[4], *u = P[5], *x0 = P[6], *y0 = P[7];
    int64_t T = L - 4;
    for (int64_t n = 0; n < T; n++) {
        const double *xm1 = n >= 1 ? xs + (n - 1) * NX : x0 + 2 * NX;
        const double *xm3 = n >= 3 ? xs + (n - 3) * NX : x0 + (n) * NX;      /* x(-3) is x0[0] */
        const double *ym1 = n >= 1 ? ys + (n - 1) * NY : y0;
        double a[NX], b[NX], c[NX], d[NX];
        matvec(W, xm1, a, NX, NX);
        matvec(W1, u + (n + 4) * NU, b, NX, NU);
        matvec(W2, u + n * NU, c, NX, NU);
        matvec(Wf, ym1, d, NX, NY);
        for (int i = 0; i < NX; i++) xs[n * NX + i] = tanh(a[i] + b[i] + c[i] + d[i]);
        matvec(Wout, xm3, ys + n * NY, NY, NX);
    }
}

#endif
