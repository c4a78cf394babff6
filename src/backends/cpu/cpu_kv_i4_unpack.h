// SPDX-License-Identifier: MIT
// The I4 cache's codes (cpu_kv_i4.c: c + 8 for c in -8..7, two a byte, element 2k in the low nibble
// of byte k) as bytes in element order, for the integer P.V (cpu_kernels_attn_vnni_pv.c), which
// takes them where it takes the I8 cache's codes: 64 values a vector, each byte the unsigned code
// c + 8 (0..15, `vpdpbusd`'s unsigned operand as it is; the kernel removes the offset 8 with a sum
// of the other operand's bytes). Private to src/backends/cpu/.
#ifndef MX_BACKENDS_CPU_KV_I4_UNPACK_H
#define MX_BACKENDS_CPU_KV_I4_UNPACK_H

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/cpu_simd_targets.h"

// The unsigned codes of values 0..n-1 (n: 32 or 64) of the 32 bytes at src; bytes n..63 are 0.
// Byte k's two nibbles go to bytes 2k and 2k + 1: within each 128-bit lane the byte unpacks give
// values [0, 16) and [16, 32) of the low half (bytes 0..15) and [32, 48), [48, 64) of the high half,
// which the 128-bit lane shuffle puts in order.
CPU_TARGET_VNNI_INLINE static __m512i cpu_i4_unpack64(const void *src, int n) {
    __m256i b = _mm256_maskz_loadu_epi8(n >= 64 ? 0xffffffffu : 0xffffu, src), nib = _mm256_set1_epi8(15);
    __m256i lo = _mm256_and_si256(b, nib), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi8(lo, hi)), _mm256_unpackhi_epi8(lo, hi), 1);
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
}

#endif
#endif
