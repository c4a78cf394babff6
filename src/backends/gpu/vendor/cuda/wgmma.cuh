// SPDX-License-Identifier: MIT
// Hopper's warpgroup tensor-core instruction (wgmma.mma_async, sm_90a only) as the wgmma prefill
// product (vendor/cuda/matmul_wgmma.cu) uses it, behind inline functions so that the host emulation
// (tests/gpu/mma_emulation/emu_wgmma.h, which defines this header's guard) can put its own versions,
// which decode the descriptor and place the register fragments by the PTX ISA's rules, under the
// kernel's unchanged source; plus the shared-memory tile layout that the kernel's copies and its
// descriptors both follow, written once in wgmma_layout.cuh (which the emulation keeps).
//
// Operands (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Operation using
// wgmma.mma_async instructions", "Register Fragments and Shared Memory Matrix Layouts"): A (64 x 16:
// weight rows x k) in registers, B (16 x N: k x tokens, N 64 or 128) in shared memory, K-major (each
// token's k values together: transpose flag 0), without swizzle.
//   A in registers ("Matrix fragments for wgmma .m64nNk16", A): warp w of the warpgroup (w = warp %
//   4) holds rows 16 w .. 16 w + 15 laid out as mma.sync m16n8k16's A (mma_m16n8k16.cuh): with g =
//   lane / 4, t = lane % 4, register 0 row g, k 2t and 2t + 1 (lower index in the lower half);
//   register 1 row g + 8, the same k; register 2 row g, k 2t + 8, 2t + 9; register 3 row g + 8, those.
//   B in shared memory: a K-major operand without swizzle is made of core matrices of 8 rows x 16
//   bytes (8 x 8 bf16), each 128 contiguous bytes (row r of the core matrix at 16 r, element k at
//   2 k). The descriptor locates core matrix (row group i, k group j) of the operand at start + i *
//   SBO + j * LBO: the leading dimension byte offset (LBO) is the distance between core matrices
//   adjacent in k, the stride dimension byte offset (SBO) between core matrices adjacent in N.
//   Descriptor bits (64-bit): 0-13 start address >> 4 (in the shared window), 16-29 LBO >> 4, 32-45
//   SBO >> 4, 49-51 base offset (0: only for swizzled layouts), 62-63 swizzle mode (0: none). The
//   kernel's tiles are [tokens][64 k] with token group i's eight core matrices together (1 KB), so
//   LBO = 128, SBO = 1024, and the k16 slice s of a tile starts 2 s core matrices (256 s bytes) in.
//
// Accumulators (the same section, D): warp w holds rows 16 w .. 16 w + 15 of the 64 x N float32
// result; register i of a thread holds row 16 w + g + 8 ((i / 2) % 2), column 8 (i / 4) + 2 t + i % 2
// (per 8-column block the mma.sync m16n8 layout).
//
// Ordering: the instruction runs asynchronously; it reads B through the async proxy and A and the
// accumulators from registers at some time before its wait_group returns. Shared memory written by
// cp.async must be made visible to it with fence.proxy.async (by the writing thread, before the
// barrier that publishes the writes); wgmma.fence orders the warpgroup's earlier register and
// shared accesses before the next wgmma.mma_async; commit_group closes the products issued since
// the previous commit and wait_group N returns when at most N of the warpgroup's groups are still
// running. Until then neither their shared operands nor their A registers nor the accumulators may
// be written (or the accumulators read).
#ifndef MXG_WGMMA_CUH
#define MXG_WGMMA_CUH

#include <stdint.h>

#include "backends/gpu/vendor/cuda/wgmma_layout.cuh"

// Orders this warpgroup's earlier register and shared-memory accesses before its next wgmma.mma_async.
__device__ __forceinline__ void mxg_wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

// Makes this thread's earlier shared-memory writes (stores, landed cp.async) visible to the async proxy.
__device__ __forceinline__ void mxg_fence_proxy_async() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void mxg_wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void mxg_wgmma_wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Keeps the compiler from moving accumulator or A-fragment registers across the asynchronous region
// (every register an asm operand that may change), as the PTX ISA asks of registers a wgmma in
// flight reads or writes.
template <int R>
__device__ __forceinline__ void mxg_wgmma_touch(float (&d)[R]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
#else
    (void)d;
#endif
}
template <int R>
__device__ __forceinline__ void mxg_wgmma_touch(uint32_t (&a)[R]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+r"(a[i])::"memory");
#else
    (void)a;
#endif
}

// d (64 x 128 float32, the layout above) += A (64 x 16 bf16: this thread's fragment a) * B (16 x 128
// bf16: descriptor db); issued by all 128 threads of a warpgroup together, asynchronously.
__device__ __forceinline__ void mxg_wgmma_m64n128k16_rs_bf16(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
#else
    (void)d, (void)a, (void)db;
#endif
}

// d (64 x 64 float32, the layout above) += A (64 x 16 bf16: this thread's fragment a) * B (16 x 64
// bf16: descriptor db); issued by all 128 threads of a warpgroup together, asynchronously.
__device__ __forceinline__ void mxg_wgmma_m64n64k16_rs_bf16(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
#else
    (void)d, (void)a, (void)db;
#endif
}

#endif
