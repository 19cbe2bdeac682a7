#!/usr/bin/env bash
# bench/compare.sh and bench/pytorch/peer.py (the PyTorch peer): their
# command lines (bad arguments: one message, exit 2) and the form of what
# they print, which users' scripts parse.  Rates are not judged (benchmarks,
# not timed tests); runs are a step or two long.  The cases that run PyTorch
# are skipped, saying why, where python3-torch is not installed (CI
# machines): PYTHON=path picks another python3 with torch.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CMP="$HCNN_SRCDIR/bench/compare.sh"
PEER="$HCNN_SRCDIR/bench/pytorch/peer.py"
PY=${PYTHON:-/usr/bin/python3}
export HCNN PYTHON="$PY"
# one step or two: the form, not the rate
SHORT=(--model lenet --batch 16 --warmup 0 --repeats 1 --steps 1)

# exit2 NAME PATTERN CMD...: CMD exits with status 2 and says PATTERN on stderr
exit2() {
    local name="$1" pattern="$2"
    shift 2
    case_begin "$name"
    local rc=0
    "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
    if [ $rc -ne 2 ]; then
        case_fail "exit status $rc, expected 2: $(tail -n 3 "$WORK/err")"
    elif ! grep -qE -- "$pattern" "$WORK/err"; then
        case_fail "stderr does not match '$pattern':"; sed 's/^/#   /' "$WORK/err"
    else
        case_ok
    fi
}

exit2 compare_peer_modes_unknown "--peer-modes: unknown mode 'bogus'" "$CMP" --peer-modes bogus
exit2 compare_peer_modes_tf32 "unknown mode 'tf32_nchw'" "$CMP" --peer-modes fp32_nchw,tf32_nchw
exit2 compare_peer_modes_twice "mode 'bf16_nhwc' given twice" "$CMP" --peer-modes bf16_nhwc,bf16_nhwc
exit2 compare_peer_modes_empty_item "expected one, best, all or a comma-separated list" "$CMP" --peer-modes fp32_nchw,
exit2 compare_peer_modes_channels_last "--channels-last picks PyTorch's one layout" "$CMP" --peer-modes all --channels-last
exit2 compare_peer_modes_cuda "--peer-modes best: PyTorch's CPU modes" "$CMP" --peer-modes best --device cuda
exit2 compare_tf32_cpu "--precision tf32 needs --device cuda" "$CMP" --precision tf32
exit2 compare_no_value "--peer-modes needs a value" "$CMP" --peer-modes
exit2 compare_torch_format_unknown "--torch-format 'nhwc': expected nchw, channels_last or best" \
    "$CMP" --torch-format nhwc
exit2 compare_torch_format_peer_modes "--torch-format and --peer-modes both pick" \
    "$CMP" --torch-format best --peer-modes all
exit2 compare_torch_format_channels_last "--channels-last contradicts --torch-format nchw" \
    "$CMP" --torch-format nchw --channels-last
exit2 compare_hcnn_layout_unknown "--hcnn-layout 'channels_last': expected auto, nchw, nhwc or best" \
    "$CMP" --device cuda --hcnn-layout channels_last
exit2 compare_hcnn_layout_cpu "--hcnn-layout best needs --device cuda" "$CMP" --hcnn-layout best
exit2 compare_peer_process_unknown "--peer-process 'fork': expected per-run or server" \
    "$CMP" --peer-process fork
exit2 compare_peer_timeout_bad "--peer-timeout '1m': expected whole seconds" "$CMP" --peer-timeout 1m

# peer.py parses its command line before importing torch: python3 suffices
if [ -x "$PY" ]; then
    exit2 peer_tf32_cpu "--precision tf32 needs --device cuda" "$PY" "$PEER" --model lenet --batch 8 \
        --threads 1 --precision tf32
    exit2 peer_memory_format_contradiction "--channels-last contradicts --memory-format contiguous" \
        "$PY" "$PEER" --model lenet --batch 8 --threads 1 --channels-last --memory-format contiguous
    exit2 peer_profiler_windows_cpu "--profiler-windows needs --device cuda" "$PY" "$PEER" \
        --model lenet --batch 8 --threads 1 --profiler-windows
else
    for c in peer_tf32_cpu peer_memory_format_contradiction peer_profiler_windows_cpu; do
        case_begin $c
        case_skip "$PY not found"
    done
fi

# without torch (a python that cannot import it): hcnn alone, NA for PyTorch,
# whatever the modes asked for
case_begin compare_without_torch
if PYTHON=/bin/false "$CMP" "${SHORT[@]}" --rounds 1 --peer-modes best >"$WORK/nt.log" 2>"$WORK/nt.err" &&
   grep -qE '^round=1 hcnn_images_per_s=[0-9.]+( hcnn_data_wait_share=[0-9.]+)?$' "$WORK/nt.log" &&
   tail -n 1 "$WORK/nt.log" | grep -qE '^hcnn_median=[0-9.]+ pytorch_median=NA ratio=NA$' &&
   grep -q 'python3-torch not installed' "$WORK/nt.err"; then
    case_ok
else
    case_fail "$(tail -n 3 "$WORK/nt.log") $(tail -n 3 "$WORK/nt.err")"
fi

TORCH_CASES="peer_bf16_cpu peer_bf16_emulated peer_memory_format compare_peer_modes_best
    compare_peer_modes_list compare_torch_format_best compare_torch_format_ignored peer_serve
    compare_peer_server compare_peer_server_dies compare_peer_timeout compare_cuda_default_best"
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    for c in $TORCH_CASES; do
        case_begin "$c"
        case_skip "python3-torch not installed ($PY cannot import torch; apt-get install python3-torch)"
    done
    finish
fi

# --device cuda picks PyTorch's faster layout by default, at hcnn's precision
# (tf32 too); --channels-last one layout.  Checked on the header and the
# peer's command lines, printed before the first run: an hcnn that prints no
# rate (/bin/true) stops it there with exit 1, so no GPU is needed
# (the peers' command lines are printed where torch imports)
case_begin compare_cuda_default_best
rc=0 rc2=0
HCNN=/bin/true "$CMP" "${SHORT[@]}" --rounds 1 --device cuda --precision tf32 >"$WORK/cb.log" 2>&1 || rc=$?
HCNN=/bin/true "$CMP" "${SHORT[@]}" --rounds 1 --device cuda --channels-last >"$WORK/cl.log" 2>&1 || rc2=$?
if [ $rc -eq 1 ] && [ $rc2 -eq 1 ] &&
   grep -qE '^compare: .* device=cuda precision=tf32 peer_modes=tf32_nchw,tf32_nhwc torch_format=best$' "$WORK/cb.log" &&
   grep -qE '^pytorch_tf32_nchw: .* --device cuda --precision tf32 --memory-format contiguous$' "$WORK/cb.log" &&
   grep -qE '^pytorch_tf32_nhwc: .* --device cuda --precision tf32 --memory-format channels_last$' "$WORK/cb.log" &&
   grep -qE '^compare: .* device=cuda precision=fp32 peer_modes=one torch_format=channels_last$' "$WORK/cl.log" &&
   grep -qE '^pytorch: .* --device cuda --precision fp32 --memory-format channels_last$' "$WORK/cl.log"; then
    case_ok
else
    case_fail "exit $rc, $rc2 (expected 1, 1): $(head -n 4 "$WORK/cb.log") / $(head -n 3 "$WORK/cl.log")"
fi

# bf16 autocast on the CPU: the header names the precision and whether the
# CPU has bf16 instructions, as /proc/cpuinfo says
case_begin peer_bf16_cpu
if grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null; then isa='native:[a-z0-9_,]+'; else isa=emulated; fi
if "$PY" "$PEER" "${SHORT[@]}" --threads 2 --precision bf16 --channels-last >"$WORK/bf.log" 2>&1 &&
   grep -qE "^peer torch=.* layout=nhwc .* precision=bf16 cpu_bf16=$isa$" "$WORK/bf.log" &&
   tail -n 1 "$WORK/bf.log" | grep -qE '^images_per_s=[0-9.]+$'; then
    case_ok
else
    case_fail "expected cpu_bf16=$isa: $(head -n 1 "$WORK/bf.log") ... $(tail -n 2 "$WORK/bf.log")"
fi

# --memory-format: the header names the format the tensors are really in
# (peer.py reads their strides), so a format asked for and not applied shows;
# LeNet's 6-channel conv2 weight tells the two apart (its one-channel input
# would pass as either)
case_begin peer_memory_format
fail=""
for f in contiguous channels_last; do
    l=nchw
    [ $f = contiguous ] || l=nhwc
    if ! "$PY" "$PEER" "${SHORT[@]}" --threads 1 --memory-format $f >"$WORK/mf.log" 2>&1 ||
       ! grep -qE "^peer torch=.* layout=$l memory_format=$f " "$WORK/mf.log" ||
       ! tail -n 1 "$WORK/mf.log" | grep -qE '^images_per_s=[0-9.]+$'; then
        fail+=" $f: $(head -n 1 "$WORK/mf.log") ... $(tail -n 1 "$WORK/mf.log")"
    fi
done
if [ -z "$fail" ]; then case_ok; else case_fail "$fail"; fi

# a CPU without bf16 instructions (its cpuinfo without the flags): run, and said
case_begin peer_bf16_emulated
echo 'flags		: fpu sse2 avx2 avx512f avx512bw' >"$WORK/cpuinfo"
if PEER_CPUINFO="$WORK/cpuinfo" "$PY" "$PEER" "${SHORT[@]}" --threads 1 --precision bf16 \
        >"$WORK/em.log" 2>"$WORK/em.err" &&
   grep -qE '^peer torch=.* layout=nchw .* precision=bf16 cpu_bf16=emulated$' "$WORK/em.log" &&
   grep -q 'PyTorch emulates bf16' "$WORK/em.err" &&
   tail -n 1 "$WORK/em.log" | grep -qE '^images_per_s=[0-9.]+$'; then
    case_ok
else
    case_fail "$(head -n 1 "$WORK/em.log") / $(cat "$WORK/em.err")"
fi

# check_modes LOG ROUNDS "MODES" "COMPARED": the multi-mode output is
# consistent: every round line has each mode's rate and the fastest compared
# one as pytorch_images_per_s; one median line a mode; the last line's
# pytorch_median is the highest compared median, pytorch_best_mode its mode
check_modes() {
    awk -v rounds="$2" -v modes="$3" -v compared="$4" '
        function fail(why) { print why; bad = 1; exit 1 }
        BEGIN { nm = split(modes, M, " "); split(compared, C, " "); for (k in C) isc[C[k]] = 1 }
        /^round=/ {
            nr++
            for (f = 1; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
            best = ""; bm = ""
            for (k = 1; k <= nm; k++) {
                key = "pytorch_" M[k] "_images_per_s"
                if (!(key in v) || v[key] !~ /^[0-9.]+$/) fail("round " nr ": no " key ": " $0)
                if ((M[k] in isc) && (best == "" || v[key] + 0 > best + 0)) { best = v[key]; bm = M[k] }
            }
            if (v["pytorch_images_per_s"] != best || v["pytorch_mode"] != bm)
                fail("round " nr ": pytorch_images_per_s/pytorch_mode are not the fastest compared mode: " $0)
            delete v
        }
        /^pytorch_mode=/ {
            split($1, a, "="); split($2, b, "="); split($4, c, "=")
            if ($2 !~ /^median=[0-9.]+$/ || $3 !~ /^hcnn_ratio=[0-9.]+$/ || c[2] != ((a[2] in isc) ? 1 : 0))
                fail("bad mode line: " $0)
            med[a[2]] = b[2]
            if ((a[2] in isc) && (bestm == "" || b[2] + 0 > med[bestm] + 0)) bestm = a[2]
        }
        /^pytorch_best_mode=/ { split($0, a, "="); said = a[2] }
        { last = $0 }
        END {
            if (bad) exit 1
            if (nr != rounds) { print nr " round lines, expected " rounds; exit 1 }
            if (length(med) != nm) { print length(med) " mode lines, expected " nm; exit 1 }
            if (said != bestm) { print "pytorch_best_mode=" said ", expected " bestm; exit 1 }
            if (last !~ ("^hcnn_median=[0-9.]+ pytorch_median=" med[bestm] " ratio=[0-9.]+$")) {
                print "last line: " last ", expected pytorch_median=" med[bestm]; exit 1
            }
        }' "$1"
}

# --torch-format best on the CPU: both layouts at hcnn's precision in the
# same rounds, the faster median the reference; two rounds (PyTorch first in
# the second)
case_begin compare_torch_format_best
if "$CMP" "${SHORT[@]}" --rounds 2 --torch-format best >"$WORK/tfb.log" 2>&1 &&
   grep -qE '^compare: .* device=cpu precision=fp32 peer_modes=fp32_nchw,fp32_nhwc torch_format=best$' "$WORK/tfb.log" &&
   grep -qE '^pytorch_fp32_nhwc: .* --precision fp32 --memory-format channels_last$' "$WORK/tfb.log" &&
   why=$(check_modes "$WORK/tfb.log" 2 "fp32_nchw fp32_nhwc" "fp32_nchw fp32_nhwc"); then
    case_ok
else
    case_fail "${why:-exit status or header}: $(tail -n 4 "$WORK/tfb.log")"
fi

# a peer that drops --memory-format (runs NCHW whatever it is asked): the
# channels_last run's header says contiguous, and compare.sh stops (exit 1)
# rather than time NCHW twice
case_begin compare_torch_format_ignored
# shellcheck disable=SC2016 # the wrapper's own variables, expanded when it runs
{
    echo '#!/usr/bin/env bash'
    echo 'a=()'
    echo 'while [ $# -gt 0 ]; do if [ "$1" = --memory-format ]; then shift 2; else a+=("$1"); shift; fi; done'
    echo "exec '$PY' \"\${a[@]}\""
} >"$WORK/py-ignores"
chmod +x "$WORK/py-ignores"
rc=0
PYTHON="$WORK/py-ignores" "$CMP" "${SHORT[@]}" --rounds 1 --torch-format best >"$WORK/ign.log" 2>"$WORK/ign.err" || rc=$?
if [ $rc -eq 1 ] &&
   grep -q 'pytorch_fp32_nhwc ran in memory_format=contiguous, asked for channels_last' "$WORK/ign.err"; then
    case_ok
else
    case_fail "exit $rc, expected 1: $(tail -n 3 "$WORK/ign.err")"
fi

# best with hcnn in FP32: all four modes run, hcnn set against the FP32 ones
case_begin compare_peer_modes_best
if "$CMP" "${SHORT[@]}" --rounds 1 --peer-modes best >"$WORK/best.log" 2>&1 &&
   grep -qE '^compare: .* device=cpu precision=fp32 peer_modes=best torch_format=peer_modes$' "$WORK/best.log" &&
   [ "$(grep -c '^pytorch_[a-z0-9]*_n[a-z]*: ' "$WORK/best.log")" -eq 4 ] &&
   grep -qE '^pytorch_bf16_nhwc: .* --precision bf16 --memory-format channels_last$' "$WORK/best.log" &&
   why=$(check_modes "$WORK/best.log" 1 "fp32_nchw fp32_nhwc bf16_nchw bf16_nhwc" "fp32_nchw fp32_nhwc"); then
    case_ok
else
    case_fail "${why:-exit status or header}: $(tail -n 4 "$WORK/best.log")"
fi

# a list of modes, over two rounds (PyTorch first in the second)
case_begin compare_peer_modes_list
if "$CMP" "${SHORT[@]}" --rounds 2 --peer-modes bf16_nhwc,fp32_nchw >"$WORK/list.log" 2>&1 &&
   why=$(check_modes "$WORK/list.log" 2 "bf16_nhwc fp32_nchw" "bf16_nhwc fp32_nchw"); then
    case_ok
else
    case_fail "${why:-exit status}: $(tail -n 4 "$WORK/list.log")"
fi

# peer.py --serve: a run a line, each answered with its output and
# peer_served=K status=N; a line that changes one of the server's options
# is refused (status 2) and the server goes on; a served run measures the
# same training as a process of its own (the same loss, one thread), the
# first and the last, after runs of another batch and layout (nothing of
# them carried over: the seed, the model, the batches)
case_begin peer_serve
printf '%s\n' '--memory-format contiguous' '--threads 2' '' '--memory-format channels_last --batch 8' \
    '--memory-format contiguous' |
    timeout -k 5 120 "$PY" "$PEER" --serve "${SHORT[@]}" --threads 1 >"$WORK/srv.log" 2>"$WORK/srv.err"
rc=$?
"$PY" "$PEER" "${SHORT[@]}" --threads 1 --memory-format contiguous >"$WORK/own.log" 2>&1
# loss LOG: the first repeat's loss of each run in LOG, on one line
loss() { sed -n 's/^repeat=1 .* loss=\([0-9.]*\) .*/\1/p' "$1" | paste -sd ' '; }
served=$(grep -E '^peer_(served=|ready$)' "$WORK/srv.log" | paste -sd ' ')
own=$(loss "$WORK/own.log")
read -r -a sl <<<"$(loss "$WORK/srv.log")"
if [ $rc -eq 0 ] &&
   [ "$served" = "peer_ready peer_served=1 status=0 peer_served=2 status=2 peer_served=3 status=0 peer_served=4 status=0" ] &&
   grep -q 'a run cannot change --threads' "$WORK/srv.err" &&
   [ "$(grep -c '^images_per_s=' "$WORK/srv.log")" -eq 3 ] &&
   grep -qE '^peer torch=.* batch=8 threads=1 .* layout=nhwc memory_format=channels_last ' "$WORK/srv.log" &&
   [ -n "$own" ] && [ "${#sl[@]}" -eq 3 ] && [ "${sl[0]}" = "$own" ] && [ "${sl[2]}" = "$own" ]; then
    case_ok
else
    case_fail "exit $rc; $served; served losses ${sl[*]}, own $own: $(tail -n 3 "$WORK/srv.err")"
fi

# a python3 that records each start (its pid and arguments), for counting
# the processes compare.sh makes
# shellcheck disable=SC2016 # the wrapper's own variables, expanded when it runs
{
    echo '#!/usr/bin/env bash'
    echo 'echo "$$ $*" >> "$PY_STARTS"'
    echo "exec '$PY' \"\$@\""
} >"$WORK/py-counts"
chmod +x "$WORK/py-counts"

# --peer-process server: one PyTorch process a mode makes that mode's runs
# (2 rounds x 2 modes: 2 servers, not 4 processes; plus compare.sh's check
# that torch imports), the output as with a process a run, and no server
# left when compare.sh ends
case_begin compare_peer_server
export PY_STARTS=$WORK/starts
: >"$PY_STARTS"
rc=0
PYTHON="$WORK/py-counts" timeout -k 5 300 "$CMP" "${SHORT[@]}" --rounds 2 --torch-format best \
    --peer-process server >"$WORK/ps.log" 2>&1 || rc=$?
left=""
while read -r pid _; do if kill -0 "$pid" 2>/dev/null; then left+=" $pid"; fi; done <"$PY_STARTS"
if [ $rc -eq 0 ] &&
   grep -qE '^compare: .* peer_process=server peer_timeout=0 device=cpu precision=fp32 peer_modes=fp32_nchw,fp32_nhwc torch_format=best$' "$WORK/ps.log" &&
   [ "$(grep -c -- '--serve$' "$PY_STARTS")" -eq 2 ] && [ "$(wc -l <"$PY_STARTS")" -eq 3 ] && [ -z "$left" ] &&
   why=$(check_modes "$WORK/ps.log" 2 "fp32_nchw fp32_nhwc" "fp32_nchw fp32_nhwc"); then
    case_ok
else
    case_fail "exit $rc; ${why:-}; starts: $(paste -sd ';' "$PY_STARTS"); left running:${left:- none}: $(tail -n 3 "$WORK/ps.log")"
fi

# a server that ends early (its input cut after the first line: it answers
# one run and exits): compare.sh says so and stops (exit 1), no hang
case_begin compare_peer_server_dies
{
    echo '#!/usr/bin/env bash'
    echo "case \" \$* \" in *' --serve '*) exec '$PY' \"\$@\" < <(head -n 1) ;; esac"
    echo "exec '$PY' \"\$@\""
} >"$WORK/py-one-run"
chmod +x "$WORK/py-one-run"
rc=0
PYTHON="$WORK/py-one-run" timeout -k 5 300 "$CMP" "${SHORT[@]}" --rounds 2 --torch-format best \
    --peer-process server >"$WORK/pd.log" 2>"$WORK/pd.err" || rc=$?
if [ $rc -eq 1 ] && grep -q 'its PyTorch server (.* --serve) ended before answering' "$WORK/pd.err" &&
   [ "$(grep -c '^round=' "$WORK/pd.log")" -eq 1 ]; then
    case_ok
else
    case_fail "exit $rc, expected 1: $(tail -n 3 "$WORK/pd.err")"
fi

# --peer-timeout: a server that stops answering after its first run (its
# input held open, never read again), and a process a run that hangs: each
# stops compare.sh (exit 1) after about SECONDS, saying which and why,
# with no PyTorch process left running
case_begin compare_peer_timeout
{
    echo '#!/usr/bin/env bash'
    echo 'echo "$$ $*" >> "$PY_STARTS"'
    echo "case \" \$* \" in *' --serve '*) exec '$PY' \"\$@\" < <(head -n 1; exec sleep 40) ;;"
    echo "*' --model '*) exec sleep 40 ;; esac"
    echo "exec '$PY' \"\$@\""
} >"$WORK/py-hangs"
chmod +x "$WORK/py-hangs"
why=""
for proc in server per-run; do
    : >"$PY_STARTS"
    rc=0
    PYTHON="$WORK/py-hangs" timeout -k 5 120 "$CMP" "${SHORT[@]}" --rounds 2 --peer-process $proc \
        --peer-timeout 10 >"$WORK/pt.log" 2>"$WORK/pt.err" || rc=$?
    left=""
    while read -r pid _; do if kill -0 "$pid" 2>/dev/null; then left+=" $pid"; fi; done <"$PY_STARTS"
    if [ $proc = server ]; then
        said='its PyTorch server \(.* --serve\) did not answer in 10 s \(--peer-timeout\)' rounds=1
    else
        said='pytorch_fp32_nchw failed \(exit 124\)' rounds=0
    fi
    if [ $rc -ne 1 ] || ! grep -qE "$said" "$WORK/pt.err" || [ -n "$left" ] ||
        ! grep -q ' peer_timeout=10 ' "$WORK/pt.log" || [ "$(grep -c '^round=' "$WORK/pt.log")" -ne $rounds ]; then
        why+=" $proc: exit $rc, $(grep -c '^round=' "$WORK/pt.log") round(s), left running:${left:- none}: $(tail -n 2 "$WORK/pt.err" | paste -sd ' ');"
    fi
done
if [ -z "$why" ]; then case_ok; else case_fail "$why"; fi

finish
