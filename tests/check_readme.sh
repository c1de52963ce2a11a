#!/usr/bin/env bash
# README's programs as a reader pastes them: the fenced block after each line
# "<!-- test: NAME.c -->" or "<!-- test: NAME.cpp -->" is written to NAME,
# built with one command (cc -std=c11 or c++ -std=c++17; -Wall -Wextra
# -Werror; -O0: what is checked is that it builds and runs) and run; it must
# exit 0 and print something. Prints "N passed, N failed" like the tests.
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
for f in $names; do
    ( case "$f" in
          *.c)   cc -std=c11 -Wall -Wextra -Werror -O0 -I. -o "$tmp/$f.bin" "$tmp/$f" -lm -lpthread -ldl ;;
          *.cpp) c++ -std=c++17 -Wall -Wextra -Werror -O0 -I. -o "$tmp/$f.bin" "$tmp/$f" -lm -lpthread -ldl ;;
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
