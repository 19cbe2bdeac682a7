/* MPI start-up and MPI on backend memory (the job-wide abort path:
 * abort.c). */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "hcnn/env.h"

#include <string.h>

#if defined(OPEN_MPI) && defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h> /* MPIX_Query_cuda_support, where the library has it */
#endif
#endif

/* A rank's level in hcnn_comm_init's first allreduce when its set-up failed
 * before MPI (hcnn_comm_join_failed): below every thread level, the lowest
 * failing rank the least, its exit status in the low 8 bits. */
#define FAILED_BEFORE_MPI (INT_MIN / 2)

int hcnn_comm_init(hcnn_comm *c, int *argc, char ***argv)
{
    int provided = 0, already = 0;
    c->world = MPI_COMM_WORLD;
    c->initialized = 0;
    HCNN_MPI(MPI_Initialized(&already));
    if (!already) {
#ifdef OPEN_MPI
        /* the gradient buckets' algorithm (include/hcnn/comm.h says why);
         * read by MPI_Init from this process's environment */
        char alg[16];
        snprintf(alg, sizeof alg, "%d", HCNN_IALLREDUCE_DEFAULT);
        if (setenv(HCNN_IALLREDUCE_ENV, alg, 0) != 0)
            return hcnn_error_code(HCNN_EMPI, "cannot set %s", HCNN_IALLREDUCE_ENV);
#endif
        /* MULTIPLE: a pipeline's replicas under allreduce_progress: thread
         * have two threads in MPI at once (the communication thread's bucket
         * allreduces on the stage communicator, the training thread's
         * transfers on the pipeline's); a library that provides less says
         * so in `provided`, and hcnn_strategy_check refuses what needs it.
         * Its cost where one thread calls MPI: LeNet-5 data-parallel on 2
         * ranks (hcnn bench, batch 128, bucket_mb 0.05, MPI_Test polling),
         * 5 alternations on a 2-core Intel Xeon VM, Open MPI 4.1: medians
         * 55388 images/s asking MULTIPLE, 55011 asking SERIALIZED */
        if (hcnn_mpi_init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            return hcnn_error_code(HCNN_EMPI, "MPI_Init_thread failed");
        c->initialized = 1;
    }
    if (already)
        HCNN_MPI(MPI_Query_thread(&provided));
    /* the lowest over the ranks: every rank then takes the same decision
     * in hcnn_strategy_check (a rank refusing alone would leave the others
     * waiting in their first collective) */
    HCNN_MPI(MPI_Allreduce(&provided, &c->thread_level, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (c->thread_level < 0) { /* a rank failed before MPI: it says why */
        const int status = (c->thread_level - FAILED_BEFORE_MPI) % 256;
        const int failed = (c->thread_level - FAILED_BEFORE_MPI) / 256;
        if (c->initialized)
            hcnn_mpi_finalize();
        c->initialized = 0;
        return hcnn_error_unsaid(status == 75  ? HCNN_STOPPED
                                 : status == 2 ? HCNN_EINVAL
                                               : HCNN_EAGREED,
                                 "rank %d failed before MPI started (exit status %d): its "
                                 "message says why", failed, status);
    }
    HCNN_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    HCNN_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
    HCNN_MPI(MPI_Comm_size(MPI_COMM_WORLD, &c->size));
    MPI_Comm node;
    HCNN_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                                 &node));
    HCNN_MPI(MPI_Comm_rank(node, &c->local_rank));
    HCNN_MPI(MPI_Comm_free(&node));
    return HCNN_OK;
}

int hcnn_comm_join_failed(int status)
{
    int provided = 0, rank = 0;
    if (hcnn_mpi_init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return 1; /* no MPI: say it */
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const int mine = FAILED_BEFORE_MPI + 256 * rank + (status & 255);
    int lowest = mine;
    MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return lowest == mine;
}

void hcnn_comm_join_done(void)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin)
        hcnn_mpi_finalize();
}

void hcnn_comm_finalize(hcnn_comm *c)
{
    if (c->initialized)
        HCNN_MPI(hcnn_mpi_finalize());
    c->initialized = 0;
}

/* ---- MPI on backend memory ---------------------------------------------- */

int hcnn_mpi_device_aware(const hcnn_backend *be, char *why, size_t cap)
{
    if (be->host_memory) {
        snprintf(why, cap, "host memory: MPI uses it in place");
        return 1;
    }
    const char *assume = getenv(HCNN_ENV_MPI_ASSUME_DEVICE_AWARE);
    if (assume && strcmp(assume, "1") == 0 && be->emulated) {
        snprintf(why, cap, "HCNN_MPI_ASSUME_DEVICE_AWARE=1 on the emulated device (a test)");
        return 1;
    }
    if (strcmp(be->name, "cuda") != 0) {
        snprintf(why, cap, "no MPI library takes %s memory", be->name);
        return 0;
    }
#if defined(OMPI_HAVE_MPI_EXT_CUDA) && OMPI_HAVE_MPI_EXT_CUDA
    if (MPIX_Query_cuda_support()) {
        snprintf(why, cap, "the MPI library reports CUDA support (MPIX_Query_cuda_support)");
        return 1;
    }
    snprintf(why, cap, "this Open MPI was built without CUDA support (MPIX_Query_cuda_support is 0)");
    return 0;
#elif defined(MPIX_GPU_SUPPORT_CUDA)
    int yes = 0;
    if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes) == MPI_SUCCESS && yes) {
        snprintf(why, cap, "the MPI library reports CUDA support (MPIX_GPU_query_support)");
        return 1;
    }
    snprintf(why, cap, "the MPI library reports no CUDA support (MPIX_GPU_query_support)");
    return 0;
#else
    snprintf(why, cap, "the MPI library offers no run-time query of CUDA support");
    return 0;
#endif
}

int hcnn_mpi_buf_init(hcnn_mpi_buf *b, const hcnn_backend *be, float *dev, size_t n,
                      hcnn_mpi_use use, const char *what)
{
    b->be = be, b->dev = dev, b->n = n, b->host = NULL;
    if (!dev || be->host_memory || (be->mpi_direct && use == HCNN_MPI_P2P_OR_BLOCKING))
        return HCNN_OK;
    /* the backend's host memory: pinned on a GPU, copied to and from fastest */
    b->host = be->alloc_host(be, sizeof(float) * (n + 1), what);
    return b->host ? HCNN_OK : HCNN_ENOMEM;
}

void hcnn_mpi_buf_free(hcnn_mpi_buf *b)
{
    if (b->host)
        b->be->free_host(b->be, b->host);
    b->host = NULL;
}

float *hcnn_mpi_send_ptr(hcnn_mpi_buf *b, size_t off, size_t count)
{
    if (!b->host) {
        if (b->dev && b->be->mpi_direct)
            b->be->sync(b->be); /* the kernels that produce the floats */
        return b->dev + off;
    }
    b->be->download(b->be, b->host + off, b->dev + off, sizeof(float) * count);
    return b->host + off;
}

float *hcnn_mpi_recv_ptr(hcnn_mpi_buf *b, size_t off)
{
    if (b->host)
        return b->host + off;
    if (b->dev && b->be->mpi_direct)
        b->be->sync(b->be); /* queued kernels may still read what MPI will overwrite */
    return b->dev + off;
}

void hcnn_mpi_recv_done(hcnn_mpi_buf *b, size_t off, size_t count)
{
    if (b->host)
        b->be->upload(b->be, b->dev + off, b->host + off, sizeof(float) * count);
}

/* MPI counts are int: transfers go in chunks */
#define CHUNK ((size_t)1 << 28)

/* A host view of n floats of backend memory for one transfer: the buffer
 * itself, or a temporary copy (downloaded if `download`). */
static float *host_view(const hcnn_backend *be, const float *buf, size_t n, int download)
{
    if (be->host_memory)
        return (float *)buf;
    if (be->mpi_direct) {
        be->sync(be);
        return (float *)buf;
    }
    float *h = be->alloc_host(be, sizeof(float) * (n + 1), "MPI staging buffer");
    if (h && download)
        be->download(be, h, buf, sizeof(float) * n);
    return h;
}

static void host_view_done(const hcnn_backend *be, float *h, float *buf, size_t n, int upload)
{
    if (be->host_memory || be->mpi_direct)
        return;
    if (upload)
        be->upload(be, buf, h, sizeof(float) * n);
    be->free_host(be, h);
}

int hcnn_bcast_floats(const hcnn_backend *be, MPI_Comm comm, float *buf, size_t n, int root)
{
    int rank;
    HCNN_MPI(MPI_Comm_rank(comm, &rank));
    float *h = host_view(be, buf, n, rank == root);
    if (!h)
        return HCNN_ENOMEM;
    for (size_t off = 0; off < n; off += CHUNK) {
        const int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        HCNN_MPI(MPI_Bcast(h + off, cnt, MPI_FLOAT, root, comm));
    }
    host_view_done(be, h, buf, n, rank != root);
    return HCNN_OK;
}

int hcnn_allreduce_sum_floats(const hcnn_backend *be, MPI_Comm comm, float *buf, size_t n)
{
    float *h = host_view(be, buf, n, 1);
    if (!h)
        return HCNN_ENOMEM;
    for (size_t off = 0; off < n; off += CHUNK) {
        const int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        HCNN_MPI(MPI_Allreduce(MPI_IN_PLACE, h + off, cnt, MPI_FLOAT, MPI_SUM, comm));
    }
    host_view_done(be, h, buf, n, 1);
    return HCNN_OK;
}

int hcnn_send_floats(const hcnn_backend *be, MPI_Comm comm, const float *buf, size_t n, int dest,
                     int tag)
{
    float *h = host_view(be, buf, n, 1);
    if (!h)
        return HCNN_ENOMEM;
    for (size_t off = 0; off < n; off += CHUNK) {
        const int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        HCNN_MPI(MPI_Send(h + off, cnt, MPI_FLOAT, dest, tag, comm));
    }
    host_view_done(be, h, (float *)buf, n, 0);
    return HCNN_OK;
}

int hcnn_recv_floats(const hcnn_backend *be, MPI_Comm comm, float *buf, size_t n, int source,
                     int tag)
{
    float *h = host_view(be, buf, n, 0);
    if (!h)
        return HCNN_ENOMEM;
    for (size_t off = 0; off < n; off += CHUNK) {
        const int cnt = (int)(n - off < CHUNK ? n - off : CHUNK);
        HCNN_MPI(MPI_Recv(h + off, cnt, MPI_FLOAT, source, tag, comm, MPI_STATUS_IGNORE));
    }
    host_view_done(be, h, buf, n, 1);
    return HCNN_OK;
}
