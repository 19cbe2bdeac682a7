/* The 1-D transforms of Winograd's F(m x m, 3x3) (Lavin & Gray), m = 2 or
 * 4, each a small constant matrix T applied along one axis of n-wide rows:
 *   out[k][x] = sum_i T[k][i] in[i][x]   for x < n
 * (a = m + 2 points per tile side).  Written out so that the zeros cost
 * nothing; the rows are channels, contiguous, so each loop vectorises. */
#ifndef HCNN_CPU_WINOGRAD_ROWS_H
#define HCNN_CPU_WINOGRAD_ROWS_H

#include "cpu.h"

#define ROWS_DECL const float *const *restrict in, float *const *restrict out, int n

void hcnn_wino_bt_rows(int m, ROWS_DECL); /* B^T: input tile, a -> a */
void hcnn_wino_b_rows(int m, ROWS_DECL);  /* B: its adjoint, a -> a */
void hcnn_wino_at_rows(int m, ROWS_DECL); /* A^T: output tile, a -> m */
void hcnn_wino_a_rows(int m, ROWS_DECL);  /* A: its adjoint, m -> a */
void hcnn_wino_g_rows(int m, ROWS_DECL);  /* G: filter, 3 -> a */
void hcnn_wino_gt_rows(int m, ROWS_DECL); /* G^T: its adjoint, a -> 3 */

#endif
