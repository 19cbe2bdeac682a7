/* What a run prints and records: the run header, the progress line, the
 * epoch line and the CSV metrics row (min / mean / max over ranks of each
 * phase, as HPL reports its timers, so a slow node shows). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "hcnn_git.h"
#include "hcnn/blas.h"
#include "hcnn/common.h"
#include "hcnn/files.h"
#include "run.h"

void hcnn_report_compute_setup(const hcnn_run *r)
{
    const hcnn_config *cfg = r->cfg;
    /* conv_algo and im2col_mb are the CPU backend's; a device's algorithms
     * are its own (its line above says which) */
    char algo[96];
    if (cfg->device == HCNN_DEVICE_CPU)
        snprintf(algo, sizeof algo, "conv_algo %s", hcnn_conv_algo_name(cfg->conv_algo));
    else
        snprintf(algo, sizeof algo, "the %s backend's own (conv_algo is the CPU's)",
                 hcnn_device_name(cfg->device));
    printf("hcnn: convolutions: %s; data_prefetch %s; batch assembly: %s\n", algo,
           hcnn_prefetch_name(cfg->data_prefetch),
           r->loader.thread_started ? "background thread" : "by the training threads");
    /* each layer's plan: hcnn bench's table and its "# plan" lines */
    const hcnn_strategy *s = &r->strat;
    char plans[384];
    printf("hcnn: convolution plans (layers of %s): %s\n",
           r->comm->size > 1 ? "rank 0's blocks" : "the model",
           hcnn_profile_plans(&r->net, &s->scratch.ctx, s->first, s->last, s->pass_samples, plans,
                              sizeof plans));
    if (r->be->graph_begin) /* a backend without graphs has nothing to say */
        printf("hcnn: CUDA graphs: %s\n", r->graphs.why);
}

void hcnn_report_header(const hcnn_run *r)
{
    if (!run_is_root(r) || r->quiet)
        return;
    const hcnn_config *cfg = r->cfg;
    char blas[256];
    printf("hcnn: model %s: %d blocks, %zu parameters; data %s: %d train / %d test samples; "
           "strategy %s on %d rank%s x %d threads (%s); global batch %d; %s\n",
           cfg->model.name, r->net.nlayers, r->net.nparams, cfg->dataset, r->train.n, r->test.n,
           hcnn_strategy_name(cfg->strategy), r->comm->size, r->comm->size > 1 ? "s" : "",
           r->threads, r->threads_how, cfg->batch_size,
           hcnn_blas_describe(blas, sizeof blas));
    if (r->reserved_core)
        printf("hcnn: one core of each rank's %d is the gradient allreduce's "
               "(allreduce_progress: thread): %d threads compute\n",
               r->threads + 1, r->threads);
    char where[512];
    r->be->describe(r->be, where, sizeof where);
    printf("hcnn: device: %s\n", where);
    if (r->comm->size > 1)
        fputs(r->mpi_note, stdout); /* empty for host memory */
    hcnn_report_compute_setup(r);
    fputs(r->ckpt_note, stdout); /* where the checkpoints go, or that there are none */
    r->strat.ops->report_header(&r->strat, stdout);
    fflush(stdout);
}

void hcnn_report_progress(const hcnn_run *r, int epoch, int batch, int nbatches,
                          const epoch_stats *st, double t0, double *last_print)
{
    if (!run_is_root(r) || r->quiet)
        return;
    const double now = hcnn_now();
    const int by_steps = !r->tty && r->cfg->progress_every > 0;
    if (by_steps ? (batch % r->cfg->progress_every != 0)
                 : (now - *last_print < (r->tty ? 0.5 : 10.0)))
        return;
    *last_print = now;
    const double el = now - t0;
    /* rank 0's shard: the epoch line has the global figures */
    printf("%sepoch %d/%d step %d/%d loss %.4f acc %.2f%% %.0f img/s lr %.4g%s", r->tty ? "\r" : "",
           epoch + 1, r->cfg->epochs, batch, nbatches, st->seen ? st->loss_sum / st->seen : 0.0,
           st->seen ? 100.0 * st->correct / st->seen : 0.0,
           el > 0 ? st->seen * r->comm->size / el : 0.0, st->lr, r->tty ? "   " : "\n");
    fflush(stdout);
}

#define CSV_HEADER                                                                                 \
    "run_id,git_commit,timestamp,strategy,ranks,stages,replicas,threads,batch_size,"               \
    "microbatches,epoch,step,lr,train_loss,train_acc,test_loss,test_acc,images_per_s,"             \
    "epoch_time_s,eval_time_s,compute_s,compute_s_min,compute_s_max,comm_wait_s,"                  \
    "comm_wait_s_min,comm_wait_s_max,data_wait_s,data_wait_s_min,data_wait_s_max,bubble_s,"        \
    "bubble_s_min,bubble_s_max,allreduce_hidden,peak_rss_mb"

/* The one message for a csv that is not a regular file. */
static int csv_refused(const hcnn_config *cfg, mode_t mode)
{
    return hcnn_error_code(HCNN_EIO,
                           "csv '%s' (%s) is %s (expected a regular file, a symbolic link to "
                           "one, or a path where one can be created; csv: \"\" for no "
                           "metrics file)",
                           cfg->csv, cfg->path, hcnn_file_kind(mode));
}

/* A csv that exists must be a regular file (or a symbolic link to one):
 * the metrics are written through it.  A pipe, FIFO, device or directory
 * is refused before the run trains (as root, csv=/dev/stdout used to
 * replace /dev/stdout with a plain file).  A path that does not exist yet
 * is created later; other faults are reported by that creation. */
int hcnn_report_csv_check(const hcnn_config *cfg)
{
    struct stat st;
    if (!cfg->csv[0] || stat(cfg->csv, &st) != 0 || S_ISREG(st.st_mode))
        return HCNN_OK;
    return csv_refused(cfg, st.st_mode);
}

/* Opens the csv for appending, through a symbolic link, creating it if
 * needed; O_NONBLOCK so that a FIFO put there since the check cannot
 * block the open (fstat refuses it). */
static int csv_open_through(const hcnn_config *cfg, int *fd)
{
    *fd = open(cfg->csv, O_RDWR | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    if (*fd < 0 || fstat(*fd, &st) != 0)
        return hcnn_error_code(HCNN_EIO, "cannot create the metrics file %s (key csv in %s): %s",
                               cfg->csv, cfg->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return csv_refused(cfg, st.st_mode);
    fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK);
    return HCNN_OK;
}

/* Whether the file starts with our header (a resumed run appends to it). */
static int csv_has_header(int fd)
{
    char line[8];
    return pread(fd, line, 7, 0) == 7 && !strncmp(line, "run_id,", 7);
}

/* A resumed run appends after the last whole row: a row torn by a write
 * that failed (a full disk) is cut off, and said so, instead of the next
 * row being glued onto it. */
static int csv_drop_torn_row(const hcnn_config *cfg, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return hcnn_error_code(HCNN_EIO, "cannot read the metrics file %s (key csv in %s): %s",
                               cfg->csv, cfg->path, strerror(errno));
    off_t end = st.st_size;
    char buf[4096];
    while (end > 0) { /* back to the last newline */
        const size_t n = end < (off_t)sizeof buf ? (size_t)end : sizeof buf;
        const ssize_t got = pread(fd, buf, n, end - (off_t)n);
        if (got != (ssize_t)n)
            return hcnn_error_code(HCNN_EIO, "cannot read the metrics file %s (key csv in %s): %s",
                                   cfg->csv, cfg->path, got < 0 ? strerror(errno) : "short read");
        size_t i = n;
        while (i > 0 && buf[i - 1] != '\n')
            i--;
        if (i > 0) {
            end -= (off_t)(n - i);
            break;
        }
        end -= (off_t)n;
    }
    if (end == st.st_size)
        return HCNN_OK;
    if (ftruncate(fd, end) != 0)
        return hcnn_error_code(HCNN_EIO, "cannot cut the torn last row of the metrics file %s "
                                         "(key csv in %s): %s",
                               cfg->csv, cfg->path, strerror(errno));
    hcnn_warn("the metrics file %s ended in a torn row (%lld bytes, its write failed): cut off; "
              "the rows go on after the last whole one",
              cfg->csv, (long long)(st.st_size - end));
    return HCNN_OK;
}

/* A resumed run's line continues from its checkpoint's step: the rows its
 * earlier process wrote after that step (killed before the next checkpoint,
 * SIGKILL or a node lost) are cut off, and said so; the resumed run writes
 * them again.  They stood twice, under the same run_id.  Only the file's
 * last rows, of this line (run_id), past step (the CSV's 12th column). */
static int csv_drop_replayed_rows(const hcnn_config *cfg, int fd, const char *run_id, long step)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return hcnn_error_code(HCNN_EIO, "cannot read the metrics file %s (key csv in %s): %s",
                               cfg->csv, cfg->path, strerror(errno));
    off_t end = st.st_size; /* after the last whole row's newline (csv_drop_torn_row) */
    int dropped = 0;
    long last = -1;
    char row[4096];
    while (end > 1) {
        const size_t n = end - 1 < (off_t)sizeof row - 1 ? (size_t)(end - 1) : sizeof row - 1;
        if (pread(fd, row, n, end - 1 - (off_t)n) != (ssize_t)n)
            break;
        row[n] = '\0';
        const char *start = strrchr(row, '\n'); /* the row before ends there */
        start = start ? start + 1 : row;
        if (start == row && n == sizeof row - 1)
            break; /* longer than a row of ours */
        const size_t id_len = strlen(run_id);
        if (strncmp(start, run_id, id_len) || start[id_len] != ',')
            break;
        const char *field = start;
        for (int k = 0; k < 11 && field; k++) /* to the 12th column, step */
            if ((field = strchr(field, ',')))
                field++;
        char *after = NULL;
        const long row_step = field ? strtol(field, &after, 10) : -1;
        if (!field || after == field || *after != ',' || row_step <= step)
            break;
        end -= (off_t)(row + n - start) + 1;
        dropped++, last = last < 0 ? row_step : last;
    }
    if (!dropped)
        return HCNN_OK;
    /* kept beside it, not lost: a checkpoint copied elsewhere and resumed
     * continues the line too, while the rows' own checkpoints may live on */
    char kept[HCNN_PATH_MAX + 8];
    snprintf(kept, sizeof kept, "%s.cut", cfg->csv);
    const size_t n = (size_t)(st.st_size - end);
    char *rows = malloc(n);
    /* a regular file, synced before the csv is cut (not a FIFO: rank 0
     * would block in its open while the others wait in the first step) */
    const int kfd =
        rows ? open(kept, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0666) : -1;
    struct stat kst;
    int ok = kfd >= 0 && fstat(kfd, &kst) == 0 && S_ISREG(kst.st_mode) &&
             pread(fd, rows, n, end) == (ssize_t)n;
    for (size_t done = 0; ok && done < n;) {
        const ssize_t w = write(kfd, rows + done, n - done);
        ok = w > 0 || (w < 0 && errno == EINTR);
        done += w > 0 ? (size_t)w : 0;
    }
    ok = ok && fsync(kfd) == 0;
    ok = (kfd < 0 || close(kfd) == 0) && ok;
    free(rows);
    if (!ok) {
        hcnn_warn("the metrics file %s has %d row%s of run %s past its checkpoint's step %ld: "
                  "left as they are (they could not be kept in %s)",
                  cfg->csv, dropped, dropped > 1 ? "s" : "", run_id, step, kept);
        return HCNN_OK;
    }
    if (ftruncate(fd, end) != 0)
        return hcnn_error_code(HCNN_EIO, "cannot cut the metrics file %s (key csv in %s): %s",
                               cfg->csv, cfg->path, strerror(errno));
    hcnn_warn("the metrics file %s had %d row%s of run %s past its checkpoint's step %ld (up to "
              "step %ld, written before the run stopped without a checkpoint): moved to %s, the "
              "run goes on from that step",
              cfg->csv, dropped, dropped > 1 ? "s" : "", run_id, step, last, kept);
    return HCNN_OK;
}

/* A new metrics file: emptied in place (the link, the owner, the mode
 * stay) and given its header, synced. */
static int csv_start(const hcnn_config *cfg, int fd)
{
    static const char header[] = CSV_HEADER "\n";
    size_t done = 0;
    int ok = ftruncate(fd, 0) == 0;
    while (ok && done < sizeof header - 1) {
        const ssize_t w = write(fd, header + done, sizeof header - 1 - done);
        if (w == 0)
            errno = ENOSPC; /* no progress: the disk is full */
        ok = w > 0 || (w < 0 && errno == EINTR);
        done += w > 0 ? (size_t)w : 0;
    }
    if (!ok || fsync(fd) != 0)
        return hcnn_error_code(HCNN_EIO, "cannot write the metrics file %s (key csv in %s): %s",
                               cfg->csv, cfg->path, strerror(errno));
    return HCNN_OK;
}

/* The configuration beside the csv (<csv minus .csv>.config.yaml), with
 * blas_kernels naming the OpenBLAS kernels this run loaded (auto's or the
 * environment's choice): the file reproduces the rows bit for bit. */
static int csv_write_config(const hcnn_config *cfg)
{
    char cfgpath[HCNN_PATH_MAX + 16];
    snprintf(cfgpath, sizeof cfgpath, "%s", cfg->csv);
    char *dot = strrchr(cfgpath, '.');
    if (dot && !strchr(dot, '/'))
        *dot = '\0';
    strncat(cfgpath, ".config.yaml", sizeof cfgpath - strlen(cfgpath) - 1);
    hcnn_config *copy = hcnn_alloc(sizeof *copy, "the run's configuration");
    if (!copy)
        return HCNN_ENOMEM;
    *copy = *cfg;
    if (hcnn_blas_selectable() && hcnn_blas_kernels()[0])
        snprintf(copy->blas_kernels, sizeof copy->blas_kernels, "%s", hcnn_blas_kernels());
    const int rc = hcnn_config_write(copy, cfgpath);
    hcnn_free(copy);
    return rc;
}

/* The per-epoch metrics file (rank 0), and the configuration beside it so
 * that any row can be reproduced.  Written through: a symbolic link stays
 * a link and its target gets the rows; what is not a regular file is
 * refused before anything is written beside it.  A new run starts the file
 * with its header; a resumed run appends to the file it continues. */
int hcnn_report_csv_open(hcnn_run *r, int append)
{
    const hcnn_config *cfg = r->cfg;
    if (!cfg->csv[0] || !run_is_root(r))
        return HCNN_OK;
    int fd = -1;
    int rc = hcnn_report_csv_check(cfg);
    char what[HCNN_PATH_MAX + 64];
    snprintf(what, sizeof what, "the directory of key csv in %s", cfg->path);
    if (!rc)
        rc = hcnn_mkdir_parent(cfg->csv, what);
    if (!rc)
        rc = csv_open_through(cfg, &fd);
    if (!rc)
        rc = csv_write_config(cfg);
    const int appending = !rc && append && csv_has_header(fd);
    if (appending)
        rc = csv_drop_torn_row(cfg, fd);
    if (appending && !rc)
        rc = csv_drop_replayed_rows(cfg, fd, r->run_id, r->step);
    else if (!rc)
        rc = csv_start(cfg, fd);
    if (!rc && !(r->csv = fdopen(fd, "a")))
        rc = hcnn_error_code(HCNN_EIO, "cannot open the metrics file %s (key csv in %s): %s",
                             cfg->csv, cfg->path, strerror(errno));
    if (rc && fd >= 0)
        close(fd);
    return rc;
}

int hcnn_report_reduce_epoch(hcnn_run *r, epoch_stats *st)
{
    double sums[4] = {st->loss_sum, st->correct, st->seen, st->trained};
    double t[4] = {st->compute_s, st->comm_wait_s, st->data_wait_s, st->bubble_s};
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss = (double)ru.ru_maxrss / 1024.0;
    for (int k = 0; k < 4; k++)
        st->lo[k] = st->hi[k] = st->mean[k] = t[k];
    st->peak_rss_mb = rss;
    if (r->comm->size == 1)
        return HCNN_OK;
    MPI_Comm w = r->comm->world;
    HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, sums, 4, MPI_DOUBLE, MPI_SUM, w));
    HCNN_MPI(MPI_Allreduce(t, st->lo, 4, MPI_DOUBLE, MPI_MIN, w));
    HCNN_MPI(MPI_Allreduce(t, st->hi, 4, MPI_DOUBLE, MPI_MAX, w));
    HCNN_MPI(MPI_Allreduce(t, st->mean, 4, MPI_DOUBLE, MPI_SUM, w));
    HCNN_MPI(MPI_Allreduce(&rss, &st->peak_rss_mb, 1, MPI_DOUBLE, MPI_MAX, w));
    st->loss_sum = sums[0], st->correct = sums[1], st->seen = sums[2], st->trained = sums[3];
    for (int k = 0; k < 4; k++)
        st->mean[k] /= r->comm->size;
    st->compute_s = st->mean[0], st->comm_wait_s = st->mean[1];
    st->data_wait_s = st->mean[2], st->bubble_s = st->mean[3];
    return HCNN_OK;
}

/* The epoch's csv row on rank 0: 0, or the errno of a failed write */
static int csv_row(hcnn_run *r, int epoch, const epoch_stats *st, double ips, double tl, double ta,
                   double hidden)
{
    char ts[32];
    time_t now = time(NULL);
    struct tm tmv;
    gmtime_r(&now, &tmv);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    const int replicas = r->strat.ngroups, stages = r->comm->size / replicas;
    errno = 0;
    int bad = fprintf(r->csv,
                      "%s,%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%ld,%.6g,%.6f,%.6f,%.6f,%.6f,%.2f,%.4f,"
                      "%.4f",
                      r->run_id, HCNN_GIT_COMMIT, ts, hcnn_strategy_name(r->cfg->strategy),
                      r->comm->size, stages, replicas, r->threads, r->cfg->batch_size,
                      r->strat.passes, epoch + 1, r->step, st->lr, tl, ta, st->test_loss,
                      st->test_acc, ips, st->train_s, st->eval_s) < 0;
    for (int k = 0; k < 4; k++)
        bad |= fprintf(r->csv, ",%.4f,%.4f,%.4f", st->mean[k], st->lo[k], st->hi[k]) < 0;
    bad |= fprintf(r->csv, ",%.4f,%.1f\n", hidden, st->peak_rss_mb) < 0;
    /* on the disk, not in a buffer: the row survives a crash of the job */
    bad |= fflush(r->csv) != 0 || ferror(r->csv) || fsync(fileno(r->csv)) != 0;
    return bad ? (errno ? errno : EIO) : 0;
}

int hcnn_report_epoch(hcnn_run *r, int epoch, const epoch_stats *st)
{
    int failed = 0; /* errno of the row's write on rank 0 */
    if (run_is_root(r)) {
        const double ips = st->train_s > 0 ? st->trained / st->train_s : 0.0;
        const double tl = st->seen ? st->loss_sum / st->seen : 0.0;
        const double ta = st->seen ? st->correct / st->seen : 0.0;
        /* share of the allreduce hidden behind backward: 1 - blocked / cost */
        double hidden = 0.0;
        if (r->strat.sync && r->strat.allreduce_s > 0 && st->steps > 0) {
            hidden = 1.0 - (st->comm_wait_s / st->steps) / r->strat.allreduce_s;
            hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
        }
        if (!r->quiet)
            printf("epoch=%d step=%ld train_loss=%.4f train_acc=%.4f test_loss=%.4f test_acc=%.4f "
               "images_per_s=%.1f epoch_time_s=%.3f data_wait_s=%.3f eval_time_s=%.3f",
               epoch + 1, r->step, tl, ta, st->test_loss, st->test_acc, ips, st->train_s,
               st->data_wait_s, st->eval_s);
        if (r->comm->size > 1 && !r->quiet)
            printf(" compute_s=%.3f comm_wait_s=%.3f comm_wait_share=%.3f allreduce_s=%.4f "
                   "allreduce_hidden=%.3f",
                   st->compute_s, st->comm_wait_s,
                   st->train_s > 0 ? st->comm_wait_s / st->train_s : 0.0, r->strat.allreduce_s,
                   hidden);
        if (!r->quiet)
            printf("\n");
        fflush(stdout);
        if (r->csv)
            failed = csv_row(r, epoch, st, ips, tl, ta, hidden);
    }
    /* every rank learns it: the run stops together, as after a failed
     * checkpoint (a metrics file that loses its rows silently is a lost
     * record; the run once exited 0 with its csv cut mid-row) */
    if (r->comm->size > 1) {
        hcnn_watch_context("the agreement of epoch %d's metrics row", epoch + 1);
        HCNN_MPI(MPI_Bcast(&failed, 1, MPI_INT, 0, r->comm->world));
        hcnn_watch_context(NULL);
    }
    if (!failed)
        return HCNN_OK;
    if (run_is_root(r))
        hcnn_error("the metrics file %s (key csv in %s) could not be written at epoch %d: %s; "
                   "stopping with a checkpoint of this epoch (exit status 1): make room and "
                   "resume with --resume latest (a torn last row is cut off; epoch %d's row "
                   "stays missing, its figures are on the epoch=%d line above)",
                   r->cfg->csv, r->cfg->path, epoch + 1, strerror(failed), epoch + 1, epoch + 1);
    r->csv_failed = 1;
    return HCNN_OK;
}

static int tell_caller(hcnn_run *r, const hcnn_progress *p)
{
    const hcnn_run_opts *o = r->opts;
    if (!o || !o->progress)
        return 0;
    const int stop = o->progress(o->progress_arg, p);
    if (stop && o->stop_request)
        *o->stop_request = 1;
    return stop;
}

void hcnn_report_step_to_caller(hcnn_run *r, int epoch, int batch, int nbatches,
                                const epoch_stats *st, double t0)
{
    if (!r->opts || !r->opts->progress)
        return;
    const double el = hcnn_now() - t0;
    hcnn_progress p = {.kind = HCNN_PROGRESS_STEP, .epoch = epoch + 1, .epochs = r->cfg->epochs,
                       .batch = batch, .batches = nbatches, .step = r->step, .lr = st->lr,
                       .train_loss = st->seen ? st->loss_sum / st->seen : 0.0,
                       .train_acc = st->seen ? st->correct / st->seen : 0.0,
                       .images_per_s = el > 0 ? st->seen * r->comm->size / el : 0.0};
    tell_caller(r, &p);
}

void hcnn_report_epoch_to_caller(hcnn_run *r, int epoch, int nbatches, const epoch_stats *st)
{
    if (!r->opts || !r->opts->progress)
        return;
    /* the figures of the epoch line and CSV row (hcnn_report_epoch) */
    hcnn_progress p = {.kind = HCNN_PROGRESS_EPOCH, .epoch = epoch + 1, .epochs = r->cfg->epochs,
                       .batch = nbatches, .batches = nbatches, .step = r->step, .lr = st->lr,
                       .train_loss = st->seen ? st->loss_sum / st->seen : 0.0,
                       .train_acc = st->seen ? st->correct / st->seen : 0.0,
                       .test_loss = st->test_loss, .test_acc = st->test_acc,
                       .images_per_s = st->train_s > 0 ? st->trained / st->train_s : 0.0,
                       .epoch_time_s = st->train_s, .data_wait_s = st->data_wait_s,
                       .eval_time_s = st->eval_s};
    tell_caller(r, &p);
}
