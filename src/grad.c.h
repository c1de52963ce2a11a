/* >>grad: symbolic differentiation (tn_grad, tn_rop, tn_stop_gradient,
   tn_verify_grad).

   Reverse accumulation runs over the user's graph as built: a node's id is its
   creation index and every input is created before the node that uses it, so
   descending ids are a reverse topological order and no recursion is needed.
   Gradients are ordinary nodes recorded in the same graph with the public
   constructors, so they differentiate again (Hessian-vector products) and go
   through the optimizer like any other expression.

   Rules, stated:
   - Gradients flow through float values only. An integer or boolean value
     (comparisons, argmax, casts to int, floor/round/sign) passes a zero
     gradient; a float wrt reached only that way gets zeros, not an error.
   - max/min reductions and maximum/minimum: every position equal to the
     result gets the whole gradient (ties are not split, as in Theano).
   - prod: exact with zeros (one zero: the product of the others at the zero,
     zero elsewhere; two or more zeros: all zero).
   - Broadcasting follows the static types: a dim broadcasts when it is known
     to be 1 (bcast pattern or shape), as in Theano.
   - Shape adjoints that need sizes (reshape, flatten, slices with a step
     other than 1, concatenate) need them known at build time where the
     message says so (TN_ERR_UNSUPPORTED otherwise).                         */

#include <math.h>
#include <string.h>

/* >>grad_helpers */

static const char *tn__gname(const tn_var *v, char buf[64]) {
    if (v && v->name) return v->name;
    snprintf(buf, 64, "<unnamed var %d>", v ? v->id : -1);
    return buf;
}

/* A 0-d constant of dtype t (a weak literal cast once; folded at compile). */
static tn_var *tn__glit(tn_var *like, tn_dtype t, double v) {
    tn_var *c = tn_lit(like, v);
    return c && c->type.dtype != t ? tn_cast(c, t) : c;
}
static tn_var *tn__gzeros_like(tn_var *x) { return x ? tn_fill(x, tn__glit(x, x->type.dtype, 0.0)) : NULL; }
static tn_var *tn__gones_like(tn_var *x) { return x ? tn_fill(x, tn__glit(x, x->type.dtype, 1.0)) : NULL; }
static tn_var *tn__gmask(tn_var *cond, tn_var *g) { return tn_where(cond, g, tn_lit(g, 0.0)); }

static bool tn__gtype_same_bcast(const tn_type *a, const tn_type *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++)
        if ((a->shape[d] == 1) != (b->shape[d] == 1)) return false;
    return true;
}

/* g, of a shape that broadcasts to x's, broadcast to x's full shape. */
static tn_var *tn__gbcast_like(tn_var *g, tn_var *x) {
    if (!g || !x) return NULL;
    if (tn__gtype_same_bcast(&g->type, &x->type)) return g;
    return tn_fill(x, g);
}

/* Sums g (the gradient of a value that t broadcast into) back to type t: over
   the leading dims t lacks, and with keepdims over the dims where t is 1 and
   g is not; then casts to t's dtype. */
static tn_var *tn__sum_to(tn_var *g, const tn_type *t) {
    if (!g) return NULL;
    int lead = g->type.ndim - t->ndim, ax[TN_MAX_DIMS], na = 0;
    if (lead < 0) {   /* a smaller gradient: give it t's rank ('x' dims in front) */
        int pat[TN_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++) pat[d] = d < -lead ? -1 : d + lead;
        g = tn_dimshuffle(g, t->ndim, pat);
        if (!g) return NULL;
        lead = 0;
    }
    for (int d = 0; d < t->ndim; d++)
        if ((t->bcast[d] || t->shape[d] == 1) && g->type.shape[lead + d] != 1) ax[na++] = lead + d;
    if (na) g = tn_sum(g, ax, na, true);
    if (g && lead) {
        for (int d = 0; d < lead; d++) ax[d] = d;
        g = tn_sum(g, ax, lead, false);
    }
    if (g && g->type.dtype != t->dtype) g = tn_cast(g, t->dtype);
    return g;
}

/* Reduced axes of a reduction node (bit mask i[0]); returns their count. */
static int tn__gred_axes(const tn_var *node, int *axes) {
    int n = 0, nd = node->in[0]->type.ndim;
    for (int d = 0; d < nd; d++)
        if (((uint64_t)node->p.i[0] >> d) & 1) axes[n++] = d;
    return n;
}

/* v (a reduction's output or its gradient) with the reduced axes put back as
   broadcastable 1s, so it broadcasts against the reduction's input. */
static tn_var *tn__gkeep(tn_var *v, const tn_var *node) {
    if (!v || node->p.i[1]) return v;
    int nd = node->in[0]->type.ndim, pat[TN_MAX_DIMS], k = 0;
    for (int d = 0; d < nd; d++) pat[d] = (((uint64_t)node->p.i[0] >> d) & 1) ? -1 : k++;
    if (k == nd) return v;
    return tn_dimshuffle(v, nd, pat);
}

/* Swaps the last two axes. */
static tn_var *tn__gmT(tn_var *x) {
    if (!x) return NULL;
    int nd = x->type.ndim, pat[TN_MAX_DIMS];
    for (int d = 0; d < nd; d++) pat[d] = d;
    pat[nd - 1] = nd - 2; pat[nd - 2] = nd - 1;
    return tn_dimshuffle(x, nd, pat);
}

/* Sums away (keepdims off) one axis known to be 1. */
static tn_var *tn__gdrop(tn_var *x, int axis) { return x ? tn_sum(x, &axis, 1, false) : NULL; }

/* >>grad_ew: one chain rule per elementwise op. d(z, i, g) returns
   g * dz/d(in[i]), with g of any shape that broadcasts against z: the reverse
   mode passes z's gradient, the forward mode in[i]'s tangent. A NULL row is a
   zero derivative (discrete ops). */
typedef tn_var *(*tn__ew_chain_fn)(tn_var *z, int i, tn_var *g);

#define TN__A (z->in[0])
#define TN__B (z->in[1])
#define TN__C (z->in[2])
#define TN__L(v) tn_lit(g, (v))
static tn_var *tn__d_identity(tn_var *z, int i, tn_var *g) { (void)z; (void)i; return g; }
static tn_var *tn__d_sub(tn_var *z, int i, tn_var *g) { (void)z; return i == 0 ? g : tn_neg(g); }
static tn_var *tn__d_mul(tn_var *z, int i, tn_var *g) { return tn_mul(g, z->in[1 - i]); }
static tn_var *tn__d_true_div(tn_var *z, int i, tn_var *g) {
    return i == 0 ? tn_div(g, TN__B) : tn_neg(tn_div(tn_mul(g, z), TN__B));
}
static tn_var *tn__d_mod(tn_var *z, int i, tn_var *g) {
    return i == 0 ? g : tn_neg(tn_mul(g, tn_floor(tn_div(TN__A, TN__B))));
}
static tn_var *tn__d_pow(tn_var *z, int i, tn_var *g) {
    if (i == 0) return tn_mul(g, tn_mul(TN__B, tn_pow(TN__A, tn_sub(TN__B, TN__L(1.0)))));
    return tn_mul(g, tn_mul(z, tn_log(TN__A)));
}
static tn_var *tn__d_neg(tn_var *z, int i, tn_var *g) { (void)z; (void)i; return tn_neg(g); }
static tn_var *tn__d_abs(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_sign(TN__A)); }
static tn_var *tn__d_exp(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, z); }
static tn_var *tn__d_exp2(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_mul(z, TN__L(0.69314718055994530942))); }
static tn_var *tn__d_expm1(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_add(z, TN__L(1.0))); }
static tn_var *tn__d_log(tn_var *z, int i, tn_var *g) { (void)i; return tn_div(g, TN__A); }
static tn_var *tn__d_log2(tn_var *z, int i, tn_var *g) { (void)i; return tn_div(g, tn_mul(TN__A, TN__L(0.69314718055994530942))); }
static tn_var *tn__d_log1p(tn_var *z, int i, tn_var *g) { (void)i; return tn_div(g, tn_add(TN__A, TN__L(1.0))); }
static tn_var *tn__d_sqrt(tn_var *z, int i, tn_var *g) { (void)i; return tn_div(tn_mul(g, TN__L(0.5)), z); }
static tn_var *tn__d_rsqrt(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_mul(TN__L(-0.5), tn_div(z, TN__A))); }
static tn_var *tn__d_sqr(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_mul(TN__A, TN__L(2.0))); }
static tn_var *tn__d_reciprocal(tn_var *z, int i, tn_var *g) { (void)i; return tn_neg(tn_mul(g, tn_sqr(z))); }
static tn_var *tn__d_sin(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_cos(TN__A)); }
static tn_var *tn__d_cos(tn_var *z, int i, tn_var *g) { (void)i; return tn_neg(tn_mul(g, tn_sin(TN__A))); }
static tn_var *tn__d_tan(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_add(TN__L(1.0), tn_sqr(z))); }
static tn_var *tn__d_tanh(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_sub(TN__L(1.0), tn_sqr(z))); }
static tn_var *tn__d_sigmoid(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_mul(z, tn_sub(TN__L(1.0), z))); }
static tn_var *tn__d_softplus(tn_var *z, int i, tn_var *g) { (void)i; return tn_mul(g, tn_sigmoid(TN__A)); }
static tn_var *tn__d_erf(tn_var *z, int i, tn_var *g) {
    (void)i;   /* 2/sqrt(pi) */
    return tn_mul(g, tn_mul(TN__L(1.12837916709551257390), tn_exp(tn_neg(tn_sqr(TN__A)))));
}
/* maximum/minimum: the input equal to the result takes it (both on a tie) */
static tn_var *tn__d_minmax(tn_var *z, int i, tn_var *g) { return tn__gmask(tn_eq(z, z->in[i]), g); }
static tn_var *tn__d_clip(tn_var *z, int i, tn_var *g) {
    if (i == 0) return tn__gmask(tn_and(tn_ge(TN__A, TN__B), tn_le(TN__A, TN__C)), g);
    if (i == 1) return tn__gmask(tn_lt(TN__A, TN__B), g);
    return tn__gmask(tn_gt(TN__A, TN__C), g);
}
static tn_var *tn__d_where(tn_var *z, int i, tn_var *g) {
    if (i == 1) return tn__gmask(TN__A, g);
    return tn_where(TN__A, tn_lit(g, 0.0), g);   /* i == 2; the condition never asks */
}
#undef TN__A
#undef TN__B
#undef TN__C
#undef TN__L

static tn__ew_chain_fn tn__ew_chain(int op) {
    static const tn__ew_chain_fn t[TN_OP_CAST + 1] = {
        [TN_OP_IDENTITY] = tn__d_identity, [TN_OP_ADD] = tn__d_identity, [TN_OP_SUB] = tn__d_sub,
        [TN_OP_MUL] = tn__d_mul, [TN_OP_TRUE_DIV] = tn__d_true_div, [TN_OP_MOD] = tn__d_mod,
        [TN_OP_POW] = tn__d_pow, [TN_OP_NEG] = tn__d_neg, [TN_OP_ABS] = tn__d_abs,
        [TN_OP_EXP] = tn__d_exp, [TN_OP_EXP2] = tn__d_exp2, [TN_OP_EXPM1] = tn__d_expm1,
        [TN_OP_LOG] = tn__d_log, [TN_OP_LOG2] = tn__d_log2, [TN_OP_LOG1P] = tn__d_log1p,
        [TN_OP_SQRT] = tn__d_sqrt, [TN_OP_RSQRT] = tn__d_rsqrt, [TN_OP_SQR] = tn__d_sqr,
        [TN_OP_RECIPROCAL] = tn__d_reciprocal, [TN_OP_SIN] = tn__d_sin, [TN_OP_COS] = tn__d_cos,
        [TN_OP_TAN] = tn__d_tan, [TN_OP_TANH] = tn__d_tanh, [TN_OP_SIGMOID] = tn__d_sigmoid,
        [TN_OP_SOFTPLUS] = tn__d_softplus, [TN_OP_ERF] = tn__d_erf,
        [TN_OP_MINIMUM] = tn__d_minmax, [TN_OP_MAXIMUM] = tn__d_minmax, [TN_OP_CLIP] = tn__d_clip,
        [TN_OP_WHERE] = tn__d_where, [TN_OP_CAST] = tn__d_identity,
        /* zero: INT_DIV, SIGN, FLOOR, CEIL, ROUND, comparisons, logic */
    };
    return op > TN_OP_NONE && op <= TN_OP_CAST ? t[op] : NULL;
}

/* >>grad_rules: reverse-mode rules of the other ops. Each fills gin[i] for
   every i with need[i] with a gradient of in[i]'s rank (sum_to fixes dtype
   and broadcast dims afterwards); NULL where needed means a constructor
   failed (its error is set). */

static tn_result tn__gfail(const char *what, const tn_var *node) {
    char nb[64];
    tn_result r = tn_last_result();
    if (r != TN_OK) return r;
    return tn__err(TN_ERR_INTERNAL, "tn_grad: building the gradient of %s node '%s' failed", what, tn__gname(node, nb));
}

/* d prod / d x, elementwise, of x's shape, exact with zeros. */
static tn_var *tn__gprod_partial(tn_var *node) {
    tn_var *x = node->in[0];
    int ax[TN_MAX_DIMS], na = tn__gred_axes(node, ax);
    tn_var *zero = tn_lit(x, 0.0), *one = tn_lit(x, 1.0);
    tn_var *isz = tn_eq(x, zero);
    tn_var *nz = tn_where(isz, one, x);                    /* zeros replaced by 1 */
    tn_var *p = tn_prod(nz, ax, na, true);                 /* product of the non-zeros */
    tn_var *cnt = tn_sum(tn_cast(isz, x->type.dtype), ax, na, true);
    tn_var *none = tn_div(p, nz);                          /* no zero: prod / x */
    tn_var *one_zero = tn_where(isz, p, zero);             /* one zero: the others' product there */
    return tn_where(tn_eq(cnt, zero), none, tn_where(tn_eq(cnt, one), one_zero, zero));
}

static tn_result tn__vjp_reduce(tn_var *node, tn_var *g, tn_var **gin) {
    tn_var *x = node->in[0];
    tn_var *gk = tn__gkeep(g, node);
    int ax[TN_MAX_DIMS], na = tn__gred_axes(node, ax);
    switch (node->op) {
    case TN_OP_SUM: gin[0] = tn__gbcast_like(gk, x); break;
    case TN_OP_MEAN: {
        double cnt = 1;
        for (int k = 0; k < na; k++) cnt = x->type.shape[ax[k]] < 0 ? -1 : cnt * (double)x->type.shape[ax[k]];
        tn_var *n = cnt >= 0 ? tn_lit(x, cnt) : tn_sum(tn__gones_like(x), ax, na, true);
        gin[0] = tn__gbcast_like(tn_div(gk, n), x);
        break;
    }
    case TN_OP_PROD: gin[0] = tn_mul(gk, tn__gprod_partial(node)); break;
    case TN_OP_MAX: case TN_OP_MIN:
        gin[0] = tn__gmask(tn_eq(x, tn__gkeep(node, node)), gk);   /* where() broadcasts gk */
        break;
    case TN_OP_LOGSUMEXP: gin[0] = tn_mul(gk, tn_exp(tn_sub(x, tn__gkeep(node, node)))); break;
    default: return tn__err(TN_ERR_INTERNAL, "tn_grad: no reduction rule for op %d", node->op);
    }
    return gin[0] ? TN_OK : tn__gfail(tn__op_def(node->op)->name, node);
}

static tn_result tn__vjp_softmax(tn_var *node, tn_var *g, tn_var **gin) {
    int axis = (int)node->p.i[0];
    if (node->op == TN_OP_SOFTMAX)
        gin[0] = tn_mul(node, tn_sub(g, tn_sum(tn_mul(g, node), &axis, 1, true)));
    else
        gin[0] = tn_sub(g, tn_mul(tn_exp(node), tn_sum(g, &axis, 1, true)));
    return gin[0] ? TN_OK : tn__gfail("softmax", node);
}

/* Gradients of a @ b (NumPy matmul rules) given g = d cost / d(a @ b). */
static tn_result tn__dot_vjp(tn_var *a, tn_var *b, tn_var *g, const bool *need, tn_var **ga, tn_var **gb) {
    int na = a->type.ndim, nb = b->type.ndim;
    *ga = *gb = NULL;
    if (na == 1 && nb == 1) {
        if (need[0]) *ga = tn_mul(g, b);
        if (need[1]) *gb = tn_mul(g, a);
    } else if (na == 2 && nb == 1) {
        if (need[0]) *ga = tn_outer(g, b);
        if (need[1]) *gb = tn_dot(tn_transpose(a, NULL), g);
    } else if (na == 1 && nb == 2) {
        if (need[0]) *ga = tn_dot(b, g);
        if (need[1]) *gb = tn_outer(a, g);
    } else {   /* batched: vectors become (1, k) and (k, 1) matrices */
        tn_var *A = na == 1 ? tn_dimshuffle(a, 2, (int[]){ -1, 0 }) : a;
        tn_var *B = nb == 1 ? tn_dimshuffle(b, 2, (int[]){ 0, -1 }) : b;
        tn_var *G = g;
        if (na == 1 && G) {   /* the m dim matmul dropped: before the last */
            int gn = G->type.ndim, pat[TN_MAX_DIMS];
            for (int d = 0; d < gn - 1; d++) pat[d] = d;
            pat[gn - 1] = -1; pat[gn] = gn - 1;
            G = tn_dimshuffle(G, gn + 1, pat);
        }
        if (nb == 1 && G) {   /* the n dim: last */
            int gn = G->type.ndim, pat[TN_MAX_DIMS];
            for (int d = 0; d < gn; d++) pat[d] = d;
            pat[gn] = -1;
            G = tn_dimshuffle(G, gn + 1, pat);
        }
        if (!A || !B || !G) return tn__gfail("Dot", g);
        if (need[0]) {
            *ga = tn__sum_to(tn_dot(G, tn__gmT(B)), &A->type);
            if (na == 1) *ga = tn__gdrop(*ga, 0);
        }
        if (need[1]) {
            *gb = tn__sum_to(tn_dot(tn__gmT(A), G), &B->type);
            if (nb == 1) *gb = tn__gdrop(*gb, 1);
        }
    }
    if ((need[0] && !*ga) || (need[1] && !*gb)) return tn__gfail("Dot", g);
    return TN_OK;
}

static tn_var *tn__gscale(tn_var *g, double s) { return !g || s == 1.0 ? g : tn_mul(g, tn_lit(g, s)); }

static tn_result tn__vjp_linalg(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    tn_result r;
    switch (node->op) {
    case TN_OP_DOT: return tn__dot_vjp(node->in[0], node->in[1], g, need, &gin[0], &gin[1]);
    case TN_OP_GEMM: case TN_OP_GEMV: {   /* in: C, A, B: alpha*A@B + beta*C */
        double alpha = node->p.f[0], beta = node->p.f[1];
        if ((r = tn__dot_vjp(node->in[1], node->in[2], g, need + 1, &gin[1], &gin[2])) != TN_OK) return r;
        gin[1] = tn__gscale(gin[1], alpha);
        gin[2] = tn__gscale(gin[2], alpha);
        if (need[0]) gin[0] = tn__gscale(g, beta);
        break;
    }
    case TN_OP_OUTER:
        if (need[0]) gin[0] = tn_dot(g, node->in[1]);
        if (need[1]) gin[1] = tn_dot(tn_transpose(g, NULL), node->in[0]);
        break;
    default: return tn__err(TN_ERR_INTERNAL, "tn_grad: no linalg rule for op %d", node->op);
    }
    for (int i = 0; i < node->n_in; i++)
        if (need[i] && !gin[i]) return tn__gfail(tn__op_def(node->op)->name, node);
    return TN_OK;
}

/* Reshape g to x's static shape (at most one unknown dim: it becomes -1). */
static tn_var *tn__greshape_like(tn_var *g, tn_var *x, const char *what) {
    int64_t shape[TN_MAX_DIMS];
    int unknown = 0;
    char nb[64];
    for (int d = 0; d < x->type.ndim; d++) {
        shape[d] = x->type.shape[d];
        if (shape[d] < 0) unknown++;
    }
    if (unknown > 1) {
        char sb[128];
        tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of %s needs the shape of its input '%s', "
                "known only as %s (at most one unknown dim): give the input a static shape",
                what, tn__gname(x, nb), tn__shape_str(x->type.ndim, x->type.shape, sb));
        return NULL;
    }
    return tn_reshape(g, x->type.ndim, shape);
}

static tn_result tn__vjp_dimshuffle(tn_var *node, tn_var *g, tn_var **gin) {
    tn_var *x = node->in[0];
    int on = node->type.ndim, xn = x->type.ndim, ax[TN_MAX_DIMS], na = 0, pos[TN_MAX_DIMS], pat[TN_MAX_DIMS];
    for (int d = 0; d < xn; d++) pos[d] = -1;
    for (int k = 0, kept = 0; k < on; k++) {   /* new 'x' dims are summed away */
        if (node->p.i[k] < 0) ax[na++] = k;
        else pos[node->p.i[k]] = kept++;
    }
    if (na) g = tn_sum(g, ax, na, false);
    for (int d = 0; d < xn; d++) pat[d] = pos[d];   /* dims the shuffle dropped come back as 'x' */
    bool ident = g && g->type.ndim == xn;
    for (int d = 0; ident && d < xn; d++) ident = pat[d] == d;
    gin[0] = ident ? g : tn_dimshuffle(g, xn, pat);
    return gin[0] ? TN_OK : tn__gfail("DimShuffle", node);
}

/* Python's slice.indices for a known length n. */
static int64_t tn__gslice_indices(int64_t n, int64_t *start, int64_t *stop, int64_t *step) {
    int64_t st = *step == TN_NONE ? 1 : *step, lo, hi;
    if (st > 0) { lo = 0; hi = n; } else { lo = -1; hi = n - 1; }
    int64_t a = *start, b = *stop;
    if (a == TN_NONE) a = st > 0 ? lo : hi;
    else { if (a < 0) a += n; a = a < lo ? lo : a > hi ? hi : a; }
    if (b == TN_NONE) b = st > 0 ? hi : lo;
    else { if (b < 0) b += n; b = b < lo ? lo : b > hi ? hi : b; }
    *start = a; *stop = b; *step = st;
    if (st > 0) return b > a ? (b - a + st - 1) / st : 0;
    return a > b ? (a - b - st - 1) / (-st) : 0;
}

static tn_var *tn__gcat(int n, tn_var **xs, int axis) {
    tn_var *v[3];
    int k = 0;
    for (int i = 0; i < n; i++) if (xs[i]) v[k++] = xs[i];
    return k == 1 ? v[0] : tn_concatenate(k, v, axis);
}

/* The adjoint of slicing dim d: g (x sliced in dims <= d) padded with zeros
   along d back to the size of z (x sliced in dims < d only). */
static tn_var *tn__gunslice_dim(tn_var *g, tn_var *z, int d, int64_t start, int64_t stop, int64_t step) {
    int64_t n = z->type.shape[d];
    bool steps1 = step == TN_NONE || step == 1;
    if (n < 0 && steps1) {   /* size unknown: the pads are slices of zeros_like */
        tn_var *zz = tn__gzeros_like(z);
        tn_var *parts[3] = { start == TN_NONE ? NULL : tn_slice(zz, d, TN_NONE, start, 1), g,
                             stop == TN_NONE ? NULL : tn_slice(zz, d, stop, TN_NONE, 1) };
        return tn__gcat(3, parts, d);
    }
    if (n < 0) {
        char nb[64];
        tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of a slice with step %lld along dim %d needs the size "
                "of that dim of '%s' known at build time", (long long)step, d, tn__gname(z, nb));
        return NULL;
    }
    int64_t m = tn__gslice_indices(n, &start, &stop, &step);
    tn_var *zz = tn__gzeros_like(z);
    if (m == 0) return zz;
    int64_t first = start, s = step;
    if (step < 0) {   /* reversed: the same positions in ascending order */
        g = tn_slice(g, d, TN_NONE, TN_NONE, -1);
        first = start + (m - 1) * step;
        s = -step;
    }
    if (s > 1 && m > 1) {   /* interleave s-1 zero blocks after each element */
        tn_var *zs[64], *zg = tn__gzeros_like(g);
        if (s > 64) {
            tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of a slice with step %lld (> 64) is not supported", (long long)step);
            return NULL;
        }
        zs[0] = g;
        for (int64_t k = 1; k < s; k++) zs[k] = zg;
        tn_var *st = tn_stack((int)s, zs, d + 1);
        if (!st || !g) return NULL;
        int64_t shape[TN_MAX_DIMS];
        int unknown = 0, nd = g->type.ndim;
        for (int k = 0; k < nd; k++) {
            shape[k] = k == d ? m * s : g->type.shape[k];
            if (shape[k] < 0) { shape[k] = -1; unknown++; }
        }
        if (unknown > 1) {
            char nb[64];
            tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of a slice with step %lld of '%s' needs its other dims "
                    "known at build time (at most one unknown)", (long long)step, tn__gname(z, nb));
            return NULL;
        }
        g = tn_slice(tn_reshape(st, nd, shape), d, 0, (m - 1) * s + 1, 1);
    }
    int64_t after = n - (first + (m - 1) * s + 1);
    tn_var *parts[3] = { first > 0 ? tn_slice(zz, d, 0, first, 1) : NULL, g,
                         after > 0 ? tn_slice(zz, d, 0, after, 1) : NULL };
    return tn__gcat(3, parts, d);
}

static tn_result tn__vjp_slice(tn_var *node, tn_var *g, tn_var **gin) {
    tn_var *x = node->in[0];
    int nd = x->type.ndim;
    for (int d = nd - 1; d >= 0 && g; d--) {
        int64_t a = node->p.i[3 * d], b = node->p.i[3 * d + 1], s = node->p.i[3 * d + 2];
        if (a == TN_NONE && b == TN_NONE && (s == TN_NONE || s == 1)) continue;
        /* z: x sliced as the node does in dims < d, whole in dims >= d */
        tn_params p = node->p;
        for (int k = d; k < nd; k++) { p.i[3 * k] = TN_NONE; p.i[3 * k + 1] = TN_NONE; p.i[3 * k + 2] = TN_NONE; }
        bool whole = true;
        for (int k = 0; k < d; k++)
            whole = whole && p.i[3 * k] == TN_NONE && p.i[3 * k + 1] == TN_NONE && (p.i[3 * k + 2] == TN_NONE || p.i[3 * k + 2] == 1);
        tn_var *z = whole ? x : tn__node(x->graph, TN_OP_SLICE, 1, &x, &p, NULL, "tn_grad");
        if (!z) return tn__gfail("Slice", node);
        g = tn__gunslice_dim(g, z, d, a, b, s);
    }
    gin[0] = g;
    return g ? TN_OK : tn__gfail("Slice", node);
}

static tn_result tn__vjp_concat(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    int axis = (int)node->p.i[0], n = node->n_in;
    for (int j = 0; j < n; j++) {
        if (!need[j]) continue;
        int64_t pre = 0, post = 0, len = node->in[j]->type.shape[axis];
        bool pre_known = true, post_known = true;
        for (int k = 0; k < j; k++) { int64_t s = node->in[k]->type.shape[axis]; if (s < 0) pre_known = false; else pre += s; }
        for (int k = j + 1; k < n; k++) { int64_t s = node->in[k]->type.shape[axis]; if (s < 0) post_known = false; else post += s; }
        int64_t start = pre_known ? pre : (post_known && len >= 0) ? -(post + len) : INT64_MAX;
        int64_t stop = (pre_known && len >= 0) ? pre + len : post_known ? (post ? -post : TN_NONE) : INT64_MAX;
        if (start == INT64_MAX || stop == INT64_MAX) {
            char nb[64];
            return tn__err(TN_ERR_UNSUPPORTED, "tn_grad: the gradient of concatenate input %d ('%s') needs the sizes "
                           "along axis %d known at build time", j, tn__gname(node->in[j], nb), axis);
        }
        gin[j] = tn_slice(g, axis, start == 0 ? TN_NONE : start, stop, 1);
        if (!gin[j]) return tn__gfail("Concatenate", node);
    }
    return TN_OK;
}

/* Fills gin[] for node given its gradient g. */
static tn_result tn__vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    char nb[64];
    if (node->op > TN_OP_NONE && node->op <= TN_OP_CAST) {
        tn__ew_chain_fn d = tn__ew_chain(node->op);
        if (!d) return TN_OK;   /* discrete: zero */
        for (int i = 0; i < node->n_in; i++) {
            if (!need[i]) continue;
            if (node->op == TN_OP_WHERE && i == 0) continue;
            if (!(gin[i] = tn__sum_to(d(node, i, g), &node->in[i]->type))) return tn__gfail(tn__op_def(node->op)->name, node);
        }
        return TN_OK;
    }
    switch (node->op) {
    case TN_OP_SUM: case TN_OP_MEAN: case TN_OP_PROD: case TN_OP_MAX: case TN_OP_MIN: case TN_OP_LOGSUMEXP:
        return tn__vjp_reduce(node, g, gin);
    case TN_OP_SOFTMAX: case TN_OP_LOG_SOFTMAX: return tn__vjp_softmax(node, g, gin);
    case TN_OP_DOT: case TN_OP_GEMM: case TN_OP_GEMV: case TN_OP_OUTER: return tn__vjp_linalg(node, g, need, gin);
    case TN_OP_RESHAPE: gin[0] = tn__greshape_like(g, node->in[0], "Reshape"); break;
    case TN_OP_FLATTEN: gin[0] = tn__greshape_like(g, node->in[0], "Flatten"); break;
    case TN_OP_DIMSHUFFLE: return tn__vjp_dimshuffle(node, g, gin);
    case TN_OP_SLICE: return tn__vjp_slice(node, g, gin);
    case TN_OP_CONCATENATE: return tn__vjp_concat(node, g, need, gin);
    case TN_OP_BROADCAST_TO: case TN_OP_ALLOC: gin[0] = tn__sum_to(g, &node->in[0]->type); break;
    case TN_OP_ARGMAX: case TN_OP_ARGMIN: case TN_OP_ALL: case TN_OP_ANY: case TN_OP_EYE: case TN_OP_ARANGE:
        return TN_OK;   /* discrete or no inputs */
    case TN_OP_PROJ: return tn__scan_proj_vjp(node, g, gin);        /* src/scan.c.h: outputs of a scan */
    case TN_OP_SCAN: return tn__scan_vjp(node, g, need, gin);       /* src/scan.c.h: BPTT */
    default: {
        const tn_op_def *def = tn__op_def(node->op);
        return tn__err(TN_ERR_UNSUPPORTED, "tn_grad: op %s (node '%s') has no gradient rule",
                       def && def->name ? def->name : "?", tn__gname(node, nb));
    }
    }
    if (need[0] && !gin[0]) return tn__gfail(tn__op_def(node->op)->name, node);
    return TN_OK;
}

/* >>grad_driver */

/* REACH: an ancestor of the cost; DEP: depends on a wrt through unblocked
   nodes; CONN: on an unblocked path from a wrt to the cost (float or not). */
enum { TN__G_REACH = 1, TN__G_DEP = 2, TN__G_BLOCK = 4, TN__G_WRT = 8, TN__G_CONN = 16 };

typedef struct tn__gstate {
    tn_graph *g;
    int nv;
    uint8_t *st;
    tn_var **acc;      /* gradient (reverse) or tangent (forward) by id */
} tn__gstate;

static void tn__gstate_free(tn__gstate *s) { tn__free(s->st); tn__free(s->acc); }

static tn_result tn__gstate_init(tn__gstate *s, tn_graph *g, const char *who) {
    s->g = g;
    s->nv = tn__graph_nvars(g);
    s->st = (uint8_t *)tn__calloc((size_t)s->nv + 1, 1);
    s->acc = (tn_var **)tn__calloc((size_t)s->nv + 1, sizeof(tn_var *));
    if (!s->st || !s->acc) { tn__gstate_free(s); return tn__err(TN_ERR_OOM, "%s: out of memory", who); }
    return TN_OK;
}

/* Marks everything reachable from roots (iterative DFS over inputs). */
static tn_result tn__greach(tn__gstate *s, int n, tn_var *const *roots, const char *who) {
    tn_var **stack = (tn_var **)tn__malloc(sizeof(tn_var *) * ((size_t)s->nv + 1));
    int sp = 0;
    if (!stack) return tn__err(TN_ERR_OOM, "%s: out of memory", who);
    for (int i = 0; i < n; i++) {
        if (!roots[i] || (s->st[roots[i]->id] & TN__G_REACH)) continue;
        s->st[roots[i]->id] |= TN__G_REACH;
        stack[sp++] = roots[i];
        while (sp) {
            tn_var *v = stack[--sp];
            for (int k = 0; k < v->n_in; k++) {
                tn_var *c = v->in[k];
                if (!c || c->id < 0 || c->id >= s->nv) { tn__free(stack); return tn__err(TN_ERR_GRAPH, "%s: malformed graph at node %d", who, v->id); }
                if (s->st[c->id] & TN__G_REACH) continue;
                s->st[c->id] |= TN__G_REACH;
                stack[sp++] = c;
            }
        }
    }
    tn__free(stack);
    return TN_OK;
}

/* DEP: a reached node that depends on a wrt through unblocked nodes. */
static void tn__gdeps(tn__gstate *s, const tn_grad_options *opt) {
    for (int i = 0; opt && i < opt->n_consider_constant; i++) {
        tn_var *c = opt->consider_constant[i];
        if (c && c->graph == s->g && c->id < s->nv) s->st[c->id] |= TN__G_BLOCK;
    }
    for (int id = 0; id < s->nv; id++) {
        tn_var *v = tn__graph_var(s->g, id);
        if (!(s->st[id] & TN__G_REACH)) continue;
        if (v->flags & TN_VAR_NO_GRAD) s->st[id] |= TN__G_BLOCK;
        if (s->st[id] & TN__G_WRT) { s->st[id] |= TN__G_DEP; continue; }
        if (s->st[id] & TN__G_BLOCK) continue;
        for (int k = 0; k < v->n_in; k++)
            if (s->st[v->in[k]->id] & TN__G_DEP) { s->st[id] |= TN__G_DEP; break; }
    }
}

static tn_result tn__gaccum(tn__gstate *s, tn_var *v, tn_var *c) {
    char nb[64];
    if (c->type.ndim != v->type.ndim)
        return tn__err(TN_ERR_INTERNAL, "tn_grad: a gradient of '%s' has rank %d, not %d", tn__gname(v, nb), c->type.ndim, v->type.ndim);
    if (c->type.dtype != v->type.dtype && !(c = tn_cast(c, v->type.dtype))) return tn__gfail("a cast", v);
    tn_var *a = s->acc[v->id];
    s->acc[v->id] = a ? tn_add(a, c) : c;
    return s->acc[v->id] ? TN_OK : tn__gfail("a sum", v);
}

static tn_result tn__gcheck_args(tn_var *cost, int n, tn_var *const *wrt, tn_var **grads,
                                 const tn_grad_options *opt, tn_graph **gp) {
    char nb[64], sb[128];
    tn_graph *g = cost ? cost->graph : NULL;
    int nk = opt ? opt->n_known_grads : 0;
    if (n < 0 || nk < 0) return tn__err(TN_ERR_INVALID, "tn_grad: n is %d and n_known_grads %d", n, nk);
    if (n > 0 && (!wrt || !grads)) return tn__err(TN_ERR_NULL, "tn_grad: wrt or grads is NULL for n = %d", n);
    if (nk > 0 && (!opt->known_vars || !opt->known_grads))
        return tn__err(TN_ERR_NULL, "tn_grad: known_vars or known_grads is NULL for n_known_grads = %d", nk);
    if (!cost && nk == 0) return tn__err(TN_ERR_NULL, "tn_grad: cost is NULL (did an earlier constructor fail?) and no known_grads are given");
    if (cost) {
        if (cost->type.ndim != 0)
            return tn__err(TN_ERR_SHAPE, "tn_grad: the cost '%s' must be a scalar (0-d), not of shape %s: reduce it first (tn_sum, tn_mean)",
                           tn__gname(cost, nb), tn__shape_str(cost->type.ndim, cost->type.shape, sb));
        if (!tn_dtype_is_float(cost->type.dtype))
            return tn__err(TN_ERR_DTYPE, "tn_grad: the cost '%s' is %s: gradients need a float cost",
                           tn__gname(cost, nb), tn_dtype_name(cost->type.dtype));
    }
    for (int i = 0; i < nk; i++) {
        tn_var *v = opt->known_vars[i], *kg = opt->known_grads[i];
        if (!v || !kg) return tn__err(TN_ERR_NULL, "tn_grad: known_vars[%d] or known_grads[%d] is NULL", i, i);
        if (!g) g = v->graph;
        if (v->graph != g || kg->graph != g) return tn__err(TN_ERR_GRAPH, "tn_grad: known_vars[%d] '%s' or its gradient belongs to another graph", i, tn__gname(v, nb));
        if (kg->type.ndim != v->type.ndim)
            return tn__err(TN_ERR_SHAPE, "tn_grad: known_grads[%d] has ndim %d but '%s' has ndim %d", i, kg->type.ndim, tn__gname(v, nb), v->type.ndim);
        if (!tn_dtype_is_float(v->type.dtype) || !tn_dtype_is_float(kg->type.dtype))
            return tn__err(TN_ERR_DTYPE, "tn_grad: known_vars[%d] '%s' (%s) and its gradient (%s) must be float", i,
                           tn__gname(v, nb), tn_dtype_name(v->type.dtype), tn_dtype_name(kg->type.dtype));
    }
    for (int i = 0; i < n; i++) {
        tn_var *w = wrt[i];
        if (!w) return tn__err(TN_ERR_NULL, "tn_grad: wrt[%d] is NULL (did an earlier constructor fail?)", i);
        if (w->graph != g) return tn__err(TN_ERR_GRAPH, "tn_grad: wrt[%d] '%s' belongs to another graph than the cost", i, tn__gname(w, nb));
        if (!tn_dtype_is_float(w->type.dtype))
            return tn__err(TN_ERR_DTYPE, "tn_grad: wrt[%d] '%s' is %s: gradients are defined for float variables only "
                           "(an integer or boolean input has no gradient; cast it to float first)", i, tn__gname(w, nb), tn_dtype_name(w->type.dtype));
    }
    *gp = g;
    return TN_OK;
}

/* The gradient of a wrt the cost does not reach, per disconnected_inputs. */
static tn_result tn__gdisconnected(tn_var *w, int i, tn_disconnected mode, tn_var **out) {
    char nb[64];
    static const char *why = "is not part of the computational graph of the cost (or reaches it only through "
                             "consider_constant or tn_stop_gradient)";
    if (mode == TN_DISCONNECTED_RAISE)
        return tn__err(TN_ERR_DISCONNECTED, "tn_grad: wrt[%d] '%s' %s; pass disconnected_inputs = "
                       "TN_DISCONNECTED_WARN or TN_DISCONNECTED_IGNORE to get zeros", i, tn__gname(w, nb), why);
    if (mode == TN_DISCONNECTED_WARN) tn__warn("tn_grad: wrt[%d] '%s' %s; its gradient is zero", i, tn__gname(w, nb), why);
    *out = tn__gzeros_like(w);
    return *out ? TN_OK : tn__gfail("zeros", w);
}

TN_API tn_result tn_grad(tn_var *cost, int n, tn_var *const *wrt, tn_var **grads, const tn_grad_options *opt) {
    tn_graph *g = NULL;
    tn__gstate s;
    tn_result r;
    for (int i = 0; grads && i < n; i++) grads[i] = NULL;
    if ((r = tn__gcheck_args(cost, n, wrt, grads, opt, &g)) != TN_OK) return r;
    if ((r = tn__gstate_init(&s, g, "tn_grad")) != TN_OK) return r;
    int nk = opt ? opt->n_known_grads : 0;
    /* roots: the cost and the known variables */
    tn_var **roots = (tn_var **)tn__malloc(sizeof(tn_var *) * (size_t)(nk + 1));
    int max_in = 1;   /* a variadic node may repeat an input: size by arity, not by nodes */
    for (int id = 0; id < s.nv; id++) { int k = tn__graph_var(g, id)->n_in; if (k > max_in) max_in = k; }
    bool *need = (bool *)tn__malloc(sizeof(bool) * (size_t)max_in);
    tn_var **gin = (tn_var **)tn__malloc(sizeof(tn_var *) * (size_t)max_in);
    if (!roots || !need || !gin) { r = tn__err(TN_ERR_OOM, "tn_grad: out of memory"); goto done; }
    roots[0] = cost;
    for (int i = 0; i < nk; i++) roots[i + 1] = opt->known_vars[i];
    if ((r = tn__greach(&s, nk + 1, roots, "tn_grad")) != TN_OK) goto done;
    for (int i = 0; i < n; i++) s.st[wrt[i]->id] |= TN__G_WRT;
    tn__gdeps(&s, opt);

    if (cost && (s.st[cost->id] & TN__G_DEP)) {
        s.st[cost->id] |= TN__G_CONN;
        if (!(s.acc[cost->id] = tn__glit(cost, cost->type.dtype, 1.0))) { r = tn__gfail("the seed", cost); goto done; }
    }
    for (int i = 0; i < nk; i++) {
        tn_var *v = opt->known_vars[i];
        if (!(s.st[v->id] & TN__G_DEP)) continue;
        s.st[v->id] |= TN__G_CONN;
        if ((r = tn__gaccum(&s, v, opt->known_grads[i])) != TN_OK) goto done;
    }
    for (int id = s.nv - 1; id >= 0; id--) {
        tn_var *v = tn__graph_var(g, id), *gv = s.acc[id];
        if ((s.st[id] & TN__G_CONN) && !(s.st[id] & TN__G_BLOCK))
            for (int k = 0; k < v->n_in; k++)
                if (s.st[v->in[k]->id] & TN__G_DEP) s.st[v->in[k]->id] |= TN__G_CONN;
        if (!gv || v->n_in == 0 || (s.st[id] & TN__G_BLOCK) || !tn_dtype_is_float(v->type.dtype)) continue;
        bool any = false;
        for (int k = 0; k < v->n_in; k++) {
            tn_var *c = v->in[k];
            need[k] = (s.st[c->id] & TN__G_DEP) && tn_dtype_is_float(c->type.dtype);
            any = any || need[k];
            gin[k] = NULL;
        }
        if (!any) continue;
        if ((r = tn__vjp(v, gv, need, gin)) != TN_OK) goto done;
        for (int k = 0; k < v->n_in; k++)
            if (need[k] && gin[k] && (r = tn__gaccum(&s, v->in[k], gin[k])) != TN_OK) goto done;
    }
    for (int i = 0; i < n; i++) {
        tn_var *w = wrt[i];
        if (!(s.st[w->id] & TN__G_CONN)) {
            if ((r = tn__gdisconnected(w, i, opt ? opt->disconnected_inputs : TN_DISCONNECTED_RAISE, &grads[i])) != TN_OK) goto done;
            continue;
        }
        /* connected only through discrete values: zero */
        grads[i] = s.acc[w->id] ? tn__gbcast_like(s.acc[w->id], w) : tn__gzeros_like(w);
        if (!grads[i]) { r = tn__gfail("the result", w); goto done; }
    }
    r = TN_OK;
done:
    if (r != TN_OK) for (int i = 0; grads && i < n; i++) grads[i] = NULL;
    tn__free(roots); tn__free(need); tn__free(gin);
    tn__gstate_free(&s);
    return r;
}

TN_API tn_var *tn_grad1(tn_var *cost, tn_var *wrt) {
    tn_var *gr = NULL;
    return tn_grad(cost, 1, &wrt, &gr, NULL) == TN_OK ? gr : NULL;
}

TN_API tn_var *tn_stop_gradient(tn_var *x) {
    if (!x) { tn__err(TN_ERR_NULL, "tn_stop_gradient: x is NULL (did an earlier constructor fail?)"); return NULL; }
    tn_params p;
    memset(&p, 0, sizeof p);
    /* a node of its own (never x itself) so the flag marks only this use */
    tn_var *v = tn__node(x->graph, TN_OP_IDENTITY, 1, &x, &p, NULL, "tn_stop_gradient");
    if (v) v->flags |= TN_VAR_NO_GRAD;
    return v;
}

/* >>rop: forward mode. t[i] is in[i]'s tangent (NULL: zero); *out the node's. */

/* The same op and params applied to new inputs (linear ops: their own JVP). */
static tn_var *tn__gclone(tn_var *node, tn_var *const *ins) {
    return tn__node(node->graph, node->op, node->n_in, ins, &node->p, NULL, "tn_rop");
}

/* The node applied to in[0]'s tangent t, its other inputs kept (a fill's 'like'). */
static tn_var *tn__gclone0(tn_var *node, tn_var *t) {
    tn_var *ins[TN_MAX_IPARAMS];
    if (node->n_in > TN_MAX_IPARAMS) { tn__err(TN_ERR_UNSUPPORTED, "tn_rop: too many inputs"); return NULL; }
    ins[0] = t;
    for (int i = 1; i < node->n_in; i++) ins[i] = node->in[i];
    return tn__gclone(node, ins);
}

static tn_var *tn__gadd(tn_var *a, tn_var *b) { return !a ? b : !b ? a : tn_add(a, b); }

static tn_result tn__jvp(tn_var *node, tn_var **t, tn_var **out) {
    char nb[64];
    tn_var *x = node->in[0], *r = NULL, *tx = t[0];
    int ax[TN_MAX_DIMS], na;
    *out = NULL;
    if (node->op > TN_OP_NONE && node->op <= TN_OP_CAST) {
        tn__ew_chain_fn d = tn__ew_chain(node->op);
        if (!d) return TN_OK;
        for (int i = 0; i < node->n_in; i++) {
            if (!t[i] || (node->op == TN_OP_WHERE && i == 0)) continue;
            tn_var *c = d(node, i, t[i]);
            if (!c || !(r = tn__gadd(r, c))) return tn__gfail("a tangent", node);
        }
        if (r && r->type.dtype != node->type.dtype) r = tn_cast(r, node->type.dtype);
        /* tangents broadcast like values, but the consumer may be a reduction */
        *out = r ? tn__gbcast_like(r, node) : NULL;
        return !r || *out ? TN_OK : tn__gfail("a tangent", node);
    }
    switch (node->op) {
    case TN_OP_SUM: case TN_OP_MEAN: case TN_OP_RESHAPE: case TN_OP_DIMSHUFFLE: case TN_OP_SLICE:
    case TN_OP_FLATTEN: case TN_OP_BROADCAST_TO: case TN_OP_ALLOC:
        if (!tx) return TN_OK;   /* only a fill's shape source has a tangent: zero */
        r = tn__gclone0(node, tx);
        break;
    case TN_OP_CONCATENATE: {
        tn_var **ins = (tn_var **)tn__graph_alloc(node->graph, sizeof(tn_var *) * (size_t)node->n_in);
        if (!ins) return tn__err(TN_ERR_OOM, "tn_rop: out of memory");
        for (int i = 0; i < node->n_in; i++) ins[i] = t[i] ? t[i] : tn__gzeros_like(node->in[i]);
        r = tn__gclone(node, ins);
        break;
    }
    case TN_OP_PROD: case TN_OP_MAX: case TN_OP_MIN: case TN_OP_LOGSUMEXP: {
        na = tn__gred_axes(node, ax);
        tn_var *w;   /* d out / d x, elementwise */
        if (node->op == TN_OP_PROD) w = tn__gprod_partial(node);
        else if (node->op == TN_OP_LOGSUMEXP) w = tn_exp(tn_sub(x, tn__gkeep(node, node)));
        else {   /* ties: the mean of the tied tangents (the one-sided derivative's average) */
            tn_var *m = tn_cast(tn_eq(x, tn__gkeep(node, node)), x->type.dtype);
            w = tn_div(m, tn_sum(m, ax, na, true));
        }
        r = tn_sum(tn_mul(tx, w), ax, na, node->p.i[1] != 0);
        break;
    }
    case TN_OP_SOFTMAX: {
        int axis = (int)node->p.i[0];
        r = tn_mul(node, tn_sub(tx, tn_sum(tn_mul(tx, node), &axis, 1, true)));
        break;
    }
    case TN_OP_LOG_SOFTMAX: {
        int axis = (int)node->p.i[0];
        r = tn_sub(tx, tn_sum(tn_mul(tx, tn_exp(node)), &axis, 1, true));
        break;
    }
    case TN_OP_DOT: case TN_OP_OUTER: {
        tn_var *(*f)(tn_var *, tn_var *) = node->op == TN_OP_DOT ? tn_dot : tn_outer;
        r = tn__gadd(t[0] ? f(t[0], node->in[1]) : NULL, t[1] ? f(node->in[0], t[1]) : NULL);
        break;
    }
    case TN_OP_GEMM: case TN_OP_GEMV: {
        tn_var *p = tn__gadd(t[1] ? tn_dot(t[1], node->in[2]) : NULL, t[2] ? tn_dot(node->in[1], t[2]) : NULL);
        r = tn__gadd(tn__gscale(p, node->p.f[0]), t[0] ? tn__gscale(t[0], node->p.f[1]) : NULL);
        if (r) r = tn__gbcast_like(r, node);
        break;
    }
    default: {
        const tn_op_def *def = tn__op_def(node->op);
        return tn__err(TN_ERR_UNSUPPORTED, "tn_rop: op %s (node '%s') has no forward-mode rule",
                       def && def->name ? def->name : "?", tn__gname(node, nb));
    }
    }
    if (r && r->type.dtype != node->type.dtype) r = tn_cast(r, node->type.dtype);
    *out = r;
    return r ? TN_OK : tn__gfail("a tangent", node);
}

TN_API tn_var *tn_rop(tn_var *f, int n, tn_var *const *wrt, tn_var *const *eval_points) {
    char nb[64], sb[128], sb2[128];
    tn__gstate s;
    tn_var *res = NULL;
    if (!f) { tn__err(TN_ERR_NULL, "tn_rop: f is NULL (did an earlier constructor fail?)"); return NULL; }
    if (n < 1 || !wrt || !eval_points) { tn__err(TN_ERR_NULL, "tn_rop: needs n >= 1 (got %d), wrt and eval_points", n); return NULL; }
    for (int i = 0; i < n; i++) {
        tn_var *w = wrt[i], *e = eval_points[i];
        if (!w || !e) { tn__err(TN_ERR_NULL, "tn_rop: wrt[%d] or eval_points[%d] is NULL", i, i); return NULL; }
        if (w->graph != f->graph || e->graph != f->graph) { tn__err(TN_ERR_GRAPH, "tn_rop: wrt[%d] '%s' or its eval point belongs to another graph", i, tn__gname(w, nb)); return NULL; }
        if (!tn_dtype_is_float(w->type.dtype)) { tn__err(TN_ERR_DTYPE, "tn_rop: wrt[%d] '%s' is %s: float variables only", i, tn__gname(w, nb), tn_dtype_name(w->type.dtype)); return NULL; }
        if (e->type.ndim != w->type.ndim) {
            tn__err(TN_ERR_SHAPE, "tn_rop: eval_points[%d] of shape %s does not match wrt[%d] '%s' of shape %s", i,
                    tn__shape_str(e->type.ndim, e->type.shape, sb), i, tn__gname(w, nb), tn__shape_str(w->type.ndim, w->type.shape, sb2));
            return NULL;
        }
    }
    if (tn__gstate_init(&s, f->graph, "tn_rop") != TN_OK) return NULL;
    if (tn__greach(&s, 1, &f, "tn_rop") != TN_OK) goto done;
    for (int i = 0; i < n; i++) s.st[wrt[i]->id] |= TN__G_WRT;
    tn__gdeps(&s, NULL);
    if (!(s.st[f->id] & TN__G_DEP)) {
        tn__err(TN_ERR_DISCONNECTED, "tn_rop: f '%s' does not depend on any of the %d wrt variables", tn__gname(f, nb), n);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        tn_var *e = eval_points[i];
        if (e->type.dtype != wrt[i]->type.dtype && !(e = tn_cast(e, wrt[i]->type.dtype))) goto done;
        s.acc[wrt[i]->id] = tn__gadd(s.acc[wrt[i]->id], e);
    }
    tn_var *tin[TN_MAX_IPARAMS];
    for (int id = 0; id <= f->id; id++) {
        tn_var *v = tn__graph_var(f->graph, id);
        if (!(s.st[id] & TN__G_DEP) || (s.st[id] & (TN__G_WRT | TN__G_BLOCK)) || v->n_in == 0) continue;
        if (!tn_dtype_is_float(v->type.dtype)) continue;
        tn_var **t = v->n_in <= TN_MAX_IPARAMS ? tin : (tn_var **)tn__graph_alloc(f->graph, sizeof(tn_var *) * (size_t)v->n_in);
        if (!t) { tn__err(TN_ERR_OOM, "tn_rop: out of memory"); goto done; }
        bool any = false;
        for (int k = 0; k < v->n_in; k++) {
            t[k] = tn_dtype_is_float(v->in[k]->type.dtype) ? s.acc[v->in[k]->id] : NULL;
            any = any || t[k];
        }
        if (any && tn__jvp(v, t, &s.acc[id]) != TN_OK) goto done;
    }
    res = s.acc[f->id] ? s.acc[f->id] : tn__gzeros_like(f);
done:
    tn__gstate_free(&s);
    return res;
}

/* >>verify_grad */

typedef struct tn__vg {
    const tn_verify_grad_desc *d;
    tn_graph *g;
    tn_var **in;
    tn_array **x;          /* contiguous float64 copies of the points, perturbed in place */
    tn_func *fcost, *fgrad, *fout;
} tn__vg;

static void tn__vg_free(tn__vg *v) {
    tn_function_free(v->fcost); tn_function_free(v->fgrad); tn_function_free(v->fout);
    for (int i = 0; v->x && i < v->d->n_inputs; i++) tn_array_free(v->x[i]);
    tn__free(v->x); tn__free(v->in);
    tn_graph_free(v->g);
}

static tn_result tn__vg_setup(tn__vg *v) {
    const tn_verify_grad_desc *d = v->d;
    int n = d->n_inputs;
    if (!(v->g = tn_graph_new())) return tn_last_result() ? tn_last_result() : TN_ERR_OOM;
    v->x = (tn_array **)tn__calloc((size_t)n, sizeof(tn_array *));
    v->in = (tn_var **)tn__calloc((size_t)n, sizeof(tn_var *));
    if (!v->x || !v->in) return tn__err(TN_ERR_OOM, "tn_verify_grad: out of memory");
    for (int i = 0; i < n; i++) {
        const tn_array *p = d->points[i];
        if (!p) return tn__err(TN_ERR_NULL, "tn_verify_grad: points[%d] is NULL", i);
        if (!(v->x[i] = tn_array_astype(p, TN_F64))) return tn_last_result() ? tn_last_result() : TN_ERR_OOM;
        int64_t shape[TN_MAX_DIMS];
        bool bc[TN_MAX_DIMS];
        for (int k = 0; k < p->ndim; k++) {
            bc[k] = p->shape[k] == 1;
            shape[k] = d->static_shapes || bc[k] ? p->shape[k] : -1;
        }
        char name[32];
        snprintf(name, sizeof name, "x%d", i);
        if (!(v->in[i] = tn_input(v->g, name, TN_F64, p->ndim, shape, bc))) return tn_last_result();
    }
    return TN_OK;
}

static tn_result tn__vg_cost(tn__vg *v, double *c) {
    tn_array *out = NULL;
    tn_result r = tn_call(v->fcost, v->x, &out);
    if (r == TN_OK) *c = tn_array_get(out, NULL);
    tn_array_free(out);
    return r;
}

/* Builds cost = sum(out * R), R a seeded random array of out's shape. */
static tn_result tn__vg_build(tn__vg *v, tn_var **cost) {
    const tn_verify_grad_desc *d = v->d;
    tn_var *out = d->build(v->g, v->in, d->user);
    if (!out) return tn_last_result() ? tn_last_result() : tn__err(TN_ERR_NULL, "tn_verify_grad: the builder returned NULL");
    if (!tn_dtype_is_float(out->type.dtype))
        return tn__err(TN_ERR_DTYPE, "tn_verify_grad: the builder's output is %s, not float", tn_dtype_name(out->type.dtype));
    if (out->type.ndim == 0) { *cost = tn_cast(out, TN_F64); return *cost ? TN_OK : tn_last_result(); }
    tn_array *o = NULL;
    if (!(v->fout = tn_function(v->g, &(tn_func_desc){ .n_inputs = d->n_inputs, .inputs = v->in, .n_outputs = 1,
                                                        .outputs = &out, .mode = d->mode, .name = "verify_grad_out" })))
        return tn_last_result();
    tn_result r = tn_call(v->fout, v->x, &o);
    if (r != TN_OK) return r;
    tn_array *R = tn_array_rand_uniform(TN_F64, o->ndim, o->shape, 0.5, 1.5, d->seed ? d->seed : 1234);
    tn_array_free(o);
    if (!R) return tn_last_result() ? tn_last_result() : TN_ERR_OOM;
    *cost = tn_sum(tn_mul(tn_cast(out, TN_F64), tn_constant(v->g, R)), NULL, 0, false);
    tn_array_free(R);
    return *cost ? TN_OK : tn_last_result();
}

static void tn__vg_unravel(const tn_array *a, int64_t k, int64_t *idx) {
    for (int d = a->ndim - 1; d >= 0; d--) { idx[d] = a->shape[d] ? k % a->shape[d] : 0; k = a->shape[d] ? k / a->shape[d] : 0; }
}

TN_API tn_result tn_verify_grad(const tn_verify_grad_desc *d, tn_verify_grad_report *report) {
    tn__vg v;
    memset(&v, 0, sizeof v);
    if (report) memset(report, 0, sizeof *report);
    if (!d || !d->build) return tn__err(TN_ERR_NULL, "tn_verify_grad: desc or desc->build is NULL");
    if (d->n_inputs < 1 || !d->points) return tn__err(TN_ERR_INVALID, "tn_verify_grad: needs n_inputs >= 1 (got %d) and points", d->n_inputs);
    v.d = d;
    double eps = d->eps > 0 ? d->eps : 1e-6, atol = d->abs_tol > 0 ? d->abs_tol : 1e-5, rtol = d->rel_tol > 0 ? d->rel_tol : 1e-4;
    int n = d->n_inputs;
    tn_var *cost = NULL, **gv = NULL;
    tn_array **ga = NULL;
    tn_verify_grad_report worst;
    double worst_score = -1;
    memset(&worst, 0, sizeof worst);
    tn_result r = tn__vg_setup(&v);
    if (r == TN_OK) r = tn__vg_build(&v, &cost);
    if (r != TN_OK) goto done;
    gv = (tn_var **)tn__calloc((size_t)n, sizeof(tn_var *));
    ga = (tn_array **)tn__calloc((size_t)n, sizeof(tn_array *));
    if (!gv || !ga) { r = tn__err(TN_ERR_OOM, "tn_verify_grad: out of memory"); goto done; }
    if ((r = tn_grad(cost, n, v.in, gv, &(tn_grad_options){ .disconnected_inputs = TN_DISCONNECTED_IGNORE })) != TN_OK) goto done;
    v.fcost = tn_function(v.g, &(tn_func_desc){ .n_inputs = n, .inputs = v.in, .n_outputs = 1, .outputs = &cost,
                                                .mode = d->mode, .name = "verify_grad_cost" });
    v.fgrad = tn_function(v.g, &(tn_func_desc){ .n_inputs = n, .inputs = v.in, .n_outputs = n, .outputs = gv,
                                                .mode = d->mode, .name = "verify_grad_grads" });
    if (!v.fcost || !v.fgrad) { r = tn_last_result(); goto done; }
    if ((r = tn_call(v.fgrad, v.x, ga)) != TN_OK) goto done;
    for (int i = 0; i < n; i++) {
        tn_array *gi = tn_array_astype(ga[i], TN_F64);
        if (!gi) { r = tn_last_result() ? tn_last_result() : TN_ERR_OOM; goto done; }
        tn_array_free(ga[i]);
        ga[i] = gi;
        int64_t sz = tn_array_size(v.x[i]);
        if (tn_array_size(gi) != sz) {
            char s1[128], s2[128];
            r = tn__err(TN_ERR_INTERNAL, "tn_verify_grad: the gradient of input %d has shape %s, the input %s", i,
                        tn__shape_str(gi->ndim, gi->shape, s1), tn__shape_str(v.x[i]->ndim, v.x[i]->shape, s2));
            goto done;
        }
        double *xp = (double *)v.x[i]->data, *gp = (double *)gi->data;
        for (int64_t k = 0; k < sz; k++) {
            double x0 = xp[k], cp, cm;
            xp[k] = x0 + eps;
            r = tn__vg_cost(&v, &cp);
            xp[k] = x0 - eps;
            if (r == TN_OK) r = tn__vg_cost(&v, &cm);
            xp[k] = x0;
            if (r != TN_OK) goto done;
            double num = (cp - cm) / (2 * eps), sym = gp[k], ae = fabs(sym - num);
            double re = ae == 0 ? 0 : ae / (fabs(sym) + fabs(num));
            double score = fmin(ae / atol, re / rtol);
            if (isnan(sym) != isnan(num)) score = INFINITY;
            if (score > worst_score) {
                worst_score = score;
                worst.input = i; worst.ndim = v.x[i]->ndim;
                tn__vg_unravel(v.x[i], k, worst.index);
                worst.symbolic = sym; worst.numeric = num; worst.abs_err = ae; worst.rel_err = re;
            }
        }
    }
    if (report) *report = worst;
    if (worst_score > 1) {
        char ib[128];
        tn__shape_str(worst.ndim, worst.index, ib);
        r = tn__err(TN_ERR_INVALID, "tn_verify_grad: the gradient of input %d at index %s is %.10g symbolically but %.10g "
                    "by finite differences (abs err %.3g > %.3g, rel err %.3g > %.3g, eps %g)", worst.input, ib,
                    worst.symbolic, worst.numeric, worst.abs_err, atol, worst.rel_err, rtol, eps);
    }
done:
    for (int i = 0; ga && i < n; i++) tn_array_free(ga[i]);
    tn__free(ga); tn__free(gv);
    tn__vg_free(&v);
    return r;
}
