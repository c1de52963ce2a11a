/* tensor.h - v0.1 - symbolic tensor graphs compiled into fast functions - MIT licence (end of file)

   Do this:
       #define TENSOR_IMPLEMENTATION
   before you include this file (and tensor_ops.h, tensor_cuda.h) in *one* C file
   to create the implementation. Other files include the headers plainly.

   Compile-time options (define before the implementation):
       TENSOR_STATIC          make every public function static (TN_API)
       TN_ASSERT(x)           internal invariant check (default: assert)
       TN_MALLOC/TN_REALLOC/TN_FREE   allocator hooks: define all three or none
       TN_NO_THREADS          no worker threads for large CPU kernels
       TN_DEBUG_BORROW        check every borrowed array read for staleness
                              (default on unless NDEBUG)

   Usage:
       tn_init(NULL);                                  // reads TENSOR_FLAGS
       tn_graph *g = tn_graph_new();
       tn_var *x = tn_vector(g, "x", TN_F32);
       tn_var *y = tn_exp(tn_mul(x, tn_scalar_const(g, 2.0)));
       tn_func *f = tn_function(g, &(tn_func_desc){ .n_inputs = 1, .inputs = &x,
                                                     .n_outputs = 1, .outputs = &y });
       tn_array *in = tn_array_rand_uniform(TN_F32, 1, (int64_t[]){1000}, 0, 1, 22);
       tn_array *out;
       if (tn_call(f, &in, &out) != TN_OK) puts(tn_last_error());
       tn_array_print(out, stdout);
       tn_array_free(out); tn_array_free(in); tn_function_free(f); tn_graph_free(g);

   What it does not do: sparse tensors, complex numbers, dynamic control flow
   other than scan, distributed execution.
*/
#ifndef TENSOR_H
#define TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>

#ifndef TN_API
#  ifdef TENSOR_STATIC
#    define TN_API static
#  else
#    define TN_API extern
#  endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* >>types ---------------------------------------------------------------- */

#define TN_MAX_DIMS 8

typedef enum tn_result {
    TN_OK = 0,
    TN_ERR_NULL,          /* a required argument was NULL (or an earlier constructor failed) */
    TN_ERR_INVALID,       /* an argument has a value the function does not accept */
    TN_ERR_SHAPE,         /* shapes do not match or do not broadcast */
    TN_ERR_DTYPE,         /* wrong or unsupported dtype */
    TN_ERR_AXIS,          /* axis out of range or repeated */
    TN_ERR_NUM_INPUTS,    /* wrong number of inputs to a function */
    TN_ERR_UPDATE,        /* an update's type differs from its shared variable */
    TN_ERR_GRAPH,         /* variables from different graphs, or a malformed graph */
    TN_ERR_DISCONNECTED,  /* a gradient was asked for a variable the cost does not depend on */
    TN_ERR_STALE,         /* a borrowed array was read after the call that made it was superseded */
    TN_ERR_OOM,           /* out of host or device memory */
    TN_ERR_DEVICE,        /* CUDA driver, NVRTC or cuBLAS failure, or no usable device */
    TN_ERR_UNSUPPORTED,   /* the operation exists but not for these arguments or on this device */
    TN_ERR_INTERNAL,      /* a bug in the library: please report it */
    TN_RESULT_COUNT
} tn_result;

/* Order matters: type promotion takes the larger of two floats or of two ints;
   an int combined with a float gives that float. */
typedef enum tn_dtype {
    TN_DTYPE_NONE = 0,    /* unset: means "floatX" where a float is expected */
    TN_BOOL,              /* stored as uint8, 0 or 1 */
    TN_I32,
    TN_I64,
    TN_F16,               /* IEEE half storage; arithmetic in float32 */
    TN_F32,
    TN_F64,
    TN_DTYPE_COUNT
} tn_dtype;

#define TN_HOST (-1)      /* tn_array.device for host memory; >= 0 is a CUDA ordinal */

typedef struct tn_buffer tn_buffer;   /* refcounted storage; opaque */

/* An n-d array: a view (shape, byte strides, first element) of a buffer.
   Fields are read-only for users; change arrays through the functions. */
typedef struct tn_array {
    tn_dtype dtype;
    int ndim;
    int64_t shape[TN_MAX_DIMS];
    int64_t strides[TN_MAX_DIMS];     /* in bytes; 0 on a broadcast dimension */
    void *data;                       /* first element: host or device pointer */
    int device;                       /* TN_HOST or CUDA ordinal */
    tn_buffer *base;                  /* owner of the memory; views share it */
    /* A borrowed array belongs to a compiled function and is valid until the
       function's next call: gen is the call that made it, *live_gen the
       function's current call. NULL live_gen: an ordinary array. */
    const uint64_t *live_gen;
    uint64_t gen;
} tn_array;

typedef struct tn_graph tn_graph;
typedef struct tn_func tn_func;
typedef struct tn_var tn_var;

/* >>errors --------------------------------------------------------------- */

TN_API const char *tn_result_string(tn_result r);
TN_API const char *tn_last_error(void);        /* full message of this thread's last failure */
TN_API tn_result tn_last_result(void);
TN_API void tn_clear_error(void);
typedef enum tn_log_level { TN_LOG_ERROR = 1, TN_LOG_WARN, TN_LOG_INFO } tn_log_level;
typedef void (*tn_log_fn)(tn_log_level level, const char *msg, void *user);
TN_API void tn_set_log(tn_log_fn fn, void *user);   /* NULL: warnings to stderr, errors silent */

/* >>config --------------------------------------------------------------- */

typedef enum tn_device_kind { TN_DEVICE_AUTO = 0, TN_DEVICE_CPU, TN_DEVICE_CUDA } tn_device_kind;
typedef enum tn_mode { TN_MODE_DEFAULT = 0, TN_MODE_FAST_RUN, TN_MODE_FAST_COMPILE, TN_MODE_CHECK } tn_mode;
typedef enum tn_warn_raise { TN_WR_OFF = 0, TN_WR_WARN, TN_WR_RAISE } tn_warn_raise;

/* Settings. tn_init(NULL) reads them from TENSOR_FLAGS
   ("device=cuda0,floatX=float32,profile=1"); a config struct overrides. */
typedef struct tn_config {
    tn_device_kind device;      /* device=cpu|cuda|cudaN|auto */
    int device_ordinal;         /* N of cudaN */
    tn_dtype floatX;            /* floatX=float32|float64|float16 (default float32) */
    tn_mode mode;               /* mode=fast_run|fast_compile|check */
    bool profile;               /* profile=1 */
    bool fast_math;             /* fast_math=1 */
    bool launch_blocking;       /* launch_blocking=1 */
    bool print_kernels;         /* print_kernels=1 */
    bool allow_gc;              /* allow_gc=0 keeps every intermediate buffer (default 1) */
    bool allow_tf32;            /* allow_tf32=1 */
    bool no_cuda_graph;         /* cuda_graph=0 */
    bool trace_rewrites;        /* trace_rewrites=1: print each rewrite that fires */
    tn_warn_raise assert_no_cpu_op;   /* assert_no_cpu_op=warn|raise */
    int threads;                /* threads=N (0: one per core) */
    const char *cache_dir;      /* cache_dir=PATH */
} tn_config;

TN_API tn_result tn_init(const tn_config *cfg);   /* NULL: defaults + TENSOR_FLAGS */
TN_API const tn_config *tn_get_config(void);
TN_API tn_result tn_parse_flags(const char *flags, tn_config *cfg); /* for tests and tools */
TN_API void tn_shutdown(void);                    /* frees global pools; optional */

/* >>dtype ---------------------------------------------------------------- */

TN_API size_t tn_dtype_size(tn_dtype t);
TN_API const char *tn_dtype_name(tn_dtype t);     /* "float32", ... as NumPy spells them */
TN_API tn_dtype tn_dtype_promote(tn_dtype a, tn_dtype b);
TN_API bool tn_dtype_is_float(tn_dtype t);
TN_API uint16_t tn_f32_to_f16(float f);           /* round to nearest even */
TN_API float tn_f16_to_f32(uint16_t h);

/* >>array ---------------------------------------------------------------- */

TN_API tn_array *tn_array_empty(tn_dtype t, int ndim, const int64_t *shape);   /* uninitialised */
TN_API tn_array *tn_array_zeros(tn_dtype t, int ndim, const int64_t *shape);
TN_API tn_array *tn_array_ones(tn_dtype t, int ndim, const int64_t *shape);
TN_API tn_array *tn_array_full(tn_dtype t, int ndim, const int64_t *shape, double value);
TN_API tn_array *tn_array_scalar(tn_dtype t, double value);                   /* 0-d */
/* Copies `data` (C order, elements of dtype t). */
TN_API tn_array *tn_array_from_data(tn_dtype t, int ndim, const int64_t *shape, const void *data);
/* Wraps user memory without copying; strides in bytes, NULL for C order. The
   caller keeps `data` alive while the array or any view of it lives. */
TN_API tn_array *tn_array_wrap(tn_dtype t, int ndim, const int64_t *shape, const int64_t *strides, void *data);
TN_API tn_array *tn_array_arange(tn_dtype t, double start, double stop, double step);
/* Seeded random arrays: the same seed gives the same numbers on every platform. */
TN_API tn_array *tn_array_rand_uniform(tn_dtype t, int ndim, const int64_t *shape, double lo, double hi, uint64_t seed);
TN_API tn_array *tn_array_rand_normal(tn_dtype t, int ndim, const int64_t *shape, double mean, double std, uint64_t seed);
TN_API void tn_array_free(tn_array *a);           /* NULL and borrowed arrays: no-op */

/* Views share the buffer and keep it alive. */
TN_API tn_array *tn_array_view(const tn_array *a);
TN_API tn_array *tn_array_transpose(const tn_array *a, const int *perm);   /* perm NULL: reverse */
TN_API tn_array *tn_array_slice(const tn_array *a, int axis, int64_t start, int64_t stop, int64_t step);
TN_API tn_array *tn_array_broadcast_to(const tn_array *a, int ndim, const int64_t *shape);
TN_API tn_array *tn_array_reshape(const tn_array *a, int ndim, const int64_t *shape); /* view when possible, else copy; one -1 allowed */

TN_API tn_array *tn_array_copy(const tn_array *a);                 /* contiguous host copy */
TN_API tn_array *tn_array_astype(const tn_array *a, tn_dtype t);   /* contiguous host copy, converted */
/* Writes the elements in C order, converted to dtype t, to dst (capacity in bytes). */
TN_API tn_result tn_array_copy_to(const tn_array *a, tn_dtype t, void *dst, size_t capacity);
TN_API tn_result tn_array_assign(tn_array *dst, const tn_array *src);   /* same shape; converts dtype */

TN_API int64_t tn_array_size(const tn_array *a);  /* number of elements */
TN_API size_t tn_array_nbytes(const tn_array *a); /* size * dtype size */
TN_API bool tn_array_is_contiguous(const tn_array *a);
TN_API double tn_array_get(const tn_array *a, const int64_t *index);   /* host arrays; NaN on error */
TN_API tn_result tn_array_set(tn_array *a, const int64_t *index, double v);
TN_API tn_result tn_array_check(const tn_array *a); /* TN_ERR_STALE for an outdated borrowed array */
TN_API tn_result tn_array_print(const tn_array *a, FILE *out);          /* like NumPy's repr of the values */
TN_API int tn_array_snprint(const tn_array *a, char *buf, size_t cap);  /* as snprintf */
TN_API tn_array *tn_array_to_host(const tn_array *a);    /* copy of a device array (or a host one) */

/* >>graph ---------------------------------------------------------------- */

TN_API tn_graph *tn_graph_new(void);
TN_API void tn_graph_free(tn_graph *g);          /* frees every variable; shared values too */

/* A symbolic input. shape may be NULL (all unknown) or hold -1 for unknown
   dims; bcast may be NULL (no broadcastable dims) or say which dims are
   size 1 and broadcast (Theano's broadcastable pattern). */
TN_API tn_var *tn_input(tn_graph *g, const char *name, tn_dtype t, int ndim, const int64_t *shape, const bool *bcast);
TN_API tn_var *tn_scalar(tn_graph *g, const char *name, tn_dtype t);
TN_API tn_var *tn_vector(tn_graph *g, const char *name, tn_dtype t);
TN_API tn_var *tn_matrix(tn_graph *g, const char *name, tn_dtype t);
TN_API tn_var *tn_tensor3(tn_graph *g, const char *name, tn_dtype t);
TN_API tn_var *tn_row(tn_graph *g, const char *name, tn_dtype t);      /* (1, n), dim 0 broadcastable */
TN_API tn_var *tn_col(tn_graph *g, const char *name, tn_dtype t);      /* (n, 1), dim 1 broadcastable */
TN_API tn_var *tn_constant(tn_graph *g, const tn_array *value);         /* copies value */
/* A 0-d constant that takes the dtype of what it meets (2.0 * f32 stays f32). */
TN_API tn_var *tn_scalar_const(tn_graph *g, double value);
/* Holds an array between calls (copied in); updates replace it. */
TN_API tn_var *tn_shared(tn_graph *g, const char *name, const tn_array *value);
TN_API const tn_array *tn_shared_get(tn_var *shared);      /* current value (may live on a device) */
TN_API tn_array *tn_shared_get_value(tn_var *shared);      /* host copy the caller frees */
TN_API tn_result tn_shared_set_value(tn_var *shared, const tn_array *value); /* same dtype and ndim */

/* Read-only facts about a variable (shape dims are -1 where unknown). */
TN_API tn_dtype tn_var_dtype(const tn_var *v);
TN_API int tn_var_ndim(const tn_var *v);
TN_API int64_t tn_var_dim(const tn_var *v, int axis);
TN_API const char *tn_var_name(const tn_var *v);
TN_API tn_var *tn_var_set_name(tn_var *v, const char *name);
TN_API tn_graph *tn_var_graph(const tn_var *v);

/* >>function ------------------------------------------------------------- */

typedef struct tn_update { tn_var *shared; tn_var *value; } tn_update;

typedef struct tn_func_desc {
    int n_inputs;
    tn_var *const *inputs;         /* symbolic inputs, in call order */
    int n_outputs;
    tn_var *const *outputs;
    int n_updates;
    const tn_update *updates;      /* applied after all outputs are computed */
    bool borrow;                   /* every output borrowed (valid until the next call) */
    const bool *borrow_outputs;    /* per output; overrides `borrow` when set */
    const bool *borrow_inputs;     /* per input: the function may read it in place,
                                      the caller promises not to change it during the call */
    tn_mode mode;                  /* TN_MODE_DEFAULT: the configured mode */
    const char *name;              /* for profiles and messages */
} tn_func_desc;

TN_API tn_func *tn_function(tn_graph *g, const tn_func_desc *desc);
/* Runs the function: inputs[n_inputs] in, outputs[n_outputs] out. A copied
   output belongs to the caller (tn_array_free); a borrowed one to the function. */
TN_API tn_result tn_call(tn_func *f, tn_array *const *inputs, tn_array **outputs);
/* tn_call that first checks the caller's counts against the function's
   (TN_ERR_NUM_INPUTS naming both). */
TN_API tn_result tn_call_n(tn_func *f, int n_inputs, tn_array *const *inputs, int n_outputs, tn_array **outputs);
TN_API void tn_function_free(tn_func *f);


/* >>internal ------------------------------------------------------------- */
/* Visible so tensor_ops.h, tensor_cuda.h and tools can walk graphs; read-only
   for users, and not a stable API. */

/* The static type of a variable: dtype, rank, shape (-1 where unknown at build
   time) and which dims broadcast (known to be 1). At call time every dim is known. */
typedef struct tn_type {
    tn_dtype dtype;
    int ndim;
    int64_t shape[TN_MAX_DIMS];
    bool bcast[TN_MAX_DIMS];
} tn_type;

/* Op parameters: a flat record so nodes hash and compare by value (merge).
   Each op documents its use of i[] and f[] in tensor_ops.h. */
#define TN_MAX_IPARAMS 28
typedef struct tn_params {
    int64_t i[TN_MAX_IPARAMS];
    double f[4];
} tn_params;

typedef enum tn_var_flags {
    TN_VAR_WEAK = 1 << 0,         /* scalar literal: adopts the dtype of what it meets */
    TN_VAR_NO_GRAD = 1 << 1,      /* tn_stop_gradient boundary */
} tn_var_flags;

/* One node: an apply of `op` to `in`, or a leaf (input, constant, shared). A
   node with n_out > 1 is read through TN_OP_PROJ nodes (one per output). */
struct tn_var {
    int op;                       /* enum tn_op, tensor_ops.h */
    int id;                       /* unique in its graph, in creation order */
    tn_graph *graph;
    int n_in;
    tn_var **in;
    tn_type type;
    int n_out;                    /* 1 for almost every op */
    unsigned flags;               /* tn_var_flags */
    tn_params p;
    void *ext;                    /* op-specific data owned by the graph arena (composite program, custom op) */
    tn_array *value;              /* constant: its value; shared: the current value */
    const char *name;             /* arena copy or NULL */
    int device;                   /* placement: TN_HOST or a CUDA ordinal (set by the placement pass) */
    int inplace;                  /* destroy map: 0 none; k+1: the output overwrites in[k]'s buffer */
    int mark;                     /* scratch for passes: zero between passes */
    void *aux;                    /* scratch for passes */
};

/* Graph internals shared with the other headers. */
TN_API void *tn__graph_alloc(tn_graph *g, size_t bytes);          /* zeroed, freed with the graph */
TN_API char *tn__graph_strdup(tn_graph *g, const char *s);
/* Records a new node; infers its type with the op's rule. NULL (error set) on failure. */
TN_API tn_var *tn__node(tn_graph *g, int op, int n_in, tn_var *const *in, const tn_params *p, void *ext, const char *who);
TN_API int tn__graph_nvars(const tn_graph *g);
TN_API tn_var *tn__graph_var(const tn_graph *g, int i);

/* The optimizer (src/rewrite.c.h): rewrites the function-private graph in
   place. roots[] are the function's outputs then its update values; a rewrite
   that replaces a root stores the replacement in roots[]. */
TN_API tn_result tn__optimize(tn_graph *fg, tn_var **roots, int n_roots, tn_mode mode);
/* How often the rewrite `name` fired in this thread's last tn__optimize (NULL: all). */
TN_API int tn__rewrite_count(const char *name);
/* Most inputs of one fused elementwise op (a back end lowers it to fit its limits). */
TN_API int tn__fuse_max_inputs;
/* Fuse elementwise groups into the reduction that reads them (a prologue). */
TN_API bool tn__fuse_into_reductions;

/* Errors: set this thread's last error; returns r so callers can `return tn__err(...)`. */
TN_API tn_result tn__err(tn_result r, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
TN_API void tn__warn(const char *fmt, ...);
TN_API const char *tn__shape_str(int ndim, const int64_t *shape, char buf[128]);  /* "(3, 4)" */

/* Memory hooks (TN_MALLOC...) as functions, for the other headers. */
TN_API void *tn__malloc(size_t n);
TN_API void *tn__calloc(size_t n, size_t size);
TN_API void *tn__realloc(void *p, size_t n);
TN_API void tn__free(void *p);

/* Buffers and arrays as the executor and back ends see them. */
typedef struct tn_device_ops {
    void *(*alloc)(int device, size_t bytes);
    void (*free)(int device, void *ptr);
    /* copies between host and device or device and device, then waits */
    tn_result (*copy)(void *dst, int dst_device, const void *src, int src_device, size_t bytes);
} tn_device_ops;
TN_API void tn__set_device_ops(const tn_device_ops *ops);     /* tensor_cuda.h registers itself */
TN_API const tn_device_ops *tn__get_device_ops(void);
TN_API tn_array *tn__array_alloc(tn_dtype t, int ndim, const int64_t *shape, int device); /* contiguous, uninitialised */
TN_API tn_array *tn__array_from_buffer(tn_buffer *b, tn_dtype t, int ndim, const int64_t *shape, const int64_t *strides, void *data, int device);
TN_API void tn__contiguous_strides(tn_dtype t, int ndim, const int64_t *shape, int64_t *strides);
TN_API void tn__buffer_retain(tn_buffer *b);
TN_API void tn__buffer_release(tn_buffer *b);

/* A device back end (tensor_cuda.h) as the compiler and executor see it. The
   placement pass sets node->device on the nodes it moves; for those the
   executor calls prepare once at compile time and run at each call, with
   inputs and outputs in device memory (buffers from tn_device_ops). */
typedef struct tn_backend {
    const char *name;
    bool (*supports)(const tn_var *node);
    tn_result (*prepare)(const tn_var *node, void **state);
    tn_result (*run)(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out);
    void (*release)(void *state);
    tn_result (*synchronize)(void);
    /* a rewrite pass run between specialize and fuse: places nodes, inserts
       and cancels transfers (NULL: everything stays on the host) */
    tn_result (*place)(tn_graph *fg, tn_var **roots, int n_roots);
} tn_backend;
TN_API void tn__set_backend(const tn_backend *b);
TN_API const tn_backend *tn__get_backend(void);    /* NULL: CPU only */

/* Threads: fn(ctx, lo, hi) over [0, n) in chunks of at least `grain`; runs
   inline when n < grain or threads are off. */
typedef void (*tn__range_fn)(void *ctx, int64_t lo, int64_t hi);
TN_API void tn__parallel_for(int64_t n, int64_t grain, tn__range_fn fn, void *ctx);
TN_API int tn__num_threads(void);

/* CPU products use CBLAS (libopenblas.so.0, libcblas.so.3 or libblas.so.3,
   loaded at first use unless TN_NO_BLAS=1) for float32/float64. */
TN_API void tn__blas_enable(bool on);      /* tests: false forces the built-in kernels */
TN_API const char *tn__blas_name(void);    /* the library in use, NULL if none or disabled */

/* >>printing ------------------------------------------------------------- */

TN_API tn_result tn_debugprint(const tn_var *v, FILE *out);
TN_API tn_result tn_debugprint_function(const tn_func *f, FILE *out);
TN_API tn_result tn_print_toposort(const tn_func *f, FILE *out);

/* >>dot: Graphviz pictures (src/printers.c.h), as Theano's pydotprint.
   Ellipses are variables (inputs blue, shared green, constants grey), boxes
   ops (green: on a GPU, red: transfers, fused Composites list their scalar
   program); edges carry dtype and shape. Render: dot -Tpng f.dot -o f.png */
TN_API tn_result tn_write_dot(const tn_func *f, FILE *out);       /* the compiled (rewritten) graph */
TN_API tn_result tn_write_dot_var(const tn_var *v, FILE *out);    /* the graph under v, as built */

/* >>profile (src/profile.c.h). The flag profile=1 profiles every function and
   prints its report to stderr when it is freed; tn_profile_enable profiles
   one. The report: totals (calls, executor, ops, compile time split into
   rewrites and preparation), then time per op class, per op and per apply
   node, the cpu/gpu/transfer split, and advice (inputs copied to the device
   on every call with unchanged data; host round trips between GPU ops). */
TN_API tn_result tn_profile_enable(tn_func *f, bool on);
TN_API tn_result tn_profile_print(const tn_func *f, FILE *out);
TN_API void tn_profile_reset(tn_func *f);
/* Profiled input i had the same data (pointer and 64-bit checksum of its
   bytes) on every call since the first (needs at least two calls). */
TN_API bool tn_profile_input_unchanged(const tn_func *f, int i);
/* How many of f's compiled steps run on a device (GPU ops and transfers to
   it): 0 means everything runs on the CPU. What the examples' "Used the gpu"
   line is decided from. */
TN_API int tn_function_device_steps(const tn_func *f);

#ifdef __cplusplus
}
#endif

#include "tensor_ops.h"
#endif /* TENSOR_H */

/* >>implementation ======================================================= */
#if defined(TENSOR_IMPLEMENTATION) && !defined(TENSOR_IMPLEMENTATION_DONE)
#define TENSOR_IMPLEMENTATION_DONE
#include "src/core.c.h"      /* >>core: errors, config, memory, dtypes, threads */
#include "src/array.c.h"     /* >>arrays */
#include "src/graph.c.h"     /* >>graph, >>function, >>executor, >>debugprint */
#include "src/rewrite.c.h"   /* >>rewrite: engine and passes */
#include "src/ops_ew.c.h"    /* >>elementwise: table, CPU engine, constructors */
#include "src/ops_reduce.c.h"/* >>reductions, softmax */
#include "src/ops_linalg.c.h"/* >>linalg: dot, gemm, gemv, outer, BLAS loader */
#include "src/ops_shape.c.h" /* >>shape ops */
#include "src/transfer.c.h"  /* >>transfer: host <-> device copy ops */
#include "src/scan.c.h"      /* >>scan: loops, taps, BPTT */
#include "src/grad.c.h"      /* >>grad */
#include "src/profile.c.h"  /* >>profile */
#include "src/printers.c.h" /* >>dot: Graphviz writer */
#include "src/custom.c.h"   /* >>custom: user ops */
#include "src/ops_table.c.h" /* >>op_table: the registry of every op */
#endif /* TENSOR_IMPLEMENTATION */

/*
MIT License

Copyright (c) 2026 the tensor.h authors

Permission is hereby granted, free of charge, to any person obtaining a copy of
this software and associated documentation files (the "Software"), to deal in
the Software without restriction, including without limitation the rights to
use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies
of the Software, and to permit persons to whom the Software is furnished to do
so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
*/
