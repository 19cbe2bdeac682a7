/* hcnn_catch_fatal (include/hcnn/hcnn.h): the library's own fatal-error
 * hook for library clients.  A longjmp back to the API call is only taken
 * where nothing else is left waiting: the thread that made the call (a
 * worker's stack cannot be unwound to another thread), outside an OpenMP
 * region (its team would wait at the region's end), in a process alone in
 * its job (other ranks may wait in a collective for this one: they are
 * ended with it, MPI_Abort, as the hcnn program does). */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>

#include "hcnn/comm.h"
#include "api.h"

static _Thread_local jmp_buf *guard;

jmp_buf **hcnn_api_guard_slot(void) { return &guard; }

static void catching_hook(void *arg, const char *file, int line, int code, const char *msg)
{
    int init = 0, fin = 0, size = 1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (guard && size == 1 && !omp_in_parallel()) {
        hcnn_error_code(HCNN_EFATAL, "fatal at %s:%d: %s", file, line, msg);
        longjmp(*guard, 1);
    }
    hcnn_mpi_fatal_hook(arg, file, line, code, msg);
}

void hcnn_catch_fatal(void) { hcnn_set_fatal_hook(catching_hook, NULL); }
