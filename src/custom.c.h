/* >>custom: user ops, CPU side. A CUSTOM node's ext is an arena copy of the
   user's tn_custom_op (strings copied too), so the user's description may be
   a stack temporary. The GPU side (NVRTC compile and launch of cuda_source)
   is src/cuda_custom.c.h, included by tensor_cuda.h. */

#define TN__CUSTOM_WHY 512

static const tn_custom_op *tn__custom_op(const tn_var *node) {
    return node && node->op == TN_OP_CUSTOM ? (const tn_custom_op *)node->ext : NULL;
}

TN_API const tn_custom_op *tn_custom_of(const tn_var *node) { return tn__custom_op(node); }

static int tn__custom_nout(const tn_custom_op *op) { return op->n_outputs > 0 ? op->n_outputs : 1; }

static tn_result tn__custom_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    const tn_custom_op *op = tn__custom_op(node);
    if (!op) return tn__err(TN_ERR_INTERNAL, "tn_custom: node %d carries no op description", node->id);
    char why[TN__CUSTOM_WHY] = "";
    int nout = tn__custom_nout(op);
    for (int k = 0; k < nout; k++) out[k] = (tn_type){ TN_DTYPE_NONE, 0, {0}, {0} };
    tn_result r = op->infer(op, in, out, why, sizeof why);
    if (r != TN_OK)
        return tn__err(r, "tn_custom: op '%s': type rule failed: %s", op->name, why[0] ? why : tn_result_string(r));
    for (int k = 0; k < nout; k++) {
        const tn_type *t = &out[k];
        if (t->dtype <= TN_DTYPE_NONE || t->dtype >= TN_DTYPE_COUNT || t->ndim < 0 || t->ndim > TN_MAX_DIMS)
            return tn__err(TN_ERR_INVALID, "tn_custom: op '%s': type rule gave output %d an invalid type (dtype %d, ndim %d)",
                           op->name, k, (int)t->dtype, t->ndim);
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < -1)
                return tn__err(TN_ERR_INVALID, "tn_custom: op '%s': type rule gave output %d dim %d the size %lld",
                               op->name, k, d, (long long)t->shape[d]);
    }
    return TN_OK;
}

/* Inputs a user function reads are contiguous host arrays: strided views are
   copied first (only then does a call allocate). */
static tn_result tn__custom_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_custom_op *op = tn__custom_op(node);
    if (!op) return tn__err(TN_ERR_INTERNAL, "tn_custom: node %d carries no op description", node->id);
    if (!op->cpu)
        return tn__err(TN_ERR_UNSUPPORTED, "tn_custom: op '%s' has no CPU function (cpu is NULL) and no GPU is in use", op->name);
    tn_array *stack_in[8], **cin = stack_in, *copies[8] = {0}, **cp = copies;
    int n = node->n_in;
    if (n > 8) {
        cin = (tn_array **)tn__calloc((size_t)n, sizeof *cin);
        cp = (tn_array **)tn__calloc((size_t)n, sizeof *cp);
        if (!cin || !cp) { tn__free(cin); tn__free(cp); return tn__err(TN_ERR_OOM, "tn_custom: op '%s': out of memory", op->name); }
    }
    tn_result r = TN_OK;
    for (int i = 0; i < n && r == TN_OK; i++) {
        cin[i] = in[i];
        if (in[i]->device != TN_HOST || !tn_array_is_contiguous(in[i])) {
            if (!(cp[i] = tn_array_copy(in[i]))) r = tn__err(TN_ERR_OOM, "tn_custom: op '%s': copying input %d: %s", op->name, i, tn_last_error());
            cin[i] = cp[i];
        }
    }
    if (r == TN_OK) {
        char why[TN__CUSTOM_WHY] = "";
        r = op->cpu(op, cin, out, why, sizeof why);
        if (r != TN_OK) r = tn__err(r, "tn_custom: op '%s': CPU function failed: %s", op->name, why[0] ? why : tn_result_string(r));
    }
    for (int i = 0; i < n; i++) tn_array_free(cp[i]);
    if (cin != stack_in) { tn__free(cin); tn__free(cp); }
    return r;
}

static void tn__custom_label(const tn_var *node, char *buf, size_t cap) {
    const tn_custom_op *op = tn__custom_op(node);
    snprintf(buf, cap, "Custom{%s}", op && op->name ? op->name : "?");
}

/* Arena copy of the description: the user's may be a temporary. */
static tn_custom_op *tn__custom_copy(tn_graph *g, const tn_custom_op *op) {
    tn_custom_op *c = (tn_custom_op *)tn__graph_alloc(g, sizeof *c);
    if (!c) return NULL;
    *c = *op;
    if (!(c->name = tn__graph_strdup(g, op->name))) return NULL;
    if (op->cuda_source && !(c->cuda_source = tn__graph_strdup(g, op->cuda_source))) return NULL;
    if (op->cuda_kernel && !(c->cuda_kernel = tn__graph_strdup(g, op->cuda_kernel))) return NULL;
    return c;
}

TN_API tn_result tn_custom_multi(tn_graph *g, const tn_custom_op *op, int n, tn_var *const *in, tn_var **outs) {
    const char *W = "tn_custom";
    if (!op) return tn__err(TN_ERR_NULL, "%s: op is NULL", W);
    if (!outs) return tn__err(TN_ERR_NULL, "%s: op '%s': outs is NULL", W, op->name ? op->name : "?");
    if (!op->name || !op->name[0]) return tn__err(TN_ERR_INVALID, "%s: op has no name", W);
    if (!op->infer) return tn__err(TN_ERR_NULL, "%s: op '%s' has no type rule (infer is NULL)", W, op->name);
    if (!op->cpu && !(op->cuda_source && op->cuda_kernel))
        return tn__err(TN_ERR_INVALID, "%s: op '%s' has neither a CPU function nor CUDA source and kernel name", W, op->name);
    if ((op->cuda_source == NULL) != (op->cuda_kernel == NULL))
        return tn__err(TN_ERR_INVALID, "%s: op '%s': cuda_source and cuda_kernel go together", W, op->name);
    if (n < 0 || (n > 0 && !in)) return tn__err(TN_ERR_NULL, "%s: op '%s': inputs are NULL", W, op->name);
    if (op->n_inputs >= 0 && n != op->n_inputs)
        return tn__err(TN_ERR_NUM_INPUTS, "%s: op '%s' takes %d input%s, got %d", W, op->name, op->n_inputs, op->n_inputs == 1 ? "" : "s", n);
    if (op->n_outputs < 0) return tn__err(TN_ERR_INVALID, "%s: op '%s': n_outputs is %d", W, op->name, op->n_outputs);
    for (int i = 0; i < n; i++)
        if (!in[i]) return tn__err(TN_ERR_NULL, "%s: op '%s': input %d is NULL (did an earlier call fail? %s)", W, op->name, i, tn_last_error());
    if (!g) g = n > 0 ? in[0]->graph : NULL;
    if (!g) return tn__err(TN_ERR_NULL, "%s: op '%s' has no inputs: pass its graph", W, op->name);
    tn_custom_op *c = tn__custom_copy(g, op);
    if (!c) return tn__err(TN_ERR_OOM, "%s: op '%s': out of memory", W, op->name);
    int nout = tn__custom_nout(op);
    tn_var *v = tn__node_multi(g, TN_OP_CUSTOM, n, in, NULL, c, nout, W);
    if (!v) return tn_last_result();
    if (nout == 1) { outs[0] = v; return TN_OK; }
    for (int k = 0; k < nout; k++)
        if (!(outs[k] = tn__proj(v, k))) return tn_last_result();
    return TN_OK;
}

TN_API tn_var *tn_custom(tn_graph *g, const tn_custom_op *op, int n, tn_var *const *in) {
    if (op && op->n_outputs > 1) {
        tn__err(TN_ERR_INVALID, "tn_custom: op '%s' has %d outputs: use tn_custom_multi", op->name ? op->name : "?", op->n_outputs);
        return NULL;
    }
    tn_var *out = NULL;
    return tn_custom_multi(g, op, n, in, &out) == TN_OK ? out : NULL;
}

/* >>registry: fills this part's rows of the op table */
static void tn__register_custom_ops(tn_op_def *t) {
    t[TN_OP_CUSTOM] = (tn_op_def){ "Custom", TN_OPK_OTHER, -1, tn__custom_infer, tn__custom_cpu, tn__custom_label };
}
