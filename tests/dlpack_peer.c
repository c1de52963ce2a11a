/* The C side of tests/dlpack_numpy.py: the library with a few helpers, built
   by make test as a shared library that Python loads with ctypes
   ($(BUILD)/libdlpack_peer.so: position-independent and unoptimised, so it
   builds in seconds). Python calls the library's own functions too
   (tn_array_transpose, tn_array_from_dlpack_unversioned, tn_array_free, ...). */
#define TENSOR_IMPLEMENTATION
#include "tensor.h"
#include <math.h>

/* Python's copy of tn_array's layout is checked against this. */
TN_API size_t peer_array_size(void) { return sizeof(tn_array); }

/* arange(start, start + n) reshaped to shape, as dtype t (bool: nonzero). */
TN_API tn_array *peer_arange(tn_dtype t, double start, int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    tn_array *r = tn_array_arange(TN_F64, start, start + (double)n, 1), *m = tn_array_reshape(r, ndim, shape);
    tn_array *a = m ? tn_array_astype(m, t) : NULL;
    tn_array_free(m);
    tn_array_free(r);
    return a;
}

/* The sum of a's elements as float64, by a compiled function that reads a in
   place (its strides as they are); NaN with the error. */
TN_API double peer_sum(tn_array *a) {
    if (!a) return NAN;
    tn_graph *g = tn_graph_new();
    tn_var *x = tn_input(g, "x", a->dtype, a->ndim, NULL, NULL);
    tn_var *y = tn_sum(tn_cast(x, TN_F64), NULL, 0, false);
    tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x, .n_outputs = 1, .outputs = &y });
    tn_array *out = NULL;
    double s = f && tn_call(f, &a, &out) == TN_OK ? tn_array_get(out, NULL) : NAN;
    tn_array_free(out);
    tn_function_free(f);
    tn_graph_free(g);
    return s;
}

/* Exports with the deleter counted (peer_deletes): versioned or legacy. */
static int deletes;
static void (*inner_versioned)(DLManagedTensorVersioned *);
static void (*inner_legacy)(DLManagedTensor *);
static void counted_versioned(DLManagedTensorVersioned *mt) { deletes++; inner_versioned(mt); }
static void counted_legacy(DLManagedTensor *mt) { deletes++; inner_legacy(mt); }
TN_API int peer_deletes(void) { return deletes; }
TN_API void *peer_export(const tn_array *a, int versioned) {
    if (versioned) {
        DLManagedTensorVersioned *mt = tn_array_to_dlpack(a);
        if (mt) { inner_versioned = mt->deleter; mt->deleter = counted_versioned; }
        return mt;
    }
    DLManagedTensor *mt = tn_array_to_dlpack_unversioned(a);
    if (mt) { inner_legacy = mt->deleter; mt->deleter = counted_legacy; }
    return mt;
}
