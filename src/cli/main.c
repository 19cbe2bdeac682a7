/* hcnn command line: train, eval, bench, tune, diff, export, import, --help. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "hcnn_git.h"
#include "hcnn/backend.h"
#include "hcnn/blas.h"
#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/train.h"
#include "hcnn/diff.h"
#include "hcnn/export.h"
#include "hcnn/markers.h"
#include "hcnn/onednn.h"
#include "hcnn/plan.h"

#define MAX_SETS 256

static const char *USAGE_MAIN =
    "usage: hcnn <command> [options]\n"
    "\n"
    "A hybrid MPI+OpenMP trainer for convolutional networks.\n"
    "\n"
    "commands:\n"
    "  train   train a model as configured:  hcnn train --config FILE [--set key=value ...]\n"
    "  eval    evaluate a checkpoint:        hcnn eval --config FILE --checkpoint FILE\n"
    "  bench   training throughput:          hcnn bench --config FILE [--set key=value ...]\n"
    "  tune    measure the BLAS kernels:     hcnn tune --config FILE [--set key=value ...]\n"
    "  plan    project to N nodes:           hcnn plan --config FILE [--nodes 1,2,..,32] "
    "[--network ib-hdr]\n"
    "  diff    compare two checkpoints:      hcnn diff A B [--tol X]\n"
    "  export  checkpoint to NumPy files:    hcnn export CKPT DIR\n"
    "  import  NumPy files to a checkpoint:  hcnn import DIR --config FILE -o CKPT\n"
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

static const char *USAGE_TRAIN =
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

static const char *USAGE_DIFF =
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
    "  -h, --help    this help\n";

static const char *USAGE_BENCH =
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
    "  --steps N            steps per repeat (default 5)\n";

static const char *USAGE_TUNE =
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

static const char *USAGE_EXPORT =
    "usage: hcnn export CKPT DIR\n"
    "\n"
    "Write every parameter and batch-norm statistic of CKPT as DIR/<name>.npy (NumPy 1.0,\n"
    "float32, C order), named as PyTorch's state_dict keys (conv1.weight [out,in,kh,kw],\n"
    "layer1.0.bn1.running_mean, ...), plus <bn>.num_batches_tracked.npy (int64) for each\n"
    "batch-norm layer and DIR/manifest.txt (name dtype shape per line).  See README.md.\n";

static const char *USAGE_IMPORT =
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
    "  -s, --set KEY=VALUE override a key (repeatable)\n";

static const char *USAGE_EVAL =
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

typedef struct cli {
    const char *command;
    const char *config;
    const char *checkpoint;
    const char *resume;
    const char *files[2];
    int nfiles;
    const char *output;
    int profile;
    int warmup, repeats, steps;
    double tol;
    int model_only;
    const char *sets[MAX_SETS];
    int nset;
    int quiet;
    int check; /* train --check */
    int help;
    int probe; /* tune: the measurement's child (src/blas/measure.c) */
    int ranks; /* tune: 0 = from the environment */
} cli;

static int usage_error(const char *usage, const char *fmt, const char *arg)
{
    fprintf(stderr, "hcnn: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", usage);
    return 2;
}

/* Parses "--opt VALUE" and "--opt=VALUE"; returns the value or NULL. */
static const char *opt_value(int argc, char **argv, int *i, const char *lng, const char *shrt)
{
    const char *a = argv[*i];
    size_t n = strlen(lng);
    if (!strncmp(a, lng, n) && a[n] == '=')
        return a + n + 1;
    if (!strcmp(a, lng) || (shrt && !strcmp(a, shrt))) {
        if (*i + 1 >= argc)
            return NULL;
        return argv[++*i];
    }
    return NULL;
}

static int is_opt(const char *a, const char *lng, const char *shrt)
{
    size_t n = strlen(lng);
    return !strcmp(a, lng) || (shrt && !strcmp(a, shrt)) || (!strncmp(a, lng, n) && a[n] == '=');
}

/* The value of an option given once: *slot := it.  Refused (exit status 2,
 * one message) when it is missing, empty (an unset shell variable in a job
 * script: --resume "$CKPT" once started a new run silently) or when the
 * option was given before (the last --config used to win silently). */
static int take_once(int argc, char **argv, int *i, const char *lng, const char *shrt,
                     const char **slot, const char *what, const char *usage)
{
    const char *a = argv[*i];
    const char *v = opt_value(argc, argv, i, lng, shrt);
    char msg[512];
    if (!v)
        snprintf(msg, sizeof msg, "option %s needs %s", a, what);
    else if (!v[0])
        snprintf(msg, sizeof msg, "option %s is empty: it needs %s (an unset variable in a job "
                                  "script?)",
                 lng, what);
    else if (*slot)
        snprintf(msg, sizeof msg, "option %s given twice ('%.200s', then '%.200s'): give it once",
                 lng, *slot, v);
    else {
        *slot = v;
        return 0;
    }
    return usage_error(usage, "%s", msg);
}

static int parse(int argc, char **argv, cli *c, const char *usage)
{
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            c->help = 1;
        } else if (!strcmp(c->command, "train") && (!strcmp(a, "-q") || !strcmp(a, "--quiet"))) {
            c->quiet = 1;
        } else if (!strcmp(c->command, "train") && is_opt(a, "--resume", "-r")) {
            if (take_once(argc, argv, &i, "--resume", "-r", &c->resume,
                          "a checkpoint file, 'latest' or 'auto'", usage))
                return 2;
        } else if (!strcmp(c->command, "train") && !strcmp(a, "--check")) {
            c->check = 1;
        } else if (!strcmp(c->command, "tune") && !strcmp(a, "--probe")) {
            c->probe = 1;
        } else if (!strcmp(c->command, "tune") && is_opt(a, "--ranks", NULL)) {
            char *end;
            if (!(v = opt_value(argc, argv, &i, "--ranks", NULL)))
                return usage_error(usage, "option %s needs a number", a);
            const long k = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || k < 1 || k > 1000000)
                return usage_error(usage, "--ranks: expected an integer >= 1, got '%s'", v);
            c->ranks = (int)k;
        } else if ((!strcmp(c->command, "train") || !strcmp(c->command, "eval") ||
                    !strcmp(c->command, "bench") || !strcmp(c->command, "import") ||
                    !strcmp(c->command, "tune")) &&
                   is_opt(a, "--config", "-c")) {
            if (take_once(argc, argv, &i, "--config", "-c", &c->config, "a file name", usage))
                return 2;
        } else if (is_opt(a, "--checkpoint", "-k") && !strcmp(c->command, "eval")) {
            if (take_once(argc, argv, &i, "--checkpoint", "-k", &c->checkpoint, "a file name",
                          usage))
                return 2;
        } else if (!strcmp(c->command, "diff") && is_opt(a, "--tol", "-t")) {
            char *end;
            if (!(v = opt_value(argc, argv, &i, "--tol", "-t")))
                return usage_error(usage, "option %s needs a number", a);
            c->tol = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || !(c->tol >= 0))
                return usage_error(usage, "--tol: expected a number >= 0, got '%s'", v);
        } else if (!strcmp(c->command, "train") && (!strcmp(a, "-p") || !strcmp(a, "--profile"))) {
            c->profile = 1;
        } else if (!strcmp(c->command, "bench") &&
                   (is_opt(a, "--warmup", NULL) || is_opt(a, "--repeats", NULL) ||
                    is_opt(a, "--steps", NULL))) {
            const char *name = is_opt(a, "--warmup", NULL)    ? "--warmup"
                               : is_opt(a, "--repeats", NULL) ? "--repeats"
                                                              : "--steps";
            char *end;
            if (!(v = opt_value(argc, argv, &i, name, NULL)))
                return usage_error(usage, "option %s needs a number", a);
            long k = strtol(v, &end, 10);
            int lo = strcmp(name, "--warmup") ? 1 : 0, hi = strcmp(name, "--repeats") ? 100000 : 64;
            if (*v == '\0' || *end != '\0' || k < lo || k > hi) {
                fprintf(stderr, "hcnn: %s: expected an integer in [%d, %d], got '%s'\n", name, lo,
                        hi, v);
                return 2;
            }
            *(name[2] == 'w' ? &c->warmup : name[2] == 'r' ? &c->repeats : &c->steps) = (int)k;
        } else if (!strcmp(c->command, "diff") && (!strcmp(a, "-m") || !strcmp(a, "--model-only"))) {
            c->model_only = 1;
        } else if (!strcmp(c->command, "import") && is_opt(a, "--output", "-o")) {
            if (take_once(argc, argv, &i, "--output", "-o", &c->output, "a file name", usage))
                return 2;
        } else if ((!strcmp(c->command, "diff") || !strcmp(c->command, "export") ||
                    !strcmp(c->command, "import")) &&
                   a[0] != '-') {
            int max = strcmp(c->command, "import") ? 2 : 1;
            if (c->nfiles >= max)
                return usage_error(usage, "unexpected argument '%s'", a);
            if (!a[0])
                return usage_error(usage, "%s", "an empty argument where a file or directory "
                                                "is expected (an unset variable in a job script?)");
            c->files[c->nfiles++] = a;
        } else if (strcmp(c->command, "diff") && strcmp(c->command, "export") &&
                   is_opt(a, "--set", "-s")) {
            if (!(v = opt_value(argc, argv, &i, "--set", "-s")))
                return usage_error(usage, "option %s needs KEY=VALUE", a);
            if (c->nset >= MAX_SETS)
                return usage_error(usage, "too many --set options (at most 256): %s", v);
            c->sets[c->nset++] = v;
        } else {
            return usage_error(usage, "unknown option '%s'", a);
        }
    }
    return 0;
}

/* Rank 0 reads and validates the configuration and broadcasts it (the
 * struct is plain data), so every rank runs exactly the same configuration
 * and a bad file is reported once.  Returns HCNN_OK or the error code. */
static int load_config(hcnn_config *cfg, const cli *c, const hcnn_comm *comm)
{
    int rc = HCNN_OK;
    if (comm->rank == 0)
        rc = hcnn_config_load(cfg, c->config, c->sets, c->nset);
    if (comm->size > 1) {
        HCNN_MPI(MPI_Bcast(&rc, 1, MPI_INT, 0, comm->world));
        if (!rc)
            HCNN_MPI(MPI_Bcast(cfg, (int)sizeof *cfg, MPI_BYTE, 0, comm->world));
    }
    return rc;
}

/* The README's exit status: 75 stopped by SIGTERM/SIGUSR1 (Slurm requeues) */
static int exit_status(int rc)
{
    return rc == HCNN_OK ? 0 : rc == HCNN_EINVAL ? 2 : rc == HCNN_STOPPED ? 75 : 1;
}

/* SIGTERM and SIGUSR1 ask `train` to checkpoint and stop: they are taken
 * between steps by the trainer (sigtimedwait), so they are blocked first
 * thing — before a re-execution (the mask survives exec) and before MPI,
 * OpenMP or the loader start threads, which all inherit it. */
static void block_stop_signals(int block)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

/* hcnn tune, and its children: no MPI. */
static int tune_main(const cli *c)
{
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return 1;
    int rc = hcnn_config_load(cfg, c->config, c->sets, c->nset);
    const int world = c->ranks > 0 ? c->ranks : hcnn_blas_env_world();
    if (!rc)
        rc = c->probe ? hcnn_blas_probe(cfg, world) : hcnn_blas_tune(cfg, world, stdout);
    free(cfg);
    return exit_status(rc);
}

/* The rank the MPI launcher gives this process (before MPI_Init), or 0. */
static int launcher_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return atoi(getenv(vars[i]));
    return 0;
}

/* stderr to /dev/null (returns the saved descriptor, -1 if not muted), and
 * back */
static int mute_stderr(int mute)
{
    if (!mute)
        return -1;
    fflush(stderr);
    const int saved = dup(STDERR_FILENO), null = open("/dev/null", O_WRONLY);
    if (saved >= 0 && null >= 0)
        dup2(null, STDERR_FILENO);
    if (null >= 0)
        close(null);
    return saved;
}

static void unmute_stderr(int saved)
{
    if (saved < 0)
        return;
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
}

/* Before MPI and threads start: whether this node's CPU runs the
 * configured precision (bf16: include/hcnn/onednn.h), said by every rank
 * whose CPU does not, since the nodes of a job may differ; then what
 * MPI_Init itself depends on: the file-size limit (MPI's start-up writes
 * files; include/hcnn/train.h), then blas_kernels (include/hcnn/blas.h),
 * which may re-execute argv.  A configuration that does not load is left
 * to the ranks' load after MPI_Init, which reports it once; what the last
 * two have to say, the launcher's rank 0 says. */
static int before_mpi(const cli *c, char **argv, int writes_checkpoints)
{
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return HCNN_ENOMEM;
    int saved = mute_stderr(1);
    int rc = hcnn_config_load(cfg, c->config, c->sets, c->nset);
    unmute_stderr(saved);
    int reexec = 0;
    if (rc == HCNN_OK && (rc = hcnn_check_precision(cfg)) != HCNN_OK) {
        free(cfg);
        return rc;
    }
    if (rc == HCNN_OK) {
        saved = mute_stderr(launcher_rank() != 0);
        rc = hcnn_check_file_size_limit(cfg, writes_checkpoints);
        if (!rc)
            rc = hcnn_blas_choose(cfg, hcnn_blas_env_world(), &reexec);
        unmute_stderr(saved);
    } else {
        rc = HCNN_OK;
    }
    free(cfg);
    if (reexec)
        hcnn_blas_reexec(argv);
    return rc;
}

int main(int argc, char **argv)
{
    /* the library's fatal errors end the job here: the rank's message, then
     * MPI_Abort of every rank, or exit with the error's code */
    hcnn_set_fatal_hook(hcnn_mpi_fatal_hook, NULL);
    block_stop_signals(argc > 1 && !strcmp(argv[1], "train"));
    /* a file-size limit (ulimit -f, a Slurm job's) makes a write fail with
     * EFBIG and be reported, instead of killing the process mid-checkpoint */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2)
        return usage_error(USAGE_MAIN, "%s", "missing command");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(USAGE_MAIN, stdout);
        return 0;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        char blas[1024], mpi[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        /* one of the few MPI calls allowed before MPI_Init; its first line */
        if (MPI_Get_library_version(mpi, &len) != MPI_SUCCESS)
            snprintf(mpi, sizeof mpi, "unknown");
        mpi[strcspn(mpi, "\r\n")] = '\0';
        printf("hcnn %s\ngit: %s\nBLAS: %s\nMPI: %s\n", PACKAGE_VERSION, HCNN_GIT_COMMIT,
               hcnn_blas_describe(blas, sizeof blas), mpi);
#if HCNN_HAVE_CUDA
        char cuda[256];
        printf("CUDA: %s\n", hcnn_backend_cuda_versions(cuda, sizeof cuda));
#else
        printf("CUDA: none (./configure --with-cuda builds the GPU backend)\n");
#endif
        /* the precisions device: cpu runs here (tf32 is no CPU's) */
        char onednn[256], bf16_why[1024];
        printf("oneDNN: %s\n", hcnn_onednn_describe(onednn, sizeof onednn));
        if (hcnn_cpu_precision_check(HCNN_PRECISION_BF16, bf16_why, sizeof bf16_why) == HCNN_OK)
            printf("precisions on this CPU: fp32, bf16\n");
        else
            printf("precisions on this CPU: fp32 (%s)\n", bf16_why);
        return 0;
    }
    if (!strcmp(cmd, "plan"))
        return hcnn_plan_main(argc, argv);
    const char *usage;
    if (!strcmp(cmd, "train"))
        usage = USAGE_TRAIN;
    else if (!strcmp(cmd, "eval"))
        usage = USAGE_EVAL;
    else if (!strcmp(cmd, "diff"))
        usage = USAGE_DIFF;
    else if (!strcmp(cmd, "bench"))
        usage = USAGE_BENCH;
    else if (!strcmp(cmd, "tune"))
        usage = USAGE_TUNE;
    else if (!strcmp(cmd, "export"))
        usage = USAGE_EXPORT;
    else if (!strcmp(cmd, "import"))
        usage = USAGE_IMPORT;
    else
        return usage_error(USAGE_MAIN, "unknown command '%s'", cmd);

    cli c = {.command = cmd, .warmup = 3, .repeats = 5, .steps = 5};
    int rc = parse(argc, argv, &c, usage);
    if (rc)
        return rc;
    if (c.help) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(cmd, "diff")) {
        if (c.nfiles != 2)
            return usage_error(usage, "%s", "diff needs two checkpoint files");
        return hcnn_diff_main(c.files[0], c.files[1], c.tol, c.model_only);
    }
    if (!strcmp(cmd, "export")) {
        if (c.nfiles != 2)
            return usage_error(usage, "%s", "export needs a checkpoint and a directory");
        rc = hcnn_export_npy(c.files[0], c.files[1]);
        if (!rc)
            printf("exported %s to %s\n", c.files[0], c.files[1]);
        return exit_status(rc);
    }
    if (!strcmp(cmd, "import")) {
        if (c.nfiles != 1 || !c.config || !c.output)
            return usage_error(usage, "%s", "import needs DIR, --config FILE and -o CKPT");
        hcnn_config *icfg = malloc(sizeof *icfg);
        if (!icfg)
            return 1;
        rc = hcnn_config_load(icfg, c.config, c.sets, c.nset);
        if (!rc)
            rc = hcnn_import_npy(c.files[0], icfg, c.output);
        if (!rc)
            printf("imported %s into %s\n", c.files[0], c.output);
        free(icfg);
        return exit_status(rc);
    }
    if (!c.config)
        return usage_error(usage, "%s", "missing --config FILE");
    if (!strcmp(cmd, "eval") && !c.checkpoint)
        return usage_error(usage, "%s", "missing --checkpoint FILE");
    if (!strcmp(cmd, "tune"))
        return tune_main(&c);
    if (c.check) { /* on the batch node before the launch: no MPI */
        hcnn_config *ccfg = malloc(sizeof *ccfg);
        if (!ccfg)
            return 1;
        rc = hcnn_config_load(ccfg, c.config, c.sets, c.nset);
        if (!rc)
            rc = hcnn_train_check(ccfg, c.resume);
        free(ccfg);
        return exit_status(rc);
    }
    if ((rc = before_mpi(&c, argv, !strcmp(cmd, "train"))))
        return exit_status(rc);

    hcnn_comm comm;
    if (hcnn_comm_init(&comm, &argc, &argv))
        return 1;
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        HCNN_FATAL(HCNN_ENOMEM, "cannot allocate the configuration");
    rc = load_config(cfg, &c, &comm);
    if (!rc)
        rc = hcnn_check_layout(cfg, &comm);
    if (rc) { /* every rank knows: a clean exit, reported once by rank 0 */
        free(cfg);
        hcnn_comm_finalize(&comm);
        return rc == HCNN_EIO ? 1 : 2;
    }
    HCNN_MARKER_INIT();
    if ((rc = hcnn_watchdog_start(&comm, cfg->stall_timeout_s, cfg->checkpoint_dir)) != HCNN_OK)
        HCNN_FATAL(rc, "cannot start the stall watchdog");
    if (!strcmp(cmd, "train")) {
        if (!c.quiet && comm.rank == 0) {
            printf("# configuration (%s, after overrides)\n", c.config);
            hcnn_config_print(cfg, stdout);
            fflush(stdout);
        }
        hcnn_run_opts o = {.resume = c.resume, .profile = c.profile};
        rc = hcnn_train(cfg, &comm, &o);
    } else if (!strcmp(cmd, "bench")) {
        hcnn_run_opts o = {.profile = 1, .warmup = c.warmup, .repeats = c.repeats, .steps = c.steps};
        rc = hcnn_bench(cfg, &comm, &o);
    } else {
        rc = hcnn_evaluate(cfg, &comm, c.checkpoint);
    }
    free(cfg);
    hcnn_watchdog_stop();
    HCNN_MARKER_CLOSE();
    if (rc == HCNN_STOPPED || rc == HCNN_EAGREED) { /* every rank stopped together */
        hcnn_comm_finalize(&comm);
        return rc == HCNN_STOPPED ? 75 : 1;
    }
    /* a failure on one rank may leave the others in a collective: end the job */
    if (rc && comm.size > 1)
        HCNN_FATAL(exit_status(rc), "this rank failed (error code %d, cause above); "
                                    "ending all ranks",
                   rc);
    hcnn_comm_finalize(&comm);
    return exit_status(rc);
}
