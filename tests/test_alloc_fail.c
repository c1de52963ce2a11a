/* tests/test_alloc_fail.c - every allocation of a realistic program fails
   once, in turn. The program is the seed's logistic regression written as
   the tutorial writes it (gradients from tn_grad, a training function with
   updates of shared variables, a prediction function), called a few times,
   then freed. For each k the k-th allocation through TN_MALLOC/TN_REALLOC
   fails; the run must then end in a clean error (TN_ERR_OOM with a message)
   or with every result equal to a float64 reference written out by hand:
   never TN_OK with a wrong value. A failed call leaves the shared variables
   as the calls before it left them (no lost or half-applied update), and
   after the frees every allocation is returned (no leak).

   TN_ALLOC_FAIL_K=k runs only k (and says what happened). */
#define _POSIX_C_SOURCE 200809L
#include "alloc_hooks.h"
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

enum { N = 24, FEATS = 7, CALLS = 3 };

static double Xd[N * FEATS], Yd[N], W0d[FEATS];

/* one step of the reference: returns the cost before the update, the predictions in pred */
static double ref_step(double *w, double *b, double *pred) {
    double p[N], cost = 0, gb = 0, reg = 0, gw[FEATS];
    for (int i = 0; i < N; i++) {
        double z = *b;
        for (int j = 0; j < FEATS; j++) z += Xd[i * FEATS + j] * w[j];
        p[i] = 1 / (1 + exp(-z));
        pred[i] = p[i] > 0.5;
        cost += Yd[i] ? -log(p[i]) : -log1p(-p[i]);
    }
    for (int j = 0; j < FEATS; j++) { gw[j] = 0.02 * w[j]; reg += w[j] * w[j]; }
    for (int i = 0; i < N; i++) {
        double d = (p[i] - Yd[i]) / N;
        gb += d;
        for (int j = 0; j < FEATS; j++) gw[j] += d * Xd[i * FEATS + j];
    }
    for (int j = 0; j < FEATS; j++) w[j] -= 0.1 * gw[j];
    *b -= 0.1 * gb;
    return cost / N + 0.01 * reg;
}

static bool close_all(const tn_array *a, const double *ref, int64_t n) {
    if (!a || tn_array_size(a) != n) return false;
    for (int64_t i = 0; i < n; i++) {
        int64_t idx[1] = { i };
        double v = a->ndim ? tn_array_get(a, idx) : tn_array_get(a, NULL);
        if (!th_close(v, ref[i], 1e-12, 1e-14)) return false;
    }
    return true;
}

typedef enum { RUN_OK, RUN_CLEAN_ERROR, RUN_WRONG } run_end;

/* The program. On an error, says where in *where and frees what exists. */
static run_end program(const char **where, char *msg, size_t cap) {
    run_end end = RUN_OK;
    tn_graph *g = NULL;
    tn_func *train = NULL, *predict = NULL;
    tn_array *x = NULL, *y = NULL, *w0 = NULL, *b0 = NULL, *out[2] = {0}, *wv = NULL;
    double w[FEATS], b = 0, pred[N];
    memcpy(w, W0d, sizeof w);
    *where = "";
#define STEP(what, ok) do { if (!(ok)) { *where = (what); goto failed; } } while (0)
    STEP("tn_array_from_data", (x = tn_array_from_data(TN_F64, 2, (int64_t[]){N, FEATS}, Xd)) &&
                               (y = tn_array_from_data(TN_F64, 1, (int64_t[]){N}, Yd)) &&
                               (w0 = tn_array_from_data(TN_F64, 1, (int64_t[]){FEATS}, W0d)));
    STEP("tn_array_scalar", (b0 = tn_array_scalar(TN_F64, 0.0)) != NULL);
    STEP("tn_graph_new", (g = tn_graph_new()) != NULL);
    tn_var *vx = tn_matrix(g, "x", TN_F64), *vy = tn_vector(g, "y", TN_F64);
    tn_var *vw = tn_shared(g, "w", w0), *vb = tn_shared(g, "b", b0);
    tn_var *one = tn_scalar_const(g, 1.0);
    /* the tutorial's literal formulas */
    tn_var *p1 = tn_div(one, tn_add(one, tn_exp(tn_sub(tn_neg(tn_dot(vx, vw)), vb))));
    tn_var *prediction = tn_gt(p1, tn_scalar_const(g, 0.5));
    tn_var *xent = tn_sub(tn_neg(tn_mul(vy, tn_log(p1))), tn_mul(tn_sub(one, vy), tn_log(tn_sub(one, p1))));
    tn_var *cost = tn_add(tn_mean(xent, NULL, 0, false), tn_mul(tn_scalar_const(g, 0.01), tn_sum(tn_sqr(vw), NULL, 0, false)));
    STEP("graph constructors", cost && prediction);
    tn_var *wrt[2] = { vw, vb }, *gr[2];
    STEP("tn_grad", tn_grad(cost, 2, wrt, gr, NULL) == TN_OK);
    tn_update up[2] = { { vw, tn_sub(vw, tn_mul(tn_scalar_const(g, 0.1), gr[0])) },
                        { vb, tn_sub(vb, tn_mul(tn_scalar_const(g, 0.1), gr[1])) } };
    STEP("update constructors", up[0].value && up[1].value);
    tn_var *ins[2] = { vx, vy }, *outs[2] = { prediction, cost };
    STEP("tn_function", (train = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = ins, .n_outputs = 2,
                               .outputs = outs, .n_updates = 2, .updates = up, .name = "train" })) != NULL);
    STEP("tn_function", (predict = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &vx,
                                 .n_outputs = 1, .outputs = &prediction, .name = "predict" })) != NULL);
    for (int c = 0; c < CALLS; c++) {
        double wb[FEATS], bb = b;
        memcpy(wb, w, sizeof wb);
        double cref = ref_step(w, &b, pred);
        tn_result r = tn_call(train, (tn_array *[]){ x, y }, out);
        if (r != TN_OK) {
            /* nothing applied: the shared values are still those before the call */
            tn_array *ws = tn_shared_get_value(vw);
            if (ws && !close_all(ws, wb, FEATS)) { snprintf(msg, cap, "call %d failed but changed w", c); end = RUN_WRONG; }
            tn_array_free(ws);
            (void)bb;
            *where = "tn_call";
            goto failed;
        }
        if (!close_all(out[0], pred, N) || !th_close(tn_array_get(out[1], NULL), cref, 1e-12, 0)) {
            snprintf(msg, cap, "call %d: TN_OK with a wrong result (cost %.17g, reference %.17g)", c,
                     out[1] ? tn_array_get(out[1], NULL) : NAN, cref);
            end = RUN_WRONG;
        }
        tn_array_free(out[0]); tn_array_free(out[1]); out[0] = out[1] = NULL;
        if (end == RUN_WRONG) goto done;
    }
    STEP("tn_call", tn_call(predict, &x, out) == TN_OK);
    {   /* predictions with the trained weights */
        double wt[FEATS], bt = b, p2[N];
        memcpy(wt, w, sizeof wt);
        ref_step(wt, &bt, p2);
        if (!close_all(out[0], p2, N)) { snprintf(msg, cap, "predict: TN_OK with wrong predictions"); end = RUN_WRONG; }
    }
    STEP("tn_shared_get_value", (wv = tn_shared_get_value(vw)) != NULL);
    if (end == RUN_OK && !close_all(wv, w, FEATS)) { snprintf(msg, cap, "w after %d calls differs from the reference", CALLS); end = RUN_WRONG; }
    goto done;
failed:
    if (end != RUN_WRONG) {
        tn_result r = tn_last_result();
        const char *m = tn_last_error();
        /* the message starts with the public function called ("tn_grad: ..."), never names an internal one */
        size_t n = strlen(*where);
        bool one_fn = !strchr(*where, ' ');
        bool named = !strncmp(m, one_fn ? *where : "tn_", one_fn ? n : 3) && (!one_fn || m[n] == ':' || m[n] == ' ') &&
                     !strstr(m, "tn__");
        /* a constructor given the NULL of a failed one says TN_ERR_NULL, quoting the first error */
        bool chained = r == TN_ERR_NULL && !one_fn && strstr(m, "out of") && strstr(m, "memory");
        if ((r == TN_ERR_OOM || chained) && named) end = RUN_CLEAN_ERROR;
        else {
            snprintf(msg, cap, "%.40s failed with %s (%.150s): want TN_ERR_OOM naming the public function", *where,
                     tn_result_string(r), m);
            end = RUN_WRONG;
        }
    }
done:
#undef STEP
    tn_array_free(out[0]); tn_array_free(out[1]); tn_array_free(wv);
    tn_function_free(train); tn_function_free(predict);
    tn_graph_free(g);
    tn_array_free(x); tn_array_free(y); tn_array_free(w0); tn_array_free(b0);
    return end;
}

static long total;

TEST(test_program_correct_without_failures) {
    const char *where;
    char msg[512] = "";
    program(&where, msg, sizeof msg);         /* warms the library's lazy state */
    long live0 = atomic_load(&th_alloc_live);
    atomic_store(&th_alloc_count, 0);
    run_end e = program(&where, msg, sizeof msg);
    total = atomic_load(&th_alloc_count);
    CHECK(e == RUN_OK, "%s: %s %s", where, msg, tn_last_error());
    CHECK(atomic_load(&th_alloc_live) == live0, "%ld allocations not freed", atomic_load(&th_alloc_live) - live0);
    CHECK(total > 100, "only %ld allocations: the hooks are not in use", total);
}

TEST(test_every_allocation_fails_once) {
    const char *one = getenv("TN_ALLOC_FAIL_K");
    long lo = one ? atol(one) : 1, hi = one ? atol(one) : total + 5;
    int wrong = 0, leaks = 0, clean = 0, ok = 0;
    for (long k = lo; k <= hi; k++) {
        const char *where;
        char msg[512] = "";
        long live0 = atomic_load(&th_alloc_live);
        atomic_store(&th_alloc_count, 0);
        th_alloc_fail_at = k;
        tn_clear_error();
        run_end e = program(&where, msg, sizeof msg);
        th_alloc_fail_at = -1;
        long leaked = atomic_load(&th_alloc_live) - live0;
        if (e == RUN_WRONG && wrong++ < 10) CHECK(0, "k=%ld: %s", k, msg);
        if (leaked && leaks++ < 10) CHECK(0, "k=%ld: %ld allocations not freed (failed in %s: %s)", k, leaked, where, tn_last_error());
        clean += e == RUN_CLEAN_ERROR;
        ok += e == RUN_OK;
        if (one) printf("k=%ld: %s%s%s (%s)\n", k, e == RUN_OK ? "ok" : e == RUN_CLEAN_ERROR ? "clean error in " : "WRONG ",
                        where, msg, tn_last_error());
    }
    printf("alloc_fail: %ld allocations; %d clean errors, %d correct results, %d wrong, %d leaking\n",
           total, clean, ok, wrong, leaks);
    CHECK(one || clean > 0, "no injected failure was reported as an error");
}

int main(void) {
    setenv("TENSOR_FLAGS", "threads=1", 1);   /* one thread: the k-th allocation is the same every run */
    tn_init(NULL);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N * FEATS; i++) { s = s * 6364136223846793005ull + 1442695040888963407ull; Xd[i] = (double)(s >> 11) / 9007199254740992.0 * 4 - 2; }
    for (int i = 0; i < N; i++) Yd[i] = (i * 7 + 3) % 5 < 2;
    for (int j = 0; j < FEATS; j++) W0d[j] = 0.3 * sin(1.0 + j);
    TH_RUN(test_program_correct_without_failures);
    TH_RUN(test_every_allocation_fails_once);
    tn_shutdown();
    TH_END();
}
