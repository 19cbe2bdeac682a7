/* Unit test of src/core/hd.h, the element and index math shared by the CPU
 * backend and the CUDA kernels: includes that private header of src/.
 * (The layers and backends using it are tested through include/hcnn/ in
 * tests/unit/test_layers.c and tests/conformance/.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../src/core/hd.h" /* private: the divider below */

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_divider),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
