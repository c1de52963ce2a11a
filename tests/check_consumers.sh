#!/usr/bin/env bash
# tensor.h as other projects take it, checked in a fresh folder under /tmp:
# make install and cmake --install write the same files (then make uninstall
# removes them); a small C project (tests/consumers/c) builds and runs through
# CMake's add_subdirectory, through find_package after the install (a version
# it cannot meet fails), and through pkg-config with a plain cc; a C++ program
# (tests/consumers/cxx) includes the headers as C++11 and C++17 and links the
# C project's implementation file, compiled as C. Every build is warning-free (-Wall -Wextra
# -Werror): the pkg-config and C++ builds with gcc, and with clang when it is
# installed; CMake's two ways with one of them, clang when installed (they
# do not depend on the compiler; each costs a compile of the implementation,
# which clang does in under half of gcc's time: 18 -> 8 s of CPU), else gcc.
# Each program checks its own result and prints OK. Prints "N passed, N
# failed" like the tests.
cd "$(dirname "$0")/.." || exit 1
root=$PWD
tmp=$(mktemp -d /tmp/tensor_consumers.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
WARN="-Wall -Wextra -Werror"
version=$(sed -n 's/^#define TENSOR_VERSION "\(.*\)"$/\1/p' tensor.h)

# step NAME COMMAND...: runs it with its output in $tmp/log/NAME and records
# "PASS NAME" or "FAIL NAME ..." in the results file $res (one per chain, so
# chains run in parallel and still report in order).
mkdir -p "$tmp/log"
step() {
    local name=$1; shift
    if "$@" > "$tmp/log/$name" 2>&1; then echo "PASS $name" >> "$res"; return 0; fi
    { echo "FAIL $name: $*"; tail -n 15 "$tmp/log/$name" | sed 's/^/    /'; } >> "$res"; return 1
}
# A program exits 0 and says OK; a command prints this text; one fails saying this.
runs_ok() { local out rc; out=$("$@"); rc=$?; printf '%s\n' "$out"; [ "$rc" -eq 0 ] && printf '%s\n' "$out" | grep -qx OK; }
prints() { local out; out=$("${@:2}" 2>&1); printf '%s\n' "$out"; printf '%s\n' "$out" | grep -q -- "$1"; }
fails_with() { local out rc; out=$("${@:2}" 2>&1); rc=$?; printf '%s\n' "$out"; [ "$rc" -ne 0 ] && printf '%s\n' "$out" | grep -q -- "$1"; }
cmake_build() { cmake -S "$1" -B "$2" "${@:3}" && cmake --build "$2"; }

# The installs (one chain, before the builds that use them).
res=$tmp/0.res
step "make install" make -s install PREFIX="$tmp/make"
step "cmake --install" sh -c "cmake -S . -B '$tmp/tensor-build' -DCMAKE_INSTALL_PREFIX='$tmp/cmake' && cmake --install '$tmp/tensor-build'"
step "both installs write the same files" diff -r "$tmp/make" "$tmp/cmake"
step "pkg-config version is tensor.h's" prints "^$version\$" env PKG_CONFIG_PATH="$tmp/make/share/pkgconfig" pkg-config --modversion tensor
step "find_package(tensor 9.0) fails" fails_with "tensorConfig.cmake, version: $version" cmake -S tests/consumers/c -B "$tmp/too-new" \
    -DCMAKE_PREFIX_PATH="$tmp/cmake" -DTENSOR_WANT=9.0

# consumer CC CXX [cmake]: the C++ program and pkg-config's way in, with one
# compiler pair, and CMake's two ways when the third argument says so.
consumer() {
    local cc=$1 cxx=$2 b=$tmp/$1 pc
    mkdir -p "$b"
    [ "${3:-}" = cmake ] && step "$cc: add_subdirectory" cmake_build tests/consumers/c "$b/sub" -DTENSOR_DIR="$root" -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$WARN" \
        && step "$cc: add_subdirectory program" runs_ok "$b/sub/consumer"
    [ "${3:-}" = cmake ] && step "$cc: find_package (CPU_ONLY)" cmake_build tests/consumers/c "$b/find" -DCMAKE_PREFIX_PATH="$tmp/cmake" -DTENSOR_WANT=0.1 \
            -DTENSOR_CPU_ONLY=ON -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="$WARN" \
        && step "$cc: find_package program" runs_ok "$b/find/consumer"
    pc="env PKG_CONFIG_PATH=$tmp/make/share/pkgconfig pkg-config tensor"
    step "$cc: pkg-config build" sh -c "$cc -std=c11 $WARN \$($pc --cflags) -c -o '$b/impl.o' tests/consumers/c/impl.c \
            && $cc -std=c11 $WARN \$($pc --cflags) -o '$b/consumer' tests/consumers/c/main.c '$b/impl.o' \$($pc --libs)" \
        && step "$cc: pkg-config program" runs_ok "$b/consumer" || return
    for std in c++11 c++17; do    # the C project's implementation file, compiled as C above
        step "$cxx -std=$std" sh -c "$cxx -std=$std $WARN \$($pc --cflags) -o '$b/cxx_$std' tests/consumers/cxx/main.cpp '$b/impl.o' \$($pc --libs)" \
            && step "$cxx -std=$std program" runs_ok "$b/cxx_$std"
    done
}
if [ -z "$(grep '^FAIL' "$res")" ]; then
    n=0; with_cmake=gcc
    command -v clang > /dev/null && command -v clang++ > /dev/null && with_cmake=clang
    for pair in "gcc g++" "clang clang++"; do
        set -- $pair
        command -v "$1" > /dev/null && command -v "$2" > /dev/null || continue
        [ "$1" = "$with_cmake" ] && set -- "$@" cmake
        n=$((n + 1)); res=$tmp/$n.res; consumer "$@" &
    done
    wait
    res=$tmp/0.res
    step "make uninstall removes every file" sh -c "make -s uninstall PREFIX='$tmp/make' && find '$tmp/make' -type f | { ! grep .; }"
fi

cat "$tmp"/*.res | grep -v '^PASS'
pass=$(cat "$tmp"/*.res | grep -c '^PASS'); fail=$(cat "$tmp"/*.res | grep -c '^FAIL')
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
