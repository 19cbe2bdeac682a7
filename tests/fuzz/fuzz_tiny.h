/* The small model of tests/fuzz/tiny.yaml (FUZZ_TINY_YAML, set by
 * build.sh), for the checkpoint and import targets. */
#ifndef HCNN_FUZZ_TINY_H
#define HCNN_FUZZ_TINY_H

#include "hcnn/backend.h"
#include "hcnn/common.h"
#include "hcnn/config.h"
#include "hcnn/net.h"

#ifndef FUZZ_TINY_YAML
#error "build with -DFUZZ_TINY_YAML=\"<srcdir>/tests/fuzz/tiny.yaml\" (tests/fuzz/build.sh)"
#endif

static void fuzz_tiny_net(hcnn_config *cfg, hcnn_net *net)
{
    const char *path = getenv("HCNN_FUZZ_TINY_YAML");
    if (!path || !*path)
        path = FUZZ_TINY_YAML;
    if (hcnn_config_load(cfg, path, NULL, 0) != HCNN_OK ||
        hcnn_net_create(net, &cfg->model, hcnn_backend_cpu(), cfg->path) != HCNN_OK) {
        fprintf(stderr, "hcnn fuzz: cannot build the model of %s\n", path);
        abort();
    }
}

#endif
