/* >>scan: loops inside the graph (Theano's scan), with taps, updates and
   back-propagation through time.

   tn_scan calls the user's step callback once, on placeholders (INPUT nodes
   of the user's own graph, created after everything the step may read), and
   compiles the step's outputs with tn_function, so the step goes through the
   same optimizer and back end as any function. One SCAN node then stands for
   the whole loop; its CPU kernel runs the compiled step once per step:

   - sequences are read as row views (no copies), go_backwards maps row r to
     L-1-r; a sequence with taps {a_j} gives L - (max(0,max a) - min(0,min a))
     steps, and at step t tap a reads row t + a - min(0, min a) (Theano's rule);
   - an output with taps keeps its history in its stacked result: the node's
     output k is the buffer of init_len + T rows (the initial rows first), a
     tap -j at step t reads row init_len + t - j, and step t writes row
     init_len + t; tn_scan returns the rows after the initial ones as a view;
   - an update (a non_sequence that is a shared variable, given a new value by
     the step) is a state carried between steps in two scratch buffers; the
     node's output is its last value, returned as a tn_update.
   Nothing is allocated per step in a steady loop: the step's inputs are
   preallocated view structs whose data pointers move, its outputs are
   borrowed and copied into the stacked buffers.

   Free variables: anything of the user's graph the step reads that is not
   one of its placeholders (a shared weight, an outer input, an outer
   expression) is captured as an implicit non_sequence. Hoisting: a step
   expression that depends only on non_sequences (and constants) is computed
   once outside the loop and fed in as a non_sequence. Both are done by
   rebuilding the loop-variant part of the step after new placeholders.

   The gradient is a second SCAN node (ext->bwd) that runs backwards over the
   stored outputs with an inner function built by tn_grad on the step (known
   gradients of the step's outputs), accumulating d(sequences), d(init rows)
   and d(non_sequences); truncate_gradient bounds how many steps it runs.

   Lifetime: a scan's compiled step lives in a registry (not in the graph
   arena, which has no destructors); tn__scan_release_graph(g) frees the
   scans of g and should be called from tn_graph_free (see the report). */

#include <string.h>
#include <pthread.h>

typedef struct tn__scan tn__scan;
struct tn__scan {
    tn__scan *next;              /* registry */
    tn_graph *g;
    char name[64];
    bool bwd;                    /* the gradient op of fwd */
    tn__scan *fwd;               /* bwd: its forward scan */
    tn__scan *grad;              /* fwd: its gradient scan, built at the first tn_grad */
    int n_seq, n_out, n_ns, n_upd, n_init;
    int *seq_nt, *seq_off, *seq_lo, *seq_hi;   /* taps of sequence i: tap[seq_off[i] + j] */
    int *out_nt, *out_off, *out_len0;          /* taps of output k: tap[out_off[k] + j] */
    bool *out_stacked;           /* the init has a leading time dim (else it is the state) */
    int *init_in;                /* output k -> node input of its init, or -1 */
    int *tap;
    int *ns_upd;                 /* non_sequence i -> update index, or -1 */
    int *upd_ns;                 /* update u -> non_sequence index */
    int64_t n_steps;             /* -1: from the sequences */
    bool backwards;
    int64_t truncate;            /* 0: every step */
    int n_ph;                    /* placeholders: sequence taps, output taps, non_sequences (bwd: + gradients of outputs) */
    tn_var **ph;
    int n_res;                   /* results: outputs, then update values (bwd: gradients of fwd's float placeholders) */
    tn_var **res;
    int *res_ph;                 /* bwd: result r is the gradient of fwd placeholder res_ph[r] */
    int *g_of_out;               /* bwd: output k -> its gradient placeholder, or -1 (not float) */
    int n_inner;                 /* step nodes in topological order, for concrete type inference */
    tn_var **inner;
    int *inner_in;               /* per inner node, per input: -1-ph, an inner index, or INT32_MAX (a leaf: its own type) */
    int *inner_in_off;
    int *inner_t_off;            /* first type of inner node i in the type table (n_out of them) */
    int n_types;
    tn_func *fn;
    tn_array *args;              /* n_ph view structs fed to fn */
    tn_array **argp;
    tn_array **resp;
    tn_var **gpend;              /* fwd, during tn_grad: gradients reaching each output through PROJ */
};

static pthread_mutex_t tn__scan_lock = PTHREAD_MUTEX_INITIALIZER;
static tn__scan *tn__scan_list;

static void tn__scan_free_one(tn__scan *s) {
    if (!s) return;
    tn_function_free(s->fn);
    void *arrs[] = { s->seq_nt, s->seq_off, s->seq_lo, s->seq_hi, s->out_nt, s->out_off, s->out_len0, s->out_stacked,
                     s->init_in, s->tap, s->ns_upd, s->upd_ns, s->ph, s->res, s->res_ph, s->g_of_out, s->inner,
                     s->inner_in, s->inner_in_off, s->inner_t_off, s->args, s->argp, s->resp, s->gpend };
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) tn__free(arrs[i]);
    tn__free(s);
}

static void tn__scan_register(tn__scan *s) {
    pthread_mutex_lock(&tn__scan_lock);
    s->next = tn__scan_list;
    tn__scan_list = s;
    pthread_mutex_unlock(&tn__scan_lock);
}

static void tn__scan_unregister_free(tn__scan *s) {
    if (!s) return;
    pthread_mutex_lock(&tn__scan_lock);
    for (tn__scan **p = &tn__scan_list; *p; p = &(*p)->next)
        if (*p == s) { *p = s->next; break; }
    pthread_mutex_unlock(&tn__scan_lock);
    tn__scan_free_one(s);
}

TN_API void tn__scan_release_graph(tn_graph *g) {
    pthread_mutex_lock(&tn__scan_lock);
    tn__scan *keep = NULL, *drop = NULL;
    for (tn__scan *s = tn__scan_list, *n; s; s = n) {
        n = s->next;
        if (s->g == g) { s->next = drop; drop = s; } else { s->next = keep; keep = s; }
    }
    tn__scan_list = keep;
    pthread_mutex_unlock(&tn__scan_lock);
    for (tn__scan *s = drop, *n; s; s = n) { n = s->next; tn__scan_free_one(s); }
}

static const char *tn__scan_vname(const tn_var *v) { return v && v->name ? v->name : "?"; }

/* >>scan_types ----------------------------------------------------------- */

static tn_type tn__type_drop0(const tn_type *t) {
    tn_type r = *t;
    r.ndim = t->ndim - 1;
    for (int d = 0; d < r.ndim; d++) { r.shape[d] = t->shape[d + 1]; r.bcast[d] = t->bcast[d + 1]; }
    r.shape[r.ndim] = 0; r.bcast[r.ndim] = false;
    return r;
}

static tn_type tn__type_add0(const tn_type *t, int64_t n) {
    tn_type r = *t;
    r.ndim = t->ndim + 1;
    r.shape[0] = n; r.bcast[0] = n == 1;
    for (int d = 0; d < t->ndim; d++) { r.shape[d + 1] = t->shape[d]; r.bcast[d + 1] = t->bcast[d]; }
    return r;
}

/* The number of steps from the sequences' types (in[0..n_seq)); -1 when a
   length is unknown at build time. Mismatched lengths are errors. */
static tn_result tn__scan_steps(const tn__scan *s, const tn_var *node, const tn_type *in, int64_t *T) {
    int64_t t = s->n_steps;
    int first = -1;
    int64_t first_n = -1;
    for (int i = 0; i < s->n_seq; i++) {
        int64_t L = in[i].shape[0];
        if (L < 0) continue;
        int64_t span = s->seq_hi[i] - s->seq_lo[i];
        int64_t avail = L - span;
        const char *nm = tn__scan_vname(node ? node->in[i] : NULL);
        if (avail < 0) avail = 0;
        if (s->n_steps >= 0) {
            if (avail < s->n_steps)
                return tn__err(TN_ERR_SHAPE, "tn_scan '%s': n_steps is %lld but sequence %d ('%s') has %lld rows, "
                               "enough for %lld steps with taps %d..%d", s->name, (long long)s->n_steps, i, nm,
                               (long long)L, (long long)avail, s->seq_lo[i], s->seq_hi[i]);
            continue;
        }
        if (first >= 0 && avail != first_n)
            return tn__err(TN_ERR_SHAPE, "tn_scan '%s': sequences have different lengths: sequence %d ('%s') has %lld rows "
                           "(taps %d..%d: %lld steps) but sequence %d ('%s') gives %lld steps; slice them to one length "
                           "or give n_steps", s->name, i, nm, (long long)L, s->seq_lo[i], s->seq_hi[i], (long long)avail,
                           first, tn__scan_vname(node ? node->in[first] : NULL), (long long)first_n);
        if (first < 0) { first = i; first_n = avail; }
    }
    if (s->n_steps < 0) {
        t = first_n;
        for (int i = 0; i < s->n_seq; i++) if (in[i].shape[0] < 0) t = -1;
    }
    *T = t;
    return TN_OK;
}

/* Types of the placeholders from the node's input types (fwd layout). */
static tn_result tn__scan_ph_types(const tn__scan *s, const tn_var *node, const tn_type *in, tn_type *pt) {
    int p = 0;
    char a[128];
    for (int i = 0; i < s->n_seq; i++) {
        tn_type row = tn__type_drop0(&in[i]);
        for (int j = 0; j < s->seq_nt[i]; j++) pt[p++] = row;
    }
    for (int k = 0; k < s->n_out; k++) {
        if (s->init_in[k] < 0) continue;
        const tn_type *it = &in[s->init_in[k]];
        if (s->out_stacked[k] && it->shape[0] >= 0 && it->shape[0] < s->out_len0[k])
            return tn__err(TN_ERR_SHAPE, "tn_scan '%s': output %d reads back %d steps (taps down to %d) but its initial "
                           "value '%s' has %lld rows %s", s->name, k, s->out_len0[k], -s->out_len0[k],
                           tn__scan_vname(node ? node->in[s->init_in[k]] : NULL), (long long)it->shape[0],
                           tn__shape_str(it->ndim, it->shape, a));
        tn_type st = s->out_stacked[k] ? tn__type_drop0(it) : *it;
        for (int j = 0; j < s->out_nt[k]; j++) pt[p++] = st;
    }
    for (int i = 0; i < s->n_ns; i++) pt[p++] = in[s->n_seq + s->n_init + i];
    TN_ASSERT(p == (s->bwd ? s->fwd->n_ph : s->n_ph));
    return TN_OK;
}

/* The step's result types for placeholder types pt (walks the step's nodes
   with their own type rules; at call time every dim is known). */
static tn_result tn__scan_res_types(const tn__scan *s, const tn_type *pt, tn_type *rt) {
    tn_type *tt = (tn_type *)tn__malloc(((size_t)s->n_types + 16) * sizeof *tt);
    tn_type ins[64], *inb = ins;
    int max_in = 0;
    for (int i = 0; i < s->n_inner; i++) if (s->inner[i]->n_in > max_in) max_in = s->inner[i]->n_in;
    if (max_in > 64 && tt) inb = (tn_type *)tn__malloc((size_t)max_in * sizeof *inb);
    if (!tt || !inb) { tn__free(tt); return tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name); }
    tn_result r = TN_OK;
    for (int i = 0; i < s->n_inner && r == TN_OK; i++) {
        tn_var *v = s->inner[i];
        const int *ix = s->inner_in + s->inner_in_off[i];
        for (int k = 0; k < v->n_in; k++)
            inb[k] = ix[k] == INT32_MAX ? v->in[k]->type : ix[k] < 0 ? pt[-1 - ix[k]] : tt[s->inner_t_off[ix[k]]];
        tn_type *o = tt + s->inner_t_off[i];
        if (v->op == TN_OP_PROJ) {
            int src = ix[0];
            *o = src >= 0 && src != INT32_MAX ? tt[s->inner_t_off[src] + v->p.i[0]] : v->type;
            continue;
        }
        memset(o, 0, (size_t)v->n_out * sizeof *o);
        r = tn__infer_outputs(v, inb, o);
    }
    for (int k = 0; k < s->n_res && r == TN_OK; k++) {
        tn_var *x = s->res[k];
        rt[k] = x->type;
        for (int p = 0; p < s->n_ph; p++) if (s->ph[p] == x) rt[k] = pt[p];
        for (int i = 0; i < s->n_inner; i++) if (s->inner[i] == x) rt[k] = tt[s->inner_t_off[i]];
    }
    if (inb != ins) tn__free(inb);
    tn__free(tt);
    if (r != TN_OK) return tn__err(r, "tn_scan '%s': the step: %s", s->name, tn_last_error());
    return TN_OK;
}

static tn_result tn__scan_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const tn__scan *s = (const tn__scan *)node->ext;
    if (!s) return tn__err(TN_ERR_INTERNAL, "Scan: node without its loop");
    if (s->bwd) {   /* one gradient per forward input */
        int nfin = node->n_in - 2 * s->fwd->n_out;
        for (int j = 0; j < nfin; j++) out[j] = in[j];
        return TN_OK;
    }
    int64_t T = -1;
    tn_result r = tn__scan_steps(s, node, in, &T);
    if (r != TN_OK) return r;
    tn_type pt_s[32], rt_s[32];
    tn_type *pt = s->n_ph <= 32 ? pt_s : (tn_type *)tn__malloc((size_t)s->n_ph * sizeof *pt);
    tn_type *rt = s->n_res <= 32 ? rt_s : (tn_type *)tn__malloc((size_t)s->n_res * sizeof *rt);
    if (!pt || !rt) { r = tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name); goto done; }
    if ((r = tn__scan_ph_types(s, node, in, pt)) != TN_OK) goto done;
    if ((r = tn__scan_res_types(s, pt, rt)) != TN_OK) goto done;
    int p = 0;
    for (int i = 0; i < s->n_seq; i++) p += s->seq_nt[i];
    for (int k = 0; k < s->n_out; k++) {
        tn_type st = rt[k];
        if (s->init_in[k] >= 0) {
            const tn_type *pk = &pt[p];
            p += s->out_nt[k];
            for (int d = 0; d < st.ndim && d < pk->ndim; d++) {
                if (st.shape[d] >= 0 && pk->shape[d] >= 0 && st.shape[d] != pk->shape[d]) {
                    char a[128], b[128];
                    r = tn__err(TN_ERR_SHAPE, "tn_scan '%s': step output %d has shape %s but its state (initial value) has "
                                "shape %s", s->name, k, tn__shape_str(st.ndim, st.shape, a), tn__shape_str(pk->ndim, pk->shape, b));
                    goto done;
                }
            }
            st = *pk;   /* the state's shape is the initial value's */
        }
        int64_t n = T < 0 ? -1 : T + s->out_len0[k];
        out[k] = tn__type_add0(&st, n);
    }
    for (int u = 0; u < s->n_upd; u++) {
        out[s->n_out + u] = in[s->n_seq + s->n_init + s->upd_ns[u]];
    }
done:
    if (pt != pt_s) tn__free(pt);
    if (rt != rt_s) tn__free(rt);
    return r;
}

static void tn__scan_label(const tn_var *node, char *buf, size_t cap) {
    const tn__scan *s = (const tn__scan *)node->ext;
    if (!s) { snprintf(buf, cap, "Scan"); return; }
    const tn__scan *f = s->bwd ? s->fwd : s;
    char steps[32] = "";
    if (f->n_steps >= 0) snprintf(steps, sizeof steps, ", n_steps=%lld", (long long)f->n_steps);
    char tr[40] = "";
    if (s->bwd && f->truncate > 0) snprintf(tr, sizeof tr, ", truncate=%lld", (long long)f->truncate);
    snprintf(buf, cap, "%s{%s%s%s%s}", s->bwd ? "ScanGrad" : "Scan", f->name, steps, f->backwards ? ", go_backwards" : "", tr);
}

/* >>scan_kernel ---------------------------------------------------------- */

/* *v = row r of a (a view without dim 0). */
static void tn__scan_row(tn_array *v, const tn_array *a, int64_t r) {
    memset(v, 0, sizeof *v);
    v->dtype = a->dtype;
    v->ndim = a->ndim - 1;
    for (int d = 0; d < v->ndim; d++) { v->shape[d] = a->shape[d + 1]; v->strides[d] = a->strides[d + 1]; }
    v->data = (char *)a->data + r * a->strides[0];
    v->base = a->base;
    v->device = a->device;
}

static bool tn__scan_same_shape(const tn_array *a, const tn_array *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++) if (a->shape[d] != b->shape[d]) return false;
    return true;
}

static tn_result tn__scan_copy(const tn__scan *s, tn_array *dst, const tn_array *src, const char *what, int k) {
    char a[128], b[128];
    if (!tn__scan_same_shape(dst, src))
        return tn__err(TN_ERR_SHAPE, "tn_scan '%s': %s %d has shape %s at this step but %s is expected (states and "
                       "outputs keep one shape)", s->name, what, k, tn__shape_str(src->ndim, src->shape, a),
                       tn__shape_str(dst->ndim, dst->shape, b));
    if (tn_array_size(dst) == 0) return TN_OK;
    if (dst->dtype == src->dtype && tn_array_is_contiguous(dst) && tn_array_is_contiguous(src))
        memcpy(dst->data, src->data, tn_array_nbytes(dst));
    else
        tn__copy_strided(dst->dtype, dst->data, dst->strides, src->dtype, src->data, src->strides, dst->ndim, dst->shape);
    return TN_OK;
}

/* dst += src (same shape). */
static tn_result tn__scan_acc(tn_array *dst, const tn_array *src) {
    if (tn_array_size(dst) == 0) return TN_OK;
    if (dst->dtype == src->dtype && tn_array_is_contiguous(dst) && tn_array_is_contiguous(src)) {
        int64_t n = tn_array_size(dst);
        if (dst->dtype == TN_F64) {
            double *d = (double *)dst->data; const double *x = (const double *)src->data;
            for (int64_t i = 0; i < n; i++) d[i] += x[i];
            return TN_OK;
        }
        if (dst->dtype == TN_F32) {
            float *d = (float *)dst->data; const float *x = (const float *)src->data;
            for (int64_t i = 0; i < n; i++) d[i] += x[i];
            return TN_OK;
        }
    }
    tn_dtype idt[2] = { dst->dtype, src->dtype };
    tn_ew_instr ins;
    memset(&ins, 0, sizeof ins);
    ins.op = TN_OP_ADD; ins.dtype = (int8_t)dst->dtype; ins.in_dtype = (int8_t)dst->dtype; ins.a = 0; ins.b = 1; ins.c = -1;
    int32_t oreg = 2;
    tn_dtype odt = dst->dtype;
    tn_ew_program p = { 2, idt, 1, &ins, 1, &oreg, &odt };
    tn_array *in[2] = { dst, (tn_array *)src };
    return tn__cpu_ew_run(&p, in, &dst);
}

static int64_t tn__scan_seq_row(const tn__scan *s, int i, int j, int64_t t, int64_t L) {
    int64_t r = t + s->tap[s->seq_off[i] + j] - s->seq_lo[i];
    return s->backwards ? L - 1 - r : r;
}

/* Points the step's inputs (fwd placeholders) at step t's rows. states[u]:
   the current value of update u. */
static void tn__scan_fill_args(const tn__scan *s, tn_array *args, tn_array *const *in, tn_array *const *bufs,
                               tn_array *const *states, int64_t t) {
    int p = 0;
    for (int i = 0; i < s->n_seq; i++)
        for (int j = 0; j < s->seq_nt[i]; j++) tn__scan_row(&args[p++], in[i], tn__scan_seq_row(s, i, j, t, in[i]->shape[0]));
    for (int k = 0; k < s->n_out; k++)
        for (int j = 0; j < s->out_nt[k]; j++)
            tn__scan_row(&args[p++], bufs[k], s->out_len0[k] + t + s->tap[s->out_off[k] + j]);
    for (int i = 0; i < s->n_ns; i++) {
        const tn_array *a = s->ns_upd[i] >= 0 ? states[s->ns_upd[i]] : in[s->n_seq + s->n_init + i];
        args[p] = *a;
        args[p].live_gen = NULL;
        p++;
    }
}

static int64_t tn__scan_T(const tn__scan *s, tn_array *const *in) {
    if (s->n_steps >= 0 || s->n_seq == 0) return s->n_steps < 0 ? 0 : s->n_steps;
    int64_t L = in[0]->shape[0] - (s->seq_hi[0] - s->seq_lo[0]);
    return L < 0 ? 0 : L;
}

/* The initial rows of output k's buffer from its init. */
static tn_result tn__scan_put_init(const tn__scan *s, int k, const tn_array *init, tn_array *buf) {
    tn_array d, src;
    int len0 = s->out_len0[k];
    for (int r = 0; r < len0; r++) {
        tn__scan_row(&d, buf, r);
        if (s->out_stacked[k]) tn__scan_row(&src, init, init->shape[0] - len0 + r);
        else src = *init;
        tn_result e = tn__scan_copy(s, &d, &src, "initial value of output", k);
        if (e != TN_OK) return e;
    }
    return TN_OK;
}

static tn_result tn__scan_cpu_fwd(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__scan *s = (tn__scan *)node->ext;
    int64_t T = tn__scan_T(s, in);
    tn_result r = TN_OK;
    for (int k = 0; k < s->n_out; k++)
        if (s->init_in[k] >= 0 && (r = tn__scan_put_init(s, k, in[s->init_in[k]], out[k])) != TN_OK) return r;
    /* update states: two buffers each, swapped every step */
    tn_array *st_s[8], **st = s->n_upd <= 4 ? st_s : (tn_array **)tn__calloc((size_t)s->n_upd * 2, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name);
    for (int u = 0; u < 2 * s->n_upd; u++) st[u] = NULL;
    for (int u = 0; u < s->n_upd && r == TN_OK; u++) {
        const tn_array *init = in[s->n_seq + s->n_init + s->upd_ns[u]];
        for (int h = 0; h < 2; h++)
            if (!(st[2 * u + h] = tn__array_alloc(init->dtype, init->ndim, init->shape, TN_HOST))) r = tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name);
        if (r == TN_OK) r = tn__scan_copy(s, st[2 * u], init, "update", u);
    }
    tn_array *cur_s[4], **cur = s->n_upd <= 4 ? cur_s : (tn_array **)tn__calloc((size_t)s->n_upd + 1, sizeof *cur);
    if (!cur && r == TN_OK) r = tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name);
    for (int u = 0; u < s->n_upd && r == TN_OK; u++) cur[u] = st[2 * u];
    for (int64_t t = 0; t < T && r == TN_OK; t++) {
        tn__scan_fill_args(s, s->args, in, out, cur, t);
        if ((r = tn_call(s->fn, s->argp, s->resp)) != TN_OK) {
            r = tn__err(r, "tn_scan '%s': step %lld of %lld: %s", s->name, (long long)t, (long long)T, tn_last_error());
            break;
        }
        for (int k = 0; k < s->n_out && r == TN_OK; k++) {
            tn_array d;
            tn__scan_row(&d, out[k], s->out_len0[k] + t);
            r = tn__scan_copy(s, &d, s->resp[k], "output", k);
        }
        for (int u = 0; u < s->n_upd && r == TN_OK; u++) {
            tn_array *nx = cur[u] == st[2 * u] ? st[2 * u + 1] : st[2 * u];
            if ((r = tn__scan_copy(s, nx, s->resp[s->n_out + u], "update", u)) == TN_OK) cur[u] = nx;
        }
    }
    for (int u = 0; u < s->n_upd && r == TN_OK; u++) r = tn__scan_copy(s, out[s->n_out + u], cur[u], "update", u);
    for (int u = 0; u < 2 * s->n_upd; u++) tn_array_free(st[u]);
    if (st != st_s) tn__free(st);
    if (cur != cur_s) tn__free(cur);
    return r;
}

static void tn__scan_zero(tn_array *a) {
    if (tn_array_size(a) > 0) memset(a->data, 0, tn_array_nbytes(a));   /* executor outputs are contiguous */
}

/* Backward: inputs are fwd's inputs, fwd's stacked outputs and their
   gradients; outputs the gradients of fwd's inputs. */
static tn_result tn__scan_cpu_bwd(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__scan *b = (tn__scan *)node->ext;
    const tn__scan *s = b->fwd;
    int nfin = node->n_in - 2 * s->n_out;
    tn_array *const *bufs = in + nfin, *const *gbufs = in + nfin + s->n_out;
    int64_t T = tn__scan_T(s, in);
    tn_result r = TN_OK;
    for (int j = 0; j < nfin; j++) tn__scan_zero(out[j]);
    tn_array *dB_s[8], **dB = s->n_out <= 8 ? dB_s : (tn_array **)tn__calloc((size_t)s->n_out, sizeof *dB);
    if (!dB) return tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name);
    for (int k = 0; k < s->n_out; k++) dB[k] = NULL;
    for (int k = 0; k < s->n_out && r == TN_OK; k++) {
        if (b->g_of_out[k] < 0) continue;
        if (!(dB[k] = tn__array_alloc(bufs[k]->dtype, bufs[k]->ndim, bufs[k]->shape, TN_HOST))) r = tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name);
        else r = tn__scan_copy(s, dB[k], gbufs[k], "output gradient", k);
    }
    int64_t stop = s->truncate > 0 && s->truncate < T ? T - s->truncate : 0;
    int nfph = s->n_ph;
    for (int64_t t = T - 1; t >= stop && r == TN_OK; t--) {
        tn__scan_fill_args(s, b->args, in, bufs, NULL, t);
        for (int k = 0; k < s->n_out; k++)
            if (b->g_of_out[k] >= 0) tn__scan_row(&b->args[b->g_of_out[k]], dB[k], s->out_len0[k] + t);
        if ((r = tn_call(b->fn, b->argp, b->resp)) != TN_OK) {
            r = tn__err(r, "tn_scan '%s' gradient: step %lld: %s", s->name, (long long)t, tn_last_error());
            break;
        }
        for (int q = 0; q < b->n_res && r == TN_OK; q++) {
            int p = b->res_ph[q];
            tn_array d;
            int pp = 0;
            bool done = false;
            for (int i = 0; i < s->n_seq && !done; i++)
                for (int j = 0; j < s->seq_nt[i] && !done; j++, pp++)
                    if (pp == p) { tn__scan_row(&d, out[i], tn__scan_seq_row(s, i, j, t, in[i]->shape[0])); done = true; }
            for (int k = 0; k < s->n_out && !done; k++)
                for (int j = 0; j < s->out_nt[k] && !done; j++, pp++)
                    if (pp == p) { tn__scan_row(&d, dB[k], s->out_len0[k] + t + s->tap[s->out_off[k] + j]); done = true; }
            if (!done) { d = *out[s->n_seq + s->n_init + (p - pp)]; }
            TN_ASSERT(p < nfph);
            r = tn__scan_acc(&d, b->resp[q]);
        }
    }
    /* gradients of the initial values: the first rows of each dB */
    for (int k = 0; k < s->n_out && r == TN_OK; k++) {
        if (s->init_in[k] < 0 || !dB[k]) continue;
        tn_array *gi = out[s->init_in[k]];
        for (int q = 0; q < s->out_len0[k] && r == TN_OK; q++) {
            tn_array src, d;
            tn__scan_row(&src, dB[k], q);
            if (s->out_stacked[k]) tn__scan_row(&d, gi, gi->shape[0] - s->out_len0[k] + q);
            else d = *gi;
            r = tn__scan_copy(s, &d, &src, "initial gradient", k);
        }
    }
    for (int k = 0; k < s->n_out; k++) tn_array_free(dB[k]);
    if (dB != dB_s) tn__free(dB);
    return r;
}

static tn_result tn__scan_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn__scan *s = (const tn__scan *)node->ext;
    if (!s || !s->fn) return tn__err(TN_ERR_INTERNAL, "Scan: node without a compiled step");
    return s->bwd ? tn__scan_cpu_bwd(node, in, out) : tn__scan_cpu_fwd(node, in, out);
}

static void tn__register_scan_ops(tn_op_def *t) {
    t[TN_OP_SCAN] = (tn_op_def){ "Scan", TN_OPK_OTHER, -1, tn__scan_infer, tn__scan_cpu, tn__scan_label };
}

/* >>scan_build ----------------------------------------------------------- */

typedef struct tn__scan_b {      /* build-time state of tn_scan */
    tn__scan *s;
    tn_graph *g;
    tn_var **ns;                 /* outer non_sequences (user's, then captured and hoisted) */
    int cap_ns;
    int *phidx;                  /* by var id: placeholder index or -1 */
    int n_idx;
} tn__scan_b;

static tn_result tn__scan_oom(const tn__scan *s) { return tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name); }

static tn_result tn__scan_phidx(tn__scan_b *b) {
    tn__scan *s = b->s;
    int nv = tn__graph_nvars(b->g);
    tn__free(b->phidx);
    if (!(b->phidx = (int *)tn__malloc(((size_t)nv + 1) * sizeof *b->phidx))) return tn__scan_oom(s);
    b->n_idx = nv;
    for (int i = 0; i < nv; i++) b->phidx[i] = -1;
    for (int p = 0; p < s->n_ph; p++) b->phidx[s->ph[p]->id] = p;
    return TN_OK;
}

static bool tn__scan_is_ph(const tn__scan_b *b, const tn_var *v) { return v->id < b->n_idx && b->phidx[v->id] >= 0; }

/* The step's nodes reachable from the results (ascending ids: topological),
   stopping at placeholders, constants and variables older than the step
   (first_id): those are free (*freev, constants excluded). */
static tn_result tn__scan_collect(tn__scan_b *b, int first_id, tn_var ***inner, int *n_inner, tn_var ***freev, int *n_free) {
    tn__scan *s = b->s;
    int nv = tn__graph_nvars(b->g);
    uint8_t *seen = (uint8_t *)tn__calloc((size_t)nv + 1, 1);
    tn_var **stack = (tn_var **)tn__malloc(((size_t)nv + 1) * sizeof *stack);
    tn_var **in = (tn_var **)tn__malloc(((size_t)nv + 1) * sizeof *in);
    tn_var **fr = (tn_var **)tn__malloc(((size_t)nv + 1) * sizeof *fr);
    if (!seen || !stack || !in || !fr) { tn__free(seen); tn__free(stack); tn__free(in); tn__free(fr); return tn__scan_oom(s); }
    int sp = 0, ni = 0, nf = 0;
    for (int k = 0; k < s->n_res; k++) if (!seen[s->res[k]->id]) { seen[s->res[k]->id] = 1; stack[sp++] = s->res[k]; }
    while (sp) {
        tn_var *v = stack[--sp];
        if (tn__scan_is_ph(b, v) || v->op == TN_OP_CONSTANT) continue;
        if (v->id < first_id) { fr[nf++] = v; continue; }
        in[ni++] = v;
        for (int k = 0; k < v->n_in; k++)
            if (!seen[v->in[k]->id]) { seen[v->in[k]->id] = 1; stack[sp++] = v->in[k]; }
    }
    /* ascending ids (counting sort through seen[]) */
    memset(seen, 0, (size_t)nv + 1);
    for (int i = 0; i < ni; i++) seen[in[i]->id] = 1;
    ni = 0;
    for (int id = 0; id < nv; id++) if (seen[id] == 1) in[ni++] = tn__graph_var(b->g, id);
    memset(seen, 0, (size_t)nv + 1);
    for (int i = 0; i < nf; i++) seen[fr[i]->id] = 1;
    nf = 0;
    for (int id = 0; id < nv; id++) if (seen[id] == 1) fr[nf++] = tn__graph_var(b->g, id);
    tn__free(seen); tn__free(stack);
    *inner = in; *n_inner = ni; *freev = fr; *n_free = nf;
    return TN_OK;
}

/* A copy of v (same op, params, ext) on inputs map[in[k]->id] (or in[k]). */
static tn_var *tn__scan_clone(tn_var *v, tn_var *const *map) {
    tn_var *ins_s[16], **ins = v->n_in <= 16 ? ins_s : (tn_var **)tn__malloc((size_t)v->n_in * sizeof *ins);
    if (!ins) { tn__err(TN_ERR_OOM, "tn_scan: out of memory"); return NULL; }
    for (int k = 0; k < v->n_in; k++) ins[k] = map[v->in[k]->id] ? map[v->in[k]->id] : v->in[k];
    tn_var *c = v->op == TN_OP_PROJ ? tn__proj(ins[0], (int)v->p.i[0])
                                    : tn__node_multi(v->graph, v->op, v->n_in, ins, &v->p, v->ext, v->n_out, "tn_scan");
    if (ins != ins_s) tn__free(ins);
    if (c) { c->flags = v->flags; c->name = v->name; }
    return c;
}

static tn_result tn__scan_add_ns(tn__scan_b *b, tn_var *outer, tn_var *ph) {
    tn__scan *s = b->s;
    if (s->n_ns == b->cap_ns) {
        int cap = b->cap_ns ? 2 * b->cap_ns : 8;
        tn_var **n = (tn_var **)tn__realloc(b->ns, (size_t)cap * sizeof *n);
        int *u = (int *)tn__realloc(s->ns_upd, (size_t)cap * sizeof *u);
        if (n) b->ns = n;
        if (u) s->ns_upd = u;
        if (!n || !u) return tn__scan_oom(s);
        b->cap_ns = cap;
    }
    tn_var **p = (tn_var **)tn__realloc(s->ph, ((size_t)s->n_ph + 1) * sizeof *p);
    if (!p) return tn__scan_oom(s);
    s->ph = p;
    s->ph[s->n_ph++] = ph;
    b->ns[s->n_ns] = outer;
    s->ns_upd[s->n_ns++] = -1;
    return TN_OK;
}

/* Captures free variables and hoists loop-invariant step expressions:
   both become non_sequences, and the loop-variant part of the step is
   rebuilt after their placeholders (so ids stay topological). */
static tn_result tn__scan_hoist(tn__scan_b *b, int first_id) {
    tn__scan *s = b->s;
    tn_var **inner = NULL, **freev = NULL, **map = NULL, **lift = NULL;
    int ni = 0, nf = 0, nl = 0;
    uint8_t *inv = NULL;
    tn_result r = tn__scan_collect(b, first_id, &inner, &ni, &freev, &nf);
    if (r != TN_OK) return r;
    int nv = tn__graph_nvars(b->g);
    inv = (uint8_t *)tn__calloc((size_t)nv + 1, 1);       /* 1 invariant, 2 variant (by id) */
    lift = (tn_var **)tn__malloc(((size_t)ni + nf + 1) * sizeof *lift);
    map = (tn_var **)tn__calloc((size_t)nv + 1, sizeof *map);
    if (!inv || !lift || !map) { r = tn__scan_oom(s); goto done; }
    int nvar_ph = s->n_ph - s->n_ns;
    for (int p = 0; p < s->n_ph; p++)
        inv[s->ph[p]->id] = p >= nvar_ph && s->ns_upd[p - nvar_ph] < 0 ? 1 : 2;
    for (int i = 0; i < nf; i++) inv[freev[i]->id] = 1;
    for (int i = 0; i < ni; i++) {
        tn_var *v = inner[i];
        uint8_t st = 1;
        for (int k = 0; k < v->n_in; k++) if (inv[v->in[k]->id] == 2) st = 2;
        inv[v->id] = st;
    }
    /* lifted: invariant non-constant values read by a variant node or returned */
    uint8_t *want = (uint8_t *)tn__calloc((size_t)nv + 1, 1);
    if (!want) { r = tn__scan_oom(s); goto done; }
    for (int i = 0; i < ni; i++) {
        if (inv[inner[i]->id] != 2) continue;
        for (int k = 0; k < inner[i]->n_in; k++) want[inner[i]->in[k]->id] = 1;
    }
    for (int k = 0; k < s->n_res; k++) want[s->res[k]->id] = 1;
    for (int id = 0; id < nv; id++) {
        tn_var *v = tn__graph_var(b->g, id);
        if (want[id] && inv[id] == 1 && v->op != TN_OP_CONSTANT && !tn__scan_is_ph(b, v)) lift[nl++] = v;
    }
    tn__free(want);
    if (nl == 0) goto done;
    /* invariant nodes, outside: non_sequence placeholders read their outer variables */
    for (int p = nvar_ph; p < s->n_ph; p++) map[s->ph[p]->id] = b->ns[p - nvar_ph];
    for (int i = 0; i < ni; i++) {
        if (inv[inner[i]->id] != 1) continue;
        if (!(map[inner[i]->id] = tn__scan_clone(inner[i], map))) { r = tn_last_result(); goto done; }
    }
    tn_var **map2 = (tn_var **)tn__calloc((size_t)nv + 1, sizeof *map2);
    if (!map2) { r = tn__scan_oom(s); goto done; }
    for (int i = 0; i < nl && r == TN_OK; i++) {
        tn_var *x = lift[i], *outer = map[x->id] ? map[x->id] : x;
        char nm[96];
        snprintf(nm, sizeof nm, "%s", x->name ? x->name : "hoisted");
        tn_var *ph = tn_input(b->g, nm, x->type.dtype, x->type.ndim, x->type.shape, x->type.bcast);
        if (!ph) r = tn_last_result();
        else if ((r = tn__scan_add_ns(b, outer, ph)) == TN_OK) map2[x->id] = ph;
    }
    for (int i = 0; i < ni && r == TN_OK; i++) {
        if (inv[inner[i]->id] != 2) continue;
        if (!(map2[inner[i]->id] = tn__scan_clone(inner[i], map2))) r = tn_last_result();
    }
    for (int k = 0; k < s->n_res && r == TN_OK; k++) if (map2[s->res[k]->id]) s->res[k] = map2[s->res[k]->id];
    tn__free(map2);
    if (r == TN_OK) r = tn__scan_phidx(b);
done:
    tn__free(inner); tn__free(freev); tn__free(map); tn__free(lift); tn__free(inv);
    return r;
}

/* The tables tn__scan_res_types walks. */
static tn_result tn__scan_tables(tn__scan_b *b) {
    tn__scan *s = b->s;
    tn_var **fr = NULL;
    int nf = 0;
    tn_result r = tn__scan_collect(b, 0, &s->inner, &s->n_inner, &fr, &nf);
    tn__free(fr);
    if (r != TN_OK) return r;
    int nin = 0;
    for (int i = 0; i < s->n_inner; i++) nin += s->inner[i]->n_in;
    s->inner_in = (int *)tn__malloc(((size_t)nin + 1) * sizeof(int));
    s->inner_in_off = (int *)tn__malloc(((size_t)s->n_inner + 1) * sizeof(int));
    s->inner_t_off = (int *)tn__malloc(((size_t)s->n_inner + 1) * sizeof(int));
    if (!s->inner_in || !s->inner_in_off || !s->inner_t_off) return tn__scan_oom(s);
    int nv = tn__graph_nvars(b->g);
    int *idx = (int *)tn__malloc(((size_t)nv + 1) * sizeof *idx);
    if (!idx) return tn__scan_oom(s);
    for (int i = 0; i < nv; i++) idx[i] = -1;
    int o = 0, t = 0;
    for (int i = 0; i < s->n_inner; i++) {
        tn_var *v = s->inner[i];
        idx[v->id] = i;
        s->inner_in_off[i] = o;
        s->inner_t_off[i] = t;
        t += v->n_out;
        for (int k = 0; k < v->n_in; k++) {
            tn_var *x = v->in[k];
            s->inner_in[o++] = tn__scan_is_ph(b, x) ? -1 - b->phidx[x->id] : idx[x->id] >= 0 ? idx[x->id] : INT32_MAX;
        }
    }
    s->n_types = t;
    tn__free(idx);
    return TN_OK;
}

static tn_result tn__scan_compile(tn__scan *s, tn_graph *g) {
    s->fn = tn_function(g, &(tn_func_desc){ .n_inputs = s->n_ph, .inputs = s->ph, .n_outputs = s->n_res,
                                            .outputs = s->res, .borrow = true, .name = s->name });
    if (!s->fn) return tn__err(tn_last_result(), "tn_scan '%s': compiling the step: %s", s->name, tn_last_error());
    s->args = (tn_array *)tn__calloc((size_t)s->n_ph + 1, sizeof *s->args);
    s->argp = (tn_array **)tn__calloc((size_t)s->n_ph + 1, sizeof *s->argp);
    s->resp = (tn_array **)tn__calloc((size_t)s->n_res + 1, sizeof *s->resp);
    if (!s->args || !s->argp || !s->resp) return tn__scan_oom(s);
    for (int p = 0; p < s->n_ph; p++) s->argp[p] = &s->args[p];
    return TN_OK;
}

/* The seed's warning case: scan(lambda x: dot(W, x), sequences=X) is one
   product, dot(X, W^T) (dot(x, W): dot(X, W)). NULL when not that case. */
static tn_var *tn__scan_as_dot(const tn__scan_b *b, tn_var *seq) {
    const tn__scan *s = b->s;
    if (s->n_seq != 1 || s->seq_nt[0] != 1 || s->tap[0] != 0 || s->n_out != 1 || s->init_in[0] >= 0 || s->n_upd)
        return NULL;
    tn_var *y = s->res[0], *x = s->ph[0];
    if (y->op != TN_OP_DOT || x->type.ndim != 1) return NULL;
    int xi = y->in[0] == x ? 0 : y->in[1] == x ? 1 : -1;
    if (xi < 0) return NULL;
    tn_var *w = y->in[1 - xi];
    if (!tn__scan_is_ph(b, w) || b->phidx[w->id] < s->n_ph - s->n_ns || w->type.ndim != 2) return NULL;
    tn_var *W = b->ns[b->phidx[w->id] - (s->n_ph - s->n_ns)];
    tn_var *X = seq;
    if (s->backwards) X = tn_slice(X, 0, TN_NONE, TN_NONE, -1);
    if (s->n_steps >= 0) X = tn_slice(X, 0, TN_NONE, s->n_steps, 1);
    return xi == 1 ? tn_dot(X, tn_transpose(W, NULL)) : tn_dot(X, W);
}

static tn_result tn__scan_check_desc(const tn_scan_desc *d, tn_var **outputs, tn_graph **gp) {
    const char *W = "tn_scan";
    if (!d) return tn__err(TN_ERR_NULL, "%s: desc is NULL", W);
    const char *nm = d->name ? d->name : "scan";
    if (!d->step) return tn__err(TN_ERR_NULL, "%s '%s': step is NULL", W, nm);
    if (d->n_sequences < 0 || d->n_outputs < 0 || d->n_non_sequences < 0)
        return tn__err(TN_ERR_INVALID, "%s '%s': negative count (n_sequences %d, n_outputs %d, n_non_sequences %d)", W, nm,
                       d->n_sequences, d->n_outputs, d->n_non_sequences);
    if ((d->n_sequences && !d->sequences) || (d->n_outputs && !d->outputs) || (d->n_non_sequences && !d->non_sequences))
        return tn__err(TN_ERR_NULL, "%s '%s': sequences, outputs or non_sequences is NULL for a nonzero count", W, nm);
    if (d->n_outputs && !outputs) return tn__err(TN_ERR_NULL, "%s '%s': outputs is NULL (room for %d variables needed)", W, nm, d->n_outputs);
    if (d->has_n_steps && d->n_steps < 0) return tn__err(TN_ERR_INVALID, "%s '%s': n_steps is %lld", W, nm, (long long)d->n_steps);
    if (!d->has_n_steps && d->n_sequences == 0)
        return tn__err(TN_ERR_INVALID, "%s '%s': no sequences to take the number of steps from: set has_n_steps and n_steps", W, nm);
    if (d->truncate_gradient < 0) return tn__err(TN_ERR_INVALID, "%s '%s': truncate_gradient is %lld (0: no truncation)", W, nm, (long long)d->truncate_gradient);
    tn_graph *g = d->graph;
    char sb[128];
    for (int i = 0; i < d->n_sequences; i++) {
        const tn_scan_seq *q = &d->sequences[i];
        if (!q->var) return tn__err(TN_ERR_NULL, "%s '%s': sequence %d is NULL (did its constructor fail?)", W, nm, i);
        if (q->var->type.ndim < 1)
            return tn__err(TN_ERR_SHAPE, "%s '%s': sequence %d ('%s') has shape %s: a sequence needs a leading time dim", W, nm, i,
                           tn__scan_vname(q->var), tn__shape_str(q->var->type.ndim, q->var->type.shape, sb));
        if (q->n_taps < 0 || (q->n_taps && !q->taps)) return tn__err(TN_ERR_INVALID, "%s '%s': sequence %d: bad taps", W, nm, i);
        if (!g) g = q->var->graph;
    }
    for (int k = 0; k < d->n_outputs; k++) {
        const tn_scan_out *o = &d->outputs[k];
        if (o->n_taps < 0 || (o->n_taps && !o->taps)) return tn__err(TN_ERR_INVALID, "%s '%s': output %d: bad taps", W, nm, k);
        if (o->n_taps && !o->init) return tn__err(TN_ERR_INVALID, "%s '%s': output %d has taps but no init", W, nm, k);
        for (int j = 0; j < o->n_taps; j++)
            if (o->taps[j] >= 0)
                return tn__err(TN_ERR_INVALID, "%s '%s': output %d: tap %d is not negative (x(t-1) is tap -1; a step "
                               "cannot read its own output)", W, nm, k, o->taps[j]);
        bool single = o->n_taps == 0 || (o->n_taps == 1 && o->taps[0] == -1);
        if (o->init && !single && o->init->type.ndim < 1)
            return tn__err(TN_ERR_SHAPE, "%s '%s': output %d has taps other than {-1}, so its init ('%s') needs a leading "
                           "time dim", W, nm, k, tn__scan_vname(o->init));
        if (o->init && !g) g = o->init->graph;
    }
    for (int i = 0; i < d->n_non_sequences; i++) {
        if (!d->non_sequences[i]) return tn__err(TN_ERR_NULL, "%s '%s': non_sequence %d is NULL", W, nm, i);
        if (!g) g = d->non_sequences[i]->graph;
    }
    if (!g) return tn__err(TN_ERR_NULL, "%s '%s': no variable names the graph: set desc->graph", W, nm);
    for (int i = 0; i < d->n_sequences; i++)
        if (d->sequences[i].var->graph != g) return tn__err(TN_ERR_GRAPH, "%s '%s': sequence %d belongs to another graph", W, nm, i);
    for (int k = 0; k < d->n_outputs; k++)
        if (d->outputs[k].init && d->outputs[k].init->graph != g) return tn__err(TN_ERR_GRAPH, "%s '%s': the init of output %d belongs to another graph", W, nm, k);
    for (int i = 0; i < d->n_non_sequences; i++)
        if (d->non_sequences[i]->graph != g) return tn__err(TN_ERR_GRAPH, "%s '%s': non_sequence %d belongs to another graph", W, nm, i);
    *gp = g;
    return TN_OK;
}

/* Tap tables and placeholders (sequence taps, output taps, non_sequences). */
static tn_result tn__scan_setup(tn__scan_b *b, const tn_scan_desc *d) {
    tn__scan *s = b->s;
    int nt = 0, nseq = d->n_sequences, nout = d->n_outputs;
    for (int i = 0; i < nseq; i++) nt += d->sequences[i].n_taps ? d->sequences[i].n_taps : 1;
    for (int k = 0; k < nout; k++) nt += d->outputs[k].init ? (d->outputs[k].n_taps ? d->outputs[k].n_taps : 1) : 0;
    s->n_seq = nseq; s->n_out = nout;
    s->seq_nt = (int *)tn__calloc((size_t)nseq + 1, sizeof(int));
    s->seq_off = (int *)tn__calloc((size_t)nseq + 1, sizeof(int));
    s->seq_lo = (int *)tn__calloc((size_t)nseq + 1, sizeof(int));
    s->seq_hi = (int *)tn__calloc((size_t)nseq + 1, sizeof(int));
    s->out_nt = (int *)tn__calloc((size_t)nout + 1, sizeof(int));
    s->out_off = (int *)tn__calloc((size_t)nout + 1, sizeof(int));
    s->out_len0 = (int *)tn__calloc((size_t)nout + 1, sizeof(int));
    s->out_stacked = (bool *)tn__calloc((size_t)nout + 1, sizeof(bool));
    s->init_in = (int *)tn__calloc((size_t)nout + 1, sizeof(int));
    s->tap = (int *)tn__calloc((size_t)nt + 1, sizeof(int));
    s->ph = (tn_var **)tn__calloc((size_t)nt + 1, sizeof(tn_var *));
    if (!s->seq_nt || !s->seq_off || !s->seq_lo || !s->seq_hi || !s->out_nt || !s->out_off || !s->out_len0 ||
        !s->out_stacked || !s->init_in || !s->tap || !s->ph)
        return tn__scan_oom(s);
    int t = 0;
    char nm[160];
    for (int i = 0; i < nseq; i++) {
        const tn_scan_seq *q = &d->sequences[i];
        s->seq_off[i] = t;
        s->seq_nt[i] = q->n_taps ? q->n_taps : 1;
        for (int j = 0; j < s->seq_nt[i]; j++) {
            int a = q->n_taps ? q->taps[j] : 0;
            s->tap[t++] = a;
            if (a < s->seq_lo[i]) s->seq_lo[i] = a;
            if (a > s->seq_hi[i]) s->seq_hi[i] = a;
        }
        tn_type row = tn__type_drop0(&q->var->type);
        for (int j = 0; j < s->seq_nt[i]; j++) {
            int a = s->tap[s->seq_off[i] + j];
            if (a) snprintf(nm, sizeof nm, "%s[t%+d]", tn__scan_vname(q->var), a);
            else snprintf(nm, sizeof nm, "%s[t]", tn__scan_vname(q->var));
            tn_var *p = tn_input(b->g, nm, row.dtype, row.ndim, row.shape, row.bcast);
            if (!p) return tn_last_result();
            s->ph[s->n_ph++] = p;
        }
    }
    int n_init = 0;
    for (int k = 0; k < nout; k++) {
        const tn_scan_out *o = &d->outputs[k];
        s->out_off[k] = t;
        s->init_in[k] = -1;
        if (!o->init) continue;
        s->out_nt[k] = o->n_taps ? o->n_taps : 1;
        s->out_stacked[k] = !(s->out_nt[k] == 1 && (o->n_taps == 0 || o->taps[0] == -1));
        s->init_in[k] = nseq + n_init++;
        for (int j = 0; j < s->out_nt[k]; j++) {
            int a = o->n_taps ? o->taps[j] : -1;
            s->tap[t++] = a;
            if (-a > s->out_len0[k]) s->out_len0[k] = -a;
        }
        tn_type st = s->out_stacked[k] ? tn__type_drop0(&o->init->type) : o->init->type;
        for (int j = 0; j < s->out_nt[k]; j++) {
            snprintf(nm, sizeof nm, "%s[t%+d]", o->init->name ? o->init->name : "out", s->tap[s->out_off[k] + j]);
            tn_var *p = tn_input(b->g, nm, st.dtype, st.ndim, st.shape, st.bcast);
            if (!p) return tn_last_result();
            s->ph[s->n_ph++] = p;
        }
    }
    s->n_init = n_init;
    for (int i = 0; i < d->n_non_sequences; i++) {
        tn_var *v = d->non_sequences[i];
        tn_var *p = tn_input(b->g, v->name ? v->name : "non_seq", v->type.dtype, v->type.ndim, v->type.shape, v->type.bcast);
        if (!p) return tn_last_result();
        tn_result r = tn__scan_add_ns(b, v, p);
        if (r != TN_OK) return r;
    }
    return tn__scan_phidx(b);
}

/* Calls the step and checks what it returned. */
static tn_result tn__scan_run_step(tn__scan_b *b, const tn_scan_desc *d) {
    tn__scan *s = b->s;
    int nseq = d->n_sequences, nout = d->n_outputs, nns = d->n_non_sequences;
    tn_var ***seqrows = (tn_var ***)tn__calloc((size_t)nseq + 1, sizeof *seqrows);
    tn_var ***outrows = (tn_var ***)tn__calloc((size_t)nout + 1, sizeof *outrows);
    tn_var **outs = (tn_var **)tn__calloc((size_t)nout + 1, sizeof *outs);
    tn_var **ups = (tn_var **)tn__calloc((size_t)nns + 1, sizeof *ups);
    tn_result r = TN_OK;
    if (!seqrows || !outrows || !outs || !ups) { r = tn__scan_oom(s); goto done; }
    int p = 0;
    for (int i = 0; i < nseq; i++) { seqrows[i] = &s->ph[p]; p += s->seq_nt[i]; }
    for (int k = 0; k < nout; k++) { outrows[k] = s->out_nt[k] ? &s->ph[p] : NULL; p += s->out_nt[k]; }
    tn_scan_step st = { b->g, (tn_var *const *const *)seqrows, (tn_var *const *const *)outrows, s->ph + p, s->n_ph,
                        s->ph, outs, ups };
    if ((r = d->step(&st, d->user)) != TN_OK) {
        r = tn__err(r, "tn_scan '%s': the step callback failed: %s", s->name, tn_last_error());
        goto done;
    }
    int nu = 0;
    for (int i = 0; i < nns; i++) if (ups[i]) nu++;
    s->n_upd = nu;
    s->n_res = nout + nu;
    s->res = (tn_var **)tn__calloc((size_t)s->n_res + 1, sizeof *s->res);
    s->upd_ns = (int *)tn__calloc((size_t)nu + 1, sizeof *s->upd_ns);
    if (!s->res || !s->upd_ns) { r = tn__scan_oom(s); goto done; }
    char a[160], c[160];
    for (int k = 0; k < nout && r == TN_OK; k++) {
        tn_var *y = outs[k];
        if (!y) { r = tn__err(TN_ERR_NULL, "tn_scan '%s': the step left output %d NULL (%s)", s->name, k, tn_last_error()); break; }
        if (y->graph != b->g) { r = tn__err(TN_ERR_GRAPH, "tn_scan '%s': step output %d belongs to another graph", s->name, k); break; }
        if (y->n_out > 1) { r = tn__err(TN_ERR_INVALID, "tn_scan '%s': step output %d is a node with %d outputs; pick one", s->name, k, y->n_out); break; }
        if (s->out_nt[k]) {
            const tn_type *pt = &outrows[k][0]->type;
            if (y->type.dtype != pt->dtype || y->type.ndim != pt->ndim)
                r = tn__err(y->type.dtype != pt->dtype ? TN_ERR_DTYPE : TN_ERR_SHAPE, "tn_scan '%s': step output %d is %s "
                            "but its state (from its init '%s') is %s: they must match (cast the output or the init)",
                            s->name, k, tn__type_str(&y->type, a), tn__scan_vname(d->outputs[k].init), tn__type_str(pt, c));
        }
        s->res[k] = y;
    }
    int u = 0;
    for (int i = 0; i < nns && r == TN_OK; i++) {
        if (!ups[i]) continue;
        tn_var *sv = d->non_sequences[i], *y = ups[i];
        if (sv->op != TN_OP_SHARED)
            r = tn__err(TN_ERR_UPDATE, "tn_scan '%s': the step updates non_sequence %d ('%s'), which is not a shared variable",
                        s->name, i, tn__scan_vname(sv));
        else if (y->graph != b->g) r = tn__err(TN_ERR_GRAPH, "tn_scan '%s': the update of '%s' belongs to another graph", s->name, tn__scan_vname(sv));
        else if (y->type.dtype != sv->type.dtype || y->type.ndim != sv->type.ndim)
            r = tn__err(TN_ERR_UPDATE, "tn_scan '%s': shared variable '%s' is %s but the step's new value is %s", s->name,
                        tn__scan_vname(sv), tn__type_str(&sv->type, a), tn__type_str(&y->type, c));
        if (r != TN_OK) break;
        s->res[nout + u] = y;
        s->upd_ns[u] = i;
        s->ns_upd[i] = u++;
    }
    if (r == TN_OK && s->n_res == 0) r = tn__err(TN_ERR_INVALID, "tn_scan '%s': no outputs and no updates", s->name);
done:
    tn__free(seqrows); tn__free(outrows); tn__free(outs); tn__free(ups);
    return r;
}

TN_API tn_result tn_scan(const tn_scan_desc *d, tn_var **outputs, tn_update *updates, int *n_updates) {
    tn_graph *g = NULL;
    for (int k = 0; outputs && d && k < d->n_outputs; k++) outputs[k] = NULL;
    if (n_updates) *n_updates = 0;
    tn_result r = tn__scan_check_desc(d, outputs, &g);
    if (r != TN_OK) return r;
    tn__scan *s = (tn__scan *)tn__calloc(1, sizeof *s);
    if (!s) return tn__err(TN_ERR_OOM, "tn_scan: out of memory");
    s->g = g;
    snprintf(s->name, sizeof s->name, "%s", d->name ? d->name : "scan");
    s->n_steps = d->has_n_steps ? d->n_steps : -1;
    s->backwards = d->go_backwards;
    s->truncate = d->truncate_gradient;
    tn__scan_b b = { s, g, NULL, 0, NULL, 0 };
    int first_id = tn__graph_nvars(g);
    tn_var **ins = NULL, *node = NULL;
    if ((r = tn__scan_setup(&b, d)) != TN_OK) goto fail;
    if ((r = tn__scan_run_step(&b, d)) != TN_OK) goto fail;
    if (s->n_upd && !updates) { r = tn__err(TN_ERR_NULL, "tn_scan '%s': the step makes %d updates but updates is NULL", s->name, s->n_upd); goto fail; }
    if ((r = tn__scan_hoist(&b, first_id)) != TN_OK) goto fail;
    tn_var *y = tn__scan_as_dot(&b, s->n_seq ? d->sequences[0].var : NULL);
    if (y) {   /* no loop at all */
        outputs[0] = y;
        tn__free(b.ns); tn__free(b.phidx);
        tn__scan_free_one(s);
        return TN_OK;
    }
    if ((r = tn__scan_tables(&b)) != TN_OK) goto fail;
    if ((r = tn__scan_compile(s, g)) != TN_OK) goto fail;
    int nin = s->n_seq + s->n_init + s->n_ns;
    if (!(ins = (tn_var **)tn__malloc(((size_t)nin + 1) * sizeof *ins))) { r = tn__scan_oom(s); goto fail; }
    for (int i = 0; i < s->n_seq; i++) ins[i] = d->sequences[i].var;
    for (int k = 0; k < s->n_out; k++) if (s->init_in[k] >= 0) ins[s->init_in[k]] = d->outputs[k].init;
    for (int i = 0; i < s->n_ns; i++) ins[s->n_seq + s->n_init + i] = b.ns[i];
    tn__scan_register(s);
    node = tn__node_multi(g, TN_OP_SCAN, nin, ins, NULL, s, s->n_res, "tn_scan");
    tn__free(ins);
    tn__free(b.ns); tn__free(b.phidx);
    if (!node) { tn__scan_unregister_free(s); return tn_last_result(); }
    if (d->name) node->name = tn__graph_strdup(g, d->name);
    for (int k = 0; k < s->n_res; k++) {
        tn_var *o = s->n_res == 1 ? node : tn__proj(node, k);
        if (o && k < s->n_out && s->out_len0[k] > 0) o = tn_slice(o, 0, s->out_len0[k], TN_NONE, 1);
        if (!o) return tn__err(tn_last_result(), "tn_scan '%s': %s", s->name, tn_last_error());
        if (k < s->n_out) outputs[k] = o;
        else updates[k - s->n_out] = (tn_update){ d->non_sequences[s->upd_ns[k - s->n_out]], o };
    }
    if (n_updates) *n_updates = s->n_upd;
    return TN_OK;
fail:
    tn__free(b.ns); tn__free(b.phidx);
    tn__scan_free_one(s);
    return r;
}

/* >>scan_grad ------------------------------------------------------------ */

static tn_var *tn__scan_zeros_like(tn_var *x) {
    tn_var *z = tn_lit(x, 0.0);
    if (z && z->type.dtype != x->type.dtype) z = tn_cast(z, x->type.dtype);
    return tn_fill(x, z);
}

/* Gradients reaching output k of a multi-output node through its PROJ wait
   in the scan (gpend) until the grad driver reaches the scan node itself;
   the node's own accumulator gets a zero of output 0's type so it is visited. */
static tn_result tn__scan_proj_vjp(tn_var *node, tn_var *g, tn_var **gin) {
    tn_var *src = node->in[0];
    int k = (int)node->p.i[0];
    tn__scan *s = src->op == TN_OP_SCAN ? (tn__scan *)src->ext : NULL;
    if (!s || s->bwd) {
        const tn_op_def *def = tn__op_def(src->op);
        return tn__err(TN_ERR_UNSUPPORTED, "tn_grad: output %d of %s (node '%s') has no gradient rule", k,
                       def && def->name ? def->name : "?", tn__scan_vname(src));
    }
    if (!s->gpend && !(s->gpend = (tn_var **)tn__calloc((size_t)s->n_res + 1, sizeof *s->gpend))) return tn__scan_oom(s);
    s->gpend[k] = s->gpend[k] ? tn_add(s->gpend[k], g) : g;
    gin[0] = k == 0 ? g : tn__scan_zeros_like(tn__proj(src, 0));
    if (!s->gpend[k] || !gin[0]) return tn__err(tn_last_result(), "tn_grad: scan '%s': %s", s->name, tn_last_error());
    return TN_OK;
}

/* The gradient scan of s, built once: its step is tn_grad of s's step with
   known gradients of the step's outputs (new placeholders). */
static tn_result tn__scan_build_grad(tn__scan *s) {
    if (s->grad) return TN_OK;
    tn__scan *b = (tn__scan *)tn__calloc(1, sizeof *b);
    if (!b) return tn__scan_oom(s);
    b->g = s->g;
    b->bwd = true;
    b->fwd = s;
    memcpy(b->name, s->name, sizeof b->name);
    int nf = 0;
    for (int k = 0; k < s->n_out; k++) if (tn_dtype_is_float(s->res[k]->type.dtype)) nf++;
    b->ph = (tn_var **)tn__calloc((size_t)(s->n_ph + nf) + 1, sizeof *b->ph);
    b->g_of_out = (int *)tn__calloc((size_t)s->n_out + 1, sizeof(int));
    b->res = (tn_var **)tn__calloc((size_t)s->n_ph + 1, sizeof *b->res);
    b->res_ph = (int *)tn__calloc((size_t)s->n_ph + 1, sizeof(int));
    tn_var **wrt = (tn_var **)tn__calloc((size_t)s->n_ph + 1, sizeof *wrt);
    tn_var **kv = (tn_var **)tn__calloc((size_t)nf + 1, sizeof *kv);
    tn_result r = TN_OK;
    if (!b->ph || !b->g_of_out || !b->res || !b->res_ph || !wrt || !kv) { r = tn__scan_oom(s); goto done; }
    memcpy(b->ph, s->ph, (size_t)s->n_ph * sizeof *b->ph);
    b->n_ph = s->n_ph;
    int nk = 0;
    for (int k = 0; k < s->n_out; k++) {
        b->g_of_out[k] = -1;
        tn_var *y = s->res[k];
        if (!tn_dtype_is_float(y->type.dtype)) continue;
        char nm[96];
        snprintf(nm, sizeof nm, "d_out%d", k);
        tn_var *gp = tn_input(s->g, nm, y->type.dtype, y->type.ndim, NULL, y->type.bcast);
        if (!gp) { r = tn_last_result(); goto done; }
        b->g_of_out[k] = b->n_ph;
        b->ph[b->n_ph++] = gp;
        kv[nk++] = y;
    }
    int nw = 0;
    for (int p = 0; p < s->n_ph; p++)
        if (tn_dtype_is_float(s->ph[p]->type.dtype)) { b->res_ph[nw] = p; wrt[nw++] = s->ph[p]; }
    b->n_res = nw;
    if (nk > 0 && nw > 0) {
        tn_grad_options opt;
        memset(&opt, 0, sizeof opt);
        opt.disconnected_inputs = TN_DISCONNECTED_IGNORE;
        opt.n_known_grads = nk;
        opt.known_vars = kv;
        opt.known_grads = b->ph + s->n_ph;
        if ((r = tn_grad(NULL, nw, wrt, b->res, &opt)) != TN_OK) {
            r = tn__err(r, "tn_grad: through scan '%s': the step's gradient: %s", s->name, tn_last_error());
            goto done;
        }
        if ((r = tn__scan_compile(b, s->g)) != TN_OK) goto done;
    } else {
        b->n_res = 0;
    }
done:
    tn__free(wrt); tn__free(kv);
    if (r != TN_OK) { tn__scan_free_one(b); return r; }
    tn__scan_register(b);
    s->grad = b;
    return TN_OK;
}

static tn_result tn__scan_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    tn__scan *s = (tn__scan *)node->ext;
    if (s->bwd)
        return tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of scan '%s' is not differentiable again (second "
                       "derivatives through scan)", s->name);
    tn_var **gk = s->gpend;
    s->gpend = NULL;
    tn_var *one[1] = { g };
    if (node->n_out == 1) gk = one;
    tn_result r = TN_OK;
    tn_var **ins = NULL;
    if (s->n_upd > 0) {
        r = tn__err(TN_ERR_UNSUPPORTED, "tn_grad: through scan '%s' with updates of shared variables (%d): the gradient "
                    "needs every step's state, which a scan keeps only for its outputs", s->name, s->n_upd);
        goto done;
    }
    if (!gk) goto done;    /* no gradient reached an output */
    if ((r = tn__scan_build_grad(s)) != TN_OK) goto done;
    tn__scan *b = s->grad;
    if (!b->fn) goto done;   /* nothing float: no gradient */
    int nfin = node->n_in;
    if (!(ins = (tn_var **)tn__malloc(((size_t)nfin + 2 * s->n_out + 1) * sizeof *ins))) { r = tn__scan_oom(s); goto done; }
    for (int j = 0; j < nfin; j++) ins[j] = node->in[j];
    for (int k = 0; k < s->n_out; k++) {
        tn_var *P = node->n_out == 1 ? node : tn__proj(node, k);
        tn_var *G = b->g_of_out[k] < 0 ? P : gk[k] ? gk[k] : tn__scan_zeros_like(P);
        if (!P || !G) { r = tn__err(tn_last_result(), "tn_grad: scan '%s': %s", s->name, tn_last_error()); goto done; }
        ins[nfin + k] = P;
        ins[nfin + s->n_out + k] = G;
    }
    tn_var *gn = tn__node_multi(s->g, TN_OP_SCAN, nfin + 2 * s->n_out, ins, NULL, b, nfin, "tn_grad");
    if (!gn) { r = tn_last_result(); goto done; }
    for (int j = 0; j < nfin; j++) {
        if (!need[j]) continue;
        if (!(gin[j] = nfin == 1 ? gn : tn__proj(gn, j))) { r = tn_last_result(); goto done; }
    }
done:
    tn__free(ins);
    if (gk != one) tn__free(gk);
    return r;
}

/* >>scan_debugprint ------------------------------------------------------ */
/* tn_debugprint has no hook for inner graphs: this prints v's tree, then,
   for each scan v reaches, its step's results indented under a header. */

static tn_result tn__scan_print_inner(const tn__scan *s, const tn_var *node, FILE *out, int depth) {
    char lb[256];
    tn__scan_label(node, lb, sizeof lb);
    fprintf(out, "%*sInner graph of %s:\n", 2 * depth, "", lb);
    FILE *tmp = tmpfile();
    if (!tmp) return tn__err(TN_ERR_INVALID, "tn_scan_debugprint: no temporary file for the inner graph");
    tn__printer pr;     /* one printer: a node shared by two results keeps one id */
    tn_result r = tn__printer_init(&pr, tmp, tn__graph_nvars(s->g));
    if (r == TN_OK) {
        for (int k = 0; k < s->n_res && r == TN_OK; k++) r = tn__print_tree(&pr, s->res[k]);
        tn__printer_free(&pr);
    }
    rewind(tmp);
    char line[1024];
    bool bol = true;
    while (fgets(line, sizeof line, tmp)) {
        if (bol) fprintf(out, "%*s    > ", 2 * depth, "");
        fputs(line, out);
        bol = strchr(line, '\n') != NULL;
    }
    fclose(tmp);
    return r;
}

TN_API tn_result tn_scan_debugprint(const tn_var *v, FILE *out) {
    if (!v || !out) return tn__err(TN_ERR_NULL, "tn_scan_debugprint: %s is NULL", v ? "out" : "variable");
    tn_result r = tn_debugprint(v, out);
    if (r != TN_OK) return r;
    tn_var **order = NULL;
    int n = 0;
    tn_var *root = (tn_var *)v;
    if ((r = tn__toposort(&root, 1, tn__graph_nvars(v->graph), &order, &n, NULL, "tn_scan_debugprint")) != TN_OK) return r;
    for (int i = 0; i < n && r == TN_OK; i++) {
        if (order[i]->op != TN_OP_SCAN || !order[i]->ext) continue;
        const tn__scan *s = (const tn__scan *)order[i]->ext;
        r = tn__scan_print_inner(s, order[i], out, 0);
    }
    tn__free(order);
    return r;
}
