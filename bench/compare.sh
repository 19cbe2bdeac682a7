#!/usr/bin/env bash
# Training throughput of hcnn against the PyTorch peer, same model, batch,
# optimiser and threads, run alternately (hcnn first in odd rounds, PyTorch
# first in even rounds) so that a noisy machine disturbs both alike.
#
#   bench/compare.sh [--model lenet|resnet18] [--batch B] [--threads T] [--rounds N] [--no-mkldnn]
#                    [--channels-last] [--warmup N] [--repeats N] [--steps N]
#                    [--device cpu|cuda] [--precision fp32|tf32|bf16]
#                    [--torch-format nchw|channels_last|best]
#                    [--hcnn-layout auto|nchw|nhwc|best]
#                    [--peer-modes one|best|all|MODE,MODE...]
#                    [--peer-process per-run|server] [--peer-timeout SECONDS]
#
# --channels-last: PyTorch's model and batches in channels_last (NHWC), the
# layout oneDNN prefers on CPUs (the default, NCHW, is hcnn's); a fair
# comparison takes PyTorch's faster of the two (--torch-format best).
# --torch-format: PyTorch's memory format (peer.py --memory-format):
#   nchw          NCHW (contiguous) only: the default on the CPU
#   channels_last channels_last only (the same as --channels-last)
#   best          both, at --precision, in the same alternated rounds (the
#                 modes PREC_nchw and PREC_nhwc, e.g. tf32_nchw, tf32_nhwc);
#                 hcnn is compared with the faster of the two medians: the
#                 default with --device cuda (cuDNN's tensor-core kernels
#                 prefer NHWC; the targets are set against PyTorch's faster
#                 layout).  Its output is --peer-modes' with those two modes.
# --hcnn-layout (--device cuda): hcnn's activation layout
# (HCNN_CUDA_LAYOUT, docs/gpu-nodes.md):
#   auto          the environment's (unset: auto, NCHW): the default
#   nchw, nhwc    that layout
#   best          both, in the same alternated rounds (their order rotating
#                 from round to round), hcnn's rate the faster of the two
#                 medians, as PyTorch's with --torch-format best: whether
#                 NHWC should be auto's choice.  Each round line adds
#                 hcnn_nchw_images_per_s, hcnn_nhwc_images_per_s and
#                 hcnn_layout=<the round's faster>; after the rounds one
#                 line a layout
#                   hcnn_layout=<layout> median=M ratio=M/<PyTorch's median>
#                 and hcnn_best_layout=<layout>, the last line's hcnn_median.
# Each hcnn run in a layout asked for must say it ran in it (its header's
# "hcnn: device: ... NHWC activations"), each PyTorch run's header must
# name the memory format asked for
# (peer.py checks its tensors' strides): a run in another stops compare.sh
# (exit 1).
# --precision on the CPU: fp32 (default) or bf16 (hcnn: precision: bf16,
# which needs a build with oneDNN and a CPU with AVX512-BF16 or AMX; PyTorch:
# torch.autocast("cpu", dtype=torch.bfloat16), FP32 master weights); tf32
# is a GPU format, refused on the CPU.
# --peer-modes (CPU only; not with --torch-format): which of PyTorch's four
# CPU modes run in each round, all of them after hcnn in odd rounds and
# before it in even rounds
# (their order rotating from round to round): fp32_nchw, fp32_nhwc
# (channels_last), bf16_nchw, bf16_nhwc (autocast to bfloat16).
#   one   (default) the single mode --precision and --channels-last name
#   best  all four; hcnn is compared with PyTorch's best at hcnn's
#         precision: with --precision fp32 the faster FP32 mode, with
#         --precision bf16 the fastest of the four, whatever its precision
#   all   all four; hcnn is compared with the fastest of the four
#   MODE,MODE...  those modes; hcnn is compared with the fastest of them
# With more than one mode, each round line adds every mode's rate
# (pytorch_<mode>_images_per_s=R) and pytorch_mode=<the round's fastest
# compared mode>, whose rate is the line's pytorch_images_per_s; after the
# rounds one line a mode
#   pytorch_mode=<mode> median=M hcnn_ratio=X/M compared=0|1
# and pytorch_best_mode=<mode>, the compared mode with the highest median,
# which is the last line's pytorch_median.
# --peer-process: how PyTorch's runs are made
#   per-run  a python3 process for each run (the default on the CPU, where
#            its start is 1-2 s)
#   server   one python3 process a mode (peer.py --serve, started and
#            ready, torch imported and CUDA started, before the first round;
#            ended with compare.sh), which makes that mode's runs: each a
#            line to it, its model, optimiser and batches made again from
#            the same seed, so that a run measures what a process of its own
#            would (never a run of another mode before it in the same
#            process: below, at serve_start), except that cuDNN's algorithm
#            choices are made once, in a mode's first run; torch's import and
#            CUDA's start (12-15 s a run on the H100 of 2026-11-27, against
#            0.3-1 s of warm-up and timed steps) are paid once a mode.  The
#            default with --device cuda.  The servers wait, idle, while the
#            other runs run.  A server that dies stops compare.sh (exit 1),
#            its output shown
# --peer-timeout SECONDS: a PyTorch run that has not answered after
# SECONDS stops compare.sh (exit 1), saying so: a process a run is ended
# (timeout -k 5), a server not ready or not answering is ended when
# compare.sh stops.  0 (the default): no limit.  For a caller with a time
# budget (bench/gpu_check.sh), so that a hung PyTorch costs SECONDS and
# says where, not the caller's whole bound with nothing said
# --device cuda: hcnn's CUDA backend (a build configured --with-cuda)
# against PyTorch on the same GPU (cuDNN, its fastest algorithms:
# cudnn.benchmark); --precision sets both sides alike (fp32: no TF32
# anywhere; tf32: TF32 tensor cores for GEMMs and convolutions; bf16:
# hcnn's bf16 GEMM inputs against PyTorch's autocast to bfloat16).
#
# Prints one line per round with both rates (each the median of that run's
# repeats; the header line names device, precision, peer_modes and
# torch_format last: nchw, channels_last, best, or peer_modes when
# --peer-modes chose),
# then as its last line
#   hcnn_median=X pytorch_median=Y ratio=X/Y
# Without python3-torch it runs hcnn only, says so, and ends with
#   hcnn_median=X pytorch_median=NA ratio=NA
# Exit status: 0 success, 1 a run failed, 2 bad command line.
set -euo pipefail

usage() {
    sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'
}

model=lenet batch=64 threads=2 rounds=5 mkldnn=1 channels_last=0 device=cpu precision=fp32
peer_modes=one torch_format='' peer_process='' peer_timeout=0 hcnn_layout=auto
warmup='' repeats='' steps=''
# val OPTION [VALUE...]: OPTION must have a non-empty value
val() { if [ $# -lt 2 ] || [ -z "$2" ]; then echo "compare.sh: $1 needs a value (see --help)" >&2; exit 2; fi; }
while [ $# -gt 0 ]; do
    case $1 in
    --model) val "$@"; model=$2; shift 2 ;;
    --batch) val "$@"; batch=$2; shift 2 ;;
    --threads) val "$@"; threads=$2; shift 2 ;;
    --rounds) val "$@"; rounds=$2; shift 2 ;;
    --warmup) val "$@"; warmup=$2; shift 2 ;;
    --repeats) val "$@"; repeats=$2; shift 2 ;;
    --steps) val "$@"; steps=$2; shift 2 ;;
    --no-mkldnn) mkldnn=0; shift ;;
    --channels-last) channels_last=1; shift ;;
    --device) val "$@"; device=$2; shift 2 ;;
    --precision) val "$@"; precision=$2; shift 2 ;;
    --peer-modes) val "$@"; peer_modes=$2; shift 2 ;;
    --torch-format) val "$@"; torch_format=$2; shift 2 ;;
    --hcnn-layout) val "$@"; hcnn_layout=$2; shift 2 ;;
    --peer-process) val "$@"; peer_process=$2; shift 2 ;;
    --peer-timeout) val "$@"; peer_timeout=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "compare.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for v in batch threads rounds ${warmup:+warmup} ${repeats:+repeats} ${steps:+steps}; do
    case ${!v} in
    '' | *[!0-9]*) echo "compare.sh: --$v '${!v}' is not a non-negative integer" >&2; exit 2 ;;
    esac
done
for v in batch threads rounds; do
    [ "${!v}" -ge 1 ] || { echo "compare.sh: --$v must be >= 1" >&2; exit 2; }
done
case $peer_timeout in
'' | *[!0-9]*) echo "compare.sh: --peer-timeout '$peer_timeout': expected whole seconds (0: no limit)" >&2; exit 2 ;;
esac
peer_timeout=$((10#$peer_timeout))
case $device in cpu | cuda) ;; *) echo "compare.sh: --device '$device': expected cpu or cuda" >&2; exit 2 ;; esac
case $precision in fp32 | tf32 | bf16) ;; *) echo "compare.sh: --precision '$precision': expected fp32, tf32 or bf16" >&2; exit 2 ;; esac
case $peer_process in
'') if [ "$device" = cuda ]; then peer_process=server; else peer_process=per-run; fi ;;
per-run | server) ;;
*) echo "compare.sh: --peer-process '$peer_process': expected per-run or server" >&2; exit 2 ;;
esac
[ "$device" = cuda ] || [ "$precision" != tf32 ] ||
    { echo "compare.sh: --precision tf32 needs --device cuda (TF32 is a GPU format; on the CPU use fp32 or bf16)" >&2; exit 2; }
# hcnn's layouts: none (auto: the environment's), or those run each round
case $hcnn_layout in
auto) hlayouts=() ;;
nchw | nhwc) hlayouts=("$hcnn_layout") ;;
best) hlayouts=(nchw nhwc) ;;
*) echo "compare.sh: --hcnn-layout '$hcnn_layout': expected auto, nchw, nhwc or best" >&2; exit 2 ;;
esac
[ "$device" = cuda ] || [ "$hcnn_layout" = auto ] ||
    { echo "compare.sh: --hcnn-layout $hcnn_layout needs --device cuda (the CPU backend's activations are NCHW)" >&2; exit 2; }

# PyTorch's memory format: --torch-format, else --peer-modes' or
# --channels-last's choice, else the device's default
case $torch_format in
'' | nchw | channels_last | best) ;;
*) echo "compare.sh: --torch-format '$torch_format': expected nchw, channels_last or best" >&2; exit 2 ;;
esac
if [ -n "$torch_format" ]; then
    [ "$peer_modes" = one ] ||
        { echo "compare.sh: --torch-format and --peer-modes both pick PyTorch's modes (give one of them)" >&2; exit 2; }
    [ "$channels_last" = 0 ] || [ "$torch_format" = channels_last ] ||
        { echo "compare.sh: --channels-last contradicts --torch-format $torch_format" >&2; exit 2; }
elif [ "$peer_modes" != one ]; then
    torch_format=peer_modes
elif [ "$channels_last" = 1 ]; then
    torch_format=channels_last
elif [ "$device" = cuda ]; then
    torch_format=best # issue 42: on the GPU the reference is PyTorch's faster layout
else
    torch_format=nchw # the CPU's default as before (--torch-format best for both)
fi
[ "$torch_format" != channels_last ] || channels_last=1

# PyTorch's modes, PRECISION_LAYOUT words; compared: those hcnn's rate is set against
all_modes="fp32_nchw fp32_nhwc bf16_nchw bf16_nhwc"
case $torch_format:$peer_modes in
best:*)
    # both layouts at hcnn's precision (tf32 included: not one of
    # --peer-modes' CPU modes), run and shown as that list of modes
    peer_modes=${precision}_nchw,${precision}_nhwc
    modes="${precision}_nchw ${precision}_nhwc"
    compared=$modes ;;
*:one)
    modes=${precision}_nchw
    [ "$channels_last" = 0 ] || modes=${precision}_nhwc
    compared=$modes ;;
*:best | *:all)
    modes=$all_modes
    if [ "$peer_modes" = best ] && [ "$precision" = fp32 ]; then compared="fp32_nchw fp32_nhwc"; else compared=$modes; fi ;;
*)
    modes=''
    IFS=, read -r -a list <<< "$peer_modes"
    if [ "${#list[@]}" -eq 0 ] || [ "${peer_modes: -1}" = , ]; then
        echo "compare.sh: --peer-modes '$peer_modes': expected one, best, all or a comma-separated list of ${all_modes// /, }" >&2
        exit 2
    fi
    for m in "${list[@]}"; do
        case " $all_modes " in
        *" $m "*) ;;
        *) echo "compare.sh: --peer-modes: unknown mode '$m' (expected one, best, all or a comma-separated list of ${all_modes// /, })" >&2; exit 2 ;;
        esac
        case " $modes " in *" $m "*) echo "compare.sh: --peer-modes: mode '$m' given twice" >&2; exit 2 ;; esac
        modes+="${modes:+ }$m"
    done
    compared=$modes ;;
esac
if [ "$torch_format" = peer_modes ]; then
    [ "$device" = cpu ] ||
        { echo "compare.sh: --peer-modes $peer_modes: PyTorch's CPU modes; with --device cuda use --precision and --torch-format" >&2; exit 2; }
    [ "$channels_last" = 0 ] ||
        { echo "compare.sh: --channels-last picks PyTorch's one layout; --peer-modes $peer_modes names its modes (drop one of the two)" >&2; exit 2; }
fi
read -r -a modes <<< "$modes"

cd "$(dirname "$0")/.."
case $model in
lenet)
    config=configs/mnist_lenet.yaml
    # a repeat of about 6400 images: ~0.5 s for either program
    : "${warmup:=20}" "${repeats:=5}" "${steps:=$(((6400 + batch - 1) / batch))}"
    ;;
resnet18)
    config=configs/cifar_resnet18.yaml
    # about 1.3 s per step at batch 64 and 2 threads
    : "${warmup:=2}" "${repeats:=3}" "${steps:=3}"
    ;;
*) echo "compare.sh: --model '$model': expected lenet or resnet18" >&2; exit 2 ;;
esac
if [ "$steps" -lt 1 ] || [ "$repeats" -lt 1 ]; then
    echo "compare.sh: --steps and --repeats must be >= 1" >&2
    exit 2
fi

HCNN=${HCNN:-./hcnn}
PY=${PYTHON:-/usr/bin/python3}  # Debian's python3-torch; not the pyenv python3 first on PATH
[ -x "$HCNN" ] || { echo "compare.sh: $HCNN not found: build hcnn first (make)" >&2; exit 1; }
[ -z "${OPENBLAS_CORETYPE:-}" ] ||
    echo "compare.sh: note: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE is set in the environment (hcnn's blas_kernels: auto measures its own choice; PyTorch's OpenBLAS follows it)" >&2

# The optimiser of the config, for the peer: top-level keys of the YAML.
cfg_key() { # key default
    awk -v k="$1" -v d="$2" '
        $0 ~ "^" k ":" { sub(/#.*/, ""); sub("^" k ":[ \t]*", ""); gsub(/[ \t"'\'']/, ""); v = $0 }
        END { print (v == "" ? d : v) }' "$config"
}
lr=$(cfg_key lr 0.01)
momentum=$(cfg_key momentum 0.9)
weight_decay=$(cfg_key weight_decay 0)
nesterov=$(cfg_key nesterov false)

hcnn_cmd=("$HCNN" bench --config "$config" --set "batch_size=$batch" --set "threads=$threads"
    --set "device=$device" --set "precision=$precision"
    --warmup "$warmup" --repeats "$repeats" --steps "$steps")
peer_cmd=("$PY" bench/pytorch/peer.py --model "$model" --batch "$batch" --threads "$threads"
    --warmup "$warmup" --repeats "$repeats" --steps "$steps"
    --lr "$lr" --momentum "$momentum" --weight-decay "$weight_decay"
    --device "$device")
case $nesterov in true | True | yes | on | 1) peer_cmd+=(--nesterov) ;; esac
[ "$mkldnn" = 1 ] || peer_cmd+=(--no-mkldnn)
# mode_args MODE: peer.py's arguments for MODE (prec_layout)
mode_args() {
    printf "%s\n" --precision "${1%_*}" --memory-format "$(mode_format "$1")"
}
# mode_format MODE: peer.py's memory format for MODE's layout
mode_format() { if [ "${1#*_}" = nhwc ]; then echo channels_last; else echo contiguous; fi; }

# The PyTorch servers (--peer-process server): one peer.py --serve a mode,
# started before the first round, on two FIFOs (its input and output, our
# ends in srv_in[MODE] and srv_out[MODE]).  A server a mode, not one for
# all: what a run leaves in its process affects the next run there.  On a
# 2-core Zen 5 (2026-11-30, torch 1.13, LeNet-5 batch 64) channels_last
# ran at 28.8-29.5k images/s after an NCHW run in the same process,
# 17.2-18.6k in a process of its own; runs of one mode served one after
# another kept a fresh process's rate (medians 18.1k against 18.0k
# channels_last, 23.4k against 23.3k NCHW, 7 alternated rounds).
declare -A srv_pid=() srv_in=() srv_out=()
srv_fds=()
# closed CMD...: exec CMD without the servers' pipes (a process holding a
# server's input would keep it from seeing its end)
closed() {
    close_pipes
    exec "$@"
}
close_pipes() {
    local fd
    for fd in ${srv_fds[@]+"${srv_fds[@]}"}; do eval "exec $fd>&-"; done
}
serve_start() { # MODE
    mkfifo "$tmp/in_$1" "$tmp/out_$1"
    (closed "${peer_cmd[@]}" --serve) < "$tmp/in_$1" > "$tmp/out_$1" 2>&1 &
    srv_pid[$1]=$!
    local i o
    exec {i}> "$tmp/in_$1" {o}< "$tmp/out_$1"
    srv_in[$1]=$i srv_out[$1]=$o
    srv_fds+=("$i" "$o")
}
# serve_ready: waits for each server's peer_ready (torch imported, CUDA
# started), so that no server starts during a timed run
serve_ready() {
    local m line st
    deadline=$((SECONDS + peer_timeout))
    for m in "${!srv_pid[@]}"; do
        st=0
        while peer_read "${srv_out[$m]}" || { st=$?; false; }; do
            [ "$line" = peer_ready ] && continue 2
            printf '%s\n' "$line" >> "$tmp/server_$m.log"
        done
        if [ "$st" -gt 128 ]; then
            echo "compare.sh: the PyTorch server of $m (${peer_cmd[*]} --serve) was not ready after $peer_timeout s (--peer-timeout):" >&2
        else
            echo "compare.sh: the PyTorch server of $m (${peer_cmd[*]} --serve) ended before it was ready:" >&2
        fi
        tail -n 20 "$tmp/server_$m.log" >&2 2>/dev/null
        return 1
    done
}
# peer_read FD: reads a line of a server's output from FD into the caller's
# line; with --peer-timeout, by $deadline (status > 128 past it)
peer_read() {
    line=''
    if [ "$peer_timeout" -eq 0 ]; then IFS= read -r line <&"$1"; return; fi
    local t=$((deadline - SECONDS))
    [ "$t" -gt 0 ] || return 142
    IFS= read -r -t "$t" line <&"$1"
}
serve_stop() {
    local m i alive
    close_pipes # (their input's end)
    # idle, or in a run when compare.sh stops early: TERM to each, then
    # KILL to any still there 5 s later (a server hung in a CUDA call)
    for m in "${!srv_pid[@]}"; do kill "${srv_pid[$m]}" 2>/dev/null || true; done
    for ((i = 0; i < 50; i++)); do
        alive=0
        for m in "${!srv_pid[@]}"; do kill -0 "${srv_pid[$m]}" 2>/dev/null && alive=1; done
        [ "$alive" = 1 ] || break
        sleep 0.1
    done
    for m in "${!srv_pid[@]}"; do
        kill -9 "${srv_pid[$m]}" 2>/dev/null || true
        wait "${srv_pid[$m]}" 2>/dev/null || true
    done
    srv_fds=() srv_pid=()
}
# served MODE NAME ARGS...: one run of MODE's server with ARGS (peer.py's
# options after the server's), its output in $tmp/NAME.log; prints its
# images_per_s
served() {
    local mode=$1 name=$2 log="$tmp/$2.log" line rc='' st=0
    shift 2
    : > "$log"
    deadline=$((SECONDS + peer_timeout))
    # (a subshell ignoring SIGPIPE: a dead server's pipe fails the write, not compare.sh)
    ( trap '' PIPE; printf '%s\n' "$(printf '%q ' "$@")" >&"${srv_in[$mode]}" ) 2>/dev/null || true
    while peer_read "${srv_out[$mode]}" || { st=$?; [ "$st" -le 128 ] && [ -n "$line" ]; }; do
        case $line in
        peer_served=*' status='*) rc=${line##* status=}; break ;;
        *) printf '%s\n' "$line" >> "$log" ;;
        esac
        [ "$st" -eq 0 ] || break # (its last line, unended)
    done
    if [ -z "$rc" ]; then
        if [ "$st" -gt 128 ]; then
            echo "compare.sh: $name: its PyTorch server (${peer_cmd[*]} --serve) did not answer in $peer_timeout s (--peer-timeout): $*" >&2
        else
            echo "compare.sh: $name: its PyTorch server (${peer_cmd[*]} --serve) ended before answering: $*" >&2
        fi
        tail -n 20 "$log" >&2
        return 1
    fi
    rate_of "$name" "$rc" "${peer_cmd[*]} --serve, the line: $*"
}

tmp=$(mktemp -d)
trap 'serve_stop; rm -rf "$tmp"' EXIT

# Until 'hcnn bench' exists, emulate it with one epoch of synthetic training
# (rate of the whole epoch, warm-up included; no repeats).
if "$HCNN" bench --help > /dev/null 2>&1; then
    bench_mode=bench
else
    bench_mode=train
    echo "compare.sh: note: this hcnn has no 'bench' command: emulating it with one epoch of 'hcnn train' on synthetic data" >&2
    hcnn_cmd=("$HCNN" train --config "$config" --set "batch_size=$batch" --set "threads=$threads"
        --set dataset=synthetic --set "synthetic_train=$((batch * (warmup + repeats * steps)))"
        --set "synthetic_test=$batch" --set epochs=1 --set csv= --set checkpoint_dir= -q)
    # (-q: no header, so no layout line to check a run by)
    [ ${#hlayouts[@]} -eq 0 ] ||
        { echo "compare.sh: --hcnn-layout $hcnn_layout needs an hcnn with the bench command" >&2; exit 2; }
fi

have_torch=1
if ! "$PY" -c 'import torch' > /dev/null 2>&1; then
    have_torch=0
    echo "compare.sh: python3-torch not installed ($PY cannot import torch): running hcnn only; apt-get install python3-torch for the comparison" >&2
fi

# run NAME CMD...: runs CMD (without the PyTorch server's pipes), prints its
# images_per_s (the last line's value)
run() {
    local name=$1 log="$tmp/$1.log" rc=0
    shift
    (closed "$@") > "$log" 2>&1 || rc=$?
    rate_of "$name" "$rc" "$*"
}

# rate_of NAME STATUS WHAT: prints the images_per_s of $tmp/NAME.log's last
# line, or says the run (WHAT) failed and returns 1
rate_of() {
    local name=$1 log="$tmp/$1.log" rc=$2 rate
    shift 2
    if [ "${name%%_*}" = hcnn ] && [ "$bench_mode" = train ]; then
        rate=$(sed -n 's/^epoch=.* images_per_s=\([0-9.]*\).*/\1/p' "$log" | tail -n 1)
    else
        rate=$(tail -n 1 "$log" | sed -n 's/^images_per_s=\([0-9.]*\)$/\1/p')
    fi
    if [ "$rc" -ne 0 ] || [ -z "$rate" ]; then
        echo "compare.sh: $name failed (exit $rc): $1" >&2
        tail -n 20 "$log" >&2
        return 1
    fi
    echo "$rate"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# peer MODE: runs PyTorch in MODE, records its rate in $tmp/rate_MODE (this
# round) and appends it to $tmp/p_MODE (all rounds)
peer() {
    local r
    local -a extra
    mapfile -t extra < <(mode_args "$1")
    if [ "$peer_process" = server ]; then
        r=$(served "$1" "pytorch_$1" "${extra[@]}") || return 1
    else
        local limit=()
        [ "$peer_timeout" -eq 0 ] || limit=(timeout -k 5 "$peer_timeout")
        r=$(run "pytorch_$1" ${limit[@]+"${limit[@]}"} "${peer_cmd[@]}" "${extra[@]}") || return 1
    fi
    # the format it ran in (peer.py's header, from its tensors' strides):
    # a layout not applied would compare hcnn with NCHW twice, unsaid
    local want got
    want=$(mode_format "$1")
    got=$(sed -n 's/^peer torch=.* memory_format=\([a-z_]*\) .*/\1/p' "$tmp/pytorch_$1.log" | head -n 1)
    if [ "$got" != "$want" ]; then
        echo "compare.sh: pytorch_$1 ran in memory_format=${got:-(not said)}, asked for $want: $(head -n 1 "$tmp/pytorch_$1.log")" >&2
        return 1
    fi
    echo "$r" > "$tmp/rate_$1"
    echo "$r" >> "$tmp/p_$1"
}
# faster A B: the larger of two rates
faster() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }
# ratio A B: A/B, or NA where B is
ratio() { if [ "$2" = NA ]; then echo NA; else awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; fi; }

# hcnn_round I: hcnn's runs of round I: one in the environment's layout
# (--hcnn-layout auto), or one a layout asked for, their order rotated by
# one a round, each checked to have run in it; appends the rates to $tmp/h
# (auto) or $tmp/h_LAYOUT, and sets h (the round's rate: its faster
# layout's), hl (that layout; '' for auto) and hlog (its log)
hcnn_round() {
    local j lay r n=${#hlayouts[@]}
    if [ "$n" -eq 0 ]; then
        h=$(run hcnn "${hcnn_cmd[@]}") || return 1
        hl='' hlog=$tmp/hcnn.log
        echo "$h" >> "$tmp/h"
        return 0
    fi
    h='' hl=''
    for ((j = 0; j < n; j++)); do
        lay=${hlayouts[$((($1 - 1 + j) % n))]}
        r=$(run "hcnn_$lay" env "HCNN_CUDA_LAYOUT=$lay" "${hcnn_cmd[@]}") || return 1
        # (a layout not applied would time one layout twice, unsaid)
        if ! grep -q "^hcnn: device: .* ${lay^^} activations" "$tmp/hcnn_$lay.log"; then
            echo "compare.sh: hcnn_$lay did not say it ran in ${lay^^} (HCNN_CUDA_LAYOUT=$lay): $(grep -m 1 '^hcnn: device' "$tmp/hcnn_$lay.log" || echo 'no "hcnn: device" line')" >&2
            return 1
        fi
        echo "$r" > "$tmp/hrate_$lay"
        echo "$r" >> "$tmp/h_$lay"
        if [ -z "$h" ] || faster "$r" "$h"; then h=$r hl=$lay; fi
    done
    hlog=$tmp/hcnn_$hl.log
}

echo "compare: model=$model config=$config batch=$batch threads=$threads rounds=$rounds warmup=$warmup repeats=$repeats steps=$steps lr=$lr momentum=$momentum weight_decay=$weight_decay nesterov=$nesterov mkldnn=$mkldnn channels_last=$channels_last hcnn=$bench_mode hcnn_layout=$hcnn_layout peer_process=$peer_process peer_timeout=$peer_timeout device=$device precision=$precision peer_modes=$peer_modes torch_format=$torch_format"
if [ ${#hlayouts[@]} -eq 0 ]; then
    echo "hcnn:    ${hcnn_cmd[*]}"
else
    for lay in "${hlayouts[@]}"; do echo "hcnn_$lay: HCNN_CUDA_LAYOUT=$lay ${hcnn_cmd[*]}"; done
fi
if [ "$have_torch" = 1 ]; then
    # (with a server: each line the command of a process of its own, the same run)
    [ "$peer_process" = per-run ] || echo "peer_server: ${peer_cmd[*]} --serve (one a mode)"
    if [ "$peer_modes" = one ]; then
        echo "pytorch: ${peer_cmd[*]} $(mode_args "${modes[0]}" | paste -sd ' ')"
    else
        for m in "${modes[@]}"; do echo "pytorch_$m: ${peer_cmd[*]} $(mode_args "$m" | paste -sd ' ')"; done
    fi
fi

nm=${#modes[@]}
if [ "$have_torch" = 1 ] && [ "$peer_process" = server ]; then
    for m in "${modes[@]}"; do serve_start "$m"; done
    serve_ready || exit 1
fi
: > "$tmp/h"
for lay in ${hlayouts[@]+"${hlayouts[@]}"}; do : > "$tmp/h_$lay"; done
for m in "${modes[@]}"; do : > "$tmp/p_$m"; done
for ((i = 1; i <= rounds; i++)); do
    # this round's order of the modes: rotated by one a round
    order=()
    for ((j = 0; j < nm; j++)); do order+=("${modes[$(((i - 1 + j) % nm))]}"); done
    if [ "$have_torch" = 1 ] && [ $((i % 2)) -eq 0 ]; then
        for m in "${order[@]}"; do peer "$m" || exit 1; done
        hcnn_round "$i" || exit 1
    else
        hcnn_round "$i" || exit 1
        if [ "$have_torch" = 1 ]; then
            for m in "${order[@]}"; do peer "$m" || exit 1; done
        fi
    fi
    line="round=$i hcnn_images_per_s=$h"
    p=NA pmode=''
    if [ "$have_torch" = 1 ]; then
        for m in $compared; do
            r=$(cat "$tmp/rate_$m")
            if [ "$p" = NA ] || faster "$r" "$p"; then p=$r pmode=$m; fi
        done
        line+=" pytorch_images_per_s=$p ratio=$(awk -v a="$h" -v b="$p" 'BEGIN { printf "%.3f", a / b }')"
    fi
    # hcnn bench's share of the step spent waiting for data (target <= 0.01)
    dw=$(sed -n 's/^# shares of the step:.* data_wait=\([0-9.]*\).*/\1/p' "$hlog" | tail -n 1)
    [ -z "$dw" ] || line+=" hcnn_data_wait_share=$dw"
    if [ "$have_torch" = 1 ] && [ "$peer_modes" != one ]; then
        for m in "${modes[@]}"; do line+=" pytorch_${m}_images_per_s=$(cat "$tmp/rate_$m")"; done
        line+=" pytorch_mode=$pmode"
    fi
    if [ -n "$hl" ]; then
        for lay in "${hlayouts[@]}"; do line+=" hcnn_${lay}_images_per_s=$(cat "$tmp/hrate_$lay")"; done
        line+=" hcnn_layout=$hl"
    fi
    echo "$line"
done

# the BLAS kernels hcnn ran with, from its header ("...; OpenBLAS 0.3.21 kernels: X (...)")
kernels=$(head -n 1 "$hlog" | sed -n 's/.*; \([^;]*kernels[^(]*\).*/\1/p')
[ -z "$kernels" ] || echo "hcnn_blas=${kernels% }"
# hcnn's median: of its runs, or its faster layout's (hbest)
hbest=''
if [ ${#hlayouts[@]} -eq 0 ]; then
    hm=$(median < "$tmp/h")
else
    hm=NA
    for lay in "${hlayouts[@]}"; do
        median < "$tmp/h_$lay" > "$tmp/hmed_$lay"
        if [ "$hm" = NA ] || faster "$(cat "$tmp/hmed_$lay")" "$hm"; then hm=$(cat "$tmp/hmed_$lay") hbest=$lay; fi
    done
fi
# layout_lines PM: a line for each of hcnn's layouts (ratio against PM) and the faster
layout_lines() {
    [ -n "$hbest" ] || return 0
    for lay in "${hlayouts[@]}"; do
        echo "hcnn_layout=$lay median=$(cat "$tmp/hmed_$lay") ratio=$(ratio "$(cat "$tmp/hmed_$lay")" "$1")"
    done
    echo "hcnn_best_layout=$hbest"
}
if [ "$have_torch" = 1 ]; then
    pm=NA best=''
    for m in $compared; do
        mm=$(median < "$tmp/p_$m")
        if [ "$pm" = NA ] || faster "$mm" "$pm"; then pm=$mm best=$m; fi
    done
    if [ "$peer_modes" != one ]; then
        for m in "${modes[@]}"; do
            mm=$(median < "$tmp/p_$m")
            c=0
            case " $compared " in *" $m "*) c=1 ;; esac
            echo "pytorch_mode=$m median=$mm hcnn_ratio=$(awk -v a="$hm" -v b="$mm" 'BEGIN { printf "%.3f", a / b }') compared=$c"
        done
        echo "pytorch_best_mode=$best"
    fi
    layout_lines "$pm"
    echo "hcnn_median=$hm pytorch_median=$pm ratio=$(awk -v a="$hm" -v b="$pm" 'BEGIN { printf "%.3f", a / b }')"
else
    echo "compare.sh: PyTorch not measured (python3-torch not installed)"
    layout_lines NA
    echo "hcnn_median=$hm pytorch_median=NA ratio=NA"
fi
