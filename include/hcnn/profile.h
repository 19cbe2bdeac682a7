/* Per-block profile of training steps, with the raw-GEMM reference.
 *
 * For each convolution and fully connected layer the GEMMs that layer
 * issues (forward; weight gradient; data gradient) are timed as bare
 * cblas_sgemm calls of the same shapes in the same process, so the table
 * shows how close the im2col/col2im path comes to the BLAS itself. */
#ifndef HCNN_PROFILE_H
#define HCNN_PROFILE_H

#include <stdio.h>

#include "hcnn/net.h"

#define HCNN_PROFILE_MAX_REF 64 /* reference samples kept */

typedef struct hcnn_profile {
    int nids;
    double *fwd, *bwd;        /* seconds per layer id (blocks and their layers), over steps */
    long steps;
    double step_s;            /* whole steps */
    double data_s, opt_s, comm_s, bubble_s;
    /* raw-GEMM reference samples taken between timed repeats:
     * ref[k * nids + id], seconds per pass of layer id, for k < nref */
    double *ref;
    int nref;
} hcnn_profile;

/* nids: layer ids including the layers inside blocks (hcnn_net.nids) */
int hcnn_profile_init(hcnn_profile *p, int nids);
void hcnn_profile_reset(hcnn_profile *p);
void hcnn_profile_free(hcnn_profile *p);

/* One timing of every row's raw-GEMM reference (see below), kept as a
 * sample: called between timed repeats (hcnn bench), so that the reference
 * and the steps are measured alternately, in the same state of a shared
 * machine. */
void hcnn_profile_sample_reference(hcnn_profile *p, const hcnn_net *net, const hcnn_ctx *ctx,
                                   int first, int last, int n);

/* Print the table for blocks [first, last) run on n samples per step (per
 * rank or micro-batch), each residual block followed by rows for its
 * layers (named <block>.<layer>; their times are part of the block's),
 * preceded by "# " comment lines and followed by the step shares; returns
 * the GEMM share of the step (reference GEMM time / step time).  The
 * reference of a row is the median of its samples, or without samples the
 * median of 5 timings taken now. */
double hcnn_profile_print(const hcnn_profile *p, const hcnn_net *net, const hcnn_ctx *ctx,
                          int first, int last, int n, int micro_per_step, FILE *out);

/* How many layers of blocks [first, last) on n samples take each of the
 * backend's plans ("winograd_f4 13, per_thread 4, batched 3"; "none"). */
const char *hcnn_profile_plans(const hcnn_net *net, const hcnn_ctx *ctx, int first, int last,
                               int n, char *buf, size_t cap);

#endif
