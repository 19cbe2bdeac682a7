/* What the commands that start MPI do before it (train, eval and bench:
 * src/cli/run.c; plan: src/cli/plan.c): a failure on some ranks of a job
 * made to end all of them, said once. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "hcnn/blas.h"
#include "hcnn/comm.h"
#include "cli.h"

/* stderr to /dev/null (returns the saved descriptor, -1 if not muted), and
 * back */
int hcnn_cli_mute_stderr(int mute)
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

void hcnn_cli_unmute_stderr(int saved)
{
    if (saved < 0)
        return;
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
}

/* What the launcher's ranks but 0 say before MPI, kept: rank 0 says it for
 * all (every rank reads the same configuration).  A rank that failed where
 * rank 0 did not (a file its node lacks, a path relative to its own
 * directory, an environment of its own) said nothing: mpirun printed only
 * its exit code, and under srun --kill-on-bad-exit=0 (slurm/lib.sh) the
 * ranks that started waited for it.  Now a failure before MPI joins the
 * started ranks' first collective (hcnn_comm_join_failed): every rank
 * leaves, and the lowest failing rank says why (rank 0 at once, another
 * what it kept).  Without a temporary file, muted as before. */
hcnn_cli_held_stderr hcnn_cli_hold_stderr(void)
{
    hcnn_cli_held_stderr h = {-1, NULL};
    if (hcnn_blas_env_rank() == 0)
        return h;
    fflush(stderr);
    if ((h.kept = tmpfile()) && (h.saved = dup(STDERR_FILENO)) >= 0 &&
        dup2(fileno(h.kept), STDERR_FILENO) >= 0)
        return h;
    if (h.saved >= 0)
        close(h.saved);
    if (h.kept)
        fclose(h.kept);
    return (hcnn_cli_held_stderr){hcnn_cli_mute_stderr(1), NULL};
}

/* stderr back; what was kept said if say */
void hcnn_cli_release_stderr(hcnn_cli_held_stderr *h, int say)
{
    hcnn_cli_unmute_stderr(h->saved);
    h->saved = -1;
    if (!h->kept)
        return;
    char line[4096];
    rewind(h->kept);
    while (say && fgets(line, sizeof line, h->kept)) /* (hcnn_error names the rank) */
        fputs(line, stderr);
    fflush(stderr);
    fclose(h->kept);
    h->kept = NULL;
}

/* A failure (rc, exit status `status`) before MPI, what it said held by h
 * (NULL: said already): in a job of several ranks, joined with the others'
 * start; said by the lowest failing rank */
int hcnn_cli_failed_before_mpi(hcnn_cli_held_stderr *h, int rc, int status)
{
    if (h)
        hcnn_cli_unmute_stderr(h->saved), h->saved = -1;
    const int job = hcnn_blas_env_world() > 1;
    const int say = job ? hcnn_comm_join_failed(status) : 1;
    if (h)
        hcnn_cli_release_stderr(h, say);
    if (job)
        hcnn_comm_join_done();
    return rc;
}
