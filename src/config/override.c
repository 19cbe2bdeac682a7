/* Stage 2 of reading a configuration: `--set key=value` overrides grafted
 * into the tree (see internal.h).  Dotted keys reach into mappings and
 * sequences ("model.blocks.3.out"); an index one past a sequence's end
 * appends. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "internal.h"

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
    node *type_val = hcnn_cfg_scalar_new(n->str, strlen(n->str), n->line);
    if (!type_key || !type_val) {
        free(type_key);
        hcnn_cfg_node_free(type_val);
        return hcnn_cfg_oom();
    }
    n->type = NODE_MAP;
    free(n->str);
    n->str = NULL;
    n->is_null = 0;
    int rc = hcnn_cfg_node_push(n, type_key, n->line, type_val);
    if (rc) {
        free(type_key);
        hcnn_cfg_node_free(type_val);
    }
    return rc;
}

/* Put val (ownership taken on success) under `key` of map, replacing the
 * old value or appending a new key; *slot_out becomes val. */
static int graft_map(node *map, const char *key, node *val, node **slot_out)
{
    entry *e = hcnn_cfg_node_find(map, key);
    if (e) {
        hcnn_cfg_node_free(e->val);
        e->val = val;
        *slot_out = val;
        return HCNN_OK;
    }
    char *k = strdup(key);
    if (!k)
        return hcnn_cfg_oom();
    int rc = hcnn_cfg_node_push(map, k, LINE_SET, val);
    if (rc)
        free(k);
    else
        *slot_out = val;
    return rc;
}

typedef struct override {
    const char *file;
    const char *text; /* the whole "key=value" */
    char *comps[64];  /* key components (point into a writable copy) */
    int ncomps;
} override;

/* Walk/extend the tree along o->comps and put val at the end. */
static int graft(node **root, const override *o, node *val)
{
    if (!*root && !(*root = hcnn_cfg_node_new(NODE_MAP, LINE_SET)))
        return hcnn_cfg_oom();
    node *cur = *root;
    pathbuf where; /* the components walked so far, for messages */
    memset(&where, 0, sizeof where);
    for (int i = 0; i < o->ncomps; i++) {
        const char *comp = o->comps[i];
        int last = i == o->ncomps - 1;
        if (i > 0)
            hcnn_cfg_path_push(&where, o->comps[i - 1]);
        if (cur->type == NODE_SCALAR && i == 3 && !strcmp(o->comps[0], "model") &&
            !strcmp(o->comps[1], "blocks")) {
            int rc = scalar_to_block_map(cur);
            if (rc)
                return rc;
        }
        /* what goes at this component: the value, or a new mapping to descend into */
        node *fresh = last ? val : NULL;
        if (cur->type == NODE_MAP) {
            entry *e = hcnn_cfg_node_find(cur, comp);
            if (e && !last) {
                cur = e->val;
                continue;
            }
            if (!fresh && !(fresh = hcnn_cfg_node_new(NODE_MAP, LINE_SET)))
                return hcnn_cfg_oom();
            int rc = graft_map(cur, comp, fresh, &cur);
            if (rc && !last)
                hcnn_cfg_node_free(fresh);
            if (rc)
                return rc;
        } else if (cur->type == NODE_SEQ) {
            size_t idx;
            if (!parse_index(comp, &idx))
                return hcnn_error(
                    "%s: --set '%s': '%s' is a sequence: expected an index 0, 1, ... after it, "
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
                hcnn_cfg_node_free(cur->items[idx].val);
                cur->items[idx].val = val;
                return HCNN_OK;
            }
            /* idx == n: append the value, or a new mapping to descend into */
            if (!fresh && !(fresh = hcnn_cfg_node_new(NODE_MAP, LINE_SET)))
                return hcnn_cfg_oom();
            int rc = hcnn_cfg_node_push(cur, NULL, LINE_SET, fresh);
            if (rc && !last)
                hcnn_cfg_node_free(fresh);
            if (rc)
                return rc;
            cur = fresh;
        } else {
            return hcnn_error("%s: --set '%s': '%s' is a single value, not a mapping or sequence",
                              o->file, o->text, where.s);
        }
    }
    return HCNN_OK;
}

int hcnn_cfg_apply_override(node **root, const char *file, const char *set)
{
    const char *eq = set ? strchr(set, '=') : NULL;
    if (!eq || eq == set)
        return hcnn_error(
            "%s: --set '%s': expected key=value (e.g. lr=0.1 or model.blocks.0.out=8)", file,
            set ? set : "(null)");
    override o;
    memset(&o, 0, sizeof o);
    o.file = file;
    o.text = set;
    char *key = strndup(set, (size_t)(eq - set));
    if (!key)
        return hcnn_cfg_oom();
    int rc = HCNN_OK;
    /* split "a.b.0.c" in place; empty components ("a..b", ".a", "a.") are errors */
    for (char *s = key;;) {
        char *dot = strchr(s, '.');
        if (dot)
            *dot = '\0';
        if (!*s || o.ncomps == COUNT(o.comps)) {
            rc = hcnn_error(
                "%s: --set '%s': invalid key (expected dotted names like model.blocks.0.out)", file,
                set);
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
            rc = hcnn_cfg_oom();
        else
            rc = hcnn_cfg_parse_value(file, set, fullkey, eq + 1, &val);
        free(fullkey);
    }
    if (!rc && (rc = graft(root, &o, val)) != HCNN_OK)
        hcnn_cfg_node_free(val);
    free(key);
    return rc;
}
