/* >>shape ops: reshape, dimshuffle, slice, flatten, broadcast_to,
   concatenate, stack, alloc/fill, eye, arange.

   View ops (TN_OPK_VIEW: DIMSHUFFLE, SLICE, BROADCAST_TO) never copy: the
   executor hands the kernel out[0] with base, data and device of in[0]; the
   kernel sets data (first element) and strides. RESHAPE and FLATTEN are
   TN_OPK_SHAPE for now: a reshape of a non-contiguous input cannot be a view
   and a view slot has no buffer of its own to fall back on. Their kernel
   aliases when called with out[0]->data == in[0]->data and the layout
   allows, else copies, so they can become views once the executor offers a
   fallback buffer.

   Params (see tensor_ops.h): ops whose rank is not implied by their inputs
   keep it in i[TN__P_NDIM] (RESHAPE, DIMSHUFFLE, BROADCAST_TO, ALLOC). */

#define TN__P_NDIM (TN_MAX_IPARAMS - 1)
#define TN__P_DTYPE (TN_MAX_IPARAMS - 2)     /* EYE, ARANGE: output dtype */

static tn_params tn__params_zero(void) {
    tn_params p;
    memset(&p, 0, sizeof p);
    return p;
}

/* >>shape_infer ---------------------------------------------------------- */

static tn_result tn__infer_reshape(const tn_var *node, const tn_type *in, tn_type *out) {
    int nd = (int)node->p.i[TN__P_NDIM];
    int64_t size = 1;
    for (int d = 0; d < in[0].ndim; d++) size = in[0].shape[d] < 0 || size < 0 ? -1 : size * in[0].shape[d];
    out->dtype = in[0].dtype;
    out->ndim = nd;
    tn_result r = tn__reshape_target("Reshape", size, in[0].ndim, in[0].shape, nd, node->p.i, out->shape);
    if (r != TN_OK) return r;
    for (int d = 0; d < nd; d++) out->bcast[d] = out->shape[d] == 1;
    return TN_OK;
}

static tn_result tn__infer_dimshuffle(const tn_var *node, const tn_type *in, tn_type *out) {
    int nd = (int)node->p.i[TN__P_NDIM];
    bool used[TN_MAX_DIMS] = {false};
    char sb[128];
    out->dtype = in[0].dtype;
    out->ndim = nd;
    for (int k = 0; k < nd; k++) {
        int64_t ax = node->p.i[k];
        if (ax == -1) { out->shape[k] = 1; out->bcast[k] = true; continue; }
        if (ax < 0 || ax >= in[0].ndim)
            return tn__err(TN_ERR_AXIS, "DimShuffle: pattern entry %d is axis %lld, out of range for an input of %d dims %s",
                           k, (long long)ax, in[0].ndim, tn__shape_str(in[0].ndim, in[0].shape, sb));
        if (used[ax]) return tn__err(TN_ERR_AXIS, "DimShuffle: axis %lld appears twice in the pattern", (long long)ax);
        used[ax] = true;
        out->shape[k] = in[0].shape[ax];
        out->bcast[k] = in[0].bcast[ax];
    }
    for (int d = 0; d < in[0].ndim; d++)
        if (!used[d] && !in[0].bcast[d] && in[0].shape[d] != 1)
            return tn__err(TN_ERR_SHAPE, "DimShuffle: cannot drop axis %d of an input of shape %s: only broadcastable "
                           "(size 1) dimensions can be dropped", d, tn__shape_str(in[0].ndim, in[0].shape, sb));
    return TN_OK;
}

static tn_result tn__infer_slice(const tn_var *node, const tn_type *in, tn_type *out) {
    *out = in[0];
    for (int d = 0; d < in[0].ndim; d++) {
        int64_t start = node->p.i[3 * d], stop = node->p.i[3 * d + 1], step = node->p.i[3 * d + 2];
        if (step == TN_NONE) step = 1;
        if (step == 0) return tn__err(TN_ERR_INVALID, "Subtensor: slice step of axis %d cannot be zero", d);
        if (start == TN_NONE && stop == TN_NONE && step == 1) continue;
        if (in[0].shape[d] < 0) { out->shape[d] = -1; out->bcast[d] = false; continue; }
        int64_t first, count;
        tn__slice_resolve(in[0].shape[d], start, stop, step, &first, &count);
        out->shape[d] = count;
        out->bcast[d] = in[0].bcast[d] && count == 1;
    }
    return TN_OK;
}

static tn_result tn__infer_flatten(const tn_var *node, const tn_type *in, tn_type *out) {
    int outdim = (int)node->p.i[0];
    char sb[128];
    if (outdim < 1 || (in[0].ndim > 0 && outdim > in[0].ndim))
        return tn__err(TN_ERR_INVALID, "Flatten: outdim %d must be in [1, %d] for an input of shape %s", outdim,
                       in[0].ndim > 0 ? in[0].ndim : 1, tn__shape_str(in[0].ndim, in[0].shape, sb));
    out->dtype = in[0].dtype;
    out->ndim = outdim;
    for (int d = 0; d < outdim - 1; d++) { out->shape[d] = in[0].shape[d]; out->bcast[d] = in[0].bcast[d]; }
    int64_t n = 1;
    bool bc = true;
    for (int d = outdim - 1; d < in[0].ndim; d++) {
        n = in[0].shape[d] < 0 || n < 0 ? -1 : n * in[0].shape[d];
        bc = bc && in[0].bcast[d];
    }
    out->shape[outdim - 1] = n;
    out->bcast[outdim - 1] = bc;
    return TN_OK;
}

/* NumPy broadcasting of `from` to a target shape; unknown dims (-1) on
   either side pass, known mismatches are errors naming `who`. */
static tn_result tn__infer_bcast_to(const char *who, const tn_type *from, int nd, const int64_t *shape, tn_type *out) {
    char s1[128], s2[128];
    if (from->ndim > nd)
        return tn__err(TN_ERR_SHAPE, "%s: cannot broadcast %s to %s: the target has fewer dims", who,
                       tn__shape_str(from->ndim, from->shape, s1), tn__shape_str(nd, shape, s2));
    int off = nd - from->ndim;
    out->ndim = nd;
    for (int d = 0; d < nd; d++) {
        out->shape[d] = shape[d];
        out->bcast[d] = shape[d] == 1;
        if (d < off) continue;
        int64_t s = from->shape[d - off];
        if (s >= 0 && s != 1 && shape[d] >= 0 && s != shape[d])
            return tn__err(TN_ERR_SHAPE, "%s: cannot broadcast %s to %s (dim %d: %lld vs %lld)", who,
                           tn__shape_str(from->ndim, from->shape, s1), tn__shape_str(nd, shape, s2), d,
                           (long long)s, (long long)shape[d]);
        if (shape[d] < 0 && s >= 0 && s != 1) out->shape[d] = s;   /* the known side tells */
    }
    return TN_OK;
}

static tn_result tn__infer_broadcast_to(const tn_var *node, const tn_type *in, tn_type *out) {
    out->dtype = in[0].dtype;
    return tn__infer_bcast_to("BroadcastTo", &in[0], (int)node->p.i[TN__P_NDIM], node->p.i, out);
}

static tn_result tn__infer_concatenate(const tn_var *node, const tn_type *in, tn_type *out) {
    int n = node->n_in, ax = (int)node->p.i[0];
    char s1[128], s2[128];
    if (n < 1) return tn__err(TN_ERR_INVALID, "Join: needs at least one input");
    int nd = in[0].ndim;
    if (ax < 0 || ax >= nd)
        return tn__err(TN_ERR_AXIS, "Join: axis %d is out of range for inputs of %d dims", ax, nd);
    *out = in[0];
    out->bcast[ax] = false;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (in[i].ndim != nd)
            return tn__err(TN_ERR_SHAPE, "Join: input %d has %d dims %s but input 0 has %d %s", i, in[i].ndim,
                           tn__shape_str(in[i].ndim, in[i].shape, s1), nd, tn__shape_str(nd, in[0].shape, s2));
        if (i > 0) out->dtype = tn_dtype_promote(out->dtype, in[i].dtype);
        for (int d = 0; d < nd; d++) {
            if (d == ax) continue;
            if (in[i].shape[d] >= 0 && out->shape[d] >= 0 && in[i].shape[d] != out->shape[d])
                return tn__err(TN_ERR_SHAPE, "Join: input %d has shape %s, which differs from %s off axis %d (dim %d)", i,
                               tn__shape_str(nd, in[i].shape, s1), tn__shape_str(nd, in[0].shape, s2), ax, d);
            if (out->shape[d] < 0) out->shape[d] = in[i].shape[d];
            out->bcast[d] = out->bcast[d] || in[i].bcast[d];
        }
        total = in[i].shape[ax] < 0 || total < 0 ? -1 : total + in[i].shape[ax];
    }
    out->shape[ax] = total;
    return TN_OK;
}

/* ALLOC: in[0] the value, broadcast to i[0..ndim) or, with a second input
   `like`, to like's shape (known only at call time when like's is). */
static tn_result tn__infer_alloc(const tn_var *node, const tn_type *in, tn_type *out) {
    const tn_var *value = node->in ? node->in[0] : NULL;
    bool weak = value && (value->flags & TN_VAR_WEAK);
    tn_result r;
    if (node->n_in < 1 || node->n_in > 2)
        return tn__err(TN_ERR_INVALID, "Alloc: takes a value and optionally a `like` input, got %d inputs", node->n_in);
    if (node->n_in == 2) {
        r = tn__infer_bcast_to("Alloc", &in[0], in[1].ndim, in[1].shape, out);
        for (int d = 0; d < in[1].ndim; d++) out->bcast[d] = in[1].bcast[d];
        out->dtype = weak ? in[1].dtype : in[0].dtype;
    } else {
        r = tn__infer_bcast_to("Alloc", &in[0], (int)node->p.i[TN__P_NDIM], node->p.i, out);
        out->dtype = weak && tn_dtype_is_float(in[0].dtype) ? tn_get_config()->floatX : in[0].dtype;
    }
    return r;
}

static tn_result tn__infer_eye(const tn_var *node, const tn_type *in, tn_type *out) {
    (void)in;
    memset(out, 0, sizeof *out);
    out->dtype = (tn_dtype)node->p.i[TN__P_DTYPE];
    out->ndim = 2;
    out->shape[0] = node->p.i[0];
    out->shape[1] = node->p.i[1];
    for (int d = 0; d < 2; d++) out->bcast[d] = out->shape[d] == 1;
    return TN_OK;
}

static tn_result tn__infer_arange(const tn_var *node, const tn_type *in, tn_type *out) {
    (void)in;
    memset(out, 0, sizeof *out);
    int64_t n;
    tn_result r = tn__arange_len("ARange", node->p.f[0], node->p.f[1], node->p.f[2], &n);
    if (r != TN_OK) return r;
    out->dtype = (tn_dtype)node->p.i[TN__P_DTYPE];
    out->ndim = 1;
    out->shape[0] = n;
    out->bcast[0] = n == 1;
    return TN_OK;
}

/* >>shape_kernels -------------------------------------------------------- */

/* A view kernel's output: in[0]'s storage, with shape and strides given. */
static void tn__set_view(tn_array *o, const tn_array *src, int nd, const int64_t *shape, const int64_t *strides, const char *data) {
    o->dtype = src->dtype;
    o->ndim = nd;
    for (int d = 0; d < nd; d++) { o->shape[d] = shape[d]; o->strides[d] = strides[d]; }
    o->data = (void *)data;
    o->base = src->base;
    o->device = src->device;
}

static tn_result tn__cpu_dimshuffle(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    int nd = (int)node->p.i[TN__P_NDIM];
    int64_t sh[TN_MAX_DIMS], st[TN_MAX_DIMS];
    for (int k = 0; k < nd; k++) {
        int64_t ax = node->p.i[k];
        if (ax < 0) { sh[k] = 1; st[k] = 0; }
        else { sh[k] = x->shape[ax]; st[k] = x->strides[ax]; }
    }
    tn__set_view(out[0], x, nd, sh, st, (const char *)x->data);
    return TN_OK;
}

static tn_result tn__cpu_slice(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    int64_t sh[TN_MAX_DIMS], st[TN_MAX_DIMS];
    const char *data = (const char *)x->data;
    for (int d = 0; d < x->ndim; d++) {
        int64_t start = node->p.i[3 * d], stop = node->p.i[3 * d + 1], step = node->p.i[3 * d + 2];
        if (step == TN_NONE) step = 1;
        int64_t first, count;
        tn__slice_resolve(x->shape[d], start, stop, step, &first, &count);
        sh[d] = count;
        st[d] = x->strides[d] * step;
        data += first * x->strides[d];
    }
    tn__set_view(out[0], x, x->ndim, sh, st, data);
    return TN_OK;
}

static tn_result tn__cpu_broadcast_to(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_array *x = in[0];
    int nd = (int)node->p.i[TN__P_NDIM];
    int64_t st[TN_MAX_DIMS];
    if (!tn__broadcast_strides(x, nd, node->p.i, st)) {
        char s1[128], s2[128];
        return tn__err(TN_ERR_SHAPE, "BroadcastTo: cannot broadcast %s to %s", tn__shape_str(x->ndim, x->shape, s1),
                       tn__shape_str(nd, node->p.i, s2));
    }
    tn__set_view(out[0], x, nd, node->p.i, st, (const char *)x->data);
    return TN_OK;
}

/* RESHAPE and FLATTEN: out[0]'s shape is the inferred one. A view when the
   executor aliased out[0] to in[0] and the layout allows; else a copy into
   out[0]'s own contiguous buffer. */
static tn_result tn__reshape_into(const char *who, const tn_array *x, tn_array *o) {
    if (o->data == x->data && o->base == x->base) {
        int64_t st[TN_MAX_DIMS];
        if (tn__reshape_strides(x->ndim, x->shape, x->strides, o->ndim, o->shape, st, tn_dtype_size(x->dtype))) {
            for (int d = 0; d < o->ndim; d++) o->strides[d] = st[d];
            return TN_OK;
        }
        char s1[128];
        return tn__err(TN_ERR_UNSUPPORTED, "%s: an input of shape %s with these strides cannot be reshaped without a copy", who,
                       tn__shape_str(x->ndim, x->shape, s1));
    }
    /* out[0] is a fresh contiguous buffer: write x's elements in C order */
    if (!tn_array_is_contiguous(o)) return tn__err(TN_ERR_INTERNAL, "%s: output buffer is not contiguous", who);
    int64_t cs[TN_MAX_DIMS];
    tn__contiguous_strides(o->dtype, x->ndim, x->shape, cs);
    tn__copy_strided(o->dtype, o->data, cs, x->dtype, x->data, x->strides, x->ndim, x->shape);
    return TN_OK;
}

static tn_result tn__cpu_reshape(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    (void)node;
    return tn__reshape_into("Reshape", in[0], out[0]);
}

static tn_result tn__cpu_flatten(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    (void)node;
    return tn__reshape_into("Flatten", in[0], out[0]);
}

/* Copies (and converts) the whole of src into dst, both of dst's shape. */
static void tn__copy_array(tn_array *dst, const tn_array *src) {
    tn__copy_strided(dst->dtype, dst->data, dst->strides, src->dtype, src->data, src->strides, dst->ndim, dst->shape);
}

static tn_result tn__cpu_concatenate(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn_array *o = out[0];
    int ax = (int)node->p.i[0];
    int64_t off = 0;
    for (int i = 0; i < node->n_in; i++) {
        const tn_array *x = in[i];
        if (x->ndim != o->ndim) return tn__err(TN_ERR_SHAPE, "Join: input %d has %d dims, output %d", i, x->ndim, o->ndim);
        tn_array part = *o;                       /* the output's slab for input i */
        part.shape[ax] = x->shape[ax];
        part.data = (char *)o->data + off * o->strides[ax];
        for (int d = 0; d < o->ndim; d++)
            if (d != ax && x->shape[d] != o->shape[d]) {
                char s1[128], s2[128];
                return tn__err(TN_ERR_SHAPE, "Join: input %d has shape %s, which does not fit %s off axis %d", i,
                               tn__shape_str(x->ndim, x->shape, s1), tn__shape_str(o->ndim, o->shape, s2), ax);
            }
        tn__copy_array(&part, x);
        off += x->shape[ax];
    }
    return TN_OK;
}

static tn_result tn__cpu_alloc(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    (void)node;
    tn_array *o = out[0];
    const tn_array *v = in[0];
    int64_t st[TN_MAX_DIMS];
    if (!tn__broadcast_strides(v, o->ndim, o->shape, st)) {
        char s1[128], s2[128];
        return tn__err(TN_ERR_SHAPE, "Alloc: cannot broadcast a value of shape %s to %s", tn__shape_str(v->ndim, v->shape, s1),
                       tn__shape_str(o->ndim, o->shape, s2));
    }
    if (tn_array_size(v) == 1 && tn_array_is_contiguous(o)) {
        /* one value: convert once, then fill by doubling copies */
        size_t es = tn_dtype_size(o->dtype);
        int64_t n = tn_array_size(o);
        if (n == 0) return TN_OK;
        char *p = (char *)o->data;
        tn__convert_row(o->dtype, p, (int64_t)es, v->dtype, (const char *)v->data, 0, 1);
        for (int64_t done = 1; done < n;) {
            int64_t k = done < n - done ? done : n - done;
            memcpy(p + done * (int64_t)es, p, (size_t)(k * (int64_t)es));
            done += k;
        }
        return TN_OK;
    }
    tn__copy_strided(o->dtype, o->data, o->strides, v->dtype, v->data, st, o->ndim, o->shape);
    return TN_OK;
}

static tn_result tn__cpu_eye(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    (void)in;
    tn_array *o = out[0];
    int64_t n = o->shape[0], m = o->shape[1], k = node->p.i[2];
    for (int64_t i = 0; i < n; i++) {
        char *row = (char *)o->data + i * o->strides[0];
        if (o->strides[1] == (int64_t)tn_dtype_size(o->dtype)) memset(row, 0, (size_t)(m * o->strides[1]));
        else for (int64_t j = 0; j < m; j++) tn__store_f(o->dtype, row + j * o->strides[1], 0);
        int64_t j = i + k;
        if (j >= 0 && j < m) tn__store_f(o->dtype, row + j * o->strides[1], 1);
    }
    return TN_OK;
}

static tn_result tn__cpu_arange(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    (void)in;
    tn_array *o = out[0];
    double start = node->p.f[0], step = node->p.f[2];
    for (int64_t i = 0; i < o->shape[0]; i++) tn__store_f(o->dtype, (char *)o->data + i * o->strides[0], start + (double)i * step);
    return TN_OK;
}

/* >>shape_labels: Theano's names ---------------------------------------- */

static void tn__label_reshape(const tn_var *node, char *buf, size_t cap) {
    snprintf(buf, cap, "Reshape{%d}", (int)node->p.i[TN__P_NDIM]);
}

static void tn__label_dimshuffle(const tn_var *node, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%sDimShuffle{", node->inplace ? "Inplace" : "");
    int nd = (int)node->p.i[TN__P_NDIM];
    for (int k = 0; k < nd && n < cap; k++) {
        if (node->p.i[k] < 0) n += (size_t)snprintf(buf + n, cap - n, "%sx", k ? "," : "");
        else n += (size_t)snprintf(buf + n, cap - n, "%s%lld", k ? "," : "", (long long)node->p.i[k]);
    }
    if (n < cap) snprintf(buf + n, cap - n, "}");
}

/* Subtensor{::, 1:3:} - one "start:stop:step" per dim up to the last sliced one. */
static void tn__label_slice(const tn_var *node, char *buf, size_t cap) {
    int nd = node->in && node->in[0] ? node->in[0]->type.ndim : TN_MAX_DIMS, last = -1;
    for (int d = 0; d < nd; d++) {
        const int64_t *s = &node->p.i[3 * d];
        if (s[0] != TN_NONE || s[1] != TN_NONE || (s[2] != TN_NONE && s[2] != 1)) last = d;
    }
    size_t n = (size_t)snprintf(buf, cap, "Subtensor{");
    if (last < 0 && n < cap) n += (size_t)snprintf(buf + n, cap - n, "::");
    for (int d = 0; d <= last && n < cap; d++) {
        const int64_t *s = &node->p.i[3 * d];
        if (d) n += (size_t)snprintf(buf + n, cap - n, ", ");
        for (int j = 0; j < 3 && n < cap; j++) {
            bool omit = s[j] == TN_NONE || (j == 2 && s[j] == 1);
            if (!omit) n += (size_t)snprintf(buf + n, cap - n, "%lld", (long long)s[j]);
            if (j < 2 && n < cap) n += (size_t)snprintf(buf + n, cap - n, ":");
        }
    }
    if (n < cap) snprintf(buf + n, cap - n, "}");
}

static void tn__label_flatten(const tn_var *node, char *buf, size_t cap) { snprintf(buf, cap, "Flatten{%d}", (int)node->p.i[0]); }

static void tn__label_broadcast_to(const tn_var *node, char *buf, size_t cap) {
    char sb[128];
    snprintf(buf, cap, "BroadcastTo{%s}", tn__shape_str((int)node->p.i[TN__P_NDIM], node->p.i, sb));
}

static void tn__label_concatenate(const tn_var *node, char *buf, size_t cap) { snprintf(buf, cap, "Join{axis=%d}", (int)node->p.i[0]); }
static void tn__label_alloc(const tn_var *node, char *buf, size_t cap) { (void)node; snprintf(buf, cap, "Alloc"); }
static void tn__label_eye(const tn_var *node, char *buf, size_t cap) { (void)node; snprintf(buf, cap, "Eye"); }
static void tn__label_arange(const tn_var *node, char *buf, size_t cap) { (void)node; snprintf(buf, cap, "ARange"); }

/* >>shape_constructors --------------------------------------------------- */

static tn_var *tn__null_arg(const char *who, const char *what) {
    tn__err(TN_ERR_NULL, "%s: %s is NULL (did an earlier call fail? %s)", who, what, tn_last_error());
    return NULL;
}

/* "'name' " or "" for messages */
static const char *tn__var_nm(const tn_var *v) { return v && v->name ? v->name : "?"; }

TN_API tn_var *tn_reshape(tn_var *x, int ndim, const int64_t *shape) {
    if (!x) return tn__null_arg("tn_reshape", "x");
    if (ndim < 0 || ndim > TN_MAX_DIMS) { tn__err(TN_ERR_INVALID, "tn_reshape: ndim %d is outside [0, %d]", ndim, TN_MAX_DIMS); return NULL; }
    if (ndim > 0 && !shape) return tn__null_arg("tn_reshape", "shape");
    tn_params p = tn__params_zero();
    for (int d = 0; d < ndim; d++) p.i[d] = shape[d];
    p.i[TN__P_NDIM] = ndim;
    return tn__node(x->graph, TN_OP_RESHAPE, 1, &x, &p, NULL, "tn_reshape");
}

TN_API tn_var *tn_dimshuffle(tn_var *x, int ndim, const int *pattern) {
    if (!x) return tn__null_arg("tn_dimshuffle", "x");
    if (ndim < 0 || ndim > TN_MAX_DIMS) { tn__err(TN_ERR_INVALID, "tn_dimshuffle: ndim %d is outside [0, %d]", ndim, TN_MAX_DIMS); return NULL; }
    if (ndim > 0 && !pattern) return tn__null_arg("tn_dimshuffle", "pattern");
    tn_params p = tn__params_zero();
    for (int k = 0; k < ndim; k++) {
        if (pattern[k] < -1) {
            tn__err(TN_ERR_AXIS, "tn_dimshuffle: pattern[%d] = %d: use an axis of '%s' (0..%d) or -1 for a new broadcastable dim",
                    k, pattern[k], tn__var_nm(x), x->type.ndim - 1);
            return NULL;
        }
        p.i[k] = pattern[k];
    }
    p.i[TN__P_NDIM] = ndim;
    return tn__node(x->graph, TN_OP_DIMSHUFFLE, 1, &x, &p, NULL, "tn_dimshuffle");
}

TN_API tn_var *tn_transpose(tn_var *x, const int *perm) {
    if (!x) return tn__null_arg("tn_transpose", "x");
    int nd = x->type.ndim, pat[TN_MAX_DIMS];
    bool seen[TN_MAX_DIMS] = {false};
    for (int k = 0; k < nd; k++) {
        int a = perm ? perm[k] : nd - 1 - k;
        if (a < 0) a += nd;
        if (a < 0 || a >= nd || seen[a]) {
            tn__err(TN_ERR_AXIS, "tn_transpose: perm[%d] = %d is %s for '%s' with %d dims", k, perm[k],
                    a >= 0 && a < nd ? "repeated" : "out of range", tn__var_nm(x), nd);
            return NULL;
        }
        seen[a] = true;
        pat[k] = a;
    }
    return tn_dimshuffle(x, nd, pat);
}

TN_API tn_var *tn_slice(tn_var *x, int axis, int64_t start, int64_t stop, int64_t step) {
    if (!x) return tn__null_arg("tn_slice", "x");
    int nd = x->type.ndim, ax = axis < 0 ? axis + nd : axis;
    if (ax < 0 || ax >= nd) {
        char sb[128];
        tn__err(TN_ERR_AXIS, "tn_slice: axis %d is out of range for '%s' of shape %s", axis, tn__var_nm(x),
                tn__shape_str(nd, x->type.shape, sb));
        return NULL;
    }
    if (step == 0) { tn__err(TN_ERR_INVALID, "tn_slice: slice step cannot be zero"); return NULL; }
    tn_params p = tn__params_zero();
    for (int d = 0; d < TN_MAX_DIMS; d++) p.i[3 * d] = p.i[3 * d + 1] = p.i[3 * d + 2] = TN_NONE;
    p.i[3 * ax] = start;
    p.i[3 * ax + 1] = stop;
    p.i[3 * ax + 2] = step == 1 ? TN_NONE : step;    /* one spelling per slice, so merge sees equal nodes */
    return tn__node(x->graph, TN_OP_SLICE, 1, &x, &p, NULL, "tn_slice");
}

TN_API tn_var *tn_flatten(tn_var *x, int outdim) {
    if (!x) return tn__null_arg("tn_flatten", "x");
    tn_params p = tn__params_zero();
    p.i[0] = outdim;
    return tn__node(x->graph, TN_OP_FLATTEN, 1, &x, &p, NULL, "tn_flatten");
}

TN_API tn_var *tn_broadcast_to(tn_var *x, int ndim, const int64_t *shape) {
    if (!x) return tn__null_arg("tn_broadcast_to", "x");
    if (ndim < 0 || ndim > TN_MAX_DIMS) { tn__err(TN_ERR_INVALID, "tn_broadcast_to: ndim %d is outside [0, %d]", ndim, TN_MAX_DIMS); return NULL; }
    if (ndim > 0 && !shape) return tn__null_arg("tn_broadcast_to", "shape");
    tn_params p = tn__params_zero();
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            char sb[128];
            tn__err(TN_ERR_SHAPE, "tn_broadcast_to: negative dimension in target shape %s", tn__shape_str(ndim, shape, sb));
            return NULL;
        }
        p.i[d] = shape[d];
    }
    p.i[TN__P_NDIM] = ndim;
    return tn__node(x->graph, TN_OP_BROADCAST_TO, 1, &x, &p, NULL, "tn_broadcast_to");
}

TN_API tn_var *tn_concatenate(int n, tn_var *const *xs, int axis) {
    if (n < 1 || !xs) { tn__err(TN_ERR_INVALID, "tn_concatenate: needs at least one input (n = %d)", n); return NULL; }
    for (int i = 0; i < n; i++)
        if (!xs[i]) { tn__err(TN_ERR_NULL, "tn_concatenate: input %d is NULL (did an earlier call fail? %s)", i, tn_last_error()); return NULL; }
    int nd = xs[0]->type.ndim, ax = axis < 0 ? axis + nd : axis;
    if (ax < 0 || ax >= nd) {
        tn__err(TN_ERR_AXIS, "tn_concatenate: axis %d is out of range for inputs of %d dims", axis, nd);
        return NULL;
    }
    tn_params p = tn__params_zero();
    p.i[0] = ax;
    return tn__node(xs[0]->graph, TN_OP_CONCATENATE, n, xs, &p, NULL, "tn_concatenate");
}

TN_API tn_var *tn_stack(int n, tn_var *const *xs, int axis) {
    if (n < 1 || !xs) { tn__err(TN_ERR_INVALID, "tn_stack: needs at least one input (n = %d)", n); return NULL; }
    for (int i = 0; i < n; i++)
        if (!xs[i]) { tn__err(TN_ERR_NULL, "tn_stack: input %d is NULL (did an earlier call fail? %s)", i, tn_last_error()); return NULL; }
    int nd = xs[0]->type.ndim, ax = axis < 0 ? axis + nd + 1 : axis;
    if (ax < 0 || ax > nd || nd + 1 > TN_MAX_DIMS) {
        tn__err(TN_ERR_AXIS, "tn_stack: axis %d is out of range for inputs of %d dims", axis, nd);
        return NULL;
    }
    tn_var *stack_in[64], **ex = n <= 64 ? stack_in : (tn_var **)tn__malloc((size_t)n * sizeof *ex);
    if (!ex) { tn__err(TN_ERR_OOM, "tn_stack: out of memory"); return NULL; }
    tn_var *r = NULL;
    for (int i = 0; i < n; i++) {
        if (xs[i]->type.ndim != nd) {
            char s1[128], s2[128];
            tn__err(TN_ERR_SHAPE, "tn_stack: input %d has shape %s but input 0 has %s; all inputs need the same shape", i,
                    tn__shape_str(xs[i]->type.ndim, xs[i]->type.shape, s1), tn__shape_str(nd, xs[0]->type.shape, s2));
            goto done;
        }
        int pat[TN_MAX_DIMS];
        for (int k = 0, d = 0; k <= nd; k++) pat[k] = k == ax ? -1 : d++;
        if (!(ex[i] = tn_dimshuffle(xs[i], nd + 1, pat))) goto done;
    }
    r = tn_concatenate(n, ex, ax);
    if (!r && strncmp(tn_last_error(), "tn_stack", 8) != 0) tn__err(tn_last_result(), "tn_stack: %s", tn_last_error());
done:
    if (ex != stack_in) tn__free(ex);
    return r;
}

TN_API tn_var *tn_alloc(tn_var *value, int ndim, const int64_t *shape) {
    if (!value) return tn__null_arg("tn_alloc", "value");
    if (ndim < 0 || ndim > TN_MAX_DIMS) { tn__err(TN_ERR_INVALID, "tn_alloc: ndim %d is outside [0, %d]", ndim, TN_MAX_DIMS); return NULL; }
    if (ndim > 0 && !shape) return tn__null_arg("tn_alloc", "shape");
    tn_params p = tn__params_zero();
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            char sb[128];
            tn__err(TN_ERR_SHAPE, "tn_alloc: negative dimension in shape %s", tn__shape_str(ndim, shape, sb));
            return NULL;
        }
        p.i[d] = shape[d];
    }
    p.i[TN__P_NDIM] = ndim;
    return tn__node(value->graph, TN_OP_ALLOC, 1, &value, &p, NULL, "tn_alloc");
}

TN_API tn_var *tn_fill(tn_var *like, tn_var *value) {
    if (!like) return tn__null_arg("tn_fill", "like");
    if (!value) return tn__null_arg("tn_fill", "value");
    tn_params p = tn__params_zero();
    p.i[TN__P_NDIM] = like->type.ndim;
    tn_var *in[2] = { value, like };
    return tn__node(like->graph, TN_OP_ALLOC, 2, in, &p, NULL, "tn_fill");
}

static tn_dtype tn__float_or_x(tn_dtype t) { return t == TN_DTYPE_NONE ? tn_get_config()->floatX : t; }

TN_API tn_var *tn_eye(tn_graph *g, tn_dtype t, int64_t n, int64_t m, int64_t k) {
    if (!g) return tn__null_arg("tn_eye", "graph");
    t = tn__float_or_x(t);
    if (t < TN_BOOL || t >= TN_DTYPE_COUNT) { tn__err(TN_ERR_DTYPE, "tn_eye: invalid dtype %d", (int)t); return NULL; }
    if (m < 0) m = n;                                 /* NumPy's M=None */
    if (n < 0) { tn__err(TN_ERR_SHAPE, "tn_eye: n = %lld is negative", (long long)n); return NULL; }
    tn_params p = tn__params_zero();
    p.i[0] = n; p.i[1] = m; p.i[2] = k;
    p.i[TN__P_DTYPE] = t;
    return tn__node(g, TN_OP_EYE, 0, NULL, &p, NULL, "tn_eye");
}

TN_API tn_var *tn_arange(tn_graph *g, tn_dtype t, double start, double stop, double step) {
    if (!g) return tn__null_arg("tn_arange", "graph");
    t = tn__float_or_x(t);
    if (t < TN_BOOL || t >= TN_DTYPE_COUNT) { tn__err(TN_ERR_DTYPE, "tn_arange: invalid dtype %d", (int)t); return NULL; }
    int64_t n;
    if (tn__arange_len("tn_arange", start, stop, step, &n) != TN_OK) return NULL;
    tn_params p = tn__params_zero();
    p.f[0] = start; p.f[1] = stop; p.f[2] = step;
    p.i[TN__P_DTYPE] = t;
    return tn__node(g, TN_OP_ARANGE, 0, NULL, &p, NULL, "tn_arange");
}

/* >>registry: fills this part's rows of the op table */
static void tn__register_shape_ops(tn_op_def *t) {
    t[TN_OP_RESHAPE] = (tn_op_def){ "Reshape", TN_OPK_SHAPE, 1, tn__infer_reshape, tn__cpu_reshape, tn__label_reshape };
    t[TN_OP_DIMSHUFFLE] = (tn_op_def){ "DimShuffle", TN_OPK_VIEW, 1, tn__infer_dimshuffle, tn__cpu_dimshuffle, tn__label_dimshuffle };
    t[TN_OP_SLICE] = (tn_op_def){ "Subtensor", TN_OPK_VIEW, 1, tn__infer_slice, tn__cpu_slice, tn__label_slice };
    t[TN_OP_BROADCAST_TO] = (tn_op_def){ "BroadcastTo", TN_OPK_VIEW, 1, tn__infer_broadcast_to, tn__cpu_broadcast_to, tn__label_broadcast_to };
    t[TN_OP_FLATTEN] = (tn_op_def){ "Flatten", TN_OPK_SHAPE, 1, tn__infer_flatten, tn__cpu_flatten, tn__label_flatten };
    t[TN_OP_CONCATENATE] = (tn_op_def){ "Join", TN_OPK_SHAPE, -1, tn__infer_concatenate, tn__cpu_concatenate, tn__label_concatenate };
    t[TN_OP_ALLOC] = (tn_op_def){ "Alloc", TN_OPK_SHAPE, -1, tn__infer_alloc, tn__cpu_alloc, tn__label_alloc };
    t[TN_OP_EYE] = (tn_op_def){ "Eye", TN_OPK_SHAPE, 0, tn__infer_eye, tn__cpu_eye, tn__label_eye };
    t[TN_OP_ARANGE] = (tn_op_def){ "ARange", TN_OPK_SHAPE, 0, tn__infer_arange, tn__cpu_arange, tn__label_arange };
}
