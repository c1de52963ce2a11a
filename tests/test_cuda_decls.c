/* Compiles tensor_cuda.h's own CUDA declarations beside the real SDK headers
   (cuda.h, nvrtc.h, cublas_v2.h) when they can be found: each real function
   is assigned to a pointer of our typedef, so a wrong signature or a missing
   _v2 fails the build (-Werror), and every constant we copied is checked.
   The Makefile adds -I/usr/local/cuda/include for this test only; without the
   headers the test says so and counts nothing for that part. */
#if defined(__has_include)
#  if __has_include(<cuda.h>) && __has_include(<nvrtc.h>) && __has_include(<cublas_v2.h>)
#    define TN_HAVE_CUDA_HEADERS 1
#    include <cuda.h>
#    include <nvrtc.h>
#    include <cublas_v2.h>
#  endif
#endif
#if defined(TN_HAVE_CUDA_HEADERS) && __has_include(<nccl.h>)
#  define TN_HAVE_NCCL_HEADER 1
#  include <nccl.h>
#endif
#include "tensor.h"
#include "tensor_cuda.h"
#include "harness.h"

#ifdef TN_HAVE_NCCL_HEADER
/* NCCL's declarations (>>cuda_nccl) against nccl.h, the same way. */
#define NX_CHECK(name, ret, args, req) nn += (int)(sizeof((tn__PFN_##name){ name }) == sizeof(void (*)(void)));
_Static_assert(sizeof(tn__ncclResult_t) == sizeof(ncclResult_t), "ncclResult_t");
_Static_assert(sizeof(tn__ncclDataType_t) == sizeof(ncclDataType_t), "ncclDataType_t");
_Static_assert(sizeof(tn__ncclRedOp_t) == sizeof(ncclRedOp_t), "ncclRedOp_t");
_Static_assert((long long)TN__NCCL_SUCCESS == (long long)ncclSuccess, "ncclSuccess");
_Static_assert((long long)TN__NCCL_SUM == (long long)ncclSum, "ncclSum");
_Static_assert((long long)TN__NCCL_INT32 == (long long)ncclInt32, "ncclInt32");
_Static_assert((long long)TN__NCCL_INT64 == (long long)ncclInt64, "ncclInt64");
_Static_assert((long long)TN__NCCL_FLOAT16 == (long long)ncclFloat16, "ncclFloat16");
_Static_assert((long long)TN__NCCL_FLOAT32 == (long long)ncclFloat32, "ncclFloat32");
_Static_assert((long long)TN__NCCL_FLOAT64 == (long long)ncclFloat64, "ncclFloat64");
TEST(test_nccl_decls_match_header) {
    int nn = 0, want = 0;
#define NX_ONE(name, ret, args, req) want++;
    TN__NCCL_FUNCS(NX_CHECK) TN__NCCL_FUNCS(NX_ONE)
#undef NX_ONE
    CHECK(nn == want && want >= 7, "%d of %d NCCL entry points checked", nn, want);
    printf("checked against NCCL %d.%d.%d\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
}
#endif

#ifdef TN_HAVE_CUDA_HEADERS
/* Each real function initialises a pointer of our type inside sizeof: the
   compiler type-checks it (a mismatch is an error under -Werror) and nothing
   is linked, so the test needs no CUDA library. */
#define X_CHECK(name, ret, args, req) n += (int)(sizeof((tn__PFN_##name){ name }) == sizeof(void (*)(void)));
/* Handle types are the SDK's own. */
_Static_assert(sizeof(tn__CUdeviceptr) == sizeof(CUdeviceptr), "CUdeviceptr");
_Static_assert(sizeof(tn__CUdevice) == sizeof(CUdevice), "CUdevice");
_Static_assert(sizeof(tn__CUresult) == sizeof(CUresult), "CUresult");
_Static_assert(sizeof(tn__nvrtcResult) == sizeof(nvrtcResult), "nvrtcResult");
_Static_assert(sizeof(tn__cublasStatus_t) == sizeof(cublasStatus_t), "cublasStatus_t");

#define SAME(ours, theirs) _Static_assert((long long)(ours) == (long long)(theirs), #ours " != " #theirs);
SAME(TN__CUDA_SUCCESS, CUDA_SUCCESS)
SAME(TN__CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_VALUE)
SAME(TN__CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_OUT_OF_MEMORY)
SAME(TN__CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_NOT_INITIALIZED)
SAME(TN__CUDA_ERROR_STUB_LIBRARY, CUDA_ERROR_STUB_LIBRARY)
SAME(TN__CUDA_ERROR_NO_DEVICE, CUDA_ERROR_NO_DEVICE)
SAME(TN__CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_IMAGE)
SAME(TN__CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_NO_BINARY_FOR_GPU)
SAME(TN__CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
SAME(TN__CU_MEMHOSTALLOC_PORTABLE, CU_MEMHOSTALLOC_PORTABLE)
SAME(TN__CU_MEMHOSTREGISTER_PORTABLE, CU_MEMHOSTREGISTER_PORTABLE)
SAME(TN__CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
SAME(TN__CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
SAME(TN__CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
SAME(TN__CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)
SAME(TN__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
SAME(TN__CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
SAME(TN__CU_FUNC_ATTRIBUTE_NUM_REGS, CU_FUNC_ATTRIBUTE_NUM_REGS)
SAME(TN__CU_STREAM_NON_BLOCKING, CU_STREAM_NON_BLOCKING)
SAME(TN__CU_EVENT_DEFAULT, CU_EVENT_DEFAULT)
SAME(TN__CU_EVENT_DISABLE_TIMING, CU_EVENT_DISABLE_TIMING)
SAME(TN__CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
SAME(TN__CU_STREAM_CAPTURE_STATUS_ACTIVE, CU_STREAM_CAPTURE_STATUS_ACTIVE)
SAME(TN__CU_STREAM_SET_CAPTURE_DEPENDENCIES, CU_STREAM_SET_CAPTURE_DEPENDENCIES)
SAME(TN__NVRTC_SUCCESS, NVRTC_SUCCESS)
SAME(TN__NVRTC_ERROR_COMPILATION, NVRTC_ERROR_COMPILATION)
SAME(TN__CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS)
SAME(TN__CUBLAS_OP_N, CUBLAS_OP_N)
SAME(TN__CUBLAS_OP_T, CUBLAS_OP_T)
SAME(TN__CUBLAS_DEFAULT_MATH, CUBLAS_DEFAULT_MATH)
SAME(TN__CUBLAS_PEDANTIC_MATH, CUBLAS_PEDANTIC_MATH)
SAME(TN__CUBLAS_TF32_TENSOR_OP_MATH, CUBLAS_TF32_TENSOR_OP_MATH)
SAME(TN__CUDA_R_32F, CUDA_R_32F)
SAME(TN__CUDA_R_64F, CUDA_R_64F)
SAME(TN__CUDA_R_16F, CUDA_R_16F)
SAME(TN__CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F)
SAME(TN__CUBLAS_COMPUTE_64F, CUBLAS_COMPUTE_64F)
SAME(TN__CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_32F_FAST_TF32)
SAME(TN__CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_DEFAULT)
#undef SAME

TEST(test_decls_match_sdk) {
    /* The build is the test; this only uses the pointers so none is optimised
       into a false pass, and records which toolkit was checked. */
    int n = 0, want = 0;
#define X_ONE(name, ret, args, req) want++;
    TN__CU_FUNCS(X_CHECK) TN__NVRTC_FUNCS(X_CHECK) TN__CUBLAS_FUNCS(X_CHECK)
    TN__CU_FUNCS(X_ONE) TN__NVRTC_FUNCS(X_ONE) TN__CUBLAS_FUNCS(X_ONE)
#undef X_ONE
    CHECK(n == want && want > 50, "%d of %d entry points checked", n, want);
    printf("checked against CUDA_VERSION %d, CUBLAS_VERSION %d\n", CUDA_VERSION, CUBLAS_VERSION);
}
#endif

int main(void) {
#ifdef TN_HAVE_CUDA_HEADERS
    TH_RUN(test_decls_match_sdk);
#ifdef TN_HAVE_NCCL_HEADER
    TH_RUN(test_nccl_decls_match_header);
#endif
#else
    th_skip_all("cuda.h, nvrtc.h or cublas_v2.h not found: add -I$CUDA_PATH/include");
#endif
    TH_END();
}
