/* NVTX ranges for Nsight Systems and Nsight Compute (configure --with-nvtx,
 * on by default where nvtx3/nvToolsExt.h is found; docs/gpu-nodes.md,
 * "Profiling with Nsight").  Push/pop ranges of the default domain, named
 * by strings that exist before the hot path: literals, or the layers'
 * names made once when the network is built (hcnn_trace_name, net.c).
 *
 * Why nvtxRangePushA and not a domain "hcnn" with registered strings: a
 * domain handle and a string handle per name would be state that every
 * place with a range must be handed (hcnn keeps no global mutable state),
 * for no gain when no tool listens: NVTX3 calls through a function pointer
 * that stays NULL unless NVTX_INJECTION64_PATH names a tool (nsys, ncu),
 * so a range costs a load and a branch; with a tool, one string copy per
 * range (tens a step).  ncu's filter then needs no domain either:
 * --nvtx-include "fwd 3 conv2 (conv)/".
 *
 * Ranges are per thread and must pop on the thread that pushed them.
 * Without HCNN_HAVE_NVTX every function here is empty and inline: the
 * calls compile to nothing (no symbol, no call in the objects). */
#ifndef HCNN_CORE_TRACE_H
#define HCNN_CORE_TRACE_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"

#if HCNN_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>

static inline void hcnn_trace_push(const char *name) { nvtxRangePushA(name); }
static inline void hcnn_trace_pop(void) { nvtxRangePop(); }

/* A layer's range name: "<pass> <id> <name> (<kind>)", e.g. "fwd 3 conv2
 * (conv)": its row (from 0) and its name and kind as in hcnn bench's
 * per-block profile. */
static inline void hcnn_trace_name(char *dst, size_t cap, const char *pass, int id,
                                   const char *name, const char *kind)
{
    snprintf(dst, cap, "%s %d %s (%s)", pass, id, name, kind);
}
#else
static inline void hcnn_trace_push(const char *name) { (void)name; }
static inline void hcnn_trace_pop(void) {}
static inline void hcnn_trace_name(char *dst, size_t cap, const char *pass, int id,
                                   const char *name, const char *kind)
{
    (void)pass, (void)id, (void)name, (void)kind;
    if (cap)
        dst[0] = '\0';
}
#endif

#endif
