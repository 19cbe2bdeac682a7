/* What conv_choice.cu (each convolution shape's ways) and conv_cache.cu
 * (the measured ways kept on disk, and the lines the ranks exchange)
 * share: a shape's choice, an instance's choices, the line format. */
#ifndef HCNN_CUDA_CONV_CHOICE_H
#define HCNN_CUDA_CONV_CHOICE_H

#include "cuda.h"

extern "C" {
#include "hcnn/files.h"
}

/* the shapes an instance keeps (as conv_cudnn.cu's plans), and a cache file */
#define CHOICE_SHAPES 128
#define CACHE_SHAPES 1024

enum { FROM_MODE, FROM_RULE, FROM_MEASURED, FROM_CACHE, FROM_RANK };

typedef struct conv_choice {
    hcnn_conv_geom g;
    int out_c, n;                      /* n: the images it was chosen for */
    int precision, layout;
    int way[HCNN_PASSES];
    double ms[HCNN_PASSES][HCNN_WAYS]; /* a call's median (ms); 0: not measured */
    int from;                          /* FROM_* */
    int agreed;                        /* taken from a lower rank, or confirmed by it */
    int refused;                       /* a lower rank's ways it cannot run (no plan) */
} conv_choice;

struct hcnn_conv_choices {
    int n;
    conv_choice shapes[CHOICE_SHAPES];
    int cache_opened;                  /* the file's name was worked out */
    int ncached;
    conv_choice *cached;               /* CACHE_SHAPES: the file's lines */
    char key[640];                     /* what the file holds for */
    char path[HCNN_FILE_PATH_MAX];     /* "" where there is no cache directory */
    int warned;                        /* the cache could not be written: said once */
    int lock_waits;                    /* slices waited for the lock so far */
    int full_said;                     /* the warning that the table is full, given once */
};

/* the ways' names (HCNN_CUDA_CONV, the lines, the plan lines) */
extern const char *const hcnn_conv_way_names[HCNN_WAYS];
/* names[i] == s: i, else -1 */
int hcnn_conv_name_index(const char *const *names, int n, const char *s);

/* conv_cache.cu: a choice as one line (what identifies it, its ways and
 * medians; the length, as snprintf), and a line back into a choice (1, or
 * 0: not such a line) */
int hcnn_conv_choice_line(const conv_choice *c, char *buf, size_t cap);
int hcnn_conv_choice_parse(const char *line, conv_choice *c);
/* the cache file of this GPU model: its name (once), a lock beside it
 * (the descriptor, or -1), its lines for this key, a choice written */
void hcnn_conv_cache_open(const hcnn_backend *be, struct hcnn_conv_choices *s);
int hcnn_conv_cache_lock(struct hcnn_conv_choices *s);
void hcnn_conv_cache_unlock(int fd);
void hcnn_conv_cache_load(struct hcnn_conv_choices *s);
void hcnn_conv_cache_write(struct hcnn_conv_choices *s, const conv_choice *c);

#endif
