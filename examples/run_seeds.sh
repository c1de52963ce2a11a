#!/bin/sh
# Builds the seed programs, each with the one command in its header, and runs
# them as the seed documents do (1000 calls, 100 for the 1000x1000 products,
# 10000 training steps), on the CPU and then, with a GPU, on it.
# Usage: sh examples/run_seeds.sh [outdir]       (from the repository root)
#        DEVICES=cuda sh examples/run_seeds.sh   (the GPU runs only)
set -u
OUT=${1:-build/seeds}
DEVICES=${DEVICES:-"cpu cuda"}
mkdir -p "$OUT"
for name in check1 check2 borrow speed_test logistic_regression scan_gemm; do
    cc -std=c11 -O2 -I. "examples/$name.c" -o "$OUT/$name" -lm -lpthread -ldl || exit 1
done
for dev in $DEVICES; do
    for cmd in "check1" "check2" "borrow" "speed_test" "logistic_regression 10000" "scan_gemm"; do
        echo "\$ TENSOR_FLAGS=device=$dev ./$cmd"
        TENSOR_FLAGS=device=$dev "$OUT"/$cmd 2>&1
        echo
    done
done
