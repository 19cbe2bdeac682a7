#!/usr/bin/env bash
# Inputs that must not lose a run (issue 24, the smaller ones): the metrics
# file written through a symbolic link and refused when it is a pipe, a
# FIFO, a device or a directory (before training, also by train --check);
# a gzip'ed data file damaged mid-stream reported as corrupt, not as
# trailing data; a FIFO given as a data file, the config, a checkpoint, a
# .npy or a plan file refused at once, never waited on; a config that cannot be read is a configuration
# error (exit 2); the run header says plainly whether checkpoints are
# written; a stop signal during the BLAS kernel measurement acts at once.
# `train` blocks SIGTERM (it takes it between steps), so every hang guard
# here also kills (timeout -k).
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
CFG="$HCNN_SRCDIR/configs/synthetic_small.yaml"
LENET="$HCNN_SRCDIR/configs/mnist_lenet.yaml"
RESNET="$HCNN_SRCDIR/configs/cifar_resnet18.yaml"
# no BLAS measurement in the cases that are not about it
SMALL=(train --config "$CFG" -q --set blas_kernels=env --set checkpoint_dir= --set epochs=2
       --set synthetic_train=96 --set synthetic_test=32)

# guarded NAME LIMIT CMD...: CMD bounded by LIMIT s (then killed), output in
# $WORK/NAME.out and .err, exit status in $rc
guarded() {
    local name=$1 limit=$2
    shift 2
    timeout -k 5 "$limit" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
    rc=$?
}

# ---- the metrics file (csv) ---------------------------------------------------

# a symbolic link stays a link; its target gets the header and one row per epoch
case_begin csv_symlink_kept
mkdir -p "$WORK/csv"
echo "an older file" >"$WORK/csv/target.csv"
ln -s target.csv "$WORK/csv/link.csv"
guarded csv_link 60 "$HCNN" "${SMALL[@]}" --set csv="$WORK/csv/link.csv"
if [ $rc -eq 0 ] && [ -L "$WORK/csv/link.csv" ] && [ "$(readlink "$WORK/csv/link.csv")" = target.csv ] &&
   head -n 1 "$WORK/csv/target.csv" | grep -q '^run_id,' && [ "$(wc -l <"$WORK/csv/target.csv")" -eq 3 ] &&
   [ -f "$WORK/csv/link.config.yaml" ]; then
    case_ok
else
    case_fail "exit $rc; link: $(ls -l "$WORK/csv/link.csv"); target: $(head -c 300 "$WORK/csv/target.csv") $(cat "$WORK/csv_link.err")"
fi

# an existing regular file is written in place (same inode: hard links,
# owner and mode stay), a new path is created with its directory
case_begin csv_written_in_place
echo "an older file" >"$WORK/csv/plain.csv"
inode=$(stat -c %i "$WORK/csv/plain.csv")
guarded csv_plain 60 "$HCNN" "${SMALL[@]}" --set csv="$WORK/csv/plain.csv"
guarded csv_new 60 "$HCNN" "${SMALL[@]}" --set csv="$WORK/csv/new/sub/m.csv"
if [ $rc -eq 0 ] && [ "$(stat -c %i "$WORK/csv/plain.csv")" = "$inode" ] &&
   [ "$(grep -c '^run_id,' "$WORK/csv/plain.csv")" -eq 1 ] && [ "$(wc -l <"$WORK/csv/plain.csv")" -eq 3 ] &&
   [ "$(wc -l <"$WORK/csv/new/sub/m.csv")" -eq 3 ]; then
    case_ok
else
    case_fail "exit $rc; inode $inode -> $(stat -c %i "$WORK/csv/plain.csv"); $(cat "$WORK/csv/plain.csv" "$WORK/csv_new.err")"
fi

# csv=/dev/stdout with stdout a pipe: refused before training, nothing
# written beside it, /dev/stdout untouched (as root the file used to be
# replaced by a plain file, and /dev/stdout.config.yaml written)
case_begin csv_dev_stdout_refused
timeout -k 5 60 "$HCNN" "${SMALL[@]}" --set csv=/dev/stdout 2>"$WORK/stdout.err" | cat >"$WORK/stdout.out"
rc=${PIPESTATUS[0]}
if [ -f /dev/stdout ] && [ ! -L /dev/stdout ] && [ "$(id -u)" -eq 0 ]; then
    rm -f /dev/stdout /dev/stdout.config.yaml # repair what a broken build did
    ln -s /proc/self/fd/1 /dev/stdout
    case_fail "/dev/stdout was replaced by a plain file (repaired)"
elif [ "$rc" -eq 1 ] && [ "$(grep -c 'hcnn: error' "$WORK/stdout.err")" -eq 1 ] &&
     grep -q "csv '/dev/stdout' .*is a pipe or FIFO (expected a regular file" "$WORK/stdout.err" &&
     ! grep -q '^epoch=' "$WORK/stdout.out" && { [ -L /dev/stdout ] || [ -c /dev/stdout ]; } &&
     [ ! -e /dev/stdout.config.yaml ]; then
    case_ok
else
    case_fail "exit $rc: $(cat "$WORK/stdout.err")"
fi

# a FIFO as csv: refused at once (not opened and waited on, not replaced)
case_begin csv_fifo_refused
mkfifo "$WORK/csv/m.fifo"
guarded csv_fifo 20 "$HCNN" "${SMALL[@]}" --set csv="$WORK/csv/m.fifo"
if [ $rc -eq 1 ] && grep -q "csv '$WORK/csv/m.fifo' .*is a pipe or FIFO" "$WORK/csv_fifo.err" &&
   [ -p "$WORK/csv/m.fifo" ] && [ ! -e "$WORK/csv/m.config.yaml" ] && ! grep -q '^epoch=' "$WORK/csv_fifo.out"; then
    case_ok
else
    case_fail "exit $rc (FIFO still there: $([ -p "$WORK/csv/m.fifo" ] && echo yes || echo no)): $(cat "$WORK/csv_fifo.err")"
fi

expect_fail csv_directory_refused "csv '$WORK/csv/new' .*is a directory" \
    timeout -k 5 20 "$HCNN" "${SMALL[@]}" --set csv="$WORK/csv/new"
# train --check refuses the same, without training
expect_fail csv_fifo_check "csv '$WORK/csv/m.fifo' .*is a pipe or FIFO" \
    timeout -k 5 20 "$HCNN" "${SMALL[@]}" --set csv="$WORK/csv/m.fifo" --check

# ---- data files -----------------------------------------------------------------

if command -v python3 >/dev/null; then
    # small MNIST-like gzip'ed IDX files; the training images damaged in the
    # middle of the compressed stream, where the damaged stream inflates to
    # more bytes than the header announces before zlib finds the fault
    cat >"$WORK/mkidx.py" <<'EOF'
import gzip, os, random, struct, sys, zlib
d, damage = sys.argv[1], sys.argv[2] == "damage"
os.makedirs(d, exist_ok=True)
rng = random.Random(1)
def images(n):
    b = bytearray(struct.pack('>IIII', 0x803, n, 28, 28))
    for _ in range(n):
        img = bytearray(784)
        for _ in range(6):  # a few strokes: compressible, as MNIST is
            r, c, l, v = rng.randrange(4, 24), rng.randrange(4, 20), rng.randrange(3, 9), rng.randrange(64, 256)
            img[r * 28 + c:r * 28 + c + l] = bytes([v]) * l
        b += img
    return bytes(b)
def labels(n):
    return struct.pack('>II', 0x801, n) + bytes(rng.randrange(10) for _ in range(n))
def put(name, data):
    with open(os.path.join(d, name), 'wb') as f:
        f.write(gzip.compress(data, compresslevel=9, mtime=0))
train = images(2000)
for name, data in (('train-images-idx3-ubyte.gz', train), ('train-labels-idx1-ubyte.gz', labels(2000)),
                   ('t10k-images-idx3-ubyte.gz', images(100)), ('t10k-labels-idx1-ubyte.gz', labels(100))):
    put(name, data)
if not damage:
    sys.exit(0)
path = os.path.join(d, 'train-images-idx3-ubyte.gz')
good = open(path, 'rb').read()
for off in range(len(good) // 2, len(good) - 64, 7):
    bad = bytearray(good)
    for i in range(off, off + 8):
        bad[i] ^= 0xff
    z, out, failed = zlib.decompressobj(31), 0, False
    try:
        for i in range(0, len(bad), 64):
            out += len(z.decompress(bytes(bad[i:i + 64])))
        failed = not z.eof
    except zlib.error:
        failed = True
    if failed and out > len(train):
        open(path, 'wb').write(bad)
        sys.exit(0)
sys.exit(1)
EOF
    case_begin gz_corrupt_mid_stream
    if python3 "$WORK/mkidx.py" "$WORK/gzbad" damage; then
        guarded gzbad 60 "$HCNN" train --check --config "$LENET" --set data_dir="$WORK/gzbad" --set csv= --set checkpoint_dir=
        if [ $rc -eq 1 ] && grep -q "train-images-idx3-ubyte.gz: the gzip stream is corrupt (zlib: " "$WORK/gzbad.err" &&
           ! grep -q trailing "$WORK/gzbad.err"; then
            case_ok
        else
            case_fail "exit $rc: $(cat "$WORK/gzbad.err")"
        fi
    else
        case_fail "no damaged stream that inflates past its size was found"
    fi
    # bytes after a whole gzip stream are still trailing data
    python3 "$WORK/mkidx.py" "$WORK/gztrail" keep
    printf 'junk' >>"$WORK/gztrail/train-images-idx3-ubyte.gz"
    expect_fail gz_trailing_after_stream "train-images-idx3-ubyte.gz: trailing data after the end of the gzip stream" \
        timeout -k 5 60 "$HCNN" train --check --config "$LENET" --set data_dir="$WORK/gztrail" --set csv= --set checkpoint_dir=

    # a FIFO as the training images, raw or .gz: refused, not read forever
    for kind in raw gz; do
        d="$WORK/fifo_$kind"
        python3 "$WORK/mkidx.py" "$d" keep
        if [ $kind = raw ]; then
            for f in "$d"/*.gz; do gzip -dc "$f" >"${f%.gz}" && rm "$f"; done
            rm "$d/train-images-idx3-ubyte"
            mkfifo "$d/train-images-idx3-ubyte"
            file=train-images-idx3-ubyte
        else
            rm "$d/train-images-idx3-ubyte.gz"
            mkfifo "$d/train-images-idx3-ubyte.gz"
            file=train-images-idx3-ubyte.gz
        fi
        case_begin "idx_fifo_$kind"
        guarded "fifo_$kind" 20 "$HCNN" train --config "$LENET" -q --set data_dir="$d" --set csv= \
            --set checkpoint_dir= --set blas_kernels=env
        if [ $rc -eq 1 ] && grep -q "IDX image file '$d/$file' is a pipe or FIFO (expected a regular file)" "$WORK/fifo_$kind.err"; then
            case_ok
        else
            case_fail "exit $rc: $(cat "$WORK/fifo_$kind.err")"
        fi
    done
else
    case_begin gz_corrupt_mid_stream
    case_skip "python3 not found (it writes the IDX files)"
fi

# CIFAR-10: one record per batch file, the first batch a FIFO
case_begin cifar_fifo
d="$WORK/cifar"
mkdir -p "$d"
for f in data_batch_2 data_batch_3 data_batch_4 data_batch_5 test_batch; do
    head -c 3073 /dev/zero >"$d/$f.bin"
done
mkfifo "$d/data_batch_1.bin"
guarded cifar 20 "$HCNN" train --config "$RESNET" -q --set data_dir="$d" --set csv= --set checkpoint_dir= \
    --set blas_kernels=env
if [ $rc -eq 1 ] && grep -q "CIFAR-10 batch file '$d/data_batch_1.bin' is a pipe or FIFO (expected a regular file)" "$WORK/cifar.err"; then
    case_ok
else
    case_fail "exit $rc: $(cat "$WORK/cifar.err")"
fi

# ---- a FIFO named where hcnn reads a checkpoint, a .npy or a plan file ----------
# (issue 37) each command refuses it at once, naming it; open() blocked
# every one of them forever before, and a blocked train ignored SIGTERM
case_begin fifo_fixture
mkdir -p "$WORK/ff/ck" "$WORK/ff/npy"
guarded ff_train 60 "$HCNN" "${SMALL[@]}" --set csv= --set checkpoint_dir="$WORK/ff/ck"
mkfifo "$WORK/ff/c.fifo"
if [ $rc -eq 0 ] && [ -f "$WORK/ff/ck/final.hcnn" ] && "$HCNN" export "$WORK/ff/ck/final.hcnn" "$WORK/ff/npy" >/dev/null 2>&1; then
    case_ok
else case_fail "exit $rc: $(cat "$WORK/ff_train.err")"; fi
rm -f "$WORK/ff/npy/conv1.weight.npy" && mkfifo "$WORK/ff/npy/conv1.weight.npy"
FIFO_MSG="'$WORK/ff/c.fifo' is a pipe or FIFO (expected a regular file)"
fifo_refused() { # NAME PATTERN CMD...: exit 1 or 2 within 20 s, one message naming the FIFO
    local name=$1 pattern=$2
    shift 2
    case_begin "$name"
    guarded "$name" 20 "$@"
    if { [ $rc -eq 1 ] || [ $rc -eq 2 ]; } && [ "$(grep -c 'hcnn: error' "$WORK/$name.err")" -eq 1 ] &&
        grep -qF -- "$pattern" "$WORK/$name.err"; then
        case_ok
    else
        case_fail "exit $rc: $(cat "$WORK/$name.err")"
    fi
}
fifo_refused fifo_eval "checkpoint $FIFO_MSG" "$HCNN" eval --config "$CFG" --checkpoint "$WORK/ff/c.fifo"
fifo_refused fifo_diff "checkpoint $FIFO_MSG" "$HCNN" diff "$WORK/ff/ck/final.hcnn" "$WORK/ff/c.fifo"
fifo_refused fifo_export "checkpoint $FIFO_MSG" "$HCNN" export "$WORK/ff/c.fifo" "$WORK/ff/out"
fifo_refused fifo_resume "checkpoint $FIFO_MSG" "$HCNN" "${SMALL[@]}" --set csv= --resume "$WORK/ff/c.fifo"
fifo_refused fifo_check_resume "checkpoint $FIFO_MSG" "$HCNN" "${SMALL[@]}" --set csv= --check --resume "$WORK/ff/c.fifo"
fifo_refused fifo_import ".npy file '$WORK/ff/npy/conv1.weight.npy' is a pipe or FIFO (expected a regular file)" \
    "$HCNN" import "$WORK/ff/npy" --config "$CFG" -o "$WORK/ff/imported.hcnn"
fifo_refused fifo_plan_node "--node file $FIFO_MSG" "$HCNN" plan --config "$CFG" --node "$WORK/ff/c.fifo"
fifo_refused fifo_plan_network "--network file $FIFO_MSG" "$HCNN" plan --config "$CFG" --node epyc-9554 \
    --network "$WORK/ff/c.fifo"
# --resume auto, the newest ckpt-s*.hcnn a FIFO: refused with its cause,
# without reading it (and no advice to run hcnn diff on it)
mkfifo "$WORK/ff/ck/ckpt-s9999999999.hcnn"
fifo_refused fifo_resume_auto "ckpt-s9999999999.hcnn, cannot be read (it is a pipe or FIFO, not a regular file)" \
    "$HCNN" "${SMALL[@]}" --set csv= --set checkpoint_dir="$WORK/ff/ck" --resume auto
rm -f "$WORK/ff/ck/ckpt-s9999999999.hcnn"

# ---- the run header: checkpoints on or off ------------------------------------

case_begin checkpoints_off_said
guarded ck_off 60 "$HCNN" "${SMALL[@]}" --set csv= --set 'checkpoint_dir=~'
if [ $rc -eq 0 ] && grep -q "^hcnn: checkpoints: off (checkpoint_dir is empty: no checkpoint will be written" "$WORK/ck_off.out"; then
    case_ok
else
    case_fail "exit $rc: $(head -n 4 "$WORK/ck_off.out") $(cat "$WORK/ck_off.err")"
fi
case_begin checkpoints_dir_named
guarded ck_on 60 "$HCNN" "${SMALL[@]}" --set csv= --set checkpoint_dir="$WORK/ck"
if [ $rc -eq 0 ] && grep -q "^hcnn: checkpoints: run .*; written to $WORK/ck/ckpt-s<step>.hcnn (" "$WORK/ck_on.out" && [ -f "$WORK/ck/final.hcnn" ]; then
    case_ok
else
    case_fail "exit $rc: $(head -n 4 "$WORK/ck_on.out") $(cat "$WORK/ck_on.err")"
fi

# ---- the config file: any fault is a configuration error (exit 2) ---------------

# config_refused NAME PATTERN CONFIG ARGS...: exit 2, one message, within 20 s
config_refused() {
    local name=$1 pattern=$2 config=$3
    shift 3
    case_begin "$name"
    guarded "$name" 20 "$HCNN" train --config "$config" "$@"
    if [ $rc -eq 2 ] && [ "$(grep -c 'hcnn: error' "$WORK/$name.err")" -eq 1 ] && grep -q "$pattern" "$WORK/$name.err"; then
        case_ok
    else
        case_fail "exit $rc (expected 2): $(cat "$WORK/$name.err")"
    fi
}
mkfifo "$WORK/config.fifo"
config_refused config_directory "config file '$WORK' is a directory (expected a regular file)" "$WORK"
config_refused config_fifo "config file '$WORK/config.fifo' is a pipe or FIFO (expected a regular file)" "$WORK/config.fifo"
config_refused config_missing "cannot open config file '$WORK/nope.yaml': No such file" "$WORK/nope.yaml"
config_refused config_directory_check "config file '$WORK' is a directory" "$WORK" --check

# ---- a stop signal during the BLAS kernel measurement ----------------------------

# stop_during NAME SIGNAL CACHE CONFIG ARGS...: a run with the cache CACHE
# (fresh: blas_kernels: auto measures) gets SIGNAL after 2 s; it must exit
# 75 with one line, without training and without a cache file.
# ResNet-18's measurement lasts tens of seconds (41 s on a 2-core Zen 5):
# it is in progress then.  20 s is a hang guard, not a timing check.
stop_during() {
    local name=$1 sig=$2 cache=$3 config=$4
    shift 4
    case_begin "$name"
    mkdir -p "$cache/hcnn"
    # the pid of hcnn itself (the shell execs it): timeout passes no SIGUSR1 on
    # shellcheck disable=SC2016
    XDG_CACHE_HOME="$cache" timeout -k 5 20 sh -c 'echo $$ >"$0"; exec "$@"' "$WORK/$name.pid" \
        "$HCNN" train --config "$config" -q --set blas_kernels=auto --set csv= --set checkpoint_dir= \
        --set max_steps=1 "$@" >"$WORK/$name.log" 2>&1 &
    local guard=$!
    sleep 2
    kill -s "$sig" "$(cat "$WORK/$name.pid")"
    wait "$guard"
    rc=$?
    if [ $rc -eq 75 ] && [ "$(grep -c "received during the BLAS kernel measurement: stopping before training" "$WORK/$name.log")" -eq 1 ] &&
       grep -q "hcnn: SIG$sig received during" "$WORK/$name.log" && ! grep -q '^epoch=' "$WORK/$name.log" &&
       [ -z "$(find "$cache" -name 'blas-*')" ]; then
        case_ok
    else
        case_fail "exit $rc (expected 75); cache: $(find "$cache" -type f | tr '\n' ' '); $(tail -n 5 "$WORK/$name.log")"
    fi
}

if "$HCNN" --version | grep -q '^BLAS: OpenBLAS'; then
    stop_during stop_usr1_measuring USR1 "$WORK/cache1" "$RESNET" --set dataset=synthetic
    stop_during stop_term_measuring TERM "$WORK/cache2" "$RESNET" --set dataset=synthetic
    # another process measures (holds the cache's lock): the wait ends at once too
    mkdir -p "$WORK/cache3/hcnn"
    lock="$WORK/cache3/hcnn/blas.lock"
    (exec 9>"$lock" && flock 9 && exec sleep 60) &
    holder=$!
    for _ in $(seq 50); do flock -n "$lock" true || break; sleep 0.1; done
    stop_during stop_waiting_for_the_lock USR1 "$WORK/cache3" "$CFG"
    kill "$holder"
    wait "$holder" 2>/dev/null
else
    case_begin stop_usr1_measuring
    case_skip "not OpenBLAS: no kernels to measure"
fi

# ---- a read-only working directory with the shipped configs (issue 37) ------
# the message names the key that put the directory there (checkpoint_dir,
# csv), not only the directory (before: "cannot create directory runs")
if [ "$(id -u)" -eq 0 ] && id nobody >/dev/null 2>&1; then
    RO=$WORK/readonly
    mkdir -p "$RO" && cp "$LENET" "$RO/lenet.yaml" && chmod 755 "$WORK" && chmod 555 "$RO"
    ro_refused() { # NAME PATTERN ARGS...
        local name=$1 pattern=$2
        shift 2
        case_begin "$name"
        su nobody -s /bin/sh -c "cd '$RO' && XDG_CACHE_HOME=/tmp timeout -k 5 60 '$HCNN' $*" >"$WORK/$name.out" 2>"$WORK/$name.err"
        local rc=$?
        if [ $rc -eq 1 ] && [ "$(wc -l <"$WORK/$name.err")" -eq 1 ] && grep -q -- "$pattern" "$WORK/$name.err"; then
            case_ok
        else
            case_fail "exit $rc: $(cat "$WORK/$name.err")"
        fi
    }
    ro_refused readonly_cwd_names_checkpoint_dir "cannot create directory runs: Permission denied (for 'runs/mnist_lenet', key checkpoint_dir in lenet.yaml)" \
        train --config lenet.yaml -q --set dataset=synthetic --set max_steps=1 --set blas_kernels=env
    ro_refused readonly_cwd_names_checkpoint_dir_check "(for 'runs/mnist_lenet', key checkpoint_dir in lenet.yaml)" \
        train --check --config lenet.yaml --set dataset=synthetic
    ro_refused readonly_cwd_names_csv "cannot create directory runs: Permission denied (for 'runs', the directory of key csv in lenet.yaml)" \
        train --config lenet.yaml -q --set dataset=synthetic --set max_steps=1 --set blas_kernels=env --set checkpoint_dir=
    ro_refused readonly_cwd_names_csv_check "(for 'runs', the directory of key csv in lenet.yaml)" \
        train --check --config lenet.yaml --set dataset=synthetic --set checkpoint_dir=
fi

finish
