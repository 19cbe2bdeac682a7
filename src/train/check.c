/* The checks before a run: hcnn train --check (what a job needs, found
 * before it asks for nodes), the file-size limit and the precision each
 * rank checks before MPI starts, and the layout every rank agrees on after
 * (include/hcnn/train.h).  Apart from the run they check: they call into
 * run set-up's checks (resume.c, report.c), nothing calls back. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hcnn/blas.h"
#include "hcnn/ckpt_dir.h"
#include "hcnn/common.h"
#include "hcnn/data.h"
#include "hcnn/files.h"
#include "hcnn/threads.h"
#include "run.h"

/* Every rank runs the same BLAS kernels (blas_kernels: each rank applied
 * it before MPI started, from its node's measurement or cache): kernels
 * give different bits, and one slow node's choice would hold the job.  A
 * device backend's step calls no CPU BLAS: its ranks are not held to it. */
static int check_blas_kernels(const hcnn_config *cfg, const hcnn_comm *comm)
{
    enum { LEN = 32 };
    char mine[LEN] = {0};
    snprintf(mine, LEN, "%s", hcnn_blas_kernels());
    if (comm->size == 1 || cfg->device != HCNN_DEVICE_CPU)
        return HCNN_OK;
    char *all = malloc((size_t)LEN * (size_t)comm->size);
    if (!all)
        return hcnn_error("cannot allocate the ranks' BLAS kernel names");
    HCNN_MPI(MPI_Allgather(mine, LEN, MPI_CHAR, all, LEN, MPI_CHAR, comm->world));
    int other = -1;
    for (int r = 1; r < comm->size && other < 0; r++)
        if (strncmp(all, all + (size_t)r * LEN, LEN))
            other = r;
    if (other >= 0 && comm->rank == 0)
        hcnn_error("%s: the ranks run different BLAS kernels (rank 0: %s, rank %d: %s; "
                   "blas_kernels: %s): %s; set blas_kernels to one of them",
                   cfg->path, all, other, all + (size_t)other * LEN, cfg->blas_kernels,
                   !strcmp(cfg->blas_kernels, "auto")
                       ? "their nodes measured differently, each into its own cache (run hcnn "
                         "tune once with XDG_CACHE_HOME on a file system all nodes share)"
                       : "their environments' OPENBLAS_CORETYPE differ");
    free(all);
    return other >= 0 ? HCNN_EINVAL : HCNN_OK;
}

/* The thread count each rank would start (its own OMP_NUM_THREADS when
 * threads is 0): refused on every rank when one rank's is, said once by
 * the first such rank. */
static int check_threads(const hcnn_config *cfg, const hcnn_comm *comm)
{
    int first_bad = hcnn_threads_ok(cfg) ? comm->size : comm->rank;
    if (comm->size > 1)
        HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, comm->world));
    if (first_bad == comm->size)
        return HCNN_OK;
    int threads;
    if (first_bad == comm->rank)
        (void)hcnn_threads_resolve(cfg, &threads, NULL, 0); /* its message */
    return HCNN_EINVAL;
}

int hcnn_check_precision(const hcnn_config *cfg)
{
    char why[1024];
    if (cfg->device != HCNN_DEVICE_CPU ||
        hcnn_cpu_precision_check(cfg->precision, why, sizeof why) == HCNN_OK)
        return HCNN_OK; /* a GPU's precision: its backend's set_precision */
    return hcnn_error("%s: precision: %s", cfg->path, why);
}

int hcnn_check_layout(const hcnn_config *cfg, const hcnn_comm *comm)
{
    int rc = check_threads(cfg, comm);
    if (!rc)
        rc = hcnn_strategy_check(cfg, comm);
    return rc ? rc : check_blas_kernels(cfg, comm);
}

/* The file-size limit (ulimit -f, or a Slurm job's): a write past it kills
 * the process with SIGXFSZ, or with the signal ignored (main) fails with
 * EFBIG.  Under it MPI's start-up failed in PMIx's shared-memory store
 * (Open MPI 4.1: its messages only, SIGXFSZ forwarded, below 4 MiB here),
 * and a checkpoint larger than it could never be written.  Refused before
 * MPI starts, in one message, with what the run needs. */
#define MPI_START_FILE_BYTES ((uint64_t)16 << 20) /* failed at 1 MiB, ran at 4 (2 ranks) */

int hcnn_check_file_size_limit(const hcnn_config *cfg, int writes_checkpoints)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return HCNN_OK;
    uint64_t ckpt = 0;
    if (writes_checkpoints && cfg->checkpoint_dir[0]) {
        hcnn_net net;
        if (hcnn_net_create(&net, &cfg->model, hcnn_backend_cpu(), cfg->path) == HCNN_OK) {
            ckpt = hcnn_ckpt_file_bytes(&net, 1);
            hcnn_net_free(&net);
        }
    }
    const uint64_t need = ckpt > MPI_START_FILE_BYTES ? ckpt : MPI_START_FILE_BYTES;
    const uint64_t limit = (uint64_t)rl.rlim_cur;
    if (limit >= need)
        return HCNN_OK;
    const double mib = 1048576.0;
    char what[HCNN_PATH_MAX + 256];
    if (ckpt > MPI_START_FILE_BYTES)
        snprintf(what, sizeof what, "a checkpoint of model '%.64s' takes %.1f MiB (checkpoint_dir "
                                    "in %s)",
                 cfg->model.name, (double)ckpt / mib, cfg->path);
    else
        snprintf(what, sizeof what, "MPI's start-up writes shared-memory files of several MiB "
                                    "(Open MPI's PMIx failed under 4 MiB)");
    return hcnn_error_code(HCNN_EIO,
                           "the file-size limit (ulimit -f) is %.2f MiB: %s; raise it to at "
                           "least %.0f MiB (ulimit -f %llu, in KiB) or to unlimited",
                           (double)limit / mib, what, ceil((double)need / mib),
                           (unsigned long long)((need + 1023) / 1024));
}

/* hcnn train --check: what a job needs before it asks for nodes, without
 * training: the data sets read and checked against the model, the
 * checkpoint directory writable and not held by a live run, the checkpoint
 * to resume present, whole and this run's, the CSV a regular file (if it
 * exists) in a writable directory.
 * Serial, no MPI peers needed. */
int hcnn_train_check(const hcnn_config *cfg, const char *resume)
{
    int threads; /* the count the run would start, refused as the run refuses it */
    int rc = hcnn_threads_resolve(cfg, &threads, NULL, 0);
    if (!rc)
        rc = hcnn_check_precision(cfg); /* this node's CPU, as the run checks it */
    if (!rc)
        rc = hcnn_check_file_size_limit(cfg, 1);
    if (rc)
        return rc;
    hcnn_dataset train = {0}, test = {0};
    rc = hcnn_dataset_open(cfg, &train, &test);
    const long ntrain = train.n, ntest = test.n;
    hcnn_dataset_free(&train);
    hcnn_dataset_free(&test);
    if (rc)
        return rc;
    if ((rc = hcnn_run_check_checkpoint_dir(cfg)))
        return rc;
    if (cfg->checkpoint_dir[0] && (rc = hcnn_ckpt_lock_probe(cfg->checkpoint_dir)))
        return rc;
    if ((rc = hcnn_report_csv_check(cfg)))
        return rc;
    if (cfg->csv[0]) {
        char dir[HCNN_FILE_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", cfg->csv);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        char what[HCNN_PATH_MAX + 64];
        snprintf(what, sizeof what, "the directory of key csv in %s", cfg->path);
        if (slash && (rc = hcnn_mkdir_p_for(dir, what)))
            return rc;
        struct stat sb;
        errno = 0;
        if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK) != 0)
            return hcnn_error_code(HCNN_EIO, "csv '%s' (%s): '%s' is not a writable directory%s%s",
                                   cfg->csv, cfg->path, dir, errno ? ": " : "",
                                   errno ? strerror(errno) : "");
    }
    char path[HCNN_FILE_PATH_MAX + 48] = "";
    hcnn_ckpt_meta meta = {0};
    if (resume && (rc = hcnn_check_resume(cfg, resume, ntrain, path, sizeof path, &meta)))
        return rc;
    printf("hcnn: check: ok (%s: %ld training and %ld test samples of %s; checkpoint_dir %s; %s)\n",
           cfg->path, ntrain, ntest, cfg->dataset,
           cfg->checkpoint_dir[0] ? cfg->checkpoint_dir : "none (no checkpoints)",
           path[0] ? "resumes from the checkpoint" : resume ? "no checkpoint yet: a new run"
                                                           : "a new run");
    if (path[0])
        printf("hcnn: check: resume from %s: epoch %ld, batch %ld, step %ld (run %s)\n", path,
               meta.epoch + 1, meta.batch, meta.step,
               meta.run_id[0] ? meta.run_id : "written before run ids");
    return HCNN_OK;
}
