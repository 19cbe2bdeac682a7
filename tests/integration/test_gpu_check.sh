#!/usr/bin/env bash
# bench/gpu_check.sh and scripts/gpu-bundle.sh, the scripts a session lent
# the GPU test machine runs there once (docs/gpu-nodes.md, "The GPU test
# machine"), run here without a GPU so that a slip in them (an unset
# variable, a renamed option or file, a wrong grep) shows at every commit
# and not in a 15-minute loan.  In a --with-cuda build (.ci/run's nvcc
# stage): the bundle packs and unpacks; hcnn starts from it with the
# bundle's libraries; every section but "cpu" runs through, every hcnn run
# stopping at "no usable GPU" (none exits 2, a bad command line); the run's
# folder is named from the GPU (tests/integration/fake-slurm/nvidia-smi:
# an H100) and its INDEX line finished; the TF32 comparison comes first
# after the tests; the first comparison, its PyTorch
# servers finding no GPU, is run again with a process a run, the rest so at once (where torch is
# installed); GPU_CHECK_SECONDS cuts the run that
# outlasts it (a python3 that sleeps under a timeout of its own, which the
# cut must not leave running), skips the rest, and the run still
# ends with its summary.  CUDA_VISIBLE_DEVICES is emptied: on a GPU node
# too the scripts run to the GPU's absence.  Skipped (77) in other builds
# and without Debian's Open MPI 4 layout (what the bundle packs).
# About 100 s on 2 cores.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"

case_begin gpu_check_scripts
if ! grep -q '^#define HCNN_HAVE_CUDA 1' "$HCNN_BUILDDIR/config.h" 2>/dev/null ||
    grep -q 'HCNN_CUDA_EMULATION 1' "$HCNN_BUILDDIR/config.h"; then
    case_skip "not a --with-cuda build (scripts/gpu-bundle.sh packs those only)"
    finish
fi
if ! command -v xz >/dev/null; then
    case_skip "no xz (apt-get install xz-utils): the bundle is a .tar.xz"
    finish
fi
# what scripts/gpu-bundle.sh packs of Open MPI: Debian's Open MPI 4 layout
for f in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi \
    /etc/openmpi /usr/bin/orterun /usr/bin/orted; do
    if [ ! -e "$f" ]; then
        case_skip "no $f: scripts/gpu-bundle.sh packs Debian's Open MPI 4 (apt-get install openmpi-bin libopenmpi-dev)"
        finish
    fi
done
case_ok

# The scripts run from a copy of the tree's parts they use: gpu_check.sh
# writes results/gpu/ beside itself (make distcheck's source is read-only).
S=$HCNN_SRCDIR T=$WORK/tree
mkdir -p "$T/tests/integration" "$T/results/gpu" "$WORK/bin"
cp -r "$S/bench" "$S/configs" "$S/scripts" "$T/"
cp "$S/tests/lib.sh" "$T/tests/"
cp "$S/tests/integration/test_cuda.sh" "$S/tests/integration/test_compare_cuda.sh" "$T/tests/integration/"
chmod -R u+w "$T" # (a read-only source's modes: lib.sh removes $WORK at the end)
echo "# one line per GPU run" >"$T/results/gpu/INDEX"
cp "$S/tests/integration/fake-slurm/nvidia-smi" "$WORK/bin/"
# python3 for gpu_check.sh's PyTorch runs: the one here (peer.py's command
# line is checked, then it stops without torch or a GPU), or one that
# sleeps (the run GPU_CHECK_SECONDS cuts: the machine section's PyTorch
# version, the first run bounded) under a timeout of its own, as
# test_cuda.sh's runs are: its process group, not the bound's, which the
# cut must not leave running (the pids in $INNER_PIDS)
export INNER_PIDS=$WORK/inner-pids
printf '#!/bin/sh\ntimeout 300 sleep 300 &\necho $! >>"$INNER_PIDS"\nwait\n' >"$WORK/bin/slow-python"
chmod +x "$WORK/bin/nvidia-smi" "$WORK/bin/slow-python"
# no GPU even on a GPU node (make check there): every run stops at its absence
export PATH=$WORK/bin:$PATH FAKE_GPUS=1 CUDA_VISIBLE_DEVICES=
# the settings of gpu_check.sh and of its runs that the caller may have set
unset GPU_CHECK_SECONDS HCNN_CUDA_CONV HCNN_CUDA_LAYOUT COMPARE_ROUNDS COMPARE_FORMAT COMPARE_PEER_PROCESS \
    COMPARE_HCNN_LAYOUT

case_begin bundle_packs
# (XZ_OPT=-0: a quick compression; the tree copy has no MNIST to pack)
if XZ_OPT=-0 timeout -k 5 120 bash "$T/scripts/gpu-bundle.sh" "$WORK/b.tar.xz" "$HCNN_BUILDDIR" \
    >"$WORK/bundle.log" 2>&1 && [ -s "$WORK/b.tar.xz" ]; then
    case_ok
else
    case_fail "scripts/gpu-bundle.sh: $(tail -n 3 "$WORK/bundle.log")"
    finish
fi

expect_fail gpu_check_seconds_checked "GPU_CHECK_SECONDS=ten: expected a whole number" \
    env GPU_CHECK_SECONDS=ten bash "$T/bench/gpu_check.sh" "$WORK/b.tar.xz" "$WORK/never" tests

# the run's folder: results/gpu/DATE-GPU-COMMIT, found by its session.log
run_dir() { find "$T/results/gpu" -mindepth 2 -name session.log -newer "$1" -printf '%h\n' | head -n 1; }
index_line() { grep "^${1##*/} | " "$T/results/gpu/INDEX"; }

touch "$WORK/t1"
timeout -k 5 300 env PYTHON="${PYTHON:-/usr/bin/python3}" \
    bash "$T/bench/gpu_check.sh" "$WORK/b.tar.xz" "" "tests kernels bench nsight" >"$WORK/all.out" 2>&1
rc=$?
D=$(run_dir "$WORK/t1")
L=$D/session.log
case_begin every_section_runs
if [ "$rc" -ne 0 ] || [ ! -f "$L" ]; then
    case_fail "exit $rc, session.log ${D:-not written}: $(tail -n 5 "$WORK/all.out")"
else
    miss=""
    for stamp in "the conformance suite on cuda" "test_cuda.sh under each convolution choice" \
        "--- tests/integration/test_compare_cuda.sh exit" \
        "hcnn bench ResNet-18 batch 128 fp32, HCNN_CUDA_CONV=" "HCNN_CUDA_LAYOUT=nhwc" \
        "bench/compare.sh --device cuda --model resnet18 --batch 128 --precision tf32 --torch-format best --hcnn-layout best" \
        "bench/compare.sh --device cuda --model resnet18 --batch 128 --precision bf16 --torch-format best --hcnn-layout auto" \
        "bench/compare.sh --device cuda --model lenet --batch 256 --precision fp32 --torch-format best --hcnn-layout auto" \
        "s: done"; do
        grep -qF -- "$stamp" "$L" || miss+=" '$stamp'"
    done
    # kernels: its runs where the build has CUPTI's kernel_share.so, else the line saying so
    for k in resnet_b128_tf32 pytorch_resnet_b128_tf32 resnet_b128_tf32_nhwc pytorch_resnet_b128_fp32; do
        grep -qE "kernel time: $k\$|kernel_share.so missing" "$L" || miss+=" kernels($k)"
    done
    grep -qE 'no ncu|Nsight Compute:' "$L" || miss+=" nsight"
    # the order a loan's first call needs: the TF32 comparison (the target
    # not reached) the first comparison, before the fp32 bench runs and the
    # kernel-time targets, right after the tests
    first=$(grep -m 1 -n '^=== .*: bench/compare.sh' "$L")
    if ! grep -q -- '--precision tf32 ' <<<"$first"; then
        miss+=" the TF32 comparison first (first: '${first#*: }')"
    else
        for later in 'hcnn bench ResNet-18 batch 128 fp32, HCNN_CUDA_CONV=' 'kernel time: resnet_b128_'; do
            n=$(grep -m 1 -nF -- "$later" "$L" | cut -d: -f1)
            [ -z "$n" ] || [ "$n" -gt "${first%%:*}" ] || miss+=" '$later' after the TF32 comparison"
        done
    fi
    if [ -n "$miss" ]; then case_fail "session.log lacks:$miss"; else case_ok; fi
fi

case_begin diagnostics_alone
# the diagnostics without the targets' runs (a loan's second call)
touch "$WORK/t3"
timeout -k 5 300 env PYTHON="${PYTHON:-/usr/bin/python3}" \
    bash "$T/bench/gpu_check.sh" "$WORK/b.tar.xz" "" diagnostics >"$WORK/diag.out" 2>&1
rc=$?
DD=$(run_dir "$WORK/t3")
if [ "$rc" -ne 0 ] || [ ! -f "$DD/session.log" ]; then
    case_fail "exit $rc, session.log ${DD:-not written}: $(tail -n 5 "$WORK/diag.out")"
elif grep -qE 'unbound variable|syntax error|command not found|bad substitution|^exit 2$' "$DD/session.log"; then
    case_fail "$DD/session.log: $(grep -B 1 -E 'unbound variable|syntax error|command not found|bad substitution|^exit 2$' "$DD/session.log" | head -n 4)"
elif ! grep -qF 'HCNN_CUDA_CONV=cudnn (cuDNN graphs), HCNN_CUDA_LAYOUT=nhwc' "$DD/session.log" ||
    ! grep -qE 'kernel time: pytorch_resnet_b128_fp32|kernel_share.so missing' "$DD/session.log" ||
    ! grep -qE 'kernel time: resnet_b128_tf32$|kernel_share.so missing' "$DD/session.log" ||
    grep -qE 'test_cuda.sh under|HCNN_CUDA_CONV=(auto|im2col)$|bench/compare.sh|kernel time: resnet_b128_auto' "$DD/session.log" ||
    [ "${DD##*-}" != diagnostics ]; then
    case_fail "$DD: not the diagnostics alone: $(grep '^=== ' "$DD/session.log" | cut -c 1-100 | tr '\n' ' ')"
else case_ok; fi

case_begin hcnn_starts_from_bundle
# hcnn --version under the bundle's environment: its BLAS from the bundle's lib/
if grep -qE '^hcnn [0-9]' "$L" && grep -qE '^BLAS library: /.*/lib/lib' "$L" &&
    ! grep -q 'does not start here' "$L"; then
    case_ok
else
    case_fail "no hcnn --version from the bundle in session.log: $(grep -m 3 -E '^hcnn|BLAS|start' "$L")"
fi

case_begin no_script_errors
# bash's own complaints (nvidia-smi is there: the fake), or a run that
# refused its command line (exit 2) where each should stop at the GPU
errs=$(grep -B 1 -E 'unbound variable|syntax error|command not found|bad substitution|^exit 2$' "$L")
nogpu=$(grep -L 'no usable GPU' "$D"/bench_resnet_b128_*.log "$D"/test_cuda_*.log 2>/dev/null)
if [ -n "$errs" ]; then
    case_fail "session.log: $errs"
elif [ -n "$nogpu" ]; then
    # shellcheck disable=SC2086 # one or more files, a line each
    case_fail "runs that did not reach the GPU's absence: $nogpu: $(tail -n 2 $nogpu | head -n 6)"
elif ! ls "$D"/bench_resnet_b128_bf16_cudnn_nhwc.log "$D"/compare.log >/dev/null 2>&1; then
    case_fail "a run's log is missing: $(ls "$D")"
else
    case_ok
fi

# PyTorch's servers (compare.sh --peer-process server) find no GPU and end
# before they are ready: the first comparison is run again with a process a
# run (the retry a loan relies on when the servers fail), and the four
# after it are run so at once (no servers tried again), said in
# session.log and the INDEX line; each stops at hcnn's GPU's absence
case_begin compare_retries_per_run
if ! "${PYTHON:-/usr/bin/python3}" -c 'import torch' >/dev/null 2>&1; then
    case_skip "no python3-torch here (${PYTHON:-/usr/bin/python3}): compare.sh runs hcnn alone, no servers"
elif [ "$(grep -c '(PyTorch failed with its servers)$' "$L")" -ne 1 ] ||
    [ "$(grep -c '(PyTorch failed with its servers before)$' "$L")" -ne 4 ] ||
    [ "$(grep -c '^peer_server: ' "$D/compare.log")" -ne 1 ] ||
    [ "$(grep -c 'PyTorch server of .* ended before it was ready' "$D/compare.log")" -ne 1 ] ||
    [ "$(grep -c -- '--peer-process per-run (PyTorch failed' "$D/compare.log")" -ne 5 ]; then
    case_fail "expected 1 retry and 4 runs with a process a run: $(grep -E 'PyTorch (failed|server)' "$L" "$D/compare.log" | head -n 6)"
else
    case_ok
fi

case_begin run_folder_and_index
line=$(index_line "$D")
if ! [[ ${D##*/} =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}-h100-[0-9a-z]+ ]]; then
    case_fail "folder ${D##*/}: expected DATE-h100-COMMIT (the fake nvidia-smi's H100)"
elif [ -z "$line" ] || grep -q 'unfinished' <<<"$line" || ! grep -q 'conformance' <<<"$line"; then
    case_fail "results/gpu/INDEX: '${line:-no line}'"
else
    case_ok
fi

# GPU_CHECK_SECONDS: a python3 that sleeps past it in the machine section
# (cut: 35 s less the bundle's unpacking are left), then the tests and
# benchmarks left skipped.  What is checked is what the script decided
# (the bound it gave, the runs it skipped), not a time it took: the
# outer timeout only keeps a broken budget from hanging the test.
touch "$WORK/t2"
start=$(date +%s)
timeout -k 5 120 env GPU_CHECK_SECONDS=45 PYTHON="$WORK/bin/slow-python" \
    bash "$T/bench/gpu_check.sh" "$WORK/b.tar.xz" "" "tests bench" >"$WORK/cut.out" 2>&1
rc=$? took=$(($(date +%s) - start))
D=$(run_dir "$WORK/t2")
L=$D/session.log
case_begin gpu_check_seconds_cuts
n=$(grep -cE '^gpu_check.sh: (cut after|skipped, GPU_CHECK_SECONDS=45 spent)' "$L" 2>/dev/null)
cut_s=$(sed -n 's/^gpu_check.sh: cut after \([0-9]*\) s by .*/\1/p' "$L" 2>/dev/null | head -n 1)
line=$(index_line "$D")
# the cut run's inner timeout and its sleep: gone (a zombie, dead but not
# yet reaped where nothing reaps orphans, counts as gone)
alive=""
while read -r p; do
    st=$(sed -n 's/^[0-9]* ([^)]*) \([A-Z]\).*/\1/p' "/proc/$p/stat" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ] && alive+=" $p"
done < <(cat "$INNER_PIDS" 2>/dev/null)
if [ "$rc" -ne 0 ] || [ ! -f "$L" ]; then
    case_fail "exit $rc, session.log ${D:-not written}: $(tail -n 5 "$WORK/cut.out")"
elif ! grep -q '^gpu_check.sh: cut after' "$L" || ! grep -q '^gpu_check.sh: skipped' "$L" ||
    ! grep -q 's: done' "$L"; then
    case_fail "expected a cut run, skipped runs and the end: $(grep -E 'cut|skipped|done' "$L" | head -n 5)"
elif [ "$cut_s" -gt 35 ]; then
    # (the bound the budget gave, not a time measured: 45 s less 10 for the summary, at most)
    case_fail "a run given ${cut_s} s by GPU_CHECK_SECONDS=45: more than the 35 s it leaves"
elif ! grep -q "| .*$n run(s) cut or skipped by GPU_CHECK_SECONDS=45" <<<"$line"; then
    case_fail "results/gpu/INDEX does not count the $n cut or skipped: '$line'"
elif ! grep -q '^gpu_check.sh: killed [1-9][0-9]* process(es) left running by slow-python' "$L" ||
    ! [ -s "$INNER_PIDS" ] || [ -n "$alive" ]; then
    case_fail "the cut run's inner timeout ($(paste -sd ' ' "$INNER_PIDS" 2>/dev/null); running:${alive:- none}) left running or not named: $(grep -m 2 'killed' "$L")"
else
    echo "# ${took} s; $n run(s) cut or skipped: $(grep -m 1 '^gpu_check.sh: cut after' "$L" | cut -c 1-120)"
    case_ok
fi

finish
