/* Data set selection by name, epoch permutations and batch assembly. */
#define _POSIX_C_SOURCE 200809L
#include "hcnn/data.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "hcnn/common.h"
#include "hcnn/files.h"

/* ---- opening ----------------------------------------------------------- */

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* Join dir and name into out; an over-long path is an error, not a silent
 * truncation that would open some other file. */
static int join(char *out, size_t size, const char *dir, const char *name)
{
    int len = snprintf(out, size, "%s/%s", dir, name);
    if (len < 0 || (size_t)len >= size)
        return hcnn_error_code(HCNN_EINVAL, "path '%s/%s' is longer than %zu characters", dir, name,
                               size - 1);
    return HCNN_OK;
}

static const char *const idx_names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                         "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};

static int open_idx(const hcnn_config *cfg, hcnn_dataset *train, hcnn_dataset *test, float mean, float std)
{
    const char *dir = cfg->data_dir;
    char path[4][HCNN_PATH_MAX];
    char missing[512] = "";
    for (int i = 0; i < 4; i++) {
        int code = join(path[i], sizeof path[i] - 3, dir, idx_names[i]); /* room for ".gz" */
        if (code != HCNN_OK)
            return code;
        if (exists(path[i]))
            continue; /* raw preferred: no decompression */
        size_t len = strlen(path[i]);
        memcpy(path[i] + len, ".gz", 4);
        if (exists(path[i]))
            continue;
        path[i][len] = '\0';
        size_t m = strlen(missing);
        snprintf(missing + m, sizeof missing - m, "%s%s[.gz]", m ? ", " : "", idx_names[i]);
    }
    if (missing[0])
        return hcnn_error_code(HCNN_EIO,
                               "data set '%s': cannot find %s in directory '%s' (looked for "
                               "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                               "t10k-labels-idx1-ubyte, each raw or .gz); run scripts/fetch-data.sh to "
                               "download it",
                               cfg->dataset, missing, dir);

    int code = hcnn_idx_load(train, path[0], path[1], 10);
    if (code == HCNN_OK)
        code = hcnn_idx_load(test, path[2], path[3], 10);
    if (code != HCNN_OK)
        return code;
    for (int ch = 0; ch < 3; ch++) {
        train->mean[ch] = test->mean[ch] = mean;
        train->std[ch] = test->std[ch] = std;
    }
    return HCNN_OK;
}

static int open_cifar10(const hcnn_config *cfg, hcnn_dataset *train, hcnn_dataset *test)
{
    static const char *const names[6] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                         "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
    char sub[HCNN_PATH_MAX];
    char path[6][HCNN_PATH_MAX];
    int code = join(sub, sizeof sub, cfg->data_dir, "cifar-10-batches-bin");
    if (code != HCNN_OK)
        return code;
    /* the .bin files directly in data_dir, or in the tarball's directory */
    const char *dirs[2] = {cfg->data_dir, sub};
    int found = 0;
    for (int d = 0; d < 2 && !found; d++) {
        found = 1;
        for (int i = 0; i < 6; i++) {
            if ((code = join(path[i], sizeof path[i], dirs[d], names[i])) != HCNN_OK)
                return code;
            found = found && exists(path[i]);
        }
    }
    if (!found)
        return hcnn_error_code(HCNN_EIO,
                               "data set 'cifar10': cannot find data_batch_1.bin..data_batch_5.bin and "
                               "test_batch.bin in directory '%s' or '%s'; CIFAR-10 cannot be downloaded "
                               "here: bring the files from the CIFAR-10 site "
                               "(https://www.cs.toronto.edu/~kriz/cifar.html, binary version "
                               "cifar-10-binary.tar.gz) and extract the .bin files into '%s' "
                               "(scripts/fetch-data.sh cifar10 tries to)",
                               cfg->data_dir, sub, cfg->data_dir);
    const char *const trainf[5] = {path[0], path[1], path[2], path[3], path[4]};
    const char *const testf[1] = {path[5]};
    code = hcnn_cifar10_load(train, trainf, 5);
    if (code == HCNN_OK)
        code = hcnn_cifar10_load(test, testf, 1);
    return code;
}

static int open_synthetic(const hcnn_config *cfg, hcnn_dataset *train, hcnn_dataset *test)
{
    const hcnn_model_spec *m = &cfg->model;
    int code = hcnn_synthetic_make_split(train, cfg->synthetic_train, m->in_c, m->in_h, m->in_w, m->classes,
                                         cfg->seed, 0);
    if (code == HCNN_OK)
        code = hcnn_synthetic_make_split(test, cfg->synthetic_test, m->in_c, m->in_h, m->in_w, m->classes,
                                         cfg->seed, 1);
    return code;
}

int hcnn_dataset_open(const hcnn_config *cfg, hcnn_dataset *train, hcnn_dataset *test)
{
    memset(train, 0, sizeof *train);
    memset(test, 0, sizeof *test);
    int code;
    if (strcmp(cfg->dataset, "mnist") == 0)
        code = open_idx(cfg, train, test, 0.1307f, 0.3081f);
    else if (strcmp(cfg->dataset, "fashion_mnist") == 0)
        code = open_idx(cfg, train, test, 0.2860f, 0.3530f);
    else if (strcmp(cfg->dataset, "cifar10") == 0)
        code = open_cifar10(cfg, train, test);
    else if (strcmp(cfg->dataset, "synthetic") == 0)
        code = open_synthetic(cfg, train, test);
    else
        code = hcnn_error_code(HCNN_EINVAL,
                               "%s: unknown dataset '%s' (expected mnist, fashion_mnist, cifar10 or synthetic)",
                               cfg->path, cfg->dataset);
    if (code != HCNN_OK)
        goto fail;

    hcnn_dataset *sets[2] = {train, test};
    for (int s = 0; s < 2; s++) {
        hcnn_dataset *ds = sets[s];
        snprintf(ds->name, sizeof ds->name, "%s", cfg->dataset);
        hcnn_dataset_limit(ds, s == 0 ? cfg->train_limit : cfg->test_limit);
        const hcnn_model_spec *m = &cfg->model;
        if (ds->c != m->in_c || ds->h != m->in_h || ds->w != m->in_w || ds->classes != m->classes) {
            code = hcnn_error_code(HCNN_EINVAL,
                                   "%s: the model input is %dx%dx%d with %d classes, but data set '%s' "
                                   "(%s) is %dx%dx%d with %d classes",
                                   cfg->path, m->in_c, m->in_h, m->in_w, m->classes, cfg->dataset,
                                   ds->source, ds->c, ds->h, ds->w, ds->classes);
            goto fail;
        }
    }
    return HCNN_OK;

fail:
    hcnn_dataset_free(train);
    hcnn_dataset_free(test);
    return code;
}

void hcnn_dataset_identity(const hcnn_dataset *ds, hcnn_data_identity *id)
{
    memset(id, 0, sizeof *id);
    id->n = ds->n, id->c = ds->c, id->h = ds->h, id->w = ds->w, id->classes = ds->classes;
    const size_t per = (size_t)ds->c * ds->h * ds->w;
    id->labels_crc = hcnn_crc32(0, ds->labels, (size_t)ds->n);
    const int span = ds->n < HCNN_DATA_ID_SAMPLES ? ds->n : HCNN_DATA_ID_SAMPLES;
    for (int b = 0; b < HCNN_DATA_ID_BLOCKS && span > 0; b++) {
        const long first = (long)(ds->n - span) * b / (HCNN_DATA_ID_BLOCKS - 1);
        id->images_crc = hcnn_crc32(id->images_crc, ds->images + (size_t)first * per,
                                    (size_t)span * per);
    }
}

void hcnn_dataset_limit(hcnn_dataset *ds, long limit)
{
    if (limit > 0 && limit < ds->n)
        ds->n = (int)limit;
}

void hcnn_dataset_free(hcnn_dataset *ds)
{
    hcnn_free(ds->images);
    hcnn_free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

/* ---- epoch order ------------------------------------------------------- */

void hcnn_epoch_permutation(uint32_t *perm, int n, uint64_t seed, int epoch, int shuffle)
{
    for (int i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    if (!shuffle)
        return;
    hcnn_rng r;
    hcnn_rng_seed(&r, seed, hcnn_hash4((uint64_t)epoch, 0x7065726du /* "perm" */, 0, 0));
    for (int i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)hcnn_rng_below(&r, (uint64_t)i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* ---- batch assembly ---------------------------------------------------- */

#define AUG_PAD 4

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* 16 table lookups per gather instruction */
__attribute__((target("avx512f")))
static size_t lut_copy_avx512(const uint8_t *s, float *d, size_t n, const float *lut)
{
    size_t k = 0;
    for (; k + 16 <= n; k += 16) {
        const __m512i i = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(s + k)));
        _mm512_storeu_ps(d + k, _mm512_i32gather_ps(i, lut, 4));
    }
    return k;
}
#define HAVE_LUT_AVX512 1
#endif

/* d[k] = lut[s[k]]; unrolled by hand: gcc -O2 does not, and the four
 * independent loads make it about 1.6x faster. */
static inline void lut_copy(const uint8_t *s, float *d, size_t n, const float *lut)
{
    size_t k = 0;
#ifdef HAVE_LUT_AVX512
    if (__builtin_cpu_supports("avx512f"))
        k = lut_copy_avx512(s, d, n, lut);
#endif
    for (; k + 4 <= n; k += 4) {
        float a = lut[s[k]], b = lut[s[k + 1]], c = lut[s[k + 2]], e = lut[s[k + 3]];
        d[k] = a;
        d[k + 1] = b;
        d[k + 2] = c;
        d[k + 3] = e;
    }
    for (; k < n; k++)
        d[k] = lut[s[k]];
}

/* One augmented channel: out(y, x) = in(y + dy, x' + dx) with x' = x or
 * w-1-x (flip); outside the image the value of a zero pixel (padding). */
static void augment_plane(const uint8_t *in, float *out, int h, int w, int dx, int dy, int flip,
                          const float *lut)
{
    const float pad = lut[0];
    for (int y = 0; y < h; y++) {
        float *o = out + (size_t)y * w;
        int sy = y + dy;
        if (sy < 0 || sy >= h) {
            for (int x = 0; x < w; x++)
                o[x] = pad;
            continue;
        }
        const uint8_t *row = in + (size_t)sy * w;
        /* valid x: 0 <= sx < w, sx = x + dx (or w-1-x+dx when flipped) */
        int lo = dx < 0 ? -dx : 0, hi = dx > 0 ? w - dx : w;
        if (flip) {
            int t = lo;
            lo = w - hi;
            hi = w - t;
        }
        if (lo > w)
            lo = w;
        if (hi < lo)
            hi = lo;
        for (int x = 0; x < lo; x++)
            o[x] = pad;
        if (flip)
            for (int x = lo; x < hi; x++)
                o[x] = lut[row[w - 1 - x + dx]];
        else if (hi > lo)
            lut_copy(row + lo + dx, o + lo, (size_t)(hi - lo), lut);
        for (int x = hi; x < w; x++)
            o[x] = pad;
    }
}

/* Samples [lo, hi) of the batch.  They come at random from a set that
 * training has pushed out of the core's caches (on LeNet-5 a sample took
 * 0.7 us inside training, 0.3 us when cached), so the labels and a window
 * of samples (up to 256 KiB, well within the core's L2) are requested all
 * at once, as many misses in flight as the core allows, and the window then
 * stays ahead of the loop: 0.75 -> 0.5 us per MNIST sample inside
 * training.  LeNet-5's data-wait share at batch 256 was 0.011-0.012 with a
 * 24 KiB window and 0.008-0.010 with the whole share requested at once. */
static void assemble_range(const hcnn_dataset *ds, const uint32_t *idx, int lo, int hi,
                           int augment, uint64_t seed, int epoch, float *x, int32_t *y,
                           const float (*lut)[256])
{
    const int c = ds->c, h = ds->h, w = ds->w;
    const size_t hw = (size_t)h * w, chw = (size_t)c * hw;
    const int window = chw < 262144 ? (int)(262144 / chw) : 1;
    for (int i = lo; i < hi; i++)
        __builtin_prefetch(ds->labels + idx[i]);
    for (int i = lo; i < hi && i < lo + window; i++)
        for (size_t off = 0; off < chw; off += 64)
            __builtin_prefetch(ds->images + chw * idx[i] + off);
    for (int i = lo; i < hi; i++) {
        const uint8_t *src = ds->images + chw * idx[i];
        float *dst = x + chw * (size_t)i;
        if (i + window < hi)
            for (size_t off = 0; off < chw; off += 64)
                __builtin_prefetch(ds->images + chw * idx[i + window] + off);
        y[i] = ds->labels[idx[i]];
        if (!augment) {
            for (int ch = 0; ch < c; ch++)
                lut_copy(src + hw * ch, dst + hw * ch, hw, lut[ch < 3 ? ch : 0]);
            continue;
        }
        /* per-sample draws from (seed, epoch, sample): thread-independent */
        uint64_t r = hcnn_hash4(seed, (uint64_t)epoch, idx[i], 0x61756721u /* "aug!" */);
        int dx = (int)((r & 0xffff) % (2 * AUG_PAD + 1)) - AUG_PAD;
        int dy = (int)((r >> 16 & 0xffff) % (2 * AUG_PAD + 1)) - AUG_PAD;
        int flip = (int)(r >> 32 & 1);
        for (int ch = 0; ch < c; ch++)
            augment_plane(src + hw * ch, dst + hw * ch, h, w, dx, dy, flip, lut[ch < 3 ? ch : 0]);
    }
}

void hcnn_batch_assemble(const hcnn_dataset *ds, const uint32_t *idx, int n, int augment, uint64_t seed,
                         int epoch, float *x, int32_t *y, int nthreads)
{
    /* u8 -> normalised float by table lookup: the inner loop is a load and
     * a store.  Channels >= 3 use channel 0's mean/std. */
    float lut[3][256];
    for (int ch = 0; ch < (ds->c < 3 ? ds->c : 3); ch++) /* only the channels used */
        for (int v = 0; v < 256; v++)
            lut[ch][v] = ((float)v / 255.0f - ds->mean[ch]) / ds->std[ch];
    const int nt = nthreads > 1 ? nthreads : 1;
    (void)nt; /* unused when built without OpenMP */
    /* contiguous shares, as the whole-network forward gives its threads:
     * each image is in the cache of the thread that will use it */
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num(), team = omp_get_num_threads();
#else
        const int t = 0, team = 1;
#endif
        assemble_range(ds, idx, (int)((long)n * t / team), (int)((long)n * (t + 1) / team),
                       augment, seed, epoch, x, y, (const float(*)[256])lut);
    }
}
