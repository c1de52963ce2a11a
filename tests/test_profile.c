/* The profiler: report sections and per-node lines, counts per call, the
   unchanged-input detection behind the advice, reset and errors. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "harness.h"

static char *report(const tn_func *f, tn_result *r) {
    FILE *t = tmpfile();
    if (!t) return NULL;
    *r = tn_profile_print(f, t);
    long n = ftell(t);
    rewind(t);
    char *s = (char *)malloc((size_t)n + 1);
    if (s) { size_t got = fread(s, 1, (size_t)n, t); s[got] = 0; }
    fclose(t);
    return s;
}
static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}
static int count_lines(const char *s) { int n = 0; for (; *s; s++) n += *s == '\n'; return n; }
static char *toposort(const tn_func *f) {
    FILE *t = tmpfile();
    if (!t) return NULL;
    tn_print_toposort(f, t);
    long n = ftell(t);
    rewind(t);
    char *s = (char *)malloc((size_t)n + 1);
    if (s) { size_t got = fread(s, 1, (size_t)n, t); s[got] = 0; }
    fclose(t);
    return s;
}

/* The Apply section: lines after "<Apply name>" up to the blank line. */
static int apply_lines(const char *s, int calls, int *bad) {
    const char *p = strstr(s, "<Apply name>");
    int n = 0;
    *bad = 0;
    if (!p) return -1;
    p = strchr(p, '\n');
    while (p && p[1] && p[1] != '\n') {
        p++;
        double pc, cum, t, tpc;
        char type[16];
        unsigned long long nc;
        int id;
        if (sscanf(p, " %lf%% %lf%% %les %les %15s %llu %d", &pc, &cum, &t, &tpc, type, &nc, &id) != 7 ||
            nc != (unsigned long long)calls || t < 0 || pc < 0 || pc > 100.0001 || cum > 100.05 || strcmp(type, "cpu") != 0)
            (*bad)++;
        n++;
        p = strchr(p, '\n');
    }
    return n;
}

TEST(test_profile_report) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32), *v = tn_vector(g, "v", TN_F32);
    tn_array *wv = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ 64, 32 }, 0, 1, 1);
    tn_var *w = tn_shared(g, "w", wv);
    tn_var *y = tn_sum(tn_tanh(tn_add(tn_dot(x, w), v)), NULL, 0, false);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 2, .inputs = (tn_var *[]){ x, v }, .n_outputs = 1, .outputs = &y, .name = "net" });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_result r;
    CHECK(tn_profile_print(f, stdout) == TN_ERR_INVALID, "not profiled yet");
    CHECK_ERR(TN_ERR_INVALID, "net is not profiled");
    CHECK(tn_profile_enable(f, true) == TN_OK, "enable");
    tn_array *xv = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ 100, 64 }, 0, 1, 2);
    tn_array *vv = tn_array_rand_normal(TN_F32, 1, (int64_t[]){ 32 }, 0, 1, 3), *out = NULL;
    enum { CALLS = 7 };
    for (int i = 0; i < CALLS; i++) {
        CHECK(tn_call(f, (tn_array *[]){ xv, vv }, &out) == TN_OK, "call: %s", tn_last_error());
        tn_array_free(out);
        out = NULL;
        if (i == 2) tn_array_set(vv, (int64_t[]){ 5 }, 0.25);   /* v changes once; x never */
    }
    char *s = report(f, &r);
    CHECK(r == TN_OK && s, "print: %s", tn_last_error());
    if (s) {
        const char *sections[] = { "Function profiling", "Message: net", "Time in 7 calls to tn_call", "Time in the executor",
                                   "Time in ops", "Compile time: not measured", "\nClass\n", "<Class name>", "\nOps\n",
                                   "<Op name>", "\nApply\n", "<Apply name>", "in cpu ops,", "in gpu ops and",
                                   "in transfer ops", "\nAdvice\n", "  none\n" };
        for (size_t i = 0; i < sizeof sections / sizeof *sections; i++)
            CHECK(strstr(s, sections[i]) != NULL, "section '%s' missing:\n%s", sections[i], s);
        char *topo = toposort(f);
        int n_steps = topo ? count_lines(topo) : -1, bad = 0;
        CHECK(apply_lines(s, CALLS, &bad) == n_steps && bad == 0, "one well-formed Apply line per step (%d steps, %d bad):\n%s", n_steps, bad, s);
        CHECK(count(s, "Spent ") == 1 && strstr(s, "(100.0%) in cpu ops"), "all time in cpu ops:\n%s", s);
        free(topo);
    }
    free(s);
    /* inputs: x unchanged in every call, v changed once */
    CHECK(tn_profile_input_unchanged(f, 0), "x unchanged");
    CHECK(!tn_profile_input_unchanged(f, 1), "v changed");
    CHECK(!tn_profile_input_unchanged(f, 2) && !tn_profile_input_unchanged(NULL, 0), "out of range");
    /* a different array with the same bytes is a different input (pointer compared) */
    tn_profile_reset(f);
    tn_array *x2 = tn_array_copy(xv);
    CHECK(tn_call(f, (tn_array *[]){ xv, vv }, &out) == TN_OK, "call"); tn_array_free(out);
    CHECK(tn_call(f, (tn_array *[]){ x2, vv }, &out) == TN_OK, "call"); tn_array_free(out);
    CHECK(!tn_profile_input_unchanged(f, 0) && tn_profile_input_unchanged(f, 1), "after reset: x's array changed, v did not");
    s = report(f, &r);
    CHECK(s && strstr(s, "Time in 2 calls"), "reset counts:\n%s", s ? s : "");
    free(s);
    CHECK(tn_profile_enable(f, false) == TN_OK && tn_profile_print(f, stdout) == TN_ERR_INVALID, "disable");
    CHECK(tn_profile_enable(NULL, true) == TN_ERR_NULL, "NULL");
    CHECK(tn_profile_print(NULL, stdout) == TN_ERR_NULL, "NULL print");
    tn_array_free(x2); tn_array_free(xv); tn_array_free(vv); tn_array_free(wv);
    tn_function_free(f);
    tn_graph_free(g);
}

/* profile=1 profiles every function from compilation on (compile times known). */
TEST(test_profile_flag) {
    tn_config c = *tn_get_config();
    c.profile = true;
    CHECK(tn_init(&c) == TN_OK, "init");
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *y = tn_exp(x);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    c.profile = false;                  /* so freeing f does not print to stderr */
    tn_init(&c);
    tn_array *xv = tn_array_rand_normal(TN_F64, 1, (int64_t[]){ 10 }, 0, 1, 4), *out = NULL;
    CHECK(f && tn_call(f, &xv, &out) == TN_OK, "call: %s", tn_last_error());
    tn_result r;
    char *s = report(f, &r);
    CHECK(r == TN_OK && s && strstr(s, "Total compile time") && strstr(s, "Rewrites (tn__optimize)") &&
          strstr(s, "back end prepare") && strstr(s, "Time in 1 calls"), "compile times:\n%s", s ? s : "");
    free(s);
    tn_array_free(out); tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_profile_report);
    TH_RUN(test_profile_flag);
    TH_END();
}
