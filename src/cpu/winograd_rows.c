/* The 1-D transforms of Winograd's F(m x m, 3x3), m = 2 or 4 (winograd.c
 * holds the convolution that applies them, one axis at a time). */
#include "winograd_rows.h"

/* B^T: a inputs -> a outputs */
HCNN_MULTIVERSION
void hcnn_wino_bt_rows(int m, ROWS_DECL)
{
    if (m == 2) {
        const float *d0 = in[0], *d1 = in[1], *d2 = in[2], *d3 = in[3];
        float *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3];
#pragma GCC ivdep
        for (int x = 0; x < n; x++) {
            o0[x] = d0[x] - d2[x];
            o1[x] = d1[x] + d2[x];
            o2[x] = d2[x] - d1[x];
            o3[x] = d1[x] - d3[x];
        }
        return;
    }
    const float *d0 = in[0], *d1 = in[1], *d2 = in[2], *d3 = in[3], *d4 = in[4], *d5 = in[5];
    float *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3], *o4 = out[4], *o5 = out[5];
#pragma GCC ivdep
    for (int x = 0; x < n; x++) {
        const float p = d4[x] - 4.0f * d2[x], q = d3[x] - 4.0f * d1[x];
        const float r = d4[x] - d2[x], s = 2.0f * (d3[x] - d1[x]);
        o0[x] = 4.0f * d0[x] - 5.0f * d2[x] + d4[x];
        o1[x] = p + q;
        o2[x] = p - q;
        o3[x] = r + s;
        o4[x] = r - s;
        o5[x] = 4.0f * d1[x] - 5.0f * d3[x] + d5[x];
    }
}

/* B (the transpose of B^T): a inputs -> a outputs, the input transform's
 * adjoint */
HCNN_MULTIVERSION
void hcnn_wino_b_rows(int m, ROWS_DECL)
{
    if (m == 2) {
        const float *d0 = in[0], *d1 = in[1], *d2 = in[2], *d3 = in[3];
        float *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3];
#pragma GCC ivdep
        for (int x = 0; x < n; x++) {
            o0[x] = d0[x];
            o1[x] = d1[x] - d2[x] + d3[x];
            o2[x] = d1[x] + d2[x] - d0[x];
            o3[x] = -d3[x];
        }
        return;
    }
    const float *d0 = in[0], *d1 = in[1], *d2 = in[2], *d3 = in[3], *d4 = in[4], *d5 = in[5];
    float *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3], *o4 = out[4], *o5 = out[5];
#pragma GCC ivdep
    for (int x = 0; x < n; x++) {
        const float p = d2[x] - d1[x], q = d4[x] - d3[x];
        o0[x] = 4.0f * d0[x];
        o1[x] = 4.0f * (p + d5[x]) + 2.0f * q;
        o2[x] = -5.0f * d0[x] - 4.0f * (d1[x] + d2[x]) - (d3[x] + d4[x]);
        o3[x] = -p - 2.0f * q - 5.0f * d5[x];
        o4[x] = d0[x] + d1[x] + d2[x] + d3[x] + d4[x];
        o5[x] = d5[x];
    }
}

/* A^T: a inputs -> m outputs */
HCNN_MULTIVERSION
void hcnn_wino_at_rows(int m, ROWS_DECL)
{
    if (m == 2) {
        const float *m0 = in[0], *m1 = in[1], *m2 = in[2], *m3 = in[3];
        float *o0 = out[0], *o1 = out[1];
#pragma GCC ivdep
        for (int x = 0; x < n; x++) {
            o0[x] = m0[x] + m1[x] + m2[x];
            o1[x] = m1[x] - m2[x] - m3[x];
        }
        return;
    }
    const float *m0 = in[0], *m1 = in[1], *m2 = in[2], *m3 = in[3], *m4 = in[4], *m5 = in[5];
    float *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3];
#pragma GCC ivdep
    for (int x = 0; x < n; x++) {
        const float sp = m1[x] + m2[x], sm = m1[x] - m2[x];
        const float tp = m3[x] + m4[x], tm = m3[x] - m4[x];
        o0[x] = m0[x] + sp + tp;
        o1[x] = sm + 2.0f * tm;
        o2[x] = sp + 4.0f * tp;
        o3[x] = sm + 8.0f * tm + m5[x];
    }
}

/* A (the transpose of A^T): m inputs -> a outputs */
HCNN_MULTIVERSION
void hcnn_wino_a_rows(int m, ROWS_DECL)
{
    if (m == 2) {
        const float *y0 = in[0], *y1 = in[1];
        float *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3];
#pragma GCC ivdep
        for (int x = 0; x < n; x++) {
            o0[x] = y0[x];
            o1[x] = y0[x] + y1[x];
            o2[x] = y0[x] - y1[x];
            o3[x] = -y1[x];
        }
        return;
    }
    const float *y0 = in[0], *y1 = in[1], *y2 = in[2], *y3 = in[3];
    float *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3], *o4 = out[4], *o5 = out[5];
#pragma GCC ivdep
    for (int x = 0; x < n; x++) {
        const float e = y0[x] + y2[x], f = y1[x] + y3[x];
        const float e4 = y0[x] + 4.0f * y2[x], f8 = 2.0f * y1[x] + 8.0f * y3[x];
        o0[x] = y0[x];
        o1[x] = e + f;
        o2[x] = e - f;
        o3[x] = e4 + f8;
        o4[x] = e4 - f8;
        o5[x] = y3[x];
    }
}

/* G: 3 inputs -> a outputs */
HCNN_MULTIVERSION
void hcnn_wino_g_rows(int m, ROWS_DECL)
{
    const float *g0 = in[0], *g1 = in[1], *g2 = in[2];
    if (m == 2) {
        float *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3];
#pragma GCC ivdep
        for (int x = 0; x < n; x++) {
            const float s = 0.5f * (g0[x] + g2[x]), h = 0.5f * g1[x];
            o0[x] = g0[x];
            o1[x] = s + h;
            o2[x] = s - h;
            o3[x] = g2[x];
        }
        return;
    }
    float *o0 = out[0], *o1 = out[1], *o2 = out[2], *o3 = out[3], *o4 = out[4], *o5 = out[5];
#pragma GCC ivdep
    for (int x = 0; x < n; x++) {
        const float s = -(g0[x] + g2[x]) / 6.0f, h = g1[x] / 6.0f;
        const float t = g0[x] / 24.0f + g2[x] / 6.0f, k = g1[x] / 12.0f;
        o0[x] = 0.25f * g0[x];
        o1[x] = s - h;
        o2[x] = s + h;
        o3[x] = t + k;
        o4[x] = t - k;
        o5[x] = g2[x];
    }
}

/* G^T: a inputs -> 3 outputs */
HCNN_MULTIVERSION
void hcnn_wino_gt_rows(int m, ROWS_DECL)
{
    float *o0 = out[0], *o1 = out[1], *o2 = out[2];
    if (m == 2) {
        const float *u0 = in[0], *u1 = in[1], *u2 = in[2], *u3 = in[3];
#pragma GCC ivdep
        for (int x = 0; x < n; x++) {
            o0[x] = u0[x] + 0.5f * (u1[x] + u2[x]);
            o1[x] = 0.5f * (u1[x] - u2[x]);
            o2[x] = 0.5f * (u1[x] + u2[x]) + u3[x];
        }
        return;
    }
    const float *u0 = in[0], *u1 = in[1], *u2 = in[2], *u3 = in[3], *u4 = in[4], *u5 = in[5];
#pragma GCC ivdep
    for (int x = 0; x < n; x++) {
        const float s = (u1[x] + u2[x]) / 6.0f, d = (u2[x] - u1[x]) / 6.0f;
        const float t = (u3[x] + u4[x]) / 24.0f, e = (u3[x] - u4[x]) / 12.0f;
        o0[x] = 0.25f * u0[x] - s + t;
        o1[x] = d + e;
        o2[x] = -s + 4.0f * t + u5[x];
    }
}
