/* Learning-rate schedules with linear warm-up. */
#include <math.h>

#include "hcnn/optim.h"

double hcnn_lr_at(const hcnn_config *cfg, long step, long steps_per_epoch)
{
    if (steps_per_epoch < 1)
        steps_per_epoch = 1;
    const long warm = (long)ceil(cfg->warmup_epochs * (double)steps_per_epoch);
    if (step < warm)
        return cfg->lr * (double)(step + 1) / (double)warm;
    switch (cfg->schedule) {
    case HCNN_SCHED_STEP: {
        const long epoch = step / steps_per_epoch;
        return cfg->lr * pow(cfg->lr_gamma, (double)(epoch / cfg->lr_step_epochs));
    }
    case HCNN_SCHED_COSINE: {
        /* over the configured epochs: max_steps stops a run early but does
         * not change its schedule */
        const long total = (long)cfg->epochs * steps_per_epoch;
        const long span = total - warm;
        const double t = span > 1 ? (double)(step - warm) / (double)(span - 1) : 1.0;
        const double tt = t > 1.0 ? 1.0 : t;
        return cfg->min_lr + (cfg->lr - cfg->min_lr) * 0.5 * (1.0 + cos(3.14159265358979323846 * tt));
    }
    case HCNN_SCHED_CONSTANT:
    default:
        return cfg->lr;
    }
}
