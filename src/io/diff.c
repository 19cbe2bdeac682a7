/* hcnn diff: tensor-by-tensor comparison of two checkpoints.
 * Relative difference of a tensor: max|a - b| / max(max|a|, max|b|), so a
 * tensor of tiny values is not judged by elementwise ratios of noise. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hcnn/checkpoint.h"
#include "hcnn/common.h"
#include "hcnn/diff.h"

static const hcnn_ckpt_tensor *find(const hcnn_ckpt_file *f, const hcnn_ckpt_tensor *t)
{
    for (int i = 0; i < f->ntensors; i++)
        if (f->tensors[i].role == t->role && !strcmp(f->tensors[i].name, t->name))
            return &f->tensors[i];
    return NULL;
}

int hcnn_diff_main(const char *pa, const char *pb, double tol, int model_only)
{
    hcnn_ckpt_file a, b;
    if (hcnn_ckpt_read(pa, &a))
        return 2;
    if (hcnn_ckpt_read(pb, &b)) {
        hcnn_ckpt_close(&a);
        return 2;
    }
    int status = 0;
    if (a.meta.model_hash != b.meta.model_hash)
        printf("# models differ: %s has model '%s', %s has '%s'\n", pa, a.meta.model, pb,
               b.meta.model);
    double max_abs = 0.0, max_rel = 0.0;
    char abs_at[HCNN_TENSOR_NAME_MAX + 16] = "-", rel_at[HCNN_TENSOR_NAME_MAX + 16] = "-";
    int compared = 0;
    for (int i = 0; i < a.ntensors; i++) {
        const hcnn_ckpt_tensor *ta = &a.tensors[i], *tb = find(&b, ta);
        if (model_only && ta->role == 2)
            continue;
        if (!tb || tb->count != ta->count || memcmp(tb->dims, ta->dims, sizeof ta->dims)) {
            printf("# %s %s: %s\n", hcnn_ckpt_role_name(ta->role), ta->name,
                   tb ? "shapes differ" : "missing in the second file");
            status = 1;
            continue;
        }
        double d = 0.0, m = 0.0;
        for (size_t k = 0; k < ta->count; k++) {
            float x, y;
            memcpy(&x, ta->data + k, sizeof x);
            memcpy(&y, tb->data + k, sizeof y);
            double diff = fabs((double)x - (double)y);
            if (diff > d || isnan(diff))
                d = isnan(diff) ? INFINITY : diff;
            if (fabs(x) > m)
                m = fabs(x);
            if (fabs(y) > m)
                m = fabs(y);
        }
        const double rel = d == 0.0 ? 0.0 : m > 0.0 ? d / m : INFINITY;
        compared++;
        if (d > max_abs) {
            max_abs = d;
            snprintf(abs_at, sizeof abs_at, "%s%s", ta->role == 2 ? "momentum:" : "", ta->name);
        }
        if (rel > max_rel) {
            max_rel = rel;
            snprintf(rel_at, sizeof rel_at, "%s%s", ta->role == 2 ? "momentum:" : "", ta->name);
        }
    }
    for (int i = 0; i < b.ntensors; i++)
        if (!(model_only && b.tensors[i].role == 2) && !find(&a, &b.tensors[i])) {
            printf("# %s %s: missing in the first file\n", hcnn_ckpt_role_name(b.tensors[i].role),
                   b.tensors[i].name);
            status = 1;
        }
    if (max_rel > tol)
        status = 1;
    printf("max_abs_diff=%.6g tensor=%s max_rel_diff=%.6g tensor=%s tensors=%d within_tol=%s\n",
           max_abs, abs_at, max_rel, rel_at, compared, status == 0 ? "yes" : "no");
    hcnn_ckpt_close(&a);
    hcnn_ckpt_close(&b);
    return status;
}
