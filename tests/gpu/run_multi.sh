#!/usr/bin/env bash
# Several GPUs: builds and runs the multi-device tests and benchmark on a GPU
# machine, one log per step in the folder given as $1 (default logs-multi),
# and prints a summary. Run from the repository root:
#     tests/gpu/run_multi.sh /tmp/multi-logs
#   test_cuda_decls   our CUDA and NCCL declarations vs cuda.h / nccl.h
#   test_multi        contexts, placement over stand-in devices, CPU replicas
#   test_cuda_multi   contexts on GPUs (peer and staged copies), NCCL, the
#                     replicated logistic regression vs one GPU and float64;
#                     again with launch_blocking=1, and with CUDA_VISIBLE_DEVICES=0
#                     (one GPU: two contexts on it, NCCL with one rank)
#   bench_multi       MLP step on 1 vs every GPU, all-reduce busbw 1 MB..1 GB
# NCCL is found on the loader's path, under /usr/local/cuda*, or in Python's
# site-packages/nvidia/nccl/lib (PyTorch's); TN_LIBNCCL_PATH overrides.
set -u
LOG=${1:-logs-multi}
CC=${CC:-cc}
BUILD=${BUILD:-build-gpu}
CUDA_INC=${CUDA_PATH:-/usr/local/cuda}/include
mkdir -p "$LOG" "$BUILD"
FLAGS="-std=c11 -Wall -Wextra -Werror -O2 -g -I."
status=0
summary=()
step() {   # name, command...
    local name=$1; shift
    "$@" >"$LOG/$name.log" 2>&1; local rc=$?
    local line
    line=$(grep -E '^([0-9]+ passed, [0-9]+ failed|SKIP \()' "$LOG/$name.log" | tail -n 1)
    [ "$rc" -ne 0 ] && status=1
    summary+=("$(printf '%-22s exit %-3s %s' "$name" "$rc" "$line")")
}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$LOG/gpus.txt"
command -v nvidia-smi >/dev/null && nvidia-smi topo -m > "$LOG/topo.txt" 2>&1
step build_decls $CC $FLAGS -I"$CUDA_INC" -o "$BUILD/test_cuda_decls" tests/test_cuda_decls.c -lm -lpthread -ldl
step build_multi $CC $FLAGS -o "$BUILD/test_multi" tests/test_multi.c -lm -lpthread -ldl
step build_cuda_multi $CC $FLAGS -o "$BUILD/test_cuda_multi" tests/test_cuda_multi.c -lm -lpthread -ldl
step build_bench $CC $FLAGS -o "$BUILD/bench_multi" bench/bench_multi.c -lm -lpthread -ldl
step test_cuda_decls "$BUILD/test_cuda_decls"
step test_multi "$BUILD/test_multi"
step test_cuda_multi "$BUILD/test_cuda_multi"
step test_cuda_multi_blk env TENSOR_FLAGS=launch_blocking=1 "$BUILD/test_cuda_multi"
step test_cuda_multi_1gpu env CUDA_VISIBLE_DEVICES=0 "$BUILD/test_cuda_multi"
step bench_multi "$BUILD/bench_multi"
echo
for r in "${summary[@]}"; do echo "$r"; done | tee "$LOG/summary.txt"
echo "logs in $LOG"
exit $status
