/* Stage 1 of reading a configuration: libyaml events -> a small generic
 * tree whose nodes remember their lines; the tree's helpers, key paths and
 * messages (see internal.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#include "hcnn/common.h"
#include "hcnn/files.h"
#include "internal.h"

/* ======================================================================
 * Generic node tree
 * ==================================================================== */

#define MAX_DEPTH 64 /* nesting limit: keeps the recursion bounded */

int hcnn_cfg_oom(void)
{
    return hcnn_error_code(HCNN_ENOMEM, "out of memory while reading the configuration");
}

void hcnn_cfg_node_free(node *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->n; i++) {
        free(n->items[i].key);
        hcnn_cfg_node_free(n->items[i].val);
    }
    free(n->items);
    free(n->str);
    free(n);
}

node *hcnn_cfg_node_new(node_type type, int line)
{
    node *n = calloc(1, sizeof *n);
    if (n) {
        n->type = type;
        n->line = line;
    }
    return n;
}

node *hcnn_cfg_scalar_new(const char *text, size_t len, int line)
{
    node *n = hcnn_cfg_node_new(NODE_SCALAR, line);
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
int hcnn_cfg_node_push(node *parent, char *key, int line, node *val)
{
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? 2 * parent->cap : 8;
        entry *items = realloc(parent->items, cap * sizeof *items);
        if (!items)
            return hcnn_cfg_oom();
        parent->items = items;
        parent->cap = cap;
    }
    parent->items[parent->n].key = key;
    parent->items[parent->n].line = line;
    parent->items[parent->n].val = val;
    parent->n++;
    return HCNN_OK;
}

entry *hcnn_cfg_node_find(const node *map, const char *key)
{
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->items[i].key, key) == 0)
            return &map->items[i];
    return NULL;
}

/* ======================================================================
 * Dotted key paths for messages ("model.blocks.3.kernel")
 * ==================================================================== */

/* Append ".comp" (or "comp" at the root); returns the length to restore. */
size_t hcnn_cfg_path_push(pathbuf *p, const char *comp)
{
    size_t old = p->len;
    int w = snprintf(p->s + old, sizeof p->s - old, "%s%s", old ? "." : "", comp);
    p->len = (w < 0 || (size_t)w >= sizeof p->s - old) ? strlen(p->s) : old + (size_t)w;
    return old;
}

size_t hcnn_cfg_path_push_index(pathbuf *p, size_t i)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%zu", i);
    return hcnn_cfg_path_push(p, buf);
}

void hcnn_cfg_path_pop(pathbuf *p, size_t old)
{
    p->len = old;
    p->s[old] = '\0';
}

/* ======================================================================
 * Messages
 * ==================================================================== */

/* "<file>:<line>: msg", "<file> (from --set): msg" or "<file>: msg". */
int hcnn_cfg_fail_at(const char *file, int line, const char *fmt, ...)
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
void hcnn_cfg_describe(const node *n, char *buf, size_t size)
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
    const char *file; /* config path, for messages */
    const char *set;  /* the override being parsed, NULL for the file */
    FILE *fp;         /* the open file (to tell I/O errors from bad YAML) */
    pathbuf path;     /* key path of the node being built */
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
        return hcnn_cfg_oom();
    if (b->set)
        return hcnn_error("%s: --set '%s': invalid YAML value: %s", b->file, b->set, problem);
    if (p->error == YAML_READER_ERROR) {
        if (b->fp && ferror(b->fp))
            return hcnn_error("%s: cannot read the file: %s", b->file, strerror(errno));
        return hcnn_error("%s: byte %zu: cannot decode the file: %s", b->file, p->problem_offset,
                          problem);
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
        return hcnn_cfg_fail_at(b->file, node_line(b, ev),
                                "%s: a NUL character is not allowed in a value", b->path.s);
    node *n = hcnn_cfg_scalar_new(text, len, node_line(b, ev));
    if (!n)
        return hcnn_cfg_oom();
    /* a plain (unquoted) empty value, ~ or null is YAML's null */
    n->is_null = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                 (len == 0 || !strcmp(n->str, "~") || !strcmp(n->str, "null") ||
                  !strcmp(n->str, "Null") || !strcmp(n->str, "NULL"));
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
        size_t old = hcnn_cfg_path_push_index(&b->path, i);
        node *child = NULL;
        rc = build_node(b, &ev, depth + 1, &child);
        hcnn_cfg_path_pop(&b->path, old);
        if (!rc && (rc = hcnn_cfg_node_push(seq, NULL, child->line, child)) != HCNN_OK)
            hcnn_cfg_node_free(child);
        if (rc)
            return rc;
    }
}

/* The keys of the mapping being built, hashed, so that the duplicate check
 * stays linear: a linear search made a 50,000-key mapping take 9.6 s (Zen 5)
 * and a 200,000-key one over two minutes. */
typedef struct key_index {
    size_t *slot; /* 1 + position in map->items; 0: empty */
    size_t cap;   /* a power of two, at least twice the keys */
} key_index;

static size_t key_hash(const char *key)
{
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)key; *c; c++)
        h = (h ^ *c) * 1099511628211u;
    return (size_t)h;
}

/* The slot holding key, or the empty slot where it belongs. */
static size_t *key_index_slot(const key_index *ix, const node *map, const char *key)
{
    size_t mask = ix->cap - 1;
    for (size_t i = key_hash(key) & mask;; i = (i + 1) & mask)
        if (!ix->slot[i] || strcmp(map->items[ix->slot[i] - 1].key, key) == 0)
            return &ix->slot[i];
}

/* Make room for one more key (map->n + 1 keys at most half the slots). */
static int key_index_reserve(key_index *ix, const node *map)
{
    if (2 * (map->n + 1) <= ix->cap)
        return HCNN_OK;
    size_t cap = ix->cap ? 2 * ix->cap : 64;
    size_t *slot = calloc(cap, sizeof *slot);
    if (!slot)
        return hcnn_cfg_oom();
    free(ix->slot);
    ix->slot = slot;
    ix->cap = cap;
    for (size_t k = 0; k < map->n; k++)
        *key_index_slot(ix, map, map->items[k].key) = k + 1;
    return HCNN_OK;
}

static int build_mapping_items(builder *b, node *map, int depth, key_index *ix);

static int build_mapping(builder *b, node *map, int depth)
{
    key_index ix = {NULL, 0};
    int rc = build_mapping_items(b, map, depth, &ix);
    free(ix.slot);
    return rc;
}

static int build_mapping_items(builder *b, node *map, int depth, key_index *ix)
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
            return hcnn_cfg_fail_at(b->file, line, "%s: mapping keys must be plain strings",
                                    b->path.len ? b->path.s : "(top level)");
        }
        char *key = strdup((const char *)ev.data.scalar.value);
        yaml_event_delete(&ev);
        if (!key)
            return hcnn_cfg_oom();
        size_t old = hcnn_cfg_path_push(&b->path, key);
        if ((rc = key_index_reserve(ix, map)) != HCNN_OK) {
            hcnn_cfg_path_pop(&b->path, old);
            free(key);
            return rc;
        }
        size_t *slot = key_index_slot(ix, map, key);
        if (*slot) {
            rc = hcnn_cfg_fail_at(b->file, line, "%s: duplicate key '%s'", b->path.s, key);
            hcnn_cfg_path_pop(&b->path, old);
            free(key);
            return rc;
        }
        node *val = NULL;
        if ((rc = next_event(b, &ev)) == HCNN_OK)
            rc = build_node(b, &ev, depth + 1, &val);
        hcnn_cfg_path_pop(&b->path, old);
        if (!rc && (rc = hcnn_cfg_node_push(map, key, line, val)) != HCNN_OK)
            hcnn_cfg_node_free(val);
        if (rc) {
            free(key);
            return rc;
        }
        *slot = map->n;
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
        return hcnn_cfg_fail_at(b->file, line, "%s: nested more than %d levels deep", b->path.s,
                                MAX_DEPTH);
    if (type == YAML_ALIAS_EVENT)
        return hcnn_cfg_fail_at(b->file, line, "%s: YAML aliases (*name) are not supported",
                                b->path.len ? b->path.s : "value");
    if (type != YAML_SEQUENCE_START_EVENT && type != YAML_MAPPING_START_EVENT)
        return hcnn_cfg_fail_at(b->file, line, "unexpected YAML structure");
    node *n = hcnn_cfg_node_new(type == YAML_SEQUENCE_START_EVENT ? NODE_SEQ : NODE_MAP, line);
    if (!n)
        return hcnn_cfg_oom();
    rc = type == YAML_SEQUENCE_START_EVENT ? build_sequence(b, n, depth)
                                           : build_mapping(b, n, depth);
    if (rc) {
        hcnn_cfg_node_free(n);
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
            return hcnn_cfg_fail_at(b->file, line, "only one YAML document is allowed");
        }
        if (type == YAML_SCALAR_EVENT || type == YAML_SEQUENCE_START_EVENT ||
            type == YAML_MAPPING_START_EVENT || type == YAML_ALIAS_EVENT) {
            if ((rc = build_node(b, &ev, 0, root)) != HCNN_OK)
                return rc;
            continue;
        }
        yaml_event_delete(&ev);
        if (type == YAML_STREAM_END_EVENT)
            return HCNN_OK;
    }
}

/* A config that cannot be opened, or that is not a regular file (a
 * directory; a FIFO would block the run forever), is a configuration error
 * (HCNN_EINVAL: exit status 2, as docs/running.md, "Exit status", promises). */
int hcnn_cfg_parse_file(const char *path, node **root)
{
    builder b;
    memset(&b, 0, sizeof b);
    b.file = path;
    *root = NULL;
    int fd;
    int rc = hcnn_open_regular(path, "config file", HCNN_EINVAL, &fd);
    if (rc)
        return rc;
    if (!(b.fp = fdopen(fd, "rb"))) {
        close(fd);
        return hcnn_cfg_oom();
    }
    if (!yaml_parser_initialize(&b.parser)) {
        fclose(b.fp);
        return hcnn_cfg_oom();
    }
    yaml_parser_set_input_file(&b.parser, b.fp);
    rc = build_document(&b, root);
    yaml_parser_delete(&b.parser);
    fclose(b.fp);
    if (rc) {
        hcnn_cfg_node_free(*root);
        *root = NULL;
    }
    return rc;
}

/* Parse an override's value ("0.1", "[1, 28, 28]", "{type: relu}"); an
 * empty value is a null scalar.  All nodes get line LINE_SET. */
int hcnn_cfg_parse_value(const char *file, const char *set, const char *key, const char *text,
                         node **out)
{
    builder b;
    memset(&b, 0, sizeof b);
    b.file = file;
    b.set = set;
    hcnn_cfg_path_push(&b.path, key);
    *out = NULL;
    if (!yaml_parser_initialize(&b.parser))
        return hcnn_cfg_oom();
    yaml_parser_set_input_string(&b.parser, (const unsigned char *)text, strlen(text));
    int rc = build_document(&b, out);
    yaml_parser_delete(&b.parser);
    if (rc) {
        hcnn_cfg_node_free(*out);
        *out = NULL;
        return rc;
    }
    if (!*out) {
        if (!(*out = hcnn_cfg_scalar_new("", 0, LINE_SET)))
            return hcnn_cfg_oom();
        (*out)->is_null = 1;
    }
    return HCNN_OK;
}
