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
// sanitizers, races between barriers show in one order only, timing means nothing.
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
#define __restrict__ __restrict
#define __launch_bounds__(x)
#define __align__(x) alignas(x)
#define MXG_WARP_ONLY(W)
#define MXG_WARP_DISPATCH(warp, ...) do { if ((warp) == 64) { constexpr int W = 64; __VA_ARGS__; } else { constexpr int W = 32; __VA_ARGS__; } } while (0)
typedef void *gpuStream_t;
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3() {} dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
extern dim3 threadIdx, blockIdx;  // set for the running fiber
extern dim3 blockDim, gridDim;
struct __half_raw { uint16_t x; };
struct __half { uint16_t x; __half() {} __half(__half_raw r) : x(r.x) {} operator __half_raw() const { return {x}; } };
struct uint4 { uint32_t x, y, z, w; };
struct float2 { float x, y; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float __half2float(__half h) { return mx_f16_to_f32(h.x); }
inline __half __float2half_rn(float f) { __half h; h.x = mx_f32_to_f16(f); return h; }
inline int __float2int_rn(float f) { return (int)lrintf(f); }
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float __expf(float x) { return expf(x); }
inline void __threadfence() {}
template <class T> inline T atomicAdd(T *p, T v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicMax(T *p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <class T> inline T atomicMin(T *p, T v) { T old = *p; *p = old < v ? old : v; return old; }
void __syncthreads();
uint32_t emu_xchg(uint32_t v, int src_lane, int width);  // a warp of `width` lanes trades: v of src_lane
template <int W> inline int mxg_shfl_xor(int v, int mask) { return (int)emu_xchg((uint32_t)v, (int)(threadIdx.x % W) ^ mask, W); }
template <int W> inline float mxg_shfl_xor(float v, int mask) { return __uint_as_float(emu_xchg(__float_as_uint(v), (int)(threadIdx.x % W) ^ mask, W)); }
template <int W> inline float mxg_shfl(float v, int lane) { return __uint_as_float(emu_xchg(__float_as_uint(v), lane, W)); }
unsigned char *emu_smem();
void emu_launch(dim3 g, dim3 b, size_t smem, std::function<void()> k);
