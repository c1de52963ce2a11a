/* tests/test_op_table.c - the op table (tensor.h's >>ops_table section): one
   complete row per op; the flags say what the optimizer and the gradient
   drivers used to decide by lists of ops; the check that runs when the table
   is filled rejects an incomplete row with an internal error naming it, and
   then no node is built. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

static tn_op_def rows[TN_OP_COUNT];

static void copy_rows(void) {
    memset(rows, 0, sizeof rows);
    for (int op = TN_OP_NONE + 1; op < TN_OP_COUNT; op++) rows[op] = *tn__op_def(op);
}

static bool in_list(int op, const int *ops, int n) {
    for (int i = 0; i < n; i++) if (ops[i] == op) return true;
    return false;
}

TEST(test_every_row_complete) {
    copy_rows();
    CHECK(tn__op_table_check(rows, TN_OP_COUNT) == TN_OK, "%s", tn_last_error());
    CHECK(tn__op_def(TN_OP_NONE) == NULL && tn__op_def(TN_OP_COUNT) == NULL, "out of range");
    for (int op = TN_OP_NONE + 1; op < TN_OP_COUNT; op++) {
        const tn_op_def *d = tn__op_def(op);
        CHECK(d->name && d->kind && d->infer && d->label, "op %d", op);
        CHECK(d->cpu || (d->flags & TN_OPF_NO_KERNEL), "%s: a kernel", d->name);
        CHECK(d->vjp || (d->flags & TN_OPF_DISCRETE) || d->arity == 0, "%s: a vjp or the discrete flag", d->name);
        CHECK(!(d->vjp && (d->flags & TN_OPF_DISCRETE)) || (d->flags & TN_OPF_ELEMWISE), "%s: discrete with a vjp", d->name);
    }
}

/* What the flags replace: the lists of ops the code used to spell out. */
TEST(test_flags) {
    const int prologue[] = { TN_OP_SUM, TN_OP_PROD, TN_OP_MEAN, TN_OP_MAX, TN_OP_MIN, TN_OP_LOGSUMEXP };
    const int discrete_other[] = { TN_OP_ARGMAX, TN_OP_ARGMIN, TN_OP_ALL, TN_OP_ANY, TN_OP_ARGSORT, TN_OP_RANDOM, TN_OP_SIZE, TN_OP_EYE };
    const int valued[] = { TN_OP_EYE, TN_OP_CUSTOM };   /* shapes from input values */
    const int linear[] = { TN_OP_SUM, TN_OP_MEAN, TN_OP_CUMSUM, TN_OP_RESHAPE, TN_OP_DIMSHUFFLE, TN_OP_SLICE, TN_OP_BROADCAST_TO,
                           TN_OP_FLATTEN, TN_OP_ALLOC, TN_OP_GPU_FROM_HOST, TN_OP_HOST_FROM_GPU, TN_OP_ADV_SUBTENSOR, TN_OP_IM2COL, TN_OP_COL2IM, TN_OP_PRINT };
    const int no_kernel[] = { TN_OP_INPUT, TN_OP_CONSTANT, TN_OP_SHARED, TN_OP_PROJ };
    const int acc[] = { TN_OP_GEMM, TN_OP_GEMV, TN_OP_ADV_INC_SUBTENSOR, TN_OP_INC_SUBTENSOR };
#define N(a) ((int)(sizeof a / sizeof a[0]))
    for (int op = TN_OP_NONE + 1; op < TN_OP_COUNT; op++) {
        const tn_op_def *d = tn__op_def(op);
        const tn_ew_info *e = tn__ew_info(op);
        bool ew = e != NULL;
        CHECK(!(d->flags & TN_OPF_ELEMWISE) == !ew, "%s: elementwise", d->name);
        CHECK(!(d->flags & TN_OPF_INPLACE) == !(ew || op == TN_OP_COMPOSITE), "%s: in place", d->name);
        CHECK(!(d->flags & TN_OPF_INPLACE_ACC) == !in_list(op, acc, N(acc)), "%s: accumulates", d->name);
        CHECK(!(d->flags & TN_OPF_PROLOGUE) == !in_list(op, prologue, N(prologue)), "%s: prologue", d->name);
        CHECK(!(d->flags & TN_OPF_LINEAR) == !in_list(op, linear, N(linear)), "%s: linear", d->name);
        CHECK(!(d->flags & TN_OPF_NO_KERNEL) == !in_list(op, no_kernel, N(no_kernel)), "%s: no kernel", d->name);
        CHECK(!(d->flags & TN_OPF_HOST_VALUES) == !(op == TN_OP_EYE), "%s: value inputs on the host", d->name);
        CHECK(!d->value_inputs == !in_list(op, valued, N(valued)) && !d->value_inputs == !d->infer_values, "%s: value inputs", d->name);
        if (!ew) CHECK(!(d->flags & TN_OPF_DISCRETE) == !in_list(op, discrete_other, N(discrete_other)), "%s: discrete", d->name);
        CHECK(tn__op_has(op, d->flags) && tn__op_has(op, 0), "tn__op_has(%s)", d->name);
        CHECK(tn__op_kind(op) == d->kind, "tn__op_kind(%s)", d->name);
    }
#undef N
    CHECK(!tn__op_has(TN_OP_NONE, 0) && !tn__op_has(TN_OP_COUNT, 0), "no row, no flags");
}

/* The check names the row and what it lacks. */
TEST(test_check_rejects_incomplete_rows) {
    struct { int op; int field; const char *needle; } cs[] = {
        { TN_OP_EXP, 0, "type rule" }, { TN_OP_SUM, 1, "CPU kernel" }, { TN_OP_DOT, 2, "label" },
        { TN_OP_SOFTMAX, 3, "vjp" }, { TN_OP_CUMPROD, 3, "vjp" }, { TN_OP_RESHAPE, 4, "name" }, { TN_OP_SCAN, 5, "kind" },
        { TN_OP_EYE, 6, "infer_values to go with value_inputs" },
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        copy_rows();
        tn_op_def *d = &rows[cs[k].op];
        const char *name = d->name;
        switch (cs[k].field) {
        case 0: d->infer = NULL; break;
        case 1: d->cpu = NULL; break;
        case 2: d->label = NULL; break;
        case 3: d->vjp = NULL; break;
        case 4: d->name = NULL; name = "unnamed"; break;
        case 6: d->infer_values = NULL; break;
        default: d->kind = (tn_op_kind)0; break;
        }
        CHECK(tn__op_table_check(rows, TN_OP_COUNT) == TN_ERR_INTERNAL, "case %zu: accepted", k);
        CHECK_ERR(TN_ERR_INTERNAL, cs[k].needle);
        CHECK_ERR(TN_ERR_INTERNAL, name);
    }
    /* the flags that make a piece optional */
    copy_rows();
    rows[TN_OP_SOFTMAX].vjp = NULL;
    rows[TN_OP_SOFTMAX].flags |= TN_OPF_DISCRETE;
    rows[TN_OP_DOT].cpu = NULL;
    rows[TN_OP_DOT].flags |= TN_OPF_NO_KERNEL;
    CHECK(tn__op_table_check(rows, TN_OP_COUNT) == TN_OK, "%s", tn_last_error());
    memset(&rows[TN_OP_GEMV], 0, sizeof rows[TN_OP_GEMV]);      /* a row left out */
    CHECK(tn__op_table_check(rows, TN_OP_COUNT) == TN_ERR_INTERNAL, "an empty row");
    CHECK_ERR(TN_ERR_INTERNAL, "op table: the row of op");
    CHECK(tn__op_table_check(rows, TN_OP_COUNT - 1) == TN_ERR_INTERNAL, "too few rows");
}

static int logged;
static char log_msg[1024];
static void on_log(tn_log_level lv, const char *msg, void *user) {
    (void)user;
    if (lv == TN_LOG_ERROR && strstr(msg, "op table")) { logged++; snprintf(log_msg, sizeof log_msg, "%s", msg); }
}

/* Filling the table runs the check: a bad row is an internal error, logged,
   and then every constructor fails with it until a good table is filled. */
TEST(test_fill_runs_the_check) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32);
    CHECK(tn_exp(x) != NULL, "the built-in table works: %s", tn_last_error());
    copy_rows();
    rows[TN_OP_TANH].vjp = NULL;
    logged = 0;
    tn_set_log(on_log, NULL);
    CHECK(tn__op_table_fill(rows) == TN_ERR_INTERNAL, "a row without a vjp is refused");
    tn_set_log(NULL, NULL);
    CHECK(logged >= 1 && strstr(log_msg, "tanh") && strstr(log_msg, "vjp"), "logged: %d '%s'", logged, log_msg);
    CHECK(tn_exp(x) == NULL, "no node is built with a bad table");
    CHECK_ERR(TN_ERR_INTERNAL, "tn_exp: op table: the row of op");
    CHECK_ERR(TN_ERR_INTERNAL, "(tanh) has no vjp");
    CHECK(tn_sum(x, NULL, 0, false) == NULL, "nor any other");
    CHECK_ERR(TN_ERR_INTERNAL, "tn_sum");
    CHECK(tn__op_table_fill(NULL) == TN_OK, "the built-in rows again: %s", tn_last_error());
    CHECK(tn_exp(x) != NULL && tn_sum(x, NULL, 0, false) != NULL, "works again: %s", tn_last_error());
    tn_graph_free(g);
}

/* The gradient drivers read the table: a discrete op passes zero, a row's
   missing forward mode is reported by name. */
TEST(test_drivers_read_the_table) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64), *v = tn_vector(g, "v", TN_F64);
    /* argmax is discrete: a wrt reached only through it gets zeros, not an error */
    tn_var *c = tn_sum(tn_mul(tn_cast(tn_argmax(x, 0, false), TN_F64), tn_lit(x, 2.0)), NULL, 0, false);
    tn_var *gx = tn_grad1(c, x);
    CHECK(gx != NULL, "%s", tn_last_error());
    /* scan has no forward mode: its row has no jvp and is not linear */
    CHECK(!tn__op_def(TN_OP_SCAN)->jvp && !tn__op_has(TN_OP_SCAN, TN_OPF_LINEAR), "scan's row");
    /* a linear op's forward mode is the op itself (of the tangent: v, given x's shape) */
    tn_var *r = tn_rop(tn_cumsum(x, 0), 1, &x, &v);
    tn_var *t = r ? r->in[0] : NULL;
    if (t && t->op == TN_OP_ALLOC) t = t->in[0];
    CHECK(r && r->op == TN_OP_CUMSUM && t == v, "rop of cumsum is cumsum of the tangent: %s", tn_last_error());
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_every_row_complete);
    TH_RUN(test_flags);
    TH_RUN(test_check_rejects_incomplete_rows);
    TH_RUN(test_fill_runs_the_check);
    TH_RUN(test_drivers_read_the_table);
    tn_shutdown();
    TH_END();
}
