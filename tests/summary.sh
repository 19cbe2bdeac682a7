#!/bin/sh
# Adds up the test cases of a `make check` run from the test logs and prints
# the closing line "N passed, N failed[, N skipped]".  Exits 1 if any case
# failed, or if a test program failed without reporting a failed case (a
# crash or timeout counts as one failed case), or did not run at all.
# usage: tests/summary.sh TEST...   (run in the build directory)
passed=0 failed=0 skipped=0
for t in "$@"; do
    # automake names the logs of scripts without a registered extension
    # "test.sh.log", those of programs "test.log"
    log="$t.log" trs="$t.trs"
    if [ ! -f "$log" ]; then log="${t%.*}.log" trs="${t%.*}.trs"; fi
    if [ ! -f "$log" ] || [ ! -f "$trs" ]; then
        echo "summary: $t did not run (no $log)"
        failed=$((failed + 1))
        continue
    fi
    p=$(grep -c '^\[       OK \] ' "$log")
    f=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s), listed below:.*/\1/p' "$log" | tail -n 1)
    s=$(grep '^\[  SKIPPED \] ' "$log" | grep -vc 'test(s)')
    f=${f:-0}
    result=$(sed -n 's/^:test-result: //p' "$trs" | head -n 1)
    case "$result" in
    FAIL | ERROR | XPASS)
        if [ "$f" -eq 0 ]; then
            echo "summary: $t ended with $result without a failed case (crash or timeout?): see $log"
            f=1
        fi ;;
    esac
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
done
if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
