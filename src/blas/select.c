/* blas_kernels at start-up (include/hcnn/blas.h): the choice, made or read
 * from the cache, applied by re-executing the program once with
 * OPENBLAS_CORETYPE set (the library reads it only when it loads); the
 * re-executed program finds HCNN_BLAS_NOTE in its environment, the line
 * the run header prints, and does not choose again. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "hcnn/common.h"
#include "hcnn/env.h"
#include "hcnn/files.h"
#include "hcnn/threads.h"
#include "internal.h"

/* the hand-over to the re-executed program (include/hcnn/env.h) */
#define NOTE_ENV HCNN_ENV_BLAS_NOTE /* why these kernels (header) */
#define WANT_ENV HCNN_ENV_BLAS_WANT /* the kernels the re-execution asked for */
#define ORIG_ENV HCNN_ENV_BLAS_ORIGINAL_CORETYPE /* the environment's, before ours */

int hcnn_blas_env_world(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 0)
            return atoi(v);
    }
    return 1;
}

int hcnn_blas_env_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) >= 0)
            return atoi(v);
    }
    return 0;
}

const char *hcnn_blas_kernels(void) { return hcnn_blas_loaded_kernels(); }

int hcnn_blas_selectable(void) { return hcnn_blas_kernels_selectable(); }

const char *hcnn_blas_describe(char *buf, int cap)
{
    char lib[128];
    hcnn_blas_library_name(lib, sizeof lib);
    const char *note = getenv(NOTE_ENV);
    const char *k = hcnn_blas_loaded_kernels();
    if (!hcnn_blas_kernels_selectable())
        snprintf(buf, (size_t)cap, "%s%s%s kernels", lib, k[0] ? ", " : "", k[0] ? k : "its own");
    else if (note && note[0])
        snprintf(buf, (size_t)cap, "%s kernels: %s", lib, note);
    else
        snprintf(buf, (size_t)cap, "%s kernels: %s", lib, k);
    return buf;
}

/* The environment's OPENBLAS_CORETYPE as the user set it ("" if unset). */
static const char *original_coretype(void)
{
    const char *orig = getenv(ORIG_ENV);
    if (orig)
        return orig;
    const char *env = getenv("OPENBLAS_CORETYPE");
    return env ? env : "";
}

/* The environment of the re-execution that loads `want`; 1, or 0 if it
 * cannot be set (the run goes on with the kernels loaded). */
static int prepare_reexec(const char *want, const char *note, int *reexec)
{
    *reexec = !setenv(ORIG_ENV, original_coretype(), 1) &&
              !setenv("OPENBLAS_CORETYPE", want, 1) && !setenv(WANT_ENV, want, 1) &&
              !setenv(NOTE_ENV, note, 1);
    return HCNN_OK;
}

void hcnn_blas_reexec(char **argv)
{
    const char *want = getenv(WANT_ENV);
    execv("/proc/self/exe", argv);
    char line[512];
    snprintf(line, sizeof line, "%s (wanted %s, but re-executing hcnn failed)",
             hcnn_blas_loaded_kernels(), want ? want : "?");
    setenv(NOTE_ENV, line, 1);
    unsetenv(WANT_ENV);
    hcnn_warn("BLAS kernels: cannot re-execute /proc/self/exe to load %s; running with %s",
              want ? want : "?", hcnn_blas_loaded_kernels());
}

/* The table for this run: from the cache or measured (and cached), the
 * ranks of a node waiting on the cache's lock while one measures. */
static int auto_table(const blas_run *run, blas_table *t, int remeasure, int *cached)
{
    int rc = hcnn_blas_table_key(run, t);
    if (rc)
        return rc;
    char dir[HCNN_FILE_PATH_MAX], why[sizeof t->cache_note - 64];
    const int have_dir = hcnn_blas_cache_dir(dir, sizeof dir, why, sizeof why) == HCNN_OK;
    int stop = 0;
    const int lock = have_dir ? hcnn_blas_cache_lock(dir, &stop) : -1;
    if (stop)
        return hcnn_blas_stopped(stop);
    *cached = !remeasure && have_dir && hcnn_blas_cache_read(dir, t);
    t->cache_note[0] = '\0';
    if (!*cached) {
        rc = hcnn_blas_measure(run, t);
        if (!rc && (!have_dir || hcnn_blas_cache_write(dir, t, why, sizeof why))) {
            /* the run goes on with what it measured: a warning, said in the header too */
            snprintf(t->cache_note, sizeof t->cache_note, "not cached: %s", why);
            hcnn_warn("BLAS kernels: the table is not cached (%s); the next run measures again "
                      "(set XDG_CACHE_HOME to a writable directory)",
                      why);
        }
    }
    hcnn_blas_cache_unlock(lock);
    return rc;
}

static blas_run run_of(const hcnn_config *cfg, int world)
{
    blas_run run = {.cfg = cfg, .world = world, .env_core = original_coretype()};
    /* measured on one thread, whatever the run's count: hcnn calls the
     * BLAS single-threaded on pieces fixed by shape, so one core's speed
     * decides, and every thread count of a model on this CPU and library
     * shares one choice (and so one set of bits) */
    run.threads = BLAS_MEASURE_THREADS;
    return run;
}

/* auto_table for cfg on world ranks into a new *t (the caller frees it,
 * also on failure); HCNN_ENOMEM if the table cannot be allocated,
 * HCNN_EINVAL for a thread count the run could not start (its children
 * would each say so). */
static int run_table(const hcnn_config *cfg, int world, int remeasure, blas_table **t,
                     int *cached)
{
    int threads;
    *t = NULL;
    if (hcnn_threads_resolve(cfg, &threads, NULL, 0))
        return HCNN_EINVAL;
    const blas_run run = run_of(cfg, world);
    if (!(*t = calloc(1, sizeof **t)))
        return hcnn_error_code(HCNN_ENOMEM, "cannot allocate the BLAS kernels' table");
    return auto_table(&run, *t, remeasure, cached);
}

/* blas_kernels names kernels this library cannot load: one message */
static int not_selectable(const hcnn_config *cfg)
{
    char lib[128];
    return hcnn_error_code(HCNN_EINVAL,
                           "%s: blas_kernels: '%s' names OpenBLAS kernels, but this hcnn "
                           "uses %s (configure --with-blas): expected auto or env",
                           cfg->path, cfg->blas_kernels, hcnn_blas_library_name(lib, sizeof lib));
}

static int empty_kernels(const hcnn_config *cfg)
{
    return hcnn_error_code(HCNN_EINVAL,
                           "%s: blas_kernels is empty: expected auto, env or an OpenBLAS "
                           "kernel type such as SkylakeX",
                           cfg->path);
}

int hcnn_blas_choose(const hcnn_config *cfg, int world, int *reexec)
{
    *reexec = 0;
    const char *mode = cfg->blas_kernels;
    const char *want = getenv(WANT_ENV);
    if (want) { /* the re-executed program */
        if (strcasecmp(hcnn_blas_loaded_kernels(), want))
            return hcnn_error_code(HCNN_EINVAL,
                                   "%s: blas_kernels: OpenBLAS has no kernels '%s' (it loaded %s "
                                   "instead; hcnn tune --config lists those this CPU runs)",
                                   cfg->path, want, hcnn_blas_loaded_kernels());
        return HCNN_OK;
    }
    if (getenv(NOTE_ENV))
        return HCNN_OK;
    const int is_auto = !strcmp(mode, "auto"), is_env = !strcmp(mode, "env");
    if (!hcnn_blas_kernels_selectable()) {
        if (is_auto || is_env)
            return HCNN_OK;
        return not_selectable(cfg);
    }
    char note[1024];
    if (is_env) {
        const char *env = getenv("OPENBLAS_CORETYPE");
        snprintf(note, sizeof note, "%s (env: %s%s)", hcnn_blas_loaded_kernels(),
                 env && env[0] ? "OPENBLAS_CORETYPE=" : "OpenBLAS's own choice",
                 env && env[0] ? env : "");
        setenv(NOTE_ENV, note, 1);
        return HCNN_OK;
    }
    if (!is_auto) { /* a name */
        if (!mode[0])
            return empty_kernels(cfg);
        snprintf(note, sizeof note, "%s (blas_kernels: %s)", mode, mode);
        if (!strcasecmp(hcnn_blas_loaded_kernels(), mode)) {
            setenv(NOTE_ENV, note, 1);
            return HCNN_OK;
        }
        return prepare_reexec(mode, note, reexec);
    }
    if (!hcnn_threads_ok(cfg)) /* not measured: the run refuses it once MPI is up */
        return HCNN_OK;
    if (cfg->device != HCNN_DEVICE_CPU) {
        /* the step's GEMMs are the device backend's (cuBLAS, cuDNN): a
         * measurement here would time what the run never calls, ResNet-18's
         * ~25 s on 2 cores before a GPU run (2026-12-01) */
        snprintf(note, sizeof note, "%s (auto: not measured: device %s runs the GEMMs)",
                 hcnn_blas_loaded_kernels(), hcnn_device_name(cfg->device));
        setenv(NOTE_ENV, note, 1);
        return HCNN_OK;
    }
    blas_table *t = NULL;
    int cached;
    const int rc = run_table(cfg, world, 0, &t, &cached);
    if (rc == HCNN_ENOMEM || rc == HCNN_STOPPED) { /* stopped: exit 75 before MPI */
        free(t);
        return rc;
    }
    if (rc) { /* no measurement: the kernels loaded, and why */
        snprintf(note, sizeof note, "%s (auto: not measured, see above)",
                 hcnn_blas_loaded_kernels());
        setenv(NOTE_ENV, note, 1);
        free(t);
        return HCNN_OK;
    }
    hcnn_blas_table_note(t, cached, note, sizeof note);
    const blas_candidate *c = &t->c[t->choice];
    char chosen[BLAS_NAME_MAX];
    snprintf(chosen, sizeof chosen, "%s", c->asked[0] ? c->asked : c->name);
    free(t);
    if (!strcasecmp(hcnn_blas_loaded_kernels(), chosen)) {
        setenv(NOTE_ENV, note, 1);
        return HCNN_OK;
    }
    return prepare_reexec(chosen, note, reexec);
}

int hcnn_blas_tune(const hcnn_config *cfg, int world, FILE *out)
{
    if (!hcnn_blas_kernels_selectable()) {
        char lib[128];
        fprintf(out, "# %s: its kernels are its own choice (blas_kernels applies to OpenBLAS)\n",
                hcnn_blas_library_name(lib, sizeof lib));
        return HCNN_OK;
    }
    blas_table *t = NULL;
    int cached;
    const int rc = run_table(cfg, world, 1, &t, &cached);
    if (!rc)
        hcnn_blas_table_print(t, out);
    free(t);
    return rc;
}

int hcnn_blas_choose_in_process(const hcnn_config *cfg)
{
    if (getenv(WANT_ENV) || getenv(NOTE_ENV))
        return HCNN_OK; /* the program chose them before it started (hcnn_blas_choose) */
    const char *mode = cfg->blas_kernels;
    if (!strcmp(mode, "auto") || !strcmp(mode, "env"))
        return HCNN_OK;
    if (!hcnn_blas_kernels_selectable()) {
        return not_selectable(cfg);
    }
    if (!mode[0])
        return empty_kernels(cfg);
    if (!strcasecmp(hcnn_blas_loaded_kernels(), mode))
        return HCNN_OK;
    return hcnn_error_code(HCNN_EINVAL,
                           "%s: blas_kernels: %s, but this process loaded OpenBLAS's %s kernels, "
                           "and a library cannot re-execute its process as the hcnn program "
                           "does: start it with OPENBLAS_CORETYPE=%s (or use blas_kernels: env)",
                           cfg->path, mode, hcnn_blas_loaded_kernels(), mode);
}
