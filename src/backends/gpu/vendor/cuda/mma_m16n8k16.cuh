// SPDX-License-Identifier: MIT
// One warp-wide tensor-core instruction, mma.sync m16n8k16 with bf16 inputs and float32
// accumulators (sm_80+), behind an inline function so that the host emulation
// (tests/gpu/kv_emulation/emu.h, which defines this header's guard) can put its own version of the
// same function under a kernel's unchanged source. Fragment layout (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"), with g = lane / 4 and t = lane % 4, each 32-bit register
// two bf16 values, the lower index in the lower half:
//   A (16 x 16, row-major): a[0] row g, columns 2t, 2t+1; a[1] row g+8, columns 2t, 2t+1;
//                           a[2] row g, columns 2t+8, 2t+9; a[3] row g+8, columns 2t+8, 2t+9.
//   B (16 x 8, k by column): b0 rows (k) 2t, 2t+1 of column g; b1 rows 2t+8, 2t+9 of column g.
//   D (16 x 8, float32):     d[0], d[1] row g, columns 2t, 2t+1; d[2], d[3] row g+8, the same columns.
#ifndef MXG_MMA_M16N8K16_CUH
#define MXG_MMA_M16N8K16_CUH

#include <stdint.h>

// d += A * B for the warp's fragments (every lane of the warp calls it together).
__device__ __forceinline__ void mxg_mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)d, (void)a, (void)b0, (void)b1;
#endif
}

// The same with f16 inputs (same fragment layout, two f16 values per register): 11-bit significands
// where bf16 has 8, for operands of a bounded range (attention's scaled queries, keys, values and
// probabilities: vendor/cuda/attn_mma.cu).
__device__ __forceinline__ void mxg_mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)d, (void)a, (void)b0, (void)b1;
#endif
}

#endif
