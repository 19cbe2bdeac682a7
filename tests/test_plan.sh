#!/usr/bin/env bash
# hcnn plan: its options and refusals, and its validation against runs
# measured here.  The network file comes from --calibrate-network on 2
# ranks of this host (latency, the allreduce's bandwidth, the reduction
# rate, the slowdown when both cores compute); the compute from hcnn
# plan's own measurement.  Predicted images/s must be within 15% of the
# measured (the best of 2 runs, the first epoch left out; a miss is tried
# once more from scratch, and that attempt decides) at 1 rank, at 2 ranks
# for data (bucketed allreduce overlapped with backward, weak scaling) and
# pipeline (2 stages, weak and strong); the 4-rank points and the 2-rank
# data strong-scaling point are printed with their error
# (docs/plan.md says why they are not held to 15% on a 2-core machine).
# The table goes into the log for results/README.md.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
CFG="$HCNN_SRCDIR/configs/plan_validate.yaml"
MPIRUN=(timeout --kill-after=10 240 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)

expect_fail plan_needs_config "missing --config" "$HCNN" plan
expect_fail plan_bad_nodes "--nodes '1,x': expected a comma-separated list" "$HCNN" plan --config "$CFG" --nodes 1,x
expect_fail plan_bad_network "--network 'nowhere': neither a preset" "$HCNN" plan --config "$CFG" --network nowhere --no-plots -o "$WORK/x"
printf 'alpha_us = 1\nbandwidth_gbs = -3\nreduce_gbs = 5\n' >"$WORK/bad.net"
expect_fail plan_bad_network_file "bad.net:2: bandwidth_gbs: expected a positive number" "$HCNN" plan --config "$CFG" --network "$WORK/bad.net" --no-plots -o "$WORK/x"
expect_fail plan_calibrate_needs_two_ranks "run it under mpirun with 2 ranks" "$HCNN" plan --calibrate-network "$WORK/n.txt"
expect_fail plan_weak_micro_divides "not divisible by --microbatches 5" "$HCNN" plan --config "$CFG" --microbatches 5 --no-plots -o "$WORK/x"

# ---- the projection on the default targets: table, CSV, plots, a verdict ----
case_begin plan_table_csv_plots
"$HCNN" plan --config "$HCNN_SRCDIR/configs/synthetic_small.yaml" --nodes 1,2,4,8 --steps 2 \
    -o "$WORK/p" >"$WORK/p.log" 2>&1
rc=$?
rows=$(grep -c '^weak \|^strong ' "$WORK/p.log")
if [ $rc -ne 0 ]; then case_fail "exit $rc: $(tail -n 3 "$WORK/p.log")"
elif [ "$rows" -ne 20 ] || [ "$(($(wc -l <"$WORK/p/plan.csv") - 1))" -ne 20 ]; then
    case_fail "want 20 rows (data, 2x, 4x, 8x pipelines at 1..8 nodes, weak and strong): $rows"
elif ! grep -q '^hcnn plan: weak scaling at 8 nodes: recommended .*largest loss' "$WORK/p.log"; then
    case_fail "no verdict: $(tail -n 3 "$WORK/p.log")"
elif [ "$(awk -F, 'NR > 1 && $1 == "weak" && $2 == 8 && $18 == 1' "$WORK/p/plan.csv" | wc -l)" -ne 1 ]; then
    case_fail "not one recommended layout at 8 nodes"
elif command -v "${GNUPLOT:-gnuplot}" >/dev/null 2>&1 && [ ! -s "$WORK/p/plan_weak.png" ]; then
    case_fail "no plan_weak.png"
else case_ok; fi
# strong scaling grows the global batch so that every thread has a sample
case_begin plan_strong_batch_grown
g=$(awk -F, 'NR > 1 && $1 == "strong" && $2 == 8 && $3 == "data" { print $7, $8 }' "$WORK/p/plan.csv")
if [ "$g" = "512 64" ]; then case_ok; else case_fail "8 nodes x 64 threads: global batch, pass = '$g', want '512 64'"; fi

# the gradient buckets' algorithm: hcnn sets libnbc's Rabenseifner unless
# the environment chooses (the user's setting wins); the plan prices the same
IAR=OMPI_MCA_coll_libnbc_iallreduce_algorithm
case_begin plan_iallreduce_priced
env -u $IAR "$HCNN" plan --config "$HCNN_SRCDIR/configs/synthetic_small.yaml" --nodes 1,32 --stages 2 \
    --scaling weak --steps 2 --no-plots -o "$WORK/ar3" >"$WORK/ar3.log" 2>&1
env $IAR=binomial "$HCNN" plan --config "$HCNN_SRCDIR/configs/synthetic_small.yaml" --nodes 1,32 \
    --stages 2 --scaling weak --steps 2 --no-plots -o "$WORK/ar2" >"$WORK/ar2.log" 2>&1
t3=$(awk -F, '$1 == "weak" && $2 == 32 && $3 == "data" { print $13 }' "$WORK/ar3/plan.csv" 2>/dev/null)
t2=$(awk -F, '$1 == "weak" && $2 == 32 && $3 == "data" { print $13 }' "$WORK/ar2/plan.csv" 2>/dev/null)
if ! grep -q "libnbc rabenseifner ($IAR=3)" "$WORK/ar3.log"; then case_fail "default: $(head -n 1 "$WORK/ar3.log")"
elif ! grep -q "libnbc binomial tree" "$WORK/ar2.log"; then case_fail "binomial: $(head -n 1 "$WORK/ar2.log")"
elif ! awk -v a="${t3:-0}" -v b="${t2:-0}" 'BEGIN { exit !(a > 0 && b > a * 1.2) }'; then
    case_fail "32 ranks: binomial allreduce ${t2:-none} ms should cost more than rabenseifner's ${t3:-none} ms"
else case_ok; fi
expect_fail plan_iallreduce_bad_env "$IAR='fastest': expected 0-4" env $IAR=fastest "$HCNN" plan --config "$CFG" --no-plots -o "$WORK/x"
case_begin train_sets_iallreduce
env -u $IAR "${MPIRUN[@]}" -np 2 "$HCNN" train --config "$CFG" --set epochs=1 --set strategy=data \
    >"$WORK/ar_train3.log" 2>&1
env $IAR=2 "${MPIRUN[@]}" -np 2 "$HCNN" train --config "$CFG" --set epochs=1 --set strategy=data \
    >"$WORK/ar_train2.log" 2>&1
if ! grep -q "MPI_Iallreduce with $IAR=3;" "$WORK/ar_train3.log"; then case_fail "default: $(grep -m1 'gradient allreduce' "$WORK/ar_train3.log")"
elif ! grep -q "MPI_Iallreduce with $IAR=2;" "$WORK/ar_train2.log"; then case_fail "the user's 2: $(grep -m1 'gradient allreduce' "$WORK/ar_train2.log")"
else case_ok; fi

# ---- validation ----------------------------------------------------------------
"${MPIRUN[@]}" -np 2 "$HCNN" plan --calibrate-network "$WORK/net.txt" --config "$CFG" >"$WORK/cal.log" 2>&1
case_begin plan_calibrate_network
if grep -q '^host_contention = ' "$WORK/net.txt" 2>/dev/null; then case_ok; else case_fail "$(cat "$WORK/cal.log")"; fi
grep -v '^#' "$WORK/net.txt" 2>/dev/null | sed 's/^/# network: /' 

run() { # name ranks key=value...: images/s of the best of 2 runs (epochs 2.. averaged)
    local name=$1 np=$2 best=0 k v
    shift 2
    local a=(train --config "$CFG" -q --set threads=1)
    for kv in "$@"; do a+=(--set "$kv"); done
    for k in 1 2; do
        rm -f "$WORK/$name.csv"
        if [ "$np" -eq 1 ]; then
            timeout 120 "$HCNN" "${a[@]}" --set csv="$WORK/$name.csv" >"$WORK/$name.log" 2>&1
        else
            "${MPIRUN[@]}" -np "$np" "$HCNN" "${a[@]}" --set csv="$WORK/$name.csv" >"$WORK/$name.log" 2>&1
        fi
        v=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
                     NR > 2 { s += $(c["images_per_s"]); n++ } END { if (n) printf "%.1f", s / n; else print 0 }' \
                     "$WORK/$name.csv" 2>/dev/null)
        best=$(awk -v a="$best" -v b="${v:-0}" 'BEGIN { print (b > a) ? b : a }')
    done
    echo "$best"
}
predict() { # dir: the plan of the validation points, its compute measured now
    "$HCNN" plan --config "$CFG" --nodes 1,2,4 --threads 1 --host-cores "$(nproc)" --network "$WORK/net.txt" \
        --batch 64 --microbatches 2 --stages 2 --set bucket_mb=1 --no-plots -o "$1" >"$1.log" 2>&1
}
predict "$WORK/pv"
pred() { awk -F, -v s="$1" -v n="$2" -v l="$3" '$1 == s && $2 == n && $3 == l { print $9 }' "${4:-$WORK/pv}/plan.csv"; }
echo "# validation (configs/plan_validate.yaml, 1 thread per rank, $(nproc) cores; images/s):"
echo "# point                 ranks  measured  predicted  error  held to 15%"
within() { awk -v m="$1" -v p="${2:-0}" 'BEGIN { exit !(m > 0 && p > 0 && p / m > 0.85 && p / m < 1.15) }'; }
error_of() { awk -v m="$1" -v p="${2:-0}" 'BEGIN { if (m > 0) printf "%+.1f%%", (p / m - 1) * 100; else print "n/a" }'; }
check_point() { # name scaling ranks layout held runargs...
    local name=$1 sc=$2 n=$3 lay=$4 held=$5 again=""
    shift 5
    local m p
    m=$(run "$name" "$n" "$@")
    p=$(pred "$sc" "$n" "$lay")
    # the machine is shared and its speed drifts between the prediction's
    # measurement and the runs: a held point outside the band is tried once
    # more from scratch (its compute measured again, 2 more runs), and that
    # second attempt decides
    if [ "$held" = yes ] && [ -z "${ASAN_OPTIONS:-}" ] && ! within "$m" "$p"; then
        again=" (first attempt $m vs $p, $(error_of "$m" "$p"); tried again)"
        predict "$WORK/pv_$name"
        p=$(pred "$sc" "$n" "$lay" "$WORK/pv_$name")
        m=$(run "$name" "$n" "$@")
    fi
    printf '# %-22s %5d %9s %10s %6s  %s%s\n' "$sc $lay" "$n" "$m" "${p:-none}" "$(error_of "$m" "$p")" \
        "$held" "$again"
    if [ "$held" = yes ]; then
        case_begin "validate_${name}"
        if [ -n "${ASAN_OPTIONS:-}" ]; then
            case_skip "sanitizer build (tests/sanitizers/run.sh): instrumented timings are not held to 15%"
        elif within "$m" "$p"; then case_ok
        else case_fail "predicted ${p:-none} images/s, measured $m ($(error_of "$m" "$p")$again; $(tail -n 2 "$WORK/$name.log"))"; fi
    fi
}
check_point serial_1 weak 1 data yes strategy=serial
check_point data_2_weak weak 2 data yes strategy=data batch_size=128 bucket_mb=1
check_point pipeline_2_weak weak 2 pipeline_2x1 yes strategy=pipeline stages=2 microbatches=4 batch_size=128
check_point pipeline_2_strong strong 2 pipeline_2x1 yes strategy=pipeline stages=2 microbatches=2 batch_size=64
check_point data_2_strong strong 2 data no strategy=data batch_size=64
check_point data_4_weak weak 4 data no strategy=data batch_size=256
check_point pipeline_4_weak weak 4 pipeline_2x2 no strategy=pipeline stages=2 microbatches=4 batch_size=256
finish
