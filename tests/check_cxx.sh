#!/usr/bin/env bash
# The implementation compiles as C++: one translation unit with
# TENSOR_IMPLEMENTATION and the three headers (and one with tensor.h alone),
# C++11 and C++17, g++ and clang++ where installed, -Wall -Wextra -Werror,
# syntax only (tests/test_cxx_impl.cpp builds and runs it: -std=c++17 with
# the three headers, with the compiler TN_CXX_IMPL names (make test: clang++
# where installed, else g++), so that one is left out here). Prints
# "N passed, N failed" like the tests.
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d /tmp/tensor_cxx.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
printf '#define TENSOR_IMPLEMENTATION\n#include "tensor.h"\n#include "tensor_ops.h"\n#include "tensor_cuda.h"\n' > "$tmp/all.cpp"
printf '#define TENSOR_IMPLEMENTATION\n#include "tensor.h"\n' > "$tmp/cpu.cpp"
n=0
for cxx in g++ clang++; do
    command -v "$cxx" > /dev/null || { echo "SKIP $cxx (not installed)"; continue; }
    for std in c++11 c++17; do
        for tu in all cpu; do
            [ "$cxx $std $tu" = "${TN_CXX_IMPL:-g++} c++17 all" ] && continue
            n=$((n + 1))
            ( "$cxx" -std=$std -Wall -Wextra -Werror -fsyntax-only -I. "$tmp/$tu.cpp" > "$tmp/$n.log" 2>&1
              echo "$? $cxx -std=$std ($tu)" > "$tmp/$n.rc" ) &
        done
    done
done
wait
pass=0; fail=0
for i in $(seq 1 $n); do
    read -r rc what < "$tmp/$i.rc"
    if [ "$rc" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $what"; head -n 15 "$tmp/$i.log" | sed 's/^/    /'; fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
