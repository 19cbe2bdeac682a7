/* Fuzz target: IDX files (src/data/idx.c, hcnn_idx_load), raw and gzip'd.
 *
 * Input: one mode byte, then the file.  Mode bit 0: the file is the labels
 * file (else the images file); the other file is a fixed valid one (one
 * 2x2 image / one label).  Bit 1: the file is gzip-compressed by the
 * harness first (the IDX header checks through the gzip path); bit 2 (with
 * bit 1): one byte of trailing garbage follows the gzip stream, which must
 * be refused as trailing bytes of a raw file are.  Without bit 1 the bytes
 * are written as they are: gzip'd seeds in the corpus reach zlib directly.
 * Errors are expected; a crash, leak, sanitizer report, or a load that
 * succeeds with garbage after the stream is a finding. */
#include "fuzz_common.h"

#include <zlib.h>

#include "hcnn/common.h"
#include "hcnn/data.h"

static char fuzz_images[300], fuzz_labels[300];
static unsigned char *gzbuf;
static size_t gzcap;
static volatile unsigned fuzz_sink;

/* gzip-compress in[0, n) into gzbuf; returns the compressed length */
static size_t gzip_into(const uint8_t *in, size_t n)
{
    size_t need = n + n / 8 + 128;
    if (need > gzcap) {
        free(gzbuf);
        gzbuf = malloc(need);
        gzcap = need;
        if (!gzbuf)
            abort();
    }
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        abort();
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = gzbuf;
    z.avail_out = (uInt)gzcap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        abort();
    size_t out = gzcap - z.avail_out;
    deflateEnd(&z);
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int labels_role = data[0] & 1, compress = data[0] & 2, garbage = compress && (data[0] & 4);
    data++, size--;
    if (!fuzz_images[0]) {
        fuzz_path(fuzz_images, sizeof fuzz_images, "images.idx");
        fuzz_path(fuzz_labels, sizeof fuzz_labels, "labels.idx");
    }
    static const uint8_t valid_images[] = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 2,
                                           1, 2, 3, 4};
    static const uint8_t valid_labels[] = {0, 0, 8, 1, 0, 0, 0, 1, 7};
    const char *target = labels_role ? fuzz_labels : fuzz_images;
    if (labels_role)
        fuzz_write(fuzz_images, valid_images, sizeof valid_images);
    else
        fuzz_write(fuzz_labels, valid_labels, sizeof valid_labels);
    if (compress) {
        size_t n = gzip_into(data, size);
        if (garbage)
            gzbuf[n++] = 'X'; /* gzip_into leaves room */
        fuzz_write(target, gzbuf, n);
    } else {
        fuzz_write(target, data, size);
    }

    hcnn_dataset ds;
    int rc = hcnn_idx_load(&ds, fuzz_images, fuzz_labels, 10);
    if (rc == HCNN_OK) {
        if (garbage) {
            fprintf(stderr, "fuzz_idx: trailing garbage after the gzip stream was accepted\n");
            abort();
        }
        /* touch everything the loader claims to have read */
        size_t npix = (size_t)ds.n * (size_t)ds.c * (size_t)ds.h * (size_t)ds.w;
        unsigned sum = 0;
        for (size_t i = 0; i < npix; i++)
            sum += ds.images[i];
        for (int i = 0; i < ds.n; i++)
            if (ds.labels[i] >= ds.classes)
                abort();
        if (ds.n < 1 || ds.h < 1 || ds.w < 1)
            abort();
        fuzz_sink = sum;
        hcnn_dataset_free(&ds);
    }
    return 0;
}
