/* Fuzz target: CIFAR-10 binary batches (src/data/cifar.c,
 * hcnn_cifar10_load).
 *
 * Input: one mode byte, then the batch file.  Mode bit 0: the file is given
 * twice (two batches, records concatenated).  A load that succeeds must
 * hold size/3073 records per file, each label < 10. */
#include "fuzz_common.h"

#include "hcnn/common.h"
#include "hcnn/data.h"

static char fuzz_batch[300];
static volatile unsigned fuzz_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const int twice = data[0] & 1;
    data++, size--;
    if (!fuzz_batch[0])
        fuzz_path(fuzz_batch, sizeof fuzz_batch, "data_batch_1.bin");
    fuzz_write(fuzz_batch, data, size);
    const char *files[2] = {fuzz_batch, fuzz_batch};
    hcnn_dataset ds;
    int rc = hcnn_cifar10_load(&ds, files, twice ? 2 : 1);
    if (rc == HCNN_OK) {
        if (size % 3073 != 0 || (size_t)ds.n != (twice ? 2 : 1) * (size / 3073) || ds.c != 3 ||
            ds.h != 32 || ds.w != 32)
            abort();
        unsigned sum = 0;
        for (size_t i = 0; i < (size_t)ds.n * 3072; i++)
            sum += ds.images[i];
        for (int i = 0; i < ds.n; i++)
            if (ds.labels[i] >= 10)
                abort();
        fuzz_sink = sum;
        hcnn_dataset_free(&ds);
    }
    return 0;
}
