/* Training and evaluation drivers. */
#ifndef HCNN_TRAIN_H
#define HCNN_TRAIN_H

#include "hcnn/comm.h"
#include "hcnn/config.h"

/* Thread count: cfg->threads, else OMP_NUM_THREADS, else all cores; applied
 * to OpenMP and OpenBLAS.  Returns the count. */
int hcnn_setup_threads(const hcnn_config *cfg);

/* Train as configured; prints one line per epoch, writes the CSV and the
 * final checkpoint.  Returns HCNN_OK or an error code. */
int hcnn_train(const hcnn_config *cfg, const hcnn_comm *comm);

/* Evaluate a checkpoint on the configured test set; prints
 * "test_loss=... test_acc=..." */
int hcnn_evaluate(const hcnn_config *cfg, const hcnn_comm *comm, const char *checkpoint);

#endif
