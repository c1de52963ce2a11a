#!/usr/bin/env bash
# The source's house rules, checked. Section banners carry greppable anchors
# (a header line opening "/* >>name"): each anchor names one section across
# the three headers, and every ">>name" that a comment, test or document
# mentions is one of them. Prints "N passed, N failed" like the tests.
cd "$(dirname "$0")/.." || exit 1
HEADERS="tensor.h tensor_ops.h $(ls tensor_cuda.h 2>/dev/null)"
OTHERS=$(ls README.md docs/*.md tests/*.c tests/*.h tests/*.cpp tests/gpu/* examples/*.c bench/*.c 2>/dev/null)
pass=0; fail=0
check() { if [ -z "$2" ]; then pass=$((pass + 1)); else printf '%s\n' "$2" | sed "s/^/FAIL $1: /"; fail=$((fail + 1)); fi; }

anchors=$(grep -ho '^/\* >>[a-z_0-9]*' $HEADERS | sed 's|^/\* >>||' | sort)
check "anchor on more than one banner" "$(printf '%s\n' "$anchors" | uniq -d | sed 's/^/>>/')"

# A mention is ">>name" after a space, "(" or "`"; a line that opens with
# "/* >>name" is a banner (a test's own sections included), not a mention.
mentions=$(awk '{ s = $0; sub(/^\/\* >>[a-z_0-9]+/, "", s)
                  while (match(s, /(^|[ (`])>>[a-z_][a-z_0-9]*/)) {
                      m = substr(s, RSTART, RLENGTH); sub(/^.*>>/, "", m)
                      print m " " FILENAME ":" FNR; s = substr(s, RSTART + RLENGTH) } }' $HEADERS $OTHERS)
check "mention of an anchor no banner has" "$(printf '%s\n' "$mentions" | awk 'NR == FNR { a[$1] = 1; next } $1 != "" && !($1 in a) { print ">>" $1 " (" $2 ")" }' <(printf '%s\n' "$anchors") -)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
