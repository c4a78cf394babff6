// SPDX-License-Identifier: MIT
// The first launch of the pipelined tensor-core prefill product on affine 4-bit weights
// (vendor/cuda/matmul_pipe.cu): the float32 activations rounded to bf16 once per product (not once
// per block column) into L->scratch, each run of 8 columns stored in the order 0 4 1 5 2 6 3 7, the
// order in which the product's weight dequantization produces a run's codes (matmul_pipe.cu's
// header says why; the wgmma product, matmul_wgmma.cu, has its own order and its own first launch).
// In an anonymous namespace: each including file has its own copy.
#ifndef MXG_ACT_BF16_CUH
#define MXG_ACT_BF16_CUH

#include <stdint.h>

#include "backends/gpu/vendor/cuda/cp_async.cuh"

namespace {

// xb[t][k] = bf16(x[t][k]) for `runs` runs of 8 columns (x 16-byte aligned, [tokens, cols] both,
// cols % 8 == 0), each run in the order 0 4 1 5 2 6 3 7.
__global__ void act_bf16_kernel(uint4 *__restrict__ xb, const float4 *__restrict__ x, int64_t runs) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= runs) return;
    const float4 a = x[2 * i], b = x[2 * i + 1];
    xb[i] = make_uint4(mxg_pack_bf16x2(a.x, b.x), mxg_pack_bf16x2(a.y, b.y), mxg_pack_bf16x2(a.z, b.z),
                       mxg_pack_bf16x2(a.w, b.w));
}

}  // namespace

#endif
