#!/usr/bin/env bash
# optimizer_sharding: ranks on ResNet-18 (11.17 M parameters in 2 buckets
# of <= 25 MiB, batch-norm, projection shortcuts): byte-identical
# checkpoints, momentum included, to the unsharded step after 20 steps at
# 2, 3 and 4 ranks.  The sanitizer stage leaves it out (Makefile.am,
# HEAVY_TESTS): the same code runs there under tests/integration/test_sharding.sh.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/cifar_resnet18.yaml"
mpi_setup
MPIRUN=(timeout 300 mpirun --oversubscribe --bind-to none)

# train NAME RANKS key=value...: 20 steps of 6 synthetic 32x32 images
train() {
    local name=$1 np=$2 kv
    shift 2
    local args=(train --config "$CFG" -q --set csv= --set dataset=synthetic --set strategy=data
                --set synthetic_train=120 --set synthetic_test=8 --set eval_batch_size=8
                --set batch_size=6 --set max_steps=20 --set checkpoint_dir="$WORK/$name")
    for kv in "$@"; do args+=(--set "$kv"); done
    "${MPIRUN[@]}" -np "$np" "$HCNN" "${args[@]}" >"$WORK/$name.log" 2>&1
}

for np in 2 3 4; do
    case_begin "resnet18_np${np}_identical"
    train "none$np" "$np" && train "ranks$np" "$np" optimizer_sharding=ranks
    if [ ! -f "$WORK/none$np/final.hcnn" ] || [ ! -f "$WORK/ranks$np/final.hcnn" ]; then
        case_fail "no checkpoint: $(tail -n 2 "$WORK/none$np.log" "$WORK/ranks$np.log")"
    elif ! grep -q "^hcnn: optimizer_sharding: ranks: [0-9]* of the $np ranks each update" "$WORK/ranks$np.log"; then
        case_fail "not sharded: $(grep -h 'gradient\|sharding' "$WORK/ranks$np.log")"
    elif "$HCNN" diff "$WORK/none$np/final.hcnn" "$WORK/ranks$np/final.hcnn" >"$WORK/d$np"; then
        echo "# $(tail -n 1 "$WORK/d$np")"
        case_ok
    else
        case_fail "differs: $(tail -n 1 "$WORK/d$np")"
    fi
done

finish
