/* The abort path's message and the program's hook that ends the process
 * (contract in include/hcnn/common.h).  Nothing here knows MPI: the CUDA
 * backend and the CPU kernels end a job through it without depending on
 * the MPI layer, which provides the hook hcnn's program installs
 * (hcnn_mpi_fatal_hook, src/parallel/abort.c). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "hcnn/common.h"

/* set once by the program before other threads run, read on a fatal error */
static struct {
    hcnn_fatal_hook fn;
    void *arg;
} hook;

void hcnn_set_fatal_hook(hcnn_fatal_hook fn, void *arg)
{
    hook.fn = fn;
    hook.arg = arg;
}

static HCNN_NORETURN void fatal_v(const char *file, int line, int code, const char *fmt,
                                  va_list ap)
{
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (hook.fn) {
        hook.fn(hook.arg, file, line, code ? code : 1, msg);
        fprintf(stderr, "hcnn: the fatal-error hook returned; aborting\n");
    } else {
        fprintf(stderr, "hcnn: fatal at %s:%d: %s\n", file, line, msg);
    }
    fflush(stderr);
    fflush(stdout);
    abort();
}

void hcnn_fatal_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fatal_v(file, line, 1, fmt, ap);
}

void hcnn_fatal_code_at(const char *file, int line, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fatal_v(file, line, code, fmt, ap);
}
