/* Checkpoint <-> NumPy .npy export and import (layout in
 * include/hcnn/export.h; the .npy format in src/io/npy.c). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/backend.h"
#include "hcnn/checkpoint.h"
#include "hcnn/common.h"
#include "hcnn/export.h"
#include "hcnn/files.h"
#include "hcnn/net.h"
#include "npy.h"

enum { ROLE_PARAM = 0, ROLE_STATE = 1 };

/* dir + '/' + tensor name + ".num_batches_tracked.npy" (the temporary name: hcnn_afile) */
#define PATHBUF (HCNN_PATH_MAX + HCNN_TENSOR_NAME_MAX + 64)

/* ---- names, shapes, paths --------------------------------------------- */

/* Tensor names become file names: allow only what hcnn and PyTorch use
 * ([A-Za-z0-9_.-], not starting with '.'), so a crafted checkpoint cannot
 * write outside the directory or break the space-separated manifest. */
static int safe_name(const char *s)
{
    if (!s[0] || s[0] == '.')
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return 0;
    }
    return 1;
}

static int ends_with(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len >= n && memcmp(s + len - n, suffix, n) == 0;
}

static int join_path(char *buf, const char *dir, const char *name, const char *suffix)
{
    int n = snprintf(buf, PATHBUF, "%s/%s%s", dir, name, suffix);
    if (n < 0 || n >= PATHBUF - 32) /* leave room for the temporary suffix */
        return hcnn_error_code(HCNN_EIO, "%s/%s%s: path too long", dir, name, suffix);
    return HCNN_OK;
}

typedef struct tbuf {
    char *p;
    size_t n, cap;
    int failed;
} tbuf;

static void tb_printf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tb_printf(tbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->failed = 1;
            return;
        }
        if (b->p && (size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap - b->n <= (size_t)w)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->failed = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
}

/* Manifest shape: "6x1x5x5", "6", or "scalar". */
static void manifest_line(tbuf *b, const char *name, const char *dtype, int ndim, const int *dims)
{
    tb_printf(b, "%s %s ", name, dtype);
    if (ndim == 0)
        tb_printf(b, "scalar");
    for (int d = 0; d < ndim; d++)
        tb_printf(b, "%s%d", d ? "x" : "", dims[d]);
    tb_printf(b, "\n");
}

/* If checkpoint tensor k is the last batch-norm statistic of its layer
 * (a layer that has a running_mean), write the layer prefix to prefix and
 * return 1: num_batches_tracked goes right after it, where PyTorch's
 * state_dict has it (weight, bias, running_mean, running_var, num_...). */
int hcnn_export_ends_bn_layer(const hcnn_ckpt_file *f, int k, char *prefix, size_t cap)
{
    const char *name = f->tensors[k].name;
    const char *dot = strrchr(name, '.');
    if (f->tensors[k].role != ROLE_STATE || !dot || (size_t)(dot - name) >= cap)
        return 0;
    size_t pl = (size_t)(dot - name);
    memcpy(prefix, name, pl);
    prefix[pl] = '\0';
    int has_mean = 0;
    for (int j = 0; j < f->ntensors; j++) {
        const hcnn_ckpt_tensor *t = &f->tensors[j];
        if (t->role != ROLE_STATE || strncmp(t->name, prefix, pl) || t->name[pl] != '.' ||
            strchr(t->name + pl + 1, '.'))
            continue; /* not a statistic of this layer */
        if (j > k)
            return 0;
        has_mean |= !strcmp(t->name + pl + 1, "running_mean");
    }
    return has_mean;
}

int hcnn_export_check(const hcnn_ckpt_file *f, const char *path)
{
    for (int k = 0; k < f->ntensors; k++) {
        const hcnn_ckpt_tensor *t = &f->tensors[k];
        if (t->role != ROLE_PARAM && t->role != ROLE_STATE)
            continue;
        if (!safe_name(t->name)) {
            return hcnn_error_code(HCNN_EFORMAT,
                                   "%s: tensor name '%s' cannot be used as a file name "
                                   "(expected [A-Za-z0-9_.-], not starting with '.')",
                                   path, t->name);
        }
        for (int j = 0; j < k; j++)
            if ((f->tensors[j].role == ROLE_PARAM || f->tensors[j].role == ROLE_STATE) &&
                !strcmp(f->tensors[j].name, t->name))
                return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s appears twice", path,
                                       t->name);
        for (int d = 0; d < t->ndim; d++)
            if (t->dims[d] < 0)
                return hcnn_error_code(HCNN_EFORMAT, "%s: tensor %s has a negative dimension",
                                       path, t->name);
    }
    return HCNN_OK;
}

int hcnn_export_npy(const char *ckpt_path, const char *dir)
{
    hcnn_ckpt_file f;
    int rc = hcnn_ckpt_read(ckpt_path, &f);
    if (rc)
        return rc;
    tbuf manifest = {0};
    char path[PATHBUF], prefix[HCNN_TENSOR_NAME_MAX];

    /* validate every name first, so a bad checkpoint writes nothing */
    if ((rc = hcnn_export_check(&f, ckpt_path)))
        goto out;
    if ((rc = hcnn_mkdir_p_for(dir, "hcnn export's output directory")))
        goto out;
    const int64_t step = f.meta.step;
    for (int k = 0; k < f.ntensors; k++) {
        const hcnn_ckpt_tensor *t = &f.tensors[k];
        if (t->role != ROLE_PARAM && t->role != ROLE_STATE)
            continue; /* momentum is optimiser state, not part of the model */
        if ((rc = join_path(path, dir, t->name, ".npy")) ||
            (rc = hcnn_npy_write(path, HCNN_NPY_F32, t->ndim, t->dims, t->data, t->count)))
            goto out;
        manifest_line(&manifest, t->name, "float32", t->ndim, t->dims);
        if (hcnn_export_ends_bn_layer(&f, k, prefix, sizeof prefix)) {
            if ((rc = join_path(path, dir, prefix, ".num_batches_tracked.npy")) ||
                (rc = hcnn_npy_write(path, HCNN_NPY_I64, 0, NULL, &step, 1)))
                goto out;
            tb_printf(&manifest, "%s.num_batches_tracked int64 scalar\n", prefix);
        }
    }
    if (manifest.failed) {
        rc = hcnn_error_code(HCNN_ENOMEM, "cannot allocate the manifest of %s", dir);
        goto out;
    }
    /* the manifest last: its presence marks a complete export */
    if ((rc = join_path(path, dir, "manifest.txt", "")) ||
        (rc = hcnn_write_file(path, manifest.p ? manifest.p : "", manifest.n)))
        goto out;
out:
    free(manifest.p);
    hcnn_ckpt_close(&f);
    return rc;
}

static int check_entries(const char *dir, const hcnn_net *net, const char *cfg_path)
{
    DIR *d = opendir(dir);
    if (!d)
        return hcnn_error_code(HCNN_EIO, "cannot open directory %s: %s", dir, strerror(errno));
    char first[512] = "";
    int nbad = 0, first_npy = 0;
    struct dirent *e;
    for (errno = 0; (e = readdir(d)) != NULL; errno = 0) {
        const char *s = e->d_name;
        size_t len = strlen(s);
        if (!strcmp(s, ".") || !strcmp(s, "..") || !strcmp(s, "manifest.txt") ||
            ends_with(s, len, ".num_batches_tracked.npy"))
            continue;
        if (ends_with(s, len, ".npy") && hcnn_net_find_tensor(net, s, len - 4, -1))
            continue;
        if (nbad++ == 0 || strcmp(s, first) < 0) {
            snprintf(first, sizeof first, "%s", s);
            first_npy = ends_with(s, len, ".npy");
        }
    }
    int e_read = errno;
    closedir(d);
    if (e_read)
        return hcnn_error_code(HCNN_EIO, "cannot list directory %s: %s", dir, strerror(e_read));
    if (!nbad)
        return HCNN_OK;
    char more[64] = "";
    if (nbad > 1)
        snprintf(more, sizeof more, " (and %d more such file%s)", nbad - 1, nbad > 2 ? "s" : "");
    if (first_npy)
        return hcnn_error_code(HCNN_EFORMAT,
                               "%s/%s: tensor %.*s is not part of the model configured in %s%s",
                               dir, first, (int)(strlen(first) - 4), first, cfg_path, more);
    return hcnn_error_code(HCNN_EFORMAT,
                           "%s/%s is not part of the model configured in %s: the directory may "
                           "hold only the model's <tensor>.npy files, *.num_batches_tracked.npy "
                           "and manifest.txt%s",
                           dir, first, cfg_path, more);
}

/* Where an import's tensors come from: fill dst with tensor t (its count
 * of floats), checked as hcnn_npy_read checks a file (shape, dtype, finite
 * values), or fail after one message; owner names the model in messages. */
typedef int (*import_fill_fn)(void *arg, const hcnn_tensor_info *t, const char *owner,
                              float *dst, char *where, size_t where_cap);

/* hcnn import's core, whatever the source: every tensor of cfg's model
 * filled (where: the file or name it came from, for messages), running
 * variances >= 0, then the checkpoint written (epoch 0,
 * step 0, zero momentum, cfg's seed); nothing written unless all is valid. */
static int import_model(const hcnn_config *cfg, const char *out_ckpt,
                        int (*check)(void *arg, const hcnn_net *net), import_fill_fn fill,
                        void *arg)
{
    hcnn_net net;
    int rc = hcnn_net_create(&net, &cfg->model, hcnn_backend_cpu(), cfg->path);
    if (rc)
        return rc;
    float *params = NULL;
    char owner[HCNN_PATH_MAX + 32];
    snprintf(owner, sizeof owner, "the model configured in %s", cfg->path);
    for (int i = 0; i < net.ntensors; i++)
        if (!safe_name(net.tensors[i].name)) { /* config names are [A-Za-z0-9_.] already */
            rc = hcnn_error_code(HCNN_EINVAL, "%s: tensor name '%s' cannot be used as a file name",
                                 cfg->path, net.tensors[i].name);
            goto out;
        }
    if ((rc = check(arg, &net)))
        goto out;
    /* host buffers laid out like the network's; a fresh optimiser: zero
     * momentum, so training can start from the checkpoint */
    params = hcnn_calloc(sizeof(float) * (2 * net.nparams + net.nstate + 1), "imported model");
    if (!params) {
        rc = HCNN_ENOMEM;
        goto out;
    }
    float *momentum = params + net.nparams, *state = momentum + net.nparams;
    for (int i = 0; i < net.ntensors; i++) {
        const hcnn_tensor_info *t = &net.tensors[i];
        char where[PATHBUF];
        if ((rc = fill(arg, t, owner, (t->is_state ? state : params) + t->offset, where,
                       sizeof where)))
            goto out;
        for (size_t k = 0; hcnn_tensor_is_variance(t) && k < t->count; k++)
            if (state[t->offset + k] < 0.0f) { /* found by tests/fuzz/fuzz_import */
                rc = hcnn_error_code(HCNN_EFORMAT,
                                     "%s: element %zu of %s is %g (expected a running variance "
                                     ">= 0)",
                                     where, k, t->name, (double)state[t->offset + k]);
                goto out;
            }
    }
    hcnn_ckpt_meta meta = {.model_hash = net.model_hash, .epoch = 0, .step = 0, .seed = cfg->seed};
    snprintf(meta.model, sizeof meta.model, "%s", cfg->model.name);
    if ((rc = hcnn_mkdir_parent(out_ckpt, "hcnn import's --output")))
        goto out;
    rc = hcnn_ckpt_save_buffers(out_ckpt, &net, params, state, momentum, &meta);
out:
    hcnn_free(params);
    hcnn_net_free(&net);
    return rc;
}

/* ---- from a directory of .npy files (hcnn import) ---- */
typedef struct npy_source {
    const char *dir, *cfg_path;
} npy_source;

static int npy_check(void *arg, const hcnn_net *net)
{
    const npy_source *src = arg;
    return check_entries(src->dir, net, src->cfg_path);
}

static int npy_fill(void *arg, const hcnn_tensor_info *t, const char *owner, float *dst,
                    char *where, size_t where_cap)
{
    const npy_source *src = arg;
    (void)where_cap; /* PATHBUF */
    int rc = join_path(where, src->dir, t->name, ".npy");
    return rc ? rc : hcnn_npy_read(where, t->name, owner, t->ndim, t->dims, t->count, dst);
}

int hcnn_import_npy(const char *dir, const hcnn_config *cfg, const char *out_ckpt)
{
    npy_source src = {dir, cfg->path};
    return import_model(cfg, out_ckpt, npy_check, npy_fill, &src);
}

/* ---- from arrays in memory (the C API's hcnn_checkpoint_write) ---- */
typedef struct array_source {
    const hcnn_array *a;
    int n;
    const char *cfg_path;
} array_source;

static int is_batches_tracked(const char *name)
{
    const size_t len = strlen(name);
    return ends_with(name, len, ".num_batches_tracked");
}

static int arrays_check(void *arg, const hcnn_net *net)
{
    const array_source *src = arg;
    for (int i = 0; i < src->n; i++) {
        const char *name = src->a[i].name;
        if (!name)
            return hcnn_error("array %d has no name", i);
        for (int j = 0; j < i; j++)
            if (!strcmp(src->a[j].name, name))
                return hcnn_error("tensor %s is given twice (arrays %d and %d)", name, j, i);
        if (is_batches_tracked(name))
            continue;
        if (!hcnn_net_find_tensor(net, name, strlen(name), -1))
            return hcnn_error_code(HCNN_EFORMAT,
                                   "tensor %s is not part of the model configured in %s", name,
                                   src->cfg_path);
    }
    return HCNN_OK;
}

static int arrays_fill(void *arg, const hcnn_tensor_info *t, const char *owner, float *dst,
                       char *where, size_t where_cap)
{
    const array_source *src = arg;
    snprintf(where, where_cap, "%s", t->name);
    const hcnn_array *a = NULL;
    for (int i = 0; i < src->n && !a; i++)
        if (!strcmp(src->a[i].name, t->name))
            a = &src->a[i];
    if (!a)
        return hcnn_error_code(HCNN_EINVAL, "tensor %s of %s is missing", t->name, owner);
    long long have[4] = {0}, need[4] = {0};
    int same = a->ndim == t->ndim && a->ndim >= 0 && a->ndim <= 4;
    for (int d = 0; d < 4; d++) {
        have[d] = d < a->ndim ? (long long)a->dims[d] : 0;
        need[d] = d < t->ndim ? t->dims[d] : 0;
        same = same && have[d] == need[d];
    }
    if (!same) { /* the message hcnn_npy_read gives for a file */
        char found[128], want[128];
        hcnn_npy_shape_text(found, sizeof found, a->ndim < 0 || a->ndim > 4 ? 0 : a->ndim, have);
        hcnn_npy_shape_text(want, sizeof want, t->ndim, need);
        return hcnn_error_code(HCNN_EFORMAT, "%s: shape %s found, %s expects %s for %s", t->name,
                               found, owner, want, t->name);
    }
    if (a->dtype != HCNN_DTYPE_F32 && a->dtype != HCNN_DTYPE_F64)
        return hcnn_error_code(HCNN_EFORMAT, "%s: dtype %s (expected float32 or float64)",
                               t->name, a->dtype == HCNN_DTYPE_I64 ? "int64" : "unknown");
    if (t->count && !a->data)
        return hcnn_error("%s: no data", t->name);
    for (size_t k = 0; k < t->count; k++) {
        const double v = a->dtype == HCNN_DTYPE_F32 ? (double)((const float *)a->data)[k]
                                                     : ((const double *)a->data)[k];
        if (!isfinite(v))
            return hcnn_error_code(HCNN_EFORMAT,
                                   "%s: element %zu of %s is %g (expected finite values)", t->name,
                                   k, t->name, v);
        dst[k] = (float)v;
        if (!isfinite(dst[k]))
            return hcnn_error_code(HCNN_EFORMAT,
                                   "%s: element %zu (%g) is outside the float32 range", t->name, k,
                                   v);
    }
    return HCNN_OK;
}

int hcnn_import_arrays(const hcnn_array *arrays, int n, const hcnn_config *cfg,
                       const char *out_ckpt)
{
    if (n < 0 || (n > 0 && !arrays))
        return hcnn_error("%d arrays at %p (expected n >= 0 and that many)", n,
                          (const void *)arrays);
    array_source src = {arrays, n, cfg->path};
    return import_model(cfg, out_ckpt, arrays_check, arrays_fill, &src);
}
