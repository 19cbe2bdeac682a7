/* The model's GEMMs, as the layers issue them for one training pass on a
 * rank (hcnn_net_pass_gemms): listed for the measurement's key, and
 * timed in each child process under the kernels it loaded. */
#include <stdio.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/net.h"
#include "hcnn/strategy.h"
#include "hcnn/threads.h"
#include "internal.h"

/* Builds the network (parameters left zero: a GEMM's time does not depend
 * on them) and its scratch for a pass, lists (reps 0) or times its GEMMs. */
int hcnn_blas_model_gemms(const blas_run *run, int reps, hcnn_pass_gemms *out, int *samples)
{
    const hcnn_config *cfg = run->cfg;
    hcnn_net net;
    hcnn_scratch s;
    const int n = hcnn_strategy_pass_samples(cfg, run->world);
    *samples = n;
    int rc = hcnn_net_create(&net, &cfg->model, hcnn_backend_cpu(), cfg->path);
    if (rc)
        return rc;
    net.chunk_floats = (size_t)(cfg->im2col_mb * 1048576.0 / sizeof(float));
    net.conv_algo = cfg->conv_algo;
    /* a batch the model cannot take: not measured, the run says why */
    rc = hcnn_net_capacity_ok(&net, 0, net.nlayers, n) ? hcnn_scratch_alloc(&s, &net, 0, net.nlayers, n)
                                                        : HCNN_EINVAL;
    if (!rc) {
        rc = hcnn_net_pass_gemms(&net, &s.ctx, 0, net.nlayers, n, reps, out);
        hcnn_scratch_free(&s);
    }
    hcnn_net_free(&net);
    return rc;
}

int hcnn_blas_probe(const hcnn_config *cfg, int world)
{
    blas_run run = {.cfg = cfg, .world = world};
    hcnn_pass_gemms g;
    int n;
    if (hcnn_setup_threads(cfg, &run.threads, NULL, 0))
        return HCNN_EINVAL;
    if (hcnn_blas_take_buffers(run.threads)) /* under ulimit -v: a message, not a hang */
        return HCNN_ENOMEM;
    /* three timings of every shape, the median of each */
    const int rc = hcnn_blas_model_gemms(&run, 3, &g, &n);
    if (rc)
        return rc;
    printf("probe kernels=%s seconds=%.6f shapes=%d hash=%016llx\n", hcnn_blas_loaded_kernels(),
           g.seconds, g.shapes, (unsigned long long)g.hash);
    return fflush(stdout) == 0 ? HCNN_OK : HCNN_EIO;
}
