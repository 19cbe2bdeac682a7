/* hcnn plan's options, its table's rows and their output (src/plan/plan.c
 * measures and prices, src/plan/report.c prints, writes the CSVs and the
 * plots). */
#ifndef HCNN_PLAN_REPORT_H
#define HCNN_PLAN_REPORT_H

#include <stdio.h>

#include "hcnn/node.h"
#include "hcnn/plan.h"

#define MAX_NODES HCNN_PLAN_MAX_NODES
#define MAX_STAGE_CHOICES HCNN_PLAN_MAX_STAGE_CHOICES
#define MAX_MEASURED 64

typedef struct plan_opts {
    int nodes[MAX_NODES], nnodes;
    int stages[MAX_STAGE_CHOICES], nstages;
    const char *network;
    int threads;          /* target threads per rank */
    int measure_threads;  /* threads here */
    int host_cores;       /* > 0: every rank on one host of that many cores */
    int microbatches;     /* M0 */
    int batch;            /* per-rank batch of weak scaling (0: the config's) */
    int steps;            /* timed steps per measurement */
    int weak, strong;
    const char *out;
    const char *calibrate;
    const char *gnuplot;
    const char *node_spec;
    hcnn_node node;       /* the target node (--node) */
    double core_gflops;   /* this machine's FMA rate per core, measure_threads running */
    double barrier_here_s; /* one barrier of the measurement's threads here */
    double barrier_s;     /* one barrier of the target's threads on the node */
    hcnn_comm_setup comm; /* how this configuration's gradients cross the ranks */
    hcnn_comm_setup other; /* the same with the other allreduce_progress */
} plan_opts;

typedef struct plan_row {
    int weak;               /* 1 weak, 0 strong scaling */
    hcnn_layout lay;
    hcnn_step_model m;
    int below_threads;      /* fewer samples a pass than threads */
    long fewest_pieces;     /* the fewest pieces a GEMM layer's pass offers (its costliest phase) */
    double thread_use;      /* of the threads' time in the passes, the share they work */
    char note[384];         /* a pass of fewer samples than threads: its pieces */
    double efficiency;
    int best;
} plan_row;

/* "data" or "pipeline_SxR" */
void hcnn_plan_layout_name(const hcnn_layout *l, char *buf, size_t cap);
/* The table (csv: plan.csv's rows under its header). */
void hcnn_plan_print_rows(const plan_row *rows, int n, const hcnn_network *nw, const plan_opts *o,
                          FILE *f, int csv);
/* What keeps the recommended layout at the largest node count from ideal. */
void hcnn_plan_print_verdict(const plan_row *rows, int n, int weak, double goal, FILE *f);
/* plan_*.png through gnuplot (none, with a warning, when it fails). */
int hcnn_plan_write_plots(const plan_opts *o, const char *dir, const char *title, int *written);
/* The passes of one node's step (csv: plan_passes.csv). */
void hcnn_plan_print_passes(const hcnn_net *net, const hcnn_pass_cost *c, const plan_opts *o,
                            FILE *f, int csv);
/* The recommended layout's efficiency before hcnn's communication changes,
 * now, and with the other allreduce_progress. */
void hcnn_plan_print_comm_changes(const plan_row *now, const plan_row *before,
                                  const plan_row *other, int n, int weak, int thread_now, FILE *f);
/* The recommended layout at the most nodes with optimizer_sharding none
 * and ranks (now: the configuration's, flipped: the other), and which of
 * the two the plan recommends there. */
void hcnn_plan_print_sharding(const plan_row *now, const plan_row *flipped, int n, int weak,
                              int sharded_now, FILE *f);

#endif
