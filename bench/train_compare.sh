#!/usr/bin/env bash
# Does a setting harm training?  ResNet-18 on Fashion-MNIST
# (configs/fashion_resnet18.yaml: 28x28 images, stages of 28, 14, 7 and 4
# pixels) trained SEEDS times with the settings of A and with those of B,
# on a subset, and the final train loss, test loss and test accuracy of
# every run compared: each B run's must lie inside the range of the A runs'
# (also printed: the range widened by its own width on each side, since 3
# samples span a narrow range).
#
#   bench/train_compare.sh --a NAME --a-set "KEY=VALUE ..." --b NAME --b-set "KEY=VALUE ..."
#                          [--out DIR] [--seeds "1 2 3"] [--epochs E] [--train N]
#                          [--test N] [--batch B] [--title TEXT] [--no-train]
#
# Defaults: 5 epochs of 1920 images (60 steps each at batch 32: 300 steps),
# 1000 test images, seeds 1 2 3 (--no-train: only compare and plot the
# CSVs already in DIR).  Writes DIR/<name>_s<seed>.csv (default DIR:
# results/compare), the curves into DIR/curves.png (with gnuplot: train and
# test loss, test accuracy per epoch, A's runs blue, B's red), prints one
# line per run and, last,
#   <B>_inside_<A>_range=yes|no
# (after <B>_inside_widened_range=yes|no).  bench/winograd_training.sh
# (im2col against Winograd) and bench/bf16_training.sh (fp32 against bf16)
# are its two uses.
# Exit status: 0 inside, 1 outside or a run failed, 2 bad command line.
set -euo pipefail
cd "$(dirname "$0")/.."
out=results/compare seeds="1 2 3" epochs=5 train=1920 test=1000 batch=32 run=1
a="" b="" aset="" bset="" title=""
usage() { echo "train_compare.sh: $1 (see --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
    --out | --seeds | --epochs | --train | --test | --batch | --a | --b | --a-set | --b-set | --title)
        [ $# -ge 2 ] || usage "$1 needs a value" ;;&
    --out) out=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --train) train=$2; shift 2 ;;
    --test) test=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --a) a=$2; shift 2 ;;
    --b) b=$2; shift 2 ;;
    --a-set) aset=$2; shift 2 ;;
    --b-set) bset=$2; shift 2 ;;
    --title) title=$2; shift 2 ;;
    --no-train) run=0; shift ;;
    -h | --help) sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) usage "unknown option '$1'" ;;
    esac
done
for v in "$a" "$b"; do
    case $v in '' | *[!a-z0-9_]*) usage "--a and --b: names of letters, digits and _ ('$v')" ;; esac
done
[ "$a" != "$b" ] || usage "--a and --b name the same runs"
HCNN=${HCNN:-./hcnn}
[ -x "$HCNN" ] || { echo "train_compare.sh: $HCNN not found: build hcnn first (make)" >&2; exit 1; }
[ "$run" = 0 ] || [ -d data/fashion_mnist ] || scripts/fetch-data.sh fashion_mnist >&2
mkdir -p "$out"
# sets "KEY=VALUE ...": --set arguments
sets() { local kv; for kv in $1; do printf -- '--set\n%s\n' "$kv"; done; }
rc=0
for s in $seeds; do
    [ "$run" = 1 ] || break
    for side in a b; do
        if [ $side = a ]; then name=${a}_s$s kv=$aset; else name=${b}_s$s kv=$bset; fi
        mapfile -t extra < <(sets "$kv")
        rm -f "$out/$name.csv"
        if ! "$HCNN" train --config configs/fashion_resnet18.yaml -q --set seed="$s" \
            --set epochs="$epochs" --set train_limit="$train" --set test_limit="$test" \
            --set batch_size="$batch" --set checkpoint_dir= --set csv="$out/$name.csv" \
            "${extra[@]}" >"$out/$name.log" 2>&1; then
            echo "train_compare.sh: run $name failed: $(tail -n 3 "$out/$name.log")" >&2
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
for f in "$out/${a}"_s*.csv "$out/${b}"_s*.csv; do
    echo "$(basename "$f" .csv) $(final "$f")"
done | awk -v A="$a" -v B="$b" '
    { name[NR] = $1; v[NR, 1] = $2; v[NR, 2] = $3; v[NR, 3] = $4
      printf "run=%s train_loss=%s test_loss=%s test_acc=%s\n", $1, $2, $3, $4 }
    END {
        split("train_loss test_loss test_acc", what, " ")
        ok = 1; wide = 1
        for (k = 1; k <= 3; k++) {
            lo = ""; hi = ""
            for (i = 1; i <= NR; i++) if (index(name[i], A "_s") == 1) {
                if (lo == "" || v[i, k] < lo) lo = v[i, k]
                if (hi == "" || v[i, k] > hi) hi = v[i, k]
            }
            w = hi - lo; lw = lo - w; hw = hi + w
            for (i = 1; i <= NR; i++) if (index(name[i], B "_s") == 1) {
                if (v[i, k] < lo || v[i, k] > hi) {
                    printf "# %s: %s %s outside the %s range [%s, %s]\n",
                           name[i], what[k], v[i, k], A, lo, hi
                    ok = 0
                }
                if (v[i, k] < lw || v[i, k] > hw)
                    wide = 0
            }
            printf "# %s %s range [%s, %s], widened [%g, %g]\n", A, what[k], lo, hi, lw, hw
        }
        print B "_inside_widened_range=" (wide ? "yes" : "no")
        print B "_inside_" A "_range=" (ok ? "yes" : "no")
        exit ok ? 0 : 1
    }' || rc=$?
# the curves: epoch, train loss, test loss, test accuracy of each run
plot=""
for f in "$out/${a}"_s*.csv "$out/${b}"_s*.csv; do
    [ -f "$f" ] || continue
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { print $c["epoch"], $c["train_loss"], $c["test_loss"], $c["test_acc"] }' "$f" >"${f%.csv}.dat"
    n=$(basename "$f" .csv) color=$([[ $n == "${a}"_s* ]] && echo "#1f77b4" || echo "#d62728")
    plot="$plot'${f%.csv}.dat' using 1:COL with linespoints lc rgb '$color' title '$n' noenhanced,"
done
[ -n "$title" ] || title="ResNet-18, Fashion-MNIST subset, batch $batch: $a (blue) and $b (red), a curve per seed"
if command -v gnuplot >/dev/null && [ -n "$plot" ]; then
    gnuplot <<EOF || echo "train_compare.sh: gnuplot failed: no curves" >&2
set terminal pngcairo size 1500,500
set output '$out/curves.png'
set multiplot layout 1,3 title '$title' noenhanced
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
