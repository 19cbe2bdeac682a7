/* The schema of a run configuration: every key, its type, range and
 * default, for the model's blocks and the top level; and stage 3 of
 * reading, the tree interpreted into hcnn_config (see internal.h).  A new
 * block type is a row of hcnn_cfg_block_types; a new block key a row of
 * hcnn_cfg_block_keys and a field of hcnn_block_spec (include/hcnn/model_spec.h);
 * a new top-level key a row of hcnn_cfg_top_keys and a field of hcnn_config. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "hcnn/common.h"
#include "internal.h"

/* ======================================================================
 * Names of enumerations
 * ==================================================================== */

static const char *const schedule_names[] = {"constant", "step", "cosine"};
static const char *const init_names[] = {"he", "xavier"};
static const char *const strategy_names[] = {"serial", "data", "pipeline"};
static const char *const pipe_schedule_names[] = {"gpipe", "1f1b"};
static const char *const progress_names[] = {"test", "thread"};
static const char *const sharding_names[] = {"none", "ranks"};
static const char *const nonfinite_names[] = {"abort", "skip"};
static const char *const on_error_names[] = {"stop", "continue"};
static const char *const conv_algo_names[] = {"auto",     "batched",     "per_thread",
                                               "winograd", "winograd_f2", "winograd_f4"};
static const char *const prefetch_names[] = {"auto", "on", "off"};
static const char *const device_names[] = {"cpu", "cuda"};
static const char *const precision_names[] = {"fp32", "tf32", "bf16"};
static const char *const mpi_device_memory_names[] = {"auto", "staged"};
static const char *const cuda_graphs_names[] = {"auto", "off"};
static const char *const dataset_names[] = {"mnist", "fashion_mnist", "cifar10", "synthetic"};
const char *const hcnn_cfg_shortcut_names[3] = {"auto", "identity", "projection"};

const char *hcnn_cfg_enum_name(const char *const *names, int n, int v)
{
    return (v >= 0 && v < n) ? names[v] : "unknown";
}

#define ENUM_NAME(fn, type, names)                                                             \
    const char *fn(type v) { return hcnn_cfg_enum_name(names, COUNT(names), (int)v); }
ENUM_NAME(hcnn_schedule_name, hcnn_schedule, schedule_names)
ENUM_NAME(hcnn_init_name, hcnn_init, init_names)
ENUM_NAME(hcnn_strategy_name, hcnn_strategy_kind, strategy_names)
ENUM_NAME(hcnn_progress_name, hcnn_allreduce_progress, progress_names)
ENUM_NAME(hcnn_sharding_name, hcnn_optimizer_sharding, sharding_names)
ENUM_NAME(hcnn_prefetch_name, hcnn_prefetch, prefetch_names)
ENUM_NAME(hcnn_conv_algo_name, hcnn_conv_algo, conv_algo_names)
ENUM_NAME(hcnn_device_name, hcnn_device, device_names)
ENUM_NAME(hcnn_precision_name, hcnn_precision, precision_names)
ENUM_NAME(hcnn_mpi_device_memory_name, hcnn_mpi_device_memory, mpi_device_memory_names)
ENUM_NAME(hcnn_cuda_graphs_name, hcnn_cuda_graphs, cuda_graphs_names)
ENUM_NAME(hcnn_pipe_schedule_name, hcnn_pipe_schedule, pipe_schedule_names)
ENUM_NAME(hcnn_nonfinite_name, hcnn_nonfinite, nonfinite_names)
ENUM_NAME(hcnn_on_error_name, hcnn_on_error, on_error_names)

/* ======================================================================
 * Defaults
 * ==================================================================== */

void hcnn_config_defaults(hcnn_config *cfg)
{
    /* zero first so that padding and unused string bytes are deterministic */
    memset(cfg, 0, sizeof *cfg);
    cfg->synthetic_train = 1024;
    cfg->synthetic_test = 256;
    cfg->epochs = 1;
    cfg->batch_size = 64;
    cfg->eval_batch_size = 0; /* 0: batch_size */
    cfg->lr = 0.05;
    cfg->momentum = 0.9;
    cfg->nesterov = 0;
    cfg->weight_decay = 0.0;
    cfg->schedule = HCNN_SCHED_CONSTANT;
    cfg->warmup_epochs = 0.0;
    cfg->lr_step_epochs = 30;
    cfg->lr_gamma = 0.1;
    cfg->min_lr = 0.0;
    cfg->init = HCNN_INIT_HE;
    cfg->seed = 42;
    cfg->threads = 0;
    cfg->strategy = HCNN_STRATEGY_SERIAL;
    cfg->bucket_mb = 25.0;
    cfg->allreduce_progress = HCNN_PROGRESS_TEST;
    cfg->checkpoint_every = 5;
    cfg->checkpoint_keep = 2;
    cfg->stages = 1;
    cfg->microbatches = 1;
    cfg->pipeline_schedule = HCNN_PIPE_1F1B;
    cfg->max_steps = 0;
    cfg->train_limit = 0;
    cfg->test_limit = 0;
    cfg->shuffle = 1;
    cfg->augment = -1;
    cfg->progress_every = 0;
    cfg->im2col_mb = 8.0;
    cfg->conv_algo = HCNN_CONV_AUTO;
    cfg->data_prefetch = HCNN_PREFETCH_AUTO;
    strcpy(cfg->blas_kernels, "auto");
    cfg->nonfinite = HCNN_NONFINITE_ABORT;
    cfg->nonfinite_max_skips = 3;
    cfg->checkpoint_on_error = HCNN_ON_ERROR_STOP;
    cfg->stall_timeout_s = 300.0;
}

/* ======================================================================
 * Stage 3: blocks and the model
 * ==================================================================== */

/* The keys a block may have, in the order the writer emits them; a type
 * accepts those of its row of hcnn_cfg_block_types (type and name always). */
/* clang-format off */
enum { BK_TYPE, BK_NAME, BK_OUT, BK_KERNEL, BK_STRIDE, BK_PAD, BK_BIAS, BK_EPS, BK_MOMENTUM,
       BK_P, BK_SHORTCUT, BK_NEGATIVE_SLOPE };
/* clang-format on */
#define BLOCK_FIELD(f) offsetof(hcnn_block_spec, f)
const block_key hcnn_cfg_block_keys[] = {
    [BK_TYPE] = {"type", BKT_TYPE, 0, 0, {0}},
    [BK_NAME] = {"name", BKT_NAME, BLOCK_FIELD(name), 0, {0}},
    [BK_OUT] = {"out", BKT_INT, BLOCK_FIELD(out), 1, {0}},
    [BK_KERNEL] = {"kernel", BKT_PAIR, BLOCK_FIELD(kh), 1, {0}},
    [BK_STRIDE] = {"stride", BKT_PAIR, BLOCK_FIELD(sh), 1, {0}},
    [BK_PAD] = {"pad", BKT_PAIR, BLOCK_FIELD(ph), 0, {0}},
    [BK_BIAS] = {"bias", BKT_BOOL, BLOCK_FIELD(bias), 0, {0}},
    [BK_EPS] = {"eps", BKT_FLOAT, BLOCK_FIELD(eps), 0, {0.0, INFINITY, 1, 0}},
    [BK_MOMENTUM] = {"momentum", BKT_FLOAT, BLOCK_FIELD(momentum), 0, {0.0, 1.0, 1, 0}},
    [BK_P] = {"p", BKT_FLOAT, BLOCK_FIELD(p), 0, {0.0, 1.0, 0, 1}},
    [BK_SHORTCUT] = {"shortcut", BKT_SHORTCUT, BLOCK_FIELD(shortcut), 0, {0}},
    [BK_NEGATIVE_SLOPE] = {"negative_slope", BKT_FLOAT, BLOCK_FIELD(negative_slope), 0,
                           {0.0, 1.0, 0, 1}},
};
const int hcnn_cfg_nblock_keys = COUNT(hcnn_cfg_block_keys);

/* Each block type: the keys it accepts, those it requires, and its defaults
 * (a residual block's batch norms take the bn defaults; not configurable). */
#define K(k) (1u << (k))
#define WINDOW K(BK_KERNEL) | K(BK_STRIDE) | K(BK_PAD)
#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f
/* clang-format off */
const block_type hcnn_cfg_block_types[HCNN_BLOCK_KIND_COUNT] = {
    [HCNN_BLOCK_CONV] = {K(BK_OUT) | WINDOW | K(BK_BIAS), K(BK_OUT), 0,
                         {.kh = 3, .kw = 3, .sh = 1, .sw = 1, .bias = 1}},
    [HCNN_BLOCK_BN] = {K(BK_EPS) | K(BK_MOMENTUM), 0, 0, {.eps = BN_EPS, .momentum = BN_MOMENTUM}},
    [HCNN_BLOCK_RELU] = {0, 0, 0, {0}},
    [HCNN_BLOCK_MAXPOOL] = {WINDOW, 0, 1, {.kh = 2, .kw = 2}},
    [HCNN_BLOCK_AVGPOOL] = {WINDOW, 0, 1, {.kh = 2, .kw = 2}},
    [HCNN_BLOCK_GAP] = {0, 0, 0, {0}},
    [HCNN_BLOCK_FC] = {K(BK_OUT) | K(BK_BIAS), K(BK_OUT), 0, {.bias = 1}},
    [HCNN_BLOCK_DROPOUT] = {K(BK_P), 0, 0, {.p = 0.5f}},
    [HCNN_BLOCK_FLATTEN] = {0, 0, 0, {0}},
    [HCNN_BLOCK_RESIDUAL] = {K(BK_OUT) | K(BK_STRIDE) | K(BK_SHORTCUT), K(BK_OUT), 0,
                             {.sh = 1, .sw = 1, .shortcut = HCNN_SHORTCUT_AUTO, .eps = BN_EPS,
                              .momentum = BN_MOMENTUM}},
    [HCNN_BLOCK_LEAKY_RELU] = {K(BK_NEGATIVE_SLOPE), 0, 0, {.negative_slope = 0.01f}},
};
/* clang-format on */

static unsigned accepted_keys(hcnn_block_kind kind)
{
    return K(BK_TYPE) | K(BK_NAME) | hcnn_cfg_block_types[kind].keys;
}

static int apply_block_key(const ictx *c, const block_key *k, const node *n, hcnn_block_spec *b)
{
    char *field = (char *)b + k->off;
    int *ints = (int *)(void *)field, v = 0;
    switch (k->type) {
    case BKT_NAME:
        return hcnn_cfg_get_name(c, n, field, sizeof b->name, "");
    case BKT_INT:
        return hcnn_cfg_get_int_range(c, n, k->lo, HCNN_MAX_DIM, ints);
    case BKT_PAIR:
        return hcnn_cfg_get_pair(c, n, k->lo, &ints[0], &ints[1]);
    case BKT_BOOL:
        return hcnn_cfg_get_bool(c, n, ints);
    case BKT_FLOAT:
        return hcnn_cfg_get_float(c, n, k->r, (float *)(void *)field);
    case BKT_SHORTCUT:
        if (hcnn_cfg_get_choice(c, n, hcnn_cfg_shortcut_names, COUNT(hcnn_cfg_shortcut_names), &v))
            return HCNN_EINVAL;
        b->shortcut = (hcnn_shortcut)v;
        return HCNN_OK;
    default:
        return HCNN_OK; /* BKT_TYPE: already read */
    }
}

static int unknown_block_key(const ictx *c, const entry *e, hcnn_block_kind kind)
{
    char valid[160];
    size_t o = 0;
    valid[0] = '\0';
    for (int k = 0; k < hcnn_cfg_nblock_keys && o < sizeof valid; k++)
        if (accepted_keys(kind) & K(k))
            o += (size_t)snprintf(valid + o, sizeof valid - o, "%s%s", o ? ", " : "",
                                  hcnn_cfg_block_keys[k].name);
    return hcnn_cfg_fail_at(c->file, e->line,
                            "unknown key '%s' for block type '%s' (valid keys: %s)", c->path.s,
                            hcnn_block_kind_name(kind), valid);
}

/* Checks that need the whole block: required keys, window defaults and
 * limits. */
static int finish_block(ictx *c, const node *n, hcnn_block_spec *b, unsigned seen)
{
    const block_type *t = &hcnn_cfg_block_types[b->kind];
    for (int k = 0; k < hcnn_cfg_nblock_keys; k++)
        if ((t->required & K(k)) && !(seen & K(k)))
            return hcnn_cfg_fail_at(c->file, n->line,
                                    "missing required key '%s.%s' for block type '%s'", c->path.s,
                                    hcnn_cfg_block_keys[k].name, hcnn_block_kind_name(b->kind));
    if (!t->window)
        return HCNN_OK;
    if (!(seen & K(BK_STRIDE))) {
        b->sh = b->kh;
        b->sw = b->kw;
    }
    if (b->ph > b->kh / 2 || b->pw > b->kw / 2) {
        /* seen has BK_PAD here (pad defaults to 0), so n is a mapping with a pad entry */
        const entry *e = hcnn_cfg_node_find(n, "pad");
        size_t old = hcnn_cfg_path_push(&c->path, "pad");
        int rc =
            hcnn_cfg_fail_at(c->file, e->val->line,
                             "%s: expected at most half the kernel (kernel [%d, %d]), got [%d, %d]",
                             c->path.s, b->kh, b->kw, b->ph, b->pw);
        hcnn_cfg_path_pop(&c->path, old);
        return rc;
    }
    return HCNN_OK;
}

static int find_block_key(const char *key)
{
    for (int k = 0; k < hcnn_cfg_nblock_keys; k++)
        if (!strcmp(key, hcnn_cfg_block_keys[k].name))
            return k;
    return -1;
}

/* A block is a bare type name ("relu") or a mapping with a `type` key. */
static int interpret_block(ictx *c, const node *n, hcnn_block_spec *b)
{
    const node *type_node = n;
    if (n && n->type == NODE_MAP) {
        const entry *e = hcnn_cfg_node_find(n, "type");
        if (!e)
            return hcnn_cfg_fail_at(c->file, n->line, "missing required key '%s.type'", c->path.s);
        type_node = e->val;
    } else if (!hcnn_cfg_is_scalar(n)) {
        return hcnn_cfg_fail_value(c, n, "a block (a type name or a mapping with 'type')");
    }
    size_t old = n->type == NODE_MAP ? hcnn_cfg_path_push(&c->path, "type") : c->path.len;
    int kind = 0;
    const char *types[HCNN_BLOCK_KIND_COUNT];
    for (int k = 0; k < HCNN_BLOCK_KIND_COUNT; k++)
        types[k] = hcnn_block_kind_name((hcnn_block_kind)k);
    int rc = hcnn_cfg_get_choice(c, type_node, types, HCNN_BLOCK_KIND_COUNT, &kind);
    hcnn_cfg_path_pop(&c->path, old);
    if (rc)
        return rc;
    /* memcpy, padding included: loaded configurations compare equal byte for byte */
    memcpy(b, &hcnn_cfg_block_types[kind].defaults, sizeof *b);
    b->kind = (hcnn_block_kind)kind;

    unsigned seen = 0;
    for (size_t i = 0; n->type == NODE_MAP && i < n->n; i++) {
        const entry *e = &n->items[i];
        int k = find_block_key(e->key);
        old = hcnn_cfg_path_push(&c->path, e->key);
        if (k < 0 || !(accepted_keys((hcnn_block_kind)kind) & K(k)))
            rc = unknown_block_key(c, e, (hcnn_block_kind)kind);
        else
            rc = apply_block_key(c, &hcnn_cfg_block_keys[k], e->val, b);
        hcnn_cfg_path_pop(&c->path, old);
        if (rc)
            return rc;
        seen |= K(k);
    }
    return finish_block(c, n, b, seen);
}

/* Two blocks with the same name would give two tensors the same name. */
static int check_block_names(ictx *c, const node *seq, const hcnn_model_spec *m)
{
    for (int i = 1; i < m->nblocks; i++) {
        if (!m->blocks[i].name[0])
            continue;
        for (int j = 0; j < i; j++) {
            if (strcmp(m->blocks[i].name, m->blocks[j].name) != 0)
                continue;
            size_t old = hcnn_cfg_path_push_index(&c->path, (size_t)i);
            int rc = hcnn_cfg_fail_at(c->file, seq->items[i].val->line,
                                      "%s.name: duplicate block name '%s' (also used by block %d)",
                                      c->path.s, m->blocks[i].name, j);
            hcnn_cfg_path_pop(&c->path, old);
            return rc;
        }
    }
    return HCNN_OK;
}

static int interpret_blocks(ictx *c, const node *n, hcnn_model_spec *m)
{
    if (!n || n->type != NODE_SEQ || n->n == 0)
        return hcnn_cfg_fail_value(c, n, "a non-empty sequence of blocks");
    if (n->n > HCNN_MAX_BLOCKS) {
        char expected[64];
        snprintf(expected, sizeof expected, "at most %d blocks", HCNN_MAX_BLOCKS);
        return hcnn_cfg_fail_value(c, n, expected);
    }
    for (size_t i = 0; i < n->n; i++) {
        size_t old = hcnn_cfg_path_push_index(&c->path, i);
        int rc = interpret_block(c, n->items[i].val, &m->blocks[i]);
        hcnn_cfg_path_pop(&c->path, old);
        if (rc)
            return rc;
    }
    m->nblocks = (int)n->n;
    return check_block_names(c, n, m);
}

static int get_input_shape(const ictx *c, const node *n, hcnn_model_spec *m)
{
    int *dims[3] = {&m->in_c, &m->in_h, &m->in_w};
    if (!n || n->type != NODE_SEQ || n->n != 3)
        return hcnn_cfg_fail_value(c, n, "[c, h, w] (three positive integers)");
    for (size_t i = 0; i < 3; i++)
        if (!hcnn_cfg_pair_item(n->items[i].val, 1, dims[i]))
            return hcnn_cfg_fail_value(c, n->items[i].val,
                                       "[c, h, w] (three positive integers, each at most 1048576)");
    return HCNN_OK;
}

static int interpret_model(ictx *c, const node *n, hcnn_model_spec *m)
{
    static const char *const required[] = {"input", "classes", "blocks"};
    if (!n || n->type != NODE_MAP)
        return hcnn_cfg_fail_value(c, n, "a mapping with input, classes and blocks");
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < n->n; i++) {
        const entry *e = &n->items[i];
        size_t old = hcnn_cfg_path_push(&c->path, e->key);
        int rc;
        if (!strcmp(e->key, "name"))
            rc = hcnn_cfg_get_name(c, e->val, m->name, sizeof m->name, "-");
        else if (!strcmp(e->key, "input"))
            rc = get_input_shape(c, e->val, m);
        else if (!strcmp(e->key, "classes"))
            rc = hcnn_cfg_get_int_range(c, e->val, 2, HCNN_MAX_DIM, &m->classes);
        else if (!strcmp(e->key, "blocks"))
            rc = interpret_blocks(c, e->val, m);
        else
            rc = hcnn_cfg_fail_at(c->file, e->line,
                                  "unknown key '%s' (valid keys: name, input, classes, blocks)",
                                  c->path.s);
        hcnn_cfg_path_pop(&c->path, old);
        if (rc)
            return rc;
    }
    for (int i = 0; i < COUNT(required); i++)
        if (!hcnn_cfg_node_find(n, required[i]))
            return hcnn_cfg_fail_at(c->file, n->line, "missing required key '%s.%s'", c->path.s,
                                    required[i]);
    if (!m->name[0])
        snprintf(m->name, sizeof m->name, "model");
    return HCNN_OK;
}

/* ======================================================================
 * Stage 3: top-level keys (one table drives both reading and writing)
 * ==================================================================== */

static int get_schedule(const hcnn_config *c) { return (int)c->schedule; }
static void set_schedule(hcnn_config *c, int v) { c->schedule = (hcnn_schedule)v; }
static int get_init(const hcnn_config *c) { return (int)c->init; }
static void set_init(hcnn_config *c, int v) { c->init = (hcnn_init)v; }
static int get_strategy(const hcnn_config *c) { return (int)c->strategy; }
static void set_strategy(hcnn_config *c, int v) { c->strategy = (hcnn_strategy_kind)v; }
static int get_pipe_schedule(const hcnn_config *c) { return (int)c->pipeline_schedule; }
static void set_pipe_schedule(hcnn_config *c, int v)
{
    c->pipeline_schedule = (hcnn_pipe_schedule)v;
}
static int get_prefetch(const hcnn_config *c) { return (int)c->data_prefetch; }
static void set_prefetch(hcnn_config *c, int v) { c->data_prefetch = (hcnn_prefetch)v; }
static int get_device(const hcnn_config *c) { return (int)c->device; }
static void set_device(hcnn_config *c, int v) { c->device = (hcnn_device)v; }
static int get_precision(const hcnn_config *c) { return (int)c->precision; }
static void set_precision(hcnn_config *c, int v) { c->precision = (hcnn_precision)v; }
static int get_cuda_graphs(const hcnn_config *c) { return (int)c->cuda_graphs; }
static void set_cuda_graphs(hcnn_config *c, int v) { c->cuda_graphs = (hcnn_cuda_graphs)v; }
static int get_mpi_device_memory(const hcnn_config *c) { return (int)c->mpi_device_memory; }
static void set_mpi_device_memory(hcnn_config *c, int v)
{
    c->mpi_device_memory = (hcnn_mpi_device_memory)v;
}
static int get_conv_algo(const hcnn_config *c) { return (int)c->conv_algo; }
static void set_conv_algo(hcnn_config *c, int v) { c->conv_algo = (hcnn_conv_algo)v; }
static int get_nonfinite(const hcnn_config *c) { return (int)c->nonfinite; }
static void set_nonfinite(hcnn_config *c, int v) { c->nonfinite = (hcnn_nonfinite)v; }
static int get_on_error(const hcnn_config *c) { return (int)c->checkpoint_on_error; }
static void set_on_error(hcnn_config *c, int v) { c->checkpoint_on_error = (hcnn_on_error)v; }
static int get_progress(const hcnn_config *c) { return (int)c->allreduce_progress; }
static void set_progress(hcnn_config *c, int v)
{
    c->allreduce_progress = (hcnn_allreduce_progress)v;
}
static int get_sharding(const hcnn_config *c) { return (int)c->optimizer_sharding; }
static void set_sharding(hcnn_config *c, int v)
{
    c->optimizer_sharding = (hcnn_optimizer_sharding)v;
}

#define FIELD(f) offsetof(hcnn_config, f)
#define FSIZE(f) sizeof(((hcnn_config *)0)->f)
#define K_INT(n, f, min)                                                                           \
    {                                                                                              \
        .name = n, .type = KT_INT, .off = FIELD(f), .lo = min                                      \
    }
#define K_INTR(n, f, min, max)                                                                     \
    {                                                                                              \
        .name = n, .type = KT_INT, .off = FIELD(f), .lo = min, .hi = max                           \
    }
#define K_LONGR(n, f, min, max)                                                                    \
    {                                                                                              \
        .name = n, .type = KT_LONG, .off = FIELD(f), .lo = min, .hi = max                          \
    }
#define K_SINGLE(n, f, l, lopen, h, hopen)                                                         \
    {                                                                                              \
        .name = n, .type = KT_NUM, .off = FIELD(f), .r = { l, h, lopen, hopen }, .single = 1       \
    }
#define K_NUM(n, f, l, lopen, h, hopen)                                                            \
    {                                                                                              \
        .name = n, .type = KT_NUM, .off = FIELD(f), .r = { l, h, lopen, hopen }                    \
    }
#define K_BOOL(n, f)                                                                               \
    {                                                                                              \
        .name = n, .type = KT_BOOL, .off = FIELD(f)                                                \
    }
#define K_STR(n, f)                                                                                \
    {                                                                                              \
        .name = n, .type = KT_STR, .off = FIELD(f), .size = FSIZE(f)                               \
    }
#define K_ENUM(n, list, g, s)                                                                      \
    {                                                                                              \
        .name = n, .type = KT_ENUM, .names = list, .nnames = COUNT(list), .get = g, .set = s       \
    }

const keydef hcnn_cfg_top_keys[] = {
    {.name = "model", .type = KT_MODEL, .required = 1},
    {.name = "dataset",
     .type = KT_CHOICE,
     .off = FIELD(dataset),
     .size = FSIZE(dataset),
     .names = dataset_names,
     .nnames = COUNT(dataset_names),
     .required = 1},
    K_STR("data_dir", data_dir),
    K_INTR("synthetic_train", synthetic_train, 1, HCNN_MAX_SAMPLES),
    K_INTR("synthetic_test", synthetic_test, 1, HCNN_MAX_SAMPLES),
    K_INTR("epochs", epochs, 1, HCNN_MAX_EPOCHS),
    K_INTR("batch_size", batch_size, 1, HCNN_MAX_BATCH),
    K_INTR("eval_batch_size", eval_batch_size, 0, HCNN_MAX_BATCH),
    K_SINGLE("lr", lr, 0.0, 1, INFINITY, 0),
    K_SINGLE("momentum", momentum, 0.0, 0, 1.0, 1),
    K_BOOL("nesterov", nesterov),
    K_SINGLE("weight_decay", weight_decay, 0.0, 0, INFINITY, 0),
    K_ENUM("schedule", schedule_names, get_schedule, set_schedule),
    K_NUM("warmup_epochs", warmup_epochs, 0.0, 0, HCNN_MAX_EPOCHS, 0),
    K_INTR("lr_step_epochs", lr_step_epochs, 1, HCNN_MAX_EPOCHS),
    K_SINGLE("lr_gamma", lr_gamma, 0.0, 1, 1.0, 0),
    K_SINGLE("min_lr", min_lr, 0.0, 0, INFINITY, 0),
    K_ENUM("init", init_names, get_init, set_init),
    {.name = "seed", .type = KT_U64, .off = FIELD(seed)},
    K_INTR("threads", threads, 0, HCNN_MAX_THREADS),
    K_ENUM("strategy", strategy_names, get_strategy, set_strategy),
    K_NUM("bucket_mb", bucket_mb, 0.0, 1, HCNN_MAX_MB, 0),
    K_ENUM("allreduce_progress", progress_names, get_progress, set_progress),
    K_ENUM("optimizer_sharding", sharding_names, get_sharding, set_sharding),
    K_INTR("stages", stages, 1, HCNN_MAX_BLOCKS),
    K_INT("microbatches", microbatches, 1),
    K_ENUM("pipeline_schedule", pipe_schedule_names, get_pipe_schedule, set_pipe_schedule),
    {.name = "partition", .type = KT_PARTITION},
    K_LONGR("max_steps", max_steps, 0, HCNN_MAX_STEPS),
    K_LONGR("train_limit", train_limit, 0, HCNN_MAX_SAMPLES),
    K_LONGR("test_limit", test_limit, 0, HCNN_MAX_SAMPLES),
    K_BOOL("shuffle", shuffle),
    {.name = "augment", .type = KT_AUGMENT, .off = FIELD(augment)},
    K_STR("csv", csv),
    K_STR("checkpoint_dir", checkpoint_dir),
    K_INT("checkpoint_every", checkpoint_every, 0),
    K_INT("checkpoint_keep", checkpoint_keep, 1),
    K_INT("progress_every", progress_every, 0),
    K_NUM("im2col_mb", im2col_mb, 0.0, 1, HCNN_MAX_MB, 0),
    K_ENUM("device", device_names, get_device, set_device),
    K_ENUM("precision", precision_names, get_precision, set_precision),
    K_ENUM("mpi_device_memory", mpi_device_memory_names, get_mpi_device_memory,
           set_mpi_device_memory),
    K_ENUM("cuda_graphs", cuda_graphs_names, get_cuda_graphs, set_cuda_graphs),
    K_ENUM("conv_algo", conv_algo_names, get_conv_algo, set_conv_algo),
    K_ENUM("data_prefetch", prefetch_names, get_prefetch, set_prefetch),
    {.name = "blas_kernels", .type = KT_NAME, .off = FIELD(blas_kernels),
     .size = FSIZE(blas_kernels)},
    K_ENUM("nonfinite", nonfinite_names, get_nonfinite, set_nonfinite),
    K_INTR("nonfinite_max_skips", nonfinite_max_skips, 0, INT_MAX),
    K_ENUM("checkpoint_on_error", on_error_names, get_on_error, set_on_error),
    K_NUM("stall_timeout_s", stall_timeout_s, 0.0, 0, 1e9, 0),
};
const int hcnn_cfg_ntop_keys = COUNT(hcnn_cfg_top_keys);
#define NKEYS hcnn_cfg_ntop_keys

static const keydef *find_top_key(const char *name)
{
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(hcnn_cfg_top_keys[i].name, name))
            return &hcnn_cfg_top_keys[i];
    return NULL;
}

static int apply_top_key(ictx *c, const keydef *d, const node *n, hcnn_config *cfg)
{
    char *field = (char *)cfg + d->off;
    long long v;
    int i, rc;
    switch (d->type) {
    case KT_MODEL:
        return interpret_model(c, n, &cfg->model);
    case KT_INT:
        return hcnn_cfg_get_int_range(c, n, d->lo, d->hi ? (int)d->hi : INT_MAX,
                                      (int *)(void *)field);
    case KT_LONG:
        if ((rc = hcnn_cfg_get_ll(c, n, d->lo, d->hi ? d->hi : LONG_MAX, LONG_MAX, &v)) == HCNN_OK)
            *(long *)(void *)field = (long)v;
        return rc;
    case KT_U64:
        return hcnn_cfg_get_u64(c, n, (uint64_t *)(void *)field);
    case KT_NUM:
        if (d->single)
            return hcnn_cfg_get_num_single(c, n, d->r, (double *)(void *)field);
        return hcnn_cfg_get_num(c, n, d->r, (double *)(void *)field);
    case KT_BOOL:
        return hcnn_cfg_get_bool(c, n, (int *)(void *)field);
    case KT_STR:
        return hcnn_cfg_get_str(c, n, field, d->size);
    case KT_NAME:
        return hcnn_cfg_get_name(c, n, field, d->size, "");
    case KT_CHOICE:
        if ((rc = hcnn_cfg_get_choice(c, n, d->names, d->nnames, &i)) == HCNN_OK) {
            memset(field, 0, d->size);
            memcpy(field, d->names[i], strlen(d->names[i]));
        }
        return rc;
    case KT_ENUM:
        if ((rc = hcnn_cfg_get_choice(c, n, d->names, d->nnames, &i)) == HCNN_OK)
            d->set(cfg, i);
        return rc;
    case KT_AUGMENT:
        if (hcnn_cfg_is_scalar(n) && !strcmp(n->str, "default")) {
            cfg->augment = -1;
            return HCNN_OK;
        }
        if (hcnn_cfg_is_scalar(n) && hcnn_cfg_parse_bool(n->str, &cfg->augment))
            return HCNN_OK;
        return hcnn_cfg_fail_value(c, n, "a boolean or 'default'");
    case KT_PARTITION:
        /* [] (automatic) or the first block of each stage: non-negative
         * integers; their order is checked against the model at start */
        if (!n || n->type != NODE_SEQ || n->n > HCNN_MAX_BLOCKS)
            return hcnn_cfg_fail_value(
                c, n, "a list of block indices, e.g. [0, 5] (or [] for automatic)");
        cfg->npartition = 0;
        for (size_t k = 0; k < n->n; k++) {
            size_t old = hcnn_cfg_path_push_index(&c->path, k);
            rc = hcnn_cfg_get_int(c, n->items[k].val, 0, &cfg->partition[cfg->npartition++]);
            hcnn_cfg_path_pop(&c->path, old);
            if (rc)
                return rc;
        }
        return HCNN_OK;
    }
    return HCNN_OK;
}

static int interpret(ictx *c, const node *root, hcnn_config *cfg)
{
    unsigned char seen[NKEYS];
    memset(seen, 0, sizeof seen);
    if (root && root->type == NODE_SCALAR && root->is_null)
        root = NULL; /* an empty document */
    if (root && root->type != NODE_MAP) {
        char got[112];
        hcnn_cfg_describe(root, got, sizeof got);
        return hcnn_cfg_fail_at(c->file, root->line,
                                "expected a mapping of keys at the top level, got %s", got);
    }
    for (size_t i = 0; root && i < root->n; i++) {
        const entry *e = &root->items[i];
        const keydef *d = find_top_key(e->key);
        if (!d)
            return hcnn_cfg_fail_at(c->file, e->line,
                                    "unknown key '%s' (see docs/config-reference.md)", e->key);
        seen[d - hcnn_cfg_top_keys] = 1;
        size_t old = hcnn_cfg_path_push(&c->path, e->key);
        int rc = apply_top_key(c, d, e->val, cfg);
        hcnn_cfg_path_pop(&c->path, old);
        if (rc)
            return rc;
    }
    for (int i = 0; i < NKEYS; i++)
        if (hcnn_cfg_top_keys[i].required && !seen[i])
            return hcnn_cfg_fail_at(c->file, LINE_NONE, "missing required key '%s'",
                                    hcnn_cfg_top_keys[i].name);
    if (!cfg->data_dir[0])
        snprintf(cfg->data_dir, sizeof cfg->data_dir, "data/%s", cfg->dataset);
    return HCNN_OK;
}

int hcnn_config_load(hcnn_config *cfg, const char *path, const char *const *sets, int nset)
{
    hcnn_config_defaults(cfg);
    if (!path)
        return hcnn_error("no configuration file given");
    size_t len = strlen(path);
    /* keep the path even on failure: callers use it in their own messages */
    memcpy(cfg->path, path, len < sizeof cfg->path ? len : sizeof cfg->path - 1);
    if (len >= sizeof cfg->path)
        return hcnn_error("configuration path is too long (%zu characters, at most %d): %.60s...",
                          len, HCNN_PATH_MAX - 1, path);

    node *root = NULL;
    int rc = hcnn_cfg_parse_file(path, &root);
    for (int i = 0; rc == HCNN_OK && i < nset; i++)
        rc = hcnn_cfg_apply_override(&root, path, sets[i]);
    if (rc == HCNN_OK) {
        ictx c;
        memset(&c, 0, sizeof c);
        c.file = path;
        rc = interpret(&c, root, cfg);
    }
    /* tf32 is no CPU's; whether this CPU runs bf16 depends on the machine
     * (and on each node of a job): checked at start on every rank, not here
     * (hcnn_check_precision, include/hcnn/train.h) */
    if (rc == HCNN_OK && cfg->device == HCNN_DEVICE_CPU && cfg->precision == HCNN_PRECISION_TF32)
        rc = hcnn_error("%s: precision: tf32 needs device: cuda (the CPU has no TF32 arithmetic; "
                        "precision: fp32)",
                        path);
#if !HCNN_HAVE_CUDA
    if (rc == HCNN_OK && cfg->device == HCNN_DEVICE_CUDA)
        rc = hcnn_error("%s: device: cuda: this hcnn was built without CUDA; rebuild it with "
                        "./configure --with-cuda (docs/gpu-nodes.md), or set device: cpu",
                        path);
#endif
    hcnn_cfg_node_free(root);
    if (rc != HCNN_OK) {
        /* no half-filled configuration: defaults plus the path */
        hcnn_config_defaults(cfg);
        memcpy(cfg->path, path, len);
    }
    return rc;
}
