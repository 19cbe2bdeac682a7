/* OpenBLAS kernel selection.
 *
 * OpenBLAS built with DYNAMIC_ARCH picks its kernels from the CPU model at
 * load time.  Version 0.3.21 (Debian 12) does not know recent CPUs and falls
 * back to its oldest x86-64 kernels ("Prescott", SSE3): on an AVX-512 Xeon
 * that is 3x slower for our GEMMs.  OPENBLAS_CORETYPE overrides the choice
 * but is read only when the library loads, so when the detected core is
 * such a fallback and the CPU has AVX2 or AVX-512, hcnn re-executes itself
 * once with OPENBLAS_CORETYPE set (Haswell or SkylakeX).  A user who sets
 * OPENBLAS_CORETYPE (even to an empty string) keeps full control. */
#ifndef HCNN_BLAS_H
#define HCNN_BLAS_H

/* Call first thing in main, before any thread or MPI start-up.  Returns
 * only if no re-execution was needed or possible. */
void hcnn_blas_select_kernels(char **argv);

/* One line describing the kernel in use (and why), for the run header. */
const char *hcnn_blas_describe(char *buf, int cap);

#endif
