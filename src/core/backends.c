/* The backends a build has, made by name (include/hcnn/backend.h). */
#include <string.h>

#include "config.h"
#include "hcnn/backend.h"
#include "hcnn/common.h"

#if HCNN_HAVE_CUDA
int hcnn_backend_cuda_create(int device, hcnn_backend **be);
#endif

const char *hcnn_backend_names(void)
{
#if HCNN_HAVE_CUDA
    return "cpu, cpu-devmem, cuda";
#else
    return "cpu, cpu-devmem";
#endif
}

int hcnn_backend_create(const char *name, int device, hcnn_backend **be)
{
    *be = NULL;
    (void)device;
    if (!name || !*name || !strcmp(name, "cpu"))
        return hcnn_backend_cpu_create(be);
    if (!strcmp(name, "cpu-devmem"))
        return hcnn_backend_cpu_devmem_create(be);
    if (!strcmp(name, "cuda")) {
#if HCNN_HAVE_CUDA
        return hcnn_backend_cuda_create(device, be);
#else
        return hcnn_error("device: cuda: this hcnn was built without CUDA; rebuild it with "
                          "./configure --with-cuda (docs/gpu-nodes.md)");
#endif
    }
    return hcnn_error("backend '%s': unknown (this build has %s)", name, hcnn_backend_names());
}

void hcnn_backend_destroy(hcnn_backend *be)
{
    if (be && be->destroy)
        be->destroy(be);
}
