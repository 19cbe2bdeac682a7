/* The CUDA batch-norm's per-channel sums over a table of partial sums,
 * shared by bn.cu (its plane tables: the forward's statistics, the
 * backward's two sums, the convolution's bias gradient) and bn_nhwc.cu
 * (its row blocks): the sums of a channel in order, in double, the CPU's
 * order (src/core/hd.h, src/cpu/bn.c). */
#include "cuda.h"

/* The tables (bn.cu's plane_stats' and bwd_plane's; bn_nhwc.cu's row blocks')
 * hold a value or a pair a (row, channel), and a channel's sums run over its
 * rows in order, in double (the CPU's order).  A thread a channel walking
 * its rows waited on each load in turn: bn_channel_stats_kernel took 78 us
 * for layer2.0.bn1's 128 channels x 128 images, one block at 6% occupancy
 * (H200, Nsight Compute, 2026-11-30), bwd_channel_kernel 15.2 us.  Here a
 * block takes CHANNEL_TILE channels: all its threads load ROWS_STAGED rows
 * of them at once into shared memory (neighbouring threads, neighbouring
 * channels: NCHW's [image][channel] tables, one band a plane, and NHWC's
 * [block][channel] are read in whole lines; bands of a plane are not), then
 * its first warp, a thread a channel, adds them in order from there.  The
 * same operations in the same order as before: the same bits (on the
 * emulation against src/core/hd.h, tests/unit/test_cuda_bn; on a GPU not
 * yet run, nvcc's PTX of the old and new bn_channel_stats_kernel has the
 * same multiply, fused multiply-add and add a piece). */
#define CHANNEL_TILE 32
#define STAGE_LOADS 16 /* loads a thread has in flight */
#define ROWS_STAGED (HCNN_CUDA_BLOCK / CHANNEL_TILE * STAGE_LOADS)

/* row q of channel ch: ((q / bands * c + ch) * bands + q % bands) * stride
 * (bands > 1: bands of a plane, hcnn_hd_bn_piece_at's pieces), or where
 * by_piece (q * c + ch) * stride (bn_nhwc.cu's row blocks: the bands of one
 * plane, [block][channel], so that a warp's channels are whole lines) */
typedef struct channel_rows {
    const float *table;
    int c, bands, stride, by_piece;
} channel_rows;

static unsigned channel_blocks(int c) { return (unsigned)((c + CHANNEL_TILE - 1) / CHANNEL_TILE); }

/* rows [r0, r0 + rows) of the block's channels [ch0, ch0 + CHANNEL_TILE):
 * the first `width` (1, 2) floats of each into tile[row][0..width)[channel] */
static __device__ void stage_rows(channel_rows t, int r0, int rows, int ch0, int width,
                                  float (*tile)[2][CHANNEL_TILE])
{
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int k = 0; k < STAGE_LOADS; k++) {
        const int e = k * HCNN_CUDA_BLOCK + (int)threadIdx.x, r = e / CHANNEL_TILE;
        const int j = e - r * CHANNEL_TILE, ch = ch0 + j;
        if (r < rows && ch < t.c) {
            const int q = r0 + r, i = q / t.bands;
            const size_t at = t.by_piece ? (size_t)q * t.c + ch
                                         : ((size_t)i * t.c + ch) * t.bands + (q - i * t.bands);
            const float *o = t.table + at * t.stride;
            tile[r][0][j] = o[0];
            if (width > 1)
                tile[r][1][j] = o[1];
        }
    }
}

/* A channel's statistics from a piece of nb images of the table: src/core/
 * hd.h's hcnn_hd_bn_table_stats (its piece functions, pieces in order;
 * by_piece: the pairs [piece][c], channel_rows) over the staged rows,
 * merged with the pieces' before it (done values a
 * channel, their mean and m2 in state[2 ch]); at the last piece, the saved
 * and running statistics */
static __global__ void bn_channel_stats_kernel(const float *table, int nb, int c, int np,
                                               int bands, int band_px, int by_piece,
                                               double done, int last,
                                               double *state, float eps, float momentum,
                                               float *save_mean, float *save_invstd,
                                               float *running_mean, float *running_var)
{
    __shared__ float tile[ROWS_STAGED][2][CHANNEL_TILE];
    const int j = (int)threadIdx.x, ch0 = (int)blockIdx.x * CHANNEL_TILE, ch = ch0 + j;
    const int adds = j < CHANNEL_TILE && ch < c; /* (every thread stages) */
    const channel_rows t = {table, c, bands, 2, by_piece};
    const int pieces = nb * bands;
    const double cnt = (double)nb * np, last_px = (double)(np - (bands - 1) * band_px);
    double sum = 0.0, ss = 0.0, mu = 0.0;
    for (int sweep = 0; sweep < 2; sweep++) { /* the means, then the deviations */
        for (int r0 = 0; r0 < pieces; r0 += ROWS_STAGED) {
            const int rows = pieces - r0 < ROWS_STAGED ? pieces - r0 : ROWS_STAGED;
            stage_rows(t, r0, rows, ch0, sweep + 1, tile);
            __syncthreads();
            for (int r = 0; adds && r < rows; r++) {
                const double px = hcnn_hd_bn_piece_px(r0 + r, bands, band_px, last_px);
                if (sweep == 0)
                    hcnn_hd_bn_add_mean(&sum, px, tile[r][0][j]);
                else
                    hcnn_hd_bn_add_dev(&ss, px, tile[r][0][j], tile[r][1][j], mu);
            }
            __syncthreads();
        }
        mu = sum / cnt;
    }
    if (!adds)
        return;
    double mean = done > 0.0 ? state[2 * ch] : 0.0, m2 = done > 0.0 ? state[2 * ch + 1] : 0.0;
    hcnn_hd_bn_merge(done, &mean, &m2, cnt, mu, ss);
    if (!last) {
        state[2 * ch] = mean, state[2 * ch + 1] = m2;
        return;
    }
    save_mean[ch] = (float)mean;
    save_invstd[ch] =
        hcnn_hd_bn_finish(mean, m2, done + cnt, eps, momentum, &running_mean[ch], &running_var[ch]);
}

void hcnn_cuda_bn_table_stats(const hcnn_backend *be, const float *table, int nb, int c, int np,
                              int bands, int band_px, int by_piece, double done, int last,
                              double *state, float eps, float momentum, float *save_mean,
                              float *save_invstd, float *running_mean, float *running_var)
{
    HCNN_LAUNCH_BARRIER(bn_channel_stats_kernel, channel_blocks(c), HCNN_CUDA_BLOCK, 0,
                        cuda_of(be)->stream, table, nb, c, np, bands, band_px, by_piece, done,
                        last, state,
                        eps, momentum, save_mean, save_invstd, running_mean, running_var);
    HCNN_CUDA_LAUNCHED();
}


/* The channel's two sums over a piece of nb rows of the table (images; NHWC:
 * row blocks), in double, rows in order, carried in acc[2 ch] from the
 * pieces before it (first: none); at the last piece, dbeta and dgamma
 * accumulated and the two means dx needs */
static __global__ void bwd_channel_kernel(const float *table, int nb, int c, int first, int last,
                                          double cnt, double *acc, float *dgamma, float *dbeta,
                                          float *mdy, float *mdyx)
{
    __shared__ float tile[ROWS_STAGED][2][CHANNEL_TILE];
    const int j = (int)threadIdx.x, ch0 = (int)blockIdx.x * CHANNEL_TILE, ch = ch0 + j;
    const int adds = j < CHANNEL_TILE && ch < c;
    const channel_rows t = {table, c, 1, 2, 0};
    double sdy = 0.0, sdyx = 0.0;
    if (adds)
        sdy = first ? 0.0 : acc[2 * ch], sdyx = first ? 0.0 : acc[2 * ch + 1];
    for (int r0 = 0; r0 < nb; r0 += ROWS_STAGED) {
        const int rows = nb - r0 < ROWS_STAGED ? nb - r0 : ROWS_STAGED;
        stage_rows(t, r0, rows, ch0, 2, tile);
        __syncthreads();
        for (int r = 0; adds && r < rows; r++) { /* the CPU's order */
            sdy += tile[r][0][j];
            sdyx += tile[r][1][j];
        }
        __syncthreads();
    }
    if (!adds)
        return;
    if (!last) {
        acc[2 * ch] = sdy, acc[2 * ch + 1] = sdyx;
        return;
    }
    dbeta[ch] += (float)sdy;
    dgamma[ch] += (float)sdyx;
    mdy[ch] = (float)(sdy / cnt);
    mdyx[ch] = (float)(sdyx / cnt);
}

void hcnn_cuda_bn_table_sums(const hcnn_backend *be, const float *table, int nb, int c, int first,
                             int last, double cnt, double *acc, float *dgamma, float *dbeta,
                             float *mdy, float *mdyx)
{
    HCNN_LAUNCH_BARRIER(bwd_channel_kernel, channel_blocks(c), HCNN_CUDA_BLOCK, 0,
                        cuda_of(be)->stream, table, nb, c, first, last, cnt, acc, dgamma, dbeta,
                        mdy, mdyx);
    HCNN_CUDA_LAUNCHED();
}

/* channel ch's total over a piece of nb images of plane_stats' totals, in
 * double, images in order (the CPU's), carried in acc[ch]; at the last
 * piece added to db[ch] */
static __global__ void channel_total_kernel(const float *table, int nb, int c, int first, int last,
                                            double *acc, float *db)
{
    __shared__ float tile[ROWS_STAGED][2][CHANNEL_TILE];
    const int j = (int)threadIdx.x, ch0 = (int)blockIdx.x * CHANNEL_TILE, ch = ch0 + j;
    const int adds = j < CHANNEL_TILE && ch < c;
    const channel_rows t = {table, c, 1, 1, 0};
    double s = adds && !first ? acc[ch] : 0.0;
    for (int r0 = 0; r0 < nb; r0 += ROWS_STAGED) {
        const int rows = nb - r0 < ROWS_STAGED ? nb - r0 : ROWS_STAGED;
        stage_rows(t, r0, rows, ch0, 1, tile);
        __syncthreads();
        for (int r = 0; adds && r < rows; r++)
            s += tile[r][0][j];
        __syncthreads();
    }
    if (!adds)
        return;
    if (last)
        db[ch] += (float)s;
    else
        acc[ch] = s;
}

void hcnn_cuda_channel_totals(const hcnn_backend *be, const float *table, int nb, int c, int first,
                              int last, double *acc, float *db)
{
    HCNN_LAUNCH_BARRIER(channel_total_kernel, channel_blocks(c), HCNN_CUDA_BLOCK, 0,
                        cuda_of(be)->stream, table, nb, c, first, last, acc, db);
    HCNN_CUDA_LAUNCHED();
}
