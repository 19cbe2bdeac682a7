/* The option helpers the sub-commands' parsers share (src/cli/cli.h). */
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "cli.h"

int hcnn_cli_usage_error(const hcnn_cli_command *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "hcnn: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n");
    if (cmd) /* without one, the caller prints the usage (src/cli/main.c) */
        fputs(cmd->help, stderr);
    return 2;
}

int hcnn_cli_is_help(const char *a)
{
    return !strcmp(a, "-h") || !strcmp(a, "--help");
}

int hcnn_cli_help(const hcnn_cli_command *cmd)
{
    fputs(cmd->help, stdout);
    return 0;
}

const char *hcnn_cli_opt_value(int argc, char **argv, int *i, const char *lng, const char *shrt)
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

int hcnn_cli_is_opt(const char *a, const char *lng, const char *shrt)
{
    size_t n = strlen(lng);
    return !strcmp(a, lng) || (shrt && !strcmp(a, shrt)) || (!strncmp(a, lng, n) && a[n] == '=');
}

/* Refused when empty (an unset shell variable in a job script: --resume
 * "$CKPT" once started a new run silently) or given before (the last
 * --config used to win silently). */
int hcnn_cli_take_once(int argc, char **argv, int *i, const char *lng, const char *shrt,
                       const char **slot, const char *what, const hcnn_cli_command *cmd)
{
    const char *a = argv[*i];
    const char *v = hcnn_cli_opt_value(argc, argv, i, lng, shrt);
    char msg[512];
    if (!v)
        snprintf(msg, sizeof msg, "option %s needs %s", a, what);
    else if (!v[0])
        snprintf(msg, sizeof msg, "option %s is empty: it needs %s (an unset variable in a job "
                                  "script?)",
                 lng, what);
    else if (*slot)
        snprintf(msg, sizeof msg, "option %s given twice ('%.200s', then '%.200s'): give it once",
                 lng, *slot, v);
    else {
        *slot = v;
        return 0;
    }
    return hcnn_cli_usage_error(cmd, "%s", msg);
}

int hcnn_cli_take_set(int argc, char **argv, int *i, const char **sets, int *nset,
                      const hcnn_cli_command *cmd)
{
    const char *a = argv[*i];
    const char *v = hcnn_cli_opt_value(argc, argv, i, "--set", "-s");
    if (!v)
        return hcnn_cli_usage_error(cmd, "option %s needs KEY=VALUE", a);
    if (*nset >= HCNN_CLI_MAX_SETS)
        return hcnn_cli_usage_error(cmd, "too many --set options (at most 256): %s", v);
    sets[(*nset)++] = v;
    return 0;
}

int hcnn_cli_exit_status(int rc)
{
    return rc == HCNN_OK ? 0 : rc == HCNN_EINVAL ? 2 : rc == HCNN_STOPPED ? 75 : 1;
}
