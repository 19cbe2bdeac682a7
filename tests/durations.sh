#!/bin/sh
# Prints how long each test program of a `make check` run took, the slowest
# first, and their sum: where a CI stage's minutes went.
# usage: tests/durations.sh [-n N] [TEST...]   (in the build directory,
#        after a serial `make check TESTS="TEST..."`; N: lines shown, default
#        12; no TEST: every result file under tests/)
#
# make check runs its tests one after another (no -j), so a test's time is
# its result file's (.trs, written when it ends) time less the previous
# test's; the first test's start is its log's birth time where the file
# system keeps one (else it is shown as "?").  Lines: "  SECONDS  TEST".
n=12
if [ "${1:-}" = "-n" ]; then n=$2; shift 2; fi
case "$n" in '' | *[!0-9]*) echo "durations: -n wants a count, not '$n'" >&2; exit 2 ;; esac
list=$(mktemp "${TMPDIR:-/tmp}/hcnn-durations.XXXXXX") || exit 1
trap 'rm -f "$list"' EXIT
# shellcheck disable=SC2046
[ $# -gt 0 ] || set -- $(find tests -name '*.trs' 2>/dev/null | sed 's/[.]trs$//' | sort)
for t in "$@"; do
    # (the same names as tests/summary.sh: "test.sh.trs" or "test.trs")
    trs="$t.trs" log="$t.log"
    if [ ! -f "$trs" ]; then trs="${t%.*}.trs" log="${t%.*}.log"; fi
    [ -f "$trs" ] || continue
    printf '%s %s %s\n' "$(stat -c %.3Y "$trs")" "$(stat -c %W "$log" 2>/dev/null || echo 0)" "$t" >>"$list"
done
[ -s "$list" ] || { echo "durations: no test results among the $# tests named"; exit 0; }
sort -n "$list" | awk -v n="$n" '
    { end = $1; if (NR == 1) start = ($2 > 0 && $2 <= end) ? $2 : -1; else start = prev
      d[NR] = (start < 0) ? -1 : end - start; name[NR] = $3; prev = end
      if (start >= 0) total += end - start }
    END { printf "test programs by time (s), slowest first; %d programs, %.0f s in all:\n", NR, total
          for (shown = 0; shown < n && shown < NR; shown++) {
              best = 0
              for (i = 1; i <= NR; i++) if (!(i in used) && (best == 0 || d[i] > d[best])) best = i
              used[best] = 1
              if (d[best] < 0) printf "  %7s  %s\n", "?", name[best]
              else printf "  %7.1f  %s\n", d[best], name[best] } }'
