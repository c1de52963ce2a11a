/* >>dot: Graphviz pictures of graphs, as Theano's pydotprint.
   Variables are ellipses (inputs blue, shared variables green, constants
   grey, function outputs white; after a call, with the shapes of that call); ops are boxes (white on the CPU, green on a
   GPU, red for host <-> device transfers); a fused Composite, or a reduction
   with a fused prologue, is a box that lists its scalar program. Edges carry the dtype and shape of the value
   they hold: the call-time shape once the function has run, else the static
   one ("?" where unknown). Render with: dot -Tpng f.dot -o f.png */

/* Writes s as the inside of a DOT quoted string. */
static void tn__dot_str(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', out);
        if (*s == '\n') { fputs("\\n", out); continue; }
        fputc(*s, out);
    }
}

/* "float32 (400, 784)" with ? for unknown dims. */
static void tn__dot_type(const tn_type *t, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "%s (", tn_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim && k < cap; d++) {
        if (t->shape[d] >= 0) k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        else k += (size_t)snprintf(buf + k, cap - k, "%s?", d ? ", " : "");
    }
    if (k < cap) snprintf(buf + k, cap - k, "%s)", t->ndim == 1 ? "," : "");
}

typedef enum { TN__DOT_CPU = 0, TN__DOT_GPU, TN__DOT_XFER } tn__dot_where;

static tn__dot_where tn__dot_where_of(const tn_var *v, bool has_backend) {
    if (tn__op_kind(v->op) == TN_OPK_TRANSFER) return TN__DOT_XFER;
    return v->device != TN_HOST && has_backend ? TN__DOT_GPU : TN__DOT_CPU;
}

/* A Composite's scalar program, one instruction a line: "r2 = exp(r0)". */
static void tn__dot_program(FILE *out, const tn_ew_program *p) {
    for (int k = 0; k < p->n_instr; k++) {
        const tn_ew_instr *in = &p->instr[k];
        char line[160];
        if (in->op == TN_OP_CONSTANT) snprintf(line, sizeof line, "r%d = %g", p->n_in + k, in->imm);
        else {
            const tn_ew_info *e = tn__ew_info(in->op);
            int n = snprintf(line, sizeof line, "r%d = %s(r%d", p->n_in + k, e ? e->name : "?", in->a);
            if (in->b >= 0 && n > 0 && (size_t)n < sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, ", r%d", in->b);
            if (in->c >= 0 && n > 0 && (size_t)n < sizeof line) n += snprintf(line + n, sizeof line - (size_t)n, ", r%d", in->c);
            if (n > 0 && (size_t)n < sizeof line) snprintf(line + n, sizeof line - (size_t)n, ")");
        }
        tn__dot_str(out, line);
        fputs("\\l", out);
    }
    for (int o = 0; o < p->n_out; o++) fprintf(out, "out%d = r%d (%s)\\l", o, p->out_reg[o], tn_dtype_name(p->out_dtype[o]));
}

static void tn__dot_apply(FILE *out, const tn_var *v, bool has_backend, int step) {
    static const char *fill[] = { "white", "palegreen", "salmon" };
    char lb[512];
    tn__dot_where w = tn__dot_where_of(v, has_backend);
    tn__node_label(v, lb, sizeof lb);
    fprintf(out, "  n%d [shape=box, style=filled, fillcolor=%s, label=\"", v->id, fill[w]);
    if (step >= 0) fprintf(out, "%d: ", step);
    tn__dot_str(out, lb);
    if (w == TN__DOT_GPU) fputs("\\n(gpu)", out);
    if (v->op == TN_OP_COMPOSITE && v->ext) {
        fputs("\\n", out);
        tn__dot_program(out, (const tn_ew_program *)v->ext);
    } else if (tn__op_kind(v->op) == TN_OPK_REDUCE && v->ext) {   /* fused elementwise prologue */
        fputs("\\nprologue:\\l", out);
        tn__dot_program(out, (const tn_ew_program *)v->ext);
    }
    fputs("\"];\n", out);
}

static void tn__dot_leaf(FILE *out, const tn_var *v, const tn_type *t) {
    char lb[512], tb[160];
    const char *fill = v->op == TN_OP_INPUT ? "lightblue" : v->op == TN_OP_SHARED ? "darkseagreen1" : "lightgrey";
    if (v->op == TN_OP_CONSTANT) tn__node_label(v, lb, sizeof lb);
    else snprintf(lb, sizeof lb, "%s", v->name ? v->name : "?");
    tn__dot_type(t, tb, sizeof tb);
    fprintf(out, "  n%d [shape=ellipse, style=filled, fillcolor=%s, label=\"", v->id, fill);
    tn__dot_str(out, lb);
    fputs("\\n", out);
    tn__dot_str(out, tb);
    fputs("\"];\n", out);
}

/* The node an edge starts from: a PROJ's source (labelled with the output index). */
static void tn__dot_edge(FILE *out, const tn_var *from, int to_id, const tn_type *t, int arg) {
    char tb[160];
    tn__dot_type(t, tb, sizeof tb);
    const tn_var *src = from->op == TN_OP_PROJ && from->n_in == 1 ? from->in[0] : from;
    fprintf(out, "  n%d -> n%d [label=\"", src->id, to_id);
    if (src != from) fprintf(out, "out %lld: ", (long long)from->p.i[0]);
    tn__dot_str(out, tb);
    fprintf(out, "\", headlabel=\"%d\", fontsize=10];\n", arg);
}

static void tn__dot_header(FILE *out, const char *name) {
    fputs("digraph \"", out);
    tn__dot_str(out, name);
    fputs("\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=11];\n  edge [fontname=\"Helvetica\", fontsize=9];\n", out);
}

TN_API tn_result tn_write_dot(const tn_func *f, FILE *out) {
    if (!f) return tn__err(TN_ERR_NULL, "tn_write_dot: function is NULL");
    if (!out) return tn__err(TN_ERR_NULL, "tn_write_dot: out is NULL");
    int nv = f->fg->nvars;
    bool *seen = (bool *)tn__calloc((size_t)nv + 1, sizeof *seen);
    if (!seen) return tn__err(TN_ERR_OOM, "tn_write_dot: out of memory");
    bool be = f->backend != NULL;
    tn__dot_header(out, f->name);
    for (int k = 0; k < f->n_steps; k++) {
        const tn__step *st = &f->steps[k];
        const tn_var *v = st->node;
        tn__dot_apply(out, v, be, k);
        for (int i = 0; i < v->n_in; i++) {
            const tn_var *u = v->in[i];
            const tn_type *t = f->planned ? &f->slots[st->in_slot[i]].ct : &u->type;
            if (tn__op_kind(u->op) == TN_OPK_LEAF && u->id < nv && !seen[u->id]) { seen[u->id] = true; tn__dot_leaf(out, u, t); }
            tn__dot_edge(out, u, v->id, t, i);
        }
    }
    /* outputs and updates: a sink ellipse each */
    for (int r = 0; r < f->n_roots; r++) {
        const tn_var *v = f->roots[r];
        bool is_out = r < f->n_outputs;
        int slot = is_out ? f->out_slot[r] : f->upd_slot[r - f->n_outputs];
        const tn_type *t = f->planned ? &f->slots[slot].ct : &v->type;
        if (tn__op_kind(v->op) == TN_OPK_LEAF && v->id < nv && !seen[v->id]) { seen[v->id] = true; tn__dot_leaf(out, v, t); }
        fprintf(out, "  r%d [shape=ellipse, label=\"", r);
        if (is_out) fprintf(out, "output %d", r);
        else {
            fputs("update of ", out);
            tn__dot_str(out, tn__var_label_name(f->upd_user[r - f->n_outputs]));
        }
        fputs("\"];\n", out);
        char tb[160];
        tn__dot_type(t, tb, sizeof tb);
        const tn_var *src = v->op == TN_OP_PROJ && v->n_in == 1 ? v->in[0] : v;
        fprintf(out, "  n%d -> r%d [label=\"", src->id, r);
        tn__dot_str(out, tb);
        fputs("\", style=dashed];\n", out);
    }
    fputs("}\n", out);
    tn__free(seen);
    return TN_OK;
}

TN_API tn_result tn_write_dot_var(const tn_var *root, FILE *out) {
    if (!root) return tn__err(TN_ERR_NULL, "tn_write_dot_var: variable is NULL");
    if (!out) return tn__err(TN_ERR_NULL, "tn_write_dot_var: out is NULL");
    int nv = root->graph ? root->graph->nvars : root->id + 1;
    bool *seen = (bool *)tn__calloc((size_t)nv + 1, sizeof *seen);
    const tn_var **stack = (const tn_var **)tn__malloc(((size_t)nv + 1) * sizeof *stack);
    if (!seen || !stack) { tn__free(seen); tn__free((void *)stack); return tn__err(TN_ERR_OOM, "tn_write_dot_var: out of memory"); }
    tn__dot_header(out, root->name ? root->name : "graph");
    int sp = 0;
    stack[sp++] = root;
    seen[root->id] = true;
    while (sp > 0) {
        const tn_var *v = stack[--sp];
        if (v->op == TN_OP_PROJ) {                 /* drawn as its source's labelled edge */
            if (v->n_in == 1 && !seen[v->in[0]->id]) { seen[v->in[0]->id] = true; stack[sp++] = v->in[0]; }
            continue;
        }
        if (tn__op_kind(v->op) == TN_OPK_LEAF) { tn__dot_leaf(out, v, &v->type); continue; }
        tn__dot_apply(out, v, false, -1);
        for (int i = 0; i < v->n_in; i++) {
            const tn_var *u = v->in[i];
            tn__dot_edge(out, u, v->id, &u->type, i);
            if (u->id >= 0 && u->id < nv && !seen[u->id]) { seen[u->id] = true; stack[sp++] = u; }
        }
    }
    if (tn__op_kind(root->op) != TN_OPK_LEAF) {
        char tb[160];
        tn__dot_type(&root->type, tb, sizeof tb);
        fputs("  out [shape=ellipse, label=\"", out);
        tn__dot_str(out, root->name ? root->name : "output");
        fprintf(out, "\"];\n  n%d -> out [label=\"", root->op == TN_OP_PROJ && root->n_in == 1 ? root->in[0]->id : root->id);
        tn__dot_str(out, tb);
        fputs("\", style=dashed];\n", out);
    }
    fputs("}\n", out);
    tn__free(seen);
    tn__free((void *)stack);
    return TN_OK;
}
