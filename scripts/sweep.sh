#!/usr/bin/env bash
# A scaling sweep of hcnn: runs every strategy at every rank count, each point
# several times, one CSV per run, then scripts/plot.sh on all of them
# (speed-up table and plots).  Runs on one machine as it is, and on a cluster
# from slurm/scaling.sbatch (--mpirun "srun ...").
#
#   scripts/sweep.sh [--ranks "1 2 4"] [--strategies "serial data pipeline"]
#                    [--scaling "strong weak"] [--repeats N] [--strong-batch grow|fixed]
#                    [--config FILE] [--epochs N] [--threads T] [--batch B]
#                    [--stages "N 2"] [--microbatches M] [--weak "data pipeline"]
#                    [--out DIR] [--results DIR] [--force] [--mpirun "CMD"]
#                    [--np-flag FLAG] [--extra "--set k=v ..."] [--set k=v]...
#                    [--timeout SECONDS] [--hcnn PATH] [--no-plot] [--dry-run]
#
# The points (N = each rank count of --ranks, T = --threads, the threads of
# every rank, B = the batch: --batch, else the last batch_size of the extra
# settings, else the config's, else 64; M = --microbatches):
#   serial_n1                 strategy serial, one process, no launcher
#   data_nN_strong            strategy data on N ranks, global batch B (grown, below)
#   pipeline_nN_sS_strong     (N >= 2) strategy pipeline with S stages and R = N/S
#                             replicas, M micro-batches, global batch B (grown), for
#                             each S of --stages ("N" means S = N) with N % S == 0
#   data_nN_weak              (N > 1) strategy data on N ranks, global batch N x B:
#                             every rank holds the per-rank batch b = B
#   pipeline_nN_sS_weak       (N >= 2) S stages x R replicas, global batch N x B
#                             (each replica carries S x B: the same work per rank),
#                             S x M micro-batches, so the micro-batch is B/M at every
#                             point (B must be a multiple of M)
#   serial_n1_weak, data_n1_weak
#                             the 1-rank run at batch B that a weak series is
#                             measured against, when no strong point is one
#                             (data: data_n1 when 1 is in --ranks, else serial;
#                             pipeline: serial, else data_n1); serial_n1_weak also
#                             when serial is in --strategies and --scaling is weak
# --scaling picks strong and/or weak (default both); --weak the strategies that
# get weak points (default "data pipeline"; "" for none).
# Strong scaling keeps the threads busy (--strong-batch grow, the default): the
# global batch G of a point is the smallest value >= B that is a multiple of N
# (serial, data) or of R x M (pipeline) with a per-rank share G/N >= T (data;
# serial: G >= T) or a micro-batch G/(R x M) >= T (pipeline).  The table's
# batch_note says why a batch differs from B ("grown from 128 to 2048: 32 ranks
# x 64 threads"); with --strong-batch fixed every strong point runs B and the
# note names the idle threads ("per-rank share 4 < 64 threads: idle threads").
# Speed-up and efficiency compare images/s with the point's 1-rank baseline
# (scripts/plot.sh explains it).
#
# Repeats: every point runs --repeats N times (default 3), as the runs
# <point>_r1 .. <point>_rN, one round of all points after the other (a slow
# spell of the machine then spreads over the points).  The table has one row
# per point: the median images/s and epoch time with their min and max, the
# spread (max - min)/median of images/s and noisy = 1 when it exceeds 0.20.
#
# Where it goes: everything of a sweep is in its own directory, --out DIR
# (default results/<SLURM_JOB_ID>/ in a Slurm job, else results/<UTC time,
# e.g. 20261123T101500Z>/):
#   DIR/runs/<run>.csv, .log, .config.yaml  each run's CSV (hcnn train --set
#                             csv=...), its output, its configuration
#   DIR/commands.txt          the exact command of every run
#   DIR/summary.txt           per run: ok or FAILED, wall time, the reason
#   DIR/provenance.txt        key=value: git_commit, cpu_model, blas (the kernels
#                             the runs used, from their logs; else hcnn
#                             --version's), blas_version, mpi_library, threads,
#                             hcnn, host, started (UTC), the sweep's command,
#                             run.<run>.blas per run
#   DIR/points.tsv            per point: scaling, B, global batch, batch_note
#   DIR/speedup_table.csv     scripts/plot.sh's table, one row per point
#   DIR/plots/*.png           speedup, efficiency, loss (and accuracy, unless
#                             test_acc is the same in every row)
# --results RDIR writes the table as RDIR/metrics/speedup_table.csv and the
# plots in RDIR/plots/ instead (--results results: the committed files).  A DIR
# that already holds a speedup_table.csv (or metrics/speedup_table.csv) is
# refused unless --force, so a sweep never overwrites another's results.
# git_commit, blas and mpi_library come from `hcnn --version` ("unknown" when it
# lacks the line), cpu_model from lscpu's "Model name" (else /proc/cpuinfo), on
# the machine that runs sweep.sh.  --no-plot runs only the runs (no table, no
# plots); they can be made later with scripts/plot.sh -o DIR --table
# DIR/speedup_table.csv DIR/runs/*.csv (it finds DIR/provenance.txt and
# DIR/points.tsv by itself).
#
# Every run: --set epochs=E --set threads=T, the extra settings, then
# --set strategy=... --set csv=DIR/runs/<run>.csv --set checkpoint_dir= (no
# checkpoint), output in DIR/runs/<run>.log; every launch runs under
# `timeout --kill-after=30 SECONDS`.  A failed run is reported (exit status and
# the end of its log) and the sweep goes on; the exit status is 1 when any run,
# or the plotting, failed, 2 for a bad command line or a refused --out.  The
# plotting leaves the first epoch of each run out of the timings when --epochs
# is 2 or more (plot.sh --warmup 1).  --dry-run prints the points and every
# command (with the repeats), and runs and writes nothing.
#
# Defaults (this machine): --config configs/synthetic_small.yaml with
# --extra "--set synthetic_train=2048 --set synthetic_test=256" (that extra
# only for the default config and only when --extra is not given), --epochs 2,
# --threads 1 (OMP_NUM_THREADS per rank), --ranks "1 2 4", --repeats 3,
# --strategies "serial data pipeline", --scaling "strong weak", --stages "N 2",
# --microbatches 4, --weak "data pipeline", --strong-batch grow, --timeout 900,
# --mpirun "mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS", --hcnn
# $HCNN or ./hcnn of the source tree.
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
cmdline="$0$(printf ' %q' "$@")"

usage() { sed -n '/^#   scripts\/sweep.sh/,/^#$/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; echo "(the header of $0 explains every option)"; }
bad() { echo "$prog: error: $*" >&2; exit 2; }

ranks_list="1 2 4"
strategies="serial data pipeline"
scaling="strong weak"
repeats=3
strong_batch=grow
config=$srcdir/configs/synthetic_small.yaml
epochs=2
threads=1
out=""
results=""
force=0
mpirun_cmd="mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS"
extra=""
extra_given=0
set_args=()
stages_list="N 2"
microbatches=4
weak="data pipeline"
batch=""
timeout_s=900
np_flag=""
hcnn=${HCNN:-$srcdir/hcnn}
plot=1
dry=0

need() { [ $# -ge 2 ] || bad "$1 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
    --ranks) need "$@"; ranks_list=$2; shift 2 ;;
    --strategies) need "$@"; strategies=$2; shift 2 ;;
    --scaling) need "$@"; scaling=$2; shift 2 ;;
    --repeats) need "$@"; repeats=$2; shift 2 ;;
    --strong-batch) need "$@"; strong_batch=$2; shift 2 ;;
    --config) need "$@"; config=$2; shift 2 ;;
    --epochs) need "$@"; epochs=$2; shift 2 ;;
    --threads) need "$@"; threads=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --results) need "$@"; results=$2; shift 2 ;;
    --force) force=1; shift ;;
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
posint --repeats "$repeats"
for s in $strategies; do
    case "$s" in serial | data | pipeline) ;; *) bad "unknown strategy '$s' in --strategies (serial, data, pipeline)" ;; esac
done
for s in $stages_list; do [ "$s" = N ] || posint --stages "$s"; done
for s in $weak; do
    case "$s" in data | pipeline) ;; *) bad "--weak takes data and/or pipeline, not '$s'" ;; esac
done
[ -n "${scaling// /}" ] || bad "--scaling is empty (strong, weak or \"strong weak\")"
for s in $scaling; do
    case "$s" in strong | weak) ;; *) bad "--scaling takes strong and/or weak, not '$s'" ;; esac
done
case "$strong_batch" in grow | fixed) ;; *) bad "--strong-batch is grow or fixed, not '$strong_batch'" ;; esac
if [ ! -f "$config" ] && [ -f "$srcdir/$config" ]; then config=$srcdir/$config; fi
[ -f "$config" ] || bad "config $config not found"

# the extra settings: --extra (split at white space), then every --set
if [ "$extra_given" -eq 0 ] && [ "$config" -ef "$srcdir/configs/synthetic_small.yaml" ]; then
    extra="--set synthetic_train=2048 --set synthetic_test=256"
fi
read -r -a extra_args <<<"$extra" || true
extra_args+=("${set_args[@]+"${set_args[@]}"}")

# B, the global batch of the strong-scaling points and the per-rank batch of
# the weak ones: --batch, else the last batch_size in the extra settings, else
# the config's, else hcnn's default 64
if [ -z "$batch" ]; then
    for a in "${extra_args[@]+"${extra_args[@]}"}"; do
        case "$a" in batch_size=*) batch=${a#batch_size=} ;; esac
    done
fi
if [ -z "$batch" ]; then
    batch=$(sed -n 's/^batch_size:[[:space:]]*\([0-9][0-9]*\).*/\1/p' "$config" | tail -n 1)
fi
batch=${batch:-64}
posint "the batch size (--batch, batch_size)" "$batch"
B=$batch T=$threads M0=$microbatches

# the sweep's directory: --out, else results/<Slurm job id or UTC time>/
if [ -z "$out" ]; then
    if [ -n "${SLURM_JOB_ID:-}" ]; then
        [[ "$SLURM_JOB_ID" =~ ^[A-Za-z0-9._-]+$ ]] || bad "SLURM_JOB_ID '$SLURM_JOB_ID' cannot name a directory; pass --out DIR"
        out=$srcdir/results/$SLURM_JOB_ID
    else
        out=$srcdir/results/$(date -u +%Y%m%dT%H%M%SZ)
    fi
fi
out=${out%/}
for f in "$out/speedup_table.csv" "$out/metrics/speedup_table.csv"; do
    if [ -e "$f" ] && [ "$force" -eq 0 ]; then
        bad "--out $out already holds a speed-up table ($f): a sweep does not overwrite another's results; pick another --out, or pass --force"
    fi
done
if [ -n "$results" ]; then
    table=$results/metrics/speedup_table.csv plotdir=$results/plots
else
    table=$out/speedup_table.csv plotdir=$out/plots
fi
read -r -a launcher <<<"$mpirun_cmd" || true
[ ${#launcher[@]} -gt 0 ] || bad "--mpirun is empty"

# ---- the plan: the points -------------------------------------------------------
pnames=() pnps=() pranks=() pstrat=() pscal=() pG=() pnote=() pkvs=()
addp() { # name launcher-ranks (0: none) ranks strategy scaling G note key=value...
    pnames+=("$1"); pnps+=("$2"); pranks+=("$3"); pstrat+=("$4"); pscal+=("$5"); pG+=("$6"); pnote+=("$7")
    shift 7
    pkvs+=("$*")
}
has() { case " $1 " in *" $2 "*) return 0 ;; esac; return 1; }
plural() { if [ "$1" -eq 1 ]; then echo "$1 $2"; else echo "$1 ${2}s"; fi; }
# strong_batch_of UNIT WHAT SHARE-WORD: sets G and note for a strong point
# whose batch divides into UNIT shares (ranks, or replicas x micro-batches)
strong_batch_of() {
    local unit=$1 what=$2 word=$3 k why
    if [ "$strong_batch" = fixed ]; then
        G=$B note=""
        if [ $((B / unit)) -lt "$T" ]; then note="$word $((B / unit)) < $T threads: idle threads"; fi
        return 0
    fi
    k=$(((B + unit - 1) / unit))
    if [ "$k" -lt "$T" ]; then k=$T why="$what x $(plural "$T" thread)"
    elif [ "$what" = "$(plural "$unit" rank)" ]; then why="a multiple of $what"
    else why="a multiple of $unit = $what"; fi
    G=$((unit * k)) note=""
    if [ "$G" -ne "$B" ]; then note="grown from $B to $G: $why"; fi
}
idle() { # SHARE WORD: "; WORD SHARE < T threads: idle threads" when SHARE < T
    if [ "$1" -lt "$T" ]; then echo "; $2 $1 < $T threads: idle threads"; fi
}
# the stage counts S of N ranks (N >= 2): each S of --stages with 2 <= S <= N, N % S == 0
stages_of() {
    local n=$1 s S seen=" "
    [ "$n" -ge 2 ] || return 0
    for s in $stages_list; do
        if [ "$s" = N ]; then S=$n; else S=$s; fi
        if [ "$S" -lt 2 ] || [ "$S" -gt "$n" ] || [ $((n % S)) -ne 0 ] || has "$seen" "$S"; then continue; fi
        seen+="$S "
        echo "$S"
    done
}
# ensure_base STRATEGY: a 1-rank point of STRATEGY at batch B (a weak baseline)
ensure_base() {
    local i
    for i in "${!pnames[@]}"; do
        if [ "${pstrat[i]}" = "$1" ] && [ "${pranks[i]}" -eq 1 ] && [ "${pG[i]}" -eq "$B" ]; then return 0; fi
    done
    if [ "$1" = serial ]; then
        addp serial_n1_weak 0 1 serial weak "$B" "weak baseline: 1 rank x $B$(idle "$B" "per-rank share")" \
            strategy=serial batch_size="$B"
    else
        addp data_n1_weak 1 1 data weak "$B" "weak baseline: 1 rank x $B$(idle "$B" "per-rank share")" \
            strategy=data batch_size="$B"
    fi
}

if has "$scaling" strong; then
    if has "$strategies" serial; then
        strong_batch_of 1 "1 rank" "per-rank share"
        addp serial_n1 0 1 serial strong "$G" "$note" strategy=serial batch_size="$G"
    fi
    if has "$strategies" data; then
        for n in $ranks_list; do
            strong_batch_of "$n" "$(plural "$n" rank)" "per-rank share"
            addp "data_n${n}_strong" "$n" "$n" data strong "$G" "$note" strategy=data batch_size="$G"
        done
    fi
    if has "$strategies" pipeline; then
        mbatches="$M0 micro-batches"
        if [ "$M0" -eq 1 ]; then mbatches="1 micro-batch"; fi
        for n in $ranks_list; do
            for S in $(stages_of "$n"); do
                R=$((n / S))
                strong_batch_of $((R * M0)) "$(plural "$R" replica) x $mbatches" micro-batch
                addp "pipeline_n${n}_s${S}_strong" "$n" "$n" pipeline strong "$G" "$note" \
                    strategy=pipeline stages="$S" microbatches="$M0" batch_size="$G"
            done
        done
    fi
fi
if has "$scaling" weak; then
    weak_data=0 weak_pipe=0
    for n in $ranks_list; do
        if [ "$n" -gt 1 ] && has "$strategies" data && has "$weak" data; then weak_data=1; fi
        if [ -n "$(stages_of "$n")" ] && has "$strategies" pipeline && has "$weak" pipeline; then weak_pipe=1; fi
    done
    if [ $weak_pipe -eq 1 ] && [ $((B % M0)) -ne 0 ]; then
        bad "weak pipeline points hold the micro-batch B/M = $B/$M0: the per-rank batch $B (--batch, else batch_size) must be a multiple of --microbatches $M0"
    fi
    # serial: the 1-rank reference of the weak series (when strong is not run)
    if [ $((weak_data + weak_pipe)) -gt 0 ] && has "$strategies" serial && ! has "$scaling" strong; then
        ensure_base serial
    fi
    if [ $weak_data -eq 1 ]; then
        if has "$ranks_list" 1; then ensure_base data
        elif has "$strategies" serial; then ensure_base serial; fi
        for n in $ranks_list; do
            if [ "$n" -gt 1 ]; then
                addp "data_n${n}_weak" "$n" "$n" data weak $((n * B)) \
                    "weak: $n ranks x $B per rank$(idle "$B" "per-rank share")" strategy=data batch_size=$((n * B))
            fi
        done
    fi
    if [ $weak_pipe -eq 1 ]; then
        if has "$strategies" serial; then ensure_base serial
        elif has "$strategies" data; then ensure_base data
        else echo "$prog: note: no serial or data run, so the weak pipeline points have no baseline (no speed-up)"; fi
        for n in $ranks_list; do
            for S in $(stages_of "$n"); do
                addp "pipeline_n${n}_s${S}_weak" "$n" "$n" pipeline weak $((n * B)) \
                    "weak: $n ranks x $B per rank; $((S * M0)) micro-batches of $((B / M0))$(idle $((B / M0)) micro-batch)" \
                    strategy=pipeline stages="$S" microbatches=$((S * M0)) batch_size=$((n * B))
            done
        done
    fi
fi
[ ${#pnames[@]} -gt 0 ] || bad "nothing to run (strategies '$strategies', scaling '$scaling', ranks '$ranks_list')"
if has "$strategies" pipeline && ! has "$strategies" serial && has "$scaling" strong; then
    echo "$prog: note: no serial run, so the strong pipeline points have no baseline (no speed-up)"
fi

# ---- the runs: every point --repeats times, one round after the other ---------------
names=() point=()
for ((k = 1; k <= repeats; k++)); do
    for i in "${!pnames[@]}"; do names+=("${pnames[i]}_r$k"); point+=("$i"); done
done

np_args() { # N -> the launcher's rank-count arguments
    if [ -n "$np_flag" ]; then echo "$np_flag $1"
    elif [ "$(basename "${launcher[0]}")" = srun ]; then echo "--nodes=$1 --ntasks=$1"
    else echo "-np $1"; fi
}
command_of() { # run index -> the command in the array cmd
    local i=$1 p=${point[$1]} kv a
    local args=(train --config "$config" --set epochs="$epochs" --set threads="$threads"
                "${extra_args[@]+"${extra_args[@]}"}")
    for kv in ${pkvs[p]}; do args+=(--set "$kv"); done
    args+=(--set csv="$out/runs/${names[i]}.csv" --set checkpoint_dir=)
    cmd=(timeout --kill-after=30 "$timeout_s")
    if [ "${pnps[p]}" -gt 0 ]; then
        read -r -a a <<<"$(np_args "${pnps[p]}")"
        cmd+=("${launcher[@]}" "${a[@]}")
    fi
    cmd+=("$hcnn" "${args[@]}")
}

export OMP_NUM_THREADS=$threads
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

echo "$prog: ${#names[@]} runs (${#pnames[@]} points x $repeats repeats) of $config, $epochs epoch(s), $threads thread(s) per rank, batch $B, ranks $ranks_list"
for i in "${!pnames[@]}"; do
    echo "$prog: point ${pnames[i]}: ${pscal[i]}, $(plural "${pranks[i]}" rank), global batch ${pG[i]}${pnote[i]:+ (${pnote[i]})}"
done
if [ "$dry" -eq 1 ]; then
    for i in "${!names[@]}"; do
        command_of "$i"
        printf '%s: ' "${names[i]}"; printf '%q ' "${cmd[@]}"; echo
    done
    echo "$prog: dry run: would write $out (runs/, commands.txt, summary.txt, provenance.txt, points.tsv), $table and $plotdir/"
    exit 0
fi

[ -x "$hcnn" ] || bad "$hcnn is not an executable (build it with 'make', or pass --hcnn PATH)"
command -v timeout >/dev/null || bad "timeout not found (coreutils)"
for p in "${!pnames[@]}"; do
    if [ "${pnps[p]}" -gt 0 ] && ! command -v "${launcher[0]}" >/dev/null; then
        bad "launcher '${launcher[0]}' not found (--mpirun; Debian package openmpi-bin for mpirun)"
    fi
done
mkdir -p "$out/runs" || bad "cannot create $out/runs"
echo "$prog: output in $out"

# ---- provenance -------------------------------------------------------------------
one_line() { tr -d '\r' | tr '\n\t' '  ' | sed 's/ *$//'; }
version=$(timeout 60 "$hcnn" --version 2>/dev/null) || version=""
vfield() { printf '%s\n' "$version" | awk -v k="$1:" '$1 == k { sub(/^[^:]*:[ \t]*/, ""); print; exit }' || true; }
git_commit=$(vfield git) blas_version=$(vfield BLAS) mpi_library=$(vfield MPI)
cpu_model=$(LC_ALL=C lscpu 2>/dev/null | awk '/^Model name:/ { sub(/^[^:]*:[ \t]*/, ""); print; exit }' || true)
if [ -z "$cpu_model" ] && [ -r /proc/cpuinfo ]; then
    cpu_model=$(awk '/^model name[ \t]*:/ { sub(/^[^:]*:[ \t]*/, ""); print; exit }' /proc/cpuinfo || true)
fi
: "${git_commit:=unknown}" "${blas_version:=unknown}" "${mpi_library:=unknown}" "${cpu_model:=unknown}"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
run_blas=()
# the BLAS of a run's log: a line "[hcnn: ]BLAS: <library> kernels: <k>", else
# the end of hcnn's first line "hcnn: model ...; global batch G; <library>
# kernels: <k> (why)"; without the "(why)"
blas_of_log() {
    awk '/^(hcnn: )?BLAS: / && b == "" { b = $0; sub(/^(hcnn: )?BLAS: */, "", b) }
         /^hcnn: model .*; global batch [0-9]+; / && m == "" { m = $0; sub(/^.*; global batch [0-9]+; /, "", m) }
         END { v = (b != "") ? b : m; sub(/ \([^()]*\)$/, "", v); if (v != "") print v }' "$1" 2>/dev/null || true
}
write_provenance() {
    local i blas="" b
    for i in "${!run_blas[@]}"; do
        b=${run_blas[i]}
        case " | $blas | " in *" | $b | "*) ;; *) blas=${blas:+$blas | }$b ;; esac
    done
    {
        echo "# the provenance of the sweep in $out (scripts/sweep.sh); key=value, read by scripts/plot.sh"
        echo "git_commit=$git_commit"
        echo "cpu_model=$cpu_model"
        # the CPUs of this machine (the plots name the machine by both: one
        # model string can be a 2-core VM or a 16-core host)
        echo "cpus=$(nproc --all 2>/dev/null || echo unknown)"
        echo "blas=${blas:-$blas_version}"
        echo "blas_version=$blas_version"
        echo "mpi_library=$mpi_library"
        echo "threads=$threads"
        echo "hcnn=$hcnn"
        echo "hcnn_version=$(printf '%s\n' "$version" | head -n 1 | one_line)"
        echo "host=$(uname -n)"
        echo "started=$started"
        echo "slurm_job_id=${SLURM_JOB_ID:-}"
        echo "config=$config"
        echo "launcher=$mpirun_cmd"
        echo "sweep=$cmdline"
        for i in "${!run_blas[@]}"; do echo "run.${names[i]}.blas=${run_blas[i]}"; done
    } >"$out/provenance.txt.tmp" && mv "$out/provenance.txt.tmp" "$out/provenance.txt"
}
write_provenance
{
    printf '# point\tscaling\tnominal batch B\tglobal batch\tbatch_note\n'
    for i in "${!pnames[@]}"; do
        printf '%s\t%s\t%s\t%s\t%s\n' "${pnames[i]}" "${pscal[i]}" "$B" "${pG[i]}" "${pnote[i]}"
    done
} >"$out/points.tsv"

# ---- the runs ---------------------------------------------------------------------
: >"$out/commands.txt"
: >"$out/summary.txt"
failed=() csvs=()
for i in "${!names[@]}"; do
    name=${names[i]}
    csv=$out/runs/$name.csv log=$out/runs/$name.log
    command_of "$i"
    { printf '%q ' "${cmd[@]}"; echo; } >>"$out/commands.txt"
    rm -f "$csv"
    printf '%s: [%d/%d] %s ... ' "$prog" $((i + 1)) ${#names[@]} "$name"
    start=$(date +%s.%N)
    if "${cmd[@]}" </dev/null >"$log" 2>&1; then rc=0; else rc=$?; fi
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    b=$(blas_of_log "$log")
    if [ -n "$b" ]; then run_blas[i]=$(printf '%s' "$b" | one_line); fi
    rows=0
    [ -f "$csv" ] && rows=$(($(wc -l <"$csv") - 1))
    if [ "$rc" -eq 0 ] && [ "$rows" -ge 1 ]; then
        echo "ok (${secs} s, $rows epoch(s))"
        echo "$name ok ${secs}s" >>"$out/summary.txt"
        csvs+=("$csv")
        continue
    fi
    case "$rc" in
    0) why="exit 0 but no CSV rows in $csv" ;;
    124 | 137) why="timed out after ${timeout_s} s (exit $rc)" ;;
    *) why="exit status $rc" ;;
    esac
    echo "FAILED: $why"
    echo "$name FAILED ${secs}s $why" >>"$out/summary.txt"
    echo "  command: $(printf '%q ' "${cmd[@]}")"
    if grep -qE '^hcnn: .*(error|fatal)' "$log"; then
        echo "  hcnn's messages in $log:"
        grep -E '^hcnn: .*(error|fatal)' "$log" | head -n 4 | sed 's/^/    /'
    else
        echo "  last lines of $log:"
        tail -n 5 "$log" | sed 's/^/    /'
    fi
    failed+=("$name")
done
write_provenance

# ---- table and plots ------------------------------------------------------------
plot_ok=1
if [ "$plot" -eq 1 ] && [ ${#csvs[@]} -gt 0 ]; then
    # with 2+ epochs per run, the first (warm-up) epoch is left out of the timings
    warmup=0
    if [ "$epochs" -ge 2 ]; then warmup=1; fi
    plot_args=(--warmup "$warmup" --provenance "$out/provenance.txt" --points "$out/points.tsv")
    if [ -n "$results" ]; then plot_args+=(-o "$results")
    else plot_args+=(-o "$out" --table "$table"); fi
    echo "$prog: scripts/plot.sh ${plot_args[*]} on ${#csvs[@]} CSV file(s)"
    if ! "$script_dir/plot.sh" "${plot_args[@]}" "${csvs[@]}"; then
        plot_ok=0
        echo "$prog: plotting FAILED (message above); the CSV files are in $out/runs"
    fi
fi

echo "$prog: runs, logs and CSVs:  $out/runs/"
echo "$prog: commands, summary:    $out/commands.txt  $out/summary.txt"
echo "$prog: provenance, points:   $out/provenance.txt  $out/points.tsv"
if [ "$plot" -eq 1 ] && [ ${#csvs[@]} -gt 0 ] && [ "$plot_ok" -eq 1 ]; then
    echo "$prog: speed-up table:       $table"
    pngs=""
    for f in "$plotdir"/*.png; do [ -e "$f" ] && pngs+=" ${f##*/}"; done
    echo "$prog: plots:                $plotdir/ ($pngs )"
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "$prog: ${#failed[@]} of ${#names[@]} runs FAILED: ${failed[*]}" >&2
    exit 1
fi
if [ ${#csvs[@]} -eq 0 ] || [ "$plot_ok" -eq 0 ]; then exit 1; fi
echo "$prog: all ${#names[@]} runs ok"
