#!/usr/bin/env bash
# Does Winograd harm training?  ResNet-18 on Fashion-MNIST
# (configs/fashion_resnet18.yaml: 28x28 images, stages of 28, 14, 7 and 4
# pixels) trained with the im2col plans (conv_algo per_thread) and with
# conv_algo auto, which runs the 3x3 stride-1 layers of 64 channels and
# more by Winograd (F(4x4,3x3), or F(2x2,3x3) where a pass has fewer than
# 32 F(4x4) tiles: the header's "convolution plans" line counts them),
# SEEDS seeds each, on a subset, and the
# final train loss, test loss and test accuracy of every run compared: each
# Winograd run's must lie inside the range of the im2col runs' (also
# printed: the range widened by its own width on each side, since 3
# samples span a narrow range).
#
#   bench/winograd_training.sh [--out DIR] [--seeds "1 2 3"] [--epochs E]
#                              [--train N] [--test N] [--batch B] [--no-train]
#
# Defaults: 5 epochs of 1920 images (60 steps each at batch 32: 300 steps),
# 1000 test images, seeds 1 2 3; about 20 minutes on 2 cores (--no-train:
# only compare and plot the CSVs already in DIR).  Writes
# DIR/<algo>_s<seed>.csv (default DIR: results/winograd), the curves into
# DIR/curves.png (with gnuplot: train and test loss, test accuracy per
# epoch, im2col runs blue, Winograd runs red), and prints one line per run
# and, last,
#   winograd_inside_im2col_range=yes|no
# Exit status: 0 inside, 1 outside or a run failed, 2 bad command line.
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/winograd seeds="1 2 3" epochs=5 train=1920 test=1000 batch=32 run=1
while [ $# -gt 0 ]; do
    case $1 in
    --out) out=${2:?}; shift 2 ;;
    --seeds) seeds=${2:?}; shift 2 ;;
    --epochs) epochs=${2:?}; shift 2 ;;
    --train) train=${2:?}; shift 2 ;;
    --test) test=${2:?}; shift 2 ;;
    --batch) batch=${2:?}; shift 2 ;;
    --no-train) run=0; shift ;;
    -h | --help) sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "winograd_training.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
HCNN=${HCNN:-./hcnn}
[ -x "$HCNN" ] || { echo "winograd_training.sh: $HCNN not found: build hcnn first (make)" >&2; exit 1; }
[ -d data/fashion_mnist ] || scripts/fetch-data.sh fashion_mnist >&2
mkdir -p "$out"
rc=0
for s in $seeds; do
    [ "$run" = 1 ] || break
    for algo in per_thread auto; do
        name=$([ "$algo" = auto ] && echo winograd || echo im2col)_s$s
        rm -f "$out/$name.csv"
        if ! "$HCNN" train --config configs/fashion_resnet18.yaml -q --set seed="$s" \
            --set conv_algo="$algo" --set epochs="$epochs" --set train_limit="$train" \
            --set test_limit="$test" --set batch_size="$batch" --set checkpoint_dir= \
            --set csv="$out/$name.csv" >"$out/$name.log" 2>&1; then
            echo "winograd_training.sh: run $name failed: $(tail -n 3 "$out/$name.log")" >&2
            exit 1
        fi
        grep -m1 'convolution plans' "$out/$name.log" | sed "s/^hcnn: /# $name: /"
    done
done
# the last row of each CSV: train_loss, test_loss, test_acc by column name
final() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { r = $c["train_loss"] " " $c["test_loss"] " " $c["test_acc"] }
             END { print r }' "$1"
}
for f in "$out"/im2col_s*.csv "$out"/winograd_s*.csv; do
    echo "$(basename "$f" .csv) $(final "$f")"
done | awk '
    { name[NR] = $1; v[NR, 1] = $2; v[NR, 2] = $3; v[NR, 3] = $4
      printf "run=%s train_loss=%s test_loss=%s test_acc=%s\n", $1, $2, $3, $4 }
    END {
        split("train_loss test_loss test_acc", what, " ")
        ok = 1; wide = 1
        for (k = 1; k <= 3; k++) {
            lo = ""; hi = ""
            for (i = 1; i <= NR; i++) if (name[i] ~ /^im2col/) {
                if (lo == "" || v[i, k] < lo) lo = v[i, k]
                if (hi == "" || v[i, k] > hi) hi = v[i, k]
            }
            w = hi - lo; a = lo - w; b = hi + w
            for (i = 1; i <= NR; i++) if (name[i] ~ /^winograd/) {
                if (v[i, k] < lo || v[i, k] > hi) {
                    printf "# %s: %s %s outside the im2col range [%s, %s]\n",
                           name[i], what[k], v[i, k], lo, hi
                    ok = 0
                }
                if (v[i, k] < a || v[i, k] > b)
                    wide = 0
            }
            printf "# im2col %s range [%s, %s], widened [%g, %g]\n", what[k], lo, hi, a, b
        }
        print "winograd_inside_widened_range=" (wide ? "yes" : "no")
        print "winograd_inside_im2col_range=" (ok ? "yes" : "no")
        exit ok ? 0 : 1
    }' || rc=$?
# the curves: epoch, train loss, test loss, test accuracy of each run
plot=""
for f in "$out"/im2col_s*.csv "$out"/winograd_s*.csv; do
    [ -f "$f" ] || continue
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { print $c["epoch"], $c["train_loss"], $c["test_loss"], $c["test_acc"] }' "$f" >"${f%.csv}.dat"
    n=$(basename "$f" .csv) color=$([[ $n == im2col* ]] && echo "#1f77b4" || echo "#d62728")
    plot="$plot'${f%.csv}.dat' using 1:COL with linespoints lc rgb '$color' title '$n' noenhanced,"
done
if command -v gnuplot >/dev/null && [ -n "$plot" ]; then
    gnuplot <<EOF || echo "winograd_training.sh: gnuplot failed: no curves" >&2
set terminal pngcairo size 1500,500
set output '$out/curves.png'
set multiplot layout 1,3 title 'ResNet-18, Fashion-MNIST subset, batch $batch: im2col (blue) and conv_algo auto with Winograd (red), a curve per seed' noenhanced
set xlabel 'epoch'
set xtics 1
set key top right
set title 'train loss'
plot ${plot//COL/2}
set title 'test loss'
set logscale y
plot ${plot//COL/3}
unset logscale y
set title 'test accuracy'
set key bottom right
plot ${plot//COL/4}
unset multiplot
EOF
fi
rm -f "$out"/*.dat
exit $rc
