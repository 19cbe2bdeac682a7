/* hcnn command line: train, eval, --help. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "hcnn/blas.h"
#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/train.h"
#include "hcnn/diff.h"

#define MAX_SETS 256

static const char *USAGE_MAIN =
    "usage: hcnn <command> [options]\n"
    "\n"
    "A hybrid MPI+OpenMP trainer for convolutional networks.\n"
    "\n"
    "commands:\n"
    "  train   train a model as configured:  hcnn train --config FILE [--set key=value ...]\n"
    "  eval    evaluate a checkpoint:        hcnn eval --config FILE --checkpoint FILE\n"
    "  diff    compare two checkpoints:      hcnn diff A B [--tol X]\n"
    "\n"
    "options:\n"
    "  -h, --help     this help; 'hcnn <command> --help' for a command's options\n"
    "  -V, --version  print the version\n"
    "\n"
    "exit status: 0 success, 1 run-time failure (data, numerics, I/O), 2 bad command line or\n"
    "configuration.  See README.md and docs/config-reference.md.\n";

static const char *USAGE_TRAIN =
    "usage: hcnn train --config FILE [--set key=value ...]\n"
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
    "  -q, --quiet          do not print the configuration at start\n"
    "  -h, --help           this help\n";

static const char *USAGE_DIFF =
    "usage: hcnn diff A B [--tol X]\n"
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
    "  -t, --tol X   relative tolerance\n"
    "  -h, --help    this help\n";

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
    const char *files[2];
    int nfiles;
    double tol;
    const char *sets[MAX_SETS];
    int nset;
    int quiet;
    int help;
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

static int parse(int argc, char **argv, cli *c, const char *usage)
{
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            c->help = 1;
        } else if (!strcmp(c->command, "train") && (!strcmp(a, "-q") || !strcmp(a, "--quiet"))) {
            c->quiet = 1;
        } else if (strcmp(c->command, "diff") && is_opt(a, "--config", "-c")) {
            if (!(v = opt_value(argc, argv, &i, "--config", "-c")))
                return usage_error(usage, "option %s needs a file name", a);
            c->config = v;
        } else if (is_opt(a, "--checkpoint", "-k") && !strcmp(c->command, "eval")) {
            if (!(v = opt_value(argc, argv, &i, "--checkpoint", "-k")))
                return usage_error(usage, "option %s needs a file name", a);
            c->checkpoint = v;
        } else if (!strcmp(c->command, "diff") && is_opt(a, "--tol", "-t")) {
            char *end;
            if (!(v = opt_value(argc, argv, &i, "--tol", "-t")))
                return usage_error(usage, "option %s needs a number", a);
            c->tol = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || !(c->tol >= 0))
                return usage_error(usage, "--tol: expected a number >= 0, got '%s'", v);
        } else if (!strcmp(c->command, "diff") && a[0] != '-') {
            if (c->nfiles >= 2)
                return usage_error(usage, "unexpected argument '%s' (diff takes two files)", a);
            c->files[c->nfiles++] = a;
        } else if (strcmp(c->command, "diff") && is_opt(a, "--set", "-s")) {
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
        MPI_Bcast(&rc, 1, MPI_INT, 0, comm->world);
        if (!rc)
            MPI_Bcast(cfg, (int)sizeof *cfg, MPI_BYTE, 0, comm->world);
    }
    return rc;
}

static int exit_status(int rc) { return rc == HCNN_OK ? 0 : rc == HCNN_EINVAL ? 2 : 1; }

int main(int argc, char **argv)
{
    hcnn_blas_select_kernels(argv);
    if (argc < 2)
        return usage_error(USAGE_MAIN, "%s", "missing command");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(USAGE_MAIN, stdout);
        return 0;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        printf("hcnn %s\n", PACKAGE_VERSION);
        return 0;
    }
    const char *usage;
    if (!strcmp(cmd, "train"))
        usage = USAGE_TRAIN;
    else if (!strcmp(cmd, "eval"))
        usage = USAGE_EVAL;
    else if (!strcmp(cmd, "diff"))
        usage = USAGE_DIFF;
    else
        return usage_error(USAGE_MAIN, "unknown command '%s'", cmd);

    cli c = {.command = cmd};
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
        return hcnn_diff_main(c.files[0], c.files[1], c.tol);
    }
    if (!c.config)
        return usage_error(usage, "%s", "missing --config FILE");
    if (!strcmp(cmd, "eval") && !c.checkpoint)
        return usage_error(usage, "%s", "missing --checkpoint FILE");

    hcnn_comm comm;
    if (hcnn_comm_init(&comm, &argc, &argv))
        return 1;
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        HCNN_ABORT(&comm, HCNN_ENOMEM, "cannot allocate the configuration");
    rc = load_config(cfg, &c, &comm);
    if (!rc)
        rc = hcnn_check_layout(cfg, &comm);
    if (rc) { /* every rank knows: a clean exit, reported once by rank 0 */
        free(cfg);
        hcnn_comm_finalize(&comm);
        return rc == HCNN_EIO ? 1 : 2;
    }
    if (!strcmp(cmd, "train")) {
        if (!c.quiet && comm.rank == 0) {
            printf("# configuration (%s, after overrides)\n", c.config);
            hcnn_config_print(cfg, stdout);
            fflush(stdout);
        }
        rc = hcnn_train(cfg, &comm);
    } else {
        rc = hcnn_evaluate(cfg, &comm, c.checkpoint);
    }
    free(cfg);
    /* a failure on one rank may leave the others in a collective: end the job */
    if (rc && comm.size > 1)
        HCNN_ABORT(&comm, exit_status(rc), "this rank failed (error code %d, cause above); "
                                           "ending all ranks",
                   rc);
    hcnn_comm_finalize(&comm);
    return exit_status(rc);
}
