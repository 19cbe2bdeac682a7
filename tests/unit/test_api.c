/* Tests of the C API as a client sees it: only include/hcnn/hcnn.h.
 *
 * A small model with batch-norm on seeded synthetic data, written to a
 * mkdtemp directory, is trained in-process (twice in one process: a stop
 * requested by the progress callback, then resumed to the end), its
 * checkpoint read as arrays and written back through the import's
 * validation, and the loader's batches pulled and held; bad arguments get
 * a code and one message naming what was wrong (hcnn_last_error).  One
 * function of the library's inside is declared here: hcnn_fatal_at, to
 * raise a fatal error inside a call (from its progress callback). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcnn/hcnn.h"

/* include/hcnn/common.h's; exported (an hcnn_ name), not part of hcnn.h */
_Noreturn void hcnn_fatal_at(const char *file, int line, const char *fmt, ...);

static char dir[64], cfg_path[128], ckpt_dir[128];

static const char config[] =
    "model:\n"
    "  name: tiny_bn\n"
    "  input: [1, 8, 8]\n"
    "  classes: 3\n"
    "  blocks:\n"
    "    - {type: conv, name: conv1, out: 4, kernel: 3, pad: 1}\n"
    "    - {type: bn, name: bn1}\n"
    "    - relu\n"
    "    - {type: maxpool, kernel: 2}\n"
    "    - flatten\n"
    "    - {type: fc, name: fc, out: 3}\n"
    "dataset: synthetic\n"
    "synthetic_train: 96\n"
    "synthetic_test: 32\n"
    "epochs: 2\n"
    "batch_size: 16\n"
    "lr: 0.05\n"
    "seed: 7\n"
    "csv: \"\"\n"
    "blas_kernels: env\n";

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hcnn-api-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(cfg_path, sizeof cfg_path, "%s/tiny.yaml", dir);
    snprintf(ckpt_dir, sizeof ckpt_dir, "checkpoint_dir=%s/ck", dir);
    FILE *f = fopen(cfg_path, "w");
    if (!f)
        return -1;
    fputs(config, f);
    fclose(f);
    hcnn_set_error_output(0); /* the messages are checked, not printed */
    hcnn_catch_fatal();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    hcnn_finalize();
    return system(cmd) == 0 ? 0 : -1;
}

static hcnn_session *open_session(const char *extra)
{
    const char *sets[2] = {ckpt_dir, extra};
    hcnn_session *s = NULL;
    assert_int_equal(hcnn_session_open(&s, cfg_path, sets, extra ? 2 : 1), HCNN_OK);
    assert_non_null(s);
    return s;
}

/* ---- errors: a code and the command line's message ----------------------- */

static void test_bad_key_and_file(void **state)
{
    (void)state;
    hcnn_session *s = (hcnn_session *)1;
    const char *sets[] = {"no_such_key=1"};
    assert_int_equal(hcnn_session_open(&s, cfg_path, sets, 1), HCNN_EINVAL);
    assert_null(s);
    assert_non_null(strstr(hcnn_last_error(), "unknown key 'no_such_key'"));
    assert_int_not_equal(hcnn_session_open(&s, "/nonexistent/x.yaml", NULL, 0), HCNN_OK);
    assert_non_null(strstr(hcnn_last_error(), "/nonexistent/x.yaml"));
    /* a call that succeeds forgets the last error */
    s = open_session(NULL);
    assert_string_equal(hcnn_last_error(), "");
    hcnn_session_close(s);
    assert_int_equal(hcnn_api_version(), HCNN_API_VERSION);
}

/* ---- the loader's batches -------------------------------------------------- */

static void test_batches_held_and_shapes(void **state)
{
    (void)state;
    hcnn_session *s = open_session(NULL);
    hcnn_batches *b = NULL;
    assert_int_equal(hcnn_batches_open(s, HCNN_SPLIT_TRAIN, 1, 2, 0, &b), HCNN_OK);
    assert_int_equal(hcnn_batches_count(b), 6); /* 96 / 16 */
    int c, h, w;
    hcnn_batches_shape(b, &c, &h, &w);
    assert_true(c == 1 && h == 8 && w == 8);
    hcnn_batch *held = NULL, *k = NULL;
    assert_int_equal(hcnn_batches_next(b, &held), HCNN_OK);
    assert_non_null(held);
    assert_int_equal(held->n, 8); /* rank 1 of 2: samples [8, 16) of the batch */
    assert_int_equal(held->first, 8);
    const size_t bytes = sizeof(float) * (size_t)held->n * c * h * w;
    float *copy = malloc(bytes);
    int32_t labels[8];
    assert_non_null(copy);
    memcpy(copy, held->images, bytes);
    memcpy(labels, held->labels, sizeof labels);
    for (int i = 0; i < 3; i++) { /* three more pulled: the held batch is untouched */
        assert_int_equal(hcnn_batches_next(b, &k), HCNN_OK);
        assert_non_null(k);
        assert_ptr_not_equal(k->images, held->images);
        assert_int_equal(k->index, i + 1);
        hcnn_batch_release(k);
    }
    assert_memory_equal(copy, held->images, bytes);
    assert_memory_equal(labels, held->labels, sizeof labels);
    int left = 0;
    while (hcnn_batches_next(b, &k) == HCNN_OK && k) {
        left++;
        hcnn_batch_release(k);
    }
    assert_int_equal(left, 2);
    hcnn_batches_close(b); /* the held batch outlives its loader */
    assert_memory_equal(copy, held->images, bytes);
    hcnn_batch_release(held);
    free(copy);
    hcnn_session_close(s);
}

/* two ranks' shards of a batch are world 1's batch, in order */
static void test_batches_shards(void **state)
{
    (void)state;
    hcnn_session *s = open_session(NULL);
    hcnn_batches *all, *r0, *r1;
    assert_int_equal(hcnn_batches_open(s, HCNN_SPLIT_TRAIN, 0, 1, 1, &all), HCNN_OK);
    assert_int_equal(hcnn_batches_open(s, HCNN_SPLIT_TRAIN, 0, 2, 1, &r0), HCNN_OK);
    assert_int_equal(hcnn_batches_open(s, HCNN_SPLIT_TRAIN, 1, 2, 1, &r1), HCNN_OK);
    hcnn_batch *a, *x, *y;
    while (hcnn_batches_next(all, &a) == HCNN_OK && a) {
        assert_int_equal(hcnn_batches_next(r0, &x), HCNN_OK);
        assert_int_equal(hcnn_batches_next(r1, &y), HCNN_OK);
        const size_t per = 64;
        assert_int_equal(x->n + y->n, a->n);
        assert_memory_equal(a->images, x->images, sizeof(float) * per * x->n);
        assert_memory_equal(a->images + per * x->n, y->images, sizeof(float) * per * y->n);
        assert_memory_equal(a->labels + x->n, y->labels, sizeof(int32_t) * y->n);
        hcnn_batch_release(a), hcnn_batch_release(x), hcnn_batch_release(y);
    }
    hcnn_batches_close(all), hcnn_batches_close(r0), hcnn_batches_close(r1);
    hcnn_session_close(s);
}

/* a loader restarted at epoch 1 gives what one opened at epoch 1 gives */
static void test_batches_restart(void **state)
{
    (void)state;
    hcnn_session *s = open_session(NULL);
    hcnn_batches *again, *fresh;
    assert_int_equal(hcnn_batches_open(s, HCNN_SPLIT_TRAIN, 0, 1, 0, &again), HCNN_OK);
    assert_int_equal(hcnn_batches_open(s, HCNN_SPLIT_TRAIN, 0, 1, 1, &fresh), HCNN_OK);
    hcnn_batch *a, *b;
    assert_int_equal(hcnn_batches_next(again, &a), HCNN_OK); /* mid-epoch 0, one held */
    assert_int_equal(hcnn_batches_restart(again, 1), HCNN_OK);
    int n = 0;
    while (hcnn_batches_next(fresh, &b) == HCNN_OK && b) {
        hcnn_batch *c;
        assert_int_equal(hcnn_batches_next(again, &c), HCNN_OK);
        assert_non_null(c);
        assert_int_equal(c->index, n++);
        assert_int_equal(c->n, b->n);
        assert_memory_equal(c->images, b->images, sizeof(float) * 64 * b->n);
        assert_memory_equal(c->labels, b->labels, sizeof(int32_t) * b->n);
        hcnn_batch_release(b), hcnn_batch_release(c);
    }
    assert_int_equal(n, 6);
    assert_int_equal(hcnn_batches_restart(again, 2), HCNN_EINVAL);
    hcnn_batch_release(a);
    hcnn_batches_close(again), hcnn_batches_close(fresh);
    hcnn_session_close(s);
}

static void test_batches_bad_arguments(void **state)
{
    (void)state;
    hcnn_session *s = open_session(NULL);
    hcnn_batches *b = NULL;
    assert_int_equal(hcnn_batches_open(s, HCNN_SPLIT_TRAIN, 2, 2, 0, &b), HCNN_EINVAL);
    assert_non_null(strstr(hcnn_last_error(), "rank 2"));
    assert_int_equal(hcnn_batches_open(s, HCNN_SPLIT_TRAIN, 0, 0, 0, &b), HCNN_EINVAL);
    assert_non_null(strstr(hcnn_last_error(), "world 0"));
    assert_int_equal(hcnn_batches_open(s, 7, 0, 1, 0, &b), HCNN_EINVAL);
    assert_non_null(strstr(hcnn_last_error(), "split 7"));
    assert_int_equal(hcnn_batches_open(s, HCNN_SPLIT_TEST, 0, 1, 2, &b), HCNN_EINVAL);
    assert_non_null(strstr(hcnn_last_error(), "epoch 2"));
    assert_null(b);
    hcnn_session_close(s);
}

/* ---- training in-process: a stop, a resume, the checkpoint as arrays ------- */

typedef struct seen {
    int steps, epochs, stop_at;
    double last_test_acc;
} seen;

static int progress(void *arg, const hcnn_progress *p)
{
    seen *s = arg;
    if (p->kind == HCNN_PROGRESS_STEP)
        s->steps++;
    else {
        s->epochs++;
        s->last_test_acc = p->test_acc;
        assert_true(p->test_acc >= 0.0 && p->test_acc <= 1.0);
    }
    return s->stop_at > 0 && p->step >= s->stop_at;
}

static void test_train_stop_resume_and_arrays(void **state)
{
    (void)state;
    hcnn_session *s = open_session(NULL);
    seen a = {.stop_at = 3};
    hcnn_train_options o = {.quiet = 1, .progress = progress, .progress_arg = &a};
    /* the request is agreed on in the next step's exchange (as a signal's),
     * so that step completes too: the run stops within one step */
    assert_int_equal(hcnn_session_train(s, &o), HCNN_STOPPED);
    assert_int_equal(a.steps, 4);
    assert_int_equal(a.epochs, 0);
    seen b = {0};
    o = (hcnn_train_options){.quiet = 1, .resume = "latest", .progress = progress,
                             .progress_arg = &b};
    assert_int_equal(hcnn_session_train(s, &o), HCNN_OK); /* the same process, again */
    assert_int_equal(b.steps, 12 - 4);
    assert_int_equal(b.epochs, 2);
    double loss, acc;
    char final[192];
    snprintf(final, sizeof final, "%s/ck/final.hcnn", dir);
    assert_int_equal(hcnn_session_evaluate(s, final, 1, &loss, &acc), HCNN_OK);
    assert_true(acc == b.last_test_acc);

    /* as hcnn export: conv1.weight, conv1.bias, bn1.{weight, bias}, bn1's
     * statistics and num_batches_tracked, fc.{weight, bias} */
    hcnn_checkpoint *c = NULL;
    assert_int_equal(hcnn_checkpoint_read(final, &c), HCNN_OK);
    const int n = hcnn_checkpoint_count(c);
    assert_int_equal(n, 9);
    hcnn_array arr[9];
    int tracked = -1;
    for (int i = 0; i < n; i++) {
        assert_int_equal(hcnn_checkpoint_array(c, i, &arr[i]), HCNN_OK);
        assert_int_equal((uintptr_t)arr[i].data % 64, 0);
        if (!strcmp(arr[i].name, "bn1.num_batches_tracked"))
            tracked = i;
    }
    assert_int_equal(tracked, 6); /* after running_var, where PyTorch has it */
    assert_int_equal(arr[tracked].dtype, HCNN_DTYPE_I64);
    assert_int_equal(*(const int64_t *)arr[tracked].data, 12);
    assert_string_equal(arr[0].name, "conv1.weight");
    assert_true(arr[0].ndim == 4 && arr[0].dims[0] == 4 && arr[0].dims[1] == 1);
    assert_non_null(strstr(hcnn_checkpoint_meta(c), "step=12\n"));

    /* written back through the import's validation, read again: the same */
    char copy[192];
    snprintf(copy, sizeof copy, "%s/copy.hcnn", dir);
    assert_int_equal(hcnn_checkpoint_write(s, copy, arr, n), HCNN_OK);
    hcnn_checkpoint *d = NULL;
    assert_int_equal(hcnn_checkpoint_read(copy, &d), HCNN_OK);
    assert_int_equal(hcnn_checkpoint_count(d), n);
    for (int i = 0; i < n; i++) {
        hcnn_array e;
        assert_int_equal(hcnn_checkpoint_array(d, i, &e), HCNN_OK);
        assert_string_equal(e.name, arr[i].name);
        if (e.dtype == HCNN_DTYPE_F32) {
            size_t count = 1;
            for (int k = 0; k < e.ndim; k++)
                count *= (size_t)e.dims[k];
            assert_memory_equal(e.data, arr[i].data, count * sizeof(float));
        }
    }
    hcnn_checkpoint_free(d);

    /* what the import refuses: a wrong shape, a name not in the model, a
     * missing tensor, a non-finite value; nothing is written */
    char bad[192];
    snprintf(bad, sizeof bad, "%s/bad.hcnn", dir);
    hcnn_array wrong[9];
    memcpy(wrong, arr, sizeof wrong);
    wrong[0].dims[0] = 5;
    assert_int_equal(hcnn_checkpoint_write(s, bad, wrong, n), HCNN_EFORMAT);
    assert_non_null(strstr(hcnn_last_error(), "conv1.weight: shape (5, 1, 3, 3) found"));
    memcpy(wrong, arr, sizeof wrong);
    wrong[1].name = "conv9.bias";
    assert_int_equal(hcnn_checkpoint_write(s, bad, wrong, n), HCNN_EFORMAT);
    assert_non_null(strstr(hcnn_last_error(), "tensor conv9.bias is not part of the model"));
    assert_int_equal(hcnn_checkpoint_write(s, bad, arr + 1, n - 1), HCNN_EINVAL);
    assert_non_null(strstr(hcnn_last_error(), "tensor conv1.weight of the model"));
    float nan_w[36];
    memcpy(nan_w, arr[0].data, sizeof nan_w);
    nan_w[5] = 0.0f / 0.0f;
    memcpy(wrong, arr, sizeof wrong);
    wrong[0].data = nan_w;
    assert_int_equal(hcnn_checkpoint_write(s, bad, wrong, n), HCNN_EFORMAT);
    assert_non_null(strstr(hcnn_last_error(), "element 5 of conv1.weight is "));
    assert_non_null(strstr(hcnn_last_error(), "(expected finite values)"));
    assert_int_equal(access(bad, F_OK), -1);
    hcnn_checkpoint_free(c);
    hcnn_session_close(s);
}

/* hcnn_catch_fatal: a fatal error inside a call (a single-process run, on
 * the caller's thread) ends the call with HCNN_EFATAL and its message; the
 * session is unusable after it, the process goes on */
static int fatal_progress(void *arg, const hcnn_progress *p)
{
    (void)arg;
    if (p->step == 2)
        hcnn_fatal_at("test_api.c", 1, "a fatal error at step %ld", p->step);
    return 0;
}

static void test_fatal_comes_back(void **state)
{
    (void)state;
    hcnn_session *s = open_session("checkpoint_dir=");
    hcnn_train_options o = {.quiet = 1, .progress = fatal_progress};
    assert_int_equal(hcnn_session_train(s, &o), HCNN_EFATAL);
    assert_non_null(strstr(hcnn_last_error(), "fatal at test_api.c:1: a fatal error at step 2"));
    o.progress = NULL;
    assert_int_equal(hcnn_session_train(s, &o), HCNN_EINVAL);
    assert_non_null(strstr(hcnn_last_error(), "this session failed earlier"));
    hcnn_session_close(s);
    s = open_session("checkpoint_dir="); /* another session works */
    assert_int_equal(hcnn_session_evaluate(s, "/nonexistent.hcnn", 1, NULL, NULL), HCNN_EIO);
    hcnn_session_close(s);
}

/* a torn checkpoint: a code and the message, no crash */
static void test_torn_checkpoint(void **state)
{
    (void)state;
    char final[192], torn[192], cmd[512];
    snprintf(final, sizeof final, "%s/ck/final.hcnn", dir);
    snprintf(torn, sizeof torn, "%s/torn.hcnn", dir);
    snprintf(cmd, sizeof cmd, "head -c 300 %s > %s", final, torn);
    assert_int_equal(system(cmd), 0);
    hcnn_checkpoint *c = (hcnn_checkpoint *)1;
    assert_int_not_equal(hcnn_checkpoint_read(torn, &c), HCNN_OK);
    assert_null(c);
    assert_non_null(strstr(hcnn_last_error(), torn));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_key_and_file),
        cmocka_unit_test(test_batches_held_and_shapes),
        cmocka_unit_test(test_batches_shards),
        cmocka_unit_test(test_batches_restart),
        cmocka_unit_test(test_batches_bad_arguments),
        cmocka_unit_test(test_train_stop_resume_and_arrays),
        cmocka_unit_test(test_torn_checkpoint),
        cmocka_unit_test(test_fatal_comes_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
