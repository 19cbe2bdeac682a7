/* oneDNN, the library behind precision: bf16 on the CPU (configure
 * --with-onednn; Debian's libdnnl-dev 2.6.3, OpenMP runtime).
 *
 * Debian's OpenBLAS has no bf16 GEMM; oneDNN's matmul runs bf16 GEMMs with
 * the AVX512-BF16 instructions (avx512_core_bf16) or AMX tiles
 * (avx512_core_amx).  On a CPU without them oneDNN would emulate bf16,
 * several times slower than FP32: hcnn never lets it, it refuses
 * precision: bf16 there instead (hcnn_cpu_bf16_supported).
 *
 * oneDNN reads ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) once, at its first
 * query: AVX512_CORE or AVX2 caps what it dispatches, which is how a CPU
 * without bf16 is imitated (tests/integration/test_cli.sh).
 *
 * Every function here works in a build without oneDNN too (HAVE_ONEDNN
 * unset), where it says so; none keeps state of its own. */
#ifndef HCNN_ONEDNN_H
#define HCNN_ONEDNN_H

#include <stddef.h>

/* 1 when this hcnn was built with oneDNN (configure found it), else 0. */
int hcnn_onednn_linked(void);

/* The oneDNN loaded, from dnnl_version(): "oneDNN 2.6.3 (commit N/A)"
 * (Debian's build records no commit); "none" in a build without oneDNN.
 * Written to buf (cap bytes, truncated to fit); returns buf. */
const char *hcnn_onednn_version(char *buf, size_t cap);

/* The instruction set oneDNN dispatches here, dnnl_get_effective_cpu_isa()
 * after ONEDNN_MAX_CPU_ISA's cap, by oneDNN's name for it: "avx512_core_amx",
 * "avx512_core_bf16", "avx512_core_vnni", "avx512_core", "avx2_vnni",
 * "avx2", "avx", "sse41" (another value: "isa 0x..."); "none" in a build
 * without oneDNN.  Written to buf; returns buf. */
const char *hcnn_onednn_isa(char *buf, size_t cap);

/* hcnn --version's line after "oneDNN: ": "2.6.3 (commit N/A), dispatches
 * avx512_core_amx", or "none (./configure --with-onednn ...)".  Written to
 * buf; returns buf. */
const char *hcnn_onednn_describe(char *buf, size_t cap);

/* 1 when this CPU runs bf16 natively through oneDNN: the ISA it dispatches
 * is avx512_core_bf16 or above (avx512_core_amx ...), and its CPU runtime
 * is OpenMP.  Else 0, and why (cap bytes; may be NULL when cap is 0) holds
 * one sentence without a final period: the instructions missing
 * (avx512_bf16, amx_bf16: the names of /proc/cpuinfo's flags), the CPU
 * (its model name, or "this CPU"), the ISA oneDNN dispatches, and that
 * ONEDNN_MAX_CPU_ISA caps it when that is set; in a build without oneDNN,
 * "hcnn was built without oneDNN: install libdnnl-dev and rerun
 * ./configure (--with-onednn)".  On 1, why is "". */
int hcnn_cpu_bf16_supported(char *why, size_t cap);

#endif
