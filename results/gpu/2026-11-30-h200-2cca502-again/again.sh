#!/bin/bash
# scratch (not committed): the runs the first call's GPU_CHECK_SECONDS cut, 2026-11-30
set -u
cd "$(dirname "$0")/.."
R=$PWD B=$(mktemp -d) O=$OUT
t0=$(date +%s); st() { echo "=== $(($(date +%s) - t0))s: $*"; }
tar -xJf .gpu/bundle.tar.xz -C "$B"
for d in usr/lib/x86_64-linux-gnu/openmpi usr/lib/x86_64-linux-gnu/pmix2 usr/share/openmpi etc/openmpi; do
    [ -e "/$d" ] || { mkdir -p "$(dirname "/$d")"; ln -s "$B/root/$d" "/$d"; }
done
export OPAL_PREFIX=$B/root/usr PMIX_INSTALL_PREFIX=$B/root/usr/lib/x86_64-linux-gnu/pmix2
export PMIX_MCA_mca_base_component_path=$B/root/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix PMIX_MCA_pcompress_base_silence_warning=1
export PATH=$B/root/usr/bin:$PATH
libdir() { dirname "$(timeout 20 find /usr/local/cuda* /usr/lib /opt -name "$1" 2>/dev/null | head -n 1)"; }
export LD_LIBRARY_PATH=$B/lib:$(libdir libcublas.so.13):$(libdir libcudart.so.13):$(libdir libcudnn.so.9)
export HCNN_BUILDDIR=$B/build HCNN_SRCDIR=$R HCNN=$B/build/hcnn OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export XDG_CACHE_HOME=$B/cache
mkdir -p data/mnist && cp "$B"/mnist/*.gz data/mnist/
printf '#!/bin/sh\nunset LD_LIBRARY_PATH\nexec python3 "$@"\n' >"$B/python" && chmod +x "$B/python"
st "setup done"
st "compare lenet b256 fp32"
HCNN=$HCNN PYTHON=$B/python timeout -k 3 50 bench/compare.sh --device cuda --model lenet --batch 256 --precision fp32 \
    --rounds 3 --torch-format best --threads 4 --peer-process server --peer-timeout 40 >"$O/compare_lenet256.log" 2>&1
echo "exit $?"; grep -E '^pytorch_mode=|^pytorch_best_mode=|^hcnn_median=|^compare.sh: ' "$O/compare_lenet256.log" | tail -n 6
st "bf16 cuDNN graphs, NHWC, ResNet-18 b128"
HCNN_CUDA_CONV=cudnn HCNN_CUDA_LAYOUT=nhwc timeout -k 3 35 "$HCNN" bench --config configs/cifar_resnet18.yaml --set device=cuda \
    --set batch_size=128 --set precision=bf16 --warmup 3 --repeats 3 --steps 5 >"$O/bench_bf16_cudnn_nhwc.log" 2>&1
echo "exit $?"; grep -E '^# setup_ms|^# step_ms|^images_per_s|runs by im2col' "$O/bench_bf16_cudnn_nhwc.log"
grep '^# plan' "$O/bench_bf16_cudnn_nhwc.log" | head -n 4 | cut -c 1-400
st "CPU ResNet-18 b64 16 threads: OpenBLAS default (Prescott) vs OPENBLAS_CORETYPE=Cooperlake"
for ct in "" Cooperlake; do
    OPENBLAS_CORETYPE=$ct timeout -k 3 15 "$HCNN" bench --config configs/cifar_resnet18.yaml --set batch_size=64 \
        --set threads=16 --warmup 1 --repeats 3 --steps 2 >"$O/cpu_${ct:-default}.log" 2>&1
    echo "coretype=${ct:-default} exit $? $(grep -m1 -o 'kernels: [A-Za-z0-9]*' "$O/cpu_${ct:-default}.log") $(grep '^images_per_s' "$O/cpu_${ct:-default}.log")"
done
st done
