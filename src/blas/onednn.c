/* oneDNN: its version, the instructions it dispatches, and whether this CPU
 * runs bf16 through it (include/hcnn/onednn.h).  Nothing is kept here:
 * oneDNN holds what it detected itself, and every answer is asked again. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "hcnn/onednn.h"

#if defined(HAVE_ONEDNN)
#include <dnnl.h>
#endif

#define REBUILD_MESSAGE                                                                           \
    "hcnn was built without oneDNN: install libdnnl-dev and rerun ./configure (--with-onednn)"

int hcnn_onednn_linked(void)
{
#if defined(HAVE_ONEDNN)
    return 1;
#else
    return 0;
#endif
}

const char *hcnn_onednn_version(char *buf, size_t cap)
{
#if defined(HAVE_ONEDNN)
    const dnnl_version_t *v = dnnl_version();
    snprintf(buf, cap, "oneDNN %d.%d.%d (commit %s)", v->major, v->minor, v->patch,
             v->hash && v->hash[0] ? v->hash : "unknown");
#else
    snprintf(buf, cap, "none");
#endif
    return buf;
}

#if defined(HAVE_ONEDNN)
/* oneDNN's names (dnnl_types.h) of the values that exist from 2.6 on; the
 * Xeon Phi ones (avx512_mic*) are left out: deprecated in 2.x, gone in 3.0 */
static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return NULL;
    }
}

/* The ISA values are bit sets, each holding those below it on its line
 * (avx512_core_amx = avx512_core_bf16 | the AMX bits): bf16 runs natively
 * on every ISA that holds avx512_core_bf16's bits. */
static int isa_runs_bf16(dnnl_cpu_isa_t isa)
{
    const unsigned bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    return ((unsigned)isa & bf16) == bf16;
}
#endif

const char *hcnn_onednn_isa(char *buf, size_t cap)
{
#if defined(HAVE_ONEDNN)
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const char *name = isa_name(isa);
    if (name)
        snprintf(buf, cap, "%s", name);
    else
        snprintf(buf, cap, "isa 0x%x", (unsigned)isa);
#else
    snprintf(buf, cap, "none");
#endif
    return buf;
}

const char *hcnn_onednn_describe(char *buf, size_t cap)
{
#if defined(HAVE_ONEDNN)
    char version[128], isa[32];
    hcnn_onednn_version(version, sizeof version);
    /* "oneDNN 2.6.3 (...)": the caller's line names the library already */
    const char *number = strncmp(version, "oneDNN ", 7) ? version : version + 7;
    snprintf(buf, cap, "%s, dispatches %s", number, hcnn_onednn_isa(isa, sizeof isa));
#else
    snprintf(buf, cap, "none (./configure --with-onednn builds precision: bf16 on the CPU with "
                       "it; Debian package libdnnl-dev)");
#endif
    return buf;
}

#if defined(HAVE_ONEDNN)
/* 1 when the space-separated list of /proc/cpuinfo's flags holds the word
 * flag */
static int has_flag(const char *flags, const char *flag)
{
    const size_t n = strlen(flag);
    for (const char *p = strstr(flags, flag); p; p = strstr(p + 1, flag))
        if ((p == flags || p[-1] == ' ' || p[-1] == '\t') &&
            (p[n] == '\0' || p[n] == ' ' || p[n] == '\n'))
            return 1;
    return 0;
}

/* The first CPU of /proc/cpuinfo: "the CPU (<its model name>)", or "this
 * CPU" when it has none, and whether its flags list avx512_bf16 and
 * amx_bf16 (0 when they cannot be read). */
static void cpu_bf16_flags(char *model, size_t cap, int *avx512_bf16, int *amx_bf16)
{
    snprintf(model, cap, "this CPU");
    *avx512_bf16 = *amx_bf16 = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char *line = NULL;
    size_t len = 0;
    /* getline: a flags line runs past 1500 characters on recent CPUs; when
     * its allocation fails, the loop ends and the flags count as absent */
    while (getline(&line, &len, f) > 0 && line[0] != '\n') {
        char *value = strchr(line, ':');
        if (!value)
            continue;
        value += 1 + (value[1] == ' ');
        value[strcspn(value, "\n")] = '\0';
        if (!strncmp(line, "model name", 10) && value[0])
            snprintf(model, cap, "the CPU (%s)", value);
        else if (!strncmp(line, "flags", 5)) {
            *avx512_bf16 = has_flag(value, "avx512_bf16");
            *amx_bf16 = has_flag(value, "amx_bf16");
        }
    }
    free(line);
    fclose(f);
}

/* The variable that capped oneDNN's ISA, if any: oneDNN 2.x reads
 * ONEDNN_MAX_CPU_ISA, and DNNL_MAX_CPU_ISA when that is unset */
static const char *isa_cap_variable(const char **value)
{
    static const char *const names[] = {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && v[0]) {
            *value = v;
            return names[i];
        }
    }
    return NULL;
}
#endif

int hcnn_cpu_bf16_supported(char *why, size_t cap)
{
    if (why && cap)
        why[0] = '\0';
#if !defined(HAVE_ONEDNN)
    if (why && cap)
        snprintf(why, cap, REBUILD_MESSAGE);
    return 0;
#else
    const dnnl_version_t *v = dnnl_version();
    if (v->cpu_runtime != DNNL_RUNTIME_OMP) {
        /* configure checked the headers' runtime; this is the library loaded */
        if (why && cap)
            snprintf(why, cap, "the oneDNN library loaded (%d.%d.%d) does not have the OpenMP CPU "
                               "runtime hcnn was built for (its threads would oversubscribe "
                               "hcnn's): install libdnnl-dev and rerun ./configure",
                     v->major, v->minor, v->patch);
        return 0;
    }
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    if (isa_runs_bf16(isa))
        return 1;
    if (!why || !cap)
        return 0;
    char model[192], isa_buf[32];
    int avx512_bf16, amx_bf16;
    cpu_bf16_flags(model, sizeof model, &avx512_bf16, &amx_bf16);
    const char *dispatched = hcnn_onednn_isa(isa_buf, sizeof isa_buf);
    const char *cap_value = NULL, *cap_var = isa_cap_variable(&cap_value);
    /* what the CPU lacks, by /proc/cpuinfo's names */
    const char *lacks = !avx512_bf16 && !amx_bf16 ? "avx512_bf16 or amx_bf16"
                        : !avx512_bf16            ? "avx512_bf16"
                                                  : NULL;
    static const char no_emulation[] = "hcnn does not emulate bf16 (several times slower than fp32)";
    if (cap_var && lacks)
        snprintf(why, cap, "%s=%s caps oneDNN at %s, and %s has no %s instructions either: %s; "
                           "set precision: fp32",
                 cap_var, cap_value, dispatched, model, lacks, no_emulation);
    else if (cap_var)
        snprintf(why, cap, "%s=%s caps oneDNN at %s, below the avx512_bf16%s instructions of %s: "
                           "%s; unset %s, or set precision: fp32",
                 cap_var, cap_value, dispatched, amx_bf16 ? " and amx_bf16" : "", model,
                 no_emulation, cap_var);
    else if (lacks)
        snprintf(why, cap, "%s has no %s instructions (oneDNN dispatches %s): %s; set precision: "
                           "fp32",
                 model, lacks, dispatched, no_emulation);
    else /* the flags are there, yet oneDNN does not use them (an older oneDNN, the OS) */
        snprintf(why, cap, "oneDNN dispatches %s on %s, not the avx512_bf16 instructions its "
                           "/proc/cpuinfo lists: %s; set precision: fp32",
                 dispatched, model, no_emulation);
    return 0;
#endif
}
