/* Files: CRC32, mkdir -p, and the one way hcnn writes a whole file.
 *
 * Checkpoints, NumPy exports and run configurations are written through
 * hcnn_afile: under a temporary name beside the target, fsync'ed, renamed
 * into place, and the directory fsync'ed so that the rename itself
 * survives a crash.  A reader therefore sees the old file or the new one,
 * never a torn or missing one.  (Metrics files are written through in
 * place instead, so that a link stays a link: src/train/report.c.)  Every
 * function prints one message naming the file and returns HCNN_EIO on
 * failure (hcnn_open_regular: the code it is given). */
#ifndef HCNN_FILES_H
#define HCNN_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define HCNN_FILE_PATH_MAX 4096

/* CRC32 (zlib's polynomial) of any number of bytes, continuing crc */
uint32_t hcnn_crc32(uint32_t crc, const void *data, size_t n);

/* mkdir -p (a path that exists and is not a directory is refused) */
int hcnn_mkdir_p(const char *dir);
/* The same, the reason in why (cap bytes) instead of a message. */
int hcnn_mkdir_p_why(const char *dir, char *why, size_t cap);
/* The same, the message naming what asked for dir (e.g. "checkpoint_dir
 * in configs/x.yaml"): a read-only working directory was reported as
 * "cannot create directory runs" without the key that put it there. */
int hcnn_mkdir_p_for(const char *dir, const char *what);
/* mkdir -p of the directory part of a file path, for what (as above) */
int hcnn_mkdir_parent(const char *path, const char *what);

/* hcnn's cache of measurements (the BLAS kernels, the CUDA convolutions'
 * ways): $XDG_CACHE_HOME/hcnn, else ~/.cache/hcnn, else
 * /tmp/hcnn-cache-UID, created.  HCNN_EIO with the reason in why and no
 * message (a run does without a cache and measures again). */
int hcnn_cache_dir(char *buf, size_t cap, char *why, size_t why_cap);
/* The cache file of a measurement of `kind` ("blas", "cuda-conv") for
 * `key` (what it holds for) in dir: DIR/KIND-HASH.txt, HASH the key's
 * 64-bit FNV-1a in hex (the file also holds the whole key, checked on
 * reading). */
void hcnn_cache_file(const char *dir, const char *kind, const char *key, char *buf, size_t cap);

/* The time by the clock of the file system that holds dir: the
 * modification time of a file created there (and removed).  Ages of files
 * another node wrote (a lock's heartbeat, a watchdog's) are measured
 * against it, not against this node's clock, which may run ahead (a node an
 * hour fast read every lock as stale).  time(NULL) if dir cannot be
 * written. */
time_t hcnn_fs_now(const char *dir);

/* What a file that is not a regular one is, for messages: "a directory",
 * "a pipe or FIFO", "a character device", ... */
const char *hcnn_file_kind(mode_t mode);

/* Open path for reading, refusing what is not a regular file (a FIFO would
 * block the open or the reads forever, a directory or a device never ends
 * as a file does): opened with O_NONBLOCK, checked with fstat, then made
 * blocking again.  HCNN_OK with *fd, or `code` after one message naming
 * `what` (e.g. "config file"), the path and what it is. */
int hcnn_open_regular(const char *path, const char *what, int code, int *fd);
/* The same as a stdio stream ("r"): HCNN_OK with *f, or `code` after one
 * message (HCNN_ENOMEM if the stream cannot be made). */
int hcnn_fopen_regular(const char *path, const char *what, int code, FILE **f);
/* A stream ("w") on a regular file, created or truncated: a FIFO, device
 * or socket at path is refused, not opened (a FIFO blocked the open, a
 * device got the output). */
int hcnn_fopen_write(const char *path, const char *what, int code, FILE **f);

/* A file being written under a temporary name: path.tmp.<host>.<pid>
 * (<host>: 8 hex digits of the host name's hash), one no other live process
 * has (the conv-way cache in a home directory that a job's nodes share is
 * written by many nodes, whose pids may meet). */
typedef struct hcnn_afile {
    int fd;
    char path[HCNN_FILE_PATH_MAX];
    char tmp[HCNN_FILE_PATH_MAX + 48];
} hcnn_afile;

int hcnn_afile_open(hcnn_afile *a, const char *path);
/* On failure the temporary file is removed: no abort call needed. */
int hcnn_afile_write(hcnn_afile *a, const void *data, size_t n);
/* fsync, rename onto the target, fsync the directory. */
int hcnn_afile_commit(hcnn_afile *a);
/* Give up: close and remove the temporary file. */
void hcnn_afile_abort(hcnn_afile *a);

/* open + write + commit of one buffer */
int hcnn_write_file(const char *path, const void *data, size_t n);
/* The same, the reason in why (cap bytes) instead of a message: for a
 * file the run does without (a cache), whose failure is a warning. */
int hcnn_write_file_why(const char *path, const void *data, size_t n, char *why, size_t cap);

#endif
