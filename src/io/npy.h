/* Reading and writing NumPy .npy files (src/io/npy.c), for the model
 * export and import (src/io/export.c). */
#ifndef HCNN_NPY_H
#define HCNN_NPY_H

#include <stddef.h>

typedef enum { HCNN_NPY_F32, HCNN_NPY_I64 } hcnn_npy_type;

/* One .npy file (version 1.0, little-endian, C order, byte for byte what
 * np.save writes) of count native items (float or int64_t; src may be
 * unaligned) of shape dims[0, ndim), ndim <= 4, through the atomic-file
 * helper. */
int hcnn_npy_write(const char *path, hcnn_npy_type type, int ndim, const int *dims,
                   const void *src, size_t count);

/* Check path ('<f4', or '<f8' converted; C order; exactly shape
 * dims[0, ndim) of count elements; finite values only: NaN and Inf are
 * refused) and read it into dst.  Messages name
 * the file and say the tensor `name` of `owner` ("the model configured in
 * x.yaml") expects the shape. */
int hcnn_npy_read(const char *path, const char *name, const char *owner, int ndim,
                  const int *dims, size_t count, float *dst);

/* A shape as NumPy prints it: "(6, 1, 5, 5)", "(10,)", "()". */
void hcnn_npy_shape_text(char *buf, size_t cap, int ndim, const long long *dims);

#endif
