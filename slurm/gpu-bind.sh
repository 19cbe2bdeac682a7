#!/usr/bin/env bash
# One GPU per rank: slurm/gpu.sbatch runs every rank as
#   slurm/gpu-bind.sh hcnn train ...
# which sets CUDA_VISIBLE_DEVICES to the GPU of the rank's index on its node
# and then runs (exec) the command, so that rank k of a node sees only its
# GPU, as device 0, under srun and mpirun alike.
#   the rank's index on its node: OMPI_COMM_WORLD_LOCAL_RANK (mpirun; tried
#     first, since the batch step's own SLURM_LOCALID=0 leaks into mpirun's
#     ranks), else MPI_LOCALRANKID (MPICH, Intel MPI), else SLURM_LOCALID (srun)
#   the node's GPUs: the list in CUDA_VISIBLE_DEVICES (Slurm sets it to the
#     GPUs allocated to the job on this node), else 0 .. (nvidia-smi -L count) - 1
# More ranks on a node than GPUs there is an error (status 1, one line).
set -u
prog=gpu-bind.sh
[ $# -gt 0 ] || { echo "$prog: error: no command (usage: $prog COMMAND [ARGS...])" >&2; exit 2; }
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${SLURM_LOCALID:-0}}}
[[ "$local_rank" =~ ^[0-9]+$ ]] || { echo "$prog: error: local rank '$local_rank' is not a number" >&2; exit 1; }
gpus=()
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    IFS=, read -r -a gpus <<<"$CUDA_VISIBLE_DEVICES"
elif command -v nvidia-smi >/dev/null; then
    count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    for ((i = 0; i < count; i++)); do gpus+=("$i"); done
fi
if [ "$local_rank" -ge ${#gpus[@]} ]; then
    echo "$prog: error: rank $local_rank of node $(hostname) has no GPU of its own (${#gpus[@]} GPU(s) visible: ${CUDA_VISIBLE_DEVICES:-none listed}): ask for as many GPUs as ranks per node (--gres=gpu:N --ntasks-per-node=N)" >&2
    exit 1
fi
export CUDA_VISIBLE_DEVICES=${gpus[$local_rank]}
exec "$@"
