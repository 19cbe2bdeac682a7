/* The linked BLAS (configure --with-blas): its name and build, the kernels
 * it runs, and one thread per call.  hcnn calls the BLAS from its own
 * threads on pieces fixed by shape (src/cpu/gemm.c), so every library is
 * held to one thread here, whatever its threading build:
 *   OpenBLAS  openblas_set_num_threads(1) (the pthread build obeys it; the
 *             OpenMP build follows omp_get_max_threads() at every call, which
 *             gemm.c sets to 1 around each call outside a parallel region)
 *   BLIS      bli_thread_set_num_threads(1) (its default would follow
 *             BLIS_NUM_THREADS or OMP_NUM_THREADS)
 *   generic   whichever of mkl_set_num_threads, bli_thread_set_num_threads,
 *             openblas_set_num_threads the library has, and gemm.c's OpenMP
 *             thread count of 1 around each call (MKL's GNU OpenMP layer) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "../cpu/cblas_decl.h"
#include "internal.h"

#if defined(HCNN_BLAS_OPENBLAS) || defined(HAVE_OPENBLAS_SET_NUM_THREADS)
void openblas_set_num_threads(int n);
#endif
#if defined(HCNN_BLAS_OPENBLAS)
char *openblas_get_corename(void);
char *openblas_get_config(void);
#endif
#if defined(HCNN_BLAS_BLIS) || defined(HAVE_BLI_THREAD_SET_NUM_THREADS)
/* BLIS's own API (blis.h is not included: see cblas_decl.h); dim_t is 64
 * bits in its default configuration, arch_t an enum */
void bli_thread_set_num_threads(int64_t n);
#endif
#if defined(HCNN_BLAS_BLIS)
const char *bli_info_get_version_str(void);
int bli_arch_query_id(void);
const char *bli_arch_string(int id);
#endif
#if defined(HAVE_MKL_SET_NUM_THREADS)
void mkl_set_num_threads(int n);
#endif

void hcnn_blas_single_threaded(void)
{
    /* OpenBLAS's OpenMP build passes its count on to omp_set_num_threads:
     * the caller's OpenMP thread count stays as it was */
    const int omp_threads = omp_get_max_threads();
#if defined(HCNN_BLAS_OPENBLAS) || defined(HAVE_OPENBLAS_SET_NUM_THREADS)
    openblas_set_num_threads(1);
#endif
#if defined(HCNN_BLAS_BLIS) || defined(HAVE_BLI_THREAD_SET_NUM_THREADS)
    bli_thread_set_num_threads(1);
#endif
#if defined(HAVE_MKL_SET_NUM_THREADS)
    mkl_set_num_threads(1);
#endif
    omp_set_num_threads(omp_threads);
}

const char *blas_library_name(char *buf, int cap)
{
#if defined(HCNN_BLAS_OPENBLAS)
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": its first two words */
    const char *cfg = openblas_get_config();
    int len = 0, words = 0;
    while (cfg[len] && !(cfg[len] == ' ' && ++words == 2))
        len++;
    snprintf(buf, (size_t)cap, "%.*s", len, cfg);
#elif defined(HCNN_BLAS_BLIS)
    snprintf(buf, (size_t)cap, "BLIS %s", bli_info_get_version_str());
#else
    snprintf(buf, (size_t)cap, "CBLAS (%s)", HCNN_BLAS_LIBS);
#endif
    return buf;
}

const char *blas_loaded_kernels(void)
{
#if defined(HCNN_BLAS_OPENBLAS)
    return openblas_get_corename();
#elif defined(HCNN_BLAS_BLIS)
    return bli_arch_string(bli_arch_query_id());
#else
    return "";
#endif
}

int blas_kernels_selectable(void)
{
#if defined(HCNN_BLAS_OPENBLAS)
    return 1;
#else
    return 0;
#endif
}

const char *blas_library_build(char *buf, int cap)
{
    Dl_info info;
    const char *file = dladdr((void *)cblas_sgemm, &info) && info.dli_fname ? info.dli_fname : "?";
    char name[128];
    blas_library_name(name, sizeof name);
#if defined(HCNN_BLAS_OPENBLAS)
    /* its configuration string names the core loaded now: left out */
    const char *cfg = openblas_get_config(), *core = openblas_get_corename();
    char rest[256] = "";
    for (const char *p = cfg; *p;) {
        const char *e = strchr(p, ' ');
        const int len = e ? (int)(e - p) : (int)strlen(p);
        if (!(len == (int)strlen(core) && !strncmp(p, core, (size_t)len)))
            snprintf(rest + strlen(rest), sizeof rest - strlen(rest), "%s%.*s", rest[0] ? " " : "",
                     len, p);
        p += len + (e ? 1 : 0);
    }
    snprintf(buf, (size_t)cap, "%s [%s]", rest, file);
#else
    snprintf(buf, (size_t)cap, "%s [%s]", name, file);
#endif
    return buf;
}
