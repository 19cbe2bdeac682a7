/* Sessions (include/hcnn/hcnn.h): a configuration opened by a process,
 * and the collective calls that run it: MPI started the first time, rank
 * 0's configuration given to every rank, the stall watchdog around each
 * run.  The hcnn program's train, eval and bench are these calls
 * (src/cli/run.c). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "hcnn/blas.h"
#include "hcnn/markers.h"
#include "hcnn/train.h"
#include "hcnn/watchdog.h"
#include "api.h"

/* Whether hcnn initialised MPI in this process (hcnn_finalize ends it
 * then, and only then): process-wide like MPI's own state. */
static int mpi_ours;
/* The exit status of this process's last failed hcnn_session_open (0:
 * none): in a job of several ranks, hcnn_finalize joins it with the other
 * ranks' start of MPI when this one never started it, so that they leave
 * instead of waiting for this rank (hcnn_comm_join_failed). */
static int open_failed_status;
/* Held while a session starts MPI: two threads' first collective calls
 * (one session each) both found MPI not initialised and both called
 * MPI_Init_thread, which ended the process. */
static pthread_mutex_t mpi_start = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int holding_mpi_start; /* let go by a fatal error caught meanwhile */

static void mpi_start_lock(int lock)
{
    if (lock)
        pthread_mutex_lock(&mpi_start);
    else if (holding_mpi_start)
        pthread_mutex_unlock(&mpi_start);
    holding_mpi_start = lock;
}

int hcnn_api_version(void) { return HCNN_API_VERSION; }

const char *hcnn_version(void) { return PACKAGE_VERSION; }

/* a fatal error caught in a call on s (hcnn_catch_fatal): s is unusable,
 * and the stall watchdog of its run, left running, is stopped (it would
 * end the process when the run's heartbeat stops) */
#define FAIL_SESSION                                                                              \
    (s ? (void)(s->failed = 1) : (void)0, hcnn_watchdog_stop(), mpi_start_lock(0))

static int session_open_call(hcnn_session **out, const char *config_path, const char *const *sets,
                             int nsets)
{
    hcnn_session *s = NULL;
    if (!out)
        return hcnn_error("hcnn_session_open: out is NULL");
    *out = NULL;
    if (!config_path)
        return hcnn_error("hcnn_session_open: config_path is NULL (expected a YAML file)");
    if (nsets < 0 || (nsets > 0 && !sets))
        return hcnn_error("hcnn_session_open: %d overrides at %p (expected nsets >= 0 "
                                  "and an array of that many \"key=value\" strings)",
                                  nsets, (const void *)sets);
    for (int i = 0; i < nsets; i++)
        if (!sets[i])
            return hcnn_error("hcnn_session_open: override %d is NULL", i);
    s = calloc(1, sizeof *s);
    if (!s || !(s->cfg = malloc(sizeof *s->cfg))) {
        free(s);
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate a session");
    }
    int rc = hcnn_config_load(s->cfg, config_path, sets, nsets);
    if (!rc)
        rc = hcnn_check_precision(s->cfg);
    if (!rc)
        rc = hcnn_blas_choose_in_process(s->cfg);
    if (rc) {
        free(s->cfg);
        free(s);
        open_failed_status = rc == HCNN_STOPPED ? 75 : rc == HCNN_EINVAL ? 2 : 1;
        return rc;
    }
    *out = s;
    return HCNN_OK;
}

int hcnn_session_open(hcnn_session **out, const char *config_path, const char *const *sets,
                      int nsets)
{
    API_BEGIN((void)0);
    return API_END(session_open_call(out, config_path, sets, nsets));
}

void hcnn_session_close(hcnn_session *s)
{
    if (!s)
        return;
    if (s->has_comm && !s->failed) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin)
            MPI_Comm_free(&s->comm.world);
    }
    free(s->cfg);
    free(s);
}

int hcnn_session_rank(const hcnn_session *s)
{
    if (s && s->has_comm)
        return s->comm.rank;
    return hcnn_blas_env_rank(); /* the launcher's, before MPI (as the size) */
}

int hcnn_session_size(const hcnn_session *s)
{
    if (s && s->has_comm)
        return s->comm.size;
    return hcnn_blas_env_world(); /* the launcher's, before MPI */
}

size_t hcnn_session_config_text(const hcnn_session *s, char *buf, size_t cap)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = s ? open_memstream(&text, &len) : NULL;
    if (!f)
        return 0;
    hcnn_config_print(s->cfg, f);
    fclose(f);
    if (buf && cap)
        snprintf(buf, cap, "%s", text ? text : "");
    free(text);
    return len;
}

void hcnn_session_request_stop(hcnn_session *s)
{
    if (s)
        s->stop = 1;
}

void hcnn_finalize(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (mpi_ours && init && !fin)
        hcnn_mpi_finalize();
    if (!init && open_failed_status && hcnn_blas_env_world() > 1) {
        hcnn_comm_join_failed(open_failed_status);
        hcnn_comm_join_done();
    }
    mpi_ours = 0;
    open_failed_status = 0;
}

/* The collective calls' start: MPI (the first time; hcnn's own duplicate
 * of MPI_COMM_WORLD, so that a caller's messages on the world, mpi4py's,
 * never match hcnn's), rank 0's configuration on every rank, the checks
 * that depend on the ranks.  A failure here is known to every rank: each
 * returns it (rank 0 said why). */
static int session_collective(hcnn_session *s)
{
    if (s->failed)
        return hcnn_error("this session failed earlier (a fatal error); open a new one");
    if (!s->has_comm) {
        int argc = 0;
        char **argv = NULL;
        mpi_start_lock(1);
        int rc = hcnn_comm_init(&s->comm, &argc, &argv);
        mpi_ours |= !rc && s->comm.initialized;
        mpi_start_lock(0);
        if (rc)
            return rc;
        s->comm.initialized = 0; /* finalised by hcnn_finalize, not per session */
        MPI_Comm world;
        HCNN_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &world));
        HCNN_MPI(MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN));
        s->comm.world = world;
        s->has_comm = 1;
    }
    /* every rank runs exactly rank 0's configuration (plain data) */
    if (s->comm.size > 1)
        HCNN_MPI(MPI_Bcast(s->cfg, (int)sizeof *s->cfg, MPI_BYTE, 0, s->comm.world));
    return hcnn_check_layout(s->cfg, &s->comm);
}

/* What the three runs share around them: the stall watchdog and LIKWID's
 * markers.  A failure on one rank may leave the others in a collective: it
 * ends the job (the fatal path), as `hcnn train` always did, but for the
 * outcomes every rank agreed on. */
typedef int (*session_run_fn)(hcnn_session *s, hcnn_run_opts *o);

static int session_run(hcnn_session *s, hcnn_run_opts *o, session_run_fn run)
{
    int rc = session_collective(s);
    if (rc)
        return rc;
    HCNN_MARKER_INIT();
    if ((rc = hcnn_watchdog_start(&s->comm, s->cfg->stall_timeout_s, s->cfg->checkpoint_dir)) !=
        HCNN_OK)
        HCNN_FATAL(rc, "cannot start the stall watchdog");
    rc = run(s, o);
    hcnn_watchdog_stop();
    HCNN_MARKER_CLOSE();
    if (rc && rc != HCNN_STOPPED && rc != HCNN_EAGREED && s->comm.size > 1)
        HCNN_FATAL(rc == HCNN_EINVAL ? 2 : 1,
                   "this rank failed (error code %d, cause above); ending all ranks", rc);
    return rc;
}

static int run_train(hcnn_session *s, hcnn_run_opts *o) { return hcnn_train(s->cfg, &s->comm, o); }

static int run_evaluate(hcnn_session *s, hcnn_run_opts *o)
{
    return hcnn_evaluate(s->cfg, &s->comm, o->resume, o);
}

static int run_bench(hcnn_session *s, hcnn_run_opts *o) { return hcnn_bench(s->cfg, &s->comm, o); }

static int session_train_call(hcnn_session *s, const hcnn_train_options *opt)
{
    if (!s)
        return hcnn_error("hcnn_session_train: the session is NULL");
    hcnn_train_options none = {0};
    if (!opt)
        opt = &none;
    s->stop = 0;
    hcnn_run_opts o = {.resume = opt->resume, .profile = opt->profile, .quiet = opt->quiet,
                       .progress = opt->progress, .progress_arg = opt->progress_arg,
                       .stop_request = &s->stop};
    return session_run(s, &o, run_train);
}

int hcnn_session_train(hcnn_session *s, const hcnn_train_options *opt)
{
    API_BEGIN(FAIL_SESSION);
    return API_END(session_train_call(s, opt));
}

static int session_evaluate_call(hcnn_session *s, const char *checkpoint, int quiet,
                                 double *test_loss, double *test_acc)
{
    if (!s || !checkpoint)
        return hcnn_error("hcnn_session_evaluate: %s is NULL",
                                  s ? "the checkpoint path" : "the session");
    hcnn_run_opts o = {.resume = checkpoint, .quiet = quiet};
    const int rc = session_run(s, &o, run_evaluate);
    if (!rc && test_loss)
        *test_loss = o.test_loss;
    if (!rc && test_acc)
        *test_acc = o.test_acc;
    return rc;
}

int hcnn_session_evaluate(hcnn_session *s, const char *checkpoint, int quiet, double *test_loss,
                          double *test_acc)
{
    API_BEGIN(FAIL_SESSION);
    return API_END(session_evaluate_call(s, checkpoint, quiet, test_loss, test_acc));
}

static int session_bench_call(hcnn_session *s, int warmup, int repeats, int steps, int quiet,
                              double *images_per_s)
{
    if (!s)
        return hcnn_error("hcnn_session_bench: the session is NULL");
    if (warmup < 0 || repeats < 1 || steps < 1)
        return hcnn_error("hcnn_session_bench: warmup %d, repeats %d, steps %d (expected "
                                  "warmup >= 0, repeats >= 1, steps >= 1)",
                                  warmup, repeats, steps);
    hcnn_run_opts o = {.quiet = quiet, .warmup = warmup, .repeats = repeats, .steps = steps};
    const int rc = session_run(s, &o, run_bench);
    if (!rc && images_per_s)
        *images_per_s = o.images_per_s;
    return rc;
}

int hcnn_session_bench(hcnn_session *s, int warmup, int repeats, int steps, int quiet,
                       double *images_per_s)
{
    API_BEGIN(FAIL_SESSION);
    return API_END(session_bench_call(s, warmup, repeats, steps, quiet, images_per_s));
}
