#!/usr/bin/env bash
# Pipeline strategy: the same model as serial training for S = 2 and 4
# stages, M = 1 and 4 micro-batches, both schedules, 2 replicas x 2 stages
# (allreduce_progress test and thread) and an uneven explicit partition;
# the same bits wherever a measured partition may cut;
# activation memory bounds of the schedules; configurations that cannot
# run; a failing rank.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/synthetic_small.yaml"
mpi_setup

# 18 steps over two epochs of 470 samples, global batch 32 (a short last batch of 22)
run() { run_steps pipeline 32 "$@"; }

case_begin serial_reference
if run serial 0 && [ -f "$WORK/serial/final.hcnn" ]; then case_ok; else case_fail "$(tail -n 3 "$WORK/serial.log")"; fi

for sched in gpipe 1f1b; do
    for S in 2 4; do
        for M in 1 4; do
            name="s${S}_m${M}_$sched"
            case_begin "$name"
            run "$name" "$S" stages=$S microbatches=$M pipeline_schedule=$sched
            same_as serial "$name"
        done
    done
done

case_begin hybrid_2_replicas_x_2_stages
run hybrid 4 stages=2 microbatches=4 pipeline_schedule=1f1b bucket_mb=0.001
if grep -q '^replica_check=ok replicas=2' "$WORK/hybrid.log"; then same_as serial hybrid
else case_fail "no replica check: $(tail -n 3 "$WORK/hybrid.log")"; fi

# the replicas' allreduce on a communication thread while the training
# thread's transfers go on: two threads in MPI at once (MPI_THREAD_MULTIPLE)
case_begin hybrid_allreduce_on_a_thread
run hybrid_thread 4 stages=2 microbatches=4 pipeline_schedule=1f1b bucket_mb=0.001 \
    allreduce_progress=thread
if grep -q 'needs MPI_THREAD_MULTIPLE, this MPI provides' "$WORK/hybrid_thread.log"; then
    case_skip "$(grep -m 1 'needs MPI_THREAD_MULTIPLE' "$WORK/hybrid_thread.log")"
elif grep -q '^replica_check=ok replicas=2' "$WORK/hybrid_thread.log" &&
   grep -q 'progress by a communication thread' "$WORK/hybrid_thread.log"; then
    same_as serial hybrid_thread
else case_fail "$(tail -n 3 "$WORK/hybrid_thread.log")"; fi

case_begin uneven_explicit_partition
run uneven 3 stages=3 microbatches=2 "partition=[0,1,6]"
if grep -q 'partition \[0, 1, 6\] (explicit)' "$WORK/uneven.log"; then same_as serial uneven
else case_fail "partition not applied: $(grep partition "$WORK/uneven.log")"; fi

case_begin balanced_partition_printed
if grep -q 'balanced from a measured warm-up' "$WORK/s4_m4_1f1b.log" &&
   [ "$(grep -c '^hcnn: stage [0-9]: blocks' "$WORK/s4_m4_1f1b.log")" -eq 4 ]; then case_ok
else case_fail "$(grep 'hcnn: ' "$WORK/s4_m4_1f1b.log")"; fi

# the measured partition is timed, so a run's bits must not depend on where
# it cuts: the small ResNet at 64 samples a micro-batch (whole-network units
# possible), cut after the stem's convolution and batch-norm, after the
# first residual block, before the tail of per-sample blocks (dropout .. fc)
case_begin any_measured_cut_same_bits
RES="$HCNN_SRCDIR/configs/synthetic_resnet.yaml"
for cut in 2 4 6; do
    "${MPIRUN[@]}" -np 2 "$HCNN" train --config "$RES" -q --set csv= --set epochs=1 --set max_steps=2 \
        --set threads=1 --set blas_kernels=env --set batch_size=64 --set strategy=pipeline \
        --set stages=2 --set microbatches=1 --set "partition=[0,$cut]" \
        --set checkpoint_dir="$WORK/cut$cut" >"$WORK/cut$cut.log" 2>&1
done
if [ ! -f "$WORK/cut2/final.hcnn" ] || [ ! -f "$WORK/cut4/final.hcnn" ] || [ ! -f "$WORK/cut6/final.hcnn" ]; then
    case_fail "a run failed: $(tail -n 2 "$WORK"/cut*.log)"
elif same_bits "$WORK/cut2/final.hcnn" "$WORK/cut4/final.hcnn" &&
    same_bits "$WORK/cut6/final.hcnn" "$WORK/cut4/final.hcnn"; then
    case_ok
else
    case_fail "cut 2: $("$HCNN" diff "$WORK/cut2/final.hcnn" "$WORK/cut4/final.hcnn" --tol 0 2>&1 | tail -n 1); cut 6: $("$HCNN" diff "$WORK/cut6/final.hcnn" "$WORK/cut4/final.hcnn" --tol 0 2>&1 | tail -n 1)"
fi

# activations stored per stage: 1F1B at most S - s (<= S), GPipe M
peak() { grep "^stage=$2 " "$WORK/$1.log" | head -n 1 | tr ' ' '\n' | sed -n 's/^peak_stored_microbatches=//p'; }
case_begin memory_1f1b_bounded_by_stages
run mem1 4 stages=4 microbatches=8 pipeline_schedule=1f1b batch_size=64
p0=$(peak mem1 0) p3=$(peak mem1 3)
if [ "$p0" = 4 ] && [ "$p3" = 1 ]; then case_ok; else case_fail "peaks stage 0: $p0 (want 4), stage 3: $p3 (want 1)"; fi
case_begin memory_gpipe_stores_all_microbatches
run mem2 4 stages=4 microbatches=8 pipeline_schedule=gpipe batch_size=64
p0=$(peak mem2 0) p3=$(peak mem2 3)
if [ "$p0" = 8 ] && [ "$p3" = 8 ]; then case_ok; else case_fail "peaks stage 0: $p0, stage 3: $p3 (want 8)"; fi

case_begin bubble_reported
if grep -q '^pipeline_bubble_share=.* theoretical=0.273' "$WORK/mem1.log"; then case_ok
else case_fail "$(grep pipeline_bubble "$WORK/mem1.log")"; fi
# each stage's share of its epoch spent waiting is a share: <= 1 on every
# stage of every run (it read 1.213 when divided by rank 0's epoch time)
case_begin bubble_share_at_most_one
shares=$(cat "$WORK"/hybrid.log "$WORK"/uneven.log "$WORK"/mem1.log "$WORK"/mem2.log |
    tr ' ' '\n' | sed -n 's/^\(pipeline_\)\{0,1\}bubble_share=//p')
if [ -n "$shares" ] && echo "$shares" | awk '$1 < 0 || $1 > 1 { bad = 1 } END { exit bad }'; then case_ok
else case_fail "bubble shares: $(echo $shares)"; fi

# ---- configurations that cannot run: one message, every rank exits ----
refuse() { # name pattern ranks key=value...
    local name=$1 pattern=$2 np=$3
    shift 3
    local args=(train --config "$CFG" -q --set strategy=pipeline --set csv= --set checkpoint_dir=)
    local kv
    for kv in "$@"; do args+=(--set "$kv"); done
    case_begin "$name"
    "${MPIRUN[@]}" -np "$np" "$HCNN" "${args[@]}" >"$WORK/$name.log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(grep -c -- "$pattern" "$WORK/$name.log")" -eq 1 ]; then case_ok
    else case_fail "exit $rc: $(cat "$WORK/$name.log")"; fi
}
refuse more_stages_than_blocks "larger than the number of blocks" 2 stages=9
refuse world_not_divisible "not divisible by stages" 3 stages=2
refuse microbatch_below_one_sample "smaller than one sample" 2 stages=2 microbatches=20 batch_size=16
refuse partition_not_increasing "must be increasing" 2 stages=2 "partition=[0,0]"
refuse partition_wrong_length "one per stage" 2 stages=2 "partition=[0,2,4]"
case_begin microbatches_zero
if "$HCNN" train --config "$CFG" -q --set microbatches=0 2>&1 | grep -q "microbatches"; then case_ok; else case_fail "accepted microbatches=0"; fi

case_begin rank_fails_mid_step
start=$(date +%s)
HCNN_FAIL_AT=3:2 "${MPIRUN[@]}" -np 4 -x HCNN_FAIL_AT "$HCNN" train --config "$CFG" -q --set strategy=pipeline \
    --set stages=4 --set microbatches=4 --set csv= --set checkpoint_dir= >"$WORK/fail.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$took" -lt 60 ] && grep -q "rank 3.*non-finite loss" "$WORK/fail.log"; then case_ok
else case_fail "exit $rc after ${took}s: $(cat "$WORK/fail.log")"; fi

finish
