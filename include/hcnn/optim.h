/* SGD with momentum (optionally Nesterov) and weight decay over the
 * contiguous parameter buffer, and learning-rate schedules. */
#ifndef HCNN_OPTIM_H
#define HCNN_OPTIM_H

#include <stddef.h>

#include "hcnn/backend.h"
#include "hcnn/config.h"

typedef struct hcnn_sgd {
    float *velocity;     /* momentum buffer, same layout as the parameters (backend memory) */
    size_t n;
    float momentum, weight_decay;
    int nesterov;
} hcnn_sgd;

int hcnn_sgd_init(hcnn_sgd *opt, const hcnn_backend *be, size_t nparams, const hcnn_config *cfg);
/* Update params[off, off + count) from grads of the same range, which it
 * leaves zero; with stats (backend memory, may be NULL),
 * stats[HCNN_STAT_WSQ] and [VSQ] := the sums of squares of the range's new
 * parameters and momentum. */
void hcnn_sgd_step(hcnn_sgd *opt, const hcnn_backend *be, float *params, float *grads,
                   size_t off, size_t count, float lr, double *stats);
void hcnn_sgd_free(hcnn_sgd *opt, const hcnn_backend *be);

/* Learning rate at optimiser step `step` (0-based) of a run with
 * `steps_per_epoch` steps per epoch and cfg->epochs epochs:
 *   warm-up: lr * (step + 1) / warmup_steps for the first warmup_steps,
 *   then constant | step (lr * gamma^floor(epoch / lr_step_epochs)) |
 *   cosine (min_lr + (lr - min_lr) * (1 + cos(pi * t)) / 2, t from 0 to 1
 *   over the steps after warm-up of cfg->epochs epochs; max_steps does not
 *   change the schedule). */
double hcnn_lr_at(const hcnn_config *cfg, long step, long steps_per_epoch);

#endif
