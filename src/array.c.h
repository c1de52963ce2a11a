/* >>arrays: buffers, creation, views, conversion, random, printing */
#include <float.h>

/* >>buffer: refcounted storage. Host memory is 64-byte aligned (SIMD loads,
   no false sharing between arrays); device memory comes from the back end's
   tn_device_ops. A buffer that does not own its memory (tn_array_wrap) only
   counts references. */
struct tn_buffer {
    long refcount;          /* __atomic builtins: views may be freed on several threads */
    void *data;             /* first byte (aligned) */
    void *raw;              /* what the allocator returned (host) */
    size_t bytes;
    int device;             /* TN_HOST or a CUDA ordinal */
    bool owns;
};

static const tn_device_ops *tn__device_ops;
TN_API void tn__set_device_ops(const tn_device_ops *ops) { tn__device_ops = ops; }
TN_API const tn_device_ops *tn__get_device_ops(void) { return tn__device_ops; }

#define TN__ALIGN 64

static tn_buffer *tn__buffer_new(size_t bytes, int device) {
    tn_buffer *b = (tn_buffer *)tn__calloc(1, sizeof *b);
    if (!b) return NULL;
    b->refcount = 1;
    b->bytes = bytes;
    b->device = device;
    b->owns = true;
    if (device == TN_HOST) {
        if (bytes > SIZE_MAX - TN__ALIGN) { tn__free(b); return NULL; }
        b->raw = tn__malloc(bytes + TN__ALIGN);
        if (!b->raw) { tn__free(b); return NULL; }
        uintptr_t p = ((uintptr_t)b->raw + TN__ALIGN - 1) & ~(uintptr_t)(TN__ALIGN - 1);
        b->data = (void *)p;
    } else {
        const tn_device_ops *ops = tn__device_ops;
        b->data = ops && ops->alloc ? ops->alloc(device, bytes ? bytes : 1) : NULL;
        if (!b->data) { tn__free(b); return NULL; }
    }
    return b;
}

static tn_buffer *tn__buffer_borrow(void *data, size_t bytes, int device) {
    tn_buffer *b = (tn_buffer *)tn__calloc(1, sizeof *b);
    if (!b) return NULL;
    b->refcount = 1;
    b->data = data;
    b->bytes = bytes;
    b->device = device;
    b->owns = false;
    return b;
}

TN_API void tn__buffer_retain(tn_buffer *b) {
    if (b) __atomic_fetch_add(&b->refcount, 1, __ATOMIC_RELAXED);
}

TN_API void tn__buffer_release(tn_buffer *b) {
    if (!b || __atomic_sub_fetch(&b->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (b->owns) {
        if (b->device == TN_HOST) tn__free(b->raw);
        else if (tn__device_ops && tn__device_ops->free) tn__device_ops->free(b->device, b->data);
    }
    tn__free(b);
}

/* >>array_basics */

TN_API void tn__contiguous_strides(tn_dtype t, int ndim, const int64_t *shape, int64_t *strides) {
    int64_t s = (int64_t)tn_dtype_size(t);
    for (int d = ndim - 1; d >= 0; d--) {
        strides[d] = s;
        s *= shape[d] > 0 ? shape[d] : 1;
    }
}

static int64_t tn__shape_size(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

/* Checks a user-given dtype, rank and shape; `who` names the caller. */
static tn_result tn__check_shape(const char *who, tn_dtype t, int ndim, const int64_t *shape) {
    if (t <= TN_DTYPE_NONE || t >= TN_DTYPE_COUNT)
        return tn__err(TN_ERR_DTYPE, "%s: invalid dtype %d", who, (int)t);
    if (ndim < 0 || ndim > TN_MAX_DIMS)
        return tn__err(TN_ERR_INVALID, "%s: ndim %d is outside [0, %d]", who, ndim, TN_MAX_DIMS);
    if (ndim > 0 && !shape) return tn__err(TN_ERR_NULL, "%s: shape is NULL for ndim %d", who, ndim);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) {
            char sb[128];
            return tn__err(TN_ERR_SHAPE, "%s: negative dimension in shape %s", who, tn__shape_str(ndim, shape, sb));
        }
        if (shape[d] && n > INT64_MAX / 16 / shape[d]) {
            char sb[128];
            return tn__err(TN_ERR_SHAPE, "%s: shape %s is too large", who, tn__shape_str(ndim, shape, sb));
        }
        n *= shape[d];
    }
    return TN_OK;
}

TN_API tn_array *tn__array_from_buffer(tn_buffer *b, tn_dtype t, int ndim, const int64_t *shape,
                                       const int64_t *strides, void *data, int device) {
    tn_array *a = (tn_array *)tn__calloc(1, sizeof *a);
    if (!a) { tn__err(TN_ERR_OOM, "tn__array_from_buffer: out of memory"); return NULL; }
    a->dtype = t;
    a->ndim = ndim;
    for (int d = 0; d < ndim; d++) a->shape[d] = shape[d];
    if (strides) for (int d = 0; d < ndim; d++) a->strides[d] = strides[d];
    else tn__contiguous_strides(t, ndim, shape, a->strides);
    a->data = data;
    a->device = device;
    a->base = b;
    tn__buffer_retain(b);       /* the array holds its own reference */
    return a;
}

TN_API tn_array *tn__array_alloc(tn_dtype t, int ndim, const int64_t *shape, int device) {
    if (tn__check_shape("tn__array_alloc", t, ndim, shape) != TN_OK) return NULL;
    size_t bytes = (size_t)tn__shape_size(ndim, shape) * tn_dtype_size(t);
    if (device != TN_HOST && !(tn__device_ops && tn__device_ops->alloc)) {
        tn__err(TN_ERR_DEVICE, "tn__array_alloc: no device back end for device %d", device);
        return NULL;
    }
    tn_buffer *b = tn__buffer_new(bytes, device);
    if (!b) {
        char sb[128];
        tn__err(TN_ERR_OOM, "tn__array_alloc: out of %s memory for %s %s (%zu bytes)",
                device == TN_HOST ? "host" : "device", tn_dtype_name(t), tn__shape_str(ndim, shape, sb), bytes);
        return NULL;
    }
    tn_array *a = tn__array_from_buffer(b, t, ndim, shape, NULL, b->data, device);
    tn__buffer_release(b);
    return a;
}

TN_API void tn_array_free(tn_array *a) {
    if (!a || a->live_gen) return;      /* borrowed: the function owns it */
    tn__buffer_release(a->base);
    tn__free(a);
}

TN_API int64_t tn_array_size(const tn_array *a) { return a ? tn__shape_size(a->ndim, a->shape) : 0; }
TN_API size_t tn_array_nbytes(const tn_array *a) { return a ? (size_t)tn_array_size(a) * tn_dtype_size(a->dtype) : 0; }

TN_API bool tn_array_is_contiguous(const tn_array *a) {
    if (!a) return false;
    int64_t s = (int64_t)tn_dtype_size(a->dtype);
    for (int d = a->ndim - 1; d >= 0; d--) {
        if (a->shape[d] == 0) return true;
        if (a->shape[d] != 1 && a->strides[d] != s) return false;
        s *= a->shape[d];
    }
    return true;
}

TN_API tn_result tn_array_check(const tn_array *a) {
    if (!a) return tn__err(TN_ERR_NULL, "tn_array_check: array is NULL");
    if (a->live_gen && a->gen != *a->live_gen)
        return tn__err(TN_ERR_STALE, "tn_array_check: stale borrowed array: it was returned by call %llu of its "
                       "function, which has since been called again (now call %llu) and overwrote it; copy a "
                       "borrowed output (tn_array_copy) before the next call, or compile without borrow",
                       (unsigned long long)a->gen, (unsigned long long)*a->live_gen);
    return TN_OK;
}

/* Every entry point that reads an array's values checks it first. */
static tn_result tn__array_readable(const tn_array *a, const char *who) {
    if (!a) return tn__err(TN_ERR_NULL, "%s: array is NULL", who);
#if TN_DEBUG_BORROW
    if (tn_array_check(a) != TN_OK) return tn__err(TN_ERR_STALE, "%s: %s", who, tn_last_error() + strlen("tn_array_check: "));
#endif
    return TN_OK;
}

/* >>convert: one element between dtypes. Ints go through int64 (exact),
   floats through double; float -> int truncates toward zero and saturates
   (NaN gives 0) so no conversion is undefined behaviour. */

static inline double tn__load_f(tn_dtype t, const void *p) {
    switch (t) {
    case TN_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    case TN_I32: return (double)*(const int32_t *)p;
    case TN_I64: return (double)*(const int64_t *)p;
    case TN_F16: return (double)tn_f16_to_f32(*(const uint16_t *)p);
    case TN_F32: return (double)*(const float *)p;
    case TN_F64: return *(const double *)p;
    default: return 0.0;
    }
}

static inline int64_t tn__f2i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}

static inline int64_t tn__load_i(tn_dtype t, const void *p) {
    switch (t) {
    case TN_BOOL: return *(const uint8_t *)p != 0;
    case TN_I32: return *(const int32_t *)p;
    case TN_I64: return *(const int64_t *)p;
    default: return tn__f2i64(tn__load_f(t, p));
    }
}

static inline void tn__store_f(tn_dtype t, void *p, double v) {
    switch (t) {
    case TN_BOOL: *(uint8_t *)p = v != 0; break;
    case TN_I32: {
        int64_t i = tn__f2i64(v);
        *(int32_t *)p = (int32_t)(i > INT32_MAX ? INT32_MAX : i < INT32_MIN ? INT32_MIN : i);
        break;
    }
    case TN_I64: *(int64_t *)p = tn__f2i64(v); break;
    case TN_F16: *(uint16_t *)p = tn_f32_to_f16((float)v); break;
    case TN_F32: *(float *)p = (float)v; break;
    case TN_F64: *(double *)p = v; break;
    default: break;
    }
}

static inline void tn__store_i(tn_dtype t, void *p, int64_t v) {
    switch (t) {
    case TN_BOOL: *(uint8_t *)p = v != 0; break;
    case TN_I32: *(int32_t *)p = (int32_t)(uint32_t)(uint64_t)v; break;   /* wraps like NumPy */
    case TN_I64: *(int64_t *)p = v; break;
    default: tn__store_f(t, p, (double)v); break;
    }
}

static inline bool tn__is_int_like(tn_dtype t) { return t == TN_BOOL || t == TN_I32 || t == TN_I64; }

/* Converts n elements from src (stride ss bytes) to dst (stride ds bytes). */
static void tn__convert_row(tn_dtype dt, char *dst, int64_t ds, tn_dtype st, const char *src, int64_t ss, int64_t n) {
    if (dt == st) {
        size_t es = tn_dtype_size(dt);
        if (ds == (int64_t)es && ss == (int64_t)es) { memcpy(dst, src, (size_t)n * es); return; }
        switch (es) {
        case 1: for (int64_t i = 0; i < n; i++) dst[i * ds] = src[i * ss]; return;
        case 2: for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, 2); return;
        case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, 4); return;
        default: for (int64_t i = 0; i < n; i++) memcpy(dst + i * ds, src + i * ss, 8); return;
        }
    }
    if (dt == TN_F32 && st == TN_F64) {
        for (int64_t i = 0; i < n; i++) { double v; memcpy(&v, src + i * ss, 8); float f = (float)v; memcpy(dst + i * ds, &f, 4); }
        return;
    }
    if (dt == TN_F64 && st == TN_F32) {
        for (int64_t i = 0; i < n; i++) { float f; memcpy(&f, src + i * ss, 4); double v = f; memcpy(dst + i * ds, &v, 8); }
        return;
    }
    if (tn__is_int_like(st) && tn__is_int_like(dt)) {
        for (int64_t i = 0; i < n; i++) tn__store_i(dt, dst + i * ds, tn__load_i(st, src + i * ss));
        return;
    }
    if (tn__is_int_like(st)) {
        for (int64_t i = 0; i < n; i++) tn__store_f(dt, dst + i * ds, (double)tn__load_i(st, src + i * ss));
        return;
    }
    for (int64_t i = 0; i < n; i++) tn__store_f(dt, dst + i * ds, tn__load_f(st, src + i * ss));
}

/* >>strided_copy: dst[idx] = convert(src[idx]) over a shape, any strides on
   either side. Dims are coalesced first so a contiguous copy is one row;
   large copies are split over threads by outer rows. */
typedef struct tn__copy_job {
    int ndim;                       /* dims after coalescing; the last is the row */
    int64_t shape[TN_MAX_DIMS];
    int64_t dst_strides[TN_MAX_DIMS], src_strides[TN_MAX_DIMS];
    char *dst; const char *src;
    tn_dtype dt, st;
} tn__copy_job;

static void tn__copy_rows(void *ctx, int64_t lo, int64_t hi) {
    const tn__copy_job *j = (const tn__copy_job *)ctx;
    int nd = j->ndim;
    int64_t idx[TN_MAX_DIMS] = {0};
    int64_t r = lo;
    for (int d = nd - 2; d >= 0; d--) { idx[d] = r % j->shape[d]; r /= j->shape[d]; }
    for (int64_t row = lo; row < hi; row++) {
        int64_t doff = 0, soff = 0;
        for (int d = 0; d < nd - 1; d++) { doff += idx[d] * j->dst_strides[d]; soff += idx[d] * j->src_strides[d]; }
        tn__convert_row(j->dt, j->dst + doff, j->dst_strides[nd - 1], j->st, j->src + soff,
                        j->src_strides[nd - 1], j->shape[nd - 1]);
        for (int d = nd - 2; d >= 0; d--) { if (++idx[d] < j->shape[d]) break; idx[d] = 0; }
    }
}

static void tn__copy_strided(tn_dtype dt, void *dst, const int64_t *dstr, tn_dtype st, const void *src,
                             const int64_t *sstr, int ndim, const int64_t *shape) {
    tn__copy_job j;
    memset(&j, 0, sizeof j);
    j.dst = (char *)dst; j.src = (const char *)src; j.dt = dt; j.st = st;
    int64_t n = tn__shape_size(ndim, shape);
    if (n == 0) return;
    /* Drop size-1 dims, then merge a dim into the next when both sides allow. */
    int nd = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (nd > 0 && j.dst_strides[nd - 1] == dstr[d] * shape[d] && j.src_strides[nd - 1] == sstr[d] * shape[d]) {
            j.shape[nd - 1] *= shape[d];
            j.dst_strides[nd - 1] = dstr[d];
            j.src_strides[nd - 1] = sstr[d];
            continue;
        }
        j.shape[nd] = shape[d]; j.dst_strides[nd] = dstr[d]; j.src_strides[nd] = sstr[d];
        nd++;
    }
    if (nd == 0) { j.shape[0] = 1; j.dst_strides[0] = j.src_strides[0] = 0; nd = 1; }
    j.ndim = nd;
    int64_t rows = n / j.shape[nd - 1];
    int64_t grain = 1 + (1 << 16) / j.shape[nd - 1];   /* ~64K elements per task */
    if (n < (1 << 17)) tn__copy_rows(&j, 0, rows);
    else tn__parallel_for(rows, grain, tn__copy_rows, &j);
}

/* Byte span [lo, hi) that the view a touches, relative to a->data. */
static void tn__array_span(const tn_array *a, int64_t *lo, int64_t *hi) {
    int64_t l = 0, h = 0;
    for (int d = 0; d < a->ndim; d++) {
        if (a->shape[d] == 0) { *lo = *hi = 0; return; }
        int64_t ext = (a->shape[d] - 1) * a->strides[d];
        if (ext < 0) l += ext; else h += ext;
    }
    *lo = l;
    *hi = h + (int64_t)tn_dtype_size(a->dtype);
}

/* A host array with a's values (a itself, retained as a view, when on the
   host). Device arrays: the span they touch is copied down, keeping strides. */
static tn_array *tn__host_view(const tn_array *a, const char *who) {
    if (a->device == TN_HOST) return tn__array_from_buffer(a->base, a->dtype, a->ndim, a->shape, a->strides, a->data, TN_HOST);
    const tn_device_ops *ops = tn__device_ops;
    if (!ops || !ops->copy) {
        tn__err(TN_ERR_DEVICE, "%s: the array lives on device %d but no device back end is loaded", who, a->device);
        return NULL;
    }
    int64_t lo, hi;
    tn__array_span(a, &lo, &hi);
    tn_buffer *b = tn__buffer_new((size_t)(hi - lo), TN_HOST);
    if (!b) { tn__err(TN_ERR_OOM, "%s: out of host memory copying a device array", who); return NULL; }
    if (hi > lo) {
        tn_result r = ops->copy(b->data, TN_HOST, (const char *)a->data + lo, a->device, (size_t)(hi - lo));
        if (r != TN_OK) { tn__buffer_release(b); return NULL; }
    }
    tn_array *h = tn__array_from_buffer(b, a->dtype, a->ndim, a->shape, a->strides, (char *)b->data - lo, TN_HOST);
    tn__buffer_release(b);
    return h;
}

TN_API tn_result tn_array_copy_to(const tn_array *a, tn_dtype t, void *dst, size_t capacity) {
    tn_result r = tn__array_readable(a, "tn_array_copy_to");
    if (r != TN_OK) return r;
    if (!dst && tn_array_size(a) > 0) return tn__err(TN_ERR_NULL, "tn_array_copy_to: dst is NULL");
    if (t == TN_DTYPE_NONE) t = a->dtype;
    if (t < TN_BOOL || t >= TN_DTYPE_COUNT) return tn__err(TN_ERR_DTYPE, "tn_array_copy_to: invalid dtype %d", (int)t);
    size_t need = (size_t)tn_array_size(a) * tn_dtype_size(t);
    if (capacity < need) {
        char sb[128];
        return tn__err(TN_ERR_INVALID, "tn_array_copy_to: dst holds %zu bytes but the %s array %s as %s needs %zu",
                       capacity, tn_dtype_name(a->dtype), tn__shape_str(a->ndim, a->shape, sb), tn_dtype_name(t), need);
    }
    if (a->device != TN_HOST && t == a->dtype && tn_array_is_contiguous(a) && tn__device_ops && tn__device_ops->copy)
        return need ? tn__device_ops->copy(dst, TN_HOST, a->data, a->device, need) : TN_OK;
    tn_array *h = tn__host_view(a, "tn_array_copy_to");
    if (!h) return tn_last_result();
    int64_t cs[TN_MAX_DIMS];
    tn__contiguous_strides(t, a->ndim, a->shape, cs);
    tn__copy_strided(t, dst, cs, h->dtype, h->data, h->strides, h->ndim, h->shape);
    tn_array_free(h);
    return TN_OK;
}

TN_API tn_array *tn_array_astype(const tn_array *a, tn_dtype t) {
    if (tn__array_readable(a, "tn_array_astype") != TN_OK) return NULL;
    if (t == TN_DTYPE_NONE) t = a->dtype;
    if (t < TN_BOOL || t >= TN_DTYPE_COUNT) { tn__err(TN_ERR_DTYPE, "tn_array_astype: invalid dtype %d", (int)t); return NULL; }
    tn_array *c = tn__array_alloc(t, a->ndim, a->shape, TN_HOST);
    if (!c) return NULL;
    if (tn_array_copy_to(a, t, c->data, tn_array_nbytes(c)) != TN_OK) { tn_array_free(c); return NULL; }
    return c;
}

TN_API tn_array *tn_array_copy(const tn_array *a) {
    if (!a) { tn__err(TN_ERR_NULL, "tn_array_copy: array is NULL"); return NULL; }
    return tn_array_astype(a, a->dtype);
}

TN_API tn_array *tn_array_to_host(const tn_array *a) {
    if (tn__array_readable(a, "tn_array_to_host") != TN_OK) return NULL;
    return tn_array_astype(a, a->dtype);
}

/* NumPy broadcasting of src's strides onto dst's shape; false if impossible. */
static bool tn__broadcast_strides(const tn_array *src, int ndim, const int64_t *shape, int64_t *strides) {
    if (src->ndim > ndim) return false;
    int off = ndim - src->ndim;
    for (int d = 0; d < ndim; d++) {
        if (d < off) { strides[d] = 0; continue; }
        int64_t s = src->shape[d - off];
        if (s == shape[d]) strides[d] = s == 1 ? 0 : src->strides[d - off];
        else if (s == 1) strides[d] = 0;
        else return false;
    }
    return true;
}

TN_API tn_result tn_array_assign(tn_array *dst, const tn_array *src) {
    if (!dst) return tn__err(TN_ERR_NULL, "tn_array_assign: dst is NULL");
    tn_result r = tn__array_readable(src, "tn_array_assign");
    if (r != TN_OK) return r;
    int64_t bstr[TN_MAX_DIMS];
    if (!tn__broadcast_strides(src, dst->ndim, dst->shape, bstr)) {
        char s1[128], s2[128];
        return tn__err(TN_ERR_SHAPE, "tn_array_assign: cannot assign src %s to dst %s",
                       tn__shape_str(src->ndim, src->shape, s1), tn__shape_str(dst->ndim, dst->shape, s2));
    }
    if (tn_array_size(dst) == 0) return TN_OK;
    if (dst->device == TN_HOST) {
        tn_array *h = tn__host_view(src, "tn_array_assign");
        if (!h) return tn_last_result();
        /* Source and destination may overlap (a view of the same buffer): go through a copy. */
        bool same = h->base && h->base == dst->base;
        tn_array *c = same ? tn_array_copy(h) : NULL;
        if (same && !c) { tn_array_free(h); return tn_last_result(); }
        const tn_array *s = c ? c : h;
        tn__broadcast_strides(s, dst->ndim, dst->shape, bstr);
        tn__copy_strided(dst->dtype, dst->data, dst->strides, s->dtype, s->data, bstr, dst->ndim, dst->shape);
        tn_array_free(c);
        tn_array_free(h);
        return TN_OK;
    }
    /* Device destination: build the converted values on the host, then copy up. */
    if (!tn_array_is_contiguous(dst))
        return tn__err(TN_ERR_UNSUPPORTED, "tn_array_assign: dst on device %d must be contiguous", dst->device);
    if (!tn__device_ops || !tn__device_ops->copy)
        return tn__err(TN_ERR_DEVICE, "tn_array_assign: dst lives on device %d but no device back end is loaded", dst->device);
    tn_array *h = tn__host_view(src, "tn_array_assign");
    if (!h) return tn_last_result();
    tn_array *c = tn__array_alloc(dst->dtype, dst->ndim, dst->shape, TN_HOST);
    if (!c) { tn_array_free(h); return tn_last_result(); }
    tn__broadcast_strides(h, dst->ndim, dst->shape, bstr);
    tn__copy_strided(dst->dtype, c->data, c->strides, h->dtype, h->data, bstr, dst->ndim, dst->shape);
    r = tn__device_ops->copy(dst->data, dst->device, c->data, TN_HOST, tn_array_nbytes(c));
    tn_array_free(c);
    tn_array_free(h);
    return r;
}

/* >>creation */

TN_API tn_array *tn_array_empty(tn_dtype t, int ndim, const int64_t *shape) {
    if (tn__check_shape("tn_array_empty", t, ndim, shape) != TN_OK) return NULL;
    return tn__array_alloc(t, ndim, shape, TN_HOST);
}

TN_API tn_array *tn_array_zeros(tn_dtype t, int ndim, const int64_t *shape) {
    if (tn__check_shape("tn_array_zeros", t, ndim, shape) != TN_OK) return NULL;
    tn_array *a = tn__array_alloc(t, ndim, shape, TN_HOST);
    if (a) memset(a->data, 0, tn_array_nbytes(a));
    return a;
}

static void tn__fill(tn_array *a, double v) {
    size_t es = tn_dtype_size(a->dtype);
    int64_t n = tn_array_size(a);
    if (n == 0) return;
    char *p = (char *)a->data;
    tn__store_f(a->dtype, p, v);
    /* doubling copies: the first element is already converted */
    int64_t done = 1;
    while (done < n) {
        int64_t k = done < n - done ? done : n - done;
        memcpy(p + done * es, p, (size_t)k * es);
        done += k;
    }
}

static tn_array *tn__array_full(const char *who, tn_dtype t, int ndim, const int64_t *shape, double v) {
    if (tn__check_shape(who, t, ndim, shape) != TN_OK) return NULL;
    tn_array *a = tn__array_alloc(t, ndim, shape, TN_HOST);
    if (a) tn__fill(a, v);
    return a;
}

TN_API tn_array *tn_array_ones(tn_dtype t, int ndim, const int64_t *shape) { return tn__array_full("tn_array_ones", t, ndim, shape, 1.0); }
TN_API tn_array *tn_array_full(tn_dtype t, int ndim, const int64_t *shape, double value) { return tn__array_full("tn_array_full", t, ndim, shape, value); }
TN_API tn_array *tn_array_scalar(tn_dtype t, double value) { return tn__array_full("tn_array_scalar", t, 0, NULL, value); }

TN_API tn_array *tn_array_from_data(tn_dtype t, int ndim, const int64_t *shape, const void *data) {
    if (tn__check_shape("tn_array_from_data", t, ndim, shape) != TN_OK) return NULL;
    tn_array *a = tn__array_alloc(t, ndim, shape, TN_HOST);
    if (!a) return NULL;
    size_t n = tn_array_nbytes(a);
    if (n && !data) { tn_array_free(a); tn__err(TN_ERR_NULL, "tn_array_from_data: data is NULL"); return NULL; }
    if (n) memcpy(a->data, data, n);
    return a;
}

TN_API tn_array *tn_array_wrap(tn_dtype t, int ndim, const int64_t *shape, const int64_t *strides, void *data) {
    if (tn__check_shape("tn_array_wrap", t, ndim, shape) != TN_OK) return NULL;
    if (!data && tn__shape_size(ndim, shape) > 0) { tn__err(TN_ERR_NULL, "tn_array_wrap: data is NULL"); return NULL; }
    tn_buffer *b = tn__buffer_borrow(data, 0, TN_HOST);
    if (!b) { tn__err(TN_ERR_OOM, "tn_array_wrap: out of memory"); return NULL; }
    tn_array *a = tn__array_from_buffer(b, t, ndim, shape, strides, data, TN_HOST);
    tn__buffer_release(b);
    return a;
}

/* Number of elements of arange(start, stop, step), as NumPy: ceil((stop-start)/step). */
static tn_result tn__arange_len(const char *who, double start, double stop, double step, int64_t *n) {
    if (!isfinite(start) || !isfinite(stop) || !isfinite(step))
        return tn__err(TN_ERR_INVALID, "%s: start %g, stop %g and step %g must be finite", who, start, stop, step);
    if (step == 0) return tn__err(TN_ERR_INVALID, "%s: step is 0", who);
    double len = ceil((stop - start) / step);
    if (!(len > 0)) len = 0;
    if (len > 9.0e15) return tn__err(TN_ERR_SHAPE, "%s: %g elements is too many", who, len);
    *n = (int64_t)len;
    return TN_OK;
}

TN_API tn_array *tn_array_arange(tn_dtype t, double start, double stop, double step) {
    int64_t n;
    if (tn__arange_len("tn_array_arange", start, stop, step, &n) != TN_OK) return NULL;
    tn_array *a = tn_array_empty(t, 1, &n);
    if (!a) return NULL;
    size_t es = tn_dtype_size(t);
    for (int64_t i = 0; i < n; i++) tn__store_f(t, (char *)a->data + i * (int64_t)es, start + (double)i * step);
    return a;
}

/* >>random: counter-based, so element i depends only on (seed, i) and the
   same seed gives the same array on every platform and thread count.
   Stream: splitmix64 (Steele, Lea, Flood 2014) evaluated at counter i, from
   a state that is itself the first splitmix64 output of the seed (so the
   streams of seeds s and s+1 are not shifted copies of each other):
       base = mix(seed + G), u64(i) = mix(base + (i + 1) * G), G = 0x9E3779B97F4A7C15
   uniform(i) = (u64(i) >> 11) * 2^-53 in [0, 1). Normal values come in
   Box-Muller pairs: elements 2k and 2k+1 use uniforms 2k and 2k+1:
       r = sqrt(-2 log(1 - u0)), z0 = r cos(2 pi u1), z1 = r sin(2 pi u1).
   Ints take floor(lo + (hi - lo) * u); bool is u < 0.5 scaled likewise. */

static inline uint64_t tn__mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t tn__splitmix_at(uint64_t seed, uint64_t i) {
    uint64_t base = tn__mix64(seed + 0x9E3779B97F4A7C15ull);
    return tn__mix64(base + (i + 1) * 0x9E3779B97F4A7C15ull);
}

static inline double tn__uniform_at(uint64_t seed, uint64_t i) {
    return (double)(tn__splitmix_at(seed, i) >> 11) * 0x1.0p-53;
}

typedef struct tn__rand_job { tn_array *a; uint64_t seed; double p0, p1; bool normal; } tn__rand_job;

static void tn__rand_range(void *ctx, int64_t lo, int64_t hi) {
    const tn__rand_job *j = (const tn__rand_job *)ctx;
    tn_dtype t = j->a->dtype;
    size_t es = tn_dtype_size(t);
    char *p = (char *)j->a->data;
    bool is_int = !tn_dtype_is_float(t);
    for (int64_t i = lo; i < hi; i++) {
        double v;
        if (j->normal) {
            uint64_t k = (uint64_t)i & ~(uint64_t)1;
            double u0 = tn__uniform_at(j->seed, k), u1 = tn__uniform_at(j->seed, k + 1);
            double r = sqrt(-2.0 * log(1.0 - u0)), th = 6.283185307179586 * u1;
            v = j->p0 + j->p1 * r * ((i & 1) ? sin(th) : cos(th));
        } else {
            v = j->p0 + (j->p1 - j->p0) * tn__uniform_at(j->seed, (uint64_t)i);
        }
        if (is_int) v = floor(v);
        tn__store_f(t, p + i * (int64_t)es, v);
    }
}

static tn_array *tn__array_rand(const char *who, tn_dtype t, int ndim, const int64_t *shape, double p0, double p1,
                                uint64_t seed, bool normal) {
    if (tn__check_shape(who, t, ndim, shape) != TN_OK) return NULL;
    if (!isfinite(p0) || !isfinite(p1)) {
        tn__err(TN_ERR_INVALID, "%s: parameters %g and %g must be finite", who, p0, p1);
        return NULL;
    }
    tn_array *a = tn__array_alloc(t, ndim, shape, TN_HOST);
    if (!a) return NULL;
    tn__rand_job j = { a, seed, p0, p1, normal };
    tn__parallel_for(tn_array_size(a), 1 << 15, tn__rand_range, &j);
    return a;
}

TN_API tn_array *tn_array_rand_uniform(tn_dtype t, int ndim, const int64_t *shape, double lo, double hi, uint64_t seed) {
    return tn__array_rand("tn_array_rand_uniform", t, ndim, shape, lo, hi, seed, false);
}

TN_API tn_array *tn_array_rand_normal(tn_dtype t, int ndim, const int64_t *shape, double mean, double std, uint64_t seed) {
    return tn__array_rand("tn_array_rand_normal", t, ndim, shape, mean, std, seed, true);
}

/* >>views: share the buffer; never copy. */

TN_API tn_array *tn_array_view(const tn_array *a) {
    if (!a) { tn__err(TN_ERR_NULL, "tn_array_view: array is NULL"); return NULL; }
    return tn__array_from_buffer(a->base, a->dtype, a->ndim, a->shape, a->strides, a->data, a->device);
}

TN_API tn_array *tn_array_transpose(const tn_array *a, const int *perm) {
    if (!a) { tn__err(TN_ERR_NULL, "tn_array_transpose: array is NULL"); return NULL; }
    int p[TN_MAX_DIMS];
    bool seen[TN_MAX_DIMS] = {false};
    for (int d = 0; d < a->ndim; d++) {
        p[d] = perm ? perm[d] : a->ndim - 1 - d;
        if (p[d] < 0) p[d] += a->ndim;
        if (p[d] < 0 || p[d] >= a->ndim || seen[p[d]]) {
            char sb[128];
            tn__err(TN_ERR_AXIS, "tn_array_transpose: perm[%d] = %d is %s for an array of shape %s", d,
                    perm[d], (p[d] >= 0 && p[d] < a->ndim) ? "repeated" : "out of range", tn__shape_str(a->ndim, a->shape, sb));
            return NULL;
        }
        seen[p[d]] = true;
    }
    int64_t sh[TN_MAX_DIMS], st[TN_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) { sh[d] = a->shape[p[d]]; st[d] = a->strides[p[d]]; }
    return tn__array_from_buffer(a->base, a->dtype, a->ndim, sh, st, a->data, a->device);
}

/* Python slice semantics: resolves start/stop (TN_NONE: omitted) against
   length n for step, giving the first index and the element count. */
static void tn__slice_resolve(int64_t n, int64_t start, int64_t stop, int64_t step, int64_t *first, int64_t *count) {
    int64_t lo, hi;
    if (step > 0) {
        lo = start == TN_NONE ? 0 : start < 0 ? (start + n < 0 ? 0 : start + n) : (start > n ? n : start);
        hi = stop == TN_NONE ? n : stop < 0 ? (stop + n < 0 ? 0 : stop + n) : (stop > n ? n : stop);
        *first = lo;
        *count = hi > lo ? (hi - lo + step - 1) / step : 0;
    } else {
        lo = start == TN_NONE ? n - 1 : start < 0 ? (start + n < -1 ? -1 : start + n) : (start > n - 1 ? n - 1 : start);
        hi = stop == TN_NONE ? -1 : stop < 0 ? (stop + n < -1 ? -1 : stop + n) : (stop > n - 1 ? n - 1 : stop);
        *first = lo;
        *count = lo > hi ? (lo - hi + (-step) - 1) / (-step) : 0;
    }
    if (*count == 0) *first = 0;
}

TN_API tn_array *tn_array_slice(const tn_array *a, int axis, int64_t start, int64_t stop, int64_t step) {
    if (!a) { tn__err(TN_ERR_NULL, "tn_array_slice: array is NULL"); return NULL; }
    char sb[128];
    int ax = axis < 0 ? axis + a->ndim : axis;
    if (ax < 0 || ax >= a->ndim) {
        tn__err(TN_ERR_AXIS, "tn_array_slice: axis %d is out of range for an array of shape %s", axis, tn__shape_str(a->ndim, a->shape, sb));
        return NULL;
    }
    if (step == TN_NONE) step = 1;
    if (step == 0) { tn__err(TN_ERR_INVALID, "tn_array_slice: slice step cannot be zero"); return NULL; }
    int64_t first, count;
    tn__slice_resolve(a->shape[ax], start, stop, step, &first, &count);
    int64_t sh[TN_MAX_DIMS], st[TN_MAX_DIMS];
    memcpy(sh, a->shape, sizeof sh);
    memcpy(st, a->strides, sizeof st);
    sh[ax] = count;
    st[ax] = a->strides[ax] * step;
    char *data = (char *)a->data + first * a->strides[ax];
    return tn__array_from_buffer(a->base, a->dtype, a->ndim, sh, st, data, a->device);
}

TN_API tn_array *tn_array_broadcast_to(const tn_array *a, int ndim, const int64_t *shape) {
    if (!a) { tn__err(TN_ERR_NULL, "tn_array_broadcast_to: array is NULL"); return NULL; }
    if (tn__check_shape("tn_array_broadcast_to", a->dtype, ndim, shape) != TN_OK) return NULL;
    int64_t st[TN_MAX_DIMS];
    if (!tn__broadcast_strides(a, ndim, shape, st)) {
        char s1[128], s2[128];
        tn__err(TN_ERR_SHAPE, "tn_array_broadcast_to: cannot broadcast an array of shape %s to %s",
                tn__shape_str(a->ndim, a->shape, s1), tn__shape_str(ndim, shape, s2));
        return NULL;
    }
    return tn__array_from_buffer(a->base, a->dtype, ndim, shape, st, a->data, a->device);
}

/* Resolves one -1 in a reshape target; errors name `who` and both shapes. */
static tn_result tn__reshape_target(const char *who, int64_t size, int ndim_from, const int64_t *from,
                                    int ndim, const int64_t *shape, int64_t *out) {
    char s1[128], s2[128];
    if (ndim < 0 || ndim > TN_MAX_DIMS) return tn__err(TN_ERR_INVALID, "%s: ndim %d is outside [0, %d]", who, ndim, TN_MAX_DIMS);
    if (ndim > 0 && !shape) return tn__err(TN_ERR_NULL, "%s: shape is NULL", who);
    int neg = -1;
    int64_t known = 1;
    for (int d = 0; d < ndim; d++) {
        out[d] = shape[d];
        if (shape[d] == -1) {
            if (neg >= 0) return tn__err(TN_ERR_SHAPE, "%s: can only specify one unknown dimension in %s", who, tn__shape_str(ndim, shape, s2));
            neg = d;
        } else if (shape[d] < 0) {
            return tn__err(TN_ERR_SHAPE, "%s: negative dimension %lld in target shape", who, (long long)shape[d]);
        } else known *= shape[d];
    }
    if (size < 0) return TN_OK;          /* unknown source size (build time) */
    if (neg >= 0) {
        if (known == 0 || size % known != 0) goto bad;
        out[neg] = size / known;
    } else if (known != size) goto bad;
    return TN_OK;
bad:
    return tn__err(TN_ERR_SHAPE, "%s: cannot reshape an array of size %lld %s into %s", who, (long long)size,
                   tn__shape_str(ndim_from, from, s1), tn__shape_str(ndim, shape, s2));
}

/* Strides for viewing a (shape, strides) as newshape without copying, as
   NumPy's _attempt_nocopy_reshape; false when a copy is needed. */
static bool tn__reshape_strides(int ndim, const int64_t *shape, const int64_t *strides, int nnd,
                                const int64_t *nshape, int64_t *nstrides, size_t es) {
    int64_t osh[TN_MAX_DIMS], ost[TN_MAX_DIMS];
    int ond = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0) { tn__contiguous_strides(TN_BOOL, nnd, nshape, nstrides); for (int k = 0; k < nnd; k++) nstrides[k] *= (int64_t)es; return true; }
        if (shape[d] != 1) { osh[ond] = shape[d]; ost[ond] = strides[d]; ond++; }
    }
    int oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < nnd && oi < ond) {
        int64_t np = nshape[ni], op = osh[oi];
        while (np != op) {
            if (np < op) np *= nshape[nj++];
            else op *= osh[oj++];
        }
        for (int ok = oi; ok < oj - 1; ok++)
            if (ost[ok] != osh[ok + 1] * ost[ok + 1]) return false;
        nstrides[nj - 1] = ost[oj - 1];
        for (int nk = nj - 1; nk > ni; nk--) nstrides[nk - 1] = nstrides[nk] * nshape[nk];
        ni = nj++;
        oi = oj++;
    }
    /* trailing size-1 dims of the new shape */
    int64_t last = ni > 0 ? nstrides[ni - 1] : (int64_t)es;
    for (int nk = ni; nk < nnd; nk++) nstrides[nk] = last;
    return true;
}

TN_API tn_array *tn_array_reshape(const tn_array *a, int ndim, const int64_t *shape) {
    if (!a) { tn__err(TN_ERR_NULL, "tn_array_reshape: array is NULL"); return NULL; }
    int64_t ns[TN_MAX_DIMS], st[TN_MAX_DIMS];
    if (tn__reshape_target("tn_array_reshape", tn_array_size(a), a->ndim, a->shape, ndim, shape, ns) != TN_OK) return NULL;
    if (tn__reshape_strides(a->ndim, a->shape, a->strides, ndim, ns, st, tn_dtype_size(a->dtype)))
        return tn__array_from_buffer(a->base, a->dtype, ndim, ns, st, a->data, a->device);
    /* not expressible as a view: copy into C order (on a's device) */
    tn_array *c = tn_array_copy(a);
    if (!c) return NULL;
    if (a->device != TN_HOST) {
        tn_array *d = tn__array_alloc(a->dtype, ndim, ns, a->device);
        if (d && tn__device_ops->copy(d->data, d->device, c->data, TN_HOST, tn_array_nbytes(c)) != TN_OK) { tn_array_free(d); d = NULL; }
        tn_array_free(c);
        return d;
    }
    c->ndim = ndim;
    memcpy(c->shape, ns, sizeof ns);
    tn__contiguous_strides(c->dtype, ndim, ns, c->strides);
    return c;
}

/* >>element_access */

static tn_result tn__elem_ptr(const tn_array *a, const int64_t *index, const char *who, char **p) {
    if (!a) return tn__err(TN_ERR_NULL, "%s: array is NULL", who);
    if (a->ndim > 0 && !index) return tn__err(TN_ERR_NULL, "%s: index is NULL", who);
    int64_t off = 0;
    for (int d = 0; d < a->ndim; d++) {
        int64_t i = index[d] < 0 ? index[d] + a->shape[d] : index[d];
        if (i < 0 || i >= a->shape[d]) {
            char sb[128];
            return tn__err(TN_ERR_INVALID, "%s: index %lld is out of bounds for axis %d of an array of shape %s",
                           who, (long long)index[d], d, tn__shape_str(a->ndim, a->shape, sb));
        }
        off += i * a->strides[d];
    }
    *p = (char *)a->data + off;
    return TN_OK;
}

TN_API double tn_array_get(const tn_array *a, const int64_t *index) {
    char *p;
    if (tn__array_readable(a, "tn_array_get") != TN_OK || tn__elem_ptr(a, index, "tn_array_get", &p) != TN_OK) return NAN;
    if (a->device == TN_HOST) return tn__load_f(a->dtype, p);
    char tmp[8];
    if (!tn__device_ops || !tn__device_ops->copy) {
        tn__err(TN_ERR_DEVICE, "tn_array_get: the array lives on device %d but no device back end is loaded", a->device);
        return NAN;
    }
    if (tn__device_ops->copy(tmp, TN_HOST, p, a->device, tn_dtype_size(a->dtype)) != TN_OK) return NAN;
    return tn__load_f(a->dtype, tmp);
}

TN_API tn_result tn_array_set(tn_array *a, const int64_t *index, double v) {
    char *p;
    tn_result r = tn__elem_ptr(a, index, "tn_array_set", &p);
    if (r != TN_OK) return r;
    if (a->device == TN_HOST) { tn__store_f(a->dtype, p, v); return TN_OK; }
    char tmp[8];
    tn__store_f(a->dtype, tmp, v);
    if (!tn__device_ops || !tn__device_ops->copy)
        return tn__err(TN_ERR_DEVICE, "tn_array_set: the array lives on device %d but no device back end is loaded", a->device);
    return tn__device_ops->copy(p, a->device, tmp, TN_HOST, tn_dtype_size(a->dtype));
}

/* >>print: NumPy's str() of an array (numpy/core/arrayprint.py, default
   options: precision 8, linewidth 75, threshold 1000, edgeitems 3).
   Floats print the shortest digits that read back as the same value of
   their dtype, at most 8 after the point; a column switches to scientific
   notation when max >= 1e8, min < 1e-4 or max/min > 1e3 (nonzero |values|). */

typedef struct tn__str { char *p; size_t n, cap; bool oom; } tn__str;

static void tn__str_put(tn__str *s, const char *t, size_t n) {
    if (s->oom) return;
    if (s->n + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        while (cap < s->n + n + 1) cap *= 2;
        char *p = (char *)tn__realloc(s->p, cap);
        if (!p) { s->oom = true; return; }
        s->p = p;
        s->cap = cap;
    }
    memcpy(s->p + s->n, t, n);
    s->n += n;
    s->p[s->n] = 0;
}
static void tn__str_puts(tn__str *s, const char *t) { tn__str_put(s, t, strlen(t)); }
static void tn__str_spaces(tn__str *s, int n) { for (int i = 0; i < n; i++) tn__str_put(s, " ", 1); }

typedef struct tn__fmt {
    tn_dtype t;
    bool sci;
    int pad_left, pad_right, precision, exp_size;
    int int_width;
} tn__fmt;

/* Fewest significant digits (1..17) that read back as v in dtype t. */
static int tn__shortest_digits(double v, tn_dtype t) {
    int maxp = t == TN_F16 ? 5 : t == TN_F32 ? 9 : 17;
    char buf[64];
    for (int p = 1; p < maxp; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        double r = strtod(buf, NULL);
        bool same = t == TN_F64 ? r == v : t == TN_F32 ? (float)r == (float)v
                                                       : tn_f32_to_f16((float)r) == tn_f32_to_f16((float)v);
        if (same) return p;
    }
    return maxp;
}

/* Splits the unpadded text of a finite v into integer part (with sign),
   fraction digits and, for scientific, exponent sign+digits. */
static void tn__float_parts(const tn__fmt *f, double v, char *ip, char *fp, char *ep) {
    char buf[512];
    int p = tn__shortest_digits(v, f->t);
    ep[0] = 0;
    if (f->sci) {
        int frac = p - 1 > 8 ? 8 : p - 1;
        snprintf(buf, sizeof buf, "%.*e", frac, v);
        char *e = strchr(buf, 'e');
        strcpy(ep, e + 1);
        *e = 0;
    } else {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        int e10 = atoi(strchr(buf, 'e') + 1);
        int frac = p - 1 - e10;
        frac = frac < 0 ? 0 : frac > 8 ? 8 : frac;
        snprintf(buf, sizeof buf, "%.*f", frac, v);
    }
    char *dot = strchr(buf, '.');
    if (dot) {
        *dot = 0;
        size_t k = strlen(dot + 1);
        while (k > 0 && dot[k] == '0') dot[k--] = 0;     /* trim='.': keep the point, drop zeros */
        strcpy(fp, dot + 1);
    } else fp[0] = 0;
    strcpy(ip, buf);
}

/* Walks the elements that will be shown (edges only when summarising). */
typedef void (*tn__visit_fn)(void *ctx, const char *p);
static void tn__visit_shown(const tn_array *a, int d, const char *p, bool summary, tn__visit_fn fn, void *ctx) {
    if (d == a->ndim) { fn(ctx, p); return; }
    int64_t n = a->shape[d];
    for (int64_t i = 0; i < n; i++) {
        if (summary && n > 6 && i == 3) i = n - 3;
        tn__visit_shown(a, d + 1, p + i * a->strides[d], summary, fn, ctx);
    }
}

typedef struct tn__fmt_stats {
    tn__fmt *f;
    double max_abs, min_abs;
    bool any_finite_nonzero, any_nonfinite, neg_inf;
    int64_t imax, imin;
    bool any;
    int pass;
} tn__fmt_stats;

static void tn__fmt_visit(void *ctx, const char *p) {
    tn__fmt_stats *st = (tn__fmt_stats *)ctx;
    tn__fmt *f = st->f;
    if (!tn_dtype_is_float(f->t)) {
        int64_t v = tn__load_i(f->t, p);
        if (!st->any || v > st->imax) st->imax = v;
        if (!st->any || v < st->imin) st->imin = v;
        st->any = true;
        return;
    }
    double v = tn__load_f(f->t, p);
    if (!isfinite(v)) {
        st->any_nonfinite = true;
        if (isinf(v) && v < 0) st->neg_inf = true;
        return;
    }
    if (st->pass == 0) {
        double av = fabs(v);
        if (av != 0) {
            if (!st->any_finite_nonzero || av > st->max_abs) st->max_abs = av;
            if (!st->any_finite_nonzero || av < st->min_abs) st->min_abs = av;
            st->any_finite_nonzero = true;
        }
        return;
    }
    char ip[512], fp[512], ep[16];
    tn__float_parts(f, v, ip, fp, ep);
    int li = (int)strlen(ip), lf = (int)strlen(fp), le = ep[0] ? (int)strlen(ep) - 1 : 0;
    if (li > f->pad_left) f->pad_left = li;
    if (lf > f->precision) f->precision = lf;
    if (le > f->exp_size) f->exp_size = le;
}

static void tn__fmt_init(tn__fmt *f, const tn_array *h, bool summary) {
    memset(f, 0, sizeof *f);
    f->t = h->dtype;
    tn__fmt_stats st;
    memset(&st, 0, sizeof st);
    st.f = f;
    tn__visit_shown(h, 0, (const char *)h->data, summary, tn__fmt_visit, &st);
    if (f->t == TN_BOOL) { f->int_width = 5; return; }
    if (!tn_dtype_is_float(f->t)) {
        char b1[32], b2[32];
        int l1 = snprintf(b1, sizeof b1, "%lld", (long long)st.imax), l2 = snprintf(b2, sizeof b2, "%lld", (long long)st.imin);
        f->int_width = l1 > l2 ? l1 : l2;
        return;
    }
    if (st.any_finite_nonzero && (st.max_abs >= 1e8 || st.min_abs < 1e-4 || st.max_abs / st.min_abs > 1e3)) f->sci = true;
    st.pass = 1;
    tn__visit_shown(h, 0, (const char *)h->data, summary, tn__fmt_visit, &st);
    f->pad_right = f->sci ? f->exp_size + 2 + f->precision : f->precision;
    if (st.any_nonfinite) {
        int offset = f->pad_right + 1, inflen = 3 + st.neg_inf;
        if (3 - offset > f->pad_left) f->pad_left = 3 - offset;
        if (inflen - offset > f->pad_left) f->pad_left = inflen - offset;
    }
}

/* One element, padded to the column width. */
static void tn__fmt_elem(const tn__fmt *f, const char *p, tn__str *s) {
    char buf[1200];
    if (f->t == TN_BOOL) {
        snprintf(buf, sizeof buf, "%*s", f->int_width, *(const uint8_t *)p ? "True" : "False");
    } else if (!tn_dtype_is_float(f->t)) {
        snprintf(buf, sizeof buf, "%*lld", f->int_width, (long long)tn__load_i(f->t, p));
    } else {
        double v = tn__load_f(f->t, p);
        int width = f->pad_left + 1 + f->pad_right;
        if (!isfinite(v)) {
            snprintf(buf, sizeof buf, "%*s", width, v != v ? "nan" : v > 0 ? "inf" : "-inf");
        } else {
            char ip[512], fp[512], ep[16];
            tn__float_parts(f, v, ip, fp, ep);
            if (f->sci) {
                int el = (int)strlen(ep + 1);
                size_t k = 0;
                k += (size_t)snprintf(buf + k, sizeof buf - k, "%*s.%s", f->pad_left, ip, fp);
                for (int i = (int)strlen(fp); i < f->precision; i++) buf[k++] = '0';
                buf[k++] = 'e';
                buf[k++] = ep[0];
                for (int i = el; i < f->exp_size; i++) buf[k++] = '0';
                snprintf(buf + k, sizeof buf - k, "%s", ep + 1);
            } else {
                snprintf(buf, sizeof buf, "%*s.%-*s", f->pad_left, ip, f->pad_right, fp);
            }
        }
    }
    tn__str_puts(s, buf);
}

/* numpy's _extendLine: wrap before `word` when the line would pass width. */
static void tn__extend_line(tn__str *s, tn__str *line, const char *word, int width, int indent) {
    bool wrap = (int)(line->n + strlen(word)) > width && (int)line->n > indent;
    if (wrap) {
        size_t n = line->n;
        while (n > 0 && line->p[n - 1] == ' ') n--;
        tn__str_put(s, line->p, n);
        tn__str_puts(s, "\n");
        line->n = 0;
        tn__str_spaces(line, indent);
    }
    tn__str_puts(line, word);
}

/* numpy's _formatArray recurser; appends the text of the sub-array at `p`
   (axis d) to out. indent is the hanging indent's length. */
static void tn__fmt_rec(const tn__fmt *f, const tn_array *a, int d, const char *p, bool summary, int indent,
                        int width, tn__str *out) {
    if (d == a->ndim) { tn__fmt_elem(f, p, out); return; }
    int64_t n = a->shape[d];
    bool show = summary && n > 6;
    int64_t lead = show ? 3 : 0, trail = show ? 3 : n;
    int axes_left = a->ndim - d;
    tn__str s = {0};
    tn__str_spaces(&s, indent);      /* the hanging indent, replaced by '[' below */
    if (axes_left == 1) {
        int ew = width - 1;
        tn__str line = {0}, word = {0};
        s.n = 0;
        tn__str_spaces(&line, indent);
        for (int64_t i = 0; i < n; i++) {
            if (i == lead && show) {
                tn__extend_line(&s, &line, "...", ew, indent);
                tn__str_puts(&line, " ");
                i = n - trail;
            }
            word.n = 0;
            if (word.p) word.p[0] = 0;
            tn__fmt_elem(f, p + i * a->strides[d], &word);
            tn__extend_line(&s, &line, word.p ? word.p : "", ew, indent);
            if (i + 1 < n) tn__str_puts(&line, " ");
            if (word.oom) s.oom = true;
        }
        tn__str_put(&s, line.p ? line.p : "", line.n);
        if (line.oom) s.oom = true;
        tn__free(line.p);
        tn__free(word.p);
    } else {
        s.n = 0;
        for (int64_t i = 0; i < n; i++) {
            if (i == lead && show) {
                tn__str_spaces(&s, indent);
                tn__str_puts(&s, "...");
                for (int k = 0; k < axes_left - 1; k++) tn__str_puts(&s, "\n");
                i = n - trail;
            }
            tn__str_spaces(&s, indent);
            tn__fmt_rec(f, a, d + 1, p + i * a->strides[d], summary, indent + 1, width - 1, &s);
            if (i + 1 < n) for (int k = 0; k < axes_left - 1; k++) tn__str_puts(&s, "\n");
        }
    }
    tn__str_puts(out, "[");
    if (s.n >= (size_t)indent) tn__str_put(out, s.p + indent, s.n - (size_t)indent);
    tn__str_puts(out, "]");
    if (s.oom) out->oom = true;
    tn__free(s.p);
}

/* The 0-d case prints like a NumPy scalar's str: 1.5, 1.0, 1e-05. */
static void tn__fmt_scalar(const tn_array *h, tn__str *out) {
    char buf[512];
    const char *p = (const char *)h->data;
    if (h->dtype == TN_BOOL) snprintf(buf, sizeof buf, "%s", *(const uint8_t *)p ? "True" : "False");
    else if (!tn_dtype_is_float(h->dtype)) snprintf(buf, sizeof buf, "%lld", (long long)tn__load_i(h->dtype, p));
    else {
        double v = tn__load_f(h->dtype, p);
        if (!isfinite(v)) snprintf(buf, sizeof buf, "%s", v != v ? "nan" : v > 0 ? "inf" : "-inf");
        else {
            int digits = tn__shortest_digits(v, h->dtype);
            snprintf(buf, sizeof buf, "%.*e", digits - 1, v);
            int e10 = atoi(strchr(buf, 'e') + 1);
            if (e10 < -4 || e10 >= 16) {
                /* mantissa without a trailing ".": 1e-05 like Python */
                char *e = strchr(buf, 'e');
                if (digits == 1 && e[-1] == '.') memmove(e - 1, e, strlen(e) + 1);
            } else {
                int frac = digits - 1 - e10;
                snprintf(buf, sizeof buf, "%.*f", frac < 1 ? 1 : frac, v);
            }
        }
    }
    tn__str_puts(out, buf);
}

static tn_result tn__array_format(const tn_array *a, tn__str *out, const char *who) {
    tn_result r = tn__array_readable(a, who);
    if (r != TN_OK) return r;
    tn_array *h = tn__host_view(a, who);
    if (!h) return tn_last_result();
    int64_t n = tn_array_size(h);
    if (h->ndim == 0) tn__fmt_scalar(h, out);
    else if (n == 0) tn__str_puts(out, "[]");
    else {
        bool summary = n > 1000;
        tn__fmt f;
        tn__fmt_init(&f, h, summary);
        tn__fmt_rec(&f, h, 0, (const char *)h->data, summary, 1, 75, out);
    }
    tn_array_free(h);
    if (out->oom) return tn__err(TN_ERR_OOM, "%s: out of memory", who);
    return TN_OK;
}

TN_API int tn_array_snprint(const tn_array *a, char *buf, size_t cap) {
    tn__str s = {0};
    if (tn__array_format(a, &s, "tn_array_snprint") != TN_OK) { tn__free(s.p); if (buf && cap) buf[0] = 0; return -1; }
    int n = (int)s.n;
    if (buf && cap) {
        size_t k = s.n < cap - 1 ? s.n : cap - 1;
        memcpy(buf, s.p, k);
        buf[k] = 0;
    }
    tn__free(s.p);
    return n;
}

TN_API tn_result tn_array_print(const tn_array *a, FILE *out) {
    if (!out) return tn__err(TN_ERR_NULL, "tn_array_print: out is NULL");
    tn__str s = {0};
    tn_result r = tn__array_format(a, &s, "tn_array_print");
    if (r == TN_OK) { fwrite(s.p, 1, s.n, out); fputc('\n', out); }
    tn__free(s.p);
    return r;
}
