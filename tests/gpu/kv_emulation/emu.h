// SPDX-License-Identifier: MIT
// Host emulation of the part of the CUDA dialect that the KV cache kernels (kernels/rope_kv.cu,
// attention.cu, latent.cu) and the sampling kernels (kernels/sample.cu, sample_split.cu) use, so
// their index arithmetic and their results can be checked on a machine without a GPU: a launch
// runs the blocks one after another, each CUDA thread a fiber of the calling thread (its own stack,
// switched in user space) that runs until it reaches a barrier (__syncthreads, or a warp's shuffle,
// where the warp's lanes trade values; warps of 32 or, with a launch's warp of 64, AMD's 64 lanes), __shared__ variables as statics (one block runs at a time),
// atomics as plain read-modify-writes (one fiber runs at a time), global memory shared by every
// block, f16 conversions from core/dtype.h. Float arithmetic is the host's (glibc expf, fmaf), so
// results match the device to float32 rounding, not bit for bit; two kernels emulated here with the
// same arithmetic do agree bit for bit. Not a device: memory errors show only under the host's
// sanitizers, races between barriers show in one order only, timing means nothing. The tensor-core
// instruction of vendor/cuda/mma_m16n8k16.cuh is here too (this file defines that header's guard):
// the warp's fragments gathered and multiplied by the PTX ISA's layout, products exact, sums in
// float32 in k order (the device's tensor cores sum in another order).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>
using std::min; using std::max;
extern "C" {
#include "core/dtype.h"
}
#define MXG_COMPAT_H
#define __device__
#define __global__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __align__(x) alignas(x)
#define MXG_WARP_ONLY(W)
#define MXG_WARP_DISPATCH(warp, ...) do { if ((warp) == 64) { constexpr int W = 64; __VA_ARGS__; } else { constexpr int W = 32; __VA_ARGS__; } } while (0)
typedef void *gpuStream_t;
// The dynamic shared memory declared in included headers (kernels/matvec.cuh) by kernels the
// emulated file does not instantiate (to_host.py rewrites the file's own declarations).
#define __shared__
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3() {} dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
extern dim3 threadIdx, blockIdx;  // set for the running fiber
extern dim3 blockDim, gridDim;
struct __half_raw { uint16_t x; };
struct __half { uint16_t x; __half() {} __half(__half_raw r) : x(r.x) {} operator __half_raw() const { return {x}; } };
struct uint4 { uint32_t x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct float4 { float x, y, z, w; };
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
struct float2 { float x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float __half2float(__half h) { return mx_f16_to_f32(h.x); }
inline __half __float2half_rn(float f) { __half h; h.x = mx_f32_to_f16(f); return h; }
inline int __float2int_rn(float f) { return (int)lrintf(f); }
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float __expf(float x) { return expf(x); }
inline void __threadfence() {}
template <class T> inline T __ldcg(const T *p) { return *p; }
template <class T> inline T atomicAdd(T *p, T v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicMax(T *p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <class T> inline T atomicMin(T *p, T v) { T old = *p; *p = old < v ? old : v; return old; }
void __syncthreads();
uint32_t emu_xchg(uint32_t v, int src_lane, int width);  // a warp of `width` lanes trades: v of src_lane
template <int W> inline int mxg_shfl_xor(int v, int mask) { return (int)emu_xchg((uint32_t)v, (int)(threadIdx.x % W) ^ mask, W); }
template <int W> inline float mxg_shfl_xor(float v, int mask) { return __uint_as_float(emu_xchg(__float_as_uint(v), (int)(threadIdx.x % W) ^ mask, W)); }
template <int W> inline float mxg_shfl(float v, int lane) { return __uint_as_float(emu_xchg(__float_as_uint(v), lane, W)); }
// Every lane of the caller's warp (`width` lanes) gives `count` (<= 16) words; all[lane * count + i]
// gets lane's word i, for every lane of the warp.
void emu_warp_gather(const uint32_t *mine, int count, uint32_t *all, int width);
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (vendor/cuda/mma_m16n8k16.cuh): d += A * B.
// Fragments by the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"), lane =
// 4 g + t: A register r holds row g + 8 (r % 2), columns 2t + 8 (r / 2) and the one after (low
// half first); B register r holds k rows 2t + 8 r and the one after, column g; d[e] is row g + 8 (e / 2),
// column 2t + e % 2.
#define MXG_MMA_M16N8K16_CUH
// One warp's product with `half` decoding element k's 16 bits of a register (bf16 or f16).
template <class Half>
inline void emu_mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, Half half) {
    const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
    uint32_t all[32 * 6];
    emu_warp_gather(mine, 6, all, 32);
    auto A = [&](int row, int k) { return half(all[((row % 8) * 4 + (k % 8) / 2) * 6 + row / 8 + 2 * (k / 8)], k); };
    auto B = [&](int k, int col) { return half(all[(col * 4 + (k % 8) / 2) * 6 + 4 + k / 8], k); };
    const int lane = (int)(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; e++) {
        float s = d[e];
        for (int k = 0; k < 16; k++) s += A(g + 8 * (e / 2), k) * B(k, 2 * t + e % 2);
        d[e] = s;
    }
}
inline void mxg_mma_bf16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emu_mma_m16n8k16(d, a, b0, b1, [](uint32_t reg, int k) { return __uint_as_float(k % 2 ? reg & 0xffff0000u : reg << 16); });
}
// The f16 form (mxg_mma_f16_m16n8k16): the same layout, each half an IEEE f16.
inline void mxg_mma_f16_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    emu_mma_m16n8k16(d, a, b0, b1, [](uint32_t reg, int k) { return mx_f16_to_f32((uint16_t)(k % 2 ? reg >> 16 : reg & 0xffffu)); });
}
unsigned char *emu_smem();
void emu_launch(dim3 g, dim3 b, size_t smem, std::function<void()> k);
// The most dynamic shared memory a launch may ask for: 48 KB, the device's default; a test of a
// kernel that raises its own limit (cudaFuncSetAttribute) raises this (up to sm_90's 227 KB).
extern size_t emu_smem_max;
// Every launch's grid and dynamic shared memory, appended in order; tests clear them.
extern std::vector<dim3> emu_grids;
extern std::vector<size_t> emu_smem_sizes;
// compat.h's function attribute: a kernel's raised dynamic shared memory limit raises emu_smem_max.
#define gpuFuncAttributeMaxDynamicSharedMemorySize 8
inline int gpuFuncSetAttribute(const void *, int attr, int bytes) {
    if (attr == gpuFuncAttributeMaxDynamicSharedMemorySize && (size_t)bytes > emu_smem_max) emu_smem_max = (size_t)bytes;
    return 0;
}

// Programmatic dependent launch (compat.h): launches run one after another, so the waits have
// nothing to wait for. The order a dependent launch must keep is emulated where a test lists byte
// ranges in emu_pdl_guard (what the previous kernel writes, and what the launch's own blocks write):
// each block then starts with them overwritten by 0xFF bytes (NaN as float32 and f16, -1 as
// integers) and gets their contents back when all its threads reach mxg_grid_wait (a block barrier
// then), so a block that reads them before its wait computes from garbage, one that writes them
// before it has its writes undone, and a block that ends without waiting is counted in
// emu_pdl_unwaited. Releases (mxg_grid_release calls, one per thread) count in emu_pdl_releases;
// each launch appends whether it was a dependent launch (mxg_launch_dep's flag; false for <<<>>>)
// to emu_dependent.
struct emu_span { void *p; size_t bytes; };
extern std::vector<emu_span> emu_pdl_guard;
extern long emu_pdl_unwaited, emu_pdl_releases;
extern std::vector<bool> emu_dependent;
extern bool emu_next_dependent;  // mxg_launch_dep's flag for the emu_launch it calls
void mxg_grid_wait();
inline void mxg_grid_release() { emu_pdl_releases++; }
inline void mxg_grid_wait_release(bool early) {  // compat.h: the wait, then (early) the release
    mxg_grid_wait();
    if (early) mxg_grid_release();
}
// compat.h's L2 prefetch hint: each call's range appended in order, for tests to check (inside the
// matrix's buffers, 16-byte aligned and sized); tests clear it.
struct emu_range { const void *p; unsigned bytes; };
extern std::vector<emu_range> emu_prefetches;
inline void mxg_prefetch_l2(const void *p, unsigned bytes) { emu_prefetches.push_back({p, bytes}); }
template <class... P, class... A>
inline void mxg_launch_dep(void (*k)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t, bool dependent, A... args) {
    emu_next_dependent = dependent;
    emu_launch(grid, block, smem, [=]() { k((P)args...); });
}
// compat.h's stream memset (the argmax's scratch), done at once.
inline int gpuMemsetAsync(void *p, int v, size_t bytes, gpuStream_t) { memset(p, v, bytes); return 0; }
