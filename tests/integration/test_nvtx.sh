#!/usr/bin/env bash
# NVTX ranges for Nsight (issue 42; src/core/trace.h): hcnn's ranges as a
# tool sees them.  tests/nvtx_inject.so, the NVTX tool make check builds,
# is loaded by NVTX3 from NVTX_INJECTION64_PATH and logs every push and pop
# (process, thread, name) to HCNN_NVTX_LOG.  Two steps of LeNet-5 on
# synthetic data, serial on 2 threads, data-parallel on 2 ranks and a
# pipeline of 2 stages: every layer has its forward and backward range in
# every step, named as its row of hcnn bench's per-block profile ("fwd 3
# conv2 (conv)"); the step, forward, backward and optimizer ranges and the
# strategy's communication ranges are there; pushes and pops balance on
# every thread; a run with the tool attached writes the same checkpoint bits
# as one without; with the CUDA backend (the emulation, or a GPU), a step
# replayed from CUDA graphs has no layer ranges.  Skipped (77) in a build
# without NVTX.  About 7 s on 2 cores (12 with the emulation).
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
INJECT="$HCNN_BUILDDIR/tests/nvtx_inject.so"

nvtx_line=$("$HCNN" --version 2>&1 | grep '^NVTX:')
if ! grep -q '^NVTX: ranges compiled in' <<<"$nvtx_line"; then
    case_begin nvtx_ranges
    case_skip "this build has no NVTX ranges (--version: '${nvtx_line:-no NVTX line}')"
    finish
fi
case_begin injection_library_built
if [ -f "$INJECT" ]; then case_ok
else
    case_fail "$INJECT missing: make check builds it (Makefile.am, tests/nvtx_inject.c)"
    finish
fi

# (blas_kernels=env: the BLAS's kernels as the environment says, no
# measurement or re-execution: every run of the test the same)
LENET=(--config "$HCNN_SRCDIR/configs/mnist_lenet.yaml" --set dataset=synthetic
       --set synthetic_train=128 --set synthetic_test=32 --set batch_size=32 --set blas_kernels=env)
RUN=(-q "${LENET[@]}" --set epochs=1 --set max_steps=2 --set csv=)

# The layers as hcnn bench's profile lists them: row i (from 0), name,
# kind; their ranges are "fwd i name (kind)" and "bwd i name (kind)".
timeout -k 5 60 "$HCNN" bench "${LENET[@]}" --warmup 0 --repeats 1 --steps 1 \
    >"$WORK/bench.log" 2>&1
awk '/^# block/ { t = 1; next } t && /^  [^ ]/ { printf "%d %s (%s)\n", n++, $1, $2; next } t { t = 0 }' \
    "$WORK/bench.log" >"$WORK/layers"
case_begin profile_rows
if [ "$(wc -l <"$WORK/layers")" -ge 10 ]; then case_ok
else case_fail "hcnn bench's profile lists $(wc -l <"$WORK/layers") rows: $(tail -n 3 "$WORK/bench.log")"; fi

# traced NAME CMD...: CMD with the tool attached, its log in $WORK/NAME.nvtx
traced() {
    local name=$1
    shift
    rm -f "$WORK/$name.nvtx"
    NVTX_INJECTION64_PATH=$INJECT HCNN_NVTX_LOG=$WORK/$name.nvtx "$@" >"$WORK/$name.log" 2>&1
}

# check_log LOG MODE RANGES: the log's ranges, per process (rank).  MODE
# all: every step of a process holds each layer's fwd and bwd range; stage:
# every step of a process holds the same layers, and the processes together
# hold every layer (a pipeline's stages).  RANGES: the other ranges every
# step holds (names separated by commas).  Each process makes 2 steps;
# pushes and pops balance per thread.  Prints what is wrong, nothing if all
# is right.  A range belongs to a step when its push comes between the
# step's push and pop (the tool's lines are appended in the order made).
check_log() {
    awk -v mode="$2" -v ranges="$3" -v want_steps=2 '
    FNR == NR { L[++nl] = $0; next }   # the layers file: "i name (kind)"
    $1 == "push" {
        p = $2; key = $2 " " $3
        name = $0; sub(/^push [0-9]+ [0-9]+ /, "", name)
        stack[key, ++depth[key]] = name
        procs[p] = 1
        if (name == "step") { steps[p]++; main[p] = $3; open[p] = 1 }
        else if (open[p]) seen[p, steps[p], name] = 1
        next
    }
    $1 == "pop" {
        key = $2 " " $3
        if (depth[key] < 1) { print "pop without push on process " $2 " thread " $3; bad = 1; next }
        name = stack[key, depth[key]--]
        if (name == "step" && $3 == main[$2]) open[$2] = 0
        next
    }
    { print "unexpected line: " $0; bad = 1 }
    END {
        for (k in depth) if (depth[k] != 0) { print "process/thread " k ": " depth[k] " ranges never popped"; bad = 1 }
        np = 0
        for (p in procs) np++
        if (np == 0) { print "no ranges logged"; exit 1 }
        nr = split(ranges, R, ",")
        for (p in procs) {
            if (steps[p] != want_steps) { print "process " p ": " steps[p] + 0 " step ranges, expected " want_steps; bad = 1 }
            for (st = 1; st <= steps[p]; st++) {
                for (r = 1; r <= nr; r++)
                    if (!((p, st, R[r]) in seen)) { print "process " p " step " st ": no \"" R[r] "\" range"; bad = 1 }
                n_here = 0
                for (i = 1; i <= nl; i++) {
                    fw = ((p, st, "fwd " L[i]) in seen); bw = ((p, st, "bwd " L[i]) in seen)
                    if (fw != bw) { print "process " p " step " st ": " (fw ? "fwd" : "bwd") " without " (fw ? "bwd" : "fwd") " for " L[i]; bad = 1 }
                    if (fw) { n_here++; have[p, i] = 1; any[i] = 1 }
                    if (mode == "all" && !fw) { print "process " p " step " st ": no fwd/bwd range of layer " L[i]; bad = 1 }
                    if (mode == "stage" && st > 1 && fw != ((p, 1, "fwd " L[i]) in seen)) { print "process " p ": step " st " differs from step 1 on " L[i]; bad = 1 }
                }
                if (n_here == 0) { print "process " p " step " st ": no layer range"; bad = 1 }
            }
        }
        if (mode == "stage") {
            if (np < 2) { print "one process logged ranges, expected the 2 stages"; bad = 1 }
            for (i = 1; i <= nl; i++) if (!(i in any)) { print "no stage has the ranges of layer " L[i]; bad = 1 }
        }
        exit bad
    }' "$WORK/layers" "$1"
}

# verdict NAME MODE RANGES: the case of run NAME (its checkpoint and log)
verdict() {
    local name=$1 why
    if [ ! -f "$WORK/$name/final.hcnn" ]; then
        case_fail "the run failed: $(tail -n 3 "$WORK/$name.log")"
    elif [ ! -s "$WORK/$name.nvtx" ]; then
        case_fail "the tool logged nothing (NVTX_INJECTION64_PATH=$INJECT): $(tail -n 3 "$WORK/$name.log")"
    elif ! why=$(check_log "$WORK/$name.nvtx" "$2" "$3") || [ -n "$why" ]; then
        case_fail "$(head -n 5 <<<"$why")"
    else
        echo "# $(grep -c '^push' "$WORK/$name.nvtx") ranges on $(awk '{ print $2, $3 }' "$WORK/$name.nvtx" | sort -u | wc -l) threads"
        case_ok
    fi
}

# ---- serial, 2 threads (whole-network units: layer ranges on both threads)
case_begin serial_ranges
traced serial env OMP_NUM_THREADS=2 timeout -k 5 60 "$HCNN" train "${RUN[@]}" \
    --set checkpoint_dir="$WORK/serial"
verdict serial all "forward,backward,optimizer"

# the same run with no tool: the same bits (the ranges change nothing)
case_begin serial_same_bits_without_tool
OMP_NUM_THREADS=2 timeout -k 5 60 "$HCNN" train "${RUN[@]}" --set checkpoint_dir="$WORK/plain" \
    >"$WORK/plain.log" 2>&1
if [ ! -f "$WORK/plain/final.hcnn" ]; then case_fail "$(tail -n 3 "$WORK/plain.log")"
elif same_bits "$WORK/serial/final.hcnn" "$WORK/plain/final.hcnn"; then case_ok
else case_fail "$("$HCNN" diff "$WORK/serial/final.hcnn" "$WORK/plain/final.hcnn" --tol 0 2>&1 | tail -n 1)"; fi

# the batched path (conv_algo: batched: block by block, one thread drives)
case_begin serial_batched_ranges
traced batched env OMP_NUM_THREADS=2 timeout -k 5 60 "$HCNN" train "${RUN[@]}" \
    --set conv_algo=batched --set checkpoint_dir="$WORK/batched"
verdict batched all "forward,backward,optimizer"

# a log the check must refuse: a pop lost (the test can fail)
case_begin check_refuses_unbalanced_log
if [ -s "$WORK/serial.nvtx" ]; then
    awk '!(/^pop / && ++n == 3)' "$WORK/serial.nvtx" >"$WORK/broken.nvtx"
    if check_log "$WORK/broken.nvtx" all "forward" >"$WORK/broken.why"; then
        case_fail "a log with a pop removed passed the check"
    elif grep -q 'never popped' "$WORK/broken.why"; then case_ok
    else case_fail "unexpected complaint: $(head -n 2 "$WORK/broken.why")"; fi
else
    case_fail "no serial log to break"
fi

# ---- CUDA graphs (docs/gpu-nodes.md, "Profiling with Nsight"): on one rank
# the step is run directly for each of the loader's two buffers (steps 1-2),
# captured (3-4), then replayed (5-6), and a replay runs no layer's host
# code: its step has the optimizer range but no fwd/bwd ranges.  Where the
# build has the CUDA backend (the emulation, or a GPU)
case_begin cuda_graphs_replays_have_no_layer_ranges
if "$HCNN" --version | grep -q '^CUDA: none'; then
    case_skip "no CUDA backend in this build"
else
    traced graphs env OMP_NUM_THREADS=2 timeout -k 5 120 "$HCNN" train "${RUN[@]}" --set device=cuda \
        --set max_steps=6 --set synthetic_train=256 --set checkpoint_dir="$WORK/graphs"
    # the layer and optimizer ranges pushed while a step range is open
    per_step=$(awk '$1 == "push" { n = $0; sub(/^push [0-9]+ [0-9]+ /, "", n); st[$3, ++d[$3]] = n
                                   if (n == "step") { s++; open = 1 }
                                   else if (open && n ~ /^(fwd|bwd) /) c[s]++
                                   else if (open && n == "optimizer") o[s]++ }
                    $1 == "pop" && d[$3] > 0 { if (st[$3, d[$3]--] == "step") open = 0 }
                    END { for (i = 1; i <= s; i++) printf "%d:%d ", c[i], o[i] }' "$WORK/graphs.nvtx" 2>/dev/null)
    nl=$(wc -l <"$WORK/layers")
    # a ReLU right after a convolution runs in the convolution's forward on
    # the CUDA backend (conv_relu: one forward range for the two)
    fused=$(awk '$3 == "(relu)" && prev == "(conv)" { n++ } { prev = $3 } END { print n + 0 }' "$WORK/layers")
    per=$((2 * nl - fused))
    want="$per:1 $per:1 $per:1 $per:1 0:1 0:1 "
    if [ ! -f "$WORK/graphs/final.hcnn" ] && grep -q 'no usable GPU' "$WORK/graphs.log"; then
        case_skip "device: cuda has no GPU here: $(grep -m1 'no usable GPU' "$WORK/graphs.log")"
    elif [ ! -f "$WORK/graphs/final.hcnn" ]; then
        case_fail "the run failed: $(tail -n 3 "$WORK/graphs.log")"
    elif [ "$per_step" = "$want" ]; then
        case_ok
    else
        case_fail "layer ranges:optimizer ranges per step '$per_step', expected '$want'"
    fi
fi

mpi_setup
MPI_ENV=(-x NVTX_INJECTION64_PATH -x HCNN_NVTX_LOG)

# ---- data-parallel, 2 ranks: the gradient allreduce's ranges in each step
case_begin data_parallel_ranges
traced data "${MPIRUN[@]}" "${MPI_ENV[@]}" -np 2 "$HCNN" train "${RUN[@]}" --set strategy=data \
    --set bucket_mb=0.05 --set checkpoint_dir="$WORK/data"
verdict data all "forward,backward,optimizer,allreduce start,allreduce wait"

case_begin data_parallel_same_bits_without_tool
"${MPIRUN[@]}" -np 2 "$HCNN" train "${RUN[@]}" --set strategy=data --set bucket_mb=0.05 \
    --set checkpoint_dir="$WORK/data_plain" >"$WORK/data_plain.log" 2>&1
if [ ! -f "$WORK/data_plain/final.hcnn" ]; then case_fail "$(tail -n 3 "$WORK/data_plain.log")"
elif same_bits "$WORK/data/final.hcnn" "$WORK/data_plain/final.hcnn"; then case_ok
else case_fail "$("$HCNN" diff "$WORK/data/final.hcnn" "$WORK/data_plain/final.hcnn" --tol 0 2>&1 | tail -n 1)"; fi

# ---- a pipeline of 2 stages: each stage's layers, its transfers
case_begin pipeline_ranges
traced pipe "${MPIRUN[@]}" "${MPI_ENV[@]}" -np 2 "$HCNN" train "${RUN[@]}" --set strategy=pipeline \
    --set stages=2 --set microbatches=2 --set checkpoint_dir="$WORK/pipe"
verdict pipe stage "forward,backward,optimizer,pipeline transfers,pipeline wait"

finish
