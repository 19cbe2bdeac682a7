/* hcnn train, eval and bench: the commands that run a configuration's model
 * under MPI (their rows and --help texts: src/cli/commands.c). */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "hcnn/blas.h"
#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/markers.h"
#include "hcnn/train.h"
#include "cli.h"

/* The options of train, eval and bench (each takes its own of them). */
typedef struct run_args {
    const char *config;
    const char *checkpoint; /* eval */
    const char *resume;     /* train */
    const char *sets[HCNN_CLI_MAX_SETS];
    int nset;
    int quiet, check, profile;  /* train */
    int warmup, repeats, steps; /* bench */
    int help;
} run_args;

/* What runs on the session: hcnn_session_train, _evaluate or _bench
 * with the command line's options (the C API, include/hcnn/hcnn.h). */
typedef int (*run_fn)(hcnn_session *s, const run_args *c);

/* -h, --config and --set, which all three take: -1 when a is none of them,
 * else 0 or the exit status of a usage error. */
static int shared_option(int argc, char **argv, int *i, run_args *c, const hcnn_cli_command *self)
{
    const char *a = argv[*i];
    if (hcnn_cli_is_help(a)) {
        c->help = 1;
        return 0;
    }
    if (hcnn_cli_is_opt(a, "--config", "-c"))
        return hcnn_cli_take_once(argc, argv, i, "--config", "-c", &c->config, "a file name",
                                  self);
    if (hcnn_cli_is_opt(a, "--set", "-s"))
        return hcnn_cli_take_set(argc, argv, i, c->sets, &c->nset, self);
    return -1;
}

/* Before MPI and threads start: whether this node's CPU runs the
 * configured precision (bf16: include/hcnn/onednn.h), said by every rank
 * whose CPU does not, since the nodes of a job may differ; then what
 * MPI_Init itself depends on: the file-size limit (MPI's start-up writes
 * files; include/hcnn/train.h), then blas_kernels (include/hcnn/blas.h),
 * which may re-execute argv.  A configuration that does not load is left
 * to the ranks' load after MPI_Init, which reports it once; what the last
 * two have to say, the launcher's rank 0 says. */
static int before_mpi(const run_args *c, char **argv, int writes_checkpoints)
{
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return HCNN_ENOMEM;
    int saved = hcnn_cli_mute_stderr(1);
    int rc = hcnn_config_load(cfg, c->config, c->sets, c->nset);
    hcnn_cli_unmute_stderr(saved);
    int reexec = 0;
    if (rc == HCNN_OK && (rc = hcnn_check_precision(cfg)) != HCNN_OK) {
        free(cfg);
        return hcnn_cli_failed_before_mpi(NULL, rc, hcnn_cli_exit_status(rc)); /* said by every rank it fails on */
    }
    if (rc == HCNN_OK) {
        hcnn_cli_held_stderr held = hcnn_cli_hold_stderr();
        /* (a limit refused because MPI_Init fails under it: every rank of
         * the job has it, and leaves before MPI, rank 0 saying why) */
        if ((rc = hcnn_check_file_size_limit(cfg, writes_checkpoints)))
            hcnn_cli_release_stderr(&held, 0);
        else if ((rc = hcnn_blas_choose(cfg, hcnn_blas_env_world(), &reexec)))
            hcnn_cli_failed_before_mpi(&held, rc, hcnn_cli_exit_status(rc));
        else
            hcnn_cli_release_stderr(&held, 0);
    } else {
        rc = HCNN_OK;
    }
    free(cfg);
    if (reexec)
        hcnn_blas_reexec(argv);
    return rc;
}

/* The part the three share: the checks before MPI, the session (the
 * configuration, said once: by the launcher's rank 0), then `run`, which
 * starts MPI; returns the exit status. */
static int run_session(char **argv, const run_args *c, int writes_checkpoints, run_fn run)
{
    int rc = before_mpi(c, argv, writes_checkpoints);
    if (rc)
        return hcnn_cli_exit_status(rc);
    hcnn_session *s = NULL;
    hcnn_cli_held_stderr held = hcnn_cli_hold_stderr();
    rc = hcnn_session_open(&s, c->config, c->sets, c->nset);
    if (rc) { /* every rank leaves; the lowest failing one said why */
        const int status = rc == HCNN_EIO ? 1 : 2;
        hcnn_cli_failed_before_mpi(&held, rc, status);
        return status;
    }
    hcnn_cli_release_stderr(&held, 0);
    rc = run(s, c);
    hcnn_session_close(s);
    hcnn_finalize();
    /* every rank stopped together on these; any other failure of a rank
     * in a job of several ended the job inside the call (the fatal path) */
    return rc == HCNN_EAGREED ? 1 : hcnn_cli_exit_status(rc);
}

/* ---- train --------------------------------------------------------------- */

/* the configuration printed first: rank 0's, which every rank runs */
static int print_config(hcnn_session *s, const run_args *c)
{
    const size_t len = hcnn_session_config_text(s, NULL, 0);
    char *text = malloc(len + 1);
    if (!text)
        return HCNN_ENOMEM;
    hcnn_session_config_text(s, text, len + 1);
    printf("# configuration (%s, after overrides)\n%s", c->config, text);
    fflush(stdout);
    free(text);
    return HCNN_OK;
}

static int train_run(hcnn_session *s, const run_args *c)
{
    if (!c->quiet && hcnn_blas_env_rank() == 0 && print_config(s, c))
        return HCNN_ENOMEM;
    hcnn_train_options o = {.resume = c->resume, .profile = c->profile};
    return hcnn_session_train(s, &o);
}

int hcnn_cli_train(int argc, char **argv, const hcnn_cli_command *self)
{
    run_args c = {0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int rc = shared_option(argc, argv, &i, &c, self);
        if (rc >= 0) {
            if (rc)
                return rc;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            c.quiet = 1;
        } else if (hcnn_cli_is_opt(a, "--resume", "-r")) {
            if ((rc = hcnn_cli_take_once(argc, argv, &i, "--resume", "-r", &c.resume,
                                         "a checkpoint file, 'latest' or 'auto'", self)))
                return rc;
        } else if (!strcmp(a, "--check")) {
            c.check = 1;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--profile")) {
            c.profile = 1;
        } else {
            return hcnn_cli_usage_error(self, "unknown option '%s'", a);
        }
    }
    if (c.help)
        return hcnn_cli_help(self);
    if (!c.config)
        return hcnn_cli_usage_error(self, "%s", "missing --config FILE");
    if (c.check) { /* on the batch node before the launch: no MPI */
        hcnn_config *cfg = malloc(sizeof *cfg);
        if (!cfg)
            return 1;
        int rc = hcnn_config_load(cfg, c.config, c.sets, c.nset);
        if (!rc)
            rc = hcnn_train_check(cfg, c.resume);
        free(cfg);
        return hcnn_cli_exit_status(rc);
    }
    return run_session(argv, &c, 1, train_run);
}

/* ---- eval ---------------------------------------------------------------- */

static int eval_run(hcnn_session *s, const run_args *c)
{
    return hcnn_session_evaluate(s, c->checkpoint, 0, NULL, NULL);
}

int hcnn_cli_eval(int argc, char **argv, const hcnn_cli_command *self)
{
    run_args c = {0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int rc = shared_option(argc, argv, &i, &c, self);
        if (rc >= 0) {
            if (rc)
                return rc;
        } else if (hcnn_cli_is_opt(a, "--checkpoint", "-k")) {
            if ((rc = hcnn_cli_take_once(argc, argv, &i, "--checkpoint", "-k", &c.checkpoint,
                                         "a file name", self)))
                return rc;
        } else {
            return hcnn_cli_usage_error(self, "unknown option '%s'", a);
        }
    }
    if (c.help)
        return hcnn_cli_help(self);
    if (!c.config)
        return hcnn_cli_usage_error(self, "%s", "missing --config FILE");
    if (!c.checkpoint)
        return hcnn_cli_usage_error(self, "%s", "missing --checkpoint FILE");
    return run_session(argv, &c, 0, eval_run);
}

/* ---- bench --------------------------------------------------------------- */

static int bench_run(hcnn_session *s, const run_args *c)
{
    return hcnn_session_bench(s, c->warmup, c->repeats, c->steps, 0, NULL);
}

/* --warmup, --repeats or --steps at argv[*i] into *slot: an integer in
 * [lo, hi]; 0 or the exit status of the error */
static int bench_count(int argc, char **argv, int *i, const char *name, int lo, int hi, int *slot,
                       const hcnn_cli_command *self)
{
    const char *a = argv[*i], *v = hcnn_cli_opt_value(argc, argv, i, name, NULL);
    if (!v)
        return hcnn_cli_usage_error(self, "option %s needs a number", a);
    char *end;
    const long k = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || k < lo || k > hi) {
        fprintf(stderr, "hcnn: %s: expected an integer in [%d, %d], got '%s'\n", name, lo, hi, v);
        return 2;
    }
    *slot = (int)k;
    return 0;
}

int hcnn_cli_bench(int argc, char **argv, const hcnn_cli_command *self)
{
    run_args c = {.warmup = 3, .repeats = 5, .steps = 5};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int rc = shared_option(argc, argv, &i, &c, self);
        if (rc >= 0)
            ;
        else if (hcnn_cli_is_opt(a, "--warmup", NULL))
            rc = bench_count(argc, argv, &i, "--warmup", 0, 100000, &c.warmup, self);
        else if (hcnn_cli_is_opt(a, "--repeats", NULL))
            rc = bench_count(argc, argv, &i, "--repeats", 1, 64, &c.repeats, self);
        else if (hcnn_cli_is_opt(a, "--steps", NULL))
            rc = bench_count(argc, argv, &i, "--steps", 1, 100000, &c.steps, self);
        else
            rc = hcnn_cli_usage_error(self, "unknown option '%s'", a);
        if (rc)
            return rc;
    }
    if (c.help)
        return hcnn_cli_help(self);
    if (!c.config)
        return hcnn_cli_usage_error(self, "%s", "missing --config FILE");
    return run_session(argv, &c, 0, bench_run);
}
