#!/usr/bin/env bash
# Speed-up table and plots of a scaling sweep, from the per-epoch CSV files
# that `hcnn train --set csv=PATH` writes (one file per run, one row per epoch).
#
#   results/plot.sh [-o OUTDIR] [--warmup K] [--no-plots] CSV...
#
# Writes (OUTDIR defaults to the directory of this script, results/):
#   OUTDIR/metrics/speedup_table.csv  one row per run (CSV file):
#       run_id,strategy,ranks,stages,replicas,threads,batch_size,epochs,
#       time_per_epoch_s,images_per_s,speedup,efficiency,scaling
#   OUTDIR/plots/speedup.png     speed-up vs ranks, a line per strategy and scaling mode, ideal S = N
#   OUTDIR/plots/efficiency.png  efficiency vs ranks, ideal E = 1
#   OUTDIR/plots/loss.png        train loss (solid) and test loss (dashed) vs epoch, a curve per run
#   OUTDIR/plots/accuracy.png    test accuracy vs epoch, a curve per run
#
# Columns are found by name in each file's header; unknown columns are
# ignored.  Needed: run_id strategy ranks stages replicas threads batch_size
# epoch epoch_time_s images_per_s train_loss test_loss test_acc.
# A repeated header line is skipped; when an epoch appears twice in a file (a
# resumed run) its last row counts.
#
# Per run:  T = median of epoch_time_s over its epochs (robust to one slow
#           epoch), X = mean of images_per_s, N = ranks; with --warmup K both
#           leave out the first K epochs of a run that has more than K
#           (results/sweep.sh passes --warmup 1 when its runs have 2+ epochs).
#           The table's "epochs" counts all epochs.
# Baseline of a run (T1, X1): a run with ranks = 1 of the same strategy whose
#   batch_size equals the run's (strong) or the run's divided by N (weak);
#   if there is none, such a run of strategy serial.  Among several, the one
#   with the same threads is preferred, then the first given.
# scaling = strong  when batch_size == baseline batch_size (same global batch):
#               speedup S = T1 / TN,   efficiency E = T1 / (N * TN) = S / N
#           weak    when batch_size == N * baseline batch_size (same per-rank batch):
#               S = XN / X1 (scaled speed-up),  E = XN / (N * X1) = S / N
#               (= t1 / tN for the time t of one optimiser step, which
#               processes one per-rank batch on every rank)
#           other   otherwise, or without a baseline: speedup and efficiency empty.
# Strong-scaling speed-ups compare epoch times, so the runs must process the
# same number of samples per epoch (same data set, no differing max_steps).
#
# Exit status: 0 done; 1 a CSV is unreadable, lacks a needed column or holds a
# malformed value (the message names the file, line and column), or gnuplot
# is missing (the table is written first); 2 bad command line.
# Environment: GNUPLOT (default gnuplot) is the gnuplot command.
set -euo pipefail

prog=plot.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() {
    cat <<EOF
usage: results/plot.sh [-o OUTDIR] [--warmup K] [--no-plots] CSV...
Writes OUTDIR/metrics/speedup_table.csv and OUTDIR/plots/{speedup,efficiency,loss,accuracy}.png
from the per-epoch CSV files of hcnn runs (one file per run).
  -o, --out OUTDIR  output directory (default: $script_dir)
  --warmup K        leave the first K epochs of each run (if it has more) out of
                    time_per_epoch_s and images_per_s (default 0)
  --no-plots        write only the table (no gnuplot needed)
  -h, --help        this help
EOF
}

script_dir=$(cd "$(dirname "$0")" && pwd)
outdir=$script_dir
plots=1
warmup=0
files=()
while [ $# -gt 0 ]; do
    case "$1" in
    -o | --out)
        [ $# -ge 2 ] || { echo "$prog: error: $1 needs a directory" >&2; exit 2; }
        outdir=$2; shift 2 ;;
    --out=*) outdir=${1#--out=}; shift ;;
    --no-plots) plots=0; shift ;;
    --warmup)
        if [ $# -lt 2 ] || ! [[ "$2" =~ ^[0-9]+$ ]]; then
            echo "$prog: error: --warmup needs a number of epochs" >&2; exit 2
        fi
        warmup=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; files+=("$@"); break ;;
    -?*) echo "$prog: error: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
    esac
done
if [ ${#files[@]} -eq 0 ]; then
    echo "$prog: error: no CSV file given" >&2
    usage >&2
    exit 2
fi
for f in "${files[@]}"; do
    if [ ! -f "$f" ] || [ ! -r "$f" ]; then die "$f: no such readable file"; fi
    [ -s "$f" ] || die "$f: empty file (no header)"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hcnn-plot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ---- the table, and the data files of the plots ------------------------------
# $tmp/table.csv    the speed-up table
# $tmp/runs.tsv     per run (table order): data file, label, last epoch
# $tmp/groups.tsv   per speed-up line: data file, label  (data: ranks speedup efficiency)
awk -v tmp="$tmp" -v prog="$prog" -v warmup="$warmup" '
function trim(s) { gsub(/^[ \t"]+|[ \t"]+$/, "", s); return s }
function fail(msg) { printf "%s: error: %s\n", prog, msg > "/dev/stderr"; err = 1 }
function val(name) { return trim($(col[name])) }
function isint(s) { return s ~ /^[0-9]+$/ }
function isnum(s) { return s ~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/ }
function num_or_nan(s) { return isnum(s) ? s : "NaN" }
# position of a strategy / scaling mode in the table order
function sorder(s) { return s == "serial" ? 0 : s == "data" ? 1 : s == "pipeline" ? 2 : 3 }
function corder(s) { return s == "strong" ? 0 : s == "weak" ? 1 : 2 }
BEGIN {
    FS = ","
    nneed = split("run_id strategy ranks stages replicas threads batch_size epoch epoch_time_s images_per_s train_loss test_loss test_acc", need, " ")
    split("ranks stages replicas threads batch_size epoch", tmpa, " ")
    for (k in tmpa) intcol[tmpa[k]] = 1
    numcol["epoch_time_s"] = 1; numcol["images_per_s"] = 1
    nruns = 0; err = 0
}
FNR == 1 {
    sub(/^\357\273\277/, ""); sub(/\r$/, "")
    hdr = $0; hnf = NF; skip = 0
    split("", col)
    for (i = 1; i <= NF; i++) col[trim($i)] = i
    missing = ""
    for (k = 1; k <= nneed; k++)
        if (!(need[k] in col)) missing = missing (missing == "" ? "" : ", ") need[k]
    if (missing != "") {
        fail(sprintf("%s: missing column(s) %s (header: %s)", FILENAME, missing, hdr))
        skip = 1; next
    }
    r = ++nruns; file[r] = FILENAME; nep[r] = 0
    next
}
skip { next }
{
    sub(/\r$/, "")
    if ($0 == hdr || $0 ~ /^[ \t]*$/) next
    if (NF != hnf) { fail(sprintf("%s: line %d has %d fields, the header %d", FILENAME, FNR, NF, hnf)); skip = 1; next }
    for (c in intcol) if (!isint(val(c))) {
        fail(sprintf("%s: line %d: column %s is \"%s\", not a non-negative integer", FILENAME, FNR, c, val(c))); skip = 1; next
    }
    for (c in numcol) if (!isnum(val(c))) {
        fail(sprintf("%s: line %d: column %s is \"%s\", not a number", FILENAME, FNR, c, val(c))); skip = 1; next
    }
    id = val("run_id")
    if (rid[r] != "" && rid[r] != id)
        printf "%s: warning: %s holds several run_ids (%s, %s); treated as one run\n", prog, FILENAME, rid[r], id > "/dev/stderr"
    rid[r] = id; strat[r] = val("strategy"); ranks[r] = val("ranks") + 0
    stages[r] = val("stages") + 0; repl[r] = val("replicas") + 0
    thr[r] = val("threads") + 0; batch[r] = val("batch_size") + 0
    e = val("epoch") + 0
    if (!((r, e) in et)) ep[r, ++nep[r]] = e
    et[r, e] = val("epoch_time_s") + 0; ips[r, e] = val("images_per_s") + 0
    trl[r, e] = num_or_nan(val("train_loss")); tel[r, e] = num_or_nan(val("test_loss"))
    tea[r, e] = num_or_nan(val("test_acc"))
}
END {
    if (err) exit 1
    for (r = 1; r <= nruns; r++) if (nep[r] == 0) fail(sprintf("%s: no data rows", file[r]))
    if (err) exit 1
    for (r = 1; r <= nruns; r++) {
        n = nep[r]
        # epochs ascending (insertion sort)
        for (i = 2; i <= n; i++) {
            x = ep[r, i]
            for (j = i - 1; j >= 1 && ep[r, j] > x; j--) ep[r, j + 1] = ep[r, j]
            ep[r, j + 1] = x
        }
        # median epoch time, mean throughput, over the epochs after the
        # first `warmup` ones (all epochs when the run has no more)
        i0 = (n > warmup) ? warmup + 1 : 1
        m = 0
        for (i = i0; i <= n; i++) t[++m] = et[r, ep[r, i]]
        for (i = 2; i <= m; i++) {
            x = t[i]
            for (j = i - 1; j >= 1 && t[j] > x; j--) t[j + 1] = t[j]
            t[j + 1] = x
        }
        T[r] = (m % 2) ? t[(m + 1) / 2] : (t[m / 2] + t[m / 2 + 1]) / 2
        s = 0
        for (i = i0; i <= n; i++) s += ips[r, ep[r, i]]
        X[r] = s / m
        lastep[r] = ep[r, n]
        dat = tmp "/run" r ".dat"
        for (i = 1; i <= n; i++) {
            e = ep[r, i]
            print e, trl[r, e], tel[r, e], tea[r, e] > dat
        }
        close(dat)
    }
    # baseline, scaling mode, speed-up, efficiency
    for (r = 1; r <= nruns; r++) {
        N = ranks[r]; B = batch[r]; base[r] = 0; mode[r] = "other"
        for (g = 1; g <= 2 && !base[r]; g++) {
            want = (g == 1) ? strat[r] : "serial"
            if (g == 2 && want == strat[r]) break
            best = 0; bestscore = -1
            for (q = 1; q <= nruns; q++) {
                if (strat[q] != want || ranks[q] != 1) continue
                if (batch[q] == B) m = "strong"; else if (batch[q] * N == B) m = "weak"; else continue
                score = (thr[q] == thr[r]) ? 2 : 1
                if (m == "strong") score += 2
                if (score > bestscore) { best = q; bestscore = score; bm = m }
            }
            if (best) { base[r] = best; mode[r] = bm }
        }
        S[r] = ""; E[r] = ""
        if (base[r]) {
            q = base[r]
            if (mode[r] == "strong") sp = T[q] / T[r]; else sp = X[r] / X[q]
            S[r] = sprintf("%.4f", sp); E[r] = sprintf("%.4f", sp / N)
        }
    }
    # table order: strategy, scaling, stages, ranks, run_id
    for (r = 1; r <= nruns; r++) {
        key[r] = sprintf("%d|%d|%09d|%09d|%s", sorder(strat[r]), corder(mode[r]), stages[r], ranks[r], rid[r])
        ord[r] = r
    }
    for (i = 2; i <= nruns; i++) {
        x = ord[i]
        for (j = i - 1; j >= 1 && key[ord[j]] > key[x]; j--) ord[j + 1] = ord[j]
        ord[j + 1] = x
    }
    tab = tmp "/table.csv"
    print "run_id,strategy,ranks,stages,replicas,threads,batch_size,epochs,time_per_epoch_s,images_per_s,speedup,efficiency,scaling" > tab
    for (i = 1; i <= nruns; i++) {
        r = ord[i]
        printf "%s,%s,%d,%d,%d,%d,%d,%d,%.6g,%.2f,%s,%s,%s\n", rid[r], strat[r], ranks[r], stages[r], repl[r],
            thr[r], batch[r], nep[r], T[r], X[r], S[r], E[r], mode[r] > tab
    }
    close(tab)
    # labels of the runs; a duplicate label gets its run_id
    for (r = 1; r <= nruns; r++) {
        l = strat[r] ", N=" ranks[r]
        if (strat[r] == "pipeline") l = l " (" stages[r] " stages x " repl[r] ")"
        if (mode[r] == "weak") l = l ", weak B=" batch[r]
        else if (mode[r] == "other") l = l ", B=" batch[r]
        lab[r] = l; cnt[l]++
    }
    for (i = 1; i <= nruns; i++) {
        r = ord[i]
        l = lab[r]; if (cnt[l] > 1) l = l " [" rid[r] "]"
        printf "%s\t%s\t%d\n", tmp "/run" r ".dat", l, lastep[r] > (tmp "/runs.tsv")
    }
    close(tmp "/runs.tsv")
    # speed-up lines: every strategy but serial per scaling mode; pipeline: one
    # line of the pure pipelines (stages = N) and one per fixed stage count with
    # replicas > 1 (its pure-pipeline run included).  A line starts at its
    # baseline run (N = 1, S = E = 1), also when that is the serial run.
    ng = 0
    for (i = 1; i <= nruns; i++) {
        r = ord[i]
        if (S[r] == "" || strat[r] == "serial" || ranks[r] == 1 && base[r] == r) continue
        vs = (strat[base[r]] != strat[r]) ? " (vs " strat[base[r]] ")" : ""
        nk = 0
        if (strat[r] == "pipeline") {
            if (repl[r] == 1) gk[++nk] = "pipeline, stages = N, " mode[r] vs
            gk[++nk] = "pipeline, " stages[r] " stages x N/" stages[r] " replicas, " mode[r] vs
        } else gk[++nk] = strat[r] ", " mode[r] " scaling" vs
        for (k = 1; k <= nk; k++) {
            g = gk[k]
            if (!(g in gid)) {
                gid[g] = ++ng; glab[ng] = g; gn[ng] = 0; ghyb[ng] = 0
                gpt[ng, ++gn[ng]] = base[r]; ing[ng, base[r]] = 1
            }
            j = gid[g]
            if (!((j, r) in ing)) { gpt[j, ++gn[j]] = r; ing[j, r] = 1 }
            if (!((j, base[r]) in ing)) { gpt[j, ++gn[j]] = base[r]; ing[j, base[r]] = 1 }
            if (strat[r] == "pipeline" && repl[r] > 1) ghyb[j] = 1
        }
    }
    for (j = 1; j <= ng; j++) {
        # a fixed-stage pipeline line is drawn only when it has a hybrid run
        if (glab[j] ~ /replicas/ && !ghyb[j]) continue
        for (i = 2; i <= gn[j]; i++) {      # ranks ascending
            x = gpt[j, i]
            for (k = i - 1; k >= 1 && ranks[gpt[j, k]] > ranks[x]; k--) gpt[j, k + 1] = gpt[j, k]
            gpt[j, k + 1] = x
        }
        dat = tmp "/group" j ".dat"
        for (i = 1; i <= gn[j]; i++) { r = gpt[j, i]; print ranks[r], S[r], E[r] > dat }
        close(dat)
        printf "%s\t%s\n", dat, glab[j] > (tmp "/groups.tsv")
    }
    close(tmp "/groups.tsv")
    maxr = 1
    for (r = 1; r <= nruns; r++) if (ranks[r] > maxr) maxr = ranks[r]
    print maxr > (tmp "/maxranks")
}
' "${files[@]}" || exit 1

mkdir -p "$outdir/metrics" || die "cannot create $outdir/metrics"
table=$outdir/metrics/speedup_table.csv
{ cp "$tmp/table.csv" "$table.tmp" && mv "$table.tmp" "$table"; } || die "cannot write $table"
echo "$prog: wrote $table ($(($(wc -l <"$table") - 1)) runs)"
[ "$plots" -eq 1 ] || exit 0

# ---- plots ---------------------------------------------------------------------
gnuplot=${GNUPLOT:-gnuplot}
if ! command -v "$gnuplot" >/dev/null 2>&1; then
    die "gnuplot not found, so no plots were made (the table is written): install gnuplot-nox (apt-get install -y gnuplot-nox), or pass --no-plots"
fi
if ! "$gnuplot" -e 'set terminal pngcairo' >/dev/null 2>&1; then
    die "$gnuplot has no pngcairo terminal: install gnuplot-nox (apt-get install -y gnuplot-nox)"
fi
mkdir -p "$outdir/plots" || die "cannot create $outdir/plots"

# a gnuplot double-quoted string literal
gq() { local s=${1//\\/\\\\}; s=${s//\"/\\\"}; printf '"%s"' "$s"; }
# line styles: 10 distinguishable colours, then dash patterns
colors=('#1f77b4' '#d62728' '#2ca02c' '#ff7f0e' '#9467bd' '#8c564b' '#e377c2' '#17becf' '#7f7f7f' '#bcbd22')
group_plot() { # IDEAL COLUMN: a plot command, the ideal curve then one line per group
    local plot="plot $1" i=0 dat label
    if [ -s "$tmp/groups.tsv" ]; then
        while IFS=$'\t' read -r dat label; do
            plot+=", $(gq "$dat") using 1:$2 with linespoints title $(gq "$label") $(style $i)"
            i=$((i + 1))
        done <"$tmp/groups.tsv"
    fi
    echo "$plot"
}
style() { # INDEX (0-based) [DASHTYPE [POINTTYPE]] -> gnuplot line style options
    local i=$1 dt=${2:-1} pt=${3:-$(($1 % 13 + 1))}
    printf 'lw 2 lc rgb "%s" dt %d pt %d ps 1.3' "${colors[i % 10]}" "$dt" "$pt"
}

maxranks=$(cat "$tmp/maxranks")
maxepoch=$(awk -F'\t' 'BEGIN { m = 1 } $3 > m { m = $3 } END { print m }' "$tmp/runs.tsv")
term="set terminal pngcairo size 1200,700 noenhanced font \"sans,12\""

gp=$tmp/plots.gp
{
    echo "$term"
    echo 'set grid'
    echo 'set key outside right top Left reverse spacing 1.2'
    echo 'set datafile separator whitespace'
    # speed-up and efficiency vs ranks, log2 rank axis
    echo 'set logscale x 2'
    echo "set xrange [0.8:$maxranks * 1.25]"
    echo 'set xlabel "MPI ranks N"'
    echo "set output $(gq "$outdir/plots/speedup.png")"
    # (gnuplot turns the \n of a double-quoted string into a line break)
    # shellcheck disable=SC2028
    echo 'set title "Speed-up vs ranks\nstrong: S = T1/TN (median epoch time); weak: S = XN/X1 (images/s)"'
    echo 'set ylabel "speed-up S"'
    echo 'set logscale y 2'
    echo 'set yrange [*:*]'
    group_plot 'x title "ideal (S = N)" lw 2 dt 2 lc rgb "black"' 2
    echo 'unset logscale y'
    echo "set output $(gq "$outdir/plots/efficiency.png")"
    # shellcheck disable=SC2028
    echo 'set title "Parallel efficiency vs ranks\nE = S/N: strong T1/(N TN), weak XN/(N X1)"'
    echo 'set ylabel "efficiency E"'
    echo 'set yrange [0:*]'
    group_plot '1 title "ideal (E = 1)" lw 2 dt 2 lc rgb "black"' 3
    # loss and accuracy vs epoch
    echo 'unset logscale x'
    echo 'set offsets graph 0, graph 0, graph 0.05, 0'   # no points on the top frame
    echo "set xrange [0.5:$maxepoch + 0.5]"
    if [ "$maxepoch" -le 20 ]; then echo 'set xtics 1'; fi
    echo 'set xlabel "epoch"'
    echo "set output $(gq "$outdir/plots/loss.png")"
    echo 'set title "Loss vs epoch (solid: train loss, dashed: test loss)"'
    echo 'set ylabel "cross-entropy loss"'
    echo 'set yrange [0:*]'
    plot="plot"
    sep=" "
    i=0
    while IFS=$'\t' read -r dat label _; do
        plot+="$sep$(gq "$dat") using 1:2 with linespoints title $(gq "$label") $(style $i)"
        plot+=", $(gq "$dat") using 1:3 with linespoints notitle $(style $i 2 6)"
        sep=", "
        i=$((i + 1))
    done <"$tmp/runs.tsv"
    echo "$plot"
    echo "set output $(gq "$outdir/plots/accuracy.png")"
    echo 'set title "Test accuracy vs epoch"'
    echo 'set ylabel "test accuracy (%)"'
    echo 'set yrange [*:*]'
    echo 'set offsets graph 0, graph 0, graph 0.05, graph 0.05'
    plot="plot"
    sep=" "
    i=0
    while IFS=$'\t' read -r dat label _; do
        plot+="$sep$(gq "$dat") using 1:(\$4 * 100) with linespoints title $(gq "$label") $(style $i)"
        sep=", "
        i=$((i + 1))
    done <"$tmp/runs.tsv"
    echo "$plot"
    echo 'unset output'
} >"$gp"

if ! "$gnuplot" "$gp" >"$tmp/gnuplot.log" 2>&1; then
    sed 's/^/  /' "$tmp/gnuplot.log" >&2
    cp "$gp" "$outdir/plots/failed.gp" 2>/dev/null || true
    die "gnuplot failed (messages above; its script is $outdir/plots/failed.gp)"
fi
for p in speedup efficiency loss accuracy; do
    [ -s "$outdir/plots/$p.png" ] || die "gnuplot did not write $outdir/plots/$p.png"
done
echo "$prog: wrote $outdir/plots/speedup.png efficiency.png loss.png accuracy.png"
