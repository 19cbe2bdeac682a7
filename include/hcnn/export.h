/* Moving models between hcnn checkpoints and PyTorch through NumPy .npy
 * files (format version 1.0 written; 1.0, 2.0 and 3.0 read).
 *
 * Directory layout (one file per PyTorch state_dict entry):
 *   DIR/<name>.npy        every parameter and batch-norm statistic, named
 *                         as PyTorch names it ("conv1.weight",
 *                         "layer2.0.downsample.1.running_var", ...),
 *                         '<f4', C order, PyTorch's shapes (conv weights
 *                         [out, in, kh, kw], fc weights [out, in])
 *   DIR/<bn>.num_batches_tracked.npy
 *                         '<i8' scalar, one per batch-norm layer, because
 *                         PyTorch's strict load_state_dict expects the key;
 *                         hcnn writes the checkpoint's step count and
 *                         ignores these files on import
 *   DIR/manifest.txt      "name dtype shape" per line in checkpoint order,
 *                         e.g. "conv1.weight float32 6x1x5x5",
 *                         "bn1.num_batches_tracked int64 scalar"
 * Optimiser momentum is not exported. */
#ifndef HCNN_EXPORT_H
#define HCNN_EXPORT_H

#include "hcnn/config.h"

/* Write the parameters and statistics of the checkpoint at ckpt_path as
 * .npy files, num_batches_tracked files and manifest.txt into dir
 * (created if missing).  Each file is written to a temporary name and
 * renamed; manifest.txt is written last, so its presence means the export
 * completed.  Files already in dir are overwritten, others are left alone.
 * Returns HCNN_OK, or HCNN_EIO / HCNN_EFORMAT / HCNN_ENOMEM after one
 * message. */
int hcnn_export_npy(const char *ckpt_path, const char *dir);

/* Build the network of cfg->model, fill every tensor from dir/<name>.npy
 * ('<f4', or '<f8' converted; C order; exactly the model's shape; finite
 * values: a NaN or Inf is an error naming the file and element) and
 * write a checkpoint to out_ckpt (epoch 0, step 0, zero momentum, seed
 * cfg->seed) that `hcnn eval` and `hcnn train` accept.  Every file in dir
 * must be a tensor of the model, a *.num_batches_tracked.npy or
 * manifest.txt.  Nothing is written unless every file is valid.  Returns
 * HCNN_OK, or HCNN_EIO / HCNN_EFORMAT / HCNN_EINVAL / HCNN_ENOMEM after
 * one message naming the file. */
int hcnn_import_npy(const char *dir, const hcnn_config *cfg, const char *out_ckpt);

/* The same from arrays in memory (hcnn.h's hcnn_checkpoint_write): the
 * model's tensors by name, float32 or float64, exactly their shapes,
 * finite; *.num_batches_tracked accepted and ignored; another name, a
 * name given twice or a tensor missing is an error. */
int hcnn_import_arrays(const hcnn_array *arrays, int n, const hcnn_config *cfg,
                       const char *out_ckpt);

/* What hcnn export checks of a checkpoint read (hcnn_ckpt_read) before it
 * writes anything: tensor names usable as file names, none twice, no
 * negative dimension; HCNN_EFORMAT after one message naming path. */
struct hcnn_ckpt_file;
int hcnn_export_check(const struct hcnn_ckpt_file *f, const char *path);
/* 1 when tensor k ends the statistics of a batch-norm layer (one with a
 * running_mean): prefix gets the layer's name, and PyTorch's state_dict
 * has <prefix>.num_batches_tracked right after it. */
int hcnn_export_ends_bn_layer(const struct hcnn_ckpt_file *f, int k, char *prefix, size_t cap);

#endif
