/* MPI start-up and the job-wide abort path. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "hcnn/comm.h"
#include "hcnn/common.h"

int hcnn_comm_init(hcnn_comm *c, int *argc, char ***argv)
{
    int provided = 0, already = 0;
    c->world = MPI_COMM_WORLD;
    c->initialized = 0;
    HCNN_MPI(MPI_Initialized(&already));
    if (!already) {
        /* SERIALIZED: the optional communication thread calls MPI while the
         * main thread does not */
        if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return hcnn_error_code(HCNN_EMPI, "MPI_Init_thread failed");
        c->initialized = 1;
    }
    if (already)
        HCNN_MPI(MPI_Query_thread(&provided));
    c->thread_level = provided;
    HCNN_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    HCNN_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    HCNN_MPI(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    return HCNN_OK;
}

void hcnn_comm_finalize(hcnn_comm *c)
{
    if (c->initialized)
        HCNN_MPI(MPI_Finalize());
    c->initialized = 0;
}

void hcnn_abort_at(const hcnn_comm *c, const char *file, int line, int code, const char *fmt,
                   ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int init = 0, fin = 0, rank = c ? c->rank : 0, size = c ? c->size : 1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!c && init && !fin) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    fprintf(stderr, "hcnn: rank %d of %d: fatal at %s:%d: %s\n", rank, size, file, line, msg);
    fflush(stderr);
    fflush(stdout);
    if (init && !fin && size > 1)
        MPI_Abort(c ? c->world : MPI_COMM_WORLD, code ? code : 1);
    if (init && !fin)
        MPI_Finalize();
    exit(code ? code : 1);
}

void hcnn_mpi_fail(const char *file, int line, const char *call, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error code %d", rc);
    hcnn_abort_at(NULL, file, line, 1, "%s failed: %s", call, msg);
}

#define CHUNK ((size_t)1 << 28)

int hcnn_bcast_floats(MPI_Comm comm, float *buf, size_t n, int root)
{
    for (size_t off = 0; off < n; off += CHUNK) {
        int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        if (MPI_Bcast(buf + off, cnt, MPI_FLOAT, root, comm) != MPI_SUCCESS)
            return hcnn_error_code(HCNN_EMPI, "MPI_Bcast of %d floats failed", cnt);
    }
    return HCNN_OK;
}

int hcnn_allreduce_sum_floats(MPI_Comm comm, float *buf, size_t n)
{
    for (size_t off = 0; off < n; off += CHUNK) {
        int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        if (MPI_Allreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, comm) != MPI_SUCCESS)
            return hcnn_error_code(HCNN_EMPI, "MPI_Allreduce of %d floats failed", cnt);
    }
    return HCNN_OK;
}
