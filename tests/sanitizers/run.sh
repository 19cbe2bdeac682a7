#!/bin/sh
# Runs a command (a test of `make check`, or hcnn by hand) built with
# ./configure --enable-sanitizers, under AddressSanitizer, LeakSanitizer and
# UndefinedBehaviorSanitizer with the options below, and fails it if any
# process it started (hcnn, mpirun's ranks, a cmocka test) left a report.
#   tests/sanitizers/run.sh COMMAND [ARGS...]
# make check runs every test through it (LOG_COMPILER in Makefile.am).
#
# The reports go to files (log_path), one per process, not to stderr: tests
# capture hcnn's stderr and check its exit status (some expect a failure),
# so a report there could pass unseen.  Here any report file fails the
# command: its text is printed, then a cmocka-style failed case
# "sanitizers" and a failure count that includes it (tests/summary.sh reads
# the last count), and the exit status is the command's own, or 1.
#
# Options (the caller's ASAN_OPTIONS, LSAN_OPTIONS, UBSAN_OPTIONS are
# appended and win):
#   halt_on_error=1, abort_on_error=0, exitcode=99: stop at the first error
#     and exit 99 (automake's "hard error"), which no test expects of hcnn
#   detect_leaks=1 with suppressions=lsan.supp: leaks allocated by
#     third-party libraries only (see that file)
#   fast_unwind_on_malloc=0: the frame-pointer unwinder stops at libraries
#     built without frame pointers (OpenMPI's), so their leaks would show no
#     frame to suppress them by
#   intercept_tls_get_addr=0: GCC 12's LeakSanitizer mistakes a dynamic TLS
#     block of glibc >= 2.25 for an old-style one and crashes at exit
#     ("Tracer caught signal 11"; google/sanitizers#1322)
#   print_suppressions=0: no file for runs that only hit suppressions
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -eq 0 ]; then
    echo "usage: tests/sanitizers/run.sh COMMAND [ARGS...]" >&2
    exit 2
fi
reports=$(mktemp -d "${TMPDIR:-/tmp}/hcnn-sanitizers.XXXXXX") || exit 99
common="abort_on_error=0:exitcode=99:print_suppressions=0:log_path=$reports/report"
ASAN_OPTIONS="$common:halt_on_error=1:detect_leaks=1:fast_unwind_on_malloc=0:intercept_tls_get_addr=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
LSAN_OPTIONS="$common:suppressions=$here/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
UBSAN_OPTIONS="$common:halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS

# its standard output passes through and is kept, to count its failed cases
{ "$@"; echo $? >"$reports/rc"; } | tee "$reports/out"
rc=$(cat "$reports/rc" 2>/dev/null || echo 99)
failed=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) test(s), listed below:.*/\1/p' "$reports/out" | tail -n 1)

found=0
for f in "$reports"/report.*; do
    [ -s "$f" ] || continue
    found=$((found + 1))
    echo "# sanitizer report ($f):"
    sed 's/^/#   /' "$f"
done
rm -rf "$reports"
if [ "$found" -gt 0 ]; then
    echo "[ RUN      ] sanitizers"
    echo "# $found process(es) of '$*' left a sanitizer report (above)"
    echo "[  FAILED  ] sanitizers"
    echo "[  FAILED  ] $((${failed:-0} + 1)) test(s), listed below:"
    echo "[  FAILED  ] sanitizers"
    [ "$rc" -eq 0 ] && rc=1
fi
exit "$rc"
