#!/usr/bin/env bash
# Runs every test binary given and prints one total line "N passed, N failed".
total_p=0; total_f=0; status=0
for t in "$@"; do
    out=$("$t" 2>&1); rc=$?
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then
        printf '%s\n' "$out" | tail -n 20
        echo "CRASH $t (exit $rc)"; total_f=$((total_f + 1)); status=1; continue
    fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    [ "$rc" -ne 0 ] || [ "$f" -ne 0 ] && { printf '%s\n' "$out" | grep -E '^(FAIL|CRASH)' | head -n 40; status=1; }
    [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    printf '%-32s %s\n' "$(basename "$t")" "$line"
    total_p=$((total_p + p)); total_f=$((total_f + f))
done
echo "$total_p passed, $total_f failed"
exit $status
