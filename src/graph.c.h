/* >>graph: arena-owned nodes, leaves (inputs, constants, shared variables),
   the compiler front end (tn_function), the executor (tn_call) and debugprint. */
#include <string.h>
#include <stdlib.h>
#include <math.h>

/* >>graph_arena ---------------------------------------------------------- */

/* Nodes, input arrays and strings live in fixed-size chunks freed all at once;
   an allocation larger than a chunk gets a chunk of its own. */
#define TN__CHUNK_BYTES ((size_t)64 * 1024)

typedef struct tn__chunk {
    struct tn__chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} tn__chunk;

struct tn_graph {
    tn__chunk *chunks;
    tn_var **vars;          /* every var, in creation order (index == id) */
    int nvars, cap_vars;
    tn_array **owned;       /* values freed with the graph: constants, shared */
    int nowned, cap_owned;
};

TN_API tn_graph *tn_graph_new(void) {
    tn_graph *g = (tn_graph *)tn__calloc(1, sizeof *g);
    if (!g) tn__err(TN_ERR_OOM, "tn_graph_new: out of memory");
    return g;
}

TN_API void tn_graph_free(tn_graph *g) {
    if (!g) return;
    tn__scan_release_graph(g);          /* compiled inner steps of g's scans */
    for (int i = 0; i < g->nowned; i++) tn_array_free(g->owned[i]);
    tn__free(g->owned);
    tn__free(g->vars);
    for (tn__chunk *c = g->chunks, *next; c; c = next) { next = c->next; tn__free(c); }
    tn__free(g);
}

TN_API void *tn__graph_alloc(tn_graph *g, size_t bytes) {
    if (!g) return NULL;
    bytes = (bytes + 15) & ~(size_t)15;
    tn__chunk *c = g->chunks;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = bytes > TN__CHUNK_BYTES ? bytes : TN__CHUNK_BYTES;
        tn__chunk *n = (tn__chunk *)tn__malloc(sizeof *n + cap);
        if (!n) { tn__err(TN_ERR_OOM, "tn_graph: out of memory (%zu bytes)", bytes); return NULL; }
        n->used = 0; n->cap = cap;
        if (c && bytes > TN__CHUNK_BYTES) {   /* keep filling the current chunk */
            n->next = c->next; c->next = n;
        } else {
            n->next = c; g->chunks = n;
        }
        c = n;
    }
    void *p = c->data + c->used;
    c->used += bytes;
    memset(p, 0, bytes);
    return p;
}

TN_API char *tn__graph_strdup(tn_graph *g, const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = (char *)tn__graph_alloc(g, n);
    if (d) memcpy(d, s, n);
    return d;
}

TN_API int tn__graph_nvars(const tn_graph *g) { return g ? g->nvars : 0; }
TN_API tn_var *tn__graph_var(const tn_graph *g, int i) {
    return g && i >= 0 && i < g->nvars ? g->vars[i] : NULL;
}

static bool tn__graph_own(tn_graph *g, tn_array *a) {
    if (g->nowned == g->cap_owned) {
        int cap = g->cap_owned ? 2 * g->cap_owned : 16;
        tn_array **n = (tn_array **)tn__realloc(g->owned, (size_t)cap * sizeof *n);
        if (!n) return false;
        g->owned = n; g->cap_owned = cap;
    }
    g->owned[g->nowned++] = a;
    return true;
}

static void tn__graph_disown(tn_graph *g, tn_array *a) {
    for (int i = 0; i < g->nowned; i++)
        if (g->owned[i] == a) { g->owned[i] = g->owned[--g->nowned]; return; }
}

/* A contiguous copy of a on `device` (TN_HOST or a device ordinal): device
   values stay on their device (shared variables, device outputs). */
static tn_array *tn__copy_on(const tn_array *a, int device) {
    if (device == TN_HOST) return tn_array_copy(a);
    tn_array *c = tn__array_alloc(a->dtype, a->ndim, a->shape, device);
    if (!c) return NULL;
    const tn_device_ops *ops = tn__get_device_ops();
    tn_result r = a->device == device && tn_array_is_contiguous(a) && ops && ops->copy
                ? ops->copy(c->data, device, a->data, device, tn_array_nbytes(a)) : tn_array_assign(c, a);
    if (r != TN_OK) { tn_array_free(c); return NULL; }
    return c;
}

/* Outputs of the function being compiled, for the back end's placement pass
   (roots past them are update values); -1 outside tn_function. */
static _Thread_local int tn__func_n_outputs = -1;

/* A zeroed var registered in g (id = its index). */
static tn_var *tn__var_new(tn_graph *g, int op, const char *who) {
    if (g->nvars == g->cap_vars) {
        int cap = g->cap_vars ? 2 * g->cap_vars : 64;
        tn_var **n = (tn_var **)tn__realloc(g->vars, (size_t)cap * sizeof *n);
        if (!n) { tn__err(TN_ERR_OOM, "%s: out of memory", who); return NULL; }
        g->vars = n; g->cap_vars = cap;
    }
    tn_var *v = (tn_var *)tn__graph_alloc(g, sizeof *v);
    if (!v) return NULL;
    v->op = op;
    v->id = g->nvars;
    v->graph = g;
    v->n_out = 1;
    v->device = TN_HOST;
    g->vars[g->nvars++] = v;
    return v;
}

/* Unwinds the last var if it is v (a node whose type rule failed), so failed
   constructors leave no half-made node behind. The arena bytes stay. */
static void tn__var_drop_last(tn_graph *g, tn_var *v) {
    if (g->nvars > 0 && g->vars[g->nvars - 1] == v) g->nvars--;
}

/* >>graph_nodes ---------------------------------------------------------- */

static const char *tn__var_label_name(const tn_var *v) { return v && v->name ? v->name : ""; }

/* Records a node with n_out outputs and infers its type(s); node->type is
   output 0 (multi-output nodes are read through tn__proj). */
static tn_var *tn__node_multi(tn_graph *g, int op, int n_in, tn_var *const *in, const tn_params *p,
                              void *ext, int n_out, const char *who) {
    if (!who) who = "tn__node";
    if (!g) { tn__err(TN_ERR_NULL, "%s: graph is NULL", who); return NULL; }
    const tn_op_def *def = tn__op_def(op);
    if (!def || !def->infer) { tn__err(TN_ERR_INTERNAL, "%s: op %d has no type rule", who, op); return NULL; }
    if (n_in < 0 || (n_in > 0 && !in)) { tn__err(TN_ERR_NULL, "%s: inputs are NULL", who); return NULL; }
    if (def->arity >= 0 && def->arity != n_in) {
        tn__err(TN_ERR_INVALID, "%s: %s takes %d inputs, got %d", who, def->name, def->arity, n_in);
        return NULL;
    }
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) { tn__err(TN_ERR_NULL, "%s: input %d is NULL (did an earlier call fail? %s)", who, i, tn_last_error()); return NULL; }
        if (in[i]->graph != g) {
            tn__err(TN_ERR_GRAPH, "%s: input %d ('%s') belongs to another graph", who, i, tn__var_label_name(in[i]));
            return NULL;
        }
    }
    if (n_out < 1) n_out = 1;
    tn_type one, *outs = &one;
    tn_type *types = NULL;
    if (n_in + n_out > 1) {
        types = (tn_type *)tn__malloc((size_t)(n_in + n_out) * sizeof *types);
        if (!types) { tn__err(TN_ERR_OOM, "%s: out of memory", who); return NULL; }
        outs = types + n_in;
    }
    tn_var *v = tn__var_new(g, op, who);
    tn_var **vin = v && n_in ? (tn_var **)tn__graph_alloc(g, (size_t)n_in * sizeof *vin) : NULL;
    if (!v || (n_in && !vin)) { if (v) tn__var_drop_last(g, v); tn__free(types); return NULL; }
    for (int i = 0; i < n_in; i++) { vin[i] = in[i]; types[i] = in[i]->type; }
    v->n_in = n_in;
    v->in = vin;
    v->n_out = n_out;
    if (p) v->p = *p;
    v->ext = ext;
    memset(outs, 0, (size_t)n_out * sizeof *outs);
    tn_result r = def->infer(v, types, outs);
    if (r != TN_OK) {
        /* prefix the rule's message with the constructor's name */
        if (strncmp(tn_last_error(), who, strlen(who)) != 0) tn__err(r, "%s: %s", who, tn_last_error());
        tn__var_drop_last(g, v);
        tn__free(types);
        return NULL;
    }
    v->type = outs[0];
    tn__free(types);
    return v;
}

TN_API tn_var *tn__node(tn_graph *g, int op, int n_in, tn_var *const *in, const tn_params *p, void *ext, const char *who) {
    return tn__node_multi(g, op, n_in, in, p, ext, 1, who);
}

/* Output k of a multi-output node. */
static tn_var *tn__proj(tn_var *node, int k) {
    if (!node) { tn__err(TN_ERR_NULL, "tn__proj: node is NULL"); return NULL; }
    if (k < 0 || k >= node->n_out) {
        tn__err(TN_ERR_INVALID, "tn__proj: output %d of a node with %d outputs", k, node->n_out);
        return NULL;
    }
    tn_params p;
    memset(&p, 0, sizeof p);
    p.i[0] = k;
    return tn__node(node->graph, TN_OP_PROJ, 1, &node, &p, NULL, "tn__proj");
}

/* The types of every output of `node` given its inputs' types (outs[n_out]). */
static tn_result tn__infer_outputs(const tn_var *node, const tn_type *in, tn_type *outs) {
    const tn_op_def *def = tn__op_def(node->op);
    if (!def || !def->infer) return tn__err(TN_ERR_INTERNAL, "tn__infer: op %d has no type rule", node->op);
    return def->infer(node, in, outs);
}

/* "TensorType(float32, (?, 3))": unknown dims as '?' */
static const char *tn__type_str(const tn_type *t, char buf[160]) {
    char sb[128];
    snprintf(buf, 160, "TensorType(%s, %s)", tn_dtype_name(t->dtype), tn__shape_str(t->ndim, t->shape, sb));
    return buf;
}

/* >>leaves --------------------------------------------------------------- */

static tn_dtype tn__floatx(tn_dtype t) {
    if (t != TN_DTYPE_NONE) return t;
    tn_dtype fx = tn_get_config()->floatX;
    return fx == TN_DTYPE_NONE ? TN_F32 : fx;
}

static tn_var *tn__leaf(tn_graph *g, int op, const char *name, const tn_type *t, const char *who) {
    tn_var *v = tn__var_new(g, op, who);
    if (!v) return NULL;
    v->type = *t;
    if (name) {
        v->name = tn__graph_strdup(g, name);
        if (!v->name) { tn__var_drop_last(g, v); return NULL; }
    }
    return v;
}

static tn_type tn__type_of_array(const tn_array *a) {
    tn_type t;
    memset(&t, 0, sizeof t);
    t.dtype = a->dtype;
    t.ndim = a->ndim;
    for (int d = 0; d < a->ndim; d++) t.shape[d] = a->shape[d];
    return t;
}

TN_API tn_var *tn_input(tn_graph *g, const char *name, tn_dtype dt, int ndim, const int64_t *shape, const bool *bcast) {
    if (!g) { tn__err(TN_ERR_NULL, "tn_input: graph is NULL"); return NULL; }
    if (ndim < 0 || ndim > TN_MAX_DIMS) {
        tn__err(TN_ERR_INVALID, "tn_input: '%s': ndim %d is out of range [0, %d]", name ? name : "", ndim, TN_MAX_DIMS);
        return NULL;
    }
    if ((int)dt < 0 || dt >= TN_DTYPE_COUNT) {
        tn__err(TN_ERR_DTYPE, "tn_input: '%s': invalid dtype %d", name ? name : "", (int)dt);
        return NULL;
    }
    tn_type t;
    memset(&t, 0, sizeof t);
    t.dtype = tn__floatx(dt);
    t.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        int64_t s = shape ? shape[d] : -1;
        if (s < -1) {
            tn__err(TN_ERR_SHAPE, "tn_input: '%s': dim %d is %lld (use -1 for unknown)", name ? name : "", d, (long long)s);
            return NULL;
        }
        bool b = bcast && bcast[d];
        if (b && s != -1 && s != 1) {
            tn__err(TN_ERR_SHAPE, "tn_input: '%s': dim %d is broadcastable but has size %lld", name ? name : "", d, (long long)s);
            return NULL;
        }
        t.bcast[d] = b || s == 1;
        t.shape[d] = b ? 1 : s;
    }
    return tn__leaf(g, TN_OP_INPUT, name, &t, "tn_input");
}

TN_API tn_var *tn_scalar(tn_graph *g, const char *name, tn_dtype t) { return tn_input(g, name, t, 0, NULL, NULL); }
TN_API tn_var *tn_vector(tn_graph *g, const char *name, tn_dtype t) { return tn_input(g, name, t, 1, NULL, NULL); }
TN_API tn_var *tn_matrix(tn_graph *g, const char *name, tn_dtype t) { return tn_input(g, name, t, 2, NULL, NULL); }
TN_API tn_var *tn_tensor3(tn_graph *g, const char *name, tn_dtype t) { return tn_input(g, name, t, 3, NULL, NULL); }
TN_API tn_var *tn_row(tn_graph *g, const char *name, tn_dtype t) {
    return tn_input(g, name, t, 2, NULL, (const bool[]){ true, false });
}
TN_API tn_var *tn_col(tn_graph *g, const char *name, tn_dtype t) {
    return tn_input(g, name, t, 2, NULL, (const bool[]){ false, true });
}

/* A contiguous host copy the graph owns. */
static tn_array *tn__graph_copy_value(tn_graph *g, const tn_array *value, const char *who) {
    tn_array *c = tn_array_copy(value);
    if (!c) { tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "%s: cannot copy the value: %s", who, tn_last_error()); return NULL; }
    if (!tn__graph_own(g, c)) { tn_array_free(c); tn__err(TN_ERR_OOM, "%s: out of memory", who); return NULL; }
    return c;
}

static tn_result tn__check_value(const tn_array *value, const char *who) {
    if (!value) return tn__err(TN_ERR_NULL, "%s: value is NULL", who);
    tn_result r = tn_array_check(value);
    if (r != TN_OK) return tn__err(r, "%s: %s", who, tn_last_error());
    return TN_OK;
}

TN_API tn_var *tn_constant(tn_graph *g, const tn_array *value) {
    if (!g) { tn__err(TN_ERR_NULL, "tn_constant: graph is NULL"); return NULL; }
    if (tn__check_value(value, "tn_constant") != TN_OK) return NULL;
    tn_array *c = tn__graph_copy_value(g, value, "tn_constant");
    if (!c) return NULL;
    tn_type t = tn__type_of_array(c);
    for (int d = 0; d < t.ndim; d++) t.bcast[d] = t.shape[d] == 1;
    tn_var *v = tn__leaf(g, TN_OP_CONSTANT, NULL, &t, "tn_constant");
    if (!v) { tn__graph_disown(g, c); tn_array_free(c); return NULL; }
    v->value = c;
    return v;
}

TN_API tn_var *tn_scalar_const(tn_graph *g, double value) {
    if (!g) { tn__err(TN_ERR_NULL, "tn_scalar_const: graph is NULL"); return NULL; }
    tn_array *a = tn_array_scalar(TN_F64, value);
    if (!a) { tn__err(TN_ERR_OOM, "tn_scalar_const: out of memory"); return NULL; }
    tn_var *v = tn_constant(g, a);
    tn_array_free(a);
    if (v) v->flags |= TN_VAR_WEAK;
    return v;
}

TN_API tn_var *tn_shared(tn_graph *g, const char *name, const tn_array *value) {
    if (!g) { tn__err(TN_ERR_NULL, "tn_shared: graph is NULL"); return NULL; }
    char who[160];
    snprintf(who, sizeof who, "tn_shared '%s'", name ? name : "");
    if (tn__check_value(value, who) != TN_OK) return NULL;
    tn_array *c = tn__graph_copy_value(g, value, who);
    if (!c) return NULL;
    /* static type: dtype and rank fixed, sizes free to change by updates */
    tn_type t;
    memset(&t, 0, sizeof t);
    t.dtype = c->dtype;
    t.ndim = c->ndim;
    for (int d = 0; d < t.ndim; d++) t.shape[d] = -1;
    tn_var *v = tn__leaf(g, TN_OP_SHARED, name, &t, who);
    if (!v) { tn__graph_disown(g, c); tn_array_free(c); return NULL; }
    v->value = c;
    return v;
}

TN_API const tn_array *tn_shared_get(tn_var *shared) {
    if (!shared) { tn__err(TN_ERR_NULL, "tn_shared_get: variable is NULL"); return NULL; }
    if (shared->op != TN_OP_SHARED) {
        tn__err(TN_ERR_INVALID, "tn_shared_get: '%s' is not a shared variable", tn__var_label_name(shared));
        return NULL;
    }
    return shared->value;
}

TN_API tn_array *tn_shared_get_value(tn_var *shared) {
    const tn_array *a = tn_shared_get(shared);
    if (!a) return NULL;
    tn_array *c = a->device == TN_HOST ? tn_array_copy(a) : tn_array_to_host(a);
    if (!c) tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "tn_shared_get_value '%s': %s", tn__var_label_name(shared), tn_last_error());
    return c;
}

TN_API tn_result tn_shared_set_value(tn_var *shared, const tn_array *value) {
    if (!shared) return tn__err(TN_ERR_NULL, "tn_shared_set_value: variable is NULL");
    const char *name = tn__var_label_name(shared);
    if (shared->op != TN_OP_SHARED)
        return tn__err(TN_ERR_INVALID, "tn_shared_set_value: '%s' is not a shared variable", name);
    if (!value) return tn__err(TN_ERR_NULL, "tn_shared_set_value '%s': value is NULL", name);
    tn_result r = tn_array_check(value);
    if (r != TN_OK) return tn__err(r, "tn_shared_set_value '%s': %s", name, tn_last_error());
    const tn_array *old = shared->value;
    if (value->dtype != shared->type.dtype || value->ndim != shared->type.ndim) {
        char a[128], b[128];
        return tn__err(value->dtype != shared->type.dtype ? TN_ERR_DTYPE : TN_ERR_SHAPE, "tn_shared_set_value: '%s' holds a %s array of %d dims %s; the new value is %s of %d dims %s (dtype and ndim must stay)",
                       name, tn_dtype_name(shared->type.dtype), shared->type.ndim, tn__shape_str(old->ndim, old->shape, a),
                       tn_dtype_name(value->dtype), value->ndim, tn__shape_str(value->ndim, value->shape, b));
    }
    if (value == old) return TN_OK;
    tn_array *c = tn__copy_on(value, old->device);    /* a device-resident variable stays there */
    if (!c) return tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "tn_shared_set_value '%s': %s", name, tn_last_error());
    /* Replace the contents in place: pointers from tn_shared_get stay valid. */
    tn_array tmp = *shared->value;
    *shared->value = *c;
    *c = tmp;
    tn_array_free(c);
    return TN_OK;
}

/* >>var_accessors -------------------------------------------------------- */

TN_API tn_dtype tn_var_dtype(const tn_var *v) { return v ? v->type.dtype : TN_DTYPE_NONE; }
TN_API int tn_var_ndim(const tn_var *v) { return v ? v->type.ndim : -1; }
TN_API int64_t tn_var_dim(const tn_var *v, int axis) {
    if (!v) return -1;
    if (axis < 0) axis += v->type.ndim;
    return axis >= 0 && axis < v->type.ndim ? v->type.shape[axis] : -1;
}
TN_API const char *tn_var_name(const tn_var *v) { return v ? v->name : NULL; }
TN_API tn_var *tn_var_set_name(tn_var *v, const char *name) {
    if (!v) { tn__err(TN_ERR_NULL, "tn_var_set_name: variable is NULL"); return NULL; }
    if (!name) { v->name = NULL; return v; }
    char *n = tn__graph_strdup(v->graph, name);
    if (!n) return NULL;
    v->name = n;
    return v;
}
TN_API tn_graph *tn_var_graph(const tn_var *v) { return v ? v->graph : NULL; }

/* >>toposort ----------------------------------------------------------- */

/* Post-order of everything reachable from roots[], inputs before users,
   iterative (graphs may be 100k nodes deep). nvars bounds the ids. When
   root_of is given, root_of[id] is the first root that reached the var. */
static tn_result tn__toposort(tn_var *const *roots, int n_roots, int nvars, tn_var ***order_out, int *n_order,
                              int *root_of, const char *who) {
    unsigned char *state = (unsigned char *)tn__calloc((size_t)nvars + 1, 1);
    tn_var **order = (tn_var **)tn__malloc(((size_t)nvars + 1) * sizeof *order);
    struct tn__frame { tn_var *v; int next; } *stack = (struct tn__frame *)tn__malloc(((size_t)nvars + 1) * sizeof *stack);
    if (!state || !order || !stack) {
        tn__free(state); tn__free(order); tn__free(stack);
        return tn__err(TN_ERR_OOM, "%s: out of memory", who);
    }
    int n = 0;
    for (int r = 0; r < n_roots; r++) {
        tn_var *root = roots[r];
        if (!root || root->id < 0 || root->id >= nvars || state[root->id]) continue;
        int sp = 0;
        stack[sp++] = (struct tn__frame){ root, 0 };
        state[root->id] = 1;
        if (root_of) root_of[root->id] = r;
        while (sp > 0) {
            struct tn__frame *fr = &stack[sp - 1];
            if (fr->next < fr->v->n_in) {
                tn_var *c = fr->v->in[fr->next++];
                if (!c || c->id < 0 || c->id >= nvars) {
                    int bad = fr->v->id;
                    tn__free(state); tn__free(order); tn__free(stack);
                    return tn__err(TN_ERR_GRAPH, "%s: malformed graph (node %d has a bad input)", who, bad);
                }
                if (state[c->id]) continue;
                state[c->id] = 1;
                if (root_of) root_of[c->id] = r;
                stack[sp++] = (struct tn__frame){ c, 0 };
            } else {
                state[fr->v->id] = 2;
                order[n++] = fr->v;
                sp--;
            }
        }
    }
    tn__free(state);
    tn__free(stack);
    *order_out = order;
    *n_order = n;
    return TN_OK;
}

/* >>function ----------------------------------------------------------- */

enum { TN__SLOT_INTERNAL = 0, TN__SLOT_INPUT, TN__SLOT_CONST, TN__SLOT_SHARED };
#define TN__RING 8   /* borrowed output structs per output: a stale one stays detectable for 7 calls */

typedef struct tn__slot {
    int kind;               /* TN__SLOT_* */
    int index;              /* input position (INPUT) */
    tn_var *var;            /* fg var producing it */
    tn_var *user;           /* SHARED: the user's variable (its value is the storage) */
    int view_of;            /* view output: the slot it aliases; -1 otherwise */
    int nreaders;           /* step inputs that read it */
    bool pinned;            /* a function output or update value: its buffer is never reused */
    int phys;               /* plan: buffer index, -1 for external or view of external */
    tn_type ct;             /* plan: concrete type */
    tn_array arr;           /* internal slots: the array given to kernels */
} tn__slot;

typedef struct tn__step {
    tn_var *node;
    const tn_op_def *def;
    int n_in, n_out;
    int *in_slot;
    int out_slot;           /* outputs are out_slot .. out_slot + n_out - 1 */
    bool view;
    void *bstate;           /* back end state (device nodes) */
} tn__step;

typedef struct tn__phys {
    tn_buffer *base;
    void *data;
    size_t cap;
    int device;
    long pending;
    bool pinned, in_pool;
} tn__phys;

struct tn_func {
    tn_graph *fg;
    const char *name;                   /* desc->name or "tn_call" */
    int n_inputs, n_outputs, n_updates;
    int *in_slot;
    tn_type *in_type;
    const char **in_name;
    int *out_slot;
    bool *out_borrow;
    tn_array *ring;                     /* n_outputs * TN__RING borrowed structs */
    tn_buffer **ring_ref;               /* storage a ring entry keeps alive, or NULL */
    tn_var **upd_user;                  /* the user's shared variables */
    int *upd_slot;
    bool *upd_swappable;
    tn_array **upd_new;                 /* scratch: replacement values */
    tn_var **roots;                     /* fg roots after optimisation */
    int n_roots;
    int n_slots;
    tn__slot *slots;
    tn_array **slotp;                   /* run time: each slot's array */
    int n_steps;
    tn__step *steps;
    int max_args;
    tn_array **args;
    int *ext_slots;                     /* input and shared slots: their shapes are the plan's key */
    int n_ext;
    int64_t *cache;                     /* n_ext * (1 + TN_MAX_DIMS) */
    bool planned;
    tn__phys *phys;
    int n_phys, cap_phys;
    int *pool, n_pool;                  /* plan: free buffers */
    tn_array **retired;                 /* replaced shared values kept alive until the next call */
    int n_retired, cap_retired;
    uint64_t gen;
    const tn_backend *backend;
    struct tn__prof *prof;              /* profiler (src/profile.c.h); NULL when off */
};

/* Profiler hooks (src/profile.c.h), called only when f->prof is set. */
static double tn__prof_now(void);
static void tn__prof_attach(tn_func *f, double t_rewrite, double t_prepare);
static double tn__prof_begin_call(tn_func *f, tn_array *const *inputs);
static void tn__prof_step(tn_func *f, int k, double t0);
static void tn__prof_end_call(tn_func *f, double t_call, double t_run);
static void tn__prof_finish(tn_func *f);

static void tn__plan_release(tn_func *f) {
    for (int i = 0; i < f->n_phys; i++) tn__buffer_release(f->phys[i].base);
    f->n_phys = 0;
    f->n_pool = 0;
    f->planned = false;
}

static void tn__retired_release(tn_func *f) {
    for (int i = 0; i < f->n_retired; i++) tn_array_free(f->retired[i]);
    f->n_retired = 0;
}

TN_API void tn_function_free(tn_func *f) {
    if (!f) return;
    if (f->prof) tn__prof_finish(f);
    tn__plan_release(f);
    tn__retired_release(f);
    if (f->backend && f->backend->release)
        for (int i = 0; i < f->n_steps; i++) if (f->steps[i].bstate) f->backend->release(f->steps[i].bstate);
    tn__free(f->retired);
    tn__free(f->phys);
    tn__free(f->pool);
    tn__free(f->cache);
    tn__free(f->ext_slots);
    tn__free(f->args);
    tn__free(f->steps);
    tn__free(f->slotp);
    tn__free(f->slots);
    tn__free(f->roots);
    tn__free(f->upd_new);
    tn__free(f->upd_swappable);
    tn__free(f->upd_slot);
    tn__free(f->upd_user);
    if (f->ring_ref) for (int i = 0; i < f->n_outputs * TN__RING; i++) tn__buffer_release(f->ring_ref[i]);
    tn__free(f->ring_ref);
    tn__free(f->ring);
    tn__free(f->out_borrow);
    tn__free(f->out_slot);
    tn__free(f->in_name);
    tn__free(f->in_type);
    tn__free(f->in_slot);
    tn_graph_free(f->fg);
    tn__free(f);
}

static const char *tn__root_desc(int r, int n_outputs, const tn_update *ups, char *buf, size_t cap) {
    if (r < n_outputs) snprintf(buf, cap, "output %d", r);
    else snprintf(buf, cap, "update %d (of '%s')", r - n_outputs, tn__var_label_name(ups[r - n_outputs].shared));
    return buf;
}

static tn_result tn__check_desc(tn_graph *g, const tn_func_desc *d) {
    const char *W = "tn_function";
    if (!g) return tn__err(TN_ERR_NULL, "%s: graph is NULL", W);
    if (!d) return tn__err(TN_ERR_NULL, "%s: desc is NULL", W);
    if (d->n_inputs < 0 || d->n_outputs < 0 || d->n_updates < 0)
        return tn__err(TN_ERR_NUM_INPUTS, "%s: negative count (n_inputs %d, n_outputs %d, n_updates %d)", W, d->n_inputs, d->n_outputs, d->n_updates);
    if (d->n_inputs > 0 && !d->inputs) return tn__err(TN_ERR_NULL, "%s: n_inputs is %d but inputs is NULL", W, d->n_inputs);
    if (d->n_outputs > 0 && !d->outputs) return tn__err(TN_ERR_NULL, "%s: n_outputs is %d but outputs is NULL", W, d->n_outputs);
    if (d->n_updates > 0 && !d->updates) return tn__err(TN_ERR_NULL, "%s: n_updates is %d but updates is NULL", W, d->n_updates);
    if (d->n_outputs == 0 && d->n_updates == 0) return tn__err(TN_ERR_INVALID, "%s: no outputs and no updates", W);
    for (int i = 0; i < d->n_inputs; i++) {
        tn_var *v = d->inputs[i];
        if (!v) return tn__err(TN_ERR_NULL, "%s: input %d is NULL", W, i);
        if (v->graph != g) return tn__err(TN_ERR_GRAPH, "%s: input %d ('%s') belongs to another graph", W, i, tn__var_label_name(v));
        if (v->op != TN_OP_INPUT) {
            const tn_op_def *def = tn__op_def(v->op);
            return tn__err(TN_ERR_INVALID, "%s: input %d ('%s') is a %s, not a symbolic input (tn_input, tn_vector, ...)%s", W, i,
                           tn__var_label_name(v), def && def->name ? def->name : "node",
                           v->op == TN_OP_SHARED ? ": shared variables are implicit inputs" : "");
        }
        for (int j = 0; j < i; j++)
            if (d->inputs[j] == v) return tn__err(TN_ERR_INVALID, "%s: input '%s' is listed twice (positions %d and %d)", W, tn__var_label_name(v), j, i);
    }
    for (int i = 0; i < d->n_outputs; i++) {
        tn_var *v = d->outputs[i];
        if (!v) return tn__err(TN_ERR_NULL, "%s: output %d is NULL (did its constructor fail?)", W, i);
        if (v->graph != g) return tn__err(TN_ERR_GRAPH, "%s: output %d ('%s') belongs to another graph", W, i, tn__var_label_name(v));
        if (v->n_out > 1) return tn__err(TN_ERR_INVALID, "%s: output %d is a node with %d outputs; pick one", W, i, v->n_out);
    }
    for (int i = 0; i < d->n_updates; i++) {
        tn_var *s = d->updates[i].shared, *v = d->updates[i].value;
        if (!s) return tn__err(TN_ERR_NULL, "%s: update %d: shared variable is NULL", W, i);
        if (!v) return tn__err(TN_ERR_NULL, "%s: update %d ('%s'): value is NULL (did its constructor fail?)", W, i, tn__var_label_name(s));
        if (s->graph != g || v->graph != g)
            return tn__err(TN_ERR_GRAPH, "%s: update %d ('%s'): variables from another graph", W, i, tn__var_label_name(s));
        if (s->op != TN_OP_SHARED)
            return tn__err(TN_ERR_UPDATE, "%s: update %d: target '%s' is not a shared variable", W, i, tn__var_label_name(s));
        if (v->type.dtype != s->type.dtype || v->type.ndim != s->type.ndim) {
            char a[160], b[160];
            return tn__err(TN_ERR_UPDATE, "%s: update %d: shared variable '%s' has type %s but the new value has type %s (dtype and ndim must match; cast the value)",
                           W, i, tn__var_label_name(s), tn__type_str(&s->type, a), tn__type_str(&v->type, b));
        }
        for (int j = 0; j < i; j++)
            if (d->updates[j].shared == s)
                return tn__err(TN_ERR_UPDATE, "%s: shared variable '%s' is updated twice (updates %d and %d)", W, tn__var_label_name(s), j, i);
    }
    return TN_OK;
}

/* Copies one user node into the function's graph, inputs mapped by id. */
static tn_var *tn__clone_var(tn_graph *fg, const tn_var *u, tn_var *const *map) {
    tn_var *v;
    if (u->op == TN_OP_CONSTANT) {
        v = tn_constant(fg, u->value);
        if (!v) return NULL;
    } else {
        v = tn__var_new(fg, u->op, "tn_function");
        if (!v) return NULL;
    }
    v->type = u->type;
    v->n_out = u->n_out;
    v->flags = u->flags;
    v->p = u->p;
    v->ext = u->ext;
    v->device = u->device;
    v->inplace = u->inplace;
    if (u->name && !(v->name = tn__graph_strdup(fg, u->name))) return NULL;
    if (u->op == TN_OP_INPUT || u->op == TN_OP_SHARED) v->ext = (void *)u;   /* link to the user's leaf */
    if (u->n_in > 0) {
        v->in = (tn_var **)tn__graph_alloc(fg, (size_t)u->n_in * sizeof *v->in);
        if (!v->in) return NULL;
        v->n_in = u->n_in;
        for (int i = 0; i < u->n_in; i++) v->in[i] = map[u->in[i]->id];
    }
    return v;
}

/* Clones what the roots reach (and every listed input) into f->fg. */
static tn_result tn__clone_subgraph(tn_graph *g, const tn_func_desc *d, tn_func *f, tn_var **roots, int n_roots) {
    int nv = g->nvars;
    int *root_of = (int *)tn__malloc((size_t)(nv + 1) * sizeof *root_of);
    int *in_pos = (int *)tn__malloc((size_t)(nv + 1) * sizeof *in_pos);
    tn_var **map = (tn_var **)tn__calloc((size_t)nv + 1, sizeof *map);
    tn_var **order = NULL;
    int n_order = 0;
    tn_result r = TN_OK;
    if (!root_of || !in_pos || !map) { r = tn__err(TN_ERR_OOM, "tn_function: out of memory"); goto done; }
    for (int i = 0; i < nv; i++) in_pos[i] = -1;
    for (int i = 0; i < d->n_inputs; i++) in_pos[d->inputs[i]->id] = i;
    if ((r = tn__toposort(roots, n_roots, nv, &order, &n_order, root_of, "tn_function")) != TN_OK) goto done;
    for (int k = 0; k < n_order; k++) {
        tn_var *u = order[k];
        if (u->graph != g) { r = tn__err(TN_ERR_GRAPH, "tn_function: node %d belongs to another graph", u->id); goto done; }
        if (u->op == TN_OP_INPUT && in_pos[u->id] < 0) {
            char rb[200];
            r = tn__err(TN_ERR_INVALID, "tn_function: %s depends on input '%s', which is not in inputs",
                        tn__root_desc(root_of[u->id], d->n_outputs, d->updates, rb, sizeof rb), tn__var_label_name(u));
            goto done;
        }
    }
    for (int k = 0; k < n_order; k++) {
        tn_var *u = order[k];
        if (!(map[u->id] = tn__clone_var(f->fg, u, map))) { r = tn_last_result() ? tn_last_result() : TN_ERR_OOM; goto done; }
    }
    for (int i = 0; i < d->n_inputs; i++) {      /* inputs the outputs do not use still have a slot */
        tn_var *u = d->inputs[i];
        if (!map[u->id] && !(map[u->id] = tn__clone_var(f->fg, u, map))) { r = tn_last_result() ? tn_last_result() : TN_ERR_OOM; goto done; }
    }
    for (int i = 0; i < n_roots; i++) f->roots[i] = map[roots[i]->id];
    /* the listed inputs' clones, by position, ride after the roots */
    for (int i = 0; i < d->n_inputs; i++) f->roots[n_roots + i] = map[d->inputs[i]->id];
done:
    tn__free(order);
    tn__free(map);
    tn__free(in_pos);
    tn__free(root_of);
    return r;
}

static size_t tn__type_bytes(const tn_type *t) {
    size_t n = tn_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

/* Steps and slots from the optimised graph. */
static tn_result tn__schedule(tn_func *f, int n_roots) {
    const char *W = "tn_function";
    tn_var **order = NULL;
    int n_order = 0;
    int nv = f->fg->nvars;
    tn_result r = tn__toposort(f->roots, n_roots + f->n_inputs, nv, &order, &n_order, NULL, W);
    if (r != TN_OK) return r;
    int *slot_of = (int *)tn__malloc((size_t)(nv + 1) * sizeof *slot_of);
    if (!slot_of) { tn__free(order); return tn__err(TN_ERR_OOM, "%s: out of memory", W); }
    int n_slots = 0, n_steps = 0, n_idx = 0;
    for (int k = 0; k < n_order; k++) {
        tn_var *v = order[k];
        if (v->op == TN_OP_PROJ) continue;
        n_slots += v->n_out;
        if (tn__op_kind(v->op) != TN_OPK_LEAF) { n_steps++; n_idx += v->n_in; }
    }
    f->slots = (tn__slot *)tn__calloc((size_t)n_slots + 1, sizeof *f->slots);
    f->slotp = (tn_array **)tn__calloc((size_t)n_slots + 1, sizeof *f->slotp);
    f->steps = (tn__step *)tn__calloc((size_t)n_steps + 1, sizeof *f->steps);
    int *idx = (int *)tn__graph_alloc(f->fg, ((size_t)n_idx + 1) * sizeof *idx);
    if (!f->slots || !f->slotp || !f->steps || !idx) { r = tn__err(TN_ERR_OOM, "%s: out of memory", W); goto done; }
    f->n_slots = 0;
    f->max_args = 1;
    for (int k = 0; k < n_order; k++) {
        tn_var *v = order[k];
        if (v->op == TN_OP_PROJ) {
            tn_var *src = v->in[0];
            if (src->op == TN_OP_PROJ || v->p.i[0] < 0 || v->p.i[0] >= src->n_out) {
                r = tn__err(TN_ERR_GRAPH, "%s: malformed PROJ node %d", W, v->id);
                goto done;
            }
            slot_of[v->id] = slot_of[src->id] + (int)v->p.i[0];
            continue;
        }
        int s0 = f->n_slots;
        slot_of[v->id] = s0;
        for (int k2 = 0; k2 < v->n_out; k2++) {
            tn__slot *s = &f->slots[f->n_slots++];
            s->var = v;
            s->view_of = -1;
            s->phys = -1;
            s->index = -1;
            f->slotp[s0 + k2] = &s->arr;
        }
        tn__slot *s = &f->slots[s0];
        const tn_op_def *def = tn__op_def(v->op);
        if (!def) { r = tn__err(TN_ERR_INTERNAL, "%s: node %d has unknown op %d", W, v->id, v->op); goto done; }
        switch (v->op) {
        case TN_OP_INPUT: s->kind = TN__SLOT_INPUT; continue;
        case TN_OP_CONSTANT: s->kind = TN__SLOT_CONST; f->slotp[s0] = v->value; continue;
        case TN_OP_SHARED: s->kind = TN__SLOT_SHARED; s->user = (tn_var *)v->ext; continue;
        default: break;
        }
        if (def->kind == TN_OPK_LEAF) { r = tn__err(TN_ERR_INTERNAL, "%s: unknown leaf op %s", W, def->name); goto done; }
        bool on_device = v->device != TN_HOST && f->backend;
        if (!def->cpu && !on_device) {
            r = tn__err(TN_ERR_UNSUPPORTED, "%s: op %s has no CPU kernel", W, def->name ? def->name : "?");
            goto done;
        }
        tn__step *st = &f->steps[f->n_steps++];
        st->node = v;
        st->def = def;
        st->n_in = v->n_in;
        st->n_out = v->n_out;
        st->in_slot = idx;
        idx += v->n_in;
        st->out_slot = s0;
        st->view = def->kind == TN_OPK_VIEW;
        for (int i = 0; i < v->n_in; i++) {
            st->in_slot[i] = slot_of[v->in[i]->id];
            f->slots[st->in_slot[i]].nreaders++;
        }
        if (st->view) s->view_of = st->in_slot[0];
        if (v->n_in + v->n_out > f->max_args) f->max_args = v->n_in + v->n_out;
        if (on_device && f->backend->prepare) {
            r = f->backend->prepare(v, &st->bstate);
            if (r != TN_OK) { r = tn__err(r, "%s: back end %s cannot prepare %s: %s", W, f->backend->name, def->name, tn_last_error()); goto done; }
        }
    }
    for (int i = 0; i < f->n_inputs; i++) {
        f->in_slot[i] = slot_of[f->roots[n_roots + i]->id];
        f->slots[f->in_slot[i]].index = i;
    }
    for (int i = 0; i < f->n_outputs; i++) {
        f->out_slot[i] = slot_of[f->roots[i]->id];
        f->slots[f->out_slot[i]].pinned = true;
    }
    for (int i = 0; i < f->n_updates; i++) {
        f->upd_slot[i] = slot_of[f->roots[f->n_outputs + i]->id];
        f->slots[f->upd_slot[i]].pinned = true;
    }
    /* an update may swap its buffer into the shared variable when nothing else returns it */
    for (int i = 0; i < f->n_updates; i++) {
        int s = f->upd_slot[i];
        bool ok = f->slots[s].kind == TN__SLOT_INTERNAL && f->slots[s].view_of < 0;
        for (int j = 0; ok && j < f->n_outputs; j++) ok = f->out_slot[j] != s;
        for (int j = 0; ok && j < f->n_updates; j++) ok = j == i || f->upd_slot[j] != s;
        f->upd_swappable[i] = ok;
    }
    f->n_ext = 0;
    f->ext_slots = (int *)tn__malloc(((size_t)f->n_slots + 1) * sizeof *f->ext_slots);
    f->args = (tn_array **)tn__malloc((size_t)f->max_args * sizeof *f->args);
    if (!f->ext_slots || !f->args) { r = tn__err(TN_ERR_OOM, "%s: out of memory", W); goto done; }
    for (int s = 0; s < f->n_slots; s++)
        if (f->slots[s].kind == TN__SLOT_INPUT || f->slots[s].kind == TN__SLOT_SHARED) f->ext_slots[f->n_ext++] = s;
    f->cache = (int64_t *)tn__calloc((size_t)f->n_ext * (1 + TN_MAX_DIMS) + 1, sizeof *f->cache);
    if (!f->cache) { r = tn__err(TN_ERR_OOM, "%s: out of memory", W); goto done; }
done:
    tn__free(slot_of);
    tn__free(order);
    return r;
}

TN_API tn_func *tn_function(tn_graph *g, const tn_func_desc *d) {
    if (tn__check_desc(g, d) != TN_OK) return NULL;
    tn_func *f = (tn_func *)tn__calloc(1, sizeof *f);
    if (!f) { tn__err(TN_ERR_OOM, "tn_function: out of memory"); return NULL; }
    int no = d->n_outputs, nu = d->n_updates, ni = d->n_inputs;
    int n_roots = no + nu;
    f->n_inputs = ni; f->n_outputs = no; f->n_updates = nu;
    f->fg = tn_graph_new();
    f->in_slot = (int *)tn__calloc((size_t)ni + 1, sizeof *f->in_slot);
    f->in_type = (tn_type *)tn__calloc((size_t)ni + 1, sizeof *f->in_type);
    f->in_name = (const char **)tn__calloc((size_t)ni + 1, sizeof *f->in_name);
    f->out_slot = (int *)tn__calloc((size_t)no + 1, sizeof *f->out_slot);
    f->out_borrow = (bool *)tn__calloc((size_t)no + 1, sizeof *f->out_borrow);
    f->ring = (tn_array *)tn__calloc((size_t)no * TN__RING + 1, sizeof *f->ring);
    f->ring_ref = (tn_buffer **)tn__calloc((size_t)no * TN__RING + 1, sizeof *f->ring_ref);
    f->upd_user = (tn_var **)tn__calloc((size_t)nu + 1, sizeof *f->upd_user);
    f->upd_slot = (int *)tn__calloc((size_t)nu + 1, sizeof *f->upd_slot);
    f->upd_swappable = (bool *)tn__calloc((size_t)nu + 1, sizeof *f->upd_swappable);
    f->upd_new = (tn_array **)tn__calloc((size_t)nu + 1, sizeof *f->upd_new);
    f->roots = (tn_var **)tn__calloc((size_t)(n_roots + ni) + 1, sizeof *f->roots);
    tn_var **uroots = (tn_var **)tn__calloc((size_t)n_roots + 1, sizeof *uroots);
    if (!f->fg || !f->in_slot || !f->in_type || !f->in_name || !f->out_slot || !f->out_borrow || !f->ring || !f->ring_ref ||
        !f->upd_user || !f->upd_slot || !f->upd_swappable || !f->upd_new || !f->roots || !uroots) {
        tn__err(TN_ERR_OOM, "tn_function: out of memory");
        goto fail;
    }
    f->name = d->name ? tn__graph_strdup(f->fg, d->name) : "tn_call";
    if (!f->name) goto fail;
    f->backend = tn__get_backend();
    for (int i = 0; i < no; i++) {
        uroots[i] = d->outputs[i];
        f->out_borrow[i] = d->borrow_outputs ? d->borrow_outputs[i] : d->borrow;
    }
    for (int i = 0; i < nu; i++) { uroots[no + i] = d->updates[i].value; f->upd_user[i] = d->updates[i].shared; }
    for (int i = 0; i < ni; i++) {
        f->in_type[i] = d->inputs[i]->type;
        f->in_name[i] = d->inputs[i]->name ? tn__graph_strdup(f->fg, d->inputs[i]->name) : "";
        if (!f->in_name[i]) goto fail;
    }
    if (tn__clone_subgraph(g, d, f, uroots, n_roots) != TN_OK) goto fail;
    tn_mode mode = d->mode != TN_MODE_DEFAULT ? d->mode : tn_get_config()->mode;
    double t_opt = tn__prof_now();
    tn__func_n_outputs = no;
    tn_result r = tn__optimize(f->fg, f->roots, n_roots, mode);
    tn__func_n_outputs = -1;
    t_opt = tn__prof_now() - t_opt;
    if (r != TN_OK) {
        if (strncmp(tn_last_error(), "tn_function", 11) != 0) tn__err(r, "tn_function: optimizer failed: %s", tn_last_error());
        goto fail;
    }
    for (int i = 0; i < n_roots; i++) {
        tn_var *v = f->roots[i];
        if (!v || v->graph != f->fg || v->type.dtype != uroots[i]->type.dtype || v->type.ndim != uroots[i]->type.ndim) {
            tn__err(TN_ERR_INTERNAL, "tn_function: the optimizer replaced root %d with a variable of another type", i);
            goto fail;
        }
        if (!v->name && uroots[i]->name && !(v->name = tn__graph_strdup(f->fg, uroots[i]->name))) goto fail;
    }
    f->n_roots = n_roots;
    double t_sched = tn__prof_now();
    if (tn__schedule(f, n_roots) != TN_OK) goto fail;
    if (tn_get_config()->profile) tn__prof_attach(f, t_opt, tn__prof_now() - t_sched);
    tn__free(uroots);
    return f;
fail:
    tn__free(uroots);
    tn_function_free(f);
    return NULL;
}

/* >>executor ----------------------------------------------------------- */

static void tn__node_label(const tn_var *v, char *buf, size_t cap) {
    const tn_op_def *d = tn__op_def(v->op);
    /* ops placed on a GPU print as Theano's: GpuElemwise{exp,no_inplace} */
    const tn_var *src = v->op == TN_OP_PROJ && v->n_in == 1 ? v->in[0] : v;
    tn_op_kind k = d ? d->kind : TN_OPK_OTHER;
    size_t n = 0;
    if (src->device != TN_HOST && k != TN_OPK_LEAF && k != TN_OPK_TRANSFER && cap > 4) { memcpy(buf, "Gpu", 3); n = 3; }
    if (d && d->label) d->label(v, buf + n, cap - n);
    else snprintf(buf + n, cap - n, "%s", d && d->name ? d->name : "?");
}

/* The concrete type of an external array under a var's static type: sizes
   from the array; broadcastable where static or where the size is 1. */
static tn_type tn__concrete_type(const tn_array *a, const tn_type *st) {
    tn_type t = tn__type_of_array(a);
    for (int d = 0; d < t.ndim; d++) t.bcast[d] = (d < st->ndim && st->bcast[d]) || t.shape[d] == 1;
    return t;
}

/* Free buffers wait in a pool (indices into phys); a step takes the smallest
   one that fits, else a new buffer joins the plan. */
static int tn__phys_get(tn_func *f, size_t bytes, int device) {
    int best = -1;
    for (int k = 0; k < f->n_pool; k++) {
        const tn__phys *p = &f->phys[f->pool[k]];
        if (p->device == device && p->cap >= bytes && (best < 0 || p->cap < f->phys[f->pool[best]].cap)) best = k;
    }
    if (best >= 0) {
        int ph = f->pool[best];
        f->pool[best] = f->pool[--f->n_pool];
        f->phys[ph].in_pool = false;
        return ph;
    }
    if (f->n_phys == f->cap_phys) {
        int cap = f->cap_phys ? 2 * f->cap_phys : 16;
        tn__phys *n = (tn__phys *)tn__realloc(f->phys, (size_t)cap * sizeof *n);
        int *pool = (int *)tn__realloc(f->pool, (size_t)cap * sizeof *pool);
        if (n) f->phys = n;
        if (pool) f->pool = pool;
        if (!n || !pool) return -1;
        f->cap_phys = cap;
    }
    tn__phys *p = &f->phys[f->n_phys];
    memset(p, 0, sizeof *p);
    p->cap = bytes;
    p->device = device;
    return f->n_phys++;
}

static void tn__phys_to_pool(tn_func *f, int ph) {
    tn__phys *p = &f->phys[ph];
    if (p->in_pool || p->pinned || p->pending > 0) return;
    p->in_pool = true;
    f->pool[f->n_pool++] = ph;
}

static void tn__phys_drop_reader(tn_func *f, int ph, bool gc) {
    if (ph < 0) return;
    f->phys[ph].pending--;
    if (gc) tn__phys_to_pool(f, ph);
}

/* May output 0 of step st overwrite the buffer of input k? Only when this
   step is the last reader of an internal, unaliased buffer of the same type. */
static bool tn__inplace_ok(tn_func *f, const tn__step *st, int k, const tn_type *ot) {
    if (k < 0 || k >= st->n_in) return false;
    int si = st->in_slot[k];
    const tn__slot *s = &f->slots[si];
    if (s->kind != TN__SLOT_INTERNAL || s->view_of >= 0 || s->phys < 0) return false;
    const tn__phys *p = &f->phys[s->phys];
    if (p->pinned || p->device != st->node->device) return false;
    long uses = 0;
    for (int i = 0; i < st->n_in; i++) if (f->slots[st->in_slot[i]].phys == s->phys) uses++;
    if (p->pending != uses) return false;
    if (s->ct.dtype != ot->dtype || s->ct.ndim != ot->ndim) return false;
    for (int d = 0; d < ot->ndim; d++) if (s->ct.shape[d] != ot->shape[d]) return false;
    return true;
}

/* Shapes of every intermediate from the current inputs, then buffers. */
static tn_result tn__plan(tn_func *f) {
    const char *W = f->name;
    tn__plan_release(f);
    bool gc = tn_get_config()->allow_gc;
    tn_type stack_types[16];
    tn_type *types = stack_types;
    if (f->max_args > 16 && !(types = (tn_type *)tn__malloc((size_t)f->max_args * sizeof *types)))
        return tn__err(TN_ERR_OOM, "%s: out of memory", W);
    tn_result r = TN_OK;
    for (int s = 0; s < f->n_slots; s++) {
        tn__slot *sl = &f->slots[s];
        sl->phys = -1;
        if (sl->kind != TN__SLOT_INTERNAL) sl->ct = tn__concrete_type(f->slotp[s], &sl->var->type);
    }
    for (int k = 0; k < f->n_steps; k++) {
        tn__step *st = &f->steps[k];
        tn_var *v = st->node;
        for (int i = 0; i < st->n_in; i++) types[i] = f->slots[st->in_slot[i]].ct;
        tn_type *outs = types + st->n_in;
        memset(outs, 0, (size_t)st->n_out * sizeof *outs);
        char lb[256];
        if ((r = tn__infer_outputs(v, types, outs)) != TN_OK) {
            tn__node_label(v, lb, sizeof lb);
            r = tn__err(r, "%s: %s: %s", W, lb, tn_last_error());
            goto fail;
        }
        for (int o = 0; o < st->n_out; o++) {
            tn__slot *sl = &f->slots[st->out_slot + o];
            const tn_type *stat = o == 0 ? &v->type : NULL;
            if (stat) {
                bool bad = outs[o].dtype != stat->dtype || outs[o].ndim != stat->ndim;
                for (int d = 0; !bad && d < stat->ndim; d++) bad = stat->shape[d] >= 0 && stat->shape[d] != outs[o].shape[d];
                if (bad) {
                    char a[160], b[160];
                    tn__node_label(v, lb, sizeof lb);
                    r = tn__err(TN_ERR_SHAPE, "%s: %s computes %s where the graph promised %s", W, lb,
                                tn__type_str(&outs[o], a), tn__type_str(stat, b));
                    goto fail;
                }
            }
            for (int d = 0; d < outs[o].ndim; d++)
                if (outs[o].shape[d] < 0) {
                    tn__node_label(v, lb, sizeof lb);
                    r = tn__err(TN_ERR_INTERNAL, "%s: %s left dim %d unknown at call time", W, lb, d);
                    goto fail;
                }
            sl->ct = outs[o];
        }
        /* buffers: outputs first (an input's buffer is free only after the step ran) */
        for (int o = 0; o < st->n_out; o++) {
            int s = st->out_slot + o;
            tn__slot *sl = &f->slots[s];
            int ph;
            if (st->view && o == 0) ph = f->slots[sl->view_of].phys;
            else if (o == 0 && v->inplace > 0 && tn__inplace_ok(f, st, v->inplace - 1, &sl->ct))
                ph = f->slots[st->in_slot[v->inplace - 1]].phys;
            else if ((ph = tn__phys_get(f, tn__type_bytes(&sl->ct), v->device)) < 0) {
                r = tn__err(TN_ERR_OOM, "%s: out of memory", W);
                goto fail;
            }
            sl->phys = ph;
            if (ph >= 0) {
                f->phys[ph].pending += sl->nreaders;
                if (sl->pinned) f->phys[ph].pinned = true;
            }
        }
        for (int i = 0; i < st->n_in; i++) tn__phys_drop_reader(f, f->slots[st->in_slot[i]].phys, gc);
        for (int o = 0; o < st->n_out; o++) {      /* outputs nobody reads */
            tn__slot *sl = &f->slots[st->out_slot + o];
            if (sl->phys >= 0 && sl->nreaders == 0 && !st->view && gc) tn__phys_to_pool(f, sl->phys);
        }
    }
    for (int i = 0; i < f->n_phys; i++) {
        tn__phys *p = &f->phys[i];
        int64_t n = (int64_t)p->cap;
        tn_array *a = tn__array_alloc(TN_BOOL, 1, &n, p->device);
        if (!a) { r = tn__err(TN_ERR_OOM, "%s: out of memory for intermediate buffers: %s", W, tn_last_error()); goto fail; }
        p->base = a->base;
        p->data = a->data;
        tn__buffer_retain(p->base);
        tn_array_free(a);
    }
    for (int s = 0; s < f->n_slots; s++) {
        tn__slot *sl = &f->slots[s];
        if (sl->kind != TN__SLOT_INTERNAL) continue;
        tn_array *a = &sl->arr;
        memset(a, 0, sizeof *a);
        a->dtype = sl->ct.dtype;
        a->ndim = sl->ct.ndim;
        for (int d = 0; d < a->ndim; d++) a->shape[d] = sl->ct.shape[d];
        tn__contiguous_strides(a->dtype, a->ndim, a->shape, a->strides);
        a->device = sl->var->device;
    }
    if (types != stack_types) tn__free(types);
    f->planned = true;
    return TN_OK;
fail:
    if (types != stack_types) tn__free(types);
    tn__plan_release(f);
    return r;
}

/* Checks one input against its static type; messages name the function,
   the input and both shapes. */
static tn_result tn__check_input(const tn_func *f, int i, const tn_array *a) {
    const char *W = f->name, *nm = f->in_name[i];
    const tn_type *t = &f->in_type[i];
    char want[160], got[128];
    if (!a) return tn__err(TN_ERR_NULL, "%s: input %d ('%s') is NULL", W, i, nm);
    if (a->live_gen && a->gen != *a->live_gen)
        return tn__err(TN_ERR_STALE, "%s: input %d ('%s') is a stale borrowed array (from call %llu; its function is now at call %llu)",
                       W, i, nm, (unsigned long long)a->gen, (unsigned long long)*a->live_gen);
    if (a->dtype != t->dtype || a->ndim != t->ndim) {
        tn__shape_str(a->ndim, a->shape, got);
        return tn__err(a->dtype != t->dtype ? TN_ERR_DTYPE : TN_ERR_SHAPE,
                       "%s: input %d ('%s') expects %s but got a %s array of %d dims %s", W, i, nm,
                       tn__type_str(t, want), tn_dtype_name(a->dtype), a->ndim, got);
    }
    for (int d = 0; d < t->ndim; d++) {
        if ((t->bcast[d] && a->shape[d] != 1) || (t->shape[d] >= 0 && a->shape[d] != t->shape[d])) {
            tn__shape_str(a->ndim, a->shape, got);
            return tn__err(TN_ERR_SHAPE, "%s: input %d ('%s') expects shape %s but got %s (dim %d is %lld, must be %lld%s)",
                           W, i, nm, tn__shape_str(t->ndim, t->shape, want), got, d, (long long)a->shape[d],
                           (long long)(t->bcast[d] ? 1 : t->shape[d]), t->bcast[d] ? ": broadcastable" : "");
        }
    }
    if (a->ndim > 0 && !a->data && tn_array_size(a) > 0) return tn__err(TN_ERR_NULL, "%s: input %d ('%s') has no data", W, i, nm);
    return TN_OK;
}

/* True when an external array's shape differs from the one the plan used. */
static bool tn__shapes_changed(tn_func *f) {
    bool changed = !f->planned;
    for (int e = 0; e < f->n_ext; e++) {
        const tn_array *a = f->slotp[f->ext_slots[e]];
        int64_t *c = f->cache + (size_t)e * (1 + TN_MAX_DIMS);
        if (c[0] != a->ndim) { changed = true; c[0] = a->ndim; }
        for (int d = 0; d < a->ndim; d++)
            if (c[1 + d] != a->shape[d]) { changed = true; c[1 + d] = a->shape[d]; }
    }
    return changed;
}

static tn_result tn__run_steps(tn_func *f) {
    for (int k = 0; k < f->n_steps; k++) {
        tn__step *st = &f->steps[k];
        tn_array **in = f->args, **out = f->args + st->n_in;
        for (int i = 0; i < st->n_in; i++) in[i] = f->slotp[st->in_slot[i]];
        for (int o = 0; o < st->n_out; o++) {
            tn__slot *sl = &f->slots[st->out_slot + o];
            tn_array *a = &sl->arr;
            if (st->view && o == 0) {
                /* aliases the input, wherever it lives this call; the kernel sets data and strides */
                a->base = in[0]->base;
                a->data = in[0]->data;
                a->device = in[0]->device;
                tn__contiguous_strides(a->dtype, a->ndim, a->shape, a->strides);
            } else {
                a->base = f->phys[sl->phys].base;
                a->data = f->phys[sl->phys].data;
            }
            out[o] = a;
        }
        tn_var *v = st->node;
        double t0 = f->prof ? tn__prof_now() : 0;
        tn_result r = v->device != TN_HOST && f->backend && f->backend->run
                    ? f->backend->run(v, st->bstate, in, out)
                    : st->def->cpu(v, in, out);
        if (f->prof) tn__prof_step(f, k, t0);
        if (r != TN_OK) {
            char lb[256];
            tn__node_label(v, lb, sizeof lb);
            return tn__err(r, "%s: %s (step %d of %d): %s", f->name, lb, k, f->n_steps, tn_last_error());
        }
    }
    /* Device work stays queued: HostFromGpu waits for the stream itself, and
       device outputs and updates are ordered on it. The profiler waits to time. */
    if (f->prof && f->backend && f->backend->synchronize) {
        for (int k = 0; k < f->n_steps; k++)
            if (f->steps[k].node->device != TN_HOST) return f->backend->synchronize();
    }
    return TN_OK;
}

/* The shared value can take the update's buffer, and give its own buffer
   (big enough for the plan) to the function in exchange. */
static bool tn__can_swap(const tn_func *f, int u) {
    if (!f->upd_swappable[u]) return false;
    const tn__slot *sl = &f->slots[f->upd_slot[u]];
    const tn_array *S = f->upd_user[u]->value;
    const tn__phys *p = &f->phys[sl->phys];
    return S && S->base && S->base->owns && S->live_gen == NULL && S->device == p->device &&
           S->data == S->base->data && S->base->bytes >= p->cap && tn_array_is_contiguous(S);
}

static tn_result tn__retire(tn_func *f, tn_array *a) {
    if (f->n_retired == f->cap_retired) {
        int cap = f->cap_retired ? 2 * f->cap_retired : 8;
        tn_array **n = (tn_array **)tn__realloc(f->retired, (size_t)cap * sizeof *n);
        if (!n) return TN_ERR_OOM;
        f->retired = n; f->cap_retired = cap;
    }
    f->retired[f->n_retired++] = a;
    return TN_OK;
}

/* Every new value is ready before the first shared variable changes. */
static tn_result tn__apply_updates(tn_func *f) {
    int nu = f->n_updates;
    if (nu == 0) return TN_OK;
    if (f->cap_retired < nu) {
        tn_array **n = (tn_array **)tn__realloc(f->retired, (size_t)nu * sizeof *n);
        if (!n) return tn__err(TN_ERR_OOM, "%s: out of memory for updates", f->name);
        f->retired = n; f->cap_retired = nu;
    }
    for (int u = 0; u < nu; u++) {
        f->upd_new[u] = NULL;
        if (tn__can_swap(f, u)) continue;
        const tn_array *S = f->upd_user[u]->value;        /* the copy goes where the variable lives */
        if (!(f->upd_new[u] = tn__copy_on(f->slotp[f->upd_slot[u]], S ? S->device : TN_HOST))) {
            for (int j = 0; j < u; j++) { tn_array_free(f->upd_new[j]); f->upd_new[j] = NULL; }
            return tn__err(TN_ERR_OOM, "%s: out of memory for update %d ('%s')", f->name, u, tn__var_label_name(f->upd_user[u]));
        }
    }
    for (int u = 0; u < nu; u++) {
        tn_array *S = f->upd_user[u]->value;
        if (f->upd_new[u]) {
            /* swap contents so tn_shared_get pointers stay valid; the old value may
               back a borrowed output of this call: keep it until the next one */
            tn_array tmp = *S;
            *S = *f->upd_new[u];
            *f->upd_new[u] = tmp;
            f->retired[f->n_retired++] = f->upd_new[u];
            f->upd_new[u] = NULL;
            continue;
        }
        tn__slot *sl = &f->slots[f->upd_slot[u]];
        tn__phys *p = &f->phys[sl->phys];
        tn_buffer *old_base = S->base;
        void *old_data = S->data;
        *S = sl->arr;
        S->base = p->base;           /* S takes the function's reference ... */
        S->data = p->data;
        S->live_gen = NULL;
        S->gen = 0;
        p->base = old_base;          /* ... and the function takes S's */
        p->data = old_data;
    }
    return TN_OK;
}

static tn_result tn__make_outputs(tn_func *f, tn_array **outputs) {
    for (int i = 0; i < f->n_outputs; i++) {
        outputs[i] = NULL;
        if (f->out_borrow[i]) continue;
        const tn_array *o = f->slotp[f->out_slot[i]];
        tn_array *c = tn__copy_on(o, o->device);       /* a device output (tn_gpu_from_host) stays there */
        if (!c) {
            for (int j = 0; j < i; j++) { tn_array_free(outputs[j]); outputs[j] = NULL; }
            return tn__err(TN_ERR_OOM, "%s: out of memory copying output %d: %s", f->name, i, tn_last_error());
        }
        outputs[i] = c;
    }
    for (int i = 0; i < f->n_outputs; i++) {
        if (!f->out_borrow[i]) continue;
        size_t at = (size_t)i * TN__RING + (size_t)(f->gen % TN__RING);
        tn_array *b = &f->ring[at];
        *b = *f->slotp[f->out_slot[i]];
        /* an alias of a user's input or a shared value keeps that storage alive
           (the user may free the input or set the shared value) */
        tn__buffer_release(f->ring_ref[at]);
        f->ring_ref[at] = NULL;
        if (f->slots[f->out_slot[i]].phys < 0 && b->base) { tn__buffer_retain(b->base); f->ring_ref[at] = b->base; }
        b->live_gen = &f->gen;
        b->gen = f->gen;
        outputs[i] = b;
    }
    return TN_OK;
}

TN_API tn_result tn_call(tn_func *f, tn_array *const *inputs, tn_array **outputs) {
    if (!f) return tn__err(TN_ERR_NULL, "tn_call: function is NULL");
    const char *W = f->name;
    if (f->n_inputs > 0 && !inputs)
        return tn__err(TN_ERR_NUM_INPUTS, "%s: expects %d input%s but inputs is NULL", W, f->n_inputs, f->n_inputs == 1 ? "" : "s");
    if (f->n_outputs > 0 && !outputs)
        return tn__err(TN_ERR_NULL, "%s: outputs is NULL (it needs room for %d arrays)", W, f->n_outputs);
    for (int i = 0; i < f->n_inputs; i++) {
        tn_result r = tn__check_input(f, i, inputs[i]);
        if (r != TN_OK) return r;
    }
    double t_call = f->prof ? tn__prof_begin_call(f, inputs) : 0, t_run = 0;
    f->gen++;                        /* borrowed outputs of earlier calls are stale from here on */
    tn__retired_release(f);
    for (int i = 0; i < f->n_inputs; i++) f->slotp[f->in_slot[i]] = inputs[i];
    for (int s = 0; s < f->n_slots; s++)
        if (f->slots[s].kind == TN__SLOT_SHARED) f->slotp[s] = f->slots[s].user->value;
    tn_result r;
    if (tn__shapes_changed(f) && (r = tn__plan(f)) != TN_OK) return r;
    if (f->prof) t_run = tn__prof_now();
    if ((r = tn__run_steps(f)) != TN_OK) return r;
    if (f->prof) t_run = tn__prof_now() - t_run;
    if ((r = tn__make_outputs(f, outputs)) != TN_OK) return r;
    if ((r = tn__apply_updates(f)) != TN_OK) {
        for (int i = 0; i < f->n_outputs; i++) { if (!f->out_borrow[i]) tn_array_free(outputs[i]); outputs[i] = NULL; }
        return r;
    }
    if (f->prof) tn__prof_end_call(f, t_call, t_run);
    return TN_OK;
}

/* >>leaf_ops ----------------------------------------------------------- */

/* Shortest text that reads back as the same double, Python-style ("2.0"). */
static void tn__fmt_double(double v, char *buf, size_t cap) {
    if (v != v) { snprintf(buf, cap, "nan"); return; }
    if (isinf(v)) { snprintf(buf, cap, v < 0 ? "-inf" : "inf"); return; }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eni")) {
        size_t n = strlen(buf);
        if (n + 2 < cap) { buf[n] = '.'; buf[n + 1] = '0'; buf[n + 2] = 0; }
    }
}

static void tn__fmt_value(tn_dtype t, double v, char *buf, size_t cap) {
    if (tn_dtype_is_float(t)) tn__fmt_double(v, buf, cap);
    else if (t == TN_BOOL) snprintf(buf, cap, "%s", v != 0 ? "True" : "False");
    else snprintf(buf, cap, "%lld", (long long)v);
}


static tn_result tn__infer_leaf(const tn_var *node, const tn_type *in, tn_type *out) {
    (void)in;
    *out = node->type;
    return TN_OK;
}

static void tn__label_input(const tn_var *node, char *buf, size_t cap) {
    char tb[160];
    if (node->name) snprintf(buf, cap, "%s", node->name);
    else snprintf(buf, cap, "<%s>", tn__type_str(&node->type, tb));
}

/* Theano's TensorConstant{2.0}, TensorConstant{(3,) of 1.0}, TensorConstant{[1. 2.]} */
static void tn__label_constant(const tn_var *node, char *buf, size_t cap) {
    const tn_array *a = node->value;
    if (!a) { snprintf(buf, cap, "TensorConstant{?}"); return; }
    int64_t n = tn_array_size(a);
    char vb[64], sb[128];
    int64_t idx[TN_MAX_DIMS] = { 0 };
    double first = n > 0 ? tn_array_get(a, idx) : 0.0;
    if (n == 1 && a->ndim == 0) {
        tn__fmt_value(a->dtype, first, vb, sizeof vb);
        snprintf(buf, cap, "TensorConstant{%s}", vb);
        return;
    }
    bool same = n > 0;
    for (int64_t k = 1; same && k < n; k++) {
        int64_t r = k;
        for (int d = a->ndim - 1; d >= 0; d--) { idx[d] = r % a->shape[d]; r /= a->shape[d]; }
        double x = tn_array_get(a, idx);
        same = x == first || (x != x && first != first);
    }
    if (same) {
        tn__fmt_value(a->dtype, first, vb, sizeof vb);
        snprintf(buf, cap, "TensorConstant{%s of %s}", tn__shape_str(a->ndim, a->shape, sb), vb);
    } else if (n <= 10) {
        int k = snprintf(buf, cap, "TensorConstant{");
        if (k > 0 && (size_t)k < cap) {
            int w = tn_array_snprint(a, buf + k, cap - (size_t)k);
            size_t len = strlen(buf);
            if (w >= 0 && len + 2 <= cap) { buf[len] = '}'; buf[len + 1] = 0; }
        }
    } else {
        snprintf(buf, cap, "TensorConstant{%s of %s}", tn__shape_str(a->ndim, a->shape, sb), tn_dtype_name(a->dtype));
    }
}

static tn_result tn__infer_proj(const tn_var *node, const tn_type *in, tn_type *out) {
    (void)in;
    const tn_var *src = node->in[0];
    int k = (int)node->p.i[0];
    if (k < 0 || k >= src->n_out) return tn__err(TN_ERR_INVALID, "PROJ: output %d of a node with %d outputs", k, src->n_out);
    if (src->n_out == 1) { *out = src->type; return TN_OK; }
    /* build time only: the executor never calls PROJ's rule (it reads its source's outputs) */
    tn_type *buf = (tn_type *)tn__malloc((size_t)(src->n_in + src->n_out) * sizeof *buf);
    if (!buf) return tn__err(TN_ERR_OOM, "PROJ: out of memory");
    for (int i = 0; i < src->n_in; i++) buf[i] = src->in[i]->type;
    tn_result r = tn__infer_outputs(src, buf, buf + src->n_in);
    if (r == TN_OK) *out = buf[src->n_in + k];
    tn__free(buf);
    return r;
}

static void tn__label_proj(const tn_var *node, char *buf, size_t cap) {
    char inner[256];
    const tn_op_def *d = tn__op_def(node->in[0]->op);
    if (d && d->label) d->label(node->in[0], inner, sizeof inner);
    else snprintf(inner, sizeof inner, "%s", d && d->name ? d->name : "?");
    snprintf(buf, cap, "%s.%d", inner, (int)node->p.i[0]);
}

TN_API tn_result tn_call_n(tn_func *f, int n_inputs, tn_array *const *inputs, int n_outputs, tn_array **outputs) {
    if (!f) return tn__err(TN_ERR_NULL, "tn_call: function is NULL");
    if (n_inputs != f->n_inputs) {
        char names[256];
        size_t k = 0;
        names[0] = 0;
        for (int i = 0; i < f->n_inputs && k < sizeof names - 8; i++)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s'%s'", i ? ", " : "", f->in_name[i]);
        return tn__err(TN_ERR_NUM_INPUTS, "%s: expects %d input%s (%s) but got %d", f->name, f->n_inputs,
                       f->n_inputs == 1 ? "" : "s", names, n_inputs);
    }
    if (n_outputs != f->n_outputs)
        return tn__err(TN_ERR_NUM_INPUTS, "%s: returns %d output%s but the caller has room for %d", f->name, f->n_outputs,
                       f->n_outputs == 1 ? "" : "s", n_outputs);
    return tn_call(f, inputs, outputs);
}

/* >>debugprint --------------------------------------------------------- */

/* Theano's ids: A..Z, then BA, BB, ... (base 26, A is 0). */
static void tn__id_str(int n, char *buf) {
    char tmp[16];
    int k = 0;
    do { tmp[k++] = (char)('A' + n % 26); n /= 26; } while (n > 0);
    for (int i = 0; i < k; i++) buf[i] = tmp[k - 1 - i];
    buf[k] = 0;
}

typedef struct tn__printer {
    FILE *out;
    int *ids;            /* by var id: print id, or -1 */
    int next_id;
    const int *topo;     /* by var id: step index, or -1 (functions only) */
    int nvars;
    char *prefix;
    size_t cap;
} tn__printer;

static bool tn__is_apply(const tn_var *v) { return tn__op_kind(v->op) != TN_OPK_LEAF; }

/* children as printed: a PROJ shows its source's inputs */
static int tn__print_nchildren(const tn_var *v) {
    if (v->op == TN_OP_PROJ && v->n_in == 1) return v->in[0]->n_in;
    return tn__is_apply(v) ? v->n_in : 0;
}
static tn_var *tn__print_child(const tn_var *v, int i) {
    return v->op == TN_OP_PROJ ? v->in[0]->in[i] : v->in[i];
}

/* Prints one line; returns whether the var's inputs should follow. */
static bool tn__print_line(tn__printer *pr, const tn_var *v, size_t plen, bool child) {
    char lb[512], idb[16], tb[160];
    tn__node_label(v, lb, sizeof lb);
    bool first = v->id >= 0 && v->id < pr->nvars && pr->ids[v->id] < 0;
    if (first) pr->ids[v->id] = pr->next_id++;
    tn__id_str(v->id >= 0 && v->id < pr->nvars ? pr->ids[v->id] : 0, idb);
    fprintf(pr->out, "%.*s%s%s [id %s] <%s>", (int)plen, pr->prefix, child ? " |" : "", lb, idb, tn__type_str(&v->type, tb));
    if (tn__is_apply(v)) {
        fprintf(pr->out, " '%s'   ", v->name ? v->name : "");
        if (pr->topo) {
            const tn_var *src = v->op == TN_OP_PROJ ? v->in[0] : v;
            if (src->id >= 0 && src->id < pr->nvars && pr->topo[src->id] >= 0) fprintf(pr->out, "%d", pr->topo[src->id]);
        }
    }
    fputc('\n', pr->out);
    return first && tn__print_nchildren(v) > 0;
}

static bool tn__prefix_reserve(tn__printer *pr, size_t n) {
    if (n <= pr->cap) return true;
    size_t cap = pr->cap ? pr->cap * 2 : 256;
    while (cap < n) cap *= 2;
    char *b = (char *)tn__realloc(pr->prefix, cap);
    if (!b) return false;
    pr->prefix = b; pr->cap = cap;
    return true;
}

/* One tree, iteratively (graphs may be deep). */
static tn_result tn__print_tree(tn__printer *pr, const tn_var *root) {
    struct tn__pframe { const tn_var *v; int next; size_t plen; } *stack = NULL;
    int sp = 0, cap = 0;
    if (!tn__print_line(pr, root, 0, false)) return TN_OK;
    cap = 64;
    if (!(stack = (struct tn__pframe *)tn__malloc((size_t)cap * sizeof *stack))) return tn__err(TN_ERR_OOM, "tn_debugprint: out of memory");
    stack[sp++] = (struct tn__pframe){ root, 0, 0 };
    while (sp > 0) {
        struct tn__pframe *fr = &stack[sp - 1];
        int n = tn__print_nchildren(fr->v);
        if (fr->next >= n) { sp--; continue; }
        int i = fr->next++;
        const tn_var *c = tn__print_child(fr->v, i);
        size_t plen = fr->plen;
        if (!c) { fprintf(pr->out, "%.*s |NULL\n", (int)plen, pr->prefix); continue; }
        if (!tn__print_line(pr, c, plen, true)) continue;
        if (!tn__prefix_reserve(pr, plen + 3)) { tn__free(stack); return tn__err(TN_ERR_OOM, "tn_debugprint: out of memory"); }
        memcpy(pr->prefix + plen, i == n - 1 ? "  " : " |", 2);
        if (sp == cap) {
            struct tn__pframe *ns = (struct tn__pframe *)tn__realloc(stack, (size_t)cap * 2 * sizeof *stack);
            if (!ns) { tn__free(stack); return tn__err(TN_ERR_OOM, "tn_debugprint: out of memory"); }
            stack = ns; cap *= 2;
        }
        stack[sp++] = (struct tn__pframe){ c, 0, plen + 2 };
    }
    tn__free(stack);
    return TN_OK;
}

static tn_result tn__printer_init(tn__printer *pr, FILE *out, int nvars) {
    memset(pr, 0, sizeof *pr);
    pr->out = out;
    pr->nvars = nvars;
    pr->ids = (int *)tn__malloc(((size_t)nvars + 1) * sizeof *pr->ids);
    if (!pr->ids || !tn__prefix_reserve(pr, 256)) { tn__free(pr->ids); tn__free(pr->prefix); return tn__err(TN_ERR_OOM, "tn_debugprint: out of memory"); }
    for (int i = 0; i < nvars; i++) pr->ids[i] = -1;
    return TN_OK;
}

static void tn__printer_free(tn__printer *pr) { tn__free(pr->ids); tn__free(pr->prefix); }

TN_API tn_result tn_debugprint(const tn_var *v, FILE *out) {
    if (!v) return tn__err(TN_ERR_NULL, "tn_debugprint: variable is NULL");
    if (!out) return tn__err(TN_ERR_NULL, "tn_debugprint: out is NULL");
    tn__printer pr;
    tn_result r = tn__printer_init(&pr, out, v->graph ? v->graph->nvars : 0);
    if (r != TN_OK) return r;
    r = tn__print_tree(&pr, v);
    tn__printer_free(&pr);
    return r;
}

TN_API tn_result tn_debugprint_function(const tn_func *f, FILE *out) {
    if (!f) return tn__err(TN_ERR_NULL, "tn_debugprint_function: function is NULL");
    if (!out) return tn__err(TN_ERR_NULL, "tn_debugprint_function: out is NULL");
    tn__printer pr;
    int nv = f->fg->nvars;
    tn_result r = tn__printer_init(&pr, out, nv);
    if (r != TN_OK) return r;
    int *topo = (int *)tn__malloc(((size_t)nv + 1) * sizeof *topo);
    if (!topo) { tn__printer_free(&pr); return tn__err(TN_ERR_OOM, "tn_debugprint_function: out of memory"); }
    for (int i = 0; i < nv; i++) topo[i] = -1;
    for (int k = 0; k < f->n_steps; k++) topo[f->steps[k].node->id] = k;
    pr.topo = topo;
    for (int i = 0; i < f->n_roots && r == TN_OK; i++) {
        if (i >= f->n_outputs) fprintf(out, "update of %s:\n", tn__var_label_name(f->upd_user[i - f->n_outputs]));
        r = tn__print_tree(&pr, f->roots[i]);
    }
    tn__free(topo);
    tn__printer_free(&pr);
    return r;
}

/* How an input reads in an apply's text: name, constant, or producer.k */
static void tn__apply_arg_str(const tn_var *v, char *buf, size_t cap) {
    if (v->name) { snprintf(buf, cap, "%s", v->name); return; }
    tn__node_label(v, buf, cap);
    if (tn__is_apply(v) && v->op != TN_OP_PROJ) {
        size_t n = strlen(buf);
        if (n + 3 < cap) memcpy(buf + n, ".0", 3);
    }
}

TN_API tn_result tn_print_toposort(const tn_func *f, FILE *out) {
    if (!f) return tn__err(TN_ERR_NULL, "tn_print_toposort: function is NULL");
    if (!out) return tn__err(TN_ERR_NULL, "tn_print_toposort: out is NULL");
    char lb[512], ab[512];
    for (int k = 0; k < f->n_steps; k++) {
        const tn_var *v = f->steps[k].node;
        tn__node_label(v, lb, sizeof lb);
        fprintf(out, "%s(", lb);
        for (int i = 0; i < v->n_in; i++) {
            tn__apply_arg_str(v->in[i], ab, sizeof ab);
            fprintf(out, "%s%s", i ? ", " : "", ab);
        }
        fputs(")\n", out);
    }
    return TN_OK;
}

/* >>registry: fills this part's rows of the op table */
static void tn__register_graph_ops(tn_op_def *t) {
    t[TN_OP_INPUT] = (tn_op_def){ "Input", TN_OPK_LEAF, 0, tn__infer_leaf, NULL, tn__label_input };
    t[TN_OP_CONSTANT] = (tn_op_def){ "Constant", TN_OPK_LEAF, 0, tn__infer_leaf, NULL, tn__label_constant };
    t[TN_OP_SHARED] = (tn_op_def){ "Shared", TN_OPK_LEAF, 0, tn__infer_leaf, NULL, tn__label_input };
    t[TN_OP_PROJ] = (tn_op_def){ "Proj", TN_OPK_OTHER, 1, tn__infer_proj, NULL, tn__label_proj };
}
