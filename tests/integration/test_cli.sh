#!/usr/bin/env bash
# Command line, configuration and data errors as a user meets them: one
# clear message naming the file/key/value, a non-zero exit, never a crash.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/synthetic_small.yaml"
MNIST="$HCNN_SRCDIR/configs/mnist_lenet.yaml"

case_begin help
if "$HCNN" --help | grep -q "train" && "$HCNN" train --help | grep -q -- "--set" &&
   "$HCNN" eval --help | grep -q -- "--checkpoint" && "$HCNN" --version | grep -q hcnn; then
    case_ok
else
    case_fail "--help output incomplete"
fi
# every command's help lists its -h, --help (bench, export and import did not)
case_begin every_command_help_lists_help
missing="" n=0
for c in $("$HCNN" --help | sed -n '/^commands:/,/^$/p' | awk 'NR > 1 && NF { print $1 }'); do
    n=$((n + 1))
    "$HCNN" "$c" --help 2>&1 | grep -q -- '^  -h, --help  *this help$' || missing+=" $c"
done
if [ "$n" -lt 8 ]; then case_fail "hcnn --help lists $n commands (expected 8 or more)"
elif [ -z "$missing" ]; then case_ok; else case_fail "no '-h, --help' line in the help of:$missing"; fi

expect_fail no_command "missing command" "$HCNN"
expect_fail unknown_command "unknown command 'trian'" "$HCNN" trian
expect_fail unknown_option "unknown option '--confg'" "$HCNN" train --confg x.yaml
expect_fail missing_config_option "missing --config" "$HCNN" train
expect_fail eval_without_checkpoint "missing --checkpoint" "$HCNN" eval --config "$CFG"
expect_fail missing_config_file "nope\.yaml" "$HCNN" train --config "$WORK/nope.yaml"

case_begin exit_status_usage_is_2
"$HCNN" train --bogus >/dev/null 2>&1
rc=$?
if [ $rc -eq 2 ]; then case_ok; else case_fail "exit $rc, expected 2"; fi

# configuration errors name the key and the file
printf 'lrr: 0.1\n' | cat "$CFG" - >"$WORK/unknown.yaml"
expect_fail unknown_key "unknown.yaml.*lrr" "$HCNN" train --config "$WORK/unknown.yaml"
expect_fail bad_override_type "batch_size.*abc" "$HCNN" train --config "$CFG" --set batch_size=abc
expect_fail out_of_range "momentum.*1\.5" "$HCNN" train --config "$CFG" --set momentum=1.5
expect_fail unknown_override_key "epochz" "$HCNN" train --config "$CFG" --set epochz=2
expect_fail bad_strategy "strategy" "$HCNN" train --config "$CFG" --set strategy=magic
expect_fail bad_block "model.blocks.0" "$HCNN" train --config "$CFG" --set model.blocks.0.kernel=99
expect_fail classes_mismatch "classes" "$HCNN" train --config "$CFG" --set model.blocks.7.out=5

# data errors name the file
expect_fail missing_data_dir "fetch-data" "$HCNN" train --config "$MNIST" --set data_dir="$WORK/none"
mkdir -p "$WORK/bad"
printf '\x00\x00\x08\x04\x00\x00\x00\x01' >"$WORK/bad/train-images-idx3-ubyte"
printf '\x00\x00\x08\x01\x00\x00\x00\x01\x03' >"$WORK/bad/train-labels-idx1-ubyte"
cp "$WORK/bad/train-images-idx3-ubyte" "$WORK/bad/t10k-images-idx3-ubyte"
cp "$WORK/bad/train-labels-idx1-ubyte" "$WORK/bad/t10k-labels-idx1-ubyte"
expect_fail wrong_magic "train-images-idx3-ubyte.*magic" "$HCNN" train --config "$MNIST" --set data_dir="$WORK/bad"
printf '\x00\x00\x08\x03\x00\x00\x00\x01\x00\x00\x00\x1c\x00\x00\x00\x1c\x01\x02' >"$WORK/bad/train-images-idx3-ubyte"
expect_fail truncated_images "train-images-idx3-ubyte.*(truncated|short|expected)" "$HCNN" train --config "$MNIST" --set data_dir="$WORK/bad"
# two valid 28x28 MNIST-format images for a model that expects 12x12
mkdir -p "$WORK/tiny"
for split in train t10k; do
    { printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x1c\x00\x00\x00\x1c'; head -c 1568 /dev/zero; } >"$WORK/tiny/$split-images-idx3-ubyte"
    printf '\x00\x00\x08\x01\x00\x00\x00\x02\x01\x02' >"$WORK/tiny/$split-labels-idx1-ubyte"
done
expect_fail shape_mismatch "28" "$HCNN" train --config "$CFG" --set dataset=mnist --set data_dir="$WORK/tiny"

# checkpoints: wrong model, truncated, corrupted
"$HCNN" train --config "$CFG" -q --set epochs=1 --set max_steps=2 --set checkpoint_dir="$WORK/ck" --set csv= >/dev/null 2>&1
if [ -f "$WORK/ck/final.hcnn" ]; then
    expect_fail ckpt_other_model "differs from the configured model" "$HCNN" eval --config "$CFG" --checkpoint "$WORK/ck/final.hcnn" --set model.blocks.3.out=12
    head -c 300 "$WORK/ck/final.hcnn" >"$WORK/trunc.hcnn"
    expect_fail ckpt_truncated "trunc.hcnn.*(truncated|corrupt)" "$HCNN" eval --config "$CFG" --checkpoint "$WORK/trunc.hcnn"
    cp "$WORK/ck/final.hcnn" "$WORK/flip.hcnn"
    size=$(stat -c %s "$WORK/flip.hcnn")
    printf '\x55' | dd of="$WORK/flip.hcnn" bs=1 seek=$((size - 40)) conv=notrunc 2>/dev/null
    expect_fail ckpt_corrupt "flip.hcnn.*CRC32" "$HCNN" eval --config "$CFG" --checkpoint "$WORK/flip.hcnn"
    printf 'not a checkpoint' >"$WORK/junk.hcnn"
    expect_fail ckpt_bad_magic "junk.hcnn.*magic" "$HCNN" eval --config "$CFG" --checkpoint "$WORK/junk.hcnn"
else
    case_begin checkpoint_written; case_fail "no checkpoint from the short run"
fi

# empty values and options given twice (issue 37): --resume "$CKPT" with
# CKPT unset started a new run beside the run's own checkpoints, and a
# second --config silently replaced the first; both are usage errors (2),
# the same under --check, before anything is read or trained
usage2() { # NAME PATTERN ARGS...: exit 2 with PATTERN, nothing trained
    local name=$1 pattern=$2
    shift 2
    case_begin "$name"
    timeout -k 5 60 "$HCNN" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    local rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$pattern" "$WORK/$name.err" && ! grep -q '^epoch=\|check: ok' "$WORK/$name.out"; then
        case_ok
    else
        case_fail "exit $rc: $(cat "$WORK/$name.err" "$WORK/$name.out" | head -n 5)"
    fi
}
"$HCNN" train --config "$CFG" -q --set csv= --set max_steps=2 --set checkpoint_dir="$WORK/er" >/dev/null 2>&1
usage2 resume_empty "option --resume is empty" train --config "$CFG" -q --set csv= --set checkpoint_dir="$WORK/er" --resume ''
usage2 resume_empty_equals "option --resume is empty" train --config "$CFG" -q --set csv= --set checkpoint_dir="$WORK/er" --resume=
usage2 resume_empty_check "option --resume is empty" train --check --config "$CFG" --set csv= --set checkpoint_dir="$WORK/er" -r ''
usage2 resume_twice "option --resume given twice ('latest', then 'auto')" train --config "$CFG" --resume latest --resume auto
usage2 config_twice "option --config given twice ('$CFG', then '$MNIST')" train --config "$CFG" --config "$MNIST"
usage2 config_twice_check "option --config given twice" train --check -c "$CFG" --config="$MNIST"
usage2 config_empty "option --config is empty" eval --config '' --checkpoint "$WORK/er/final.hcnn"
usage2 checkpoint_empty "option --checkpoint is empty" eval --config "$CFG" --checkpoint ''
usage2 output_empty "option --output is empty" import "$WORK/er" --config "$CFG" -o ''
usage2 diff_file_empty "an empty argument where a file" diff "$WORK/er/final.hcnn" ''
usage2 plan_config_twice "option --config given twice" plan --config "$CFG" --config "$MNIST"
usage2 plan_config_empty "option --config is empty" plan --config ''

# ---- precision: bf16 on the CPU (issue 38) -------------------------------------------
# Natively through oneDNN (AVX512-BF16, AMX) or refused at start, never
# emulated.  ONEDNN_MAX_CPU_ISA=AVX512_CORE caps what oneDNN dispatches
# below bf16: a CPU without bf16 on every machine.  A build without oneDNN
# (CI's BLIS stage: --without-onednn) refuses bf16 with the rebuild message.
version=$("$HCNN" --version)
capped_version=$(ONEDNN_MAX_CPU_ISA=AVX512_CORE "$HCNN" --version)
if grep -q '^oneDNN: [0-9]' <<<"$version"; then has_onednn=1; else has_onednn=0; fi
cpu_model=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -n 1)
if [ -n "$cpu_model" ]; then cpu_named="the CPU ($cpu_model)"; else cpu_named="this CPU"; fi
REBUILD="hcnn was built without oneDNN: install libdnnl-dev and rerun ./configure (--with-onednn)"

# bf16_refused NAME CMD...: CMD exits 2 with exactly one line on stderr,
# "hcnn: error: <config>: precision: bf16: ..." holding every text of the
# array MUST (fixed strings), before anything is trained or checked
bf16_refused() {
    local name=$1 text
    shift
    case_begin "$name"
    timeout -k 5 60 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    local rc=$? lines missing=""
    lines=$(wc -l <"$WORK/$name.err")
    for text in "hcnn: error: $CFG: precision: bf16: " "${MUST[@]}"; do
        grep -qF -- "$text" "$WORK/$name.err" || missing="$missing '$text'"
    done
    if [ $rc -eq 2 ] && [ "$lines" -eq 1 ] && [ -z "$missing" ] &&
        ! grep -q '^epoch=\|check: ok\|images_per_s=\|test_acc=' "$WORK/$name.out"; then
        case_ok
    else
        case_fail "exit $rc, $lines line(s) on stderr, missing:$missing: $(head -n 5 "$WORK/$name.err")"
    fi
}

BF16=(--config "$CFG" --set precision=bf16)
NO_BF16_CASES=(bf16_refused_no_cpu_bf16_train bf16_refused_no_cpu_bf16_check
               bf16_refused_no_cpu_bf16_bench bf16_refused_no_cpu_bf16_eval)
if [ $has_onednn -eq 1 ]; then
    # the instructions, the CPU, and that the variable caps oneDNN
    MUST=(avx512_bf16 "$cpu_named" "ONEDNN_MAX_CPU_ISA=AVX512_CORE caps oneDNN at "
          "hcnn does not emulate bf16")
    export ONEDNN_MAX_CPU_ISA=AVX512_CORE
    bf16_refused bf16_refused_no_cpu_bf16_train "$HCNN" train "${BF16[@]}" -q --set csv=
    bf16_refused bf16_refused_no_cpu_bf16_check "$HCNN" train "${BF16[@]}" --check
    bf16_refused bf16_refused_no_cpu_bf16_bench "$HCNN" bench "${BF16[@]}" --steps 1 --repeats 1
    bf16_refused bf16_refused_no_cpu_bf16_eval "$HCNN" eval "${BF16[@]}" --checkpoint "$WORK/none.hcnn"
    unset ONEDNN_MAX_CPU_ISA
    for n in bf16_refused_rebuild_train bf16_refused_rebuild_check; do
        case_begin $n; case_skip "this build has oneDNN ($(grep '^oneDNN:' <<<"$version")): the rebuild message is a build's without it (CI's BLIS stage)"
    done
else
    for n in "${NO_BF16_CASES[@]}"; do
        case_begin $n; case_skip "this build has no oneDNN: ONEDNN_MAX_CPU_ISA caps nothing (bf16_refused_rebuild_* instead)"
    done
    MUST=("$REBUILD")
    bf16_refused bf16_refused_rebuild_train "$HCNN" train "${BF16[@]}" -q --set csv=
    bf16_refused bf16_refused_rebuild_check "$HCNN" train "${BF16[@]}" --check
fi

# precision bf16 under conv_algo auto: LeNet-5's convolutions, whose
# products bf16 loses on, keep FP32, and the run header and hcnn bench's
# "# plan" lines say so; conv_algo per_thread rounds them and says nothing
# (conv_plan.c, hcnn_conv_bf16; the bits: tests/unit/test_layers.c)
case_begin bf16_auto_keeps_fp32_said
bf16_state
LENET_CFG="$HCNN_SRCDIR/configs/mnist_lenet.yaml"
if [ "$BF16_STATE" = run ]; then
    "$HCNN" bench --config "$LENET_CFG" --set precision=bf16 --warmup 0 --steps 1 --repeats 1 \
        >"$WORK/kept.out" 2>&1
    rc=$?
    "$HCNN" bench --config "$LENET_CFG" --set precision=bf16 --set conv_algo=per_thread \
        --warmup 0 --steps 1 --repeats 1 >"$WORK/kept_pt.out" 2>&1
    rc_pt=$?
    if [ $rc -eq 0 ] && [ $rc_pt -eq 0 ] &&
        grep -q '^hcnn: convolution plans (layers of the model): .*; 2 kept in FP32 (' "$WORK/kept.out" &&
        [ "$(grep -c '^# plan conv[12]: .*; kept in FP32 (conv_algo auto: bf16 loses' "$WORK/kept.out")" -eq 2 ] &&
        ! grep -q 'kept in FP32' "$WORK/kept_pt.out"; then
        case_ok
    else
        case_fail "exit $rc / $rc_pt: $(grep -E 'convolution plans|^# plan' "$WORK/kept.out" "$WORK/kept_pt.out")"
    fi
elif [ "$BF16_STATE" = fail ]; then
    case_fail "this CPU shows bf16 instructions, yet: $BF16_WHY"
else
    case_skip "precision bf16 does not run here: $BF16_WHY"
fi

# --version names oneDNN (its version and ISA, or how to build with it) and
# the precisions this CPU runs; capped below bf16, bf16 is not among them
case_begin version_names_onednn_and_precisions
onednn_line=$(grep '^oneDNN: ' <<<"$version")
capped_precisions=$(grep '^precisions on this CPU: ' <<<"$capped_version")
if [ $has_onednn -eq 1 ]; then
    want_onednn='^oneDNN: [0-9]+\.[0-9]+\.[0-9]+ \(commit [^)]*\), dispatches [a-z0-9_]+$'
    want_capped="^precisions on this CPU: fp32 \\(bf16: ONEDNN_MAX_CPU_ISA=AVX512_CORE caps oneDNN at (avx512_core|avx2|avx|sse41),"
else
    want_onednn='^oneDNN: none \(\./configure --with-onednn '
    want_capped="^precisions on this CPU: fp32 \\(bf16: hcnn was built without oneDNN: "
fi
if grep -qE "$want_onednn" <<<"$onednn_line" && grep -qE "$want_capped" <<<"$capped_precisions" &&
    grep -qE '^precisions on this CPU: fp32(, bf16$| \()' <<<"$version"; then
    case_ok
else
    case_fail "$(grep -E '^(oneDNN|precisions)' <<<"$version"); capped: $capped_precisions"
fi

# --version says whether NVTX ranges are compiled in (a line of its own after
# CUDA's), as configure decided (config.h's HCNN_HAVE_NVTX)
case_begin version_names_nvtx
nvtx_line=$(grep '^NVTX: ' <<<"$version")
nvtx_built=$(sed -n 's/^#define HCNN_HAVE_NVTX \([01]\)$/\1/p' "$HCNN_BUILDDIR/config.h" 2>/dev/null)
case "$nvtx_built:$nvtx_line" in
1:"NVTX: ranges compiled in ("* | 0:"NVTX: none (./configure --with-nvtx "*) nvtx_agrees=1 ;;
*) nvtx_agrees=0 ;;
esac
if [ $nvtx_agrees -eq 0 ]; then
    case_fail "config.h HCNN_HAVE_NVTX '${nvtx_built:-missing}', --version '${nvtx_line:-no NVTX line}'"
elif [ "$(grep -A1 '^CUDA: ' <<<"$version" | tail -n 1)" != "$nvtx_line" ]; then
    case_fail "the NVTX line does not follow the CUDA line: $(grep -E '^(CUDA|NVTX):' <<<"$version")"
else
    case_ok
fi

# uncapped, train --check does what --version says: "fp32, bf16" checks ok,
# "fp32 (REASON)" refuses bf16 with "precision: REASON" (the CPU without the
# instructions, a build without oneDNN, the CPU path not built yet)
case_begin bf16_as_version_says
precisions=$(sed -n 's/^precisions on this CPU: //p' <<<"$version")
timeout -k 5 60 "$HCNN" train "${BF16[@]}" --check >"$WORK/asv.out" 2>"$WORK/asv.err"
rc=$?
if [ "$precisions" = "fp32, bf16" ]; then
    if [ $rc -eq 0 ] && grep -q 'check: ok' "$WORK/asv.out"; then case_ok
    else case_fail "--version: $precisions; train --check exit $rc: $(head -n 3 "$WORK/asv.err")"; fi
else
    reason=${precisions#fp32 (}
    reason=${reason%)}
    if [ $rc -eq 2 ] && [ "$(wc -l <"$WORK/asv.err")" -eq 1 ] &&
        [ "$(cat "$WORK/asv.err")" = "hcnn: error: $CFG: precision: $reason" ]; then case_ok
    else case_fail "--version: $precisions; train --check exit $rc: $(head -n 3 "$WORK/asv.err")"; fi
fi

finish
