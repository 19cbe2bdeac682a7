#!/usr/bin/env bash
# Regenerate the seed corpora of the fuzz targets in tests/fuzz/corpus/
# (committed; run this after a format change).  Small valid files of each
# format with the mode/shape prefix each target expects (see the comment at
# the top of each fuzz_<name>.c): IDX and CIFAR-10 files made here, the
# configs/*.yaml, and checkpoints and .npy exports of tests/fuzz/tiny.yaml
# written by the hcnn program itself (hcnn train, hcnn import, hcnn export).
#
# usage: tests/fuzz/make-corpus.sh      (HCNN: the program, default ./hcnn
#        of HCNN_BUILDDIR or the source directory)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
HCNN=${HCNN:-${HCNN_BUILDDIR:-$src}/hcnn}
[ -x "$HCNN" ] || { echo "make-corpus: $HCNN not found: build hcnn first" >&2; exit 2; }
corpus=$here/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 LC_ALL=C

# bytes FILE STRING...: printf '%b' of the strings into FILE
bytes() { local f=$1; shift; printf '%b' "$@" > "$f"; }
# n copies of a byte (octal escape) on stdout
rep() { local i; for ((i = 0; i < $2; i++)); do printf '%b' "$1"; done; }

# ---- idx: mode byte (bit 0 labels role, bit 1 gzip by the harness, bit 2 trailing byte)
d=$corpus/idx; rm -rf "$d"; mkdir -p "$d"
img1='\0\0\010\003\0\0\0\001\0\0\0\002\0\0\0\002\001\002\003\004'   # 1 image 2x2
lab1='\0\0\010\001\0\0\0\001\007'                                   # 1 label
bytes "$tmp/img" "$img1"; bytes "$tmp/lab" "$lab1"
bytes "$d/images-raw" '\000' "$img1"
bytes "$d/labels-raw" '\001' "$lab1"
bytes "$d/images-gz-harness" '\002' "$img1"
bytes "$d/labels-gz-harness" '\003' "$lab1"
bytes "$d/images-gz-garbage" '\006' "$img1"
{ printf '\000'; gzip -9n < "$tmp/img"; } > "$d/images-gz-file"
{ printf '\001'; gzip -9n < "$tmp/lab"; } > "$d/labels-gz-file"
{ printf '\000'; gzip -9n < "$tmp/img"; gzip -9n < /dev/null; } > "$d/images-gz-two-members"
{ printf '\000'; printf '\0\0\010\003\0\0\0\001\0\0\0\034\0\0\0\034'; rep '\177' 784; } > "$d/images-28x28"
bytes "$d/images-truncated" '\000' '\0\0\010\003\0\0\0\002\0\0\0\002\0\0\0\002\001\002'
bytes "$d/images-huge-count" '\000' '\0\0\010\003\377\377\377\377\0\0\0\002\0\0\0\002\001\002\003\004'

# ---- cifar: mode byte (bit 0: the file twice), records of 1 label + 3072 pixels
d=$corpus/cifar; rm -rf "$d"; mkdir -p "$d"
{ printf '\000\003'; rep '\100' 3072; } > "$d/one-record"
{ printf '\001\011'; rep '\001' 3072; printf '\000'; rep '\377' 3072; } > "$d/two-records-twice"
{ printf '\000\003'; rep '\100' 100; } > "$d/short"

# ---- config: YAML, then NUL-separated --set overrides
d=$corpus/config; rm -rf "$d"; mkdir -p "$d"
for f in "$src"/configs/*.yaml "$here/tiny.yaml"; do cp "$f" "$d/$(basename "$f")"; done
{ cat "$src/configs/synthetic_small.yaml"; printf '\0lr=0.1\0model.blocks.0.out=4\0model.blocks.1.type=leaky_relu\0partition=[0, 3]'; } > "$d/sets"
printf 'model: {name: m, input: [3, 8, 8], classes: 2, blocks: [{type: residual, out: 4, stride: 2}, {type: bn}, gap, {type: dropout, p: 0.5}, flatten, {type: fc, out: 2}]}\ndataset: synthetic\naugment: default\nschedule: cosine\nstrategy: pipeline\nstages: 2\n' > "$d/flow-style"

# ---- checkpoints of tiny.yaml, and its export (hcnn itself)
"$HCNN" train --config "$here/tiny.yaml" --set checkpoint_dir="$tmp/ck" > /dev/null
"$HCNN" export "$tmp/ck/final.hcnn" "$tmp/exp" > /dev/null
"$HCNN" import "$tmp/exp" --config "$here/tiny.yaml" -o "$tmp/imported.hcnn" > /dev/null
d=$corpus/ckpt; rm -rf "$d"; mkdir -p "$d"
{ printf '\000'; cat "$tmp/ck/final.hcnn"; } > "$d/trained"
{ printf '\001'; cat "$tmp/ck/final.hcnn"; } > "$d/trained-fixcrc"
{ printf '\001'; cat "$tmp/imported.hcnn"; } > "$d/imported-fixcrc"

# ---- npy: ndim byte and dimension bytes (d - 1), then the file
d=$corpus/npy; rm -rf "$d"; mkdir -p "$d"
while read -r name dtype shape; do
    [ "$dtype" = float32 ] || continue
    IFS=x read -r -a dims <<< "$shape"
    {
        printf "\\$(printf '%03o' ${#dims[@]})"
        for x in "${dims[@]}"; do printf "\\$(printf '%03o' $((x - 1)))"; done
        cat "$tmp/exp/$name.npy"
    } > "$d/$name"
done < "$tmp/exp/manifest.txt"
{ printf '\000'; cat "$tmp/exp/bn1.num_batches_tracked.npy"; } > "$d/scalar-i8"
# '<f8' (converted), version 2.0 and 3.0 headers, a Fortran-order one
h8="{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }"
{ printf '\001\001\223NUMPY\001\000\166\000%s' "$h8"; rep ' ' $((118 - ${#h8} - 1)); printf '\n'
  printf '\0\0\0\0\0\0\360\077\0\0\0\0\0\0\000\300'; } > "$d/f8-v1"
h4="{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
{ printf '\002\001\002\223NUMPY\002\000\164\000\000\000%s' "$h4"; rep ' ' $((116 - ${#h4} - 1)); printf '\n'
  rep '\0\0\200\077' 6; } > "$d/f4-v2"
{ printf '\002\001\002\223NUMPY\003\000\164\000\000\000%s' "$h4"; rep ' ' $((116 - ${#h4} - 1)); printf '\n'
  rep '\0\0\200\177' 6; } > "$d/f4-v3-inf"

# ---- import: tensor index byte (the model's order), then that tensor's .npy
d=$corpus/import; rm -rf "$d"; mkdir -p "$d"
k=0
while read -r name dtype shape; do
    [ "$dtype" = float32 ] || continue
    { printf "\\$(printf '%03o' $k)"; cat "$tmp/exp/$name.npy"; } > "$d/$name"
    k=$((k + 1))
done < "$tmp/exp/manifest.txt"
echo "make-corpus: $(find "$corpus" -type f | wc -l) seeds in $corpus"
