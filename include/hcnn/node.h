/* hcnn plan's node: what one compute node can do, for `hcnn plan --node
 * FILE|NAME`.  The figures are either a datasheet's (a preset, or a file
 * someone wrote: an assumption) or measured on this machine ("here": an
 * FMA throughput and a STREAM triad microbenchmark, the LLC from sysfs).
 * Every function that can fail returns an hcnn_status code after printing
 * one message (include/hcnn/common.h). */
#ifndef HCNN_NODE_H
#define HCNN_NODE_H

#include <stddef.h>

/* The documented cluster's 64-core node; its exact CPU is not given, so this
 * preset is an assumption (src/plan/node.c has its figures and sources). */
#define HCNN_NODE_DEFAULT "epyc-9554"

typedef struct hcnn_node {
    char name[64];
    int cores;                 /* physical cores computing (one thread each) */
    double peak_gflops;        /* FP32 FMA peak of all cores together, GFLOP/s */
    double bandwidth_gbs;      /* memory bandwidth of the whole node (STREAM triad), GB/s */
    double core_bandwidth_gbs; /* what one core draws alone (triad on 1 thread), GB/s */
    double llc_mib;            /* last-level cache of the node, MiB (0: unknown) */
    double barrier_us;         /* a fork-join of a parallel region on all its cores, us */
    int assumed;               /* 1: figures from a datasheet (an assumption), 0: measured */
    char source[200];          /* one line: where the figures come from */
} hcnn_node;

/* A preset name (hcnn_node_preset_names), "here" (this machine, measured:
 * hcnn_node_measure), or a file of key = value lines ('#' starts a comment
 * line, or a comment after a number):
 *   name                text, the rest of the line up to a '#' (default: the file's path)
 *   cores               a positive whole number                 (required)
 *   peak_gflops         a positive number                       (required)
 *   bandwidth_gbs       a positive number                       (required)
 *   core_bandwidth_gbs  a positive number, at most bandwidth_gbs
 *                       (default bandwidth_gbs / cores: bandwidth grows
 *                       linearly with threads, which understates it below
 *                       saturation: a pessimistic guess)
 *   llc_mib             a number >= 0, 0 for unknown            (default 0)
 *   barrier_us          a number >= 0: a parallel region's fork and join on
 *                       all cores (default 5, the presets' assumption)
 *   assumed             0 or 1 (default 1: a file's figures are taken for
 *                       datasheet figures unless it says they were measured)
 *   source              text, the whole rest of the line ('#' included)
 *                       (default: "file <path>")
 * A bad line gives one message naming the file, line, key and what was
 * expected; HCNN_EIO when spec is neither a preset, "here" nor readable. */
int hcnn_node_load(const char *spec, hcnn_node *node);
/* Names of the presets, comma separated, for messages and --help. */
const char *hcnn_node_preset_names(void);
/* FP32 peak and memory bandwidth with `threads` threads on that node:
 * peak scales with min(threads, cores)/cores; bandwidth is
 * min(threads x core_bandwidth, bandwidth) (threads capped at cores).
 * 0 for threads < 1. */
double hcnn_node_peak_gflops(const hcnn_node *node, int threads);
double hcnn_node_bandwidth_gbs(const hcnn_node *node, int threads);
/* Seconds of one phase's barrier (a parallel region's fork and join) with
 * `threads` threads: barrier_us at all cores, none on one thread, linear
 * between (libgomp's barrier: every arriving thread updates one shared
 * cache line in turn). */
double hcnn_node_barrier_s(const hcnn_node *node, int threads);
/* Microbenchmarks on this machine (OpenMP, `threads` threads):
 * FP32 FMA throughput (GFLOP/s, best of several ~30 ms repeats), and
 * STREAM triad a[i] = b[i] + s*c[i] over arrays much larger than the LLC
 * (GB/s counting 12 bytes per element; best of several repeats; arrays
 * first touched by the threads that use them).  HCNN_EINVAL for
 * threads < 1, HCNN_ENOMEM when the triad's arrays cannot be allocated. */
int hcnn_measure_fma_gflops(int threads, double *gflops);
int hcnn_measure_triad_gbs(int threads, double *gbs);
/* The fork and join of an empty parallel region of `threads` threads,
 * microseconds (the best of several means over many regions). */
int hcnn_measure_barrier_us(int threads, double *us);
/* The last-level cache size from sysfs (/sys/devices/system/cpu/cpuN/cache/
 * index*: level, size, shared_cpu_list), summed over the distinct LLC
 * instances across the machine; 0 MiB and HCNN_OK, without a warning, if
 * unreadable. */
int hcnn_llc_mib(double *mib);
/* "here": cores = the physical cores this process may run on
 * (hcnn_physical_cores: SMT siblings count once), peak, both bandwidths and
 * the barrier on all cores measured, llc from sysfs, assumed = 0, source names the CPU (hcnn_cpu_model).  Takes
 * a few seconds (the triad's arrays are first touched twice). */
int hcnn_node_measure(hcnn_node *node);
/* One line describing the node, e.g. for the plan's header: name, cores,
 * peak, bandwidth, per-core bandwidth, LLC, and "datasheet figures: an
 * assumption", "measured here" (name "here") or "measured". */
void hcnn_node_describe(const hcnn_node *node, char *buf, size_t cap);

#endif
