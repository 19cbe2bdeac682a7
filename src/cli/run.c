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

/* What runs between MPI's start and its end: hcnn_train, hcnn_evaluate or
 * hcnn_bench with the command line's options. */
typedef int (*run_fn)(const hcnn_config *cfg, const hcnn_comm *comm, const run_args *c);

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

/* Rank 0 reads and validates the configuration and broadcasts it (the
 * struct is plain data), so every rank runs exactly the same configuration
 * and a bad file is reported once.  Returns HCNN_OK or the error code. */
static int load_config(hcnn_config *cfg, const run_args *c, const hcnn_comm *comm)
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
static int before_mpi(const run_args *c, char **argv, int writes_checkpoints)
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

/* The part the three share: the checks before MPI, MPI, the configuration
 * on every rank, the stall watchdog, then `run`; returns the exit status. */
static int run_under_mpi(int argc, char **argv, const run_args *c, int writes_checkpoints,
                         run_fn run)
{
    int rc = before_mpi(c, argv, writes_checkpoints);
    if (rc)
        return hcnn_cli_exit_status(rc);

    hcnn_comm comm;
    if (hcnn_comm_init(&comm, &argc, &argv))
        return 1;
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        HCNN_FATAL(HCNN_ENOMEM, "cannot allocate the configuration");
    rc = load_config(cfg, c, &comm);
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
    rc = run(cfg, &comm, c);
    free(cfg);
    hcnn_watchdog_stop();
    HCNN_MARKER_CLOSE();
    if (rc == HCNN_STOPPED || rc == HCNN_EAGREED) { /* every rank stopped together */
        hcnn_comm_finalize(&comm);
        return rc == HCNN_STOPPED ? 75 : 1;
    }
    /* a failure on one rank may leave the others in a collective: end the job */
    if (rc && comm.size > 1)
        HCNN_FATAL(hcnn_cli_exit_status(rc),
                   "this rank failed (error code %d, cause above); ending all ranks", rc);
    hcnn_comm_finalize(&comm);
    return hcnn_cli_exit_status(rc);
}

/* ---- train --------------------------------------------------------------- */

static int train_run(const hcnn_config *cfg, const hcnn_comm *comm, const run_args *c)
{
    if (!c->quiet && comm->rank == 0) {
        printf("# configuration (%s, after overrides)\n", c->config);
        hcnn_config_print(cfg, stdout);
        fflush(stdout);
    }
    hcnn_run_opts o = {.resume = c->resume, .profile = c->profile};
    return hcnn_train(cfg, comm, &o);
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
    return run_under_mpi(argc, argv, &c, 1, train_run);
}

/* ---- eval ---------------------------------------------------------------- */

static int eval_run(const hcnn_config *cfg, const hcnn_comm *comm, const run_args *c)
{
    return hcnn_evaluate(cfg, comm, c->checkpoint);
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
    return run_under_mpi(argc, argv, &c, 0, eval_run);
}

/* ---- bench --------------------------------------------------------------- */

static int bench_run(const hcnn_config *cfg, const hcnn_comm *comm, const run_args *c)
{
    hcnn_run_opts o = {.profile = 1, .warmup = c->warmup, .repeats = c->repeats, .steps = c->steps};
    return hcnn_bench(cfg, comm, &o);
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
    return run_under_mpi(argc, argv, &c, 0, bench_run);
}
