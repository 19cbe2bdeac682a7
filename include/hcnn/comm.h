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

/* MPI_Init_thread (SERIALIZED: the optional communication thread calls MPI
 * while the main thread does not); MPI_COMM_WORLD gets MPI_ERRORS_RETURN,
 * so failures reach HCNN_MPI instead of the default fatal handler. */
int hcnn_comm_init(hcnn_comm *c, int *argc, char ***argv);
void hcnn_comm_finalize(hcnn_comm *c);

/* c may be NULL: the rank is then asked of MPI_COMM_WORLD. */
_Noreturn void hcnn_abort_at(const hcnn_comm *c, const char *file, int line, int code,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define HCNN_ABORT(comm, code, ...) hcnn_abort_at((comm), __FILE__, __LINE__, (code), __VA_ARGS__)

/* The one check of every MPI call: a failure ends the whole job through the
 * abort path, naming the call, its error string, this rank, file and line
 * (exit status 1, a run-time failure).  MPI_COMM_WORLD's handler is
 * MPI_ERRORS_RETURN, so a failed call returns here instead of killing the
 * process without a word. */
#define HCNN_MPI(call)                                                                         \
    do {                                                                                       \
        const int mpi_rc_ = (call);                                                            \
        if (mpi_rc_ != MPI_SUCCESS)                                                            \
            hcnn_mpi_fail(__FILE__, __LINE__, #call, mpi_rc_);                                 \
    } while (0)
_Noreturn void hcnn_mpi_fail(const char *file, int line, const char *call, int rc);

/* Collectives on float buffers of any length (MPI counts are int). */
int hcnn_bcast_floats(MPI_Comm comm, float *buf, size_t n, int root);
int hcnn_allreduce_sum_floats(MPI_Comm comm, float *buf, size_t n);

#endif
