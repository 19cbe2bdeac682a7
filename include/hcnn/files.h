/* Files: CRC32, mkdir -p, and the one way hcnn writes a whole file.
 *
 * Checkpoints, NumPy exports, run configurations and new metrics files are
 * written through hcnn_afile: under a temporary name beside the target,
 * fsync'ed, renamed into place, and the directory fsync'ed so that the
 * rename itself survives a crash.  A reader therefore sees the old file or
 * the new one, never a torn or missing one.  Every function prints one
 * message naming the file and returns HCNN_EIO on failure. */
#ifndef HCNN_FILES_H
#define HCNN_FILES_H

#include <stddef.h>
#include <stdint.h>

#define HCNN_FILE_PATH_MAX 4096

/* CRC32 (zlib's polynomial) of any number of bytes, continuing crc */
uint32_t hcnn_crc32(uint32_t crc, const void *data, size_t n);

/* mkdir -p */
int hcnn_mkdir_p(const char *dir);
/* mkdir -p of the directory part of a file path */
int hcnn_mkdir_parent(const char *path);

/* A file being written under a temporary name. */
typedef struct hcnn_afile {
    int fd;
    char path[HCNN_FILE_PATH_MAX];
    char tmp[HCNN_FILE_PATH_MAX + 32];
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

#endif
