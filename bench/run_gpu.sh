#!/usr/bin/env bash
# Builds the benchmark with a plain cc -O2 and runs it on a GPU machine
# (H100/H200); the table is printed last. From the repository root:
#     bench/run_gpu.sh            # full run (about 1-2 minutes on an H100)
#     bench/run_gpu.sh --quick    # smoke run
# Extra arguments go to build/bench (--quick, --cpu-only, --gpu-only).
# TENSOR_FLAGS defaults to device=cuda, so a GPU that cannot be used says why.
# PEERS=1 then runs bench/peers.py (NumPy, PyTorch, torch.compile, JAX, CuPy,
# whichever the machine's python3 has) in the same run: PEERS_ARGS go to it.
set -u
cd "$(dirname "$0")/.."
CC=${CC:-cc}
BUILD=${BUILD:-build}
mkdir -p "$BUILD"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
$CC -std=c11 -Wall -Wextra -Werror -O2 -I. -rdynamic -o "$BUILD/bench" bench/bench.c -lm -lpthread -ldl \
    || { echo "BUILD FAILED: bench/bench.c"; exit 1; }
export TENSOR_FLAGS=${TENSOR_FLAGS:-device=cuda}
"$BUILD/bench" "$@"
rc=$?
if [ "${PEERS:-0}" = 1 ]; then
    echo "== peers (bench/peers.py) =="
    python3 bench/peers.py ${PEERS_ARGS:-} || rc=1
fi
exit $rc
