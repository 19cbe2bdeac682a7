#!/usr/bin/env bash
# How far is one ResNet-18 training step of hcnn from float64, per
# convolution algorithm?  configs/cifar_resnet18.yaml on a random CIFAR-10
# set of exactly B images (batch_size B: the one step sees all of them),
# from the same random float32 parameters (conv and fc weights He normal,
# batch-norm gamma 1 + 0.1 N(0,1), beta and fc bias 0.1 N(0,1); hcnn import:
# step 0, zero momentum), one step of SGD (lr 0.1, momentum 0.9, Nesterov,
# weight decay 5e-4 on every parameter, constant rate, no augmentation)
# with each conv_algo: batched, per_thread (the float32 im2col plans),
# winograd_f2, winograd_f4 (every 3x3 stride-1 layer by F(2x2,3x3),
# F(4x4,3x3)) and auto (the plan's per-layer choice).  Each step's update
# Δ (parameters after - before) is compared with the same step in float64
# numpy (bench/winograd_precision.py), per parameter tensor:
#   e = max|Δ_algo - Δ_ref| / max|Δ_ref|,  e2 = ||Δ_algo - Δ_ref|| / ||Δ_ref||
#
#   bench/winograd_precision.sh [--batches "2 8 16"] [--out DIR] [--seed S]
#                               [--threads T] [--precision fp32|bf16|"fp32 bf16"]
#
# --precision bf16: each algorithm also with precision bf16 (every GEMM's
# inputs rounded to bfloat16; on a CPU that runs it), its lines named
# bf16_<algo>; the FP32 im2col plans always run (the reference's check).
#
# Prints, per batch size and algorithm, one line (key=value):
#   batch=16 algo=winograd_f4 ref=float64 conv_worst= conv_median=
#     worst_tensor= conv_l2_worst= conv_l2_median= all_worst= all_median=
#     all_worst_tensor= loss_ref= loss_hcnn= plans=
# conv_*: e (e2 for conv_l2_*) over the 20 conv weights, worst and median,
# worst_tensor the conv weight with the worst e; all_*: e over all 62
# parameter tensors (batch-norm, fc too); loss_ref: the float64 loss,
# loss_hcnn: the step's train_loss (CSV, 6 decimals); plans: the run
# header's count of layers per plan.  Then per_thread against batched
# (ref=batched: the float32 im2col plans' own spread; its loss_ref is
# batched's), and a '#' line checking the reference against the float32
# im2col plans (exit 1 if it is off: a wrong model or step).
# A ReLU mask that flips (a pre-activation within rounding error of 0)
# changes that pixel's gradient, and with it every update upstream by about
# one pixel's share: in a row of the layer's own weight gradient up to a
# few % at these batches (so conv_worst of the float32 im2col plans too),
# in the layers before it ~1e-3 (conv_l2_*).  A larger forward error flips
# more masks.
# Defaults: batches 2 8 16, seed 1 (data and parameters: the same seed
# gives the same output), 2 threads (any count gives the same bits); about
# a minute on 2 cores.  --out DIR: the table also into DIR/table.txt, each
# run's log and CSV into DIR/b<B>/ (a relative DIR: under the repository,
# where the script runs).  PYTHON: a python3 with numpy (default
# /usr/bin/python3); HCNN: the binary (default ./hcnn).
# Exit status: 0 done, 1 a run or the reference check failed, 2 bad command line.
set -euo pipefail
cd "$(dirname "$0")/.."
batches="2 8 16" out="" seed=1 threads=2 precisions=fp32
usage() { echo "winograd_precision.sh: $1 (see --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --batches | --out | --seed | --threads | --precision) [ $# -ge 2 ] || usage "$1 needs a value" ;;&
    --batches) batches=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --precision) precisions=$2; shift 2 ;;
    -h | --help) sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown option '$1'" ;;
    esac
done
[ -n "${batches// /}" ] || usage "--batches is empty"
for p in $precisions; do
    case $p in fp32 | bf16) ;; *) usage "--precision '$p': expected fp32, bf16 or both" ;; esac
done
for v in $batches "$seed" "$threads"; do
    case $v in
    '' | *[!0-9]* | 0*) usage "'$v' is not a positive integer" ;;
    esac
done
HCNN=${HCNN:-./hcnn}
PY=${PYTHON:-/usr/bin/python3} # Debian's numpy; not the pyenv python3 first on PATH
[ -x "$HCNN" ] || { echo "winograd_precision.sh: $HCNN not found: build hcnn first (make)" >&2; exit 1; }
"$PY" -c 'import numpy' 2>/dev/null ||
    { echo "winograd_precision.sh: $PY cannot import numpy (set PYTHON)" >&2; exit 1; }
py() { OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$PY" bench/winograd_precision.py "$@"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$HCNN" "$tmp/hcnn" # one build for the whole table, whatever make does meanwhile
HCNN=$tmp/hcnn
algos="batched per_thread winograd_f2 winograd_f4 auto"
lr=0.1 momentum=0.9 wd=5e-4
# the run: one step from the imported checkpoint, all of one batch
common=(--config configs/cifar_resnet18.yaml --set augment=false --set schedule=constant
        --set warmup_epochs=0 --set lr="$lr" --set momentum="$momentum" --set nesterov=true
        --set weight_decay="$wd" --set max_steps=1 --set test_limit=1 --set threads="$threads"
        --set blas_kernels=env)
# the same parameters for every batch size (import checks names and shapes)
py init "$tmp/init" --seed "$seed"
if ! "$HCNN" import "$tmp/init" "${common[@]}" -o "$tmp/init.hcnn" >"$tmp/import.log" 2>&1; then
    echo "winograd_precision.sh: hcnn import failed: $(tail -n 3 "$tmp/import.log")" >&2
    exit 1
fi
[ -z "$out" ] || { mkdir -p "$out"; : >"$out/table.txt"; }
# the build and its BLAS kernels (blas_kernels=env: OpenBLAS's own, or OPENBLAS_CORETYPE's)
build="# $("$HCNN" -V 2>&1 | head -n 3 | paste -sd " " -)"
echo "$build"
[ -z "$out" ] || echo "$build" >>"$out/table.txt"
for b in $batches; do
    d=$tmp/b$b
    py data "$d/data" --n "$b" --seed "$seed"
    runs=()
    # name precision algo: the runs (fp32 batched always: the reference's check)
    jobs=()
    case " $precisions " in *" fp32 "*) ;; *) jobs+=("batched fp32 batched") ;; esac
    for p in $precisions; do
        for algo in $algos; do
            if [ "$p" = fp32 ]; then jobs+=("$algo fp32 $algo"); else jobs+=("bf16_$algo bf16 $algo"); fi
        done
    done
    for job in "${jobs[@]}"; do
        read -r name prec algo <<<"$job"
        if ! "$HCNN" train -q "${common[@]}" --resume "$tmp/init.hcnn" --set data_dir="$d/data" \
            --set train_limit="$b" --set batch_size="$b" --set conv_algo="$algo" \
            --set precision="$prec" \
            --set checkpoint_dir="$d/ck_$name" --set csv="$d/$name.csv" >"$d/$name.log" 2>&1 ||
            ! "$HCNN" export "$d/ck_$name/final.hcnn" "$d/x_$name" >>"$d/$name.log" 2>&1; then
            echo "winograd_precision.sh: batch $b, $prec conv_algo $algo failed: $(tail -n 3 "$d/$name.log")" >&2
            exit 1
        fi
        runs+=("$name=$d/x_$name,$d/$name.csv,$d/$name.log")
    done
    rc=0
    py compare --data "$d/data" --init "$tmp/init" --n "$b" --lr "$lr" --momentum "$momentum" \
        --weight-decay "$wd" --nesterov 1 "${runs[@]}" >"$d/table.txt" || rc=$?
    cat "$d/table.txt"
    if [ -n "$out" ]; then
        cat "$d/table.txt" >>"$out/table.txt"
        mkdir -p "$out/b$b"
        cp "$d"/*.log "$d"/*.csv "$out/b$b/"
    fi
    [ "$rc" = 0 ] || exit 1
done
