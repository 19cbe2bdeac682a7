#!/usr/bin/env bash
# Checkpoints that never lose a run: exact resume (end of epoch and inside
# one), resume across strategies, the signal path, SIGKILL while writing,
# pruning, refusal of foreign checkpoints, metrics files.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/synthetic_small.yaml"
mpi_setup
export OMP_NUM_THREADS=2
BASE=(--config "$CFG" -q --set epochs=2 --set synthetic_train=470 --set batch_size=30 --set csv=)

train() { # dir, extra args
    local dir=$1
    shift
    "$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/$dir" "$@" >>"$WORK/$dir.log" 2>&1
}

case_begin exact_resume_at_epoch_end
train straight && train split --set max_steps=16 && train split --resume latest
if same_bits "$WORK/straight/final.hcnn" "$WORK/split/final.hcnn"; then case_ok
else case_fail "2 epochs != 1 epoch + resume + 1 epoch: $("$HCNN" diff "$WORK/straight/final.hcnn" "$WORK/split/final.hcnn")"; fi

case_begin exact_resume_inside_epoch
train mid --set max_steps=7 && train mid --resume latest
if same_bits "$WORK/straight/final.hcnn" "$WORK/mid/final.hcnn" && grep -q 'resuming from .*batch 7, step 7' "$WORK/mid.log"; then case_ok
else case_fail "$(tail -n 3 "$WORK/mid.log")"; fi

case_begin resume_keeps_epoch_metrics
want=$(grep '^epoch=1 ' "$WORK/straight.log" | tr ' ' '\n' | grep -E '^(train_loss|train_acc|test_acc)=')
got=$(grep '^epoch=1 ' "$WORK/mid.log" | tail -n 1 | tr ' ' '\n' | grep -E '^(train_loss|train_acc|test_acc)=')
if [ -n "$want" ] && [ "$want" = "$got" ]; then case_ok; else case_fail "straight: $want, resumed: $got"; fi

# a resume with nothing left to train (epochs or max_steps reached) takes
# no step and writes the checkpoint again with its position inside the
# epoch and that epoch's sums: resumed again to the end, the same bits and
# the same epoch line as straight through (it was rewritten at the epoch's
# first batch, and max_steps took one more step)
case_begin resume_with_nothing_left_keeps_position
train left --set max_steps=23 && train left --set epochs=1 --resume latest &&
    train left --set max_steps=20 --resume latest && train left --resume latest
want=$(grep '^epoch=2 ' "$WORK/straight.log" | tr ' ' '\n' | grep -E '^(step|train_loss|train_acc|test_acc)=')
got=$(grep '^epoch=2 ' "$WORK/left.log" | tail -n 1 | tr ' ' '\n' | grep -E '^(step|train_loss|train_acc|test_acc)=')
if [ "$(grep -c '^hcnn: nothing to train: .*(epoch 2, batch 7)$' "$WORK/left.log")" -eq 2 ] &&
    [ "$(grep -c 'resuming from .*: epoch 2, batch 7, step 23$' "$WORK/left.log")" -eq 3 ] &&
    [ -n "$want" ] && [ "$want" = "$got" ] && same_bits "$WORK/straight/final.hcnn" "$WORK/left/final.hcnn"; then
    case_ok
else
    case_fail "straight: $(echo $want), resumed: $(echo $got): $(grep -E 'resuming|nothing|^epoch=' "$WORK/left.log" | head -n 8)"
fi

# one epoch in a strategy, then the second epoch serially vs in the same strategy
cross() { # name, np, strategy args...
    local name=$1 np=$2
    shift 2
    local sets=() kv
    for kv in "$@"; do sets+=(--set "$kv"); done
    "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=1 "$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/$name" \
        --set max_steps=16 "${sets[@]}" >"$WORK/$name.log" 2>&1 || return 1
    mkdir -p "$WORK/$name-serial" "$WORK/$name-stay"
    cp "$WORK/$name/final.hcnn" "$WORK/$name-serial/ckpt-s0000000016.hcnn"
    cp "$WORK/$name/final.hcnn" "$WORK/$name-stay/ckpt-s0000000016.hcnn"
    train "$name-serial" --resume latest || return 1
    "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS=1 "$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/$name-stay" \
        "${sets[@]}" --resume latest >>"$WORK/$name.log" 2>&1
}
# precision bf16 (issue 38): the checkpoint is the same FP32 state
# (master weights, momentum, statistics) in either precision, so a bf16 run
# resumes in FP32 and the reverse; and a bf16 run split by a resume is the
# same bits as straight through
case_begin resume_across_precisions
bf16_state
if [ "$BF16_STATE" = run ]; then
    train p16 --set precision=bf16 --set max_steps=5 &&
        train p16 --set precision=fp32 --set max_steps=10 --resume latest &&
        train p16 --set precision=bf16 --resume latest &&
        train s16 --set precision=bf16 && train s16m --set precision=bf16 --set max_steps=7 &&
        train s16m --set precision=bf16 --resume latest
    if [ -f "$WORK/p16/final.hcnn" ] && grep -q 'resuming from .*step 10' "$WORK/p16.log" &&
        same_bits "$WORK/s16/final.hcnn" "$WORK/s16m/final.hcnn"; then case_ok
    else case_fail "$(tail -n 3 "$WORK/p16.log") $("$HCNN" diff "$WORK/s16/final.hcnn" "$WORK/s16m/final.hcnn" 2>&1 | tail -n 1)"; fi
elif [ "$BF16_STATE" = fail ]; then case_fail "this CPU shows bf16 instructions, yet: $BF16_WHY"
else case_skip "precision bf16 does not run here: $BF16_WHY"; fi

case_begin resume_pipeline_as_serial
if cross pipe 2 strategy=pipeline stages=2 microbatches=3; then same_as pipe-stay pipe-serial
else case_fail "$(tail -n 3 "$WORK/pipe.log")"; fi
case_begin resume_data_parallel_as_serial
if cross dp 2 strategy=data; then same_as dp-stay dp-serial
else case_fail "$(tail -n 3 "$WORK/dp.log")"; fi
case_begin resume_serial_as_pipeline
mkdir -p "$WORK/s2p"
cp "$WORK/split/ckpt-s0000000016.hcnn" "$WORK/s2p/" 2>/dev/null || train s2p --set max_steps=16
"${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS=1 "$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/s2p" \
    --set strategy=pipeline --set stages=2 --resume "$WORK/s2p/ckpt-s0000000016.hcnn" >"$WORK/s2p.log" 2>&1
mkdir -p "$WORK/s2p-ref"; cp "$WORK/straight/final.hcnn" "$WORK/s2p-ref/final.hcnn"
same_as s2p-ref s2p

# every rank loads the checkpoint from its own file system (here its own
# working directory, as from a node-local checkpoint_dir): copies that
# differ (the same step, other tensors) are refused on every rank before a
# step (a pipeline's stages each continued another copy's blocks, exit 0)
case_begin resume_refuses_different_copies_on_ranks
train lr01 --set lr=0.01
mkdir -p "$WORK/r0" "$WORK/r1"
cp "$WORK/straight/final.hcnn" "$WORK/r0/ck.hcnn"
cp "$WORK/lr01/final.hcnn" "$WORK/r1/ck.hcnn"
args=(train "${BASE[@]}" --set strategy=pipeline --set stages=2 --set epochs=3
    --set checkpoint_dir="$WORK/rx" --resume ck.hcnn)
"${MPIRUN[@]}" -x OMP_NUM_THREADS=1 -np 1 -wdir "$WORK/r0" "$HCNN" "${args[@]}" : \
    -np 1 -wdir "$WORK/r1" "$HCNN" "${args[@]}" >"$WORK/rx.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q 'the ranks loaded different copies of checkpoint ck.hcnn .*: rank 1 differs from rank 0 (rank 1.s is at step 32' "$WORK/rx.log" &&
    ! grep -q '^epoch=' "$WORK/rx.log" && [ ! -e "$WORK/rx/final.hcnn" ]; then
    case_ok
else
    case_fail "exit $rc (expected 1): $(grep -v '^hcnn: [mdcp]' "$WORK/rx.log" | head -n 4)"
fi

case_begin signal_checkpoints_and_resumes_exactly
"$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/sig" --set epochs=400 --set checkpoint_every=0 >"$WORK/sig.log" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q '^epoch=' "$WORK/sig.log" && break; sleep 0.1; done
kill -USR1 "$pid"
wait "$pid"
rc=$?
"$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/sig" --set epochs=400 --resume latest >>"$WORK/sig.log" 2>&1
"$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/sig40" --set epochs=400 >"$WORK/sig40.log" 2>&1
if [ $rc -eq 75 ] && grep -q 'SIGUSR1 received' "$WORK/sig.log" && same_bits "$WORK/sig/final.hcnn" "$WORK/sig40/final.hcnn"; then
    case_ok
else
    case_fail "exit $rc (want 75); $(grep -E 'SIGUSR1|checkpoint=|resuming' "$WORK/sig.log")"
fi

# SIGUSR1 to mpirun (under timeout), which forwards it to every rank
usr1_under_mpirun() { # name, strategy args...
    local name=$1
    shift
    local sets=() kv
    for kv in "$@"; do sets+=(--set "$kv"); done
    case_begin "$name"
    "${MPIRUN[@]}" -np 2 "$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/$name" "${sets[@]}" \
        --set epochs=200 --set checkpoint_every=0 >"$WORK/$name.log" 2>&1 &
    local pid=$! rc
    for _ in $(seq 300); do grep -q '^epoch=' "$WORK/$name.log" && break; sleep 0.1; done
    kill -USR1 "$(pgrep -P "$pid" mpirun)"
    wait "$pid"
    rc=$?
    if [ $rc -eq 75 ] && ls "$WORK/$name"/ckpt-s*.hcnn >/dev/null 2>&1 && grep -q 'received' "$WORK/$name.log"; then case_ok
    else case_fail "exit $rc: $(tail -n 4 "$WORK/$name.log")"; fi
}
usr1_under_mpirun sigusr1_under_mpirun strategy=data
usr1_under_mpirun sigusr1_pipeline_under_mpirun strategy=pipeline stages=2
# SIGUSR1 to rank 1 alone: the data-parallel ranks' agreement rides on the
# first gradient bucket (grad_sync.h); both must stop after the same step
case_begin sigusr1_one_rank_data
"${MPIRUN[@]}" -np 2 "$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/one" --set strategy=data \
    --set epochs=200 --set checkpoint_every=0 >"$WORK/one.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q '^epoch=' "$WORK/one.log" && break; sleep 0.1; done
rank1=""
for p in $(pgrep -f "hcnn.* train .*checkpoint_dir=$WORK/one"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && rank1=$p
done
[ -n "$rank1" ] && kill -USR1 "$rank1"
wait "$pid"
rc=$?
if [ -n "$rank1" ] && [ $rc -eq 75 ] && ls "$WORK/one"/ckpt-s*.hcnn >/dev/null 2>&1 &&
    grep -q 'SIGUSR1 received' "$WORK/one.log"; then case_ok
else case_fail "rank 1 pid '$rank1', exit $rc: $(tail -n 4 "$WORK/one.log")"; fi
# with batch-norm: each rank's running statistics are its own until they are
# averaged at the end of an epoch; a signal inside an epoch must average them
# too before the replicas are compared (it ended in "replicas diverged",
# exit 1, no checkpoint)
case_begin sigusr1_batchnorm_data_under_mpirun
"${MPIRUN[@]}" -np 2 "$HCNN" train --config "$HCNN_SRCDIR/configs/synthetic_resnet.yaml" -q --set csv= \
    --set strategy=data --set checkpoint_dir="$WORK/bnsig" --set epochs=200 --set checkpoint_every=0 \
    --set blas_kernels=env >"$WORK/bnsig.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q '^epoch=' "$WORK/bnsig.log" && break; sleep 0.1; done
kill -USR1 "$(pgrep -P "$pid" mpirun)"
wait "$pid"
rc=$?
if [ $rc -eq 75 ] && ls "$WORK/bnsig"/ckpt-s*.hcnn >/dev/null 2>&1; then case_ok
else case_fail "exit $rc: $(tail -n 4 "$WORK/bnsig.log")"; fi

case_begin sigkill_while_writing_keeps_a_loadable_checkpoint
"$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/kill" --set epochs=100000 --set checkpoint_every=1 \
    --set checkpoint_keep=1 >"$WORK/kill.log" 2>&1 &
pid=$!
# killed once a first checkpoint is in place (a slow start under a sanitizer
# is waited for), half a second later: among the next checkpoints' writes
for _ in $(seq 600); do ls "$WORK/kill"/ckpt-s*.hcnn >/dev/null 2>&1 && break; sleep 0.1; done
sleep 0.5
kill -KILL "$pid"
wait "$pid" 2>/dev/null
if "$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/kill" --set epochs=100000 --set max_steps=1 \
       --resume latest >"$WORK/kill2.log" 2>&1; then
    # max_steps=1 is already behind: the resumed run only rewrites the checkpoint
    case_ok
else
    case_fail "$(tail -n 3 "$WORK/kill2.log")"
fi

case_begin checkpoint_every_and_keep
train keep --set epochs=5 --set checkpoint_every=1 --set checkpoint_keep=2
n=$(ls "$WORK"/keep/ckpt-s*.hcnn | wc -l)
if [ "$n" -eq 2 ] && [ -f "$WORK/keep/ckpt-s0000000080.hcnn" ] && [ -f "$WORK/keep/ckpt-s0000000064.hcnn" ]; then case_ok
else case_fail "$(ls "$WORK/keep")"; fi

case_begin resume_refuses_other_model
if "$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/keep" --set model.blocks.3.out=12 --resume latest >"$WORK/other.log" 2>&1; then
    case_fail "resumed a checkpoint of another model"
elif grep -qE "differs from the configured model|belongs to another run .*differ in the model" "$WORK/other.log"; then case_ok
else case_fail "$(cat "$WORK/other.log")"; fi

# --resume FILE is held to the same match (it was refused only as it loaded,
# by the model's hash: exit 1, without the runs' description)
case_begin resume_file_refuses_other_model
"$HCNN" train "${BASE[@]}" --set checkpoint_dir= --set model.blocks.3.out=12 \
    --resume "$WORK/keep/final.hcnn" >"$WORK/otherf.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "keep/final.hcnn belongs to another run .*: they differ in the model" "$WORK/otherf.log"; then
    case_ok
else case_fail "exit $rc (expected 2): $(cat "$WORK/otherf.log")"; fi

case_begin resume_latest_without_checkpoints
if "$HCNN" train "${BASE[@]}" --set checkpoint_dir="$WORK/empty" --resume latest >"$WORK/empty.log" 2>&1; then
    case_fail "resumed from nothing"
elif grep -q "no checkpoint" "$WORK/empty.log"; then case_ok
else case_fail "$(cat "$WORK/empty.log")"; fi

case_begin diff_tolerance
"$HCNN" diff "$WORK/straight/final.hcnn" "$WORK/straight/final.hcnn" >"$WORK/d1" && d1=ok
"$HCNN" diff "$WORK/straight/final.hcnn" "$WORK/keep/final.hcnn" >"$WORK/d2"; d2=$?
if [ "${d1:-}" = ok ] && [ $d2 -eq 1 ] && grep -q 'within_tol=no' "$WORK/d2"; then case_ok
else case_fail "$(cat "$WORK/d1" "$WORK/d2")"; fi

case_begin export_import_round_trip
if "$HCNN" export "$WORK/straight/final.hcnn" "$WORK/npy" >/dev/null &&
   [ -f "$WORK/npy/conv1.weight.npy" ] && grep -q '^conv1.weight float32 8x1x3x3$' "$WORK/npy/manifest.txt" &&
   "$HCNN" import "$WORK/npy" --config "$CFG" -o "$WORK/imported/model.hcnn" >/dev/null &&
   "$HCNN" diff "$WORK/straight/final.hcnn" "$WORK/imported/model.hcnn" --model-only >"$WORK/rt.diff" &&
   grep -q 'max_abs_diff=0 ' "$WORK/rt.diff" &&
   "$HCNN" eval --config "$CFG" --checkpoint "$WORK/imported/model.hcnn" >/dev/null; then
    case_ok
else
    case_fail "$(cat "$WORK/rt.diff" 2>/dev/null)"
fi
# -o naming a FIFO (or a device: -o /dev/null as root): refused, left as
# it was (the rename of the temporary file replaced it with a regular file)
case_begin import_over_a_fifo
mkfifo "$WORK/out.fifo"
timeout -k 5 60 "$HCNN" import "$WORK/npy" --config "$CFG" -o "$WORK/out.fifo" >/dev/null 2>"$WORK/fifo.err"
rc=$?
if [ $rc -eq 1 ] && [ -p "$WORK/out.fifo" ] &&
    grep -q 'out.fifo is a pipe or FIFO (expected a regular file or a new name' "$WORK/fifo.err"; then
    case_ok
else
    case_fail "exit $rc (expected 1), $(ls -l "$WORK/out.fifo"): $(head -n 2 "$WORK/fifo.err")"
fi
# -o naming a symbolic link: its target is written, the link stays; a
# dangling one is refused (replacing the link would lose it)
case_begin import_through_a_link
: >"$WORK/target.hcnn"
ln -s "$WORK/target.hcnn" "$WORK/link.hcnn"
ln -s "$WORK/nowhere/x.hcnn" "$WORK/dangling.hcnn"
"$HCNN" import "$WORK/npy" --config "$CFG" -o "$WORK/link.hcnn" >/dev/null 2>&1
rc=$?
"$HCNN" import "$WORK/npy" --config "$CFG" -o "$WORK/dangling.hcnn" >/dev/null 2>"$WORK/dangling.err"
rc2=$?
if [ $rc -eq 0 ] && [ -L "$WORK/link.hcnn" ] && [ -s "$WORK/target.hcnn" ] &&
    same_bits "$WORK/target.hcnn" "$WORK/imported/model.hcnn" && [ $rc2 -eq 1 ] && [ -L "$WORK/dangling.hcnn" ] &&
    grep -q 'dangling.hcnn is a symbolic link whose target cannot be resolved' "$WORK/dangling.err"; then
    case_ok
else
    case_fail "exit $rc, $rc2: $(ls -l "$WORK/link.hcnn" "$WORK/target.hcnn" "$WORK/dangling.hcnn"): $(cat "$WORK/dangling.err")"
fi
rm -f "$WORK/npy/fc.bias.npy"
expect_fail import_missing_tensor "fc.bias" "$HCNN" import "$WORK/npy" --config "$CFG" -o "$WORK/imported/bad.hcnn"

# rows written after the checkpoint a run resumes (its process killed
# before the next checkpoint: here the later checkpoints removed) are moved
# to rows.csv.cut and written again, not left twice under the same run_id
case_begin resume_cuts_rows_past_its_checkpoint
ROWS=(--set epochs=3 --set checkpoint_every=1 --set checkpoint_keep=3 --set csv="$WORK/rows.csv")
train rows "${ROWS[@]}" &&
    rm -f "$WORK/rows/final.hcnn" "$WORK/rows/ckpt-s0000000032.hcnn" "$WORK/rows/ckpt-s0000000048.hcnn" &&
    train rows "${ROWS[@]}" --resume latest
steps=$(tail -n +2 "$WORK/rows.csv" | cut -d, -f12 | paste -sd ' ')
runs=$(tail -n +2 "$WORK/rows.csv" | cut -d, -f1 | sort -u | wc -l)
if [ "$steps" = "16 32 48" ] && [ "$runs" -eq 1 ] &&
    grep -q "had 2 rows of run .* past its checkpoint's step 16 (up to step 48, .*moved to .*rows.csv.cut" "$WORK/rows.log" &&
    [ "$(cut -d, -f12 "$WORK/rows.csv.cut" | paste -sd ' ')" = "32 48" ]; then
    case_ok
else case_fail "steps '$steps' (expected '16 32 48'), $runs run(s): $(grep -E 'warning|resuming' "$WORK/rows.log")"; fi

case_begin csv_columns_and_config
"$HCNN" train "${BASE[@]}" --set checkpoint_dir= --set csv="$WORK/m/run.csv" >/dev/null 2>&1
want="run_id,git_commit,timestamp,strategy,ranks,stages,replicas,threads,batch_size,microbatches,epoch,step,lr,train_loss,train_acc,test_loss,test_acc,images_per_s,epoch_time_s,eval_time_s,compute_s,compute_s_min,compute_s_max,comm_wait_s,comm_wait_s_min,comm_wait_s_max,data_wait_s,data_wait_s_min,data_wait_s_max,bubble_s,bubble_s_min,bubble_s_max,allreduce_hidden,peak_rss_mb"
if [ "$(head -n 1 "$WORK/m/run.csv")" = "$want" ] && [ "$(wc -l <"$WORK/m/run.csv")" -eq 3 ] &&
   "$HCNN" train --config "$WORK/m/run.config.yaml" -q --set epochs=1 --set max_steps=1 --set csv= >/dev/null 2>&1; then
    case_ok
else
    case_fail "$(head -n 2 "$WORK/m/run.csv")"
fi
# with OpenBLAS the configuration beside the csv names the kernels the run
# loaded (not auto), so that it reproduces the rows bit for bit
case_begin csv_config_names_the_kernels
if ! "$HCNN" --version | grep -q '^BLAS: OpenBLAS'; then
    case_skip "not OpenBLAS: no kernels to name"
elif grep -qE '^blas_kernels: [A-Za-z0-9_]+$' "$WORK/m/run.config.yaml" &&
     ! grep -qE '^blas_kernels: (auto|env)$' "$WORK/m/run.config.yaml"; then
    case_ok
else
    case_fail "$(grep blas_kernels "$WORK/m/run.config.yaml")"
fi

finish
