/* Shared by the fuzz targets (tests/fuzz/README.md): hcnn's parsers take
 * paths, so every target writes its input to a file in a private temporary
 * directory (one per process, on a tmpfs when there is one: /dev/shm, else
 * $TMPDIR or /tmp), reuses it for every input and removes it at exit.
 * Harness-only code: statics are fine here. */
#ifndef HCNN_FUZZ_COMMON_H
#define HCNN_FUZZ_COMMON_H

#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_dir_path[256];

/* rm -r of the private directory (one level of subdirectories at most) */
static void fuzz_rm_tree(const char *dir, int depth)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (depth < 3 && lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            fuzz_rm_tree(p, depth + 1);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void fuzz_cleanup(void)
{
    if (fuzz_dir_path[0])
        fuzz_rm_tree(fuzz_dir_path, 0);
}

/* The private directory, created on first use. */
static const char *fuzz_dir(void)
{
    if (fuzz_dir_path[0])
        return fuzz_dir_path;
    const char *base = getenv("HCNN_FUZZ_TMPDIR");
    struct stat st;
    if (!base || !*base)
        base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
                   ? "/dev/shm"
                   : getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/hcnn-fuzz-XXXXXX", base);
    if (!mkdtemp(fuzz_dir_path)) {
        perror("hcnn fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_cleanup);
    return fuzz_dir_path;
}

/* dir/name into buf (static storage per call site is the caller's). */
static void fuzz_path(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", fuzz_dir(), name);
}

/* Write data to path, replacing it; aborts on an I/O error (a harness
 * problem, not a finding in hcnn). */
static void fuzz_write(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

#endif
