/* CRC32, mkdir -p and atomic whole-file writes (see include/hcnn/files.h). */
#define _DEFAULT_SOURCE /* realpath */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "hcnn/common.h"
#include "hcnn/files.h"

uint32_t hcnn_crc32(uint32_t crc, const void *data, size_t n)
{
    const unsigned char *p = data;
    uLong c = crc;
    while (n > 0) { /* zlib takes uInt lengths */
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, p, chunk);
        p += chunk, n -= chunk;
    }
    return (uint32_t)c;
}

int hcnn_mkdir_p_why(const char *dir, char *why, size_t cap)
{
    char buf[HCNN_FILE_PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
        snprintf(why, cap, "%s: path too long", dir);
        return HCNN_EIO;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
            snprintf(why, cap, "cannot create directory %s: %s", buf, strerror(errno));
            return HCNN_EIO;
        }
        *p = '/';
    }
    if (buf[0] && mkdir(buf, 0777) != 0 && errno != EEXIST) {
        snprintf(why, cap, "cannot create directory %s: %s", buf, strerror(errno));
        return HCNN_EIO;
    }
    struct stat st; /* EEXIST also for what is not a directory */
    if (buf[0] && stat(buf, &st) != 0) {
        snprintf(why, cap, "cannot create directory %s: %s", buf, strerror(errno));
        return HCNN_EIO;
    }
    if (buf[0] && !S_ISDIR(st.st_mode)) {
        snprintf(why, cap, "cannot create directory %s: it is %s", buf, hcnn_file_kind(st.st_mode));
        return HCNN_EIO;
    }
    return HCNN_OK;
}

int hcnn_mkdir_p(const char *dir)
{
    char why[HCNN_FILE_PATH_MAX + 64];
    const int rc = hcnn_mkdir_p_why(dir, why, sizeof why);
    return rc ? hcnn_error_code(rc, "%s", why) : HCNN_OK;
}

int hcnn_mkdir_p_for(const char *dir, const char *what)
{
    char why[HCNN_FILE_PATH_MAX + 64];
    const int rc = hcnn_mkdir_p_why(dir, why, sizeof why);
    return rc ? hcnn_error_code(rc, "%s (for '%s', %s)", why, dir, what) : HCNN_OK;
}

int hcnn_mkdir_parent(const char *path, const char *what)
{
    char buf[HCNN_FILE_PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return hcnn_error_code(HCNN_EIO, "%s: path too long", path);
    char *slash = strrchr(buf, '/');
    if (!slash || slash == buf)
        return HCNN_OK;
    *slash = '\0';
    return hcnn_mkdir_p_for(buf, what);
}

time_t hcnn_fs_now(const char *dir)
{
    char path[HCNN_FILE_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/.hcnn-clock-%ld", dir, (long)getpid());
    time_t t = time(NULL);
    /* O_NOFOLLOW: a link planted under this name is refused (this node's
     * clock then), not followed to truncate what it names; O_NONBLOCK: a
     * FIFO there fails the open instead of blocking it */
    const int fd =
        open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0)
            t = st.st_mtime;
        close(fd);
        unlink(path);
    }
    return t;
}

const char *hcnn_file_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a pipe or FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode)) /* (lstat's) */
        return "a symbolic link";
    return "not a regular file";
}

/* flags: O_RDONLY, or O_WRONLY | O_CREAT | O_TRUNC (what stands at path
 * is looked at first: O_TRUNC is not given to a device) */
static int open_regular(const char *path, const char *what, int code, int flags, int *fd)
{
    struct stat st;
    *fd = -1;
    if ((flags & O_CREAT) && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return hcnn_error_code(code, "%s '%s' is %s (expected a regular file or a new name)",
                               what, path, hcnn_file_kind(st.st_mode));
    *fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0666); /* (as fopen: the umask decides) */
    if (*fd < 0) { /* a socket cannot be opened: say what it is */
        const int e = errno;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return hcnn_error_code(code, "%s '%s' is %s (expected a regular file)", what, path,
                                   hcnn_file_kind(st.st_mode));
        return hcnn_error_code(code, "cannot open %s '%s': %s", what, path, strerror(e));
    }
    const int e = fstat(*fd, &st) != 0 ? errno : 0;
    if (e || !S_ISREG(st.st_mode)) {
        close(*fd);
        *fd = -1;
        if (e)
            return hcnn_error_code(code, "cannot open %s '%s': %s", what, path, strerror(e));
        return hcnn_error_code(code, "%s '%s' is %s (expected a regular file)", what, path,
                               hcnn_file_kind(st.st_mode));
    }
    fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK); /* reads wait for the disk again */
    return HCNN_OK;
}

int hcnn_open_regular(const char *path, const char *what, int code, int *fd)
{
    return open_regular(path, what, code, O_RDONLY, fd);
}

int hcnn_fopen_write(const char *path, const char *what, int code, FILE **f)
{
    int fd;
    *f = NULL;
    const int rc = open_regular(path, what, code, O_WRONLY | O_CREAT | O_TRUNC, &fd);
    if (rc)
        return rc;
    if (!(*f = fdopen(fd, "w"))) {
        close(fd);
        return hcnn_error_code(HCNN_ENOMEM, "cannot write %s '%s': %s", what, path,
                               strerror(errno));
    }
    return HCNN_OK;
}

int hcnn_fopen_regular(const char *path, const char *what, int code, FILE **f)
{
    int fd;
    *f = NULL;
    const int rc = hcnn_open_regular(path, what, code, &fd);
    if (rc)
        return rc;
    if (!(*f = fdopen(fd, "r"))) {
        close(fd);
        return hcnn_error_code(HCNN_ENOMEM, "cannot read %s '%s': %s", what, path,
                               strerror(errno));
    }
    return HCNN_OK;
}

/* The steps of an atomic write, each saying what failed in why instead of
 * printing it: hcnn_write_file_why's callers decide whether it is an error
 * (a checkpoint) or a warning (a cache the run does without). */
static int afile_open(hcnn_afile *a, const char *path, char *why, size_t cap)
{
    a->fd = -1;
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path) {
        snprintf(why, cap, "%s: path too long", path);
        return HCNN_EIO;
    }
    /* a symbolic link: its target is replaced (beside it: the rename stays
     * on one file system), not the link by a file */
    struct stat lst;
    char real[PATH_MAX];
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        if (!realpath(path, real)) { /* dangling: replacing the link would lose it */
            snprintf(why, cap, "%s is a symbolic link whose target cannot be resolved (%s)", path,
                     strerror(errno));
            return HCNN_EIO;
        }
        if (snprintf(a->path, sizeof a->path, "%s", real) >= (int)sizeof a->path) {
            snprintf(why, cap, "%s: the path of its link's target is too long", path);
            return HCNN_EIO;
        }
        path = a->path;
    }
    /* the host as 8 hex digits of its name's FNV-1a hash: a short name
     * (a 64-character host name would push a long export's file name past
     * 255) that other nodes' pids do not meet */
    char host[256] = "";
    if (gethostname(host, sizeof host) != 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    uint32_t h = 2166136261u;
    for (const char *c = host; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%08x.%ld", path, (unsigned)h, (long)getpid());
    /* the rename would replace what stands at path: a device, FIFO or
     * socket given as the output (-o /dev/null, as root) with a regular
     * file, for good */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(why, cap, "%s is %s (expected a regular file or a new name: it is written to "
                           "a temporary file renamed over it)",
                 path, hcnn_file_kind(st.st_mode));
        return HCNN_EIO;
    }
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        snprintf(why, cap, "cannot create %s: %s", a->tmp, strerror(errno));
        return HCNN_EIO;
    }
    return HCNN_OK;
}

static int afile_write(hcnn_afile *a, const void *data, size_t n, char *why, size_t cap)
{
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t w = write(a->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            hcnn_afile_abort(a);
            snprintf(why, cap, "cannot write %s: %s", a->tmp, strerror(e));
            return HCNN_EIO;
        }
        p += w, n -= (size_t)w;
    }
    return HCNN_OK;
}

static int afile_commit(hcnn_afile *a, char *why, size_t cap)
{
    /* fsync before rename: the new name must never point at unwritten data */
    errno = 0;
    int bad = fsync(a->fd) != 0;
    int e = errno;
    bad |= close(a->fd) != 0;
    a->fd = -1;
    if (bad) {
        unlink(a->tmp);
        snprintf(why, cap, "cannot flush %s: %s", a->tmp, strerror(e ? e : errno));
        return HCNN_EIO;
    }
    if (rename(a->tmp, a->path) != 0) {
        e = errno;
        unlink(a->tmp);
        snprintf(why, cap, "cannot rename %s to %s: %s", a->tmp, a->path, strerror(e));
        return HCNN_EIO;
    }
    /* make the rename itself durable */
    char dir[HCNN_FILE_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", a->path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    int dfd = open(dir, O_RDONLY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return HCNN_OK;
}

#define WHY_CAP (2 * HCNN_FILE_PATH_MAX + 128)

int hcnn_afile_open(hcnn_afile *a, const char *path)
{
    char why[WHY_CAP];
    const int rc = afile_open(a, path, why, sizeof why);
    return rc ? hcnn_error_code(rc, "%s", why) : HCNN_OK;
}

void hcnn_afile_abort(hcnn_afile *a)
{
    if (a->fd >= 0) {
        close(a->fd);
        unlink(a->tmp);
    }
    a->fd = -1;
}

int hcnn_afile_write(hcnn_afile *a, const void *data, size_t n)
{
    char why[WHY_CAP];
    const int rc = afile_write(a, data, n, why, sizeof why);
    return rc ? hcnn_error_code(rc, "%s", why) : HCNN_OK;
}

int hcnn_afile_commit(hcnn_afile *a)
{
    char why[WHY_CAP];
    const int rc = afile_commit(a, why, sizeof why);
    return rc ? hcnn_error_code(rc, "%s", why) : HCNN_OK;
}

int hcnn_write_file_why(const char *path, const void *data, size_t n, char *why, size_t cap)
{
    hcnn_afile a;
    int rc = afile_open(&a, path, why, cap);
    if (!rc)
        rc = afile_write(&a, data, n, why, cap);
    if (!rc)
        rc = afile_commit(&a, why, cap);
    return rc;
}

int hcnn_write_file(const char *path, const void *data, size_t n)
{
    char why[WHY_CAP];
    const int rc = hcnn_write_file_why(path, data, n, why, sizeof why);
    return rc ? hcnn_error_code(rc, "%s", why) : HCNN_OK;
}

int hcnn_cache_dir(char *buf, size_t cap, char *why, size_t why_cap)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && xdg[0] == '/')
        n = snprintf(buf, cap, "%s/hcnn", xdg);
    else if (home && home[0])
        n = snprintf(buf, cap, "%s/.cache/hcnn", home);
    else
        n = snprintf(buf, cap, "/tmp/hcnn-cache-%ld", (long)getuid());
    if (n < 0 || (size_t)n >= cap) {
        snprintf(why, why_cap, "its directory's name is too long");
        return HCNN_EIO;
    }
    return hcnn_mkdir_p_why(buf, why, why_cap);
}

void hcnn_cache_file(const char *dir, const char *kind, const char *key, char *buf, size_t cap)
{
    uint64_t h = 14695981039346656037ull; /* 64-bit FNV-1a */
    for (const unsigned char *p = (const unsigned char *)key; *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    snprintf(buf, cap, "%s/%s-%016llx.txt", dir, kind, (unsigned long long)h);
}
