// SPDX-License-Identifier: MIT
// What the two integer gemv kernels (cpu_kernels_vnni.c, the plain one; cpu_kernels_vnni_eq.c, the
// one bit-equal to the batched product) share: rows per pass, the prefetch distance of the weight
// streams, and the 4-bit layout's chunk and padded group counts. Included after immintrin.h by
// x86-64 code only.
#ifndef MLXCEL_CPU_KERNELS_VNNI_GEMV_H
#define MLXCEL_CPU_KERNELS_VNNI_GEMV_H

#include <stdint.h>

#include "core/quant.h"

#ifndef QNR
#define QNR 4  // rows per pass of the gemv kernel
#endif

// Bytes ahead in each weight row stream, fetched into L2 (T1): 8 KB into L2 read 4-6% faster than
// 4 KB into L1 (lab at 1 and 2 threads, bench/RESULTS.md step 5.9); the L1 fill buffers are fewer
// than the L2's outstanding misses, and a stream from DRAM needs many in flight. The 4-bit kernel
// also fetches each line into L1 (T0) one pass of NR rows ahead: once its products cost 13
// instructions per 64 bytes, the loads waited on L2 (RESULTS round 7, step 7.2).
#ifndef VNNI_PREFETCH
#define VNNI_PREFETCH 8192
#endif

// 4-bit layout sizes: 128-column chunks, and the padded group count pg (whole chunks).
static int64_t q4_chunks(const mx_matrix *w) { return (w->cols + 127) / 128; }
static int64_t q4_padded_groups(const mx_matrix *w) { return q4_chunks(w) * (128 / w->q.group_size); }

#endif
