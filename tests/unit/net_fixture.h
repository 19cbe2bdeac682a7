/* A network of one of the tree's configurations, on a given backend: the
 * fixture tests/unit/test_cpu.c and test_plan_model.c share.  Include after
 * <cmocka.h>, "hcnn/config.h" and "hcnn/net.h". */
#ifndef HCNN_TESTS_NET_FIXTURE_H
#define HCNN_TESTS_NET_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

typedef struct model {
    hcnn_config cfg;
    hcnn_net net;
} model;

/* config: a path relative to the source tree ($HCNN_SRCDIR, else .) */
static model *model_load(const char *config, const hcnn_backend *be)
{
    const char *src = getenv("HCNN_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src && *src ? src : ".", config);
    model *m = calloc(1, sizeof *m);
    assert_non_null(m);
    assert_int_equal(hcnn_config_load(&m->cfg, path, NULL, 0), 0);
    assert_int_equal(hcnn_net_create(&m->net, &m->cfg.model, be, m->cfg.path), 0);
    m->net.chunk_floats = (size_t)(m->cfg.im2col_mb * 1048576.0 / sizeof(float));
    m->net.conv_algo = m->cfg.conv_algo;
    return m;
}

static void model_free(model *m)
{
    hcnn_net_free(&m->net);
    free(m);
}

#endif
