// SPDX-License-Identifier: MIT
// The asynchronous global -> shared copies (cp.async, sm_80+) and the packed bf16 arithmetic that the
// pipelined prefill product (vendor/cuda/matmul_pipe.cu) uses, behind inline functions so that the
// host emulation (tests/gpu/mma_emulation/emu_pipe.h, which defines this header's guard) can put
// its own versions under the kernel's unchanged source: there a copy lands at once and the waits
// do nothing. Packed registers hold two bf16 values, the lower index in the lower half.
#ifndef MXG_CP_ASYNC_CUH
#define MXG_CP_ASYNC_CUH

#include <stdint.h>

#include <cuda_runtime.h>

__device__ __forceinline__ uint32_t mxg_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16 bytes (both addresses 16-byte aligned), cached in L2 only.
__device__ __forceinline__ void mxg_cp_async16(void *smem, const void *gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(mxg_smem_u32(smem)), "l"(gmem));
#else
    (void)smem, (void)gmem;
#endif
}

// 4 bytes (both addresses 4-byte aligned).
__device__ __forceinline__ void mxg_cp_async4(void *smem, const void *gmem) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(mxg_smem_u32(smem)), "l"(gmem));
#else
    (void)smem, (void)gmem;
#endif
}

// Closes the group of copies issued since the previous commit.
__device__ __forceinline__ void mxg_cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N of this thread's committed groups are still in flight (a barrier then makes
// every thread's landed copies visible to the block).
template <int N>
__device__ __forceinline__ void mxg_cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// a * b + c per half, rounded once to bf16 (nearest even).
__device__ __forceinline__ uint32_t mxg_bf16x2_fma(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
#else
    (void)a, (void)b, (void)c;
#endif
    return d;
}

// bf16(lo) in the lower half, bf16(hi) in the upper, each rounded to nearest even.
__device__ __forceinline__ uint32_t mxg_pack_bf16x2(float lo, float hi) {
    uint32_t d = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
#else
    (void)lo, (void)hi;
#endif
    return d;
}

// Lets kernel k use `bytes` of dynamic shared memory (over the default 48 KB); once per kernel.
template <class K>
static inline void mxg_allow_smem(K *k, size_t bytes) {
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

#endif
