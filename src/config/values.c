/* Typed getters of the configuration's values: each checks a node of the
 * tree and fails with a message naming the file, line, dotted key, what was
 * expected and what was found (see internal.h). */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hcnn/common.h"
#include "internal.h"

/* ======================================================================
 * Stage 3: interpretation (typed getters)
 * ==================================================================== */

int hcnn_cfg_fail_value(const ictx *c, const node *n, const char *expected)
{
    char got[112];
    hcnn_cfg_describe(n, got, sizeof got);
    return hcnn_cfg_fail_at(c->file, n ? n->line : LINE_NONE, "%s: expected %s, got %s", c->path.s,
                            expected, got);
}

int hcnn_cfg_is_scalar(const node *n) { return n && n->type == NODE_SCALAR && !n->is_null; }

/* Decimal integer with optional sign; no spaces, trailing text or overflow. */
static int cfg_parse_ll(const char *s, long long *out)
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

static int all_digits(const char *s) { return *s && strspn(s, "0123456789") == strlen(s); }

/* "a positive integer"; the upper limit is mentioned when it was hit or is
 * below the field type's own. */
static void int_expectation(char *buf, size_t size, long long lo, long long hi, long long type_max,
                            int too_big)
{
    if (lo != 0 && lo != 1)
        snprintf(buf, size, "an integer in [%lld, %lld]", lo, hi);
    else if (too_big || hi < type_max)
        snprintf(buf, size, "a %s integer of at most %lld", lo ? "positive" : "non-negative", hi);
    else
        snprintf(buf, size, "a %s integer", lo ? "positive" : "non-negative");
}

/* Integer in [lo, hi]; type_max is the field type's maximum (for the message). */
int hcnn_cfg_get_ll(const ictx *c, const node *n, long long lo, long long hi, long long type_max,
                    long long *out)
{
    long long v = 0;
    int parsed = hcnn_cfg_is_scalar(n) && cfg_parse_ll(n->str, &v);
    if (!parsed || v < lo || v > hi) {
        /* strtoll overflow also means "too big" unless the text is negative */
        int too_big = parsed ? v > hi : hcnn_cfg_is_scalar(n) && all_digits(n->str);
        char expected[96];
        int_expectation(expected, sizeof expected, lo, hi, type_max, too_big);
        return hcnn_cfg_fail_value(c, n, expected);
    }
    *out = v;
    return HCNN_OK;
}

int hcnn_cfg_get_int(const ictx *c, const node *n, int lo, int *out)
{
    return hcnn_cfg_get_int_range(c, n, lo, INT_MAX, out);
}

int hcnn_cfg_get_int_range(const ictx *c, const node *n, int lo, int hi, int *out)
{
    long long v = 0;
    int rc = hcnn_cfg_get_ll(c, n, lo, hi, INT_MAX, &v);
    if (!rc)
        *out = (int)v;
    return rc;
}

int hcnn_cfg_get_u64(const ictx *c, const node *n, uint64_t *out)
{
    /* strtoull would silently wrap "-1", so only digits (after an optional '+') */
    if (hcnn_cfg_is_scalar(n) && isdigit((unsigned char)n->str[n->str[0] == '+'])) {
        errno = 0;
        char *end;
        unsigned long long v = strtoull(n->str, &end, 10);
        if (!errno && !*end && v <= UINT64_MAX) {
            *out = (uint64_t)v;
            return HCNN_OK;
        }
    }
    return hcnn_cfg_fail_value(c, n, "a non-negative integer (at most 18446744073709551615)");
}

static int in_range(double v, range r)
{
    return (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
}

static void num_expectation(char *buf, size_t size, range r)
{
    if (isinf(r.hi))
        snprintf(buf, size, "a number %s %g", r.lo_open ? ">" : ">=", r.lo);
    else
        snprintf(buf, size, "a number in %c%g, %g%c", r.lo_open ? '(' : '[', r.lo, r.hi,
                 r.hi_open ? ')' : ']');
}

int hcnn_cfg_get_num(const ictx *c, const node *n, range r, double *out)
{
    double v;
    if (hcnn_cfg_is_scalar(n) && parse_num(n->str, &v) && in_range(v, r)) {
        *out = v;
        return HCNN_OK;
    }
    char expected[96];
    num_expectation(expected, sizeof expected, r);
    return hcnn_cfg_fail_value(c, n, expected);
}

int hcnn_cfg_get_num_single(const ictx *c, const node *n, range r, double *out)
{
    double v = 0.0;
    int rc = hcnn_cfg_get_num(c, n, r, &v);
    if (rc)
        return rc;
    if (v != 0.0 && (fabs(v) < FLT_MIN || fabs(v) > FLT_MAX)) {
        char expected[160];
        num_expectation(expected, sizeof expected, r);
        snprintf(expected + strlen(expected), sizeof expected - strlen(expected),
                 " that single precision can hold (%s%g to %g in magnitude)",
                 r.lo == 0.0 && !r.lo_open ? "0 or " : "", (double)FLT_MIN, (double)FLT_MAX);
        return hcnn_cfg_fail_value(c, n, expected);
    }
    *out = v;
    return HCNN_OK;
}

/* Single-precision fields: the range is checked after rounding to float,
 * so that e.g. eps: 1e-50 (0 as a float) is rejected. */
int hcnn_cfg_get_float(const ictx *c, const node *n, range r, float *out)
{
    double v;
    if (hcnn_cfg_is_scalar(n) && parse_num(n->str, &v)) {
        float f = (float)v;
        if (isfinite(f) && in_range((double)f, r)) {
            *out = f;
            return HCNN_OK;
        }
    }
    char expected[96];
    num_expectation(expected, sizeof expected, r);
    return hcnn_cfg_fail_value(c, n, expected);
}

int hcnn_cfg_parse_bool(const char *s, int *out)
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

int hcnn_cfg_get_bool(const ictx *c, const node *n, int *out)
{
    if (hcnn_cfg_is_scalar(n) && hcnn_cfg_parse_bool(n->str, out))
        return HCNN_OK;
    return hcnn_cfg_fail_value(c, n, "a boolean (true/false, yes/no, on/off, 1/0)");
}

/* Any scalar is a string (null: empty); unused bytes are zeroed so that
 * loaded configurations compare equal byte for byte. */
int hcnn_cfg_get_str(const ictx *c, const node *n, char *buf, size_t size)
{
    if (!n || n->type != NODE_SCALAR)
        return hcnn_cfg_fail_value(c, n, "a string");
    const char *s = n->is_null ? "" : n->str;
    size_t len = strlen(s);
    if (len >= size) {
        char expected[64];
        snprintf(expected, sizeof expected, "a string of at most %zu characters", size - 1);
        return hcnn_cfg_fail_value(c, n, expected);
    }
    memset(buf, 0, size);
    memcpy(buf, s, len);
    return HCNN_OK;
}

int hcnn_cfg_get_choice(const ictx *c, const node *n, const char *const *names, int count, int *out)
{
    if (hcnn_cfg_is_scalar(n))
        for (int i = 0; i < count; i++)
            if (!strcmp(n->str, names[i])) {
                *out = i;
                return HCNN_OK;
            }
    char expected[256];
    size_t o = (size_t)snprintf(expected, sizeof expected, "one of: ");
    for (int i = 0; i < count && o < sizeof expected; i++)
        o += (size_t)snprintf(expected + o, sizeof expected - o, "%s%s", i ? ", " : "", names[i]);
    return hcnn_cfg_fail_value(c, n, expected);
}

int hcnn_cfg_pair_item(const node *n, int lo, int *out)
{
    long long v;
    if (!hcnn_cfg_is_scalar(n) || !cfg_parse_ll(n->str, &v) || v < lo || v > HCNN_MAX_DIM)
        return 0;
    *out = (int)v;
    return 1;
}

/* kernel / stride / pad: "k" or "[kh, kw]", each in [lo, HCNN_MAX_DIM]. */
static int pair_fail(const ictx *c, const node *n, int lo)
{
    long long v;
    int too_big = hcnn_cfg_is_scalar(n) && cfg_parse_ll(n->str, &v) && v > HCNN_MAX_DIM;
    char limit[40] = "", expected[96];
    if (too_big)
        snprintf(limit, sizeof limit, " of at most %d", HCNN_MAX_DIM);
    snprintf(expected, sizeof expected, "a %s integer%s or [h, w]",
             lo > 0 ? "positive" : "non-negative", limit);
    return hcnn_cfg_fail_value(c, n, expected);
}

int hcnn_cfg_get_pair(const ictx *c, const node *n, int lo, int *h, int *w)
{
    if (n && n->type == NODE_SEQ && n->n == 2) {
        /* name the offending element rather than "a sequence" */
        for (size_t i = 0; i < 2; i++) {
            int v;
            if (!hcnn_cfg_pair_item(n->items[i].val, lo, &v))
                return pair_fail(c, n->items[i].val, lo);
        }
        hcnn_cfg_pair_item(n->items[0].val, lo, h);
        hcnn_cfg_pair_item(n->items[1].val, lo, w);
        return HCNN_OK;
    }
    int v;
    if (!hcnn_cfg_pair_item(n, lo, &v))
        return pair_fail(c, n, lo);
    *h = *w = v;
    return HCNN_OK;
}

/* Names become tensor-name prefixes ("layer1.0.conv1.weight"), so they are
 * restricted to characters that are safe in names and file names. */
int hcnn_cfg_get_name(const ictx *c, const node *n, char *buf, size_t size, const char *extra_chars)
{
    char expected[96];
    snprintf(expected, sizeof expected, "a name of at most %zu characters from [A-Za-z0-9_.%s]",
             size - 1, extra_chars);
    if (!n || n->type != NODE_SCALAR)
        return hcnn_cfg_fail_value(c, n, expected);
    const char *s = n->is_null ? "" : n->str;
    if (strlen(s) >= size)
        return hcnn_cfg_fail_value(c, n, expected);
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '.' && !strchr(extra_chars, *p))
            return hcnn_cfg_fail_value(c, n, expected);
    memset(buf, 0, size);
    memcpy(buf, s, strlen(s));
    return HCNN_OK;
}
