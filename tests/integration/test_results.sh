#!/usr/bin/env bash
# The results tooling on canned per-epoch CSV files: scripts/plot.sh computes
# the speed-up table (baselines, strong and weak scaling, median epoch time,
# columns found by name, repeats of a point grouped to median/min/max with the
# spread flag, provenance and points files), draws the PNGs when gnuplot is
# there (no accuracy plot when test_acc is constant), and refuses a CSV that
# lacks a column; scripts/sweep.sh --dry-run plans the runs of a sweep (repeats,
# grown or fixed strong batches, weak pipelines, the per-job directory, the
# refusal of a directory with a table); and one tiny real sweep (1 and 2
# ranks, 2 repeats, 1 epoch: about 15 s on 2 cores) checks the table's
# provenance columns and the plots.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
PLOT="$HCNN_SRCDIR/scripts/plot.sh"
SWEEP="$HCNN_SRCDIR/scripts/sweep.sh"
HEADER=run_id,git_commit,timestamp,strategy,ranks,stages,replicas,threads,batch_size,microbatches,epoch,step,lr,train_loss,train_acc,test_loss,test_acc,images_per_s,epoch_time_s,eval_time_s,compute_s,compute_s_min,compute_s_max,comm_wait_s,comm_wait_s_min,comm_wait_s_max,data_wait_s,data_wait_s_min,data_wait_s_max,bubble_s,bubble_s_min,bubble_s_max,allreduce_hidden,peak_rss_mb

# row RUN_ID STRATEGY RANKS STAGES REPLICAS BATCH EPOCH TRAIN_LOSS TEST_LOSS TEST_ACC IMAGES_PER_S EPOCH_TIME_S
row() {
    local t=$(( $7 * 64 ))
    echo "$1,abc1234,2026-11-21T21:30:0${7}Z,$2,$3,$4,$5,1,$6,4,$7,$t,0.05,$8,0.5,$9,${10},${11},${12},0.1,1.0,0.9,1.1,0.1,0.05,0.15,0.01,0.0,0.02,0,0,0,0.5,120.5"
}
C=$WORK/csv
mkdir -p "$C"
# serial, 3 epochs: a slow first epoch (median 8.2 s, not the mean 9.4 s), a
# repeated header and epoch 2 written twice (a resumed run: the last row counts)
{
    echo "$HEADER"
    row serial_n1 serial 1 1 1 32 1 1.30 1.10 0.40 170 12.0
    row serial_n1 serial 1 1 1 32 2 0.90 0.85 0.60 10 99.0
    echo "$HEADER"
    row serial_n1 serial 1 1 1 32 2 0.90 0.85 0.60 256 8.0
    row serial_n1 serial 1 1 1 32 3 0.70 0.75 0.70 250 8.2
} >"$C/serial_n1.csv"
# data parallel: its own 1-rank baseline (T1 = 8.4 s, X1 = 244 images/s)
{ echo "$HEADER"; row data_n1 data 1 1 1 32 1 1.3 1.1 0.41 244 8.4; row data_n1 data 1 1 1 32 2 0.9 0.8 0.61 244 8.4; } >"$C/data_n1.csv"
{ echo "$HEADER"; row data_n2 data 2 1 2 32 1 1.3 1.1 0.42 420 4.8; row data_n2 data 2 1 2 32 2 0.9 0.8 0.62 430 4.8; } >"$C/data_n2.csv"
{ echo "$HEADER"; row data_n4 data 4 1 4 32 1 1.3 1.1 0.43 690 3.0; row data_n4 data 4 1 4 32 2 0.9 0.8 0.63 700 3.0; } >"$C/data_n4.csv"
# weak: batch 4 x 32, throughput 880 and 876.8 (mean 878.4 = 3.6 x 244)
{ echo "$HEADER"; row data_n4_weak data 4 1 4 128 1 1.4 1.2 0.35 880 2.4; row data_n4_weak data 4 1 4 128 2 1.1 1.0 0.50 876.8 2.4; } >"$C/data_n4_weak.csv"
# neither strong nor weak (batch 48 at 2 ranks)
{ echo "$HEADER"; row data_n2_b48 data 2 1 2 48 1 1.3 1.1 0.42 400 5.0; } >"$C/data_n2_b48.csv"
# pipelines, one epoch each, no 1-rank pipeline run: serial is the baseline
# (8.2 s); this file has its columns in another order and an extra column
{
    echo "$HEADER" | awk -F, -v OFS=, '{ t = $1; $1 = $19; $19 = t; print $0, "extra_col" }'
    row pipe_n2_s2 pipeline 2 2 1 32 1 1.2 1.0 0.5 400 5.125 | awk -F, -v OFS=, '{ t = $1; $1 = $19; $19 = t; print $0, "x" }'
} >"$C/pipe_n2_s2.csv"
{ echo "$HEADER"; row pipe_n4_s2 pipeline 4 2 2 32 1 1.2 1.0 0.5 500 4.1; } >"$C/pipe_n4_s2.csv"

OUT=$WORK/res  # (not $WORK/out: expect_fail writes there)
case_begin plot_table_written
if GNUPLOT=/nonexistent/gnuplot "$PLOT" --no-plots -o "$OUT" "$C"/*.csv >"$WORK/table.log" 2>&1 &&
   [ -f "$OUT/metrics/speedup_table.csv" ]; then case_ok
else case_fail "$(cat "$WORK/table.log")"; fi

TABLE=$OUT/metrics/speedup_table.csv
# cell RUN_ID COLUMN: the value of COLUMN (by name) in the row of RUN_ID
cell() {
    awk -F, -v id="$1" -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) k[$i] = i; next }
        $1 == id { print (c in k) ? $(k[c]) : "no-column"; n++ } END { if (!n) print "no-row" }' "$TABLE"
}
# expect RUN_ID COLUMN VALUE: numerically equal to 1e-4 (or the same string)
expect() {
    local got
    got=$(cell "$1" "$2")
    if awk -v a="$got" -v b="$3" 'BEGIN { exit !(a == b || (a ~ /^[-0-9.]+$/ && b ~ /^[-0-9.]+$/ && (a - b) ^ 2 < 1e-8)) }'
    then return 0; fi
    case_fail "$1 $2 = '$got', want '$3'"
    return 1
}
check() { # NAME (RUN_ID COLUMN VALUE)...
    local name=$1 ok=1
    shift
    case_begin "$name"
    while [ $# -gt 0 ]; do expect "$1" "$2" "$3" || { ok=0; break; }; shift 3; done
    if [ $ok -eq 1 ]; then case_ok; fi
}

case_begin table_header_and_rows
# the 13 columns users' scripts read, then the new ones
want=run_id,strategy,ranks,stages,replicas,threads,batch_size,epochs,time_per_epoch_s,images_per_s,speedup,efficiency,scaling
want+=,repeats,images_per_s_min,images_per_s_max,time_per_epoch_s_min,time_per_epoch_s_max,spread,noisy,microbatches,batch_note
want+=,git_commit,cpu_model,blas,mpi_library,run_ids
if [ "$(head -n 1 "$TABLE")" = "$want" ] && [ "$(wc -l <"$TABLE")" -eq 9 ] &&
   [ "$(sed -n 2p "$TABLE" | cut -d, -f1)" = serial_n1 ]; then case_ok
else case_fail "$(cat "$TABLE")"; fi

# speed-up = XN / X1 (images/s) for strong scaling too: data_n2 425/244,
# data_n4 695/244, the pipelines 400 and 500 over serial's 225.33
check serial_median_and_dedup  serial_n1 epochs 3  serial_n1 time_per_epoch_s 8.2  serial_n1 images_per_s 225.33 \
    serial_n1 speedup 1  serial_n1 efficiency 1  serial_n1 scaling strong
check data_strong_2_ranks      data_n2 speedup 1.7418  data_n2 efficiency 0.8709  data_n2 scaling strong  data_n1 speedup 1
check data_strong_4_ranks      data_n4 speedup 2.8484  data_n4 efficiency 0.7121  data_n4 time_per_epoch_s 3
check data_weak_4_ranks        data_n4_weak scaling weak  data_n4_weak images_per_s 878.4 \
    data_n4_weak speedup 3.6  data_n4_weak efficiency 0.9
check other_batch_no_speedup   data_n2_b48 scaling other  data_n2_b48 speedup ""  data_n2_b48 efficiency ""
check pipeline_serial_baseline pipe_n2_s2 speedup 1.7751  pipe_n2_s2 efficiency 0.8876  pipe_n2_s2 stages 2 \
    pipe_n2_s2 epochs 1  pipe_n4_s2 speedup 2.2189  pipe_n4_s2 efficiency 0.5547  pipe_n4_s2 replicas 2
# single CSVs: one sample per point, no spread; no provenance file: unknown
# (git_commit from the CSVs' column)
check single_csv_one_sample    data_n2 repeats 1  data_n2 images_per_s_min 425  data_n2 images_per_s_max 425 \
    data_n2 spread 0  data_n2 noisy 0  data_n2 run_ids data_n2  data_n2 microbatches 4  data_n2 batch_note "" \
    data_n2 git_commit abc1234  data_n2 cpu_model unknown  data_n2 blas unknown  data_n2 mpi_library unknown

# --warmup 1: the first epoch of runs with more than one is left out
case_begin warmup_table_written
if "$PLOT" --no-plots --warmup 1 -o "$WORK/warm" "$C"/*.csv >"$WORK/warm.log" 2>&1; then case_ok
else case_fail "$(cat "$WORK/warm.log")"; fi
TABLE=$WORK/warm/metrics/speedup_table.csv
check warmup_skips_first_epoch serial_n1 time_per_epoch_s 8.1  serial_n1 images_per_s 253  serial_n1 epochs 3 \
    pipe_n2_s2 time_per_epoch_s 5.125  pipe_n2_s2 speedup 1.5810
TABLE=$OUT/metrics/speedup_table.csv

# ---- repeats, spread, provenance, points ----------------------------------------
# R: a 1-rank data baseline (244 images/s); three repeats of a 2-rank point
# named by their run_ids (data_n2_rep_r1..3 in files a1..a3.csv: images/s 400,
# 440, 410, epoch times 5.0, 4.6, 4.9: median 410 and 4.9, spread 40/410 < 0.2);
# two repeats of a 4-rank point named by their files (data_n4_grown_r1.csv,
# _r2.csv, run_ids like hcnn's: 700 and 900 images/s, spread 200/800 > 0.2),
# its batch grown to 64 as points.tsv says; test_acc 0.25 in every row
R=$WORK/rep
mkdir -p "$R/runs"
{ echo "$HEADER"; row data_n1 data 1 1 1 32 1 1.3 1.1 0.25 244 8.4; } >"$R/runs/data_n1.csv"
i=0
for x in 400:5.0 440:4.6 410:4.9; do
    i=$((i + 1))
    { echo "$HEADER"; row "data_n2_rep_r$i" data 2 1 2 32 1 1.3 1.1 0.25 "${x%:*}" "${x#*:}"; } >"$R/runs/a$i.csv"
done
{ echo "$HEADER"; row 20261123T0101Z-11 data 4 1 4 64 1 1.3 1.1 0.25 700 3.1; } >"$R/runs/data_n4_grown_r1.csv"
{ echo "$HEADER"; row 20261123T0102Z-12 data 4 1 4 64 1 1.3 1.1 0.25 900 2.5; } >"$R/runs/data_n4_grown_r2.csv"
# (found beside the CSVs' directory, as sweep.sh leaves it)
cat >"$R/provenance.txt" <<'EOF2'
# a comment
git_commit=fedcba9-dirty
cpu_model=Test CPU 9000, 64 cores
blas=OpenBLAS 0.3.21 kernels: Haswell
mpi_library=Open MPI v4.1.4, package: Debian OpenMPI
run.data_n4_grown_r1.blas=OpenBLAS 0.3.21 kernels: Zen
run.data_n4_grown_r2.blas=OpenBLAS 0.3.21 kernels: Zen
EOF2
printf '# point\tscaling\tB\tG\tnote\ndata_n4_grown\tstrong\t32\t64\tgrown from 32 to 64: 4 ranks x 16 threads\n' >"$R/points.tsv"
case_begin repeats_table_written
if "$PLOT" --no-plots --points "$R/points.tsv" --table "$R/table.csv" "$R"/runs/*.csv >"$WORK/rep.log" 2>&1 &&
   [ "$(wc -l <"$R/table.csv")" -eq 4 ]; then case_ok
else case_fail "$(cat "$WORK/rep.log" "$R/table.csv")"; fi
TABLE=$R/table.csv
check repeats_median_min_max   data_n2_rep repeats 3  data_n2_rep images_per_s 410  data_n2_rep images_per_s_min 400 \
    data_n2_rep images_per_s_max 440  data_n2_rep time_per_epoch_s 4.9  data_n2_rep time_per_epoch_s_min 4.6 \
    data_n2_rep time_per_epoch_s_max 5  data_n2_rep run_ids "data_n2_rep_r1;data_n2_rep_r2;data_n2_rep_r3" \
    data_n2_rep speedup 1.6803  data_n2_rep efficiency 0.8402  data_n2_rep scaling strong
check repeats_by_file_name     data_n4_grown repeats 2  data_n4_grown images_per_s 800  data_n4_grown images_per_s_min 700 \
    data_n4_grown run_ids "20261123T0101Z-11;20261123T0102Z-12"
check spread_below_20_not_noisy data_n2_rep spread 0.0976  data_n2_rep noisy 0
check spread_above_20_noisy    data_n4_grown spread 0.25  data_n4_grown noisy 1
check points_declared_grown    data_n4_grown scaling strong  data_n4_grown batch_size 64  data_n4_grown speedup 3.2787 \
    data_n4_grown batch_note "grown from 32 to 64: 4 ranks x 16 threads"  data_n2_rep batch_note ""
check provenance_columns       data_n4_grown git_commit abc1234  data_n4_grown cpu_model "Test CPU 9000; 64 cores" \
    data_n4_grown blas "OpenBLAS 0.3.21 kernels: Zen"  data_n2_rep blas "OpenBLAS 0.3.21 kernels: Haswell" \
    data_n2_rep mpi_library "Open MPI v4.1.4; package: Debian OpenMPI"
case_begin table_splits_at_commas
if awk -F, 'NR == 1 { n = NF } NF != n { bad = 1 } END { exit bad || NR != 4 }' "$TABLE"; then case_ok
else case_fail "rows with another field count than the header: $(cat "$TABLE")"; fi
# without git_commit in the CSVs, the provenance file's
sed 's/abc1234//' "$R/runs/data_n1.csv" >"$R/nogit.csv"
case_begin provenance_git_commit_fallback
if "$PLOT" --no-plots --provenance "$R/provenance.txt" --table "$R/nogit_table.csv" "$R/nogit.csv" >"$WORK/nogit.log" 2>&1 &&
   TABLE=$R/nogit_table.csv expect data_n1 git_commit fedcba9-dirty; then case_ok
else case_fail "$(cat "$WORK/nogit.log")"; fi
# the repeats of one point must agree
{ echo "$HEADER"; row data_n2_rep_r4 data 4 1 4 32 1 1.3 1.1 0.25 400 5.0; } >"$WORK/a4.csv"
expect_fail repeats_disagree_named "a4.csv: run data_n2_rep_r4 is a repeat of point data_n2_rep .* its ranks is 4, not 2" \
    "$PLOT" --no-plots -o "$WORK/out2" "$R"/runs/a1.csv "$WORK/a4.csv"
TABLE=$OUT/metrics/speedup_table.csv

# ---- refusals -----------------------------------------------------------------
awk -F, -v OFS=, '{ $17 = ""; gsub(/,,/, ","); print }' "$C/data_n2.csv" >"$WORK/no_test_acc.csv"
expect_fail missing_column_named "no_test_acc.csv: missing column\(s\) test_acc" \
    "$PLOT" --no-plots -o "$WORK/out2" "$C/serial_n1.csv" "$WORK/no_test_acc.csv"
# the older CSV of hcnn (no run_id, stages, replicas)
{
    echo "epoch,step,lr,train_loss,train_acc,test_loss,test_acc,images_per_s,epoch_time_s,data_wait_s,eval_time_s,threads,batch_size,strategy,ranks,compute_s,comm_wait_s,allreduce_hidden"
    echo "1,16,0.05,1.69,0.65,0.02,1.0,37508.48,0.0137,0.0002,0.0015,2,32,serial,1,0.0135,0.0000,0.0000"
} >"$WORK/old.csv"
expect_fail old_csv_refused "old.csv: missing column\(s\) run_id, stages, replicas" \
    "$PLOT" --no-plots -o "$WORK/out2" "$WORK/old.csv"
sed '3s/,8.4,/,slow,/' "$C/data_n1.csv" >"$WORK/bad_value.csv"
expect_fail malformed_value_named "bad_value.csv: line 3: column epoch_time_s" \
    "$PLOT" --no-plots -o "$WORK/out2" "$WORK/bad_value.csv"
expect_fail gnuplot_missing_named "install gnuplot-nox" \
    env GNUPLOT=/nonexistent/gnuplot "$PLOT" -o "$WORK/out3" "$C/serial_n1.csv"
case_begin gnuplot_missing_table_still_written
if [ -s "$WORK/out3/metrics/speedup_table.csv" ]; then case_ok; else case_fail "no table in $WORK/out3"; fi

# ---- plots (need gnuplot with pngcairo) ----------------------------------------
png_ok() { [ "$(wc -c <"$1")" -gt 1000 ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '211PNG' ]; }
# (GNUPLOT, as for plot.sh, names the gnuplot command: GNUPLOT=/nonexistent skips these)
gp=${GNUPLOT:-gnuplot}
if command -v "$gp" >/dev/null 2>&1 && "$gp" -e 'set terminal pngcairo' >/dev/null 2>&1; then
    case_begin plots_written
    if "$PLOT" -o "$OUT" "$C"/*.csv >"$WORK/plot.log" 2>&1; then case_ok
    else case_fail "$(cat "$WORK/plot.log")"; fi
    for p in speedup efficiency loss accuracy; do
        case_begin "png_$p"
        if [ -f "$OUT/plots/$p.png" ] && png_ok "$OUT/plots/$p.png"; then case_ok
        else case_fail "$OUT/plots/$p.png missing, too small or not a PNG"; fi
    done
    # test_acc 0.25 in every row: no accuracy.png (an older one removed), one line why
    mkdir -p "$R/plots"
    cp "$OUT/plots/accuracy.png" "$R/plots/accuracy.png"
    # (through a gnuplot that keeps a copy of its script)
    # shellcheck disable=SC2016
    printf '#!/bin/sh\nif [ -f "$1" ]; then cp "$1" "%s/last.gp"; fi\nexec "%s" "$@"\n' "$WORK" "$(command -v "$gp")" >"$WORK/gpwrap"
    chmod +x "$WORK/gpwrap"
    case_begin accuracy_skipped_constant
    if GNUPLOT=$WORK/gpwrap "$PLOT" -o "$R" "$R"/runs/*.csv >"$WORK/acc.log" 2>&1 &&
       grep -q 'accuracy.png not drawn: test_acc is 0.25 in every row' "$WORK/acc.log" &&
       [ ! -e "$R/plots/accuracy.png" ] && png_ok "$R/plots/speedup.png" && png_ok "$R/plots/loss.png"; then case_ok
    else case_fail "$(cat "$WORK/acc.log"; ls "$R/plots")"; fi
    # error bars, the noisy point marked with a key entry, threads per rank in
    # every title, the provenance line
    case_begin plot_bars_marks_provenance
    if [ "$(grep -c 'set title.*, 1 thread per rank' "$WORK/last.gp")" -eq 3 ] &&
       [ "$(grep -c 'with yerrorlines' "$WORK/last.gp")" -eq 2 ] &&
       [ "$(grep -o 'pt 6 ps 3.5[^,]*title "spread > 20%' "$WORK/last.gp" | wc -l)" -eq 2 ] &&
       grep -q 'label 100 "commit abc1234   CPU: Test CPU 9000; 64 cores   BLAS: OpenBLAS 0.3.21 kernels: Haswell | OpenBLAS 0.3.21 kernels: Zen   MPI: Open MPI v4.1.4"' "$WORK/last.gp" &&
       ! grep -q accuracy "$WORK/last.gp"; then case_ok
    else case_fail "$(cat "$WORK/last.gp")"; fi
    # the machine in every title: the provenance's cpu_model (and cpus)
    case_begin plot_titles_name_machine
    if [ "$(grep -c 'set title "[^"]*measured on Test CPU 9000; 64 cores' "$WORK/last.gp")" -eq 3 ]; then case_ok
    else case_fail "$(grep 'set title' "$WORK/last.gp")"; fi
    # beside the sweep: hcnn bench logs (measured, their machine from the
    # session.log beside them) and hcnn plan's projection (dashed, marked)
    B=$WORK/bench
    mkdir -p "$B/cpu" "$WORK/plan/net-a"
    printf 'Model name:    Test Xeon\nCPU(s):        16\n' >"$B/session.log"
    for x in 1:40 4:150 16:300; do
        { echo "hcnn bench: model resnet18, strategy serial on 1 rank x ${x%:*} threads, global batch 64, 1 warm-up steps"
          echo "repeat=1 images_per_s=1.0 step_ms=1"; echo "images_per_s=${x#*:}"; } >"$B/cpu/t${x%:*}.log"
    done
    {
        echo "scaling,nodes,layout,stages,replicas,images_per_s,best,network"
        echo "strong,1,data,1,1,100,1,ib-hdr"
        echo "strong,2,data,1,2,190,1,ib-hdr"
        echo "strong,2,pipeline_2x1,2,1,150,0,ib-hdr"
        echo "strong,32,data,1,32,2400,1,ib-hdr"
        echo "weak,1,data,1,1,100,1,ib-hdr"
        echo "weak,32,data,1,32,3100,1,ib-hdr"
    } >"$WORK/plan/net-a/plan.csv"
    printf 'hcnn plan: model resnet18 (11.17 M parameters), per-rank batch 128 (weak), global batch 128 (strong), network ib-hdr\nhcnn plan: node epyc-9554: 64 cores, 6348.8 GFLOP/s\n' >"$WORK/plan/net-a.txt"
    # (a gnuplot that keeps its script's directory: the data files too)
    # shellcheck disable=SC2016
    printf '#!/bin/sh\nif [ -f "$1" ]; then rm -rf "%s/lastdir"; cp -r "$(dirname "$1")" "%s/lastdir"; cp "$1" "%s/last.gp"; fi\nexec "%s" "$@"\n' \
        "$WORK" "$WORK" "$WORK" "$(command -v "$gp")" >"$WORK/gpwrap2"
    chmod +x "$WORK/gpwrap2"
    case_begin plot_measured_and_projected_labelled
    if GNUPLOT=$WORK/gpwrap2 "$PLOT" -o "$WORK/mp" --machine "2-core test VM" --bench "$B/cpu/t1.log" --bench "$B/cpu/t4.log" \
           --bench "$B/cpu/t16.log" --plan "$WORK/plan/net-a/plan.csv" --plan-scaling strong "$C"/data_n*.csv >"$WORK/mp.log" 2>&1 &&
       png_ok "$WORK/mp/plots/speedup.png" && png_ok "$WORK/mp/plots/efficiency.png" &&
       grep -q 'set title "Speed-up vs N, measured (solid) and projected by hcnn plan (dashed, not measured)" . "\\n" . "S = XN/X1 (images/s); the sweep: N MPI ranks, 1 thread per rank' "$WORK/last.gp" &&
       grep -q 'with yerrorlines title "measured, 2-core test VM: data, strong scaling"' "$WORK/last.gp" &&
       grep -q 'with linespoints title "measured, Test Xeon, 16 CPUs: hcnn bench resnet18, batch 64, 1 rank x N threads" lw 2 [^,]* dt 1 ' "$WORK/last.gp" &&
       grep -q 'with linespoints title "projected (hcnn plan): resnet18, strong scaling, global batch 128, N nodes epyc-9554 (64 cores), ib-hdr" lw 2 [^,]* dt 2 ' "$WORK/last.gp" &&
       ! grep -q 'weak scaling, batch 128 per node' "$WORK/last.gp" &&
       grep -q 'set xrange \[0.8:32 \* 1.25\]' "$WORK/last.gp"; then
        # the speed-ups: the plan's recommended layout over its 1-node rate,
        # the bench logs' images/s over the 1-thread one
        got=$(awk '{ printf "%s %s; ", $1, $2 }' "$WORK/lastdir/plan1_strong.dat" "$WORK/lastdir/bench1.dat")
        if [ "$got" = "1 1; 2 1.9; 32 24; 1 1; 4 3.75; 16 7.5; " ]; then case_ok
        else case_fail "speed-ups: $got"; fi
    else case_fail "$(cat "$WORK/mp.log"; grep -E 'title|xrange' "$WORK/last.gp")"; fi
    expect_fail plan_not_a_plan_csv "--plan $C/data_n1.csv: no column" \
        "$PLOT" -o "$WORK/mp2" --plan "$C/data_n1.csv" "$C/data_n1.csv"
    case_begin accuracy_drawn_otherwise
    if ! grep -q 'not drawn' "$WORK/plot.log" && png_ok "$OUT/plots/accuracy.png"; then case_ok
    else case_fail "$(cat "$WORK/plot.log")"; fi
    case_begin plots_single_run_single_epoch
    if "$PLOT" -o "$WORK/one" "$C/pipe_n4_s2.csv" >"$WORK/one.log" 2>&1 && png_ok "$WORK/one/plots/loss.png"; then
        case_ok
    else case_fail "$(cat "$WORK/one.log")"; fi
else
    for p in plots_written png_speedup png_efficiency png_loss png_accuracy accuracy_skipped_constant \
        plot_bars_marks_provenance plot_titles_name_machine plot_measured_and_projected_labelled \
        plan_not_a_plan_csv accuracy_drawn_otherwise plots_single_run_single_epoch; do
        case_begin "$p"
        case_skip "gnuplot with the pngcairo terminal is not installed (apt-get install gnuplot-nox)"
    done
fi

# ---- the sweep's plan (nothing is run) ------------------------------------------
# plan NAME ARGS...: sweep.sh --dry-run ARGS into $WORK/NAME.log; 1 on failure
plan() {
    local name=$1
    shift
    if "$SWEEP" --dry-run "$@" >"$WORK/$name.log" 2>&1; then return 0; fi
    case_fail "exit status $?: $(cat "$WORK/$name.log")"
    return 1
}
# line NAME RUN: the command of RUN in $WORK/NAME.log
line() { grep "^$2: " "$WORK/$1.log"; }
case_begin sweep_dry_run_plan
if plan sweep --ranks "1 2 4" --epochs 1 --repeats 2 --out "$WORK/sweep"; then
    got=$(grep -o 'csv=[^ ]*' "$WORK/sweep.log" | sed 's,.*/,,' | tr '\n' ' ')
    want=""
    for r in 1 2; do
        for p in serial_n1 data_n1_strong data_n2_strong data_n4_strong pipeline_n2_s2_strong pipeline_n4_s4_strong \
            pipeline_n4_s2_strong data_n2_weak data_n4_weak pipeline_n2_s2_weak pipeline_n4_s4_weak pipeline_n4_s2_weak; do
            want+="${p}_r$r.csv "
        done
    done
    if [ "$got" = "$want" ] && line sweep data_n4_weak_r1 | grep -q 'batch_size=128' &&
       line sweep pipeline_n4_s2_strong_r2 | grep -q -- '-np 4 .*strategy=pipeline.*stages=2' &&
       line sweep serial_n1_r1 | grep -q "csv=$WORK/sweep/runs/serial_n1_r1.csv" &&
       grep -q '24 runs (12 points x 2 repeats)' "$WORK/sweep.log" && [ ! -e "$WORK/sweep" ]; then
        case_ok
    else case_fail "plan: $got"; sed 's/^/#   /' "$WORK/sweep.log"; fi
fi
# strong batches grown so that 16 threads per rank have work: data 4 ranks
# 32 -> 64, pipeline 4 ranks = 2 stages x 2 replicas x 4 micro-batches -> 128
case_begin sweep_strong_batch_grown
if plan grow --ranks "1 4" --threads 16 --batch 32 --repeats 1 --stages 2 --strategies "data pipeline" --out "$WORK/g"; then
    if line grow data_n4_strong_r1 | grep -q 'batch_size=64 ' &&
       line grow pipeline_n4_s2_strong_r1 | grep -q 'microbatches=4 --set batch_size=128 ' &&
       line grow data_n1_strong_r1 | grep -q 'batch_size=32 ' &&
       grep -q 'point data_n4_strong: .*(grown from 32 to 64: 4 ranks x 16 threads)' "$WORK/grow.log" &&
       grep -q 'point pipeline_n4_s2_strong: .*(grown from 32 to 128: 2 replicas x 4 micro-batches x 16 threads)' "$WORK/grow.log" &&
       grep 'point data_n1_strong:' "$WORK/grow.log" | grep -vq grown; then case_ok
    else case_fail "$(cat "$WORK/grow.log")"; fi
fi
case_begin sweep_strong_batch_fixed
if plan fixed --ranks "1 4" --threads 16 --batch 32 --repeats 1 --stages 2 --strategies "data pipeline" \
    --strong-batch fixed --out "$WORK/g"; then
    if line fixed data_n4_strong_r1 | grep -q 'batch_size=32 ' && line fixed pipeline_n4_s2_strong_r1 | grep -q 'batch_size=32 ' &&
       grep -q 'point data_n4_strong: .*(per-rank share 8 < 16 threads: idle threads)' "$WORK/fixed.log" &&
       grep -q 'point pipeline_n4_s2_strong: .*(micro-batch 4 < 16 threads: idle threads)' "$WORK/fixed.log"; then case_ok
    else case_fail "$(cat "$WORK/fixed.log")"; fi
fi
# weak pipelines: global batch N x 32, S x 2 micro-batches (micro-batch 16);
# serial at batch 32 is their baseline
case_begin sweep_weak_pipeline_microbatches
if plan weak --ranks "2 4" --batch 32 --microbatches 2 --repeats 1 --scaling weak --out "$WORK/w"; then
    if line weak pipeline_n4_s2_weak_r1 | grep -q 'stages=2 --set microbatches=4 --set batch_size=128 ' &&
       line weak pipeline_n4_s4_weak_r1 | grep -q 'stages=4 --set microbatches=8 --set batch_size=128 ' &&
       line weak pipeline_n2_s2_weak_r1 | grep -q 'microbatches=4 --set batch_size=64 ' &&
       line weak serial_n1_weak_r1 | grep -q 'batch_size=32 ' && ! grep -q '_strong' "$WORK/weak.log" &&
       grep -q 'point pipeline_n4_s4_weak: .*8 micro-batches of 16' "$WORK/weak.log"; then case_ok
    else case_fail "$(cat "$WORK/weak.log")"; fi
fi
expect_fail sweep_weak_microbatch_refused "micro-batch B/M = 32/5: the per-rank batch 32 .* must be a multiple of --microbatches 5" \
    "$SWEEP" --dry-run --batch 32 --microbatches 5 --out "$WORK/w"
# the per-job directory: results/<SLURM_JOB_ID>/, else results/<UTC time>/ (planned, not created)
src=$(cd "$HCNN_SRCDIR" && pwd)
case_begin sweep_job_directory
existed=0
if [ -e "$src/results/12345" ]; then existed=1; fi
if SLURM_JOB_ID=12345 plan job --ranks "1 2" --repeats 1; then
    if line job serial_n1_r1 | grep -q "csv=$src/results/12345/runs/serial_n1_r1.csv " &&
       grep -q "would write $src/results/12345 .*, $src/results/12345/speedup_table.csv and $src/results/12345/plots/" "$WORK/job.log" &&
       { [ "$existed" -eq 1 ] || [ ! -e "$src/results/12345" ]; }; then case_ok
    else case_fail "$(cat "$WORK/job.log")"; fi
fi
case_begin sweep_time_directory
if env -u SLURM_JOB_ID "$SWEEP" --dry-run --ranks 1 --repeats 1 >"$WORK/utc.log" 2>&1 &&
   grep -qE "would write $src/results/20[0-9]{6}T[0-9]{6}Z " "$WORK/utc.log"; then case_ok
else case_fail "$(cat "$WORK/utc.log")"; fi
# a directory that holds a table is refused, unless --force
mkdir -p "$WORK/done"
: >"$WORK/done/speedup_table.csv"
expect_fail sweep_out_with_table_refused "--out $WORK/done already holds a speed-up table .*--force" \
    "$SWEEP" --dry-run --ranks 1 --out "$WORK/done"
case_begin sweep_out_force
if plan force --ranks 1 --out "$WORK/done" --force; then case_ok; fi
# --results RDIR: the table and plots in RDIR/metrics and RDIR/plots
case_begin sweep_results_dir
if plan resdir --ranks 1 --out "$WORK/o" --results "$WORK/r"; then
    if grep -q "would write $WORK/o .*, $WORK/r/metrics/speedup_table.csv and $WORK/r/plots/" "$WORK/resdir.log"; then case_ok
    else case_fail "$(cat "$WORK/resdir.log")"; fi
fi
expect_fail sweep_bad_option "unknown option" "$SWEEP" --dry-run --bogus
expect_fail sweep_bad_scaling "--scaling takes strong and/or weak, not 'medium'" "$SWEEP" --dry-run --scaling medium
expect_fail sweep_bad_strong_batch "--strong-batch is grow or fixed, not 'big'" "$SWEEP" --dry-run --strong-batch big
expect_fail sweep_bad_repeats "--repeats must be a positive integer, not '0'" "$SWEEP" --dry-run --repeats 0

# ---- one tiny real sweep: 1 and 2 ranks, 2 repeats, 1 epoch of 256 samples --------
# (everything in $WORK/real; the committed results/metrics and results/plots untouched)
sum_committed() { cat "$src/results/metrics/speedup_table.csv" "$src/results/plots/"*.png 2>/dev/null | cksum; }
case_begin sweep_real_tiny
if [ ! -x "$HCNN" ]; then
    case_skip "$HCNN is not built"
elif ! command -v mpirun >/dev/null; then
    case_skip "mpirun not found (Debian package openmpi-bin)"
else
    before=$(sum_committed)
    has_gp=0
    if command -v "$gp" >/dev/null 2>&1 && "$gp" -e 'set terminal pngcairo' >/dev/null 2>&1; then has_gp=1; fi
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
        timeout 150 "$SWEEP" --hcnn "$HCNN" --ranks "1 2" --repeats 2 --epochs 1 --timeout 60 \
        --extra "--set synthetic_train=256 --set synthetic_test=64" --out "$WORK/real" >"$WORK/real.log" 2>&1
    rc=$?
    RT=$WORK/real/speedup_table.csv
    # every row: 2 repeats and the provenance columns filled
    bad=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) k[$i] = i; next }
        { n++
          if ($(k["repeats"]) != 2) print $1 ": repeats " $(k["repeats"])
          for (c in want) if ($(k[c]) == "" || $(k[c]) == "unknown" && c != "cpu_model") print $1 ": " c " \"" $(k[c]) "\"" }
        BEGIN { split("git_commit cpu_model blas mpi_library", w, " "); for (i in w) want[w[i]] = 1 }
        END { if (n != 6) print n " rows, not 6" }' "$RT" 2>&1)
    if [ "$has_gp" -eq 1 ] && [ "$rc" -ne 0 ]; then case_fail "exit status $rc: $(tail -n 20 "$WORK/real.log")"
    elif [ ! -s "$RT" ]; then case_fail "no $RT: $(tail -n 20 "$WORK/real.log")"
    elif [ -n "$bad" ]; then case_fail "$bad"; sed 's/^/#   /' "$RT"
    elif ! grep -q '^git_commit=' "$WORK/real/provenance.txt" || ! grep -q '^run.data_n2_strong_r2.blas=' "$WORK/real/provenance.txt"; then
        case_fail "provenance.txt: $(cat "$WORK/real/provenance.txt")"
    elif [ "$(grep -c ' ok ' "$WORK/real/summary.txt")" -ne 12 ] || [ "$(wc -l <"$WORK/real/commands.txt")" -ne 12 ]; then
        case_fail "not 12 runs ok: $(cat "$WORK/real/summary.txt")"
    elif [ "$has_gp" -eq 1 ] && ! { png_ok "$WORK/real/plots/speedup.png" && png_ok "$WORK/real/plots/efficiency.png" &&
                                    png_ok "$WORK/real/plots/loss.png"; }; then
        case_fail "plots missing: $(ls "$WORK/real/plots" 2>&1)"
    elif [ "$(sum_committed)" != "$before" ]; then
        case_fail "the committed results/metrics or results/plots changed"
    else
        case_ok
    fi
fi

finish
