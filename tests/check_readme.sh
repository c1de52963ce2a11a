#!/usr/bin/env bash
# README's programs as a reader pastes them: the fenced block after each line
# "<!-- test: NAME.c -->" or "<!-- test: NAME.cpp -->" is written to NAME,
# built with one command (cc -std=c11 or c++ -std=c++17; -Wall -Wextra
# -Werror; -O0: what is checked is that it builds and runs) and run; it must
# exit 0 and print something. Prints "N passed, N failed" like the tests.
# With TN_IMPL_OBJ (make test: build/tensor_cpu.o, the implementation
# compiled once), the command compiles with -fsyntax-only, and the program
# that runs is the same file linked to that object instead of compiling the
# implementation itself (a program's TENSOR_IMPLEMENTATION is then skipped).
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d /tmp/tensor_readme.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
# every marked block, to its file
awk -v dir="$tmp" '
    /^<!-- test: [A-Za-z0-9_]+\.(c|cpp) -->$/ { name = $3; want = 1; next }
    want && /^```/ { if (inblock) { inblock = 0; want = 0; close(dir "/" name) } else inblock = 1; next }
    inblock { print > (dir "/" name) }
' README.md
names=$(cd "$tmp" && ls *.c *.cpp 2>/dev/null)
pass=0; fail=0
[ -n "$names" ] || { echo "FAIL README.md: no <!-- test: ... --> blocks found"; echo "0 passed, 1 failed"; exit 1; }
obj=${TN_IMPL_OBJ:-}
[ -z "$obj" ] || [ -f "$obj" ] || { echo "FAIL TN_IMPL_OBJ=$obj: no such file"; echo "0 passed, 1 failed"; exit 1; }
build() {   # compiler std file: the one command, or its compile and a link to $obj
    if [ -z "$obj" ]; then "$1" -std="$2" -Wall -Wextra -Werror -O0 -I. -o "$tmp/$3.bin" "$tmp/$3" -lm -lpthread -ldl
    else "$1" -std="$2" -Wall -Wextra -Werror -O0 -I. -fsyntax-only "$tmp/$3" &&
         "$1" -std="$2" -Wall -Wextra -Werror -O0 -I. -DTENSOR_IMPLEMENTATION_DONE -DTENSOR_CUDA_IMPLEMENTATION_DONE \
             -o "$tmp/$3.bin" "$tmp/$3" "$obj" -lm -lpthread -ldl; fi
}
for f in $names; do
    ( case "$f" in
          *.c)   build cc c11 "$f" ;;
          *.cpp) build c++ c++17 "$f" ;;
      esac > "$tmp/$f.build" 2>&1 && TENSOR_FLAGS=device=cpu "$tmp/$f.bin" > "$tmp/$f.out" 2>&1
      echo $? > "$tmp/$f.rc" ) &
done
wait
for f in $names; do
    if [ "$(cat "$tmp/$f.rc")" = 0 ] && [ -s "$tmp/$f.out" ]; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "FAIL README.md's $f: does not build or run"; cat "$tmp/$f.build" "$tmp/$f.out" 2>/dev/null | head -n 15 | sed 's/^/    /'; fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
