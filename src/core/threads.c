/* The run's OpenMP threads (include/hcnn/threads.h). */
#include <omp.h>
#include <stdlib.h>

#include "hcnn/threads.h"

int hcnn_setup_threads(const hcnn_config *cfg)
{
    int t = cfg->threads;
    if (t <= 0) {
        const char *env = getenv("OMP_NUM_THREADS");
        t = env && atoi(env) > 0 ? omp_get_max_threads() : omp_get_num_procs();
    }
    if (t < 1)
        t = 1;
    omp_set_num_threads(t); /* the BLAS itself runs single-threaded (src/cpu/gemm.c) */
    return t;
}
