/* The sharded optimiser's reduce-scatter (reduce_scatter.h). */
#include <string.h>

#include "hcnn/comm.h"
#include "hcnn/common.h"
#include "reduce_scatter.h"

int hcnn_rs_init(hcnn_rs *rs, MPI_Comm comm, size_t max_n, hcnn_rs_sum_fn sum)
{
    memset(rs, 0, sizeof *rs);
    rs->comm = MPI_COMM_NULL;
    rs->req[0] = rs->req[1] = MPI_REQUEST_NULL;
    HCNN_MPI(MPI_Comm_dup(comm, &rs->comm)); /* its messages apart from the caller's */
    HCNN_MPI(MPI_Comm_size(rs->comm, &rs->size));
    HCNN_MPI(MPI_Comm_rank(rs->comm, &rs->rank));
    rs->sum = sum;
    rs->pof2 = 1;
    while (rs->pof2 * 2 <= rs->size)
        rs->pof2 *= 2, rs->nsteps++;
    rs->rem = rs->size - rs->pof2;
    if (rs->rank < 2 * rs->rem)
        rs->vrank = rs->rank % 2 ? -1 : rs->rank / 2;
    else
        rs->vrank = rs->rank - rs->rem;
    rs->scratch = hcnn_calloc(sizeof(float) * (max_n + 1), "the reduce-scatter's receive buffer");
    return rs->scratch ? HCNN_OK : HCNN_ENOMEM;
}

void hcnn_rs_free(hcnn_rs *rs)
{
    if (rs->comm != MPI_COMM_NULL)
        HCNN_MPI(MPI_Comm_free(&rs->comm));
    hcnn_free(rs->scratch);
    memset(rs, 0, sizeof *rs);
    rs->comm = MPI_COMM_NULL;
}

/* piece j of p' of n floats: [piece_lo(j), piece_lo(j + 1)), whole 64-byte lines */
static size_t piece_lo(const hcnn_rs *rs, size_t n, int j)
{
    const size_t lo = (n * (size_t)j / (size_t)rs->pof2 + 15) / 16 * 16;
    return lo < n ? lo : n;
}

static int bitrev(int v, int bits)
{
    int r = 0;
    for (int b = 0; b < bits; b++)
        r |= ((v >> b) & 1) << (bits - 1 - b);
    return r;
}

static int real_rank(const hcnn_rs *rs, int vrank)
{
    return vrank < rs->rem ? 2 * vrank : vrank + rs->rem;
}

void hcnn_rs_pieces(const hcnn_rs *rs, size_t n, int *counts, int *displs)
{
    for (int r = 0; r < rs->size; r++)
        counts[r] = displs[r] = 0;
    for (int v = 0; v < rs->pof2; v++) {
        const int j = bitrev(v, rs->nsteps), r = real_rank(rs, v);
        displs[r] = (int)piece_lo(rs, n, j);
        counts[r] = (int)(piece_lo(rs, n, j + 1) - piece_lo(rs, n, j));
    }
}

/* Post step rs->step's exchange (the fold, or a halving) */
static void post(hcnn_rs *rs)
{
    rs->req[0] = rs->req[1] = MPI_REQUEST_NULL;
    rs->recv_len = 0;
    const int tag = rs->step + 2;
    if (rs->step < 0) { /* the fold */
        if (rs->vrank < 0) {
            HCNN_MPI(MPI_Isend(rs->base, (int)rs->n, MPI_FLOAT, rs->rank - 1, tag, rs->comm,
                               &rs->req[0]));
        } else {
            rs->recv_lo = 0, rs->recv_len = rs->n;
            HCNN_MPI(MPI_Irecv(rs->scratch, (int)rs->n, MPI_FLOAT, rs->rank + 1, tag, rs->comm,
                               &rs->req[1]));
        }
        return;
    }
    const int mask = 1 << rs->step, half = rs->wn / 2;
    const int peer = real_rank(rs, rs->vrank ^ mask);
    const int keep_left = !(rs->vrank & mask);
    const int keep = keep_left ? rs->wf : rs->wf + half, give = keep_left ? rs->wf + half : rs->wf;
    const size_t klo = piece_lo(rs, rs->n, keep), khi = piece_lo(rs, rs->n, keep + half);
    const size_t glo = piece_lo(rs, rs->n, give), ghi = piece_lo(rs, rs->n, give + half);
    rs->recv_lo = klo, rs->recv_len = khi - klo;
    HCNN_MPI(MPI_Irecv(rs->scratch + klo, (int)(khi - klo), MPI_FLOAT, peer, tag, rs->comm,
                       &rs->req[1]));
    HCNN_MPI(MPI_Isend(rs->base + glo, (int)(ghi - glo), MPI_FLOAT, peer, tag, rs->comm,
                       &rs->req[0]));
    rs->wf = keep, rs->wn = half;
}

void hcnn_rs_begin(hcnn_rs *rs, float *base, size_t n)
{
    rs->base = base, rs->n = n;
    rs->wf = 0, rs->wn = rs->pof2;
    rs->step = rs->rank < 2 * rs->rem ? -1 : 0;
    if (rs->step == 0 && rs->nsteps == 0) { /* one rank: nothing to exchange */
        rs->step = rs->nsteps;
        return;
    }
    post(rs);
}

int hcnn_rs_advance(hcnn_rs *rs, int blocking)
{
    while (rs->step < rs->nsteps) {
        if (blocking) {
            HCNN_MPI(MPI_Waitall(2, rs->req, MPI_STATUSES_IGNORE));
        } else {
            int done = 0;
            HCNN_MPI(MPI_Testall(2, rs->req, &done, MPI_STATUSES_IGNORE));
            if (!done)
                return 0;
        }
        if (rs->recv_len)
            rs->sum(rs->scratch + rs->recv_lo, rs->base + rs->recv_lo, (int)rs->recv_len);
        if (rs->step < 0 && rs->vrank < 0) { /* folded away: sent, done */
            rs->step = rs->nsteps;
            return 1;
        }
        rs->step++;
        if (rs->step < rs->nsteps)
            post(rs);
    }
    return 1;
}
