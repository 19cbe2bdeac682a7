#!/usr/bin/env bash
# A real one-host Slurm for trying the job scripts of slurm/ (and for
# tests/integration/test_slurm_real.sh): Debian's slurm-wlm (22.05) and munge.
#
#   scripts/slurm-local.sh start [--mpi-default pmix|none]
#   scripts/slurm-local.sh status
#   scripts/slurm-local.sh stop
#
# start (as root) writes slurm.conf into a new temporary directory
# /tmp/hcnn-slurm.XXXXXX (also the controller's state, slurmd's spool, the
# daemons' logs in log/), remembers it in the state file
# /tmp/hcnn-slurm-local.state (HCNN_SLURM_STATE overrides), starts munged
# unless one already answers, then slurmctld and slurmd (each `-D`, in a
# session of its own, in the background), waits up to 60 s for the node to
# be idle in sinfo and prints on stdout the one line clients need:
#   export SLURM_CONF=/tmp/hcnn-slurm.XXXXXX/slurm.conf
# (e.g. eval "$(scripts/slurm-local.sh start)").  One node: this host
# (hostname), CPUs = nproc, RealMemory 90% of MemTotal, partition "debug";
# MpiDefault pmix (default; Debian's OpenMPI starts its ranks through PMIx)
# or none (--mpi-default none: a cluster where srun needs --mpi=pmix);
# AuthInfo=cred_expire=10, so that a requeued job starts again after about
# 11 s instead of 121 s; no accounting (no sacct: use scontrol show job).
# status says whether it runs (exit 0) or not (exit 1), and the export line.
# stop cancels every job of this Slurm, stops slurmd and slurmctld, and
# munged if start started it -- only the processes start recorded, never a
# daemon it did not start -- and removes the temporary directory.  A start
# that fails stops what it had started.
#
# Exit status: 0 done; 77 cannot start here (not root, the packages missing:
# apt-get install slurm-wlm munge, a Slurm daemon not started by this script
# already running, this script's Slurm already running: stop it first, the
# daemons do not come up), with one line on stderr saying why; 2 usage.
set -uo pipefail

STATE=${HCNN_SLURM_STATE:-/tmp/hcnn-slurm-local.state}
ME=slurm-local.sh
WAIT_S=60

say() { echo "$ME: $*" >&2; }
cannot() { say "cannot start a local Slurm here: $*"; exit 77; }
usage() { echo "usage: scripts/slurm-local.sh start [--mpi-default pmix|none] | stop | status" >&2; exit 2; }

# is_daemon PID NAME: PID is alive and its command is NAME (or still the
# setsid/env that start runs it through, for a moment)
is_daemon() {
    [ -n "$1" ] || return 1
    case "$(cat "/proc/$1/comm" 2>/dev/null)" in "$2") return 0 ;; setsid | env) [ "$2" != munged ] ;; *) return 1 ;; esac
}
munge_ok() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

load_state() {
    DIR="" CONF="" CTLD_PID="" SLURMD_PID="" MUNGE_PID="" MPI_DEFAULT=""
    [ -f "$STATE" ] || return 1
    # shellcheck disable=SC1090
    . "$STATE"
}
running() { is_daemon "$CTLD_PID" slurmctld && is_daemon "$SLURMD_PID" slurmd; }

# stop_pid PID NAME: TERM, 15 s to end, then KILL (only if it still is NAME)
stop_pid() {
    is_daemon "$1" "$2" || return 0
    kill -TERM "$1" 2>/dev/null
    for _ in $(seq 1 30); do is_daemon "$1" "$2" || return 0; sleep 0.5; done
    say "$2 ($1) did not stop in 15 s: killed"
    kill -KILL "$1" 2>/dev/null
}

# the slurmstepd processes of this Slurm: they run in the directory slurmd
# was started in, DIR
our_stepds() {
    local p
    [ -n "$DIR" ] || return 0
    for p in $(pgrep -x slurmstepd 2>/dev/null); do
        [ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$DIR" ] && echo "$p"
    done
}

kill_tree() { # PID: KILL to PID and every process below it
    local c
    for c in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$c"; done
    kill -KILL "$1" 2>/dev/null
}

do_stop() {
    load_state || { say "not running (no $STATE)"; return 0; }
    export SLURM_CONF=$CONF
    if is_daemon "$CTLD_PID" slurmctld; then
        # every job of this Slurm ends (their processes get TERM, then KILL
        # after KillWait); up to 30 s for them to go
        local jobs
        jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
        if [ -n "${jobs// /}" ]; then
            say "cancelling job(s) $jobs"
            # shellcheck disable=SC2086
            timeout 10 scancel $jobs 2>/dev/null
            for _ in $(seq 1 60); do
                [ -z "$(timeout 10 squeue -h -o %i 2>/dev/null)" ] && break
                sleep 0.5
            done
        fi
    fi
    local stepds
    stepds=$(our_stepds)
    stop_pid "$SLURMD_PID" slurmd
    stop_pid "$CTLD_PID" slurmctld
    # a job step that outlived slurmd: it and the job's processes below it
    for p in $stepds $(our_stepds); do is_daemon "$p" slurmstepd && kill_tree "$p"; done
    if [ -n "$MUNGE_PID" ]; then stop_pid "$MUNGE_PID" munged; fi
    case "$DIR" in /tmp/hcnn-slurm.*) rm -rf "$DIR" ;; esac
    rm -f "$STATE"
    say "stopped"
}

do_status() {
    if load_state && running; then
        echo "export SLURM_CONF=$CONF"
        say "running (slurmctld $CTLD_PID, slurmd $SLURMD_PID, MpiDefault=$MPI_DEFAULT, logs in $DIR/log)"
        SLURM_CONF=$CONF timeout 10 sinfo >&2
        return 0
    fi
    say "not running"
    return 1
}

do_start() {
    local mpi=pmix
    while [ $# -gt 0 ]; do
        case "$1" in
        --mpi-default) [ $# -ge 2 ] || usage; mpi=$2; shift 2 ;;
        --mpi-default=*) mpi=${1#*=}; shift ;;
        *) usage ;;
        esac
    done
    case "$mpi" in pmix | none) ;; *) say "--mpi-default takes pmix or none, not '$mpi'"; exit 2 ;; esac

    [ "$(id -u)" -eq 0 ] || cannot "not root (it starts munged, slurmctld and slurmd)"
    local t
    for t in slurmctld slurmd munged munge unmunge sinfo scontrol squeue scancel sbatch srun; do
        command -v "$t" >/dev/null || cannot "$t not found (Debian: apt-get install slurm-wlm munge)"
    done
    id slurm >/dev/null 2>&1 || cannot "no user 'slurm' (Debian's slurm-wlm creates it)"
    id munge >/dev/null 2>&1 || cannot "no user 'munge' (Debian's munge creates it)"
    [ -f /etc/munge/munge.key ] || cannot "no /etc/munge/munge.key (Debian's munge creates it)"
    if load_state; then
        if running; then cannot "already running (MpiDefault=$MPI_DEFAULT, $CONF): scripts/slurm-local.sh stop first"; fi
        say "a stale state file: cleaning up after the last start"
        do_stop
    fi
    local p
    for p in slurmctld slurmd; do
        if pgrep -x "$p" >/dev/null; then cannot "a $p not started by this script is running (pid $(pgrep -x "$p" | paste -sd " " -))"; fi
    done

    DIR=$(mktemp -d /tmp/hcnn-slurm.XXXXXX) || cannot "mktemp failed"
    CONF=$DIR/slurm.conf CTLD_PID="" SLURMD_PID="" MUNGE_PID="" MPI_DEFAULT=$mpi
    save_state
    # a failure from here on stops what was started
    trap 'say "start failed: stopping what it started"; do_stop >/dev/null 2>&1' EXIT
    chmod 755 "$DIR"
    mkdir -p "$DIR/state" "$DIR/log" "$DIR/run" "$DIR/slurmd"
    chown slurm: "$DIR/state" "$DIR/log" "$DIR/run"

    # munge: the one running, or our own
    if ! munge_ok; then
        mkdir -p /run/munge /var/lib/munge /var/log/munge
        chown munge: /run/munge /var/lib/munge /var/log/munge
        chmod 755 /run/munge
        runuser -u munge -- munged --force >"$DIR/log/munged.out" 2>&1 ||
            fail "munged did not start: $(tail -n 1 "$DIR/log/munged.out")"
        MUNGE_PID=$(cat /run/munge/munged.pid 2>/dev/null)
        save_state
        for _ in $(seq 1 20); do munge_ok && break; sleep 0.25; done
        munge_ok || fail "munged does not answer (munge -n | unmunge): $(tail -n 1 /var/log/munge/munged.log 2>/dev/null)"
    fi

    local host cpus mem
    host=$(hostname -s)
    cpus=$(nproc --all)
    mem=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 * 0.9 }' /proc/meminfo)
    cat >"$CONF" <<EOF
# written by scripts/slurm-local.sh: a one-host Slurm for hcnn's job scripts
ClusterName=hcnnlocal
SlurmctldHost=$host(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
# a requeued job starts again after cred_expire + 1 s (default 120)
AuthInfo=cred_expire=10
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/slurmd
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=$mpi
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MailProg=/bin/true
KillWait=15
# pending jobs (a requeued one once its BeginTime passes) start within
# seconds, not at the next 30/60 s scheduling pass
SchedulerParameters=sched_interval=2,bf_interval=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    chmod 644 "$CONF"
    export SLURM_CONF=$CONF

    setsid env -C "$DIR" slurmctld -D -f "$CONF" >"$DIR/log/slurmctld.out" 2>&1 </dev/null &
    CTLD_PID=$!
    save_state
    setsid env -C "$DIR" slurmd -D -f "$CONF" >"$DIR/log/slurmd.out" 2>&1 </dev/null &
    SLURMD_PID=$!
    save_state

    local state=""
    for _ in $(seq 1 $((WAIT_S * 2))); do
        # (kill -0: for a moment after the start the process is still env)
        kill -0 "$CTLD_PID" 2>/dev/null || fail "slurmctld exited: $(last_line "$DIR/log/slurmctld.out" "$DIR/log/slurmctld.log")"
        kill -0 "$SLURMD_PID" 2>/dev/null || fail "slurmd exited: $(last_line "$DIR/log/slurmd.out" "$DIR/log/slurmd.log")"
        state=$(timeout 5 sinfo -h -n "$host" -o %t 2>/dev/null | head -n 1)
        [ "$state" = idle ] && break
        sleep 0.5
    done
    [ "$state" = idle ] || fail "node $host is not idle after $WAIT_S s (sinfo: '${state:-no answer}'); see $DIR/log"
    trap - EXIT
    say "running: node $host ($cpus CPUs, ${mem} MB), partition debug, MpiDefault=$mpi, logs in $DIR/log"
    echo "export SLURM_CONF=$CONF"
}
save_state() {
    printf 'DIR=%q\nCONF=%q\nCTLD_PID=%q\nSLURMD_PID=%q\nMUNGE_PID=%q\nMPI_DEFAULT=%q\n' \
        "$DIR" "$CONF" "$CTLD_PID" "$SLURMD_PID" "$MUNGE_PID" "$MPI_DEFAULT" >"$STATE"
}
last_line() { cat "$@" 2>/dev/null | grep . | tail -n 1; }
# fail WHY: the daemons did not come up: 77 (the EXIT trap stops them)
fail() { say "cannot start a local Slurm here: $*"; exit 77; }

case "${1:-}" in
start) shift; do_start "$@" ;;
stop) [ $# -eq 1 ] || usage; do_stop ;;
status) [ $# -eq 1 ] || usage; do_status ;;
*) usage ;;
esac
