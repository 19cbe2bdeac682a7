/* hcnn tune, and the measurement's children it starts (--probe,
 * src/blas/measure.c): no MPI (its row and --help: src/cli/commands.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/blas.h"
#include "hcnn/common.h"
#include "hcnn/comm.h"
#include "hcnn/config.h"
#include "hcnn/strategy.h"
#include "cli.h"

int hcnn_cli_tune(int argc, char **argv, const hcnn_cli_command *self)
{
    const char *config = NULL, *sets[HCNN_CLI_MAX_SETS];
    int nset = 0, help = 0, probe = 0, ranks = 0; /* ranks 0: from the environment */
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (hcnn_cli_is_help(a)) {
            help = 1;
        } else if (!strcmp(a, "--probe")) {
            probe = 1;
        } else if (hcnn_cli_is_opt(a, "--ranks", NULL)) {
            const char *v = hcnn_cli_opt_value(argc, argv, &i, "--ranks", NULL);
            if (!v)
                return hcnn_cli_usage_error(self, "option %s needs a number", a);
            char *end;
            const long k = strtol(v, &end, 10);
            if (*v == '\0' || *end != '\0' || k < 1 || k > 1000000)
                return hcnn_cli_usage_error(self, "--ranks: expected an integer >= 1, got '%s'",
                                            v);
            ranks = (int)k;
        } else if (hcnn_cli_is_opt(a, "--config", "-c")) {
            rc = hcnn_cli_take_once(argc, argv, &i, "--config", "-c", &config, "a file name",
                                    self);
        } else if (hcnn_cli_is_opt(a, "--set", "-s")) {
            rc = hcnn_cli_take_set(argc, argv, &i, sets, &nset, self);
        } else {
            rc = hcnn_cli_usage_error(self, "unknown option '%s'", a);
        }
        if (rc)
            return rc;
    }
    if (help)
        return hcnn_cli_help(self);
    if (!config)
        return hcnn_cli_usage_error(self, "%s", "missing --config FILE");
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return 1;
    int rc = hcnn_config_load(cfg, config, sets, nset);
    const int world = ranks > 0 ? ranks : hcnn_blas_env_world();
    /* a layout train refuses on these ranks: refused here too (data: a
     * batch smaller than the ranks was measured as 1 sample a pass).  A
     * pipeline's only for --ranks N: tune on one rank, or srun across the
     * nodes, measures its pass as hcnn_strategy_pass_samples does, for as
     * many replicas as there are.  Not in a probe: its parent checked */
    if (!rc && !probe &&
        (cfg->strategy == HCNN_STRATEGY_DATA || (ranks > 0 && cfg->strategy != HCNN_STRATEGY_SERIAL))) {
        const hcnn_comm layout = {.rank = 0, .size = world};
        rc = hcnn_strategy_ops_for(cfg->strategy)->check(cfg, &layout);
    }
    if (!rc)
        rc = probe ? hcnn_blas_probe(cfg, world) : hcnn_blas_tune(cfg, world, stdout);
    free(cfg);
    return hcnn_cli_exit_status(rc);
}
