/* Data-loader benchmark: samples/s of batch assembly (hcnn_batch_assemble:
 * decode uint8, normalise, augment) in random sample order.
 *
 *   bench/bench_loader [--batch N] [--repeats N] [--threads 1,2] [--mnist-dir DIR]
 *
 * Cases: an MNIST-shaped set (1x28x28, no augmentation: the real IDX files
 * from --mnist-dir, default data/mnist, when present, else 60000 synthetic
 * samples) and a CIFAR-shaped one (50000 synthetic 3x32x32 samples, random
 * crop from 4-pixel zero padding + horizontal flip), each at every thread
 * count.  A repeat assembles whole epochs (a fresh permutation each) for at
 * least 0.3 s; the rate is the median of the repeats.  Prints a table, then
 * one line per case:
 *   loader dataset=mnist threads=1 samples_per_s=1600000 per_thread=1600000
 * and whether the MNIST target (>= 1,000,000 samples/s per thread) is met. */
#define _POSIX_C_SOURCE 200809L /* strtok_r, stat */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hcnn/common.h"
#include "hcnn/data.h"

#define MAX_THREADS 16
#define MAX_REPEATS 101
#define MIN_REPEAT_S 0.3
#define MNIST_TARGET_PER_THREAD 1e6

typedef struct bench_case {
    const char *name;
    const hcnn_dataset *ds;
    int augment;
    int threads;
    double rate; /* samples/s, median of the repeats */
} bench_case;

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* "DIR/NAME" or "DIR/NAME.gz", whichever exists; 0 if neither. */
static int find_idx(char *out, size_t size, const char *dir, const char *name)
{
    if (snprintf(out, size, "%s/%s", dir, name) >= (int)size)
        return 0;
    if (file_exists(out))
        return 1;
    if (snprintf(out, size, "%s/%s.gz", dir, name) >= (int)size)
        return 0;
    return file_exists(out);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Assemble every batch of epoch `epoch` (permutation drawn for it). */
static void one_epoch(const bench_case *bc, uint32_t *perm, int batch, int epoch, float *x, int32_t *y)
{
    const hcnn_dataset *ds = bc->ds;
    hcnn_epoch_permutation(perm, ds->n, 42, epoch, 1);
    for (int start = 0; start < ds->n; start += batch) {
        int nb = ds->n - start < batch ? ds->n - start : batch;
        hcnn_batch_assemble(ds, perm + start, nb, bc->augment, 42, epoch, x, y, bc->threads);
    }
}

static int run_case(bench_case *bc, int batch, int repeats)
{
    const hcnn_dataset *ds = bc->ds;
    const size_t chw = (size_t)ds->c * ds->h * ds->w;
    uint32_t *perm = hcnn_alloc((size_t)ds->n * sizeof *perm, "permutation");
    float *x = hcnn_alloc((size_t)batch * chw * sizeof *x, "batch");
    int32_t *y = hcnn_alloc((size_t)batch * sizeof *y, "labels");
    if (!perm || !x || !y) {
        hcnn_free(perm);
        hcnn_free(x);
        hcnn_free(y);
        return HCNN_ENOMEM;
    }
    /* warm-up epoch (first touch, thread start-up) sizes a repeat */
    int epoch = 0;
    double t0 = hcnn_now();
    one_epoch(bc, perm, batch, epoch++, x, y);
    double t1 = hcnn_now() - t0;
    int epochs = t1 > 0 ? (int)(MIN_REPEAT_S / t1) + 1 : 1;

    double rate[MAX_REPEATS];
    double check = 0.0;
    for (int r = 0; r < repeats; r++) {
        t0 = hcnn_now();
        for (int e = 0; e < epochs; e++)
            one_epoch(bc, perm, batch, epoch++, x, y);
        double el = hcnn_now() - t0;
        rate[r] = el > 0 ? (double)ds->n * epochs / el : 0.0;
        check += x[0] + (double)y[0];
    }
    qsort(rate, (size_t)repeats, sizeof rate[0], cmp_double);
    bc->rate = rate[repeats / 2];
    if (check != check) /* keeps the output alive; never true */
        fprintf(stderr, "bench_loader: NaN in the assembled batches\n");
    hcnn_free(perm);
    hcnn_free(x);
    hcnn_free(y);
    return HCNN_OK;
}

static int parse_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "bench_loader: %s '%s': expected an integer in %d..%d\n", opt, s, lo, hi);
        return 0;
    }
    *out = (int)v;
    return 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_loader [--batch N] [--repeats N] [--threads 1,2] [--mnist-dir DIR]\n"
               "Samples/s of hcnn_batch_assemble for an MNIST-shaped (1x28x28, no augmentation) and a\n"
               "CIFAR-shaped (3x32x32, crop + flip) data set in random order; median of the repeats.\n"
               "Defaults: batch 256, 7 repeats, threads 1,2, MNIST from data/mnist if present.\n");
}

int main(int argc, char **argv)
{
    int batch = 256, repeats = 7, nthr = 2;
    int thr[MAX_THREADS] = {1, 2};
    const char *mnist_dir = "data/mnist";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench_loader: unknown option or missing value: '%s'\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--batch")) {
            if (!parse_int(a, v, 1, 1 << 20, &batch))
                return 2;
        } else if (!strcmp(a, "--repeats")) {
            if (!parse_int(a, v, 1, MAX_REPEATS, &repeats))
                return 2;
        } else if (!strcmp(a, "--mnist-dir")) {
            mnist_dir = v;
        } else if (!strcmp(a, "--threads")) {
            char buf[256];
            if (snprintf(buf, sizeof buf, "%s", v) >= (int)sizeof buf) {
                fprintf(stderr, "bench_loader: --threads '%s' is too long\n", v);
                return 2;
            }
            nthr = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (nthr == MAX_THREADS) {
                    fprintf(stderr, "bench_loader: --threads: at most %d counts\n", MAX_THREADS);
                    return 2;
                }
                if (!parse_int(a, t, 1, 1024, &thr[nthr++]))
                    return 2;
            }
            if (nthr == 0) {
                fprintf(stderr, "bench_loader: --threads '%s': expected a list like 1,2\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "bench_loader: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }

    /* the data sets, in memory as uint8 */
    hcnn_dataset mnist, cifar;
    char img[4096], lab[4096];
    const char *mnist_source = "synthetic";
    if (find_idx(img, sizeof img, mnist_dir, "train-images-idx3-ubyte") &&
        find_idx(lab, sizeof lab, mnist_dir, "train-labels-idx1-ubyte")) {
        if (hcnn_idx_load(&mnist, img, lab, 10) != HCNN_OK)
            return 1;
        mnist_source = img;
    } else if (hcnn_synthetic_make(&mnist, 60000, 1, 28, 28, 10, 42) != HCNN_OK) {
        return 1;
    }
    for (int ch = 0; ch < 3; ch++) { /* MNIST's normalisation (speed does not depend on it) */
        mnist.mean[ch] = 0.1307f;
        mnist.std[ch] = 0.3081f;
    }
    if (hcnn_synthetic_make(&cifar, 50000, 3, 32, 32, 10, 42) != HCNN_OK) {
        hcnn_dataset_free(&mnist);
        return 1;
    }

    printf("bench_loader: batch %d, median of %d repeats (each >= %.1f s of whole epochs), random order\n",
           batch, repeats, MIN_REPEAT_S);
    printf("  mnist: %d samples 1x28x28 from %s, no augmentation\n", mnist.n, mnist_source);
    printf("  cifar: %d samples 3x32x32 synthetic, random crop (4-pixel padding) + flip\n", cifar.n);

    const int ncase = 2 * nthr;
    bench_case cases[2 * MAX_THREADS];
    for (int d = 0; d < 2; d++)
        for (int t = 0; t < nthr; t++)
            cases[d * nthr + t] = (bench_case){.name = d ? "cifar" : "mnist",
                                               .ds = d ? &cifar : &mnist,
                                               .augment = d,
                                               .threads = thr[t]};
    int rc = 0;
    for (int i = 0; i < ncase && !rc; i++)
        rc = run_case(&cases[i], batch, repeats);
    if (!rc) {
        printf("\n%-8s %7s %8s %15s %15s %10s %12s\n", "dataset", "augment", "threads", "samples/s",
               "per thread", "ns/sample", "out GB/s");
        for (int i = 0; i < ncase; i++) {
            const bench_case *c = &cases[i];
            double chw = (double)c->ds->c * c->ds->h * c->ds->w;
            printf("%-8s %7s %8d %15.0f %15.0f %10.1f %12.2f\n", c->name, c->augment ? "yes" : "no",
                   c->threads, c->rate, c->rate / c->threads, c->rate > 0 ? 1e9 / c->rate : 0.0,
                   c->rate * chw * sizeof(float) / 1e9);
        }
        printf("\n");
        for (int i = 0; i < ncase; i++)
            printf("loader dataset=%s threads=%d samples_per_s=%.0f per_thread=%.0f\n", cases[i].name,
                   cases[i].threads, cases[i].rate, cases[i].rate / cases[i].threads);
        for (int i = 0; i < nthr; i++) {
            const bench_case *c = &cases[i];
            printf("target mnist threads=%d per_thread>=%.0f: %s\n", c->threads, MNIST_TARGET_PER_THREAD,
                   c->rate / c->threads >= MNIST_TARGET_PER_THREAD ? "met" : "NOT met");
        }
    }
    hcnn_dataset_free(&mnist);
    hcnn_dataset_free(&cifar);
    return rc ? 1 : 0;
}
