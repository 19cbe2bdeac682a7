# Shared helpers for the shell tests: cmocka-style result lines so that
# tests/summary.sh counts shell test cases like C ones.
#   case_begin NAME; ...; case_ok | case_fail "why"
# Run with HCNN (the program), HCNN_SRCDIR and HCNN_BUILDDIR set (make check
# sets them; by hand they default to the current directory).
: "${HCNN_SRCDIR:=$(pwd)}"
: "${HCNN_BUILDDIR:=$(pwd)}"
: "${HCNN:=$HCNN_BUILDDIR/hcnn}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
T_PASSED=0
T_FAILED=0
T_SKIPPED=0
T_FAILED_NAMES=""
T_NAME=""
WORK=$(mktemp -d "${TMPDIR:-/tmp}/hcnn-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# (each result line ends with the case's whole seconds, "(12 s)": which
# cases a GPU check's bounded minutes go to, 2026-11-30)
case_begin() { T_NAME="$1"; T_START=$SECONDS; echo "[ RUN      ] $T_NAME"; }
case_took() { echo "($((SECONDS - ${T_START:-$SECONDS})) s)"; }
case_ok() { echo "[       OK ] $T_NAME $(case_took)"; T_PASSED=$((T_PASSED + 1)); }
case_fail() {
    echo "# $T_NAME: $*"
    echo "[  FAILED  ] $T_NAME $(case_took)"
    T_FAILED=$((T_FAILED + 1))
    T_FAILED_NAMES="$T_FAILED_NAMES $T_NAME"
}
case_skip() { echo "# $T_NAME: $*"; echo "[  SKIPPED ] $T_NAME"; T_SKIPPED=$((T_SKIPPED + 1)); }

# expect_fail NAME PATTERN CMD...: CMD must exit non-zero (not by a signal)
# and print PATTERN (grep -E) on stderr.
expect_fail() {
    local name="$1" pattern="$2"
    shift 2
    case_begin "$name"
    "$@" >"$WORK/out" 2>"$WORK/err"
    local rc=$?
    if [ $rc -eq 0 ]; then
        case_fail "expected a failure, got exit 0"
    elif [ $rc -ge 124 ]; then
        case_fail "exit status $rc (crash, signal or timeout)"; sed 's/^/#   /' "$WORK/err"
    elif ! grep -qE -- "$pattern" "$WORK/err"; then
        case_fail "stderr does not match '$pattern':"; sed 's/^/#   /' "$WORK/err"
    else
        case_ok
    fi
}

# asan_build: hcnn was built with --enable-sanitizers (it links libasan)
asan_build() { ldd "$HCNN" 2>/dev/null | grep -q libasan; }

# same_bits A B: the checkpoints A and B hold the same tensors, bit for bit
# (their META differs: each run has its own identity and write time)
same_bits() { "$HCNN" diff "$1" "$2" --tol 0 >/dev/null 2>&1; }

# same_as REF NAME: $WORK/NAME/final.hcnn matches $WORK/REF/final.hcnn to 1e-5
# (relative, hcnn diff) and its run ($WORK/NAME.log) checked its replicas.
same_as() {
    local ref=$1 name=$2
    if [ ! -f "$WORK/$name/final.hcnn" ]; then
        case_fail "no checkpoint: $(tail -n 3 "$WORK/$name.log")"
    elif "$HCNN" diff "$WORK/$ref/final.hcnn" "$WORK/$name/final.hcnn" --tol 1e-5 >"$WORK/$name.diff"; then
        echo "# $(tail -n 1 "$WORK/$name.diff")"
        case_ok
    else
        case_fail "differs from $ref: $(tail -n 1 "$WORK/$name.diff")"
    fi
}

# run_steps STRATEGY BATCH NAME RANKS key=value...: 18 steps over two epochs
# of 470 synthetic samples (a short last batch), checkpoint in $WORK/NAME,
# log in $WORK/NAME.log; RANKS 0 runs serially without mpirun.
run_steps() {
    local strategy=$1 batch=$2 name=$3 np=$4
    shift 4
    local args=(train --config "$CFG" -q --set epochs=2 --set max_steps=18 --set synthetic_train=470
                --set batch_size="$batch" --set csv= --set checkpoint_dir="$WORK/$name")
    local kv
    for kv in "$@"; do args+=(--set "$kv"); done
    if [ "$np" -eq 0 ]; then
        "$HCNN" "${args[@]}" >"$WORK/$name.log" 2>&1
    else
        "${MPIRUN[@]}" -np "$np" "$HCNN" "${args[@]}" --set strategy="$strategy" >"$WORK/$name.log" 2>&1
    fi
}

# PROG built with --with-cuda (its --version names a CUDA runtime)?
# Whether precision: bf16 runs here (issue 38), in BF16_STATE: "run" when
# hcnn --version lists bf16 among this CPU's precisions; "fail" when it does
# not although the build has oneDNN and /proc/cpuinfo shows avx512_bf16 or
# amx_bf16 (a bf16 test must then fail, not skip); "skip" otherwise (no
# oneDNN in this build, or a CPU without bf16).  BF16_WHY: hcnn's reason.
bf16_state() {
    local v
    v=$("$HCNN" --version 2>&1)
    BF16_WHY=$(sed -n 's/^precisions on this CPU: fp32 (bf16: \(.*\))$/\1/p' <<<"$v")
    if grep -q '^precisions on this CPU: fp32, bf16' <<<"$v"; then
        BF16_STATE=run
    elif grep -q '^oneDNN: [0-9]' <<<"$v" && grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
        BF16_STATE=fail
    else
        BF16_STATE=skip
    fi
}

cuda_build() { "$1" --version 2>/dev/null | grep -q '^CUDA: runtime'; }

# The address space (KiB) the CUDA libraries PROG links take when the loader
# maps them: each one's LOAD segments from first to last (readelf).  0 for a
# CPU build; fails (status 1, nothing printed) where readelf is missing.
# ulimit -v tests add it: a --with-cuda build maps about 665 MiB of them
# (cuBLASLt alone 607) before main, where the limits that test OpenBLAS's
# buffers and the checkpoint reserve are a few hundred MiB.
cuda_libs_kib() {
    local total=0 lib va msz lo hi v e
    while IFS= read -r lib; do
        command -v readelf >/dev/null || return 1
        lo='' hi=0
        while read -r _ _ va _ _ msz _; do
            v=$((va)) e=$((va + msz))
            if [ -z "$lo" ] || [ "$v" -lt "$lo" ]; then lo=$v; fi
            if [ "$e" -gt "$hi" ]; then hi=$e; fi
        done < <(readelf -lW "$lib" | awk '$1 == "LOAD"')
        total=$((total + (hi - ${lo:-0} + 1023) / 1024))
    done < <(ldd "$1" 2>/dev/null |
             sed -n 's/^[[:space:]]*lib\(cuda\|cublas\|cudnn\)[^ ]* => \(\/.*\) (0x[0-9a-f]*)$/\2/p')
    echo "$total"
}

# A CPU build of PROG for the tests that need one (a GPU job refusing it):
# PROG itself when it is one, else a stand-in written to DIR/hcnn-cpu, PROG
# behind the --version of a CPU build.  Prints the path.
cpu_build_of() {
    local prog=$1 dir=$2 q
    if ! cuda_build "$prog"; then echo "$prog"; return; fi
    printf -v q '%q' "$prog"
    printf '%s\n' '#!/usr/bin/env bash' \
        "if [ \"\${1:-}\" = --version ]; then $q --version | grep -v '^CUDA:'; echo 'CUDA: none (stand-in for a CPU build: tests/lib.sh)'; exit 0; fi" \
        "exec $q \"\$@\"" >"$dir/hcnn-cpu" && chmod +x "$dir/hcnn-cpu" || return 1
    echo "$dir/hcnn-cpu"
}

# MPI as root, more ranks than cores, one thread per rank; every run bounded.
mpi_setup() {
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    export OMP_NUM_THREADS=1
    MPIRUN=(timeout 120 mpirun --oversubscribe --bind-to none)
    if ! command -v mpirun >/dev/null; then
        case_begin mpirun_available
        case_fail "mpirun not found (Debian package openmpi-bin)"
        finish
    fi
}

# Summary in cmocka's format; exit 1 if any case failed, 77 if all skipped.
finish() {
    echo "[==========] $((T_PASSED + T_FAILED + T_SKIPPED)) test(s) run."
    echo "[  PASSED  ] $T_PASSED test(s)."
    if [ "$T_SKIPPED" -gt 0 ]; then echo "[  SKIPPED ] $T_SKIPPED test(s)."; fi
    if [ "$T_FAILED" -gt 0 ]; then
        echo "[  FAILED  ] $T_FAILED test(s), listed below:"
        for n in $T_FAILED_NAMES; do echo "[  FAILED  ] $n"; done
        exit 1
    fi
    if [ "$T_PASSED" -eq 0 ] && [ "$T_SKIPPED" -gt 0 ]; then exit 77; fi
    exit 0
}
