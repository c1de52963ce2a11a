#!/usr/bin/env bash
# Builds and runs the CUDA back end's tests on a GPU machine (H100/H200) and
# prints one table. Run from the repository root:  tests/gpu/run_gpu.sh
#   test_cuda_decls     our CUDA declarations vs the real cuda.h/nvrtc.h/cublas_v2.h
#   test_nvrtc          every generated kernel compiles (sm_90, sm_80)
#   test_kcache         the disk cache: corruption, processes, FIFOs, long and
#                       unusable cache_dir (said once through the log)
#   test_cuda_fallback  device=cpu/auto/cuda selection without a driver (forced)
#   test_cuda           every op x dtype x layout x size on the GPU vs the CPU
#                       engine; fused/f16/casts; steady-loop allocation; OOM;
#                       exp launch timing (us per call)
#   test_cuda_place     transfer ops, cuBLAS operand mapping, copy kernel (CPU)
#   test_cuda_func      compiled functions on the GPU: placement and debugprint,
#                       shared variables on the device, copy/borrow/device
#                       outputs, updates, cuBLAS gemm/gemv/batched/outer,
#                       fused chain + reduction, device=cuda vs cpu, no driver
#                       allocation in steady loops; "func exp" timings (us/call)
#   test_cuda_ops       the op-case table: every non-elementwise family (index,
#                       sort, random, conv, pool, size/reshape, cumulative) x
#                       dtype x layout, outputs and gradients, GPU vs CPU function
#   memcheck            compute-sanitizer --tool memcheck on test_cuda (if found)
#   memcheck_func       the same on test_cuda_func (its API errors not reported:
#                       it asks a module for a kernel it lacks on purpose, and
#                       the library checks every driver call's return itself)
set -u
CC=${CC:-cc}
BUILD=${BUILD:-build-gpu}
CUDA_INC=${CUDA_PATH:-/usr/local/cuda}/include
mkdir -p "$BUILD"
FLAGS="-std=c11 -Wall -Wextra -Werror -O2 -g -I."
status=0
rows=()
run() {   # name, command...
    local name=$1; shift
    local t0=$(date +%s.%N)
    out=$("$@" 2>&1); rc=$?
    local t1=$(date +%s.%N)
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    skip=$(printf '%s\n' "$out" | grep -E '^SKIP \(' | head -n 1)           # the whole binary
    nskip=$(printf '%s\n' "$out" | grep -E '^[0-9]+ skipped$' | tail -n 1)  # some of its tests
    note=$(printf '%s\n' "$out" | grep -E '^(cuda[0-9]|  exp over|  func exp|  the reduction|  sum over|  [0-9]+ (reduction|prologue|softmax|large) cases|  [0-9]+ op cases|  largest NMSE|NVRTC [0-9])' | tr '\n' ';' | cut -c1-400)
    local result=ok
    [ "$rc" -ne 0 ] && result=FAIL
    if [ -z "$line" ] && [ -n "$skip" ] && [ "$rc" -eq 0 ]; then line=$skip; result=skip
    elif [ -z "$line" ]; then line="CRASH (exit $rc)"; result=FAIL
    fi
    [ -n "$nskip" ] && line="$line, $nskip"
    [ "$result" = FAIL ] && { status=1; echo "---- $name failed (exit $rc); its failure lines:"; printf '%s\n' "$out" | grep -E -A3 '^(FAIL|CRASH|=+ ERROR|=+ +(Invalid|Program hit|Leaked)|ERROR SUMMARY|tensor.h:)' | head -n 60; printf '%s\n' "$out" | tail -n 5; }
    rows+=("$(printf '%-20s %-6s %-40s %6.1fs  %s' "$name" "$result" "$line" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$note")")
}
build() {   # test, extra flags
    $CC $FLAGS $2 -o "$BUILD/$1" "tests/$1.c" -lm -lpthread -ldl || { echo "BUILD FAILED: $1"; status=1; return 1; }
}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
build test_cuda_decls "-I$CUDA_INC" && run test_cuda_decls "$BUILD/test_cuda_decls"
# the NVRTC compile tests also run in CI (no GPU needed); TN_GPU_SKIP_NVRTC=1 skips them here
if [ -z "${TN_GPU_SKIP_NVRTC:-}" ]; then
    build test_nvrtc "" && run test_nvrtc "$BUILD/test_nvrtc"
    build test_kcache "" && run test_kcache "$BUILD/test_kcache"
    build test_nvrtc_reduce "" && run test_nvrtc_reduce "$BUILD/test_nvrtc_reduce"
fi
build test_place_rewire "" && run test_place_rewire "$BUILD/test_place_rewire"
build test_cuda_fallback "" && run test_cuda_fallback "$BUILD/test_cuda_fallback"
build test_cuda_place "" && run test_cuda_place "$BUILD/test_cuda_place"
if build test_cuda ""; then
    run test_cuda "$BUILD/test_cuda"
    CS=$(command -v compute-sanitizer || ls ${CUDA_PATH:-/usr/local/cuda}/bin/compute-sanitizer 2>/dev/null)
    if [ -n "$CS" ]; then
        run memcheck env TN_TEST_QUICK=1 "$CS" --tool memcheck --leak-check full --error-exitcode 9 "$BUILD/test_cuda"
    else
        rows+=("memcheck             skip   compute-sanitizer not found")
    fi
fi
if build test_cuda_reduce ""; then
    run test_cuda_reduce "$BUILD/test_cuda_reduce"
    [ -n "$CS" ] && run memcheck_reduce env TN_TEST_QUICK=1 "$CS" --tool memcheck --leak-check full --error-exitcode 9 "$BUILD/test_cuda_reduce"
fi
if build test_cuda_func ""; then
    run test_cuda_func "$BUILD/test_cuda_func"
    run test_cuda_func_blk env TENSOR_FLAGS=launch_blocking=1 "$BUILD/test_cuda_func"
    run test_cuda_func_nog env TENSOR_FLAGS=cuda_graph=0 "$BUILD/test_cuda_func"
    CS=$(command -v compute-sanitizer || ls ${CUDA_PATH:-/usr/local/cuda}/bin/compute-sanitizer 2>/dev/null)
    [ -n "$CS" ] && run memcheck_func "$CS" --tool memcheck --report-api-errors no --leak-check full --error-exitcode 9 "$BUILD/test_cuda_func"
fi
build test_cuda_ops "" && run test_cuda_ops "$BUILD/test_cuda_ops"
echo
printf '%-20s %-6s %-40s %7s  %s\n' test result summary time notes
for r in "${rows[@]}"; do echo "$r"; done
exit $status
