/* Tests for the configuration reader/writer (src/config/).
 *
 * YAML files are written to a mkdtemp directory; shipped configs are read
 * from $HCNN_SRCDIR/configs (default: ./configs, i.e. run from the source
 * root).  Error cases capture stderr and check that the message names the
 * file and the key. */
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

#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/strategy.h"

/* ---- fixture --------------------------------------------------------- */

/* Test-only state shared by the cases of the group (the library itself has
 * no global state).  Two configurations are ~60 KB, so they live here
 * rather than on the stack. */
static struct {
    char dir[256];
    char path[512];      /* last file written by write_file */
    char err_path[512];  /* where stderr is captured */
    char msg[8192];      /* last captured stderr */
    hcnn_config a, b;
} fx;

static int group_setup(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(fx.dir, sizeof fx.dir, "%s/hcnn_test_config.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx.dir))
        return -1;
    snprintf(fx.err_path, sizeof fx.err_path, "%s/stderr.txt", fx.dir);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    DIR *d = opendir(fx.dir);
    if (!d)
        return -1;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", fx.dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    return rmdir(fx.dir);
}

static const char *write_file(const char *name, const char *text)
{
    snprintf(fx.path, sizeof fx.path, "%s/%s", fx.dir, name);
    FILE *f = fopen(fx.path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    return fx.path;
}

static const char *shipped(const char *name, char *buf, size_t size)
{
    const char *src = getenv("HCNN_SRCDIR");
    snprintf(buf, size, "%s/configs/%s", src && *src ? src : ".", name);
    return buf;
}

/* stderr into fx.err_path until stderr_back, which returns it to where it
 * was and puts the text written meanwhile in fx.msg. */
static int stderr_to_file(void)
{
    fflush(stderr);
    int saved = dup(2);
    int fd = open(fx.err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    return saved;
}

static void stderr_back(int saved)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(fx.err_path, "r");
    assert_non_null(f);
    size_t n = fread(fx.msg, 1, sizeof fx.msg - 1, f);
    fx.msg[n] = '\0';
    fclose(f);
}

/* Load with stderr redirected to a file; the text ends up in fx.msg. */
static int load_capture(hcnn_config *cfg, const char *path, const char *const *sets, int nset)
{
    const int saved = stderr_to_file();
    const int rc = hcnn_config_load(cfg, path, sets, nset);
    stderr_back(saved);
    return rc;
}

static void assert_msg_contains(const char *needle)
{
    if (!strstr(fx.msg, needle))
        fail_msg("expected the message to contain \"%s\", got: %s", needle, fx.msg);
}

/* A small valid configuration (9 lines) that the cases extend. */
static const char BASE[] = "model:\n"                                    /* 1 */
                           "  input: [1, 8, 8]\n"                        /* 2 */
                           "  classes: 3\n"                              /* 3 */
                           "  blocks:\n"                                 /* 4 */
                           "    - {type: conv, out: 4, kernel: 3, pad: 1}\n" /* 5 */
                           "    - relu\n"                                /* 6 */
                           "    - flatten\n"                             /* 7 */
                           "    - {type: fc, out: 3}\n"                  /* 8 */
                           "dataset: synthetic\n";                       /* 9 */

static const char *write_base_plus(const char *extra)
{
    static char text[4096];
    snprintf(text, sizeof text, "%s%s", BASE, extra ? extra : "");
    return write_file("cfg.yaml", text);
}

/* ---- comparison ------------------------------------------------------ */

static void assert_block_equal(const hcnn_block_spec *x, const hcnn_block_spec *y)
{
    assert_int_equal(x->kind, y->kind);
    assert_string_equal(x->name, y->name);
    assert_int_equal(x->out, y->out);
    assert_int_equal(x->kh, y->kh);
    assert_int_equal(x->kw, y->kw);
    assert_int_equal(x->sh, y->sh);
    assert_int_equal(x->sw, y->sw);
    assert_int_equal(x->ph, y->ph);
    assert_int_equal(x->pw, y->pw);
    assert_int_equal(x->bias, y->bias);
    assert_true(x->p == y->p);
    assert_true(x->eps == y->eps);
    assert_true(x->momentum == y->momentum);
    assert_int_equal(x->shortcut, y->shortcut);
}

/* Every field except the path. */
static void assert_config_equal(const hcnn_config *x, const hcnn_config *y)
{
    assert_string_equal(x->model.name, y->model.name);
    assert_int_equal(x->model.in_c, y->model.in_c);
    assert_int_equal(x->model.in_h, y->model.in_h);
    assert_int_equal(x->model.in_w, y->model.in_w);
    assert_int_equal(x->model.classes, y->model.classes);
    assert_int_equal(x->model.nblocks, y->model.nblocks);
    for (int i = 0; i < x->model.nblocks; i++)
        assert_block_equal(&x->model.blocks[i], &y->model.blocks[i]);
    assert_string_equal(x->dataset, y->dataset);
    assert_string_equal(x->data_dir, y->data_dir);
    assert_int_equal(x->synthetic_train, y->synthetic_train);
    assert_int_equal(x->synthetic_test, y->synthetic_test);
    assert_int_equal(x->epochs, y->epochs);
    assert_int_equal(x->batch_size, y->batch_size);
    assert_int_equal(x->eval_batch_size, y->eval_batch_size);
    assert_true(x->lr == y->lr);
    assert_true(x->momentum == y->momentum);
    assert_int_equal(x->nesterov, y->nesterov);
    assert_true(x->weight_decay == y->weight_decay);
    assert_int_equal(x->schedule, y->schedule);
    assert_true(x->warmup_epochs == y->warmup_epochs);
    assert_int_equal(x->lr_step_epochs, y->lr_step_epochs);
    assert_true(x->lr_gamma == y->lr_gamma);
    assert_true(x->min_lr == y->min_lr);
    assert_int_equal(x->init, y->init);
    assert_true(x->seed == y->seed);
    assert_int_equal(x->threads, y->threads);
    assert_int_equal(x->strategy, y->strategy);
    assert_true(x->max_steps == y->max_steps);
    assert_true(x->train_limit == y->train_limit);
    assert_true(x->test_limit == y->test_limit);
    assert_int_equal(x->shuffle, y->shuffle);
    assert_int_equal(x->augment, y->augment);
    assert_string_equal(x->csv, y->csv);
    assert_string_equal(x->checkpoint_dir, y->checkpoint_dir);
    assert_int_equal(x->progress_every, y->progress_every);
    assert_int_equal(x->conv_algo, y->conv_algo);
    assert_int_equal(x->data_prefetch, y->data_prefetch);
}

/* write -> load gives the same configuration, field by field and byte by
 * byte (the loader zeroes unused bytes, so memcmp is meaningful). */
static void assert_round_trip(const hcnn_config *cfg)
{
    char out[600];
    snprintf(out, sizeof out, "%s/written.yaml", fx.dir);
    assert_int_equal(hcnn_config_write(cfg, out), HCNN_OK);
    int rc = load_capture(&fx.b, out, NULL, 0);
    if (rc)
        fail_msg("reloading the written config failed: %s", fx.msg);
    assert_config_equal(cfg, &fx.b);
    memcpy(fx.b.path, cfg->path, sizeof fx.b.path);
    assert_memory_equal(cfg, &fx.b, sizeof *cfg);
}

/* ---- shipped configs ------------------------------------------------- */

static void assert_block(const hcnn_block_spec *b, hcnn_block_kind kind, const char *name, int out, int k, int s,
                         int pad)
{
    assert_int_equal(b->kind, kind);
    assert_string_equal(b->name, name);
    assert_int_equal(b->out, out);
    assert_int_equal(b->kh, k);
    assert_int_equal(b->kw, k);
    assert_int_equal(b->sh, s);
    assert_int_equal(b->sw, s);
    assert_int_equal(b->ph, pad);
    assert_int_equal(b->pw, pad);
}

static void load_shipped(const char *name)
{
    char path[1024];
    shipped(name, path, sizeof path);
    int rc = hcnn_config_load(&fx.a, path, NULL, 0);
    if (rc)
        fail_msg("cannot load %s (set HCNN_SRCDIR to the source root)", path);
    assert_string_equal(fx.a.path, path);
}

static void check_lenet_model(const hcnn_model_spec *m)
{
    assert_string_equal(m->name, "lenet5");
    assert_int_equal(m->in_c, 1);
    assert_int_equal(m->in_h, 28);
    assert_int_equal(m->in_w, 28);
    assert_int_equal(m->classes, 10);
    assert_int_equal(m->nblocks, 12);
    assert_block(&m->blocks[0], HCNN_BLOCK_CONV, "conv1", 6, 5, 1, 2);
    assert_int_equal(m->blocks[0].bias, 1);
    assert_block(&m->blocks[1], HCNN_BLOCK_RELU, "", 0, 0, 0, 0);
    assert_block(&m->blocks[2], HCNN_BLOCK_MAXPOOL, "", 0, 2, 2, 0);
    assert_block(&m->blocks[3], HCNN_BLOCK_CONV, "conv2", 16, 5, 1, 0);
    assert_block(&m->blocks[5], HCNN_BLOCK_MAXPOOL, "", 0, 2, 2, 0);
    assert_block(&m->blocks[6], HCNN_BLOCK_FLATTEN, "", 0, 0, 0, 0);
    assert_block(&m->blocks[7], HCNN_BLOCK_FC, "fc1", 120, 0, 0, 0);
    assert_block(&m->blocks[9], HCNN_BLOCK_FC, "fc2", 84, 0, 0, 0);
    assert_block(&m->blocks[11], HCNN_BLOCK_FC, "fc3", 10, 0, 0, 0);
    assert_int_equal(m->blocks[11].bias, 1);
}

static void test_shipped_mnist(void **state)
{
    (void)state;
    load_shipped("mnist_lenet.yaml");
    check_lenet_model(&fx.a.model);
    assert_string_equal(fx.a.dataset, "mnist");
    assert_string_equal(fx.a.data_dir, "data/mnist");
    assert_int_equal(fx.a.epochs, 1);
    assert_int_equal(fx.a.batch_size, 64);
    assert_true(fx.a.lr == 0.03);
    assert_true(fx.a.momentum == 0.9);
    assert_int_equal(fx.a.schedule, HCNN_SCHED_COSINE);
    assert_int_equal(fx.a.init, HCNN_INIT_XAVIER);
    assert_true(fx.a.seed == 42);
    assert_string_equal(fx.a.csv, "runs/mnist_lenet.csv");
    assert_string_equal(fx.a.checkpoint_dir, "runs/mnist_lenet");
    assert_round_trip(&fx.a);
}

static void test_shipped_fashion(void **state)
{
    (void)state;
    load_shipped("fashion_lenet.yaml");
    check_lenet_model(&fx.a.model);
    assert_string_equal(fx.a.dataset, "fashion_mnist");
    assert_string_equal(fx.a.data_dir, "data/fashion_mnist");
    assert_int_equal(fx.a.epochs, 5);
    assert_string_equal(fx.a.csv, "runs/fashion_lenet.csv");
    assert_string_equal(fx.a.checkpoint_dir, "runs/fashion_lenet");
    assert_round_trip(&fx.a);
}

static void test_shipped_cifar(void **state)
{
    (void)state;
    static const char *const names[] = {"layer1.0", "layer1.1", "layer2.0", "layer2.1",
                                        "layer3.0", "layer3.1", "layer4.0", "layer4.1"};
    static const int outs[] = {64, 64, 128, 128, 256, 256, 512, 512};
    static const int strides[] = {1, 1, 2, 1, 2, 1, 2, 1};
    load_shipped("cifar_resnet18.yaml");
    const hcnn_model_spec *m = &fx.a.model;
    assert_int_equal(m->in_c, 3);
    assert_int_equal(m->in_h, 32);
    assert_int_equal(m->classes, 10);
    assert_int_equal(m->nblocks, 14);
    assert_block(&m->blocks[0], HCNN_BLOCK_CONV, "conv1", 64, 3, 1, 1);
    assert_int_equal(m->blocks[0].bias, 0);
    assert_int_equal(m->blocks[1].kind, HCNN_BLOCK_BN);
    assert_string_equal(m->blocks[1].name, "bn1");
    assert_true(m->blocks[1].eps == 1e-5f);
    assert_true(m->blocks[1].momentum == 0.1f);
    assert_int_equal(m->blocks[2].kind, HCNN_BLOCK_RELU);
    for (int i = 0; i < 8; i++) {
        assert_block(&m->blocks[3 + i], HCNN_BLOCK_RESIDUAL, names[i], outs[i], 0, strides[i], 0);
        assert_int_equal(m->blocks[3 + i].shortcut, HCNN_SHORTCUT_AUTO);
    }
    assert_int_equal(m->blocks[11].kind, HCNN_BLOCK_GAP);
    assert_int_equal(m->blocks[12].kind, HCNN_BLOCK_FLATTEN);
    assert_block(&m->blocks[13], HCNN_BLOCK_FC, "fc", 10, 0, 0, 0);
    assert_string_equal(fx.a.dataset, "cifar10");
    assert_string_equal(fx.a.data_dir, "data/cifar10");
    assert_int_equal(fx.a.epochs, 30);
    assert_int_equal(fx.a.batch_size, 128);
    assert_true(fx.a.lr == 0.1);
    assert_int_equal(fx.a.nesterov, 1);
    assert_true(fx.a.weight_decay == 5e-4);
    assert_int_equal(fx.a.schedule, HCNN_SCHED_COSINE);
    assert_true(fx.a.warmup_epochs == 1.0);
    assert_int_equal(fx.a.augment, 1);
    assert_string_equal(fx.a.csv, "runs/cifar_resnet18.csv");
    assert_string_equal(fx.a.checkpoint_dir, "runs/cifar_resnet18");
    assert_round_trip(&fx.a);
}

static void test_shipped_synthetic(void **state)
{
    (void)state;
    load_shipped("synthetic_small.yaml");
    const hcnn_model_spec *m = &fx.a.model;
    assert_int_equal(m->in_c, 1);
    assert_int_equal(m->in_h, 12);
    assert_int_equal(m->in_w, 12);
    assert_int_equal(m->classes, 4);
    assert_int_equal(m->nblocks, 8);
    assert_block(&m->blocks[0], HCNN_BLOCK_CONV, "conv1", 8, 3, 1, 1);
    assert_block(&m->blocks[3], HCNN_BLOCK_CONV, "conv2", 16, 3, 1, 1);
    assert_int_equal(m->blocks[5].kind, HCNN_BLOCK_MAXPOOL);
    assert_block(&m->blocks[7], HCNN_BLOCK_FC, "fc", 4, 0, 0, 0);
    assert_string_equal(fx.a.dataset, "synthetic");
    assert_int_equal(fx.a.synthetic_train, 512);
    assert_int_equal(fx.a.synthetic_test, 128);
    assert_int_equal(fx.a.epochs, 3);
    assert_int_equal(fx.a.batch_size, 32);
    assert_true(fx.a.lr == 0.05);
    assert_round_trip(&fx.a);
}

/* ---- defaults and values --------------------------------------------- */

static void test_defaults(void **state)
{
    (void)state;
    const char *path = write_base_plus(NULL);
    assert_int_equal(hcnn_config_load(&fx.a, path, NULL, 0), HCNN_OK);
    const hcnn_config *c = &fx.a;
    assert_string_equal(c->path, path);
    assert_string_equal(c->model.name, "model");
    assert_string_equal(c->dataset, "synthetic");
    assert_string_equal(c->data_dir, "data/synthetic");
    assert_int_equal(c->synthetic_train, 1024);
    assert_int_equal(c->synthetic_test, 256);
    assert_int_equal(c->epochs, 1);
    assert_int_equal(c->batch_size, 64);
    assert_int_equal(c->eval_batch_size, 0);
    assert_true(c->lr == 0.05);
    assert_true(c->momentum == 0.9);
    assert_int_equal(c->nesterov, 0);
    assert_true(c->weight_decay == 0.0);
    assert_int_equal(c->schedule, HCNN_SCHED_CONSTANT);
    assert_true(c->warmup_epochs == 0.0);
    assert_int_equal(c->lr_step_epochs, 30);
    assert_true(c->lr_gamma == 0.1);
    assert_true(c->min_lr == 0.0);
    assert_int_equal(c->init, HCNN_INIT_HE);
    assert_true(c->seed == 42);
    assert_int_equal(c->threads, 0);
    assert_int_equal(c->strategy, HCNN_STRATEGY_SERIAL);
    assert_true(c->max_steps == 0 && c->train_limit == 0 && c->test_limit == 0);
    assert_int_equal(c->shuffle, 1);
    assert_int_equal(c->augment, -1);
    assert_string_equal(c->csv, "");
    assert_string_equal(c->checkpoint_dir, "");
    assert_int_equal(c->progress_every, 0);
    assert_int_equal(c->conv_algo, HCNN_CONV_AUTO);
    assert_int_equal(c->data_prefetch, HCNN_PREFETCH_AUTO);

    /* hcnn_config_defaults agrees with what the loader fills in */
    hcnn_config_defaults(&fx.b);
    assert_int_equal(fx.b.augment, -1);
    assert_true(fx.b.seed == 42);
    assert_int_equal(fx.b.model.nblocks, 0);
}

static void test_every_key(void **state)
{
    (void)state;
    const char *path = write_base_plus("data_dir: /srv/data\n"
                                       "synthetic_train: 100\n"
                                       "synthetic_test: 50\n"
                                       "epochs: 7\n"
                                       "batch_size: 16\n"
                                       "eval_batch_size: 500\n"
                                       "lr: 1e-3\n"
                                       "momentum: 0\n"
                                       "nesterov: yes\n"
                                       "weight_decay: 0.0001\n"
                                       "schedule: step\n"
                                       "warmup_epochs: 0.5\n"
                                       "lr_step_epochs: 10\n"
                                       "lr_gamma: 1\n"
                                       "min_lr: 1e-6\n"
                                       "init: xavier\n"
                                       "seed: 18446744073709551615\n"
                                       "threads: 2\n"
                                       "strategy: serial\n"
                                       "max_steps: 1125899906842624\n"
                                       "train_limit: 1000\n"
                                       "test_limit: 200\n"
                                       "shuffle: off\n"
                                       "augment: false\n"
                                       "csv: out/m.csv\n"
                                       "checkpoint_dir: out/ckpt\n"
                                       "progress_every: 25\n"
                                       "conv_algo: per_thread\n"
                                       "data_prefetch: off\n");
    assert_int_equal(hcnn_config_load(&fx.a, path, NULL, 0), HCNN_OK);
    const hcnn_config *c = &fx.a;
    assert_string_equal(c->data_dir, "/srv/data");
    assert_int_equal(c->synthetic_train, 100);
    assert_int_equal(c->synthetic_test, 50);
    assert_int_equal(c->epochs, 7);
    assert_int_equal(c->batch_size, 16);
    assert_int_equal(c->eval_batch_size, 500);
    assert_true(c->lr == 1e-3);
    assert_true(c->momentum == 0.0);
    assert_int_equal(c->nesterov, 1);
    assert_true(c->weight_decay == 0.0001);
    assert_int_equal(c->schedule, HCNN_SCHED_STEP);
    assert_true(c->warmup_epochs == 0.5);
    assert_int_equal(c->lr_step_epochs, 10);
    assert_true(c->lr_gamma == 1.0);
    assert_true(c->min_lr == 1e-6);
    assert_int_equal(c->init, HCNN_INIT_XAVIER);
    assert_true(c->seed == UINT64_MAX);
    assert_int_equal(c->threads, 2);
    assert_true(c->max_steps == 1125899906842624L); /* HCNN_MAX_STEPS */
    assert_true(c->train_limit == 1000 && c->test_limit == 200);
    assert_int_equal(c->shuffle, 0);
    assert_int_equal(c->augment, 0);
    assert_string_equal(c->csv, "out/m.csv");
    assert_string_equal(c->checkpoint_dir, "out/ckpt");
    assert_int_equal(c->progress_every, 25);
    assert_int_equal(c->conv_algo, HCNN_CONV_PER_THREAD);
    assert_int_equal(c->data_prefetch, HCNN_PREFETCH_OFF);
    assert_round_trip(c);
}

static void test_booleans(void **state)
{
    (void)state;
    static const char *const yes[] = {"true", "yes", "on", "1", "True", "YES"};
    static const char *const no[] = {"false", "no", "off", "0", "False", "OFF"};
    char set[64];
    const char *path = write_base_plus(NULL);
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        const char *sets[] = {set};
        snprintf(set, sizeof set, "nesterov=%s", yes[i]);
        assert_int_equal(hcnn_config_load(&fx.a, path, sets, 1), HCNN_OK);
        assert_int_equal(fx.a.nesterov, 1);
        snprintf(set, sizeof set, "shuffle=%s", no[i]);
        assert_int_equal(hcnn_config_load(&fx.a, path, sets, 1), HCNN_OK);
        assert_int_equal(fx.a.shuffle, 0);
    }
    const char *sets[] = {"augment=default"};
    assert_int_equal(hcnn_config_load(&fx.a, path, sets, 1), HCNN_OK);
    assert_int_equal(fx.a.augment, -1);
}

static void test_block_defaults(void **state)
{
    (void)state;
    const char *path = write_file("blocks.yaml", "model:\n"
                                                 "  name: all-kinds.v1\n"
                                                 "  input: [3, 16, 16]\n"
                                                 "  classes: 2\n"
                                                 "  blocks:\n"
                                                 "    - {type: conv, out: 8}\n"
                                                 "    - bn\n"
                                                 "    - {type: maxpool}\n"
                                                 "    - {type: avgpool, kernel: [3, 2], pad: [1, 1]}\n"
                                                 "    - {type: conv, out: 8, kernel: [3, 1], stride: [2, 1], "
                                                 "pad: [1, 0], bias: no, name: c.2}\n"
                                                 "    - {type: residual, out: 16, stride: 2, shortcut: projection}\n"
                                                 "    - residual_placeholder\n"
                                                 "    - gap\n"
                                                 "    - flatten\n"
                                                 "    - {type: dropout}\n"
                                                 "    - {type: dropout, p: 0}\n"
                                                 "    - {type: bn, eps: 0.001, momentum: 1}\n"
                                                 "    - {type: fc, out: 2, bias: false}\n"
                                                 "dataset: cifar10\n");
    /* replace the placeholder through an override (a whole block) */
    const char *sets[] = {"model.blocks.6={type: residual, out: 16, shortcut: identity}"};
    int rc = load_capture(&fx.a, path, sets, 1);
    if (rc)
        fail_msg("%s", fx.msg);
    const hcnn_block_spec *b = fx.a.model.blocks;
    assert_string_equal(fx.a.model.name, "all-kinds.v1");
    assert_int_equal(fx.a.model.nblocks, 13);
    assert_block(&b[0], HCNN_BLOCK_CONV, "", 8, 3, 1, 0);
    assert_int_equal(b[0].bias, 1);
    assert_int_equal(b[1].kind, HCNN_BLOCK_BN);
    assert_true(b[1].eps == 1e-5f && b[1].momentum == 0.1f);
    assert_block(&b[2], HCNN_BLOCK_MAXPOOL, "", 0, 2, 2, 0);
    assert_int_equal(b[3].kind, HCNN_BLOCK_AVGPOOL);
    assert_true(b[3].kh == 3 && b[3].kw == 2 && b[3].sh == 3 && b[3].sw == 2 && b[3].ph == 1 && b[3].pw == 1);
    assert_string_equal(b[4].name, "c.2");
    assert_true(b[4].kh == 3 && b[4].kw == 1 && b[4].sh == 2 && b[4].sw == 1 && b[4].ph == 1 && b[4].pw == 0);
    assert_int_equal(b[4].bias, 0);
    assert_int_equal(b[5].kind, HCNN_BLOCK_RESIDUAL);
    assert_true(b[5].out == 16 && b[5].sh == 2 && b[5].sw == 2 && b[5].kh == 0);
    assert_int_equal(b[5].shortcut, HCNN_SHORTCUT_PROJECTION);
    assert_int_equal(b[6].shortcut, HCNN_SHORTCUT_IDENTITY);
    assert_true(b[6].sh == 1 && b[6].sw == 1);
    assert_int_equal(b[7].kind, HCNN_BLOCK_GAP);
    assert_int_equal(b[8].kind, HCNN_BLOCK_FLATTEN);
    assert_true(b[9].kind == HCNN_BLOCK_DROPOUT && b[9].p == 0.5f);
    assert_true(b[10].p == 0.0f);
    assert_true(b[11].eps == 0.001f && b[11].momentum == 1.0f);
    assert_true(b[12].kind == HCNN_BLOCK_FC && b[12].out == 2 && b[12].bias == 0);
    assert_round_trip(&fx.a);
}

/* ---- overrides --------------------------------------------------------- */

static void test_override_top_level(void **state)
{
    (void)state;
    const char *path = write_base_plus("lr: 0.5\n");
    const char *sets[] = {"lr=0.1", "epochs=3", "strategy=serial", "seed=7", "schedule=cosine", "csv=a b.csv",
                          "epochs=4"};
    assert_int_equal(hcnn_config_load(&fx.a, path, sets, 7), HCNN_OK);
    assert_true(fx.a.lr == 0.1);
    assert_int_equal(fx.a.epochs, 4); /* the later override wins */
    assert_true(fx.a.seed == 7);
    assert_int_equal(fx.a.schedule, HCNN_SCHED_COSINE);
    assert_string_equal(fx.a.csv, "a b.csv"); /* also creates a key absent from the file */
    /* an empty value is an empty string for string keys */
    const char *empty[] = {"csv="};
    assert_int_equal(hcnn_config_load(&fx.a, path, empty, 1), HCNN_OK);
    assert_string_equal(fx.a.csv, "");
}

static void test_override_model(void **state)
{
    (void)state;
    const char *path = write_base_plus(NULL);
    const char *sets[] = {"model.blocks.0.out=8", "model.classes=5", "model.input=[3, 32, 32]",
                          "model.blocks.0.kernel=[5,3]", "model.blocks.3.out=5", "model.name=tiny"};
    assert_int_equal(hcnn_config_load(&fx.a, path, sets, 6), HCNN_OK);
    const hcnn_model_spec *m = &fx.a.model;
    assert_int_equal(m->blocks[0].out, 8);
    assert_true(m->blocks[0].kh == 5 && m->blocks[0].kw == 3);
    assert_int_equal(m->blocks[0].ph, 1); /* untouched keys stay */
    assert_int_equal(m->classes, 5);
    assert_true(m->in_c == 3 && m->in_h == 32 && m->in_w == 32);
    assert_int_equal(m->blocks[3].out, 5);
    assert_string_equal(m->name, "tiny");
}

static void test_override_sequences(void **state)
{
    (void)state;
    const char *path = write_base_plus(NULL);
    /* replace a whole block, append one (index == length), add a key to a
     * bare-string block and a new key to a mapping block */
    const char *sets[] = {"model.blocks.2={type: dropout, p: 0.25}", "model.blocks.4=flatten",
                          "model.blocks.1.name=act1", "model.blocks.0.bias=false"};
    int rc = load_capture(&fx.a, path, sets, 4);
    if (rc)
        fail_msg("%s", fx.msg);
    const hcnn_model_spec *m = &fx.a.model;
    assert_int_equal(m->nblocks, 5);
    assert_true(m->blocks[2].kind == HCNN_BLOCK_DROPOUT && m->blocks[2].p == 0.25f);
    assert_int_equal(m->blocks[4].kind, HCNN_BLOCK_FLATTEN);
    assert_int_equal(m->blocks[1].kind, HCNN_BLOCK_RELU);
    assert_string_equal(m->blocks[1].name, "act1");
    assert_int_equal(m->blocks[0].bias, 0);

    /* a whole new block list */
    const char *list[] = {"model.blocks=[flatten, {type: fc, out: 3, name: head}]"};
    assert_int_equal(hcnn_config_load(&fx.a, path, list, 1), HCNN_OK);
    assert_int_equal(fx.a.model.nblocks, 2);
    assert_string_equal(fx.a.model.blocks[1].name, "head");
    assert_round_trip(&fx.a);
}

/* A file without a model can be completed from the command line. */
static void test_override_creates_model(void **state)
{
    (void)state;
    const char *path = write_file("nomodel.yaml", "dataset: mnist\n");
    const char *sets[] = {"model={input: [1, 28, 28], classes: 10, blocks: [flatten, {type: fc, out: 10}]}",
                          "model.name=linear", "data_dir=/tmp/x"};
    int rc = load_capture(&fx.a, path, sets, 3);
    if (rc)
        fail_msg("%s", fx.msg);
    assert_string_equal(fx.a.model.name, "linear");
    assert_int_equal(fx.a.model.nblocks, 2);
    assert_string_equal(fx.a.data_dir, "/tmp/x");
}

/* ---- round trip with awkward strings ---------------------------------- */

static void test_round_trip_strings(void **state)
{
    (void)state;
    const char *path = write_base_plus("csv: \"runs/a b: \\\"c\\\" #1.csv\"\n"
                                       "checkpoint_dir: \"null\"\n"
                                       "data_dir: \"-\"\n"
                                       "lr: 0.1\n"
                                       "weight_decay: 3.0000000000000004e-4\n"
                                       "momentum: 0.30000000000000004\n");
    int rc = load_capture(&fx.a, path, NULL, 0);
    if (rc)
        fail_msg("%s", fx.msg);
    assert_string_equal(fx.a.csv, "runs/a b: \"c\" #1.csv");
    assert_string_equal(fx.a.checkpoint_dir, "null");
    assert_string_equal(fx.a.data_dir, "-");
    assert_round_trip(&fx.a);

    static const char *const odd[] = {"csv=\"tab\\there\"", "csv='back\\slash'", "csv=\"~\"", "csv=\"true\"",
                                      "csv=\"...\"", "csv=\"x\\u00e9y\"", "csv=\"? q\"", "csv=\"[a]\""};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        const char *sets[] = {odd[i]};
        rc = load_capture(&fx.a, path, sets, 1);
        if (rc)
            fail_msg("%s: %s", odd[i], fx.msg);
        assert_round_trip(&fx.a);
    }
}

static void test_print_matches_write(void **state)
{
    (void)state;
    load_shipped("cifar_resnet18.yaml");
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    assert_non_null(mem);
    hcnn_config_print(&fx.a, mem);
    fclose(mem);

    char out[600];
    snprintf(out, sizeof out, "%s/printed.yaml", fx.dir);
    assert_int_equal(hcnn_config_write(&fx.a, out), HCNN_OK);
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char *file = calloc(1, len + 2);
    assert_non_null(file);
    size_t n = fread(file, 1, len + 1, f);
    fclose(f);
    assert_int_equal(n, len);
    assert_memory_equal(file, buf, len);
    /* flow-style blocks as documented */
    assert_non_null(strstr(buf, "- {type: conv, name: conv1, out: 64, kernel: [3, 3], stride: [1, 1], pad: [1, 1], "
                                "bias: false}"));
    assert_non_null(strstr(buf, "- {type: residual, name: layer2.0, out: 128, stride: [2, 2], shortcut: auto}"));
    free(file);
    free(buf);
}

static void test_write_unwritable(void **state)
{
    (void)state;
    load_shipped("synthetic_small.yaml");
    fflush(stderr);
    int saved = dup(2);
    int fd = open(fx.err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    int rc = hcnn_config_write(&fx.a, "/nonexistent-dir-hcnn/x.yaml");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    assert_int_equal(rc, HCNN_EIO);
}

static void test_names(void **state)
{
    (void)state;
    static const char *const kinds[] = {"conv", "bn",      "relu",    "maxpool",  "avgpool",
                                        "gap",  "fc",      "dropout", "flatten",  "residual",
                                        "leaky_relu"};
    for (int k = 0; k < HCNN_BLOCK_KIND_COUNT; k++)
        assert_string_equal(hcnn_block_kind_name((hcnn_block_kind)k), kinds[k]);
    assert_string_equal(hcnn_schedule_name(HCNN_SCHED_CONSTANT), "constant");
    assert_string_equal(hcnn_schedule_name(HCNN_SCHED_STEP), "step");
    assert_string_equal(hcnn_schedule_name(HCNN_SCHED_COSINE), "cosine");
    assert_string_equal(hcnn_init_name(HCNN_INIT_HE), "he");
    assert_string_equal(hcnn_init_name(HCNN_INIT_XAVIER), "xavier");
    assert_string_equal(hcnn_strategy_name(HCNN_STRATEGY_SERIAL), "serial");
}

/* ---- errors that need more than a YAML snippet ------------------------ */

static void test_missing_file(void **state)
{
    (void)state;
    char path[600];
    snprintf(path, sizeof path, "%s/does-not-exist.yaml", fx.dir);
    /* a configuration error (exit status 2), not a run-time one */
    assert_int_equal(load_capture(&fx.a, path, NULL, 0), HCNN_EINVAL);
    assert_msg_contains(path);
    assert_string_equal(fx.a.path, path); /* kept for the caller's messages */
    /* a directory cannot be read either */
    assert_int_equal(load_capture(&fx.a, fx.dir, NULL, 0), HCNN_EINVAL);
    assert_msg_contains(fx.dir);
    assert_msg_contains("is a directory");
    /* nor a FIFO: refused at once, not waited on */
    snprintf(path, sizeof path, "%s/fifo.yaml", fx.dir);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_int_equal(load_capture(&fx.a, path, NULL, 0), HCNN_EINVAL);
    assert_msg_contains("is a pipe or FIFO");
    unlink(path);
}

static void test_line_numbers(void **state)
{
    (void)state;
    /* the example from the specification: the line of the offending value */
    const char *path = write_file("lines.yaml", "# comment\n"
                                                "model:\n"
                                                "  input: [1, 28, 28]\n"
                                                "  classes: 10\n"
                                                "  blocks:\n"
                                                "    - {type: conv, out: 6, kernel: 5}\n"
                                                "    - relu\n"
                                                "    - maxpool\n"
                                                "    - type: conv\n"
                                                "      out: 16\n"
                                                "      kernel: abc\n"
                                                "dataset: mnist\n");
    assert_int_equal(load_capture(&fx.a, path, NULL, 0), HCNN_EINVAL);
    char want[700];
    snprintf(want, sizeof want, "%s:11: model.blocks.3.kernel: expected a positive integer or [h, w], got \"abc\"",
             path);
    assert_msg_contains(want);
    /* the same value from --set says so instead of giving a line */
    const char *sets[] = {"model.blocks.0.kernel=abc"};
    assert_int_equal(load_capture(&fx.a, path, sets, 1), HCNN_EINVAL);
    snprintf(want, sizeof want, "%s (from --set): model.blocks.0.kernel: expected", path);
    assert_msg_contains(want);
}

static void test_too_many_blocks(void **state)
{
    (void)state;
    size_t size = 256 + 16 * (HCNN_MAX_BLOCKS + 2);
    char *text = malloc(size);
    assert_non_null(text);
    for (int nblocks = HCNN_MAX_BLOCKS; nblocks <= HCNN_MAX_BLOCKS + 1; nblocks++) {
        size_t o = (size_t)snprintf(text, size, "dataset: mnist\nmodel:\n  input: [1, 2, 2]\n  classes: 2\n"
                                                "  blocks:\n");
        for (int i = 0; i < nblocks; i++)
            o += (size_t)snprintf(text + o, size - o, "    - relu\n");
        const char *path = write_file("many.yaml", text);
        int rc = load_capture(&fx.a, path, NULL, 0);
        if (nblocks <= HCNN_MAX_BLOCKS) {
            assert_int_equal(rc, HCNN_OK);
            assert_int_equal(fx.a.model.nblocks, HCNN_MAX_BLOCKS);
        } else {
            assert_int_equal(rc, HCNN_EINVAL);
            assert_msg_contains("model.blocks");
        }
    }
    free(text);
}

static void test_deep_nesting(void **state)
{
    (void)state;
    char text[600];
    size_t o = (size_t)snprintf(text, sizeof text, "lr: ");
    for (int i = 0; i < 200; i++)
        text[o++] = '[';
    for (int i = 0; i < 200; i++)
        text[o++] = ']';
    snprintf(text + o, sizeof text - o, "\n");
    const char *path = write_file("deep.yaml", text);
    assert_int_equal(load_capture(&fx.a, path, NULL, 0), HCNN_EINVAL);
    assert_msg_contains("nested");
}

static void test_failure_resets_config(void **state)
{
    (void)state;
    const char *path = write_base_plus("epochs: 0\n");
    assert_int_equal(load_capture(&fx.a, path, NULL, 0), HCNN_EINVAL);
    assert_string_equal(fx.a.path, path);
    assert_int_equal(fx.a.model.nblocks, 0); /* no half-filled configuration */
    assert_int_equal(fx.a.epochs, 1);
}

/* ---- table of error cases ---------------------------------------------- */

typedef struct err_case {
    const char *name;
    const char *yaml;         /* whole file; NULL: BASE + extra */
    const char *extra;        /* lines appended to BASE */
    const char *sets[3];
    int nset;
    int rc;
    const char *needles[3];   /* the message must contain these (and the file name) */
} err_case;

#define BLOCKS_YAML(b) "model:\n  input: [1, 8, 8]\n  classes: 3\n  blocks:\n    - " b "\ndataset: mnist\n"

static const err_case err_cases[] = {
    /* unknown keys */
    {"unknown_top_key", NULL, "lrr: 0.1\n", {0}, 0, HCNN_EINVAL, {"cfg.yaml:10:", "'lrr'"}},
    {"unknown_model_key", "model:\n  input: [1, 8, 8]\n  classes: 3\n  blocks: [relu]\n  depth: 3\ndataset: mnist\n",
     NULL, {0}, 0, HCNN_EINVAL, {"model.depth"}},
    {"unknown_block_key", BLOCKS_YAML("{type: relu, out: 3}"), NULL, {0}, 0, HCNN_EINVAL,
     {":5:", "model.blocks.0.out", "relu"}},
    {"unknown_block_key_bn", BLOCKS_YAML("{type: bn, kernel: 3}"), NULL, {0}, 0, HCNN_EINVAL, {"model.blocks.0.kernel"}},
    {"unknown_block_type", BLOCKS_YAML("{type: convx, out: 3}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.type", "\"convx\"", "residual"}},
    {"unknown_bare_block_type", BLOCKS_YAML("relux"), NULL, {0}, 0, HCNN_EINVAL, {"model.blocks.0", "\"relux\""}},
    /* wrong types */
    {"int_not_a_number", NULL, "epochs: abc\n", {0}, 0, HCNN_EINVAL, {"epochs", "\"abc\"", "integer"}},
    {"int_trailing_garbage", NULL, "batch_size: 10x\n", {0}, 0, HCNN_EINVAL, {"batch_size", "\"10x\""}},
    {"int_fraction", NULL, "epochs: 2.5\n", {0}, 0, HCNN_EINVAL, {"epochs", "\"2.5\""}},
    {"int_hex", NULL, "threads: 0x10\n", {0}, 0, HCNN_EINVAL, {"threads"}},
    {"int_overflow", NULL, "batch_size: 99999999999\n", {0}, 0, HCNN_EINVAL, {"batch_size", "16777216"}},
    {"long_overflow", NULL, "max_steps: 9223372036854775808\n", {0}, 0, HCNN_EINVAL, {"max_steps"}},
    {"int_null", NULL, "epochs:\n", {0}, 0, HCNN_EINVAL, {"epochs", "null"}},
    {"int_sequence", NULL, "epochs: [1, 2]\n", {0}, 0, HCNN_EINVAL, {"epochs", "a sequence of 2 items"}},
    {"float_not_a_number", NULL, "lr: fast\n", {0}, 0, HCNN_EINVAL, {"lr", "\"fast\"", "number"}},
    {"float_trailing_garbage", NULL, "lr: 0.1x\n", {0}, 0, HCNN_EINVAL, {"lr", "\"0.1x\""}},
    {"float_nan", NULL, "lr: nan\n", {0}, 0, HCNN_EINVAL, {"lr", "\"nan\""}},
    {"float_inf", NULL, "weight_decay: inf\n", {0}, 0, HCNN_EINVAL, {"weight_decay", "\"inf\""}},
    {"float_overflow", NULL, "lr: 1e999\n", {0}, 0, HCNN_EINVAL, {"lr"}},
    {"bool_word", NULL, "nesterov: maybe\n", {0}, 0, HCNN_EINVAL, {"nesterov", "\"maybe\"", "boolean"}},
    {"bool_number", NULL, "shuffle: 2\n", {0}, 0, HCNN_EINVAL, {"shuffle", "\"2\""}},
    {"augment_word", NULL, "augment: sometimes\n", {0}, 0, HCNN_EINVAL, {"augment", "default"}},
    {"string_mapping", NULL, "csv: {a: 1}\n", {0}, 0, HCNN_EINVAL, {"csv", "a mapping"}},
    {"block_bias_word", BLOCKS_YAML("{type: conv, out: 3, bias: maybe}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.bias"}},
    {"block_not_mapping", BLOCKS_YAML("[conv, 3]"), NULL, {0}, 0, HCNN_EINVAL, {"model.blocks.0", "a sequence"}},
    /* out of range */
    {"lr_negative", NULL, "lr: -0.1\n", {0}, 0, HCNN_EINVAL, {"cfg.yaml:10: lr:", "> 0", "\"-0.1\""}},
    {"lr_zero", NULL, "lr: 0\n", {0}, 0, HCNN_EINVAL, {"lr"}},
    {"momentum_one", NULL, "momentum: 1\n", {0}, 0, HCNN_EINVAL, {"momentum", "[0, 1)"}},
    {"momentum_negative", NULL, "momentum: -0.5\n", {0}, 0, HCNN_EINVAL, {"momentum"}},
    {"batch_size_zero", NULL, "batch_size: 0\n", {0}, 0, HCNN_EINVAL, {"batch_size", "positive"}},
    {"eval_batch_size_negative", NULL, "eval_batch_size: -5\n", {0}, 0, HCNN_EINVAL, {"eval_batch_size"}},
    {"epochs_zero", NULL, "epochs: 0\n", {0}, 0, HCNN_EINVAL, {"epochs"}},
    {"synthetic_train_zero", NULL, "synthetic_train: 0\n", {0}, 0, HCNN_EINVAL, {"synthetic_train"}},
    {"weight_decay_negative", NULL, "weight_decay: -1e-4\n", {0}, 0, HCNN_EINVAL, {"weight_decay"}},
    {"warmup_negative", NULL, "warmup_epochs: -1\n", {0}, 0, HCNN_EINVAL, {"warmup_epochs"}},
    {"lr_step_epochs_zero", NULL, "lr_step_epochs: 0\n", {0}, 0, HCNN_EINVAL, {"lr_step_epochs"}},
    {"lr_gamma_zero", NULL, "lr_gamma: 0\n", {0}, 0, HCNN_EINVAL, {"lr_gamma", "(0, 1]"}},
    {"lr_gamma_big", NULL, "lr_gamma: 1.5\n", {0}, 0, HCNN_EINVAL, {"lr_gamma"}},
    {"min_lr_negative", NULL, "min_lr: -1\n", {0}, 0, HCNN_EINVAL, {"min_lr"}},
    {"threads_negative", NULL, "threads: -1\n", {0}, 0, HCNN_EINVAL, {"threads"}},
    {"seed_negative", NULL, "seed: -1\n", {0}, 0, HCNN_EINVAL, {"seed", "\"-1\""}},
    {"seed_overflow", NULL, "seed: 18446744073709551616\n", {0}, 0, HCNN_EINVAL, {"seed"}},
    {"seed_minus_zero", NULL, "seed: -0\n", {0}, 0, HCNN_EINVAL, {"seed"}},
    {"seed_plus_minus", NULL, "seed: +-1\n", {0}, 0, HCNN_EINVAL, {"seed"}},
    {"max_steps_negative", NULL, "max_steps: -1\n", {0}, 0, HCNN_EINVAL, {"max_steps"}},
    {"train_limit_negative", NULL, "train_limit: -3\n", {0}, 0, HCNN_EINVAL, {"train_limit"}},
    {"progress_every_negative", NULL, "progress_every: -3\n", {0}, 0, HCNN_EINVAL, {"progress_every"}},
    {"classes_one", "model:\n  input: [1, 8, 8]\n  classes: 1\n  blocks: [relu]\ndataset: mnist\n", NULL, {0}, 0,
     HCNN_EINVAL, {":3:", "model.classes"}},
    {"input_zero", "model:\n  input: [1, 0, 8]\n  classes: 2\n  blocks: [relu]\ndataset: mnist\n", NULL, {0}, 0,
     HCNN_EINVAL, {"model.input", "\"0\""}},
    {"input_two_dims", "model:\n  input: [8, 8]\n  classes: 2\n  blocks: [relu]\ndataset: mnist\n", NULL, {0}, 0,
     HCNN_EINVAL, {"model.input", "[c, h, w]"}},
    {"conv_out_zero", BLOCKS_YAML("{type: conv, out: 0}"), NULL, {0}, 0, HCNN_EINVAL, {"model.blocks.0.out"}},
    {"conv_pad_negative", BLOCKS_YAML("{type: conv, out: 2, pad: -1}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.pad", "non-negative"}},
    {"conv_stride_zero", BLOCKS_YAML("{type: conv, out: 2, stride: [1, 0]}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.stride", "\"0\""}},
    {"conv_kernel_three", BLOCKS_YAML("{type: conv, out: 2, kernel: [3, 3, 3]}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.kernel", "[h, w]"}},
    {"pool_pad_too_big", BLOCKS_YAML("{type: maxpool, kernel: 2, pad: 2}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.pad", "half the kernel"}},
    {"dropout_p_one", BLOCKS_YAML("{type: dropout, p: 1}"), NULL, {0}, 0, HCNN_EINVAL, {"model.blocks.0.p", "[0, 1)"}},
    {"bn_eps_zero", BLOCKS_YAML("{type: bn, eps: 0}"), NULL, {0}, 0, HCNN_EINVAL, {"model.blocks.0.eps"}},
    {"bn_eps_float_underflow", BLOCKS_YAML("{type: bn, eps: 1e-50}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.eps"}},
    {"bn_momentum_zero", BLOCKS_YAML("{type: bn, momentum: 0}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.momentum", "(0, 1]"}},
    /* choices */
    {"schedule_unknown", NULL, "schedule: linear\n", {0}, 0, HCNN_EINVAL, {"schedule", "constant, step, cosine"}},
    {"init_unknown", NULL, "init: lecun\n", {0}, 0, HCNN_EINVAL, {"init", "he, xavier"}},
    {"conv_algo_unknown", NULL, "conv_algo: fft\n", {0}, 0, HCNN_EINVAL,
     {"conv_algo", "auto, batched, per_thread, winograd, winograd_f2, winograd_f4", "\"fft\""}},
    {"data_prefetch_unknown", NULL, "data_prefetch: maybe\n", {0}, 0, HCNN_EINVAL,
     {"data_prefetch", "auto, on, off"}},
    {"strategy_unknown", NULL, "strategy: ddp\n", {0}, 0, HCNN_EINVAL, {"strategy", "serial", "\"ddp\""}},
    {"dataset_unknown", "model:\n  input: [1, 8, 8]\n  classes: 2\n  blocks: [relu]\ndataset: imagenet\n", NULL, {0},
     0, HCNN_EINVAL, {"dataset", "fashion_mnist", "\"imagenet\""}},
    {"shortcut_unknown", BLOCKS_YAML("{type: residual, out: 4, shortcut: dense}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.shortcut", "projection"}},
    /* names */
    {"block_name_chars", BLOCKS_YAML("{type: relu, name: a/b}"), NULL, {0}, 0, HCNN_EINVAL, {"model.blocks.0.name"}},
    {"block_name_too_long",
     BLOCKS_YAML("{type: relu, name: a123456789012345678901234567890123456789012345678901234567890123}"), NULL, {0},
     0, HCNN_EINVAL, {"model.blocks.0.name", "63"}},
    {"block_name_duplicate", "model:\n  input: [1, 8, 8]\n  classes: 2\n  blocks:\n    - {type: relu, name: a}\n"
                             "    - {type: relu, name: a}\ndataset: mnist\n",
     NULL, {0}, 0, HCNN_EINVAL, {":6:", "model.blocks.1.name", "'a'"}},
    {"model_name_chars", "model:\n  name: a b\n  input: [1, 8, 8]\n  classes: 2\n  blocks: [relu]\ndataset: mnist\n",
     NULL, {0}, 0, HCNN_EINVAL, {"model.name"}},
    /* missing / structure */
    {"missing_model", "dataset: mnist\nlr: 0.1\n", NULL, {0}, 0, HCNN_EINVAL, {"'model'"}},
    {"missing_dataset", "model:\n  input: [1, 8, 8]\n  classes: 2\n  blocks: [relu]\n", NULL, {0}, 0, HCNN_EINVAL,
     {"'dataset'"}},
    {"empty_file", "", NULL, {0}, 0, HCNN_EINVAL, {"'model'"}},
    {"missing_input", "model:\n  classes: 2\n  blocks: [relu]\ndataset: mnist\n", NULL, {0}, 0, HCNN_EINVAL,
     {"model.input"}},
    {"missing_classes", "model:\n  input: [1, 8, 8]\n  blocks: [relu]\ndataset: mnist\n", NULL, {0}, 0, HCNN_EINVAL,
     {"model.classes"}},
    {"missing_blocks", "model:\n  input: [1, 8, 8]\n  classes: 2\ndataset: mnist\n", NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks"}},
    {"empty_blocks", "model:\n  input: [1, 8, 8]\n  classes: 2\n  blocks: []\ndataset: mnist\n", NULL, {0}, 0,
     HCNN_EINVAL, {"model.blocks", "non-empty"}},
    {"model_not_mapping", "model: lenet\ndataset: mnist\n", NULL, {0}, 0, HCNN_EINVAL, {"cfg.yaml:1: model:"}},
    {"top_level_sequence", "- a\n- b\n", NULL, {0}, 0, HCNN_EINVAL, {"top level"}},
    {"block_missing_type", BLOCKS_YAML("{out: 3}"), NULL, {0}, 0, HCNN_EINVAL, {"model.blocks.0.type"}},
    {"conv_missing_out", BLOCKS_YAML("{type: conv, kernel: 3}"), NULL, {0}, 0, HCNN_EINVAL,
     {":5:", "model.blocks.0.out", "conv"}},
    {"bare_fc_missing_out", BLOCKS_YAML("fc"), NULL, {0}, 0, HCNN_EINVAL, {"model.blocks.0.out"}},
    {"residual_missing_out", BLOCKS_YAML("{type: residual, stride: 2}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.out"}},
    /* YAML level */
    {"syntax_error", NULL, "lr: [0.1, 0.2\nepochs: 3\n", {0}, 0, HCNN_EINVAL, {"cfg.yaml:11:", "YAML syntax error"}},
    {"syntax_bad_indent", "model:\n  input: [1, 8, 8]\n classes: 2\n", NULL, {0}, 0, HCNN_EINVAL,
     {"cfg.yaml:3:", "YAML syntax error"}},
    {"duplicate_top_key", NULL, "lr: 0.1\nlr: 0.2\n", {0}, 0, HCNN_EINVAL, {"cfg.yaml:11:", "duplicate", "'lr'"}},
    {"duplicate_block_key", BLOCKS_YAML("{type: conv, out: 3, out: 4}"), NULL, {0}, 0, HCNN_EINVAL,
     {"model.blocks.0.out", "duplicate"}},
    {"alias", NULL, "lr: &x 0.1\nmin_lr: *x\n", {0}, 0, HCNN_EINVAL, {"min_lr", "alias"}},
    {"two_documents", NULL, "---\nlr: 0.1\n", {0}, 0, HCNN_EINVAL, {"one YAML document"}},
    {"mapping_key_not_scalar", NULL, "[a]: 1\n", {0}, 0, HCNN_EINVAL, {"cfg.yaml:10:"}},
    /* overrides */
    {"override_no_equals", NULL, NULL, {"lr0.1"}, 1, HCNN_EINVAL, {"'lr0.1'", "key=value"}},
    {"override_empty_key", NULL, NULL, {"=0.1"}, 1, HCNN_EINVAL, {"'=0.1'"}},
    {"override_empty_component", NULL, NULL, {"model..classes=3"}, 1, HCNN_EINVAL, {"'model..classes=3'"}},
    {"override_trailing_dot", NULL, NULL, {"lr.=3"}, 1, HCNN_EINVAL, {"'lr.=3'"}},
    {"override_unknown_key", NULL, NULL, {"lrr=0.1"}, 1, HCNN_EINVAL, {"(from --set)", "'lrr'"}},
    {"override_unknown_block_key", NULL, NULL, {"model.blocks.1.out=3"}, 1, HCNN_EINVAL,
     {"(from --set)", "model.blocks.1.out"}},
    {"override_wrong_type", NULL, NULL, {"epochs=abc"}, 1, HCNN_EINVAL, {"(from --set): epochs:", "\"abc\""}},
    {"override_out_of_range", NULL, NULL, {"model.blocks.0.out=-2"}, 1, HCNN_EINVAL,
     {"(from --set): model.blocks.0.out:"}},
    {"override_index_beyond_end", NULL, NULL, {"model.blocks.9.out=3"}, 1, HCNN_EINVAL,
     {"model.blocks", "beyond the end"}},
    {"override_index_not_number", NULL, NULL, {"model.blocks.first.out=3"}, 1, HCNN_EINVAL,
     {"'first'", "model.blocks"}},
    {"override_into_scalar", NULL, NULL, {"dataset.name=3"}, 1, HCNN_EINVAL, {"'dataset'", "single value"}},
    {"override_bad_yaml", NULL, NULL, {"model.input=[1, 2"}, 1, HCNN_EINVAL, {"model.input=[1, 2", "invalid YAML"}},
    {"override_second_bad", NULL, NULL, {"lr=0.1", "momentum=2"}, 2, HCNN_EINVAL, {"momentum"}},
};
#define N_ERR_CASES (sizeof err_cases / sizeof err_cases[0])

static void test_error_case(void **state)
{
    const err_case *ec = *state;
    const char *path = ec->yaml ? write_file("cfg.yaml", ec->yaml) : write_base_plus(ec->extra);
    int rc = load_capture(&fx.a, path, ec->nset ? ec->sets : NULL, ec->nset);
    if (rc != ec->rc)
        fail_msg("%s: expected rc %d, got %d; message: %s", ec->name, ec->rc, rc, fx.msg);
    /* exactly one error line that names the file */
    assert_non_null(strstr(fx.msg, "hcnn: error: "));
    assert_msg_contains(path);
    int lines = 0;
    for (const char *p = fx.msg; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 1);
    for (int i = 0; i < 3 && ec->needles[i]; i++)
        assert_msg_contains(ec->needles[i]);
}

/* ---- the MPI thread level a configuration needs ------------------------ */

/* hcnn_strategy_check of synthetic_small.yaml with `sets` as `rank` of
 * `world` ranks of an MPI providing `provided`; stderr ends up in fx.msg.
 * No MPI call is made: the checks read the configuration and the comm
 * struct only. */
static int check_as(const char *const *sets, int nset, int rank, int world, int provided)
{
    char path[1024];
    shipped("synthetic_small.yaml", path, sizeof path);
    assert_int_equal(hcnn_config_load(&fx.a, path, sets, nset), HCNN_OK);
    const hcnn_comm comm = {.rank = rank, .size = world, .thread_level = provided};
    const int saved = stderr_to_file();
    const int rc = hcnn_strategy_check(&fx.a, &comm);
    stderr_back(saved);
    return rc;
}

static int check_on(const char *const *sets, int nset, int world, int provided)
{
    return check_as(sets, nset, 0, world, provided);
}

/* A pipeline's replicas under allreduce_progress: thread have the
 * communication thread's allreduce and the training thread's transfers in
 * MPI at once: MULTIPLE.  The data strategy's training thread makes no MPI
 * call while the communication thread sums: SERIALIZED.  Otherwise the
 * main thread alone calls MPI, beside the OpenMP team: FUNNELED; one rank
 * makes no MPI call in its steps: SINGLE. */
static void test_thread_level_needed(void **state)
{
    (void)state;
    const char *pipe_thread[] = {"strategy=pipeline", "stages=2", "microbatches=2",
                                 "allreduce_progress=thread"};
    const char *data_thread[] = {"strategy=data", "allreduce_progress=thread"};
    const char *data_test[] = {"strategy=data", "allreduce_progress=test"};
    const char *pipe_test[] = {"strategy=pipeline", "stages=2", "microbatches=2",
                               "allreduce_progress=test"};

    assert_int_equal(check_on(pipe_thread, 4, 4, MPI_THREAD_MULTIPLE), HCNN_OK);
    assert_int_equal(hcnn_strategy_thread_level(&fx.a, 4), MPI_THREAD_MULTIPLE);
    assert_int_equal(check_on(pipe_thread, 4, 4, MPI_THREAD_SERIALIZED), HCNN_EINVAL);
    assert_msg_contains("needs MPI_THREAD_MULTIPLE, this MPI provides MPI_THREAD_SERIALIZED");
    assert_msg_contains("allreduce_progress=test");
    assert_msg_contains("MPICH_MAX_THREAD_SAFETY=multiple");
    /* rank 0 says it, the others refuse silently */
    assert_int_equal(check_as(pipe_thread, 4, 1, 4, MPI_THREAD_SERIALIZED), HCNN_EINVAL);
    assert_string_equal(fx.msg, "");
    /* 2 stages on 2 ranks: one replica, nothing to allreduce */
    assert_int_equal(check_on(pipe_thread, 4, 2, MPI_THREAD_FUNNELED), HCNN_OK);
    assert_int_equal(hcnn_strategy_thread_level(&fx.a, 2), MPI_THREAD_FUNNELED);

    assert_int_equal(check_on(data_thread, 2, 2, MPI_THREAD_SERIALIZED), HCNN_OK);
    assert_int_equal(hcnn_strategy_thread_level(&fx.a, 2), MPI_THREAD_SERIALIZED);
    assert_int_equal(check_on(data_thread, 2, 2, MPI_THREAD_FUNNELED), HCNN_EINVAL);
    assert_msg_contains("needs MPI_THREAD_SERIALIZED, this MPI provides MPI_THREAD_FUNNELED");
    assert_int_equal(check_on(data_thread, 2, 1, MPI_THREAD_SINGLE), HCNN_OK);

    assert_int_equal(check_on(data_test, 2, 2, MPI_THREAD_FUNNELED), HCNN_OK);
    assert_int_equal(check_on(data_test, 2, 2, MPI_THREAD_SINGLE), HCNN_EINVAL);
    assert_msg_contains("needs MPI_THREAD_FUNNELED, this MPI provides MPI_THREAD_SINGLE");
    assert_int_equal(check_on(pipe_test, 4, 4, MPI_THREAD_FUNNELED), HCNN_OK);
    assert_int_equal(hcnn_strategy_thread_level(&fx.a, 4), MPI_THREAD_FUNNELED);
}

/* ---- main ----------------------------------------------------------------- */

int main(void)
{
    static const struct CMUnitTest fixed[] = {
        cmocka_unit_test(test_shipped_mnist),
        cmocka_unit_test(test_shipped_fashion),
        cmocka_unit_test(test_shipped_cifar),
        cmocka_unit_test(test_shipped_synthetic),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_key),
        cmocka_unit_test(test_booleans),
        cmocka_unit_test(test_block_defaults),
        cmocka_unit_test(test_override_top_level),
        cmocka_unit_test(test_override_model),
        cmocka_unit_test(test_override_sequences),
        cmocka_unit_test(test_override_creates_model),
        cmocka_unit_test(test_round_trip_strings),
        cmocka_unit_test(test_print_matches_write),
        cmocka_unit_test(test_write_unwritable),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_line_numbers),
        cmocka_unit_test(test_too_many_blocks),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_thread_level_needed),
        cmocka_unit_test(test_failure_resets_config),
    };
    enum { NFIXED = sizeof fixed / sizeof fixed[0] };
    static struct CMUnitTest tests[NFIXED + N_ERR_CASES];
    memcpy(tests, fixed, sizeof fixed);
    /* one named test per error case, the case passed as the initial state */
    for (size_t i = 0; i < N_ERR_CASES; i++) {
        tests[NFIXED + i].name = err_cases[i].name;
        tests[NFIXED + i].test_func = test_error_case;
        tests[NFIXED + i].initial_state = (void *)&err_cases[i];
    }
    return _cmocka_run_group_tests("config", tests, NFIXED + N_ERR_CASES, group_setup, group_teardown);
}
