/* The BLAS: which library (configure --with-blas) and, for OpenBLAS, which
 * of its kernels, chosen by measurement (src/blas/).
 *
 * OpenBLAS built with DYNAMIC_ARCH carries kernels for many CPU types and
 * picks one when it loads, from its own CPU tables or OPENBLAS_CORETYPE.
 * Neither is reliably the fastest for hcnn's GEMMs: on an AMD Zen 5 whose
 * environment sets OPENBLAS_CORETYPE=Haswell, ResNet-18 trains 1.5x faster
 * with the Cooperlake kernels (docs/performance.md, "BLAS kernels").  The
 * config key blas_kernels says how they are chosen:
 *   auto   the model's own GEMMs, as the layers issue them for one pass on a
 *          rank, timed under every kernel type the CPU can run (and the
 *          environment's), each in a short child process; the fastest wins
 *          unless the one that would load anyway is within 3% of it.  The
 *          table is cached per CPU model, library build, thread count and
 *          model, so only the first run on a node type pays;
 *   env    the environment's OPENBLAS_CORETYPE (or OpenBLAS's own choice);
 *   NAME   that kernel type (e.g. SkylakeX).
 * OPENBLAS_CORETYPE is read only when the library loads, so the choice is
 * applied by re-executing the program once with it set, before MPI or any
 * thread starts.  With BLIS or a generic CBLAS there is nothing to choose:
 * auto and env run the library as it is. */
#ifndef HCNN_BLAS_H
#define HCNN_BLAS_H

#include <stdio.h>

#include "hcnn/config.h"

/* First thing in main for train, eval and bench (before MPI and threads
 * start): applies cfg->blas_kernels, measuring or reading the cache.  When
 * other kernels must load, it sets the environment for a re-execution and
 * *reexec = 1: call hcnn_blas_reexec.  world: the job's ranks
 * (hcnn_blas_env_world).  Returns HCNN_OK, HCNN_EINVAL after one
 * message for kernels this library cannot load, or HCNN_STOPPED after one
 * line when SIGTERM or SIGUSR1 (blocked by main) came during the
 * measurement: its child killed, nothing cached, nothing trained. */
int hcnn_blas_choose(const hcnn_config *cfg, int world, int *reexec);
/* The same in a process that cannot re-execute itself (a library client,
 * include/hcnn/hcnn.h): nothing to do when the program chose already; auto
 * and env run the kernels loaded (no measurement: it needs the hcnn
 * program); a name must be the loaded kernels, else HCNN_EINVAL after one
 * message naming OPENBLAS_CORETYPE. */
int hcnn_blas_choose_in_process(const hcnn_config *cfg);
/* execv of argv with the chosen kernels; returns only if that fails (the
 * run then goes on with the kernels loaded, and says so). */
void hcnn_blas_reexec(char **argv);

/* hcnn tune: measures (whatever the cache holds), prints the table on out,
 * writes the cache. */
int hcnn_blas_tune(const hcnn_config *cfg, int world, FILE *out);

/* The child of a measurement (hcnn tune --probe): the model's GEMMs timed
 * under the kernels this process loaded; prints one line on stdout. */
int hcnn_blas_probe(const hcnn_config *cfg, int world);

/* The ranks of the job from the MPI launcher's environment (before
 * MPI_Init): OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_STEP_NUM_TASKS; else 1. */
int hcnn_blas_env_world(void);
/* This process's rank from the same environment (OMPI_COMM_WORLD_RANK,
 * PMI_RANK, SLURM_PROCID); else 0. */
int hcnn_blas_env_rank(void);

/* The kernels running: OpenBLAS's core type, BLIS's architecture, "" for a
 * generic CBLAS (the ranks of a job check that they agree). */
const char *hcnn_blas_kernels(void);
/* 1 if blas_kernels can name kernels (OpenBLAS), 0 for BLIS or a generic CBLAS */
int hcnn_blas_selectable(void);

/* One line for the run header: the library, its kernels and why. */
const char *hcnn_blas_describe(char *buf, int cap);
/* The file of the library hcnn's cblas_sgemm calls go to (dladdr): in a
 * process that loaded other BLAS libraries (Python with NumPy, PyTorch),
 * the one hcnn was linked against, as for the hcnn program. */
const char *hcnn_blas_library_file(char *buf, size_t cap);

/* "AMD EPYC 9B45 (family 26 model 2 stepping 1)": the first CPU of
 * /proc/cpuinfo (the BLAS cache's key; hcnn plan's header). */
void hcnn_cpu_model(char *buf, size_t cap);

/* Every BLAS call of hcnn is single-threaded: hcnn splits products into
 * pieces fixed by shape and runs them on its own threads (src/cpu/gemm.c),
 * so results do not depend on the thread count.  Also turns off BLIS's
 * small-matrix GEMM path before BLIS 1.0 (it reads past its operands:
 * src/blas/library.c).  Called by the CPU backend. */
void hcnn_blas_single_threaded(void);
/* 1 when that path is off (BLIS 0.x), else 0 */
int hcnn_blas_small_path_off(void);

/* The threads the BLAS serves at once (OpenBLAS: its pool of buffers, 128
 * in Debian's build; 0: no limit), and the gate that holds the others back
 * (src/blas/library.c says why): every BLAS call of hcnn is made between
 * enter and leave; enter waits only when the calling team has more
 * threads than that, and returns what leave needs. */
int hcnn_blas_max_callers(void);
int hcnn_blas_gate_enter(void);
void hcnn_blas_gate_leave(int entered);

/* Before anything else of a run is allocated, with `threads` OpenMP
 * threads: OpenBLAS's per-thread buffers taken (every thread makes one
 * small call), after checking that the address-space limit leaves room
 * for them (at most hcnn_blas_max_callers of them: no more are ever held
 * at once); HCNN_ENOMEM after one message saying what limit is needed
 * otherwise (OpenBLAS would wait forever for them). */
int hcnn_blas_take_buffers(int threads);

#endif
