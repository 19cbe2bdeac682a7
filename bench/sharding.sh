#!/usr/bin/env bash
# optimizer_sharding: ranks against none (docs/config-reference.md), hcnn
# bench under mpirun, alternated rounds:
#   bench/sharding.sh [HCNN]
# For each model of MODELS (default "lenet resnet18") and each per-rank
# batch of BATCHES (default "1 4 32"), ROUNDS (default 7) rounds of one
# `hcnn bench` unsharded and one sharded (the order alternates), on NP
# ranks (default 2) of THREADS threads (default 1); prints each round's
# step time and the optimiser's and communication's shares of the step
# (hcnn bench's "shares of the step" line: the optimiser's sweep, the
# all-gathers' wait counted as communication), then per model and batch the
# medians and "sharded_over_none_<model>_b<batch>=R", the median of the
# per-round ratios of step times (< 1: sharding is faster).
# Environment: NP, THREADS, ROUNDS, MODELS, BATCHES, KERNELS (blas_kernels,
# default env), STEPS (timed steps per repeat, default 3), MPIRUN.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
HCNN=${1:-$here/hcnn}
if [ ! -x "$HCNN" ]; then
    echo "usage: bench/sharding.sh [HCNN]  (no executable $HCNN: run make first)" >&2
    exit 2
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
read -r -a MPIRUN <<<"${MPIRUN:-timeout -k 10 900 mpirun --oversubscribe --bind-to none}"
np=${NP:-2} threads=${THREADS:-1} rounds=${ROUNDS:-7} steps=${STEPS:-3} kernels=${KERNELS:-env}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { sed -n "s/.*[ #]$1=\([0-9.e+-]*\).*/\1/p" | tail -n 1; }
one() { # sharding model-config per-rank-batch: "step_ms optimizer_share communication_share"
    local out
    out=$("${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS="$threads" "$HCNN" bench --config "$2" \
        --set strategy=data --set batch_size=$(($3 * np)) --set threads="$threads" \
        --set blas_kernels="$kernels" --set optimizer_sharding="$1" \
        --warmup 2 --repeats 3 --steps "$steps" 2>/dev/null)
    local shares
    shares=$(grep '^# shares of the step:' <<<"$out")
    echo "$(grep '^# step_ms=' <<<"$out" | field step_ms) $(field optimizer <<<"$shares") $(field communication <<<"$shares")"
}
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $np ranks x $threads threads, blas_kernels $kernels, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for model in ${MODELS:-lenet resnet18}; do
    if [ "$model" = lenet ]; then cfg=$here/configs/mnist_lenet.yaml; else cfg=$here/configs/cifar_resnet18.yaml; fi
    for batch in ${BATCHES:-1 4 32}; do
        ratios=() a_ms=() b_ms=() a_opt=() b_opt=() a_com=() b_com=()
        for r in $(seq 1 "$rounds"); do
            if [ $((r % 2)) -eq 1 ]; then read -r am ao ac < <(one none "$cfg" "$batch"); read -r bm bo bc < <(one ranks "$cfg" "$batch")
            else read -r bm bo bc < <(one ranks "$cfg" "$batch"); read -r am ao ac < <(one none "$cfg" "$batch"); fi
            q=$(awk -v a="${am:-0}" -v b="${bm:-0}" 'BEGIN { if (a > 0) printf "%.4f", b / a; else print "nan" }')
            echo "round=$r model=$model batch_per_rank=$batch none_step_ms=${am:-none} none_optimizer=${ao:-none} none_communication=${ac:-none} ranks_step_ms=${bm:-none} ranks_optimizer=${bo:-none} ranks_communication=${bc:-none} ratio=$q"
            ratios+=("$q") a_ms+=("${am:-0}") b_ms+=("${bm:-0}") a_opt+=("${ao:-0}") b_opt+=("${bo:-0}")
            a_com+=("${ac:-0}") b_com+=("${bc:-0}")
        done
        m() { printf '%s\n' "$@" | median; }
        echo "median model=$model batch_per_rank=$batch none_step_ms=$(m "${a_ms[@]}") none_optimizer=$(m "${a_opt[@]}") none_communication=$(m "${a_com[@]}") ranks_step_ms=$(m "${b_ms[@]}") ranks_optimizer=$(m "${b_opt[@]}") ranks_communication=$(m "${b_com[@]}") ratio_range=$(printf '%s\n' "${ratios[@]}" | sort -g | sed -n '1p;$p' | paste -sd-)"
        echo "sharded_over_none_${model}_b$batch=$(m "${ratios[@]}")"
    done
done
