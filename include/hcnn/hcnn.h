/* hcnn's C API: the one public header of libhcnn (installed as
 * <hcnn/hcnn.h>; `pkg-config --cflags --libs hcnn`).  The hcnn program is a
 * client of it (src/cli/), so is the Python package (python/hcnn/).
 *
 * Conventions
 * - Every function that can fail returns an hcnn_status: HCNN_OK (0) or the
 *   error's code; the one-line message hcnn printed on the command line is
 *   then hcnn_last_error() on the calling thread (also kept when the
 *   message came from one of the library's worker threads during the call).
 * - Nothing here exits the process, installs a signal handler or changes the
 *   signal mask.  What cannot be handled where it happens (an MPI failure, a
 *   CUDA error) goes through the fatal path (hcnn_set_fatal_hook below): a
 *   program decides how the process ends; hcnn_catch_fatal() makes such an
 *   error on the calling thread of a single-process run come back from the
 *   API call as HCNN_EFATAL instead (the session is then unusable).
 * - MPI: the first hcnn_session_open initialises MPI (MPI_Init_thread,
 *   MPI_THREAD_MULTIPLE) unless something else (mpi4py, the caller) already
 *   did; hcnn works on its own duplicate of MPI_COMM_WORLD.  hcnn_finalize()
 *   finalises MPI only if hcnn initialised it; call it once, at the end of
 *   the process (the Python package calls it from atexit).  In a job of
 *   several ranks where this process's hcnn_session_open failed and MPI
 *   was never started, hcnn_finalize() starts it to tell the other ranks,
 *   which then return the failure from their collective call instead of
 *   waiting for this rank.
 * - Opening a session reads the configuration in the calling process alone
 *   (no MPI); training, evaluating and benchmarking it are collective: every
 *   rank of MPI_COMM_WORLD makes the call together, as `mpirun hcnn train`
 *   does, and runs rank 0's configuration.  The readers (checkpoints,
 *   batches) are not collective: any process calls them alone.
 * - Objects are not shared between threads without the caller's locking,
 *   except hcnn_session_request_stop (async-signal-safe, any thread). */
#ifndef HCNN_HCNN_H
#define HCNN_HCNN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the version of this interface: a program built against N runs against a
 * library whose hcnn_api_version() is N (libtool's current; docs/python.md) */
#define HCNN_API_VERSION 1
int hcnn_api_version(void);
/* the package's version, e.g. "0.9" */
const char *hcnn_version(void);

enum hcnn_status {
    HCNN_OK = 0,
    HCNN_EINVAL = 1,   /* bad argument, config value or command line */
    HCNN_ENOMEM = 2,   /* allocation failed */
    HCNN_EIO = 3,      /* file cannot be opened, read or written */
    HCNN_EFORMAT = 4,  /* file has a wrong magic, size or content */
    HCNN_ENUMERIC = 5, /* NaN or Inf during training */
    HCNN_EMPI = 6,     /* an MPI call failed or another rank failed */
    HCNN_STOPPED = 7,  /* stopped by SIGTERM/SIGUSR1 or a stop request, after writing a
                          checkpoint */
    HCNN_EAGREED = 8,  /* every rank stopped on one error they agreed on (a non-finite
                          step, a failed checkpoint write), reported once by rank 0 */
    HCNN_EFATAL = 9    /* the fatal path was taken inside the call (hcnn_catch_fatal) */
};

/* The message of the last failed call on this thread ("" if none): the
 * text after "hcnn: error: " (several lines when a call said more than one
 * thing).  Valid until this thread's next call into the library. */
const char *hcnn_last_error(void);
/* 1 (the default): each error message is also printed on stderr as
 * "hcnn: error: MESSAGE" when it happens, as the hcnn program does; 0: only
 * kept for hcnn_last_error (warnings are printed either way).
 * Process-wide. */
void hcnn_set_error_output(int print);

/* ---- the fatal path --------------------------------------------------------
 * The hook gets the file, line, exit code (never 0) and message of a fatal
 * error and ends the process (it must not return; if it does, abort()).
 * Without one the library prints "hcnn: fatal at FILE:LINE: MESSAGE" and
 * calls abort().  Process-wide: install it once, before threads start. */
typedef void (*hcnn_fatal_hook)(void *arg, const char *file, int line, int code, const char *msg);
void hcnn_set_fatal_hook(hcnn_fatal_hook fn, void *arg);
/* Installs the library's own hook for library clients: a fatal error
 * raised on the thread of an API call, outside a parallel region, in a
 * process that is alone in its MPI job (or before MPI), ends that call with
 * HCNN_EFATAL and its message (a longjmp back to the call: the memory the
 * call held is lost, the session is marked failed); anywhere else (a
 * worker thread, a job of several ranks, where the other ranks may wait
 * in a collective) it prints the message and ends the job as the program
 * would: MPI_Abort of every rank, or abort(). */
void hcnn_catch_fatal(void);

/* ---- sessions: a run configuration, opened on every rank ------------------ */
typedef struct hcnn_session hcnn_session;

/* Reads and validates the YAML file at config_path with the overrides
 * sets[0..nsets) ("key=value", as --set), in this process (no MPI); also
 * whether this CPU runs its precision and, in a process that cannot
 * re-execute itself, its blas_kernels (auto and env: the kernels loaded).
 * *out is NULL on failure. */
int hcnn_session_open(hcnn_session **out, const char *config_path, const char *const *sets,
                      int nsets);
void hcnn_session_close(hcnn_session *s);
/* this process's rank and the job's size: MPI's once a collective call
 * started it, the launcher's environment's before */
int hcnn_session_rank(const hcnn_session *s);
int hcnn_session_size(const hcnn_session *s);
/* The configuration after overrides as YAML, as `hcnn train` prints it
 * (the whole text's length is returned; at most cap-1 bytes written). */
size_t hcnn_session_config_text(const hcnn_session *s, char *buf, size_t cap);

/* What a training run reports: after each step (HCNN_PROGRESS_STEP, the
 * running figures of the epoch on this rank's shard) and after each
 * epoch's evaluation (HCNN_PROGRESS_EPOCH: the figures of the epoch's CSV
 * row, over all ranks).  Every rank gets both. */
enum hcnn_progress_kind { HCNN_PROGRESS_STEP = 1, HCNN_PROGRESS_EPOCH = 2 };
typedef struct hcnn_progress {
    int kind;
    int epoch, epochs;      /* 1-based epoch, configured epochs */
    int batch, batches;     /* batches done in the epoch, batches of an epoch */
    long step;              /* optimiser steps taken in the whole run */
    double lr;
    double train_loss, train_acc; /* running (STEP) or the epoch's (EPOCH); acc in [0, 1] */
    double test_loss, test_acc;   /* EPOCH only (else 0) */
    double images_per_s;
    double epoch_time_s, data_wait_s, eval_time_s; /* EPOCH only */
} hcnn_progress;
/* Return 0 to go on, non-zero to stop the run as SIGTERM would: the ranks
 * agree on it in the next step's exchange, finish that step, write a
 * checkpoint and the call returns HCNN_STOPPED (within one step; with
 * several ranks the request of any rank stops them all). */
typedef int (*hcnn_progress_fn)(void *arg, const hcnn_progress *p);

typedef struct hcnn_train_options {
    const char *resume;        /* a checkpoint file, "latest", "auto" or NULL (as --resume) */
    int quiet;                 /* 1: print nothing on stdout (header, progress, epoch lines) */
    int profile;               /* 1: the per-block profile table (as --profile) */
    hcnn_progress_fn progress; /* NULL: none */
    void *progress_arg;
} hcnn_train_options;

/* Trains as `hcnn train` does: the same checkpoints, CSV and exit-status
 * causes (HCNN_STOPPED after a stop request or signal).  Collective: every
 * rank calls it; MPI starts the first time.  May be called again on the same or another session (each call is a
 * run: resume with .resume = "latest" to continue one). */
int hcnn_session_train(hcnn_session *s, const hcnn_train_options *o);
/* As `hcnn eval --checkpoint PATH`: loss and accuracy (in [0, 1]) on the
 * configured test set, on every rank.  quiet: print nothing. */
int hcnn_session_evaluate(hcnn_session *s, const char *checkpoint, int quiet, double *test_loss,
                          double *test_acc);
/* As `hcnn bench`: warm-up steps, then `repeats` timed repeats of `steps`
 * steps on synthetic data; *images_per_s the median global rate.  quiet:
 * print nothing (else the repeats and the per-block profile, on rank 0). */
int hcnn_session_bench(hcnn_session *s, int warmup, int repeats, int steps, int quiet,
                       double *images_per_s);
/* Asks the run in progress on this session to stop after its current step
 * with a checkpoint (as SIGTERM).  Async-signal-safe; any thread. */
void hcnn_session_request_stop(hcnn_session *s);

/* Ends what hcnn started in the process: MPI_Finalize if hcnn initialised
 * MPI (and nobody finalised it), after every session is closed; the other
 * ranks told of a failed hcnn_session_open (the MPI bullet above).  Safe to
 * call more than once. */
void hcnn_finalize(void);

/* ---- checkpoints ---------------------------------------------------------
 * A checkpoint's model as `hcnn export` writes it: every parameter and
 * batch-norm statistic (float32, C order, PyTorch's names and shapes), and
 * after each batch-norm layer's statistics an int64 scalar
 * <layer>.num_batches_tracked (the checkpoint's step), in the file's order;
 * optimiser momentum is left out.  The data stay valid until the
 * checkpoint is freed. */
typedef struct hcnn_checkpoint hcnn_checkpoint;
enum hcnn_dtype { HCNN_DTYPE_F32 = 1, HCNN_DTYPE_F64 = 2, HCNN_DTYPE_I64 = 3 };
typedef struct hcnn_array {
    const char *name;
    int dtype;                 /* enum hcnn_dtype */
    int ndim;                  /* 0 (a scalar) to 4 */
    int64_t dims[4];
    const void *data;          /* 64-byte aligned; dims' product elements */
} hcnn_array;

/* Reads and verifies the file (magic, version, CRCs, names, shapes). */
int hcnn_checkpoint_read(const char *path, hcnn_checkpoint **out);
void hcnn_checkpoint_free(hcnn_checkpoint *c);
int hcnn_checkpoint_count(const hcnn_checkpoint *c);
/* array i (0 <= i < count) */
int hcnn_checkpoint_array(const hcnn_checkpoint *c, int i, hcnn_array *out);
/* The META section as "key=value\n" lines (model, model_hash, epoch, step,
 * seed, batch_size, lr, run_id, parent_run, dataset, ...). */
const char *hcnn_checkpoint_meta(const hcnn_checkpoint *c);

/* Writes a checkpoint of the model the session's configuration builds
 * from arrays[0..n), through the validation of `hcnn import`: every tensor
 * of the model present exactly once with its shape, float32 (or float64,
 * converted), finite, running variances >= 0; num_batches_tracked arrays
 * accepted and ignored; any other name refused.  Epoch 0, step 0, zero
 * momentum, the configuration's seed; nothing written unless all is valid.
 * Serial: call it on one rank. */
int hcnn_checkpoint_write(const hcnn_session *s, const char *path, const hcnn_array *arrays,
                          int n);

/* ---- batches: the data loader of a configuration for one rank of N -------- */
typedef struct hcnn_batches hcnn_batches;
enum hcnn_split { HCNN_SPLIT_TRAIN = 0, HCNN_SPLIT_TEST = 1 };
/* One batch, the caller's until hcnn_batch_release: its memory is not
 * reused by the loader before that (the loader assembles into other
 * buffers meanwhile).  images: n x c x h x w float32 (normalised, augmented
 * as training does); labels: n int32. */
typedef struct hcnn_batch {
    const float *images;
    const int32_t *labels;
    int n, c, h, w;
    int index;        /* the batch's index in the epoch */
    int global_n;     /* the global batch this rank's shard belongs to */
    int first;        /* position in the epoch of the shard's first sample */
} hcnn_batch;

/* The batches of `epoch` of `split` that rank `rank` of `world` data-
 * parallel ranks gets, in the order and with the augmentation `hcnn train`
 * uses for the configuration (its seed, batch_size, shuffle, augment,
 * data_prefetch, threads; the test split: in order, no augmentation).
 * Not collective; no MPI.  HCNN_EINVAL naming rank, world, split or epoch
 * when out of range. */
int hcnn_batches_open(const hcnn_session *s, int split, int rank, int world, int epoch,
                      hcnn_batches **out);
/* batches in the epoch, and the per-sample shape */
int hcnn_batches_count(const hcnn_batches *b);
void hcnn_batches_shape(const hcnn_batches *b, int *c, int *h, int *w);
/* Starts epoch `epoch` (0 <= epoch < the configuration's epochs) over from
 * its first batch, with the data set already read: a loader is opened once
 * and iterated epoch after epoch.  Batches held stay valid. */
int hcnn_batches_restart(hcnn_batches *b, int epoch);
/* The next batch in *out (returns HCNN_OK with *out NULL after the last). */
int hcnn_batches_next(hcnn_batches *b, hcnn_batch **out);
void hcnn_batch_release(hcnn_batch *batch);
/* Closes the loader; batches not yet released stay valid until released. */
void hcnn_batches_close(hcnn_batches *b);

#ifdef __cplusplus
}
#endif
#endif
