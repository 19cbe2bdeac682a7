#!/usr/bin/env bash
# The backend seam: every strategy, checkpoints, resume, evaluation and the
# profile run on the CPU backend behind memory the host cannot touch
# (HCNN_BACKEND=cpu-devmem, src/cpu/devmem.c: host_memory 0, so MPI goes
# through host copies) and give the CPU backend's checkpoints byte for byte.
# A host read of a tensor behind the backend's back would crash these runs.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
SMALL="$HCNN_SRCDIR/configs/synthetic_small.yaml"
RES="$HCNN_SRCDIR/configs/synthetic_resnet.yaml"
mpi_setup

# pair NAME RANKS CONFIG key=value...: the run on both backends (RANKS 0:
# serially, 2 threads), checkpoints in $WORK/NAME-cpu and $WORK/NAME-devmem
pair() {
    local name=$1 np=$2 cfg=$3 be
    shift 3
    local args=(train --config "$cfg" -q --set epochs=2 --set max_steps=12 --set csv=)
    local kv
    for kv in "$@"; do args+=(--set "$kv"); done
    for be in cpu cpu-devmem; do
        local dir="$WORK/$name-$be"
        if [ "$np" -eq 0 ]; then
            HCNN_BACKEND=$be OMP_NUM_THREADS=2 "$HCNN" "${args[@]}" --set checkpoint_dir="$dir" \
                >"$dir.log" 2>&1
        else
            "${MPIRUN[@]}" -np "$np" -x HCNN_BACKEND=$be "$HCNN" "${args[@]}" \
                --set checkpoint_dir="$dir" >"$dir.log" 2>&1
        fi || return 1
    done
}

# same NAME: the two backends' final checkpoints are identical
same() {
    if same_bits "$WORK/$1-cpu/final.hcnn" "$WORK/$1-cpu-devmem/final.hcnn"; then case_ok
    else case_fail "checkpoints differ: $("$HCNN" diff "$WORK/$1-cpu/final.hcnn" "$WORK/$1-cpu-devmem/final.hcnn" | tail -n 1)"; fi
}

check() { # name ranks config key=value...
    local name=$1
    case_begin "$name"
    if pair "$@"; then same "$name"
    else case_fail "$(tail -n 3 "$WORK/$name-cpu-devmem.log")"; fi
}

check serial_whole_network_per_thread 0 "$SMALL"
check serial_residual_batchnorm_dropout 0 "$RES"
check serial_batched_convolutions 0 "$RES" conv_algo=batched
check data_2_ranks_buckets 2 "$RES" strategy=data bucket_mb=0.001
check data_3_ranks_thread_progress 3 "$SMALL" strategy=data allreduce_progress=thread bucket_mb=0.001
check pipeline_2_stages_gpipe 2 "$RES" strategy=pipeline stages=2 microbatches=3 pipeline_schedule=gpipe
check pipeline_2x2_hybrid 4 "$RES" strategy=pipeline stages=2 microbatches=2 bucket_mb=0.001

# resumed on device memory from a checkpoint written there, against the
# straight CPU run
case_begin resume_on_device_memory
BASE=(train --config "$RES" -q --set epochs=2 --set csv=)
HCNN_BACKEND=cpu-devmem "$HCNN" "${BASE[@]}" --set checkpoint_dir="$WORK/r" --set max_steps=5 >"$WORK/r.log" 2>&1 &&
    HCNN_BACKEND=cpu-devmem "$HCNN" "${BASE[@]}" --set checkpoint_dir="$WORK/r" --resume latest >>"$WORK/r.log" 2>&1 &&
    "$HCNN" "${BASE[@]}" --set checkpoint_dir="$WORK/straight" >"$WORK/straight.log" 2>&1
if same_bits "$WORK/r/final.hcnn" "$WORK/straight/final.hcnn"; then case_ok
else case_fail "$(tail -n 3 "$WORK/r.log")"; fi

case_begin eval_on_device_memory
a=$("$HCNN" eval --config "$RES" --checkpoint "$WORK/straight/final.hcnn" 2>&1 | grep -o 'test_loss=[^ ]* test_acc=[^ ]*')
b=$(HCNN_BACKEND=cpu-devmem "$HCNN" eval --config "$RES" --checkpoint "$WORK/straight/final.hcnn" 2>&1 | grep -o 'test_loss=[^ ]* test_acc=[^ ]*')
if [ -n "$a" ] && [ "$a" = "$b" ]; then case_ok; else case_fail "cpu: '$a', cpu-devmem: '$b'"; fi

case_begin bench_profile_on_device_memory
if HCNN_BACKEND=cpu-devmem "$HCNN" bench --config "$RES" --warmup 1 --repeats 2 --steps 2 >"$WORK/bench.log" 2>&1 &&
   grep -qE '^  layer1\.0\.conv1 +conv ' "$WORK/bench.log" && grep -qE '^images_per_s=[0-9.]+$' "$WORK/bench.log"; then
    case_ok
else
    case_fail "$(tail -n 3 "$WORK/bench.log")"
fi

expect_fail unknown_backend "backend 'gpu': unknown \(this build has cpu, cpu-devmem" env HCNN_BACKEND=gpu "$HCNN" train --config "$SMALL" -q --set max_steps=1

# device: the configuration's choice of backend; a build without CUDA
# refuses cuda as a configuration error (exit 2), also in train --check
case_begin device_cuda_needs_a_cuda_build
if grep -q '^#define HCNN_HAVE_CUDA 1' "$HCNN_BUILDDIR/config.h" 2>/dev/null; then
    case_skip "this build has CUDA"
else
    "$HCNN" train --config "$SMALL" -q --set device=cuda >"$WORK/cuda.out" 2>"$WORK/cuda.err"
    rc=$?
    "$HCNN" train --config "$SMALL" --set device=cuda --check >/dev/null 2>"$WORK/cuda_check.err"
    crc=$?
    if [ $rc -eq 2 ] && [ $crc -eq 2 ] && [ "$(wc -l <"$WORK/cuda.err")" -eq 1 ] &&
        grep -q "device: cuda: this hcnn was built without CUDA; rebuild it with ./configure --with-cuda" "$WORK/cuda.err"; then
        case_ok
    else case_fail "exit $rc, --check exit $crc: $(cat "$WORK/cuda.err")"; fi
fi
# tf32 is no CPU's (bf16 on the CPU: tests/integration/test_cli.sh)
expect_fail precision_needs_cuda "precision: tf32 needs device: cuda \(the CPU has no TF32" \
    "$HCNN" train --config "$SMALL" -q --set precision=tf32
expect_fail device_unknown "device.*expected one of.*cpu.*cuda" "$HCNN" train --config "$SMALL" -q --set device=tpu

finish
