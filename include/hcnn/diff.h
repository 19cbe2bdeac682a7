/* hcnn diff: compare two checkpoints tensor by tensor. */
#ifndef HCNN_DIFF_H
#define HCNN_DIFF_H

/* Prints the largest absolute and relative differences and where they
 * occur; returns the exit status: 0 within tol, 1 beyond it or different
 * tensors, 2 unreadable file. */
/* model_only: skip the momentum buffers (e.g. against an imported model). */
int hcnn_diff_main(const char *a, const char *b, double tol, int model_only);

#endif
