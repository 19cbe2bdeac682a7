/* hcnn's command line: --help, --version, and each command found in the
 * table of commands (src/cli/commands.c) and handed the rest of argv. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "hcnn_git.h"
#include "hcnn/backend.h"
#include "hcnn/blas.h"
#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/onednn.h"
#include "cli.h"

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

/* A command line without a known command: the message, then hcnn's usage
 * (args.c prints a command's own help; the table's usage is printed here,
 * which keeps args.c below commands.c). */
static int top_usage_error(const char *fmt, const char *arg)
{
    hcnn_cli_usage_error(NULL, fmt, arg);
    hcnn_cli_print_usage(stderr);
    return 2;
}

int main(int argc, char **argv)
{
    /* the library's fatal errors end the job here: the rank's message, then
     * MPI_Abort of every rank, or exit with the error's code */
    hcnn_set_fatal_hook(hcnn_mpi_fatal_hook, NULL);
    const hcnn_cli_command *command = argc > 1 ? hcnn_cli_find(argv[1]) : NULL;
    block_stop_signals(command && command->stop_signals);
    /* a file-size limit (ulimit -f, a Slurm job's) makes a write fail with
     * EFBIG and be reported, instead of killing the process mid-checkpoint */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2)
        return top_usage_error("%s", "missing command");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        hcnn_cli_print_usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        char blas[1024], mpi[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        /* one of the few MPI calls allowed before MPI_Init; its first line */
        if (MPI_Get_library_version(mpi, &len) != MPI_SUCCESS)
            snprintf(mpi, sizeof mpi, "unknown");
        mpi[strcspn(mpi, "\r\n")] = '\0';
        char blas_file[1024];
        printf("hcnn %s\ngit: %s\nBLAS: %s\nBLAS library: %s\nMPI: %s\n", PACKAGE_VERSION,
               HCNN_GIT_COMMIT, hcnn_blas_describe(blas, sizeof blas),
               hcnn_blas_library_file(blas_file, sizeof blas_file), mpi);
#if HCNN_HAVE_CUDA
        char cuda[256];
        printf("CUDA: %s\n", hcnn_backend_cuda_versions(cuda, sizeof cuda));
#else
        printf("CUDA: none (./configure --with-cuda builds the GPU backend)\n");
#endif
        /* whether Nsight Systems and Compute see hcnn's ranges (src/core/trace.h) */
#if HCNN_HAVE_NVTX
        printf("NVTX: ranges compiled in (NVTX3: every layer's passes, the optimizer, "
               "communication, the step)\n");
#else
        printf("NVTX: none (./configure --with-nvtx compiles the ranges for Nsight)\n");
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
    if (!command)
        return top_usage_error("unknown command '%s'", cmd);
    return command->main(argc, argv, command);
}
