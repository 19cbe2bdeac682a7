#!/usr/bin/env bash
# Build the fuzz targets (build.sh), replay the regression inputs of each
# (tests/fuzz/regressions/<target>/: inputs that once crashed), then fuzz
# each target for SECONDS_PER_TARGET seconds, one after another, from its
# seed corpus (tests/fuzz/corpus/<target>/) with its dictionary.  Prints per
# target the executions, crashes, timeouts, leaks, out-of-memory, coverage
# and wall time, and a result line in the test style ("[       OK ] fuzz_idx"
# / "[  FAILED  ] fuzz_idx"); the last line is "N passed, N failed".  Exits
# 1 if any target crashed, hung, leaked, ran out of memory or failed a
# regression; 2 if the targets cannot be built.
#
# usage: tests/fuzz/run.sh [SECONDS_PER_TARGET [TARGET...]]   (default 10 s, all)
# environment: HCNN_FUZZ_RUNS (stop each target after this many executions
#   instead, e.g. 1000000 for the long run), HCNN_FUZZ_ARTIFACTS (where
#   crashing inputs go; default $HCNN_BUILDDIR/tests/fuzz/artifacts),
#   HCNN_FUZZ_KEEP_CORPUS (a directory: the grown corpora are kept there),
#   and build.sh's CLANG, HCNN_BUILDDIR, HCNN_FUZZ_BUILD, JOBS.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
builddir=$(cd "${HCNN_BUILDDIR:-$src}" && pwd)
seconds=${1:-10}
[ $# -gt 0 ] && shift
case "$seconds" in '' | *[!0-9]*) echo "usage: $0 [SECONDS_PER_TARGET [TARGET...]]" >&2; exit 2 ;; esac
all=(idx cifar config ckpt npy import)
targets=()
for t in "$@"; do targets+=("${t#fuzz_}"); done   # "idx" or "fuzz_idx"
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

# -max_len per target: a little over the largest seed; the YAML parse is
# quadratic in the number of keys, so config stays at 4 KiB
max_len() {
    case $1 in
    idx) echo 4096 ;; cifar) echo 9300 ;; config) echo 4096 ;;
    ckpt) echo 4096 ;; npy) echo 8192 ;; import) echo 2048 ;; *) echo 4096 ;;
    esac
}

bindir=$(bash "$here/build.sh" "${targets[@]}" | tail -n 1) || { echo "fuzz: build failed" >&2; exit 2; }
[ -d "$bindir" ] || { echo "fuzz: build failed" >&2; exit 2; }
artifacts=${HCNN_FUZZ_ARTIFACTS:-$builddir/tests/fuzz/artifacts}
mkdir -p "$artifacts"
work=$(mktemp -d "${TMPDIR:-/tmp}/hcnn-fuzz-run.XXXXXX")
# the targets' input files: on a tmpfs when there is one, removed at the end
# even when a target aborted (its own clean-up does not run then)
files=$work
if [ -z "${HCNN_FUZZ_TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    files=$(mktemp -d /dev/shm/hcnn-fuzz-run.XXXXXX) || files=$work
fi
export HCNN_FUZZ_TMPDIR=${HCNN_FUZZ_TMPDIR:-$files}
trap 'rm -rf "$work" "$files"' EXIT
# single-threaded: OpenMP and OpenBLAS would start threads for nothing here
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

stat_of() { sed -n "s/^stat::$1: *//p" "$2" | tail -n 1; }
passed=0 failed=0
for t in "${targets[@]}"; do
    name=fuzz_$t
    bin=$bindir/$name
    echo "[ RUN      ] $name"
    ok=1
    # 1. regressions: libFuzzer runs the files given as arguments once each
    reg=$here/regressions/$t
    nreg=0
    [ -d "$reg" ] && nreg=$(find "$reg" -type f | wc -l)
    if [ "$nreg" -gt 0 ]; then
        if "$bin" -close_fd_mask=3 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
               "$reg"/* > "$work/$t.replay.log" 2>&1; then
            echo "  regressions: $nreg inputs replayed, no failure"
        else
            echo "  regressions: FAILED replaying $reg:"
            tail -n 30 "$work/$t.replay.log" | sed 's/^/    /'
            ok=0
        fi
    fi
    # 2. fuzzing from the seeds (new inputs go to a scratch corpus)
    mkdir -p "$work/corpus-$t"
    dict=()
    [ -f "$here/dict/$t.dict" ] && dict=("-dict=$here/dict/$t.dict")
    limit=(-max_total_time="$seconds")
    [ -n "${HCNN_FUZZ_RUNS:-}" ] && limit=(-runs="$HCNN_FUZZ_RUNS")
    log=$work/$t.log
    start=$(date +%s.%N)
    "$bin" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
        -max_len="$(max_len "$t")" -print_final_stats=1 -close_fd_mask=3 \
        -artifact_prefix="$artifacts/$name-" "${dict[@]}" \
        "$work/corpus-$t" "$here/corpus/$t" > "$log" 2>&1
    rc=$?
    wall=$(echo "$start $(date +%s.%N)" | awk '{printf "%.1f", $2 - $1}')
    execs=$(stat_of number_of_executed_units "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | sed 's/cov: //')
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | sed 's/ft: //')
    # libFuzzer stops at the first failure and names its input by kind
    crashes=$(grep -c 'Test unit written to .*-crash-' "$log")
    timeouts=$(grep -c 'Test unit written to .*-timeout-' "$log")
    leaks=$(grep -c 'Test unit written to .*-leak-' "$log")
    ooms=$(grep -c 'Test unit written to .*-oom-' "$log")
    echo "  executions ${execs:-?}, crashes $crashes, timeouts $timeouts, leaks $leaks," \
         "out-of-memory $ooms, cov ${cov:-?} (ft ${ft:-?}), wall ${wall}s, exit $rc"
    if [ "$rc" -ne 0 ] || [ "$crashes$timeouts$leaks$ooms" != 0000 ]; then
        ok=0
        echo "  libFuzzer's report (log tail):"
        grep -v '^#[0-9]' "$log" | tail -n 40 | sed 's/^/    /'
        echo "  crashing inputs: $artifacts/$name-*; reproduce: $bin <input>"
    fi
    if [ -n "${HCNN_FUZZ_KEEP_CORPUS:-}" ]; then
        mkdir -p "$HCNN_FUZZ_KEEP_CORPUS/$t" && cp "$work/corpus-$t"/* "$HCNN_FUZZ_KEEP_CORPUS/$t"/ 2>/dev/null
    fi
    if [ "$ok" -eq 1 ]; then
        echo "[       OK ] $name"
        passed=$((passed + 1))
    else
        echo "[  FAILED  ] $name"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
