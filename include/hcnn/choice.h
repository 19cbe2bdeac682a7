/* The rule behind every choice hcnn makes by measuring (blas_kernels: auto,
 * src/blas/measure.c; the CUDA convolutions' ways, src/cuda/conv_choice.cu):
 * candidates are timed round after round, in rotated order within a round,
 * so that a shared machine's slow moments fall on all of them.
 *
 * One candidate beats another when it was faster by more than `margin` (a
 * fraction) in every round both ran, and they ran at least `min_rounds`
 * (rounds are adjacent in time, so a load that comes and goes slows both
 * alike).  The choice is the baseline (what would run without measuring)
 * if nothing beats it, else the first candidate in the fixed order that
 * nothing beats, else (beaten all round, which rotated rounds make
 * unlikely) the fastest median.  Candidates of the same speed then never
 * beat each other, however loaded the machine: a choice made with medians
 * and a margin flipped between two equally fast BLAS kernel types from one
 * fresh measurement to the next on a loaded 2-core VM, and the two give
 * different last bits. */
#ifndef HCNN_CHOICE_H
#define HCNN_CHOICE_H

/* ta's na rounds beat tb's nb rounds (above) */
int hcnn_choice_beats(const double *ta, int na, const double *tb, int nb, int min_rounds,
                      double margin);

/* The choice among n candidates: median[i] their medians (<= 0: failed,
 * never chosen), times + i * stride their round times, rounds[i] how many
 * they ran; -1 when every candidate failed. */
int hcnn_choice_pick(int n, const double *median, const double *times, int stride,
                     const int *rounds, int baseline, int min_rounds, double margin);

#endif
