/* The model as a run configuration describes it, and the execution choices
 * compute code reads.  The bottom of the include graph: layers, the network
 * and the backends include this header, never the configuration parser
 * (include/hcnn/config.h), which fills these structs from YAML.
 *
 * Block types are listed once, in HCNN_BLOCK_TYPES: X(ENUM, type, prefix)
 * gives the enum value HCNN_BLOCK_<ENUM>, the config's `type:` name, and the
 * prefix of default block names ("conv1", "res2", ...).  A type's layer
 * operations are hcnn_layer_<type> (src/layers/<type>.c) and its keys and
 * defaults are a row of src/config/schema.c.  New types go at the end: the
 * enum value is part of the model hash that checkpoints carry. */
#ifndef HCNN_MODEL_SPEC_H
#define HCNN_MODEL_SPEC_H

#define HCNN_NAME_MAX 64
#define HCNN_MAX_BLOCKS 256
/* Largest value of any one model dimension (input channels, height, width,
 * a block's out, kernel, stride or pad, classes): far above any real
 * network, small enough that sums such as height + 2 * pad cannot overflow
 * an int.  Products of dimensions are checked where layers are set up. */
#define HCNN_MAX_DIM (1 << 20)

#define HCNN_BLOCK_TYPES(X)                                                                    \
    X(CONV, conv, conv)                                                                        \
    X(BN, bn, bn)                                                                              \
    X(RELU, relu, relu)                                                                        \
    X(MAXPOOL, maxpool, maxpool)                                                               \
    X(AVGPOOL, avgpool, avgpool)                                                               \
    X(GAP, gap, gap) /* global average pool */                                                 \
    X(FC, fc, fc)                                                                              \
    X(DROPOUT, dropout, dropout)                                                               \
    X(FLATTEN, flatten, flatten)                                                               \
    X(RESIDUAL, residual, res) /* basic block: conv3x3-bn-relu-conv3x3-bn + shortcut, relu */ \
    X(LEAKY_RELU, leaky_relu, leaky_relu)

typedef enum hcnn_block_kind {
#define HCNN_BLOCK_ENUM_(e, type, prefix) HCNN_BLOCK_##e,
    HCNN_BLOCK_TYPES(HCNN_BLOCK_ENUM_)
#undef HCNN_BLOCK_ENUM_
    HCNN_BLOCK_KIND_COUNT
} hcnn_block_kind;

/* The config's name of a block type ("conv"), or "unknown". */
const char *hcnn_block_kind_name(hcnn_block_kind k);
/* The prefix of its default block names ("conv", "res"), or "block". */
const char *hcnn_block_kind_prefix(hcnn_block_kind k);

typedef enum hcnn_shortcut {
    HCNN_SHORTCUT_AUTO = 0,   /* identity if shape is kept, else 1x1 projection */
    HCNN_SHORTCUT_IDENTITY,
    HCNN_SHORTCUT_PROJECTION  /* 1x1 conv (stride) + bn */
} hcnn_shortcut;

/* One block of the model as written in the config: one field per key of
 * src/config/schema.c (a type reads the fields of the keys it accepts). */
typedef struct hcnn_block_spec {
    hcnn_block_kind kind;
    char name[HCNN_NAME_MAX]; /* tensor-name prefix; default derived from kind */
    int out;                  /* conv/residual: output channels; fc: output features */
    int kh, kw;               /* conv/pool kernel */
    int sh, sw;               /* stride */
    int ph, pw;               /* padding */
    int bias;                 /* conv/fc: has a bias (default: conv 1, fc 1) */
    float p;                  /* dropout probability */
    float eps, momentum;      /* batch-norm */
    hcnn_shortcut shortcut;   /* residual */
    float negative_slope;     /* leaky_relu */
} hcnn_block_spec;

typedef struct hcnn_model_spec {
    char name[HCNN_NAME_MAX];
    int in_c, in_h, in_w;     /* input shape (per sample) */
    int classes;
    int nblocks;
    hcnn_block_spec blocks[HCNN_MAX_BLOCKS];
} hcnn_model_spec;

typedef enum hcnn_init { HCNN_INIT_HE = 0, HCNN_INIT_XAVIER } hcnn_init;

/* How a convolution walks the mini-batch: auto picks per layer (see
 * src/cpu/conv_plan.c); batched = im2col + one GEMM over chunks of
 * images; per_thread = each thread takes its share of the images and runs
 * cache-resident im2col + single-threaded GEMMs on small groups of them;
 * winograd (F(4x4,3x3)), winograd_f2 (F(2x2,3x3)), winograd_f4 = Winograd
 * minimal filtering for 3x3 stride-1 layers (src/cpu/winograd.c), auto's
 * choice for the others. */
typedef enum hcnn_conv_algo {
    HCNN_CONV_AUTO = 0,
    HCNN_CONV_BATCHED,
    HCNN_CONV_PER_THREAD,
    HCNN_CONV_WINOGRAD,
    HCNN_CONV_WINOGRAD_F2,
    HCNN_CONV_WINOGRAD_F4
} hcnn_conv_algo;

/* The arithmetic of products (config key precision): fp32 everywhere (the
 * CPU's, and the CUDA backend's default: the same results as the CPU up to
 * summation order); tf32: cuBLAS may use TF32 tensor cores for FP32 GEMMs;
 * bf16: automatic mixed precision, GEMM inputs rounded to bfloat16, FP32
 * accumulation, FP32 master weights, batch-norm and loss in FP32. */
typedef enum hcnn_precision {
    HCNN_PRECISION_FP32 = 0,
    HCNN_PRECISION_TF32,
    HCNN_PRECISION_BF16
} hcnn_precision;

#endif
