/* The one interface through which all tensor math goes.
 *
 * Layers and strategies never call BLAS or loop over tensors themselves:
 * they call these operations, so a CUDA backend can replace the CPU one
 * without touching them.  All tensors are float32, NCHW, contiguous.
 * "Accumulate" operations add into their output (gradients accumulate
 * over micro-batches); all others overwrite.
 *
 * Memory: every tensor buffer (parameters, gradients, statistics, momentum,
 * activations, workspaces) comes from alloc and goes back through free; the
 * host reads and writes it only through download and upload (checkpoints,
 * initialisation, metrics), or directly when host_memory says the backend's
 * memory is the host's (then MPI also communicates it in place; see
 * src/parallel/comm.c for the staging otherwise). */
#ifndef HCNN_BACKEND_H
#define HCNN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

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

typedef struct hcnn_backend {
    const char *name;

    /* Run fn(arg, t, nt) once on each of the backend's nt host threads
     * (nt = 1 for a device backend).  Backend operations called from fn run
     * on the calling thread only. */
    void (*parallel)(void (*fn)(void *arg, int t, int nt), void *arg);
    /* nt that parallel() will use */
    int (*threads)(void);

    /* 1: alloc returns host memory, which host code and MPI may use in
     * place; 0: device memory, reached only through upload and download */
    int host_memory;

    /* memory (device memory for accelerator backends); alloc prints what
     * failed and returns NULL */
    void *(*alloc)(size_t bytes, const char *what);
    void (*free)(void *p);
    void (*upload)(void *dst_dev, const void *src_host, size_t bytes);
    void (*download)(void *dst_host, const void *src_dev, size_t bytes);
    void (*fill)(float *x, size_t n, float v);
    void (*copy)(float *dst, const float *src, size_t n);

    /* C = alpha * op(A) * op(B) + beta * C, row-major, op = transpose if t* */
    void (*gemm)(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);

    /* im2col over a batch of n images: col is [c*kh*kw][n*oh*ow] (row-major),
     * so one GEMM with the [out][c*kh*kw] weights convolves the whole batch. */
    void (*im2col)(const hcnn_conv_geom *g, const float *x, int n, float *col);
    /* col2im: the adjoint of im2col; overwrites dx [n][c][h][w], or adds to
     * it if accumulate (each element: dx + its taps, in tap order). */
    void (*col2im)(const hcnn_conv_geom *g, const float *col, int n, int accumulate, float *dx);
    /* y[i][co][p] = src[co][i*np + p] + bias[co] (bias may be NULL):
     * from the GEMM's channel-major layout back to NCHW. */
    void (*cnp_to_nchw)(const float *src, const float *bias, int n, int c, int np, float *y);
    /* y[(i*c + co)*ld + p] += bias[co] for p < np: n images of c planes,
     * ld floats apart (ld = np for [n][c][np]; a block of rows: ld > np) */
    void (*add_channel_bias)(float *y, const float *bias, int n, int c, int np, size_t ld);
    /* dst[co][i*np + p] = y[i][co][p]: NCHW to channel-major. */
    void (*nchw_to_cnp)(const float *y, int n, int c, int np, float *dst);
    /* dst[i][y*dld + x] = src[i][y*sld + x] (+= if accumulate) for c planes
     * of h x w, the planes splane and dplane floats apart; the rest of dst
     * untouched.  Pads, crops and re-strides planes. */
    void (*copy_planes)(const float *src, size_t splane, int sld, int c, int h, int w,
                        float *dst, size_t dplane, int dld, int accumulate);
    /* t[j][i] = a[i][j] for a [rows][cols] */
    void (*transpose)(const float *a, int rows, int cols, float *t);
    /* db[co] += sum over i, p of dy[i][co][p] */
    void (*channel_sum_acc)(const float *dy, int n, int c, int np, float *db);
    /* db[j] += sum over rows i of dy[i][j], dy is [n][m] */
    void (*row_sum_acc)(const float *dy, int n, int m, float *db);
    /* y[i][j] += b[j] for y [n][m] */
    void (*add_row_bias)(float *y, const float *b, int n, int m);

    /* element-wise */
    /* y = x > 0 ? x : slope * x (ReLU: slope 0; leaky ReLU: 0 < slope < 1) */
    void (*relu_fwd)(const float *x, float *y, size_t n, float slope);
    /* dx = y > 0 ? dy : slope * dy, from the forward's output y */
    void (*relu_bwd)(const float *y, const float *dy, float *dx, size_t n, float slope);
    void (*add)(const float *a, const float *b, float *y, size_t n);      /* y = a + b */
    void (*add_acc)(const float *a, float *y, size_t n);                  /* y += a */
    void (*scale)(float *x, size_t n, float a);                           /* x *= a */
    /* dropout with a counter-based mask: keep element e of sample (first+i)
     * with probability 1-p, scaled by 1/(1-p); mask (0 or scale) saved. */
    void (*dropout_fwd)(const float *x, float *y, float *mask, int n, size_t per_sample, float p,
                        uint64_t seed, uint64_t step, uint64_t first_sample, uint64_t layer_id);
    void (*mul)(const float *a, const float *b, float *y, size_t n);      /* y = a * b */

    /* pooling; argmax (int32) saved for max-pool backward */
    void (*maxpool_fwd)(const hcnn_pool_geom *g, const float *x, int n, float *y, int32_t *argmax);
    void (*maxpool_bwd)(const hcnn_pool_geom *g, const float *dy, const int32_t *argmax, int n,
                        float *dx);
    /* average pooling, padding counted in the divisor (PyTorch's default) */
    void (*avgpool_fwd)(const hcnn_pool_geom *g, const float *x, int n, float *y);
    void (*avgpool_bwd)(const hcnn_pool_geom *g, const float *dy, int n, float *dx);

    /* batch normalisation over (n, h, w) per channel; np = h*w.
     * Training: saves mean and inverse std (per channel) for backward and
     * updates running statistics (running_var uses the unbiased variance,
     * as PyTorch does).  Inference: uses running statistics.  Both write
     * y = act(gamma * xhat + beta + add), act = ReLU if relu else identity,
     * add (shaped like y) skipped if NULL: a residual block's addition and
     * ReLU, or the ReLU that follows, in the same pass. */
    void (*bn_fwd_train)(const float *x, int n, int c, int np, const float *gamma,
                         const float *beta, float eps, float momentum, float *running_mean,
                         float *running_var, float *save_mean, float *save_invstd,
                         const float *add, int relu, float *y);
    void (*bn_fwd_infer)(const float *x, int n, int c, int np, const float *gamma,
                         const float *beta, float eps, const float *running_mean,
                         const float *running_var, const float *add, int relu, float *y);
    /* dx overwritten; dgamma, dbeta accumulated.  relu: the forward fused
     * the ReLU that follows, and dy is that ReLU's output gradient; the
     * mask [y > 0] is applied here, y recomputed from x, gamma and beta. */
    void (*bn_bwd)(const float *x, const float *dy, int n, int c, int np, const float *gamma,
                   const float *beta, const float *save_mean, const float *save_invstd,
                   int relu, float *dx, float *dgamma, float *dbeta);

    /* softmax + cross-entropy on logits [n][k]: returns the summed loss,
     * counts correct argmax predictions, and writes
     * dlogits = (softmax - onehot) * grad_scale (dlogits may be NULL). */
    double (*softmax_xent)(const float *logits, const int32_t *labels, int n, int k,
                           float grad_scale, float *dlogits, int *correct);

    /* SGD with momentum (PyTorch semantics):
     *   g' = g + wd * w;  v = mu * v + g';  w -= lr * (nesterov ? g' + mu * v : v) */
    void (*sgd_step)(float *w, const float *g, float *v, size_t n, float lr, float mu, float wd,
                     int nesterov);
    /* sum of squares (for gradient-norm checks and NaN detection) */
    double (*sum_sq)(const float *x, size_t n);
} hcnn_backend;

/* The CPU backend: OpenBLAS (OpenMP variant) + OpenMP loops (src/cpu/). */
const hcnn_backend *hcnn_backend_cpu(void);
/* The same behind memory the host cannot dereference (src/cpu/devmem.c):
 * host_memory 0, so a run on it proves that nothing touches a tensor
 * except through the backend. */
const hcnn_backend *hcnn_backend_cpu_devmem(void);

#endif
