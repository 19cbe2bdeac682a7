/* LIKWID marker regions (./configure --with-likwid), for the cluster's
 * profiler:
 *   likwid-perfctr -C 0-63 -g FLOPS_SP -m ./hcnn train ...
 * reports counters per region: "fwd:<block>", "bwd:<block>" (and
 * "fwd:<block>.<layer>" for the layers inside residual blocks), "optimizer",
 * "data_wait", "comm_wait".  Regions are opened and closed inside an OpenMP
 * parallel region so that every thread's core is counted.  Without
 * --with-likwid the macros compile to nothing. */
#ifndef HCNN_MARKERS_H
#define HCNN_MARKERS_H

#ifdef LIKWID_PERFMON
#include <likwid-marker.h>
#include <stdio.h>

/* region name: "fwd:<block>" / "bwd:<block>" (kind 0 / 1) or a plain name (kind 2) */
static inline void hcnn_marker(const char *name, int kind, int start)
{
    char region[192];
    snprintf(region, sizeof region, "%s%s", kind == 0 ? "fwd:" : kind == 1 ? "bwd:" : "", name);
#pragma omp parallel
    {
        if (start)
            LIKWID_MARKER_START(region);
        else
            LIKWID_MARKER_STOP(region);
    }
}
#define HCNN_MARKER_INIT()                                                                     \
    do {                                                                                       \
        LIKWID_MARKER_INIT;                                                                    \
        _Pragma("omp parallel") { LIKWID_MARKER_THREADINIT; }                                  \
    } while (0)
#define HCNN_MARKER_CLOSE() LIKWID_MARKER_CLOSE
#define HCNN_MARKER_START(ctx, name, kind) ((void)(ctx), hcnn_marker((name), (kind), 1))
#define HCNN_MARKER_STOP(ctx, name, kind) ((void)(ctx), hcnn_marker((name), (kind), 0))
#else
#define HCNN_MARKER_INIT() ((void)0)
#define HCNN_MARKER_CLOSE() ((void)0)
#define HCNN_MARKER_START(ctx, name, kind) ((void)0)
#define HCNN_MARKER_STOP(ctx, name, kind) ((void)0)
#endif

#endif
