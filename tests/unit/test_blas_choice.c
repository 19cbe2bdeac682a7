/* Unit test of src/blas/measure.c: includes the private header
 * src/blas/internal.h (hcnn_blas_choose_measured, its rounds and margin).
 *
 * blas_kernels: auto's rule (src/blas/measure.c, hcnn_blas_choose_measured): a candidate
 * beats another only when faster by more than BLAS_KEEP_MARGIN in every
 * round both ran; the baseline stays unless beaten, else the first
 * unbeaten candidate in the fixed order.  Checked on round times made up to
 * look like a loaded machine's: two kernel types of the same speed, whose
 * rounds swing by up to 40% one way or the other, give the same choice for
 * every swing (the rule the fresh measurements depend on), while a type
 * consistently faster wins even when every round's load differs by 3x. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "../../src/blas/internal.h"
#include "hcnn/common.h"

enum { PRESCOTT, HASWELL, SKYLAKEX, COOPERLAKE, NCAND };

static void table(blas_table *t, double times[][BLAS_ROUNDS], const int *rounds)
{
    static const char *names[NCAND] = {"Prescott", "Haswell", "SkylakeX", "Cooperlake"};
    memset(t, 0, sizeof *t);
    t->n = NCAND;
    t->baseline = PRESCOTT;
    for (int i = 0; i < NCAND; i++) {
        snprintf(t->c[i].name, sizeof t->c[i].name, "%s", names[i]);
        double v[BLAS_ROUNDS];
        memcpy(v, times[i], sizeof v);
        t->c[i].seconds = hcnn_median(v, rounds[i]);
    }
}

/* a loaded round r: every candidate measured in it slowed by load[r] */
static void rounds_of(double times[][BLAS_ROUNDS], int *rounds, const double *speed,
                      const double *load, const double *noise_sx, const double *noise_cl)
{
    for (int i = 0; i < NCAND; i++) {
        rounds[i] = i == SKYLAKEX || i == COOPERLAKE ? BLAS_ROUNDS : BLAS_FIRST_ROUNDS;
        for (int r = 0; r < BLAS_ROUNDS; r++)
            times[i][r] = speed[i] * load[r] *
                          (i == SKYLAKEX ? noise_sx[r] : i == COOPERLAKE ? noise_cl[r] : 1.0);
    }
}

/* SkylakeX and Cooperlake equally fast: whatever the swings (each round's
 * noise on one of them, either way, up to 40%), unless one is ahead in every
 * round, the choice is the first of them in the fixed order */
static void equal_kernels_same_choice(void **state)
{
    (void)state;
    const double speed[NCAND] = {5.0, 2.0, 1.0, 1.0};
    const double load[BLAS_ROUNDS] = {1.0, 3.0, 1.2, 2.5, 1.0, 1.7, 2.0};
    int seen = 0;
    for (unsigned pattern = 0; pattern < (1u << BLAS_ROUNDS); pattern++) {
        double sx[BLAS_ROUNDS], cl[BLAS_ROUNDS];
        for (int r = 0; r < BLAS_ROUNDS; r++) {
            const double swing = 1.0 + 0.05 * (r + 2); /* 10% .. 40% */
            sx[r] = pattern >> r & 1 ? swing : 1.0;
            cl[r] = pattern >> r & 1 ? 1.0 : swing;
        }
        double times[NCAND][BLAS_ROUNDS];
        int rounds[NCAND];
        rounds_of(times, rounds, speed, load, sx, cl);
        blas_table t;
        table(&t, times, rounds);
        const int choice = hcnn_blas_choose_measured(&t, times, rounds);
        if (pattern == (1u << BLAS_ROUNDS) - 1) /* SkylakeX behind in every round */
            assert_int_equal(choice, COOPERLAKE);
        else if (pattern == 0) /* SkylakeX ahead in every round */
            assert_int_equal(choice, SKYLAKEX);
        else {
            if (choice != SKYLAKEX)
                fail_msg("swing pattern %#x: chose %s (medians SkylakeX %.3f, Cooperlake %.3f)",
                         pattern, t.c[choice].name, t.c[SKYLAKEX].seconds,
                         t.c[COOPERLAKE].seconds);
            seen++;
        }
    }
    assert_int_equal(seen, (1 << BLAS_ROUNDS) - 2);
}

/* a type 2x faster in every round wins, even when the load of a round
 * slows everything 3x and the baseline is 5x slower */
static void consistent_lead_wins(void **state)
{
    (void)state;
    const double speed[NCAND] = {5.0, 2.0, 1.0, 1.0 / 2.0};
    const double load[BLAS_ROUNDS] = {3.0, 1.0, 2.2, 1.0, 3.0, 1.1, 2.0};
    const double flat[BLAS_ROUNDS] = {1, 1, 1, 1, 1, 1, 1};
    double times[NCAND][BLAS_ROUNDS];
    int rounds[NCAND];
    rounds_of(times, rounds, speed, load, flat, flat);
    blas_table t;
    table(&t, times, rounds);
    assert_int_equal(hcnn_blas_choose_measured(&t, times, rounds), COOPERLAKE);
}

/* nothing beats the baseline by more than the margin in every round: it
 * stays, although another candidate's median is lower */
static void baseline_stays_unless_beaten(void **state)
{
    (void)state;
    const double speed[NCAND] = {1.0, 1.5, 1.0, 1.0};
    const double load[BLAS_ROUNDS] = {1, 1, 1, 1, 1, 1, 1};
    const double flat[BLAS_ROUNDS] = {1, 1, 1, 1, 1, 1, 1};
    const double ahead[BLAS_ROUNDS] = {0.9, 0.9, 1.0, 0.9, 0.9, 0.9, 0.9}; /* one round level */
    double times[NCAND][BLAS_ROUNDS];
    int rounds[NCAND];
    rounds_of(times, rounds, speed, load, ahead, flat);
    for (int i = 0; i < NCAND; i++)
        rounds[i] = BLAS_ROUNDS;
    blas_table t;
    table(&t, times, rounds);
    assert_true(t.c[SKYLAKEX].seconds < t.c[PRESCOTT].seconds);
    assert_int_equal(hcnn_blas_choose_measured(&t, times, rounds), PRESCOTT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(equal_kernels_same_choice),
        cmocka_unit_test(consistent_lead_wins),
        cmocka_unit_test(baseline_stays_unless_beaten),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
