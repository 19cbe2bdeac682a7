/* The run's OpenMP threads, below every module that computes: the trainer,
 * the BLAS kernels' measurement and hcnn plan take their count from here. */
#ifndef HCNN_THREADS_H
#define HCNN_THREADS_H

#include "hcnn/config.h"

/* Thread count: cfg->threads, else OMP_NUM_THREADS, else all cores; applied
 * to OpenMP (the BLAS runs single-threaded inside hcnn's threads: see
 * src/cpu/gemm.c).  Returns the count. */
int hcnn_setup_threads(const hcnn_config *cfg);

#endif
