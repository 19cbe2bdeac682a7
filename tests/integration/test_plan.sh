#!/usr/bin/env bash
# hcnn plan: its options and refusals, its table, CSV, plots and verdict,
# the allreduce it prices, and the network calibration.  Nothing here holds
# a prediction against a measured time: on a shared machine that is a coin
# toss (one CI run failed on it).  The validation against measured runs is
# a benchmark with its own report: bench/validate_plan.sh (make validate).
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
CFG="$HCNN_SRCDIR/configs/plan_validate.yaml"
MPIRUN=(timeout --kill-after=10 240 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)

expect_fail plan_needs_config "missing --config" "$HCNN" plan
expect_fail plan_bad_nodes "--nodes '1,x': expected a comma-separated list" "$HCNN" plan --config "$CFG" --nodes 1,x
expect_fail plan_nodes_trailing_comma "--nodes '1,': expected a comma-separated list" "$HCNN" plan --config "$CFG" --nodes 1,
expect_fail plan_bad_network "--network 'nowhere': neither a preset" "$HCNN" plan --config "$CFG" --network nowhere --no-plots -o "$WORK/x"
case_begin plan_bad_network_exits_2 # (a command-line value, as --node's: it exited 1)
"$HCNN" plan --config "$CFG" --network nowhere --no-plots -o "$WORK/x" >/dev/null 2>&1
rc=$?
if [ $rc -eq 2 ]; then case_ok; else case_fail "exit $rc, expected 2"; fi
printf 'alpha_us = 1\nbandwidth_gbs = -3\nreduce_gbs = 5\n' >"$WORK/bad.net"
expect_fail plan_bad_network_file "bad.net:2: bandwidth_gbs: expected a positive number" "$HCNN" plan --config "$CFG" --network "$WORK/bad.net" --no-plots -o "$WORK/x"
expect_fail plan_calibrate_needs_two_ranks "run it under mpirun with 2 ranks" "$HCNN" plan --calibrate-network "$WORK/n.txt"
expect_fail plan_weak_micro_divides "not divisible by --microbatches 5" "$HCNN" plan --config "$CFG" --microbatches 5 --no-plots -o "$WORK/x"

# ---- the projection on the default targets: table, CSV, plots, a verdict ----
case_begin plan_table_csv_plots
"$HCNN" plan --config "$HCNN_SRCDIR/configs/synthetic_small.yaml" --nodes 1,2,4,8 --steps 2 \
    -o "$WORK/p" >"$WORK/p.log" 2>&1
rc=$?
rows=$(grep -c '^weak \|^strong ' "$WORK/p.log")
if [ $rc -ne 0 ]; then case_fail "exit $rc: $(tail -n 3 "$WORK/p.log")"
elif [ "$rows" -ne 20 ] || [ "$(($(wc -l <"$WORK/p/plan.csv") - 1))" -ne 20 ]; then
    case_fail "want 20 rows (data, 2x, 4x, 8x pipelines at 1..8 nodes, weak and strong): $rows"
elif ! grep -q '^hcnn plan: weak scaling at 8 nodes: recommended .*largest loss' "$WORK/p.log"; then
    case_fail "no verdict: $(tail -n 3 "$WORK/p.log")"
elif [ "$(awk -F, 'NR > 1 && $1 == "weak" && $2 == 8 && $18 == 1' "$WORK/p/plan.csv" | wc -l)" -ne 1 ]; then
    case_fail "not one recommended layout at 8 nodes"
elif command -v "${GNUPLOT:-gnuplot}" >/dev/null 2>&1 && [ ! -s "$WORK/p/plan_weak.png" ]; then
    case_fail "no plan_weak.png"
else case_ok; fi
# the sharded optimiser priced beside the configuration's (none): both
# rates, the optimiser's time divided, and the recommendation
case_begin plan_prices_optimizer_sharding
line=$(grep '^hcnn plan: weak scaling at 8 nodes, [a-z_0-9x]*: optimizer_sharding: none' "$WORK/p.log")
if echo "$line" | grep -Eq 'none [0-9.]+ images/s \(optimiser [0-9.]+ ms.*; ranks [0-9.]+ images/s \(optimiser [0-9.]+ ms, exposed reduce-scatter and all-gathers [0-9.]+ ms, of which all-gathers [0-9.]+ ms.*recommended optimizer_sharding: (none|ranks)$'; then case_ok
else case_fail "no sharding line: ${line:-$(grep -m2 'sharding' "$WORK/p.log")}"; fi
# strong scaling keeps the global batch asked for (batch_size 32: 4 samples
# a rank at 8 nodes of 64 threads; the plan once grew it to 512), and a
# pass of fewer samples than threads says what pieces it offers them
case_begin plan_strong_keeps_batch
g=$(awk -F, 'NR > 1 && $1 == "strong" && $2 == 8 && $3 == "data" { print $7, $8, $21 }' "$WORK/p/plan.csv")
if [ "$g" != "32 4 1" ]; then case_fail "8 nodes x 64 threads: global batch, pass, below_threads = '$g', want '32 4 1'"
elif [ "$(awk -F, 'NR > 1 && $1 == "strong" && $7 != 32' "$WORK/p/plan.csv" | wc -l)" -ne 0 ]; then
    case_fail "a strong-scaling row changed the global batch: $(awk -F, 'NR > 1 && $1 == "strong" && $7 != 32' "$WORK/p/plan.csv" | head -n 1)"
elif ! grep -q '^strong     8 data .*(fewer samples than threads): 4 samples on 64 threads: GEMM layers. passes offer [0-9]*-[0-9]* pieces (slowest: .* pieces on [0-9.]* threads); [0-9]*% of the threads. time used' "$WORK/p.log"; then
    case_fail "no pieces note: $(grep '^strong     8 data' "$WORK/p.log")"
elif grep -q 'grown' "$WORK/p.log" "$WORK/p/plan.csv"; then case_fail "a batch grown: $(grep -h grown "$WORK/p.log" | head -n 1)"
else case_ok; fi
# the CSV's columns: the former ones in their order, new ones after them
case_begin plan_csv_columns_kept
head=$(head -n 1 "$WORK/p/plan.csv")
old="scaling,nodes,layout,stages,replicas,microbatches,global_batch,pass_samples,images_per_s,step_ms,compute_ms,allreduce_ms,allreduce_total_ms,bubble_ms,p2p_ms,sync_ms,efficiency,best,threads,network,below_threads,note"
if [ "$head" = "$old,fewest_pieces,thread_use" ] &&
   awk -F, 'NR > 1 && (NF != 24 || !($23 >= 1) || !($24 > 0 && $24 <= 1)) { bad = 1 } END { exit bad }' "$WORK/p/plan.csv"; then case_ok
else case_fail "header '$head' or a row without fewest_pieces >= 1 and 0 < thread_use <= 1: $(awk -F, 'NR > 1 && NF != 24' "$WORK/p/plan.csv" | head -n 1)"; fi
# a layout that cannot run the global batch is left out, and said so
case_begin plan_strong_unrunnable_said
"$HCNN" plan --config "$HCNN_SRCDIR/configs/synthetic_small.yaml" --nodes 1,64 --stages 2 --scaling strong \
    --steps 2 --no-plots -o "$WORK/u" >"$WORK/u.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then case_fail "exit $rc: $(tail -n 3 "$WORK/u.log")"
elif ! grep -q '^hcnn plan: strong scaling at 64 nodes, data: the global batch 32 gives a rank fewer than one sample a pass: not a layout for it' "$WORK/u.log" ||
     ! grep -q '^hcnn plan: strong scaling at 64 nodes, pipeline_2x32: the global batch 32 gives a micro-batch fewer' "$WORK/u.log"; then
    case_fail "$(grep 'strong scaling at 64' "$WORK/u.log")"
elif [ "$(awk -F, 'NR > 1 && $2 == 64' "$WORK/u/plan.csv" | wc -l)" -ne 0 ]; then case_fail "rows at 64 nodes: $(awk -F, '$2 == 64' "$WORK/u/plan.csv")"
else case_ok; fi

# the gradient buckets' algorithm: hcnn sets libnbc's Rabenseifner unless
# the environment chooses (the user's setting wins); the plan prices the same
IAR=OMPI_MCA_coll_libnbc_iallreduce_algorithm
case_begin plan_iallreduce_priced
env -u $IAR "$HCNN" plan --config "$HCNN_SRCDIR/configs/synthetic_small.yaml" --nodes 1,32 --stages 2 \
    --scaling weak --steps 2 --no-plots -o "$WORK/ar3" >"$WORK/ar3.log" 2>&1
env $IAR=binomial "$HCNN" plan --config "$HCNN_SRCDIR/configs/synthetic_small.yaml" --nodes 1,32 \
    --stages 2 --scaling weak --steps 2 --no-plots -o "$WORK/ar2" >"$WORK/ar2.log" 2>&1
t3=$(awk -F, '$1 == "weak" && $2 == 32 && $3 == "data" { print $13 }' "$WORK/ar3/plan.csv" 2>/dev/null)
t2=$(awk -F, '$1 == "weak" && $2 == 32 && $3 == "data" { print $13 }' "$WORK/ar2/plan.csv" 2>/dev/null)
if ! grep -q "libnbc rabenseifner ($IAR=3)" "$WORK/ar3.log"; then case_fail "default: $(head -n 1 "$WORK/ar3.log")"
elif ! grep -q "libnbc binomial tree" "$WORK/ar2.log"; then case_fail "binomial: $(head -n 1 "$WORK/ar2.log")"
elif ! awk -v a="${t3:-0}" -v b="${t2:-0}" 'BEGIN { exit !(a > 0 && b > a * 1.2) }'; then
    case_fail "32 ranks: binomial allreduce ${t2:-none} ms should cost more than rabenseifner's ${t3:-none} ms"
else case_ok; fi
expect_fail plan_iallreduce_bad_env "$IAR='fastest': expected 0-4" env $IAR=fastest "$HCNN" plan --config "$CFG" --no-plots -o "$WORK/x"
case_begin train_sets_iallreduce
env -u $IAR "${MPIRUN[@]}" -np 2 "$HCNN" train --config "$CFG" --set epochs=1 --set strategy=data \
    >"$WORK/ar_train3.log" 2>&1
env $IAR=2 "${MPIRUN[@]}" -np 2 "$HCNN" train --config "$CFG" --set epochs=1 --set strategy=data \
    >"$WORK/ar_train2.log" 2>&1
if ! grep -q "MPI_Iallreduce with $IAR=3;" "$WORK/ar_train3.log"; then case_fail "default: $(grep -m1 'gradient allreduce' "$WORK/ar_train3.log")"
elif ! grep -q "MPI_Iallreduce with $IAR=2;" "$WORK/ar_train2.log"; then case_fail "the user's 2: $(grep -m1 'gradient allreduce' "$WORK/ar_train2.log")"
else case_ok; fi

# ---- the node model (--node): presets, files, what bounds each pass ---------------
SMALLR="$HCNN_SRCDIR/configs/synthetic_resnet.yaml"
expect_fail plan_bad_node "--node 'nowhere': neither a preset \\(epyc-9554" "$HCNN" plan --config "$CFG" --node nowhere --no-plots -o "$WORK/x"
printf 'cores = 64\npeak_gflops = 5000\nbandwith_gbs = 300\n' >"$WORK/bad.node"
expect_fail plan_bad_node_file "bad.node:3: unknown key 'bandwith_gbs'" "$HCNN" plan --config "$CFG" --node "$WORK/bad.node" --no-plots -o "$WORK/x"
printf 'cores = 64\npeak_gflops = 5000\n' >"$WORK/short.node"
expect_fail plan_node_file_incomplete "short.node: missing bandwidth_gbs" "$HCNN" plan --config "$CFG" --node "$WORK/short.node" --no-plots -o "$WORK/x"
# the default node: the datasheet's 64-core EPYC 9554, 64 threads, the
# passes table with one row per block and pass, its CSV
case_begin plan_node_default_passes
"$HCNN" plan --config "$SMALLR" --nodes 1,2 --stages 2 --steps 2 --no-plots -o "$WORK/nd" >"$WORK/nd.log" 2>&1
blocks=$(awk -F, 'NR > 1 && $3 == "forward"' "$WORK/nd/plan_passes.csv" 2>/dev/null | wc -l)
if ! grep -q '^hcnn plan: node epyc-9554: 64 cores, 6348.8 GFLOP/s .*datasheet figures: an assumption' "$WORK/nd.log"; then
    case_fail "no default node: $(grep -m2 '^hcnn plan: ' "$WORK/nd.log")"
elif ! grep -q ' 64 threads per rank' "$WORK/nd.log"; then case_fail "threads not the node's cores: $(head -n 1 "$WORK/nd.log")"
elif [ "$blocks" -lt 2 ] || [ "$(awk -F, 'NR > 1 && $3 == "backward"' "$WORK/nd/plan_passes.csv" | wc -l)" -ne "$blocks" ] ||
     ! grep -q '^[0-9]*,optimizer,step,' "$WORK/nd/plan_passes.csv"; then
    case_fail "plan_passes.csv: $(head -n 3 "$WORK/nd/plan_passes.csv" 2>&1)"
elif ! grep -q '^hcnn plan: streams bandwidth-bound on 64 threads in [0-9]* of [0-9]* passes' "$WORK/nd.log"; then
    case_fail "no bandwidth summary: $(grep 'passes' "$WORK/nd.log")"
else case_ok; fi
# what bounds a pass is the node's: a node of 1 MB/s and no known cache
# streams every non-GEMM layer from memory (all bandwidth-bound), one of
# 10 TB/s and a cache larger than any step takes the per-thread rate
printf 'name = slow\ncores = 4\npeak_gflops = 100\nbandwidth_gbs = 0.001\n' >"$WORK/slow.node"
printf 'name = fast\ncores = 4\npeak_gflops = 100\nbandwidth_gbs = 10000\ncore_bandwidth_gbs = 10000\nllc_mib = 1000000\n' >"$WORK/fast.node"
case_begin plan_node_bandwidth_bound
for n in slow fast; do
    "$HCNN" plan --config "$SMALLR" --node "$WORK/$n.node" --nodes 1 --scaling weak --steps 2 --no-plots \
        -o "$WORK/n_$n" >"$WORK/n_$n.log" 2>&1
done
streams() { awk -F, 'NR > 1 && $10 != "-" { n++ } END { print n + 0 }' "$WORK/n_$1/plan_passes.csv" 2>/dev/null; }
bound() { awk -F, 'NR > 1 && $10 == "bandwidth" { n++ } END { print n + 0 }' "$WORK/n_$1/plan_passes.csv" 2>/dev/null; }
if [ "$(streams slow)" -lt 2 ] || [ "$(bound slow)" -ne "$(streams slow)" ]; then
    case_fail "slow node: $(bound slow) of $(streams slow) streaming passes bandwidth-bound, want all"
elif [ "$(bound fast)" -ne 0 ]; then case_fail "fast node: $(bound fast) passes bandwidth-bound, want none"
else case_ok; fi

# ---- the communication the plan prices (grad_sync.c, train.c, run.c) -------------
# the agreement rides on the first bucket (data parallel: 0 ms; a pipeline
# keeps its own allreduce); allreduce_progress: thread reserves a core, the
# pass then on 63 of 64 threads; HCNN_GRAD_SUM=mpi: sums on one core
case_begin plan_comm_changes_priced
"$HCNN" plan --config "$SMALLR" --nodes 1,32 --stages 2 --scaling weak --steps 2 --no-plots -o "$WORK/cm" >"$WORK/cm.log" 2>&1
"$HCNN" plan --config "$SMALLR" --nodes 1,32 --stages 2 --scaling weak --steps 2 --no-plots -o "$WORK/ct" \
    --batch 256 --set allreduce_progress=thread >"$WORK/ct.log" 2>&1
HCNN_GRAD_SUM=mpi "$HCNN" plan --config "$SMALLR" --nodes 1,32 --stages 2 --scaling weak --steps 2 --no-plots \
    -o "$WORK/cs" >"$WORK/cs.log" 2>&1
col() { awk -F, -v n="$2" -v l="$3" -v c="$4" '$1 == "weak" && $2 == n && $3 == l { print $c }' "$WORK/$1/plan.csv" 2>/dev/null; }
# (from the CSV's compute_ms, 4 decimals: 64/63 = 1.0159 within their rounding)
ratio=$(awk -v a="$(col ct 32 data 11)" -v b="$(col ct 1 data 11)" 'BEGIN { if (b > 0) printf "%.4f", a / b }')
if [ "$(col cm 32 data 16)" != "0.0000" ] || ! awk -v s="$(col cm 32 pipeline_2x16 16)" 'BEGIN { exit !(s > 0) }'; then
    case_fail "agreement: data $(col cm 32 data 16) ms (want 0), pipeline $(col cm 32 pipeline_2x16 16) ms (want > 0)"
elif ! grep -q "gradient sums by the OpenMP team after backward, the agreement on the first bucket" "$WORK/cm.log" ||
     ! grep -q "gradient sums on a core reserved for the allreduce" "$WORK/ct.log" ||
     ! grep -q "gradient sums on one core, the agreement" "$WORK/cs.log"; then
    case_fail "the header does not name the sums: $(grep -h -m1 'gradient sums' "$WORK"/c[mts].log)"
elif ! awk -v r="${ratio:-0}" 'BEGIN { exit !(r > 1.0145 && r < 1.0175) }'; then
    case_fail "reserved core: compute at 32 nodes / 1 node = $ratio, want 64/63 = 1.0159"
elif ! grep -q '^hcnn plan: weak scaling at 32 nodes, data: efficiency [0-9.]* before .*, [0-9.]* now' "$WORK/cm.log"; then
    case_fail "no before/now line: $(tail -n 3 "$WORK/cm.log")"
else case_ok; fi

# weak scaling past 2^31 samples a step (65536 nodes x --batch 32768): the
# global batch in 64 bits (it wrapped to -2^31: negative rates and
# efficiencies, a wrong layout recommended; signed overflow under UBSan)
case_begin plan_weak_global_batch_past_2_31
"$HCNN" plan --config "$HCNN_SRCDIR/configs/synthetic_small.yaml" --no-plots -o "$WORK/big" --steps 1 \
    --nodes 1,65536 --batch 32768 --scaling weak --stages 2 --microbatches 1 >"$WORK/big.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -qE '^weak +65536 data +2147483648 +32768 +[0-9]' "$WORK/big.log" &&
    ! grep -E '^weak +65536 ' "$WORK/big.log" | grep -q -- ' -[0-9]' &&
    grep -q '^weak,65536,data,1,65536,1,2147483648,32768,' "$WORK/big/plan.csv"; then
    case_ok
else
    case_fail "exit $rc: $(grep -E '^weak +65536' "$WORK/big.log" | head -n 3)"
fi

# a --batch whose pass is too large for the kernels: refused before the
# measurement's data set is made (2 million samples filled 3.5 GB first)
expect_fail plan_batch_too_large "plan: a pass of 2000000 samples of small makes an activation tensor larger than 2147483647 values .*lower --batch" \
    "$HCNN" plan --config "$HCNN_SRCDIR/configs/synthetic_small.yaml" \
    --no-plots -o "$WORK/huge" --steps 1 --nodes 1 --batch 2000000

# ---- the network calibration (what bench/validate_plan.sh prices with) -----------
"${MPIRUN[@]}" -np 2 "$HCNN" plan --calibrate-network "$WORK/net.txt" --config "$CFG" >"$WORK/cal.log" 2>&1
case_begin plan_calibrate_network
if grep -q '^host_contention = ' "$WORK/net.txt" 2>/dev/null; then case_ok; else case_fail "$(cat "$WORK/cal.log")"; fi

# the configuration missing on one "node" (ranks in different directories),
# under a launcher that does not end the job at a rank's exit: that rank
# says why, and the other leaves too (it waited in MPI_Init's first
# collective for ever); each way round, and for the one-process plan
mkdir -p "$WORK/cn0" "$WORK/cn1" && cp "$CFG" "$WORK/cn0/c.yaml"
for run in "calibrate 0 1" "calibrate 1 0" "table 0 1"; do
    set -- $run
    what=(--calibrate-network net.txt --config c.yaml)
    [ "$1" = table ] && what=(--config c.yaml --no-plots -o out)
    case_begin "plan_${1}_config_missing_on_rank_$3"
    timeout -k 5 60 mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 \
        --mca orte_abort_on_non_zero_status 0 \
        -np 1 -wdir "$WORK/cn$2" "$HCNN" plan "${what[@]}" : \
        -np 1 -wdir "$WORK/cn$3" "$HCNN" plan "${what[@]}" >"$WORK/cn.log" 2>&1
    rc=$?
    if [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ "$(grep -c "error: cannot open config file 'c.yaml'" "$WORK/cn.log")" = 1 ] &&
        grep -q "rank $3: error: cannot open config" "$WORK/cn.log"; then
        case_ok
    else
        case_fail "exit $rc: $(cat "$WORK/cn.log")"
    fi
done

# outputs that are FIFOs: refused, not blocked on (rank 0 blocked in its open
# of the calibration's FIFO, the other rank spinning in MPI; plan blocked on
# a FIFO named plan.csv); the calibration's before it measures; the FIFOs
# left as they were
mkfifo "$WORK/cal.fifo"
expect_fail plan_calibrate_into_fifo "cal.fifo is a pipe or FIFO \\(expected a regular file" \
    "${MPIRUN[@]}" -np 2 "$HCNN" plan --calibrate-network "$WORK/cal.fifo"
mkdir -p "$WORK/pf" && mkfifo "$WORK/pf/plan.csv"
expect_fail plan_table_into_fifo "plan.csv' is a pipe or FIFO \\(expected a regular file" \
    timeout -k 5 60 "$HCNN" plan --config "$CFG" --no-plots -o "$WORK/pf" --nodes 1,2
case_begin plan_fifos_left_as_they_were
if [ -p "$WORK/cal.fifo" ] && [ -p "$WORK/pf/plan.csv" ]; then case_ok
else case_fail "$(ls -l "$WORK/cal.fifo" "$WORK/pf/plan.csv")"; fi
finish
