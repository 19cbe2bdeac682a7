/* hcnn plan's output: the table, the passes, the verdicts, the CSVs and
 * the plots (src/plan/plan_report.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hcnn/common.h"
#include "plan_report.h"

void hcnn_plan_layout_name(const hcnn_layout *l, char *buf, size_t cap)
{
    if (l->stages == 1)
        snprintf(buf, cap, "data");
    else
        snprintf(buf, cap, "pipeline_%dx%d", l->stages, l->replicas);
}

/* ---- output ----------------------------------------------------------------- */

#define CSV_HEADER                                                                                \
    "scaling,nodes,layout,stages,replicas,microbatches,global_batch,pass_samples,images_per_s,"   \
    "step_ms,compute_ms,allreduce_ms,allreduce_total_ms,bubble_ms,p2p_ms,sync_ms,efficiency,"    \
    "best,threads,network,below_threads,note,fewest_pieces,thread_use"

void hcnn_plan_print_rows(const plan_row *rows, int n, const hcnn_network *nw, const plan_opts *o,
                          FILE *f, int csv)
{
    if (csv)
        fprintf(f, "%s\n", CSV_HEADER);
    else
        fprintf(f, "%-6s %5s %-15s %7s %6s %12s %9s %10s %12s %9s %8s %6s %s\n", "scale",
                "nodes", "layout", "batch", "pass", "images_per_s", "step_ms", "compute_ms",
                "allreduce_ms", "bubble_ms", "p2p_ms", "eff", "best");
    for (int i = 0; i < n; i++) {
        const plan_row *r = &rows[i];
        char name[32];
        hcnn_plan_layout_name(&r->lay, name, sizeof name);
        const hcnn_step_model *m = &r->m;
        if (csv)
            fprintf(f, "%s,%d,%s,%d,%d,%d,%lld,%d,%.2f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%d,%d,"
                       "%s,%d,%s,%ld,%.3f\n",
                    r->weak ? "weak" : "strong", r->lay.nodes, name, r->lay.stages,
                    r->lay.replicas, r->lay.microbatches, r->lay.global_batch,
                    r->lay.pass_samples, m->images_per_s, m->step_s * 1e3, m->compute_s * 1e3,
                    m->allreduce_s * 1e3, m->allreduce_total_s * 1e3, m->bubble_s * 1e3,
                    m->p2p_s * 1e3, m->sync_s * 1e3, r->efficiency, r->best, o->threads,
                    nw->name, r->below_threads, r->note, r->fewest_pieces, r->thread_use);
        else
            fprintf(f, "%-6s %5d %-15s %7lld %6d %12.1f %9.3f %10.3f %12.3f %9.3f %8.3f %6.3f %s%s%s%s\n",
                    r->weak ? "weak" : "strong", r->lay.nodes, name, r->lay.global_batch,
                    r->lay.pass_samples, m->images_per_s, m->step_s * 1e3, m->compute_s * 1e3,
                    m->allreduce_s * 1e3, m->bubble_s * 1e3, m->p2p_s * 1e3, r->efficiency,
                    r->best ? "*" : "", r->below_threads ? " (fewer samples than threads)" : "",
                    r->note[0] ? ": " : "", r->note);
    }
}

/* What keeps the recommended layout at the largest node count from ideal
 * scaling: the largest of the step's terms beyond the 1-node compute. */
void hcnn_plan_print_verdict(const plan_row *rows, int n, int weak, double goal, FILE *f)
{
    const plan_row *best = NULL, *base = NULL;
    for (int i = 0; i < n; i++) {
        if (rows[i].weak != weak)
            continue;
        if (rows[i].lay.nodes == 1 && rows[i].lay.stages == 1)
            base = &rows[i];
        if (rows[i].best && (!best || rows[i].lay.nodes > best->lay.nodes))
            best = &rows[i];
    }
    if (!best || !base)
        return;
    char name[32];
    hcnn_plan_layout_name(&best->lay, name, sizeof name);
    const hcnn_step_model *m = &best->m;
    /* the ideal step: 1-node time per image x this rank's images */
    const double ideal = base->m.step_s / base->lay.global_batch * best->lay.global_batch /
                         best->lay.nodes;
    const double terms[4] = {m->allreduce_s + m->sync_s, m->bubble_s, m->p2p_s,
                             fmax(0.0, m->compute_s - ideal)};
    const char *names[4] = {"exposed allreduce", "pipeline bubble", "point-to-point",
                            "compute per image (per-rank batch)"};
    int k = 0;
    for (int j = 1; j < 4; j++)
        if (terms[j] > terms[k])
            k = j;
    fprintf(f, "hcnn plan: %s scaling at %d nodes: recommended %s, efficiency %.3f", 
            weak ? "weak" : "strong", best->lay.nodes, name, best->efficiency);
    if (best->efficiency >= goal)
        fprintf(f, " (>= %.2f)", goal);
    else
        fprintf(f, " (< %.2f)", goal);
    fprintf(f, "; largest loss: %s, %.3f ms of a %.3f ms step\n", names[k], terms[k] * 1e3,
            m->step_s * 1e3);
}

int hcnn_plan_write_plots(const plan_opts *o, const char *dir, const char *title, int *written)
{
    *written = 0;
    FILE *gp = popen(o->gnuplot, "w");
    if (!gp)
        return HCNN_OK;
    fprintf(gp,
            "set terminal pngcairo size 900,600 noenhanced\n"
            "set datafile separator ','\n"
            "set logscale x 2\nset grid\nset key left top\n"
            "set xlabel 'nodes'\n");
    for (int weak = 1; weak >= 0; weak--) {
        if ((weak && !o->weak) || (!weak && !o->strong))
            continue;
        const char *sc = weak ? "weak" : "strong";
        fprintf(gp,
                "set output '%s/plan_%s.png'\n"
                "set title \"%s\\n%s scaling, %d threads per rank: projected images/s "
                "(* the recommended layout)\" noenhanced\n"
                "set ylabel 'images/s'\nset logscale y 2\n"
                "layouts = system(\"awk -F, 'NR > 1 && $1 == \\\"%s\\\" { print $3 }' "
                "'%s/plan.csv' | sort -u\")\n"
                "plot for [L in layouts] sprintf(\"< awk -F, '$1 == \\\"%s\\\" && $3 == "
                "\\\"%%s\\\"' '%s/plan.csv'\", L) using 2:9 with linespoints title L, "
                "\"< awk -F, '$1 == \\\"%s\\\" && $18 == 1' '%s/plan.csv'\" using 2:9 "
                "with points pt 3 ps 3 lc rgb 'black' title 'recommended'\n"
                "unset logscale y\n",
                dir, sc, title, sc, o->threads, sc, dir, sc, dir, sc, dir);
        fprintf(gp,
                "set output '%s/plan_%s_breakdown.png'\n"
                "set title \"%s\\n%s scaling, recommended layout: step time per term, %d threads "
                "per rank\" noenhanced\n"
                "set ylabel 'ms per step'\nset style data histograms\n"
                "set style histogram rowstacked\nset style fill solid 0.8 border -1\n"
                "unset logscale x\nset key left top\n"
                "plot '< awk -F, \"NR > 1 && \\$1 == \\\"%s\\\" && \\$18 == 1\" %s/plan.csv' "
                "using 11:xtic(stringcolumn(2).\" \".stringcolumn(3)) title 'compute', "
                "'' using 12 title 'exposed allreduce', '' using 14 title 'bubble', "
                "'' using 15 title 'point-to-point', '' using 16 title 'agreement'\n"
                "set style data lines\nset logscale x 2\nunset style\n",
                dir, sc, title, sc, o->threads, sc, dir);
    }
    const int rc = pclose(gp);
    if (rc != 0) {
        hcnn_warn("plan: %s failed (status %d): no plots (Debian: apt-get install gnuplot-nox)",
                  o->gnuplot, rc);
        return HCNN_OK;
    }
    *written = 1;
    return HCNN_OK;
}

/* The passes of the weak-scaling step on one node (its per-rank batch on
 * the target's threads): each block's forward and backward split into its
 * GEMM layers' time and its other layers' streams, and whether those
 * streams are bandwidth-bound (at the node's bandwidth shared by every
 * thread) or run at the per-thread rate measured here. */
#define PASSES_HEADER                                                                             \
    "block,name,pass,ms,gemm_ms,stream_ms,gflop,gemm_peak_share_here,stream_mbytes,streams"

void hcnn_plan_print_passes(const hcnn_net *net, const hcnn_pass_cost *c, const plan_opts *o,
                            FILE *f, int csv)
{
    if (csv)
        fprintf(f, "%s\n", PASSES_HEADER);
    else
        fprintf(f,
                "hcnn plan: passes of %d samples on %d threads of %s (activations %.1f MiB, "
                "last-level cache %.0f MiB: streams %s)\n"
                "%-5s %-14s %-8s %8s %8s %9s %8s %10s %9s %s\n",
                c->n, o->threads, o->node.name, c->footprint_bytes / 1048576.0, o->node.llc_mib,
                o->node.llc_mib > 0 && c->footprint_bytes <= o->node.llc_mib * 1048576.0
                    ? "from the cache"
                    : "from memory",
                "block", "name", "pass", "ms", "gemm_ms", "stream_ms", "gflop", "peak_share",
                "mbytes", "streams");
    int nbw = 0;
    double stream_s = 0.0, bw_s = 0.0, total = c->opt_s;
    for (int i = 0; i < net->nlayers; i++)
        for (int d = 0; d < 2; d++) {
            const double t = d ? c->bwd[i] : c->fwd[i], g = d ? c->gemm_bwd[i] : c->gemm_fwd[i],
                         fl = d ? c->flops_bwd[i] : c->flops_fwd[i],
                         by = d ? c->bytes_bwd[i] : c->bytes_fwd[i];
            const int bw = d ? c->bw_bwd[i] : c->bw_fwd[i];
            nbw += bw;
            stream_s += t - g, bw_s += bw ? t - g : 0.0, total += t;
            fprintf(f,
                    csv ? "%d,%s,%s,%.4f,%.4f,%.4f,%.4f,%.3f,%.3f,%s\n"
                        : "%-5d %-14s %-8s %8.3f %8.3f %9.3f %8.3f %10.3f %9.2f %s\n",
                    i, net->layers[i].name, d ? "backward" : "forward", t * 1e3, g * 1e3,
                    (t - g) * 1e3, fl / 1e9, c->gemm_peak_share[i], by / 1e6,
                    by <= 0 ? "-" : bw ? "bandwidth" : "per-thread");
        }
    if (csv)
        fprintf(f, "%d,optimizer,step,%.4f,0,%.4f,0,0,%.3f,%s\n", net->nlayers, c->opt_s * 1e3,
                c->opt_s * 1e3, 20.0 * net->nparams / 1e6, c->opt_bw ? "bandwidth" : "per-thread");
    else
        fprintf(f, "%-5d %-14s %-8s %8.3f %8s %9.3f %8s %10s %9.2f %s\n", net->nlayers,
                "optimizer", "step", c->opt_s * 1e3, "-", c->opt_s * 1e3, "-", "-",
                20.0 * net->nparams / 1e6, c->opt_bw ? "bandwidth" : "per-thread");
    if (!csv)
        fprintf(f,
                "hcnn plan: streams bandwidth-bound on %d threads in %d of %d passes: %.1f%% of "
                "the passes' time (all streams %.1f%%, GEMMs %.1f%%); %d phases, their barriers "
                "%.1f%%; the threads work %.0f%% of their time in the passes\n",
                o->threads, nbw + c->opt_bw, 2 * net->nlayers + 1,
                100.0 * (bw_s + (c->opt_bw ? c->opt_s : 0.0)) / total,
                100.0 * (stream_s + c->opt_s) / total, 100.0 * (1.0 - (stream_s + c->opt_s) / total),
                c->phases, 100.0 * c->barrier_s / total, 100.0 * c->thread_use);
}

/* The recommended layout at the largest node count (NULL: none, or one node) */
static const plan_row *best_at_most_nodes(const plan_row *rows, int n, int weak)
{
    const plan_row *best = NULL;
    for (int i = 0; i < n; i++)
        if (rows[i].weak == weak && rows[i].best && (!best || rows[i].lay.nodes > best->lay.nodes))
            best = &rows[i];
    return best && best->lay.nodes >= 2 ? best : NULL;
}

void hcnn_plan_print_sharding(const plan_row *now, const plan_row *flipped, int n, int weak,
                              int sharded_now, FILE *f)
{
    const plan_row *best = best_at_most_nodes(now, n, weak);
    if (!best)
        return;
    const plan_row *alt = &flipped[best - now];
    const plan_row *none = sharded_now ? alt : best, *ranks = sharded_now ? best : alt;
    char name[32];
    hcnn_plan_layout_name(&best->lay, name, sizeof name);
    fprintf(f,
            "hcnn plan: %s scaling at %d nodes, %s: optimizer_sharding: none %.1f images/s "
            "(optimiser %.3f ms, exposed allreduce %.3f ms, agreement %.3f ms); ranks %.1f "
            "images/s (optimiser %.3f ms, exposed reduce-scatter and all-gathers %.3f ms, of "
            "which all-gathers %.3f ms, agreement and norms %.3f ms): recommended "
            "optimizer_sharding: %s\n",
            weak ? "weak" : "strong", best->lay.nodes, name, none->m.images_per_s,
            none->m.opt_s * 1e3, none->m.allreduce_s * 1e3, none->m.sync_s * 1e3,
            ranks->m.images_per_s, ranks->m.opt_s * 1e3, ranks->m.allreduce_s * 1e3,
            ranks->m.gather_s * 1e3, ranks->m.sync_s * 1e3,
            ranks->m.images_per_s > none->m.images_per_s ? "ranks" : "none");
}

/* The efficiency of the recommended layout at the largest node count, priced
 * as the step was before hcnn's communication changes and as it is now. */
void hcnn_plan_print_comm_changes(const plan_row *now, const plan_row *before,
                                  const plan_row *other, int n, int weak, int thread_now, FILE *f)
{
    const plan_row *best = best_at_most_nodes(now, n, weak);
    if (!best)
        return;
    const plan_row *was = &before[best - now], *alt = &other[best - now];
    char name[32];
    hcnn_plan_layout_name(&best->lay, name, sizeof name);
    fprintf(f,
            "hcnn plan: %s scaling at %d nodes, %s: efficiency %.3f before hcnn's communication "
            "changes (agreement allreduce %.3f ms, exposed allreduce %.3f ms), %.3f now "
            "(agreement %.3f ms, exposed allreduce %.3f ms); with allreduce_progress: %s %.3f "
            "(exposed allreduce %.3f ms, compute %.3f ms)\n",
            weak ? "weak" : "strong", best->lay.nodes, name, was->efficiency,
            was->m.sync_s * 1e3, was->m.allreduce_s * 1e3, best->efficiency,
            best->m.sync_s * 1e3, best->m.allreduce_s * 1e3, thread_now ? "test" : "thread",
            alt->efficiency, alt->m.allreduce_s * 1e3, alt->m.compute_s * 1e3);
}
