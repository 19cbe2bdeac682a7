/* Run configuration: YAML file + `--set key=value` overrides -> hcnn_config.
 *
 * Three stages, so that overrides and the file are validated by the same
 * code and every message can name the file, the dotted key and the line:
 *   1. libyaml events -> a small generic tree (scalar / sequence / mapping,
 *      each node remembering its line; nodes from --set have line 0);
 *   2. each override's value is parsed as a YAML document and grafted into
 *      the tree at its dotted path;
 *   3. the tree is interpreted into hcnn_config with strict checks.
 * The writer emits the same keys from one table, so write -> load is exact. */
#define _POSIX_C_SOURCE 200809L
#include "hcnn/config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "hcnn/common.h"

/* ======================================================================
 * Names of enumerations
 * ==================================================================== */

static const char *const block_kind_names[HCNN_BLOCK_KIND_COUNT] = {
    "conv", "bn", "relu", "maxpool", "avgpool", "gap", "fc", "dropout", "flatten", "residual",
};
static const char *const schedule_names[] = {"constant", "step", "cosine"};
static const char *const init_names[] = {"he", "xavier"};
static const char *const strategy_names[] = {"serial", "data", "pipeline"};
static const char *const pipe_schedule_names[] = {"gpipe", "1f1b"};
static const char *const progress_names[] = {"test", "thread"};
static const char *const conv_algo_names[] = {"auto", "batched", "per_thread"};
static const char *const prefetch_names[] = {"auto", "on", "off"};
static const char *const dataset_names[] = {"mnist", "fashion_mnist", "cifar10", "synthetic"};
static const char *const shortcut_names[] = {"auto", "identity", "projection"};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *enum_name(const char *const *names, int n, int v)
{
    return (v >= 0 && v < n) ? names[v] : "unknown";
}

const char *hcnn_block_kind_name(hcnn_block_kind k)
{
    return enum_name(block_kind_names, COUNT(block_kind_names), (int)k);
}
const char *hcnn_schedule_name(hcnn_schedule s) { return enum_name(schedule_names, COUNT(schedule_names), (int)s); }
const char *hcnn_init_name(hcnn_init i) { return enum_name(init_names, COUNT(init_names), (int)i); }
const char *hcnn_strategy_name(hcnn_strategy s) { return enum_name(strategy_names, COUNT(strategy_names), (int)s); }
const char *hcnn_progress_name(hcnn_allreduce_progress p) { return enum_name(progress_names, COUNT(progress_names), (int)p); }
const char *hcnn_prefetch_name(hcnn_prefetch p) { return enum_name(prefetch_names, COUNT(prefetch_names), (int)p); }
const char *hcnn_conv_algo_name(hcnn_conv_algo a) { return enum_name(conv_algo_names, COUNT(conv_algo_names), (int)a); }
const char *hcnn_pipe_schedule_name(hcnn_pipe_schedule s) { return enum_name(pipe_schedule_names, COUNT(pipe_schedule_names), (int)s); }

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
}

/* ======================================================================
 * Generic node tree
 * ==================================================================== */

typedef enum node_type { NODE_SCALAR, NODE_SEQ, NODE_MAP } node_type;

struct node;
typedef struct entry {
    char *key;        /* mapping key; NULL in a sequence */
    int line;         /* line of the key (0: from --set) */
    struct node *val;
} entry;

typedef struct node {
    node_type type;
    int line;         /* 1-based line in the file; 0: from --set */
    int is_null;      /* plain scalar "", "~" or "null" */
    char *str;        /* scalar text */
    entry *items;     /* sequence items or mapping entries, in order */
    size_t n, cap;
} node;

#define LINE_SET 0    /* the node came from a --set override */
#define LINE_NONE (-1) /* no useful line (e.g. a missing top-level key) */
#define MAX_DEPTH 64   /* nesting limit: keeps the recursion bounded */

static int out_of_memory(void) { return hcnn_error_code(HCNN_ENOMEM, "out of memory while reading the configuration"); }

static void node_free(node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++) {
        free(n->items[i].key);
        node_free(n->items[i].val);
    }
    free(n->items);
    free(n->str);
    free(n);
}

static node *node_new(node_type type, int line)
{
    node *n = calloc(1, sizeof *n);
    if (n) {
        n->type = type;
        n->line = line;
    }
    return n;
}

static node *scalar_new(const char *text, size_t len, int line)
{
    node *n = node_new(NODE_SCALAR, line);
    if (!n)
        return NULL;
    n->str = malloc(len + 1);
    if (!n->str) {
        free(n);
        return NULL;
    }
    memcpy(n->str, text, len);
    n->str[len] = '\0';
    return n;
}

/* Append an item; takes ownership of key and val only on success. */
static int node_push(node *parent, char *key, int line, node *val)
{
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? 2 * parent->cap : 8;
        entry *items = realloc(parent->items, cap * sizeof *items);
        if (!items)
            return out_of_memory();
        parent->items = items;
        parent->cap = cap;
    }
    parent->items[parent->n].key = key;
    parent->items[parent->n].line = line;
    parent->items[parent->n].val = val;
    parent->n++;
    return HCNN_OK;
}

static entry *node_find(const node *map, const char *key)
{
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->items[i].key, key) == 0)
            return &map->items[i];
    return NULL;
}

/* ======================================================================
 * Dotted key paths for messages ("model.blocks.3.kernel")
 * ==================================================================== */

typedef struct pathbuf {
    char s[512];
    size_t len;
} pathbuf;

/* Append ".comp" (or "comp" at the root); returns the length to restore. */
static size_t path_push(pathbuf *p, const char *comp)
{
    size_t old = p->len;
    int w = snprintf(p->s + old, sizeof p->s - old, "%s%s", old ? "." : "", comp);
    p->len = (w < 0 || (size_t)w >= sizeof p->s - old) ? strlen(p->s) : old + (size_t)w;
    return old;
}

static size_t path_push_index(pathbuf *p, size_t i)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%zu", i);
    return path_push(p, buf);
}

static void path_pop(pathbuf *p, size_t old)
{
    p->len = old;
    p->s[old] = '\0';
}

/* ======================================================================
 * Messages
 * ==================================================================== */

/* "<file>:<line>: msg", "<file> (from --set): msg" or "<file>: msg". */
static int fail_at(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(const char *file, int line, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        return hcnn_error("%s:%d: %s", file, line, msg);
    if (line == LINE_SET)
        return hcnn_error("%s (from --set): %s", file, msg);
    return hcnn_error("%s: %s", file, msg);
}

/* What was found, for "got ...": a quoted, truncated, printable scalar. */
static void describe(const node *n, char *buf, size_t size)
{
    if (!n) {
        snprintf(buf, size, "nothing");
    } else if (n->type == NODE_MAP) {
        snprintf(buf, size, "a mapping");
    } else if (n->type == NODE_SEQ) {
        snprintf(buf, size, "a sequence of %zu item%s", n->n, n->n == 1 ? "" : "s");
    } else if (n->is_null) {
        snprintf(buf, size, "null");
    } else {
        char text[64];
        size_t len = strlen(n->str), shown = len < sizeof text - 1 ? len : sizeof text - 1;
        for (size_t i = 0; i < shown; i++)
            text[i] = ((unsigned char)n->str[i] < 0x20 || n->str[i] == 0x7f) ? '?' : n->str[i];
        text[shown] = '\0';
        snprintf(buf, size, "\"%s%s\"", text, shown < len ? "..." : "");
    }
}

/* ======================================================================
 * Stage 1: libyaml events -> node tree
 * ==================================================================== */

typedef struct builder {
    yaml_parser_t parser;
    const char *file;     /* config path, for messages */
    const char *set;      /* the override being parsed, NULL for the file */
    FILE *fp;             /* the open file (to tell I/O errors from bad YAML) */
    pathbuf path;         /* key path of the node being built */
} builder;

static int node_line(const builder *b, const yaml_event_t *ev)
{
    return b->set ? LINE_SET : (int)ev->start_mark.line + 1;
}

static int yaml_failure(builder *b)
{
    const yaml_parser_t *p = &b->parser;
    const char *problem = p->problem ? p->problem : "unknown error";
    if (p->error == YAML_MEMORY_ERROR)
        return out_of_memory();
    if (b->set)
        return hcnn_error("%s: --set '%s': invalid YAML value: %s", b->file, b->set, problem);
    if (p->error == YAML_READER_ERROR) {
        if (b->fp && ferror(b->fp))
            return hcnn_error_code(HCNN_EIO, "%s: cannot read the file: %s", b->file, strerror(errno));
        return hcnn_error("%s: byte %zu: cannot decode the file: %s", b->file, p->problem_offset, problem);
    }
    if (p->context)
        return hcnn_error("%s:%zu:%zu: YAML syntax error: %s (%s started at line %zu)", b->file,
                          p->problem_mark.line + 1, p->problem_mark.column + 1, problem, p->context,
                          p->context_mark.line + 1);
    return hcnn_error("%s:%zu:%zu: YAML syntax error: %s", b->file, p->problem_mark.line + 1,
                      p->problem_mark.column + 1, problem);
}

static int next_event(builder *b, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&b->parser, ev))
        return yaml_failure(b);
    return HCNN_OK;
}

static int build_node(builder *b, yaml_event_t *ev, int depth, node **out);

static int build_scalar(builder *b, const yaml_event_t *ev, node **out)
{
    const char *text = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;
    if (memchr(text, '\0', len))
        return fail_at(b->file, node_line(b, ev), "%s: a NUL character is not allowed in a value", b->path.s);
    node *n = scalar_new(text, len, node_line(b, ev));
    if (!n)
        return out_of_memory();
    /* a plain (unquoted) empty value, ~ or null is YAML's null */
    n->is_null = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                 (len == 0 || !strcmp(n->str, "~") || !strcmp(n->str, "null") || !strcmp(n->str, "Null") ||
                  !strcmp(n->str, "NULL"));
    *out = n;
    return HCNN_OK;
}

static int build_sequence(builder *b, node *seq, int depth)
{
    for (size_t i = 0;; i++) {
        yaml_event_t ev;
        int rc = next_event(b, &ev);
        if (rc)
            return rc;
        if (ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return HCNN_OK;
        }
        size_t old = path_push_index(&b->path, i);
        node *child = NULL;
        rc = build_node(b, &ev, depth + 1, &child);
        path_pop(&b->path, old);
        if (!rc && (rc = node_push(seq, NULL, child->line, child)) != HCNN_OK)
            node_free(child);
        if (rc)
            return rc;
    }
}

static int build_mapping(builder *b, node *map, int depth)
{
    for (;;) {
        yaml_event_t ev;
        int rc = next_event(b, &ev);
        if (rc)
            return rc;
        if (ev.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&ev);
            return HCNN_OK;
        }
        int line = node_line(b, &ev);
        if (ev.type != YAML_SCALAR_EVENT) {
            yaml_event_delete(&ev);
            return fail_at(b->file, line, "%s: mapping keys must be plain strings",
                           b->path.len ? b->path.s : "(top level)");
        }
        char *key = strdup((const char *)ev.data.scalar.value);
        yaml_event_delete(&ev);
        if (!key)
            return out_of_memory();
        size_t old = path_push(&b->path, key);
        if (node_find(map, key)) {
            rc = fail_at(b->file, line, "%s: duplicate key '%s'", b->path.s, key);
            path_pop(&b->path, old);
            free(key);
            return rc;
        }
        node *val = NULL;
        if ((rc = next_event(b, &ev)) == HCNN_OK)
            rc = build_node(b, &ev, depth + 1, &val);
        path_pop(&b->path, old);
        if (!rc && (rc = node_push(map, key, line, val)) != HCNN_OK)
            node_free(val);
        if (rc) {
            free(key);
            return rc;
        }
    }
}

/* Build the node that starts with *ev (consumed here) and its children. */
static int build_node(builder *b, yaml_event_t *ev, int depth, node **out)
{
    int line = node_line(b, ev);
    yaml_event_type_t type = ev->type;
    int rc;
    *out = NULL;
    if (type == YAML_SCALAR_EVENT) {
        rc = build_scalar(b, ev, out);
        yaml_event_delete(ev);
        return rc;
    }
    yaml_event_delete(ev);
    if (depth > MAX_DEPTH)
        return fail_at(b->file, line, "%s: nested more than %d levels deep", b->path.s, MAX_DEPTH);
    if (type == YAML_ALIAS_EVENT)
        return fail_at(b->file, line, "%s: YAML aliases (*name) are not supported", b->path.len ? b->path.s : "value");
    if (type != YAML_SEQUENCE_START_EVENT && type != YAML_MAPPING_START_EVENT)
        return fail_at(b->file, line, "unexpected YAML structure");
    node *n = node_new(type == YAML_SEQUENCE_START_EVENT ? NODE_SEQ : NODE_MAP, line);
    if (!n)
        return out_of_memory();
    rc = type == YAML_SEQUENCE_START_EVENT ? build_sequence(b, n, depth) : build_mapping(b, n, depth);
    if (rc) {
        node_free(n);
        return rc;
    }
    *out = n;
    return HCNN_OK;
}

/* Parse the single document of the stream; *root is NULL if it is empty. */
static int build_document(builder *b, node **root)
{
    int ndocs = 0;
    *root = NULL;
    for (;;) {
        yaml_event_t ev;
        int rc = next_event(b, &ev);
        if (rc)
            return rc;
        yaml_event_type_t type = ev.type;
        if (type == YAML_DOCUMENT_START_EVENT && ndocs++ > 0) {
            int line = node_line(b, &ev);
            yaml_event_delete(&ev);
            return fail_at(b->file, line, "only one YAML document is allowed");
        }
        if (type == YAML_SCALAR_EVENT || type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT ||
            type == YAML_ALIAS_EVENT) {
            if ((rc = build_node(b, &ev, 0, root)) != HCNN_OK)
                return rc;
            continue;
        }
        yaml_event_delete(&ev);
        if (type == YAML_STREAM_END_EVENT)
            return HCNN_OK;
    }
}

static int parse_file(const char *path, node **root)
{
    builder b;
    memset(&b, 0, sizeof b);
    b.file = path;
    *root = NULL;
    b.fp = fopen(path, "rb");
    if (!b.fp)
        return hcnn_error_code(HCNN_EIO, "cannot open config file '%s': %s", path, strerror(errno));
    if (!yaml_parser_initialize(&b.parser)) {
        fclose(b.fp);
        return out_of_memory();
    }
    yaml_parser_set_input_file(&b.parser, b.fp);
    int rc = build_document(&b, root);
    yaml_parser_delete(&b.parser);
    fclose(b.fp);
    if (rc) {
        node_free(*root);
        *root = NULL;
    }
    return rc;
}

/* Parse an override's value ("0.1", "[1, 28, 28]", "{type: relu}"); an
 * empty value is a null scalar.  All nodes get line LINE_SET. */
static int parse_value(const char *file, const char *set, const char *key, const char *text, node **out)
{
    builder b;
    memset(&b, 0, sizeof b);
    b.file = file;
    b.set = set;
    path_push(&b.path, key);
    *out = NULL;
    if (!yaml_parser_initialize(&b.parser))
        return out_of_memory();
    yaml_parser_set_input_string(&b.parser, (const unsigned char *)text, strlen(text));
    int rc = build_document(&b, out);
    yaml_parser_delete(&b.parser);
    if (rc) {
        node_free(*out);
        *out = NULL;
        return rc;
    }
    if (!*out) {
        if (!(*out = scalar_new("", 0, LINE_SET)))
            return out_of_memory();
        (*out)->is_null = 1;
    }
    return HCNN_OK;
}

/* ======================================================================
 * Stage 2: overrides
 * ==================================================================== */

/* Parse a sequence index: decimal digits only, no overflow. */
static int parse_index(const char *s, size_t *out)
{
    if (!isdigit((unsigned char)s[0]))
        return 0;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > SIZE_MAX)
        return 0;
    *out = (size_t)v;
    return 1;
}

/* A bare block string ("relu") can take further keys: turn it into the
 * equivalent mapping {type: relu} so that model.blocks.N.name=... works. */
static int scalar_to_block_map(node *n)
{
    char *type_key = strdup("type");
    node *type_val = scalar_new(n->str, strlen(n->str), n->line);
    if (!type_key || !type_val) {
        free(type_key);
        node_free(type_val);
        return out_of_memory();
    }
    n->type = NODE_MAP;
    free(n->str);
    n->str = NULL;
    n->is_null = 0;
    int rc = node_push(n, type_key, n->line, type_val);
    if (rc) {
        free(type_key);
        node_free(type_val);
    }
    return rc;
}

/* Put val (ownership taken on success) under `key` of map, replacing the
 * old value or appending a new key; *slot_out becomes val. */
static int graft_map(node *map, const char *key, node *val, node **slot_out)
{
    entry *e = node_find(map, key);
    if (e) {
        node_free(e->val);
        e->val = val;
        *slot_out = val;
        return HCNN_OK;
    }
    char *k = strdup(key);
    if (!k)
        return out_of_memory();
    int rc = node_push(map, k, LINE_SET, val);
    if (rc)
        free(k);
    else
        *slot_out = val;
    return rc;
}

typedef struct override {
    const char *file;
    const char *text;   /* the whole "key=value" */
    char *comps[64];    /* key components (point into a writable copy) */
    int ncomps;
} override;

/* Walk/extend the tree along o->comps and put val at the end. */
static int graft(node **root, const override *o, node *val)
{
    if (!*root && !(*root = node_new(NODE_MAP, LINE_SET)))
        return out_of_memory();
    node *cur = *root;
    pathbuf where; /* the components walked so far, for messages */
    memset(&where, 0, sizeof where);
    for (int i = 0; i < o->ncomps; i++) {
        const char *comp = o->comps[i];
        int last = i == o->ncomps - 1;
        if (i > 0)
            path_push(&where, o->comps[i - 1]);
        if (cur->type == NODE_SCALAR && i == 3 && !strcmp(o->comps[0], "model") && !strcmp(o->comps[1], "blocks")) {
            int rc = scalar_to_block_map(cur);
            if (rc)
                return rc;
        }
        /* what goes at this component: the value, or a new mapping to descend into */
        node *fresh = last ? val : NULL;
        if (cur->type == NODE_MAP) {
            entry *e = node_find(cur, comp);
            if (e && !last) {
                cur = e->val;
                continue;
            }
            if (!fresh && !(fresh = node_new(NODE_MAP, LINE_SET)))
                return out_of_memory();
            int rc = graft_map(cur, comp, fresh, &cur);
            if (rc && !last)
                node_free(fresh);
            if (rc)
                return rc;
        } else if (cur->type == NODE_SEQ) {
            size_t idx;
            if (!parse_index(comp, &idx))
                return hcnn_error("%s: --set '%s': '%s' is a sequence: expected an index 0, 1, ... after it, "
                                  "got '%s'",
                                  o->file, o->text, where.s, comp);
            if (idx > cur->n)
                return hcnn_error("%s: --set '%s': index %zu is beyond the end of '%s' (%zu items; "
                                  "use %zu to append)",
                                  o->file, o->text, idx, where.s, cur->n, cur->n);
            if (idx < cur->n && !last) {
                cur = cur->items[idx].val;
                continue;
            }
            if (idx < cur->n) { /* last component: replace the item */
                node_free(cur->items[idx].val);
                cur->items[idx].val = val;
                return HCNN_OK;
            }
            /* idx == n: append the value, or a new mapping to descend into */
            if (!fresh && !(fresh = node_new(NODE_MAP, LINE_SET)))
                return out_of_memory();
            int rc = node_push(cur, NULL, LINE_SET, fresh);
            if (rc && !last)
                node_free(fresh);
            if (rc)
                return rc;
            cur = fresh;
        } else {
            return hcnn_error("%s: --set '%s': '%s' is a single value, not a mapping or sequence", o->file,
                              o->text, where.s);
        }
    }
    return HCNN_OK;
}

static int apply_override(node **root, const char *file, const char *set)
{
    const char *eq = set ? strchr(set, '=') : NULL;
    if (!eq || eq == set)
        return hcnn_error("%s: --set '%s': expected key=value (e.g. lr=0.1 or model.blocks.0.out=8)", file,
                          set ? set : "(null)");
    override o;
    memset(&o, 0, sizeof o);
    o.file = file;
    o.text = set;
    char *key = strndup(set, (size_t)(eq - set));
    if (!key)
        return out_of_memory();
    int rc = HCNN_OK;
    /* split "a.b.0.c" in place; empty components ("a..b", ".a", "a.") are errors */
    for (char *s = key;;) {
        char *dot = strchr(s, '.');
        if (dot)
            *dot = '\0';
        if (!*s || o.ncomps == COUNT(o.comps)) {
            rc = hcnn_error("%s: --set '%s': invalid key (expected dotted names like model.blocks.0.out)", file, set);
            break;
        }
        o.comps[o.ncomps++] = s;
        if (!dot)
            break;
        s = dot + 1;
    }
    node *val = NULL;
    if (!rc) {
        char *fullkey = strndup(set, (size_t)(eq - set));
        if (!fullkey)
            rc = out_of_memory();
        else
            rc = parse_value(file, set, fullkey, eq + 1, &val);
        free(fullkey);
    }
    if (!rc && (rc = graft(root, &o, val)) != HCNN_OK)
        node_free(val);
    free(key);
    return rc;
}

/* ======================================================================
 * Stage 3: interpretation (typed getters)
 * ==================================================================== */

typedef struct ictx {
    const char *file;
    pathbuf path;   /* key path of the node being interpreted */
} ictx;

static int fail_value(const ictx *c, const node *n, const char *expected)
{
    char got[112];
    describe(n, got, sizeof got);
    return fail_at(c->file, n ? n->line : LINE_NONE, "%s: expected %s, got %s", c->path.s, expected, got);
}

static int is_scalar(const node *n) { return n && n->type == NODE_SCALAR && !n->is_null; }

/* Decimal integer with optional sign; no spaces, trailing text or overflow. */
static int parse_ll(const char *s, long long *out)
{
    const char *d = (*s == '-' || *s == '+') ? s + 1 : s;
    if (!isdigit((unsigned char)*d))
        return 0;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || *end)
        return 0;
    *out = v;
    return 1;
}

/* A finite number written in full (strtod must consume everything). */
static int parse_num(const char *s, double *out)
{
    if (!*s || isspace((unsigned char)*s))
        return 0;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v))
        return 0;
    *out = v;
    return 1;
}

static int all_digits(const char *s)
{
    return *s && strspn(s, "0123456789") == strlen(s);
}

/* "a positive integer"; the upper limit is only mentioned when it was hit. */
static void int_expectation(char *buf, size_t size, long long lo, long long hi, long long type_max, int too_big)
{
    if (hi < type_max || (lo != 0 && lo != 1))
        snprintf(buf, size, "an integer in [%lld, %lld]", lo, hi);
    else if (too_big)
        snprintf(buf, size, "a %s integer of at most %lld", lo ? "positive" : "non-negative", hi);
    else
        snprintf(buf, size, "a %s integer", lo ? "positive" : "non-negative");
}

/* Integer in [lo, hi]; type_max is the field type's maximum (for the message). */
static int get_ll(const ictx *c, const node *n, long long lo, long long hi, long long type_max, long long *out)
{
    long long v = 0;
    int parsed = is_scalar(n) && parse_ll(n->str, &v);
    if (!parsed || v < lo || v > hi) {
        /* strtoll overflow also means "too big" unless the text is negative */
        int too_big = parsed ? v > hi : is_scalar(n) && all_digits(n->str);
        char expected[96];
        int_expectation(expected, sizeof expected, lo, hi, type_max, too_big);
        return fail_value(c, n, expected);
    }
    *out = v;
    return HCNN_OK;
}

static int get_int(const ictx *c, const node *n, int lo, int *out)
{
    long long v;
    int rc = get_ll(c, n, lo, INT_MAX, INT_MAX, &v);
    if (!rc)
        *out = (int)v;
    return rc;
}

static int get_u64(const ictx *c, const node *n, uint64_t *out)
{
    /* strtoull would silently wrap "-1", so only digits (after an optional '+') */
    if (is_scalar(n) && isdigit((unsigned char)n->str[n->str[0] == '+'])) {
        errno = 0;
        char *end;
        unsigned long long v = strtoull(n->str, &end, 10);
        if (!errno && !*end && v <= UINT64_MAX) {
            *out = (uint64_t)v;
            return HCNN_OK;
        }
    }
    return fail_value(c, n, "a non-negative integer (at most 18446744073709551615)");
}

/* A closed/open interval for numbers; hi = INFINITY means unbounded. */
typedef struct range {
    double lo, hi;
    int lo_open, hi_open;
} range;

static int in_range(double v, range r)
{
    return (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
}

static void num_expectation(char *buf, size_t size, range r)
{
    if (isinf(r.hi))
        snprintf(buf, size, "a number %s %g", r.lo_open ? ">" : ">=", r.lo);
    else
        snprintf(buf, size, "a number in %c%g, %g%c", r.lo_open ? '(' : '[', r.lo, r.hi, r.hi_open ? ')' : ']');
}

static int get_num(const ictx *c, const node *n, range r, double *out)
{
    double v;
    if (is_scalar(n) && parse_num(n->str, &v) && in_range(v, r)) {
        *out = v;
        return HCNN_OK;
    }
    char expected[96];
    num_expectation(expected, sizeof expected, r);
    return fail_value(c, n, expected);
}

/* Single-precision fields: the range is checked after rounding to float,
 * so that e.g. eps: 1e-50 (0 as a float) is rejected. */
static int get_float(const ictx *c, const node *n, range r, float *out)
{
    double v;
    if (is_scalar(n) && parse_num(n->str, &v)) {
        float f = (float)v;
        if (isfinite(f) && in_range((double)f, r)) {
            *out = f;
            return HCNN_OK;
        }
    }
    char expected[96];
    num_expectation(expected, sizeof expected, r);
    return fail_value(c, n, expected);
}

static int parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < COUNT(yes); i++) {
        if (!strcasecmp(s, yes[i])) {
            *out = 1;
            return 1;
        }
        if (!strcasecmp(s, no[i])) {
            *out = 0;
            return 1;
        }
    }
    return 0;
}

static int get_bool(const ictx *c, const node *n, int *out)
{
    if (is_scalar(n) && parse_bool(n->str, out))
        return HCNN_OK;
    return fail_value(c, n, "a boolean (true/false, yes/no, on/off, 1/0)");
}

/* Any scalar is a string (null: empty); unused bytes are zeroed so that
 * loaded configurations compare equal byte for byte. */
static int get_str(const ictx *c, const node *n, char *buf, size_t size)
{
    if (!n || n->type != NODE_SCALAR)
        return fail_value(c, n, "a string");
    const char *s = n->is_null ? "" : n->str;
    size_t len = strlen(s);
    if (len >= size) {
        char expected[64];
        snprintf(expected, sizeof expected, "a string of at most %zu characters", size - 1);
        return fail_value(c, n, expected);
    }
    memset(buf, 0, size);
    memcpy(buf, s, len);
    return HCNN_OK;
}

static int get_choice(const ictx *c, const node *n, const char *const *names, int count, int *out)
{
    if (is_scalar(n))
        for (int i = 0; i < count; i++)
            if (!strcmp(n->str, names[i])) {
                *out = i;
                return HCNN_OK;
            }
    char expected[256];
    size_t o = (size_t)snprintf(expected, sizeof expected, "one of: ");
    for (int i = 0; i < count && o < sizeof expected; i++)
        o += (size_t)snprintf(expected + o, sizeof expected - o, "%s%s", i ? ", " : "", names[i]);
    return fail_value(c, n, expected);
}

static int pair_item(const node *n, int lo, int *out)
{
    long long v;
    if (!is_scalar(n) || !parse_ll(n->str, &v) || v < lo || v > INT_MAX)
        return 0;
    *out = (int)v;
    return 1;
}

/* kernel / stride / pad: "k" or "[kh, kw]", each >= lo. */
static int get_pair(const ictx *c, const node *n, int lo, int *h, int *w)
{
    const char *expected = lo > 0 ? "a positive integer or [h, w]" : "a non-negative integer or [h, w]";
    if (n && n->type == NODE_SEQ && n->n == 2) {
        /* name the offending element rather than "a sequence" */
        for (size_t i = 0; i < 2; i++) {
            int v;
            if (!pair_item(n->items[i].val, lo, &v))
                return fail_value(c, n->items[i].val, expected);
        }
        pair_item(n->items[0].val, lo, h);
        pair_item(n->items[1].val, lo, w);
        return HCNN_OK;
    }
    int v;
    if (!pair_item(n, lo, &v))
        return fail_value(c, n, expected);
    *h = *w = v;
    return HCNN_OK;
}

/* Names become tensor-name prefixes ("layer1.0.conv1.weight"), so they are
 * restricted to characters that are safe in names and file names. */
static int get_name(const ictx *c, const node *n, char *buf, size_t size, const char *extra_chars)
{
    char expected[96];
    snprintf(expected, sizeof expected, "a name of at most %zu characters from [A-Za-z0-9_.%s]", size - 1,
             extra_chars);
    if (!n || n->type != NODE_SCALAR)
        return fail_value(c, n, expected);
    const char *s = n->is_null ? "" : n->str;
    if (strlen(s) >= size)
        return fail_value(c, n, expected);
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && !strchr(extra_chars, *p))
            return fail_value(c, n, expected);
    memset(buf, 0, size);
    memcpy(buf, s, strlen(s));
    return HCNN_OK;
}

/* ======================================================================
 * Stage 3: blocks and the model
 * ==================================================================== */

enum block_key {
    BK_TYPE, BK_NAME, BK_OUT, BK_KERNEL, BK_STRIDE, BK_PAD, BK_BIAS, BK_EPS, BK_MOMENTUM, BK_P, BK_SHORTCUT, BK_COUNT
};
static const char *const block_key_names[BK_COUNT] = {"type", "name", "out", "kernel", "stride", "pad",
                                                      "bias", "eps", "momentum", "p", "shortcut"};
#define BIT(k) (1u << (k))
#define BK_COMMON (BIT(BK_TYPE) | BIT(BK_NAME))
/* The keys each block type accepts (also the keys the writer emits). */
static const unsigned block_key_mask[HCNN_BLOCK_KIND_COUNT] = {
    [HCNN_BLOCK_CONV] = BK_COMMON | BIT(BK_OUT) | BIT(BK_KERNEL) | BIT(BK_STRIDE) | BIT(BK_PAD) | BIT(BK_BIAS),
    [HCNN_BLOCK_BN] = BK_COMMON | BIT(BK_EPS) | BIT(BK_MOMENTUM),
    [HCNN_BLOCK_RELU] = BK_COMMON,
    [HCNN_BLOCK_MAXPOOL] = BK_COMMON | BIT(BK_KERNEL) | BIT(BK_STRIDE) | BIT(BK_PAD),
    [HCNN_BLOCK_AVGPOOL] = BK_COMMON | BIT(BK_KERNEL) | BIT(BK_STRIDE) | BIT(BK_PAD),
    [HCNN_BLOCK_GAP] = BK_COMMON,
    [HCNN_BLOCK_FC] = BK_COMMON | BIT(BK_OUT) | BIT(BK_BIAS),
    [HCNN_BLOCK_DROPOUT] = BK_COMMON | BIT(BK_P),
    [HCNN_BLOCK_FLATTEN] = BK_COMMON,
    [HCNN_BLOCK_RESIDUAL] = BK_COMMON | BIT(BK_OUT) | BIT(BK_STRIDE) | BIT(BK_SHORTCUT),
};

#define BN_EPS_DEFAULT 1e-5f
#define BN_MOMENTUM_DEFAULT 0.1f

static void block_defaults(hcnn_block_spec *b, hcnn_block_kind kind)
{
    memset(b, 0, sizeof *b);
    b->kind = kind;
    switch (kind) {
    case HCNN_BLOCK_CONV:
        b->kh = b->kw = 3;
        b->sh = b->sw = 1;
        b->bias = 1;
        break;
    case HCNN_BLOCK_BN:
        b->eps = BN_EPS_DEFAULT;
        b->momentum = BN_MOMENTUM_DEFAULT;
        break;
    case HCNN_BLOCK_MAXPOOL:
    case HCNN_BLOCK_AVGPOOL:
        b->kh = b->kw = 2; /* stride defaults to the kernel, set after parsing */
        break;
    case HCNN_BLOCK_FC:
        b->bias = 1;
        break;
    case HCNN_BLOCK_DROPOUT:
        b->p = 0.5f;
        break;
    case HCNN_BLOCK_RESIDUAL:
        b->sh = b->sw = 1;
        b->shortcut = HCNN_SHORTCUT_AUTO;
        /* not configurable: the block's internal batch norms use the bn defaults */
        b->eps = BN_EPS_DEFAULT;
        b->momentum = BN_MOMENTUM_DEFAULT;
        break;
    default:
        break;
    }
}

static int apply_block_key(const ictx *c, int key, const node *n, hcnn_block_spec *b)
{
    static const range eps_range = {0.0, INFINITY, 1, 0};
    static const range momentum_range = {0.0, 1.0, 1, 0};
    static const range p_range = {0.0, 1.0, 0, 1};
    int v = 0;
    switch (key) {
    case BK_NAME:
        return get_name(c, n, b->name, sizeof b->name, "");
    case BK_OUT:
        return get_int(c, n, 1, &b->out);
    case BK_KERNEL:
        return get_pair(c, n, 1, &b->kh, &b->kw);
    case BK_STRIDE:
        return get_pair(c, n, 1, &b->sh, &b->sw);
    case BK_PAD:
        return get_pair(c, n, 0, &b->ph, &b->pw);
    case BK_BIAS:
        return get_bool(c, n, &b->bias);
    case BK_EPS:
        return get_float(c, n, eps_range, &b->eps);
    case BK_MOMENTUM:
        return get_float(c, n, momentum_range, &b->momentum);
    case BK_P:
        return get_float(c, n, p_range, &b->p);
    case BK_SHORTCUT:
        if (get_choice(c, n, shortcut_names, COUNT(shortcut_names), &v))
            return HCNN_EINVAL;
        b->shortcut = (hcnn_shortcut)v;
        return HCNN_OK;
    default:
        return HCNN_OK; /* BK_TYPE: already read */
    }
}

static int unknown_block_key(const ictx *c, const entry *e, hcnn_block_kind kind)
{
    char valid[160];
    size_t o = 0;
    valid[0] = '\0';
    for (int k = 0; k < BK_COUNT && o < sizeof valid; k++)
        if (block_key_mask[kind] & BIT(k))
            o += (size_t)snprintf(valid + o, sizeof valid - o, "%s%s", o ? ", " : "", block_key_names[k]);
    return fail_at(c->file, e->line, "unknown key '%s' for block type '%s' (valid keys: %s)", c->path.s,
                   block_kind_names[kind], valid);
}

/* Checks that need the whole block: required keys, pool defaults and limits. */
static int finish_block(ictx *c, const node *n, hcnn_block_spec *b, unsigned seen)
{
    if ((block_key_mask[b->kind] & BIT(BK_OUT)) && !(seen & BIT(BK_OUT)))
        return fail_at(c->file, n->line, "missing required key '%s.out' for block type '%s'", c->path.s,
                       block_kind_names[b->kind]);
    if (b->kind != HCNN_BLOCK_MAXPOOL && b->kind != HCNN_BLOCK_AVGPOOL)
        return HCNN_OK;
    if (!(seen & BIT(BK_STRIDE))) {
        b->sh = b->kh;
        b->sw = b->kw;
    }
    if (b->ph > b->kh / 2 || b->pw > b->kw / 2) {
        /* seen has BK_PAD here (pad defaults to 0), so n is a mapping with a pad entry */
        const entry *e = node_find(n, "pad");
        size_t old = path_push(&c->path, "pad");
        int rc = fail_at(c->file, e->val->line, "%s: expected at most half the kernel (kernel [%d, %d]), got [%d, %d]",
                         c->path.s, b->kh, b->kw, b->ph, b->pw);
        path_pop(&c->path, old);
        return rc;
    }
    return HCNN_OK;
}

static int find_block_key(const char *key)
{
    for (int k = 0; k < BK_COUNT; k++)
        if (!strcmp(key, block_key_names[k]))
            return k;
    return -1;
}

/* A block is a bare type name ("relu") or a mapping with a `type` key. */
static int interpret_block(ictx *c, const node *n, hcnn_block_spec *b)
{
    const node *type_node = n;
    if (n && n->type == NODE_MAP) {
        const entry *e = node_find(n, "type");
        if (!e)
            return fail_at(c->file, n->line, "missing required key '%s.type'", c->path.s);
        type_node = e->val;
    } else if (!is_scalar(n)) {
        return fail_value(c, n, "a block (a type name or a mapping with 'type')");
    }
    size_t old = n->type == NODE_MAP ? path_push(&c->path, "type") : c->path.len;
    int kind = 0;
    int rc = get_choice(c, type_node, block_kind_names, HCNN_BLOCK_KIND_COUNT, &kind);
    path_pop(&c->path, old);
    if (rc)
        return rc;
    block_defaults(b, (hcnn_block_kind)kind);

    unsigned seen = 0;
    for (size_t i = 0; n->type == NODE_MAP && i < n->n; i++) {
        const entry *e = &n->items[i];
        int k = find_block_key(e->key);
        old = path_push(&c->path, e->key);
        if (k < 0 || !(block_key_mask[kind] & BIT(k)))
            rc = unknown_block_key(c, e, (hcnn_block_kind)kind);
        else
            rc = apply_block_key(c, k, e->val, b);
        path_pop(&c->path, old);
        if (rc)
            return rc;
        seen |= BIT(k);
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
            size_t old = path_push_index(&c->path, (size_t)i);
            int rc = fail_at(c->file, seq->items[i].val->line,
                             "%s.name: duplicate block name '%s' (also used by block %d)", c->path.s,
                             m->blocks[i].name, j);
            path_pop(&c->path, old);
            return rc;
        }
    }
    return HCNN_OK;
}

static int interpret_blocks(ictx *c, const node *n, hcnn_model_spec *m)
{
    if (!n || n->type != NODE_SEQ || n->n == 0)
        return fail_value(c, n, "a non-empty sequence of blocks");
    if (n->n > HCNN_MAX_BLOCKS) {
        char expected[64];
        snprintf(expected, sizeof expected, "at most %d blocks", HCNN_MAX_BLOCKS);
        return fail_value(c, n, expected);
    }
    for (size_t i = 0; i < n->n; i++) {
        size_t old = path_push_index(&c->path, i);
        int rc = interpret_block(c, n->items[i].val, &m->blocks[i]);
        path_pop(&c->path, old);
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
        return fail_value(c, n, "[c, h, w] (three positive integers)");
    for (size_t i = 0; i < 3; i++)
        if (!pair_item(n->items[i].val, 1, dims[i]))
            return fail_value(c, n->items[i].val, "[c, h, w] (three positive integers)");
    return HCNN_OK;
}

static int interpret_model(ictx *c, const node *n, hcnn_model_spec *m)
{
    static const char *const required[] = {"input", "classes", "blocks"};
    if (!n || n->type != NODE_MAP)
        return fail_value(c, n, "a mapping with input, classes and blocks");
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < n->n; i++) {
        const entry *e = &n->items[i];
        size_t old = path_push(&c->path, e->key);
        int rc;
        if (!strcmp(e->key, "name"))
            rc = get_name(c, e->val, m->name, sizeof m->name, "-");
        else if (!strcmp(e->key, "input"))
            rc = get_input_shape(c, e->val, m);
        else if (!strcmp(e->key, "classes"))
            rc = get_int(c, e->val, 2, &m->classes);
        else if (!strcmp(e->key, "blocks"))
            rc = interpret_blocks(c, e->val, m);
        else
            rc = fail_at(c->file, e->line, "unknown key '%s' (valid keys: name, input, classes, blocks)", c->path.s);
        path_pop(&c->path, old);
        if (rc)
            return rc;
    }
    for (int i = 0; i < COUNT(required); i++)
        if (!node_find(n, required[i]))
            return fail_at(c->file, n->line, "missing required key '%s.%s'", c->path.s, required[i]);
    if (!m->name[0])
        snprintf(m->name, sizeof m->name, "model");
    return HCNN_OK;
}

/* ======================================================================
 * Stage 3: top-level keys (one table drives both reading and writing)
 * ==================================================================== */

typedef enum ktype { KT_MODEL, KT_INT, KT_LONG, KT_U64, KT_NUM, KT_BOOL, KT_STR, KT_CHOICE, KT_ENUM, KT_AUGMENT, KT_PARTITION } ktype;

typedef struct keydef {
    const char *name;
    ktype type;
    size_t off;                /* offsetof(hcnn_config, field) */
    size_t size;               /* KT_STR, KT_CHOICE: buffer size */
    int lo;                    /* KT_INT, KT_LONG: minimum */
    range r;                   /* KT_NUM */
    const char *const *names;  /* KT_CHOICE, KT_ENUM */
    int nnames;
    int (*get)(const hcnn_config *);  /* KT_ENUM: the field is an enum type */
    void (*set)(hcnn_config *, int);
    int required;
} keydef;

static int get_schedule(const hcnn_config *c) { return (int)c->schedule; }
static void set_schedule(hcnn_config *c, int v) { c->schedule = (hcnn_schedule)v; }
static int get_init(const hcnn_config *c) { return (int)c->init; }
static void set_init(hcnn_config *c, int v) { c->init = (hcnn_init)v; }
static int get_strategy(const hcnn_config *c) { return (int)c->strategy; }
static void set_strategy(hcnn_config *c, int v) { c->strategy = (hcnn_strategy)v; }
static int get_pipe_schedule(const hcnn_config *c) { return (int)c->pipeline_schedule; }
static void set_pipe_schedule(hcnn_config *c, int v) { c->pipeline_schedule = (hcnn_pipe_schedule)v; }
static int get_prefetch(const hcnn_config *c) { return (int)c->data_prefetch; }
static void set_prefetch(hcnn_config *c, int v) { c->data_prefetch = (hcnn_prefetch)v; }
static int get_conv_algo(const hcnn_config *c) { return (int)c->conv_algo; }
static void set_conv_algo(hcnn_config *c, int v) { c->conv_algo = (hcnn_conv_algo)v; }
static int get_progress(const hcnn_config *c) { return (int)c->allreduce_progress; }
static void set_progress(hcnn_config *c, int v) { c->allreduce_progress = (hcnn_allreduce_progress)v; }

#define FIELD(f) offsetof(hcnn_config, f)
#define FSIZE(f) sizeof(((hcnn_config *)0)->f)
#define K_INT(n, f, min) {.name = n, .type = KT_INT, .off = FIELD(f), .lo = min}
#define K_LONG(n, f, min) {.name = n, .type = KT_LONG, .off = FIELD(f), .lo = min}
#define K_NUM(n, f, l, lopen, h, hopen) {.name = n, .type = KT_NUM, .off = FIELD(f), .r = {l, h, lopen, hopen}}
#define K_BOOL(n, f) {.name = n, .type = KT_BOOL, .off = FIELD(f)}
#define K_STR(n, f) {.name = n, .type = KT_STR, .off = FIELD(f), .size = FSIZE(f)}
#define K_ENUM(n, list, g, s) {.name = n, .type = KT_ENUM, .names = list, .nnames = COUNT(list), .get = g, .set = s}

static const keydef top_keys[] = {
    {.name = "model", .type = KT_MODEL, .required = 1},
    {.name = "dataset", .type = KT_CHOICE, .off = FIELD(dataset), .size = FSIZE(dataset), .names = dataset_names,
     .nnames = COUNT(dataset_names), .required = 1},
    K_STR("data_dir", data_dir),
    K_INT("synthetic_train", synthetic_train, 1),
    K_INT("synthetic_test", synthetic_test, 1),
    K_INT("epochs", epochs, 1),
    K_INT("batch_size", batch_size, 1),
    K_INT("eval_batch_size", eval_batch_size, 0),
    K_NUM("lr", lr, 0.0, 1, INFINITY, 0),
    K_NUM("momentum", momentum, 0.0, 0, 1.0, 1),
    K_BOOL("nesterov", nesterov),
    K_NUM("weight_decay", weight_decay, 0.0, 0, INFINITY, 0),
    K_ENUM("schedule", schedule_names, get_schedule, set_schedule),
    K_NUM("warmup_epochs", warmup_epochs, 0.0, 0, INFINITY, 0),
    K_INT("lr_step_epochs", lr_step_epochs, 1),
    K_NUM("lr_gamma", lr_gamma, 0.0, 1, 1.0, 0),
    K_NUM("min_lr", min_lr, 0.0, 0, INFINITY, 0),
    K_ENUM("init", init_names, get_init, set_init),
    {.name = "seed", .type = KT_U64, .off = FIELD(seed)},
    K_INT("threads", threads, 0),
    K_ENUM("strategy", strategy_names, get_strategy, set_strategy),
    K_NUM("bucket_mb", bucket_mb, 0.0, 1, INFINITY, 0),
    K_ENUM("allreduce_progress", progress_names, get_progress, set_progress),
    K_INT("stages", stages, 1),
    K_INT("microbatches", microbatches, 1),
    K_ENUM("pipeline_schedule", pipe_schedule_names, get_pipe_schedule, set_pipe_schedule),
    {.name = "partition", .type = KT_PARTITION},
    K_LONG("max_steps", max_steps, 0),
    K_LONG("train_limit", train_limit, 0),
    K_LONG("test_limit", test_limit, 0),
    K_BOOL("shuffle", shuffle),
    {.name = "augment", .type = KT_AUGMENT, .off = FIELD(augment)},
    K_STR("csv", csv),
    K_STR("checkpoint_dir", checkpoint_dir),
    K_INT("checkpoint_every", checkpoint_every, 0),
    K_INT("checkpoint_keep", checkpoint_keep, 1),
    K_INT("progress_every", progress_every, 0),
    K_NUM("im2col_mb", im2col_mb, 0.0, 1, INFINITY, 0),
    K_ENUM("conv_algo", conv_algo_names, get_conv_algo, set_conv_algo),
    K_ENUM("data_prefetch", prefetch_names, get_prefetch, set_prefetch),
};
#define NKEYS COUNT(top_keys)

static const keydef *find_top_key(const char *name)
{
    for (int i = 0; i < NKEYS; i++)
        if (!strcmp(top_keys[i].name, name))
            return &top_keys[i];
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
        return get_int(c, n, d->lo, (int *)(void *)field);
    case KT_LONG:
        if ((rc = get_ll(c, n, d->lo, LONG_MAX, LONG_MAX, &v)) == HCNN_OK)
            *(long *)(void *)field = (long)v;
        return rc;
    case KT_U64:
        return get_u64(c, n, (uint64_t *)(void *)field);
    case KT_NUM:
        return get_num(c, n, d->r, (double *)(void *)field);
    case KT_BOOL:
        return get_bool(c, n, (int *)(void *)field);
    case KT_STR:
        return get_str(c, n, field, d->size);
    case KT_CHOICE:
        if ((rc = get_choice(c, n, d->names, d->nnames, &i)) == HCNN_OK) {
            memset(field, 0, d->size);
            memcpy(field, d->names[i], strlen(d->names[i]));
        }
        return rc;
    case KT_ENUM:
        if ((rc = get_choice(c, n, d->names, d->nnames, &i)) == HCNN_OK)
            d->set(cfg, i);
        return rc;
    case KT_AUGMENT:
        if (is_scalar(n) && !strcmp(n->str, "default")) {
            cfg->augment = -1;
            return HCNN_OK;
        }
        if (is_scalar(n) && parse_bool(n->str, &cfg->augment))
            return HCNN_OK;
        return fail_value(c, n, "a boolean or 'default'");
    case KT_PARTITION:
        /* [] (automatic) or the first block of each stage: non-negative
         * integers; their order is checked against the model at start */
        if (!n || n->type != NODE_SEQ || n->n > HCNN_MAX_BLOCKS)
            return fail_value(c, n, "a list of block indices, e.g. [0, 5] (or [] for automatic)");
        cfg->npartition = 0;
        for (size_t k = 0; k < n->n; k++) {
            size_t old = path_push_index(&c->path, k);
            rc = get_int(c, n->items[k].val, 0, &cfg->partition[cfg->npartition++]);
            path_pop(&c->path, old);
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
        describe(root, got, sizeof got);
        return fail_at(c->file, root->line, "expected a mapping of keys at the top level, got %s", got);
    }
    for (size_t i = 0; root && i < root->n; i++) {
        const entry *e = &root->items[i];
        const keydef *d = find_top_key(e->key);
        if (!d)
            return fail_at(c->file, e->line, "unknown key '%s' (see docs/config-reference.md)", e->key);
        seen[d - top_keys] = 1;
        size_t old = path_push(&c->path, e->key);
        int rc = apply_top_key(c, d, e->val, cfg);
        path_pop(&c->path, old);
        if (rc)
            return rc;
    }
    for (int i = 0; i < NKEYS; i++)
        if (top_keys[i].required && !seen[i])
            return fail_at(c->file, LINE_NONE, "missing required key '%s'", top_keys[i].name);
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
        return hcnn_error("configuration path is too long (%zu characters, at most %d): %.60s...", len,
                          HCNN_PATH_MAX - 1, path);

    node *root = NULL;
    int rc = parse_file(path, &root);
    for (int i = 0; rc == HCNN_OK && i < nset; i++)
        rc = apply_override(&root, path, sets[i]);
    if (rc == HCNN_OK) {
        ictx c;
        memset(&c, 0, sizeof c);
        c.file = path;
        rc = interpret(&c, root, cfg);
    }
    node_free(root);
    if (rc != HCNN_OK) {
        /* no half-filled configuration: defaults plus the path */
        hcnn_config_defaults(cfg);
        memcpy(cfg->path, path, len);
    }
    return rc;
}

/* ======================================================================
 * Writer
 * ==================================================================== */

/* Strings that read back as themselves without quotes. */
static int plain_safe(const char *s)
{
    if (!isalnum((unsigned char)s[0]) && s[0] != '_' && s[0] != '/' && s[0] != '.')
        return 0; /* also rejects "" */
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_./+-", *p))
            return 0;
    return strcmp(s, "null") && strcmp(s, "Null") && strcmp(s, "NULL");
}

static void write_string(FILE *f, const char *s)
{
    if (plain_safe(s)) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* The shortest %g that reads back (through strtod) to exactly v. */
static void write_double(FILE *f, double v)
{
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, f);
}

/* Same for floats, as the reader converts: strtod, then to float. */
static void write_float(FILE *f, float v)
{
    char buf[40];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if ((float)strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, f);
}

static void write_block_key(FILE *f, const hcnn_block_spec *b, int key)
{
    switch (key) {
    case BK_OUT:
        fprintf(f, "%d", b->out);
        break;
    case BK_KERNEL:
        fprintf(f, "[%d, %d]", b->kh, b->kw);
        break;
    case BK_STRIDE:
        fprintf(f, "[%d, %d]", b->sh, b->sw);
        break;
    case BK_PAD:
        fprintf(f, "[%d, %d]", b->ph, b->pw);
        break;
    case BK_BIAS:
        fputs(b->bias ? "true" : "false", f);
        break;
    case BK_EPS:
        write_float(f, b->eps);
        break;
    case BK_MOMENTUM:
        write_float(f, b->momentum);
        break;
    case BK_P:
        write_float(f, b->p);
        break;
    case BK_SHORTCUT:
        fputs(enum_name(shortcut_names, COUNT(shortcut_names), (int)b->shortcut), f);
        break;
    default:
        break;
    }
}

static void write_block(FILE *f, const hcnn_block_spec *b)
{
    unsigned mask = (b->kind >= 0 && b->kind < HCNN_BLOCK_KIND_COUNT) ? block_key_mask[b->kind] : 0;
    fprintf(f, "    - {type: %s", hcnn_block_kind_name(b->kind));
    if (b->name[0]) {
        fputs(", name: ", f);
        write_string(f, b->name);
    }
    for (int k = BK_NAME + 1; k < BK_COUNT; k++) {
        if (!(mask & BIT(k)))
            continue;
        fprintf(f, ", %s: ", block_key_names[k]);
        write_block_key(f, b, k);
    }
    fputs("}\n", f);
}

static void write_model(FILE *f, const hcnn_model_spec *m)
{
    fputs("model:\n  name: ", f);
    write_string(f, m->name);
    fprintf(f, "\n  input: [%d, %d, %d]\n  classes: %d\n", m->in_c, m->in_h, m->in_w, m->classes);
    if (m->nblocks <= 0) {
        fputs("  blocks: []\n", f);
        return;
    }
    fputs("  blocks:\n", f);
    for (int i = 0; i < m->nblocks && i < HCNN_MAX_BLOCKS; i++)
        write_block(f, &m->blocks[i]);
}

static void write_top_key(FILE *f, const hcnn_config *cfg, const keydef *d)
{
    const char *field = (const char *)cfg + d->off;
    if (d->type == KT_MODEL) {
        write_model(f, &cfg->model);
        return;
    }
    fprintf(f, "%s: ", d->name);
    switch (d->type) {
    case KT_INT:
        fprintf(f, "%d", *(const int *)(const void *)field);
        break;
    case KT_LONG:
        fprintf(f, "%ld", *(const long *)(const void *)field);
        break;
    case KT_U64:
        fprintf(f, "%" PRIu64, *(const uint64_t *)(const void *)field);
        break;
    case KT_NUM:
        write_double(f, *(const double *)(const void *)field);
        break;
    case KT_BOOL:
        fputs(*(const int *)(const void *)field ? "true" : "false", f);
        break;
    case KT_STR:
    case KT_CHOICE:
        write_string(f, field);
        break;
    case KT_ENUM:
        fputs(enum_name(d->names, d->nnames, d->get(cfg)), f);
        break;
    case KT_AUGMENT:
        fputs(cfg->augment < 0 ? "default" : cfg->augment ? "true" : "false", f);
        break;
    case KT_PARTITION:
        fputc('[', f);
        for (int k = 0; k < cfg->npartition; k++)
            fprintf(f, "%s%d", k ? ", " : "", cfg->partition[k]);
        fputc(']', f);
        break;
    default:
        break;
    }
    fputc('\n', f);
}

void hcnn_config_print(const hcnn_config *cfg, void *file)
{
    FILE *f = file;
    fputs("# hcnn run configuration", f);
    if (cfg->path[0]) {
        /* a comment must stay on one line whatever the path contains */
        fputs(" (from ", f);
        for (const char *p = cfg->path; *p; p++)
            fputc((unsigned char)*p < 0x20 ? '?' : *p, f);
        fputc(')', f);
    }
    fputc('\n', f);
    for (int i = 0; i < NKEYS; i++)
        write_top_key(f, cfg, &top_keys[i]);
}

int hcnn_config_write(const hcnn_config *cfg, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return hcnn_error_code(HCNN_EIO, "cannot write configuration '%s': %s", path, strerror(errno));
    hcnn_config_print(cfg, f);
    int failed = ferror(f);
    if (fclose(f) != 0 || failed)
        return hcnn_error_code(HCNN_EIO, "cannot write configuration '%s': %s", path, strerror(errno));
    return HCNN_OK;
}
