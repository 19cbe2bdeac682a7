#!/usr/bin/env bash
# Does Winograd harm training?  ResNet-18 on Fashion-MNIST trained with the
# im2col plans (conv_algo per_thread) and with conv_algo auto, which runs
# the 3x3 stride-1 layers of 64 channels and more by Winograd (F(4x4,3x3),
# or F(2x2,3x3) where a pass has fewer than 32 F(4x4) tiles: the header's
# "convolution plans" line counts them), SEEDS seeds each; each Winograd
# run's final train loss, test loss and test accuracy must lie inside the
# range of the im2col runs' (bench/train_compare.sh does the work).
#
#   bench/winograd_training.sh [--out DIR] [--seeds "1 2 3"] [--epochs E]
#                              [--train N] [--test N] [--batch B] [--no-train]
#
# Defaults: 5 epochs of 1920 images (60 steps each at batch 32: 300 steps),
# 1000 test images, seeds 1 2 3; about 20 minutes on 2 cores.  Writes
# DIR/im2col_s<seed>.csv and DIR/winograd_s<seed>.csv (default DIR:
# results/winograd) and DIR/curves.png, prints one line per run and, last,
#   winograd_inside_im2col_range=yes|no
# Exit status: 0 inside, 1 outside or a run failed, 2 bad command line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=results/winograd batch=32
args=()
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1"); shift ;;
    esac
done
exec "$here/train_compare.sh" --a im2col --a-set "conv_algo=per_thread" \
    --b winograd --b-set "conv_algo=auto" --out "$out" --batch "$batch" \
    --title "ResNet-18, Fashion-MNIST subset, batch $batch: im2col (blue) and conv_algo auto with Winograd (red), a curve per seed" \
    "${args[@]}"
