/* cblas_sgemm: from the library's cblas.h, or declared here for a CBLAS
 * without one (MKL ships mkl_cblas.h) and for BLIS (whose cblas.h pulls in
 * its internals: POSIX barriers, unused static functions): the enum values
 * are the CBLAS standard's, the integers LP64 (configure --with-blas). */
#ifndef HCNN_CBLAS_DECL_H
#define HCNN_CBLAS_DECL_H

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#if defined(HAVE_CBLAS_H) && !defined(HCNN_BLAS_BLIS)
#include <cblas.h>
#else
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc);
#endif

#endif
