#!/usr/bin/env bash
# The trainer end to end on synthetic data: it fits, writes its metrics and
# checkpoint, evaluates, stops at max_steps, and is bit-for-bit repeatable.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/synthetic_small.yaml"

# field VALUE of the last "epoch=" line of a log
last() { grep '^epoch=' "$1" | tail -n 1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }
first() { grep '^epoch=' "$1" | head -n 1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }

train() { # name, extra args
    local name=$1
    shift
    "$HCNN" train --config "$CFG" --set csv="$WORK/$name.csv" --set checkpoint_dir="$WORK/$name" "$@" \
        >"$WORK/$name.log" 2>&1
}

case_begin synthetic_fits
if train a --set epochs=4; then
    l1=$(first "$WORK/a.log" train_loss) l4=$(last "$WORK/a.log" train_loss) acc=$(last "$WORK/a.log" test_acc)
    if awk -v a="$l1" -v b="$l4" -v c="$acc" 'BEGIN { exit !(b < a / 2 && c >= 0.9) }'; then
        case_ok
    else
        case_fail "loss $l1 -> $l4, test_acc $acc (want loss halved and test_acc >= 0.9)"
    fi
else
    case_fail "train failed: $(tail -n 3 "$WORK/a.log")"
fi

case_begin csv_columns
if [ -f "$WORK/a.csv" ] && head -n 1 "$WORK/a.csv" | grep -q 'epoch' &&
   for col in epoch train_loss train_acc test_loss test_acc images_per_s epoch_time_s; do
       head -n 1 "$WORK/a.csv" | tr ',' '\n' | grep -qx "$col" || exit 1
   done && [ "$(wc -l <"$WORK/a.csv")" -eq 5 ]; then
    case_ok
else
    case_fail "CSV header or rows wrong: $(head -n 2 "$WORK/a.csv" 2>&1)"
fi

case_begin config_printed
if grep -q '^lr: ' "$WORK/a.log" && grep -q '^epochs: 4' "$WORK/a.log"; then case_ok; else case_fail "configuration not printed"; fi

case_begin eval_checkpoint
if "$HCNN" eval --config "$CFG" --checkpoint "$WORK/a/final.hcnn" >"$WORK/eval.log" 2>&1; then
    got=$(tr ' ' '\n' <"$WORK/eval.log" | sed -n 's/^test_acc=//p')
    want=$(last "$WORK/a.log" test_acc)
    if [ "$got" = "$want" ]; then case_ok; else case_fail "eval test_acc $got, training reported $want"; fi
else
    case_fail "eval failed: $(cat "$WORK/eval.log")"
fi

case_begin deterministic
train b --set epochs=4
if same_bits "$WORK/a/final.hcnn" "$WORK/b/final.hcnn" &&
   [ "$(cut -d, -f11-17 "$WORK/a.csv")" = "$(cut -d, -f11-17 "$WORK/b.csv")" ]; then
    case_ok
else
    case_fail "two runs with the same seed differ"
fi

case_begin seed_matters
train c --set epochs=1 --set seed=7
train d --set epochs=1
if ! same_bits "$WORK/c/final.hcnn" "$WORK/d/final.hcnn"; then case_ok; else case_fail "seed has no effect"; fi

case_begin max_steps
train e --set epochs=3 --set max_steps=5
if [ "$(last "$WORK/e.log" step)" = 5 ] && [ "$(grep -c '^epoch=' "$WORK/e.log")" = 1 ]; then
    case_ok
else
    case_fail "expected one epoch line with step=5: $(grep '^epoch=' "$WORK/e.log")"
fi

case_begin resnet_with_bn_trains
if "$HCNN" train --config "$HCNN_SRCDIR/configs/synthetic_resnet.yaml" --set csv= --set checkpoint_dir="$WORK/res" >"$WORK/res.log" 2>&1; then
    l1=$(first "$WORK/res.log" train_loss) l3=$(last "$WORK/res.log" train_loss) acc=$(last "$WORK/res.log" test_acc)
    if awk -v a="$l1" -v b="$l3" -v c="$acc" 'BEGIN { exit !(b < a && c >= 0.9) }'; then
        case_ok
    else
        case_fail "loss $l1 -> $l3, test_acc $acc"
    fi
else
    case_fail "train failed: $(tail -n 3 "$WORK/res.log")"
fi

case_begin augment_and_avgpool_train
if "$HCNN" train --config "$CFG" --set csv= --set checkpoint_dir= --set augment=true --set epochs=2 \
       --set model.blocks.2.type=avgpool >"$WORK/aug.log" 2>&1 && grep -q '^epoch=2' "$WORK/aug.log"; then
    case_ok
else
    case_fail "$(tail -n 3 "$WORK/aug.log")"
fi

finish
