/* hcnn's command line: the table of sub-commands (src/cli/commands.c) and
 * the option helpers their parsers share (src/cli/args.c).
 *
 * Each command is one row: its name, the line `hcnn --help` prints for it,
 * its --help text and the function that parses argv[2..] and runs it.
 * main (src/cli/main.c) finds the row by argv[1] and calls it; nothing
 * else dispatches on a command's name.  Private to the hcnn program. */
#ifndef HCNN_CLI_H
#define HCNN_CLI_H

#include <stdio.h>

#define HCNN_CLI_MAX_SETS 256 /* --set options on one command line */

typedef struct hcnn_cli_command hcnn_cli_command;

/* Parses argv[2..argc-1] (argv[1] is the command's name) and runs the
 * command; returns the process's exit status (0, 1, 2 or 75: `hcnn --help`). */
typedef int (*hcnn_cli_main_fn)(int argc, char **argv, const hcnn_cli_command *self);

struct hcnn_cli_command {
    const char *name;
    const char *summary;  /* `hcnn --help`'s line: what it does, with its colon */
    const char *synopsis; /* ... and how it is called */
    const char *help;     /* `hcnn <name> --help`, also printed after a usage error */
    hcnn_cli_main_fn main;
    int stop_signals; /* SIGTERM/SIGUSR1 checkpoint and stop it: blocked from the start */
};

/* The row named name, or NULL. */
const hcnn_cli_command *hcnn_cli_find(const char *name);
/* `hcnn --help`: the commands of the table and the global options. */
void hcnn_cli_print_usage(FILE *f);

/* "hcnn: <fmt with arg>", a blank line and cmd's help (NULL: `hcnn
 * --help`) on stderr; returns 2, the exit status of a bad command line. */
int hcnn_cli_usage_error(const hcnn_cli_command *cmd, const char *fmt, const char *arg);
/* Whether a asks for a command's help: -h or --help. */
int hcnn_cli_is_help(const char *a);
/* cmd's --help text on stdout; returns 0, the exit status of --help. */
int hcnn_cli_help(const hcnn_cli_command *cmd);
/* Whether a is the option lng or shrt (NULL: none), alone or as lng=VALUE. */
int hcnn_cli_is_opt(const char *a, const char *lng, const char *shrt);
/* The value of "--opt VALUE", "-o VALUE" or "--opt=VALUE" at argv[*i]
 * (*i moves past a separate value), or NULL when it is missing. */
const char *hcnn_cli_opt_value(int argc, char **argv, int *i, const char *lng, const char *shrt);
/* The value of an option given once into *slot; a usage error (2) when it
 * is missing, empty or given before.  what: "a file name", ... */
int hcnn_cli_take_once(int argc, char **argv, int *i, const char *lng, const char *shrt,
                       const char **slot, const char *what, const hcnn_cli_command *cmd);
/* --set KEY=VALUE into sets[*nset] (at most HCNN_CLI_MAX_SETS); 2 on an error. */
int hcnn_cli_take_set(int argc, char **argv, int *i, const char **sets, int *nset,
                      const hcnn_cli_command *cmd);
/* A library return code as the exit status: 0 HCNN_OK, 2 HCNN_EINVAL, 75
 * HCNN_STOPPED (Slurm requeues), 1 any other. */
int hcnn_cli_exit_status(int rc);

/* Before MPI starts (src/cli/before_mpi.c; the launcher's rank:
 * hcnn_blas_env_rank).  stderr to /dev/null if mute: the saved descriptor (-1: not muted), for
 * hcnn_cli_unmute_stderr */
int hcnn_cli_mute_stderr(int mute);
void hcnn_cli_unmute_stderr(int saved);
/* What the launcher's ranks but 0 say meanwhile: kept in a temporary file
 * (rank 0 says it for all), said on a failure only this rank had. */
typedef struct hcnn_cli_held_stderr {
    int saved;  /* the real stderr, -1: not held (rank 0) */
    FILE *kept; /* what was said meanwhile; NULL: muted */
} hcnn_cli_held_stderr;
hcnn_cli_held_stderr hcnn_cli_hold_stderr(void);
/* stderr back, what was kept said if say */
void hcnn_cli_release_stderr(hcnn_cli_held_stderr *h, int say);
/* A failure (rc, exit status `status`) before MPI, what it said held by h
 * (NULL: said already): in a job of several ranks, joined with the other
 * ranks' start, so that all leave; said by the lowest failing rank.
 * Returns rc. */
int hcnn_cli_failed_before_mpi(hcnn_cli_held_stderr *h, int rc, int status);

/* The commands' functions (their rows: src/cli/commands.c). */
int hcnn_cli_train(int argc, char **argv, const hcnn_cli_command *self);  /* src/cli/run.c */
int hcnn_cli_eval(int argc, char **argv, const hcnn_cli_command *self);   /* src/cli/run.c */
int hcnn_cli_bench(int argc, char **argv, const hcnn_cli_command *self);  /* src/cli/run.c */
int hcnn_cli_tune(int argc, char **argv, const hcnn_cli_command *self);   /* src/cli/tune.c */
int hcnn_cli_plan(int argc, char **argv, const hcnn_cli_command *self);   /* src/cli/plan.c */
int hcnn_cli_diff(int argc, char **argv, const hcnn_cli_command *self);   /* src/cli/files.c */
int hcnn_cli_export(int argc, char **argv, const hcnn_cli_command *self); /* src/cli/files.c */
int hcnn_cli_import(int argc, char **argv, const hcnn_cli_command *self); /* src/cli/files.c */

#endif
