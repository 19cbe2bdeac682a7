#!/usr/bin/env bash
# Speed-up table and plots of a scaling sweep, from the per-epoch CSV files
# that `hcnn train --set csv=PATH` writes (one file per run, one row per epoch).
#
#   scripts/plot.sh [-o OUTDIR] [--table FILE] [--warmup K] [--provenance FILE]
#                   [--points FILE] [--machine TEXT] [--bench LOG]... [--bench-machine TEXT]
#                   [--plan CSV]... [--plan-scaling strong|weak|both] [--no-plots] CSV...
#
# Writes (OUTDIR defaults to results/ of the source tree this script is in):
#   OUTDIR/metrics/speedup_table.csv (or --table FILE)  one row per point:
#       run_id,strategy,ranks,stages,replicas,threads,batch_size,epochs,
#       time_per_epoch_s,images_per_s,speedup,efficiency,scaling,
#       repeats,images_per_s_min,images_per_s_max,time_per_epoch_s_min,
#       time_per_epoch_s_max,spread,noisy,microbatches,batch_note,
#       git_commit,cpu_model,blas,mpi_library,run_ids
#   OUTDIR/plots/speedup.png     speed-up vs ranks, a line per strategy and scaling
#                                mode: the median, min-max error bars, ideal S = N
#   OUTDIR/plots/efficiency.png  efficiency vs ranks, the same, ideal E = 1
#   OUTDIR/plots/loss.png        train loss (solid) and test loss (dashed) vs epoch,
#                                a curve per point (its first repeat)
#   OUTDIR/plots/accuracy.png    test accuracy vs epoch, a curve per point; NOT
#                                drawn (and an older one removed) when test_acc
#                                has the same value in every row of every CSV,
#                                as on synthetic data: one line says so
# Every plot's title names the machine the CSVs were measured on and the
# threads per rank; a line at its foot names the git commit, CPU model, BLAS
# library and kernels, and MPI library.
#
# The machine (--machine TEXT): else "CPU model, N CPUs" from the provenance's
# cpu_model and cpus (one model string can be a 2-core VM or a 16-core host).
# Beside the sweep, speedup.png and efficiency.png can carry (each line of the
# key saying what it is and where it comes from; not in the table):
#   --bench LOG     measured: an `hcnn bench` log (repeatable), one point of
#                   N = ranks x threads; the logs of one model, strategy and
#                   global batch make a line, from its N = 1 point (its
#                   images/s: the log's last images_per_s= line, the median).
#                   Their machine: --bench-machine TEXT, else "Model name, N
#                   CPUs" of the lscpu lines in a session.log (bench/gpu_check.sh's)
#                   beside the first log or one directory up.
#   --plan CSV      projected: the plan.csv of `hcnn plan` (repeatable), per
#                   scaling mode (--plan-scaling, default both) the recommended
#                   layout's (best = 1) images/s at N nodes over that at 1 node,
#                   dashed, labelled "projected (hcnn plan)" with the model, the
#                   node and the network (from the plan's printed header in
#                   CSV's directory name + .txt, where there is one).
#   With either, the sweep's lines are labelled "measured, MACHINE: ...".
#
# Columns are found by name in each file's header; unknown columns are
# ignored.  Needed: run_id strategy ranks stages replicas threads batch_size
# epoch epoch_time_s images_per_s train_loss test_loss test_acc; used when
# present: microbatches, git_commit.
# A repeated header line is skipped; when an epoch appears twice in a file (a
# resumed run) its last row counts.
#
# Points and repeats: the CSVs whose run_id, or else whose file name (without
# .csv), ends in _r<K> are the repeats of one point, named without that suffix
# (scripts/sweep.sh names its runs data_n4_strong_r1, data_n4_strong_r2, ...:
# point data_n4_strong); the repeats of a point must agree on strategy, ranks,
# stages, replicas, threads and batch_size.  Any other CSV is a point of its
# own with one sample, named by its run_id.  The table's run_id is the point's
# name, run_ids lists the hcnn run_ids of its samples (separated by ';').
#
# Per sample (CSV): T = median of epoch_time_s over its epochs (robust to one
#           slow epoch), X = mean of images_per_s; with --warmup K both leave
#           out the first K epochs of a run that has more than K
#           (scripts/sweep.sh passes --warmup 1 when its runs have 2+ epochs).
# Per point: images_per_s = median of X over its samples, with _min and _max;
#           time_per_epoch_s likewise from T; spread = (max - min) / median of
#           images_per_s, noisy = 1 when spread > 0.20 (else 0; a point with
#           one sample has spread 0).  The table's "epochs" counts all epochs.
# Baseline of a point (its X1 = median images_per_s), N = ranks:
#   points of a sweep (listed in --points, see below) declare their scaling:
#     strong: a 1-rank point, not declared weak, of the same strategy whose
#             nominal batch (the sweep's B, before any growth) is the same;
#             else such a point of strategy serial;
#     weak:   a 1-rank point of the same strategy whose batch_size is the
#             point's divided by N; else such a serial point; else data;
#   any other point: a 1-rank point of the same strategy whose batch_size
#     equals the point's (scaling strong) or the point's divided by N (weak);
#     else such a serial point; else scaling "other".
#   Among several, the one with the same threads wins, then the first given.
# Speed-up S = XN / X1 (images/s, medians) and efficiency E = S / N, for strong
#   and weak scaling alike (a strong point whose batch was grown processes the
#   same samples per epoch in fewer, larger steps, so epoch times compare as
#   throughput does); the error bars of the plots are XN_min / X1 and
#   XN_max / X1.  No baseline: speedup and efficiency empty.
#
# Provenance (--provenance FILE, default provenance.txt beside the first CSV
# or in its parent directory, as scripts/sweep.sh writes it): key=value lines,
# '#' comments.  Read: git_commit, cpu_model, blas, mpi_library and
# run.<CSV name without .csv>.blas (the kernels of that run, from its log).
# The table's git_commit is the CSVs' git_commit column (else the file's);
# blas is the run's own, else the file's blas; anything missing is "unknown".
# Commas in these values become ';' (the table stays splittable at commas).
# Points (--points FILE, default points.tsv found like provenance.txt): lines
# "point<TAB>scaling<TAB>nominal batch<TAB>global batch<TAB>batch_note", '#'
# comments; batch_note goes to the table (empty for points not listed).
#
# Exit status: 0 done; 1 a CSV is unreadable, lacks a needed column or holds a
# malformed value (the message names the file, line and column), the repeats
# of a point disagree, or gnuplot is missing (the table is written first);
# 2 bad command line.
# Environment: GNUPLOT (default gnuplot) is the gnuplot command.
set -euo pipefail

prog=plot.sh
die() { echo "$prog: error: $*" >&2; exit 1; }
usage() {
    cat <<EOF
usage: scripts/plot.sh [-o OUTDIR] [--table FILE] [--warmup K] [--provenance FILE]
                       [--points FILE] [--machine TEXT] [--bench LOG]... [--bench-machine TEXT]
                       [--plan CSV]... [--plan-scaling strong|weak|both] [--no-plots] CSV...
Writes OUTDIR/metrics/speedup_table.csv and OUTDIR/plots/{speedup,efficiency,loss,accuracy}.png
from the per-epoch CSV files of hcnn runs (one file per run; files named or
with run_id ending in _r1, _r2, ... are repeats of one point).
  -o, --out OUTDIR  output directory (default: $default_out)
  --table FILE      the speed-up table's path (default OUTDIR/metrics/speedup_table.csv)
  --warmup K        leave the first K epochs of each run (if it has more) out of
                    time_per_epoch_s and images_per_s (default 0)
  --provenance FILE key=value file with git_commit, cpu_model, blas, mpi_library
                    (default: provenance.txt beside the first CSV or one directory up)
  --points FILE     the sweep's points.tsv: declared scaling and batch_note
                    (default: points.tsv, found like provenance.txt)
  --machine TEXT    the machine the CSVs were measured on, for the plots
                    (default: cpu_model and cpus of the provenance)
  --bench LOG       add an hcnn bench log's point to the speed-up plots,
                    measured (repeatable; a line per model, strategy and batch)
  --bench-machine TEXT  the machine of the bench logs (default: from a
                    session.log beside them or one directory up)
  --plan CSV        add hcnn plan's projection (its plan.csv) to the speed-up
                    plots, dashed, marked "projected (hcnn plan)" (repeatable)
  --plan-scaling strong|weak|both  the plan's scaling modes drawn (default both)
  --no-plots        write only the table (no gnuplot needed)
  -h, --help        this help
(the header of $0 explains every column and formula)
EOF
}

script_dir=$(cd "$(dirname "$0")" && pwd)
# the tool lives in scripts/, its data in results/ beside it
default_out=$(dirname "$script_dir")/results
outdir=$default_out
table=""
plots=1
warmup=0
prov=""
prov_given=0
points=""
points_given=0
machine=""
bench_logs=()
bench_machine=""
plan_csvs=()
plan_scaling=both
files=()
needarg() { [ $# -ge 2 ] || { echo "$prog: error: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case "$1" in
    -o | --out) needarg "$@"; outdir=$2; shift 2 ;;
    --out=*) outdir=${1#--out=}; shift ;;
    --table) needarg "$@"; table=$2; shift 2 ;;
    --provenance) needarg "$@"; prov=$2; prov_given=1; shift 2 ;;
    --points) needarg "$@"; points=$2; points_given=1; shift 2 ;;
    --no-plots) plots=0; shift ;;
    --machine) needarg "$@"; machine=$2; shift 2 ;;
    --bench) needarg "$@"; bench_logs+=("$2"); shift 2 ;;
    --bench-machine) needarg "$@"; bench_machine=$2; shift 2 ;;
    --plan) needarg "$@"; plan_csvs+=("$2"); shift 2 ;;
    --plan-scaling)
        needarg "$@"
        case "$2" in strong | weak | both) plan_scaling=$2 ;;
        *) echo "$prog: error: --plan-scaling is strong, weak or both, not '$2'" >&2; exit 2 ;;
        esac
        shift 2 ;;
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
for f in ${bench_logs[@]+"${bench_logs[@]}"} ${plan_csvs[@]+"${plan_csvs[@]}"}; do
    [ -r "$f" ] || die "$f: no such readable file (--bench or --plan)"
done
[ -n "$table" ] || table=$outdir/metrics/speedup_table.csv
# provenance.txt and points.tsv: given, or beside the first CSV, or one directory up
find_beside() { # NAME -> path or nothing
    local d
    d=$(dirname "${files[0]}")
    if [ -f "$d/$1" ]; then echo "$d/$1"
    elif [ -f "$(dirname "$d")/$1" ]; then echo "$(dirname "$d")/$1"; fi
}
if [ "$prov_given" -eq 1 ]; then
    [ -r "$prov" ] || die "--provenance $prov: no such readable file"
else prov=$(find_beside provenance.txt); fi
if [ "$points_given" -eq 1 ]; then
    [ -r "$points" ] || die "--points $points: no such readable file"
else points=$(find_beside points.tsv); fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hcnn-plot.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# ---- the table, and the data files of the plots ------------------------------
# $tmp/table.csv    the speed-up table
# $tmp/runs.tsv     per point (table order): data file of its first sample, label, last epoch
# $tmp/groups.tsv   per speed-up line: data file, label
#                   (data: ranks S S_min S_max E E_min E_max noisy)
# $tmp/acc_const    the value of test_acc when it is the same in every row (else absent)
# $tmp/threads      "T thread(s) per rank" or "threads per rank: T1, T2"
# $tmp/footer       the provenance line of the plots
awk -v tmp="$tmp" -v prog="$prog" -v warmup="$warmup" -v prov="$prov" -v points="$points" '
function trim(s) { gsub(/^[ \t"]+|[ \t"]+$/, "", s); return s }
function fail(msg) { printf "%s: error: %s\n", prog, msg > "/dev/stderr"; err = 1 }
function val(name) { return trim($(col[name])) }
function opt(name) { return (name in col) ? val(name) : "" }
function isint(s) { return s ~ /^[0-9]+$/ }
function isnum(s) { return s ~ /^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/ }
function num_or_nan(s) { return isnum(s) ? s : "NaN" }
# a provenance value for the table: no commas, tabs, quotes or line breaks
function clean(s) { gsub(/[\t\r\n"]/, " ", s); gsub(/,/, ";", s); s = trim(s); return s == "" ? "unknown" : s }
# list with v added unless it is there ("a | b")
function addu(list, v) { return list == "" ? v : index(" | " list " | ", " | " v " | ") ? list : list " | " v }
# sorts a[1..n] ascending, returns the median
function median(a, n,   i, j, x) {
    for (i = 2; i <= n; i++) {
        x = a[i]
        for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]
        a[j + 1] = x
    }
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
# position of a strategy / scaling mode in the table order
function sorder(s) { return s == "serial" ? 0 : s == "data" ? 1 : s == "pipeline" ? 2 : 3 }
function corder(s) { return s == "strong" ? 0 : s == "weak" ? 1 : 2 }
BEGIN {
    FS = ","
    nneed = split("run_id strategy ranks stages replicas threads batch_size epoch epoch_time_s images_per_s train_loss test_loss test_acc", need, " ")
    split("ranks stages replicas threads batch_size epoch", tmpa, " ")
    for (k in tmpa) intcol[tmpa[k]] = 1
    numcol["epoch_time_s"] = 1; numcol["images_per_s"] = 1
    nruns = 0; err = 0; nacc = 0; accvar = 0
    if (prov != "") {
        while ((getline line < prov) > 0) {
            sub(/\r$/, "", line)
            if (line ~ /^[ \t]*(#|$)/ || index(line, "=") == 0) continue
            k = trim(substr(line, 1, index(line, "=") - 1))
            pv[k] = trim(substr(line, index(line, "=") + 1))
        }
        close(prov)
    }
    if (points != "") {
        while ((getline line < points) > 0) {
            sub(/\r$/, "", line)
            if (line ~ /^[ \t]*(#|$)/) continue
            n = split(line, f, "\t")
            if (n < 3 || (f[2] != "strong" && f[2] != "weak") || !isint(f[3])) {
                printf "%s: warning: %s: line \"%s\" is not point<TAB>strong|weak<TAB>batch<TAB>...; ignored\n", prog, points, line > "/dev/stderr"
                continue
            }
            pscal[f[1]] = f[2]; pnom[f[1]] = f[3] + 0; pnote[f[1]] = (n >= 5) ? f[5] : ""
        }
        close(points)
    }
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
    b = FILENAME; sub(/.*\//, "", b); sub(/\.csv$/, "", b); fbase[r] = b
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
    mb[r] = opt("microbatches"); g = opt("git_commit"); if (g != "") gitc[r] = addu(gitc[r], g)
    e = val("epoch") + 0
    if (!((r, e) in et)) ep[r, ++nep[r]] = e
    et[r, e] = val("epoch_time_s") + 0; ips[r, e] = val("images_per_s") + 0
    trl[r, e] = num_or_nan(val("train_loss")); tel[r, e] = num_or_nan(val("test_loss"))
    a = val("test_acc"); tea[r, e] = num_or_nan(a)
    # does test_acc carry information (differ between any two rows)?
    a = isnum(a) ? sprintf("%.9g", a + 0) : a
    if (nacc++ == 0) acc0 = a; else if (a != acc0) accvar = 1
}
END {
    if (err) exit 1
    for (r = 1; r <= nruns; r++) if (nep[r] == 0) fail(sprintf("%s: no data rows", file[r]))
    if (err) exit 1
    # ---- per sample (CSV file): T, X, the data file of the loss and accuracy plots
    for (r = 1; r <= nruns; r++) {
        n = nep[r]
        for (i = 2; i <= n; i++) {          # epochs ascending
            x = ep[r, i]
            for (j = i - 1; j >= 1 && ep[r, j] > x; j--) ep[r, j + 1] = ep[r, j]
            ep[r, j + 1] = x
        }
        # median epoch time, mean throughput, over the epochs after the
        # first `warmup` ones (all epochs when the run has no more)
        i0 = (n > warmup) ? warmup + 1 : 1
        m = 0; s = 0
        split("", t)
        for (i = i0; i <= n; i++) { t[++m] = et[r, ep[r, i]]; s += ips[r, ep[r, i]] }
        T[r] = median(t, m); X[r] = s / m
        lastep[r] = ep[r, n]
        dat = tmp "/run" r ".dat"
        for (i = 1; i <= n; i++) {
            e = ep[r, i]
            print e, trl[r, e], tel[r, e], tea[r, e] > dat
        }
        close(dat)
    }
    # ---- points: the repeats of one point grouped
    np = 0
    split("strategy ranks stages replicas threads batch_size", attr, " ")
    for (r = 1; r <= nruns; r++) {
        pn = ""
        if (rid[r] ~ /_r[0-9]+$/) { pn = rid[r]; sub(/_r[0-9]+$/, "", pn) }
        else if (fbase[r] ~ /_r[0-9]+$/) { pn = fbase[r]; sub(/_r[0-9]+$/, "", pn) }
        k = (pn != "") ? "n:" pn : "f:" r
        if (!(k in pidx)) {
            p = pidx[k] = ++np; ns[p] = 0
            pname[p] = (pn != "") ? pn : rid[r]; named[p] = (pn != "")
            pstrat[p] = strat[r]; pranks[p] = ranks[r]; pstages[p] = stages[r]; prepl[p] = repl[r]
            pthr[p] = thr[r]; pbatch[p] = batch[r]; pmb[p] = mb[r]; pep[p] = 0
        } else {
            p = pidx[k]; q = smp[p, 1]
            for (a = 1; a <= 6; a++) {
                c = attr[a]
                v1 = (c == "strategy") ? strat[r] : (c == "ranks") ? ranks[r] : (c == "stages") ? stages[r] : (c == "replicas") ? repl[r] : (c == "threads") ? thr[r] : batch[r]
                v0 = (c == "strategy") ? strat[q] : (c == "ranks") ? ranks[q] : (c == "stages") ? stages[q] : (c == "replicas") ? repl[q] : (c == "threads") ? thr[q] : batch[q]
                if (v1 != v0) {
                    fail(sprintf("%s: run %s is a repeat of point %s (as %s) but its %s is %s, not %s", file[r], rid[r], pname[p], file[q], c, v1, v0))
                    break
                }
            }
        }
        smp[p, ++ns[p]] = r
        if (nep[r] > pep[p]) pep[p] = nep[r]
    }
    if (err) exit 1
    for (p = 1; p <= np; p++) {
        n = ns[p]
        split("", xs); split("", ts)
        for (k = 1; k <= n; k++) { xs[k] = X[smp[p, k]]; ts[k] = T[smp[p, k]] }
        Xm[p] = median(xs, n); Xlo[p] = xs[1]; Xhi[p] = xs[n]
        Tm[p] = median(ts, n); Tlo[p] = ts[1]; Thi[p] = ts[n]
        spread[p] = (Xm[p] > 0) ? (Xhi[p] - Xlo[p]) / Xm[p] : 0
        noisy[p] = (spread[p] > 0.20) ? 1 : 0
        ids = ""; gits = ""; blas = ""
        for (k = 1; k <= n; k++) {
            r = smp[p, k]
            ids = ids (k > 1 ? ";" : "") rid[r]
            if (r in gitc) { m = split(gitc[r], gl, / \| /); for (i = 1; i <= m; i++) gits = addu(gits, gl[i]) }
            b = "run." fbase[r] ".blas"
            b = (b in pv) ? pv[b] : ("blas" in pv) ? pv["blas"] : "unknown"
            blas = addu(blas, b)
        }
        pids[p] = ids
        if (gits == "") gits = ("git_commit" in pv) ? pv["git_commit"] : "unknown"
        pgit[p] = clean(gits); pblas[p] = clean(blas)
        # declared by the sweep (points.tsv), else inferred from the batch sizes
        dmode[p] = ""; nom[p] = pbatch[p]; note[p] = ""
        if (named[p] && (pname[p] in pscal)) {
            dmode[p] = pscal[pname[p]]; nom[p] = pnom[pname[p]]; note[p] = pnote[pname[p]]
            gsub(/[,\t"]/, ";", note[p])
        }
        allgit = addu(allgit, pgit[p]); allblas = addu(allblas, pblas[p])
        thrl = addu(thrl, pthr[p])
    }
    cpu = clean(("cpu_model" in pv) ? pv["cpu_model"] : "unknown")
    mpi = clean(("mpi_library" in pv) ? pv["mpi_library"] : "unknown")
    # ---- baseline, scaling mode, speed-up, efficiency
    for (p = 1; p <= np; p++) {
        N = pranks[p]; B = pbatch[p]; base[p] = 0; mode[p] = (dmode[p] != "") ? dmode[p] : "other"
        nw = 0
        if (dmode[p] == "weak") {
            want[++nw] = pstrat[p]
            if (pstrat[p] != "serial") want[++nw] = "serial"
            if (pstrat[p] != "serial" && pstrat[p] != "data") want[++nw] = "data"
        } else {
            want[++nw] = pstrat[p]
            if (pstrat[p] != "serial") want[++nw] = "serial"
        }
        for (g = 1; g <= nw && !base[p]; g++) {
            best = 0; bestscore = -1
            for (q = 1; q <= np; q++) {
                if (pstrat[q] != want[g] || pranks[q] != 1) continue
                if (dmode[p] == "strong") {
                    if (dmode[q] == "weak" || nom[q] != nom[p]) continue
                    m = "strong"
                } else if (dmode[p] == "weak") {
                    if (pbatch[q] * N != B) continue
                    m = "weak"
                } else if (pbatch[q] == B) m = "strong"
                else if (pbatch[q] * N == B) m = "weak"
                else continue
                score = (pthr[q] == pthr[p]) ? 2 : 1
                if (dmode[p] == "" && m == "strong") score += 2
                if (score > bestscore) { best = q; bestscore = score; bm = m }
            }
            if (best) { base[p] = best; mode[p] = bm }
        }
        S[p] = ""; E[p] = ""
        if (base[p] && Xm[base[p]] > 0) {
            x1 = Xm[base[p]]
            S[p] = sprintf("%.4f", Xm[p] / x1); E[p] = sprintf("%.4f", Xm[p] / x1 / N)
            Slo[p] = Xlo[p] / x1; Shi[p] = Xhi[p] / x1
        }
    }
    # ---- the table; order: strategy, scaling, stages, ranks, name
    for (p = 1; p <= np; p++) {
        key[p] = sprintf("%d|%d|%09d|%09d|%s", sorder(pstrat[p]), corder(mode[p]), pstages[p], pranks[p], pname[p])
        ord[p] = p
    }
    for (i = 2; i <= np; i++) {
        x = ord[i]
        for (j = i - 1; j >= 1 && key[ord[j]] > key[x]; j--) ord[j + 1] = ord[j]
        ord[j + 1] = x
    }
    tab = tmp "/table.csv"
    print "run_id,strategy,ranks,stages,replicas,threads,batch_size,epochs,time_per_epoch_s,images_per_s,speedup,efficiency,scaling," \
        "repeats,images_per_s_min,images_per_s_max,time_per_epoch_s_min,time_per_epoch_s_max,spread,noisy,microbatches,batch_note," \
        "git_commit,cpu_model,blas,mpi_library,run_ids" > tab
    for (i = 1; i <= np; i++) {
        p = ord[i]
        printf "%s,%s,%d,%d,%d,%d,%d,%d,%.6g,%.2f,%s,%s,%s,", pname[p], pstrat[p], pranks[p], pstages[p], prepl[p],
            pthr[p], pbatch[p], pep[p], Tm[p], Xm[p], S[p], E[p], mode[p] > tab
        printf "%d,%.2f,%.2f,%.6g,%.6g,%.4f,%d,%s,%s,", ns[p], Xlo[p], Xhi[p], Tlo[p], Thi[p], spread[p], noisy[p],
            pmb[p], note[p] > tab
        printf "%s,%s,%s,%s,%s\n", pgit[p], cpu, pblas[p], mpi, pids[p] > tab
    }
    close(tab)
    # ---- labels of the points; a duplicate label gets the point name
    for (p = 1; p <= np; p++) {
        l = pstrat[p] ", N=" pranks[p]
        if (pstrat[p] == "pipeline") l = l " (" pstages[p] " stages x " prepl[p] ")"
        if (mode[p] == "weak") l = l ", weak B=" pbatch[p]
        else if (mode[p] == "other" || note[p] ~ /^grown/) l = l ", B=" pbatch[p]
        lab[p] = l; cnt[l]++
    }
    multi = 0
    for (i = 1; i <= np; i++) {
        p = ord[i]
        l = lab[p]; if (cnt[l] > 1) l = l " [" pname[p] "]"
        if (ns[p] > 1) multi = 1
        r = smp[p, 1]
        printf "%s\t%s\t%d\n", tmp "/run" r ".dat", l, lastep[r] > (tmp "/runs.tsv")
    }
    close(tmp "/runs.tsv")
    if (multi) print "" > (tmp "/multi")
    # ---- speed-up lines: every strategy but serial per scaling mode; pipeline:
    # one line of the pure pipelines (stages = N) and one per fixed stage count
    # with replicas > 1 (its pure-pipeline point included).  A line starts at
    # its baseline point (N = 1, S = E = 1), also when that is the serial run.
    ng = 0
    for (i = 1; i <= np; i++) {
        p = ord[i]
        if (S[p] == "" || pstrat[p] == "serial" || pranks[p] == 1 && base[p] == p) continue
        q = base[p]
        vs = (pstrat[q] != pstrat[p]) ? " (vs " pstrat[q] ")" : ""
        nk = 0
        if (pstrat[p] == "pipeline") {
            if (prepl[p] == 1) gk[++nk] = "pipeline, stages = N, " mode[p] vs
            gk[++nk] = "pipeline, " pstages[p] " stages x N/" pstages[p] " replicas, " mode[p] vs
        } else gk[++nk] = pstrat[p] ", " mode[p] " scaling" vs
        for (k = 1; k <= nk; k++) {
            g = gk[k]
            if (!(g in gid)) {
                gid[g] = ++ng; glab[ng] = g; gn[ng] = 0; ghyb[ng] = 0
                gpt[ng, ++gn[ng]] = q; ing[ng, q] = 1
            }
            j = gid[g]
            if (!((j, p) in ing)) { gpt[j, ++gn[j]] = p; ing[j, p] = 1 }
            if (!((j, q) in ing)) { gpt[j, ++gn[j]] = q; ing[j, q] = 1 }
            if (pstrat[p] == "pipeline" && prepl[p] > 1) ghyb[j] = 1
        }
    }
    for (j = 1; j <= ng; j++) {
        # a fixed-stage pipeline line is drawn only when it has a hybrid point
        if (glab[j] ~ /replicas/ && !ghyb[j]) continue
        for (i = 2; i <= gn[j]; i++) {      # ranks ascending
            x = gpt[j, i]
            for (k = i - 1; k >= 1 && pranks[gpt[j, k]] > pranks[x]; k--) gpt[j, k + 1] = gpt[j, k]
            gpt[j, k + 1] = x
        }
        dat = tmp "/group" j ".dat"
        for (i = 1; i <= gn[j]; i++) {
            p = gpt[j, i]; N = pranks[p]
            # the speed-up of a baseline that is not its own (the serial run
            # at the start of a pipeline line) is against itself: 1
            if (S[p] == "" || p == gpt[j, 1] && base[p] != p) { s = 1; lo = Xlo[p] / Xm[p]; hi = Xhi[p] / Xm[p] }
            else { s = S[p]; lo = Slo[p]; hi = Shi[p] }
            printf "%d %.6g %.6g %.6g %.6g %.6g %.6g %d\n", N, s, lo, hi, s / N, lo / N, hi / N, noisy[p] > dat
        }
        close(dat)
        printf "%s\t%s\n", dat, glab[j] > (tmp "/groups.tsv")
    }
    close(tmp "/groups.tsv")
    maxr = 1
    for (p = 1; p <= np; p++) if (pranks[p] > maxr) maxr = pranks[p]
    print maxr > (tmp "/maxranks")
    if (!accvar) print acc0 > (tmp "/acc_const")
    m = split(thrl, tl, / \| /)
    if (m == 1) print tl[1] " thread" (tl[1] == 1 ? "" : "s") " per rank" > (tmp "/threads")
    else { s = tl[1]; for (i = 2; i <= m; i++) s = s ", " tl[i]; print "threads per rank: " s > (tmp "/threads") }
    # the provenance line: the MPI library up to its first ";" (its version)
    m1 = mpi; sub(/;.*/, "", m1)
    printf "commit %s   CPU: %s   BLAS: %s   MPI: %s\n", allgit, cpu, allblas, m1 > (tmp "/footer")
    # the machine of the runs, for the titles: the CPU model and how many
    ncpu = ("cpus" in pv) ? clean(pv["cpus"]) : "unknown"
    print cpu (ncpu ~ /^[0-9]+$/ ? ", " ncpu " CPUs" : "") > (tmp "/machine")
    # the config of the sweep (its model), for its lines beside other lines
    cf = ("config" in pv) ? pv["config"] : ""; sub(/.*\//, "", cf)
    print cf > (tmp "/config")
}
' "${files[@]}" || exit 1

mkdir -p "$(dirname "$table")" || die "cannot create $(dirname "$table")"
{ cp "$tmp/table.csv" "$table.tmp" && mv "$table.tmp" "$table"; } || die "cannot write $table"
echo "$prog: wrote $table ($(($(wc -l <"$table") - 1)) points from ${#files[@]} CSV file(s))"
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
group_plot() { # IDEAL COLUMN: a plot command: the ideal curve, one line per
    # group (the median, error bars from min to max, each group's points a
    # little to the side so that the bars do not hide each other), then circles
    # on the points with spread > 0.20
    # (a line of --bench or --plan: its points, no bars; projected: dashed)
    local plot="plot $1" i=0 dat label kind c=$2 ng x noisy="" ntitle='title "spread > 20% (max - min over median)"'
    [ -s "$tmp/groups.tsv" ] || { echo "$plot"; return; }
    ng=$(wc -l <"$tmp/groups.tsv")
    while IFS=$'\t' read -r dat label kind; do
        x="(\$1 * 2 ** (0.03 * ($i - ($ng - 1) / 2.0)))"
        case "$kind" in
        projected) plot+=", $(gq "$dat") using 1:$c with linespoints title $(gq "$label") $(style $i 2 7)"; i=$((i + 1)); continue ;;
        measured) plot+=", $(gq "$dat") using 1:$c with linespoints title $(gq "$label") $(style $i)"; i=$((i + 1)); continue ;;
        esac
        plot+=", $(gq "$dat") using $x:$c:$((c + 1)):$((c + 2)) with yerrorlines title $(gq "$label") $(style $i)"
        if awk '$8 == 1 { f = 1 } END { exit !f }' "$dat"; then
            noisy+=", $(gq "$dat") using $x:(\$8 > 0 ? \$$c : NaN) with points pt 6 ps 3.5 lw 2 lc rgb \"black\" $ntitle"
            ntitle=notitle
        fi
        i=$((i + 1))
    done <"$tmp/groups.tsv"
    echo "$plot$noisy"
}
style() { # INDEX (0-based) [DASHTYPE [POINTTYPE]] -> gnuplot line style options
    local i=$1 dt=${2:-1} pt=${3:-$(($1 % 13 + 1))}
    printf 'lw 2 lc rgb "%s" dt %d pt %d ps 1.3' "${colors[i % 10]}" "$dt" "$pt"
}

[ -n "$machine" ] || machine=$(cat "$tmp/machine")
[ "$machine" != unknown ] || machine="an unknown machine"

# ---- measured points of hcnn bench logs, projected ones of hcnn plan ------------
# Each a data file of the speed-up lines' format (N S S_lo S_hi E E_lo E_hi
# noisy) with its label and kind in $tmp/extra.tsv.
: >"$tmp/extra.tsv"
if [ ${#bench_logs[@]} -gt 0 ]; then
    if [ -z "$bench_machine" ]; then
        # bench/gpu_check.sh's session.log: lscpu's Model name and CPU(s) lines
        d=$(dirname "${bench_logs[0]}")
        for sl in "$d/session.log" "$(dirname "$d")/session.log"; do
            if [ -f "$sl" ]; then
                bench_machine=$(awk -F: '/^Model name:/ && m == "" { m = $2; gsub(/^[ \t]+|[ \t]+$/, "", m) }
                    /^CPU\(s\):/ && c == "" { c = $2; gsub(/[ \t]/, "", c) }
                    END { if (m != "") print m (c != "" ? ", " c " CPUs" : "") }' "$sl")
                break
            fi
        done
    fi
    awk -v tmp="$tmp" -v prog="$prog" -v mach="${bench_machine:-an unknown machine}" '
    # "hcnn bench: model M, strategy S on R rank(s) x T threads, global batch B, ..."
    /^hcnn bench: model / {
        h = $0; sub(/^hcnn bench: model /, "", h)
        model[FILENAME] = h; sub(/,.*/, "", model[FILENAME])
        x = h; sub(/.*strategy /, "", x); strat[FILENAME] = x; sub(/ .*/, "", strat[FILENAME])
        x = h; sub(/.* on /, "", x); ranks[FILENAME] = x + 0
        x = h; sub(/.* rank[s]? x /, "", x); thr[FILENAME] = x + 0
        x = h; sub(/.*global batch /, "", x); batch[FILENAME] = x + 0
    }
    /^images_per_s=[0-9.]+/ { x = $0; sub(/^images_per_s=/, "", x); ips[FILENAME] = x + 0 }
    FNR == 1 { files[++nf] = FILENAME }
    END {
        for (fi = 1; fi <= nf; fi++) {
            f = files[fi]
            if (!(f in model) || !(f in ips) || ranks[f] < 1 || thr[f] < 1) {
                printf "%s: warning: %s: no hcnn bench header or images_per_s= line; left out\n", prog, f > "/dev/stderr"; continue
            }
            k = model[f] " | " strat[f] " | " batch[f]
            if (!(k in gi)) { gi[k] = ++ng; gk[ng] = k; gm[ng] = model[f]; gs[ng] = strat[f]; gb[ng] = batch[f]; np[ng] = 0; r1[ng] = 1 }
            g = gi[k]; N = ranks[f] * thr[f]
            pn[g, ++np[g]] = N; px[g, np[g]] = ips[f]
            if (ranks[f] != 1) r1[g] = 0
            if (N == 1) base[g] = ips[f]
        }
        for (g = 1; g <= ng; g++) {
            if (!(g in base) || base[g] <= 0) {
                printf "%s: warning: --bench: no 1-thread point of %s batch %d: its line left out\n", prog, gm[g], gb[g] > "/dev/stderr"; continue
            }
            for (i = 2; i <= np[g]; i++) {       # N ascending
                n = pn[g, i]; x = px[g, i]
                for (j = i - 1; j >= 1 && pn[g, j] > n; j--) { pn[g, j + 1] = pn[g, j]; px[g, j + 1] = px[g, j] }
                pn[g, j + 1] = n; px[g, j + 1] = x
            }
            dat = tmp "/bench" g ".dat"
            for (i = 1; i <= np[g]; i++) {
                sp = px[g, i] / base[g]; n = pn[g, i]
                printf "%d %.6g %.6g %.6g %.6g %.6g %.6g 0\n", n, sp, sp, sp, sp / n, sp / n, sp / n > dat
            }
            close(dat)
            how = r1[g] ? "1 rank x N threads" : "N = ranks x threads"
            printf "%s\tmeasured, %s: hcnn bench %s, batch %d, %s\tmeasured\n", dat, mach, gm[g], gb[g], how >> (tmp "/extra.tsv")
        }
    }' "${bench_logs[@]}" || die "--bench: the logs could not be read"
fi
i=0
for pc in ${plan_csvs[@]+"${plan_csvs[@]}"}; do
    i=$((i + 1))
    # the plan's header (hcnn plan prints it; results/plan keeps it as DIR.txt)
    txt=${pc%/*}.txt
    [ "$txt" != "$pc" ] && [ -f "$txt" ] || txt=/dev/null
    awk -v tmp="$tmp" -v prog="$prog" -v i="$i" -v want="$plan_scaling" -v txt="$txt" -v pc="$pc" -F, '
    BEGIN {
        while ((getline line < txt) > 0) {
            if (line ~ /^hcnn plan: model / && model == "") {
                model = line; sub(/^hcnn plan: model /, "", model); sub(/ .*/, "", model)
                if (line ~ /per-rank batch [0-9]+/) { wb = line; sub(/.*per-rank batch /, "", wb); wb += 0 }
                if (line ~ /global batch [0-9]+ \(strong\)/) { sb = line; sub(/.*global batch /, "", sb); sb += 0 }
            }
            if (line ~ /^hcnn plan: node [^:]+: [0-9]+ cores/ && node == "") {
                node = line; sub(/^hcnn plan: node /, "", node)
                c = node; sub(/^[^:]+: /, "", c); sub(/ cores.*/, "", c)
                sub(/:.*/, "", node); node = node " (" c " cores)"
            }
        }
    }
    NR == 1 { for (k = 1; k <= NF; k++) col[$k] = k
              split("scaling nodes images_per_s best", need, " ")
              for (k in need) if (!(need[k] in col)) { printf "%s: error: --plan %s: no column %s (not an hcnn plan CSV)\n", prog, pc, need[k] > "/dev/stderr"; bad = 1; exit 1 }
              next }
    $(col["best"]) == 1 && (want == "both" || $(col["scaling"]) == want) {
        sc = $(col["scaling"]); n = $(col["nodes"]) + 0
        if (!(sc in seen)) { seen[sc] = 1; order[++ns] = sc }
        x[sc, n] = $(col["images_per_s"]) + 0; if (!((sc, n) in have)) { have[sc, n] = 1; nl[sc, ++cnt[sc]] = n }
        if ("network" in col) net = $(col["network"])
    }
    END {
        if (bad) exit 1
        for (s = 1; s <= ns; s++) {
            sc = order[s]
            if (!((sc, 1) in x) || x[sc, 1] <= 0) { printf "%s: warning: --plan %s: no 1-node point of %s scaling: left out\n", prog, pc, sc > "/dev/stderr"; continue }
            m = cnt[sc]
            for (a = 2; a <= m; a++) { v = nl[sc, a]; for (b = a - 1; b >= 1 && nl[sc, b] > v; b--) nl[sc, b + 1] = nl[sc, b]; nl[sc, b + 1] = v }
            dat = tmp "/plan" i "_" sc ".dat"
            for (a = 1; a <= m; a++) {
                n = nl[sc, a]; sp = x[sc, n] / x[sc, 1]
                printf "%d %.6g %.6g %.6g %.6g %.6g %.6g 0\n", n, sp, sp, sp, sp / n, sp / n, sp / n > dat
            }
            close(dat)
            what = (model != "" ? model : "the model") ", " sc " scaling"
            if (sc == "strong" && sb) what = what ", global batch " sb
            if (sc == "weak" && wb) what = what ", batch " wb " per node"
            printf "%s\tprojected (hcnn plan): %s, N nodes%s%s\tprojected\n", dat, what,
                (node != "" ? " " node : ""), (net != "" ? ", " net : "") >> (tmp "/extra.tsv")
        }
    }' "$pc" || die "--plan $pc: not read (message above)"
done
# the sweep's lines say their machine when other lines are beside them
nextra=$(wc -l <"$tmp/extra.tsv")
if [ "$nextra" -gt 0 ] && [ -s "$tmp/groups.tsv" ]; then
    cf=$(cat "$tmp/config")
    awk -F'\t' -v m="$machine" -v cf="${cf:+, $cf}" 'BEGIN { OFS = "\t" } { $2 = "measured, " m ": " $2 cf; print }' "$tmp/groups.tsv" >"$tmp/groups.tmp" &&
        mv "$tmp/groups.tmp" "$tmp/groups.tsv"
fi
cat "$tmp/extra.tsv" >>"$tmp/groups.tsv"
has_plan=0
if grep -q $'\tprojected$' "$tmp/extra.tsv"; then has_plan=1; fi

maxranks=$(cat "$tmp/maxranks")
maxranks=$(awk -F'\t' -v m="$maxranks" '{ while ((getline l < $1) > 0) { split(l, f, " "); if (f[1] + 0 > m) m = f[1] + 0 } close($1) } END { print m }' "$tmp/extra.tsv")
maxepoch=$(awk -F'\t' 'BEGIN { m = 1 } $3 > m { m = $3 } END { print m }' "$tmp/runs.tsv")
threads=$(cat "$tmp/threads")
footer=$(cat "$tmp/footer")
repeats_note=""
if [ -f "$tmp/multi" ]; then repeats_note=" (the first repeat of each point)"; fi
draw_acc=1
if [ -f "$tmp/acc_const" ]; then draw_acc=0; fi
term="set terminal pngcairo size 1200,760 noenhanced font \"sans,12\""
# the titles of the scaling plots: the machine always; beside --bench or
# --plan lines, what is measured and what projected, and the key below
sp_title="Speed-up vs ranks, measured on $machine, $threads"
sp_sub="S = XN/X1 (images/s, median of the repeats; bars: min to max)"
ef_title="Parallel efficiency vs ranks, measured on $machine, $threads"
ef_sub="E = S/N = XN/(N X1) (median of the repeats; bars: min to max)"
xlabel="MPI ranks N"
key="set key outside right top Left reverse spacing 1.2"
if [ "$nextra" -gt 0 ]; then
    what="measured (solid)"
    if [ "$has_plan" -eq 1 ]; then what+=" and projected by hcnn plan (dashed, not measured)"; fi
    sp_title="Speed-up vs N, $what"
    sp_sub="S = XN/X1 (images/s); the sweep: N MPI ranks, $threads, bars: min to max of its repeats"
    ef_title="Parallel efficiency vs N, $what"
    ef_sub="E = S/N; the sweep: N MPI ranks, $threads, bars: min to max of its repeats"
    xlabel="N: MPI ranks, threads or nodes, as each line says"
    # the labels are long: the key in the empty top left of the log-log plot,
    # over the grid, with headroom above the highest point
    key="set key inside left top Left reverse opaque box spacing 1.2 font \"sans,11\""
    term="set terminal pngcairo size 1200,860 noenhanced font \"sans,12\""
fi

gp=$tmp/plots.gp
{
    echo "$term"
    echo 'set grid'
    echo "$key"
    echo 'set datafile separator whitespace'
    echo 'set bmargin 6'
    echo "set label 100 $(gq "$footer") at screen 0.01, screen 0.02 left font \"sans,9\""
    # speed-up and efficiency vs ranks, log2 rank axis
    echo 'set logscale x 2'
    echo "set xrange [0.8:$maxranks * 1.25]"
    echo "set xlabel $(gq "$xlabel")"
    echo "set output $(gq "$outdir/plots/speedup.png")"
    # (gnuplot turns the \n of a double-quoted string into a line break)
    # shellcheck disable=SC2028
    echo "set title $(gq "$sp_title") . \"\\n\" . $(gq "$sp_sub")"
    echo 'set ylabel "speed-up S"'
    echo 'set logscale y 2'
    echo 'set yrange [*:*]'
    if [ "$nextra" -gt 0 ]; then echo "set yrange [0.5:$maxranks * 8]"; fi
    group_plot 'x title "ideal (S = N)" lw 2 dt 2 lc rgb "black"' 2
    echo 'unset logscale y'
    echo "set output $(gq "$outdir/plots/efficiency.png")"
    # shellcheck disable=SC2028
    echo "set title $(gq "$ef_title") . \"\\n\" . $(gq "$ef_sub")"
    echo 'set ylabel "efficiency E"'
    echo 'set yrange [0:*]'
    if [ "$nextra" -gt 0 ]; then echo 'set yrange [0:2]'; fi
    group_plot '1 title "ideal (E = 1)" lw 2 dt 2 lc rgb "black"' 5
    # loss and accuracy vs epoch
    echo 'unset logscale x'
    echo 'set terminal pngcairo size 1200,760 noenhanced font "sans,12"'
    echo 'set key outside right top Left reverse spacing 1.2'
    echo 'set offsets graph 0, graph 0, graph 0.05, 0'   # no points on the top frame
    echo "set xrange [0.5:$maxepoch + 0.5]"
    if [ "$maxepoch" -le 20 ]; then echo 'set xtics 1'; fi
    echo 'set xlabel "epoch"'
    echo "set output $(gq "$outdir/plots/loss.png")"
    # shellcheck disable=SC2028
    echo "set title $(gq "Loss vs epoch, measured on $machine") . \"\\n\" . $(gq "solid: train loss, dashed: test loss, $threads$repeats_note")"
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
    if [ "$draw_acc" -eq 1 ]; then
        echo "set output $(gq "$outdir/plots/accuracy.png")"
        echo "set title $(gq "Test accuracy vs epoch, measured on $machine") . \"\\n\" . $(gq "$threads$repeats_note")"
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
    fi
    echo 'unset output'
} >"$gp"

if ! "$gnuplot" "$gp" >"$tmp/gnuplot.log" 2>&1; then
    sed 's/^/  /' "$tmp/gnuplot.log" >&2
    cp "$gp" "$outdir/plots/failed.gp" 2>/dev/null || true
    die "gnuplot failed (messages above; its script is $outdir/plots/failed.gp)"
fi
made="speedup efficiency loss"
if [ "$draw_acc" -eq 1 ]; then made+=" accuracy"; fi
for p in $made; do
    [ -s "$outdir/plots/$p.png" ] || die "gnuplot did not write $outdir/plots/$p.png"
done
echo "$prog: wrote $outdir/plots/${made// /.png, }.png"
if [ "$draw_acc" -eq 0 ]; then
    old=""
    if [ -e "$outdir/plots/accuracy.png" ]; then
        rm -f "$outdir/plots/accuracy.png" && old=" (the older $outdir/plots/accuracy.png removed)"
    fi
    v=$(cat "$tmp/acc_const")
    echo "$prog: accuracy.png not drawn: test_acc is ${v:-empty} in every row of every CSV, so it carries no information$old"
fi
