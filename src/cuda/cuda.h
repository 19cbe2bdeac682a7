/* Inside the CUDA backend (src/cuda/): what its files share.  It mirrors
 * src/cpu/ file for file: backend (the table, memory, ordering, timers),
 * gemm (cuBLAS), conv (im2col + cuBLAS GEMMs, col2im, in either layout),
 * bias, elementwise, layout (NCHW <-> NHWC), pool, bn (bn_nhwc: its NHWC
 * kernels), loss, optim.
 *
 * One stream per instance (cudaStreamNonBlocking): every operation is
 * queued on it, in order; the host waits only in download, sync and a
 * timer's stop.  Every kernel computes one output per thread and writes
 * only its own outputs; sums run in an order fixed by the shapes (a second
 * kernel adds a first kernel's partial sums in order), never through
 * floating-point atomics: the same configuration gives the same bits on
 * every run, as on the CPU.  The per-element math is src/core/hd.h's,
 * shared with the CPU backend.
 *
 * Built by nvcc (configure --with-cuda) or, with the same sources, by the
 * host C++ compiler against the emulation of src/cuda/emu/ (configure
 * --enable-cuda-emulation): see compat.h. */
#ifndef HCNN_CUDA_INTERNAL_H
#define HCNN_CUDA_INTERNAL_H

#include "compat.h"

extern "C" {
#include "hcnn/backend.h"
#include "hcnn/common.h"
}
#include "../core/hd.h"

/* threads per block of the one-thread-per-output kernels */
#define HCNN_CUDA_BLOCK 256

/* The instance's state: be->state. */
typedef struct hcnn_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    double *scratch;        /* partial sums of the reductions (sum_sq, loss) */
    size_t scratch_doubles;
    hcnn_precision precision;
    __nv_bfloat16 *bf16;    /* bf16: a GEMM's inputs rounded (grown in the first step) */
    size_t bf16_elems;
    struct hcnn_cudnn *dnn; /* cuDNN's handle and plans (conv_cudnn.cu); NULL: none */
    int conv_mode;          /* HCNN_CUDA_CONV (HCNN_CONV_MODE_*, conv_choice.cu) */
    int conv_forced[3];     /* HCNN_CONV_MODE_FORCED: each pass's way (hcnn_conv_way) */
    int conv_direct;        /* HCNN_CUDA_CONV=direct: auto without cuDNN's Winograd */
    struct hcnn_conv_choices *choices; /* each convolution shape's ways (conv_choice.cu) */
    void *blas_ws;          /* cuBLAS's workspace, so that it allocates none in a capture */
    cudaGraphExec_t graphs[HCNN_GRAPH_SLOTS]; /* captured work (graph_begin .. graph_launch) */
    int capturing;          /* between graph_begin and graph_end */
    float *lr_host;         /* pinned: a captured sgd_step's rate, read at each launch */
    float *lr_dev;          /* where the captured step copies it before its kernel */
    char name[320];         /* the GPU, for the run header */
    char model_key[512];    /* the GPU's model and the libraries: what a measurement
                               holds for (conv_choice.cu's cache) */
    size_t chunk_floats;    /* conv.cu's most floats of a chunk's columns and output:
                               HCNN_CUDA_CHUNK_DEFAULT, or HCNN_CUDA_CHUNK_FLOATS's (tests) */
} hcnn_cuda;

/* 128 MiB of columns and output per chunk, the CPU's default im2col_mb */
#define HCNN_CUDA_CHUNK_DEFAULT ((size_t)32 << 20)

static inline hcnn_cuda *cuda_of(const hcnn_backend *be) { return (hcnn_cuda *)be->state; }

/* cudaMalloc; out of memory: NULL after a message saying how much was
 * asked and how much is free (the table's alloc) */
void *hcnn_cuda_alloc(const hcnn_backend *be, size_t bytes, const char *what);

/* Ends the job through the abort path (hcnn_fatal_at, include/hcnn/common.h)
 * naming the call, the file and line and CUDA's or cuBLAS's cause
 * (instance.cu, as are the functions below that the table does not hold). */
[[noreturn]] void hcnn_cuda_fail(const char *call, const char *file, int line, const char *cause);
/* a library call (its text, its status of TYPE) that must return OK, else
 * the abort path with CAUSE(status); HCNN_CUDA, HCNN_CUBLAS and
 * conv_graph.h's HCNN_CUDNN name the call as written */
#define HCNN_CALL_OK(text, status, type, ok, cause)                                                 \
    do {                                                                                            \
        const type s_ = (status);                                                                   \
        if (s_ != (ok))                                                                             \
            hcnn_cuda_fail(text, __FILE__, __LINE__, cause(s_));                                    \
    } while (0)
#define HCNN_CUDA(call) HCNN_CALL_OK(#call, call, cudaError_t, cudaSuccess, cudaGetErrorString)
#define HCNN_CUBLAS(call)                                                                           \
    HCNN_CALL_OK(#call, call, cublasStatus_t, CUBLAS_STATUS_SUCCESS, hcnn_cublas_status)
/* after a launch: a bad configuration is reported at once */
#define HCNN_CUDA_LAUNCHED() HCNN_CUDA(cudaGetLastError())
const char *hcnn_cublas_status(cublasStatus_t s);

/* blocks of HCNN_CUDA_BLOCK threads covering n outputs */
static inline unsigned hcnn_cuda_blocks(size_t n)
{
    return (unsigned)((n + HCNN_CUDA_BLOCK - 1) / HCNN_CUDA_BLOCK);
}

/* the index of this thread's output */
#define HCNN_CUDA_INDEX() ((size_t)blockIdx.x * blockDim.x + threadIdx.x)

/* element k's channel over [.][c][np], (k / np) % c (rows of c: np 1), by
 * two of hd.h's 32-bit dividers where the elements number fewer than 2^32
 * (narrow), else by a 64-bit division: a GPU has no division instruction,
 * and a 64-bit division and remainder a thread bound the H200's
 * bn_apply_kernel (Nsight Compute, 2026-11-30, bn.cu).  For the kernels a
 * thread an element (bn.cu's, bias.cu's); the dividers' gain there is
 * unmeasured on a GPU (2026-12-02). */
typedef struct hcnn_cuda_channels {
    hcnn_hd_divider np, c;
    int narrow;
} hcnn_cuda_channels;

/* total >= 1, c >= 1, np >= 1 */
static inline hcnn_cuda_channels hcnn_cuda_channels_of(size_t total, int c, int np)
{
    hcnn_cuda_channels g = {hcnn_hd_divider_of((uint32_t)np), hcnn_hd_divider_of((uint32_t)c),
                            total <= 0xffffffffu};
    return g;
}

HCNN_HD int hcnn_cuda_channel(hcnn_cuda_channels g, size_t k)
{
    if (!g.narrow)
        return (int)(k / g.np.d % g.c.d);
    const uint32_t plane = g.np.d == 1 ? (uint32_t)k : hcnn_hd_div(g.np, (uint32_t)k);
    return (int)(plane - hcnn_hd_div(g.c, plane) * g.c.d);
}

/* ---- the table's operations, by file ------------------------------------------- */
/* gemm.cu */
void hcnn_cuda_gemm(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                    const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
/* conv_choice.cu (each pass by the shape's way, conv.cu's or cuDNN's) */
int hcnn_cuda_conv_fwd(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                       const float *x, const float *w, const float *b, float *y, int n);
int hcnn_cuda_conv_bwd(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                       const float *x, const float *w, const float *dy, float *dw, float *db,
                       float *dx, int dx_acc, int n);
int hcnn_cuda_conv_bwd_filter(const hcnn_backend *be, const hcnn_conv_desc *d,
                              const hcnn_exec *ex, const float *x, const float *dy, float *dw,
                              float *db, int n);
int hcnn_cuda_conv_bwd_data(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                            const float *w, const float *dy, float *dx, int dx_acc, int n);
size_t hcnn_cuda_conv_workspace(const hcnn_backend *be, const hcnn_conv_desc *d,
                                const hcnn_exec *ex, int n);
void hcnn_cuda_conv_gemms(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                          int n, int unit, int need_dx, hcnn_gemm_list *gl);
void hcnn_cuda_conv_describe(const hcnn_backend *be, const hcnn_conv_desc *d,
                             const hcnn_exec *ex, int n, char *buf, size_t cap);
/* The ways conv.cu runs a pass of a convolution over a call's images */
typedef enum hcnn_conv_way {
    HCNN_WAY_IM2COL,       /* im2col + cuBLAS over chunks as large as chunk_floats allows */
    HCNN_WAY_IM2COL_IMAGE, /* the same one image at a time (NCHW: the GEMMs in place) */
    HCNN_WAY_CUDNN,        /* cuDNN's plan (conv_cudnn.cu), where there is one */
    HCNN_WAY_TRANSPOSED,   /* the data gradient alone, stride 1: the forward convolution
                              of dy with the flipped filters (im2col of dy + cuBLAS) */
    HCNN_WAY_TRANSPOSED_CUDNN, /* the same by cuDNN's forward, where this build links it
                                  and has a plan (FP32, TF32) for the transposed shape */
    HCNN_WAY_WINOGRAD_CUDNN,   /* cuDNN's Winograd algorithms (FP32, TF32), each pass that
                                  has one, on the shapes the CPU's conv_algo: auto takes
                                  Winograd for (hcnn_cudnn_winograd_shape) */
    HCNN_WAYS
} hcnn_conv_way;
enum { HCNN_PASS_FORWARD, HCNN_PASS_DATA, HCNN_PASS_FILTER, HCNN_PASSES };
/* conv.cu: a pass by a way (HCNN_WAY_CUDNN without a plan within ex's
 * workspace: HCNN_WAY_IM2COL); the backward's dw (+=) or dx (= or +=) NULL
 * to skip that gradient.  The table's conv_* choose the ways (below). */
void hcnn_cuda_conv_fwd_by(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                           const float *x, const float *w, const float *b, float *y, int n,
                           hcnn_conv_way way);
void hcnn_cuda_conv_bwd_by(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                           const float *x, const float *w, const float *dy, float *dw, float *dx,
                           int dx_acc, int n, hcnn_conv_way filter, hcnn_conv_way data);
/* conv.cu: the GEMMs of the im2col path over n images (the profile's
 * raw-GEMM reference, conv_gemms), the data gradient's by its way */
void hcnn_cuda_conv_gemms_by(const hcnn_backend *be, const hcnn_conv_desc *d, int n, int need_dx,
                             hcnn_conv_way data, hcnn_gemm_list *gl);
/* conv.cu: what conv.cu's ways need of the workspace for n images (the
 * transposed ones' included where the shape has them), the images of the
 * im2col way's chunks, and a way of conv.cu in words */
size_t hcnn_cuda_conv_im2col_workspace(const hcnn_backend *be, const hcnn_conv_desc *d, int n);
int hcnn_cuda_conv_chunk_images(const hcnn_backend *be, const hcnn_conv_desc *d, int n);
void hcnn_cuda_conv_way_describe(const hcnn_backend *be, const hcnn_conv_desc *d, int n,
                                 hcnn_conv_way way, char *buf, size_t cap);
/* conv.cu: whether d's data gradient can go by HCNN_WAY_TRANSPOSED (stride
 * 1, padding below the kernel), and cuDNN's plan for the forward of its
 * transposed convolution over n images within limit bytes
 * (HCNN_WAY_TRANSPOSED_CUDNN), or NULL: none, bf16 (its graphs have no
 * dx += for it), not transposable */
typedef struct hcnn_cudnn_conv hcnn_cudnn_conv;
int hcnn_cuda_conv_transposable(const hcnn_conv_desc *d);
const hcnn_cudnn_conv *hcnn_cuda_conv_transposed_plan(const hcnn_backend *be,
                                                      const hcnn_conv_desc *d, int n, size_t limit);
/* conv_choice.cu: HCNN_CUDA_CONV, and each shape's way for each pass */
enum {
    HCNN_CONV_MODE_AUTO,    /* auto or unset: measured on a GPU, the rule on the emulation */
    HCNN_CONV_MODE_MEASURE, /* measure: measured, also on the emulation (tests) */
    HCNN_CONV_MODE_FORCED   /* the ways named (conv_forced): cudnn, im2col, im2col_image,
                               winograd_cudnn for every pass, or one way per pass "F,D,W"
                               (D also transposed) */
};
int hcnn_cuda_conv_choice_create(hcnn_backend *be); /* reads HCNN_CUDA_CONV */
/* whether HCNN_CUDA_CONV names way for some pass */
static inline int hcnn_cuda_conv_forces(const hcnn_cuda *cu, int way)
{
    for (int p = 0; cu->conv_mode == HCNN_CONV_MODE_FORCED && p < HCNN_PASSES; p++)
        if (cu->conv_forced[p] == way)
            return 1;
    return 0;
}
void hcnn_cuda_conv_choice_destroy(hcnn_cuda *cu);
/* how this instance chooses its convolutions' ways, for the device line */
void hcnn_cuda_conv_mode_text(const hcnn_cuda *cu, char *buf, size_t cap);
/* the ways of d's passes for calls of n images (made at the shape's first
 * call: the scratch's sizing, before the first step) */
const int *hcnn_cuda_conv_ways(const hcnn_backend *be, const hcnn_conv_desc *d, int n);
/* the table's conv_choices and adopt_conv_choices (backend.h) */
size_t hcnn_cuda_conv_choices(const hcnn_backend *be, char *buf, size_t cap);
int hcnn_cuda_adopt_conv_choices(const hcnn_backend *be, const char *text, int *changed,
                                 int *refused);
/* conv_cudnn.cu (the plans) and conv_cudnn_call.cu (the calls below): the
 * convolution's passes through cuDNN where this build has it (hcnn_cudnn_conv_for() NULL: no plan, the im2col path; the plan's
 * type hcnn_cudnn_conv above) */
/* limit: the workspace bytes the call has (HCNN_CUDNN_ANY_WORKSPACE when
 * sizing it) */
#define HCNN_CUDNN_ANY_WORKSPACE ((size_t)-1)
int hcnn_cudnn_create(hcnn_backend *be);
void hcnn_cudnn_destroy(hcnn_cuda *cu);
const hcnn_cudnn_conv *hcnn_cudnn_conv_for(const hcnn_backend *be, const hcnn_conv_desc *d, int n,
                                           size_t limit);
/* HCNN_WAY_WINOGRAD_CUDNN: whether d is a shape it is offered for (3x3,
 * stride 1, padding up to 2, at least 32 input and output channels: where
 * the CPU's conv_algo: auto takes Winograd, src/cpu/conv_plan.c and
 * winograd_plan.c), and its plan, made of cuDNN's Winograd algorithms
 * alone (NULL: none for any pass, bf16, not such a shape,
 * HCNN_CUDA_CONV=direct, no cuDNN) */
int hcnn_cudnn_winograd_shape(const hcnn_conv_desc *d);
const hcnn_cudnn_conv *hcnn_cudnn_conv_winograd_for(const hcnn_backend *be,
                                                    const hcnn_conv_desc *d, int n, size_t limit);
size_t hcnn_cudnn_conv_workspace(const hcnn_cudnn_conv *p);
/* whether p runs pass (HCNN_PASS_*; a plan may lack some; p NULL: 0) */
int hcnn_cudnn_conv_has(const hcnn_cudnn_conv *p, int pass);
/* "" or, for a pass cuDNN refused when it ran (dropped since), the call and why */
const char *hcnn_cudnn_conv_refusal(const hcnn_cudnn_conv *p, int pass);
/* whether p's pass can write out (a bf16 graph's output is declared 16-byte
 * aligned; a call whose is not takes the im2col way) */
int hcnn_cudnn_conv_aligned(const hcnn_cudnn_conv *p, int pass, const void *out);
/* The calls below: a call cuDNN refuses before it launches anything (its
 * parameters or support; conv_cudnn_call.cu, refused: any other failure ends the
 * job) drops the plan's pass with one warning and returns
 * HCNN_CUDNN_REFUSED: the caller then runs the call by im2col + GEMM. */
enum { HCNN_CUDNN_REFUSED = -1 };
/* y = conv(x, w), + b and the ReLU (ex->relu) where the plan does them in
 * the same engine (bf16 graphs): returns what it did of them
 * (HCNN_CUDNN_DID_*), the caller the rest; or HCNN_CUDNN_REFUSED */
enum { HCNN_CUDNN_DID_BIAS = 1, HCNN_CUDNN_DID_RELU = 2 };
int hcnn_cudnn_conv_fwd(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                        const float *x, const float *w, const float *b, float *y);
/* y = conv(x, w), or y += it (acc), with neither bias nor ReLU: an FP32 or
 * TF32 plan's (the legacy API's beta; the transposed data gradient); 0 or
 * HCNN_CUDNN_REFUSED */
int hcnn_cudnn_conv_fwd_into(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                             const hcnn_exec *ex, const float *x, const float *w, int acc,
                             float *y);
/* 0 or HCNN_CUDNN_REFUSED */
int hcnn_cudnn_conv_bwd_filter(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                               const hcnn_exec *ex, const float *x, const float *dy, float *dw);
int hcnn_cudnn_conv_bwd_data(const hcnn_backend *be, const hcnn_cudnn_conv *p,
                             const hcnn_exec *ex, const float *w, const float *dy, float *dx,
                             int dx_acc);
/* dw += and dx = (or +=, dx_acc) by one plan, the filter's first, as the
 * two calls above: in bf16 dy is rounded once for both graphs.  Returns the
 * gradients left to the caller (HCNN_CUDNN_LEFT_*: those cuDNN refused) */
enum { HCNN_CUDNN_LEFT_FILTER = 1, HCNN_CUDNN_LEFT_DATA = 2 };
int hcnn_cudnn_conv_bwd(const hcnn_backend *be, const hcnn_cudnn_conv *p, const hcnn_exec *ex,
                        const float *x, const float *w, const float *dy, float *dw, float *dx,
                        int dx_acc);
/* "cuDNN 9.19.0 implicit_gemm (...)": the plan's algorithm for a pass, or
 * why the plan does not run it (refused when run, or none offered) */
void hcnn_cudnn_conv_describe(const hcnn_cudnn_conv *p, int pass, char *buf, size_t cap);
/* bias.cu */
void hcnn_cuda_row_sum_acc(const hcnn_backend *be, const float *dy, int n, int m, float *db);
void hcnn_cuda_add_row_bias(const hcnn_backend *be, float *y, const float *b, int n, int m);
void hcnn_cuda_add_channel_bias(const hcnn_backend *be, float *y, const float *bias, int n, int c,
                                int np);
/* the same, then the ReLU if relu (a convolution's forward with
 * hcnn_exec.relu, conv.cu) */
void hcnn_cuda_add_row_bias_relu(const hcnn_backend *be, float *y, const float *b, int n, int m,
                                 int relu);
void hcnn_cuda_add_channel_bias_relu(const hcnn_backend *be, float *y, const float *bias, int n,
                                     int c, int np, int relu);
void hcnn_cuda_channel_sum_acc(const hcnn_backend *be, const float *dy, int n, int c, int np,
                               float *db);
/* db[ch] += the sum of dy[r][ch] over rows r < rows (NHWC: rows = n * h * w), in a
 * fixed order (rows in blocks, the blocks in order); the NHWC convolution's bias
 * gradient */
void hcnn_cuda_nhwc_channel_sum_acc(const hcnn_backend *be, const float *dy, int rows, int c,
                                    float *db);
/* layout.cu: the table's layout_from_nchw and layout_to_nchw */
void hcnn_cuda_layout_from_nchw(const hcnn_backend *be, const float *x, float *y, int n, int c,
                                int np);
void hcnn_cuda_layout_to_nchw(const hcnn_backend *be, const float *x, float *y, int n, int c,
                              int np);
/* elementwise.cu */
void hcnn_cuda_fill(const hcnn_backend *be, float *x, size_t n, float v);
void hcnn_cuda_relu_fwd(const hcnn_backend *be, const float *x, float *y, size_t n, float slope);
void hcnn_cuda_relu_bwd(const hcnn_backend *be, const float *y, const float *dy, float *dx,
                        size_t n, float slope);
void hcnn_cuda_add(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n);
void hcnn_cuda_add_acc(const hcnn_backend *be, const float *a, float *y, size_t n);
void hcnn_cuda_scale(const hcnn_backend *be, float *x, size_t n, float a);
void hcnn_cuda_mul(const hcnn_backend *be, const float *a, const float *b, float *y, size_t n);
void hcnn_cuda_dropout_fwd(const hcnn_backend *be, const float *x, float *y, float *mask, int n,
                           size_t per_sample, float p, uint64_t seed, uint64_t step,
                           uint64_t first_sample, uint64_t layer_id);
/* pool.cu */
void hcnn_cuda_maxpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y, int32_t *argmax);
void hcnn_cuda_maxpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy,
                           const int32_t *argmax, int n, float *dx);
void hcnn_cuda_avgpool_fwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *x, int n,
                           float *y);
void hcnn_cuda_avgpool_bwd(const hcnn_backend *be, const hcnn_pool_geom *g, const float *dy, int n,
                           float *dx);
/* bn.cu */
void hcnn_cuda_bn_gather(const hcnn_backend *be, const float *y, int n, int c, int np,
                         hcnn_bn_stats *stats);
void hcnn_cuda_bn_fwd_train(const hcnn_backend *be, const float *x, int n, int c, int np,
                            const float *gamma, const float *beta, float eps, float momentum,
                            float *running_mean, float *running_var, float *save_mean,
                            float *save_invstd, const float *add, int relu,
                            const hcnn_bn_stats *stats, float *y);
void hcnn_cuda_bn_fwd_infer(const hcnn_backend *be, const float *x, int n, int c, int np,
                            const float *gamma, const float *beta, float eps,
                            const float *running_mean, const float *running_var, const float *add,
                            int relu, float *y);
void hcnn_cuda_bn_bwd(const hcnn_backend *be, const float *x, const float *dy, int n, int c,
                      int np, const float *gamma, const float *beta, const float *save_mean,
                      const float *save_invstd, int relu, float *dx, float *dgamma, float *dbeta);
/* bn_channel.cu: a channel's sums over a table's rows (bn.cu's plane
 * tables, bn_nhwc.cu's row blocks): the training statistics from its
 * pieces (src/core/hd.h, hcnn_hd_bn_table_stats: nb images of `bands`
 * pieces, pairs at hcnn_hd_bn_piece_at, or where by_piece at (q c + ch) * 2,
 * [piece][c]), merged with `done` values before them in state[2 ch]
 * (0: none; then state unused where last), at the last piece the saved and
 * running statistics; and the backward's two sums from nb rows of pairs
 * [row][c][2], carried in acc[2 ch] unless first, at the last dgamma and
 * dbeta accumulated and the two means over cnt values */
void hcnn_cuda_bn_table_stats(const hcnn_backend *be, const float *table, int nb, int c, int np,
                              int bands, int band_px, int by_piece, double done, int last,
                              double *state, float eps, float momentum, float *save_mean,
                              float *save_invstd, float *running_mean, float *running_var);
void hcnn_cuda_bn_table_sums(const hcnn_backend *be, const float *table, int nb, int c, int first,
                             int last, double cnt, double *acc, float *dgamma, float *dbeta,
                             float *mdy, float *mdyx);
/* and the totals of nb rows of single values [row][c] (plane_stats'
 * totals), carried in acc[ch] unless first, at the last added to db */
void hcnn_cuda_channel_totals(const hcnn_backend *be, const float *table, int nb, int c, int first,
                              int last, double *acc, float *db);
/* bn_nhwc.cu: NHWC's per-channel sums (x, dy [n][np][c]), for bn.cu's
 * three when be->layout is NHWC: the training statistics (save_*, the running
 * ones updated), and the backward's (dgamma, dbeta accumulated; *mdy and
 * *mdyx: the two means bwd_dx reads, in the reduction scratch); their sums
 * run over blocks of HCNN_CUDA_NHWC_ROWS rows (more where the scratch would
 * not hold the blocks' table) */
#define HCNN_CUDA_NHWC_ROWS 256
void hcnn_cuda_bn_nhwc_stats(const hcnn_backend *be, const float *x, int n, int c, int np,
                             float eps, float momentum, float *running_mean, float *running_var,
                             float *save_mean, float *save_invstd);
void hcnn_cuda_bn_nhwc_bwd_sums(const hcnn_backend *be, const float *x, const float *dy, int n,
                                int c, int np, const float *gamma, const float *beta,
                                const float *save_mean, const float *save_invstd, int relu,
                                float *dgamma, float *dbeta, float **mdy, float **mdyx);
/* loss.cu */
void hcnn_cuda_softmax_xent(const hcnn_backend *be, const float *logits, const int32_t *labels,
                            int n, int k, float grad_scale, float *dlogits, double *stats);
/* optim.cu */
void hcnn_cuda_sgd_step(const hcnn_backend *be, float *w, float *g, float *v, size_t n,
                        float lr, float mu, float wd, int nesterov, double *stats);
void hcnn_cuda_sgd_replay_lr(const hcnn_backend *be, float lr);
void hcnn_cuda_sum_sq(const hcnn_backend *be, const float *x, size_t n, double *stats);

/* bf16 precision: n elements for a GEMM's rounded inputs (the one buffer
 * of the instance: what a call puts there lasts until the next call that
 * asks for it) */
__nv_bfloat16 *hcnn_cuda_bf16_buffer(const hcnn_backend *be, size_t n);
/* n rounded up so that what follows it in the buffer starts 256 bytes
 * aligned, as cudaMalloc gives the buffer: tensor-core kernels want their
 * operands at least 16-byte aligned */
static inline size_t hcnn_cuda_bf16_padded(size_t n) { return (n + 127) / 128 * 128; }
/* y = x rounded to bfloat16 (n elements), queued */
void hcnn_cuda_to_bf16(const hcnn_backend *be, const float *x, size_t n, __nv_bfloat16 *y);
/* C = alpha op(A) op(B) + beta C, row-major, of bfloat16 inputs with FP32
 * accumulation and output (hcnn_cuda_gemm's bf16 path, for inputs already
 * rounded where they were made) */
void hcnn_cuda_gemm_bf16(const hcnn_backend *be, int ta, int tb, int m, int n, int k, float alpha,
                         const __nv_bfloat16 *a, int lda, const __nv_bfloat16 *b, int ldb,
                         float beta, float *c, int ldc);

/* The reductions' scratch: at least n doubles of device memory (grown in
 * the instance's state; never inside a captured graph). */
double *hcnn_cuda_scratch(const hcnn_backend *be, size_t n);

#endif
