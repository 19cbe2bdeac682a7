/* Helpers shared by the cmocka tests: capture stderr around a call and
 * check its error message; write a fixture file.  Included after
 * <cmocka.h>. */
#ifndef HCNN_TEST_CAPTURE_H
#define HCNN_TEST_CAPTURE_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* path := len bytes of data */
static inline void write_file(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(data, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

/* A fresh directory made from tmpl ("/tmp/name_XXXXXX", into dir) holding
 * model.yaml := text (its path into cfg_path); 0 on success. */
static inline int config_fixture_dir(char *dir, const char *tmpl, char *cfg_path, size_t cap,
                                     const char *text)
{
    strcpy(dir, tmpl);
    if (!mkdtemp(dir))
        return -1;
    snprintf(cfg_path, cap, "%s/model.yaml", dir);
    FILE *fp = fopen(cfg_path, "w");
    if (!fp || fputs(text, fp) < 0 || fclose(fp) != 0)
        return -1;
    return 0;
}

/* stderr capture: exactly one "hcnn: error:" message containing each of
 * the NULL-terminated strings */
typedef struct capture {
    int saved;
    char path[64];
} capture;

static inline void capture_begin(capture *c)
{
    fflush(stderr);
    strcpy(c->path, "/tmp/hcnn_test_err_XXXXXX");
    int fd = mkstemp(c->path);
    assert_true(fd >= 0);
    c->saved = dup(2);
    assert_true(c->saved >= 0);
    assert_true(dup2(fd, 2) >= 0);
    close(fd);
}

/* Restores stderr and returns what was captured (text, cap bytes). */
static inline void capture_text(capture *c, char *text, size_t cap)
{
    fflush(stderr);
    assert_true(dup2(c->saved, 2) >= 0);
    close(c->saved);
    FILE *fp = fopen(c->path, "r");
    assert_non_null(fp);
    size_t len = fread(text, 1, cap - 1, fp);
    text[len] = '\0';
    fclose(fp);
    unlink(c->path);
}

static inline int count_errors(const char *text)
{
    int count = 0;
    for (const char *p = text; (p = strstr(p, "hcnn: error:")) != NULL; p++)
        count++;
    return count;
}

static inline void capture_end_v(capture *c, va_list ap)
{
    char text[4096];
    capture_text(c, text, sizeof text);
    printf("  (expected) %s", text); /* stdout: in order with cmocka's lines */
    assert_int_equal(count_errors(text), 1);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL;)
        if (!strstr(text, s))
            fail_msg("message lacks '%s'", s);
}

static inline void capture_end(capture *c, ...)
{
    va_list ap;
    va_start(ap, c);
    capture_end_v(c, ap);
    va_end(ap);
}

#endif
