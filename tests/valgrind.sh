#!/usr/bin/env bash
# valgrind memcheck on short training runs of each strategy (a normal build,
# not --enable-sanitizers): serial on 2 threads, its resume from the
# checkpoint, data-parallel on 2 ranks, pipeline of 2 stages; 4 steps of
# configs/synthetic_small.yaml each.  A case fails on any memcheck error in
# any process, a definite leak included; suppressed: third-party libraries
# only (tests/sanitizers/valgrind.supp).  Skipped without valgrind.
#   tests/valgrind.sh          (in the build directory; or: make check-valgrind)
# Environment: HCNN (the program, default ./hcnn), VALGRIND (default valgrind).
HCNN_SRCDIR=${HCNN_SRCDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
. "$HCNN_SRCDIR/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/synthetic_small.yaml"
VALGRIND=${VALGRIND:-valgrind}

case_begin valgrind_available
if ! command -v "$VALGRIND" >/dev/null; then
    case_skip "$VALGRIND not found (Debian package valgrind)"
    finish
fi
if [ ! -x "$HCNN" ]; then
    case_fail "no program $HCNN: build it first (make), or set HCNN"
    finish
fi
# an ASan build maps its shadow memory where valgrind cannot follow
if asan_build; then
    case_skip "$HCNN is built with --enable-sanitizers: valgrind needs a normal build"
    finish
fi
case_ok

mpi_setup             # one OpenMP thread per rank, mpirun as root, oversubscribed
MPIRUN=(timeout 600 mpirun --oversubscribe --bind-to none)
# hwloc's x86 back end cannot read CPUID under valgrind and says so on every rank
export HWLOC_COMPONENTS=-x86

# --error-exitcode: a distinct status for any error or definite leak;
# --keep-debuginfo: names for the frames of OpenMPI's components, which
# MPI_Finalize unloads before the leak check (the suppressions match them);
# --child-silent-after-fork: a serial run's MPI_Init forks and executes
# OpenMPI's orted (a log of its own, of no process of hcnn's)
VG=("$VALGRIND" --tool=memcheck --error-exitcode=98 --leak-check=full
    --errors-for-leak-kinds=definite --show-leak-kinds=definite --track-origins=yes
    --keep-debuginfo=yes --num-callers=40 --child-silent-after-fork=yes
    --suppressions="$HCNN_SRCDIR/tests/sanitizers/valgrind.supp")

# blas_kernels=env: under valgrind /proc/self/exe is valgrind's tool, so
# hcnn must not re-execute itself to load other OpenBLAS kernels.
# precision stays fp32 (the config's): no precision: bf16 run here, because
# valgrind cannot execute AVX-512 BF16 or AMX instructions (its CPU reports
# neither, so oneDNN would dispatch no bf16 and hcnn would refuse the run)
STEPS=(train --config "$CFG" -q --set epochs=1 --set max_steps=4 --set csv= --set blas_kernels=env)

# memcheck NAME PROCESSES CMD...: CMD (with "${VG[@]}" --log-file=... before
# hcnn) exits 0 and PROCESSES memcheck logs end, each reporting no error
memcheck() {
    local name=$1 procs=$2
    shift 2
    case_begin "$name"
    "$@" >"$WORK/$name.out" 2>&1
    local rc=$? logs=("$WORK/$name".vg.*)
    local n=0 bad=0 f
    for f in "${logs[@]}"; do
        grep -q 'ERROR SUMMARY: ' "$f" 2>/dev/null || continue
        n=$((n + 1))
        grep -q 'ERROR SUMMARY: 0 errors' "$f" || bad=$((bad + 1))
    done
    if [ $rc -eq 0 ] && [ $n -eq "$procs" ] && [ $bad -eq 0 ]; then
        grep -h 'ERROR SUMMARY' "${logs[@]}" 2>/dev/null | sed 's/^==[0-9]*== /# /'
        case_ok
        return
    fi
    case_fail "exit $rc; $n of $procs memcheck logs ended, $bad with errors"
    sed 's/^/#   /' "$WORK/$name.out" | tail -n 20
    for f in "${logs[@]}"; do
        [ -f "$f" ] && grep -v '^==[0-9]*== \(Memcheck\|Copyright\|Using\|Command\|Parent\)' "$f" | sed 's/^/#   /'
    done
}

OMP_NUM_THREADS=2 memcheck serial 1 \
    "${VG[@]}" --log-file="$WORK/serial.vg.%p" "$HCNN" "${STEPS[@]}" --set checkpoint_dir="$WORK/serial"
OMP_NUM_THREADS=2 memcheck serial_resume 1 \
    "${VG[@]}" --log-file="$WORK/serial_resume.vg.%p" "$HCNN" "${STEPS[@]}" --set max_steps=6 \
    --set checkpoint_dir="$WORK/serial" --resume latest
memcheck data_parallel_np2 2 "${MPIRUN[@]}" -np 2 \
    "${VG[@]}" --log-file="$WORK/data_parallel_np2.vg.%p" "$HCNN" "${STEPS[@]}" --set strategy=data \
    --set checkpoint_dir="$WORK/data"
memcheck pipeline_2_stages 2 "${MPIRUN[@]}" -np 2 \
    "${VG[@]}" --log-file="$WORK/pipeline_2_stages.vg.%p" "$HCNN" "${STEPS[@]}" --set strategy=pipeline \
    --set stages=2 --set microbatches=2 --set checkpoint_dir="$WORK/pipeline"

finish
