#!/usr/bin/env bash
# Data-parallel strategy: the same model as serial training (np 2 and 4,
# one bucket, many buckets, uneven shards, both progress modes), batch-norm
# replicas that agree, and failures that end every rank.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/synthetic_small.yaml"
mpi_setup

# a run of 18 steps: name, ranks (0 = serial without mpirun), key=value overrides
run() { run_steps data 30 "$@"; }

same_as_serial() { # name: matches the serial run and checked its replicas
    if grep -q '^replica_check=ok' "$WORK/$1.log"; then same_as serial "$1"
    else case_fail "no replica check: $(tail -n 3 "$WORK/$1.log")"; fi
}

case_begin serial_reference
if run serial 0 && [ -f "$WORK/serial/final.hcnn" ]; then case_ok; else case_fail "$(tail -n 3 "$WORK/serial.log")"; fi

# 30 = 15+15 (np 2), 8+7+8+7 (np 4); the last batch of an epoch has 20
case_begin np2_one_bucket;          run np2 2 bucket_mb=1000;               same_as_serial np2
case_begin np4_one_bucket_uneven;   run np4 4 bucket_mb=1000;               same_as_serial np4
case_begin np4_many_small_buckets;  run np4b 4 bucket_mb=0.0001;            same_as_serial np4b
case_begin np3_uneven_thread;       run np3t 3 allreduce_progress=thread bucket_mb=0.001; same_as_serial np3t
# threads=2 with a communication thread: one core computes, one reduces
# (never more threads than asked), the same bits as serial
case_begin np2_thread_reserves_a_core
run np2r 2 allreduce_progress=thread bucket_mb=0.001 threads=2
if grep -q "^hcnn: one core of each rank's 2 is the gradient allreduce's (allreduce_progress: thread): 1 threads compute" "$WORK/np2r.log" &&
    grep -q "2 ranks x 1 threads" "$WORK/np2r.log"; then same_as_serial np2r
else case_fail "no reserved core in the header: $(grep -m3 '^hcnn:' "$WORK/np2r.log")"; fi
# Winograd convolutions (both 3x3 layers, weight gradient of the 8 -> 16 one
# too): data parallel equals serial up to float summation order
case_begin serial_winograd_reference
if run serial_wino 0 conv_algo=winograd && [ -f "$WORK/serial_wino/final.hcnn" ]; then case_ok
else case_fail "$(tail -n 3 "$WORK/serial_wino.log")"; fi
case_begin np2_winograd
run np2w 2 bucket_mb=1000 conv_algo=winograd
if grep -q '^replica_check=ok' "$WORK/np2w.log"; then same_as serial_wino np2w
else case_fail "no replica check: $(tail -n 3 "$WORK/np2w.log")"; fi

case_begin buckets_reported
if grep -q "3 buckets" "$WORK/np4b.log" && grep -q "1 bucket " "$WORK/np2.log"; then case_ok
else case_fail "$(grep 'gradient allreduce' "$WORK/np4b.log" "$WORK/np2.log")"; fi

case_begin epoch_metrics
line=$(grep '^epoch=1 ' "$WORK/np2.log")
if echo "$line" | grep -q 'comm_wait_s=' && echo "$line" | grep -q 'allreduce_hidden='; then case_ok
else case_fail "epoch line lacks communication metrics: $line"; fi

case_begin batchnorm_replicas_agree
if "${MPIRUN[@]}" -np 2 "$HCNN" train --config "$HCNN_SRCDIR/configs/synthetic_resnet.yaml" -q --set strategy=data --set bucket_mb=0.01 >"$WORK/res.log" 2>&1; then
    l1=$(grep '^epoch=1 ' "$WORK/res.log" | tr ' ' '\n' | sed -n 's/^train_loss=//p')
    l3=$(grep '^epoch=3 ' "$WORK/res.log" | tr ' ' '\n' | sed -n 's/^train_loss=//p')
    if grep -q '^replica_check=ok' "$WORK/res.log" && awk -v a="$l1" -v b="$l3" 'BEGIN { exit !(b < a) }'; then
        case_ok
    else
        case_fail "loss $l1 -> $l3 or replicas differ: $(tail -n 2 "$WORK/res.log")"
    fi
else
    case_fail "$(tail -n 3 "$WORK/res.log")"
fi

# ---- failures: one message, every rank exits non-zero, nobody hangs ----
errors_once() { # pattern log
    local n
    n=$(grep -c "$1" "$2")
    [ "$n" -eq 1 ]
}

case_begin more_ranks_than_batch
"${MPIRUN[@]}" -np 3 "$HCNN" train --config "$CFG" -q --set strategy=data --set batch_size=2 >"$WORK/f1.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && errors_once "smaller than the number of ranks" "$WORK/f1.log"; then case_ok
else case_fail "exit $rc: $(cat "$WORK/f1.log")"; fi

case_begin serial_on_two_ranks
"${MPIRUN[@]}" -np 2 "$HCNN" train --config "$CFG" -q >"$WORK/f2.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && errors_once "strategy 'serial' runs on one rank" "$WORK/f2.log"; then case_ok
else case_fail "exit $rc: $(cat "$WORK/f2.log")"; fi

case_begin bad_config_reported_once
"${MPIRUN[@]}" -np 2 "$HCNN" train --config "$CFG" -q --set lr=-1 >"$WORK/f3.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && errors_once "lr" "$WORK/f3.log"; then case_ok
else case_fail "exit $rc: $(cat "$WORK/f3.log")"; fi

# a configuration only one rank cannot read (relative to each rank's own
# directory, as on nodes without the file): that rank says why, once, and
# no rank waits for it (rank 1 said nothing: mpirun printed only its exit
# code; a rank 0 alone failing left rank 1 in MPI_Init).  Also where the
# launcher does not end the job at a rank's failure (orte_abort_on_non_zero_status
# 0, as srun --kill-on-bad-exit=0 in slurm/lib.sh)
mkdir -p "$WORK/cfgA" "$WORK/cfgB"
cp "$CFG" "$WORK/cfgA/run.yaml"
for lacking in 1 0; do
    for abort in 1 0; do
        case_begin "config_missing_on_rank_${lacking}_said_abort_${abort}"
        d0=$WORK/cfgA d1=$WORK/cfgB
        [ $lacking -eq 0 ] && d0=$WORK/cfgB d1=$WORK/cfgA
        "${MPIRUN[@]}" --mca orte_abort_on_non_zero_status $abort \
            -np 1 -wdir "$d0" "$HCNN" train --config run.yaml -q --set strategy=data : \
            -np 1 -wdir "$d1" "$HCNN" train --config run.yaml -q --set strategy=data >"$WORK/f4.log" 2>&1
        rc=$?
        # (every rank exits 2, the status of the one that failed; mpirun
        # passes it on, but not under orte_abort_on_non_zero_status 0)
        if [ $rc -ne 124 ] && { [ $abort -eq 0 ] || [ $rc -eq 2 ]; } && errors_once "error" "$WORK/f4.log" &&
            grep -q "hcnn: rank $lacking: error: cannot open config file 'run.yaml': No such file" "$WORK/f4.log" &&
            ! grep -q '^epoch=' "$WORK/f4.log"; then
            case_ok
        else case_fail "exit $rc: $(cat "$WORK/f4.log")"; fi
    done
done

case_begin one_rank_fails_mid_step
start=$(date +%s)
HCNN_FAIL_AT=1:3 "${MPIRUN[@]}" -np 2 -x HCNN_FAIL_AT "$HCNN" train --config "$CFG" -q --set strategy=data \
    --set csv= --set checkpoint_dir= >"$WORK/f4.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$took" -lt 60 ] && grep -q "rank 1.*non-finite loss" "$WORK/f4.log"; then
    case_ok
else
    case_fail "exit $rc after ${took}s: $(cat "$WORK/f4.log")"
fi

# the data file is missing on one "node": ranks run in different directories
case_begin data_missing_on_one_rank
mkdir -p "$WORK/node0/d" "$WORK/node1"
for split in train t10k; do
    { printf '\x00\x00\x08\x03\x00\x00\x00\x04\x00\x00\x00\x0c\x00\x00\x00\x0c'; head -c 576 /dev/urandom; } >"$WORK/node0/d/$split-images-idx3-ubyte"
    printf '\x00\x00\x08\x01\x00\x00\x00\x04\x00\x01\x02\x03' >"$WORK/node0/d/$split-labels-idx1-ubyte"
done
start=$(date +%s)
timeout 120 mpirun --oversubscribe --bind-to none -np 1 -wdir "$WORK/node0" "$HCNN" train --config "$CFG" -q \
    --set strategy=data --set dataset=mnist --set data_dir=d --set batch_size=2 --set csv= --set checkpoint_dir= \
    : -np 1 -wdir "$WORK/node1" "$HCNN" train --config "$CFG" -q \
    --set strategy=data --set dataset=mnist --set data_dir=d --set batch_size=2 --set csv= --set checkpoint_dir= \
    >"$WORK/f5.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$took" -lt 60 ] && grep -q "rank 1.*cannot find" "$WORK/f5.log"; then
    case_ok
else
    case_fail "exit $rc after ${took}s: $(cat "$WORK/f5.log")"
fi

finish
