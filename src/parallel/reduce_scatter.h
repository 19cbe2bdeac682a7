/* The sharded optimiser's reduce-scatter of one gradient bucket (grad_sync.h,
 * optimizer_sharding: ranks): the first half of Rabenseifner's allreduce,
 * scheduled as Open MPI's libnbc schedules the allreduce hcnn's buckets use
 * by default (HCNN_IALLREDUCE_DEFAULT: 3, nbc_iallreduce.c,
 * allred_sched_redscat_allgather), in hcnn's own point-to-point messages:
 *
 *   fold: on p ranks, p' = 2^floor(log2 p), r = p - p': of the first 2r
 *         ranks each odd one sends its bucket to the even one before it,
 *         which adds it (g_even + g_odd, the sum libnbc's halves make) and
 *         goes on as virtual rank rank / 2; the odd ones hold no piece;
 *         the others are virtual ranks rank - r;
 *   halving: for mask = 1, 2, ... p'/2 the virtual ranks v and v ^ mask
 *         swap halves of their window, the lower rank keeping the first
 *         half, and add what they receive.
 *
 * So every float is summed over the same tree as in that allreduce
 * (((g0 + g1) + (g2 + g3)) ... with the fold's pairs first): the sharded
 * step gives the unsharded step's bits, whatever the rank count.  Virtual
 * rank v ends with piece bitrev(v) of the bucket's p' pieces (whole 64-byte
 * lines, in memory order).  Why not MPI_Ireduce_scatter: libnbc's is a
 * binomial reduce of the whole bucket to rank 0 and a linear scatter, log2
 * p times the volume through rank 0, and another summation tree.  The
 * volume here: (p' - 1) / p' of the bucket out of each rank, half an
 * allreduce's; the fold's ranks one bucket more.
 *
 * Progress: begin posts the first exchange; advance tests it (or waits,
 * blocking) and posts the next, adding received halves with `sum`; one
 * bucket at a time, in the order every rank starts them. */
#ifndef HCNN_PARALLEL_REDUCE_SCATTER_H
#define HCNN_PARALLEL_REDUCE_SCATTER_H

#include <mpi.h>
#include <stddef.h>

/* b[0, n) += a[0, n), the same bits on any thread count */
typedef void (*hcnn_rs_sum_fn)(const float *a, float *b, int n);

typedef struct hcnn_rs {
    MPI_Comm comm;         /* a duplicate of the bucket's communicator */
    int size, rank;
    int pof2, nsteps, rem; /* p', log2 p', r */
    int vrank;             /* -1: folded away (holds no piece) */
    hcnn_rs_sum_fn sum;
    float *scratch;        /* host floats received, as large as the largest bucket */
    /* the bucket in flight */
    float *base;           /* its floats, where MPI reads them */
    size_t n;
    int step;              /* -1: the fold; 0 .. nsteps - 1: halving; nsteps: done */
    int wf, wn;            /* the window: pieces [wf, wf + wn) */
    size_t recv_lo, recv_len; /* floats received this exchange, added when it completes */
    MPI_Request req[2];
} hcnn_rs;

int hcnn_rs_init(hcnn_rs *rs, MPI_Comm comm, size_t max_n, hcnn_rs_sum_fn sum);
void hcnn_rs_free(hcnn_rs *rs);
/* Each rank's piece of a bucket of n floats (its start and length; zero for
 * a folded rank), as MPI_Allgatherv takes them.  Counts fit in int: the
 * caller checks n <= INT_MAX. */
void hcnn_rs_pieces(const hcnn_rs *rs, size_t n, int *counts, int *displs);
/* The reduce-scatter of base[0, n) begun; base is this rank's bucket, summed
 * in place (the floats outside this rank's piece are left partial). */
void hcnn_rs_begin(hcnn_rs *rs, float *base, size_t n);
/* Progress: 1 when this rank's piece holds the sum over the ranks (or, on a
 * folded rank, its bucket has been sent), 0 while messages are in flight.
 * blocking: waits until done. */
int hcnn_rs_advance(hcnn_rs *rs, int blocking);

#endif
