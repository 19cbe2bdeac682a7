/* The HCNN_* environment variables hcnn's own code reads, one macro per
 * name: every getenv/setenv of one in src/ goes through these, so that
 * this list is the whole of that second channel beside the configuration
 * file and the command line.  None is a way to configure a run: each is a
 * test switch, a diagnostic to compare two code paths, or a hand-over
 * between a process and itself (its re-execution, or the preinit before
 * main).  docs/environment.md lists them with those the tests, scripts,
 * bench/ and slurm/ read, and says who sets each.
 *
 * Only macros (string literals): C, C++ (the CUDA emulation) and nvcc
 * include it, and the preinit (src/cli/preinit.c) uses one before libc's
 * allocator may be called. */
#ifndef HCNN_ENV_H
#define HCNN_ENV_H

/* ---- test switches (tests/ sets them; a user never needs one) ------------ */

/* "rank:step": that rank's step gives a non-finite loss, to test that one
 * failing rank ends the job; "rank:step:collective": it enters a barrier no
 * other rank enters, to test the stall watchdog (src/train/run.c;
 * tests/integration/test_faults.sh, test_data_parallel.sh, test_pipeline.sh,
 * test_sharding.sh). */
#define HCNN_ENV_FAIL_AT "HCNN_FAIL_AT"

/* A backend's name that replaces the configuration's `device` (e.g.
 * cpu-devmem: the CPU backend behind memory the host cannot touch, so the
 * device-memory seams run without a GPU; src/train/run.c, src/cpu/devmem.c;
 * tests/integration/test_seam.sh). */
#define HCNN_ENV_BACKEND "HCNN_BACKEND"

/* "1": the emulated CUDA device's memory is taken as MPI-ready (in place),
 * standing in for a CUDA-aware MPI library's answer; ignored on a real
 * device (src/parallel/comm.c; tests/integration/test_cuda.sh). */
#define HCNN_ENV_MPI_ASSUME_DEVICE_AWARE "HCNN_MPI_ASSUME_DEVICE_AWARE"

/* The CUDA emulation's device memory in MiB, 1 to 16777216 (default 4096;
 * src/cuda/emu/memory.cc; tests/integration/test_cuda.sh, tests/unit/test_cuda_emu.cc). */
#define HCNN_ENV_EMU_DEVICE_MB "HCNN_EMU_DEVICE_MB"

/* ---- diagnostics: compare two code paths of the same result ------------- */

/* CUDA convolutions: auto (default: cuDNN for the passes it was measured
 * faster on), cudnn (every pass it has an algorithm for) or im2col (none);
 * src/cuda/conv_cudnn.cu; tests/integration/test_cuda.sh, bench/gpu_check.sh. */
#define HCNN_ENV_CUDA_CONV "HCNN_CUDA_CONV"
/* The CUDA backend's activation layout (include/hcnn/backend.h,
 * hcnn_act_layout): auto (default: nchw), nchw or nhwc; src/cuda/backend.cu;
 * tests/integration/test_cuda.sh, tests/conformance. */
#define HCNN_ENV_CUDA_LAYOUT "HCNN_CUDA_LAYOUT"
/* The CUDA convolution's chunk (floats of columns and output, default
 * 32 Mi): a test's small shapes in several chunks (src/cuda/backend.cu,
 * conv.cu; tests/integration/test_cuda.sh). */
#define HCNN_ENV_CUDA_CHUNK_FLOATS "HCNN_CUDA_CHUNK_FLOATS"

/* "mpi": the gradient allreduce sums with MPI_SUM on one core instead of
 * hcnn's sum over the OpenMP team (allreduce_progress: test), and hcnn plan
 * prices it so; read by hcnn_grad_sum_mpi (src/parallel/grad_sync.c) only;
 * tests/integration/test_plan.sh. */
#define HCNN_ENV_GRAD_SUM "HCNN_GRAD_SUM"

/* A file each rank of `hcnn train` appends one line to per batch it
 * trains on ("epoch=E first=F n=N images_crc32=X labels_crc32=Y"; with
 * several ranks FILE.RANK): the C API's loader is checked against it
 * (src/train/train.c; tests/python/test_loader.py). */
#define HCNN_ENV_TRACE_BATCHES "HCNN_TRACE_BATCHES"

/* ---- internal hand-overs (hcnn sets and reads them itself) -------------- */

/* blas_kernels (src/blas/select.c): the program re-executes itself once
 * with OPENBLAS_CORETYPE set, since OpenBLAS reads it only when it loads.
 * WANT: the kernels the re-execution asked for (unset by the re-executed
 * process once it has them); NOTE: the run header's line on why these
 * kernels (its presence also says: do not choose again); ORIGINAL_CORETYPE:
 * the user's OPENBLAS_CORETYPE from before hcnn set its own. */
#define HCNN_ENV_BLAS_WANT "HCNN_BLAS_WANT"
#define HCNN_ENV_BLAS_NOTE "HCNN_BLAS_NOTE"
#define HCNN_ENV_BLAS_ORIGINAL_CORETYPE "HCNN_BLAS_ORIGINAL_CORETYPE"
/* the three's common prefix: the measurement's children (src/blas/measure.c)
 * start without any of them */
#define HCNN_ENV_BLAS_PREFIX "HCNN_BLAS_"

/* The name under which the preinit (src/cli/preinit.c) hides an
 * OMP_NUM_THREADS value it refuses from libgomp and OpenBLAS, renamed in
 * place (so the same length as OMP_NUM_THREADS), for hcnn_threads_resolve
 * (src/core/threads.c) to report. */
#define HCNN_ENV_BAD_OMP_NT "HCNN_BAD_OMP_NT"

#endif
