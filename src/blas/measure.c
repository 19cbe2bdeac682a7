/* The measurement behind blas_kernels: auto (include/hcnn/blas.h).
 *
 * Candidates: the kernels OpenBLAS picks by itself, the environment's
 * OPENBLAS_CORETYPE, and every kernel type of this table the CPU can run.
 * Each is timed in a child process (hcnn tune --probe, with
 * OPENBLAS_CORETYPE set: the library reads it when it loads), round after
 * round, in rotated order within a round so that a shared machine's slow
 * moments fall on all of them; the median of the rounds is the candidate's
 * time.  BLAS_FIRST_ROUNDS rounds for all, up to BLAS_ROUNDS for the
 * finalists (those within FINALIST_WITHIN of the best median).  A child that
 * crashes (kernels the CPU cannot run), or that loads other kernels than it
 * was asked for (a type this build does not have), leaves its candidate
 * out, with the reason in the table.  A stop signal (SIGTERM, SIGUSR1:
 * blocked by `train`, which takes them itself) is looked for between the
 * children and every POLL_SLICE_MS while one runs: the child is killed and
 * the program stops with status 75 at once, caching nothing (a cold
 * measurement can last a minute, a Slurm job's warning two). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <omp.h>
#include <unistd.h>

#include "hcnn/choice.h"
#include "hcnn/common.h"
#include "hcnn/env.h"
#include "hcnn/files.h"
#include "internal.h"

extern char **environ;

#define FINALIST_WITHIN 0.25
#define CHILD_TIMEOUT_S 300
/* how long a stop signal may wait while a child runs */
#define POLL_SLICE_MS 50
/* Which kernels win (hcnn_blas_choose_measured()): one candidate beats another when it was
 * faster by more than BLAS_KEEP_MARGIN in every round both ran (rounds are
 * adjacent in time, so a load that comes and goes slows both alike); the
 * choice is the kernels that would load anyway if nothing beats them, else
 * the first candidate (in a fixed order) that nothing beats.  Kernel types
 * of the same speed then never beat each other, however loaded the
 * machine: with medians and a margin, a loaded 2-core VM had chosen
 * SkylakeX in one fresh measurement and Cooperlake in the next (7.1x
 * against 9.5x, then 10.6x against 6.9x the baseline), and the two give
 * different last bits.  A margin on the medians large enough to hold such
 * swings would also have counted a 9x slower kernel type as equal (one
 * loaded measurement spread a candidate's rounds by 203%). */

/* ---- candidates ------------------------------------------------------------- */

typedef struct kernel_type {
    const char *name, *needs;
    int (*runs)(void);
} kernel_type;

#if defined(__x86_64__) && defined(__GNUC__)
static int has_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static int has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512cd");
}
static int has_bf16(void) { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }
static int has_fp16(void) { return has_bf16() && __builtin_cpu_supports("avx512fp16"); }

/* OpenBLAS's x86-64 kernel types with FMA (the older ones are not worth a
 * child process on a CPU that has it) */
static const kernel_type kernel_types[] = {
    {"Haswell", "AVX2", has_avx2},
    {"Zen", "AVX2", has_avx2},
    {"SkylakeX", "AVX-512", has_avx512},
    {"Cooperlake", "AVX-512 BF16", has_bf16},
    {"SapphireRapids", "AVX-512 FP16", has_fp16},
};
#define NKERNEL_TYPES ((int)(sizeof kernel_types / sizeof kernel_types[0]))
#else
/* elsewhere the child processes find out what runs */
static int always(void) { return 1; }
static const kernel_type kernel_types[] = {
#if defined(__aarch64__)
    {"ARMV8", "ARMv8", always},         {"NeoverseN1", "ARMv8.2", always},
    {"NeoverseV1", "SVE", always},      {"NeoverseN2", "SVE2", always},
    {"ThunderX2T99", "ARMv8.1", always}, {"A64FX", "SVE", always},
#else
    {"", "", always},
#endif
};
#define NKERNEL_TYPES ((int)(sizeof kernel_types / sizeof kernel_types[0]))
#endif

static void add_candidate(blas_table *t, const char *asked, const char *source)
{
    if (t->n == BLAS_MAX_CANDIDATES || (asked[0] == 0 && t->n > 0))
        return;
    for (int i = 0; i < t->n; i++)
        if (asked[0] && !strcasecmp(t->c[i].asked, asked))
            return;
    blas_candidate *c = &t->c[t->n++];
    memset(c, 0, sizeof *c);
    snprintf(c->asked, sizeof c->asked, "%s", asked);
    snprintf(c->source, sizeof c->source, "%s", source);
}

/* ---- one child ------------------------------------------------------------ */

/* A pending SIGTERM or SIGUSR1 taken, else 0.  `train` blocks them (they
 * wait for the trainer), so the measurement before MPI asks for them
 * itself: between and during its children (cache.c waits for its lock in
 * slices of sigtimedwait of its own). */
static int blas_take_stop_signal(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);
    const struct timespec zero = {0, 0};
    const int got = sigtimedwait(&set, NULL, &zero);
    return got > 0 ? got : 0;
}

int hcnn_blas_stopped(int sig)
{
    fprintf(stderr, "hcnn: %s received during the BLAS kernel measurement: stopping before "
                    "training (no checkpoint needed: nothing trained)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGUSR1");
    fflush(stderr);
    return HCNN_STOPPED;
}

enum { CHILD_DONE, CHILD_TIMED_OUT, CHILD_STOPPED };

/* The child's output until it closes it, keeping the last bytes (the
 * result line is the last one).  Waits in slices of POLL_SLICE_MS so that
 * a stop signal is acted on at once: the child is killed (*stop = the
 * signal, CHILD_STOPPED), as it is after CHILD_TIMEOUT_S (CHILD_TIMED_OUT). */
static int collect_output(int fd, pid_t pid, char *out, size_t cap, size_t *len, int *stop)
{
    const double deadline = hcnn_now() + CHILD_TIMEOUT_S;
    int result = CHILD_DONE;
    for (;;) {
        const int left_ms = (int)((deadline - hcnn_now()) * 1e3);
        if ((*stop = blas_take_stop_signal()) || left_ms <= 0) {
            result = *stop ? CHILD_STOPPED : CHILD_TIMED_OUT;
            kill(pid, SIGKILL);
            break;
        }
        struct pollfd p = {fd, POLLIN, 0};
        const int ready = poll(&p, 1, left_ms < POLL_SLICE_MS ? left_ms : POLL_SLICE_MS);
        if (ready == 0 || (ready < 0 && errno == EINTR))
            continue;
        char tmp[512];
        const ssize_t r = read(fd, tmp, sizeof tmp);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r; i++) {
            if (*len == cap - 1) {
                memmove(out, out + *len / 2, *len - *len / 2);
                *len -= *len / 2;
            }
            out[(*len)++] = tmp[i];
        }
    }
    out[*len] = 0;
    return result;
}

/* Runs `exe tune --probe --config cfg_file --ranks world` with
 * OPENBLAS_CORETYPE = asked (unset if ""), OMP_NUM_THREADS = threads;
 * returns 0 and fills kernels, seconds, hash, -1 with why, or -2 when a
 * stop signal came (*stop: which; the child, if started, killed). */
static int run_child(const char *exe, const char *cfg_file, const blas_run *run, const char *asked,
                     char *kernels, double *seconds, unsigned long long *hash, char *why,
                     size_t why_cap, int *stop)
{
    if ((*stop = blas_take_stop_signal()))
        return -2; /* between two children: start no other */
    char ranks[16], threads[48], core[64];
    snprintf(ranks, sizeof ranks, "%d", run->world);
    snprintf(threads, sizeof threads, "OMP_NUM_THREADS=%d", run->threads);
    snprintf(core, sizeof core, "OPENBLAS_CORETYPE=%s", asked);
    /* the environment, without OPENBLAS_CORETYPE, OMP_NUM_THREADS and our
     * re-execution's marks, plus the child's own */
    int nenv = 0;
    while (environ[nenv])
        nenv++;
    char **env = malloc(sizeof *env * (size_t)(nenv + 4));
    if (!env) {
        snprintf(why, why_cap, "out of memory");
        return -1;
    }
    int k = 0;
    for (int i = 0; i < nenv; i++)
        if (strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) &&
            strncmp(environ[i], "OMP_NUM_THREADS=", 16) &&
            strncmp(environ[i], HCNN_ENV_BLAS_PREFIX, sizeof HCNN_ENV_BLAS_PREFIX - 1))
            env[k++] = environ[i];
    env[k++] = threads;
    if (asked[0])
        env[k++] = core;
    env[k] = NULL;
    char *argv[] = {(char *)exe, "tune",    "--probe", "--config", (char *)cfg_file,
                    "--ranks",   ranks,     NULL};
    int fds[2];
    if (pipe(fds) != 0) {
        free(env);
        snprintf(why, why_cap, "pipe: %s", strerror(errno));
        return -1;
    }
    const pid_t pid = fork();
    if (pid == 0) { /* only async-signal-safe calls until the exec */
        dup2(fds[1], STDOUT_FILENO);
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        close(fds[1]);
        execve(exe, argv, env);
        _exit(127);
    }
    free(env);
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        snprintf(why, why_cap, "fork: %s", strerror(errno));
        return -1;
    }
    char out[4096];
    size_t len = 0;
    const int waited = collect_output(fds[0], pid, out, sizeof out, &len, stop);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (waited == CHILD_STOPPED)
        return -2;
    const char *line = strstr(out, "probe kernels=");
    if (waited == CHILD_TIMED_OUT) {
        snprintf(why, why_cap, "no answer in %d s", CHILD_TIMEOUT_S);
        return -1;
    }
    if (WIFSIGNALED(status)) {
        snprintf(why, why_cap, "crashed (%s): the CPU cannot run them", strsignal(WTERMSIG(status)));
        return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !line ||
        sscanf(line, "probe kernels=%31s seconds=%lf shapes=%*d hash=%llx", kernels, seconds,
               hash) != 3) {
        /* its last message */
        char *end = out + len;
        while (end > out && (end[-1] == '\n' || end[-1] == ' '))
            *--end = 0;
        const char *last = strrchr(out, '\n');
        snprintf(why, why_cap, "failed (exit %d): %.60s", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                 last ? last + 1 : out);
        return -1;
    }
    return 0;
}

/* ---- the choice ---------------------------------------------------------------- */

/* The kernels that would load anyway if no candidate beats them, else the
 * first candidate that none beats (candidates in their fixed order), else
 * the fastest median: include/hcnn/choice.h's rule, with BLAS_KEEP_MARGIN
 * and at least BLAS_FIRST_ROUNDS rounds. */
int hcnn_blas_choose_measured(const blas_table *t, double times[][BLAS_ROUNDS], const int *rounds)
{
    double median[BLAS_MAX_CANDIDATES];
    for (int i = 0; i < t->n; i++)
        median[i] = t->c[i].seconds;
    return hcnn_choice_pick(t->n, median, &times[0][0], BLAS_ROUNDS, rounds, t->baseline,
                            BLAS_FIRST_ROUNDS, BLAS_KEEP_MARGIN);
}

/* ---- the measurement ---------------------------------------------------------- */

int hcnn_blas_measure(const blas_run *run, blas_table *t)
{
    const double t0 = hcnn_now();
    /* the child reads the configuration as it stands after overrides */
    char cfg_file[] = "/tmp/hcnn-tune-XXXXXX.yaml";
    const int fd = mkstemps(cfg_file, 5);
    if (fd < 0)
        return hcnn_error("BLAS kernels: cannot create a temporary file in /tmp: %s",
                          strerror(errno));
    close(fd);
    hcnn_config *copy = malloc(sizeof *copy);
    if (!copy) {
        unlink(cfg_file);
        return HCNN_ENOMEM;
    }
    *copy = *run->cfg;
    copy->threads = run->threads;
    int rc = hcnn_config_write(copy, cfg_file);
    free(copy);
    if (rc) {
        unlink(cfg_file);
        return rc;
    }
    char exe[HCNN_FILE_PATH_MAX];
    const ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el <= 0) {
        unlink(cfg_file);
        return hcnn_error("BLAS kernels: cannot find this program (/proc/self/exe)");
    }
    exe[el] = 0;

    t->n = 0;
    add_candidate(t, "", "OpenBLAS's own choice for this CPU");
    if (run->env_core && run->env_core[0])
        add_candidate(t, run->env_core, "from OPENBLAS_CORETYPE");
    for (int i = 0; i < NKERNEL_TYPES; i++)
        if (kernel_types[i].name[0] && kernel_types[i].runs()) {
            char source[64];
            snprintf(source, sizeof source, "the CPU has %s", kernel_types[i].needs);
            add_candidate(t, kernel_types[i].name, source);
        }

    double times[BLAS_MAX_CANDIDATES][BLAS_ROUNDS];
    int alive[BLAS_MAX_CANDIDATES], rounds[BLAS_MAX_CANDIDATES];
    for (int i = 0; i < t->n; i++)
        alive[i] = 1, rounds[i] = 0;
    for (int r = 0; r < BLAS_ROUNDS; r++) {
        /* after the first rounds, only those within FINALIST_WITHIN of the best */
        double best = 0;
        for (int i = 0; r >= BLAS_FIRST_ROUNDS && i < t->n; i++)
            if (alive[i] && rounds[i] && (best == 0 || hcnn_median(times[i], rounds[i]) < best))
                best = hcnn_median(times[i], rounds[i]);
        for (int j = 0; j < t->n; j++) {
            const int i = (j + r) % t->n;
            blas_candidate *c = &t->c[i];
            if (!alive[i])
                continue;
            if (r >= BLAS_FIRST_ROUNDS && /* finalists: every round so far, near the best */
                (rounds[i] < r || hcnn_median(times[i], rounds[i]) > (1 + FINALIST_WITHIN) * best))
                continue;
            char kernels[BLAS_NAME_MAX] = "";
            unsigned long long hash = 0;
            int stop = 0;
            const int got = run_child(exe, cfg_file, run, c->asked, kernels, &times[i][rounds[i]],
                                      &hash, c->failure, sizeof c->failure, &stop);
            if (got == -2) { /* nothing measured is kept: no cache file */
                unlink(cfg_file);
                return hcnn_blas_stopped(stop);
            }
            if (got) {
                alive[i] = 0;
                continue;
            }
            if (rounds[i]++ > 0)
                continue;
            snprintf(c->name, sizeof c->name, "%s", kernels);
            if (c->asked[0] && strcasecmp(kernels, c->asked)) {
                snprintf(c->failure, sizeof c->failure,
                         "not in this build of the library (it loaded %s)", kernels);
                alive[i] = 0;
            }
        }
    }
    unlink(cfg_file);

    /* kernels that two candidates loaded are measured once: the first keeps them */
    double kept[BLAS_MAX_CANDIDATES][BLAS_ROUNDS];
    int kept_rounds[BLAS_MAX_CANDIDATES];
    int n = 0, env_index = -1;
    for (int i = 0; i < t->n; i++) {
        blas_candidate c = t->c[i];
        int dup = -1;
        for (int k = 0; k < n && alive[i]; k++)
            if (t->c[k].seconds >= 0 && !strcasecmp(t->c[k].name, c.name))
                dup = k;
        if (dup >= 0) {
            if (!strcmp(c.source, "from OPENBLAS_CORETYPE")) {
                env_index = dup;
                snprintf(t->c[dup].source, sizeof t->c[dup].source, "%s", c.source);
            }
            continue;
        }
        if (alive[i]) {
            c.seconds = hcnn_median(times[i], rounds[i]);
        } else {
            c.seconds = -1;
            if (!c.name[0])
                snprintf(c.name, sizeof c.name, "%s", c.asked[0] ? c.asked : "?");
        }
        if (!strcmp(c.source, "from OPENBLAS_CORETYPE") && alive[i])
            env_index = n;
        t->c[n] = c;
        memcpy(kept[n], times[i], sizeof kept[n]);
        kept_rounds[n] = alive[i] ? rounds[i] : 0;
        alive[n++] = alive[i];
    }
    t->n = n;
    t->baseline = env_index >= 0 ? env_index : 0;
    t->margin = BLAS_KEEP_MARGIN;
    if (t->n == 0 || t->c[t->baseline].seconds <= 0)
        return hcnn_error("BLAS kernels: the measurement failed (%s)",
                          t->n ? t->c[0].failure : "no candidate");
    t->choice = hcnn_blas_choose_measured(t, kept, kept_rounds);
    t->measure_s = hcnn_now() - t0;
    return HCNN_OK;
}

/* ---- the key ---------------------------------------------------------------- */

/* "AMD EPYC 9B45 (family 26 model 2 stepping 1)" from /proc/cpuinfo */
void hcnn_cpu_model(char *buf, size_t cap)
{
    char name[128] = "unknown CPU", family[16] = "", model[16] = "", stepping[16] = "";
    char impl[16] = "", part[16] = "";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (line[0] == '\n')
            break; /* the first CPU's block */
        char *v = strchr(line, ':');
        if (!v)
            continue;
        v += 1 + (v[1] == ' ');
        v[strcspn(v, "\n")] = 0;
        if (!strncmp(line, "model name", 10))
            snprintf(name, sizeof name, "%s", v);
        else if (!strncmp(line, "cpu family", 10))
            snprintf(family, sizeof family, "%s", v);
        else if (!strncmp(line, "model\t", 6))
            snprintf(model, sizeof model, "%s", v);
        else if (!strncmp(line, "stepping", 8))
            snprintf(stepping, sizeof stepping, "%s", v);
        else if (!strncmp(line, "CPU implementer", 15))
            snprintf(impl, sizeof impl, "%s", v);
        else if (!strncmp(line, "CPU part", 8))
            snprintf(part, sizeof part, "%s", v);
    }
    if (f)
        fclose(f);
    if (family[0])
        snprintf(buf, cap, "%s (family %s model %s stepping %s)", name, family, model, stepping);
    else
        snprintf(buf, cap, "%s (implementer %s part %s)", name, impl, part);
}

int hcnn_blas_table_key(const blas_run *run, blas_table *t)
{
    hcnn_pass_gemms g;
    int n;
    /* the GEMM list as the measurement's threads issue it (a pass's
     * per-thread items depend on the thread count) */
    const int saved = omp_get_max_threads();
    omp_set_num_threads(run->threads);
    const int rc = hcnn_blas_model_gemms(run, 0, &g, &n);
    omp_set_num_threads(saved);
    if (rc)
        return rc;
    char cpu[256], build[512];
    hcnn_cpu_model(cpu, sizeof cpu);
    hcnn_blas_library_build(build, sizeof build);
    snprintf(t->model, sizeof t->model, "%s, %d samples a pass, %d GEMM shapes",
             run->cfg->model.name, n, g.shapes);
    snprintf(t->key, sizeof t->key, "cpu=%s; blas=%s; threads=%d; OPENBLAS_CORETYPE=%s; gemms=%016llx",
             cpu, build, run->threads, run->env_core ? run->env_core : "",
             (unsigned long long)g.hash);
    return HCNN_OK;
}

/* ---- in words -------------------------------------------------------------- */

void hcnn_blas_table_print(const blas_table *t, FILE *out)
{
    const double base = t->c[t->baseline].seconds;
    fprintf(out, "# BLAS kernels for %s\n# %s\n", t->model, t->key);
    fprintf(out, "# %-16s %-36s %10s %10s\n", "kernels", "candidate because", "gemm_ms", "speed");
    for (int i = 0; i < t->n; i++) {
        const blas_candidate *c = &t->c[i];
        if (c->seconds < 0) {
            fprintf(out, "  %-16s %-36s %10s %10s  %s\n", c->name, c->source, "-", "-", c->failure);
            continue;
        }
        fprintf(out, "  %-16s %-36s %10.3f %9.2fx%s%s\n", c->name, c->source, c->seconds * 1e3,
                base / c->seconds, i == t->baseline ? "  (would load anyway)" : "",
                i == t->choice ? "  <- chosen" : "");
    }
    fprintf(out, "choice=%s speedup=%.3f measured_s=%.1f cache=%s\n", t->c[t->choice].name,
            base / t->c[t->choice].seconds, t->measure_s,
            t->cache_note[0] ? t->cache_note : t->cache_path);
}

void hcnn_blas_table_note(const blas_table *t, int cached, char *buf, int cap)
{
    const blas_candidate *b = &t->c[t->baseline], *c = &t->c[t->choice];
    const char *why = !strcmp(b->source, "from OPENBLAS_CORETYPE") ? "from OPENBLAS_CORETYPE"
                                                                  : "OpenBLAS's own choice";
    int n;
    if (t->choice == t->baseline)
        n = snprintf(buf, (size_t)cap, "%s (auto: %s, none %.0f%% faster in every round", c->name,
                     why, t->margin * 100);
    else
        n = snprintf(buf, (size_t)cap, "%s (auto: %.2fx faster than %s %s", c->name,
                     b->seconds / c->seconds, b->name, why);
    for (int i = 0; i < t->n && n < cap; i++)
        if (i != t->choice && i != t->baseline && t->c[i].seconds > 0)
            n += snprintf(buf + n, (size_t)(cap - n), "; %s %.2fx", t->c[i].name,
                          b->seconds / t->c[i].seconds);
    if (n < cap && t->cache_note[0])
        snprintf(buf + n, (size_t)(cap - n), "; measured, %s)", t->cache_note);
    else if (n < cap)
        snprintf(buf + n, (size_t)(cap - n), "; %s %s)", cached ? "cached in" : "measured, cached in",
                 t->cache_path);
}
