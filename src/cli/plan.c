/* hcnn plan's command line: its options parsed into hcnn_plan_args
 * (include/hcnn/plan.h) for src/plan/plan.c, which measures, prices and
 * reports (its row and --help text: src/cli/commands.c).  Unlike the other
 * commands, plan takes "--opt VALUE" only, not "--opt=VALUE". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/model_spec.h"
#include "hcnn/node.h"
#include "hcnn/plan.h"
#include "cli.h"

/* "1,2,4": at most cap integers in lo..hi into out */
static int parse_list(const char *opt, const char *v, int *out, int *count, int cap, int lo,
                      int hi)
{
    int n = 0;
    const char *p = v;
    while (*p) {
        char *end;
        const long k = strtol(p, &end, 10);
        if (end == p || k < lo || k > hi || (*end && (*end != ',' || !end[1]))) /* "1," too */
            return hcnn_error_code(HCNN_EINVAL, "%s '%s': expected a comma-separated list of "
                                                "integers in %d..%d",
                                   opt, v, lo, hi);
        if (n == cap)
            return hcnn_error_code(HCNN_EINVAL, "%s '%s': at most %d values", opt, v, cap);
        out[n++] = (int)k;
        p = *end ? end + 1 : end;
    }
    if (!n)
        return hcnn_error_code(HCNN_EINVAL, "%s: empty list", opt);
    *count = n;
    return HCNN_OK;
}

/* --threads, --measure-threads, --microbatches, --batch, --host-cores,
 * --steps: the slot of a's value and its largest value, or NULL */
static int *count_option(hcnn_plan_args *o, const char *a, long *hi)
{
    *hi = !strcmp(a, "--steps") ? 64 : !strcmp(a, "--batch") ? (1 << 24) : 1024;
    return !strcmp(a, "--threads")           ? &o->threads
           : !strcmp(a, "--measure-threads") ? &o->measure_threads
           : !strcmp(a, "--microbatches")    ? &o->microbatches
           : !strcmp(a, "--batch")           ? &o->batch
           : !strcmp(a, "--host-cores")      ? &o->host_cores
           : !strcmp(a, "--steps")           ? &o->steps
                                             : NULL;
}

/* hcnn_plan_args.before_mpi: the launcher's ranks but 0 held what they
 * said since the start (every rank reads the same configuration); a
 * failure of some ranks ends all of them, said once */
static void plan_before_mpi(void *ctx, int status)
{
    hcnn_cli_held_stderr *held = ctx;
    if (status)
        hcnn_cli_failed_before_mpi(held, status, status);
    else
        hcnn_cli_release_stderr(held, 0);
}

int hcnn_cli_plan(int argc, char **argv, const hcnn_cli_command *self)
{
    const char *sets[HCNN_CLI_MAX_SETS];
    hcnn_plan_args o = {.network = "ib-hdr", .node_spec = HCNN_NODE_DEFAULT, .steps = 5,
                        .weak = 1, .strong = 1, .out = "", .sets = sets};
    int nodes_given = 0, stages_given = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *slot;
        long hi;
        if (hcnn_cli_is_help(a))
            return hcnn_cli_help(self);
        if (!strcmp(a, "--no-plots")) {
            o.no_plots = 1;
            continue;
        }
        const int known = !strcmp(a, "-c") || !strcmp(a, "--config") || !strcmp(a, "-s") ||
                          !strcmp(a, "--set") || !strcmp(a, "--nodes") ||
                          !strcmp(a, "--stages") || !strcmp(a, "--network") ||
                          !strcmp(a, "--node") || count_option(&o, a, &hi) ||
                          !strcmp(a, "--scaling") || !strcmp(a, "-o") || !strcmp(a, "--out") ||
                          !strcmp(a, "--calibrate-network");
        if (!known) {
            fprintf(stderr, "hcnn: unknown option '%s' for plan\n\n%s", a, self->help);
            return 2;
        }
        /* every other option takes a value, never empty (an unset variable
         * in a job script) */
        if (!v || !v[0]) {
            fprintf(stderr, "hcnn: option %s %s\n\n%s", a,
                    v ? "is empty (an unset variable in a job script?)" : "needs a value",
                    self->help);
            return 2;
        }
        i++;
        int rc = HCNN_OK;
        if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
            if (o.config) {
                fprintf(stderr, "hcnn: option --config given twice ('%s', then '%s'): give it "
                                "once\n", o.config, v);
                return 2;
            }
            o.config = v;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--set")) {
            if (o.nset == HCNN_CLI_MAX_SETS) {
                fprintf(stderr, "hcnn: at most 256 --set options\n");
                return 2;
            }
            sets[o.nset++] = v;
        } else if (!strcmp(a, "--nodes")) {
            rc = parse_list(a, v, o.nodes, &o.nnodes, HCNN_PLAN_MAX_NODES, 1, 65536);
            nodes_given = 1;
        } else if (!strcmp(a, "--stages")) {
            rc = parse_list(a, v, o.stages, &o.nstages, HCNN_PLAN_MAX_STAGE_CHOICES, 2,
                            HCNN_MAX_BLOCKS);
            stages_given = 1;
        } else if (!strcmp(a, "--network")) {
            o.network = v;
        } else if (!strcmp(a, "--node")) {
            o.node_spec = v;
        } else if ((slot = count_option(&o, a, &hi))) {
            char *end;
            const long k = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || k < 1 || k > hi) {
                fprintf(stderr, "hcnn: %s: expected an integer in 1..%ld, got '%s'\n", a, hi, v);
                return 2;
            }
            *slot = (int)k;
        } else if (!strcmp(a, "--scaling")) {
            o.weak = !strcmp(v, "weak") || !strcmp(v, "both");
            o.strong = !strcmp(v, "strong") || !strcmp(v, "both");
            if (!o.weak && !o.strong) {
                fprintf(stderr, "hcnn: --scaling: expected weak, strong or both, got '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            o.out = v;
        } else { /* --calibrate-network */
            o.calibrate = v;
        }
        if (rc)
            return 2;
    }
    if (!o.config && !o.calibrate) {
        fprintf(stderr, "hcnn: missing --config FILE\n\n%s", self->help);
        return 2;
    }
    if (!nodes_given) {
        const int def[] = {1, 2, 4, 8, 16, 32};
        memcpy(o.nodes, def, sizeof def);
        o.nnodes = 6;
    }
    if (!stages_given) {
        o.stages[0] = 2, o.stages[1] = 4, o.stages[2] = 8;
        o.nstages = 3;
    }
    if (!o.config) /* --calibrate-network alone: MPI at once */
        return hcnn_plan_main(&o, argv);
    hcnn_cli_held_stderr held = hcnn_cli_hold_stderr();
    o.before_mpi = plan_before_mpi;
    o.before_mpi_ctx = &held;
    return hcnn_plan_main(&o, argv);
}
