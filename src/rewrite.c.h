/* >>rewrite: the optimizer: one rewrite engine and the passes built on it.

   tn__optimize(fg, roots) rewrites a function-private graph in place. Passes,
   in this order (DESIGN.md):
     1 canonicalize  x*1, x+0, x-x, --x, x**k, constant chains, shape-op pairs
     2 merge         CSE by hash-consing; equal constants become one node
     3 fold          nodes whose inputs are all constants run at compile time
     4 stabilize     log1p, expm1, softplus forms, log_softmax, logsumexp
     5 specialize    dot + bias -> gemm / gemv
     6 place         the back end's placement pass (tn_backend.place), if any
     7 fuse          elementwise groups -> Composite (several outputs allowed);
                     a group feeding a reduction becomes its prologue
     8 inplace       destroy map (node->inplace) where an input dies here
   TN_MODE_FAST_COMPILE runs only merge and fold.

   The engine. A rewrite (tn__rewrite) is data: a name, the ops it triggers
   on, constraints the driver checks, and a builder that returns the
   replacement (or NULL: no change). tn__rw_run applies a group of rewrites to
   a fixpoint with a FIFO work list: when a node is replaced, its clients and
   the new nodes are queued; nothing is rescanned. A clients map (who reads
   each node, and at which input slot) is kept exact under replacement: each
   node remembers, per input slot, its position in that input's client list,
   so a use is added or removed in O(1). A node nobody reads (and that is no
   root) is dead: its uses of its inputs are dropped, transitively. Every pass
   is linear in the graph (or n log n); traversals are iterative (chains of
   100k nodes). */
#include <string.h>
#include <math.h>

#ifdef TENSOR_STATIC
#define TN__GLOBAL static
#else
#define TN__GLOBAL
#endif
TN__GLOBAL int tn__fuse_max_inputs = 64;
TN__GLOBAL bool tn__fuse_into_reductions = true;

/* >>rewrite_counters: which rewrite fired how often in this thread's last optimize */
#define TN__RW_MAX_NAMES 128
static _Thread_local struct { const char *name; int n; } tn__rw_counts[TN__RW_MAX_NAMES];
static _Thread_local int tn__rw_n_counts;

static void tn__rw_count(const char *name) {
    for (int i = 0; i < tn__rw_n_counts; i++)
        if (tn__rw_counts[i].name == name || !strcmp(tn__rw_counts[i].name, name)) { tn__rw_counts[i].n++; return; }
    if (tn__rw_n_counts < TN__RW_MAX_NAMES) {
        tn__rw_counts[tn__rw_n_counts].name = name;
        tn__rw_counts[tn__rw_n_counts++].n = 1;
    }
}

TN_API int tn__rewrite_count(const char *name) {
    int n = 0;
    for (int i = 0; i < tn__rw_n_counts; i++)
        if (!name || !strcmp(tn__rw_counts[i].name, name)) n += tn__rw_counts[i].n;
    return n;
}

/* >>rewrite_engine ------------------------------------------------------- */

typedef struct tn__use { tn_var *c; int k; } tn__use;   /* c->in[k] is this node */

typedef struct tn__ninfo {
    tn__use *use;
    int n_use, cap_use;
    int *pos;          /* pos[k]: index of (this, k) in in[k]'s use list */
    int n_root;        /* how often it is in roots[] */
    unsigned stamp;    /* traversal marks */
    bool live, queued, known;
    int grp, reach;    /* fusion scratch */
    uint64_t rmask;
} tn__ninfo;

typedef struct tn__rw {
    tn_graph *g;
    tn_var **roots;
    int n_roots;
    tn__ninfo *ni;     /* by node id */
    int cap_ni;
    int synced;        /* graph vars [0, synced) are in the clients map */
    tn_var **q;        /* FIFO work list */
    int q_head, q_len, q_cap;
    tn_var **stk;      /* scratch stack (kill, revive, topo) */
    int stk_cap;
    unsigned stamp;
    int mk;            /* the input index a constant constraint matched */
    bool oom;
} tn__rw;

static tn__ninfo *tn__ni(tn__rw *c, const tn_var *v) { return &c->ni[v->id]; }
static bool tn__rw_live(tn__rw *c, const tn_var *v) { return v->id < c->synced && c->ni[v->id].live; }
static int tn__rw_nuses(tn__rw *c, const tn_var *v) { return c->ni[v->id].n_use; }

static bool tn__rw_stk_reserve(tn__rw *c, int n) {
    if (n <= c->stk_cap) return true;
    int cap = c->stk_cap ? c->stk_cap : 64;
    while (cap < n) cap *= 2;
    tn_var **s = (tn_var **)tn__realloc(c->stk, (size_t)cap * sizeof *s);
    if (!s) { c->oom = true; return false; }
    c->stk = s; c->stk_cap = cap;
    return true;
}

static void tn__rw_add_use(tn__rw *c, tn_var *x, tn_var *client, int k) {
    tn__ninfo *X = tn__ni(c, x);
    if (X->n_use == X->cap_use) {
        int cap = X->cap_use ? 2 * X->cap_use : 2;
        tn__use *u = (tn__use *)tn__realloc(X->use, (size_t)cap * sizeof *u);
        if (!u) { c->oom = true; return; }
        X->use = u; X->cap_use = cap;
    }
    tn__ni(c, client)->pos[k] = X->n_use;
    X->use[X->n_use++] = (tn__use){ client, k };
}

static void tn__rw_del_use(tn__rw *c, tn_var *x, tn_var *client, int k) {
    tn__ninfo *X = tn__ni(c, x);
    int p = tn__ni(c, client)->pos[k];
    TN_ASSERT(p >= 0 && p < X->n_use && X->use[p].c == client && X->use[p].k == k);
    tn__use last = X->use[--X->n_use];
    X->use[p] = last;
    tn__ni(c, last.c)->pos[last.k] = p;
}

static void tn__rw_enqueue(tn__rw *c, tn_var *v) {
    tn__ninfo *I = tn__ni(c, v);
    if (I->queued || !I->live) return;
    if (c->q_len == c->q_cap) {     /* ring buffer: grow and unwrap */
        int cap = c->q_cap ? 2 * c->q_cap : 256;
        tn_var **q = (tn_var **)tn__malloc((size_t)cap * sizeof *q);
        if (!q) { c->oom = true; return; }
        for (int i = 0; i < c->q_len; i++) q[i] = c->q[(c->q_head + i) % c->q_cap];
        tn__free(c->q);
        c->q = q; c->q_cap = cap; c->q_head = 0;
    }
    c->q[(c->q_head + c->q_len++) % c->q_cap] = v;
    I->queued = true;
}

static tn_var *tn__rw_dequeue(tn__rw *c) {
    if (!c->q_len) return NULL;
    tn_var *v = c->q[c->q_head];
    c->q_head = (c->q_head + 1) % c->q_cap;
    c->q_len--;
    tn__ni(c, v)->queued = false;
    return v;
}

/* Brings nodes created since the last sync into the clients map (live). */
static void tn__rw_sync(tn__rw *c) {
    int n = tn__graph_nvars(c->g);
    if (n > c->cap_ni) {
        int cap = c->cap_ni ? c->cap_ni : 256;
        while (cap < n) cap *= 2;
        tn__ninfo *ni = (tn__ninfo *)tn__realloc(c->ni, (size_t)cap * sizeof *ni);
        if (!ni) { c->oom = true; return; }
        memset(ni + c->cap_ni, 0, (size_t)(cap - c->cap_ni) * sizeof *ni);
        c->ni = ni; c->cap_ni = cap;
    }
    /* Entries first, uses second: a pass outside the engine (placement) may
       have rewired a node to read one created after it. */
    int first = c->synced;
    for (int i = first; i < n; i++) {
        tn_var *v = tn__graph_var(c->g, i);
        TN_ASSERT(v->id == i);
        tn__ninfo *I = &c->ni[i];
        memset(I, 0, sizeof *I);
        I->live = true;
        I->known = true;
        I->grp = -1;
        if (v->n_in && !(I->pos = (int *)tn__malloc((size_t)v->n_in * sizeof *I->pos))) { c->oom = true; return; }
        c->synced = i + 1;
    }
    for (int i = first; i < n; i++) {
        tn_var *v = tn__graph_var(c->g, i);
        for (int k = 0; k < v->n_in; k++) tn__rw_add_use(c, v->in[k], v, k);
    }
}

/* Kills v if nothing reads it, then whatever that leaves unread. */
static void tn__rw_kill(tn__rw *c, tn_var *v) {
    int sp = 0;
    if (!tn__rw_stk_reserve(c, 1)) return;
    c->stk[sp++] = v;
    while (sp) {
        tn_var *x = c->stk[--sp];
        tn__ninfo *X = tn__ni(c, x);
        if (!X->live || X->n_use || X->n_root) continue;
        X->live = false;
        if (!tn__rw_stk_reserve(c, sp + x->n_in)) return;
        for (int k = 0; k < x->n_in; k++) {
            tn__rw_del_use(c, x->in[k], x, k);
            c->stk[sp++] = x->in[k];
        }
    }
}

/* Makes a dead node (and its dead inputs) live again, with its uses. */
static void tn__rw_revive(tn__rw *c, tn_var *v) {
    if (tn__ni(c, v)->live) return;
    int sp = 0;
    if (!tn__rw_stk_reserve(c, 1)) return;
    c->stk[sp++] = v;
    tn__ni(c, v)->live = true;
    while (sp) {
        tn_var *x = c->stk[--sp];
        if (!tn__rw_stk_reserve(c, sp + x->n_in)) return;
        for (int k = 0; k < x->n_in; k++) {
            tn__rw_add_use(c, x->in[k], x, k);
            if (!tn__ni(c, x->in[k])->live) { tn__ni(c, x->in[k])->live = true; c->stk[sp++] = x->in[k]; }
        }
    }
}

/* Every read of x (clients and roots) now reads y; x dies. */
static void tn__rw_replace(tn__rw *c, tn_var *x, tn_var *y) {
    TN_ASSERT(x != y);
    tn__rw_revive(c, y);
    while (tn__ni(c, x)->n_use) {
        tn__use u = tn__ni(c, x)->use[tn__ni(c, x)->n_use - 1];
        tn__rw_del_use(c, x, u.c, u.k);
        u.c->in[u.k] = y;
        tn__rw_add_use(c, y, u.c, u.k);
        tn__rw_enqueue(c, u.c);
    }
    if (tn__ni(c, x)->n_root) {
        for (int i = 0; i < c->n_roots; i++)
            if (c->roots[i] == x) { c->roots[i] = y; tn__ni(c, y)->n_root++; }
        tn__ni(c, x)->n_root = 0;
    }
    tn__rw_kill(c, x);
}

/* Live nodes in topological order (inputs first), from the roots. *out is
   owned by the caller. Iterative DFS: graphs may be 100k nodes deep. */
static int tn__rw_topo(tn__rw *c, tn_var ***out) {
    int cap = c->synced + 1, n = 0, sp = 0;
    tn_var **ord = (tn_var **)tn__malloc((size_t)cap * sizeof *ord);
    int *next = (int *)tn__malloc((size_t)cap * sizeof *next);
    tn_var **stk = (tn_var **)tn__malloc((size_t)cap * sizeof *stk);
    if (!ord || !next || !stk) { tn__free(ord); tn__free(next); tn__free(stk); c->oom = true; *out = NULL; return 0; }
    unsigned st = ++c->stamp;
    for (int r = 0; r < c->n_roots; r++) {
        tn_var *root = c->roots[r];
        if (tn__ni(c, root)->stamp == st) continue;
        tn__ni(c, root)->stamp = st;
        stk[sp] = root; next[sp++] = 0;
        while (sp) {
            tn_var *v = stk[sp - 1];
            if (next[sp - 1] < v->n_in) {
                tn_var *u = v->in[next[sp - 1]++];
                if (tn__ni(c, u)->stamp != st) { tn__ni(c, u)->stamp = st; stk[sp] = u; next[sp++] = 0; }
            } else {
                ord[n++] = v;
                sp--;
            }
        }
    }
    tn__free(next);
    tn__free(stk);
    *out = ord;
    return n;
}

static bool tn__rw_init(tn__rw *c, tn_graph *g, tn_var **roots, int n_roots) {
    memset(c, 0, sizeof *c);
    c->g = g; c->roots = roots; c->n_roots = n_roots;
    tn__rw_sync(c);
    if (c->oom) return false;
    tn_var **ord;
    int n = tn__rw_topo(c, &ord);
    if (c->oom) return false;
    unsigned st = c->stamp;
    tn__free(ord);
    for (int r = 0; r < n_roots; r++) tn__ni(c, roots[r])->n_root++;
    for (int i = 0; i < c->synced; i++) {       /* nodes the roots do not reach are dead */
        tn__ninfo *I = &c->ni[i];
        if (I->stamp == st) continue;
        I->live = false;
        tn_var *v = tn__graph_var(g, i);
        for (int k = 0; k < v->n_in; k++) tn__rw_del_use(c, v->in[k], v, k);
    }
    (void)n;
    return true;
}

static void tn__rw_free(tn__rw *c) {
    for (int i = 0; i < c->synced; i++) { tn__free(c->ni[i].use); tn__free(c->ni[i].pos); }
    tn__free(c->ni);
    tn__free(c->q);
    tn__free(c->stk);
}

/* Rewrites as data. */
enum {
    TN__RQ_FLOAT = 1 << 0,        /* output dtype is a float */
    TN__RQ_IN0_ONE_USE = 1 << 1,  /* in[0] has exactly one client (this node) */
    TN__RQ_NOT_BOOL = 1 << 2,     /* output dtype is not bool */
};
#define TN__ANY_OP (-1)
#define TN__ANY_IN (-1)

typedef struct tn__rewrite {
    const char *name;
    int ops[6];              /* ops it triggers on; 0 ends the list; TN__ANY_OP: every op */
    int cin;                 /* constraint: input cin-1 is a constant equal to cval
                                (0: none; TN__ANY_IN: some input; its index in c->mk) */
    double cval;
    unsigned req;            /* TN__RQ_* */
    tn_var *(*build)(tn__rw *c, tn_var *v);
} tn__rewrite;

/* The value of a constant whose elements are all equal (small ones only). */
static bool tn__rw_const_value(const tn_var *v, double *out) {
    if (!v || v->op != TN_OP_CONSTANT || !v->value || v->value->device != TN_HOST) return false;
    int64_t n = tn_array_size(v->value);
    if (n < 1 || n > 1024) return false;
    double stackbuf[16], *buf = stackbuf;
    if (n > 16 && !(buf = (double *)tn__malloc((size_t)n * sizeof *buf))) return false;
    bool ok = tn_array_copy_to(v->value, TN_F64, buf, (size_t)n * sizeof *buf) == TN_OK && buf[0] == buf[0];
    for (int64_t i = 1; ok && i < n; i++) ok = buf[i] == buf[0];
    if (ok) *out = buf[0];
    if (buf != stackbuf) tn__free(buf);
    return ok;
}

static bool tn__rw_is_const(const tn_var *v, double val) {
    double x;
    return tn__rw_const_value(v, &x) && x == val;
}

static bool tn__rw_match(tn__rw *c, const tn__rewrite *r, tn_var *v) {
    if ((r->req & TN__RQ_FLOAT) && !tn_dtype_is_float(v->type.dtype)) return false;
    if ((r->req & TN__RQ_NOT_BOOL) && v->type.dtype == TN_BOOL) return false;
    if ((r->req & TN__RQ_IN0_ONE_USE) && (v->n_in < 1 || tn__rw_nuses(c, v->in[0]) != 1 || tn__ni(c, v->in[0])->n_root)) return false;
    c->mk = -1;
    if (r->cin == TN__ANY_IN) {
        for (int k = 0; k < v->n_in && c->mk < 0; k++) if (tn__rw_is_const(v->in[k], r->cval)) c->mk = k;
        if (c->mk < 0) return false;
    } else if (r->cin > 0) {
        if (r->cin > v->n_in || !tn__rw_is_const(v->in[r->cin - 1], r->cval)) return false;
        c->mk = r->cin - 1;
    }
    return true;
}

static bool tn__type_eq(const tn_type *a, const tn_type *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++) {
        if (a->bcast[d] != b->bcast[d]) return false;
        if (a->shape[d] >= 0 && b->shape[d] >= 0 && a->shape[d] != b->shape[d]) return false;
    }
    return true;
}

/* y as a replacement for v: the same type exactly, a cast added where only
   the dtype differs; NULL where the rank or broadcast pattern differs. */
static tn_var *tn__rw_as_type(tn_var *y, const tn_var *v) {
    if (!y) return NULL;
    if (y->type.dtype != v->type.dtype) {
        tn_type t = y->type;
        t.dtype = v->type.dtype;
        if (!tn__type_eq(&t, &v->type)) return NULL;
        y = tn_cast(y, v->type.dtype);
        if (!y) return NULL;
    }
    return tn__type_eq(&y->type, &v->type) ? y : NULL;
}

static void tn__rw_trace(const char *name, const tn_var *v, const tn_var *y) {
    char a[256], b[256];
    tn__node_label(v, a, sizeof a);
    if (y->name) snprintf(b, sizeof b, "%s", y->name);
    else tn__node_label(y, b, sizeof b);
    fprintf(stderr, "rewrite %s: %s [id %d] -> %s [id %d]\n", name, a, v->id, b, y->id);
}

/* Records a firing and makes the replacement. */
static void tn__rw_fire(tn__rw *c, const char *name, tn_var *v, tn_var *y) {
    tn__rw_count(name);
    if (tn_get_config()->trace_rewrites) tn__rw_trace(name, v, y);
    tn__rw_replace(c, v, y);
}

/* Drops nodes made since n0 that nothing reads (a builder that gave up). */
static void tn__rw_drop_new(tn__rw *c, int n0) {
    for (int i = c->synced - 1; i >= n0; i--) tn__rw_kill(c, tn__graph_var(c->g, i));
}

/* Applies the group of rewrites to a fixpoint. */
static tn_result tn__rw_run(tn__rw *c, const tn__rewrite *rw, int n_rw) {
    enum { MAXPER = 24 };
    static _Thread_local unsigned char idx[TN_OP_COUNT + 1][MAXPER], cnt[TN_OP_COUNT + 1];
    memset(cnt, 0, sizeof cnt);
    for (int r = 0; r < n_rw; r++)
        for (int j = 0; j < 6 && rw[r].ops[j]; j++) {
            int op = rw[r].ops[j];
            if (op == TN__ANY_OP) { for (int o = 0; o <= TN_OP_COUNT; o++) if (cnt[o] < MAXPER) idx[o][cnt[o]++] = (unsigned char)r; }
            else if (op > 0 && op < TN_OP_COUNT && cnt[op] < MAXPER) idx[op][cnt[op]++] = (unsigned char)r;
        }
    tn_var **ord;
    int n = tn__rw_topo(c, &ord);
    if (c->oom) return tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer");
    for (int i = 0; i < n; i++) tn__rw_enqueue(c, ord[i]);
    tn__free(ord);
    long budget = 16L * n + 1000;     /* a guard against rewrites that undo each other */
    tn_var *v;
    while ((v = tn__rw_dequeue(c)) && !c->oom) {
        if (!tn__rw_live(c, v) || v->op <= 0 || v->op >= TN_OP_COUNT) continue;
        for (int j = 0; j < cnt[v->op]; j++) {
            const tn__rewrite *r = &rw[idx[v->op][j]];
            if (!tn__rw_match(c, r, v)) continue;
            int n0 = tn__graph_nvars(c->g);
            tn_result saved = tn_last_result();
            tn_var *y = r->build(c, v);
            if (y && y != v) y = tn__rw_as_type(y, v);
            tn__rw_sync(c);
            if (c->oom) break;
            if (!y || y == v) {
                tn__rw_drop_new(c, n0);
                if (tn_last_result() != saved) tn_clear_error();   /* a rule that did not apply */
                continue;
            }
            tn__rw_fire(c, r->name, v, y);
            tn__rw_enqueue(c, y);
            for (int i = n0; i < c->synced; i++) tn__rw_enqueue(c, tn__graph_var(c->g, i));
            tn__rw_drop_new(c, n0);
            break;
        }
        if (--budget < 0) break;
    }
    c->q_len = 0;
    for (int i = 0; i < c->synced; i++) c->ni[i].queued = false;
    if (c->oom) return tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer");
    return TN_OK;
}

/* >>rewrite_helpers ------------------------------------------------------ */

static bool tn__rw_is_ew(int op) { return op > TN_OP_NONE && op <= TN_OP_CAST; }
static bool tn__rw_is_scalar_const(const tn_var *v) { double x; return v->type.ndim == 0 && tn__rw_const_value(v, &x); }
static tn_var *tn__rw_cast(tn_var *x, tn_dtype t) { return x && x->type.dtype != t ? tn_cast(x, t) : x; }

/* A 0-d constant of dtype t. */
static tn_var *tn__rw_scalar(tn_graph *g, tn_dtype t, double v) {
    tn_array *a = tn_array_scalar(t, v);
    if (!a) return NULL;
    tn_var *r = tn_constant(g, a);
    tn_array_free(a);
    return r;
}

/* A constant like c (dtype, weakness) holding v. */
static tn_var *tn__rw_const_like(tn_graph *g, const tn_var *c, double v) {
    tn_var *r = tn__rw_scalar(g, c->type.dtype, v);
    if (r) r->flags |= c->flags & TN_VAR_WEAK;
    return r;
}

/* Binary elementwise node of op on (a, b), typed as `like` (the node it replaces). */
static tn_var *tn__rw_bin(int op, tn_var *a, tn_var *b) {
    tn_var *in[2] = { a, b };
    tn_params p;
    memset(&p, 0, sizeof p);
    if (!a || !b) return NULL;
    if (a->type.dtype != b->type.dtype) return NULL;
    return tn__node(a->graph, op, 2, in, &p, NULL, "optimizer");
}
static tn_var *tn__rw_un(int op, tn_var *a) {
    tn_params p;
    memset(&p, 0, sizeof p);
    return a ? tn__node(a->graph, op, 1, &a, &p, NULL, "optimizer") : NULL;
}

/* >>canonicalize --------------------------------------------------------- */

static tn_var *tn__b_other(tn__rw *c, tn_var *v) { return v->in[1 - c->mk]; }           /* x*1, x+0 */
static tn_var *tn__b_in0(tn__rw *c, tn_var *v) { (void)c; return v->in[0]; }            /* x-0, x/1, x**1 */
static tn_var *tn__b_sqr(tn__rw *c, tn_var *v) { (void)c; return tn_sqr(tn__rw_cast(v->in[0], v->type.dtype)); }
static tn_var *tn__b_sqrt(tn__rw *c, tn_var *v) { (void)c; return tn_sqrt(tn__rw_cast(v->in[0], v->type.dtype)); }
static tn_var *tn__b_neg_other(tn__rw *c, tn_var *v) {                                    /* x*-1 */
    tn_var *x = tn__rw_cast(v->in[1 - c->mk], v->type.dtype);
    return x && x->type.dtype != TN_BOOL ? tn_neg(x) : NULL;
}

/* x - x: zeros of x's type (exact for finite x, as in Theano). */
static tn_var *tn__b_sub_self(tn__rw *c, tn_var *v) {
    if (v->in[0] != v->in[1]) return NULL;
    tn_var *z = tn__rw_scalar(c->g, v->type.dtype, 0.0);
    return z ? tn_fill(v->in[0], z) : NULL;
}

/* x / x -> 1 only where x is a known non-zero finite constant (else 0/0, inf/inf). */
static tn_var *tn__b_div_self(tn__rw *c, tn_var *v) {
    double x;
    if (v->in[0] != v->in[1] || !tn__rw_const_value(v->in[0], &x) || x == 0 || !isfinite(x)) return NULL;
    tn_var *one = tn__rw_scalar(c->g, v->type.dtype, 1.0);
    return one ? tn_fill(v->in[0], one) : NULL;
}

static tn_var *tn__b_neg_neg(tn__rw *c, tn_var *v) { (void)c; return v->in[0]->op == TN_OP_NEG ? v->in[0]->in[0] : NULL; }

/* c + x -> x + c, c * x -> x * c: constants go right (the other rules look there). */
static tn_var *tn__b_commute(tn__rw *c, tn_var *v) {
    (void)c;
    if (!tn__rw_is_scalar_const(v->in[0]) || v->in[1]->op == TN_OP_CONSTANT) return NULL;
    return tn__rw_bin(v->op, v->in[1], v->in[0]);
}

static double tn__rw_apply(int op, double a, double b) { return op == TN_OP_ADD ? a + b : a * b; }

/* (x op c1) op c2 -> x op (c1 op c2) for add and mul. */
static tn_var *tn__b_chain_const(tn__rw *c, tn_var *v) {
    tn_var *u = v->in[0], *c2 = v->in[1];
    double a, b;
    if (u->op != v->op || !tn__rw_is_scalar_const(c2) || !tn__rw_is_scalar_const(u->in[1])) return NULL;
    if (u->in[0]->op == TN_OP_CONSTANT || u->type.dtype != v->type.dtype || u->in[1]->type.dtype != c2->type.dtype) return NULL;
    tn__rw_const_value(u->in[1], &a);
    tn__rw_const_value(c2, &b);
    tn_var *k = tn__rw_const_like(c->g, c2, tn__rw_apply(v->op, a, b));
    if (k && !(u->in[1]->flags & TN_VAR_WEAK)) k->flags &= ~(unsigned)TN_VAR_WEAK;
    return tn__rw_bin(v->op, u->in[0], k);
}

/* (x op c) op y -> (x op y) op c: constants rise to the top of a chain, where
   tn__b_chain_const combines them. One dtype throughout (no new rounding). */
static tn_var *tn__b_chain_hoist(tn__rw *c, tn_var *v) {
    for (int s = 0; s < 2; s++) {
        tn_var *u = v->in[s], *y = v->in[1 - s];
        if (u->op != v->op || tn__rw_nuses(c, u) != 1 || tn__ni(c, u)->n_root) continue;
        if (!tn__rw_is_scalar_const(u->in[1]) || u->in[0]->op == TN_OP_CONSTANT || y->op == TN_OP_CONSTANT) continue;
        tn_dtype t = v->type.dtype;
        if (u->type.dtype != t || u->in[0]->type.dtype != t || y->type.dtype != t || u->in[1]->type.dtype != t) continue;
        return tn__rw_bin(v->op, tn__rw_bin(v->op, u->in[0], y), u->in[1]);
    }
    return NULL;
}

/* x - c -> x + (-c) (exact), so add chains collect every constant. */
static tn_var *tn__b_sub_const(tn__rw *c, tn_var *v) {
    double k;
    tn_var *b = v->in[1];
    if (b->type.ndim != 0 || !tn__rw_const_value(b, &k) || v->in[0]->op == TN_OP_CONSTANT) return NULL;
    return tn__rw_bin(TN_OP_ADD, v->in[0], tn__rw_const_like(c->g, b, -k));
}

/* Negations move up and cancel: (-a)*(-b) -> a*b, a*(-b) -> -(a*b),
   a - (-b) -> a + b, a + (-b) -> a - b, (-a) + b -> b - a. All exact. */
static tn_var *tn__b_mul_neg(tn__rw *c, tn_var *v) {
    (void)c;
    tn_var *a = v->in[0], *b = v->in[1];
    bool na = a->op == TN_OP_NEG, nb = b->op == TN_OP_NEG;
    if (na && nb) return tn__rw_bin(TN_OP_MUL, a->in[0], b->in[0]);
    if (na) return tn__rw_un(TN_OP_NEG, tn__rw_bin(TN_OP_MUL, a->in[0], b));
    if (nb) return tn__rw_un(TN_OP_NEG, tn__rw_bin(TN_OP_MUL, a, b->in[0]));
    return NULL;
}
static tn_var *tn__b_sub_neg(tn__rw *c, tn_var *v) {
    (void)c;
    return v->in[1]->op == TN_OP_NEG ? tn__rw_bin(TN_OP_ADD, v->in[0], v->in[1]->in[0]) : NULL;
}
static tn_var *tn__b_add_neg(tn__rw *c, tn_var *v) {
    (void)c;
    if (v->in[1]->op == TN_OP_NEG) return tn__rw_bin(TN_OP_SUB, v->in[0], v->in[1]->in[0]);
    if (v->in[0]->op == TN_OP_NEG) return tn__rw_bin(TN_OP_SUB, v->in[1], v->in[0]->in[0]);
    return NULL;
}

/* dimshuffle(dimshuffle(x, p1), p2) -> dimshuffle(x, p1 o p2); identity -> x. */
static tn_var *tn__b_dimshuffle(tn__rw *c, tn_var *v) {
    (void)c;
    tn_var *x = v->in[0];
    int pat[TN_MAX_DIMS], n = v->type.ndim;
    bool inner = x->op == TN_OP_DIMSHUFFLE;
    tn_var *src = inner ? x->in[0] : x;
    for (int k = 0; k < n; k++) {
        int64_t a = v->p.i[k];
        pat[k] = a < 0 ? -1 : inner ? (int)x->p.i[a] : (int)a;
    }
    bool ident = n == src->type.ndim;
    for (int k = 0; ident && k < n; k++) ident = pat[k] == k;
    if (ident) return src;
    return inner ? tn_dimshuffle(src, n, pat) : NULL;
}

/* reshape(reshape(x, s1), s2) -> reshape(x, s2); reshape to x's own known shape -> x. */
static tn_var *tn__b_reshape(tn__rw *c, tn_var *v) {
    (void)c;
    tn_var *x = v->in[0];
    int n = v->type.ndim;
    tn_var *src = x->op == TN_OP_RESHAPE ? x->in[0] : x;
    bool ident = n == src->type.ndim;
    for (int d = 0; ident && d < n; d++) ident = v->p.i[d] >= 0 && src->type.shape[d] == v->p.i[d];
    if (ident) return src;
    if (x->op != TN_OP_RESHAPE) return NULL;
    int64_t shape[TN_MAX_DIMS];
    for (int d = 0; d < n; d++) shape[d] = v->p.i[d];
    return tn_reshape(src, n, shape);
}

/* sum(alloc(s, shape)) over some axes -> s * (count), broadcast to the rest. */
static tn_var *tn__b_sum_alloc(tn__rw *c, tn_var *v) {
    tn_var *a = v->in[0];
    if (v->ext || (a->op != TN_OP_ALLOC && a->op != TN_OP_BROADCAST_TO) || a->in[0]->type.ndim != 0) return NULL;
    if (!tn_dtype_is_float(v->type.dtype)) return NULL;
    uint64_t mask = (uint64_t)v->p.i[0];
    double count = 1;
    for (int d = 0; d < a->type.ndim; d++) {
        if (!((mask >> d) & 1)) continue;
        if (a->type.shape[d] < 0) return NULL;
        count *= (double)a->type.shape[d];
    }
    tn_var *s = tn__rw_cast(a->in[0], v->type.dtype);
    tn_var *r = tn__rw_bin(TN_OP_MUL, s, tn__rw_scalar(c->g, v->type.dtype, count));
    if (!r || v->type.ndim == 0) return r;
    for (int d = 0; d < v->type.ndim; d++) if (v->type.shape[d] < 0) return NULL;
    return tn_alloc(r, v->type.ndim, v->type.shape);
}

static const tn__rewrite tn__canon_rules[] = {
    { "local_commute_const", { TN_OP_ADD, TN_OP_MUL }, 0, 0, 0, tn__b_commute },
    { "local_mul_by_one", { TN_OP_MUL }, TN__ANY_IN, 1.0, 0, tn__b_other },
    { "local_mul_by_minus_one", { TN_OP_MUL }, TN__ANY_IN, -1.0, TN__RQ_NOT_BOOL, tn__b_neg_other },
    { "local_add_zero", { TN_OP_ADD }, TN__ANY_IN, 0.0, 0, tn__b_other },
    { "local_sub_zero", { TN_OP_SUB }, 2, 0.0, 0, tn__b_in0 },
    { "local_div_one", { TN_OP_TRUE_DIV }, 2, 1.0, 0, tn__b_in0 },
    { "local_pow_one", { TN_OP_POW }, 2, 1.0, 0, tn__b_in0 },
    { "local_pow_two", { TN_OP_POW }, 2, 2.0, 0, tn__b_sqr },
    { "local_pow_half", { TN_OP_POW }, 2, 0.5, TN__RQ_FLOAT, tn__b_sqrt },
    { "local_sub_self", { TN_OP_SUB }, 0, 0, 0, tn__b_sub_self },
    { "local_div_self", { TN_OP_TRUE_DIV }, 0, 0, 0, tn__b_div_self },
    { "local_neg_neg", { TN_OP_NEG }, 0, 0, 0, tn__b_neg_neg },
    { "local_mul_neg", { TN_OP_MUL }, 0, 0, 0, tn__b_mul_neg },
    { "local_sub_neg", { TN_OP_SUB }, 0, 0, 0, tn__b_sub_neg },
    { "local_add_neg", { TN_OP_ADD }, 0, 0, 0, tn__b_add_neg },
    { "local_sub_const", { TN_OP_SUB }, 0, 0, TN__RQ_NOT_BOOL, tn__b_sub_const },
    { "local_chain_const", { TN_OP_ADD, TN_OP_MUL }, 0, 0, TN__RQ_NOT_BOOL | TN__RQ_IN0_ONE_USE, tn__b_chain_const },
    { "local_chain_hoist", { TN_OP_ADD, TN_OP_MUL }, 0, 0, TN__RQ_NOT_BOOL, tn__b_chain_hoist },
    { "local_dimshuffle", { TN_OP_DIMSHUFFLE }, 0, 0, 0, tn__b_dimshuffle },
    { "local_reshape", { TN_OP_RESHAPE }, 0, 0, 0, tn__b_reshape },
    { "local_sum_alloc", { TN_OP_SUM }, 0, 0, 0, tn__b_sum_alloc },
};

/* >>stabilize ------------------------------------------------------------ */

/* The other input of a binary node when one input is a constant equal to val. */
static tn_var *tn__rw_other_if_const(const tn_var *b, double val) {
    if (b->n_in != 2) return NULL;
    if (tn__rw_is_const(b->in[1], val)) return b->in[0];
    if (tn__rw_is_const(b->in[0], val)) return b->in[1];
    return NULL;
}

static tn_var *tn__b_log1p(tn__rw *c, tn_var *v) {              /* log(1 + x) */
    (void)c;
    tn_var *a = v->in[0], *x;
    if (a->op != TN_OP_ADD || !(x = tn__rw_other_if_const(a, 1.0)) || x->op == TN_OP_CONSTANT) return NULL;
    return tn_log1p(tn__rw_cast(x, a->type.dtype));
}
static tn_var *tn__b_log1p_exp(tn__rw *c, tn_var *v) {          /* log1p(exp(x)) */
    (void)c;
    return v->in[0]->op == TN_OP_EXP ? tn_softplus(v->in[0]->in[0]) : NULL;
}
static tn_var *tn__b_expm1(tn__rw *c, tn_var *v) {              /* exp(x) - 1, exp(x) + -1 */
    (void)c;
    tn_var *e = NULL;
    if (v->op == TN_OP_SUB && tn__rw_is_const(v->in[1], 1.0)) e = v->in[0];
    if (v->op == TN_OP_ADD) {
        if (tn__rw_is_const(v->in[1], -1.0)) e = v->in[0];
        else if (tn__rw_is_const(v->in[0], -1.0)) e = v->in[1];
    }
    return e && e->op == TN_OP_EXP ? tn_expm1(e->in[0]) : NULL;
}
static tn_var *tn__b_log_sigmoid(tn__rw *c, tn_var *v) {        /* log(sigmoid(x)) = -softplus(-x) */
    (void)c;
    tn_var *s = v->in[0];
    if (s->op != TN_OP_SIGMOID) return NULL;
    return tn_neg(tn_softplus(tn_neg(tn__rw_cast(s->in[0], s->type.dtype))));
}
static tn_var *tn__b_log_1m_sigmoid(tn__rw *c, tn_var *v) {     /* log(1 - sigmoid(x)) = -softplus(x) */
    (void)c;
    tn_var *a = v->in[0], *s = NULL;
    if (v->op == TN_OP_LOG && a->op == TN_OP_SUB && tn__rw_is_const(a->in[0], 1.0)) s = a->in[1];
    if (v->op == TN_OP_LOG1P && a->op == TN_OP_NEG) s = a->in[0];
    if (!s || s->op != TN_OP_SIGMOID || s->type.ndim > a->type.ndim) return NULL;
    return tn_neg(tn_softplus(tn__rw_cast(s->in[0], s->type.dtype)));
}
static tn_var *tn__b_log_softmax(tn__rw *c, tn_var *v) {
    tn_var *s = v->in[0];
    if (s->op != TN_OP_SOFTMAX || s->ext) return NULL;
    return tn__node(c->g, TN_OP_LOG_SOFTMAX, 1, &s->in[0], &s->p, NULL, "optimizer");
}
static tn_var *tn__b_logsumexp(tn__rw *c, tn_var *v) {
    tn_var *s = v->in[0];
    if (s->op != TN_OP_SUM || s->ext || s->in[0]->op != TN_OP_EXP) return NULL;
    return tn__node(c->g, TN_OP_LOGSUMEXP, 1, &s->in[0]->in[0], &s->p, NULL, "optimizer");
}

static const tn__rewrite tn__stab_rules[] = {
    { "local_log1p", { TN_OP_LOG }, 0, 0, 0, tn__b_log1p },
    { "local_log1p_exp", { TN_OP_LOG1P }, 0, 0, 0, tn__b_log1p_exp },
    { "local_expm1", { TN_OP_SUB, TN_OP_ADD }, 0, 0, 0, tn__b_expm1 },
    { "local_log_sigmoid", { TN_OP_LOG }, 0, 0, 0, tn__b_log_sigmoid },
    { "local_log_1m_sigmoid", { TN_OP_LOG, TN_OP_LOG1P }, 0, 0, 0, tn__b_log_1m_sigmoid },
    { "local_log_softmax", { TN_OP_LOG }, 0, 0, 0, tn__b_log_softmax },
    { "local_logsumexp", { TN_OP_LOG }, 0, 0, 0, tn__b_logsumexp },
    /* the neg rules again: they turn the softplus forms of the logistic
       cross-entropy into y*softplus(-z) + (1-y)*softplus(z) */
    { "local_neg_neg", { TN_OP_NEG }, 0, 0, 0, tn__b_neg_neg },
    { "local_mul_neg", { TN_OP_MUL }, 0, 0, 0, tn__b_mul_neg },
    { "local_sub_neg", { TN_OP_SUB }, 0, 0, 0, tn__b_sub_neg },
    { "local_add_neg", { TN_OP_ADD }, 0, 0, 0, tn__b_add_neg },
};

/* >>specialize ----------------------------------------------------------- */

/* A product term: dot, s*dot, dot*s, -dot (dot read only here). */
static bool tn__rw_dot_term(tn__rw *c, tn_var *t, tn_var **dot, double *alpha) {
    double s = 1;
    if (t->op == TN_OP_NEG) { s = -1; t = t->in[0]; }
    else if (t->op == TN_OP_MUL) {
        double k;
        int j = t->in[0]->op == TN_OP_DOT ? 0 : 1;
        if (t->in[1 - j]->type.ndim != 0 || !tn__rw_const_value(t->in[1 - j], &k)) return false;
        if (tn__rw_nuses(c, t) != 1) return false;
        s = k; t = t->in[j];
    }
    if (t->op != TN_OP_DOT || tn__rw_nuses(c, t) != 1 || tn__ni(c, t)->n_root) return false;
    if (t->in[0]->type.ndim != 2 || (t->in[1]->type.ndim != 2 && t->in[1]->type.ndim != 1)) return false;
    *dot = t; *alpha = s;
    return true;
}

/* The addend: C or s*C. */
static void tn__rw_addend(tn_var *t, tn_var **cc, double *beta) {
    double k;
    *cc = t; *beta = 1;
    if (t->op == TN_OP_MUL)
        for (int j = 0; j < 2; j++)
            if (t->in[j]->type.ndim == 0 && t->in[j]->op == TN_OP_CONSTANT && tn__rw_const_value(t->in[j], &k) &&
                t->in[1 - j]->op != TN_OP_DOT) { *cc = t->in[1 - j]; *beta = k; return; }
}

/* alpha*dot(A, B) + beta*C (either order; sub negates) -> gemm, or gemv. */
static tn_var *tn__b_gemm(tn__rw *c, tn_var *v) {
    if (!tn_dtype_is_float(v->type.dtype)) return NULL;
    for (int s = 0; s < 2; s++) {
        tn_var *dot, *C;
        double alpha, beta;
        if (!tn__rw_dot_term(c, v->in[s], &dot, &alpha)) continue;
        tn__rw_addend(v->in[1 - s], &C, &beta);
        if (v->op == TN_OP_SUB) { if (s == 0) beta = -beta; else alpha = -alpha; }
        if (C->type.dtype != v->type.dtype || dot->type.dtype != v->type.dtype || C->type.ndim > dot->type.ndim) continue;
        tn_var *A = dot->in[0], *B = dot->in[1];
        return B->type.ndim == 2 ? tn_gemm(C, alpha, A, B, beta) : tn_gemv(C, alpha, A, B, beta);
    }
    return NULL;
}

/* dot(matrix, vector) -> gemv with beta 0 over zeros (rows known). */
static tn_var *tn__b_dot_gemv(tn__rw *c, tn_var *v) {
    tn_var *A = v->in[0], *x = v->in[1];
    if (A->type.ndim != 2 || x->type.ndim != 1 || !tn_dtype_is_float(v->type.dtype) || A->type.shape[0] < 0) return NULL;
    tn_var *z = tn__rw_scalar(c->g, v->type.dtype, 0.0);
    tn_var *y = z ? tn_alloc(z, 1, &A->type.shape[0]) : NULL;
    return y ? tn_gemv(y, 1.0, A, x, 0.0) : NULL;
}

static const tn__rewrite tn__spec_rules[] = {
    { "local_gemm", { TN_OP_ADD, TN_OP_SUB }, 0, 0, 0, tn__b_gemm },
};
static const tn__rewrite tn__spec2_rules[] = {
    { "local_dot_to_gemv", { TN_OP_DOT }, 0, 0, 0, tn__b_dot_gemv },
};

/* >>constant_folding ----------------------------------------------------- */

#define TN__FOLD_MAX_ELEMS ((int64_t)1 << 20)

static int64_t tn__type_size(const tn_type *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* A node whose inputs are all constants runs now, on the CPU kernels. Not:
   multi-output nodes, views (they would alias), user ops, and results that
   are huge or bigger than every input (alloc of a scalar stays small). */
static tn_var *tn__b_fold(tn__rw *c, tn_var *v) {
    const tn_op_def *def = tn__op_def(v->op);
    tn_op_kind k = def ? def->kind : (tn_op_kind)0;
    if (!def || !def->cpu || v->n_in < 1 || v->n_out != 1 || v->op == TN_OP_PROJ || v->op == TN_OP_CUSTOM) return NULL;
    if (k == TN_OPK_LEAF || k == TN_OPK_VIEW || k == TN_OPK_TRANSFER || k == TN_OPK_OTHER) return NULL;
    enum { MAXIN = 16 };
    if (v->n_in > MAXIN) return NULL;
    tn_type ti[MAXIN], to;
    tn_array *ai[MAXIN];
    int64_t biggest = 0;
    for (int i = 0; i < v->n_in; i++) {
        tn_var *x = v->in[i];
        if (x->op != TN_OP_CONSTANT || !x->value || x->value->device != TN_HOST) return NULL;
        ai[i] = x->value;
        ti[i] = x->type;
        for (int d = 0; d < ti[i].ndim; d++) ti[i].shape[d] = x->value->shape[d];
        int64_t n = tn_array_size(x->value);
        if (n > biggest) biggest = n;
    }
    if (def->infer(v, ti, &to) != TN_OK) return NULL;
    int64_t n = tn__type_size(&to);
    if (n > TN__FOLD_MAX_ELEMS || n > (biggest > 1 ? biggest : 1)) return NULL;
    tn_array *out = tn__array_alloc(to.dtype, to.ndim, to.shape, TN_HOST);
    if (!out) return NULL;
    tn_var *r = NULL;
    if (def->cpu(v, ai, &out) == TN_OK && (r = tn_constant(c->g, out))) {
        for (int d = 0; d < r->type.ndim; d++) r->type.bcast[d] = v->type.bcast[d];
        r->flags |= v->flags & TN_VAR_WEAK;
    }
    tn_array_free(out);
    return r;
}

static const tn__rewrite tn__fold_rules[] = {
    { "constant_folding", { TN__ANY_OP }, 0, 0, 0, tn__b_fold },
};

/* >>merge: hash-consing, one pass in topological order ------------------- */

static uint64_t tn__hmix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static bool tn__rw_mergeable(const tn_var *v) {
    if (v->op == TN_OP_INPUT || v->op == TN_OP_SHARED || v->op == TN_OP_CUSTOM) return false;
    if (v->op == TN_OP_CONSTANT)
        return v->value && v->value->device == TN_HOST && tn_array_is_contiguous(v->value) && tn_array_size(v->value) <= (1 << 16);
    return true;
}

/* ext of an elementwise node is a cached program (derived), not a parameter. */
static const void *tn__rw_ext_key(const tn_var *v) { return tn__rw_is_ew(v->op) ? NULL : v->ext; }

static uint64_t tn__rw_hash(const tn_var *v) {
    uint64_t h = tn__hmix((uint64_t)v->op, (uint64_t)v->n_in);
    for (int k = 0; k < v->n_in; k++) h = tn__hmix(h, (uint64_t)v->in[k]->id);
    const uint64_t *w = (const uint64_t *)(const void *)&v->p;
    for (size_t i = 0; i < sizeof v->p / 8; i++) h = tn__hmix(h, w[i]);
    h = tn__hmix(h, (uint64_t)(uintptr_t)tn__rw_ext_key(v));
    if (v->op == TN_OP_CONSTANT) {
        const unsigned char *b = (const unsigned char *)v->value->data;
        size_t nb = tn_array_nbytes(v->value);
        h = tn__hmix(h, (uint64_t)v->type.dtype * 131 + (uint64_t)v->type.ndim);
        for (size_t i = 0; i < nb; i++) h = tn__hmix(h, b[i]);
    }
    return h;
}

static bool tn__rw_same(const tn_var *a, const tn_var *b) {
    if (a->op != b->op || a->n_in != b->n_in || a->n_out != b->n_out || tn__rw_ext_key(a) != tn__rw_ext_key(b)) return false;
    if ((a->flags & TN_VAR_WEAK) != (b->flags & TN_VAR_WEAK)) return false;
    for (int k = 0; k < a->n_in; k++) if (a->in[k] != b->in[k]) return false;
    if (memcmp(&a->p, &b->p, sizeof a->p)) return false;
    if (a->type.dtype != b->type.dtype || a->type.ndim != b->type.ndim) return false;
    for (int d = 0; d < a->type.ndim; d++)
        if (a->type.shape[d] != b->type.shape[d] || a->type.bcast[d] != b->type.bcast[d]) return false;
    if (a->op == TN_OP_CONSTANT)
        return tn_array_nbytes(a->value) == tn_array_nbytes(b->value) &&
               !memcmp(a->value->data, b->value->data, tn_array_nbytes(a->value));
    return true;
}

static tn_result tn__rw_merge(tn__rw *c) {
    tn_var **ord;
    int n = tn__rw_topo(c, &ord);
    if (c->oom) return tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer");
    size_t cap = 16;
    while (cap < 2 * (size_t)n + 2) cap *= 2;
    tn_var **tab = (tn_var **)tn__calloc(cap, sizeof *tab);
    if (!tab) { tn__free(ord); return tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer"); }
    for (int i = 0; i < n; i++) {
        tn_var *v = ord[i];
        if (!tn__rw_live(c, v) || !tn__rw_mergeable(v)) continue;
        size_t h = (size_t)tn__rw_hash(v) & (cap - 1);
        for (;; h = (h + 1) & (cap - 1)) {
            tn_var *u = tab[h];
            if (!u) { tab[h] = v; break; }
            if (u != v && tn__rw_live(c, u) && tn__rw_same(u, v)) { tn__rw_fire(c, "merge", v, u); break; }
        }
    }
    tn__free(tab);
    tn__free(ord);
    return c->oom ? tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer") : TN_OK;
}

/* >>fuse ----------------------------------------------------------------- */
/* Groups: a union-find over elementwise nodes of one output type, built in
   topological order. A node joins the groups of its elementwise inputs when
   that cannot make a cycle (a path leaving a group and coming back). The
   test is conservative and O(1): groups get increasing ids in topological
   order; reach(v) bounds from above the largest id of a group v depends on;
   a group's gin bounds reach() over its external inputs. A node may join
   groups S (smallest id m) when every external input has reach < m and
   every group of S has gin < m: then no group of S depends on another, nor
   an input of the node on S, through outside nodes. */

typedef struct tn__fgrp { int parent, id, gin, nin, nmem, head, tail, xuse; uint64_t gmask, ginmask; tn_type key; } tn__fgrp;
/* gmask: bits (id & 63) of the ids merged into it; ginmask: OR of its external inputs' rmask */
/* xuse: reads of the group's members from outside it (roots count) */

/* A type that broadcasts into `to` (fewer or equal dims, each 1 or the same). */
static bool tn__type_bcasts_into(const tn_type *a, const tn_type *to) {
    if (a->ndim > to->ndim) return false;
    for (int d = 0; d < a->ndim; d++) {
        int e = d + to->ndim - a->ndim;
        if (a->bcast[d]) continue;
        if (to->bcast[e] || a->shape[d] != to->shape[e]) return false;
    }
    return true;
}

static int tn__fg_find(tn__fgrp *G, int g) {
    while (G[g].parent != g) { G[g].parent = G[G[g].parent].parent; g = G[g].parent; }
    return g;
}

static bool tn__type_same(const tn_type *a, const tn_type *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++) if (a->bcast[d] != b->bcast[d] || a->shape[d] != b->shape[d]) return false;
    return true;
}

static bool tn__rw_fusable(const tn_var *v) { return tn__rw_is_ew(v->op) && v->n_out == 1; }
static bool tn__rw_immediate(const tn_var *x) { double d; return x->type.ndim == 0 && tn__rw_const_value(x, &d); }
static bool tn__rw_fuse_reduction_op(int op) {
    return op == TN_OP_SUM || op == TN_OP_PROD || op == TN_OP_MEAN || op == TN_OP_MAX || op == TN_OP_MIN || op == TN_OP_LOGSUMEXP;
}
#define TN__REDUCE_MAX_INPUTS 16   /* the CPU reduction kernel's prologue limit (ops_reduce) */

typedef struct tn__fctx {
    tn__rw *c;
    tn__fgrp *G;
    int ng;
    tn_var **ord;
    int n;
    int *next;        /* members of a group, by topological position */
    int *reg, *regst; /* per node id: register in the program being built, valid when regst == stamp */
    int stamp, cap;
} tn__fctx;

static int tn__fg_of(tn__fctx *F, const tn_var *x) {
    int g = F->c->ni[x->id].grp;
    return g < 0 ? -1 : tn__fg_find(F->G, g);
}

/* x (reach r) does not depend on group g. Invariant: every edge between
   groups goes from a smaller id to a larger one, so the groups x depends on
   (directly or through other groups) have ids <= reach(x). (A per-node mask
   of group bits is kept for diagnostics only: it is not transitive over
   groups that merge later, so it proves nothing.) */
static bool tn__fg_indep(const tn__fgrp *g, int r, uint64_t mk) { (void)mk; return r < g->id; }

/* Assigns groups to every fusable node. */
static void tn__fuse_group(tn__fctx *F) {
    tn__rw *c = F->c;
    int next_id = 0;
    for (int i = 0; i < F->n; i++) {
        tn_var *v = F->ord[i];
        tn__ninfo *V = tn__ni(c, v);
        int reach = -1;
        uint64_t rmask = 0;
        for (int k = 0; k < v->n_in; k++) {
            tn__ninfo *X = tn__ni(c, v->in[k]);
            if (X->reach > reach) reach = X->reach;
            rmask |= X->rmask;
        }
        V->grp = -1;
        if (!tn__rw_fusable(v)) { V->reach = reach; V->rmask = rmask; continue; }
        int S[3], ns = 0;
        for (int k = 0; k < v->n_in; k++) {
            int g = tn__fg_of(F, v->in[k]);
            /* a group runs on one device: members share node->device (placement) */
            bool ok = g >= 0 && v->in[k]->device == v->device && tn__type_same(&F->G[g].key, &v->type);
            if (g >= 0 && !ok && tn__type_bcasts_into(&F->G[g].key, &v->type)) {
                int edges = 0;      /* a smaller group read only by v is computed inside v's group */
                for (int j = 0; j < v->n_in; j++) edges += tn__fg_of(F, v->in[j]) == g;
                ok = F->G[g].xuse == edges;
            }
            for (int j = 0; j < ns; j++) ok = ok && S[j] != g;
            if (ok) S[ns++] = g;
        }
        /* try all candidate groups together, then each alone */
        int join = -1, need = 0;
        for (int attempt = 0; attempt <= ns && join < 0 && ns; attempt++) {
            int T[3], nt = 0;
            if (attempt == 0) { for (int j = 0; j < ns; j++) T[nt++] = S[j]; }
            else T[nt++] = S[attempt - 1];
            if (attempt == 1 && ns == 1) break;      /* same as attempt 0 */
            bool ok = true;
            int nin = 0;
            need = 0;
            for (int j = 0; j < nt; j++) nin += F->G[T[j]].nin;
            for (int k = 0; k < v->n_in && ok; k++) {
                tn_var *x = v->in[k];
                int g = tn__fg_of(F, x);
                bool in_t = false;
                for (int j = 0; j < nt; j++) in_t |= T[j] == g;
                if (in_t || tn__rw_immediate(x)) continue;
                need++;
                for (int j = 0; j < nt && ok; j++) ok = tn__fg_indep(&F->G[T[j]], tn__ni(c, x)->reach, tn__ni(c, x)->rmask);
            }
            for (int j = 0; j < nt && ok; j++)
                for (int l = 0; l < nt && ok; l++)
                    if (j != l) ok = tn__fg_indep(&F->G[T[l]], F->G[T[j]].gin, F->G[T[j]].ginmask);
            if (!ok || nin + need > tn__fuse_max_inputs) continue;
            join = T[0];
            for (int j = 1; j < nt; j++) if (F->G[T[j]].id < F->G[join].id) join = T[j];
            tn__fgrp *J = &F->G[join];
            for (int j = 0; j < nt; j++) {
                tn__fgrp *H = &F->G[T[j]];
                if (H == J) continue;
                H->parent = join;
                J->nmem += H->nmem; J->xuse += H->xuse; J->gmask |= H->gmask;
                if (H->gin > J->gin) J->gin = H->gin;
                J->ginmask |= H->ginmask;
            }
            J->nin = nin + need;
        }
        if (join < 0) {
            join = F->ng++;
            int id = next_id++;
            F->G[join] = (tn__fgrp){ join, id, -1, 0, 0, -1, -1, 0, (uint64_t)1 << (id & 63), 0, v->type };
        }
        tn__fgrp *J = &F->G[join];
        for (int k = 0; k < v->n_in; k++) {        /* external inputs bound what the group depends on */
            tn_var *x = v->in[k];
            if (tn__fg_of(F, x) == join || tn__rw_immediate(x)) continue;
            if (tn__ni(c, x)->reach > J->gin) J->gin = tn__ni(c, x)->reach;
            J->ginmask |= tn__ni(c, x)->rmask;
            if (J->nmem == 0) J->nin++;
        }
        J->nmem++;
        J->key = v->type;
        J->xuse += V->n_use + (V->n_root ? 1 : 0);
        for (int k = 0; k < v->n_in; k++) J->xuse -= tn__fg_of(F, v->in[k]) == join;
        V->grp = join;
        V->reach = reach > J->id ? reach : J->id;
        V->rmask = rmask | J->gmask;
    }
}

/* The program of a group's members (in topological order). Outputs: the
   members read outside the group (or roots), or only `only` when given. */
static tn_ew_program *tn__fuse_program(tn__fctx *F, int g, tn_var ***ins, int *n_ins, tn_var ***outs, tn_var *only) {
    tn__rw *c = F->c;
    int stamp = ++F->stamp;
    int nin = 0, ninstr = 0, nout = 0, nmem = 0;
    /* pass 1: inputs, outputs, room */
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) {
        tn_var *m = F->ord[p];
        nmem++;
        F->reg[m->id] = -2; F->regst[m->id] = stamp;     /* member */
        for (int k = 0; k < m->n_in; k++) {
            tn_var *x = m->in[k];
            if (F->regst[x->id] == stamp) continue;
            if (tn__rw_immediate(x)) { ninstr++; continue; }
            F->regst[x->id] = stamp; F->reg[x->id] = nin++;
        }
        ninstr += 4;
    }
    tn_var **in = (tn_var **)tn__graph_alloc(c->g, (size_t)(nin + 1) * sizeof *in);
    tn_var **out = (tn_var **)tn__graph_alloc(c->g, (size_t)(nmem + 1) * sizeof *out);
    tn_ew_program *P = (tn_ew_program *)tn__graph_alloc(c->g, sizeof *P);
    tn_dtype *in_dt = (tn_dtype *)tn__graph_alloc(c->g, (size_t)(nin + 1) * sizeof *in_dt);
    tn_ew_instr *ins_ = (tn_ew_instr *)tn__graph_alloc(c->g, (size_t)(ninstr + 1) * sizeof *ins_);
    int32_t *oreg = (int32_t *)tn__graph_alloc(c->g, (size_t)(nmem + 1) * sizeof *oreg);
    tn_dtype *odt = (tn_dtype *)tn__graph_alloc(c->g, (size_t)(nmem + 1) * sizeof *odt);
    if (!in || !out || !P || !in_dt || !ins_ || !oreg || !odt) { c->oom = true; return NULL; }
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) {
        tn_var *m = F->ord[p];
        for (int k = 0; k < m->n_in; k++) {
            tn_var *x = m->in[k];
            if (F->regst[x->id] == stamp && F->reg[x->id] >= 0 && F->reg[x->id] < nin && !in[F->reg[x->id]]) {
                in[F->reg[x->id]] = x; in_dt[F->reg[x->id]] = x->type.dtype;
            }
        }
    }
    /* pass 2: instructions; each member's one-node program, registers renamed */
    int ni = 0;
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) {
        tn_var *m = F->ord[p];
        tn_ew_program *q = tn__ew_program_of(m);
        if (!q || q->n_in != m->n_in) return NULL;
        int map[8 + 8];
        for (int k = 0; k < m->n_in; k++) {
            tn_var *x = m->in[k];
            if (F->regst[x->id] == stamp) { map[k] = F->reg[x->id]; continue; }
            double d;
            tn__rw_const_value(x, &d);
            ins_[ni] = (tn_ew_instr){ .op = TN_OP_CONSTANT, .dtype = (int8_t)x->type.dtype, .in_dtype = (int8_t)x->type.dtype,
                                      .a = -1, .b = -1, .c = -1, .imm = d };
            map[k] = nin + ni++;
        }
        if (q->n_instr > 8) return NULL;
        for (int j = 0; j < q->n_instr; j++) {
            tn_ew_instr t = q->instr[j];
            int32_t *r[3] = { &t.a, &t.b, &t.c };
            for (int o = 0; o < 3; o++)
                if (*r[o] >= 0) *r[o] = *r[o] < q->n_in ? map[*r[o]] : map[8 + *r[o] - q->n_in];
            map[8 + j] = nin + ni;
            ins_[ni++] = t;
        }
        int orr = q->out_reg[0];
        F->reg[m->id] = orr < q->n_in ? map[orr] : map[8 + orr - q->n_in];
        if (m->type.dtype != q->out_dtype[0]) return NULL;
        bool is_out;
        if (only) is_out = m == only;
        else {
            is_out = tn__ni(c, m)->n_root > 0;
            for (int u = 0; !is_out && u < tn__ni(c, m)->n_use; u++) is_out = tn__fg_of(F, tn__ni(c, m)->use[u].c) != g;
        }
        if (is_out) { out[nout] = m; oreg[nout] = F->reg[m->id]; odt[nout] = m->type.dtype; nout++; }
    }
    *P = (tn_ew_program){ nin, in_dt, ni, ins_, nout, oreg, odt };
    *ins = in; *n_ins = nin; *outs = out;
    return P;
}

static void tn__fuse_trace(const char *name, tn_var *y, int nmem) {
    if (!tn_get_config()->trace_rewrites) return;
    char b[512];
    tn__node_label(y, b, sizeof b);
    fprintf(stderr, "rewrite %s: %d elementwise nodes -> %s [id %d]\n", name, nmem, b, y->id);
}

/* Builds one group's fused node(s) and makes the replacements. */
static void tn__fuse_build(tn__fctx *F, int g) {
    tn__rw *c = F->c;
    tn__fgrp *G = &F->G[g];
    tn_var *tail = F->ord[G->tail];
    int n0 = tn__graph_nvars(c->g);
    if (n0 + 1 > F->cap) {             /* nodes fused so far are new: room for their ids */
        int cap = 2 * (n0 + 1);
        int *reg = (int *)tn__realloc(F->reg, (size_t)cap * sizeof *reg);
        if (reg) F->reg = reg;
        int *st = reg ? (int *)tn__realloc(F->regst, (size_t)cap * sizeof *st) : NULL;
        if (!st) { c->oom = true; return; }
        F->regst = st;
        memset(st + F->cap, 0, (size_t)(cap - F->cap) * sizeof *st);
        F->cap = cap;
    }
    tn_var **in, **out;
    int nin;
    /* an elementwise group read by one reduction only: the reduction's prologue */
    tn__ninfo *T = tn__ni(c, tail);
    if (tn__fuse_into_reductions && T->n_use == 1 && !T->n_root && tn__rw_fuse_reduction_op(T->use[0].c->op) &&
        T->use[0].c->n_in == 1 && !T->use[0].c->ext && G->nin <= TN__REDUCE_MAX_INPUTS && T->use[0].c->device == tail->device) {
        tn_var *R = T->use[0].c;
        bool single = true;    /* every other member is read inside the group only */
        for (int p = G->head; p >= 0 && single; p = F->next[p]) {
            tn_var *m = F->ord[p];
            if (m == tail) continue;
            if (tn__ni(c, m)->n_root) single = false;
            for (int u = 0; single && u < tn__ni(c, m)->n_use; u++) single = tn__fg_of(F, tn__ni(c, m)->use[u].c) == g;
        }
        tn_ew_program *P = single ? tn__fuse_program(F, g, &in, &nin, &out, tail) : NULL;
        tn_var *y = P && nin > 0 ? tn__node(c->g, R->op, nin, in, &R->p, P, "fuse") : NULL;
        tn__rw_sync(c);
        if (y) y->device = R->device;
        const tn_backend *be = tn__get_backend();    /* a device reduction must take the prologue */
        if (y && y->device != TN_HOST && (!be || !be->supports || !be->supports(y))) y = NULL;
        if (y && tn__type_eq(&y->type, &R->type)) {
            tn__rw_count("fusion_reduce");
            tn__fuse_trace("fusion_reduce", y, G->nmem);
            tn__rw_replace(c, R, y);
            return;
        }
        tn__rw_drop_new(c, n0);
        tn_clear_error();
    }
    if (G->nmem < 2) return;
    tn_ew_program *P = tn__fuse_program(F, g, &in, &nin, &out, NULL);
    if (!P || nin == 0 || P->n_out == 0) return;
    tn_params p0;
    memset(&p0, 0, sizeof p0);
    tn_var *y = tn__node_multi(c->g, TN_OP_COMPOSITE, nin, in, &p0, P, P->n_out, "fuse");
    tn_var *rep[TN_MAX_IPARAMS + 64];
    int nout = P->n_out;
    bool ok = y != NULL && nout <= (int)(sizeof rep / sizeof rep[0]);
    if (ok) y->device = tail->device;                /* the group's device */
    const tn_backend *be = tn__get_backend();        /* too many operands for one kernel: stay unfused */
    if (ok && y->device != TN_HOST && (!be || !be->supports || !be->supports(y))) ok = false;
    for (int k = 0; ok && k < nout; k++) {
        rep[k] = nout == 1 ? y : tn__proj(y, k);
        if (rep[k]) rep[k]->device = y->device;
        ok = rep[k] && tn__type_eq(&rep[k]->type, &out[k]->type);
    }
    tn__rw_sync(c);
    if (!ok) { tn__rw_drop_new(c, n0); tn_clear_error(); return; }
    tn__rw_count("fusion");
    tn__fuse_trace("fusion", y, G->nmem);
    for (int k = 0; k < nout; k++) tn__rw_replace(c, out[k], rep[k]);
}

static tn_result tn__rw_fuse(tn__rw *c) {
    tn__fctx F;
    memset(&F, 0, sizeof F);
    F.c = c;
    F.n = tn__rw_topo(c, &F.ord);
    int cap = c->synced + 1;
    F.G = (tn__fgrp *)tn__malloc((size_t)(F.n + 1) * sizeof *F.G);
    F.next = (int *)tn__malloc((size_t)(F.n + 1) * sizeof *F.next);
    F.reg = (int *)tn__malloc((size_t)cap * sizeof *F.reg);
    F.regst = (int *)tn__calloc((size_t)cap, sizeof *F.regst);
    F.cap = cap;
    tn_result r = TN_OK;
    if (c->oom || !F.G || !F.next || !F.reg || !F.regst) { r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer"); goto done; }
    for (int i = 0; i < c->synced; i++) { c->ni[i].reach = -1; c->ni[i].rmask = 0; }
    tn__fuse_group(&F);
    for (int i = 0; i < F.n; i++) {        /* member lists, topological */
        F.next[i] = -1;
        int g = tn__fg_of(&F, F.ord[i]);
        if (g < 0) continue;
        if (F.G[g].tail < 0) F.G[g].head = i; else F.next[F.G[g].tail] = i;
        F.G[g].tail = i;
    }
    /* the fused nodes are new (ids past F.regst's size): finish the groups first */
    int ng = 0;
    int *roots = (int *)tn__malloc((size_t)(F.ng + 1) * sizeof *roots);
    if (!roots) { r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer"); goto done; }
    for (int g = 0; g < F.ng; g++) if (F.G[g].parent == g && F.G[g].head >= 0) roots[ng++] = g;
    for (int j = 0; j < ng && !c->oom; j++) tn__fuse_build(&F, roots[j]);
    tn__free(roots);
    if (c->oom) r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer");
done:
    tn__free(F.ord); tn__free(F.G); tn__free(F.next); tn__free(F.reg); tn__free(F.regst);
    return r;
}

/* >>inplace -------------------------------------------------------------- */
/* node->inplace = k+1 where the output may take in[k]'s buffer: same type,
   an intermediate (no leaf, no view, no root) read by this node only. The
   executor checks the concrete shapes again at call time. */
static void tn__rw_inplace(tn__rw *c) {
    tn_var **ord;
    int n = tn__rw_topo(c, &ord);
    if (c->oom) return;
    for (int i = 0; i < n; i++) {
        tn_var *v = ord[i];
        tn_op_kind kind = tn__op_kind(v->op);
        bool ew = kind == TN_OPK_ELEMWISE || kind == TN_OPK_COMPOSITE;
        bool la = v->op == TN_OP_GEMM || v->op == TN_OP_GEMV;
        if ((!ew && !la) || v->n_out != 1 || v->inplace) continue;
        for (int k = 0; k < (la ? 1 : v->n_in); k++) {
            tn_var *x = v->in[k];
            tn__ninfo *X = tn__ni(c, x);
            tn_op_kind xk = tn__op_kind(x->op);
            if (xk == TN_OPK_LEAF || xk == TN_OPK_VIEW || xk == TN_OPK_TRANSFER || X->n_root || x->n_out != 1) continue;
            if (x->op == TN_OP_PROJ || !tn__type_same(&x->type, &v->type)) continue;
            bool only = la ? X->n_use == 1 : true;
            for (int u = 0; only && u < X->n_use; u++) only = X->use[u].c == v;
            if (!only) continue;
            v->inplace = k + 1;
            tn__rw_count("inplace");
            break;
        }
    }
    tn__free(ord);
}

/* >>optimize ------------------------------------------------------------- */

TN_API tn_result tn__optimize(tn_graph *fg, tn_var **roots, int n_roots, tn_mode mode) {
    tn__rw_n_counts = 0;
    if (!fg || (n_roots > 0 && !roots)) return tn__err(TN_ERR_NULL, "tn_function: optimizer: graph or roots is NULL");
    for (int i = 0; i < n_roots; i++)
        if (!roots[i] || roots[i]->graph != fg) return tn__err(TN_ERR_GRAPH, "tn_function: optimizer: root %d is not in the function's graph", i);
    if (mode == TN_MODE_DEFAULT) mode = tn_get_config()->mode;
    bool full = mode != TN_MODE_FAST_COMPILE;
    tn__rw c;
    tn_result r = TN_OK;
    if (!tn__rw_init(&c, fg, roots, n_roots)) { tn__rw_free(&c); return tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer"); }
#define TN__RUN(rules) if (r == TN_OK) r = tn__rw_run(&c, rules, (int)(sizeof rules / sizeof rules[0]))
    if (full) TN__RUN(tn__canon_rules);
    if (r == TN_OK) r = tn__rw_merge(&c);
    TN__RUN(tn__fold_rules);
    if (full) {
        TN__RUN(tn__stab_rules);
        TN__RUN(tn__canon_rules);      /* stabilize leaves a few x+(-c) forms */
        TN__RUN(tn__spec_rules);
        TN__RUN(tn__spec2_rules);
        if (r == TN_OK) r = tn__rw_merge(&c);
        const tn_backend *b = tn__get_backend();
        if (r == TN_OK && b && b->place) {
            r = b->place(fg, roots, n_roots);
            /* the back end may have added nodes and rewired inputs: rebuild the map */
            tn__rw_free(&c);
            memset(&c, 0, sizeof c);
            if (r == TN_OK && !tn__rw_init(&c, fg, roots, n_roots)) r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer");
        }
        if (r == TN_OK) r = tn__rw_fuse(&c);
        if (r == TN_OK) tn__rw_inplace(&c);
        if (r == TN_OK && c.oom) r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer");
    }
#undef TN__RUN
    tn__rw_free(&c);
    return r;
}
