#!/usr/bin/env bash
# The scripts that read a make check run's results: tests/summary.sh, whose
# closing line "N passed, N failed" and exit status are CI's verdict, and
# tests/durations.sh, CI's "slowest tests" list.  Both read the .log and
# .trs files automake writes; here they read ones made up to cover each
# way a test program can end.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
SUMMARY="$HCNN_SRCDIR/tests/summary.sh"
DURATIONS="$HCNN_SRCDIR/tests/durations.sh"

# result DIR NAME RESULT LOG-LINES...: a test's .log and .trs as automake
# writes them (NAME "x.sh": a script's "x.sh.log"; "x": a program's "x.log")
result() {
    local dir=$1 name=$2 res=$3
    shift 3
    printf '%s\n' "$@" >"$dir/$name.log"
    printf ':test-result: %s\n:global-test-result: %s\n' "$res" "$res" >"$dir/$name.trs"
}

mkdir -p "$WORK/ok" "$WORK/mixed"
result "$WORK/ok" a.sh PASS '[ RUN      ] one' '[       OK ] one (0 s)' '[       OK ] two (3 s)'
result "$WORK/ok" b PASS '[       OK ] c1' '[  SKIPPED ] c2' '[  SKIPPED ] 1 test(s).' '[  PASSED  ] 1 test(s).'

case_begin summary_all_passed
out=$(cd "$WORK/ok" && sh "$SUMMARY" a.sh b)
rc=$?
if [ $rc -eq 0 ] && [ "$out" = "3 passed, 0 failed, 1 skipped" ]; then case_ok
else case_fail "exit $rc: '$out'"; fi

# failed cases counted from the runner's "N test(s), listed below" line; a
# program that crashed (ERROR) without a failed case counts one; one with
# no log did not run and counts one
result "$WORK/mixed" a.sh PASS '[       OK ] one' '[       OK ] two'
result "$WORK/mixed" f FAIL '[       OK ] x' '[  FAILED  ] y' '[  FAILED  ] z' \
    '[  FAILED  ] 2 test(s), listed below:' '[  FAILED  ] y' '[  FAILED  ] z'
result "$WORK/mixed" crash.sh ERROR '[ RUN      ] one' '[       OK ] one' '[ RUN      ] two'
case_begin summary_failures_crashes_and_missing
out=$(cd "$WORK/mixed" && sh "$SUMMARY" a.sh f crash.sh gone.sh)
rc=$?
if [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | tail -n 1)" = "4 passed, 4 failed" ] &&
    printf '%s\n' "$out" | grep -q '^summary: crash.sh ended with ERROR without a failed case' &&
    printf '%s\n' "$out" | grep -q '^summary: gone.sh did not run'; then case_ok
else case_fail "exit $rc: '$out'"; fi

# a test that passed after reporting a failed case still fails the run
case_begin summary_failed_case_in_passing_program
result "$WORK/mixed" odd.sh PASS '[       OK ] one' '[  FAILED  ] 1 test(s), listed below:' '[  FAILED  ] two'
out=$(cd "$WORK/mixed" && sh "$SUMMARY" odd.sh)
rc=$?
if [ $rc -eq 1 ] && [ "$out" = "1 passed, 1 failed" ]; then case_ok; else case_fail "exit $rc: '$out'"; fi

# under the sanitizers (tests/sanitizers/run.sh) a report appends a case
# "sanitizers" and a second count that includes it: the last count holds;
# XPASS without a failed case counts one, as ERROR does
case_begin summary_sanitizer_count_and_xpass
result "$WORK/mixed" san.sh FAIL '[       OK ] one' '[  FAILED  ] two' '[  FAILED  ] 1 test(s), listed below:' \
    '[  FAILED  ] two' '[ RUN      ] sanitizers' '[  FAILED  ] sanitizers' \
    '[  FAILED  ] 2 test(s), listed below:' '[  FAILED  ] sanitizers'
result "$WORK/mixed" xpass.sh XPASS '[       OK ] one'
out=$(cd "$WORK/mixed" && sh "$SUMMARY" san.sh xpass.sh)
rc=$?
if [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | tail -n 1)" = "2 passed, 3 failed" ] &&
    printf '%s\n' "$out" | grep -q '^summary: xpass.sh ended with XPASS without a failed case'; then case_ok
else case_fail "exit $rc: '$out'"; fi

# durations: a test's time is its .trs's time less the previous one's (make
# check runs them one after another): y 30 s and z 5 s here, the slowest
# first
mkdir -p "$WORK/times/tests"
for t in x y z; do result "$WORK/times/tests" "$t.sh" PASS '[       OK ] c'; done
t0=$(date +%s)
# (the first one's start is its log's birth time, at or before t0, or "?"
# where the file system keeps none: x's 2 s or more, under y's 30 s unless
# the machine stalled for half a minute)
touch -d "@$((t0 - 100))" "$WORK/times/tests/x.sh.log"
touch -d "@$((t0 + 2))" "$WORK/times/tests/x.sh.trs"
touch -d "@$((t0 + 7))" "$WORK/times/tests/z.sh.trs"
touch -d "@$((t0 + 37))" "$WORK/times/tests/y.sh.trs"
case_begin durations_slowest_first
out=$(cd "$WORK/times" && sh "$DURATIONS")
rc=$?
lines=$(printf '%s\n' "$out" | grep -n '^ *[0-9?]' | grep -v 'x.sh')
# (the total: 35 s and x's, 2 s or more where the file system keeps birth
# times; x's log's modification time, set 100 s back, is not its start:
# taken for it, the total would pass 100 s)
total=$(printf '%s\n' "$out" | sed -n 's/^test programs by time (s), slowest first; 3 programs, \([0-9]*\) s in all:$/\1/p')
if [ $rc -eq 0 ] && [ -n "$total" ] && [ "$total" -ge 35 ] && [ "$total" -lt 100 ] &&
    [ "$(printf '%s\n' "$lines" | sed -n 1p | awk '{print $2, $3}')" = "30.0 tests/y.sh" ] &&
    [ "$(printf '%s\n' "$lines" | sed -n 2p | awk '{print $2, $3}')" = "5.0 tests/z.sh" ]; then case_ok
else case_fail "exit $rc: '$out'"; fi

case_begin durations_count_and_names
out=$(cd "$WORK/times" && sh "$DURATIONS" -n 1 tests/y.sh tests/z.sh)
rc=$?
if [ $rc -eq 0 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 2 ] &&
    printf '%s\n' "$out" | grep -q '^test programs by time (s), slowest first; 2 programs' &&
    printf '%s\n' "$out" | tail -n 1 | grep -q 'tests/y.sh$'; then case_ok
else case_fail "exit $rc: '$out'"; fi

case_begin durations_bad_count
out=$(cd "$WORK/times" && sh "$DURATIONS" -n many 2>&1)
rc=$?
if [ $rc -eq 2 ] && [ "$out" = "durations: -n wants a count, not 'many'" ]; then case_ok
else case_fail "exit $rc: '$out'"; fi

finish
