/* What the CPU kernels ask of the backend instance they run on: its
 * threads and its precision.  Apart from the table (backend.c), which
 * calls down into the kernels: the kernels call these, so they sit below
 * both (scripts/deps.sh: no loop between files). */
#include "bf16.h"
#include "cpu.h"

/* Inside the region every OpenMP loop of this backend runs on the calling
 * thread alone (nested regions are inactive) and the OpenMP OpenBLAS runs
 * single-threaded. */
void hcnn_cpu_parallel(const hcnn_backend *be, void (*fn)(void *arg, int t, int nt), void *arg)
{
    (void)be;
#pragma omp parallel
    fn(arg, omp_get_thread_num(), omp_get_num_threads());
}

int hcnn_cpu_threads(const hcnn_backend *be)
{
    (void)be;
    return omp_in_parallel() ? 1 : omp_get_max_threads();
}

hcnn_precision hcnn_cpu_precision(const hcnn_backend *be)
{
    const hcnn_cpu_state *s = be ? be->state : NULL;
    return s ? s->precision : HCNN_PRECISION_FP32;
}

hcnn_bf16 *hcnn_cpu_bf16_of(const hcnn_backend *be)
{
    const hcnn_cpu_state *s = be ? be->state : NULL;
    return s && s->precision == HCNN_PRECISION_BF16 ? s->bf16 : NULL;
}
