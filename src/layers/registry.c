/* The table of block types (include/hcnn/layer.h): one entry per line of
 * HCNN_BLOCK_TYPES, and the set-up of a layer of any type through it.  It
 * sits above every type; what the types share is layer.c, below them. */
#include "hcnn/layer.h"

#define HCNN_LAYER_ENTRY_(e, type, prefix) [HCNN_BLOCK_##e] = &hcnn_layer_##type,
static const hcnn_layer_ops *const layer_types[HCNN_BLOCK_KIND_COUNT] = {
    HCNN_BLOCK_TYPES(HCNN_LAYER_ENTRY_)};

const hcnn_layer_ops *hcnn_layer_ops_of(hcnn_block_kind kind)
{
    return (int)kind >= 0 && kind < HCNN_BLOCK_KIND_COUNT ? layer_types[kind] : NULL;
}

int hcnn_layer_setup(hcnn_layer *l, const hcnn_block_spec *spec, int in_c, int in_h, int in_w,
                     const char *cfg_path, int index)
{
    return hcnn_layer_setup_as(l, hcnn_layer_ops_of(spec->kind), spec, in_c, in_h, in_w, cfg_path,
                               index);
}
