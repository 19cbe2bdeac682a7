/* MPI context of a run and the one abort path.
 *
 * Every MPI or I/O failure that cannot be handled locally ends the whole
 * job through the abort path (hcnn_fatal_at, HCNN_FATAL: include/hcnn/common.h;
 * modelled on HPL's HPL_pabort): with hcnn_mpi_fatal_hook installed, it
 * prints the rank, source file, line and cause, then calls MPI_Abort so
 * that no rank is left waiting in a collective. */
#ifndef HCNN_COMM_H
#define HCNN_COMM_H

#include <mpi.h>

#include "hcnn/common.h"
#include <stddef.h>

#include "hcnn/backend.h"
#include "hcnn/watchdog.h"

typedef struct hcnn_comm {
    int rank, size;
    MPI_Comm world;
    int initialized;     /* we called MPI_Init_thread */
    int thread_level;    /* MPI_THREAD_* provided */
    int local_rank;      /* among the ranks of this node (MPI_COMM_TYPE_SHARED): its GPU */
} hcnn_comm;

/* The gradient buckets are MPI_Iallreduce(MPI_IN_PLACE).  OpenMPI 4.1's
 * libnbc (nbc_iallreduce.c) picks its binomial tree for every in-place
 * call unless coll_libnbc_iallreduce_algorithm says otherwise: a reduce
 * up and a broadcast down, 2 ceil(log2 p) full copies of the bucket on
 * the critical path (10 at 32 nodes), where Rabenseifner (reduce-scatter +
 * allgather) moves 2 (p-1)/p.  16 MiB on 2 ranks of a 2-core AMD EPYC VM,
 * median of 15, three alternations: binomial 5.4-6.6 ms, Rabenseifner
 * 2.4-2.7 ms.  hcnn_comm_init therefore sets this variable to
 * HCNN_IALLREDUCE_DEFAULT unless the user's environment already sets it
 * (their setting wins); hcnn plan prices the buckets with the same value. */
#define HCNN_IALLREDUCE_ENV "OMPI_MCA_coll_libnbc_iallreduce_algorithm"
#define HCNN_IALLREDUCE_DEFAULT 3 /* 0 libnbc's own choice, 1 ring, 2 binomial,
                                     3 rabenseifner, 4 recursive doubling */

/* MPI_Init_thread asking for MPI_THREAD_MULTIPLE, thread_level what the
 * library provides (hcnn_strategy_check says which configurations need
 * which level); MPI_COMM_WORLD gets MPI_ERRORS_RETURN,
 * so failures reach HCNN_MPI instead of the default fatal handler. */
int hcnn_comm_init(hcnn_comm *c, int *argc, char ***argv);
/* hcnn train|eval|bench on a rank of a job of several whose set-up failed
 * before MPI (its configuration, its BLAS kernels) with exit status
 * `status`: MPI is started and the first collective of the ranks that
 * started (hcnn_comm_init's) joined with the failure, so that they leave
 * with the lowest failing rank's status (75: HCNN_STOPPED, 2: HCNN_EINVAL,
 * else HCNN_EAGREED) instead of waiting for this rank.  Returns 1 on that
 * rank, which says why (the others' messages are the same or its own),
 * else 0; then hcnn_comm_join_done, after the message (the started ranks
 * wait in MPI_Finalize for it). */
int hcnn_comm_join_failed(int status);
void hcnn_comm_join_done(void);
void hcnn_comm_finalize(hcnn_comm *c);

/* MPI_Init_thread and MPI_Finalize, as every hcnn call of them makes them
 * (src/parallel/mpi_untracked.c): in a build with AddressSanitizer
 * (configure --enable-sanitizers), what the MPI library allocates on the
 * calling thread inside them is not tracked by LeakSanitizer
 * (__lsan_disable), instead of tracked and then suppressed by library name
 * at exit (tests/sanitizers/lsan.supp, which still covers the library's
 * own threads).  Elsewhere the plain calls.  They return MPI's code. */
int hcnn_mpi_init_thread(int *argc, char ***argv, int required, int *provided);
int hcnn_mpi_finalize(void);

/* The hook that ends an MPI job (include/hcnn/common.h, hcnn_set_fatal_hook;
 * src/cli/main.c installs it): prints "hcnn: rank R of S: fatal at
 * FILE:LINE: MESSAGE" (rank 0 of 1 when MPI is not running), then, MPI
 * running, MPI_Abort(MPI_COMM_WORLD, code) on more than one rank, else
 * MPI_Finalize; then exit(code).  arg: unused (NULL). */
HCNN_NORETURN void hcnn_mpi_fatal_hook(void *arg, const char *file, int line, int code,
                                       const char *msg);

/* The one check of every MPI call: a failure ends the whole job through the
 * abort path (hcnn_fatal_at, src/parallel/abort.c), naming the call, its
 * error string, this rank, file and line (exit status 1, a run-time failure).  MPI_COMM_WORLD's handler is
 * MPI_ERRORS_RETURN, so a failed call returns here instead of killing the
 * process without a word.  The stall watchdog marks the call while it runs
 * (include/hcnn/watchdog.h). */
#define HCNN_MPI(call)                                                                         \
    do {                                                                                       \
        hcnn_watch_enter(#call, __FILE__, __LINE__);                                           \
        const int mpi_rc_ = (call);                                                            \
        hcnn_watch_leave();                                                                    \
        if (mpi_rc_ != MPI_SUCCESS)                                                            \
            hcnn_mpi_fail(__FILE__, __LINE__, #call, mpi_rc_);                                 \
    } while (0)
HCNN_NORETURN void hcnn_mpi_fail(const char *file, int line, const char *call, int rc);

/* ---- MPI on backend memory ------------------------------------------------
 * MPI reads and writes the backend's buffers in place when they are host
 * memory (backend host_memory), or device memory that the MPI library
 * takes (backend mpi_direct: the backend's queued work is waited for
 * first, since MPI reads and writes the memory outside its stream);
 * otherwise through a host copy, downloaded before a send and uploaded
 * after a receive completes. */

/* Whether this run's MPI takes the backend's device memory in place: 1 when
 * the library reports support for that device at run time (OpenMPI:
 * MPIX_Query_cuda_support; MPICH: MPIX_GPU_query_support), else 0, with
 * why in `why` (the run header prints it).  For tests on the emulation
 * (backend emulated, its "device" memory host memory), the environment
 * variable HCNN_MPI_ASSUME_DEVICE_AWARE=1 stands in for the library's
 * answer; it is ignored on a real device. */
int hcnn_mpi_device_aware(const hcnn_backend *be, char *why, size_t cap);
/* A communication point inside a step's queued device work.  A step whose
 * device work is captured in CUDA graphs (src/train/graphs.c) is cut there,
 * since MPI calls cannot be captured: one graph per segment between
 * communication points.  Code that communicates in the middle of such work
 * calls hcnn_comm_point(cut, fn, arg, i) where it would call fn(arg, i):
 *   - cut NULL, or the step running directly: fn(arg, i);
 *   - the step being captured: the work queued since the last point ends
 *     a graph, which is launched, then fn(arg, i) runs;
 *   - a captured step replayed: the step's code does not run; its graphs
 *     are launched with the same fn(arg, i) between them, in order.
 * So fn is the step's only host work between the graphs: it may wait for
 * the device, call MPI and change the state it keeps in arg, but the
 * device work around it is what the first capture recorded, and what fn
 * does may depend only on arg, i and that state.  Returns fn's result, or
 * an error when a capture fails half-way (the run cannot go on: part of
 * the step has run). */
typedef int (*hcnn_comm_fn)(void *arg, int i);
typedef struct hcnn_comm_cut {
    int (*point)(struct hcnn_comm_cut *cut, hcnn_comm_fn fn, void *arg, int i);
} hcnn_comm_cut;

static inline int hcnn_comm_point(hcnn_comm_cut *cut, hcnn_comm_fn fn, void *arg, int i)
{
    return cut ? cut->point(cut, fn, arg, i) : fn(arg, i);
}

typedef struct hcnn_mpi_buf {
    const hcnn_backend *be;
    float *dev;          /* the backend's buffer */
    float *host;         /* its host copy; NULL when MPI uses dev in place */
    size_t n;            /* floats */
} hcnn_mpi_buf;

/* How MPI will use a buffer.  Open MPI's CUDA support takes device memory
 * in point-to-point transfers (blocking or not) and in blocking
 * collectives, not in non-blocking ones (its FAQ, "Which MPI APIs do NOT
 * work with CUDA-aware?"): a buffer that MPI_Iallreduce reduces stays
 * staged through host memory even when the backend has mpi_direct. */
typedef enum hcnn_mpi_use {
    HCNN_MPI_P2P_OR_BLOCKING = 0,
    HCNN_MPI_NONBLOCKING_COLLECTIVE
} hcnn_mpi_use;

/* dev may be NULL (an unused buffer: nothing staged) */
int hcnn_mpi_buf_init(hcnn_mpi_buf *b, const hcnn_backend *be, float *dev, size_t n,
                      hcnn_mpi_use use, const char *what);
void hcnn_mpi_buf_free(hcnn_mpi_buf *b);
/* What a send of floats [off, off + count) reads: dev, or the host copy
 * with those floats downloaded into it. */
float *hcnn_mpi_send_ptr(hcnn_mpi_buf *b, size_t off, size_t count);
/* What a receive into [off, ...) writes. */
float *hcnn_mpi_recv_ptr(hcnn_mpi_buf *b, size_t off);
/* After that receive completed: upload [off, off + count) if staged. */
void hcnn_mpi_recv_done(hcnn_mpi_buf *b, size_t off, size_t count);

/* Collectives and point-to-point transfers of n floats of backend memory,
 * of any length (MPI counts are int): in place, or staged through a
 * temporary host copy.  MPI failures end the job (HCNN_MPI); returns
 * HCNN_OK or HCNN_ENOMEM (no host copy). */
int hcnn_bcast_floats(const hcnn_backend *be, MPI_Comm comm, float *buf, size_t n, int root);
int hcnn_allreduce_sum_floats(const hcnn_backend *be, MPI_Comm comm, float *buf, size_t n);
int hcnn_send_floats(const hcnn_backend *be, MPI_Comm comm, const float *buf, size_t n, int dest,
                     int tag);
int hcnn_recv_floats(const hcnn_backend *be, MPI_Comm comm, float *buf, size_t n, int source,
                     int tag);

#endif
