/* How each pass of a convolution runs on the CUDA backend: the forward, the
 * data gradient and the filter gradient each by one of conv.cu's ways
 * (cuda.h: im2col + cuBLAS in chunks, the same one image at a time, or
 * cuDNN's plan), chosen once per convolution shape, precision and layout at
 * the shape's first call (the scratch's sizing, before the first step) and
 * kept for the instance's life.  Every way is deterministic, so a choice
 * fixes a run's bits; ways differ in summation order (the filter gradient
 * over chunks or over images, cuDNN's own), so two runs agree bit for bit
 * only if they chose alike.
 *
 * HCNN_CUDA_CONV:
 * - auto (or unset) on a GPU: measured (below), the baseline being the rule;
 *   on the emulation the rule, whose timings would say nothing of a GPU.
 * - measure: measured on the emulation too (the tests of this file).
 * - direct: auto without cuDNN's Winograd way (below): every pass a
 *   direct sum, as the CPU's conv_algo: batched, for reference-level
 *   agreement.
 * - cudnn: cuDNN for every pass it has a plan for; im2col: im2col in chunks;
 *   im2col_image: im2col image by image; winograd_cudnn: cuDNN's Winograd
 *   where it has it; or one of those for each pass,
 *   "forward,data,filter", the data gradient's also transposed (the
 *   forward of dy by the flipped filters, conv.cu) or transposed_cudnn
 *   (the same by cuDNN's forward; a shape without a plan for it, or one
 *   neither fits, of a stride other than 1 or padding as large as the
 *   kernel, takes im2col instead) (comparisons, and the tests of each way:
 *   the conformance suite under them).
 *
 * The rule, measured on an H200 (2026-11-27), ResNet-18 at batch 128, FP32,
 * each pass by cuDNN 9.19's deterministic direct-sum algorithms against
 * im2col + cuBLAS (ms, forward / backward):
 *   32x32 planes (layer1)   cuDNN 0.30 / 1.22   im2col 0.82 / 1.48
 *   16x16 planes (layer2)   cuDNN 0.30 / 1.07   im2col 0.53 / 0.94
 *    8x8 planes (layer3)    cuDNN 0.39 / 0.86   im2col 0.35 / 0.67
 *    4x4 planes (layer4)    cuDNN 0.39 / 0.80   im2col 0.29 / 0.58
 * so in FP32 the forward by cuDNN (implicit GEMM) on planes of 256 outputs
 * or more, every backward by im2col + cuBLAS (cuDNN's deterministic ALGO_1
 * gradients are the slower ones; its faster ones add with atomics).  Whole
 * step: cuDNN everywhere 4225 images/s, im2col everywhere 4496.  With TF32,
 * cuDNN's implicit GEMMs run on tensor cores: 8277 images/s at batch 128
 * against im2col's 5331 at batch 256, so cuDNN for every pass.  Other GPUs
 * and other shapes need not follow it: hence the measurement.
 *
 * The measurement: for each pass, every candidate way (im2col; im2col by
 * image where a chunk holds more than one image; cuDNN where it has a
 * plan; for the data gradient of stride 1 the transposed ways, by im2col
 * and by cuDNN where it has a plan; cuDNN's Winograd algorithms for the
 * passes that have one, on the shapes the CPU's conv_algo: auto takes
 * Winograd for (3x3, stride 1, >= 32 channels in and out: its transforms
 * round as the CPU's Winograd does, so this is the CPU's own numerical
 * bargain; HCNN_CUDA_CONV=direct leaves it out).  No GPU has measured
 * the transposed and Winograd ways yet: the rule never takes them) on
 * buffers of the call's
 * shape, once to warm up, then MEASURE_ROUNDS rounds in rotated order of
 * MEASURE_REPS calls each, timed by the stream's events; the rule's way
 * stays unless another beats it in every round by MEASURE_MARGIN
 * (include/hcnn/choice.h, the rule blas_kernels: auto follows).  Some
 * milliseconds a shape on a GPU (ResNet-18's 11 shapes: about 2 s,
 * estimated, not yet measured).  The data and the filter gradient are
 * timed apart: in a run whose two gradients both go in chunks they share
 * one walk and one channel-major copy of dy, which the timing counts
 * twice, a small lean towards the image-by-image way (it has no copy).
 *
 * The cache (conv_cache.cu): what was measured is kept per GPU model, and
 * a later run on that model reads it and measures nothing, so it chooses
 * as the first did and gives the same bits.
 *
 * Ranks: the training run compares the ranks' choices once they are made
 * (src/train/run.c, agree_conv_choices) and every rank takes, for each
 * shape, the lowest rank's (hcnn_cuda_adopt_conv_choices): the same ways,
 * so the same summation order, on every rank, whatever each measured. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_choice.h"
#include "cuda.h"

extern "C" {
#include "hcnn/choice.h"
#include "hcnn/env.h"
}

#define MEASURE_ROUNDS 5
#define MEASURE_REPS 2
#define MEASURE_MIN_ROUNDS 2
#define MEASURE_MARGIN 0.03

static const char *const pass_names[HCNN_PASSES] = {"forward", "data gradient",
                                                     "filter gradient"};

int hcnn_cuda_conv_choice_create(hcnn_backend *be)
{
    hcnn_cuda *cu = cuda_of(be);
    const char *env = getenv(HCNN_ENV_CUDA_CONV);
    cu->conv_mode = HCNN_CONV_MODE_FORCED;
    if (!env || !*env || !strcmp(env, "auto") || !strcmp(env, "direct")) {
        cu->conv_mode = HCNN_CONV_MODE_AUTO;
        cu->conv_direct = env && !strcmp(env, "direct");
    } else if (!strcmp(env, "measure")) {
        cu->conv_mode = HCNN_CONV_MODE_MEASURE;
    } else if (!strchr(env, ',')) { /* one way for every pass */
        const int w = hcnn_conv_name_index(hcnn_conv_way_names, HCNN_WAYS, env);
        for (int p = 0; p < HCNN_PASSES; p++)
            cu->conv_forced[p] = w;
    } else { /* forward,data,filter */
        char buf[64];
        snprintf(buf, sizeof buf, "%s", env);
        char *save = NULL, *tok = strtok_r(buf, ",", &save);
        for (int p = 0; p < HCNN_PASSES; p++, tok = strtok_r(NULL, ",", &save))
            cu->conv_forced[p] =
                tok ? hcnn_conv_name_index(hcnn_conv_way_names, HCNN_WAYS, tok) : -1;
        if (tok)
            cu->conv_forced[0] = -1; /* a fourth */
    }
    for (int p = 0; cu->conv_mode == HCNN_CONV_MODE_FORCED && p < HCNN_PASSES; p++)
        if (cu->conv_forced[p] < 0 ||
            ((cu->conv_forced[p] == HCNN_WAY_TRANSPOSED ||
              cu->conv_forced[p] == HCNN_WAY_TRANSPOSED_CUDNN) &&
             p != HCNN_PASS_DATA))
            return hcnn_error_code(HCNN_EINVAL,
                                   "HCNN_CUDA_CONV='%s': expected auto, direct, measure, cudnn, "
                                   "im2col, im2col_image, winograd_cudnn, or one of the last "
                                   "four for each pass: forward,data,filter, the data "
                                   "gradient's also transposed or transposed_cudnn (e.g. "
                                   "cudnn,im2col,im2col_image or im2col,transposed,im2col)",
                                   env);
    cu->choices = (struct hcnn_conv_choices *)hcnn_calloc(sizeof *cu->choices,
                                                          "convolution choices");
    return cu->choices ? HCNN_OK : HCNN_ENOMEM;
}

void hcnn_cuda_conv_choice_destroy(hcnn_cuda *cu)
{
    if (!cu->choices)
        return;
    hcnn_free(cu->choices->cached);
    hcnn_free(cu->choices);
    cu->choices = NULL;
}

static int measures(const hcnn_cuda *cu)
{
#if defined(HCNN_CUDA_EMULATION)
    return cu->conv_mode == HCNN_CONV_MODE_MEASURE;
#else
    return cu->conv_mode == HCNN_CONV_MODE_MEASURE || cu->conv_mode == HCNN_CONV_MODE_AUTO;
#endif
}

/* "convolutions by ...": HCNN_CUDA_CONV's ways (cuDNN, where they name it,
 * started or ended the job), each shape's measured fastest, or the rule */
void hcnn_cuda_conv_mode_text(const hcnn_cuda *cu, char *buf, size_t cap)
{
    if (cu->conv_mode == HCNN_CONV_MODE_FORCED)
        snprintf(buf, cap, "convolutions by HCNN_CUDA_CONV=%s,%s,%s",
                 hcnn_conv_way_names[cu->conv_forced[0]], hcnn_conv_way_names[cu->conv_forced[1]],
                 hcnn_conv_way_names[cu->conv_forced[2]]);
    else if (measures(cu))
        snprintf(buf, cap, "convolutions by each shape's fastest way, measured (im2col + GEMM%s)",
                 !cu->dnn ? ", no cuDNN" : cu->conv_direct ? ", cuDNN without Winograd" : ", cuDNN");
    else
        snprintf(buf, cap, "convolutions by rule (im2col + GEMM%s)", cu->dnn ? ", cuDNN" : ", no cuDNN");
}

static int same_shape(const conv_choice *c, const hcnn_conv_desc *d, int precision, int layout)
{
    return c->out_c == d->out_c && c->precision == precision && c->layout == layout &&
           !memcmp(&c->g, &d->g, sizeof c->g);
}

/* ---- the rule ------------------------------------------------------------------- */

/* whether the instance can run way for the pass of d over n images:
 * cuDNN's where it has a plan for the pass (plan: d's), its Winograd where
 * that plan has the pass, the transposed ones for the data gradient of
 * stride 1, by cuDNN where it has a plan for the transposed shape's
 * forward */
static int runs_way(const hcnn_backend *be, const hcnn_conv_desc *d, int n, int pass, int way,
                    const hcnn_cudnn_conv *plan)
{
    if (way == HCNN_WAY_CUDNN)
        return hcnn_cudnn_conv_has(plan, pass);
    if (way == HCNN_WAY_WINOGRAD_CUDNN)
        return hcnn_cudnn_conv_has(
            hcnn_cudnn_conv_winograd_for(be, d, n, HCNN_CUDNN_ANY_WORKSPACE), pass);
    if (way == HCNN_WAY_TRANSPOSED)
        return pass == HCNN_PASS_DATA && hcnn_cuda_conv_transposable(d);
    if (way == HCNN_WAY_TRANSPOSED_CUDNN)
        return pass == HCNN_PASS_DATA &&
               hcnn_cuda_conv_transposed_plan(be, d, n, HCNN_CUDNN_ANY_WORKSPACE) != NULL;
    return 1;
}

/* the way HCNN_CUDA_CONV names for the pass (cuDNN's where it has a plan
 * for the pass), else the rule's.  bf16: im2col, what the H200 ran before
 * cuDNN's graphs (conv_graph.cu, unmeasured) could take it; a measurement
 * chooses them where they beat it. */
static int rule_way(const hcnn_backend *be, const hcnn_conv_desc *d, int n, int pass,
                    const hcnn_cudnn_conv *plan)
{
    const hcnn_cuda *cu = cuda_of(be);
    const int has_plan = hcnn_cudnn_conv_has(plan, pass);
    if (cu->conv_mode == HCNN_CONV_MODE_FORCED)
        return runs_way(be, d, n, pass, cu->conv_forced[pass], plan) ? cu->conv_forced[pass]
                                                                      : HCNN_WAY_IM2COL;
    if (!has_plan || cu->precision == HCNN_PRECISION_BF16)
        return HCNN_WAY_IM2COL;
    if (cu->precision == HCNN_PRECISION_TF32)
        return HCNN_WAY_CUDNN;
    return pass == HCNN_PASS_FORWARD && d->g.oh * d->g.ow >= 256 ? HCNN_WAY_CUDNN
                                                                  : HCNN_WAY_IM2COL;
}

/* ---- the measurement ------------------------------------------------------------ */

typedef struct measure_bufs {
    float *x, *w, *y, *dx, *dw, *ws;
    hcnn_exec ex;
} measure_bufs;

static void bufs_free(measure_bufs *b)
{
    float *all[] = {b->x, b->w, b->y, b->dx, b->dw, b->ws};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (all[i])
            cudaFree(all[i]);
}

/* the im2col path's columns for n images, or cuDNN's workspace where it
 * has a plan and needs more (its Winograd plan's where that way may be
 * taken: measured, or named by HCNN_CUDA_CONV), whichever way a pass takes
 * (a lower rank's choice may replace this rank's after the sizing), and
 * the im2col size always (a call over fewer images may take the im2col
 * path, see hcnn_cudnn_conv_for) */
static size_t workspace_floats(const hcnn_backend *be, const hcnn_conv_desc *d, int n)
{
    const hcnn_cuda *cu = cuda_of(be);
    size_t ws = hcnn_cuda_conv_im2col_workspace(be, d, n);
    const int winograd = cu->conv_mode != HCNN_CONV_MODE_FORCED ||
                         hcnn_cuda_conv_forces(cu, HCNN_WAY_WINOGRAD_CUDNN);
    const hcnn_cudnn_conv *plans[] = {
        hcnn_cudnn_conv_for(be, d, n, HCNN_CUDNN_ANY_WORKSPACE),
        winograd ? hcnn_cudnn_conv_winograd_for(be, d, n, HCNN_CUDNN_ANY_WORKSPACE) : NULL};
    for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++)
        if (plans[i] && hcnn_cudnn_conv_workspace(plans[i]) > ws)
            ws = hcnn_cudnn_conv_workspace(plans[i]);
    return ws;
}

/* the buffers of a call over n images, or 0 (no memory: the rule decides;
 * no message, the run goes on) */
static int bufs_alloc(const hcnn_backend *be, const hcnn_conv_desc *d, int n, measure_bufs *b)
{
    memset(b, 0, sizeof *b);
    const hcnn_conv_geom *g = &d->g;
    const size_t in = (size_t)n * g->c * g->h * g->w, out = (size_t)n * d->out_c * g->oh * g->ow;
    const size_t wn = (size_t)d->out_c * g->c * g->kh * g->kw;
    const size_t ws = workspace_floats(be, d, n);
    const size_t sizes[] = {in, wn, out, in, wn, ws};
    float **ptrs[] = {&b->x, &b->w, &b->y, &b->dx, &b->dw, &b->ws};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (cudaMalloc((void **)ptrs[i], sizeof(float) * (sizes[i] ? sizes[i] : 1)) != cudaSuccess) {
            (void)cudaGetLastError();
            *ptrs[i] = NULL;
            bufs_free(b);
            return 0;
        }
    /* values of a trained layer's order of size; the timings do not depend on them */
    hcnn_cuda_fill(be, b->x, in, 0.5f);
    hcnn_cuda_fill(be, b->w, wn, 0.01f);
    hcnn_cuda_fill(be, b->y, out, 0.25f);
    hcnn_cuda_fill(be, b->dw, wn, 0.0f);
    b->ex.ws = b->ws;
    b->ex.ws_floats = ws;
    return 1;
}

static void run_way(const hcnn_backend *be, const hcnn_conv_desc *d, const measure_bufs *b, int n,
                    int pass, hcnn_conv_way way)
{
    if (pass == HCNN_PASS_FORWARD)
        hcnn_cuda_conv_fwd_by(be, d, &b->ex, b->x, b->w, NULL, b->y, n, way);
    else if (pass == HCNN_PASS_DATA)
        hcnn_cuda_conv_bwd_by(be, d, &b->ex, NULL, b->w, b->y, NULL, b->dx, 0, n, HCNN_WAY_IM2COL,
                              way);
    else
        hcnn_cuda_conv_bwd_by(be, d, &b->ex, b->x, NULL, b->y, b->dw, NULL, 0, n, way,
                              HCNN_WAY_IM2COL);
}

/* c's ways by measurement (c->way holds the rule's: the baseline); 0: no
 * memory for it (c untouched) */
static int measure(const hcnn_backend *be, const hcnn_conv_desc *d, int n, conv_choice *c)
{
    measure_bufs b;
    if (!bufs_alloc(be, d, n, &b))
        return 0;
    const hcnn_cudnn_conv *plan = hcnn_cudnn_conv_for(be, d, n, HCNN_CUDNN_ANY_WORKSPACE);
    const int chunked = hcnn_cuda_conv_chunk_images(be, d, n) > 1;
    for (int pass = 0; pass < HCNN_PASSES; pass++) {
        int cand[HCNN_WAYS], nc = 0;
        cand[nc++] = HCNN_WAY_IM2COL;
        if (chunked) /* else the same work as HCNN_WAY_IM2COL */
            cand[nc++] = HCNN_WAY_IM2COL_IMAGE;
        if (hcnn_cudnn_conv_has(plan, pass))
            cand[nc++] = HCNN_WAY_CUDNN;
        for (int w = HCNN_WAY_TRANSPOSED; w <= HCNN_WAY_WINOGRAD_CUDNN; w++)
            if (runs_way(be, d, n, pass, w, plan))
                cand[nc++] = w;
        double times[HCNN_WAYS][MEASURE_ROUNDS], median[HCNN_WAYS] = {0};
        int rounds[HCNN_WAYS] = {0};
        for (int k = 0; k < nc; k++) /* warm-up: plans, cuBLAS's heuristics, caches */
            run_way(be, d, &b, n, pass, (hcnn_conv_way)cand[k]);
        /* a cuDNN way whose first run cuDNN refused (conv_cudnn_call.cu, refused:
         * the pass dropped from its plan, said once) ran by im2col: not a
         * candidate */
        int kept = 0;
        for (int k = 0; k < nc; k++)
            if (runs_way(be, d, n, pass, cand[k], plan))
                cand[kept++] = cand[k];
        nc = kept;
        for (int r = 0; r < MEASURE_ROUNDS; r++)
            for (int k = 0; k < nc; k++) {
                const int w = cand[(k + r) % nc];
                hcnn_timer t;
                be->timer_start(be, &t);
                for (int rep = 0; rep < MEASURE_REPS; rep++)
                    run_way(be, d, &b, n, pass, (hcnn_conv_way)w);
                times[w][r] = be->timer_stop(be, &t) * 1e3 / MEASURE_REPS;
                rounds[w]++;
            }
        for (int k = 0; k < nc; k++) {
            double v[MEASURE_ROUNDS];
            memcpy(v, times[cand[k]], sizeof v);
            /* a timer's resolution can give 0: still a candidate */
            median[cand[k]] = hcnn_median(v, rounds[cand[k]]);
            if (median[cand[k]] <= 0)
                median[cand[k]] = 1e-9;
            c->ms[pass][cand[k]] = median[cand[k]];
        }
        const int pick = hcnn_choice_pick(HCNN_WAYS, median, &times[0][0], MEASURE_ROUNDS, rounds,
                                          c->way[pass], MEASURE_MIN_ROUNDS, MEASURE_MARGIN);
        if (pick >= 0)
            c->way[pass] = pick;
    }
    HCNN_CUDA(cudaStreamSynchronize(cuda_of(be)->stream));
    bufs_free(&b);
    return 1;
}

/* ---- the choice of a shape ------------------------------------------------------ */

static conv_choice *find(struct hcnn_conv_choices *s, const hcnn_conv_desc *d, int precision,
                         int layout)
{
    for (int i = 0; i < s->n; i++)
        if (same_shape(&s->shapes[i], d, precision, layout))
            return &s->shapes[i];
    return NULL;
}

/* a cached line of this shape and n whose ways this instance can run */
static const conv_choice *cached(const hcnn_backend *be, struct hcnn_conv_choices *s,
                                 const hcnn_conv_desc *d, int n, int precision, int layout,
                                 const hcnn_cudnn_conv *plan)
{
    for (int i = 0; i < s->ncached; i++) {
        const conv_choice *c = &s->cached[i];
        if (c->n != n || !same_shape(c, d, precision, layout))
            continue;
        for (int p = 0; p < HCNN_PASSES; p++) {
            if (!runs_way(be, d, n, p, c->way[p], plan))
                return NULL; /* a build or a precision without that plan: measured again */
            /* measured without the Winograd way (HCNN_CUDA_CONV=direct, or
             * before it was one) or without cuDNN's direct sums (before
             * 2026-12-02 a plan lacking one pass was dropped whole) where
             * this instance has them: again */
            if (c->ms[p][HCNN_WAY_WINOGRAD_CUDNN] <= 0 &&
                runs_way(be, d, n, p, HCNN_WAY_WINOGRAD_CUDNN, plan))
                return NULL;
            if (c->ms[p][HCNN_WAY_CUDNN] <= 0 && runs_way(be, d, n, p, HCNN_WAY_CUDNN, plan))
                return NULL;
        }
        return c;
    }
    return NULL;
}

const int *hcnn_cuda_conv_ways(const hcnn_backend *be, const hcnn_conv_desc *d, int n)
{
    hcnn_cuda *cu = cuda_of(be);
    struct hcnn_conv_choices *s = cu->choices;
    const int precision = (int)cu->precision, layout = (int)be->layout;
    conv_choice *c = find(s, d, precision, layout);
    if (c) /* chosen at the shape's first call, for every call after it */
        return c->way;
    if (s->n == CHOICE_SHAPES) {
        /* the shapes chosen keep their ways; a new one runs by im2col (it
         * ended the job before: a run is never lost for a table's size) */
        static const int im2col[HCNN_PASSES] = {HCNN_WAY_IM2COL, HCNN_WAY_IM2COL,
                                                HCNN_WAY_IM2COL};
        if (!s->full_said)
            hcnn_warn("CUDA convolutions: more shapes than the backend keeps ways for (%d): "
                      "the shapes beyond them run by im2col + GEMM",
                      CHOICE_SHAPES);
        s->full_said = 1;
        return im2col;
    }
    c = &s->shapes[s->n++];
    memset(c, 0, sizeof *c);
    c->g = d->g, c->out_c = d->out_c, c->n = n > 0 ? n : 1;
    c->precision = precision, c->layout = layout;
    const hcnn_cudnn_conv *plan = hcnn_cudnn_conv_for(be, d, c->n, HCNN_CUDNN_ANY_WORKSPACE);
    for (int p = 0; p < HCNN_PASSES; p++)
        c->way[p] = rule_way(be, d, c->n, p, plan);
    c->from = cu->conv_mode == HCNN_CONV_MODE_AUTO || cu->conv_mode == HCNN_CONV_MODE_MEASURE
                  ? FROM_RULE
                  : FROM_MODE;
    /* no measurement inside a graph capture (nothing may run there): the rule */
    if (!measures(cu) || cu->capturing)
        return c->way;
    if (!s->cache_opened)
        hcnn_conv_cache_open(be, s);
    const int lock = hcnn_conv_cache_lock(s);
    hcnn_conv_cache_load(s); /* under the lock: what another rank of the node just measured */
    const conv_choice *hit = cached(be, s, d, c->n, precision, layout, plan);
    if (hit) {
        memcpy(c->way, hit->way, sizeof c->way);
        memcpy(c->ms, hit->ms, sizeof c->ms);
        c->from = FROM_CACHE;
    } else if (measure(be, d, c->n, c)) {
        c->from = FROM_MEASURED;
        hcnn_conv_cache_write(s, c);
    }
    hcnn_conv_cache_unlock(lock);
    return c->way;
}

/* the describe line's first word (the run header counts layers by it, up
 * to 31 characters): the names from before the ways were measured where
 * they fit, else "ways_" and the three ways' short names */
static void ways_name(const int *ways, char *buf, size_t cap)
{
    static const char *const short_names[HCNN_WAYS] = {"col", "img", "dnn", "trn", "tdn", "wgd"};
    const int f = ways[HCNN_PASS_FORWARD], dd = ways[HCNN_PASS_DATA], w = ways[HCNN_PASS_FILTER];
    if (f == dd && dd == w)
        snprintf(buf, cap, "%s", f == HCNN_WAY_IM2COL ? "im2col_cublas" : hcnn_conv_way_names[f]);
    else if (f == HCNN_WAY_CUDNN && dd == HCNN_WAY_IM2COL && w == HCNN_WAY_IM2COL)
        snprintf(buf, cap, "cudnn_forward");
    else
        snprintf(buf, cap, "ways_%s/%s/%s", short_names[f], short_names[dd], short_names[w]);
}

#define APPEND(...) \
    (len += (size_t)snprintf(buf + (len < cap ? len : cap), len < cap ? cap - len : 0, __VA_ARGS__))

/* "name: how the passes run (where the ways come from: the medians
 * measured)" */
void hcnn_cuda_conv_describe(const hcnn_backend *be, const hcnn_conv_desc *d,
                             const hcnn_exec *ex, int n, char *buf, size_t cap)
{
    (void)ex;
    const hcnn_cuda *cu = cuda_of(be);
    const int *ways = hcnn_cuda_conv_ways(be, d, n);
    const conv_choice *c = find(cu->choices, d, (int)cu->precision, (int)be->layout);
    char name[64];
    ways_name(ways, name, sizeof name);
    size_t len = 0;
    APPEND("%s:", name);
    const int same = ways[0] == ways[1] && ways[1] == ways[2] && ways[0] != HCNN_WAY_CUDNN &&
                     ways[0] != HCNN_WAY_WINOGRAD_CUDNN;
    for (int p = 0; p < (same ? 1 : HCNN_PASSES); p++) {
        char how[600] = "";
        const hcnn_cudnn_conv *plan =
            ways[p] == HCNN_WAY_CUDNN ? hcnn_cudnn_conv_for(be, d, n, HCNN_CUDNN_ANY_WORKSPACE)
            : ways[p] == HCNN_WAY_WINOGRAD_CUDNN
                ? hcnn_cudnn_conv_winograd_for(be, d, n, HCNN_CUDNN_ANY_WORKSPACE)
                : NULL;
        if (hcnn_cudnn_conv_has(plan, p))
            hcnn_cudnn_conv_describe(plan, p, how, sizeof how);
        else
            hcnn_cuda_conv_way_describe(be, d, n, (hcnn_conv_way)ways[p], how, sizeof how);
        if (same)
            APPEND(" %s, col2im gathered", how);
        else
            APPEND("%s %s by %s", p ? "," : "", pass_names[p], how);
        if (hcnn_cudnn_conv_refusal(plan, p)[0]) /* its way's cuDNN refused it when run */
            APPEND(" (not by cuDNN: %s)", hcnn_cudnn_conv_refusal(plan, p));
    }
    /* auto: a pass the shape's cuDNN plan (direct sums) does not run, its
     * other passes it does, why: that way was no candidate for it (its
     * Winograd or transposed ways may have been) */
    const hcnn_cudnn_conv *direct = cu->conv_mode != HCNN_CONV_MODE_FORCED
                                        ? hcnn_cudnn_conv_for(be, d, n, HCNN_CUDNN_ANY_WORKSPACE)
                                        : NULL;
    for (int p = 0; direct && p < HCNN_PASSES; p++)
        if (!hcnn_cudnn_conv_has(direct, p) && !hcnn_cudnn_conv_refusal(direct, p)[0] &&
            ways[p] != HCNN_WAY_WINOGRAD_CUDNN && ways[p] != HCNN_WAY_TRANSPOSED_CUDNN) {
            char why[600];
            hcnn_cudnn_conv_describe(direct, p, why, sizeof why);
            APPEND("; the %s has no cuDNN direct-sum plan: %s", pass_names[p], why);
        }
    /* a pass HCNN_CUDA_CONV asked cuDNN, its Winograd or the transposed
     * way for that does not take it: why (the layer's reasons once) */
    int winograd_said = 0;
    for (int p = 0; c && cu->conv_mode == HCNN_CONV_MODE_FORCED && p < HCNN_PASSES; p++)
        if (ways[p] == cu->conv_forced[p]) {
            continue;
        } else if (cu->conv_forced[p] == HCNN_WAY_WINOGRAD_CUDNN) {
            const int shape = hcnn_cudnn_winograd_shape(d),
                      bf16 = cu->precision == HCNN_PRECISION_BF16;
            if (!shape && !winograd_said)
                APPEND("; not by cuDNN's Winograd: a %dx%d kernel, stride %dx%d, padding %dx%d, "
                       "%d channels in and %d out (offered for 3x3, stride 1, padding up to 2, "
                       ">= 32 channels in and out, as the CPU's Winograd)",
                       d->g.kh, d->g.kw, d->g.sh, d->g.sw, d->g.ph, d->g.pw, d->g.c, d->out_c);
            else if (bf16 && !winograd_said)
                APPEND("; not by cuDNN's Winograd: bf16 (its graphs are direct sums)");
            else if (shape && !bf16) {
                /* the Winograd plan's reason for the pass where it runs others */
                const hcnn_cudnn_conv *wp =
                    hcnn_cudnn_conv_winograd_for(be, d, n, HCNN_CUDNN_ANY_WORKSPACE);
                char why[600];
                if (wp)
                    hcnn_cudnn_conv_describe(wp, p, why, sizeof why);
                else
                    snprintf(why, sizeof why,
                             "cuDNN's heuristics offer no deterministic Winograd algorithm for "
                             "any pass within 512 MiB%s",
                             be->layout == HCNN_LAYOUT_NHWC ? " for NHWC activations" : "");
                APPEND("; the %s not by cuDNN's Winograd: %s", pass_names[p], why);
            }
            winograd_said = 1;
        } else if (cu->conv_forced[p] >= HCNN_WAY_TRANSPOSED) {
            if (!hcnn_cuda_conv_transposable(d))
                APPEND("; the %s not transposed: stride %dx%d, padding %dx%d (it needs stride 1 "
                       "and padding below the kernel's %dx%d)",
                       pass_names[p], d->g.sh, d->g.sw, d->g.ph, d->g.pw, d->g.kh, d->g.kw);
            else
                APPEND("; the %s not transposed by cuDNN: %s", pass_names[p],
                       cu->precision == HCNN_PRECISION_BF16
                           ? "bf16 (its graphs have no dx += for it)"
                           : "no cuDNN algorithm for the transposed shape's forward");
        } else if (cu->conv_forced[p] == HCNN_WAY_CUDNN) {
            const hcnn_cudnn_conv *plan = hcnn_cudnn_conv_for(be, d, n, HCNN_CUDNN_ANY_WORKSPACE);
            char why[600] = "no cuDNN plan for this shape";
            if (plan)
                hcnn_cudnn_conv_describe(plan, p, why, sizeof why);
            APPEND("; the %s not by cuDNN: %s", pass_names[p], why);
        }
    static const char *const from[] = {"HCNN_CUDA_CONV", "the rule", "measured", "cached",
                                       "a lower rank's"};
    APPEND(" (ways: %s", c ? from[c->from]
                           : "im2col: more convolution shapes than the backend keeps ways for");
    if (c && (c->from == FROM_MEASURED || c->from == FROM_CACHE || c->from == FROM_RANK))
        for (int p = 0; p < HCNN_PASSES; p++)
            for (int w = 0, first = 1; w < HCNN_WAYS; w++)
                if (c->ms[p][w] > 0) {
                    APPEND("%s%s%s%s %.3g ms", first ? (p ? "; " : ": ") : ", ",
                           first ? pass_names[p] : "", first ? " " : "", hcnn_conv_way_names[w],
                           c->ms[p][w]);
                    first = 0;
                }
    APPEND(")");
}
#undef APPEND

/* ---- the table's convolution: the shape's ways --------------------------------- */

int hcnn_cuda_conv_fwd(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                       const float *x, const float *w, const float *b, float *y, int n)
{
    const int *ways = hcnn_cuda_conv_ways(be, d, n);
    hcnn_cuda_conv_fwd_by(be, d, ex, x, w, b, y, n, (hcnn_conv_way)ways[HCNN_PASS_FORWARD]);
    return HCNN_OK;
}

/* db += first (db not NULL), then the gradients by the shape's ways */
static int conv_backward(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                         const float *x, const float *w, const float *dy, float *dw, float *db,
                         float *dx, int dx_acc, int n)
{
    const int np = d->g.oh * d->g.ow, co = d->out_c;
    if (db && be->layout == HCNN_LAYOUT_NHWC)
        hcnn_cuda_nhwc_channel_sum_acc(be, dy, n * np, co, db);
    else if (db)
        hcnn_cuda_channel_sum_acc(be, dy, n, co, np, db);
    const int *ways = hcnn_cuda_conv_ways(be, d, n);
    hcnn_cuda_conv_bwd_by(be, d, ex, x, w, dy, dw, dx, dx_acc, n,
                          (hcnn_conv_way)ways[HCNN_PASS_FILTER],
                          (hcnn_conv_way)ways[HCNN_PASS_DATA]);
    return HCNN_OK;
}

int hcnn_cuda_conv_bwd(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                       const float *x, const float *w, const float *dy, float *dw, float *db,
                       float *dx, int dx_acc, int n)
{
    return conv_backward(be, d, ex, x, w, dy, dw, db, dx, dx_acc, n);
}

int hcnn_cuda_conv_bwd_filter(const hcnn_backend *be, const hcnn_conv_desc *d,
                              const hcnn_exec *ex, const float *x, const float *dy, float *dw,
                              float *db, int n)
{
    return conv_backward(be, d, ex, x, NULL, dy, dw, db, NULL, 0, n);
}

int hcnn_cuda_conv_bwd_data(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                            const float *w, const float *dy, float *dx, int dx_acc, int n)
{
    return conv_backward(be, d, ex, NULL, w, dy, NULL, NULL, dx, dx_acc, n);
}

void hcnn_cuda_conv_gemms(const hcnn_backend *be, const hcnn_conv_desc *d, const hcnn_exec *ex,
                          int n, int unit, int need_dx, hcnn_gemm_list *gl)
{
    (void)ex, (void)unit; /* no units on a device */
    const int *ways = hcnn_cuda_conv_ways(be, d, n);
    hcnn_cuda_conv_gemms_by(be, d, n, need_dx, (hcnn_conv_way)ways[HCNN_PASS_DATA], gl);
}

size_t hcnn_cuda_conv_workspace(const hcnn_backend *be, const hcnn_conv_desc *d,
                                const hcnn_exec *ex, int n)
{
    (void)ex;
    (void)hcnn_cuda_conv_ways(be, d, n); /* chosen now, before the first step */
    return workspace_floats(be, d, n);
}

/* ---- the ranks' agreement ------------------------------------------------------- */

size_t hcnn_cuda_conv_choices(const hcnn_backend *be, char *buf, size_t cap)
{
    const struct hcnn_conv_choices *s = cuda_of(be)->choices;
    size_t len = 0;
    char line[1024];
    if (buf && cap)
        buf[0] = '\0';
    for (int i = 0; i < s->n; i++) {
        const size_t k = (size_t)hcnn_conv_choice_line(&s->shapes[i], line, sizeof line);
        if (buf && len + k < cap)
            memcpy(buf + len, line, k + 1);
        len += k;
    }
    if (buf && cap && len >= cap)
        buf[0] = '\0';
    return len;
}

int hcnn_cuda_adopt_conv_choices(const hcnn_backend *be, const char *text, int *changed,
                                 int *refused)
{
    struct hcnn_conv_choices *s = cuda_of(be)->choices;
    *changed = *refused = 0;
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        char one[1024];
        const size_t k = end ? (size_t)(end - line) : strlen(line);
        snprintf(one, sizeof one, "%.*s", (int)(k < sizeof one ? k : sizeof one - 1), line);
        line = end ? end + 1 : NULL;
        conv_choice theirs;
        if (!hcnn_conv_choice_parse(one, &theirs))
            return hcnn_error_code(HCNN_EINVAL, "CUDA convolutions: another rank's choice "
                                                "'%.200s' is not a line this build reads", one);
        hcnn_conv_desc d;
        memset(&d, 0, sizeof d);
        d.g = theirs.g, d.out_c = theirs.out_c;
        conv_choice *mine = find(s, &d, theirs.precision, theirs.layout);
        if (!mine || mine->agreed)
            continue; /* not a shape of this rank's, or a lower rank's taken already */
        /* first called over another number of images (a batch the ranks
         * share unevenly): its ways all the same, checked for this rank's
         * own number, so that every rank sums the shape alike; its medians
         * (of another call) not taken */
        const int same_n = mine->n == theirs.n;
        if (!memcmp(mine->way, theirs.way, sizeof mine->way)) {
            mine->agreed = 1, mine->refused = 0;
            continue;
        }
        int runs = 1;
        const hcnn_cudnn_conv *plan =
            hcnn_cudnn_conv_for(be, &d, mine->n, HCNN_CUDNN_ANY_WORKSPACE);
        for (int p = 0; p < HCNN_PASSES; p++)
            runs &= runs_way(be, &d, mine->n, p, theirs.way[p], plan);
        if (!runs) { /* another GPU model or library: the next lower rank's, else its own */
            mine->refused = 1;
            continue;
        }
        mine->agreed = 1, mine->refused = 0;
        memcpy(mine->way, theirs.way, sizeof mine->way);
        if (same_n)
            memcpy(mine->ms, theirs.ms, sizeof mine->ms);
        mine->from = FROM_RANK;
        ++*changed;
    }
    for (int i = 0; i < s->n; i++)
        *refused += s->shapes[i].refused && !s->shapes[i].agreed;
    return HCNN_OK;
}
