/* Checkpoints whose CRCs are valid but whose contents are not (issue 17):
 * each forged file must be refused by hcnn_ckpt_load with one message
 * naming the file and the fault, leaving the network unchanged.
 *
 * A small model is saved with momentum; a forger re-reads it with
 * hcnn_ckpt_read and writes variants through its own small writer of the
 * documented format (include/hcnn/checkpoint.h), with correct CRCs, so only
 * the semantic checks can catch them.
 *
 * Then which checkpoint of a directory --resume auto and latest take
 * (hcnn_ckpt_pick_resume): the highest step of the line, whatever the
 * write times its files record (issue 37). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcnn/backend.h"
#include "hcnn/checkpoint.h"
#include "hcnn/ckpt_dir.h"
#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/files.h"
#include "hcnn/net.h"

#include "capture.h"

static const char *const CONFIG = "model:\n"
                                  "  name: validate\n"
                                  "  input: [1, 6, 6]\n"
                                  "  classes: 3\n"
                                  "  blocks:\n"
                                  "    - {type: conv, name: conv1, out: 2, kernel: 3, pad: 1}\n"
                                  "    - {type: bn, name: bn1}\n"
                                  "    - relu\n"
                                  "    - flatten\n"
                                  "    - {type: fc, name: fc, out: 3}\n"
                                  "dataset: synthetic\n"
                                  "batch_size: 4\n"
                                  "seed: 5\n";

typedef struct fixture {
    char dir[64], cfg_path[128], good[128], bad[128];
    hcnn_config cfg;
    hcnn_net net;
    float *momentum;
    hcnn_ckpt_file src; /* the good checkpoint, read back */
} fixture;

static int group_setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    *state = f;
    if (config_fixture_dir(f->dir, "/tmp/hcnn_test_ckpt_XXXXXX", f->cfg_path, sizeof f->cfg_path,
                           CONFIG))
        return -1;
    snprintf(f->good, sizeof f->good, "%s/good.hcnn", f->dir);
    snprintf(f->bad, sizeof f->bad, "%s/bad.hcnn", f->dir);
    if (hcnn_config_load(&f->cfg, f->cfg_path, NULL, 0) ||
        hcnn_net_create(&f->net, &f->cfg.model, hcnn_backend_cpu(), f->cfg.path) ||
        hcnn_net_init(&f->net, HCNN_INIT_HE, 5))
        return -1;
    for (size_t i = 0; i < f->net.nstate; i++)
        f->net.state[i] = 1.0f; /* running variances must be >= 0 */
    f->momentum = hcnn_alloc(f->net.nparams * sizeof(float) + 4, "momentum");
    if (!f->momentum)
        return -1;
    for (size_t i = 0; i < f->net.nparams; i++)
        f->momentum[i] = 0.25f * (float)i;
    hcnn_ckpt_meta meta = {.epoch = 2, .step = 40, .seed = 5, .batch_size = 4};
    snprintf(meta.model, sizeof meta.model, "validate");
    if (hcnn_ckpt_save(f->good, &f->net, f->momentum, &meta) ||
        hcnn_ckpt_read(f->good, &f->src))
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    fixture *f = *state;
    if (!f)
        return 0;
    hcnn_ckpt_close(&f->src);
    hcnn_net_free(&f->net);
    hcnn_free(f->momentum);
    unlink(f->good), unlink(f->bad), unlink(f->cfg_path);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* ---- the forger ---------------------------------------------------------- */

typedef struct buf {
    unsigned char p[1 << 16];
    size_t n;
} buf;

static void put(buf *b, const void *data, size_t n)
{
    assert_true(b->n + n <= sizeof b->p);
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }

/* What to write: the source's tensors in order, with changes.  Tensors
 * are named by 1 + their index in the source (0: none, from find()). */
typedef struct forgery {
    const char *meta;      /* META lines added after valid ones (NULL: none) */
    int skip;              /* tensor left out */
    int twice;             /* tensor written twice */
    int count_delta;       /* added to the TENSORS count field */
    int poison;            /* tensor whose first value becomes poison_value */
    float poison_value;
    int huge_dims;         /* tensor whose dims claim 2^31 each */
} forgery;

static void put_tensor(buf *b, const hcnn_ckpt_tensor *t, const forgery *g, int k)
{
    uint16_t len = (uint16_t)strlen(t->name);
    uint8_t role = (uint8_t)t->role, ndim = (uint8_t)t->ndim;
    put(b, &len, 2), put(b, t->name, len), put(b, &role, 1), put(b, &ndim, 1);
    for (int d = 0; d < t->ndim; d++) {
        uint32_t v = k + 1 == g->huge_dims ? 0x80000000u : (uint32_t)t->dims[d];
        put_u32(b, v);
    }
    uint64_t count = t->count;
    put(b, &count, 8);
    for (size_t i = 0; i < t->count; i++) {
        float v;
        memcpy(&v, t->data + i, sizeof v);
        if (k + 1 == g->poison && i == 0)
            v = g->poison_value;
        put(b, &v, 4);
    }
}

static void put_section(buf *file, uint32_t kind, const buf *payload)
{
    uint64_t len = payload->n;
    put_u32(file, kind), put_u32(file, 0), put(file, &len, 8);
    put(file, payload->p, payload->n);
    put_u32(file, hcnn_crc32(0, payload->p, payload->n));
}

static void forge(const fixture *f, const forgery *g)
{
    static buf meta, tensors, file; /* large: not on the stack */
    meta.n = tensors.n = file.n = 0;
    char text[512];
    snprintf(text, sizeof text,
             "model_hash=%016llx\nmodel_hash_version=2\nmodel=validate\nepoch=2\nstep=40\nseed=5\nbatch=0\n"
             "batch_size=4\n%s",
             (unsigned long long)f->net.model_hash, g->meta ? g->meta : "");
    put(&meta, text, strlen(text));
    int written = 0;
    for (int k = 0; k < f->src.ntensors; k++)
        written += (k + 1 != g->skip) + (k + 1 == g->twice);
    put_u32(&tensors, (uint32_t)(written + g->count_delta));
    for (int k = 0; k < f->src.ntensors; k++) {
        if (k + 1 == g->skip)
            continue;
        put_tensor(&tensors, &f->src.tensors[k], g, k);
        if (k + 1 == g->twice)
            put_tensor(&tensors, &f->src.tensors[k], g, k);
    }
    put(&file, "HCNNCKPT", 8);
    put_u32(&file, HCNN_CKPT_VERSION), put_u32(&file, 0x01020304u), put_u32(&file, 2);
    put_section(&file, 1, &meta);
    put_section(&file, 2, &tensors);
    write_file(f->bad, file.p, file.n);
}

static int find(const fixture *f, const char *name, int role)
{
    for (int k = 0; k < f->src.ntensors; k++)
        if (!strcmp(f->src.tensors[k].name, name) && f->src.tensors[k].role == role)
            return k + 1;
    fail_msg("tensor %s (role %d) not in the checkpoint", name, role);
    return 0;
}

/* The forged file must be refused with a message holding each string, and
 * leave the network's parameters as they were. */
static void expect_refused(fixture *f, const forgery *g, ...)
{
    forge(f, g);
    float before = f->net.params[0];
    f->net.params[0] = 12345.0f;
    hcnn_ckpt_meta meta;
    capture c;
    capture_begin(&c);
    int rc = hcnn_ckpt_load(f->bad, &f->net, f->momentum, &meta);
    va_list ap;
    va_start(ap, g);
    capture_end_v(&c, ap);
    va_end(ap);
    assert_int_not_equal(rc, HCNN_OK);
    assert_true(f->net.params[0] == 12345.0f);
    f->net.params[0] = before;
}

/* ---- tests ------------------------------------------------------------ */

static void test_forger_writes_loadable_files(void **state)
{
    fixture *f = *state;
    forge(f, &(forgery){0});
    hcnn_ckpt_meta meta;
    assert_int_equal(hcnn_ckpt_load(f->bad, &f->net, f->momentum, &meta), HCNN_OK);
    assert_int_equal(meta.step, 40);
    assert_int_equal(meta.epoch, 2);
}

static void test_duplicate_and_missing(void **state)
{
    fixture *f = *state;
    /* same count as the real one: conv1.bias twice, fc.weight left out */
    expect_refused(f,
                   &(forgery){.skip = find(f, "fc.weight", 0),
                              .twice = find(f, "conv1.bias", 0)},
                   f->bad, "conv1.bias", "twice", NULL);
    expect_refused(f, &(forgery){.skip = find(f, "fc.weight", 0)}, f->bad,
                   "fc.weight is missing", NULL);
}

static void test_momentum_partial_or_twice(void **state)
{
    fixture *f = *state;
    expect_refused(f, &(forgery){.skip = find(f, "conv1.weight", 2)}, f->bad,
                   "momentum", "conv1.weight", NULL);
    expect_refused(f, &(forgery){.twice = find(f, "fc.bias", 2)}, f->bad,
                   "fc.bias (momentum) appears twice", NULL);
}

static void test_count_smaller_than_tensors(void **state)
{
    fixture *f = *state;
    expect_refused(f, &(forgery){.count_delta = -1}, f->bad, "bytes after", NULL);
    expect_refused(f, &(forgery){.count_delta = 1}, f->bad, NULL);
}

static void test_non_finite_values(void **state)
{
    fixture *f = *state;
    expect_refused(f, &(forgery){.poison = find(f, "fc.weight", 0), .poison_value = NAN},
                   f->bad, "fc.weight", "finite", NULL);
    expect_refused(f,
                   &(forgery){.poison = find(f, "conv1.weight", 2),
                              .poison_value = -INFINITY},
                   f->bad, "conv1.weight (momentum)", NULL);
    expect_refused(f,
                   &(forgery){.poison = find(f, "bn1.running_var", 1),
                              .poison_value = -1.0f},
                   f->bad, "bn1.running_var", "non-negative", NULL);
}

static void test_dims_overflow(void **state)
{
    fixture *f = *state;
    expect_refused(f, &(forgery){.huge_dims = find(f, "fc.weight", 0)}, f->bad,
                   "fc.weight", "dimension", NULL);
}

static void test_metadata_ranges(void **state)
{
    fixture *f = *state;
    /* later lines override the valid ones written first */
    static const char *const bad[][2] = {
        {"step=-100\n", "step=-100"},
        {"epoch=-5\n", "epoch=-5"},
        {"step=9223372036854775807\n", "step=9223372036854775807"},
        {"step=12abc\n", "step=12abc"},
        {"batch_size=-1\n", "batch_size=-1"},
        {"lr=nan\n", "lr=nan"},
        {"loss_sum=-inf\n", "loss_sum=-inf"},
        {"batch=41\n", "inconsistent"},
        {"seen=3\ncorrect=4\n", "inconsistent"},
        {"model_hash=-1\n", "model_hash=-1"},
        {"run_id=../../etc\n", "run_id=../../etc: expected at most 39 letters, digits or -_.:"},
        {"parent_run=a b\n", "parent_run=a b"},
        {"slurm_job=12345678901234567890123456789012\n", "slurm_job="},
        {"model_hash_version=3\n", "model_hash_version=3"},
        {"train_samples=-4\n", "train_samples=-4"},
        {"written=inf\n", "written=inf"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_refused(f, &(forgery){.meta = bad[i][0]}, f->bad, bad[i][1], NULL);
}

/* ---- which checkpoint --resume takes ---------------------------------------- */

/* dir/ckpt-s<step>[-tag].hcnn of run `run`, written (by its META) at `written` */
static void save_at(fixture *f, const char *dir, long step, const char *run, double written,
                    const char *job, const char *tag)
{
    char path[256];
    hcnn_ckpt_name(path, sizeof path, dir, step, tag);
    hcnn_ckpt_meta meta = {.epoch = 1, .step = step, .seed = 5, .batch_size = 4,
                           .written = written};
    snprintf(meta.model, sizeof meta.model, "validate");
    snprintf(meta.run_id, sizeof meta.run_id, "%s", run);
    snprintf(meta.slurm_job, sizeof meta.slurm_job, "%s", job);
    assert_int_equal(hcnn_ckpt_save(path, &f->net, f->momentum, &meta), HCNN_OK);
}

static long picked_step(fixture *f, const char *dir, const char *job)
{
    const hcnn_run_ident want = {.net = &f->net, .model = "validate", .dataset = "",
                                 .seed = 5, .slurm_job = job, .cfg_path = f->cfg_path};
    char path[HCNN_FILE_PATH_MAX + 48];
    assert_int_equal(hcnn_ckpt_pick_resume(dir, &want, 1, path, sizeof path), HCNN_OK);
    hcnn_ckpt_meta meta;
    assert_int_equal(hcnn_ckpt_read_meta(path, &meta, 0), HCNN_OK);
    return meta.step;
}

/* One line written by three segments, the second on a node whose clock ran
 * an hour ahead: its step 20 records the newest write time, yet the line
 * goes on from step 30 (the newest write picked step 20 before, and the
 * run resuming it started a roll-back line).  Inside a Slurm job likewise;
 * and a torn file past the head of the line is refused, not skipped. */
static void test_resume_takes_highest_step_not_newest_clock(void **state)
{
    fixture *f = *state;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/line", f->dir);
    assert_int_equal(hcnn_mkdir_p(dir), HCNN_OK);
    const char *run = "20261127T100000Z-abc123";
    save_at(f, dir, 10, run, 1000.0, "77", NULL);
    save_at(f, dir, 20, run, 1000.0 + 3600.0 + 60.0, "77", NULL); /* a clock 1 h ahead */
    save_at(f, dir, 30, run, 1120.0, "77", NULL);
    assert_int_equal(picked_step(f, dir, ""), 30);
    assert_int_equal(picked_step(f, dir, "77"), 30);
    /* another run's line in the same directory, written last: its own head */
    const char *other = "20261127T110000Z-def456";
    save_at(f, dir, 5, other, 5000.0, "", "def456");
    save_at(f, dir, 15, other, 4990.0, "", "def456");
    assert_int_equal(picked_step(f, dir, ""), 15);
    assert_int_equal(picked_step(f, dir, "77"), 30); /* the job's own line */
    /* a torn step 40 of the job's line: refused with the cause, not passed over */
    char torn[256];
    hcnn_ckpt_name(torn, sizeof torn, dir, 40, NULL);
    assert_int_equal(hcnn_write_file(torn, "HCNNCKPT", 8), HCNN_OK);
    const hcnn_run_ident want = {.net = &f->net, .model = "validate", .dataset = "", .seed = 5,
                                 .slurm_job = "77", .cfg_path = f->cfg_path};
    char path[HCNN_FILE_PATH_MAX + 48];
    capture cap;
    capture_begin(&cap);
    const int rc = hcnn_ckpt_pick_resume(dir, &want, 1, path, sizeof path);
    capture_end(&cap, "ckpt-s0000000040.hcnn, cannot be read (not an hcnn checkpoint", NULL);
    assert_int_equal(rc, HCNN_EFORMAT);
    unlink(torn);
    for (long s = 5; s <= 30; s += 5) {
        char p[256];
        hcnn_ckpt_name(p, sizeof p, dir, s, s == 5 || s == 15 ? "def456" : NULL);
        unlink(p);
    }
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forger_writes_loadable_files),
        cmocka_unit_test(test_duplicate_and_missing),
        cmocka_unit_test(test_momentum_partial_or_twice),
        cmocka_unit_test(test_count_smaller_than_tensors),
        cmocka_unit_test(test_non_finite_values),
        cmocka_unit_test(test_dims_overflow),
        cmocka_unit_test(test_metadata_ranges),
        cmocka_unit_test(test_resume_takes_highest_step_not_newest_clock),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
