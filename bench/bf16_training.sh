#!/usr/bin/env bash
# Does precision bf16 harm training (issue 38)?  ResNet-18 on Fashion-MNIST,
# 300 steps at batch 64 (5 epochs of 3840 images), SEEDS seeds in each
# precision (conv_algo auto in both: Winograd F(4x4) on the 3x3 layers of
# >= 32 channels whose pass has >= 32 tiles, F(2x2) below, the im2col plans
# for the rest; in bf16 their GEMMs' inputs rounded); each bf16 run's final
# train loss, test loss and
# test accuracy must lie inside the FP32 runs' range widened by its width
# (bench/train_compare.sh does the work; its exit status is the strict
# range's, this script's the widened one's, the issue's criterion).
#
#   bench/bf16_training.sh [--out DIR] [--seeds "1 2 3"] [--epochs E] [--train N]
#                          [--test N] [--batch B] [--no-train]
#
# Needs a CPU that runs bf16 (hcnn --version: "precisions on this CPU: fp32,
# bf16").  Writes DIR/fp32_s<seed>.csv and DIR/bf16_s<seed>.csv (default
# DIR: results/bf16), DIR/curves.png and DIR/summary.txt (the comparison's
# lines), and prints them; last line
#   bf16_inside_widened_range=yes|no
# Exit status: 0 inside the widened range, 1 outside or a run failed, 2 bad
# command line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=results/bf16 batch=64
args=(--epochs 5 --train 3840)
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1"); shift ;;
    esac
done
mkdir -p "$out"
set +e
"$here/train_compare.sh" --a fp32 --a-set "precision=fp32" --b bf16 --b-set "precision=bf16" \
    --out "$out" --batch "$batch" \
    --title "ResNet-18, Fashion-MNIST subset, batch $batch: fp32 (blue) and bf16 (red), a curve per seed" \
    "${args[@]}" | tee "$out/summary.txt"
set -e
wide=$(sed -n 's/^bf16_inside_widened_range=//p' "$out/summary.txt")
echo "bf16_inside_widened_range=${wide:-no}"
[ "$wide" = yes ]
