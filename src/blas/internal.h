/* Inside the BLAS module (src/blas/): what its files share.
 *   library.c  the linked library: its name, build, kernels, one thread
 *   cache.c    the measurement's cache file, its key and lock
 *   measure.c  the candidates, the child processes, the table, the choice
 *   probe.c    the child: the model's GEMMs timed under one kernel type
 *   select.c   blas_kernels at start-up: the choice applied by re-execution
 * (include/hcnn/blas.h) */
#ifndef HCNN_BLAS_INTERNAL_H
#define HCNN_BLAS_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "hcnn/blas.h"
#include "hcnn/net.h" /* hcnn_pass_gemms */

/* ---- library.c ---------------------------------------------------------- */
/* "OpenBLAS 0.3.21", "BLIS 0.9.0", "CBLAS" */
const char *hcnn_blas_library_name(char *buf, int cap);
/* The kernels the library runs now: OpenBLAS's core type, BLIS's
 * architecture, "" for a generic CBLAS. */
const char *hcnn_blas_loaded_kernels(void);
/* What identifies the library build for the cache: its file and
 * configuration (without the kernels now loaded). */
const char *hcnn_blas_library_build(char *buf, int cap);
/* Whether kernels can be chosen (OpenBLAS: OPENBLAS_CORETYPE at load). */
int hcnn_blas_kernels_selectable(void);

/* ---- measure.c ------------------------------------------------------------- */
#define BLAS_MAX_CANDIDATES 12
#define BLAS_NAME_MAX 32

typedef struct blas_candidate {
    char name[BLAS_NAME_MAX];   /* the core type as OpenBLAS names it once loaded */
    char asked[BLAS_NAME_MAX];  /* OPENBLAS_CORETYPE given to the child ("": none) */
    char source[64];            /* why it is a candidate */
    double seconds;             /* median over rounds; < 0: failed */
    char failure[96];
} blas_candidate;

typedef struct blas_table {
    char key[1024];             /* what the measurement holds for (cache.c) */
    char model[160];            /* in words, for the header and the table */
    blas_candidate c[BLAS_MAX_CANDIDATES];
    int n;
    int baseline;               /* what would run without hcnn: the environment's or detected */
    int choice;                 /* index into c */
    double margin;              /* BLAS_KEEP_MARGIN: a round's lead that counts */
    double measure_s;           /* wall time of the measurement */
    char cache_path[1024];
    char cache_note[1200];      /* "" when cached, else why not (the run header says it) */
} blas_table;

/* One candidate beats another when faster by more than this fraction in
 * every round both ran (at least BLAS_FIRST_ROUNDS; finalists run up to
 * BLAS_ROUNDS) */
#define BLAS_KEEP_MARGIN 0.03
#define BLAS_FIRST_ROUNDS 2
#define BLAS_ROUNDS 7
/* The choice among t's measured candidates (seconds > 0), times[i][r] the
 * seconds of candidate i in round r, rounds[i] how many it ran: the
 * baseline if none beats it, else the first that none beats, else the
 * fastest median (measure.c). */
int hcnn_blas_choose_measured(const blas_table *t, double times[][BLAS_ROUNDS], const int *rounds);

/* The measurement's threads: 1, whatever the run's (select.c). */
#define BLAS_MEASURE_THREADS 1

/* Everything a measurement needs to know about the run. */
typedef struct blas_run {
    const hcnn_config *cfg;
    int world;                  /* ranks of the job */
    int threads;                /* the measurement's OpenMP threads */
    const char *env_core;       /* the environment's OPENBLAS_CORETYPE ("" or NULL: unset) */
} blas_run;

/* The key and the model's description (builds the model to list its GEMMs). */
int hcnn_blas_table_key(const blas_run *run, blas_table *t);
/* Measure every candidate in child processes and choose.  HCNN_STOPPED
 * (after hcnn_blas_stopped's line) when SIGTERM or SIGUSR1 comes meanwhile. */
int hcnn_blas_measure(const blas_run *run, blas_table *t);
/* One line: the signal came before training, nothing to checkpoint.
 * Returns HCNN_STOPPED (exit status 75). */
int hcnn_blas_stopped(int sig);
/* The table, for hcnn tune. */
void hcnn_blas_table_print(const blas_table *t, FILE *out);
/* "Cooperlake (auto: 1.52x faster than Haswell from OPENBLAS_CORETYPE; ...)" */
void hcnn_blas_table_note(const blas_table *t, int cached, char *buf, int cap);

/* ---- probe.c ------------------------------------------------------------- */
/* The model's GEMMs for a pass on a rank of the run (reps 0: listed only,
 * else each shape timed, median of reps); *samples: the pass's samples. */
int hcnn_blas_model_gemms(const blas_run *run, int reps, hcnn_pass_gemms *out, int *samples);

/* ---- cache.c ------------------------------------------------------------- */
/* The cache directory ($XDG_CACHE_HOME/hcnn, else ~/.cache/hcnn), created;
 * HCNN_EIO with the reason in why (no message: the run does without). */
int hcnn_blas_cache_dir(char *buf, int cap, char *why, size_t why_cap);
/* An exclusive lock on the cache directory, held until hcnn_blas_cache_unlock:
 * ranks on a node wait while one measures.  Returns the descriptor or -1
 * (no lock; *stop: the stop signal that ended the wait, else 0). */
int hcnn_blas_cache_lock(const char *dir, int *stop);
void hcnn_blas_cache_unlock(int fd);
/* The file of t->key in dir (t->cache_path); read: 1 found and filled, 0
 * not there or stale; write: HCNN_OK or HCNN_EIO. */
int hcnn_blas_cache_read(const char *dir, blas_table *t);
int hcnn_blas_cache_write(const char *dir, blas_table *t, char *why, size_t why_cap);

#endif
