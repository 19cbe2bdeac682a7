#!/usr/bin/env bash
# Packs a CUDA build of hcnn, made on this Debian machine, for a GPU machine
# that has the NVIDIA driver and CUDA toolkit but not Debian's OpenMPI,
# OpenBLAS or libyaml (a bare GPU node image, a vendor's container): the
# program and tests/conformance/test_backend of each build directory given, the shared
# libraries they and Open MPI's components need that are not the C
# runtime's or CUDA's, Open MPI's and PMIx's component, help and
# configuration trees, and MNIST if fetched.  bench/gpu_check.sh unpacks it
# there and runs the GPU tests and benchmarks.
#
#   scripts/gpu-bundle.sh OUT.tar.xz BUILDDIR [BUILDDIR...]
#
# Each BUILDDIR is a build configured --with-cuda (make && make check
# TESTS= first); the first is the one bench/gpu_check.sh runs, the others
# are kept beside it as build1, build2... (e.g. one --without-cudnn, taken
# where the GPU machine has no cuDNN the first can load).  CUDA's own
# libraries (runtime, cuBLAS, cuDNN) are not packed: the GPU machine's
# toolkit provides them.
# Exit status: 0 packed, 1 something missing, 2 bad command line.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out=$1
shift
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
M=/usr/lib/x86_64-linux-gnu
i=0
for b in "$@"; do
    for f in hcnn tests/conformance/test_backend config.h; do
        [ -f "$b/$f" ] || { echo "gpu-bundle.sh: $b/$f missing (make && make check TESTS= in $b)" >&2; exit 1; }
    done
    grep -q '^#define HCNN_HAVE_CUDA 1' "$b/config.h" && ! grep -q 'HCNN_CUDA_EMULATION 1' "$b/config.h" ||
        { echo "gpu-bundle.sh: $b is not a --with-cuda build" >&2; exit 1; }
    d=$tmp/build$([ $i = 0 ] || echo $i)
    mkdir -p "$d/tests/conformance"
    cp "$b/hcnn" "$b/config.h" "$d/" && cp "$b/tests/conformance/test_backend" "$d/tests/conformance/"
    # the build's commit, for the name of bench/gpu_check.sh's log folder
    if [ -f "$b/hcnn_git.h" ]; then cp "$b/hcnn_git.h" "$d/"; fi
    if [ -f "$b/bench/kernel_share.so" ]; then # CUPTI's kernel times (bench/gpu_check.sh kernels)
        mkdir -p "$d/bench" && cp "$b/bench/kernel_share.so" "$d/bench/"
    fi
    i=$((i + 1))
done
# Open MPI's and PMIx's trees, found under their Debian paths (OPAL_PREFIX
# and PMIx's component path point there on the GPU machine)
for d in $M/openmpi $M/pmix2 /usr/share/openmpi /etc/openmpi; do
    [ -d "$d" ] || { echo "gpu-bundle.sh: $d missing (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
    mkdir -p "$tmp/root$(dirname "$d")"
    cp -a "$d" "$tmp/root$(dirname "$d")/"
done
mkdir -p "$tmp/root/usr/bin" "$tmp/lib"
cp /usr/bin/orterun /usr/bin/orted "$tmp/root/usr/bin/"
ln -s orterun "$tmp/root/usr/bin/mpirun"
# every library those load, but the C runtime's and CUDA's
objs=("$tmp"/build*/hcnn "$tmp"/build*/tests/conformance/test_backend /usr/bin/orterun /usr/bin/orted)
while IFS= read -r f; do objs+=("$f"); done < <(find $M/openmpi $M/pmix2 -name '*.so*' -type f)
for o in "${objs[@]}"; do ldd "$o" 2>/dev/null || true; done | awk '/=>/ && $3 ~ /^\// { print $1, $3 }' |
    sort -u | grep -v -E '^(libc|libm|libdl|libpthread|librt|ld-linux|libstdc\+\+|libgcc_s|libcublasLt|libcublas|libcudart|libcudnn[a-z_]*|libcuda)[.-]' |
    while read -r name path; do cp -L "$path" "$tmp/lib/$name"; done
# CUPTI, for kernel_share.so where the GPU machine has none (4 MB)
cupti=$(ldd "$tmp"/build*/bench/kernel_share.so 2>/dev/null | awk '/libcupti/ { print $3; exit }')
if [ -n "$cupti" ] && [ -f "$cupti" ]; then
    mkdir -p "$tmp/cupti" && cp -L "$cupti" "$tmp/cupti/"
fi
if [ -d "$src/data/mnist" ]; then
    mkdir -p "$tmp/mnist"
    for f in "$src"/data/mnist/*-ubyte*; do
        case $f in
        *.gz) cp "$f" "$tmp/mnist/" ;;
        *) gzip -c "$f" > "$tmp/mnist/$(basename "$f").gz" ;;
        esac
    done
fi
tar -cJf "$out" -C "$tmp" .
echo "gpu-bundle.sh: $out ($(du -h "$out" | cut -f1)): $i build(s), $(ls "$tmp/lib" | wc -l) libraries$([ -d "$tmp/mnist" ] && echo ', MNIST')"
