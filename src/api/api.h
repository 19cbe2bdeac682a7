/* Inside the C API (include/hcnn/hcnn.h): what its files share.
 *   fatal.c       hcnn_catch_fatal: a fatal error back to the call as HCNN_EFATAL
 *   session.c     sessions: MPI, the configuration, train/evaluate/bench
 *   checkpoint.c  checkpoints as arrays, read and written
 *   batches.c     the data loader of one rank, batch by batch
 * Every entry point begins with API_BEGIN (the thread's last error
 * forgotten, the fatal guard set) and leaves through API_END. */
#ifndef HCNN_API_INTERNAL_H
#define HCNN_API_INTERNAL_H

#include <setjmp.h>

#include "hcnn/common.h"
#include "hcnn/comm.h"
#include "hcnn/config.h"

/* The fatal guard of the calling thread (fatal.c): the jmp_buf of the
 * outermost API call in progress on it, NULL outside one. */
jmp_buf **hcnn_api_guard_slot(void);

/* The entry of an API call: on a fatal error caught in it (hcnn_catch_fatal)
 * control comes back here and the call returns HCNN_EFATAL.  `on_fatal` runs
 * first (marks the object the call worked on as failed). */
#define API_BEGIN(on_fatal)                                                                        \
    hcnn_errors_begin_call();                                                                      \
    jmp_buf api_jb_;                                                                               \
    jmp_buf **api_slot_ = hcnn_api_guard_slot();                                                   \
    jmp_buf *const api_outer_ = *api_slot_;                                                        \
    if (!api_outer_) {                                                                             \
        if (setjmp(api_jb_)) {                                                                     \
            *api_slot_ = NULL;                                                                     \
            on_fatal;                                                                              \
            return HCNN_EFATAL;                                                                    \
        }                                                                                          \
        *api_slot_ = &api_jb_;                                                                     \
    }
/* The exit: rc evaluated first (it may be the call's work), then the
 * guard given back to the caller's call. */
static inline int hcnn_api_end(jmp_buf **slot, jmp_buf *outer, int rc)
{
    *slot = outer;
    return rc;
}
#define API_END(rc) hcnn_api_end(api_slot_, api_outer_, (rc))

/* A configuration opened by one process (no MPI: checkpoints written and
 * batches opened by one rank); the collective calls (train, evaluate,
 * bench) start MPI the first time and run rank 0's configuration on every
 * rank, as `mpirun hcnn train` does. */
struct hcnn_session {
    hcnn_config *cfg;
    hcnn_comm comm;            /* valid once has_comm */
    int has_comm;
    volatile int stop;         /* hcnn_session_request_stop */
    int failed;                /* a fatal error was caught in a call on it */
};

#endif
