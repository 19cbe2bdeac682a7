#!/usr/bin/env bash
# optimizer_sharding: ranks (the optimiser step sharded over the ranks that
# hold the same parameters, src/parallel/grad_sync.c): byte-identical
# checkpoints to the unsharded step after 20 LeNet-5 steps at 2, 3 and 4
# ranks and for a pipeline's replicas, checkpoints that stay whole (a
# sharded run resumes unsharded, on another rank count, in another
# strategy, and the reverse), the non-finite checks on slices, and the
# key's refusal and notes.  ResNet-18: tests/integration/test_sharding_resnet18.sh.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/mnist_lenet.yaml"
mpi_setup
export HCNN_FAIL_AT="" # set per case; mpirun -x needs it to exist

# lenet NAME RANKS [--resume latest] -- key=value...: LeNet-5 on synthetic
# images, 20 steps of 12 samples (6, 4, 3 or 2-3 each), checkpoint in
# $WORK/NAME, log in $WORK/NAME.log; RANKS 0: serial
lenet() {
    local name=$1 np=$2 kv
    shift 2
    local args=(train --config "$CFG" -q --set csv= --set dataset=synthetic
                --set synthetic_train=400 --set synthetic_test=16 --set eval_batch_size=16
                --set batch_size=12 --set max_steps=20 --set bucket_mb=0.05
                --set checkpoint_dir="$WORK/$name")
    while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
    shift
    for kv in "$@"; do args+=(--set "$kv"); done
    if [ "$np" -eq 0 ]; then
        timeout 120 "$HCNN" "${args[@]}" >"$WORK/$name.log" 2>&1
    else
        "${MPIRUN[@]}" -np "$np" -x HCNN_FAIL_AT "$HCNN" "${args[@]}" >"$WORK/$name.log" 2>&1
    fi
}
train() { local name=$1 np=$2; shift 2; lenet "$name" "$np" -- "$@"; }
# resume NAME RANKS key=value...: on to step 20 from NAME's checkpoint
resume() { local name=$1 np=$2; shift 2; lenet "$name" "$np" --resume latest -- "$@"; }

# identical A B [TOL]: final checkpoints of runs A and B, momentum included
identical() {
    if [ ! -f "$WORK/$1/final.hcnn" ] || [ ! -f "$WORK/$2/final.hcnn" ]; then
        case_fail "no checkpoint: $(tail -n 2 "$WORK/$1.log" "$WORK/$2.log")"
    elif "$HCNN" diff "$WORK/$1/final.hcnn" "$WORK/$2/final.hcnn" --tol "${3:-0}" >"$WORK/$2.diff"; then
        echo "# $(tail -n 1 "$WORK/$2.diff")"
        case_ok
    else
        case_fail "$2 differs from $1: $(tail -n 1 "$WORK/$2.diff")"
    fi
}

# the sums over ranks are taken over the same tree (hcnn's reduce-scatter
# is the first half of the Rabenseifner allreduce the buckets use,
# src/parallel/reduce_scatter.h): the same bits, not only close ones; 5
# ranks fold one pair first (Open MPI's own MPI_Ireduce_scatter, a binomial
# reduce, differed there by 5.5e-7)
for np in 2 3 4 5; do
    case_begin "lenet_np${np}_identical"
    train "none$np" "$np" strategy=data && train "ranks$np" "$np" strategy=data optimizer_sharding=ranks
    identical "none$np" "ranks$np"
done

case_begin header_names_the_reduce_scatter
if grep -q '^hcnn: gradient reduce-scatter: 2 buckets' "$WORK/ranks3.log" &&
    grep -q '^hcnn: optimizer_sharding: ranks: 2 of the 3 ranks each update a piece of every bucket.*1 rank (odd, below rank 2) adds its gradients' "$WORK/ranks3.log" &&
    grep -q '^hcnn: optimizer_sharding: ranks: 4 of the 4 ranks each update a piece of every bucket ([0-9]* parameters on this rank)' "$WORK/ranks4.log" &&
    grep -q '^hcnn: gradient allreduce: 2 buckets' "$WORK/none3.log"; then case_ok
else case_fail "$(grep -h 'gradient\|sharding' "$WORK/ranks3.log" "$WORK/none3.log")"; fi

# a pipeline of 2 stages x 2 replicas: each stage's replicas shard its part
case_begin pipeline_replicas_identical
train pnone 4 strategy=pipeline stages=2 microbatches=2 &&
    train pranks 4 strategy=pipeline stages=2 microbatches=2 optimizer_sharding=ranks
if grep -q '2 of the 2 ranks each update a piece' "$WORK/pranks.log"; then identical pnone pranks
else case_fail "no sharding in the header: $(grep -h 'gradient\|sharding' "$WORK/pranks.log")"; fi

# allreduce_progress: thread: the communication thread's blocking
# MPI_Allreduce (Open MPI's coll/tuned) adds 3 or more ranks' gradients in
# another order than the recursive halving; 2 ranks' a + b is b + a
case_begin thread_np2_identical
train tnone2 2 strategy=data allreduce_progress=thread &&
    train tranks2 2 strategy=data allreduce_progress=thread optimizer_sharding=ranks
identical tnone2 tranks2
case_begin thread_np3_within_summation_order
train tnone3 3 strategy=data allreduce_progress=thread &&
    train tranks3 3 strategy=data allreduce_progress=thread optimizer_sharding=ranks
identical tnone3 tranks3 1e-5

# checkpoints stay whole: a sharded run's checkpoint at step 10 is the
# unsharded one, so it resumes unsharded on 2 ranks as that one does
case_begin sharded_checkpoint_is_whole
train half_ranks 3 strategy=data optimizer_sharding=ranks max_steps=10 &&
    train half_none 3 strategy=data max_steps=10
identical half_none half_ranks
case_begin sharded_resumes_unsharded_other_ranks
rm -rf "$WORK/res_a" "$WORK/res_b"
cp -r "$WORK/half_none" "$WORK/res_a" && cp -r "$WORK/half_ranks" "$WORK/res_b" &&
    resume res_a 2 strategy=data && resume res_b 2 strategy=data
identical res_a res_b

case_begin unsharded_resumes_sharded_other_ranks
cp -r "$WORK/half_none" "$WORK/res_c" && cp -r "$WORK/half_none" "$WORK/res_d" &&
    resume res_c 4 strategy=data && resume res_d 4 strategy=data optimizer_sharding=ranks
identical res_c res_d

case_begin sharded_resumes_in_another_strategy
cp -r "$WORK/half_none" "$WORK/res_e" && cp -r "$WORK/half_ranks" "$WORK/res_f" &&
    resume res_e 0 && resume res_f 0
identical res_e res_f
case_begin sharded_pipeline_resumes_from_data
cp -r "$WORK/half_none" "$WORK/res_g" && cp -r "$WORK/half_ranks" "$WORK/res_h" &&
    resume res_g 4 strategy=pipeline stages=2 microbatches=2 &&
    resume res_h 4 strategy=pipeline stages=2 microbatches=2 optimizer_sharding=ranks
identical res_g res_h

# the non-finite checks on slices: a rank's NaN loss at step 5 skips that
# step on every rank, as unsharded; lr 1e6 makes the gradients' norm
# overflow on the slices and stops both runs at the same step, with the
# same checkpoint
case_begin nonfinite_skip_on_slices
HCNN_FAIL_AT=2:5 train nfs_none 3 strategy=data nonfinite=skip &&
    HCNN_FAIL_AT=2:5 train nfs_ranks 3 strategy=data nonfinite=skip optimizer_sharding=ranks
if grep -q 'skipped on every rank' "$WORK/nfs_ranks.log"; then identical nfs_none nfs_ranks
else case_fail "no skip: $(tail -n 3 "$WORK/nfs_ranks.log")"; fi
case_begin nonfinite_abort_on_slices
train nfa_none 3 strategy=data lr=1e6; rc_none=$?
train nfa_ranks 3 strategy=data lr=1e6 optimizer_sharding=ranks; rc_ranks=$?
s_none=$(grep -o 'step [0-9]*' "$WORK/nfa_none.log" | sort -u | tr '\n' ' ')
s_ranks=$(grep -o 'step [0-9]*' "$WORK/nfa_ranks.log" | sort -u | tr '\n' ' ')
if [ "$rc_none" -ne 0 ] && [ "$rc_none" -ne 124 ] && [ "$rc_ranks" -eq "$rc_none" ] &&
    [ "$s_none" = "$s_ranks" ]; then identical nfa_none nfa_ranks
else case_fail "exit $rc_none / $rc_ranks, steps '$s_none' / '$s_ranks': $(tail -n 2 "$WORK/nfa_ranks.log")"; fi

# strategy serial: refused (exit 2, one message); one data-parallel rank:
# noted in the run header
case_begin serial_refused
train ser 0 optimizer_sharding=ranks
rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c "optimizer_sharding 'ranks' shards the optimiser step" "$WORK/ser.log")" -eq 1 ]; then case_ok
else case_fail "exit $rc: $(tail -n 3 "$WORK/ser.log")"; fi
case_begin one_rank_noted
train one 1 strategy=data optimizer_sharding=ranks max_steps=2
if [ $? -eq 0 ] && grep -q '^hcnn: optimizer_sharding: ranks: one rank, nothing to shard' "$WORK/one.log"; then case_ok
else case_fail "$(grep -h 'sharding' "$WORK/one.log"; tail -n 2 "$WORK/one.log")"; fi

finish
