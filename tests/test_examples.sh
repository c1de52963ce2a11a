#!/bin/sh
# Builds every example (the C ones and cxx_tour.cpp) and runs it briefly,
# checking the line each one exists to print.
# Usage: tests/test_examples.sh [outdir]      (make test-examples)
# The one command in each example's header (cc -std=c11 -O2 -I. examples/x.c
# -o x -lm -lpthread -ldl) compiles the implementation into the program:
# CI checks that command in full for tour.c, and for every example its
# compile (the same command with -fsyntax-only: every warning fails), then
# links the examples it runs to one compiled implementation (the same code,
# compiled once instead of thirteen times; cxx_tour.cpp links it compiled
# as C, and make test builds and runs it compiled as C++: test_cxx_impl).
# TN_EXAMPLES_OPT replaces the command's -O2 (CI: -O0, a quarter of the build
# time; make test builds the implementation at -O2 with -Werror).
set -u
OUT=${1:-build/examples}
OPT=${TN_EXAMPLES_OPT:--O2}
mkdir -p "$OUT"
pass=0; fail=0
NAMES="tour check1 check2 borrow speed_test logistic_regression gpu_op rnn_scan scan_gemm mlp convnet denoising_autoencoder"
DONE="-DTENSOR_IMPLEMENTATION_DONE -DTENSOR_CUDA_IMPLEMENTATION_DONE"
cc -std=c11 $OPT -I. -DTENSOR_IMPLEMENTATION -x c -c tensor_cuda.h -o "$OUT/tensor_impl.o" 2> "$OUT/tensor_impl.build.log" &
cc -std=c11 $OPT -I. examples/tour.c -o "$OUT/tour.full" -lm -lpthread -ldl 2> "$OUT/tour.full.build.log" &
c++ -std=c++17 $OPT -fsyntax-only -I. examples/cxx_tour.cpp 2> "$OUT/cxx_tour.syntax.log" &
for name in $NAMES; do
    cc -std=c11 $OPT -fsyntax-only -I. "examples/$name.c" 2> "$OUT/$name.syntax.log" &
done
wait
for name in $NAMES; do
    { [ -s "$OUT/tensor_impl.build.log" ] && cp "$OUT/tensor_impl.build.log" "$OUT/$name.build.log"; } ||
        cc -std=c11 $OPT -I. $DONE "examples/$name.c" "$OUT/tensor_impl.o" -o "$OUT/$name" -lm -lpthread -ldl \
            2> "$OUT/$name.build.log" &
done
{ [ -s "$OUT/tensor_impl.build.log" ] && cp "$OUT/tensor_impl.build.log" "$OUT/cxx_tour.build.log"; } ||
    c++ -std=c++17 $OPT -I. $DONE examples/cxx_tour.cpp "$OUT/tensor_impl.o" -o "$OUT/cxx_tour" -lm -lpthread -ldl \
        2> "$OUT/cxx_tour.build.log" &
wait
# the one command in full: tour.c's program runs too
if [ -x "$OUT/tour.full" ] && [ ! -s "$OUT/tour.full.build.log" ] && "$OUT/tour.full" 2 > "$OUT/tour.full.log" 2>&1 \
        && grep -q "loss = " "$OUT/tour.full.log"; then pass=$((pass + 1))
else echo "FAIL tour: its one-command build does not build cleanly or run (see $OUT/tour.full.build.log, $OUT/tour.full.log)"; fail=$((fail + 1)); fi
for name in $NAMES cxx_tour; do
    if [ -s "$OUT/$name.syntax.log" ]; then
        echo "FAIL $name: its one command does not compile cleanly (see $OUT/$name.syntax.log)"; fail=$((fail + 1))
    else pass=$((pass + 1)); fi
done
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
check tour 20 -- "loss = "
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
