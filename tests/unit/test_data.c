/* Tests of the data layer: IDX and CIFAR-10 readers (valid and malformed
 * files written to a temporary directory), dataset_open, permutations,
 * batch assembly with augmentation, and the sharded double-buffered loader. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "hcnn/common.h"
#include "hcnn/data.h"

#include "capture.h"

/* ---- helpers ------------------------------------------------------------ */

typedef struct fixture {
    char dir[64];
} fixture;

static int group_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/hcnn_test_data_XXXXXX");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int group_teardown(void **state)
{
    fixture *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    int rc = system(cmd);
    free(f);
    return rc == 0 ? 0 : -1;
}

/* path under the fixture directory (static buffers rotate so that a few
 * paths can be alive at once) */
static const char *tpath(void **state, const char *fmt, ...)
{
    static char bufs[8][512];
    static int next;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    char *b = bufs[next++ % 8];
    snprintf(b, sizeof bufs[0], "%s/%s", ((fixture *)*state)->dir, name);
    return b;
}

static void write_gz(const char *path, const void *data, size_t len)
{
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, data, (unsigned)len), (int)len);
    assert_int_equal(gzclose(g), Z_OK);
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* IDX image file bytes (magic 0x803) of n h x w images, pixel(i, k) =
 * (7*i + 3*k) & 255; returns malloc'd bytes, *len set. */
static uint8_t *idx_images(int n, int h, int w, uint32_t magic, size_t *len)
{
    *len = 16 + (size_t)n * h * w;
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    put32(b, magic);
    put32(b + 4, (uint32_t)n);
    put32(b + 8, (uint32_t)h);
    put32(b + 12, (uint32_t)w);
    for (size_t k = 0; k < (size_t)n * h * w; k++)
        b[16 + k] = (uint8_t)((7 * (k / ((size_t)h * w)) + 3 * (k % ((size_t)h * w))) & 255);
    return b;
}

/* IDX label file bytes (magic 0x801): label i = i % 10 */
static uint8_t *idx_labels(int n, uint32_t magic, size_t *len)
{
    *len = 8 + (size_t)n;
    uint8_t *b = malloc(*len);
    assert_non_null(b);
    put32(b, magic);
    put32(b + 4, (uint32_t)n);
    for (int i = 0; i < n; i++)
        b[8 + i] = (uint8_t)(i % 10);
    return b;
}

static void write_idx_pair(const char *img, const char *lab, int n, int h, int w, int gz)
{
    size_t li, ll;
    uint8_t *bi = idx_images(n, h, w, 0x803, &li), *bl = idx_labels(n, 0x801, &ll);
    if (gz) {
        write_gz(img, bi, li);
        write_gz(lab, bl, ll);
    } else {
        write_file(img, bi, li);
        write_file(lab, bl, ll);
    }
    free(bi);
    free(bl);
}


/* Dataset in memory with given shape; pixel values from a hash. */
static void make_ds(hcnn_dataset *ds, int n, int c, int h, int w, uint64_t salt)
{
    memset(ds, 0, sizeof *ds);
    ds->n = n;
    ds->c = c;
    ds->h = h;
    ds->w = w;
    ds->classes = 10;
    ds->images = hcnn_alloc((size_t)n * c * h * w, "test");
    ds->labels = hcnn_alloc((size_t)n, "test");
    assert_non_null(ds->images);
    assert_non_null(ds->labels);
    for (size_t k = 0; k < (size_t)n * c * h * w; k++)
        ds->images[k] = (uint8_t)(hcnn_hash4(salt, k, 0, 0) >> 56);
    for (int i = 0; i < n; i++)
        ds->labels[i] = (uint8_t)(i % 10);
    for (int ch = 0; ch < 3; ch++) {
        ds->mean[ch] = 0.25f + 0.1f * (float)ch;
        ds->std[ch] = 0.5f - 0.1f * (float)ch;
    }
}

static void base_config(hcnn_config *cfg, const char *dataset, const char *dir, int c, int h, int w)
{
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->path, sizeof cfg->path, "test.yaml");
    snprintf(cfg->dataset, sizeof cfg->dataset, "%s", dataset);
    snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", dir);
    cfg->model.in_c = c;
    cfg->model.in_h = h;
    cfg->model.in_w = w;
    cfg->model.classes = 10;
    cfg->seed = 42;
    cfg->synthetic_train = 200;
    cfg->synthetic_test = 100;
}

/* ---- IDX ------------------------------------------------------------------ */

static void test_idx_raw(void **state)
{
    const char *img = tpath(state, "raw-images"), *lab = tpath(state, "raw-labels");
    write_idx_pair(img, lab, 5, 3, 4, 0);
    hcnn_dataset ds;
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_OK);
    assert_int_equal(ds.n, 5);
    assert_int_equal(ds.c, 1);
    assert_int_equal(ds.h, 3);
    assert_int_equal(ds.w, 4);
    assert_int_equal(ds.classes, 10);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ds.labels[i], i % 10);
        for (int k = 0; k < 12; k++)
            assert_int_equal(ds.images[i * 12 + k], (7 * i + 3 * k) & 255);
    }
    hcnn_dataset_free(&ds);
    assert_null(ds.images);
}

static void test_idx_gz_equals_raw(void **state)
{
    const char *img = tpath(state, "r-img"), *lab = tpath(state, "r-lab");
    const char *gimg = tpath(state, "g-img.gz"), *glab = tpath(state, "g-lab");
    write_idx_pair(img, lab, 300, 28, 28, 0);
    write_idx_pair(gimg, glab, 300, 28, 28, 1); /* no .gz suffix on labels: content decides */
    hcnn_dataset a, b;
    assert_int_equal(hcnn_idx_load(&a, img, lab, 10), HCNN_OK);
    assert_int_equal(hcnn_idx_load(&b, gimg, glab, 10), HCNN_OK);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.images, b.images, (size_t)a.n * 28 * 28);
    assert_memory_equal(a.labels, b.labels, (size_t)a.n);
    hcnn_dataset_free(&a);
    hcnn_dataset_free(&b);
}

static void test_idx_bad_magic(void **state)
{
    const char *img = tpath(state, "m-img"), *lab = tpath(state, "m-lab");
    size_t li, ll;
    uint8_t *bi = idx_images(4, 2, 2, 0x801, &li), *bl = idx_labels(4, 0x801, &ll);
    write_file(img, bi, li);
    write_file(lab, bl, ll);
    hcnn_dataset ds;
    capture c;
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, "0x00000801", "0x00000803", NULL);
    assert_null(ds.images);

    /* labels with the image magic */
    free(bi);
    bi = idx_images(4, 2, 2, 0x803, &li);
    write_file(img, bi, li);
    put32(bl, 0x803);
    write_file(lab, bl, ll);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, lab, "0x00000803", "0x00000801", NULL);

    /* gzipped with a bad magic */
    put32(bl, 0x12345678);
    write_gz(lab, bl, ll);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, lab, "0x12345678", NULL);
    free(bi);
    free(bl);
}

static void test_idx_truncated(void **state)
{
    const char *img = tpath(state, "t-img"), *lab = tpath(state, "t-lab");
    size_t li, ll;
    uint8_t *bi = idx_images(10, 28, 28, 0x803, &li), *bl = idx_labels(10, 0x801, &ll);
    hcnn_dataset ds;
    capture c;
    for (int gz = 0; gz < 2; gz++) {
        /* images: one byte short */
        (gz ? write_gz : write_file)(img, bi, li - 1);
        write_file(lab, bl, ll);
        capture_begin(&c);
        assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
        capture_end(&c, img, "truncated", "7839", "7840", NULL);
        /* labels: missing half */
        write_file(img, bi, li);
        (gz ? write_gz : write_file)(lab, bl, ll - 5);
        capture_begin(&c);
        assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
        capture_end(&c, lab, "truncated", NULL);
        /* header cut */
        (gz ? write_gz : write_file)(img, bi, 10);
        capture_begin(&c);
        assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
        capture_end(&c, img, "header", NULL);
        /* trailing garbage */
        uint8_t *longer = malloc(li + 3);
        assert_non_null(longer);
        memcpy(longer, bi, li);
        memset(longer + li, 0, 3);
        (gz ? write_gz : write_file)(img, longer, li + 3);
        write_file(lab, bl, ll);
        capture_begin(&c);
        assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
        capture_end(&c, img, "trailing", NULL);
        free(longer);
    }
    /* compressed stream cut in the middle */
    write_gz(img, bi, li);
    struct stat st;
    assert_int_equal(stat(img, &st), 0);
    assert_int_equal(truncate(img, st.st_size / 2), 0);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, "truncated", NULL);
    /* only the gzip trailer (CRC, length) missing: all data there, still an error */
    write_gz(img, bi, li);
    assert_int_equal(stat(img, &st), 0);
    assert_int_equal(truncate(img, st.st_size - 4), 0);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, "truncated", NULL);
    free(bi);
    free(bl);
}

/* Bytes after the end of a gzip stream are refused as trailing bytes of a
 * raw file are (zlib's gzread would ignore them); a second gzip member is
 * valid gzip and its data counts (found by tests/fuzz/fuzz_idx). */
static void append_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static void test_idx_gz_trailing(void **state)
{
    const char *img = tpath(state, "gt-img"), *lab = tpath(state, "gt-lab");
    const char *member = tpath(state, "gt-member");
    size_t li, ll;
    uint8_t *bi = idx_images(3, 4, 4, 0x803, &li), *bl = idx_labels(3, 0x801, &ll);
    write_file(lab, bl, ll);
    hcnn_dataset ds;
    capture c;
    static const uint8_t junk[][4] = {{'X'}, {0, 0, 0, 0}, {0x1f}};
    static const size_t junk_len[] = {1, 4, 1};
    for (int k = 0; k < 3; k++) {
        write_gz(img, bi, li);
        append_bytes(img, junk[k], junk_len[k]);
        capture_begin(&c);
        assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
        capture_end(&c, img, "trailing data after the end of the gzip stream", NULL);
        assert_null(ds.images);
    }
    /* two members: the header and part of the data, then the rest */
    write_gz(img, bi, 20);
    write_gz(member, bi + 20, li - 20);
    FILE *f = fopen(member, "rb");
    assert_non_null(f);
    uint8_t buf[512];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof buf);
    append_bytes(img, buf, n);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_OK);
    assert_int_equal(ds.n, 3);
    assert_memory_equal(ds.images, bi + 16, 3 * 16);
    hcnn_dataset_free(&ds);
    /* ... followed by garbage */
    append_bytes(img, "ab", 2);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, "trailing", NULL);
    free(bi);
    free(bl);
}

static void test_idx_count_mismatch(void **state)
{
    const char *img = tpath(state, "c-img"), *lab = tpath(state, "c-lab");
    size_t li, ll;
    uint8_t *bi = idx_images(6, 2, 2, 0x803, &li), *bl = idx_labels(5, 0x801, &ll);
    write_file(img, bi, li);
    write_file(lab, bl, ll);
    hcnn_dataset ds;
    capture c;
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, lab, "5 labels", "6 images", NULL);
    free(bi);
    free(bl);
}

static void test_idx_label_range(void **state)
{
    const char *img = tpath(state, "l-img"), *lab = tpath(state, "l-lab");
    size_t li, ll;
    uint8_t *bi = idx_images(8, 2, 2, 0x803, &li), *bl = idx_labels(8, 0x801, &ll);
    bl[8 + 5] = 12;
    write_file(img, bi, li);
    write_file(lab, bl, ll);
    hcnn_dataset ds;
    capture c;
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, lab, "label 12 at index 5 is out of range (expected < 10)", NULL);
    /* fine with more classes */
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 13), HCNN_OK);
    hcnn_dataset_free(&ds);
    free(bi);
    free(bl);
}

static void test_idx_empty_missing_huge(void **state)
{
    const char *img = tpath(state, "e-img"), *lab = tpath(state, "e-lab");
    size_t ll;
    uint8_t *bl = idx_labels(4, 0x801, &ll);
    write_file(lab, bl, ll);
    hcnn_dataset ds;
    capture c;

    write_file(img, "", 0);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, "empty", NULL);

    const char *missing = tpath(state, "no-such-file");
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, missing, lab, 10), HCNN_EIO);
    capture_end(&c, missing, NULL);

    capture_begin(&c); /* a directory: opens, but cannot be read */
    assert_int_equal(hcnn_idx_load(&ds, ((fixture *)*state)->dir, lab, 10), HCNN_EIO);
    capture_end(&c, ((fixture *)*state)->dir, NULL);

    /* header claims 2^32-1 images of 65535 x 65535: rejected, no allocation */
    uint8_t h[16];
    put32(h, 0x803);
    put32(h + 4, 0xffffffffu);
    put32(h + 8, 65535);
    put32(h + 12, 65535);
    write_file(img, h, sizeof h);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, "4294967295", NULL);
    put32(h + 4, 0x7fffffffu);
    write_file(img, h, sizeof h);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, NULL);
    /* plausible 10^8 x 100 x 100 header on a small file: truncated, bounded read */
    put32(h + 4, 100000000u);
    put32(h + 8, 100);
    put32(h + 12, 100);
    write_file(img, h, sizeof h);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, "truncated", NULL);
    /* zero dimension */
    put32(h + 4, 0);
    write_file(img, h, sizeof h);
    capture_begin(&c);
    assert_int_equal(hcnn_idx_load(&ds, img, lab, 10), HCNN_EFORMAT);
    capture_end(&c, img, "dimension 0 is 0", NULL);

    /* corrupt gzip stream */
    uint8_t junk[64] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    for (int i = 10; i < 64; i++)
        junk[i] = (uint8_t)(i * 37);
    write_file(img, junk, sizeof junk);
    capture_begin(&c);
    int code = hcnn_idx_load(&ds, img, lab, 10);
    capture_end(&c, img, NULL);
    assert_true(code == HCNN_EFORMAT || code == HCNN_EIO);
    free(bl);
}

/* ---- CIFAR-10 ------------------------------------------------------------ */

static void write_cifar(const char *path, int nrec, int first, int bad_label_at)
{
    size_t len = (size_t)nrec * 3073;
    uint8_t *b = malloc(len);
    assert_non_null(b);
    for (int r = 0; r < nrec; r++) {
        b[(size_t)r * 3073] = (uint8_t)((first + r) % 10);
        for (int k = 0; k < 3072; k++)
            b[(size_t)r * 3073 + 1 + k] = (uint8_t)((first + r + k) & 255);
    }
    if (bad_label_at >= 0)
        b[(size_t)bad_label_at * 3073] = 10;
    write_file(path, b, len);
    free(b);
}

static void test_cifar_ok(void **state)
{
    const char *f1 = tpath(state, "cif1.bin"), *f2 = tpath(state, "cif2.bin");
    write_cifar(f1, 3, 0, -1);
    write_cifar(f2, 2, 3, -1);
    const char *files[2] = {f1, f2};
    hcnn_dataset ds;
    assert_int_equal(hcnn_cifar10_load(&ds, files, 2), HCNN_OK);
    assert_int_equal(ds.n, 5);
    assert_int_equal(ds.c, 3);
    assert_int_equal(ds.h, 32);
    assert_int_equal(ds.w, 32);
    assert_int_equal(ds.classes, 10);
    assert_int_equal(ds.augment_default, 1);
    assert_float_equal(ds.mean[2], 0.4465f, 1e-6f);
    assert_float_equal(ds.std[1], 0.2435f, 1e-6f);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ds.labels[i], i % 10);
        for (int k = 0; k < 3072; k += 97)
            assert_int_equal(ds.images[(size_t)i * 3072 + k], (i + k) & 255);
    }
    hcnn_dataset_free(&ds);
}

static void test_cifar_bad(void **state)
{
    const char *f = tpath(state, "cifbad.bin");
    const char *files[1] = {f};
    hcnn_dataset ds;
    capture c;

    uint8_t *b = calloc(3073 * 2 + 7, 1);
    assert_non_null(b);
    write_file(f, b, 3073 * 2 + 7);
    capture_begin(&c);
    assert_int_equal(hcnn_cifar10_load(&ds, files, 1), HCNN_EFORMAT);
    capture_end(&c, f, "6153", "3073", NULL);
    free(b);

    write_file(f, "", 0);
    capture_begin(&c);
    assert_int_equal(hcnn_cifar10_load(&ds, files, 1), HCNN_EFORMAT);
    capture_end(&c, f, NULL);

    write_cifar(f, 4, 0, 2);
    capture_begin(&c);
    assert_int_equal(hcnn_cifar10_load(&ds, files, 1), HCNN_EFORMAT);
    capture_end(&c, f, "label 10 at index 2 is out of range (expected < 10)", NULL);

    const char *missing = tpath(state, "nope.bin");
    const char *files2[2] = {tpath(state, "cifbad.bin"), missing};
    write_cifar(files2[0], 1, 0, -1);
    capture_begin(&c);
    assert_int_equal(hcnn_cifar10_load(&ds, files2, 2), HCNN_EIO);
    capture_end(&c, missing, NULL);
    assert_null(ds.images);
}

/* ---- dataset_open ---------------------------------------------------------- */

static const char *mnist_dir(void **state)
{
    const char *dir = tpath(state, "mnist");
    if (mkdir(dir, 0700) != 0)
        return dir; /* made by an earlier test */
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/train-images-idx3-ubyte", dir);
    snprintf(b, sizeof b, "%s/train-labels-idx1-ubyte.gz", dir);
    write_idx_pair(a, b, 50, 28, 28, 0);
    snprintf(b, sizeof b, "%s/train-labels-idx1-ubyte", dir);
    write_idx_pair(a, b, 50, 28, 28, 0);
    /* a raw file wins over the .gz one: make the .gz one invalid */
    snprintf(b, sizeof b, "%s/train-labels-idx1-ubyte.gz", dir);
    write_file(b, "junk", 4);
    snprintf(a, sizeof a, "%s/t10k-images-idx3-ubyte.gz", dir);
    snprintf(b, sizeof b, "%s/t10k-labels-idx1-ubyte.gz", dir);
    write_idx_pair(a, b, 20, 28, 28, 1);
    return dir;
}

static void test_open_mnist(void **state)
{
    hcnn_config cfg;
    base_config(&cfg, "mnist", mnist_dir(state), 1, 28, 28);
    hcnn_dataset tr, te;
    assert_int_equal(hcnn_dataset_open(&cfg, &tr, &te), HCNN_OK);
    assert_int_equal(tr.n, 50);
    assert_int_equal(te.n, 20);
    assert_string_equal(tr.name, "mnist");
    assert_float_equal(tr.mean[0], 0.1307f, 1e-6f);
    assert_float_equal(te.std[0], 0.3081f, 1e-6f);
    assert_int_equal(tr.augment_default, 0);
    assert_int_equal(te.images[784 * 3 + 5], (7 * 3 + 3 * 5) & 255);
    hcnn_dataset_free(&tr);
    hcnn_dataset_free(&te);

    snprintf(cfg.dataset, sizeof cfg.dataset, "fashion_mnist");
    cfg.train_limit = 7;
    cfg.test_limit = 100; /* larger than the set: unchanged */
    assert_int_equal(hcnn_dataset_open(&cfg, &tr, &te), HCNN_OK);
    assert_int_equal(tr.n, 7);
    assert_int_equal(te.n, 20);
    assert_float_equal(tr.mean[0], 0.2860f, 1e-6f);
    assert_float_equal(tr.std[0], 0.3530f, 1e-6f);
    hcnn_dataset_limit(&te, 0);
    assert_int_equal(te.n, 20);
    hcnn_dataset_limit(&te, 3);
    assert_int_equal(te.n, 3);
    hcnn_dataset_free(&tr);
    hcnn_dataset_free(&te);
}

static void test_open_errors(void **state)
{
    hcnn_config cfg;
    hcnn_dataset tr, te;
    capture c;

    base_config(&cfg, "mnist", mnist_dir(state), 3, 32, 32);
    capture_begin(&c);
    assert_int_equal(hcnn_dataset_open(&cfg, &tr, &te), HCNN_EINVAL);
    capture_end(&c, "test.yaml", "3x32x32", "1x28x28", "mnist", NULL);
    assert_null(tr.images);
    assert_null(te.images);

    cfg.model.in_c = 1;
    cfg.model.in_h = cfg.model.in_w = 28;
    cfg.model.classes = 12;
    capture_begin(&c);
    assert_int_equal(hcnn_dataset_open(&cfg, &tr, &te), HCNN_EINVAL);
    capture_end(&c, "test.yaml", "12 classes", "10 classes", NULL);

    const char *empty = tpath(state, "empty-dir");
    mkdir(empty, 0700);
    base_config(&cfg, "fashion_mnist", empty, 1, 28, 28);
    capture_begin(&c);
    assert_int_equal(hcnn_dataset_open(&cfg, &tr, &te), HCNN_EIO);
    capture_end(&c, empty, "train-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "scripts/fetch-data.sh", NULL);

    base_config(&cfg, "cifar10", empty, 3, 32, 32);
    capture_begin(&c);
    assert_int_equal(hcnn_dataset_open(&cfg, &tr, &te), HCNN_EIO);
    capture_end(&c, empty, "data_batch_1.bin", "test_batch.bin", "binary", NULL);

    base_config(&cfg, "imagenet", empty, 3, 32, 32);
    capture_begin(&c);
    assert_int_equal(hcnn_dataset_open(&cfg, &tr, &te), HCNN_EINVAL);
    capture_end(&c, "imagenet", "test.yaml", NULL);
}

static void test_open_cifar_subdir(void **state)
{
    const char *dir = tpath(state, "cifar");
    const char *sub = tpath(state, "cifar/cifar-10-batches-bin");
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(mkdir(sub, 0700), 0);
    for (int i = 1; i <= 5; i++)
        write_cifar(tpath(state, "cifar/cifar-10-batches-bin/data_batch_%d.bin", i), 2, 10 * i, -1);
    write_cifar(tpath(state, "cifar/cifar-10-batches-bin/test_batch.bin"), 3, 0, -1);
    hcnn_config cfg;
    base_config(&cfg, "cifar10", dir, 3, 32, 32);
    hcnn_dataset tr, te;
    assert_int_equal(hcnn_dataset_open(&cfg, &tr, &te), HCNN_OK);
    assert_int_equal(tr.n, 10);
    assert_int_equal(te.n, 3);
    assert_int_equal(tr.augment_default, 1);
    assert_int_equal(tr.images[3072 * 2], (20 + 0) & 255); /* data_batch_2, record 0 */
    hcnn_dataset_free(&tr);
    hcnn_dataset_free(&te);
}

/* ---- synthetic --------------------------------------------------------------- */

static void test_synthetic(void **state)
{
    (void)state;
    hcnn_config cfg;
    base_config(&cfg, "synthetic", "", 3, 8, 8);
    hcnn_dataset tr, te, tr2;
    assert_int_equal(hcnn_dataset_open(&cfg, &tr, &te), HCNN_OK);
    assert_int_equal(tr.n, 200);
    assert_int_equal(te.n, 100);
    assert_int_equal(tr.c, 3);
    assert_int_equal(te.h, 8);
    assert_float_equal(tr.mean[2], 0.5f, 1e-6f);
    assert_float_equal(tr.std[0], 0.25f, 1e-6f);
    const size_t chw = 3 * 8 * 8;

    /* deterministic; and hcnn_synthetic_make is split 0 */
    assert_int_equal(hcnn_synthetic_make(&tr2, 200, 3, 8, 8, 10, 42), HCNN_OK);
    assert_memory_equal(tr.images, tr2.images, 200 * chw);
    assert_memory_equal(tr.labels, tr2.labels, 200);
    hcnn_dataset_free(&tr2);
    assert_int_equal(hcnn_synthetic_make(&tr2, 200, 3, 8, 8, 10, 43), HCNN_OK);
    assert_memory_not_equal(tr.images, tr2.images, 200 * chw);
    hcnn_dataset_free(&tr2);

    /* test != train, but drawn from the same prototypes: a nearest class
     * mean classifier built on train classifies test almost perfectly */
    assert_memory_not_equal(tr.images, te.images, 100 * chw);
    double mean[10][3 * 8 * 8] = {{0}};
    int count[10] = {0};
    for (int i = 0; i < tr.n; i++) {
        count[tr.labels[i]]++;
        for (size_t k = 0; k < chw; k++)
            mean[tr.labels[i]][k] += tr.images[i * chw + k];
    }
    for (int l = 0; l < 10; l++) {
        assert_true(count[l] > 0);
        for (size_t k = 0; k < chw; k++)
            mean[l][k] /= count[l];
    }
    int correct = 0;
    for (int i = 0; i < te.n; i++) {
        int best = -1;
        double bestd = 0;
        for (int l = 0; l < 10; l++) {
            double d = 0;
            for (size_t k = 0; k < chw; k++) {
                double e = te.images[i * chw + k] - mean[l][k];
                d += e * e;
            }
            if (best < 0 || d < bestd) {
                best = l;
                bestd = d;
            }
        }
        correct += best == te.labels[i];
    }
    assert_true(correct >= 98);
    hcnn_dataset_free(&tr);
    hcnn_dataset_free(&te);
}

/* ---- permutation ------------------------------------------------------------- */

static void test_permutation(void **state)
{
    (void)state;
    enum { N = 1000 };
    uint32_t a[N], b[N], c[N];
    hcnn_epoch_permutation(a, N, 7, 0, 0);
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(a[i], i);
    hcnn_epoch_permutation(a, N, 7, 3, 1);
    hcnn_epoch_permutation(b, N, 7, 3, 1);
    assert_memory_equal(a, b, sizeof a);
    char seen[N] = {0};
    int moved = 0;
    for (int i = 0; i < N; i++) {
        assert_true(a[i] < N);
        assert_int_equal(seen[a[i]], 0);
        seen[a[i]] = 1;
        moved += a[i] != (uint32_t)i;
    }
    assert_true(moved > N / 2);
    hcnn_epoch_permutation(c, N, 7, 4, 1);
    assert_memory_not_equal(a, c, sizeof a);
    hcnn_epoch_permutation(c, N, 8, 3, 1);
    assert_memory_not_equal(a, c, sizeof a);
    hcnn_epoch_permutation(c, 1, 8, 3, 1);
    assert_int_equal(c[0], 0);
    hcnn_epoch_permutation(c, 0, 8, 3, 1);
}

/* ---- batch assembly --------------------------------------------------------- */

static void test_assemble_normalise(void **state)
{
    (void)state;
    hcnn_dataset ds;
    make_ds(&ds, 20, 3, 5, 6, 1);
    uint32_t idx[4] = {7, 0, 19, 7};
    float x[4 * 90];
    int32_t y[4];
    hcnn_batch_assemble(&ds, idx, 4, 0, 1, 0, x, y, 1);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(y[i], ds.labels[idx[i]]);
        for (int ch = 0; ch < 3; ch++)
            for (int k = 0; k < 30; k++) {
                float v = ds.images[(size_t)idx[i] * 90 + ch * 30 + k];
                float want = (v / 255.0f - ds.mean[ch]) / ds.std[ch];
                assert_float_equal(x[i * 90 + ch * 30 + k], want, 1e-5f);
            }
    }
    hcnn_dataset_free(&ds);

    /* more than 3 channels: channels >= 3 use channel 0's mean/std */
    make_ds(&ds, 2, 5, 2, 2, 2);
    float x5[2 * 20];
    hcnn_batch_assemble(&ds, idx + 1, 1, 0, 1, 0, x5, y, 2);
    float v = ds.images[4 * 4];
    assert_float_equal(x5[16], (v / 255.0f - ds.mean[0]) / ds.std[0], 1e-5f);
    hcnn_dataset_free(&ds);
}

/* Which (dy, dx, flip) reproduces out from in, torchvision style: pad by
 * 4 with zero pixels, crop at offset, then flip.  Returns the count of
 * matching combinations and the last one found. */
static int find_augment(const hcnn_dataset *ds, int sample, const float *out, int *dy_, int *dx_, int *flip_)
{
    int c = ds->c, h = ds->h, w = ds->w, matches = 0;
    for (int flip = 0; flip < 2; flip++)
        for (int dy = -4; dy <= 4; dy++)
            for (int dx = -4; dx <= 4; dx++) {
                int ok = 1;
                for (int ch = 0; ch < c && ok; ch++)
                    for (int yy = 0; yy < h && ok; yy++)
                        for (int xx = 0; xx < w && ok; xx++) {
                            int cx = flip ? w - 1 - xx : xx; /* flip after crop */
                            int sy = yy + dy, sx = cx + dx;
                            int u = sy < 0 || sy >= h || sx < 0 || sx >= w
                                        ? 0
                                        : ds->images[(size_t)sample * c * h * w + (size_t)ch * h * w + sy * w + sx];
                            float want = ((float)u / 255.0f - ds->mean[ch]) / ds->std[ch];
                            ok = out[(size_t)ch * h * w + yy * w + xx] == want ||
                                 (out[(size_t)ch * h * w + yy * w + xx] - want) * (out[(size_t)ch * h * w + yy * w + xx] - want) < 1e-10f;
                        }
                if (ok) {
                    matches++;
                    *dy_ = dy;
                    *dx_ = dx;
                    *flip_ = flip;
                }
            }
    return matches;
}

static void test_assemble_augment(void **state)
{
    (void)state;
    enum { N = 64, C = 3, H = 9, W = 7, CHW = C * H * W };
    hcnn_dataset ds;
    make_ds(&ds, N, C, H, W, 3);
    uint32_t idx[N];
    hcnn_epoch_permutation(idx, N, 5, 0, 1);
    float *x1 = malloc(sizeof(float) * N * CHW), *x2 = malloc(sizeof(float) * N * CHW);
    float *x3 = malloc(sizeof(float) * N * CHW);
    int32_t y1[N], y2[N];
    assert_non_null(x1);
    assert_non_null(x2);
    assert_non_null(x3);
    hcnn_batch_assemble(&ds, idx, N, 1, 11, 2, x1, y1, 1);
    hcnn_batch_assemble(&ds, idx, N, 1, 11, 2, x2, y2, 2);
    assert_memory_equal(x1, x2, sizeof(float) * N * CHW);
    assert_memory_equal(y1, y2, sizeof y1);
    /* the same sample gets the same draw wherever it sits in the batch */
    uint32_t rev[N];
    for (int i = 0; i < N; i++)
        rev[i] = idx[N - 1 - i];
    hcnn_batch_assemble(&ds, rev, N, 1, 11, 2, x2, y2, 2);
    for (int i = 0; i < N; i++)
        assert_memory_equal(x1 + (size_t)i * CHW, x2 + (size_t)(N - 1 - i) * CHW, sizeof(float) * CHW);

    int flips = 0, shifted = 0, ident = 0;
    for (int i = 0; i < N; i++) {
        int dy, dx, flip;
        assert_int_equal(find_augment(&ds, (int)idx[i], x1 + (size_t)i * CHW, &dy, &dx, &flip), 1);
        flips += flip;
        shifted += dx != 0 || dy != 0;
        ident += !flip && dx == 0 && dy == 0;
    }
    assert_true(flips > 10 && flips < N - 10);
    assert_true(shifted > N / 2);
    (void)ident;

    /* another epoch draws differently; augment=0 is the plain decode */
    hcnn_batch_assemble(&ds, idx, N, 1, 11, 3, x3, y2, 1);
    assert_memory_not_equal(x1, x3, sizeof(float) * N * CHW);
    hcnn_batch_assemble(&ds, idx, N, 0, 11, 3, x3, y2, 1);
    for (int i = 0; i < N; i++) {
        int dy, dx, flip;
        assert_int_equal(find_augment(&ds, (int)idx[i], x3 + (size_t)i * CHW, &dy, &dx, &flip), 1);
        assert_true(dy == 0 && dx == 0 && flip == 0);
    }
    free(x1);
    free(x2);
    free(x3);
    hcnn_dataset_free(&ds);

    /* images narrower than the padding: every output is still a valid
     * crop (several may match when most of it is padding) */
    make_ds(&ds, 32, 2, 3, 2, 4);
    hcnn_epoch_permutation(idx, 32, 5, 0, 0);
    float small[32 * 12];
    hcnn_batch_assemble(&ds, idx, 32, 1, 11, 0, small, y1, 2);
    for (int i = 0; i < 32; i++) {
        int dy, dx, flip;
        assert_true(find_augment(&ds, i, small + i * 12, &dy, &dx, &flip) >= 1);
    }
    hcnn_dataset_free(&ds);
}

/* ---- loader ------------------------------------------------------------------ */

/* Samples are identified by their single pixel (= index), decoded with
 * mean 0, std 1/255 so that x == index. */
static void id_dataset(hcnn_dataset *ds, int n)
{
    make_ds(ds, n, 1, 1, 1, 0);
    for (int i = 0; i < n; i++)
        ds->images[i] = (uint8_t)i;
    ds->mean[0] = 0.0f;
    ds->std[0] = 1.0f / 255.0f;
}

static void run_loader(int nranks, int batch, int nsamples, int prefetch_threads)
{
    hcnn_dataset ds;
    id_dataset(&ds, 200);
    uint32_t perm[200];
    hcnn_loader ld[8];
    for (int r = 0; r < nranks; r++)
        assert_int_equal(hcnn_loader_init(&ld[r], NULL, &ds, batch, r, nranks, 0, 1, prefetch_threads), HCNN_OK);
    for (int epoch = 0; epoch < 3; epoch++) {
        hcnn_epoch_permutation(perm, ds.n, 9, epoch, 1);
        int seen[200] = {0};
        int expect_batches = (nsamples + batch - 1) / batch;
        for (int r = 0; r < nranks; r++) {
            hcnn_loader_begin_epoch(&ld[r], perm, nsamples, epoch);
            float *x;
            int32_t *y;
            int n, gn, first, b = 0;
            double wait;
            while (hcnn_loader_next(&ld[r], &x, &y, &n, &gn, &first, &wait)) {
                int want_gn = nsamples - b * batch < batch ? nsamples - b * batch : batch;
                int lo, hi;
                hcnn_shard(want_gn, r, nranks, &lo, &hi);
                assert_int_equal(gn, want_gn);
                assert_int_equal(n, hi - lo);
                assert_int_equal(first, b * batch + lo);
                assert_true(wait >= 0.0);
                for (int k = 0; k < n; k++) {
                    int id = (int)(x[k] + 0.5f);
                    assert_int_equal(id, (int)perm[first + k]);
                    assert_int_equal(y[k], ds.labels[id]);
                    seen[id]++;
                }
                b++;
            }
            assert_int_equal(b, expect_batches);
            assert_int_equal(ld[r].nbatches, expect_batches);
        }
        /* every sample of the epoch exactly once, nothing else */
        int total = 0;
        for (int i = 0; i < 200; i++)
            total += seen[i];
        assert_int_equal(total, nsamples);
        for (int i = 0; i < nsamples; i++)
            assert_int_equal(seen[perm[i]], 1);
    }
    for (int r = 0; r < nranks; r++)
        hcnn_loader_free(&ld[r]);
    hcnn_dataset_free(&ds);
}

static void test_loader_shards(void **state)
{
    (void)state;
    run_loader(3, 10, 23, 1);  /* batches 10, 10, 3; shards 3/3/4 and 1/1/1 */
    run_loader(3, 16, 200, 2); /* 13 batches, last of 8 */
    run_loader(4, 10, 23, 1);  /* last batch of 3 over 4 ranks: one empty shard */
    run_loader(1, 7, 7, 2);
    run_loader(8, 5, 61, 1);   /* most batches leave 3 ranks empty */
    /* no background thread: next() assembles each batch itself */
    run_loader(3, 10, 23, 0);
    run_loader(8, 5, 61, 0);
}

/* Abandoned, empty and full epochs, with a prefetch thread (prefetch > 0)
 * or without (0). */
static void loader_restart(int prefetch)
{
    hcnn_dataset ds;
    id_dataset(&ds, 100);
    uint32_t perm[100];
    hcnn_epoch_permutation(perm, 100, 1, 0, 1);
    hcnn_loader ld;
    assert_int_equal(hcnn_loader_init(&ld, NULL, &ds, 8, 0, 1, 1, 3, prefetch), HCNN_OK);
    assert_int_equal(ld.thread_started, prefetch > 0);
    float *x;
    int32_t *y;
    int n, gn, first;
    double wait;
    /* before any epoch: nothing */
    assert_int_equal(hcnn_loader_next(&ld, &x, &y, &n, &gn, &first, &wait), 0);
    /* abandon epochs at various points (prefetch possibly running) */
    for (int stop = 0; stop < 4; stop++) {
        hcnn_loader_begin_epoch(&ld, perm, 100, stop);
        for (int b = 0; b < stop; b++)
            assert_int_equal(hcnn_loader_next(&ld, &x, &y, &n, &gn, &first, &wait), 1);
    }
    /* empty epoch */
    hcnn_loader_begin_epoch(&ld, perm, 0, 9);
    assert_int_equal(hcnn_loader_next(&ld, &x, &y, &n, &gn, &first, &wait), 0);
    /* a full epoch still works and matches a direct assembly */
    hcnn_loader_begin_epoch(&ld, perm, 100, 5);
    float ref[8];
    int32_t yref[8];
    int b = 0;
    while (hcnn_loader_next(&ld, &x, &y, &n, &gn, &first, &wait)) {
        hcnn_batch_assemble(&ds, perm + first, n, 1, 3, 5, ref, yref, 1);
        assert_memory_equal(x, ref, sizeof(float) * (size_t)n);
        assert_memory_equal(y, yref, sizeof(int32_t) * (size_t)n);
        b++;
    }
    assert_int_equal(b, 13);
    assert_int_equal(hcnn_loader_next(&ld, &x, &y, &n, &gn, &first, &wait), 0);
    /* free while a prefetch may be running */
    hcnn_loader_begin_epoch(&ld, perm, 100, 6);
    hcnn_loader_free(&ld);
    hcnn_loader_free(&ld); /* idempotent */

    capture c;
    capture_begin(&c);
    assert_int_equal(hcnn_loader_init(&ld, NULL, &ds, 0, 0, 1, 0, 1, 1), HCNN_EINVAL);
    capture_end(&c, "batch 0", NULL);
    capture_begin(&c);
    assert_int_equal(hcnn_loader_init(&ld, NULL, &ds, 4, 3, 3, 0, 1, 1), HCNN_EINVAL);
    capture_end(&c, "rank 3 of 3", NULL);
    hcnn_dataset_free(&ds);
}

static void test_loader_restart(void **state)
{
    (void)state;
    loader_restart(2);
    loader_restart(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idx_raw),
        cmocka_unit_test(test_idx_gz_equals_raw),
        cmocka_unit_test(test_idx_bad_magic),
        cmocka_unit_test(test_idx_truncated),
        cmocka_unit_test(test_idx_gz_trailing),
        cmocka_unit_test(test_idx_count_mismatch),
        cmocka_unit_test(test_idx_label_range),
        cmocka_unit_test(test_idx_empty_missing_huge),
        cmocka_unit_test(test_cifar_ok),
        cmocka_unit_test(test_cifar_bad),
        cmocka_unit_test(test_open_mnist),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_open_cifar_subdir),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_permutation),
        cmocka_unit_test(test_assemble_normalise),
        cmocka_unit_test(test_assemble_augment),
        cmocka_unit_test(test_loader_shards),
        cmocka_unit_test(test_loader_restart),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
