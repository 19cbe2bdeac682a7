/* Winograd's minimal filtering F(m x m, 3x3) for 3x3 stride-1 convolutions
 * (winograd.c), run with the output tile m (2 or 4) the convolution plan
 * chose (conv_plan.c holds the whole choice: which layers, which m, and
 * whether the weight gradient goes by Winograd too): nothing here decides
 * it, and nothing here calls the plan. */
#ifndef HCNN_CPU_WINOGRAD_H
#define HCNN_CPU_WINOGRAD_H

#include "cpu.h"

/* Whether Winograd can run the layer at all: 3x3, stride 1, padding <= 2. */
int hcnn_wino_applies(const hcnn_conv_desc *l);
/* Workspace floats that cover every call on up to n images with nt threads
 * (the forward's, the input gradient's and the weights' gradient's). */
size_t hcnn_wino_ws(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n, int nt);
/* y = conv(x) + b over n images.  bf (precision bf16, bf16.h): the GEMMs'
 * inputs (the transformed tiles and weights) rounded to bfloat16; NULL:
 * FP32. */
struct hcnn_bf16;
int hcnn_wino_fwd(const hcnn_conv_desc *l, const hcnn_exec *ctx, struct hcnn_bf16 *bf, int m,
                  const float *x, const float *w, const float *b, float *y, int n);
/* dx = (or += when dx_acc) the input gradient of dy. */
int hcnn_wino_bwd_data(const hcnn_conv_desc *l, const hcnn_exec *ctx, struct hcnn_bf16 *bf,
                       int m, const float *w, const float *dy, float *dx, int dx_acc, int n);
/* dw += the weight gradient of x and dy. */
int hcnn_wino_bwd_filter(const hcnn_conv_desc *l, const hcnn_exec *ctx, struct hcnn_bf16 *bf,
                         int m, const float *x, const float *dy, float *dw, int n);
/* Its GEMMs for the profile (thread 0's share of each phase): the
 * forward, the weight gradient when dw_by_wino, the input gradient when
 * need_dx. */
void hcnn_wino_gemms(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n, int nt,
                     int dw_by_wino, int need_dx, hcnn_gemm_list *gl);
/* The pieces each phase of a call on n images offers nt threads (its first
 * chunk): the tiles' transform, the GEMMs and the inverse transform (the
 * input gradient's: its scatter onto dx), forward and input gradient; the
 * weight gradient's transforms (x's and dy's) and GEMMs. */
typedef struct hcnn_wino_phases {
    int images;     /* in the first chunk */
    long weights;   /* the weights' transform, and the weight gradient's inverse */
    long fwd[3], dx[3], dw[2];
    long dx_seams;  /* the scatter's seams, added after it (0: one band, no such phase) */
} hcnn_wino_phases;
void hcnn_wino_pieces(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n, int nt,
                      hcnn_wino_phases *ph);
/* One line for the profile's plan column, with the pieces for the run's
 * thread count. */
void hcnn_wino_describe(const hcnn_conv_desc *l, const hcnn_exec *ctx, int m, int n,
                        int dw_by_wino, char *buf, size_t cap);

#endif
