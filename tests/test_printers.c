/* Printers: the Graphviz DOT writer (well-formed output, one box per apply
   node, typed edge labels, Composite programs listed) for compiled functions
   and for graphs as built; debugprint's ids, dtypes and shapes. */
#define _POSIX_C_SOURCE 200809L
#define TENSOR_IMPLEMENTATION
#include <unistd.h>
#include "tensor.h"
#include "harness.h"

/* Runs a printer into a malloc'd string. */
typedef tn_result (*printer_fn)(const void *x, FILE *out);
static char *capture(tn_result (*fn)(const void *, FILE *), const void *x, tn_result *r) {
    FILE *t = tmpfile();
    if (!t) return NULL;
    *r = fn(x, t);
    return th_read_stream(t);
}
static tn_result dot_f(const void *f, FILE *o) { return tn_write_dot((const tn_func *)f, o); }
static tn_result dot_v(const void *v, FILE *o) { return tn_write_dot_var((const tn_var *)v, o); }
static tn_result dbg_f(const void *f, FILE *o) { return tn_debugprint_function((const tn_func *)f, o); }
static tn_result dbg_v(const void *v, FILE *o) { return tn_debugprint((const tn_var *)v, o); }
static tn_result topo_f(const void *f, FILE *o) { return tn_print_toposort((const tn_func *)f, o); }

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}
static int count_lines(const char *s) { int n = 0; for (; *s; s++) n += *s == '\n'; return n; }

/* Structure: outside quoted strings braces balance and end at depth 0; quotes pair up. */
static bool well_formed(const char *s) {
    int depth = 0;
    bool q = false;
    for (const char *p = s; *p; p++) {
        if (q) { if (*p == '\\' && p[1]) p++; else if (*p == '"') q = false; continue; }
        if (*p == '"') q = true;
        else if (*p == '{') depth++;
        else if (*p == '}') { if (--depth < 0) return false; }
    }
    return !q && depth == 0 && strncmp(s, "digraph ", 8) == 0;
}

/* Every edge line carries a label with a dtype and a shape in parentheses. */
static bool edges_labelled(const char *s, int *n_edges) {
    *n_edges = 0;
    for (const char *p = s; (p = strstr(p, " -> ")) != NULL; p += 4) {
        const char *eol = strchr(p, '\n');
        const char *lab = strstr(p, "label=\"");
        if (!eol || !lab || lab > eol) return false;
        if (strncmp(lab + 7, "float", 5) != 0 && strncmp(lab + 7, "int", 3) != 0 && strncmp(lab + 7, "bool", 4) != 0 &&
            strncmp(lab + 7, "out ", 4) != 0) return false;
        const char *paren = strchr(lab, '(');
        if (!paren || paren > eol) return false;
        (*n_edges)++;
    }
    return true;
}

TEST(test_dot_function) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_matrix(g, "x", TN_F32);
    tn_array *wv = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ 5, 3 }, 0, 1, 1);
    tn_var *w = tn_shared(g, "w", wv);
    tn_var *h = tn_dot(x, w);
    tn_var *y = tn_sum(tn_tanh(tn_add(tn_mul(h, tn_lit(h, 2.0)), tn_lit(h, 1.0))), (int[]){ 1 }, 1, false);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y, .name = "step" });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_result r = TN_ERR_INTERNAL;
    char *topo = capture(topo_f, f, &r);
    int n_apply = topo ? count_lines(topo) : -1;
    char *dot = capture(dot_f, f, &r);
    CHECK(r == TN_OK && dot, "tn_write_dot: %s", tn_last_error());
    if (dot) {
        CHECK(well_formed(dot), "well formed:\n%s", dot);
        CHECK(count(dot, "shape=box") == n_apply, "one box per apply node: %d boxes, %d applies\n%s", count(dot, "shape=box"), n_apply, dot);
        int ne = 0;
        CHECK(edges_labelled(dot, &ne), "every edge labelled:\n%s", dot);
        CHECK(ne >= n_apply + 1, "edges: %d", ne);
        CHECK(strstr(dot, "label=\"x\\nfloat32 (?, ?)\"") != NULL, "input x as an ellipse with its type:\n%s", dot);
        CHECK(strstr(dot, "fillcolor=darkseagreen1, label=\"w\\nfloat32 (?, ?)\"") != NULL, "shared w:\n%s", dot);
        CHECK(strstr(dot, "output 0") != NULL, "output sink");
        CHECK(strstr(dot, "\"step\"") != NULL, "graph named after the function");
        CHECK(strstr(dot, "Composite") || strstr(dot, "prologue"), "the elementwise chain is fused:\n%s", dot);
        CHECK(strstr(dot, "= tanh(r") != NULL && strstr(dot, "out0 = r"), "the fused box lists its program:\n%s", dot);
    }
    free(dot);
    /* after a call the edges carry call-time shapes */
    tn_array *xv = tn_array_rand_normal(TN_F32, 2, (int64_t[]){ 7, 5 }, 0, 1, 2), *out = NULL;
    CHECK(f && tn_call(f, &xv, &out) == TN_OK, "call: %s", tn_last_error());
    dot = capture(dot_f, f, &r);
    CHECK(dot && strstr(dot, "float32 (7, 5)") && strstr(dot, "float32 (7, 3)") && strstr(dot, "float32 (7,)"), "concrete shapes:\n%s", dot ? dot : "");
    free(dot);
    CHECK(tn_write_dot(NULL, stdout) == TN_ERR_NULL, "NULL function");
    CHECK_ERR(TN_ERR_NULL, "tn_write_dot: function is NULL");
    CHECK(tn_write_dot(f, NULL) == TN_ERR_NULL, "NULL out");
    free(topo);
    /* a reduction with a prologue and an epilogue lists both programs */
    tn_var *nrm = tn_sqrt(tn_sum(tn_mul(x, x), (int[]){ 1 }, 1, false));
    tn_func *f2 = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &nrm, .name = "norm" });
    dot = f2 ? capture(dot_f, f2, &r) : NULL;
    CHECK(dot && strstr(dot, "\\nprologue:\\l") && strstr(dot, "\\nepilogue:\\l") && strstr(dot, "= sqrt(r"),
          "the reduction's box lists its prologue and epilogue:\n%s", dot ? dot : tn_last_error());
    free(dot);
    tn_function_free(f2);
    tn_array_free(out); tn_array_free(xv); tn_array_free(wv);
    tn_function_free(f);
    tn_graph_free(g);
}

TEST(test_dot_var) {
    tn_graph *g = tn_graph_new();
    tn_var *a = tn_vector(g, "a", TN_F64), *b = tn_vector(g, "b", TN_F64);
    tn_var *s = tn_add(a, b);
    tn_var *y = tn_mul(tn_exp(s), tn_log(s));     /* s is shared by two ops: drawn once */
    tn_var_set_name(y, "y \"quoted\"");
    tn_result r = TN_ERR_INTERNAL;
    char *dot = capture(dot_v, y, &r);
    CHECK(r == TN_OK && dot, "tn_write_dot_var: %s", tn_last_error());
    if (dot) {
        CHECK(well_formed(dot), "well formed:\n%s", dot);
        CHECK(count(dot, "shape=box") == 4, "4 apply nodes (add, exp, log, mul):\n%s", dot);
        CHECK(count(dot, "shape=ellipse") == 3, "a, b and the output:\n%s", dot);
        int ne = 0;
        CHECK(edges_labelled(dot, &ne) && ne == 7, "7 labelled edges, got %d:\n%s", ne, dot);
        CHECK(strstr(dot, "y \\\"quoted\\\"") != NULL, "quotes escaped:\n%s", dot);
        CHECK(strstr(dot, "float64 (?,)") != NULL, "dtype and shape");
    }
    free(dot);
    CHECK(tn_write_dot_var(NULL, stdout) == TN_ERR_NULL, "NULL var");
    tn_graph_free(g);
}

TEST(test_debugprint_annotations) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", TN_F32, 2, (int64_t[]){ 3, -1 }, NULL);
    tn_var *y = tn_exp(tn_mul(x, tn_lit(x, 2.0)));
    tn_result r = TN_ERR_INTERNAL;
    char *s = capture(dbg_v, y, &r);
    CHECK(r == TN_OK && s, "debugprint: %s", tn_last_error());
    CHECK(s && strstr(s, "[id A]") && strstr(s, "[id B]"), "ids:\n%s", s ? s : "");
    CHECK(s && strstr(s, "TensorType(float32, (3, ?))"), "dtype and shape:\n%s", s ? s : "");
    CHECK(s && strstr(s, "x [id"), "names:\n%s", s ? s : "");
    free(s);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    s = capture(dbg_f, f, &r);
    CHECK(r == TN_OK && s && strstr(s, "Composite") && strstr(s, "[id A]") && strstr(s, "TensorType(float32, (3, ?))"),
          "function after rewrites:\n%s", s ? s : "");
    free(s);
    tn_function_free(f);
    tn_graph_free(g);
}

/* Theano's Print op: the value passes through (and its gradient), and each
   call prints the chosen attributes on stdout. */
static char *stdout_of_call(tn_func *f, tn_array *const *in, tn_array **out, tn_result *r) {
    fflush(stdout);
    FILE *t = tmpfile();
    int saved = dup(1);
    if (!t || saved < 0) return NULL;
    dup2(fileno(t), 1);
    *r = tn_call(f, in, out);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    return th_read_stream(t);
}

TEST(test_print_op) {
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F64);
    tn_var *p = tn_print(tn_mul(x, tn_lit(x, 2)), "twice", TN_PRINT_VALUE | TN_PRINT_SHAPE | TN_PRINT_MEAN | TN_PRINT_MAX | TN_PRINT_MIN);
    tn_var *out = tn_add(tn_sum(p, NULL, 0, false), tn_lit(x, 1));
    tn_var *gx = tn_grad1(tn_sum(tn_sqr(p), NULL, 0, false), x);
    tn_var *outs[2] = { out, gx };
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 2, .outputs = outs });
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array *xa = tn_array_from_data(TN_F64, 1, (int64_t[]){ 3 }, (double[]){ 1, 2, 3.5 }), *o[2] = { 0 };
    for (int call = 0; f && call < 2; call++) {
        tn_result r = TN_ERR_INTERNAL;
        char *txt = stdout_of_call(f, &xa, o, &r);
        CHECK(r == TN_OK && txt, "call %d: %s", call, tn_last_error());
        if (txt) {
            /* the print runs once even though two outputs read it (merge) */
            const char *want[5] = { "twice __str__ = [2. 4. 7.]\n", "twice shape = (3,)\n", "twice mean = 4.333333333333333", "twice max = 7\n", "twice min = 2\n" };
            for (int k = 0; k < 5; k++) CHECK(strstr(txt, want[k]) != NULL, "call %d: '%s' missing from:\n%s", call, want[k], txt);
            const char *second = strstr(txt, "twice __str__");
            CHECK(second && !strstr(second + 1, "twice __str__"), "printed once a call:\n%s", txt);
            free(txt);
        }
        CHECK(o[0] && tn_array_get(o[0], NULL) == 14.0, "the value passes through (2 + 4 + 7 + 1): %g", o[0] ? tn_array_get(o[0], NULL) : -1);
        for (int k = 0; o[1] && k < 3; k++) {
            double xv = tn_array_get(xa, (int64_t[]){ k });
            CHECK(tn_array_get(o[1], (int64_t[]){ k }) == 8 * xv, "the gradient passes through: %g", tn_array_get(o[1], (int64_t[]){ k }));
        }
        tn_array_free(o[0]); tn_array_free(o[1]); o[0] = o[1] = NULL;
    }
    FILE *t = tmpfile();
    if (f && t) {
        tn_debugprint_function(f, t);
        long n = ftell(t);
        rewind(t);
        char buf[4096] = "";
        size_t got = fread(buf, 1, n < 4095 ? (size_t)n : 4095, t);
        buf[got] = 0;
        CHECK(strstr(buf, "Print{twice}") != NULL, "debugprint names it:\n%s", buf);
    }
    if (t) fclose(t);
    tn_clear_error();
    CHECK(!tn_print(x, "bad", 64) && tn_last_result() == TN_ERR_INVALID && strstr(tn_last_error(), "tn_print: attrs 0x40"), "bad attrs: %s", tn_last_error());
    CHECK(!tn_print(NULL, "m", 0) && tn_last_result() == TN_ERR_NULL, "NULL x");
    tn_array_free(xa);
    tn_function_free(f);
    tn_graph_free(g);
}

int main(void) {
    tn_init(NULL);
    TH_RUN(test_dot_function);
    TH_RUN(test_dot_var);
    TH_RUN(test_debugprint_annotations);
    TH_RUN(test_print_op);
    TH_END();
}
