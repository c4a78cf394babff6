// SPDX-License-Identifier: MIT
// The shared-memory tile layout of the wgmma prefill product (vendor/cuda/matmul_wgmma.cu) and the
// matrix descriptor that points wgmma.mma_async at it (the rules: vendor/cuda/wgmma.cuh's header),
// written once for the kernel's writers (the cp.async copies of the activations, wgmma's B operand)
// and its descriptors, and used unchanged by the host emulation
// (tests/gpu/mma_emulation/emu_wgmma.h), whose wgmma decodes the descriptors by the PTX ISA's rules.
#ifndef MXG_WGMMA_LAYOUT_CUH
#define MXG_WGMMA_LAYOUT_CUH

#include <stdint.h>

// Byte offset of element (r, k) (k < 64) of a [rows][64] bf16 tile in the layout above.
__host__ __device__ __forceinline__ uint32_t mxg_wg_offset(int r, int k) {
    return (uint32_t)((r >> 3) * 1024 + (k >> 3) * 128 + (r & 7) * 16 + (k & 7) * 2);
}
#define MXG_WG_LBO 128u   // core matrices adjacent in k
#define MXG_WG_SBO 1024u  // core matrices adjacent in rows (8-row groups)

// The descriptor of a no-swizzle K-major operand at shared-window address `addr` (16-byte aligned).
__host__ __device__ __forceinline__ uint64_t mxg_wgmma_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr >> 4) & 0x3fffu) | (uint64_t)((lbo >> 4) & 0x3fffu) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fffu) << 32;  // base offset 0, swizzle mode 0 (bits 62-63)
}

#endif
