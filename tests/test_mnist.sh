#!/usr/bin/env bash
# End to end on real MNIST: configs/mnist_lenet.yaml, 1 epoch, serial,
# must reach test accuracy >= 98.0%.  Needs the data: scripts/fetch-data.sh
# (the README's commands fetch it); skipped when it is absent.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
DATA="${HCNN_MNIST_DIR:-$HCNN_SRCDIR/data/mnist}"

case_begin mnist_lenet_one_epoch
if [ ! -e "$DATA/train-images-idx3-ubyte" ] && [ ! -e "$DATA/train-images-idx3-ubyte.gz" ]; then
    case_skip "no MNIST in $DATA: run scripts/fetch-data.sh mnist"
    finish
fi
if "$HCNN" train --config "$HCNN_SRCDIR/configs/mnist_lenet.yaml" --set data_dir="$DATA" \
       --set csv="$WORK/mnist.csv" --set checkpoint_dir="$WORK/ck" >"$WORK/mnist.log" 2>&1; then
    line=$(grep '^epoch=1 ' "$WORK/mnist.log")
    echo "# $line"
    acc=$(echo "$line" | tr ' ' '\n' | sed -n 's/^test_acc=//p')
    if awk -v a="$acc" 'BEGIN { exit !(a >= 0.98) }'; then
        case_ok
    else
        case_fail "test_acc $acc < 0.98"
    fi
else
    case_fail "training failed: $(tail -n 5 "$WORK/mnist.log")"
fi

finish
