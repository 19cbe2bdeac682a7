/* The one interface through which all tensor math goes: a backend instance.
 *
 * Layers, the network, the strategies and the trainer never call BLAS or
 * loop over a tensor themselves: they call these operations, so a device
 * backend (src/cuda/) replaces the CPU one (src/cpu/) without touching
 * them.  All tensors are float32, NCHW, contiguous.  "Accumulate"
 * operations add into their output (gradients accumulate over
 * micro-batches); all others overwrite.
 *
 * The instance.  hcnn_backend_create makes one per run; every operation
 * takes it first, so a device backend keeps its stream, library handles,
 * workspaces and device id in `state`, not in globals.  Operations may be
 * asynchronous: they are queued in order on the instance's stream and may
 * return before they have run (the CPU backend runs them at once).  The
 * host sees their results only through download (which waits for the work
 * before it), sync, or a timer's stop.
 *
 * Memory: every tensor buffer (parameters, gradients, statistics, momentum,
 * activations, workspaces, the step's statistics) comes from alloc and goes
 * back through free; the host reads and writes it only through download and
 * upload, or directly when host_memory says the backend's memory is the
 * host's (then MPI also communicates it in place; see src/parallel/comm.c
 * for the staging otherwise).  alloc_host gives host memory the backend
 * copies fastest from and to (pinned memory on a device): the loader's
 * batches and the MPI staging buffers.
 *
 * What is the backend's to decide: how a convolution runs (the CPU
 * backend's im2col / shifted-window plan and its per-thread items,
 * src/cpu/conv_plan.c; cuDNN or im2col + cuBLAS on a device), how big a
 * work unit of whole-network execution is (unit_images: the CPU's threads
 * each carry units of samples through the network; a device none), how
 * many host threads run (threads, parallel), and how reductions are
 * ordered (in an order fixed by the shapes, never by the thread count:
 * the same bits on every run).  docs/architecture.md, "Adding a backend". */
#ifndef HCNN_BACKEND_H
#define HCNN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "hcnn/model_spec.h"

typedef struct hcnn_conv_geom {
    int c, h, w;       /* input channels and spatial size */
    int kh, kw;        /* kernel */
    int sh, sw;        /* stride */
    int ph, pw;        /* zero padding */
    int oh, ow;        /* output spatial size */
} hcnn_conv_geom;

typedef struct hcnn_pool_geom {
    int c, h, w;
    int kh, kw, sh, sw, ph, pw;
    int oh, ow;
} hcnn_pool_geom;

/* What a backend keeps for one convolution layer between its calls (the
 * CPU backend: Winograd's transformed weights, computed once per training
 * step), owned by the layer: data is the backend's, released with the
 * layer through release (NULL: nothing kept); transforms counts the weight
 * transforms computed for the layer (the test that there is one a step). */
typedef struct hcnn_conv_cache {
    void *data;
    void (*release)(void *data);
    long transforms;
} hcnn_conv_cache;

/* A convolution: its geometry and output channels, and the layer's cache
 * (NULL: the backend keeps nothing for this call). */
typedef struct hcnn_conv_desc {
    hcnn_conv_geom g;
    int out_c;
    hcnn_conv_cache *cache;
} hcnn_conv_desc;

/* The batch statistics a training convolution gathers for the batch-norm
 * that follows it, while it has each piece of its output in cache: for
 * each image, channel and band of its plane (bands of band_px pixels, the
 * last one the rest), the band's mean and its sum of squared deviations
 * from that mean (two passes over the band), [n][channels][bands][2] in
 * part (backend memory of cap floats).  conv_fwd sets bands and band_px
 * (bands 0: it gathered nothing, and bn_fwd_train reads its input for
 * them); bn_fwd_train combines the bands of a channel in the order (image,
 * band), in double: the two-pass variance's accuracy without the two
 * passes over x. */
typedef struct hcnn_bn_stats {
    float *part;
    size_t cap;
    int bands, band_px;
} hcnn_bn_stats;

/* How a backend call may run, from the caller: its workspace (backend
 * memory, sized by the backend's own *_workspace), the configuration's
 * execution keys (the CPU backend's; a device backend may ignore them),
 * and the hook that drives communication during long work. */
typedef struct hcnn_exec {
    float *ws;
    size_t ws_floats;
    size_t max_chunk_floats;   /* im2col_mb: the most floats of one column chunk */
    hcnn_conv_algo conv_algo;
    /* 1: this call is one work unit of whole-network execution, run on the
     * calling thread alone (it cuts no items for other threads) */
    int in_unit;
    void (*poll)(void *arg);   /* between pieces of work (may be NULL) */
    void *poll_arg;
    /* nonzero: the weights are those of every other call with this key (the
     * calls of one training step), so what a backend derived from them in
     * one call (a conv cache) serves the others; 0: derive it again */
    uint64_t weights_key;
    /* conv_fwd in training, followed by a batch-norm: where to gather its
     * output's statistics (NULL: none wanted) */
    hcnn_bn_stats *stats;
    /* conv_fwd of a backend with conv_relu: y = relu(conv(x, w) + b), the
     * ReLU layer after the convolution run in its output's last pass */
    int relu;
} hcnn_exec;

/* graphs a backend keeps at once (graph_begin .. graph_launch): a step
 * cut at its communication points is several (src/train/graphs.c) */
#define HCNN_GRAPH_SLOTS 256

/* The GEMMs a backend issues for a pass (the profile's raw-GEMM reference):
 * forward into fwd[], backward into bwd[] (NULL arrays: only counted);
 * per_thread: issued by every thread at once, single-threaded. */
typedef struct hcnn_gemm_shape {
    int ta, tb, m, n, k;
    int per_thread;
} hcnn_gemm_shape;

/* what a convolution's describe line says of a layer that keeps FP32 under
 * a lower precision (conv_describe) */
#define HCNN_DESCRIBE_FP32_KEPT "kept in FP32"

typedef struct hcnn_gemm_list {
    hcnn_gemm_shape *fwd, *bwd;
    int nfwd, nbwd;
    double flops;            /* of the pass, forward and backward */
} hcnn_gemm_list;

static inline void hcnn_gemm_push(hcnn_gemm_list *g, int backward, int ta, int tb, int m, int n,
                                  int k, int per_thread)
{
    hcnn_gemm_shape *arr = backward ? g->bwd : g->fwd;
    int *cnt = backward ? &g->nbwd : &g->nfwd;
    if (arr)
        arr[*cnt] = (hcnn_gemm_shape){ta, tb, m, n, k, per_thread};
    (*cnt)++;
}

/* A timer over the work queued between its start and stop. */
typedef struct hcnn_timer {
    double host_s;          /* the CPU's clock */
    void *start, *stop;     /* a device's events */
} hcnn_timer;

/* The step's statistics, doubles in backend memory, read back once per
 * step: softmax_xent adds to the first two, sum_sq to the third (given
 * stats + 1, to the fourth: the batch-norm statistics' sum of squares);
 * sgd_step to the last two (the sums of squares of the parameters and the
 * momentum it wrote, read back with the next step's; the first
 * HCNN_STATS_STEP are those a step starts from zero). */
enum {
    HCNN_STAT_LOSS = 0,
    HCNN_STAT_CORRECT = 1,
    HCNN_STAT_SUMSQ = 2,
    HCNN_STAT_STATE_SUMSQ = 3,
    HCNN_STAT_WSQ = 4,
    HCNN_STAT_VSQ = 5,
    HCNN_STATS = 6
};
#define HCNN_STATS_STEP 4

/* Whole-network execution makes at most this many units of a pass. */
#define HCNN_MAX_UNITS 64

/* How a pass of one operation is cut for the threads (pass_pieces; hcnn
 * plan prices a pass with fewer samples than threads from it).  A pass is
 * phases run one after the other, each ending at a barrier (or the end of
 * a parallel region); phase k offers `pieces` pieces, each run whole by
 * one thread, which together cost `work` (the backend's own estimate, in
 * multiply-add equivalents: only ratios between the phases of one layer's
 * passes are meant), the largest of them `largest` (0: all equal), and
 * runs `repeat` times (a chunk's phases, one chunk after another). */
typedef struct hcnn_phase {
    const char *name; /* what the phase does ("forward GEMMs", ...): a constant string */
    long pieces;
    double work;     /* of one repeat */
    double largest;  /* of one piece; 0: work / pieces */
    int repeat;
} hcnn_phase;

#define HCNN_MAX_PHASES 40

typedef struct hcnn_pieces {
    int nphases;
    hcnn_phase phase[HCNN_MAX_PHASES];
} hcnn_pieces;

/* Appends a phase named `name` (a constant string; nothing for repeat < 1
 * or work <= 0).  Past
 * HCNN_MAX_PHASES (no pass of the CPU backend has half as many) the last
 * phase absorbs its work, with the fewer of the two piece counts. */
static inline void hcnn_pieces_push(hcnn_pieces *p, const char *name, long pieces, double work,
                                    double largest, int repeat)
{
    if (repeat < 1 || !(work > 0.0))
        return;
    pieces = pieces < 1 ? 1 : pieces;
    if (p->nphases == HCNN_MAX_PHASES) {
        hcnn_phase *last = &p->phase[HCNN_MAX_PHASES - 1];
        last->work = (last->work * last->repeat + work * repeat) / last->repeat;
        last->pieces = last->pieces < pieces ? last->pieces : pieces;
        last->largest = 0.0;
        return;
    }
    hcnn_phase *ph = &p->phase[p->nphases++]; /* (no compound literal: C++ includes this) */
    ph->name = name, ph->pieces = pieces, ph->work = work, ph->largest = largest;
    ph->repeat = repeat;
}

/* The operation pass_pieces is asked about, with the sizes it needs (all
 * per sample of the pass's n). */
typedef enum {
    HCNN_OP_CONV,        /* conv_fwd; conv_bwd: the weight gradient (and bias), and the
                            input gradient when need_dx */
    HCNN_OP_FC,          /* gemm of x [n][in] by w [out][in]^T and add_row_bias; backward:
                            the weight gradient, row_sum_acc, the input gradient (need_dx) */
    HCNN_OP_BN,          /* bn_fwd_train; bn_bwd: c channels of np floats */
    HCNN_OP_POOL,        /* maxpool / avgpool, forward and backward: c planes of np floats in,
                            out_np out */
    HCNN_OP_ELEMENTWISE, /* one element-wise operation over c x np floats (relu_fwd, relu_bwd,
                            add, add_acc, mul, dropout_fwd), the same each way */
    HCNN_OP_COPY         /* copy of c x np floats, the same each way */
} hcnn_op_kind;

typedef struct hcnn_op {
    hcnn_op_kind kind;
    const hcnn_conv_desc *conv; /* HCNN_OP_CONV (its cache unused) */
    int in, out;                /* HCNN_OP_FC: features */
    int c, np, out_np;          /* the others: channels, floats a channel (POOL: in, out) */
    int need_dx;                /* CONV, FC: the backward computes the input gradient */
    int has_bias;               /* CONV, FC */
    int gathered;               /* BN: its statistics gathered by the convolution before it
                                   (hcnn_bn_stats): the forward reads x once */
} hcnn_op;

typedef struct hcnn_backend hcnn_backend;

/* How a backend lays out the activations its operations take and give (a
 * layer's input and output, their gradients, batch-norm's and pooling's x
 * and y): [n][c][h][w] (NCHW, every CPU backend's) or [n][h][w][c] (NHWC:
 * the channels of a pixel side by side, as tensor-core convolution
 * kernels read them).  Weights, biases and batch-norm's per-channel
 * vectors are laid out the same in both ([out][in][kh][kw] for a
 * convolution's), and so is everything of 1 x 1 pixels (a flattened
 * layer's [n][features], logits).  The network converts where the layout
 * meets the data and the model's NCHW semantics: the input of the first
 * block and flatten (src/model/pass.c, src/layers/flatten.c). */
typedef enum hcnn_act_layout { HCNN_LAYOUT_NCHW = 0, HCNN_LAYOUT_NHWC = 1 } hcnn_act_layout;

struct hcnn_backend {
    const char *name;
    void *state;         /* the backend's own: stream, handles, device id */

    /* 1: alloc returns host memory, which host code and MPI may use in
     * place; 0: device memory, reached only through upload and download */
    int host_memory;
    /* Device memory only.  1: MPI reads and writes it in place (a CUDA-aware
     * MPI library; set by the run from mpi_device_memory and what the
     * library reports at run time, src/parallel/comm.c), after a sync;
     * 0: through the backend's pinned host buffers.  The backend sets 0. */
    int mpi_direct;
    /* 1: the device is the emulation of src/cuda/emu/, whose "device"
     * memory is host memory in an arena (a test may then let MPI use it in
     * place, as a CUDA-aware library would) */
    int emulated;
    /* the activations' layout (hcnn_act_layout above), fixed at creation */
    hcnn_act_layout layout;
    /* 1: conv_fwd applies hcnn_exec.relu, so a ReLU right after a
     * convolution runs inside the convolution's forward (src/layers/chain.c;
     * its backward stays the ReLU layer's, from the ReLU's output); 0: the
     * ReLU runs as its own layer */
    int conv_relu;

    /* Run fn(arg, t, nt) once on each of the backend's nt host threads
     * (nt = 1 for a device backend).  Backend operations called from fn
     * run on the calling thread only. */
    void (*parallel)(const hcnn_backend *be, void (*fn)(void *arg, int t, int nt), void *arg);
    /* nt that parallel() will use */
    int (*threads)(const hcnn_backend *be);
    /* Whole-network execution: the samples of a work unit for a pass of n
     * (each carried through every block by one host thread; a size fixed
     * by n, never by the thread count, and at most HCNN_MAX_UNITS units);
     * 0: the backend runs block by block. */
    int (*unit_images)(const hcnn_backend *be, int n);

    /* The arithmetic of its products (include/hcnn/model_spec.h): HCNN_OK, or
     * HCNN_EINVAL after one message when the backend cannot (the CPU: no
     * tf32; bf16 only where hcnn_cpu_precision_check allows it). */
    int (*set_precision)(hcnn_backend *be, hcnn_precision p);
    /* One line for the run header: where the math runs (a GPU: its name,
     * memory, compute capability, driver and runtime) */
    void (*describe)(const hcnn_backend *be, char *buf, size_t cap);

    /* ---- memory and ordering ---- */
    /* alloc prints what failed and returns NULL */
    void *(*alloc)(const hcnn_backend *be, size_t bytes, const char *what);
    void (*free)(const hcnn_backend *be, void *p);
    void *(*alloc_host)(const hcnn_backend *be, size_t bytes, const char *what);
    void (*free_host)(const hcnn_backend *be, void *p);
    /* copies host <-> backend memory, waiting until done (download also
     * waits for the work queued before it) */
    void (*upload)(const hcnn_backend *be, void *dst_dev, const void *src_host, size_t bytes);
    void (*download)(const hcnn_backend *be, void *dst_host, const void *src_dev, size_t bytes);
    /* the same, queued in order with the operations: the host buffer (from
     * alloc_host) must stay untouched until a later sync */
    void (*upload_async)(const hcnn_backend *be, void *dst_dev, const void *src_host,
                         size_t bytes);
    void (*download_async)(const hcnn_backend *be, void *dst_host, const void *src_dev,
                           size_t bytes);
    /* waits until everything queued has run */
    void (*sync)(const hcnn_backend *be);
    /* the timer pair: seconds of the work queued between start and stop
     * (stop waits for it) */
    void (*timer_start)(const hcnn_backend *be, hcnn_timer *t);
    double (*timer_stop)(const hcnn_backend *be, hcnn_timer *t);
    /* Captured work (CUDA graphs; NULL in a backend without them, the
     * CPU's): the operations queued between graph_begin and graph_end are
     * recorded, not run, as graph `slot` (0 .. HCNN_GRAPH_SLOTS - 1,
     * replacing what it held), with the pointers and arguments they had;
     * graph_launch queues them again.  Between the two nothing may wait for
     * the device (no download, sync or timer stop).  graph_end returns
     * HCNN_OK, or an error when the capture failed: then nothing of it ran
     * and the slot is empty (the caller issues the work directly).
     * graph_launch returns 1 when it launched the graph, 0 when the slot is
     * empty: the backend empties every slot when memory a graph may use
     * moves (a buffer it grows), and the caller then issues the work
     * directly. */
    int (*graph_begin)(const hcnn_backend *be);
    int (*graph_end)(const hcnn_backend *be, int slot);
    int (*graph_launch)(const hcnn_backend *be, int slot);
    /* Optional (NULL: a captured sgd_step replays with the rate it was
     * captured with): an sgd_step captured in a graph reads its learning
     * rate at each launch from a host slot, and this sets it, so that one
     * optimiser graph serves a schedule whose rate changes every step.  Call
     * it before graph_launch, once the previous launch has run (the step's
     * read-back has waited for it). */
    void (*sgd_replay_lr)(const hcnn_backend *be, float lr);
    /* Optional (NULL: nothing to mark): begin = 1 / 0 brackets the work a
     * benchmark times, for a profiler outside hcnn (CUDA: cudaProfilerStart
     * and cudaProfilerStop, which nsys --capture-range=cudaProfilerApi and
     * bench/kernel_share.so read; a no-op otherwise).  Called with the
     * device idle (after a sync) on both sides. */
    void (*trace_region)(const hcnn_backend *be, int begin);

    void (*fill)(const hcnn_backend *be, float *x, size_t n, float v);
    void (*zero)(const hcnn_backend *be, void *p, size_t bytes);
    void (*copy)(const hcnn_backend *be, float *dst, const float *src, size_t n);

    /* ---- products ---- */
    /* C = alpha * op(A) * op(B) + beta * C, row-major, op = transpose if t*;
     * with beta = 0, C is not read (it may hold NaN), as in the BLAS */
    void (*gemm)(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);

    /* ---- convolution (the backend's own algorithms) ---- */
    /* y = conv(x, w) + b for n images: x [n][c][h][w], w [out_c][c][kh][kw],
     * b [out_c] (NULL: none), y [n][out_c][oh][ow] */
    int (*conv_fwd)(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                    const float *x, const float *w, const float *b, float *y, int n);
    /* The filter gradient dw += dL/dw, db += the sum of dy over images and
     * pixels (db NULL: none), and, when dx is not NULL, the data gradient
     * dx = dL/dx (added to dx if dx_acc), in one call so that a backend may
     * run both at once (the CPU's threads take weight-gradient chunks and
     * input-gradient items from one queue). */
    int (*conv_bwd)(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                    const float *x, const float *w, const float *dy, float *dw, float *db,
                    float *dx, int dx_acc, int n);
    /* The two halves alone: dw (and db) accumulated; dx overwritten or
     * added to (dx_acc). */
    int (*conv_bwd_filter)(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                           const float *x, const float *dy, float *dw, float *db, int n);
    int (*conv_bwd_data)(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                         const float *w, const float *dy, float *dx, int dx_acc, int n);
    /* Workspace floats for up to n images as ex runs them (ex->ws unused) */
    size_t (*conv_workspace)(const hcnn_backend *be, const hcnn_conv_desc *d,
                             const hcnn_exec *ex, int n);
    /* The GEMMs of a pass over n images (unit > 0: one work unit of that
     * many images, every thread running its own at once); a backend without
     * GEMMs it can name leaves gl as it is. */
    void (*conv_gemms)(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                       int n, int unit, int need_dx, hcnn_gemm_list *gl);
    /* One line: how it runs this convolution (run header, profile), as
     * "name: details" with a name of no spaces (e.g. "winograd_f4: ...");
     * a layer computed in FP32 although the run's precision is lower says
     * HCNN_DESCRIBE_FP32_KEPT in its details (the run header counts them) */
    void (*conv_describe)(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                          int n, char *buf, size_t cap);
    /* A backend that chooses how to run each convolution shape by
     * measuring (NULL where its choices follow from the shape alone):
     * conv_choices writes the choices made so far as text (one line a
     * shape, at most cap bytes with the NUL, "" if they do not fit) and
     * returns its length; adopt_conv_choices takes another rank's, for the
     * shapes it has of the same batch and has not taken from a lower rank
     * already (*changed: shapes whose ways changed in this call; *refused:
     * its shapes that no rank's ways given so far could replace, for want
     * of a plan, and that keep their own).  The training run gives every rank the lowest rank's
     * choices (src/train/run.c): the same summation order everywhere. */
    size_t (*conv_choices)(const hcnn_backend *be, char *buf, size_t cap);
    int (*adopt_conv_choices)(const hcnn_backend *be, const char *text, int *changed,
                              int *refused);
    /* How the forward and the backward of op over n samples are cut for nt
     * threads (hcnn_pieces above; ex: as the run would call it, its
     * workspace unused), read from the plans the operations make: hcnn
     * plan spreads a pass's measured work over the threads its pieces
     * can keep busy.  A device backend runs a pass as one piece of work. */
    void (*pass_pieces)(const hcnn_backend *be, const hcnn_op *op, const hcnn_exec *ex, int n,
                        int nt, hcnn_pieces *fwd, hcnn_pieces *bwd);

    /* ---- fully connected helpers ---- */
    /* db[j] += sum over rows i of dy[i][j], dy is [n][m] */
    void (*row_sum_acc)(const hcnn_backend *be, const float *dy, int n, int m, float *db);
    /* y[i][j] += b[j] for y [n][m] */
    void (*add_row_bias)(const hcnn_backend *be, float *y, const float *b, int n, int m);

    /* ---- element-wise ---- */
    /* y = x > 0 ? x : slope * x (ReLU: slope 0; leaky ReLU: 0 < slope < 1) */
    void (*relu_fwd)(const hcnn_backend *be, const float *x, float *y, size_t n, float slope);
    /* dx = y > 0 ? dy : slope * dy, from the forward's output y */
    void (*relu_bwd)(const hcnn_backend *be, const float *y, const float *dy, float *dx, size_t n,
                     float slope);
    void (*add)(const hcnn_backend *be, const float *a, const float *b, float *y,
                size_t n);                                                   /* y = a + b */
    void (*add_acc)(const hcnn_backend *be, const float *a, float *y, size_t n); /* y += a */
    void (*scale)(const hcnn_backend *be, float *x, size_t n, float a);         /* x *= a */
    void (*mul)(const hcnn_backend *be, const float *a, const float *b, float *y,
                size_t n);                                                   /* y = a * b */
    /* dropout with a counter-based mask: keep element e of sample (first+i)
     * with probability 1-p, scaled by 1/(1-p); mask (0 or scale) saved. */
    void (*dropout_fwd)(const hcnn_backend *be, const float *x, float *y, float *mask, int n,
                        size_t per_sample, float p, uint64_t seed, uint64_t step,
                        uint64_t first_sample, uint64_t layer_id);

    /* ---- pooling; argmax (int32: the input's index in its plane) saved for
     * max-pool backward; padding is never a window's maximum (PyTorch's) ---- */
    void (*maxpool_fwd)(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                        float *y, int32_t *argmax);
    void (*maxpool_bwd)(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy,
                        const int32_t *argmax, int n, float *dx);
    /* average pooling, padding counted in the divisor (PyTorch's default) */
    void (*avgpool_fwd)(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                        float *y);
    void (*avgpool_bwd)(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy, int n,
                        float *dx);

    /* ---- layout (NULL in an NCHW backend) ----
     * y = x in the backend's layout, x [n][c][np] NCHW (np = h*w); and the
     * converse.  y and x do not overlap. */
    void (*layout_from_nchw)(const hcnn_backend *be, const float *x, float *y, int n, int c,
                             int np);
    void (*layout_to_nchw)(const hcnn_backend *be, const float *x, float *y, int n, int c,
                           int np);

    /* ---- batch normalisation over (n, h, w) per channel; np = h*w ----
     * Training: saves mean and inverse std (per channel) for backward and
     * updates running statistics (running_var uses the unbiased variance,
     * as PyTorch does).  Inference: uses running statistics.  Both write
     * y = act(gamma * xhat + beta + add), act = ReLU if relu else identity,
     * add (shaped like y) skipped if NULL: a residual block's addition and
     * ReLU, or the ReLU that follows, in the same pass. */
    /* stats: what the convolution before it gathered of x (NULL, or bands
     * 0: nothing; the statistics are then taken from x) */
    void (*bn_fwd_train)(const hcnn_backend *be, const float *x, int n, int c, int np,
                         const float *gamma, const float *beta, float eps, float momentum,
                         float *running_mean, float *running_var, float *save_mean,
                         float *save_invstd, const float *add, int relu,
                         const hcnn_bn_stats *stats, float *y);
    void (*bn_fwd_infer)(const hcnn_backend *be, const float *x, int n, int c, int np,
                         const float *gamma, const float *beta, float eps,
                         const float *running_mean, const float *running_var, const float *add,
                         int relu, float *y);
    /* dx overwritten; dgamma, dbeta accumulated.  relu: the forward fused
     * the ReLU that follows, and dy is that ReLU's output gradient; the
     * mask [y > 0] is applied here, y recomputed from x, gamma and beta. */
    void (*bn_bwd)(const hcnn_backend *be, const float *x, const float *dy, int n, int c, int np,
                   const float *gamma, const float *beta, const float *save_mean,
                   const float *save_invstd, int relu, float *dx, float *dgamma, float *dbeta);

    /* ---- loss, optimiser, statistics ---- */
    /* softmax + cross-entropy on logits [n][k]: stats[HCNN_STAT_LOSS] += the
     * summed loss, stats[HCNN_STAT_CORRECT] += correct argmax predictions
     * (stats: backend memory), dlogits = (softmax - onehot) * grad_scale
     * (dlogits may be NULL). */
    void (*softmax_xent)(const hcnn_backend *be, const float *logits, const int32_t *labels, int n,
                         int k, float grad_scale, float *dlogits, double *stats);
    /* SGD with momentum (PyTorch semantics):
     *   g' = g + wd * w;  v = mu * v + g';  w -= lr * (nesterov ? g' + mu * v : v)
     * then g := 0 (the next step's gradients are summed into it: the sweep
     * that reads g anyway zeroes it, instead of a pass of its own), and,
     * when stats is not NULL (backend memory), stats[HCNN_STAT_WSQ] += the
     * sum of squares of the new w, stats[HCNN_STAT_VSQ] += that of the new
     * v: the same on any thread count (the trainer decides from them whether
     * to keep the state before the next update). */
    void (*sgd_step)(const hcnn_backend *be, float *w, float *g, float *v, size_t n, float lr,
                     float mu, float wd, int nesterov, double *stats);
    /* stats[HCNN_STAT_SUMSQ] += the sum of squares of x (the gradient's norm,
     * non-finite detection) */
    void (*sum_sq)(const hcnn_backend *be, const float *x, size_t n, double *stats);

    /* the instance's end (hcnn_backend_destroy calls it) */
    void (*destroy)(hcnn_backend *be);
};

/* A backend by name: "cpu" (OpenBLAS + OpenMP, src/cpu/), "cpu-devmem" (the
 * same behind memory the host cannot dereference: host_memory 0, so a run
 * on it proves that nothing touches a tensor except through the backend;
 * src/cpu/devmem.c), "cuda" (src/cuda/, in a build configured
 * --with-cuda).  device: the GPU to take, modulo the visible ones (a rank's
 * place among its node's ranks; ignored by the CPU backends).  Returns
 * HCNN_OK, or HCNN_EINVAL after one message for a name this build does not
 * have (for "cuda": rebuild with ./configure --with-cuda). */
int hcnn_backend_create(const char *name, int device, hcnn_backend **be);
void hcnn_backend_destroy(hcnn_backend *be);

/* The backends this build has, "cpu, cpu-devmem[, cuda]" */
const char *hcnn_backend_names(void);

/* In a build with the CUDA backend (HCNN_HAVE_CUDA): what it was compiled
 * with, "runtime 13.0, cuBLAS 13.1.0, cuDNN 9.19.0" (hcnn --version). */
const char *hcnn_backend_cuda_versions(char *buf, size_t cap);

/* The CPU ones (src/cpu/backend.c, devmem.c) */
int hcnn_backend_cpu_create(hcnn_backend **be);
int hcnn_backend_cpu_devmem_create(hcnn_backend **be);
/* The CPU backend's table itself, for host tools that need no instance of
 * their own (import, train --check, the BLAS probe): no state, nothing to
 * destroy; it computes in FP32. */
const hcnn_backend *hcnn_backend_cpu(void);

/* Whether the CPU backend runs precision p on this machine (its
 * set_precision, a run's check at start, hcnn --version): HCNN_OK, or
 * HCNN_EINVAL with why (cap bytes) = what follows "precision: " in the
 * refusal, e.g. "bf16: <hcnn_cpu_bf16_supported's reason>" or "tf32 needs
 * device: cuda (...)".  Prints nothing. */
int hcnn_cpu_precision_check(hcnn_precision p, char *why, size_t cap);

#endif
