/* The MPI side of the abort path (include/hcnn/comm.h): a failed MPI
 * call's message, and the hook that ends an MPI job.  Apart from comm.c:
 * every MPI call's check (HCNN_MPI) ends here, the stall watchdog's
 * included, which comm.c's calls are marked in, so this sits below both. */
#include <stdio.h>
#include <stdlib.h>

#include "hcnn/comm.h"
#include "hcnn/common.h"

void hcnn_mpi_fail(const char *file, int line, const char *call, int rc)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
        snprintf(msg, sizeof msg, "MPI error code %d", rc);
    hcnn_fatal_at(file, line, "%s failed: %s", call, msg);
}

void hcnn_mpi_fatal_hook(void *arg, const char *file, int line, int code, const char *msg)
{
    (void)arg;
    int init = 0, fin = 0, rank = 0, size = 1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    fprintf(stderr, "hcnn: rank %d of %d: fatal at %s:%d: %s\n", rank, size, file, line, msg);
    fflush(stderr);
    fflush(stdout);
    /* no rank is left waiting in a collective for this one */
    if (init && !fin && size > 1)
        MPI_Abort(MPI_COMM_WORLD, code);
    if (init && !fin)
        hcnn_mpi_finalize();
    exit(code);
}
