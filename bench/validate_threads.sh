#!/usr/bin/env bash
# hcnn plan's thread model (the node model of --node and the pieces each
# pass offers the threads, docs/plan.md) against runs measured on this
# machine: a benchmark with its own report and target, not a test (make
# check asserts no duration).  For each model, batch and thread count T up
# to the machine's cores: predicted = hcnn plan --node here (this machine's
# cores, FMA peak, bandwidth, last-level cache and barrier, measured)
# pricing T threads from a measurement on ONE thread, as it prices a
# 64-core node from the few cores it runs on; measured = hcnn bench on T
# threads.  Each point is ROUNDS alternated rounds of both (the machine is
# shared: its speed drifts), their medians compared.  Target: within 20% at
# every point.
#
# The small batches (1 to 8 images) are the per-pass pricing of a node
# with fewer samples than threads, in the only form 2 cores allow: their
# passes run on 2 threads cut into the pieces the backend makes of one to
# eight images (images, output-row blocks, input-channel blocks, Winograd
# tiles x channel blocks, batch-norm planes), priced from one thread.  The
# same runs at 64 and 256 images are the thread-scaling figures of
# docs/performance.md ("Threads on 16 cores"); bench/gpu_check.sh's cpu
# section runs this script on the GPU machine's 16-core host.
#   bench/validate_threads.sh [T ...]    (default 1 2 4 8 16 32 64, up to nproc)
#   MODELS="resnet18:64 lenet:256 resnet18:1 resnet18:2 resnet18:4 resnet18:8 lenet:8"
#                                        (model:batch; the default)
#   ROUNDS=3                             (alternated rounds a point; medians)
#   VALIDATE_LOGS=DIR                    (keep every run's log and plan.csv there)
#   WAIT_IDLE=85 WAIT_MAX=600            (before each round, wait up to WAIT_MAX s for the
#                                        CPUs to be WAIT_IDLE% idle over 5 s; the table
#                                        says how many rounds ran without that)
#   OTHERS_MAX=15 TRIES=3                (a round in which other processes took more than
#                                        OTHERS_MAX% of the CPUs, during the run or the
#                                        plan's measurement, is run again, up to TRIES
#                                        times; the table gives each kept round's share)
# Prints a table and as its last lines the points' result and
# "N passed, N failed"; exits 1 when a point misses.
. "${HCNN_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/tests/lib.sh"
# (the machine's: tests/lib.sh sets OMP_NUM_THREADS=2 where it is unset,
# which nproc would report instead; on the GPU machine's 16 cores,
# 2026-11-30, the sweep then ran no point)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1 2 4 8 16 32 64)
rounds=${ROUNDS:-3}
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $cores cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%d), $rounds alternated rounds a point"
config_of() { case $1 in resnet18) echo configs/cifar_resnet18.yaml ;; lenet) echo configs/mnist_lenet.yaml ;;
              *) echo "unknown model '$1' (resnet18, lenet)" >&2; exit 2 ;; esac; }
# CPU idle % over 5 s (/proc/stat); waits up to WAIT_MAX s for WAIT_IDLE %
idle_pct() {
    local a b
    a=($(head -n 1 /proc/stat)); sleep 5; b=($(head -n 1 /proc/stat))
    local total=0 i
    for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
    echo $(( total > 0 ? 100 * (b[4] + b[5] - a[4] - a[5]) / total : 0 ))
}
noisy=0
wait_idle() {
    [ -n "${WAIT_IDLE:-}" ] || return 0
    local start=$SECONDS
    while [ "$(idle_pct)" -lt "$WAIT_IDLE" ]; do
        [ $((SECONDS - start)) -lt "${WAIT_MAX:-600}" ] || { noisy=$((noisy + 1)); return 0; }
    done
}
# CPU ticks of this shell's finished children (bash's times: user and system)
# (times runs in this shell, not in a command substitution: a subshell's own
# children's times start at zero)
child_ticks() {
    times >"$WORK/times"
    tail -n 1 "$WORK/times" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } printf "%d", t * 100 }'
}
# runs "$@"; OTHERS: % of all CPUs' time other processes used meanwhile
run_counted() {
    local a b c0 c1 total=0 idle i
    a=($(head -n 1 /proc/stat)); child_ticks >"$WORK/c0"
    "$@"
    b=($(head -n 1 /proc/stat)); child_ticks >"$WORK/c1"
    c0=$(cat "$WORK/c0") c1=$(cat "$WORK/c1")
    for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
    idle=$((b[4] + b[5] - a[4] - a[5]))
    OTHERS=$(( total > 0 ? 100 * (total - idle - (c1 - c0)) / total : 0 ))
    [ "$OTHERS" -ge 0 ] || OTHERS=0
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "# model     batch threads  measured  predicted  error  (images/s, medians; predicted from 1 thread; each round's measured/predicted [other processes' share of the CPUs during each])"
for mb in ${MODELS:-resnet18:64 lenet:256 resnet18:1 resnet18:2 resnet18:4 resnet18:8 lenet:8}; do
    model=${mb%%:*} batch=${mb##*:}
    cfg="$HCNN_SRCDIR/$(config_of "$model")"
    # timed images a repeat: enough for a few ms of work at small batches
    if [ "$model" = resnet18 ]; then
        steps=$((32 / batch)); [ "$steps" -ge 2 ] || steps=2
        bench=(--warmup 1 --repeats 3 --steps "$steps")
    else
        steps=$((2560 / batch)); [ "$steps" -ge 10 ] || steps=10
        bench=(--warmup 5 --repeats 3 --steps "$steps")
    fi
    # the plan's timed steps a measurement: more for short passes
    psteps=5; [ "$batch" -le 8 ] && psteps=15
    for t in "${threads[@]}"; do
        [ "$t" -le "$cores" ] || continue
        ms=() ps=() per=""
        for r in $(seq 1 "$rounds"); do
            tag="${model}_${batch}_${t}_$r"
            for try in $(seq 1 "${TRIES:-3}"); do
                wait_idle
                run_counted timeout -k 5 300 "$HCNN" bench --config "$cfg" --set batch_size="$batch" \
                    --set threads="$t" "${bench[@]}" >"$WORK/b_$tag.log" 2>&1
                ob=$OTHERS
                m=$(sed -n 's/^images_per_s=//p' "$WORK/b_$tag.log" | tail -n 1)
                run_counted timeout -k 5 300 "$HCNN" plan --config "$cfg" --node here --threads "$t" \
                    --measure-threads 1 --nodes 1 --scaling weak --batch "$batch" --stages 2 \
                    --microbatches 1 --steps "$psteps" --no-plots -o "$WORK/p_$tag" >"$WORK/p_$tag.log" 2>&1
                op=$OTHERS
                p=$(awk -F, '$1 == "weak" && $2 == 1 && $3 == "data" { print $9 }' "$WORK/p_$tag/plan.csv" 2>/dev/null)
                [ "$ob" -gt "${OTHERS_MAX:-15}" ] || [ "$op" -gt "${OTHERS_MAX:-15}" ] || break
            done
            [ -n "$m" ] && ms+=("$m")
            [ -n "$p" ] && ps+=("$p")
            per="$per ${m:-none}/${p:-none} [$ob/$op%]"
        done
        m=$(printf '%s\n' "${ms[@]}" | median) p=$(printf '%s\n' "${ps[@]}" | median)
        err=$(awk -v m="${m:-0}" -v p="${p:-0}" 'BEGIN { if (m > 0 && p > 0) printf "%+.1f%%", (p / m - 1) * 100; else print "n/a" }')
        printf '# %-9s %5d %7d %9s %10s %6s  (%s )\n' "$model" "$batch" "$t" "${m:-none}" "${p:-none}" "$err" "$per"
        case_begin "threads_${model}_b${batch}_$t"
        if awk -v m="${m:-0}" -v p="${p:-0}" 'BEGIN { exit !(m > 0 && p > 0 && p / m > 0.8 && p / m < 1.2) }'; then case_ok
        else case_fail "predicted ${p:-none} images/s, measured ${m:-none} ($err): $(tail -n 2 "$WORK/p_$tag.log" "$WORK/b_$tag.log")"; fi
    done
done
grep -h '^hcnn plan: node here' "$WORK"/p_*_1_1.log 2>/dev/null | head -n 1
[ -z "${WAIT_IDLE:-}" ] || echo "# rounds started without ${WAIT_IDLE}% idle CPUs after ${WAIT_MAX:-600} s of waiting: $noisy"
[ -z "${VALIDATE_LOGS:-}" ] || { mkdir -p "$VALIDATE_LOGS" && cp -r "$WORK"/. "$VALIDATE_LOGS"/; }
echo "$T_PASSED passed, $T_FAILED failed"
finish
