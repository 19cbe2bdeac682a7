/* SGD with momentum and weight decay (PyTorch semantics, see backend.h). */
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/optim.h"

int hcnn_sgd_init(hcnn_sgd *opt, const hcnn_backend *be, size_t nparams, const hcnn_config *cfg)
{
    memset(opt, 0, sizeof *opt);
    opt->velocity = be->alloc(be, sizeof(float) * (nparams + 1), "momentum buffer");
    if (!opt->velocity)
        return HCNN_ENOMEM;
    be->fill(be, opt->velocity, nparams, 0.0f);
    opt->n = nparams;
    opt->momentum = (float)cfg->momentum;
    opt->weight_decay = (float)cfg->weight_decay;
    opt->nesterov = cfg->nesterov;
    return HCNN_OK;
}

void hcnn_sgd_step(hcnn_sgd *opt, const hcnn_backend *be, float *params, float *grads,
                   size_t off, size_t count, float lr, double *stats)
{
    if (stats)
        be->zero(be, stats + HCNN_STAT_WSQ, sizeof(double) * 2);
    be->sgd_step(be, params + off, grads + off, opt->velocity + off, count, lr, opt->momentum,
                 opt->weight_decay, opt->nesterov, stats);
}

void hcnn_sgd_free(hcnn_sgd *opt, const hcnn_backend *be)
{
    if (opt->velocity)
        be->free(be, opt->velocity);
    memset(opt, 0, sizeof *opt);
}
