/* A tiny NVTX tool for tests/integration/test_nvtx.sh: NVTX3 loads the
 * library named by NVTX_INJECTION64_PATH at the first NVTX call and calls
 * its InitializeInjectionNvtx2 (nvtx3/nvtxDetail/nvtxInit.h), which here
 * takes the core module's RangePushA and RangePop (the only calls of
 * src/core/trace.h) and appends one line per call to the file named by
 * HCNN_NVTX_LOG:
 *   push PID TID NAME
 *   pop PID TID
 * Each line is one write(2) to a file opened O_APPEND, so the threads and
 * ranks of a run may share the file.  Any other NVTX call stays a no-op
 * (NVTX sets what a tool leaves alone to nothing): a range hcnn made
 * through another call would be missing from the log, and the test fail.
 * Built at make check time only (Makefile.am), without libhcnn. */
#define _GNU_SOURCE
#define NVTX_NO_IMPL /* the types only: this is the tool's side */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

/* The log, opened once by InitializeInjectionNvtx2 (NVTX calls it once per
 * process): a tool's state lives in the process NVTX loads it into. */
static int log_fd = -1;

static void log_line(const char *what, const char *name)
{
    char line[512];
    const int n = name ? snprintf(line, sizeof line, "%s %ld %ld %s\n", what, (long)getpid(),
                                  (long)syscall(SYS_gettid), name)
                       : snprintf(line, sizeof line, "%s %ld %ld\n", what, (long)getpid(),
                                  (long)syscall(SYS_gettid));
    if (n <= 0)
        return;
    const size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (len == sizeof line - 1)
        line[len - 1] = '\n'; /* a name cut short still ends its line */
    if (write(log_fd, line, len) != (ssize_t)len)
        fprintf(stderr, "nvtx_inject: cannot write to $HCNN_NVTX_LOG: %s\n", strerror(errno));
}

/* NVTX's push and pop return the nesting level; nothing here reads it */
static int push_a(const char *message)
{
    log_line("push", message ? message : "(null)");
    return 0;
}

static int pop(void)
{
    log_line("pop", NULL);
    return 0;
}

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table);

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table)
{
    const char *path = getenv("HCNN_NVTX_LOG");
    if (!path || !*path) {
        fprintf(stderr, "nvtx_inject: HCNN_NVTX_LOG is not set: no log to write\n");
        return 0; /* 0: failed, NVTX turns every call into a no-op */
    }
    log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
        fprintf(stderr, "nvtx_inject: cannot open HCNN_NVTX_LOG=%s: %s\n", path, strerror(errno));
        return 0;
    }
    const NvtxExportTableCallbacks *cb = get_export_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable core = NULL;
    unsigned int size = 0;
    if (!cb || !cb->GetModuleFunctionTable ||
        !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &size) || !core ||
        size <= NVTX_CBID_CORE_RangePop) {
        fprintf(stderr, "nvtx_inject: this NVTX has no core module table of %d entries\n",
                NVTX_CBID_CORE_RangePop + 1);
        return 0;
    }
    *core[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push_a;
    *core[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop;
    return 1;
}
