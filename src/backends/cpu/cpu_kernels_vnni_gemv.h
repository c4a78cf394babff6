// SPDX-License-Identifier: MIT
// What the two integer gemv kernels (cpu_kernels_vnni.c, the plain one; cpu_kernels_vnni_eq.c, the
// one bit-equal to the batched product) share: rows per pass, the prefetch distance of the weight
// streams, the prefetch of the scale and bias streams, and the 4-bit layout's chunk and padded
// group counts. Included after immintrin.h by x86-64 code only.
#ifndef MLXCEL_CPU_KERNELS_VNNI_GEMV_H
#define MLXCEL_CPU_KERNELS_VNNI_GEMV_H

#include <stdint.h>

#include "backends/cpu/cpu_simd_targets.h"
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

// The scale and bias streams are 16-32x thinner than the weights; without a prefetch of their own
// their misses showed up as the hottest instruction (perf). Fetches the scales and biases of the NR
// rows that the weight prefetch (VNNI_PREFETCH bytes ahead) is reaching.
CPU_TARGET_VNNI_INLINE static void prefetch_scales(const mx_matrix *w, int64_t r, int NR, int64_t row_bytes,
                                                   int64_t groups) {
    int64_t ahead = r + NR + VNNI_PREFETCH / row_bytes, total = w->rows * w->n_experts;
    if (ahead + NR > total) return;
    int ssz = w->scale_dtype == MX_DTYPE_F32 ? 4 : w->scale_dtype == MX_DTYPE_U8 ? 1 : 2;
    const char *ps = (const char *)w->scales + ahead * groups * ssz, *pb = (const char *)w->biases + ahead * groups * ssz;
    for (int64_t off = 0; off < NR * groups * ssz; off += 64) {
        _mm_prefetch(ps + off, _MM_HINT_T0);
        _mm_prefetch(pb + off, _MM_HINT_T0);
    }
}

// 4-bit layout sizes: 128-column chunks, and the padded group count pg (whole chunks).
static int64_t q4_chunks(const mx_matrix *w) { return (w->cols + 127) / 128; }
static int64_t q4_padded_groups(const mx_matrix *w) { return q4_chunks(w) * (128 / w->q.group_size); }

#endif
