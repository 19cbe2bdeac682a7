/* Stall watchdog: a collective or receive that waits longer than
 * stall_timeout_s ends the job instead of burning the allocation until
 * Slurm's time limit.
 *
 * Every MPI call goes through HCNN_MPI (include/hcnn/comm.h), which marks
 * it here (enter/leave: two atomic stores and a clock read).  A thread per
 * rank checks once a second; past the timeout it prints the call, its file
 * and line, what it was for (hcnn_watch_context: "gradient allreduce bucket
 * 2") and the step, then what every other rank is doing, found through a
 * side channel that needs no MPI: each rank's watchdog thread replaces a
 * small heartbeat file every second (its step, and the MPI call it is in
 * with its file, line, purpose and duration, or none) in a directory all
 * ranks share (<checkpoint_dir>/.hcnn-watch, else $TMPDIR/hcnn-watch-<job>,
 * node-local); a rank whose file has not changed for 3 s is stopped or
 * dead, one at an earlier step is behind, one in another call took another
 * path.  Then MPI_Abort ends every rank.
 *
 * The marks are process-wide state, the one exception to "a run is a
 * struct passed down": MPI calls sit in every layer of the code, like the
 * abort path they report to, and the watchdog must see all of them. */
#ifndef HCNN_WATCHDOG_H
#define HCNN_WATCHDOG_H

struct hcnn_comm;

/* Starts the watchdog on every rank (collective; nothing when timeout_s is
 * 0 or there is one rank).  dir: the checkpoint directory or "". */
int hcnn_watchdog_start(const struct hcnn_comm *c, double timeout_s, const char *dir);
void hcnn_watchdog_stop(void);

/* The optimiser step the rank is at (reported, compared across ranks). */
void hcnn_watch_step(long step);
/* What the next MPI calls are for, until changed (a string literal or
 * formatted copy, at most 95 characters); NULL clears it. */
void hcnn_watch_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void hcnn_watch_enter(const char *call, const char *file, int line);
void hcnn_watch_leave(void);

#endif
