#!/bin/sh
# Builds every example (the C ones and cxx_tour.cpp) with the one command in
# its header (in parallel) and runs it briefly, checking the line each one
# exists to print.
# Usage: tests/test_examples.sh [outdir]      (make test-examples)
# TN_EXAMPLES_OPT replaces the command's -O2 (CI: -O0, a quarter of the build
# time; make test builds the implementation at -O2 with -Werror).
set -u
OUT=${1:-build/examples}
OPT=${TN_EXAMPLES_OPT:--O2}
mkdir -p "$OUT"
pass=0; fail=0
NAMES="tour check1 check2 borrow speed_test logistic_regression gpu_op rnn_scan scan_gemm mlp convnet denoising_autoencoder"
for name in $NAMES; do
    cc -std=c11 $OPT -I. "examples/$name.c" -o "$OUT/$name" -lm -lpthread -ldl 2> "$OUT/$name.build.log" &
done
c++ -std=c++17 $OPT -I. examples/cxx_tour.cpp -o "$OUT/cxx_tour" -lm -lpthread -ldl 2> "$OUT/cxx_tour.build.log" &
wait
check() {   # name args... -- expected text
    name=$1; shift
    args=""; while [ "$1" != "--" ]; do args="$args $1"; shift; done; shift
    want=$1
    if [ ! -x "$OUT/$name" ] || [ -s "$OUT/$name.build.log" ]; then
        echo "FAIL $name: does not build cleanly (see $OUT/$name.build.log)"; fail=$((fail + 1)); return
    fi
    if "$OUT/$name" $args > "$OUT/$name.log" 2>&1 && grep -q "$want" "$OUT/$name.log"; then pass=$((pass + 1))
    else echo "FAIL $name: exit status or missing '$want' (see $OUT/$name.log)"; fail=$((fail + 1)); fi
}
check tour -- "loss = "
check check1 20 -- "Used the [cg]pu"
check check2 20 -- "Used the [cg]pu"
check borrow 20 -- "TN_ERR_STALE"
check speed_test 2 -- "summary (ms a call)"
check logistic_regression 300 -- "agrees with the target on"
check gpu_op -- "largest difference from plain C"
check rnn_scan -- "^OK"
check scan_gemm 2 -- "^OK"
check mlp 3 -- "held-out accuracy after 3 epochs"
# with examples/digits.bin it trains; without, it says how to get the data and exits 0
check convnet 2 -- "test accuracy on the held-out split\|needs scikit-learn's digits"
check denoising_autoencoder 3 -- "held-out reconstruction cost"
check cxx_tour -- "sum of all rows = 5 "
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
