/* The CPU backend's pass_pieces (include/hcnn/backend.h): how each pass of
 * an operation is cut for nt threads, read from the plans the operations
 * make themselves (conv_plan.c's hcnn_conv_plan_make, winograd.c's
 * hcnn_wino_pieces, bn.c's hcnn_cpu_bn_pieces, gemm.c's
 * hcnn_cpu_gemm_pieces) and the parallel loops of the other files, phase by
 * phase, so that hcnn plan prices what the backend runs.
 *
 * Work is the backend's estimate in multiply-add equivalents: a product's
 * multiply-adds, and FLOAT_MACS for each float a streaming phase (im2col,
 * col2im, Winograd's transforms, layout changes, batch-norm, element-wise)
 * reads or writes.  Only ratios between the phases of one layer's passes
 * are used (the plan measures each pass's time; these split it). */
#include "bf16.h"
#include "conv_plan.h"

/* A float a streaming phase moves costs what FLOAT_MACS multiply-adds of a
 * GEMM do.  Measured on one thread of the development VM (Intel Xeon,
 * family 6 model 207), ResNet-18 at batch 16, `hcnn bench` profile with its
 * raw-GEMM reference (2026-11-28): layer1.0.conv1, Winograd F(4x4), forward
 * 7.84 ms of which its GEMMs 2.22 ms (151 M multiply-adds: 0.0147 ns each)
 * and its transforms 5.6 ms for about 8 M floats moved (0.70 ns each): 48;
 * layer4.1.conv1, F(2x2), 10.5 ms, GEMMs 4.43 ms (268 M: 0.0165 ns), the
 * transforms (weights included) 6.1 ms for 8.2 M floats (0.74 ns): 45. */
#define FLOAT_MACS 45.0

/* winograd.c's WINO_CACHE_TILES: a call on fewer tiles keeps the weights'
 * transform of the step's forward for its input gradient */
#define WINO_CACHE_TILES 64

static double stream(double floats) { return FLOAT_MACS * floats; }

/* element-wise loops (cpu.h's ELEMENTWISE): on all threads from 65536
 * floats, else on the calling thread */
static long elementwise_pieces(double floats, int nt) { return floats > 65536 ? nt : 1; }

/* hcnn_cpu_gemm's pieces (at most `target` tiles), and the sum of its k
 * chunks' partial products */
static void gemm_phases(hcnn_pieces *p, const char *name, const char *sums, int m, int n, int k,
                        int target, int repeat)
{
    int partial_rows;
    const int pieces = hcnn_cpu_gemm_pieces(m, n, k, target, &partial_rows);
    hcnn_pieces_push(p, name, pieces, (double)m * n * k, 0.0, repeat);
    if (partial_rows)
        hcnn_pieces_push(p, sums, partial_rows, stream((double)m * n * (pieces + 1)), 0.0,
                         repeat);
}

/* hcnn_cpu_transpose of rows x cols: blocks of 16 rows from 65536 floats */
static void transpose_phase(hcnn_pieces *p, const char *name, int rows, int cols, int repeat)
{
    const double floats = (double)rows * cols;
    hcnn_pieces_push(p, name, floats < 65536 ? 1 : (rows + 15) / 16, stream(2 * floats), 0.0,
                     repeat);
}

/* ---- convolutions ------------------------------------------------------------ */

static int wino_tiles(const hcnn_conv_desc *l, int m)
{
    return ((l->g.oh + m - 1) / m) * ((l->g.ow + m - 1) / m);
}

/* The phases of Winograd's calls over n images (winograd.c): chunks of
 * ph.images images, each transform / GEMMs / inverse (the input gradient's
 * scatter), or the weight gradient's transforms / GEMMs; the weights'
 * transform over output channels before, the weight gradient's inverse
 * after. */
typedef enum { WINO_FWD, WINO_DX, WINO_DW } wino_call;

static void wino_phases(const hcnn_conv_desc *l, const hcnn_exec *ex, int m, int n, int nt,
                        wino_call call, hcnn_pieces *p)
{
    const int a2 = (m + 2) * (m + 2), tiles = wino_tiles(l, m);
    const double cin = l->g.c, cout = l->out_c, in_img = cin * l->g.h * l->g.w,
                 out_img = cout * l->g.oh * l->g.ow;
    const double weights = cout * cin * (a2 + 9); /* 3x3 read, a x a written */
    /* the forward transforms the weights; the input gradient too unless the
     * forward's stayed in the layer's cache (a call of few tiles) */
    hcnn_wino_phases first;
    hcnn_wino_pieces(l, ex, m, n, nt, &first);
    if (call == WINO_FWD || (call == WINO_DX && (long)n * tiles >= WINO_CACHE_TILES))
        hcnn_pieces_push(p, "weights' transform", first.weights, stream(weights), 0.0, 1);
    const int full = n / first.images, rest = n % first.images;
    for (int k = 0; k < 2; k++) {
        const int chunks = k ? (rest > 0) : full, nb = k ? rest : first.images;
        if (!chunks)
            continue;
        hcnn_wino_phases ph = first;
        if (k)
            hcnn_wino_pieces(l, ex, m, nb, nt, &ph);
        const double cols = (double)nb * tiles, V = a2 * cin * cols, M = a2 * cout * cols;
        const double macs = a2 * cols * cin * cout;
        switch (call) {
        case WINO_FWD:
            hcnn_pieces_push(p, "forward transform", ph.fwd[0], stream(nb * in_img + V), 0.0,
                             chunks);
            hcnn_pieces_push(p, "forward GEMMs", ph.fwd[1], macs, 0.0, chunks);
            hcnn_pieces_push(p, "forward inverse", ph.fwd[2], stream(M + nb * out_img), 0.0,
                             chunks);
            break;
        case WINO_DX:
            hcnn_pieces_push(p, "input-gradient transform", ph.dx[0], stream(nb * out_img + M),
                             0.0, chunks);
            hcnn_pieces_push(p, "input-gradient GEMMs", ph.dx[1], macs, 0.0, chunks);
            hcnn_pieces_push(p, "input-gradient scatter", ph.dx[2], stream(V + nb * in_img), 0.0,
                             chunks);
            if (ph.dx_seams) /* each band's first two input rows, added after */
                hcnn_pieces_push(p, "input-gradient seams", ph.dx_seams,
                                 stream(2.0 * ph.dx_seams * 2 * l->g.w * 16), 0.0, chunks);
            break;
        case WINO_DW:
            hcnn_pieces_push(p, "weight-gradient transforms", ph.dw[0],
                             stream(nb * (in_img + out_img) + V + M), 0.0, chunks);
            hcnn_pieces_push(p, "weight-gradient GEMMs", ph.dw[1], macs, 0.0, chunks);
            break;
        }
    }
    if (call == WINO_DW)
        hcnn_pieces_push(p, "weight-gradient inverse", first.weights, stream(weights), 0.0, 1);
}

/* The per-thread plan (conv.c): forward items (a group of images, or a
 * block of an image's output rows); backward one queue of weight-gradient
 * chunks (consecutive items into a partial sum) and input-gradient items
 * (a group, or a block of an image's input channels), then the partials
 * added in chunk order. */
static void per_thread_fwd(const hcnn_conv_desc *l, const hcnn_conv_plan *pl, int n,
                           hcnn_pieces *p)
{
    const double K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c, C = l->g.c;
    const double cols = P * n;
    if (pl->shifted) { /* the taps' weights, then GEMMs on the padded planes */
        transpose_phase(p, "forward taps' weights", l->out_c * l->g.c, l->g.kh * l->g.kw, 1);
        const double wide = (double)hcnn_conv_padded_w(l) / l->g.ow;
        hcnn_pieces_push(p, "forward items", pl->nitems,
                         K * co * cols * wide + stream((C + 2 * co) * cols * wide), 0.0, 1);
    } else {
        hcnn_pieces_push(p, "forward items", pl->nitems, K * co * cols + stream((K + co) * cols),
                         0.0, 1);
    }
}

static void per_thread_bwd(const hcnn_conv_desc *l, const hcnn_conv_plan *pl, int n, int nt,
                           int dw, int need_dx, hcnn_pieces *p)
{
    const double K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c, C = l->g.c;
    const double cols = P * n, in = C * l->g.h * l->g.w * n;
    const double dw_work = dw ? K * co * cols + stream(K * cols) : 0.0;
    const double dx_work = need_dx ? K * co * cols + stream(K * cols + in) : 0.0;
    const int chunks = dw ? pl->nchunks : 0, items = need_dx ? pl->ndx : 0;
    if (need_dx && pl->shifted)
        transpose_phase(p, "input-gradient taps' weights", l->out_c * l->g.c, l->g.kh * l->g.kw,
                        1);
    if (chunks + items > 0) {
        const double a = chunks ? dw_work / chunks : 0.0, b = items ? dx_work / items : 0.0;
        hcnn_pieces_push(p, items ? "backward tasks" : "weight-gradient tasks", chunks + items,
                         dw_work + dx_work, a > b ? a : b, 1);
    }
    if (chunks && pl->dw_transposed) /* each partial back to [Cout][K] */
        transpose_phase(p, "weight-gradient partials transposed", hcnn_conv_k(l), l->out_c,
                        chunks);
    if (chunks)
        hcnn_pieces_push(p, "weight-gradient partials summed", elementwise_pieces(co * K, nt),
                         stream(3 * co * K), 0.0, chunks);
}

/* The batched plan (conv.c): chunks of pl->group images one after the
 * other, each operation of a chunk on all threads (im2col over channels x
 * images, the GEMM in hcnn_cpu_gemm's pieces, the layout change over
 * images x channels); a one-image chunk by row blocks. */
static void batched(const hcnn_conv_desc *l, const hcnn_conv_plan *pl, int n, int bwd, int dw,
                    int need_dx, hcnn_pieces *p)
{
    const int K = hcnn_conv_k(l), P = hcnn_conv_p(l), co = l->out_c, C = l->g.c;
    const int taps = l->g.kh * l->g.kw, hw = l->g.h * l->g.w;
    const int full = n / pl->group, rest = n % pl->group, target = hcnn_pieces_for(n);
    for (int k = 0; k < 2; k++) {
        const int chunks = k ? (rest > 0) : full, nb = k ? rest : pl->group;
        if (!chunks)
            continue;
        if (nb == 1) { /* row blocks of one image: im2col, the GEMM (and the bias) */
            const int blocks = (l->g.oh + pl->rows - 1) / pl->rows, cols = pl->rows * l->g.ow;
            const int reps = chunks * blocks;
            if (!bwd) {
                hcnn_pieces_push(p, "forward im2col", C, stream((double)K * cols), 0.0, reps);
                gemm_phases(p, "forward GEMM", "forward GEMM partial sums", co, cols, K, target,
                            reps);
            } else if (dw) {
                hcnn_pieces_push(p, "weight-gradient im2col", C, stream((double)K * cols), 0.0,
                                 reps);
                gemm_phases(p, "weight-gradient GEMM", "weight-gradient GEMM partial sums", co, K,
                            cols, target, reps);
            }
            if (bwd && need_dx) {
                gemm_phases(p, "input-gradient GEMM", "input-gradient GEMM partial sums", K, P, co,
                            target, chunks);
                hcnn_pieces_push(p, "input-gradient col2im", C, stream((double)K * P + hw * C),
                                 0.0, chunks);
            }
            continue;
        }
        const double cols = (double)nb * P;
        if (!bwd) {
            hcnn_pieces_push(p, "forward im2col", (long)C * nb, stream(K * cols), 0.0, chunks);
            gemm_phases(p, "forward GEMM", "forward GEMM partial sums", co, nb * P, K, target,
                        chunks);
            hcnn_pieces_push(p, "forward layout", (long)co * nb, stream(2.0 * co * cols), 0.0,
                             chunks);
            continue;
        }
        if (dw) {
            hcnn_pieces_push(p, "weight-gradient dY layout", (long)co * nb,
                             stream(2.0 * co * cols), 0.0, chunks);
            hcnn_pieces_push(p, "weight-gradient im2col", (long)C * nb, stream(K * cols), 0.0,
                             chunks);
            gemm_phases(p, "weight-gradient GEMM", "weight-gradient GEMM partial sums", co, K,
                        nb * P, target, chunks);
        }
        if (need_dx) {
            hcnn_pieces_push(p, "input-gradient dY layout", (long)co * nb,
                             stream(2.0 * co * cols), 0.0, chunks);
            gemm_phases(p, "input-gradient GEMM", "input-gradient GEMM partial sums", C * taps,
                        nb * P, co, target, chunks);
            hcnn_pieces_push(p, "input-gradient col2im", (long)nb * C,
                             stream(K * cols + (double)hw * C * nb), 0.0, chunks);
        }
    }
}

/* conv_bwd's weight gradient (and bias) and input gradient by the im2col
 * plan (conv.c's conv_backward) */
static void im2col_bwd(const hcnn_conv_desc *l, const hcnn_exec *ex, int n, int nt, int bf16,
                       int dw, int need_dx, int has_bias, hcnn_pieces *p)
{
    hcnn_conv_plan pl;
    hcnn_conv_plan_make(l, ex, n, bf16, &pl);
    if (has_bias) /* the bias gradient over output channels */
        hcnn_pieces_push(p, "bias gradient", l->out_c,
                         stream((double)n * l->out_c * hcnn_conv_p(l)), 0.0, 1);
    if (pl.per_thread)
        per_thread_bwd(l, &pl, n, nt, dw, need_dx, p);
    else
        batched(l, &pl, n, 1, dw, need_dx, p);
}

static void conv_pieces(const hcnn_op *op, const hcnn_exec *ex_in, int n, int nt, int bf16,
                        hcnn_pieces *fwd, hcnn_pieces *bwd)
{
    const hcnn_conv_desc *l = op->conv;
    /* the plan the run makes: its workspace sized for it, never a smaller one */
    hcnn_exec ex = *ex_in;
    ex.ws = NULL, ex.ws_floats = (size_t)-1, ex.in_unit = 0;
    hcnn_conv_plan pl;
    hcnn_conv_plan_make(l, &ex, n, bf16, &pl);
    if (pl.wino) {
        wino_phases(l, &ex, pl.wino, n, nt, WINO_FWD, fwd);
        if (pl.wino_dw) {
            if (op->has_bias)
                hcnn_pieces_push(bwd, "bias gradient", l->out_c,
                                 stream((double)n * l->out_c * hcnn_conv_p(l)), 0.0, 1);
            wino_phases(l, &ex, pl.wino, n, nt, WINO_DW, bwd);
        } else {
            im2col_bwd(l, &ex, n, nt, bf16, 1, 0, op->has_bias, bwd);
        }
        if (op->need_dx)
            wino_phases(l, &ex, pl.wino, n, nt, WINO_DX, bwd);
        return;
    }
    if (pl.per_thread)
        per_thread_fwd(l, &pl, n, fwd);
    else
        batched(l, &pl, n, 0, 0, 0, fwd);
    im2col_bwd(l, &ex, n, nt, bf16, 1, op->need_dx, op->has_bias, bwd);
}

/* ---- the other operations ------------------------------------------------------- */

/* bn.c: blocks of channels in one loop, or (blocks fewer than the threads)
 * n x c planes in five loops, the statistics' per-channel totals between
 * them; the blocks are what it cuts for one thread */
static void bn_pieces(int n, int c, int np, int nt, int gathered, hcnn_pieces *fwd,
                      hcnn_pieces *bwd)
{
    const double N = (double)n * c * np;
    const long blocks = hcnn_cpu_bn_pieces(n, c, np, 1), planes = (long)n * c;
    if (gathered) { /* the statistics' bands combined per channel, then y by planes */
        hcnn_pieces_push(fwd, "forward statistics", c, stream((double)n * c * 2), 0.0, 1);
        hcnn_pieces_push(fwd, "forward apply", planes, stream(2 * N), 0.0, 1);
    }
    if (hcnn_cpu_bn_pieces(n, c, np, nt) != planes || blocks >= nt) {
        if (!gathered)
            hcnn_pieces_push(fwd, "forward by channel blocks", blocks, stream(4 * N), 0.0, 1);
        hcnn_pieces_push(bwd, "backward by channel blocks", blocks, stream(5 * N), 0.0, 1);
        return;
    }
    if (!gathered) {
        hcnn_pieces_push(fwd, "forward sums", planes, stream(N), 0.0, 1);
        hcnn_pieces_push(fwd, "forward means", c, stream((double)n * c), 0.0, 1);
        hcnn_pieces_push(fwd, "forward deviations", planes, stream(N), 0.0, 1);
        hcnn_pieces_push(fwd, "forward variances", c, stream((double)n * c), 0.0, 1);
        hcnn_pieces_push(fwd, "forward apply", planes, stream(2 * N), 0.0, 1);
    }
    hcnn_pieces_push(bwd, "backward affine maps", c, stream(4.0 * c), 0.0, 1);
    hcnn_pieces_push(bwd, "backward sums", planes, stream(2 * N), 0.0, 1);
    hcnn_pieces_push(bwd, "backward totals", c, stream(2.0 * n * c), 0.0, 1);
    hcnn_pieces_push(bwd, "backward means", c, stream(4.0 * c), 0.0, 1);
    hcnn_pieces_push(bwd, "backward dx", planes, stream(3 * N), 0.0, 1);
}

void hcnn_cpu_pass_pieces(const hcnn_backend *be, const hcnn_op *op, const hcnn_exec *ex, int n,
                          int nt, hcnn_pieces *fwd, hcnn_pieces *bwd)
{
    const int bf16 = op->kind == HCNN_OP_CONV ? hcnn_conv_bf16(be, op->conv, ex) != NULL
                                              : hcnn_cpu_bf16_of(be) != NULL;
    fwd->nphases = bwd->nphases = 0;
    n = n < 1 ? 1 : n;
    nt = nt < 1 ? 1 : nt;
    const double floats = (double)n * op->c * op->np;
    switch (op->kind) {
    case HCNN_OP_CONV:
        conv_pieces(op, ex, n, nt, bf16, fwd, bwd);
        break;
    case HCNN_OP_FC: /* fc.c: its GEMMs, the bias (bias.c: over the features from 256) */
        gemm_phases(fwd, "forward GEMM", "forward GEMM partial sums", n, op->out, op->in,
                    HCNN_PIECES_MANY, 1);
        if (op->has_bias) {
            const long bias = op->out >= 256 ? op->out : 1;
            hcnn_pieces_push(fwd, "forward bias", bias, stream(2.0 * n * op->out), 0.0, 1);
            hcnn_pieces_push(bwd, "bias gradient", bias, stream((double)n * op->out), 0.0, 1);
        }
        gemm_phases(bwd, "weight-gradient GEMM", "weight-gradient GEMM partial sums", op->out,
                    op->in, n, HCNN_PIECES_MANY, 1);
        if (op->need_dx)
            gemm_phases(bwd, "input-gradient GEMM", "input-gradient GEMM partial sums", n, op->in,
                        op->out, HCNN_PIECES_MANY, 1);
        break;
    case HCNN_OP_BN:
        bn_pieces(n, op->c, op->np, nt, op->gathered, fwd, bwd);
        break;
    case HCNN_OP_POOL: /* pool.c: n x c planes */
        hcnn_pieces_push(fwd, "forward planes", (long)n * op->c,
                         stream(floats + 2.0 * n * op->c * op->out_np), 0.0, 1);
        hcnn_pieces_push(bwd, "backward planes", (long)n * op->c,
                         stream(floats + 2.0 * n * op->c * op->out_np), 0.0, 1);
        break;
    case HCNN_OP_ELEMENTWISE:
        hcnn_pieces_push(fwd, "forward", elementwise_pieces(floats, nt), stream(3 * floats), 0.0,
                         1);
        hcnn_pieces_push(bwd, "backward", elementwise_pieces(floats, nt), stream(3 * floats), 0.0,
                         1);
        break;
    case HCNN_OP_COPY: /* memcpy on the calling thread */
        hcnn_pieces_push(fwd, "forward copy", 1, stream(2 * floats), 0.0, 1);
        hcnn_pieces_push(bwd, "backward copy", 1, stream(2 * floats), 0.0, 1);
        break;
    }
}
