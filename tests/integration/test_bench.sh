#!/usr/bin/env bash
# hcnn bench and train --profile: what users' scripts parse.  The run
# prints one line per repeat, a per-block table (with a row for every layer
# of a residual block), the shares of the step, and as its last line
# images_per_s=<median of the repeats>.  Timings themselves are not judged
# here (benchmarks, not timed tests); their form and consistency are.
# Before the repeats, one line says what the set-up and the warm-up took.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
RES="$HCNN_SRCDIR/configs/synthetic_resnet.yaml"
BENCH=(bench --config "$RES" --warmup 1 --repeats 3 --steps 2 --set batch_size=16)

# check_bench LOG: the output's form; prints why not and returns 1 if wrong
check_bench() {
    local log=$1
    local last
    last=$(tail -n 1 "$log")
    if ! [[ "$last" =~ ^images_per_s=[0-9]+(\.[0-9]+)?$ ]]; then
        echo "last line is '$last', expected images_per_s=<number>"; return 1
    fi
    local nrep
    nrep=$(grep -cE '^repeat=[0-9]+ images_per_s=[0-9.]+ step_ms=[0-9.]+$' "$log")
    if [ "$nrep" -ne 3 ]; then echo "$nrep repeat lines, expected 3"; return 1; fi
    # the last line is the median of the repeats
    local median
    median=$(sed -nE 's/^repeat=[0-9]+ images_per_s=([0-9.]+) .*/\1/p' "$log" | sort -g | sed -n 2p)
    if [ "images_per_s=$median" != "$last" ]; then
        echo "last line $last, median of the repeats $median"; return 1
    fi
    local b
    for b in conv1 bn1 layer1.0 layer1.0.conv1 layer1.0.bn2 layer2.0 layer2.0.downsample.0 fc; do
        if ! grep -qE "^  $b +[a-z]+ +[0-9.]+ +[0-9.]+ " "$log"; then
            echo "no table row for $b"; return 1
        fi
    done
    # convolutions carry the raw-GEMM reference, the ratio to it and the
    # backend's plan, whose whole line follows the table
    if ! grep -qE '^  layer1\.0\.conv2 +conv( +[0-9.]+){5} +[0-9.]+x [a-z0-9_]+$' "$log"; then
        echo "layer1.0.conv2 row lacks gemm_ms, gemm_gflops, vs_gemm, plan"; return 1
    fi
    if ! grep -qE '^# plan layer1\.0\.conv2: [a-z0-9_]+: .+' "$log"; then
        echo "no plan line for layer1.0.conv2"; return 1
    fi
    if ! grep -qE '^# shares of the step: gemm=[0-9.]+ data_wait=[0-9.]+ optimizer=[0-9.]+ communication=[0-9.]+ bubble=[0-9.]+ outside_gemm=-?[0-9.]+$' "$log"; then
        echo "no shares line"; return 1
    fi
    if ! grep -qE '^gemm_share=[0-9.]+$' "$log"; then echo "no gemm_share line"; return 1; fi
    # what came before the timed steps, before the first of them
    if ! grep -qE '^# setup_ms=[0-9]+\.[0-9] warmup_ms=[0-9]+\.[0-9] \(the run.s set-up; its 1 warm-up steps\)$' "$log" ||
        [ "$(grep -n -m 1 -E '^# setup_ms=|^repeat=' "$log" | cut -d: -f2 | cut -c1-7)" != "# setup" ]; then
        echo "no '# setup_ms=... warmup_ms=...' line before the repeats"; return 1
    fi
    return 0
}

case_begin bench_serial_output
if "$HCNN" "${BENCH[@]}" >"$WORK/serial.log" 2>&1 && why=$(check_bench "$WORK/serial.log"); then
    case_ok
else
    case_fail "${why:-exit status $?}: $(tail -n 3 "$WORK/serial.log")"
fi

# every way of running the convolutions, and both kinds of batch assembly
for v in conv_algo=batched conv_algo=per_thread conv_algo=winograd data_prefetch=on data_prefetch=off; do
    case_begin "bench_${v/=/_}"
    if "$HCNN" "${BENCH[@]}" --set "$v" >"$WORK/$v.log" 2>&1 && why=$(check_bench "$WORK/$v.log"); then
        case_ok
    else
        case_fail "${why:-exit status $?}: $(tail -n 3 "$WORK/$v.log")"
    fi
done

# the run header says how convolutions and batch assembly run
case_begin header_names_choices
if grep -q "conv_algo per_thread" "$WORK/conv_algo=per_thread.log" &&
   grep -q "batch assembly: background thread" "$WORK/data_prefetch=on.log" &&
   grep -q "batch assembly: by the training threads" "$WORK/data_prefetch=off.log"; then
    case_ok
else
    case_fail "$(grep '^hcnn: convolutions' "$WORK"/*.log)"
fi

case_begin train_profile
if "$HCNN" train --config "$RES" --profile --set epochs=1 --set max_steps=4 --set csv= \
        --set checkpoint_dir= >"$WORK/train.log" 2>&1 &&
   grep -qE '^  layer1\.0\.conv1 +conv ' "$WORK/train.log" &&
   grep -qE '^# shares of the step: gemm=' "$WORK/train.log"; then
    case_ok
else
    case_fail "$(tail -n 5 "$WORK/train.log")"
fi

expect_fail bench_bad_repeats "repeats" "$HCNN" bench --config "$RES" --repeats 0

mpi_setup
case_begin bench_data_parallel
if "${MPIRUN[@]}" -np 2 "$HCNN" "${BENCH[@]}" --set strategy=data >"$WORK/dp.log" 2>&1 &&
   why=$(check_bench "$WORK/dp.log") && [ "$(grep -c '^images_per_s=' "$WORK/dp.log")" -eq 1 ]; then
    case_ok    # one rank reports the global rate
else
    case_fail "${why:-exit status or line count}: $(tail -n 3 "$WORK/dp.log")"
fi

finish
