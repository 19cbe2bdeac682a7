#!/usr/bin/env bash
# A checkpoint directory belongs to one run at a time, and its checkpoints
# to their runs (include/hcnn/ckpt_dir.h): a new run never deletes an
# older run's checkpoints, --resume auto never continues another run's
# weights, a directory in use is refused naming its holder, a stale lock
# is taken over, a roll back starts a new line; the model hash covers type
# parameters and older checkpoints still load; memory for checkpoints is
# reserved before the first step; no hang under an address-space limit; a
# signal on an epoch's last step keeps that epoch's line and CSV row.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/synthetic_small.yaml"
mpi_setup
export OMP_NUM_THREADS=1
# blas_kernels=env: the kernels the environment loads, no measurement
C=(--config "$CFG" -q --set threads=1 --set csv= --set checkpoint_every=1 --set blas_kernels=env)
T=(timeout -k 10 120) # -k: a hung run blocks SIGTERM (it takes it between steps)

ckpts() { (cd "$1" && ls ckpt-s*.hcnn 2>/dev/null | tr '\n' ' '); }
# runs in the background are hcnn itself (not under timeout: its pid is
# needed), ended here whatever happens
BG=""
trap 'for p in $BG; do kill -9 "$p" 2>/dev/null; done; rm -rf "$WORK"' EXIT

# ---- a new run in a directory holding an older run's later checkpoints ----
D=$WORK/shared
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$D" --set epochs=300 >"$WORK/old.log" 2>&1
old_files=$(ckpts "$D")
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$D" --set epochs=100 --set lr=0.01 \
    --set max_steps=150 >"$WORK/new.log" 2>&1
rc=$?
case_begin new_run_keeps_its_checkpoints
# its newest checkpoint_keep (2) checkpoints are there: it used to delete
# each as soon as it was written (they sorted below the older run's)
last=$(sed -n 's/^checkpoint=\([^ ]*\) .*/\1/p' "$WORK/new.log" | tail -n 1)
tag=$(sed -n 's/^hcnn: checkpoints: run [0-9TZ]*-\([0-9a-f]*\),.*/\1/p' "$WORK/new.log")
mine=$(cd "$D" && ls ckpt-s*-"$tag".hcnn 2>/dev/null | wc -l)
if [ $rc -eq 0 ] && [ -n "$last" ] && [ -f "$last" ] && [ "$mine" -eq 2 ]; then case_ok
else case_fail "exit $rc; last printed '$last'; $mine of its checkpoints in $D: $(ckpts "$D")"; fi
case_begin new_run_leaves_older_run_checkpoints
missing=""
for f in $old_files; do [ -f "$D/$f" ] || missing="$missing $f"; done
if [ -n "$old_files" ] && [ -z "$missing" ]; then case_ok; else case_fail "lost:$missing (before: $old_files)"; fi

# killed after a few checkpoints: --resume auto continues that run, not the older one
"$HCNN" train "${C[@]}" --set checkpoint_dir="$D" --set epochs=100 --set lr=0.01 \
    --set max_steps=100000 >"$WORK/killed.log" 2>&1 &
pid=$!
BG="$BG $pid"
for _ in $(seq 300); do [ "$(grep -c '^checkpoint=' "$WORK/killed.log")" -ge 3 ] && break; sleep 0.05; done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
# its newest checkpoint on disk (a checkpoint= line is printed when the
# background write starts: the kill may have come before it ended)
tag=$(sed -n 's/^hcnn: checkpoints: run [0-9TZ]*-\([0-9a-f]*\),.*/\1/p' "$WORK/killed.log")
last=$(ls "$D"/ckpt-s*-"$tag".hcnn 2>/dev/null | sort | tail -n 1)
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$D" --set epochs=100 --set lr=0.01 \
    --set max_steps=100000 --set epochs=12 --resume auto >"$WORK/auto.log" 2>&1
rc=$?
case_begin resume_auto_continues_the_killed_run
got=$(sed -n 's/^hcnn: resuming from \([^:]*\): .*/\1/p' "$WORK/auto.log")
if [ $rc -eq 0 ] && [ -n "$last" ] && [ "$got" = "$last" ] &&
    grep -q '^hcnn: checkpoints: run .*continues its line' "$WORK/auto.log"; then case_ok
else case_fail "exit $rc; resumed '$got', its last checkpoint was '$last'; $(grep -E 'error|checkpoints:' "$WORK/auto.log")"; fi
case_begin takeover_removes_leftover_temporaries
# what writers killed mid-write leave: a checkpoint by hcnn_afile
# (name.tmp.<host hash>.<pid>), final.hcnn by the checkpoint writer (name.tmp.<pid>)
head -c 100000 /dev/zero >"$D/ckpt-s0000000999.hcnn.tmp.0badc0de.4242"
head -c 100000 /dev/zero >"$D/final.hcnn.tmp.4243"
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$D" --set epochs=100 --set lr=0.01 \
    --set max_steps=300 --resume auto >"$WORK/clean.log" 2>&1
if [ ! -e "$D/ckpt-s0000000999.hcnn.tmp.0badc0de.4242" ] && [ ! -e "$D/final.hcnn.tmp.4243" ] &&
    grep -q 'removed 2 temporary files' "$WORK/clean.log"; then case_ok
else case_fail "$(ls "$D"); $(grep 'temporary' "$WORK/clean.log")"; fi

expect_fail resume_auto_refuses_another_model \
    "newest checkpoint in .*belongs to another run .*differ in the model" \
    "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$D" --set model.blocks.0.out=4 --resume auto
expect_fail resume_auto_refuses_another_seed "belongs to another run .*differ in the seed" \
    "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$D" --set seed=7 --resume auto

# what killed jobs leave besides checkpoints (issue 37): their stall
# watchdogs' heartbeat directories, removed by the next run that takes the
# directory once their heartbeats are a minute old (a live job's are
# rewritten every second: kept); checkpoint_every 0 said as such in the
# header (it read "every 0 epochs")
W=$WORK/watchleft
mkdir -p "$W/.hcnn-watch-111-222" "$W/.hcnn-watch-333-444"
: >"$W/.hcnn-watch-111-222/rank-0"
: >"$W/.hcnn-watch-111-222/rank-1.tmp"
touch -d '-2 minutes' "$W/.hcnn-watch-111-222/rank-0" "$W/.hcnn-watch-111-222/rank-1.tmp" "$W/.hcnn-watch-111-222"
: >"$W/.hcnn-watch-333-444/rank-0"
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$W" --set epochs=1 --set checkpoint_every=0 >"$WORK/watchleft.log" 2>&1
rc=$?
case_begin stale_watchdog_directories_removed
if [ $rc -eq 0 ] && [ ! -e "$W/.hcnn-watch-111-222" ] && [ -e "$W/.hcnn-watch-333-444/rank-0" ] &&
    grep -q "removed 1 stall-watchdog directory (.hcnn-watch-\*) left by killed jobs" "$WORK/watchleft.log"; then case_ok
else case_fail "exit $rc; $(ls -a "$W"); $(grep hcnn: "$WORK/watchleft.log" | head -n 8)"; fi
case_begin checkpoint_every_0_said_in_the_header
if grep -q "^hcnn: checkpoints: run .*(at the end and on SIGTERM/SIGUSR1 only: checkpoint_every 0, the newest" "$WORK/watchleft.log" &&
    ! grep -q "every 0 epochs" "$WORK/watchleft.log"; then case_ok
else case_fail "$(grep '^hcnn: checkpoints' "$WORK/watchleft.log")"; fi

# ---- one run at a time ----------------------------------------------------------
B=$WORK/busy
"$HCNN" train "${C[@]}" --set checkpoint_dir="$B" --set epochs=3000 >"$WORK/busy.log" 2>&1 &
busy=$!
BG="$BG $busy"
for _ in $(seq 200); do grep -q '^epoch=' "$WORK/busy.log" && break; sleep 0.05; done
SLURM_JOB_ID=555 "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$B" --set epochs=2 \
    >"$WORK/second.out" 2>"$WORK/second.err"
rc=$?
kill -USR1 "$busy" 2>/dev/null
wait "$busy"
brc=$?
case_begin second_run_refused_naming_the_holder
host=$(uname -n)
if [ $rc -eq 1 ] && grep -qE "checkpoint_dir .* is in use by run [0-9a-fTZ-]+ on host $host \(pid $busy, Slurm job none" "$WORK/second.err" &&
    ! grep -q '^epoch=' "$WORK/second.out"; then case_ok
else case_fail "exit $rc; $(cat "$WORK/second.err")"; fi
case_begin holder_unharmed_by_the_refused_run
if [ $brc -eq 75 ] && [ -f "$B/final.hcnn" ] && [ ! -e "$B/.hcnn-lock" ] && "$HCNN" diff "$B/final.hcnn" "$B/final.hcnn" >/dev/null; then case_ok
else case_fail "holder exit $brc (want 75), $(ls -a "$B")"; fi

# the lock file of a live run deleted by hand (issue 37): the run's heartbeat
# makes it again, even when the run writes no checkpoint before its end (a
# run started later is refused, naming the live run);
# a run that took the directory in between is named, and so is what
# happened (the live run was told its heartbeat "must have lapsed")
L=$WORK/deleted
"$HCNN" train "${C[@]}" --set checkpoint_dir="$L" --set epochs=3000 --set checkpoint_every=0 >"$WORK/del_a.log" 2>&1 &
a=$!
BG="$BG $a"
for _ in $(seq 200); do grep -q '^epoch=' "$WORK/del_a.log" && break; sleep 0.05; done
rm -f "$L/.hcnn-lock"
# made again by A's next heartbeat (every 5 s; up to 30 s on a loaded machine)
for _ in $(seq 300); do grep -qx "pid=$a" "$L/.hcnn-lock" 2>/dev/null && break; sleep 0.1; done
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$L" --set epochs=2 >"$WORK/del_b.out" 2>"$WORK/del_b.err"
rc=$?
case_begin deleted_lock_made_again_by_its_run
if [ $rc -eq 1 ] && grep -q "is in use by run .* (pid $a," "$WORK/del_b.err" && kill -0 "$a" 2>/dev/null; then case_ok
else case_fail "exit $rc; $(cat "$WORK/del_b.err"); $(grep error "$WORK/del_a.log")"; fi
kill -USR1 "$a" 2>/dev/null
wait "$a"
# deleted, and another run takes it before the live run's heartbeat makes
# it again (A stopped meanwhile, so C always wins that race, however slowly
# C starts); then A's checkpoint (SIGUSR1: A writes none otherwise) finds C
# holding it
L2=$WORK/deleted2
BIG=(--set synthetic_train=32768 --set synthetic_test=64 --set checkpoint_every=0)
"$HCNN" train "${C[@]}" "${BIG[@]}" --set checkpoint_dir="$L2" --set epochs=1000 >"$WORK/del_a.log" 2>&1 &
a=$!
BG="$BG $a"
for _ in $(seq 1200); do grep -q '^hcnn: checkpoints: run' "$WORK/del_a.log" && break; sleep 0.05; done
kill -STOP "$a" # (under 60 s: longer reads as a heartbeat that lapsed)
rm -f "$L2/.hcnn-lock"
"$HCNN" train "${C[@]}" "${BIG[@]}" --set checkpoint_dir="$L2" --set epochs=1000 >"$WORK/del_c.out" 2>&1 &
c=$!
BG="$BG $c"
for _ in $(seq 1000); do
    grep -q '^hcnn: checkpoints: run\|error' "$WORK/del_c.out" && break
    sleep 0.05
done
taken=0
grep -q '^hcnn: checkpoints: run' "$WORK/del_c.out" && taken=1
kill -CONT "$a"
kill -USR1 "$a" 2>/dev/null
wait "$a"
arc=$?
[ $taken -eq 1 ] && kill -USR1 "$c" 2>/dev/null && wait "$c"
case_begin deleted_lock_taken_says_what_happened
if [ $taken -eq 1 ] && [ $arc -ne 0 ] &&
    grep -q "checkpoint_dir $L2 is no longer this run's: this run's \(lock file was deleted\|heartbeat was current ([0-9]* s old): its lock file was deleted or replaced by hand\).* run .* took it over" "$WORK/del_a.log" &&
    ! grep -q "must have lapsed" "$WORK/del_a.log"; then case_ok
else case_fail "taken $taken, exit $arc; $(grep -E 'error' "$WORK/del_a.log" "$WORK/del_c.out" | head -n 5)"; fi

# two 2-rank jobs at once on one directory: the second refused, the first
# unharmed (their stall watchdogs' heartbeat directories are their own)
P=$WORK/pair
"${MPIRUN[@]}" -np 2 "$HCNN" train "${C[@]}" --set checkpoint_dir="$P" --set strategy=data \
    --set epochs=400 >"$WORK/pair1.log" 2>&1 &
first=$!
for _ in $(seq 300); do grep -q '^epoch=' "$WORK/pair1.log" && break; sleep 0.05; done
"${MPIRUN[@]}" -np 2 "$HCNN" train "${C[@]}" --set checkpoint_dir="$P" --set strategy=data \
    --set epochs=2 >"$WORK/pair2.log" 2>&1
rc2=$?
wait "$first"
rc1=$?
case_begin two_mpi_jobs_one_directory
if [ $rc2 -ne 0 ] && [ $rc2 -lt 124 ] && grep -q 'is in use by run' "$WORK/pair2.log" && [ $rc1 -eq 0 ] &&
    grep -q '^replica_check=ok' "$WORK/pair1.log" && [ -z "$(ls -a "$P" | grep hcnn-watch)" ]; then case_ok
else case_fail "first exit $rc1, second exit $rc2; $(grep -hE 'error' "$WORK/pair1.log" "$WORK/pair2.log" | head -n 3); $(ls -a "$P")"; fi

# stale locks: a dead process on this host, an old heartbeat, the same Slurm job
lockfile() { # dir host pid job
    mkdir -p "$1"
    printf 'run_id=20260101T000000Z-abcdef\ntoken=%s %s 1.0\nhost=%s\npid=%s\nslurm_job=%s\nconfig=x.yaml\n' \
        "$2" "$3" "$2" "$3" "$4" >"$1/.hcnn-lock"
}
sh -c 'exit 0' &
dead=$!
wait "$dead"
lockfile "$WORK/dead" "$(uname -n)" "$dead" ""
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/dead" --set epochs=1 >"$WORK/dead.log" 2>&1
rc=$?
case_begin stale_lock_of_an_exited_process_taken_over
if [ $rc -eq 0 ] && grep -q "taking over the lock of run .* its process $dead on this host has exited" "$WORK/dead.log"; then case_ok
else case_fail "exit $rc; $(grep -E 'error|lock' "$WORK/dead.log")"; fi

lockfile "$WORK/old" "node-elsewhere" 4242 "777"
touch -d '-2 minutes' "$WORK/old/.hcnn-lock"
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/old" --set epochs=1 >"$WORK/oldlock.log" 2>&1
rc=$?
case_begin stale_lock_without_heartbeat_taken_over
if [ $rc -eq 0 ] && grep -q "taking over the lock of run .*host node-elsewhere .*heartbeat is [0-9]* s old" "$WORK/oldlock.log"; then case_ok
else case_fail "exit $rc; $(grep -E 'error|lock' "$WORK/oldlock.log")"; fi

# a lock that is a directory or a (dangling) symbolic link: said what it is
# (it was "taken over" three times, then "changed hands three times")
mkdir -p "$WORK/lockdir/.hcnn-lock" "$WORK/locklink"
ln -s "$WORK/nowhere" "$WORK/locklink/.hcnn-lock"
expect_fail lock_that_is_a_directory "the lock .*lockdir/.hcnn-lock of checkpoint_dir is a directory \(expected hcnn's lock" \
    "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/lockdir" --set epochs=1
expect_fail lock_that_is_a_dangling_link "the lock .*locklink/.hcnn-lock of checkpoint_dir is a symbolic link \(expected" \
    "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/locklink" --set epochs=1

lockfile "$WORK/job" "node-elsewhere" 4242 "777"
expect_fail live_lock_elsewhere_refused \
    "in use by run 20260101T000000Z-abcdef on host node-elsewhere \(pid 4242, Slurm job 777, config x.yaml\)" \
    "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/job" --set epochs=1
expect_fail check_refuses_a_directory_in_use "in use by run .* on host node-elsewhere" \
    "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/job" --check
SLURM_JOB_ID=777 "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/job" --set epochs=1 \
    >"$WORK/job.log" 2>&1
rc=$?
case_begin lock_of_the_same_slurm_job_taken_over
if [ $rc -eq 0 ] && grep -q "taking over the lock .*this Slurm job (777): a requeued job" "$WORK/job.log" &&
    [ ! -e "$WORK/job/.hcnn-lock" ]; then case_ok
else case_fail "exit $rc; $(grep -E 'error|lock' "$WORK/job.log")"; fi

# a node whose clock runs an hour ahead of the file system's (issue 37's
# fast clock, sibling): it must not read a live run's lock as an hour old
# and take the directory over.  The clock is moved by an LD_PRELOAD shim
# (time and clock_gettime); the lock's age is measured by the file
# system's clock (a file created beside it).
cat >"$WORK/ahead.c" <<'EOF_C'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
int clock_gettime(clockid_t id, struct timespec *ts)
{
    static int (*real)(clockid_t, struct timespec *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "clock_gettime");
    const int rc = real(id, ts);
    if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
        ts->tv_sec += 3600;
    return rc;
}
time_t time(time_t *t)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (t)
        *t = ts.tv_sec;
    return ts.tv_sec;
}
EOF_C
case_begin clock_ahead_does_not_take_a_live_lock
if ${CC:-cc} -shared -fPIC -o "$WORK/ahead.so" "$WORK/ahead.c" -ldl 2>"$WORK/ahead.err"; then
    pre="$WORK/ahead.so"
    asan=$(ldd "$HCNN" 2>/dev/null | sed -n 's/^[[:space:]]*libasan[^ ]* => \([^ ]*\) .*/\1/p')
    [ -n "$asan" ] && pre="$asan:$pre" # the sanitizer's runtime first
    K=$WORK/clock
    "$HCNN" train "${C[@]}" --set checkpoint_dir="$K" --set epochs=3000 >"$WORK/clock_a.log" 2>&1 &
    ka=$!
    BG="$BG $ka"
    for _ in $(seq 200); do grep -q '^epoch=' "$WORK/clock_a.log" && break; sleep 0.05; done
    LD_PRELOAD=$pre "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$K" --set epochs=2 \
        >"$WORK/clock_b.out" 2>"$WORK/clock_b.err"
    rc=$?
    kill -USR1 "$ka" 2>/dev/null
    wait "$ka"
    if [ $rc -eq 1 ] && grep -q "is in use by run .*(pid $ka,.*heartbeat [0-9][0-9]* s ago" "$WORK/clock_b.err" &&
        ! grep -q "taking over" "$WORK/clock_b.out"; then case_ok
    else case_fail "exit $rc; $(cat "$WORK/clock_b.err"; grep 'taking over' "$WORK/clock_b.out")"; fi
else
    case_skip "no C compiler for the clock shim: $(head -n 2 "$WORK/ahead.err")"
fi

# ---- rolling back starts a new line -----------------------------------------------
R=$WORK/roll
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$R" --set checkpoint_keep=10 --set epochs=6 >"$WORK/roll1.log" 2>&1
before=$(ckpts "$R")
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$R" --set checkpoint_keep=1 --set epochs=6 \
    --resume "$R/ckpt-s0000000032.hcnn" >"$WORK/roll2.log" 2>&1
rc=$?
case_begin roll_back_keeps_the_abandoned_line
missing=""
for f in $before; do [ -f "$R/$f" ] || missing="$missing $f"; done
if [ $rc -eq 0 ] && [ -z "$missing" ] && grep -q 'a new line from step 32 of .*a roll back' "$WORK/roll2.log"; then case_ok
else case_fail "exit $rc; lost:$missing; $(grep -E 'error|checkpoints:' "$WORK/roll2.log")"; fi
case_begin resume_auto_after_roll_back_takes_the_new_line
newest=$(sed -n 's/^checkpoint=\([^ ]*\) .*/\1/p' "$WORK/roll2.log" | tail -n 1)
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$R" --set epochs=7 --resume auto >"$WORK/roll3.log" 2>&1
got=$(sed -n 's/^hcnn: resuming from \([^:]*\): .*/\1/p' "$WORK/roll3.log")
if [ -n "$newest" ] && [ "$got" = "$newest" ]; then case_ok; else case_fail "resumed '$got', want '$newest'"; fi

# ---- the model hash ------------------------------------------------------------
H=$WORK/hash
LEAKY=(--set model.blocks.1.type=leaky_relu --set model.blocks.1.negative_slope=0.01)
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$H" --set epochs=1 "${LEAKY[@]}" >"$WORK/hash.log" 2>&1
expect_fail model_hash_covers_negative_slope "differs from the configured model" \
    "${T[@]}" "$HCNN" eval --config "$CFG" --set blas_kernels=env --checkpoint "$H/final.hcnn" \
    --set model.blocks.1.type=leaky_relu --set model.blocks.1.negative_slope=0.2
case_begin checkpoint_of_version_1_still_loads
mkdir -p "$WORK/v1"
cp "$HCNN_SRCDIR/tests/integration/data/ckpt-v1-small-s7.hcnn" "$WORK/v1/ckpt-s0000000007.hcnn"
"${T[@]}" "$HCNN" eval --config "$CFG" --set blas_kernels=env --checkpoint "$WORK/v1/ckpt-s0000000007.hcnn" >"$WORK/v1e.log" 2>&1
erc=$?
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/v1" --set epochs=1 --resume auto >"$WORK/v1.log" 2>&1
rc=$?
if [ $erc -eq 0 ] && [ $rc -eq 0 ] && grep -q 'resuming from .*ckpt-s0000000007.hcnn: epoch 1, batch 7, step 7' "$WORK/v1.log" &&
    grep -q 'written before run ids' "$WORK/v1.log" && [ -f "$WORK/v1/ckpt-s0000000007.hcnn" ]; then case_ok
else case_fail "eval exit $erc, resume exit $rc; $(grep -hE 'error' "$WORK/v1e.log" "$WORK/v1.log")"; fi

# ---- a mid-epoch checkpoint and a shorter epoch ----------------------------------------
"${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/mid" --set max_steps=7 >/dev/null 2>&1
expect_fail mid_epoch_position_must_exist "differ in the number of training samples" \
    "${T[@]}" "$HCNN" train "${C[@]}" --set checkpoint_dir="$WORK/mid" --set synthetic_train=100 --resume latest

# ---- a signal on an epoch's last step ---------------------------------------------------
# one batch per epoch: every step is the last of its epoch
S=(--config "$CFG" -q --set threads=1 --set blas_kernels=env --set synthetic_train=32 --set batch_size=32
   --set checkpoint_every=0 --set checkpoint_dir="$WORK/sig" --set csv="$WORK/sig.csv" --set epochs=100000)
"$HCNN" train "${S[@]}" >"$WORK/sig.log" 2>&1 &
pid=$!
BG="$BG $pid"
for _ in $(seq 200); do [ "$(grep -c '^epoch=' "$WORK/sig.log")" -ge 20 ] && break; sleep 0.05; done
kill -USR1 "$pid"
wait "$pid"
rc=$?
case_begin signal_on_last_step_keeps_the_epoch
lines=$(grep -c '^epoch=' "$WORK/sig.log")
rows=$(($(wc -l <"$WORK/sig.csv") - 1))
saved=$(sed -n 's/^checkpoint=.* epoch=\([0-9]*\) .*/\1/p' "$WORK/sig.log" | tail -n 1)
if [ $rc -eq 75 ] && [ "$lines" -eq "$saved" ] && [ "$rows" -eq "$saved" ]; then case_ok
else case_fail "exit $rc; $lines epoch lines and $rows CSV rows for $saved epochs in the checkpoint"; fi

# ---- memory limits (ulimit -v: meaningless under ASan's shadow memory) -----------------
if asan_build; then
    for n in no_hang_before_main no_hang_under_limit_in_training checkpoint_memory_reserved_up_front; do
        case_begin $n; case_skip "an --enable-sanitizers build: ulimit -v cannot hold ASan's shadow memory"
    done
# the limits below are over what hcnn maps itself: a --with-cuda build's
# libraries come on top (tests/lib.sh)
elif ! CUDA_KIB=$(cuda_libs_kib "$HCNN"); then
    for n in no_hang_before_main no_hang_under_limit_in_training checkpoint_memory_reserved_up_front; do
        case_begin $n; case_skip "readelf (Debian package binutils) is missing: the CUDA libraries' address space is unknown"
    done
else
  if ! "$HCNN" --version | grep -q '^BLAS: OpenBLAS'; then
    # the hangs are OpenBLAS's (its buffers); another BLAS fails an allocation with a message
    for n in no_hang_before_main no_hang_under_limit_in_training; do
        case_begin $n; case_skip "$("$HCNN" --version | grep '^BLAS:'): the start-up buffers and their hang are OpenBLAS's"
    done
  else
    case_begin no_hang_before_main
    # OpenBLAS maps 128 MiB per thread when it loads and used to wait forever for it
    (ulimit -v $((100000 + CUDA_KIB)); OMP_NUM_THREADS=2 timeout -k 5 20 "$HCNN" --version) >"$WORK/v.out" 2>"$WORK/v.err"
    rc=$?
    if [ $rc -eq 1 ] && grep -q 'address-space limit (ulimit -v) is .*needs a limit of at least' "$WORK/v.err"; then case_ok
    else case_fail "exit $rc (124, 137: hung); $(cat "$WORK/v.err")"; fi
    case_begin no_hang_under_limit_in_training
    # each thread's first BLAS call takes 128 MiB: it trains or says what it needs
    (ulimit -v $((600000 + CUDA_KIB)); OMP_NUM_THREADS=2 timeout -k 5 60 "$HCNN" train "${C[@]}" --set threads=2 --set epochs=1 \
        --set checkpoint_dir=) >"$WORK/l.out" 2>"$WORK/l.err"
    rc=$?
    if { [ $rc -eq 1 ] && grep -q 'OpenBLAS needs .* MiB more for its buffers' "$WORK/l.err"; } ||
        { [ $rc -eq 0 ] && grep -q '^epoch=1' "$WORK/l.out"; }; then case_ok
    else case_fail "exit $rc (124, 137: hung); $(cat "$WORK/l.err")"; fi
  fi
    case_begin checkpoint_memory_reserved_up_front
    # ResNet-18 under 2 GB (the issue's case) used to train, then find no
    # memory for its first checkpoint and end with none: now it trains and
    # checkpoints, or refuses before the first step saying what it needs
    (ulimit -v $((2000000 + CUDA_KIB)); timeout -k 5 240 "$HCNN" train --config "$HCNN_SRCDIR/configs/cifar_resnet18.yaml" -q \
        --set dataset=synthetic --set synthetic_train=256 --set synthetic_test=64 --set threads=2 \
        --set blas_kernels=env --set csv= --set max_steps=1 --set checkpoint_dir="$WORK/mem") \
        >"$WORK/m.out" 2>"$WORK/m.err"
    rc=$?
    if { [ $rc -eq 0 ] && [ -f "$WORK/mem/final.hcnn" ]; } ||
        { [ $rc -eq 1 ] && ! grep -q '^epoch=' "$WORK/m.out" && grep -qE 'raise the (memory )?limit' "$WORK/m.err"; }; then case_ok
    else case_fail "exit $rc; $(grep -c '^epoch=' "$WORK/m.out") epochs trained; $(ls "$WORK/mem" 2>/dev/null); $(cat "$WORK/m.err")"; fi
fi
finish
