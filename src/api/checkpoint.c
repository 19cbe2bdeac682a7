/* Checkpoints as arrays (include/hcnn/hcnn.h): what `hcnn export` writes
 * as .npy files, in memory, and `hcnn import`'s validation for the way
 * back (src/io/export.c does both for files). */
#include <stdlib.h>
#include <string.h>

#include "hcnn/checkpoint.h"
#include "hcnn/export.h"
#include "api.h"

struct hcnn_checkpoint {
    hcnn_array *arrays;
    int n;
    char (*names)[HCNN_TENSOR_NAME_MAX + 32];
    void *data; /* every array's data, each 64-byte aligned */
    char *meta; /* the META section's text */
};

void hcnn_checkpoint_free(hcnn_checkpoint *c)
{
    if (!c)
        return;
    free(c->arrays);
    free(c->names);
    hcnn_free(c->data);
    free(c->meta);
    free(c);
}

/* The META section's text, from the verified file image (the layout:
 * include/hcnn/checkpoint.h): "" if it has none. */
static char *meta_text(const hcnn_ckpt_file *f)
{
    size_t off = 20; /* magic, version, byte-order mark, section count */
    uint32_t nsec = 0;
    if (f->size >= off)
        memcpy(&nsec, f->image + 16, 4);
    for (uint32_t k = 0; k < nsec && off + 16 <= f->size; k++) {
        uint32_t kind;
        uint64_t nbytes;
        memcpy(&kind, f->image + off, 4);
        memcpy(&nbytes, f->image + off + 8, 8);
        if (nbytes > f->size - off - 16)
            break;
        if (kind == 1) {
            char *t = malloc(nbytes + 1);
            if (t) {
                memcpy(t, f->image + off + 16, nbytes);
                t[nbytes] = '\0';
            }
            return t;
        }
        off += 16 + nbytes + 4;
    }
    return calloc(1, 1);
}

static size_t aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }

static int checkpoint_read_call(const char *path, hcnn_checkpoint **out)
{
    if (!out)
        return hcnn_error("hcnn_checkpoint_read: out is NULL");
    *out = NULL;
    if (!path)
        return hcnn_error("hcnn_checkpoint_read: path is NULL");
    hcnn_ckpt_file f;
    int rc = hcnn_ckpt_read(path, &f);
    if (rc)
        return rc;
    if ((rc = hcnn_export_check(&f, path))) {
        hcnn_ckpt_close(&f);
        return rc;
    }
    /* what export writes: parameters and statistics, each layer's
     * num_batches_tracked after its statistics */
    char prefix[HCNN_TENSOR_NAME_MAX];
    int n = 0;
    size_t bytes = 0;
    for (int k = 0; k < f.ntensors; k++) {
        const hcnn_ckpt_tensor *t = &f.tensors[k];
        if (t->role != 0 && t->role != 1)
            continue; /* momentum: optimiser state, not the model */
        n++, bytes += aligned(t->count * sizeof(float));
        if (hcnn_export_ends_bn_layer(&f, k, prefix, sizeof prefix))
            n++, bytes += 64;
    }
    hcnn_checkpoint *c = calloc(1, sizeof *c);
    if (c) {
        c->arrays = calloc((size_t)n + 1, sizeof *c->arrays);
        c->names = calloc((size_t)n + 1, sizeof *c->names);
        c->data = hcnn_alloc(bytes + 64, "a checkpoint's arrays");
        c->meta = meta_text(&f);
    }
    if (!c || !c->arrays || !c->names || !c->data || !c->meta) {
        hcnn_checkpoint_free(c);
        hcnn_ckpt_close(&f);
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the arrays of %s", path);
    }
    char *at = c->data;
    const int64_t step = f.meta.step;
    for (int k = 0; k < f.ntensors; k++) {
        const hcnn_ckpt_tensor *t = &f.tensors[k];
        if (t->role != 0 && t->role != 1)
            continue;
        hcnn_array *a = &c->arrays[c->n];
        snprintf(c->names[c->n], sizeof c->names[0], "%s", t->name);
        a->name = c->names[c->n++];
        a->dtype = HCNN_DTYPE_F32;
        a->ndim = t->ndim;
        for (int d = 0; d < t->ndim && d < 4; d++)
            a->dims[d] = t->dims[d];
        memcpy(at, t->data, t->count * sizeof(float)); /* unaligned in the file image */
        a->data = at;
        at += aligned(t->count * sizeof(float));
        if (hcnn_export_ends_bn_layer(&f, k, prefix, sizeof prefix)) {
            a = &c->arrays[c->n];
            snprintf(c->names[c->n], sizeof c->names[0], "%s.num_batches_tracked", prefix);
            a->name = c->names[c->n++];
            a->dtype = HCNN_DTYPE_I64;
            a->ndim = 0;
            memcpy(at, &step, sizeof step);
            a->data = at;
            at += 64;
        }
    }
    hcnn_ckpt_close(&f);
    *out = c;
    return HCNN_OK;
}

int hcnn_checkpoint_read(const char *path, hcnn_checkpoint **out)
{
    API_BEGIN((void)0);
    return API_END(checkpoint_read_call(path, out));
}

int hcnn_checkpoint_count(const hcnn_checkpoint *c) { return c ? c->n : 0; }

static int checkpoint_array_call(const hcnn_checkpoint *c, int i, hcnn_array *out)
{
    if (!c || !out || i < 0 || i >= c->n)
        return hcnn_error("hcnn_checkpoint_array: index %d (expected 0 to %d)", i,
                                  c ? c->n - 1 : -1);
    *out = c->arrays[i];
    return HCNN_OK;
}

int hcnn_checkpoint_array(const hcnn_checkpoint *c, int i, hcnn_array *out)
{
    API_BEGIN((void)0);
    return API_END(checkpoint_array_call(c, i, out));
}

const char *hcnn_checkpoint_meta(const hcnn_checkpoint *c) { return c ? c->meta : ""; }

static int checkpoint_write_call(const hcnn_session *s, const char *path, const hcnn_array *arrays,
                                 int n)
{
    if (!s || !path)
        return hcnn_error("hcnn_checkpoint_write: %s is NULL",
                                  s ? "the path" : "the session");
    return hcnn_import_arrays(arrays, n, s->cfg, path);
}

int hcnn_checkpoint_write(const hcnn_session *s, const char *path, const hcnn_array *arrays,
                          int n)
{
    API_BEGIN((void)0);
    return API_END(checkpoint_write_call(s, path, arrays, n));
}
