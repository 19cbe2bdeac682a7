#!/usr/bin/env bash
# Two builds of hcnn, A (before a change) and B (after), side by side:
#   bench/compare_builds.sh same A B      the same checkpoint tensors, bit for bit
#   bench/compare_builds.sh speed A B     hcnn bench, alternated rounds
#
# same: LeNet-5 (MNIST's shape, synthetic data) and ResNet-18 (CIFAR-10's
# shape, synthetic data) trained for a few steps by each build, serially at
# 1 and 2 threads, data-parallel on 2 ranks and as a 2x2 pipeline (4 ranks),
# and the final checkpoints compared with `B diff --tol 0` (every parameter,
# statistic and momentum buffer).  Prints one line per case and, last,
# "N passed, N failed"; exits 1 when any differs.
#
# speed: ROUNDS (default 7) rounds, each `hcnn bench` of A then B (the order
# alternates from round to round), for LeNet-5 and ResNet-18 at each batch
# of BATCHES (default 64); prints each round's images/s and the ratio B/A,
# then per model and batch the medians of A's and B's images/s and of the
# per-round ratios, and "speed_ratio_<model>[_b<batch>]=R" (the suffix for
# batches other than 64).  The target of a change that must not slow
# anything: R >= 0.97.  The machine is shared: run nothing else meanwhile.
#
# Environment: THREADS (speed: default 2), ROUNDS, BATCHES, MODELS (default
# "lenet resnet18"), KERNELS (speed: blas_kernels, default env), A_SET and
# B_SET (speed: "key=value ..." set on A's and on B's runs only, e.g. one
# binary against itself: B_SET="precision=bf16" bench/compare_builds.sh
# speed ./hcnn ./hcnn), STEPS
# (same: default 6 for LeNet-5, 3 for ResNet-18), MPIRUN (default: mpirun
# as root, bounded).
set -uo pipefail
mode=${1:-}
A=${2:-}
B=${3:-}
if [ -z "$mode" ] || [ -z "$A" ] || [ -z "$B" ] || [ ! -x "$A" ] || [ ! -x "$B" ]; then
    echo "usage: bench/compare_builds.sh same|speed OLD_HCNN NEW_HCNN" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hcnn-builds.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
read -r -a MPIRUN <<<"${MPIRUN:-timeout -k 10 900 mpirun --oversubscribe --bind-to none}"
LENET=(--config "$here/configs/mnist_lenet.yaml" --set dataset=synthetic --set synthetic_train=512
       --set synthetic_test=64 --set batch_size=64)
RESNET=(--config "$here/configs/cifar_resnet18.yaml" --set dataset=synthetic --set synthetic_train=128
        --set synthetic_test=32 --set batch_size=32)
# the environment's BLAS kernels for both builds: a kernel choice by
# measurement could differ between them and change the bits
COMMON=(-q --set csv= --set blas_kernels=env --set epochs=1)

if [ "$mode" = same ]; then
    passed=0 failed=0
    run() { # build name ranks threads steps model-args... -- sets...
        local bin=$1 dir=$2 np=$3 t=$4 steps=$5
        shift 5
        local args=(train "${COMMON[@]}" --set threads="$t" --set max_steps="$steps"
                    --set checkpoint_dir="$dir" "$@")
        if [ "$np" -eq 1 ]; then
            OMP_NUM_THREADS=$t timeout -k 10 900 "$bin" "${args[@]}" >"$dir.log" 2>&1
        else
            "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS="$t" "$bin" "${args[@]}" >"$dir.log" 2>&1
        fi
    }
    case_() { # name ranks threads steps model-args and sets...
        local name=$1 np=$2 t=$3 steps=$4
        shift 4
        run "$A" "$work/$name-a" "$np" "$t" "$steps" "$@" && run "$B" "$work/$name-b" "$np" "$t" "$steps" "$@"
        local rc=$? line
        line=$("$B" diff "$work/$name-a/final.hcnn" "$work/$name-b/final.hcnn" --tol 0 2>&1 | tail -n 1)
        if [ $rc -eq 0 ] && "$B" diff "$work/$name-a/final.hcnn" "$work/$name-b/final.hcnn" --tol 0 >/dev/null 2>&1; then
            echo "same $name: $line"
            passed=$((passed + 1))
        else
            echo "DIFFERS $name (exit $rc): $line; $(tail -n 2 "$work/$name-a.log" "$work/$name-b.log" | tr '\n' ' ')"
            failed=$((failed + 1))
        fi
    }
    ls=${STEPS:-6} rs=${STEPS:-3}
    for t in 1 2; do
        case_ "lenet_serial_t$t" 1 "$t" "$ls" "${LENET[@]}"
        case_ "resnet18_serial_t$t" 1 "$t" "$rs" "${RESNET[@]}"
    done
    case_ lenet_data_2 2 1 "$ls" "${LENET[@]}" --set strategy=data
    case_ resnet18_data_2 2 1 "$rs" "${RESNET[@]}" --set strategy=data
    case_ lenet_pipeline_2x2 4 1 "$ls" "${LENET[@]}" --set strategy=pipeline --set stages=2 --set microbatches=2
    case_ resnet18_pipeline_2x2 4 1 "$rs" "${RESNET[@]}" --set strategy=pipeline --set stages=2 --set microbatches=2
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit
fi

if [ "$mode" != speed ]; then
    echo "bench/compare_builds.sh: unknown mode '$mode' (same or speed)" >&2
    exit 2
fi
rounds=${ROUNDS:-7}
threads=${THREADS:-2}
kernels=${KERNELS:-env}
sets() { # "k=v k2=v2" -> --set k=v --set k2=v2
    local kv
    for kv in $1; do printf '%s\n' --set "$kv"; done
}
mapfile -t a_set < <(sets "${A_SET:-}")
mapfile -t b_set < <(sets "${B_SET:-}")
rate() { # bin model-args...: images/s of one hcnn bench
    local bin=$1
    shift
    OMP_NUM_THREADS=$threads "$bin" bench "$@" --set threads="$threads" --set blas_kernels="$kernels" \
        --warmup 2 --repeats 3 --steps 3 2>/dev/null | sed -n 's/^images_per_s=//p' | tail -n 1
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $threads threads, blas_kernels $kernels, A_SET '${A_SET:-}', B_SET '${B_SET:-}', load $(cut -d' ' -f1-3 /proc/loadavg)"
for model in ${MODELS:-lenet resnet18}; do
    for batch in ${BATCHES:-64}; do
        if [ "$model" = lenet ]; then args=(--config "$here/configs/mnist_lenet.yaml" --set batch_size="$batch")
        else args=(--config "$here/configs/cifar_resnet18.yaml" --set batch_size="$batch"); fi
        ratios=() as=() bs=()
        for r in $(seq 1 "$rounds"); do
            if [ $((r % 2)) -eq 1 ]; then a=$(rate "$A" "${args[@]}" "${a_set[@]}"); b=$(rate "$B" "${args[@]}" "${b_set[@]}")
            else b=$(rate "$B" "${args[@]}" "${b_set[@]}"); a=$(rate "$A" "${args[@]}" "${a_set[@]}"); fi
            q=$(awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN { if (a > 0) printf "%.4f", b / a; else print "nan" }')
            echo "round=$r model=$model batch=$batch a_images_per_s=${a:-none} b_images_per_s=${b:-none} ratio=$q"
            ratios+=("$q") as+=("${a:-0}") bs+=("${b:-0}")
        done
        suffix=$([ "$batch" = 64 ] || echo "_b$batch")
        echo "median model=$model batch=$batch a_images_per_s=$(printf '%s\n' "${as[@]}" | median) b_images_per_s=$(printf '%s\n' "${bs[@]}" | median)"
        echo "speed_ratio_$model$suffix=$(printf '%s\n' "${ratios[@]}" | median)"
    done
done
