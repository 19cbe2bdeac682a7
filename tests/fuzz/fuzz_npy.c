/* Fuzz target: NumPy .npy reading (src/io/npy.c, hcnn_npy_read); a test of
 * that module alone, hence its private header src/io/npy.h.
 *
 * Input: a shape prefix, then the file.  Byte 0 % 5 is the expected ndim,
 * the next ndim bytes each give a dimension (byte % 40 + 1; at most
 * 4096 elements in all), so seeds can
 * match the file's shape and reach the data.  dst is allocated with exactly
 * the expected count (overruns are caught).  A read that succeeds must
 * deliver finite values only: NaN and Inf are refused. */
#include "fuzz_common.h"

#include <math.h>

#include "hcnn/common.h"
#include "../../src/io/npy.h"

static char fuzz_npy_file[300];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int ndim = data[0] % 5, dims[4] = {0};
    data++, size--;
    if (size < (size_t)ndim)
        return 0;
    size_t count = 1;
    for (int d = 0; d < ndim; d++) {
        dims[d] = data[d] % 40 + 1;
        count *= (size_t)dims[d];
    }
    if (count > 4096)
        return 0;
    data += ndim, size -= (size_t)ndim;
    if (!fuzz_npy_file[0])
        fuzz_path(fuzz_npy_file, sizeof fuzz_npy_file, "tensor.npy");
    fuzz_write(fuzz_npy_file, data, size);
    float *dst = malloc(count * sizeof *dst);
    if (!dst)
        abort();
    int rc = hcnn_npy_read(fuzz_npy_file, "fuzz.weight", "the fuzz model", ndim, dims, count, dst);
    if (rc == HCNN_OK)
        for (size_t i = 0; i < count; i++)
            if (!isfinite(dst[i])) {
                fprintf(stderr, "fuzz_npy: element %zu is not finite but was accepted\n", i);
                abort();
            }
    free(dst);
    return 0;
}
