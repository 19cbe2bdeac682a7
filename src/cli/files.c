/* hcnn diff, export and import: the commands on checkpoint files, without
 * MPI (their rows and --help texts: src/cli/commands.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/diff.h"
#include "hcnn/export.h"
#include "cli.h"

/* A file or directory argument a (one not starting with '-') into
 * files[*n], at most max of them: 0 or the exit status of the error. */
static int take_file(const char *a, const char **files, int *n, int max,
                     const hcnn_cli_command *self)
{
    if (*n >= max)
        return hcnn_cli_usage_error(self, "unexpected argument '%s'", a);
    if (!a[0])
        return hcnn_cli_usage_error(self, "%s", "an empty argument where a file or directory "
                                                "is expected (an unset variable in a job script?)");
    files[(*n)++] = a;
    return 0;
}

int hcnn_cli_diff(int argc, char **argv, const hcnn_cli_command *self)
{
    const char *files[2] = {NULL, NULL};
    int nfiles = 0, help = 0, model_only = 0;
    double tol = 0.0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (hcnn_cli_is_help(a)) {
            help = 1;
        } else if (hcnn_cli_is_opt(a, "--tol", "-t")) {
            const char *v = hcnn_cli_opt_value(argc, argv, &i, "--tol", "-t");
            if (!v)
                return hcnn_cli_usage_error(self, "option %s needs a number", a);
            char *end;
            tol = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || !(tol >= 0))
                return hcnn_cli_usage_error(self, "--tol: expected a number >= 0, got '%s'", v);
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model-only")) {
            model_only = 1;
        } else if (a[0] != '-') {
            rc = take_file(a, files, &nfiles, 2, self);
        } else {
            rc = hcnn_cli_usage_error(self, "unknown option '%s'", a);
        }
        if (rc)
            return rc;
    }
    if (help)
        return hcnn_cli_help(self);
    if (nfiles != 2)
        return hcnn_cli_usage_error(self, "%s", "diff needs two checkpoint files");
    return hcnn_diff_main(files[0], files[1], tol, model_only);
}

int hcnn_cli_export(int argc, char **argv, const hcnn_cli_command *self)
{
    const char *files[2] = {NULL, NULL};
    int nfiles = 0, help = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (hcnn_cli_is_help(a))
            help = 1;
        else if (a[0] != '-')
            rc = take_file(a, files, &nfiles, 2, self);
        else
            rc = hcnn_cli_usage_error(self, "unknown option '%s'", a);
        if (rc)
            return rc;
    }
    if (help)
        return hcnn_cli_help(self);
    if (nfiles != 2)
        return hcnn_cli_usage_error(self, "%s", "export needs a checkpoint and a directory");
    const int rc = hcnn_export_npy(files[0], files[1]);
    if (!rc)
        printf("exported %s to %s\n", files[0], files[1]);
    return hcnn_cli_exit_status(rc);
}

int hcnn_cli_import(int argc, char **argv, const hcnn_cli_command *self)
{
    const char *dir[1] = {NULL}, *config = NULL, *output = NULL, *sets[HCNN_CLI_MAX_SETS];
    int ndir = 0, nset = 0, help = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int rc = 0;
        if (hcnn_cli_is_help(a))
            help = 1;
        else if (hcnn_cli_is_opt(a, "--config", "-c"))
            rc = hcnn_cli_take_once(argc, argv, &i, "--config", "-c", &config, "a file name",
                                    self);
        else if (hcnn_cli_is_opt(a, "--output", "-o"))
            rc = hcnn_cli_take_once(argc, argv, &i, "--output", "-o", &output, "a file name",
                                    self);
        else if (a[0] != '-')
            rc = take_file(a, dir, &ndir, 1, self);
        else if (hcnn_cli_is_opt(a, "--set", "-s"))
            rc = hcnn_cli_take_set(argc, argv, &i, sets, &nset, self);
        else
            rc = hcnn_cli_usage_error(self, "unknown option '%s'", a);
        if (rc)
            return rc;
    }
    if (help)
        return hcnn_cli_help(self);
    if (ndir != 1 || !config || !output)
        return hcnn_cli_usage_error(self, "%s", "import needs DIR, --config FILE and -o CKPT");
    hcnn_config *cfg = malloc(sizeof *cfg);
    if (!cfg)
        return 1;
    int rc = hcnn_config_load(cfg, config, sets, nset);
    if (!rc)
        rc = hcnn_import_npy(dir[0], cfg, output);
    if (!rc)
        printf("imported %s into %s\n", dir[0], output);
    free(cfg);
    return hcnn_cli_exit_status(rc);
}
