#!/usr/bin/env bash
# hcnn plan's validation: predicted images/s against runs measured here, a
# benchmark with its own report and target (make validate), not a test: a
# shared machine's load moves the measured side, and make check asserts no
# duration.  The network file comes from --calibrate-network on 2 ranks of
# this host (latency, the allreduce's bandwidth, the reduction rate, the
# slowdown when both cores compute); the compute from hcnn plan's own
# measurement.  Target: predicted within 15% of measured (the best of 2
# runs, the first epoch left out; a miss is tried once more from scratch,
# and that attempt decides) at 1 rank, at 2 ranks for data (bucketed
# allreduce overlapped with backward, weak scaling) and pipeline (2
# stages, weak and strong); the 4-rank points and the 2-rank data
# strong-scaling point are printed with their error (docs/plan.md says why
# they are not held to 15% on a 2-core machine).  Prints the table (for
# results/README.md) and as its last lines the held points' result and
# "N passed, N failed"; exits 1 when a held point misses.
#   bench/validate_plan.sh     (in the build directory, or HCNN=path/to/hcnn)
. "${HCNN_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
CFG="$HCNN_SRCDIR/configs/plan_validate.yaml"
MPIRUN=(timeout --kill-after=10 240 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

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
    "$HCNN" plan --config "$CFG" --node here --nodes 1,2,4 --threads 1 --host-cores "$(nproc)" --network "$WORK/net.txt" \
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
    if [ "$held" = yes ] && ! within "$m" "$p"; then
        again=" (first attempt $m vs $p, $(error_of "$m" "$p"); tried again)"
        predict "$WORK/pv_$name"
        p=$(pred "$sc" "$n" "$lay" "$WORK/pv_$name")
        m=$(run "$name" "$n" "$@")
    fi
    printf '# %-22s %5d %9s %10s %6s  %s%s\n' "$sc $lay" "$n" "$m" "${p:-none}" "$(error_of "$m" "$p")" \
        "$held" "$again"
    if [ "$held" = yes ]; then
        case_begin "validate_${name}"
        if within "$m" "$p"; then case_ok
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
echo "$T_PASSED passed, $T_FAILED failed"
finish
