/* The configuration writer: every key of the schema (schema.c), after
 * overrides, as YAML that reads back to the same configuration; the run
 * header prints it and it goes beside each metrics file. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "hcnn/files.h"
#include "internal.h"

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

static void write_block_key(FILE *f, const hcnn_block_spec *b, const block_key *k)
{
    const char *field = (const char *)b + k->off;
    const int *ints = (const int *)(const void *)field;
    switch (k->type) {
    case BKT_INT:
        fprintf(f, "%d", ints[0]);
        break;
    case BKT_PAIR:
        fprintf(f, "[%d, %d]", ints[0], ints[1]);
        break;
    case BKT_BOOL:
        fputs(ints[0] ? "true" : "false", f);
        break;
    case BKT_FLOAT:
        write_float(f, *(const float *)(const void *)field);
        break;
    case BKT_SHORTCUT:
        fputs(hcnn_cfg_enum_name(hcnn_cfg_shortcut_names, COUNT(hcnn_cfg_shortcut_names),
                                 (int)b->shortcut),
              f);
        break;
    default:
        break;
    }
}

static void write_block(FILE *f, const hcnn_block_spec *b)
{
    const int known = (int)b->kind >= 0 && b->kind < HCNN_BLOCK_KIND_COUNT;
    const unsigned mask = known ? hcnn_cfg_block_types[b->kind].keys : 0;
    fprintf(f, "    - {type: %s", hcnn_block_kind_name(b->kind));
    if (b->name[0]) {
        fputs(", name: ", f);
        write_string(f, b->name);
    }
    for (int k = 0; k < hcnn_cfg_nblock_keys; k++) {
        if (!(mask & (1u << k)))
            continue;
        fprintf(f, ", %s: ", hcnn_cfg_block_keys[k].name);
        write_block_key(f, b, &hcnn_cfg_block_keys[k]);
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
    case KT_NAME:
    case KT_CHOICE:
        write_string(f, field);
        break;
    case KT_ENUM:
        fputs(hcnn_cfg_enum_name(d->names, d->nnames, d->get(cfg)), f);
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
    for (int i = 0; i < hcnn_cfg_ntop_keys; i++)
        write_top_key(f, cfg, &hcnn_cfg_top_keys[i]);
}

/* Written whole through the atomic-file helper: the configuration beside a
 * metrics file is never half there. */
int hcnn_config_write(const hcnn_config *cfg, const char *path)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return hcnn_error_code(HCNN_ENOMEM, "cannot write configuration '%s': %s", path,
                               strerror(errno));
    hcnn_config_print(cfg, f);
    const int failed = ferror(f);
    int rc = fclose(f) != 0 || failed
                 ? hcnn_error_code(HCNN_ENOMEM, "cannot write configuration '%s'", path)
                 : hcnn_write_file(path, text, len);
    free(text);
    return rc;
}
