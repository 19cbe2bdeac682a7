/* The CPU backend's GEMM reads only its operands: every operand here ends
 * at the last byte before a page that cannot be read (a guard page), so a
 * read of even one float past the end faults instead of passing unseen.
 * BLIS before 1.0 fails this (flame/blis#821: its small-matrix kernels read
 * one row past A) unless hcnn turns that path off (src/blas/library.c).
 * The shapes cover BLIS's small-matrix region (one dimension small, k not
 * a multiple of 8) and the shape that crashed a pipeline rank (m 16, n 144,
 * k 396, B transposed); each result is held to a double-precision
 * reference. */
#define _DEFAULT_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "hcnn/backend.h"

/* n floats ending at a guard page; *map and *map_bytes for munmap */
static float *guarded(size_t n, void **map, size_t *map_bytes)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t bytes = (n * sizeof(float) + page - 1) / page * page;
    char *p = mmap(NULL, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(mprotect(p + bytes, page, PROT_NONE), 0);
    *map = p, *map_bytes = bytes + page;
    return (float *)(p + bytes) - n;
}

/* C = op(A) op(B), row-major, packed leading dimensions; op(A) m x k,
 * op(B) k x n */
static void check_shape(const hcnn_backend *be, int ta, int tb, int m, int n, int k)
{
    void *ma, *mb, *mc;
    size_t la, lb, lc;
    float *a = guarded((size_t)m * k, &ma, &la), *b = guarded((size_t)k * n, &mb, &lb),
          *c = guarded((size_t)m * n, &mc, &lc);
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    for (size_t i = 0; i < (size_t)k * n; i++)
        b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
    const int lda = ta ? m : k, ldb = tb ? k : n;
    be->gemm(be, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
    double worst = 0.0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double ref = 0.0, mag = 0.0;
            for (int p = 0; p < k; p++) {
                const double x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                const double y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                ref += x * y;
                mag += fabs(x * y);
            }
            const double err = fabs(c[(size_t)i * n + j] - ref) / (mag + 1e-30);
            worst = err > worst ? err : worst;
        }
    if (worst > 1e-5)
        fail_msg("gemm ta=%d tb=%d m=%d n=%d k=%d: relative error %.3g (expected <= 1e-5)", ta, tb,
                 m, n, k, worst);
    munmap(ma, la), munmap(mb, lb), munmap(mc, lc);
}

static void the_shape_that_crashed(void **state)
{
    (void)state;
    check_shape(hcnn_backend_cpu(), 0, 1, 16, 144, 396);
}

static void small_matrix_region(void **state)
{
    (void)state;
    const hcnn_backend *be = hcnn_backend_cpu();
    static const int ms[] = {1, 5, 16, 33}, ns[] = {1, 7, 144}, ks[] = {3, 12, 397};
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
            for (size_t j = 0; j < sizeof ns / sizeof *ns; j++)
                for (size_t p = 0; p < sizeof ks / sizeof *ks; p++)
                    check_shape(be, t & 1, t >> 1, ms[i], ns[j], ks[p]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_shape_that_crashed),
        cmocka_unit_test(small_matrix_region),
    };
    return cmocka_run_group_tests_name("blas_bounds", tests, NULL, NULL);
}
