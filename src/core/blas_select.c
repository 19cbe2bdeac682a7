/* OpenBLAS kernel selection: see include/hcnn/blas.h. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hcnn/blas.h"

/* Kernels that OpenBLAS falls back to for a CPU it does not recognise. */
static int is_fallback_core(const char *core)
{
    static const char *const old[] = {"Prescott", "Katmai",  "Coppermine", "Northwood",
                                      "Core2",    "Penryn",  "Dunnington", "Nehalem",
                                      "Atom",     "generic", "Unknown",    "Banias"};
    for (size_t i = 0; i < sizeof old / sizeof old[0]; i++)
        if (!strcmp(core, old[i]))
            return 1;
    return 0;
}

static const char *best_core_for_cpu(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
    return NULL;
}

void hcnn_blas_select_kernels(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE"))
        return; /* the user's choice, or our own re-execution */
    const char *core = openblas_get_corename();
    const char *want = best_core_for_cpu();
    if (!core || !want || !is_fallback_core(core))
        return;
    /* remember what OpenBLAS detected, for the run header */
    if (setenv("HCNN_BLAS_DETECTED", core, 1) != 0 || setenv("OPENBLAS_CORETYPE", want, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the detected kernels */
    unsetenv("OPENBLAS_CORETYPE");
    fprintf(stderr, "hcnn: warning: OpenBLAS uses its generic %s kernels on this CPU; set "
                    "OPENBLAS_CORETYPE=%s for speed\n", core, want);
}

const char *hcnn_blas_describe(char *buf, int cap)
{
    const char *detected = getenv("HCNN_BLAS_DETECTED");
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (detected && forced)
        snprintf(buf, (size_t)cap, "OpenBLAS %s kernels (detected %s, a generic fallback; "
                                   "OPENBLAS_CORETYPE overrides)",
                 openblas_get_corename(), detected);
    else if (forced)
        snprintf(buf, (size_t)cap, "OpenBLAS %s kernels (OPENBLAS_CORETYPE=%s)",
                 openblas_get_corename(), forced);
    else
        snprintf(buf, (size_t)cap, "OpenBLAS %s kernels", openblas_get_corename());
    return buf;
}
