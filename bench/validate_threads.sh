#!/usr/bin/env bash
# hcnn plan's thread model (the node model of --node, docs/plan.md) against
# runs measured on this machine: a benchmark with its own report and
# target, not a test (make check asserts no duration).  For each model and
# each thread count T up to the machine's cores: predicted = hcnn plan
# --node here (this machine's cores, FMA peak, bandwidth and last-level
# cache, measured) pricing T threads from a measurement on ONE thread, as
# it prices a 64-core node from the few cores it runs on; measured = hcnn
# bench on T threads.  Target: within 20% at every T.  The same runs are
# the thread-scaling figures of docs/performance.md ("Threads on 16
# cores") and of the Winograd issue (bench/gpu_check.sh's cpu section runs
# this script on the GPU machine's 16-core host).
#   bench/validate_threads.sh [T ...]    (default 1 2 4 8 16 32 64, up to nproc)
#   MODELS="resnet18:64 lenet:256"       (model:batch; the default)
# Prints a table and as its last lines the points' result and
# "N passed, N failed"; exits 1 when a point misses.
. "${HCNN_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
cores=$(nproc)
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2 4 8 16 32 64)
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $cores cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
config_of() { case $1 in resnet18) echo configs/cifar_resnet18.yaml ;; lenet) echo configs/mnist_lenet.yaml ;;
              *) echo "unknown model '$1' (resnet18, lenet)" >&2; exit 2 ;; esac; }
echo "# model     batch threads  measured  predicted  error  (images/s; predicted from 1 thread)"
for mb in ${MODELS:-resnet18:64 lenet:256}; do
    model=${mb%%:*} batch=${mb##*:}
    cfg="$HCNN_SRCDIR/$(config_of "$model")"
    steps=(--warmup 5 --repeats 3 --steps 10)
    [ "$model" = resnet18 ] && steps=(--warmup 1 --repeats 3 --steps 2)
    for t in "${threads[@]}"; do
        [ "$t" -le "$cores" ] || continue
        timeout -k 5 300 "$HCNN" bench --config "$cfg" --set batch_size="$batch" --set threads="$t" \
            "${steps[@]}" >"$WORK/b_${model}_$t.log" 2>&1
        m=$(sed -n 's/^images_per_s=//p' "$WORK/b_${model}_$t.log" | tail -n 1)
        timeout -k 5 300 "$HCNN" plan --config "$cfg" --node here --threads "$t" --measure-threads 1 \
            --nodes 1 --scaling weak --batch "$batch" --stages 2 --no-plots -o "$WORK/p_${model}_$t" \
            >"$WORK/p_${model}_$t.log" 2>&1
        p=$(awk -F, '$1 == "weak" && $2 == 1 && $3 == "data" { print $9 }' "$WORK/p_${model}_$t/plan.csv" 2>/dev/null)
        err=$(awk -v m="${m:-0}" -v p="${p:-0}" 'BEGIN { if (m > 0 && p > 0) printf "%+.1f%%", (p / m - 1) * 100; else print "n/a" }')
        printf '# %-9s %5d %7d %9s %10s %6s\n' "$model" "$batch" "$t" "${m:-none}" "${p:-none}" "$err"
        case_begin "threads_${model}_$t"
        if awk -v m="${m:-0}" -v p="${p:-0}" 'BEGIN { exit !(m > 0 && p > 0 && p / m > 0.8 && p / m < 1.2) }'; then case_ok
        else case_fail "predicted ${p:-none} images/s, measured ${m:-none} ($err): $(tail -n 2 "$WORK/p_${model}_$t.log" "$WORK/b_${model}_$t.log")"; fi
    done
done
grep -h '^hcnn plan: node here' "$WORK"/p_*_1.log 2>/dev/null | head -n 1
echo "$T_PASSED passed, $T_FAILED failed"
finish
