/* Tests of the checkpoint <-> NumPy .npy export and import
 * (src/io/export.c).
 *
 * A small model (conv with bias, batch norm, a residual block with a
 * projection shortcut, fc) is built from a YAML config written to a
 * mkdtemp directory, filled with distinct values and saved as a
 * checkpoint; the export is checked byte by byte, imported back and
 * compared bit for bit, and hand-made malformed .npy files must each be
 * refused with one message naming the file, without crashing. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hcnn/backend.h"
#include "hcnn/checkpoint.h"
#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/export.h"
#include "hcnn/files.h"
#include "hcnn/net.h"

#include "capture.h"

#define STEP 1234

/* ---- fixture ------------------------------------------------------------ */

typedef struct fixture {
    char dir[64];
    char cfg_path[128];
    char ckpt[128];
    char exp[128];       /* the export of ckpt */
    int serial;          /* for unique directory names */
    hcnn_config cfg;
    hcnn_net net;
    float *momentum;
} fixture;

static const char *const CONFIG =
    "model:\n"
    "  name: exporttest\n"
    "  input: [1, 8, 8]\n"
    "  classes: 3\n"
    "  blocks:\n"
    "    - {type: conv, name: conv1, out: 4, kernel: 3, pad: 1, bias: true}\n"
    "    - {type: bn, name: bn1}\n"
    "    - relu\n"
    "    - {type: residual, name: layer1.0, out: 4, stride: 2}\n"
    "    - gap\n"
    "    - flatten\n"
    "    - {type: fc, name: fc, out: 3}\n"
    "dataset: synthetic\n"
    "synthetic_train: 16\n"
    "synthetic_test: 8\n"
    "epochs: 1\n"
    "batch_size: 4\n"
    "seed: 7\n";

static int group_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    *state = f;
    if (config_fixture_dir(f->dir, "/tmp/hcnn_test_export_XXXXXX", f->cfg_path,
                           sizeof f->cfg_path, CONFIG))
        return -1;
    snprintf(f->ckpt, sizeof f->ckpt, "%s/model.hcnn", f->dir);
    snprintf(f->exp, sizeof f->exp, "%s/exp/sub", f->dir); /* mkdir -p needed */
    if (hcnn_config_load(&f->cfg, f->cfg_path, NULL, 0) != HCNN_OK)
        return -1;
    if (hcnn_net_create(&f->net, &f->cfg.model, hcnn_backend_cpu(), f->cfg.path) != HCNN_OK)
        return -1;
    /* distinct, not exactly representable in decimal, both signs */
    for (size_t i = 0; i < f->net.nparams; i++)
        f->net.params[i] = ((float)i - 200.0f) / 3.0f;
    for (size_t i = 0; i < f->net.nstate; i++)
        f->net.state[i] = 0.5f + (float)i / 7.0f;
    f->momentum = hcnn_alloc(f->net.nparams * sizeof(float) + 4, "momentum");
    if (!f->momentum)
        return -1;
    for (size_t i = 0; i < f->net.nparams; i++)
        f->momentum[i] = -1.0f - (float)i;
    hcnn_ckpt_meta meta = {.epoch = 3, .step = STEP, .seed = 99};
    snprintf(meta.model, sizeof meta.model, "exporttest");
    if (hcnn_ckpt_save(f->ckpt, &f->net, f->momentum, &meta) != HCNN_OK)
        return -1;
    if (hcnn_export_npy(f->ckpt, f->exp) != HCNN_OK)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    fixture *f = *state;
    if (!f)
        return 0;
    hcnn_net_free(&f->net);
    hcnn_free(f->momentum);
    int rc = 0;
    if (f->dir[0] && strcmp(f->dir, "/tmp/hcnn_test_export_XXXXXX")) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
        rc = system(cmd);
    }
    free(f);
    return rc == 0 ? 0 : -1;
}

/* ---- helpers ------------------------------------------------------------ */

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    long n = ftell(fp);
    assert_true(n >= 0);
    rewind(fp);
    unsigned char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    p[n] = '\0';
    *len = (size_t)n;
    return p;
}

static const hcnn_tensor_info *tensor(const fixture *f, const char *name)
{
    for (int i = 0; i < f->net.ntensors; i++)
        if (!strcmp(f->net.tensors[i].name, name))
            return &f->net.tensors[i];
    fail_msg("no tensor %s in the model", name);
    return NULL;
}

static const float *tensor_data(const fixture *f, const char *name)
{
    const hcnn_tensor_info *t = tensor(f, name);
    return (t->is_state ? f->net.state : f->net.params) + t->offset;
}

/* A fresh export of the checkpoint in a new directory, to be damaged. */
static const char *fresh_export(fixture *f, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/case%d", f->dir, ++f->serial);
    assert_int_equal(hcnn_export_npy(f->ckpt, buf), HCNN_OK);
    return buf;
}

static const char *in_dir(const char *dir, const char *name)
{
    static char bufs[4][512]; /* test-only; a few paths alive at once */
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

/* A .npy file with the given header dict (version major.0), padded like
 * numpy's writer so the whole header is a multiple of 64 bytes. */
static void write_npy(const char *path, int major, const char *dict, const void *data,
                      size_t nbytes)
{
    size_t dl = strlen(dict), pre = major == 1 ? 10 : 12;
    size_t pad = 64 - (pre + dl + 1) % 64;
    size_t hlen = dl + pad + 1, total = pre + hlen + nbytes;
    unsigned char *p = malloc(total);
    assert_non_null(p);
    memcpy(p, "\x93NUMPY", 6);
    p[6] = (unsigned char)major, p[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        p[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(p + pre, dict, dl);
    memset(p + pre + dl, ' ', pad);
    p[pre + hlen - 1] = '\n';
    if (nbytes)
        memcpy(p + pre + hlen, data, nbytes);
    write_file(path, p, total);
    free(p);
}



/* Import dir, expect failure `code` (-1: any non-zero) with one message
 * containing the given strings, and no output checkpoint. */
static void expect_import_fail(fixture *f, const char *dir, int code, ...)
{
    char out[256];
    snprintf(out, sizeof out, "%s/never.hcnn", dir);
    capture c;
    capture_begin(&c);
    int rc = hcnn_import_npy(dir, &f->cfg, out);
    va_list ap;
    va_start(ap, code);
    capture_end_v(&c, ap);
    va_end(ap);
    if (code < 0)
        assert_int_not_equal(rc, HCNN_OK);
    else
        assert_int_equal(rc, code);
    assert_int_not_equal(access(out, F_OK), 0);
}

/* Import dir into dir.hcnn, expect success, and load it into a new net. */
static void import_ok(fixture *f, const char *dir, hcnn_net *net)
{
    char out[256];
    snprintf(out, sizeof out, "%s.hcnn", dir);
    assert_int_equal(hcnn_import_npy(dir, &f->cfg, out), HCNN_OK);
    assert_int_equal(hcnn_net_create(net, &f->cfg.model, hcnn_backend_cpu(), f->cfg.path),
                     HCNN_OK);
    hcnn_ckpt_meta meta;
    assert_int_equal(hcnn_ckpt_load(out, net, NULL, &meta), HCNN_OK);
}

/* ---- export layout ------------------------------------------------------- */

static void test_manifest(void **state)
{
    fixture *f = *state;
    /* expected: every tensor in net order, num_batches_tracked after each
     * layer's running_var (where PyTorch's state_dict has it) */
    char expect[8192] = "";
    size_t o = 0;
    int lines = 0;
    for (int i = 0; i < f->net.ntensors; i++) {
        const hcnn_tensor_info *t = &f->net.tensors[i];
        o += (size_t)snprintf(expect + o, sizeof expect - o, "%s float32 ", t->name);
        for (int d = 0; d < t->ndim; d++)
            o += (size_t)snprintf(expect + o, sizeof expect - o, "%s%d", d ? "x" : "", t->dims[d]);
        o += (size_t)snprintf(expect + o, sizeof expect - o, "\n");
        lines++;
        size_t nl = strlen(t->name), sl = strlen(".running_var");
        if (nl > sl && !strcmp(t->name + nl - sl, ".running_var")) {
            o += (size_t)snprintf(expect + o, sizeof expect - o, "%.*s.num_batches_tracked int64 scalar\n",
                                  (int)(nl - sl), t->name);
            lines++;
        }
    }
    size_t len;
    char *m = (char *)read_all(in_dir(f->exp, "manifest.txt"), &len);
    assert_string_equal(m, expect);
    /* the torchvision names of a basic block with a projection shortcut */
    static const char *const want[] = {
        "conv1.weight float32 4x1x3x3\n",
        "conv1.bias float32 4\n",
        "bn1.weight float32 4\n",
        "bn1.running_var float32 4\n",
        "bn1.num_batches_tracked int64 scalar\n",
        "layer1.0.conv1.weight float32 4x4x3x3\n",
        "layer1.0.bn2.running_mean float32 4\n",
        "layer1.0.downsample.0.weight float32 4x4x1x1\n",
        "layer1.0.downsample.1.running_var float32 4\n",
        "layer1.0.downsample.1.num_batches_tracked int64 scalar\n",
        "fc.weight float32 3x4\n",
        "fc.bias float32 3\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(m, want[i]))
            fail_msg("manifest lacks %s", want[i]);
    assert_null(strstr(m, "momentum"));
    free(m);

    /* one .npy per manifest line, plus the manifest; no temporaries */
    DIR *d = opendir(f->exp);
    assert_non_null(d);
    int files = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        files++;
        assert_null(strstr(e->d_name, ".tmp"));
    }
    closedir(d);
    assert_int_equal(files, lines + 1);
}

/* header of an exported file: returns the data offset */
static size_t check_header(const unsigned char *p, size_t len, const char *dict)
{
    assert_true(len >= 10);
    assert_memory_equal(p, "\x93NUMPY", 6);
    assert_int_equal(p[6], 1);
    assert_int_equal(p[7], 0);
    size_t hlen = (size_t)p[8] | (size_t)p[9] << 8;
    size_t total = 10 + hlen;
    assert_int_equal(total % 64, 0);
    assert_true(total <= len);
    size_t dl = strlen(dict);
    assert_true(dl < hlen);
    assert_memory_equal(p + 10, dict, dl);
    for (size_t i = 10 + dl; i < total - 1; i++)
        assert_int_equal(p[i], ' ');
    assert_int_equal(p[total - 1], '\n');
    return total;
}

static void test_npy_bytes(void **state)
{
    fixture *f = *state;
    size_t len;
    /* 4-D */
    unsigned char *p = read_all(in_dir(f->exp, "conv1.weight.npy"), &len);
    size_t off = check_header(p, len, "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 1, 3, 3), }");
    assert_int_equal(len - off, 36 * 4);
    assert_memory_equal(p + off, tensor_data(f, "conv1.weight"), 36 * 4); /* host is little-endian */
    free(p);
    /* 1-D: "(4,)" */
    p = read_all(in_dir(f->exp, "conv1.bias.npy"), &len);
    off = check_header(p, len, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }");
    assert_int_equal(len - off, 16);
    assert_memory_equal(p + off, tensor_data(f, "conv1.bias"), 16);
    free(p);
    /* 2-D */
    p = read_all(in_dir(f->exp, "fc.weight.npy"), &len);
    off = check_header(p, len, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }");
    assert_memory_equal(p + off, tensor_data(f, "fc.weight"), 48);
    free(p);
    /* a statistic */
    p = read_all(in_dir(f->exp, "layer1.0.downsample.1.running_mean.npy"), &len);
    off = check_header(p, len, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }");
    assert_memory_equal(p + off, tensor_data(f, "layer1.0.downsample.1.running_mean"), 16);
    free(p);
    /* num_batches_tracked: int64 scalar holding the step count */
    p = read_all(in_dir(f->exp, "bn1.num_batches_tracked.npy"), &len);
    off = check_header(p, len, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }");
    assert_int_equal(len - off, 8);
    int64_t step;
    memcpy(&step, p + off, 8);
    assert_int_equal(step, STEP);
    free(p);
}

/* ---- round trip ---------------------------------------------------------- */

static const hcnn_ckpt_tensor *ckpt_find(const hcnn_ckpt_file *c, const char *name, int role)
{
    for (int i = 0; i < c->ntensors; i++)
        if (c->tensors[i].role == role && !strcmp(c->tensors[i].name, name))
            return &c->tensors[i];
    return NULL;
}

static void test_roundtrip(void **state)
{
    fixture *f = *state;
    char out[256];
    snprintf(out, sizeof out, "%s/imported/model.hcnn", f->dir); /* parent created */
    assert_int_equal(hcnn_import_npy(f->exp, &f->cfg, out), HCNN_OK);

    hcnn_ckpt_file a, b;
    assert_int_equal(hcnn_ckpt_read(f->ckpt, &a), HCNN_OK);
    assert_int_equal(hcnn_ckpt_read(out, &b), HCNN_OK);
    int compared = 0;
    for (int i = 0; i < a.ntensors; i++) {
        const hcnn_ckpt_tensor *x = &a.tensors[i];
        if (x->role == 2)
            continue;
        const hcnn_ckpt_tensor *y = ckpt_find(&b, x->name, x->role);
        if (!y)
            fail_msg("%s missing after the round trip", x->name);
        assert_int_equal(x->ndim, y->ndim);
        assert_memory_equal(x->dims, y->dims, sizeof x->dims);
        assert_int_equal(x->count, y->count);
        assert_memory_equal(x->data, y->data, x->count * sizeof(float)); /* bit for bit */
        compared++;
    }
    assert_int_equal(compared, f->net.ntensors);
    /* a fresh optimiser: zero momentum for every parameter */
    int momenta = 0;
    for (int i = 0; i < b.ntensors; i++) {
        const hcnn_ckpt_tensor *y = &b.tensors[i];
        if (y->role != 2)
            continue;
        momenta++;
        for (size_t k = 0; k < y->count; k++) {
            float v;
            memcpy(&v, (const unsigned char *)y->data + 4 * k, 4);
            assert_true(v == 0.0f);
        }
    }
    int nparam_tensors = 0;
    for (int i = 0; i < f->net.ntensors; i++)
        nparam_tensors += !f->net.tensors[i].is_state;
    assert_int_equal(momenta, nparam_tensors);
    assert_string_equal(b.meta.model, "exporttest");
    assert_int_equal(b.meta.epoch, 0);
    assert_int_equal(b.meta.step, 0);
    assert_int_equal(b.meta.seed, f->cfg.seed);
    assert_int_equal(b.meta.model_hash, f->net.model_hash);
    hcnn_ckpt_close(&a);
    hcnn_ckpt_close(&b);

    /* and it loads into the configured model (hash and shapes check) */
    hcnn_net net;
    assert_int_equal(hcnn_net_create(&net, &f->cfg.model, hcnn_backend_cpu(), f->cfg.path), HCNN_OK);
    float *mom = hcnn_alloc(net.nparams * sizeof(float) + 4, "momentum");
    assert_non_null(mom);
    hcnn_ckpt_meta meta;
    assert_int_equal(hcnn_ckpt_load(out, &net, mom, &meta), HCNN_OK);
    assert_memory_equal(net.params, f->net.params, net.nparams * sizeof(float));
    assert_memory_equal(net.state, f->net.state, net.nstate * sizeof(float));
    hcnn_free(mom);
    hcnn_net_free(&net);

    /* exporting the imported checkpoint reproduces the same files */
    char dir2[256];
    snprintf(dir2, sizeof dir2, "%s/reexport", f->dir);
    assert_int_equal(hcnn_export_npy(out, dir2), HCNN_OK);
    size_t l1, l2;
    unsigned char *p1 = read_all(in_dir(f->exp, "layer1.0.conv2.weight.npy"), &l1);
    unsigned char *p2 = read_all(in_dir(dir2, "layer1.0.conv2.weight.npy"), &l2);
    assert_int_equal(l1, l2);
    assert_memory_equal(p1, p2, l1);
    free(p1);
    free(p2);
}

static void test_export_without_momentum(void **state)
{
    fixture *f = *state;
    char ck[256], dir[256];
    snprintf(ck, sizeof ck, "%s/nomom.hcnn", f->dir);
    snprintf(dir, sizeof dir, "%s/nomom", f->dir);
    hcnn_ckpt_meta meta = {.step = 5};
    assert_int_equal(hcnn_ckpt_save(ck, &f->net, NULL, &meta), HCNN_OK);
    assert_int_equal(hcnn_export_npy(ck, dir), HCNN_OK);
    hcnn_net net;
    import_ok(f, dir, &net);
    assert_memory_equal(net.params, f->net.params, net.nparams * sizeof(float));
    hcnn_net_free(&net);
}

/* ---- accepted variants ----------------------------------------------------- */

static void test_import_f8(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    /* fc.weight as float64 holding exactly the float values */
    const float *w = tensor_data(f, "fc.weight");
    double d[12];
    for (int i = 0; i < 12; i++)
        d[i] = w[i];
    write_npy(in_dir(dir, "fc.weight.npy"), 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }", d, sizeof d);
    /* conv1.bias as float64 values that are rounded to float */
    double b[4] = {0.1, -1.0 / 3.0, 1e-40, 3.0e38};
    write_npy(in_dir(dir, "conv1.bias.npy"), 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", b, sizeof b);
    hcnn_net net;
    import_ok(f, dir, &net);
    const hcnn_tensor_info *t = tensor(f, "fc.weight");
    assert_memory_equal(net.params + t->offset, w, sizeof(float) * 12);
    t = tensor(f, "conv1.bias");
    for (int i = 0; i < 4; i++)
        assert_true(net.params[t->offset + i] == (float)b[i]);
    hcnn_net_free(&net);

    /* a finite double beyond float range is refused rather than made inf */
    b[3] = 1e300;
    write_npy(in_dir(dir, "conv1.bias.npy"), 1,
              "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", b, sizeof b);
    expect_import_fail(f, dir, HCNN_EFORMAT, "conv1.bias.npy", "element 3", "float32 range", NULL);
}

static void test_import_versions(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    /* 2.0 and 3.0 headers (uint32 length), a Python 2 style shape, double
     * quotes, other key order and extra whitespace */
    write_npy(in_dir(dir, "fc.bias.npy"), 2,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
              tensor_data(f, "fc.bias"), 12);
    write_npy(in_dir(dir, "conv1.bias.npy"), 3,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }",
              tensor_data(f, "conv1.bias"), 16);
    write_npy(in_dir(dir, "bn1.weight.npy"), 1,
              "{ \"shape\" : ( 4L , ) ,\t\"fortran_order\": False, \"descr\": \"<f4\" }",
              tensor_data(f, "bn1.weight"), 16);
    write_npy(in_dir(dir, "layer1.0.downsample.0.weight.npy"), 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4, 1, 1)}",
              tensor_data(f, "layer1.0.downsample.0.weight"), 64);
    /* num_batches_tracked files are not read (any content is accepted) */
    write_file(in_dir(dir, "bn1.num_batches_tracked.npy"), "junk", 4);
    unlink(in_dir(dir, "layer1.0.bn1.num_batches_tracked.npy"));
    unlink(in_dir(dir, "manifest.txt"));
    hcnn_net net;
    import_ok(f, dir, &net);
    assert_memory_equal(net.params, f->net.params, net.nparams * sizeof(float));
    assert_memory_equal(net.state, f->net.state, net.nstate * sizeof(float));
    hcnn_net_free(&net);
}

/* ---- refused files ----------------------------------------------------------- */

static void test_missing_file(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    assert_int_equal(unlink(in_dir(dir, "layer1.0.bn2.running_var.npy")), 0);
    expect_import_fail(f, dir, HCNN_EIO, in_dir(dir, "layer1.0.bn2.running_var.npy"),
                       "tensor layer1.0.bn2.running_var", f->cfg_path, NULL);
    /* the directory itself missing */
    expect_import_fail(f, in_dir(dir, "nonexistent"), HCNN_EIO, "nonexistent", NULL);
}

static void test_wrong_shape(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    /* same number of elements, transposed */
    write_npy(in_dir(dir, "fc.weight.npy"), 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }",
              tensor_data(f, "fc.weight"), 48);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.weight.npy", "shape (4, 3) found", "expects (3, 4)",
                       f->cfg_path, NULL);
    /* a scalar instead of a vector */
    write_npy(in_dir(dir, "fc.weight.npy"), 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", "abcd", 4);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.weight.npy", "shape () found", NULL);
    write_npy(in_dir(dir, "fc.weight.npy"), 1,
              "{'descr': '<f4', 'fortran_order': False, 'shape': (12,), }",
              tensor_data(f, "fc.weight"), 48);
    expect_import_fail(f, dir, HCNN_EFORMAT, "shape (12,) found", NULL);
}

static void test_wrong_dtype(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    static const char *const bad[] = {"<i4", ">f4", "<f2", "|u1", "float32", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char dict[128], quoted[32];
        snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (4,), }",
                 bad[i]);
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        write_npy(in_dir(dir, "bn1.bias.npy"), 1, dict, "0123456789abcdef", 16);
        expect_import_fail(f, dir, HCNN_EFORMAT, "bn1.bias.npy", "dtype", quoted, NULL);
    }
    /* a long dtype string is cut in the message, not overflowed */
    write_npy(in_dir(dir, "bn1.bias.npy"), 1,
              "{'descr': 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', "
              "'fortran_order': False, 'shape': (4,), }",
              "0123456789abcdef", 16);
    expect_import_fail(f, dir, HCNN_EFORMAT, "bn1.bias.npy", "...'", NULL);
}

static void test_fortran_order(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    write_npy(in_dir(dir, "fc.weight.npy"), 1,
              "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }",
              tensor_data(f, "fc.weight"), 48);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.weight.npy", "fortran_order is True", NULL);
}

/* NaN and Inf are refused on import, in '<f4' and in '<f8' files, with a
 * message naming the file and the element (found by tests/fuzz/fuzz_npy) */
static void test_non_finite(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    const char *p = in_dir(dir, "fc.bias.npy");
    const float special[] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        float v[3] = {0.5f, -1.0f, 2.0f};
        v[2] = special[k];
        write_npy(p, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", v, sizeof v);
        expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", "element 2", "finite", NULL);
        double d[3] = {0.5, (double)special[k], 2.0};
        write_npy(p, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", d, sizeof d);
        expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", "element 1", "finite", NULL);
    }
}

/* A checkpoint tensor whose dimensions multiply past 2^64 (wrapping to
 * its count of 0) is refused when the file is read, at the first dimension
 * the section cannot hold (found by
 * tests/fuzz/fuzz_ckpt). */
static void put_le(unsigned char **p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        *(*p)++ = (unsigned char)(v >> (8 * i));
}

static void test_ckpt_dims_overflow(void **state)
{
    fixture *f = *state;
    static const char meta[] = "model_hash=0000000000000000\nmodel=x\n";
    unsigned char tens[64], file[256], *p = tens;
    put_le(&p, 1, 4);                                 /* one tensor */
    put_le(&p, 1, 2), *p++ = 'x', *p++ = 0, *p++ = 4; /* name, role, ndim */
    for (int d = 0; d < 4; d++)
        put_le(&p, 65536, 4);
    put_le(&p, 0, 8); /* count: 2^64 mod 2^64 */
    const size_t tl = (size_t)(p - tens), ml = sizeof meta - 1;
    p = file;
    memcpy(p, "HCNNCKPT", 8), p += 8;
    put_le(&p, 1, 4), put_le(&p, 0x01020304, 4), put_le(&p, 2, 4);
    put_le(&p, 1, 4), put_le(&p, 0, 4), put_le(&p, ml, 8);
    memcpy(p, meta, ml), p += ml;
    put_le(&p, hcnn_crc32(0, meta, ml), 4);
    put_le(&p, 2, 4), put_le(&p, 0, 4), put_le(&p, tl, 8);
    memcpy(p, tens, tl), p += tl;
    put_le(&p, hcnn_crc32(0, tens, tl), 4);
    char path[300];
    snprintf(path, sizeof path, "%s/wrap.hcnn", f->dir);
    write_file(path, file, (size_t)(p - file));
    hcnn_ckpt_file cf;
    capture c;
    capture_begin(&c);
    assert_int_equal(hcnn_ckpt_read(path, &cf), HCNN_EFORMAT);
    capture_end(&c, path, "tensor x", "dimension 0 is 65536", NULL);
    unlink(path);
}

static void test_truncated_and_long(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    const char *p = in_dir(dir, "layer1.0.conv1.weight.npy");
    size_t len;
    unsigned char *orig = read_all(p, &len);
    write_file(p, orig, len - 1);
    expect_import_fail(f, dir, HCNN_EFORMAT, "layer1.0.conv1.weight.npy", "truncated", NULL);
    write_file(p, orig, 64); /* header only */
    expect_import_fail(f, dir, HCNN_EFORMAT, "layer1.0.conv1.weight.npy", "truncated", NULL);
    write_file(p, orig, 40); /* inside the header */
    expect_import_fail(f, dir, HCNN_EFORMAT, "layer1.0.conv1.weight.npy", "truncated", NULL);
    write_file(p, orig, 7); /* inside the preamble */
    expect_import_fail(f, dir, HCNN_EFORMAT, "layer1.0.conv1.weight.npy", "truncated", NULL);
    write_file(p, orig, 0);
    expect_import_fail(f, dir, HCNN_EFORMAT, "layer1.0.conv1.weight.npy", NULL);
    /* one byte too many */
    unsigned char *longer = malloc(len + 1);
    assert_non_null(longer);
    memcpy(longer, orig, len);
    longer[len] = 0;
    write_file(p, longer, len + 1);
    expect_import_fail(f, dir, HCNN_EFORMAT, "layer1.0.conv1.weight.npy", "needs only", NULL);
    free(longer);
    free(orig);
}

/* hand-made malformed headers, each refused with a message naming the file */
static void test_garbage_headers(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    const char *p = in_dir(dir, "fc.bias.npy");
    static const char *const dicts[] = {
        "",
        "not a dict",
        "{",
        "{'descr': '<f4', 'fortran_order': False}",                    /* no shape */
        "{'fortran_order': False, 'shape': (3,)}",                    /* no descr */
        "{'descr': '<f4', 'shape': (3,)}",                            /* no fortran_order */
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (3,)}",     /* quotes */
        "{'descr': '<f4', 'fortran_order': false, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",     /* not a tuple */
        "{'descr': '<f4', 'fortran_order': False, 'shape': [3]}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3 4)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999999,)}",
        "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<\\f4', 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}",
        "{'descr' '<f4', 'fortran_order': False, 'shape': (3,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} trailing",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}}",
        "{'descriptor_that_is_very_long': '<f4'}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
        "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
        "1,1,1,1,1,1,1,1,1,1,1,3)}",
    };
    for (size_t i = 0; i < sizeof dicts / sizeof *dicts; i++) {
        write_npy(p, 1, dicts[i], tensor_data(f, "fc.bias"), 12);
        expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", NULL);
    }
    /* raw preambles */
    unsigned char raw[64];
    memset(raw, ' ', sizeof raw);
    memcpy(raw, "\x93NUMPZ\x01\x00\x36\x00", 10); /* bad magic */
    write_file(p, raw, sizeof raw);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", "bad magic", NULL);
    memcpy(raw, "\x93NUMPY\x09\x00\x36\x00", 10); /* version 9.0 */
    write_file(p, raw, sizeof raw);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", "version 9.0", NULL);
    memcpy(raw, "\x93NUMPY\x01\x05\x36\x00", 10); /* version 1.5 */
    write_file(p, raw, sizeof raw);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", "version 1.5", NULL);
    memcpy(raw, "\x93NUMPY\x01\x00\xff\xff", 10); /* header longer than the file */
    write_file(p, raw, sizeof raw);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", "truncated", NULL);
    memcpy(raw, "\x93NUMPY\x02\x00\xff\xff\xff\xff", 12); /* 4 GiB header */
    write_file(p, raw, sizeof raw);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", "larger than", NULL);
    memcpy(raw, "\x93NUMPY\x03\x00\x00\x00", 10); /* 3.0 cut in the length */
    write_file(p, raw, 11);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", "truncated", NULL);
    /* NUL bytes inside the dict */
    static const char withnul[] = "{'descr': '<f4'\0, 'fortran_order': False, 'shape': (3,), }";
    unsigned char file[128];
    memset(file, ' ', sizeof file);
    memcpy(file, "\x93NUMPY\x01\x00\x76\x00", 10);
    memcpy(file + 10, withnul, sizeof withnul - 1);
    file[127] = '\n';
    write_file(p, file, sizeof file);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc.bias.npy", "malformed", NULL);
    /* a directory in place of a file */
    unlink(p);
    assert_int_equal(mkdir(p, 0755), 0);
    expect_import_fail(f, dir, -1, "fc.bias.npy", NULL);
    rmdir(p);
}

/* Random corruption of a valid file's header and length: whatever the
 * outcome, no crash and no out-of-bounds access (run under valgrind). */
static void test_fuzz_headers(void **state)
{
    fixture *f = *state;
    char buf[256], out[300];
    const char *dir = fresh_export(f, buf, sizeof buf);
    snprintf(out, sizeof out, "%s.hcnn", dir);
    const char *p = in_dir(dir, "fc.weight.npy");
    size_t len;
    unsigned char *orig = read_all(p, &len);
    unsigned char *mut = malloc(len + 64);
    assert_non_null(mut);
    static const unsigned char interesting[] = {0, '\n', ' ', '\'', '"', '(', ')', ',', ':', '{',
                                                '}', '0', '9', 'L', 0x80, 0xff};
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int ok = 0, refused = 0;
    fflush(stderr);
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
    assert_true(saved >= 0 && devnull >= 0);
    dup2(devnull, 2);
    close(devnull);
    for (int it = 0; it < 600; it++) {
        memcpy(mut, orig, len);
        size_t n = len;
        int edits = 1 + (int)((s >> 7) % 4);
        for (int e = 0; e < edits; e++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            size_t pos = (size_t)(s >> 33) % 64; /* the preamble and header */
            mut[pos] = (s >> 20) & 1 ? interesting[(s >> 12) % sizeof interesting]
                                     : (unsigned char)(s >> 24);
        }
        if (it % 5 == 0)
            n = (size_t)(s >> 40) % (len + 8); /* cut or extend */
        if (n > len)
            memset(mut + len, 'x', n - len);
        write_file(p, mut, n);
        int rc = hcnn_import_npy(dir, &f->cfg, out);
        assert_true(rc == HCNN_OK || rc == HCNN_EFORMAT || rc == HCNN_EIO);
        if (rc == HCNN_OK)
            ok++;
        else
            refused++;
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    printf("  fuzz: %d accepted, %d refused\n", ok, refused);
    assert_true(refused > 500);
    /* all header prefixes */
    for (size_t n = 0; n < 64; n++) {
        write_file(p, orig, n);
        capture c;
        capture_begin(&c);
        int rc = hcnn_import_npy(dir, &f->cfg, out);
        char text[4096];
        capture_text(&c, text, sizeof text);
        assert_int_equal(rc, HCNN_EFORMAT);
        assert_int_equal(count_errors(text), 1);
        assert_non_null(strstr(text, "fc.weight.npy"));
    }
    free(mut);
    free(orig);
}

static void test_extra_files(void **state)
{
    fixture *f = *state;
    char buf[256];
    const char *dir = fresh_export(f, buf, sizeof buf);
    size_t len;
    unsigned char *w = read_all(in_dir(dir, "fc.weight.npy"), &len);
    write_file(in_dir(dir, "fc2.weight.npy"), w, len);
    expect_import_fail(f, dir, HCNN_EFORMAT, "fc2.weight.npy", "tensor fc2.weight",
                       "not part of the model configured in", f->cfg_path, NULL);
    write_file(in_dir(dir, "bn9.running_mean.npy"), w, len);
    expect_import_fail(f, dir, HCNN_EFORMAT, "bn9.running_mean.npy", "and 1 more", NULL);
    unlink(in_dir(dir, "fc2.weight.npy"));
    unlink(in_dir(dir, "bn9.running_mean.npy"));
    write_file(in_dir(dir, "notes.txt"), "hi", 2);
    expect_import_fail(f, dir, HCNN_EFORMAT, "notes.txt", "not part of the model configured in",
                       NULL);
    unlink(in_dir(dir, "notes.txt"));
    free(w);
    /* clean again: accepted */
    hcnn_net net;
    import_ok(f, dir, &net);
    hcnn_net_free(&net);
}

static void test_export_errors(void **state)
{
    fixture *f = *state;
    char path[256];
    capture c;
    snprintf(path, sizeof path, "%s/none.hcnn", f->dir);
    capture_begin(&c);
    assert_int_equal(hcnn_export_npy(path, in_dir(f->dir, "x")), HCNN_EIO);
    capture_end(&c, "none.hcnn", NULL);
    assert_int_not_equal(access(in_dir(f->dir, "x"), F_OK), 0); /* nothing created */

    /* a corrupt checkpoint */
    size_t len;
    unsigned char *ck = read_all(f->ckpt, &len);
    ck[len / 2] ^= 0x40;
    snprintf(path, sizeof path, "%s/corrupt.hcnn", f->dir);
    write_file(path, ck, len);
    free(ck);
    capture_begin(&c);
    assert_int_equal(hcnn_export_npy(path, in_dir(f->dir, "y")), HCNN_EFORMAT);
    capture_end(&c, "corrupt.hcnn", NULL);
    assert_int_not_equal(access(in_dir(f->dir, "y"), F_OK), 0);

    /* the target is a file, not a directory */
    snprintf(path, sizeof path, "%s/plainfile", f->dir);
    write_file(path, "x", 1);
    capture_begin(&c);
    assert_int_not_equal(hcnn_export_npy(f->ckpt, path), HCNN_OK);
    capture_end(&c, "plainfile", NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_manifest),
        cmocka_unit_test(test_npy_bytes),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_export_without_momentum),
        cmocka_unit_test(test_import_f8),
        cmocka_unit_test(test_import_versions),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_wrong_dtype),
        cmocka_unit_test(test_fortran_order),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_ckpt_dims_overflow),
        cmocka_unit_test(test_truncated_and_long),
        cmocka_unit_test(test_garbage_headers),
        cmocka_unit_test(test_fuzz_headers),
        cmocka_unit_test(test_extra_files),
        cmocka_unit_test(test_export_errors),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
