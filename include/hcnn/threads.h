/* The run's OpenMP threads, below every module that computes: the trainer,
 * the BLAS kernels' measurement and hcnn plan take their count from here. */
#ifndef HCNN_THREADS_H
#define HCNN_THREADS_H

#include <stddef.h>

#include "hcnn/config.h"

/* Physical cores among the logical CPUs this process may run on (its
 * affinity mask, as Slurm's or mpirun's binding leaves it): the distinct
 * (package, core) pairs of /sys/devices/system/cpu/cpuN/topology, so that
 * the SMT siblings of a core count once.  *logical (may be NULL) gets the
 * mask's logical CPUs; where sysfs has no topology, the logical CPUs are
 * returned.  At most HCNN_MAX_THREADS. */
int hcnn_physical_cores(int *logical);

/* The run's thread count: cfg->threads; for 0, the first number of
 * OMP_NUM_THREADS when it is set, else the physical cores of the affinity
 * mask (hcnn_physical_cores).  how (may be NULL) gets a phrase for the run
 * header saying where the count came from.  HCNN_EINVAL after one message
 * when OMP_NUM_THREADS is set but is not a count of 1 to HCNN_MAX_THREADS
 * (libgomp would try to start them: OMP_NUM_THREADS=100000 crashed). */
int hcnn_threads_resolve(const hcnn_config *cfg, int *threads, char *how, size_t cap);

/* A value of OMP_NUM_THREADS: its first number (libgomp's count for the
 * outer level) when that is 1 to HCNN_MAX_THREADS, 0 for an empty value,
 * -1 for any other.  Only string work: the preinit (src/cli/preinit.c)
 * calls it before libc's allocator is asked for anything. */
long hcnn_threads_env_value(const char *value);
/* (the name under which hcnn's preinit hides an OMP_NUM_THREADS value it
 * refuses: HCNN_ENV_BAD_OMP_NT, include/hcnn/env.h) */

/* 1 when hcnn_threads_resolve would succeed (no message), else 0 */
int hcnn_threads_ok(const hcnn_config *cfg);

/* hcnn_threads_resolve, then the count applied to OpenMP (the BLAS itself
 * runs single-threaded inside hcnn's threads: see src/cpu/gemm.c). */
int hcnn_setup_threads(const hcnn_config *cfg, int *threads, char *how, size_t cap);

#endif
