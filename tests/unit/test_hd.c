/* Unit test of src/core/hd.h, the element and index math shared by the CPU
 * backend and the CUDA kernels: includes that private header of src/.
 * (The layers and backends using it are tested through include/hcnn/ in
 * tests/unit/test_layers.c and tests/conformance/.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <cmocka.h>

#include "../../src/core/hd.h" /* private: the divider and batch-norm statistics below */

/* hcnn_hd_div (the CUDA index kernels' division by a launch constant)
 * against C's division: every divisor up to 4096 and the powers of two and
 * their neighbours up to 2^32 - 1, each on the numerators around its
 * multiples, the largest ones and pseudo-random ones */
static void test_divider(void **state)
{
    (void)state;
    uint32_t ds[4096 + 3 * 32];
    int nd = 0;
    for (uint32_t d = 1; d <= 4096; d++)
        ds[nd++] = d;
    for (int b = 12; b < 32; b++) {
        ds[nd++] = (1u << b) - 1, ds[nd++] = 1u << b, ds[nd++] = (1u << b) + 1;
    }
    ds[nd++] = 0xffffffffu;
    uint64_t rng = 12345;
    long wrong = 0;
    for (int j = 0; j < nd; j++) {
        const uint32_t d = ds[j];
        const hcnn_hd_divider v = hcnn_hd_divider_of(d);
        uint32_t ns[64];
        int nn = 0;
        for (uint32_t q = 1; q <= 4; q++) { /* around the first multiples */
            const uint64_t k = (uint64_t)q * d;
            if (k <= 0xffffffffu)
                ns[nn++] = (uint32_t)k, ns[nn++] = (uint32_t)(k - 1);
            if (k + 1 <= 0xffffffffu)
                ns[nn++] = (uint32_t)(k + 1);
        }
        const uint64_t top = 0xffffffffu / d * (uint64_t)d; /* the largest multiple */
        ns[nn++] = (uint32_t)top, ns[nn++] = (uint32_t)(top - 1), ns[nn++] = 0xffffffffu;
        ns[nn++] = 0xfffffffeu, ns[nn++] = 0x80000000u, ns[nn++] = 0x7fffffffu, ns[nn++] = 0;
        while (nn < 64)
            ns[nn++] = (uint32_t)(hcnn_hd_splitmix64(&rng) >> (hcnn_hd_splitmix64(&rng) & 31));
        for (int i = 0; i < nn; i++)
            if (hcnn_hd_div(v, ns[i]) != ns[i] / d) {
                if (wrong++ < 5)
                    print_message("divider: %u / %u gave %u, expected %u\n", ns[i], d,
                                  hcnn_hd_div(v, ns[i]), ns[i] / d);
            }
    }
    assert_int_equal(wrong, 0);
}

/* The batch-norm's statistics from a table of pieces (hcnn_hd_bn_table_stats)
 * against the two-pass mean and sum of squared deviations of the values
 * themselves, in long double: 5 images x 3 channels, planes of 37 values
 * cut into bands of 8 (the last band 5), a mean of 100 per channel and a
 * spread of 1 (where a one-pass sum of squares would lose digits); then
 * the table merged in pieces of 2, 2 and 1 images (hcnn_hd_bn_merge)
 * within 1e-12 of the whole, and the finish's inverse std and running
 * statistics against their definitions. */
static void test_bn_table_stats(void **state)
{
    (void)state;
    enum { N = 5, C = 3, NP = 37, PX = 8, BANDS = (NP + PX - 1) / PX };
    float x[N][C][NP], part[N][C][BANDS][2];
    uint64_t rng = 99;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            for (int p = 0; p < NP; p++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                x[i][c][p] = 100.0f * (float)(c + 1) + (float)((double)(rng >> 40) / 16777216.0);
            }
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < BANDS; k++) {
                const int lo = k * PX, hi = k + 1 == BANDS ? NP : lo + PX;
                double s = 0.0, ss = 0.0;
                for (int p = lo; p < hi; p++)
                    s += x[i][c][p];
                const float m = (float)(s / (hi - lo));
                for (int p = lo; p < hi; p++)
                    ss += ((double)x[i][c][p] - m) * ((double)x[i][c][p] - m);
                part[i][c][k][0] = m, part[i][c][k][1] = (float)ss;
            }
    for (int c = 0; c < C; c++) {
        long double s = 0.0L, ss = 0.0L;
        for (int i = 0; i < N; i++)
            for (int p = 0; p < NP; p++)
                s += x[i][c][p];
        const long double mu = s / (N * NP);
        for (int i = 0; i < N; i++)
            for (int p = 0; p < NP; p++)
                ss += (x[i][c][p] - mu) * (x[i][c][p] - mu);
        double mean, m2;
        hcnn_hd_bn_table_stats(&part[0][0][0][0], N, C, c, BANDS, PX, NP, &mean, &m2);
        assert_true(fabs(mean - (double)mu) <= 1e-6 * fabs((double)mu));
        assert_true(fabs(m2 - (double)ss) <= 1e-5 * (double)ss);
        /* in pieces of 2, 2 and 1 images */
        double pm = 0.0, pm2 = 0.0, done = 0.0;
        for (int i0 = 0; i0 < N; i0 += 2) {
            const int nb = N - i0 < 2 ? N - i0 : 2;
            double bm, bm2;
            hcnn_hd_bn_table_stats(&part[i0][0][0][0], nb, C, c, BANDS, PX, NP, &bm, &bm2);
            hcnn_hd_bn_merge(done, &pm, &pm2, (double)nb * NP, bm, bm2);
            done += (double)nb * NP;
        }
        assert_true(fabs(pm - mean) <= 1e-12 * fabs(mean));
        assert_true(fabs(pm2 - m2) <= 1e-12 * m2);
        float rm = 1.0f, rv = 2.0f;
        const double cnt = N * NP, var = m2 / cnt;
        const float is = hcnn_hd_bn_finish(mean, m2, cnt, 1e-5f, 0.25f, &rm, &rv);
        assert_true(fabs(is - 1.0 / sqrt(var + 1e-5)) <= 1e-6 / sqrt(var + 1e-5));
        assert_true(fabs(rm - (0.75 * 1.0 + 0.25 * mean)) <= 1e-6 * fabs(mean));
        assert_true(fabs(rv - (0.75 * 2.0 + 0.25 * m2 / (cnt - 1.0))) <= 1e-6 * 2.0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_divider),
        cmocka_unit_test(test_bn_table_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
