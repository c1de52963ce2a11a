/* tensor_cuda.h - v0.1 - CUDA back end for tensor.h: NVRTC-fused kernels, cuBLAS - MIT licence (see tensor.h)

   Do this:
       #define TENSOR_IMPLEMENTATION
       #include "tensor.h"
       #include "tensor_cuda.h"
   in *one* C file. Nothing from the CUDA SDK is needed to build: the driver
   (libcuda.so.1), NVRTC (libnvrtc.so.13/.12/...) and cuBLAS (libcublas.so.13/
   .12/..., with libcublasLt from the same places when it is there: a
   product reads its addend through it) are loaded with dlopen at run time,
   from the loader's search path, then $CUDA_PATH/lib64, then
   /usr/local/cuda/lib64. Link with -ldl.

   Device selection (flag `device`, see tn_config):
       cpu      never touches CUDA.
       auto     the GPU when a driver, a device and NVRTC are usable; else the
                CPU, silently (tn_cuda_status() says why).
       cuda     cudaN  as auto, but when the GPU cannot be used one line says
                why on stderr (or the log callback), e.g.
                "tensor.h: device=cuda requested but libcuda.so.1 was not found
                (no NVIDIA driver); running on the CPU", and everything runs
                on the CPU: a program written for the GPU still gives results.
   tn_cuda_init() does this explicitly; the back end also does it lazily the
   first time a function is compiled.

   Environment (for tests and unusual installs):
       TN_LIBCUDA_PATH, TN_LIBNVRTC_PATH, TN_LIBCUBLAS_PATH   load this file instead
       CUDA_PATH                                              extra search root

   Generated kernels are cached in memory and on disk under cache_dir (default
   $XDG_CACHE_HOME/tensor or ~/.cache/tensor), keyed by source, architecture,
   options and NVRTC version. A corrupt entry is recompiled; entries are
   written atomically, so processes may share the directory. A cache_dir that
   cannot be used (a file, read-only, a failed write) is said once through
   the log (TN_LOG_WARN, with the reason) and kernels compile without it.

   Compiled functions: including this header registers the back end (a
   load-time constructor hooks tn_init), so with a usable GPU every
   tn_function places what the GPU can run there: elementwise and fused ops
   (NVRTC; a draw of a variable's shape inside the kernel that reads it),
   dot/gemm/gemv/outer/batched dot (cuBLAS, float16/32/64; TF32 only with
   allow_tf32=1; float32/64 gemv up to 2^19 elements by a kernel of our own,
   which also applies a fused elementwise epilogue, after cuBLAS's product
   past that size), reductions and softmax where the >>cuda_reduce section
   has a kernel (with a fused prologue, and an epilogue applied as each
   result is stored),
   Alloc, Join, scan loops (the step compiled for device arrays), custom ops
   with CUDA source, views wherever their input lives. Transfers
   are graph nodes (GpuFromHost, HostFromGpu: see debugprint); shared
   variables read only by GPU ops, or updated with a value computed on the
   GPU, move to device memory for good (tn_shared_get_value copies back).
   An output wrapped in tn_gpu_from_host() is returned as a device array; a
   copied host output is one cuMemcpyDtoHAsync into pinned memory (a cache of
   pinned blocks) that becomes the returned array, or up to 64 KiB a copy
   kernel writing that memory over the bus.
   Each compiled function queues its work on a stream of its own; switching
   from one function to another orders the new stream after everything queued
   before (the >>cuda_streams section), so results never depend on which
   stream ran what. A call waits only where a host result is copied back.

   CUDA graphs: a function whose steps all run on the GPU or copy between
   it and the host is captured as a CUDA graph the second time its kernels
   see the same pointers, and replayed from then on (tensor.h's >>replay
   section says exactly when); a scan's loop is captured whole. Its kernels
   form one chain; each copy follows only the steps whose memory it
   touches (tn_backend.replay_point and replay_follow, driver 12.3 or
   later).
   cuda_graph=0 turns this off; launch_blocking=1, mode=check and a trace
   (profile_trace) do too. A profiled function is replayed: one call in 128
   runs step by step to time its steps (tensor.h's >>profile section).
   mode=check runs each GPU op's CPU kernel on host copies of its inputs and
   fails the call with TN_ERR_CHECK at the first op whose outputs differ
   beyond the dtype's tolerance (tensor.h's >>check_mode section).

   State is per device (the >>cuda_state section): each opened ordinal has its
   own context, streams, memory pools, modules and cuBLAS handles (one per
   stream), so functions called from different threads overlap on the GPU,
   products included. Placement uses the configured device (device=cudaN),
   or a node's context (>>api_contexts in tensor.h): one function may span
   several GPUs, with GpuToGpu copies between them (>>cuda_peer).
   tn_function_replicate runs a training step data-parallel over several
   GPUs with NCCL (>>cuda_api_dp, >>cuda_replicate).

   What it does not do: several processes or nodes, MIG selection, Windows
   (no LoadLibrary path yet).
*/
#ifndef TENSOR_CUDA_H
#define TENSOR_CUDA_H

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* >>cuda_api -------------------------------------------------------------- */

/* Loads the libraries and opens the configured device (idempotent). TN_OK
   when the GPU will be used; otherwise TN_ERR_DEVICE with the reason, and
   the library keeps running on the CPU. */
TN_API tn_result tn_cuda_init(void);
TN_API bool tn_cuda_available(void);      /* tn_cuda_init() succeeded */
/* One line: the device in use ("cuda0: NVIDIA H100 (sm_90), driver 13.0,
   nvrtc 13.0, cublas 130000") or why the GPU is not used. */
TN_API const char *tn_cuda_status(void);
/* Most operands (inputs + outputs) one fused elementwise kernel accepts
   within the 4 KB launch parameter budget; the fusion pass splits wider groups. */
TN_API int tn_cuda_max_fused_operands(void);

typedef struct tn_cuda_cache_stats {
    uint64_t mem_hits;          /* served from the in-memory cache */
    uint64_t disk_hits;         /* loaded from cache_dir and verified */
    uint64_t disk_rejects;      /* entries found corrupt or truncated (then recompiled) */
    uint64_t compiles;          /* NVRTC compilations */
    uint64_t disk_writes;       /* entries written */
    uint64_t disk_reads;        /* files opened for reading */
} tn_cuda_cache_stats;
TN_API void tn_cuda_get_cache_stats(tn_cuda_cache_stats *out);
/* Full NVRTC log and numbered source of this thread's last failed compile ("" if none). */
TN_API const char *tn_cuda_last_compile_log(void);
/* The cubin of CUDA C `src` (kernels declared extern "C") for `arch`, e.g.
   "sm_90" (NULL: the device's), through the memory and disk caches; needs
   NVRTC but no GPU. *cubin stays valid until tn_shutdown(). */
TN_API tn_result tn_cuda_compile(const char *src, const char *arch, const void **cubin, size_t *size);

/* >>cuda_api_module: raw kernels, as PyCUDA's SourceModule (the >>cuda_module
   section). tn_cuda_module_new compiles CUDA C source once, through the
   kernel caches, after the prelude every user kernel gets (tn_half,
   load_w/write_w/work_dtype, tn_operand: the >>cuda_user section); kernels
   must be extern "C" __global__. options: NVRTC options spaces apart; an
   architecture there ("--gpu-architecture=sm_90") compiles without a GPU,
   otherwise the device's is used (none: TN_ERR_UNSUPPORTED). A compile error
   gives NVRTC's log (tn_cuda_last_compile_log()). tn_cuda_module_get finds a
   kernel by name on the configured device (TN_ERR_UNSUPPORTED without a GPU).
   tn_cuda_launch runs it on grid x block threads with n_args arguments, in
   the order of its parameters:
     tn_cuda_arg_in(a)     host array copied to the device first (drv.In); the
                           kernel gets a device pointer (a strided a is packed)
     tn_cuda_arg_out(a)    contiguous host array written back after (drv.Out)
     tn_cuda_arg_inout(a)  both (drv.InOut)
     tn_cuda_arg_device(a) an array on the device, its data pointer as is
     tn_cuda_arg_i32/_i64/_f32/_f64(v)   a scalar of the kernel's type
   It returns when the results are back on the host. Free the module (and
   its kernels) with tn_cuda_module_free. */
typedef struct tn_cuda_module tn_cuda_module;
typedef struct tn_cuda_kernel tn_cuda_kernel;
typedef enum {
    TN_CUDA_ARG_NONE = 0, TN_CUDA_ARG_IN, TN_CUDA_ARG_OUT, TN_CUDA_ARG_INOUT, TN_CUDA_ARG_DEVICE,
    TN_CUDA_ARG_I32, TN_CUDA_ARG_I64, TN_CUDA_ARG_F32, TN_CUDA_ARG_F64
} tn_cuda_arg_kind;
typedef struct tn_cuda_arg {
    tn_cuda_arg_kind kind;
    tn_array *array;
    union { int32_t i32; int64_t i64; float f32; double f64; } v;
} tn_cuda_arg;
typedef struct tn_cuda_dim3 { unsigned x, y, z; } tn_cuda_dim3;
#define TN_CUDA_MAX_ARGS 64
TN_API tn_cuda_module *tn_cuda_module_new(const char *src, const char *options);
TN_API tn_cuda_kernel *tn_cuda_module_get(tn_cuda_module *m, const char *name);
TN_API void tn_cuda_module_free(tn_cuda_module *m);
TN_API tn_result tn_cuda_launch(const tn_cuda_kernel *k, tn_cuda_dim3 grid, tn_cuda_dim3 block, unsigned shared_bytes,
                                int n_args, const tn_cuda_arg *args);
TN_API tn_cuda_arg tn_cuda_arg_in(const tn_array *a);
TN_API tn_cuda_arg tn_cuda_arg_out(tn_array *a);
TN_API tn_cuda_arg tn_cuda_arg_inout(tn_array *a);
TN_API tn_cuda_arg tn_cuda_arg_device(tn_array *a);
TN_API tn_cuda_arg tn_cuda_arg_i32(int32_t v);
TN_API tn_cuda_arg tn_cuda_arg_i64(int64_t v);
TN_API tn_cuda_arg tn_cuda_arg_f32(float v);
TN_API tn_cuda_arg tn_cuda_arg_f64(double v);

/* >>cuda_api_dp: data parallel over several GPUs (the >>cuda_replicate section).
   tn_function_replicate compiles one training step once per device: the
   shared variables are replicated (replica 0 uses the user's own, the others
   copies on their devices), the batch inputs are split along axis 0 (rows
   as even as can be), each replica computes its outputs and the listed
   gradients on its rows, the gradients are summed across replicas (NCCL's
   all-reduce on each device's stream; weighted by each replica's share of
   the rows when the cost is a mean), and every replica applies the same
   updates: the result is the one-device step on the whole batch up to float
   summation order. One process; under NCCL each replica past the first
   runs on a thread of its own (replica 0 on the caller's).
   Limits: the updates must read the batch only through the listed gradients
   (else replicas drift apart); graphs that name contexts are refused. */
typedef enum tn_allreduce {
    TN_ALLREDUCE_AUTO = 0,   /* NCCL between distinct GPUs; host memory on the CPU or when replicas share a GPU */
    TN_ALLREDUCE_NCCL,       /* NCCL, even for one replica (a 1-rank communicator); an error where it cannot */
    TN_ALLREDUCE_HOST        /* gradients summed in host memory (float64), in replica order */
} tn_allreduce;
typedef enum tn_combine {
    TN_COMBINE_AUTO = 0,     /* 0-d outputs as the gradients (MEAN, or SUM when .sum), others CONCAT */
    TN_COMBINE_MEAN,         /* weighted by each replica's share of the rows */
    TN_COMBINE_SUM,
    TN_COMBINE_CONCAT,       /* along axis 0, in replica order (per-row outputs: the whole batch's) */
    TN_COMBINE_FIRST         /* replica 0's */
} tn_combine;
typedef struct tn_replicate_desc {
    int n_replicas;                /* 0: one per visible GPU (1 without a GPU) */
    const char *const *contexts;   /* n_replicas context names (NULL: cuda0, cuda1, ...) */
    int n_grads;
    tn_var *const *grads;          /* the gradients the updates read; all-reduced in the middle of the step */
    bool sum;                      /* the cost is a sum over rows (default: a mean, so replicas weigh their share) */
    tn_allreduce allreduce;
    const bool *split;             /* per input: split along axis 0 (NULL: every input of ndim >= 1) */
    const tn_combine *combine;     /* per output (NULL: all TN_COMBINE_AUTO) */
} tn_replicate_desc;
typedef struct tn_replicated tn_replicated;
/* desc as for tn_function (its context is ignored: each replica has its own). */
TN_API tn_replicated *tn_function_replicate(tn_graph *g, const tn_func_desc *desc, const tn_replicate_desc *rd);
/* One step on the whole batch; outputs are new host arrays the caller frees.
   Under NCCL replicas past the first run on threads of r's own. One call on
   r at a time: a second concurrent caller gets TN_ERR_BUSY, nothing done.
   If a replica fails, none is updated and its error is returned. */
TN_API tn_result tn_replicated_call(tn_replicated *r, tn_array *const *inputs, tn_array **outputs);
TN_API void tn_replicated_free(tn_replicated *r);
TN_API int tn_replicated_count(const tn_replicated *r);
TN_API const char *tn_replicated_allreduce(const tn_replicated *r);   /* "nccl", "host" or "none" */
/* Replica k's copy of a shared variable the step uses (k 0: shared itself); NULL if none. */
TN_API tn_var *tn_replicated_shared(const tn_replicated *r, tn_var *shared, int replica);
/* Replica k's compiled halves (half 0: outputs and gradients, 1: updates, NULL if none), for debugprint. */
TN_API tn_func *tn_replicated_function(const tn_replicated *r, int replica, int half);

/* NCCL, loaded at run time (TN_LIBNCCL_PATH, the loader's path, $CUDA_PATH and
   /usr/local/cuda lib64 and lib, Python's site-packages/nvidia/nccl/lib):
   TN_OK, or TN_ERR_DEVICE saying where it looked. */
TN_API tn_result tn_nccl_load(void);
TN_API int tn_nccl_version(void);          /* 22703 for 2.27.3; 0 when not loaded */
/* Sums n device arrays in place, arrays[k] on the k-th of n distinct GPUs
   (same dtype and size, contiguous), each on its device's current stream;
   returns without waiting (benchmarks; the communicator is kept). */
TN_API tn_result tn_nccl_allreduce(int n, tn_array *const *arrays);

/* >>cuda_api_internal ----------------------------------------------------- */
/* Our own declarations of the few CUDA types and entry points we use, so no
   CUDA header is needed. The opaque handles use the SDK's struct tags and the
   enums the SDK's values (tests/test_cuda_decls.c checks both against the
   real headers). GCC and Clang give an enum without negative values the
   compatible type unsigned int, hence unsigned for those. */
typedef unsigned int tn__CUresult;
typedef int tn__CUdevice;
typedef unsigned long long tn__CUdeviceptr;
typedef unsigned int tn__CUdevice_attribute;
typedef unsigned int tn__CUfunction_attribute;
typedef unsigned int tn__CUstreamCaptureMode;
typedef unsigned int tn__CUstreamCaptureStatus;
typedef uint64_t tn__cuuint64_t;
typedef struct CUctx_st *tn__CUcontext;
typedef struct CUmod_st *tn__CUmodule;
typedef struct CUfunc_st *tn__CUfunction;
typedef struct CUstream_st *tn__CUstream;
typedef struct CUevent_st *tn__CUevent;
typedef struct CUgraph_st *tn__CUgraph;
typedef struct CUgraphExec_st *tn__CUgraphExec;
typedef struct CUgraphNode_st *tn__CUgraphNode;
typedef struct CUgraphEdgeData_st tn__CUgraphEdgeData;   /* only pointed to (NULL: plain edges) */

enum {
    TN__CUDA_SUCCESS = 0,
    TN__CUDA_ERROR_INVALID_VALUE = 1,
    TN__CUDA_ERROR_OUT_OF_MEMORY = 2,
    TN__CUDA_ERROR_NOT_INITIALIZED = 3,
    TN__CUDA_ERROR_STUB_LIBRARY = 34,
    TN__CUDA_ERROR_NO_DEVICE = 100,
    TN__CUDA_ERROR_INVALID_IMAGE = 200,
    TN__CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    TN__CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    TN__CU_MEMHOSTALLOC_PORTABLE = 1,
    TN__CU_MEMHOSTREGISTER_PORTABLE = 1,
    TN__CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    TN__CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    TN__CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    TN__CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
    TN__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    TN__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    TN__CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    TN__CU_STREAM_NON_BLOCKING = 1,
    TN__CU_EVENT_DEFAULT = 0,
    TN__CU_EVENT_DISABLE_TIMING = 2,
    TN__CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    TN__CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
    TN__CU_STREAM_SET_CAPTURE_DEPENDENCIES = 1
};

/* X(name, return type, parameter list, required) */
#define TN__CU_FUNCS(X) \
    X(cuInit, tn__CUresult, (unsigned int flags), 1) \
    X(cuDriverGetVersion, tn__CUresult, (int *version), 1) \
    X(cuGetErrorName, tn__CUresult, (tn__CUresult error, const char **str), 1) \
    X(cuGetErrorString, tn__CUresult, (tn__CUresult error, const char **str), 1) \
    X(cuDeviceGet, tn__CUresult, (tn__CUdevice *device, int ordinal), 1) \
    X(cuDeviceGetCount, tn__CUresult, (int *count), 1) \
    X(cuDeviceGetName, tn__CUresult, (char *name, int len, tn__CUdevice dev), 1) \
    X(cuDeviceGetAttribute, tn__CUresult, (int *pi, tn__CUdevice_attribute attrib, tn__CUdevice dev), 1) \
    X(cuDevicePrimaryCtxRetain, tn__CUresult, (tn__CUcontext *pctx, tn__CUdevice dev), 1) \
    X(cuDevicePrimaryCtxRelease_v2, tn__CUresult, (tn__CUdevice dev), 1) \
    X(cuCtxSetCurrent, tn__CUresult, (tn__CUcontext ctx), 1) \
    X(cuCtxGetCurrent, tn__CUresult, (tn__CUcontext *pctx), 1) \
    X(cuCtxSynchronize, tn__CUresult, (void), 1) \
    X(cuMemGetInfo_v2, tn__CUresult, (size_t *free_bytes, size_t *total_bytes), 1) \
    X(cuMemAlloc_v2, tn__CUresult, (tn__CUdeviceptr *dptr, size_t bytesize), 1) \
    X(cuMemFree_v2, tn__CUresult, (tn__CUdeviceptr dptr), 1) \
    X(cuMemAllocHost_v2, tn__CUresult, (void **pp, size_t bytesize), 1) \
    X(cuMemFreeHost, tn__CUresult, (void *p), 1) \
    X(cuMemcpyHtoDAsync_v2, tn__CUresult, (tn__CUdeviceptr dst, const void *src, size_t bytes, tn__CUstream stream), 1) \
    X(cuMemcpyDtoHAsync_v2, tn__CUresult, (void *dst, tn__CUdeviceptr src, size_t bytes, tn__CUstream stream), 1) \
    X(cuMemcpyDtoDAsync_v2, tn__CUresult, (tn__CUdeviceptr dst, tn__CUdeviceptr src, size_t bytes, tn__CUstream stream), 1) \
    X(cuMemsetD8Async, tn__CUresult, (tn__CUdeviceptr dst, unsigned char uc, size_t n, tn__CUstream stream), 1) \
    X(cuMemsetD16Async, tn__CUresult, (tn__CUdeviceptr dst, unsigned short us, size_t n, tn__CUstream stream), 1) \
    X(cuMemsetD32Async, tn__CUresult, (tn__CUdeviceptr dst, unsigned int ui, size_t n, tn__CUstream stream), 1) \
    X(cuMemsetD2D32Async, tn__CUresult, (tn__CUdeviceptr dst, size_t pitch, unsigned int ui, size_t width, size_t height, \
        tn__CUstream stream), 1) \
    X(cuStreamCreate, tn__CUresult, (tn__CUstream *stream, unsigned int flags), 1) \
    X(cuStreamSynchronize, tn__CUresult, (tn__CUstream stream), 1) \
    X(cuStreamDestroy_v2, tn__CUresult, (tn__CUstream stream), 1) \
    X(cuStreamWaitEvent, tn__CUresult, (tn__CUstream stream, tn__CUevent event, unsigned int flags), 1) \
    X(cuModuleLoadData, tn__CUresult, (tn__CUmodule *module, const void *image), 1) \
    X(cuModuleGetFunction, tn__CUresult, (tn__CUfunction *fn, tn__CUmodule module, const char *name), 1) \
    X(cuModuleUnload, tn__CUresult, (tn__CUmodule module), 1) \
    X(cuFuncGetAttribute, tn__CUresult, (int *pi, tn__CUfunction_attribute attrib, tn__CUfunction fn), 1) \
    X(cuLaunchKernel, tn__CUresult, (tn__CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, \
        unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes, tn__CUstream stream, \
        void **params, void **extra), 1) \
    X(cuEventCreate, tn__CUresult, (tn__CUevent *event, unsigned int flags), 1) \
    X(cuEventRecord, tn__CUresult, (tn__CUevent event, tn__CUstream stream), 1) \
    X(cuEventSynchronize, tn__CUresult, (tn__CUevent event), 1) \
    X(cuEventElapsedTime, tn__CUresult, (float *ms, tn__CUevent start, tn__CUevent end), 1) \
    X(cuEventDestroy_v2, tn__CUresult, (tn__CUevent event), 1) \
    X(cuStreamBeginCapture_v2, tn__CUresult, (tn__CUstream stream, tn__CUstreamCaptureMode mode), 1) \
    X(cuStreamEndCapture, tn__CUresult, (tn__CUstream stream, tn__CUgraph *graph), 1) \
    X(cuGraphInstantiateWithFlags, tn__CUresult, (tn__CUgraphExec *exec, tn__CUgraph graph, unsigned long long flags), 1) \
    X(cuGraphLaunch, tn__CUresult, (tn__CUgraphExec exec, tn__CUstream stream), 1) \
    X(cuGraphExecDestroy, tn__CUresult, (tn__CUgraphExec exec), 1) \
    X(cuGraphDestroy, tn__CUresult, (tn__CUgraph graph), 1) \
    X(cuStreamGetCaptureInfo_v3, tn__CUresult, (tn__CUstream stream, tn__CUstreamCaptureStatus *status, tn__cuuint64_t *id, \
        tn__CUgraph *graph, const tn__CUgraphNode **deps, const tn__CUgraphEdgeData **edges, size_t *n), 0) \
    X(cuStreamUpdateCaptureDependencies_v2, tn__CUresult, (tn__CUstream stream, tn__CUgraphNode *deps, \
        const tn__CUgraphEdgeData *edges, size_t n, unsigned int flags), 0) \
    X(cuDeviceCanAccessPeer, tn__CUresult, (int *can, tn__CUdevice dev, tn__CUdevice peer), 0) \
    X(cuCtxEnablePeerAccess, tn__CUresult, (tn__CUcontext peer, unsigned int flags), 0) \
    X(cuMemcpyPeerAsync, tn__CUresult, (tn__CUdeviceptr dst, tn__CUcontext dst_ctx, tn__CUdeviceptr src, \
        tn__CUcontext src_ctx, size_t bytes, tn__CUstream stream), 0) \
    X(cuMemHostAlloc, tn__CUresult, (void **pp, size_t bytes, unsigned int flags), 0) \
    X(cuMemHostRegister_v2, tn__CUresult, (void *p, size_t bytes, unsigned int flags), 0) \
    X(cuMemHostUnregister, tn__CUresult, (void *p), 0) \
    X(cuMemHostGetFlags, tn__CUresult, (unsigned int *flags, void *p), 0)

typedef unsigned int tn__nvrtcResult;
typedef struct _nvrtcProgram *tn__nvrtcProgram;
enum { TN__NVRTC_SUCCESS = 0, TN__NVRTC_ERROR_COMPILATION = 6 };

#define TN__NVRTC_FUNCS(X) \
    X(nvrtcVersion, tn__nvrtcResult, (int *major, int *minor), 1) \
    X(nvrtcGetErrorString, const char *, (tn__nvrtcResult result), 1) \
    X(nvrtcCreateProgram, tn__nvrtcResult, (tn__nvrtcProgram *prog, const char *src, const char *name, \
        int num_headers, const char *const *headers, const char *const *include_names), 1) \
    X(nvrtcCompileProgram, tn__nvrtcResult, (tn__nvrtcProgram prog, int num_options, const char *const *options), 1) \
    X(nvrtcGetProgramLogSize, tn__nvrtcResult, (tn__nvrtcProgram prog, size_t *size), 1) \
    X(nvrtcGetProgramLog, tn__nvrtcResult, (tn__nvrtcProgram prog, char *log), 1) \
    X(nvrtcGetCUBINSize, tn__nvrtcResult, (tn__nvrtcProgram prog, size_t *size), 1) \
    X(nvrtcGetCUBIN, tn__nvrtcResult, (tn__nvrtcProgram prog, char *cubin), 1) \
    X(nvrtcDestroyProgram, tn__nvrtcResult, (tn__nvrtcProgram *prog), 1)

typedef unsigned int tn__cublasStatus_t;
typedef struct cublasContext *tn__cublasHandle_t;
typedef unsigned int tn__cublasOperation_t;
typedef unsigned int tn__cublasMath_t;
typedef unsigned int tn__cudaDataType;
typedef unsigned int tn__cublasComputeType_t;
typedef int tn__cublasGemmAlgo_t;
enum {
    TN__CUBLAS_STATUS_SUCCESS = 0,
    TN__CUBLAS_OP_N = 0,
    TN__CUBLAS_OP_T = 1,
    TN__CUBLAS_DEFAULT_MATH = 0,
    TN__CUBLAS_PEDANTIC_MATH = 2,
    TN__CUBLAS_TF32_TENSOR_OP_MATH = 3,
    TN__CUDA_R_32F = 0,
    TN__CUDA_R_64F = 1,
    TN__CUDA_R_16F = 2,
    TN__CUBLAS_COMPUTE_32F = 68,
    TN__CUBLAS_COMPUTE_64F = 70,
    TN__CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    TN__CUBLAS_GEMM_DEFAULT = -1
};

#define TN__CUBLAS_FUNCS(X) \
    X(cublasCreate_v2, tn__cublasStatus_t, (tn__cublasHandle_t *handle), 1) \
    X(cublasDestroy_v2, tn__cublasStatus_t, (tn__cublasHandle_t handle), 1) \
    X(cublasSetStream_v2, tn__cublasStatus_t, (tn__cublasHandle_t handle, tn__CUstream stream), 1) \
    X(cublasSetMathMode, tn__cublasStatus_t, (tn__cublasHandle_t handle, tn__cublasMath_t mode), 1) \
    X(cublasGetStatusString, const char *, (tn__cublasStatus_t status), 0) \
    X(cublasGetProperty, tn__cublasStatus_t, (unsigned int type, int *value), 0) \
    X(cublasSetWorkspace_v2, tn__cublasStatus_t, (tn__cublasHandle_t handle, void *workspace, size_t bytes), 0) \
    X(cublasSgemm_v2, tn__cublasStatus_t, (tn__cublasHandle_t handle, tn__cublasOperation_t ta, tn__cublasOperation_t tb, \
        int m, int n, int k, const float *alpha, const float *A, int lda, const float *B, int ldb, \
        const float *beta, float *C, int ldc), 1) \
    X(cublasDgemm_v2, tn__cublasStatus_t, (tn__cublasHandle_t handle, tn__cublasOperation_t ta, tn__cublasOperation_t tb, \
        int m, int n, int k, const double *alpha, const double *A, int lda, const double *B, int ldb, \
        const double *beta, double *C, int ldc), 1) \
    X(cublasSgemv_v2, tn__cublasStatus_t, (tn__cublasHandle_t handle, tn__cublasOperation_t trans, int m, int n, \
        const float *alpha, const float *A, int lda, const float *x, int incx, const float *beta, float *y, int incy), 1) \
    X(cublasDgemv_v2, tn__cublasStatus_t, (tn__cublasHandle_t handle, tn__cublasOperation_t trans, int m, int n, \
        const double *alpha, const double *A, int lda, const double *x, int incx, const double *beta, double *y, int incy), 1) \
    X(cublasGemmEx, tn__cublasStatus_t, (tn__cublasHandle_t handle, tn__cublasOperation_t ta, tn__cublasOperation_t tb, \
        int m, int n, int k, const void *alpha, const void *A, tn__cudaDataType Atype, int lda, \
        const void *B, tn__cudaDataType Btype, int ldb, const void *beta, void *C, tn__cudaDataType Ctype, int ldc, \
        tn__cublasComputeType_t compute, tn__cublasGemmAlgo_t algo), 1) \
    X(cublasSgemmStridedBatched, tn__cublasStatus_t, (tn__cublasHandle_t handle, tn__cublasOperation_t ta, \
        tn__cublasOperation_t tb, int m, int n, int k, const float *alpha, const float *A, int lda, long long sA, \
        const float *B, int ldb, long long sB, const float *beta, float *C, int ldc, long long sC, int batch), 1) \
    X(cublasDgemmStridedBatched, tn__cublasStatus_t, (tn__cublasHandle_t handle, tn__cublasOperation_t ta, \
        tn__cublasOperation_t tb, int m, int n, int k, const double *alpha, const double *A, int lda, long long sA, \
        const double *B, int ldb, long long sB, const double *beta, double *C, int ldc, long long sC, int batch), 1)

/* cuBLASLt (>>cuda_lt): a product with an addend other than its output. The
   descriptors are ours (the *Init_internal entry points fill memory we own,
   as cublasLt.h's inline *Init functions do), so none outlives the library. */
typedef void *tn__cublasLtHandle_t;
typedef struct tn__ltDesc { uint64_t data[32]; } tn__ltDesc;
typedef struct tn__ltLayout { uint64_t data[8]; } tn__ltLayout;
typedef struct tn__ltPref { uint64_t data[8]; } tn__ltPref;
typedef struct tn__ltAlgo { uint64_t data[8]; } tn__ltAlgo;
typedef struct tn__ltHeuristic { tn__ltAlgo algo; size_t workspaceSize; tn__cublasStatus_t state; float wavesCount; int reserved[4]; } tn__ltHeuristic;
enum {
    TN__LT_DESC_TRANSA = 3, TN__LT_DESC_TRANSB = 4, TN__LT_DESC_EPILOGUE = 7, TN__LT_DESC_BIAS_POINTER = 8,
    TN__LT_EPILOGUE_DEFAULT = 1, TN__LT_EPILOGUE_BIAS = 4,
    TN__LT_PREF_MAX_WORKSPACE_BYTES = 1
};
#define TN__CUBLASLT_FUNCS(X) \
    X(cublasLtCreate, tn__cublasStatus_t, (tn__cublasLtHandle_t *handle), 1) \
    X(cublasLtDestroy, tn__cublasStatus_t, (tn__cublasLtHandle_t handle), 1) \
    X(cublasLtMatmulDescInit_internal, tn__cublasStatus_t, (tn__ltDesc *desc, size_t size, tn__cublasComputeType_t compute, \
        tn__cudaDataType scale), 1) \
    X(cublasLtMatmulDescSetAttribute, tn__cublasStatus_t, (tn__ltDesc *desc, int attr, const void *buf, size_t size), 1) \
    X(cublasLtMatrixLayoutInit_internal, tn__cublasStatus_t, (tn__ltLayout *layout, size_t size, tn__cudaDataType type, \
        uint64_t rows, uint64_t cols, int64_t ld), 1) \
    X(cublasLtMatmulPreferenceInit_internal, tn__cublasStatus_t, (tn__ltPref *pref, size_t size), 1) \
    X(cublasLtMatmulPreferenceSetAttribute, tn__cublasStatus_t, (tn__ltPref *pref, int attr, const void *buf, size_t size), 1) \
    X(cublasLtMatmulAlgoGetHeuristic, tn__cublasStatus_t, (tn__cublasLtHandle_t handle, tn__ltDesc *op, tn__ltLayout *a, \
        tn__ltLayout *b, tn__ltLayout *c, tn__ltLayout *d, tn__ltPref *pref, int requested, tn__ltHeuristic *results, \
        int *returned), 1) \
    X(cublasLtMatmul, tn__cublasStatus_t, (tn__cublasLtHandle_t handle, tn__ltDesc *op, const void *alpha, const void *A, \
        tn__ltLayout *a, const void *B, tn__ltLayout *b, const void *beta, const void *C, tn__ltLayout *c, void *D, \
        tn__ltLayout *d, const tn__ltAlgo *algo, void *workspace, size_t workspace_bytes, tn__CUstream stream), 1)

/* NCCL (>>cuda_nccl): enums without negative values are unsigned (as above). */
typedef unsigned int tn__ncclResult_t;
typedef unsigned int tn__ncclDataType_t;
typedef unsigned int tn__ncclRedOp_t;
typedef struct ncclComm *tn__ncclComm_t;
enum {
    TN__NCCL_SUCCESS = 0,
    TN__NCCL_SUM = 0,
    TN__NCCL_INT32 = 2, TN__NCCL_INT64 = 4, TN__NCCL_FLOAT16 = 6, TN__NCCL_FLOAT32 = 7, TN__NCCL_FLOAT64 = 8
};
#define TN__NCCL_FUNCS(X) \
    X(ncclGetVersion, tn__ncclResult_t, (int *version), 1) \
    X(ncclGetErrorString, const char *, (tn__ncclResult_t result), 1) \
    X(ncclCommInitAll, tn__ncclResult_t, (tn__ncclComm_t *comms, int ndev, const int *devlist), 1) \
    X(ncclCommDestroy, tn__ncclResult_t, (tn__ncclComm_t comm), 1) \
    X(ncclAllReduce, tn__ncclResult_t, (const void *sendbuff, void *recvbuff, size_t count, tn__ncclDataType_t datatype, \
        tn__ncclRedOp_t op, tn__ncclComm_t comm, tn__CUstream stream), 1) \
    X(ncclGroupStart, tn__ncclResult_t, (void), 1) \
    X(ncclGroupEnd, tn__ncclResult_t, (void), 1) \
    X(ncclGetLastError, const char *, (tn__ncclComm_t comm), 0)

#define TN__X_PFN(name, ret, args, req) typedef ret (*tn__PFN_##name) args;
TN__CU_FUNCS(TN__X_PFN)
TN__NCCL_FUNCS(TN__X_PFN)
TN__NVRTC_FUNCS(TN__X_PFN)
TN__CUBLAS_FUNCS(TN__X_PFN)
TN__CUBLASLT_FUNCS(TN__X_PFN)
#undef TN__X_PFN

/* Waits for the calling thread's current stream (tests and benchmarks; the
   executor never waits on it). */
TN_API tn_result tn__cuda_synchronize(void);
/* Tests: on, the pooling kernels take their 64-bit index paths whatever the
   sizes (which otherwise only inputs of 2^31 elements and more reach). */
TN_API void tn__cuda_pool_wide_index(bool on);

#ifdef __cplusplus
}
#endif
#endif /* TENSOR_CUDA_H */

/* >>cuda_implementation ==================================================== */
#if defined(TENSOR_IMPLEMENTATION) && !defined(TENSOR_CUDA_IMPLEMENTATION_DONE)
#define TENSOR_CUDA_IMPLEMENTATION_DONE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
TN__CXX_BEGIN   /* C++: tensor.h's >>cxx section */

/* >>cuda_loader: dlopen of the driver, NVRTC and cuBLAS --------------------- */

#define TN__X_FIELD(name, ret, args, req) tn__PFN_##name name;
typedef struct tn__cu_api { TN__CU_FUNCS(TN__X_FIELD) } tn__cu_api;
typedef struct tn__nvrtc_api { TN__NVRTC_FUNCS(TN__X_FIELD) } tn__nvrtc_api;
typedef struct tn__cublas_api { TN__CUBLAS_FUNCS(TN__X_FIELD) } tn__cublas_api;
typedef struct tn__cublaslt_api { TN__CUBLASLT_FUNCS(TN__X_FIELD) } tn__cublaslt_api;
typedef struct tn__nccl_api { TN__NCCL_FUNCS(TN__X_FIELD) } tn__nccl_api;
#undef TN__X_FIELD

/* Copies with truncation (snprintf "%s" trips -Wformat-truncation). */
static void tn__strlcpy(char *dst, const char *src, size_t cap) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

/* Opens the first of names[] found: under the cuda_root flag's lib64, then
   through the loader's search path, then under $CUDA_PATH/lib64 and
   /usr/local/cuda/lib64. An env override is the only file tried. */
static void *tn__dlopen_first(const char *env_override, const char *const *names, int n_names,
                              char *found, size_t found_cap) {
    const char *over = env_override ? getenv(env_override) : NULL;
    if (over && *over) {
        void *h = dlopen(over, RTLD_NOW | RTLD_LOCAL);
        if (h) tn__strlcpy(found, over, found_cap);
        return h;
    }
    const char *roots[4] = { tn_get_config()->cuda_root, NULL, getenv("CUDA_PATH"), "/usr/local/cuda" };
    for (int i = 0; i < n_names; i++) {
        for (int r = 0; r < 4; r++) {
            if (r != 1 && !(roots[r] && *roots[r])) continue;
            tn__sb path = TN__SB_INIT;   /* allocated: a root of any length is tried whole */
            if (r == 1) tn__sb_puts(&path, names[i]);
            else tn__sb_printf(&path, "%s/lib64/%s", roots[r], names[i]);
            void *h = path.oom ? NULL : dlopen(path.s, RTLD_NOW | RTLD_LOCAL);
            if (h) tn__strlcpy(found, path.s, found_cap);
            tn__free(path.s);
            if (h) return h;
        }
    }
    return NULL;
}

/* Resolves every symbol of a table; NULL on success, else the first required
   symbol that is missing. */
static void *tn__dlsym_ptr(void *h, const char *name) { return dlsym(h, name); }
#define TN__X_SYM(name, ret, args, req) { \
        void *s_ = tn__dlsym_ptr(h, #name); \
        memcpy(&api->name, &s_, sizeof s_); \
        if (!s_ && (req) && !missing) missing = #name; }
static const char *tn__cu_syms(void *h, tn__cu_api *api) { const char *missing = NULL; TN__CU_FUNCS(TN__X_SYM) return missing; }
static const char *tn__nvrtc_syms(void *h, tn__nvrtc_api *api) { const char *missing = NULL; TN__NVRTC_FUNCS(TN__X_SYM) return missing; }
static const char *tn__cublas_syms(void *h, tn__cublas_api *api) { const char *missing = NULL; TN__CUBLAS_FUNCS(TN__X_SYM) return missing; }
static const char *tn__cublaslt_syms(void *h, tn__cublaslt_api *api) { const char *missing = NULL; TN__CUBLASLT_FUNCS(TN__X_SYM) return missing; }
static const char *tn__nccl_syms(void *h, tn__nccl_api *api) { const char *missing = NULL; TN__NCCL_FUNCS(TN__X_SYM) return missing; }
#undef TN__X_SYM

/* >>cuda_state ------------------------------------------------------------- */
/* Process-wide (tn__cuda, the loader): the dlopen'ed driver and cuBLAS APIs,
   the driver version, the configured ordinal (device=cudaN: where placement
   puts work) and the table of opened devices. Per device (tn__cuda_dev, one
   per opened ordinal, reached with tn__cuda_dev_get): its context, properties,
   home stream, function-stream pool, memory pools, loaded modules, pinned
   stage and copy kernels. Code finds the device from the array or node it
   works on (its `device` ordinal), or from the function being called. */

#define TN__CUDA_MAX_DEVICES 64

struct tn__cuda_dev;
/* A stream and what is bound to it: the function streams (>>cuda_streams) and
   each device's home stream. cuBLAS gets one handle per stream, made at the
   first product there, set to this stream for good with a workspace of its
   own, so products on different streams never share a handle or a workspace. */
typedef struct tn__cuda_fstream {
    struct tn__cuda_dev *dev;
    tn__CUstream s;
    tn__CUevent ev;
    tn__cublasHandle_t blas;    /* NULL until the first product (__atomic: made under dev->mu) */
    void *blas_ws;              /* its workspace (device memory of dev), cuBLASLt's too */
    size_t blas_ws_bytes;
    tn__cublasLtHandle_t lt;    /* made with blas when cuBLASLt loaded, else NULL */
    struct tn__cuda_fstream *next;
} tn__cuda_fstream;

/* Pools of the >>cuda_memory section, one set per device. */
typedef struct tn__dblock {
    tn__CUdeviceptr ptr;
    size_t size;
    struct tn__dblock *next;
    tn__CUstream stream;        /* freed on it (cached blocks) */
    tn__CUevent ev;             /* orders another stream's reuse: made and recorded then */
} tn__dblock;
#define TN__DMAP_BUCKETS 1024
typedef struct tn__cuda_dmem {
    pthread_mutex_t mu;
    tn__dblock *live[TN__DMAP_BUCKETS];     /* by pointer */
    tn__dblock *free_list;                  /* cached blocks, any size */
    size_t cached_bytes, live_bytes;
    uint64_t driver_allocs;
} tn__cuda_dmem;

typedef struct tn__hblock { void *ptr; size_t size; struct tn__hblock *next; } tn__hblock;
#define TN__HMEM_BUCKETS 64
typedef struct tn__cuda_hmem {
    pthread_mutex_t mu;
    tn__hblock *bucket[TN__HMEM_BUCKETS];   /* cached blocks, by rounded size */
    tn__hblock *spare;                      /* unused list nodes: no malloc per free */
    size_t cached_bytes, live_bytes;
    uint64_t driver_allocs;
} tn__cuda_hmem;

/* A module is loaded per context: the kernel cache (>>cuda_cache) holds
   cubins for the process, each device its modules and functions of them. */
typedef struct tn__kmod {
    const void *entry;          /* the tn__kentry */
    char *name;
    tn__CUmodule mod;
    tn__CUfunction fn;
    bool owns_mod;              /* loaded it (other names of the entry share it) */
    struct tn__kmod *next;
} tn__kmod;
#define TN__KMOD_BUCKETS 256

typedef struct tn__cuda_dev {
    int ordinal;
    tn__CUdevice dev;
    tn__CUcontext ctx;
    int cc_major, cc_minor, sm_count, max_threads;
    char name[128];
    char arch[16];              /* "sm_90" */
    pthread_mutex_t mu;         /* spare_streams; making cuBLAS handles */
    tn__cuda_fstream home;      /* the device's own stream (a thread's work outside compiled functions) */
    tn__cuda_fstream *spare_streams;   /* freed functions' streams, reused */
    tn__cuda_dmem dmem;
    tn__cuda_hmem hmem;
    struct { pthread_mutex_t mu; tn__kmod *bucket[TN__KMOD_BUCKETS]; } kmod;
    struct { pthread_mutex_t mu; void *pin; size_t cap; } stage;   /* device-to-host copies into pageable memory */
    pthread_mutex_t aux_mu;
    struct tn__cuda_aux *aux;   /* identity and add kernels (>>cuda_copy), made on first use (aux_mu) */
} tn__cuda_dev;

typedef struct tn__cuda_loader {
    pthread_mutex_t mu;
    int state;                  /* 0 not tried, 1 usable, -1 not usable */
    char status[768];
    void *h_cuda;
    tn__cu_api cu;
    int driver_version;         /* 13000 for 13.0 */
    int device_count;
    int ordinal;                /* the configured device: placement's target */
    TN__ATOMIC(uint_fast64_t) epoch; /* bumped by tn_shutdown: threads forget their current streams */
    tn__cuda_dev *dev[TN__CUDA_MAX_DEVICES];   /* opened devices (__atomic; set once under mu) */
    /* cuBLAS: loaded on first use */
    int cublas_state;           /* 0 not tried, 1 ok, -1 missing (__atomic) */
    void *h_cublas;
    tn__cublas_api blas;
    char cublas_path[256];
    void *h_cublaslt;           /* cuBLASLt, loaded with cuBLAS when it can be (optional: products fall back to cuBLAS) */
    tn__cublaslt_api lt;
} tn__cuda_loader;
static tn__cuda_loader tn__cuda = { .mu = PTHREAD_MUTEX_INITIALIZER };

typedef struct tn__nvrtc_state {
    pthread_mutex_t mu;
    int state;                  /* 0 not tried, 1 loaded, -1 missing */
    void *h;
    tn__nvrtc_api api;
    int major, minor;
    char path[256];
    char why[256];
} tn__nvrtc_state;
static tn__nvrtc_state tn__nvrtc = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* Loads NVRTC once. prefer_major (the driver's CUDA major, 0 unknown) is
   tried first: a cubin from a newer NVRTC may not load in an older driver. */
static tn_result tn__nvrtc_load(int prefer_major) {
    pthread_mutex_lock(&tn__nvrtc.mu);
    if (tn__nvrtc.state == 0) {
        char pref[32];
        snprintf(pref, sizeof pref, "libnvrtc.so.%d", prefer_major);
        const char *names[6];
        int n = 0;
        if (prefer_major > 0) names[n++] = pref;
        names[n++] = "libnvrtc.so.13";
        names[n++] = "libnvrtc.so.12";
        names[n++] = "libnvrtc.so";
        names[n++] = "libnvrtc.so.11.2";     /* CUDA 11.x (Debian's libnvrtc11.2) */
        tn__nvrtc.h = tn__dlopen_first("TN_LIBNVRTC_PATH", names, n, tn__nvrtc.path, sizeof tn__nvrtc.path);
        const char *missing = NULL;
        if (!tn__nvrtc.h) {
            snprintf(tn__nvrtc.why, sizeof tn__nvrtc.why,
                     "NVRTC (libnvrtc.so.13 or .12) was not found; install the CUDA toolkit's NVRTC, or set CUDA_PATH or TN_LIBNVRTC_PATH");
        } else if ((missing = tn__nvrtc_syms(tn__nvrtc.h, &tn__nvrtc.api)) != NULL) {
            snprintf(tn__nvrtc.why, sizeof tn__nvrtc.why, "%.200s lacks %.40s", tn__nvrtc.path, missing);
            dlclose(tn__nvrtc.h);
            tn__nvrtc.h = NULL;
        } else if (tn__nvrtc.api.nvrtcVersion(&tn__nvrtc.major, &tn__nvrtc.minor) != TN__NVRTC_SUCCESS) {
            snprintf(tn__nvrtc.why, sizeof tn__nvrtc.why, "nvrtcVersion failed in %.200s", tn__nvrtc.path);
        }
        tn__nvrtc.state = tn__nvrtc.why[0] ? -1 : 1;
    }
    int st = tn__nvrtc.state;
    pthread_mutex_unlock(&tn__nvrtc.mu);
    return st > 0 ? TN_OK : tn__err(TN_ERR_DEVICE, "%s", tn__nvrtc.why);
}

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" from the driver, or the number. */
static const char *tn__cu_errstr(tn__CUresult r, char *buf, size_t cap) {
    const char *name = NULL, *desc = NULL;
    if (tn__cuda.cu.cuGetErrorName && tn__cuda.cu.cuGetErrorName(r, &name) != TN__CUDA_SUCCESS) name = NULL;
    if (tn__cuda.cu.cuGetErrorString && tn__cuda.cu.cuGetErrorString(r, &desc) != TN__CUDA_SUCCESS) desc = NULL;
    if (!name) {
        switch (r) {   /* the driver cannot name errors before it works (stub library) */
        case TN__CUDA_ERROR_STUB_LIBRARY: name = "CUDA_ERROR_STUB_LIBRARY"; desc = "the CUDA driver is a stub library, not a real driver"; break;
        case TN__CUDA_ERROR_NO_DEVICE: name = "CUDA_ERROR_NO_DEVICE"; desc = "no CUDA-capable device is detected"; break;
        case TN__CUDA_ERROR_NOT_INITIALIZED: name = "CUDA_ERROR_NOT_INITIALIZED"; break;
        case TN__CUDA_ERROR_OUT_OF_MEMORY: name = "CUDA_ERROR_OUT_OF_MEMORY"; desc = "out of memory"; break;
        default: break;
        }
    }
    if (name && desc) snprintf(buf, cap, "%s (%s)", name, desc);
    else if (name) snprintf(buf, cap, "%s", name);
    else snprintf(buf, cap, "CUresult %u", r);
    return buf;
}

/* Reports a failed driver call: names the call, what it was for, file:line. */
#define TN__CU_CHECK(call, what) do { \
        tn__CUresult r_ = (call); \
        if (r_ != TN__CUDA_SUCCESS) { \
            char eb_[160]; \
            return tn__err(r_ == TN__CUDA_ERROR_OUT_OF_MEMORY ? TN_ERR_OOM : TN_ERR_DEVICE, \
                           "%s failed in %s (%s:%d): %s", #call, (what), __FILE__, __LINE__, \
                           tn__cu_errstr(r_, eb_, sizeof eb_)); } } while (0)

/* >>cuda_init: device selection --------------------------------------------- */

#define TN__CUDA_MIN_DRIVER 11040   /* cuGraphInstantiateWithFlags, cuStreamBeginCapture_v2 */

static void tn__cuda_shutdown(void);
static void tn__cuda_register_backend(void);

/* The context this thread has current (tn__cuda_bind). */
static TN__THREAD_LOCAL tn__CUcontext tn__cuda_bound;

/* Opens device `ordinal` (its primary context and home stream) into
   tn__cuda.dev[]. Called with tn__cuda.mu held, the driver loaded. Returns
   NULL with the reason in why on failure. */
static tn__cuda_dev *tn__cuda_dev_open(int ordinal, char *why, size_t cap) {
    tn__cuda_loader *c = &tn__cuda;
    char eb[160];
    if (ordinal < 0 || ordinal >= c->device_count || ordinal >= TN__CUDA_MAX_DEVICES) {
        snprintf(why, cap, "device=cuda%d asked for, but there %s only %d CUDA device%s", ordinal,
                 c->device_count == 1 ? "is" : "are", c->device_count, c->device_count == 1 ? "" : "s");
        return NULL;
    }
    if (c->dev[ordinal]) return c->dev[ordinal];
    tn__cuda_dev *D = (tn__cuda_dev *)tn__calloc(1, sizeof *D);
    if (!D) { snprintf(why, cap, "out of memory for the device's state"); return NULL; }
    D->ordinal = ordinal;
    tn__CUresult r;
    if ((r = c->cu.cuDeviceGet(&D->dev, ordinal)) != TN__CUDA_SUCCESS) {
        snprintf(why, cap, "cuDeviceGet(%d) failed: %s", ordinal, tn__cu_errstr(r, eb, sizeof eb));
        tn__free(D);
        return NULL;
    }
    c->cu.cuDeviceGetName(D->name, (int)sizeof D->name, D->dev);
    c->cu.cuDeviceGetAttribute(&D->cc_major, TN__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, D->dev);
    c->cu.cuDeviceGetAttribute(&D->cc_minor, TN__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, D->dev);
    c->cu.cuDeviceGetAttribute(&D->sm_count, TN__CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, D->dev);
    c->cu.cuDeviceGetAttribute(&D->max_threads, TN__CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, D->dev);
    snprintf(D->arch, sizeof D->arch, "sm_%d%d", D->cc_major, D->cc_minor);
    if ((r = c->cu.cuDevicePrimaryCtxRetain(&D->ctx, D->dev)) != TN__CUDA_SUCCESS) {
        snprintf(why, cap, "cuDevicePrimaryCtxRetain failed: %s", tn__cu_errstr(r, eb, sizeof eb));
        tn__free(D);
        return NULL;
    }
    tn__cuda_bound = NULL;      /* the current context changes here */
    if ((r = c->cu.cuCtxSetCurrent(D->ctx)) != TN__CUDA_SUCCESS ||
        (r = c->cu.cuStreamCreate(&D->home.s, TN__CU_STREAM_NON_BLOCKING)) != TN__CUDA_SUCCESS) {
        snprintf(why, cap, "creating the context's stream failed: %s", tn__cu_errstr(r, eb, sizeof eb));
        c->cu.cuDevicePrimaryCtxRelease_v2(D->dev);
        tn__free(D);
        return NULL;
    }
    if ((r = c->cu.cuEventCreate(&D->home.ev, TN__CU_EVENT_DISABLE_TIMING)) != TN__CUDA_SUCCESS) {
        snprintf(why, cap, "creating the home stream's event failed: %s", tn__cu_errstr(r, eb, sizeof eb));
        c->cu.cuStreamDestroy_v2(D->home.s);
        c->cu.cuDevicePrimaryCtxRelease_v2(D->dev);
        tn__free(D);
        return NULL;
    }
    tn__cuda_bound = D->ctx;
    D->home.dev = D;
    pthread_mutex_init(&D->mu, NULL);
    pthread_mutex_init(&D->dmem.mu, NULL);
    pthread_mutex_init(&D->hmem.mu, NULL);
    pthread_mutex_init(&D->kmod.mu, NULL);
    pthread_mutex_init(&D->stage.mu, NULL);
    pthread_mutex_init(&D->aux_mu, NULL);
    __atomic_store_n(&c->dev[ordinal], D, __ATOMIC_RELEASE);
    return D;
}

/* Loads the driver and NVRTC and opens the configured device; fills
   tn__cuda.status either way. Called with tn__cuda.mu held. Returns the
   reason text on failure, NULL on success. */
static const char *tn__cuda_open(const tn_config *cfg, char *why, size_t cap) {
    tn__cuda_loader *c = &tn__cuda;
    char path[256], eb[160];
    const char *libcuda[] = { "libcuda.so.1", "libcuda.so" };
    if (!c->h_cuda) {
        c->h_cuda = tn__dlopen_first("TN_LIBCUDA_PATH", libcuda, 2, path, sizeof path);
        if (!c->h_cuda) {
            snprintf(why, cap, "libcuda.so.1 was not found (no NVIDIA driver)");
            return why;
        }
        const char *missing = tn__cu_syms(c->h_cuda, &c->cu);
        if (missing) {
            snprintf(why, cap, "%s lacks %s (NVIDIA driver too old: tensor.h needs CUDA 11.4 or newer)", path, missing);
            return why;
        }
    }
    tn__CUresult r = c->cu.cuInit(0);
    if (r != TN__CUDA_SUCCESS) {
        snprintf(why, cap, "cuInit failed: %s", tn__cu_errstr(r, eb, sizeof eb));
        return why;
    }
    if (c->cu.cuDriverGetVersion(&c->driver_version) != TN__CUDA_SUCCESS) c->driver_version = 0;
    if (c->driver_version < TN__CUDA_MIN_DRIVER) {
        snprintf(why, cap, "the NVIDIA driver supports CUDA %d.%d; tensor.h needs 11.4 or newer",
                 c->driver_version / 1000, c->driver_version % 1000 / 10);
        return why;
    }
    int count = 0;
    r = c->cu.cuDeviceGetCount(&count);
    if (r != TN__CUDA_SUCCESS || count == 0) {
        snprintf(why, cap, "no CUDA device was found%s%s", r ? ": " : "", r ? tn__cu_errstr(r, eb, sizeof eb) : "");
        return why;
    }
    c->device_count = count;
    c->ordinal = cfg->device == TN_DEVICE_CUDA ? cfg->device_ordinal : 0;
    if (c->ordinal >= count) {
        snprintf(why, cap, "device=cuda%d asked for, but there %s only %d CUDA device%s", c->ordinal,
                 count == 1 ? "is" : "are", count, count == 1 ? "" : "s");
        return why;
    }
    if (tn__nvrtc_load(c->driver_version / 1000) != TN_OK) {
        snprintf(why, cap, "%s", tn__nvrtc.why);
        return why;
    }
    if (tn__nvrtc.major > c->driver_version / 1000)
        tn__warn("NVRTC %d.%d (%s) is newer than the driver's CUDA %d.%d: kernels may fail to load; "
                 "set TN_LIBNVRTC_PATH to a libnvrtc.so.%d", tn__nvrtc.major, tn__nvrtc.minor, tn__nvrtc.path,
                 c->driver_version / 1000, c->driver_version % 1000 / 10, c->driver_version / 1000);
    tn__cuda_dev *D = tn__cuda_dev_open(c->ordinal, why, cap);
    if (!D) return why;
    snprintf(c->status, sizeof c->status, "cuda%d: %.100s (%s, %d SMs), driver %d.%d, nvrtc %d.%d (%.200s)",
             D->ordinal, D->name, D->arch, D->sm_count, c->driver_version / 1000, c->driver_version % 1000 / 10,
             tn__nvrtc.major, tn__nvrtc.minor, tn__nvrtc.path);
    return NULL;
}

TN_API tn_result tn_cuda_init(void) {
    const tn_config *cfg = tn_get_config();
    tn__cuda_loader *c = &tn__cuda;
    pthread_mutex_lock(&c->mu);
    if (c->state == 0) {
        char why[400];
        const char *fail = NULL;
        if (cfg->device == TN_DEVICE_CPU) {
            snprintf(why, sizeof why, "device=cpu: CUDA not used");
            fail = why;
        } else {
            fail = tn__cuda_open(cfg, why, sizeof why);
        }
        if (fail) {
            snprintf(c->status, sizeof c->status, "%s", fail);
            bool opened = false;   /* a device opened before (another configuration) keeps the driver */
            for (int i = 0; i < TN__CUDA_MAX_DEVICES; i++) opened |= c->dev[i] != NULL;
            if (c->h_cuda && !opened) {
                dlclose(c->h_cuda);
                c->h_cuda = NULL;
                memset(&c->cu, 0, sizeof c->cu);
            }
            c->state = -1;
            if (cfg->device == TN_DEVICE_CUDA)   /* asked for explicitly: say why, once */
            {
                char dev[16] = "";
                if (cfg->device_ordinal) snprintf(dev, sizeof dev, "%d", cfg->device_ordinal);
                tn__warn("device=cuda%s requested but %s; running on the CPU", dev, fail);
            }
        } else {
            c->state = 1;
            tn__lib.shutdown_hook = tn__cuda_shutdown;
            tn__cuda_register_backend();
        }
    }
    int st = c->state;
    pthread_mutex_unlock(&c->mu);
    if (st > 0) return TN_OK;
    return tn__err(TN_ERR_DEVICE, "tn_cuda_init: %s", c->status);
}

TN_API bool tn_cuda_available(void) { return tn_cuda_init() == TN_OK; }

/* The context of device `ordinal`, opened on first use (NULL, error set,
   when the driver or that device cannot be used). */
static tn__cuda_dev *tn__cuda_dev_get(int ordinal) {
    if (ordinal < 0 || ordinal >= TN__CUDA_MAX_DEVICES) {
        tn__err(TN_ERR_DEVICE, "tn_cuda: %d is not a CUDA device ordinal", ordinal);
        return NULL;
    }
    tn__cuda_dev *D = __atomic_load_n(&tn__cuda.dev[ordinal], __ATOMIC_ACQUIRE);
    if (D) return D;
    if (tn_cuda_init() != TN_OK) return NULL;
    char why[400];
    pthread_mutex_lock(&tn__cuda.mu);
    D = tn__cuda_dev_open(ordinal, why, sizeof why);
    pthread_mutex_unlock(&tn__cuda.mu);
    if (!D) tn__err(TN_ERR_DEVICE, "tn_cuda: cuda%d: %s", ordinal, why);
    return D;
}

/* Tests: forget a failed initialisation so the next tn_cuda_init() tries
   again (under another configuration). A working device is kept. */
static void tn__cuda_forget_failure(void) {
    pthread_mutex_lock(&tn__cuda.mu);
    if (tn__cuda.state < 0) { tn__cuda.state = 0; tn__cuda.status[0] = 0; }
    pthread_mutex_unlock(&tn__cuda.mu);
}

TN_API const char *tn_cuda_status(void) {
    if (tn__cuda.state == 0) (void)tn_cuda_init();
    return tn__cuda.status;
}

/* Makes D's context current on the calling thread (once per thread and device). */
static tn_result tn__cuda_bind(tn__cuda_dev *D) {
    if (tn__cuda_bound == D->ctx) return TN_OK;
    TN__CU_CHECK(tn__cuda.cu.cuCtxSetCurrent(D->ctx), "binding the CUDA context to this thread");
    tn__cuda_bound = D->ctx;
    return TN_OK;
}

/* The device of an array or node (`device` ordinal), its context bound. */
static tn_result tn__cuda_enter(int device, tn__cuda_dev **out, const char *who) {
    *out = NULL;
    if (device == TN_HOST) return tn__err(TN_ERR_DEVICE, "%s: the data lives on the host, not on a CUDA device", who);
    tn__cuda_dev *D = tn__cuda_dev_get(device);
    if (!D) return tn__err(TN_ERR_DEVICE, "%s: %s", who, tn_last_error());
    *out = D;
    return tn__cuda_bind(D);
}

/* The stream record this thread queues work on for D (the >>cuda_streams
   section): the stream of the last function it called on D, else D's home
   stream. Per thread and device, so functions called from different threads
   queue on their own streams. tn__cuda_cur_dev is the device of the function
   this thread called last: the back-end entry points without an array or node
   (replay, events, shared variables) work there. */
static TN__THREAD_LOCAL tn__cuda_fstream *tn__cuda_cur[TN__CUDA_MAX_DEVICES];
static TN__THREAD_LOCAL uint64_t tn__cuda_cur_epoch;
static TN__THREAD_LOCAL tn__cuda_dev *tn__cuda_cur_dev;
static void tn__cuda_cur_check(void) {
    uint64_t e = tn__atomic_load_explicit(&tn__cuda.epoch, TN__RELAXED);
    if (tn__cuda_cur_epoch != e) {
        memset(tn__cuda_cur, 0, sizeof tn__cuda_cur);
        tn__cuda_cur_dev = NULL;
        tn__cuda_cur_epoch = e;
    }
}
static tn__cuda_fstream *tn__cuda_fs(tn__cuda_dev *D) {
    tn__cuda_cur_check();
    tn__cuda_fstream *f = tn__cuda_cur[D->ordinal];
    return f ? f : &D->home;
}
static tn__CUstream tn__cuda_stream(tn__cuda_dev *D) { return tn__cuda_fs(D)->s; }

/* The device of the function this thread is calling (else the configured
   one), its context bound. */
static tn_result tn__cuda_enter_current(tn__cuda_dev **out, const char *who) {
    tn__cuda_cur_check();
    if (tn__cuda_cur_dev) { *out = tn__cuda_cur_dev; return tn__cuda_bind(tn__cuda_cur_dev); }
    return tn__cuda_enter(tn__cuda.ordinal, out, who);
}

/* >>cuda_codegen: a tn_ew_program as one CUDA C kernel ----------------------- */

/* Sources are written into a tn__sb (tensor.h's string builder); on an
   allocation failure it stays marked failed and the caller reports TN_ERR_OOM
   once at the end. */
enum { TN__CUDA_CONTIG = 1, TN__CUDA_STRIDED = 2 };

/* The structure a kernel is specialised for (never sizes). Contiguous: every
   operand is contiguous with the output's shape, or (scalar_in bit i) input i
   is a single element read once. Strided: ndim dims after collapsing, shapes
   and element strides of every operand passed in one struct. */
typedef struct tn__cuda_layout {
    int kind;
    int ndim;
    uint64_t scalar_in;
} tn__cuda_layout;

/* Kernel parameter budget: the classic 4 KB of cuLaunchKernel. A strided
   kernel of rank TN_MAX_DIMS passes n, the shape, and per operand a pointer
   and TN_MAX_DIMS strides. */
#define TN__CUDA_PARAM_BUDGET 4096
#define TN__CUDA_MAX_OPERANDS ((TN__CUDA_PARAM_BUDGET - 8 * (1 + TN_MAX_DIMS)) / (8 + 8 * TN_MAX_DIMS))
TN__STATIC_ASSERT(TN__CUDA_MAX_OPERANDS >= 8, "kernel parameter budget");
TN_API int tn_cuda_max_fused_operands(void) { return TN__CUDA_MAX_OPERANDS; }

static const char *tn__cuda_ctype(tn_dtype t) {      /* register (compute) type */
    return t == TN_F16 || t == TN_F32 ? "float" : t == TN_F64 ? "double" : "int64_t";
}
static const char *tn__cuda_stype(tn_dtype t) {      /* storage type */
    switch (t) {
    case TN_BOOL: return "unsigned char";
    case TN_I32: return "int";
    case TN_I64: return "int64_t";
    case TN_F16: return "unsigned short";
    case TN_F32: return "float";
    case TN_F64: return "double";
    default: return NULL;
    }
}
static bool tn__cuda_is_int(tn_dtype t) { return t == TN_BOOL || t == TN_I32 || t == TN_I64; }

static tn_dtype tn__cuda_reg_dtype(const tn_ew_program *p, int r) {
    return r < p->n_in ? p->in_dtype[r] : (tn_dtype)p->instr[r - p->n_in].dtype;
}

/* Register conversions with the CPU engine's storage semantics (the >>ops_ew section
   tn__ew_casts): `expr`, a register of dtype `from`, becomes the register value
   it would read back as after being stored as dtype `to` (float -> int
   truncates, NaN and out of range give the minimum; int32 wraps; bool is 0/1;
   float16 rounds once, also from float64). */
static void tn__cuda_conv(tn__sb *b, const char *expr, tn_dtype from, tn_dtype to) {
    bool fi = tn__cuda_is_int(from);
    if (from == to) { tn__sb_printf(b, "(%s)", expr); return; }   /* registers hold normalised values */
    switch (to) {
    case TN_BOOL: tn__sb_printf(b, "((int64_t)((%s) != 0))", expr); break;
    case TN_I32: tn__sb_printf(b, fi ? "tn_wrap32(%s)" : "tn_d2i32((double)(%s))", expr); break;
    case TN_I64: tn__sb_printf(b, fi ? "(%s)" : "tn_d2i64((double)(%s))", expr); break;
    case TN_F16:
        if (from == TN_F32) tn__sb_printf(b, "tn_rh(%s)", expr);
        else tn__sb_printf(b, "tn_h2f(tn_d2h((double)(%s)))", expr);
        break;
    case TN_F32: tn__sb_printf(b, from == TN_F16 ? "(%s)" : "((float)(%s))", expr); break;
    case TN_F64: tn__sb_printf(b, "((double)(%s))", expr); break;
    default: TN_ASSERT(0 && "tn__cuda_conv: dtype"); break;
    }
}

/* After an arithmetic instruction: the register holds what its dtype can
   store (as the CPU's tn__norm_*), so fused equals unfused. */
static void tn__cuda_norm(tn__sb *b, const char *expr, tn_dtype d) {
    switch (d) {
    case TN_F16: tn__sb_printf(b, "tn_rh(%s)", expr); break;
    case TN_I32: tn__sb_printf(b, "tn_wrap32(%s)", expr); break;
    case TN_BOOL: tn__sb_printf(b, "((int64_t)((%s) != 0))", expr); break;
    default: tn__sb_printf(b, "(%s)", expr); break;
    }
}

/* A register of dtype `from` as the storage value of dtype `to` (tn__cv_*). */
static void tn__cuda_store(tn__sb *b, const char *expr, tn_dtype from, tn_dtype to) {
    bool fi = tn__cuda_is_int(from);
    switch (to) {
    case TN_BOOL: tn__sb_printf(b, "(unsigned char)((%s) != 0)", expr); break;
    case TN_I32: tn__sb_printf(b, fi ? "(int)tn_wrap32(%s)" : "(int)tn_d2i32((double)(%s))", expr); break;
    case TN_I64: tn__sb_printf(b, fi ? "(int64_t)(%s)" : "tn_d2i64((double)(%s))", expr); break;
    case TN_F16:
        if (from == TN_F16 || from == TN_F32) tn__sb_printf(b, "tn_f2h(%s)", expr);
        else tn__sb_printf(b, "tn_d2h((double)(%s))", expr);
        break;
    case TN_F32: tn__sb_printf(b, "(float)(%s)", expr); break;
    case TN_F64: tn__sb_printf(b, "(double)(%s)", expr); break;
    default: TN_ASSERT(0 && "tn__cuda_store: dtype"); break;
    }
}


/* Checks the program before generating code, so malformed input is an error
   naming the instruction rather than a kernel that does not compile. */
/* The program's random draws (TN_OP_RANDOM instructions). */
static int tn__cuda_n_rand(const tn_ew_program *p) {
    int n = 0;
    for (int k = 0; p->rand && k < p->n_instr; k++) n += p->instr[k].op == TN_OP_RANDOM;
    return n;
}

static tn_result tn__cuda_check_program(const tn_ew_program *p) {
    if (!p || p->n_in < 0 || p->n_out < 1 || p->n_instr < 0 || (p->n_in && !p->in_dtype) ||
        (p->n_instr && !p->instr) || !p->out_reg || !p->out_dtype)
        return tn__err(TN_ERR_INVALID, "tn_cuda codegen: malformed program (no outputs or missing arrays)");
    if (p->n_in + p->n_out + tn__cuda_n_rand(p) > TN__CUDA_MAX_OPERANDS)
        return tn__err(TN_ERR_UNSUPPORTED, "tn_cuda codegen: %d inputs + %d outputs + %d random draws exceed the %d operands one kernel "
                       "can take (tn_cuda_max_fused_operands)", p->n_in, p->n_out, tn__cuda_n_rand(p), TN__CUDA_MAX_OPERANDS);
    for (int i = 0; i < p->n_in; i++)
        if (!tn__cuda_stype(p->in_dtype[i]))
            return tn__err(TN_ERR_DTYPE, "tn_cuda codegen: input %d has dtype %s", i, tn_dtype_name(p->in_dtype[i]));
    for (int k = 0; k < p->n_instr; k++) {
        const tn_ew_instr *in = &p->instr[k];
        int nreg = p->n_in + k;
        if (!tn__cuda_stype((tn_dtype)in->dtype))
            return tn__err(TN_ERR_DTYPE, "tn_cuda codegen: instruction %d has dtype %s", k, tn_dtype_name((tn_dtype)in->dtype));
        if (in->op == TN_OP_CONSTANT) continue;
        if (in->op == TN_OP_RANDOM) {
            char why[160];
            if (!tn__ew_rand_check(p, k, why, sizeof why)) return tn__err(TN_ERR_INVALID, "tn_cuda codegen: instruction %d (random): %s", k, why);
            continue;
        }
        const tn_ew_info *info = tn__ew_info(in->op);
        if (!info) return tn__err(TN_ERR_INVALID, "tn_cuda codegen: instruction %d has op %d, not elementwise", k, in->op);
        const int32_t ops[3] = { in->a, in->b, in->c };
        for (int j = 0; j < 3; j++) {
            bool need = j < info->arity;
            if (need && (ops[j] < 0 || ops[j] >= nreg))
                return tn__err(TN_ERR_INVALID, "tn_cuda codegen: instruction %d (%s) reads register %d of %d defined",
                               k, info->name, ops[j], nreg);
        }
        if (in->op == TN_OP_CAST) continue;
        tn_dtype id = (tn_dtype)in->in_dtype;
        if (!tn__cuda_stype(id))
            return tn__err(TN_ERR_DTYPE, "tn_cuda codegen: instruction %d (%s) reads operands as %s", k, info->name,
                           tn_dtype_name(id));
        /* as the CPU engine: operands already hold the compute type (casts are instructions) */
        const char *want_out = info->kind == TN_EWK_CMP || info->kind == TN_EWK_LOGIC ? "int64_t" : tn__cuda_ctype(id);
        if (strcmp(tn__cuda_ctype((tn_dtype)in->dtype), want_out))
            return tn__err(TN_ERR_INVALID, "tn_cuda codegen: instruction %d (%s) computes %s but its dtype is %s",
                           k, info->name, want_out, tn_dtype_name((tn_dtype)in->dtype));
        for (int j = 0; j < info->arity; j++) {
            const char *want = j == 0 && in->op == TN_OP_WHERE ? "int64_t" : tn__cuda_ctype(id);
            if (strcmp(tn__cuda_ctype(tn__cuda_reg_dtype(p, ops[j])), want))
                return tn__err(TN_ERR_INVALID, "tn_cuda codegen: instruction %d (%s) reads register %d as %s but it holds %s",
                               k, info->name, ops[j], want, tn__cuda_ctype(tn__cuda_reg_dtype(p, ops[j])));
        }
    }
    for (int j = 0; j < p->n_out; j++)
        if (p->out_reg[j] < 0 || p->out_reg[j] >= p->n_in + p->n_instr || !tn__cuda_stype(p->out_dtype[j]))
            return tn__err(TN_ERR_INVALID, "tn_cuda codegen: output %d stores register %d as %s", j, p->out_reg[j],
                           tn_dtype_name(p->out_dtype[j]));
    return TN_OK;
}

/* Definitions every kernel starts with, generated and user kernels alike
   (the >>cuda_user section): NVRTC has no <stdint.h>, and half conversions
   are one PTX instruction each (no cuda_fp16.h needed). */
#define TN__CUDA_BASE_SRC \
        "typedef long long int64_t;\n" \
        "typedef unsigned long long uint64_t;\n" \
        "__device__ __forceinline__ float tn_h2f(unsigned short h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n" \
        "__device__ __forceinline__ unsigned short tn_f2h(float f) { unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n" \
        "__device__ __forceinline__ unsigned short tn_d2h(double d) { unsigned short h; asm(\"cvt.rn.f16.f64 %0, %1;\" : \"=h\"(h) : \"d\"(d)); return h; }\n"

static void tn__cuda_prelude(tn__sb *b) {
    tn__sb_puts(b,
        TN__CUDA_BASE_SRC
        "#define TN__U(x) ((uint64_t)(x))\n"
        "#define TN__S(x) ((int64_t)(x))\n"
        "__device__ __forceinline__ float tn_rh(float f) { return tn_h2f(tn_f2h(f)); }\n"
        "__device__ __forceinline__ int64_t tn_d2i64(double x) { return x >= -9223372036854775808.0 && x < 9223372036854775808.0 ? (int64_t)x : (int64_t)(-9223372036854775807LL - 1); }\n"
        "__device__ __forceinline__ int64_t tn_d2i32(double x) { return x > -2147483649.0 && x < 2147483648.0 ? (int64_t)(int)x : (int64_t)(-2147483647 - 1); }\n"
        "__device__ __forceinline__ int64_t tn_wrap32(int64_t x) { return (int64_t)(int)(unsigned int)(uint64_t)x; }\n"
        "#define TN__QUAL static __device__ __forceinline__\n");
    tn__sb_puts(b, tn__scalar_helpers_source());
    tn__sb_puts(b, "\n#undef TN__QUAL\n");
}

/* Loads a stored element as a register value. */
static void tn__cuda_load(tn__sb *b, tn_dtype t, const char *lvalue) {
    switch (t) {
    case TN_BOOL: tn__sb_printf(b, "((int64_t)(%s != 0))", lvalue); break;
    case TN_F16: tn__sb_printf(b, "tn_h2f(%s)", lvalue); break;
    case TN_I32: tn__sb_printf(b, "((int64_t)%s)", lvalue); break;
    default: tn__sb_printf(b, "%s", lvalue); break;
    }
}

/* tn_eval(registers of the inputs, output element pointers): the program. */
static void tn__cuda_emit_eval_as(tn__sb *b, const tn_ew_program *p, const char *name);
static void tn__cuda_emit_eval(tn__sb *b, const tn_ew_program *p) { tn__cuda_emit_eval_as(b, p, "tn_eval"); }
static void tn__cuda_emit_eval_as(tn__sb *b, const tn_ew_program *p, const char *name) {
    char e[96];
    tn__sb_printf(b, "static __device__ __forceinline__ void %s(", name);
    for (int i = 0; i < p->n_in; i++)
        tn__sb_printf(b, "%sconst %s r%d", i ? ", " : "", tn__cuda_ctype(p->in_dtype[i]), i);
    int np = p->n_in;
    for (int k = 0; k < p->n_instr; k++)      /* a draw's element, computed by the caller (a block's words once) */
        if (p->instr[k].op == TN_OP_RANDOM)
            tn__sb_printf(b, "%sconst %s q%d", np++ ? ", " : "", tn__cuda_ctype((tn_dtype)p->instr[k].dtype), p->n_in + k);
    for (int j = 0; j < p->n_out; j++)
        tn__sb_printf(b, "%s%s *o%d", np++ ? ", " : "", tn__cuda_stype(p->out_dtype[j]), j);
    tn__sb_puts(b, ") {\n");
    for (int k = 0; k < p->n_instr; k++) {
        const tn_ew_instr *in = &p->instr[k];
        int r = p->n_in + k;
        tn_dtype d = (tn_dtype)in->dtype, id = (tn_dtype)in->in_dtype;
        tn__sb_printf(b, "    %s r%d;\n", tn__cuda_ctype(d), r);
        if (in->op == TN_OP_CONSTANT) {
            uint64_t bits;
            memcpy(&bits, &in->imm, sizeof bits);
            snprintf(e, sizeof e, "__longlong_as_double(0x%016llxLL) /* %.17g */", (unsigned long long)bits, in->imm);
            tn__sb_printf(b, "    r%d = ", r);
            tn__cuda_conv(b, e, TN_F64, d);
            tn__sb_puts(b, ";\n");
            continue;
        }
        if (in->op == TN_OP_RANDOM) {
            tn__sb_printf(b, "    r%d = q%d; /* random */\n", r, r);
            continue;
        }
        const tn_ew_info *info = tn__ew_info(in->op);
        if (in->op == TN_OP_CAST) {
            snprintf(e, sizeof e, "r%d", in->a);
            tn__sb_printf(b, "    r%d = ", r);
            tn__cuda_conv(b, e, tn__cuda_reg_dtype(p, in->a), d);
            tn__sb_printf(b, "; /* cast */\n");
            continue;
        }
        bool fl = !tn__cuda_is_int(id);
        tn__sb_printf(b, "    { /* %s */\n", info->name);
        tn__sb_printf(b, "#define TN_T %s\n#define TN_F(fn) %s\n#define TN_I int64_t\n",
                      tn__cuda_ctype(id), id == TN_F64 || !fl ? "fn" : "fn##f");
        const int32_t ops[3] = { in->a, in->b, in->c };
        const char names[3] = { 'a', 'b', 'c' };
        /* operands are read as they are: check_program made their compute types match */
        for (int j = 0; j < info->arity; j++)
            tn__sb_printf(b, "        const %s %c = r%d;\n", j == 0 && in->op == TN_OP_WHERE ? "TN_I" : "TN_T", names[j], ops[j]);
        tn__sb_printf(b, "        r%d = ", r);
        /* the table's expression, as text: the same one the CPU compiles;
           CMP and LOGIC give 0/1 as TN_I, nothing to normalise */
        if (info->kind == TN_EWK_CMP || info->kind == TN_EWK_LOGIC)
            tn__sb_printf(b, "(TN_I)(%s)", fl ? info->fexpr : info->iexpr);
        else {
            tn__sb_puts(b, "(TN_T)");
            tn__cuda_norm(b, fl ? info->fexpr : info->iexpr, d);
        }
        tn__sb_puts(b, ";\n#undef TN_T\n#undef TN_F\n#undef TN_I\n    }\n");
    }
    for (int j = 0; j < p->n_out; j++) {
        tn_dtype od = p->out_dtype[j];
        int reg = p->out_reg[j];
        snprintf(e, sizeof e, "r%d", reg);
        tn__sb_printf(b, "    *o%d = ", j);
        tn__cuda_store(b, e, tn__cuda_reg_dtype(p, reg), od);
        tn__sb_puts(b, ";\n");
    }
    tn__sb_puts(b, "}\n");
}

/* A program's draws (TN_OP_RANDOM): the library's draw functions, then per
   draw in register r, tn_rb<r>(seed, calls, j, v) storing the values of
   its block j as the Random op's kernel does (>>cuda_random: the same
   text), and tn_re<r>(seed, calls, e) giving element e as a register. */
static void tn__cuda_emit_rand(tn__sb *b, const tn_ew_program *p) {
    if (!tn__cuda_n_rand(p)) return;
    tn__sb_puts(b, tn__random_cuda_helpers());
    for (int k = 0; k < p->n_instr; k++) {
        const tn_ew_instr *in = &p->instr[k];
        if (in->op != TN_OP_RANDOM) continue;
        const tn_ew_rand *R = &p->rand[k];
        tn_dtype t = (tn_dtype)in->dtype;
        const char *prep, *val;
        const char *sty = tn__cuda_stype(t), *cty = tn__cuda_ctype(t);
        if (!sty || !tn__random_cuda_expr(R->dist, t, &prep, &val)) continue;      /* tn__cuda_check_program refuses it */
        int r = p->n_in + k, per = tn__rnd_per(R->dist, t);
        uint64_t ab[2];
        memcpy(&ab[0], &R->a, 8);
        memcpy(&ab[1], &R->b, 8);
        tn__sb_printf(b, "static __device__ __forceinline__ void tn_rb%d(const uint64_t seed, const uint64_t calls, const int64_t j, %s *v) {\n"
                         "    const double a = __longlong_as_double(0x%016llxLL), b = __longlong_as_double(0x%016llxLL); /* %.17g, %.17g */\n"
                         "    const long long ilow = (long long)0x%016llxULL; const unsigned long long range = 0x%016llxULL;\n"
                         "    (void)a; (void)b; (void)ilow; (void)range;\n"
                         "    uint32_t x[4] = { (uint32_t)j, (uint32_t)((uint64_t)j >> 32), %uu, (uint32_t)calls };\n"
                         "    tn__philox10((uint32_t)seed, (uint32_t)(seed >> 32), x);\n"
                         "    %s\n"
                         "#pragma unroll\n"
                         "    for (int t = 0; t < %d; t++) v[t] = %s;\n"
                         "}\n",
                      r, sty, (unsigned long long)ab[0], (unsigned long long)ab[1], R->a, R->b, (unsigned long long)R->ilow,
                      (unsigned long long)R->range, (unsigned)R->draw, prep, per, val);
        tn__sb_printf(b, "static __device__ __forceinline__ %s tn_re%d(const uint64_t seed, const uint64_t calls, const int64_t e) {\n"
                         "    const int64_t j = e / %d;\n"
                         "    %s v[%d];\n"
                         "    tn_rb%d(seed, calls, j, v);\n"
                         "    return ", cty, r, per, sty, per, r);
        char lv[48];
        snprintf(lv, sizeof lv, "v[e - j * %d]", per);
        tn__cuda_load(b, t, lv);
        tn__sb_puts(b, ";\n}\n");
    }
}

/* The seed and call count of each draw, read once by a kernel. */
static void tn__cuda_emit_rand_state(tn__sb *b, const tn_ew_program *p) {
    for (int k = 0; k < p->n_instr; k++)
        if (p->rand && p->instr[k].op == TN_OP_RANDOM)
            tn__sb_printf(b, "    const uint64_t sd%d = (uint64_t)in%d[0], cl%d = (uint64_t)in%d[0];\n", p->n_in + k, p->instr[k].a,
                          p->n_in + k, p->instr[k].b);
}

/* tn_eval's draw arguments: element `e` of each (an expression of k), or
   (fbase >= 0) the offset f<fbase + q> of draw q, or, with `w`, the
   vector's stored values w<r>[k]. */
static void tn__cuda_emit_rand_args(tn__sb *b, const tn_ew_program *p, const char *e, int fbase, bool w, int vec) {
    bool comma = p->n_in > 0;
    int q = 0;
    for (int k = 0; k < p->n_instr; k++) {
        const tn_ew_instr *in = &p->instr[k];
        if (!p->rand || in->op != TN_OP_RANDOM) continue;
        int r = p->n_in + k;
        tn__sb_puts(b, comma ? ", " : "");
        comma = true;
        if (w && vec % tn__rnd_per(p->rand[k].dist, (tn_dtype)in->dtype) == 0) {
            char lv[32];
            snprintf(lv, sizeof lv, "w%d[k]", r);
            tn__cuda_load(b, (tn_dtype)in->dtype, lv);
        } else if (fbase >= 0) tn__sb_printf(b, "tn_re%d(sd%d, cl%d, f%d)", r, r, r, fbase + q);
        else tn__sb_printf(b, "tn_re%d(sd%d, cl%d, %s)", r, r, r, e);
        q++;
    }
}

/* Contiguous kernel: a grid-stride loop over VEC-element vectors (16-byte
   accesses for the widest operand) when every pointer is aligned, then a
   scalar loop for the tail (or everything, when unaligned). */
static void tn__cuda_emit_contig(tn__sb *b, const tn_ew_program *p, uint64_t scalar_in) {
    size_t widest = 1;
    for (int i = 0; i < p->n_in; i++)
        if (!(scalar_in >> i & 1) && tn_dtype_size(p->in_dtype[i]) > widest) widest = tn_dtype_size(p->in_dtype[i]);
    for (int j = 0; j < p->n_out; j++)
        if (tn_dtype_size(p->out_dtype[j]) > widest) widest = tn_dtype_size(p->out_dtype[j]);
    int vec = (int)(16 / widest);
    for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
        bool used = false;
        for (int i = 0; i < p->n_in; i++) used |= !(scalar_in >> i & 1) && p->in_dtype[i] == t;
        for (int j = 0; j < p->n_out; j++) used |= p->out_dtype[j] == t;
        if (used)
            tn__sb_printf(b, "struct __align__(%d) tn_v%d { %s v[%d]; };\n", (int)(vec * tn_dtype_size(t)), (int)t,
                          tn__cuda_stype(t), vec);
    }
    tn__sb_puts(b, "extern \"C\" __global__ void __launch_bounds__(256) tn_ew(const int64_t n");
    for (int i = 0; i < p->n_in; i++)
        tn__sb_printf(b, ", const %s *__restrict__ in%d", tn__cuda_stype(p->in_dtype[i]), i);
    for (int j = 0; j < p->n_out; j++)
        tn__sb_printf(b, ", %s *__restrict__ out%d", tn__cuda_stype(p->out_dtype[j]), j);
    tn__sb_puts(b, ") {\n"
                   "    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "    const int64_t nthreads = (int64_t)gridDim.x * blockDim.x;\n");
    for (int i = 0; i < p->n_in; i++) {
        if (!(scalar_in >> i & 1)) continue;
        tn__sb_printf(b, "    const %s s%d = ", tn__cuda_ctype(p->in_dtype[i]), i);
        char lv[32];
        snprintf(lv, sizeof lv, "in%d[0]", i);
        tn__cuda_load(b, p->in_dtype[i], lv);
        tn__sb_puts(b, ";\n");
    }
    tn__cuda_emit_rand_state(b, p);
    tn__sb_printf(b, "    int64_t start = 0;\n    if (((0");
    for (int i = 0; i < p->n_in; i++)
        if (!(scalar_in >> i & 1))
            tn__sb_printf(b, " | ((unsigned long long)in%d & %d)", i, (int)(vec * tn_dtype_size(p->in_dtype[i])) - 1);
    for (int j = 0; j < p->n_out; j++)
        tn__sb_printf(b, " | ((unsigned long long)out%d & %d)", j, (int)(vec * tn_dtype_size(p->out_dtype[j])) - 1);
    tn__sb_printf(b, ")) == 0) {\n        const int64_t nv = n / %d;\n", vec);
    tn__sb_puts(b, "        for (int64_t v = tid; v < nv; v += nthreads) {\n");
    for (int i = 0; i < p->n_in; i++)
        if (!(scalar_in >> i & 1))
            tn__sb_printf(b, "            const tn_v%d x%d = ((const tn_v%d *)in%d)[v];\n",
                          (int)p->in_dtype[i], i, (int)p->in_dtype[i], i);
    for (int j = 0; j < p->n_out; j++) tn__sb_printf(b, "            tn_v%d y%d;\n", (int)p->out_dtype[j], j);
    for (int k = 0; k < p->n_instr; k++) {     /* a draw's blocks of the vector, each block's words once */
        const tn_ew_instr *in = &p->instr[k];
        if (!p->rand || in->op != TN_OP_RANDOM) continue;
        int r = p->n_in + k, per = tn__rnd_per(p->rand[k].dist, (tn_dtype)in->dtype);
        if (vec % per) continue;
        tn__sb_printf(b, "            %s w%d[%d];\n#pragma unroll\n"
                         "            for (int bb = 0; bb < %d; bb++) tn_rb%d(sd%d, cl%d, v * %d + bb, &w%d[bb * %d]);\n",
                      tn__cuda_stype((tn_dtype)in->dtype), r, vec, vec / per, r, r, r, vec / per, r, per);
    }
    tn__sb_printf(b, "#pragma unroll\n            for (int k = 0; k < %d; k++)\n                tn_eval(", vec);
    for (int i = 0; i < p->n_in; i++) {
        char lv[32];
        if (i) tn__sb_puts(b, ", ");
        if (scalar_in >> i & 1) { tn__sb_printf(b, "s%d", i); continue; }
        snprintf(lv, sizeof lv, "x%d.v[k]", i);
        tn__cuda_load(b, p->in_dtype[i], lv);
    }
    char ve[48];
    snprintf(ve, sizeof ve, "v * %d + k", vec);
    tn__cuda_emit_rand_args(b, p, ve, -1, true, vec);
    for (int j = 0; j < p->n_out; j++) tn__sb_printf(b, "%s&y%d.v[k]", p->n_in + j ? ", " : "", j);
    tn__sb_puts(b, ");\n");
    for (int j = 0; j < p->n_out; j++)
        tn__sb_printf(b, "            ((tn_v%d *)out%d)[v] = y%d;\n", (int)p->out_dtype[j], j, j);
    tn__sb_printf(b, "        }\n        start = nv * %d;\n    }\n", vec);
    tn__sb_puts(b, "    for (int64_t i = start + tid; i < n; i += nthreads)\n        tn_eval(");
    for (int i = 0; i < p->n_in; i++) {
        char lv[32];
        if (i) tn__sb_puts(b, ", ");
        if (scalar_in >> i & 1) { tn__sb_printf(b, "s%d", i); continue; }
        snprintf(lv, sizeof lv, "in%d[i]", i);
        tn__cuda_load(b, p->in_dtype[i], lv);
    }
    tn__cuda_emit_rand_args(b, p, "i", -1, false, vec);
    for (int j = 0; j < p->n_out; j++) tn__sb_printf(b, "%s&out%d[i]", p->n_in + j ? ", " : "", j);
    tn__sb_puts(b, ");\n}\n");
}

/* Strided kernel: each thread turns its linear index into coordinates
   (innermost first) and every operand's element offset (0 strides broadcast). */
static void tn__cuda_emit_strided(tn__sb *b, const tn_ew_program *p, int nd) {
    int nops = p->n_in + p->n_out, nrows = nops + tn__cuda_n_rand(p);    /* a draw's row: its index's element strides */
    tn__sb_printf(b, "struct tn_args { int64_t n; int64_t shape[%d]; int64_t st[%d][%d]; };\n", nd, nrows, nd);
    tn__sb_puts(b, "extern \"C\" __global__ void __launch_bounds__(256) tn_ew(const tn_args A");
    for (int i = 0; i < p->n_in; i++)
        tn__sb_printf(b, ", const %s *__restrict__ in%d", tn__cuda_stype(p->in_dtype[i]), i);
    for (int j = 0; j < p->n_out; j++)
        tn__sb_printf(b, ", %s *__restrict__ out%d", tn__cuda_stype(p->out_dtype[j]), j);
    tn__sb_puts(b, ") {\n"
                   "    const int64_t nthreads = (int64_t)gridDim.x * blockDim.x;\n");
    tn__cuda_emit_rand_state(b, p);
    tn__sb_puts(b, "    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < A.n; i += nthreads) {\n"
                   "        int64_t rem = i, q, c;\n");
    for (int k = 0; k < nrows; k++) tn__sb_printf(b, "        int64_t f%d = 0;\n", k);
    for (int d = nd - 1; d >= 1; d--) {
        tn__sb_printf(b, "        q = rem / A.shape[%d]; c = rem - q * A.shape[%d]; rem = q;\n", d, d);
        for (int k = 0; k < nrows; k++) tn__sb_printf(b, "        f%d += c * A.st[%d][%d];\n", k, k, d);
    }
    for (int k = 0; k < nrows; k++) tn__sb_printf(b, "        f%d += rem * A.st[%d][0];\n", k, k);
    tn__sb_puts(b, "        tn_eval(");
    for (int i = 0; i < p->n_in; i++) {
        char lv[32];
        if (i) tn__sb_puts(b, ", ");
        snprintf(lv, sizeof lv, "in%d[f%d]", i, i);
        tn__cuda_load(b, p->in_dtype[i], lv);
    }
    tn__cuda_emit_rand_args(b, p, "", nops, false, 0);
    for (int j = 0; j < p->n_out; j++) tn__sb_printf(b, "%s&out%d[f%d]", p->n_in + j ? ", " : "", j, p->n_in + j);
    tn__sb_puts(b, ");\n    }\n}\n");
}

/* The CUDA C source of one kernel "tn_ew" for `p` under layout L. Caller frees. */
static tn_result tn__cuda_ew_source(const tn_ew_program *p, const tn__cuda_layout *L, char **out) {
    *out = NULL;
    tn_result r = tn__cuda_check_program(p);
    if (r != TN_OK) return r;
    if (L->kind == TN__CUDA_STRIDED && (L->ndim < 1 || L->ndim > TN_MAX_DIMS))
        return tn__err(TN_ERR_INVALID, "tn_cuda codegen: strided layout of rank %d", L->ndim);
    if (L->kind != TN__CUDA_STRIDED && L->kind != TN__CUDA_CONTIG)
        return tn__err(TN_ERR_INVALID, "tn_cuda codegen: unknown layout kind %d", L->kind);
    tn__sb b = TN__SB_INIT;
    tn__sb_printf(&b, "/* tensor.h fused elementwise kernel: %d in, %d out, %d instructions, %s",
                  p->n_in, p->n_out, p->n_instr, L->kind == TN__CUDA_CONTIG ? "contiguous" : "strided");
    if (L->kind == TN__CUDA_STRIDED) tn__sb_printf(&b, " rank %d", L->ndim);
    tn__sb_puts(&b, " */\n");
    tn__cuda_prelude(&b);
    tn__cuda_emit_rand(&b, p);
    tn__cuda_emit_eval(&b, p);
    if (L->kind == TN__CUDA_CONTIG) tn__cuda_emit_contig(&b, p, L->scalar_in);
    else tn__cuda_emit_strided(&b, p, L->ndim);
    if (b.oom) { tn__free(b.s); return tn__err(TN_ERR_OOM, "tn_cuda codegen: out of memory writing the kernel source"); }
    *out = b.s;
    return TN_OK;
}

/* >>cuda_nvrtc: compile to a cubin ------------------------------------------ */

static TN__THREAD_LOCAL char *tn__cuda_compile_log;     /* last failure: log + numbered source */

TN_API const char *tn_cuda_last_compile_log(void) { return tn__cuda_compile_log ? tn__cuda_compile_log : ""; }

/* Keeps the full NVRTC log and the generated source with line numbers for the
   user (stderr, or the log callback) and for tn_cuda_last_compile_log(). */
static void tn__cuda_keep_log(const char *what, const char *log, const char *src) {
    tn__sb b = TN__SB_INIT;
    tn__sb_printf(&b, "%s\n--- NVRTC log ---\n%s\n--- generated source ---\n", what, log && *log ? log : "(empty)");
    int line = 1;
    for (const char *p = src; *p; line++) {
        const char *e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        tn__sb_printf(&b, "%5d | %.*s\n", line, n, p);
        p += n + (e != NULL);
    }
    if (b.oom) { tn__free(b.s); return; }
    tn__free(tn__cuda_compile_log);
    tn__cuda_compile_log = b.s;
    if (tn__log_set()) tn__log(TN_LOG_ERROR, b.s);
    else fprintf(stderr, "tensor.h: %s", b.s);
}

/* The NVRTC options of a compile, as one string (part of the cache key):
   the architecture, fast_math's, then the nvrtc_flags flag's. */
#define TN__CUDA_USER_OPTS 256    /* the longest options string of a raw module */

/* user: a raw module's own options (the >>cuda_user section), after nvrtc_flags. */
static void tn__nvrtc_options(const char *arch, bool fast_math, const char *user, char *buf, size_t cap) {
    const char *extra = tn_get_config()->nvrtc_flags;
    snprintf(buf, cap, "--gpu-architecture=%s%s%s%s%s%s", arch, fast_math ? " --use_fast_math" : "", extra && *extra ? " " : "",
             extra ? extra : "", user && *user ? " " : "", user ? user : "");
}

/* Compiles `src` with NVRTC to a cubin (tn__malloc'd). No GPU needed. */
static tn_result tn__nvrtc_compile(const char *src, const char *arch, bool fast_math, const char *user, void **cubin, size_t *size) {
    *cubin = NULL;
    *size = 0;
    tn_result r = tn__nvrtc_load(tn__cuda.driver_version / 1000);
    if (r != TN_OK) return r;
    const tn__nvrtc_api *nv = &tn__nvrtc.api;
    char archopt[48], extra[408 + TN__CUDA_USER_OPTS + 1];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    const char *opts[40] = { archopt };
    int n_opts = 1;
    if (fast_math) opts[n_opts++] = "--use_fast_math";
    const char *flags = tn_get_config()->nvrtc_flags;      /* nvrtc_flags: options spaces apart */
    snprintf(extra, sizeof extra, "%.407s %s", flags ? flags : "", user ? user : "");
    for (char *q = strtok(extra, " \t"); q; q = strtok(NULL, " \t")) {
        if (n_opts == 40) return tn__err(TN_ERR_INVALID, "tn_cuda: nvrtc_flags and a module's options have more than %d options", 40 - 2);
        opts[n_opts++] = q;
    }
    tn__nvrtcProgram prog = NULL;
    tn__nvrtcResult nr = nv->nvrtcCreateProgram(&prog, src, "tn_kernel.cu", 0, NULL, NULL);
    if (nr != TN__NVRTC_SUCCESS)
        return tn__err(nr == 1 ? TN_ERR_OOM : TN_ERR_DEVICE, "nvrtcCreateProgram failed: %s", nv->nvrtcGetErrorString(nr));
    nr = nv->nvrtcCompileProgram(prog, n_opts, opts);
    if (nr != TN__NVRTC_SUCCESS) {
        size_t n = 0;
        char *log = NULL;
        if (nv->nvrtcGetProgramLogSize(prog, &n) == TN__NVRTC_SUCCESS && (log = (char *)tn__malloc(n + 1)) != NULL) {
            if (nv->nvrtcGetProgramLog(prog, log) != TN__NVRTC_SUCCESS) log[0] = 0;
            log[n] = 0;
        }
        char what[600];
        snprintf(what, sizeof what, "NVRTC %d.%d failed to compile a kernel for %s%s%s%s%s%s%s: %s", tn__nvrtc.major, tn__nvrtc.minor, arch,
                 flags && *flags ? " with nvrtc_flags '" : "", flags && *flags ? flags : "", flags && *flags ? "'" : "",
                 user && *user ? " with options '" : "", user && *user ? user : "", user && *user ? "'" : "",
                 nv->nvrtcGetErrorString(nr));
        tn__cuda_keep_log(what, log, src);
        /* first line of the log in the message; the rest was printed */
        char first[300] = "";
        if (log) { size_t k = strcspn(log, "\n"); snprintf(first, sizeof first, "%.*s", (int)(k < 280 ? k : 280), log); }
        tn__free(log);
        nv->nvrtcDestroyProgram(&prog);
        return tn__err(TN_ERR_DEVICE, "%s: %s (full log and numbered source printed; see tn_cuda_last_compile_log())",
                       what, first);
    }
    size_t n = 0;
    void *bin = NULL;
    if ((nr = nv->nvrtcGetCUBINSize(prog, &n)) != TN__NVRTC_SUCCESS || n == 0 || !(bin = tn__malloc(n)) ||
        (nr = nv->nvrtcGetCUBIN(prog, (char *)bin)) != TN__NVRTC_SUCCESS) {
        tn__free(bin);
        nv->nvrtcDestroyProgram(&prog);
        if (!bin && nr == TN__NVRTC_SUCCESS && n) return tn__err(TN_ERR_OOM, "tn_cuda: no memory for a %zu-byte cubin", n);
        return tn__err(TN_ERR_DEVICE, "nvrtcGetCUBIN failed for %s: %s (is %s a real architecture, e.g. sm_90?)",
                       arch, nv->nvrtcGetErrorString(nr), arch);
    }
    nv->nvrtcDestroyProgram(&prog);
    *cubin = bin;
    *size = n;
    return TN_OK;
}

/* >>cuda_cache: kernels in memory and on disk -------------------------------- */
/* The key is the exact text "arch\noptions\nnvrtc M.m\nsource". In memory an
   entry is found by hash and confirmed by comparing the whole key. On disk,
   cache_dir/<hash>.cubin holds a header, the key and the cubin: a load
   compares the key byte for byte and the cubin's hash, so a truncated,
   corrupt or colliding file is recompiled. Files are written to a unique
   temporary name and renamed into place (atomic), so concurrent processes
   at worst both compile and one rename wins; readers never see half a file.
   Only regular files are read (opened non-blocking: a FIFO at an entry's
   path is a miss, never a wait) or replaced. Paths are allocated, any
   length. A directory that cannot be used (not a directory, read-only, a
   failed write, a path the system refuses) is said once through the log,
   naming it and the reason, and kernels compile without it. */

typedef struct tn__kentry {
    uint64_t h1, h2;
    char *key;
    size_t key_len;
    void *cubin;
    size_t size;
    struct tn__kentry *next;
} tn__kentry;

#define TN__KCACHE_BUCKETS 256
static struct {
    pthread_mutex_t mu;
    tn__kentry *bucket[TN__KCACHE_BUCKETS];
    tn_cuda_cache_stats stats;
    char **reported;            /* directories already said to be unusable */
    int n_reported;
} tn__kcache = { .mu = PTHREAD_MUTEX_INITIALIZER };

TN_API void tn_cuda_get_cache_stats(tn_cuda_cache_stats *out) {
    pthread_mutex_lock(&tn__kcache.mu);
    *out = tn__kcache.stats;
    pthread_mutex_unlock(&tn__kcache.mu);
}

/* Two independent 64-bit hashes, fed 8 bytes at a time (a cache hit hashes
   the whole kernel source, so this is the hit's cost). Streaming: the key's
   parts are hashed where they lie, without building the key. */
typedef struct tn__h128 { uint64_t a, b; } tn__h128;

static uint64_t tn__rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static void tn__hash_feed(tn__h128 *h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    uint64_t a = h->a ^ n, b = h->b + n, w;
    for (; n >= 8; n -= 8, p += 8) {
        memcpy(&w, p, 8);
        a = tn__rotl64((a ^ w) * 0x9e3779b97f4a7c15ull, 31);
        b = tn__rotl64((b + w) * 0xff51afd7ed558ccdull, 29) ^ w;
    }
    w = 0;
    memcpy(&w, p, n);                 /* the tail, zero-padded (its length went in above) */
    a = tn__rotl64((a ^ w) * 0x9e3779b97f4a7c15ull, 31);
    b = tn__rotl64((b + w) * 0xff51afd7ed558ccdull, 29) ^ w;
    h->a = a;
    h->b = b;
}

static void tn__hash_final(const tn__h128 *h, uint64_t *h1, uint64_t *h2) {
    uint64_t a = h->a, b = h->b;
    a ^= a >> 33; a *= 0xc4ceb9fe1a85ec53ull; a ^= a >> 33;
    b ^= b >> 31; b *= 0xd6e8feb86659fd93ull; b ^= b >> 32;
    *h1 = a;
    *h2 = b;
}

static void tn__hash128(const void *data, size_t n, uint64_t *h1, uint64_t *h2) {
    tn__h128 h = { 0xcbf29ce484222325ull, 0x9e3779b97f4a7c15ull };
    tn__hash_feed(&h, data, n);
    tn__hash_final(&h, h1, h2);
}

/* cache_dir, $XDG_CACHE_HOME/tensor or $HOME/.cache/tensor, allocated;
   NULL when none is set (or no memory: then no disk cache either). */
static char *tn__cuda_cache_dir(void) {
    const tn_config *cfg = tn_get_config();
    const char *x;
    tn__sb b = TN__SB_INIT;
    if (cfg->cache_dir && *cfg->cache_dir) tn__sb_puts(&b, cfg->cache_dir);
    else if ((x = getenv("XDG_CACHE_HOME")) && *x) tn__sb_printf(&b, "%s/tensor", x);
    else if ((x = getenv("HOME")) && *x) tn__sb_printf(&b, "%s/.cache/tensor", x);
    if (b.oom) tn__free(b.s);
    return b.oom ? NULL : b.s;
}

/* Creates dir and its parents; false with errno set when it cannot be made,
   or exists but is not a directory (ENOTDIR). */
static bool tn__mkdirs(const char *dir) {
    size_t n = strlen(dir);
    char *p = (char *)tn__malloc(n + 1);
    if (!p) { errno = ENOMEM; return false; }
    memcpy(p, dir, n + 1);
    bool ok = true;
    for (char *s = p + 1; *s && ok; s++) {
        if (*s != '/') continue;
        *s = 0;
        ok = mkdir(p, 0755) == 0 || errno == EEXIST;
        *s = '/';
    }
    if (ok) ok = mkdir(p, 0755) == 0 || errno == EEXIST;
    struct stat st;
    if (ok && stat(p, &st) != 0) ok = false;
    else if (ok && !S_ISDIR(st.st_mode)) { errno = ENOTDIR; ok = false; }
    int e = errno;
    tn__free(p);
    errno = e;
    return ok;
}

#define TN__KFILE_MAGIC "TNCUBIN1"
typedef struct tn__kfile_header {
    char magic[8];
    uint64_t key_len, cubin_len, cubin_h1, cubin_h2;
} tn__kfile_header;

static bool tn__read_all(int fd, void *buf, size_t n) {
    char *p = (char *)buf;
    while (n) {
        ssize_t k = read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}
static bool tn__write_all(int fd, const void *buf, size_t n) {
    const char *p = (const char *)buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) errno = EIO;          /* nothing written, no error: say so */
        if (k <= 0) return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* `path` opened for reading if it is a regular file, else -1. Non-blocking
   open: a FIFO there (nothing writing to it) would otherwise wait forever. */
static int tn__open_regular(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat st;
    int fl;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (fl = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A verified cubin from `path`, or NULL (missing, not a regular file, or
   rejected as corrupt). */
static void *tn__kfile_load(const char *path, const char *key, size_t key_len, size_t *size, bool *rejected) {
    *rejected = false;
    int fd = tn__open_regular(path);
    if (fd < 0) return NULL;
    tn__kcache.stats.disk_reads++;
    struct stat st;
    tn__kfile_header h;
    void *bin = NULL;
    char *k = NULL;
    bool ok = fstat(fd, &st) == 0 && tn__read_all(fd, &h, sizeof h) && !memcmp(h.magic, TN__KFILE_MAGIC, 8) &&
              h.key_len == key_len && h.cubin_len > 0 && h.cubin_len < ((uint64_t)1 << 32) &&
              (uint64_t)st.st_size == sizeof h + h.key_len + h.cubin_len;
    if (ok) ok = (k = (char *)tn__malloc(key_len)) != NULL && tn__read_all(fd, k, key_len) && !memcmp(k, key, key_len);
    if (ok) ok = (bin = tn__malloc((size_t)h.cubin_len)) != NULL && tn__read_all(fd, bin, (size_t)h.cubin_len);
    if (ok) {
        uint64_t a, b;
        tn__hash128(bin, (size_t)h.cubin_len, &a, &b);
        ok = a == h.cubin_h1 && b == h.cubin_h2;
    }
    close(fd);
    tn__free(k);
    if (!ok) { tn__free(bin); *rejected = true; return NULL; }
    *size = (size_t)h.cubin_len;
    return bin;
}

/* Writes atomically: unique temporary file, then rename over `path`, unless
   something other than a regular file is there (left alone). On failure
   `why` says which step failed and why ("creating a file: Permission denied"). */
static bool tn__kfile_store(const char *dir, const char *path, const char *key, size_t key_len, const void *bin, size_t size,
                            char *why, size_t why_cap) {
    if (!tn__mkdirs(dir)) { snprintf(why, why_cap, "creating it: %s", strerror(errno)); return false; }
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(why, why_cap, "%s is not a regular file; left in place", strrchr(path, '/') + 1);
        return false;
    }
    static int counter;
    tn__sb tmp = TN__SB_INIT;
    tn__sb_printf(&tmp, "%s.tmp.%ld.%d", path, (long)getpid(), __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    int fd = tmp.oom ? -1 : open(tmp.s, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        snprintf(why, why_cap, "creating a file: %s", strerror(tmp.oom ? ENOMEM : errno));
        tn__free(tmp.s);
        return false;
    }
    tn__kfile_header h;
    memcpy(h.magic, TN__KFILE_MAGIC, 8);
    h.key_len = key_len;
    h.cubin_len = size;
    tn__hash128(bin, size, &h.cubin_h1, &h.cubin_h2);
    const char *step = "writing";
    bool ok = tn__write_all(fd, &h, sizeof h) && tn__write_all(fd, key, key_len) && tn__write_all(fd, bin, size);
    int e = errno;
    if (close(fd) != 0 && ok) { ok = false; e = errno; }
    if (ok && rename(tmp.s, path) != 0) { ok = false; e = errno; step = "renaming into place"; }
    if (!ok) {
        unlink(tmp.s);
        snprintf(why, why_cap, "%s: %s", step, strerror(e));
    }
    tn__free(tmp.s);
    return ok;
}

/* True the first time `dir` is found unusable (tn__kcache.mu held): each
   directory is said once, not once per kernel. */
static bool tn__kcache_first_report(const char *dir) {
    for (int i = 0; i < tn__kcache.n_reported; i++)
        if (!strcmp(tn__kcache.reported[i], dir)) return false;
    size_t n = strlen(dir);
    char **grown = (char **)tn__realloc(tn__kcache.reported, ((size_t)tn__kcache.n_reported + 1) * sizeof *grown);
    char *c = grown ? (char *)tn__malloc(n + 1) : NULL;
    if (grown) tn__kcache.reported = grown;
    if (c) {
        memcpy(c, dir, n + 1);
        tn__kcache.reported[tn__kcache.n_reported++] = c;
    }
    return true;
}

/* The cache entry of `src` compiled for `arch`: from memory, else from disk,
   else compiled (and stored). The entry lives until tn_shutdown. */
/* This thread's compiles (tn_backend.compile_clock; tensor.h >>compile_note). */
static TN__THREAD_LOCAL struct { uint64_t kernels, stored; double seconds; } tn__kclock;
static void tn__cuda_compile_clock(uint64_t *kernels, double *seconds, uint64_t *stored, char *dir, size_t dir_cap) {
    *kernels = tn__kclock.kernels;
    *seconds = tn__kclock.seconds;
    *stored = tn__kclock.stored;
    char *d = dir_cap > 1 ? tn__cuda_cache_dir() : NULL;
    tn__strlcpy(dir, d ? d : "", dir_cap);
    tn__free(d);
}

/* user: extra NVRTC options (a raw module's, at most TN__CUDA_USER_OPTS characters), part of the key. */
static tn_result tn__cuda_kernel_get_opts(const char *src, const char *arch, bool fast_math, const char *user, tn__kentry **out) {
    *out = NULL;
    tn_result r = tn__nvrtc_load(tn__cuda.driver_version / 1000);
    if (r != TN_OK) return r;
    char opts[560 + TN__CUDA_USER_OPTS + 1], head[640 + TN__CUDA_USER_OPTS + 1];
    tn__nvrtc_options(arch, fast_math, user, opts, sizeof opts);
    int hl = snprintf(head, sizeof head, "%s\n%s\nnvrtc %d.%d\n", arch, opts, tn__nvrtc.major, tn__nvrtc.minor);
    size_t sl = strlen(src), key_len = (size_t)hl + sl;
    tn__h128 hs = { 0xcbf29ce484222325ull, 0x9e3779b97f4a7c15ull };
    tn__hash_feed(&hs, head, (size_t)hl);
    tn__hash_feed(&hs, src, sl);
    uint64_t h1, h2;
    tn__hash_final(&hs, &h1, &h2);

    pthread_mutex_lock(&tn__kcache.mu);
    tn__kentry **slot = &tn__kcache.bucket[h1 % TN__KCACHE_BUCKETS];
    for (tn__kentry *e = *slot; e; e = e->next)
        if (e->h1 == h1 && e->h2 == h2 && e->key_len == key_len && !memcmp(e->key, head, (size_t)hl) &&
            !memcmp(e->key + hl, src, sl)) {
            tn__kcache.stats.mem_hits++;
            pthread_mutex_unlock(&tn__kcache.mu);
            *out = e;
            return TN_OK;
        }
    char *key = (char *)tn__malloc(key_len + 1);
    if (!key) { pthread_mutex_unlock(&tn__kcache.mu); return tn__err(TN_ERR_OOM, "tn_cuda: no memory for a kernel cache key"); }
    memcpy(key, head, (size_t)hl);
    memcpy(key + hl, src, sl + 1);
    /* Miss: the lock is held through disk and compile so one thread compiles
       a kernel once; compiles are rare. */
    char *dir = tn__cuda_cache_dir(), *path = NULL, why[256] = "";
    if (dir) {
        tn__sb p = TN__SB_INIT;
        tn__sb_printf(&p, "%s/%016llx%016llx.cubin", dir, (unsigned long long)h1, (unsigned long long)h2);
        if (p.oom) tn__free(p.s);
        else path = p.s;
    }
    size_t size = 0;
    void *bin = NULL;
    if (path) {
        bool rejected = false;
        bin = tn__kfile_load(path, key, key_len, &size, &rejected);
        if (bin) tn__kcache.stats.disk_hits++;
        if (rejected) tn__kcache.stats.disk_rejects++;
    }
    bool report = false;
    if (!bin) {
        struct timespec t0, t1;
        timespec_get(&t0, TIME_UTC);
        r = tn__nvrtc_compile(src, arch, fast_math, user, &bin, &size);
        timespec_get(&t1, TIME_UTC);
        tn__kclock.seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (r == TN_OK) { tn__kcache.stats.compiles++; tn__kclock.kernels++; }
        if (r == TN_OK && path) {
            if (tn__kfile_store(dir, path, key, key_len, bin, size, why, sizeof why)) { tn__kcache.stats.disk_writes++; tn__kclock.stored++; }
            else report = tn__kcache_first_report(dir);
        }
    }
    tn__kentry *e = r == TN_OK ? (tn__kentry *)tn__calloc(1, sizeof *e) : NULL;
    if (e) {
        e->h1 = h1; e->h2 = h2; e->key = key; e->key_len = key_len; e->cubin = bin; e->size = size;
        e->next = *slot;
        *slot = e;
    }
    pthread_mutex_unlock(&tn__kcache.mu);
    if (report) {   /* logged unlocked: the callback may call back in */
        size_t dl = strlen(dir);
        bool cut = dl > 600;          /* the head and the tail of a very long one */
        tn__warn("tn_cuda: kernel cache_dir '%.*s%s%s' is not used (%s); kernels are compiled without the disk cache",
                 cut ? 300 : (int)dl, dir, cut ? "..." : "", cut ? dir + dl - 200 : "", why);
    }
    tn__free(dir);
    tn__free(path);
    if (!e) {
        tn__free(key);
        tn__free(bin);
        return r != TN_OK ? r : tn__err(TN_ERR_OOM, "tn_cuda: no memory for a kernel cache entry");
    }
    *out = e;
    return TN_OK;
}

static tn_result tn__cuda_kernel_get(const char *src, const char *arch, bool fast_math, tn__kentry **out) {
    return tn__cuda_kernel_get_opts(src, arch, fast_math, NULL, out);
}

/* Unloads device D's modules (its streams idle) and forgets its functions. */
static void tn__cuda_kmod_clear(tn__cuda_dev *D) {
    bool bound = tn__cuda_bind(D) == TN_OK;
    pthread_mutex_lock(&D->kmod.mu);
    for (int i = 0; i < TN__KMOD_BUCKETS; i++) {
        for (tn__kmod *m = D->kmod.bucket[i], *nx; m; m = nx) {
            nx = m->next;
            if (m->owns_mod && bound) tn__cuda.cu.cuModuleUnload(m->mod);
            tn__free(m->name);
            tn__free(m);
        }
        D->kmod.bucket[i] = NULL;
    }
    pthread_mutex_unlock(&D->kmod.mu);
    if (!bound) tn_clear_error();
}

/* Frees every entry (every device's modules first). */
static void tn__cuda_kcache_clear(void) {
    for (int d = 0; d < TN__CUDA_MAX_DEVICES; d++) {
        tn__cuda_dev *D = __atomic_load_n(&tn__cuda.dev[d], __ATOMIC_ACQUIRE);
        if (D) tn__cuda_kmod_clear(D);
    }
    pthread_mutex_lock(&tn__kcache.mu);
    for (int i = 0; i < TN__KCACHE_BUCKETS; i++) {
        for (tn__kentry *e = tn__kcache.bucket[i], *nx; e; e = nx) {
            nx = e->next;
            tn__free(e->key);
            tn__free(e->cubin);
            tn__free(e);
        }
        tn__kcache.bucket[i] = NULL;
    }
    for (int i = 0; i < tn__kcache.n_reported; i++) tn__free(tn__kcache.reported[i]);
    tn__free(tn__kcache.reported);
    tn__kcache.reported = NULL;
    tn__kcache.n_reported = 0;
    pthread_mutex_unlock(&tn__kcache.mu);
}

/* Public for tests and custom ops: the cubin of CUDA C `src` (which must
   define its kernels extern "C") for `arch` ("sm_90"; NULL: the device's),
   through both caches. The pointer stays valid until tn_shutdown(). */
TN_API tn_result tn_cuda_compile(const char *src, const char *arch, const void **cubin, size_t *size) {
    if (!src || !cubin || !size) return tn__err(TN_ERR_NULL, "tn_cuda_compile: src, cubin or size is NULL");
    if (!arch) {   /* the configured device's */
        tn__cuda_dev *D = tn_cuda_init() == TN_OK ? tn__cuda_dev_get(tn__cuda.ordinal) : NULL;
        if (!D) return tn__err(TN_ERR_DEVICE, "tn_cuda_compile: no arch given and no usable GPU (%s)", tn__cuda.status);
        arch = D->arch;
    }
    tn__kentry *e;
    tn_result r = tn__cuda_kernel_get(src, arch, tn_get_config()->fast_math, &e);
    if (r != TN_OK) return r;
    *cubin = e->cubin;
    *size = e->size;
    return TN_OK;
}

/* >>cuda_memory: caching device allocator --------------------------------- */
/* A steady loop allocates the same sizes every call: freed blocks are kept
   in lists by rounded size and handed out again, so no cuMemAlloc happens
   after the first call. A freed block remembers the stream that freed it
   (the freeing thread's current stream, where its last work was queued):
   reused on that stream it needs nothing; reused on another, an event is
   recorded on the old stream then and the new one waits for it, so work
   queued on stream A never sees its block handed to stream B early.
   On out-of-memory the cache is returned to the driver and the call retried.
   Each device has its own pools (tn__cuda_dev.dmem, .hmem). */

static size_t tn__dround(size_t n) {
    if (n <= ((size_t)1 << 20)) return (n + 511) & ~(size_t)511;
    return (n + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
}
static size_t tn__dhash(tn__CUdeviceptr p) { return (size_t)((p >> 9) * 0x9e3779b97f4a7c15ull >> 54) % TN__DMAP_BUCKETS; }

static void tn__dmem_release_cache(tn__cuda_dmem *M) {   /* with M->mu held, the device's context bound */
    if (M->free_list) tn__cuda.cu.cuCtxSynchronize();   /* no stream still uses a cached block */
    for (tn__dblock *b = M->free_list, *nx; b; b = nx) {
        nx = b->next;
        if (b->ev) tn__cuda.cu.cuEventDestroy_v2(b->ev);
        tn__cuda.cu.cuMemFree_v2(b->ptr);
        tn__free(b);
    }
    M->free_list = NULL;
    M->cached_bytes = 0;
}

/* Set while this thread captures a CUDA graph (the >>cuda_replay section): an
   allocation then fails, since the graph would keep its pointer after the
   block went back to the cache. */
static TN__THREAD_LOCAL bool tn__cuda_capturing;

/* A cached block freed on another stream is handed to stream s only after
   everything queued on its stream so far (its last use included): an event
   recorded there now, waited for by s. Nothing is recorded at the free, so
   a loop on one stream makes no driver call. Function streams live until
   shutdown, which empties the cache first. */
static bool tn__dblock_order(tn__dblock *b, tn__CUstream s) {
    if (!b->ev && tn__cuda.cu.cuEventCreate(&b->ev, TN__CU_EVENT_DISABLE_TIMING) != TN__CUDA_SUCCESS) { b->ev = NULL; return false; }
    return tn__cuda.cu.cuEventRecord(b->ev, b->stream) == TN__CUDA_SUCCESS &&
           tn__cuda.cu.cuStreamWaitEvent(s, b->ev, 0) == TN__CUDA_SUCCESS;
}

static void *tn__cuda_alloc(int device, size_t bytes) {
    if (tn__cuda_capturing) {
        tn__err(TN_ERR_UNSUPPORTED, "tn_cuda: %zu bytes of device memory asked for while capturing a CUDA graph", bytes);
        return NULL;
    }
    tn__cuda_dev *D;
    if (tn__cuda_enter(device, &D, "tn_cuda: allocating device memory") != TN_OK) {
        tn__err(TN_ERR_DEVICE, "tn_cuda: cannot allocate on device %d (%s)", device, tn_last_error());
        return NULL;
    }
    tn__cuda_dmem *M = &D->dmem;
    size_t want = tn__dround(bytes);
    tn__CUstream s = tn__cuda_stream(D);
    pthread_mutex_lock(&M->mu);
    tn__dblock **pp = &M->free_list, *b = NULL;
    for (; *pp; pp = &(*pp)->next)      /* exact size on this stream first: the steady-loop case */
        if ((*pp)->size == want && (*pp)->stream == s) { b = *pp; *pp = b->next; break; }
    for (pp = &M->free_list; !b && *pp; pp = &(*pp)->next)    /* another stream's: after its work so far */
        if ((*pp)->size == want && tn__dblock_order(*pp, s)) {
            b = *pp;
            *pp = b->next;
            break;
        }
    if (b) M->cached_bytes -= b->size;
    else {
        b = (tn__dblock *)tn__calloc(1, sizeof *b);
        /* a request the device cannot hold fails here, without a failing driver
           call (compute-sanitizer reports those as errors) */
        size_t mfree = 0, mtotal = 0;
        if (tn__cuda.cu.cuMemGetInfo_v2(&mfree, &mtotal) == TN__CUDA_SUCCESS && want > mfree && M->free_list) {
            tn__dmem_release_cache(M);
            tn__cuda.cu.cuMemGetInfo_v2(&mfree, &mtotal);
        }
        bool fits = mtotal == 0 || want <= mfree;
        tn__CUresult r = TN__CUDA_ERROR_OUT_OF_MEMORY;
        if (b && fits) r = tn__cuda.cu.cuMemAlloc_v2(&b->ptr, want);
        if (b && r == TN__CUDA_ERROR_OUT_OF_MEMORY && M->free_list) {
            tn__dmem_release_cache(M);
            r = tn__cuda.cu.cuMemAlloc_v2(&b->ptr, want);
        }
        if (!b || r != TN__CUDA_SUCCESS) {
            char eb[160];
            size_t live = M->live_bytes;
            pthread_mutex_unlock(&M->mu);
            tn__free(b);
            tn__err(r == TN__CUDA_ERROR_OUT_OF_MEMORY || !b ? TN_ERR_OOM : TN_ERR_DEVICE,
                    "tn_cuda: cuMemAlloc of %zu bytes on cuda%d failed: %s (%zu bytes in use by tensor.h)", want,
                    device, tn__cu_errstr(r, eb, sizeof eb), live);
            return NULL;
        }
        b->size = want;
        M->driver_allocs++;
    }
    size_t h = tn__dhash(b->ptr);
    b->next = M->live[h];
    M->live[h] = b;
    M->live_bytes += b->size;
    pthread_mutex_unlock(&M->mu);
    return (void *)(uintptr_t)b->ptr;
}

static void tn__cuda_free(int device, void *ptr) {
    if (!ptr) return;
    tn__cuda_dev *D = device >= 0 && device < TN__CUDA_MAX_DEVICES ? __atomic_load_n(&tn__cuda.dev[device], __ATOMIC_ACQUIRE) : NULL;
    TN_ASSERT(D && "tn__cuda_free: no such device");
    if (!D) return;
    tn__cuda_dmem *M = &D->dmem;
    tn__CUdeviceptr p = (tn__CUdeviceptr)(uintptr_t)ptr;
    bool bound = tn__cuda_bind(D) == TN_OK;
    pthread_mutex_lock(&M->mu);
    tn__dblock **pp = &M->live[tn__dhash(p)];
    while (*pp && (*pp)->ptr != p) pp = &(*pp)->next;
    tn__dblock *b = *pp;
    TN_ASSERT(b && "tn__cuda_free: pointer not from tn__cuda_alloc");
    if (b) {
        *pp = b->next;
        M->live_bytes -= b->size;
        b->stream = tn__cuda_stream(D);
        b->next = M->free_list;
        M->free_list = b;
        M->cached_bytes += b->size;
    }
    pthread_mutex_unlock(&M->mu);
    if (!bound) tn_clear_error();
}

/* Copies on the stream of the device involved, then waits (the tn_device_ops contract). */
static tn_result tn__cuda_copy(void *dst, int dst_device, const void *src, int src_device, size_t bytes) {
    if (dst_device == TN_HOST && src_device == TN_HOST) { if (bytes) memcpy(dst, src, bytes); return TN_OK; }
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(dst_device != TN_HOST ? dst_device : src_device, &D, "tn_cuda: copying");
    if (r != TN_OK) return r;
    if (!bytes) return TN_OK;
    tn__CUstream s = tn__cuda_stream(D);
    if (dst_device == TN_HOST)
        TN__CU_CHECK(tn__cuda.cu.cuMemcpyDtoHAsync_v2(dst, (tn__CUdeviceptr)(uintptr_t)src, bytes, s), "copying device to host");
    else if (src_device == TN_HOST)
        TN__CU_CHECK(tn__cuda.cu.cuMemcpyHtoDAsync_v2((tn__CUdeviceptr)(uintptr_t)dst, src, bytes, s), "copying host to device");
    else
        TN__CU_CHECK(tn__cuda.cu.cuMemcpyDtoDAsync_v2((tn__CUdeviceptr)(uintptr_t)dst, (tn__CUdeviceptr)(uintptr_t)src, bytes, s),
                     "copying device to device");
    TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(s), "waiting for a copy");
    return TN_OK;
}

/* Pinned host blocks (cuMemAllocHost) for arrays that device-to-host copies
   land in (a function's host outputs): a caller that frees each result gives
   its block back here, and the next call takes it again, so a steady loop
   makes no driver call. Cached blocks wait in buckets by rounded size, in the
   pool of the device the copies come from; a tn_buffer made from one frees
   through tn__cuda_host_free (its free_fn, with that device). */
static size_t tn__hbucket(size_t size) { return (size_t)((size >> 9) * 0x9e3779b97f4a7c15ull >> 58) % TN__HMEM_BUCKETS; }

static void tn__hmem_release_cache(tn__cuda_hmem *M) {   /* with M->mu held, the device's context bound */
    for (int k = 0; k < TN__HMEM_BUCKETS; k++) {
        for (tn__hblock *b = M->bucket[k], *nx; b; b = nx) {
            nx = b->next;
            tn__cuda.cu.cuMemFreeHost(b->ptr);
            tn__free(b);
        }
        M->bucket[k] = NULL;
    }
    for (tn__hblock *b = M->spare, *nx; b; b = nx) { nx = b->next; tn__free(b); }
    M->spare = NULL;
    M->cached_bytes = 0;
}

/* NULL (error set) when pinned memory cannot be had: the caller falls back. */
static void *tn__cuda_host_alloc(int device, size_t bytes) {
    tn__cuda_dev *D;
    if (tn__cuda_enter(device, &D, "tn_cuda: allocating pinned memory") != TN_OK) return NULL;
    tn__cuda_hmem *M = &D->hmem;
    size_t want = tn__dround(bytes ? bytes : 1);
    pthread_mutex_lock(&M->mu);
    tn__hblock **pp = &M->bucket[tn__hbucket(want)], *b = NULL;
    for (; *pp; pp = &(*pp)->next)
        if ((*pp)->size == want) { b = *pp; *pp = b->next; break; }
    void *p = NULL;
    if (b) {
        p = b->ptr;
        M->cached_bytes -= want;
        b->next = M->spare;
        M->spare = b;
    } else {
        tn__CUresult r = tn__cuda.cu.cuMemAllocHost_v2(&p, want);
        if (r != TN__CUDA_SUCCESS && M->cached_bytes) {
            tn__hmem_release_cache(M);
            r = tn__cuda.cu.cuMemAllocHost_v2(&p, want);
        }
        if (r != TN__CUDA_SUCCESS) {
            char eb[160];
            pthread_mutex_unlock(&M->mu);
            tn__err(TN_ERR_OOM, "tn_cuda: cuMemAllocHost of %zu bytes failed: %s", want, tn__cu_errstr(r, eb, sizeof eb));
            return NULL;
        }
        M->driver_allocs++;
    }
    M->live_bytes += want;
    pthread_mutex_unlock(&M->mu);
    return p;
}

/* Back to the cache of `device` (any thread; the copy that filled it was waited for). */
static void tn__cuda_host_free(int device, void *p, size_t bytes) {
    if (!p) return;
    tn__cuda_dev *D = device >= 0 && device < TN__CUDA_MAX_DEVICES ? __atomic_load_n(&tn__cuda.dev[device], __ATOMIC_ACQUIRE) : NULL;
    TN_ASSERT(D && "tn__cuda_host_free: no such device");
    if (!D) return;
    tn__cuda_hmem *M = &D->hmem;
    size_t want = tn__dround(bytes ? bytes : 1);
    pthread_mutex_lock(&M->mu);
    tn__hblock *b = M->spare;
    if (b) M->spare = b->next;
    else b = (tn__hblock *)tn__malloc(sizeof *b);
    if (!b) tn__cuda.cu.cuMemFreeHost(p);     /* no node to keep it: give it back */
    else {
        b->ptr = p;
        b->size = want;
        size_t k = tn__hbucket(want);
        b->next = M->bucket[k];
        M->bucket[k] = b;
        M->cached_bytes += want;
    }
    M->live_bytes -= want;
    pthread_mutex_unlock(&M->mu);
}

/* >>cuda_launch: run a tn_ew_program on device arrays ------------------------ */

/* Kernels a node has used, by layout: the steady state finds its function
   here without generating or hashing source. */
#define TN__EW_STATE_KERNELS 8
typedef struct tn__cuda_ew_state {
    const tn_ew_program *prog;
    int n;
    struct { tn__cuda_layout L; tn__CUfunction fn; } k[TN__EW_STATE_KERNELS];
} tn__cuda_ew_state;

/* Function `name` of a cache entry on device D (its module loaded once per
   device, its context bound). */
static tn_result tn__cuda_entry_function(tn__cuda_dev *D, tn__kentry *e, const char *name, tn__CUfunction *fn) {
    *fn = NULL;
    size_t h = (size_t)(e->h1 % TN__KMOD_BUCKETS);
    pthread_mutex_lock(&D->kmod.mu);
    tn__kmod *m = D->kmod.bucket[h], *same = NULL;
    for (; m; m = m->next) {
        if (m->entry != (const void *)e) continue;
        if (!strcmp(m->name, name)) break;
        same = m;
    }
    tn__CUresult r = TN__CUDA_SUCCESS;
    if (!m) {
        size_t nl = strlen(name) + 1;
        m = (tn__kmod *)tn__calloc(1, sizeof *m);
        char *nm = m ? (char *)tn__malloc(nl) : NULL;
        if (!nm) {
            tn__free(m);
            pthread_mutex_unlock(&D->kmod.mu);
            return tn__err(TN_ERR_OOM, "tn_cuda: no memory for kernel %s", name);
        }
        memcpy(nm, name, nl);
        m->entry = e;
        m->name = nm;
        if (same) m->mod = same->mod;
        else if ((r = tn__cuda.cu.cuModuleLoadData(&m->mod, e->cubin)) == TN__CUDA_SUCCESS) m->owns_mod = true;
        if (r == TN__CUDA_SUCCESS) r = tn__cuda.cu.cuModuleGetFunction(&m->fn, m->mod, name);
        if (r == TN__CUDA_SUCCESS) { m->next = D->kmod.bucket[h]; D->kmod.bucket[h] = m; }
        else {
            if (m->owns_mod) tn__cuda.cu.cuModuleUnload(m->mod);
            tn__free(nm);
            tn__free(m);
            m = NULL;
        }
    }
    if (m) *fn = m->fn;
    pthread_mutex_unlock(&D->kmod.mu);
    if (r != TN__CUDA_SUCCESS) {
        char eb[160];
        return tn__err(TN_ERR_DEVICE, "tn_cuda: loading kernel %s for %s (cuda%d) failed: %s", name, D->arch, D->ordinal,
                       tn__cu_errstr(r, eb, sizeof eb));
    }
    return TN_OK;
}

static tn_result tn__cuda_ew_function(tn__cuda_dev *D, tn__cuda_ew_state *st, const tn__cuda_layout *L, tn__CUfunction *fn) {
    for (int i = 0; i < st->n; i++)
        if (st->k[i].L.kind == L->kind && st->k[i].L.ndim == L->ndim && st->k[i].L.scalar_in == L->scalar_in) {
            *fn = st->k[i].fn;
            return TN_OK;
        }
    char *src = NULL;
    tn_result r = tn__cuda_ew_source(st->prog, L, &src);
    if (r != TN_OK) return r;
    if (tn_get_config()->print_kernels) fprintf(stderr, "tensor.h: kernel source:\n%s\n", src);
    tn__kentry *e;
    r = tn__cuda_kernel_get(src, D->arch, tn_get_config()->fast_math, &e);
    tn__free(src);
    if (r == TN_OK) r = tn__cuda_entry_function(D, e, "tn_ew", fn);
    if (r != TN_OK) return r;
    int slot = st->n < TN__EW_STATE_KERNELS ? st->n++ : TN__EW_STATE_KERNELS - 1;
    st->k[slot].L = *L;
    st->k[slot].fn = *fn;
    return TN_OK;
}

/* Runs the program over out[0]'s shape on out[0]'s device, on this thread's
   stream there (async). */
static tn_result tn__cuda_ew_run(tn__cuda_ew_state *st, tn_array *const *in, tn_array *const *out, const char *who) {
    const tn_ew_program *p = st->prog;
    const int n_in = p->n_in, nops = p->n_in + p->n_out;
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    const tn_array *arr[TN__CUDA_MAX_OPERANDS];
    const tn_array *o0 = out[0];
    int nd = o0->ndim;
    int64_t total = 1;
    for (int d = 0; d < nd; d++) total *= o0->shape[d];
    for (int o = 0; o < nops; o++) {
        const tn_array *a = arr[o] = o < n_in ? in[o] : out[o - n_in];
        tn_dtype want = o < n_in ? p->in_dtype[o] : p->out_dtype[o - n_in];
        if (a->device != D->ordinal)
            return tn__err(TN_ERR_DEVICE, "%s: %s %d lives on %s, not cuda%d", who, o < n_in ? "input" : "output",
                           o < n_in ? o : o - n_in, a->device == TN_HOST ? "the host" : "another device", D->ordinal);
        if (a->dtype != want)
            return tn__err(TN_ERR_DTYPE, "%s: %s %d is %s, the kernel expects %s", who, o < n_in ? "input" : "output",
                           o < n_in ? o : o - n_in, tn_dtype_name(a->dtype), tn_dtype_name(want));
        if (a->ndim > nd) return tn__err(TN_ERR_SHAPE, "%s: operand %d has more dims than the output", who, o);
    }
    if (total == 0) return TN_OK;
    /* Layout: contiguous when every output is contiguous and every input is
       contiguous of the same size or a single element, and every draw's
       index is the element's (its row of strides is the output's). */
    tn__cuda_layout L = { TN__CUDA_CONTIG, 0, 0 };
    for (int o = 0; o < nops && L.kind == TN__CUDA_CONTIG; o++) {
        int64_t size = tn_array_size(arr[o]);
        if (o < n_in && size == 1) { L.scalar_in |= (uint64_t)1 << o; continue; }
        if (size != total || !tn_array_is_contiguous(arr[o])) L.kind = TN__CUDA_STRIDED;
    }
    int64_t shape[TN_MAX_DIMS], st_[TN__CUDA_MAX_OPERANDS][TN_MAX_DIMS];
    int nrows = nops;
    for (int k = 0; p->rand && k < p->n_instr; k++) {
        if (p->instr[k].op != TN_OP_RANDOM) continue;
        if (nrows == TN__CUDA_MAX_OPERANDS) return tn__err(TN_ERR_UNSUPPORTED, "%s: too many operands and draws for one kernel", who);
        tn__ew_rand_strides(p, k, in, nd, o0->shape, st_[nrows]);
        int64_t full = 1;
        for (int d = nd - 1; d >= 0; d--) {
            if (o0->shape[d] != 1 && st_[nrows][d] != full) L.kind = TN__CUDA_STRIDED;
            full *= o0->shape[d];
        }
        nrows++;
    }
    /* Strided: align dims to the output, drop size-1 dims, merge chained dims. */
    int cd = 0;
    if (L.kind == TN__CUDA_STRIDED) {
        L.scalar_in = 0;
        for (int d = 0; d < nd; d++) {
            shape[d] = o0->shape[d];
            for (int o = 0; o < nops; o++) {
                const tn_array *a = arr[o];
                int ad = d - (nd - a->ndim);
                int64_t es = (int64_t)tn_dtype_size(a->dtype);
                st_[o][d] = ad < 0 || a->shape[ad] == 1 ? 0 : a->strides[ad] / es;
                if (shape[d] != 1 && ad >= 0 && a->shape[ad] != 1 && a->strides[ad] % es)
                    return tn__err(TN_ERR_UNSUPPORTED, "%s: operand %d has a stride of %lld bytes, not a multiple of its "
                                   "element size", who, o, (long long)a->strides[ad]);
            }
        }
        cd = tn__merge_dims(nd, shape, nrows, st_);
        if (cd == 0) { cd = 1; shape[0] = 1; for (int o = 0; o < nrows; o++) st_[o][0] = 0; }
        L.ndim = cd;
    }
    tn__CUfunction fn;
    if ((r = tn__cuda_ew_function(D, st, &L, &fn)) != TN_OK) return r;

    /* Parameters: n or the args struct (int64 fields only: no padding), then pointers. */
    int64_t args[1 + TN_MAX_DIMS + TN__CUDA_MAX_OPERANDS * TN_MAX_DIMS];
    void *ptrs[TN__CUDA_MAX_OPERANDS];
    void *params[1 + TN__CUDA_MAX_OPERANDS];
    args[0] = total;
    if (L.kind == TN__CUDA_STRIDED) {
        for (int d = 0; d < cd; d++) args[1 + d] = shape[d];
        for (int o = 0; o < nrows; o++)
            for (int d = 0; d < cd; d++) args[1 + cd + o * cd + d] = st_[o][d];
    }
    params[0] = args;
    for (int o = 0; o < nops; o++) { ptrs[o] = arr[o]->data; params[1 + o] = &ptrs[o]; }
    int64_t work = L.kind == TN__CUDA_CONTIG ? (total + 3) / 4 : total;
    int64_t blocks = (work + 255) / 256, cap = (int64_t)D->sm_count * 16;
    if (blocks > cap && cap > 0) blocks = cap;
    if (blocks < 1) blocks = 1;
    TN__CU_CHECK(tn__cuda.cu.cuLaunchKernel(fn, (unsigned)blocks, 1, 1, 256, 1, 1, 0, tn__cuda_stream(D), params, NULL), who);
    if (tn_get_config()->launch_blocking)
        TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(D)), who);
    return TN_OK;
}

/* >>cuda_reduce ======================================================= */
/* Reductions and softmax as generated CUDA kernels -----------------
   Included by tensor_cuda.h inside its implementation section (after the
   elementwise code generator, the NVRTC path and the kernel cache, which it
   reuses). Ops: Sum, Prod, Mean, Max, Min, Argmax, Argmin, All, Any,
   LogSumExp (i[0] axis bit mask, i[1] keepdims) and Softmax, LogSoftmax
   (i[0] axis), each with an optional fused elementwise prologue (node->ext,
   a tn_ew_program whose output 0 is the value reduced; its code is the
   elementwise generator's tn_eval, so fused equals unfused). A reduction's
   epilogue (ext->epi; ext then may be an identity prologue) is tn_epi,
   applied by TN_FIN to the result as the reduction alone stores it; its
   inputs are sources after the folded ones, with stride 0 along the box,
   read at the output's offsets. The epilogue changes neither the layout
   class nor the split (the split's wave comes from the kernel without it,
   and a kept dim an epilogue input widens does not count as outputs), so
   the result has the unfused reduction's bits.

   Plan. The CPU planner (tn__rplan_build, the >>ops_reduce section) moves the
   reduced axes innermost, drops size-1 dims and merges chained dims: every
   output element folds a "box" of N elements given by nr reduced dims; the M
   outputs are indexed by nk kept dims. Strides are passed in elements. Kernel
   classes (the cache key holds the class, nk, nr, dtypes, op and prologue,
   never a size):
     ROW  a group of G threads (a warp, or a 256-thread block) per output:
          threads stride along the box, then warp shuffles (and shared memory
          across warps). A box that is one contiguous run (nr 1, unit stride;
          broadcast prologue inputs allowed) is read with 16-byte vector loads,
          about four in flight per thread (four of one input, two each of
          two, one each of more), when the run start is aligned.
     COL  the innermost kept dim has the smallest stride (sum over axis 0 of
          a row-major matrix): 32 consecutive outputs per block row, so a
          warp reads 32 neighbours; 8 rows of threads split the box.
   Few outputs and a long box (a full reduction): the box is cut into S
   chunks, one block each; every block writes its partial accumulator, and
   the last block to finish an output (an integer atomic counter, reset by
   that block) combines the S partials in a fixed order and writes the
   result. No float atomics: results are deterministic, run to run.
   Softmax: one group per row (ROW) or one thread per row (COL); pass 1 is an
   online max-and-sum (one read), pass 2 writes exp(x - m) / s or
   x - m - log(s). It reads each element before writing it, so y may alias x.

   Numerics (documented difference from the CPU kernels, which accumulate
   floats in double sequentially): float16/float32 accumulate in float32 along
   a tree (per-thread partials, then shuffles), whose error grows like
   log(N) rather than N; float64 accumulates in double; ints in wrapping
   int64 (exact, as the CPU); mean and logsumexp of ints in double. Special
   values match the CPU exactly: NaN propagates through max/min/logsumexp/
   softmax, argmax/argmin give the first NaN or else the first extremum (ties
   are broken by index, so the tree order cannot change the answer),
   logsumexp of a box whose max is not finite is that max, softmax of a row
   with no finite max is NaN, empty sums give 0, prod 1, mean NaN, all true,
   any false, logsumexp -inf; max/min/argmax/argmin of an empty box is an
   error. logsumexp and softmax use an online max (the running sum is
   rescaled when the max grows) instead of the CPU's two passes. */
#ifndef TN__CUDA_REDUCE_INCLUDED
#define TN__CUDA_REDUCE_INCLUDED

enum { TN__CRED_ROW = 1, TN__CRED_COL, TN__CRED_SMROW, TN__CRED_SMCOL };

/* The structure a reduction kernel is specialised for. vec (ROW, nr 1):
   every source has unit stride along the box, except those in bmask, which
   are constant along it (a broadcast prologue input). */
typedef struct tn__cred_layout {
    int kind, nk, nr;
    bool vec;
    uint64_t bmask;
} tn__cred_layout;

#define TN__CRED_THREADS 256
#define TN__CRED_ACC_BYTES 16      /* upper bound of sizeof(tn_acc) in every kernel */

static bool tn__cred_is_softmax(int op) { return op == TN_OP_SOFTMAX || op == TN_OP_LOG_SOFTMAX; }
static bool tn__cred_is_reduce(int op) { return op >= TN_OP_SUM && op <= TN_OP_LOGSUMEXP; }

/* Accumulator dtype: the register dtype the fold computes in. */
static tn_dtype tn__cred_acc_dtype(int op, tn_dtype xt) {
    switch (op) {
    case TN_OP_ALL: case TN_OP_ANY: return TN_I32;       /* a flag, as C int */
    case TN_OP_MEAN: case TN_OP_LOGSUMEXP: case TN_OP_SOFTMAX: case TN_OP_LOG_SOFTMAX:
        return xt == TN_F16 || xt == TN_F32 ? TN_F32 : TN_F64;
    default: return xt == TN_F16 || xt == TN_F32 ? TN_F32 : xt == TN_F64 ? TN_F64 : TN_I64;
    }
}

static const char *tn__cred_cname(tn_dtype at) {
    return at == TN_F32 ? "float" : at == TN_F64 ? "double" : at == TN_I32 ? "int" : "int64_t";
}

/* The accumulator struct and its device functions: tn_init, tn_fold (one
   element x of register type RT at box index k), tn_comb (order-free
   combination), tn_shfl (shuffle down), tn_ldp (an L2 load of a partial
   another block wrote) and, for reductions, tn_fin (store the result). */
static void tn__cred_emit_acc(tn__sb *b, int op, tn_dtype xt, tn_dtype yt) {
    tn_dtype at = tn__cred_acc_dtype(op, xt);
    const char *AT = tn__cred_cname(at), *RT = tn__cuda_ctype(xt);
    bool fl = at == TN_F32 || at == TN_F64;
    const char *INF = at == TN_F64 ? "__longlong_as_double(0x7ff0000000000000LL)" : "__int_as_float(0x7f800000)";
    const char *EXP = at == TN_F64 ? "exp" : "expf";
    bool arg = op == TN_OP_ARGMAX || op == TN_OP_ARGMIN;
    bool lse = op == TN_OP_LOGSUMEXP || tn__cred_is_softmax(op);
    tn__sb_printf(b, "typedef %s AT;\ntypedef %s RT;\n", AT, RT);
    if (arg) tn__sb_puts(b, "struct tn_acc { AT v; int64_t g; };\n");
    else if (lse) tn__sb_puts(b, "struct tn_acc { AT m; AT s; };\n");
    else tn__sb_puts(b, "struct tn_acc { AT v; };\n");
    tn__sb_printf(b, "#define TN_INF %s\n", INF);

    /* init, fold and combine: the CPU's table (tn__rfold_src, the >>reduce_kinds
       section of tensor_ops.h), the float variant where the accumulator is
       a float. D or I names a.v, G a.g; a thread's first index wins ties, so
       argmax's g starts past every index. */
    const tn__rfold_text *R = lse ? NULL : &tn__rfold_src[tn__rk_of(op)];
    tn__sb_puts(b, "#define TN__RINF TN_INF\n");
    if (lse) tn__sb_puts(b, "static __device__ __forceinline__ void tn_init(tn_acc &a) { a.m = -TN_INF; a.s = (AT)0; }\n");
    else if (arg) tn__sb_printf(b, "static __device__ __forceinline__ void tn_init(tn_acc &a) { a.v = (AT)(%s); a.g = 9223372036854775807LL; }\n", fl ? R->init_d : R->init_i);
    else tn__sb_printf(b, "static __device__ __forceinline__ void tn_init(tn_acc &a) { a.v = (AT)(%s); }\n", fl ? R->init_d : R->init_i);
    if (lse) {
        /* online max and sum of exp(x - m); -inf adds nothing (and never
           computes -inf - -inf); a NaN max sticks; a +inf max makes s
           meaningless, and the result is then the max itself */
        tn__sb_printf(b,
            "static __device__ __forceinline__ void tn_fold(tn_acc &a, const RT x, const int64_t k) {\n"
            "    const AT v = (AT)x; (void)k;\n"
            "    if (a.m != a.m) return;\n"
            "    if (v != v) { a.m = v; return; }\n"
            "    if (v > a.m) { a.s = (a.m == -TN_INF ? (AT)0 : a.s * %s(a.m - v)) + (AT)1; a.m = v; }\n"
            "    else if (v != -TN_INF) a.s += %s(v - a.m);\n"
            "}\n"
            "static __device__ __forceinline__ void tn_comb(tn_acc &a, const tn_acc &b) {\n"
            "    if (a.m != a.m) return;\n"
            "    if (b.m != b.m) { a = b; return; }\n"
            "    const AT m = b.m > a.m ? b.m : a.m;\n"
            "    if (m == -TN_INF) return;\n"
            "    if (m == TN_INF) { a.m = m; return; }\n"
            "    a.s = (a.m == -TN_INF ? (AT)0 : a.s * %s(a.m - m)) + (b.m == -TN_INF ? (AT)0 : b.s * %s(b.m - m));\n"
            "    a.m = m;\n"
            "}\n", EXP, EXP, EXP, EXP);
    } else {
        const char *acc = fl ? "D" : "I", *g = arg ? " int64_t &G = a.g;" : "";
        tn__sb_printf(b, "static __device__ __forceinline__ void tn_fold(tn_acc &a, const RT x, const int64_t k) {\n"
                         "    AT &%s = a.v;%s const %s v = (%s)x; const int64_t K = k; (void)K;\n    %s;\n}\n",
                      acc, g, fl ? "AT" : "RT", fl ? "AT" : "RT", fl ? R->step_f : R->step_i);
        tn__sb_printf(b, "static __device__ __forceinline__ void tn_comb(tn_acc &a, const tn_acc &b) {\n"
                         "    AT &%s = a.v;%s const AT B%s = b.v;%s\n    %s;\n}\n",
                      acc, g, acc, arg ? " const int64_t BG = b.g;" : "", fl ? R->comb_f : R->comb_i);
    }

    /* shuffles and partial loads, field by field */
    const char *f1 = arg ? "v" : lse ? "m" : "v", *f2 = arg ? "g" : lse ? "s" : NULL;
    tn__sb_printf(b, "static __device__ __forceinline__ tn_acc tn_shfl(const tn_acc &a, int off) {\n"
                     "    tn_acc r; r.%s = __shfl_down_sync(0xffffffffu, a.%s, off);", f1, f1);
    if (f2) tn__sb_printf(b, " r.%s = __shfl_down_sync(0xffffffffu, a.%s, off);", f2, f2);
    tn__sb_printf(b, " return r; }\n"
                     "static __device__ __forceinline__ tn_acc tn_bcast(const tn_acc &a) {\n"
                     "    tn_acc r; r.%s = __shfl_sync(0xffffffffu, a.%s, 0);", f1, f1);
    if (f2) tn__sb_printf(b, " r.%s = __shfl_sync(0xffffffffu, a.%s, 0);", f2, f2);
    tn__sb_printf(b, " return r; }\n"
                     "static __device__ __forceinline__ tn_acc tn_ldp(const tn_acc *p) {\n"
                     "    tn_acc r; r.%s = __ldcg(&p->%s);", f1, f1);
    if (f2) tn__sb_printf(b, " r.%s = __ldcg(&p->%s);", f2, f2);
    tn__sb_puts(b, " return r; }\n"
                   "static __device__ __forceinline__ tn_acc tn_wred(tn_acc a) {\n"
                   "#pragma unroll\n"
                   "    for (int off = 16; off > 0; off >>= 1) { const tn_acc b = tn_shfl(a, off); tn_comb(a, b); }\n"
                   "    return a; }\n"
                   /* whole-block reduction: the result is valid in thread 0 */
                   "static __device__ __forceinline__ tn_acc tn_bred(tn_acc a, tn_acc *sh) {\n"
                   "    a = tn_wred(a);\n"
                   "    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = a;\n"
                   "    __syncthreads();\n"
                   "    if (threadIdx.x < 32) {\n"
                   "        if (threadIdx.x < blockDim.x / 32) a = sh[threadIdx.x]; else tn_init(a);\n"
                   "        a = tn_wred(a);\n"
                   "    }\n"
                   "    __syncthreads();\n"
                   "    return a; }\n");

    if (tn__cred_is_softmax(op)) return;
    /* the result, stored as the CPU's tn__rfinish + tn__rstore would */
    tn_dtype from = at;
    char e[160];
    switch (op) {
    case TN_OP_MEAN:
        if (yt == TN_F16 || yt == TN_F32) { snprintf(e, sizeof e, "(float)((double)a.v / (double)n)"); from = TN_F32; }
        else { snprintf(e, sizeof e, "((double)a.v / (double)n)"); from = TN_F64; }
        break;
    case TN_OP_LOGSUMEXP:
        snprintf(e, sizeof e, "(isfinite(a.m) ? (double)a.m + log((double)a.s) : (double)a.m)");
        from = TN_F64;
        if (yt == TN_F16) { snprintf(e, sizeof e, "(float)(isfinite(a.m) ? (double)a.m + log((double)a.s) : (double)a.m)"); from = TN_F32; }
        break;
    case TN_OP_ARGMAX: case TN_OP_ARGMIN: snprintf(e, sizeof e, "a.g"); from = TN_I64; break;
    case TN_OP_ALL: case TN_OP_ANY: snprintf(e, sizeof e, "(int64_t)a.v"); from = TN_I64; break;
    default: snprintf(e, sizeof e, "a.v"); break;
    }
    tn__sb_printf(b, "static __device__ __forceinline__ %s tn_rval(const tn_acc &a, const int64_t n) {\n"
                     "    (void)n; return ", tn__cuda_stype(yt));
    tn__cuda_store(b, e, from, yt);
    tn__sb_puts(b, "; }\n");
}

/* TN_FIN(p): stores the result of accumulator a at p, through the epilogue
   when there is one (tn_epi: its input 0 the result as the reduction stores
   it, the others read at output offsets f[nf..], the kernel's in<nf>...). */
static void tn__cred_emit_fin(tn__sb *b, const tn_ew_program *epi, int nf, int ns, const tn_dtype *sd, tn_dtype rt) {
    if (!epi) { tn__sb_puts(b, "#define TN_FIN(p) (*(p) = tn_rval(a, A.N))\n"); return; }
    tn__cuda_emit_eval_as(b, epi, "tn_epi");
    tn__sb_printf(b, "static __device__ __forceinline__ %s tn_epilogue(const %s r, const int64_t *f", tn__cuda_stype(epi->out_dtype[0]),
                  tn__cuda_stype(rt));
    for (int i = nf; i < ns; i++) tn__sb_printf(b, ", const %s *in%d", tn__cuda_stype(sd[i]), i);
    tn__sb_printf(b, ") {\n    %s t0;\n    tn_epi(", tn__cuda_stype(epi->out_dtype[0]));
    tn__cuda_load(b, rt, "r");
    for (int i = nf; i < ns; i++) {
        char lv[48];
        snprintf(lv, sizeof lv, "in%d[f[%d]]", i, i);
        tn__sb_puts(b, ", ");
        tn__cuda_load(b, sd[i], lv);
    }
    tn__sb_puts(b, ", &t0);\n    return t0;\n}\n#define TN_FIN(p) (*(p) = tn_epilogue(tn_rval(a, A.N), f");
    for (int i = nf; i < ns; i++) tn__sb_printf(b, ", in%d", i);
    tn__sb_puts(b, "))\n");
}

/* Emits `const RT x = ...;` from the sources' register values reg[i]: the
   source itself, or the prologue's output 0 (stored as its dtype and read
   back, as the CPU's scratch buffer does). */
static void tn__cred_emit_x(tn__sb *b, const tn_ew_program *p, tn_dtype xt, char (*reg)[160], const char *ind) {
    if (!p) { tn__sb_printf(b, "%sconst RT x = %s;\n", ind, reg[0]); return; }
    tn__sb_printf(b, "%s%s t0", ind, tn__cuda_stype(p->out_dtype[0]));
    for (int j = 1; j < p->n_out; j++) tn__sb_printf(b, "; %s t%d", tn__cuda_stype(p->out_dtype[j]), j);
    tn__sb_printf(b, ";\n%stn_eval(", ind);
    for (int i = 0; i < p->n_in; i++) tn__sb_printf(b, "%s%s", i ? ", " : "", reg[i]);
    for (int j = 0; j < p->n_out; j++) tn__sb_printf(b, ", &t%d", j);
    tn__sb_printf(b, ");\n%sconst RT x = ", ind);
    tn__cuda_load(b, xt, "t0");
    tn__sb_puts(b, ";\n");
    (void)xt;
}

/* reg[i] = the loaded value of source i at in_i[f[i] + <off>], where off is a
   printf format taking the source index (e.g. "k * A.rx[%d][0]"). */
static void tn__cred_regs(char (*reg)[160], int ns, const tn_dtype *sd, const char *offfmt) {
    for (int i = 0; i < ns; i++) {
        char off[64], lv[128];
        tn__sb t = TN__SB_INIT;
        snprintf(off, sizeof off, offfmt, i);
        snprintf(lv, sizeof lv, "in%d[f[%d] + %s]", i, i, off);
        tn__cuda_load(&t, sd[i], lv);
        snprintf(reg[i], 160, "%s", t.s ? t.s : "0");
        tn__free(t.s);
    }
}

/* Kept-dim offsets of output o (f[i] per source, yo into y) and box offsets
   of box element k (g[i]); N-d index paths, unrolled by the compiler. */
static void tn__cred_emit_index(tn__sb *b) {
    tn__sb_puts(b,
        "static __device__ __forceinline__ void tn_koff(const tn_args &A, int64_t o, int64_t *f, int64_t &yo) {\n"
        "    yo = 0;\n"
        "#pragma unroll\n"
        "    for (int i = 0; i < TN_NS; i++) f[i] = 0;\n"
        "#pragma unroll\n"
        "    for (int d = TN_NK - 1; d >= 0; d--) {\n"
        "        const int64_t q = d ? o / A.kn[d] : 0, c = o - q * A.kn[d];\n"
        "        o = q; yo += c * A.ky[d];\n"
        "#pragma unroll\n"
        "        for (int i = 0; i < TN_NS; i++) f[i] += c * A.kx[i][d];\n"
        "    }\n"
        "}\n"
        "static __device__ __forceinline__ void tn_roff(const tn_args &A, int64_t k, int64_t *g) {\n"
        "#pragma unroll\n"
        "    for (int i = 0; i < TN_NS; i++) g[i] = 0;\n"
        "#pragma unroll\n"
        "    for (int d = TN_NR - 1; d >= 0; d--) {\n"
        "        const int64_t q = d ? k / A.rn[d] : 0, c = k - q * A.rn[d];\n"
        "        k = q;\n"
        "#pragma unroll\n"
        "        for (int i = 0; i < TN_NS; i++) g[i] += c * A.rx[i][d];\n"
        "    }\n"
        "}\n");
}

/* The fold of box elements k in [k0, k1) stepping by `step` from `first`. */
static void tn__cred_emit_loop(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                               int nr, const char *first, const char *step, const char *ind) {
    char reg[TN__CUDA_MAX_OPERANDS][160];
    tn__sb_printf(b, "%sfor (int64_t k = %s; k < k1; k += %s) {\n", ind, first, step);
    if (nr == 1) tn__cred_regs(reg, ns, sd, "k * A.rx[%d][0]");
    else {
        tn__sb_printf(b, "%s    int64_t g[TN_NS]; tn_roff(A, k, g);\n", ind);
        tn__cred_regs(reg, ns, sd, "g[%d]");
    }
    char ind2[32];
    snprintf(ind2, sizeof ind2, "%s    ", ind);
    tn__cred_emit_x(b, p, xt, reg, ind2);
    tn__sb_printf(b, "%s    tn_fold(a, x, k);\n%s}\n", ind, ind);
}

/* reg[i] = source i's value: the register s<i> of a broadcast source
   (bmask), else the load of the lvalue fmt makes of i (fmt takes i once or
   twice, e.g. "X%d.v[j]" or "in%d[f[%d] + k]"). */
static void tn__cred_vregs(char (*reg)[160], int ns, const tn_dtype *sd, uint64_t bmask, const char *fmt) {
    for (int i = 0; i < ns; i++) {
        tn__sb t = TN__SB_INIT;
        char lv[64];
        snprintf(lv, sizeof lv, fmt, i, i);
        if (bmask >> i & 1) tn__sb_printf(&t, "s%d", i); else tn__cuda_load(&t, sd[i], lv);
        snprintf(reg[i], 160, "%s", t.s ? t.s : "0");
        tn__free(t.s);
    }
}

/* ROW's vector path: 16-byte loads of every unit-stride source, about four
   vectors in flight per thread, when every run start is aligned. */
static void tn__cred_emit_vec(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd, uint64_t bmask) {
    size_t widest = 1;
    for (int i = 0; i < ns; i++)
        if (!(bmask >> i & 1) && tn_dtype_size(sd[i]) > widest) widest = tn_dtype_size(sd[i]);
    int vec = (int)(16 / widest), streams = 0;
    for (int i = 0; i < ns; i++) streams += !(bmask >> i & 1);
    /* vectors of each input in flight a thread: about four in all (more
       inputs' registers cap the blocks an SM holds: the bench's chain feeding
       a sum streams 3 inputs, and four vectors of each made 87% of copy on
       an H100, two 91%, one 92-93%) */
    const int U = streams >= 3 ? 1 : streams == 2 ? 2 : 4;
    char reg[TN__CUDA_MAX_OPERANDS][160];
    for (int i = 0; i < ns; i++) {
        if (!(bmask >> i & 1)) continue;
        char lv[64];
        tn__sb_printf(b, "        const %s s%d = ", tn__cuda_ctype(sd[i]), i);
        snprintf(lv, sizeof lv, "in%d[f[%d]]", i, i);
        tn__cuda_load(b, sd[i], lv);
        tn__sb_puts(b, ";\n");
    }
    tn__sb_puts(b, "        int64_t ks = k0;\n        if (((0");
    for (int i = 0; i < ns; i++)
        if (!(bmask >> i & 1))
            tn__sb_printf(b, " | ((unsigned long long)(in%d + f[%d] + k0) & %d)", i, i, (int)(vec * tn_dtype_size(sd[i])) - 1);
    tn__sb_printf(b, ")) == 0) {\n            const int64_t nv = (k1 - k0) / %d;\n", vec);
    for (int i = 0; i < ns; i++)
        if (!(bmask >> i & 1))
            tn__sb_printf(b, "            const tn_v%d *p%d = (const tn_v%d *)(in%d + f[%d] + k0);\n", (int)sd[i], i, (int)sd[i], i, i);
    tn__sb_puts(b, "            int64_t v = lane;\n");
    if (U == 1) {
        /* one vector of each input a step, the next step's loads issued
           before this step's arithmetic, so loads stay in flight while a
           long prologue computes (the chain feeding a sum: 62 registers, 4
           blocks an SM instead of 48 and 5, and 73.6 -> 72.9 us on an H100;
           capping the registers at 48 or 40 spilled: 85 and 92 us). Each
           thread folds the elements of the loops below in their order, so
           the bits are theirs. */
        tn__sb_puts(b, "            if (v < nv) {\n");
        for (int i = 0; i < ns; i++)
            if (!(bmask >> i & 1)) tn__sb_printf(b, "                tn_v%d X%d = p%d[v];\n", (int)sd[i], i, i);
        tn__sb_puts(b, "                for (;;) {\n"
                       "                    const int64_t vn = v + G;\n"
                       "                    const bool more = vn < nv;\n");
        for (int i = 0; i < ns; i++)
            if (!(bmask >> i & 1)) tn__sb_printf(b, "                    tn_v%d Y%d; if (more) Y%d = p%d[vn];\n", (int)sd[i], i, i, i);
        tn__sb_printf(b, "#pragma unroll\n                    for (int j = 0; j < %d; j++) {\n"
                         "                        const int64_t k = k0 + v * %d + j;\n", vec, vec);
        tn__cred_vregs(reg, ns, sd, bmask, "X%d.v[j]");
        tn__cred_emit_x(b, p, xt, reg, "                        ");
        tn__sb_puts(b, "                        tn_fold(a, x, k);\n                    }\n                    if (!more) break;\n");
        for (int i = 0; i < ns; i++)
            if (!(bmask >> i & 1)) tn__sb_printf(b, "                    X%d = Y%d;\n", i, i);
        tn__sb_puts(b, "                    v = vn;\n                }\n            }\n");
    } else {
        tn__sb_printf(b, "            for (; v + %d * G < nv; v += %d * G) {\n", U - 1, U);
        for (int i = 0; i < ns; i++)
            if (!(bmask >> i & 1))
                tn__sb_printf(b, "                tn_v%d X%d[%d];\n"
                                 "#pragma unroll\n"
                                 "                for (int u = 0; u < %d; u++) X%d[u] = p%d[v + u * G];\n", (int)sd[i], i, U, U, i, i);
        tn__sb_printf(b, "#pragma unroll\n                for (int u = 0; u < %d; u++)\n"
                         "#pragma unroll\n                for (int j = 0; j < %d; j++) {\n"
                         "                    const int64_t k = k0 + (v + u * G) * %d + j;\n", U, vec, vec);
        tn__cred_vregs(reg, ns, sd, bmask, "X%d[u].v[j]");
        tn__cred_emit_x(b, p, xt, reg, "                    ");
        tn__sb_puts(b, "                    tn_fold(a, x, k);\n                }\n            }\n");
        tn__sb_puts(b, "            for (; v < nv; v += G) {\n");
        for (int i = 0; i < ns; i++)
            if (!(bmask >> i & 1)) tn__sb_printf(b, "                const tn_v%d X%d = p%d[v];\n", (int)sd[i], i, i);
        tn__sb_printf(b, "#pragma unroll\n                for (int j = 0; j < %d; j++) {\n"
                         "                    const int64_t k = k0 + v * %d + j;\n", vec, vec);
        tn__cred_vregs(reg, ns, sd, bmask, "X%d.v[j]");
        tn__cred_emit_x(b, p, xt, reg, "                    ");
        tn__sb_puts(b, "                    tn_fold(a, x, k);\n                }\n            }\n");
    }
    tn__sb_printf(b, "            ks = k0 + nv * %d;\n        }\n", vec);
    /* the tail (or everything, unaligned): scalar, broadcast sources as registers */
    tn__sb_puts(b, "        for (int64_t k = ks + lane; k < k1; k += G) {\n");
    tn__cred_vregs(reg, ns, sd, bmask, "in%d[f[%d] + k]");
    tn__cred_emit_x(b, p, xt, reg, "            ");
    tn__sb_puts(b, "            tn_fold(a, x, k);\n        }\n");
}

/* Kernel parameters: one struct of int64 fields (no padding), then pointers. */
static void tn__cred_emit_args(tn__sb *b, int nk, int nr, int ns) {
    int nk1 = nk ? nk : 1;
    tn__sb_printf(b, "enum { TN_NK = %d, TN_NR = %d, TN_NS = %d };\n", nk, nr, ns);
    tn__sb_printf(b, "struct tn_args { int64_t M, N, S, C, G, ry; int64_t kn[%d], ky[%d], rn[%d]; int64_t kx[%d][%d], rx[%d][%d]; };\n",
                  nk1, nk1, nr, ns, nk1, ns, nr);
}
static int tn__cred_args_count(int nk, int nr, int ns) { int nk1 = nk ? nk : 1; return 6 + 2 * nk1 + nr + ns * (nk1 + nr); }

static void tn__cred_emit_params(tn__sb *b, int ns, const tn_dtype *sd, tn_dtype yt, bool restrict_) {
    const char *R = restrict_ ? "__restrict__ " : "";
    tn__sb_puts(b, "const tn_args A");
    for (int i = 0; i < ns; i++) tn__sb_printf(b, ", const %s *%sin%d", tn__cuda_stype(sd[i]), R, i);
    tn__sb_printf(b, ", %s *%sy", tn__cuda_stype(yt), R);
}

/* ROW: group of G threads per work item (output o, chunk s). With S > 1 the
   block (G = 256) writes its partial and the last block of o combines. */
static void tn__cred_emit_row(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                              tn_dtype yt, const tn__cred_layout *L) {
    tn__sb_puts(b, "extern \"C\" __global__ void __launch_bounds__(256) tn_red(");
    tn__cred_emit_params(b, ns, sd, yt, true);
    tn__sb_puts(b, ", tn_acc *__restrict__ part, unsigned int *__restrict__ cnt) {\n"
                   "    __shared__ tn_acc sh[8];\n"
                   "    __shared__ bool last;\n"
                   "    const int G = (int)A.G, lane = threadIdx.x & (G - 1);\n"
                   "    const int64_t item = (int64_t)blockIdx.x * (256 / G) + threadIdx.x / G;\n"
                   "    const bool active = item < A.M * A.S;\n"
                   "    int64_t o = 0, s = 0, yo = 0, f[TN_NS];\n"
                   "    tn_acc a; tn_init(a);\n"
                   "    if (active) {\n"
                   "        o = item / A.S; s = item - o * A.S;\n"
                   "        tn_koff(A, o, f, yo);\n"
                   "        const int64_t k0 = s * A.C, k1 = k0 + A.C < A.N ? k0 + A.C : A.N;\n");
    if (L->vec) tn__cred_emit_vec(b, p, xt, ns, sd, L->bmask);
    else tn__cred_emit_loop(b, p, xt, ns, sd, L->nr, "k0 + lane", "G", "        ");
    tn__sb_puts(b, "    }\n"
                   "    if (G == 32) a = tn_wred(a); else a = tn_bred(a, sh);\n"
                   "    if (A.S == 1) { if (active && lane == 0) TN_FIN(y + yo); return; }\n"
                   /* split (G == 256, one item per block, active for the whole block) */
                   "    if (threadIdx.x == 0) { part[s * A.M + o] = a; __threadfence(); last = atomicAdd(&cnt[o], 1u) == (unsigned int)A.S - 1; }\n"
                   "    __syncthreads();\n"
                   "    if (!last) return;\n"
                   "    __threadfence();\n"
                   "    tn_init(a);\n"
                   "    for (int64_t j = threadIdx.x; j < A.S; j += 256) { const tn_acc b = tn_ldp(part + j * A.M + o); tn_comb(a, b); }\n"
                   "    a = tn_bred(a, sh);\n"
                   "    if (threadIdx.x == 0) { TN_FIN(y + yo); cnt[o] = 0; }\n"
                   "}\n");
}

/* COL: 32 consecutive outputs per block (threadIdx.x & 31), 8 rows of threads
   split chunk blockIdx.y of the box; the last block of a column group
   combines the S partials when S > 1. */
static void tn__cred_emit_col(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                              tn_dtype yt, const tn__cred_layout *L) {
    tn__sb_puts(b, "extern \"C\" __global__ void __launch_bounds__(256) tn_red(");
    tn__cred_emit_params(b, ns, sd, yt, true);
    tn__sb_puts(b, ", tn_acc *__restrict__ part, unsigned int *__restrict__ cnt) {\n"
                   "    __shared__ tn_acc sh[8][33];\n"
                   "    __shared__ bool last;\n"
                   "    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;\n"
                   "    const int64_t o = (int64_t)blockIdx.x * 32 + tx, s = blockIdx.y;\n"
                   "    const bool active = o < A.M;\n"
                   "    int64_t yo = 0, f[TN_NS];\n"
                   "    tn_acc a; tn_init(a);\n"
                   "    if (active) {\n"
                   "        tn_koff(A, o, f, yo);\n"
                   "        const int64_t k0 = s * A.C, k1 = k0 + A.C < A.N ? k0 + A.C : A.N;\n");
    tn__cred_emit_loop(b, p, xt, ns, sd, L->nr, "k0 + ty", "8", "        ");
    tn__sb_puts(b, "    }\n"
                   "    sh[ty][tx] = a;\n"
                   "    __syncthreads();\n"
                   "    if (ty == 0) for (int j = 1; j < 8; j++) tn_comb(a, sh[j][tx]);\n"
                   "    if (A.S == 1) { if (ty == 0 && active) TN_FIN(y + yo); return; }\n"
                   "    if (ty == 0 && active) part[s * A.M + o] = a;\n"
                   "    __threadfence();\n"
                   "    __syncthreads();\n"
                   "    if (threadIdx.x == 0) last = atomicAdd(&cnt[blockIdx.x], 1u) == (unsigned int)A.S - 1;\n"
                   "    __syncthreads();\n"
                   "    if (!last) return;\n"
                   "    __threadfence();\n"
                   "    tn_init(a);\n"
                   "    if (active) for (int64_t j = ty; j < A.S; j += 8) { const tn_acc b = tn_ldp(part + j * A.M + o); tn_comb(a, b); }\n"
                   "    sh[ty][tx] = a;\n"
                   "    __syncthreads();\n"
                   "    if (ty == 0) {\n"
                   "        for (int j = 1; j < 8; j++) tn_comb(a, sh[j][tx]);\n"
                   "        if (active) TN_FIN(y + yo);\n"
                   "    }\n"
                   "    if (threadIdx.x == 0) cnt[blockIdx.x] = 0;\n"
                   "}\n");
}

/* Softmax pass 2 for box element k: y = exp(x - m) / s, or x - m - log(s);
   NaN when the row has no finite max (as the CPU's 0/0). */
static void tn__cred_emit_smwrite(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                                  tn_dtype yt, int op, const char *ind) {
    char reg[TN__CUDA_MAX_OPERANDS][160], e[160];
    tn__cred_regs(reg, ns, sd, "k * A.rx[%d][0]");
    tn__sb_printf(b, "%sfor (int64_t k = k0; k < k1; k += step) {\n", ind);
    char ind2[32];
    snprintf(ind2, sizeof ind2, "%s    ", ind);
    tn__cred_emit_x(b, p, xt, reg, ind2);
    tn__sb_printf(b, "%s    const AT r = !ok ? (AT)__int_as_float(0x7fc00000) : %s;\n", ind,
                  op == TN_OP_LOG_SOFTMAX ? "(AT)x - a.m - ls" : (tn__cred_acc_dtype(op, xt) == TN_F64 ? "exp((AT)x - a.m) * inv" : "expf((AT)x - a.m) * inv"));
    snprintf(e, sizeof e, "r");
    tn__sb_printf(b, "%s    y[yo + k * A.ry] = ", ind);
    tn__cuda_store(b, e, tn__cred_acc_dtype(op, xt), yt);
    tn__sb_printf(b, ";\n%s}\n", ind);
}

/* Softmax kernels: ROW (a group per row) or COL (a thread per row). No
   __restrict__: y may alias x (each element is read before it is written). */
static void tn__cred_emit_softmax(tn__sb *b, const tn_ew_program *p, tn_dtype xt, int ns, const tn_dtype *sd,
                                  tn_dtype yt, int op, const tn__cred_layout *L) {
    bool row = L->kind == TN__CRED_SMROW;
    tn__sb_puts(b, "extern \"C\" __global__ void __launch_bounds__(256) tn_red(");
    tn__cred_emit_params(b, ns, sd, yt, false);
    tn__sb_puts(b, ") {\n"
                   "    __shared__ tn_acc sh[8];\n");
    if (row)
        tn__sb_puts(b, "    const int G = (int)A.G, lane = threadIdx.x & (G - 1);\n"
                       "    const int64_t o = (int64_t)blockIdx.x * (256 / G) + threadIdx.x / G;\n"
                       "    const int64_t k0 = lane, step = G;\n");
    else
        tn__sb_puts(b, "    const int64_t o = (int64_t)blockIdx.x * 256 + threadIdx.x;\n"
                       "    const int64_t k0 = 0, step = 1;\n");
    tn__sb_puts(b, "    const bool active = o < A.M;\n"
                   "    const int64_t k1 = A.N;\n"
                   "    int64_t yo = 0, f[TN_NS];\n"
                   "    tn_acc a; tn_init(a);\n"
                   "    if (active) {\n"
                   "        tn_koff(A, o, f, yo);\n");
    tn__cred_emit_loop(b, p, xt, ns, sd, 1, "k0", "step", "        ");
    tn__sb_puts(b, "    }\n");
    if (row)
        tn__sb_puts(b, "    if (G == 32) a = tn_bcast(tn_wred(a));\n"
                       "    else { a = tn_bred(a, sh); if (threadIdx.x == 0) sh[0] = a; __syncthreads(); a = sh[0]; }\n");
    else
        tn__sb_puts(b, "    (void)sh;\n");
    tn__sb_puts(b, "    if (!active) return;\n"
                   "    const bool ok = isfinite(a.m);\n"
                   "    const AT ls = log(a.s), inv = (AT)1 / a.s;\n"
                   "    (void)ls; (void)inv;\n");
    tn__cred_emit_smwrite(b, p, xt, ns, sd, yt, op, "    ");
    tn__sb_puts(b, "}\n");
}

/* Checks op, dtypes and layout before generating, so bad input is an error. */
static tn_result tn__cred_check(int op, tn_dtype xt, const tn_ew_program *p, const tn__cred_layout *L) {
    if (!tn__cred_is_reduce(op) && !tn__cred_is_softmax(op))
        return tn__err(TN_ERR_INVALID, "tn_cuda reduce codegen: op %d is not a reduction or softmax", op);
    if (p) {
        tn_result r = tn__cuda_check_program(p);
        if (r != TN_OK) return r;
        int ne = p->epi ? p->epi->n_in - 1 : 0;
        if (p->n_in < 1 || ne < 0 || p->n_in + ne > TN__RED_MAX_SRC)
            return tn__err(TN_ERR_UNSUPPORTED, "tn_cuda reduce codegen: a prologue of %d inputs and an epilogue of %d more (1 to %d in all)",
                           p->n_in, ne, TN__RED_MAX_SRC);
        if (p->epi) {
            if ((r = tn__cuda_check_program(p->epi)) != TN_OK) return r;
            if (tn__cred_is_softmax(op) || p->epi->in_dtype[0] != tn__reduce_dtype(op, p->out_dtype[0]))
                return tn__err(TN_ERR_INVALID, "tn_cuda reduce codegen: an epilogue reading %s after %s", tn_dtype_name(p->epi->in_dtype[0]),
                               tn__op_def(op)->name);
        }
        xt = p->out_dtype[0];
    }
    if (!tn__cuda_stype(xt)) return tn__err(TN_ERR_DTYPE, "tn_cuda reduce codegen: input dtype %s", tn_dtype_name(xt));
    bool sm = tn__cred_is_softmax(op);
    bool kind_ok = sm ? (L->kind == TN__CRED_SMROW || L->kind == TN__CRED_SMCOL)
                      : (L->kind == TN__CRED_ROW || L->kind == TN__CRED_COL);
    if (!kind_ok || L->nk < 0 || L->nk > TN_MAX_DIMS || L->nr < 1 || L->nr > TN_MAX_DIMS || (sm && L->nr != 1) ||
        (L->vec && (L->kind != TN__CRED_ROW || L->nr != 1)) || (L->kind == TN__CRED_COL && L->nk < 1))
        return tn__err(TN_ERR_INVALID, "tn_cuda reduce codegen: layout kind %d nk %d nr %d vec %d does not fit %s",
                       L->kind, L->nk, L->nr, (int)L->vec, tn__op_def(op)->name);
    return TN_OK;
}

/* The CUDA C source of the kernel "tn_red" for op over input dtype xt (the
   prologue's output 0 when p is given; its sources are p's inputs, then its
   epilogue's after input 0, if p->epi). An identity prologue (an epilogue
   alone) folds its input as it is. Caller frees. */
static tn_result tn__cuda_reduce_source(int op, tn_dtype xt, const tn_ew_program *p, const tn__cred_layout *L, char **out) {
    *out = NULL;
    tn_result r = tn__cred_check(op, xt, p, L);
    if (r != TN_OK) return r;
    const tn_ew_program *epi = p ? p->epi : NULL;
    if (p) xt = p->out_dtype[0];
    if (tn__ew_program_is_identity(p)) p = NULL;
    const int nf = p ? p->n_in : 1, ns = nf + (epi ? epi->n_in - 1 : 0);
    tn_dtype sd[TN__RED_MAX_SRC];
    for (int i = 0; i < nf; i++) sd[i] = p ? p->in_dtype[i] : xt;
    for (int i = nf; i < ns; i++) sd[i] = epi->in_dtype[1 + i - nf];
    const tn_dtype rt = tn__reduce_dtype(op, xt), yt = epi ? epi->out_dtype[0] : rt;
    static const char *kn[] = { "", "row", "column", "softmax row", "softmax column" };
    tn__sb b = TN__SB_INIT;
    tn__sb_printf(&b, "/* tensor.h %s kernel: %s of %s -> %s, %s layout, %d kept dims, %d reduced dims%s, %d sources%s%s */\n",
                  tn__cred_is_softmax(op) ? "softmax" : "reduction", tn__op_def(op)->name, tn_dtype_name(xt),
                  tn_dtype_name(yt), kn[L->kind], L->nk, L->nr, L->vec ? ", vector loads" : "", ns, p ? ", fused prologue" : "",
                  epi ? ", fused epilogue" : "");
    tn__cuda_prelude(&b);
    if (p) tn__cuda_emit_eval(&b, p);
    tn__cred_emit_acc(&b, op, xt, rt);
    tn__cred_emit_args(&b, L->nk, L->nr, ns);
    tn__cred_emit_index(&b);
    if (!tn__cred_is_softmax(op)) tn__cred_emit_fin(&b, epi, nf, ns, sd, rt);
    if (L->vec) {
        size_t widest = 1;
        for (int i = 0; i < ns; i++)
            if (!(L->bmask >> i & 1) && tn_dtype_size(sd[i]) > widest) widest = tn_dtype_size(sd[i]);
        int vec = (int)(16 / widest);
        for (tn_dtype t = TN_BOOL; t < TN_DTYPE_COUNT; t = (tn_dtype)(t + 1)) {
            bool used = false;
            for (int i = 0; i < ns; i++) used |= !(L->bmask >> i & 1) && sd[i] == t;
            if (used)
                tn__sb_printf(&b, "struct __align__(%d) tn_v%d { %s v[%d]; };\n", (int)(vec * tn_dtype_size(t)), (int)t,
                              tn__cuda_stype(t), vec);
        }
    }
    switch (L->kind) {
    case TN__CRED_ROW: tn__cred_emit_row(&b, p, xt, ns, sd, yt, L); break;
    case TN__CRED_COL: tn__cred_emit_col(&b, p, xt, ns, sd, yt, L); break;
    default: tn__cred_emit_softmax(&b, p, xt, ns, sd, yt, op, L); break;
    }
    tn__sb_puts(&b, "#undef TN_INF\n");
    if (b.oom) { tn__free(b.s); return tn__err(TN_ERR_OOM, "tn_cuda reduce codegen: out of memory writing the kernel source"); }
    *out = b.s;
    return TN_OK;
}

/* >>cuda_reduce_launch ------------------------------------------------------ */

/* Per node: the functions of the layouts it has met, and the split path's
   scratch (partials, and counters that the kernels leave at zero). */
#define TN__CRED_STATE_KERNELS 8
typedef struct tn__cred_state {
    const tn_ew_program *prog;
    int n;
    struct { tn__cred_layout L; tn__CUfunction fn; int bps; } k[TN__CRED_STATE_KERNELS];
    void *part;
    size_t part_bytes;
    void *cnt;
    size_t cnt_bytes;
    int dev;                     /* the node's device (the scratch's) */
} tn__cred_state;

static bool tn__cuda_reduce_supports(const tn_var *node) {
    if (!tn__cred_is_reduce(node->op) && !tn__cred_is_softmax(node->op)) return false;
    if (node->n_out != 1) return false;
    const tn_ew_program *p = (const tn_ew_program *)node->ext;
    if (p) {
        const tn_ew_program *e = p->epi;
        int ne = e ? e->n_in - 1 : 0;
        if (p->n_in + ne != node->n_in || p->n_in < 1 || ne < 0 || node->n_in > TN__RED_MAX_SRC || p->n_out < 1 ||
            node->n_in + 1 > TN__CUDA_MAX_OPERANDS || !tn__cuda_stype(p->out_dtype[0]) ||
            (e && (e->n_out != 1 || tn__cred_is_softmax(node->op) || !tn__cuda_stype(e->out_dtype[0]))))
            return false;
    } else if (node->n_in != 1) return false;
    for (int i = 0; i < node->n_in; i++)
        if (!tn__cuda_stype(node->in[i]->type.dtype)) return false;
    return true;
}

static tn_result tn__cuda_reduce_prepare(const tn_var *node, void **state) {
    *state = NULL;
    const tn_ew_program *p = (const tn_ew_program *)node->ext;
    if (!tn__cuda_reduce_supports(node))
        return tn__err(TN_ERR_UNSUPPORTED, "tn_cuda: node %d (%s) has no GPU reduction kernel", node->id, tn__op_def(node->op)->name);
    if (p) {
        tn_result r = tn__cuda_check_program(p);
        if (r == TN_OK && p->epi) r = tn__cuda_check_program(p->epi);
        if (r != TN_OK) return r;
    }
    tn__cred_state *st = (tn__cred_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_cuda: out of memory preparing node %d", node->id);
    st->prog = p;
    st->dev = node->device;
    *state = st;
    return TN_OK;
}

static void tn__cuda_reduce_release(void *state) {
    tn__cred_state *st = (tn__cred_state *)state;
    if (!st) return;
    if (st->part) tn__cuda_free(st->dev, st->part);
    if (st->cnt) tn__cuda_free(st->dev, st->cnt);
    tn__free(st);
}

/* The function of layout L, and how many of its 256-thread blocks fit on an
   SM at once (from its register count), so a split grid is one full wave. */
/* Compiles (through the kernel caches) the kernel of layout L, and says how
   many of its 256-thread blocks an SM holds (from its register count). */
static tn_result tn__cred_compile(tn__cuda_dev *D, int op, tn_dtype xt, const tn_ew_program *p, const tn__cred_layout *L,
                                  tn__CUfunction *fn, int *bps) {
    char *src = NULL;
    tn_result r = tn__cuda_reduce_source(op, xt, p, L, &src);
    if (r != TN_OK) return r;
    if (tn_get_config()->print_kernels) fprintf(stderr, "tensor.h: kernel source:\n%s\n", src);
    tn__kentry *e;
    r = tn__cuda_kernel_get(src, D->arch, tn_get_config()->fast_math, &e);
    tn__free(src);
    if (r == TN_OK) r = tn__cuda_entry_function(D, e, "tn_red", fn);
    if (r != TN_OK) return r;
    int regs = 0;
    *bps = 8;
    if (tn__cuda.cu.cuFuncGetAttribute(&regs, TN__CU_FUNC_ATTRIBUTE_NUM_REGS, *fn) == TN__CUDA_SUCCESS && regs > 0) {
        int b = 65536 / (((regs + 7) / 8) * 8 * TN__CRED_THREADS);
        *bps = b < 1 ? 1 : b > 8 ? 8 : b;
    }
    return TN_OK;
}

static tn_result tn__cred_function(tn__cuda_dev *D, tn__cred_state *st, int op, tn_dtype xt, const tn__cred_layout *L,
                                   tn__CUfunction *fn, int *bps) {
    for (int i = 0; i < st->n; i++) {
        const tn__cred_layout *K = &st->k[i].L;
        if (K->kind == L->kind && K->nk == L->nk && K->nr == L->nr && K->vec == L->vec && K->bmask == L->bmask) {
            *fn = st->k[i].fn;
            *bps = st->k[i].bps;
            return TN_OK;
        }
    }
    tn_result r = tn__cred_compile(D, op, xt, st->prog, L, fn, bps);
    if (r != TN_OK) return r;
    if (st->prog && st->prog->epi) {
        /* the split (one wave of blocks) as the reduction without its
           epilogue has it: the same chunks, the same bits as unfused */
        tn_ew_program q = *st->prog;
        q.epi = NULL;
        tn__cred_layout Lq = *L;
        Lq.bmask &= ((uint64_t)1 << q.n_in) - 1;
        tn__CUfunction plain;
        r = tn__cred_compile(D, op, xt, tn__ew_program_is_identity(&q) ? NULL : &q, &Lq, &plain, bps);
        if (r != TN_OK) return r;
    }
    int slot = st->n < TN__CRED_STATE_KERNELS ? st->n++ : TN__CRED_STATE_KERNELS - 1;
    st->k[slot].L = *L;
    st->k[slot].fn = *fn;
    st->k[slot].bps = *bps;
    return TN_OK;
}

/* Grows a scratch buffer of the state (contents undefined; counters zeroed). */
static tn_result tn__cred_scratch(tn__cuda_dev *D, void **buf, size_t *have, size_t need, bool zero, const char *who) {
    if (*have >= need) return TN_OK;
    if (*buf) tn__cuda_free(D->ordinal, *buf);
    *buf = NULL;
    *have = 0;
    void *p = tn__cuda_alloc(D->ordinal, need);
    if (!p) return tn__err(TN_ERR_OOM, "%s: no device memory for %zu bytes of reduction scratch", who, need);
    if (zero) TN__CU_CHECK(tn__cuda.cu.cuMemsetD8Async((tn__CUdeviceptr)(uintptr_t)p, 0, need, tn__cuda_stream(D)), who);
    *buf = p;
    *have = need;
    return TN_OK;
}

static int64_t tn__cred_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t tn__cred_abs(int64_t a) { return a < 0 ? -a : a; }

static tn_result tn__cuda_reduce_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    tn__cred_state *st = (tn__cred_state *)state;
    char lab[96], who[128];
    tn__reduce_label(node, lab, sizeof lab);
    snprintf(who, sizeof who, "Gpu%s (node %d)", lab, node->id);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    if (st->dev != D->ordinal)    /* its scratch lives there */
        return tn__err(TN_ERR_DEVICE, "%s: prepared for cuda%d, run on cuda%d", who, st->dev, D->ordinal);
    const int op = node->op;
    const bool sm = tn__cred_is_softmax(op);
    const tn_ew_program *p = st->prog, *epi = p ? p->epi : NULL;
    const int nf = p ? p->n_in : 1, ns = nf + (epi ? epi->n_in - 1 : 0);   /* folded sources, then the epilogue's */
    for (int i = 0; i <= ns; i++) {
        const tn_array *a = i < ns ? in[i] : out[0];
        if (a->device != D->ordinal)
            return tn__err(TN_ERR_DEVICE, "%s: %s lives on %s, not cuda%d", who, i < ns ? "an input" : "the output",
                           a->device == TN_HOST ? "the host" : "another device", D->ordinal);
        tn_dtype want = i >= ns ? a->dtype : i < nf ? (p ? p->in_dtype[i] : node->in[0]->type.dtype) : epi->in_dtype[1 + i - nf];
        if (a->dtype != want)      /* kernels are cached per node for its dtypes */
            return tn__err(TN_ERR_DTYPE, "%s: input %d is %s, the node was built for %s", who, i, tn_dtype_name(a->dtype), tn_dtype_name(want));
    }
    const tn_dtype xt = p ? p->out_dtype[0] : in[0]->dtype, yt = epi ? epi->out_dtype[0] : tn__reduce_dtype(op, xt);
    if (out[0]->dtype != yt)
        return tn__err(TN_ERR_DTYPE, "%s: the output is %s, the kernel writes %s", who, tn_dtype_name(out[0]->dtype), tn_dtype_name(yt));

    /* the CPU's plan (byte strides, merged dims), then element strides */
    static TN__THREAD_LOCAL tn__rplan P;
    P.op = op;
    P.rk = sm ? TN__RK_MAX : tn__rk_of(op);
    const int axis = (int)node->p.i[0];
    if (sm && (axis < 0 || axis >= out[0]->ndim))
        return tn__err(TN_ERR_AXIS, "%s: axis %d out of range for an output of ndim %d", who, axis, out[0]->ndim);
    r = tn__rplan_build(&P, node, in, out[0], sm ? (uint64_t)1 << axis : (uint64_t)node->p.i[0], sm || node->p.i[1] != 0);
    if (r != TN_OK) return r;
    if (P.M == 0 || (sm && P.N == 0)) return TN_OK;
    if (P.N == 0 && tn__rop_needs_nonempty(op)) {
        char sb[128];
        return tn__err(TN_ERR_SHAPE, "%s: zero-size reduction of an input of shape %s: %s has no identity", lab,
                       tn__shape_str(in[0]->ndim, in[0]->shape, sb), tn__op_def(op)->name);
    }
    int64_t ry = 0;
    if (sm && P.N > 1) ry = out[0]->strides[axis];
    int64_t kx[TN__RED_MAX_SRC][TN_MAX_DIMS], rx[TN__RED_MAX_SRC][TN_MAX_DIMS], ky[TN_MAX_DIMS];
    const int64_t yes = (int64_t)tn_dtype_size(yt);
    bool whole = ry % yes == 0;          /* every stride a multiple of its element size */
    for (int s = 0; s < P.nsrc + P.nepi; s++) {
        const int64_t es = (int64_t)tn_dtype_size(in[s]->dtype);
        for (int d = 0; d < P.nk; d++) { whole &= P.kx[s][d] % es == 0; kx[s][d] = P.kx[s][d] / es; }
        for (int d = 0; d < P.nr; d++) { whole &= P.rx[s][d] % es == 0; rx[s][d] = P.rx[s][d] / es; }
    }
    for (int d = 0; d < P.nk; d++) { whole &= P.ky[d] % yes == 0; ky[d] = P.ky[d] / yes; }
    ry /= yes;
    if (!whole) return tn__err(TN_ERR_UNSUPPORTED, "%s: an operand has a stride that is not a multiple of its element size", who);

    /* layout class, and Mr: the outputs with boxes of their own. A kept dim
       along which no folded source moves is one an epilogue input widened:
       its outputs fold the same box, so the class and the split are chosen
       as for the reduction without it (the unfused one's chunks and bits) */
    tn__cred_layout L = { 0, P.nk, P.nr, false, 0 };
    int64_t Mr = 1;
    for (int d = 0; d < P.nk; d++) {
        bool moves = false;
        for (int s = 0; s < nf; s++) moves |= kx[s][d] != 0;
        if (moves) Mr *= P.kn[d];
    }
    bool col = P.nk > 0 && P.N > 1;
    if (col) {
        int64_t ks = 0;
        for (int s = 0; s < nf; s++) ks += tn__cred_abs(kx[s][P.nk - 1]);
        if (ks == 0) col = false;
        for (int d = 0; d < P.nr; d++) {
            int64_t rs = 0;
            for (int s = 0; s < nf; s++) rs += tn__cred_abs(rx[s][d]);
            if (rs <= ks) col = false;
        }
    }
    L.kind = sm ? (col ? TN__CRED_SMCOL : TN__CRED_SMROW) : (col ? TN__CRED_COL : TN__CRED_ROW);
    if (L.kind == TN__CRED_ROW && P.nr == 1 && P.N > 1) {
        bool unit = false, ok = true;
        for (int s = 0; s < ns; s++) {
            if (rx[s][0] == 1) unit = true;
            else if (rx[s][0] == 0) L.bmask |= (uint64_t)1 << s;
            else ok = false;
        }
        L.vec = ok && unit;
        if (!L.vec) L.bmask = 0;
    }

    tn__CUfunction fn;
    int bps = 8;
    if ((r = tn__cred_function(D, st, op, xt, &L, &fn, &bps)) != TN_OK) return r;

    /* grid: G threads per item; a long box with few outputs is split in S
       chunks, as many as the blocks that run at once (one wave) */
    const int64_t target = (int64_t)(D->sm_count > 0 ? D->sm_count : 80) * bps;
    int64_t S = 1, C = P.N, G = 32, gx = 1, gy = 1, slots = 0;
    switch (L.kind) {
    case TN__CRED_ROW:
        if (P.N >= 1024) G = 256;
        if (P.N > 8192 && Mr < target) {
            S = tn__cred_cdiv(target, Mr);
            if (S > tn__cred_cdiv(P.N, 4096)) S = tn__cred_cdiv(P.N, 4096);
            if (S > 1) {
                C = tn__cred_cdiv(tn__cred_cdiv(P.N, S), 256) * 256;   /* chunk starts stay 16-byte aligned */
                S = tn__cred_cdiv(P.N, C);
            }
            if (S > 1) { G = 256; slots = P.M; } else { S = 1; C = P.N; }
        }
        gx = tn__cred_cdiv(P.M * S, TN__CRED_THREADS / G);
        break;
    case TN__CRED_COL:
        gx = tn__cred_cdiv(P.M, 32);
        if (tn__cred_cdiv(Mr, 32) < target && P.N > 512) {
            S = tn__cred_cdiv(target, tn__cred_cdiv(Mr, 32));
            if (S > tn__cred_cdiv(P.N, 64)) S = tn__cred_cdiv(P.N, 64);
            C = tn__cred_cdiv(P.N, S);
            S = tn__cred_cdiv(P.N, C);
            if (S > 1) slots = gx; else { S = 1; C = P.N; }
        }
        gy = S;
        break;
    case TN__CRED_SMROW:
        if (P.N >= 1024) G = 256;
        gx = tn__cred_cdiv(P.M, TN__CRED_THREADS / G);
        break;
    default:
        gx = tn__cred_cdiv(P.M, TN__CRED_THREADS);
        break;
    }
    if (gx > 0x7fffffff || gy > 65535)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: %lld outputs are more than one launch takes", who, (long long)P.M);
    if (slots) {
        if ((r = tn__cred_scratch(D, &st->part, &st->part_bytes, (size_t)(S * P.M) * TN__CRED_ACC_BYTES, false, who)) != TN_OK) return r;
        if ((r = tn__cred_scratch(D, &st->cnt, &st->cnt_bytes, (size_t)slots * sizeof(unsigned int), true, who)) != TN_OK) return r;
    }
    /* parameters: the tn_args struct, then the pointers */
    int64_t args[6 + 2 * TN_MAX_DIMS + TN_MAX_DIMS + TN__RED_MAX_SRC * 2 * TN_MAX_DIMS];
    const int nk1 = P.nk ? P.nk : 1;
    int n = 0;
    args[n++] = P.M; args[n++] = P.N; args[n++] = S; args[n++] = C; args[n++] = G; args[n++] = ry;
    for (int d = 0; d < nk1; d++) args[n++] = P.nk ? P.kn[d] : 1;
    for (int d = 0; d < nk1; d++) args[n++] = P.nk ? ky[d] : 0;
    for (int d = 0; d < P.nr; d++) args[n++] = P.rn[d];
    for (int s = 0; s < ns; s++) for (int d = 0; d < nk1; d++) args[n++] = P.nk ? kx[s][d] : 0;
    for (int s = 0; s < ns; s++) for (int d = 0; d < P.nr; d++) args[n++] = rx[s][d];
    TN_ASSERT(n == tn__cred_args_count(P.nk, P.nr, ns));
    void *ptrs[TN__RED_MAX_SRC + 3], *params[TN__RED_MAX_SRC + 4];
    int np = 0;
    params[np++] = args;
    for (int s = 0; s < ns; s++) { ptrs[s] = (void *)P.x[s]; params[np++] = &ptrs[s]; }
    ptrs[ns] = out[0]->data; params[np++] = &ptrs[ns];
    if (!sm) {
        ptrs[ns + 1] = st->part; params[np++] = &ptrs[ns + 1];
        ptrs[ns + 2] = st->cnt; params[np++] = &ptrs[ns + 2];
    }
    TN__CU_CHECK(tn__cuda.cu.cuLaunchKernel(fn, (unsigned)gx, (unsigned)gy, 1, TN__CRED_THREADS, 1, 1, 0, tn__cuda_stream(D),
                                            params, NULL), who);
    if (tn_get_config()->launch_blocking) TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(D)), who);
    return TN_OK;
}

#endif /* TN__CUDA_REDUCE_INCLUDED */

/* >>cuda_user ========================================================= */
/* What user CUDA source is compiled with: custom ops' cuda_source and raw
 * modules (tn_cuda_module_new). The prelude is the generated kernels' base
 * (TN__CUDA_BASE_SRC) plus what the seed's kernels use: float16 storage
 * (tn_half) read and written in a float32 working type (load_w, write_w,
 * work_dtype, as Theano's), the strided operands of TN_CUSTOM_ABI_STRIDED
 * kernels and their parameters. #line 1 makes NVRTC's log count the user's
 * lines. The operand struct is laid out as tn__cuda_operand (checked). */
#define TN__CUDA_USER_PRELUDE \
    TN__CUDA_BASE_SRC \
    "struct tn_half { unsigned short x; };\n" \
    "__device__ __forceinline__ float load_w(tn_half h) { return tn_h2f(h.x); }\n" \
    "__device__ __forceinline__ float load_w(float x) { return x; }\n" \
    "__device__ __forceinline__ double load_w(double x) { return x; }\n" \
    "template <class T> __device__ __forceinline__ T write_w(float w) { return (T)w; }\n" \
    "template <> __device__ __forceinline__ tn_half write_w<tn_half>(float w) { tn_half h; h.x = tn_f2h(w); return h; }\n" \
    "template <class T> __device__ __forceinline__ T write_w(double w) { return (T)w; }\n" \
    "template <> __device__ __forceinline__ tn_half write_w<tn_half>(double w) { tn_half h; h.x = tn_d2h(w); return h; }\n" \
    "template <class T> struct tn_work { typedef T type; };\n" \
    "template <> struct tn_work<tn_half> { typedef float type; };\n" \
    "#define work_dtype(T) typename tn_work<T>::type\n" \
    "struct tn_operand { void *data; long long shape[8]; long long strides[8]; int ndim; int dtype; long long size; };\n" \
    "struct tn_params { int n; double v[16]; };\n" \
    "__device__ __forceinline__ long long tn_offset(const tn_operand &o, long long i) {\n" \
    "    long long off = 0;\n" \
    "    for (int d = o.ndim - 1; d >= 0; d--) { off += (i % o.shape[d]) * o.strides[d]; i /= o.shape[d]; }\n" \
    "    return off;\n" \
    "}\n" \
    "#line 1\n"

typedef struct tn__cuda_operand {
    void *data;
    long long shape[TN_MAX_DIMS], strides[TN_MAX_DIMS];
    int ndim, dtype;
    long long size;
} tn__cuda_operand;
typedef struct tn__cuda_params { int n; double v[TN_CUSTOM_MAX_PARAMS]; } tn__cuda_params;
TN__STATIC_ASSERT(TN_MAX_DIMS == 8 && TN_CUSTOM_MAX_PARAMS == 16 && sizeof(tn__cuda_operand) == 152 && sizeof(tn__cuda_params) == 136,
                  "the prelude's tn_operand and tn_params are laid out as these");

/* Launches fn on this thread's stream of D (synchronised under launch_blocking). */
static tn_result tn__cuda_launch_on(tn__cuda_dev *D, tn__CUfunction fn, const unsigned grid[3], const unsigned block[3],
                                    unsigned shared, void **params, const char *who) {
    TN__CU_CHECK(tn__cuda.cu.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
                                            tn__cuda_stream(D), params, NULL), who);
    if (tn_get_config()->launch_blocking) TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(D)), who);
    return TN_OK;
}

/* The prelude and src (tn__malloc'd; NULL on out of memory). */
static char *tn__cuda_user_source(const char *src) {
    size_t pl = sizeof TN__CUDA_USER_PRELUDE - 1, sl = strlen(src);
    char *t = (char *)tn__malloc(pl + sl + 1);
    if (t) { memcpy(t, TN__CUDA_USER_PRELUDE, pl); memcpy(t + pl, src, sl + 1); }
    return t;
}

static void tn__cuda_operand_of(const tn_array *a, tn__cuda_operand *o) {
    memset(o, 0, sizeof *o);
    o->data = a->data;
    o->ndim = a->ndim;
    o->dtype = (int)a->dtype;
    o->size = (long long)tn_array_size(a);
    int64_t es = (int64_t)tn_dtype_size(a->dtype);
    for (int d = 0; d < a->ndim; d++) { o->shape[d] = (long long)a->shape[d]; o->strides[d] = (long long)(a->strides[d] / es); }
}

/* >>cuda_custom ======================================================= */
/* The GPU side of custom ops (tn_custom_op.cuda_source).
 * Included by tensor_cuda.h inside its implementation section, after
 * tn__cuda_kernel_get and tn__cuda_entry_function. The user's source, after
 * the prelude, is compiled with NVRTC through the back end's memory and disk
 * kernel caches at prepare (compile) time; run launches the kernel on the
 * calling thread's stream of the node's device. TN_CUSTOM_ABI_POINTERS: the
 * inputs' then the outputs' device pointers and out[0]'s element count, a
 * strided input first copied contiguous; TN_CUSTOM_ABI_STRIDED: every operand
 * as it lives (tn_operand) and the op's params. Output buffers are allocated
 * by the executor (contiguous). */

static tn_array *tn__cuda_contiguous(const tn_array *a, const char *who);   /* >>cuda_copy */

typedef struct tn__cuda_custom_state {
    const tn_custom_op *op;
    tn__CUfunction fn;
} tn__cuda_custom_state;

static bool tn__cuda_custom_supports(const tn_var *node) {
    const tn_custom_op *op = tn_custom_of(node);
    return op && op->cuda_source && op->cuda_kernel && node->n_in + node->n_out <= 64;
}

static tn_result tn__cuda_custom_prepare(const tn_var *node, void **state) {
    *state = NULL;
    const tn_custom_op *op = tn_custom_of(node);
    if (!op || !op->cuda_source || !op->cuda_kernel)
        return tn__err(TN_ERR_INTERNAL, "tn_cuda: node %d is not a custom op with CUDA source", node->id);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(node->device, &D, "tn_custom");
    if (r != TN_OK) return r;
    tn__kentry *e;
    char *src = tn__cuda_user_source(op->cuda_source);
    if (!src) return tn__err(TN_ERR_OOM, "tn_custom: op '%s': out of memory", op->name);
    r = tn__cuda_kernel_get(src, D->arch, tn_get_config()->fast_math, &e);
    tn__free(src);
    if (r != TN_OK)
        return tn__err(r, "tn_custom: op '%s': compiling its CUDA source failed: %s", op->name, tn_last_error());
    tn__CUfunction fn;
    if ((r = tn__cuda_entry_function(D, e, op->cuda_kernel, &fn)) != TN_OK)
        return tn__err(r, "tn_custom: op '%s': kernel '%s' not found in its source (is it extern \"C\"?): %s",
                       op->name, op->cuda_kernel, tn_last_error());
    tn__cuda_custom_state *st = (tn__cuda_custom_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_custom: op '%s': out of memory", op->name);
    st->op = op;
    st->fn = fn;
    *state = st;
    return TN_OK;
}

static tn_result tn__cuda_custom_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    tn__cuda_custom_state *st = (tn__cuda_custom_state *)state;
    const tn_custom_op *op = st->op;
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, "tn_custom");
    if (r != TN_OK) return r;
    int n_in = node->n_in, n_out = node->n_out > 0 ? node->n_out : 1;
    bool strided = op->cuda_abi == TN_CUSTOM_ABI_STRIDED;
    void *ptrs[64], *params[65];
    tn_array *tmp[64] = { 0 };
    tn__cuda_operand opd[TN_CUSTOM_MAX_STRIDED_OPERANDS];
    tn__cuda_params prm;
    long long n = (long long)tn_array_size(out[0]);
    for (int o = 0; o < n_in + n_out && r == TN_OK; o++) {
        const tn_array *a = o < n_in ? in[o] : out[o - n_in];
        if (a->device != D->ordinal) {
            r = tn__err(TN_ERR_DEVICE, "tn_custom: op '%s': %s %d lives on %s, not cuda%d", op->name, o < n_in ? "input" : "output",
                        o < n_in ? o : o - n_in, a->device == TN_HOST ? "the host" : "another device", D->ordinal);
        } else if (strided) {
            tn__cuda_operand_of(a, &opd[o]);
            params[o] = &opd[o];
        } else {
            if (!tn_array_is_contiguous(a)) {
                if (o >= n_in) r = tn__err(TN_ERR_INTERNAL, "tn_custom: op '%s': output %d is not contiguous", op->name, o - n_in);
                else if (!(a = tmp[o] = tn__cuda_contiguous(a, "tn_custom"))) r = tn_last_result();
            }
            ptrs[o] = a ? a->data : NULL;
            params[o] = &ptrs[o];
        }
    }
    if (strided) {
        memset(&prm, 0, sizeof prm);
        prm.n = op->n_params;
        for (int i = 0; i < op->n_params; i++) prm.v[i] = op->params[i];
        params[n_in + n_out] = &prm;
    } else {
        params[n_in + n_out] = &n;
    }
    unsigned grid[3] = { 1, 1, 1 }, block[3] = { 256, 1, 1 };
    if (op->cuda_geometry) op->cuda_geometry(op, in, out, grid, block);
    else {
        long long blocks = (n + 255) / 256;
        grid[0] = (unsigned)(blocks < 1 ? 1 : blocks > 2147483647LL ? 2147483647LL : blocks);
    }
    if (r == TN_OK && (n > 0 || op->cuda_geometry)) {
        char who[128];
        snprintf(who, sizeof who, "tn_custom: op '%s' (kernel %s, node %d)", op->name, op->cuda_kernel, node->id);
        r = tn__cuda_launch_on(D, st->fn, grid, block, 0, params, who);
    }
    for (int o = 0; o < n_in; o++) tn_array_free(tmp[o]);   /* freed on the stream: reused after the kernel */
    return r;
}

static void tn__cuda_custom_release(void *state) { tn__free(state); }

/* >>cuda_module: raw kernels (PyCUDA's SourceModule) ------------------- */
/* A module keeps its source (prelude included), arch and options, and finds
 * its cubin in the kernel cache at each tn_cuda_module_get (a memory hit
 * after tn_cuda_module_new compiled it), so it never holds a cache entry
 * across tn_shutdown. Its kernels are the device's (the module loaded once
 * per device by tn__cuda_entry_function); the module owns their handles. */

struct tn_cuda_kernel {
    tn_cuda_kernel *next;
    char *name;
    int device;
    tn__CUfunction fn;
};
struct tn_cuda_module {
    char *src;
    char arch[32];
    char opts[TN__CUDA_USER_OPTS + 1];
    tn_cuda_kernel *kernels;
};

TN_API void tn_cuda_module_free(tn_cuda_module *m) {
    if (!m) return;
    for (tn_cuda_kernel *k = m->kernels, *nx; k; k = nx) { nx = k->next; tn__free(k->name); tn__free(k); }
    tn__free(m->src);
    tn__free(m);
}

/* Splits options into the arch (--gpu-architecture=X, -arch=X, -arch X) and the rest. */
static tn_result tn__cuda_module_opts(const char *options, char *arch, size_t acap, char *rest, size_t rcap) {
    const char *W = "tn_cuda_module_new";
    arch[0] = rest[0] = 0;
    if (!options) return TN_OK;
    if (strlen(options) > TN__CUDA_USER_OPTS)
        return tn__err(TN_ERR_INVALID, "%s: options are %zu characters long (at most %d)", W, strlen(options), TN__CUDA_USER_OPTS);
    char buf[TN__CUDA_USER_OPTS + 1];
    tn__strlcpy(buf, options, sizeof buf);
    size_t used = 0;
    bool want_arch = false;
    for (char *q = strtok(buf, " \t"); q; q = strtok(NULL, " \t")) {
        const char *a = want_arch ? q : !strncmp(q, "--gpu-architecture=", 19) ? q + 19 : !strncmp(q, "-arch=", 6) ? q + 6 : NULL;
        want_arch = !strcmp(q, "-arch") || !strcmp(q, "--gpu-architecture");
        if (want_arch) continue;
        if (a) {
            if (strlen(a) >= acap) return tn__err(TN_ERR_INVALID, "%s: architecture '%s' is too long", W, a);
            tn__strlcpy(arch, a, acap);
            continue;
        }
        used += (size_t)snprintf(rest + used, rcap - used, "%s%s", used ? " " : "", q);
    }
    if (want_arch) return tn__err(TN_ERR_INVALID, "%s: options end with an architecture flag and no architecture", W);
    return TN_OK;
}

TN_API tn_cuda_module *tn_cuda_module_new(const char *src, const char *options) {
    const char *W = "tn_cuda_module_new";
    if (!src) { tn__err(TN_ERR_NULL, "%s: src is NULL", W); return NULL; }
    tn_cuda_module *m = (tn_cuda_module *)tn__calloc(1, sizeof *m);
    if (!m) { tn__err(TN_ERR_OOM, "%s: out of memory", W); return NULL; }
    if (tn__cuda_module_opts(options, m->arch, sizeof m->arch, m->opts, sizeof m->opts) != TN_OK) { tn_cuda_module_free(m); return NULL; }
    if (!m->arch[0]) {   /* the configured device's */
        tn__cuda_dev *D = tn_cuda_init() == TN_OK ? tn__cuda_dev_get(tn__cuda.ordinal) : NULL;
        if (!D) {
            tn__err(TN_ERR_UNSUPPORTED, "%s: no usable GPU (%s), so no architecture to compile for: pass one in options "
                    "(\"--gpu-architecture=sm_90\") to compile without a GPU", W, tn__cuda.status);
            tn_cuda_module_free(m);
            return NULL;
        }
        tn__strlcpy(m->arch, D->arch, sizeof m->arch);
    }
    tn__kentry *e;
    if (!(m->src = tn__cuda_user_source(src))) { tn__err(TN_ERR_OOM, "%s: out of memory", W); tn_cuda_module_free(m); return NULL; }
    tn_result r = tn__cuda_kernel_get_opts(m->src, m->arch, false, m->opts, &e);
    if (r != TN_OK) {
        tn__err(r, "%s: %s", W, tn_last_error());
        tn_cuda_module_free(m);
        return NULL;
    }
    return m;
}

TN_API tn_cuda_kernel *tn_cuda_module_get(tn_cuda_module *m, const char *name) {
    const char *W = "tn_cuda_module_get";
    if (!m || !name) { tn__err(TN_ERR_NULL, "%s: module or name is NULL", W); return NULL; }
    tn__cuda_dev *D = tn_cuda_init() == TN_OK ? tn__cuda_dev_get(tn__cuda.ordinal) : NULL;
    if (!D) {
        tn__err(TN_ERR_UNSUPPORTED, "%s: kernel '%s' needs a GPU to run on: %s", W, name, tn__cuda.status);
        return NULL;
    }
    for (tn_cuda_kernel *k = m->kernels; k; k = k->next)
        if (k->device == D->ordinal && !strcmp(k->name, name)) return k;
    tn__kentry *e;
    tn__CUfunction fn;
    tn_result r = tn__cuda_bind(D);
    if (r == TN_OK) r = tn__cuda_kernel_get_opts(m->src, m->arch, false, m->opts, &e);
    if (r == TN_OK && (r = tn__cuda_entry_function(D, e, name, &fn)) != TN_OK)
        r = tn__err(r, "%s: no kernel '%s' in the module for %s on cuda%d (is it extern \"C\" __global__?): %s", W, name, m->arch,
                    D->ordinal, tn_last_error());
    if (r != TN_OK) return NULL;
    tn_cuda_kernel *k = (tn_cuda_kernel *)tn__calloc(1, sizeof *k);
    size_t nl = strlen(name) + 1;
    if (!k || !(k->name = (char *)tn__malloc(nl))) { tn__free(k); tn__err(TN_ERR_OOM, "%s: out of memory", W); return NULL; }
    memcpy(k->name, name, nl);
    k->device = D->ordinal;
    k->fn = fn;
    k->next = m->kernels;
    m->kernels = k;
    return k;
}

TN_API tn_cuda_arg tn_cuda_arg_in(const tn_array *a) { tn_cuda_arg x; memset(&x, 0, sizeof x); x.kind = TN_CUDA_ARG_IN; x.array = (tn_array *)(uintptr_t)a; return x; }
TN_API tn_cuda_arg tn_cuda_arg_out(tn_array *a) { tn_cuda_arg x; memset(&x, 0, sizeof x); x.kind = TN_CUDA_ARG_OUT; x.array = a; return x; }
TN_API tn_cuda_arg tn_cuda_arg_inout(tn_array *a) { tn_cuda_arg x; memset(&x, 0, sizeof x); x.kind = TN_CUDA_ARG_INOUT; x.array = a; return x; }
TN_API tn_cuda_arg tn_cuda_arg_device(tn_array *a) { tn_cuda_arg x; memset(&x, 0, sizeof x); x.kind = TN_CUDA_ARG_DEVICE; x.array = a; return x; }
TN_API tn_cuda_arg tn_cuda_arg_i32(int32_t v) { tn_cuda_arg x; memset(&x, 0, sizeof x); x.kind = TN_CUDA_ARG_I32; x.v.i32 = v; return x; }
TN_API tn_cuda_arg tn_cuda_arg_i64(int64_t v) { tn_cuda_arg x; memset(&x, 0, sizeof x); x.kind = TN_CUDA_ARG_I64; x.v.i64 = v; return x; }
TN_API tn_cuda_arg tn_cuda_arg_f32(float v) { tn_cuda_arg x; memset(&x, 0, sizeof x); x.kind = TN_CUDA_ARG_F32; x.v.f32 = v; return x; }
TN_API tn_cuda_arg tn_cuda_arg_f64(double v) { tn_cuda_arg x; memset(&x, 0, sizeof x); x.kind = TN_CUDA_ARG_F64; x.v.f64 = v; return x; }

/* Host arrays go through device buffers from the caching allocator: in and
   inout copied there first, out and inout copied back after the kernel (the
   copies wait on the stream, so the call returns with the results). */
TN_API tn_result tn_cuda_launch(const tn_cuda_kernel *k, tn_cuda_dim3 grid, tn_cuda_dim3 block, unsigned shared_bytes,
                                int n_args, const tn_cuda_arg *args) {
    const char *W = "tn_cuda_launch";
    if (!k) return tn__err(TN_ERR_NULL, "%s: kernel is NULL", W);
    if (n_args < 0 || n_args > TN_CUDA_MAX_ARGS || (n_args > 0 && !args))
        return tn__err(TN_ERR_INVALID, "%s: kernel '%s': %d arguments (0 to %d, args not NULL)", W, k->name, n_args, TN_CUDA_MAX_ARGS);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(k->device, &D, W);
    if (r != TN_OK) return r;
    void *dptr[TN_CUDA_MAX_ARGS] = { 0 }, *params[TN_CUDA_MAX_ARGS];
    size_t bytes[TN_CUDA_MAX_ARGS] = { 0 };
    tn_array *staged[TN_CUDA_MAX_ARGS] = { 0 };
    for (int i = 0; i < n_args && r == TN_OK; i++) {
        const tn_cuda_arg *a = &args[i];
        tn_array *x = a->array;
        switch (a->kind) {
        case TN_CUDA_ARG_I32: params[i] = (void *)(uintptr_t)&a->v.i32; continue;
        case TN_CUDA_ARG_I64: params[i] = (void *)(uintptr_t)&a->v.i64; continue;
        case TN_CUDA_ARG_F32: params[i] = (void *)(uintptr_t)&a->v.f32; continue;
        case TN_CUDA_ARG_F64: params[i] = (void *)(uintptr_t)&a->v.f64; continue;
        case TN_CUDA_ARG_DEVICE:
            if (!x) { r = tn__err(TN_ERR_NULL, "%s: kernel '%s': argument %d: the array is NULL", W, k->name, i); break; }
            if (x->device != D->ordinal)
                r = tn__err(TN_ERR_DEVICE, "%s: kernel '%s': argument %d is a device argument but lives on %s, not cuda%d", W, k->name,
                            i, x->device == TN_HOST ? "the host" : "another device", D->ordinal);
            dptr[i] = x->data;
            params[i] = &dptr[i];
            continue;
        case TN_CUDA_ARG_IN: case TN_CUDA_ARG_OUT: case TN_CUDA_ARG_INOUT: {
            if (!x) { r = tn__err(TN_ERR_NULL, "%s: kernel '%s': argument %d: the array is NULL", W, k->name, i); break; }
            if (x->device != TN_HOST) {
                r = tn__err(TN_ERR_DEVICE, "%s: kernel '%s': argument %d (in/out/inout) is a device array: pass it with tn_cuda_arg_device",
                            W, k->name, i);
                break;
            }
            if (!tn_array_is_contiguous(x)) {
                if (a->kind != TN_CUDA_ARG_IN) {
                    r = tn__err(TN_ERR_INVALID, "%s: kernel '%s': argument %d (out/inout) is not contiguous: the kernel writes it whole",
                                W, k->name, i);
                    break;
                }
                if (!(x = staged[i] = tn_array_copy(x))) { r = tn_last_result(); break; }
            }
            bytes[i] = (size_t)tn_array_size(x) * tn_dtype_size(x->dtype);
            if (!(dptr[i] = tn__cuda_alloc(D->ordinal, bytes[i] ? bytes[i] : 1))) { r = tn_last_result(); break; }
            if (a->kind != TN_CUDA_ARG_OUT && (r = tn__cuda_copy(dptr[i], D->ordinal, x->data, TN_HOST, bytes[i])) != TN_OK) break;
            params[i] = &dptr[i];
            continue;
        }
        default:
            r = tn__err(TN_ERR_INVALID, "%s: kernel '%s': argument %d has kind %d (use tn_cuda_arg_in, _out, _inout, _device, _i32, "
                        "_i64, _f32 or _f64)", W, k->name, i, (int)a->kind);
        }
    }
    if (r == TN_OK) {
        char who[160];
        snprintf(who, sizeof who, "%s: kernel '%s' (grid %u x %u x %u, block %u x %u x %u)", W, k->name, grid.x, grid.y, grid.z,
                 block.x, block.y, block.z);
        unsigned g3[3] = { grid.x, grid.y, grid.z }, b3[3] = { block.x, block.y, block.z };
        r = tn__cuda_launch_on(D, k->fn, g3, b3, shared_bytes, n_args > 0 ? params : NULL, who);
    }
    for (int i = 0; i < n_args; i++) {
        const tn_cuda_arg *a = &args[i];
        bool host = a->kind == TN_CUDA_ARG_IN || a->kind == TN_CUDA_ARG_OUT || a->kind == TN_CUDA_ARG_INOUT;
        if (!host || !dptr[i]) continue;
        if (r == TN_OK && a->kind != TN_CUDA_ARG_IN) r = tn__cuda_copy(a->array->data, TN_HOST, dptr[i], D->ordinal, bytes[i]);
        tn__cuda_free(D->ordinal, dptr[i]);
        tn_array_free(staged[i]);
    }
    return r;
}


/* >>cuda_copy: device copies through the elementwise engine -------------------- */
/* An identity program per dtype: a strided or broadcast device array copied
   into a contiguous one by the same generated kernels (no transpose copies
   elsewhere need their own code); and the scan's add program per dtype
   (>>cuda_scan). Their kernel states are per device (their functions are
   the device's) and shared by every thread: the device's aux_mu guards them
   (held while a launch is queued). */
typedef struct tn__cuda_aux {
    tn_dtype id_dtype[TN_DTYPE_COUNT];
    int32_t id_reg[1];
    tn_ew_program id_prog[TN_DTYPE_COUNT];
    tn__cuda_ew_state id_state[TN_DTYPE_COUNT];
    tn_dtype add_dt[TN_DTYPE_COUNT][2];
    tn_ew_instr add_ins[TN_DTYPE_COUNT];
    int32_t add_reg[1];
    tn_ew_program add_prog[TN_DTYPE_COUNT];
    tn__cuda_ew_state add_state[TN_DTYPE_COUNT];
    tn__CUfunction accn_fn[TN_DTYPE_COUNT];     /* tn_acc_n (>>cuda_scan), float32 and float64 */
} tn__cuda_aux;

/* D's kernel states, with D->aux_mu locked (NULL, unlocked, error set: no memory). */
static tn__cuda_aux *tn__cuda_aux_lock(tn__cuda_dev *D, const char *who) {
    pthread_mutex_lock(&D->aux_mu);
    if (!D->aux && (D->aux = (tn__cuda_aux *)tn__calloc(1, sizeof *D->aux)) != NULL) D->aux->add_reg[0] = 2;
    if (!D->aux) {
        pthread_mutex_unlock(&D->aux_mu);
        tn__err(TN_ERR_OOM, "%s: out of memory for the copy kernels' state", who);
    }
    return D->aux;
}

static tn_result tn__cuda_copy_kernel(tn__cuda_dev *D, tn_array *dst, const tn_array *src, const char *who);

/* dst (contiguous, on the device) = src broadcast to dst's shape, same dtype. */
static tn_result tn__cuda_copy_into(tn_array *dst, const tn_array *src, const char *who) {
    tn_dtype t = dst->dtype;
    if (src->dtype != t || (unsigned)t >= TN_DTYPE_COUNT)
        return tn__err(TN_ERR_INTERNAL, "%s: device copy from %s to %s", who, tn_dtype_name(src->dtype), tn_dtype_name(t));
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(dst->device, &D, who);
    if (r != TN_OK) return r;
    if (src->device == dst->device && tn_array_is_contiguous(src) && tn_array_is_contiguous(dst) && tn_array_size(src) == tn_array_size(dst)) {
        size_t n = tn_array_nbytes(dst);
        if (n) TN__CU_CHECK(tn__cuda.cu.cuMemcpyDtoDAsync_v2((tn__CUdeviceptr)(uintptr_t)dst->data,
                                                              (tn__CUdeviceptr)(uintptr_t)src->data, n, tn__cuda_stream(D)), who);
        return TN_OK;
    }
    return tn__cuda_copy_kernel(D, dst, src, who);
}

/* The copy kernel (any strides; dst may be page-locked host memory, which
   the device reaches at its host address). */
static tn_result tn__cuda_copy_kernel(tn__cuda_dev *D, tn_array *dst, const tn_array *src, const char *who) {
    tn_dtype t = dst->dtype;
    tn_array *in[1] = { (tn_array *)src }, *out[1] = { dst };
    tn__cuda_aux *A = tn__cuda_aux_lock(D, who);
    if (!A) return tn_last_result();
    if (!A->id_prog[t].n_out) {
        A->id_dtype[t] = t;
        A->id_prog[t] = (tn_ew_program){ 1, &A->id_dtype[t], 0, NULL, 1, A->id_reg, &A->id_dtype[t], NULL, NULL };
        A->id_state[t].prog = &A->id_prog[t];
    }
    tn_result r = tn__cuda_ew_run(&A->id_state[t], in, out, who);
    pthread_mutex_unlock(&D->aux_mu);
    return r;
}

/* A contiguous device copy of a (caller frees), on a's device, from the caching allocator. */
static tn_array *tn__cuda_contiguous(const tn_array *a, const char *who) {
    tn_array *c = tn__array_alloc(a->dtype, a->ndim, a->shape, a->device);
    if (c && tn__cuda_copy_into(c, a, who) != TN_OK) { tn_array_free(c); c = NULL; }
    return c;
}

static tn_result tn__cuda_sync_if_blocking(tn__cuda_dev *D, const char *who) {
    if (D && tn_get_config()->launch_blocking)
        TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(D)), who);
    return TN_OK;
}

/* >>cuda_alloc: Alloc (tn_alloc, tn_fill) on the device ---------------------------- */
/* The value broadcast to the output's shape by the copy kernels, cast on the
   way when a weak literal met another dtype: one launch, no host round trip
   (the zeros and ones of gradient graphs). */
typedef struct tn__cuda_alloc_state {
    tn__cuda_ew_state ew;        /* first: the elementwise launcher reads it */
    tn_ew_program prog;
    tn_dtype dt[2];
    tn_ew_instr cast;
    int32_t reg;
} tn__cuda_alloc_state;

static bool tn__cuda_alloc_supports(const tn_var *node) {
    return node->op == TN_OP_ALLOC && node->n_in >= 1 && tn__cuda_stype(node->in[0]->type.dtype) &&
           tn__cuda_stype(node->type.dtype);
}

static tn_result tn__cuda_alloc_prepare(const tn_var *node, void **state) {
    tn__cuda_alloc_state *st = (tn__cuda_alloc_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_cuda: out of memory preparing Alloc (node %d)", node->id);
    tn_dtype from = node->in[0]->type.dtype, to = node->type.dtype;
    st->dt[0] = from;
    st->dt[1] = to;
    bool cast = from != to;
    st->cast = (tn_ew_instr){ .op = TN_OP_CAST, .dtype = (int8_t)to, .in_dtype = (int8_t)from, .a = 0, .b = -1, .c = -1 };
    st->reg = cast ? 1 : 0;
    st->prog = (tn_ew_program){ 1, &st->dt[0], cast ? 1 : 0, cast ? &st->cast : NULL, 1, &st->reg, &st->dt[1], NULL, NULL };
    st->ew.prog = &st->prog;
    tn_result r = tn__cuda_check_program(&st->prog);
    if (r != TN_OK) { tn__free(st); return r; }
    *state = st;
    return TN_OK;
}

static tn_result tn__cuda_alloc_run(tn__cuda_alloc_state *st, tn_array *const *in, tn_array *const *out, const char *who) {
    tn_array v = *in[0];
    const tn_array *o = out[0];
    if (!tn__broadcast_strides(in[0], o->ndim, o->shape, v.strides)) {
        char s1[128], s2[128];
        return tn__err(TN_ERR_SHAPE, "%s: cannot broadcast a value of shape %s to %s", who,
                       tn__shape_str(in[0]->ndim, in[0]->shape, s1), tn__shape_str(o->ndim, o->shape, s2));
    }
    v.ndim = o->ndim;
    memcpy(v.shape, o->shape, sizeof v.shape);
    tn_array *vin[1] = { tn_array_size(in[0]) == 1 ? in[0] : &v };   /* one value: the kernels' scalar path */
    tn_result r = tn__cuda_ew_run(&st->ew, vin, out, who);
    return r == TN_OK ? tn__cuda_sync_if_blocking(tn__cuda_dev_get(o->device), who) : r;
}

/* >>cuda_scan: a scan loop on the device (the >>scan section's tn__scan_run) --- */
/* The loop's copies (step results into stacked outputs and carried states),
   its gradient sums and zeroing are queued on the stream like every kernel:
   the host only walks the steps, it never waits. Accumulation is one
   generated add kernel per dtype and device (tn__cuda_aux), in place (dst is
   input 0 and the output). */
static tn_result tn__cuda_scan_copy(tn_array *dst, const tn_array *src) {
    tn_result r = tn__cuda_copy_into(dst, src, "GpuScan: copying a step's result");
    return r == TN_OK ? tn__cuda_sync_if_blocking(tn__cuda_dev_get(dst->device), "GpuScan") : r;
}

static tn_result tn__cuda_scan_acc(tn_array *dst, const tn_array *src) {
    tn_dtype t = dst->dtype;
    if (src->dtype != t || (unsigned)t >= TN_DTYPE_COUNT)
        return tn__err(TN_ERR_INTERNAL, "GpuScan: gradient sum of %s into %s", tn_dtype_name(src->dtype), tn_dtype_name(t));
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(dst->device, &D, "GpuScan: summing a step's gradient");
    if (r != TN_OK) return r;
    tn__cuda_aux *A = tn__cuda_aux_lock(D, "GpuScan");
    if (!A) return tn_last_result();
    if (!A->add_prog[t].n_out) {
        A->add_dt[t][0] = A->add_dt[t][1] = t;
        A->add_ins[t] = (tn_ew_instr){ TN_OP_ADD, (int8_t)t, (int8_t)t, 0, 1, -1, 0 };
        tn_ew_program p = { 2, A->add_dt[t], 1, &A->add_ins[t], 1, A->add_reg, &A->add_dt[t][0], NULL, NULL };
        if ((r = tn__cuda_check_program(&p)) == TN_OK) {
            A->add_prog[t] = p;
            A->add_state[t].prog = &A->add_prog[t];
        }
    }
    tn_array *in[2] = { dst, (tn_array *)src }, *out[1] = { dst };
    if (r == TN_OK) r = tn__cuda_ew_run(&A->add_state[t], in, out, "GpuScan: summing a step's gradient");
    pthread_mutex_unlock(&D->aux_mu);
    return r == TN_OK ? tn__cuda_sync_if_blocking(D, "GpuScan") : r;
}

static tn_result tn__cuda_launch(tn__CUfunction fn, long long blocks, unsigned threads, void **params, tn__cuda_dev *D, const char *who);

/* A gradient step's sums at once: tn_acc_n adds n contiguous src[k] into
   their dst[k] (disjoint) in one launch, thread g on element g - off[k] of
   pair k; the same one add an element as the add kernel, so the same bits.
   The struct is the host's tn__cuda_accn, byte for byte. */
#define TN__CUDA_ACCN_MAX 16
typedef struct tn__cuda_accn {
    void *d[TN__CUDA_ACCN_MAX];
    const void *s[TN__CUDA_ACCN_MAX];
    long long off[TN__CUDA_ACCN_MAX + 1];
    int n;
} tn__cuda_accn;

static int tn__cuda_acc_n_source(tn_dtype t, char *buf, size_t cap) {
    if (t != TN_F32 && t != TN_F64) return -1;
    return snprintf(buf, cap,
        "typedef %s T;\n"
        "struct tn_accn { T *d[%d]; const T *s[%d]; long long off[%d]; int n; };\n"
        "extern \"C\" __global__ void tn_acc_n(const tn_accn A) {\n"
        "    const long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (g >= A.off[A.n]) return;\n"
        "    int k = 0;\n"
        "    while (g >= A.off[k + 1]) k++;\n"
        "    const long long i = g - A.off[k];\n"
        "    A.d[k][i] = A.d[k][i] + A.s[k][i];\n"
        "}\n", t == TN_F32 ? "float" : "double", TN__CUDA_ACCN_MAX, TN__CUDA_ACCN_MAX, TN__CUDA_ACCN_MAX + 1);
}

/* dst[k] += src[k] for the n pairs of a gradient step: one tn_acc_n launch
   where they allow it (2 to TN__CUDA_ACCN_MAX pairs of one float32 or
   float64 dtype on one device, contiguous, same sizes, no pair's
   destination overlapping another pair's source or destination), else one
   add each. */
static tn_result tn__cuda_scan_acc_n(int n, tn_array *const *dst, tn_array *const *src) {
    tn_dtype t = n > 0 ? dst[0]->dtype : TN_F32;
    bool one = n >= 2 && n <= TN__CUDA_ACCN_MAX && (t == TN_F32 || t == TN_F64);
    for (int k = 0; one && k < n; k++) {
        const tn_array *d = dst[k], *x = src[k];
        one = d->dtype == t && x->dtype == t && d->device == dst[0]->device && x->device == d->device &&
              tn_array_size(d) == tn_array_size(x) && tn_array_is_contiguous(d) && tn_array_is_contiguous(x);
        for (int j = 0; one && j < n; j++) {       /* no pair writes what another reads or writes */
            if (j == k) continue;
            const char *a0 = (const char *)dst[j]->data, *a1 = a0 + tn_array_nbytes(dst[j]);
            const char *d0 = (const char *)d->data, *x0 = (const char *)x->data;
            one = (d0 + tn_array_nbytes(d) <= a0 || a1 <= d0) && (x0 + tn_array_nbytes(x) <= a0 || a1 <= x0);
        }
    }
    tn_result r = TN_OK;
    if (!one) {
        for (int k = 0; k < n && r == TN_OK; k++) r = tn__cuda_scan_acc(dst[k], src[k]);
        return r;
    }
    tn__cuda_dev *D;
    if ((r = tn__cuda_enter(dst[0]->device, &D, "GpuScan: summing a step's gradients")) != TN_OK) return r;
    tn__cuda_aux *A = tn__cuda_aux_lock(D, "GpuScan");
    if (!A) return tn_last_result();
    if (!A->accn_fn[t]) {
        char src_[1024];
        tn__kentry *e;
        int len = tn__cuda_acc_n_source(t, src_, sizeof src_);
        if (len <= 0 || len >= (int)sizeof src_) r = tn__err(TN_ERR_INTERNAL, "GpuScan: no gradient sum kernel for %s", tn_dtype_name(t));
        else if ((r = tn__cuda_kernel_get(src_, D->arch, false, &e)) == TN_OK) r = tn__cuda_entry_function(D, e, "tn_acc_n", &A->accn_fn[t]);
    }
    tn__CUfunction fn = A->accn_fn[t];
    pthread_mutex_unlock(&D->aux_mu);
    if (r != TN_OK) return tn__err(r, "GpuScan: summing a step's gradients: %s", tn_last_error());
    tn__cuda_accn P;
    memset(&P, 0, sizeof P);
    P.n = n;
    for (int k = 0; k < n; k++) {
        P.d[k] = dst[k]->data;
        P.s[k] = src[k]->data;
        P.off[k + 1] = P.off[k] + tn_array_size(dst[k]);
    }
    if (P.off[n] == 0) return TN_OK;
    void *params[1] = { &P };
    r = tn__cuda_launch(fn, (P.off[n] + 255) / 256, 256, params, D, "GpuScan: summing a step's gradients");
    return r == TN_OK ? tn__cuda_sync_if_blocking(D, "GpuScan") : r;
}

static tn_result tn__cuda_scan_zero(tn_array *a) {
    size_t n = tn_array_nbytes(a);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(a->device, &D, "GpuScan: zeroing a gradient");
    if (r != TN_OK) return r;
    if (n) TN__CU_CHECK(tn__cuda.cu.cuMemsetD8Async((tn__CUdeviceptr)(uintptr_t)a->data, 0, n, tn__cuda_stream(D)), "GpuScan: zeroing a gradient");
    return TN_OK;
}

static tn_result tn__cuda_scan_run(const tn_var *node, tn_array *const *in, tn_array *const *out) {
    tn__scan_mem m = { node->device, true, tn__cuda_scan_copy, tn__cuda_scan_acc, tn__cuda_scan_acc_n, tn__cuda_scan_zero };
    return tn__scan_run(node, in, out, &m);
}

/* >>cuda_blas: cuBLAS products -------------------------------------------------- */
/* Row-major products on a column-major library without transpose copies: a
   row-major C = A B is the column-major C^T = B^T A^T, so the operands are
   passed swapped. A row-major (r, c) view with element strides (s0, s1) is,
   read column-major, either X^T with ld s0 (rows contiguous: CUBLAS_OP_N) or
   X with ld s1 (a transposed view: CUBLAS_OP_T). Anything else (steps in
   both dims, broadcast rows) is first copied contiguous on the device. */

static pthread_mutex_t tn__cublas_mu = PTHREAD_MUTEX_INITIALIZER;   /* loading the library, once */

/* Loads cuBLAS (process-wide, once); handles are per stream (tn__cublas_handle). */
static tn_result tn__cublas_load(void) {
    if (__atomic_load_n(&tn__cuda.cublas_state, __ATOMIC_ACQUIRE) > 0) return TN_OK;
    pthread_mutex_lock(&tn__cublas_mu);
    tn__cuda_loader *c = &tn__cuda;
    if (c->cublas_state == 0) {
        const char *names[] = { "libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so" };
        const char *missing = NULL;
        int st = -1;
        c->h_cublas = tn__dlopen_first("TN_LIBCUBLAS_PATH", names, 4, c->cublas_path, sizeof c->cublas_path);
        if (!c->h_cublas) tn__err(TN_ERR_DEVICE, "tn_cuda: cuBLAS (libcublas.so.13 or .12) was not found; set CUDA_PATH or TN_LIBCUBLAS_PATH");
        else if ((missing = tn__cublas_syms(c->h_cublas, &c->blas)) != NULL)
            tn__err(TN_ERR_DEVICE, "tn_cuda: %s lacks %s", c->cublas_path, missing);
        else st = 1;
        if (st > 0) {   /* cuBLAS's own dependency, from the same place */
            const char *lt_names[] = { "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11", "libcublasLt.so" };
            char lt_path[256];
            c->h_cublaslt = tn__dlopen_first(NULL, lt_names, 4, lt_path, sizeof lt_path);
            if (c->h_cublaslt && tn__cublaslt_syms(c->h_cublaslt, &c->lt) != NULL) {
                dlclose(c->h_cublaslt);
                c->h_cublaslt = NULL;
            }
        }
        if (st < 0) {
            if (c->h_cublas) { dlclose(c->h_cublas); c->h_cublas = NULL; }
            snprintf(c->cublas_path, sizeof c->cublas_path, "%.200s", tn_last_error());
        }
        __atomic_store_n(&c->cublas_state, st, __ATOMIC_RELEASE);
    }
    int st = c->cublas_state;
    pthread_mutex_unlock(&tn__cublas_mu);
    return st > 0 ? TN_OK : tn__err(TN_ERR_DEVICE, "%s", c->cublas_path);
}

static const char *tn__cublas_errstr(tn__cublasStatus_t s, char *buf, size_t cap) {
    const char *t = tn__cuda.blas.cublasGetStatusString ? tn__cuda.blas.cublasGetStatusString(s) : NULL;
    if (t) snprintf(buf, cap, "%s", t);
    else snprintf(buf, cap, "cublasStatus %u", s);
    return buf;
}

#define TN__CUBLAS_CHECK(call, what) do { \
        tn__cublasStatus_t s_ = (call); \
        if (s_ != TN__CUBLAS_STATUS_SUCCESS) { \
            char eb_[120]; \
            return tn__err(s_ == 3 ? TN_ERR_OOM : TN_ERR_DEVICE, "%s failed in %s (%s:%d): %s", #call, (what), \
                           __FILE__, __LINE__, tn__cublas_errstr(s_, eb_, sizeof eb_)); } } while (0)

/* The column-major reading of a row-major (r, c) matrix view (see above). */
static bool tn__blas_mat(int64_t r, int64_t c, int64_t s0, int64_t s1, unsigned *op, int64_t *ld) {
    if ((c == 1 || s1 == 1) && (r == 1 || s0 >= c)) {
        *op = TN__CUBLAS_OP_N;
        *ld = r == 1 ? c : s0;
    } else if ((r == 1 || s0 == 1) && (c == 1 || s1 >= r)) {
        *op = TN__CUBLAS_OP_T;
        *ld = c == 1 ? r : s1;
    } else return false;
    if (*ld < 1) *ld = 1;
    return *ld <= 0x7fffffff;
}

/* An operand as the product sees it: a (batch, r, c) view with element strides. */
typedef struct tn__mm_op { const void *data; int64_t r, c, s0, s1, sb; unsigned op; int64_t ld; tn_array *tmp; } tn__mm_op;

/* Fills op from view a (rank 2 or 3; 3: batch dim first); copies it
   contiguous when cuBLAS cannot read it in place. */
static tn_result tn__mm_operand(const tn_array *a, tn__mm_op *o, const char *who) {
    int64_t es = (int64_t)tn_dtype_size(a->dtype);
    int b = a->ndim - 2;
    o->tmp = NULL;
    for (int pass = 0; pass < 2; pass++) {
        o->data = a->data;
        o->r = a->shape[b]; o->c = a->shape[b + 1];
        o->s0 = a->strides[b] / es; o->s1 = a->strides[b + 1] / es;
        o->sb = b > 0 && a->shape[0] > 1 ? a->strides[0] / es : 0;
        bool ok = (a->strides[b] % es == 0) && (a->strides[b + 1] % es == 0) && o->sb >= 0 &&
                  tn__blas_mat(o->r, o->c, o->s0, o->s1, &o->op, &o->ld);
        if (ok) return TN_OK;
        if (pass == 1) break;
        if (!(o->tmp = tn__cuda_contiguous(a, who))) return tn_last_result();
        a = o->tmp;
    }
    return tn__err(TN_ERR_INTERNAL, "%s: a contiguous copy is still not a cuBLAS operand", who);
}

/* The cuBLAS handle of stream record f, made at its first product: set to
   f's stream for good, with the device's math mode and a workspace of its
   own (cuBLAS's advice: 32 MiB on Hopper, else 4), as its documentation asks
   for products captured into CUDA graphs. Handles of different streams share
   nothing, so products on different streams overlap; a handle is used only
   on its own stream, so its workspace is stream-ordered. */
static tn_result tn__cublas_handle(tn__cuda_fstream *f, tn__cublasHandle_t *out, const char *who) {
    tn__cublasHandle_t h = __atomic_load_n(&f->blas, __ATOMIC_ACQUIRE);
    if (h) { *out = h; return TN_OK; }
    *out = NULL;
    tn_result r = tn__cublas_load();
    if (r != TN_OK) return r;
    tn__cuda_dev *D = f->dev;
    const tn__cublas_api *bl = &tn__cuda.blas;
    pthread_mutex_lock(&D->mu);
    if (!(h = f->blas)) {
        tn__cublasStatus_t st = bl->cublasCreate_v2(&h);
        size_t bytes = (size_t)(D->cc_major >= 9 ? 32 : 4) << 20;
        void *ws = NULL;
        if (st != TN__CUBLAS_STATUS_SUCCESS) {
            h = NULL;
            r = tn__err(TN_ERR_DEVICE, "%s: cublasCreate failed (status %u) with %s", who, st, tn__cuda.cublas_path);
        } else if ((st = bl->cublasSetStream_v2(h, f->s)) != TN__CUBLAS_STATUS_SUCCESS ||
                   (st = bl->cublasSetMathMode(h, tn_get_config()->allow_tf32 ? TN__CUBLAS_TF32_TENSOR_OP_MATH
                                                                           : TN__CUBLAS_DEFAULT_MATH)) != TN__CUBLAS_STATUS_SUCCESS) {
            r = tn__err(TN_ERR_DEVICE, "%s: configuring a cuBLAS handle failed (status %u)", who, st);
        } else if (bl->cublasSetWorkspace_v2) {
            if (!(ws = tn__cuda_alloc(D->ordinal, bytes)))
                r = tn__err(tn_last_result(), "%s: a workspace for cuBLAS: %s", who, tn_last_error());
            else if ((st = bl->cublasSetWorkspace_v2(h, ws, bytes)) != TN__CUBLAS_STATUS_SUCCESS)
                r = tn__err(TN_ERR_DEVICE, "%s: cublasSetWorkspace failed (status %u)", who, st);
        }
        if (r != TN_OK) {
            if (h) bl->cublasDestroy_v2(h);
            if (ws) tn__cuda_free(D->ordinal, ws);
            h = NULL;
        } else {
            f->blas_ws = ws;
            f->blas_ws_bytes = ws ? bytes : 0;
            if (tn__cuda.h_cublaslt && tn__cuda.lt.cublasLtCreate(&f->lt) != TN__CUBLAS_STATUS_SUCCESS) f->lt = NULL;
            __atomic_store_n(&f->blas, h, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&D->mu);
    *out = h;
    return r;
}

/* Destroys f's handle and gives its workspace back (f's stream idle). */
static void tn__cublas_handle_drop(tn__cuda_fstream *f) {
    if (f->blas) tn__cuda.blas.cublasDestroy_v2(f->blas);
    if (f->lt) tn__cuda.lt.cublasLtDestroy(f->lt);
    if (f->blas_ws) tn__cuda_free(f->dev->ordinal, f->blas_ws);
    f->blas = NULL;
    f->lt = NULL;
    f->blas_ws = NULL;
    f->blas_ws_bytes = 0;
}
static tn_result tn__cuda_gemm_on(tn_dtype t, int64_t batch, const tn__mm_op *A, const tn__mm_op *B, void *C, int M, int N,
                                  int K, int lda, int ldb, int ldc, long long sC, tn__cublasHandle_t h,
                                  const tn__cublas_api *bl, double alpha, double beta, const char *who);

/* C (contiguous, (batch,) m x n, on D) = alpha * A B + beta * C on this
   thread's stream of D, with that stream's handle: no lock. */
static tn_result tn__cuda_gemm(tn__cuda_dev *D, tn_dtype t, int64_t batch, const tn__mm_op *A, const tn__mm_op *B, void *C,
                               int64_t m, int64_t n, int64_t k, double alpha, double beta, const char *who) {
    if (m == 0 || n == 0 || batch == 0) return TN_OK;
    if (m > 0x7fffffff || n > 0x7fffffff || k > 0x7fffffff || batch > 0x7fffffff)
        return tn__err(TN_ERR_UNSUPPORTED, "%s: dimensions beyond cuBLAS's int range (m %lld, n %lld, k %lld)", who,
                       (long long)m, (long long)n, (long long)k);
    tn__cublasHandle_t h;
    tn_result r = tn__cublas_handle(tn__cuda_fs(D), &h, who);
    if (r != TN_OK) return r;
    const tn__cublas_api *bl = &tn__cuda.blas;
    int M = (int)n, N = (int)m, K = (int)k, ldc = n > 1 ? (int)n : 1, lda = (int)B->ld, ldb = (int)A->ld;
    long long sC = (long long)(m * n);
    r = tn__cuda_gemm_on(t, batch, A, B, C, M, N, K, lda, ldb, ldc, sC, h, bl, alpha, beta, who);
    return r == TN_OK ? tn__cuda_sync_if_blocking(D, who) : r;
}

static tn_result tn__cuda_gemm_on(tn_dtype t, int64_t batch, const tn__mm_op *A, const tn__mm_op *B, void *C, int M, int N,
                                  int K, int lda, int ldb, int ldc, long long sC, tn__cublasHandle_t h,
                                  const tn__cublas_api *bl, double alpha, double beta, const char *who) {
    if (t == TN_F32) {
        float al = (float)alpha, be = (float)beta;
        if (batch == 1)
            TN__CUBLAS_CHECK(bl->cublasSgemm_v2(h, B->op, A->op, M, N, K, &al, (const float *)B->data, lda,
                                                (const float *)A->data, ldb, &be, (float *)C, ldc), who);
        else
            TN__CUBLAS_CHECK(bl->cublasSgemmStridedBatched(h, B->op, A->op, M, N, K, &al, (const float *)B->data, lda,
                                                           B->sb, (const float *)A->data, ldb, A->sb, &be, (float *)C,
                                                           ldc, sC, (int)batch), who);
    } else if (t == TN_F64) {
        if (batch == 1)
            TN__CUBLAS_CHECK(bl->cublasDgemm_v2(h, B->op, A->op, M, N, K, &alpha, (const double *)B->data, lda,
                                                (const double *)A->data, ldb, &beta, (double *)C, ldc), who);
        else
            TN__CUBLAS_CHECK(bl->cublasDgemmStridedBatched(h, B->op, A->op, M, N, K, &alpha, (const double *)B->data, lda,
                                                           B->sb, (const double *)A->data, ldb, A->sb, &beta, (double *)C,
                                                           ldc, sC, (int)batch), who);
    } else if (t == TN_F16) {   /* half storage, float32 accumulation */
        float al = (float)alpha, be = (float)beta;
        for (int64_t i = 0; i < batch; i++)
            TN__CUBLAS_CHECK(bl->cublasGemmEx(h, B->op, A->op, M, N, K, &al, (const uint16_t *)B->data + i * B->sb,
                                              TN__CUDA_R_16F, lda, (const uint16_t *)A->data + i * A->sb, TN__CUDA_R_16F,
                                              ldb, &be, (uint16_t *)C + i * sC, TN__CUDA_R_16F, ldc, TN__CUBLAS_COMPUTE_32F,
                                              TN__CUBLAS_GEMM_DEFAULT), who);
    } else return tn__err(TN_ERR_DTYPE, "%s: cuBLAS products take float16/32/64, not %s", who, tn_dtype_name(t));
    return TN_OK;
}

/* >>cuda_lt: a product with its own addend through cuBLASLt ------------------- */
/* GEMM's alpha * A B + beta * C writes C into the output first, then runs a
   beta = 1 product over it: a copy of C a call. cuBLASLt reads C where it
   lies instead: an (m, n) C with contiguous rows as its C operand (D = the
   output), and a row broadcast over the m rows (b in y = x.W + b) with
   beta = 1 as the bias epilogue. The descriptors and the algorithm are
   chosen when the product's shapes, layouts or pointer alignments change
   (the node's state), not every call. Where cuBLASLt is missing or offers
   no algorithm (float64 with a bias), the copy and cuBLAS stay. */
typedef struct tn__cuda_lt_state {
    int64_t key[16];      /* what desc, the layouts and algo were made for (sizes, layouts, alignments) */
    int ok;               /* 1: made for key; -1: no algorithm for key (cuBLAS is used); 0: nothing yet */
    tn__ltDesc desc;
    tn__ltLayout la, lb, lc, ld;
    tn__ltAlgo algo;
} tn__cuda_lt_state;

static int64_t tn__ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p & 255u;
    return a ? (int64_t)(a & (~a + 1u)) : 256;
}

/* o (m x n, contiguous, on D) = alpha * A B + beta * c; *done false when this
   product is not one cuBLASLt takes here (the caller goes the cuBLAS way). */
static tn_result tn__cuda_gemm_lt(tn__cuda_dev *D, tn__cuda_lt_state *st, tn_dtype t, const tn__mm_op *A, const tn__mm_op *B,
                                  const tn_array *c, tn_array *o, int64_t m, int64_t n, int64_t k, double alpha, double beta,
                                  bool *done, const char *who) {
    *done = false;
    if (!st || !tn__cuda.h_cublaslt || m <= 0 || n <= 0 || k <= 0 || m > 0x7fffffff || n > 0x7fffffff || k > 0x7fffffff ||
        c->dtype != t || c->ndim > 2 || c->device != o->device)
        return TN_OK;
    int64_t es = (int64_t)tn_dtype_size(t), cd = c->ndim;
    int64_t cn = cd >= 1 ? c->shape[cd - 1] : 1, cns = cd >= 1 ? c->strides[cd - 1] : 0;
    int64_t cm = cd >= 2 ? c->shape[cd - 2] : 1, cms = cd >= 2 ? c->strides[cd - 2] : 0;
    if (cn != n || (n > 1 && cns != es)) return TN_OK;
    int mode;                       /* 1: C an (m, n) matrix of leading dim ldc; 2: a row broadcast, the bias */
    int64_t ldc = n;
    if (cm == m && (m == 1 || (cms % es == 0 && cms / es >= n))) { mode = 1; if (m > 1) ldc = cms / es; }
    else if (cm == 1 && beta == 1) mode = 2;
    else return TN_OK;
    tn__cuda_fstream *f = tn__cuda_fs(D);
    tn__cublasHandle_t h;
    tn_result r = tn__cublas_handle(f, &h, who);
    if (r != TN_OK) return r;
    if (!f->lt) return TN_OK;
    bool tf32 = t == TN_F32 && tn_get_config()->allow_tf32;
    int64_t key[16] = { t, mode, m, n, k, A->op, B->op, A->ld, B->ld, ldc, tf32, tn__ptr_align(A->data), tn__ptr_align(B->data),
                        tn__ptr_align(mode == 1 ? c->data : o->data), tn__ptr_align(o->data), tn__ptr_align(c->data) };
    const tn__cublaslt_api *lt = &tn__cuda.lt;
    if (st->ok == 0 || memcmp(key, st->key, sizeof key) != 0) {
        memcpy(st->key, key, sizeof key);
        st->ok = -1;
        /* column-major, as tn__cuda_gemm: D^T (n x m) = B^T A^T, so B is cuBLASLt's A and A its B */
        unsigned dty = t == TN_F64 ? TN__CUDA_R_64F : t == TN_F16 ? TN__CUDA_R_16F : TN__CUDA_R_32F;
        unsigned comp = t == TN_F64 ? TN__CUBLAS_COMPUTE_64F : tf32 ? TN__CUBLAS_COMPUTE_32F_FAST_TF32 : TN__CUBLAS_COMPUTE_32F;
        int32_t ta = (int32_t)B->op, tb = (int32_t)A->op;
        uint32_t epi = mode == 2 ? TN__LT_EPILOGUE_BIAS : TN__LT_EPILOGUE_DEFAULT;
        uint64_t M = (uint64_t)n, N = (uint64_t)m, K = (uint64_t)k, ws = f->blas_ws_bytes;
        const void *bias = c->data;
        tn__ltPref pref;
        tn__ltHeuristic res;
        int got = 0;
        bool made = lt->cublasLtMatmulDescInit_internal(&st->desc, sizeof st->desc, comp, t == TN_F64 ? TN__CUDA_R_64F : TN__CUDA_R_32F) == 0 &&
                    lt->cublasLtMatmulDescSetAttribute(&st->desc, TN__LT_DESC_TRANSA, &ta, sizeof ta) == 0 &&
                    lt->cublasLtMatmulDescSetAttribute(&st->desc, TN__LT_DESC_TRANSB, &tb, sizeof tb) == 0 &&
                    lt->cublasLtMatmulDescSetAttribute(&st->desc, TN__LT_DESC_EPILOGUE, &epi, sizeof epi) == 0 &&
                    (mode != 2 || lt->cublasLtMatmulDescSetAttribute(&st->desc, TN__LT_DESC_BIAS_POINTER, &bias, sizeof bias) == 0) &&
                    lt->cublasLtMatrixLayoutInit_internal(&st->la, sizeof st->la, dty, ta ? K : M, ta ? M : K, B->ld) == 0 &&
                    lt->cublasLtMatrixLayoutInit_internal(&st->lb, sizeof st->lb, dty, tb ? N : K, tb ? K : N, A->ld) == 0 &&
                    lt->cublasLtMatrixLayoutInit_internal(&st->lc, sizeof st->lc, dty, M, N, mode == 1 ? ldc : (int64_t)M) == 0 &&
                    lt->cublasLtMatrixLayoutInit_internal(&st->ld, sizeof st->ld, dty, M, N, (int64_t)M) == 0 &&
                    lt->cublasLtMatmulPreferenceInit_internal(&pref, sizeof pref) == 0 &&
                    lt->cublasLtMatmulPreferenceSetAttribute(&pref, TN__LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) == 0;
        for (int i = 0; made && i < 4; i++) {      /* MIN_ALIGNMENT_A..D_BYTES (5..8): what the pointers offer */
            uint32_t al = (uint32_t)key[11 + i];
            made = lt->cublasLtMatmulPreferenceSetAttribute(&pref, 5 + i, &al, sizeof al) == 0;
        }
        if (made && lt->cublasLtMatmulAlgoGetHeuristic(f->lt, &st->desc, &st->la, &st->lb, &st->lc, &st->ld, &pref, 1, &res, &got) == 0 &&
            got > 0 && res.state == TN__CUBLAS_STATUS_SUCCESS) {
            st->algo = res.algo;
            st->ok = 1;
        }
    }
    if (st->ok < 0) return TN_OK;
    const void *cp = mode == 1 ? c->data : o->data;
    if (mode == 2) {
        const void *bias = c->data;
        TN__CUBLAS_CHECK(lt->cublasLtMatmulDescSetAttribute(&st->desc, TN__LT_DESC_BIAS_POINTER, &bias, sizeof bias), who);
    }
    double be = mode == 2 ? 0.0 : beta;
    float al32 = (float)alpha, be32 = (float)be;
    const void *pa = t == TN_F64 ? (const void *)&alpha : &al32, *pb = t == TN_F64 ? (const void *)&be : &be32;
    TN__CUBLAS_CHECK(lt->cublasLtMatmul(f->lt, &st->desc, pa, B->data, &st->la, A->data, &st->lb, pb, cp, &st->lc, o->data, &st->ld,
                                        &st->algo, f->blas_ws, f->blas_ws_bytes, f->s), who);
    *done = true;
    return tn__cuda_sync_if_blocking(D, who);
}

/* A vector (n,) with byte stride s as a (1, n) row (row) or an (n, 1) column. */
static tn_array tn__mm_vec(const tn_array *v, bool row) {
    tn_array a = *v;
    int64_t es = (int64_t)tn_dtype_size(v->dtype), s = v->shape[0] > 1 ? v->strides[0] : es;
    a.ndim = 2;
    if (row) { a.shape[0] = 1; a.shape[1] = v->shape[0]; a.strides[0] = s * v->shape[0]; a.strides[1] = s; }
    else { a.shape[0] = v->shape[0]; a.shape[1] = 1; a.strides[0] = s; a.strides[1] = es; }
    return a;
}

static bool tn__cuda_la_supports(const tn_var *node) {
    tn_dtype t = node->type.dtype;
    if (t != TN_F32 && t != TN_F64 && t != TN_F16) return false;
    switch (node->op) {
    case TN_OP_OUTER: return true;
    case TN_OP_GEMV: {
        const tn_ew_program *e = (const tn_ew_program *)node->ext;     /* an epilogue: the library's kernel, float32/64 */
        if (e && (t == TN_F16 || e->n_out != 1 || node->n_in > 3 + TN__RED_MAX_SRC || tn__cuda_check_program(e) != TN_OK)) { tn_clear_error(); return false; }
        return node->in[1]->type.ndim == 2 && node->in[2]->type.ndim == 1;
    }
    case TN_OP_GEMM: return node->in[1]->type.ndim == 2 && node->in[2]->type.ndim == 2;
    case TN_OP_DOT: {
        int a = node->in[0]->type.ndim, b = node->in[1]->type.ndim;
        if (a <= 2 && b <= 2) return a >= 1 && b >= 1;
        return a >= 2 && b >= 2 && a <= 3 && b <= 3;   /* one batch dim (broadcast allowed) */
    }
    default: return false;
    }
}

static tn_result tn__cuda_la_run(const tn_var *node, tn__cuda_lt_state *lts, tn_array *const *in, tn_array *const *out, const char *who) {
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    if ((r = tn__cublas_load()) != TN_OK) return tn__err(r, "%s: %s", who, tn_last_error());
    tn_array *o = out[0];
    tn_dtype t = o->dtype;
    double alpha = 1, beta = 0;
    tn_array a, b;
    switch (node->op) {
    case TN_OP_DOT:
        a = in[0]->ndim == 1 ? tn__mm_vec(in[0], true) : *in[0];
        b = in[1]->ndim == 1 ? tn__mm_vec(in[1], false) : *in[1];
        break;
    case TN_OP_OUTER:
        a = tn__mm_vec(in[0], false);
        b = tn__mm_vec(in[1], true);
        break;
    default: {   /* GEMM, GEMV: the addend first goes where the product is written */
        alpha = node->p.f[0];
        beta = node->p.f[1];
        a = *in[1];
        b = in[2]->ndim == 1 ? tn__mm_vec(in[2], false) : *in[2];
        break;
    }
    }
    if (a.ndim == 2 && b.ndim == 3) {   /* a batch dim of size 1, broadcast (batch stride 0) */
        a.ndim = 3;
        a.shape[2] = a.shape[1]; a.strides[2] = a.strides[1];
        a.shape[1] = a.shape[0]; a.strides[1] = a.strides[0];
        a.shape[0] = 1; a.strides[0] = 0;
    }
    if (b.ndim == 2 && a.ndim == 3) {
        b.ndim = 3;
        b.shape[2] = b.shape[1]; b.strides[2] = b.strides[1];
        b.shape[1] = b.shape[0]; b.strides[1] = b.strides[0];
        b.shape[0] = 1; b.strides[0] = 0;
    }
    int64_t batch = a.ndim == 3 ? (a.shape[0] > b.shape[0] ? a.shape[0] : b.shape[0]) : 1;
    int bd = a.ndim - 2;
    int64_t m = a.shape[bd], k = a.shape[bd + 1], n = b.shape[bd + 1];
    if (!tn_array_is_contiguous(o))
        return tn__err(TN_ERR_INTERNAL, "%s: the product's output is not contiguous", who);
    tn__mm_op A, B;
    if ((r = tn__mm_operand(&a, &A, who)) != TN_OK) return r;
    if ((r = tn__mm_operand(&b, &B, who)) != TN_OK) { tn_array_free(A.tmp); return r; }
    /* GEMM, GEMV: the addend is read where it lies (cuBLASLt), or first goes where the product is written */
    bool done = false, addend = (node->op == TN_OP_GEMM || node->op == TN_OP_GEMV) && beta != 0 && o->data != in[0]->data;
    if (addend && batch == 1 && node->op == TN_OP_GEMM) r = tn__cuda_gemm_lt(D, lts, t, &A, &B, in[0], o, m, n, k, alpha, beta, &done, who);
    if (r == TN_OK && addend && !done) r = tn__cuda_copy_into(o, in[0], who);
    if (r == TN_OK && !done) r = tn__cuda_gemm(D, t, batch, &A, &B, o->data, m, n, k, alpha, beta, who);
    tn_array_free(A.tmp);      /* back to the cache: stream order keeps the product's reads first */
    tn_array_free(B.tmp);
    return r;
}

static const char *tn__cuda_who(const tn_var *node, char *who, size_t cap);   /* >>cuda_backend */

/* >>cuda_transfer: host <-> device ----------------------------------------------- */
/* Host to device: the host array is packed into a pinned staging buffer
   (reused call after call; an event says when the previous copy from it is
   done), then copied asynchronously. The caller's memory is not read after
   tn_call returns. Device to host: straight into the host array when it is
   pinned (a function's outputs and HostFromGpu's plan buffers come from
   tn__cuda_host_alloc): one DMA, or up to TN__D2H_KERNEL_MAX bytes the copy
   kernel, whose stores reach the pinned memory over the bus (a kernel node
   starts sooner than a copy node: on an H100 a logistic step's two small
   outputs cost 33.2 us a call this way against 38.5 us by DMA); else through
   the device's pinned stage (shared by its threads). The copy waits for the
   stream, since the host reads the result next (at the call's fence within
   a call). */

typedef struct tn__cuda_h2d_state {
    void *pin;
    size_t cap;
    tn__CUevent ev;
    bool ev_live;
    int dev;                    /* the node's device: pin and ev belong to its context */
    int src_dev;                /* GpuToGpu (>>cuda_peer): the input's device, ev_src's context (-1: none yet) */
    tn__CUevent ev_src;
} tn__cuda_h2d_state;

static tn_result tn__cuda_peer_run(tn__cuda_h2d_state *st, const tn_array *in, tn_array *out, const char *who);   /* >>cuda_peer */

/* A pinned buffer of at least n bytes in *pin (grown by doubling). */
static tn_result tn__cuda_pinned(void **pin, size_t *cap, size_t n, const char *who) {
    if (*cap >= n) return TN_OK;
    size_t want = *cap ? *cap : 4096;
    while (want < n) want *= 2;
    if (*pin) tn__cuda.cu.cuMemFreeHost(*pin);
    *pin = NULL;
    *cap = 0;
    if (tn__cuda.cu.cuMemHostAlloc)   /* portable: pinned for every context (a stage between two GPUs) */
        TN__CU_CHECK(tn__cuda.cu.cuMemHostAlloc(pin, want, TN__CU_MEMHOSTALLOC_PORTABLE), who);
    else
        TN__CU_CHECK(tn__cuda.cu.cuMemAllocHost_v2(pin, want), who);
    *cap = want;
    return TN_OK;
}

/* The fence (tn_device_ops.fence): streams of this thread with a queued copy
   that reads or writes host memory, waited for at the call's fence. */
#define TN__CUDA_FENCE_MAX 32
static TN__THREAD_LOCAL struct { tn__CUstream s[TN__CUDA_FENCE_MAX]; int dev[TN__CUDA_FENCE_MAX], n; } tn__cuda_fenceq;

static tn_result tn__cuda_fence(void) {
    tn_result r = TN_OK;
    for (int i = 0; i < tn__cuda_fenceq.n; i++) {
        tn__cuda_dev *D;
        tn_result ri = tn__cuda_enter(tn__cuda_fenceq.dev[i], &D, "tn_call: waiting for its copies");
        tn__CUresult cr = TN__CUDA_SUCCESS;
        if (ri == TN_OK) cr = tn__cuda.cu.cuStreamSynchronize(tn__cuda_fenceq.s[i]);
        if (ri == TN_OK && cr != TN__CUDA_SUCCESS) {
            char eb[160];
            ri = tn__err(cr == TN__CUDA_ERROR_OUT_OF_MEMORY ? TN_ERR_OOM : TN_ERR_DEVICE,
                         "tn_call: waiting for copies between host and cuda%d failed (a kernel before them may have failed: "
                         "launch_blocking=1 names it): %s", tn__cuda_fenceq.dev[i], tn__cu_errstr(cr, eb, sizeof eb));
        }
        if (r == TN_OK) r = ri;
    }
    tn__cuda_fenceq.n = 0;
    return r;
}

static TN__THREAD_LOCAL bool tn__cuda_capture_host;   /* the graph being captured copies to or from host memory */

/* A copy touching host memory was queued on D's stream s: the fence waits
   for it (at once when the queue is full). Under capture, the graph's
   launches will note it (tn__cuda_replay.host). */
static tn_result tn__cuda_fence_note(tn__cuda_dev *D, tn__CUstream s, const char *who) {
    if (tn__cuda_capturing) { tn__cuda_capture_host = true; return TN_OK; }
    for (int i = 0; i < tn__cuda_fenceq.n; i++)
        if (tn__cuda_fenceq.s[i] == s) return TN_OK;
    if (tn__cuda_fenceq.n == TN__CUDA_FENCE_MAX) {
        TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(s), who);
        return TN_OK;
    }
    tn__cuda_fenceq.s[tn__cuda_fenceq.n] = s;
    tn__cuda_fenceq.dev[tn__cuda_fenceq.n++] = D->ordinal;
    return TN_OK;
}

/* tn_device_ops.host_register: page-locks [p, p + n) for every context.
   Memory its owner already page-locked (cudaHostAlloc, cudaHostRegister)
   is used as it is and left to them. */
static bool tn__cuda_host_register(int device, void *p, size_t n, bool *elsewhere) {
    tn__cuda_dev *D;
    *elsewhere = false;
    if (!tn__cuda.cu.cuMemHostRegister_v2 || !tn__cuda.cu.cuMemHostUnregister || tn__cuda_enter(device, &D, "tn_call") != TN_OK) {
        tn_clear_error();
        return false;
    }
    tn__CUresult cr = tn__cuda.cu.cuMemHostRegister_v2(p, n, TN__CU_MEMHOSTREGISTER_PORTABLE);
    if (cr == TN__CUDA_SUCCESS) return true;
    unsigned flags = 0;
    if (cr == TN__CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED && tn__cuda.cu.cuMemHostGetFlags &&
        tn__cuda.cu.cuMemHostGetFlags(&flags, p) == TN__CUDA_SUCCESS &&
        tn__cuda.cu.cuMemHostGetFlags(&flags, (char *)p + n - 1) == TN__CUDA_SUCCESS)
        return *elsewhere = true;
    return false;                 /* it stages, as before; nothing to report */
}

static void tn__cuda_host_unregister(int device, void *p) {
    tn__cuda_dev *D;
    if (tn__cuda_enter(device, &D, "tn_array_free") != TN_OK) { tn_clear_error(); return; }
    tn__CUresult cr = tn__cuda.cu.cuMemHostUnregister(p);
    TN_ASSERT(cr == TN__CUDA_SUCCESS && "cuMemHostUnregister of a buffer this library registered");
    (void)cr;
}

/* The host array in packed into st's pinned buffer, once the last copy out of it is done. */
static tn_result tn__cuda_h2d_pack(tn__cuda_h2d_state *st, const tn_array *in, const tn_array *out, size_t n, const char *who) {
    if (st->ev_live) TN__CU_CHECK(tn__cuda.cu.cuEventSynchronize(st->ev), who);
    st->ev_live = false;
    tn_result r = tn__cuda_pinned(&st->pin, &st->cap, n, who);
    if (r != TN_OK) return r;
    if (tn_array_is_contiguous(in) && tn_array_size(in) == tn_array_size(out)) memcpy(st->pin, in->data, n);
    else if ((r = tn_array_copy_to(in, out->dtype, st->pin, st->cap)) != TN_OK) return r;   /* packs views, broadcasts */
    return TN_OK;
}

static tn_result tn__cuda_h2d_run(tn__cuda_h2d_state *st, const tn_array *in, tn_array *out, const char *who) {
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out->device, &D, who);
    if (r != TN_OK) return r;
    if (out->device != st->dev) return tn__err(TN_ERR_DEVICE, "%s: prepared for cuda%d, run on cuda%d", who, st->dev, out->device);
    if (in->device != TN_HOST) {   /* GpuToGpu, or a device array passed for a host input */
        if (in->device == D->ordinal && st->src_dev == -2) return tn__cuda_copy_into(out, in, who);
        return tn__cuda_peer_run(st, in, out, who);
    }
    size_t n = tn_array_nbytes(out);
    if (n == 0) return TN_OK;
    if (tn__fence_open() && in->dtype == out->dtype && tn_array_is_contiguous(in) && tn_array_size(in) == tn_array_size(out) &&
        tn__buffer_host_direct(in->base, D->ordinal, in->data, n)) {
        /* one DMA from the caller's page-locked memory; the call's fence waits for it */
        TN__CU_CHECK(tn__cuda.cu.cuMemcpyHtoDAsync_v2((tn__CUdeviceptr)(uintptr_t)out->data, in->data, n, tn__cuda_stream(D)), who);
        if ((r = tn__cuda_fence_note(D, tn__cuda_stream(D), who)) != TN_OK) return r;
        return tn__cuda_sync_if_blocking(D, who);
    }
    if ((r = tn__cuda_h2d_pack(st, in, out, n, who)) != TN_OK) return r;
    TN__CU_CHECK(tn__cuda.cu.cuMemcpyHtoDAsync_v2((tn__CUdeviceptr)(uintptr_t)out->data, st->pin, n, tn__cuda_stream(D)), who);
    if (tn__cuda_capturing) return tn__cuda_fence_note(D, tn__cuda_stream(D), who);   /* each launch waits at its call's fence */
    TN__CU_CHECK(tn__cuda.cu.cuEventRecord(st->ev, tn__cuda_stream(D)), who);
    st->ev_live = true;
    return tn__cuda_sync_if_blocking(D, who);
}

/* tn_backend_op.stage of GpuFromHost: before a call that may replay a
   graph, a host input that stages is packed into the pinned buffer the
   graph's copy reads (the key), and one read in place by DMA keys on its
   address; a large one not page-locked yet (its first copies) is not
   replayed this call. */
static tn_result tn__cuda_h2d_stage(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out, uint64_t *key) {
    tn__cuda_h2d_state *st = (tn__cuda_h2d_state *)state;
    const tn_array *x = in[0], *y = out[0];
    size_t n = tn_array_nbytes(y);
    *key = 0;
    if (x->device != TN_HOST || n == 0) return TN_OK;
    if (x->dtype == y->dtype && tn_array_is_contiguous(x) && tn_array_size(x) == tn_array_size(y)) {
        if (tn__buffer_host_ready(x->base, x->data, n)) { *key = (uint64_t)(uintptr_t)x->data; return TN_OK; }
        if (n >= TN__PIN_MIN) return TN_OK;
    }
    char who[128];
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(y->device, &D, tn__cuda_who(node, who, sizeof who));
    if (r == TN_OK) r = tn__cuda_h2d_pack(st, x, y, n, who);
    if (r == TN_OK) *key = (uint64_t)(uintptr_t)st->pin;
    return r;
}

#ifndef TN__D2H_KERNEL_MAX
#define TN__D2H_KERNEL_MAX 65536   /* bytes: a copy to pinned memory up to this is a kernel, past it a DMA */
#endif

/* HostFromGpu's kernel (tn_device_ops.d2h: the >>transfer section calls it). */
static tn_result tn__cuda_d2h(const tn_var *node, const tn_array *in, tn_array *out) {
    char who[96];
    snprintf(who, sizeof who, "HostFromGpu (node %d)", node ? node->id : -1);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(in->device, &D, who);
    if (r != TN_OK) return r;
    if (!tn_array_is_contiguous(out) || out->dtype != in->dtype)
        return tn__err(TN_ERR_INTERNAL, "%s: the host output must be contiguous %s", who, tn_dtype_name(in->dtype));
    size_t n = tn_array_nbytes(out);
    if (n == 0) return TN_OK;
    if (n <= TN__D2H_KERNEL_MAX && out->base && out->base->free_fn == tn__cuda_host_free && out->base->free_device == D->ordinal &&
        out->ndim == in->ndim && !memcmp(out->shape, in->shape, (size_t)in->ndim * sizeof *in->shape)) {
        /* small, into memory this device's context page-locked (which its
           kernels reach at the host address): the copy kernel writes it over
           the bus, cheaper to start than a DMA */
        tn_array o = *out;
        o.device = D->ordinal;
        if ((r = tn__cuda_copy_kernel(D, &o, in, who)) != TN_OK) return r;
        if (tn__fence_open()) return tn__cuda_fence_note(D, tn__cuda_stream(D), who);
        TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(D)), who);
        return TN_OK;
    }
    tn_array *tmp = NULL;
    const tn_array *src = in;
    if (!tn_array_is_contiguous(in) || tn_array_size(in) != tn_array_size(out)) {
        if (!(tmp = tn__array_alloc(out->dtype, out->ndim, out->shape, D->ordinal))) return tn_last_result();
        if ((r = tn__cuda_copy_into(tmp, in, who)) != TN_OK) { tn_array_free(tmp); return r; }
        src = tmp;
    }
    tn__CUresult cr = TN__CUDA_SUCCESS;
    if (out->base && out->base->free_fn == tn__cuda_host_free) {
        /* pinned (a function's output or plan buffer): one DMA straight into
           it, waited for here or at the call's fence */
        cr = tn__cuda.cu.cuMemcpyDtoHAsync_v2(out->data, (tn__CUdeviceptr)(uintptr_t)src->data, n, tn__cuda_stream(D));
        if (cr == TN__CUDA_SUCCESS && tn__fence_open()) r = tn__cuda_fence_note(D, tn__cuda_stream(D), who);
        else if (cr == TN__CUDA_SUCCESS) cr = tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(D));
    } else if (tn__cuda_capturing) {
        r = tn__err(TN_ERR_UNSUPPORTED, "%s: a copy into pageable host memory cannot be captured", who);
    } else {
        /* pageable: through the device's pinned stage (faster than the driver's own staging) */
        pthread_mutex_lock(&D->stage.mu);
        r = tn__cuda_pinned(&D->stage.pin, &D->stage.cap, n, who);
        if (r == TN_OK) cr = tn__cuda.cu.cuMemcpyDtoHAsync_v2(D->stage.pin, (tn__CUdeviceptr)(uintptr_t)src->data, n, tn__cuda_stream(D));
        if (r == TN_OK && cr == TN__CUDA_SUCCESS) cr = tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(D));
        if (r == TN_OK && cr == TN__CUDA_SUCCESS) memcpy(out->data, D->stage.pin, n);
        pthread_mutex_unlock(&D->stage.mu);
    }
    tn_array_free(tmp);
    if (r == TN_OK && cr != TN__CUDA_SUCCESS) {
        char eb[160];
        r = tn__err(cr == TN__CUDA_ERROR_OUT_OF_MEMORY ? TN_ERR_OOM : TN_ERR_DEVICE,
                    "%s: copying device to host failed (a kernel before it may have failed: launch_blocking=1 names it): %s",
                    who, tn__cu_errstr(cr, eb, sizeof eb));
    }
    return r;
}

/* >>cuda_peer: device-to-device transfers (GpuToGpu) -------------------------- */
/* A GpuFromHost whose input lives on a device (placement's GpuToGpu between
   contexts) copies on the destination's stream of this thread, ordered after
   the source's work so far (an event of the source's context, waited for
   there), and the source's stream then waits for the copy, so the source
   buffer is reused only after it was read. A peer copy (cuMemcpyPeerAsync)
   where the two devices can reach each other (cuDeviceCanAccessPeer, then
   cuCtxEnablePeerAccess both ways, once per pair), else staged through the
   node's portable pinned buffer (device to host on the source's stream,
   host to device on the destination's). One device (two contexts on it):
   a peer copy within the context. A view is first packed on its device. */

static int tn__cuda_peer_force_staged;   /* tests: 1 stages every copy through host memory */
static signed char tn__cuda_peer_tab[TN__CUDA_MAX_DEVICES][TN__CUDA_MAX_DEVICES];   /* 0 unknown, 1 peer, -1 staged (tn__cuda.mu) */

/* Whether D can read S's memory directly (enabling it the first time). */
static bool tn__cuda_peer_access(tn__cuda_dev *S, tn__cuda_dev *D) {
    if (S == D) return true;
    const tn__cu_api *cu = &tn__cuda.cu;
    if (!cu->cuDeviceCanAccessPeer || !cu->cuCtxEnablePeerAccess || !cu->cuMemcpyPeerAsync) return false;
    pthread_mutex_lock(&tn__cuda.mu);
    signed char *t = &tn__cuda_peer_tab[D->ordinal][S->ordinal];
    if (*t == 0) {
        int a = 0, b = 0;
        bool ok = cu->cuDeviceCanAccessPeer(&a, D->dev, S->dev) == TN__CUDA_SUCCESS &&
                  cu->cuDeviceCanAccessPeer(&b, S->dev, D->dev) == TN__CUDA_SUCCESS && a && b;
        tn__CUresult r;
        if (ok && tn__cuda_bind(D) == TN_OK) {
            r = cu->cuCtxEnablePeerAccess(S->ctx, 0);
            ok = r == TN__CUDA_SUCCESS || r == TN__CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
        } else ok = false;
        if (ok && tn__cuda_bind(S) == TN_OK) {
            r = cu->cuCtxEnablePeerAccess(D->ctx, 0);
            ok = r == TN__CUDA_SUCCESS || r == TN__CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
        } else ok = false;
        tn_clear_error();
        *t = tn__cuda_peer_tab[S->ordinal][D->ordinal] = ok ? 1 : -1;
    }
    bool ok = *t > 0;
    pthread_mutex_unlock(&tn__cuda.mu);
    return ok;
}

static tn_result tn__cuda_peer_run(tn__cuda_h2d_state *st, const tn_array *in, tn_array *out, const char *who) {
    tn__cuda_dev *S, *D;
    tn_result r = tn__cuda_enter(in->device, &S, who);
    if (r != TN_OK) return r;
    if ((r = tn__cuda_enter(out->device, &D, who)) != TN_OK) return r;
    size_t n = tn_array_nbytes(out);
    if (n == 0) return TN_OK;
    if (st->src_dev != S->ordinal) {   /* the source's event belongs to its context */
        tn__cuda_dev *old = st->src_dev >= 0 ? tn__cuda_dev_get(st->src_dev) : NULL;
        if (old && st->ev_src && tn__cuda_bind(old) == TN_OK) tn__cuda.cu.cuEventDestroy_v2(st->ev_src);
        st->ev_src = NULL;
        st->src_dev = S->ordinal;
        if ((r = tn__cuda_bind(S)) != TN_OK) return r;
        TN__CU_CHECK(tn__cuda.cu.cuEventCreate(&st->ev_src, TN__CU_EVENT_DISABLE_TIMING), who);
    }
    bool peer = !tn__cuda_peer_force_staged && tn__cuda_peer_access(S, D);
    tn_array *tmp = NULL;
    const tn_array *src = in;
    if ((r = tn__cuda_bind(S)) != TN_OK) return r;
    if (!tn_array_is_contiguous(in) || tn_array_size(in) != tn_array_size(out)) {
        if (!(tmp = tn__cuda_contiguous(in, who))) return tn_last_result();   /* on S's stream */
        src = tmp;
    }
    tn__CUstream ss = tn__cuda_stream(S), ds = tn__cuda_stream(D);
    tn__CUdeviceptr sp = (tn__CUdeviceptr)(uintptr_t)src->data, dp = (tn__CUdeviceptr)(uintptr_t)out->data;
    tn__CUresult cr = TN__CUDA_SUCCESS;
    const char *step = "";
#define TN__PEER_STEP(call, what) do { if (cr == TN__CUDA_SUCCESS) { step = what; cr = (call); } } while (0)
    if (peer) {
        if (ss != ds) {   /* ds after S's work so far */
            TN__PEER_STEP(tn__cuda.cu.cuEventRecord(st->ev_src, ss), "cuEventRecord on the source stream");
            TN__PEER_STEP(tn__cuda.cu.cuStreamWaitEvent(ds, st->ev_src, 0), "cuStreamWaitEvent on the destination stream");
        }
        if (cr == TN__CUDA_SUCCESS && (r = tn__cuda_bind(D)) != TN_OK) { tn_array_free(tmp); return r; }
        TN__PEER_STEP(tn__cuda.cu.cuMemcpyPeerAsync(dp, D->ctx, sp, S->ctx, n, ds), "cuMemcpyPeerAsync");
    } else {
        if (st->ev_live) TN__PEER_STEP(tn__cuda.cu.cuEventSynchronize(st->ev), "cuEventSynchronize (the stage's last copy)");
        st->ev_live = false;
        if (cr == TN__CUDA_SUCCESS && (r = tn__cuda_pinned(&st->pin, &st->cap, n, who)) != TN_OK) { tn_array_free(tmp); return r; }
        if (cr == TN__CUDA_SUCCESS && (r = tn__cuda_bind(S)) != TN_OK) { tn_array_free(tmp); return r; }
        TN__PEER_STEP(tn__cuda.cu.cuMemcpyDtoHAsync_v2(st->pin, sp, n, ss), "cuMemcpyDtoHAsync into the stage");
        TN__PEER_STEP(tn__cuda.cu.cuEventRecord(st->ev_src, ss), "cuEventRecord on the source stream");
        TN__PEER_STEP(tn__cuda.cu.cuStreamWaitEvent(ds, st->ev_src, 0), "cuStreamWaitEvent on the destination stream");
        if (cr == TN__CUDA_SUCCESS && (r = tn__cuda_bind(D)) != TN_OK) { tn_array_free(tmp); return r; }
        TN__PEER_STEP(tn__cuda.cu.cuMemcpyHtoDAsync_v2(dp, st->pin, n, ds), "cuMemcpyHtoDAsync from the stage");
    }
    /* the source's stream after the copy: its buffer (or tmp) is reused only then */
    TN__PEER_STEP(tn__cuda.cu.cuEventRecord(st->ev, ds), "cuEventRecord after the copy");
    if (cr == TN__CUDA_SUCCESS) st->ev_live = true;
    if (ss != ds) TN__PEER_STEP(tn__cuda.cu.cuStreamWaitEvent(ss, st->ev, 0), "cuStreamWaitEvent on the source stream");
#undef TN__PEER_STEP
    tn_array_free(tmp);
    if (cr != TN__CUDA_SUCCESS) {
        char eb[160];
        return tn__err(cr == TN__CUDA_ERROR_OUT_OF_MEMORY ? TN_ERR_OOM : TN_ERR_DEVICE, "%s: %s failed copying %zu bytes from cuda%d to cuda%d (%s:%d): %s",
                       who, step, n, S->ordinal, D->ordinal, __FILE__, __LINE__, tn__cu_errstr(cr, eb, sizeof eb));
    }
    if ((r = tn__cuda_bind(D)) != TN_OK) return r;
    return tn__cuda_sync_if_blocking(D, who);
}

/* >>cuda_replay: CUDA graph capture and replay (tn_backend.replay_*) ------------ */
/* The executor (the >>replay section of tensor.h) decides what to
   capture and when; this is the driver side. Capture runs in thread-local
   mode on the calling thread's stream of the device of the function being
   called: work queued there is recorded, not run, and a call that would
   synchronise fails (the executor then runs the function plainly for good).
   Allocations are refused while capturing (tn__cuda_capturing): a graph
   keeps its pointers. The stream's cuBLAS handle and its workspace are made
   before the capture starts, as cuBLAS's documentation asks for captured
   products (else it may allocate one inside the capture). An instantiated
   graph remembers its device (tn__cuda_replay). */

typedef struct tn__cuda_replay {
    tn__cuda_dev *dev;
    tn__CUgraphExec x;
    bool host;               /* it copies to or from host memory: each launch waits at its call's fence */
} tn__cuda_replay;
static TN__THREAD_LOCAL tn__cuda_fstream *tn__cuda_capture_fs;   /* the stream being captured */

static tn_result tn__cuda_replay_begin(void) {
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter_current(&D, "tn_cuda: beginning a capture");
    if (r != TN_OK) return r;
    tn__cuda_fstream *f = tn__cuda_fs(D);
    tn__cublasHandle_t h;
    if (__atomic_load_n(&tn__cuda.cublas_state, __ATOMIC_ACQUIRE) > 0 &&
        (r = tn__cublas_handle(f, &h, "tn_cuda: a cuBLAS handle for graph capture")) != TN_OK)
        return r;
    TN__CU_CHECK(tn__cuda.cu.cuStreamBeginCapture_v2(f->s, TN__CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                 "beginning a CUDA graph capture");
    tn__cuda_capturing = true;
    tn__cuda_capture_host = false;
    tn__cuda_capture_fs = f;
    return TN_OK;
}

static tn_result tn__cuda_replay_end(void **exec) {
    tn__cuda_fstream *f = tn__cuda_capture_fs;
    tn__cuda_capturing = false;
    tn__cuda_capture_fs = NULL;
    if (exec) *exec = NULL;
    if (!f) return tn__err(TN_ERR_INTERNAL, "tn_cuda: replay_end without replay_begin");
    tn_result r = tn__cuda_bind(f->dev);
    if (r != TN_OK) return r;
    tn__CUgraph g = NULL;
    tn__CUresult cr = tn__cuda.cu.cuStreamEndCapture(f->s, &g);
    if (!exec) {                          /* an aborted capture: nothing to keep */
        if (g) tn__cuda.cu.cuGraphDestroy(g);
        return TN_OK;
    }
    char eb[160];
    if (cr != TN__CUDA_SUCCESS || !g) {
        if (g) tn__cuda.cu.cuGraphDestroy(g);
        return tn__err(TN_ERR_DEVICE, "cuStreamEndCapture failed (%s:%d): %s", __FILE__, __LINE__,
                       cr ? tn__cu_errstr(cr, eb, sizeof eb) : "no graph");
    }
    tn__CUgraphExec x = NULL;
    cr = tn__cuda.cu.cuGraphInstantiateWithFlags(&x, g, 0);
    tn__CUresult cd = tn__cuda.cu.cuGraphDestroy(g);     /* the exec keeps what it needs */
    if (cr != TN__CUDA_SUCCESS) {
        return tn__err(cr == TN__CUDA_ERROR_OUT_OF_MEMORY ? TN_ERR_OOM : TN_ERR_DEVICE, "cuGraphInstantiateWithFlags failed (%s:%d): %s",
                       __FILE__, __LINE__, tn__cu_errstr(cr, eb, sizeof eb));
    }
    if (cd != TN__CUDA_SUCCESS) {
        tn__cuda.cu.cuGraphExecDestroy(x);
        return tn__err(TN_ERR_DEVICE, "cuGraphDestroy failed (%s:%d): %s", __FILE__, __LINE__, tn__cu_errstr(cd, eb, sizeof eb));
    }
    tn__cuda_replay *R = (tn__cuda_replay *)tn__malloc(sizeof *R);
    if (!R) {
        tn__cuda.cu.cuGraphExecDestroy(x);
        return tn__err(TN_ERR_OOM, "tn_cuda: out of memory for a captured graph");
    }
    R->dev = f->dev;
    R->x = x;
    R->host = tn__cuda_capture_host;
    *exec = R;
    return TN_OK;
}

static tn_result tn__cuda_replay_launch(void *exec) {
    tn__cuda_replay *R = (tn__cuda_replay *)exec;
    tn_result r = tn__cuda_bind(R->dev);
    if (r != TN_OK) return r;
    TN__CU_CHECK(tn__cuda.cu.cuGraphLaunch(R->x, tn__cuda_stream(R->dev)), "replaying a captured CUDA graph");
    return R->host ? tn__cuda_fence_note(R->dev, tn__cuda_stream(R->dev), "replaying a captured CUDA graph") : TN_OK;
}

/* tn_backend.replay_point and replay_follow: the capture's dependency set
   (the nodes the next captured work follows), read and set (driver 12.3 or
   later; older ones capture the steps in order: TN_ERR_UNSUPPORTED). */
static tn_result tn__cuda_replay_point(void **nodes, size_t cap, size_t *n) {
    tn__cuda_fstream *f = tn__cuda_capture_fs;
    *n = 0;
    if (!tn__cuda.cu.cuStreamGetCaptureInfo_v3 || !tn__cuda.cu.cuStreamUpdateCaptureDependencies_v2)
        return TN_ERR_UNSUPPORTED;
    if (!f) return tn__err(TN_ERR_INTERNAL, "tn_cuda: replay_point outside a capture");
    tn__CUstreamCaptureStatus st = 0;
    const tn__CUgraphNode *deps = NULL;
    const tn__CUgraphEdgeData *edges = NULL;
    size_t nd = 0;
    TN__CU_CHECK(tn__cuda.cu.cuStreamGetCaptureInfo_v3(f->s, &st, NULL, NULL, &deps, &edges, &nd), "reading a capture's dependencies");
    if (st != TN__CU_STREAM_CAPTURE_STATUS_ACTIVE)
        return tn__err(TN_ERR_DEVICE, "tn_cuda: the stream's capture is no longer active (status %u)", st);
    for (size_t i = 0; i < nd && i < cap; i++) nodes[i] = (void *)deps[i];
    *n = nd;
    return TN_OK;
}

static tn_result tn__cuda_replay_follow(void *const *nodes, size_t n) {
    tn__cuda_fstream *f = tn__cuda_capture_fs;
    if (!f) return tn__err(TN_ERR_INTERNAL, "tn_cuda: replay_follow outside a capture");
    TN__CU_CHECK(tn__cuda.cu.cuStreamUpdateCaptureDependencies_v2(f->s, (tn__CUgraphNode *)(void *)nodes, NULL, n,
                                                                  TN__CU_STREAM_SET_CAPTURE_DEPENDENCIES),
                 "setting a capture's dependencies");
    return TN_OK;
}

/* A graph still running is freed by the driver when it completes. */
static void tn__cuda_replay_release(void *exec) {
    tn__cuda_replay *R = (tn__cuda_replay *)exec;
    if (!R) return;
    if (tn__cuda_bind(R->dev) == TN_OK) tn__cuda.cu.cuGraphExecDestroy(R->x);
    else tn_clear_error();
    tn__free(R);
}

/* >>cuda_streams: one stream per compiled function --------------------------- */
/* Each compiled function with device steps queues its work on a stream of its
   own on its device (tn_backend.func_new); entering a call makes it the
   calling thread's current stream there (tn__cuda_fs), so functions called
   from different threads queue on different streams and overlap. A switch
   orders the new stream after all work this thread queued so far on the old
   one of that device (an event of the entered function, recorded there,
   waited for here): functions called one after another on one thread see
   each other's updates in order, and so do host reads afterwards. Across
   threads, shared variables carry their own events (tn_backend.shared_*,
   below), and the caching allocator orders a block's reuse on another stream
   after its last use (the >>cuda_memory section). A function called in a
   loop switches nothing. A scan's step function runs on its caller's stream
   (tn__func_share_stream); a replica's update function on its step's
   (tn__func_stream_from). A freed function's stream, event and cuBLAS
   handle are kept for the next function of the device (a thread may still
   have the stream current); tn_shutdown destroys them. */

static tn_result tn__cuda_use_stream(tn__cuda_dev *D, tn__cuda_fstream *f, tn__CUevent ev, const char *who) {
    tn__cuda_fstream *cur = tn__cuda_fs(D);
    tn__cuda_cur_dev = D;
    if (cur == f) return TN_OK;
    TN__CU_CHECK(tn__cuda.cu.cuEventRecord(ev, cur->s), who);
    TN__CU_CHECK(tn__cuda.cu.cuStreamWaitEvent(f->s, ev, 0), who);
    tn__cuda_cur[D->ordinal] = f == &D->home ? NULL : f;
    return TN_OK;
}

static void *tn__cuda_func_new(int device) {
    tn__cuda_dev *D;
    if (tn__cuda.state <= 0 || tn__cuda_enter(device, &D, "tn_function") != TN_OK) { tn_clear_error(); return NULL; }
    pthread_mutex_lock(&D->mu);
    tn__cuda_fstream *f = D->spare_streams;
    if (f) D->spare_streams = f->next;
    pthread_mutex_unlock(&D->mu);
    if (f) { f->next = NULL; return f; }
    f = (tn__cuda_fstream *)tn__calloc(1, sizeof *f);
    if (!f) return NULL;
    f->dev = D;
    if (tn__cuda.cu.cuStreamCreate(&f->s, TN__CU_STREAM_NON_BLOCKING) != TN__CUDA_SUCCESS) { tn__free(f); return NULL; }
    if (tn__cuda.cu.cuEventCreate(&f->ev, TN__CU_EVENT_DISABLE_TIMING) != TN__CUDA_SUCCESS) {
        tn__cuda.cu.cuStreamDestroy_v2(f->s);
        tn__free(f);
        return NULL;
    }
    return f;      /* NULL: the function runs on the current stream, as a step function does */
}

static tn_result tn__cuda_func_enter(void *state) {
    tn__cuda_fstream *f = (tn__cuda_fstream *)state;
    tn_result r = tn__cuda_bind(f->dev);
    if (r != TN_OK) return r;
    return tn__cuda_use_stream(f->dev, f, f->ev, "tn_call: switching to the function's stream");
}

static void tn__cuda_func_free(void *state) {
    tn__cuda_fstream *f = (tn__cuda_fstream *)state;
    if (!f) return;
    tn__cuda_dev *D = f->dev;
    /* this thread goes back to the home stream, after f's work */
    if (tn__cuda_bind(D) == TN_OK && tn__cuda_fs(D) == f &&
        tn__cuda_use_stream(D, &D->home, f->ev, "tn_function_free") != TN_OK) {
        tn__cuda.cu.cuStreamSynchronize(f->s);       /* could not hand over: finish here */
        tn__cuda_cur[D->ordinal] = NULL;
        tn_clear_error();
    }
    pthread_mutex_lock(&D->mu);
    f->next = D->spare_streams;
    D->spare_streams = f;
    pthread_mutex_unlock(&D->mu);
}

/* At shutdown, after D's whole context is idle: spare streams, and every
   stream's cuBLAS handle (the home stream's too). */
static void tn__cuda_streams_shutdown(tn__cuda_dev *D) {
    pthread_mutex_lock(&D->mu);
    for (tn__cuda_fstream *f = D->spare_streams, *nx; f; f = nx) {
        nx = f->next;
        tn__cublas_handle_drop(f);
        tn__cuda.cu.cuStreamDestroy_v2(f->s);
        tn__cuda.cu.cuEventDestroy_v2(f->ev);
        tn__free(f);
    }
    D->spare_streams = NULL;
    tn__cublas_handle_drop(&D->home);
    tn__atomic_fetch_add(&tn__cuda.epoch, 1);          /* every thread's current stream is home again */
    pthread_mutex_unlock(&D->mu);
}

/* Shared variables (tn_backend.shared_order): each remembers the stream that
   used it last. A function on another stream records an event there now
   (after everything queued on it so far, its use of the variable included)
   and waits for it; on the same stream nothing is done, so a function called
   in a loop makes no driver call for its shared variables. Function streams
   live until shutdown (the epoch says when they are gone). The record
   belongs to the device it was last used on; ordering work across devices
   is the multi-GPU work's (a variable moving to another device starts
   afresh there). */
typedef struct tn__cuda_shuse { tn__cuda_dev *dev; tn__CUstream last; uint64_t epoch; tn__CUevent ev; } tn__cuda_shuse;

static tn_result tn__cuda_shared_order(void **state) {
    tn__cuda_shuse *u = (tn__cuda_shuse *)*state;
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter_current(&D, "tn_call: ordering after a shared variable's last user");
    if (r != TN_OK) return r;
    tn__CUstream cur = tn__cuda_stream(D);
    uint64_t ep = tn__atomic_load_explicit(&tn__cuda.epoch, TN__RELAXED);
    if (u && u->dev == D && u->last == cur && u->epoch == ep) return TN_OK;
    if (u && u->dev != D) {
        if (u->ev && tn__cuda_bind(u->dev) == TN_OK) tn__cuda.cu.cuEventDestroy_v2(u->ev);
        *u = (tn__cuda_shuse){ D, NULL, 0, NULL };
        if ((r = tn__cuda_bind(D)) != TN_OK) return r;
    }
    if (!u) {
        if (!(u = (tn__cuda_shuse *)tn__calloc(1, sizeof *u))) return tn__err(TN_ERR_OOM, "tn_call: out of memory for a shared variable's event");
        u->dev = D;
        *state = u;
    }
    if (!u->ev) TN__CU_CHECK(tn__cuda.cu.cuEventCreate(&u->ev, TN__CU_EVENT_DISABLE_TIMING), "creating a shared variable's event");
    if (u->last && u->epoch == ep) {
        TN__CU_CHECK(tn__cuda.cu.cuEventRecord(u->ev, u->last), "ordering after a shared variable's last user");
        TN__CU_CHECK(tn__cuda.cu.cuStreamWaitEvent(cur, u->ev, 0), "ordering after a shared variable's last user");
    }
    u->last = cur;
    u->epoch = ep;
    return TN_OK;
}

static void tn__cuda_shared_free(void *state) {
    tn__cuda_shuse *u = (tn__cuda_shuse *)state;
    if (!u) return;
    if (u->ev && tn__cuda_bind(u->dev) == TN_OK) tn__cuda.cu.cuEventDestroy_v2(u->ev);
    tn__free(u);
}

/* >>cuda_cumulative: cumsum and cumprod --------------------------------------- */
/* The kernel is tensor_ops.h's (>>cum_cuda: the CPU kernel's loop as CUDA C),
   compiled once per op and dtype at prepare time. One thread per line,
   sequential along the axis, so the bits are the CPU's; a strided input is
   first copied to a contiguous one. A line thousands of elements long keeps
   one thread busy: a parallel scan would be faster there but would change
   float results (it reassociates the sums). */
typedef struct tn__cuda_cum_state { tn__CUfunction fn; } tn__cuda_cum_state;

static bool tn__cuda_cum_supports(const tn_var *node) {
    return node->n_in == 1 && node->in[0]->type.ndim >= 1 && tn__cuda_stype(node->in[0]->type.dtype) &&
           tn__cum_cuda_source(node->op, node->in[0]->type.dtype, NULL, 0) > 0;
}

/* A catalogue kernel of node (its source written by tensor_ops.h: n its
   length, cap the buffer's, t the dtype it was written for) compiled through
   the kernel caches on node's device, and its entry `name`. */
static tn_result tn__cuda_catalogue_fn(const tn_var *node, const char *src, int n, size_t cap, tn_dtype t, const char *name,
                                       tn__CUfunction *fn) {
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(node->device, &D, who);
    if (r != TN_OK) return r;
    if (n <= 0 || (size_t)n >= cap) return tn__err(TN_ERR_INTERNAL, "%s: no kernel source for %s", who, tn_dtype_name(t));
    tn__kentry *e;
    if ((r = tn__cuda_kernel_get(src, D->arch, tn_get_config()->fast_math, &e)) != TN_OK ||
        (r = tn__cuda_entry_function(D, e, name, fn)) != TN_OK)
        return tn__err(r, "%s: %s", who, tn_last_error());
    return TN_OK;
}

static tn_result tn__cuda_cum_prepare(const tn_var *node, void **state) {
    *state = NULL;
    char src[2048];
    tn__CUfunction fn;
    tn_dtype t = node->in[0]->type.dtype;
    tn_result r = tn__cuda_catalogue_fn(node, src, tn__cum_cuda_source(node->op, t, src, sizeof src), sizeof src, t, "tn_cum", &fn);
    if (r != TN_OK) return r;
    tn__cuda_cum_state *st = (tn__cuda_cum_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_cuda: out of memory preparing %s (node %d)", tn__op_def(node->op)->name, node->id);
    st->fn = fn;
    *state = st;
    return TN_OK;
}

static tn_result tn__cuda_cum_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    const tn__cuda_cum_state *st = (const tn__cuda_cum_state *)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    const tn_array *x = in[0], *y = out[0];
    int axis = tn__p_axis(&node->p);
    long long outer = 1, n = x->shape[axis], inner = 1;
    for (int d = 0; d < x->ndim; d++)
        if (d < axis) outer *= x->shape[d];
        else if (d > axis) inner *= x->shape[d];
    long long lines = outer * inner;
    if (lines == 0 || n == 0) return TN_OK;
    if (!tn_array_is_contiguous(y)) return tn__err(TN_ERR_INTERNAL, "%s: the output is not contiguous", who);
    if ((lines + 255) / 256 > 2147483647LL) return tn__err(TN_ERR_UNSUPPORTED, "%s: %lld lines are more than one launch takes", who, lines);
    tn_array *tmp = NULL;
    if (!tn_array_is_contiguous(x) && !(x = tmp = tn__cuda_contiguous(x, who))) return tn_last_result();
    void *xp = x->data, *yp = y->data;
    void *params[5] = { &xp, &yp, &lines, &n, &inner };
    tn__CUresult cr = tn__cuda.cu.cuLaunchKernel(st->fn, (unsigned)((lines + 255) / 256), 1, 1, 256, 1, 1, 0, tn__cuda_stream(D), params, NULL);
    tn_array_free(tmp);         /* back to the cache on this stream, after the kernel in stream order */
    if (cr != TN__CUDA_SUCCESS) {
        char eb[160];
        return tn__err(cr == TN__CUDA_ERROR_OUT_OF_MEMORY ? TN_ERR_OOM : TN_ERR_DEVICE, "cuLaunchKernel failed in %s: %s", who, tn__cu_errstr(cr, eb, sizeof eb));
    }
    return tn__cuda_sync_if_blocking(D, who);
}

/* >>cuda_eye: Eye of symbolic sizes (tn_eye_var) ---------------------------- */
/* The kernel is tensor_ops.h's (>>eye_cuda), one per element size, compiled
   at prepare time. n and m come from the output's planned shape (their values
   stay on the host: a new value is a new plan, which drops captured graphs);
   k is read on the device from its int64 input, so a new k is an ordinary
   input copy and a replayed graph stays right. (tn_eye's constant sizes fold
   to a constant at compile time: no kernel.) */
typedef struct tn__cuda_eye_state { tn__CUfunction fn; unsigned char one[8]; } tn__cuda_eye_state;

static bool tn__cuda_eye_supports(const tn_var *node) {
    return node->op == TN_OP_EYE && node->n_in == 3 && node->in[2]->type.dtype == TN_I64 &&
           tn__eye_cuda_source(tn_dtype_size(node->type.dtype), NULL, 0) > 0;
}

static tn_result tn__cuda_eye_prepare(const tn_var *node, void **state) {
    *state = NULL;
    char src[1024];
    tn__CUfunction fn;
    tn_dtype t = node->type.dtype;
    tn_result r = tn__cuda_catalogue_fn(node, src, tn__eye_cuda_source(tn_dtype_size(t), src, sizeof src), sizeof src, t, "tn_eye", &fn);
    if (r != TN_OK) return r;
    tn__cuda_eye_state *st = (tn__cuda_eye_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_cuda: out of memory preparing Eye (node %d)", node->id);
    st->fn = fn;
    tn__eye_one_bits(node->type.dtype, st->one);
    *state = st;
    return TN_OK;
}

static tn_result tn__cuda_eye_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    tn__cuda_eye_state *st = (tn__cuda_eye_state *)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    const tn_array *y = out[0], *k = in[2];
    long long n = y->shape[0], m = y->shape[1], total = n * m;
    if (total == 0) return TN_OK;
    if (!tn_array_is_contiguous(y)) return tn__err(TN_ERR_INTERNAL, "%s: the output is not contiguous", who);
    if (k->device != y->device) return tn__err(TN_ERR_INTERNAL, "%s: k is not on cuda%d", who, y->device);
    long long blocks = (total + 255) / 256;
    if (blocks > 65536) blocks = 65536;            /* the kernel strides over the rest */
    void *yp = y->data, *kp = k->data;
    void *params[5] = { &yp, &n, &m, &kp, st->one };
    tn__CUresult cr = tn__cuda.cu.cuLaunchKernel(st->fn, (unsigned)blocks, 1, 1, 256, 1, 1, 0, tn__cuda_stream(D), params, NULL);
    if (cr != TN__CUDA_SUCCESS) {
        char eb[160];
        return tn__err(cr == TN__CUDA_ERROR_OUT_OF_MEMORY ? TN_ERR_OOM : TN_ERR_DEVICE, "cuLaunchKernel failed in %s: %s", who, tn__cu_errstr(cr, eb, sizeof eb));
    }
    return tn__cuda_sync_if_blocking(D, who);
}

/* >>cuda_index: gathers, scatters and sorts ------------------------------------ */
/* The kernels are tensor_ops.h's (>>index_cuda), compiled once per mode,
   dtype, rank and index count (gathers, scatters) or dtype and direction
   (sorts) at prepare time. A gather or scatter with index arrays clears its
   node's bad-index record before the kernel and reads it back after (a wait
   on the stream: such a function is not replayed as a CUDA graph); an index
   out of range is then the CPU's error. A gather whose rows are runs of
   whole 16-byte units moves them as such (a second kernel, of uint4s). A
   scatter first copies x into its output unless the output took x's
   buffer (inplace). A sort runs in a
   temporary index array of the caching allocator: chunk sorts, merge passes,
   then the first k of each line into the output. */
typedef struct tn__cuda_index_state {
    tn__CUfunction fn, merge, out;     /* tn_index; or tn_sort_block, tn_sort_merge, tn_sort_out */
    tn__CUfunction wide;               /* a gather's tn_index of 16-byte units (tn__cuda_index_widen), or 0 */
    void *err;                         /* device: the bad-index record (4 int64) */
    int64_t *pin;                      /* its pinned host copy */
    int dev;
} tn__cuda_index_state;

static void tn__cuda_index_release(void *state) {
    tn__cuda_index_state *st = (tn__cuda_index_state *)state;
    if (!st) return;
    if (st->err) tn__cuda_free(st->dev, st->err);
    if (st->pin) tn__cuda_host_free(st->dev, st->pin, 4 * sizeof(int64_t));
    tn__free(st);
}

static bool tn__cuda_index_supports(const tn_var *node) {
    for (int i = 0; i < node->n_in; i++)
        if (!tn__cuda_stype(node->in[i]->type.dtype)) return false;
    if (node->op == TN_OP_ARGSORT) return node->in[0]->type.ndim >= 1 && tn__sort_cuda_source(node->in[0]->type.dtype, false, NULL, 0) > 0;
    return tn__index_cuda_source(0, node->in[0]->type.dtype, 0, 0, NULL, 0) > 0;
}

/* The mode, rank of the indexed shape and index count of a gather or scatter node. */
static tn_result tn__cuda_index_shape(const tn_var *node, int *mode, int *nd, int *k) {
    tn_type in[2 + TN_MAX_DIMS], g;
    for (int i = 0; i < node->n_in; i++) in[i] = node->in[i]->type;
    const char *who = tn__op_def(node->op)->name;
    if (node->op == TN_OP_INC_SUBTENSOR) { *mode = tn__p_incsub_set(&node->p) ? 1 : 2; *nd = in[0].ndim; *k = 0; return TN_OK; }
    *mode = node->op == TN_OP_ADV_SUBTENSOR ? 0 : tn__p_index_set(&node->p) ? 1 : 2;
    *k = node->n_in - (*mode ? 2 : 1);
    tn_result r = tn__index_type(who, &node->p, &in[0], *k, in + node->n_in - *k, &g);
    *nd = g.ndim;
    return r;
}

static tn_result tn__cuda_index_prepare(const tn_var *node, void **state) {
    *state = NULL;
    char who[128], src[8192];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(node->device, &D, who);
    if (r != TN_OK) return r;
    int mode = 0, nd = 0, k = 0, n;
    bool sort = node->op == TN_OP_ARGSORT;
    tn_dtype t = node->in[0]->type.dtype;
    if (!sort && (r = tn__cuda_index_shape(node, &mode, &nd, &k)) != TN_OK) return tn__err(r, "%s: %s", who, tn_last_error());
    n = sort ? tn__sort_cuda_source(t, tn__p_sort_desc(&node->p), src, sizeof src) : tn__index_cuda_source(mode, t, nd, k, src, sizeof src);
    if (n <= 0 || (size_t)n >= sizeof src) return tn__err(TN_ERR_INTERNAL, "%s: no kernel source for %s", who, tn_dtype_name(t));
    tn__cuda_index_state *st = (tn__cuda_index_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "%s: out of memory", who);
    st->dev = node->device;
    tn__kentry *e;
    if ((r = tn__cuda_kernel_get(src, D->arch, tn_get_config()->fast_math, &e)) != TN_OK ||
        (r = tn__cuda_entry_function(D, e, sort ? "tn_sort_block" : "tn_index", &st->fn)) != TN_OK ||
        (sort && ((r = tn__cuda_entry_function(D, e, "tn_sort_merge", &st->merge)) != TN_OK ||
                  (r = tn__cuda_entry_function(D, e, "tn_sort_out", &st->out)) != TN_OK))) {
        tn__free(st);
        return tn__err(r, "%s: %s", who, tn_last_error());
    }
    /* a gather whose rows may move as 16-byte units (a last dim not known yet, or of whole units): the wide kernel too */
    const tn_type *ot = &node->type;
    if (!sort && mode == 0 && nd >= 1 && ot->ndim >= 1 && (ot->shape[ot->ndim - 1] < 0 || ot->shape[ot->ndim - 1] * (int64_t)tn_dtype_size(t) % 16 == 0)) {
        n = tn__index_cuda_source_wide(mode, nd, k, src, sizeof src);
        if (n <= 0 || (size_t)n >= sizeof src) r = tn__err(TN_ERR_INTERNAL, "%s: no wide gather kernel source", who);
        else if ((r = tn__cuda_kernel_get(src, D->arch, tn_get_config()->fast_math, &e)) == TN_OK) r = tn__cuda_entry_function(D, e, "tn_index", &st->wide);
        if (r != TN_OK) {
            tn__free(st);
            return tn__err(r, "%s: %s", who, tn_last_error());
        }
    }
    if (k > 0 && (!(st->err = tn__cuda_alloc(st->dev, 4 * sizeof(int64_t))) || !(st->pin = (int64_t *)tn__cuda_host_alloc(st->dev, 4 * sizeof(int64_t))))) {
        r = tn_last_result();
        tn__cuda_index_release(st);
        return tn__err(r, "%s: %s", who, tn_last_error());
    }
    *state = st;
    return TN_OK;
}

/* A grid of gx x gy x gz blocks (gy, gz <= 65535) on D's stream. */
static tn_result tn__cuda_launch3(tn__CUfunction fn, long long gx, unsigned gy, unsigned gz, unsigned threads, void **params, tn__cuda_dev *D, const char *who) {
    if (gx > 2147483647LL) return tn__err(TN_ERR_UNSUPPORTED, "%s: %lld blocks are more than one launch takes", who, gx);
    tn__CUresult cr = tn__cuda.cu.cuLaunchKernel(fn, (unsigned)gx, gy, gz, threads, 1, 1, 0, tn__cuda_stream(D), params, NULL);
    if (cr != TN__CUDA_SUCCESS) {
        char eb[160];
        return tn__err(cr == TN__CUDA_ERROR_OUT_OF_MEMORY ? TN_ERR_OOM : TN_ERR_DEVICE, "cuLaunchKernel failed in %s: %s", who, tn__cu_errstr(cr, eb, sizeof eb));
    }
    return TN_OK;
}

static tn_result tn__cuda_launch(tn__CUfunction fn, long long blocks, unsigned threads, void **params, tn__cuda_dev *D, const char *who) {
    return tn__cuda_launch3(fn, blocks, 1, 1, threads, params, D, who);
}

/* A gather plan whose innermost dim moves whole 16-byte units on both sides
   (unindexed, contiguous, its bytes, the other strides and both addresses
   multiples of 16) rewritten in uint4 elements for the wide kernel; returns
   the elements a unit holds (1: left as it is). */
static int64_t tn__cuda_index_widen(tn__cuda_iplan *C, int nd, int k, int64_t es) {
    int e = nd - 1;
    if (nd < 1 || es >= 16 || C->ts[e] != es || C->ss[e] != es || C->shape[e] * es % 16 || C->t % 16 || C->s % 16) return 1;
    for (int j = 0; j < k; j++)
        if (C->is[j][e] || C->as[j] % 16) return 1;
    for (int d = 0; d < e; d++)
        if (C->ts[d] % 16 || C->ss[d] % 16) return 1;
    int64_t f = 16 / es;
    C->n /= f;
    C->shape[e] /= f;
    C->ts[e] = C->ss[e] = 16;
    return f;
}

static tn_result tn__cuda_index_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    const tn__cuda_index_state *st = (const tn__cuda_index_state *)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    tn_array *y = out[0];
    const tn_array *x = in[0], *v = NULL;
    tn__iplan P;
    int64_t ss[TN_MAX_DIMS] = { 0 };
    if (node->op == TN_OP_ADV_SUBTENSOR) {
        tn__iplan_build(&P, &node->p, (char *)x->data, x->ndim, x->shape, x->strides, node->n_in - 1, in + 1);
        for (int d = 0; d < P.nd; d++) ss[d] = y->strides[d];
    } else {
        if (y->data != x->data && (r = tn__cuda_copy_into(y, x, who)) != TN_OK) return r;
        if (node->op == TN_OP_INC_SUBTENSOR) tn__iplan_slice(&P, &node->p, y);
        else tn__iplan_build(&P, &node->p, (char *)y->data, y->ndim, y->shape, y->strides, node->n_in - 2, in + 2);
        v = in[1];
        if (!tn__broadcast_strides(v, P.nd, P.shape, ss)) return tn__err(TN_ERR_SHAPE, "%s: v does not broadcast to the indexed shape", who);
    }
    if (P.n == 0) return TN_OK;
    tn__cuda_iplan C;
    memset(&C, 0, sizeof C);
    C.n = P.n;
    C.t = (int64_t)(uintptr_t)P.t;
    C.s = (int64_t)(uintptr_t)(v ? v->data : y->data);
    C.err = (int64_t)(uintptr_t)st->err;
    for (int d = 0; d < P.nd; d++) {
        C.shape[d] = P.shape[d]; C.ts[d] = P.ts[d]; C.ss[d] = ss[d];
        for (int j = 0; j < P.k; j++) C.is[j][d] = P.is[j][d];
    }
    for (int j = 0; j < P.k; j++) { C.ip[j] = (int64_t)(uintptr_t)P.ip[j]; C.i32[j] = P.i32[j]; C.as[j] = P.as[j]; C.an[j] = P.an[j]; }
    tn__CUstream s = tn__cuda_stream(D);
    if (P.k > 0) TN__CU_CHECK(tn__cuda.cu.cuMemsetD8Async((tn__CUdeviceptr)(uintptr_t)st->err, 0, 4 * sizeof(int64_t), s), who);
    int64_t f = st->wide ? tn__cuda_index_widen(&C, P.nd, P.k, (int64_t)tn_dtype_size(y->dtype)) : 1;
    long long blocks = (C.n + 255) / 256;
    void *params[1] = { &C };
    if ((r = tn__cuda_launch(f > 1 ? st->wide : st->fn, blocks < 65536 ? blocks : 65536, 256, params, D, who)) != TN_OK) return r;
    if (P.k > 0) {
        TN__CU_CHECK(tn__cuda.cu.cuMemcpyDtoHAsync_v2(st->pin, (tn__CUdeviceptr)(uintptr_t)st->err, 4 * sizeof(int64_t), s), who);
        TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(s), who);
        if (st->pin[0]) {
            tn__ibad b = { st->pin[1] * f, st->pin[2], (int)st->pin[3] };   /* a unit's first element */
            return tn__ibad_err(node, &P, &b);
        }
    }
    return tn__cuda_sync_if_blocking(D, who);
}

static tn_result tn__cuda_sort_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    const tn__cuda_index_state *st = (const tn__cuda_index_state *)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    const tn_array *x = in[0];
    tn_array *y = out[0];
    int axis = tn__p_axis(&node->p);
    long long outer = 1, n = x->shape[axis], inner = 1, k = y->shape[axis];
    for (int d = 0; d < x->ndim; d++)
        if (d < axis) outer *= x->shape[d];
        else if (d > axis) inner *= x->shape[d];
    long long lines = outer * inner, chunks = (n + TN__SORT_CHUNK - 1) / TN__SORT_CHUNK, total = lines * n;
    if (lines == 0 || n == 0 || k == 0) return TN_OK;
    if (!tn_array_is_contiguous(y)) return tn__err(TN_ERR_INTERNAL, "%s: the output is not contiguous", who);
    tn_array *tmp = NULL, *A = NULL, *B = NULL;
    if (!tn_array_is_contiguous(x) && !(x = tmp = tn__cuda_contiguous(x, who))) return tn_last_result();
    int64_t len = total;
    long long m = n < TN__SORT_CHUNK ? n : TN__SORT_CHUNK;
    unsigned threads = 32;
    while ((long long)threads < m && threads < 1024) threads *= 2;
    void *xp = x->data, *ap = NULL, *bp = NULL, *yp = y->data;
    void *pb[6] = { &xp, &ap, &lines, &n, &inner, &chunks }, *po[6] = { &ap, &yp, &lines, &n, &inner, &k };
    if (!(A = tn__array_alloc(TN_I64, 1, &len, D->ordinal)) || (n > TN__SORT_CHUNK && !(B = tn__array_alloc(TN_I64, 1, &len, D->ordinal)))) {
        r = tn_last_result();
        goto done;
    }
    ap = A->data;
    bp = B ? B->data : NULL;
    if ((r = tn__cuda_launch(st->fn, lines * chunks, threads, pb, D, who)) != TN_OK) goto done;
    for (long long w = TN__SORT_CHUNK; w < n; w *= 2) {
        void *pm[7] = { &xp, &ap, &bp, &lines, &n, &inner, &w };
        if ((r = tn__cuda_launch(st->merge, (total + 255) / 256, 256, pm, D, who)) != TN_OK) goto done;
        void *t = ap; ap = bp; bp = t;
    }
    r = tn__cuda_launch(st->out, (lines * k + 255) / 256, 256, po, D, who);
done:
    tn_array_free(A);           /* back to the cache on this stream, after the kernels in stream order */
    tn_array_free(B);
    tn_array_free(tmp);
    return r != TN_OK ? r : tn__cuda_sync_if_blocking(D, who);
}

/* >>cuda_reshape: Reshape and Flatten ---------------------------------------- */
/* A view when the executor aliased the output to the input (its input is a
   kernel's contiguous output: tensor.h, tn__reshape_aliases): strides only,
   as on the CPU. Else a copy (tensor_ops.h >>ops_shape): on the device, the
   input read in row-major order into the contiguous output (one DMA when
   the input is contiguous, else the elementwise copy kernel over a view of
   the output with the input's shape). */
static tn_result tn__cuda_reshape_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    (void)state;
    if (out[0]->data == in[0]->data && out[0]->base == in[0]->base) return tn__op_def(node->op)->cpu(node, in, out);
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    const tn_array *x = in[0];
    tn_array v = *out[0];
    if (tn_array_size(x) != tn_array_size(&v) || !tn_array_is_contiguous(&v))
        return tn__err(TN_ERR_INTERNAL, "%s: %lld elements into %lld", who, (long long)tn_array_size(x), (long long)tn_array_size(&v));
    v.ndim = x->ndim;
    memcpy(v.shape, x->shape, sizeof v.shape);
    tn__contiguous_strides(v.dtype, v.ndim, v.shape, v.strides);
    tn_result r = tn__cuda_copy_into(&v, x, who);
    if (r != TN_OK) return r;
    tn__cuda_dev *D;
    return (r = tn__cuda_enter(v.device, &D, who)) != TN_OK ? r : tn__cuda_sync_if_blocking(D, who);
}

static bool tn__cuda_reshape_supports(const tn_var *node) { return tn__cuda_stype(node->type.dtype); }

/* >>cuda_join: Join (tn_concatenate) ------------------------------------------ */
/* Each input copied into its slab of the output along the axis: one DMA
   where both are contiguous (axis 0 of a contiguous output), else the
   elementwise copy kernel over the slab's strides. */
static tn_result tn__cuda_join_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    (void)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn_result r = TN_OK;
    int ax = tn__p_axis(&node->p);
    int64_t at = 0;
    for (int i = 0; i < node->n_in && r == TN_OK; i++) {
        tn_array v = *out[0];
        v.shape[ax] = in[i]->shape[ax];
        v.data = (char *)out[0]->data + at * out[0]->strides[ax];
        at += in[i]->shape[ax];
        if (tn_array_size(&v) > 0) r = tn__cuda_copy_into(&v, in[i], who);
    }
    tn__cuda_dev *D;
    return r != TN_OK ? r : (r = tn__cuda_enter(out[0]->device, &D, who)) != TN_OK ? r : tn__cuda_sync_if_blocking(D, who);
}

static bool tn__cuda_join_supports(const tn_var *node) {
    for (int i = 0; i < node->n_in; i++) if (node->in[i]->type.dtype != node->type.dtype) return false;
    return tn__cuda_stype(node->type.dtype);
}

/* >>cuda_print: the Print op on the device --------------------------------------- */
/* The value goes to the host (a copy ordered after the work queued so far,
   which waits) to be printed by the op's own printer; the output is a copy
   on the device. */
static tn_result tn__cuda_print_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    (void)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(in[0]->device, &D, who);
    if (r != TN_OK) return r;
    TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(D)), who);
    tn_array *h = tn_array_to_host(in[0]);
    if (!h) return tn_last_result();
    r = tn__print_show(node, h);
    tn_array_free(h);
    return r != TN_OK ? r : tn__cuda_copy_into(out[0], in[0], who);
}

/* >>cuda_conv: im2col and col2im ---------------------------------------------- */
/* The kernels are tensor_ops.h's (>>conv_cuda: the CPU's gathers as CUDA C),
   compiled once per dtype at prepare time (both in one module): im2col a
   thread per output position and row, looping over the images; col2im a
   thread per image element; a strided input is first made contiguous. The
   products around them are cuBLAS's (batched over the groups and the
   batch). */
typedef struct tn__cgeo_dev {          /* the kernels' view of tn__cgeo (the layout of tensor_ops.h >>conv_cuda's tn_cg) */
    long long k[3], s[3], plo[3], dl[3], in[3], out[3];
    long long N, C, Cg, K, L, n;
    double padv;
    int nsp, G;
    int small;                         /* every index of the call below 2^31: the kernels divide in 32 bits */
} tn__cgeo_dev;

static void tn__cgeo_to_dev(const tn__cgeo *g, int64_t n, tn__cgeo_dev *o) {
    memset(o, 0, sizeof *o);
    for (int d = 0; d < 3; d++) {
        o->k[d] = g->k[d]; o->s[d] = g->s[d]; o->plo[d] = g->plo[d]; o->dl[d] = g->dl[d]; o->in[d] = g->in[d]; o->out[d] = g->out[d];
    }
    o->N = g->N; o->C = g->C; o->Cg = g->Cg; o->K = g->K; o->L = g->L; o->n = n; o->padv = g->padv;
    o->nsp = g->nsp; o->G = g->G;
    int64_t img = g->N * g->C, cols = g->N * g->Cg * g->K * g->L * g->G;
    for (int d = 0; d < g->nsp; d++) img *= g->in[d];
    o->small = n < INT32_MAX && img < INT32_MAX && cols < INT32_MAX;
}

static bool tn__cuda_conv_supports(const tn_var *node) {
    return tn__conv_cuda_source(node->in[0]->type.dtype, NULL, 0) > 0;
}

/* The state of a node whose kernel is one function of a generated source
   (im2col/col2im, pooling, random draws): src (n: its generator's length,
   <= 0: no kernel for dtype t) compiled through the kernel cache at prepare
   time, its function `entry` kept (and `entry2`'s and `entry3`'s of the same
   source, where they are not NULL). */
typedef struct tn__cuda_fn_state { tn__CUfunction fn, fn2, fn3; } tn__cuda_fn_state;

static tn_result tn__cuda_fn_prepare(const tn_var *node, const char *src, int n, size_t cap, tn_dtype t, const char *entry,
                                     const char *entry2, const char *entry3, void **state) {
    *state = NULL;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(node->device, &D, who);
    if (r != TN_OK) return r;
    if (n <= 0 || (size_t)n >= cap) return tn__err(TN_ERR_INTERNAL, "%s: no kernel source for %s", who, tn_dtype_name(t));
    tn__kentry *e;
    tn__cuda_fn_state s = { 0, 0, 0 };
    if ((r = tn__cuda_kernel_get(src, D->arch, false, &e)) != TN_OK || (r = tn__cuda_entry_function(D, e, entry, &s.fn)) != TN_OK ||
        (entry2 && (r = tn__cuda_entry_function(D, e, entry2, &s.fn2)) != TN_OK) ||
        (entry3 && (r = tn__cuda_entry_function(D, e, entry3, &s.fn3)) != TN_OK))
        return tn__err(r, "%s: %s", who, tn_last_error());
    tn__cuda_fn_state *st = (tn__cuda_fn_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "%s: out of memory", who);
    *st = s;
    *state = st;
    return TN_OK;
}

static tn_result tn__cuda_conv_prepare(const tn_var *node, void **state) {
    char src[6144];
    tn_dtype t = node->in[0]->type.dtype;
    return tn__cuda_fn_prepare(node, src, tn__conv_cuda_source(t, src, sizeof src), sizeof src, t,
                               node->op == TN_OP_IM2COL ? "tn_im2col" : "tn_col2im", NULL, NULL, state);
}

static tn_result tn__cuda_conv_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    const tn__cuda_fn_state *st = (const tn__cuda_fn_state *)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    const tn_array *x = in[0];
    tn_array *y = out[0];
    bool fwd = node->op == TN_OP_IM2COL;
    tn__cgeo g;
    tn__cgeo_of(&node->p, fwd ? x->shape[0] : y->shape[0], fwd ? x->shape[1] : y->shape[1], &g);
    long long n = tn_array_size(y);
    if (n == 0) return TN_OK;
    if (!tn_array_is_contiguous(y)) return tn__err(TN_ERR_INTERNAL, "%s: the output is not contiguous", who);
    tn_array *tmp = NULL;
    if (!tn_array_is_contiguous(x) && !(x = tmp = tn__cuda_contiguous(x, who))) return tn_last_result();
    tn__cgeo_dev G;
    tn__cgeo_to_dev(&g, n, &G);
    void *xp = x->data, *yp = y->data;
    void *params[3] = { &xp, &yp, &G };
    if (fwd) {      /* blocks of output positions (x) by rows (y) by a share of the images (z): about 2048 blocks */
        unsigned threads = g.L >= 256 ? 256 : (unsigned)((g.L + 31) / 32 * 32);
        long long gx = (g.L + threads - 1) / threads, gy = g.G * g.Cg * g.K < 65535 ? g.G * g.Cg * g.K : 65535, gz = (2048 + gx * gy - 1) / (gx * gy);
        if (gz > g.N) gz = g.N;
        if (gz > 65535) gz = 65535;
        r = tn__cuda_launch3(st->fn, gx, (unsigned)gy, (unsigned)gz, threads, params, D, who);
    } else r = tn__cuda_launch(st->fn, (n + 255) / 256, 256, params, D, who);
    tn_array_free(tmp);         /* back to the cache on this stream, after the kernel in stream order */
    return r != TN_OK ? r : tn__cuda_sync_if_blocking(D, who);
}

/* >>cuda_pool: direct pooling ------------------------------------------------ */
/* The kernel is tensor_ops.h's (>>pool_cuda: the CPU's fold as CUDA C),
   compiled once per dtype at prepare time; one thread per output element,
   reading its window from the image (no columns: x read once, y written
   once); a strided input is first made contiguous. */
typedef struct tn__pgeo_dev {          /* the kernel's view of tn__cgeo (the layout of tensor_ops.h >>pool_cuda's tn_pg) */
    long long k[3], s[3], plo[3], dl[3], in[3], out[3];
    long long C, K, L, S, n;
    int nsp, mode, box;
    int small;                         /* every index of the call below 2^31: the kernel divides in 32 bits */
    int pairs;                         /* POOL_GRAD's window threads: two elements an access along the last dim */
} tn__pgeo_dev;

static bool tn__cuda_pool_supports(const tn_var *node) {
    return tn__pool_cuda_source(node->in[0]->type.dtype, NULL, 0) > 0;
}

/* tn_pool2w_*'s windows (tensor_ops.h >>pool_cuda): two spatial dims, two wide
   with stride two along the last, no dilation there; decided by the params
   alone (the run still takes tn_pool where g.box). */
static bool tn__cuda_pool_2w(const tn_var *node) {
    tn__cgeo g;
    tn__cgeo_of(&node->p, 1, 1, &g);
    return g.nsp == 2 && g.k[1] == 2 && g.s[1] == 2 && g.dl[1] == 1;
}

static tn_result tn__cuda_pool_prepare(const tn_var *node, void **state) {
    char src[12288];
    tn_dtype t = node->in[0]->type.dtype;
    bool w2 = tn__cuda_pool_2w(node);
    char e2[16], e3[16];      /* tn_pool2w_<mode><s|l>: 32- and 64-bit indices */
    snprintf(e2, sizeof e2, "tn_pool2w_%ds", tn__p_pool_mode(&node->p));
    snprintf(e3, sizeof e3, "tn_pool2w_%dl", tn__p_pool_mode(&node->p));
    return tn__cuda_fn_prepare(node, src, tn__pool_cuda_source(t, src, sizeof src), sizeof src, t, "tn_pool",
                               w2 ? e2 : NULL, w2 ? e3 : NULL, state);
}

static TN__ATOMIC(int) tn__cuda_pool_wide;       /* tn__cuda_pool_wide_index */
TN_API void tn__cuda_pool_wide_index(bool on) { tn__atomic_store(&tn__cuda_pool_wide, on ? 1 : 0); }

/* The kernels' geometry for POOL or POOL_GRAD over image x (n: the launch's elements). */
static void tn__pgeo_of(const tn_var *node, const tn_array *x, long long n, tn__pgeo_dev *G) {
    tn__cgeo g;
    tn__cgeo_of(&node->p, x->shape[0], x->shape[1], &g);
    memset(G, 0, sizeof *G);
    G->S = 1;
    for (int d = 0; d < 3; d++) {
        G->k[d] = g.k[d]; G->s[d] = g.s[d]; G->plo[d] = g.plo[d]; G->dl[d] = g.dl[d]; G->in[d] = g.in[d]; G->out[d] = g.out[d];
        if (d < g.nsp) G->S *= g.in[d];
    }
    G->C = g.C; G->K = g.K; G->L = g.L; G->n = n;
    G->nsp = g.nsp; G->mode = tn__p_pool_mode(&node->p); G->box = g.N * g.L == 1;
    G->small = n < INT32_MAX && tn_array_size(x) < INT32_MAX && g.N * g.C * g.L < INT32_MAX && !tn__atomic_load(&tn__cuda_pool_wide);
}

static tn_result tn__cuda_pool_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    const tn__cuda_fn_state *st = (const tn__cuda_fn_state *)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    const tn_array *x = in[0];
    tn_array *y = out[0];
    long long n = tn_array_size(y);
    if (n == 0) return TN_OK;
    if (!tn_array_is_contiguous(y)) return tn__err(TN_ERR_INTERNAL, "%s: the output is not contiguous", who);
    tn__pgeo_dev G;
    tn__pgeo_of(node, x, n, &G);
    tn_array *tmp = NULL;
    if (!tn_array_is_contiguous(x) && !(x = tmp = tn__cuda_contiguous(x, who))) return tn_last_result();
    void *xp = x->data, *yp = y->data;
    void *params[3] = { &xp, &yp, &G };
    tn__CUfunction fn = st->fn;
    if (st->fn2 && !G.box) {       /* one thread per V outputs along a line */
        long long V = tn__pool_2w_per_thread(y->dtype);
        G.n = n / G.out[1] * ((G.out[1] + V - 1) / V);
        fn = G.small ? st->fn2 : st->fn3;
    }
    r = tn__cuda_launch(fn, (G.n + 255) / 256, 256, params, D, who);
    tn_array_free(tmp);         /* back to the cache on this stream, after the kernel in stream order */
    return r != TN_OK ? r : tn__cuda_sync_if_blocking(D, who);
}

/* POOL_GRAD: tensor_ops.h's >>pool_grad_cuda, a thread per image element, or
   per window where no two windows share an element (the elements in no
   window zeroed first); strided inputs (a broadcast gradient above all)
   first made contiguous. */
static bool tn__cuda_pool_grad_supports(const tn_var *node) {
    return tn__pool_grad_cuda_source(node->in[0]->type.dtype, NULL, 0) > 0;
}

static tn_result tn__cuda_pool_grad_prepare(const tn_var *node, void **state) {
    char src[6144];
    tn_dtype t = node->in[0]->type.dtype;
    return tn__cuda_fn_prepare(node, src, tn__pool_grad_cuda_source(t, src, sizeof src), sizeof src, t, "tn_pool_grad", "tn_pool_grad_w", NULL,
                               state);
}

static tn_result tn__cuda_pool_grad_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    const tn__cuda_fn_state *st = (const tn__cuda_fn_state *)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    tn_array *gx = out[0];
    long long n = tn_array_size(gx);
    if (n == 0) return TN_OK;
    if (!tn_array_is_contiguous(gx)) return tn__err(TN_ERR_INTERNAL, "%s: the output is not contiguous", who);
    tn__pgeo_dev G;
    tn__pgeo_of(node, in[0], n, &G);
    tn__cgeo cg;
    tn__cgeo_of(&node->p, in[0]->shape[0], in[0]->shape[1], &cg);
    bool covers, w = tn__pool_grad_disjoint(&cg, &covers);   /* tensor_ops.h >>pool_grad_cpu's test */
    if (w) {        /* a thread a window; the elements no window reads are zeros */
        G.n = tn_array_size(in[1]);
        if (!covers)
            TN__CU_CHECK(tn__cuda.cu.cuMemsetD8Async((tn__CUdeviceptr)(uintptr_t)gx->data, 0, (size_t)n * tn_dtype_size(gx->dtype),
                                                     tn__cuda_stream(D)), who);
    }
    const tn_array *a[3];
    tn_array *tmp[3] = { NULL, NULL, NULL };
    for (int k = 0; k < 3; k++) {
        a[k] = in[k];
        if (!tn_array_is_contiguous(a[k]) && !(a[k] = tmp[k] = tn__cuda_contiguous(a[k], who))) {
            for (int j = 0; j < k; j++) tn_array_free(tmp[j]);
            return tn_last_result();
        }
    }
    void *xp = a[0]->data, *yp = a[1]->data, *gp = a[2]->data, *op = gx->data;
    void *params[5] = { &xp, &yp, &gp, &op, &G };
    size_t pb = 2 * tn_dtype_size(gx->dtype);      /* a pair's bytes: pairs start at even elements of even-length lines */
    int e = G.nsp - 1;
    G.pairs = w && G.k[e] == 2 && G.dl[e] == 1 && G.s[e] % 2 == 0 && G.plo[e] % 2 == 0 && G.in[e] % 2 == 0 &&
              ((uintptr_t)xp % pb | (uintptr_t)op % pb) == 0;
    r = G.n == 0 ? TN_OK : tn__cuda_launch(w ? st->fn2 : st->fn, (G.n + 255) / 256, 256, params, D, who);
    for (int k = 0; k < 3; k++) tn_array_free(tmp[k]);   /* back to the cache on this stream, after the kernel in stream order */
    return r != TN_OK ? r : tn__cuda_sync_if_blocking(D, who);
}

/* >>cuda_random: random draws ------------------------------------------------ */
/* The kernel is tensor_ops.h's (>>random_cuda: the CPU's functions as text),
   compiled once per distribution and dtype at prepare time without fast math
   (its fma, division and sqrt are IEEE's), so the GPU draws the CPU's bits.
   A thread per Philox block, at most 16 blocks of 256 threads an SM (a
   thread loops over the rest); the seed and the call count (views of the
   state) are read on the device, so a call needs no copy back. A draw fused
   into an elementwise kernel is >>cuda_codegen's. */
static bool tn__cuda_rnd_supports(const tn_var *node) {
    return tn__random_cuda_source(tn__p_rand_dist(&node->p), node->type.dtype, NULL, 0) > 0;
}

static tn_result tn__cuda_rnd_prepare(const tn_var *node, void **state) {
    char src[12288];
    return tn__cuda_fn_prepare(node, src, tn__random_cuda_source(tn__p_rand_dist(&node->p), node->type.dtype, src, sizeof src), sizeof src,
                               node->type.dtype, "tn_random", NULL, NULL, state);
}

static tn_result tn__cuda_rnd_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    const tn__cuda_fn_state *st = (const tn__cuda_fn_state *)state;
    char who[128];
    tn__cuda_who(node, who, sizeof who);
    tn__cuda_dev *D;
    tn_result r = tn__cuda_enter(out[0]->device, &D, who);
    if (r != TN_OK) return r;
    const tn_array *y = out[0];
    tn__rnd_args A = tn__rnd_args_of(node);
    long long n = tn_array_size(y), blocks = (n + tn__rnd_per(A.dist, A.dtype) - 1) / tn__rnd_per(A.dist, A.dtype);
    if (n == 0) return TN_OK;
    if (!tn_array_is_contiguous(y)) return tn__err(TN_ERR_INTERNAL, "%s: the output is not contiguous", who);
    void *seedp = in[0]->data, *callsp = in[1]->data, *yp = y->data;    /* 0-d views of the state */
    unsigned draw = A.draw;
    long long ilow = A.ilow;
    unsigned long long range = A.range;
    void *params[9] = { &seedp, &callsp, &yp, &n, &draw, &A.a, &A.b, &ilow, &range };
    long long grid = (blocks + 255) / 256, cap = (long long)D->sm_count * 16;   /* the kernel's loop takes the rest */
    r = tn__cuda_launch(st->fn, grid > cap && cap > 0 ? cap : grid, 256, params, D, who);
    return r != TN_OK ? r : tn__cuda_sync_if_blocking(D, who);
}

/* >>cuda_backend: the tn_backend of tensor.h ------------------------------- */

/* The back end's per-op table (tn_backend.ops): one row per op with a GPU
   kernel, rows shared by op families. An op without a row runs on the CPU
   (placement moves its data back and forth, and says so). A GPU kernel for
   a new op is its four functions and one line in tn__cuda_op_rows. Every entry
   binds the context first: the executor may call from any thread. */

/* "Gpu<label> (node N)", for messages */
static const char *tn__cuda_who(const tn_var *node, char *who, size_t cap) {
    char lb[80];
    const tn_op_def *d = tn__op_def(node->op);
    if (d && d->label) d->label(node, lb, sizeof lb);
    else snprintf(lb, sizeof lb, "%s", d && d->name ? d->name : "?");
    snprintf(who, cap, "Gpu%s (node %d)", lb, node->id);
    return who;
}

/* Binds the context of the node's device (placement set node->device). */
static tn_result tn__cuda_node_bind(const tn_var *node) {
    tn__cuda_dev *D;
    return tn__cuda_enter(node->device, &D, "tn_cuda");
}

/* No state: the context is bound now, not mid-call. */
static tn_result tn__cuda_bind_prepare(const tn_var *node, void **state) {
    *state = NULL;
    return tn__cuda_node_bind(node);
}

/* elementwise ops and COMPOSITE (fused elementwise programs) */
static bool tn__cuda_ew_supports(const tn_var *node) {
    if (node->op != TN_OP_COMPOSITE && !tn__ew_info(node->op)) return false;
    if (node->n_in + node->n_out > TN__CUDA_MAX_OPERANDS) return false;
    for (int i = 0; i < node->n_in; i++)
        if (!tn__cuda_stype(node->in[i]->type.dtype)) return false;
    return true;
}

static tn_result tn__cuda_ew_prepare(const tn_var *node, void **state) {
    *state = NULL;
    tn_result r = tn__cuda_node_bind(node);
    if (r != TN_OK) return r;
    const tn_ew_program *p = node->op == TN_OP_COMPOSITE ? (const tn_ew_program *)node->ext
                                                         : tn__ew_program_of((tn_var *)node);
    if (!p) return tn__err(TN_ERR_INTERNAL, "tn_cuda: node %d has no elementwise program", node->id);
    if ((r = tn__cuda_check_program(p)) != TN_OK) return r;
    tn__cuda_ew_state *st = (tn__cuda_ew_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_cuda: out of memory preparing node %d", node->id);
    st->prog = p;
    *state = st;
    return TN_OK;
}

static tn_result tn__cuda_ew_node_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    char who[128];
    tn_result r = tn__cuda_node_bind(node);
    return r != TN_OK ? r : tn__cuda_ew_run((tn__cuda_ew_state *)state, in, out, tn__cuda_who(node, who, sizeof who));
}

/* reductions (with or without an elementwise prologue), softmax, log_softmax */
static tn_result tn__cuda_reduce_node_prepare(const tn_var *node, void **state) {
    *state = NULL;
    tn_result r = tn__cuda_node_bind(node);
    return r != TN_OK ? r : tn__cuda_reduce_prepare(node, state);
}

static tn_result tn__cuda_reduce_node_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    char who[128];
    tn_result r = tn__cuda_node_bind(node);
    if (r == TN_OK) r = tn__cuda_reduce_run(node, state, in, out);
    return r != TN_OK ? r : tn__cuda_sync_if_blocking(tn__cuda_dev_get(node->device), tn__cuda_who(node, who, sizeof who));
}

/* products (cuBLAS, loaded at prepare time, not mid-call); a GEMM keeps its
   cuBLASLt plan (>>cuda_lt) as its state */
/* A Gemv with an epilogue (node->ext, tensor.h >>fuse_epilogue): the small
   kernel (tensor_ops.h >>gemv_cuda) storing through tn_epi of the product
   and the epilogue's inputs (element i at e<j>[i * s<j>], a stride of 0
   broadcasting one). With k < 0 it reads the product from c (where cuBLAS
   wrote it, past the small kernel's sizes) and applies the epilogue alone. */
static char *tn__cuda_gemv_epi_source(tn_dtype t, const tn_ew_program *e) {
    tn__sb b = TN__SB_INIT;
    tn__sb_printf(&b, "/* tensor.h gemv kernel: %s, with an epilogue of %d inputs */\n", tn_dtype_name(t), e->n_in);
    tn__cuda_prelude(&b);
    tn__cuda_emit_eval_as(&b, e, "tn_epi");
    tn__sb_puts(&b, "#define TN_GEMV_EPI_PARAMS");
    for (int j = 1; j < e->n_in; j++) tn__sb_printf(&b, ", const %s *e%d, long long s%d", tn__cuda_stype(e->in_dtype[j]), j, j);
    tn__sb_printf(&b, "\n#define TN_GEMV_STORE(i, v) { %s t0; tn_epi((v)", tn__cuda_stype(e->out_dtype[0]));
    for (int j = 1; j < e->n_in; j++) {
        char lv[48];
        snprintf(lv, sizeof lv, "e%d[(i) * s%d]", j, j);
        tn__sb_puts(&b, ", ");
        tn__cuda_load(&b, e->in_dtype[j], lv);
    }
    tn__sb_puts(&b, ", &t0); y[i] = t0; }\n");
    char src[2048];
    int n = tn__gemv_cuda_source(t, src, sizeof src);
    if (n > 0 && (size_t)n < sizeof src) tn__sb_puts(&b, src);
    if (b.oom || n <= 0 || (size_t)n >= sizeof src) { tn__free(b.s); tn__err(TN_ERR_OOM, "tn_cuda: out of memory writing a gemv kernel"); return NULL; }
    return b.s;
}

/* GEMV's state: tensor_ops.h's small-product kernel (>>gemv_cuda) where its
   dtype has one, or the kernel with the node's epilogue. */
static tn_result tn__cuda_la_prepare(const tn_var *node, void **state) {
    tn_result r = tn__cuda_bind_prepare(node, state);
    if (r == TN_OK) r = tn__cublas_load();
    if (r == TN_OK && node->op == TN_OP_GEMM && !(*state = tn__calloc(1, sizeof(tn__cuda_lt_state))))
        r = tn__err(TN_ERR_OOM, "tn_cuda: out of memory preparing a product");
    char src[2048];
    tn_dtype t = node->type.dtype;
    if (r == TN_OK && node->op == TN_OP_GEMV && node->ext) {
        char *es = tn__cuda_gemv_epi_source(t, (const tn_ew_program *)node->ext);
        if (!es) return tn_last_result();
        size_t len = strlen(es);
        r = tn__cuda_fn_prepare(node, es, (int)len, len + 1, t, "tn_gemv_small", NULL, NULL, state);
        tn__free(es);
        return r;
    }
    int n = node->op == TN_OP_GEMV ? tn__gemv_cuda_source(t, src, sizeof src) : -1;
    if (r == TN_OK && n > 0) r = tn__cuda_fn_prepare(node, src, n, sizeof src, t, "tn_gemv_small", NULL, NULL, state);
    return r;
}

/* A Gemv by the small kernel (st->fn): the product, and its epilogue
   (node->ext), in one launch up to TN__GEMV_SMALL_MAX elements and
   TN__GEMV_SMALL_K columns (and a product of one row its epilogue widens).
   Past them a Gemv with an epilogue takes cuBLAS's product into y, then the
   kernel with k < 0 applies the epilogue over y in place; one without is
   not handled here (false: tn__cuda_la_run's). */
static bool tn__cuda_gemv_kernel(const tn_var *node, const tn__cuda_fn_state *st, tn_array *const *in, tn_array *const *out,
                                 tn_result *r, const char *who) {
    const tn_ew_program *e = (const tn_ew_program *)node->ext;
    const tn_array *c = in[0], *M = in[1], *x = in[2];
    tn_array *y = out[0];
    int64_t rows = y->shape[0], k = M->shape[1], es = (int64_t)tn_dtype_size(y->dtype);
    bool widened = M->shape[0] != rows;          /* one row, its epilogue's inputs longer */
    if (!st) return false;
    *r = TN_OK;
    if (rows == 0) return true;
    int64_t s[4] = { M->strides[0], M->strides[1], x->strides[0], c->ndim ? c->strides[0] : 0 };
    bool whole = y->strides[0] == es;
    for (int i = 0; i < 4; i++) whole &= s[i] % es == 0;
    bool one = widened || (whole && M->shape[0] * k <= TN__GEMV_SMALL_MAX && k <= TN__GEMV_SMALL_K);
    if (!one && !e) return false;
    long long m_rs = widened ? 0 : s[0] / es, m_cs = s[1] / es, x_s = s[2] / es, c_s = c->ndim && c->shape[0] > 1 ? s[3] / es : 0;
    void *cp = c->data;
    int ki = (int)k;
    if (!one) {          /* cuBLAS's product into y, then the epilogue over it */
        if (!whole && y->strides[0] % es) { *r = tn__err(TN_ERR_UNSUPPORTED, "%s: an output stride that is not whole elements", who); return true; }
        if ((*r = tn__cuda_la_run(node, NULL, in, out, who)) != TN_OK) return true;
        cp = y->data; c_s = y->strides[0] / es; ki = -1;     /* the epilogue alone */
    } else if (!whole) { *r = tn__err(TN_ERR_UNSUPPORTED, "%s: an operand stride that is not whole elements", who); return true; }
    int ri = (int)rows;
    double a = tn__p_alpha(&node->p), bt = tn__p_beta(&node->p);
    float af = (float)a, bf = (float)bt;
    bool f32 = y->dtype == TN_F32;
    void *Mp = M->data, *xp = x->data, *yp = y->data;
    void *ep[TN__RED_MAX_SRC];
    long long esd[TN__RED_MAX_SRC];
    void *params[12 + 2 * TN__RED_MAX_SRC] = { &Mp, &m_rs, &m_cs, &xp, &x_s, &cp, &c_s, &yp, &ri, &ki, f32 ? (void *)&af : (void *)&a,
                                               f32 ? (void *)&bf : (void *)&bt };
    int np = 12;
    for (int j = 1; e && j < e->n_in; j++) {
        const tn_array *ej = in[2 + j];
        int64_t ees = (int64_t)tn_dtype_size(ej->dtype);
        if (ej->ndim && ej->shape[0] > 1 && ej->strides[0] % ees) {
            *r = tn__err(TN_ERR_UNSUPPORTED, "%s: an epilogue input's stride is not whole elements", who);
            return true;
        }
        ep[j - 1] = ej->data;
        esd[j - 1] = ej->ndim && ej->shape[0] > 1 ? ej->strides[0] / ees : 0;
        params[np++] = &ep[j - 1];
        params[np++] = &esd[j - 1];
    }
    tn__cuda_dev *D;
    if ((*r = tn__cuda_enter(y->device, &D, who)) == TN_OK && (*r = tn__cuda_launch(st->fn, (rows + 3) / 4, 128, params, D, who)) == TN_OK)
        *r = tn__cuda_sync_if_blocking(D, who);
    return true;
}

static tn_result tn__cuda_la_node_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    char who[128];
    tn_result r = tn__cuda_node_bind(node);
    tn__cuda_who(node, who, sizeof who);
    if (r == TN_OK && node->op == TN_OP_GEMV && tn__cuda_gemv_kernel(node, (const tn__cuda_fn_state *)state, in, out, &r, who)) return r;
    return r != TN_OK ? r : tn__cuda_la_run(node, (tn__cuda_lt_state *)state, in, out, who);
}

/* Alloc (tn_alloc, tn_fill) */
static tn_result tn__cuda_alloc_node_prepare(const tn_var *node, void **state) {
    tn_result r = tn__cuda_bind_prepare(node, state);
    return r != TN_OK ? r : tn__cuda_alloc_prepare(node, state);
}

static tn_result tn__cuda_alloc_node_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    char who[128];
    tn_result r = tn__cuda_node_bind(node);
    return r != TN_OK ? r : tn__cuda_alloc_run((tn__cuda_alloc_state *)state, in, out, tn__cuda_who(node, who, sizeof who));
}

/* >>cuda_size: SIZE (tn_size). Its bytes come from x's shape on the host
   (tensor_ops.h >>size) and are stored by memsets: no kernel to compile, no
   data read, and a memset node in a captured CUDA graph (a plan fixes the
   shapes; a new plan drops the graphs). An 8-byte dtype takes two 2D
   memsets of pitch 8: the first word of each element, then the second. */
static bool tn__cuda_size_supports(const tn_var *node) {
    size_t es = tn_dtype_size(node->type.dtype);
    return node->op == TN_OP_SIZE && (es == 1 || es == 2 || es == 4 || es == 8);
}

static tn_result tn__cuda_size_node_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    (void)state;
    char who[128];
    tn_result r = tn__cuda_node_bind(node);
    if (r != TN_OK) return r;
    tn__cuda_who(node, who, sizeof who);
    const tn_array *o = out[0];
    if (!tn_array_is_contiguous(o)) return tn__err(TN_ERR_INTERNAL, "%s: the output is not contiguous", who);
    unsigned char val[8];
    size_t es = tn__size_bytes(node, in, o->dtype, val), n = (size_t)tn_array_size(o);
    tn__cuda_dev *D = tn__cuda_dev_get(o->device);
    tn__CUstream s = tn__cuda_stream(D);
    tn__CUdeviceptr p = (tn__CUdeviceptr)(uintptr_t)o->data;
    uint32_t w[2];
    uint16_t h;
    memcpy(w, val, sizeof w);
    memcpy(&h, val, sizeof h);
    if (n == 0) return TN_OK;
    switch (es) {
    case 1: TN__CU_CHECK(tn__cuda.cu.cuMemsetD8Async(p, val[0], n, s), who); break;
    case 2: TN__CU_CHECK(tn__cuda.cu.cuMemsetD16Async(p, h, n, s), who); break;
    case 4: TN__CU_CHECK(tn__cuda.cu.cuMemsetD32Async(p, w[0], n, s), who); break;
    default:
        TN__CU_CHECK(tn__cuda.cu.cuMemsetD2D32Async(p, 8, w[0], 1, n, s), who);
        TN__CU_CHECK(tn__cuda.cu.cuMemsetD2D32Async(p + 4, 8, w[1], 1, n, s), who);
    }
    return tn__cuda_sync_if_blocking(D, who);
}

/* GpuFromHost: a pinned stage and an event per node */
static tn_result tn__cuda_h2d_prepare(const tn_var *node, void **state) {
    tn_result r = tn__cuda_bind_prepare(node, state);
    if (r != TN_OK) return r;
    tn__cuda_h2d_state *st = (tn__cuda_h2d_state *)tn__calloc(1, sizeof *st);
    if (!st) return tn__err(TN_ERR_OOM, "tn_cuda: out of memory preparing node %d", node->id);
    st->dev = node->device;
    st->src_dev = node->in[0]->device != TN_HOST ? -1 : -2;
    tn__CUresult cr = tn__cuda.cu.cuEventCreate(&st->ev, TN__CU_EVENT_DISABLE_TIMING);
    if (cr != TN__CUDA_SUCCESS) {
        char eb[160];
        tn__free(st);
        return tn__err(TN_ERR_DEVICE, "tn_cuda: cuEventCreate failed: %s", tn__cu_errstr(cr, eb, sizeof eb));
    }
    *state = st;
    return TN_OK;
}

static tn_result tn__cuda_h2d_node_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    char who[128];
    tn_result r = tn__cuda_node_bind(node);
    return r != TN_OK ? r : tn__cuda_h2d_run((tn__cuda_h2d_state *)state, in[0], out[0], tn__cuda_who(node, who, sizeof who));
}

static void tn__cuda_h2d_release(void *state) {
    tn__cuda_h2d_state *st = (tn__cuda_h2d_state *)state;
    if (!st) return;
    tn__cuda_dev *S = st->src_dev >= 0 ? __atomic_load_n(&tn__cuda.dev[st->src_dev], __ATOMIC_ACQUIRE) : NULL;
    if (S && st->ev_src && tn__cuda_bind(S) == TN_OK) tn__cuda.cu.cuEventDestroy_v2(st->ev_src);
    tn__cuda_dev *D = __atomic_load_n(&tn__cuda.dev[st->dev], __ATOMIC_ACQUIRE);
    if (D && tn__cuda_bind(D) == TN_OK) {
        if (st->ev_live) tn__cuda.cu.cuEventSynchronize(st->ev);
        if (st->ev) tn__cuda.cu.cuEventDestroy_v2(st->ev);
        if (st->pin) tn__cuda.cu.cuMemFreeHost(st->pin);
    }
    tn__free(st);
}

/* custom ops with CUDA source */
static tn_result tn__cuda_custom_node_prepare(const tn_var *node, void **state) {
    tn_result r = tn__cuda_bind_prepare(node, state);
    return r != TN_OK ? r : tn__cuda_custom_prepare(node, state);
}

static tn_result tn__cuda_custom_node_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    tn_result r = tn__cuda_node_bind(node);
    return r != TN_OK ? r : tn__cuda_custom_run(node, state, in, out);
}

/* scan: the loop on the device, when its step was compiled for device arrays */
static tn_result tn__cuda_scan_node_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    (void)state;
    tn_result r = tn__cuda_node_bind(node);
    return r != TN_OK ? r : tn__cuda_scan_run(node, in, out);
}

/* views: only strides, on whichever side their input lives */
static tn_result tn__cuda_view_run(const tn_var *node, void *state, tn_array *const *in, tn_array *const *out) {
    (void)state;
    return tn__op_def(node->op)->cpu(node, in, out);
}

static const tn_backend_op tn__cuda_row_ew = { tn__cuda_ew_supports, tn__cuda_ew_prepare, tn__cuda_ew_node_run, tn__free, NULL, NULL };
static const tn_backend_op tn__cuda_row_reduce = { tn__cuda_reduce_supports, tn__cuda_reduce_node_prepare, tn__cuda_reduce_node_run, tn__cuda_reduce_release, NULL, NULL };
static const tn_backend_op tn__cuda_row_la = { tn__cuda_la_supports, tn__cuda_la_prepare, tn__cuda_la_node_run, tn__free, NULL, NULL };
static const tn_backend_op tn__cuda_row_alloc = { tn__cuda_alloc_supports, tn__cuda_alloc_node_prepare, tn__cuda_alloc_node_run, tn__free, NULL, NULL };
static const tn_backend_op tn__cuda_row_size = { tn__cuda_size_supports, tn__cuda_bind_prepare, tn__cuda_size_node_run, NULL, NULL, NULL };
static const tn_backend_op tn__cuda_row_eye = { tn__cuda_eye_supports, tn__cuda_eye_prepare, tn__cuda_eye_run, tn__free, NULL, NULL };
static const tn_backend_op tn__cuda_row_h2d = { NULL, tn__cuda_h2d_prepare, tn__cuda_h2d_node_run, tn__cuda_h2d_release, tn__cuda_h2d_stage, NULL };
static const tn_backend_op tn__cuda_row_custom = { tn__cuda_custom_supports, tn__cuda_custom_node_prepare, tn__cuda_custom_node_run, tn__cuda_custom_release, NULL, NULL };
static const tn_backend_op tn__cuda_row_scan = { tn__scan_device_ok, tn__cuda_bind_prepare, tn__cuda_scan_node_run, NULL, NULL, NULL };
static const tn_backend_op tn__cuda_row_view = { NULL, tn__cuda_bind_prepare, tn__cuda_view_run, NULL, NULL, NULL };
static const tn_backend_op tn__cuda_row_cum = { tn__cuda_cum_supports, tn__cuda_cum_prepare, tn__cuda_cum_run, tn__free, NULL, NULL };
/* Index arrays are checked on the device and the verdict read back before the
   run returns (a bad index fails this call): such a step cannot be captured. */
static bool tn__cuda_index_capturable(const tn_var *node) { return node->op == TN_OP_INC_SUBTENSOR; }
static bool tn__cuda_never_capturable(const tn_var *node) { (void)node; return false; }
static const tn_backend_op tn__cuda_row_index = { tn__cuda_index_supports, tn__cuda_index_prepare, tn__cuda_index_run, tn__cuda_index_release, NULL,
                                                  tn__cuda_index_capturable };
static const tn_backend_op tn__cuda_row_sort = { tn__cuda_index_supports, tn__cuda_index_prepare, tn__cuda_sort_run, tn__cuda_index_release, NULL, NULL };
static const tn_backend_op tn__cuda_row_reshape = { tn__cuda_reshape_supports, tn__cuda_bind_prepare, tn__cuda_reshape_run, NULL, NULL, NULL };
static const tn_backend_op tn__cuda_row_join = { tn__cuda_join_supports, tn__cuda_bind_prepare, tn__cuda_join_run, NULL, NULL, NULL };
static const tn_backend_op tn__cuda_row_print = { NULL, tn__cuda_bind_prepare, tn__cuda_print_run, NULL, NULL, tn__cuda_never_capturable };   /* it waits to print */
static const tn_backend_op tn__cuda_row_conv = { tn__cuda_conv_supports, tn__cuda_conv_prepare, tn__cuda_conv_run, tn__free, NULL, NULL };
static const tn_backend_op tn__cuda_row_pool = { tn__cuda_pool_supports, tn__cuda_pool_prepare, tn__cuda_pool_run, tn__free, NULL, NULL };
static const tn_backend_op tn__cuda_row_pool_grad = { tn__cuda_pool_grad_supports, tn__cuda_pool_grad_prepare, tn__cuda_pool_grad_run, tn__free, NULL, NULL };
static const tn_backend_op tn__cuda_row_rnd = { tn__cuda_rnd_supports, tn__cuda_rnd_prepare, tn__cuda_rnd_run, tn__free, NULL, NULL };

#define TN__CUDA_EW_ROW(E, ...) { TN_OP_##E, &tn__cuda_row_ew },
static const struct { int op; const tn_backend_op *row; } tn__cuda_op_rows[] = {   /* any order */
    TN_EW_OPS(TN__CUDA_EW_ROW)
    { TN_OP_COMPOSITE, &tn__cuda_row_ew },
    { TN_OP_SUM, &tn__cuda_row_reduce }, { TN_OP_PROD, &tn__cuda_row_reduce }, { TN_OP_MEAN, &tn__cuda_row_reduce },
    { TN_OP_MAX, &tn__cuda_row_reduce }, { TN_OP_MIN, &tn__cuda_row_reduce }, { TN_OP_ARGMAX, &tn__cuda_row_reduce },
    { TN_OP_ARGMIN, &tn__cuda_row_reduce }, { TN_OP_ALL, &tn__cuda_row_reduce }, { TN_OP_ANY, &tn__cuda_row_reduce },
    { TN_OP_LOGSUMEXP, &tn__cuda_row_reduce }, { TN_OP_SOFTMAX, &tn__cuda_row_reduce }, { TN_OP_LOG_SOFTMAX, &tn__cuda_row_reduce },
    { TN_OP_DOT, &tn__cuda_row_la }, { TN_OP_GEMM, &tn__cuda_row_la }, { TN_OP_GEMV, &tn__cuda_row_la }, { TN_OP_OUTER, &tn__cuda_row_la },
    { TN_OP_DIMSHUFFLE, &tn__cuda_row_view }, { TN_OP_SLICE, &tn__cuda_row_view }, { TN_OP_BROADCAST_TO, &tn__cuda_row_view },
    { TN_OP_ALLOC, &tn__cuda_row_alloc }, { TN_OP_SIZE, &tn__cuda_row_size }, { TN_OP_EYE, &tn__cuda_row_eye },
    { TN_OP_GPU_FROM_HOST, &tn__cuda_row_h2d },
    { TN_OP_CUSTOM, &tn__cuda_row_custom },
    { TN_OP_SCAN, &tn__cuda_row_scan },
    { TN_OP_CUMSUM, &tn__cuda_row_cum }, { TN_OP_CUMPROD, &tn__cuda_row_cum },
    { TN_OP_ADV_SUBTENSOR, &tn__cuda_row_index }, { TN_OP_ADV_INC_SUBTENSOR, &tn__cuda_row_index },
    { TN_OP_INC_SUBTENSOR, &tn__cuda_row_index }, { TN_OP_ARGSORT, &tn__cuda_row_sort },
    { TN_OP_RANDOM, &tn__cuda_row_rnd },
    { TN_OP_IM2COL, &tn__cuda_row_conv }, { TN_OP_COL2IM, &tn__cuda_row_conv }, { TN_OP_POOL, &tn__cuda_row_pool }, { TN_OP_POOL_GRAD, &tn__cuda_row_pool_grad },
    { TN_OP_RESHAPE, &tn__cuda_row_reshape }, { TN_OP_FLATTEN, &tn__cuda_row_reshape }, { TN_OP_CONCATENATE, &tn__cuda_row_join },
    { TN_OP_PRINT, &tn__cuda_row_print },
};
#undef TN__CUDA_EW_ROW
static const tn_backend_op *tn__cuda_ops[TN_OP_COUNT];   /* tn__cuda_op_rows by op index */
static pthread_once_t tn__cuda_ops_once = PTHREAD_ONCE_INIT;
static void tn__cuda_ops_fill(void) {
    for (size_t i = 0; i < sizeof tn__cuda_op_rows / sizeof tn__cuda_op_rows[0]; i++)
        tn__cuda_ops[tn__cuda_op_rows[i].op] = tn__cuda_op_rows[i].row;
}

/* Waits for this thread's current stream on every opened device (tests; the
   executor never waits on it). */
TN_API tn_result tn__cuda_synchronize(void) {
    for (int d = 0; d < TN__CUDA_MAX_DEVICES; d++) {
        tn__cuda_dev *D = __atomic_load_n(&tn__cuda.dev[d], __ATOMIC_ACQUIRE);
        if (!D) continue;
        tn_result r = tn__cuda_bind(D);
        if (r != TN_OK) return r;
        TN__CU_CHECK(tn__cuda.cu.cuStreamSynchronize(tn__cuda_stream(D)), "synchronizing the stream");
    }
    return TN_OK;
}

/* >>cuda_events: the profiler's GPU times (tn_backend.prof_*) ------------------ */
/* Two events bracket each device step of a profiled function run step by
   step, or a replayed call's graph (marks 2n and 2n + 1, n steps), recorded
   on the stream without waiting. The marks of a call go to one of two sets,
   and the sets alternate: a call that records marks first collects the set
   it reuses, from two such calls before, which the GPU has almost always
   passed, so profiling keeps the host up to a call ahead of the stream. An event is created at its first use and
   reused for the function's life (a step that never runs on the device never
   makes one). The events belong to the device of the function profiled.
   Starts on the host's clock (for the trace) are times from an anchor, an
   event a collection records and waits for, read on the host's clock as it
   completes. Event times are float milliseconds, a microsecond apart at 16
   s, so the anchor is renewed every 8 s (between calls, so a set's marks
   are all before or all after it). */
typedef struct tn__cuda_prof {
    tn__cuda_dev *dev;
    tn__CUevent anchor;         /* 0 until the first collection with a clock */
    double anchor_host;         /* the host's clock when the anchor completed */
    int anchor_gen;             /* anchors recorded */
    int set_gen[2];             /* the anchor_gen a set's marks were recorded under */
    int n_marks;                /* per set: 2 per step */
    int cur;                    /* the set this call records into */
    tn__CUevent *ev[2];
    unsigned char *rec[2];      /* recorded since the set was last collected */
    int last[2];                /* the latest mark recorded in each set, -1 none */
} tn__cuda_prof;

static void tn__cuda_prof_free(void *ps) {
    tn__cuda_prof *P = (tn__cuda_prof *)ps;
    if (!P) return;
    bool live = P->dev && tn__cuda_bind(P->dev) == TN_OK;
    for (int s = 0; s < 2; s++) {
        for (int m = 0; live && P->ev[s] && m < P->n_marks; m++)
            if (P->ev[s][m]) tn__cuda.cu.cuEventDestroy_v2(P->ev[s][m]);   /* a pending one is freed once reached */
        tn__free(P->ev[s]);
        tn__free(P->rec[s]);
    }
    if (live && P->anchor) tn__cuda.cu.cuEventDestroy_v2(P->anchor);
    tn__free(P);
}

static void *tn__cuda_prof_new(int n_steps) {
    tn__cuda_dev *D;
    if (tn__cuda_enter_current(&D, "tn_profile") != TN_OK) { tn_clear_error(); return NULL; }
    tn__cuda_prof *P = (tn__cuda_prof *)tn__calloc(1, sizeof *P);
    if (!P) return NULL;
    P->dev = D;
    P->n_marks = 2 * (n_steps > 0 ? n_steps : 1);
    for (int s = 0; s < 2; s++) {
        P->ev[s] = (tn__CUevent *)tn__calloc((size_t)P->n_marks, sizeof *P->ev[s]);
        P->rec[s] = (unsigned char *)tn__calloc((size_t)P->n_marks, 1);
        P->last[s] = -1;
        if (!P->ev[s] || !P->rec[s]) { tn__cuda_prof_free(P); return NULL; }
    }
    return P;
}

static tn_result tn__cuda_prof_mark(void *ps, int m) {
    tn__cuda_prof *P = (tn__cuda_prof *)ps;
    if (m < 0 || m >= P->n_marks) return tn__err(TN_ERR_INTERNAL, "profiler mark %d out of range (%d marks)", m, P->n_marks);
    tn_result r = tn__cuda_bind(P->dev);
    if (r != TN_OK) return r;
    tn__CUevent *e = &P->ev[P->cur][m];
    if (!*e) TN__CU_CHECK(tn__cuda.cu.cuEventCreate(e, TN__CU_EVENT_DEFAULT), "creating a profiler event");
    TN__CU_CHECK(tn__cuda.cu.cuEventRecord(*e, tn__cuda_stream(P->dev)), "recording a profiler event");
    P->rec[P->cur][m] = 1;
    P->set_gen[P->cur] = P->anchor_gen;
    P->last[P->cur] = m;
    return TN_OK;
}

/* The anchor: an event recorded on the stream and waited for, put at the
   host's clock read just after the wait returns (the event completes when
   the stream reaches it; the wait returns a microsecond or so later). */
static tn_result tn__cuda_prof_anchor(tn__cuda_prof *P, const tn_prof_sink *sink) {
    if (!P->anchor) TN__CU_CHECK(tn__cuda.cu.cuEventCreate(&P->anchor, TN__CU_EVENT_DEFAULT), "creating a profiler event");
    P->anchor_gen++;
    TN__CU_CHECK(tn__cuda.cu.cuEventRecord(P->anchor, tn__cuda_stream(P->dev)), "recording a profiler event");
    TN__CU_CHECK(tn__cuda.cu.cuEventSynchronize(P->anchor), "waiting for a profiler event");
    P->anchor_host = sink->now();
    return TN_OK;
}

/* Waits for set s's latest mark, then gives each step's (mark 2k to 2k+1)
   start and elapsed seconds to the sink; sink NULL forgets the set without
   waiting. */
static tn_result tn__cuda_prof_collect_set(tn__cuda_prof *P, int s, const tn_prof_sink *sink) {
    int last = P->last[s];
    P->last[s] = -1;
    if (last < 0) return TN_OK;
    if (sink) TN__CU_CHECK(tn__cuda.cu.cuEventSynchronize(P->ev[s][last]), "waiting for a profiler event");
    for (int k = 0; 2 * k + 1 <= last; k++) {
        unsigned char *rc = P->rec[s] + 2 * k;
        if (sink && rc[0] && rc[1]) {
            float ms = 0, at = 0;
            tn__CUevent b = P->ev[s][2 * k];
            TN__CU_CHECK(tn__cuda.cu.cuEventElapsedTime(&ms, b, P->ev[s][2 * k + 1]), "reading a profiler event");
            bool after = P->set_gen[s] == P->anchor_gen;     /* recorded after the anchor */
            if (P->anchor)
                TN__CU_CHECK(tn__cuda.cu.cuEventElapsedTime(&at, after ? P->anchor : b, after ? b : P->anchor), "reading a profiler event");
            double start = !P->anchor ? -1.0 : P->anchor_host + (after ? 1e-3 : -1e-3) * (double)at;
            sink->step(sink->user, k, start, 1e-3 * (double)ms);
        }
        rc[0] = rc[1] = 0;
    }
    P->rec[s][last] = 0;
    return TN_OK;
}

static tn_result tn__cuda_prof_collect(void *ps, const tn_prof_sink *sink, bool all) {
    tn__cuda_prof *P = (tn__cuda_prof *)ps;
    tn_result r = tn__cuda_bind(P->dev);
    if (r != TN_OK) return r;
    if (sink && sink->now && (!P->anchor || sink->now() - P->anchor_host > 8.0) && (r = tn__cuda_prof_anchor(P, sink)) != TN_OK)
        return r;
    if (all && (r = tn__cuda_prof_collect_set(P, P->cur, sink)) != TN_OK) return r;
    P->cur ^= 1;   /* the next call records into the set collected now */
    return tn__cuda_prof_collect_set(P, P->cur, sink);
}

/* >>cuda_place: the placement pass (tn_backend.place) -------------------------- */
/* Runs between specialize and fuse on the function's private graph:
   1. every op the back end can run goes to the device; a view follows its
      input; a shared variable whose readers all run on the device moves there
      for good (its value becomes device memory: tn_shared_get_value copies
      back, tn_shared_set_value and updates keep it there);
   2. GpuFromHost is inserted where host data feeds a device node (a constant
      gets a device copy instead, made once), HostFromGpu where device data
      feeds a host node or is a function output; the user's own transfers
      that meet data already on their side cancel (HostFromGpu(GpuFromHost(x))
      is x), and an output the user wrapped in tn_gpu_from_host stays on the
      device. Update values stay where they were computed: the executor
      swaps or copies them into the shared variable's memory; an update
      target no host op of the function reads moves to the device when its
      value is computed there (tn__place_update_targets), so the swap needs
      no copy.
   Transfers are made once per producer (and device) and shared by its readers.
   Devices: a node of a context (>>api_contexts) goes to its context's device
   (a cpu context: the host), any other to the function's (tn_func_desc.context,
   else the device flag's); data crossing between two devices gets a GpuToGpu
   (GpuFromHost on a device input: >>cuda_peer). A user's transfer between two
   distinct contexts is kept even when both map to one device (a copy). */

typedef struct tn__place {
    tn_graph *fg;
    int n0;                  /* nodes before the pass: the per-node arrays' size */
    tn_var **alias;          /* a cancelled transfer: what its readers read instead */
    tn_var **to_dev, **to_host;
    int dev;                 /* the function's device (TN_HOST for a cpu context) */
} tn__place;

/* Where v's context puts it: its own context's device, else the function's. */
static int tn__place_ctx_dev(const tn__place *P, const tn_var *v) {
    return v->ctx > 0 ? tn_context_device(v->ctx - 1) : P->dev;
}

/* A context naming a device this machine lacks: an error naming both. */
static tn_result tn__place_check_ctx(int c, int dev) {
    if (dev == TN_HOST || dev < tn__cuda.device_count) return TN_OK;
    char wb[64];
    return tn__err(TN_ERR_DEVICE, "tn_function: context %s asks for cuda%d, but there %s only %d CUDA device%s", tn__ctx_where(c, wb), dev,
                   tn__cuda.device_count == 1 ? "is" : "are", tn__cuda.device_count, tn__cuda.device_count == 1 ? "" : "s");
}

static tn_var *tn__place_resolve(tn__place *P, tn_var *x) {
    while (x->id < P->n0 && P->alias[x->id]) x = P->alias[x->id];
    return x;
}

/* x's data on device `to` (TN_HOST: the host) for a reader of context ctx. */
static tn_var *tn__place_xfer(tn__place *P, tn_var *x, int to, int ctx) {
    bool to_device = to != TN_HOST;
    tn_var **cache = to_device ? P->to_dev : P->to_host;
    tn_var *c = x->id < P->n0 ? cache[x->id] : NULL;
    if (c && c->device == to) return c;
    tn_var *y;
    if (to_device && x->op == TN_OP_CONSTANT && x->value) {
        /* a device copy of the constant, made now: no transfer per call */
        tn_array *a = tn__array_alloc(x->value->dtype, x->value->ndim, x->value->shape, to);
        if (!a) return NULL;
        if (tn_array_assign(a, x->value) != TN_OK || !tn__graph_own(P->fg, a)) { tn_array_free(a); return NULL; }
        if (!(y = tn__var_new(P->fg, TN_OP_CONSTANT, "tn_function: placement"))) return NULL;
        y->type = x->type;
        y->flags = x->flags;
        y->value = a;
    } else {
        y = tn__node(P->fg, to_device ? TN_OP_GPU_FROM_HOST : TN_OP_HOST_FROM_GPU, 1, &x, NULL, NULL, "tn_function: placement");
        if (!y) return NULL;
    }
    y->device = to;
    y->ctx = to_device ? ctx : 0;
    if (x->id < P->n0 && !c) cache[x->id] = y;
    return y;
}

/* The shared value moves to device memory; the user's tn_array struct is
   updated in place, so pointers from tn_shared_get stay valid. */
static tn_result tn__place_move_shared(tn_var *user, int dev) {
    tn_array *S = user->value;
    if (!S || S->device == dev) return TN_OK;
    tn_array *d = tn__array_alloc(S->dtype, S->ndim, S->shape, dev);
    if (!d) return tn__err(tn_last_result(), "tn_function: moving shared variable '%s' to cuda%d: %s",
                           user->name ? user->name : "", dev, tn_last_error());
    tn_result r = tn_array_assign(d, S);
    if (r != TN_OK) { tn_array_free(d); return r; }
    tn_array tmp = *S;
    *S = *d;
    *d = tmp;
    tn_array_free(d);           /* the old host contents */
    return TN_OK;
}

/* Where a leaf's data lives: a shared variable where its value is; an input
   marked as device-resident (a scan's step compiled for device arrays) on
   this device; anything else on the host. */
static int tn__place_leaf_device(const tn_var *v, int dev) {
    const tn_array *sv = v->op == TN_OP_SHARED && v->ext ? ((const tn_var *)v->ext)->value : NULL;
    if (sv) return sv->device >= 0 ? sv->device : TN_HOST;
    return v->op == TN_OP_INPUT && v->device != TN_HOST ? dev : TN_HOST;
}

/* Inputs whose values v's type rule reads (tn_op_def.value_inputs) and no
   kernel of v does (TN_OPF_HOST_VALUES): they stay where they are, read on
   the host when a call is planned; no copy. */
static unsigned tn__place_value_inputs(const tn_var *v) {
    const tn_op_def *def = tn__op_def(v->op);
    return def && def->value_inputs && def->infer_values && (def->flags & TN_OPF_HOST_VALUES) ? def->value_inputs(v) : 0;
}

static bool tn__place_wants_device(const tn_var *v) {
    tn_op_kind k = tn__op_kind(v->op);
    if (k == TN_OPK_LEAF || v->op == TN_OP_PROJ || v->op == TN_OP_HOST_FROM_GPU) return false;
    return k == TN_OPK_VIEW || tn__backend_runs(tn__get_backend(), v);
}

/* An update whose new value is computed on the device moves its target there
   too, unless a host op of this function reads the target: the executor then
   swaps device buffers each call instead of copying the value back to the
   host. The targets come from tn_function (tn_place_args.update_targets);
   the target goes to the device of its value. */
static tn_result tn__place_update_targets(tn_var **order, int n, tn_var **roots, int n_out, int n_roots,
                                          tn_var *const *targets, const bool *host_reader) {
    if (!targets) return TN_OK;
    for (int u = 0; u < n_roots - n_out; u++) {
        tn_var *user = targets[u], *val = roots[n_out + u];
        if (val->op == TN_OP_PROJ && val->n_in == 1) val = val->in[0];   /* an output of a multi-output kernel */
        tn_op_kind k = tn__op_kind(val->op);
        if (!user || user->op != TN_OP_SHARED || !user->value || k == TN_OPK_LEAF || k == TN_OPK_VIEW || val->device == TN_HOST ||
            (user->flags & TN_VAR_BORROWED))     /* a borrowed array stays where the caller keeps it */
            continue;
        tn_var *clone = NULL;   /* the target's leaf in this graph, when the function reads it */
        for (int i = 0; i < n && !clone; i++)
            if (order[i]->op == TN_OP_SHARED && order[i]->ext == (void *)user) clone = order[i];
        if (clone && host_reader[clone->id]) continue;
        tn_result r = tn__place_move_shared(user, val->device);
        if (r != TN_OK) return r;
        if (clone) clone->device = val->device;
    }
    return TN_OK;
}

static tn_result tn__cuda_place(tn_graph *fg, tn_var **roots, int n_roots, const tn_place_args *pa) {
    if (tn__cuda.state <= 0) return TN_OK;
    const tn_config *cfg = tn_get_config();
    tn__place P;
    memset(&P, 0, sizeof P);
    P.fg = fg;
    P.n0 = tn__graph_nvars(fg);
    P.dev = pa && pa->context > 0 ? tn_context_device(pa->context - 1) : tn__cuda.ordinal;
    if (pa && pa->context > 0 && tn__place_check_ctx(pa->context, P.dev) != TN_OK) return tn_last_result();
    int n_out = pa && pa->n_outputs >= 0 && pa->n_outputs <= n_roots ? pa->n_outputs : n_roots;
    tn_var **order = NULL;
    int n = 0;
    tn_result r = tn__toposort(roots, n_roots, P.n0, &order, &n, NULL, "tn_function: placement");
    if (r != TN_OK) return r;
    P.alias = (tn_var **)tn__calloc((size_t)P.n0 + 1, sizeof *P.alias);
    P.to_dev = (tn_var **)tn__calloc((size_t)P.n0 + 1, sizeof *P.to_dev);
    P.to_host = (tn_var **)tn__calloc((size_t)P.n0 + 1, sizeof *P.to_host);
    bool *host_reader = (bool *)tn__calloc((size_t)P.n0 + 1, sizeof *host_reader);
    bool *explicit_dev = (bool *)tn__calloc((size_t)n_roots + 1, sizeof *explicit_dev);
    int *rdev = (int *)tn__malloc(((size_t)P.n0 + 1) * sizeof *rdev);   /* a leaf's device readers' device; -2 none, -3 several */
    if (!P.alias || !P.to_dev || !P.to_host || !host_reader || !explicit_dev || !rdev) { r = tn__err(TN_ERR_OOM, "tn_function: placement: out of memory"); goto done; }
    for (int i = 0; i < P.n0; i++) rdev[i] = -2;

    /* 1. devices: ops, then shared variables from their readers, then views */
    for (int i = 0; i < n; i++) {
        tn_var *v = order[i];
        tn_op_kind k = tn__op_kind(v->op);
        int cd = tn__place_ctx_dev(&P, v);
        if (v->ctx > 0 && (r = tn__place_check_ctx(v->ctx, cd)) != TN_OK) goto done;
        if (k == TN_OPK_LEAF) {   /* a shared variable lives where its value is (the user's leaf holds it) */
            v->device = tn__place_leaf_device(v, cd);
            continue;
        }
        if (v->op == TN_OP_PROJ) continue;
        bool want = tn__place_wants_device(v) && cd != TN_HOST;
        v->device = want && k != TN_OPK_VIEW ? cd : TN_HOST;
        unsigned vm = tn__place_value_inputs(v);
        for (int j = 0; j < v->n_in; j++) {
            int *rd = &rdev[v->in[j]->id];
            if (!want || (vm >> j & 1)) host_reader[v->in[j]->id] = true;
            else if (k != TN_OPK_VIEW) *rd = *rd == -2 || *rd == cd ? cd : -3;
        }
    }
    for (int i = 0; i < n_out; i++) {
        host_reader[roots[i]->id] = true;
        explicit_dev[i] = roots[i]->op == TN_OP_GPU_FROM_HOST;
    }
    for (int i = 0; i < n && r == TN_OK; i++) {
        tn_var *v = order[i];
        if (v->op != TN_OP_SHARED || v->device != TN_HOST || host_reader[v->id] || !v->ext) continue;
        tn_var *user = (tn_var *)v->ext;
        if (user->flags & TN_VAR_BORROWED) continue;     /* read through a transfer */
        int to = v->ctx > 0 ? tn__place_ctx_dev(&P, v) : rdev[v->id] >= 0 ? rdev[v->id] : P.dev;
        if (to != TN_HOST && (r = tn__place_move_shared(user, to)) == TN_OK) v->device = to;
    }
    if (r == TN_OK) r = tn__place_update_targets(order, n, roots, n_out, n_roots, pa ? pa->update_targets : NULL, host_reader);
    if (r != TN_OK) goto done;

    /* 2. transfers where data crosses; the user's transfers cancel where they meet */
    for (int i = 0; i < n; i++) {
        tn_var *v = order[i];
        tn_op_kind k = tn__op_kind(v->op);
        if (k == TN_OPK_LEAF) continue;
        if (v->op == TN_OP_PROJ) { v->device = v->in[0]->device; continue; }
        if (k == TN_OPK_TRANSFER) {
            tn_var *x = tn__place_resolve(&P, v->in[0]);
            int to = v->op == TN_OP_GPU_FROM_HOST ? tn__place_ctx_dev(&P, v) : TN_HOST;
            bool between = v->op == TN_OP_GPU_FROM_HOST && v->p.i[0] > 0 && x->ctx != v->ctx && to != TN_HOST;
            if (x->device == to && !between) {
                P.alias[v->id] = x;           /* already where it is asked to go */
                continue;
            }
            if (to == TN_HOST) v->op = TN_OP_HOST_FROM_GPU;   /* a move to a cpu context */
            v->in[0] = x;
            v->device = to;
            tn_var **cache = to != TN_HOST ? P.to_dev : P.to_host;
            if (x->id < P.n0 && !cache[x->id] && !between) cache[x->id] = v;   /* other readers share it */
            continue;
        }
        if (k == TN_OPK_VIEW) {   /* with its input; a host input read only by the GPU crosses first,
                                     so cuBLAS reads a transposed view in place (CUBLAS_OP_T) */
            tn_var *x = tn__place_resolve(&P, v->in[0]);
            int cd = tn__place_ctx_dev(&P, v);
            v->device = x->device != TN_HOST ? x->device : !host_reader[v->id] ? cd : TN_HOST;
        }
        unsigned vm = tn__place_value_inputs(v);
        for (int j = 0; j < v->n_in; j++) {
            tn_var *x = tn__place_resolve(&P, v->in[j]);
            if (x->device != v->device && !(vm >> j & 1) && !(x = tn__place_xfer(&P, x, v->device, v->ctx))) {
                r = tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "tn_function: placement: %s", tn_last_error());
                goto done;
            }
            v->in[j] = x;
        }
    }
    /* 3. outputs come back to the host unless the user asked for a device array */
    for (int i = 0; i < n_roots; i++) {
        tn_var *x = tn__place_resolve(&P, roots[i]);
        if (i < n_out && x->device != TN_HOST && !explicit_dev[i] && !(x = tn__place_xfer(&P, x, TN_HOST, 0))) {
            r = tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "tn_function: placement: %s", tn_last_error());
            goto done;
        }
        roots[i] = x;
    }
    /* assert_no_cpu_op: name every op left on the host (transfers, views and
       leaves aside) and why: no row in the table, or a row that declined */
    if (cfg->assert_no_cpu_op != TN_WR_OFF) {
        for (int i = 0; i < n; i++) {
            tn_var *v = order[i];
            tn_op_kind k = tn__op_kind(v->op);
            if (v->device != TN_HOST || k == TN_OPK_LEAF || k == TN_OPK_TRANSFER || k == TN_OPK_VIEW || v->op == TN_OP_PROJ ||
                P.alias[v->id])
                continue;
            char lb[160], why[256];
            tn__node_label(v, lb, sizeof lb);
            tn__backend_why_cpu(tn__get_backend(), v, why, sizeof why);
            if (cfg->assert_no_cpu_op == TN_WR_RAISE) {
                r = tn__err(TN_ERR_UNSUPPORTED, "tn_function: assert_no_cpu_op=raise: %s (node %d): %s; it would run on the CPU", lb, v->id, why);
                goto done;
            }
            tn__warn("assert_no_cpu_op: %s (node %d): %s; runs on the CPU", lb, v->id, why);
        }
    }
done:
    tn__free(order);
    tn__free(P.alias);
    tn__free(P.to_dev);
    tn__free(P.to_host);
    tn__free(host_reader);
    tn__free(explicit_dev);
    tn__free(rdev);
    return r;
}

static const tn_backend tn__cuda_backend = {
    "cuda", tn__cuda_ops, TN__CUDA_MAX_OPERANDS, tn__cuda_place,
    tn__cuda_prof_new, tn__cuda_prof_mark, tn__cuda_prof_collect, tn__cuda_prof_free,
    tn__cuda_replay_begin, tn__cuda_replay_end, tn__cuda_replay_launch, tn__cuda_replay_release,
    tn__cuda_func_new, tn__cuda_func_enter, tn__cuda_func_free,
    tn__cuda_shared_order, tn__cuda_shared_free, tn__cuda_compile_clock,
    tn__cuda_replay_point, tn__cuda_replay_follow
};

static const tn_device_ops tn__cuda_device_ops = {
    tn__cuda_alloc, tn__cuda_free, tn__cuda_copy, tn__cuda_host_alloc, tn__cuda_host_free, tn__cuda_d2h,
    tn__cuda_host_register, tn__cuda_host_unregister, tn__cuda_fence
};

static void tn__cuda_register_backend(void) {
    pthread_once(&tn__cuda_ops_once, tn__cuda_ops_fill);
    tn__set_device_ops(&tn__cuda_device_ops);
    tn__set_backend(&tn__cuda_backend);
}

/* >>cuda_register: TENSOR_FLAGS device=... takes effect at tn_init --------------- */
/* tn_init calls this hook (the >>core section) with the final configuration.
   device=cpu never opens libcuda and detaches the back end; auto and cuda
   open the device (cuda says why in one line when it cannot) and attach it.
   tn_init itself never fails for a missing GPU: everything runs on the CPU. */
static tn_result tn__cuda_device_init(const tn_config *cfg) {
    if (cfg->device == TN_DEVICE_CPU) {
        if (tn__get_backend() == &tn__cuda_backend) tn__set_backend(NULL);
        return TN_OK;
    }
    if (tn__cuda.state < 0 && !strncmp(tn__cuda.status, "device=cpu", 10)) tn__cuda_forget_failure();
    if (tn_cuda_init() == TN_OK) tn__cuda_register_backend();
    else tn_clear_error();
    return TN_OK;
}

/* tn_print_info's GPU lines: the configured device, the driver, NVRTC,
   cuBLAS (loaded here if it was not yet) and NCCL when loaded, and the kernel
   cache directory; without a GPU, why not. */
static void tn__cuda_info(tn__sb *out) {
    tn__cuda_dev *D = tn_cuda_init() == TN_OK ? tn__cuda_dev_get(tn__cuda.ordinal) : NULL;
    if (!D) {
        tn__sb_printf(out, "  GPU:          none: %s\n", tn__cuda.status);
        tn_clear_error();
    } else {
        int v[3] = { 0, 0, 0 };
        bool blas = tn__cublas_load() == TN_OK;
        for (unsigned k = 0; blas && k < 3 && tn__cuda.blas.cublasGetProperty; k++)
            if (tn__cuda.blas.cublasGetProperty(k, &v[k]) != 0) v[k] = -1;
        tn__sb_printf(out, "  GPU:          cuda%d of %d: %s (%s, %d SMs)\n", D->ordinal, tn__cuda.device_count, D->name,
                      D->arch, D->sm_count);
        tn__sb_printf(out, "  driver:       CUDA %d.%d\n", tn__cuda.driver_version / 1000, tn__cuda.driver_version % 1000 / 10);
        tn__sb_printf(out, "  NVRTC:        %d.%d (%s)\n", tn__nvrtc.major, tn__nvrtc.minor, tn__nvrtc.path);
        if (!blas) tn__sb_printf(out, "  cuBLAS:       none: %s\n", tn_last_error());
        else if (v[0] > 0) tn__sb_printf(out, "  cuBLAS:       %d.%d.%d (%s)\n", v[0], v[1], v[2], tn__cuda.cublas_path);
        else tn__sb_printf(out, "  cuBLAS:       %s\n", tn__cuda.cublas_path);
        if (tn_nccl_version() > 0) tn__sb_printf(out, "  NCCL:         %d\n", tn_nccl_version());
        tn_clear_error();
    }
    char *dir = tn__cuda_cache_dir();
    tn__sb_printf(out, "  kernel cache: %s\n", dir ? dir : "none (no cache_dir, XDG_CACHE_HOME or HOME)");
    tn__free(dir);
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((constructor))
#endif
static void tn__cuda_hook_ctor(void) {
    pthread_once(&tn__cuda_ops_once, tn__cuda_ops_fill);   /* the table is whole before anything reads it */
    tn__lib.device_init_hook = tn__cuda_device_init;
    tn__lib.info_hook = tn__cuda_info;
}

/* tn_shutdown: every opened device's caches go back to the driver (its
   context, home stream and properties stay: the next tn_init reuses them). */
static void tn__cuda_dev_shutdown(tn__cuda_dev *D) {
    if (tn__cuda_bind(D) != TN_OK) { tn_clear_error(); return; }
    tn__cuda.cu.cuCtxSynchronize();           /* every thread's streams are idle */
    tn__cuda_streams_shutdown(D);             /* cuBLAS workspaces go back to the cache */
    pthread_mutex_lock(&D->stage.mu);
    if (D->stage.pin) tn__cuda.cu.cuMemFreeHost(D->stage.pin);
    D->stage.pin = NULL;
    D->stage.cap = 0;
    pthread_mutex_unlock(&D->stage.mu);
    pthread_mutex_lock(&D->hmem.mu);
    tn__hmem_release_cache(&D->hmem);
    pthread_mutex_unlock(&D->hmem.mu);
    pthread_mutex_lock(&D->dmem.mu);
    tn__dmem_release_cache(&D->dmem);
    pthread_mutex_unlock(&D->dmem.mu);
}

static void tn__nccl_shutdown(void);   /* >>cuda_nccl */

static void tn__cuda_shutdown(void) {
    tn__nccl_shutdown();                 /* its communicators use the devices */
    for (int d = 0; d < TN__CUDA_MAX_DEVICES; d++) {
        tn__cuda_dev *D = __atomic_load_n(&tn__cuda.dev[d], __ATOMIC_ACQUIRE);
        if (D) tn__cuda_dev_shutdown(D);
    }
    tn__cuda_kcache_clear();     /* unloads modules (the streams are idle now) */
    for (int d = 0; d < TN__CUDA_MAX_DEVICES; d++) {
        tn__cuda_dev *D = __atomic_load_n(&tn__cuda.dev[d], __ATOMIC_ACQUIRE);
        if (!D) continue;
        pthread_mutex_lock(&D->aux_mu);
        tn__free(D->aux);        /* their functions were unloaded */
        D->aux = NULL;
        pthread_mutex_unlock(&D->aux_mu);
    }
    pthread_mutex_lock(&tn__cublas_mu);
    if (tn__cuda.h_cublaslt) { dlclose(tn__cuda.h_cublaslt); tn__cuda.h_cublaslt = NULL; }
    if (tn__cuda.h_cublas) { dlclose(tn__cuda.h_cublas); tn__cuda.h_cublas = NULL; }
    __atomic_store_n(&tn__cuda.cublas_state, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&tn__cublas_mu);
}
/* >>cuda_nccl: NCCL loaded at run time ------------------------------------------ */
/* libnccl.so.2 is found like the CUDA libraries (TN_LIBNCCL_PATH, the
   loader's path, $CUDA_PATH/lib64, /usr/local/cuda/lib64), then where NCCL
   often lives beside them: the toolkits' lib folders and Python's
   site-packages/nvidia/nccl/lib (pip's nvidia-nccl-cu12/cu13, which PyTorch
   pulls in). Communicators come from ncclCommInitAll (one process driving
   every device). NCCL sets the calling thread's current device: after each
   NCCL call this thread's bound context is forgotten (tn__cuda_bound), so the
   next driver call binds its own again. NVLink SHARP (NVLS) is off unless
   NCCL_NVLS_ENABLE is set: it reserves much memory and needs multicast. */
#include <glob.h>
int setenv(const char *name, const char *value, int overwrite);   /* POSIX; <stdlib.h> hides it under -std=c11 */

static struct {
    pthread_mutex_t mu;
    int state;                  /* 0 not tried, 1 loaded, -1 missing */
    void *h;
    tn__nccl_api api;
    int version;
    char path[512];
    char why[768];
} tn__nccl = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* The first file one of the glob patterns matches that dlopen takes. */
static void *tn__nccl_glob_open(const char *const *pat, int n, char *found, size_t cap) {
    for (int i = 0; i < n; i++) {
        if (!pat[i]) continue;
        glob_t gl;
        memset(&gl, 0, sizeof gl);
        if (glob(pat[i], 0, NULL, &gl) == 0)
            for (size_t k = 0; k < gl.gl_pathc; k++) {
                void *h = dlopen(gl.gl_pathv[k], RTLD_NOW | RTLD_LOCAL);
                if (h) { tn__strlcpy(found, gl.gl_pathv[k], cap); globfree(&gl); return h; }
            }
        globfree(&gl);
    }
    return NULL;
}

static void *tn__nccl_find(char *found, size_t cap) {
    const char *names[2] = { "libnccl.so.2", "libnccl.so" };
    const char *over = getenv("TN_LIBNCCL_PATH");
    if (over && *over) return tn__dlopen_first("TN_LIBNCCL_PATH", names, 2, found, cap);
    void *h = tn__dlopen_first(NULL, names, 2, found, cap);
    if (h) return h;
    char buf[8][400];
    const char *pat[8] = { 0 };
    const char *cuda = getenv("CUDA_PATH"), *venv = getenv("VIRTUAL_ENV"), *conda = getenv("CONDA_PREFIX"), *home = getenv("HOME");
    const char *site = "lib/python3*/*-packages/nvidia/nccl/lib/libnccl.so.2";
    int n = 0;
    if (cuda && *cuda) { snprintf(buf[n], sizeof buf[n], "%.300s/lib/libnccl.so.2", cuda); pat[n] = buf[n]; n++; }
    snprintf(buf[n], sizeof buf[n], "/usr/local/cuda*/lib*/libnccl.so.2"); pat[n] = buf[n]; n++;
    if (venv && *venv) { snprintf(buf[n], sizeof buf[n], "%.300s/%s", venv, site); pat[n] = buf[n]; n++; }
    if (conda && *conda) { snprintf(buf[n], sizeof buf[n], "%.300s/%s", conda, site); pat[n] = buf[n]; n++; }
    if (home && *home) { snprintf(buf[n], sizeof buf[n], "%.300s/.local/%s", home, site); pat[n] = buf[n]; n++; }
    snprintf(buf[n], sizeof buf[n], "/usr/local/%s", site); pat[n] = buf[n]; n++;
    snprintf(buf[n], sizeof buf[n], "/usr/%s", site); pat[n] = buf[n]; n++;
    snprintf(buf[n], sizeof buf[n], "/opt/conda/%s", site); pat[n] = buf[n]; n++;
    return tn__nccl_glob_open(pat, n, found, cap);
}

TN_API tn_result tn_nccl_load(void) {
    pthread_mutex_lock(&tn__nccl.mu);
    if (tn__nccl.state <= 0) {          /* a missing NCCL is looked for again (an install, TN_LIBNCCL_PATH) */
        tn__nccl.why[0] = 0;
        tn__nccl.h = tn__nccl_find(tn__nccl.path, sizeof tn__nccl.path);
        const char *missing = NULL, *over = getenv("TN_LIBNCCL_PATH");
        if (!tn__nccl.h && over && *over) {
            snprintf(tn__nccl.why, sizeof tn__nccl.why, "NCCL: TN_LIBNCCL_PATH=%.300s could not be loaded: %.300s", over, dlerror());
        } else if (!tn__nccl.h) {
            snprintf(tn__nccl.why, sizeof tn__nccl.why,
                     "NCCL (libnccl.so.2) was not found: searched the loader's path (LD_LIBRARY_PATH, ldconfig), "
                     "$CUDA_PATH/lib64 and lib, /usr/local/cuda*/lib64 and lib, and Python's site-packages/nvidia/nccl/lib "
                     "($VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local, /usr, /opt/conda); install NCCL (or pip's nvidia-nccl-cu12) "
                     "or set TN_LIBNCCL_PATH to the file");
        } else if ((missing = tn__nccl_syms(tn__nccl.h, &tn__nccl.api)) != NULL) {
            snprintf(tn__nccl.why, sizeof tn__nccl.why, "NCCL: %.400s lacks %.60s (NCCL 2.x needed)", tn__nccl.path, missing);
        } else if (tn__nccl.api.ncclGetVersion(&tn__nccl.version) != TN__NCCL_SUCCESS) {
            snprintf(tn__nccl.why, sizeof tn__nccl.why, "NCCL: ncclGetVersion failed in %.400s", tn__nccl.path);
        }
        if (tn__nccl.why[0] && tn__nccl.h) { dlclose(tn__nccl.h); tn__nccl.h = NULL; }
        if (tn__nccl.why[0]) { memset(&tn__nccl.api, 0, sizeof tn__nccl.api); tn__nccl.version = 0; }
        tn__nccl.state = tn__nccl.why[0] ? -1 : 1;
    }
    int st = tn__nccl.state;
    pthread_mutex_unlock(&tn__nccl.mu);
    return st > 0 ? TN_OK : tn__err(TN_ERR_DEVICE, "%s", tn__nccl.why);
}

TN_API int tn_nccl_version(void) { return tn__nccl.state > 0 ? tn__nccl.version : 0; }

/* A failed NCCL call: its name, the library's words and, where it has one, its last error. */
#define TN__NCCL_CHECK(call, who) do { \
        tn__ncclResult_t r_ = (call); \
        tn__cuda_bound = NULL; \
        if (r_ != TN__NCCL_SUCCESS) { \
            const char *le_ = tn__nccl.api.ncclGetLastError ? tn__nccl.api.ncclGetLastError(NULL) : NULL; \
            return tn__err(TN_ERR_DEVICE, "%s: %s failed (%s:%d): %s%s%s", (who), #call, __FILE__, __LINE__, \
                           tn__nccl.api.ncclGetErrorString(r_), le_ && *le_ ? ": " : "", le_ ? le_ : ""); } } while (0)

typedef struct tn__nccl_comm { int n; int dev[TN__CUDA_MAX_DEVICES]; tn__ncclComm_t comm[TN__CUDA_MAX_DEVICES]; } tn__nccl_comm;

static void tn__nccl_comm_free(tn__nccl_comm *c) {
    if (!c) return;
    for (int k = 0; k < c->n; k++) if (c->comm[k]) tn__nccl.api.ncclCommDestroy(c->comm[k]);
    tn__cuda_bound = NULL;
    tn__free(c);
}

/* One communicator per device of devs[n] (distinct CUDA ordinals), rank k on devs[k]. */
static tn_result tn__nccl_comm_new(int n, const int *devs, tn__nccl_comm **out, const char *who) {
    *out = NULL;
    if (n < 1 || n > TN__CUDA_MAX_DEVICES) return tn__err(TN_ERR_INVALID, "%s: %d NCCL ranks", who, n);
    for (int k = 0; k < n; k++) {
        tn__cuda_dev *D;
        if (tn__cuda_enter(devs[k], &D, who) != TN_OK) return tn_last_result();   /* opened: a primary context NCCL shares */
        for (int j = 0; j < k; j++)
            if (devs[j] == devs[k])
                return tn__err(TN_ERR_INVALID, "%s: NCCL takes one rank per GPU, but ranks %d and %d are both on cuda%d", who, j, k, devs[k]);
    }
    if (tn_nccl_load() != TN_OK) return tn__err(TN_ERR_DEVICE, "%s: %s", who, tn_last_error());
    setenv("NCCL_NVLS_ENABLE", "0", 0);          /* the user's setting wins */
    tn__nccl_comm *c = (tn__nccl_comm *)tn__calloc(1, sizeof *c);
    if (!c) return tn__err(TN_ERR_OOM, "%s: out of memory", who);
    c->n = n;
    memcpy(c->dev, devs, (size_t)n * sizeof *devs);
    tn__ncclResult_t r = tn__nccl.api.ncclCommInitAll(c->comm, n, devs);
    tn__cuda_bound = NULL;
    if (r != TN__NCCL_SUCCESS) {
        const char *le = tn__nccl.api.ncclGetLastError ? tn__nccl.api.ncclGetLastError(NULL) : NULL;
        memset(c->comm, 0, sizeof c->comm);
        tn__free(c);
        return tn__err(TN_ERR_DEVICE, "%s: ncclCommInitAll over %d GPUs failed (NCCL %d, %s): %s%s%s", who, n, tn__nccl.version,
                       tn__nccl.path, tn__nccl.api.ncclGetErrorString(r), le && *le ? ": " : "", le ? le : "");
    }
    *out = c;
    return TN_OK;
}

static bool tn__nccl_dtype(tn_dtype t, tn__ncclDataType_t *out) {
    switch (t) {
    case TN_I32: *out = TN__NCCL_INT32; return true;
    case TN_I64: *out = TN__NCCL_INT64; return true;
    case TN_F16: *out = TN__NCCL_FLOAT16; return true;
    case TN_F32: *out = TN__NCCL_FLOAT32; return true;
    case TN_F64: *out = TN__NCCL_FLOAT64; return true;
    default: return false;
    }
}

/* recv[k*nb + b] = sum over ranks of send[k*nb + b], for nb buffers per rank,
   each on rank k's device and this thread's current stream there; one group. */
/* Ranks k0 .. k1 - 1 of c, in one group; send and recv hold nb buffers a
   rank from rank k0's on. The ranks of one call run on the calling thread:
   all of c's (one thread driving every GPU), or one (a thread per GPU, each
   calling for its own rank; NCCL's own model for one process). */
static tn_result tn__nccl_allreduce_ranks(tn__nccl_comm *c, int k0, int k1, int nb, tn_array *const *send, tn_array *const *recv,
                                          const char *who) {
    send -= (size_t)k0 * (size_t)nb;
    recv -= (size_t)k0 * (size_t)nb;
    for (int k = k0; k < k1; k++)
        for (int b = 0; b < nb; b++) {
            const tn_array *s = send[k * nb + b], *d = recv[k * nb + b], *s0 = send[k0 * nb + b];
            tn__ncclDataType_t dt;
            if (!tn__nccl_dtype(s->dtype, &dt)) return tn__err(TN_ERR_DTYPE, "%s: NCCL cannot sum %s (buffer %d)", who, tn_dtype_name(s->dtype), b);
            if (s->device != c->dev[k] || d->device != c->dev[k] || !tn_array_is_contiguous(s) || !tn_array_is_contiguous(d) ||
                s->dtype != d->dtype || s->dtype != s0->dtype || tn_array_size(s) != tn_array_size(d) || tn_array_size(s) != tn_array_size(s0))
                return tn__err(TN_ERR_INVALID, "%s: buffer %d of rank %d: want contiguous %s arrays of %lld elements on cuda%d, got %s of %lld on device %d",
                               who, b, k, tn_dtype_name(s0->dtype), (long long)tn_array_size(s0), c->dev[k], tn_dtype_name(s->dtype),
                               (long long)tn_array_size(s), s->device);
        }
    tn__cuda_dev *D[TN__CUDA_MAX_DEVICES];
    for (int k = k0; k < k1; k++) if (tn__cuda_enter(c->dev[k], &D[k], who) != TN_OK) return tn_last_result();
    TN__NCCL_CHECK(tn__nccl.api.ncclGroupStart(), who);
    tn__ncclResult_t first = TN__NCCL_SUCCESS;
    for (int k = k0; k < k1 && first == TN__NCCL_SUCCESS; k++)
        for (int b = 0; b < nb && first == TN__NCCL_SUCCESS; b++) {
            const tn_array *s = send[k * nb + b];
            tn__ncclDataType_t dt = TN__NCCL_FLOAT32;
            tn__nccl_dtype(s->dtype, &dt);
            if (tn_array_size(s) > 0)
                first = tn__nccl.api.ncclAllReduce(s->data, recv[k * nb + b]->data, (size_t)tn_array_size(s), dt, TN__NCCL_SUM,
                                                   c->comm[k], tn__cuda_stream(D[k]));
        }
    tn__ncclResult_t end = tn__nccl.api.ncclGroupEnd();   /* always closes the group */
    tn__cuda_bound = NULL;
    if (first != TN__NCCL_SUCCESS || end != TN__NCCL_SUCCESS) {
        const char *le = tn__nccl.api.ncclGetLastError ? tn__nccl.api.ncclGetLastError(NULL) : NULL;
        return tn__err(TN_ERR_DEVICE, "%s: %s failed over %d GPUs (%s:%d): %s%s%s", who, first ? "ncclAllReduce" : "ncclGroupEnd", c->n,
                       __FILE__, __LINE__, tn__nccl.api.ncclGetErrorString(first ? first : end), le && *le ? ": " : "", le ? le : "");
    }
    return TN_OK;
}

static tn_result tn__nccl_allreduce(tn__nccl_comm *c, int nb, tn_array *const *send, tn_array *const *recv, const char *who) {
    return tn__nccl_allreduce_ranks(c, 0, c->n, nb, send, recv, who);
}

/* tn_nccl_allreduce's communicator, kept for the next call on the same devices. */
static tn__nccl_comm *tn__nccl_cached;
static pthread_mutex_t tn__nccl_cached_mu = PTHREAD_MUTEX_INITIALIZER;

TN_API tn_result tn_nccl_allreduce(int n, tn_array *const *arrays) {
    const char *W = "tn_nccl_allreduce";
    if (!arrays) return tn__err(TN_ERR_NULL, "%s: arrays is NULL", W);
    if (n < 1 || n > TN__CUDA_MAX_DEVICES) return tn__err(TN_ERR_INVALID, "%s: n is %d", W, n);
    int devs[TN__CUDA_MAX_DEVICES];
    for (int k = 0; k < n; k++) {
        if (!arrays[k]) return tn__err(TN_ERR_NULL, "%s: arrays[%d] is NULL", W, k);
        if (arrays[k]->device == TN_HOST) return tn__err(TN_ERR_DEVICE, "%s: arrays[%d] lives on the host; NCCL sums device arrays", W, k);
        devs[k] = arrays[k]->device;
    }
    pthread_mutex_lock(&tn__nccl_cached_mu);
    tn_result r = TN_OK;
    tn__nccl_comm *c = tn__nccl_cached;
    if (!c || c->n != n || memcmp(c->dev, devs, (size_t)n * sizeof *devs) != 0) {
        tn__nccl_comm_free(c);
        tn__nccl_cached = NULL;
        r = tn__nccl_comm_new(n, devs, &tn__nccl_cached, W);
        c = tn__nccl_cached;
    }
    if (r == TN_OK) r = tn__nccl_allreduce(c, 1, arrays, arrays, W);
    pthread_mutex_unlock(&tn__nccl_cached_mu);
    return r;
}

static void tn__nccl_shutdown(void) {
    pthread_mutex_lock(&tn__nccl_cached_mu);
    tn__nccl_comm_free(tn__nccl_cached);
    tn__nccl_cached = NULL;
    pthread_mutex_unlock(&tn__nccl_cached_mu);
}

/* >>cuda_replicate: one training step on several devices (tn_function_replicate) */
/* Each replica is two compiled functions of the user's graph, on its own
   context: f1 computes the outputs and the gradients scaled by the replica's
   weight (its share of the rows, an input of f1; 1 when the cost is a sum),
   f2 the updates from the summed gradients (placeholder inputs standing for
   them, tn__graph_replace). Between the two the gradients are summed: by NCCL
   into per-replica device buffers (f1's gradients stay on the device, f2
   reads the sums where they are), or in host memory in float64, in replica
   order (the CPU, replicas sharing a GPU, or asked for). f1 returns device
   arrays under NCCL, so no replica waits for another before the all-reduce.
   Replica k > 0 reads copies of the shared variables (tn_shared of the
   value at replication, in the user's graph, freed with it). f2 queues its
   work on f1's stream (tn__func_stream_from): no switch of streams and no
   shared variable's event between the two.
   Under NCCL each replica past the first runs its part of a step on a
   thread of its own (replica 0 on the caller's): its rows' copy and f1, its
   rank of the all-reduce, f2, the wait for its copies and its outputs'
   copies to the host. One thread launching every replica in turn started
   replica k about k launch times late (50 us each on an H200), and the
   all-reduce waits for the last. */

typedef struct tn__replica {
    int ctx, dev;            /* its context and the device it runs on (TN_HOST: the CPU) */
    tn_func *f1, *f2;        /* outputs and scaled gradients; updates (either NULL: none) */
    tn_var **shared;         /* its copy of each of R->shared (replica 0: the user's own) */
    tn_array *view;          /* this call's rows of each input (struct copies: nothing allocated) */
    tn_array **in1, **in2;   /* f1's inputs (views, weights), f2's (views, summed gradients) */
    tn_array **out1;         /* f1's borrowed outputs: the user's, then the gradients */
    tn_array **red;          /* NCCL: its summed gradients (device arrays) */
    tn_array *scale[TN_DTYPE_COUNT];   /* its weight, one 0-d array per gradient dtype */
    double share;            /* its rows over the batch's */
    tn_array **host;         /* threaded: its outputs on the host, copied by its thread (NULL: not needed) */
    tn_result res;           /* threaded: its part's result, and the message when it failed */
    bool skipped;            /* threaded: it stopped after f1, as another replica failed */
    char err[1024];
} tn__replica;

enum { TN__DP_NONE = 0, TN__DP_HOST, TN__DP_NCCL };

struct tn_replicated {
    int n, n_in, n_out, n_grads, n_shared, n_upd, n_scale;
    int mode;                /* TN__DP_*: how the gradients are summed */
    bool dev_grads;          /* f1's gradients stay on the device (placeholders on it too) */
    bool sum;
    tn__replica *r;
    tn_var **shared;         /* the user's shared variables the step reads or updates */
    tn_dtype scale_dt[TN_DTYPE_COUNT];
    tn_combine *combine;
    bool *split;
    tn__nccl_comm *comm;
    tn_array **hred;         /* host mode: the summed gradients, read by every replica */
    double *acc, *tmp;       /* host mode: float64 scratch */
    size_t acc_n;
    /* NCCL mode: replica k > 0 runs its part of a call on tid[k - 1] */
    pthread_t *tid;
    int n_tid;
    pthread_mutex_t mu;
    pthread_cond_t go, done, met;
    TN__ATOMIC(uint64_t) job;   /* calls handed out (changed under mu); a thread runs each once */
    TN__ATOMIC(int) pending;    /* threads still running this call's part */
    TN__ATOMIC(int) quit;
    TN__ATOMIC(int) arrived;    /* parts at the barrier after f1 */
    TN__ATOMIC(uint64_t) met_gen;   /* barriers passed (changed under mu) */
    TN__ATOMIC(int) failed;     /* a replica's f1 failed in this call: no replica goes on */
    tn__atomic_flag busy;       /* set while a call runs: a second caller gets TN_ERR_BUSY */
};

TN_API int tn_replicated_count(const tn_replicated *R) { return R ? R->n : 0; }
TN_API const char *tn_replicated_allreduce(const tn_replicated *R) {
    return !R ? NULL : R->mode == TN__DP_NCCL ? "nccl" : R->mode == TN__DP_HOST ? "host" : "none";
}
TN_API tn_func *tn_replicated_function(const tn_replicated *R, int k, int half) {
    if (!R || k < 0 || k >= R->n || half < 0 || half > 1) return NULL;
    return half ? R->r[k].f2 : R->r[k].f1;
}
TN_API tn_var *tn_replicated_shared(const tn_replicated *R, tn_var *shared, int k) {
    if (!R || k < 0 || k >= R->n) return NULL;
    for (int i = 0; i < R->n_shared; i++) if (R->shared[i] == shared) return R->r[k].shared[i];
    return NULL;
}

static void tn__dp_threads_start(tn_replicated *R);
static void tn__dp_threads_stop(tn_replicated *R);

TN_API void tn_replicated_free(tn_replicated *R) {
    if (!R) return;
    tn__dp_threads_stop(R);
    for (int k = 0; R->r && k < R->n; k++) {
        tn__replica *P = &R->r[k];
        tn_function_free(P->f2);     /* on f1's stream: first */
        tn_function_free(P->f1);
        for (int o = 0; P->host && o < R->n_out; o++) tn_array_free(P->host[o]);
        tn__free(P->host);
        for (int i = 0; P->red && i < R->n_grads; i++) tn_array_free(P->red[i]);
        for (int t = 0; t < TN_DTYPE_COUNT; t++) tn_array_free(P->scale[t]);
        tn__free(P->red); tn__free(P->shared); tn__free(P->view); tn__free(P->in1); tn__free(P->in2); tn__free(P->out1);
    }
    for (int i = 0; R->hred && i < R->n_grads; i++) tn_array_free(R->hred[i]);
    tn__nccl_comm_free(R->comm);
    tn__free(R->hred); tn__free(R->acc); tn__free(R->tmp);
    tn__free(R->r); tn__free(R->shared); tn__free(R->combine); tn__free(R->split);
    tn__free(R);
}

/* The shared variables reached from roots (and the update targets), once each. */
static tn_result tn__dp_shared(tn_replicated *R, tn_var *const *roots, int n, const char *W) {
    tn_graph *g = roots[0]->graph;
    tn_var **order = NULL;
    int n_order = 0;
    tn_result r = tn__toposort(roots, n, tn__graph_nvars(g), &order, &n_order, NULL, W);
    if (r != TN_OK) return r;
    R->shared = (tn_var **)tn__calloc((size_t)n_order + 1, sizeof *R->shared);
    for (int k = 0; R->shared && k < n_order && r == TN_OK; k++) {
        if (order[k]->op == TN_OP_SHARED) R->shared[R->n_shared++] = order[k];
        if (order[k]->ctx > 0)
            r = tn__err(TN_ERR_INVALID, "%s: '%s' is on context '%s'; a replicated step must not name contexts (each replica has its own)",
                        W, tn__var_label_name(order[k]), tn_context_name(order[k]->ctx - 1));
    }
    tn__free(order);
    return !R->shared ? tn__err(TN_ERR_OOM, "%s: out of memory", W) : r;
}

/* Replica k's two functions. roots1: the outputs then the scaled gradients;
   scale_in: the weight inputs; ph: placeholder inputs for the summed gradients. */
static tn_result tn__dp_compile(tn_replicated *R, int k, tn_graph *g, const tn_func_desc *d, const tn_replicate_desc *rd,
                                tn_var **roots1, tn_var **scale_in, const char *W) {
    tn__replica *P = &R->r[k];
    int n1 = R->n_out + R->n_grads, nin1 = R->n_in + R->n_scale, nin2 = R->n_in + R->n_grads;
    tn_var **buf = (tn_var **)tn__calloc((size_t)(2 * n1 + 3 * (R->n_grads + R->n_shared) + nin1 + nin2 + 2 * R->n_upd) + 1, sizeof *buf);
    if (!buf) return tn__err(TN_ERR_OOM, "%s: out of memory", W);
    tn_var **r1 = buf, **from = r1 + n1, **to = from + R->n_grads + R->n_shared, **ph = to + R->n_grads + R->n_shared;
    tn_var **ins1 = ph + R->n_grads + R->n_shared, **ins2 = ins1 + nin1, **vals = ins2 + nin2, **vals_k = vals + R->n_upd;
    tn_update *ups = NULL;
    const char *cname = tn_context_name(P->ctx);
    char nm[160];
    tn_result r = TN_OK;
    /* the shared variables: the user's, or copies */
    for (int i = 0; i < R->n_shared && r == TN_OK; i++) {
        tn_var *s = R->shared[i];
        if (k == 0) { P->shared[i] = s; continue; }
        tn_array *v = tn_shared_get_value(s);
        snprintf(nm, sizeof nm, "%s@%s", s->name ? s->name : "shared", cname);
        tn_shared_opts so = { false, s->type.bcast, (s->flags & TN_VAR_FIXED_SHAPE) != 0 };   /* a copy, same type */
        P->shared[i] = !v ? NULL : tn_shared_ex(g, nm, v, &so);
        tn_array_free(v);
        if (!P->shared[i]) r = tn__err(tn_last_result() ? tn_last_result() : TN_ERR_OOM, "%s: replicating shared variable '%s': %s", W,
                                       tn__var_label_name(s), tn_last_error());
    }
    /* f1 */
    if (r == TN_OK && n1 > 0) {
        if (k > 0) r = tn__graph_replace(g, roots1, n1, R->shared, P->shared, R->n_shared, r1, W);
        else memcpy(r1, roots1, (size_t)n1 * sizeof *r1);
        for (int i = 0; i < R->n_in; i++) ins1[i] = d->inputs[i];
        for (int i = 0; i < R->n_scale; i++) ins1[R->n_in + i] = scale_in[i];
        snprintf(nm, sizeof nm, "%s [replica %d on %s: outputs and gradients]", d->name ? d->name : "tn_function_replicate", k, cname);
        tn_func_desc fd = { .n_inputs = nin1, .inputs = ins1, .n_outputs = n1, .outputs = r1, .borrow = true, .mode = d->mode,
                            .name = nm, .max_fused_inputs = d->max_fused_inputs, .context = cname, .on_unused_input = TN_UNUSED_IGNORE };
        if (r == TN_OK && !(P->f1 = tn_function(g, &fd)))
            r = tn__err(tn_last_result(), "%s: replica %d (%s): %s", W, k, cname, tn_last_error());
    }
    /* f2: the updates, reading placeholders for the summed gradients */
    if (r == TN_OK && R->n_upd > 0) {
        for (int i = 0; i < R->n_grads && r == TN_OK; i++) {
            const tn_type *t = &rd->grads[i]->type;
            snprintf(nm, sizeof nm, "sum of gradient %d", i);
            if (!(ph[i] = tn_input(g, nm, t->dtype, t->ndim, t->shape, t->bcast))) { r = tn_last_result(); break; }
            ph[i]->flags |= TN_VAR_NO_TEST_VALUE;    /* compute_test_value: nothing to compute here */
            if (R->dev_grads) ph[i]->device = P->dev;     /* device-resident: f2 reads the sums in place */
            from[i] = rd->grads[i];
            to[i] = ph[i];
        }
        for (int i = 0; i < R->n_shared && k > 0; i++) { from[R->n_grads + i] = R->shared[i]; to[R->n_grads + i] = P->shared[i]; }
        for (int u = 0; u < R->n_upd; u++) vals[u] = d->updates[u].value;
        if (r == TN_OK) r = tn__graph_replace(g, vals, R->n_upd, from, to, R->n_grads + (k > 0 ? R->n_shared : 0), vals_k, W);
        if (r == TN_OK && !(ups = (tn_update *)tn__calloc((size_t)R->n_upd, sizeof *ups))) r = tn__err(TN_ERR_OOM, "%s: out of memory", W);
        for (int u = 0; r == TN_OK && u < R->n_upd; u++) {
            ups[u].value = vals_k[u];
            ups[u].shared = d->updates[u].shared;
            for (int i = 0; i < R->n_shared; i++) if (R->shared[i] == d->updates[u].shared) ups[u].shared = P->shared[i];
        }
        for (int i = 0; i < R->n_in; i++) ins2[i] = d->inputs[i];
        for (int i = 0; i < R->n_grads; i++) ins2[R->n_in + i] = ph[i];
        snprintf(nm, sizeof nm, "%s [replica %d on %s: updates]", d->name ? d->name : "tn_function_replicate", k, cname);
        tn_func_desc fd = { .n_inputs = nin2, .inputs = ins2, .n_updates = R->n_upd, .updates = ups, .mode = d->mode,
                            .name = nm, .max_fused_inputs = d->max_fused_inputs, .context = cname, .on_unused_input = TN_UNUSED_IGNORE };
        if (r == TN_OK && !(P->f2 = tn_function(g, &fd)))
            r = tn__err(tn_last_result(), "%s: replica %d (%s): %s", W, k, cname, tn_last_error());
    }
    if (r == TN_OK && P->f1 && P->f2) tn__func_stream_from(P->f2, P->f1);
    for (int t = 0; r == TN_OK && t < R->n_scale; t++)
        if (!(P->scale[R->scale_dt[t]] = tn_array_scalar(R->scale_dt[t], 1.0))) r = tn_last_result();
    tn__free(ups);
    tn__free(buf);
    return r;
}

TN_API tn_replicated *tn_function_replicate(tn_graph *g, const tn_func_desc *d, const tn_replicate_desc *rd) {
    const char *W = "tn_function_replicate";
    if (!rd) { tn__err(TN_ERR_NULL, "%s: rd is NULL", W); return NULL; }
    if (tn__check_desc(g, d) != TN_OK) { tn__err_as(W, "tn_function"); return NULL; }
    if (rd->n_grads < 0 || (rd->n_grads > 0 && !rd->grads)) { tn__err(TN_ERR_NULL, "%s: n_grads is %d but grads is NULL", W, rd->n_grads); return NULL; }
    for (int i = 0; i < rd->n_grads; i++) {
        tn_var *v = rd->grads[i];
        if (!v) { tn__err(TN_ERR_NULL, "%s: gradient %d is NULL (did tn_grad fail?)", W, i); return NULL; }
        if (v->graph != g) { tn__err(TN_ERR_GRAPH, "%s: gradient %d ('%s') belongs to another graph", W, i, tn__var_label_name(v)); return NULL; }
        if (!tn_dtype_is_float(v->type.dtype)) {
            tn__err(TN_ERR_DTYPE, "%s: gradient %d ('%s') is %s; gradients are float", W, i, tn__var_label_name(v), tn_dtype_name(v->type.dtype));
            return NULL;
        }
    }
    bool gpu = tn_cuda_available();
    if (!gpu) tn_clear_error();
    int n = rd->n_replicas ? rd->n_replicas : gpu ? tn__cuda.device_count : 1;
    if (n < 1 || n > TN__CUDA_MAX_DEVICES) { tn__err(TN_ERR_INVALID, "%s: n_replicas is %d (1 to %d)", W, n, TN__CUDA_MAX_DEVICES); return NULL; }
    if ((unsigned)rd->allreduce > TN_ALLREDUCE_HOST) { tn__err(TN_ERR_INVALID, "%s: allreduce %d is not a tn_allreduce", W, (int)rd->allreduce); return NULL; }
    tn_replicated *R = (tn_replicated *)tn__calloc(1, sizeof *R);
    if (!R) { tn__err(TN_ERR_OOM, "%s: out of memory", W); return NULL; }
    R->n = n; R->n_in = d->n_inputs; R->n_out = d->n_outputs; R->n_grads = rd->n_grads; R->n_upd = d->n_updates; R->sum = rd->sum;
    int n_roots = d->n_outputs + rd->n_grads + 2 * d->n_updates;
    tn_var **roots = (tn_var **)tn__calloc((size_t)n_roots + 1, sizeof *roots);
    tn_var *scale_in[TN_DTYPE_COUNT] = { 0 };
    int devs[TN__CUDA_MAX_DEVICES];
    tn_result r = TN_OK;
    bool any_host = !gpu, dup = false;
    R->r = (tn__replica *)tn__calloc((size_t)n, sizeof *R->r);
    R->combine = (tn_combine *)tn__calloc((size_t)R->n_out + 1, sizeof *R->combine);
    R->split = (bool *)tn__calloc((size_t)R->n_in + 1, 1);
    R->hred = (tn_array **)tn__calloc((size_t)R->n_grads + 1, sizeof *R->hred);
    if (!roots || !R->r || !R->combine || !R->split || !R->hred) { r = tn__err(TN_ERR_OOM, "%s: out of memory", W); goto fail; }
    for (int i = 0; i < R->n_in; i++) R->split[i] = rd->split ? rd->split[i] : d->inputs[i]->type.ndim >= 1;
    for (int i = 0; i < R->n_in; i++)
        if (R->split[i] && d->inputs[i]->type.ndim < 1) { r = tn__err(TN_ERR_SHAPE, "%s: input %d ('%s') is 0-d: it cannot be split", W, i, tn__var_label_name(d->inputs[i])); goto fail; }
    for (int o = 0; o < R->n_out; o++) {
        R->combine[o] = rd->combine ? rd->combine[o] : TN_COMBINE_AUTO;
        if ((unsigned)R->combine[o] > TN_COMBINE_FIRST) { r = tn__err(TN_ERR_INVALID, "%s: combine[%d] is %d, not a tn_combine", W, o, (int)R->combine[o]); goto fail; }
    }
    /* contexts, devices, and how the gradients are summed */
    for (int k = 0; k < n; k++) {
        char cn[32];
        snprintf(cn, sizeof cn, "cuda%d", k);
        const char *name = rd->contexts ? rd->contexts[k] : cn;
        if (!name) { r = tn__err(TN_ERR_NULL, "%s: contexts[%d] is NULL", W, k); goto fail; }
        if ((R->r[k].ctx = tn_context_get(name)) < 0) { r = tn__err_as(W, "tn_context_get"); goto fail; }
        R->r[k].dev = gpu ? tn_context_device(R->r[k].ctx) : TN_HOST;
        devs[k] = R->r[k].dev;
        any_host |= devs[k] == TN_HOST;
        if (gpu && devs[k] >= tn__cuda.device_count) {
            r = tn__err(TN_ERR_DEVICE, "%s: replica %d's context '%s' is cuda%d, but there %s only %d CUDA device%s", W, k, name, devs[k],
                        tn__cuda.device_count == 1 ? "is" : "are", tn__cuda.device_count, tn__cuda.device_count == 1 ? "" : "s");
            goto fail;
        }
        for (int j = 0; j < k; j++) dup |= devs[j] == devs[k] && devs[k] != TN_HOST;
    }
    if (rd->allreduce == TN_ALLREDUCE_NCCL) {
        if (any_host) {
            r = tn__err(TN_ERR_DEVICE, "%s: allreduce=NCCL needs every replica on a GPU (%s)", W, gpu ? "a context maps to cpu" : tn_cuda_status());
            goto fail;
        }
        R->mode = TN__DP_NCCL;
    } else if (n == 1) R->mode = TN__DP_NONE;
    else R->mode = rd->allreduce == TN_ALLREDUCE_HOST || any_host || dup ? TN__DP_HOST : TN__DP_NCCL;
    if (R->mode == TN__DP_NCCL && (r = tn__nccl_comm_new(n, devs, &R->comm, W)) != TN_OK) {
        if (rd->allreduce == TN_ALLREDUCE_AUTO)
            tn__err(r, "%s (or sum the gradients in host memory: .allreduce = TN_ALLREDUCE_HOST)", tn_last_error());
        goto fail;
    }
    R->dev_grads = !any_host && R->mode != TN__DP_HOST;
    /* what each replica computes: outputs and weighted gradients, then updates */
    for (int o = 0; o < R->n_out; o++) roots[o] = d->outputs[o];
    for (int i = 0; i < R->n_grads; i++) {
        tn_dtype t = rd->grads[i]->type.dtype;
        if (!scale_in[t]) {
            char nm[48];
            snprintf(nm, sizeof nm, "replica weight (%s)", tn_dtype_name(t));
            if (!(scale_in[t] = tn_scalar(g, nm, t))) { r = tn_last_result(); goto fail; }
            R->scale_dt[R->n_scale++] = t;
        }
        tn_var *w = tn_mul(rd->grads[i], scale_in[t]);
        if (w && R->dev_grads) w = tn_gpu_from_host(w);
        if (!(roots[R->n_out + i] = w)) { r = tn__err_as(W, "tn_mul"); goto fail; }
    }
    for (int o = 0; o < R->n_out && R->mode == TN__DP_NCCL; o++)   /* device results: no replica waits before the all-reduce */
        if (!(roots[o] = tn_gpu_from_host(roots[o]))) { r = tn_last_result(); goto fail; }
    for (int u = 0; u < R->n_upd; u++) {
        roots[R->n_out + R->n_grads + u] = d->updates[u].value;
        roots[R->n_out + R->n_grads + R->n_upd + u] = d->updates[u].shared;
    }
    if (n_roots > 0 && (r = tn__dp_shared(R, roots, n_roots, W)) != TN_OK) goto fail;
    tn_var *ordered[TN_DTYPE_COUNT];
    for (int t = 0; t < R->n_scale; t++) ordered[t] = scale_in[R->scale_dt[t]];
    for (int k = 0; k < n; k++) {
        tn__replica *P = &R->r[k];
        P->shared = (tn_var **)tn__calloc((size_t)R->n_shared + 1, sizeof *P->shared);
        P->view = (tn_array *)tn__calloc((size_t)R->n_in + 1, sizeof *P->view);
        P->in1 = (tn_array **)tn__calloc((size_t)(R->n_in + R->n_scale) + 1, sizeof *P->in1);
        P->in2 = (tn_array **)tn__calloc((size_t)(R->n_in + R->n_grads) + 1, sizeof *P->in2);
        P->out1 = (tn_array **)tn__calloc((size_t)(R->n_out + R->n_grads) + 1, sizeof *P->out1);
        P->red = (tn_array **)tn__calloc((size_t)R->n_grads + 1, sizeof *P->red);
        P->host = (tn_array **)tn__calloc((size_t)R->n_out + 1, sizeof *P->host);
        if (!P->shared || !P->view || !P->in1 || !P->in2 || !P->out1 || !P->red || !P->host) { r = tn__err(TN_ERR_OOM, "%s: out of memory", W); goto fail; }
        if ((r = tn__dp_compile(R, k, g, d, rd, roots, ordered, W)) != TN_OK) goto fail;
        for (int t = 0; t < R->n_scale; t++) P->in1[R->n_in + t] = P->scale[R->scale_dt[t]];
    }
    if (R->mode == TN__DP_NCCL) tn__dp_threads_start(R);
    tn__free(roots);
    return R;
fail:
    tn__err_in(W, r != TN_OK ? r : TN_ERR_OOM);
    tn__free(roots);
    tn_replicated_free(R);
    return NULL;
}

/* Host mode: hred[i] = the sum over replicas of their gradient i, in float64. */
static tn_result tn__dp_host_sum(tn_replicated *R, const char *W) {
    for (int i = 0; i < R->n_grads; i++) {
        const tn_array *g0 = R->r[0].out1[R->n_out + i];
        size_t cnt = (size_t)tn_array_size(g0);
        tn_array *h = R->hred[i];
        bool same = h && h->ndim == g0->ndim && h->dtype == g0->dtype;
        for (int d = 0; same && d < g0->ndim; d++) same = h->shape[d] == g0->shape[d];
        if (!same) {
            tn_array_free(h);
            if (!(h = R->hred[i] = tn_array_empty(g0->dtype, g0->ndim, g0->shape))) return tn__err(TN_ERR_OOM, "%s: out of memory", W);
        }
        if (cnt > R->acc_n) {
            tn__free(R->acc); tn__free(R->tmp);
            R->acc = (double *)tn__malloc(cnt * sizeof *R->acc);
            R->tmp = (double *)tn__malloc(cnt * sizeof *R->tmp);
            R->acc_n = R->acc && R->tmp ? cnt : 0;
            if (!R->acc_n) return tn__err(TN_ERR_OOM, "%s: out of memory for the gradients' sums", W);
        }
        for (size_t j = 0; j < cnt; j++) R->acc[j] = 0;
        for (int k = 0; k < R->n; k++) {
            const tn_array *gk = R->r[k].out1[R->n_out + i];
            if (tn_array_size(gk) != (int64_t)cnt) return tn__err(TN_ERR_SHAPE, "%s: replica %d's gradient %d has %lld elements, replica 0's %zu", W, k, i, (long long)tn_array_size(gk), cnt);
            tn_result r = tn_array_copy_to(gk, TN_F64, R->tmp, cnt * sizeof *R->tmp);
            if (r != TN_OK) return tn__err_in(W, r);
            for (size_t j = 0; j < cnt; j++) R->acc[j] += R->tmp[j];
        }
        for (size_t j = 0; j < cnt; j++) {
            if (h->dtype == TN_F64) ((double *)h->data)[j] = R->acc[j];
            else if (h->dtype == TN_F32) ((float *)h->data)[j] = (float)R->acc[j];
            else ((uint16_t *)h->data)[j] = tn_f32_to_f16((float)R->acc[j]);
        }
    }
    return TN_OK;
}

/* NCCL mode: replica k's device buffers for its summed gradients, shaped as
   its gradients (kept from call to call). */
static tn_result tn__dp_red(tn_replicated *R, int k, const char *W) {
    tn__replica *P = &R->r[k];
    for (int i = 0; i < R->n_grads; i++) {
        const tn_array *s = P->out1[R->n_out + i];
        tn_array *d = P->red[i];
        bool same = d && d->ndim == s->ndim && d->dtype == s->dtype;
        for (int a = 0; same && a < s->ndim; a++) same = d->shape[a] == s->shape[a];
        if (same) continue;
        tn_array_free(d);
        if (!(P->red[i] = tn__array_alloc(s->dtype, s->ndim, s->shape, P->dev))) return tn__err_in(W, tn_last_result());
    }
    return TN_OK;
}

/* NCCL mode, every rank from this thread: each replica's summed gradients. */
static tn_result tn__dp_nccl_sum(tn_replicated *R, const char *W) {
    int nb = R->n_grads, n = R->n;
    tn_array **send = (tn_array **)tn__malloc((size_t)(2 * n * nb) * sizeof *send);   /* once per call: 2 pointers per buffer */
    if (!send) return tn__err(TN_ERR_OOM, "%s: out of memory", W);
    tn_array **recv = send + n * nb;
    tn_result r = TN_OK;
    for (int k = 0; k < n && r == TN_OK; k++) {
        if ((r = tn__dp_red(R, k, W)) != TN_OK) break;
        for (int i = 0; i < nb; i++) { send[k * nb + i] = R->r[k].out1[R->n_out + i]; recv[k * nb + i] = R->r[k].red[i]; }
    }
    if (r == TN_OK) r = tn__nccl_allreduce(R->comm, nb, send, recv, W);
    tn__free(send);
    return r;
}

/* A replica's output as a new host array. */
static tn_array *tn__dp_to_host(const tn_array *a) { return a->device != TN_HOST ? tn_array_to_host(a) : tn_array_copy(a); }

/* outputs[o] from every replica's output o (host arrays the caller owns). */
static tn_result tn__dp_combine(tn_replicated *R, int o, tn_array **out, const char *W) {
    *out = NULL;
    tn_combine c = R->combine[o];
    const tn_array *a0 = R->r[0].out1[o];
    if (c == TN_COMBINE_AUTO) c = a0->ndim == 0 ? (R->sum ? TN_COMBINE_SUM : TN_COMBINE_MEAN) : TN_COMBINE_CONCAT;
    int n = c == TN_COMBINE_FIRST ? 1 : R->n;
    tn_array *host[TN__CUDA_MAX_DEVICES] = { 0 };
    tn_result r = TN_OK;
    int64_t rows = 0;
    for (int k = 0; k < n && r == TN_OK; k++) {
        const tn_array *a = R->r[k].out1[o];
        host[k] = R->r[k].host[o];          /* copied by the replica's thread, else here */
        R->r[k].host[o] = NULL;
        if (!host[k] && !(host[k] = tn__dp_to_host(a))) { r = tn__err_in(W, tn_last_result()); break; }
        bool ok = a->ndim == a0->ndim && a->dtype == a0->dtype && (c != TN_COMBINE_CONCAT || a->ndim >= 1);
        for (int d = c == TN_COMBINE_CONCAT ? 1 : 0; ok && d < a->ndim; d++) ok = a->shape[d] == a0->shape[d];
        if (!ok) {
            char s0[128], s1[128];
            r = tn__err(TN_ERR_SHAPE, "%s: output %d: replica %d gives %s %s, replica 0 %s %s; they cannot be combined (%s)", W, o, k,
                        tn_dtype_name(a->dtype), tn__shape_str(a->ndim, a->shape, s1), tn_dtype_name(a0->dtype),
                        tn__shape_str(a0->ndim, a0->shape, s0), c == TN_COMBINE_CONCAT ? "concatenated along axis 0" : "elementwise");
        }
        rows += a->ndim ? a->shape[0] : 0;
    }
    if (r == TN_OK && (c == TN_COMBINE_FIRST)) { *out = host[0]; host[0] = NULL; }
    else if (r == TN_OK && c == TN_COMBINE_CONCAT) {
        int64_t shape[TN_MAX_DIMS];
        memcpy(shape, a0->shape, sizeof shape);
        shape[0] = rows;
        tn_array *y = tn_array_empty(a0->dtype, a0->ndim, shape);
        size_t off = 0;
        for (int k = 0; y && k < n; k++) {
            memcpy((char *)y->data + off, host[k]->data, tn_array_nbytes(host[k]));   /* contiguous copies */
            off += tn_array_nbytes(host[k]);
        }
        if (!y) r = tn__err_in(W, tn_last_result());
        *out = y;
    } else if (r == TN_OK) {       /* MEAN, SUM: float64, then the output's dtype */
        size_t cnt = (size_t)tn_array_size(a0);
        double *acc = (double *)tn__calloc(cnt + 1, sizeof *acc), *t = (double *)tn__malloc((cnt + 1) * sizeof *t);
        for (int k = 0; acc && t && k < n && r == TN_OK; k++) {
            double w = c == TN_COMBINE_MEAN ? R->r[k].share : 1.0;
            if ((r = tn_array_copy_to(host[k], TN_F64, t, (cnt + 1) * sizeof *t)) == TN_OK)
                for (size_t j = 0; j < cnt; j++) acc[j] += w * t[j];
        }
        tn_array *y = acc && t && r == TN_OK ? tn_array_empty(a0->dtype, a0->ndim, a0->shape) : NULL;
        tn_array *src = y ? tn_array_wrap(TN_F64, a0->ndim, a0->shape, NULL, acc) : NULL;
        if (src && tn_array_assign(y, src) == TN_OK) { *out = y; y = NULL; }
        else if (r == TN_OK) r = tn__err_in(W, tn_last_result() ? tn_last_result() : TN_ERR_OOM);
        tn_array_free(src);
        tn_array_free(y);
        tn__free(acc);
        tn__free(t);
    }
    for (int k = 0; k < n; k++) tn_array_free(host[k]);
    return r;
}

/* Output o of replica k is read by tn__dp_combine. */
static bool tn__dp_combined(const tn_replicated *R, int o, int k) { return k == 0 || R->combine[o] != TN_COMBINE_FIRST; }

static void tn__dp_barrier(tn_replicated *R);

/* NCCL mode, on replica k's thread: its part of a call (the views and
   weights are set). The error's message goes to P->err: the caller's
   thread reports it. Every part waits until all have queued their f1
   before it queues its rank of the all-reduce: a rank that left it out
   would leave the others waiting forever, so where one replica failed, or
   the gradients' sizes disagree, no replica goes on (and none is updated). */
static void tn__dp_part(tn_replicated *R, int k) {
    const char *W = "tn_replicated_call";
    tn__replica *P = &R->r[k];
    tn_result r = TN_OK;
    bool sum = R->n_grads > 0 && R->n_upd > 0;
    P->skipped = false;
    tn__fence_enter();
    if (P->f1 && (r = tn_call(P->f1, P->in1, P->out1)) != TN_OK)
        r = tn__err(r, "%s: replica %d (%s): %s", W, k, tn_context_name(P->ctx), tn_last_error());
    if (r == TN_OK && sum) r = tn__dp_red(R, k, W);
    if (r != TN_OK) tn__atomic_store(&R->failed, 1);
    tn__dp_barrier(R);
    if (r == TN_OK && tn__atomic_load(&R->failed)) P->skipped = true;
    for (int j = 1; r == TN_OK && !P->skipped && sum && j < R->n; j++)      /* the same verdict in every part */
        for (int i = 0; i < R->n_grads && r == TN_OK; i++) {
            const tn_array *a = R->r[j].out1[R->n_out + i], *a0 = R->r[0].out1[R->n_out + i];
            if (a->dtype != a0->dtype || tn_array_size(a) != tn_array_size(a0)) {
                char s0[128], s1[128];
                r = tn__err(TN_ERR_SHAPE, "%s: gradient %d is %s %s on replica %d but %s %s on replica 0; nothing was updated", W, i,
                            tn_dtype_name(a->dtype), tn__shape_str(a->ndim, a->shape, s1), j, tn_dtype_name(a0->dtype),
                            tn__shape_str(a0->ndim, a0->shape, s0));
                if (k > 0) { P->skipped = true; r = TN_OK; }   /* replica 0 reports it */
            }
        }
    if (r == TN_OK && !P->skipped && sum) {
        r = tn__nccl_allreduce_ranks(R->comm, k, k + 1, R->n_grads, P->out1 + R->n_out, P->red, W);
        for (int i = 0; i < R->n_grads; i++) P->in2[R->n_in + i] = P->red[i];
    }
    if (r == TN_OK && !P->skipped && P->f2 && (r = tn_call(P->f2, P->in2, NULL)) != TN_OK)
        r = tn__err(r, "%s: replica %d (%s): %s", W, k, tn_context_name(P->ctx), tn_last_error());
    tn_result rf = tn__fence_leave();
    if (r == TN_OK && rf != TN_OK) r = tn__err(rf, "%s: replica %d (%s): %s", W, k, tn_context_name(P->ctx), tn_last_error());
    for (int o = 0; o < R->n_out && r == TN_OK && !P->skipped; o++) {
        const tn_array *a = P->out1[o];
        if (tn__dp_combined(R, o, k) && !(P->host[o] = tn__dp_to_host(a)))
            r = tn__err_in(W, tn_last_result());
    }
    P->res = r;
    if (r != TN_OK) snprintf(P->err, sizeof P->err, "%s", tn_last_error());
}

typedef struct tn__dp_arg { tn_replicated *R; int k; } tn__dp_arg;

/* A waiting thread checks for up to this long before it sleeps: the steps
   of a training loop come back to back, and waking a sleeping thread costs
   tens of microseconds, a delay the all-reduce then passes on to every GPU. */
#ifndef TN__DP_SPIN_S
#define TN__DP_SPIN_S 200e-6
#endif

/* What a thread waits for (its argument: the value it saw before). */
static bool tn__dp_new_job(tn_replicated *R, uint64_t seen) { return tn__atomic_load(&R->job) != seen || tn__atomic_load(&R->quit); }
static bool tn__dp_met(tn_replicated *R, uint64_t gen) { return tn__atomic_load(&R->met_gen) != gen; }
static bool tn__dp_parts_done(tn_replicated *R, uint64_t unused) { (void)unused; return tn__atomic_load(&R->pending) == 0; }

/* Waits until ready(R, arg): spinning for up to TN__DP_SPIN_S, then asleep on
   cv (whoever makes it ready does so under R->mu and signals cv). */
static void tn__dp_wait(tn_replicated *R, bool (*ready)(tn_replicated *, uint64_t), uint64_t arg, pthread_cond_t *cv) {
    double t0 = tn__prof_now();
    for (int i = 1; !ready(R, arg); i++) {
        if (!(i & 63) && tn__prof_now() - t0 > TN__DP_SPIN_S) {
            pthread_mutex_lock(&R->mu);
            while (!ready(R, arg)) pthread_cond_wait(cv, &R->mu);
            pthread_mutex_unlock(&R->mu);
            return;
        }
        tn__cpu_pause();
    }
}

/* Waits until every part of the call has arrived. */
static void tn__dp_barrier(tn_replicated *R) {
    uint64_t gen = tn__atomic_load(&R->met_gen);
    if (tn__atomic_fetch_add(&R->arrived, 1) == R->n - 1) {        /* the last to arrive */
        tn__atomic_store(&R->arrived, 0);
        pthread_mutex_lock(&R->mu);
        tn__atomic_fetch_add(&R->met_gen, 1);
        pthread_cond_broadcast(&R->met);
        pthread_mutex_unlock(&R->mu);
        return;
    }
    tn__dp_wait(R, tn__dp_met, gen, &R->met);
}

static void *tn__dp_thread(void *arg) {
    tn__dp_arg a = *(tn__dp_arg *)arg;
    tn__free(arg);
    tn_replicated *R = a.R;
    uint64_t seen = 0;
    for (;;) {
        tn__dp_wait(R, tn__dp_new_job, seen, &R->go);
        if (tn__atomic_load(&R->quit)) break;
        seen = tn__atomic_load(&R->job);
        tn__dp_part(R, a.k);
        if (tn__atomic_fetch_add(&R->pending, -1) == 1) {   /* the last one: the caller may be asleep */
            pthread_mutex_lock(&R->mu);
            pthread_cond_signal(&R->done);
            pthread_mutex_unlock(&R->mu);
        }
    }
    return NULL;
}

/* The caller's side of a call: every thread runs its replica's part while
   this one runs replica 0's, then waits for the rest (spinning first). */
static void tn__dp_run_parts(tn_replicated *R) {
    tn__atomic_store(&R->pending, R->n_tid);
    tn__atomic_store(&R->failed, 0);
    pthread_mutex_lock(&R->mu);
    tn__atomic_fetch_add(&R->job, 1);
    pthread_cond_broadcast(&R->go);
    pthread_mutex_unlock(&R->mu);
    tn__dp_part(R, 0);
    tn__dp_wait(R, tn__dp_parts_done, 0, &R->done);
}

/* A thread for each replica past the first; none (the calling thread runs
   them in turn) where one cannot be started. */
static void tn__dp_threads_start(tn_replicated *R) {
    if (R->n < 2 || !(R->tid = (pthread_t *)tn__calloc((size_t)R->n - 1, sizeof *R->tid))) return;
    pthread_mutex_init(&R->mu, NULL);
    pthread_cond_init(&R->go, NULL);
    pthread_cond_init(&R->done, NULL);
    pthread_cond_init(&R->met, NULL);
    for (int k = 1; k < R->n; k++) {
        tn__dp_arg *a = (tn__dp_arg *)tn__malloc(sizeof *a);
        if (a) *a = (tn__dp_arg){ R, k };
        if (!a || pthread_create(&R->tid[k - 1], NULL, tn__dp_thread, a) != 0) {
            tn__free(a);
            tn__dp_threads_stop(R);
            return;
        }
        R->n_tid++;
    }
}

static void tn__dp_threads_stop(tn_replicated *R) {
    if (!R->tid) return;
    pthread_mutex_lock(&R->mu);
    tn__atomic_store(&R->quit, 1);
    pthread_cond_broadcast(&R->go);
    pthread_mutex_unlock(&R->mu);
    for (int i = 0; i < R->n_tid; i++) pthread_join(R->tid[i], NULL);
    pthread_mutex_destroy(&R->mu);
    pthread_cond_destroy(&R->go);
    pthread_cond_destroy(&R->done);
    pthread_cond_destroy(&R->met);
    tn__free(R->tid);
    R->tid = NULL;
    R->n_tid = 0;
}

TN_API tn_result tn_replicated_call(tn_replicated *R, tn_array *const *inputs, tn_array **outputs) {
    const char *W = "tn_replicated_call";
    if (!R) return tn__err(TN_ERR_NULL, "%s: r is NULL", W);
    if (R->n_in > 0 && !inputs) return tn__err(TN_ERR_NULL, "%s: the step takes %d inputs but inputs is NULL", W, R->n_in);
    if (R->n_out > 0 && !outputs) return tn__err(TN_ERR_NULL, "%s: the step has %d outputs but outputs is NULL", W, R->n_out);
    for (int o = 0; o < R->n_out; o++) outputs[o] = NULL;
    int64_t N = -1;
    int first = -1;
    for (int i = 0; i < R->n_in; i++) {
        if (!inputs[i]) return tn__err(TN_ERR_NULL, "%s: input %d is NULL", W, i);
        if (!R->split[i]) continue;
        if (inputs[i]->ndim < 1) return tn__err(TN_ERR_SHAPE, "%s: input %d is 0-d but is split along axis 0", W, i);
        if (N >= 0 && inputs[i]->shape[0] != N)
            return tn__err(TN_ERR_SHAPE, "%s: split inputs disagree on the batch: input %d has %lld rows, input %d %lld", W, first,
                           (long long)N, i, (long long)inputs[i]->shape[0]);
        if (N < 0) { N = inputs[i]->shape[0]; first = i; }
    }
    if (N >= 0 && N < R->n)
        return tn__err(TN_ERR_SHAPE, "%s: a batch of %lld rows cannot feed %d replicas (each needs a row)", W, (long long)N, R->n);
    if (tn__atomic_flag_test_and_set_explicit(&R->busy, TN__ACQUIRE))
        return tn__err(TN_ERR_BUSY, "%s: the replicated step is running in another thread; it takes one call at a time "
                       "(nothing was done)", W);
    tn_result r = TN_OK;
    bool threaded = R->n_tid == R->n - 1 && R->n > 1;
    /* One fence for the whole step: a replica's copies from and to host
       memory stay queued, so the next replica starts at once. */
    tn__fence_enter();
    /* 1. each replica: its rows, outputs and weighted gradients (threaded:
       its whole part, on its thread) */
    for (int k = 0; k < R->n && r == TN_OK; k++) {
        tn__replica *P = &R->r[k];
        int64_t lo = N < 0 ? 0 : N * k / R->n, hi = N < 0 ? 0 : N * (k + 1) / R->n;
        P->share = N < 0 ? 1.0 / R->n : (double)(hi - lo) / (double)N;
        for (int i = 0; i < R->n_in; i++) {
            P->view[i] = *inputs[i];
            if (R->split[i]) {
                P->view[i].shape[0] = hi - lo;
                if (hi > lo) P->view[i].data = (char *)inputs[i]->data + lo * inputs[i]->strides[0];
            }
            P->in1[i] = P->in2[i] = &P->view[i];
        }
        for (int t = 0; t < R->n_scale; t++) {
            tn_array *s = P->scale[R->scale_dt[t]];
            if ((r = tn_array_set(s, NULL, R->sum ? 1.0 : P->share)) != TN_OK) break;
        }
        if (r == TN_OK && !threaded && P->f1 && (r = tn_call(P->f1, P->in1, P->out1)) != TN_OK)
            r = tn__err(r, "%s: replica %d (%s): %s", W, k, tn_context_name(P->ctx), tn_last_error());
    }
    if (r == TN_OK && threaded) {
        tn__dp_run_parts(R);
        for (int k = 0; k < R->n && r == TN_OK; k++)      /* the first failure; the others stopped for it */
            if (R->r[k].res != TN_OK) r = tn__err(R->r[k].res, "%s", R->r[k].err);
    }
    /* 2. the gradients summed across replicas */
    if (r == TN_OK && !threaded && R->n_grads > 0 && R->n_upd > 0) {
        if (R->mode == TN__DP_HOST) {      /* the gradients' copies to the host first */
            if ((r = tn__cuda_fence()) != TN_OK) r = tn__err(r, "%s: %s", W, tn_last_error());
            else r = tn__dp_host_sum(R, W);
        }
        else if (R->mode == TN__DP_NCCL) r = tn__dp_nccl_sum(R, W);
        for (int k = 0; k < R->n; k++)
            for (int i = 0; i < R->n_grads; i++)
                R->r[k].in2[R->n_in + i] = R->mode == TN__DP_HOST ? R->hred[i] : R->mode == TN__DP_NCCL ? R->r[k].red[i] : R->r[k].out1[R->n_out + i];
    }
    /* 3. the same updates everywhere */
    for (int k = 0; k < R->n && r == TN_OK && !threaded; k++) {
        tn__replica *P = &R->r[k];
        if (P->f2 && (r = tn_call(P->f2, P->in2, NULL)) != TN_OK)
            r = tn__err(r, "%s: replica %d (%s): %s", W, k, tn_context_name(P->ctx), tn_last_error());
    }
    tn_result rf = tn__fence_leave();
    if (r == TN_OK && rf != TN_OK) r = tn__err(rf, "%s: %s", W, tn_last_error());
    /* 4. outputs */
    for (int o = 0; o < R->n_out && r == TN_OK; o++) r = tn__dp_combine(R, o, &outputs[o], W);
    if (r != TN_OK)
        for (int o = 0; o < R->n_out; o++) { tn_array_free(outputs[o]); outputs[o] = NULL; }
    for (int k = 0; k < R->n; k++)          /* left by a failed call */
        for (int o = 0; o < R->n_out; o++) { tn_array_free(R->r[k].host[o]); R->r[k].host[o] = NULL; }
    tn__atomic_flag_clear_explicit(&R->busy, TN__RELEASE);
    return r;
}

TN__CXX_END
#endif /* TENSOR_IMPLEMENTATION */
