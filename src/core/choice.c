/* The rule of a measured choice (include/hcnn/choice.h). */
#include "hcnn/choice.h"

int hcnn_choice_beats(const double *ta, int na, const double *tb, int nb, int min_rounds,
                      double margin)
{
    const int n = na < nb ? na : nb;
    if (n < min_rounds || n < 1)
        return 0;
    for (int k = 0; k < n; k++)
        if (!(tb[k] > ta[k] * (1.0 + margin)))
            return 0;
    return 1;
}

int hcnn_choice_pick(int n, const double *median, const double *times, int stride,
                     const int *rounds, int baseline, int min_rounds, double margin)
{
    int first_unbeaten = -1, fastest = -1;
    for (int i = 0; i < n; i++) {
        if (median[i] <= 0)
            continue;
        if (fastest < 0 || median[i] < median[fastest])
            fastest = i;
        int beaten = 0;
        for (int j = 0; j < n && !beaten; j++)
            beaten = j != i && median[j] > 0 &&
                     hcnn_choice_beats(times + (long)j * stride, rounds[j],
                                       times + (long)i * stride, rounds[i], min_rounds, margin);
        if (!beaten && i == baseline)
            return i;
        if (!beaten && first_unbeaten < 0)
            first_unbeaten = i;
    }
    return first_unbeaten >= 0 ? first_unbeaten : fastest;
}
