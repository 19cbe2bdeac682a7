/* The strategy table's dispatch and what every strategy shares: the layout
 * checks common to all, the batch staged into backend memory
 * (include/hcnn/strategy.h). */
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/strategy.h"

extern const hcnn_strategy_ops hcnn_strategy_data, hcnn_strategy_pipeline;

const hcnn_strategy_ops *hcnn_strategy_ops_for(hcnn_strategy_kind kind)
{
    return kind == HCNN_STRATEGY_PIPELINE ? &hcnn_strategy_pipeline : &hcnn_strategy_data;
}

static const char *thread_level_name(int level)
{
    return level >= MPI_THREAD_MULTIPLE     ? "MPI_THREAD_MULTIPLE"
           : level >= MPI_THREAD_SERIALIZED ? "MPI_THREAD_SERIALIZED"
           : level >= MPI_THREAD_FUNNELED   ? "MPI_THREAD_FUNNELED"
                                            : "MPI_THREAD_SINGLE";
}

int hcnn_strategy_check(const hcnn_config *cfg, const hcnn_comm *comm)
{
    const int root = comm->rank == 0;
    if (cfg->strategy == HCNN_STRATEGY_SERIAL && comm->size != 1) {
        if (root)
            hcnn_error("%s: strategy 'serial' runs on one rank, but %d ranks were started "
                       "(use --set strategy=data)",
                       cfg->path, comm->size);
        return HCNN_EINVAL;
    }
    if (cfg->strategy == HCNN_STRATEGY_SERIAL && cfg->optimizer_sharding != HCNN_SHARDING_NONE) {
        if (root)
            hcnn_error("%s: optimizer_sharding '%s' shards the optimiser step over the ranks "
                       "holding the same parameters (strategy 'data', or a pipeline's "
                       "replicas); strategy 'serial' has one rank (use optimizer_sharding: none)",
                       cfg->path, hcnn_sharding_name(cfg->optimizer_sharding));
        return HCNN_EINVAL;
    }
    const int rc = hcnn_strategy_ops_for(cfg->strategy)->check(cfg, comm);
    if (rc)
        return rc;
    const int need = hcnn_strategy_thread_level(cfg, comm->size);
    if (comm->thread_level < need) {
        if (root)
            hcnn_error("%s: %s needs %s, this MPI provides %s (%s)", cfg->path,
                       need == MPI_THREAD_MULTIPLE
                           ? "allreduce_progress 'thread' with a pipeline's replicas (the "
                             "replicas' allreduce on its thread while the stage's transfers go "
                             "on)"
                       : need == MPI_THREAD_SERIALIZED
                           ? "allreduce_progress 'thread' (the allreduce on a thread of its own)"
                           : "a run on several ranks (MPI called beside the OpenMP threads)",
                       thread_level_name(need), thread_level_name(comm->thread_level),
                       need > MPI_THREAD_FUNNELED
                           ? "use --set allreduce_progress=test, or an MPI that provides it: "
                             "Cray MPICH with MPICH_MAX_THREAD_SAFETY=multiple"
                           : "use an MPI built with thread support");
        return HCNN_EINVAL;
    }
    return HCNN_OK;
}

int hcnn_strategy_thread_level(const hcnn_config *cfg, int world)
{
    if (world <= 1)
        return MPI_THREAD_SINGLE; /* nothing calls MPI during the run's steps */
    if (cfg->allreduce_progress != HCNN_PROGRESS_THREAD)
        return MPI_THREAD_FUNNELED; /* MPI_Test from the main thread inside OpenMP regions */
    if (cfg->strategy != HCNN_STRATEGY_PIPELINE)
        /* the training thread makes no MPI call from a bucket's start to
         * the wait that ends the step (grad_sync.c), while the
         * communication thread sums */
        return MPI_THREAD_SERIALIZED;
    const int stages = cfg->stages > 0 ? cfg->stages : 1;
    /* one replica: no allreduce, no communication thread */
    return world / stages > 1 ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
}

int hcnn_strategy_pass_samples(const hcnn_config *cfg, int world)
{
    world = world > 0 ? world : 1;
    if (cfg->strategy == HCNN_STRATEGY_SERIAL)
        return cfg->batch_size;
    if (cfg->strategy == HCNN_STRATEGY_DATA)
        return (cfg->batch_size + world - 1) / world;
    const int replicas = world / cfg->stages > 0 ? world / cfg->stages : 1;
    const int shard = (cfg->batch_size + replicas - 1) / replicas;
    return (shard + cfg->microbatches - 1) / cfg->microbatches;
}

int hcnn_strategy_init(hcnn_strategy *s, const hcnn_config *cfg, const hcnn_comm *comm,
                       hcnn_net *net, int need_train)
{
    memset(s, 0, sizeof *s);
    s->ops = hcnn_strategy_ops_for(cfg->strategy);
    s->cfg = cfg, s->comm = comm, s->net = net;
    s->replicas = comm->world;
    int rc = s->ops->init(s, need_train);
    if (rc)
        return rc;
    s->scratch.ctx.seed = cfg->seed;
    const hcnn_backend *be = net->be;
    if (be->host_memory)
        return HCNN_OK;
    /* a step's shard or an evaluation batch, whichever is larger */
    const int shard = (cfg->batch_size + s->ngroups - 1) / s->ngroups;
    const size_t cap = (size_t)(shard > s->eval_batch ? shard : s->eval_batch);
    const size_t in_sz = (size_t)net->in_c * net->in_h * net->in_w;
    s->x_dev = be->alloc(be, sizeof(float) * in_sz * cap, "input batch");
    s->y_dev = be->alloc(be, sizeof(int32_t) * cap, "input labels");
    return s->x_dev && s->y_dev ? HCNN_OK : HCNN_ENOMEM;
}

void hcnn_strategy_free(hcnn_strategy *s)
{
    if (!s->ops)
        return;
    s->ops->free(s);
    if (s->net) {
        s->net->be->free(s->net->be, s->x_dev);
        s->net->be->free(s->net->be, s->y_dev);
    }
    memset(s, 0, sizeof *s);
}

void hcnn_strategy_stage(hcnn_strategy *s, const float **x, const int32_t **y, int n, int queued)
{
    const hcnn_backend *be = s->net->be;
    if (be->host_memory || n <= 0)
        return;
    const size_t in_sz = (size_t)s->net->in_c * s->net->in_h * s->net->in_w;
    void (*up)(const hcnn_backend *, void *, const void *, size_t) =
        queued ? be->upload_async : be->upload;
    up(be, s->x_dev, *x, sizeof(float) * in_sz * (size_t)n);
    up(be, s->y_dev, *y, sizeof(int32_t) * (size_t)n);
    *x = s->x_dev, *y = s->y_dev;
}
