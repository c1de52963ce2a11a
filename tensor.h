/* tensor.h - v0.1 - symbolic tensor graphs compiled into fast functions - MIT licence (end of file)

   Do this:
       #define TENSOR_IMPLEMENTATION
   before you include this file (and tensor_ops.h, tensor_cuda.h) in *one* C file
   to create the implementation. Other files include the headers plainly.
   The implementation compiles as C11 and as C++11 or later (the >>cxx
   section), so that one file may be C++.

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

   Threads: different functions may run at once from different threads, on
   the CPU and the GPU (each on its own stream). One function takes one call
   at a time: a second concurrent caller gets TN_ERR_BUSY, nothing done. A
   call holds the locks of the shared variables it reads or updates (one
   global order, no deadlock), so concurrent updates are never lost;
   tn_shared_get_value/set_value take the same lock; functions that hold
   one scan take turns in its loop (on the GPU only the host's walk: call
   them from one thread there). tn_init may race. The
   CPU pool runs one parallel job at a time; a concurrent or nested job runs
   on its caller's thread instead of waiting.

   What it does not do: sparse tensors, complex numbers, dynamic control flow
   other than scan, distributed execution.
*/
#ifndef TENSOR_H
#define TENSOR_H

/* The version (CHANGELOG.md); the CMake package and tensor.pc read TENSOR_VERSION. */
#define TENSOR_VERSION_MAJOR 0
#define TENSOR_VERSION_MINOR 1
#define TENSOR_VERSION_PATCH 0
#define TENSOR_VERSION "0.1.0"

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#ifdef __cplusplus
#  include <initializer_list>     /* TN_SHAPE and TN_AXES */
#endif

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

/* >>api_types ------------------------------------------------------------ */

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
    TN_ERR_CHECK,         /* mode=check: a device op's result differs from its CPU reference */
    TN_ERR_BUSY,          /* tn_call: the function is running in another thread (nothing was done) */
    TN_ERR_IO,            /* a file could not be opened, read or written */
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

/* >>api_errors ----------------------------------------------------------- */

TN_API const char *tn_result_string(tn_result r);
TN_API const char *tn_last_error(void);        /* full message of this thread's last failure */
TN_API tn_result tn_last_result(void);
TN_API void tn_clear_error(void);
typedef enum tn_log_level { TN_LOG_ERROR = 1, TN_LOG_WARN, TN_LOG_INFO } tn_log_level;
typedef void (*tn_log_fn)(tn_log_level level, const char *msg, void *user);
TN_API void tn_set_log(tn_log_fn fn, void *user);   /* NULL: warnings to stderr, errors silent */

/* >>api_config ----------------------------------------------------------- */

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
    bool nan_guard;             /* nan_guard=1: a call fails at the first op that makes a NaN or inf from
                                   inputs that had none (Theano's NanGuardMode; the >>check_mode section) */
    tn_warn_raise assert_no_cpu_op;   /* assert_no_cpu_op=warn|raise */
    tn_warn_raise compute_test_value; /* compute_test_value=off|warn|raise: constructors run each node on
                                         its inputs' test values (tn_var_set_test_value) */
    int threads;                /* threads=N (0: one per core) */
    int host_cache_mb;          /* host_cache_mb=N: MiB of freed large host blocks kept for reuse (the
                                   >>host_pool section); 0 here: the default 1024, < 0: none (the flag's 0) */
    const char *cache_dir;      /* cache_dir=PATH */
    const char *contexts;       /* contexts=dev0->cuda0;dev1->cuda1 (the >>api_contexts section) */
    const char *blas;           /* blas=auto|none|PATH: the CBLAS library of CPU products (NULL: auto) */
    const char *nvrtc_flags;    /* nvrtc_flags=-ftz=true --prec-div=false: NVRTC options added to every
                                   kernel compile (Theano's nvcc.flags; at most 400 characters) */
    const char *cuda_root;      /* cuda_root=PATH: a CUDA toolkit searched first for the driver, NVRTC and
                                   cuBLAS (Theano's cuda.root; before $CUDA_PATH) */
    const char *profile_trace;  /* profile_trace=FILE.json: profile every function and write its calls,
                                   steps, transfers and GPU times as a Chrome trace (the >>trace section) */
} tn_config;

TN_API tn_result tn_init(const tn_config *cfg);   /* NULL: defaults + TENSOR_FLAGS */
TN_API const tn_config *tn_get_config(void);
TN_API tn_result tn_parse_flags(const char *flags, tn_config *cfg); /* for tests and tools */
TN_API void tn_shutdown(void);                    /* frees global pools; optional */

/* >>api_contexts --------------------------------------------------------- */
/* Contexts, as Theano's contexts=dev0->cuda0;dev1->cuda1: named places for
   data and ops. A context maps to a CUDA device (cudaN) or to the CPU (cpu);
   two names may map to one device (they share its memory and streams but
   stay distinct: mixing them still needs a transfer). The names cuda0,
   cuda1, ... and cpu are contexts of themselves without being declared.
   An input or shared variable is put on a context with tn_var_set_context;
   an op takes the context of its inputs (inputs on two contexts are an
   error naming both, unless one is moved with tn_gpu_from_host_ctx);
   nodes of no context run on the function's context (tn_func_desc.context,
   else the device flag). Without a usable GPU every context runs on the
   CPU: names, the mixing error and transfers behave the same, and a
   transfer is a host copy. Indices are stable for the process: a context
   is never removed, tn_init or tn_context_define only add or remap. */
#define TN_MAX_CONTEXTS 32
TN_API tn_result tn_context_define(const char *name, const char *target);   /* target "cudaN", "cuda" (0) or "cpu" */
TN_API int tn_context_get(const char *name);      /* its index (>= 0), or -1 with TN_ERR_INVALID naming it */
TN_API const char *tn_context_name(int ctx);      /* NULL for a bad index */
TN_API int tn_context_device(int ctx);            /* the CUDA ordinal it maps to, or TN_HOST (cpu, bad index) */
TN_API int tn_context_count(void);
/* Puts an input or shared variable on a context (NULL: none); returns v, or NULL with the error. */
TN_API tn_var *tn_var_set_context(tn_var *v, const char *ctx);
TN_API const char *tn_var_context(const tn_var *v);   /* its context's name, NULL when it has none */

/* >>api_dtype ------------------------------------------------------------ */

TN_API size_t tn_dtype_size(tn_dtype t);
TN_API const char *tn_dtype_name(tn_dtype t);     /* "float32", ... as NumPy spells them */
/* The dtype NumPy's np.dtype(name) gives, for the library's dtypes: "float32",
   "f4", "<f4", "single", "float" (float64, as NumPy), "int" (int64), "i4", "?",
   "bool", "half", "double", ...; TN_DTYPE_NONE and TN_ERR_DTYPE naming it otherwise. */
TN_API tn_dtype tn_dtype_from_name(const char *name);
TN_API tn_dtype tn_dtype_promote(tn_dtype a, tn_dtype b);
TN_API bool tn_dtype_is_float(tn_dtype t);
TN_API uint16_t tn_f32_to_f16(float f);           /* round to nearest even */
TN_API float tn_f16_to_f32(uint16_t h);

/* >>api_array ------------------------------------------------------------ */

TN_API tn_array *tn_array_empty(tn_dtype t, int ndim, const int64_t *shape);   /* uninitialised (bool: false) */
/* Shapes and axes written in place, in C and C++ alike: TN_SHAPE(3, 4) is
   the pair `ndim, shape` (2 and {3, 4}), TN_AXES(0, 2) the pair `axes,
   naxes` of the reductions: tn_array_zeros(TN_F32, TN_SHAPE(3, 4)),
   tn_sum(x, TN_AXES(0, 2), false). The arrays live until the end of the
   statement. */
#ifdef __cplusplus
#  define TN_SHAPE(...) (int)std::initializer_list<int64_t>{ __VA_ARGS__ }.size(), std::initializer_list<int64_t>{ __VA_ARGS__ }.begin()
#  define TN_AXES(...) std::initializer_list<int>{ __VA_ARGS__ }.begin(), (int)std::initializer_list<int>{ __VA_ARGS__ }.size()
#else
#  define TN_SHAPE(...) (int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), (const int64_t[]){ __VA_ARGS__ }
#  define TN_AXES(...) (const int[]){ __VA_ARGS__ }, (int)(sizeof((const int[]){ __VA_ARGS__ }) / sizeof(int))
#endif
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
/* NumPy's legacy numpy.random.RandomState, bit for bit: MT19937 seeded as
   RandomState(seed) (init_genrand) or RandomState([k0, k1, ...]) (init_by_array),
   drawing in C order as NumPy does. Float results are NumPy's float64 values
   converted (rand(...).astype(float32)); randint takes an int dtype (int64 is
   NumPy's default) and draws [low, high) as RandomState.randint. TN_DTYPE_NONE
   means float64 here, NumPy's dtype. Not thread-safe: one state per thread. */
typedef struct tn_random_state tn_random_state;
TN_API tn_random_state *tn_random_state_new(uint32_t seed);
TN_API tn_random_state *tn_random_state_new_array(const uint32_t *key, int n);
TN_API void tn_random_state_free(tn_random_state *rs);
TN_API tn_array *tn_rs_rand(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape);   /* [0, 1) */
TN_API tn_array *tn_rs_randn(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape);  /* standard normal */
TN_API tn_array *tn_rs_uniform(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape, double low, double high);
TN_API tn_array *tn_rs_normal(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape, double loc, double scale);
TN_API tn_array *tn_rs_randint(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape, int64_t low, int64_t high);
TN_API uint32_t tn_rs_uint32(tn_random_state *rs);   /* the next raw MT19937 output */
TN_API double tn_rs_double(tn_random_state *rs);     /* random_sample(): one 53-bit double */

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
TN_API tn_result tn_array_assign(tn_array *dst, const tn_array *src);   /* src broadcast to dst's shape; converts dtype */

TN_API int64_t tn_array_size(const tn_array *a);  /* number of elements */
TN_API size_t tn_array_nbytes(const tn_array *a); /* size * dtype size */
TN_API bool tn_array_is_contiguous(const tn_array *a);
TN_API double tn_array_get(const tn_array *a, const int64_t *index);   /* host arrays; NaN on error */
TN_API tn_result tn_array_set(tn_array *a, const int64_t *index, double v);
TN_API tn_result tn_array_check(const tn_array *a); /* TN_ERR_STALE for an outdated borrowed array */
TN_API tn_result tn_array_print(const tn_array *a, FILE *out);          /* like NumPy's repr of the values */
TN_API int tn_array_snprint(const tn_array *a, char *buf, size_t cap);  /* as snprintf */
/* numpy.set_printoptions: what tn_array_print and tn_array_snprint follow
   (process-wide; NumPy's defaults until set). Start from
   tn_get_print_options() and change fields; threshold TN_PRINT_ALL prints
   every element. */
typedef struct tn_print_options {
    int precision;          /* most digits after the point (8); floats print their shortest round-trip digits up to it */
    int64_t threshold;      /* arrays of more elements are summarised with "..." (1000) */
    int edgeitems;          /* items kept at each end of a summarised axis (3) */
    int linewidth;          /* characters per line before wrapping (75) */
} tn_print_options;
#define TN_PRINT_ALL INT64_MAX
TN_API tn_result tn_set_print_options(const tn_print_options *o);     /* NULL: NumPy's defaults again */
TN_API tn_print_options tn_get_print_options(void);
/* One print with its own options (o NULL: the current ones), e.g. the whole array. */
TN_API tn_result tn_array_print_with(const tn_array *a, const tn_print_options *o, FILE *out);
TN_API tn_array *tn_array_to_host(const tn_array *a);    /* copy of a device array (or a host one) */

/* >>api_graph ------------------------------------------------------------ */

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
/* A shared variable whose shape is part of its type (Theano's strict shape;
   dims of size 1 broadcast): an update or tn_shared_set_value of another
   shape is refused naming it, at compile time where the update's shape is
   known, else at the call (before any update is applied). */
TN_API tn_var *tn_shared_fixed(tn_graph *g, const char *name, const tn_array *value);
/* tn_shared with Theano's options; zeroed options (or NULL) are tn_shared.
   borrow (Theano's borrow=True): no copy; the variable's value is a view of
   the caller's array, whose buffer the library keeps a reference to (as a
   view does; memory from tn_array_wrap stays the caller's to keep alive).
   Updates and tn_shared_set_value write into that memory, after the call's
   outputs are made, so the caller's array sees each new value (and a
   borrowed output that aliases the variable sees it too); the caller's own
   writes are seen by the next call (not during one). Its shape is the
   array's for good: a new value of another shape is refused naming the
   variable, before any update of the call is applied. It stays where the
   array lives (a GPU function does not move a host array to the device;
   its device ops read it through a transfer). The array may not broadcast
   (a 0 stride on a dim over 1) nor be a function's borrowed output.
   broadcastable (Theano's broadcastable=(False, True)): value->ndim flags;
   each true dim has size 1 in the static type, broadcasts, and the
   optimizer relies on it: a value, update or tn_shared_set_value whose size
   there is not 1 is refused naming the variable and the shapes.
   fixed_shape: as tn_shared_fixed. */
typedef struct tn_shared_opts {
    bool borrow;
    const bool *broadcastable;     /* NULL: none fixed */
    bool fixed_shape;
} tn_shared_opts;
TN_API tn_var *tn_shared_ex(tn_graph *g, const char *name, const tn_array *value, const tn_shared_opts *opts);
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

/* Test values (Theano's compute_test_value flag: off, warn, raise). With
   the flag on, every constructor runs its op's CPU kernel on its inputs'
   test values as it records the node, so a shape error shows at build time,
   naming the constructor and the values' shapes, though the static shapes
   are unknown ("tn_dot: test values of shapes (3, 4) and (5, 2) do not
   fit: ..."). An input's test value is set here (copied, converted to its
   dtype; its rank and known dims must match); a shared variable's is its
   current value, a constant's its value. warn logs a failure and records
   the node without a test value; raise makes the constructor fail with the
   error. An input without a test value is, as in Theano, an error naming it
   under raise, a warning under warn (once per node built on it), and a node
   built on it has none. Ops without a CPU kernel, and the step graphs of
   tn_scan (built on placeholders), get none silently. Setting a value does
   not recompute nodes already built. off (the default) computes nothing. */
TN_API tn_var *tn_var_set_test_value(tn_var *v, const tn_array *value);   /* v, or NULL with the error */
TN_API const tn_array *tn_var_test_value(const tn_var *v);   /* output 0's test value, or NULL (no error) */

/* >>api_function --------------------------------------------------------- */

typedef struct tn_update { tn_var *shared; tn_var *value; } tn_update;
/* Theano's givens: var (an input, a shared variable or any node) replaced by
   value in every output and update at compile time; same dtype and ndim. */
typedef struct tn_given { tn_var *var; tn_var *value; } tn_given;
/* A listed input that no output or update uses: an error (Theano's default), a log line, or nothing. */
typedef enum { TN_UNUSED_RAISE = 0, TN_UNUSED_WARN, TN_UNUSED_IGNORE } tn_unused_input;

typedef struct tn_func_desc {
    int n_inputs;
    tn_var *const *inputs;         /* symbolic inputs, in call order */
    int n_outputs;
    tn_var *const *outputs;
    int n_updates;
    const tn_update *updates;      /* applied after all outputs are computed */
    bool borrow;                   /* every output borrowed (valid until the next call) */
    const bool *borrow_outputs;    /* per output; overrides `borrow` when set */
    tn_mode mode;                  /* TN_MODE_DEFAULT: the configured mode */
    const char *name;              /* for profiles and messages */
    int max_fused_inputs;          /* tests, benchmarks: most inputs of one fused elementwise op
                                      (0: the back end's limit; -1: no elementwise fusion) */
    const char *context;           /* where nodes of no context run (NULL: the device flag's device) */
    int n_givens;
    const tn_given *givens;        /* substitutions made before compiling */
    tn_unused_input on_unused_input;
    /* An input array of another dtype is converted at each call (into a
       buffer the function keeps) where NumPy's can_cast(..., 'safe') allows
       it; with allow_input_downcast also where precision may be lost
       (float64 data for a float32 input, Theano's allow_input_downcast). */
    bool allow_input_downcast;
} tn_func_desc;

TN_API tn_func *tn_function(tn_graph *g, const tn_func_desc *desc);
/* Runs the function: inputs[n_inputs] in, outputs[n_outputs] out. Inputs are
   read in place, never copied (strided views too; a GPU function copies them
   to the device); they must not change during the call. A copied output
   belongs to the caller (tn_array_free); a borrowed one to the function. */
TN_API tn_result tn_call(tn_func *f, tn_array *const *inputs, tn_array **outputs);
/* tn_call that first checks the caller's counts against the function's
   (TN_ERR_NUM_INPUTS naming both). */
TN_API tn_result tn_call_n(tn_func *f, int n_inputs, tn_array *const *inputs, int n_outputs, tn_array **outputs);
TN_API void tn_function_free(tn_func *f);


/* >>api_internal --------------------------------------------------------- */
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
    TN_VAR_FIXED_SHAPE = 1 << 2,  /* a shared variable whose shape may not change (tn_shared_fixed) */
    TN_VAR_NO_TEST_VALUE = 1 << 3,  /* an inner graph's placeholder (scan's step) and what is built on it:
                                       no test value, and none missed (compute_test_value) */
    TN_VAR_BORROWED = 1 << 4,     /* a shared variable whose value is a view of the caller's array (tn_shared_ex) */
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
    int ctx;                      /* context index + 1 (>>contexts); 0: none, it runs on its function's */
    int inplace;                  /* destroy map: 0 none; k+1: the output overwrites in[k]'s buffer */
    tn_array **test_value;        /* compute_test_value: one host value per output (graph-owned), or NULL */
};

/* Graph internals shared with the other headers. */
TN_API void *tn__graph_alloc(tn_graph *g, size_t bytes);          /* zeroed, freed with the graph */
TN_API char *tn__graph_strdup(tn_graph *g, const char *s);
TN_API tn_var *tn__graph_var(const tn_graph *g, int i);

/* The optimizer (the >>rewrite section): rewrites the function-private graph in
   place. roots[] are the function's outputs then its update values; a rewrite
   that replaces a root stores the replacement in roots[]. */
typedef struct tn_place_args tn_place_args;   /* the >>backend_api section */
/* pa: what placement and fusion need (NULL: every root an output, no update
   targets, no back-end limits). */
TN_API tn_result tn__optimize(tn_graph *fg, tn_var **roots, int n_roots, tn_mode mode, const tn_place_args *pa);
/* How often the rewrite `name` fired in this thread's last tn__optimize (NULL: all). */
TN_API int tn__rewrite_count(const char *name);

/* Buffers and arrays as the executor and tools see them (the back end's view
   is in the >>backend_api section). */
TN_API tn_array *tn__array_from_buffer(tn_buffer *b, tn_dtype t, int ndim, const int64_t *shape, const int64_t *strides, void *data, int device);
TN_API void tn__contiguous_strides(tn_dtype t, int ndim, const int64_t *shape, int64_t *strides);
TN_API void tn__buffer_retain(tn_buffer *b);
TN_API void tn__buffer_release(tn_buffer *b);

/* CUDA graph replay of f (the >>replay section): calls replayed from a
   captured graph, graphs captured, and why f runs without graphs ("" while
   it may use them). A call that captures a graph is not counted as a replay.
   For tests and benchmarks. */
TN_API void tn__replay_stats(const tn_func *f, int64_t *replays, int64_t *captures, const char **why);

/* tn_call writing output i straight into dests[i] where its step can (a
   scan's step into its stacked rows; the >>function section's
   tn__mark_dests); outputs[i] then points there, else at the function's own
   buffer, and the caller copies. */
TN_API tn_result tn__call_into(tn_func *f, tn_array *const *inputs, tn_array **outputs, tn_array *const *dests);

/* Threads: fn(ctx, lo, hi) over [0, n) in chunks of at least `grain`; runs
   inline when n < grain or threads are off. */
typedef void (*tn__range_fn)(void *ctx, int64_t lo, int64_t hi);
TN_API void tn__parallel_for(int64_t n, int64_t grain, tn__range_fn fn, void *ctx);
TN_API int tn__num_threads(void);

/* CPU products use CBLAS for float32/float64: the library the blas flag
   names (auto: libopenblas.so.0, libcblas.so.3 or libblas.so.3; none: the
   built-in kernels; else a path), loaded at the first product. */
TN_API void tn__blas_enable(bool on);      /* tests: false forces the built-in kernels */
TN_API const char *tn__blas_name(void);    /* the library in use, NULL if none or disabled */

/* >>api_files (the >>array_files section) ------------------------------- */
/* Array files as NumPy and safetensors write them.
   Loads give host arrays in C order: a Fortran-order .npy is reordered, a
   big-endian one swapped. The library's dtypes load as they are; int8,
   int16, uint8 and uint16 widen to int32, uint32 to int64, uint64 to int64
   when every value fits, all exactly; any other dtype is refused with an
   error naming it. Saves write any array (device arrays, strided and
   broadcast views) as its values in C order, in this host's byte order
   (marked in an .npy; safetensors, little-endian only, refuses other hosts).
   Errors name the function, the file (or "memory") and what was wrong:
   TN_ERR_IO for a file it cannot open, read or write, TN_ERR_INVALID for a
   malformed or truncated one ("is truncated", "is not a .npy file"),
   TN_ERR_DTYPE for a dtype it cannot hold (naming the descr, '<c8'),
   TN_ERR_SHAPE for more than TN_MAX_DIMS dims or a size that overflows. */
TN_API tn_result tn_save_npy(const char *path, const tn_array *a);
TN_API tn_array *tn_load_npy(const char *path);              /* NULL with the error */
/* The same in memory: *data (free it with tn_bytes_free) holds *size bytes. */
TN_API tn_result tn_save_npy_mem(const tn_array *a, void **data, size_t *size);
TN_API tn_array *tn_load_npy_mem(const void *data, size_t size);
TN_API void tn_bytes_free(void *data);

/* Named arrays, from an .npz or safetensors file, in the file's order. The list owns them. */
typedef struct tn_array_list {
    int n;
    char **names;
    tn_array **arrays;
    char *metadata;       /* safetensors: the __metadata__ object as JSON text; else NULL */
} tn_array_list;
TN_API tn_array *tn_array_list_get(const tn_array_list *s, const char *name);   /* borrowed; NULL with TN_ERR_INVALID */
TN_API void tn_array_list_free(tn_array_list *s);     /* frees what it holds and zeroes it */
/* .npz as numpy.savez writes it: a zip of name.npy members, stored. Loads
   read stored and deflated members (numpy.savez_compressed) and check each
   one's CRC-32; members not named *.npy are skipped. On failure *out is empty. */
TN_API tn_result tn_save_npz(const char *path, const char *const *names, const tn_array *const *arrays, int n);
TN_API tn_result tn_load_npz(const char *path, tn_array_list *out);
TN_API tn_result tn_save_npz_mem(const char *const *names, const tn_array *const *arrays, int n, void **data, size_t *size);
TN_API tn_result tn_load_npz_mem(const void *data, size_t size, tn_array_list *out);
/* safetensors: BOOL, I8..I64, U8..U64, F16, F32, F64 (BF16 and float8 are
   refused: the library has no such dtype). metadata: NULL or a JSON object
   of strings, written as __metadata__ and given back by the load. */
TN_API tn_result tn_save_safetensors(const char *path, const char *const *names, const tn_array *const *arrays, int n,
                                     const char *metadata);
TN_API tn_result tn_load_safetensors(const char *path, tn_array_list *out);
TN_API tn_result tn_save_safetensors_mem(const char *const *names, const tn_array *const *arrays, int n, const char *metadata,
                                         void **data, size_t *size);
TN_API tn_result tn_load_safetensors_mem(const void *data, size_t size, tn_array_list *out);

/* >>api_dlpack (the >>dlpack section) ------------------------------------ */
/* DLPack 1.x (github.com/dmlc/dlpack): arrays shared with PyTorch, JAX,
   CuPy, NumPy and any other DLPack library without a copy. The types below
   are dlpack.h's, same names and layout, declared under its include guard:
   a file that includes dlpack.h before tensor.h uses dlpack.h's, and one
   that includes it after gets these (include it first for its newer parts). */
#if !defined(DLPACK_DLPACK_H_) && !defined(DLPACK_MAJOR_VERSION)
#define DLPACK_DLPACK_H_
#ifdef __cplusplus
#  define DLPACK_EXTERN_C extern "C"
#else
#  define DLPACK_EXTERN_C
#endif
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0
#define DLPACK_DLL
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
    kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLOpenCL = 4, kDLVulkan = 7, kDLMetal = 8, kDLVPI = 9, kDLROCM = 10,
    kDLROCMHost = 11, kDLExtDev = 12, kDLCUDAManaged = 13, kDLOneAPI = 14, kDLWebGPU = 15, kDLHexagon = 16, kDLMAIA = 17
} DLDeviceType;
typedef struct { DLDeviceType device_type; int32_t device_id; } DLDevice;
typedef enum {
    kDLInt = 0U, kDLUInt = 1U, kDLFloat = 2U, kDLOpaqueHandle = 3U, kDLBfloat = 4U, kDLComplex = 5U, kDLBool = 6U
} DLDataTypeCode;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data;                 /* with byte_offset, the first element */
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides;           /* in elements; NULL: compact row-major */
    uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;
#endif

/* Exports a (host or CUDA device) array without copying: the managed tensor
   holds a reference to a's memory until its deleter is called (once, by the
   consumer), so a may be freed first. Strides and offsets are a's (a view
   stays a view); dtypes bool, int32, int64, float16, float32, float64. A
   device array is exported as it is: its values are ready once the call
   that made it has returned. NULL with the error. */
TN_API DLManagedTensorVersioned *tn_array_to_dlpack(const tn_array *a);
/* Imports without copying: on success the array (and its views) own mt, and
   mt's deleter runs when the last of them is freed; on failure the caller
   keeps mt (and calls its deleter). Takes kDLCPU, kDLCUDAHost and
   kDLCUDAManaged memory as host arrays, kDLCUDA as device arrays (with the
   CUDA back end loaded); major version 1; one lane; dtypes the library has. */
TN_API tn_array *tn_array_from_dlpack(DLManagedTensorVersioned *mt);
/* The same for legacy (pre-1.0, unversioned) DLPack, what NumPy 1.x's
   from_dlpack and __dlpack__() and older PyTorch speak (a PyCapsule named
   "dltensor"). Same memory, lifetime, dtypes, devices and errors; the
   legacy struct has no version and no flags: nothing in it marks a tensor
   read-only or copied, and an export says neither. */
TN_API DLManagedTensor *tn_array_to_dlpack_unversioned(const tn_array *a);
TN_API tn_array *tn_array_from_dlpack_unversioned(DLManagedTensor *mt);

/* >>api_printing --------------------------------------------------------- */

/* What this build runs with, for bug reports: the version, the SIMD the
   compiler targeted, CPU threads, the BLAS library (or the built-in
   kernels), the GPU (name, driver, NVRTC and cuBLAS versions; else why
   none) and the kernel cache directory. */
TN_API tn_result tn_print_info(FILE *out);

TN_API tn_result tn_debugprint(const tn_var *v, FILE *out);
TN_API tn_result tn_debugprint_function(const tn_func *f, FILE *out);
TN_API tn_result tn_print_toposort(const tn_func *f, FILE *out);

/* >>api_dot: Graphviz pictures (the >>printers section), as Theano's pydotprint.
   Ellipses are variables (inputs blue, shared green, constants grey), boxes
   ops (green: on a GPU, red: transfers, fused Composites list their scalar
   program); edges carry dtype and shape. Render: dot -Tpng f.dot -o f.png */
TN_API tn_result tn_write_dot(const tn_func *f, FILE *out);       /* the compiled (rewritten) graph */
TN_API tn_result tn_write_dot_var(const tn_var *v, FILE *out);    /* the graph under v, as built */

/* >>api_profile (the >>profile section). The flag profile=1 profiles every function and
   prints its report to stderr when it is freed; tn_profile_enable profiles
   one. The report: totals (calls, executor, ops, compile time split into
   rewrites and preparation), then time per op class, per op and per apply
   node, the cpu/gpu/transfer split, and advice (inputs copied to the device
   on every call with unchanged data; host round trips between GPU ops). */
TN_API tn_result tn_profile_enable(tn_func *f, bool on);
TN_API tn_result tn_profile_print(const tn_func *f, FILE *out);
TN_API void tn_profile_reset(tn_func *f);
/* Profiled input i had the same data on every call since the first (needs
   at least two calls): the same pointer and size, the same checksum of 16
   words spread over it on every call, and the same checksum of all its
   bytes at calls 1, 2, 4, 8, ... (so profiling reads a large input whole
   only O(log calls) times). A change confined to unsampled bytes between
   two whole checks can go unseen; the advice it feeds is a hint. */
TN_API bool tn_profile_input_unchanged(const tn_func *f, int i);
/* How many of f's compiled steps run on a device (GPU ops and transfers to
   it): 0 means everything runs on the CPU. What the examples' "Used the gpu"
   line is decided from. */
TN_API int tn_function_device_steps(const tn_func *f);

#ifdef __cplusplus
}
#endif

#include "tensor_ops.h"

/* >>backend_api ----------------------------------------------------------- */
/* The whole interface between tensor.h and a device back end (tensor_cuda.h):
   what the back end implements (tn_device_ops, tn_backend and its per-op
   table) and every private function of tensor.h and tensor_ops.h it may call.
   Not a stable API. */
#ifdef __cplusplus
extern "C" {
#endif

/* Errors: set this thread's last error; returns r so callers can `return tn__err(...)`. */
TN_API tn_result tn__err(tn_result r, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* TN_ERR_NULL for a NULL argument `what` of `who`: most often what an
   earlier constructor returned, so this thread's last error is quoted. */
TN_API tn_result tn__err_null(const char *who, const char *what_fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Prefixes this thread's last error with "who: " unless it already starts so
   (an error raised inside a public function names that function); returns r,
   or for a NULL passed between who's own constructors the first error's code. */
TN_API tn_result tn__err_in(const char *who, tn_result r);
/* Renames this thread's last error from `inner` to `who` (a public function
   that is a thin wrapper over another): "inner: m" becomes "who: m". */
TN_API tn_result tn__err_as(const char *who, const char *inner);
TN_API void tn__warn(const char *fmt, ...);                    /* a warning through the log callback */
TN_API const char *tn__shape_str(int ndim, const int64_t *shape, char buf[128]);  /* "(3, 4)", for messages */
TN_API bool tn__log_set(void);                                 /* a log callback is set (else messages go to stderr) */

/* Memory hooks (TN_MALLOC...) as functions, for the other headers. */
TN_API void *tn__malloc(size_t n);
TN_API void *tn__calloc(size_t n, size_t size);
TN_API void *tn__realloc(void *p, size_t n);
TN_API void tn__free(void *p);
/* Growable arrays: p (NULL or from tn__malloc) with room for at least need
   elements of elem bytes, *cap doubling from at least min_cap. NULL when out
   of memory (p and *cap left as they were). */
TN_API void *tn__grow(void *p, int *cap, int need, int min_cap, size_t elem);
/* String building: a growable, NUL-terminated buffer; after a failed
   allocation oom is set and further writes do nothing. Free s with tn__free. */
typedef struct tn__sb { char *s; size_t n, cap; bool oom; } tn__sb;
#define TN__SB_INIT { NULL, 0, 0, false }    /* an empty builder (every field: C++ warns of missing ones) */
TN_API void tn__sb_putn(tn__sb *b, const char *text, size_t n);
TN_API void tn__sb_puts(tn__sb *b, const char *text);
TN_API void tn__sb_printf(tn__sb *b, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Dimension merging: drops the size-1 dims of an iteration space (shape,
   and st[o] the strides of each of nops operands, 0 where broadcast) and
   merges each dim into the one before where every operand's strides chain
   (st[o][prev] == st[o][d] * shape[d]), in place, so a contiguous walk is one
   row. Returns the dims left: 0 when every dim was 1. */
TN_API int tn__merge_dims(int ndim, int64_t *shape, int nops, int64_t (*st)[TN_MAX_DIMS]);

/* Graph walking and building (placement rewires the function's private graph). */
TN_API tn_var *tn__node(tn_graph *g, int op, int n_in, tn_var *const *in, const tn_params *p, void *ext, const char *who);  /* records a node, type inferred; NULL (error set) on failure */
/* The same with n_out outputs; tn__proj(node, k) is output k. */
TN_API tn_var *tn__node_multi(tn_graph *g, int op, int n_in, tn_var *const *in, const tn_params *p, void *ext, int n_out,
                              const char *who);
TN_API tn_var *tn__proj(tn_var *node, int k);
TN_API int tn__graph_nvars(const tn_graph *g);                 /* node ids are below this */

/* Ops: definitions (name, kind, label, CPU kernel) and elementwise programs. */
TN_API bool tn__scan_device_ok(const tn_var *node);            /* a scan whose step was compiled for device arrays */
TN_API const tn_op_def *tn__op_def(int op);
TN_API tn_op_kind tn__op_kind(int op);
TN_API const tn_ew_info *tn__ew_info(int op);                  /* NULL for non-elementwise ops */
TN_API tn_ew_program *tn__ew_program_of(tn_var *node);         /* one-instruction program of an elementwise node (graph arena) */
/* The float kernels of exp, log, tanh, ... (tensor_ops.h >>vmath) for instruction set
   level `want` (0 SSE2, 1 AVX2+FMA, 2 AVX-512F; at most what this CPU has) or, for -1,
   the best; returns the level now in effect. For tests. */
TN_API int tn__vm_level(int want);
TN_API const char *tn__scalar_helpers_source(void);            /* TN__SCALAR_HELPERS as text, for generated kernels */
TN_API int tn__cum_cuda_source(int op, tn_dtype t, char *buf, size_t cap);   /* cumsum/cumprod as CUDA C (tensor_ops.h >>cum_cuda); -1: no kernel */
TN_API int tn__eye_cuda_source(size_t es, char *buf, size_t cap);          /* Eye as CUDA C (tensor_ops.h >>eye_cuda); -1: no kernel */
TN_API size_t tn__eye_one_bits(tn_dtype t, unsigned char one[8]);          /* dtype t's 1 as bytes; returns its size */
/* Gather/scatter (mode 0 gather, 1 set, 2 add) and sort kernels as CUDA C (tensor_ops.h >>index_cuda); -1: no kernel. */
TN_API int tn__index_cuda_source(int mode, tn_dtype t, int nd, int k, char *buf, size_t cap);
TN_API int tn__index_cuda_source_wide(int mode, int nd, int k, char *buf, size_t cap);
TN_API int tn__sort_cuda_source(tn_dtype t, bool desc, char *buf, size_t cap);
TN_API int tn__conv_cuda_source(tn_dtype t, char *buf, size_t cap);   /* im2col and col2im as CUDA C (tensor_ops.h >>conv_cuda); -1: none */
TN_API int tn__pool_cuda_source(tn_dtype t, char *buf, size_t cap);   /* direct pooling as CUDA C (tensor_ops.h >>pool_cuda); -1: none */
TN_API int tn__pool_grad_cuda_source(tn_dtype t, char *buf, size_t cap);   /* pooling's gradient as CUDA C (tensor_ops.h >>pool_grad_cuda); -1: none */
TN_API int tn__gemv_cuda_source(tn_dtype t, char *buf, size_t cap);   /* small gemv as CUDA C (tensor_ops.h >>gemv_cuda); -1: none */
TN_API int tn__random_cuda_source(int dist, tn_dtype t, char *buf, size_t cap);   /* a random draw as CUDA C (tensor_ops.h >>random_cuda); -1: none */
TN_API bool tn__random_cuda_expr(int dist, tn_dtype t, const char **prep, const char **val);  /* a draw's values as CUDA C (>>random_cuda) */
TN_API const char *tn__random_cuda_helpers(void);                                  /* the draw functions as CUDA C */

/* Device memory: the back end allocates, frees and copies buffers of its devices. */
typedef struct tn_device_ops {
    void *(*alloc)(int device, size_t bytes);
    void (*free)(int device, void *ptr);
    /* copies between host and device or device and device, then waits */
    tn_result (*copy)(void *dst, int dst_device, const void *src, int src_device, size_t bytes);
    /* Page-locked host memory that copies from `device` land in directly, and
       the way back (NULL, or a NULL result: ordinary host memory). */
    void *(*pinned_alloc)(int device, size_t bytes);
    void (*pinned_free)(int device, void *p, size_t bytes);
    /* HostFromGpu's kernel: in (device) copied into the contiguous host array
       out, ordered after the work queued on in, then waited for (NULL: copy).
       Inside a call's fence scope (tn__fence_open) a copy into page-locked
       memory may stay queued until the fence below. */
    tn_result (*d2h)(const tn_var *node, const tn_array *in, tn_array *out);
    /* Host memory page-locked in place for direct copies, while `device`'s
       context is current (true: done, *pinned_elsewhere: it already was,
       by its owner, so it is not unregistered), and unregistered (NULL: none). */
    bool (*host_register)(int device, void *p, size_t bytes, bool *pinned_elsewhere);
    void (*host_unregister)(int device, void *p);
    /* Waits for this thread's queued copies that read or write host memory. */
    tn_result (*fence)(void);
} tn_device_ops;
/* Whether bytes [p, p + n) of host buffer b are reached by DMA without
   staging: page-locked by the back end (tn_device_ops.pinned_alloc), by
   their owner, or registered here the second time a copy to a device reads
   the buffer (then unregistered when it is freed). The whole buffer is
   registered; a tn_array_wrap of the caller's memory, whose extent is
   unknown, registers the bytes the copy reads. Ranges under 64 KiB or over
   1 GiB stage (a memcpy is cheaper than registering the first; the second
   would lock too much memory). */
TN_API bool tn__buffer_host_direct(tn_buffer *b, int device, const void *p, size_t n);
TN_API bool tn__buffer_host_ready(const tn_buffer *b, const void *p, size_t n);   /* the same, registering nothing */
#define TN__PIN_MIN ((size_t)64 << 10)
#define TN__PIN_MAX ((size_t)1 << 30)
/* Open while a call runs its steps: copies that touch host
   memory may stay queued until the call's fence (tn_device_ops.fence). */
TN_API bool tn__fence_open(void);
/* A scope around several calls (nested): leaving the outermost one waits. */
TN_API void tn__fence_enter(void);
TN_API tn_result tn__fence_leave(void);
/* f queues its work on owner's stream, not one of its own (a replica's update
   function after its step: no switch of streams, no shared variable's event
   between the two); owner keeps the stream and must outlive f's calls. */
TN_API void tn__func_stream_from(tn_func *f, const tn_func *owner);
TN_API void tn__set_device_ops(const tn_device_ops *ops);
TN_API const tn_device_ops *tn__get_device_ops(void);
TN_API tn_array *tn__array_alloc(tn_dtype t, int ndim, const int64_t *shape, int device); /* contiguous, uninitialised, on any device */

/* One row of a back end's per-op table (tn_backend.ops[TN_OP_*]). A NULL row:
   the back end has no kernel for the op, which runs on the CPU (placement,
   assert_no_cpu_op and the profiler say so). Adding a device kernel for an op
   is writing these functions and setting its row. */
typedef struct tn_backend_op {
    /* May this node run on the device (dtypes, shapes, operand counts)? NULL: every node of the op. */
    bool (*supports)(const tn_var *node);
    /* At compile time, once per placed node: per-node state (NULL: none). */
    tn_result (*prepare)(const tn_var *node, void **state);
    /* At each call: inputs and outputs in device memory (views: aliases of their input). */
    tn_result (*run)(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out);
    /* Frees what prepare made (NULL: nothing to free). */
    void (*release)(void *state);
    /* Host work a captured graph cannot hold (NULL: none), done before each
       call that may replay one (the >>replay section's probe): e.g. packing
       a host input into the node's staging buffer. *key goes into the
       replay signature in place of the step's input pointers (what the
       graph's copy reads); 0: the step cannot be replayed this call. */
    tn_result (*stage)(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out, uint64_t *key);
    /* Whether the node's run can go into a captured graph (NULL: it can); not
       one that waits for the device as it runs (a result read back to the
       host before it returns): a function with such a step runs without graphs. */
    bool (*capturable)(const tn_var *node);
} tn_backend_op;

/* What the compiler tells the placement and fusion passes about the function
   being compiled, instead of globals: its roots are n_outputs outputs, then
   one update value per update target. */
struct tn_place_args {
    int n_outputs;
    tn_var *const *update_targets;  /* the user's shared variables, in update order (NULL: no updates) */
    int max_fused_inputs;           /* most inputs of one fused elementwise op (0: no elementwise fusion) */
    bool fuse_into_reductions;      /* an elementwise group read by one reduction becomes its prologue, and the
                                       only elementwise reader of a reduction's or Gemv's result its epilogue */
    int context;                    /* where nodes of no context go: context index + 1 (0: the device flag's) */
};

/* Where a back end's profiler collection sends each step it timed
   (tn_backend.prof_collect). */
typedef struct tn_prof_sink {
    void (*step)(void *user, int step, double start, double seconds);
    void *user;
    double (*now)(void);               /* the host clock the starts are on */
} tn_prof_sink;

/* A device back end as the compiler and executor see it. The placement pass
   sets node->device on the nodes it moves; for those the executor calls the
   op's row: prepare once at compile time, run at each call, with inputs and
   outputs in device memory (buffers from tn_device_ops). */
typedef struct tn_backend {
    const char *name;
    const tn_backend_op *const *ops;   /* TN_OP_COUNT rows, by op index */
    int max_operands;                  /* most arrays one kernel takes (0: no limit); fusion keeps 8 for outputs */
    /* a rewrite pass run between specialize and fuse: places nodes, inserts
       and cancels transfers (NULL: everything stays on the host) */
    tn_result (*place)(tn_graph *fg, tn_var **roots, int n_roots, const tn_place_args *pa);
    /* Profiler GPU times (the >>profile section; NULL: host times): a pool of
       events for n_steps steps, made once per profiled function (the
       profiler asks for one step more: a replayed call's graph). prof_mark
       records mark 2k (before step k) or 2k+1 (after) on the stream, without
       waiting. prof_collect waits for marks recorded two collections ago (all:
       every mark) and gives each step run to sink->step: its device seconds
       and its start on the host's clock (sink->now's seconds; negative when
       sink->now is NULL, no starts wanted, or the back end cannot tell);
       sink NULL drops them unwaited. */
    void *(*prof_new)(int n_steps);
    tn_result (*prof_mark)(void *pstate, int mark);
    tn_result (*prof_collect)(void *pstate, const tn_prof_sink *sink, bool all);
    void (*prof_free)(void *pstate);
    /* Replay (CUDA graphs; the >>cuda_replay section; all NULL: no capture).
       begin starts capturing the calling thread's stream of the function
       being called; end stops it and instantiates the graph into *exec (exec
       NULL: discard an aborted capture); an error from either means this
       function cannot be captured. */
    tn_result (*replay_begin)(void);
    tn_result (*replay_end)(void **exec);
    tn_result (*replay_launch)(void *exec);
    void (*replay_release)(void *exec);
    /* Streams (the >>cuda_streams section; NULL: one queue for everything):
       func_new makes a compiled function's own queue on `device` (where its
       device steps run; NULL result: it runs on whatever queue is current);
       func_enter, at each call, makes it current, ordered after all work
       queued before; func_free drops it. */
    void *(*func_new)(int device);
    tn_result (*func_enter)(void *fstate);
    void (*func_free)(void *fstate);
    /* Shared variables used by functions on different streams (the
       >>shared_locks section; NULL: one queue orders everything). Under the
       variable's lock, shared_order orders the calling thread's current
       stream after all work queued so far on the stream that used the
       variable last, and notes the current stream as its last user; when
       that is the same stream it costs nothing (a function called in a
       loop). *state is the back end's record, made on first use;
       shared_free drops it. */
    tn_result (*shared_order)(void **state);
    void (*shared_free)(void *state);
    /* Kernel compiles on the calling thread so far (NULL: the back end
       compiles none): how many, the seconds they took, how many were
       written to the disk cache, and that cache's directory ("" if none).
       A function's first call says so in one log line when its compiles
       took over a second (>>compile_note). */
    void (*compile_clock)(uint64_t *kernels, double *seconds, uint64_t *stored, char *dir, size_t dir_cap);
    /* Under capture (the >>replay section's graph of the data; NULL: each
       step follows the one before): replay_point gives the graph nodes the
       next captured work would follow (*n of them; the first cap into
       nodes), replay_follow makes it follow exactly nodes[0 .. n) (none:
       the next work starts the graph). */
    tn_result (*replay_point)(void **nodes, size_t cap, size_t *n);
    tn_result (*replay_follow)(void *const *nodes, size_t n);
} tn_backend;
TN_API void tn__set_backend(const tn_backend *b);
TN_API const tn_backend *tn__get_backend(void);    /* NULL: CPU only */
/* The row of op in b's table: NULL where b has none (the op runs on the CPU). */
TN_API const tn_backend_op *tn__backend_row(const tn_backend *b, int op);
/* Can b run this node (a row, and its supports() says yes)? */
TN_API bool tn__backend_runs(const tn_backend *b, const tn_var *node);
/* Why node stays on the CPU under b, for messages: "no GPU kernel in the cuda
   back end" or "the cuda back end has a row for this op, but it declined these
   inputs: float64 (3, 4)". */
TN_API const char *tn__backend_why_cpu(const tn_backend *b, const tn_var *node, char *buf, size_t cap);

/* Bodies-only helpers a back end compiled in the same translation unit uses
   (static, in the implementation): tn__node_label (a node's debugprint label),
   tn__toposort (a graph's nodes in order), tn__var_new and tn__graph_own (a
   constant node and its value in a graph), tn__broadcast_strides (strides of
   an array broadcast to a shape), tn__scan_run and tn__scan_mem (a scan
   loop with device memory), tn__func_share_stream, tn__log (a line through
   the log callback), the hooks tn__lib.device_init_hook,
   tn__lib.shutdown_hook and tn__lib.info_hook, and the reduction planner of tensor_ops.h
   (tn__rplan, tn__rplan_build, tn__rk_of, TN__RK_MAX, tn__reduce_dtype,
   tn__reduce_label, tn__rfinish, tn__rstore, tn__rop_needs_nonempty,
   TN__RED_MAX_SRC, the fold table as text: tn__rfold_src, tn__rfold_text;
   tn__ew_casts; a random draw's kernel arguments: tn__rnd_args, tn__rnd_args_of,
   tn__rnd_per). */

#ifdef __cplusplus
}
#endif
#endif /* TENSOR_H */

/* >>implementation ======================================================= */
/* Bodies in dependency order: core, arrays, graph (with the compiled
   function's data, >>func_types), ops (the catalogue of tensor_ops.h, then
   transfers, custom ops, scan loops), compiler (rewrites, gradients),
   executor (>>function .. >>check_mode), tools (debugprint, profiler,
   printers), and last the op table that lists every part's rows. */
#if defined(TENSOR_IMPLEMENTATION) && !defined(TENSOR_IMPLEMENTATION_DONE)
#define TENSOR_IMPLEMENTATION_DONE
/* >>core ============================================================== */
/* Errors, config and flags, memory hooks, dtypes, float16, threads */
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <math.h>
#include <pthread.h>
#include <limits.h>
#include <unistd.h>
#include <errno.h>

/* >>cxx: the implementation compiles as C11 and as C++11 or later. What the
   two languages spell differently is spelled here, once. Atomics: C11's
   <stdatomic.h>; C++ has no such header before C++23, so there the same
   operations are GCC/Clang's __atomic builtins on plain objects (the memory
   orders are the same). */
#ifdef __cplusplus
#  define TN__RESTRICT __restrict
#  define TN__THREAD_LOCAL thread_local
#  define TN__STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#  define TN__ALIGNAS(n) alignas(n)
#  define TN__ATOMIC(T) T
typedef bool tn__atomic_flag;
#  define TN__RELAXED __ATOMIC_RELAXED
#  define TN__ACQUIRE __ATOMIC_ACQUIRE
#  define TN__RELEASE __ATOMIC_RELEASE
#  define tn__atomic_load_explicit(p, mo) __atomic_load_n(p, mo)
#  define tn__atomic_store_explicit(p, v, mo) __atomic_store_n(p, v, mo)
#  define tn__atomic_load(p) __atomic_load_n(p, __ATOMIC_SEQ_CST)
#  define tn__atomic_store(p, v) __atomic_store_n(p, v, __ATOMIC_SEQ_CST)
#  define tn__atomic_fetch_add(p, v) __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST)
#  define tn__atomic_cas_weak(p, expected, desired) \
       __atomic_compare_exchange_n(p, expected, desired, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
#  define tn__atomic_flag_test_and_set_explicit(p, mo) __atomic_test_and_set(p, mo)
#  define tn__atomic_flag_clear_explicit(p, mo) __atomic_clear(p, mo)
/* g++ warns of every field a designated initialiser leaves out; C zeroes
   them, and the implementation names only the fields it sets throughout.
   Restored at the end of each implementation (TN__CXX_END). */
#  if defined(__GNUC__) && !defined(__clang__)
#    define TN__CXX_BEGIN _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmissing-field-initializers\"")
#    define TN__CXX_END _Pragma("GCC diagnostic pop")
#  endif
#else
#  include <stdatomic.h>
#  define TN__RESTRICT restrict
#  define TN__THREAD_LOCAL _Thread_local
#  define TN__STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#  define TN__ALIGNAS(n) _Alignas(n)
#  define TN__ATOMIC(T) _Atomic(T)
typedef atomic_flag tn__atomic_flag;
#  define TN__RELAXED memory_order_relaxed
#  define TN__ACQUIRE memory_order_acquire
#  define TN__RELEASE memory_order_release
#  define tn__atomic_load_explicit atomic_load_explicit
#  define tn__atomic_store_explicit atomic_store_explicit
#  define tn__atomic_load atomic_load
#  define tn__atomic_store atomic_store
#  define tn__atomic_fetch_add atomic_fetch_add
#  define tn__atomic_cas_weak atomic_compare_exchange_weak
#  define tn__atomic_flag_test_and_set_explicit atomic_flag_test_and_set_explicit
#  define tn__atomic_flag_clear_explicit atomic_flag_clear_explicit
#endif
#ifndef TN__CXX_BEGIN
#  define TN__CXX_BEGIN
#  define TN__CXX_END
#endif
TN__CXX_BEGIN

#if defined(TN_MALLOC) || defined(TN_REALLOC) || defined(TN_FREE)
#  if !defined(TN_MALLOC) || !defined(TN_REALLOC) || !defined(TN_FREE)
#    error "define all of TN_MALLOC, TN_REALLOC and TN_FREE, or none"
#  endif
#else
#  define TN_MALLOC(n) malloc(n)
#  define TN_REALLOC(p, n) realloc(p, n)
#  define TN_FREE(p) free(p)
#endif
#ifndef TN_ASSERT
#  include <assert.h>
#  define TN_ASSERT(x) assert(x)
#endif
#if !defined(TN_DEBUG_BORROW) && !defined(NDEBUG)
#  define TN_DEBUG_BORROW 1
#endif

/* >>context: the library's state, in one struct (sokol's _sg). Per-call and
   per-device state lives in tn_func and in the back end's device contexts. */

#ifndef TN_NO_THREADS
typedef struct tn__pool {
    pthread_mutex_t mu;
    pthread_cond_t done;
    pthread_cond_t *go;          /* one per worker: a job wakes only the workers it has parts for */
    pthread_t *tid;
    int n;                       /* workers, not counting the caller */
    TN__ATOMIC(uint64_t) job_id; /* written under mu; read without it by a worker that spins */
    int parts;                   /* the job's ranges; workers 1..parts-1 are woken for it */
    int pieces;                  /* pieces a range (1..TN__POOL_PIECES), chunk / pieces items each */
    TN__ATOMIC(uint64_t) *claim; /* range r at claim[r * TN__POOL_CLAIM_STRIDE]: (job id << 5) + its next piece */
    TN__ATOMIC(int) pending;     /* pieces not yet run to their end; read by a caller that spins */
    TN__ATOMIC(uint64_t) naps;   /* tn__pool_nap's count: spinning workers go to sleep when it moves */
    bool quit;
    tn__range_fn fn;
    void *ctx;
    int64_t n_items, chunk;
} tn__pool;
#define TN__POOL_PIECES 16       /* at most, a range; 5 bits of claim[] hold 0..16 */
#define TN__POOL_CLAIM_STRIDE 8  /* ranges' claims 64 bytes apart (no two threads' claims in one line) */
#endif

static struct tn__lib {
    pthread_mutex_t init_mu;               /* tn_init and the config's strings */
    pthread_mutex_t log_mu;                /* log_fn with log_user */
    tn_config cfg;                         /* cache_dir points into interned */
    TN__ATOMIC(bool) cfg_ready;
    char **interned;                       /* the config's strings: one copy per value, kept until tn_shutdown */
    int n_interned;
    tn_log_fn log_fn;
    void *log_user;
    /* registries: the device back end, its memory operations and hooks */
    TN__ATOMIC(const tn_backend *) backend;     /* atomic: tn_init may swap it while functions compile */
    TN__ATOMIC(const tn_device_ops *) device_ops;
    tn_result (*device_init_hook)(const tn_config *cfg);    /* set by tensor_cuda.h at load time */
    void (*shutdown_hook)(void);
    void (*info_hook)(tn__sb *out);        /* tn_print_info's GPU lines (tensor_cuda.h, set with device_init_hook) */
#ifndef TN_NO_THREADS
    tn__pool pool;                         /* the >>threads section */
    pthread_once_t pool_once;
    pthread_mutex_t pool_caller;           /* one parallel job at a time */
#endif
    TN__ATOMIC(uint_fast64_t) shared_seq;       /* lock order of shared variables (>>shared_locks) */
    pthread_mutex_t handles_mu;            /* freed function blocks, oldest first (>>func_handles) */
    tn_func *freed_funcs, *freed_funcs_tail;
    TN__ATOMIC(int) vm_level;              /* the >>vmath kernels: 0 the CPU's best, else 1 + the level tests forced */
} tn__lib = {
    .init_mu = PTHREAD_MUTEX_INITIALIZER,
    .log_mu = PTHREAD_MUTEX_INITIALIZER,
    .cfg = { .floatX = TN_F32, .allow_gc = true },
#ifndef TN_NO_THREADS
    .pool_once = PTHREAD_ONCE_INIT,
    .pool_caller = PTHREAD_MUTEX_INITIALIZER,
#endif
    .handles_mu = PTHREAD_MUTEX_INITIALIZER,
};

/* >>core_helpers: growable arrays, string building, dimension merging */

TN_API void *tn__grow(void *p, int *cap, int need, int min_cap, size_t elem) {
    if (need <= *cap && p) return p;
    int64_t c = *cap > 0 ? *cap : min_cap > 0 ? min_cap : 1;
    while (c < need) c *= 2;
    if (c > INT_MAX || (elem && (uint64_t)c > SIZE_MAX / elem)) return NULL;
    void *q = tn__realloc(p, (size_t)c * elem);
    if (q) *cap = (int)c;
    return q;
}

/* Room for extra more bytes and the terminating NUL. */
static bool tn__sb_reserve(tn__sb *b, size_t extra) {
    if (b->oom) return false;
    if (b->s && b->n + extra < b->cap) return true;
    size_t cap = b->cap ? b->cap * 2 : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    char *s = (char *)tn__realloc(b->s, cap);
    if (!s) { b->oom = true; return false; }
    b->s = s;
    b->cap = cap;
    return true;
}
TN_API void tn__sb_putn(tn__sb *b, const char *text, size_t n) {
    if (!tn__sb_reserve(b, n)) return;
    memcpy(b->s + b->n, text, n);
    b->n += n;
    b->s[b->n] = 0;
}
TN_API void tn__sb_puts(tn__sb *b, const char *text) { tn__sb_putn(b, text, strlen(text)); }
TN_API void tn__sb_printf(tn__sb *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) { b->oom = true; return; }
    if (b->s && b->n + (size_t)k < b->cap) { b->n += (size_t)k; return; }
    if (!tn__sb_reserve(b, (size_t)k)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

/* Bounded string building: appends into a caller's buf[cap] (labels,
   messages), truncating when it is full; buf stays NUL-terminated once
   anything was written. */
typedef struct tn__sbuf { char *buf; size_t cap, len; } tn__sbuf;
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void tn__sbuf_put(tn__sbuf *b, const char *fmt, ...) {
    if (b->len + 1 >= b->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n > 0) b->len = b->len + (size_t)n < b->cap ? b->len + (size_t)n : b->cap - 1;
}

TN_API int tn__merge_dims(int ndim, int64_t *shape, int nops, int64_t (*st)[TN_MAX_DIMS]) {
    int cd = 0;
    for (int d = 0; d < ndim; d++) {
        int64_t n = shape[d];
        if (n == 1) continue;
        bool merge = cd > 0;
        for (int o = 0; o < nops && merge; o++) merge = st[o][cd - 1] == st[o][d] * n;
        if (merge) shape[cd - 1] *= n;
        else shape[cd++] = n;
        for (int o = 0; o < nops; o++) st[o][cd - 1] = st[o][d];
    }
    return cd;
}

/* >>errors */

static TN__THREAD_LOCAL tn_result tn__last_result;
static TN__THREAD_LOCAL tn_result tn__null_cause;     /* a TN_ERR_NULL quoting an earlier error: that error's code */
static TN__THREAD_LOCAL char tn__last_msg[1024];

TN_API bool tn__log_set(void) {
    pthread_mutex_lock(&tn__lib.log_mu);
    bool set = tn__lib.log_fn != NULL;
    pthread_mutex_unlock(&tn__lib.log_mu);
    return set;
}

static void tn__log(tn_log_level level, const char *msg) {
    pthread_mutex_lock(&tn__lib.log_mu);
    tn_log_fn fn = tn__lib.log_fn;
    void *user = tn__lib.log_user;
    pthread_mutex_unlock(&tn__lib.log_mu);
    if (fn) fn(level, msg, user);
    else if (level == TN_LOG_WARN) fprintf(stderr, "tensor.h: warning: %s\n", msg);
}

TN_API const char *tn_result_string(tn_result r) {
    static const char *const names[] = {
        "TN_OK", "TN_ERR_NULL", "TN_ERR_INVALID", "TN_ERR_SHAPE", "TN_ERR_DTYPE", "TN_ERR_AXIS",
        "TN_ERR_NUM_INPUTS", "TN_ERR_UPDATE", "TN_ERR_GRAPH", "TN_ERR_DISCONNECTED", "TN_ERR_STALE",
        "TN_ERR_OOM", "TN_ERR_DEVICE", "TN_ERR_UNSUPPORTED", "TN_ERR_INTERNAL", "TN_ERR_CHECK",
        "TN_ERR_BUSY", "TN_ERR_IO",
    };
    TN__STATIC_ASSERT(sizeof names / sizeof names[0] == TN_RESULT_COUNT, "tn_result_string: one name per result");
    return (unsigned)r < TN_RESULT_COUNT ? names[r] : "TN_ERR_UNKNOWN";
}

TN_API const char *tn_last_error(void) { return tn__last_msg; }
TN_API tn_result tn_last_result(void) { return tn__last_result; }
TN_API void tn_clear_error(void) { tn__last_result = TN_OK; tn__last_msg[0] = 0; }
TN_API void tn_set_log(tn_log_fn fn, void *user) {
    pthread_mutex_lock(&tn__lib.log_mu);
    tn__lib.log_fn = fn;
    tn__lib.log_user = user;
    pthread_mutex_unlock(&tn__lib.log_mu);
}

TN_API tn_result tn__err(tn_result r, const char *fmt, ...) {
    /* Format into a local first: fmt's arguments may point into tn__last_msg
       (a message that wraps the previous one). */
    char buf[sizeof tn__last_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(tn__last_msg, buf, sizeof buf);
    tn__last_result = r;
    tn__null_cause = TN_OK;
    tn__log(TN_LOG_ERROR, tn__last_msg);
    return r;
}

TN_API tn_result tn__err_null(const char *who, const char *what_fmt, ...) {
    char what[128];
    va_list ap;
    va_start(ap, what_fmt);
    vsnprintf(what, sizeof what, what_fmt, ap);
    va_end(ap);
    static const char ask[] = "(did an earlier call fail? ";
    if (tn__last_result != TN_OK && tn__last_msg[0]) {
        /* a chain of NULLs quotes the first error only */
        const char *first = tn__last_msg, *p;
        while ((p = strstr(first, ask)) != NULL) first = p + sizeof ask - 1;
        int n = (int)strlen(first);
        while (first != tn__last_msg && n > 0 && first[n - 1] == ')') n--;
        tn_result cause = tn__last_result == TN_ERR_NULL && tn__null_cause != TN_OK ? tn__null_cause : tn__last_result;
        tn__err(TN_ERR_NULL, "%s: %s is NULL %s%.*s)", who, what, ask, n, first);
        tn__null_cause = cause;
        return TN_ERR_NULL;
    }
    return tn__err(TN_ERR_NULL, "%s: %s is NULL", who, what);
}

TN_API tn_result tn__err_in(const char *who, tn_result r) {
    size_t n = strlen(who);
    if (r == TN_OK) return r;
    /* a NULL passed between the function's own constructors: the first error's code */
    if (r == TN_ERR_NULL && tn__last_result == TN_ERR_NULL && tn__null_cause != TN_OK) r = tn__null_cause;
    if (strncmp(tn__last_msg, who, n) != 0 || tn__last_msg[n] != ':')
        tn__err(r, "%s: %s", who, tn__last_msg[0] ? tn__last_msg : tn_result_string(r));
    else
        tn__last_result = r;
    return r;
}

TN_API tn_result tn__err_as(const char *who, const char *inner) {
    size_t n = strlen(inner);
    const char *m = tn__last_msg;
    if (!strncmp(m, inner, n) && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
    return tn__err(tn__last_result, "%s: %s", who, m);
}

TN_API void tn__warn(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    tn__log(TN_LOG_WARN, buf);
}

TN_API const char *tn__shape_str(int ndim, const int64_t *shape, char buf[128]) {
    tn__sbuf b = { buf, 128, 0 };
    tn__sbuf_put(&b, "(");
    for (int d = 0; d < ndim && b.len < 100; d++) {
        if (shape[d] < 0) tn__sbuf_put(&b, "?");
        else tn__sbuf_put(&b, "%lld", (long long)shape[d]);
        if (d + 1 < ndim || ndim == 1) tn__sbuf_put(&b, ndim == 1 ? "," : ", ");
    }
    tn__sbuf_put(&b, ")");
    return buf;
}

/* >>memory */

/* A failed allocation gives the host pool's cached blocks back (>>host_pool)
   and tries once more, if there were any. */
static size_t tn__host_pool_drain(void);
TN_API void *tn__malloc(size_t n) {
    void *p = TN_MALLOC(n ? n : 1);
    if (!p && tn__host_pool_drain()) p = TN_MALLOC(n ? n : 1);
    return p;
}
TN_API void *tn__calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    size_t bytes = n * size;
    if (bytes > (size_t)PTRDIFF_MAX) return NULL;      /* no object is larger (and GCC's fortified memset knows it) */
    void *p = tn__malloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}
/* A failed realloc leaves p as it was: GCC 12's use-after-free warning does not know. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wuse-after-free"
#endif
TN_API void *tn__realloc(void *p, size_t n) {
    void *q = TN_REALLOC(p, n ? n : 1);
    if (!q && tn__host_pool_drain()) q = TN_REALLOC(p, n ? n : 1);
    return q;
}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#  pragma GCC diagnostic pop
#endif
TN_API void tn__free(void *p) { if (p) TN_FREE(p); }

/* >>dtype */

TN_API size_t tn_dtype_size(tn_dtype t) {
    static const size_t sizes[TN_DTYPE_COUNT] = { 0, 1, 4, 8, 2, 4, 8 };
    return (unsigned)t < TN_DTYPE_COUNT ? sizes[t] : 0;
}

TN_API const char *tn_dtype_name(tn_dtype t) {
    static const char *const names[TN_DTYPE_COUNT] = { "none", "bool", "int32", "int64", "float16", "float32", "float64" };
    return (unsigned)t < TN_DTYPE_COUNT ? names[t] : "invalid";
}

TN_API tn_dtype tn_dtype_from_name(const char *name) {
    static const struct { const char *n; tn_dtype t; } names[] = {
        { "bool", TN_BOOL }, { "bool_", TN_BOOL }, { "?", TN_BOOL }, { "b1", TN_BOOL }, { "|b1", TN_BOOL },
        { "int32", TN_I32 }, { "i4", TN_I32 }, { "<i4", TN_I32 }, { "intc", TN_I32 },
        { "int64", TN_I64 }, { "i8", TN_I64 }, { "<i8", TN_I64 }, { "int", TN_I64 }, { "int_", TN_I64 }, { "long", TN_I64 }, { "intp", TN_I64 },
        { "float16", TN_F16 }, { "f2", TN_F16 }, { "<f2", TN_F16 }, { "half", TN_F16 }, { "e", TN_F16 },
        { "float32", TN_F32 }, { "f4", TN_F32 }, { "<f4", TN_F32 }, { "single", TN_F32 }, { "f", TN_F32 },
        { "float64", TN_F64 }, { "f8", TN_F64 }, { "<f8", TN_F64 }, { "double", TN_F64 }, { "float", TN_F64 }, { "float_", TN_F64 }, { "d", TN_F64 },
    };
    if (!name) { tn__err(TN_ERR_NULL, "tn_dtype_from_name: name is NULL"); return TN_DTYPE_NONE; }
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!strcmp(names[k].n, name)) return names[k].t;
    tn__err(TN_ERR_DTYPE, "tn_dtype_from_name: '%.60s' is not a dtype the library has (bool, int32, int64, float16, float32, float64, "
            "or a NumPy alias of one)", name);
    return TN_DTYPE_NONE;
}

TN_API bool tn_dtype_is_float(tn_dtype t) { return t == TN_F16 || t == TN_F32 || t == TN_F64; }

TN_API tn_dtype tn_dtype_promote(tn_dtype a, tn_dtype b) {
    if (a == TN_DTYPE_NONE) return b;
    if (b == TN_DTYPE_NONE) return a;
    bool fa = tn_dtype_is_float(a), fb = tn_dtype_is_float(b);
    if (fa != fb) return fa ? a : b;        /* an int never widens a float */
    return a > b ? a : b;
}

/* IEEE binary16 <-> binary32, round to nearest even, with subnormals, inf, NaN. */
TN_API uint16_t tn_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)                               /* inf or NaN (keep NaN quiet) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   /* rounds to >= 65520: inf */
    if (ax < 0x38800000u) {                              /* result is subnormal or zero */
        if (ax < 0x33000000u) return (uint16_t)sign;     /* < 2^-25: rounds to 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;                        /* 14..24 */
        uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((ax - 0x38000000u) >> 13);            /* rebias exponent 127 -> 15 */
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

TN_API float tn_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) x = sign | 0x7f800000u | (m << 13);
    else if (e) x = sign | ((e + 112) << 23) | (m << 13);
    else if (!m) x = sign;
    else {                                               /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* >>config */

/* A string of a tn_config (from tn_parse_flags or tn_init): owned by the
   library, one copy per distinct value, kept until tn_shutdown, so a config
   stays valid whatever thread parsed it and a copy of tn_get_config() stays
   valid across later tn_init calls. */
static const char *tn__intern(const char *v, size_t n) {
    const char *out = NULL;
    pthread_mutex_lock(&tn__lib.init_mu);
    for (int i = 0; i < tn__lib.n_interned && !out; i++)
        if (strlen(tn__lib.interned[i]) == n && !memcmp(tn__lib.interned[i], v, n)) out = tn__lib.interned[i];
    char **grown = out ? NULL : (char **)tn__realloc(tn__lib.interned, ((size_t)tn__lib.n_interned + 1) * sizeof *grown);
    char *c = grown ? (char *)tn__malloc(n + 1) : NULL;
    if (grown) tn__lib.interned = grown;
    if (c) {
        memcpy(c, v, n);
        c[n] = 0;
        tn__lib.interned[tn__lib.n_interned++] = c;
        out = c;
    }
    pthread_mutex_unlock(&tn__lib.init_mu);
    return out;
}

static bool tn__flag_bool(const char *v, bool *out) {
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "yes")) { *out = true; return true; }
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "no")) { *out = false; return true; }
    return false;
}

static tn_result tn__contexts_apply(const char *spec, bool apply);   /* the >>contexts section */

/* Parses "k=v,k=v" into cfg; unknown keys and bad values are errors naming them. */
TN_API tn_result tn_parse_flags(const char *flags, tn_config *cfg) {
    if (!cfg) return tn__err(TN_ERR_NULL, "tn_parse_flags: cfg is NULL");
    if (!flags) return TN_OK;
    size_t len = strlen(flags);
    char *all = (char *)tn__malloc(len + 1);      /* items are cut in place */
    if (!all) return tn__err(TN_ERR_OOM, "tn_parse_flags: out of memory");
    memcpy(all, flags, len + 1);
    tn_result res = TN_OK;
    char *p = all;
    while (*p && res == TN_OK) {
        char *item = p;
        size_t n = strcspn(p, ",");
        p += n + (p[n] == ',');
        item[n] = 0;
        if (!item[0]) continue;
        char *eq = strchr(item, '=');
        if (!eq) { res = tn__err(TN_ERR_INVALID, "tn_parse_flags: '%s' is not key=value", item); break; }
        *eq = 0;
        const char *k = item, *v = eq + 1;
        bool b, ok = true;
        if (!strcmp(k, "device")) {
            if (!strcmp(v, "cpu")) cfg->device = TN_DEVICE_CPU;
            else if (!strcmp(v, "auto")) cfg->device = TN_DEVICE_AUTO;
            else if (!strncmp(v, "cuda", 4) || !strncmp(v, "gpu", 3)) {
                const char *d = v + (v[0] == 'c' ? 4 : 3);
                char *end;
                long ord = *d ? strtol(d, &end, 10) : 0;
                if (*d && (*end || ord < 0 || ord > 64)) ok = false;
                cfg->device = TN_DEVICE_CUDA;
                cfg->device_ordinal = (int)ord;
            } else ok = false;
        } else if (!strcmp(k, "floatX")) {
            if (!strcmp(v, "float32")) cfg->floatX = TN_F32;
            else if (!strcmp(v, "float64")) cfg->floatX = TN_F64;
            else if (!strcmp(v, "float16")) cfg->floatX = TN_F16;
            else ok = false;
        } else if (!strcmp(k, "mode")) {
            if (!strcmp(v, "fast_run") || !strcmp(v, "FAST_RUN")) cfg->mode = TN_MODE_FAST_RUN;
            else if (!strcmp(v, "fast_compile") || !strcmp(v, "FAST_COMPILE")) cfg->mode = TN_MODE_FAST_COMPILE;
            else if (!strcmp(v, "check") || !strcmp(v, "DebugMode")) cfg->mode = TN_MODE_CHECK;
            else ok = false;
        } else if (!strcmp(k, "assert_no_cpu_op")) {
            if (!strcmp(v, "warn")) cfg->assert_no_cpu_op = TN_WR_WARN;
            else if (!strcmp(v, "raise")) cfg->assert_no_cpu_op = TN_WR_RAISE;
            else if (!strcmp(v, "ignore") || !strcmp(v, "off")) cfg->assert_no_cpu_op = TN_WR_OFF;
            else ok = false;
        } else if (!strcmp(k, "compute_test_value")) {
            if (!strcmp(v, "warn")) cfg->compute_test_value = TN_WR_WARN;
            else if (!strcmp(v, "raise")) cfg->compute_test_value = TN_WR_RAISE;
            else if (!strcmp(v, "off")) cfg->compute_test_value = TN_WR_OFF;
            else ok = false;
        } else if (!strcmp(k, "threads")) {
            char *end;
            long t = strtol(v, &end, 10);
            if (*end || t < 0 || t > 1024) ok = false; else cfg->threads = (int)t;
        } else if (!strcmp(k, "host_cache_mb")) {
            char *end;
            long m = strtol(v, &end, 10);
            if (*end || !*v || m < 0 || m > INT_MAX) ok = false; else cfg->host_cache_mb = m ? (int)m : -1;
        } else if (!strcmp(k, "contexts")) {
            if ((res = tn__contexts_apply(v, false)) != TN_OK) break;
            const char *c = tn__intern(v, strlen(v));
            if (!c) { res = tn__err(TN_ERR_OOM, "tn_parse_flags: out of memory for contexts"); break; }
            cfg->contexts = c;
        } else if (!strcmp(k, "cache_dir") || !strcmp(k, "cuda_root") || !strcmp(k, "blas") || !strcmp(k, "profile_trace")) {
            const char *c = tn__intern(v, strlen(v));
            if (!c) { res = tn__err(TN_ERR_OOM, "tn_parse_flags: out of memory for %s", k); break; }
            *(!strcmp(k, "cache_dir") ? &cfg->cache_dir : !strcmp(k, "cuda_root") ? &cfg->cuda_root
              : !strcmp(k, "blas") ? &cfg->blas : &cfg->profile_trace) = c;
        } else if (!strcmp(k, "nvrtc_flags")) {
            /* options are spaces apart; in TENSOR_FLAGS the items after it
               that start with '-' are more of them: nvrtc_flags=-ftz=true,--prec-div=false */
            tn__sb fl = TN__SB_INIT;
            tn__sb_puts(&fl, v);
            while (*p == '-') {
                size_t m = strcspn(p, ",");
                tn__sb_printf(&fl, " %.*s", (int)m, p);
                p += m + (p[m] == ',');
            }
            const char *c = fl.oom ? NULL : fl.n > 400 ? "" : tn__intern(fl.s, fl.n);
            tn__free(fl.s);
            if (c && !*c) { res = tn__err(TN_ERR_INVALID, "tn_parse_flags: nvrtc_flags is over 400 characters"); break; }
            if (!c) { res = tn__err(TN_ERR_OOM, "tn_parse_flags: out of memory for nvrtc_flags"); break; }
            cfg->nvrtc_flags = c;
        }
#define TN__BOOL_FLAG(name, field) else if (!strcmp(k, name)) { if ((ok = tn__flag_bool(v, &b))) cfg->field = b; }
        TN__BOOL_FLAG("profile", profile)
        TN__BOOL_FLAG("fast_math", fast_math)
        TN__BOOL_FLAG("launch_blocking", launch_blocking)
        TN__BOOL_FLAG("print_kernels", print_kernels)
        TN__BOOL_FLAG("allow_gc", allow_gc)
        TN__BOOL_FLAG("allow_tf32", allow_tf32)
        TN__BOOL_FLAG("trace_rewrites", trace_rewrites)
        TN__BOOL_FLAG("nan_guard", nan_guard)
#undef TN__BOOL_FLAG
        else if (!strcmp(k, "cuda_graph")) { if ((ok = tn__flag_bool(v, &b))) cfg->no_cuda_graph = !b; }
        else { res = tn__err(TN_ERR_INVALID, "tn_parse_flags: unknown flag '%s'", k); break; }
        if (!ok) res = tn__err(TN_ERR_INVALID, "tn_parse_flags: bad value '%s' for '%s'", v, k);
    }
    tn__free(all);
    return res;
}

static bool tn__str_same(const char *x, const char *y) { return x == y || (x && y && !strcmp(x, y)); }
static bool tn__cfg_same(const tn_config *a, const tn_config *b) {
    return a->device == b->device && a->device_ordinal == b->device_ordinal && a->floatX == b->floatX &&
           a->mode == b->mode && a->profile == b->profile && a->fast_math == b->fast_math &&
           a->launch_blocking == b->launch_blocking && a->print_kernels == b->print_kernels &&
           a->allow_gc == b->allow_gc && a->allow_tf32 == b->allow_tf32 && a->no_cuda_graph == b->no_cuda_graph &&
           a->trace_rewrites == b->trace_rewrites && a->assert_no_cpu_op == b->assert_no_cpu_op &&
           a->compute_test_value == b->compute_test_value && a->nan_guard == b->nan_guard &&
           a->threads == b->threads && a->host_cache_mb == b->host_cache_mb && tn__str_same(a->cache_dir, b->cache_dir) &&
           tn__str_same(a->contexts, b->contexts) && tn__str_same(a->blas, b->blas) &&
           tn__str_same(a->nvrtc_flags, b->nvrtc_flags) && tn__str_same(a->cuda_root, b->cuda_root) &&
           tn__str_same(a->profile_trace, b->profile_trace);
}

TN_API tn_result tn_init(const tn_config *cfg) {
    tn_config c = { .floatX = TN_F32, .allow_gc = true };
    if (cfg) {
        c = *cfg;
        if (c.floatX == TN_DTYPE_NONE) c.floatX = TN_F32;
    } else {
        tn_result r = tn_parse_flags(getenv("TENSOR_FLAGS"), &c);
        if (r != TN_OK) return tn__err_as("tn_init: TENSOR_FLAGS", "tn_parse_flags");
    }
    if (!tn_dtype_is_float(c.floatX))
        return tn__err(TN_ERR_DTYPE, "tn_init: floatX must be a float dtype, not %s", tn_dtype_name(c.floatX));
    /* Racing callers take turns; one that finds the same settings in place
       writes nothing, so threads reading the config meanwhile see it whole. */
    if (c.nvrtc_flags && strlen(c.nvrtc_flags) > 400)
        return tn__err(TN_ERR_INVALID, "tn_init: nvrtc_flags is over 400 characters");
    const char **strs[5] = { &c.cache_dir, &c.blas, &c.nvrtc_flags, &c.cuda_root, &c.profile_trace };   /* the caller's strings, copied */
    for (int i = 0; i < 5; i++)
        if (*strs[i] && !(*strs[i] = tn__intern(*strs[i], strlen(*strs[i])))) return tn__err(TN_ERR_OOM, "tn_init: out of memory");
    if (c.contexts) {
        if (tn__contexts_apply(c.contexts, false) != TN_OK) return tn__err_as("tn_init", "tn_parse_flags");
        if (!(c.contexts = tn__intern(c.contexts, strlen(c.contexts)))) return tn__err(TN_ERR_OOM, "tn_init: out of memory for contexts");
        tn_result rc = tn__contexts_apply(c.contexts, true);
        if (rc != TN_OK) return tn__err_as("tn_init", "tn_parse_flags");
    }
    pthread_mutex_lock(&tn__lib.init_mu);
    tn_result r = TN_OK;
    if (!tn__atomic_load_explicit(&tn__lib.cfg_ready, TN__ACQUIRE) || !tn__cfg_same(&c, &tn__lib.cfg)) {
        tn__lib.cfg = c;
        tn__atomic_store_explicit(&tn__lib.cfg_ready, true, TN__RELEASE);
    }
    tn_result (*hook)(const tn_config *) = tn__lib.device_init_hook;
    if (r == TN_OK && hook) r = hook(&tn__lib.cfg);
    pthread_mutex_unlock(&tn__lib.init_mu);
    return r;
}

TN_API const tn_config *tn_get_config(void) {
    if (!tn__atomic_load_explicit(&tn__lib.cfg_ready, TN__ACQUIRE) && tn_init(NULL) != TN_OK) {
        tn__warn("%s; using defaults", tn_last_error());
        pthread_mutex_lock(&tn__lib.init_mu);
        tn__atomic_store_explicit(&tn__lib.cfg_ready, true, TN__RELEASE);
        pthread_mutex_unlock(&tn__lib.init_mu);
    }
    return &tn__lib.cfg;
}

/* >>contexts: the table behind the >>api_contexts section. A context is an
   index into it; nodes carry index + 1 (tn_var.ctx), so 0 means none.
   Entries are added, never removed (a node's index stays valid). */
static struct tn__ctx_table {
    pthread_mutex_t mu;
    TN__ATOMIC(int) n;
    char name[TN_MAX_CONTEXTS][32];
    TN__ATOMIC(int) device[TN_MAX_CONTEXTS];     /* CUDA ordinal or TN_HOST */
} tn__ctx = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* "cpu" -> TN_HOST, "cuda"/"gpu" -> 0, "cudaN"/"gpuN" -> N; -2 when not a target. */
static int tn__ctx_target(const char *t, size_t n) {
    if (n == 3 && !memcmp(t, "cpu", 3)) return TN_HOST;
    size_t k = n >= 4 && !memcmp(t, "cuda", 4) ? 4 : n >= 3 && !memcmp(t, "gpu", 3) ? 3 : 0;
    if (!k) return -2;
    if (k == n) return 0;
    int ord = 0;
    for (size_t i = k; i < n; i++) {
        if (t[i] < '0' || t[i] > '9' || i - k > 1) return -2;
        ord = ord * 10 + (t[i] - '0');
    }
    return ord < 64 ? ord : -2;
}

static bool tn__ctx_name_ok(const char *s, size_t n) {
    if (n == 0 || n > 31) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return false;
    return true;
}

/* The index of name (n bytes), defined as device `dev` when dev > -2 (added
   or remapped); -1 when unknown and not defined here, or the table is full. */
static int tn__ctx_lookup(const char *name, size_t n, int dev) {
    pthread_mutex_lock(&tn__ctx.mu);
    int cnt = tn__atomic_load(&tn__ctx.n), k = 0;
    while (k < cnt && !(strlen(tn__ctx.name[k]) == n && !memcmp(tn__ctx.name[k], name, n))) k++;
    if (k == cnt && dev > -2 && cnt < TN_MAX_CONTEXTS) {
        memcpy(tn__ctx.name[k], name, n);
        tn__ctx.name[k][n] = 0;
        tn__atomic_store(&tn__ctx.device[k], dev);
        tn__atomic_store(&tn__ctx.n, cnt + 1);
    } else if (k < cnt && dev > -2) {
        tn__atomic_store(&tn__ctx.device[k], dev);
    } else if (k == cnt) {
        k = -1;
    }
    pthread_mutex_unlock(&tn__ctx.mu);
    return k;
}

/* Checks (apply false) or defines (apply true) "name->target;name->target". */
static tn_result tn__contexts_apply(const char *spec, bool apply) {
    const char *W = "tn_parse_flags";
    for (const char *p = spec; *p;) {
        size_t n = strcspn(p, ";");
        const char *arrow = NULL;
        for (size_t i = 0; i + 1 < n && !arrow; i++) if (p[i] == '-' && p[i + 1] == '>') arrow = p + i;
        if (n > 0) {
            if (!arrow) return tn__err(TN_ERR_INVALID, "%s: bad value for 'contexts': '%.*s' is not name->target (e.g. dev0->cuda0)", W, (int)n, p);
            size_t nn = (size_t)(arrow - p), tn = n - nn - 2;
            if (!tn__ctx_name_ok(p, nn))
                return tn__err(TN_ERR_INVALID, "%s: bad value for 'contexts': context name '%.*s' must be 1 to 31 letters, digits or _", W, (int)nn, p);
            int dev = tn__ctx_target(arrow + 2, tn);
            if (dev < -1)
                return tn__err(TN_ERR_INVALID, "%s: bad value for 'contexts': target '%.*s' of '%.*s' is not cpu, cuda or cudaN", W,
                               (int)tn, arrow + 2, (int)nn, p);
            if (apply && tn__ctx_lookup(p, nn, dev) < 0)
                return tn__err(TN_ERR_INVALID, "%s: contexts: more than %d contexts", W, TN_MAX_CONTEXTS);
        }
        p += n + (p[n] == ';');
    }
    return TN_OK;
}

TN_API tn_result tn_context_define(const char *name, const char *target) {
    const char *W = "tn_context_define";
    if (!name) return tn__err(TN_ERR_NULL, "%s: name is NULL", W);
    if (!target) return tn__err(TN_ERR_NULL, "%s: target of '%s' is NULL", W, name);
    size_t n = strlen(name);
    if (!tn__ctx_name_ok(name, n)) return tn__err(TN_ERR_INVALID, "%s: context name '%s' must be 1 to 31 letters, digits or _", W, name);
    int dev = tn__ctx_target(target, strlen(target));
    if (dev < -1) return tn__err(TN_ERR_INVALID, "%s: target '%s' of '%s' is not cpu, cuda or cudaN", W, target, name);
    if (tn__ctx_lookup(name, n, dev) < 0) return tn__err(TN_ERR_INVALID, "%s: '%s': more than %d contexts", W, name, TN_MAX_CONTEXTS);
    return TN_OK;
}

TN_API int tn_context_get(const char *name) {
    if (!name) { tn__err(TN_ERR_NULL, "tn_context_get: name is NULL"); return -1; }
    (void)tn_get_config();      /* the contexts flag is read at the first tn_init */
    size_t n = strlen(name);
    int k = tn__ctx_lookup(name, n, -2);
    int self = k < 0 ? tn__ctx_target(name, n) : -2;    /* cuda1, cpu: contexts of themselves */
    if (k < 0 && self > -2) k = tn__ctx_lookup(name, n, self);
    if (k < 0) {
        char known[400] = "";
        size_t used = 0;
        for (int i = 0; i < tn__atomic_load(&tn__ctx.n) && used + 40 < sizeof known; i++)
            used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", tn__ctx.name[i]);
        tn__err(TN_ERR_INVALID, "tn_context_get: no context named '%s' (known: %s; declare it with contexts=%s->cuda0 or tn_context_define)",
                name, used ? known : "none", tn__ctx_name_ok(name, n) ? name : "name");
    }
    return k;
}

TN_API int tn_context_count(void) { return tn__atomic_load(&tn__ctx.n); }
TN_API const char *tn_context_name(int ctx) { return ctx >= 0 && ctx < tn__atomic_load(&tn__ctx.n) ? tn__ctx.name[ctx] : NULL; }
TN_API int tn_context_device(int ctx) { return ctx >= 0 && ctx < TN_MAX_CONTEXTS && ctx < tn__atomic_load(&tn__ctx.n) ? tn__atomic_load(&tn__ctx.device[ctx]) : TN_HOST; }

static const char *tn__var_label_name(const tn_var *v);   /* the >>graph_nodes section */

/* "'dev1' (cuda1)" for messages and debugprint; c is index + 1. */
static const char *tn__ctx_where(int c, char buf[64]) {
    int d = tn_context_device(c - 1);
    if (d == TN_HOST) snprintf(buf, 64, "'%s' (cpu)", tn_context_name(c - 1));
    else snprintf(buf, 64, "'%s' (cuda%d)", tn_context_name(c - 1), d);
    return buf;
}

/* The context a new node takes: a transfer's own (GpuFromHost with one,
   params i[0]: index + 1, or -1 for "the function's"), none for HostFromGpu,
   else the one its inputs share; two different ones are an error naming both. */
static tn_result tn__ctx_infer(tn_var *v, const char *who) {
    if (v->op == TN_OP_GPU_FROM_HOST && v->p.i[0] != 0) { v->ctx = v->p.i[0] > 0 ? (int)v->p.i[0] : 0; return TN_OK; }
    if (v->op == TN_OP_HOST_FROM_GPU) { v->ctx = 0; return TN_OK; }
    int c = 0, from = -1;
    for (int i = 0; i < v->n_in; i++) {
        int ci = v->in[i]->ctx;
        if (!ci || ci == c) continue;
        if (c) {
            char wa[64], wb[64];
            return tn__err(TN_ERR_DEVICE, "%s: input %d ('%s') is on context %s but input %d ('%s') is on context %s; "
                           "move one with tn_gpu_from_host_ctx", who, from, tn__var_label_name(v->in[from]), tn__ctx_where(c, wa),
                           i, tn__var_label_name(v->in[i]), tn__ctx_where(ci, wb));
        }
        c = ci;
        from = i;
    }
    v->ctx = c;
    return TN_OK;
}

TN_API tn_var *tn_var_set_context(tn_var *v, const char *ctx) {
    const char *W = "tn_var_set_context";
    if (!v) { tn__err_null(W, "v"); return NULL; }
    if (v->op != TN_OP_INPUT && v->op != TN_OP_SHARED) {
        tn__err(TN_ERR_INVALID, "%s: '%s' is not an input or a shared variable (an op takes its inputs' context; move it with tn_gpu_from_host_ctx)",
                W, v->name ? v->name : "");
        return NULL;
    }
    int k = ctx ? tn_context_get(ctx) : -1;
    if (ctx && k < 0) { tn__err_as(W, "tn_context_get"); return NULL; }
    v->ctx = k + 1;
    return v;
}

TN_API const char *tn_var_context(const tn_var *v) { return v && v->ctx > 0 ? tn_context_name(v->ctx - 1) : NULL; }

/* >>threads: a fixed pool (tn__lib.pool). A job is n items cut into one
   range per thread (parts ranges of chunk items), and a range into up to
   TN__POOL_PIECES pieces of at least the caller's grain. Range w is worker
   w's (0 the caller's): each thread claims the pieces of its own range in
   order, then the pieces left in the others', from the last range. A piece
   runs once, whole, on one thread; a thread keeps its range from job to job
   while all are awake and run at one speed (its data stays in its core's
   cache), a core that runs slower (its clock, another tenant on it) gives
   its last pieces to the faster ones, and a worker that wakes late finds
   its range done by the others instead of holding up the job.
   The caller wakes workers 1 and 2, and each worker w wakes 2w+1 and 2w+2
   (a tree: the caller's own range starts after two signals, not parts-1).
   One job runs at a time: a caller that finds the pool busy (another
   thread's kernel) runs its whole range inline instead of waiting, and so
   does a kernel already running in a worker (no nested jobs, no deadlock).
   A worker done with a job checks for the next one for up to
   TN__POOL_SPIN_S before it sleeps, and the caller checks for the end of
   its job as long before it sleeps, both yielding their core to any other
   thread that can run: the ops of a call come back to back, and waking a
   sleeping thread costs tens of microseconds (a fork and join took 80 us on
   a 2-core virtual machine, now 1 us). A CBLAS call sends the checking
   workers to sleep at once (tn__pool_nap): OpenBLAS's threads need the
   cores then. */

static double tn__prof_now(void);
static inline void tn__cpu_pause(void) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_ia32_pause();
#elif defined(__GNUC__) && defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#ifndef TN_NO_THREADS
#ifndef TN__POOL_SPIN_S
#define TN__POOL_SPIN_S 50e-6
#endif
static TN__THREAD_LOCAL bool tn__in_worker;

/* Waits, yielding the core, for up to TN__POOL_SPIN_S for a job after `seen`
   (job) or for the job's parts to end (!job); whether it came. */
static bool tn__pool_spin(tn__pool *p, bool job, uint64_t seen) {
    double t0 = tn__prof_now();
    uint64_t naps = tn__atomic_load(&p->naps);
    for (int i = 1; job ? tn__atomic_load(&p->job_id) == seen : tn__atomic_load(&p->pending) != 0; i++) {
        if (job && tn__atomic_load(&p->naps) != naps) return false;
        if (!(i & 15) && tn__prof_now() - t0 > TN__POOL_SPIN_S) return false;
        sched_yield();
    }
    return true;
}

/* Sends the workers that wait awake for a job to sleep now: called before
   work that runs on threads of its own (a CBLAS product), whose threads the
   workers' checks would slow. */
static void tn__pool_nap(void) {
    tn__atomic_fetch_add(&tn__lib.pool.naps, 1);
}

/* Claims the next piece of range r of job `id` for this thread: its index,
   or -1 when the range's pieces are all claimed (or a later job has the
   range: a worker that read an ended job's fn claims nothing). */
static int tn__pool_claim(tn__pool *p, int r, uint64_t id, int pieces) {
    TN__ATOMIC(uint64_t) *c = &p->claim[(size_t)r * TN__POOL_CLAIM_STRIDE];
    uint64_t v = tn__atomic_load(c);
    for (;;) {
        uint64_t vid = v >> 5, next = vid < id ? 0 : v & 31;
        if (vid > id || next >= (uint64_t)pieces) return -1;
        if (tn__atomic_cas_weak(c, &v, (id << 5) + next + 1)) return (int)next;
    }
}

/* Runs the pieces of range `me` of job `id` no thread has claimed, then
   those of every other range, from the last (the workers woken last). */
static void tn__pool_run(tn__pool *p, int me, uint64_t id, tn__range_fn fn, void *ctx, int64_t n_items, int64_t chunk,
                         int parts, int pieces) {
    for (int k = 0; k <= parts; k++) {
        int r = k == 0 ? me : parts - k, q, done = 0;
        if (k > 0 && r == me) continue;
        while ((q = tn__pool_claim(p, r, id, pieces)) >= 0) {
            int64_t lo = (int64_t)r * chunk + q * chunk / pieces, hi = (int64_t)r * chunk + (q + 1) * chunk / pieces;
            if (lo < n_items) fn(ctx, lo, hi < n_items ? hi : n_items);
            done++;
        }
        if (done && tn__atomic_fetch_add(&p->pending, -done) == done) {   /* the job's last piece: the caller may sleep */
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* Wakes worker w's two children in the wake tree (workers below `parts`). */
static void tn__pool_wake(tn__pool *p, int w, int parts) {
    for (int c = 2 * w + 1; c <= 2 * w + 2 && c < parts; c++) pthread_cond_signal(&p->go[c - 1]);
}

static void *tn__pool_main(void *arg) {
    tn__pool *p = &tn__lib.pool;
    int me = (int)(intptr_t)arg;                 /* 1..n */
    uint64_t seen = 0;
    tn__in_worker = true;
    for (;;) {
        tn__pool_spin(p, true, seen);
        pthread_mutex_lock(&p->mu);
        while (!p->quit && tn__atomic_load(&p->job_id) == seen) pthread_cond_wait(&p->go[me - 1], &p->mu);
        if (p->quit) break;
        seen = tn__atomic_load(&p->job_id);
        int parts = p->parts;
        if (me >= parts) { pthread_mutex_unlock(&p->mu); continue; }   /* a job without a range for it */
        tn__range_fn fn = p->fn;
        void *ctx = p->ctx;
        int64_t n_items = p->n_items, chunk = p->chunk;
        int pieces = p->pieces;
        pthread_mutex_unlock(&p->mu);
        tn__pool_wake(p, me, parts);
        tn__pool_run(p, me, seen, fn, ctx, n_items, chunk, parts, pieces);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void tn__pool_start(void) {
    tn__pool *p = &tn__lib.pool;
    int want = tn_get_config()->threads;
    if (want <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        want = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->done, NULL);
    p->n = 0;
    if (want <= 1) return;
    p->tid = (pthread_t *)tn__calloc((size_t)want - 1, sizeof(pthread_t));
    p->go = (pthread_cond_t *)tn__calloc((size_t)want - 1, sizeof(pthread_cond_t));
    p->claim = (TN__ATOMIC(uint64_t) *)tn__calloc((size_t)want * TN__POOL_CLAIM_STRIDE, sizeof *p->claim);
    if (!p->tid || !p->go || !p->claim) {
        tn__free(p->tid); tn__free(p->go); tn__free((void *)p->claim);
        p->tid = NULL; p->go = NULL; p->claim = NULL;
        return;
    }
    for (int i = 0; i < want - 1; i++) {
        pthread_cond_init(&p->go[i], NULL);
        if (pthread_create(&p->tid[i], NULL, tn__pool_main, (void *)(intptr_t)(i + 1)) != 0) { pthread_cond_destroy(&p->go[i]); break; }
        p->n++;
    }
}

TN_API int tn__num_threads(void) {
    pthread_once(&tn__lib.pool_once, tn__pool_start);
    return tn__lib.pool.n + 1;
}

TN_API void tn__parallel_for(int64_t n, int64_t grain, tn__range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = tn__num_threads();
    int64_t parts = n / grain;
    if (parts > nt) parts = nt;
    /* Nested calls and calls racing another job run inline rather than wait. */
    if (parts <= 1 || tn__in_worker || pthread_mutex_trylock(&tn__lib.pool_caller) != 0) { fn(ctx, 0, n); return; }
    tn__pool *p = &tn__lib.pool;
    int64_t chunk = (n + parts - 1) / parts, pieces = chunk / grain;   /* pieces of chunk / pieces >= grain */
    pieces = pieces < 1 ? 1 : pieces > TN__POOL_PIECES ? TN__POOL_PIECES : pieces;
    parts = (n + chunk - 1) / chunk;             /* no empty range */
    pthread_mutex_lock(&p->mu);
    uint64_t id = tn__atomic_load(&p->job_id) + 1;
    p->fn = fn; p->ctx = ctx; p->n_items = n; p->chunk = chunk;
    p->parts = (int)parts;
    p->pieces = (int)pieces;
    tn__atomic_store(&p->pending, (int)(parts * pieces));
    tn__atomic_store(&p->job_id, id);
    pthread_mutex_unlock(&p->mu);
    tn__pool_wake(p, 0, (int)parts);            /* the rest sleep on */
    tn__in_worker = true;
    tn__pool_run(p, 0, id, fn, ctx, n, chunk, (int)parts, (int)pieces);
    tn__in_worker = false;
    if (!tn__pool_spin(p, false, 0)) {
        pthread_mutex_lock(&p->mu);
        while (tn__atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&tn__lib.pool_caller);
}

static void tn__pool_stop(void) {
    tn__pool *p = &tn__lib.pool;
    if (!p->tid) return;
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    for (int i = 0; i < p->n; i++) pthread_cond_signal(&p->go[i]);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) { pthread_join(p->tid[i], NULL); pthread_cond_destroy(&p->go[i]); }
    tn__free(p->tid);
    tn__free(p->go);
    tn__free((void *)p->claim);
    p->tid = NULL;
    p->go = NULL;
    p->claim = NULL;
    p->n = 0;
}
#else
TN_API int tn__num_threads(void) { return 1; }
TN_API void tn__parallel_for(int64_t n, int64_t grain, tn__range_fn fn, void *ctx) {
    (void)grain;
    if (n > 0) fn(ctx, 0, n);
}
static void tn__pool_stop(void) {}
static void tn__pool_nap(void) {}
#endif

static void tn__func_blocks_release(void);   /* >>func_handles */
static void tn__trace_close(void);           /* >>trace */

TN_API void tn_shutdown(void) {
    if (tn__lib.shutdown_hook) tn__lib.shutdown_hook();    /* back ends' teardown (tensor_cuda.h) */
    tn__pool_stop();
    tn__func_blocks_release();
    tn__trace_close();
    tn__host_pool_drain();
    pthread_mutex_lock(&tn__lib.init_mu);      /* the strings, but those the config uses */
    int keep = 0;
    for (int i = 0; i < tn__lib.n_interned; i++) {
        const char *s = tn__lib.interned[i];
        const tn_config *c = &tn__lib.cfg;
        if (s == c->cache_dir || s == c->contexts || s == c->blas || s == c->nvrtc_flags || s == c->cuda_root || s == c->profile_trace)
            tn__lib.interned[keep++] = tn__lib.interned[i];
        else tn__free(tn__lib.interned[i]);
    }
    tn__lib.n_interned = keep;
    if (!keep) { tn__free(tn__lib.interned); tn__lib.interned = NULL; }
    pthread_mutex_unlock(&tn__lib.init_mu);
}

/* >>backend: at most one device back end, registered by tensor_cuda.h */
TN_API void tn__set_backend(const tn_backend *b) { tn__atomic_store(&tn__lib.backend, b); }
TN_API const tn_backend *tn__get_backend(void) { return tn__atomic_load(&tn__lib.backend); }

TN_API const tn_backend_op *tn__backend_row(const tn_backend *b, int op) {
    return b && b->ops && op > 0 && op < TN_OP_COUNT ? b->ops[op] : NULL;
}

TN_API bool tn__backend_runs(const tn_backend *b, const tn_var *node) {
    const tn_backend_op *row = node ? tn__backend_row(b, node->op) : NULL;
    return row && (!row->supports || row->supports(node));
}

TN_API const char *tn__backend_why_cpu(const tn_backend *b, const tn_var *node, char *buf, size_t cap) {
    const char *name = b && b->name ? b->name : "device";
    if (!tn__backend_row(b, node->op)) {
        snprintf(buf, cap, "no GPU kernel in the %s back end", name);
        return buf;
    }
    tn__sbuf sbuf = { buf, cap, 0 };
    tn__sbuf_put(&sbuf, "the %s back end has a row for this op, but it declined these inputs:", name);
    for (int i = 0; i < node->n_in; i++) {
        char sb[128];
        const tn_type *t = &node->in[i]->type;
        tn__sbuf_put(&sbuf, "%s %s %s", i ? "," : "", tn_dtype_name(t->dtype), tn__shape_str(t->ndim, t->shape, sb));
    }
    return buf;
}

/* >>array ============================================================= */
/* Buffers, creation, views, conversion, random, printing */
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
    /* set: host memory from a back end's allocator (pinned for copies from
       device free_device), given back through it; NULL: tn__malloc host
       memory or tn_device_ops memory */
    void (*free_fn)(int device, void *raw, size_t bytes);
    int free_device;
    /* Host memory and the back end's DMA (tn__buffer_host_direct; __atomic
       builtins): pin is 0 not yet, 1 registered by us on pin_device, 2 being
       registered, 3 page-locked by its owner, -1 refused; h2d counts the
       copies to a device that read it before it was registered; the range
       registered is [pin_ptr, pin_ptr + pin_bytes). */
    int pin, pin_device, h2d;
    char *pin_ptr;
    size_t pin_bytes;
    /* memory lent by its owner (an imported DLPack tensor): on_release(release_ctx) gives it back */
    void (*on_release)(void *ctx);
    void *release_ctx;
    int pool_class;         /* 1 + the host pool's size class of raw (>>host_pool); 0: plain tn__malloc */
};

TN_API void tn__set_device_ops(const tn_device_ops *ops) { tn__atomic_store(&tn__lib.device_ops, ops); }
TN_API const tn_device_ops *tn__get_device_ops(void) { return tn__atomic_load(&tn__lib.device_ops); }

#define TN__ALIGN 64

/* >>host_pool: large host blocks. A fresh 64 MB block from malloc is a new
   mapping, and writing it page-faults once per 4 KiB page (16,384 faults);
   glibc unmaps it again on free.
   So blocks of TN__HPOOL_MIN bytes and more are rounded up to a size class
   (four a power of two: at most 25% more) and a freed one is kept in its
   class's slots for the next array of that class, up to host_cache_mb MiB
   in all (tn_config); the rest go back to TN_FREE. Blocks from
   TN__HPOOL_HUGE up are 2 MiB-aligned and advised as huge pages (Linux's
   MADV_HUGEPAGE; NumPy does the same from 4 MiB): 512x fewer faults the
   first time, fewer TLB misses after. Lock-free: a slot is taken by an
   atomic exchange and filled by a compare-and-swap from NULL (what the slot
   held before is never read, so no ABA); the cached byte count is a
   fetch-add. Drained by tn_shutdown and by any allocation that fails
   (tn__malloc), before it fails. */
#if defined(__linux__)
#  include <sys/mman.h>
#endif
#define TN__HPOOL_MIN ((size_t)1 << 20)
#define TN__HPOOL_HUGE ((size_t)4 << 20)
#define TN__HPOOL_PAGE ((size_t)2 << 20)
#define TN__HPOOL_CLASSES 112          /* 1 MiB to 2^48 bytes */
#define TN__HPOOL_SLOTS 4
static struct {
    void *slot[TN__HPOOL_CLASSES][TN__HPOOL_SLOTS];   /* what TN_MALLOC returned; __atomic builtins */
    size_t cached;                                    /* bytes of the classes in the slots */
} tn__hpool;

/* The size class of a block of `bytes` (>= TN__HPOOL_MIN), and a class's size. */
static int tn__hpool_class(size_t bytes) {
    int k = 20;
    while (k < 62 && ((size_t)2 << k) <= bytes) k++;
    size_t lo = (size_t)1 << k, step = lo >> 2;
    return (k - 20) * 4 + (int)((bytes - lo + step - 1) / step);   /* 4 steps up is the next power of two */
}
static size_t tn__hpool_size(int c) { return ((size_t)4 + (size_t)(c % 4)) << (18 + c / 4); }

/* Where a block of a class starts (its alignment). */
static size_t tn__hpool_align(size_t size) { return size >= TN__HPOOL_HUGE ? TN__HPOOL_PAGE : TN__ALIGN; }
static void *tn__hpool_start(void *raw, size_t size) {
    size_t a = tn__hpool_align(size);
    return (void *)(((uintptr_t)raw + a - 1) & ~(uintptr_t)(a - 1));
}

/* Asks for huge pages over [p, p + n): madvise where the including file's
   feature macros declare it, else posix_madvise, which glibc and musl pass
   to madvise(2) unchanged (MADV_HUGEPAGE is 14 on Linux); nothing elsewhere. */
static void tn__advise_huge(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    (void)madvise(p, n, MADV_HUGEPAGE);
#elif defined(__linux__) && defined(POSIX_MADV_NORMAL)
    (void)posix_madvise(p, n, 14);
#else
    (void)p; (void)n;
#endif
}

static size_t tn__hpool_limit(void) {
    int mb = tn_get_config()->host_cache_mb;
    return mb < 0 ? 0 : (size_t)(mb ? mb : 1024) << 20;
}

/* A block of at least `bytes` (>= TN__HPOOL_MIN): its start, *raw what to
   give back, *cls 1 + its class (0: past the classes, freed plainly). */
static void *tn__hpool_get(size_t bytes, void **raw, int *cls) {
    int c = tn__hpool_class(bytes);
    size_t size = c < TN__HPOOL_CLASSES ? tn__hpool_size(c) : bytes;
    if (c < TN__HPOOL_CLASSES)
        for (int s = 0; s < TN__HPOOL_SLOTS; s++) {
            void **slot = &tn__hpool.slot[c][s];
            void *r = __atomic_load_n(slot, __ATOMIC_RELAXED) ? __atomic_exchange_n(slot, NULL, __ATOMIC_ACQUIRE) : NULL;
            if (r) {
                __atomic_fetch_sub(&tn__hpool.cached, size, __ATOMIC_RELAXED);
                *raw = r;
                *cls = c + 1;
                return tn__hpool_start(r, size);
            }
        }
    size_t a = tn__hpool_align(size);
    if (size > SIZE_MAX - 2 * TN__HPOOL_PAGE) return NULL;
    size_t span = a == TN__HPOOL_PAGE ? (size + TN__HPOOL_PAGE - 1) & ~(TN__HPOOL_PAGE - 1) : size;
    void *r = tn__malloc(span + a);
    if (!r) return NULL;
    void *p = tn__hpool_start(r, size);
    if (a == TN__HPOOL_PAGE) tn__advise_huge(p, span);   /* whole huge pages, inside the block */
    *raw = r;
    *cls = c < TN__HPOOL_CLASSES ? c + 1 : 0;
    return p;
}

/* Keeps a freed block of class cls - 1 when the cap and a slot allow, else frees it. */
static void tn__hpool_put(void *raw, int cls) {
    int c = cls - 1;
    size_t size = tn__hpool_size(c);
    if (__atomic_add_fetch(&tn__hpool.cached, size, __ATOMIC_RELAXED) <= tn__hpool_limit())
        for (int s = 0; s < TN__HPOOL_SLOTS; s++) {
            void *none = NULL;
            if (__atomic_compare_exchange_n(&tn__hpool.slot[c][s], &none, raw, false, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
                return;
        }
    __atomic_fetch_sub(&tn__hpool.cached, size, __ATOMIC_RELAXED);
    tn__free(raw);
}

/* Frees every cached block; the bytes freed. */
static size_t tn__host_pool_drain(void) {
    size_t freed = 0;
    for (int c = 0; c < TN__HPOOL_CLASSES; c++)
        for (int s = 0; s < TN__HPOOL_SLOTS; s++) {
            void *r = __atomic_load_n(&tn__hpool.slot[c][s], __ATOMIC_RELAXED)
                    ? __atomic_exchange_n(&tn__hpool.slot[c][s], NULL, __ATOMIC_ACQUIRE) : NULL;
            if (!r) continue;
            size_t size = tn__hpool_size(c);
            __atomic_fetch_sub(&tn__hpool.cached, size, __ATOMIC_RELAXED);
            TN_FREE(r);
            freed += size;
        }
    return freed;
}

static tn_buffer *tn__buffer_new(size_t bytes, int device) {
    tn_buffer *b = (tn_buffer *)tn__calloc(1, sizeof *b);
    if (!b) return NULL;
    b->refcount = 1;
    b->bytes = bytes;
    b->device = device;
    b->owns = true;
    if (device == TN_HOST && bytes >= TN__HPOOL_MIN) {
        b->data = tn__hpool_get(bytes, &b->raw, &b->pool_class);
        if (!b->data) { tn__free(b); return NULL; }
    } else if (device == TN_HOST) {
        if (bytes > SIZE_MAX - TN__ALIGN) { tn__free(b); return NULL; }
        b->raw = tn__malloc(bytes + TN__ALIGN);
        if (!b->raw) { tn__free(b); return NULL; }
        uintptr_t p = ((uintptr_t)b->raw + TN__ALIGN - 1) & ~(uintptr_t)(TN__ALIGN - 1);
        b->data = (void *)p;
    } else {
        const tn_device_ops *ops = tn__get_device_ops();
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

TN_API bool tn__buffer_host_ready(const tn_buffer *b, const void *p, size_t n) {
    if (!b || b->device != TN_HOST || !p) return false;
    if (b->free_fn) return true;                       /* the back end's pinned memory */
    int st = __atomic_load_n(&b->pin, __ATOMIC_ACQUIRE);
    return (st == 1 || st == 3) && (const char *)p >= b->pin_ptr && n <= b->pin_bytes &&
           (size_t)((const char *)p - b->pin_ptr) <= b->pin_bytes - n;
}

TN_API bool tn__buffer_host_direct(tn_buffer *b, int device, const void *p, size_t n) {
    const tn_device_ops *ops = tn__get_device_ops();
    if (!b || b->device != TN_HOST || !p) return false;
    int st = __atomic_load_n(&b->pin, __ATOMIC_ACQUIRE);
    if (b->free_fn || st != 0) return tn__buffer_host_ready(b, p, n);
    char *lo = b->bytes ? (char *)b->data : (char *)p;
    size_t len = b->bytes ? b->bytes : n;
    if (!ops || !ops->host_register || len < TN__PIN_MIN || len > TN__PIN_MAX) return false;
    if (__atomic_fetch_add(&b->h2d, 1, __ATOMIC_RELAXED) < 1) return false;   /* the first copy stages */
    int zero = 0;
    if (!__atomic_compare_exchange_n(&b->pin, &zero, 2, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return false;
    bool elsewhere = false, ok = ops->host_register(device, lo, len, &elsewhere);
    b->pin_device = device;
    b->pin_ptr = lo;
    b->pin_bytes = len;
    __atomic_store_n(&b->pin, ok ? (elsewhere ? 3 : 1) : -1, __ATOMIC_RELEASE);
    return ok;
}

TN_API void tn__buffer_release(tn_buffer *b) {
    if (!b || __atomic_sub_fetch(&b->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    const tn_device_ops *ops = tn__get_device_ops();
    if (__atomic_load_n(&b->pin, __ATOMIC_ACQUIRE) == 1 && ops && ops->host_unregister)
        ops->host_unregister(b->pin_device, b->pin_ptr);
    if (b->owns) {
        if (b->free_fn) b->free_fn(b->free_device, b->raw, b->bytes);
        else if (b->pool_class) tn__hpool_put(b->raw, b->pool_class);
        else if (b->device == TN_HOST) tn__free(b->raw);
        else if (ops && ops->free) ops->free(b->device, b->data);
    }
    if (b->on_release) b->on_release(b->release_ctx);
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

/* Room for the byte strides of the widest dtype: every product of dimensions
   (zeros counted as 1, as strides see them) stays below this. */
#define TN__MAX_EXTENT (INT64_MAX / 16)

/* Whether a shape's extent (product of its dims, zeros as 1) fits. */
static bool tn__extent_fits(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        int64_t k = shape[d] > 1 ? shape[d] : 1;
        if (n > TN__MAX_EXTENT / k) return false;
        n *= k;
    }
    return true;
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
    char sb[128];
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0) return tn__err(TN_ERR_SHAPE, "%s: negative dimension in shape %s", who, tn__shape_str(ndim, shape, sb));
    if (!tn__extent_fits(ndim, shape))
        return tn__err(TN_ERR_SHAPE, "%s: shape %s is too large (its strides would overflow 64 bits)", who, tn__shape_str(ndim, shape, sb));
    return TN_OK;
}

TN_API tn_array *tn__array_from_buffer(tn_buffer *b, tn_dtype t, int ndim, const int64_t *shape,
                                       const int64_t *strides, void *data, int device) {
    tn_array *a = (tn_array *)tn__calloc(1, sizeof *a);
    if (!a) { tn__err(TN_ERR_OOM, "out of memory for an array of %d dims", ndim); return NULL; }   /* callers prefix their name */
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

/* a, or NULL with this thread's error prefixed by `who` (the public function called) */
static tn_array *tn__array_or_err(tn_array *a, const char *who) {
    if (!a) tn__err_in(who, tn_last_result() != TN_OK ? tn_last_result() : TN_ERR_OOM);
    return a;
}

/* A contiguous array; errors name `who` (NULL: no name, for internal callers,
   whose public caller prefixes its own). */
static tn_array *tn__array_new(const char *who, tn_dtype t, int ndim, const int64_t *shape, int device) {
    const char *w = who ? who : "", *sep = who ? ": " : "";
    if (tn__check_shape(who ? who : "array", t, ndim, shape) != TN_OK) return NULL;
    size_t bytes = (size_t)tn__shape_size(ndim, shape) * tn_dtype_size(t);
    const tn_device_ops *ops = tn__get_device_ops();
    if (device != TN_HOST && !(ops && ops->alloc)) {
        tn__err(TN_ERR_DEVICE, "%s%sno device back end for device %d", w, sep, device);
        return NULL;
    }
    tn_buffer *b = tn__buffer_new(bytes, device);
    if (!b) {
        char sb[128];
        tn__err(TN_ERR_OOM, "%s%sout of %s memory for %s %s (%zu bytes)", w, sep,
                device == TN_HOST ? "host" : "device", tn_dtype_name(t), tn__shape_str(ndim, shape, sb), bytes);
        return NULL;
    }
    tn_array *a = tn__array_from_buffer(b, t, ndim, shape, NULL, b->data, device);
    if (who) tn__array_or_err(a, who);
    tn__buffer_release(b);
    return a;
}

TN_API tn_array *tn__array_alloc(tn_dtype t, int ndim, const int64_t *shape, int device) {
    return tn__array_new(NULL, t, ndim, shape, device);
}

/* A contiguous host array in the back end's pinned memory (tn_device_ops.
   pinned_alloc), so a copy from `device` lands in it directly; ordinary host
   memory without one (or when pinned memory runs out). */
static tn_array *tn__array_alloc_pinned(int device, tn_dtype t, int ndim, const int64_t *shape) {
    const tn_device_ops *ops = tn__get_device_ops();
    if (device == TN_HOST || !ops || !ops->pinned_alloc || !ops->pinned_free ||
        tn__check_shape("tn__array_alloc_pinned", t, ndim, shape) != TN_OK)
        return tn__array_alloc(t, ndim, shape, TN_HOST);
    size_t bytes = (size_t)tn__shape_size(ndim, shape) * tn_dtype_size(t);
    tn_buffer *b = (tn_buffer *)tn__calloc(1, sizeof *b);
    void *p = b ? ops->pinned_alloc(device, bytes) : NULL;
    if (!p) { tn__free(b); return tn__array_alloc(t, ndim, shape, TN_HOST); }
    b->refcount = 1;
    b->data = b->raw = p;
    b->bytes = bytes;
    b->device = TN_HOST;
    b->owns = true;
    b->free_fn = ops->pinned_free;
    b->free_device = device;
    tn_array *a = tn__array_from_buffer(b, t, ndim, shape, NULL, p, TN_HOST);
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
   large copies are split over threads into pieces of rows: a task is one
   piece of TN__COPY_PIECE elements or less (a long row, a contiguous copy
   above all, is several tasks, not one thread's). */
#define TN__COPY_PIECE ((int64_t)1 << 16)
typedef struct tn__copy_job {
    int ndim;                       /* dims after coalescing; the last is the row */
    int64_t shape[TN_MAX_DIMS];
    int64_t dst_strides[TN_MAX_DIMS], src_strides[TN_MAX_DIMS];
    int64_t piece, pieces;          /* elements a piece of a row (the last one shorter), pieces a row */
    char *dst; const char *src;
    tn_dtype dt, st;
} tn__copy_job;

/* tasks [lo, hi): task t is piece t % pieces of row t / pieces */
static void tn__copy_rows(void *ctx, int64_t lo, int64_t hi) {
    const tn__copy_job *j = (const tn__copy_job *)ctx;
    int nd = j->ndim;
    int64_t len = j->shape[nd - 1], np = j->pieces, first = lo / np, last = (hi - 1) / np;
    int64_t idx[TN_MAX_DIMS] = {0};
    int64_t r = first;
    for (int d = nd - 2; d >= 0; d--) { idx[d] = r % j->shape[d]; r /= j->shape[d]; }
    for (int64_t row = first; row <= last; row++) {
        int64_t e0 = row == first ? (lo % np) * j->piece : 0;
        int64_t e1 = row == last ? ((hi - 1) % np + 1) * j->piece : len;
        if (e1 > len) e1 = len;
        int64_t doff = e0 * j->dst_strides[nd - 1], soff = e0 * j->src_strides[nd - 1];
        for (int d = 0; d < nd - 1; d++) { doff += idx[d] * j->dst_strides[d]; soff += idx[d] * j->src_strides[d]; }
        tn__convert_row(j->dt, j->dst + doff, j->dst_strides[nd - 1], j->st, j->src + soff,
                        j->src_strides[nd - 1], e1 - e0);
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
    int64_t ds[2][TN_MAX_DIMS];     /* dst, src */
    memcpy(j.shape, shape, sizeof(int64_t) * (size_t)ndim);
    memcpy(ds[0], dstr, sizeof(int64_t) * (size_t)ndim);
    memcpy(ds[1], sstr, sizeof(int64_t) * (size_t)ndim);
    int nd = tn__merge_dims(ndim, j.shape, 2, ds);
    memcpy(j.dst_strides, ds[0], sizeof(int64_t) * (size_t)nd);
    memcpy(j.src_strides, ds[1], sizeof(int64_t) * (size_t)nd);
    if (nd == 0) { j.shape[0] = 1; j.dst_strides[0] = j.src_strides[0] = 0; nd = 1; }
    j.ndim = nd;
    int64_t len = j.shape[nd - 1], rows = n / len;
    j.piece = len < TN__COPY_PIECE ? len : TN__COPY_PIECE;
    j.pieces = (len + j.piece - 1) / j.piece;
    if (n < 2 * TN__COPY_PIECE) tn__copy_rows(&j, 0, rows * j.pieces);
    else tn__parallel_for(rows * j.pieces, 1 + TN__COPY_PIECE / len, tn__copy_rows, &j);   /* ~64K elements a task */
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
    const tn_device_ops *ops = tn__get_device_ops();
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
    const tn_device_ops *ops = tn__get_device_ops();
    if (a->device != TN_HOST && t == a->dtype && tn_array_is_contiguous(a) && ops && ops->copy)
        return need ? ops->copy(dst, TN_HOST, a->data, a->device, need) : TN_OK;
    /* a host array is read where it is (nothing to allocate, nothing to fail) */
    tn_array *h = a->device == TN_HOST ? NULL : tn__host_view(a, "tn_array_copy_to");
    const tn_array *src = h ? h : a;
    if (!src || src->device != TN_HOST) return tn_last_result();
    int64_t cs[TN_MAX_DIMS] = { 0 };
    tn__contiguous_strides(t, a->ndim, a->shape, cs);
    tn__copy_strided(t, dst, cs, src->dtype, src->data, src->strides, src->ndim, src->shape);
    tn_array_free(h);
    return TN_OK;
}

TN_API tn_array *tn_array_astype(const tn_array *a, tn_dtype t) {
    if (tn__array_readable(a, "tn_array_astype") != TN_OK) return NULL;
    if (t == TN_DTYPE_NONE) t = a->dtype;
    if (t < TN_BOOL || t >= TN_DTYPE_COUNT) { tn__err(TN_ERR_DTYPE, "tn_array_astype: invalid dtype %d", (int)t); return NULL; }
    tn_array *c = tn__array_new("tn_array_astype", t, a->ndim, a->shape, TN_HOST);
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
    const tn_device_ops *ops = tn__get_device_ops();
    if (!ops || !ops->copy)
        return tn__err(TN_ERR_DEVICE, "tn_array_assign: dst lives on device %d but no device back end is loaded", dst->device);
    tn_array *h = tn__host_view(src, "tn_array_assign");
    if (!h) return tn_last_result();
    tn_array *c = tn__array_alloc(dst->dtype, dst->ndim, dst->shape, TN_HOST);
    if (!c) { tn_array_free(h); return tn_last_result(); }
    tn__broadcast_strides(h, dst->ndim, dst->shape, bstr);
    tn__copy_strided(dst->dtype, c->data, c->strides, h->dtype, h->data, bstr, dst->ndim, dst->shape);
    r = ops->copy(dst->data, dst->device, c->data, TN_HOST, tn_array_nbytes(c));
    tn_array_free(c);
    tn_array_free(h);
    return r;
}

/* >>creation */

TN_API tn_array *tn_array_empty(tn_dtype t, int ndim, const int64_t *shape) {
    tn_array *a = tn__array_new("tn_array_empty", t, ndim, shape, TN_HOST);
    /* a bool byte other than 0 or 1 is no value of C's bool: empty bools are false */
    if (a && t == TN_BOOL) memset(a->data, 0, tn_array_nbytes(a));
    return a;
}

TN_API tn_array *tn_array_zeros(tn_dtype t, int ndim, const int64_t *shape) {
    tn_array *a = tn__array_new("tn_array_zeros", t, ndim, shape, TN_HOST);
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
    tn_array *a = tn__array_new(who, t, ndim, shape, TN_HOST);
    if (a) tn__fill(a, v);
    return a;
}

TN_API tn_array *tn_array_ones(tn_dtype t, int ndim, const int64_t *shape) { return tn__array_full("tn_array_ones", t, ndim, shape, 1.0); }
TN_API tn_array *tn_array_full(tn_dtype t, int ndim, const int64_t *shape, double value) { return tn__array_full("tn_array_full", t, ndim, shape, value); }
TN_API tn_array *tn_array_scalar(tn_dtype t, double value) { return tn__array_full("tn_array_scalar", t, 0, NULL, value); }

TN_API tn_array *tn_array_from_data(tn_dtype t, int ndim, const int64_t *shape, const void *data) {
    tn_array *a = tn__array_new("tn_array_from_data", t, ndim, shape, TN_HOST);
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
    tn_array *a = tn__array_or_err(tn__array_from_buffer(b, t, ndim, shape, strides, data, TN_HOST), "tn_array_wrap");
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
    if (tn__check_shape("tn_array_arange", t, 1, &n) != TN_OK) return NULL;
    tn_array *a = tn__array_alloc(t, 1, &n, TN_HOST);
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
    return (double)(tn__splitmix_at(seed, i) >> 11) / 9007199254740992.0;   /* 2^53: C++ before 17 has no hex floats */
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
    tn_array *a = tn__array_new(who, t, ndim, shape, TN_HOST);
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

/* >>random_state: NumPy's legacy RandomState (numpy/random/src/mt19937 and
   legacy/legacy-distributions.c). Sequential by nature: one stream, drawn in
   C order, the gaussian's second value cached across calls as NumPy does. */
#define TN__MT_N 624
#define TN__MT_M 397

struct tn_random_state {
    uint32_t key[TN__MT_N];
    int pos;
    bool has_gauss;
    double gauss;
};

static void tn__mt_seed(tn_random_state *rs, uint32_t seed) {
    for (int i = 0; i < TN__MT_N; i++) {
        rs->key[i] = seed;
        seed = 1812433253u * (seed ^ (seed >> 30)) + (uint32_t)i + 1;
    }
    rs->pos = TN__MT_N;
    rs->has_gauss = false;
    rs->gauss = 0;
}

static void tn__mt_refill(tn_random_state *rs) {
    uint32_t *k = rs->key;
    for (int i = 0; i < TN__MT_N; i++) {
        uint32_t y = (k[i] & 0x80000000u) | (k[(i + 1) % TN__MT_N] & 0x7fffffffu);
        k[i] = k[(i + TN__MT_M) % TN__MT_N] ^ (y >> 1) ^ ((0u - (y & 1u)) & 0x9908b0dfu);
    }
    rs->pos = 0;
}

TN_API uint32_t tn_rs_uint32(tn_random_state *rs) {
    if (!rs) { tn__err_null("tn_rs_uint32", "rs"); return 0; }
    if (rs->pos == TN__MT_N) tn__mt_refill(rs);
    uint32_t y = rs->key[rs->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

TN_API double tn_rs_double(tn_random_state *rs) {
    if (!rs) { tn__err_null("tn_rs_double", "rs"); return NAN; }
    uint32_t a = tn_rs_uint32(rs) >> 5, b = tn_rs_uint32(rs) >> 6;
    return ((double)a * 67108864.0 + (double)b) / 9007199254740992.0;
}

/* legacy_gauss: the polar method; the second value of each pair is kept for the next draw. */
static double tn__rs_gauss(tn_random_state *rs) {
    if (rs->has_gauss) {
        rs->has_gauss = false;
        double v = rs->gauss;
        rs->gauss = 0;
        return v;
    }
    double x1, x2, r2;
    do {
        x1 = 2.0 * tn_rs_double(rs) - 1.0;
        x2 = 2.0 * tn_rs_double(rs) - 1.0;
        r2 = x1 * x1 + x2 * x2;
    } while (r2 >= 1.0 || r2 == 0.0);
    double f = sqrt(-2.0 * log(r2) / r2);
    rs->gauss = f * x1;
    rs->has_gauss = true;
    return f * x2;
}

TN_API tn_random_state *tn_random_state_new(uint32_t seed) {
    tn_random_state *rs = (tn_random_state *)tn__malloc(sizeof *rs);
    if (!rs) { tn__err(TN_ERR_OOM, "tn_random_state_new: out of memory"); return NULL; }
    tn__mt_seed(rs, seed);
    return rs;
}

/* init_by_array of the MT19937 reference (Matsumoto and Nishimura, 2002), as NumPy's mt19937_init_by_array. */
TN_API tn_random_state *tn_random_state_new_array(const uint32_t *key, int n) {
    if (!key) { tn__err_null("tn_random_state_new_array", "key"); return NULL; }
    if (n <= 0) { tn__err(TN_ERR_INVALID, "tn_random_state_new_array: n is %d; the seed must be non-empty", n); return NULL; }
    tn_random_state *rs = tn_random_state_new(19650218u);
    if (!rs) return NULL;
    uint32_t *mt = rs->key;
    int i = 1, j = 0;
    for (int k = TN__MT_N > n ? TN__MT_N : n; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        i++; j++;
        if (i >= TN__MT_N) { mt[0] = mt[TN__MT_N - 1]; i = 1; }
        if (j >= n) j = 0;
    }
    for (int k = TN__MT_N - 1; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        i++;
        if (i >= TN__MT_N) { mt[0] = mt[TN__MT_N - 1]; i = 1; }
    }
    mt[0] = 0x80000000u;
    return rs;
}

TN_API void tn_random_state_free(tn_random_state *rs) { tn__free(rs); }

typedef enum { TN__RS_UNIFORM, TN__RS_NORMAL } tn__rs_kind;

static tn_array *tn__rs_float(const char *who, tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape,
                              tn__rs_kind kind, double p0, double p1) {
    if (!rs) { tn__err_null(who, "rs"); return NULL; }
    if (t == TN_DTYPE_NONE) t = TN_F64;   /* NumPy's dtype */
    if (!tn_dtype_is_float(t)) { tn__err(TN_ERR_DTYPE, "%s: dtype %s is not a float dtype", who, tn_dtype_name(t)); return NULL; }
    if (!isfinite(p0) || !isfinite(p1) || (kind == TN__RS_UNIFORM && !isfinite(p1 - p0)) || (kind == TN__RS_NORMAL && p1 < 0)) {
        tn__err(TN_ERR_INVALID, "%s: parameters %g and %g must be finite%s", who, p0, p1,
                kind == TN__RS_NORMAL ? ", the scale >= 0" : ", and so their difference");
        return NULL;
    }
    tn_array *a = tn__array_new(who, t, ndim, shape, TN_HOST);
    if (!a) return NULL;
    size_t es = tn_dtype_size(t);
    int64_t n = tn_array_size(a);
    char *p = (char *)a->data;
    for (int64_t i = 0; i < n; i++) {
        double v = kind == TN__RS_NORMAL ? p0 + p1 * tn__rs_gauss(rs) : p0 + (p1 - p0) * tn_rs_double(rs);
        tn__store_f(t, p + i * (int64_t)es, v);
    }
    return a;
}

TN_API tn_array *tn_rs_rand(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape) {
    return tn__rs_float("tn_rs_rand", rs, t, ndim, shape, TN__RS_UNIFORM, 0, 1);
}
TN_API tn_array *tn_rs_uniform(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape, double low, double high) {
    return tn__rs_float("tn_rs_uniform", rs, t, ndim, shape, TN__RS_UNIFORM, low, high);
}
/* randn is legacy_gauss itself; normal(loc, scale) is loc + scale * legacy_gauss. */
TN_API tn_array *tn_rs_randn(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape) {
    return tn__rs_float("tn_rs_randn", rs, t, ndim, shape, TN__RS_NORMAL, 0, 1);
}
TN_API tn_array *tn_rs_normal(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape, double loc, double scale) {
    return tn__rs_float("tn_rs_normal", rs, t, ndim, shape, TN__RS_NORMAL, loc, scale);
}

/* RandomState.randint: random_bounded_uint64_fill with use_masked. rng = high - 1 - low;
   a range that fits 32 bits draws one 32-bit word per try, a wider one two
   (high word first); a try is masked to the smallest all-ones mask >= rng and
   rejected while above rng. */
TN_API tn_array *tn_rs_randint(tn_random_state *rs, tn_dtype t, int ndim, const int64_t *shape, int64_t low, int64_t high) {
    static const char who[] = "tn_rs_randint";
    if (!rs) { tn__err_null(who, "rs"); return NULL; }
    if (t != TN_I32 && t != TN_I64) { tn__err(TN_ERR_DTYPE, "%s: dtype %s: int32 or int64 only", who, tn_dtype_name(t)); return NULL; }
    if (low >= high) { tn__err(TN_ERR_INVALID, "%s: low >= high (%lld >= %lld)", who, (long long)low, (long long)high); return NULL; }
    if (t == TN_I32 && (low < INT32_MIN || high - 1 > INT32_MAX)) {
        tn__err(TN_ERR_INVALID, "%s: [%lld, %lld) is out of bounds for int32", who, (long long)low, (long long)high);
        return NULL;
    }
    tn_array *a = tn__array_new(who, t, ndim, shape, TN_HOST);
    if (!a) return NULL;
    uint64_t rng = (uint64_t)high - 1 - (uint64_t)low, mask = rng;
    for (int s = 1; s < 64; s <<= 1) mask |= mask >> s;
    int64_t n = tn_array_size(a);
    for (int64_t i = 0; i < n; i++) {
        uint64_t v;
        if (rng == 0) v = 0;
        else if (rng <= 0xFFFFFFFFu) {
            do v = tn_rs_uint32(rs) & mask; while (v > rng);
        } else {
            do { uint64_t hi = tn_rs_uint32(rs); v = ((hi << 32) | tn_rs_uint32(rs)) & mask; } while (v > rng);
        }
        uint64_t r = (uint64_t)low + v;
        if (t == TN_I32) ((int32_t *)a->data)[i] = (int32_t)(uint32_t)r;
        else ((int64_t *)a->data)[i] = (int64_t)r;
    }
    return a;
}

/* >>views: share the buffer; never copy. */

TN_API tn_array *tn_array_view(const tn_array *a) {
    if (!a) { tn__err(TN_ERR_NULL, "tn_array_view: array is NULL"); return NULL; }
    return tn__array_or_err(tn__array_from_buffer(a->base, a->dtype, a->ndim, a->shape, a->strides, a->data, a->device), "tn_array_view");
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
    return tn__array_or_err(tn__array_from_buffer(a->base, a->dtype, a->ndim, sh, st, a->data, a->device), "tn_array_transpose");
}

/* Python slice semantics: resolves start/stop (TN_NONE: omitted) against
   length n for step, giving the first index and the element count. */
static void tn__slice_resolve(int64_t n, int64_t start, int64_t stop, int64_t step, int64_t *first, int64_t *count) {
    int64_t lo, hi;
    if (step > 0) {
        lo = start == TN_NONE ? 0 : start < 0 ? (start + n < 0 ? 0 : start + n) : (start > n ? n : start);
        hi = stop == TN_NONE ? n : stop < 0 ? (stop + n < 0 ? 0 : stop + n) : (stop > n ? n : stop);
        *first = lo;
        *count = hi > lo ? (hi - lo - 1) / step + 1 : 0;      /* no overflow for any step */
    } else {
        lo = start == TN_NONE ? n - 1 : start < 0 ? (start + n < -1 ? -1 : start + n) : (start > n - 1 ? n - 1 : start);
        hi = stop == TN_NONE ? -1 : stop < 0 ? (stop + n < -1 ? -1 : stop + n) : (stop > n - 1 ? n - 1 : stop);
        *first = lo;
        *count = lo > hi ? (lo - hi - 1) / -step + 1 : 0;     /* step > INT64_MIN (TN_NONE) */
    }
    if (*count == 0) *first = 0;
}

/* The byte stride of a sliced axis: stride * step, which cannot overflow
   when the slice has two elements or more; with fewer, any step (INT64_MAX
   too) gives the axis its old stride. */
static int64_t tn__slice_stride(int64_t stride, int64_t step, int64_t count) { return count > 1 ? stride * step : stride; }

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
    st[ax] = tn__slice_stride(a->strides[ax], step, count);
    char *data = (char *)a->data + first * a->strides[ax];
    return tn__array_or_err(tn__array_from_buffer(a->base, a->dtype, a->ndim, sh, st, data, a->device), "tn_array_slice");
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
    return tn__array_or_err(tn__array_from_buffer(a->base, a->dtype, ndim, shape, st, a->data, a->device), "tn_array_broadcast_to");
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
        }
    }
    int64_t ext[TN_MAX_DIMS] = { 0 };   /* the known dims, the unknown one as 1 */
    for (int d = 0; d < ndim; d++) ext[d] = d == neg ? 1 : shape[d];
    if (!tn__extent_fits(ndim, ext))
        return tn__err(TN_ERR_SHAPE, "%s: target shape %s is too large (its strides would overflow 64 bits)", who, tn__shape_str(ndim, shape, s2));
    for (int d = 0; d < ndim; d++) known *= ext[d];
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
        return tn__array_or_err(tn__array_from_buffer(a->base, a->dtype, ndim, ns, st, a->data, a->device), "tn_array_reshape");
    /* not expressible as a view: copy into C order (on a's device) */
    tn_array *c = tn_array_copy(a);
    if (!c) return NULL;
    if (a->device != TN_HOST) {
        tn_array *d = tn__array_alloc(a->dtype, ndim, ns, a->device);
        if (d && tn__get_device_ops()->copy(d->data, d->device, c->data, TN_HOST, tn_array_nbytes(c)) != TN_OK) { tn_array_free(d); d = NULL; }
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
    const tn_device_ops *ops = tn__get_device_ops();
    if (!ops || !ops->copy) {
        tn__err(TN_ERR_DEVICE, "tn_array_get: the array lives on device %d but no device back end is loaded", a->device);
        return NAN;
    }
    if (ops->copy(tmp, TN_HOST, p, a->device, tn_dtype_size(a->dtype)) != TN_OK) return NAN;
    return tn__load_f(a->dtype, tmp);
}

TN_API tn_result tn_array_set(tn_array *a, const int64_t *index, double v) {
    char *p;
    tn_result r = tn__elem_ptr(a, index, "tn_array_set", &p);
    if (r != TN_OK) return r;
    if (a->device == TN_HOST) { tn__store_f(a->dtype, p, v); return TN_OK; }
    char tmp[8];
    tn__store_f(a->dtype, tmp, v);
    const tn_device_ops *ops = tn__get_device_ops();
    if (!ops || !ops->copy)
        return tn__err(TN_ERR_DEVICE, "tn_array_set: the array lives on device %d but no device back end is loaded", a->device);
    return ops->copy(p, a->device, tmp, TN_HOST, tn_dtype_size(a->dtype));
}

/* >>array_files: .npy, .npz and safetensors (the >>api_files section).
   Formats: NumPy's numpy/lib/format.py, the ZIP file format (PKWARE's
   APPNOTE.TXT; ZIP64 read), RFC 1951 (inflate), safetensors' README. A
   reader reads a source (a file or memory, at offsets); a writer writes to a
   sink (a file, memory, or nothing: counting bytes and their CRC-32, which a
   zip member's header needs before its data). */
#include <errno.h>

typedef struct tn__src {
    const uint8_t *mem;      /* NULL: read f */
    FILE *f;
    uint64_t base, len;      /* the window [base, base + len) of the input */
    const char *where;       /* "'path'", "memory" or a zip member, for messages */
} tn__src;

static bool tn__src_read(const tn__src *s, uint64_t off, void *dst, uint64_t n) {
    if (off > s->len || n > s->len - off) return false;
    if (n == 0) return true;
    if (s->mem) { memcpy(dst, s->mem + s->base + off, (size_t)n); return true; }
    if (s->base + off > (uint64_t)LONG_MAX || fseek(s->f, (long)(s->base + off), SEEK_SET) != 0) return false;
    return fread(dst, 1, (size_t)n, s->f) == n;
}

static tn_result tn__src_open(const char *who, const char *path, tn__src *s, char *where, size_t where_cap) {
    memset(s, 0, sizeof *s);
    if (!path) return tn__err(TN_ERR_NULL, "%s: path is NULL", who);
    snprintf(where, where_cap, "'%s'", path);
    s->where = where;
    s->f = fopen(path, "rb");
    if (!s->f) return tn__err(TN_ERR_IO, "%s: cannot open %s: %s", who, where, strerror(errno));
    long n = fseek(s->f, 0, SEEK_END) == 0 ? ftell(s->f) : -1;
    if (n < 0) {
        int e = errno;
        fclose(s->f);
        s->f = NULL;
        return tn__err(TN_ERR_IO, "%s: cannot read %s: %s", who, where, strerror(e));
    }
    s->len = (uint64_t)n;
    return TN_OK;
}

static tn_result tn__src_mem(const char *who, const void *data, size_t size, tn__src *s) {
    memset(s, 0, sizeof *s);
    s->where = "memory";
    if (!data && size) return tn__err(TN_ERR_NULL, "%s: data is NULL for size %zu", who, size);
    s->mem = (const uint8_t *)data;
    s->len = size;
    return TN_OK;
}

static uint64_t tn__le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static bool tn__host_little(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* CRC-32 of ZIP (reflected polynomial 0xEDB88320), one table built once. */
static uint32_t tn__crc_table[256];
static pthread_once_t tn__crc_once = PTHREAD_ONCE_INIT;
static void tn__crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        tn__crc_table[i] = c;
    }
}
static uint32_t tn__crc32(uint32_t crc, const void *data, size_t n) {
    pthread_once(&tn__crc_once, tn__crc_init);
    const uint8_t *p = (const uint8_t *)data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = tn__crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

typedef struct tn__sink {
    FILE *f;                 /* the output: a file, */
    tn__sb *mem;             /* or memory, or neither: only counting */
    uint64_t n;              /* bytes put */
    uint32_t crc;            /* their CRC-32 when crc_on */
    bool crc_on, failed;
    int err;                 /* errno of a failed write */
} tn__sink;

static void tn__sink_put(tn__sink *s, const void *p, size_t n) {
    if (s->failed || n == 0) return;
    if (s->f && fwrite(p, 1, n, s->f) != n) { s->failed = true; s->err = errno; return; }
    if (s->mem) {
        tn__sb_putn(s->mem, (const char *)p, n);
        if (s->mem->oom) { s->failed = true; s->err = ENOMEM; return; }
    }
    if (s->crc_on) s->crc = tn__crc32(s->crc, p, n);
    s->n += n;
}

static void tn__sink_le(tn__sink *s, uint64_t v, int bytes) {
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    tn__sink_put(s, b, (size_t)bytes);
}

/* File element types: the library's dtypes and the ints it widens. */
typedef struct tn__ftype {
    char kind;               /* NumPy's: b bool, i int, u unsigned, f float */
    int size;
    const char *st;          /* safetensors' name */
    tn_dtype t;              /* the dtype it loads as */
} tn__ftype;
static const tn__ftype tn__ftypes[] = {
    { 'b', 1, "BOOL", TN_BOOL }, { 'i', 1, "I8", TN_I32 }, { 'u', 1, "U8", TN_I32 },
    { 'i', 2, "I16", TN_I32 }, { 'u', 2, "U16", TN_I32 }, { 'i', 4, "I32", TN_I32 },
    { 'u', 4, "U32", TN_I64 }, { 'i', 8, "I64", TN_I64 }, { 'u', 8, "U64", TN_I64 },
    { 'f', 2, "F16", TN_F16 }, { 'f', 4, "F32", TN_F32 }, { 'f', 8, "F64", TN_F64 },
};
#define TN__N_FTYPES ((int)(sizeof tn__ftypes / sizeof tn__ftypes[0]))

/* The file type a dtype is saved as. */
static const tn__ftype *tn__ftype_of(tn_dtype t) {
    char kind = t == TN_BOOL ? 'b' : tn_dtype_is_float(t) ? 'f' : 'i';
    for (int i = 0; i < TN__N_FTYPES; i++)
        if (tn__ftypes[i].kind == kind && tn__ftypes[i].size == (int)tn_dtype_size(t)) return &tn__ftypes[i];
    return NULL;
}

static void tn__bswap(uint8_t *p, int64_t n, int size) {
    for (int64_t i = 0; i < n; i++, p += size)
        for (int a = 0, b = size - 1; a < b; a++, b--) { uint8_t c = p[a]; p[a] = p[b]; p[b] = c; }
}

/* ndim dims of `shape` stored from offset off of s as elements of ft (swap:
   the other byte order; fortran: column-major), as a C-order host array of
   ft->t. */
static tn_array *tn__load_raw(const char *who, const tn__src *s, uint64_t off, const tn__ftype *ft, bool swap,
                              bool fortran, int ndim, const int64_t *shape, const char *name) {
    char sb[128];
    const char *nsep = name ? " array '" : "", *nend = name ? "'" : "";
    if (!name) name = "";
    if (!tn__extent_fits(ndim, shape)) {
        tn__err(TN_ERR_SHAPE, "%s: %s%s%s%s: shape %s overflows (its byte size does not fit 64 bits)", who, s->where,
                nsep, name, nend, tn__shape_str(ndim, shape, sb));
        return NULL;
    }
    int64_t fshape[TN_MAX_DIMS];
    for (int d = 0; d < ndim; d++) fshape[d] = fortran ? shape[ndim - 1 - d] : shape[d];
    int64_t n = tn__shape_size(ndim, shape);
    uint64_t bytes = (uint64_t)n * (uint64_t)ft->size;
    if (off > s->len || bytes > s->len - off) {
        tn__err(TN_ERR_INVALID, "%s: %s%s%s%s is truncated: shape %s needs %llu bytes of data from byte %llu, the input has %llu",
                who, s->where, nsep, name, nend, tn__shape_str(ndim, shape, sb), (unsigned long long)bytes,
                (unsigned long long)off, (unsigned long long)(s->len > off ? s->len - off : 0));
        return NULL;
    }
    tn_array *a = tn__array_new(who, ft->t, ndim, fshape, TN_HOST);
    if (!a) return NULL;
    bool same = ft->kind != 'u' && ft->size == (int)tn_dtype_size(ft->t);
    uint8_t *raw = same ? (uint8_t *)a->data : (uint8_t *)tn__malloc((size_t)bytes);
    if (!raw) {
        tn_array_free(a);
        tn__err(TN_ERR_OOM, "%s: %s: out of memory for %llu bytes", who, s->where, (unsigned long long)bytes);
        return NULL;
    }
    if (!tn__src_read(s, off, raw, bytes)) {
        if (!same) tn__free(raw);
        tn_array_free(a);
        tn__err(TN_ERR_IO, "%s: %s: reading %llu bytes failed: %s", who, s->where, (unsigned long long)bytes,
                strerror(errno));
        return NULL;
    }
    if (swap && ft->size > 1) tn__bswap(raw, n, ft->size);
    if (ft->kind == 'b')
        for (int64_t i = 0; i < n; i++) raw[i] = raw[i] != 0;
    if (!same) {
        for (int64_t i = 0; i < n; i++) {
            const uint8_t *p = raw + i * ft->size;
            int64_t v;
            if (ft->kind == 'u' && ft->size == 8) {
                uint64_t u;
                memcpy(&u, p, 8);
                if (u > (uint64_t)INT64_MAX) {
                    tn__free(raw);
                    tn_array_free(a);
                    tn__err(TN_ERR_DTYPE, "%s: %s%s%s%s: uint64 value %llu (element %lld) does not fit int64, the widest int "
                            "the library has", who, s->where, nsep, name, nend, (unsigned long long)u, (long long)i);
                    return NULL;
                }
                v = (int64_t)u;
            } else if (ft->size == 1) v = ft->kind == 'u' ? (int64_t)*p : (int64_t)(int8_t)*p;
            else if (ft->size == 2) {
                uint16_t u;
                memcpy(&u, p, 2);
                v = ft->kind == 'u' ? (int64_t)u : (int64_t)(int16_t)u;
            } else {
                uint32_t u;
                memcpy(&u, p, 4);
                v = ft->kind == 'u' ? (int64_t)u : (int64_t)(int32_t)u;
            }
            if (ft->t == TN_I32) ((int32_t *)a->data)[i] = (int32_t)v;
            else ((int64_t *)a->data)[i] = v;
        }
        tn__free(raw);
    }
    if (fortran && ndim > 1) {
        tn_array *t = tn_array_transpose(a, NULL);
        tn_array *c = t ? tn_array_copy(t) : NULL;
        tn_array_free(t);
        tn_array_free(a);
        if (!c) tn__err_in(who, tn_last_result());
        a = c;
    }
    return a;
}

/* A host array with a's values in C order: a view when a already is one. */
static tn_array *tn__host_c_order(const tn_array *a) {
    return a->device == TN_HOST && tn_array_is_contiguous(a) ? tn_array_view(a) : tn_array_copy(a);
}

/* What a save writes: one array, or n named ones (metadata: safetensors'). */
typedef struct tn__save_args {
    const char *const *names;
    const tn_array *const *arrays;
    int n;
    const char *metadata;
} tn__save_args;
typedef tn_result (*tn__emit_fn)(const char *who, tn__sink *s, const tn__save_args *a);

/* Checks every array (and, with names, every name: set, unique) before anything is written. */
static tn_result tn__save_check(const char *who, const tn__save_args *a, bool named) {
    if (a->n < 0) return tn__err(TN_ERR_INVALID, "%s: n is %d", who, a->n);
    if (a->n > 0 && !a->arrays) return tn__err(TN_ERR_NULL, "%s: arrays is NULL for n %d", who, a->n);
    if (named && a->n > 0 && !a->names) return tn__err(TN_ERR_NULL, "%s: names is NULL for n %d", who, a->n);
    for (int i = 0; i < a->n; i++) {
        const tn_array *x = a->arrays[i];
        if (!x) return tn__err_null(who, named ? "arrays[%d] ('%s')" : "array", i, named && a->names[i] ? a->names[i] : "");
        if (tn__array_readable(x, who) != TN_OK) return tn_last_result();
        if (x->dtype <= TN_DTYPE_NONE || x->dtype >= TN_DTYPE_COUNT)
            return tn__err(TN_ERR_DTYPE, "%s: array %d has invalid dtype %d", who, i, (int)x->dtype);
        if (!named) continue;
        const char *nm = a->names[i];
        if (!nm || !nm[0]) return tn__err(TN_ERR_INVALID, "%s: names[%d] is %s", who, i, nm ? "empty" : "NULL");
        if (strlen(nm) > 60000) return tn__err(TN_ERR_INVALID, "%s: names[%d] is %zu bytes long (at most 60000)", who, i, strlen(nm));
        for (int j = 0; j < i; j++)
            if (!strcmp(a->names[j], nm)) return tn__err(TN_ERR_INVALID, "%s: names[%d] and names[%d] are both '%s'", who, j, i, nm);
    }
    return TN_OK;
}

static tn_result tn__save_file(const char *who, const char *path, tn__emit_fn emit, const tn__save_args *a) {
    if (!path) return tn__err(TN_ERR_NULL, "%s: path is NULL", who);
    FILE *f = fopen(path, "wb");
    if (!f) return tn__err(TN_ERR_IO, "%s: cannot open '%s' for writing: %s", who, path, strerror(errno));
    tn__sink s;
    memset(&s, 0, sizeof s);
    s.f = f;
    tn_result r = emit(who, &s, a);
    if (fclose(f) != 0 && !s.failed) { s.failed = true; s.err = errno; }
    if (r == TN_OK && s.failed) r = tn__err(TN_ERR_IO, "%s: writing '%s' failed: %s", who, path, strerror(s.err));
    if (r != TN_OK) remove(path);
    return r;
}

static tn_result tn__save_mem(const char *who, void **data, size_t *size, tn__emit_fn emit, const tn__save_args *a) {
    if (!data || !size) return tn__err(TN_ERR_NULL, "%s: %s is NULL", who, data ? "size" : "data");
    *data = NULL;
    *size = 0;
    tn__sb b;
    memset(&b, 0, sizeof b);
    tn__sink s;
    memset(&s, 0, sizeof s);
    s.mem = &b;
    tn_result r = emit(who, &s, a);
    if (r == TN_OK && s.failed) r = tn__err(TN_ERR_OOM, "%s: out of memory for %llu bytes", who, (unsigned long long)s.n);
    if (r != TN_OK) { tn__free(b.s); return r; }
    *data = b.s ? (void *)b.s : tn__malloc(1);
    *size = b.n;
    if (!*data) return tn__err(TN_ERR_OOM, "%s: out of memory", who);
    return TN_OK;
}

TN_API void tn_bytes_free(void *data) { tn__free(data); }

/* ---- .npy ---- */

/* The header NumPy 1.24's format.write_array writes (version 1.0), byte for byte. */
static void tn__npy_header(tn__sink *s, const tn_array *a) {
    char descr[8], head[512];
    const tn__ftype *ft = tn__ftype_of(a->dtype);
    snprintf(descr, sizeof descr, "%c%c%d", ft->size == 1 ? '|' : tn__host_little() ? '<' : '>', ft->kind, ft->size);
    tn__sbuf h = { head, sizeof head, 0 };
    tn__sbuf_put(&h, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int d = 0; d < a->ndim; d++) tn__sbuf_put(&h, "%s%lld", d ? ", " : "", (long long)a->shape[d]);
    tn__sbuf_put(&h, "%s), }", a->ndim == 1 ? "," : "");
    if (a->ndim > 0) {   /* room to grow the first dim in place, as NumPy leaves */
        char first[32];
        int k = snprintf(first, sizeof first, "%lld", (long long)a->shape[0]);
        for (int i = k; i < 21; i++) tn__sbuf_put(&h, " ");
    }
    size_t hlen = h.len + 1, pad = 64 - (10 + hlen) % 64;
    tn__sink_put(s, "\x93NUMPY\x01\x00", 8);
    tn__sink_le(s, hlen + pad, 2);
    tn__sink_put(s, head, h.len);
    for (size_t i = 0; i < pad; i++) tn__sink_put(s, " ", 1);
    tn__sink_put(s, "\n", 1);
}

/* An .npy of the host C-order array h. */
static void tn__npy_put(tn__sink *s, const tn_array *h) {
    tn__npy_header(s, h);
    tn__sink_put(s, h->data, tn_array_nbytes(h));
}

static tn_result tn__npy_emit(const char *who, tn__sink *s, const tn__save_args *a) {
    tn_array *h = tn__host_c_order(a->arrays[0]);
    if (!h) return tn__err_in(who, tn_last_result());
    tn__npy_put(s, h);
    tn_array_free(h);
    return TN_OK;
}

/* A Python literal of an .npy header: 'text' (into buf), True/False, or a tuple of ints. */
typedef struct tn__pylit { const char *s; size_t i, n; } tn__pylit;
static void tn__pyl_ws(tn__pylit *p) { while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n')) p->i++; }
static bool tn__pyl_char(tn__pylit *p, char c) {
    tn__pyl_ws(p);
    if (p->i < p->n && p->s[p->i] == c) { p->i++; return true; }
    return false;
}
static bool tn__pyl_str(tn__pylit *p, char *buf, size_t cap) {
    tn__pyl_ws(p);
    if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"')) return false;
    char q = p->s[p->i++];
    size_t k = 0;
    while (p->i < p->n && p->s[p->i] != q) {
        if (k + 1 < cap) buf[k++] = p->s[p->i];
        p->i++;
    }
    buf[k] = 0;
    return p->i++ < p->n;
}

static tn_array *tn__npy_parse(const char *who, const tn__src *s) {
    uint8_t pre[12] = { 0 };
    bool read = tn__src_read(s, 0, pre, s->len < 8 ? s->len : 8);
    if (!read || s->len < 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        tn__err(TN_ERR_INVALID, "%s: %s is not a .npy file (bad magic: it starts %02x %02x %02x %02x %02x %02x, not "
                "93 'NUMPY')", who, s->where, pre[0], pre[1], pre[2], pre[3], pre[4], pre[5]);
        return NULL;
    }
    int major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0) {
        tn__err(TN_ERR_INVALID, "%s: %s: .npy format version %d.%d is not one of 1.0, 2.0, 3.0", who, s->where, major, minor);
        return NULL;
    }
    uint64_t start = major == 1 ? 10 : 12;
    if (!tn__src_read(s, 0, pre, start)) {
        tn__err(TN_ERR_INVALID, "%s: %s is truncated in the .npy preamble (%llu bytes)", who, s->where, (unsigned long long)s->len);
        return NULL;
    }
    uint64_t hlen = tn__le(pre + 8, (int)start - 8);
    if (hlen > s->len - start) {
        tn__err(TN_ERR_INVALID, "%s: %s is truncated: the header says %llu bytes, the input has %llu after the preamble", who,
                s->where, (unsigned long long)hlen, (unsigned long long)(s->len - start));
        return NULL;
    }
    char *text = (char *)tn__malloc((size_t)hlen + 1);
    if (!text) { tn__err(TN_ERR_OOM, "%s: %s: out of memory for the header", who, s->where); return NULL; }
    if (!tn__src_read(s, start, text, hlen)) {
        tn__free(text);
        tn__err(TN_ERR_INVALID, "%s: %s: reading the header failed", who, s->where);
        return NULL;
    }
    text[hlen] = 0;
    tn__pylit p = { text, 0, (size_t)hlen };
    char key[32], descr[32] = "";
    int fortran = -1, ndim = -1;
    int64_t shape[TN_MAX_DIMS];
    const char *bad = NULL;
    tn_result code = TN_ERR_INVALID;
    if (!tn__pyl_char(&p, '{')) bad = "it is not a dict";
    while (!bad && !tn__pyl_char(&p, '}')) {
        if (!tn__pyl_str(&p, key, sizeof key) || !tn__pyl_char(&p, ':')) { bad = "a key is malformed"; break; }
        tn__pyl_ws(&p);
        if (!strcmp(key, "descr")) {
            if (p.i < p.n && p.s[p.i] == '[') { bad = "the dtype is structured (a list of fields), which is not supported"; code = TN_ERR_DTYPE; break; }
            if (!tn__pyl_str(&p, descr, sizeof descr)) { bad = "'descr' is not a string"; break; }
        } else if (!strcmp(key, "fortran_order")) {
            if (p.n - p.i >= 4 && !strncmp(p.s + p.i, "True", 4)) fortran = 1, p.i += 4;
            else if (p.n - p.i >= 5 && !strncmp(p.s + p.i, "False", 5)) fortran = 0, p.i += 5;
            else { bad = "'fortran_order' is not True or False"; break; }
        } else if (!strcmp(key, "shape")) {
            if (!tn__pyl_char(&p, '(')) { bad = "'shape' is not a tuple"; break; }
            ndim = 0;
            while (!bad && !tn__pyl_char(&p, ')')) {
                tn__pyl_ws(&p);
                uint64_t v = 0;
                size_t i0 = p.i;
                while (p.i < p.n && p.s[p.i] >= '0' && p.s[p.i] <= '9') {
                    unsigned dg = (unsigned)(p.s[p.i++] - '0');
                    if (v > ((uint64_t)INT64_MAX - dg) / 10) { bad = "a dimension in 'shape' overflows 64 bits"; code = TN_ERR_SHAPE; break; }
                    v = v * 10 + dg;
                }
                if (bad) break;
                if (p.i == i0) { bad = "'shape' holds something other than non-negative ints"; break; }
                if (p.i < p.n && p.s[p.i] == 'L') p.i++;
                if (ndim == TN_MAX_DIMS) { bad = "'shape' has more dims than TN_MAX_DIMS (8)"; code = TN_ERR_SHAPE; break; }
                shape[ndim++] = (int64_t)v;
                if (!tn__pyl_char(&p, ',')) { if (!tn__pyl_char(&p, ')')) bad = "'shape' is malformed"; break; }
            }
        } else { bad = "it has a key other than 'descr', 'fortran_order' and 'shape'"; break; }
        if (!bad && !tn__pyl_char(&p, ',')) {
            if (!tn__pyl_char(&p, '}')) bad = "entries are not separated by commas";
            break;
        }
    }
    if (!bad && (!descr[0] || fortran < 0 || ndim < 0)) bad = "it lacks one of 'descr', 'fortran_order' and 'shape'";
    if (bad) {
        tn__err(code, "%s: %s: bad .npy header (%s): %.200s", who, s->where, bad, text);
        tn__free(text);
        return NULL;
    }
    tn__free(text);
    /* descr: byte order (< > | =), kind, size */
    const char *d = descr;
    char order = strchr("<>|=", d[0]) ? *d++ : '=';
    char *end = NULL;
    long size = d[0] ? strtol(d + 1, &end, 10) : 0;
    const tn__ftype *ft = NULL;
    for (int i = 0; end && !*end && i < TN__N_FTYPES; i++)
        if (tn__ftypes[i].kind == d[0] && tn__ftypes[i].size == size) ft = &tn__ftypes[i];
    if (!ft) {
        const char *what = d[0] == 'c' ? "complex" : d[0] == 'O' ? "Python objects" : strchr("SUa", d[0]) ? "strings"
                         : d[0] == 'V' ? "raw bytes (void)" : strchr("Mm", d[0]) ? "datetime" : "an unknown type";
        tn__err(TN_ERR_DTYPE, "%s: %s: dtype '%s' (%s) is not supported: this reads bool, int8..int64, uint8..uint64, "
                "float16, float32, float64", who, s->where, descr, what);
        return NULL;
    }
    bool swap = order != '|' && order != '=' && (order == '<') != tn__host_little();
    return tn__load_raw(who, s, start + hlen, ft, swap, fortran == 1, ndim, shape, NULL);
}

TN_API tn_result tn_save_npy(const char *path, const tn_array *a) {
    tn__save_args args = { NULL, &a, 1, NULL };
    if (tn__save_check("tn_save_npy", &args, false) != TN_OK) return tn_last_result();
    return tn__save_file("tn_save_npy", path, tn__npy_emit, &args);
}

TN_API tn_result tn_save_npy_mem(const tn_array *a, void **data, size_t *size) {
    tn__save_args args = { NULL, &a, 1, NULL };
    if (tn__save_check("tn_save_npy_mem", &args, false) != TN_OK) return tn_last_result();
    return tn__save_mem("tn_save_npy_mem", data, size, tn__npy_emit, &args);
}

TN_API tn_array *tn_load_npy(const char *path) {
    tn__src s;
    char where[512];
    if (tn__src_open("tn_load_npy", path, &s, where, sizeof where) != TN_OK) return NULL;
    tn_array *a = tn__npy_parse("tn_load_npy", &s);
    fclose(s.f);
    return a;
}

TN_API tn_array *tn_load_npy_mem(const void *data, size_t size) {
    tn__src s;
    if (tn__src_mem("tn_load_npy_mem", data, size, &s) != TN_OK) return NULL;
    return tn__npy_parse("tn_load_npy_mem", &s);
}

/* ---- named array sets ---- */

static tn_result tn__list_add(const char *who, tn_array_list *out, const char *name, size_t name_len, tn_array *a) {
    char **names = (char **)tn__realloc(out->names, (size_t)(out->n + 1) * sizeof *names);
    if (names) out->names = names;
    tn_array **arrays = names ? (tn_array **)tn__realloc(out->arrays, (size_t)(out->n + 1) * sizeof *arrays) : NULL;
    if (arrays) out->arrays = arrays;
    char *nm = arrays ? (char *)tn__malloc(name_len + 1) : NULL;
    if (!nm) { tn_array_free(a); return tn__err(TN_ERR_OOM, "%s: out of memory for array %d", who, out->n); }
    memcpy(nm, name, name_len);
    nm[name_len] = 0;
    out->names[out->n] = nm;
    out->arrays[out->n++] = a;
    return TN_OK;
}

TN_API void tn_array_list_free(tn_array_list *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) { tn__free(s->names[i]); tn_array_free(s->arrays[i]); }
    tn__free(s->names);
    tn__free(s->arrays);
    tn__free(s->metadata);
    memset(s, 0, sizeof *s);
}

TN_API tn_array *tn_array_list_get(const tn_array_list *s, const char *name) {
    if (!s || !name) { tn__err(TN_ERR_NULL, "tn_array_list_get: %s is NULL", s ? "name" : "set"); return NULL; }
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) return s->arrays[i];
    tn__err(TN_ERR_INVALID, "tn_array_list_get: no array named '%s' among the set's %d", name, s->n);
    return NULL;
}

typedef tn_result (*tn__parse_list_fn)(const char *who, const tn__src *s, tn_array_list *out);

/* Loads a set from the file path, or from memory. */
static tn_result tn__load_list(const char *who, bool file, const char *path, const void *data, size_t size, tn_array_list *out,
                              tn__parse_list_fn parse) {
    if (!out) return tn__err(TN_ERR_NULL, "%s: out is NULL", who);
    memset(out, 0, sizeof *out);
    tn__src s;
    char where[512];
    tn_result r = file ? tn__src_open(who, path, &s, where, sizeof where) : tn__src_mem(who, data, size, &s);
    if (r != TN_OK) return r;
    r = parse(who, &s, out);
    if (s.f) fclose(s.f);
    if (r != TN_OK) tn_array_list_free(out);
    return r;
}

/* ---- inflate (RFC 1951), after zlib's contrib/puff: canonical Huffman codes
   decoded a bit at a time ---- */

typedef struct tn__inflate {
    const uint8_t *in;
    size_t in_n, in_pos;
    uint8_t *out;
    size_t out_n, out_pos;
    uint32_t bitbuf;
    int bitcnt;
    bool eof;                /* read past the input's end */
} tn__inflate;
typedef struct tn__huff { short count[16], symbol[288]; } tn__huff;

static int tn__inf_bits(tn__inflate *s, int need) {
    uint32_t v = s->bitbuf;
    while (s->bitcnt < need) {
        if (s->in_pos == s->in_n) { s->eof = true; return 0; }
        v |= (uint32_t)s->in[s->in_pos++] << s->bitcnt;
        s->bitcnt += 8;
    }
    s->bitbuf = v >> need;
    s->bitcnt -= need;
    return (int)(v & ((1u << need) - 1));
}

/* Counts and symbols of the code with these lengths; returns 0 when the code
   is complete, > 0 incomplete, < 0 over-subscribed. */
static int tn__huff_build(tn__huff *h, const short *length, int n) {
    short offs[16];
    memset(h->count, 0, sizeof h->count);
    for (int i = 0; i < n; i++) h->count[length[i]]++;
    if (h->count[0] == n) return 0;
    int left = 1;
    for (int len = 1; len < 16; len++) {
        left = left * 2 - h->count[len];
        if (left < 0) return left;
    }
    offs[1] = 0;
    for (int len = 1; len < 15; len++) offs[len + 1] = (short)(offs[len] + h->count[len]);
    for (int i = 0; i < n; i++)
        if (length[i]) h->symbol[offs[length[i]]++] = (short)i;
    return left;
}

static int tn__huff_decode(tn__inflate *s, const tn__huff *h) {
    int code = 0, first = 0, index = 0;
    for (int len = 1; len < 16; len++) {
        code |= tn__inf_bits(s, 1);
        int count = h->count[len];
        if (code - count < first) return h->symbol[index + (code - first)];
        index += count;
        first = (first + count) << 1;
        code <<= 1;
    }
    return -1;
}

static const char *tn__inf_codes(tn__inflate *s, const tn__huff *lencode, const tn__huff *distcode) {
    static const short lbase[29] = { 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99,
                                     115, 131, 163, 195, 227, 258 };
    static const short lext[29] = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0 };
    static const short dbase[30] = { 1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025,
                                     1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577 };
    static const short dext[30] = { 0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13 };
    for (;;) {
        int sym = tn__huff_decode(s, lencode);
        if (s->eof) return "the compressed data ends early";
        if (sym < 0) return "an invalid literal/length code";
        if (sym == 256) return NULL;
        if (sym < 256) {
            if (s->out_pos == s->out_n) return "it holds more bytes than the member's size";
            s->out[s->out_pos++] = (uint8_t)sym;
            continue;
        }
        sym -= 257;
        if (sym >= 29) return "an invalid length symbol";
        size_t len = (size_t)(lbase[sym] + tn__inf_bits(s, lext[sym]));
        int dsym = tn__huff_decode(s, distcode);
        if (dsym < 0 || dsym >= 30) return "an invalid distance symbol";
        size_t dist = (size_t)(dbase[dsym] + tn__inf_bits(s, dext[dsym]));
        if (s->eof) return "the compressed data ends early";
        if (dist > s->out_pos) return "a distance too far back";
        if (len > s->out_n - s->out_pos) return "it holds more bytes than the member's size";
        for (size_t i = 0; i < len; i++, s->out_pos++) s->out[s->out_pos] = s->out[s->out_pos - dist];
    }
}

static const char *tn__inf_fixed(tn__inflate *s) {
    tn__huff lencode, distcode;
    short lengths[288];
    int i = 0;
    for (; i < 144; i++) lengths[i] = 8;
    for (; i < 256; i++) lengths[i] = 9;
    for (; i < 280; i++) lengths[i] = 7;
    for (; i < 288; i++) lengths[i] = 8;
    tn__huff_build(&lencode, lengths, 288);
    for (i = 0; i < 30; i++) lengths[i] = 5;
    tn__huff_build(&distcode, lengths, 30);
    return tn__inf_codes(s, &lencode, &distcode);
}

static const char *tn__inf_dynamic(tn__inflate *s) {
    static const short order[19] = { 16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15 };
    short lengths[320];
    tn__huff lencode, distcode;
    int nlen = tn__inf_bits(s, 5) + 257, ndist = tn__inf_bits(s, 5) + 1, ncode = tn__inf_bits(s, 4) + 4;
    if (s->eof) return "the compressed data ends early";
    if (nlen > 286 || ndist > 30) return "a dynamic block with too many codes";
    int i = 0;
    for (; i < ncode; i++) lengths[order[i]] = (short)tn__inf_bits(s, 3);
    for (; i < 19; i++) lengths[order[i]] = 0;
    if (tn__huff_build(&lencode, lengths, 19) != 0) return "an incomplete code-length code";
    for (i = 0; i < nlen + ndist;) {
        int sym = tn__huff_decode(s, &lencode);
        if (s->eof) return "the compressed data ends early";
        if (sym < 0) return "an invalid code-length code";
        if (sym < 16) { lengths[i++] = (short)sym; continue; }
        short len = 0;
        int rep;
        if (sym == 16) {
            if (i == 0) return "a repeat with no length before it";
            len = lengths[i - 1];
            rep = 3 + tn__inf_bits(s, 2);
        } else rep = sym == 17 ? 3 + tn__inf_bits(s, 3) : 11 + tn__inf_bits(s, 7);
        if (i + rep > nlen + ndist) return "too many code lengths";
        while (rep--) lengths[i++] = len;
    }
    if (lengths[256] == 0) return "no end-of-block code";
    int err = tn__huff_build(&lencode, lengths, nlen);
    if (err < 0 || (err > 0 && nlen - lencode.count[0] != 1)) return "an incomplete literal/length code";
    err = tn__huff_build(&distcode, lengths + nlen, ndist);
    if (err < 0 || (err > 0 && ndist - distcode.count[0] != 1)) return "an incomplete distance code";
    return tn__inf_codes(s, &lencode, &distcode);
}

/* Inflates in[in_n] into exactly out[out_n]; NULL, or what is wrong. */
static const char *tn__inflate_all(const uint8_t *in, size_t in_n, uint8_t *out, size_t out_n) {
    tn__inflate s;
    memset(&s, 0, sizeof s);
    s.in = in, s.in_n = in_n, s.out = out, s.out_n = out_n;
    int last;
    do {
        last = tn__inf_bits(&s, 1);
        int type = tn__inf_bits(&s, 2);
        if (s.eof) return "the compressed data ends early";
        const char *bad;
        if (type == 0) {
            s.bitbuf = 0, s.bitcnt = 0;
            if (s.in_n - s.in_pos < 4) return "the compressed data ends early";
            size_t len = (size_t)tn__le(s.in + s.in_pos, 2), nlen = (size_t)tn__le(s.in + s.in_pos + 2, 2);
            s.in_pos += 4;
            if (len != (~nlen & 0xffff)) return "a stored block's length check fails";
            if (s.in_n - s.in_pos < len) return "the compressed data ends early";
            if (s.out_n - s.out_pos < len) return "it holds more bytes than the member's size";
            memcpy(s.out + s.out_pos, s.in + s.in_pos, len);
            s.in_pos += len, s.out_pos += len;
            bad = NULL;
        } else if (type == 1) bad = tn__inf_fixed(&s);
        else if (type == 2) bad = tn__inf_dynamic(&s);
        else bad = "an invalid block type";
        if (bad) return bad;
    } while (!last);
    return s.out_pos == s.out_n ? NULL : "it holds fewer bytes than the member's size";
}

/* ---- .npz: a zip of .npy members ---- */

static tn_result tn__npz_parse(const char *who, const tn__src *s, tn_array_list *out) {
    /* the end of central directory record: 22 bytes and a comment of at most 65535 */
    uint64_t tail_n = s->len < 65557 ? s->len : 65557, tail_off = s->len - tail_n;
    uint8_t *tail = (uint8_t *)tn__malloc((size_t)tail_n);
    if (!tail) return tn__err(TN_ERR_OOM, "%s: %s: out of memory", who, s->where);
    if (!tn__src_read(s, tail_off, tail, tail_n)) { tn__free(tail); return tn__err(TN_ERR_INVALID, "%s: %s: read failed", who, s->where); }
    int64_t e = (int64_t)tail_n - 22;
    while (e >= 0 && memcmp(tail + e, "PK\5\6", 4) != 0) e--;
    if (e < 0) {
        tn__free(tail);
        return tn__err(TN_ERR_INVALID, "%s: %s: not a zip file (no end of central directory record)", who, s->where);
    }
    uint64_t count = tn__le(tail + e + 10, 2), cd_size = tn__le(tail + e + 12, 4), cd_off = tn__le(tail + e + 16, 4);
    uint64_t eocd = tail_off + (uint64_t)e;
    tn__free(tail);
    if (count == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {   /* ZIP64 */
        uint8_t loc[20], rec[56];
        if (eocd < 20 || !tn__src_read(s, eocd - 20, loc, 20) || memcmp(loc, "PK\6\7", 4) != 0 ||
            !tn__src_read(s, tn__le(loc + 8, 8), rec, 56) || memcmp(rec, "PK\6\6", 4) != 0)
            return tn__err(TN_ERR_INVALID, "%s: %s: a ZIP64 end of central directory record is missing or damaged", who, s->where);
        count = tn__le(rec + 32, 8), cd_size = tn__le(rec + 40, 8), cd_off = tn__le(rec + 48, 8);
    }
    if (cd_off > s->len || cd_size > s->len - cd_off)
        return tn__err(TN_ERR_INVALID, "%s: %s is truncated: the central directory (%llu bytes at %llu) lies past the end (%llu bytes)",
                       who, s->where, (unsigned long long)cd_size, (unsigned long long)cd_off, (unsigned long long)s->len);
    uint8_t *cd = (uint8_t *)tn__malloc((size_t)cd_size);
    if (!cd) return tn__err(TN_ERR_OOM, "%s: %s: out of memory for the central directory", who, s->where);
    if (!tn__src_read(s, cd_off, cd, cd_size)) { tn__free(cd); return tn__err(TN_ERR_INVALID, "%s: %s: read failed", who, s->where); }
    tn_result r = TN_OK;
    uint64_t p = 0;
    for (uint64_t k = 0; k < count && r == TN_OK; k++) {
        if (cd_size - p < 46 || memcmp(cd + p, "PK\1\2", 4) != 0) {
            r = tn__err(TN_ERR_INVALID, "%s: %s: central directory entry %llu is damaged", who, s->where, (unsigned long long)k);
            break;
        }
        const uint8_t *c = cd + p;
        unsigned flags = (unsigned)tn__le(c + 8, 2), method = (unsigned)tn__le(c + 10, 2);
        uint32_t crc = (uint32_t)tn__le(c + 16, 4);
        uint64_t csize = tn__le(c + 20, 4), usize = tn__le(c + 24, 4), off = tn__le(c + 42, 4);
        size_t nlen = (size_t)tn__le(c + 28, 2), xlen = (size_t)tn__le(c + 30, 2), clen = (size_t)tn__le(c + 32, 2);
        if (cd_size - p - 46 < nlen + xlen + clen) {
            r = tn__err(TN_ERR_INVALID, "%s: %s: central directory entry %llu is damaged", who, s->where, (unsigned long long)k);
            break;
        }
        const char *name = (const char *)c + 46;
        for (size_t x = 0; x + 4 <= xlen;) {   /* the ZIP64 extra field: the sizes and offset that did not fit */
            const uint8_t *f = c + 46 + nlen + x;
            size_t id = (size_t)tn__le(f, 2), fl = (size_t)tn__le(f + 2, 2), q = 4;
            if (x + 4 + fl > xlen) break;
            if (id == 1) {
                if (usize == 0xffffffffu && q + 8 <= 4 + fl) usize = tn__le(f + q, 8), q += 8;
                if (csize == 0xffffffffu && q + 8 <= 4 + fl) csize = tn__le(f + q, 8), q += 8;
                if (off == 0xffffffffu && q + 8 <= 4 + fl) off = tn__le(f + q, 8);
            }
            x += 4 + fl;
        }
        p += 46 + nlen + xlen + clen;
        if (nlen < 4 || memcmp(name + nlen - 4, ".npy", 4) != 0) continue;
        char where[600];
        snprintf(where, sizeof where, "%s member '%.*s'", s->where, (int)(nlen > 256 ? 256 : nlen), name);
        if (flags & 1) { r = tn__err(TN_ERR_UNSUPPORTED, "%s: %s is encrypted", who, where); break; }
        if (method != 0 && method != 8) {
            r = tn__err(TN_ERR_UNSUPPORTED, "%s: %s: compression method %u (this reads 0, stored, and 8, deflate)", who, where, method);
            break;
        }
        uint8_t lh[30];
        if (!tn__src_read(s, off, lh, 30) || memcmp(lh, "PK\3\4", 4) != 0) {
            r = tn__err(TN_ERR_INVALID, "%s: %s: its local header at byte %llu is missing", who, where, (unsigned long long)off);
            break;
        }
        uint64_t data_off = off + 30 + tn__le(lh + 26, 2) + tn__le(lh + 28, 2);
        if (method == 0 && csize != usize) {
            r = tn__err(TN_ERR_INVALID, "%s: %s: stored, but its sizes differ (%llu, %llu)", who, where,
                        (unsigned long long)csize, (unsigned long long)usize);
            break;
        }
        if (data_off > s->len || csize > s->len - data_off) {
            r = tn__err(TN_ERR_INVALID, "%s: %s is truncated: its %llu bytes at byte %llu lie past the end (%llu bytes)", who,
                        where, (unsigned long long)csize, (unsigned long long)data_off, (unsigned long long)s->len);
            break;
        }
        if (usize > (uint64_t)SIZE_MAX - 1) { r = tn__err(TN_ERR_OOM, "%s: %s: too large", who, where); break; }
        uint8_t *comp = (uint8_t *)tn__malloc((size_t)csize);
        uint8_t *data = method == 8 ? (uint8_t *)tn__malloc((size_t)usize) : comp;
        if (!comp || !data) {
            if (data != comp) tn__free(data);
            tn__free(comp);
            r = tn__err(TN_ERR_OOM, "%s: %s: out of memory for %llu bytes", who, where, (unsigned long long)usize);
            break;
        }
        const char *bad = !tn__src_read(s, data_off, comp, csize) ? "reading it failed"
                        : method == 8 ? tn__inflate_all(comp, (size_t)csize, data, (size_t)usize) : NULL;
        if (bad) r = tn__err(TN_ERR_INVALID, "%s: %s: corrupt deflate data (%s)", who, where, bad);
        else if (tn__crc32(0, data, (size_t)usize) != crc)
            r = tn__err(TN_ERR_INVALID, "%s: %s: CRC-32 mismatch (the directory says %08x, the data has %08x)", who, where,
                        (unsigned)crc, (unsigned)tn__crc32(0, data, (size_t)usize));
        if (r == TN_OK) {
            tn__src m;
            tn__src_mem(who, data, (size_t)usize, &m);
            m.where = where;
            tn_array *a = tn__npy_parse(who, &m);
            r = a ? tn__list_add(who, out, name, nlen - 4, a) : tn_last_result();
        }
        if (data != comp) tn__free(data);
        tn__free(comp);
    }
    tn__free(cd);
    return r;
}

static tn_result tn__npz_emit(const char *who, tn__sink *s, const tn__save_args *a) {
    uint64_t *entry = (uint64_t *)tn__calloc((size_t)a->n + 1, 3 * sizeof(uint64_t));   /* offset, size, crc */
    if (!entry) return tn__err(TN_ERR_OOM, "%s: out of memory", who);
    tn_result r = TN_OK;
    for (int i = 0; i < a->n && r == TN_OK && !s->failed; i++) {
        tn_array *h = tn__host_c_order(a->arrays[i]);
        if (!h) { r = tn__err_in(who, tn_last_result()); break; }
        tn__sink count;
        memset(&count, 0, sizeof count);
        count.crc_on = true;
        tn__npy_put(&count, h);
        size_t nlen = strlen(a->names[i]) + 4;
        if (count.n >= 0xffffffffu || s->n >= 0xffffffffu || a->n > 0xfffe)
            r = tn__err(TN_ERR_UNSUPPORTED, "%s: array '%s' (%llu bytes at byte %llu of %d arrays) needs ZIP64, which this "
                        "does not write (the limits: 4 GiB, 65534 arrays)", who, a->names[i], (unsigned long long)count.n,
                        (unsigned long long)s->n, a->n);
        else {
            entry[3 * i] = s->n, entry[3 * i + 1] = count.n, entry[3 * i + 2] = count.crc;
            tn__sink_le(s, 0x04034b50u, 4);
            tn__sink_le(s, 20, 2);                         /* version needed: 2.0 */
            tn__sink_le(s, 0, 2);                          /* flags */
            tn__sink_le(s, 0, 2);                          /* stored */
            tn__sink_le(s, 0, 2);                          /* time 00:00 */
            tn__sink_le(s, 0x21, 2);                       /* date 1980-01-01 */
            tn__sink_le(s, count.crc, 4);
            tn__sink_le(s, count.n, 4);
            tn__sink_le(s, count.n, 4);
            tn__sink_le(s, nlen, 2);
            tn__sink_le(s, 0, 2);
            tn__sink_put(s, a->names[i], nlen - 4);
            tn__sink_put(s, ".npy", 4);
            tn__npy_put(s, h);
        }
        tn_array_free(h);
    }
    uint64_t cd_off = s->n;
    for (int i = 0; i < a->n && r == TN_OK; i++) {
        size_t nlen = strlen(a->names[i]) + 4;
        tn__sink_le(s, 0x02014b50u, 4);
        tn__sink_le(s, 20, 2);                             /* made by: 2.0 */
        tn__sink_le(s, 20, 2);
        tn__sink_le(s, 0, 2);
        tn__sink_le(s, 0, 2);
        tn__sink_le(s, 0, 2);
        tn__sink_le(s, 0x21, 2);
        tn__sink_le(s, entry[3 * i + 2], 4);
        tn__sink_le(s, entry[3 * i + 1], 4);
        tn__sink_le(s, entry[3 * i + 1], 4);
        tn__sink_le(s, nlen, 2);
        tn__sink_le(s, 0, 2);                              /* extra */
        tn__sink_le(s, 0, 2);                              /* comment */
        tn__sink_le(s, 0, 2);                              /* disk */
        tn__sink_le(s, 0, 2);                              /* internal attributes */
        tn__sink_le(s, 0, 4);                              /* external attributes */
        tn__sink_le(s, entry[3 * i], 4);
        tn__sink_put(s, a->names[i], nlen - 4);
        tn__sink_put(s, ".npy", 4);
    }
    if (r == TN_OK && s->n >= 0xffffffffu)
        r = tn__err(TN_ERR_UNSUPPORTED, "%s: the file passes 4 GiB and needs ZIP64, which this does not write", who);
    if (r == TN_OK) {
        uint64_t cd_size = s->n - cd_off;
        tn__sink_le(s, 0x06054b50u, 4);
        tn__sink_le(s, 0, 4);                              /* disks */
        tn__sink_le(s, (uint64_t)a->n, 2);
        tn__sink_le(s, (uint64_t)a->n, 2);
        tn__sink_le(s, cd_size, 4);
        tn__sink_le(s, cd_off, 4);
        tn__sink_le(s, 0, 2);
    }
    tn__free(entry);
    return r;
}

TN_API tn_result tn_save_npz(const char *path, const char *const *names, const tn_array *const *arrays, int n) {
    tn__save_args args = { names, arrays, n, NULL };
    if (tn__save_check("tn_save_npz", &args, true) != TN_OK) return tn_last_result();
    return tn__save_file("tn_save_npz", path, tn__npz_emit, &args);
}

TN_API tn_result tn_save_npz_mem(const char *const *names, const tn_array *const *arrays, int n, void **data, size_t *size) {
    tn__save_args args = { names, arrays, n, NULL };
    if (tn__save_check("tn_save_npz_mem", &args, true) != TN_OK) return tn_last_result();
    return tn__save_mem("tn_save_npz_mem", data, size, tn__npz_emit, &args);
}

TN_API tn_result tn_load_npz(const char *path, tn_array_list *out) {
    return tn__load_list("tn_load_npz", true, path, NULL, 0, out, tn__npz_parse);
}
TN_API tn_result tn_load_npz_mem(const void *data, size_t size, tn_array_list *out) {
    return tn__load_list("tn_load_npz_mem", false, NULL, data, size, out, tn__npz_parse);
}

/* ---- safetensors: an 8-byte little-endian header size, a JSON header
   {"name": {"dtype", "shape", "data_offsets"}, "__metadata__": {...}}, the data ---- */

typedef struct tn__json { const char *s; size_t i, n; } tn__json;
static void tn__js_ws(tn__json *j) {
    while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' || j->s[j->i] == '\r')) j->i++;
}
static bool tn__js_char(tn__json *j, char c) {
    tn__js_ws(j);
    if (j->i < j->n && j->s[j->i] == c) { j->i++; return true; }
    return false;
}
/* A string into out (NULL: skipped), \u escapes as UTF-8. */
static bool tn__js_string(tn__json *j, tn__sb *out) {
    if (!tn__js_char(j, '"')) return false;
    while (j->i < j->n && j->s[j->i] != '"') {
        char c = j->s[j->i++];
        if ((unsigned char)c < 0x20) return false;
        if (c != '\\') { if (out) tn__sb_putn(out, &c, 1); continue; }
        if (j->i >= j->n) return false;
        c = j->s[j->i++];
        const char *esc = strchr("\"\\/bfnrt", c);
        if (esc && c) { char r = "\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrt"]; if (out) tn__sb_putn(out, &r, 1); continue; }
        if (c != 'u' || j->n - j->i < 4) return false;
        unsigned cp = 0;
        for (int k = 0; k < 4; k++) {
            char h = j->s[j->i++];
            int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (v < 0) return false;
            cp = cp * 16 + (unsigned)v;
        }
        char u[3];
        int k = cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;   /* a surrogate half is kept as its own 3 bytes */
        if (k == 1) u[0] = (char)cp;
        else if (k == 2) u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3f));
        else u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | ((cp >> 6) & 0x3f)), u[2] = (char)(0x80 | (cp & 0x3f));
        if (out) tn__sb_putn(out, u, (size_t)k);
    }
    return j->i++ < j->n;
}
static bool tn__js_int(tn__json *j, int64_t *v) {
    tn__js_ws(j);
    uint64_t x = 0;
    size_t i0 = j->i;
    while (j->i < j->n && j->s[j->i] >= '0' && j->s[j->i] <= '9') {
        unsigned d = (unsigned)(j->s[j->i++] - '0');
        if (x > ((uint64_t)INT64_MAX - d) / 10) return false;
        x = x * 10 + d;
    }
    *v = (int64_t)x;
    return j->i > i0;
}
/* Skips any value (nested at most 64 deep). */
static bool tn__js_skip(tn__json *j, int depth) {
    tn__js_ws(j);
    if (j->i >= j->n || depth > 64) return false;
    char c = j->s[j->i];
    if (c == '"') return tn__js_string(j, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->i++;
        if (tn__js_char(j, close)) return true;
        do {
            if (c == '{' && (!tn__js_string(j, NULL) || !tn__js_char(j, ':'))) return false;
            if (!tn__js_skip(j, depth + 1)) return false;
        } while (tn__js_char(j, ','));
        return tn__js_char(j, close);
    }
    size_t i0 = j->i;
    while (j->i < j->n && strchr("+-.0123456789eEtruefalsn", j->s[j->i]) && j->s[j->i]) j->i++;
    return j->i > i0;
}
/* A JSON object whose values are all strings (safetensors' __metadata__). */
static bool tn__js_string_map(tn__json *j) {
    if (!tn__js_char(j, '{')) return false;
    if (tn__js_char(j, '}')) return true;
    do {
        if (!tn__js_string(j, NULL) || !tn__js_char(j, ':') || !tn__js_string(j, NULL)) return false;
    } while (tn__js_char(j, ','));
    return tn__js_char(j, '}');
}

/* One tensor's entry: {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]} */
static tn_result tn__st_entry(const char *who, const tn__src *s, tn__json *j, const char *name, uint64_t data_start,
                              tn_array_list *out) {
    char dtype[32] = "";
    int ndim = -1, noff = -1;
    int64_t shape[TN_MAX_DIMS], offs[2];
    const char *bad = NULL;
    tn_result code = TN_ERR_INVALID;
    tn__sb key;
    memset(&key, 0, sizeof key);
    if (!tn__js_char(j, '{')) bad = "it is not an object";
    while (!bad && !tn__js_char(j, '}')) {
        key.n = 0;
        if (!tn__js_string(j, &key) || !tn__js_char(j, ':')) { bad = "a key is malformed"; break; }
        const char *k = key.s ? key.s : "";
        if (!strcmp(k, "dtype")) {
            tn__sb v;
            memset(&v, 0, sizeof v);
            if (!tn__js_string(j, &v)) bad = "'dtype' is not a string";
            else snprintf(dtype, sizeof dtype, "%s", v.s ? v.s : "");
            tn__free(v.s);
        } else if (!strcmp(k, "shape") || !strcmp(k, "data_offsets")) {
            bool sh = k[0] == 's';
            int64_t *dst = sh ? shape : offs;
            int cap = sh ? TN_MAX_DIMS : 2, m = 0;
            if (!tn__js_char(j, '[')) { bad = sh ? "'shape' is not a list" : "'data_offsets' is not a list"; break; }
            if (!tn__js_char(j, ']')) {
                do {
                    int64_t v;
                    if (!tn__js_int(j, &v)) { bad = "a list holds something other than non-negative ints that fit 64 bits"; code = sh ? TN_ERR_SHAPE : code; break; }
                    if (m == cap) { bad = sh ? "'shape' has more dims than TN_MAX_DIMS (8)" : "'data_offsets' has more than 2 ints"; code = sh ? TN_ERR_SHAPE : code; break; }
                    dst[m++] = v;
                } while (tn__js_char(j, ','));
                if (!bad && !tn__js_char(j, ']')) bad = "a list is malformed";
            }
            if (sh) ndim = m;
            else noff = m;
        } else if (!tn__js_skip(j, 0)) bad = "a value is malformed";
        if (!bad && !tn__js_char(j, ',')) {
            if (!tn__js_char(j, '}')) bad = "entries are not separated by commas";
            break;
        }
    }
    tn__free(key.s);
    if (!bad && (!dtype[0] || ndim < 0 || noff != 2)) bad = "it lacks 'dtype', 'shape' or 'data_offsets' [begin, end]";
    if (bad) return tn__err(code, "%s: %s: tensor '%s': %s", who, s->where, name, bad);
    const tn__ftype *ft = NULL;
    for (int i = 0; i < TN__N_FTYPES; i++)
        if (!strcmp(tn__ftypes[i].st, dtype)) ft = &tn__ftypes[i];
    if (!ft && !strcmp(dtype, "BF16"))
        return tn__err(TN_ERR_DTYPE, "%s: %s: tensor '%s' has dtype BF16 (bfloat16), which the library does not have: save "
                       "it as F32 or F16", who, s->where, name);
    if (!ft)
        return tn__err(TN_ERR_DTYPE, "%s: %s: tensor '%s' has dtype '%s', which is not supported: this reads BOOL, I8..I64, "
                       "U8..U64, F16, F32, F64", who, s->where, name, dtype);
    char sb[128];
    if (!tn__extent_fits(ndim, shape))
        return tn__err(TN_ERR_SHAPE, "%s: %s: tensor '%s': shape %s overflows (its byte size does not fit 64 bits)", who,
                       s->where, name, tn__shape_str(ndim, shape, sb));
    uint64_t bytes = (uint64_t)tn__shape_size(ndim, shape) * (uint64_t)ft->size;
    if (offs[0] > offs[1] || (uint64_t)(offs[1] - offs[0]) != bytes)
        return tn__err(TN_ERR_INVALID, "%s: %s: tensor '%s': data_offsets [%lld, %lld] do not span the %llu bytes of %s %s",
                       who, s->where, name, (long long)offs[0], (long long)offs[1], (unsigned long long)bytes, dtype,
                       tn__shape_str(ndim, shape, sb));
    tn_array *a = tn__load_raw(who, s, data_start + (uint64_t)offs[0], ft, !tn__host_little(), false, ndim, shape, name);
    return a ? tn__list_add(who, out, name, strlen(name), a) : tn_last_result();
}

static tn_result tn__st_parse(const char *who, const tn__src *s, tn_array_list *out) {
    uint8_t pre[8];
    if (!tn__src_read(s, 0, pre, 8))
        return tn__err(TN_ERR_INVALID, "%s: %s is truncated: %llu bytes, shorter than the 8-byte header size", who, s->where,
                       (unsigned long long)s->len);
    uint64_t hlen = tn__le(pre, 8);
    if (hlen > s->len - 8)
        return tn__err(TN_ERR_INVALID, "%s: %s is truncated: the header size is %llu bytes, the input has %llu after it (not "
                       "a safetensors file?)", who, s->where, (unsigned long long)hlen, (unsigned long long)(s->len - 8));
    char *text = (char *)tn__malloc((size_t)hlen + 1);
    if (!text) return tn__err(TN_ERR_OOM, "%s: %s: out of memory for a %llu-byte header", who, s->where, (unsigned long long)hlen);
    if (!tn__src_read(s, 8, text, hlen)) { tn__free(text); return tn__err(TN_ERR_INVALID, "%s: %s: reading the header failed", who, s->where); }
    text[hlen] = 0;
    tn__json j = { text, 0, (size_t)hlen };
    tn__sb name;
    memset(&name, 0, sizeof name);
    tn_result r = TN_OK;
    if (!tn__js_char(&j, '{')) r = tn__err(TN_ERR_INVALID, "%s: %s: the header is not a JSON object (not a safetensors file?)", who, s->where);
    while (r == TN_OK && !tn__js_char(&j, '}')) {
        name.n = 0;
        if (!tn__js_string(&j, &name) || !tn__js_char(&j, ':') || name.oom) {
            r = tn__err(TN_ERR_INVALID, "%s: %s: malformed JSON header near byte %zu", who, s->where, j.i);
            break;
        }
        const char *nm = name.s ? name.s : "";
        if (!strcmp(nm, "__metadata__")) {
            tn__js_ws(&j);
            size_t b = j.i;
            if (!tn__js_string_map(&j)) {
                r = tn__err(TN_ERR_INVALID, "%s: %s: __metadata__ is not a JSON object of strings", who, s->where);
                break;
            }
            tn__free(out->metadata);
            out->metadata = (char *)tn__malloc(j.i - b + 1);
            if (!out->metadata) { r = tn__err(TN_ERR_OOM, "%s: out of memory", who); break; }
            memcpy(out->metadata, text + b, j.i - b);
            out->metadata[j.i - b] = 0;
        } else {
            for (int i = 0; i < out->n && r == TN_OK; i++)
                if (!strcmp(out->names[i], nm)) r = tn__err(TN_ERR_INVALID, "%s: %s: tensor '%s' appears twice", who, s->where, nm);
            if (r == TN_OK) r = tn__st_entry(who, s, &j, nm, 8 + hlen, out);
        }
        if (r == TN_OK && !tn__js_char(&j, ',') && !tn__js_char(&j, '}')) {
            r = tn__err(TN_ERR_INVALID, "%s: %s: malformed JSON header near byte %zu", who, s->where, j.i);
            break;
        } else if (r == TN_OK && j.s[j.i - 1] == '}') break;
    }
    tn__free(name.s);
    tn__free(text);
    return r;
}

static void tn__json_put_string(tn__sink *s, const char *str) {
    tn__sink_put(s, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
        char e[8];
        if (*p == '"' || *p == '\\') { e[0] = '\\', e[1] = (char)*p; tn__sink_put(s, e, 2); }
        else if (*p < 0x20) { snprintf(e, sizeof e, "\\u%04x", *p); tn__sink_put(s, e, 6); }
        else tn__sink_put(s, p, 1);
    }
    tn__sink_put(s, "\"", 1);
}

/* The header, or (s NULL) its length. */
static void tn__st_header(tn__sink *s, const tn__save_args *a) {
    tn__sink_put(s, "{", 1);
    if (a->metadata) {
        tn__sink_put(s, "\"__metadata__\":", 15);
        tn__sink_put(s, a->metadata, strlen(a->metadata));
    }
    uint64_t off = 0;
    for (int i = 0; i < a->n; i++) {
        const tn_array *x = a->arrays[i];
        char buf[64];
        if (i || a->metadata) tn__sink_put(s, ",", 1);
        tn__json_put_string(s, a->names[i]);
        tn__sink_put(s, ":{\"dtype\":\"", 11);
        tn__sink_put(s, tn__ftype_of(x->dtype)->st, strlen(tn__ftype_of(x->dtype)->st));
        tn__sink_put(s, "\",\"shape\":[", 11);
        for (int d = 0; d < x->ndim; d++) tn__sink_put(s, buf, (size_t)snprintf(buf, sizeof buf, "%s%lld", d ? "," : "", (long long)x->shape[d]));
        uint64_t end = off + tn_array_nbytes(x);
        tn__sink_put(s, buf, (size_t)snprintf(buf, sizeof buf, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)end));
        off = end;
    }
    tn__sink_put(s, "}", 1);
}

static tn_result tn__st_emit(const char *who, tn__sink *s, const tn__save_args *a) {
    if (!tn__host_little())
        return tn__err(TN_ERR_UNSUPPORTED, "%s: safetensors is little-endian; this host is big-endian", who);
    tn__sink count;
    memset(&count, 0, sizeof count);
    tn__st_header(&count, a);
    uint64_t pad = (8 - count.n % 8) % 8;
    tn__sink_le(s, count.n + pad, 8);
    tn__st_header(s, a);
    for (uint64_t i = 0; i < pad; i++) tn__sink_put(s, " ", 1);
    for (int i = 0; i < a->n && !s->failed; i++) {
        tn_array *h = tn__host_c_order(a->arrays[i]);
        if (!h) return tn__err_in(who, tn_last_result());
        tn__sink_put(s, h->data, tn_array_nbytes(h));
        tn_array_free(h);
    }
    return TN_OK;
}

static tn_result tn__st_check(const char *who, const tn__save_args *a) {
    if (tn__save_check(who, a, true) != TN_OK) return tn_last_result();
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->names[i], "__metadata__")) return tn__err(TN_ERR_INVALID, "%s: names[%d] is __metadata__, which safetensors reserves", who, i);
    if (a->metadata) {
        tn__json j = { a->metadata, 0, strlen(a->metadata) };
        if (!tn__js_string_map(&j) || (tn__js_ws(&j), j.i != j.n))
            return tn__err(TN_ERR_INVALID, "%s: metadata is not a JSON object of strings: %.100s", who, a->metadata);
    }
    return TN_OK;
}

TN_API tn_result tn_save_safetensors(const char *path, const char *const *names, const tn_array *const *arrays, int n,
                                     const char *metadata) {
    tn__save_args args = { names, arrays, n, metadata };
    if (tn__st_check("tn_save_safetensors", &args) != TN_OK) return tn_last_result();
    return tn__save_file("tn_save_safetensors", path, tn__st_emit, &args);
}

TN_API tn_result tn_save_safetensors_mem(const char *const *names, const tn_array *const *arrays, int n, const char *metadata,
                                         void **data, size_t *size) {
    tn__save_args args = { names, arrays, n, metadata };
    if (tn__st_check("tn_save_safetensors_mem", &args) != TN_OK) return tn_last_result();
    return tn__save_mem("tn_save_safetensors_mem", data, size, tn__st_emit, &args);
}

TN_API tn_result tn_load_safetensors(const char *path, tn_array_list *out) {
    return tn__load_list("tn_load_safetensors", true, path, NULL, 0, out, tn__st_parse);
}
TN_API tn_result tn_load_safetensors_mem(const void *data, size_t size, tn_array_list *out) {
    return tn__load_list("tn_load_safetensors_mem", false, NULL, data, size, out, tn__st_parse);
}

/* >>dlpack: DLPack export and import (the >>api_dlpack section). An export
   is one block: the managed tensor, then its shape and strides; its
   manager_ctx is a view of the array, which holds the buffer. An import
   wraps the memory in a buffer that does not own it and whose last release
   calls the managed tensor's deleter. Versioned (1.x) and legacy managed
   tensors share the code: they differ in where the DLTensor sits, the
   version and the deleter's type. */

#if defined(__LP64__) && !defined(__cplusplus)
TN__STATIC_ASSERT(sizeof(DLTensor) == 48 && offsetof(DLTensor, byte_offset) == 40 &&
               offsetof(DLManagedTensorVersioned, dl_tensor) == 32 && sizeof(DLDataType) == 4 && sizeof(DLDevice) == 8 &&
               offsetof(DLManagedTensor, dl_tensor) == 0 && offsetof(DLManagedTensor, deleter) == 56,
               "DLPack's layout");
#endif

typedef struct tn__dlpack_export {
    union { DLManagedTensorVersioned v; DLManagedTensor u; } mt;   /* first: the deleter frees the block through it */
    int64_t shape[TN_MAX_DIMS], strides[TN_MAX_DIMS];
} tn__dlpack_export;

static void tn__dlpack_export_free(DLManagedTensorVersioned *mt) {
    if (!mt) return;
    tn_array_free((tn_array *)mt->manager_ctx);
    tn__free(mt);
}
static void tn__dlpack_export_free_unversioned(DLManagedTensor *mt) {
    if (!mt) return;
    tn_array_free((tn_array *)mt->manager_ctx);
    tn__free(mt);
}

/* DLPack's code and bits of each dtype; TN_DTYPE_NONE where none. */
static const struct { tn_dtype t; uint8_t code, bits; } tn__dl_types[] = {
    { TN_BOOL, kDLBool, 8 }, { TN_I32, kDLInt, 32 }, { TN_I64, kDLInt, 64 },
    { TN_F16, kDLFloat, 16 }, { TN_F32, kDLFloat, 32 }, { TN_F64, kDLFloat, 64 },
};

/* The export block, versioned or legacy; W names the public function. */
static tn__dlpack_export *tn__dlpack_export_make(const tn_array *a, bool versioned, const char *W) {
    if (tn__array_readable(a, W) != TN_OK) return NULL;
    int k = 0;
    while (k < (int)(sizeof tn__dl_types / sizeof tn__dl_types[0]) && tn__dl_types[k].t != a->dtype) k++;
    if (k == (int)(sizeof tn__dl_types / sizeof tn__dl_types[0])) {
        tn__err(TN_ERR_DTYPE, "%s: dtype %s has no DLPack type", W, tn_dtype_name(a->dtype));
        return NULL;
    }
    tn__dlpack_export *e = (tn__dlpack_export *)tn__calloc(1, sizeof *e);
    tn_array *v = e ? tn_array_view(a) : NULL;
    if (!v) {
        tn__free(e);
        tn__err(TN_ERR_OOM, "%s: out of memory", W);
        return NULL;
    }
    int64_t es = (int64_t)tn_dtype_size(a->dtype);
    for (int d = 0; d < a->ndim; d++) {
        e->shape[d] = a->shape[d];
        e->strides[d] = a->strides[d] / es;          /* views step by whole elements */
    }
    char *base = a->base ? (char *)a->base->data : NULL, *first = (char *)a->data;
    bool offset = base && first >= base;
    DLTensor *t = versioned ? &e->mt.v.dl_tensor : &e->mt.u.dl_tensor;
    t->data = offset ? base : first;
    t->byte_offset = offset ? (uint64_t)(first - base) : 0;
    t->device.device_type = a->device == TN_HOST ? kDLCPU : kDLCUDA;
    t->device.device_id = a->device == TN_HOST ? 0 : a->device;
    t->ndim = a->ndim;
    t->dtype.code = tn__dl_types[k].code;
    t->dtype.bits = tn__dl_types[k].bits;
    t->dtype.lanes = 1;
    t->shape = e->shape;
    t->strides = e->strides;
    if (versioned) {
        e->mt.v.version.major = 1;
        e->mt.v.version.minor = 0;
        e->mt.v.manager_ctx = v;
        e->mt.v.deleter = tn__dlpack_export_free;
    } else {
        e->mt.u.manager_ctx = v;
        e->mt.u.deleter = tn__dlpack_export_free_unversioned;
    }
    return e;
}

TN_API DLManagedTensorVersioned *tn_array_to_dlpack(const tn_array *a) {
    tn__dlpack_export *e = tn__dlpack_export_make(a, true, "tn_array_to_dlpack");
    return e ? &e->mt.v : NULL;
}

TN_API DLManagedTensor *tn_array_to_dlpack_unversioned(const tn_array *a) {
    tn__dlpack_export *e = tn__dlpack_export_make(a, false, "tn_array_to_dlpack_unversioned");
    return e ? &e->mt.u : NULL;
}

static void tn__dlpack_release(void *ctx) {
    DLManagedTensorVersioned *mt = (DLManagedTensorVersioned *)ctx;
    if (mt->deleter) mt->deleter(mt);
}
static void tn__dlpack_release_unversioned(void *ctx) {
    DLManagedTensor *mt = (DLManagedTensor *)ctx;
    if (mt->deleter) mt->deleter(mt);
}

/* Imports a versioned (mv) or legacy (mu) managed tensor, the other NULL; W names the public function. */
static tn_array *tn__dlpack_import(DLManagedTensorVersioned *mv, DLManagedTensor *mu, const char *W) {
    if (!mv && !mu) { tn__err(TN_ERR_NULL, "%s: mt is NULL", W); return NULL; }
    if (mv && mv->version.major != 1) {
        tn__err(TN_ERR_UNSUPPORTED, "%s: DLPack major version %u (this takes 1)", W, (unsigned)mv->version.major);
        return NULL;
    }
    const DLTensor *t = mv ? &mv->dl_tensor : &mu->dl_tensor;
    DLDataType dt = t->dtype;
    tn_dtype type = TN_DTYPE_NONE;
    for (size_t k = 0; k < sizeof tn__dl_types / sizeof tn__dl_types[0]; k++)
        if (tn__dl_types[k].code == dt.code && tn__dl_types[k].bits == dt.bits) type = tn__dl_types[k].t;
    if (type == TN_DTYPE_NONE || dt.lanes != 1) {
        static const char *const codes[] = { "int", "uint", "float", "opaque handle", "bfloat", "complex", "bool" };
        tn__err(TN_ERR_DTYPE, "%s: DLPack dtype %s%u%s (code %u, bits %u, lanes %u) has no dtype here: the library has bool, "
                "int32, int64, float16, float32, float64, one lane", W, dt.code < 7 ? codes[dt.code] : "code ", (unsigned)dt.bits,
                dt.lanes != 1 ? " with several lanes" : "", (unsigned)dt.code, (unsigned)dt.bits, (unsigned)dt.lanes);
        return NULL;
    }
    int device;
    switch ((int)t->device.device_type) {
    case kDLCPU: case kDLCUDAHost: case kDLCUDAManaged: device = TN_HOST; break;
    case kDLCUDA:
        device = t->device.device_id;
        if (device < 0 || !tn__get_device_ops()) {
            tn__err(TN_ERR_DEVICE, "%s: a kDLCUDA tensor on device %d, but %s", W, device,
                    device < 0 ? "that is no CUDA ordinal" : "no CUDA back end is loaded (include tensor_cuda.h; a GPU is needed)");
            return NULL;
        }
        break;
    default:
        tn__err(TN_ERR_UNSUPPORTED, "%s: DLPack device type %d (this takes kDLCPU 1, kDLCUDA 2, kDLCUDAHost 3, "
                "kDLCUDAManaged 13)", W, (int)t->device.device_type);
        return NULL;
    }
    if (t->ndim < 0 || t->ndim > TN_MAX_DIMS) {
        tn__err(TN_ERR_SHAPE, "%s: ndim %d is outside [0, TN_MAX_DIMS = %d]", W, (int)t->ndim, TN_MAX_DIMS);
        return NULL;
    }
    if (t->ndim > 0 && !t->shape) { tn__err(TN_ERR_NULL, "%s: shape is NULL for ndim %d", W, (int)t->ndim); return NULL; }
    if (tn__check_shape(W, type, t->ndim, t->shape) != TN_OK) return NULL;
    int64_t es = (int64_t)tn_dtype_size(type), strides[TN_MAX_DIMS];
    if (t->strides) {
        for (int d = 0; d < t->ndim; d++) {
            if (t->strides[d] > INT64_MAX / 16 || t->strides[d] < -(INT64_MAX / 16)) {
                tn__err(TN_ERR_SHAPE, "%s: stride %lld of dim %d overflows in bytes", W, (long long)t->strides[d], d);
                return NULL;
            }
            strides[d] = t->strides[d] * es;
        }
    } else tn__contiguous_strides(type, t->ndim, t->shape, strides);
    if (!t->data && tn__shape_size(t->ndim, t->shape) > 0) { tn__err(TN_ERR_NULL, "%s: data is NULL", W); return NULL; }
    char *first = (char *)t->data + t->byte_offset;
    tn_buffer *b = tn__buffer_borrow(first, 0, device);
    if (!b) { tn__err(TN_ERR_OOM, "%s: out of memory", W); return NULL; }
    tn_array *a = tn__array_or_err(tn__array_from_buffer(b, type, t->ndim, t->shape, strides, first, device), W);
    if (a) {
        b->on_release = mv ? tn__dlpack_release : tn__dlpack_release_unversioned;
        b->release_ctx = mv ? (void *)mv : (void *)mu;
    }
    tn__buffer_release(b);
    return a;
}

TN_API tn_array *tn_array_from_dlpack(DLManagedTensorVersioned *mt) {
    return tn__dlpack_import(mt, NULL, "tn_array_from_dlpack");
}

TN_API tn_array *tn_array_from_dlpack_unversioned(DLManagedTensor *mt) {
    return tn__dlpack_import(NULL, mt, "tn_array_from_dlpack_unversioned");
}

/* >>print: NumPy's str() of an array (numpy/core/arrayprint.py), under
   its print options (precision 8, linewidth 75, threshold 1000, edgeitems 3
   by default; tn_set_print_options). Floats print the shortest digits that
   read back as the same value of their dtype, at most `precision` after the
   point; a column switches to scientific notation when max >= 1e8,
   min < 1e-4 or max/min > 1e3 (nonzero |values|). An array of more than
   `threshold` elements shows `edgeitems` at each end of every axis longer
   than twice that. */

static pthread_mutex_t tn__print_mu = PTHREAD_MUTEX_INITIALIZER;
static tn_print_options tn__print_opts = { 8, 1000, 3, 75 };

TN_API tn_print_options tn_get_print_options(void) {
    pthread_mutex_lock(&tn__print_mu);
    tn_print_options o = tn__print_opts;
    pthread_mutex_unlock(&tn__print_mu);
    return o;
}

static tn_result tn__print_options_check(const char *who, const tn_print_options *o) {
    if (o->precision < 0 || o->precision > 100) return tn__err(TN_ERR_INVALID, "%s: precision %d is outside [0, 100]", who, o->precision);
    if (o->threshold < 0) return tn__err(TN_ERR_INVALID, "%s: threshold %lld is negative", who, (long long)o->threshold);
    if (o->edgeitems < 1) return tn__err(TN_ERR_INVALID, "%s: edgeitems %d is below 1", who, o->edgeitems);
    if (o->linewidth < 1) return tn__err(TN_ERR_INVALID, "%s: linewidth %d is below 1", who, o->linewidth);
    return TN_OK;
}

TN_API tn_result tn_set_print_options(const tn_print_options *o) {
    static const tn_print_options numpy = { 8, 1000, 3, 75 };
    if (o && tn__print_options_check("tn_set_print_options", o) != TN_OK) return tn_last_result();
    pthread_mutex_lock(&tn__print_mu);
    tn__print_opts = o ? *o : numpy;
    pthread_mutex_unlock(&tn__print_mu);
    return TN_OK;
}

static void tn__sb_spaces(tn__sb *s, int n) { for (int i = 0; i < n; i++) tn__sb_putn(s, " ", 1); }

typedef struct tn__fmt {
    tn_dtype t;
    bool sci;
    int pad_left, pad_right, precision, exp_size;
    int int_width;
    int maxprec, edge;          /* the options' precision and edgeitems */
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
        int frac = p - 1 > f->maxprec ? f->maxprec : p - 1;
        snprintf(buf, sizeof buf, "%.*e", frac, v);
        char *e = strchr(buf, 'e');
        strcpy(ep, e + 1);
        *e = 0;
    } else {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        int e10 = atoi(strchr(buf, 'e') + 1);
        int frac = p - 1 - e10;
        frac = frac < 0 ? 0 : frac > f->maxprec ? f->maxprec : frac;
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
static void tn__visit_shown(const tn_array *a, int d, const char *p, bool summary, int edge, tn__visit_fn fn, void *ctx) {
    if (d == a->ndim) { fn(ctx, p); return; }
    int64_t n = a->shape[d];
    for (int64_t i = 0; i < n; i++) {
        if (summary && n > 2 * (int64_t)edge && i == edge) i = n - edge;
        tn__visit_shown(a, d + 1, p + i * a->strides[d], summary, edge, fn, ctx);
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

static void tn__fmt_init(tn__fmt *f, const tn_array *h, bool summary, const tn_print_options *o) {
    memset(f, 0, sizeof *f);
    f->t = h->dtype;
    f->maxprec = o->precision;
    f->edge = o->edgeitems;
    tn__fmt_stats st;
    memset(&st, 0, sizeof st);
    st.f = f;
    tn__visit_shown(h, 0, (const char *)h->data, summary, f->edge, tn__fmt_visit, &st);
    if (f->t == TN_BOOL) { f->int_width = 5; return; }
    if (!tn_dtype_is_float(f->t)) {
        char b1[32], b2[32];
        int l1 = snprintf(b1, sizeof b1, "%lld", (long long)st.imax), l2 = snprintf(b2, sizeof b2, "%lld", (long long)st.imin);
        f->int_width = l1 > l2 ? l1 : l2;
        return;
    }
    if (st.any_finite_nonzero && (st.max_abs >= 1e8 || st.min_abs < 1e-4 || st.max_abs / st.min_abs > 1e3)) f->sci = true;
    st.pass = 1;
    tn__visit_shown(h, 0, (const char *)h->data, summary, f->edge, tn__fmt_visit, &st);
    f->pad_right = f->sci ? f->exp_size + 2 + f->precision : f->precision;
    if (st.any_nonfinite) {
        int offset = f->pad_right + 1, inflen = 3 + st.neg_inf;
        if (3 - offset > f->pad_left) f->pad_left = 3 - offset;
        if (inflen - offset > f->pad_left) f->pad_left = inflen - offset;
    }
}

/* One element, padded to the column width. */
static void tn__fmt_elem(const tn__fmt *f, const char *p, tn__sb *s) {
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
    tn__sb_puts(s, buf);
}

/* numpy's _extendLine: wrap before `word` when the line would pass width. */
static void tn__extend_line(tn__sb *s, tn__sb *line, const char *word, int width, int indent) {
    bool wrap = (int)(line->n + strlen(word)) > width && (int)line->n > indent;
    if (wrap) {
        size_t n = line->n;
        while (n > 0 && line->s[n - 1] == ' ') n--;
        tn__sb_putn(s, line->s, n);
        tn__sb_puts(s, "\n");
        line->n = 0;
        tn__sb_spaces(line, indent);
    }
    tn__sb_puts(line, word);
}

/* numpy's _formatArray recurser; appends the text of the sub-array at `p`
   (axis d) to out. indent is the hanging indent's length. */
static void tn__fmt_rec(const tn__fmt *f, const tn_array *a, int d, const char *p, bool summary, int indent,
                        int width, tn__sb *out) {
    if (d == a->ndim) { tn__fmt_elem(f, p, out); return; }
    int64_t n = a->shape[d];
    bool show = summary && n > 2 * (int64_t)f->edge;
    int64_t lead = show ? f->edge : 0, trail = show ? f->edge : n;
    int axes_left = a->ndim - d;
    tn__sb s = TN__SB_INIT;
    tn__sb_spaces(&s, indent);      /* the hanging indent, replaced by '[' below */
    if (axes_left == 1) {
        int ew = width - 1;
        tn__sb line = TN__SB_INIT, word = TN__SB_INIT;
        s.n = 0;
        tn__sb_spaces(&line, indent);
        for (int64_t i = 0; i < n; i++) {
            if (i == lead && show) {
                tn__extend_line(&s, &line, "...", ew, indent);
                tn__sb_puts(&line, " ");
                i = n - trail;
            }
            word.n = 0;
            if (word.s) word.s[0] = 0;
            tn__fmt_elem(f, p + i * a->strides[d], &word);
            tn__extend_line(&s, &line, word.s ? word.s : "", ew, indent);
            if (i + 1 < n) tn__sb_puts(&line, " ");
            if (word.oom) s.oom = true;
        }
        tn__sb_putn(&s, line.s ? line.s : "", line.n);
        if (line.oom) s.oom = true;
        tn__free(line.s);
        tn__free(word.s);
    } else {
        s.n = 0;
        for (int64_t i = 0; i < n; i++) {
            if (i == lead && show) {
                tn__sb_spaces(&s, indent);
                tn__sb_puts(&s, "...");
                for (int k = 0; k < axes_left - 1; k++) tn__sb_puts(&s, "\n");
                i = n - trail;
            }
            tn__sb_spaces(&s, indent);
            tn__fmt_rec(f, a, d + 1, p + i * a->strides[d], summary, indent + 1, width - 1, &s);
            if (i + 1 < n) for (int k = 0; k < axes_left - 1; k++) tn__sb_puts(&s, "\n");
        }
    }
    tn__sb_puts(out, "[");
    if (s.n >= (size_t)indent) tn__sb_putn(out, s.s + indent, s.n - (size_t)indent);
    tn__sb_puts(out, "]");
    if (s.oom) out->oom = true;
    tn__free(s.s);
}

/* The 0-d case prints like a NumPy scalar's str: 1.5, 1.0, 1e-05. */
static void tn__fmt_scalar(const tn_array *h, tn__sb *out) {
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
    tn__sb_puts(out, buf);
}

static tn_result tn__array_format(const tn_array *a, const tn_print_options *o, tn__sb *out, const char *who) {
    tn_result r = tn__array_readable(a, who);
    if (r != TN_OK) return r;
    tn_print_options cur = o ? *o : tn_get_print_options();
    if (tn__print_options_check(who, &cur) != TN_OK) return tn_last_result();
    tn_array *h = tn__host_view(a, who);
    if (!h) return tn_last_result();
    int64_t n = tn_array_size(h);
    if (h->ndim == 0) tn__fmt_scalar(h, out);
    else if (n == 0) tn__sb_puts(out, "[]");
    else {
        bool summary = n > cur.threshold;
        tn__fmt f;
        tn__fmt_init(&f, h, summary, &cur);
        tn__fmt_rec(&f, h, 0, (const char *)h->data, summary, 1, cur.linewidth, out);
    }
    tn_array_free(h);
    if (out->oom) return tn__err(TN_ERR_OOM, "%s: out of memory", who);
    return TN_OK;
}

TN_API int tn_array_snprint(const tn_array *a, char *buf, size_t cap) {
    tn__sb s = TN__SB_INIT;
    if (tn__array_format(a, NULL, &s, "tn_array_snprint") != TN_OK) { tn__free(s.s); if (buf && cap) buf[0] = 0; return -1; }
    int n = (int)s.n;
    if (buf && cap) {
        size_t k = s.n < cap - 1 ? s.n : cap - 1;
        memcpy(buf, s.s, k);
        buf[k] = 0;
    }
    tn__free(s.s);
    return n;
}

static tn_result tn__array_print(const tn_array *a, const tn_print_options *o, FILE *out, const char *who) {
    if (!out) return tn__err(TN_ERR_NULL, "%s: out is NULL", who);
    tn__sb s = TN__SB_INIT;
    tn_result r = tn__array_format(a, o, &s, who);
    if (r == TN_OK) { fwrite(s.s, 1, s.n, out); fputc('\n', out); }
    tn__free(s.s);
    return r;
}
TN_API tn_result tn_array_print(const tn_array *a, FILE *out) { return tn__array_print(a, NULL, out, "tn_array_print"); }
TN_API tn_result tn_array_print_with(const tn_array *a, const tn_print_options *o, FILE *out) {
    return tn__array_print(a, o, out, "tn_array_print_with");
}

/* >>graph ============================================================= */
/* Arena-owned nodes, leaves (inputs, constants, shared variables),
   the compiler front end (tn_function), the executor (tn_call) and debugprint. */
#include <string.h>
#include <stdlib.h>
#include <math.h>

/* >>graph_arena ---------------------------------------------------------- */

/* A shared variable's lock and device event (the >>shared_locks section),
   in the arena, hung on the user's leaf (tn_var.ext of a Shared node). */
typedef struct tn__shvar {
    pthread_mutex_t mu;
    TN__ATOMIC(uintptr_t) owner;   /* the holding thread (tn__shvar_me), 0: none. Re-entrant: */
    int depth;                /* a scan's step function reads what its caller holds */
    uint64_t seq;             /* global lock order */
    void *bs;                 /* the back end's record (tn_backend.shared_order), or NULL */
} tn__shvar;
static TN__THREAD_LOCAL char tn__shvar_me;      /* its address names the thread */
static void tn__shvar_lock(tn__shvar *sh) {
    uintptr_t me = (uintptr_t)&tn__shvar_me;
    if (tn__atomic_load_explicit(&sh->owner, TN__RELAXED) == me) { sh->depth++; return; }
    pthread_mutex_lock(&sh->mu);
    tn__atomic_store_explicit(&sh->owner, me, TN__RELAXED);
    sh->depth = 1;
}
static void tn__shvar_unlock(tn__shvar *sh) {
    if (--sh->depth > 0) return;
    tn__atomic_store_explicit(&sh->owner, 0, TN__RELAXED);
    pthread_mutex_unlock(&sh->mu);
}
static void tn__shvar_release(tn__shvar *sh);

/* Nodes, input arrays and strings live in fixed-size chunks freed all at once;
   an allocation larger than a chunk gets a chunk of its own. */
#define TN__CHUNK_BYTES ((size_t)64 * 1024)

typedef struct tn__chunk {
    struct tn__chunk *next;
    size_t used, cap;
    TN__ALIGNAS(16) unsigned char data[];
} tn__chunk;

struct tn_graph {
    tn__chunk *chunks;
    tn_var **vars;          /* every var, in creation order (index == id) */
    int nvars, cap_vars;
    tn_array **owned;       /* values freed with the graph: constants, shared, test values */
    int nowned, cap_owned;
    bool no_test_values;    /* a function's private graph: compute_test_value skips it */
};

TN_API tn_graph *tn_graph_new(void) {
    tn_graph *g = (tn_graph *)tn__calloc(1, sizeof *g);
    if (!g) tn__err(TN_ERR_OOM, "tn_graph_new: out of memory");
    return g;
}

TN_API void tn_graph_free(tn_graph *g) {
    if (!g) return;
    tn__scan_release_graph(g);          /* compiled inner steps of g's scans */
    for (int i = 0; i < g->nvars; i++)
        if (g->vars[i]->op == TN_OP_SHARED && g->vars[i]->ext) tn__shvar_release((tn__shvar *)g->vars[i]->ext);
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
        tn_array **n = (tn_array **)tn__grow(g->owned, &g->cap_owned, g->nowned + 1, 16, sizeof *n);
        if (!n) return false;
        g->owned = n;
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

/* A zeroed var registered in g (id = its index). */
static tn_var *tn__var_new(tn_graph *g, int op, const char *who) {
    if (g->nvars == g->cap_vars) {
        tn_var **n = (tn_var **)tn__grow(g->vars, &g->cap_vars, g->nvars + 1, 64, sizeof *n);
        if (!n) { tn__err(TN_ERR_OOM, "%s: out of memory", who); return NULL; }
        g->vars = n;
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

static tn_result tn__op_table_status(const char *who);   /* the >>ops_table section */
static tn_var *tn__tv_node(tn_var *v, const char *who);   /* the >>test_values section */
static tn_result tn__infer_outputs(const tn_var *node, const tn_type *in, tn_type *outs);

/* Records a node with n_out outputs and infers its type(s); node->type is
   output 0 (multi-output nodes are read through tn__proj). */
TN_API tn_var *tn__node_multi(tn_graph *g, int op, int n_in, tn_var *const *in, const tn_params *p,
                              void *ext, int n_out, const char *who) {
    if (!who) who = "tn__node";
    if (!g) { tn__err(TN_ERR_NULL, "%s: graph is NULL", who); return NULL; }
    if (tn__op_table_status(who) != TN_OK) return NULL;     /* an incomplete op table: nothing is built */
    const tn_op_def *def = tn__op_def(op);
    if (!def || !def->infer) { tn__err(TN_ERR_INTERNAL, "%s: op %d has no type rule", who, op); return NULL; }
    if (n_in < 0 || (n_in > 0 && !in)) { tn__err(TN_ERR_NULL, "%s: inputs are NULL", who); return NULL; }
    if (def->arity >= 0 && def->arity != n_in) {
        tn__err(TN_ERR_INVALID, "%s: %s takes %d inputs, got %d", who, def->name, def->arity, n_in);
        return NULL;
    }
    for (int i = 0; i < n_in; i++) {
        if (!in[i]) { tn__err_null(who, "input %d", i); return NULL; }
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
    tn_result r = tn__infer_outputs(v, types, outs);
    if (r != TN_OK) {
        tn__err_in(who, r);     /* the rule's message, prefixed with the constructor's name */
        tn__var_drop_last(g, v);
        tn__free(types);
        return NULL;
    }
    for (int k = 0; k < n_out; k++)
        if (!tn__extent_fits(outs[k].ndim, outs[k].shape)) {
            char sb[128];
            tn__err(TN_ERR_SHAPE, "%s: the result's shape %s is too large (its strides would overflow 64 bits)", who,
                    tn__shape_str(outs[k].ndim, outs[k].shape, sb));
            tn__var_drop_last(g, v);
            tn__free(types);
            return NULL;
        }
    v->type = outs[0];
    tn__free(types);
    if (tn__ctx_infer(v, who) != TN_OK) { tn__var_drop_last(g, v); return NULL; }
    if (tn_get_config()->compute_test_value != TN_WR_OFF && !g->no_test_values) return tn__tv_node(v, who);
    return v;
}

TN_API tn_var *tn__node(tn_graph *g, int op, int n_in, tn_var *const *in, const tn_params *p, void *ext, const char *who) {
    return tn__node_multi(g, op, n_in, in, p, ext, 1, who);
}

/* Output k of a multi-output node. */
TN_API tn_var *tn__proj(tn_var *node, int k) {
    if (!node) { tn__err(TN_ERR_NULL, "tn__proj: node is NULL"); return NULL; }
    if (k < 0 || k >= node->n_out) {
        tn__err(TN_ERR_INVALID, "tn__proj: output %d of a node with %d outputs", k, node->n_out);
        return NULL;
    }
    tn_params p;
    memset(&p, 0, sizeof p);
    tn__p_set_proj_index(&p, k);
    return tn__node(node->graph, TN_OP_PROJ, 1, &node, &p, NULL, "tn__proj");
}

#define TN__MAX_VALUE_INPUTS 8   /* value inputs are among a node's first 8 (tn_op_def.value_inputs) */

/* The types of every output of `node` given its inputs' types (outs[n_out])
   and, for an op whose shapes depend on values (tn_op_def.value_inputs), the
   values val[i] of its value inputs (val NULL: those of constants only). */
static tn_result tn__infer_outputs_v(const tn_var *node, const tn_type *in, const tn_array *const *val, tn_type *outs) {
    const tn_op_def *def = tn__op_def(node->op);
    if (!def || !def->infer) return tn__err(TN_ERR_INTERNAL, "tn__infer: op %d has no type rule", node->op);
    unsigned vm = def->value_inputs && def->infer_values ? def->value_inputs(node) : 0;
    if (!vm) return def->infer(node, in, outs);
    const tn_array *cv[TN__MAX_VALUE_INPUTS] = { NULL };
    for (int i = 0; i < node->n_in && i < TN__MAX_VALUE_INPUTS; i++) {
        const tn_var *x = node->in[i];
        if (vm >> i & 1)
            cv[i] = val ? val[i] : x->op == TN_OP_CONSTANT && x->value && x->value->device == TN_HOST ? x->value : NULL;
    }
    return def->infer_values(node, in, cv, outs);
}

static tn_result tn__infer_outputs(const tn_var *node, const tn_type *in, tn_type *outs) {
    return tn__infer_outputs_v(node, in, NULL, outs);
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
    if (!tn__extent_fits(ndim, t.shape)) {
        char sb[128];
        tn__err(TN_ERR_SHAPE, "tn_input: '%s': shape %s is too large (its strides would overflow 64 bits)",
                name ? name : "", tn__shape_str(ndim, t.shape, sb));
        return NULL;
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

/* "(False, True)", Theano's spelling of a broadcastable pattern */
static const char *tn__bcast_str(const tn_type *t, char buf[128]) {
    size_t n = (size_t)snprintf(buf, 128, "(");
    for (int d = 0; d < t->ndim && n < 100; d++)
        n += (size_t)snprintf(buf + n, 128 - n, "%s%s", t->bcast[d] ? "True" : "False",
                              d + 1 < t->ndim ? ", " : t->ndim == 1 ? "," : "");
    snprintf(buf + n, 128 - n, ")");
    return buf;
}

static tn_var *tn__shared_make(const char *fn, tn_graph *g, const char *name, const tn_array *value, const tn_shared_opts *o) {
    if (!g) { tn__err(TN_ERR_NULL, "%s: graph is NULL", fn); return NULL; }
    char who[160];
    snprintf(who, sizeof who, "%s '%s'", fn, name ? name : "");
    if (tn__check_value(value, who) != TN_OK) return NULL;
    bool fixed = o && o->fixed_shape, borrow = o && o->borrow;
    const bool *pat = o ? o->broadcastable : NULL;
    char sb[128];
    for (int d = 0; pat && d < value->ndim; d++)
        if (pat[d] && value->shape[d] != 1) {
            tn__err(TN_ERR_SHAPE, "%s: dim %d is broadcastable but the value has shape %s", who, d,
                    tn__shape_str(value->ndim, value->shape, sb));
            return NULL;
        }
    if (borrow) {
        bool bad = value->live_gen != NULL;
        for (int d = 0; !bad && d < value->ndim; d++) bad = value->strides[d] == 0 && value->shape[d] > 1;
        if (bad) {
            tn__err(TN_ERR_INVALID, "%s: cannot borrow %s (updates write into the borrowed array)", who,
                    value->live_gen ? "a function's borrowed output" : "a broadcast array (a 0 stride)");
            return NULL;
        }
    }
    tn_array *c = borrow ? tn_array_view(value) : tn__graph_copy_value(g, value, who);
    if (borrow && (!c || !tn__graph_own(g, c))) {
        tn_array_free(c);
        tn__err(TN_ERR_OOM, "%s: out of memory", who);
        return NULL;
    }
    if (!c) return NULL;
    /* static type: dtype and rank fixed; sizes free to change by updates, or
       known (broadcastable where 1) for a fixed shape; size 1 where the
       pattern says */
    tn_type t;
    memset(&t, 0, sizeof t);
    t.dtype = c->dtype;
    t.ndim = c->ndim;
    for (int d = 0; d < t.ndim; d++) {
        t.bcast[d] = (fixed && c->shape[d] == 1) || (pat && pat[d]);
        t.shape[d] = fixed || t.bcast[d] ? c->shape[d] : -1;
    }
    tn_var *v = tn__leaf(g, TN_OP_SHARED, name, &t, who);
    if (!v) { tn__graph_disown(g, c); tn_array_free(c); return NULL; }
    v->value = c;
    if (fixed) v->flags |= TN_VAR_FIXED_SHAPE;
    if (borrow) v->flags |= TN_VAR_BORROWED;
    tn__shvar *sh = (tn__shvar *)tn__graph_alloc(g, sizeof *sh);
    if (!sh) return NULL;
    if (pthread_mutex_init(&sh->mu, NULL) != 0) { tn__err(TN_ERR_OOM, "%s: cannot make its lock", who); return NULL; }
    sh->seq = tn__atomic_fetch_add(&tn__lib.shared_seq, 1);
    v->ext = sh;
    return v;
}

TN_API tn_var *tn_shared(tn_graph *g, const char *name, const tn_array *value) {
    return tn__shared_make("tn_shared", g, name, value, NULL);
}

TN_API tn_var *tn_shared_fixed(tn_graph *g, const char *name, const tn_array *value) {
    tn_shared_opts o = { false, NULL, true };
    return tn__shared_make("tn_shared_fixed", g, name, value, &o);
}

TN_API tn_var *tn_shared_ex(tn_graph *g, const char *name, const tn_array *value, const tn_shared_opts *opts) {
    return tn__shared_make("tn_shared_ex", g, name, value, opts);
}

/* TN_ERR_SHAPE naming `who`, the variable and update `upd` (-1: the new
   value) when `shape` breaks what `shared` fixes: its whole shape
   (tn_shared_fixed), its broadcastable dims (size 1), or a borrowed
   array's shape; unknown dims (-1, compile time) pass. */
static tn_result tn__shared_shape_check(const tn_var *shared, int ndim, const int64_t *shape, const char *who, int upd) {
    bool borrowed = (shared->flags & TN_VAR_BORROWED) && shared->value;
    for (int d = 0; d < ndim; d++) {
        int64_t want = borrowed ? shared->value->shape[d] : shared->type.shape[d];
        if (shape[d] < 0 || want < 0 || shape[d] == want) continue;
        char a[128], b[128], what[32] = "the new value";
        const char *nm = tn__var_label_name(shared);
        if (upd >= 0) snprintf(what, sizeof what, "update %d", upd);
        tn__shape_str(ndim, shape, b);
        if (shared->flags & TN_VAR_FIXED_SHAPE)
            return tn__err(TN_ERR_SHAPE, "%s: shared variable '%s' has the fixed shape %s; %s has shape %s", who, nm,
                           tn__shape_str(shared->type.ndim, shared->type.shape, a), what, b);
        if (shared->type.shape[d] >= 0)
            return tn__err(TN_ERR_SHAPE, "%s: shared variable '%s' has the broadcastable pattern %s (dim %d is 1); %s has shape %s",
                           who, nm, tn__bcast_str(&shared->type, a), d, what, b);
        return tn__err(TN_ERR_SHAPE, "%s: shared variable '%s' borrows the caller's array of shape %s, which keeps its shape; "
                       "%s has shape %s", who, nm, tn__shape_str(shared->value->ndim, shared->value->shape, a), what, b);
    }
    return TN_OK;
}

TN_API const tn_array *tn_shared_get(tn_var *shared) {
    if (!shared) { tn__err(TN_ERR_NULL, "tn_shared_get: variable is NULL"); return NULL; }
    if (shared->op != TN_OP_SHARED) {
        tn__err(TN_ERR_INVALID, "tn_shared_get: '%s' is not a shared variable", tn__var_label_name(shared));
        return NULL;
    }
    return shared->value;
}

/* Holds the variable's lock, and orders this thread's device work after the
   last function's work on it (tn_backend.shared_order). */
static tn_result tn__shvar_enter(tn_var *shared) {
    tn__shvar *sh = (tn__shvar *)shared->ext;
    if (!sh) return TN_OK;
    tn__shvar_lock(sh);
    const tn_backend *b = tn__get_backend();
    tn_result r = b && b->shared_order ? b->shared_order(&sh->bs) : TN_OK;
    if (r != TN_OK) tn__shvar_unlock(sh);
    return r;
}
static void tn__shvar_leave(tn_var *shared) {
    tn__shvar *sh = (tn__shvar *)shared->ext;
    if (sh) tn__shvar_unlock(sh);
}

TN_API tn_array *tn_shared_get_value(tn_var *shared) {
    const tn_array *a = tn_shared_get(shared);
    if (!a) { tn__err_as("tn_shared_get_value", "tn_shared_get"); return NULL; }
    if (tn__shvar_enter(shared) != TN_OK) {
        tn__err(tn_last_result(), "tn_shared_get_value '%s': %s", tn__var_label_name(shared), tn_last_error());
        return NULL;
    }
    tn_array *c = a->device == TN_HOST ? tn_array_copy(a) : tn_array_to_host(a);
    tn__shvar_leave(shared);
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
    if ((r = tn__shared_shape_check(shared, value->ndim, value->shape, "tn_shared_set_value", -1)) != TN_OK) return r;
    if (value == old) return TN_OK;
    if ((r = tn__shvar_enter(shared)) != TN_OK) return tn__err(r, "tn_shared_set_value '%s': %s", name, tn_last_error());
    if (shared->flags & TN_VAR_BORROWED) {            /* into the caller's memory (overlap handled) */
        r = tn_array_assign(shared->value, value);
        tn__shvar_leave(shared);
        return r == TN_OK ? r : tn__err(r, "tn_shared_set_value '%s': %s", name, tn_last_error());
    }
    tn_array *c = tn__copy_on(value, old->device);    /* a device-resident variable stays there */
    if (!c) {
        tn__shvar_leave(shared);
        return tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "tn_shared_set_value '%s': %s", name, tn_last_error());
    }
    /* Replace the contents in place: pointers from tn_shared_get stay valid. */
    tn_array tmp = *shared->value;
    *shared->value = *c;
    *c = tmp;
    tn_array_free(c);
    tn__shvar_leave(shared);
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

/* >>test_values: compute_test_value (the >>api_graph section's contract).
   A node's values are host arrays the graph owns, one per output; a PROJ
   shares its source's. */

static const tn_array *tn__tv_of(const tn_var *x) {
    if (x->op == TN_OP_SHARED || x->op == TN_OP_CONSTANT) return x->value;
    return x->test_value ? x->test_value[0] : NULL;
}

TN_API const tn_array *tn_var_test_value(const tn_var *v) { return v ? tn__tv_of(v) : NULL; }

TN_API tn_var *tn_var_set_test_value(tn_var *v, const tn_array *value) {
    const char *W = "tn_var_set_test_value";
    if (!v) { tn__err_null(W, "variable"); return NULL; }
    const char *nm = tn__var_label_name(v);
    if (v->op != TN_OP_INPUT) {
        tn__err(TN_ERR_INVALID, "%s: '%s' is not an input (tn_input): a shared variable's or a constant's test value is "
                "its value, and other nodes compute theirs", W, nm);
        return NULL;
    }
    char who[160];
    snprintf(who, sizeof who, "%s '%s'", W, nm);
    if (tn__check_value(value, who) != TN_OK) return NULL;
    bool fits = value->ndim == v->type.ndim;
    for (int d = 0; fits && d < value->ndim; d++) fits = v->type.shape[d] < 0 || v->type.shape[d] == value->shape[d];
    if (!fits) {
        char a[160], b[128];
        tn__err(TN_ERR_SHAPE, "%s: '%s' has type %s; the test value has shape %s", W, nm, tn__type_str(&v->type, a),
                tn__shape_str(value->ndim, value->shape, b));
        return NULL;
    }
    tn_array *h = value->device == TN_HOST ? NULL : tn_array_to_host(value);
    tn_array *c = value->device != TN_HOST && !h ? NULL : tn_array_astype(h ? h : value, v->type.dtype);
    tn_array_free(h);
    if (!c) { tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "%s: %s", who, tn_last_error()); return NULL; }
    if (!v->test_value && !(v->test_value = (tn_array **)tn__graph_alloc(v->graph, sizeof *v->test_value))) {
        tn_array_free(c);
        return NULL;
    }
    if (!tn__graph_own(v->graph, c)) { tn_array_free(c); tn__err(TN_ERR_OOM, "%s: out of memory", who); return NULL; }
    if (v->test_value[0]) { tn__graph_disown(v->graph, v->test_value[0]); tn_array_free(v->test_value[0]); }
    v->test_value[0] = c;
    return v;
}

/* "of shapes (3, 4) and (5, 2)" */
static void tn__tv_shapes(tn_array *const *a, int n, char *buf, size_t cap) {
    size_t k = (size_t)snprintf(buf, cap, "of shape%s ", n == 1 ? "" : "s");
    char sb[128];
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%s", i == 0 ? "" : i + 1 == n ? " and " : ", ",
                              tn__shape_str(a[i]->ndim, a[i]->shape, sb));
}

/* Runs v's CPU kernel on its inputs' test values (all present); the error
   names `who` and the values' shapes. */
static tn_result tn__tv_compute(tn_var *v, const tn_op_def *def, const char *who) {
    int ni = v->n_in, no = v->n_out;
    tn_array **arr = (tn_array **)tn__calloc((size_t)(2 * ni + no) + 1, sizeof *arr);
    tn_type *types = (tn_type *)tn__calloc((size_t)(ni + no) + 1, sizeof *types);
    tn_array **ins = arr, **copies = arr + ni, **outs = arr + 2 * ni;
    tn_array view;
    tn_result r = TN_OK;
    char shapes[400], lb[160];
    if (!arr || !types) { r = tn__err(TN_ERR_OOM, "%s: out of memory for test values", who); goto done; }
    for (int i = 0; i < ni && r == TN_OK; i++) {
        const tn_array *a = tn__tv_of(v->in[i]);
        if (a->device != TN_HOST && !(a = copies[i] = tn_array_to_host(a)))
            r = tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "%s: input %d's test value: %s", who, i, tn_last_error());
        ins[i] = (tn_array *)a;
        if (a) {
            types[i] = tn__type_of_array(a);
            for (int d = 0; d < a->ndim; d++) types[i].bcast[d] = v->in[i]->type.bcast[d] || a->shape[d] == 1;
        }
    }
    if (r != TN_OK) goto done;
    tn__tv_shapes(ins, ni, shapes, sizeof shapes);
    if ((r = tn__infer_outputs_v(v, types, (const tn_array *const *)ins, types + ni)) != TN_OK) {
        const char *m = tn_last_error();
        size_t n = strlen(who);
        if (!strncmp(m, who, n) && m[n] == ':' && m[n + 1] == ' ') m += n + 2;
        r = tn__err(r, "%s: test values %s do not fit: %s", who, shapes, m);
        goto done;
    }
    for (int k = 0; k < no; k++) {
        const tn_type *t = &types[ni + k], *stat = k == 0 ? &v->type : NULL;
        bool bad = stat && (t->dtype != stat->dtype || t->ndim != stat->ndim);
        for (int d = 0; stat && !bad && d < stat->ndim; d++) bad = stat->shape[d] >= 0 && stat->shape[d] != t->shape[d];
        if (bad) {
            char sb[160];
            r = tn__err(TN_ERR_SHAPE, "%s: from test values %s the op computes %s where its type rule promised %s", who, shapes,
                        tn__type_str(t, lb), tn__type_str(stat, sb));
            goto done;
        }
        if (def->kind == TN_OPK_VIEW && k == 0) {     /* points into the input: copied below */
            memset(&view, 0, sizeof view);
            view.dtype = t->dtype;
            view.ndim = t->ndim;
            for (int d = 0; d < t->ndim; d++) view.shape[d] = t->shape[d];
            tn__contiguous_strides(view.dtype, view.ndim, view.shape, view.strides);
            view.base = ins[0]->base;
            view.data = ins[0]->data;
            view.device = TN_HOST;
            outs[k] = &view;
        } else if (!(outs[k] = tn__array_alloc(t->dtype, t->ndim, t->shape, TN_HOST))) {
            r = tn__err(TN_ERR_OOM, "%s: out of memory for a test value %s", who, tn__type_str(t, lb));
            goto done;
        }
    }
    if ((r = def->cpu(v, ins, outs)) != TN_OK) {
        r = tn__err(r, "%s: computing the test value from test values %s: %s", who, shapes, tn_last_error());
        goto done;
    }
    if (no > 0 && outs[0] == &view && !(outs[0] = tn_array_copy(&view))) {
        r = tn__err(TN_ERR_OOM, "%s: out of memory for a test value", who);
        goto done;
    }
    if (!(v->test_value = (tn_array **)tn__graph_alloc(v->graph, (size_t)no * sizeof *v->test_value))) { r = tn_last_result(); goto done; }
    for (int k = 0; k < no; k++) {
        if (!tn__graph_own(v->graph, outs[k])) { r = tn__err(TN_ERR_OOM, "%s: out of memory", who); break; }
        v->test_value[k] = outs[k];
        outs[k] = NULL;
    }
    if (r != TN_OK) v->test_value = NULL;    /* the owned ones go with the graph */
done:
    if (arr) {
        for (int k = 0; k < no; k++) if (outs[k] != &view) tn_array_free(outs[k]);
        for (int i = 0; i < ni; i++) tn_array_free(copies[i]);
    }
    tn__free(arr);
    tn__free(types);
    return r;
}

/* The last step of every constructor while compute_test_value is on: v,
   with its test values, or NULL (raise) with the error. */
static tn_var *tn__tv_node(tn_var *v, const char *who) {
    tn_warn_raise mode = tn_get_config()->compute_test_value;
    for (int i = 0; i < v->n_in; i++)
        if (v->in[i]->flags & TN_VAR_NO_TEST_VALUE) { v->flags |= TN_VAR_NO_TEST_VALUE; return v; }
    const tn_op_def *def = tn__op_def(v->op);
    if (v->op != TN_OP_PROJ && (!def || !def->cpu)) return v;      /* no CPU kernel: no test value */
    for (int i = 0; i < v->n_in; i++) {
        const tn_var *x = v->in[i];
        if (tn__tv_of(x)) continue;
        if (mode == TN_WR_RAISE) {
            tn__err(TN_ERR_INVALID, "%s: input %d ('%s') has no test value (compute_test_value=raise; give it one with "
                    "tn_var_set_test_value)", who, i, tn__var_label_name(x));
            tn__var_drop_last(v->graph, v);
            return NULL;
        }
        if (tn__op_kind(x->op) == TN_OPK_LEAF)     /* a node without one: its own cause was said */
            tn__warn("%s: input %d ('%s') has no test value (compute_test_value=warn): the node gets none", who, i,
                     tn__var_label_name(x));
        return v;
    }
    if (v->op == TN_OP_PROJ) {
        tn_array **one = (tn_array **)tn__graph_alloc(v->graph, sizeof *one);
        if (!one) { tn__var_drop_last(v->graph, v); return NULL; }
        one[0] = v->in[0]->test_value[tn__p_proj_index(&v->p)];
        v->test_value = one;
        return v;
    }
    /* warn: the error goes to the log, this thread's last error stays as it was */
    tn_result saved_r = tn__last_result, saved_null = tn__null_cause;
    char saved[sizeof tn__last_msg];
    if (mode == TN_WR_WARN) memcpy(saved, tn__last_msg, sizeof saved);
    if (tn__tv_compute(v, def, who) == TN_OK) return v;
    if (mode == TN_WR_RAISE) { tn__var_drop_last(v->graph, v); return NULL; }
    tn__warn("%s (compute_test_value=warn: the node gets no test value)", tn__last_msg);
    memcpy(tn__last_msg, saved, sizeof saved);
    tn__last_result = saved_r;
    tn__null_cause = saved_null;
    return v;
}

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

/* >>func_types: a compiled function's data; the executor below runs it -- */

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
    bool fresh;             /* plan: a copied output its step writes into a new array each call (no plan buffer) */
    bool valued;            /* a step's value input (tn_op_def.value_inputs): its value is part of the plan's key */
    int phys;               /* plan: buffer index, -1 for external, fresh, or a view of those */
    tn_type ct;             /* plan: concrete type */
    tn_array arr;           /* internal slots: the array given to kernels */
    tn_array *own;          /* fresh: this call's array, until tn__make_outputs hands it to the caller */
    int dest;               /* the output whose caller-given destination its step may write instead (tn__call_into), or -1 */
} tn__slot;

typedef struct tn__step {
    tn_var *node;
    const tn_op_def *def;
    int n_in, n_out;
    int *in_slot;
    int *val_slot;          /* value inputs (tn_op_def.value_inputs): the leaf slot each is read from, behind any
                               transfer; NULL: none */
    int out_slot;           /* outputs are out_slot .. out_slot + n_out - 1 */
    bool view;
    const tn_backend_op *brow;  /* the back end's row (device nodes) */
    void *bstate;           /* its state */
} tn__step;

typedef struct tn__phys {
    tn_buffer *base;
    void *data;
    size_t cap;
    int device;
    long pending;
    bool pinned, in_pool;
    int pin_device;         /* host buffer a copy from this device writes: pinned memory from the back end (TN_HOST: none) */
} tn__phys;

struct tn_func {
    uint64_t magic;                     /* TN__FUNC_LIVE, TN__FUNC_FREED once freed (>>func_handles) */
    tn_func *next_freed;                /* in tn__lib.freed_funcs */
    tn_graph *fg;
    const char *name;                   /* desc->name or "tn_call" */
    int n_inputs, n_outputs, n_updates;
    int *in_slot;
    tn_type *in_type;
    const char **in_name;
    bool allow_downcast;                /* tn_func_desc.allow_input_downcast */
    bool compile_noted;                 /* the first call's compile note is done (>>compile_note) */
    uint64_t kc_kernels, kc_stored;     /* backend->compile_clock when tn_function began, on kc_thread */
    double kc_seconds;
    pthread_t kc_thread;
    tn_array **in_conv;                 /* an input of another dtype, converted (kept for the next call) */
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
    int64_t *cache;                     /* n_ext * (2 + TN_MAX_DIMS): rank, shape, a value input's bits */
    bool planned;
    tn__phys *phys;
    int n_phys, cap_phys;
    int *pool, n_pool;                  /* plan: free buffers */
    tn_array **retired;                 /* replaced shared values kept alive until the next call */
    int n_retired, cap_retired;
    uint64_t gen;
    const tn_backend *backend;
    struct tn__prof *prof;              /* profiler (the >>profile section); NULL when off */
    tn_mode mode;                       /* the mode it was compiled in (check: the >>check_mode section) */
    unsigned char checks;               /* TN__CHECK_* it runs each step with (0: none) */
    void *bfstate;                      /* the back end's per-function state (its stream), or NULL */
    bool bf_borrowed;                   /* bfstate is another function's (tn__func_stream_from) */
    struct tn__replay_cache *rcache;    /* captured CUDA graphs (the >>replay section); NULL until used */
    bool scan_step;                     /* a scan's device step: a caller's captured loop bakes in its buffers */
    tn_array *const *out_dest;          /* this call's destinations of outputs (tn__call_into), or NULL */
    tn__atomic_flag busy;                   /* set while a call runs: a second caller gets TN_ERR_BUSY */
    struct tn__shvar **locks;           /* the shared variables it reads or updates, in lock order */
    int n_locks;
};

/* >>func_handles: a tn_func pointer is checked on entry. Its block starts
   with a magic word, live or freed; tn_function_free keeps the freed block
   (oldest reused first by later tn_function calls) instead of returning it to
   the allocator, so a freed pointer still points at readable memory saying
   "freed". The limit: once a later tn_function reuses the block, the old
   pointer names that new function; a pointer to memory that never held a
   function is refused only if that memory is readable and does not start
   with the live word. The blocks go back to the allocator at tn_shutdown. */
#define TN__FUNC_LIVE  UINT64_C(0x214e55462d6e7421)    /* "!tn-FUN!" */
#define TN__FUNC_FREED UINT64_C(0x2144455246454552)

/* A zeroed, live block: the oldest freed one, else a new one. */
static tn_func *tn__func_block_new(void) {
    pthread_mutex_lock(&tn__lib.handles_mu);
    tn_func *f = tn__lib.freed_funcs;
    if (f && !(tn__lib.freed_funcs = f->next_freed)) tn__lib.freed_funcs_tail = NULL;
    pthread_mutex_unlock(&tn__lib.handles_mu);
    if (f) memset(f, 0, sizeof *f);
    else if (!(f = (tn_func *)tn__calloc(1, sizeof *f))) return NULL;
    f->magic = TN__FUNC_LIVE;
    return f;
}

static void tn__func_block_free(tn_func *f) {
    memset(f, 0, sizeof *f);
    f->magic = TN__FUNC_FREED;
    pthread_mutex_lock(&tn__lib.handles_mu);
    if (tn__lib.freed_funcs_tail) tn__lib.freed_funcs_tail->next_freed = f;
    else tn__lib.freed_funcs = f;
    tn__lib.freed_funcs_tail = f;
    pthread_mutex_unlock(&tn__lib.handles_mu);
}

/* tn_shutdown: the kept blocks go back to the allocator. */
static void tn__func_blocks_release(void) {
    pthread_mutex_lock(&tn__lib.handles_mu);
    while (tn__lib.freed_funcs) {
        tn_func *f = tn__lib.freed_funcs;
        tn__lib.freed_funcs = f->next_freed;
        tn__free(f);
    }
    tn__lib.freed_funcs_tail = NULL;
    pthread_mutex_unlock(&tn__lib.handles_mu);
}

/* TN_OK for a live function; errors name `who`. */
static tn_result tn__func_check(const tn_func *f, const char *who) {
    if (!f) return tn__err(TN_ERR_NULL, "%s: function is NULL", who);
    if (f->magic == TN__FUNC_LIVE) return TN_OK;
    if (f->magic == TN__FUNC_FREED) return tn__err(TN_ERR_INVALID, "%s: the function was freed (tn_function_free)", who);
    return tn__err(TN_ERR_INVALID, "%s: %p is not a function made by tn_function", who, (const void *)f);
}


/* Profiler hooks (the >>profile section), called only when f->prof is set. */
static void tn__prof_attach(tn_func *f, double t_rewrite, double t_prepare);
static double tn__prof_begin_call(tn_func *f, tn_array *const *inputs);
static double tn__prof_step_begin(tn_func *f, int k);
static bool tn__trace_on(void);                /* >>trace */
static void tn__prof_step(tn_func *f, int k, double t0);
static void tn__prof_end_call(tn_func *f, double t_call, double t_run);
static bool tn__prof_replayable(const tn_func *f);
static bool tn__prof_stepwise(const tn_func *f);
static void tn__prof_graph_mark(tn_func *f, int end);
static void tn__prof_replayed(tn_func *f);
static void tn__prof_finish(tn_func *f);
/* The >>replay and >>check_mode sections. */
enum { TN__CHECK_MODE = 1, TN__CHECK_NAN = 2 };
static void tn__replay_drop(tn_func *f);
static void tn__replay_free(tn_func *f);
static tn_result tn__replay_run(tn_func *f);
static bool tn__check_wanted(const tn_func *f, const tn__step *st);
static tn_result tn__check_step(tn_func *f, const tn__step *st, tn_array *const *in, tn_array *const *out);

/* Defined with the executor and the debugprint further down, used before. */
static void tn__func_share_stream(tn_func *f);
static void tn__node_label(const tn_var *v, char *buf, size_t cap);

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
    else snprintf(buf, cap, "%.0f", v);      /* no cast: a double may be beyond long long (2^63) */
}

/* Element idx of a as text; a host int exactly, not through a double (where
   INT64_MAX becomes 2^63). */
static void tn__fmt_element(const tn_array *a, const int64_t *idx, char *buf, size_t cap) {
    char *p;
    if (!tn_dtype_is_float(a->dtype) && a->dtype != TN_BOOL && a->device == TN_HOST && tn__elem_ptr(a, idx, "tn__fmt_element", &p) == TN_OK)
        snprintf(buf, cap, "%lld", (long long)tn__load_i(a->dtype, p));
    else tn__fmt_value(a->dtype, tn_array_get(a, idx), buf, cap);
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
        tn__fmt_element(a, idx, vb, sizeof vb);
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
        memset(idx, 0, sizeof idx);
        tn__fmt_element(a, idx, vb, sizeof vb);
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
    int k = tn__p_proj_index(&node->p);
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
    snprintf(buf, cap, "%s.%d", inner, tn__p_proj_index(&node->p));
}

TN_API tn_result tn_call_n(tn_func *f, int n_inputs, tn_array *const *inputs, int n_outputs, tn_array **outputs) {
    tn_result r = tn__func_check(f, "tn_call_n");
    if (r != TN_OK) return r;
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

/* >>graph_rows: this part's rows of the op table (the >>ops_table section) */
/* Leaves hold values and a PROJ reads its source's output: no kernels. Only a
   scan's outputs have gradients through their PROJ (the >>scan_grad section). */
#define TN__GRAPH_OP_ROWS \
    { .op = TN_OP_INPUT, .name = "Input", .kind = TN_OPK_LEAF, .arity = 0, .infer = tn__infer_leaf, .label = tn__label_input, \
                      .flags = TN_OPF_NO_KERNEL }, \
    { .op = TN_OP_CONSTANT, .name = "Constant", .kind = TN_OPK_LEAF, .arity = 0, .infer = tn__infer_leaf, .label = tn__label_constant, \
                         .flags = TN_OPF_NO_KERNEL }, \
    { .op = TN_OP_SHARED, .name = "Shared", .kind = TN_OPK_LEAF, .arity = 0, .infer = tn__infer_leaf, .label = tn__label_input, \
                       .flags = TN_OPF_NO_KERNEL }, \
    { .op = TN_OP_PROJ, .name = "Proj", .kind = TN_OPK_OTHER, .arity = 1, .infer = tn__infer_proj, .label = tn__label_proj, \
                     .vjp = tn__proj_vjp, .jvp = tn__proj_jvp, .flags = TN_OPF_NO_KERNEL },

/* >>grad_helpers ====================================================== */
/* What the gradient rules of many ops share (the rules
   themselves live with their ops in tensor_ops.h, reached through the op
   table's vjp and jvp; the drivers are the >>grad section). Gradients are
   built with the public constructors, in the graph of the node. */

/* The tn_grad or tn_rop pass running on this thread (0: none), so values a
   multi-output node keeps for its outputs between visits (the >>custom
   section) are never read by a later pass after a failed one. */
static TN__THREAD_LOCAL uint64_t tn__gpass_cur, tn__gpass_last;

static const char *tn__gname(const tn_var *v, char buf[64]) {
    if (v && v->name) return v->name;
    snprintf(buf, 64, "<unnamed var %d>", v ? v->id : -1);
    return buf;
}

/* A failed constructor's error, or an internal one naming the node. */
static tn_result tn__gfail(const char *what, const tn_var *node) {
    char nb[64];
    tn_result r = tn_last_result();
    if (r != TN_OK) return r;
    return tn__err(TN_ERR_INTERNAL, "tn_grad: building the gradient of %s node '%s' failed", what, tn__gname(node, nb));
}

/* A 0-d constant of dtype t (a weak literal cast once; folded at compile). */
static tn_var *tn__glit(tn_var *like, tn_dtype t, double v) {
    tn_var *c = tn_lit(like, v);
    return c && c->type.dtype != t ? tn_cast(c, t) : c;
}
static tn_var *tn__gzeros_like(tn_var *x) { return x ? tn_fill(x, tn__glit(x, x->type.dtype, 0.0)) : NULL; }
static tn_var *tn__gmask(tn_var *cond, tn_var *g) { return tn_where(cond, g, tn_lit(g, 0.0)); }
static tn_var *tn__gscale(tn_var *g, double s) { return !g || s == 1.0 ? g : tn_mul(g, tn_lit(g, s)); }
static tn_var *tn__gadd(tn_var *a, tn_var *b) { return !a ? b : !b ? a : tn_add(a, b); }

/* The same op and params applied to new inputs (linear ops: their own JVP). */
static tn_var *tn__gclone(tn_var *node, tn_var *const *ins) {
    return tn__node(node->graph, node->op, node->n_in, ins, &node->p, NULL, "tn_rop");
}

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

/* >>ops: the op catalogue's bodies live in tensor_ops.h */
#define TENSOR_OPS_IMPLEMENTATION_HERE
#include "tensor_ops.h"
/* >>transfer ========================================================== */
/* Host <-> device copy ops.

   GPU_FROM_HOST and HOST_FROM_GPU are ordinary nodes, so placement can insert
   and cancel them, the profiler times them and debugprint shows them as
   Theano does. Device placement (node->device) decides where the output
   lives: the executor allocates it there. GPU_FROM_HOST on the device runs
   through the back end (tn_backend.run); HOST_FROM_GPU is a host node whose
   kernel asks the back end for a staged, stream-ordered copy (tn_device_ops.d2h),
   or falls back to the device ops' blocking copy. Without a back end both
   are host copies, so a graph that asks for a device result still runs. */

static tn_result tn__infer_transfer(const tn_var *node, const tn_type *in, tn_type *out) {
    (void)node;
    *out = in[0];
    return TN_OK;
}

/* Host kernel of both ops: a copy into out[0] (converting nothing: same type). */
static tn_result tn__cpu_transfer(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    const tn_device_ops *ops = tn__get_device_ops();
    if (node->op == TN_OP_HOST_FROM_GPU && in[0]->device != TN_HOST && out[0]->device == TN_HOST && ops && ops->d2h)
        return ops->d2h(node, in[0], out[0]);
    return tn_array_assign(out[0], in[0]);
}

/* GpuFromHost<None> as Theano prints it; with a context GpuFromHost<dev1>, or
   GpuToGpu<dev1> once placement has put its input on a device. */
static void tn__label_gpu_from_host(const tn_var *node, char *buf, size_t cap) {
    const char *c = node->ctx > 0 ? tn_context_name(node->ctx - 1) : NULL;
    bool d2d = node->n_in == 1 && node->in[0]->device != TN_HOST && node->device != TN_HOST;
    snprintf(buf, cap, "%s<%s>", d2d ? "GpuToGpu" : "GpuFromHost", c ? c : "None");
}
static void tn__label_host_from_gpu(const tn_var *node, char *buf, size_t cap) { (void)node; snprintf(buf, cap, "HostFromGpu(gpuarray)"); }

static tn_var *tn__transfer_node(tn_var *x, int op, const char *who) {
    if (!x) { tn__err_null(who, "x"); return NULL; }
    return tn__node(x->graph, op, 1, &x, NULL, NULL, who);
}

TN_API tn_var *tn_gpu_from_host(tn_var *x) { return tn__transfer_node(x, TN_OP_GPU_FROM_HOST, "tn_gpu_from_host"); }

/* x moved to context ctx (params i[0]: its index + 1; -1: the function's own
   context, which only the gradient below asks for). */
static tn_var *tn__transfer_ctx(tn_var *x, int64_t c, const char *who) {
    if (!x) { tn__err_null(who, "x"); return NULL; }
    tn_params p;
    memset(&p, 0, sizeof p);
    p.i[0] = c;
    return tn__node(x->graph, TN_OP_GPU_FROM_HOST, 1, &x, &p, NULL, who);
}

TN_API tn_var *tn_gpu_from_host_ctx(tn_var *x, const char *ctx) {
    const char *W = "tn_gpu_from_host_ctx";
    if (!ctx) { tn__err_null(W, "ctx"); return NULL; }
    int k = tn_context_get(ctx);
    if (k < 0) { tn__err_as(W, "tn_context_get"); return NULL; }
    return tn__transfer_ctx(x, k + 1, W);
}
TN_API tn_var *tn_host_from_gpu(tn_var *x) { return tn__transfer_node(x, TN_OP_HOST_FROM_GPU, "tn_host_from_gpu"); }

/* A copy: the gradient passes unchanged (its own placement is the optimizer's
   business), and so does a tangent (TN_OPF_LINEAR). */
static tn_result tn__transfer_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    gin[0] = g;
    /* a move between contexts: the gradient goes back to the input's */
    if (g && g->ctx != node->in[0]->ctx && g->ctx != 0)
        gin[0] = tn__transfer_ctx(g, node->in[0]->ctx ? node->in[0]->ctx : -1, "tn_grad");
    return !g || gin[0] ? TN_OK : tn_last_result();
}

/* >>transfer_rows: this part's rows of the op table (the >>ops_table section) */
#define TN__TRANSFER_OP_ROWS \
    { .op = TN_OP_GPU_FROM_HOST, .name = "GpuFromHost", .kind = TN_OPK_TRANSFER, .arity = 1, .infer = tn__infer_transfer, \
                              .cpu = tn__cpu_transfer, .label = tn__label_gpu_from_host, .vjp = tn__transfer_vjp, \
                              .flags = TN_OPF_LINEAR }, \
    { .op = TN_OP_HOST_FROM_GPU, .name = "HostFromGpu", .kind = TN_OPK_TRANSFER, .arity = 1, .infer = tn__infer_transfer, \
                              .cpu = tn__cpu_transfer, .label = tn__label_host_from_gpu, .vjp = tn__transfer_vjp, \
                              .flags = TN_OPF_LINEAR },

/* >>custom ============================================================ */
/* User ops, CPU side. A CUSTOM node's ext is an arena copy of the
   user's tn_custom_op (strings copied too), so the user's description may be
   a stack temporary. The GPU side (NVRTC compile and launch of cuda_source)
   is the >>cuda_custom section, included by tensor_cuda.h. */

#define TN__CUSTOM_WHY 512

/* A node's ext: the description first (tn_custom_of reads it), then the
   values kept between the visits of one tn_grad or tn_rop pass to a
   multi-output node: the gradients its projections received (the grad
   driver visits them before the node) and the tangents of its outputs
   (visited after). */
typedef struct tn__custom {
    tn_custom_op op;
    uint64_t gpass, rpass;        /* the passes gpend and rpend belong to */
    tn_var **gpend, **rpend;      /* n_out each, in the graph's arena */
} tn__custom;

static const tn_custom_op *tn__custom_op(const tn_var *node) {
    return node && node->op == TN_OP_CUSTOM ? (const tn_custom_op *)node->ext : NULL;
}

TN_API const tn_custom_op *tn_custom_of(const tn_var *node) { return tn__custom_op(node); }

static int tn__custom_nout(const tn_custom_op *op) { return op->n_outputs > 0 ? op->n_outputs : 1; }

/* The op's type rule: infer, or with value inputs infer_values (val[i] for
   each value input i: its value, NULL where unknown). */
static tn_result tn__custom_infer_values(const tn_var *node, const tn_type *in, const tn_array *const *val, tn_type *out) {
    const tn_custom_op *op = tn__custom_op(node);
    if (!op) return tn__err(TN_ERR_INTERNAL, "tn_custom: node %d carries no op description", node->id);
    char why[TN__CUSTOM_WHY] = "";
    int nout = tn__custom_nout(op);
    for (int k = 0; k < nout; k++) out[k] = (tn_type){ TN_DTYPE_NONE, 0, {0}, {0} };
    const tn_array *none[TN__MAX_VALUE_INPUTS] = { NULL };
    tn_result r = op->value_inputs ? op->infer_values(op, in, val ? val : none, out, why, sizeof why) : op->infer(op, in, out, why, sizeof why);
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

static tn_result tn__custom_infer(const tn_var *node, const tn_type *in, tn_type *out) {
    return tn__custom_infer_values(node, in, NULL, out);
}

static unsigned tn__custom_value_inputs(const tn_var *node) {
    const tn_custom_op *op = tn__custom_op(node);
    return op ? op->value_inputs : 0;
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
    tn__custom *x = (tn__custom *)tn__graph_alloc(g, sizeof *x);
    if (!x) return NULL;
    memset(x, 0, sizeof *x);
    tn_custom_op *c = &x->op;
    *c = *op;
    if (!(c->name = tn__graph_strdup(g, op->name))) return NULL;
    if (op->cuda_source && !(c->cuda_source = tn__graph_strdup(g, op->cuda_source))) return NULL;
    if (op->cuda_kernel && !(c->cuda_kernel = tn__graph_strdup(g, op->cuda_kernel))) return NULL;
    if (op->n_params > 0) {
        double *p = (double *)tn__graph_alloc(g, (size_t)op->n_params * sizeof *p);
        if (!p) return NULL;
        memcpy(p, op->params, (size_t)op->n_params * sizeof *p);
        c->params = p;
    } else {
        c->params = NULL;
    }
    return c;
}

TN_API tn_result tn_custom_multi(tn_graph *g, const tn_custom_op *op, int n, tn_var *const *in, tn_var **outs) {
    const char *W = "tn_custom";
    if (!op) return tn__err(TN_ERR_NULL, "%s: op is NULL", W);
    if (!outs) return tn__err(TN_ERR_NULL, "%s: op '%s': outs is NULL", W, op->name ? op->name : "?");
    if (!op->name || !op->name[0]) return tn__err(TN_ERR_INVALID, "%s: op has no name", W);
    if (!op->infer && !op->value_inputs) return tn__err(TN_ERR_NULL, "%s: op '%s' has no type rule (infer is NULL)", W, op->name);
    if (op->value_inputs && !op->infer_values)
        return tn__err(TN_ERR_NULL, "%s: op '%s' has value inputs but no type rule for them (infer_values is NULL)", W, op->name);
    if (!op->cpu && !(op->cuda_source && op->cuda_kernel))
        return tn__err(TN_ERR_INVALID, "%s: op '%s' has neither a CPU function nor CUDA source and kernel name", W, op->name);
    if ((op->cuda_source == NULL) != (op->cuda_kernel == NULL))
        return tn__err(TN_ERR_INVALID, "%s: op '%s': cuda_source and cuda_kernel go together", W, op->name);
    if (n < 0 || (n > 0 && !in)) return tn__err(TN_ERR_NULL, "%s: op '%s': inputs are NULL", W, op->name);
    if (op->n_inputs >= 0 && n != op->n_inputs)
        return tn__err(TN_ERR_NUM_INPUTS, "%s: op '%s' takes %d input%s, got %d", W, op->name, op->n_inputs, op->n_inputs == 1 ? "" : "s", n);
    if (op->n_outputs < 0) return tn__err(TN_ERR_INVALID, "%s: op '%s': n_outputs is %d", W, op->name, op->n_outputs);
    if (op->n_params < 0 || op->n_params > TN_CUSTOM_MAX_PARAMS || (op->n_params > 0 && !op->params))
        return tn__err(TN_ERR_INVALID, "%s: op '%s': n_params is %d with params %s (0 to %d values)", W, op->name, op->n_params,
                       op->params ? "given" : "NULL", TN_CUSTOM_MAX_PARAMS);
    if (op->cuda_abi != TN_CUSTOM_ABI_POINTERS && op->cuda_abi != TN_CUSTOM_ABI_STRIDED)
        return tn__err(TN_ERR_INVALID, "%s: op '%s': cuda_abi is %d (TN_CUSTOM_ABI_POINTERS or TN_CUSTOM_ABI_STRIDED)", W, op->name, op->cuda_abi);
    if (op->cuda_abi == TN_CUSTOM_ABI_STRIDED && n + tn__custom_nout(op) > TN_CUSTOM_MAX_STRIDED_OPERANDS)
        return tn__err(TN_ERR_INVALID, "%s: op '%s': %d operands; a TN_CUSTOM_ABI_STRIDED kernel takes at most %d", W, op->name,
                       n + tn__custom_nout(op), TN_CUSTOM_MAX_STRIDED_OPERANDS);
    for (int i = 0; i < n; i++)
        if (!in[i]) return tn__err_null(W, "op '%s': input %d", op->name, i);
    if (op->value_inputs >> (n < TN__MAX_VALUE_INPUTS ? n : TN__MAX_VALUE_INPUTS))
        return tn__err(TN_ERR_INVALID, "%s: op '%s': value_inputs 0x%x names inputs past its %d (value inputs are among the first %d)",
                       W, op->name, op->value_inputs, n, TN__MAX_VALUE_INPUTS);
    for (int i = 0; i < n; i++) {
        const tn_var *x = in[i];
        if (!(op->value_inputs >> i & 1)) continue;
        char tb[160];
        if (x->type.ndim != 0)
            return tn__err(TN_ERR_SHAPE, "%s: op '%s': value input %d ('%s') must be 0-d, got %s", W, op->name, i,
                           tn__var_label_name(x), tn__type_str(&x->type, tb));
        if (x->op != TN_OP_INPUT && x->op != TN_OP_SHARED && x->op != TN_OP_CONSTANT)
            return tn__err(TN_ERR_UNSUPPORTED, "%s: op '%s': value input %d ('%s') is computed in the graph (by %s); its value is "
                           "read before the graph runs, so it must be an input, a shared variable or a constant", W, op->name, i,
                           tn__var_label_name(x), tn__op_def(x->op) ? tn__op_def(x->op)->name : "?");
    }
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

static tn_result tn__custom_no_rule(const tn_var *node, const char *who, const char *field, const char *what) {
    const tn_custom_op *op = tn__custom_op(node);
    char nb[64];
    return tn__err(TN_ERR_UNSUPPORTED, "%s: custom op '%s' (node '%s') has no %s: give tn_custom_op.%s%s", who,
                   op && op->name ? op->name : "?", tn__gname(node, nb), what, field,
                   field[0] == 'g' ? ", or wrap the op in tn_stop_gradient or pass it in consider_constant to treat it as a constant" : "");
}

/* The node's outputs (the node itself or its projections), in the arena. */
static tn_var **tn__custom_outs(tn_var *node) {
    int nout = node->n_out > 0 ? node->n_out : 1;
    tn_var **o = (tn_var **)tn__graph_alloc(node->graph, (size_t)nout * sizeof *o);
    for (int k = 0; o && k < nout; k++)
        if (!(o[k] = nout == 1 ? node : tn__proj(node, k))) return NULL;
    return o;
}

/* A derivative the user's rule gave for `x` (NULL: zero): of x's rank, in x's graph. */
static tn_result tn__custom_check_deriv(const tn_var *node, const char *who, const char *what, int i, const tn_var *d, const tn_var *x) {
    const tn_custom_op *op = tn__custom_op(node);
    if (!d) return TN_OK;
    if (d->graph != node->graph)
        return tn__err(TN_ERR_GRAPH, "%s: custom op '%s': %s %d belongs to another graph", who, op->name, what, i);
    if (d->type.ndim != x->type.ndim) {
        char sa[128], sb[128];
        return tn__err(TN_ERR_SHAPE, "%s: custom op '%s': %s %d has shape %s, not of the rank of %s", who, op->name, what, i,
                       tn__shape_str(d->type.ndim, d->type.shape, sa), tn__shape_str(x->type.ndim, x->type.shape, sb));
    }
    return TN_OK;
}

/* The gradients reaching output k through its projection wait in the node
   (gpend) until the driver visits the node; the node's own accumulator gets
   a value so it is visited. */
static tn_result tn__custom_proj_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    tn_var *src = node->in[0];
    tn__custom *c = (tn__custom *)src->ext;
    int k = tn__p_proj_index(&node->p);
    if (!c->op.grad) return tn__custom_no_rule(src, "tn_grad", "grad", "gradient rule");
    if (c->gpass != tn__gpass_cur || !c->gpend) {
        c->gpend = (tn_var **)tn__graph_alloc(src->graph, (size_t)src->n_out * sizeof *c->gpend);
        if (!c->gpend) return tn__err(TN_ERR_OOM, "tn_grad: out of memory");
        memset(c->gpend, 0, (size_t)src->n_out * sizeof *c->gpend);
        c->gpass = tn__gpass_cur;
    }
    c->gpend[k] = tn__gadd(c->gpend[k], g);
    gin[0] = k == 0 ? g : tn__gzeros_like(tn__proj(src, 0));
    return c->gpend[k] && gin[0] ? TN_OK : tn__gfail("a custom op's output", node);
}

static tn_result tn__custom_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    tn__custom *c = (tn__custom *)node->ext;
    const tn_custom_op *op = &c->op;
    if (!op->grad) return tn__custom_no_rule(node, "tn_grad", "grad", "gradient rule");
    int nout = tn__custom_nout(op);
    tn_var **out = tn__custom_outs(node);
    tn_var **gout = (tn_var **)tn__graph_alloc(node->graph, (size_t)nout * sizeof *gout);
    if (!out || !gout) return tn__gfail("a custom op's outputs", node);
    bool pending = nout > 1 && c->gpend && c->gpass == tn__gpass_cur;
    for (int k = 0; k < nout; k++) {
        gout[k] = nout == 1 ? g : pending ? c->gpend[k] : NULL;
        if (!gout[k] && !(gout[k] = tn__gzeros_like(out[k]))) return tn__gfail("a custom op's output gradient", node);
    }
    c->gpend = NULL;
    char why[TN__CUSTOM_WHY] = "";
    tn_result r = op->grad(op, node->in, out, gout, need, gin, why, sizeof why);
    if (r != TN_OK)
        return tn__err(r, "tn_grad: custom op '%s': its grad failed: %s", op->name,
                       why[0] ? why : tn_last_result() == r ? tn_last_error() : tn_result_string(r));
    for (int i = 0; i < node->n_in; i++) {
        if (!need[i]) { gin[i] = NULL; continue; }
        if ((r = tn__custom_check_deriv(node, "tn_grad", "the gradient of input", i, gin[i], node->in[i])) != TN_OK) return r;
    }
    return TN_OK;
}

/* Forward mode: every output's tangent at the node's visit; the node's
   projections (visited after) read theirs from rpend. */
static tn_result tn__custom_jvp(tn_var *node, tn_var *const *t, tn_var **res) {
    tn__custom *c = (tn__custom *)node->ext;
    const tn_custom_op *op = &c->op;
    if (!op->rop) return tn__custom_no_rule(node, "tn_rop", "rop", "R-op (forward-mode rule)");
    int nout = tn__custom_nout(op), n = node->n_in;
    tn_var **out = tn__custom_outs(node);
    tn_var **ev = (tn_var **)tn__graph_alloc(node->graph, (size_t)(n > 0 ? n : 1) * sizeof *ev);
    tn_var **rout = (tn_var **)tn__graph_alloc(node->graph, (size_t)nout * sizeof *rout);
    if (!out || !ev || !rout) return tn__gfail("a custom op's outputs", node);
    for (int i = 0; i < n; i++)
        if (!(ev[i] = t[i] ? t[i] : tn__gzeros_like(node->in[i]))) return tn__gfail("a custom op's eval point", node);
    for (int k = 0; k < nout; k++) rout[k] = NULL;
    char why[TN__CUSTOM_WHY] = "";
    tn_result r = op->rop(op, node->in, out, ev, rout, why, sizeof why);
    if (r != TN_OK)
        return tn__err(r, "tn_rop: custom op '%s': its rop failed: %s", op->name,
                       why[0] ? why : tn_last_result() == r ? tn_last_error() : tn_result_string(r));
    for (int k = 0; k < nout; k++) {
        if ((r = tn__custom_check_deriv(node, "tn_rop", "the R-op of output", k, rout[k], out[k])) != TN_OK) return r;
        if (rout[k] && rout[k]->type.dtype != out[k]->type.dtype && !(rout[k] = tn_cast(rout[k], out[k]->type.dtype)))
            return tn__gfail("a tangent", node);
        if (!rout[k] && !(rout[k] = tn__gzeros_like(out[k]))) return tn__gfail("a tangent", node);
    }
    c->rpend = nout > 1 ? rout : NULL;
    c->rpass = tn__gpass_cur;
    *res = rout[0];
    return TN_OK;
}

static tn_result tn__custom_proj_jvp(tn_var *node, tn_var *const *t, tn_var **res) {
    (void)t;
    tn_var *src = node->in[0];
    tn__custom *c = (tn__custom *)src->ext;
    int k = tn__p_proj_index(&node->p);
    if (!c->rpend || c->rpass != tn__gpass_cur)
        return tn__err(TN_ERR_INTERNAL, "tn_rop: custom op '%s': output %d was reached before the op", c->op.name, k);
    *res = c->rpend[k];
    return TN_OK;
}

/* >>custom_rows: this part's rows of the op table (the >>ops_table section) */
#define TN__CUSTOM_OP_ROWS \
    { .op = TN_OP_CUSTOM, .name = "Custom", .kind = TN_OPK_OTHER, .arity = -1, .infer = tn__custom_infer, .cpu = tn__custom_cpu, \
                       .label = tn__custom_label, .vjp = tn__custom_vjp, .jvp = tn__custom_jvp, \
                       .value_inputs = tn__custom_value_inputs, .infer_values = tn__custom_infer_values },

/* >>scan ============================================================== */
/* Loops inside the graph (Theano's scan), with taps, updates and
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
   preallocated view structs whose data pointers move, its results are
   written straight into their rows and the next states where the step
   function can (tn__call_into), else borrowed and copied there; the loop's
   scratch (update states, running gradients) is kept between calls. Those
   view structs and scratch belong to the scan, so its loop runs under the
   scan's mutex: two functions holding the same scan, called from two
   threads, take turns in it. On a device that orders the walks, not the
   kernels they queue on the two threads' streams (nor replayed graphs).

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
    tn_func *dfn;                /* the step for a device loop: device placeholders and results (NULL: none) */
    tn_array *args;              /* n_ph view structs fed to fn */
    tn_array **argp;
    tn_array **resp;
    tn_var **gpend;              /* fwd, during tn_grad: gradients reaching each output through PROJ */
    tn_array **scr;              /* the loop's scratch (fwd: two buffers per update; bwd: one per output), */
    int n_scr;                   /* kept between calls: a captured loop (>>replay) bakes in their addresses */
    tn_array *dst;               /* where each step's results go (fwd: rows of the stacked outputs, the next */
    tn_array **dstp;             /* update states, written straight into; bwd: what each result is added to) */
    pthread_mutex_t mu;          /* one loop at a time: args, scratch and dst are the scan's */
};

/* Bumped whenever memory a captured scan loop may have baked in is freed or
   moved: a scan's scratch, or a step function's buffers when it plans again.
   The >>replay section keys a scan step's signature on it. */
static TN__ATOMIC(uint64_t) tn__scan_epoch;

static pthread_mutex_t tn__scan_lock = PTHREAD_MUTEX_INITIALIZER;
static tn__scan *tn__scan_list;

static void tn__scan_free_one(tn__scan *s) {
    if (!s) return;
    tn_function_free(s->fn);
    tn_function_free(s->dfn);
    for (int i = 0; i < s->n_scr; i++) tn_array_free(s->scr[i]);
    void *arrs[] = { s->seq_nt, s->seq_off, s->seq_lo, s->seq_hi, s->out_nt, s->out_off, s->out_len0, s->out_stacked,
                     s->init_in, s->tap, s->ns_upd, s->upd_ns, s->ph, s->res, s->res_ph, s->g_of_out, s->inner,
                     s->inner_in, s->inner_in_off, s->inner_t_off, s->args, s->argp, s->resp, s->gpend, s->scr, s->dst, s->dstp };
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) tn__free(arrs[i]);
    pthread_mutex_destroy(&s->mu);
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
static tn_result tn__scan_oom(const tn__scan *s) { return tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name); }

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
            *o = src >= 0 && src != INT32_MAX ? tt[s->inner_t_off[src] + tn__p_proj_index(&v->p)] : v->type;
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
    int p = 0;
    if (!pt || !rt) { r = tn__err(TN_ERR_OOM, "tn_scan '%s': out of memory", s->name); goto done; }
    if ((r = tn__scan_ph_types(s, node, in, pt)) != TN_OK) goto done;
    if ((r = tn__scan_res_types(s, pt, rt)) != TN_OK) goto done;
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
        if (T > INT64_MAX - s->out_len0[k]) {
            r = tn__err(TN_ERR_SHAPE, "tn_scan '%s': %lld steps after %lld initial rows of output %d are more rows than a "
                        "dimension holds", s->name, (long long)T, (long long)s->out_len0[k], k);
            goto done;
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

/* Where a loop's memory lives and how data moves there: the host's memcpy and
   CPU kernels, or a back end's copies and kernels queued on its stream
   (tensor_cuda.h), so a device loop never waits for the host. dst is
   contiguous in every call (executor outputs, their rows, scratch buffers). */
typedef struct tn__scan_mem {
    int device;                                              /* scratch buffers: TN_HOST or an ordinal */
    bool device_step;                                        /* run the step compiled for device arrays (dfn) */
    tn_result (*copy)(tn_array *dst, const tn_array *src);   /* same shape */
    tn_result (*acc)(tn_array *dst, const tn_array *src);    /* dst += src, same shape */
    tn_result (*acc_n)(int n, tn_array *const *dst, tn_array *const *src);   /* acc of n pairs at once (NULL: acc each) */
    tn_result (*zero)(tn_array *dst);
} tn__scan_mem;

static tn_result tn__scan_host_copy(tn_array *dst, const tn_array *src) {
    if (dst->dtype == src->dtype && tn_array_is_contiguous(dst) && tn_array_is_contiguous(src))
        memcpy(dst->data, src->data, tn_array_nbytes(dst));
    else
        tn__copy_strided(dst->dtype, dst->data, dst->strides, src->dtype, src->data, src->strides, dst->ndim, dst->shape);
    return TN_OK;
}

static tn_result tn__scan_copy(const tn__scan *s, const tn__scan_mem *m, tn_array *dst, const tn_array *src, const char *what, int k) {
    char a[128], b[128];
    if (!tn__scan_same_shape(dst, src))
        return tn__err(TN_ERR_SHAPE, "tn_scan '%s': %s %d has shape %s at this step but %s is expected (states and "
                       "outputs keep one shape)", s->name, what, k, tn__shape_str(src->ndim, src->shape, a),
                       tn__shape_str(dst->ndim, dst->shape, b));
    if (tn_array_size(dst) == 0) return TN_OK;
    return m->copy(dst, src);
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
    tn_ew_program p = { 2, idt, 1, &ins, 1, &oreg, &odt, NULL, NULL };
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
static tn_result tn__scan_put_init(const tn__scan *s, const tn__scan_mem *m, int k, const tn_array *init, tn_array *buf) {
    tn_array d, src;
    int len0 = s->out_len0[k];
    for (int r = 0; r < len0; r++) {
        tn__scan_row(&d, buf, r);
        if (s->out_stacked[k]) tn__scan_row(&src, init, init->shape[0] - len0 + r);
        else src = *init;
        tn_result e = tn__scan_copy(s, m, &d, &src, "initial value of output", k);
        if (e != TN_OK) return e;
    }
    return TN_OK;
}

/* Scratch buffer i of the loop, like `like` on m's device: the one kept from
   an earlier call when it matches, else a new one (what it holds is stale). */
static tn_array *tn__scan_scratch(tn__scan *s, const tn__scan_mem *m, int i, const tn_array *like) {
    if (i >= s->n_scr) {
        tn_array **n = (tn_array **)tn__realloc(s->scr, (size_t)(i + 1) * sizeof *n);
        if (!n) { tn__scan_oom(s); return NULL; }
        for (int j = s->n_scr; j <= i; j++) n[j] = NULL;
        s->scr = n;
        s->n_scr = i + 1;
    }
    tn_array *a = s->scr[i];
    if (a && a->dtype == like->dtype && a->device == m->device && tn__scan_same_shape(a, like)) return a;
    tn_array_free(a);
    tn__atomic_fetch_add(&tn__scan_epoch, 1);
    if (!(s->scr[i] = tn__array_alloc(like->dtype, like->ndim, like->shape, m->device))) tn__scan_oom(s);
    return s->scr[i];
}

/* s->dst and s->dstp: a view struct for each result, made once. */
static tn_result tn__scan_dst_alloc(tn__scan *s) {
    if (s->dst) return TN_OK;
    s->dst = (tn_array *)tn__calloc((size_t)s->n_res + 1, sizeof *s->dst);
    s->dstp = (tn_array **)tn__calloc((size_t)s->n_res + 1, sizeof *s->dstp);
    if (!s->dst || !s->dstp) { tn__free(s->dst); tn__free(s->dstp); s->dst = NULL; s->dstp = NULL; return tn__scan_oom(s); }
    for (int k = 0; k < s->n_res; k++) s->dstp[k] = &s->dst[k];
    return TN_OK;
}

static tn_result tn__scan_fwd(const tn_var *node, tn_array *const *in, tn_array *const *out, const tn__scan_mem *m) {
    tn__scan *s = (tn__scan *)node->ext;
    tn_func *fn = m->device_step ? s->dfn : s->fn;
    int64_t T = tn__scan_T(s, in);
    tn_result r = TN_OK;
    for (int k = 0; k < s->n_out; k++)
        if (s->init_in[k] >= 0 && (r = tn__scan_put_init(s, m, k, in[s->init_in[k]], out[k])) != TN_OK) return r;
    /* update states: two scratch buffers each, swapped every step */
    tn_array *st_s[8], **st = s->n_upd <= 4 ? st_s : (tn_array **)tn__calloc((size_t)s->n_upd * 2, sizeof *st);
    if (!st) return tn__scan_oom(s);
    for (int u = 0; u < s->n_upd && r == TN_OK; u++) {
        const tn_array *init = in[s->n_seq + s->n_init + s->upd_ns[u]];
        for (int h = 0; h < 2 && r == TN_OK; h++)
            if (!(st[2 * u + h] = tn__scan_scratch(s, m, 2 * u + h, init))) r = tn_last_result();
        if (r == TN_OK) r = tn__scan_copy(s, m, st[2 * u], init, "update", u);
    }
    tn_array *cur_s[4], **cur = s->n_upd <= 4 ? cur_s : (tn_array **)tn__calloc((size_t)s->n_upd + 1, sizeof *cur);
    if (!cur && r == TN_OK) r = tn__scan_oom(s);
    if (r == TN_OK) r = tn__scan_dst_alloc(s);
    for (int u = 0; u < s->n_upd && r == TN_OK; u++) cur[u] = st[2 * u];
    /* each step writes its results into their rows and the next states where
       its function can (tn__call_into); what it could not is copied there */
    for (int64_t t = 0; t < T && r == TN_OK; t++) {
        tn__scan_fill_args(s, s->args, in, out, cur, t);
        for (int k = 0; k < s->n_out; k++) tn__scan_row(&s->dst[k], out[k], s->out_len0[k] + t);
        for (int u = 0; u < s->n_upd; u++) s->dst[s->n_out + u] = *st[2 * u + (cur[u] == st[2 * u])];   /* the other buffer */
        if ((r = tn__call_into(fn, s->argp, s->resp, s->dstp)) != TN_OK) {
            r = tn__err(r, "tn_scan '%s': step %lld of %lld: %s", s->name, (long long)t, (long long)T, tn_last_error());
            break;
        }
        for (int k = 0; k < s->n_res && r == TN_OK; k++)
            if (s->resp[k]->data != s->dst[k].data)
                r = tn__scan_copy(s, m, &s->dst[k], s->resp[k], k < s->n_out ? "output" : "update", k < s->n_out ? k : k - s->n_out);
        for (int u = 0; u < s->n_upd && r == TN_OK; u++) cur[u] = st[2 * u + (cur[u] == st[2 * u])];
    }
    for (int u = 0; u < s->n_upd && r == TN_OK; u++) r = tn__scan_copy(s, m, out[s->n_out + u], cur[u], "update", u);
    if (st != st_s) tn__free(st);
    if (cur != cur_s) tn__free(cur);
    return r;
}

static tn_result tn__scan_zero(tn_array *a) {
    if (tn_array_size(a) > 0) memset(a->data, 0, tn_array_nbytes(a));   /* executor outputs are contiguous */
    return TN_OK;
}

static const tn__scan_mem tn__scan_host_mem = { TN_HOST, false, tn__scan_host_copy, tn__scan_acc, NULL, tn__scan_zero };

/* Backward: inputs are fwd's inputs, fwd's stacked outputs and their
   gradients; outputs the gradients of fwd's inputs. */
static tn_result tn__scan_bwd(const tn_var *node, tn_array *const *in, tn_array *const *out, const tn__scan_mem *m) {
    tn__scan *b = (tn__scan *)node->ext;
    const tn__scan *s = b->fwd;
    tn_func *fn = m->device_step ? b->dfn : b->fn;
    int nfin = node->n_in - 2 * s->n_out;
    tn_array *const *bufs = in + nfin, *const *gbufs = in + nfin + s->n_out;
    int64_t T = tn__scan_T(s, in);
    tn_result r = TN_OK;
    for (int j = 0; j < nfin && r == TN_OK; j++) r = m->zero(out[j]);
    if (r != TN_OK) return r;
    tn_array *dB_s[8], **dB = s->n_out <= 8 ? dB_s : (tn_array **)tn__calloc((size_t)s->n_out, sizeof *dB);
    if (!dB) return tn__scan_oom(s);
    for (int k = 0; k < s->n_out; k++) dB[k] = NULL;
    for (int k = 0; k < s->n_out && r == TN_OK; k++) {     /* the running gradients of the stacked outputs: scratch */
        if (b->g_of_out[k] < 0) continue;
        if (!(dB[k] = tn__scan_scratch(b, m, k, bufs[k]))) r = tn_last_result();
        else r = tn__scan_copy(s, m, dB[k], gbufs[k], "output gradient", k);
    }
    if (r == TN_OK) r = tn__scan_dst_alloc(b);
    int64_t stop = s->truncate > 0 && s->truncate < T ? T - s->truncate : 0;
    int nfph = s->n_ph;
    for (int64_t t = T - 1; t >= stop && r == TN_OK; t--) {
        tn__scan_fill_args(s, b->args, in, bufs, NULL, t);
        for (int k = 0; k < s->n_out; k++)
            if (b->g_of_out[k] >= 0) tn__scan_row(&b->args[b->g_of_out[k]], dB[k], s->out_len0[k] + t);
        if ((r = tn_call(fn, b->argp, b->resp)) != TN_OK) {
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
            b->dst[q] = d;
            if (!m->acc_n) r = m->acc(&d, b->resp[q]);
        }
        if (r == TN_OK && m->acc_n) r = m->acc_n(b->n_res, b->dstp, b->resp);    /* the step's sums at once */
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
            r = tn__scan_copy(s, m, &d, &src, "initial gradient", k);
        }
    }
    if (dB != dB_s) tn__free(dB);
    return r;
}

/* The loop with its memory where m says (tensor_cuda.h runs a device loop
   through this with its stream-ordered copies). */
static tn_result tn__scan_run(const tn_var *node, tn_array *const *in, tn_array *const *out, const tn__scan_mem *m) {
    const tn__scan *s = (const tn__scan *)node->ext;
    if (!s || !s->fn) return tn__err(TN_ERR_INTERNAL, "Scan: node without a compiled step");
    if (m->device_step && !s->dfn) return tn__err(TN_ERR_INTERNAL, "Scan '%s': placed on a device without a device step", s->name);
    tn__scan *w = (tn__scan *)s;        /* its loop state is taken for the call */
    pthread_mutex_lock(&w->mu);
    tn_result r = s->bwd ? tn__scan_bwd(node, in, out, m) : tn__scan_fwd(node, in, out, m);
    pthread_mutex_unlock(&w->mu);
    return r;
}

static tn_result tn__scan_cpu(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    return tn__scan_run(node, in, out, &tn__scan_host_mem);
}

/* Placement (tensor_cuda.h): a scan whose step was compiled for device
   arrays runs on the device, its loop queued on the back end's stream. */
TN_API bool tn__scan_device_ok(const tn_var *node) {
    const tn__scan *s = node->op == TN_OP_SCAN ? (const tn__scan *)node->ext : NULL;
    return s && s->dfn;
}

/* The step function a device loop of node calls (NULL: none). */
static tn_func *tn__scan_device_fn(const tn_var *node) {
    const tn__scan *s = node->op == TN_OP_SCAN ? (const tn__scan *)node->ext : NULL;
    return s ? s->dfn : NULL;
}

/* >>scan_rows: this part's rows of the op table (the >>ops_table section); its
   gradient is the >>scan_grad section's (no forward mode). */
#define TN__SCAN_OP_ROWS \
    { .op = TN_OP_SCAN, .name = "Scan", .kind = TN_OPK_OTHER, .arity = -1, .infer = tn__scan_infer, .cpu = tn__scan_cpu, \
                     .label = tn__scan_label, .vjp = tn__scan_vjp },

/* >>scan_build ----------------------------------------------------------- */

typedef struct tn__scan_b {      /* build-time state of tn_scan */
    tn__scan *s;
    tn_graph *g;
    tn_var **ns;                 /* outer non_sequences (user's, then captured and hoisted) */
    int cap_ns;
    int *phidx;                  /* by var id: placeholder index or -1 */
    int n_idx;
} tn__scan_b;

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
    tn_var *c = v->op == TN_OP_PROJ ? tn__proj(ins[0], tn__p_proj_index(&v->p))
                                    : tn__node_multi(v->graph, v->op, v->n_in, ins, &v->p, v->ext, v->n_out, "tn_scan");
    if (ins != ins_s) tn__free(ins);
    if (c) { c->flags = (v->flags & ~(unsigned)TN_VAR_NO_TEST_VALUE) | (c->flags & TN_VAR_NO_TEST_VALUE); c->name = v->name; }
    return c;
}

static tn_result tn__scan_add_ns(tn__scan_b *b, tn_var *outer, tn_var *ph) {
    tn__scan *s = b->s;
    if (s->n_ns == b->cap_ns) {
        int cap = b->cap_ns, cap_upd = b->cap_ns;
        tn_var **n = (tn_var **)tn__grow(b->ns, &cap, s->n_ns + 1, 8, sizeof *n);
        int *u = (int *)tn__grow(s->ns_upd, &cap_upd, s->n_ns + 1, 8, sizeof *u);
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
    tn_var **inner = NULL, **freev = NULL, **map = NULL, **lift = NULL, **map2;
    int ni = 0, nf = 0, nl = 0, nvar_ph = s->n_ph - s->n_ns;
    uint8_t *inv = NULL, *want;
    tn_result r = tn__scan_collect(b, first_id, &inner, &ni, &freev, &nf);
    if (r != TN_OK) return r;
    int nv = tn__graph_nvars(b->g);
    inv = (uint8_t *)tn__calloc((size_t)nv + 1, 1);       /* 1 invariant, 2 variant (by id) */
    lift = (tn_var **)tn__malloc(((size_t)ni + nf + 1) * sizeof *lift);
    map = (tn_var **)tn__calloc((size_t)nv + 1, sizeof *map);
    if (!inv || !lift || !map) { r = tn__scan_oom(s); goto done; }
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
    want = (uint8_t *)tn__calloc((size_t)nv + 1, 1);
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
    map2 = (tn_var **)tn__calloc((size_t)nv + 1, sizeof *map2);
    if (!map2) { r = tn__scan_oom(s); goto done; }
    for (int i = 0; i < nl && r == TN_OK; i++) {
        tn_var *x = lift[i], *outer = map[x->id] ? map[x->id] : x;
        char nm[96];
        snprintf(nm, sizeof nm, "%s", x->name ? x->name : "hoisted");
        tn_var *ph = tn_input(b->g, nm, x->type.dtype, x->type.ndim, x->type.shape, x->type.bcast);
        if (!ph) { r = tn_last_result(); continue; }
        ph->flags |= TN_VAR_NO_TEST_VALUE;
        if ((r = tn__scan_add_ns(b, outer, ph)) == TN_OK) map2[x->id] = ph;
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

/* Steps of f that compute on a device (transfers and views aside). */
static int tn__scan_device_work(const tn_func *f) {
    int n = 0;
    for (int k = 0; f && k < f->n_steps; k++) {
        const tn_var *v = f->steps[k].node;
        tn_op_kind kd = tn__op_kind(v->op);
        n += v->device != TN_HOST && f->backend && kd != TN_OPK_TRANSFER && kd != TN_OPK_VIEW;
    }
    return n;
}

/* With a device back end, the step a second time for a loop on the device:
   its placeholders marked as device arrays (placement keeps an input leaf's
   device) and its results wrapped as device outputs (the user's own
   tn_gpu_from_host, which placement cancels against device data), so a step
   runs with no transfer. Without device work the loop stays on the host;
   a failure here only leaves it there. */
static void tn__scan_compile_device(tn__scan *s, tn_graph *g) {
    const tn_backend *be = tn__get_backend();
    if (!be || !be->place || tn__scan_device_work(s->fn) == 0) return;
    tn_var **res = (tn_var **)tn__calloc((size_t)s->n_res + 1, sizeof *res);
    if (!res) { tn_clear_error(); return; }
    bool ok = true;
    for (int k = 0; k < s->n_res && ok; k++) ok = (res[k] = tn_gpu_from_host(s->res[k])) != NULL;
    if (ok) {
        for (int p = 0; p < s->n_ph; p++) s->ph[p]->device = 0;   /* any ordinal: placement takes its own */
        tn_func_desc fd = { .n_inputs = s->n_ph, .inputs = s->ph, .n_outputs = s->n_res, .outputs = res, .borrow = true,
                            .name = s->name, .on_unused_input = TN_UNUSED_IGNORE };
        s->dfn = tn_function(g, &fd);
        for (int p = 0; p < s->n_ph; p++) s->ph[p]->device = TN_HOST;
    }
    tn__free(res);
    if (s->dfn && tn__scan_device_work(s->dfn) == 0) { tn_function_free(s->dfn); s->dfn = NULL; }
    if (!s->dfn) tn_clear_error();
    else s->dfn->scan_step = true;
    tn__func_share_stream(s->dfn);      /* the steps run on the stream of the function calling the scan */
}

static tn_result tn__scan_compile(tn__scan *s, tn_graph *g) {
    tn_func_desc fd = { .n_inputs = s->n_ph, .inputs = s->ph, .n_outputs = s->n_res, .outputs = s->res, .borrow = true,
                        .name = s->name, .on_unused_input = TN_UNUSED_IGNORE };
    s->fn = tn_function(g, &fd);
    if (!s->fn) return tn__err(tn_last_result(), "tn_scan '%s': compiling the step: %s", s->name, tn_last_error());
    tn__func_share_stream(s->fn);
    tn__scan_compile_device(s, g);
    s->args = (tn_array *)tn__calloc((size_t)s->n_ph + 1, sizeof *s->args);
    s->argp = (tn_array **)tn__calloc((size_t)s->n_ph + 1, sizeof *s->argp);
    s->resp = (tn_array **)tn__calloc((size_t)s->n_res + 1, sizeof *s->resp);
    if (!s->args || !s->argp || !s->resp) return tn__scan_oom(s);
    for (int p = 0; p < s->n_ph; p++) s->argp[p] = &s->args[p];
    return TN_OK;
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
            p->flags |= TN_VAR_NO_TEST_VALUE;
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
            p->flags |= TN_VAR_NO_TEST_VALUE;
            s->ph[s->n_ph++] = p;
        }
    }
    s->n_init = n_init;
    for (int i = 0; i < d->n_non_sequences; i++) {
        tn_var *v = d->non_sequences[i];
        tn_var *p = tn_input(b->g, v->name ? v->name : "non_seq", v->type.dtype, v->type.ndim, v->type.shape, v->type.bcast);
        if (!p) return tn_last_result();
        p->flags |= TN_VAR_NO_TEST_VALUE;
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
    int p = 0, nu = 0, u = 0;
    if (!seqrows || !outrows || !outs || !ups) { r = tn__scan_oom(s); goto done; }
    for (int i = 0; i < nseq; i++) { seqrows[i] = &s->ph[p]; p += s->seq_nt[i]; }
    for (int k = 0; k < nout; k++) { outrows[k] = s->out_nt[k] ? &s->ph[p] : NULL; p += s->out_nt[k]; }
    {
        tn_scan_step st = { b->g, (tn_var *const *const *)seqrows, (tn_var *const *const *)outrows, s->ph + p, s->n_ph,
                            s->ph, outs, ups };
        r = d->step(&st, d->user);
    }
    if (r != TN_OK) {
        r = tn__err(r, "tn_scan '%s': the step callback failed: %s", s->name, tn_last_error());
        goto done;
    }
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
    pthread_mutex_init(&s->mu, NULL);
    s->g = g;
    snprintf(s->name, sizeof s->name, "%s", d->name ? d->name : "scan");
    s->n_steps = d->has_n_steps ? d->n_steps : -1;
    s->backwards = d->go_backwards;
    s->truncate = d->truncate_gradient;
    tn__scan_b b = { s, g, NULL, 0, NULL, 0 };
    int first_id = tn__graph_nvars(g), nin;
    tn_var **ins = NULL, *node = NULL;
    if ((r = tn__scan_setup(&b, d)) != TN_OK) goto fail;
    if ((r = tn__scan_run_step(&b, d)) != TN_OK) goto fail;
    if (s->n_upd && !updates) { r = tn__err(TN_ERR_NULL, "tn_scan '%s': the step makes %d updates but updates is NULL", s->name, s->n_upd); goto fail; }
    if ((r = tn__scan_hoist(&b, first_id)) != TN_OK) goto fail;
    if ((r = tn__scan_tables(&b)) != TN_OK) goto fail;
    if ((r = tn__scan_compile(s, g)) != TN_OK) goto fail;
    nin = s->n_seq + s->n_init + s->n_ns;
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
static tn_result tn__scan_proj_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    (void)need;
    tn_var *src = node->in[0];
    int k = tn__p_proj_index(&node->p);
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

/* A projection's rules are its source's: a custom op's or a scan's. */
static tn_result tn__proj_vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    if (node->in[0]->op == TN_OP_CUSTOM) return tn__custom_proj_vjp(node, g, need, gin);
    return tn__scan_proj_vjp(node, g, need, gin);
}
static tn_result tn__proj_jvp(tn_var *node, tn_var *const *t, tn_var **out) {
    tn_var *src = node->in[0];
    if (src->op == TN_OP_CUSTOM) return tn__custom_proj_jvp(node, t, out);
    const tn_op_def *def = tn__op_def(src->op);
    char nb[64];
    return tn__err(TN_ERR_UNSUPPORTED, "tn_rop: op %s (node '%s') has no forward-mode rule",
                   def && def->name ? def->name : "?", tn__gname(src, nb));
}

/* The gradient scan of s, built once: its step is tn_grad of s's step with
   known gradients of the step's outputs (new placeholders). */
static tn_result tn__scan_build_grad(tn__scan *s) {
    if (s->grad) return TN_OK;
    tn__scan *b = (tn__scan *)tn__calloc(1, sizeof *b);
    if (!b) return tn__scan_oom(s);
    pthread_mutex_init(&b->mu, NULL);
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
    int nk = 0, nw = 0;
    if (!b->ph || !b->g_of_out || !b->res || !b->res_ph || !wrt || !kv) { r = tn__scan_oom(s); goto done; }
    memcpy(b->ph, s->ph, (size_t)s->n_ph * sizeof *b->ph);
    b->n_ph = s->n_ph;
    for (int k = 0; k < s->n_out; k++) {
        b->g_of_out[k] = -1;
        tn_var *y = s->res[k];
        if (!tn_dtype_is_float(y->type.dtype)) continue;
        char nm[96];
        snprintf(nm, sizeof nm, "d_out%d", k);
        tn_var *gp = tn_input(s->g, nm, y->type.dtype, y->type.ndim, NULL, y->type.bcast);
        if (!gp) { r = tn_last_result(); goto done; }
        gp->flags |= TN_VAR_NO_TEST_VALUE;
        b->g_of_out[k] = b->n_ph;
        b->ph[b->n_ph++] = gp;
        kv[nk++] = y;
    }
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
    tn_var **ins = NULL, *gn;
    tn__scan *b;
    int nfin;
    if (s->n_upd > 0) {
        char names[256];
        size_t n = 0;
        names[0] = 0;
        for (int u = 0; u < s->n_upd && n < sizeof names - 8; u++)
            n += (size_t)snprintf(names + n, sizeof names - n, "%s'%s'", u ? ", " : "",
                                  tn__scan_vname(node->in[s->n_seq + s->n_init + s->upd_ns[u]]));
        r = tn__err(TN_ERR_UNSUPPORTED, "tn_grad: through scan '%s', whose step updates shared variable%s %s: not supported "
                    "(the gradient needs every step's value of the state, which a scan keeps only for its outputs); "
                    "carry the state as an output with an init (outputs_info) instead of an update", s->name,
                    s->n_upd == 1 ? "" : "s", names);
        goto done;
    }
    if (!gk) goto done;    /* no gradient reached an output */
    if ((r = tn__scan_build_grad(s)) != TN_OK) goto done;
    b = s->grad;
    if (!b->fn) goto done;   /* nothing float: no gradient */
    nfin = node->n_in;
    if (!(ins = (tn_var **)tn__malloc(((size_t)nfin + 2 * s->n_out + 1) * sizeof *ins))) { r = tn__scan_oom(s); goto done; }
    for (int j = 0; j < nfin; j++) ins[j] = node->in[j];
    for (int k = 0; k < s->n_out; k++) {
        tn_var *P = node->n_out == 1 ? node : tn__proj(node, k);
        tn_var *G = b->g_of_out[k] < 0 ? P : gk[k] ? gk[k] : tn__scan_zeros_like(P);
        if (!P || !G) { r = tn__err(tn_last_result(), "tn_grad: scan '%s': %s", s->name, tn_last_error()); goto done; }
        ins[nfin + k] = P;
        ins[nfin + s->n_out + k] = G;
    }
    gn = tn__node_multi(s->g, TN_OP_SCAN, nfin + 2 * s->n_out, ins, NULL, b, nfin, "tn_grad");
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

/* >>rewrite =========================================================== */
/* The optimizer: one rewrite engine and the passes built on it.

   tn__optimize(fg, roots) rewrites a function-private graph in place. Passes,
   in this order (DESIGN.md):
     1 canonicalize  x*1, x*-1, x/1, x**1, x**2 -> sqr, --x and negations,
                     x-c -> x+(-c), x+(-0), x-0, sum(alloc), shape-op pairs,
                     an Alloc read by an elementwise region (a node and
                     those below it only it reads) whose other leaves
                     already give its shape -> the Alloc's value; a scalar
                     given dims of 1 beside an input of the node's rank ->
                     the scalar; on integers also x+0, x-x, constant chains
     2 scan rules    on scan nodes (>>scan_rewrite)
     3 merge         CSE by hash-consing; equal constants become one node
     4 fold          nodes whose inputs are all constants run at compile time
     5 stabilize     log1p, expm1, softplus forms, log_softmax, logsumexp,
                     the logistic function written out and its gradient's forms;
                     then canonicalize again (stabilize leaves x+(-c) forms)
     6 specialize    dot + bias -> gemm / gemv (two rule groups; not a
                     vector's one-element bias that elementwise nodes read:
                     the addition fuses into their kernel); then the
                     size of an elementwise result -> the size of its inputs'
                     broadcast (after: it reads them); then merge
     7 place         the back end's placement pass (tn_backend.place), if any
     8 fuse          elementwise groups -> Composite (several outputs allowed);
                     a group feeding a reduction becomes its prologue; a
                     one-element node read by several kernels is computed
                     in each
     9 inplace       destroy map (node->inplace) where an input dies here
   TN_MODE_FAST_COMPILE runs merge, fold and place (data already on a device
   must stay readable).

   Numerics (DESIGN.md, README's fast_math). By default a rewrite computes
   what the graph as written computes, bit for bit, NaN, inf and the sign of
   zero included (the rules above; gemm: only the product's summation order
   is the kernel's, as for dot), or it is a stabilising rewrite, at least as
   accurate: log1p, expm1, softplus, log_softmax, logsumexp, sigmoid and
   the cancellations in its gradient (the stabilize pass), x**2 -> x*x (correctly rounded; pow is within an ulp) and
   sum(alloc(s)) -> s*n (rounded once). Those may differ from the formula as
   written by more than an ulp where it is inaccurate, and in a zero's sign.
   Value-changing algebra, rules or forms marked fast_math (TN__RQ_FAST_MATH,
   tn__rw_int_or_fast, c->fast_math), runs only with tn_config.fast_math:
   x+0 and x-(-0) -> x (-0 + 0 is +0), x-x -> 0 (inf - inf is NaN),
   x**0.5 -> sqrt(x) (pow(-0, .5) = +0, pow(-inf, .5) = inf), constant
   chains and their hoisting on floats (reassociation: (x+1)-1 is 0 in
   float32 at x = 1e-10, (x*1e30)*1e-30 overflows), and a gemm with a zero
   scale, alpha*dot + 0*C or 0*dot + C (a Gemm does not read C when beta is
   0, BLAS skips the product when alpha is 0: 0*NaN and 0*inf are lost).
   tests/test_rewrite_random.c checks this on random graphs.

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

/* >>rewrite_counters: which rewrite fired how often in this thread's last optimize */
#define TN__RW_MAX_NAMES 128
static TN__THREAD_LOCAL struct { const char *name; int n; } tn__rw_counts[TN__RW_MAX_NAMES];
static TN__THREAD_LOCAL int tn__rw_n_counts;

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
    bool fast_math;            /* tn_config.fast_math: value-changing algebra may run */
    const tn_place_args *pa;   /* the function's outputs, update targets and fusion limits */
    const tn_backend *be;      /* the back end placing and running the function (NULL: CPU only) */
} tn__rw;

static tn__ninfo *tn__ni(tn__rw *c, const tn_var *v) { return &c->ni[v->id]; }
static bool tn__rw_live(tn__rw *c, const tn_var *v) { return v->id < c->synced && c->ni[v->id].live; }
static int tn__rw_nuses(tn__rw *c, const tn_var *v) { return c->ni[v->id].n_use; }

static bool tn__rw_stk_reserve(tn__rw *c, int n) {
    if (n <= c->stk_cap) return true;
    tn_var **s = (tn_var **)tn__grow(c->stk, &c->stk_cap, n, 64, sizeof *s);
    if (!s) { c->oom = true; return false; }
    c->stk = s;
    return true;
}

/* After a failed allocation (c->oom) the map is no longer exact: the
   primitives that edit it stop, and the pass ends with TN_ERR_OOM. */
static void tn__rw_add_use(tn__rw *c, tn_var *x, tn_var *client, int k) {
    if (c->oom) return;
    tn__ninfo *X = tn__ni(c, x);
    if (X->n_use == X->cap_use) {
        tn__use *u = (tn__use *)tn__grow(X->use, &X->cap_use, X->n_use + 1, 2, sizeof *u);
        if (!u) { c->oom = true; return; }
        X->use = u;
    }
    tn__ni(c, client)->pos[k] = X->n_use;
    X->use[X->n_use++] = (tn__use){ client, k };
}

static void tn__rw_del_use(tn__rw *c, tn_var *x, tn_var *client, int k) {
    if (c->oom) return;
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
        int old = c->cap_ni;
        tn__ninfo *ni = (tn__ninfo *)tn__grow(c->ni, &c->cap_ni, n, 256, sizeof *ni);
        if (!ni) { c->oom = true; return; }
        memset(ni + old, 0, (size_t)(c->cap_ni - old) * sizeof *ni);
        c->ni = ni;
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
    while (!c->oom && tn__ni(c, x)->n_use) {
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
    TN__RQ_FAST_MATH = 1 << 3,    /* changes values (rounding, NaN, inf, -0): only with fast_math */
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

/* The value of a constant whose elements are all the same, bit for bit (so a
   zero's sign is known; small constants only). */
static bool tn__rw_const_value(const tn_var *v, double *out) {
    if (!v || v->op != TN_OP_CONSTANT || !v->value || v->value->device != TN_HOST) return false;
    int64_t n = tn_array_size(v->value);
    if (n < 1 || n > 1024) return false;
    double stackbuf[16], *buf = stackbuf;
    if (n > 16 && !(buf = (double *)tn__malloc((size_t)n * sizeof *buf))) return false;
    bool ok = tn_array_copy_to(v->value, TN_F64, buf, (size_t)n * sizeof *buf) == TN_OK && buf[0] == buf[0];
    for (int64_t i = 1; ok && i < n; i++) ok = !memcmp(&buf[i], &buf[0], sizeof buf[0]);
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
    if ((r->req & TN__RQ_FAST_MATH) && !c->fast_math) return false;
    if ((r->req & TN__RQ_IN0_ONE_USE) && (v->n_in < 1 || tn__rw_nuses(c, v->in[0]) != 1 || tn__ni(c, v->in[0])->n_root)) return false;
    c->mk = -1;
    if (r->cin == TN__ANY_IN) {
        for (int k = 0; k < v->n_in && c->mk < 0; k++) if (tn__rw_is_const(v->in[k], r->cval)) c->mk = k;
        if (c->mk < 0) return false;
    } else if (r->cin > 0) {
        if (r->cin > v->n_in || !tn__rw_is_const(v->in[r->cin - 1], r->cval)) return false;
        c->mk = r->cin - 1;
    }
    /* The rules rebuild the node from its other operand: the constant must not
       be what gives the node a dim (x + zeros((2, 3)) is not x when x turns out
       (1, 3) or (3, 3)), so that operand must know every dim the node knows. */
    if (c->mk >= 0 && v->n_in == 2) {
        const tn_type *o = &v->in[1 - c->mk]->type;
        if (o->ndim != v->type.ndim) return false;
        for (int d = 0; d < o->ndim; d++) if (v->type.shape[d] >= 0 && o->shape[d] != v->type.shape[d]) return false;
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
    static TN__THREAD_LOCAL unsigned char idx[TN_OP_COUNT + 1][MAXPER], cnt[TN_OP_COUNT + 1];
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

static bool tn__rw_is_ew(int op) { return tn__op_has(op, TN_OPF_ELEMWISE); }
static bool tn__rw_is_scalar_const(const tn_var *v) { double x; return v->type.ndim == 0 && tn__rw_const_value(v, &x); }
static tn_var *tn__rw_cast(tn_var *x, tn_dtype t) { return x && x->type.dtype != t ? tn_cast(x, t) : x; }

/* Algebra exact on integers (wrapping arithmetic is associative and has no
   NaN, inf or -0) that rounds differently or loses NaN, inf or -0 on floats:
   allowed on v by default only when v is an integer. */
static bool tn__rw_int_or_fast(const tn__rw *c, const tn_var *v) { return c->fast_math || !tn_dtype_is_float(v->type.dtype); }

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

static tn_var *tn__b_other(tn__rw *c, tn_var *v) { return v->in[1 - c->mk]; }           /* x*1 */
static tn_var *tn__b_in0(tn__rw *c, tn_var *v) { (void)c; return v->in[0]; }            /* x/1, x**1 */
static tn_var *tn__b_sqr(tn__rw *c, tn_var *v) { (void)c; return tn_sqr(tn__rw_cast(v->in[0], v->type.dtype)); }
static tn_var *tn__b_sqrt(tn__rw *c, tn_var *v) { (void)c; return tn_sqrt(tn__rw_cast(v->in[0], v->type.dtype)); }
static tn_var *tn__b_neg_other(tn__rw *c, tn_var *v) {                                    /* x*-1 */
    tn_var *x = tn__rw_cast(v->in[1 - c->mk], v->type.dtype);
    return x && x->type.dtype != TN_BOOL ? tn_neg(x) : NULL;
}

/* x + k (k = 0, added; for x - k, k negated) -> x: exact where the sum
   cannot be a zero of another sign than x: k is -0 (x + -0 is x for every
   x), or x is an integer. x + +0 turns -0 into +0: fast_math only. */
static tn_var *tn__rw_plus_zero(tn__rw *c, tn_var *x, double k) {
    return c->fast_math || !tn_dtype_is_float(x->type.dtype) || signbit(k) ? x : NULL;
}
static tn_var *tn__b_add_zero(tn__rw *c, tn_var *v) {                                    /* x+0, 0+x */
    double k = 0;
    tn__rw_const_value(v->in[c->mk], &k);
    return tn__rw_plus_zero(c, v->in[1 - c->mk], k);
}
static tn_var *tn__b_sub_zero(tn__rw *c, tn_var *v) {                                    /* x-0 */
    double k = 0;
    tn__rw_const_value(v->in[1], &k);
    return tn__rw_plus_zero(c, v->in[0], -k);
}

/* x - x: zeros of x's type. Exact for integers; on floats NaN and inf give
   NaN: fast_math only. */
static tn_var *tn__b_sub_self(tn__rw *c, tn_var *v) {
    if (v->in[0] != v->in[1] || !tn__rw_int_or_fast(c, v)) return NULL;
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

/* (x op c1) op c2 -> x op (c1 op c2) for add and mul. Reassociation: floats
   round differently ((x+1)-1 at x = 1e-10 is 0 in float32, x + 0 is not) and
   overflow differently ((x*1e30)*1e-30): fast_math only. Integers wrap, so
   the chain is exact where c1 op c2 is (|.| < 2^31 fits every int dtype). */
static tn_var *tn__b_chain_const(tn__rw *c, tn_var *v) {
    tn_var *u = v->in[0], *c2 = v->in[1];
    double a, b;
    if (u->op != v->op || !tn__rw_is_scalar_const(c2) || !tn__rw_is_scalar_const(u->in[1])) return NULL;
    if (u->in[0]->op == TN_OP_CONSTANT || u->type.dtype != v->type.dtype || u->in[1]->type.dtype != c2->type.dtype) return NULL;
    if (!tn__rw_int_or_fast(c, v)) return NULL;
    tn__rw_const_value(u->in[1], &a);
    tn__rw_const_value(c2, &b);
    double ab = tn__rw_apply(v->op, a, b);
    if (!tn_dtype_is_float(v->type.dtype) && (c2->type.dtype != v->type.dtype || fabs(a) >= 9007199254740992.0 || fabs(b) >= 9007199254740992.0 || fabs(ab) >= 2147483648.0))
        return NULL;
    tn_var *k = tn__rw_const_like(c->g, c2, ab);
    if (k && !(u->in[1]->flags & TN_VAR_WEAK)) k->flags &= ~(unsigned)TN_VAR_WEAK;
    return tn__rw_bin(v->op, u->in[0], k);
}

/* (x op c) op y -> (x op y) op c: constants rise to the top of a chain, where
   tn__b_chain_const combines them. One dtype throughout; a reassociation, so
   as tn__b_chain_const: integers by default, floats with fast_math. */
static tn_var *tn__b_chain_hoist(tn__rw *c, tn_var *v) {
    if (!tn__rw_int_or_fast(c, v)) return NULL;
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

/* x - c -> x + (-c) (exact: IEEE defines x - c as x + (-c)), so add chains
   collect every constant. An integer c must have a negation in its dtype. */
static tn_var *tn__b_sub_const(tn__rw *c, tn_var *v) {
    double k;
    tn_var *b = v->in[1];
    if (b->type.ndim != 0 || !tn__rw_const_value(b, &k) || v->in[0]->op == TN_OP_CONSTANT) return NULL;
    if (b->type.dtype == TN_BOOL || (!tn_dtype_is_float(b->type.dtype) && fabs(k) >= 2147483648.0)) return NULL;
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
        int a = tn__p_shuffle_src(&v->p, k);
        pat[k] = a < 0 ? -1 : inner ? tn__p_shuffle_src(&x->p, a) : a;
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
    const int64_t *shape = tn__p_shape(&v->p);
    bool ident = n == src->type.ndim;
    for (int d = 0; ident && d < n; d++) ident = shape[d] >= 0 && src->type.shape[d] == shape[d];
    if (ident) return src;
    if (x->op != TN_OP_RESHAPE) return NULL;
    /* Merging drops x's own reshape, which may fail at call time; only where it
       cannot fail apart from the merged one: src's size known (both were
       checked at build time), or both targets given in full (the same size). */
    bool known = true, given = true;
    for (int d = 0; d < src->type.ndim; d++) known = known && src->type.shape[d] >= 0;
    for (int d = 0; d < x->type.ndim; d++) given = given && tn__p_shape(&x->p)[d] >= 0;
    for (int d = 0; d < n; d++) given = given && shape[d] >= 0;
    return known || given ? tn_reshape(src, n, shape) : NULL;
}

/* sum(alloc(s, shape)) over some axes -> s * (count) + 0, broadcast to the
   rest. Stabilising: the product is rounded once, in float64 (exact for
   count < 2^29 from float32), so it is at least as accurate as the running
   sum (the same bits where the sum runs in float64 over float32 or float16
   data, as on the CPU). + 0: the sum starts from +0, so a sum of -0.0 is
   +0.0. count >= 1: an empty sum is 0 even for s = inf or NaN. */
static tn_var *tn__b_sum_alloc(tn__rw *c, tn_var *v) {
    tn_var *a = v->in[0];
    if (v->ext || (a->op != TN_OP_ALLOC && a->op != TN_OP_BROADCAST_TO) || a->in[0]->type.ndim != 0) return NULL;
    if (!tn_dtype_is_float(v->type.dtype)) return NULL;
    uint64_t mask = tn__p_red_mask(&v->p);
    double count = 1;
    for (int d = 0; d < a->type.ndim; d++) {
        if (!((mask >> d) & 1)) continue;
        if (a->type.shape[d] < 0) return NULL;
        count *= (double)a->type.shape[d];
    }
    if (count < 1) return NULL;
    tn_var *s = tn__rw_cast(a->in[0], TN_F64);
    tn_var *r = tn__rw_bin(TN_OP_MUL, s, tn__rw_scalar(c->g, TN_F64, count));
    r = tn__rw_cast(tn__rw_bin(TN_OP_ADD, r, tn__rw_scalar(c->g, TN_F64, 0.0)), v->type.dtype);
    if (!r || v->type.ndim == 0) return r;
    for (int d = 0; d < v->type.ndim; d++) if (v->type.shape[d] < 0) return NULL;
    return tn_alloc(r, v->type.ndim, v->type.shape);
}

/* Extents, for the Alloc rules below. ext(v, r) is the extent of v's dim r
   counted from the last (0: the last dim; r >= v's rank: 1). It is the
   NumPy broadcast of terms: an elementwise node's, that of its inputs' dims
   r; a fill's (Alloc with `like`), like's; a dimshuffle's, its source dim's
   (none for an 'x'); a dim the type knows, that number; a broadcastable
   dim, none (1). Broadcasting is associative, commutative and idempotent,
   with 1 as unit, so where the node ran, bcast(a, b) = b whenever every
   term of a is a term of b. A term is a (node, dim) pair or a known size. */
enum { TN__XSET_CAP = 48, TN__XSET_DEPTH = 8 };
typedef struct tn__xset { uint64_t t[TN__XSET_CAP]; int n; bool full; } tn__xset;
#define TN__XT_SIZE(k) ((1ull << 63) | (uint64_t)(k))
#define TN__XT_DIM(v, r) (((uint64_t)(v)->id << 8) | (uint64_t)(r))

static bool tn__xset_has(const tn__xset *s, uint64_t t) {
    for (int i = 0; i < s->n; i++) if (s->t[i] == t) return true;
    return false;
}
static void tn__xset_add(tn__xset *s, uint64_t t) {
    if (tn__xset_has(s, t)) return;
    if (s->n < TN__XSET_CAP) s->t[s->n++] = t; else s->full = true;
}

/* The terms of ext(v, r) into s. every: v's own term and each term on the
   way down as well (each is the broadcast of the terms below it, so adding
   it changes nothing): the most any comparison can find; else only the
   deepest terms reached. */
static void tn__rw_extent(const tn_var *v, int r, int depth, bool every, tn__xset *s) {
    if (r >= v->type.ndim) return;
    int d = v->type.ndim - 1 - r;
    int64_t k = v->type.shape[d];
    if (v->type.bcast[d] || k == 1) return;
    if (k >= 0) {
        tn__xset_add(s, TN__XT_SIZE(k));
        if (!every) return;
    }
    bool ew = tn__rw_is_ew(v->op) && v->n_out == 1, fill = v->op == TN_OP_ALLOC && v->n_in == 2;
    bool deeper = depth > 0 && (ew || fill || v->op == TN_OP_DIMSHUFFLE);
    if (every || !deeper) tn__xset_add(s, TN__XT_DIM(v, r));
    if (!deeper) return;
    if (v->op == TN_OP_DIMSHUFFLE) {
        int a = tn__p_shuffle_src(&v->p, d);
        if (a >= 0) tn__rw_extent(v->in[0], v->in[0]->type.ndim - 1 - a, depth - 1, every, s);
    } else if (fill) {
        tn__rw_extent(v->in[1], r, depth - 1, every, s);
    } else {
        for (int i = 0; i < v->n_in; i++) tn__rw_extent(v->in[i], r, depth - 1, every, s);
    }
}

/* y where it has v's dtype (a weak literal read in place of an array may
   type an elementwise node otherwise: a cast after it would round twice). */
static tn_var *tn__rw_same_dtype(tn_var *y, const tn_var *v) { return y && y->type.dtype == v->type.dtype ? y : NULL; }

/* The 0-d x of s = dimshuffle(x, 'x', ...) (a scalar given dims of 1), or NULL. */
static tn_var *tn__rw_xs_scalar(tn_var *s) {
    bool xs = s->op == TN_OP_DIMSHUFFLE && s->in[0]->type.ndim == 0;
    for (int k = 0; xs && k < s->type.ndim; k++) xs = tn__p_shuffle_src(&s->p, k) < 0;
    return xs ? s->in[0] : NULL;
}

/* An elementwise node reading a scalar given dims of 1 beside an input of
   its own rank reads the scalar: the same broadcast, one operand less (a
   constant becomes an immediate of the fused kernel), as mean's gradient
   1/n is written: dimshuffle(1, 'x') / Size. */
static tn_var *tn__b_elemwise_xs_scalar(tn__rw *c, tn_var *v) {
    if (!tn__rw_is_ew(v->op) || v->n_out != 1 || v->n_in > 8) return NULL;
    tn_var *in[8];
    int k = -1;
    bool full_rank = false;
    for (int i = 0; i < v->n_in; i++) {
        in[i] = v->in[i];
        if (k < 0 && tn__rw_xs_scalar(in[i])) k = i;
        else full_rank |= in[i]->type.ndim == v->type.ndim;
    }
    if (k < 0 || !full_rank) return NULL;
    in[k] = tn__rw_xs_scalar(in[k]);
    return tn__rw_same_dtype(tn__node(c->g, v->op, v->n_in, in, &v->p, v->ext, "optimizer"), v);
}

/* An elementwise region: v and the elementwise nodes below it that only it
   reads (each read once, no root), and the other nodes they read (leaves).
   Where every leaf is read where it was, each element of v is the same
   function of the leaves' elements at its broadcast index, whatever shapes
   the nodes inside have. */
enum { TN__REGION_NODES = 8, TN__REGION_LEAVES = 16 };
typedef struct tn__ew_region { tn_var *node[TN__REGION_NODES], *leaf[TN__REGION_LEAVES]; int n_node, n_leaf; bool full; } tn__ew_region;

static void tn__rw_region(tn__rw *c, tn_var *v, tn__ew_region *R) {
    R->node[R->n_node++] = v;
    for (int i = 0; i < v->n_in; i++) {
        tn_var *x = v->in[i];
        if (tn__rw_is_ew(x->op) && x->n_out == 1 && tn__rw_nuses(c, x) == 1 && !tn__ni(c, x)->n_root &&
            R->n_node < TN__REGION_NODES) {
            tn__rw_region(c, x, R);
            continue;
        }
        bool seen = false;
        for (int j = 0; j < R->n_leaf && !seen; j++) seen = R->leaf[j] == x;
        if (seen) continue;
        if (R->n_leaf == TN__REGION_LEAVES) R->full = true;
        else R->leaf[R->n_leaf++] = x;
    }
}

/* Every dim of x broadcasts into the broadcast of the region's leaves other
   than x: each term of x's extent is one of theirs. */
static bool tn__rw_covered(const tn__ew_region *R, const tn_var *x) {
    for (int r = 0; r < x->type.ndim; r++) {
        tn__xset a = { .n = 0 }, b = { .n = 0 };
        tn__rw_extent(x, r, TN__XSET_DEPTH, false, &a);
        if (a.full) return false;
        if (!a.n) continue;
        for (int i = 0; i < R->n_leaf; i++)
            if (R->leaf[i] != x) tn__rw_extent(R->leaf[i], r, TN__XSET_DEPTH, true, &b);
        for (int i = 0; i < a.n; i++) if (!tn__xset_has(&b, a.t[i])) return false;
    }
    return true;
}

/* The region's node v again, with a read as s (nodes of the region rebuilt). */
static tn_var *tn__rw_region_subst(tn__rw *c, const tn__ew_region *R, tn_var *v, const tn_var *a, tn_var *s) {
    tn_var *in[TN__REGION_LEAVES];
    if (v->n_in > TN__REGION_LEAVES) return NULL;
    for (int i = 0; i < v->n_in; i++) {
        tn_var *x = v->in[i];
        bool inner = false;
        for (int j = 1; j < R->n_node && !inner; j++) inner = R->node[j] == x;
        in[i] = x == a ? s : inner ? tn__rw_region_subst(c, R, x, a, s) : x;
        if (!in[i]) return NULL;
    }
    return tn__rw_same_dtype(tn__node(c->g, v->op, v->n_in, in, &v->p, v->ext, "optimizer"), v);
}

/* An elementwise region reading an Alloc whose shape its other leaves
   already give: reads the Alloc's value instead (Theano's
   local_alloc_elemwise, over a region: a gradient's Alloc often meets the
   inputs that give its shape a few nodes up), so no kernel writes the
   broadcast array, and the value (a scalar, often a constant) joins the
   fused kernel. The Alloc's shape broadcasts into the other leaves'
   (tn__rw_covered), so the output's shape is theirs either way, and every
   element the same. A 0-d value under a dimshuffle of 'x's is read as is
   where another leaf has the output's rank; a value of lower rank than the
   output gets leading 'x' dims where none has. */
static tn_var *tn__b_alloc_elemwise(tn__rw *c, tn_var *v) {
    if (!tn__rw_is_ew(v->op) || v->n_out != 1) return NULL;
    tn__ew_region R = { .n_node = 0 };
    tn__rw_region(c, v, &R);
    if (R.full) return NULL;
    tn_var *a = NULL;
    for (int i = 0; i < R.n_leaf && !a; i++)
        if (R.leaf[i]->op == TN_OP_ALLOC && tn__rw_covered(&R, R.leaf[i])) a = R.leaf[i];
    if (!a) return NULL;
    tn_var *s = a->in[0];
    bool full_rank = false;
    for (int i = 0; i < R.n_leaf; i++) full_rank |= R.leaf[i] != a && R.leaf[i]->type.ndim == v->type.ndim;
    if (full_rank && tn__rw_xs_scalar(s)) s = tn__rw_xs_scalar(s);
    if (!full_rank && s->type.ndim < v->type.ndim) {
        int pat[TN_MAX_DIMS], lead = v->type.ndim - s->type.ndim;
        for (int k = 0; k < v->type.ndim; k++) pat[k] = k < lead ? -1 : k - lead;
        s = tn_dimshuffle(s, v->type.ndim, pat);
        if (!s) return NULL;
    }
    return tn__rw_region_subst(c, &R, v, a, s);
}

/* A program over n inputs whose one output is in[0] cast to t: the prologue
   of a reduction that reads only its input's shape (Size), which is then the
   broadcast of the inputs' shapes. NULL when out of memory. */
static tn_ew_program *tn__rw_shape_program(tn__rw *c, tn_var *const *in, int n, tn_dtype t) {
    tn_ew_program *P = (tn_ew_program *)tn__graph_alloc(c->g, sizeof *P);
    tn_dtype *dt = (tn_dtype *)tn__graph_alloc(c->g, (size_t)(n + 1) * sizeof *dt);
    tn_ew_instr *cast = (tn_ew_instr *)tn__graph_alloc(c->g, sizeof *cast);
    int32_t *oreg = (int32_t *)tn__graph_alloc(c->g, sizeof *oreg);
    if (!P || !dt || !cast || !oreg) { c->oom = true; return NULL; }
    for (int i = 0; i < n; i++) dt[i] = in[i]->type.dtype;
    bool conv = dt[0] != t;
    *cast = (tn_ew_instr){ .op = TN_OP_CAST, .dtype = (int8_t)t, .in_dtype = (int8_t)dt[0], .a = 0, .b = -1, .c = -1 };
    *oreg = conv ? n : 0;
    dt[n] = t;
    *P = (tn_ew_program){ n, dt, conv ? 1 : 0, cast, 1, oreg, &dt[n], NULL, NULL };
    return P;
}

/* Size of an elementwise result is the size of the broadcast of its inputs
   (NumPy's rule at run time, a dim of 1 included), so it reads those
   instead: Size(f(a, b)) -> Size over the broadcast of a and b (the Size's
   prologue form, tensor_ops.h >>size), the same count and dtype, and the
   result is no longer kept alive for its shape (mean's gradient reads
   Size(xent)). Inputs that broadcast wrongly fail in the Size's type rule
   as in the node's. 0-d inputs set no dim and are left out (one stays). */
static tn_var *tn__b_size_elemwise(tn__rw *c, tn_var *v) {
    enum { CAP = 16 };
    tn_var *in[CAP], *scalar = NULL;
    int n = 0;
    bool any = false;
    for (int i = 0; i < (v->ext ? v->n_in : 1); i++) {
        tn_var *x = v->in[i];
        bool ew = tn__rw_is_ew(x->op) && x->n_out == 1;
        any |= ew;
        for (int k = 0; k < (ew ? x->n_in : 1); k++) {
            tn_var *a = ew ? x->in[k] : x;
            bool seen = a->type.ndim == 0;
            if (seen && !scalar) scalar = a;
            for (int j = 0; j < n && !seen; j++) seen = in[j] == a;
            if (seen) continue;
            if (n == CAP) return NULL;
            in[n++] = a;
        }
    }
    if (!any) return NULL;
    if (n == 0) in[n++] = scalar;
    tn_dtype t = v->ext ? ((const tn_ew_program *)v->ext)->out_dtype[0] : v->in[0]->type.dtype;
    tn_ew_program *P = tn__rw_shape_program(c, in, n, t);
    return P ? tn__node(c->g, TN_OP_SIZE, n, in, &v->p, P, "optimizer") : NULL;
}

static const tn__rewrite tn__canon_rules[] = {
    { "local_commute_const", { TN_OP_ADD, TN_OP_MUL }, 0, 0, 0, tn__b_commute },
    { "local_mul_by_one", { TN_OP_MUL }, TN__ANY_IN, 1.0, 0, tn__b_other },
    { "local_mul_by_minus_one", { TN_OP_MUL }, TN__ANY_IN, -1.0, TN__RQ_NOT_BOOL, tn__b_neg_other },
    { "local_add_zero", { TN_OP_ADD }, TN__ANY_IN, 0.0, 0, tn__b_add_zero },
    { "local_sub_zero", { TN_OP_SUB }, 2, 0.0, 0, tn__b_sub_zero },
    { "local_div_one", { TN_OP_TRUE_DIV }, 2, 1.0, 0, tn__b_in0 },
    { "local_pow_one", { TN_OP_POW }, 2, 1.0, 0, tn__b_in0 },
    /* x*x is the correctly rounded square; pow's is within an ulp of it */
    { "local_pow_two", { TN_OP_POW }, 2, 2.0, 0, tn__b_sqr },
    /* pow(-0, .5) is +0 and pow(-inf, .5) is inf; sqrt gives -0 and NaN */
    { "local_pow_half", { TN_OP_POW }, 2, 0.5, TN__RQ_FLOAT | TN__RQ_FAST_MATH, tn__b_sqrt },
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
    { "local_alloc_elemwise", { TN__ANY_OP }, 0, 0, 0, tn__b_alloc_elemwise },
    { "local_elemwise_xs_scalar", { TN__ANY_OP }, 0, 0, 0, tn__b_elemwise_xs_scalar },
};
/* After specialize: a shape-only read is still a use, and the rules that
   count uses (gemm: a dot read once) see the graph without it first. */
static const tn__rewrite tn__shape_rules[] = {
    { "local_size_elemwise", { TN_OP_SIZE }, 0, 0, 0, tn__b_size_elemwise },
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
/* The gradient of log(softmax(x)) as tn_grad writes it: s * (q - sum(q*s))
   with q = G / s (log's rule, then softmax's), s = softmax(x) -> G - s *
   sum(G): exact algebra with no division, so finite where s underflows to 0
   (logits far apart, 0/0 before); rounded fewer times (Theano's
   local_log_softmax_grad; with local_log_softmax, the negative
   log-likelihood of softmax is the crossentropy_softmax_1hot form). */
static tn_var *tn__b_log_softmax_grad(tn__rw *c, tn_var *v) {
    for (int k = 0; k < 2; k++) {
        tn_var *s = v->in[k], *d = v->in[1 - k], *q, *sm, *m;
        if (s->op != TN_OP_SOFTMAX || s->ext || d->op != TN_OP_SUB || s->type.dtype != v->type.dtype) continue;
        q = d->in[0]; sm = d->in[1];
        if (q->op != TN_OP_TRUE_DIV || q->in[1] != s || q->type.dtype != v->type.dtype) continue;
        if (sm->op != TN_OP_SUM || sm->ext || !tn__p_red_keepdims(&sm->p) || tn__p_red_mask(&sm->p) != (uint64_t)1 << tn__p_axis(&s->p)) continue;
        m = sm->in[0];
        if (m->op != TN_OP_MUL || !((m->in[0] == q && m->in[1] == s) || (m->in[1] == q && m->in[0] == s))) continue;
        tn_var *G = q->in[0];
        if (G->type.dtype != v->type.dtype) continue;
        int axis = tn__p_axis(&s->p);
        (void)c;
        return tn__rw_bin(TN_OP_SUB, G, tn__rw_bin(TN_OP_MUL, s, tn_sum(G, &axis, 1, true)));
    }
    return NULL;
}
static tn_var *tn__b_logsumexp(tn__rw *c, tn_var *v) {
    tn_var *s = v->in[0];
    if (s->op != TN_OP_SUM || s->ext || s->in[0]->op != TN_OP_EXP) return NULL;
    return tn__node(c->g, TN_OP_LOGSUMEXP, 1, &s->in[0]->in[0], &s->p, NULL, "optimizer");
}

/* The logistic function written out, and what its gradient makes of it
   (Theano's sigm.py rules). e ~ f: the same node, or the same op of the same
   inputs through negations (rewrites make copies that merge has not met). */
static bool tn__rw_alike(const tn_var *e, const tn_var *f, int depth) {
    if (e == f) return true;
    if (depth <= 0 || e->op != f->op || e->n_in != 1 || f->n_in != 1 || e->type.dtype != f->type.dtype) return false;
    if (e->op != TN_OP_NEG && e->op != TN_OP_EXP && e->op != TN_OP_SIGMOID) return false;
    return tn__rw_alike(e->in[0], f->in[0], depth - 1);
}
/* d = exp(u) + 1 or 1 + exp(u), one float dtype: its exp(u), else NULL. */
static tn_var *tn__rw_1p_exp(const tn_var *d) {
    if (d->op != TN_OP_ADD || !tn_dtype_is_float(d->type.dtype)) return NULL;
    tn_var *e = tn__rw_other_if_const(d, 1.0);
    return e && e->op == TN_OP_EXP && e->type.dtype == d->type.dtype && e->in[0]->type.dtype == d->type.dtype ? e : NULL;
}
/* 1 / (1 + exp(u)) -> sigmoid(-u): the tutorial's p_1 = 1/(1+exp(-z)) is
   sigmoid(z). The same bits where u <= 0; where u > 0 sigmoid computes
   exp(-u)/(1+exp(-u)), as accurate. */
static tn_var *tn__b_inv_1p_exp(tn__rw *c, tn_var *v) {
    (void)c;
    tn_var *e = tn__rw_1p_exp(v->in[1]);
    return e && e->type.dtype == v->type.dtype ? tn_sigmoid(tn_neg(e->in[0])) : NULL;
}
/* 1 - sigmoid(x) -> sigmoid(-x): no cancellation (1 - sigmoid(30) is off by
   1e-3 in float64, 1 - sigmoid(20) is 0 in float32). Left to
   local_log_1m_sigmoid where only logs read it. */
static tn_var *tn__b_1m_sigmoid(tn__rw *c, tn_var *v) {
    tn_var *s = v->in[1];
    if (s->op != TN_OP_SIGMOID || s->type.dtype != v->type.dtype) return NULL;
    const tn__ninfo *ni = tn__ni(c, v);
    bool only_logs = ni->n_root == 0 && ni->n_use > 0;
    for (int k = 0; k < ni->n_use && only_logs; k++) only_logs = ni->use[k].c->op == TN_OP_LOG;
    return only_logs ? NULL : tn_sigmoid(tn_neg(s->in[0]));
}
/* exp(u) / (1 + exp(u)) -> sigmoid(u), and (X / (1 + exp(u))) * exp(u) ->
   X * sigmoid(u), the form the gradient of 1/(1+exp(u)) takes: finite where
   exp(u) overflows (inf/inf), and rounded fewer times. */
static tn_var *tn__b_exp_over_1p_exp(tn__rw *c, tn_var *v) {
    (void)c;
    if (v->op == TN_OP_TRUE_DIV) {
        tn_var *e = tn__rw_1p_exp(v->in[1]);
        return e && tn__rw_alike(e, v->in[0], 2) ? tn_sigmoid(e->in[0]) : NULL;
    }
    for (int k = 0; k < 2; k++) {
        tn_var *q = v->in[k], *f = v->in[1 - k], *e;
        if (q->op != TN_OP_TRUE_DIV || !(e = tn__rw_1p_exp(q->in[1])) || !tn__rw_alike(e, f, 2)) continue;
        if (q->type.dtype != e->type.dtype || q->in[0]->type.dtype != e->type.dtype) continue;
        return tn__rw_bin(TN_OP_MUL, q->in[0], tn_sigmoid(e->in[0]));
    }
    return NULL;
}
/* T * s for a sigmoid s where T divides by the same sigmoid somewhere in a
   tree of +, -, *, / and negations: T*s with each X/s cancelled to X, and the
   other terms of a sum multiplied by s. The gradient of -y log(p) - (1-y)
   log(1-p), p = sigmoid(z), is (-y/p + (1-y)/(1-p)) * p * (1-p): this makes it
   -y*(1-p) + (1-y)*p, finite where p rounds to 0 or 1. Exact algebra, rounded
   no more often than before; the value where the division was by a sigmoid
   that underflowed to 0 (0/0, x/0 * 0) is the limit. NULL: nothing cancels. */
static tn_var *tn__rw_cancel(tn_var *t, tn_var *s, int depth) {
    if (depth <= 0 || t->type.dtype != s->type.dtype) return NULL;
    tn_var *a, *b;
    switch (t->op) {
    case TN_OP_TRUE_DIV:
        if (t->in[1]->op == TN_OP_SIGMOID && tn__rw_alike(t->in[1], s, 3)) return t->in[0];
        return (a = tn__rw_cancel(t->in[0], s, depth - 1)) ? tn__rw_bin(TN_OP_TRUE_DIV, a, t->in[1]) : NULL;
    case TN_OP_NEG:
        return (a = tn__rw_cancel(t->in[0], s, depth - 1)) ? tn_neg(a) : NULL;
    case TN_OP_MUL:
        if ((a = tn__rw_cancel(t->in[0], s, depth - 1))) return tn__rw_bin(TN_OP_MUL, a, t->in[1]);
        if ((b = tn__rw_cancel(t->in[1], s, depth - 1))) return tn__rw_bin(TN_OP_MUL, t->in[0], b);
        return NULL;
    case TN_OP_ADD: case TN_OP_SUB:
        a = tn__rw_cancel(t->in[0], s, depth - 1);
        b = tn__rw_cancel(t->in[1], s, depth - 1);
        if (!a && !b) return NULL;
        return tn__rw_bin(t->op, a ? a : tn__rw_bin(TN_OP_MUL, t->in[0], s), b ? b : tn__rw_bin(TN_OP_MUL, t->in[1], s));
    default:
        return NULL;
    }
}
static tn_var *tn__b_mul_sigmoid_cancel(tn__rw *c, tn_var *v) {
    (void)c;
    if (!tn_dtype_is_float(v->type.dtype)) return NULL;
    for (int k = 0; k < 2; k++) {
        tn_var *r;
        if (v->in[k]->op == TN_OP_SIGMOID && (r = tn__rw_cancel(v->in[1 - k], v->in[k], 6))) return r;
    }
    return NULL;
}

static const tn__rewrite tn__stab_rules[] = {
    { "local_log1p", { TN_OP_LOG }, 0, 0, 0, tn__b_log1p },
    { "local_log1p_exp", { TN_OP_LOG1P }, 0, 0, 0, tn__b_log1p_exp },
    { "local_expm1", { TN_OP_SUB, TN_OP_ADD }, 0, 0, 0, tn__b_expm1 },
    { "local_log_sigmoid", { TN_OP_LOG }, 0, 0, 0, tn__b_log_sigmoid },
    { "local_log_1m_sigmoid", { TN_OP_LOG, TN_OP_LOG1P }, 0, 0, 0, tn__b_log_1m_sigmoid },
    { "local_log_softmax", { TN_OP_LOG }, 0, 0, 0, tn__b_log_softmax },
    { "local_logsumexp", { TN_OP_LOG }, 0, 0, 0, tn__b_logsumexp },
    { "local_log_softmax_grad", { TN_OP_MUL }, 0, 0, TN__RQ_FLOAT, tn__b_log_softmax_grad },
    { "local_inv_1p_exp", { TN_OP_TRUE_DIV }, 1, 1.0, TN__RQ_FLOAT, tn__b_inv_1p_exp },
    { "local_1m_sigmoid", { TN_OP_SUB }, 1, 1.0, TN__RQ_FLOAT, tn__b_1m_sigmoid },
    { "local_exp_over_1p_exp", { TN_OP_TRUE_DIV, TN_OP_MUL }, 0, 0, TN__RQ_FLOAT, tn__b_exp_over_1p_exp },
    { "local_sigmoid_cancel", { TN_OP_MUL }, 0, 0, TN__RQ_FLOAT, tn__b_mul_sigmoid_cancel },
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

static bool tn__type_same_shape(const tn_type *a, const tn_type *b);

/* The constant factor k of t = k*X or X*k (a 0-d constant), and X. */
static bool tn__rw_const_factor(tn_var *t, tn_var **x, double *k) {
    if (t->op != TN_OP_MUL) return false;
    for (int j = 0; j < 2; j++)
        if (t->in[j]->type.ndim == 0 && t->in[j]->op == TN_OP_CONSTANT && tn__rw_const_value(t->in[j], k) &&
            t->in[1 - j]->op != TN_OP_DOT) { *x = t->in[1 - j]; return true; }
    return false;
}

/* The addend: C or s*C. A factor 2^n (n >= 1) of C's own, C = 2^n X of
   X's dtype, moves into beta: beta (2^n X) and (2^n beta) X are the same
   product rounded once, the scalings being exact; where 2^n X overflowed
   in the graph, the product is finite instead of inf. The Gemv then reads
   X and no kernel scales it (the weight decay's 2w of a gradient). */
static void tn__rw_addend(tn_var *t, tn_var **cc, double *beta) {
    double k;
    tn_var *x;
    *cc = t; *beta = 1;
    if (tn__rw_const_factor(t, &x, &k)) { *cc = x; *beta = k; }
    int e;
    while (tn__rw_const_factor(*cc, &x, &k) && frexp(k, &e) == 0.5 && e >= 2 && x->type.dtype == (*cc)->type.dtype &&
           tn__type_same_shape(&x->type, &(*cc)->type) && isfinite(*beta * k)) {
        *beta *= k;
        *cc = x;
    }
}

/* A Gemv's addend that is one element (a bias b in x.w + b), where every
   reader of the sum is elementwise: the addition joins their kernel, where
   a Gemv would first broadcast b into its output (a kernel of its own on
   the GPU) and the product then read it. */
static bool tn__rw_fuses_as_add(tn__rw *c, const tn_var *v, const tn_var *C) {
    tn__ninfo *V = tn__ni(c, v);
    bool ok = !V->n_root && V->n_use > 0;
    for (int d = 0; ok && d < C->type.ndim; d++) ok = C->type.bcast[d];
    for (int u = 0; ok && u < V->n_use; u++) ok = tn__rw_is_ew(V->use[u].c->op);
    return ok;
}

/* alpha*dot(A, B) + beta*C (either order; sub negates) -> gemm, or gemv:
   alpha*(A@B) + beta*C rounded as the graph rounds it (only the product's
   summation order is the kernel's). A scale of 0 is not: a Gemm does not
   read C when beta is 0 and BLAS skips the product when alpha is 0, so the
   NaN of 0*NaN and 0*inf is lost. zero_scale: only those forms (fast_math);
   else only the others, a 0*C term kept whole as the addend (beta 1). */
static tn_var *tn__rw_gemm(tn__rw *c, tn_var *v, bool zero_scale) {
    if (!tn_dtype_is_float(v->type.dtype)) return NULL;
    for (int s = 0; s < 2; s++) {
        tn_var *dot, *C;
        double alpha, beta;
        if (!tn__rw_dot_term(c, v->in[s], &dot, &alpha)) continue;
        tn__rw_addend(v->in[1 - s], &C, &beta);
        if (beta == 0 && !zero_scale) { C = v->in[1 - s]; beta = 1; }
        if ((alpha == 0 || beta == 0) != zero_scale) continue;
        if (v->op == TN_OP_SUB) { if (s == 0) beta = -beta; else alpha = -alpha; }
        if (C->type.dtype != v->type.dtype || dot->type.dtype != v->type.dtype || C->type.ndim > dot->type.ndim) continue;
        tn_var *A = dot->in[0], *B = dot->in[1];
        if (B->type.ndim == 1 && tn__rw_fuses_as_add(c, v, C)) return NULL;
        return B->type.ndim == 2 ? tn_gemm(C, alpha, A, B, beta) : tn_gemv(C, alpha, A, B, beta);
    }
    return NULL;
}
static tn_var *tn__b_gemm(tn__rw *c, tn_var *v) { return tn__rw_gemm(c, v, false); }
static tn_var *tn__b_gemm_zero_scale(tn__rw *c, tn_var *v) { return tn__rw_gemm(c, v, true); }

/* dot(matrix, vector) -> gemv with beta 0 over zeros (rows known): the same
   product (the addend is not read, only its shape). Up to TN__GEMV_ZEROS_MAX
   rows the zeros are a constant, placed once: no fill kernel each call (a
   loop's step of small products would spend a launch on each); past it, an
   Alloc, which a later sum can take over in place. */
#define TN__GEMV_ZEROS_MAX 65536
static tn_var *tn__b_dot_gemv(tn__rw *c, tn_var *v) {
    tn_var *A = v->in[0], *x = v->in[1];
    int64_t m = A->type.shape[0];
    if (A->type.ndim != 2 || x->type.ndim != 1 || !tn_dtype_is_float(v->type.dtype) || m < 0) return NULL;
    tn_var *y;
    if (m <= TN__GEMV_ZEROS_MAX) {
        tn_array *zeros = tn_array_zeros(v->type.dtype, 1, &m);
        y = zeros ? tn_constant(c->g, zeros) : NULL;
        tn_array_free(zeros);
    } else {
        tn_var *z = tn__rw_scalar(c->g, v->type.dtype, 0.0);
        y = z ? tn_alloc(z, 1, &m) : NULL;
    }
    return y ? tn_gemv(y, 1.0, A, x, 0.0) : NULL;
}

static const tn__rewrite tn__spec_rules[] = {
    { "local_gemm_zero_scale", { TN_OP_ADD, TN_OP_SUB }, 0, 0, TN__RQ_FAST_MATH, tn__b_gemm_zero_scale },
    { "local_gemm", { TN_OP_ADD, TN_OP_SUB }, 0, 0, 0, tn__b_gemm },
};
static const tn__rewrite tn__spec2_rules[] = {
    { "local_dot_to_gemv", { TN_OP_DOT }, 0, 0, 0, tn__b_dot_gemv },
};

/* Scan rewrites (the >>scan_rewrite section): rules on SCAN nodes. */
static tn_var *tn__b_scan_dot(tn__rw *c, tn_var *v);
static const tn__rewrite tn__scan_rules[] = {
    { "scan_dot_to_gemm", { TN_OP_SCAN }, 0, 0, 0, tn__b_scan_dot },
};

/* >>constant_folding ----------------------------------------------------- */

#define TN__FOLD_MAX_ELEMS ((int64_t)1 << 20)

/* Elements of a concrete type; INT64_MAX when they do not fit (empty dims
   beside huge ones count 0). */
static int64_t tn__type_size(const tn_type *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) if (t->shape[d] == 0) return 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || n > INT64_MAX / t->shape[d]) return INT64_MAX;
        n *= t->shape[d];
    }
    return n;
}

/* A node whose inputs are all constants runs now, on the CPU kernels; so
   does one without inputs (tn_arange, tn_eye: a constant placed once, not a
   host op each call). Not: multi-output nodes, views (they would alias),
   user ops, and results that are huge or bigger than every input (alloc of
   a scalar stays small). */
static tn_var *tn__b_fold(tn__rw *c, tn_var *v) {
    const tn_op_def *def = tn__op_def(v->op);
    tn_op_kind k = def ? def->kind : (tn_op_kind)0;
    if (!def || !def->cpu || v->n_out != 1 || v->op == TN_OP_PROJ || v->op == TN_OP_CUSTOM) return NULL;
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
    if (tn__infer_outputs(v, ti, &to) != TN_OK) return NULL;
    int64_t n = tn__type_size(&to);
    if (n > TN__FOLD_MAX_ELEMS || (v->n_in > 0 && n > (biggest > 1 ? biggest : 1))) return NULL;
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

typedef struct tn__fgrp { int parent, id, gin, nin, nmem, head, tail, xuse; uint64_t gmask, ginmask; tn_type key; int regs; } tn__fgrp;
/* gmask: bits (id & 63) of the ids merged into it; ginmask: OR of its external inputs' rmask */
/* xuse: reads of the group's members from outside it (roots count) */
/* regs: a bound on its program's instructions (tn__fuse_regs of each member); with its inputs
   they stay within the CPU interpreter's register file (TN__EW_MAX_REGS): a chain of 10^5
   additions becomes several kernels, not one it cannot run */

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

/* The same shape and broadcast pattern; a group's members may differ in
   dtype (each instruction and output of a program has its own): p > 0.5
   joins the float chain computing p. */
static bool tn__type_same_shape(const tn_type *a, const tn_type *b) {
    if (a->ndim != b->ndim) return false;
    for (int d = 0; d < a->ndim; d++) if (a->bcast[d] != b->bcast[d] || a->shape[d] != b->shape[d]) return false;
    return true;
}
static bool tn__type_same(const tn_type *a, const tn_type *b) { return a->dtype == b->dtype && tn__type_same_shape(a, b); }

/* Elementwise nodes, and draws of a variable's shape (tn__random_fusable: the
   kernel computes the draw's elements where they are used). */
static bool tn__rw_fusable(const tn_var *v) { return (tn__rw_is_ew(v->op) && v->n_out == 1) || tn__random_fusable(v); }
/* A member's instructions at most: its op, and per input an immediate or a cast. */
static int tn__fuse_regs(const tn_var *v) { return 1 + 2 * v->n_in; }
static bool tn__rw_immediate(const tn_var *x) { double d; return x->type.ndim == 0 && tn__rw_const_value(x, &d); }
static bool tn__rw_fuse_reduction_op(int op) { return tn__op_has(op, TN_OPF_PROLOGUE); }
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
    int cls_n;        /* output classes of the group being built (tn__fuse_classes) */
    uint64_t cls[64];
    uint64_t *sig;    /* per node id, scratch of tn__fuse_classes: a member's shape signature */
    unsigned char *role;  /* per node id: seen input (classes), then role in a class's kernel */
    int *bit;         /* per node id: an input's bit in the signatures */
    int scap;         /* room in sig, role, bit */
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
            bool ok = g >= 0 && v->in[k]->device == v->device && tn__type_same_shape(&F->G[g].key, &v->type);
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
            int nin = 0, regs = tn__fuse_regs(v);
            need = 0;
            for (int j = 0; j < nt; j++) { nin += F->G[T[j]].nin; regs += F->G[T[j]].regs; }
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
            if (!ok || nin + need > c->pa->max_fused_inputs || nin + need + regs > TN__EW_MAX_REGS) continue;
            join = T[0];
            for (int j = 1; j < nt; j++) if (F->G[T[j]].id < F->G[join].id) join = T[j];
            tn__fgrp *J = &F->G[join];
            for (int j = 0; j < nt; j++) {
                tn__fgrp *H = &F->G[T[j]];
                if (H == J) continue;
                H->parent = join;
                J->nmem += H->nmem; J->xuse += H->xuse; J->gmask |= H->gmask; J->regs += H->regs;
                if (H->gin > J->gin) J->gin = H->gin;
                J->ginmask |= H->ginmask;
            }
            J->nin = nin + need;
        }
        if (join < 0) {
            join = F->ng++;
            int id = next_id++;
            F->G[join] = (tn__fgrp){ join, id, -1, 0, 0, -1, -1, 0, (uint64_t)1 << (id & 63), 0, v->type, 0 };
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
        J->regs += tn__fuse_regs(v);
        J->key = v->type;
        J->xuse += V->n_use + (V->n_root ? 1 : 0);
        for (int k = 0; k < v->n_in; k++) J->xuse -= tn__fg_of(F, v->in[k]) == join;
        V->grp = join;
        V->reach = reach > J->id ? reach : J->id;
        V->rmask = rmask | J->gmask;
    }
}

/* The program of a group's members (in topological order). Outputs: the
   members read outside the group (or roots), or only `only` when given.
   With `role` (per node id: 0 left out, 1 member, 2 output) only part of
   the group is built. */
static tn_ew_program *tn__fuse_program(tn__fctx *F, int g, tn_var ***ins, int *n_ins, tn_var ***outs, tn_var *only,
                                       const unsigned char *role) {
    tn__rw *c = F->c;
    int stamp = ++F->stamp;
    int nin = 0, ninstr = 0, nout = 0, nmem = 0;
    /* pass 1: inputs, outputs, room */
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) {
        tn_var *m = F->ord[p];
        if (role && !role[m->id]) continue;
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
    uint64_t *dep = (uint64_t *)tn__graph_alloc(c->g, (size_t)(nin + ninstr + 1) * sizeof *dep);   /* inputs a register reads */
    tn_ew_rand *rnd = NULL;                                                                       /* the draws' parameters */
    if (!in || !out || !P || !in_dt || !ins_ || !oreg || !odt || !dep) { c->oom = true; return NULL; }
    for (int r = 0; r < nin; r++) dep[r] = r < 64 ? (uint64_t)1 << r : 0;
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) {
        tn_var *m = F->ord[p];
        if (role && !role[m->id]) continue;
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
        if (role && !role[m->id]) continue;
        tn_ew_program *q = tn__ew_program_of(m);
        if (!q || q->n_in != m->n_in) return NULL;
        int map[8 + 8];
        for (int k = 0; k < m->n_in; k++) {
            tn_var *x = m->in[k];
            if (F->regst[x->id] == stamp) { map[k] = F->reg[x->id]; continue; }
            double d;
            if (!tn__rw_const_value(x, &d)) {   /* read as immediate in pass 1: only a failed allocation differs */
                c->oom = true;
                return NULL;
            }
            ins_[ni] = (tn_ew_instr){ .op = TN_OP_CONSTANT, .dtype = (int8_t)x->type.dtype, .in_dtype = (int8_t)x->type.dtype,
                                      .a = -1, .b = -1, .c = -1, .imm = d };
            dep[nin + ni] = 0;
            map[k] = nin + ni++;
        }
        if (q->n_instr > 8) return NULL;
        for (int j = 0; j < q->n_instr; j++) {
            tn_ew_instr t = q->instr[j];
            int32_t *r[3] = { &t.a, &t.b, &t.c };
            dep[nin + ni] = 0;
            for (int o = 0; o < 3; o++)
                if (*r[o] >= 0) {
                    *r[o] = *r[o] < q->n_in ? map[*r[o]] : map[8 + *r[o] - q->n_in];
                    dep[nin + ni] |= dep[*r[o]];
                }
            if (t.op == TN_OP_RANDOM) {      /* the draw takes the shape of what register c reads */
                if (nin > 64 || !q->rand) return NULL;
                if (!rnd && !(rnd = (tn_ew_rand *)tn__graph_alloc(c->g, (size_t)(ninstr + 1) * sizeof *rnd))) { c->oom = true; return NULL; }
                rnd[ni] = q->rand[j];
                rnd[ni].shape_of = dep[nin + ni] = t.c >= 0 ? dep[t.c] : 0;
            }
            map[8 + j] = nin + ni;
            ins_[ni++] = t;
        }
        int orr = q->out_reg[0];
        F->reg[m->id] = orr < q->n_in ? map[orr] : map[8 + orr - q->n_in];
        if (m->type.dtype != q->out_dtype[0]) return NULL;
        bool is_out;
        if (only) is_out = m == only;
        else if (role) is_out = role[m->id] == 2;
        else {
            is_out = tn__ni(c, m)->n_root > 0;
            for (int u = 0; !is_out && u < tn__ni(c, m)->n_use; u++) is_out = tn__fg_of(F, tn__ni(c, m)->use[u].c) != g;
        }
        if (is_out) { out[nout] = m; oreg[nout] = F->reg[m->id]; odt[nout] = m->type.dtype; nout++; }
    }
    *P = (tn_ew_program){ nin, in_dt, ni, ins_, nout, oreg, odt, rnd, NULL };
    *ins = in; *n_ins = nin; *outs = out;
    return P;
}

static void tn__fuse_trace(const char *name, tn_var *y, int nmem) {
    if (!tn_get_config()->trace_rewrites) return;
    char b[512];
    tn__node_label(y, b, sizeof b);
    fprintf(stderr, "rewrite %s: %d elementwise nodes -> %s [id %d]\n", name, nmem, b, y->id);
}

static int tn__fuse_classes(tn__fctx *F, int g, int n0);
static void tn__fuse_mark_class(tn__fctx *F, int g, int k);
typedef struct tn__fuse_part { tn_var **out, **rep; int nout, nmem; tn_var *y; } tn__fuse_part;
static bool tn__fuse_make(tn__fctx *F, int g, const unsigned char *role, tn__fuse_part *fp);
static void tn__fuse_commit(tn__fctx *F, const tn__fuse_part *fp);

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
    if (c->pa->fuse_into_reductions && T->n_use == 1 && !T->n_root && tn__rw_fuse_reduction_op(T->use[0].c->op) &&
        T->use[0].c->n_in == 1 && !T->use[0].c->ext && G->nin <= TN__REDUCE_MAX_INPUTS && T->use[0].c->device == tail->device) {
        tn_var *R = T->use[0].c;
        bool single = true;    /* every other member is read inside the group only; no draw (a reduction has no element index) */
        for (int p = G->head; p >= 0 && single; p = F->next[p]) {
            tn_var *m = F->ord[p];
            if (m->op == TN_OP_RANDOM) single = false;
            if (m == tail) continue;
            if (tn__ni(c, m)->n_root) single = false;
            for (int u = 0; single && u < tn__ni(c, m)->n_use; u++) single = tn__fg_of(F, tn__ni(c, m)->use[u].c) == g;
        }
        tn_ew_program *P = single ? tn__fuse_program(F, g, &in, &nin, &out, tail, NULL) : NULL;
        tn_var *y = P && nin > 0 ? tn__node(c->g, R->op, nin, in, &R->p, P, "fuse") : NULL;
        tn__rw_sync(c);
        if (y) y->device = R->device;
        if (y && y->device != TN_HOST && !tn__backend_runs(c->be, y)) y = NULL;   /* a device reduction must take the prologue */
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
    int n_cls = tn__fuse_classes(F, g, n0);
    if (n_cls < 0) return;
    tn__fuse_part parts[64];
    int n_parts = 0;
    if (n_cls <= 1) n_parts += tn__fuse_make(F, g, NULL, &parts[0]);
    for (int k = 0; n_cls > 1 && k < n_cls && !c->oom; k++) {
        tn__fuse_mark_class(F, g, k);
        n_parts += tn__fuse_make(F, g, F->role, &parts[n_parts]);
    }
    for (int k = 0; k < n_parts && !c->oom; k++) tn__fuse_commit(F, &parts[k]);
}

static bool tn__fuse_is_out(tn__fctx *F, int g, const tn_var *m) {
    tn__ninfo *M = tn__ni(F->c, m);
    if (M->n_root) return true;
    for (int u = 0; u < M->n_use; u++) if (tn__fg_of(F, M->use[u].c) != g) return true;
    return false;
}

/* A fused kernel runs over the broadcast shape of all its inputs, and every
   output gets that shape. At call time a dim that is not statically
   broadcastable may still be 1 (NumPy's rule), so two outputs of one group
   can differ in shape: exp(y) and x + exp(y) with y (3, 1) and x (3, 4).
   Each member's signature is the set of inputs that can set its shape (any
   input not broadcastable in every dim); outputs with different signatures
   go to different kernels, each built from the members its outputs need.
   Returns the number of output classes (0 or 1: one kernel as before), -1
   when out of memory; F->sig[id] holds each member's signature. The scratch
   arrays live in F for the whole pass: only this group's entries are reset. */
static int tn__fuse_classes(tn__fctx *F, int g, int n0) {
    const tn_type *key = &F->G[g].key;
    bool fixed = true;             /* every dim known: each member's shape is the key's */
    for (int d = 0; d < key->ndim; d++) fixed &= key->shape[d] >= 0;
    int n_out = 0;
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) n_out += tn__fuse_is_out(F, g, F->ord[p]);
    if (fixed || n_out < 2) return n_out ? 1 : 0;
    if (n0 + 1 > F->scap) {
        int cap = 2 * (n0 + 1);
        uint64_t *S = (uint64_t *)tn__realloc(F->sig, (size_t)cap * sizeof *S);
        if (S) F->sig = S;
        unsigned char *R = S ? (unsigned char *)tn__realloc(F->role, (size_t)cap) : NULL;
        if (R) F->role = R;
        int *B = R ? (int *)tn__realloc(F->bit, (size_t)cap * sizeof *B) : NULL;
        if (!B) { F->c->oom = true; return -1; }
        F->bit = B;
        F->scap = cap;
    }
    uint64_t *S = F->sig;
    unsigned char *R = F->role;
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) {
        tn_var *m = F->ord[p];
        S[m->id] = 0;
        R[m->id] = 0;
        for (int k = 0; k < m->n_in; k++) if (m->in[k]->id < n0) R[m->in[k]->id] = 0;
    }
    int nbits = 0, n_cls = 0;
    uint64_t cls[64];
    bool overflow = false;
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) {
        tn_var *m = F->ord[p];
        for (int k = 0; k < m->n_in; k++) {
            tn_var *x = m->in[k];
            if (x->id < n0 && tn__fg_of(F, x) == g) { S[m->id] |= S[x->id]; continue; }
            bool shapes = false;
            for (int d = 0; d < x->type.ndim; d++) shapes |= !x->type.bcast[d];
            if (!shapes || x->id >= n0) continue;
            if (!R[x->id]) { R[x->id] = 1; F->bit[x->id] = nbits++; }
            if (F->bit[x->id] >= 64) overflow = true;
            else S[m->id] |= (uint64_t)1 << F->bit[x->id];
        }
        if (!tn__fuse_is_out(F, g, m)) continue;
        int j = 0;
        while (j < n_cls && cls[j] != S[m->id]) j++;
        if (j == n_cls && n_cls < 64) cls[n_cls++] = S[m->id];
    }
    if (overflow) n_cls = 1;       /* too many inputs to tell apart: one kernel, as before */
    F->cls_n = n_cls;
    memcpy(F->cls, cls, (size_t)n_cls * sizeof *cls);
    return n_cls;
}

/* role[]: the outputs of class k (2) and every member they read (1). */
static void tn__fuse_mark_class(tn__fctx *F, int g, int k) {
    unsigned char *role = F->role;
    const uint64_t *sig = F->sig;
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) role[F->ord[p]->id] = 0;
    /* outputs first, then members backwards (topological order reversed) */
    int n = 0;
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) n++;
    int *pos = (int *)tn__malloc((size_t)(n + 1) * sizeof *pos);
    if (!pos) { F->c->oom = true; return; }
    n = 0;
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) pos[n++] = p;
    for (int i = n - 1; i >= 0; i--) {
        tn_var *m = F->ord[pos[i]];
        if (tn__fuse_is_out(F, g, m) && sig[m->id] == F->cls[k]) role[m->id] = 2;
        if (!role[m->id]) continue;
        for (int j = 0; j < m->n_in; j++)
            if (tn__fg_of(F, m->in[j]) == g && !role[m->in[j]->id]) role[m->in[j]->id] = 1;
    }
    tn__free(pos);
}

/* One fused node from the group (or the part of it role marks); its outputs
   are replaced later (tn__fuse_commit), after every part of the group was
   built from the group's original edges. False: left unfused. */

static bool tn__fuse_make(tn__fctx *F, int g, const unsigned char *role, tn__fuse_part *fp) {
    tn__rw *c = F->c;
    tn_var *tail = F->ord[F->G[g].tail];
    int n0 = tn__graph_nvars(c->g);
    tn_var **in;
    int nin;
    memset(fp, 0, sizeof *fp);
    tn_ew_program *P = tn__fuse_program(F, g, &in, &nin, &fp->out, NULL, role);
    if (!P || nin == 0 || P->n_out == 0) return false;
    tn_params p0;
    memset(&p0, 0, sizeof p0);
    tn_var *y = tn__node_multi(c->g, TN_OP_COMPOSITE, nin, in, &p0, P, P->n_out, "fuse");
    int nout = P->n_out;
    fp->rep = (tn_var **)tn__graph_alloc(c->g, (size_t)nout * sizeof *fp->rep);
    bool ok = y != NULL && fp->rep != NULL;
    if (ok) y->device = tail->device;                /* the group's device */
    if (ok && y->device != TN_HOST && !tn__backend_runs(c->be, y)) ok = false;   /* too many operands for one kernel: stay unfused */
    for (int k = 0; ok && k < nout; k++) {
        fp->rep[k] = nout == 1 ? y : tn__proj(y, k);
        if (fp->rep[k]) fp->rep[k]->device = y->device;
        ok = fp->rep[k] && tn__type_eq(&fp->rep[k]->type, &fp->out[k]->type);
    }
    tn__rw_sync(c);
    if (!ok) { tn__rw_drop_new(c, n0); tn_clear_error(); return false; }
    fp->y = y;
    fp->nout = nout;
    fp->nmem = 0;
    for (int p = F->G[g].head; p >= 0; p = F->next[p]) fp->nmem += !role || role[F->ord[p]->id];
    return true;
}

static void tn__fuse_commit(tn__fctx *F, const tn__fuse_part *fp) {
    tn__rw_count("fusion");
    tn__fuse_trace("fusion", fp->y, fp->nmem);
    for (int k = 0; k < fp->nout; k++) tn__rw_replace(F->c, fp->out[k], fp->rep[k]);
}

/* A one-element elementwise node (every dim broadcastable) of one op on
   inputs that are not elementwise, read by several elementwise nodes of a
   larger shape: in a group of its own it would be a kernel writing one
   element (a smaller group joins a larger one only where that one alone
   reads it), as 1/n in mean's gradient is. Each reader gets its own copy
   instead, computed inside the reader's kernel: the same op on the same
   inputs, the same bits. A copy that joins no group is taken back with the
   others of its node (tn__fuse_uncopy), so no kernel is added. */
typedef struct tn__fcopies { tn_var **orig, **copy; int n, cap; } tn__fcopies;

static void tn__fuse_copy_scalars(tn__rw *c, tn__fcopies *K) {
    tn_var **ord;
    int n = tn__rw_topo(c, &ord);
    for (int i = 0; i < n && !c->oom; i++) {
        tn_var *u = ord[i];
        tn__ninfo *U = tn__ni(c, u);
        bool ok = tn__rw_fusable(u) && !U->n_root && U->n_use > 1;
        for (int d = 0; ok && d < u->type.ndim; d++) ok = u->type.bcast[d];
        for (int k = 0; ok && k < u->n_in; k++) ok = !tn__rw_fusable(u->in[k]) || tn__rw_immediate(u->in[k]);
        for (int j = 0; ok && j < U->n_use; j++) {
            const tn_var *r = U->use[j].c;
            ok = tn__rw_fusable(r) && r->device == u->device && !tn__type_same_shape(&r->type, &u->type);
        }
        while (ok && !c->oom && tn__ni(c, u)->n_use > 1) {
            tn__use r = tn__ni(c, u)->use[tn__ni(c, u)->n_use - 1];
            int n0 = tn__graph_nvars(c->g), cap = K->cap;
            tn_var **o = (tn_var **)tn__grow(K->orig, &cap, K->n + 1, 8, sizeof *o);
            if (o) K->orig = o;
            tn_var **p = o ? (tn_var **)tn__grow(K->copy, &K->cap, K->n + 1, 8, sizeof *p) : NULL;
            if (!p) { c->oom = true; break; }
            K->copy = p;
            tn_var *y = tn__node(c->g, u->op, u->n_in, u->in, &u->p, u->ext, "fuse");
            tn__rw_sync(c);
            if (!y || !tn__type_eq(&y->type, &u->type)) { tn__rw_drop_new(c, n0); tn_clear_error(); break; }
            y->device = u->device;
            tn__rw_del_use(c, u, r.c, r.k);
            r.c->in[r.k] = y;
            tn__rw_add_use(c, y, r.c, r.k);
            K->orig[K->n] = u;
            K->copy[K->n++] = y;
        }
    }
    tn__free(ord);
}

/* After grouping: every copy of a node one of whose copies is alone in its
   group is read as the node again (the copies die). True when any was. */
static bool tn__fuse_uncopy(tn__fctx *F, tn__fcopies *K) {
    tn__rw *c = F->c;
    bool any = false;
    for (int i = 0; i < K->n; i++) {
        int g = tn__fg_of(F, K->copy[i]);
        if (g < 0 || F->G[g].nmem > 1) continue;
        tn_var *u = K->orig[i];
        for (int j = 0; j < K->n; j++) {
            if (K->orig[j] != u) continue;
            tn_var *y = K->copy[j];
            tn__use r = tn__ni(c, y)->use[0];
            tn__rw_del_use(c, y, r.c, r.k);
            r.c->in[r.k] = u;
            tn__rw_add_use(c, u, r.c, r.k);
            tn__rw_kill(c, y);
            K->orig[j] = NULL;
        }
        any = true;
    }
    int n = 0;
    for (int i = 0; i < K->n; i++) if (K->orig[i]) { K->orig[n] = K->orig[i]; K->copy[n++] = K->copy[i]; }
    K->n = n;
    return any;
}

static tn_result tn__rw_fuse(tn__rw *c) {
    tn__fctx F;
    tn__fcopies K = { NULL, NULL, 0, 0 };
    memset(&F, 0, sizeof F);
    F.c = c;
    tn__fuse_copy_scalars(c, &K);
    int cap = c->synced + 1;
    F.reg = (int *)tn__malloc((size_t)cap * sizeof *F.reg);
    F.regst = (int *)tn__calloc((size_t)cap, sizeof *F.regst);
    F.cap = cap;
    tn_result r = TN_OK;
    int ng = 0, *roots = NULL;
    for (bool again = true; again && !c->oom;) {     /* groups, again where a copy was taken back */
        tn__free(F.ord); tn__free(F.G); tn__free(F.next);
        F.ng = 0;
        F.n = tn__rw_topo(c, &F.ord);
        F.G = (tn__fgrp *)tn__malloc((size_t)(F.n + 1) * sizeof *F.G);
        F.next = (int *)tn__malloc((size_t)(F.n + 1) * sizeof *F.next);
        if (c->oom || !F.G || !F.next || !F.reg || !F.regst) break;
        for (int i = 0; i < c->synced; i++) { c->ni[i].reach = -1; c->ni[i].rmask = 0; }
        tn__fuse_group(&F);
        again = tn__fuse_uncopy(&F, &K);
    }
    for (int i = 0; i < K.n; i++) tn__rw_count("fusion_copy");
    tn__free(K.orig); tn__free(K.copy);
    if (c->oom || !F.G || !F.next || !F.reg || !F.regst) { r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer"); goto done; }
    for (int i = 0; i < F.n; i++) {        /* member lists, topological */
        F.next[i] = -1;
        int g = tn__fg_of(&F, F.ord[i]);
        if (g < 0) continue;
        if (F.G[g].tail < 0) F.G[g].head = i; else F.next[F.G[g].tail] = i;
        F.G[g].tail = i;
    }
    /* the fused nodes are new (ids past F.regst's size): finish the groups first */
    roots = (int *)tn__malloc((size_t)(F.ng + 1) * sizeof *roots);
    if (!roots) { r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer"); goto done; }
    for (int g = 0; g < F.ng; g++) if (F.G[g].parent == g && F.G[g].head >= 0) roots[ng++] = g;
    for (int j = 0; j < ng && !c->oom; j++) tn__fuse_build(&F, roots[j]);
    tn__free(roots);
    if (c->oom) r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer");
done:
    tn__free(F.ord); tn__free(F.G); tn__free(F.next); tn__free(F.reg); tn__free(F.regst);
    tn__free(F.sig); tn__free(F.role); tn__free(F.bit);
    return r;
}

/* >>fuse_epilogue --------------------------------------------------------- */
/* An elementwise node (a fused group's, or one op) that reads a reduction's
   or a Gemv's result, its only reader, becomes that node's epilogue: the
   kernel applies it to each result as it stores it (`b - lr * sum(g)`, a
   bias's update, and `w - lr * (x^T g + 2^n w)`, a weight's, are one kernel
   each). The epilogue reads the result rounded to the producer's dtype, as
   the unfused node did, so the values are the same. Taken where the node
   keeps the producer's rank, reads the result once and draws nothing; after
   a reduction, where it leaves a reduced axis kept with keepdims at 1; after
   a Gemv, where it gives the product's dtype (the product is computed in the
   output's buffer). Its other inputs may widen a dim of 1 at run time (a
   reduction's plan folds the box again for each element, tensor_ops.h
   >>ops_reduce; a Gemv of one row computes that row again for each). */
static tn_ew_program *tn__epi_program(tn__rw *c, const tn_ew_program *v, int k) {
    int n = v->n_in;
    tn_ew_program *E = (tn_ew_program *)tn__graph_alloc(c->g, sizeof *E);
    tn_dtype *idt = (tn_dtype *)tn__graph_alloc(c->g, (size_t)(n + v->n_out) * sizeof *idt), *odt = idt ? idt + n : NULL;
    tn_ew_instr *ins = (tn_ew_instr *)tn__graph_alloc(c->g, (size_t)(v->n_instr ? v->n_instr : 1) * sizeof *ins);
    int32_t *oreg = (int32_t *)tn__graph_alloc(c->g, (size_t)v->n_out * sizeof *oreg);
    if (!E || !idt || !ins || !oreg) { c->oom = true; return NULL; }
    /* input k becomes input 0; the inputs before it move up one */
#define TN__EPI_REG(r) ((r) < 0 || (r) >= n ? (r) : (r) == k ? 0 : (r) < k ? (r) + 1 : (r))
    for (int i = 0; i < n; i++) idt[TN__EPI_REG(i)] = v->in_dtype[i];
    for (int j = 0; j < v->n_instr; j++) {
        ins[j] = v->instr[j];
        if (ins[j].op == TN_OP_CONSTANT) continue;
        ins[j].a = TN__EPI_REG(ins[j].a); ins[j].b = TN__EPI_REG(ins[j].b); ins[j].c = TN__EPI_REG(ins[j].c);
    }
    for (int j = 0; j < v->n_out; j++) { oreg[j] = TN__EPI_REG(v->out_reg[j]); odt[j] = v->out_dtype[j]; }
#undef TN__EPI_REG
    *E = (tn_ew_program){ n, idt, v->n_instr, ins, v->n_out, oreg, odt, NULL, NULL };
    return E;
}

static void tn__rw_fuse_epilogues(tn__rw *c) {
    tn_var **ord;
    int n = tn__rw_topo(c, &ord);
    if (c->oom) return;
    for (int i = 0; i < n && !c->oom; i++) {
        tn_var *v = ord[i];
        if (v->n_out != 1 || !(v->op == TN_OP_COMPOSITE || tn__rw_is_ew(v->op))) continue;
        int k = -1, seen = 0;
        for (int j = 0; j < v->n_in; j++) {
            tn_var *x = v->in[j];
            if ((tn__op_kind(x->op) == TN_OPK_REDUCE && tn__op_has(x->op, TN_OPF_PROLOGUE)) || x->op == TN_OP_GEMV) { k = j; seen++; }
        }
        if (seen != 1) continue;
        tn_var *R = v->in[k];
        bool gemv = R->op == TN_OP_GEMV;
        const tn_ew_program *pro = gemv ? NULL : (const tn_ew_program *)R->ext;
        tn__ninfo *X = tn__ni(c, R);
        if (R->n_out != 1 || X->n_root || X->n_use != 1 || (pro && pro->epi) || R->device != v->device ||
            v->type.ndim != R->type.ndim || (gemv && (R->ext || v->type.dtype != R->type.dtype)))
            continue;
        int np = gemv ? 3 : pro ? pro->n_in : 1;
        if (np + v->n_in - 1 > TN__REDUCE_MAX_INPUTS) continue;
        bool ok = true;
        if (!gemv && tn__p_red_keepdims(&R->p)) {       /* a reduced axis stays 1 */
            uint64_t mask = tn__p_red_mask(&R->p);
            for (int j = 0; ok && j < v->n_in; j++) {
                const tn_type *t = &v->in[j]->type;
                for (int d = 0; ok && d < t->ndim; d++) {
                    int od = d + (v->type.ndim - t->ndim);
                    if (((mask >> od) & 1) && !(t->bcast[d] || t->shape[d] == 1)) ok = false;
                }
            }
        }
        tn_ew_program *vp = ok ? tn__ew_program_of(v) : NULL;
        if (!vp) { tn_clear_error(); continue; }
        if (vp->rand || vp->n_out != 1 || vp->in_dtype[k] != R->type.dtype) continue;
        int n0 = tn__graph_nvars(c->g);
        tn_ew_program *E = tn__epi_program(c, vp, k), *P = E;    /* a Gemv's ext is its epilogue */
        if (E && !gemv) {       /* a reduction's: its prologue (or one passing its input through) with E as epi */
            P = (tn_ew_program *)tn__graph_alloc(c->g, sizeof *P);
            tn_dtype *dt = P && !pro ? (tn_dtype *)tn__graph_alloc(c->g, 2 * sizeof *dt) : NULL;
            int32_t *oreg = dt ? (int32_t *)tn__graph_alloc(c->g, sizeof *oreg) : NULL;
            if (P && pro) *P = *pro;
            else if (oreg) {
                dt[0] = dt[1] = R->in[0]->type.dtype;
                *oreg = 0;
                *P = (tn_ew_program){ 1, dt, 0, NULL, 1, oreg, dt + 1, NULL, NULL };
            } else P = NULL;
            if (P) P->epi = E;
        }
        if (!P) { c->oom = true; break; }
        tn_var *in[TN__REDUCE_MAX_INPUTS];
        int m = 0;
        for (int j = 0; j < np; j++) in[m++] = R->in[j];
        for (int j = 0; j < v->n_in; j++) if (j != k) in[m++] = v->in[j];
        tn_var *y = tn__node(c->g, R->op, m, in, &R->p, P, "fuse");
        tn__rw_sync(c);
        if (y) y->device = v->device;
        if (y && y->device != TN_HOST && !tn__backend_runs(c->be, y)) y = NULL;
        if (y && tn__type_eq(&y->type, &v->type)) {
            tn__rw_count("fusion_epilogue");
            tn__fuse_trace("fusion_epilogue", y, 1);
            tn__rw_replace(c, v, y);
            continue;
        }
        tn__rw_drop_new(c, n0);
        tn_clear_error();
    }
    tn__free(ord);
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
        bool ew = tn__op_has(v->op, TN_OPF_INPLACE);         /* any input of its type */
        bool la = tn__op_has(v->op, TN_OPF_INPLACE_ACC);     /* in[0], the addend, read once */
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

TN_API tn_result tn__optimize(tn_graph *fg, tn_var **roots, int n_roots, tn_mode mode, const tn_place_args *pa) {
    const tn_place_args pa0 = { n_roots, NULL, 64, true, 0 };
    if (!pa) pa = &pa0;
    tn__rw_n_counts = 0;
    if (!fg || (n_roots > 0 && !roots)) return tn__err(TN_ERR_NULL, "tn_function: optimizer: graph or roots is NULL");
    for (int i = 0; i < n_roots; i++)
        if (!roots[i] || roots[i]->graph != fg) return tn__err(TN_ERR_GRAPH, "tn_function: optimizer: root %d is not in the function's graph", i);
    if (mode == TN_MODE_DEFAULT) mode = tn_get_config()->mode;
    bool full = mode != TN_MODE_FAST_COMPILE, fast_math = tn_get_config()->fast_math;
    tn__rw c;
    tn_result r = TN_OK;
    if (!tn__rw_init(&c, fg, roots, n_roots)) { tn__rw_free(&c); return tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer"); }
    c.fast_math = fast_math;
#define TN__RUN(rules) if (r == TN_OK) r = tn__rw_run(&c, rules, (int)(sizeof rules / sizeof rules[0]))
    if (full) TN__RUN(tn__canon_rules);
    if (full) TN__RUN(tn__scan_rules);
    if (r == TN_OK) r = tn__rw_merge(&c);
    TN__RUN(tn__fold_rules);
    if (full) {
        TN__RUN(tn__stab_rules);
        TN__RUN(tn__canon_rules);      /* stabilize leaves a few x+(-c) forms */
        TN__RUN(tn__spec_rules);
        TN__RUN(tn__spec2_rules);
        TN__RUN(tn__shape_rules);
        if (r == TN_OK) r = tn__rw_merge(&c);
    }
    /* Placement runs in every mode: a shared variable may already live on the
       device (another function moved it), and a host kernel must never be
       handed device memory. */
    const tn_backend *b = tn__get_backend();
    if (r == TN_OK && b && b->place) {
        r = b->place(fg, roots, n_roots, pa);
        /* the back end may have added nodes and rewired inputs: rebuild the map */
        tn__rw_free(&c);
        memset(&c, 0, sizeof c);
        if (r == TN_OK && !tn__rw_init(&c, fg, roots, n_roots)) r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer");
        c.fast_math = fast_math;
    }
    c.pa = pa;
    c.be = b;
    if (full) {
        if (r == TN_OK) r = tn__rw_fuse(&c);
        if (r == TN_OK && pa->fuse_into_reductions) tn__rw_fuse_epilogues(&c);
        if (r == TN_OK && !c.oom) tn__rw_inplace(&c);
        if (r == TN_OK && c.oom) r = tn__err(TN_ERR_OOM, "tn_function: out of memory in the optimizer");
    }
#undef TN__RUN
    tn__rw_free(&c);
    return r;
}

/* >>scan_rewrite --------------------------------------------------------- */
/* Rules the optimizer runs on SCAN nodes of a function's private graph (the
   node's ext is the loop; its inputs are the function's own variables). */

/* The placeholder index of x among s's, or -1. */
static int tn__scan_ph_index(const tn__scan *s, const tn_var *x) {
    for (int p = 0; p < s->n_ph; p++) if (s->ph[p] == x) return p;
    return -1;
}

/* The seed's warning case: scan(lambda x: dot(W, x), sequences=X), a step
   that is only a product of a non_sequence with the current row, is one
   product over the whole sequence: dot(X, W^T) (for dot(x, W): dot(X, W)),
   which specialize makes a gemm. No SCAN node is left. */
static tn_var *tn__b_scan_dot(tn__rw *c, tn_var *v) {
    (void)c;
    const tn__scan *s = (const tn__scan *)v->ext;
    if (!s || s->bwd || v->n_out != 1 || s->n_seq != 1 || s->seq_nt[0] != 1 || s->tap[0] != 0 || s->n_out != 1 ||
        s->init_in[0] >= 0 || s->n_upd || s->n_res != 1)
        return NULL;
    tn_var *y = s->res[0], *x = s->ph[0];
    if (y->op != TN_OP_DOT || x->type.ndim != 1) return NULL;
    int xi = y->in[0] == x ? 0 : y->in[1] == x ? 1 : -1;
    if (xi < 0 || y->in[0] == y->in[1]) return NULL;
    int p = tn__scan_ph_index(s, y->in[1 - xi]), ns0 = s->n_ph - s->n_ns;
    if (p < ns0 || s->ph[p]->type.ndim != 2) return NULL;
    tn_var *W = v->in[s->n_seq + s->n_init + (p - ns0)], *X = v->in[0];
    if (s->backwards) X = tn_slice(X, 0, TN_NONE, TN_NONE, -1);
    if (X && s->n_steps >= 0) X = tn_slice(X, 0, TN_NONE, s->n_steps, 1);
    if (!X) return NULL;
    return xi == 1 ? tn_dot(X, tn_transpose(W, NULL)) : tn_dot(X, W);
}

/* >>grad ============================================================== */
/* Symbolic differentiation (tn_grad, tn_rop, tn_stop_gradient,
   tn_verify_grad).

   Reverse accumulation runs over the user's graph as built: a node's id is its
   creation index and every input is created before the node that uses it, so
   descending ids are a reverse topological order and no recursion is needed.
   Gradients are ordinary nodes recorded in the same graph with the public
   constructors, so they differentiate again (Hessian-vector products) and go
   through the optimizer like any other expression.

   The drivers are here; each op's rules are its row of the op table (vjp,
   jvp, flags), with the op's code in tensor_ops.h (the >>scan and >>custom
   sections for those ops). Helpers many rules share: the >>grad_helpers
   section, before the catalogue.

   Rules, stated:
   - Gradients flow through float values only. An integer or boolean value
     (comparisons, argmax, casts to int, floor/round/sign: the rows with
     TN_OPF_DISCRETE) passes a zero gradient; a float wrt reached only that
     way gets zeros, not an error.
   - max/min reductions and maximum/minimum: every position equal to the
     result gets the whole gradient (ties are not split, as in Theano).
   - prod: exact with zeros (one zero: the product of the others at the zero,
     zero elsewhere; two or more zeros: all zero).
   - Broadcasting follows the static types: a dim broadcasts when it is known
     to be 1 (bcast pattern or shape), as in Theano.
   - cumprod: exact with zeros, without dividing by x (O(n^2) per line).
   - Shape adjoints that need sizes (reshape, flatten, slices with a step
     other than 1 or a whole reversal, concatenate) need them known at build
     time where the message says so (TN_ERR_UNSUPPORTED otherwise).          */

#include <math.h>
#include <string.h>

/* >>grad_dispatch: the rules are the op table's (each op's vjp and jvp,
   with its code in tensor_ops.h, the >>scan and >>custom sections). */

/* Fills gin[] for node given its gradient g. */
static tn_result tn__vjp(tn_var *node, tn_var *g, const bool *need, tn_var **gin) {
    char nb[64];
    const tn_op_def *def = tn__op_def(node->op);
    if (!def || !def->vjp)
        return tn__err(TN_ERR_UNSUPPORTED, "tn_grad: op %s (node '%s') has no gradient rule",
                       def && def->name ? def->name : "?", tn__gname(node, nb));
    return def->vjp(node, g, need, gin);
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
    if (!cost && nk == 0) return tn__err_null("tn_grad", "cost");
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
        if (!w) return tn__err_null("tn_grad", "wrt[%d]", i);
        if (w->graph != g) return tn__err(TN_ERR_GRAPH, "tn_grad: wrt[%d] '%s' belongs to another graph than the cost", i, tn__gname(w, nb));
        if (!tn_dtype_is_float(w->type.dtype))
            return tn__err(TN_ERR_DTYPE, "tn_grad: wrt[%d] '%s' is %s: gradients are defined for float variables only "
                           "(an integer or boolean input has no gradient; cast it to float first)", i, tn__gname(w, nb), tn_dtype_name(w->type.dtype));
    }
    *gp = g;
    return TN_OK;
}

/* The gradient of a wrt the cost does not reach, per disconnected_inputs. */
static tn_result tn__gdisconnected(tn_var *w, int i, tn_disconnected mode, bool null, tn_var **out) {
    char nb[64];
    static const char *why = "is not part of the computational graph of the cost (or reaches it only through "
                             "consider_constant or tn_stop_gradient)";
    if (mode == TN_DISCONNECTED_RAISE)
        return tn__err(TN_ERR_DISCONNECTED, "tn_grad: wrt[%d] '%s' %s; pass disconnected_inputs = "
                       "TN_DISCONNECTED_WARN or TN_DISCONNECTED_IGNORE to get zeros", i, tn__gname(w, nb), why);
    if (mode == TN_DISCONNECTED_WARN) tn__warn("tn_grad: wrt[%d] '%s' %s; its gradient is %s", i, tn__gname(w, nb), why, null ? "NULL" : "zero");
    if (null) { *out = NULL; return TN_OK; }
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
    uint64_t outer_pass = tn__gpass_cur;    /* tn_grad nests (a scan's step gradient) */
    tn__gpass_cur = ++tn__gpass_last;
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
        if (tn__op_has(v->op, TN_OPF_DISCRETE)) continue;   /* zero gradient */
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
            if ((r = tn__gdisconnected(w, i, opt ? opt->disconnected_inputs : TN_DISCONNECTED_RAISE,
                                       opt && opt->return_disconnected == TN_RETURN_NULL, &grads[i])) != TN_OK) goto done;
        } else {
            /* connected only through discrete values: zero */
            grads[i] = s.acc[w->id] ? tn__gbcast_like(s.acc[w->id], w) : tn__gzeros_like(w);
            if (!grads[i]) { r = tn__gfail("the result", w); goto done; }
        }
        if (opt && opt->add_names && grads[i] && cost && cost->name && w->name) {
            char nm[200];
            snprintf(nm, sizeof nm, "(d%s/d%s)", cost->name, w->name);
            if (!tn_var_set_name(grads[i], nm)) { r = tn_last_result(); goto done; }
        }
    }
    r = TN_OK;
done:
    if (r != TN_OK) {
        for (int i = 0; grads && i < n; i++) grads[i] = NULL;
        r = tn__err_in("tn_grad", r);    /* a constructor that failed inside names itself after tn_grad */
    }
    tn__free(roots); tn__free(need); tn__free(gin);
    tn__gstate_free(&s);
    tn__gpass_cur = outer_pass;
    return r;
}

TN_API tn_var *tn_grad1(tn_var *cost, tn_var *wrt) {
    tn_var *gr = NULL;
    if (tn_grad(cost, 1, &wrt, &gr, NULL) == TN_OK) return gr;
    tn__err_as("tn_grad1", "tn_grad");
    return NULL;
}

TN_API tn_var *tn_stop_gradient(tn_var *x) {
    if (!x) { tn__err_null("tn_stop_gradient", "x"); return NULL; }
    tn_params p;
    memset(&p, 0, sizeof p);
    /* a node of its own (never x itself) so the flag marks only this use */
    tn_var *v = tn__node(x->graph, TN_OP_IDENTITY, 1, &x, &p, NULL, "tn_stop_gradient");
    if (v) v->flags |= TN_VAR_NO_GRAD;
    return v;
}

/* >>rop: forward mode. t[i] is in[i]'s tangent (NULL: zero); *out the node's. */

/* TN_OPF_LINEAR ops: the op applied to in[0]'s tangent, its other inputs kept
   (a fill's `like` only shapes it: its tangent alone gives zero). */
static tn_result tn__jvp_linear(tn_var *node, tn_var *const *t, tn_var **out) {
    tn_var *ins[TN_MAX_IPARAMS];
    if (!t[0]) return TN_OK;
    if (node->n_in > TN_MAX_IPARAMS) return tn__err(TN_ERR_UNSUPPORTED, "tn_rop: too many inputs");
    ins[0] = t[0];
    for (int i = 1; i < node->n_in; i++) ins[i] = node->in[i];
    *out = tn__gclone(node, ins);
    return *out ? TN_OK : tn__gfail("a tangent", node);
}

static tn_result tn__jvp(tn_var *node, tn_var **t, tn_var **out) {
    char nb[64];
    const tn_op_def *def = tn__op_def(node->op);
    *out = NULL;
    if (def && (def->flags & TN_OPF_DISCRETE)) return TN_OK;   /* zero */
    tn_result (*jvp)(tn_var *, tn_var *const *, tn_var **) =
        !def ? NULL : def->jvp ? def->jvp : (def->flags & TN_OPF_LINEAR) ? tn__jvp_linear : NULL;
    if (!jvp)
        return tn__err(TN_ERR_UNSUPPORTED, "tn_rop: op %s (node '%s') has no forward-mode rule",
                       def && def->name ? def->name : "?", tn__gname(node, nb));
    tn_result r = jvp(node, t, out);
    if (r != TN_OK) { *out = NULL; return r; }
    if (*out && (*out)->type.dtype != node->type.dtype && !(*out = tn_cast(*out, node->type.dtype))) return tn__gfail("a tangent", node);
    return TN_OK;
}

TN_API tn_var *tn_rop(tn_var *f, int n, tn_var *const *wrt, tn_var *const *eval_points) {
    char nb[64], sb[128], sb2[128];
    tn__gstate s;
    tn_var *res = NULL;
    if (!f) { tn__err_null("tn_rop", "f"); return NULL; }
    if (n < 1 || !wrt || !eval_points) { tn__err(TN_ERR_NULL, "tn_rop: needs n >= 1 (got %d), wrt and eval_points", n); return NULL; }
    for (int i = 0; i < n; i++) {
        tn_var *w = wrt[i], *e = eval_points[i];
        if (!w || !e) { tn__err(TN_ERR_NULL, "tn_rop: wrt[%d] or eval_points[%d] is NULL", i, i); return NULL; }
        if (w->graph != f->graph || e->graph != f->graph) { tn__err(TN_ERR_GRAPH, "tn_rop: wrt[%d] '%s' or its eval point belongs to another graph", i, tn__gname(w, nb)); return NULL; }
        if (!tn_dtype_is_float(w->type.dtype)) { tn__err(TN_ERR_DTYPE, "tn_rop: wrt[%d] '%s' is %s: float variables only", i, tn__gname(w, nb), tn_dtype_name(w->type.dtype)); return NULL; }
        bool same = e->type.ndim == w->type.ndim;
        for (int d = 0; same && d < w->type.ndim; d++)
            same = e->type.shape[d] < 0 || w->type.shape[d] < 0 || e->type.shape[d] == w->type.shape[d];
        if (!same) {
            tn__err(TN_ERR_SHAPE, "tn_rop: eval_points[%d] of shape %s does not match wrt[%d] '%s' of shape %s", i,
                    tn__shape_str(e->type.ndim, e->type.shape, sb), i, tn__gname(w, nb), tn__shape_str(w->type.ndim, w->type.shape, sb2));
            return NULL;
        }
    }
    if (tn__gstate_init(&s, f->graph, "tn_rop") != TN_OK) return NULL;
    uint64_t outer_pass = tn__gpass_cur;
    tn__gpass_cur = ++tn__gpass_last;
    if (tn__greach(&s, 1, &f, "tn_rop") != TN_OK) goto done;
    for (int i = 0; i < n; i++) s.st[wrt[i]->id] |= TN__G_WRT;
    tn__gdeps(&s, NULL);
    if (!(s.st[f->id] & TN__G_DEP)) {
        tn__err(TN_ERR_DISCONNECTED, "tn_rop: f '%s' does not depend on any of the %d wrt variables", tn__gname(f, nb), n);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        tn_var *e = eval_points[i], *w = wrt[i];
        if (e->type.dtype != w->type.dtype && !(e = tn_cast(e, w->type.dtype))) goto done;
        /* e takes w's shape at call time too (an error if it cannot): a
           tangent of another shape would give f's R-op another shape */
        bool known = true;
        for (int d = 0; d < w->type.ndim; d++) known = known && w->type.shape[d] >= 0 && e->type.shape[d] == w->type.shape[d];
        if (!known && !(e = tn_fill(w, e))) goto done;
        s.acc[w->id] = tn__gadd(s.acc[w->id], e);
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
    if (!res) tn__err_in("tn_rop", tn_last_result() != TN_OK ? tn_last_result() : TN_ERR_INTERNAL);
    tn__gstate_free(&s);
    tn__gpass_cur = outer_pass;
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
    v->g->no_test_values = true;
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

/* One of tn_verify_grad's functions: its inputs to `outputs`. */
static tn_func *tn__vg_function(const tn__vg *v, int n_outputs, tn_var *const *outputs, const char *name) {
    tn_func_desc fd = { .n_inputs = v->d->n_inputs, .inputs = v->in, .n_outputs = n_outputs, .outputs = outputs,
                        .mode = v->d->mode, .name = name, .on_unused_input = TN_UNUSED_IGNORE };
    return tn_function(v->g, &fd);
}

/* Builds cost = sum(out * R), R a seeded random array of out's shape. */
static tn_result tn__vg_build(tn__vg *v, tn_var **cost) {
    const tn_verify_grad_desc *d = v->d;
    tn_clear_error();     /* an error after this is the builder's own */
    tn_var *out = d->build(v->g, v->in, d->user);
    if (!out) return tn_last_result() ? tn_last_result() : tn__err(TN_ERR_NULL, "tn_verify_grad: the builder returned NULL");
    if (!tn_dtype_is_float(out->type.dtype))
        return tn__err(TN_ERR_DTYPE, "tn_verify_grad: the builder's output is %s, not float", tn_dtype_name(out->type.dtype));
    if (out->type.ndim == 0) { *cost = tn_cast(out, TN_F64); return *cost ? TN_OK : tn_last_result(); }
    tn_array *o = NULL;
    if (!(v->fout = tn__vg_function(v, 1, &out, "verify_grad_out"))) return tn_last_result();
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
    tn_grad_options gopt = { .disconnected_inputs = TN_DISCONNECTED_IGNORE };
    double worst_score = -1;
    memset(&worst, 0, sizeof worst);
    tn_result r = tn__vg_setup(&v);
    if (r == TN_OK) r = tn__vg_build(&v, &cost);
    if (r != TN_OK) goto done;
    gv = (tn_var **)tn__calloc((size_t)n, sizeof(tn_var *));
    ga = (tn_array **)tn__calloc((size_t)n, sizeof(tn_array *));
    if (!gv || !ga) { r = tn__err(TN_ERR_OOM, "tn_verify_grad: out of memory"); goto done; }
    if ((r = tn_grad(cost, n, v.in, gv, &gopt)) != TN_OK) goto done;
    v.fcost = tn__vg_function(&v, 1, &cost, "verify_grad_cost");
    v.fgrad = tn__vg_function(&v, n, gv, "verify_grad_grads");
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
    /* errors of the builder, of tn_grad and of the functions it runs, said as its own */
    if (r != TN_OK && strncmp(tn_last_error(), "tn_verify_grad", 14) != 0) tn__err(r, "tn_verify_grad: %s", tn_last_error());
    return r;
}

/* >>function ----------------------------------------------------------- */

/* Outputs a caller may have written straight into arrays it gives
   (tn__call_into: a scan's step into its stacked rows): an output's own
   slot (no input, view, update or second output shares it), made by a step
   that writes its whole output wherever it is pointed: not in place, or in
   place where the kernel also works out of place (elementwise, GEMM/GEMV,
   which copy their addend over first). */
static void tn__mark_dests(tn_func *f) {
    for (int s = 0; s < f->n_slots; s++) f->slots[s].dest = -1;
    for (int i = 0; i < f->n_outputs; i++) {
        int s = f->out_slot[i];
        bool ok = f->slots[s].kind == TN__SLOT_INTERNAL && f->slots[s].view_of < 0;
        for (int j = 0; ok && j < f->n_outputs; j++) ok = j == i || f->out_slot[j] != s;
        for (int j = 0; ok && j < f->n_updates; j++) ok = f->upd_slot[j] != s;
        const tn__step *st = NULL;
        for (int k = 0; ok && k < f->n_steps && !st; k++)
            if (s >= f->steps[k].out_slot && s < f->steps[k].out_slot + f->steps[k].n_out) st = &f->steps[k];
        if (!ok || !st || st->view) continue;
        const tn_var *v = st->node;
        tn_op_kind kd = tn__op_kind(v->op);
        if (!v->inplace || kd == TN_OPK_ELEMWISE || kd == TN_OPK_COMPOSITE || v->op == TN_OP_GEMV || v->op == TN_OP_GEMM)
            f->slots[s].dest = i;
    }
}

static void tn__plan_release(tn_func *f) {
    tn__replay_drop(f);                 /* its graphs baked in the buffers freed here */
    if (f->scan_step && f->n_phys) tn__atomic_fetch_add(&tn__scan_epoch, 1);   /* so did its callers' (>>replay) */
    for (int s = 0; f->slots && s < f->n_slots; s++) { tn_array_free(f->slots[s].own); f->slots[s].own = NULL; }
    for (int i = 0; i < f->n_phys; i++) tn__buffer_release(f->phys[i].base);
    f->n_phys = 0;
    f->n_pool = 0;
    f->planned = false;
}

/* >>shared_locks --------------------------------------------------------- */
/* A call holds the locks of every shared variable its function reads or
   updates, from reading their values to writing the updates, so concurrent
   functions see each update whole. Locks are taken in one global order (the
   variables' creation numbers): no deadlock. On a device, each variable's
   event orders the next user's stream after the last one's work (readers
   mark it too: the next writer may reuse the buffer they read). A function
   with no shared variables takes no lock. */
static tn_result tn__func_locks(tn_func *f) {
    int cap = f->n_updates, n = 0;
    for (int s = 0; s < f->n_slots; s++) cap += f->slots[s].kind == TN__SLOT_SHARED;
    if (cap == 0) return TN_OK;
    f->locks = (tn__shvar **)tn__calloc((size_t)cap, sizeof *f->locks);
    if (!f->locks) return tn__err(TN_ERR_OOM, "%s: out of memory", f->name);
    for (int i = 0, s = 0; i < cap; i++) {
        const tn_var *u = NULL;
        if (i < f->n_updates) u = f->upd_user[i];
        else {
            while (f->slots[s].kind != TN__SLOT_SHARED) s++;
            u = f->slots[s++].user;
        }
        tn__shvar *sh = u ? (tn__shvar *)u->ext : NULL;
        bool dup = false;
        for (int k = 0; k < n && sh; k++) dup |= f->locks[k] == sh;
        if (!sh || dup) continue;
        int j = n++;          /* insertion by seq */
        while (j > 0 && f->locks[j - 1]->seq > sh->seq) { f->locks[j] = f->locks[j - 1]; j--; }
        f->locks[j] = sh;
    }
    f->n_locks = n;
    return TN_OK;
}

static void tn__shvar_release(tn__shvar *sh) {
    const tn_backend *b = tn__get_backend();
    if (sh->bs && b && b->shared_free) b->shared_free(sh->bs);
    sh->bs = NULL;
    pthread_mutex_destroy(&sh->mu);
}

static void tn__func_lock(tn_func *f) {
    for (int i = 0; i < f->n_locks; i++) tn__shvar_lock(f->locks[i]);
}
static void tn__func_unlock(tn_func *f) {
    for (int i = f->n_locks - 1; i >= 0; i--) tn__shvar_unlock(f->locks[i]);
}

/* After func_enter made f's stream current: order it after the last work on
   each variable (nothing to do while the same stream keeps using them). */
static tn_result tn__func_shared_order(tn_func *f) {
    if (!f->bfstate || !f->backend->shared_order) return TN_OK;
    for (int i = 0; i < f->n_locks; i++) {
        tn_result r = f->backend->shared_order(&f->locks[i]->bs);
        if (r != TN_OK) return tn__err(r, "%s: %s", f->name, tn_last_error());
    }
    return TN_OK;
}

static void tn__retired_release(tn_func *f) {
    for (int i = 0; i < f->n_retired; i++) tn_array_free(f->retired[i]);
    f->n_retired = 0;
}

/* f runs on its caller's stream (a scan's step function): no stream of its own. */
static void tn__func_share_stream(tn_func *f) {
    if (f && f->bfstate && !f->bf_borrowed && f->backend && f->backend->func_free) f->backend->func_free(f->bfstate);
    if (f) { f->bfstate = NULL; f->bf_borrowed = false; }
}

TN_API void tn__func_stream_from(tn_func *f, const tn_func *owner) {
    if (!f || !owner || !owner->bfstate || f->backend != owner->backend) return;
    tn__func_share_stream(f);
    f->bfstate = owner->bfstate;
    f->bf_borrowed = true;
}

TN_API void tn_function_free(tn_func *f) {
    if (!f || tn__func_check(f, "tn_function_free") != TN_OK) return;
    if (f->prof) tn__prof_finish(f);
    tn__plan_release(f);
    tn__replay_free(f);
    tn__retired_release(f);
    for (int i = 0; i < f->n_steps; i++)
        if (f->steps[i].bstate && f->steps[i].brow && f->steps[i].brow->release) f->steps[i].brow->release(f->steps[i].bstate);
    tn__func_share_stream(f);
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
    tn__free(f->locks);
    if (f->ring_ref) for (int i = 0; i < f->n_outputs * TN__RING; i++) tn__buffer_release(f->ring_ref[i]);
    tn__free(f->ring_ref);
    tn__free(f->ring);
    tn__free(f->out_borrow);
    tn__free(f->out_slot);
    tn__free(f->in_name);
    for (int i = 0; f->in_conv && i < f->n_inputs; i++) tn_array_free(f->in_conv[i]);
    tn__free(f->in_conv);
    tn__free(f->in_type);
    tn__free(f->in_slot);
    /* The function graph's shared leaves link to the user's (ext, see
       tn__clone_var): their locks are the user graph's to release, and that
       graph may be gone already. */
    for (int i = 0; f->fg && i < f->fg->nvars; i++)
        if (f->fg->vars[i]->op == TN_OP_SHARED) f->fg->vars[i]->ext = NULL;
    tn_graph_free(f->fg);
    tn__func_block_free(f);
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
    if ((unsigned)d->mode > TN_MODE_CHECK) return tn__err(TN_ERR_INVALID, "%s: mode %d is not a tn_mode", W, (int)d->mode);
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
        if (tn__shared_shape_check(s, v->type.ndim, v->type.shape, W, i) != TN_OK) return tn__err(TN_ERR_UPDATE, "%s", tn_last_error());
    }
    if (d->n_givens < 0 || (d->n_givens > 0 && !d->givens))
        return tn__err(d->n_givens < 0 ? TN_ERR_INVALID : TN_ERR_NULL, "%s: n_givens is %d but givens is %s", W, d->n_givens, d->givens ? "set" : "NULL");
    if ((unsigned)d->on_unused_input > TN_UNUSED_IGNORE)
        return tn__err(TN_ERR_INVALID, "%s: on_unused_input %d is not a tn_unused_input", W, (int)d->on_unused_input);
    for (int i = 0; i < d->n_givens; i++) {
        tn_var *v = d->givens[i].var, *x = d->givens[i].value;
        if (!v || !x) return tn__err(TN_ERR_NULL, "%s: given %d: %s is NULL", W, i, !v ? "var" : "value");
        if (v->graph != g || x->graph != g) return tn__err(TN_ERR_GRAPH, "%s: given %d ('%s'): variables from another graph", W, i, tn__var_label_name(v));
        if (v->type.dtype != x->type.dtype || v->type.ndim != x->type.ndim) {
            char a[160], b[160];
            return tn__err(TN_ERR_DTYPE, "%s: given %d: '%s' has type %s but its replacement has type %s (dtype and ndim must match; cast it)",
                           W, i, tn__var_label_name(v), tn__type_str(&v->type, a), tn__type_str(&x->type, b));
        }
        for (int j = 0; j < i; j++)
            if (d->givens[j].var == v) return tn__err(TN_ERR_INVALID, "%s: '%s' is given twice (givens %d and %d)", W, tn__var_label_name(v), j, i);
        for (int j = 0; j < d->n_inputs; j++)
            if (d->inputs[j] == v)
                return tn__err(TN_ERR_INVALID, "%s: '%s' is both input %d and replaced by given %d", W, tn__var_label_name(v), j, i);
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
    v->ctx = u->ctx;
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

/* Copies of roots[n] in g with from[i] replaced by to[i] (Theano's clone with
   replace): nodes that reach a replaced one are cloned, the rest shared. */
static tn_result tn__graph_replace(tn_graph *g, tn_var *const *roots, int n, tn_var *const *from, tn_var *const *to, int n_rep,
                                tn_var **out, const char *who) {
    int nv = tn__graph_nvars(g);
    tn_var **order = NULL;
    int n_order = 0;
    tn_result r = tn__toposort(roots, n, nv, &order, &n_order, NULL, who);
    if (r != TN_OK) return r;
    tn_var **map = (tn_var **)tn__calloc((size_t)nv + 1, sizeof *map);
    if (!map) { tn__free(order); return tn__err(TN_ERR_OOM, "%s: out of memory", who); }
    for (int k = 0; k < n_order && r == TN_OK; k++) {
        tn_var *u = order[k], *rep = NULL;
        for (int j = 0; j < n_rep && !rep; j++) if (from[j] == u) rep = to[j];
        bool changed = false;
        for (int i = 0; i < u->n_in; i++) changed |= map[u->in[i]->id] != u->in[i];
        if (rep) map[u->id] = rep;
        else if (!changed) map[u->id] = u;
        else if (!(map[u->id] = tn__clone_var(g, u, map))) r = tn_last_result() ? tn_last_result() : TN_ERR_OOM;
    }
    for (int i = 0; r == TN_OK && i < n; i++) out[i] = map[roots[i]->id];
    tn__free(map);
    tn__free(order);
    return r;
}

/* The roots with every given var replaced by its value (new nodes in g
   where a root reaches one); a value that reaches its own var is a cycle. */
static tn_result tn__apply_givens(tn_graph *g, const tn_func_desc *d, tn_var **roots, int n_roots) {
    const char *W = "tn_function";
    int n = d->n_givens;
    tn_var **from = (tn_var **)tn__malloc(2 * (size_t)n * sizeof *from), **to = from ? from + n : NULL;
    if (!from) return tn__err(TN_ERR_OOM, "%s: out of memory", W);
    for (int i = 0; i < n; i++) { from[i] = d->givens[i].var; to[i] = d->givens[i].value; }
    tn_result r = TN_OK;
    /* a value is used as written (givens are not applied inside it) and must not reach its own var */
    for (int i = 0; i < n && r == TN_OK; i++) {
        tn_var **order = NULL;
        int n_order = 0;
        if ((r = tn__toposort(&to[i], 1, g->nvars, &order, &n_order, NULL, W)) != TN_OK) break;
        for (int k = 0; k < n_order; k++)
            if (order[k] == from[i]) { r = tn__err(TN_ERR_GRAPH, "%s: given %d: the value of '%s' depends on '%s' itself", W, i, tn__var_label_name(from[i]), tn__var_label_name(from[i])); break; }
        tn__free(order);
    }
    if (r == TN_OK) r = tn__graph_replace(g, roots, n_roots, from, to, n, roots, W);
    tn__free(from);
    return r;
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
        if (map[u->id]) continue;
        if (d->on_unused_input != TN_UNUSED_IGNORE) {
            char msg[320];
            snprintf(msg, sizeof msg, "tn_function: input %d ('%s') is not used by any output or update%s", i, tn__var_label_name(u),
                     d->on_unused_input == TN_UNUSED_RAISE ? " (on_unused_input = TN_UNUSED_WARN or TN_UNUSED_IGNORE allows it)" : "");
            if (d->on_unused_input == TN_UNUSED_RAISE) { r = tn__err(TN_ERR_INVALID, "%s", msg); goto done; }
            tn__log(TN_LOG_WARN, msg);
        }
        if (!(map[u->id] = tn__clone_var(f->fg, u, map))) { r = tn_last_result() ? tn_last_result() : TN_ERR_OOM; goto done; }
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

/* A RESHAPE or FLATTEN step is a view (no copy, no buffer of its own) when
   its input is contiguous on every call: the output of a kernel (an
   internal slot that is no view: the executor gives kernels contiguous
   buffers), or such a view of one, on the same device. Any other input (a
   caller's array, which may be strided; a shared value; a transposing view)
   keeps the copy, which the kernel makes when not aliased (tensor_ops.h,
   >>ops_shape). */
static bool tn__reshape_aliases(const tn_func *f, const tn_var *v, const int *slot_of) {
    if ((v->op != TN_OP_RESHAPE && v->op != TN_OP_FLATTEN) || v->device != v->in[0]->device) return false;
    const tn__slot *s = &f->slots[slot_of[v->in[0]->id]];
    while (s->view_of >= 0) {
        if (s->var->op != TN_OP_RESHAPE && s->var->op != TN_OP_FLATTEN) return false;
        s = &f->slots[s->view_of];
    }
    return s->kind == TN__SLOT_INTERNAL;
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
    int n_slots = 0, n_steps = 0, n_idx = 0, dev = TN_HOST;
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
            int k = tn__p_proj_index(&v->p);
            if (src->op == TN_OP_PROJ || k < 0 || k >= src->n_out) {
                r = tn__err(TN_ERR_GRAPH, "%s: malformed PROJ node %d", W, v->id);
                goto done;
            }
            slot_of[v->id] = slot_of[src->id] + k;
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
        st->view = def->kind == TN_OPK_VIEW || tn__reshape_aliases(f, v, slot_of);
        for (int i = 0; i < v->n_in; i++) {
            st->in_slot[i] = slot_of[v->in[i]->id];
            f->slots[st->in_slot[i]].nreaders++;
        }
        if (st->view) s->view_of = st->in_slot[0];
        if (v->n_in + v->n_out > f->max_args) f->max_args = v->n_in + v->n_out;
        if (on_device && !(st->brow = tn__backend_row(f->backend, v->op))) {
            r = tn__err(TN_ERR_INTERNAL, "%s: %s (node %d) was placed on the device, but the %s back end has no kernel for it",
                        W, def->name, v->id, f->backend->name);
            goto done;
        }
        if (on_device && st->brow->prepare) {
            r = st->brow->prepare(v, &st->bstate);
            if (r != TN_OK) { r = tn__err(r, "%s: back end %s cannot prepare %s: %s", W, f->backend->name, def->name, tn_last_error()); goto done; }
        }
        /* value inputs are read when a call is planned, before any step runs:
           from the leaf, behind a transfer placement put between */
        unsigned vm = def->value_inputs && def->infer_values ? def->value_inputs(v) : 0;
        if (vm && !(st->val_slot = (int *)tn__graph_alloc(f->fg, TN__MAX_VALUE_INPUTS * sizeof *st->val_slot))) {
            r = tn__err(TN_ERR_OOM, "%s: out of memory", W);
            goto done;
        }
        for (int i = 0; vm && i < v->n_in; i++) {
            if (!(vm >> i & 1)) continue;
            const tn_var *x = v->in[i];
            while (tn__op_kind(x->op) == TN_OPK_TRANSFER) x = x->in[0];
            tn__slot *vs = &f->slots[slot_of[x->id]];
            if (i >= TN__MAX_VALUE_INPUTS || vs->kind == TN__SLOT_INTERNAL || x->type.ndim != 0) {
                char lb[160];
                tn__node_label(v, lb, sizeof lb);
                r = tn__err(TN_ERR_UNSUPPORTED, "%s: %s (node %d) reads the value of its input %d ('%s') to size its result, "
                            "but that value is computed in the graph: it must be a 0-d input, shared variable or constant",
                            W, lb, v->id, i, tn__var_label_name(v->in[i]));
                goto done;
            }
            vs->valued = true;
            st->val_slot[i] = slot_of[x->id];
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
    tn__mark_dests(f);
    f->n_ext = 0;
    f->ext_slots = (int *)tn__malloc(((size_t)f->n_slots + 1) * sizeof *f->ext_slots);
    f->args = (tn_array **)tn__malloc((size_t)f->max_args * sizeof *f->args);
    if (!f->ext_slots || !f->args) { r = tn__err(TN_ERR_OOM, "%s: out of memory", W); goto done; }
    for (int s = 0; s < f->n_slots; s++)
        if (f->slots[s].kind == TN__SLOT_INPUT || f->slots[s].kind == TN__SLOT_SHARED) f->ext_slots[f->n_ext++] = s;
    f->cache = (int64_t *)tn__calloc((size_t)f->n_ext * (2 + TN_MAX_DIMS) + 1, sizeof *f->cache);
    if (!f->cache) { r = tn__err(TN_ERR_OOM, "%s: out of memory", W); goto done; }
    if ((r = tn__func_locks(f)) != TN_OK) goto done;
    /* a function with device steps gets its own stream there */
    for (int k = 0; k < f->n_steps && dev == TN_HOST; k++) dev = f->steps[k].node->device;
    if (dev != TN_HOST && f->backend && f->backend->func_new && f->backend->func_enter) f->bfstate = f->backend->func_new(dev);
done:
    tn__free(slot_of);
    tn__free(order);
    return r;
}

/* The updates of d and, after them, those its stateful nodes (random draws)
   ask for (tn_op_def.state_update) whose shared variable no update sets:
   *all (the caller frees it) with *n_all entries, or NULL when there are none. */
static tn_result tn__stateful_updates(tn_graph *g, const tn_func_desc *d, tn_update **all, int *n_all) {
    *all = NULL;
    *n_all = d->n_updates;
    int n_roots = d->n_outputs + d->n_updates, n_order = 0, cap = 0, n = d->n_updates;
    tn_var **roots = (tn_var **)tn__malloc(((size_t)n_roots + 1) * sizeof *roots), **order = NULL;
    if (!roots) return tn__err(TN_ERR_OOM, "tn_function: out of memory");
    for (int i = 0; i < d->n_outputs; i++) roots[i] = d->outputs[i];
    for (int i = 0; i < d->n_updates; i++) roots[d->n_outputs + i] = d->updates[i].value;
    tn_result r = tn__toposort(roots, n_roots, g->nvars, &order, &n_order, NULL, "tn_function");
    tn_update *u = NULL;
    for (int k = 0; r == TN_OK && k < n_order; k++) {
        const tn_op_def *def = tn__op_def(order[k]->op);
        if (!def || !def->state_update) continue;
        tn_update nu;
        if ((r = def->state_update(order[k], &nu)) != TN_OK) break;
        bool have = false;
        for (int i = 0; i < n && !have; i++) have = (u ? u[i].shared : d->updates[i].shared) == nu.shared;
        if (have) continue;
        if (!u) {
            cap = d->n_updates + 4;
            if (!(u = (tn_update *)tn__malloc((size_t)cap * sizeof *u))) { r = tn__err(TN_ERR_OOM, "tn_function: out of memory"); break; }
            for (int i = 0; i < d->n_updates; i++) u[i] = d->updates[i];
        }
        tn_update *grown = (tn_update *)tn__grow(u, &cap, n + 1, 4, sizeof *u);
        if (!grown) { r = tn__err(TN_ERR_OOM, "tn_function: out of memory"); break; }
        u = grown;
        u[n++] = nu;
    }
    tn__free(order);
    tn__free(roots);
    if (r != TN_OK) { tn__free(u); return r; }
    *all = u;
    *n_all = n;
    return TN_OK;
}

/* tn_function's last part: optimizes f's private graph (roots cloned) and
   schedules its steps. */
static tn_result tn__func_optimize(tn_func *f, const tn_func_desc *d, tn_var *const *uroots, int n_roots) {
    tn_mode mode = d->mode != TN_MODE_DEFAULT ? d->mode : tn_get_config()->mode;
    f->mode = mode;
    f->checks = (unsigned char)((mode == TN_MODE_CHECK ? TN__CHECK_MODE : 0) | (tn_get_config()->nan_guard ? TN__CHECK_NAN : 0));
    if (tn_get_config()->profile_trace) (void)tn__trace_on();    /* the trace starts before the compile's first event */
    double t_opt = tn__prof_now();
    tn_place_args pa = { d->n_outputs, f->upd_user, 64, true, 0 };
    if (d->context) {
        int k = tn_context_get(d->context);
        if (k < 0) return tn__err_as("tn_function: context", "tn_context_get");
        pa.context = k + 1;
    }
    const tn_backend *be = f->backend;
    if (be && be->max_operands > 0 && pa.max_fused_inputs > be->max_operands - 8)   /* room for the outputs */
        pa.max_fused_inputs = be->max_operands - 8 > 0 ? be->max_operands - 8 : 0;
    if (d->max_fused_inputs) pa.max_fused_inputs = d->max_fused_inputs > 0 ? d->max_fused_inputs : 0;
    tn_result r = tn__optimize(f->fg, f->roots, n_roots, mode, &pa);
    t_opt = tn__prof_now() - t_opt;
    if (r != TN_OK) {
        if (strncmp(tn_last_error(), "tn_function", 11) != 0) tn__err(r, "tn_function: optimizer failed: %s", tn_last_error());
        return r;
    }
    for (int i = 0; i < n_roots; i++) {
        tn_var *v = f->roots[i];
        if (!v || v->graph != f->fg || v->type.dtype != uroots[i]->type.dtype || v->type.ndim != uroots[i]->type.ndim)
            return tn__err(TN_ERR_INTERNAL, "tn_function: the optimizer replaced root %d with a variable of another type", i);
        if (!v->name && uroots[i]->name && !(v->name = tn__graph_strdup(f->fg, uroots[i]->name))) return TN_ERR_OOM;
    }
    f->n_roots = n_roots;
    double t_sched = tn__prof_now();
    if ((r = tn__schedule(f, n_roots)) != TN_OK) return r;
    if (tn_get_config()->profile || tn_get_config()->profile_trace) tn__prof_attach(f, t_opt, tn__prof_now() - t_sched);
    return TN_OK;
}

TN_API tn_func *tn_function(tn_graph *g, const tn_func_desc *d) {
    if (tn__check_desc(g, d) != TN_OK) return NULL;
    tn_update *all_updates = NULL;
    int n_all = 0;
    tn_func_desc dwith;
    if (tn__stateful_updates(g, d, &all_updates, &n_all) != TN_OK) { tn__err_in("tn_function", tn_last_result()); return NULL; }
    if (all_updates) {           /* the same function with the stateful nodes' updates added */
        dwith = *d;
        dwith.updates = all_updates;
        dwith.n_updates = n_all;
        d = &dwith;
    }
    tn_func *f = tn__func_block_new();
    if (!f) { tn__free(all_updates); tn__err(TN_ERR_OOM, "tn_function: out of memory"); return NULL; }
    int no = d->n_outputs, nu = d->n_updates, ni = d->n_inputs;
    int n_roots = no + nu;
    f->n_inputs = ni; f->n_outputs = no; f->n_updates = nu;
    f->fg = tn_graph_new();
    if (f->fg) f->fg->no_test_values = true;
    f->in_slot = (int *)tn__calloc((size_t)ni + 1, sizeof *f->in_slot);
    f->in_type = (tn_type *)tn__calloc((size_t)ni + 1, sizeof *f->in_type);
    f->in_name = (const char **)tn__calloc((size_t)ni + 1, sizeof *f->in_name);
    f->in_conv = (tn_array **)tn__calloc((size_t)ni + 1, sizeof *f->in_conv);
    f->allow_downcast = d->allow_input_downcast;
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
    if (!f->fg || !f->in_slot || !f->in_type || !f->in_name || !f->in_conv || !f->out_slot || !f->out_borrow || !f->ring || !f->ring_ref ||
        !f->upd_user || !f->upd_slot || !f->upd_swappable || !f->upd_new || !f->roots || !uroots) {
        tn__err(TN_ERR_OOM, "tn_function: out of memory");
        goto fail;
    }
    f->name = d->name ? tn__graph_strdup(f->fg, d->name) : "tn_call";
    if (!f->name) goto fail;
    f->backend = tn__get_backend();
    if (f->backend && f->backend->compile_clock) {
        char none[1];
        f->backend->compile_clock(&f->kc_kernels, &f->kc_seconds, &f->kc_stored, none, sizeof none);
        f->kc_thread = pthread_self();
    } else {
        f->compile_noted = true;
    }
    for (int i = 0; i < no; i++) {
        uroots[i] = d->outputs[i];
        f->out_borrow[i] = d->borrow_outputs ? d->borrow_outputs[i] : d->borrow;
    }
    for (int i = 0; i < nu; i++) { uroots[no + i] = d->updates[i].value; f->upd_user[i] = d->updates[i].shared; }
    if (d->n_givens > 0 && tn__apply_givens(g, d, uroots, n_roots) != TN_OK) goto fail;
    for (int i = 0; i < ni; i++) {
        f->in_type[i] = d->inputs[i]->type;
        f->in_name[i] = d->inputs[i]->name ? tn__graph_strdup(f->fg, d->inputs[i]->name) : "";
        if (!f->in_name[i]) goto fail;
    }
    if (tn__clone_subgraph(g, d, f, uroots, n_roots) != TN_OK || tn__func_optimize(f, d, uroots, n_roots) != TN_OK) goto fail;
    tn__free(uroots);
    tn__free(all_updates);
    return f;
fail:
    tn__err_in("tn_function", tn_last_result() != TN_OK ? tn_last_result() : TN_ERR_OOM);
    tn__free(uroots);
    tn__free(all_updates);
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
static int tn__phys_get(tn_func *f, size_t bytes, int device, bool exact) {
    int best = -1;
    for (int k = 0; k < f->n_pool; k++) {
        const tn__phys *p = &f->phys[f->pool[k]];
        if (p->device == device && (exact ? p->cap == bytes : p->cap >= bytes) && (best < 0 || p->cap < f->phys[f->pool[best]].cap)) best = k;
    }
    if (best >= 0) {
        int ph = f->pool[best];
        f->pool[best] = f->pool[--f->n_pool];
        f->phys[ph].in_pool = false;
        return ph;
    }
    if (f->n_phys == f->cap_phys) {
        int cap = f->cap_phys, cap_pool = f->cap_phys;
        tn__phys *n = (tn__phys *)tn__grow(f->phys, &cap, f->n_phys + 1, 16, sizeof *n);
        int *pool = (int *)tn__grow(f->pool, &cap_pool, f->n_phys + 1, 16, sizeof *pool);
        if (n) f->phys = n;
        if (pool) f->pool = pool;
        if (!n || !pool) return -1;
        f->cap_phys = cap;
    }
    tn__phys *p = &f->phys[f->n_phys];
    memset(p, 0, sizeof *p);
    p->cap = bytes;
    p->device = device;
    p->pin_device = TN_HOST;
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

/* A copied output needs no copy when its step can write straight into a new
   array each call, which the caller then owns: an internal slot that is no
   view (its own storage) and is returned once. Readers later in the call
   read that array; the plan gives the slot no buffer, so nothing else (and
   no in-place step) can reuse it. An output that is an input, a shared value
   or a constant, a view, or listed twice is copied in tn__make_outputs. */
static void tn__mark_fresh(tn_func *f) {
    for (int s = 0; s < f->n_slots; s++) f->slots[s].fresh = false;
    for (int i = 0; i < f->n_outputs; i++) {
        int s = f->out_slot[i];
        tn__slot *sl = &f->slots[s];
        bool ok = !f->out_borrow[i] && sl->kind == TN__SLOT_INTERNAL && sl->view_of < 0;
        for (int j = 0; ok && j < f->n_outputs; j++) ok = j == i || f->out_slot[j] != s;
        sl->fresh = ok;
    }
}

/* This call's array for fresh slot sl of step st: device outputs from the
   back end's caching allocator, a device-to-host copy's output in pinned host
   memory, anything else on the host. One left by a failed call is reused. */
static tn_result tn__fresh_output(tn_func *f, const tn__step *st, tn__slot *sl) {
    if (!sl->own) {
        const tn_array *a = &sl->arr;
        sl->own = st->node->op == TN_OP_HOST_FROM_GPU && a->device == TN_HOST
                ? tn__array_alloc_pinned(st->node->in[0]->device, a->dtype, a->ndim, a->shape)
                : tn__array_alloc(a->dtype, a->ndim, a->shape, a->device);
        if (!sl->own) return tn__err(TN_ERR_OOM, "%s: out of memory for an output: %s", f->name, tn_last_error());
    }
    return TN_OK;
}

/* The bits of a 0-d array's value (zero-padded to 8 bytes), from wherever
   it lives: a shared variable may have moved to a device (a copy and a wait). */
static tn_result tn__value_bits(const tn_array *a, unsigned char b[8]) {
    size_t es = tn_dtype_size(a->dtype);
    memset(b, 0, 8);
    if (es > 8 || !a->data) return tn__err(TN_ERR_INTERNAL, "a value input of %s has no value", tn_dtype_name(a->dtype));
    if (a->device == TN_HOST) { memcpy(b, a->data, es); return TN_OK; }
    const tn_device_ops *ops = tn__get_device_ops();
    if (!ops || !ops->copy) return tn__err(TN_ERR_DEVICE, "a value input lives on cuda%d, and no back end can read it", a->device);
    return ops->copy(b, TN_HOST, a->data, a->device, es);
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
    tn__mark_fresh(f);
    for (int k = 0; k < f->n_steps; k++) {
        tn__step *st = &f->steps[k];
        tn_var *v = st->node;
        for (int i = 0; i < st->n_in; i++) types[i] = f->slots[st->in_slot[i]].ct;
        tn_type *outs = types + st->n_in;
        memset(outs, 0, (size_t)st->n_out * sizeof *outs);
        char lb[256];
        /* an op sized by values (eye(n, m)): the value inputs as host arrays */
        const tn_array *vals[TN__MAX_VALUE_INPUTS] = { NULL };
        tn_array vcopy[TN__MAX_VALUE_INPUTS];
        unsigned char vbits[TN__MAX_VALUE_INPUTS][8];
        unsigned vm = st->def->value_inputs && st->def->infer_values ? st->def->value_inputs(v) : 0;
        for (int i = 0; vm && i < st->n_in && i < TN__MAX_VALUE_INPUTS && r == TN_OK; i++) {
            if (!(vm >> i & 1)) continue;
            const tn_array *a = f->slotp[st->val_slot[i]];
            if (a->device != TN_HOST) {
                if ((r = tn__value_bits(a, vbits[i])) != TN_OK) break;
                vcopy[i] = *a;
                vcopy[i].data = vbits[i];
                vcopy[i].device = TN_HOST;
                a = &vcopy[i];
            }
            vals[i] = a;
        }
        if (r != TN_OK || (r = tn__infer_outputs_v(v, types, vm ? vals : NULL, outs)) != TN_OK) {
            tn__node_label(v, lb, sizeof lb);
            const char *m = tn_last_error(), *name = st->def->name ? st->def->name : "";
            size_t nl = strlen(lb), nn = strlen(name);
            bool named = (!strncmp(m, lb, nl) && m[nl] == ':') || (nn && !strncmp(m, name, nn) && m[nn] == ':');
            r = named ? tn__err(r, "%s: %s", W, m) : tn__err(r, "%s: %s: %s", W, lb, m);   /* the op named once */
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
            else if (sl->fresh) ph = -1;       /* tn__fresh_output: a new array each call */
            else if (o == 0 && v->inplace > 0 && tn__inplace_ok(f, st, v->inplace - 1, &sl->ct) &&
                     (!sl->pinned || f->phys[f->slots[st->in_slot[v->inplace - 1]].phys].cap == tn__type_bytes(&sl->ct)))
                ph = f->slots[st->in_slot[v->inplace - 1]].phys;
            /* a kept value (output, update) gets a buffer of its exact size, so
               an update can swap it with the shared variable's own buffer */
            else if ((ph = tn__phys_get(f, tn__type_bytes(&sl->ct), v->device, sl->pinned)) < 0) {
                r = tn__err(TN_ERR_OOM, "%s: out of memory", W);
                goto fail;
            }
            sl->phys = ph;
            if (ph >= 0) {
                f->phys[ph].pending += sl->nreaders;
                if (sl->pinned) f->phys[ph].pinned = true;
                if (v->op == TN_OP_HOST_FROM_GPU && f->phys[ph].device == TN_HOST) f->phys[ph].pin_device = v->in[0]->device;
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
        tn_array *a = p->pin_device != TN_HOST ? tn__array_alloc_pinned(p->pin_device, TN_BOOL, 1, &n)
                                                 : tn__array_alloc(TN_BOOL, 1, &n, p->device);
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
/* NumPy's can_cast(from, to, 'safe'): every value of from is exact in to. */
static bool tn__can_cast_safe(tn_dtype from, tn_dtype to) {
    if (from == to || from == TN_BOOL) return true;
    switch (to) {
    case TN_I64: return from == TN_I32;
    case TN_F32: return from == TN_F16;
    case TN_F64: return from == TN_I32 || from == TN_I64 || from == TN_F16 || from == TN_F32;
    default: return false;
    }
}

static tn_result tn__check_input(const tn_func *f, int i, const tn_array *a) {
    const char *W = f->name, *nm = f->in_name[i];
    const tn_type *t = &f->in_type[i];
    char want[160], got[128];
    if (!a) return tn__err(TN_ERR_NULL, "%s: input %d ('%s') is NULL", W, i, nm);
    if (a->live_gen && a->gen != *a->live_gen)
        return tn__err(TN_ERR_STALE, "%s: input %d ('%s') is a stale borrowed array (from call %llu; its function is now at call %llu)",
                       W, i, nm, (unsigned long long)a->gen, (unsigned long long)*a->live_gen);
    if (a->live_gen == &f->gen)     /* valid until this call, which overwrites (or frees) its buffer */
        return tn__err(TN_ERR_STALE, "%s: input %d ('%s') is a borrowed output of this function, which this call "
                       "overwrites: pass a copy (tn_array_copy)", W, i, nm);
    bool cast_ok = tn__can_cast_safe(a->dtype, t->dtype) || f->allow_downcast;
    if (!cast_ok || a->ndim != t->ndim) {
        tn__shape_str(a->ndim, a->shape, got);
        return tn__err(!cast_ok ? TN_ERR_DTYPE : TN_ERR_SHAPE,
                       "%s: input %d ('%s') expects %s but got a %s array of %d dims %s%s", W, i, nm,
                       tn__type_str(t, want), tn_dtype_name(a->dtype), a->ndim, got,
                       !cast_ok ? " (converting it could lose precision: cast it, or compile with allow_input_downcast)" : "");
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

/* True when an external array's shape, or the value of one whose value a
   step's type rule reads (tn__slot.valued), differs from the one the plan
   used. A value that cannot be read counts as changed: the plan says why. */
static bool tn__shapes_changed(tn_func *f) {
    bool changed = !f->planned;
    for (int e = 0; e < f->n_ext; e++) {
        const tn_array *a = f->slotp[f->ext_slots[e]];
        int64_t *c = f->cache + (size_t)e * (2 + TN_MAX_DIMS);
        if (c[0] != a->ndim) { changed = true; c[0] = a->ndim; }
        for (int d = 0; d < a->ndim; d++)
            if (c[1 + d] != a->shape[d]) { changed = true; c[1 + d] = a->shape[d]; }
        if (f->slots[f->ext_slots[e]].valued) {
            unsigned char b[8];
            int64_t w;
            if (tn__value_bits(a, b) != TN_OK) { changed = true; continue; }
            memcpy(&w, b, sizeof w);
            if (c[1 + TN_MAX_DIMS] != w) { changed = true; c[1 + TN_MAX_DIMS] = w; }
        }
    }
    return changed;
}

/* The fence scope (tn__fence_open): while a call runs its steps, a copy
   that touches host memory (a device output into page-locked memory, an
   input read by DMA from the caller's buffer) may stay queued. The fence
   waits for them: before a host step reads host memory, and before the call
   returns, so the caller's memory is not touched after tn_call and one wait
   covers every output. Scopes nest (tn__fence_enter/leave): a call inside
   an open scope (a replica of tn_replicated_call) leaves its copies queued
   for the outermost scope's fence, and waits only before the executor
   reads host memory itself (a copied output, an update copied). (The
   profiler times device and transfer steps with events, so it needs no
   wait either.) */
static TN__THREAD_LOCAL int tn__fence_depth;
TN_API bool tn__fence_open(void) { return tn__fence_depth > 0; }

static tn_result tn__fence(void) {
    const tn_device_ops *ops = tn__get_device_ops();
    return ops && ops->fence ? ops->fence() : TN_OK;
}

TN_API void tn__fence_enter(void) { tn__fence_depth++; }
TN_API tn_result tn__fence_leave(void) { return --tn__fence_depth > 0 ? TN_OK : tn__fence(); }

/* d can stand for a: dtype, device, shape and strides. */
static bool tn__same_layout(const tn_array *d, const tn_array *a) {
    if (d->dtype != a->dtype || d->device != a->device || d->ndim != a->ndim) return false;
    for (int k = 0; k < a->ndim; k++) if (d->shape[k] != a->shape[k] || d->strides[k] != a->strides[k]) return false;
    return true;
}

/* How tn__steps runs: every step, or (the >>replay section's probe)
   only the views, noting each kernel's operands instead of launching it. */
enum { TN__STEPS_RUN = 0, TN__STEPS_PROBE };
static tn_result tn__replay_note(tn_func *f, const tn__step *st, tn_array *const *in, tn_array *const *out);

/* The >>replay section's capture of f's steps by their data (set while
   capturing f; the steps of functions it calls, a scan's, follow in order). */
typedef struct tn__replay_dag tn__replay_dag;
static TN__THREAD_LOCAL tn__replay_dag *tn__dag;
static tn_result tn__dag_before(tn__replay_dag *d, int k, tn_array *const *in, tn_array *const *out);
static tn_result tn__dag_after(tn__replay_dag *d, int k);
static const tn_func *tn__dag_of(const tn__replay_dag *d);

static tn_result tn__steps(tn_func *f, int how) {
    tn__replay_dag *dag = how == TN__STEPS_RUN && tn__dag && tn__dag_of(tn__dag) == f ? tn__dag : NULL;
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
            } else if (sl->fresh) {
                tn_result r = tn__fresh_output(f, st, sl);
                if (r != TN_OK) return r;
                a->base = sl->own->base;
                a->data = sl->own->data;
            } else {
                a->base = f->phys[sl->phys].base;
                a->data = f->phys[sl->phys].data;
                const tn_array *d = sl->dest >= 0 && f->out_dest ? f->out_dest[sl->dest] : NULL;
                if (d && tn__same_layout(d, a)) { a->base = d->base; a->data = d->data; }
            }
            out[o] = a;
        }
        tn_var *v = st->node;
        if (how == TN__STEPS_PROBE) {
            tn_result r = tn__replay_note(f, st, in, out);
            if (r != TN_OK) return tn__err(r, "%s: staging step %d: %s", f->name, k, tn_last_error());
            if (!st->view) continue;
        }
        /* a host step reads host memory a queued copy may still write (a
           transfer's input is on its device, or its copy waits by itself) */
        if (!st->brow && !st->view && tn__fence_depth && !(st->def->kind == TN_OPK_TRANSFER && in[0]->device != TN_HOST)) {
            tn_result r = tn__fence();
            if (r != TN_OK) return tn__err(r, "%s: %s", f->name, tn_last_error());
        }
        /* a probe's views are the graph launch's host time, and counted with
           its steps (tn__prof_replayed) */
        bool timed = f->prof && how != TN__STEPS_PROBE;
        double t0 = timed ? tn__prof_step_begin(f, k) : 0;
        tn_result r = dag && !st->view ? tn__dag_before(dag, k, in, out) : TN_OK;
        if (r == TN_OK)
            r = tn__check_wanted(f, st) ? tn__check_step(f, st, in, out)      /* mode=check */
              : st->brow ? st->brow->run(v, st->bstate, in, out)
              : st->def->cpu(v, in, out);
        if (r == TN_OK && dag && !st->view) r = tn__dag_after(dag, k);
        if (timed) tn__prof_step(f, k, t0);
        if (r != TN_OK) {
            char lb[256];
            tn__node_label(v, lb, sizeof lb);
            return tn__err(r, "%s: %s (step %d of %d): %s", f->name, lb, k, f->n_steps, tn_last_error());
        }
    }
    /* Device work stays queued: HostFromGpu waits for the stream itself, and
       device outputs and updates are ordered on it. The profiler times device
       steps with events, so it does not wait either. */
    return TN_OK;
}

/* Every step, once; through a captured CUDA graph where f has one (the
   >>replay section); then the fence. */
static tn_result tn__run_steps(tn_func *f) {
    tn__fence_enter();
    tn_result r = tn__replay_run(f);
    tn_result rf = tn__fence_leave();     /* after a failure too: nothing stays queued on the caller's memory */
    if (r == TN_OK && rf != TN_OK) r = tn__err(rf, "%s: %s", f->name, tn_last_error());
    return r;
}

/* The shared value can take the update's buffer, and give its own buffer
   (big enough for the plan) to the function in exchange. */
static bool tn__can_swap(const tn_func *f, int u) {
    if (!f->upd_swappable[u] || (f->upd_user[u]->flags & TN_VAR_BORROWED)) return false;
    const tn__slot *sl = &f->slots[f->upd_slot[u]];
    const tn_array *S = f->upd_user[u]->value;
    const tn__phys *p = &f->phys[sl->phys];
    return S && S->base && S->base->owns && S->live_gen == NULL && S->device == p->device &&
           S->data == S->base->data && S->base->bytes >= p->cap && tn_array_is_contiguous(S);
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
    bool host = false;
    for (int u = 0; u < nu; u++) {         /* fixed shapes first: all updates or none */
        const tn_array *nv = f->slotp[f->upd_slot[u]];
        tn_result r = tn__shared_shape_check(f->upd_user[u], nv->ndim, nv->shape, f->name, u);
        if (r != TN_OK) return r;
        host |= nv->device == TN_HOST;
    }
    if (host && tn__fence() != TN_OK)     /* a new value a queued copy may still write */
        return tn__err(tn_last_result(), "%s: %s", f->name, tn_last_error());
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
        if (f->upd_new[u] && (f->upd_user[u]->flags & TN_VAR_BORROWED)) {
            /* written into the caller's array (a fresh copy: no overlap) */
            tn_array *nv = f->upd_new[u];
            if (S->device == TN_HOST) tn__copy_strided(S->dtype, S->data, S->strides, nv->dtype, nv->data, nv->strides, S->ndim, S->shape);
            else if (tn_array_assign(S, nv) != TN_OK) {
                for (int j = u; j < nu; j++) { tn_array_free(f->upd_new[j]); f->upd_new[j] = NULL; }
                return tn__err(tn_last_result(), "%s: update %d ('%s'): %s", f->name, u, tn__var_label_name(f->upd_user[u]), tn_last_error());
            }
            tn_array_free(nv);
            f->upd_new[u] = NULL;
            continue;
        }
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
        tn__slot *sl = &f->slots[f->out_slot[i]];
        if (sl->fresh && sl->own) {                    /* written in place by its step: the caller takes it */
            outputs[i] = sl->own;
            sl->own = NULL;
            continue;
        }
        const tn_array *o = f->slotp[f->out_slot[i]];
        tn_result rf = o->device == TN_HOST ? tn__fence() : TN_OK;   /* a queued copy may still write it */
        tn_array *c = rf == TN_OK ? tn__copy_on(o, o->device) : NULL; /* a device output (tn_gpu_from_host) stays there */
        if (!c && rf != TN_OK) {
            for (int j = 0; j < i; j++) { tn_array_free(outputs[j]); outputs[j] = NULL; }
            return tn__err(rf, "%s: output %d: %s", f->name, i, tn_last_error());
        }
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

static tn_result tn__call(tn_func *f, tn_array *const *inputs, tn_array **outputs);

/* Input i converted to its dtype (NumPy's astype) in a buffer kept for the
   next call of the same shape: the slot reads the conversion. */
static tn_result tn__convert_input(tn_func *f, int i, const tn_array *a) {
    tn_array *c = f->in_conv[i];
    bool same = c && c->ndim == a->ndim;
    for (int d = 0; same && d < a->ndim; d++) same = c->shape[d] == a->shape[d];
    if (!same) {
        tn_array_free(c);
        f->in_conv[i] = c = tn__array_alloc(f->in_type[i].dtype, a->ndim, a->shape, TN_HOST);
        if (!c) return tn__err(TN_ERR_OOM, "%s: out of memory converting input %d ('%s') to %s", f->name, i, f->in_name[i],
                               tn_dtype_name(f->in_type[i].dtype));
    }
    if (a->device == TN_HOST) tn__copy_strided(c->dtype, c->data, c->strides, a->dtype, a->data, a->strides, a->ndim, a->shape);
    else {                                   /* a device array: through the host (rare; allocates) */
        tn_result r = tn_array_assign(c, a);
        if (r != TN_OK) return tn__err(r, "%s: converting input %d ('%s'): %s", f->name, i, f->in_name[i], tn_last_error());
    }
    f->slotp[f->in_slot[i]] = c;
    return TN_OK;
}

/* >>compile_note: a long first call says why --------------------------------
   The GPU kernels of a function are compiled (NVRTC) while it is compiled
   and at its first call. When that took over a second, the end of the first
   call logs one line (TN_LOG_WARN): how many kernels, how long, and that the
   next run reads them from the disk cache (or that it cannot). Counted on
   the thread that compiled the function; a first call on another thread
   says nothing. */
static void tn__compile_note(tn_func *f) {
    f->compile_noted = true;
    if (!pthread_equal(f->kc_thread, pthread_self())) return;
    uint64_t n, stored;
    double s;
    char dir[512];
    f->backend->compile_clock(&n, &s, &stored, dir, sizeof dir);
    n -= f->kc_kernels;
    stored -= f->kc_stored;
    s -= f->kc_seconds;
    if (n == 0 || s <= 1.0) return;
    if (stored >= n)
        tn__warn("%s: compiling %llu GPU kernel%s took %.1f s; the next run reads them from the disk cache (%s)", f->name,
                 (unsigned long long)n, n == 1 ? "" : "s", s, dir);
    else
        tn__warn("%s: compiling %llu GPU kernel%s took %.1f s; %llu could not be kept in a disk cache (%s), so the next run "
                 "compiles them again", f->name, (unsigned long long)n, n == 1 ? "" : "s", s, (unsigned long long)(n - stored),
                 dir[0] ? dir : "none is set: cache_dir, XDG_CACHE_HOME and HOME are empty");
}

/* One call at a time per function (an atomic flag, no lock on this path);
   see "Threads" at the top of this file. */
TN_API tn_result tn_call(tn_func *f, tn_array *const *inputs, tn_array **outputs) { return tn__call_into(f, inputs, outputs, NULL); }

/* tn_call that writes output i straight into dests[i] (dests NULL, or an
   entry NULL: the function's own buffer) where the output's step can
   (tn__mark_dests) and dests[i] has the output's dtype, device, shape and
   strides this call; outputs[i] then points there (the caller compares). */
TN_API tn_result tn__call_into(tn_func *f, tn_array *const *inputs, tn_array **outputs, tn_array *const *dests) {
    tn_result r = tn__func_check(f, "tn_call");
    if (r != TN_OK) return r;
    if (tn__atomic_flag_test_and_set_explicit(&f->busy, TN__ACQUIRE))
        return tn__err(TN_ERR_BUSY, "tn_call: function '%s' is running in another thread; a function takes one call at a time "
                       "(compile one per thread to run them concurrently)", f->name);
    tn__func_lock(f);
    f->out_dest = dests;
    r = tn__call(f, inputs, outputs);
    f->out_dest = NULL;
    if (!f->compile_noted) tn__compile_note(f);
    tn__func_unlock(f);
    tn__atomic_flag_clear_explicit(&f->busy, TN__RELEASE);
    return r == TN_OK ? r : tn__err_in("tn_call", r);
}

static tn_result tn__call(tn_func *f, tn_array *const *inputs, tn_array **outputs) {
    const char *W = f->name;
    if (f->n_inputs > 0 && !inputs)
        return tn__err(TN_ERR_NUM_INPUTS, "%s: expects %d input%s but inputs is NULL", W, f->n_inputs, f->n_inputs == 1 ? "" : "s");
    if (f->n_outputs > 0 && !outputs)
        return tn__err(TN_ERR_NULL, "%s: outputs is NULL (it needs room for %d arrays)", W, f->n_outputs);
    for (int i = 0; i < f->n_inputs; i++) {
        tn_result r = tn__check_input(f, i, inputs[i]);
        if (r != TN_OK) return r;
    }
    tn_result r0;
    double t_call = f->prof ? tn__prof_begin_call(f, inputs) : 0, t_run = 0;
    f->gen++;                        /* borrowed outputs of earlier calls are stale from here on */
    tn__retired_release(f);
    for (int i = 0; i < f->n_inputs; i++) {
        f->slotp[f->in_slot[i]] = inputs[i];
        if (inputs[i]->dtype != f->in_type[i].dtype && (r0 = tn__convert_input(f, i, inputs[i])) != TN_OK) return r0;
    }
    for (int s = 0; s < f->n_slots; s++)
        if (f->slots[s].kind == TN__SLOT_SHARED) f->slotp[s] = f->slots[s].user->value;
    tn_result r;
    if (tn__shapes_changed(f) && (r = tn__plan(f)) != TN_OK) return r;
    if (f->bfstate && (r = f->backend->func_enter(f->bfstate)) != TN_OK) return tn__err(r, "%s: %s", W, tn_last_error());
    if ((r = tn__func_shared_order(f)) != TN_OK) return r;
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

/* >>replay: CUDA graph capture and replay of a function's steps ------------ */
/* When a function's shapes repeat, its whole sequence of device kernels is
   captured once as a CUDA graph (tn_backend.replay_*) and then replayed: one
   launch per call instead of one per kernel. A graph bakes in every pointer
   and stride its kernels saw, so each call first probes: tn__steps assembles
   every step's arrays as a run would (running the views, which only compute
   strides) and notes each kernel operand's data pointer and strides in a
   signature. A graph is replayed only when its signature is this call's
   exactly. Updates swap buffers with their shared variables, so a training
   step alternates between two signatures: a few are kept, least recently
   used first out. A signature is captured the second time it is seen (its
   first run compiled the kernels and sized their scratch, so nothing is
   allocated under capture; the back end refuses allocations there).
   Copies between the host and the device are graph nodes too: a passed
   input is read by DMA from the caller's page-locked buffer (its address
   in the signature) or packed before the launch into the node's pinned
   staging buffer (tn_backend_op.stage), an output lands in pinned memory
   (a fresh output keeps its address while the caller frees the last one),
   and the call's fence waits for the graph. A scan on the device is
   captured whole: its loop runs once under capture, each step's kernels
   and copies recorded in order (a step function called under capture runs
   its kernels plainly, into the capture), so a replay runs every step
   without the host. Its step function's buffers and the loop's scratch are
   baked in too: the signature holds tn__scan_epoch, which moves when any of
   them is freed. Eligible: every step but the views runs on the device or
   copies between it and the host (a scan's step function too), at least
   two kernels, and none of cuda_graph=0, launch_blocking=1, profiling,
   mode=check, for the function and its scans' step functions. A
   capture that fails (an op that synchronises or allocates) turns graphs off
   for that function for good, silently (tn__replay_stats says why); that
   call runs its kernels plainly. */

#define TN__REPLAY_SLOTS 4          /* signatures remembered per function */
#define TN__REPLAY_MISS_LIMIT 16    /* calls in a row with an unseen signature: off until the next plan */

typedef struct tn__replay_entry {
    uint64_t *sig;                 /* NULL: a free slot */
    void *exec;                    /* NULL: seen once, not captured yet */
    uint64_t used;                 /* LRU tick */
} tn__replay_entry;

enum { TN__REPLAY_UNKNOWN = 0, TN__REPLAY_ON, TN__REPLAY_PLAN_OFF, TN__REPLAY_OFF };

typedef struct tn__replay_cache {
    tn__replay_entry e[TN__REPLAY_SLOTS];
    uint64_t *sig;                 /* this call's signature (the probe's) */
    size_t n_sig, cap_sig;
    uint64_t tick, nonce;          /* nonce: one-of-a-kind signature values (tn__replay_note) */
    int state;                     /* TN__REPLAY_*: eligibility, decided at the first call after a plan */
    int misses;
    bool sig_overflow;
    int64_t replays, captures;
    char why[256];
} tn__replay_cache;

static void tn__replay_drop(tn_func *f) {
    tn__replay_cache *gc = f->rcache;
    if (!gc) return;
    for (int i = 0; i < TN__REPLAY_SLOTS; i++) {
        tn__replay_entry *e = &gc->e[i];
        if (e->exec && f->backend && f->backend->replay_release) f->backend->replay_release(e->exec);
        tn__free(e->sig);
        memset(e, 0, sizeof *e);
    }
    gc->misses = 0;
    if (gc->state != TN__REPLAY_OFF) { gc->state = TN__REPLAY_UNKNOWN; gc->why[0] = 0; }
}

static void tn__replay_free(tn_func *f) {
    if (!f->rcache) return;
    tn__replay_drop(f);
    tn__free(f->rcache->sig);
    tn__free(f->rcache);
    f->rcache = NULL;
}

/* What keeps this call from using graphs whatever the function (NULL: nothing). */
static const char *tn__replay_blocker(const tn_func *f) {
    const tn_backend *b = f->backend;
    const tn_config *c = tn_get_config();
    if (!b || !b->replay_begin || !b->replay_end || !b->replay_launch || !b->replay_release) return "no device back end with CUDA graphs";
    if (c->no_cuda_graph) return "cuda_graph=0";
    if (c->launch_blocking) return "launch_blocking=1";
    if (f->prof && !tn__prof_replayable(f)) return "profiled";
    if (f->mode == TN_MODE_CHECK) return "mode=check";
    if (f->checks & TN__CHECK_NAN) return "nan_guard=1";
    return NULL;
}

/* This thread is capturing a function's steps: a function called from one
   of them (a scan's step) runs plainly, into the capture. */
static TN__THREAD_LOCAL bool tn__replay_capturing;

/* Whether f's steps (and those of its scans' step functions) can be
   captured on one device (*dev: TN_HOST until a step says which); counts
   the kernels; else why not, in why. */
static bool tn__replay_walk(const tn_func *f, int *dev, int *kernels, char *why, size_t cap) {
    char lb[160];
    const char *b = tn__replay_blocker(f);
    if (b) { snprintf(why, cap, "%s: %s", f->name, b); return false; }
    for (int k = 0; k < f->n_steps; k++) {
        const tn__step *st = &f->steps[k];
        if (st->view) continue;
        const tn_var *v = st->node;
        if (v->device != TN_HOST && *dev != TN_HOST && v->device != *dev) {   /* one stream is captured */
            snprintf(why, cap, "steps on cuda%d and cuda%d", *dev, v->device);
            return false;
        }
        if (v->device != TN_HOST) *dev = v->device;
        /* copies between the host and this device are graph nodes (a copy to
           the host: where the back end queues it, tn_device_ops.d2h); a move
           between devices is not */
        const tn_device_ops *ops = tn__get_device_ops();
        bool host_copy = tn__op_kind(v->op) == TN_OPK_TRANSFER && (v->device == TN_HOST) != (v->in[0]->device == TN_HOST) &&
                         (v->device != TN_HOST || (ops && ops->d2h));
        if ((tn__op_kind(v->op) == TN_OPK_TRANSFER && !host_copy) || (v->device == TN_HOST && !host_copy)) {
            tn__node_label(v, lb, sizeof lb);
            snprintf(why, cap, "%.150s (node %d) %s", lb, v->id,
                     tn__op_kind(v->op) == TN_OPK_TRANSFER ? (v->device == TN_HOST ? "copies to the host without the back end" : "copies between devices")
                     : "runs on the host");
            return false;
        }
        if (st->brow && st->brow->capturable && !st->brow->capturable(v)) {
            tn__node_label(v, lb, sizeof lb);
            snprintf(why, cap, "%.150s (node %d) waits for the device as it runs", lb, v->id);
            return false;
        }
        const tn_func *inner = v->op == TN_OP_SCAN ? tn__scan_device_fn(v) : NULL;
        if (v->op == TN_OP_SCAN && (!inner || !tn__replay_walk(inner, dev, kernels, why, cap))) {
            if (!inner) snprintf(why, cap, "scan node %d has no device step", v->id);
            return false;
        }
        *kernels += 1 + (inner != NULL);        /* a loop's copies count too */
    }
    return true;
}

/* Whether f's steps can be captured; else why not, in why. */
static bool tn__replay_eligible(const tn_func *f, char *why, size_t cap) {
    int kernels = 0, dev = TN_HOST;
    if (!tn__replay_walk(f, &dev, &kernels, why, cap)) return false;
    if (kernels < 2) { snprintf(why, cap, "%d device kernel%s: a graph saves nothing", kernels, kernels == 1 ? "" : "s"); return false; }
    return true;
}

static tn__replay_cache *tn__replay_cache_get(tn_func *f) {
    if (f->rcache) return f->rcache;
    size_t cap = 1;
    for (int k = 0; k < f->n_steps; k++) cap += 1 + (size_t)(f->steps[k].n_in + f->steps[k].n_out) * (1 + TN_MAX_DIMS);
    tn__replay_cache *gc = (tn__replay_cache *)tn__calloc(1, sizeof *gc);
    uint64_t *sig = (uint64_t *)tn__malloc(cap * sizeof *sig);
    if (!gc || !sig) { tn__free(gc); tn__free(sig); return NULL; }
    gc->sig = sig;
    gc->cap_sig = cap;
    return f->rcache = gc;
}

/* The probe: one kernel's operands into the signature. A step with host
   work a graph cannot hold does it now (tn_backend_op.stage) and keys on
   what its copy reads; a copy to the host lands in the back end's pinned
   memory or is not replayed; a step that cannot be replayed this call
   makes the signature one of a kind (it matches nothing). */
static tn_result tn__replay_note(tn_func *f, const tn__step *st, tn_array *const *in, tn_array *const *out) {
    tn__replay_cache *gc = f->rcache;
    if (st->view) return TN_OK;
    uint64_t key = 1;
    if (st->brow && st->brow->stage) {
        tn_result r = st->brow->stage(st->node, st->bstate, in, out, &key);
        if (r != TN_OK) return r;
    } else if (!st->brow && st->def->kind == TN_OPK_TRANSFER && !(out[0]->base && out[0]->base->free_fn))
        key = 0;
    if (st->node->op == TN_OP_SCAN) {       /* what its loop baked in besides its operands */
        if (gc->n_sig + 1 > gc->cap_sig) { gc->sig_overflow = true; return TN_OK; }
        gc->sig[gc->n_sig++] = tn__atomic_load(&tn__scan_epoch);
    }
    for (int i = 0; i < st->n_in + st->n_out; i++) {
        const tn_array *a = i < st->n_in ? in[i] : out[i - st->n_in];
        if (gc->n_sig + 1 + (size_t)a->ndim > gc->cap_sig) { gc->sig_overflow = true; return TN_OK; }
        gc->sig[gc->n_sig++] = key == 0 ? (1ull << 63) | ++gc->nonce
                             : st->brow && st->brow->stage && i < st->n_in ? key : (uint64_t)(uintptr_t)a->data;
        for (int d = 0; d < a->ndim; d++) gc->sig[gc->n_sig++] = (uint64_t)a->strides[d];
    }
    return TN_OK;
}

static tn__replay_entry *tn__replay_find(tn__replay_cache *gc) {
    for (int i = 0; i < TN__REPLAY_SLOTS; i++)
        if (gc->e[i].sig && !memcmp(gc->e[i].sig, gc->sig, gc->n_sig * sizeof *gc->sig)) return &gc->e[i];
    return NULL;
}

/* Remembers this call's signature as seen (not captured), evicting the least recently used. */
static void tn__replay_remember(tn_func *f, tn__replay_cache *gc) {
    tn__replay_entry *e = &gc->e[0];
    for (int i = 0; i < TN__REPLAY_SLOTS; i++) {
        if (!gc->e[i].sig) { e = &gc->e[i]; break; }
        if (gc->e[i].used < e->used) e = &gc->e[i];
    }
    uint64_t *sig = e->sig ? e->sig : (uint64_t *)tn__malloc(gc->cap_sig * sizeof *sig);
    if (!sig) return;                                 /* out of memory: simply not remembered */
    if (e->exec) f->backend->replay_release(e->exec);
    memcpy(sig, gc->sig, gc->n_sig * sizeof *sig);
    e->sig = sig;
    e->exec = NULL;
    e->used = ++gc->tick;
}

static tn_result tn__replay_launch(tn_func *f, tn__replay_cache *gc, tn__replay_entry *e) {
    e->used = ++gc->tick;
    gc->misses = 0;
    if (f->prof) tn__prof_graph_mark(f, 0);     /* a profiled call times its graph whole */
    tn_result r = f->backend->replay_launch(e->exec);
    if (f->prof) tn__prof_graph_mark(f, 1);
    if (r == TN_OK && f->prof) tn__prof_replayed(f);   /* its steps counted (a capture's call did not count them as it ran them) */
    return r == TN_OK ? TN_OK : tn__err(r, "%s: launching its CUDA graph: %s", f->name, tn_last_error());
}

/* The graph of the data. Captured in order, a function's graph is one
   chain: a copy of an input waits for the kernels before it, and the
   kernels after an output's copy back wait for that copy. Instead, where
   the back end can set what captured work follows (replay_point,
   replay_follow), each kernel step follows the last kernel step and the
   copies it needs, and a copy between the host and the device follows only
   the steps whose memory it touches: those writing what it reads, and
   those reading or writing what it writes (byte spans of every operand, so
   a buffer reused within the call orders its users). The inputs' copies
   then start together when the graph does, the kernels before the first
   that needs one of them run during the copies, and an output's copy back
   runs beside the kernels after it. The graph ends when all of its nodes
   have; the call's fence waits for it. The kernels stay one chain: they may share the back end's scratch or cuBLAS's workspace,
   and measured on an H100, a step whose elementwise kernels branched off
   the chain by their data took 27.4 us a call against 18.8 us (a graph's
   branches cost more to start and join than the kernels they overlap). */
typedef struct tn__dag_span { uintptr_t lo, hi; int step; bool write; } tn__dag_span;

struct tn__replay_dag {
    const tn_func *f;
    const tn_backend *b;
    tn__dag_span *span, *cspan;    /* the operands of the steps so far, of the copies among them */
    int n_span, cap_span, n_cspan, cap_cspan;
    void **node;                   /* step k's last nodes: node[at[k] .. at[k] + nn[k]) */
    int n_node, cap_node;
    int *at, *nn;
    void **dep;                    /* scratch: what the next step follows */
    int n_dep, cap_dep;
    int last_kernel;               /* the last kernel step; -1: none yet */
};

static const tn_func *tn__dag_of(const tn__replay_dag *d) { return d->f; }

/* A copy between the host and the device: ordered by its data alone. */
static bool tn__dag_is_copy(const tn__step *st) { return st->def->kind == TN_OPK_TRANSFER; }

/* Step k's last nodes into the next step's dependencies (once each). */
static bool tn__dag_add(tn__replay_dag *d, int k) {
    for (int i = d->at[k]; i < d->at[k] + d->nn[k]; i++) {
        int j = 0;
        while (j < d->n_dep && d->dep[j] != d->node[i]) j++;
        if (j < d->n_dep) continue;
        void **g = (void **)tn__grow(d->dep, &d->cap_dep, d->n_dep + 1, 8, sizeof *g);
        if (!g) return false;
        d->dep = g;
        d->dep[d->n_dep++] = d->node[i];
    }
    return true;
}

static bool tn__dag_push(tn__dag_span **v, int *n, int *cap, tn__dag_span x) {
    tn__dag_span *g = (tn__dag_span *)tn__grow(*v, cap, *n + 1, 32, sizeof *g);
    if (!g) return false;
    *v = g;
    g[(*n)++] = x;
    return true;
}

static tn_result tn__dag_before(tn__replay_dag *d, int k, tn_array *const *in, tn_array *const *out) {
    const tn__step *st = &d->f->steps[k];
    bool copy = tn__dag_is_copy(st);
    d->n_dep = 0;
    bool ok = copy || d->last_kernel < 0 || tn__dag_add(d, d->last_kernel);
    /* a kernel follows the kernels before it anyway: it looks at the copies only */
    const tn__dag_span *seen = copy ? d->span : d->cspan;
    int n_seen = copy ? d->n_span : d->n_cspan;
    for (int i = 0; ok && i < st->n_in + st->n_out; i++) {
        bool w = i >= st->n_in;
        tn__dag_span me = { 0, 0, k, w };
        tn__ew_extent(w ? out[i - st->n_in] : in[i], &me.lo, &me.hi);   /* the bytes it spans (tensor_ops.h) */
        if (me.lo == me.hi) continue;          /* no element: touches nothing */
        for (int s = 0; ok && s < n_seen; s++) {
            const tn__dag_span *o = &seen[s];
            if ((w || o->write) && o->lo < me.hi && me.lo < o->hi) ok = tn__dag_add(d, o->step);
        }
        ok = ok && tn__dag_push(&d->span, &d->n_span, &d->cap_span, me) &&
             (!copy || tn__dag_push(&d->cspan, &d->n_cspan, &d->cap_cspan, me));
        seen = copy ? d->span : d->cspan;       /* the arrays may have moved */
    }
    if (!ok) return tn__err(TN_ERR_OOM, "%s: out of memory capturing its graph", d->f->name);
    return d->b->replay_follow(d->dep, (size_t)d->n_dep);
}

static tn_result tn__dag_after(tn__replay_dag *d, int k) {
    size_t n = 0;
    tn_result r = d->b->replay_point(NULL, 0, &n);
    void **g = r == TN_OK ? (void **)tn__grow(d->node, &d->cap_node, d->n_node + (int)n, 16, sizeof *g) : NULL;
    if (r == TN_OK && !g) r = tn__err(TN_ERR_OOM, "%s: out of memory capturing its graph", d->f->name);
    if (r != TN_OK) return r;
    d->node = g;
    if ((r = d->b->replay_point(d->node + d->n_node, n, &n)) != TN_OK) return r;
    d->at[k] = d->n_node;
    d->nn[k] = (int)n;
    d->n_node += (int)n;
    if (!tn__dag_is_copy(&d->f->steps[k])) d->last_kernel = k;
    return TN_OK;
}

/* After the last step: what is captured next follows every step. */
static tn_result tn__dag_join(tn__replay_dag *d) {
    d->n_dep = 0;
    for (int k = 0; k < d->f->n_steps; k++)
        if (d->nn[k] && (k == d->last_kernel || tn__dag_is_copy(&d->f->steps[k])) && !tn__dag_add(d, k))
            return tn__err(TN_ERR_OOM, "%s: out of memory capturing its graph", d->f->name);
    return d->b->replay_follow(d->dep, (size_t)d->n_dep);
}

static void tn__dag_release(tn__replay_dag *d) {
    tn__free(d->span);
    tn__free(d->cspan);
    tn__free(d->node);
    tn__free(d->at);
    tn__free(d->dep);
}

/* Runs the steps under capture into e, then launches the graph. A step or
   the capture failing turns graphs off for f; nothing ran on the device
   then, so the steps run again plainly. */
static tn_result tn__replay_capture(tn_func *f, tn__replay_cache *gc, tn__replay_entry *e) {
    const tn_backend *b = f->backend;
    tn__replay_dag dag = { .f = f, .b = b, .last_kernel = -1 };
    bool by_data = b->replay_point && b->replay_follow && f->n_steps > 0;
    if (by_data && !(dag.at = (int *)tn__calloc(2 * (size_t)f->n_steps, sizeof *dag.at)))
        return tn__err(TN_ERR_OOM, "%s: out of memory capturing its graph", f->name);
    dag.nn = dag.at + f->n_steps;
    tn_result r = b->replay_begin();
    if (r == TN_OK) {
        tn__replay_capturing = true;
        size_t n0 = 0;
        if (by_data && b->replay_point(NULL, 0, &n0) != TN_OK) { by_data = false; tn_clear_error(); }   /* in order, then */
        tn__dag = by_data ? &dag : NULL;
        r = tn__steps(f, TN__STEPS_RUN);
        if (r == TN_OK && by_data) r = tn__dag_join(&dag);
        tn__dag = NULL;
        tn__replay_capturing = false;
        void *exec = NULL;
        tn_result re = b->replay_end(r == TN_OK ? &exec : NULL);
        if (r == TN_OK && re == TN_OK && exec) {
            tn__dag_release(&dag);
            e->exec = exec;
            gc->captures++;
            return tn__replay_launch(f, gc, e);
        }
        if (r == TN_OK) r = re != TN_OK ? re : TN_ERR_INTERNAL;
    }
    tn__dag_release(&dag);
    tn__replay_drop(f);
    gc->state = TN__REPLAY_OFF;
    snprintf(gc->why, sizeof gc->why, "its capture failed (%.20s): %.200s", tn_result_string(r), tn_last_error());
    tn_clear_error();
    return tn__steps(f, TN__STEPS_RUN);
}

static tn_result tn__replay_run(tn_func *f) {
    tn__replay_cache *gc = f->rcache;
    if (tn__replay_capturing || (gc && gc->state >= TN__REPLAY_PLAN_OFF) || f->n_steps == 0 || tn__replay_blocker(f) ||
        (f->prof && tn__prof_stepwise(f)) || (!gc && !(gc = tn__replay_cache_get(f))))
        return tn__steps(f, TN__STEPS_RUN);
    if (gc->state == TN__REPLAY_UNKNOWN) {
        gc->state = tn__replay_eligible(f, gc->why, sizeof gc->why) ? TN__REPLAY_ON : TN__REPLAY_PLAN_OFF;
        if (gc->state != TN__REPLAY_ON) return tn__steps(f, TN__STEPS_RUN);
    }
    gc->n_sig = 0;
    gc->sig_overflow = false;
    tn_result r = tn__steps(f, TN__STEPS_PROBE);
    if (r != TN_OK) return r;
    TN_ASSERT(!gc->sig_overflow);
    tn__replay_entry *e = gc->sig_overflow ? NULL : tn__replay_find(gc);
    if (e && e->exec) { gc->replays++; return tn__replay_launch(f, gc, e); }
    if (e) return tn__replay_capture(f, gc, e);
    tn__replay_remember(f, gc);
    if (++gc->misses >= TN__REPLAY_MISS_LIMIT) {
        gc->state = TN__REPLAY_PLAN_OFF;
        snprintf(gc->why, sizeof gc->why, "its kernels' pointers changed on %d calls in a row", gc->misses);
    }
    return tn__steps(f, TN__STEPS_RUN);
}

TN_API void tn__replay_stats(const tn_func *f, int64_t *replays, int64_t *captures, const char **why) {
    const tn__replay_cache *gc = f ? f->rcache : NULL;
    const char *b = f ? tn__replay_blocker(f) : "no function";
    if (replays) *replays = gc ? gc->replays : 0;
    if (captures) *captures = gc ? gc->captures : 0;
    if (why) *why = gc && gc->state >= TN__REPLAY_PLAN_OFF ? gc->why : b ? b : "";
}

/* >>check_mode ----------------------------------------------------------- */
/* mode=check (Theano's DebugMode, for the device): each op that runs on the
   device is run again through its CPU kernel on host copies of the same
   inputs, and the outputs are compared. The first difference beyond the
   output dtype's tolerance fails the call with TN_ERR_CHECK, naming the op,
   its node, its inputs' types, the error and where. The inputs are copied
   before the device kernel runs, since an inplace op overwrites one. The
   error of an element is |device - cpu| / max(|cpu|, rms(cpu), floor): the
   relative error, or for elements small next to the output's typical size
   (sums that cancel) the error relative to that size. Slow by design: each
   step waits for the device. Graph replay is off in this mode.
   CPU ops (Theano's DebugMode checks): each input is copied before the op
   runs and compared after, so an op that writes an input its destroy map
   (node->inplace) does not name fails the call (the input is restored);
   each output must keep the dtype, shape, strides and buffer the executor
   gave it (its type). nan_guard=1 (Theano's NanGuardMode; any mode, CPU
   and device steps) fails the call at the first op that makes a NaN or
   inf from inputs that had none: a separate flag, since some graphs make
   inf on purpose. Errors are TN_ERR_CHECK naming the node, the input or
   output, its shape and the first element. */

static bool tn__check_wanted(const tn_func *f, const tn__step *st) { return f->checks && !st->view; }

/* A device op mode=check compares with its CPU kernel. */
static bool tn__check_device(const tn_func *f, const tn__step *st) {
    if (!(f->checks & TN__CHECK_MODE) || st->node->device == TN_HOST || !st->def->cpu) return false;
    return f->backend && st->brow && tn__op_kind(st->node->op) != TN_OPK_TRANSFER;
}

/* Tolerance of an output dtype (0: exact) and the smallest scale an error is measured against. */
static double tn__check_tol(tn_dtype t, double *floor) {
    switch (t) {
    case TN_F16: *floor = 1e-3; return 1e-2;
    case TN_F32: *floor = 1e-6; return 1e-4;
    case TN_F64: *floor = 1e-12; return 1e-10;
    default: *floor = 0; return 0;
    }
}

typedef struct tn__check_diff { double err, dev, cpu; int64_t at; } tn__check_diff;

/* The worst element of dev against ref (same shape): float dtypes through
   float64, the others exactly through int64. */
static tn_result tn__check_compare(const tn_array *dev, const tn_array *ref, tn__check_diff *w) {
    bool fl = tn_dtype_is_float(ref->dtype);
    tn_array *a = tn_array_astype(dev, fl ? TN_F64 : TN_I64), *c = a ? tn_array_astype(ref, fl ? TN_F64 : TN_I64) : NULL;
    if (!a || !c) { tn_array_free(a); return tn_last_result() ? tn_last_result() : TN_ERR_OOM; }
    int64_t n = tn_array_size(c);
    memset(w, 0, sizeof *w);
    w->at = -1;
    if (fl) {
        const double *d = (const double *)a->data, *x = (const double *)c->data;
        double floor, ss = 0;
        tn__check_tol(ref->dtype, &floor);
        int64_t finite = 0;
        for (int64_t i = 0; i < n; i++) if (isfinite(x[i])) { ss += x[i] * x[i]; finite++; }
        double rms = finite ? sqrt(ss / (double)finite) : 0;
        for (int64_t i = 0; i < n; i++) {
            double e;
            if (isnan(x[i]) || isnan(d[i])) e = isnan(x[i]) && isnan(d[i]) ? 0 : INFINITY;
            else if (isinf(x[i]) || isinf(d[i])) e = x[i] == d[i] ? 0 : INFINITY;
            else e = fabs(d[i] - x[i]) / fmax(fmax(fabs(x[i]), rms), floor);
            if (e > w->err || (w->at < 0 && e > 0)) { w->err = e; w->dev = d[i]; w->cpu = x[i]; w->at = i; }
        }
    } else {
        const int64_t *d = (const int64_t *)a->data, *x = (const int64_t *)c->data;
        for (int64_t i = 0; i < n; i++)
            if (d[i] != x[i]) {
                double e = fabs((double)d[i] - (double)x[i]);
                if (e > w->err || w->at < 0) { w->err = e ? e : 1; w->dev = (double)d[i]; w->cpu = (double)x[i]; w->at = i; }
            }
    }
    tn_array_free(a);
    tn_array_free(c);
    return TN_OK;
}

static tn_result tn__check_report(const tn__step *st, tn_array *const *in, const tn_array *o, int k, const tn__check_diff *w, double tol) {
    char ins[480], where[128], sb[128];
    int64_t idx[TN_MAX_DIMS], rest = w->at;
    for (int d = o->ndim - 1; d >= 0; d--) { idx[d] = o->shape[d] ? rest % o->shape[d] : 0; rest = o->shape[d] ? rest / o->shape[d] : 0; }
    tn__shape_str(o->ndim, idx, where);
    size_t n = 0;
    ins[0] = 0;
    for (int i = 0; i < st->n_in && n < sizeof ins - 1; i++)
        n += (size_t)snprintf(ins + n, sizeof ins - n, "%s%s %s", i ? ", " : "", tn_dtype_name(in[i]->dtype),
                              tn__shape_str(in[i]->ndim, in[i]->shape, sb));
    /* tn__steps prefixes the function and the op's label */
    return tn__err(TN_ERR_CHECK, "mode=check: node %d differs from its CPU reference: output %d (%s %s) at %s: "
                   "device %.9g, CPU %.9g (error %.3g, tolerance %.3g); inputs: %s",
                   st->node->id, k, tn_dtype_name(o->dtype), tn__shape_str(o->ndim, o->shape, sb), where, w->dev, w->cpu,
                   w->err, tol, st->n_in ? ins : "none");
}

/* Runs one device step, then its CPU kernel on host copies, and compares. */
static tn_result tn__check_device_step(const tn__step *st, tn_array *const *in, tn_array *const *out) {
    tn_var *v = st->node;
    int ni = st->n_in, no = st->n_out;
    tn_array **h = (tn_array **)tn__calloc((size_t)(ni + no) + 1, sizeof *h), **hout = h ? h + ni : NULL;
    if (!h) return tn__err(TN_ERR_OOM, "mode=check: out of memory");
    tn_result r = TN_OK;
    char lb[256];
    for (int i = 0; i < ni && r == TN_OK; i++)
        if (!(h[i] = tn_array_to_host(in[i]))) r = tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "mode=check: copying input %d to the host: %s", i, tn_last_error());
    if (r == TN_OK) r = st->brow->run(v, st->bstate, in, out);
    for (int o = 0; o < no && r == TN_OK; o++)
        if (!(hout[o] = tn__array_alloc(out[o]->dtype, out[o]->ndim, out[o]->shape, TN_HOST))) r = tn__err(TN_ERR_OOM, "mode=check: out of memory");
    if (r == TN_OK && (r = st->def->cpu(v, h, hout)) != TN_OK) {
        tn__node_label(v, lb, sizeof lb);
        r = tn__err(r, "mode=check: the CPU reference of %s (node %d) failed: %s", lb, v->id, tn_last_error());
    }
    for (int o = 0; o < no && r == TN_OK; o++) {
        tn__check_diff w;
        double floor, tol = tn__check_tol(out[o]->dtype, &floor);
        if ((r = tn__check_compare(out[o], hout[o], &w)) != TN_OK) r = tn__err(r, "mode=check: comparing output %d: %s", o, tn_last_error());
        else if (w.at >= 0 && !(w.err <= tol)) r = tn__check_report(st, in, out[o], o, &w, tol);
    }
    for (int i = 0; i < ni + no; i++) tn_array_free(h[i]);
    tn__free(h);
    return r;
}

/* Index of a's first NaN or inf (C order), -1 for none or a non-float
   dtype; *nan says which. Device arrays are read through a host copy. */
static int64_t tn__check_nonfinite(const tn_array *a, bool *nan) {
    if (!tn_dtype_is_float(a->dtype) || tn_array_size(a) == 0) return -1;
    tn_array *h = tn_array_astype(a, TN_F64);
    if (!h) return -1;
    int64_t n = tn_array_size(h), at = -1;
    const double *x = (const double *)h->data;
    for (int64_t i = 0; i < n && at < 0; i++) if (!isfinite(x[i])) { at = i; *nan = isnan(x[i]); }
    tn_array_free(h);
    return at;
}

static void tn__check_unravel(const tn_array *a, int64_t flat, int64_t *idx) {
    for (int d = a->ndim - 1; d >= 0; d--) { idx[d] = a->shape[d] ? flat % a->shape[d] : 0; flat = a->shape[d] ? flat / a->shape[d] : 0; }
}
static const char *tn__check_index(const tn_array *a, int64_t flat, char buf[128]) {
    int64_t idx[TN_MAX_DIMS];
    tn__check_unravel(a, flat, idx);
    return tn__shape_str(a->ndim, idx, buf);
}
static double tn__check_at(const tn_array *a, int64_t flat) {
    int64_t idx[TN_MAX_DIMS];
    tn__check_unravel(a, flat, idx);
    return tn_array_get(a, idx);
}

/* "float32 (3, 4) strides (16, 4)" */
static const char *tn__check_layout(const tn_array *a, char buf[300]) {
    char sb[128], tb[128];
    snprintf(buf, 300, "%s %s strides %s", (unsigned)a->dtype < TN_DTYPE_COUNT ? tn_dtype_name(a->dtype) : "?",
             tn__shape_str(a->ndim >= 0 && a->ndim <= TN_MAX_DIMS ? a->ndim : 0, a->shape, sb),
             tn__shape_str(a->ndim >= 0 && a->ndim <= TN_MAX_DIMS ? a->ndim : 0, a->strides, tb));
    return buf;
}

/* A step under mode=check or nan_guard (the section's opening comment;
   tn__steps prefixes the function, the op's label and the step). */
static tn_result tn__check_step(tn_func *f, const tn__step *st, tn_array *const *in, tn_array *const *out) {
    tn_var *v = st->node;
    int ni = st->n_in, no = st->n_out;
    bool dev = tn__check_device(f, st), host = (f->checks & TN__CHECK_MODE) && !st->brow;
    bool guard = (f->checks & TN__CHECK_NAN) != 0, in_bad = false;
    tn_array **snap = NULL, *was = NULL;
    tn_result r = TN_OK;
    char a[300], b[300], sb[128];
    for (int i = 0; guard && !in_bad && i < ni; i++) { bool nan; in_bad = tn__check_nonfinite(in[i], &nan) >= 0; }
    if (host) {      /* each input the op may not write, and each output's layout, as they were */
        snap = (tn_array **)tn__calloc((size_t)ni + 1, sizeof *snap);
        was = (tn_array *)tn__calloc((size_t)no + 1, sizeof *was);
        if (!snap || !was) { r = tn__err(TN_ERR_OOM, "mode=check: out of memory"); goto done; }
        for (int o = 0; o < no; o++) was[o] = *out[o];
        for (int i = 0; i < ni; i++) {
            bool written = false;     /* the destroy map's input, or one sharing an output's buffer */
            for (int o = 0; o < no && !written; o++) written = in[i]->base && in[i]->base == out[o]->base;
            if (written || in[i]->device != TN_HOST || tn_array_size(in[i]) == 0) continue;
            if (!(snap[i] = tn_array_copy(in[i]))) { r = tn__err(TN_ERR_OOM, "mode=check: out of memory copying input %d", i); goto done; }
        }
    }
    r = dev ? tn__check_device_step(st, in, out) : st->brow ? st->brow->run(v, st->bstate, in, out) : st->def->cpu(v, in, out);
    if (r != TN_OK) goto done;
    for (int o = 0; host && o < no && r == TN_OK; o++) {
        const tn_array *x = out[o], *w = &was[o];
        bool same = x->dtype == w->dtype && x->ndim == w->ndim && x->data == w->data;
        for (int d = 0; same && d < w->ndim; d++) same = x->shape[d] == w->shape[d] && x->strides[d] == w->strides[d];
        if (same) continue;
        char tb[160];
        r = tn__err(TN_ERR_CHECK, "mode=check: node %d left output %d as %s%s where its type is %s and the executor gave %s",
                    v->id, o, tn__check_layout(x, a), x->data != w->data ? " at another address" : "",
                    o == 0 ? tn__type_str(&v->type, tb) : "its planned type", tn__check_layout(w, b));
        *out[o] = *w;                   /* the executor's array again, for later calls */
    }
    for (int i = 0; host && i < ni && r == TN_OK; i++) {
        if (!snap[i]) continue;
        tn_array *now = tn_array_copy(in[i]);
        if (!now) { r = tn__err(TN_ERR_OOM, "mode=check: out of memory copying input %d", i); break; }
        size_t es = tn_dtype_size(now->dtype);
        int64_t n = tn_array_size(now), at = -1;
        for (int64_t k = 0; k < n && at < 0; k++)
            if (memcmp((const char *)now->data + k * (int64_t)es, (const char *)snap[i]->data + k * (int64_t)es, es)) at = k;
        if (at >= 0) {
            r = tn__err(TN_ERR_CHECK, "mode=check: node %d wrote its input %d (%s %s) at %s, which it does not declare "
                        "destroyed (no inplace): %.9g, was %.9g", v->id, i, tn_dtype_name(now->dtype),
                        tn__shape_str(now->ndim, now->shape, sb), tn__check_index(now, at, a),
                        tn__check_at(now, at), tn__check_at(snap[i], at));
            tn_array_assign(in[i], snap[i]);     /* the input as it was */
        }
        tn_array_free(now);
    }
    for (int o = 0; guard && !in_bad && o < no && r == TN_OK; o++) {
        bool nan = false;
        int64_t at = tn__check_nonfinite(out[o], &nan);
        if (at < 0) continue;
        size_t k = 0;
        b[0] = 0;
        for (int i = 0; i < ni && k < sizeof b - 1; i++)
            k += (size_t)snprintf(b + k, sizeof b - k, "%s%s %s", i ? ", " : "", tn_dtype_name(in[i]->dtype),
                                  tn__shape_str(in[i]->ndim, in[i]->shape, sb));
        r = tn__err(TN_ERR_CHECK, "nan_guard: node %d made %s in output %d (%s %s) at %s from inputs without NaN or inf (%s)",
                    v->id, nan ? "NaN" : "inf", o, tn_dtype_name(out[o]->dtype), tn__shape_str(out[o]->ndim, out[o]->shape, sb),
                    tn__check_index(out[o], at, a), ni ? b : "none");
    }
done:
    for (int i = 0; snap && i < ni; i++) tn_array_free(snap[i]);
    tn__free(snap);
    tn__free(was);
    return r;
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
    const char *lead;    /* printed before every line: " >" for an inner graph */
    bool tags;           /* contexts or several devices in play: each node says where it is */
} tn__printer;

/* Whether g's nodes name contexts, or (compiled) sit on more than one device. */
static bool tn__print_wants_tags(const tn_graph *g, bool compiled) {
    int dev = TN_HOST;
    for (int i = 0; g && i < g->nvars; i++) {
        const tn_var *v = g->vars[i];
        if (v->ctx > 0) return true;
        if (!compiled || v->device == TN_HOST || tn__op_kind(v->op) == TN_OPK_LEAF) continue;
        if (dev != TN_HOST && v->device != dev) return true;
        dev = v->device;
    }
    return false;
}

/* A scan's inner graph prints after the main one, as Theano's "Inner graphs
   of the scan ops:" (the >>scan_debugprint section). compiled: the roots
   belong to a compiled function, whose scans print their compiled steps. */
static tn_result tn__scan_print_inners(tn__printer *pr, tn_var *const *roots, int n_roots, bool compiled);

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
    fprintf(pr->out, "%s%.*s%s%s [id %s] <%s>", pr->lead ? pr->lead : "", (int)plen, pr->prefix, child ? " |" : "", lb, idb,
            tn__type_str(&v->type, tb));
    if (tn__is_apply(v)) {
        fprintf(pr->out, " '%s'   ", v->name ? v->name : "");
        if (pr->topo) {
            const tn_var *src = v->op == TN_OP_PROJ ? v->in[0] : v;
            if (src->id >= 0 && src->id < pr->nvars && pr->topo[src->id] >= 0) fprintf(pr->out, "%d", pr->topo[src->id]);
        }
    }
    if (pr->tags && (tn__is_apply(v) || v->ctx > 0)) {
        if (pr->topo && v->device != TN_HOST) fprintf(pr->out, " @cuda%d", v->device);
        else if (pr->topo) fprintf(pr->out, " @cpu");
        if (v->ctx > 0) fprintf(pr->out, " ctx=%s", tn_context_name(v->ctx - 1));
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
        if (!c) { fprintf(pr->out, "%s%.*s |NULL\n", pr->lead ? pr->lead : "", (int)plen, pr->prefix); continue; }
        if (!tn__print_line(pr, c, plen, true)) continue;
        if (!tn__prefix_reserve(pr, plen + 3)) { tn__free(stack); return tn__err(TN_ERR_OOM, "tn_debugprint: out of memory"); }
        memcpy(pr->prefix + plen, i == n - 1 ? "  " : " |", 2);
        if (sp == cap) {
            struct tn__pframe *ns = (struct tn__pframe *)tn__grow(stack, &cap, sp + 1, 64, sizeof *stack);
            if (!ns) { tn__free(stack); return tn__err(TN_ERR_OOM, "tn_debugprint: out of memory"); }
            stack = ns;
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
    pr.tags = tn__print_wants_tags(v->graph, false);
    r = tn__print_tree(&pr, v);
    tn_var *root = (tn_var *)v;
    if (r == TN_OK) r = tn__scan_print_inners(&pr, &root, 1, false);
    tn__printer_free(&pr);
    return r;
}

TN_API tn_result tn_debugprint_function(const tn_func *f, FILE *out) {
    if (tn__func_check(f, "tn_debugprint_function") != TN_OK) return tn_last_result();
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
    pr.tags = tn__print_wants_tags(f->fg, true);
    for (int i = 0; i < f->n_roots && r == TN_OK; i++) {
        if (i >= f->n_outputs) fprintf(out, "update of %s:\n", tn__var_label_name(f->upd_user[i - f->n_outputs]));
        r = tn__print_tree(&pr, f->roots[i]);
    }
    if (r == TN_OK) r = tn__scan_print_inners(&pr, f->roots, f->n_roots, true);
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
    if (tn__func_check(f, "tn_print_toposort") != TN_OK) return tn_last_result();
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

/* >>scan_debugprint ------------------------------------------------------ */
/* tn_debugprint and tn_debugprint_function call this after the main graph:
   every scan the roots reach prints its line again (same id), then its
   inner graph with each line led by " >", as Theano's debugprint does. A
   symbolic graph shows the step as built; a compiled function the step as
   compiled (the device step of a scan placed on the device), with its own
   ids and step numbers. Scans inside a step follow in the same list. */

typedef struct tn__scan_pq { const tn_var **v; bool *compiled; int n, cap; } tn__scan_pq;

static tn_result tn__scan_pq_push(tn__scan_pq *q, const tn_var *v, bool compiled) {
    if (q->n == q->cap) {
        int cap = q->cap, cap_c = q->cap;
        const tn_var **nv = (const tn_var **)tn__grow((void *)q->v, &cap, q->n + 1, 8, sizeof *nv);
        if (nv) q->v = nv;
        bool *c = nv ? (bool *)tn__grow(q->compiled, &cap_c, q->n + 1, 8, sizeof *c) : NULL;
        if (c) q->compiled = c;
        if (!nv || !c) return tn__err(TN_ERR_OOM, "tn_debugprint: out of memory");
        q->cap = cap;
    }
    q->v[q->n] = v;
    q->compiled[q->n++] = compiled;
    return TN_OK;
}

/* The scans the roots reach, in topological order. */
static tn_result tn__scan_pq_add(tn__scan_pq *q, tn_var *const *roots, int n_roots, int nvars, bool compiled) {
    tn_var **order = NULL;
    int n = 0;
    tn_result r = tn__toposort((tn_var **)roots, n_roots, nvars, &order, &n, NULL, "tn_debugprint");
    for (int i = 0; i < n && r == TN_OK; i++)
        if (order[i]->op == TN_OP_SCAN && order[i]->ext) r = tn__scan_pq_push(q, order[i], compiled);
    tn__free(order);
    return r;
}

static tn_result tn__scan_print_inners(tn__printer *pr, tn_var *const *roots, int n_roots, bool compiled) {
    tn__scan_pq q = { NULL, NULL, 0, 0 };
    tn_result r = tn__scan_pq_add(&q, roots, n_roots, pr->nvars, compiled);
    int n_main = q.n;          /* nodes of the printer's graph; later ones may sit in compiled steps */
    if (r == TN_OK && q.n) fprintf(pr->out, "\nInner graphs of the scan ops:\n");
    for (int i = 0; i < q.n && r == TN_OK; i++) {
        const tn_var *node = q.v[i];
        const tn__scan *s = (const tn__scan *)node->ext;
        fputc('\n', pr->out);
        if (i < n_main || !q.compiled[i]) {   /* a node of the printer's graph: its id from there */
            const char *lead = pr->lead;
            pr->lead = NULL;
            tn__print_line(pr, node, 0, false);
            pr->lead = lead;
        } else {
            char lb[256];
            tn__node_label(node, lb, sizeof lb);
            fprintf(pr->out, "%s\n", lb);
        }
        if (!q.compiled[i]) {      /* the step as built: the user's graph, the printer's ids */
            const char *lead = pr->lead;
            pr->lead = " >";
            for (int k = 0; k < s->n_res && r == TN_OK; k++) r = tn__print_tree(pr, s->res[k]);
            pr->lead = lead;
            if (r == TN_OK) r = tn__scan_pq_add(&q, s->res, s->n_res, pr->nvars, false);
            continue;
        }
        const tn_func *fn = node->device != TN_HOST && s->dfn ? s->dfn : s->fn;
        if (!fn) continue;
        tn__printer ip;       /* the compiled step: its own graph, ids and step numbers */
        int nv = fn->fg->nvars;
        if ((r = tn__printer_init(&ip, pr->out, nv)) != TN_OK) break;
        int *topo = (int *)tn__malloc(((size_t)nv + 1) * sizeof *topo);
        if (!topo) { tn__printer_free(&ip); r = tn__err(TN_ERR_OOM, "tn_debugprint: out of memory"); break; }
        for (int j = 0; j < nv; j++) topo[j] = -1;
        for (int k = 0; k < fn->n_steps; k++) topo[fn->steps[k].node->id] = k;
        ip.topo = topo;
        ip.lead = " >";
        ip.next_id = pr->next_id;      /* ids go on from the main graph's: no two lines share one */
        for (int k = 0; k < fn->n_roots && r == TN_OK; k++) r = tn__print_tree(&ip, fn->roots[k]);
        pr->next_id = ip.next_id;
        tn__free(topo);
        tn__printer_free(&ip);
        /* scans inside the compiled step: listed after, labelled without ids */
        for (int k = 0; k < fn->n_steps && r == TN_OK; k++) {
            tn_var *sv = fn->steps[k].node;
            if (sv->op == TN_OP_SCAN && sv->ext) r = tn__scan_pq_push(&q, sv, true);
        }
    }
    tn__free(q.v);
    tn__free(q.compiled);
    return r;
}

TN_API tn_result tn_scan_debugprint(const tn_var *v, FILE *out) {
    if (!v || !out) return tn__err(TN_ERR_NULL, "tn_scan_debugprint: %s is NULL", v ? "out" : "variable");
    return tn_debugprint(v, out);     /* which prints the inner graphs */
}

/* >>profile =========================================================== */
/* Per-function timing, as Theano's ProfileStats printed it.

   Turned on for every function by the flag profile=1 (the report goes to
   stderr when the function is freed), or for one function by
   tn_profile_enable (print it with tn_profile_print). The executor calls the
   hooks below only when f->prof is set, so a function without a profile pays
   one predictable branch per step.

   What is measured: wall time from a C11 clock (timespec_get). A CPU op's
   time is its kernel's. A GPU op's or a transfer's is its time on the device:
   the back end records an event on its stream before and after the step
   (tn_backend.prof_mark) and nothing waits during the call. Two sets of
   events alternate between calls, and a call collects the set of two calls
   before (tn_backend.prof_collect), so the host stays up to a call ahead of
   the GPU as it would unprofiled; printing the report collects the rest. A
   back end without events, or launch_blocking=1 (every launch waits for its
   kernel), gives host times instead: with launch_blocking each GPU op's line
   is then its full time, without it only its launch. */
#include <time.h>
#include <string.h>

typedef struct tn__prof {
    bool compiled_with;        /* attached at compile time: the compile times are known */
    double t_rewrite, t_prepare;
    uint64_t calls;
    double t_call, t_run, t_first;
    double *t_step;            /* per step: seconds and calls */
    uint64_t *n_step;
    int n_steps;
    const tn_backend *be;      /* events: its pool (NULL: host times everywhere) */
    void *ev;
    double *t_host;            /* per step timed with events: the host's time launching it */
    double t_graph;            /* replayed calls (>>profile's sampling): the device seconds of the graphs timed, */
    uint64_t n_graph;          /* how many were timed, */
    uint64_t n_launch;         /* and how many were launched */
    /* per input: was it copied to a device, and did its data change between calls */
    bool *in_to_device;
    const void **in_ptr;
    uint64_t *in_sum;          /* sampled checksum, every call */
    uint64_t *in_full;         /* whole checksum, at calls 0, 1, 2, 4, 8, ... */
    size_t *in_bytes;
    uint64_t *in_same;         /* calls whose data equalled the previous call's (0 once a whole check differs) */
    char **label;              /* per step, for the trace (the >>trace section); NULL when not tracing */
    int gpu_track;             /* the trace's track of this function's device steps */
} tn__prof;

/* Seconds since the first reading (so a double keeps nanoseconds; since the
   epoch it would keep a quarter of a microsecond). */
static pthread_once_t tn__clock_once = PTHREAD_ONCE_INIT;
static time_t tn__clock_base;
static void tn__clock_start(void) {
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    tn__clock_base = ts.tv_sec;
}
static double tn__prof_now(void) {
    pthread_once(&tn__clock_once, tn__clock_start);
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)(ts.tv_sec - tn__clock_base) + 1e-9 * (double)ts.tv_nsec;
}

/* 64-bit checksum of a host array's bytes (FNV-1a over 8-byte words); 0 for
   arrays it cannot read (device memory, non-contiguous). `sampled`: at most
   TN__PROF_SAMPLE words evenly spread over the array and its last bytes, so
   a profiled call does not read its inputs whole (a 1 MB input would cost
   more than the step); otherwise every byte. */
#define TN__PROF_SAMPLE 16     /* a call's cost: 1024 cost a replayed GPU step 10 us, 64 2.5 us (data passed, H100 host) */
static uint64_t tn__prof_checksum(const tn_array *a, bool sampled, size_t *bytes) {
    *bytes = 0;
    if (!a || a->device != TN_HOST || !a->data || !tn_array_is_contiguous(a)) return 0;
    size_t n = tn_array_nbytes(a), words = n / 8, step = 1;
    if (sampled && words > 2 * TN__PROF_SAMPLE) step = words / TN__PROF_SAMPLE;
    const unsigned char *p = (const unsigned char *)a->data;
    uint64_t h = 0xcbf29ce484222325ull, w, l[4] = { h, h + 1, h + 2, h + 3 };
    size_t k = 0;
    for (; k + 3 * step < words; k += 4 * step)      /* four chains: a multiply's latency, not one chain's, a word */
        for (int j = 0; j < 4; j++) {
            memcpy(&w, p + 8 * (k + (size_t)j * step), 8);
            l[j] = (l[j] ^ w) * 0x100000001b3ull;
        }
    for (; k < words; k += step) {
        memcpy(&w, p + 8 * k, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (int j = 0; j < 4; j++) h = (h ^ l[j]) * 0x100000001b3ull;
    if (n >= 8) { memcpy(&w, p + n - 8, 8); h = (h ^ w) * 0x100000001b3ull; }
    for (size_t i = 8 * words; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    *bytes = n;
    return h ^ n;
}

typedef enum { TN__PROF_CPU = 0, TN__PROF_GPU, TN__PROF_XFER } tn__prof_where;

/* >>trace: profile_trace=FILE.json, the profile as a Chrome trace --------- */
/* The JSON array format of Chrome's Trace Event Format (Perfetto and
   chrome://tracing open it): complete events ("ph":"X", microseconds from
   the trace's start) on one track per host thread (compiles, calls, and each
   step's host time: a CPU op's run, a GPU op's launch) and one track per
   profiled function's device steps (kernels and transfers as the device ran
   them, from the events of the >>profile section, placed on the host's
   clock by the back end). The file is opened when the first function is
   profiled with the flag set, written through one lock, and closed with "]"
   by tn_shutdown or at exit; a trace cut short is still readable (the
   format allows a missing "]"). A function profiled after tn_shutdown
   starts the file anew. */
static struct tn__trace_state {
    pthread_mutex_t mu;
    FILE *f;
    const char *path;          /* the flag's string the file was opened for */
    double t0;                 /* the host clock at the trace's start */
    bool any, at_exit, failed;
    int gen;                   /* files opened so far */
    int n_threads, n_tracks;   /* track numbers given (for the process: a thread keeps its number) */
} tn__trace = { .mu = PTHREAD_MUTEX_INITIALIZER };
static TN__THREAD_LOCAL int tn__trace_thread;   /* this thread's track, 0 until named */

static double tn__prof_now(void);

static void tn__trace_str(FILE *o, const char *s) {
    fputc('"', o);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
        else if (c < 0x20) fprintf(o, "\\u%04x", c);
        else fputc(c, o);
    }
    fputc('"', o);
}

/* Starts an entry (the comma between entries), the lock held. */
static FILE *tn__trace_entry(void) {
    if (tn__trace.any) fputs(",\n", tn__trace.f);
    tn__trace.any = true;
    return tn__trace.f;
}

static void tn__trace_name_track(int tid, const char *what, const char *name) {
    FILE *o = tn__trace_entry();
    fprintf(o, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":", tid);
    char buf[300];
    snprintf(buf, sizeof buf, "%s%.250s", what, name ? name : "");
    tn__trace_str(o, buf);
    fprintf(o, "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"sort_index\":%d}}", tid, tid);
}

static void tn__trace_close_locked(void) {
    if (!tn__trace.f) return;
    fputs("\n]\n", tn__trace.f);
    if (fclose(tn__trace.f) != 0) tn__warn("profile_trace: writing %s failed", tn__trace.path);
    tn__trace.f = NULL;
    tn__trace.path = NULL;
}

static void tn__trace_close(void) {
    pthread_mutex_lock(&tn__trace.mu);
    tn__trace_close_locked();
    pthread_mutex_unlock(&tn__trace.mu);
}

/* Is a trace being written (opening the file the flag names if it is not
   open yet)? A file that cannot be opened is said once, and not traced. */
static bool tn__trace_on(void) {
    const char *path = tn_get_config()->profile_trace;
    if (!path || !*path) return false;
    pthread_mutex_lock(&tn__trace.mu);
    if (tn__trace.f && !tn__str_same(tn__trace.path, path)) tn__trace_close_locked();
    if (!tn__trace.f && !(tn__trace.failed && tn__str_same(tn__trace.path, path))) {
        tn__trace.path = path;
        tn__trace.failed = !(tn__trace.f = fopen(path, "w"));
        if (tn__trace.failed) {
            tn__warn("profile_trace: cannot write %s (%s); not tracing", path, strerror(errno));
        } else {
            tn__trace.t0 = tn__prof_now();
            tn__trace.gen++;
            fputs("[\n", tn__trace.f);
            fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"tensor.h\"}}", tn__trace.f);
            tn__trace.any = true;
            if (!tn__trace.at_exit) tn__trace.at_exit = atexit(tn__trace_close) == 0;
        }
    }
    bool on = tn__trace.f != NULL;
    pthread_mutex_unlock(&tn__trace.mu);
    return on;
}

/* A new track for a function's device steps; 0 when not tracing. */
static int tn__trace_track(const char *fname) {
    pthread_mutex_lock(&tn__trace.mu);
    int tid = 0;
    if (tn__trace.f) {
        tid = 1000 + ++tn__trace.n_tracks;
        tn__trace_name_track(tid, "device: ", fname);
    }
    pthread_mutex_unlock(&tn__trace.mu);
    return tid;
}

/* One complete event: on track `tid`, or on the calling thread's (tid 0).
   `step` >= 0 adds it to the event's arguments. */
static void tn__trace_event(const char *name, const char *cat, int tid, double start, double seconds, int step) {
    pthread_mutex_lock(&tn__trace.mu);
    if (tn__trace.f) {
        if (!tid) {
            if (!tn__trace_thread) tn__trace_thread = ++tn__trace.n_threads;
            tid = tn__trace_thread;
            static TN__THREAD_LOCAL int named;      /* the file this thread's track is named in */
            if (named != tn__trace.gen) {
                char nm[32];
                snprintf(nm, sizeof nm, "%d", tid);
                tn__trace_name_track(tid, "host thread ", nm);
                named = tn__trace.gen;
            }
        }
        FILE *o = tn__trace_entry();
        fputs("{\"name\":", o);
        tn__trace_str(o, name);
        fprintf(o, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f", cat, tid,
                1e6 * (start - tn__trace.t0), 1e6 * (seconds > 0 ? seconds : 0));
        if (step >= 0) fprintf(o, ",\"args\":{\"step\":%d}", step);
        fputc('}', o);
    }
    pthread_mutex_unlock(&tn__trace.mu);
}

static tn__prof_where tn__prof_where_of(const tn_func *f, const tn__step *st) {
    if (st->def->kind == TN_OPK_TRANSFER) return TN__PROF_XFER;
    return st->node->device != TN_HOST && f->backend ? TN__PROF_GPU : TN__PROF_CPU;
}

/* The device steps are timed with events when the back end has them, unless
   launch_blocking asks for host times of kernels run to completion. */
static void tn__prof_events_new(const tn_func *f, tn__prof *p) {
    const tn_backend *be = f->backend;
    if (!be || !be->prof_new || !be->prof_mark || !be->prof_collect || !be->prof_free || tn_get_config()->launch_blocking) return;
    bool device = false;
    for (int k = 0; k < f->n_steps && !device; k++) device = tn__prof_where_of(f, &f->steps[k]) != TN__PROF_CPU;
    if (!device) return;
    p->be = be;
    p->ev = be->prof_new(f->n_steps + 1);    /* step n_steps: a replayed call's graph; NULL: host times, as without events */
}

/* An event failed (a failed kernel): host times from here on; what the
   events measured so far is kept. */
static void tn__prof_events_off(tn_func *f, tn__prof *p) {
    tn__warn("%s: profiler events failed (%s); GPU ops are timed on the host from here on", f->name, tn_last_error());
    p->be->prof_free(p->ev);
    p->ev = NULL;
    for (int k = 0; k < p->n_steps; k++) { p->t_step[k] += p->t_host[k]; p->t_host[k] = 0; }
}

/* A profiled function whose steps are timed by events is still replayed as
   CUDA graphs (the >>replay section): capturing events in a graph costs
   about 1.5 us a node on an H100, which would double a short step. So the
   first call and one in TN__PROF_EVERY run step by step with a pair of
   events around each device step; the others launch the graph, and the
   first launch and one in TN__PROF_GRAPH_EVERY record a pair of events
   around it (a pair around every launch and its collection cost the seed's
   55 us step, data passed, about 24 us; one in 32 step by step and one
   launch in 16 timed, about 3 us, on an H100).
   The report takes the timed graphs' mean for every launch and shares that
   time among the steps in the proportions of the calls timed step by step.
   Not under a trace, whose events are each step's (its calls all run step
   by step). */
#define TN__PROF_EVERY 128
#define TN__PROF_GRAPH_EVERY 32
static bool tn__prof_replayable(const tn_func *f) { return f->prof->ev && !f->prof->label; }

/* This call runs step by step, each device step timed (the first call,
   then one in TN__PROF_EVERY). */
static bool tn__prof_stepwise(const tn_func *f) {
    return !tn__prof_replayable(f) || f->prof->calls % TN__PROF_EVERY == 0;
}

/* The call about to run may record marks: it runs step by step, or its
   launch (if it launches its graph) is timed. The others need no collection
   first: the sets alternate at the calls that record, so a set is collected
   before it is recorded into again. */
static bool tn__prof_marks_next(const tn_func *f) {
    return tn__prof_stepwise(f) || f->prof->n_launch % TN__PROF_GRAPH_EVERY == 0;
}

/* The pair of events around a timed launch of the graph: marks 2n and
   2n + 1 (the launch counted after its end mark). */
static void tn__prof_graph_mark(tn_func *f, int end) {
    tn__prof *p = f->prof;
    if (p->ev && p->n_launch % TN__PROF_GRAPH_EVERY == 0 && p->be->prof_mark(p->ev, 2 * p->n_steps + end) != TN_OK)
        tn__prof_events_off(f, p);
    p->n_launch += end;
}

/* A call replayed: every step ran once (the graph's time is its events'). */
static void tn__prof_replayed(tn_func *f) {
    tn__prof *p = f->prof;
    for (int k = 0; k < p->n_steps; k++) p->n_step[k]++;
}

/* A step that runs on a device (a view of device memory runs nothing there:
   its time is the host's). */
static bool tn__prof_on_device(const tn_func *f, int k) {
    return !f->steps[k].view && tn__prof_where_of(f, &f->steps[k]) != TN__PROF_CPU;
}

static bool tn__prof_evented(const tn_func *f, const tn__prof *p, int k) {
    return p->ev && k < p->n_steps && tn__prof_on_device(f, k);
}

static void tn__prof_free_data(tn__prof *p) {
    if (!p) return;
    if (p->ev) p->be->prof_free(p->ev);
    tn__free(p->t_step); tn__free(p->n_step); tn__free(p->t_host);
    tn__free(p->in_to_device); tn__free(p->in_ptr); tn__free(p->in_sum); tn__free(p->in_full); tn__free(p->in_bytes); tn__free(p->in_same);
    for (int k = 0; p->label && k < p->n_steps; k++) tn__free(p->label[k]);
    tn__free(p->label);
    tn__free(p);
}

static tn__prof *tn__prof_new(const tn_func *f) {
    tn__prof *p = (tn__prof *)tn__calloc(1, sizeof *p);
    if (!p) return NULL;
    size_t ns = (size_t)f->n_steps + 1, ni = (size_t)f->n_inputs + 1;
    p->n_steps = f->n_steps;
    p->t_step = (double *)tn__calloc(ns, sizeof *p->t_step);
    p->n_step = (uint64_t *)tn__calloc(ns, sizeof *p->n_step);
    p->t_host = (double *)tn__calloc(ns, sizeof *p->t_host);
    p->in_to_device = (bool *)tn__calloc(ni, sizeof *p->in_to_device);
    p->in_ptr = (const void **)tn__calloc(ni, sizeof *p->in_ptr);
    p->in_sum = (uint64_t *)tn__calloc(ni, sizeof *p->in_sum);
    p->in_full = (uint64_t *)tn__calloc(ni, sizeof *p->in_full);
    p->in_bytes = (size_t *)tn__calloc(ni, sizeof *p->in_bytes);
    p->in_same = (uint64_t *)tn__calloc(ni, sizeof *p->in_same);
    if (!p->t_step || !p->n_step || !p->t_host || !p->in_to_device || !p->in_ptr || !p->in_sum || !p->in_full || !p->in_bytes || !p->in_same) {
        tn__prof_free_data(p);
        return NULL;
    }
    /* an input read by a transfer or a device op is copied to the device each call */
    for (int k = 0; k < f->n_steps; k++) {
        const tn__step *st = &f->steps[k];
        if (tn__prof_where_of(f, st) == TN__PROF_CPU) continue;
        if (st->def->kind == TN_OPK_TRANSFER && st->node->device == TN_HOST) continue;   /* to the host */
        for (int i = 0; i < st->n_in; i++) {
            const tn__slot *sl = &f->slots[st->in_slot[i]];
            if (sl->kind == TN__SLOT_INPUT && sl->index >= 0) p->in_to_device[sl->index] = true;
        }
    }
    tn__prof_events_new(f, p);
    if (tn__trace_on() && (p->label = (char **)tn__calloc(ns, sizeof *p->label))) {
        char lb[256];
        for (int k = 0; k < f->n_steps && p->label; k++) {
            tn__node_label(f->steps[k].node, lb, sizeof lb);
            size_t n = strlen(lb) + 1;
            if ((p->label[k] = (char *)tn__malloc(n))) memcpy(p->label[k], lb, n);
            else {
                for (int j = 0; j < k; j++) tn__free(p->label[j]);
                tn__free(p->label);
                p->label = NULL;
            }
        }
        if (p->label && p->ev) p->gpu_track = tn__trace_track(f->name);
    }
    return p;
}

/* tn_backend.prof_collect's sink: a device step's time, to its total and
   to the trace. */
static void tn__prof_sink_step(void *user, int k, double start, double seconds) {
    tn__prof *p = (tn__prof *)user;
    if (k == p->n_steps) { p->t_graph += seconds; p->n_graph++; return; }
    if (k < 0 || k >= p->n_steps) return;
    p->t_step[k] += seconds;
    if (p->label && start >= 0) tn__trace_event(p->label[k], "device", p->gpu_track, start, seconds, k);
}

static tn_result tn__prof_collect(tn__prof *p, bool all) {
    tn_prof_sink sk = { tn__prof_sink_step, p, p->label ? tn__prof_now : NULL };   /* a clock only for the trace */
    return p->be->prof_collect(p->ev, &sk, all);
}

static void tn__prof_attach(tn_func *f, double t_rewrite, double t_prepare) {
    if (f->prof) return;
    tn__prof *p = tn__prof_new(f);
    if (!p) { tn__warn("%s: out of memory for the profiler; not profiling", f->name); return; }
    p->compiled_with = true;
    p->t_rewrite = t_rewrite;
    p->t_prepare = t_prepare;
    f->prof = p;
    if (p->label) {       /* the compile ended now: its rewrites, then its scheduling */
        double end = tn__prof_now();
        char nm[300];
        snprintf(nm, sizeof nm, "rewrite %.250s", f->name);
        tn__trace_event(nm, "compile", 0, end - t_prepare - t_rewrite, t_rewrite, -1);
        snprintf(nm, sizeof nm, "prepare %.250s", f->name);
        tn__trace_event(nm, "compile", 0, end - t_prepare, t_prepare, -1);
    }
}

static double tn__prof_begin_call(tn_func *f, tn_array *const *inputs) {
    tn__prof *p = f->prof;
    /* Did each input's data change since the previous call? A sample of its
       words every call, and the whole array at calls 0, 1, 2, 4, 8, ... (a
       difference there rules the input out for good), so the profiler reads
       O(log calls) whole inputs in all. */
    bool whole = (p->calls & (p->calls - 1)) == 0;
    for (int i = 0; i < f->n_inputs; i++) {
        size_t bytes;
        uint64_t h = tn__prof_checksum(inputs[i], true, &bytes);
        bool same = p->calls > 0 && bytes > 0 && inputs[i]->data == p->in_ptr[i] && bytes == p->in_bytes[i];
        if (same && h == p->in_sum[i]) p->in_same[i]++;
        if (whole) {
            uint64_t full = tn__prof_checksum(inputs[i], false, &bytes);
            if (p->calls > 0 && full != p->in_full[i]) p->in_same[i] = 0;
            p->in_full[i] = full;
        }
        p->in_ptr[i] = inputs[i]->data;
        p->in_sum[i] = h;
        p->in_bytes[i] = bytes;
    }
    /* frees the event set this call reuses: the GPU has almost always passed
       it (only before a call that records marks: a collection costs a
       replayed GPU step about 5 us) */
    if (p->ev && tn__prof_marks_next(f) && tn__prof_collect(p, false) != TN_OK) tn__prof_events_off(f, p);
    return tn__prof_now();   /* after the checksums: they are not the function's time */
}

/* The clock is read before the begin mark is recorded: on an idle stream
   the device may pass the mark before the host returns from recording it,
   and a trace shows a kernel starting no earlier than its launch. */
static double tn__prof_step_begin(tn_func *f, int k) {
    tn__prof *p = f->prof;
    double t0 = tn__prof_now();
    if (tn__prof_evented(f, p, k) && !tn__replay_capturing && p->be->prof_mark(p->ev, 2 * k) != TN_OK) tn__prof_events_off(f, p);
    return t0;
}

static void tn__prof_step(tn_func *f, int k, double t0) {
    tn__prof *p = f->prof;
    double t = tn__prof_now() - t0;
    if (k >= p->n_steps) return;
    if (tn__replay_capturing) {         /* counted and timed with its graph, once launched */
        p->t_host[k] += t;
        return;
    }
    p->n_step[k]++;
    bool ev = tn__prof_evented(f, p, k);
    if (p->label) {
        tn__prof_where w = tn__prof_where_of(f, &f->steps[k]);
        tn__trace_event(p->label[k], w == TN__PROF_CPU ? "cpu" : ev ? "launch" : w == TN__PROF_XFER ? "transfer" : "gpu", 0, t0, t, k);
    }
    if (!ev) { p->t_step[k] += t; return; }
    p->t_host[k] += t;
    if (p->be->prof_mark(p->ev, 2 * k + 1) != TN_OK) tn__prof_events_off(f, p);
}

static void tn__prof_end_call(tn_func *f, double t_call, double t_run) {
    tn__prof *p = f->prof;
    double t = tn__prof_now() - t_call;
    if (p->label) tn__trace_event(f->name, "call", 0, t_call, t, -1);
    if (p->calls == 0) p->t_first = t;
    p->calls++;
    p->t_call += t;
    p->t_run += t_run;
}

static void tn__prof_finish(tn_func *f) {
    if (tn_get_config()->profile && f->prof->calls > 0) tn_profile_print(f, stderr);
    else if (f->prof->label && f->prof->ev && tn__prof_collect(f->prof, true) != TN_OK) tn_clear_error();   /* the trace's last device steps */
    tn__prof_free_data(f->prof);
    f->prof = NULL;
}

/* >>profile_public ----------------------------------------------------- */

TN_API tn_result tn_profile_enable(tn_func *f, bool on) {
    if (tn__func_check(f, "tn_profile_enable") != TN_OK) return tn_last_result();
    if (!on) {
        tn__prof_free_data(f->prof);
        f->prof = NULL;
        return TN_OK;
    }
    if (f->prof) return TN_OK;
    if (!(f->prof = tn__prof_new(f))) return tn__err(TN_ERR_OOM, "tn_profile_enable: out of memory for %s's profile", f->name);
    return TN_OK;
}

TN_API void tn_profile_reset(tn_func *f) {
    if (!f || tn__func_check(f, "tn_profile_reset") != TN_OK || !f->prof) return;
    tn__prof *p = f->prof;
    if (p->ev) p->be->prof_collect(p->ev, NULL, true);   /* drops the marks of calls not collected yet */
    p->calls = 0;
    p->t_call = p->t_run = p->t_first = 0;
    for (int k = 0; k < p->n_steps; k++) { p->t_step[k] = 0; p->n_step[k] = 0; p->t_host[k] = 0; }
    p->t_graph = 0;
    p->n_graph = p->n_launch = 0;
    for (int i = 0; i < f->n_inputs; i++) { p->in_same[i] = 0; p->in_ptr[i] = NULL; }
}

TN_API bool tn_profile_input_unchanged(const tn_func *f, int i) {
    if (!f || tn__func_check(f, "tn_profile_input_unchanged") != TN_OK || !f->prof || i < 0 || i >= f->n_inputs) return false;
    const tn__prof *p = f->prof;
    return p->calls >= 2 && p->in_same[i] == p->calls - 1;
}

TN_API int tn_function_device_steps(const tn_func *f) {
    if (!f || tn__func_check(f, "tn_function_device_steps") != TN_OK) return 0;
    int n = 0;
    for (int k = 0; k < f->n_steps; k++) n += f->steps[k].node->device != TN_HOST && f->backend;
    return n;
}

/* One row of a table: a key (class, op or apply), its time and counts. */
typedef struct tn__prof_row {
    char name[512];
    double t;
    uint64_t calls;
    int napply;
    int where;                 /* tn__prof_where, or -1 when mixed */
} tn__prof_row;

static int tn__prof_row_cmp(const void *a, const void *b) {
    const tn__prof_row *x = (const tn__prof_row *)a, *y = (const tn__prof_row *)b;
    if (x->t != y->t) return x->t < y->t ? 1 : -1;
    return strcmp(x->name, y->name);
}

static const char *tn__prof_where_name(int w) {
    return w == TN__PROF_CPU ? "cpu" : w == TN__PROF_GPU ? "gpu" : w == TN__PROF_XFER ? "xfer" : "mixed";
}

/* Class of an op, Theano-style: the op family, Gpu-prefixed when on a device. */
static void tn__prof_class(const tn_func *f, const tn__step *st, char *buf, size_t cap) {
    tn_op_kind k = st->def->kind;
    const char *base = k == TN_OPK_ELEMWISE || k == TN_OPK_COMPOSITE ? "Elemwise" : st->def->name ? st->def->name : "?";
    bool gpu = tn__prof_where_of(f, st) == TN__PROF_GPU && strncmp(base, "Gpu", 3) != 0;
    snprintf(buf, cap, "%s%s", gpu ? "Gpu" : "", base);
}

static int tn__prof_add(tn__prof_row *rows, int n, const char *name, double t, uint64_t calls, int where) {
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, name)) {
            rows[i].t += t;
            rows[i].calls += calls;
            rows[i].napply++;
            if (rows[i].where != where) rows[i].where = -1;
            return n;
        }
    snprintf(rows[n].name, sizeof rows[n].name, "%s", name);
    rows[n].t = t;
    rows[n].calls = calls;
    rows[n].napply = 1;
    rows[n].where = where;
    return n + 1;
}

static void tn__prof_table(FILE *out, const char *title, const char *what, tn__prof_row *rows, int n, double total, bool apply) {
    qsort(rows, (size_t)n, sizeof *rows, tn__prof_row_cmp);
    fprintf(out, "\n%s\n", title);
    for (const char *c = title; *c; c++) fputc('-', out);
    if (apply) fprintf(out, "\n  <%% time> <sum %%> <apply time> <time per call> <type> <#call> <id> <%s>\n", what);
    else fprintf(out, "\n  <%% time> <sum %%> <apply time> <time per call> <type> <#call> <#apply> <%s>\n", what);
    double cum = 0;
    for (int i = 0; i < n; i++) {
        const tn__prof_row *r = &rows[i];
        cum += r->t;
        double pc = total > 0 ? 100.0 * r->t / total : 0, cc = total > 0 ? 100.0 * cum / total : 0;
        fprintf(out, "  %6.1f%%   %6.1f%%   %10.3es   %10.3es   %5s  %7llu %6d   %s\n", pc, cc, r->t,
                r->calls ? r->t / (double)r->calls : 0.0, tn__prof_where_name(r->where), (unsigned long long)r->calls,
                r->napply, r->name);
    }
}

/* Advice: inputs copied to the device every call with unchanged data, ops
   a device back end left on the CPU (no row in its table, or a row that
   declined these inputs), and host round trips between GPU ops. Returns how
   many lines it printed. */
static int tn__prof_advice(const tn_func *f, FILE *out) {
    const tn__prof *p = f->prof;
    int n = 0;
    for (int i = 0; i < f->n_inputs; i++)
        if (p->in_to_device[i] && tn_profile_input_unchanged(f, i)) {
            fprintf(out, "  - input '%s' is copied to the device on every call and did not change in %llu calls: "
                         "make it a shared variable (tn_shared) so it stays on the device\n",
                    f->in_name[i], (unsigned long long)p->calls);
            n++;
        }
    char la[256], lb[256], lc[256], why[256];
    for (int k = 0; f->backend && k < f->n_steps; k++) {
        const tn__step *S = &f->steps[k];
        if (tn__prof_where_of(f, S) != TN__PROF_CPU || S->view || S->def->kind == TN_OPK_TRANSFER) continue;
        tn__node_label(S->node, la, sizeof la);
        fprintf(out, "  - %s (node %d, step %d) runs on the CPU: %s\n", la, S->node->id, k,
                tn__backend_why_cpu(f->backend, S->node, why, sizeof why));
        n++;
    }
    for (int a = 0; a < f->n_steps; a++) {
        const tn__step *A = &f->steps[a];
        if (A->def->kind != TN_OPK_TRANSFER || A->node->device != TN_HOST) continue;   /* HostFromGpu */
        for (int b = a + 1; b < f->n_steps; b++) {
            const tn__step *B = &f->steps[b];
            if (tn__prof_where_of(f, B) != TN__PROF_CPU) continue;
            bool reads = false;
            for (int i = 0; i < B->n_in && !reads; i++) reads = B->in_slot[i] >= A->out_slot && B->in_slot[i] < A->out_slot + A->n_out;
            if (!reads) continue;
            for (int c = b + 1; c < f->n_steps; c++) {
                const tn__step *C = &f->steps[c];
                if (C->def->kind != TN_OPK_TRANSFER || C->node->device == TN_HOST) continue;  /* GpuFromHost */
                bool fed = false;
                for (int i = 0; i < C->n_in && !fed; i++) fed = C->in_slot[i] >= B->out_slot && C->in_slot[i] < B->out_slot + B->n_out;
                if (!fed) continue;
                tn__node_label(A->node, la, sizeof la);
                tn__node_label(B->node, lb, sizeof lb);
                tn__node_label(C->node, lc, sizeof lc);
                fprintf(out, "  - host round trip between GPU ops: %s (step %d) -> %s on the cpu (step %d) -> %s (step %d): "
                             "%s; the data leaves and re-enters the device\n",
                        la, a, lb, b, lc, c, tn__backend_why_cpu(f->backend, B->node, why, sizeof why));
                n++;
            }
        }
    }
    return n;
}

TN_API tn_result tn_profile_print(const tn_func *f, FILE *out) {
    if (tn__func_check(f, "tn_profile_print") != TN_OK) return tn_last_result();
    if (!out) return tn__err(TN_ERR_NULL, "tn_profile_print: out is NULL");
    tn__prof *p = f->prof;
    if (!p) return tn__err(TN_ERR_INVALID, "tn_profile_print: %s is not profiled (set the flag profile=1 or call tn_profile_enable)", f->name);
    /* waits for the device steps queued since the last collection */
    if (p->ev && tn__prof_collect(p, true) != TN_OK) tn__prof_events_off((tn_func *)f, p);   /* the profile's state, not f's meaning */
    /* each step's time: its own, and its share of the replayed graphs' */
    double *ts = (double *)tn__calloc((size_t)p->n_steps + 1, sizeof *ts), t_stepwise = 0;
    tn__prof_row *rows = (tn__prof_row *)tn__calloc((size_t)p->n_steps + 1, sizeof *rows);
    if (!ts || !rows) { tn__free(ts); tn__free(rows); return tn__err(TN_ERR_OOM, "tn_profile_print: out of memory"); }
    for (int k = 0; k < p->n_steps; k++)
        if (tn__prof_on_device(f, k)) t_stepwise += p->t_step[k];
    double t_graphs = p->n_graph ? p->t_graph / (double)p->n_graph * (double)p->n_launch : 0;   /* every launch at the timed ones' mean */
    for (int k = 0; k < p->n_steps; k++)
        ts[k] = p->t_step[k] + (t_stepwise > 0 && tn__prof_on_device(f, k) ? t_graphs * p->t_step[k] / t_stepwise : 0);
    double t_ops = 0, t_where[3] = {0, 0, 0}, t_launch = 0;
    bool any_gpu = false;
    for (int k = 0; k < p->n_steps; k++) {
        int w = tn__prof_where_of(f, &f->steps[k]);
        t_ops += ts[k];
        t_where[w] += ts[k];
        t_launch += p->t_host[k];
        if (w != TN__PROF_CPU) any_gpu = true;
    }
    double T = p->t_call;
    fprintf(out, "Function profiling\n==================\n");
    (void)tn_print_info(out);           /* what it ran with, as make run's first lines say */
    fprintf(out, "  Message: %s\n", f->name);
    fprintf(out, "  Time in %llu calls to tn_call: %.6es\n", (unsigned long long)p->calls, T);
    if (p->calls) fprintf(out, "  Time per call: %.6es (first call %.6es)\n", T / (double)p->calls, p->t_first);
    fprintf(out, "  Time in the executor (running the steps): %.6es (%.1f%%)\n", p->t_run, T > 0 ? 100 * p->t_run / T : 0);
    fprintf(out, "  Time in ops: %.6es (%.1f%%)\n", t_ops, T > 0 ? 100 * t_ops / T : 0);
    fprintf(out, "  Time outside the executor (input checks, outputs, updates): %.6es\n", T - p->t_run > 0 ? T - p->t_run : 0);
    fprintf(out, "  %d steps; back end: %s\n", p->n_steps, f->backend ? f->backend->name : "cpu only");
    if (p->compiled_with) {
        fprintf(out, "  Total compile time: %.6es\n", p->t_rewrite + p->t_prepare);
        fprintf(out, "    Rewrites (tn__optimize): %.6es\n", p->t_rewrite);
        fprintf(out, "    Scheduling and kernel preparation (back end prepare): %.6es\n", p->t_prepare);
        fprintf(out, "    (kernels a back end compiles lazily are counted in the first call)\n");
    } else {
        fprintf(out, "  Compile time: not measured (profiling was enabled after tn_function)\n");
    }

    char nm[256];
    int n = 0;
    for (int k = 0; k < p->n_steps; k++) {
        tn__prof_class(f, &f->steps[k], nm, sizeof nm);
        n = tn__prof_add(rows, n, nm, ts[k], p->n_step[k], tn__prof_where_of(f, &f->steps[k]));
    }
    tn__prof_table(out, "Class", "Class name", rows, n, t_ops, false);
    n = 0;
    for (int k = 0; k < p->n_steps; k++) {
        tn__node_label(f->steps[k].node, nm, sizeof nm);
        n = tn__prof_add(rows, n, nm, ts[k], p->n_step[k], tn__prof_where_of(f, &f->steps[k]));
    }
    tn__prof_table(out, "Ops", "Op name", rows, n, t_ops, false);
    /* applies: "id" is the step index, the name the op with its output type */
    for (int k = 0; k < p->n_steps; k++) {
        const tn_var *v = f->steps[k].node;
        char lb[160], tb[160];
        tn__node_label(v, lb, sizeof lb);
        tn__prof_row *r = &rows[k];
        snprintf(r->name, sizeof r->name, "%4d   %.200s <%.150s>%s%.100s%s", k, lb, tn__type_str(&v->type, tb),
                 v->name ? " '" : "", v->name ? v->name : "", v->name ? "'" : "");
        r->t = ts[k];
        r->calls = p->n_step[k];
        r->napply = k;
        r->where = tn__prof_where_of(f, &f->steps[k]);
    }
    qsort(rows, (size_t)p->n_steps, sizeof *rows, tn__prof_row_cmp);
    fprintf(out, "\nApply\n------\n  <%% time> <sum %%> <apply time> <time per call> <type> <#call> <id> <Apply name>\n");
    double cum = 0;
    for (int k = 0; k < p->n_steps; k++) {
        const tn__prof_row *r = &rows[k];
        cum += r->t;
        fprintf(out, "  %6.1f%%   %6.1f%%   %10.3es   %10.3es   %5s  %7llu %s\n", t_ops > 0 ? 100 * r->t / t_ops : 0.0,
                t_ops > 0 ? 100 * cum / t_ops : 0.0, r->t, r->calls ? r->t / (double)r->calls : 0.0,
                tn__prof_where_name(r->where), (unsigned long long)r->calls, r->name);
    }
    tn__free(rows);
    tn__free(ts);

    fprintf(out, "\nSpent %.3es (%.1f%%) in cpu ops, %.3es (%.1f%%) in gpu ops and %.3es (%.1f%%) in transfer ops\n",
            t_where[0], t_ops > 0 ? 100 * t_where[0] / t_ops : 0.0, t_where[1], t_ops > 0 ? 100 * t_where[1] / t_ops : 0.0,
            t_where[2], t_ops > 0 ? 100 * t_where[2] / t_ops : 0.0);
    if (any_gpu && p->ev)
        fprintf(out, "  (gpu and transfer ops: time on the device, from events recorded around each step without waiting "
                     "for the stream; the host spent %.3es launching them)\n", t_launch);
    else if (any_gpu && tn_get_config()->launch_blocking)
        fprintf(out, "  (gpu ops: launch_blocking=1: host time of each launch waiting for its kernel to complete)\n");
    else if (any_gpu)
        fprintf(out, "  (gpu ops: host time of the asynchronous launch; the kernels' run time is spent where the host waits. "
                     "launch_blocking=1 times each kernel to completion)\n");
    if (any_gpu && p->n_launch)
        fprintf(out, "  (%llu calls replayed as CUDA graphs, about %.3es on the device: %llu of the graphs timed whole, the first "
                     "and one in %d; that time is shared among the steps as in the calls timed step by step, the first and one in %d)\n",
                (unsigned long long)p->n_launch, t_graphs, (unsigned long long)p->n_graph, TN__PROF_GRAPH_EVERY, TN__PROF_EVERY);
    fprintf(out, "\nAdvice\n------\n");
    if (tn__prof_advice(f, out) == 0) fprintf(out, "  none\n");
    return TN_OK;
}

/* >>printers ========================================================== */

/* >>print_info: tn_print_info (the >>api_printing section) */
static const char *tn__simd_target(void) {
#if defined(__AVX512F__)
    return "x86-64 AVX-512F" " AVX2 FMA";
#elif defined(__AVX2__) && defined(__FMA__)
    return "x86-64 AVX2 FMA";
#elif defined(__AVX2__)
    return "x86-64 AVX2";
#elif defined(__AVX__)
    return "x86-64 AVX";
#elif defined(__SSE4_2__)
    return "x86-64 SSE4.2";
#elif defined(__SSE2__)
    return "x86-64 SSE2 (the baseline: build with -march=native for more)";
#elif defined(__ARM_FEATURE_SVE)
    return "AArch64 NEON SVE";
#elif defined(__ARM_NEON)
    return "NEON";
#else
    return "none the compiler advertised";
#endif
}

TN_API tn_result tn_print_info(FILE *out) {
    if (!out) return tn__err(TN_ERR_NULL, "tn_print_info: out is NULL");
    const tn_config *cfg = tn_get_config();
    const char *blas = tn__blas_name();
    tn__sb b = TN__SB_INIT;
    tn__sb_printf(&b, "tensor.h %s\n", TENSOR_VERSION);
#if defined(__clang__)
    tn__sb_printf(&b, "  compiler:     clang %d.%d.%d", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
    tn__sb_printf(&b, "  compiler:     gcc %d.%d.%d", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
    tn__sb_puts(&b, "  compiler:     unknown");
#endif
    tn__sb_printf(&b, ", SIMD: %s%s\n", tn__simd_target(),
#ifdef __OPTIMIZE__
                  ""
#else
                  " (built without optimisation)"
#endif
    );
    tn__sb_printf(&b, "  CPU threads:  %d\n", tn__num_threads());
    tn__sb_printf(&b, "  BLAS:         %s\n", blas ? blas : "built-in kernels (no CBLAS library loaded)");
    tn__sb_printf(&b, "  floatX:       %s\n", tn_dtype_name(cfg->floatX));
    if (tn__lib.info_hook) tn__lib.info_hook(&b);
    else tn__sb_puts(&b, "  GPU:          none: the CUDA back end is not compiled in (include tensor_cuda.h where "
                         "TENSOR_IMPLEMENTATION is defined)\n  kernel cache: none (no GPU back end)\n");
    if (b.oom) { tn__free(b.s); return tn__err(TN_ERR_OOM, "tn_print_info: out of memory"); }
    fputs(b.s, out);
    tn__free(b.s);
    return TN_OK;
}

/* Graphviz pictures of graphs, as Theano's pydotprint.
   Variables are ellipses (inputs blue, shared variables green, constants
   grey, function outputs white; after a call, with the shapes of that call); ops are boxes (white on the CPU, green on a
   GPU, red for host <-> device transfers); a fused Composite, or a reduction
   with a fused prologue or epilogue (a Gemv with an epilogue), is a box that lists its scalar programs. Edges
   carry the dtype and shape of the value
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
    tn__sbuf b = { buf, cap, 0 };
    tn__sbuf_put(&b, "%s (", tn_dtype_name(t->dtype));
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] >= 0) tn__sbuf_put(&b, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        else tn__sbuf_put(&b, "%s?", d ? ", " : "");
    }
    tn__sbuf_put(&b, "%s)", t->ndim == 1 ? "," : "");
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
            tn__sbuf b = { line, sizeof line, 0 };
            tn__sbuf_put(&b, "r%d = %s(r%d", p->n_in + k, in->op == TN_OP_RANDOM ? "random" : e ? e->name : "?", in->a);
            if (in->b >= 0) tn__sbuf_put(&b, ", r%d", in->b);
            if (in->c >= 0) tn__sbuf_put(&b, ", r%d", in->c);
            tn__sbuf_put(&b, ")");
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
    } else if (tn__op_has(v->op, TN_OPF_PROLOGUE) && v->ext) {   /* fused elementwise prologue, epilogue */
        const tn_ew_program *pro = (const tn_ew_program *)v->ext;
        if (!(pro->epi && tn__ew_program_is_identity(pro))) { fputs("\\nprologue:\\l", out); tn__dot_program(out, pro); }
        if (pro->epi) { fputs("\\nepilogue:\\l", out); tn__dot_program(out, pro->epi); }
    } else if (v->op == TN_OP_GEMV && v->ext) {                   /* a Gemv's epilogue */
        fputs("\\nepilogue:\\l", out);
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
    if (src != from) fprintf(out, "out %d: ", tn__p_proj_index(&from->p));
    tn__dot_str(out, tb);
    fprintf(out, "\", headlabel=\"%d\", fontsize=10];\n", arg);
}

static void tn__dot_header(FILE *out, const char *name) {
    fputs("digraph \"", out);
    tn__dot_str(out, name);
    fputs("\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=11];\n  edge [fontname=\"Helvetica\", fontsize=9];\n", out);
}

TN_API tn_result tn_write_dot(const tn_func *f, FILE *out) {
    if (tn__func_check(f, "tn_write_dot") != TN_OK) return tn_last_result();
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

/* >>ops_table ========================================================= */
/* The registry of every op. One master table: each part of the
   catalogue writes the rows of its ops next to their code (its rows block,
   e.g. >>ew_rows) and the table lists the parts. A row is the whole op (tn_op_def):
   name, kind, arity, type rule, CPU kernel, label, vjp, jvp and flags. The
   rows name their op (tn_op_def.op) and come in any order; their count is
   pinned to the ops' at compile time (an op added to the enums without a
   row, or a row too many, fails to compile). When the table is filled, on
   first use, each row goes to its op's index and every row is checked
   (tn__op_table_check), so a row left empty or listed twice is an internal
   error naming it, not a crash later. */
#include <pthread.h>

static const tn_op_def tn__op_list[] = {
    TN__GRAPH_OP_ROWS       /* the >>graph section: leaves, PROJ */
    TN__EW_OP_ROWS          /* the >>ops_ew section: TN_EW_OPS, Composite */
    TN__REDUCE_OP_ROWS      /* the >>ops_reduce section: reductions, softmax */
    TN__CUM_OP_ROWS         /* the >>ops_cumulative section: cumsum, cumprod */
    TN__CONV_OP_ROWS        /* the >>ops_conv section: im2col, col2im */
    TN__PRINT_OP_ROWS       /* the >>ops_print section */
    TN__RANDOM_OP_ROWS      /* the >>ops_random section: random draws */
    TN__LINALG_OP_ROWS      /* the >>ops_linalg section */
    TN__SHAPE_OP_ROWS       /* the >>ops_shape section */
    TN__INDEX_OP_ROWS       /* the >>ops_index section */
    TN__TRANSFER_OP_ROWS    /* the >>transfer section */
    TN__SCAN_OP_ROWS        /* the >>scan section */
    TN__CUSTOM_OP_ROWS      /* the >>custom section */
};
TN__STATIC_ASSERT(sizeof tn__op_list / sizeof tn__op_list[0] == TN_OP_COUNT - 1,
                  "the op table needs one row per op of TN_EW_OPS and TN_OTHER_OPS");
static tn_op_def tn__op_rows[TN_OP_COUNT];   /* tn__op_list by op index */

TN_API tn_result tn__op_table_check(const tn_op_def *rows, int n) {
    if (!rows) return tn__err(TN_ERR_INTERNAL, "op table: no rows");
    if (n != TN_OP_COUNT) return tn__err(TN_ERR_INTERNAL, "op table: %d rows for %d ops", n, (int)TN_OP_COUNT);
    for (int op = TN_OP_NONE + 1; op < n; op++) {
        const tn_op_def *d = &rows[op];
        const char *lacks = !d->name ? "name" : !d->kind ? "kind" : !d->infer ? "type rule (infer)"
                          : !d->cpu && !(d->flags & TN_OPF_NO_KERNEL) ? "CPU kernel (cpu; or the TN_OPF_NO_KERNEL flag)"
                          : !d->label ? "label"
                          : !d->vjp && !(d->flags & TN_OPF_DISCRETE) && d->arity != 0 ? "vjp (or the TN_OPF_DISCRETE flag)"
                          : !d->value_inputs != !d->infer_values ? "infer_values to go with value_inputs (both or neither)"
                          : NULL;
        if (lacks)
            return tn__err(TN_ERR_INTERNAL, "op table: the row of op %d (%s) has no %s; every op needs a name, a kind, a type "
                           "rule, a CPU kernel, a label and a vjp or the discrete flag (tensor_ops.h says how to add an op)",
                           op, d->name ? d->name : "unnamed", lacks);
    }
    return TN_OK;
}

static const tn_op_def *tn__op_table = tn__op_rows;
static tn_result tn__op_table_state = TN_OK;
static char tn__op_table_msg[sizeof tn__last_msg];
static pthread_once_t tn__op_table_once = PTHREAD_ONCE_INIT;

/* Installs rows after checking them; a failed check is logged once and kept:
   tn__node_multi then refuses every node with it. */
static tn_result tn__op_table_install(const tn_op_def *rows) {
    tn_result r = tn__op_table_check(rows, TN_OP_COUNT);
    tn__op_table = rows;
    tn__op_table_state = r;
    tn__op_table_msg[0] = 0;
    if (r != TN_OK) {
        memcpy(tn__op_table_msg, tn__last_msg, sizeof tn__op_table_msg);
        if (!tn__lib.log_fn) fprintf(stderr, "tensor.h: internal error: %s\n", tn__op_table_msg);   /* tn__err logged it otherwise */
    }
    return r;
}

static void tn__op_table_fill_builtin(void) {
    for (size_t i = 0; i < sizeof tn__op_list / sizeof tn__op_list[0]; i++) {
        const tn_op_def *d = &tn__op_list[i];
        if (d->op > TN_OP_NONE && d->op < TN_OP_COUNT && !tn__op_rows[d->op].name) tn__op_rows[d->op] = *d;
    }
    tn__op_table_install(tn__op_rows);
}

TN_API tn_result tn__op_table_fill(const tn_op_def *rows) {
    pthread_once(&tn__op_table_once, tn__op_table_fill_builtin);
    return tn__op_table_install(rows ? rows : tn__op_rows);
}

/* TN_OK, or the failed check's error (set again, for the caller to report). */
static tn_result tn__op_table_status(const char *who) {
    pthread_once(&tn__op_table_once, tn__op_table_fill_builtin);
    if (tn__op_table_state == TN_OK) return TN_OK;
    return tn__err(TN_ERR_INTERNAL, "%s: %s", who, tn__op_table_msg);
}

TN_API const tn_op_def *tn__op_def(int op) {
    pthread_once(&tn__op_table_once, tn__op_table_fill_builtin);
    if (op <= TN_OP_NONE || op >= TN_OP_COUNT) return NULL;
    return &tn__op_table[op];
}

TN_API tn_op_kind tn__op_kind(int op) {
    const tn_op_def *d = tn__op_def(op);
    return d ? d->kind : (tn_op_kind)0;
}

TN_API bool tn__op_has(int op, unsigned flags) {
    const tn_op_def *d = tn__op_def(op);
    return d && (d->flags & flags) == flags;
}

TN__CXX_END
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
