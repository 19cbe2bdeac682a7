#!/usr/bin/env bash
# The thread count does not change the model: the same config and seed
# trained on 1, 2, 3, 17, 64 and 256 threads (more threads than this
# machine's cores: oversubscribed on purpose; 256 is more than Debian's
# OpenBLAS serves at once, so its GEMMs take turns) give byte-identical
# checkpoints.
# LeNet-5 and a small residual network (batch-norm, projection shortcut,
# dropout), batches above and below the thread count, every conv_algo,
# and ResNet-18 at 4 images a rank; then data and pipeline parallelism at 1
# and 17 threads a rank.  Why it holds: docs/strategies.md, "Determinism".  The BLAS
# kernels are the environment's (blas_kernels: env): auto measures per
# thread count and could pick different ones.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
LENET="$HCNN_SRCDIR/configs/mnist_lenet.yaml"
RES="$HCNN_SRCDIR/configs/synthetic_resnet.yaml"
R18="$HCNN_SRCDIR/configs/cifar_resnet18.yaml"
SYN=(dataset=synthetic synthetic_train=300 synthetic_test=32)
THREADS=(1 2 3 17 64 256)
mpi_setup

# train NAME THREADS CONFIG key=value...: serial run, checkpoint in $WORK/NAME
train() {
    local name=$1 t=$2 cfg=$3 kv
    shift 3
    local args=(train --config "$cfg" -q --set csv= --set threads="$t" --set blas_kernels=env
                --set checkpoint_dir="$WORK/$name")
    for kv in "$@"; do args+=(--set "$kv"); done
    OMP_NUM_THREADS=$t timeout 300 "$HCNN" "${args[@]}" >"$WORK/$name.log" 2>&1
}

# identical REF NAME: byte-identical final checkpoints
identical() {
    if [ ! -f "$WORK/$2/final.hcnn" ]; then
        case_fail "no checkpoint: $(tail -n 3 "$WORK/$2.log")"
    elif same_bits "$WORK/$1/final.hcnn" "$WORK/$2/final.hcnn"; then
        case_ok
    else
        case_fail "differs from $1: $("$HCNN" diff "$WORK/$1/final.hcnn" "$WORK/$2/final.hcnn" | tail -n 1)"
    fi
}

# across NAME CONFIG key=value...: one case per thread count after the
# first, each against the 1-thread run
across() {
    local name=$1 cfg=$2 t
    shift 2
    for t in "${THREADS[@]}"; do
        train "$name-$t" "$t" "$cfg" "$@"
        if [ "$t" -ne 1 ]; then
            case_begin "${name}_${t}_threads"
            identical "$name-1" "$name-$t"
        fi
    done
}

# LeNet-5: batch 64 (more images than threads but for 64), 8 (fewer than
# 17), and per-block convolutions (conv_algo per_thread runs whole-network
# units; batched does not)
across lenet_b64 "$LENET" "${SYN[@]}" batch_size=64 max_steps=4
across lenet_b8 "$LENET" "${SYN[@]}" batch_size=8 max_steps=6
across lenet_batched_b8 "$LENET" "${SYN[@]}" batch_size=8 max_steps=6 conv_algo=batched
# OMP_NUM_THREADS as a list (4,4: libgomp makes nested regions active): the
# layers' regions inside the whole-network units still run one thread each
# (the CPU backend holds OpenMP to one active level), the same bits
case_begin lenet_b64_omp_num_threads_list
OMP_NUM_THREADS=4,4 timeout 300 "$HCNN" train --config "$LENET" -q --set csv= --set threads=0 \
    --set blas_kernels=env --set checkpoint_dir="$WORK/lenet_list" --set dataset=synthetic \
    --set synthetic_train=300 --set synthetic_test=32 --set batch_size=64 --set max_steps=4 \
    >"$WORK/lenet_list.log" 2>&1
identical lenet_b64-1 lenet_list
# the small residual network: batch-norm couples the samples, so blocks
# run one after another, convolutions on per-thread items (12x12 planes)
# or batched (6x6)
across resnet_b32 "$RES" epochs=1 max_steps=6 batch_size=32
across resnet_b4 "$RES" epochs=1 max_steps=6 batch_size=4
across resnet_per_thread_b4 "$RES" epochs=1 max_steps=6 batch_size=4 conv_algo=per_thread
across resnet_batched_b32 "$RES" epochs=1 max_steps=6 batch_size=32 conv_algo=batched
# Winograd on its 3x3 stride-1 layers (8 and 16 channels: the 16-channel
# layer's weight gradient by Winograd too), F(4x4,3x3) and F(2x2,3x3)
across resnet_winograd_b32 "$RES" epochs=1 max_steps=6 batch_size=32 conv_algo=winograd
across resnet_winograd_f2_b4 "$RES" epochs=1 max_steps=6 batch_size=4 conv_algo=winograd_f2
# ResNet-18, 4 and 8 images: its images split into row and channel items
# (auto: Winograd F(4x4) or F(2x2) for its 3x3 layers of 64 channels and
# more, batched im2col for the rest at few images), a 64-core node's share
# of a 512-image global batch at 32 nodes and less
THREADS=(1 17 64 256)
across resnet18_b4 "$R18" "${SYN[@]}" batch_size=4 eval_batch_size=16 max_steps=1
across resnet18_b8 "$R18" "${SYN[@]}" batch_size=8 eval_batch_size=16 max_steps=2

# precision: bf16 (issue 38): oneDNN's products, each on one thread, on
# pieces fixed by the shape: the same bits at 1, 2 and 17 threads (LeNet-5's
# whole-network units, the residual network's per-thread items and batched
# chunks).  LeNet-5 with conv_algo per_thread: under auto its convolutions
# keep FP32 (conv_plan.c, hcnn_conv_bf16), and these cases are bf16's.
bf16_state
THREADS=(1 2 17)
BF16_CASES=(lenet_bf16_b64 resnet_bf16_b32 resnet_bf16_batched_b8)
if [ "$BF16_STATE" = run ]; then
    across lenet_bf16_b64 "$LENET" "${SYN[@]}" batch_size=64 max_steps=4 precision=bf16 \
        conv_algo=per_thread
    across resnet_bf16_b32 "$RES" epochs=1 max_steps=6 batch_size=32 precision=bf16
    across resnet_bf16_batched_b8 "$RES" epochs=1 max_steps=6 batch_size=8 precision=bf16 \
        conv_algo=batched
else
    for c in "${BF16_CASES[@]}"; do
        for t in 2 17; do
            case_begin "${c}_${t}_threads"
            if [ "$BF16_STATE" = fail ]; then case_fail "this CPU shows bf16 instructions, yet: $BF16_WHY"
            else case_skip "precision bf16 does not run here: $BF16_WHY"; fi
        done
    done
fi

# strategies: the same run at 1 and 17 threads a rank
# mpi NAME THREADS RANKS key=value...
mpi() {
    local name=$1 t=$2 np=$3 kv
    shift 3
    local args=(train --config "$RES" -q --set csv= --set epochs=1 --set max_steps=6
                --set threads="$t" --set blas_kernels=env --set checkpoint_dir="$WORK/$name")
    for kv in "$@"; do args+=(--set "$kv"); done
    "${MPIRUN[@]}" -np "$np" -x OMP_NUM_THREADS="$t" "$HCNN" "${args[@]}" >"$WORK/$name.log" 2>&1
}
for t in 1 17; do
    mpi data-$t "$t" 2 strategy=data batch_size=8 bucket_mb=0.001
    mpi pipe-$t "$t" 2 strategy=pipeline stages=2 microbatches=2 batch_size=8
done
case_begin data_2_ranks_17_threads
identical data-1 data-17
case_begin pipeline_2_stages_17_threads
identical pipe-1 pipe-17

finish
