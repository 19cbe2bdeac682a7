/* hcnn's table of commands (src/cli/cli.h): each one's line in `hcnn
 * --help`, its --help text and the function that parses and runs it, and
 * `hcnn --help` printed from the table. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* ---- the commands' --help texts ------------------------------------------ */

static const char HELP_TRAIN[] =
    "usage: hcnn train --config FILE [--set key=value ...] [--resume CKPT|latest|auto] [--check]\n"
    "\n"
    "Train the model of the YAML run config FILE, serially or, with strategy=data under\n"
    "mpirun, data-parallel over all ranks.  Prints the configuration, a progress line\n"
    "during each epoch and one line per epoch:\n"
    "  epoch=E step=S train_loss= train_acc= test_loss= test_acc= images_per_s= epoch_time_s= ...\n"
    "writes one CSV row per epoch to the file named by the key 'csv' and the final checkpoint\n"
    "to <checkpoint_dir>/final.hcnn.\n"
    "\n"
    "options:\n"
    "  -c, --config FILE    run configuration (YAML); see docs/config-reference.md\n"
    "  -s, --set KEY=VALUE  override a key (repeatable); dotted keys reach into the model,\n"
    "                       e.g. --set epochs=3 --set model.blocks.0.out=8\n"
    "  -r, --resume CKPT    continue the run saved in CKPT, or 'latest' (the newest\n"
    "                       checkpoint in checkpoint_dir): same epoch, step, learning rate,\n"
    "                       data order; any strategy and rank count may resume any checkpoint;\n"
    "                       'auto': the newest in checkpoint_dir if there is one, else a new\n"
    "                       run (what a requeued batch job wants)\n"
    "  --check              check, without training and without MPI peers, what the run\n"
    "                       needs: the config, the data sets (read and matched to the model),\n"
    "                       checkpoint_dir and the CSV's directory writable, the checkpoint\n"
    "                       --resume names; prints 'hcnn: check: ok (...)' or one error\n"
    "                       (exit 1: data, files; 2: configuration)\n"
    "  -q, --quiet          do not print the configuration at start\n"
    "  -p, --profile        print the per-block profile (forward/backward ms, GFLOP/s, the\n"
    "                       raw cblas_sgemm time of the same GEMMs) at the end\n"
    "\n"
    "signals: SIGTERM or SIGUSR1 (e.g. Slurm's --signal=USR1@120) finish the current step,\n"
    "write a checkpoint and exit with status 75; resume with --resume latest.  During the\n"
    "BLAS kernel measurement before training they stop the run at once (status 75).\n"
    "  -h, --help           this help\n";

static const char HELP_EVAL[] =
    "usage: hcnn eval --config FILE --checkpoint CKPT [--set key=value ...]\n"
    "\n"
    "Load the model weights of CKPT (which must match the config's model) and print the loss\n"
    "and accuracy on the configured test set:\n"
    "  checkpoint=CKPT epoch=E step=S test_samples=N test_loss=L test_acc=A eval_time_s=T\n"
    "\n"
    "options:\n"
    "  -c, --config FILE      run configuration (YAML)\n"
    "  -k, --checkpoint CKPT  checkpoint written by 'hcnn train'\n"
    "  -s, --set KEY=VALUE    override a key (repeatable)\n"
    "  -h, --help             this help\n";

static const char HELP_BENCH[] =
    "usage: hcnn bench --config FILE [--set key=value ...] [--warmup N] [--repeats N] [--steps N]\n"
    "\n"
    "Measure training throughput (forward + backward + optimiser step) on synthetic data of the\n"
    "model's input shape, at the config's global batch, thread count and strategy (under\n"
    "mpirun: the global rate).  After N warm-up steps (default 3) it times R repeats (default\n"
    "5) of S steps (default 5), prints each repeat, the per-block profile with the raw\n"
    "cblas_sgemm reference of every convolution and fully connected layer, the share of the\n"
    "step in GEMMs, data wait, optimiser and communication, and as its last line\n"
    "  images_per_s=<median over repeats>\n"
    "\n"
    "options:\n"
    "  -c, --config FILE    run configuration (YAML)\n"
    "  -s, --set KEY=VALUE  override a key (repeatable)\n"
    "  --warmup N           untimed steps first (default 3)\n"
    "  --repeats N          timed repeats, 1..64 (default 5)\n"
    "  --steps N            steps per repeat (default 5)\n"
    "  -h, --help           this help\n";

static const char HELP_TUNE[] =
    "usage: hcnn tune --config FILE [--set key=value ...] [--ranks N]\n"
    "\n"
    "Measure which OpenBLAS kernels run this model fastest on this node, as blas_kernels: auto\n"
    "does at the start of a run: the GEMMs the layers issue for one training pass on a rank\n"
    "(the config's model, batch, strategy, conv_algo and thread count) are timed under each\n"
    "kernel type the CPU can run, OpenBLAS's own choice and the environment's\n"
    "OPENBLAS_CORETYPE, each in a child process, three rounds in rotated order, medians.\n"
    "Prints the table (kernels, why a candidate, GEMM milliseconds per pass, speed against the\n"
    "kernels that would load anyway) and as its last line\n"
    "  choice=NAME speedup=X measured_s=S cache=FILE\n"
    "and writes the cache (XDG_CACHE_HOME/hcnn or ~/.cache/hcnn) that train, eval and bench\n"
    "read: run it once per node type, e.g. srun --ntasks-per-node=1 hcnn tune --config FILE.\n"
    "\n"
    "options:\n"
    "  -c, --config FILE    run configuration (YAML)\n"
    "  -s, --set KEY=VALUE  override a key (repeatable)\n"
    "  --ranks N            ranks of the job the table is for (the samples a rank carries);\n"
    "                       default: the MPI launcher's environment, else 1\n"
    "  -h, --help           this help\n";

static const char HELP_PLAN[] =
    "usage: hcnn plan --config FILE [--nodes 1,2,4,8,16,32] [--network ib-hdr|eth-25g|FILE]\n"
    "                 [--node epyc-9554|epyc-7763|here|FILE] [--threads T] [options]\n"
    "       mpirun -np 2 --map-by node hcnn plan --calibrate-network FILE [--config FILE]\n"
    "\n"
    "Project images/s, the time per step and its terms (compute, exposed gradient allreduce,\n"
    "pipeline bubble, point-to-point, the per-step agreement) and the scaling efficiency of\n"
    "data parallelism and of every pipeline layout S stages x N/S replicas, at each node count\n"
    "(one rank per node), for weak scaling (the per-rank batch held) and strong scaling (the\n"
    "global batch held, fewer samples than threads included), and mark the fastest layout\n"
    "per node count (*), and print the passes of one node's step and what bounds each on its\n"
    "threads.  Compute: per-block forward/backward times of each layout's pass measured on\n"
    "this machine, spread over the node's threads as the pieces the backend cuts the pass\n"
    "into allow, plus a barrier per phase, priced on the node (--node): GEMM layers at the\n"
    "ratio of per-core FMA peaks, the other layers' streams at its memory bandwidth when the\n"
    "step's activations outgrow its last-level cache; network: the allreduce\n"
    "algorithm OpenMPI 4.1 picks (for the gradient buckets libnbc's, as\n"
    "OMPI_MCA_coll_libnbc_iallreduce_algorithm sets it: hcnn's default 3, Rabenseifner),\n"
    "priced alpha-beta-gamma.  docs/plan.md: model, assumptions, validation.\n"
    "\n"
    "options:\n"
    "  -c, --config FILE         run configuration (its model, batch_size, bucket_mb)\n"
    "  -s, --set KEY=VALUE       override a key (repeatable)\n"
    "  --nodes LIST              node counts (default 1,2,4,8,16,32)\n"
    "  --network NAME|FILE       ib-hdr (default), eth-25g, or a file of alpha_us,\n"
    "                            bandwidth_gbs, reduce_gbs [, p2p_alpha_us, name]\n"
    "  --node NAME|FILE          the target node: epyc-9554 (default: AMD EPYC 9554, 64 cores,\n"
    "                            datasheet figures, an assumption), epyc-7763, here (this\n"
    "                            machine, measured), or a file of cores, peak_gflops,\n"
    "                            bandwidth_gbs [, core_bandwidth_gbs, llc_mib, barrier_us,\n"
    "                            name, source]\n"
    "  --threads T               threads per rank on the target nodes (default: the node's\n"
    "                            cores)\n"
    "  --measure-threads T       threads for the measurement here (default: min(T, cores))\n"
    "  --stages LIST             pipeline stage counts to consider (default 2,4,8)\n"
    "  --microbatches M          micro-batches per replica (strong), per stage (weak:\n"
    "                            M = S x this); default the config's microbatches, or 4\n"
    "  --batch B                 per-rank batch of weak scaling (default batch_size)\n"
    "  --scaling weak|strong|both   (default both)\n"
    "  --host-cores C            validation: every rank on this one host of C cores\n"
    "  --steps K                 timed steps per measurement (default 5)\n"
    "  -o, --out DIR             write DIR/plan.csv, DIR/plan_passes.csv and DIR/plan_*.png\n"
    "                            (default plan-<model>)\n"
    "  --no-plots                table and CSV only\n"
    "  --calibrate-network FILE  under mpirun: measure latency and bandwidth between ranks\n"
    "                            0 and 1 and the reduction rate, write them as a --network FILE;\n"
    "                            with --config also the host contention (a pass of the model\n"
    "                            on 1 thread, all ranks at once vs rank 0 alone: --host-cores)\n"
    "  -h, --help                this help\n";

static const char HELP_DIFF[] =
    "usage: hcnn diff A B [--tol X] [--model-only]\n"
    "\n"
    "Compare two checkpoints tensor by tensor (parameters, batch-norm statistics and\n"
    "momentum buffers).  For each tensor the difference is max|a - b| (absolute) and\n"
    "max|a - b| / max(max|a|, max|b|) (relative to the tensor's largest magnitude).\n"
    "Prints, as its last line,\n"
    "  max_abs_diff=D tensor=NAME max_rel_diff=R tensor=NAME tensors=N within_tol=yes|no\n"
    "and exits 0 when the largest relative difference is <= X (default 0: identical),\n"
    "1 when it is larger or the files hold different tensors, 2 on an unreadable file.\n"
    "\n"
    "options:\n"
    "  -t, --tol X       relative tolerance\n"
    "  -m, --model-only  compare parameters and statistics, not momentum buffers\n"
    "  -h, --help        this help\n";

static const char HELP_EXPORT[] =
    "usage: hcnn export CKPT DIR\n"
    "\n"
    "Write every parameter and batch-norm statistic of CKPT as DIR/<name>.npy (NumPy 1.0,\n"
    "float32, C order), named as PyTorch's state_dict keys (conv1.weight [out,in,kh,kw],\n"
    "layer1.0.bn1.running_mean, ...), plus <bn>.num_batches_tracked.npy (int64) for each\n"
    "batch-norm layer and DIR/manifest.txt (name dtype shape per line).  See docs/checkpoints.md.\n"
    "\n"
    "options:\n"
    "  -h, --help  this help\n";

static const char HELP_IMPORT[] =
    "usage: hcnn import DIR --config FILE -o CKPT [--set key=value ...]\n"
    "\n"
    "Build a checkpoint of the config's model from DIR/<name>.npy files (e.g. np.save of a\n"
    "PyTorch state_dict): every tensor must be there with its exact shape (float32 or\n"
    "float64); files that are not part of the model are refused.  The checkpoint starts at\n"
    "epoch 0, step 0, with zero momentum.\n"
    "\n"
    "options:\n"
    "  -c, --config FILE   run configuration describing the model\n"
    "  -o, --output CKPT   checkpoint to write\n"
    "  -s, --set KEY=VALUE override a key (repeatable)\n"
    "  -h, --help          this help\n";

/* ---- the table -------------------------------------------------------------- */

/* in the order `hcnn --help` lists them */
static const hcnn_cli_command COMMANDS[] = {
    {"train", "train a model as configured:", "hcnn train --config FILE [--set key=value ...]",
     HELP_TRAIN, hcnn_cli_train, 1},
    {"eval", "evaluate a checkpoint:", "hcnn eval --config FILE --checkpoint FILE", HELP_EVAL,
     hcnn_cli_eval, 0},
    {"bench", "training throughput:", "hcnn bench --config FILE [--set key=value ...]",
     HELP_BENCH, hcnn_cli_bench, 0},
    {"tune", "measure the BLAS kernels:", "hcnn tune --config FILE [--set key=value ...]",
     HELP_TUNE, hcnn_cli_tune, 0},
    {"plan", "project to N nodes:",
     "hcnn plan --config FILE [--nodes 1,2,..,32] [--network ib-hdr]", HELP_PLAN, hcnn_cli_plan,
     0},
    {"diff", "compare two checkpoints:", "hcnn diff A B [--tol X]", HELP_DIFF, hcnn_cli_diff, 0},
    {"export", "checkpoint to NumPy files:", "hcnn export CKPT DIR", HELP_EXPORT,
     hcnn_cli_export, 0},
    {"import", "NumPy files to a checkpoint:", "hcnn import DIR --config FILE -o CKPT",
     HELP_IMPORT, hcnn_cli_import, 0},
};

const hcnn_cli_command *hcnn_cli_find(const char *name)
{
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(COMMANDS[i].name, name))
            return &COMMANDS[i];
    return NULL;
}

/* `hcnn --help` after the commands */
static const char USAGE_OPTIONS[] =
    "\n"
    "options:\n"
    "  -h, --help     this help; 'hcnn <command> --help' for a command's options\n"
    "  -V, --version  print the version, the git commit it was built from (-dirty: with\n"
    "                 uncommitted changes), the BLAS library with its kernels, the MPI library,\n"
    "                 oneDNN and the instructions it dispatches, the precisions this CPU runs\n"
    "\n"
    "exit status: 0 success, 1 run-time failure (data, numerics, I/O), 2 bad command line or\n"
    "configuration, 75 stopped by SIGTERM/SIGUSR1 after writing a checkpoint.\n"
    "See README.md and docs/config-reference.md.\n";

void hcnn_cli_print_usage(FILE *f)
{
    fputs("usage: hcnn <command> [options]\n"
          "\n"
          "A hybrid MPI+OpenMP trainer for convolutional networks.\n"
          "\n"
          "commands:\n",
          f);
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-8s%-30s%s\n", COMMANDS[i].name, COMMANDS[i].summary,
                COMMANDS[i].synopsis);
    fputs(USAGE_OPTIONS, f);
}
