/* >>profile: per-function timing, as Theano's ProfileStats printed it.

   Turned on for every function by the flag profile=1 (the report goes to
   stderr when the function is freed), or for one function by
   tn_profile_enable (print it with tn_profile_print). The executor calls the
   hooks below only when f->prof is set, so a function without a profile pays
   one predictable branch per step.

   What is measured: wall time from a C11 clock (timespec_get). A CPU op's
   time is its kernel's. A GPU op's time is the host time of its launch: the
   kernel runs asynchronously, and its run time shows up where the host next
   waits (the executor's final synchronize, counted in "executor" but in no
   op, or a transfer back to the host). launch_blocking=1 makes every launch
   wait for its kernel, so each GPU op's line is then its full time. */
#include <time.h>
#include <string.h>

typedef struct tn__prof {
    bool compiled_with;        /* attached at compile time: the compile times are known */
    double t_rewrite, t_prepare;
    uint64_t calls;
    double t_call, t_run, t_first;
    double *t_step;            /* per step: seconds and calls */
    uint64_t *n_step;
    int n_steps;
    /* per input: was it copied to a device, and did its data change between calls */
    bool *in_to_device;
    const void **in_ptr;
    uint64_t *in_sum;
    size_t *in_bytes;
    uint64_t *in_same;         /* calls whose data equalled the previous call's */
} tn__prof;

static double tn__prof_now(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 64-bit checksum of a host array's bytes (FNV-1a over 8-byte words); 0 for
   arrays it cannot read (device memory, non-contiguous). */
static uint64_t tn__prof_checksum(const tn_array *a, size_t *bytes) {
    *bytes = 0;
    if (!a || a->device != TN_HOST || !a->data || !tn_array_is_contiguous(a)) return 0;
    size_t n = tn_array_nbytes(a), i = 0;
    const unsigned char *p = (const unsigned char *)a->data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    *bytes = n;
    return h ^ n;
}

typedef enum { TN__PROF_CPU = 0, TN__PROF_GPU, TN__PROF_XFER } tn__prof_where;

static tn__prof_where tn__prof_where_of(const tn_func *f, const tn__step *st) {
    if (st->def->kind == TN_OPK_TRANSFER) return TN__PROF_XFER;
    return st->node->device != TN_HOST && f->backend ? TN__PROF_GPU : TN__PROF_CPU;
}

static void tn__prof_free_data(tn__prof *p) {
    if (!p) return;
    tn__free(p->t_step); tn__free(p->n_step);
    tn__free(p->in_to_device); tn__free(p->in_ptr); tn__free(p->in_sum); tn__free(p->in_bytes); tn__free(p->in_same);
    tn__free(p);
}

static tn__prof *tn__prof_new(const tn_func *f) {
    tn__prof *p = (tn__prof *)tn__calloc(1, sizeof *p);
    if (!p) return NULL;
    size_t ns = (size_t)f->n_steps + 1, ni = (size_t)f->n_inputs + 1;
    p->n_steps = f->n_steps;
    p->t_step = (double *)tn__calloc(ns, sizeof *p->t_step);
    p->n_step = (uint64_t *)tn__calloc(ns, sizeof *p->n_step);
    p->in_to_device = (bool *)tn__calloc(ni, sizeof *p->in_to_device);
    p->in_ptr = (const void **)tn__calloc(ni, sizeof *p->in_ptr);
    p->in_sum = (uint64_t *)tn__calloc(ni, sizeof *p->in_sum);
    p->in_bytes = (size_t *)tn__calloc(ni, sizeof *p->in_bytes);
    p->in_same = (uint64_t *)tn__calloc(ni, sizeof *p->in_same);
    if (!p->t_step || !p->n_step || !p->in_to_device || !p->in_ptr || !p->in_sum || !p->in_bytes || !p->in_same) {
        tn__prof_free_data(p);
        return NULL;
    }
    /* an input read by a transfer or a device op is copied to the device each call */
    for (int k = 0; k < f->n_steps; k++) {
        const tn__step *st = &f->steps[k];
        if (tn__prof_where_of(f, st) == TN__PROF_CPU) continue;
        if (st->def->kind == TN_OPK_TRANSFER && st->node->device == TN_HOST) continue;   /* to the host */
        for (int i = 0; i < st->n_in; i++) {
            const tn__slot *sl = &f->slots[st->in_slot[i]];
            if (sl->kind == TN__SLOT_INPUT && sl->index >= 0) p->in_to_device[sl->index] = true;
        }
    }
    return p;
}

static void tn__prof_attach(tn_func *f, double t_rewrite, double t_prepare) {
    if (f->prof) return;
    tn__prof *p = tn__prof_new(f);
    if (!p) { tn__warn("%s: out of memory for the profiler; not profiling", f->name); return; }
    p->compiled_with = true;
    p->t_rewrite = t_rewrite;
    p->t_prepare = t_prepare;
    f->prof = p;
}

static double tn__prof_begin_call(tn_func *f, tn_array *const *inputs) {
    tn__prof *p = f->prof;
    for (int i = 0; i < f->n_inputs; i++) {
        size_t bytes;
        uint64_t h = tn__prof_checksum(inputs[i], &bytes);
        if (p->calls > 0 && bytes > 0 && inputs[i]->data == p->in_ptr[i] && bytes == p->in_bytes[i] && h == p->in_sum[i])
            p->in_same[i]++;
        p->in_ptr[i] = inputs[i]->data;
        p->in_sum[i] = h;
        p->in_bytes[i] = bytes;
    }
    return tn__prof_now();   /* after the checksums: they are not the function's time */
}

static void tn__prof_step(tn_func *f, int k, double t0) {
    tn__prof *p = f->prof;
    if (k >= p->n_steps) return;
    p->t_step[k] += tn__prof_now() - t0;
    p->n_step[k]++;
}

static void tn__prof_end_call(tn_func *f, double t_call, double t_run) {
    tn__prof *p = f->prof;
    double t = tn__prof_now() - t_call;
    if (p->calls == 0) p->t_first = t;
    p->calls++;
    p->t_call += t;
    p->t_run += t_run;
}

static void tn__prof_finish(tn_func *f) {
    if (tn_get_config()->profile && f->prof->calls > 0) tn_profile_print(f, stderr);
    tn__prof_free_data(f->prof);
    f->prof = NULL;
}

/* >>profile: public ----------------------------------------------------- */

TN_API tn_result tn_profile_enable(tn_func *f, bool on) {
    if (!f) return tn__err(TN_ERR_NULL, "tn_profile_enable: function is NULL");
    if (!on) {
        tn__prof_free_data(f->prof);
        f->prof = NULL;
        return TN_OK;
    }
    if (f->prof) return TN_OK;
    if (!(f->prof = tn__prof_new(f))) return tn__err(TN_ERR_OOM, "tn_profile_enable: out of memory for %s's profile", f->name);
    return TN_OK;
}

TN_API void tn_profile_reset(tn_func *f) {
    if (!f || !f->prof) return;
    tn__prof *p = f->prof;
    p->calls = 0;
    p->t_call = p->t_run = p->t_first = 0;
    for (int k = 0; k < p->n_steps; k++) { p->t_step[k] = 0; p->n_step[k] = 0; }
    for (int i = 0; i < f->n_inputs; i++) { p->in_same[i] = 0; p->in_ptr[i] = NULL; }
}

TN_API bool tn_profile_input_unchanged(const tn_func *f, int i) {
    if (!f || !f->prof || i < 0 || i >= f->n_inputs) return false;
    const tn__prof *p = f->prof;
    return p->calls >= 2 && p->in_same[i] == p->calls - 1;
}

TN_API int tn_function_device_steps(const tn_func *f) {
    if (!f) return 0;
    int n = 0;
    for (int k = 0; k < f->n_steps; k++) n += f->steps[k].node->device != TN_HOST && f->backend;
    return n;
}

/* One row of a table: a key (class, op or apply), its time and counts. */
typedef struct tn__prof_row {
    char name[512];
    double t;
    uint64_t calls;
    int napply;
    int where;                 /* tn__prof_where, or -1 when mixed */
} tn__prof_row;

static int tn__prof_row_cmp(const void *a, const void *b) {
    const tn__prof_row *x = (const tn__prof_row *)a, *y = (const tn__prof_row *)b;
    if (x->t != y->t) return x->t < y->t ? 1 : -1;
    return strcmp(x->name, y->name);
}

static const char *tn__prof_where_name(int w) {
    return w == TN__PROF_CPU ? "cpu" : w == TN__PROF_GPU ? "gpu" : w == TN__PROF_XFER ? "xfer" : "mixed";
}

/* Class of an op, Theano-style: the op family, Gpu-prefixed when on a device. */
static void tn__prof_class(const tn_func *f, const tn__step *st, char *buf, size_t cap) {
    tn_op_kind k = st->def->kind;
    const char *base = k == TN_OPK_ELEMWISE || k == TN_OPK_COMPOSITE ? "Elemwise" : st->def->name ? st->def->name : "?";
    bool gpu = tn__prof_where_of(f, st) == TN__PROF_GPU && strncmp(base, "Gpu", 3) != 0;
    snprintf(buf, cap, "%s%s", gpu ? "Gpu" : "", base);
}

static int tn__prof_add(tn__prof_row *rows, int n, const char *name, double t, uint64_t calls, int where) {
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, name)) {
            rows[i].t += t;
            rows[i].calls += calls;
            rows[i].napply++;
            if (rows[i].where != where) rows[i].where = -1;
            return n;
        }
    snprintf(rows[n].name, sizeof rows[n].name, "%s", name);
    rows[n].t = t;
    rows[n].calls = calls;
    rows[n].napply = 1;
    rows[n].where = where;
    return n + 1;
}

static void tn__prof_table(FILE *out, const char *title, const char *what, tn__prof_row *rows, int n, double total, bool apply) {
    qsort(rows, (size_t)n, sizeof *rows, tn__prof_row_cmp);
    fprintf(out, "\n%s\n", title);
    for (const char *c = title; *c; c++) fputc('-', out);
    if (apply) fprintf(out, "\n  <%% time> <sum %%> <apply time> <time per call> <type> <#call> <id> <%s>\n", what);
    else fprintf(out, "\n  <%% time> <sum %%> <apply time> <time per call> <type> <#call> <#apply> <%s>\n", what);
    double cum = 0;
    for (int i = 0; i < n; i++) {
        const tn__prof_row *r = &rows[i];
        cum += r->t;
        double pc = total > 0 ? 100.0 * r->t / total : 0, cc = total > 0 ? 100.0 * cum / total : 0;
        fprintf(out, "  %6.1f%%   %6.1f%%   %10.3es   %10.3es   %5s  %7llu %6d   %s\n", pc, cc, r->t,
                r->calls ? r->t / (double)r->calls : 0.0, tn__prof_where_name(r->where), (unsigned long long)r->calls,
                r->napply, r->name);
    }
}

/* Advice: inputs copied to the device every call with unchanged data, and
   host round trips between GPU ops. Returns how many lines it printed. */
static int tn__prof_advice(const tn_func *f, FILE *out) {
    const tn__prof *p = f->prof;
    int n = 0;
    for (int i = 0; i < f->n_inputs; i++)
        if (p->in_to_device[i] && tn_profile_input_unchanged(f, i)) {
            fprintf(out, "  - input '%s' is copied to the device on every call and did not change in %llu calls: "
                         "make it a shared variable (tn_shared) so it stays on the device\n",
                    f->in_name[i], (unsigned long long)p->calls);
            n++;
        }
    char la[256], lb[256], lc[256];
    for (int a = 0; a < f->n_steps; a++) {
        const tn__step *A = &f->steps[a];
        if (A->def->kind != TN_OPK_TRANSFER || A->node->device != TN_HOST) continue;   /* HostFromGpu */
        for (int b = a + 1; b < f->n_steps; b++) {
            const tn__step *B = &f->steps[b];
            if (tn__prof_where_of(f, B) != TN__PROF_CPU) continue;
            bool reads = false;
            for (int i = 0; i < B->n_in && !reads; i++) reads = B->in_slot[i] >= A->out_slot && B->in_slot[i] < A->out_slot + A->n_out;
            if (!reads) continue;
            for (int c = b + 1; c < f->n_steps; c++) {
                const tn__step *C = &f->steps[c];
                if (C->def->kind != TN_OPK_TRANSFER || C->node->device == TN_HOST) continue;  /* GpuFromHost */
                bool fed = false;
                for (int i = 0; i < C->n_in && !fed; i++) fed = C->in_slot[i] >= B->out_slot && C->in_slot[i] < B->out_slot + B->n_out;
                if (!fed) continue;
                tn__node_label(A->node, la, sizeof la);
                tn__node_label(B->node, lb, sizeof lb);
                tn__node_label(C->node, lc, sizeof lc);
                fprintf(out, "  - host round trip between GPU ops: %s (step %d) -> %s on the cpu (step %d) -> %s (step %d): "
                             "this op has no GPU implementation here; the data leaves and re-enters the device\n",
                        la, a, lb, b, lc, c);
                n++;
            }
        }
    }
    return n;
}

TN_API tn_result tn_profile_print(const tn_func *f, FILE *out) {
    if (!f) return tn__err(TN_ERR_NULL, "tn_profile_print: function is NULL");
    if (!out) return tn__err(TN_ERR_NULL, "tn_profile_print: out is NULL");
    const tn__prof *p = f->prof;
    if (!p) return tn__err(TN_ERR_INVALID, "tn_profile_print: %s is not profiled (set the flag profile=1 or call tn_profile_enable)", f->name);
    double t_ops = 0, t_where[3] = {0, 0, 0};
    bool any_gpu = false;
    for (int k = 0; k < p->n_steps; k++) {
        int w = tn__prof_where_of(f, &f->steps[k]);
        t_ops += p->t_step[k];
        t_where[w] += p->t_step[k];
        if (w != TN__PROF_CPU) any_gpu = true;
    }
    double T = p->t_call;
    fprintf(out, "Function profiling\n==================\n");
    fprintf(out, "  Message: %s\n", f->name);
    fprintf(out, "  Time in %llu calls to tn_call: %.6es\n", (unsigned long long)p->calls, T);
    if (p->calls) fprintf(out, "  Time per call: %.6es (first call %.6es)\n", T / (double)p->calls, p->t_first);
    fprintf(out, "  Time in the executor (running the steps): %.6es (%.1f%%)\n", p->t_run, T > 0 ? 100 * p->t_run / T : 0);
    fprintf(out, "  Time in ops: %.6es (%.1f%%)\n", t_ops, T > 0 ? 100 * t_ops / T : 0);
    fprintf(out, "  Time outside the executor (input checks, outputs, updates): %.6es\n", T - p->t_run > 0 ? T - p->t_run : 0);
    fprintf(out, "  %d steps; back end: %s\n", p->n_steps, f->backend ? f->backend->name : "cpu only");
    if (p->compiled_with) {
        fprintf(out, "  Total compile time: %.6es\n", p->t_rewrite + p->t_prepare);
        fprintf(out, "    Rewrites (tn__optimize): %.6es\n", p->t_rewrite);
        fprintf(out, "    Scheduling and kernel preparation (back end prepare): %.6es\n", p->t_prepare);
        fprintf(out, "    (kernels a back end compiles lazily are counted in the first call)\n");
    } else {
        fprintf(out, "  Compile time: not measured (profiling was enabled after tn_function)\n");
    }

    tn__prof_row *rows = (tn__prof_row *)tn__calloc((size_t)p->n_steps + 1, sizeof *rows);
    if (!rows) return tn__err(TN_ERR_OOM, "tn_profile_print: out of memory");
    char nm[256];
    int n = 0;
    for (int k = 0; k < p->n_steps; k++) {
        tn__prof_class(f, &f->steps[k], nm, sizeof nm);
        n = tn__prof_add(rows, n, nm, p->t_step[k], p->n_step[k], tn__prof_where_of(f, &f->steps[k]));
    }
    tn__prof_table(out, "Class", "Class name", rows, n, t_ops, false);
    n = 0;
    for (int k = 0; k < p->n_steps; k++) {
        tn__node_label(f->steps[k].node, nm, sizeof nm);
        n = tn__prof_add(rows, n, nm, p->t_step[k], p->n_step[k], tn__prof_where_of(f, &f->steps[k]));
    }
    tn__prof_table(out, "Ops", "Op name", rows, n, t_ops, false);
    /* applies: "id" is the step index, the name the op with its output type */
    for (int k = 0; k < p->n_steps; k++) {
        const tn_var *v = f->steps[k].node;
        char lb[160], tb[160];
        tn__node_label(v, lb, sizeof lb);
        tn__prof_row *r = &rows[k];
        snprintf(r->name, sizeof r->name, "%4d   %.200s <%.150s>%s%.100s%s", k, lb, tn__type_str(&v->type, tb),
                 v->name ? " '" : "", v->name ? v->name : "", v->name ? "'" : "");
        r->t = p->t_step[k];
        r->calls = p->n_step[k];
        r->napply = k;
        r->where = tn__prof_where_of(f, &f->steps[k]);
    }
    qsort(rows, (size_t)p->n_steps, sizeof *rows, tn__prof_row_cmp);
    fprintf(out, "\nApply\n------\n  <%% time> <sum %%> <apply time> <time per call> <type> <#call> <id> <Apply name>\n");
    double cum = 0;
    for (int k = 0; k < p->n_steps; k++) {
        const tn__prof_row *r = &rows[k];
        cum += r->t;
        fprintf(out, "  %6.1f%%   %6.1f%%   %10.3es   %10.3es   %5s  %7llu %s\n", t_ops > 0 ? 100 * r->t / t_ops : 0.0,
                t_ops > 0 ? 100 * cum / t_ops : 0.0, r->t, r->calls ? r->t / (double)r->calls : 0.0,
                tn__prof_where_name(r->where), (unsigned long long)r->calls, r->name);
    }
    tn__free(rows);

    fprintf(out, "\nSpent %.3es (%.1f%%) in cpu ops, %.3es (%.1f%%) in gpu ops and %.3es (%.1f%%) in transfer ops\n",
            t_where[0], t_ops > 0 ? 100 * t_where[0] / t_ops : 0.0, t_where[1], t_ops > 0 ? 100 * t_where[1] / t_ops : 0.0,
            t_where[2], t_ops > 0 ? 100 * t_where[2] / t_ops : 0.0);
    if (any_gpu && !tn_get_config()->launch_blocking)
        fprintf(out, "  (gpu ops: host time of the asynchronous launch; the kernels' run time is spent where the host waits. "
                     "launch_blocking=1 times each kernel to completion)\n");
    fprintf(out, "\nAdvice\n------\n");
    if (tn__prof_advice(f, out) == 0) fprintf(out, "  none\n");
    return TN_OK;
}
