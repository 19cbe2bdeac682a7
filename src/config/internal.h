/* Inside the configuration reader and writer (src/config/).
 *
 * Three stages, so that overrides and the file are checked by the same code
 * and every message names the file, the dotted key and the line:
 *   1. tree.c: libyaml events -> a small generic tree (scalar / sequence /
 *      mapping, each node remembering its line; nodes from --set: line 0);
 *   2. override.c: each `--set key=value` parsed as a YAML document and
 *      grafted into the tree at its dotted path;
 *   3. schema.c: the tree interpreted into hcnn_config with strict checks,
 *      through the typed getters of values.c and the key tables below.
 * writer.c emits the same keys from the same tables, so write -> load is
 * exact. */
#ifndef HCNN_CONFIG_INTERNAL_H
#define HCNN_CONFIG_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hcnn/config.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- the tree (tree.c) ---------------------------------------------------- */

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

#define LINE_SET 0     /* the node came from a --set override */
#define LINE_NONE (-1) /* no useful line (e.g. a missing top-level key) */

int hcnn_cfg_oom(void);
void hcnn_cfg_node_free(node *n);
node *hcnn_cfg_node_new(node_type type, int line);
node *hcnn_cfg_scalar_new(const char *text, size_t len, int line);
/* Append an item; takes ownership of key and val only on success. */
int hcnn_cfg_node_push(node *parent, char *key, int line, node *val);
entry *hcnn_cfg_node_find(const node *map, const char *key);

/* Dotted key paths for messages ("model.blocks.3.kernel") */
typedef struct pathbuf {
    char s[512];
    size_t len;
} pathbuf;
/* Append ".comp" (or "comp" at the root); returns the length to restore. */
size_t hcnn_cfg_path_push(pathbuf *p, const char *comp);
size_t hcnn_cfg_path_push_index(pathbuf *p, size_t i);
void hcnn_cfg_path_pop(pathbuf *p, size_t old);

/* "<file>:<line>: msg", "<file> (from --set): msg" or "<file>: msg". */
int hcnn_cfg_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* What was found, for "got ...": a quoted, truncated, printable scalar. */
void hcnn_cfg_describe(const node *n, char *buf, size_t size);

int hcnn_cfg_parse_file(const char *path, node **root);
/* An override's value ("0.1", "[1, 28, 28]", "{type: relu}"); an empty
 * value is a null scalar.  All nodes get line LINE_SET. */
int hcnn_cfg_parse_value(const char *file, const char *set, const char *key, const char *text,
                         node **out);

/* ---- overrides (override.c) ------------------------------------------------ */

int hcnn_cfg_apply_override(node **root, const char *file, const char *set);

/* ---- typed getters (values.c) ---------------------------------------------- */

typedef struct ictx {
    const char *file;
    pathbuf path;   /* key path of the node being interpreted */
} ictx;

/* A closed/open interval for numbers; hi = INFINITY means unbounded. */
typedef struct range {
    double lo, hi;
    int lo_open, hi_open;
} range;

int hcnn_cfg_fail_value(const ictx *c, const node *n, const char *expected);
int hcnn_cfg_is_scalar(const node *n);
int hcnn_cfg_parse_bool(const char *s, int *out);
/* Integer in [lo, hi]; type_max is the field type's maximum (for the message). */
int hcnn_cfg_get_ll(const ictx *c, const node *n, long long lo, long long hi, long long type_max,
                    long long *out);
int hcnn_cfg_get_int(const ictx *c, const node *n, int lo, int *out);
/* Integer in [lo, hi]. */
int hcnn_cfg_get_int_range(const ictx *c, const node *n, int lo, int hi, int *out);
int hcnn_cfg_get_u64(const ictx *c, const node *n, uint64_t *out);
int hcnn_cfg_get_num(const ictx *c, const node *n, range r, double *out);
/* As hcnn_cfg_get_num, for a double that the optimiser uses in single precision:
 * a nonzero value must be a normal float (lr: 1e-320 would become 0). */
int hcnn_cfg_get_num_single(const ictx *c, const node *n, range r, double *out);
/* Single-precision fields: the range is checked after rounding to float. */
int hcnn_cfg_get_float(const ictx *c, const node *n, range r, float *out);
int hcnn_cfg_get_bool(const ictx *c, const node *n, int *out);
int hcnn_cfg_get_str(const ictx *c, const node *n, char *buf, size_t size);
int hcnn_cfg_get_choice(const ictx *c, const node *n, const char *const *names, int count,
                        int *out);
/* A scalar integer in [lo, HCNN_MAX_DIM] into *out; 0 if it is not one. */
int hcnn_cfg_pair_item(const node *n, int lo, int *out);
/* kernel / stride / pad: "k" or "[kh, kw]", each in [lo, HCNN_MAX_DIM]. */
int hcnn_cfg_get_pair(const ictx *c, const node *n, int lo, int *h, int *w);
/* Names become tensor-name prefixes: [A-Za-z0-9_.] and extra_chars. */
int hcnn_cfg_get_name(const ictx *c, const node *n, char *buf, size_t size,
                      const char *extra_chars);

/* ---- the schema (schema.c), read by the writer ----------------------------- */

/* Keys of a block, in the order the writer emits them. */
typedef enum block_key_type {
    BKT_TYPE, BKT_NAME, BKT_INT, BKT_PAIR, BKT_BOOL, BKT_FLOAT, BKT_SHORTCUT
} block_key_type;

typedef struct block_key {
    const char *name;
    block_key_type type;
    size_t off;        /* offsetof(hcnn_block_spec, field); BKT_PAIR: the first of two ints */
    int lo;            /* BKT_INT, BKT_PAIR: minimum */
    range r;           /* BKT_FLOAT */
} block_key;

typedef struct block_type {
    unsigned keys;            /* bit k: accepts block_keys[k] (type and name always) */
    unsigned required;        /* bit k: must be given */
    int window;               /* a pooling window: stride defaults to the kernel, pad <= half */
    hcnn_block_spec defaults;
} block_type;

extern const block_key hcnn_cfg_block_keys[];
extern const int hcnn_cfg_nblock_keys;
extern const block_type hcnn_cfg_block_types[HCNN_BLOCK_KIND_COUNT];
extern const char *const hcnn_cfg_shortcut_names[3];

typedef enum ktype {
    KT_MODEL, KT_INT, KT_LONG, KT_U64, KT_NUM, KT_BOOL, KT_STR, KT_NAME, KT_CHOICE, KT_ENUM,
    KT_AUGMENT, KT_PARTITION
} ktype;

/* A top-level key: its type and where it goes in hcnn_config. */
typedef struct keydef {
    const char *name;
    ktype type;
    size_t off;                /* offsetof(hcnn_config, field) */
    size_t size;               /* KT_STR, KT_NAME, KT_CHOICE: buffer size */
    int lo;                    /* KT_INT, KT_LONG: minimum */
    long long hi;              /* KT_INT, KT_LONG: maximum; 0: the field type's */
    range r;                   /* KT_NUM */
    int single;                /* KT_NUM used in float math: 0 or a normal float */
    const char *const *names;  /* KT_CHOICE, KT_ENUM */
    int nnames;
    int (*get)(const hcnn_config *);  /* KT_ENUM: the field is an enum type */
    void (*set)(hcnn_config *, int);
    int required;
} keydef;

extern const keydef hcnn_cfg_top_keys[];
extern const int hcnn_cfg_ntop_keys;

const char *hcnn_cfg_enum_name(const char *const *names, int n, int v);

#endif
