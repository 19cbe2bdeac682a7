#!/usr/bin/env bash
# Shows that the CUDA backend's tests catch the bugs a GPU backend typically
# has, without a GPU: each deliberate bug below is applied to a copy of the
# tree built with the CUDA emulation, and the conformance suite on `cuda`
# (and a short training run against the CPU) must then FAIL.  The clean
# copy must pass first.
#   tests/cuda/deliberate_bugs.sh [SRCDIR]     (default: this script's tree)
# Prints one line per bug ("caught" or "MISSED", with the failing test's
# first lines) and "N passed, N failed" (a bug caught is a pass); exits 1 if
# any bug went unnoticed or the clean copy failed.  Where SRCDIR is already
# built with the CUDA emulation (configure --enable-cuda-emulation, then
# make and make check: what .ci/run's emulation stage leaves), that build
# is copied as it is; else its sources are copied and built.  Then one file
# is recompiled per bug, and the bugs run JOBS (default: the cores) at
# once, one OpenMP thread each: their checks compare values, not times.
set -uo pipefail
src=$(cd "${1:-$(dirname "$0")/../..}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/hcnn-bugs.XXXXXX")
trap 'rm -rf "$work"' EXIT
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
export OMP_NUM_THREADS=1

mkdir -p "$work/clean"
# (the programs the checks run; the copy of a built tree is brought up to
# date by make, which rebuilds what it must: hcnn_git.h names no commit
# without .git)
programs=(hcnn tests/conformance/test_backend tests/unit/test_cuda_bn)
if grep -q '^#define HCNN_CUDA_EMULATION 1' "$src/config.h" 2>/dev/null && [ -x "$src/${programs[1]}" ]; then
    echo "# copying $src, built with the CUDA emulation, to $work/clean"
    (cd "$src" && tar cf - --exclude=./.git --exclude=./build-blis .) | (cd "$work/clean" && tar xf -)
else
    echo "# building a copy of $src with the CUDA emulation in $work/clean"
    (cd "$src" && git ls-files -z 2>/dev/null | xargs -0 tar cf - 2>/dev/null || tar cf - --exclude=.git .) |
        (cd "$work/clean" && tar xf -)
    (cd "$work/clean" && autoreconf -fi >/dev/null 2>&1 && ./configure --enable-cuda-emulation >/dev/null)
fi
(cd "$work/clean" && make -j"$jobs" >/dev/null && make -j"$jobs" "${programs[@]}" >/dev/null) || {
    echo "the clean copy does not build"
    echo "0 passed, 1 failed"
    exit 1
}

# the checks a bug must fail: the conformance suite on cuda, then LeNet-5
# 20 steps on cuda against the CPU (1e-4); with a list of conformance
# checks (a bug in an operation LeNet-5 does not use, the batch-norm's),
# the CUDA batch-norm's own test (tests/unit/test_cuda_bn: launches, the
# gathered statistics, pieces) and those checks alone: a few seconds
# instead of a minute
# (layout: the CUDA backend's HCNN_CUDA_LAYOUT for the conformance suite
# and the CUDA run: a bug in an NHWC kernel shows only there; conv: its
# HCNN_CUDA_CONV, for a bug in a way the rule does not take)
checks() { # DIR LOGS [conformance checks [layout [conv]]]: 0 when every check passes
    # (LOGS: the prefix of the logs' and checkpoints' names)
    local d=$1 o=$2 only=${3:-} layout=${4:-auto} conv=${5:-auto}
    export HCNN_CUDA_CONV=$conv
    if [ -n "$only" ]; then
        (cd "$d" && timeout -k 10 300 ./tests/unit/test_cuda_bn) >"$o.conf.log" 2>&1 &&
            (cd "$d" && HCNN_CUDA_LAYOUT=$layout HCNN_CONFORMANCE_BACKENDS=cuda HCNN_CONFORMANCE_CHECKS="$only" \
                timeout -k 10 300 ./tests/conformance/test_backend) >>"$o.conf.log" 2>&1
        return
    fi
    (cd "$d" && HCNN_CUDA_LAYOUT=$layout HCNN_CONFORMANCE_BACKENDS=cuda timeout -k 10 900 ./tests/conformance/test_backend) >"$o.conf.log" 2>&1 || return 1
    local l=(--config "$d/configs/mnist_lenet.yaml" -q --set dataset=synthetic --set synthetic_train=640
             --set synthetic_test=64 --set batch_size=32 --set csv= --set blas_kernels=env --set epochs=1
             --set max_steps=20)
    timeout -k 10 600 "$d/hcnn" train "${l[@]}" --set device=cpu --set checkpoint_dir="$o.cpu" >"$o.cpu.log" 2>&1 &&
        HCNN_CUDA_LAYOUT=$layout timeout -k 10 600 "$d/hcnn" train "${l[@]}" --set device=cuda --set checkpoint_dir="$o.cuda" >"$o.cuda.log" 2>&1 &&
        "$d/hcnn" diff "$o.cpu/final.hcnn" "$o.cuda/final.hcnn" --tol 1e-4 >"$o.diff.log" 2>&1
}

# the first line saying what failed: a conformance check's message, an
# abort, the CUDA run's error, or the comparison's verdict
why_failed() { # LOGS
    local o=$1 line
    for f in "$o.conf.log" "$o.cuda.log" "$o.diff.log"; do
        [ -s "$f" ] || continue
        line=$(grep -h -v -E '^\[ *(ERROR|LINE) *\] --- *$' "$f" | grep -m1 -E 'FAILED|Aborted|hcnn: |within_tol=no|differ')
        [ -n "$line" ] && { echo "$(basename "$f"): $line" | cut -c1-200; return; }
    done
    echo "(a check exited non-zero; see the logs)"
}

# Each case (a check of the clean copy, a bug) runs in the background, $jobs
# at once; its line goes to $work/result.N, and $work/result.N.pass exists
# when it passed.  Its lines are printed in the order the cases were
# started, as soon as the case and those before it are done.
started=0 shown=0 passed=0 failed=0
show_done() {
    while [ "$shown" -lt "$started" ] && [ -e "$work/result.$((shown + 1)).done" ]; do
        shown=$((shown + 1))
        cat "$work/result.$shown"
        if [ -e "$work/result.$shown.pass" ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
    done
}
start() { # FUNCTION ARGS...: in the background, once fewer than $jobs run
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; show_done; done
    started=$((started + 1))
    local r="$work/result.$started"
    { "$@" >"$r" 2>&1 && touch "$r.pass"; touch "$r.done"; } &
    show_done
}

# clean NAME ARGS-OF-CHECKS...: the clean copy passes the checks (its logs
# in $work/clean-NAME.*)
clean() {
    local name=$1
    shift
    if checks "$work/clean" "$work/clean-$name" "$@"; then
        echo "clean copy, $name: the checks pass"
    else
        echo "clean copy, $name: the checks FAIL: $(grep -h -m3 -E 'FAILED|error' "$work/clean-$name.conf.log" "$work/clean-$name.cuda.log" 2>/dev/null)"
        return 1
    fi
}

# in each layout: an NHWC bug is caught only if the clean copy passes in NHWC
for layout in auto nhwc; do
    start clean "HCNN_CUDA_LAYOUT=$layout" "" "$layout"
done

# the ways the rule does not take (src/cuda/conv_choice.cu): the forward and
# the data gradient image by image, the filter gradient in chunks (so the
# backward walks the two apart), on the convolution's checks: their bugs
# are caught only if the clean copy passes so
CONV_CHECKS=conv_fwd,conv_relu,conv_bwd,conv_bwd_filter,conv_bwd_data
WAYS=im2col_image,im2col_image,im2col
start clean "HCNN_CUDA_CONV=$WAYS (the convolution's)" "$CONV_CHECKS" auto "$WAYS"

# the data gradient transposed (src/cuda/conv.cu), in each layout
TRANSPOSED=im2col,transposed,im2col
for layout in auto nhwc; do
    start clean "HCNN_CUDA_CONV=$TRANSPOSED, HCNN_CUDA_LAYOUT=$layout (the convolution's)" "$CONV_CHECKS" \
        "$layout" "$TRANSPOSED"
done

# bug NAME FILE SED-EXPRESSION [CONFORMANCE-CHECKS [LAYOUT [CONV]]]: the copy
# with the bug, and whether the checks fail (0: caught); the copy is
# removed after, its logs kept till the end
bug() {
    start bug_case "$@"
}
bug_case() {
    local name=$1 file=$2 expr=$3 only=${4:-} layout=${5:-auto} conv=${6:-auto} d="$work/$1" rc=1
    cp -a "$work/clean" "$d"
    sed -i "$expr" "$d/$file"
    if cmp -s "$work/clean/$file" "$d/$file"; then
        echo "$name: the edit did not apply to $file (the source changed: update the script)"
        rm -rf "$d"
        return 1
    fi
    touch "$d/$file"
    # (a bug may leave a variable unused: the copy of a build configured
    # with --enable-werror, as CI's is, builds the bug without -Werror)
    sed -i -E '/^(WARN_CFLAGS|CUDA_WARN) = /s/ -Werror( all-warnings)?//' "$d/Makefile"
    # (with a list of checks: the two test programs alone, not hcnn)
    if ! (cd "$d" && { [ -n "$only" ] || make >/dev/null 2>&1; } &&
        make tests/conformance/test_backend tests/unit/test_cuda_bn >/dev/null 2>&1); then
        echo "$name: does not build"
    elif checks "$d" "$d" "$only" "$layout" "$conv"; then
        echo "$name: MISSED (every check passed)"
    else
        echo "$name: caught: $(why_failed "$d")"
        rc=0
    fi
    rm -rf "$d"
    return $rc
}

# a launch one block short: the last elements of a ReLU are never written
bug launch_one_block_short src/cuda/elementwise.cu \
    '/HCNN_LAUNCH(relu_fwd_kernel/s/hcnn_cuda_blocks(n)/(hcnn_cuda_blocks(n) - 1 ? hcnn_cuda_blocks(n) - 1 : 1)/'
# a bound one past the end: the dropout's last thread writes its mask and
# output one element past them (and reads x past its own), which no value
# in them shows: the conformance suite's guard, checked as each tensor is
# freed, does
bug dropout_one_past_the_end src/cuda/elementwise.cu \
    '/static __global__ void dropout_kernel/,/^}/s/if (k >= total)/if (k > total)/' dropout_fwd
# a transposed cuBLAS operand: op(A) the wrong way round
bug transposed_cublas_operand src/cuda/gemm.cu \
    '0,/ta ? CUBLAS_OP_T : CUBLAS_OP_N/s//ta ? CUBLAS_OP_N : CUBLAS_OP_T/'
# a download that does not wait for the stream: a synchronous cudaMemcpy on
# the legacy default stream, which a non-blocking stream's work does not precede
bug download_without_sync src/cuda/backend.cu \
    '/static void cuda_download(/,/^}/{s/cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s)/cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost)/;/cudaStreamSynchronize/d}'
# The batch-norm's kernels (src/cuda/bn.cu, bn_channel.cu), one bug each:
# a plane's total read before its lanes are written (a barrier left out)
bug plane_stats_without_barrier src/cuda/bn.cu \
    '/static __global__ void plane_stats_kernel/,/^}/{0,/__syncthreads();/{/__syncthreads();/d}}' \
    bn_fwd_train,conv_fwd_bn_stats
# the channel's variance over its last piece's values alone
bug bn_channel_stats_last_piece_count src/cuda/bn_channel.cu \
    's/hcnn_hd_bn_finish(mean, m2, done + cnt,/hcnn_hd_bn_finish(mean, m2, cnt,/' bn_fwd_train
# the backward's plane sums without the tail after the 16 lanes' blocks
bug bwd_plane_without_tail src/cuda/bn.cu \
    '/static __global__ void bwd_plane_kernel/,/^}/s/hi = l < LANES ? whole : np;/hi = whole;/' bn_bwd
# the backward's channel sums not restarted at a call's first piece
bug bwd_channel_sums_carried_over src/cuda/bn_channel.cu \
    's/sdy = first ? 0.0 : acc\[2 \* ch\]/sdy = acc[2 * ch]/' bn_bwd
# a channel's staged rows added before the block has written them (the
# barrier after stage_rows left out)
bug bn_channel_stats_before_staged src/cuda/bn_channel.cu \
    '/static __global__ void bn_channel_stats_kernel/,/^}/{0,/__syncthreads();/{/__syncthreads();/d}}' \
    bn_fwd_train
# the rows of a second staging round added again from the first's (a
# round's start not advanced: rows [0, 128) twice for a batch of 150)
bug bwd_channel_rounds_restart src/cuda/bn_channel.cu \
    '/static __global__ void bwd_channel_kernel/,/^}/s/stage_rows(t, r0, rows, ch0, 2, tile);/stage_rows(t, 0, rows, ch0, 2, tile);/' \
    bn_bwd
# NHWC's four neighbouring channels of a quad normalised with the first's
# a and b (bn_apply four elements a thread, src/cuda/bn.cu)
bug bn_apply4_one_channel_a_quad src/cuda/bn.cu \
    '0,/if (j == 0 || g.spread)/s/if (j == 0 || g.spread)/if (j == 0)/' bn_fwd_train nhwc
# an element's plane (cuda.h's 32-bit dividers; bn_apply and bwd_dx a
# thread an element: NCHW's planes of 49 in test_cuda_bn) as k / c, not k / np
bug channel_plane_divider src/cuda/cuda.h \
    's/hcnn_hd_div(g.np, (uint32_t)k);/hcnn_hd_div(g.c, (uint32_t)k);/' bn_fwd_train
# inference's shift b = beta - running_mean a with the mean's sign turned
# (bn_apply's a and b from the running statistics, src/cuda/bn.cu)
bug bn_infer_shift_sign src/cuda/bn.cu \
    's/\*b = co\.beta\[ch\] - co\.mean\[ch\] \* \*a;/*b = co.beta[ch] + co.mean[ch] * *a;/' bn_fwd_infer
# the bias gradient overwritten instead of accumulated
bug channel_total_overwrites src/cuda/bn_channel.cu 's/db\[ch\] += (float)s;/db[ch] = (float)s;/' conv_bwd
# im2col's window (NCHW: a thread per channel and output pixel writing its
# taps, src/cuda/conv.cu): the channel's rows of the columns taken one row
# apart instead of kh*kw (the windows of channel ci and ci + 1 overlap)
bug im2col_window_rows_overlap src/cuda/conv.cu \
    's/size_t at = (size_t)ci \* g.kh \* g.kw \* cols + q;/size_t at = (size_t)ci * cols + q;/' conv_fwd
# col2im's taps walked from tap 0 instead of (iy + ph) mod stride: with a
# stride of 2 it adds the columns of taps that never read the element
bug col2im_taps_from_zero src/cuda/conv.cu \
    's/const int ki0 = (int)(ty - oy0 \* v.sh.d), kj0 = (int)(tx - ox0 \* v.sw.d);/const int ki0 = 0, kj0 = 0;/' \
    conv_bwd_data
# The NHWC kernels (HCNN_CUDA_LAYOUT=nhwc), one bug each, their checks run
# in NHWC:
# the layout change a plain copy (layout.cu)
bug layout_change_copies src/cuda/layout.cu \
    's/y\[k\] = x\[i \* img + (size_t)ch \* np + p\];/y[k] = x[k];/' layout nhwc
# im2col reading channel 0 of every pixel (the channel stride forgotten)
bug im2col_nhwc_channel_forgotten src/cuda/conv.cu \
    's/col_store(col, colb, at, px ? px\[ci\] : 0.0f);/col_store(col, colb, at, px ? px[0] : 0.0f);/' conv_fwd nhwc
# im2col's row of a pixel in the columns taken one channel long instead of
# c (the rows of neighbouring pixels overlap)
bug im2col_nhwc_rows_overlap src/cuda/conv.cu \
    's/size_t at = ((size_t)q \* g.c + c0) \* taps + t;/size_t at = ((size_t)q + c0) * taps + t;/' conv_fwd nhwc
# every group of 8 channels of im2col's threads starting at channel 0 (the
# channels past the first 8 never written: the cases with 16 channels)
bug im2col_nhwc_groups_from_channel_0 src/cuda/conv.cu \
    's/const int c0 = (int)group \* IM2COL_NHWC_GROUP;/const int c0 = 0;/' conv_fwd nhwc
# col2im overwriting dx when asked to accumulate
bug col2im_nhwc_ignores_accumulate src/cuda/conv.cu \
    '/static __global__ void col2im_kernel/,/^}/s/float s = acc ? dx\[k\] : 0.0f;/float s = NHWC ? 0.0f : acc ? dx[k] : 0.0f;/' \
    conv_bwd_data nhwc
# the NHWC bias gradient overwritten instead of accumulated (bias.cu)
bug nhwc_channel_sum_overwrites src/cuda/bias.cu 's/db\[ch\] += (float)s;/db[ch] = (float)s;/' \
    conv_bwd nhwc
# batch-norm's block deviations taken from 0 instead of the block's mean
bug bn_nhwc_deviations_from_zero src/cuda/bn_nhwc.cu \
    's/rows_sum(p, cnt, (size_t)c, 1, mean)/rows_sum(p, cnt, (size_t)c, 1, 0.0f)/' bn_fwd_train nhwc
# the blocks' table written [channel][block], hd.h's tables' order, where
# bn_channel_stats reads it [block][channel] (by_piece)
bug bn_nhwc_table_by_channel src/cuda/bn_nhwc.cu \
    's/table\[2 \* k\] = mean;/table[(ch * blocks + b) * 2] = mean;/;s/table\[2 \* k + 1\] = rows_sum(/table[(ch * blocks + b) * 2 + 1] = rows_sum(/' \
    bn_fwd_train nhwc
# the backward's block sums without the rows after the 16 lanes' blocks
bug bn_nhwc_bwd_without_tail src/cuda/bn_nhwc.cu \
    '/static __global__ void nhwc_bwd_block_kernel/,/^}/s/for (int i = whole; i < cnt; i++) {/for (int i = cnt; i < cnt; i++) {/' \
    bn_bwd nhwc
# max pooling reading its window without the channel stride
bug maxpool_nhwc_channel_stride src/cuda/pool.cu \
    '/static __global__ void maxpool_fwd_kernel/,/^}/s/const size_t st = NHWC ? (size_t)g.c : 1;/const size_t st = 1;/' \
    maxpool_fwd nhwc
# The ways (src/cuda/conv_choice.cu), under $WAYS: the image-by-image
# forward (NCHW's GEMMs then write y in place) without the bias
bug image_forward_without_bias src/cuda/conv.cu \
    '/if (nb == 1) { \/\* \[Cout\]\[P\] is the image/,/continue;/s/bias_relu(be, d, yi, b, 1, relu);/bias_relu(be, d, yi, NULL, 1, relu);/' \
    "$CONV_CHECKS" auto "$WAYS"
# the data gradient walked apart from the filter gradient's chunks
# overwriting dx when asked to accumulate
bug split_backward_ignores_accumulate src/cuda/conv.cu \
    's/backward_im2col(be, d, ex, NULL, w, dy, NULL, dx, dx_acc, n, cx);/backward_im2col(be, d, ex, NULL, w, dy, NULL, dx, 0, n, cx);/' \
    "$CONV_CHECKS" auto "$WAYS"
# The ReLU after a convolution run in its forward (backend.h, conv_relu):
# forgotten by the chunked NCHW forward's last kernel, by the bias addition
# of the image-by-image forward, and by NHWC's (conv_relu: against the
# references and conv_fwd then relu_fwd)
bug chunked_forward_relu_forgotten src/cuda/conv.cu \
    's/    y\[k\] = relu ? hcnn_hd_relu(out) : out;/    y[k] = out;/' conv_relu
bug image_forward_relu_forgotten src/cuda/bias.cu \
    '/static __global__ void add_bias_kernel/,/^}/s/y\[k\] = relu ? hcnn_hd_relu(v) : v;/y[k] = v;/' \
    conv_relu auto "$WAYS"
# an element's channel (cuda.h's 32-bit dividers, bias.cu's addition and
# bn.cu's kernels a thread an element) by the plane's quotient by the
# channels, not the remainder: NHWC's rows of c
bug channel_by_quotient src/cuda/cuda.h \
    's/return (int)(plane - hcnn_hd_div(g.c, plane) \* g.c.d);/return (int)hcnn_hd_div(g.c, plane);/' \
    conv_fwd nhwc
# The data gradient as a transposed convolution, under $TRANSPOSED: the
# filters transposed but not flipped; dy padded as the forward pads x (the
# same for a kernel of 2p + 1: the suite's unpadded 3x3 shows it); the sum
# into dx over a chunk of images (NCHW's channel-major copy) and NHWC's
# GEMM overwriting dx when asked to accumulate
bug transposed_filters_not_flipped src/cuda/conv.cu \
    's/\* taps + (taps - 1 - t)\];/* taps + t];/' conv_bwd_data auto "$TRANSPOSED"
bug transposed_padding_as_forward src/cuda/conv.cu \
    's/t.g.ph = g->kh - 1 - g->ph, t.g.pw = g->kw - 1 - g->pw;/t.g.ph = g->ph, t.g.pw = g->pw;/' \
    conv_bwd_data auto "$TRANSPOSED"
bug transposed_chunk_ignores_accumulate src/cuda/conv.cu \
    's/const float out = acc ? biased + y\[k\] : biased;/const float out = biased;/' conv_bwd_data auto "$TRANSPOSED"
bug transposed_nhwc_ignores_accumulate src/cuda/conv.cu \
    's/conv_gemm(be, 0, 1, nb \* P, co, K, col, bp.col, K, w, bp.w, K, beta,/conv_gemm(be, 0, 1, nb * P, co, K, col, bp.col, K, w, bp.w, K, 0.0f,/' \
    conv_bwd_data nhwc "$TRANSPOSED"
wait
show_done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
