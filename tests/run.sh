#!/usr/bin/env bash
# Runs every test binary given and prints one total line "N passed, N failed"
# (the line CI reads). Before it, when anything was skipped, one line
# "N skipped (...)" naming what: a binary that printed "SKIP (reason)" and
# exited 0 without counts (no GPU, no NVRTC), and tests a binary reported
# with "N skipped" beside its counts. A skip never counts as a pass.
# The binaries run in parallel (TN_TEST_JOBS at a time, default one per core),
# the slowest first (SLOW below, so none starts last and runs alone); each
# one's report is printed in the order given, with the seconds it ran (its
# wall time beside the others running at once).
jobs=${TN_TEST_JOBS:-$(nproc 2>/dev/null || echo 2)}
SLOW=" test_nvrtc_reduce test_nvrtc test_rewrite_random test_fuzz test_graph test_linalg "
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
order=()
i=0; for t in "$@"; do case "$SLOW" in *" $(basename "$t") "*) order+=("$i");; esac; i=$((i + 1)); done
i=0; for t in "$@"; do case "$SLOW" in *" $(basename "$t") "*) ;; *) order+=("$i");; esac; i=$((i + 1)); done
args=("$@")
for i in "${order[@]}"; do
    while [ "$(jobs -pr | wc -l)" -ge "$jobs" ]; do wait -n 2>/dev/null || true; done
    ( t0=$(date +%s.%N); "${args[$i]}" > "$tmp/$i.out" 2>&1; echo $? > "$tmp/$i.rc"
      echo "$t0 $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }' > "$tmp/$i.time" ) &
done
wait
total_p=0; total_f=0; total_s=0; skipped=(); status=0
i=0
for t in "$@"; do
    name=$(basename "$t")
    out=$(cat "$tmp/$i.out"); rc=$(cat "$tmp/$i.rc" 2>/dev/null || echo 1); secs=$(cat "$tmp/$i.time" 2>/dev/null)
    i=$((i + 1))
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    skip=$(printf '%s\n' "$out" | grep -E '^SKIP \(' | head -n 1)
    if [ -z "$line" ] && [ -n "$skip" ] && [ "$rc" -eq 0 ]; then
        printf '%-32s %s\n' "$name" "$skip"
        total_s=$((total_s + 1)); skipped+=("$name"); continue
    fi
    if [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 20
        echo "CRASH $t (exit $rc)"; total_f=$((total_f + 1)); status=1; continue
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    s=$(printf '%s\n' "$out" | grep -E '^[0-9]+ skipped$' | tail -n 1); s=${s%% skipped}; s=${s:-0}
    [ "$rc" -ne 0 ] || [ "$f" -ne 0 ] && { printf '%s\n' "$out" | awk '/^(FAIL|CRASH)/ { keep = 1; print; next } keep && /^    / { print; next } { keep = 0 }' | head -n 60; status=1; }
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    printf '%-32s %s%s  (%s s)\n' "$name" "$line" "$([ "$s" -gt 0 ] && echo ", $s skipped")" "$secs"
    [ "$s" -gt 0 ] && { printf '%s\n' "$out" | grep -E '^SKIP [a-z_0-9]+ \(' | sed 's/^/    /'; skipped+=("$name: $s test$([ "$s" -gt 1 ] && echo s)"); }
    total_p=$((total_p + p)); total_f=$((total_f + f)); total_s=$((total_s + s))
done
if [ "$total_s" -gt 0 ]; then
    list=$(printf '%s, ' "${skipped[@]}"); echo "$total_s skipped (${list%, })"
fi
echo "$total_p passed, $total_f failed"
exit $status
