#!/usr/bin/env bash
# The results tooling on canned per-epoch CSV files (no training):
# results/plot.sh computes the speed-up table (baselines, strong and weak
# scaling, median epoch time, columns found by name), draws the PNGs when
# gnuplot is there, and refuses a CSV that lacks a column; results/sweep.sh
# --dry-run plans the runs of a sweep.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
PLOT="$HCNN_SRCDIR/results/plot.sh"
SWEEP="$HCNN_SRCDIR/results/sweep.sh"
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
want=run_id,strategy,ranks,stages,replicas,threads,batch_size,epochs,time_per_epoch_s,images_per_s,speedup,efficiency,scaling
if [ "$(head -n 1 "$TABLE")" = "$want" ] && [ "$(wc -l <"$TABLE")" -eq 9 ] &&
   [ "$(sed -n 2p "$TABLE" | cut -d, -f1)" = serial_n1 ]; then case_ok
else case_fail "$(cat "$TABLE")"; fi

check serial_median_and_dedup  serial_n1 epochs 3  serial_n1 time_per_epoch_s 8.2  serial_n1 images_per_s 225.33 \
    serial_n1 speedup 1  serial_n1 efficiency 1  serial_n1 scaling strong
check data_strong_2_ranks      data_n2 speedup 1.75  data_n2 efficiency 0.875  data_n2 scaling strong  data_n1 speedup 1
check data_strong_4_ranks      data_n4 speedup 2.8  data_n4 efficiency 0.7  data_n4 time_per_epoch_s 3
check data_weak_4_ranks        data_n4_weak scaling weak  data_n4_weak images_per_s 878.4 \
    data_n4_weak speedup 3.6  data_n4_weak efficiency 0.9
check other_batch_no_speedup   data_n2_b48 scaling other  data_n2_b48 speedup ""  data_n2_b48 efficiency ""
check pipeline_serial_baseline pipe_n2_s2 speedup 1.6  pipe_n2_s2 efficiency 0.8  pipe_n2_s2 stages 2 \
    pipe_n2_s2 epochs 1  pipe_n4_s2 speedup 2  pipe_n4_s2 efficiency 0.5  pipe_n4_s2 replicas 2

# --warmup 1: the first epoch of runs with more than one is left out
case_begin warmup_table_written
if "$PLOT" --no-plots --warmup 1 -o "$WORK/warm" "$C"/*.csv >"$WORK/warm.log" 2>&1; then case_ok
else case_fail "$(cat "$WORK/warm.log")"; fi
TABLE=$WORK/warm/metrics/speedup_table.csv
check warmup_skips_first_epoch serial_n1 time_per_epoch_s 8.1  serial_n1 images_per_s 253  serial_n1 epochs 3 \
    pipe_n2_s2 time_per_epoch_s 5.125  pipe_n2_s2 speedup 1.5805
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
    case_begin plots_single_run_single_epoch
    if "$PLOT" -o "$WORK/one" "$C/pipe_n4_s2.csv" >"$WORK/one.log" 2>&1 && png_ok "$WORK/one/plots/loss.png"; then
        case_ok
    else case_fail "$(cat "$WORK/one.log")"; fi
else
    for p in plots_written png_speedup png_efficiency png_loss png_accuracy plots_single_run_single_epoch; do
        case_begin "$p"
        case_skip "gnuplot with the pngcairo terminal is not installed (apt-get install gnuplot-nox)"
    done
fi

# ---- the sweep's plan (nothing is run) ------------------------------------------
case_begin sweep_dry_run_plan
if "$SWEEP" --dry-run --ranks "1 2 4" --epochs 1 --out "$WORK/sweep" >"$WORK/sweep.log" 2>&1; then
    plan=$(grep -o 'csv=[^ ]*' "$WORK/sweep.log" | sed 's,.*/,,' | tr '\n' ' ')
    want="serial_n1.csv data_n1_strong.csv data_n2_strong.csv data_n4_strong.csv data_n2_weak.csv data_n4_weak.csv pipeline_n2_s2_strong.csv pipeline_n4_s4_strong.csv pipeline_n4_s2_strong.csv "
    if [ "$plan" = "$want" ] && grep 'data_n4_weak' "$WORK/sweep.log" | grep -q 'batch_size=128' &&
       grep 'pipeline_n4_s2_strong' "$WORK/sweep.log" | grep -q -- '-np 4 .*strategy=pipeline.*stages=2'; then
        case_ok
    else case_fail "plan: $plan"; sed 's/^/#   /' "$WORK/sweep.log"; fi
else
    case_fail "$(cat "$WORK/sweep.log")"
fi
expect_fail sweep_bad_option "unknown option" "$SWEEP" --dry-run --bogus

finish
