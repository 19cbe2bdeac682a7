/* Fuzz target: checkpoints (src/io/checkpoint.c): hcnn_ckpt_read (the
 * container: magic, sections, CRCs, META text, the tensor index), then
 * hcnn_ckpt_load against the small model of tiny.yaml (hash, names,
 * shapes, upload into the network and momentum).
 *
 * Input: one mode byte, then the checkpoint file.  Mode bit 0: the harness
 * recomputes the CRC32 of every section it can delimit before writing the
 * file, so that mutations get past the CRC checks into the META and
 * TENSORS parsers; without it the bytes are written as they are (the CRC
 * checks themselves).  Seeds are checkpoints of that model written by
 * `hcnn train` and `hcnn import` (make-corpus.sh). */
#include "fuzz_common.h"

#include "hcnn/checkpoint.h"
#include "fuzz_tiny.h"

static char fuzz_ckpt_file[300];
static hcnn_config fuzz_cfg;
static hcnn_net fuzz_net;
static float *fuzz_momentum;
static volatile float fuzz_sink;
static unsigned char *fuzz_buf;
static size_t fuzz_cap;

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Make the stored CRC32 of each section match its payload (file layout in
 * include/hcnn/checkpoint.h), as far as the section headers hold. */
static void fix_crcs(unsigned char *p, size_t n)
{
    if (n < 20)
        return;
    uint64_t nsec = le(p + 16, 4);
    size_t off = 20;
    for (uint64_t s = 0; s < nsec && n - off >= 16; s++) {
        uint64_t len = le(p + off + 8, 8);
        off += 16;
        if (len > n - off || n - off - len < 4)
            return;
        uint32_t c = hcnn_crc32(0, p + off, (size_t)len);
        off += (size_t)len;
        for (int i = 0; i < 4; i++)
            p[off + i] = (unsigned char)(c >> (8 * i));
        off += 4;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_tiny_net(&fuzz_cfg, &fuzz_net);
    fuzz_momentum = hcnn_calloc(fuzz_net.nparams * sizeof(float) + 4, "fuzz momentum");
    if (!fuzz_momentum)
        abort();
    fuzz_path(fuzz_ckpt_file, sizeof fuzz_ckpt_file, "fuzz.hcnn");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int fix = data[0] & 1;
    data++, size--;
    if (size > fuzz_cap) {
        free(fuzz_buf);
        fuzz_cap = size;
        if (!(fuzz_buf = malloc(fuzz_cap)))
            abort();
    }
    if (size)
        memcpy(fuzz_buf, data, size);
    if (fix)
        fix_crcs(fuzz_buf, size);
    fuzz_write(fuzz_ckpt_file, fuzz_buf, size);
    hcnn_ckpt_file f;
    if (hcnn_ckpt_read(fuzz_ckpt_file, &f) == HCNN_OK) {
        /* every indexed tensor must lie inside the file image */
        float sum = 0.0f;
        for (int k = 0; k < f.ntensors; k++) {
            const hcnn_ckpt_tensor *t = &f.tensors[k];
            const unsigned char *p = (const unsigned char *)t->data;
            if (t->ndim < 0 || t->ndim > 4 || p < f.image ||
                (size_t)(p - f.image) + t->count * sizeof(float) > f.size)
                abort();
            /* the shape holds exactly count elements, without wrapping around */
            uint64_t prod = 1;
            for (int d = 0; d < t->ndim; d++) {
                if (t->dims[d] < 0 || (t->dims[d] && prod > UINT64_MAX / (uint64_t)t->dims[d])) {
                    fprintf(stderr, "fuzz_ckpt: tensor %s: dimension %d is %d\n", t->name, d,
                            t->dims[d]);
                    abort();
                }
                prod *= (uint64_t)t->dims[d];
            }
            if (prod != t->count)
                abort();
            for (size_t i = 0; i < t->count; i++) {
                float v;
                memcpy(&v, p + i * sizeof v, sizeof v);
                sum += v;
            }
        }
        fuzz_sink = sum;
        (void)hcnn_ckpt_role_name(f.ntensors ? f.tensors[0].role : 0);
        hcnn_ckpt_close(&f);
    }
    hcnn_ckpt_meta meta;
    (void)hcnn_ckpt_load(fuzz_ckpt_file, &fuzz_net, fuzz_momentum, &meta);
    return 0;
}
