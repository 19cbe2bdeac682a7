/* The run's OpenMP threads (include/hcnn/threads.h). */
#define _GNU_SOURCE
#include <omp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/env.h"
#include "hcnn/threads.h"

/* a small non-negative integer from a sysfs file, -1 if unreadable */
static long sysfs_number(int cpu, const char *leaf)
{
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, leaf);
    FILE *f = fopen(path, "r"); /* sysfs attributes are regular files: no FIFO here */
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

int hcnn_physical_cores(int *logical)
{
    /* up to 8192 logical CPUs: cpu_set_t's fixed 1024 is too few for the
     * largest nodes, whose mask sched_getaffinity then refuses (EINVAL) */
    enum { MAX_CPUS = 8192 };
    const size_t size = CPU_ALLOC_SIZE(MAX_CPUS);
    cpu_set_t *set = CPU_ALLOC(MAX_CPUS);
    long *ids = malloc(sizeof *ids * MAX_CPUS);
    int nlogical = 0, cores = 0, known = set && ids;
    if (known && sched_getaffinity(0, size, set) == 0) {
        for (int cpu = 0; cpu < MAX_CPUS; cpu++) {
            if (!CPU_ISSET_S(cpu, size, set))
                continue;
            nlogical++;
            const long core = sysfs_number(cpu, "core_id");
            const long package = sysfs_number(cpu, "physical_package_id");
            if (core < 0 || package < 0) {
                known = 0;
                continue;
            }
            const long id = package << 32 | core;
            int seen = 0;
            for (int i = 0; i < cores && !seen; i++)
                seen = ids[i] == id;
            if (!seen)
                ids[cores++] = id;
        }
    } else {
        known = 0;
    }
    if (nlogical == 0)
        nlogical = omp_get_num_procs();
    if (!known || cores == 0)
        cores = nlogical;
    CPU_FREE(set);
    free(ids);
    if (logical)
        *logical = nlogical;
    return cores < HCNN_MAX_THREADS ? (cores > 0 ? cores : 1) : HCNN_MAX_THREADS;
}

long hcnn_threads_env_value(const char *value)
{
    if (!value[0])
        return 0;
    long v = 0;
    const char *p = value;
    for (; *p >= '0' && *p <= '9'; p++)
        if ((v = v * 10 + (*p - '0')) > HCNN_MAX_THREADS)
            return -1;
    return p == value || (*p && *p != ',') || v < 1 ? -1 : v;
}

/* OMP_NUM_THREADS as hcnn_threads_resolve sees it: *env its text (the one
 * the preinit hid when it refused it), 0 unset or empty, -1 refused */
static long env_threads(const char **env)
{
    const char *hidden = getenv(HCNN_ENV_BAD_OMP_NT);
    *env = hidden ? hidden : getenv("OMP_NUM_THREADS");
    return *env ? hcnn_threads_env_value(*env) : 0;
}

int hcnn_threads_resolve(const hcnn_config *cfg, int *threads, char *how, size_t cap)
{
    char dummy[8];
    if (!how)
        how = dummy, cap = sizeof dummy;
    how[0] = '\0';
    if (cfg->threads > 0) {
        *threads = cfg->threads;
        snprintf(how, cap, "threads: %d", cfg->threads);
        return HCNN_OK;
    }
    const char *env;
    const long t = env_threads(&env);
    if (t < 0)
        return hcnn_error_code(HCNN_EINVAL,
                               "OMP_NUM_THREADS='%.40s' is not a thread count hcnn runs (1 to "
                               "%d; threads: 0 in %s takes it from there): set it within that "
                               "range, unset it (the physical cores), or set the key threads",
                               env, HCNN_MAX_THREADS, cfg->path[0] ? cfg->path : "the config");
    if (t > 0) {
        *threads = (int)t;
        snprintf(how, cap, "threads: 0: OMP_NUM_THREADS=%ld", t);
        return HCNN_OK;
    }
    int logical;
    *threads = hcnn_physical_cores(&logical);
    snprintf(how, cap, "threads: 0: the physical cores of this process's %d logical CPU%s",
             logical, logical == 1 ? "" : "s");
    return HCNN_OK;
}

int hcnn_threads_ok(const hcnn_config *cfg)
{
    const char *env;
    return cfg->threads > 0 || env_threads(&env) >= 0;
}

int hcnn_setup_threads(const hcnn_config *cfg, int *threads, char *how, size_t cap)
{
    const int rc = hcnn_threads_resolve(cfg, threads, how, cap);
    if (!rc)
        omp_set_num_threads(*threads);
    return rc;
}
