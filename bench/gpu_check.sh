#!/usr/bin/env bash
# The GPU checks of one session on a GPU machine, from the source tree's
# root there, with a bundle of scripts/gpu-bundle.sh (a --with-cuda build
# made elsewhere, with the libraries the machine lacks):
#   tests   tests/integration/test_cuda.sh under each convolution choice (HCNN_CUDA_CONV
#           unset, cudnn, im2col; side by side) and test_compare_cuda.sh
#           beside them, and the conformance suite's whole log
#   bench   hcnn bench ResNet-18 batch 128 (each choice, per-layer profile),
#           bench/compare.sh against PyTorch on the same GPU: ResNet-18
#           batch 128 in fp32, tf32, bf16, LeNet-5 batch 64 and 256; PyTorch
#           in NCHW and channels_last in the same alternated rounds, its
#           faster median the reference (issue 42), and in TF32 (the target
#           not reached) hcnn likewise in NCHW and NHWC activations
#           (compare.sh --hcnn-layout best: whether auto should choose
#           NHWC), 3 rounds, each PyTorch mode's runs made by one process
#           (compare.sh's --peer-process server, below; COMPARE_ROUNDS,
#           COMPARE_FORMAT=nchw|channels_last|best,
#           COMPARE_HCNN_LAYOUT=auto|nchw|nhwc|best for every ResNet-18
#           comparison, and COMPARE_PEER_PROCESS=server|per-run in the
#           environment); its diagnostics: hcnn bench with NHWC activations
#           in fp32 and bf16 (HCNN_CUDA_LAYOUT=nhwc) and bf16 by cuDNN's
#           graphs in both layouts (HCNN_CUDA_CONV=cudnn)
#   kernels the kernel time of hcnn bench's timed steps (bench/kernel_share.so,
#           a CUPTI injection library: the share and the twenty longest kernels),
#           ResNet-18 batch 128 fp32 under each convolution choice, LeNet-5
#           batch 256 with and without CUDA graphs; its diagnostics: ResNet-18
#           in tf32 with PyTorch's tf32 step beside it (bench/pytorch/peer.py
#           --profiler-windows, under the same library) and in tf32 with NHWC
#           activations, bf16 (auto), the data
#           gradient transposed by cuDNN, cuDNN's Winograd, and PyTorch's fp32
#           step
#   (run in this order: tests; bench's and kernels' runs that targets are
#   judged by, the TF32 comparison first (its target not reached); their
#   diagnostics, where GPU_CHECK_SECONDS cuts first; nsight, bounded at
#   about a minute; cpu, which takes what is left)
#   diagnostics  kernels' and bench's diagnostics alone, without their
#           targets' runs: a second call's, when the first was cut there
#   cpu     bench/validate_threads.sh: hcnn bench on the CPU at 1, 2, 4, 8, 16
#           threads against hcnn plan --node here's prediction (ResNet-18 batch
#           64, LeNet-5 batch 256: the thread-scaling measurements) and
#           PyTorch's ResNet-18 at the largest thread count (CPU_THREADS in
#           the environment: the thread counts, e.g. "1 4 16", for a short loan;
#           CPU_MODELS, CPU_ROUNDS: validate_threads.sh's MODELS and ROUNDS,
#           default the two models, one round)
#   nsight  the excerpts of docs/gpu-nodes.md's "Profiling with Nsight": Nsight
#           Compute (ncu) on 12 kernels of hcnn bench ResNet-18 batch 128
#           (HCNN_CUDA_CONV=im2col, cuda_graphs: off) inside the NVTX ranges of
#           layer2.0's first convolution and batch-norm, forward and backward
#           (nsight_ncu.log), the batch-norm's 6 in NHWC activations
#           (nsight_ncu_nhwc.log), and, where nsys is installed, Nsight Systems on 5
#           steps of the same bench with its NVTX, NVTX-on-GPU and kernel
#           summaries (nsight_nsys.log).  Not in the default SECTIONS (those
#           took 541 s under GPU_CHECK_SECONDS=550 on 2026-11-30, cut): its
#           own call, bench/gpu_check.sh BUNDLE "" nsight, about 10 s for
#           ncu's 12 kernels on the H200 (2026-11-30; nsys not installed
#           there; the NHWC run not yet timed; bounded: ncu 2 x 60 s, nsys
#           60 s, its summaries 3 x 30 s).  Needs a build
#           with NVTX (hcnn --version: "NVTX: ranges compiled in"; on by
#           default with --with-cuda)
#
#   bench/gpu_check.sh BUNDLE.tar.xz [OUTDIR] [SECTIONS]
#   (OUTDIR "" or none: the run's own folder under results/gpu/, below;
#   SECTIONS default: tests kernels bench cpu; nsight on request)
#
# GPU_CHECK_SECONDS (environment; unset or 0: no limit): the seconds the
# whole run may take.  Each run in it is bounded by its own timeout or by
# what is left of them (less 10 s for the summary), whichever is shorter; a
# run with under 5 s left is skipped.  Each cut or skipped run is named in
# session.log and counted in the INDEX line, and the run still ends with
# its summary: for a device call whose limit would otherwise kill the
# script mid-run (docs/gpu-nodes.md, "The GPU test machine").  What a run
# leaves running when it ends or is cut (a timeout inside it starts a
# process group of its own, out of reach of the bound's) is killed and
# named in session.log.
#
# Writes session.log (session-2.log, ... when OUTDIR has one) and one log per
# run to OUTDIR, relative to the source tree's root.  Without OUTDIR: a new
# folder results/gpu/DATE-GPU-COMMIT (UTC date, the GPU's model, the build's
# commit from the bundle, else the tree's; then the sections, e.g. -cpu,
# for a call without the tests; -2, -3... when it exists), and a
# line for it in results/gpu/INDEX, finished with the headline results (the
# tests passed, the ratios to PyTorch, the kernel share) when the run ends.
# PyTorch runs with the machine's own python3 and libraries (PYTHON, else
# python3 on PATH).  Docs: docs/gpu-nodes.md, "The GPU test machine".
# Exit status: 0 done (read the logs: failed tests are reported there), 1 the
# bundle does not unpack or hcnn does not start, 2 bad command line or
# GPU_CHECK_SECONDS.
set -u
[ $# -ge 1 ] && [ -f "$1" ] || { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
bundle=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
O=${2:-}
SECTIONS=${3:-tests kernels bench cpu}
has() { [[ " $SECTIONS " == *" $1 "* ]]; } # has SECTION: SECTION asked for
t0=$(date +%s)
budget=${GPU_CHECK_SECONDS:-0}
case $budget in
'' | *[!0-9]*) echo "gpu_check.sh: GPU_CHECK_SECONDS=$budget: expected a whole number of seconds" >&2; exit 2 ;;
esac
budget=$((10#$budget)) # 0550 is 550, not octal
cd "$(dirname "$0")/.." || exit 1
R=$PWD
B=$(mktemp -d)
trap 'rm -rf "$B"' EXIT
trap 'exit 143' TERM INT
tar -xJf "$bundle" -C "$B" || { echo "gpu_check.sh: $bundle does not unpack"; exit 1; }
gpu=$(timeout -k 5 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
index="" run=""
if [ -z "$O" ]; then
    # the run's folder: DATE-GPU-COMMIT, e.g. 2026-11-27-h100-1b717f3
    # ("NVIDIA H100 80GB HBM3" -> h100: the model's first word with a digit)
    g=$(echo "${gpu:-nogpu}" | tr '[:upper:]' '[:lower:]' | sed -E 's/\b(nvidia|tesla|geforce|quadro)\b//g' |
        awk '{ s = ""; for (i = 1; i <= NF; i++) { t = $i; sub(/-.*/, "", t); s = s (s == "" ? "" : "-") t; if (t ~ /[0-9]/) break } print s }' |
        tr -cd 'a-z0-9-')
    commit=""
    [ -f "$B/build/hcnn_git.h" ] && commit=$(sed -n 's/^#define HCNN_GIT_COMMIT "\(.*\)"$/\1/p' "$B/build/hcnn_git.h")
    [ -n "$commit" ] || commit=$(git -C "$R" rev-parse --short=7 HEAD 2>/dev/null)
    case $commit in
    "" | unknown) commit=unknown ;;
    *-dirty) commit=${commit:0:7}-dirty ;;
    *) commit=${commit:0:7} ;;
    esac
    run=$(date -u +%F)-${g:-gpu}-$commit
    # a call without the tests (the CPU sweep's, Nsight's: a second call of a
    # loan, perhaps on a machine lent afresh, without the first call's
    # folder) names its sections, so that its folder and INDEX line do not
    # take the first call's name
    has tests || run=$run-$(echo "$SECTIONS" | tr -s ' ' '-' | tr -cd 'a-z0-9-')
    base=$run n=2
    while [ -e "results/gpu/$run" ]; do run=$base-$n; n=$((n + 1)); done
    O=results/gpu/$run index=$R/results/gpu/INDEX
fi
mkdir -p "$O" || exit 1
O=$(cd "$O" && pwd)
log=$O/session.log n=2
while [ -e "$log" ]; do log=$O/session-$n.log; n=$((n + 1)); done
if [ -n "$index" ]; then
    # the line is finished at the end; a run cut off leaves it saying so
    echo "$run | $(date -u +%F) | ${gpu:-no GPU} | $commit | bench/gpu_check.sh $SECTIONS | unfinished: see ${log##*/}" >>"$index"
fi
exec > >(tee "$log") 2>&1
tee_pid=$! # waited for at the end: session.log whole before the script returns
exec 3>&1 # session.log, for bounded's lines from runs whose output goes to their own logs
stamp() { echo "=== $(($(date +%s) - t0))s: $*"; }
# bounded SECONDS COMMAND...: COMMAND under timeout -k 5 SECONDS, or under
# what GPU_CHECK_SECONDS leaves (less 10 s for the summary) where that is
# shorter; skipped (status 124) with under 5 s left.  The runs cut or
# skipped are named in session.log and in $B/cut (the INDEX line counts them).
bounded() {
    local s=$1 left rc what tok
    shift
    # (with the convolution choice and layout it was given: three
    # test_cuda.sh run side by side, told apart)
    what="${HCNN_CUDA_CONV:+HCNN_CUDA_CONV=$HCNN_CUDA_CONV }"
    what+="${HCNN_CUDA_LAYOUT:+HCNN_CUDA_LAYOUT=$HCNN_CUDA_LAYOUT }${1##*/} ${*:2}"
    what=${what:0:200}
    if [ "$budget" -gt 0 ]; then
        left=$((budget - 10 - ($(date +%s) - t0)))
        if [ "$left" -lt 5 ]; then
            echo "gpu_check.sh: skipped, GPU_CHECK_SECONDS=$budget spent: $what" | tee -a "$B/cut" >&3
            return 124
        fi
    fi
    # (fd 3 closed: a process a run leaves behind holds no session.log)
    tok=$BASHPID.$(date +%s%N)
    if [ "$budget" -gt 0 ] && [ "$left" -lt "$s" ]; then
        HCNN_GPU_CHECK_RUN=$tok timeout -k 5 "$left" "$@" 3>&-
        rc=$?
        if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
            echo "gpu_check.sh: cut after ${left} s by GPU_CHECK_SECONDS=$budget (its own bound: $s s): $what" |
                tee -a "$B/cut" >&3
        fi
    else
        HCNN_GPU_CHECK_RUN=$tok timeout -k 5 "$s" "$@" 3>&-
        rc=$?
    fi
    sweep "$tok" "$what"
    return "$rc"
}
# sweep TOKEN WHAT: kills what a run left running, named in session.log:
# the processes whose environment holds HCNN_GPU_CHECK_RUN=TOKEN.  timeout
# kills its own process group only, and a timeout inside the run (each of
# test_cuda.sh's hcnn runs has one) starts a group of its own: cut by
# bounded, such a run would go on using the GPU beside the next runs
sweep() {
    local f pid name left=()
    while read -r f; do
        pid=${f#/proc/} pid=${pid%/environ}
        name=$(cat "/proc/$pid/comm" 2>/dev/null)
        kill -9 "$pid" 2>/dev/null && left+=("$pid $name")
    done < <(grep -lsxzF "HCNN_GPU_CHECK_RUN=$1" /proc/[0-9]*/environ)
    local IFS=';'
    [ ${#left[@]} -eq 0 ] || echo "gpu_check.sh: killed ${#left[@]} process(es) left running by $2: ${left[*]}" >&3
}

stamp "the machine"
echo "logs: $O"
bounded 30 nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap,clocks.max.sm --format=csv
lscpu | grep -E 'Model name|^CPU\(s\)|Thread\(s\)|Socket|L3' | cut -c1-200
ldd --version | head -n 1
PY=${PYTHON:-python3}
bounded 60 "$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version())' 2>&1
# Open MPI and PMIx from the bundle: their compiled-in paths where the
# machine has none (Open MPI reads OPAL_PREFIX; PMIx's help files do not
# move with it), the components through the environment
for d in usr/lib/x86_64-linux-gnu/openmpi usr/lib/x86_64-linux-gnu/pmix2 usr/share/openmpi etc/openmpi; do
    if [ ! -e "/$d" ]; then
        mkdir -p "$(dirname "/$d")" && ln -s "$B/root/$d" "/$d" && echo "linked /$d to the bundle's"
    fi
done
export OPAL_PREFIX=$B/root/usr PMIX_INSTALL_PREFIX=$B/root/usr/lib/x86_64-linux-gnu/pmix2
export PMIX_MCA_mca_base_component_path=$B/root/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
export PMIX_MCA_pcompress_base_silence_warning=1
export PATH=$B/root/usr/bin:$PATH
# CUDA's libraries: the toolkit's, else wherever the machine has them
libdir() { dirname "$(timeout -k 5 30 find /usr/local/cuda* /usr/lib /opt -name "$1" 2>/dev/null | head -n 1)"; }
LD_LIBRARY_PATH=$B/lib:$(libdir libcublas.so.13):$(libdir libcudart.so.13):$(libdir libcudnn.so.9)
# CUPTI for bench/kernel_share.so: the machine's, else the bundle's
cupti=$(libdir libcupti.so.13)
[ "$cupti" = . ] && cupti=$B/cupti
LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$cupti
export LD_LIBRARY_PATH
export HCNN_BUILDDIR=$B/build HCNN_SRCDIR=$R HCNN=$B/build/hcnn
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# the measurements' cache in the logs: HCNN_CUDA_CONV=auto's measured ways
# (src/cuda/conv_choice.cu: each convolution shape's passes timed by way),
# which the first ResNet-18 run writes and the later ones read, are results.
# (The BLAS kernels' table of blas_kernels: auto goes there too, from the
# runs on the CPU: a device: cuda run measures none since a1055ed.)
export XDG_CACHE_HOME=$O/cache
if [ -d "$B/mnist" ] && [ ! -e data/mnist/train-images-idx3-ubyte ]; then
    mkdir -p data/mnist && cp "$B"/mnist/*.gz data/mnist/
fi
if ! timeout -k 5 60 "$HCNN" --version; then
    [ -d "$B/build1" ] || { echo "gpu_check.sh: hcnn does not start here"; exit 1; }
    echo "gpu_check.sh: the first build does not start here: build1 instead"
    export HCNN_BUILDDIR=$B/build1 HCNN=$B/build1/hcnn
    timeout -k 5 60 "$HCNN" --version || exit 1
fi
# OpenBLAS 0.3.21 does not know the GPU machine's Xeon (a VM's CPU model,
# AVX-512 and AMX): its own choice, which the runs with blas_kernels: env
# take (the tests' CPU references), was Prescott's generic kernels in every
# session up to 2026-11-30, when hcnn's blas_kernels: auto measured
# SkylakeX's 4.7-8.6x faster there
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo &&
    timeout -k 5 60 "$HCNN" --version 2>/dev/null | grep -q 'kernels: Prescott'; then
    export OPENBLAS_CORETYPE=SkylakeX
    echo "gpu_check.sh: OpenBLAS chose Prescott's kernels on an AVX-512 CPU: OPENBLAS_CORETYPE=SkylakeX for every run"
fi
# PyTorch with the machine's libraries, not the bundle's
printf '#!/bin/sh\nunset LD_LIBRARY_PATH\nexec %s "$@"\n' "$PY" > "$B/python" && chmod +x "$B/python"
modes=im2col
grep -q '^#define HCNN_HAVE_CUDNN 1' "$HCNN_BUILDDIR/config.h" && modes="auto cudnn im2col"

if has tests; then
    stamp "the conformance suite on cuda"
    HCNN_CONFORMANCE_BACKENDS=cuda bounded 120 "$HCNN_BUILDDIR/tests/conformance/test_backend" \
        > "$O/conformance.log" 2>&1
    echo "exit $?"
    stamp "tests/integration/test_cuda.sh under each convolution choice, side by side: $modes"
    pids=()
    for m in $modes; do
        HCNN_CUDA_CONV=$m bounded 300 bash tests/integration/test_cuda.sh > "$O/test_cuda_$m.log" 2>&1 &
        pids+=($!)
    done
    # beside them: the device line's convolution ways, compare.sh's
    # --hcnn-layout (LeNet-5, a step a run: seconds)
    bounded 120 bash tests/integration/test_compare_cuda.sh > "$O/test_compare_cuda.log" 2>&1 &
    cpid=$!
    i=0
    for m in $modes; do
        wait "${pids[$i]}"
        echo "--- HCNN_CUDA_CONV=$m: tests/integration/test_cuda.sh exit $?"
        grep -E '^\[  (FAILED|PASSED)|^# |FAIL' "$O/test_cuda_$m.log" | head -n 40
        i=$((i + 1))
    done
    wait "$cpid"
    echo "--- tests/integration/test_compare_cuda.sh exit $?"
    grep -E '^\[  (FAILED|PASSED|SKIPPED)|^# |FAIL' "$O/test_compare_cuda.log" | head -n 20
fi

# The kernel times (bench/kernel_share.so: CUPTI) of hcnn bench, ResNet-18
# batch 128 fp32 under each convolution choice and LeNet-5 batch 256 with
# and without CUDA graphs (the kernel-share target's runs).  Their own
# XDG_CACHE_HOME: HCNN_CUDA_CONV=auto's ways measured under CUPTI, which
# adds its cost to every launch timed, would otherwise be the ways of
# every later run, the comparisons' included (the H100's first auto run,
# measuring under CUPTI, took 21 s, the runs after it 2-3 s; the bench
# section's first auto run now measures again, without CUPTI: up to that
# difference more, not yet measured)
ks=$HCNN_BUILDDIR/bench/kernel_share.so
kbench() { # name, bound (s), convolution choice, hcnn bench arguments...
    local name=$1 s=$2 m=$3
    shift 3
    stamp "kernel time: $name"
    XDG_CACHE_HOME=$O/cache-cupti CUDA_INJECTION64_PATH=$ks HCNN_CUDA_CONV=$m bounded "$s" "$HCNN" bench "$@" \
        > "$O/kernels_$name.log" 2>&1
    echo "exit $?"; grep -E '^kernel_(share|top)|^images_per_s|captured|^# setup_ms' "$O/kernels_$name.log"
}
kernels_targets() {
    local m g
    for m in $modes; do
        kbench "resnet_b128_$m" 90 "$m" --config configs/cifar_resnet18.yaml --set device=cuda \
            --set batch_size=128 --warmup 3 --repeats 3 --steps 5
    done
    for g in auto off; do
        kbench "lenet_b256_graphs_$g" 90 auto --config configs/mnist_lenet.yaml --set device=cuda \
            --set batch_size=256 --set cuda_graphs=$g --warmup 20 \
            --repeats 3 --steps 50
    done
}
# The kernel times the targets' runs leave open (60 s each: the runs above
# took 2-21 s on the H100), the unreached target's first, and PyTorch's own
# steps
kernels_diagnostics() {
    # TF32, the target not reached (0.98x PyTorch on the H200 of 2026-11-30,
    # 1.5x asked; PyTorch's TF32 twice its FP32, hcnn's 1.4x): hcnn's
    # kernels in TF32 (none logged yet: the runs above are FP32), then
    # PyTorch's for the same step (bench/pytorch/peer.py --profiler-windows:
    # NCHW, cudnn.benchmark; its own libraries, CUPTI found as above), the
    # two logs side by side: which kernels PyTorch's 2x comes from
    kbench resnet_b128_tf32 60 auto --config configs/cifar_resnet18.yaml --set device=cuda \
        --set batch_size=128 --set precision=tf32 --warmup 3 --repeats 3 --steps 5
    pytorch_kernels tf32
    # the same TF32 step in NHWC activations (cuDNN's tensor-core
    # convolutions read NHWC; never yet run on a GPU): its kernels, and its
    # plan lines, the ways auto measured for each shape in NHWC
    HCNN_CUDA_LAYOUT=nhwc kbench resnet_b128_tf32_nhwc 60 auto --config configs/cifar_resnet18.yaml \
        --set device=cuda --set batch_size=128 --set precision=tf32 --warmup 3 --repeats 3 --steps 5
    grep -E '^hcnn: device|^# plan layer[1-4]\.1\.conv1' "$O/kernels_resnet_b128_tf32_nhwc.log" | cut -c 1-600
    # bf16, 1.41x PyTorch autocast on the H200 (1.12x in its first round):
    # where its step goes once the GEMMs run on tensor cores (no bf16 kernel
    # log since the H200's of 2026-11-27, which named im2col, the bf16
    # conversions and col2im)
    kbench resnet_b128_bf16 60 auto --config configs/cifar_resnet18.yaml --set device=cuda \
        --set batch_size=128 --set precision=bf16 --warmup 3 --repeats 3 --steps 5
    # the data gradient by the transposed convolution through cuDNN's
    # forward (src/cuda/conv.cu; 2026-11-29, not yet run on a GPU):
    # against the H100's dcol = W^T dY GEMM (..._nt_n_tilesize64x64x8,
    # 3.6 ms a step) and col2im (2.0 ms)
    kbench resnet_b128_transposed 60 cudnn,transposed_cudnn,im2col --config configs/cifar_resnet18.yaml \
        --set device=cuda --set batch_size=128 --warmup 3 --repeats 3 --steps 5
    # cuDNN's Winograd for every pass that has one (src/cuda/conv_cudnn.cu;
    # ResNet-18's 3x3 layers of >= 32 channels, the rest by im2col): its
    # plan lines say which passes cuDNN offers it for, its kernel_top lines
    # what it costs (auto took it for the four stride-1 3x3 shapes on the
    # H200 of 2026-11-30)
    kbench resnet_b128_winograd 60 winograd_cudnn --config configs/cifar_resnet18.yaml \
        --set device=cuda --set batch_size=128 --warmup 3 --repeats 3 --steps 5
    grep -E '^# plan layer[1-4]\.1\.conv1' "$O/kernels_resnet_b128_winograd.log" | cut -c 1-400
    # PyTorch's FP32 step, against kernels_resnet_b128_auto.log: which
    # algorithms its cuDNN picked (the kernels' names: Winograd, implicit
    # GEMM) and where its step goes (12-15 s; added 2026-11-29, not yet run)
    pytorch_kernels fp32
}
pytorch_kernels() { # precision: PyTorch's ResNet-18 batch 128 under the same library
    stamp "kernel time: pytorch_resnet_b128_$1"
    LD_LIBRARY_PATH=$cupti CUDA_INJECTION64_PATH=$ks bounded 60 "$PY" bench/pytorch/peer.py \
        --device cuda --model resnet18 --batch 128 --threads 4 --precision "$1" --warmup 3 \
        --repeats 3 --steps 5 --profiler-windows >"$O/kernels_pytorch_resnet_b128_$1.log" 2>&1
    echo "exit $?"; grep -E '^kernel_(share|top)|^images_per_s|^peer' "$O/kernels_pytorch_resnet_b128_$1.log"
}

# hcnn bench ResNet-18 batch 128 fp32 under each convolution choice, then
# the comparisons with PyTorch (the targets).  PyTorch in both memory
# formats, the faster the reference (compare.sh's --torch-format best).  A
# PyTorch process took 12-15 s on the H100 (2026-11-27's session.log: 42-54
# s a configuration of 3 rounds, hcnn 2-3 s of each round), of which its
# timed steps and warm-up are 0.3-1 s: the rest its import, CUDA's start
# and cudnn.benchmark's first search.  hcnn in both layouts (TF32,
# --hcnn-layout best) adds an hcnn run a round, ~3 s at batch 128 on the
# H100, and its first NHWC run measures the convolutions' ways in NHWC (on
# the H200 of 2026-11-30 the first auto run's setup_ms was 2183, that
# under HCNN_CUDA_CONV=cudnn, which measures none, 936; the auto run's 24
# s were blas_kernels: auto's measurement, which device: cuda no longer
# makes): a bound of 10 s a round and 30 s more (estimated).  A process a
# run, in both formats, made a configuration ~60 s at 2 rounds, ~90 s at 3 (~300 and ~450 s for
# the five).  compare.sh's --peer-process server (its default on cuda)
# starts each format's PyTorch once and has it make that format's runs: an
# estimated 25-30 s a configuration at 3 rounds, ~140 s for the five (not
# yet measured on a GPU).  A configuration whose PyTorch side fails with
# servers (exit 1, "compare.sh: pytorch_..." or "... PyTorch server ...")
# is run again with a process a run, 2 rounds, and so are the
# configurations after it (a second failure of the servers would cost as
# much again), said in session.log and compare.log.  A PyTorch run that
# has not answered in 60 s (compare.sh's --peer-timeout) fails so, saying
# where, rather than spending the comparison's whole bound.
bench_targets() {
    local m spec model batch prec rc steps cs hl cr=${COMPARE_ROUNDS:-3} cp=${COMPARE_PEER_PROCESS:-server} after=""
    # compare_part: the last configuration's part of compare.log (from its === line)
    # shellcheck disable=SC2016 # sed's $: the last line
    compare_part() { sed -n '/^=== /h; /^=== /!H; ${x; p}' "$O/compare.log"; }
    # compare BOUND ROUNDS PEER_PROCESS: compare.sh on this configuration (model, batch, prec, steps)
    compare() {
        HCNN=$HCNN PYTHON=$B/python bounded "$1" bench/compare.sh --device cuda --model "$model" --batch "$batch" \
            --precision "$prec" --rounds "$2" --torch-format "$cf" --hcnn-layout "$hl" --threads 4 \
            "${steps[@]}" --peer-process "$3" --peer-timeout 60 >> "$O/compare.log" 2>&1
    }
    # (model, batch, precision, hcnn's layouts: both in TF32 only, the
    # target not reached, where NHWC may be what reaches it; TF32 first, so
    # that a loan's first call measures it whatever the bounds cut)
    for spec in "resnet18 128 tf32 best" "resnet18 128 fp32 auto" "resnet18 128 bf16 auto" \
        "lenet 64 fp32 auto" "lenet 256 fp32 auto"; do
        read -r model batch prec hl <<<"$spec"
        steps=()
        [ "$model" = resnet18 ] && steps=(--warmup 3 --repeats 3 --steps 5) hl=${COMPARE_HCNN_LAYOUT:-$hl}
        stamp "bench/compare.sh --device cuda --model $model --batch $batch --precision $prec --torch-format $cf --hcnn-layout $hl$after" |
            tee -a "$O/compare.log"
        cs=$((30 * cr + 60)) # a server a mode: ~25-30 s a configuration at 3 rounds; a process a run ~90
        [ "$cp" = server ] || cs=$((60 * cr + 60))
        [ "$hl" != best ] || cs=$((cs + 10 * cr + 30))
        compare "$cs" "$cr" "$cp"
        rc=$?
        echo "exit $rc"
        # (PyTorch's failures: a run's, or its server's; not hcnn's, nor a layout not applied)
        if [ "$rc" = 1 ] && [ "$cp" = server ] && compare_part |
            grep -qE '^compare.sh: pytorch_[a-z0-9_]+( failed |: its PyTorch server )|PyTorch server of .* (ended before|was not ready)'; then
            compare_part | grep -E '^compare.sh: ' | head -n 3
            cp=per-run cr=2 after=" --rounds 2 --peer-process per-run (PyTorch failed with its servers before)"
            stamp "bench/compare.sh --device cuda --model $model --batch $batch --precision $prec --torch-format $cf" \
                "--hcnn-layout $hl --rounds 2 --peer-process per-run (PyTorch failed with its servers)" | tee -a "$O/compare.log"
            cs=$((60 * cr + 60))
            [ "$hl" != best ] || cs=$((cs + 10 * cr + 30))
            compare "$cs" "$cr" "$cp"
            echo "exit $?"
        fi
        # this configuration's part of compare.log: each format's median, the
        # reference, each hcnn layout's median and ratio, the ratio
        compare_part | grep -E '^pytorch_mode=|^pytorch_best_mode=|^hcnn_layout=|^hcnn_best_layout=|^hcnn_median=|^compare.sh: ' | tail -n 9
    done
    # then the per-layer profile of the FP32 step under each convolution
    # choice (2 s each on the H200 of 2026-11-30 but auto's, whose 24 s were
    # blas_kernels: auto's measurement, no longer made on cuda)
    for m in $modes; do
        stamp "hcnn bench ResNet-18 batch 128 fp32, HCNN_CUDA_CONV=$m"
        HCNN_CUDA_CONV=$m bounded 90 "$HCNN" bench --config configs/cifar_resnet18.yaml \
            --set device=cuda --set batch_size=128 --warmup 3 --repeats 3 --steps 5 \
            > "$O/bench_resnet_b128_$m.log" 2>&1
        echo "exit $?"; grep -E '^# setup_ms|^# step_ms|^# shares|^images_per_s' "$O/bench_resnet_b128_$m.log"
    done
}
# NHWC activations and bf16 by cuDNN's graphs (never yet run on a GPU for
# ResNet-18), then the convolutions' measured ways
bench_diagnostics() {
    local p lay
    # NHWC activations (HCNN_CUDA_LAYOUT=nhwc: cuDNN's plans on NHWC
    # tensors, the im2col path's NHWC kernels) in the precisions whose
    # comparisons above ran NCHW alone (TF32's ran both): whether auto
    # should choose them, against those runs (about 10 s each on the H100)
    for p in fp32 bf16; do
        stamp "hcnn bench ResNet-18 batch 128 $p, HCNN_CUDA_LAYOUT=nhwc"
        HCNN_CUDA_LAYOUT=nhwc bounded 90 "$HCNN" bench --config configs/cifar_resnet18.yaml \
            --set device=cuda --set batch_size=128 --set precision=$p --warmup 3 --repeats 3 \
            --steps 5 > "$O/bench_resnet_b128_nhwc_$p.log" 2>&1
        echo "exit $?"; grep -E '^hcnn: device|^# setup_ms|^# step_ms|^images_per_s' "$O/bench_resnet_b128_nhwc_$p.log"
    done
    # bf16 by cuDNN's graphs for every pass that has an engine
    # (src/cuda/conv_graph.cu, written 2026-11-29 without a GPU): the step
    # time in each layout and the first layers' plans (the engine, or why
    # none), against the bf16 runs above (auto: im2col, no graphs made;
    # this run's # setup_ms is what making them costs)
    for lay in nchw nhwc; do
        stamp "hcnn bench ResNet-18 batch 128 bf16, HCNN_CUDA_CONV=cudnn (cuDNN graphs), HCNN_CUDA_LAYOUT=$lay"
        HCNN_CUDA_CONV=cudnn HCNN_CUDA_LAYOUT=$lay bounded 90 "$HCNN" bench --config configs/cifar_resnet18.yaml \
            --set device=cuda --set batch_size=128 --set precision=bf16 --warmup 3 --repeats 3 \
            --steps 5 > "$O/bench_resnet_b128_bf16_cudnn_$lay.log" 2>&1
        echo "exit $?"; grep -E '^# setup_ms|^# step_ms|^images_per_s' "$O/bench_resnet_b128_bf16_cudnn_$lay.log"
        grep -m 3 '^# plan' "$O/bench_resnet_b128_bf16_cudnn_$lay.log" | cut -c 1-600
    done
    # (the end of the section: not bounded, so shown after any cut)
    # each line: precision, layout, the shape, its batch, the ways chosen for
    # forward, data and filter gradient, then the medians (ms) of im2col,
    # im2col_image, cudnn, transposed and transposed_cudnn (the data
    # gradient of stride 1 alone) and winograd_cudnn (3x3 stride-1 layers
    # of >= 32 channels) for each pass (0: not a candidate)
    stamp "the convolutions' measured ways (HCNN_CUDA_CONV=auto), $O/cache/hcnn"
    grep -h '^key\|^conv' "$O"/cache/hcnn/cuda-conv-*.txt 2>/dev/null | head -n 400
}

# The sections' targets first, then their diagnostics: where
# GPU_CHECK_SECONDS cuts, it cuts those (runs that have never run on a
# GPU, where a hang is likeliest, come after every measurement a target
# is judged by)
cf=${COMPARE_FORMAT:-best}
{ has kernels || has diagnostics; } && [ ! -f "$ks" ] && echo "gpu_check.sh: $ks missing (a build without CUPTI): no kernel times"
has bench && bench_targets
has kernels && [ -f "$ks" ] && kernels_targets
# ("diagnostics" alone: both sections' diagnostics without their targets,
# for a loan's second call after a first that the bound cut there)
{ has kernels || has diagnostics; } && [ -f "$ks" ] && kernels_diagnostics
{ has bench || has diagnostics; } && bench_diagnostics

if has nsight; then
    # the bench both tools run: one configuration, the layers' NVTX ranges
    # in every step (a replayed CUDA graph has none: cuda_graphs off), the
    # convolutions as im2col + cuBLAS (the im2col and batch-norm kernels are
    # what the doc reads), no re-execution for BLAS kernels under a profiler
    nbench=("$HCNN" bench --config configs/cifar_resnet18.yaml --set device=cuda --set batch_size=128
            --set cuda_graphs=off --set blas_kernels=env)
    timeout -k 5 60 "$HCNN" --version | grep '^NVTX:'
    ncu=$(command -v ncu)
    for c in /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu; do
        if [ -z "$ncu" ] && [ -x "$c" ]; then ncu=$c; fi
    done
    if [ -z "$ncu" ]; then
        echo "gpu_check.sh: no ncu (Nsight Compute) on PATH, in /usr/local/cuda*/bin or /opt/nvidia/nsight-compute"
    else
        # ncu_ranges LOG COUNT RANGE...: ncu on the first COUNT kernels
        # inside the NVTX ranges named (a push/pop range of the default
        # domain is "NAME/" in ncu's filter) of nbench's one step, its lines
        # the doc reads
        ncu_ranges() {
            local log=$1 count=$2 r inc=()
            shift 2
            for r; do inc+=(--nvtx-include "$r/"); done
            bounded 60 "$ncu" --target-processes all --nvtx "${inc[@]}" --launch-count "$count" \
                --set basic "${nbench[@]}" --warmup 1 --repeats 1 --steps 1 > "$O/$log" 2>&1
            echo "exit $?"
            grep -E '^  [A-Za-z_].*\(([0-9]+, ){2}[0-9]+\)x|Duration|Achieved Occupancy|Memory Throughput|Compute \(SM\) Throughput' \
                "$O/$log" | head -n 40
        }
        stamp "Nsight Compute: $(timeout -k 5 30 "$ncu" --version 2>&1 | tail -n 1); 12 kernels of layer2.0.conv1/bn1"
        # rows 16 and 17 of hcnn bench's profile table of ResNet-18 (from 0):
        # layer2.0.conv1 and layer2.0.bn1 (src/core/trace.h: "<pass> <row>
        # <name> (<kind>)")
        HCNN_CUDA_CONV=im2col ncu_ranges nsight_ncu.log 12 "fwd 16 layer2.0.conv1 (conv)" \
            "fwd 17 layer2.0.bn1 (bn)" "bwd 16 layer2.0.conv1 (conv)" "bwd 17 layer2.0.bn1 (bn)"
        # the same batch-norm in NHWC: its 6 kernels (nhwc_block_stats,
        # bn_channel_stats reading the blocks' [block][channel] table,
        # bn_apply; nhwc_bwd_block, bwd_channel, bwd_dx), never yet timed
        # on a GPU (2026-12-02)
        stamp "Nsight Compute: 6 kernels of layer2.0.bn1 in NHWC (HCNN_CUDA_LAYOUT=nhwc)"
        HCNN_CUDA_CONV=im2col HCNN_CUDA_LAYOUT=nhwc ncu_ranges nsight_ncu_nhwc.log 6 \
            "fwd 17 layer2.0.bn1 (bn)" "bwd 17 layer2.0.bn1 (bn)"
    fi
    if ! command -v nsys >/dev/null; then
        echo "gpu_check.sh: no nsys (Nsight Systems) on PATH: its part skipped"
    else
        stamp "Nsight Systems: $(timeout -k 5 30 nsys --version 2>&1 | head -n 1); hcnn bench 2 + 3 steps"
        HCNN_CUDA_CONV=im2col bounded 60 nsys profile --trace=cuda,nvtx,osrt --force-overwrite=true \
            --output="$B/nsys_resnet" "${nbench[@]}" --warmup 2 --repeats 1 --steps 3 \
            > "$O/nsight_nsys.log" 2>&1
        echo "exit $?"
        for rep in nvtx_sum nvtx_gpu_proj_sum cuda_gpu_kern_sum; do
            echo "=== nsys stats --report $rep" >> "$O/nsight_nsys.log"
            bounded 30 nsys stats --report "$rep" "$B/nsys_resnet.nsys-rep" >> "$O/nsight_nsys.log" 2>&1
        done
        grep -A 12 '=== nsys stats --report nvtx_gpu_proj_sum' "$O/nsight_nsys.log" | cut -c1-200
    fi
fi
if has cpu; then
    cores=$(nproc)
    stamp "CPU thread scaling up to $cores threads, blas_kernels: auto, against hcnn plan's thread model"
    last=1
    for t in 1 2 4 8 16 32 64; do [ "$t" -le "$cores" ] && last=$t; done
    # shellcheck disable=SC2086 # CPU_THREADS: a list of thread counts, e.g. "1 4 16"
    # the two thread-scaling models, one round each (a loan's minutes; the script's
    # default adds the small batches and 3 rounds a point: CPU_MODELS, CPU_ROUNDS)
    MODELS=${CPU_MODELS:-resnet18:64 lenet:256} ROUNDS=${CPU_ROUNDS:-1} \
        HCNN=$HCNN HCNN_SRCDIR=$R bounded 580 bench/validate_threads.sh ${CPU_THREADS:-} \
        > "$O/validate_threads.log" 2>&1
    echo "exit $?"; grep -E '^# |passed' "$O/validate_threads.log"
    stamp "PyTorch on the CPU, ResNet-18 batch 64, $last threads"
    bounded 120 "$B/python" bench/pytorch/peer.py --model resnet18 --batch 64 --threads "$last" \
        --warmup 1 --repeats 3 --steps 2 --lr 0.1 --momentum 0.9 --weight-decay 0.0005 2>&1 | tail -n 1
fi
stamp "done"
ncut=0
[ -f "$B/cut" ] && ncut=$(wc -l <"$B/cut")
[ "$ncut" -gt 0 ] && echo "gpu_check.sh: $ncut run(s) cut or skipped by GPU_CHECK_SECONDS=$budget (above)"
if [ -n "$index" ]; then
    # the headline: tests passed per convolution choice and
    # test_compare_cuda.sh's, conformance, the ratios to PyTorch (medians),
    # ResNet-18's kernel share, the CPU sweep
    hl=""
    add() { if [ -n "$1" ]; then hl+="${hl:+; }$1"; fi; }
    # (test_cuda.sh's under each choice, "test_cuda auto 43 of 45", and test_compare_cuda.sh's)
    for f in "$O"/test_cuda_*.log "$O"/test_compare_cuda.log; do
        [ -f "$f" ] || continue
        m=${f##*/} m=${m%.log} m=${m/#test_cuda_/test_cuda }
        add "$(awk -v m="$m" '/^\[  PASSED  \] [0-9]+ test/ { p = $4 } /^\[  FAILED  \] [0-9]+ test/ { f = $4 }
            END { if (p + f > 0) printf "%s %d of %d", m, p, p + f; else printf "%s: no result", m }' "$f")"
    done
    [ -f "$O/conformance.log" ] && add "conformance $(grep -oE '^\[  PASSED  \] [0-9]+' "$O/conformance.log" | awk '{ print $4 " passed" }' | tail -n 1)"
    # (with PyTorch's reference layout when both ran: pytorch_best_mode=PREC_nchw|nhwc,
    # and hcnn's faster layout when both ran: hcnn_best_layout=, "(hcnn nhwc, PyTorch nchw)")
    # (a configuration run again, or after such, with a process a run: "(per-run, 2 rounds)")
    [ -f "$O/compare.log" ] && add "$(awk '/^=== .*compare.sh/ { pl = ""; hl = ""; for (i = 1; i < NF; i++) { if ($i == "--model") m = $(i + 1); if ($i == "--batch") b = $(i + 1); if ($i == "--precision") p = $(i + 1) }
            t = index($0, "(PyTorch failed with its servers") ? " (per-run, 2 rounds)" : "" }
        /^pytorch_best_mode=/ { pl = $0; sub(/.*_/, "", pl) }
        /^hcnn_best_layout=/ { hl = $0; sub(/.*=/, "", hl) }
        /^hcnn_median=/ { r = $3; sub(/ratio=/, "", r)
            l = hl != "" ? " (hcnn " hl (pl != "" ? ", PyTorch " pl : "") ")" : (pl != "" ? " (" pl ")" : "")
            s = s (s == "" ? "vs PyTorch: " : ", ") m " b" b " " p " " r "x" l t }
        END { print s }' "$O/compare.log")"
    for f in "$O"/kernels_resnet_b128_auto.log "$O"/kernels_resnet_b128_im2col.log; do
        if [ -f "$f" ]; then
            add "$(grep -oE 'kernel_share=[0-9.]+' "$f" | head -n 1 | sed "s/=/ ${f##*kernels_} /; s/\.log//")"
            break
        fi
    done
    if [ -f "$O/validate_threads.log" ]; then
        vt=$(grep -E '[0-9]+ passed' "$O/validate_threads.log" | tail -n 1)
        add "validate_threads: ${vt:-no result}"
    fi
    [ "$ncut" -gt 0 ] && add "$ncut run(s) cut or skipped by GPU_CHECK_SECONDS=$budget"
    awk -v run="$run" -v hl="${hl:-no results} (${log##*/})" '
        index($0, run " | ") == 1 && / \| unfinished: see [^ ]*$/ { sub(/unfinished: see [^ ]*$/, ""); $0 = $0 hl }
        { print }' "$index" >"$index.tmp" && mv "$index.tmp" "$index"
    echo "gpu_check.sh: logs in $O; results/gpu/INDEX: $(grep "^$run " "$index")"
fi
# session.log whole before returning (the recipe packs it next): the tee
# ends when the script's last copies of its pipe are closed (waited for 10 s
# at most: a process still holding the pipe must not keep the packing from
# running)
exec >&- 2>&- 3>&-
for ((i = 0; i < 100; i++)); do kill -0 "$tee_pid" 2>/dev/null || break; sleep 0.1; done
exit 0
