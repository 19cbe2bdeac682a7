#!/usr/bin/env bash
# The --with-likwid variant (LIKWID marker regions, for likwid-perfctr -m on
# the cluster) configures, compiles, links and trains.  This VM exposes no
# hardware counters, so likwid-perfctr itself cannot run here.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"

case_begin likwid_build_trains
if [ ! -f /usr/include/likwid-marker.h ] && [ -z "${LIKWID_PREFIX:-}" ]; then
    case_skip "likwid-marker.h not found (Debian package likwid)"
    finish
fi
# a copy of the sources, without build products and data, built apart
mkdir -p "$WORK/src"
tar -C "$HCNN_SRCDIR" --exclude=./data --exclude=./runs --exclude=./.git --exclude=./results/runs \
    --exclude='*.o' --exclude='*.a' --exclude='*.lo' --exclude='*.la' --exclude=.libs --exclude=./hcnn \
    --exclude='./hcnn-*' -cf - . | tar -C "$WORK/src" -xf -
(
    cd "$WORK/src" &&
        { [ -x configure ] || autoreconf -fi; } &&
        ./configure --with-likwid ${LIKWID_PREFIX:+=$LIKWID_PREFIX} --enable-werror >"$WORK/configure.log" 2>&1 &&
        make clean >/dev/null 2>&1 && make -j2 hcnn >"$WORK/make.log" 2>&1
) || { case_fail "build failed: $(tail -n 5 "$WORK/configure.log" "$WORK/make.log" 2>/dev/null)"; finish; }
if ! grep -q 'likwid markers  : yes' "$WORK/configure.log"; then
    case_fail "configure did not enable likwid"
elif ! nm "$WORK/src/hcnn" | grep -q likwid_markerStartRegion && ! ldd "$WORK/src/hcnn" | grep -q liblikwid; then
    case_fail "hcnn is not linked with likwid"
else
    # a plain network, and one with residual blocks (nested regions)
    for cfg in synthetic_small synthetic_resnet; do
        if ! "$WORK/src/hcnn" train --config "$HCNN_SRCDIR/configs/$cfg.yaml" -q --set epochs=1 \
            --set csv= --set checkpoint_dir= >"$WORK/train.log" 2>&1 ||
            ! grep -q '^epoch=1 ' "$WORK/train.log"; then
            case_fail "$cfg: $(tail -n 5 "$WORK/train.log")"
            finish
        fi
    done
    case_ok
fi

finish
