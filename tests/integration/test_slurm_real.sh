#!/usr/bin/env bash
# The batch jobs of slurm/ under a REAL Slurm (Debian's slurm-wlm 22.05 and
# munge) on this host, started by scripts/slurm-local.sh and stopped at the
# end (also on a failure): one node (this host, its CPUs), jobs submitted
# with sbatch by an ordinary user (HCNN_SLURM_USER, default hcnnslurm,
# created with useradd when missing and removed again) from a copy of what
# the jobs read -- slurm/, configs/, scripts/hcnn-mpirun, scripts/sweep.sh and
# plot.sh, and the program as ./hcnn -- in a directory that user owns.  Every
# job is sized for one node on the sbatch command line and trains the tiny
# synthetic config for seconds; every wait is bounded.  tests/integration/test_slurm.sh
# covers the same scripts under stand-ins; this test shows that Slurm itself
# runs them: srun steps with PMIx, OpenMPI's mpirun inside an allocation,
# Slurm's signals, requeue and cancellation.
#
# Cases: train.sbatch serially (one srun task), data parallel on 2 ranks
# through srun and through mpirun; USR1 to the batch script (scancel -s
# USR1 -b): checkpoint, status 75, the job requeues itself, and the requeued
# job resumes from that checkpoint and completes; scancel: status 75 and a
# checkpoint; the strong-scaling sweep (rank counts above the one node are
# dropped); gpu.sbatch on a node without GPUs (--gres=none): its refusal of
# the CPU build and, for a stand-in CUDA build, of the node (no nvidia-smi);
# a cluster whose MpiDefault is none: the job gives srun --mpi=pmix itself.
#
# Needs root (it starts the daemons and creates the user).  Without root or
# the packages (apt-get install slurm-wlm munge), or when the daemons do not
# come up, the whole test is one skipped case saying why -- a failed case
# with HCNN_REQUIRE_REAL_SLURM=1 (CI).  About 1-2 minutes on 2 cores.  By hand:
#   HCNN=/path/to/hcnn HCNN_SRCDIR=. bash tests/integration/test_slurm_real.sh
. "${HCNN_SRCDIR:-.}/tests/lib.sh"

SRC=$(cd "$HCNN_SRCDIR" && pwd)
HCNN=$(cd "$(dirname "$HCNN")" && pwd)/$(basename "$HCNN")
LOCAL=$SRC/scripts/slurm-local.sh
RUSER=${HCNN_SLURM_USER:-hcnnslurm}
# the jobs' settings come from each case only
unset CONFIG STRATEGY RUN_NAME RUN_DIR LAUNCHER SRUN_MPI MPIRUN_ARGS AUTO_REQUEUE NP SCALING RANKS REPEATS \
    EPOCHS SYNTHETIC TRAIN_SAMPLES TEST_SAMPLES STRATEGIES STAGES MICROBATCHES WEAK STRONG_BATCH OUT FORCE \
    RUN_TIMEOUT LIKWID_GROUPS STEPS MARKERS LIKWID_CPUS GPU_SET GPU_BIND CUDA_VISIBLE_DEVICES HCNN_SCALING_JOB

# ---- cleanup: the local Slurm, the user we created, WORK -------------------------
SLURM_UP=0 USER_MADE=0
# shellcheck disable=SC2317  # run by the trap
cleanup() {
    if [ "$SLURM_UP" = 1 ]; then "$LOCAL" stop >>"$WORK/slurm-local.log" 2>&1; SLURM_UP=0; fi
    if [ "$USER_MADE" = 1 ] && ! pgrep -u "$RUSER" >/dev/null 2>&1; then userdel "$RUSER" >/dev/null 2>&1; fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# cannot WHY: no real Slurm here: one skipped case (a failed one where CI
# requires it), and the end
cannot() {
    case_begin real_slurm
    if [ "${HCNN_REQUIRE_REAL_SLURM:-0}" = 1 ]; then case_fail "$* (HCNN_REQUIRE_REAL_SLURM=1)"
    else case_skip "$*"; fi
    finish
}
[ "$(id -u)" -eq 0 ] || cannot "not root: starting slurmctld, slurmd and munged needs root"
command -v runuser >/dev/null || cannot "runuser not found (util-linux)"
command -v mpirun >/dev/null || cannot "mpirun not found (Debian package openmpi-bin)"

# start_slurm MPI-DEFAULT: the local Slurm up and SLURM_CONF exported, or
# the reason in WHY (and status 77 when it cannot run here)
start_slurm() {
    local out rc
    out=$("$LOCAL" start --mpi-default "$1" 2>"$WORK/start.err")
    rc=$?
    cat "$WORK/start.err" >>"$WORK/slurm-local.log"
    if [ "$rc" -eq 0 ] && [[ "$out" == "export SLURM_CONF="* ]]; then
        export SLURM_CONF=${out#export SLURM_CONF=}
        SLURM_UP=1
        return 0
    fi
    WHY="scripts/slurm-local.sh start exited $rc: $(grep . "$WORK/start.err" | tail -n 1)"
    return "$rc"
}
stop_slurm() { "$LOCAL" stop >>"$WORK/slurm-local.log" 2>&1; SLURM_UP=0; }

# ---- the user and the submit directory ----------------------------------------------
if ! id "$RUSER" >/dev/null 2>&1; then
    useradd -M -d /nonexistent -s /bin/bash "$RUSER" >/dev/null 2>&1 || cannot "useradd $RUSER failed"
    USER_MADE=1
fi
chmod 755 "$WORK"
TREE=$WORK/tree
mkdir -p "$TREE/scripts" "$TREE/results" "$TREE/runs"
cp -r "$SRC/slurm" "$SRC/configs" "$TREE/"
cp "$SRC/scripts/hcnn-mpirun" "$TREE/scripts/"
cp "$SRC/scripts/sweep.sh" "$SRC/scripts/plot.sh" "$TREE/scripts/"
cp "$HCNN" "$TREE/hcnn"
# the preemption case's config: trains until stopped; the test sets its
# max_steps after the first run's checkpoint, for the requeued run to finish
sed 's/^epochs: .*/epochs: 100000/' "$SRC/configs/synthetic_small.yaml" >"$TREE/configs/preempt.yaml"
echo "max_steps: 0" >>"$TREE/configs/preempt.yaml"
# a stand-in for a CUDA build: the CPU program behind a --version naming CUDA
cat >"$TREE/hcnn-cuda" <<EOF
#!/usr/bin/env bash
if [ "\${1:-}" = --version ]; then "$TREE/hcnn" --version | grep -v '^CUDA:'; echo "CUDA: runtime 13.0, cuBLAS 13.1.0, cuDNN none (stand-in for tests/integration/test_slurm_real.sh)"; exit 0; fi
exec "$TREE/hcnn" "\$@"
EOF
chmod +x "$TREE/hcnn-cuda"
CPU_BUILD=$(cpu_build_of "$TREE/hcnn" "$TREE") # a --with-cuda build: a stand-in
chmod -R u+w "$TREE" # (a read-only source tree: make distcheck)
chown -R "$RUSER:" "$TREE"

# a sanitizer build (tests/sanitizers/run.sh): the jobs' hcnn gets the same
# options, its reports go where this user can write, and at the end into
# the directory run.sh looks in
SAN_ENV=() SAN_DIR="" SAN_TO=""
if [ -n "${ASAN_OPTIONS:-}${UBSAN_OPTIONS:-}${LSAN_OPTIONS:-}" ]; then
    SAN_DIR=$WORK/sanitizers
    mkdir -p "$SAN_DIR" && chmod 1777 "$SAN_DIR"
    SAN_TO=$(printf '%s\n' "${ASAN_OPTIONS:-}:${UBSAN_OPTIONS:-}" | tr ':' '\n' | sed -n 's/^log_path=//p' | tail -n 1)
    supp=$(printf '%s\n' "${LSAN_OPTIONS:-}" | tr ':' '\n' | sed -n 's/^suppressions=//p' | tail -n 1)
    extra=""
    if [ -n "$supp" ] && [ -f "$supp" ]; then cp "$supp" "$SAN_DIR/lsan.supp"; chmod 644 "$SAN_DIR/lsan.supp"; extra=":suppressions=$SAN_DIR/lsan.supp"; fi
    for v in ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS; do
        if [ -n "${!v:-}" ]; then
            o="${!v}:log_path=$SAN_DIR/report"
            [ "$v" = LSAN_OPTIONS ] && o="$o$extra"
            SAN_ENV+=("$v=$o")
        fi
    done
fi
san_collect() {
    [ -n "$SAN_DIR" ] && [ -n "$SAN_TO" ] || return 0
    local f
    for f in "$SAN_DIR"/report*; do [ -f "$f" ] && cp "$f" "$SAN_TO.slurm-job.$(basename "$f")"; done
}

# ---- the local Slurm ------------------------------------------------------------------
start_slurm pmix
rc=$?
if [ "$rc" -ne 0 ]; then
    if [ "$rc" -eq 77 ]; then cannot "$WHY"; fi
    case_begin real_slurm
    case_fail "$WHY"
    finish
fi

# ---- submitting and watching jobs ---------------------------------------------------------
# as_user CMD...: CMD as $RUSER in the submit directory, with a clean
# environment (sbatch passes the submitter's environment to the job)
# shellcheck disable=SC2016  # $0 and $@ of the inner bash
as_user() {
    runuser -u "$RUSER" -- env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$TREE" USER="$RUSER" LOGNAME="$RUSER" \
        LANG=C.UTF-8 SLURM_CONF="$SLURM_CONF" XDG_CACHE_HOME="$TREE/.cache" ${SAN_ENV[@]+"${SAN_ENV[@]}"} \
        bash -c 'cd "$0" && exec "$@"' "$TREE" "$@"
}
# submit NAME JOB [VAR=VALUE...] [-- ARGS...]: sbatch --parsable of
# slurm/JOB.sbatch with the job's settings VARs, the sbatch options of the
# array SB (always the size: the scripts ask for 4 nodes of 64 CPUs), ARGS to
# the script; JOBID and the job's log LOG (slurm-<name>-<id>.out in the
# submit directory, or "" when it cannot be found), else 1
submit() {
    local name=$1 job=$2 vars=() out
    shift 2
    while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    JOBID="" LOG=""
    out=$(as_user env ${vars[@]+"${vars[@]}"} sbatch --parsable "${SB[@]}" "slurm/$job.sbatch" "$@" 2>&1)
    JOBID=${out%%;*}
    if ! [[ "$JOBID" =~ ^[0-9]+$ ]]; then
        SUBMIT_ERR=$out
        JOBID=""
        return 1
    fi
    LOG=$(job_field "$JOBID" StdOut)
    echo "# $name: job $JOBID ($job.sbatch ${SB[*]})"
}
# job_field ID FIELD: FIELD of `scontrol show job` (StdOut, JobState, ExitCode,
# Restarts, ...)
job_field() { timeout 10 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
# wait_end ID LIMIT: until the job has ended (or LIMIT seconds), then
# STATE, EXIT (ExitCode status:signal), RESTARTS; 1 on a timeout, the job cancelled
wait_end() {
    local id=$1 limit=$2 t0=$SECONDS
    while :; do
        STATE=$(job_field "$id" JobState)
        case "$STATE" in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) break ;;
        esac
        if [ $((SECONDS - t0)) -ge "$limit" ]; then
            timeout 10 scancel "$id" 2>/dev/null
            EXIT="" RESTARTS=""
            return 1
        fi
        sleep 0.5
    done
    EXIT=$(job_field "$id" ExitCode)
    RESTARTS=$(job_field "$id" Restarts)
    return 0
}
# wait_log PATTERN LIMIT: the job's log has a line matching PATTERN (grep -E)
# within LIMIT seconds
wait_log() {
    local t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$2" ]; do
        grep -qE -- "$1" "$LOG" 2>/dev/null && return 0
        sleep 0.2
    done
    return 1
}
show() { # the job's state and its log's last lines (no epoch lines), for a failure
    echo "#   job $JOBID: JobState=${STATE:-?} ExitCode=${EXIT:-?} Restarts=${RESTARTS:-?} Reason=$(job_field "$JOBID" Reason)"
    grep -v '^epoch=\|^checkpoint=' "$LOG" 2>/dev/null | tail -n 15 | sed 's/^/#   /'
}
# ended NAME LIMIT WANT-STATE WANT-EXIT: the job ended within LIMIT s in
# WANT-STATE with ExitCode WANT-EXIT (a pattern), else a failed case (1)
ended() {
    if ! wait_end "$JOBID" "$2"; then
        case_fail "not ended after $2 s (JobState=$STATE): cancelled"; show; return 1
    fi
    # shellcheck disable=SC2053
    if [ "$STATE" != "$3" ] || [[ "$EXIT" != $4 ]]; then
        case_fail "JobState=$STATE ExitCode=$EXIT, not $3 $4"; show; return 1
    fi
    return 0
}
submitted() { # NAME JOB VARS... -- ARGS: submit, or a failed case (1)
    if ! submit "$@"; then case_fail "sbatch refused the job: $SUBMIT_ERR"; return 1; fi
}
newest_ckpt() { # shellcheck disable=SC2012  # names without spaces, sorted by step
    ls "$1"/ckpt-s*.hcnn 2>/dev/null | tail -n 1; }
step_of() { local n=${1##*ckpt-s}; n=${n%.hcnn}; n=${n%%-*}; echo $((10#$n)); }
loads() { timeout 60 "$HCNN" eval --config "$TREE/configs/synthetic_small.yaml" --checkpoint "$1" >/dev/null 2>&1; }

SMALL=(CONFIG=configs/synthetic_small.yaml)
TINY=(--set synthetic_train=256 --set synthetic_test=64 --set blas_kernels=env -q)
ONE=(-N1 --ntasks-per-node=1 -c1 --time=5)
TWO=(-N1 --ntasks-per-node=2 -c1 --time=5)

# ---- train.sbatch ---------------------------------------------------------------------------
case_begin train_serial_srun
SB=("${ONE[@]}")
if submitted t_serial train "${SMALL[@]}" STRATEGY=serial RUN_DIR="$TREE/runs/serial" -- "${TINY[@]}" --set epochs=2 &&
    ended t_serial 90 COMPLETED "0:0"; then
    if [ ! -f "$TREE/runs/serial/final.hcnn" ] || ! loads "$TREE/runs/serial/final.hcnn"; then
        case_fail "no final checkpoint that loads in runs/serial: $(ls "$TREE/runs/serial" 2>&1)"; show
    elif ! grep -q "^train.sbatch: .*srun --nodes=1 --ntasks=1 " "$LOG" || ! grep -q '^epoch=2 ' "$LOG"; then
        case_fail "not trained 2 epochs by one srun task"; show
    else echo "# $(grep -m1 'on 1 node(s)' "$LOG")"; case_ok; fi
fi

# two_ranks NAME VARS...: a data-parallel job of 2 ranks on the node, one epoch
two_ranks() {
    local name=$1
    shift
    SB=("${TWO[@]}")
    submitted "$name" train "${SMALL[@]}" STRATEGY=data RUN_DIR="$TREE/runs/$name" "$@" -- "${TINY[@]}" --set epochs=1 &&
        ended "$name" 90 COMPLETED "0:0" || return 1
    if ! grep -q 'strategy data on 2 ranks' "$LOG" || ! grep -q '^replica_check=ok replicas=2' "$LOG"; then
        case_fail "no 'strategy data on 2 ranks' and 'replica_check=ok replicas=2' in the log"; show; return 1
    elif [ ! -f "$TREE/runs/$name/final.hcnn" ]; then
        case_fail "no final checkpoint in runs/$name"; show; return 1
    fi
}
case_begin train_data_2_ranks_srun
if two_ranks t_srun; then
    if ! grep -q '^train.sbatch: .*srun --nodes=1 --ntasks=2 ' "$LOG"; then case_fail "not one srun step of 2 tasks"; show
    else echo "# $(grep -m1 '^replica_check' "$LOG")"; case_ok; fi
fi
case_begin train_data_2_ranks_mpirun
if two_ranks t_mpirun LAUNCHER=mpirun; then
    if ! grep -q '^train.sbatch: .*scripts/hcnn-mpirun -np 2 ' "$LOG"; then case_fail "not launched by scripts/hcnn-mpirun -np 2"; show
    else echo "# $(grep -m1 '^replica_check' "$LOG")"; case_ok; fi
fi

# ---- preemption: USR1 to the batch script -----------------------------------------------------
# A run of 2 ranks with no end (configs/preempt.yaml: 100000 epochs, no
# max_steps; checkpoints only on a stop and at the end) gets USR1 once it
# has trained an epoch; after its checkpoint (step S) and status 75 the job
# requeues itself, and the requeued job (which Slurm starts about 11 s
# later: cred_expire=10) resumes from that checkpoint with the config's
# max_steps, meanwhile set to S + 8, and completes.
case_begin preempt_usr1_checkpoint_requeue_resume
SB=("${TWO[@]}")
PRE=$TREE/runs/preempt
if submitted p_usr1 train CONFIG=configs/preempt.yaml STRATEGY=data RUN_DIR="$PRE" -- "${TINY[@]}" --set checkpoint_every=0; then
    if ! wait_log '^epoch=1 ' 90; then
        wait_end "$JOBID" 1; case_fail "no epoch trained within 90 s"; show
    else
        as_user scancel -s USR1 -b "$JOBID"
        if ! wait_log '^train.sbatch: .* hcnn ended with status' 60; then
            wait_end "$JOBID" 1; case_fail "the run did not end within 60 s of the USR1"; show
        else
            ck=$(newest_ckpt "$PRE")
            if [ -n "$ck" ]; then
                s=$(step_of "$ck")
                sed -i "s/^max_steps: .*/max_steps: $((s + 8))/" "$TREE/configs/preempt.yaml"
            fi
            if [ -z "$ck" ]; then
                wait_end "$JOBID" 1; case_fail "no checkpoint in $PRE after the USR1"; show
            elif ! grep -q '^train.sbatch: .* hcnn ended with status 75' "$LOG"; then
                wait_end "$JOBID" 1; case_fail "hcnn's status after the USR1 is not 75"; show
            elif ended p_usr1 120 COMPLETED "0:0"; then
                last=$(newest_ckpt "$PRE")
                if [ "$RESTARTS" != 1 ]; then case_fail "Restarts=$RESTARTS, not 1"; show
                elif ! grep -q "^train.sbatch: requeued job $JOBID" "$LOG"; then case_fail "no 'requeued job $JOBID' in the log"; show
                elif ! grep -q "^train.sbatch: .* job $JOBID (restart 1) " "$LOG"; then case_fail "no run of the job with restart 1"; show
                elif ! grep -q "^hcnn: resuming from $ck: " "$LOG"; then case_fail "the requeued run did not resume from $ck"; show
                elif [ "$(step_of "$last")" -ne $((s + 8)) ] || [ ! -f "$PRE/final.hcnn" ]; then
                    case_fail "newest checkpoint '$last' (want step $((s + 8))) and final.hcnn"; show
                else
                    t1=$(sed -n 's/^train.sbatch: \([0-9TZ:-]*\) hcnn ended with status 75$/\1/p' "$LOG" | head -n 1)
                    t2=$(sed -n "s/^train.sbatch: \([0-9TZ:-]*\) job $JOBID (restart 1) .*/\1/p" "$LOG" | head -n 1)
                    echo "# $(basename "$ck") -> $(basename "$last"), Restarts=$RESTARTS, started again $(($(date -d "$t2" +%s) - $(date -d "$t1" +%s))) s after the stop"
                    case_ok
                fi
            fi
        fi
    fi
fi

# ---- cancellation: scancel (TERM to every process of the job) ----------------------------------
case_begin scancel_srun_checkpoint_status_75
SB=("${TWO[@]}")
CAN=$TREE/runs/cancel
if submitted c_term train "${SMALL[@]}" STRATEGY=data RUN_DIR="$CAN" -- "${TINY[@]}" --set epochs=100000 --set checkpoint_every=0; then
    if ! wait_log '^epoch=1 ' 90; then
        wait_end "$JOBID" 1; case_fail "no epoch trained within 90 s"; show
    else
        as_user scancel "$JOBID"
        ck=""
        if ended c_term 60 CANCELLED "*"; then
            ck=$(newest_ckpt "$CAN")
            if ! grep -q '^train.sbatch: .* hcnn ended with status 75' "$LOG"; then case_fail "no 'hcnn ended with status 75' in the log"; show
            elif [ -z "$ck" ] || ! loads "$ck"; then case_fail "no checkpoint that loads in $CAN ('$ck')"; show
            elif grep -q 'requeued job' "$LOG"; then case_fail "requeued after scancel"; show
            else echo "# $(basename "$ck"); $(grep -m1 'SIGTERM received' "$LOG")"; case_ok; fi
        fi
    fi
fi

# ---- the scaling sweep ----------------------------------------------------------------------------
# one node: of RANKS "1 2" the job keeps 1 (one rank per node)
case_begin scaling_strong_sweep
SB=("${ONE[@]}")
if submitted s_strong scaling-strong "${SMALL[@]}" RANKS="1 2" REPEATS=1 EPOCHS=1 STAGES=2 TRAIN_SAMPLES=256 \
    TEST_SAMPLES=64 RUN_TIMEOUT=60 -- --set blas_kernels=env && ended s_strong 150 COMPLETED "0:0"; then
    table=$(find "$TREE/results/$JOBID" -name speedup_table.csv 2>/dev/null | head -n 1)
    if [ -z "$table" ]; then case_fail "no speedup_table.csv in results/$JOBID"; show
    elif ! grep -q "^scaling-strong.sbatch: .* strong scaling, ranks 1, " "$LOG"; then case_fail "not the strong sweep of ranks 1"; show
    else echo "# $(($(wc -l <"$table") - 1)) row(s) in ${table#"$TREE"/}"; case_ok; fi
fi

# ---- gpu.sbatch on a node without GPUs --------------------------------------------------------
# refused_job PATTERN: the job failed with status 1 and its log is exactly
# one line, "gpu.sbatch: error: ...PATTERN..."
refused_job() {
    ended "$1" 60 FAILED "1:0" || return
    if [ "$(grep -c . "$LOG")" -ne 1 ] || ! grep -qE -- "^gpu\.sbatch: error: .*$2" "$LOG"; then
        case_fail "the log is not one line 'gpu.sbatch: error: ...$2...'"; show
    else echo "# $(cat "$LOG")"; case_ok; fi
}
SB=("${ONE[@]}" --gres=none)
case_begin gpu_refuses_cpu_build
submitted g_cpu gpu "${SMALL[@]}" HCNN="$CPU_BUILD" -- "${TINY[@]}" && refused_job g_cpu "built without CUDA"
case_begin gpu_refuses_node_without_gpus
submitted g_nogpu gpu "${SMALL[@]}" HCNN=./hcnn-cuda -- "${TINY[@]}" &&
    refused_job g_nogpu "nvidia-smi (not found|sees no GPU|lists no GPU)"

# ---- a cluster whose MpiDefault is none ------------------------------------------------------
case_begin srun_mpi_pmix_under_mpidefault_none
stop_slurm
if ! start_slurm none; then
    case_fail "$WHY"
elif [ "$(timeout 10 scontrol show config | sed -n 's/^MpiDefault *= *//p')" != none ]; then
    case_fail "MpiDefault is not none: $(timeout 10 scontrol show config | grep MpiDefault)"
elif two_ranks m_none; then
    if ! grep -q '^train.sbatch: srun --mpi=pmix (SRUN_MPI is not set; srun --mpi=list offers: ' "$LOG" ||
        ! grep -q '^train.sbatch: .*srun --nodes=1 --ntasks=2 .*--mpi=pmix ' "$LOG"; then
        case_fail "no 'srun --mpi=pmix (SRUN_MPI is not set; ...)' and srun --mpi=pmix in the log"; show
    else echo "# $(grep -m1 'srun --mpi=pmix (SRUN_MPI' "$LOG")"; case_ok; fi
fi

stop_slurm
san_collect
finish
