/* The cuDNN plans of the CUDA backend's convolutions, as the two files
 * that share them see them: conv_cudnn.cu makes, finds and describes the
 * plans (descriptors, algorithms, bf16 graphs), conv_cudnn_call.cu runs
 * them and handles a call cuDNN refuses.  Private to src/cuda/, and only
 * where this build links cuDNN (never in the emulation). */
#ifndef HCNN_CUDA_CONV_CUDNN_H
#define HCNN_CUDA_CONV_CUDNN_H

#include "config.h"
#include "cuda.h"

#if HCNN_HAVE_CUDNN && !defined(HCNN_CUDA_EMULATION)
#include <cudnn.h>

#include "conv_graph.h"

/* the most workspace one convolution may take: 512 MiB (what a plan sized
 * with HCNN_CUDNN_ANY_WORKSPACE gets) */
#define CUDNN_WORKSPACE_BYTES ((size_t)512 << 20)
/* the plans (convolution shape x batch x direct or Winograd, and the
 * transposed data gradients' shapes) an instance remembers: ResNet-18's
 * 11 shapes at the training and the last and evaluation batches take
 * about 100 */
#define CUDNN_PLANS 256

/* why an FP32 or TF32 plan does not run a pass (has[pass] 0), for the
 * # plan lines (conv_cudnn.cu, hcnn_cudnn_conv_describe) */
typedef enum {
    CUDNN_RUNS_IT,        /* has[pass] 1 */
    CUDNN_NO_ALGORITHM,   /* no usable entry in cuDNN's ranking (first_usable) */
    CUDNN_NO_SIZE,        /* cuDNN would not give the entry's math type or workspace size */
    CUDNN_OVER_WORKSPACE, /* the entry's workspace (need[pass]) beyond the plan's limit */
} hcnn_cudnn_lack;

struct hcnn_cudnn_conv {
    hcnn_conv_desc d;
    int n;
    hcnn_precision precision;
    hcnn_act_layout layout; /* the instance's (fixed at creation: no key) */
    int winograd;           /* 1: Winograd's algorithms alone (HCNN_WAY_WINOGRAD_CUDNN) */
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    /* a pass's own: its algorithm's math type set on it (TF32: the
     * ranking's entry's, as cuDNN's legacy API asks; FP32: FMA) */
    cudnnConvolutionDescriptor_t conv[HCNN_PASSES];
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    size_t workspace; /* bytes: the largest of the passes it has, krsc_bytes' two copies included */
    /* FP32 and TF32 in NHWC: the bytes (256-byte multiples) of one KRSC
     * copy of the filter, as the plan's filter descriptor says it
     * (conv_cudnn.cu); the caller's workspace starts with two (the filter's,
     * then its gradient's: conv_cudnn_call.cu), cuDNN's own after them.
     * 0: the filter as the caller keeps it, KCRS (NCHW; bf16's graphs,
     * whose rounded copies are KRSC in NHWC anyway) */
    size_t krsc_bytes;
    int none;         /* 1: cuDNN has no plan for it (im2col) */
    size_t short_of;  /* > 0: no algorithm fits this many bytes or fewer (im2col) */
    int has[HCNN_PASSES];                 /* the passes it runs */
    hcnn_cudnn_lack lack[HCNN_PASSES];    /* FP32 and TF32: why not, where has[pass] is 0 */
    size_t need[HCNN_PASSES];             /* bytes the pass's algorithm asked */
    size_t limit;                         /* bytes it was made within, KRSC copies excluded */
    char refusal[HCNN_PASSES][320];       /* a pass cuDNN refused to run: the call and why */
    hcnn_graph_plan graph[HCNN_GRAPHS];   /* bf16: the graphs (the rest unused) */
};

struct hcnn_cudnn {
    cudnnHandle_t handle;
    int nplans;
    int full_said; /* the warning that the table is full, given once */
    hcnn_cudnn_conv plans[CUDNN_PLANS];
};

#endif
#endif
