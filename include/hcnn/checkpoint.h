/* Checkpoint files.
 *
 * Layout (little-endian):
 *   "HCNNCKPT"  u32 version  u32 byte-order mark 0x01020304  u32 nsections
 *   nsections x { u32 kind  u32 zero  u64 nbytes  payload[nbytes]  u32 crc32(payload) }
 * Sections:
 *   META    (1): "key=value\n" text: model_hash, model, epoch, step, ...,
 *                run_id, parent_run, ... (hcnn_ckpt_meta; readers skip keys
 *                they do not know, so new keys need no new version)
 *   TENSORS (2): u32 count, then per tensor: u16 name length, name,
 *                u8 role (0 parameter, 1 batch-norm statistic, 2 momentum),
 *                u8 ndim, i32 dims[ndim], u64 count, f32 data[count]
 * Tensors are stored by name and shape, independent of how the model was
 * laid out in memory or across ranks.  Files are written to a temporary
 * name, fsync'ed and renamed, so a crash never leaves a torn file. */
#ifndef HCNN_CHECKPOINT_H
#define HCNN_CHECKPOINT_H

#include <stdint.h>

#include "hcnn/files.h"
#include "hcnn/net.h"

#define HCNN_CKPT_VERSION 1u

/* Run identities: "<UTC time>-<6 hex digits>", e.g. 20261124T112100Z-3f9a2c */
#define HCNN_RUN_ID_MAX 40

/* Where a run stands.  hcnn's randomness (shuffling, augmentation, dropout)
 * is counter-based, a function of (seed, epoch, step, sample index), so the
 * seed and this position are the whole RNG state; the learning-rate
 * schedule is a function of the step.
 *
 * And whose it is (checkpoints written before run identities have none:
 * run_id "" there): the run's line of checkpoints (run_id), where the line
 * branched from (parent_run at parent_step: a run resumed from a
 * checkpoint that was not its line's newest starts a new line), the Slurm
 * job that wrote it, and what the line must match to be continued: the
 * model (model_hash), the data set and the seed. */
typedef struct hcnn_ckpt_meta {
    uint64_t model_hash;
    int hash_version;    /* 1: written before version 2 of the model hash (no key) */
    uint64_t model_hash_v1; /* version 1 of the hash (both versions write it) */
    char model[HCNN_NAME_MAX];
    long epoch;          /* completed epochs */
    long batch;          /* batches done in the epoch after those (resume inside an epoch) */
    long step;           /* optimiser steps taken */
    uint64_t seed;
    int batch_size;      /* global batch the position refers to */
    double lr;           /* learning rate of the last step (information) */
    /* running sums of the epoch in progress, so its metrics survive a resume */
    double loss_sum, correct, seen;
    char run_id[HCNN_RUN_ID_MAX];
    char parent_run[HCNN_RUN_ID_MAX]; /* "" for a line started fresh */
    long parent_step;
    char slurm_job[32];   /* SLURM_JOB_ID of the writer, "" outside Slurm */
    char dataset[HCNN_NAME_MAX];
    long train_samples;   /* size of the training set (0: not recorded) */
    double written;       /* Unix time of the write (0: not recorded) */
    /* read, not written: CRC32 of the stored CRC32s of the file's sections
     * but META (the tensors and momentum; META holds the write's time and
     * identity): two copies of one checkpoint have the same */
    uint32_t content_crc;
} hcnn_ckpt_meta;

/* The network's buffers (and momentum, backend memory too; may be NULL:
 * then no optimiser state is stored), downloaded if they are not host
 * memory. */
int hcnn_ckpt_save(const char *path, const hcnn_net *net, const float *momentum,
                   const hcnn_ckpt_meta *meta);
/* The most bytes a checkpoint of net takes on disk (with its momentum) */
uint64_t hcnn_ckpt_file_bytes(const hcnn_net *net, int with_momentum);
/* The same from host buffers laid out like net->params / net->state. */
int hcnn_ckpt_save_buffers(const char *path, const hcnn_net *net, const float *params,
                           const float *state, const float *momentum, const hcnn_ckpt_meta *meta);

/* Reads only the header and META section of a checkpoint (a directory
 * listing reads every checkpoint's META: not their tensors); verifies the
 * magic, version and the META's CRC.  quiet: no message. */
int hcnn_ckpt_read_meta(const char *path, hcnn_ckpt_meta *meta, int quiet);
/* 1 when meta was written for net's architecture (by either version of
 * the model hash). */
int hcnn_ckpt_meta_matches_model(const hcnn_ckpt_meta *meta, const hcnn_net *net);
/* Verifies magic, version, CRCs, model hash, every name and shape; on any
 * mismatch prints what does not match and leaves the net unchanged; the
 * tensors are uploaded into the network's buffers and into momentum
 * (backend memory; may be NULL: optimiser state ignored). */
int hcnn_ckpt_load(const char *path, hcnn_net *net, float *momentum, hcnn_ckpt_meta *meta);

/* A checkpoint file read into memory, verified (magic, version, CRC32 of
 * every section) and indexed; tensor data points into the file image. */
typedef struct hcnn_ckpt_tensor {
    char name[HCNN_TENSOR_NAME_MAX];
    int role;            /* 0 parameter, 1 batch-norm statistic, 2 momentum */
    int ndim;
    int dims[4];
    size_t count;
    const float *data;   /* unaligned in general: read with memcpy */
} hcnn_ckpt_tensor;

typedef struct hcnn_ckpt_file {
    unsigned char *image;
    size_t size;
    hcnn_ckpt_meta meta;
    hcnn_ckpt_tensor *tensors;
    int ntensors;
} hcnn_ckpt_file;

int hcnn_ckpt_read(const char *path, hcnn_ckpt_file *f);
void hcnn_ckpt_close(hcnn_ckpt_file *f);
const char *hcnn_ckpt_role_name(int role);

#endif
