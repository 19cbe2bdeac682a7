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
 * node-local); a rank whose file has not changed for over 3 s is stopped or
 * dead, one at an earlier step is behind, one in another call took another
 * path; a report that finds every rank waiting in the same call (a
 * deadlock) while one of them has missed a beat looks again each second,
 * up to 5 times, for that rank to read as stopped or to beat again (a rank
 * stopped inside the call is not called deadlocked).  Then MPI_Abort ends
 * every rank.
 *
 * The ranks remove the directory as they end; a job that is killed (or
 * ended by its watchdog) leaves it, with its ranks' files.  Such leftovers
 * are removed by the next run that finds them: in the checkpoint directory
 * by the run taking it (ckpt_lock.c), in $TMPDIR by every rank whose
 * watchdog starts there (a job of 2 ranks or more, stall_timeout_s > 0, no
 * checkpoint_dir; its node's /tmp: the user's own directories only).  In
 * $TMPDIR the job's directory is made with mode 700 and must be the user's
 * alone: one another user made first under the same name (or a link) is
 * refused, with a warning, and a stall report then says what the other
 * ranks do is unknown.
 *
 * The marks are process-wide state, the one exception to "a run is a
 * struct passed down": MPI calls sit in every layer of the code, like the
 * abort path they report to, and the watchdog must see all of them. */
#ifndef HCNN_WATCHDOG_H
#define HCNN_WATCHDOG_H

#include <time.h>

struct hcnn_comm;

/* Starts the watchdog on every rank (collective; nothing when timeout_s is
 * 0 or there is one rank).  dir: the checkpoint directory or "".  One a
 * process: a multi-rank run started while another run of the same process
 * has it goes without (a warning says so).  hcnn_watchdog_stop, from the
 * thread that started it, wakes its thread and waits for it. */
int hcnn_watchdog_start(const struct hcnn_comm *c, double timeout_s, const char *dir);
void hcnn_watchdog_stop(void);

/* Removes path, a heartbeat directory of a job that is no longer alive: one
 * that holds only heartbeat files (rank-*, and the clock probes a rank
 * killed mid-report leaves), it and all of them still for
 * HCNN_WATCH_DIR_STALE_S by fs_now (the clock of the file system that holds
 * it, hcnn_fs_now, or, node-local, the caller's; a live rank rewrites its
 * file every second).  A link is
 * never followed; mine_only: only a directory this user owns.  Returns 1
 * when removed, 0 when left untouched. */
#define HCNN_WATCH_DIR_STALE_S 60
int hcnn_watchdog_remove_stale_dir(const char *path, time_t fs_now, int mine_only);

/* The optimiser step the rank is at (reported, compared across ranks). */
void hcnn_watch_step(long step);
/* What the next MPI calls are for, until changed (a string literal or
 * formatted copy, at most 95 characters); NULL clears it. */
void hcnn_watch_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void hcnn_watch_enter(const char *call, const char *file, int line);
void hcnn_watch_leave(void);

#endif
