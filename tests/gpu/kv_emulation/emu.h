// SPDX-License-Identifier: MIT
// Host emulation of the part of the CUDA dialect that the KV cache kernels use (kernels/rope_kv.cu,
// attention.cu, latent.cu), so their index arithmetic and their results can be checked on a machine
// without a GPU: a launch runs the blocks one after another, each CUDA thread a std::thread, barriers
// for __syncthreads and for each warp's shuffles, __shared__ variables as statics (one block runs
// at a time), f16 conversions from core/dtype.h. Float arithmetic is the host's (glibc expf, fmaf),
// so results match the device to float32 rounding, not bit for bit. Not a device: memory errors
// show only under the host's sanitizers, timing means nothing.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>
#include <algorithm>
#include <memory>
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
#define MXG_WARP_DISPATCH(warp, ...) do { (void)(warp); constexpr int W = 32; __VA_ARGS__; } while (0)
typedef void *gpuStream_t;
struct dim3 { unsigned x = 1, y = 1, z = 1; dim3() {} dim3(unsigned a, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
extern thread_local dim3 threadIdx, blockIdx;
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
void __syncthreads();
float emu_xchg(float v, int src_lane);
template <int W> inline float mxg_shfl_xor(float v, int mask) { return emu_xchg(v, (int)(threadIdx.x % W) ^ mask); }
template <int W> inline float mxg_shfl(float v, int lane) { return emu_xchg(v, lane); }
unsigned char *emu_smem();
void emu_launch(dim3 g, dim3 b, size_t smem, std::function<void()> k);
