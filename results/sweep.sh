#!/usr/bin/env bash
# A scaling sweep of hcnn: runs every strategy at every rank count, one CSV
# per run, then results/plot.sh on all of them (speed-up table and plots).
# Runs on one machine as it is, and on a cluster from slurm/scaling.sbatch
# (--mpirun "srun ...").
#
#   results/sweep.sh [--ranks "1 2 4"] [--strategies "serial data pipeline"]
#                    [--config FILE] [--epochs N] [--threads T] [--out DIR]
#                    [--mpirun "CMD"] [--extra "--set k=v ..."] [--set k=v]...
#                    [--stages "N 2"] [--microbatches M] [--weak "data"]
#                    [--batch B] [--timeout SECONDS] [--np-flag FLAG]
#                    [--hcnn PATH] [--results DIR] [--no-plot] [--dry-run]
#
# The runs (N = each rank count, B = the config's global batch_size):
#   serial_n1                 strategy serial, one process, no launcher
#   data_nN_strong            strategy data on N ranks, global batch B
#   data_nN_weak              (N > 1) strategy data on N ranks, global batch N x B
#                             (the per-rank batch stays B); --weak "" drops them
#   pipeline_nN_sS_strong     (N >= 2) strategy pipeline with S stages and N/S
#                             replicas, M micro-batches, global batch B, for each
#                             S of --stages ("N" means S = N) with N % S == 0
# Every run: --set epochs=E --set threads=T, the extra settings, then
# --set strategy=... --set csv=OUT/<name>.csv --set checkpoint_dir= (no
# checkpoint), output in OUT/<name>.log; every launch runs under
# `timeout --kill-after=30 SECONDS`.  A failed run is reported (exit status and
# the end of its log) and the sweep goes on; the exit status is 1 when any run,
# or the plotting, failed.  The plotting leaves the first epoch of each run
# out of the timings when --epochs is 2 or more (plot.sh --warmup 1).  OUT/commands.txt lists the commands,
# OUT/summary.txt the status and wall time of each run.
#
# Defaults (this machine): --config configs/synthetic_small.yaml with
# --extra "--set synthetic_train=2048 --set synthetic_test=256" (that extra
# only for the default config and only when --extra is not given), --epochs 2,
# --threads 1 (OMP_NUM_THREADS per rank), --ranks "1 2 4",
# --strategies "serial data pipeline", --stages "N 2", --microbatches 4,
# --weak "data", --timeout 900, --mpirun "mpirun --oversubscribe --bind-to none
# -x OMP_NUM_THREADS", --out results/runs/<UTC timestamp>, --results results/
# (where plot.sh writes metrics/ and plots/), --hcnn $HCNN or ./hcnn of the
# source tree.
#
# The launcher gets the rank count as "-np N" (mpirun, mpiexec), as
# "--nodes=N --ntasks=N" (srun: one rank per node), or as "FLAG N" with
# --np-flag FLAG.  As root, OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) are set for mpirun.
# --extra is split at white space (values cannot contain spaces; use --set for
# those).
set -euo pipefail

prog=sweep.sh
script_dir=$(cd "$(dirname "$0")" && pwd)
srcdir=$(dirname "$script_dir")

usage() { sed -n '7,13p' "$0" | sed 's/^# \{0,1\}//'; echo "(the header of $0 explains every option)"; }
bad() { echo "$prog: error: $*" >&2; exit 2; }

ranks_list="1 2 4"
strategies="serial data pipeline"
config=$srcdir/configs/synthetic_small.yaml
epochs=2
threads=1
out=""
mpirun_cmd="mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS"
extra=""
extra_given=0
set_args=()
stages_list="N 2"
microbatches=4
weak="data"
batch=""
timeout_s=900
np_flag=""
hcnn=${HCNN:-$srcdir/hcnn}
results=$script_dir
plot=1
dry=0

need() { [ $# -ge 2 ] || bad "$1 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
    --ranks) need "$@"; ranks_list=$2; shift 2 ;;
    --strategies) need "$@"; strategies=$2; shift 2 ;;
    --config) need "$@"; config=$2; shift 2 ;;
    --epochs) need "$@"; epochs=$2; shift 2 ;;
    --threads) need "$@"; threads=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --mpirun) need "$@"; mpirun_cmd=$2; shift 2 ;;
    --extra) need "$@"; extra=$2; extra_given=1; shift 2 ;;
    --set) need "$@"; set_args+=(--set "$2"); shift 2 ;;
    --stages) need "$@"; stages_list=$2; shift 2 ;;
    --microbatches) need "$@"; microbatches=$2; shift 2 ;;
    --weak) need "$@"; weak=$2; shift 2 ;;
    --batch) need "$@"; batch=$2; shift 2 ;;
    --timeout) need "$@"; timeout_s=$2; shift 2 ;;
    --np-flag) need "$@"; np_flag=$2; shift 2 ;;
    --hcnn) need "$@"; hcnn=$2; shift 2 ;;
    --results) need "$@"; results=$2; shift 2 ;;
    --no-plot) plot=0; shift ;;
    --dry-run) dry=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "$prog: error: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done

posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || bad "$1 must be a positive integer, not '$2'"; }
for n in $ranks_list; do posint --ranks "$n"; done
[ -n "${ranks_list// /}" ] || bad "--ranks is empty"
posint --epochs "$epochs"
posint --threads "$threads"
posint --microbatches "$microbatches"
posint --timeout "$timeout_s"
for s in $strategies; do
    case "$s" in serial | data | pipeline) ;; *) bad "unknown strategy '$s' in --strategies (serial, data, pipeline)" ;; esac
done
for s in $stages_list; do [ "$s" = N ] || posint --stages "$s"; done
for s in $weak; do
    case "$s" in data | pipeline) ;; *) bad "--weak takes data and/or pipeline, not '$s'" ;; esac
done
if [ ! -f "$config" ] && [ -f "$srcdir/$config" ]; then config=$srcdir/$config; fi
[ -f "$config" ] || bad "config $config not found"

# the extra settings: --extra (split at white space), then every --set
if [ "$extra_given" -eq 0 ] && [ "$config" -ef "$srcdir/configs/synthetic_small.yaml" ]; then
    extra="--set synthetic_train=2048 --set synthetic_test=256"
fi
read -r -a extra_args <<<"$extra" || true
extra_args+=("${set_args[@]+"${set_args[@]}"}")

# B, the global batch of the strong-scaling runs: --batch, else the last
# batch_size in the extra settings, else the config's, else hcnn's default 64
if [ -z "$batch" ]; then
    for a in "${extra_args[@]+"${extra_args[@]}"}"; do
        case "$a" in batch_size=*) batch=${a#batch_size=} ;; esac
    done
fi
if [ -z "$batch" ]; then
    batch=$(sed -n 's/^batch_size:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$config" | tail -n 1)
fi
batch=${batch:-64}
posint "the batch size" "$batch"

[ -n "$out" ] || out=$script_dir/runs/$(date -u +%Y%m%dT%H%M%SZ)
read -r -a launcher <<<"$mpirun_cmd" || true
[ ${#launcher[@]} -gt 0 ] || bad "--mpirun is empty"

# ---- the plan -----------------------------------------------------------------
names=() nps=() kvs=()
add() { # name ranks (0: no launcher) key=value...
    names+=("$1"); nps+=("$2"); shift 2
    kvs+=("$*")
}
has() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; }
pipeline_runs() { # scaling batch N
    local sc=$1 b=$2 n=$3 s S seen=" "
    [ "$n" -ge 2 ] || return 0
    for s in $stages_list; do
        if [ "$s" = N ]; then S=$n; else S=$s; fi
        if [ "$S" -lt 2 ] || [ "$S" -gt "$n" ] || [ $((n % S)) -ne 0 ] || has "$seen" "$S"; then continue; fi
        seen+="$S "
        add "pipeline_n${n}_s${S}_$sc" "$n" strategy=pipeline stages="$S" microbatches="$microbatches" batch_size="$b"
    done
}
if has "$strategies" serial; then add serial_n1 0 strategy=serial batch_size="$batch"; fi
if has "$strategies" data; then
    for n in $ranks_list; do add "data_n${n}_strong" "$n" strategy=data batch_size="$batch"; done
    if has "$weak" data; then
        for n in $ranks_list; do
            if [ "$n" -gt 1 ]; then add "data_n${n}_weak" "$n" strategy=data batch_size=$((n * batch)); fi
        done
    fi
fi
if has "$strategies" pipeline; then
    for n in $ranks_list; do pipeline_runs strong "$batch" "$n"; done
    if has "$weak" pipeline; then
        for n in $ranks_list; do
            if [ "$n" -gt 1 ]; then pipeline_runs weak $((n * batch)) "$n"; fi
        done
    fi
fi
[ ${#names[@]} -gt 0 ] || bad "nothing to run (strategies '$strategies', ranks '$ranks_list')"

np_args() { # N -> the launcher's rank-count arguments
    if [ -n "$np_flag" ]; then echo "$np_flag $1"
    elif [ "$(basename "${launcher[0]}")" = srun ]; then echo "--nodes=$1 --ntasks=$1"
    else echo "-np $1"; fi
}
command_of() { # index -> the command in the array cmd
    local i=$1 kv a
    local args=(train --config "$config" --set epochs="$epochs" --set threads="$threads"
                "${extra_args[@]+"${extra_args[@]}"}")
    for kv in ${kvs[i]}; do args+=(--set "$kv"); done
    args+=(--set csv="$out/${names[i]}.csv" --set checkpoint_dir=)
    cmd=(timeout --kill-after=30 "$timeout_s")
    if [ "${nps[i]}" -gt 0 ]; then
        read -r -a a <<<"$(np_args "${nps[i]}")"
        cmd+=("${launcher[@]}" "${a[@]}")
    fi
    cmd+=("$hcnn" "${args[@]}")
}

export OMP_NUM_THREADS=$threads
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

echo "$prog: ${#names[@]} runs of $config, $epochs epoch(s), $threads thread(s) per rank, global batch $batch, ranks $ranks_list"
if [ "$dry" -eq 1 ]; then
    for i in "${!names[@]}"; do
        command_of "$i"
        printf '%s: ' "${names[i]}"; printf '%q ' "${cmd[@]}"; echo
    done
    exit 0
fi

[ -x "$hcnn" ] || bad "$hcnn is not an executable (build it with 'make', or pass --hcnn PATH)"
command -v timeout >/dev/null || bad "timeout not found (coreutils)"
for i in "${!names[@]}"; do
    if [ "${nps[i]}" -gt 0 ] && ! command -v "${launcher[0]}" >/dev/null; then
        bad "launcher '${launcher[0]}' not found (--mpirun; Debian package openmpi-bin for mpirun)"
    fi
done
mkdir -p "$out" || bad "cannot create $out"
echo "$prog: output in $out"

# ---- the runs -------------------------------------------------------------------
: >"$out/commands.txt"
: >"$out/summary.txt"
failed=() csvs=()
for i in "${!names[@]}"; do
    name=${names[i]}
    command_of "$i"
    { printf '%q ' "${cmd[@]}"; echo; } >>"$out/commands.txt"
    rm -f "$out/$name.csv"
    printf '%s: [%d/%d] %s ... ' "$prog" $((i + 1)) ${#names[@]} "$name"
    start=$(date +%s.%N)
    if "${cmd[@]}" </dev/null >"$out/$name.log" 2>&1; then rc=0; else rc=$?; fi
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    rows=0
    [ -f "$out/$name.csv" ] && rows=$(($(wc -l <"$out/$name.csv") - 1))
    if [ "$rc" -eq 0 ] && [ "$rows" -ge 1 ]; then
        echo "ok (${secs} s, $rows epoch(s))"
        echo "$name ok ${secs}s" >>"$out/summary.txt"
        csvs+=("$out/$name.csv")
        continue
    fi
    case "$rc" in
    0) why="exit 0 but no CSV rows in $out/$name.csv" ;;
    124 | 137) why="timed out after ${timeout_s} s (exit $rc)" ;;
    *) why="exit status $rc" ;;
    esac
    echo "FAILED: $why"
    echo "$name FAILED ${secs}s $why" >>"$out/summary.txt"
    echo "  command: $(printf '%q ' "${cmd[@]}")"
    if grep -qE '^hcnn: .*(error|fatal)' "$out/$name.log"; then
        echo "  hcnn's messages in $out/$name.log:"
        grep -E '^hcnn: .*(error|fatal)' "$out/$name.log" | head -n 4 | sed 's/^/    /'
    else
        echo "  last lines of $out/$name.log:"
        tail -n 5 "$out/$name.log" | sed 's/^/    /'
    fi
    failed+=("$name")
done

# ---- table and plots ------------------------------------------------------------
plot_ok=1
if [ "$plot" -eq 1 ] && [ ${#csvs[@]} -gt 0 ]; then
    # with 2+ epochs per run, the first (warm-up) epoch is left out of the timings
    warmup=0
    if [ "$epochs" -ge 2 ]; then warmup=1; fi
    echo "$prog: results/plot.sh -o $results --warmup $warmup on ${#csvs[@]} CSV file(s)"
    if ! "$script_dir/plot.sh" -o "$results" --warmup "$warmup" "${csvs[@]}"; then
        plot_ok=0
        echo "$prog: plotting FAILED (message above); the CSV files are in $out"
    fi
fi

echo "$prog: runs, logs and CSVs:  $out  (commands.txt, summary.txt)"
if [ "$plot" -eq 1 ] && [ ${#csvs[@]} -gt 0 ] && [ "$plot_ok" -eq 1 ]; then
    echo "$prog: speed-up table:       $results/metrics/speedup_table.csv"
    echo "$prog: plots:                $results/plots/{speedup,efficiency,loss,accuracy}.png"
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "$prog: ${#failed[@]} of ${#names[@]} runs FAILED: ${failed[*]}" >&2
    exit 1
fi
if [ ${#csvs[@]} -eq 0 ] || [ "$plot_ok" -eq 0 ]; then exit 1; fi
echo "$prog: all ${#names[@]} runs ok"
