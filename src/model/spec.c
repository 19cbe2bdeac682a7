/* Names of the block types, from the one list in include/hcnn/model_spec.h. */
#include "hcnn/model_spec.h"

#define HCNN_TYPE_NAME_(e, type, prefix) [HCNN_BLOCK_##e] = #type,
#define HCNN_TYPE_PREFIX_(e, type, prefix) [HCNN_BLOCK_##e] = #prefix,
static const char *const type_names[HCNN_BLOCK_KIND_COUNT] = {HCNN_BLOCK_TYPES(HCNN_TYPE_NAME_)};
static const char *const type_prefixes[HCNN_BLOCK_KIND_COUNT] = {
    HCNN_BLOCK_TYPES(HCNN_TYPE_PREFIX_)};

const char *hcnn_block_kind_name(hcnn_block_kind k)
{
    return (int)k >= 0 && k < HCNN_BLOCK_KIND_COUNT ? type_names[k] : "unknown";
}

const char *hcnn_block_kind_prefix(hcnn_block_kind k)
{
    return (int)k >= 0 && k < HCNN_BLOCK_KIND_COUNT ? type_prefixes[k] : "block";
}
