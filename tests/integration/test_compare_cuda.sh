#!/usr/bin/env bash
# hcnn on device: cuda as bench/compare.sh runs it (the emulation build, a
# GPU): the run header's device line, which compare.sh reads to check the
# layout it asked for, and compare.sh --hcnn-layout.  Apart from
# test_compare.sh so that CI's emulation stage runs these cases and not
# that file's PyTorch ones again (66 s, 2026-12-01).  Skipped, saying why,
# where hcnn cannot run device: cuda (a CPU build, a machine without a GPU).
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CMP="$HCNN_SRCDIR/bench/compare.sh"
export HCNN
# the measured ways' cache of the test's own (HCNN_CUDA_CONV=measure writes
# it), not the user's (~/.cache/hcnn), as test_cuda.sh's
export XDG_CACHE_HOME="$WORK/cache"
# one step or two: the form, not the rate
SHORT=(--model lenet --batch 16 --warmup 0 --repeats 1 --steps 1)
BENCH=(bench --config "$HCNN_SRCDIR/configs/mnist_lenet.yaml" --set device=cuda --set batch_size=8
    --warmup 0 --repeats 1 --steps 1)
CASES="device_line_conv_ways compare_hcnn_layout_best compare_hcnn_layout_ignored"
if ! "$HCNN" "${BENCH[@]}" >"$WORK/probe.log" 2>&1; then
    for c in $CASES; do
        case_begin $c
        case_skip "hcnn cannot run device: cuda here (a CPU build, or no GPU): $(grep -m 1 -i 'error\|cuda' "$WORK/probe.log" | cut -c 1-160)"
    done
    finish
fi

# The device line says how the convolutions' ways are chosen: the ways
# HCNN_CUDA_CONV names, in pass order, else measured (a GPU; measure on the
# emulation) or by rule (auto on the emulation); and the layout last
case_begin device_line_conv_ways
why=""
line() { grep -m 1 '^hcnn: device: cuda: ' "$WORK/dl.log"; }
HCNN_CUDA_CONV=im2col,transposed,im2col_image HCNN_CUDA_LAYOUT=nhwc "$HCNN" "${BENCH[@]}" \
    >"$WORK/dl.log" 2>&1 || why="HCNN_CUDA_CONV=im2col,transposed,im2col_image: $(tail -n 2 "$WORK/dl.log")"
[ -n "$why" ] || line | grep -qE '; one stream, cuBLAS \(FP32\), convolutions by HCNN_CUDA_CONV=im2col,transposed,im2col_image, NHWC activations$' ||
    why="forced ways: $(line)"
if [ -z "$why" ]; then
    HCNN_CUDA_CONV=measure "$HCNN" "${BENCH[@]}" >"$WORK/dl.log" 2>&1 || why="measure: $(tail -n 2 "$WORK/dl.log")"
    [ -n "$why" ] || line | grep -qE "convolutions by each shape's fastest way, measured \(im2col \+ GEMM, (cuDNN|no cuDNN)\), NCHW activations$" ||
        why="measure: $(line)"
fi
if [ -z "$why" ]; then
    HCNN_CUDA_CONV=auto "$HCNN" "${BENCH[@]}" >"$WORK/dl.log" 2>&1 || why="auto: $(tail -n 2 "$WORK/dl.log")"
    [ -n "$why" ] || line | grep -qE "convolutions by (rule \(im2col \+ GEMM, no cuDNN\)|each shape's fastest way, measured \(im2col \+ GEMM, (cuDNN|no cuDNN)\)), NCHW activations$" ||
        why="auto: $(line)"
fi
if [ -z "$why" ]; then case_ok; else case_fail "$why"; fi

# --hcnn-layout best on a device hcnn can run (the emulation build, a GPU;
# PyTorch left out: the peer's CUDA runs need a GPU): each round line has
# both layouts' rates, its rate and hcnn_layout the faster's; a line a
# layout; the last line's hcnn_median the faster median, hcnn_best_layout
# its layout.  Then an hcnn that drops HCNN_CUDA_LAYOUT (runs NCHW whatever
# it is asked): its NHWC run's header says NCHW, and compare.sh stops
# (exit 1) rather than time NCHW twice
check_layouts() {
    awk -v rounds="$2" '
        function fail(why) { print why; bad = 1; exit 1 }
        /^round=/ {
            nr++
            for (f = 1; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
            a = v["hcnn_nchw_images_per_s"]; b = v["hcnn_nhwc_images_per_s"]
            if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/) fail("round " nr ": no rate a layout: " $0)
            # (a tie: the layout that ran first, which rotates from round to round)
            fl = b + 0 > a + 0 ? "nhwc" : a + 0 > b + 0 ? "nchw" : v["hcnn_layout"]
            if (v["hcnn_images_per_s"] != (fl == "nhwc" ? b : a) || v["hcnn_layout"] != fl || (fl != "nchw" && fl != "nhwc"))
                fail("round " nr ": hcnn_images_per_s/hcnn_layout are not the faster layout: " $0)
            delete v
        }
        /^hcnn_layout=/ {
            if (NF != 3 || $2 !~ /^median=[0-9.]+$/ || $3 != "ratio=NA") fail("bad layout line: " $0)
            split($1, l, "="); split($2, m, "="); med[l[2]] = m[2]
            if (best == "" || m[2] + 0 > med[best] + 0) best = l[2]
        }
        /^hcnn_best_layout=/ { split($0, s, "="); said = s[2] }
        { last = $0 }
        END {
            if (bad) exit 1
            if (nr != rounds) { print nr " round lines, expected " rounds; exit 1 }
            if (length(med) != 2) { print length(med) " layout lines, expected 2"; exit 1 }
            if (said != best) { print "hcnn_best_layout=" said ", expected " best; exit 1 }
            if (last !~ ("^hcnn_median=" med[best] " pytorch_median=NA ratio=NA$")) {
                print "last line: " last ", expected hcnn_median=" med[best]; exit 1
            }
        }' "$1"
}
case_begin compare_hcnn_layout_best
why=""
if PYTHON=/bin/false "$CMP" "${SHORT[@]}" --rounds 2 --device cuda --hcnn-layout best \
    >"$WORK/hl.log" 2>"$WORK/hl.err" &&
   grep -qE '^compare: .* hcnn_layout=best .* device=cuda ' "$WORK/hl.log" &&
   grep -qE '^hcnn_nhwc: HCNN_CUDA_LAYOUT=nhwc .* bench .*--set device=cuda ' "$WORK/hl.log" &&
   why=$(check_layouts "$WORK/hl.log" 2); then
    case_ok
else
    case_fail "${why:-exit status or header}: $(tail -n 4 "$WORK/hl.log") $(tail -n 2 "$WORK/hl.err")"
fi
case_begin compare_hcnn_layout_ignored
printf '#!/bin/sh\nunset HCNN_CUDA_LAYOUT\nexec "%s" "$@"\n' "$HCNN" >"$WORK/hcnn-ignores"
chmod +x "$WORK/hcnn-ignores"
rc=0
HCNN="$WORK/hcnn-ignores" PYTHON=/bin/false "$CMP" "${SHORT[@]}" --rounds 1 --device cuda \
    --hcnn-layout nhwc >"$WORK/hli.log" 2>"$WORK/hli.err" || rc=$?
if [ $rc -eq 1 ] && grep -q '^compare.sh: hcnn_nhwc did not say it ran in NHWC (HCNN_CUDA_LAYOUT=nhwc): hcnn: device: .* NCHW activations' "$WORK/hli.err"; then
    case_ok
else
    case_fail "exit $rc, expected 1: $(tail -n 3 "$WORK/hli.err")"
fi

finish
