#!/usr/bin/env bash
# blas_kernels and hcnn tune (include/hcnn/blas.h): the measurement's table
# and cache, the choice applied by re-execution and named in the run
# header, forced and environment kernels, bad names, the ranks' agreement.
# Which kernels are fastest depends on the machine, so the cases check the
# mechanism: a table written by tune is what train reads and loads, and a
# cached choice that differs from the environment's kernels is loaded.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
SMALL="$HCNN_SRCDIR/configs/synthetic_small.yaml"
export XDG_CACHE_HOME="$WORK/cache"
mpi_setup
TRAIN=(train --config "$SMALL" -q --set max_steps=2 --set csv= --set checkpoint_dir=)

# a layout train refuses on --ranks N is refused by tune too (it measured a
# data-parallel batch of 32 on 64 ranks as 1 sample a pass)
expect_fail tune_refuses_a_layout_train_refuses "batch_size 32 is smaller than the number of ranks 64" \
    "$HCNN" tune --config "$SMALL" --set strategy=data --ranks 64

if ! "$HCNN" --version | grep -q '^BLAS: OpenBLAS'; then
    # BLIS or a generic CBLAS: no kernels to choose
    case_begin tune_other_blas
    if "$HCNN" tune --config "$SMALL" >"$WORK/tune" 2>&1 && grep -q "its own choice" "$WORK/tune"; then
        case_ok
    else
        case_fail "$(cat "$WORK/tune")"
    fi
    expect_fail name_refused_other_blas "names OpenBLAS kernels" \
        "$HCNN" "${TRAIN[@]}" --set blas_kernels=SkylakeX
    case_begin auto_runs_other_blas
    if "$HCNN" "${TRAIN[@]}" >"$WORK/o" 2>&1; then case_ok; else case_fail "$(tail -n 3 "$WORK/o")"; fi
    finish
fi

# the kernels a run's header names ("OpenBLAS 0.3.21 kernels: NAME (...)")
header_kernels() { sed -n 's/.*OpenBLAS [^ ]* kernels: \([A-Za-z0-9_]*\).*/\1/p' "$1" | head -n 1; }

case_begin tune_table_and_cache
if "$HCNN" tune --config "$SMALL" >"$WORK/tune" 2>&1; then
    last=$(tail -n 1 "$WORK/tune")
    choice=$(echo "$last" | sed -n 's/^choice=\([A-Za-z0-9_]*\) speedup=[0-9.]* measured_s=[0-9.]* cache=\(.*\)$/\1/p')
    cache=$(echo "$last" | sed -n 's/.* cache=\(.*\)$/\1/p')
    if [ -n "$choice" ] && [ -f "$cache" ] && head -n 1 "$cache" | grep -q '^hcnn-blas-kernels 1$' &&
       grep -q "<- chosen" "$WORK/tune" && [ "${cache#"$XDG_CACHE_HOME"/hcnn/}" != "$cache" ]; then
        case_ok
    else
        case_fail "table or cache missing: $last"; sed 's/^/#   /' "$WORK/tune"
    fi
else
    case_fail "$(tail -n 3 "$WORK/tune")"
fi

# train reads the table tune wrote, loads its choice and says so
case_begin auto_uses_cached_choice
"$HCNN" "${TRAIN[@]}" >"$WORK/auto" 2>&1
got=$(header_kernels "$WORK/auto")
if [ "$got" = "$choice" ] && grep -q "(auto: .*cached in $cache)" "$WORK/auto"; then case_ok
else case_fail "header names '$got', tune chose '$choice': $(grep -m1 kernels "$WORK/auto")"; fi

# a cached choice other than the kernels the environment loads: the run
# re-executes itself with them (the case of an environment that sets slower
# kernels than the measurement found)
case_begin auto_reexecutes_with_other_kernels
env_kernels=$("$HCNN" --version | sed -n 's/^BLAS: OpenBLAS [^ ]* kernels: \([A-Za-z0-9_]*\).*/\1/p')
n=$(grep -c '^candidate ' "$cache")
other=-1 name=
for ((i = 0; i < n; i++)); do
    line=$(grep '^candidate ' "$cache" | sed -n "$((i + 1))p")
    k=$(echo "$line" | awk '{print $2}') s=$(echo "$line" | awk '{print $4}')
    if [ "$k" != "$env_kernels" ] && awk -v s="$s" 'BEGIN { exit !(s > 0) }'; then other=$i name=$k; break; fi
done
if [ "$other" -lt 0 ]; then
    case_skip "only one kernel type runs on this CPU"
else
    sed -i "s/^choice .*/choice $other/" "$cache"
    "$HCNN" "${TRAIN[@]}" >"$WORK/other" 2>&1
    got=$(header_kernels "$WORK/other")
    if [ "$got" = "$name" ]; then case_ok
    else case_fail "cache chose $name (environment: $env_kernels), header: $(grep -m1 kernels "$WORK/other")"; fi
fi

case_begin forced_name
"$HCNN" "${TRAIN[@]}" --set blas_kernels="$choice" >"$WORK/forced" 2>&1
if [ "$(header_kernels "$WORK/forced")" = "$choice" ] && grep -q "(blas_kernels: $choice)" "$WORK/forced"; then
    case_ok
else
    case_fail "$(grep -m1 kernels "$WORK/forced")"
fi

case_begin env_keeps_environment
"$HCNN" "${TRAIN[@]}" --set blas_kernels=env >"$WORK/env" 2>&1
if [ "$(header_kernels "$WORK/env")" = "$env_kernels" ] && grep -q "(env: " "$WORK/env"; then case_ok
else case_fail "$(grep -m1 kernels "$WORK/env")"; fi

expect_fail unknown_name "OpenBLAS has no kernels 'NoSuchCore'" \
    "$HCNN" "${TRAIN[@]}" --set blas_kernels=NoSuchCore
expect_fail bad_name_chars "blas_kernels.*expected a name" \
    "$HCNN" "${TRAIN[@]}" --set 'blas_kernels=Sky lake'

# blas_kernels: auto (the default) makes one choice per CPU, library build
# and model, measured on one thread: runs at 1, 2 and 17 threads share one
# table and write byte-identical checkpoints.  (Whether a fresh measurement
# makes the same choice depends on timings: not a test, see docs/performance.md, "Which
# OpenBLAS kernels".)
case_begin auto_same_choice_any_thread_count
rm -rf "$XDG_CACHE_HOME"
why=
for t in 1 2 17; do
    OMP_NUM_THREADS=$t "$HCNN" "${TRAIN[@]}" --set threads=$t --set checkpoint_dir="$WORK/ck-t$t" \
        >"$WORK/auto-t$t.log" 2>&1 || why="$why; $t threads failed: $(tail -n 1 "$WORK/auto-t$t.log")"
    k=$(header_kernels "$WORK/auto-t$t.log")
    [ "$k" = "$(header_kernels "$WORK/auto-t1.log")" ] || why="$why; $t threads chose $k"
    [ "$t" = 1 ] || same_bits "$WORK/ck-t1/final.hcnn" "$WORK/ck-t$t/final.hcnn" ||
        why="$why; $t threads: other bits"
done
tables=$(ls "$XDG_CACHE_HOME"/hcnn/blas-*.txt 2>/dev/null | wc -l)
[ "$tables" -eq 1 ] || why="$why; $tables tables, expected 1"
if [ -z "$why" ]; then case_ok; else case_fail "${why#; }"; fi

# MPI: the ranks share the node's table (one measures, the other waits on
# the lock) and agree; ranks with different kernels are stopped at start
case_begin mpi_ranks_share_the_choice
rm -rf "$XDG_CACHE_HOME"
if "${MPIRUN[@]}" -np 2 -x XDG_CACHE_HOME "$HCNN" "${TRAIN[@]}" --set strategy=data >"$WORK/mpi" 2>&1 &&
   [ "$(ls "$XDG_CACHE_HOME"/hcnn/blas-*.txt | wc -l)" -eq 1 ]; then
    case_ok
else
    case_fail "$(tail -n 3 "$WORK/mpi")"
fi
if [ "$other" -ge 0 ]; then
    expect_fail mpi_ranks_disagree "the ranks run different BLAS kernels" \
        "${MPIRUN[@]}" -np 1 "$HCNN" "${TRAIN[@]}" --set strategy=data --set blas_kernels="$env_kernels" : \
        -np 1 "$HCNN" "${TRAIN[@]}" --set strategy=data --set blas_kernels="$name"
fi

# a cache directory that cannot be used (issue 37): XDG_CACHE_HOME a file,
# or a directory this user cannot write.  The run measures, succeeds, and
# says so in one warning (never "error:"), its header saying "not cached"
# and why, never "cached in".  Before: "hcnn: error: cannot create
# directory", and a header claiming the table was cached.
: >"$WORK/cachefile"
nocache() { # NAME XDG [USER]
    local name=$1 xdg=$2 user=${3:-}
    case_begin "$name"
    if [ -n "$user" ]; then
        su "$user" -s /bin/sh -c "XDG_CACHE_HOME='$xdg' '$HCNN' train --config '$SMALL' -q --set max_steps=2 \
            --set csv= --set checkpoint_dir=" >"$WORK/$name.out" 2>"$WORK/$name.err"
    else
        XDG_CACHE_HOME="$xdg" "$HCNN" "${TRAIN[@]}" >"$WORK/$name.out" 2>"$WORK/$name.err"
    fi
    local rc=$?
    if [ $rc -eq 0 ] && ! grep -q 'error' "$WORK/$name.err" &&
        [ "$(grep -c '^hcnn: warning: BLAS kernels: the table is not cached' "$WORK/$name.err")" -eq 1 ] &&
        grep -q 'kernels: .*(auto: .*measured, not cached: ' "$WORK/$name.out" && ! grep -q 'cached in' "$WORK/$name.out"; then
        case_ok
    else
        case_fail "exit $rc: $(cat "$WORK/$name.err") $(grep -m1 kernels "$WORK/$name.out")"
    fi
}
nocache xdg_cache_home_a_file "$WORK/cachefile"
if [ "$(id -u)" -eq 0 ] && id nobody >/dev/null 2>&1; then
    mkdir -p "$WORK/rocache/hcnn" && chmod 555 "$WORK/rocache/hcnn" && chmod 755 "$WORK" "$WORK/rocache"
    nocache xdg_cache_home_not_writable "$WORK/rocache" nobody
fi

finish
