/* The conformance suite's checks of memory, copies, the fully connected
 * helpers, the element-wise operations, dropout, pooling and the layout
 * changes (backend_check.h; batch normalisation, the loss, the optimiser,
 * the statistics, threads, units and timers are in backend_checks_train.c). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend_check.h"

/* ---- memory, copies, fill ---------------------------------------------------------- */

/* alloc, upload, download at offsets and odd sizes; two buffers do not overlap;
 * alloc_host memory is the host's; the async copies keep their order with the
 * operations between them, and sync waits for them. */
int check_memory(const hcnn_backend *be, char *why, size_t cap)
{
    ref_rng r = {101};
    const size_t sizes[] = {1, 3, 4, 13, 4096, (1u << 20) + 5};
    unsigned char *prev = NULL, *prev_h = NULL;
    size_t prev_n = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        unsigned char *h = host_bytes(n), *back = host_bytes(n);
        for (size_t i = 0; i < n; i++)
            h[i] = (unsigned char)ref_next(&r);
        unsigned char *d = dev_bytes(be, n);
        be->upload(be, d, h, n);
        memset(back, 0, n);
        be->download(be, back, d, n);
        if (memcmp(back, h, n))
            FAIL("upload then download of %zu bytes gave other bytes", n);
        if (prev) { /* the previous buffer still holds its bytes */
            unsigned char *b2 = host_bytes(prev_n);
            be->download(be, b2, prev, prev_n);
            if (memcmp(b2, prev_h, prev_n))
                FAIL("a buffer of %zu bytes changed when one of %zu was written", prev_n, n);
        }
        prev = d, prev_h = h, prev_n = n;
    }
    note("round trips", 0, 0, 0);
    /* at byte offsets: 13 bytes into a 64-byte buffer at offset 7; 5 bytes read at 30 */
    unsigned char a[64], b[13], back[64], part[5];
    for (int i = 0; i < 64; i++)
        a[i] = (unsigned char)(i * 3 + 1);
    for (int i = 0; i < 13; i++)
        b[i] = (unsigned char)(200 + i);
    unsigned char *d = dev_bytes(be, 64);
    be->upload(be, d, a, 64);
    be->upload(be, d + 7, b, 13);
    be->download(be, back, d, 64);
    for (int i = 0; i < 64; i++)
        if (back[i] != (i >= 7 && i < 20 ? b[i - 7] : a[i]))
            FAIL("upload of 13 bytes at offset 7: byte %d is %d", i, back[i]);
    be->download(be, part, d + 30, 5);
    if (memcmp(part, a + 30, 5))
        FAIL("download of 5 bytes at offset 30 gave other bytes");
    /* alloc_host: host memory; async copies in order with an operation, then sync */
    const size_t n = 100003;
    float *src = pinned_bytes(be, n * sizeof(float)), *dst = pinned_bytes(be, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        src[i] = ref_uniform(&r, -1, 1), dst[i] = NAN;
    float *dv = dvec(be, n);
    be->upload_async(be, dv, src, n * sizeof(float));
    be->scale(be, dv, n, 2.0f);
    be->download_async(be, dst, dv, n * sizeof(float));
    be->sync(be);
    for (size_t i = 0; i < n; i++)
        if (dst[i] != 2.0f * src[i])
            FAIL("upload_async, scale by 2, download_async, sync: element %zu is %g, expected %g",
                 i, (double)dst[i], 2.0 * src[i]);
    /* async at an offset */
    be->upload_async(be, dv + 5, src + 1000, 17 * sizeof(float));
    be->download_async(be, dst, dv + 3, 20 * sizeof(float));
    be->sync(be);
    for (int i = 0; i < 20; i++) {
        const float want = i >= 2 && i < 19 ? src[1000 + i - 2] : 2.0f * src[3 + i];
        if (dst[i] != want)
            FAIL("async copies at offsets: element %d is %g, expected %g", i, (double)dst[i],
                 (double)want);
    }
    TRY(guard_ok(be, "upload_async", dv, n, why, cap));
    note("async copies", 0, 0, n);
    return 1;
}

static const size_t elem_sizes[] = {1, 3, 17, 1000, 100003};
#define NELEM_SIZES (sizeof elem_sizes / sizeof *elem_sizes)

/* x[0..n) = v (NaN before); v on a sub-range [off, off + len) leaves the rest */
int check_fill(const hcnn_backend *be, char *why, size_t cap)
{
    const float values[] = {0.0f, -2.5f, 3e-30f, 1.0f};
    char what[96];
    for (size_t s = 0; s < NELEM_SIZES; s++)
        for (size_t k = 0; k < sizeof values / sizeof *values; k++) {
            const int mark = arena_mark();
            const size_t n = elem_sizes[s];
            float *d = dnan(be, n);
            be->fill(be, d, n, values[k]);
            snprintf(what, sizeof what, "fill n %zu v %g", n, (double)values[k]);
            double *want = hd(hfill(n, values[k]), n);
            TRY(check_dev(be, what, d, want, n, TOL_EXACT, why, cap));
            if (n >= 17) { /* the middle, neighbours kept */
                ref_rng r = {7 + n};
                float *h = hrand(&r, n, -1, 1);
                put(be, d, h, n);
                const size_t off = 5, len = n - 9;
                be->fill(be, d + off, len, values[k]);
                for (size_t i = off; i < off + len; i++)
                    h[i] = values[k];
                snprintf(what, sizeof what, "fill [%zu, %zu) of %zu v %g", off, off + len, n,
                         (double)values[k]);
                TRY(check_dev(be, what, d, hd(h, n), n, TOL_EXACT, why, cap));
            }
            arena_pop(mark);
        }
    return 1;
}

/* bytes [0, bytes) zero, at offsets and odd byte counts, the rest kept */
int check_zero(const hcnn_backend *be, char *why, size_t cap)
{
    char what[96];
    for (size_t s = 0; s < NELEM_SIZES; s++) {
        const int mark = arena_mark();
        const size_t n = elem_sizes[s];
        float *d = dnan(be, n);
        be->zero(be, d, n * sizeof(float));
        uint32_t *bits = host_bytes(n * 4);
        be->download(be, bits, d, n * 4);
        for (size_t i = 0; i < n; i++)
            if (bits[i] != 0)
                FAIL("zero of %zu floats: element %zu has bits %08x", n, i, (unsigned)bits[i]);
        snprintf(what, sizeof what, "zero n %zu", n);
        TRY(guard_ok(be, what, d, n, why, cap));
        note(what, 0, 0, n);
        arena_pop(mark);
    }
    /* 13 bytes at byte offset 6 of 8 floats of 0xff */
    unsigned char h[32], back[32];
    memset(h, 0xff, sizeof h);
    unsigned char *d = dev_bytes(be, 32);
    be->upload(be, d, h, 32);
    be->zero(be, d + 6, 13);
    be->download(be, back, d, 32);
    for (int i = 0; i < 32; i++)
        if (back[i] != (i >= 6 && i < 19 ? 0 : 0xff))
            FAIL("zero of 13 bytes at byte offset 6: byte %d is %02x", i, back[i]);
    note("zero at an offset", 0, 0, 32);
    return 1;
}

/* dst = src, whole and [off, off + len) of both */
int check_copy(const hcnn_backend *be, char *why, size_t cap)
{
    char what[96];
    for (size_t s = 0; s < NELEM_SIZES; s++) {
        const int mark = arena_mark();
        const size_t n = elem_sizes[s];
        ref_rng r = {11 + n};
        float *h = hrand(&r, n, -1, 1);
        float *src = dnew(be, h, n), *dst = dnan(be, n);
        be->copy(be, dst, src, n);
        snprintf(what, sizeof what, "copy n %zu", n);
        TRY(check_dev(be, what, dst, hd(h, n), n, TOL_EXACT, why, cap));
        if (n >= 17) {
            float *h2 = hrand(&r, n, -1, 1);
            put(be, dst, h2, n);
            be->copy(be, dst + 4, src + 9, n - 12);
            for (size_t i = 4; i < n - 8; i++)
                h2[i] = h[i + 5];
            snprintf(what, sizeof what, "copy n %zu at offsets 4 <- 9", n - 12);
            TRY(check_dev(be, what, dst, hd(h2, n), n, TOL_EXACT, why, cap));
            TRY(check_dev(be, "copy's source", src, hd(h, n), n, TOL_EXACT, why, cap));
        }
        arena_pop(mark);
    }
    return 1;
}

/* ---- fully connected helpers ----------------------------------------------------------- */

static const int rows_cases[][2] = {{1, 1}, {3, 7}, {64, 10}, {100, 300}, {1, 500}, {257, 3}};
#define NROWS (sizeof rows_cases / sizeof *rows_cases)

/* db[j] += sum_i dy[i][j] */
int check_row_sum_acc(const hcnn_backend *be, char *why, size_t cap)
{
    char what[96];
    ref_rng r = {31};
    for (size_t c = 0; c < NROWS; c++) {
        const int mark = arena_mark();
        const int n = rows_cases[c][0], m = rows_cases[c][1];
        float *dy = hrand(&r, (size_t)n * m, -1, 1), *db0 = hrand(&r, (size_t)m, -1, 1);
        double *want = hdvec((size_t)m);
        for (int j = 0; j < m; j++) {
            double s = db0[j];
            for (int i = 0; i < n; i++)
                s += dy[(size_t)i * m + j];
            want[j] = s;
        }
        float *d_dy = dnew(be, dy, (size_t)n * m), *d_db = dnew(be, db0, (size_t)m);
        be->row_sum_acc(be, d_dy, n, m, d_db);
        snprintf(what, sizeof what, "row_sum_acc n %d m %d", n, m);
        TRY(check_dev(be, what, d_db, want, (size_t)m, TOL_SUM, why, cap));
        arena_pop(mark);
    }
    return 1;
}

/* y[i][j] += b[j] (one float addition: exact) */
int check_add_row_bias(const hcnn_backend *be, char *why, size_t cap)
{
    char what[96];
    ref_rng r = {37};
    for (size_t c = 0; c < NROWS; c++) {
        const int mark = arena_mark();
        const int n = rows_cases[c][0], m = rows_cases[c][1];
        const size_t nm = (size_t)n * m;
        float *y = hrand(&r, nm, -1, 1), *b = hrand(&r, (size_t)m, -1, 1);
        double *want = hdvec(nm);
        for (size_t i = 0; i < nm; i++)
            want[i] = y[i] + b[i % m];
        float *d_y = dnew(be, y, nm), *d_b = dnew(be, b, (size_t)m);
        be->add_row_bias(be, d_y, d_b, n, m);
        snprintf(what, sizeof what, "add_row_bias n %d m %d", n, m);
        TRY(check_dev(be, what, d_y, want, nm, TOL_EXACT, why, cap));
        arena_pop(mark);
    }
    return 1;
}

/* ---- element-wise ---------------------------------------------------------------------- */

/* x with exact zeros every 7th element (ReLU's edge) */
static float *relu_input(ref_rng *r, size_t n)
{
    float *x = hrand(r, n, -1, 1);
    for (size_t i = 0; i < n; i += 7)
        x[i] = 0.0f;
    return x;
}

/* y = x > 0 ? x : slope x  (one float multiplication: exact) */
int check_relu_fwd(const hcnn_backend *be, char *why, size_t cap)
{
    char what[96];
    ref_rng r = {41};
    const float slopes[] = {0.0f, 0.01f};
    for (size_t s = 0; s < NELEM_SIZES; s++)
        for (int k = 0; k < 2; k++) {
            const int mark = arena_mark();
            const size_t n = elem_sizes[s];
            float *x = relu_input(&r, n);
            double *want = hdvec(n);
            for (size_t i = 0; i < n; i++)
                want[i] = x[i] > 0.0f ? x[i] : slopes[k] * x[i];
            float *d_x = dnew(be, x, n), *d_y = dnan(be, n);
            be->relu_fwd(be, d_x, d_y, n, slopes[k]);
            snprintf(what, sizeof what, "relu_fwd n %zu slope %g", n, (double)slopes[k]);
            TRY(check_dev(be, what, d_y, want, n, TOL_EXACT, why, cap));
            arena_pop(mark);
        }
    return 1;
}

/* dx = y > 0 ? dy : slope dy, y the forward's output (zeros included) */
int check_relu_bwd(const hcnn_backend *be, char *why, size_t cap)
{
    char what[96];
    ref_rng r = {43};
    const float slopes[] = {0.0f, 0.01f};
    for (size_t s = 0; s < NELEM_SIZES; s++)
        for (int k = 0; k < 2; k++) {
            const int mark = arena_mark();
            const size_t n = elem_sizes[s];
            float *y = relu_input(&r, n), *dy = hrand(&r, n, -1, 1);
            for (size_t i = 0; i < n; i++)
                y[i] = y[i] > 0.0f ? y[i] : slopes[k] * y[i];
            double *want = hdvec(n);
            for (size_t i = 0; i < n; i++)
                want[i] = y[i] > 0.0f ? dy[i] : slopes[k] * dy[i];
            float *d_y = dnew(be, y, n), *d_dy = dnew(be, dy, n), *d_dx = dnan(be, n);
            be->relu_bwd(be, d_y, d_dy, d_dx, n, slopes[k]);
            snprintf(what, sizeof what, "relu_bwd n %zu slope %g", n, (double)slopes[k]);
            TRY(check_dev(be, what, d_dx, want, n, TOL_EXACT, why, cap));
            arena_pop(mark);
        }
    return 1;
}

/* The four binary operations: y = a + b, y += a, x *= s, y = a * b (exact). */
enum { OP_ADD, OP_ADD_ACC, OP_SCALE, OP_MUL };

static int check_binary(const hcnn_backend *be, int op, char *why, size_t cap)
{
    static const char *names[] = {"add", "add_acc", "scale", "mul"};
    char what[96];
    ref_rng r = {47 + (uint64_t)op};
    for (size_t s = 0; s < NELEM_SIZES; s++) {
        const int mark = arena_mark();
        const size_t n = elem_sizes[s];
        float *a = hrand(&r, n, -2, 2), *b = hrand(&r, n, -2, 2);
        const float sc = -1.375f + 0.001f * (float)s;
        double *want = hdvec(n);
        for (size_t i = 0; i < n; i++)
            want[i] = op == OP_ADD       ? (double)(a[i] + b[i])
                      : op == OP_ADD_ACC ? (double)(b[i] + a[i])
                      : op == OP_SCALE   ? (double)(a[i] * sc)
                                         : (double)(a[i] * b[i]);
        float *d_a = dnew(be, a, n), *d_b = dnew(be, b, n), *d_y = dnan(be, n);
        float *out = d_y;
        if (op == OP_ADD)
            be->add(be, d_a, d_b, d_y, n);
        else if (op == OP_ADD_ACC)
            be->add_acc(be, d_a, d_b, n), out = d_b;
        else if (op == OP_SCALE)
            be->scale(be, d_a, n, sc), out = d_a;
        else
            be->mul(be, d_a, d_b, d_y, n);
        snprintf(what, sizeof what, "%s n %zu", names[op], n);
        TRY(check_dev(be, what, out, want, n, TOL_EXACT, why, cap));
        if (op == OP_ADD || op == OP_MUL || op == OP_ADD_ACC) { /* inputs kept */
            snprintf(what, sizeof what, "%s n %zu: its input a", names[op], n);
            TRY(check_dev(be, what, d_a, hd(a, n), n, TOL_EXACT, why, cap));
        }
        arena_pop(mark);
    }
    return 1;
}
int check_add(const hcnn_backend *be, char *why, size_t cap)
{
    return check_binary(be, OP_ADD, why, cap);
}
int check_add_acc(const hcnn_backend *be, char *why, size_t cap)
{
    return check_binary(be, OP_ADD_ACC, why, cap);
}
int check_scale(const hcnn_backend *be, char *why, size_t cap)
{
    return check_binary(be, OP_SCALE, why, cap);
}
int check_mul(const hcnn_backend *be, char *why, size_t cap)
{
    return check_binary(be, OP_MUL, why, cap);
}

/* ---- dropout ------------------------------------------------------------------------------
 * The mask is counter-based (its bits are the implementation's), so its
 * properties: every value 0 or 1/(1-p); y == x * mask; the kept fraction near
 * 1-p; the same arguments the same mask; sample i of first_sample f is sample
 * f+i of first_sample 0; another step, seed or layer another mask; p = 0 keeps
 * everything. */

typedef struct drop_args {
    int n;
    size_t per;
    float p;
    uint64_t seed, step, first, layer;
} drop_args;

/* run dropout on x (host) and download y and mask into host arrays */
static void drop_run(const hcnn_backend *be, const drop_args *a, const float *x, float *y,
                     float *mask)
{
    const int mark = arena_mark();
    const size_t nn = (size_t)a->n * a->per;
    float *d_x = dnew(be, x, nn), *d_y = dnan(be, nn), *d_m = dnan(be, nn);
    be->dropout_fwd(be, d_x, d_y, d_m, a->n, a->per, a->p, a->seed, a->step, a->first, a->layer);
    get(be, y, d_y, nn), get(be, mask, d_m, nn);
    arena_pop(mark);
}

static size_t differing(const float *a, const float *b, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += a[i] != b[i];
    return k;
}

int check_dropout(const hcnn_backend *be, char *why, size_t cap)
{
    char what[128];
    const drop_args cases[] = {
        {64, 4096, 0.3f, 17, 5, 0, 3},  {8, 3001, 0.5f, 99, 1, 40, 0}, {3, 7, 0.9f, 1, 2, 3, 4},
        {16, 1000, 0.1f, 7, 100, 0, 9}, {5, 301, 0.0f, 17, 5, 0, 3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const int mark = arena_mark();
        const drop_args a = cases[c];
        const size_t nn = (size_t)a.n * a.per;
        ref_rng r = {53 + c};
        float *x = hrand(&r, nn, -1, 1), *y = hvec(nn), *m = hvec(nn);
        float *y2 = hvec(nn), *m2 = hvec(nn);
        drop_run(be, &a, x, y, m);
        snprintf(what, sizeof what, "dropout_fwd n %d per %zu p %g", a.n, a.per, (double)a.p);
        const double scale = 1.0 / (1.0 - a.p);
        size_t kept = 0;
        for (size_t i = 0; i < nn; i++) {
            if (m[i] != 0.0f && !(fabs(m[i] - scale) <= TOL_DROPOUT_SCALE * scale))
                FAIL("%s: mask[%zu] is %.9g, neither 0 nor 1/(1-p) = %.9g", what, i, (double)m[i],
                     scale);
            if (y[i] != x[i] * m[i])
                FAIL("%s: y[%zu] is %.9g, x * mask is %.9g", what, i, (double)y[i],
                     (double)(x[i] * m[i]));
            kept += m[i] != 0.0f;
        }
        /* within 5 standard deviations of the binomial (and all when p = 0) */
        const double frac = (double)kept / nn, sd = sqrt(a.p * (1.0 - a.p) / nn);
        if (fabs(frac - (1.0 - a.p)) > 5 * sd + 0.5 / nn)
            FAIL("%s: kept %.4f of the elements, expected %.4f +- %.4f", what, frac, 1.0 - a.p,
                 5 * sd);
        note(what, 0, 0, nn);
        /* the same arguments: the same mask */
        drop_run(be, &a, x, y2, m2);
        if (differing(m, m2, nn) || differing(y, y2, nn))
            FAIL("%s: the same arguments gave another mask (%zu elements differ)", what,
                 differing(m, m2, nn));
        if (a.p == 0.0f || nn < 1000) {
            arena_pop(mark);
            continue;
        }
        /* samples are independent: sample 0's and sample 1's masks differ */
        if (!differing(m, m + a.per, a.per))
            FAIL("%s: samples 0 and 1 have the same mask", what);
        /* first_sample: samples [2, n) of this call are samples [0, n-2) of one at first + 2 */
        drop_args b = a;
        b.n = a.n - 2, b.first = a.first + 2;
        drop_run(be, &b, x + 2 * a.per, y2, m2);
        if (differing(m + 2 * a.per, m2, (size_t)b.n * a.per))
            FAIL("%s: first_sample + 2 does not give the masks of samples 2.. (%zu differ)", what,
                 differing(m + 2 * a.per, m2, (size_t)b.n * a.per));
        /* another step, seed, layer: another mask (about 2p(1-p) of it differs) */
        const char *names[3] = {"step", "seed", "layer_id"};
        for (int k = 0; k < 3; k++) {
            b = a;
            if (k == 0)
                b.step++;
            else if (k == 1)
                b.seed++;
            else
                b.layer++;
            drop_run(be, &b, x, y2, m2);
            const size_t d = differing(m, m2, nn);
            if ((double)d < a.p * (1.0 - a.p) * nn)
                FAIL("%s: another %s changed only %zu of %zu mask values", what, names[k], d, nn);
        }
        arena_pop(mark);
    }
    return 1;
}

/* ---- pooling --------------------------------------------------------------------------------- */

typedef struct pool_case {
    int n, c, h, w, kh, kw, sh, sw, ph, pw;
} pool_case;

static const pool_case pool_cases[] = {
    {2, 3, 8, 8, 2, 2, 2, 2, 0, 0},   /* 2x2 stride 2 */
    {2, 3, 9, 7, 2, 2, 2, 2, 0, 0},   /* odd planes: a last row and column in no window */
    {1, 2, 20, 34, 2, 2, 2, 2, 0, 0}, /* 17 windows a row */
    {2, 4, 11, 13, 3, 3, 2, 2, 1, 1}, /* 3x3 stride 2 pad 1 (a ResNet stem) */
    {1, 2, 7, 6, 3, 3, 1, 1, 1, 1},   /* overlapping windows */
    {3, 2, 6, 9, 2, 3, 1, 2, 1, 1},   /* non-square window and stride */
    {2, 3, 5, 5, 5, 5, 1, 1, 2, 2},   /* 5x5 pad 2: windows mostly padding */
    {2, 5, 7, 7, 7, 7, 1, 1, 0, 0},   /* the global pool */
    {1, 1, 1, 1, 1, 1, 1, 1, 0, 0},   /* one pixel */
};
#define NPOOL (sizeof pool_cases / sizeof *pool_cases)

static hcnn_pool_geom pool_geom(const pool_case *pc)
{
    hcnn_pool_geom g = {pc->c, pc->h, pc->w, pc->kh, pc->kw, pc->sh, pc->sw, pc->ph, pc->pw, 0, 0};
    g.oh = (pc->h + 2 * pc->ph - pc->kh) / pc->sh + 1;
    g.ow = (pc->w + 2 * pc->pw - pc->kw) / pc->sw + 1;
    return g;
}

static void pool_name(const pool_case *pc, const char *op, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s n %d, %dx%dx%d, window %dx%d, stride %dx%d, pad %dx%d", op, pc->n, pc->c,
             pc->h, pc->w, pc->kh, pc->kw, pc->sh, pc->sw, pc->ph, pc->pw);
}

/* distinct values in [-1, 1), shuffled: no ties for the maximum */
static float *distinct(ref_rng *r, size_t n)
{
    float *x = hvec(n);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(2.0 * i / n - 1.0);
    for (size_t i = n; i > 1; i--) {
        const size_t j = ref_next(r) % i;
        const float t = x[i - 1];
        x[i - 1] = x[j], x[j] = t;
    }
    return x;
}

/* max pool forward (y: the window's largest value: exact) and backward (dx:
 * dy at each window's maximum, from the forward's argmax; overlapping windows add).
 * x, y, dy and dx are activations, stated in NCHW and laid out as the backend's
 * (dnew_act, check_act); the argmax is the backend's own (its layout and, in an
 * NHWC backend, its meaning), so it is checked only through what maxpool_bwd makes
 * of it. */
static int check_maxpool(const hcnn_backend *be, int backward, char *why, size_t cap)
{
    char what[160];
    for (size_t c = 0; c < NPOOL; c++) {
        const int mark = arena_mark();
        const pool_case *pc = &pool_cases[c];
        const hcnn_pool_geom g = pool_geom(pc);
        const size_t nx = (size_t)pc->n * g.c * g.h * g.w, ny = (size_t)pc->n * g.c * g.oh * g.ow;
        ref_rng r = {61 + c};
        float *x = distinct(&r, nx), *dy = hrand(&r, ny, -1, 1);
        const int np = g.h * g.w, onp = g.oh * g.ow;
        float *d_x = dnew_act(be, x, pc->n, g.c, np), *d_y = dnan(be, ny);
        float *d_dy = dnew_act(be, dy, pc->n, g.c, onp);
        int32_t *d_arg = dev_bytes(be, ny * sizeof(int32_t));
        be->maxpool_fwd(be, &g, d_x, pc->n, d_y, d_arg);
        if (!backward) {
            double *want = hdvec(ny);
            ref_maxpool_fwd(&g, x, pc->n, want);
            pool_name(pc, "maxpool_fwd", what, sizeof what);
            TRY(check_act(be, what, d_y, want, pc->n, g.c, onp, TOL_EXACT, why, cap));
        } else {
            double *want = hdvec(nx);
            ref_maxpool_bwd(&g, x, dy, pc->n, want);
            float *d_dx = dnan(be, nx);
            be->maxpool_bwd(be, &g, d_dy, d_arg, pc->n, d_dx);
            pool_name(pc, "maxpool_bwd", what, sizeof what);
            const int overlap = pc->kh > pc->sh || pc->kw > pc->sw;
            TRY(check_act(be, what, d_dx, want, pc->n, g.c, np, overlap ? TOL_POOL : TOL_EXACT,
                          why, cap));
        }
        arena_pop(mark);
    }
    return 1;
}
int check_maxpool_fwd(const hcnn_backend *be, char *why, size_t cap)
{
    return check_maxpool(be, 0, why, cap);
}
int check_maxpool_bwd(const hcnn_backend *be, char *why, size_t cap)
{
    return check_maxpool(be, 1, why, cap);
}

/* average pool: y = window sum / (kh kw), dx = the windows' dy / (kh kw); x, y, dy
 * and dx in the backend's layout (dnew_act, check_act) */
static int check_avgpool(const hcnn_backend *be, int backward, char *why, size_t cap)
{
    char what[160];
    for (size_t c = 0; c < NPOOL; c++) {
        const int mark = arena_mark();
        const pool_case *pc = &pool_cases[c];
        const hcnn_pool_geom g = pool_geom(pc);
        const size_t nx = (size_t)pc->n * g.c * g.h * g.w, ny = (size_t)pc->n * g.c * g.oh * g.ow;
        ref_rng r = {71 + c};
        float *x = hrand(&r, nx, -1, 1), *dy = hrand(&r, ny, -1, 1);
        const int np = g.h * g.w, onp = g.oh * g.ow;
        if (!backward) {
            double *want = hdvec(ny);
            ref_avgpool_fwd(&g, x, pc->n, want);
            float *d_x = dnew_act(be, x, pc->n, g.c, np), *d_y = dnan(be, ny);
            be->avgpool_fwd(be, &g, d_x, pc->n, d_y);
            pool_name(pc, "avgpool_fwd", what, sizeof what);
            TRY(check_act(be, what, d_y, want, pc->n, g.c, onp, TOL_POOL, why, cap));
        } else {
            double *want = hdvec(nx);
            ref_avgpool_bwd(&g, dy, pc->n, want);
            float *d_dy = dnew_act(be, dy, pc->n, g.c, onp), *d_dx = dnan(be, nx);
            be->avgpool_bwd(be, &g, d_dy, pc->n, d_dx);
            pool_name(pc, "avgpool_bwd", what, sizeof what);
            TRY(check_act(be, what, d_dx, want, pc->n, g.c, np, TOL_POOL, why, cap));
        }
        arena_pop(mark);
    }
    return 1;
}
int check_avgpool_fwd(const hcnn_backend *be, char *why, size_t cap)
{
    return check_avgpool(be, 0, why, cap);
}
int check_avgpool_bwd(const hcnn_backend *be, char *why, size_t cap)
{
    return check_avgpool(be, 1, why, cap);
}

/* ---- layout changes ------------------------------------------------------------------------ */

/* [n][c][np]: odd sizes, one channel, one pixel, both, a ResNet-like tail */
static const int layout_cases[][3] = {{3, 5, 7}, {2, 1, 9}, {4, 6, 1}, {1, 1, 1}, {2, 64, 49}};

/* An NHWC backend: layout_from_nchw gives the host's transpose [n][c][np] ->
 * [n][np][c] exactly (a copy: no arithmetic), leaves its input alone and writes
 * nothing past its output; layout_to_nchw gives the NCHW tensor back exactly.
 * The transpose is written out here rather than taken from put_act, which the
 * other checks rest on.  An NCHW backend: both operations NULL (backend.h), so
 * that nothing converts what is already NCHW. */
int check_layout(const hcnn_backend *be, char *why, size_t cap)
{
    if (be->layout != HCNN_LAYOUT_NHWC) {
        if (be->layout_from_nchw || be->layout_to_nchw)
            FAIL("an NCHW backend has layout_from_nchw %s and layout_to_nchw %s (both must be "
                 "NULL)",
                 be->layout_from_nchw ? "set" : "NULL", be->layout_to_nchw ? "set" : "NULL");
        return 1;
    }
    if (!be->layout_from_nchw || !be->layout_to_nchw)
        FAIL("an NHWC backend lacks layout_from_nchw or layout_to_nchw");
    char what[128];
    for (size_t k = 0; k < sizeof layout_cases / sizeof *layout_cases; k++) {
        const int mark = arena_mark();
        const int n = layout_cases[k][0], c = layout_cases[k][1], np = layout_cases[k][2];
        const size_t count = (size_t)n * c * np;
        ref_rng r = {91 + k};
        float *x = hrand(&r, count, -1, 1);
        double *want = hdvec(count);
        for (int i = 0; i < n; i++)
            for (int ch = 0; ch < c; ch++)
                for (int p = 0; p < np; p++)
                    want[((size_t)i * np + p) * c + ch] = x[((size_t)i * c + ch) * np + p];
        float *d_x = dnew(be, x, count), *d_t = dnan(be, count), *d_back = dnan(be, count);
        be->layout_from_nchw(be, d_x, d_t, n, c, np);
        snprintf(what, sizeof what, "layout_from_nchw n %d, c %d, np %d", n, c, np);
        TRY(check_dev(be, what, d_t, want, count, TOL_EXACT, why, cap));
        snprintf(what, sizeof what, "layout_from_nchw's input, n %d, c %d, np %d", n, c, np);
        TRY(check_dev(be, what, d_x, hd(x, count), count, TOL_EXACT, why, cap));
        be->layout_to_nchw(be, d_t, d_back, n, c, np);
        snprintf(what, sizeof what, "layout_to_nchw n %d, c %d, np %d (the round trip)", n, c, np);
        TRY(check_dev(be, what, d_back, hd(x, count), count, TOL_EXACT, why, cap));
        snprintf(what, sizeof what, "layout_to_nchw's input, n %d, c %d, np %d", n, c, np);
        TRY(check_dev(be, what, d_t, want, count, TOL_EXACT, why, cap));
        arena_pop(mark);
    }
    return 1;
}
