/* Checkpoint files.
 *
 * Layout (little-endian):
 *   "HCNNCKPT"  u32 version  u32 byte-order mark 0x01020304  u32 nsections
 *   nsections x { u32 kind  u32 zero  u64 nbytes  payload[nbytes]  u32 crc32(payload) }
 * Sections:
 *   META    (1): "key=value\n" text: model_hash, model, epoch, step, ...
 *   TENSORS (2): u32 count, then per tensor: u16 name length, name,
 *                u8 role (0 parameter, 1 batch-norm statistic, 2 momentum),
 *                u8 ndim, i32 dims[ndim], u64 count, f32 data[count]
 * Tensors are stored by name and shape, independent of how the model was
 * laid out in memory or across ranks.  Files are written to a temporary
 * name, fsync'ed and renamed, so a crash never leaves a torn file. */
#ifndef HCNN_CHECKPOINT_H
#define HCNN_CHECKPOINT_H

#include <stdint.h>

#include "hcnn/net.h"

#define HCNN_CKPT_VERSION 1u

typedef struct hcnn_ckpt_meta {
    uint64_t model_hash;
    char model[HCNN_NAME_MAX];
    long epoch;          /* completed epochs */
    long step;           /* optimiser steps taken */
    uint64_t seed;
} hcnn_ckpt_meta;

/* momentum may be NULL (then no optimiser state is stored). */
int hcnn_ckpt_save(const char *path, const hcnn_net *net, const float *momentum,
                   const hcnn_ckpt_meta *meta);
/* Verifies magic, version, CRCs, model hash, every name and shape; on any
 * mismatch prints what does not match and leaves the net unchanged.
 * momentum may be NULL (optimiser state ignored). */
int hcnn_ckpt_load(const char *path, hcnn_net *net, float *momentum, hcnn_ckpt_meta *meta);

/* mkdir -p */
int hcnn_mkdir_p(const char *dir);
/* mkdir -p of the directory part of a file path */
int hcnn_mkdir_parent(const char *path);

#endif
