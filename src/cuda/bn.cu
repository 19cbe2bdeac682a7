/* Batch normalisation of the CUDA backend: training (batch statistics,
 * running statistics) and inference forwards with the fused addition and
 * ReLU, and the backward with the fused ReLU mask.  This file's kernels are
 * NCHW's, but for the element-wise ones (bn_apply, training's and
 * inference's, and bwd_dx), which an NHWC instance (be->layout) shares; it
 * runs bn_nhwc.cu's sums over row blocks in place of plane_stats and
 * bwd_plane, in as many passes and launches.  The channel kernels, both
 * layouts', are bn_channel.cu's.
 *
 * Each pass reads the tensors at most twice and takes at most 3 launches:
 *   forward   plane_stats (each plane's mean and sum of squared deviations
 *             into a table; skipped when the convolution before gathered
 *             them: hcnn_cuda_bn_gather), bn_channel_stats (each channel's
 *             statistics from its planes' pairs, src/core/hd.h's
 *             hcnn_hd_bn_table_stats as the CPU's gathered forward, and the
 *             running statistics), bn_apply (with the addition and ReLU);
 *   backward  bwd_plane (each plane's sums of g and g * xhat), bwd_channel
 *             (dgamma, dbeta and the two means, in double, images in
 *             order), bwd_dx;
 *   bias sum  plane_stats (sums only), channel_total.
 * It took 3 passes and about 9 launches forward, and 7 launches backward
 * (issue 42; ../shared/gpu-h100-2026-11-27/: bn_apply, bwd_dx and
 * channel_acc among the ten longest kernels after the GEMMs and im2col).
 *
 * The sums follow the CPU's order (src/cpu/bn.c): a plane of np values is
 * summed in 16 lanes (lane l takes elements l, l + 16, ... of the whole
 * blocks of 16) plus a tail, the lanes added pairwise (hcnn_hd_lanes_total);
 * planes are added in double, images in order.  A plane's 17 partial sums
 * are 17 threads of one warp (16 of half a warp where it has no tail),
 * totalled through shared memory by the first; its mean is known to the
 * block before the deviations' pass, which reads the plane again from
 * cache within the same launch.  A channel's planes are added by one
 * thread, in order, from rows its block stages in shared memory
 * (bn_channel.cu, shared with bn_nhwc.cu).  No atomics: the same bits
 * every run.
 *
 * A batch whose table does not fit the reduction scratch (more than about
 * a million planes) runs in pieces of whole images: the forward merges the
 * pieces' statistics (hcnn_hd_bn_merge), the backward carries its double
 * sums over; each piece adds a plane and a channel launch. */
#include <math.h>

#include "cuda.h"

#define LANES 16
#define SLOTS (LANES + 1) /* the lanes and the tail of a plane */
/* the threads of a plane: a warp, its SLOTS sums on the first SLOTS; or,
 * where np is a multiple of LANES (no tail: ResNet-18's planes), half a
 * warp, its lanes alone, so that every thread sums and a warp reads two
 * planes' 64-byte runs at once (on the H200, 2026-11-30, plane_stats_kernel
 * and bwd_plane_kernel reached 45% and 42% of the memory roof with 15 of
 * each warp's 32 threads idle; not yet timed since) */
#define MAX_PLANES_PER_BLOCK (HCNN_CUDA_BLOCK / LANES)
static __host__ __device__ int plane_threads(int np) { return np % LANES ? 32 : LANES; }

/* slot l of a plane p of np values: lane l's sum over the whole blocks of
 * 16, or (l == LANES) the tail's, in order, of x (sq 0) or (x - m)^2 */
static __device__ float slot_sum(const float *p, int np, int l, int sq, float m)
{
    const int whole = np / LANES * LANES;
    const int lo = l < LANES ? l : whole, hi = l < LANES ? whole : np, step = l < LANES ? LANES : 1;
    float s = 0.0f;
    for (int i = lo; i < hi; i += step) {
        const float v = sq ? (p[i] - m) * (p[i] - m) : p[i];
        s += v;
    }
    return s;
}

static unsigned plane_blocks(size_t planes, int np)
{
    const size_t per = (size_t)(HCNN_CUDA_BLOCK / plane_threads(np));
    return (unsigned)((planes + per - 1) / per);
}

/* stats 1: table[2 q] = plane q's mean (its total over np as a float, the
 * CPU's division), table[2 q + 1] = its sum of squared deviations from it
 * (backend.h, hcnn_bn_stats: one band a plane); stats 0: table[q] = the
 * plane's total */
static __global__ void plane_stats_kernel(const float *x, size_t planes, int np, int stats,
                                          float *table)
{
    __shared__ float slot[MAX_PLANES_PER_BLOCK][SLOTS];
    __shared__ float mean[MAX_PLANES_PER_BLOCK];
    const int pt = plane_threads(np), w = (int)threadIdx.x / pt, l = (int)threadIdx.x % pt;
    const size_t q = (size_t)blockIdx.x * (HCNN_CUDA_BLOCK / pt) + w;
    const int on = q < planes && l < SLOTS;
    const float *p = on ? x + q * (size_t)np : x;
    if (on) {
        slot[w][l] = slot_sum(p, np, l, 0, 0.0f);
        if (pt == LANES && l == 0) /* the tail's sum: none (a 17th thread's is 0 too) */
            slot[w][LANES] = 0.0f;
    }
    __syncthreads();
    if (on && l == 0) {
        const float tot = hcnn_hd_lanes_total(slot[w], slot[w][LANES]);
        if (stats)
            mean[w] = tot / (float)np;
        else
            table[q] = tot;
    }
    if (!stats) /* the same for every thread of the launch */
        return;
    __syncthreads();
    if (on) {
        slot[w][l] = slot_sum(p, np, l, 1, mean[w]);
        if (pt == LANES && l == 0)
            slot[w][LANES] = 0.0f;
    }
    __syncthreads();
    if (on && l == 0) {
        table[2 * q] = mean[w];
        table[2 * q + 1] = hcnn_hd_lanes_total(slot[w], slot[w][LANES]);
    }
}

static void plane_stats(const hcnn_backend *be, const float *x, size_t planes, int np, int stats,
                        float *table)
{
    HCNN_LAUNCH_BARRIER(plane_stats_kernel, plane_blocks(planes, np), HCNN_CUDA_BLOCK, 0,
                        cuda_of(be)->stream, x, planes, np, stats, table);
    HCNN_CUDA_LAUNCHED();
}

/* Where a channel's a and b of y = act(x * a + b + add) come from: the
 * saved statistics (training: hcnn_hd_bn_affine of the saved mean and
 * invstd) or the running ones (inference: a = gamma / sqrt(running_var +
 * eps), hcnn_hd_bn_infer_scale, and b from the running mean), with the
 * CPU's operations (src/cpu/bn.c), so that training and inference share
 * the element-wise kernels below */
typedef struct bn_coefs {
    const float *gamma, *beta, *mean;
    const float *invstd_or_var; /* the saved invstd (training), the running variance (inference) */
    float eps;                  /* inference's */
    int infer;
} bn_coefs;

static __device__ void channel_affine(bn_coefs co, int ch, float *a, float *b)
{
    if (co.infer) {
        *a = hcnn_hd_bn_infer_scale(co.gamma[ch], co.invstd_or_var[ch], co.eps);
        *b = co.beta[ch] - co.mean[ch] * *a;
    } else {
        hcnn_hd_bn_affine(co.gamma[ch], co.beta[ch], co.mean[ch], co.invstd_or_var[ch], a, b);
    }
}

/* y = act(x * a + b + add), a thread an element (bn_apply4_kernel below
 * where the tensors allow) */
static __global__ void bn_apply_kernel(const float *x, size_t total, hcnn_cuda_channels eg,
                                       bn_coefs co, const float *add, int relu, float *y)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const int ch = hcnn_cuda_channel(eg, k);
    float a, b;
    channel_affine(co, ch, &a, &b);
    y[k] = hcnn_hd_bn_apply(x[k], a, b, add != NULL, add ? add[k] : 0.0f, relu);
}

/* The backward's two sums of each plane, with the CPU's additions
 * (src/cpu/bn.c, plane_sum_dy_dyx): table[2 q] = sum of g, table[2 q + 1]
 * = sum of g * (x - m) * is, g through the fused ReLU's mask */
static __global__ void bwd_plane_kernel(const float *x, const float *dy, size_t planes, int c,
                                        int np, const float *gamma, const float *beta,
                                        const float *mean, const float *invstd, int relu,
                                        float *table)
{
    __shared__ float sg[MAX_PLANES_PER_BLOCK][SLOTS], sgx[MAX_PLANES_PER_BLOCK][SLOTS];
    const int pt = plane_threads(np), w = (int)threadIdx.x / pt, l = (int)threadIdx.x % pt;
    const size_t q = (size_t)blockIdx.x * (HCNN_CUDA_BLOCK / pt) + w;
    const int on = q < planes && l < SLOTS;
    if (on) {
        const int ch = (int)(q % (size_t)c), whole = np / LANES * LANES;
        const float *xp = x + q * (size_t)np, *dp = dy + q * (size_t)np;
        const float m = mean[ch], is = invstd[ch];
        float a, b;
        hcnn_hd_bn_affine(gamma[ch], beta[ch], m, is, &a, &b);
        const int lo = l < LANES ? l : whole, hi = l < LANES ? whole : np;
        const int step = l < LANES ? LANES : 1;
        float s1 = 0.0f, s2 = 0.0f;
        for (int i = lo; i < hi; i += step) {
            const float g = hcnn_hd_bn_grad(dp[i], xp[i], relu, a, b);
            s1 += g;
            s2 += g * (xp[i] - m) * is;
        }
        sg[w][l] = s1, sgx[w][l] = s2;
        if (pt == LANES && l == 0) /* no tail (plane_stats_kernel) */
            sg[w][LANES] = 0.0f, sgx[w][LANES] = 0.0f;
    }
    __syncthreads();
    if (on && l == 0) {
        table[2 * q] = hcnn_hd_lanes_total(sg[w], sg[w][LANES]);
        table[2 * q + 1] = hcnn_hd_lanes_total(sgx[w], sgx[w][LANES]);
    }
}

static __global__ void bwd_dx_kernel(const float *x, const float *dy, size_t total,
                                     hcnn_cuda_channels eg, const float *gamma, const float *beta,
                                     const float *mean, const float *invstd, int relu,
                                     const float *mdy, const float *mdyx, float *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= total)
        return;
    const int ch = hcnn_cuda_channel(eg, k);
    float a, b;
    hcnn_hd_bn_affine(gamma[ch], beta[ch], mean[ch], invstd[ch], &a, &b);
    const float g = hcnn_hd_bn_grad(dy[k], x[k], relu, a, b);
    dx[k] = hcnn_hd_bn_dx(g, x[k], a, mean[ch], invstd[ch], mdy[ch], mdyx[ch]);
}

/* ---- bn_apply and bwd_dx four elements a thread ------------------------------------
 * On the H200 (Nsight Compute, 2026-11-30, layer2.0.bn1) bn_apply_kernel
 * and bwd_dx_kernel were bound by their index arithmetic, not by memory
 * (72% and 73% of the SMs' throughput, 24% and 31% of the memory roof): a
 * thread an element, its channel by a 64-bit division and remainder.  The
 * kernels below take a float4 a thread and its channel by two of hd.h's
 * 32-bit dividers, the elements' values by the same expressions (the same
 * bits).  They run where the quads stay within a channel (np a multiple of
 * 4) or, NHWC's planes of one pixel, hold four neighbouring channels (c a
 * multiple of 4), the tensors 16-byte aligned, fewer than 2^32 quads;
 * elsewhere the kernels above (NCHW's 7x7 planes, say), which since
 * 2026-12-02 take their channel by the same dividers too (cuda.h's
 * hcnn_cuda_channels; unmeasured on a GPU).  Inference goes by bn_apply's
 * two too (bn_coefs). */
typedef struct quad_geom {
    hcnn_hd_divider per, c; /* quads a plane and channels (spread: 1 and c / 4) */
    int spread;             /* 0: a quad's elements in one channel; 1: channels ch .. ch + 3 */
} quad_geom;

/* the geometry, or 0 where the four-element kernels do not apply */
static int quad_geom_of(size_t total, int c, int np, const void *const *ptrs, int nptrs,
                        quad_geom *g)
{
    g->spread = np % 4 != 0;
    if (total % 4 || total / 4 > 0xffffffffu || (g->spread && (np != 1 || c % 4)))
        return 0;
    for (int i = 0; i < nptrs; i++)
        if (ptrs[i] && (uintptr_t)ptrs[i] % 16)
            return 0;
    g->per = hcnn_hd_divider_of(g->spread ? 1u : (uint32_t)(np / 4));
    g->c = hcnn_hd_divider_of((uint32_t)(g->spread ? c / 4 : c));
    return 1;
}

/* quad k's first channel */
static __device__ int quad_channel(quad_geom g, uint32_t k)
{
    const uint32_t plane = hcnn_hd_div(g.per, k), ch = plane - hcnn_hd_div(g.c, plane) * g.c.d;
    return (int)(g.spread ? 4 * ch : ch);
}

static __global__ void bn_apply4_kernel(const float4 *x, unsigned quads, quad_geom g, bn_coefs co,
                                        const float4 *add, int relu, float4 *y)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= quads)
        return;
    const int ch = quad_channel(g, (uint32_t)k);
    const float4 xv = x[k], av = add ? add[k] : xv;
    const float xs[4] = {xv.x, xv.y, xv.z, xv.w}, as[4] = {av.x, av.y, av.z, av.w};
    float out[4], a = 0.0f, b = 0.0f; /* (set at j == 0: for the compiler) */
    for (int j = 0; j < 4; j++) {
        if (j == 0 || g.spread)
            channel_affine(co, ch + j * g.spread, &a, &b);
        out[j] = hcnn_hd_bn_apply(xs[j], a, b, add != NULL, as[j], relu);
    }
    y[k] = float4{out[0], out[1], out[2], out[3]};
}

static __global__ void bwd_dx4_kernel(const float4 *x, const float4 *dy, unsigned quads,
                                      quad_geom g, const float *gamma, const float *beta,
                                      const float *mean, const float *invstd, int relu,
                                      const float *mdy, const float *mdyx, float4 *dx)
{
    const size_t k = HCNN_CUDA_INDEX();
    if (k >= quads)
        return;
    const int ch = quad_channel(g, (uint32_t)k);
    const float4 xv = x[k], dv = dy[k];
    const float xs[4] = {xv.x, xv.y, xv.z, xv.w}, ds[4] = {dv.x, dv.y, dv.z, dv.w};
    float out[4], a = 0.0f, b = 0.0f; /* (set at j == 0: for the compiler) */
    for (int j = 0; j < 4; j++) {
        const int cj = ch + j * g.spread;
        if (j == 0 || g.spread)
            hcnn_hd_bn_affine(gamma[cj], beta[cj], mean[cj], invstd[cj], &a, &b);
        const float gj = hcnn_hd_bn_grad(ds[j], xs[j], relu, a, b);
        out[j] = hcnn_hd_bn_dx(gj, xs[j], a, mean[cj], invstd[cj], mdy[cj], mdyx[cj]);
    }
    dx[k] = float4{out[0], out[1], out[2], out[3]};
}

/* The scratch of a call: `per` doubles a channel (what the pieces carry
 * over), then the table of as many whole images as fit, `floats` floats a
 * plane.  Returns the images a piece holds. */
static int scratch_layout(const hcnn_backend *be, int n, int c, int per, int floats, double **state,
                          float **table)
{
    const size_t cap = cuda_of(be)->scratch_doubles, fixed = (size_t)per * c;
    const size_t per_image = ((size_t)c * floats + 1) / 2;
    if (fixed + per_image > cap)
        hcnn_cuda_fail("batch-norm", __FILE__, __LINE__,
                       "one image's channels need more partial sums than the reduction scratch "
                       "holds");
    const size_t fit = (cap - fixed) / per_image;
    double *s = hcnn_cuda_scratch(be, cap);
    *state = s;
    *table = (float *)(s + fixed);
    return fit < (size_t)n ? (int)fit : n;
}

/* Each plane of y [n][c][np] as one band (backend.h, hcnn_bn_stats): its
 * mean and sum of squared deviations from it, with the CPU's additions
 * (src/cpu/bn.c, hcnn_cpu_bn_stats_rows): one launch after the kernels that
 * wrote y, the batch-norm's first pass taken here. */
void hcnn_cuda_bn_gather(const hcnn_backend *be, const float *y, int n, int c, int np,
                         hcnn_bn_stats *stats)
{
    stats->bands = 0, stats->band_px = 0;
    /* the table is one pair a plane of NCHW; an NHWC batch-norm takes its
     * statistics from x (bn_nhwc.cu) */
    if (be->layout == HCNN_LAYOUT_NHWC || n <= 0 || c <= 0 || (size_t)n * c * 2 > stats->cap)
        return;
    plane_stats(be, y, (size_t)n * c, np, 1, stats->part);
    stats->bands = 1, stats->band_px = np;
}

/* The convolution's bias gradient (bias.cu's other sums are per column):
 * db[ch] += the sum of channel ch of dy [n][c][np], as the CPU's
 * (src/cpu/bias.c: each plane in the 16-lane order, planes added in double,
 * images in order): the same bits, in 2 launches.  It was one thread a
 * plane walking its np values in a chain, the warp's threads np floats
 * apart: on the H200 (2026-11-27) 40 us a call on average over LeNet-5's
 * two convolutions at batch 256 (conv1: 1536 planes of 784), 0.08 ms of
 * its step. */
void hcnn_cuda_channel_sum_acc(const hcnn_backend *be, const float *dy, int n, int c, int np,
                               float *db)
{
    if (n <= 0 || c <= 0)
        return;
    double *acc;
    float *table;
    const int piece = scratch_layout(be, n, c, 1, 1, &acc, &table);
    for (int i0 = 0; i0 < n; i0 += piece) {
        const int nb = n - i0 < piece ? n - i0 : piece;
        plane_stats(be, dy + (size_t)i0 * c * np, (size_t)nb * c, np, 0, table);
        hcnn_cuda_channel_totals(be, table, nb, c, i0 == 0, i0 + nb == n, acc, db);
    }
}

/* y = act(x * a + b + add) over [.][c][np] (NHWC: np 1), four elements a
 * thread where quad_geom_of allows */
static void bn_apply(const hcnn_backend *be, const float *x, size_t total, int c, int np,
                     bn_coefs co, const float *add, int relu, float *y)
{
    const void *const ptrs[] = {x, add, y};
    quad_geom g;
    if (quad_geom_of(total, c, np, ptrs, 3, &g))
        HCNN_LAUNCH(bn_apply4_kernel, hcnn_cuda_blocks(total / 4), HCNN_CUDA_BLOCK,
                    cuda_of(be)->stream, (const float4 *)x, (unsigned)(total / 4), g, co,
                    (const float4 *)add, relu, (float4 *)y);
    else
        HCNN_LAUNCH(bn_apply_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, cuda_of(be)->stream,
                    x, total, hcnn_cuda_channels_of(total, c, np), co, add, relu, y);
    HCNN_CUDA_LAUNCHED();
}

void hcnn_cuda_bn_fwd_train(const hcnn_backend *be, const float *x, int n, int c, int np,
                            const float *gamma, const float *beta, float eps, float momentum,
                            float *running_mean, float *running_var, float *save_mean,
                            float *save_invstd, const float *add, int relu,
                            const hcnn_bn_stats *stats, float *y)
{
    const size_t total = (size_t)n * c * np;
    if (total == 0)
        return;
    const bn_coefs co = {gamma, beta, save_mean, save_invstd, 0.0f, 0};
    if (be->layout == HCNN_LAYOUT_NHWC) { /* from x, stats unused (bn_nhwc.cu) */
        hcnn_cuda_bn_nhwc_stats(be, x, n, c, np, eps, momentum, running_mean, running_var,
                                save_mean, save_invstd);
        bn_apply(be, x, total, c, 1, co, add, relu, y);
        return;
    }
    if (stats && stats->bands > 0) { /* gathered by the convolution (conv.cu) */
        hcnn_cuda_bn_table_stats(be, stats->part, n, c, np, stats->bands, stats->band_px, 0, 0.0,
                                 1, NULL, eps, momentum, save_mean, save_invstd, running_mean,
                                 running_var);
        bn_apply(be, x, total, c, np, co, add, relu, y);
        return;
    }
    double *state;
    float *table;
    const int piece = scratch_layout(be, n, c, 2, 2, &state, &table);
    for (int i0 = 0; i0 < n; i0 += piece) {
        const int nb = n - i0 < piece ? n - i0 : piece;
        plane_stats(be, x + (size_t)i0 * c * np, (size_t)nb * c, np, 1, table);
        hcnn_cuda_bn_table_stats(be, table, nb, c, np, 1, np, 0, (double)i0 * np, i0 + nb == n,
                                 state, eps, momentum, save_mean, save_invstd, running_mean,
                                 running_var);
    }
    bn_apply(be, x, total, c, np, co, add, relu, y);
}

void hcnn_cuda_bn_fwd_infer(const hcnn_backend *be, const float *x, int n, int c, int np,
                            const float *gamma, const float *beta, float eps,
                            const float *running_mean, const float *running_var, const float *add,
                            int relu, float *y)
{
    const size_t total = (size_t)n * c * np;
    if (total == 0)
        return;
    /* NHWC's [rows][c] is NCHW with planes of one pixel, element-wise */
    const int plane = be->layout == HCNN_LAYOUT_NHWC ? 1 : np;
    const bn_coefs co = {gamma, beta, running_mean, running_var, eps, 1};
    bn_apply(be, x, total, c, plane, co, add, relu, y);
}

void hcnn_cuda_bn_bwd(const hcnn_backend *be, const float *x, const float *dy, int n, int c,
                      int np, const float *gamma, const float *beta, const float *save_mean,
                      const float *save_invstd, int relu, float *dx, float *dgamma, float *dbeta)
{
    const size_t total = (size_t)n * c * np;
    if (total == 0)
        return;
    cudaStream_t st = cuda_of(be)->stream;
    float *mdy, *mdyx; /* the two means bwd_dx reads, [c] floats each */
    const int nhwc = be->layout == HCNN_LAYOUT_NHWC;
    double *acc = NULL; /* NCHW: [c][2], then the two means */
    float *table = NULL;
    const int piece = nhwc ? n : scratch_layout(be, n, c, 3, 2, &acc, &table);
    if (nhwc)
        hcnn_cuda_bn_nhwc_bwd_sums(be, x, dy, n, c, np, gamma, beta, save_mean, save_invstd, relu,
                                   dgamma, dbeta, &mdy, &mdyx);
    else
        mdy = (float *)(acc + 2 * (size_t)c), mdyx = mdy + c;
    for (int i0 = 0; !nhwc && i0 < n; i0 += piece) {
        const int nb = n - i0 < piece ? n - i0 : piece;
        const size_t planes = (size_t)nb * c, off = (size_t)i0 * c * np;
        HCNN_LAUNCH_BARRIER(bwd_plane_kernel, plane_blocks(planes, np), HCNN_CUDA_BLOCK, 0, st,
                            x + off, dy + off, planes, c, np, gamma, beta, save_mean, save_invstd,
                            relu, table);
        HCNN_CUDA_LAUNCHED();
        hcnn_cuda_bn_table_sums(be, table, nb, c, i0 == 0, i0 + nb == n, (double)n * np, acc,
                                dgamma, dbeta, mdy, mdyx);
    }
    if (!dx)
        return;
    const int plane = nhwc ? 1 : np; /* NHWC: planes of one pixel */
    const void *const ptrs[] = {x, dy, dx};
    quad_geom g;
    if (quad_geom_of(total, c, plane, ptrs, 3, &g))
        HCNN_LAUNCH(bwd_dx4_kernel, hcnn_cuda_blocks(total / 4), HCNN_CUDA_BLOCK, st,
                    (const float4 *)x, (const float4 *)dy, (unsigned)(total / 4), g, gamma, beta,
                    save_mean, save_invstd, relu, (const float *)mdy, (const float *)mdyx,
                    (float4 *)dx);
    else
        HCNN_LAUNCH(bwd_dx_kernel, hcnn_cuda_blocks(total), HCNN_CUDA_BLOCK, st, x, dy, total,
                    hcnn_cuda_channels_of(total, c, plane), gamma, beta, save_mean, save_invstd,
                    relu, (const float *)mdy, (const float *)mdyx, dx);
    HCNN_CUDA_LAUNCHED();
}
