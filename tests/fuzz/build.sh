#!/usr/bin/env bash
# Build the fuzz targets (tests/fuzz/README.md) with clang's libFuzzer,
# AddressSanitizer (leaks included) and UndefinedBehaviorSanitizer.
#
# The library's sources are compiled again by clang with
# -fsanitize=fuzzer-no-link,address,undefined into a static library of
# their own, so the normal (gcc/mpicc) build is left alone; each target
# fuzz_<name>.c is linked against it.  Needs a configured tree for
# config.h (./configure, in the source directory or HCNN_BUILDDIR).
#
# usage: tests/fuzz/build.sh [TARGET...]      (default: all targets)
# environment: CLANG (default clang-14, else clang), HCNN_BUILDDIR (the
#   configured build directory, default: the source directory),
#   HCNN_FUZZ_BUILD (output directory, default $HCNN_BUILDDIR/tests/fuzz/build),
#   JOBS (parallel compiles, default 2)
# Prints the directory of the binaries on its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
builddir=$(cd "${HCNN_BUILDDIR:-$src}" && pwd)
out=${HCNN_FUZZ_BUILD:-$builddir/tests/fuzz/build}
jobs=${JOBS:-2}

CLANG=${CLANG:-}
if [ -z "$CLANG" ]; then
    for c in clang-14 clang; do
        if command -v "$c" >/dev/null 2>&1; then CLANG=$c; break; fi
    done
fi
[ -n "$CLANG" ] || { echo "fuzz build: clang not found (Debian: apt-get install clang-14)" >&2; exit 2; }
if [ ! -f "$builddir/config.h" ]; then
    echo "fuzz build: $builddir/config.h not found: run ./configure first (or set HCNN_BUILDDIR)" >&2
    exit 2
fi

# the BLAS as configured (a rpath'ed -L... -lopenblas, its include directory);
# MPI from the wrapper (OpenMPI's -showme, else MPICH's -show)
blas_libs=$(sed -n 's/^#define HCNN_BLAS_LIBS "\(.*\)"$/\1/p' "$builddir/config.h")
blas_cflags=$(sed -n 's/^BLAS_CFLAGS = //p' "$builddir/Makefile" 2>/dev/null || true)
# oneDNN where configure found it (src/blas/onednn.c): empty otherwise
onednn_libs=$(sed -n 's/^ONEDNN_LIBS = //p' "$builddir/Makefile" 2>/dev/null || true)
onednn_cflags=$(sed -n 's/^ONEDNN_CFLAGS = //p' "$builddir/Makefile" 2>/dev/null || true)
# NVTX3's header where config.h compiles the ranges in (src/core/trace.h)
nvtx_cppflags=$(sed -n 's/^NVTX_CPPFLAGS = //p' "$builddir/Makefile" 2>/dev/null || true)
if mpicc -showme:compile >/dev/null 2>&1; then
    mpi_cflags=$(mpicc -showme:compile)
    mpi_libs=$(mpicc -showme:link)
else
    mpi_show=$(mpicc -show 2>/dev/null || true)
    mpi_cflags=$(printf '%s\n' $mpi_show | grep '^-I' | tr '\n' ' ' || true)
    mpi_libs="$(printf '%s\n' $mpi_show | grep -E '^-(L|l|Wl)' | tr '\n' ' ' || true)"
    [ -n "$mpi_libs" ] || mpi_libs=-lmpi
fi

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -fopenmp with clang needs LLVM's OpenMP runtime (Debian: libomp-14-dev)
CFLAGS="-std=c11 -g -O1 -fopenmp -Wall -Wextra -Wno-pass-failed -DHAVE_CONFIG_H $SAN"
CPPFLAGS="-I$src/include -I$builddir $blas_cflags $onednn_cflags $mpi_cflags $nvtx_cppflags"

mkdir -p "$out/obj"
# not needed by the parsers, and clang 14 does not know its CPU feature names
exclude="src/blas/measure.c"
# the library's C sources, as Makefile.am lists them (without the program's main)
mapfile -t sources < <(sed -n '/^libhcnn_la_SOURCES/,/^$/p' "$src/Makefile.am" | tr ' \t\\' '\n\n\n' |
                       grep '^src/.*\.c$' | grep -v -x -F -f <(printf '%s\n' $exclude))
[ ${#sources[@]} -gt 0 ] || { echo "fuzz build: no sources found in Makefile.am" >&2; exit 2; }

# rebuild an object when its source, any header or this script is newer
newest_header=$(find "$src/include" "$src/src" "$builddir/config.h" "$here/build.sh" \
                     \( -name '*.h' -o -name build.sh \) -newer "$out/obj" 2>/dev/null | head -n 1)
[ -n "$newest_header" ] && rm -f "$out"/obj/*.o
todo=()
for s in "${sources[@]}"; do
    o="$out/obj/$(echo "$s" | tr / _).o"
    [ "$o" -nt "$src/$s" ] || todo+=("$s")
done
touch "$out/obj"
if [ ${#todo[@]} -gt 0 ]; then
    echo "fuzz build: compiling ${#todo[@]} library sources with $CLANG" >&2
    export CLANG CFLAGS CPPFLAGS src out
    printf '%s\n' "${todo[@]}" | xargs -P "$jobs" -I{} sh -c \
        'o="$out/obj/$(echo {} | tr / _).o"; $CLANG $CFLAGS -fsanitize=fuzzer-no-link $CPPFLAGS -c "$src/{}" -o "$o.tmp" && mv "$o.tmp" "$o"'
    rm -f "$out/libhcnn-fuzz.a"
fi
if [ ! -f "$out/libhcnn-fuzz.a" ]; then
    ar rcs "$out/libhcnn-fuzz.a.tmp" "$out"/obj/*.o
    mv "$out/libhcnn-fuzz.a.tmp" "$out/libhcnn-fuzz.a"
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    for f in "$here"/fuzz_*.c; do t=$(basename "$f" .c); targets+=("${t}"); done
fi
for t in "${targets[@]}"; do
    t=${t#fuzz_}; t=fuzz_$t
    [ -f "$here/$t.c" ] || { echo "fuzz build: no target $here/$t.c" >&2; exit 2; }
    bin="$out/$t"
    if [ "$bin" -nt "$here/$t.c" ] && [ "$bin" -nt "$out/libhcnn-fuzz.a" ] &&
       [ "$bin" -nt "$here/fuzz_common.h" ] && [ "$bin" -nt "$here/fuzz_tiny.h" ]; then
        continue
    fi
    # shellcheck disable=SC2086
    $CLANG $CFLAGS -fsanitize=fuzzer $CPPFLAGS -DFUZZ_TINY_YAML="\"$here/tiny.yaml\"" \
        "$here/$t.c" -o "$bin.tmp" "$out/libhcnn-fuzz.a" $blas_libs $onednn_libs $mpi_libs -lyaml -lz -lm -lpthread
    mv "$bin.tmp" "$bin"
done
echo "$out"
