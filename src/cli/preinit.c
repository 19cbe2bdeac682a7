/* Before any library starts: an OMP_NUM_THREADS libgomp would misread,
 * and enough address space for OpenBLAS to load.
 *
 * libgomp reads OMP_NUM_THREADS in its constructor and prints its own
 * "libgomp: Invalid value for environment variable OMP_NUM_THREADS" for
 * one it cannot parse ('abc', '0', ''), before main; hcnn refuses any
 * value but 1 to HCNN_MAX_THREADS in one message of its own
 * (src/core/threads.c).  So a value hcnn refuses is hidden from the
 * libraries here, renamed in place to HCNN_BAD_OMP_NT (the same length:
 * the environment's strings are rewritten, nothing allocated), where
 * hcnn_threads_resolve finds it and says what was wrong with it.
 *
 * OpenBLAS's OpenMP build maps a 128 MiB buffer for each of its threads in
 * its constructor, which runs before main (gotoblas_init, blas_thread_init:
 * one per thread of OMP_NUM_THREADS, at most the cores; 8 GiB on a 64-core
 * node), and when a mapping fails it tries again forever: under
 * `ulimit -v 300000`, `hcnn --version` sat until killed.  Nothing in main
 * can act before that.  An executable's .preinit_array runs before the
 * constructors of the shared libraries it loads (System V ABI,
 * "Initialization and Termination Functions"), so the room is tried here:
 * reserved (PROT_NONE, nothing touched) and given back.  Measured here
 * (OpenBLAS 0.3.21, OpenMPI 4.1, 2 cores): 46 MiB are mapped at this point
 * (86 with oneDNN 2.6.3 linked, 2026-11-28) and 302.7 MiB at main, 256 of
 * them OpenBLAS's two buffers; --version needs a limit of 302 MiB (358
 * with oneDNN); the check below measures what is mapped, not these.  Only system calls and snprintf on a stack
 * buffer here: nothing is asked of libc's allocator this early. */
#define _GNU_SOURCE
#include "config.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "hcnn/env.h"
#include "hcnn/threads.h"

static void hide_refused_thread_count(char **envp)
{
    static const char name[] = "OMP_NUM_THREADS=";
    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, name, sizeof name - 1))
            continue;
        if (hcnn_threads_env_value(*e + sizeof name - 1) < 0 || !(*e)[sizeof name - 1])
            memcpy(*e, HCNN_ENV_BAD_OMP_NT "=", sizeof name - 1);
    }
}

#if defined(HCNN_BLAS_OPENBLAS) /* other BLAS libraries fail an allocation with a message */
#define OPENBLAS_BUFFER_MIB 128ul
#define START_SLACK_MIB 16ul /* what the other libraries map before main: 0.7 MiB here */

/* MiB mapped now, from /proc/self/statm (0 if unknown) */
static unsigned long mapped_mib(void)
{
    char buf[64] = "";
    const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        const ssize_t n = read(fd, buf, sizeof buf - 1);
        buf[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    unsigned long pages = 0;
    for (const char *p = buf; *p >= '0' && *p <= '9'; p++)
        pages = pages * 10 + (unsigned long)(*p - '0');
    return pages * 4096ul >> 20;
}

/* The threads OpenBLAS starts with: OMP_NUM_THREADS's first number, at
 * most the cores this process may run on. */
static unsigned long openblas_threads(char **envp)
{
    cpu_set_t set;
    unsigned long cores = sched_getaffinity(0, sizeof set, &set) == 0 ? (unsigned long)CPU_COUNT(&set)
                                                                      : 1ul;
    unsigned long omp = 0;
    for (char **e = envp; e && *e; e++)
        if (!strncmp(*e, "OMP_NUM_THREADS=", 16))
            for (const char *p = *e + 16; *p >= '0' && *p <= '9'; p++)
                omp = omp * 10 + (unsigned long)(*p - '0');
    return omp > 0 && omp < cores ? omp : cores > 0 ? cores : 1ul;
}

static void check_address_space(char **envp)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    const unsigned long threads = openblas_threads(envp);
    const size_t need = (size_t)(threads * OPENBLAS_BUFFER_MIB + START_SLACK_MIB) << 20;
    void *p = mmap(NULL, need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
        munmap(p, need);
        return;
    }
    const unsigned long used = mapped_mib(), limit = (unsigned long)(rl.rlim_cur >> 20);
    char msg[640];
    const int n = snprintf(msg, sizeof msg,
                           "hcnn: error: the address-space limit (ulimit -v) is %lu MiB, %lu MiB "
                           "of it mapped before start-up: OpenBLAS maps %lu MiB for each of its "
                           "%lu threads (OMP_NUM_THREADS, at most the cores) when it loads, and "
                           "when it cannot it waits forever; hcnn needs a limit of at least %lu "
                           "MiB to start, and %lu MiB more for each thread to train (docs/checkpoints.md: "
                           "Faults, memory limits)\n",
                           limit, used, OPENBLAS_BUFFER_MIB, threads,
                           used + (unsigned long)(need >> 20), OPENBLAS_BUFFER_MIB);
    if (n > 0 && write(STDERR_FILENO, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0)
        _exit(1);
    _exit(1);
}

#endif

static void preinit(int argc, char **argv, char **envp)
{
    (void)argc, (void)argv;
    hide_refused_thread_count(envp);
#if defined(HCNN_BLAS_OPENBLAS)
    check_address_space(envp);
#endif
}

__attribute__((section(".preinit_array"), used)) static void (*const hcnn_preinit)(
    int, char **, char **) = preinit;
