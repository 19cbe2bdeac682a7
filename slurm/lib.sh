# What the batch jobs of slurm/ share: their start checks, the launch
# command (srun or mpirun), passing Slurm's signals on, and the training job
# (train.sbatch and gpu.sbatch).  Sourced by each job once it is in the
# submit directory (the source tree); never run by itself.
#
# A job sets JOB (its name, the prefix of every message) before sourcing.
# Every check that fails ends the job with ONE line on stderr,
#   <job>: error: <what is missing or wrong, and how to fix it>
# and exit status 1 (something the node lacks: the program, the launcher,
# the data, a writable directory, a tool) or 2 (a bad setting: an unknown
# LAUNCHER, a config file that does not exist, a malformed number, a
# configuration hcnn refuses), before anything is launched.
#
# A stop signal -- USR1 from `#SBATCH --signal=B:USR1@120`, TERM from
# scancel or preemption, INT -- is passed on to what the job launched (INT
# as TERM: hcnn checkpoints on TERM and USR1 only), and the job ends with
# status 75 (hcnn's "stopped after writing its checkpoint").

: "${JOB:=job}"

job_note() { echo "$JOB: $*"; }
job_error() { # STATUS MESSAGE...: one line on stderr, then exit STATUS
    local status=$1
    shift
    echo "$JOB: error: $*" >&2
    exit "$status"
}
job_posint() { # SETTING VALUE
    [[ "$2" =~ ^[1-9][0-9]*$ ]] || job_error 2 "$1 must be a positive integer, not '$2'"
}
job_posints() { # SETTING "LIST": a non-empty list of positive integers
    local n
    [ -n "${2// /}" ] || job_error 2 "$1 is empty"
    for n in $2; do job_posint "$1" "$n"; done
}
job_date() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# ---- signals ------------------------------------------------------------------
# Traps from the start, so that a signal during the checks is not lost: the
# job then stops before launching anything.  While something runs (job_run),
# the signal goes on to it: to the launcher (JOB_FORWARD=pid; srun passes
# USR1 to every process of every task but turns a TERM it receives into
# SIGKILL of its tasks ("forcing job termination", Slurm 22.05), so srun gets
# USR1 for TERM and INT too: hcnn's stop is the same; scripts/hcnn-mpirun
# turns TERM into USR1 for mpirun, which passes USR1 on to each rank's
# process group), to the process group of a command started in a session of its own
# (JOB_FORWARD=group: likwid-perfctr and the hcnn it runs, with no launcher),
# or to every process below the job (JOB_FORWARD=tree: the sweep of the
# scaling jobs, which has no handler).
JOB_STOP="" JOB_STOP_TIME=0 JOB_PID="" JOB_FORWARD=pid JOB_TREE=""
job_signal_tree() { # SIG PID: PID and every process below it, children first
    local child
    for child in $(pgrep -P "$2" 2>/dev/null); do job_signal_tree "$1" "$child"; done
    kill -s "$1" "$2" 2>/dev/null && JOB_TREE="$JOB_TREE $2"
}
job_wait_tree() { # the processes job_signal_tree signalled: 30 s to end, then KILL
    local p alive
    for _ in $(seq 1 60); do
        alive=""
        for p in $JOB_TREE; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
        [ -n "$alive" ] || return 0
        sleep 0.5
    done
    job_note "still running 30 s after the signal, killed:$alive"
    for p in $alive; do kill -KILL "$p" 2>/dev/null; done
}
job_on_signal() { # SIG
    local to=$1
    [ "$1" = INT ] && to=TERM
    if [ "$JOB_FORWARD" = pid ] && [ "${LAUNCHER:-}" = srun ]; then to=USR1; fi
    # when the stop was first asked for (job_train: was a checkpoint written?)
    if [ -z "$JOB_STOP" ]; then JOB_STOP_TIME=$(date +%s); fi
    JOB_STOP=$1
    if [ -z "$JOB_PID" ]; then
        job_note "SIG$1 received before the launch: stopping"
    elif [ "$JOB_FORWARD" = tree ]; then
        job_note "SIG$1 received: passing SIG$to to every process of the job"
        job_signal_tree "$to" "$JOB_PID"
    elif [ "$JOB_FORWARD" = group ]; then
        job_note "SIG$1 received: passing SIG$to on to the processes of the run"
        kill -s "$to" -- "-$JOB_PID" 2>/dev/null
    else
        job_note "SIG$1 received: passing SIG$to on to hcnn (it finishes its step, writes its checkpoint and stops)"
        kill -s "$to" "$JOB_PID" 2>/dev/null
    fi
}
trap 'job_on_signal USR1' USR1
trap 'job_on_signal TERM' TERM
trap 'job_on_signal INT' INT
job_stopped_early() { # exit 75 if a stop signal came before anything was launched
    if [ -n "$JOB_STOP" ]; then exit 75; fi
}

# job_run CMD...: runs CMD in the background (bash runs a trap only while it
# waits), passes stop signals on, and leaves CMD's exit status in JOB_RC.
# With JOB_RUN_LOG set, CMD's output goes to that file.
job_run() {
    job_stopped_early
    # group: in a session of its own (setsid does not fork here: a background
    # child of this script leads no process group), so its pid is the group's
    if [ "$JOB_FORWARD" = group ]; then set -- setsid "$@"; fi
    if [ -n "${JOB_RUN_LOG:-}" ]; then "$@" >"$JOB_RUN_LOG" 2>&1 & else "$@" & fi
    JOB_PID=$!
    # a trap interrupts `wait`; wait again until CMD has ended, then take its
    # status (bash keeps it)
    while kill -0 "$JOB_PID" 2>/dev/null; do wait "$JOB_PID"; done
    wait "$JOB_PID"
    JOB_RC=$?
    # what was below CMD may outlive it for a moment (a signalled tree; the
    # rest of a process group, e.g. hcnn after likwid-perfctr died of the signal)
    if [ -n "$JOB_TREE" ]; then job_wait_tree; fi
    if [ "$JOB_FORWARD" = group ]; then job_wait_group "$JOB_PID"; fi
    JOB_PID=""
}
job_wait_group() { # PGID: 30 s for the process group to end, then KILL
    for _ in $(seq 1 60); do
        kill -0 -- "-$1" 2>/dev/null || return 0
        sleep 0.5
    done
    job_note "processes of the run still there 30 s after it ended: killed"
    kill -KILL -- "-$1" 2>/dev/null
}

# ---- threads ------------------------------------------------------------------
# every CPU of a task is an OpenMP thread of its rank, pinned close together
job_threads() {
    export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-${OMP_NUM_THREADS:-$(nproc)}}
    export OMP_PLACES=cores OMP_PROC_BIND=close
    # srun (Slurm >= 22.05) does not inherit --cpus-per-task from sbatch:
    # without this each task would be confined to one CPU
    if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK; fi
}

# ---- start checks -------------------------------------------------------------
# job_check_hcnn: HCNN (default ./hcnn; a bare name is looked up on PATH) is
# an executable that runs on this node; its --version goes to the log.
job_check_hcnn() {
    HCNN=${HCNN:-./hcnn}
    local found
    case "$HCNN" in
    */*) ;;
    *) found=$(command -v "$HCNN") ||
        job_error 1 "program '$HCNN' not found on PATH: set HCNN=/path/to/hcnn, or build ./hcnn in $PWD (autoreconf -fi && ./configure && make)"
       HCNN=$found ;;
    esac
    if [ ! -f "$HCNN" ] || [ ! -x "$HCNN" ]; then
        job_error 1 "program $HCNN is not an executable file: build it in $PWD (autoreconf -fi && ./configure && make) or set HCNN=/path/to/hcnn"
    fi
    HCNN=$(cd "$(dirname "$HCNN")" && pwd)/$(basename "$HCNN")
    if ! HCNN_VERSION=$("$HCNN" --version 2>&1); then
        job_error 1 "program $HCNN does not run on $(hostname): $(printf '%s\n' "$HCNN_VERSION" | grep -m 1 .) (rebuild it for this node type, or load the modules it was built with)"
    fi
}
job_show_version() { printf '%s\n' "$HCNN_VERSION" | sed "s|^|$JOB: $HCNN: |"; }

# job_check_config: CONFIG names a file
job_check_config() {
    [ -f "$CONFIG" ] || job_error 2 "config $CONFIG not found in $PWD: set CONFIG to a file (configs/*.yaml; submit from the source tree)"
}

# job_config_args ARGS...: CONFIG_ARGS=(--config "$CONFIG"), or none when
# the script's arguments name a config themselves (hcnn refuses an option
# given twice: theirs replaces the job's CONFIG)
job_config_args() {
    CONFIG_ARGS=(--config "$CONFIG")
    local a
    for a in "$@"; do
        case "$a" in -c | --config | --config=*) CONFIG_ARGS=() ;; esac
    done
}

# job_check_launcher: LAUNCHER is srun (default), mpirun or none, and is there
job_check_launcher() {
    LAUNCHER=${LAUNCHER:-srun}
    case "$LAUNCHER" in
    srun)
        command -v srun >/dev/null ||
            job_error 1 "srun not found on PATH: submit this script with sbatch on the Slurm cluster, or set LAUNCHER=mpirun to launch with OpenMPI's mpirun" ;;
    mpirun)
        command -v mpirun >/dev/null ||
            job_error 1 "mpirun not found on PATH: load the MPI hcnn was built with (e.g. module load openmpi; Debian: apt-get install openmpi-bin), or set LAUNCHER=srun"
        [ -x scripts/hcnn-mpirun ] ||
            job_error 1 "scripts/hcnn-mpirun not found or not executable in $PWD: submit from the hcnn source tree" ;;
    none) ;;
    *) job_error 2 "LAUNCHER must be srun, mpirun or none, not '$LAUNCHER'" ;;
    esac
}

# job_writable DIR: DIR exists and takes a new file, or can be created (its
# nearest existing parent is a directory that takes a new file); else 1 with
# the reason in JOB_WHY.  Nothing is left behind.
job_writable() {
    local d=$1 probe
    while [ ! -e "$d" ] && [ ! -L "$d" ]; do d=$(dirname "$d"); done
    if [ ! -d "$d" ]; then JOB_WHY="$d is not a directory"; return 1; fi
    if ! probe=$(mktemp "$d/.hcnn-write-test.XXXXXX" 2>&1); then
        JOB_WHY="cannot create a file in $d (${probe##*: })"
        return 1
    fi
    rm -f "$probe"
}
job_check_writable() { # DIR WHAT HINT
    job_writable "$1" || job_error 1 "$2 $1 cannot be written: $JOB_WHY; $3"
}

# job_hcnn_check ALT ARGS...: `hcnn train ARGS --check` on this node, without
# a launcher: the config, the data sets (read), checkpoint_dir, the CSV's
# directory and the checkpoint to resume.  Its verdict goes to the log; a
# failure ends the job with hcnn's message on one line, plus for missing data
# how to get it or ALT (what to run instead).
job_hcnn_check() {
    local alt=$1 out status line ds hint=""
    shift
    out=$("$HCNN" train "$@" --check 2>&1)
    status=$?
    if [ "$status" -eq 0 ]; then
        printf '%s\n' "$out" | grep '^hcnn: check' | sed "s/^/$JOB: /"
        return 0
    fi
    line=$(printf '%s\n' "$out" | grep -m 1 '^hcnn: .*error: ')
    line=${line#hcnn: }
    line=${line#error: }
    [ -n "$line" ] || line="no message; its last line: $(printf '%s\n' "$out" | grep . | tail -n 1)"
    if [ "$status" -eq 2 ] && printf '%s\n' "$line" | grep -qiE '(unknown|unrecognized|invalid).*--check|--check.*(unknown|unrecognized)'; then
        job_error 2 "$HCNN does not know 'train --check' (a build older than the job scripts): rebuild hcnn (make) [$line]"
    fi
    if [ "$status" -eq 2 ]; then job_error 2 "hcnn refuses the settings: $line"; fi
    if [ "$status" -ne 1 ]; then job_error 1 "hcnn train --check ended with status $status: $line"; fi
    ds=$(printf '%s\n' "$line" | sed -n "s/.*data set '\([A-Za-z0-9_]*\)'.*/\1/p")
    if [ -n "$ds" ] && [ "$ds" != synthetic ]; then
        hint="; fix: scripts/fetch-data.sh $ds (fetches into data/$ds/, where the shipped configs look) on a machine that can download, or $alt"
    fi
    job_error 1 "$line$hint"
}

# job_srun_mpi RANKS: srun's --mpi option for a step of RANKS tasks, in the
# array SRUN_MPI_OPT.  SRUN_MPI if set; else, for several ranks, pmix when
# `srun --mpi=list` offers it (hcnn's OpenMPI starts its ranks through PMIx;
# on a cluster whose MpiDefault is none, a plain srun would end in OpenMPI's
# page about PMI support), said in the job log; else nothing, and one line
# saying what to set if the ranks do not start.
job_srun_mpi() {
    SRUN_MPI_OPT=()
    if [ -n "${SRUN_MPI:-}" ]; then
        SRUN_MPI_OPT=(--mpi="$SRUN_MPI")
        return 0
    fi
    [ "$1" -gt 1 ] || return 0
    local list
    list=$(srun --mpi=list 2>&1 | sed -n 's/^[[:space:]]*\([a-z0-9_]*\)[[:space:]]*$/\1/p' | tr '\n' ' ')
    if [[ " $list" == *" pmix "* ]]; then
        SRUN_MPI_OPT=(--mpi=pmix)
        job_note "srun --mpi=pmix (SRUN_MPI is not set; srun --mpi=list offers: ${list% })"
    else
        job_note "srun offers no pmix plugin (srun --mpi=list: ${list:-nothing}): the cluster's MpiDefault starts the ranks; if they fail (OpenMPI: \"PMI support\"), set SRUN_MPI to the plugin your MPI was built for, or LAUNCHER=mpirun"
    fi
}

# job_launcher NODES RANKS PER_NODE: the launch command in the array LAUNCH
# (empty for LAUNCHER=none).  srun: NODES nodes, RANKS tasks, binding left to
# OpenMP, a rank that exits non-zero (75 after a checkpoint) does not kill
# the others while they finish.  mpirun: through scripts/hcnn-mpirun (TERM
# becomes USR1, which OpenMPI's mpirun passes to the ranks), PER_NODE ranks on
# each node, the OpenMP settings exported; MPIRUN_ARGS: more options, split
# at white space.
job_launcher() {
    local nodes=$1 ranks=$2 per_node=$3 map
    case "$LAUNCHER" in
    srun)
        job_srun_mpi "$ranks"
        LAUNCH=(srun --nodes="$nodes" --ntasks="$ranks" --cpu-bind=none --kill-on-bad-exit=0
                "${SRUN_MPI_OPT[@]}") ;;
    mpirun)
        map=node
        [ "$per_node" -gt 1 ] && map=ppr:$per_node:node
        # shellcheck disable=SC2206
        LAUNCH=("$PWD/scripts/hcnn-mpirun" -np "$ranks" --map-by "$map" --bind-to none
                -x OMP_NUM_THREADS -x OMP_PLACES -x OMP_PROC_BIND ${MPIRUN_ARGS:-}) ;;
    none) LAUNCH=() ;;
    esac
}

# ---- the training job (train.sbatch, gpu.sbatch) ------------------------------
# job_newest_ckpt DIR: the checkpoint of DIR written last (ckpt-s<step>.hcnn
# or, for a run sharing the directory with other runs' checkpoints,
# ckpt-s<step>-<run tag>.hcnn; hcnn writes each under a temporary name and
# renames it), or nothing
job_newest_ckpt() {
    local f newest="" t max=-1
    for f in "$1"/ckpt-s*.hcnn; do
        [ -f "$f" ] || continue
        t=$(stat -c %Y "$f" 2>/dev/null || echo 0)
        if [ "$t" -gt "$max" ]; then max=$t newest=$f; fi
    done
    echo "$newest"
}
# job_ckpt_dir ARGS...: the checkpoint_dir the last --set of ARGS gives
job_ckpt_dir() {
    local dir="" next=0 a
    for a in "$@"; do
        if [ "$next" = 1 ]; then
            case "$a" in checkpoint_dir=*) dir=${a#checkpoint_dir=} ;; esac
        fi
        next=0
        case "$a" in
        -s | --set) next=1 ;;
        --set=checkpoint_dir=*) dir=${a#--set=checkpoint_dir=} ;;
        esac
    done
    echo "$dir"
}

# job_train ARGS...: ARGS go to `hcnn train` after the job's settings.
# Before: CONFIG, STRATEGY, RUN_NAME, RUN_DIR, HCNN, LAUNCHER, AUTO_REQUEUE
# set (or defaulted here), and for the GPU job TRAIN_SETS (more --set
# arguments), TRAIN_WRAP (a command put before hcnn on every rank) and
# RANKS_PER_NODE.  Ends the job with hcnn's status: 75 after a stop signal
# (checkpoint written), and after Slurm's USR1 the job is requeued
# (AUTO_REQUEUE=1) so that it continues with --resume auto.
job_train() {
    CONFIG=${CONFIG:-configs/cifar_resnet18.yaml}
    STRATEGY=${STRATEGY:-data}
    RUN_NAME=${RUN_NAME:-$(basename "$CONFIG" .yaml)_$STRATEGY}
    RUN_DIR=${RUN_DIR:-runs/$RUN_NAME}
    AUTO_REQUEUE=${AUTO_REQUEUE:-1}
    RANKS_PER_NODE=${RANKS_PER_NODE:-1}
    case "$STRATEGY" in serial | data | pipeline) ;; *) job_error 2 "STRATEGY must be serial, data or pipeline, not '$STRATEGY'" ;; esac
    case "$AUTO_REQUEUE" in 0 | 1) ;; *) job_error 2 "AUTO_REQUEUE must be 0 or 1, not '$AUTO_REQUEUE'" ;; esac
    case "$RUN_NAME" in */* | "") job_error 2 "RUN_NAME must be a plain file name, not '$RUN_NAME'" ;; esac

    # MPI ranks: Slurm's task count, else NP outside Slurm
    local nodes=${SLURM_JOB_NUM_NODES:-1} ranks=${SLURM_NTASKS:-${NP:-1}}
    job_posint "the rank count (SLURM_NTASKS or NP)" "$ranks"
    job_posint "the node count (SLURM_JOB_NUM_NODES)" "$nodes"
    job_threads

    # what the run needs, before anything starts
    job_check_hcnn
    job_check_config
    job_check_launcher
    job_check_writable "$RUN_DIR" "the run directory (RUN_DIR)" "set RUN_DIR to a directory you can write"
    mkdir -p "$RUN_DIR" || job_error 1 "cannot create the run directory $RUN_DIR (set RUN_DIR)"

    # hcnn's arguments: the config, the strategy, where checkpoints and metrics
    # go, the job's own settings, then the script's arguments (which may
    # override any of them, checkpoint_dir included)
    local a
    job_config_args "$@"
    local args=(${CONFIG_ARGS[@]+"${CONFIG_ARGS[@]}"} --set strategy="$STRATEGY" --set checkpoint_dir="$RUN_DIR"
                --set csv="$RUN_DIR/$RUN_NAME.csv" ${TRAIN_SETS[@]+"${TRAIN_SETS[@]}"})
    # continue from the newest checkpoint of the run's checkpoint_dir (after
    # every override) if there is one, else start: hcnn's --resume auto;
    # unless the arguments name a checkpoint themselves
    local resume=(--resume auto)
    for a in "$@"; do
        case "$a" in -r | --resume | --resume=*) resume=() ;; esac
    done
    args+=(${resume[@]+"${resume[@]}"} "$@")
    job_hcnn_check "set CONFIG=configs/synthetic_resnet.yaml to try the job on synthetic data" "${args[@]}"

    local cmd
    job_launcher "$nodes" "$ranks" "$RANKS_PER_NODE"
    cmd=(${LAUNCH[@]+"${LAUNCH[@]}"} ${TRAIN_WRAP[@]+"${TRAIN_WRAP[@]}"} "$HCNN" train "${args[@]}")

    # the job and the command, in the log
    job_note "$(job_date) job ${SLURM_JOB_ID:-none} (restart ${SLURM_RESTART_COUNT:-0}) on $nodes node(s): $ranks rank(s) x $OMP_NUM_THREADS threads, launcher $LAUNCHER"
    job_show_version
    job_note "run directory $RUN_DIR; ${resume[*]:-resume as the arguments say}"
    job_note "$(printf '%q ' "${cmd[@]}")"

    # where hcnn's checkpoints go, to tell after a stop whether it wrote one
    local ckdir ck="" rc
    ckdir=$(job_ckpt_dir "${args[@]}")
    job_run "${cmd[@]}"
    rc=$JOB_RC
    job_note "$(job_date) hcnn ended with status $rc"
    if [ -n "$JOB_STOP" ] && [ "$rc" -ne 75 ] && [ "$rc" -ne 0 ] && [ -n "$ckdir" ]; then
        # scancel and preemption signal every process of the job: OpenMPI's
        # mpirun, signalled itself, ends the ranks and exits 1 even when they
        # wrote their checkpoint and exited 75.  A checkpoint written since
        # the signal (10 s of slack: the ranks may have been signalled before
        # this script) says that they did; the ranks may outlive the launcher
        # by a moment, so look for 10 s.
        for _ in 1 2 3 4 5 6 7 8 9 10 11; do
            ck=$(job_newest_ckpt "$ckdir")
            if [ -n "$ck" ] && [ "$(stat -c %Y "$ck" 2>/dev/null || echo 0)" -ge $((JOB_STOP_TIME - 10)) ]; then break; fi
            ck=""
            sleep 1
        done
        if [ -n "$ck" ]; then
            job_note "the launcher ended with status $rc after SIG$JOB_STOP, but hcnn wrote its checkpoint $ck: status 75"
            rc=75
        else
            job_note "stopped by SIG$JOB_STOP, but hcnn's status is $rc, not 75, and it wrote no checkpoint after the signal (see the messages above)"
        fi
    fi

    # 75: hcnn stopped on the signal after writing its checkpoint; after
    # Slurm's USR1 warning, requeue the job so that it continues
    if [ "$rc" -eq 75 ] && [ "$JOB_STOP" = USR1 ] && [ "$AUTO_REQUEUE" = 1 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
        if ! command -v scontrol >/dev/null; then
            job_note "scontrol not found: not requeued; submit the job again to continue from the checkpoint"
        elif scontrol requeue "$SLURM_JOB_ID"; then
            job_note "requeued job $SLURM_JOB_ID: it continues from the newest checkpoint (--resume auto)"
        else
            job_note "scontrol requeue $SLURM_JOB_ID failed: submit the job again to continue from the checkpoint"
        fi
    fi
    exit "$rc"
}
