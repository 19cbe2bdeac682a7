#!/usr/bin/env bash
# The batch jobs of slurm/ under a faked Slurm: each job script runs as Slurm
# runs it -- a copy from a spool directory, the SLURM_* variables of a
# 2-node allocation (one rank per node, 1 CPU per task), started outside the
# submit directory -- with tests/integration/fake-slurm/ first on PATH: srun (starts the
# tasks with mpirun, passes TERM/USR1/INT on, returns their status),
# scontrol (records requeues), likwid-perfctr (records its arguments, runs
# the command), nvidia-smi (FAKE_GPUS GPUs) and nsys (records its arguments
# and report name, runs the command).  The submit directory is a
# copy of what the jobs read (slurm/, configs/, scripts/hcnn-mpirun,
# scripts/sweep.sh and plot.sh) in a temporary directory: nothing is written
# into the source tree.
#
# Cases: every start check of every job ends it with one line naming what is
# missing and status 1 (2 for a bad setting), before anything is launched;
# USR1 and TERM to the job script, and TERM to every process of the job (as
# scancel does), under LAUNCHER=srun and LAUNCHER=mpirun: status 75 and a
# checkpoint that loads, a requeue after USR1 only; a second run of the job
# continues from the checkpoint, also with checkpoint_dir elsewhere; the
# scaling jobs (strong and weak, strong only, weak only; their defaults; TERM
# stops the sweep), the likwid job (USR1 under each launcher) and the GPU job
# (one GPU per rank; a stand-in CUDA build: the CPU program behind a
# --version that names CUDA; NSYS=1: each rank under nsys) end to end.  What no case runs: a real CUDA
# build on a GPU, real likwid-perfctr counters, real Slurm.
#
# Needs hcnn's `--version`, `train --check` and `train --resume auto`, and
# sweep.sh's --repeats/--scaling/--out.  About 50 s on 2 cores.  By hand:
#   HCNN=/path/to/hcnn HCNN_SRCDIR=. bash tests/integration/test_slurm.sh
. "${HCNN_SRCDIR:-.}/tests/lib.sh"

SRC=$(cd "$HCNN_SRCDIR" && pwd)
HCNN=$(cd "$(dirname "$HCNN")" && pwd)/$(basename "$HCNN")
FAKE=$SRC/tests/integration/fake-slurm
HOST=$(hostname)
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export XDG_CACHE_HOME=$WORK/cache # hcnn's BLAS kernel table, not in $HOME
# the jobs' settings come from each case only
unset CONFIG STRATEGY RUN_NAME RUN_DIR LAUNCHER SRUN_MPI MPIRUN_ARGS AUTO_REQUEUE NP SCALING RANKS REPEATS \
    EPOCHS SYNTHETIC TRAIN_SAMPLES TEST_SAMPLES STRATEGIES STAGES MICROBATCHES WEAK STRONG_BATCH OUT FORCE \
    RUN_TIMEOUT LIKWID_GROUPS STEPS MARKERS LIKWID_CPUS GPU_SET GPU_BIND CUDA_VISIBLE_DEVICES HCNN_SCALING_JOB \
    NSYS NSYS_DIR NSYS_ARGS FAKE_NSYS_LOG

if ! command -v mpirun >/dev/null; then
    case_begin mpirun_available
    case_fail "mpirun not found (Debian package openmpi-bin)"
    finish
fi

# ---- the submit directory and the spool --------------------------------------
TREE=$WORK/tree
mkdir -p "$TREE/scripts" "$TREE/results" "$WORK/spool" "$WORK/bin"
cp -r "$SRC/slurm" "$SRC/configs" "$TREE/"
cp "$SRC/scripts/hcnn-mpirun" "$TREE/scripts/"
cp "$SRC/scripts/sweep.sh" "$SRC/scripts/plot.sh" "$TREE/scripts/"
for f in "$SRC"/slurm/*.sbatch; do cp "$f" "$WORK/spool/$(basename "$f" .sbatch)"; done
: >"$WORK/plainfile" # a path under it cannot be created, not even by root

# a PATH of the basic commands the jobs use, without srun, mpirun,
# likwid-perfctr, nvidia-smi: minpath DIR [FAKE-TOOL...] adds those fakes
minpath() {
    local dir=$WORK/$1 t p
    shift
    mkdir -p "$dir"
    for t in bash env timeout date dirname basename nproc hostname mktemp rm mkdir grep sed awk head tail cut \
        paste tr cat ls pgrep sleep ldd nm id wc sort seq; do
        p=$(command -v "$t") && ln -sf "$p" "$dir/$t"
    done
    for t in "$@"; do ln -sf "$FAKE/$t" "$dir/$t"; done
    echo "$dir"
}

# a stand-in for the CUDA build: the CPU program behind a --version that
# names CUDA; each training rank records its rank and CUDA_VISIBLE_DEVICES
cat >"$WORK/bin/hcnn-cuda" <<EOF
#!/usr/bin/env bash
if [ "\${1:-}" = --version ]; then "$HCNN" --version | grep -v '^CUDA:'; echo "CUDA: runtime 13.0, cuBLAS 13.1.0, cuDNN none (stand-in for tests/integration/test_slurm.sh)"; exit 0; fi
case " \$* " in *" --check "*) ;; *" train "*) echo "rank=\${OMPI_COMM_WORLD_RANK:-?} cuda_visible_devices=\${CUDA_VISIBLE_DEVICES:-unset}" >>"$WORK/gpu-ranks.txt" ;; esac
exec "$HCNN" "\$@"
EOF
# a program that cannot start on this node (as a build for another one)
printf '#!/bin/sh\necho "hcnn: error while loading shared libraries: libopenblas.so.0: cannot open shared object file" >&2\nexit 127\n' >"$WORK/bin/hcnn-broken"
# ldd that also reports liblikwid (a stand-in for the --with-likwid build's link)
mkdir -p "$WORK/likwidldd"
printf '#!/bin/sh\n%s "$@"\necho "\tliblikwid.so.5.2 => /usr/lib/liblikwid.so.5.2 (stand-in)"\n' "$(command -v ldd)" >"$WORK/likwidldd/ldd"
chmod +x "$WORK/bin/"* "$WORK/likwidldd/ldd"

# ---- running a job ---------------------------------------------------------------
# The environment Slurm gives the batch script of a job on NODES nodes with
# TPN tasks per node, in the array JOBENV.  The fake nodes are all this
# machine: SLURM_NODELIST names it once with all the tasks (what OpenMPI's
# mpirun reads inside an allocation), and the batch step has its own
# SLURM_PROCID=0 and SLURM_LOCALID=0, as in Slurm.
JOBID=90100
job_env() { # NAME NODES TPN
    JOBID=$((JOBID + 1))
    local tasks=$(($2 * $3))
    JOBENV=(PATH="$FAKE:$PATH" SLURM_JOB_ID="$JOBID" SLURM_JOBID="$JOBID" SLURM_JOB_NAME="hcnn-$1"
            SLURM_SUBMIT_DIR="$TREE" SLURM_JOB_NUM_NODES="$2" SLURM_NNODES="$2" SLURM_NTASKS="$tasks"
            SLURM_NPROCS="$tasks" SLURM_NTASKS_PER_NODE="$3" SLURM_CPUS_PER_TASK=1 SLURM_NODELIST="$HOST"
            SLURM_JOB_NODELIST="$HOST" SLURM_TASKS_PER_NODE="$tasks" SLURM_JOB_CPUS_PER_NODE="$tasks"
            SLURM_RESTART_COUNT="${RESTART:-0}" SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0
            FAKE_SLURM_LOG="$WORK/$1.slurm" HCNN="$HCNN")
    : >"$WORK/$1.slurm"
}
# run_job NAME JOB NODES TPN [VAR=VALUE...] [-- ARGS...]: the job's script
# (slurm/JOB.sbatch, from the spool), started in $WORK, bounded by LIMIT
# (default 120) seconds; stdout in $WORK/NAME.out, stderr in NAME.err, the
# exit status in rc, the job id in JOBID
run_job() {
    local name=$1 job=$2 nodes=$3 tpn=$4 vars=()
    shift 4
    while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    job_env "$name" "$nodes" "$tpn"
    timeout -k 5 "${LIMIT:-120}" env -C "$WORK" "${JOBENV[@]}" "${vars[@]}" bash "$WORK/spool/$job" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err"
    rc=$?
}
# start_job: the same in the background, JOBPID the job script itself (so
# that signals reach it and nothing else); a guard kills it after 120 s
start_job() {
    local name=$1 job=$2 nodes=$3 tpn=$4 vars=()
    shift 4
    while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
    [ "${1:-}" = -- ] && shift
    job_env "$name" "$nodes" "$tpn"
    env -C "$WORK" "${JOBENV[@]}" "${vars[@]}" bash "$WORK/spool/$job" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    JOBPID=$!
    ( sleep 120; kill_tree KILL "$JOBPID" ) >/dev/null 2>&1 &
    GUARD=$!
}
end_job() { wait "$JOBPID"; rc=$?; kill "$GUARD" 2>/dev/null; wait "$GUARD" 2>/dev/null; }
kill_tree() { # SIG PID: PID and everything below it
    local c
    for c in $(pgrep -P "$2"); do kill_tree "$1" "$c"; done
    kill -s "$1" "$2" 2>/dev/null
}
# scancel_tree PID: TERM to every process of the job below PID, as scancel
# sends it: the batch script, the launcher (mpirun), the ranks -- but not the
# fake srun nor its machinery (its timeout and mpirun stand for slurmstepd,
# which Slurm does not signal): only the tasks it started.  (srun itself
# would end its tasks with SIGKILL on a TERM; the real-Slurm test,
# tests/integration/test_slurm_real.sh, shows that scancel leaves it alone.)
scancel_tree() {
    local c t m
    if [[ "$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)" == *"$FAKE/srun "* ]]; then
        for t in $(pgrep -P "$1"); do
            for m in $(pgrep -P "$t"); do
                for c in $(pgrep -P "$m"); do kill_tree TERM "$c"; done
            done
        done
        return
    fi
    for c in $(pgrep -P "$1"); do scancel_tree "$c"; done
    kill -TERM "$1" 2>/dev/null
}
wait_for() { # FILE PATTERN: up to 60 s, while the started job lives
    for _ in $(seq 1 600); do
        grep -qE -- "$2" "$1" 2>/dev/null && return 0
        kill -0 "$JOBPID" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
show() { # NAME: the job's output, for a failure message
    { cat "$WORK/$1.err"; grep -v '^epoch=\|^checkpoint=' "$WORK/$1.out" | tail -n 15; } 2>/dev/null | sed 's/^/#   /'
}
newest_ckpt() { # shellcheck disable=SC2012  # names without spaces, sorted by step
    ls "$1"/ckpt-s*.hcnn 2>/dev/null | tail -n 1; }
step_of() { local n=${1##*ckpt-s}; n=${n%.hcnn}; n=${n%%-*}; echo $((10#$n)); }
loads() { timeout 60 "$HCNN" eval --config "$TREE/configs/synthetic_small.yaml" --checkpoint "$1" >/dev/null 2>&1; }

# refused NAME STATUS PATTERN: the job ended with STATUS and exactly one line
# on stderr, "<job>: error: ..." matching PATTERN, and launched nothing
refused() {
    local name=$1 status=$2 pattern=$3
    if [ "$rc" -ne "$status" ]; then
        case_fail "exit $rc, not $status"; show "$name"
    elif [ "$(wc -l <"$WORK/$name.err")" -ne 1 ] || ! grep -qE -- "^[a-z-]+\.sbatch: error: .*$pattern" "$WORK/$name.err"; then
        case_fail "stderr is not one line '<job>: error: ...$pattern...':"; show "$name"
    elif grep -q '^srun \|^likwid-perfctr -[cC] ' "$WORK/$name.slurm" || grep -q '^epoch=' "$WORK/$name.out"; then
        case_fail "something was launched after the failed check"; show "$name"
    else
        echo "# $(cat "$WORK/$name.err")"
        case_ok
    fi
}
SMALL=(CONFIG=configs/synthetic_small.yaml)
TINY=(--set synthetic_train=256 --set synthetic_test=64 --set blas_kernels=env -q)

# ---- start checks: one line, status 1 (2: a bad setting), nothing launched ----
case_begin train_default_config_without_cifar10
run_job t_nodata train 2 1
refused t_nodata 1 "cifar10.*scripts/fetch-data.sh cifar10.*CONFIG=configs/synthetic_resnet.yaml"

case_begin train_missing_program
run_job t_noprog train 2 1 "${SMALL[@]}" HCNN="$WORK/no-such-hcnn"
refused t_noprog 1 "no-such-hcnn is not an executable file: build it"

case_begin train_program_does_not_run
run_job t_broken train 2 1 "${SMALL[@]}" HCNN="$WORK/bin/hcnn-broken"
refused t_broken 1 "hcnn-broken does not run on .*libopenblas"

case_begin train_missing_srun
run_job t_nosrun train 2 1 "${SMALL[@]}" PATH="$(minpath p_nosrun)"
refused t_nosrun 1 "srun not found on PATH.*LAUNCHER=mpirun"

case_begin train_missing_mpirun
run_job t_nompirun train 2 1 "${SMALL[@]}" LAUNCHER=mpirun PATH="$(minpath p_nompirun srun)"
refused t_nompirun 1 "mpirun not found on PATH"

case_begin train_bad_launcher
run_job t_badl train 2 1 "${SMALL[@]}" LAUNCHER=mpiexec
refused t_badl 2 "LAUNCHER must be srun, mpirun or none"

case_begin train_config_not_found
run_job t_nocfg train 2 1 CONFIG=configs/no_such.yaml
refused t_nocfg 2 "config configs/no_such.yaml not found"

case_begin train_bad_setting_refused_by_hcnn
run_job t_badset train 2 1 "${SMALL[@]}" -- --set lr=fast
refused t_badset 2 "hcnn refuses the settings: .*lr"

case_begin train_run_dir_not_writable
run_job t_rundir train 2 1 "${SMALL[@]}" RUN_DIR="$WORK/plainfile/run"
refused t_rundir 1 "run directory .*plainfile/run cannot be written: .*plainfile is not a directory"

case_begin train_checkpoint_dir_not_writable
run_job t_ckdir train 2 1 "${SMALL[@]}" RUN_DIR="$WORK/t_ckdir_run" -- --set checkpoint_dir="$WORK/plainfile/ck"
refused t_ckdir 1 "plainfile/ck"

case_begin scaling_results_dir_not_writable
run_job s_out scaling 2 1 "${SMALL[@]}" OUT="$WORK/plainfile/out"
refused s_out 1 "results directory .*plainfile/out cannot be written"

case_begin scaling_results_dir_holds_results
mkdir -p "$WORK/s_full" && : >"$WORK/s_full/speedup_table.csv"
run_job s_full scaling 2 1 "${SMALL[@]}" OUT="$WORK/s_full"
refused s_full 2 "already holds a sweep's results: set FORCE=1"

case_begin scaling_data_missing
run_job s_nodata scaling 2 1 SYNTHETIC=0
refused s_nodata 1 "cifar10.*scripts/fetch-data.sh cifar10.*SYNTHETIC=1"

case_begin scaling_bad_setting
run_job s_bad scaling 2 1 "${SMALL[@]}" SCALING=strong,weak
refused s_bad 2 "SCALING takes strong and/or weak"

case_begin scaling_strong_missing_srun
run_job s_nosrun scaling-strong 2 1 "${SMALL[@]}" PATH="$(minpath p_nosrun2)"
refused s_nosrun 1 "srun not found on PATH"

case_begin likwid_missing_likwid_perfctr
run_job l_none likwid 1 1 "${SMALL[@]}" PATH="$(minpath p_nolikwid srun)"
refused l_none 1 "likwid-perfctr not found on PATH"

case_begin likwid_group_not_on_this_cpu
run_job l_group likwid 1 1 "${SMALL[@]}" FAKE_LIKWID_GROUPS="CLOCK FLOPS_DP"
refused l_group 1 "likwid-perfctr has no group FLOPS_SP"

case_begin likwid_program_without_markers
run_job l_markers likwid 1 1 "${SMALL[@]}"
refused l_markers 1 "has no LIKWID marker regions.*--with-likwid.*MARKERS=0"

case_begin gpu_missing_nvidia_smi
run_job g_nosmi gpu 1 2 "${SMALL[@]}" HCNN="$WORK/bin/hcnn-cuda" PATH="$(minpath p_nosmi srun)"
refused g_nosmi 1 "nvidia-smi not found"

case_begin gpu_no_gpu_visible
run_job g_nogpu gpu 1 2 "${SMALL[@]}" HCNN="$WORK/bin/hcnn-cuda" FAKE_GPUS=0
refused g_nogpu 1 "nvidia-smi sees no GPU.*No devices were found"

case_begin gpu_program_built_without_cuda
run_job g_nocuda gpu 1 2 "${SMALL[@]}" HCNN="$(cpu_build_of "$HCNN" "$WORK/bin")" FAKE_GPUS=2
refused g_nocuda 1 "was built without CUDA.*--with-cuda"

# the job's default setting (device=cuda) reaches hcnn: behind the stand-in
# the CPU program's configuration refuses it, naming the rebuild; a build
# with a CUDA backend (make distcheck with --with-cuda) finds no GPU here,
# every rank says so and the job ends (on a GPU, or the emulation, it trains)
case_begin gpu_default_setting_reaches_hcnn
run_job g_default gpu 1 2 "${SMALL[@]}" HCNN="$WORK/bin/hcnn-cuda" FAKE_GPUS=2 CUDA_VISIBLE_DEVICES=0,1
if "$HCNN" --version | grep -q '^CUDA: none'; then
    refused g_default 2 "device: cuda: this hcnn was built without CUDA; rebuild it with ./configure --with-cuda"
elif { [ "$rc" -eq 1 ] && grep -q 'device: cuda: no usable GPU' "$WORK/g_default.err" &&
       ! grep -q '^epoch=' "$WORK/g_default.out"; } ||
     { [ "$rc" -eq 0 ] && grep -q '^hcnn: device: cuda' "$WORK/g_default.out"; }; then case_ok
else case_fail "exit $rc: neither trained on device cuda nor refused for want of a GPU"; show g_default; fi

case_begin gpu_fewer_gpus_than_ranks
run_job g_few gpu 1 2 "${SMALL[@]}" HCNN="$WORK/bin/hcnn-cuda" FAKE_GPUS=1
refused g_few 2 "2 ranks per node but nvidia-smi lists 1 GPU"

# NSYS=1 (each rank under Nsight Systems) without nsys on PATH: one line,
# before anything is launched; a value other than 0 or 1 is a bad setting
case_begin gpu_nsys_not_on_path
run_job g_nonsys gpu 1 2 "${SMALL[@]}" HCNN="$WORK/bin/hcnn-cuda" NSYS=1 PATH="$(minpath p_nonsys srun nvidia-smi)"
refused g_nonsys 1 "NSYS=1 but nsys \(Nsight Systems\) is not on PATH"

case_begin gpu_nsys_bad_setting
run_job g_nsysbad gpu 1 2 "${SMALL[@]}" HCNN="$WORK/bin/hcnn-cuda" NSYS=yes
refused g_nsysbad 2 "NSYS must be 0 or 1"

case_begin gpu_bind_one_gpu_per_rank
bind=$SRC/slurm/gpu-bind.sh
b1=$(env -u OMPI_COMM_WORLD_LOCAL_RANK SLURM_LOCALID=1 CUDA_VISIBLE_DEVICES=4,5 "$bind" printenv CUDA_VISIBLE_DEVICES)
b2=$(SLURM_LOCALID=0 OMPI_COMM_WORLD_LOCAL_RANK=1 CUDA_VISIBLE_DEVICES=2,3 "$bind" printenv CUDA_VISIBLE_DEVICES)
b3=$(env -u CUDA_VISIBLE_DEVICES PATH="$FAKE:$PATH" FAKE_GPUS=2 SLURM_LOCALID=1 "$bind" printenv CUDA_VISIBLE_DEVICES)
SLURM_LOCALID=2 CUDA_VISIBLE_DEVICES=0,1 "$bind" true 2>"$WORK/bind.err"
b4=$?
if [ "$b1" = 5 ] && [ "$b2" = 3 ] && [ "$b3" = 1 ] && [ "$b4" -eq 1 ] && grep -q "rank 2 .*has no GPU of its own" "$WORK/bind.err"; then
    case_ok
else case_fail "got '$b1' '$b2' '$b3' (want 5 3 1) and status $b4: $(cat "$WORK/bind.err")"; fi

# ---- preemption: USR1 (Slurm's warning) and TERM (scancel) to the job script ----
# preempt NAME LAUNCHER SIGNAL [ARGS...]: a data-parallel run of 2 ranks
# (one per node) stopped after its second epoch
preempt() {
    local name=$1 launcher=$2 sig=$3
    shift 3
    start_job "$name" train 2 1 "${SMALL[@]}" LAUNCHER="$launcher" MPIRUN_ARGS=--oversubscribe RUN_DIR="$WORK/$name/run" \
        -- "${TINY[@]}" --set epochs=100000 "$@"
    wait_for "$WORK/$name.out" '^epoch=2 '
    if [ "$sig" = scancel ]; then scancel_tree "$JOBPID"; else kill -s "$sig" "$JOBPID"; fi
    end_job
}
# stopped NAME LAUNCHER REQUEUED CKPT-DIR: status 75, a checkpoint that
# loads, through the launcher, requeued (1) or not (0)
stopped() {
    local name=$1 launcher=$2 requeued=$3 dir=$4 ck
    ck=$(newest_ckpt "$dir")
    if [ "$rc" -ne 75 ]; then
        case_fail "exit $rc, not 75"; show "$name"
    elif [ -z "$ck" ] || ! loads "$ck"; then
        case_fail "no checkpoint in $dir that loads ('$ck')"; show "$name"
    elif [ "$launcher" = srun ] && ! grep -q "^srun --nodes=2 --ntasks=2 --cpu-bind=none .*train" "$WORK/$name.slurm"; then
        case_fail "not launched by srun --nodes=2 --ntasks=2: $(cat "$WORK/$name.slurm")"
    elif [ "$launcher" = mpirun ] && ! grep -q "^train.sbatch: .*scripts/hcnn-mpirun -np 2 " "$WORK/$name.out"; then
        case_fail "not launched by scripts/hcnn-mpirun -np 2"; show "$name"
    elif [ "$requeued" = 1 ] && ! grep -qx "scontrol requeue $JOBID" "$WORK/$name.slurm"; then
        case_fail "no 'scontrol requeue $JOBID': $(cat "$WORK/$name.slurm")"
    elif [ "$requeued" = 0 ] && grep -q "scontrol requeue" "$WORK/$name.slurm"; then
        case_fail "requeued after a TERM"
    else
        echo "# $(basename "$ck"), requeued: $requeued"
        case_ok
    fi
}
for launcher in srun mpirun; do
    case_begin "preempt_usr1_${launcher}_checkpoint_and_requeue"
    preempt "p_usr1_$launcher" "$launcher" USR1
    stopped "p_usr1_$launcher" "$launcher" 1 "$WORK/p_usr1_$launcher/run"
    case_begin "preempt_term_${launcher}_checkpoint_no_requeue"
    preempt "p_term_$launcher" "$launcher" TERM --set checkpoint_dir="$WORK/p_term_$launcher/elsewhere"
    stopped "p_term_$launcher" "$launcher" 0 "$WORK/p_term_$launcher/elsewhere"
done

# srun's MPI plugin: SRUN_MPI if set; else pmix when srun --mpi=list offers
# it (a cluster whose MpiDefault is none), said in the log; else a line on
# what to set
# mpi_plugin NAME WANT-OPTION WANT-NOTE [VAR=VALUE...]: a 2-rank job of one epoch
mpi_plugin() {
    local name=$1 want=$2 note=$3
    shift 3
    run_job "$name" train 2 1 "${SMALL[@]}" RUN_DIR="$WORK/$name/run" "$@" -- "${TINY[@]}" --set epochs=1
    local step
    step=$(grep '^srun .*train' "$WORK/$name.slurm" | head -n 1)
    if [ "$rc" -ne 0 ]; then
        case_fail "exit $rc"; show "$name"
    elif [ -n "$want" ] && [[ "$step" != *" $want "* ]]; then
        case_fail "the step lacks $want: $step"
    elif [ -z "$want" ] && [[ "$step" == *--mpi* ]]; then
        case_fail "the step has an --mpi option: $step"
    elif [ -n "$note" ] && ! grep -q -- "$note" "$WORK/$name.out"; then
        case_fail "no line '$note' in the job's log"; show "$name"
    elif [ -z "$note" ] && grep -q 'srun --mpi=pmix (SRUN_MPI\|srun offers no pmix' "$WORK/$name.out"; then
        case_fail "a plugin note although SRUN_MPI is set"; show "$name"
    else
        echo "# ${step%% --*}... $(grep -m1 -- 'pmix' "$WORK/$name.out")"
        case_ok
    fi
}
case_begin srun_mpi_pmix_when_offered
mpi_plugin m_pmix --mpi=pmix "train.sbatch: srun --mpi=pmix (SRUN_MPI is not set; srun --mpi=list offers: cray_shasta none pmi2 pmix)"
case_begin srun_mpi_none_offered_says_what_to_set
mpi_plugin m_nopmix "" "srun offers no pmix plugin (srun --mpi=list: none pmi2 ).*set SRUN_MPI" FAKE_SRUN_MPI_LIST="none pmi2"
case_begin srun_mpi_setting_wins
mpi_plugin m_set --mpi=pmi2 "" SRUN_MPI=pmi2

# scancel signals every process of the job, the launcher and the ranks too:
# under srun, 75 and the checkpoint; OpenMPI's mpirun, signalled itself, ends
# the ranks and exits 1 whether or not they finished their checkpoint, so the
# job must say 75 exactly when a checkpoint was written after the signal
case_begin scancel_every_process_srun
preempt p_scancel_srun srun scancel
stopped p_scancel_srun srun 0 "$WORK/p_scancel_srun/run"
case_begin scancel_every_process_mpirun_status_matches_checkpoint
preempt p_scancel_mpirun mpirun scancel
ck=$(newest_ckpt "$WORK/p_scancel_mpirun/run")
if [ "$rc" -eq 75 ] && [ -n "$ck" ] && loads "$ck"; then
    echo "# 75 with $(basename "$ck")"; case_ok
elif [ "$rc" -eq 1 ] && [ -z "$ck" ] && grep -q "wrote no checkpoint after the signal" "$WORK/p_scancel_mpirun.out"; then
    echo "# 1: the ranks were ended before their checkpoint (OpenMPI's 1 s)"; case_ok
else
    case_fail "exit $rc with checkpoint '$ck'"; show p_scancel_mpirun
fi

# ---- resume: the next run of the job continues from the checkpoint -------------
# resumed NAME CKPT DIR: the run said it resumes from CKPT, went on 8 steps
# to max_steps and ended with 0
resumed() {
    local name=$1 ck=$2 dir=$3 last
    last=$(newest_ckpt "$dir")
    if [ "$rc" -ne 0 ]; then
        case_fail "exit $rc"; show "$name"
    elif ! grep -q "resum.* from $ck" "$WORK/$name.out"; then
        case_fail "did not resume from $ck"; show "$name"
    elif [ -z "$last" ] || [ "$(step_of "$last")" -ne $(($(step_of "$ck") + 8)) ]; then
        case_fail "newest checkpoint '$last', not step $(($(step_of "$ck") + 8))"; show "$name"
    else
        echo "# $(basename "$ck") -> $(basename "$last")"
        case_ok
    fi
}
case_begin resume_requeued_job_from_run_dir
ck=$(newest_ckpt "$WORK/p_usr1_srun/run")
RESTART=1 run_job r_requeued train 2 1 "${SMALL[@]}" RUN_DIR="$WORK/p_usr1_srun/run" -- "${TINY[@]}" \
    --set epochs=100000 --set max_steps=$(($(step_of "$ck") + 8))
resumed r_requeued "$ck" "$WORK/p_usr1_srun/run"

case_begin resume_from_checkpoint_dir_elsewhere_mpirun
ck=$(newest_ckpt "$WORK/p_term_mpirun/elsewhere")
run_job r_elsewhere train 2 1 "${SMALL[@]}" LAUNCHER=mpirun MPIRUN_ARGS=--oversubscribe RUN_DIR="$WORK/p_term_mpirun/run" \
    -- "${TINY[@]}" --set epochs=100000 --set checkpoint_dir="$WORK/p_term_mpirun/elsewhere" \
    --set max_steps=$(($(step_of "$ck") + 8))
if [ -n "$(newest_ckpt "$WORK/p_term_mpirun/run")" ]; then
    case_fail "a checkpoint in RUN_DIR, not in checkpoint_dir"
else
    resumed r_elsewhere "$ck" "$WORK/p_term_mpirun/elsewhere"
fi

case_begin train_launcher_none_serial
run_job t_none train 1 1 "${SMALL[@]}" LAUNCHER=none STRATEGY=serial RUN_DIR="$WORK/t_none" -- "${TINY[@]}" --set epochs=1
if [ "$rc" -eq 0 ] && grep -q '^epoch=1 ' "$WORK/t_none.out" && [ -f "$WORK/t_none/final.hcnn" ] &&
    ! grep -q '^srun ' "$WORK/t_none.slurm"; then case_ok
else case_fail "exit $rc"; show t_none; fi

# ---- the scaling jobs, end to end ----------------------------------------------
# scaled NAME SCALINGS LAUNCHER: status 0, results/<job id>/ of the submit
# directory (the default) holds speedup_table.csv with rows of each of
# SCALINGS and no other; the sweep got the node's threads (1) and REPEATS; no
# srun step asked for more than the 2 nodes (RANKS "1 2 4": 4 dropped); nothing
# in the source tree
scaled() {
    local name=$1 want=$2 launcher=$3 out=$TREE/results/$JOBID table got
    table=$(find "$out" -name speedup_table.csv 2>/dev/null | head -n 1)
    if [ "$rc" -ne 0 ]; then
        case_fail "exit $rc"; show "$name"; return
    elif [ -z "$table" ]; then
        case_fail "no speedup_table.csv in $out"; show "$name"; return
    elif ! grep -qF -- "scripts/sweep.sh $(printf '%q ' --scaling "$want" --ranks "1 2" --threads 1 --repeats 1)" "$WORK/$name.out"; then
        case_fail "sweep not called with --scaling '$want' --ranks '1 2' --threads 1 --repeats 1"; show "$name"; return
    elif [ -e "$SRC/results/$JOBID" ]; then
        case_fail "wrote into the source tree: $SRC/results/$JOBID"; return
    fi
    # the table's scaling and threads columns, found by name
    got=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                   { print $c["scaling"]; if ($c["threads"] != 1) print "threads=" $c["threads"] }' "$table" | sort -u | tr '\n' ' ')
    if [ "$got" != "$want " ]; then
        case_fail "the table's scaling (and threads != 1) values are '$got', not '$want': $(cat "$table")"; return
    fi
    if [ "$launcher" = srun ]; then
        if ! grep -qE '^srun --cpu-bind=none --kill-on-bad-exit=0 (--mpi=pmix )?--nodes=2 --ntasks=2 ' "$WORK/$name.slurm" ||
            grep -q -- '--nodes=[3-9]\|--ntasks=[3-9]' "$WORK/$name.slurm"; then
            case_fail "srun steps: $(cat "$WORK/$name.slurm")"; return
        fi
    elif ! grep -rq "scripts/hcnn-mpirun.* -np 2 " "$out"; then
        case_fail "no run through scripts/hcnn-mpirun -np 2 in $out"; return
    fi
    echo "# $(($(wc -l <"$table") - 1)) row(s) in ${table#"$WORK"/}"
    case_ok
}
SCALE=("${SMALL[@]}" RANKS="1 2 4" REPEATS=1 EPOCHS=1 STAGES=2 TRAIN_SAMPLES=256 TEST_SAMPLES=64 RUN_TIMEOUT=60)
case_begin scaling_strong_and_weak_srun
run_job s_both scaling 2 1 "${SCALE[@]}" -- --set blas_kernels=env
scaled s_both "strong weak" srun
case_begin scaling_strong_job_mpirun
run_job s_strong scaling-strong 2 1 "${SCALE[@]}" LAUNCHER=mpirun MPIRUN_ARGS=--oversubscribe -- --set blas_kernels=env
scaled s_strong strong mpirun
case_begin scaling_weak_job_srun
run_job s_weak scaling-weak 2 1 "${SCALE[@]}" -- --set blas_kernels=env
scaled s_weak weak srun

case_begin scaling_defaults_dry_run
run_job s_dry scaling 2 1 -- --dry-run
# the defaults: both scalings, the rank counts that fit, the node's threads,
# 3 repeats, ResNet-18 on synthetic data, srun (--mpi=pmix: the stand-in
# offers it), results/<job id>
missing=""
for piece in "$(printf '%q ' --scaling "strong weak" --ranks "1 2" --threads 1 --repeats 3 --config configs/cifar_resnet18.yaml --epochs 3)" \
    "$(printf '%q ' --mpirun "srun --cpu-bind=none --kill-on-bad-exit=0 --mpi=pmix" --stages "2 4 8" --microbatches 4 --weak "data pipeline")" \
    "$(printf '%q ' --out "results/$JOBID")" "$(printf '%q' "--set dataset=synthetic --set synthetic_train=32768")"; do
    grep -qF -- "$piece" "$WORK/s_dry.out" || missing="$missing [$piece]"
done
if [ "$rc" -eq 0 ] && [ -z "$missing" ]; then case_ok
else case_fail "exit $rc; not in the sweep's command:$missing"; show s_dry; fi

case_begin scaling_term_stops_the_sweep
start_job s_term scaling 2 1 "${SCALE[@]}" EPOCHS=100000 STRATEGIES=data -- --set blas_kernels=env
# the first run (data parallel, 1 rank) is training when the TERM comes
wait_for "$WORK/s_term.slurm" '^srun ' && sleep 1
kill -TERM "$JOBPID"
t0=$(date +%s)
end_job
took=$(($(date +%s) - t0))
# the job's processes gone (their teardown may take a moment on a loaded machine)
for _ in $(seq 50); do
    left=$(pgrep -f "results/$JOBID" | tr '\n' ' ')
    [ -z "$left" ] && break
    sleep 0.1
done
if ! grep -q '^srun ' "$WORK/s_term.slurm"; then
    case_fail "the sweep never launched a run (exit $rc)"; show s_term
elif [ "$rc" -eq 75 ] && [ "$took" -lt 20 ] && [ -z "$left" ] && grep -q "stopped by SIGTERM" "$WORK/s_term.out"; then
    echo "# stopped in ${took} s"; case_ok
else case_fail "exit $rc after ${took} s, processes left: '$left'"; show s_term; fi

# ---- the likwid job, end to end (the fake likwid-perfctr) -----------------------
# likwided NAME MARKER-FLAG: status 0; one likwid-perfctr run per group, on
# core 0 (1 thread), with or without -m; the outputs in OUT
likwided() {
    local name=$1 m=$2 out=$WORK/$1.res g
    if [ "$rc" -ne 0 ]; then case_fail "exit $rc"; show "$name"; return; fi
    for g in FLOPS_SP MEM; do
        if ! grep -q "^likwid-perfctr -c 0-0 $m-g $g -o $out/likwid-$g.txt $HCNN train " "$WORK/$name.slurm" ||
            [ ! -s "$out/likwid-$g.txt" ] || [ ! -s "$out/$g.csv" ] || ! grep -q '^epoch=' "$out/$g.log"; then
            case_fail "group $g: $(cat "$WORK/$name.slurm"); $(ls "$out")"; show "$name"; return
        fi
    done
    case_ok
}
LIKW=("${SMALL[@]}" STEPS=3 TRAIN_SAMPLES=256 TEST_SAMPLES=64)
case_begin likwid_whole_run_srun
run_job l_srun likwid 1 1 "${LIKW[@]}" MARKERS=0 OUT="$WORK/l_srun.res" -- --set blas_kernels=env
if grep -q '^srun --nodes=1 --ntasks=1 --cpu-bind=none .*likwid-perfctr' "$WORK/l_srun.slurm"; then likwided l_srun ""
else case_fail "not one srun task: $(cat "$WORK/l_srun.slurm")"; show l_srun; fi
case_begin likwid_marker_regions_mpirun
run_job l_mpirun likwid 1 1 "${LIKW[@]}" LAUNCHER=mpirun MPIRUN_ARGS=--oversubscribe OUT="$WORK/l_mpirun.res" \
    PATH="$WORK/likwidldd:$FAKE:$PATH" -- --set blas_kernels=env
likwided l_mpirun "-m "

# USR1 ends the run in progress under every launcher (status 75, the next
# group not started, no process of the run left), although likwid-perfctr
# does not pass it on to hcnn (the fake dies of it, as likwid's does): srun
# and mpirun signal every process of a task, and without a launcher the job
# signals the run's process group and waits for hcnn's stop
for launcher in srun mpirun none; do
    case_begin "likwid_usr1_stops_the_run_$launcher"
    name=l_stop_$launcher
    start_job "$name" likwid 1 1 "${LIKW[@]}" STEPS=100000000 MARKERS=0 OUT="$WORK/$name.res" \
        LAUNCHER=$launcher MPIRUN_ARGS=--oversubscribe -- --set blas_kernels=env
    wait_for "$WORK/$name.res/FLOPS_SP.log" '^epoch=2 '
    kill -USR1 "$JOBPID"
    end_job
    for _ in $(seq 1 50); do pgrep -f "$name.res" >/dev/null || break; sleep 0.1; done
    if [ "$rc" -eq 75 ] && grep -q "stopped by SIGUSR1 during the FLOPS_SP run" "$WORK/$name.out" &&
        ! grep -q -- '-g MEM' "$WORK/$name.slurm" && ! pgrep -f "$name.res" >/dev/null &&
        { [ "$launcher" != none ] || grep -q "SIGUSR1 received: finishing the step" "$WORK/$name.res/FLOPS_SP.log"; }; then
        case_ok
    else case_fail "exit $rc; left: $(pgrep -f "$name.res" | tr '\n' ' ')"; show "$name"; fi
done

# ---- the GPU job, end to end (a stand-in CUDA build, fake nvidia-smi) -----------
# (GPU_SET= : the stand-in is the CPU program, which refuses device=cuda, as
# gpu_default_setting_reaches_hcnn shows; here the ranks' GPUs are the test)
# gpued NAME: status 0, trained, two ranks each on its own GPU (0 and 1 of
# the CUDA_VISIBLE_DEVICES=0,1 Slurm gives the node)
gpued() {
    local got
    got=$(sed -n 's/.*cuda_visible_devices=//p' "$WORK/gpu-ranks.txt" 2>/dev/null | sort | tr '\n' ' ')
    if [ "$rc" -eq 0 ] && grep -q '^epoch=1 ' "$WORK/$1.out" && [ "$got" = "0 1 " ]; then case_ok
    else case_fail "exit $rc, GPUs of the ranks '$got' (want 0 1)"; show "$1"; fi
}
for launcher in srun mpirun; do
    case_begin "gpu_one_rank_per_gpu_$launcher"
    rm -f "$WORK/gpu-ranks.txt"
    run_job "g_$launcher" gpu 1 2 "${SMALL[@]}" HCNN="$WORK/bin/hcnn-cuda" GPU_SET= FAKE_GPUS=2 CUDA_VISIBLE_DEVICES=0,1 \
        LAUNCHER=$launcher MPIRUN_ARGS=--oversubscribe RUN_DIR="$WORK/g_$launcher" -- "${TINY[@]}" --set epochs=1
    gpued "g_$launcher"
done

# NSYS=1: every rank's hcnn under `nsys profile` (the fake records its
# options and report name, then runs hcnn), after gpu-bind.sh (each rank
# still on its own GPU), one report per rank named by the job, its restart
# and the rank as the launcher numbers it
for launcher in srun mpirun; do
    case_begin "gpu_nsys_each_rank_$launcher"
    rm -f "$WORK/gpu-ranks.txt"
    run_job "n_$launcher" gpu 1 2 "${SMALL[@]}" HCNN="$WORK/bin/hcnn-cuda" GPU_SET= FAKE_GPUS=2 CUDA_VISIBLE_DEVICES=0,1 \
        LAUNCHER=$launcher MPIRUN_ARGS=--oversubscribe RUN_DIR="$WORK/n_$launcher" NSYS=1 \
        FAKE_NSYS_LOG="$WORK/n_$launcher.nsys" -- "${TINY[@]}" --set epochs=1
    dir=$(cd "$WORK/n_$launcher/nsys" 2>/dev/null && pwd)
    want="$dir/hcnn-$JOBID-0-rank0 $dir/hcnn-$JOBID-0-rank1 "
    got=$(sed -n 's/.* -> //p' "$WORK/n_$launcher.nsys" 2>/dev/null | sort | tr '\n' ' ')
    if [ -z "$dir" ] || [ "$got" != "$want" ]; then
        case_fail "reports '$got', expected '$want'"; show "n_$launcher"
    elif [ "$(grep -c '^profile --trace=cuda,nvtx,osrt,mpi --output=' "$WORK/n_$launcher.nsys")" -ne 2 ]; then
        case_fail "nsys's options: $(head -n 2 "$WORK/n_$launcher.nsys")"
    elif ! grep -q "Nsight Systems: NVIDIA Nsight Systems version" "$WORK/n_$launcher.out"; then
        case_fail "the job's log does not name nsys"; show "n_$launcher"
    else
        gpued "n_$launcher"
    fi
done

finish
