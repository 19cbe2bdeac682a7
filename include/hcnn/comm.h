/* MPI context of a run and the one abort path.
 *
 * Every MPI or I/O failure that cannot be handled locally ends the whole
 * job through hcnn_abort_at (modelled on HPL's HPL_pabort): it prints the
 * rank, source file, line and cause, then calls MPI_Abort so that no rank
 * is left waiting in a collective. */
#ifndef HCNN_COMM_H
#define HCNN_COMM_H

#include <mpi.h>

typedef struct hcnn_comm {
    int rank, size;
    MPI_Comm world;
    int initialized;     /* we called MPI_Init_thread */
    int thread_level;    /* MPI_THREAD_* provided */
} hcnn_comm;

/* MPI_Init_thread (FUNNELED is enough: only the main thread calls MPI),
 * errors returned to the caller instead of the default fatal handler. */
int hcnn_comm_init(hcnn_comm *c, int *argc, char ***argv);
void hcnn_comm_finalize(hcnn_comm *c);

_Noreturn void hcnn_abort_at(const hcnn_comm *c, const char *file, int line, int code,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define HCNN_ABORT(comm, code, ...) hcnn_abort_at((comm), __FILE__, __LINE__, (code), __VA_ARGS__)

/* Abort the job if an MPI call fails, naming the call. */
#define HCNN_MPI(comm, call)                                                                   \
    do {                                                                                       \
        int mpi_rc_ = (call);                                                                  \
        if (mpi_rc_ != MPI_SUCCESS) {                                                          \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                               \
            int mpi_len_ = 0;                                                                  \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                    \
            HCNN_ABORT((comm), 6, "%s failed: %s", #call, mpi_msg_);                          \
        }                                                                                      \
    } while (0)

/* Collectives on float buffers of any length (MPI counts are int). */
int hcnn_bcast_floats(MPI_Comm comm, float *buf, size_t n, int root);
int hcnn_allreduce_sum_floats(MPI_Comm comm, float *buf, size_t n);

#endif
