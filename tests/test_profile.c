/* The profiler: report sections and per-node lines, counts per call, the
   unchanged-input detection behind the advice, reset and errors. */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include "tensor_cuda.h"     /* only for the stand-in device of test_profile_events */
#include "harness.h"
#include "fake_table.h"
#include <unistd.h>

static char *report(const tn_func *f, tn_result *r) {
    FILE *t = tmpfile();
    if (!t) return NULL;
    *r = tn_profile_print(f, t);
    return th_read_stream(t);
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
    return th_read_stream(t);
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

/* A large input is sampled each call and read whole at calls 1, 2, 4, ...:
   a change of one element between calls is seen, at whichever call the
   next whole check falls on. */
TEST(test_profile_large_input) {
    enum { N = 1 << 20 };
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_vector(g, "x", TN_F32), *y = tn_sum(x, NULL, 0, false);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ N }, -1, 1, 77), *out = NULL;
    CHECK(f && xv && tn_profile_enable(f, true) == TN_OK, "setup: %s", tn_last_error());
    /* the element changed lies between two sampled words: N/2 8-byte words,
       every (N/2/16)-th sampled, i.e. floats 65536 j and 65536 j + 1 */
    const int64_t k = 12345;
    CHECK(k % 65536 > 1 && k < N - 2, "element %lld is not sampled", (long long)k);
    struct { int calls_before_change; const char *when; } cases[] = { { 2, "before the whole check of call 2" },
                                                                      { 5, "before call 5 (next whole check at 8)" } };
    for (int c = 0; c < 2; c++) {
        tn_profile_reset(f);
        for (int i = 0; i < 10; i++) {
            if (i == cases[c].calls_before_change) {
                float v = (float)tn_array_get(xv, &k) + 0.5f;
                tn_array_set(xv, &k, v);
            }
            CHECK(tn_call(f, &xv, &out) == TN_OK, "call %d", i);
            tn_array_free(out); out = NULL;
        }
        CHECK(!tn_profile_input_unchanged(f, 0), "one element changed %s: not unchanged", cases[c].when);
    }
    tn_profile_reset(f);
    for (int i = 0; i < 10; i++) { CHECK(tn_call(f, &xv, &out) == TN_OK, "call"); tn_array_free(out); out = NULL; }
    CHECK(tn_profile_input_unchanged(f, 0), "10 calls on the same data: unchanged");
    tn_array_free(xv);
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

/* GPU times from events, without a GPU: a stand-in device (host memory
   tagged as device 0, every kernel the CPU's) whose event hooks log the
   marks and give step k (k + 1) ms a call. The profiler must bracket exactly
   the device steps (GPU ops and transfers), collect at each call and at
   print, report those times and counts, and leave host steps on host time. */
enum { FAKE_MAX = 64 };
static struct { int n, news, frees, collects, marks[2 * FAKE_MAX], open[FAKE_MAX], pend[FAKE_MAX], bad; double at[FAKE_MAX]; } fk;
static void *fake_prof_new(int n) { fk.news++; fk.n = n; return n <= FAKE_MAX ? &fk : NULL; }
static tn_result fake_prof_mark(void *ps, int m) {
    (void)ps;
    int k = m / 2;
    fk.marks[m]++;
    if (m % 2 == 0) { fk.bad += fk.open[k]; fk.open[k] = 1; fk.at[k] = tn__prof_now(); }   /* a begin while one is open */
    else { fk.bad += !fk.open[k]; fk.open[k] = 0; fk.pend[k]++; }     /* an end without its begin */
    return TN_OK;
}
/* Each pending run of step k: (k + 1) ms, starting when its begin mark was
   recorded (the latest run's time, for every pending one). */
static tn_result fake_prof_collect(void *ps, const tn_prof_sink *sink, bool all) {
    (void)ps; (void)all;
    fk.collects++;
    for (int k = 0; k < fk.n; k++) {
        for (int i = 0; sink && i < fk.pend[k]; i++) sink->step(sink->user, k, sink->now ? fk.at[k] : -1.0, 1e-3 * (k + 1));
        fk.pend[k] = 0;
    }
    return TN_OK;
}
static void fake_prof_free(void *ps) { (void)ps; fk.frees++; }
/* The CPU kernel on the stand-in's arrays, retagged as host ones for the call. */
static tn_result prof_fake_run(const tn_var *n, void *s, tn_array *const *in, tn_array *const *out) {
    (void)s;
    tn_array ca[8], co[8], *pa[8], *po[8];
    if (n->n_in > 8 || n->n_out > 8) return TN_ERR_INTERNAL;
    for (int i = 0; i < n->n_in; i++) { ca[i] = *in[i]; ca[i].device = TN_HOST; pa[i] = &ca[i]; }
    for (int o = 0; o < n->n_out; o++) { co[o] = *out[o]; co[o].device = TN_HOST; po[o] = &co[o]; }
    tn_result r = tn__op_def(n->op)->cpu(n, pa, po);
    for (int o = 0; o < n->n_out; o++) { int d = out[o]->device; *out[o] = co[o]; out[o]->device = d; }
    return r;
}

static tn_func *events_fn(tn_graph *g, tn_var **x) {
    /* exp(x)*2 on the device, concatenate on the host (no GPU kernel), tanh back on the device */
    *x = tn_vector(g, "x", TN_F32);
    tn_var *y = tn_mul(tn_exp(*x), tn_scalar_const(g, 2.0));
    tn_var *z = tn_tanh(tn_concatenate(2, (tn_var *[]){ y, y }, 0));
    return tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = x, .n_outputs = 1, .outputs = &z, .name = "evented" });
}

/* A stand-in for the CUDA back end on the CPU (its rows, the stand-in's
   prepare and run, no streams); the caller's own hooks go on top. */
static void prof_fake_backend(tn_backend *be) {
    tn__cuda.state = 1;
    tn__cuda.ordinal = 0;
    *be = tn__cuda_backend;
    be->ops = fake_table(fake_prepare, prof_fake_run);
    be->func_new = NULL; be->func_enter = NULL; be->func_free = NULL;     /* no driver here: no streams */
}

/* The stand-in put in place (its back end in *be, with the event hooks
   above when `events`), and the real one put back. */
static const tn_device_ops fake_dev_ops = { fake_alloc, fake_free, fake_copy, NULL, NULL, NULL, NULL, NULL, NULL };
typedef struct { const tn_backend *be; const tn_device_ops *ops; } saved_device;
static saved_device fake_device_on(tn_backend *be, bool events) {
    saved_device s = { tn__get_backend(), tn__get_device_ops() };
    prof_fake_backend(be);
    if (events) { be->prof_new = fake_prof_new; be->prof_mark = fake_prof_mark; be->prof_collect = fake_prof_collect; be->prof_free = fake_prof_free; }
    tn__set_backend(be);
    tn__set_device_ops(&fake_dev_ops);
    return s;
}
static void fake_device_off(saved_device s) {
    tn__set_backend(s.be);
    tn__set_device_ops(s.ops);
    tn__cuda.state = 0;
}

TEST(test_profile_events) {
    static tn_backend be;
    saved_device saved = fake_device_on(&be, true);
    memset(&fk, 0, sizeof fk);

    tn_graph *g = tn_graph_new();
    tn_var *x;
    tn_func *f = events_fn(g, &x);
    CHECK(f != NULL, "compile: %s", tn_last_error());
    if (!f) goto out;
    int n = f->n_steps, ndev = 0;
    CHECK(n <= FAKE_MAX && tn_function_device_steps(f) > 0, "%d steps, %d on the device", n, tn_function_device_steps(f));
    CHECK(tn_profile_enable(f, true) == TN_OK && fk.news == 1, "one event pool per profiled function (%d)", fk.news);
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 1000 }, -1, 1, 5), *out = NULL;
    enum { CALLS = 5 };
    for (int i = 0; i < CALLS; i++) {
        CHECK(tn_call(f, &xv, &out) == TN_OK, "call: %s", tn_last_error());
        tn_array_free(out);
        out = NULL;
    }
    CHECK(fk.collects == CALLS && fk.bad == 0, "a collection at each call (%d), marks paired (%d bad)", fk.collects, fk.bad);
    for (int k = 0; k < n; k++) {
        bool dev = f->steps[k].def->kind == TN_OPK_TRANSFER || f->steps[k].node->device != TN_HOST;
        ndev += dev;
        CHECK(fk.marks[2 * k] == (dev ? CALLS : 0) && fk.marks[2 * k + 1] == fk.marks[2 * k], "step %d (%s): %d/%d marks",
              k, dev ? "device" : "host", fk.marks[2 * k], fk.marks[2 * k + 1]);
    }
    CHECK(ndev >= 3 && ndev < n, "device and host steps both present (%d of %d on the device)", ndev, n);
    tn_result r;
    char *s = report(f, &r);
    CHECK(r == TN_OK && s && fk.collects == CALLS + 1, "print collects the rest: %s", tn_last_error());
    if (s && getenv("TN_SHOW_REPORT")) fputs(s, stdout);
    if (s) {
        CHECK(strstr(s, "time on the device, from events") != NULL, "the note says the times are from events:\n%s", s);
        /* each Apply line: a device step shows exactly CALLS * (k + 1) ms, a host step its own (small) host time */
        const char *at = NULL;
        th_apply a;
        int seen = 0;
        while (th_apply_next(s, &at, &a)) {
            if (!a.ok || a.id < 0 || a.id >= n) continue;
            seen++;
            double want = 1e-3 * (a.id + 1) * CALLS;
            CHECK(a.calls == CALLS, "step %d: %llu calls", a.id, a.calls);
            if (strcmp(a.type, "cpu")) CHECK(fabs(a.t - want) < 1e-6, "device step %d: %g s, want %g", a.id, a.t, want);
            else CHECK(a.t < want, "host step %d: host time %g s", a.id, a.t);
        }
        CHECK(seen == n, "%d Apply lines of %d", seen, n);
        CHECK(strstr(s, "host round trip between GPU ops") != NULL, "advice names the round trip:\n%s", s);
        CHECK(strstr(s, "Join{axis=0} (node") && strstr(s, "runs on the CPU: no GPU kernel in the cuda back end"),
              "advice says why Join stays on the CPU:\n%s", s);
    }
    free(s);
    tn_profile_reset(f);
    CHECK(fk.collects == CALLS + 2, "reset drops pending marks");
    tn_function_free(f);
    f = NULL;
    CHECK(fk.frees == 1, "the pool is freed with the profile (%d)", fk.frees);

    /* launch_blocking=1: host times of kernels run to completion, no events */
    tn_config c = *tn_get_config();
    c.launch_blocking = true;
    tn_init(&c);
    tn__set_backend(&be);
    tn__set_device_ops(&fake_dev_ops);
    f = events_fn(g, &x);
    CHECK(f && tn_profile_enable(f, true) == TN_OK && fk.news == 1, "no events under launch_blocking");
    if (f && tn_call(f, &xv, &out) == TN_OK) {
        tn_array_free(out);
        s = report(f, &r);
        CHECK(s && strstr(s, "launch_blocking=1: host time") && !strstr(s, "from events"), "launch_blocking note:\n%s", s ? s : "");
        free(s);
    }
    c.launch_blocking = false;
    tn_init(&c);
    tn_array_free(xv);
out:
    tn_function_free(f);
    tn_graph_free(g);
    fake_device_off(saved);
}

/* The first call's compile note (tensor.h >>compile_note), with a stand-in
   clock: the test says what "was compiled" between the function and its
   first call. */
static struct { uint64_t kernels, stored; double seconds; const char *dir; } fclk;
static void fake_compile_clock(uint64_t *kernels, double *seconds, uint64_t *stored, char *dir, size_t cap) {
    *kernels = fclk.kernels; *seconds = fclk.seconds; *stored = fclk.stored;
    snprintf(dir, cap, "%s", fclk.dir);
}
static char note_log[4][512];
static int n_notes;
static void keep_note(tn_log_level level, const char *msg, void *user) {
    (void)user;
    if (level == TN_LOG_WARN && n_notes < 4) snprintf(note_log[n_notes++], sizeof note_log[0], "%s", msg);
}
/* Compiles a function at clock (k0, s0, st0), moves the clock to (k1, s1, st1)
   as a first call's compiles would, calls it twice; returns the notes logged. */
static int note_for(tn_backend *be, uint64_t k1, double s1, uint64_t st1, const char *dir) {
    fclk.kernels = 3; fclk.seconds = 0.25; fclk.stored = 3; fclk.dir = dir;
    tn__set_backend(be);
    tn_graph *g = tn_graph_new();
    tn_var *x;
    tn_func *f = events_fn(g, &x);
    n_notes = 0;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 100 }, -1, 1, 5), *out = NULL;
    fclk.kernels = 3 + k1; fclk.seconds = 0.25 + s1; fclk.stored = 3 + st1;
    for (int i = 0; f && i < 2; i++) {
        CHECK(tn_call(f, &xv, &out) == TN_OK, "call: %s", tn_last_error());
        tn_array_free(out);
        out = NULL;
        fclk.kernels += 7; fclk.seconds += 5;       /* a later call's compiles say nothing */
    }
    CHECK(f != NULL, "compile: %s", tn_last_error());
    tn_array_free(xv);
    tn_function_free(f);
    tn_graph_free(g);
    return n_notes;
}

TEST(test_first_call_compile_note) {
    static tn_backend be;
    saved_device saved = fake_device_on(&be, false);
    be.compile_clock = fake_compile_clock;
    tn_set_log(keep_note, NULL);
    int n = note_for(&be, 12, 2.5, 12, "/some/cache");
    CHECK(n == 1 && !strcmp(note_log[0], "evented: compiling 12 GPU kernels took 2.5 s; the next run reads them from the disk cache (/some/cache)"),
          "one note after the first call (%d): %s", n, n ? note_log[0] : "");
    n = note_for(&be, 5, 1.5, 2, "/ro/cache");
    CHECK(n == 1 && strstr(note_log[0], "compiling 5 GPU kernels took 1.5 s; 3 could not be kept in a disk cache (/ro/cache), so the next run compiles them again"),
          "kernels not stored (%d): %s", n, n ? note_log[0] : "");
    n = note_for(&be, 1, 1.25, 0, "");
    CHECK(n == 1 && strstr(note_log[0], "compiling 1 GPU kernel took 1.2 s; 1 could not be kept in a disk cache (none is set"),
          "no cache directory (%d): %s", n, n ? note_log[0] : "");
    n = note_for(&be, 40, 0.9, 40, "/some/cache");
    CHECK(n == 0, "under a second: no note (%d): %s", n, n ? note_log[0] : "");
    n = note_for(&be, 0, 3.0, 0, "/some/cache");
    CHECK(n == 0, "nothing compiled (a failed compile's time alone): no note (%d)", n);
    tn_set_log(NULL, NULL);
    fake_device_off(saved);
}

/* profile_trace=FILE.json (tensor.h >>trace) with the stand-in device: the
   file is a JSON array of trace events; one "call" event per call, one host
   event per step and call ("cpu" for host ops, "launch" for device ones),
   one "device" event per device step and call on the function's own track,
   lasting what the events measured and starting inside its call; the
   compile's two events; the tracks named. */
static char *slurp(const char *path) {
    FILE *t = fopen(path, "rb");
    if (t) fseek(t, 0, SEEK_END);
    return th_read_stream(t);
}
typedef struct { char name[64], cat[16]; int tid, step; double ts, dur; } trace_ev;
/* The complete events of a trace, one per line as the writer puts them. */
static int trace_events(const char *s, trace_ev *ev, int cap) {
    int n = 0;
    for (const char *p = s; p && *p && n < cap; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *ph = strstr(p, "\"ph\":\"X\""), *eol = strchr(p, '\n');
        if (!ph || (eol && ph > eol)) continue;
        trace_ev *e = &ev[n];
        e->step = -1;
        const char *st = strstr(p, "\"step\":");
        if (sscanf(p, "{\"name\":\"%63[^\"]\",\"cat\":\"%15[^\"]\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%lf,\"dur\":%lf",
                   e->name, e->cat, &e->tid, &e->ts, &e->dur) != 5) continue;
        if (st && (!eol || st < eol)) sscanf(st, "\"step\":%d", &e->step);
        n++;
    }
    return n;
}

TEST(test_profile_trace) {
    static tn_backend be;
    tn_config saved = *tn_get_config(), c = saved;
    char path[64];
    snprintf(path, sizeof path, "/tmp/tn_trace_%ld.json", (long)getpid());
    c.profile_trace = path;
    CHECK(tn_init(&c) == TN_OK && !strcmp(tn_get_config()->profile_trace, path), "tn_init keeps profile_trace");
    saved_device real = fake_device_on(&be, true);
    memset(&fk, 0, sizeof fk);
    tn_graph *g = tn_graph_new();
    tn_var *x;
    tn_func *f = events_fn(g, &x);
    CHECK(f && f->prof, "the flag profiles the function: %s", tn_last_error());
    enum { CALLS = 4 };
    int n = f ? f->n_steps : 0, ndev = 0;
    bool dev[FAKE_MAX] = { false };
    for (int k = 0; k < n && k < FAKE_MAX; k++) ndev += dev[k] = f->steps[k].def->kind == TN_OPK_TRANSFER || f->steps[k].node->device != TN_HOST;
    tn_array *xv = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){ 1000 }, -1, 1, 5), *out = NULL;
    for (int i = 0; f && i < CALLS; i++) {
        CHECK(tn_call(f, &xv, &out) == TN_OK, "call: %s", tn_last_error());
        tn_array_free(out);
        out = NULL;
    }
    tn_function_free(f);          /* collects the last calls' device steps */
    tn__trace_close();
    char *s = slurp(path);
    CHECK(s && s[0] == '[' && strlen(s) > 3 && !strcmp(s + strlen(s) - 3, "\n]\n"), "a JSON array: %.80s", s ? s : "(no file)");
    static trace_ev ev[512];
    int me = tn__trace_thread, track = 1000 + tn__trace.n_tracks;    /* this thread's track, the function's device track */
    int ne = s ? trace_events(s, ev, 512) : 0, calls = 0, host = 0, launch = 0, device = 0, compile = 0, bad = 0;
    for (int i = 0; i < ne; i++) {
        trace_ev *e = &ev[i];
        if (!strcmp(e->cat, "call")) { calls++; bad += strcmp(e->name, "evented") != 0 || e->tid != me; continue; }
        if (!strcmp(e->cat, "compile")) { compile++; bad += !strstr(e->name, " evented") || e->tid != me; continue; }
        if (e->step < 0 || e->step >= n) { bad++; continue; }
        if (!strcmp(e->cat, "cpu")) { host++; bad += dev[e->step] || e->tid != me; }
        else if (!strcmp(e->cat, "launch")) { launch++; bad += !dev[e->step] || e->tid != me; }
        else if (!strcmp(e->cat, "device")) {
            device++;
            bad += !dev[e->step] || e->tid != track || fabs(e->dur - 1e3 * (e->step + 1)) > 1e-3;
            bool inside = false;    /* starts within one of the calls */
            for (int j = 0; j < ne; j++)
                inside |= !strcmp(ev[j].cat, "call") && e->ts >= ev[j].ts && e->ts <= ev[j].ts + ev[j].dur;
            CHECK(inside, "device step %d at %.3f us starts within a call", e->step, e->ts);
        } else bad++;
    }
    CHECK(calls == CALLS && compile == 2, "%d call events, %d compile events", calls, compile);
    CHECK(host == CALLS * (n - ndev) && launch == CALLS * ndev && device == CALLS * ndev && ndev > 0,
          "%d host, %d launch, %d device events; %d steps, %d on the device", host, launch, device, n, ndev);
    CHECK(bad == 0, "%d events with a wrong name, track, step or duration", bad);
    char want[2][96];
    snprintf(want[0], sizeof want[0], "\"tid\":%d,\"args\":{\"name\":\"host thread %d\"}", me, me);
    snprintf(want[1], sizeof want[1], "\"tid\":%d,\"args\":{\"name\":\"device: evented\"}", track);
    CHECK(s && me > 0 && strstr(s, want[0]) && strstr(s, want[1]), "tracks named (%s; %s)", want[0], want[1]);
    free(s);
    remove(path);

    /* a file that cannot be written: said once, the functions run untraced */
    c.profile_trace = "/nonexistent-dir/t.json";
    tn_init(&c);
    tn_set_log(keep_note, NULL);
    n_notes = 0;
    f = events_fn(g, &x);
    CHECK(f && tn_call(f, &xv, &out) == TN_OK, "runs untraced: %s", tn_last_error());
    tn_array_free(out);
    out = NULL;
    CHECK(n_notes >= 1 && strstr(note_log[0], "profile_trace: cannot write /nonexistent-dir/t.json (No such file"),
          "the warning names the file: %s", n_notes ? note_log[0] : "(none)");
    tn_function_free(f);
    tn_set_log(NULL, NULL);
    tn_array_free(xv);
    tn_graph_free(g);
    tn_init(&saved);
    fake_device_off(real);
}

/* profile_trace is a flag like the others */
TEST(test_profile_trace_flag) {
    tn_config c = { .floatX = TN_F32 };
    CHECK(tn_parse_flags("profile_trace=/tmp/a b.json,profile=1", &c) == TN_OK && c.profile_trace &&
          !strcmp(c.profile_trace, "/tmp/a b.json") && c.profile, "parsed");
}

int main(void) {
    tn_init(&(tn_config){ .device = TN_DEVICE_CPU, .floatX = TN_F32, .allow_gc = true });
    TH_RUN(test_profile_report);
    TH_RUN(test_profile_large_input);
    TH_RUN(test_profile_flag);
    TH_RUN(test_profile_events);
    TH_RUN(test_first_call_compile_note);
    TH_RUN(test_profile_trace);
    TH_RUN(test_profile_trace_flag);
    TH_END();
}
