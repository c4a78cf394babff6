// SPDX-License-Identifier: MIT
// Where a position's keys and values live in the GPU's paged KV cache (layout in kernels.h), and
// how its elements are written and read: the block table row of the token's slot names the block,
// the position's offset in the block the row. The cache is int16 with scales by default
// (MX_DTYPE_I16: the CPU's format and quantization rule, so both backends hold the same codes) or
// f16 (MLXCEL_GPU_KV=f16). Shared by the kv_store, attention and latent kernels, the only readers
// of the block table and the only code that knows the element format.
#ifndef MX_BACKENDS_GPU_KV_BLOCK_CUH
#define MX_BACKENDS_GPU_KV_BLOCK_CUH

#include <stdint.h>

#include "backends/backend.h"
#include "backends/gpu/common.cuh"

// What a kernel needs of an mx_kv_ref, as plain values.
struct KvPages {
    const int32_t *table;  // [n_slots][table_len], NULL: slot s owns blocks s * table_len ..
    int table_len, n_blocks, layer, n_kv_heads, head_dim;
    int n_scales;  // I16: scales per row, ceil(head_dim / MX_KV_SCALE_BLOCK); 0 for f16
    float *scales; // I16: the scale of row r's chunk c at scales[r * n_scales + c]; NULL for f16
};

// i16: the cache is MX_DTYPE_I16, whose scales follow the codes of every layer (backend.h,
// mx_kv_bytes): rows x head_dim int16 codes, then rows x n_scales floats, both indexed by row.
static inline KvPages kv_pages(const mx_kv_ref *r, bool i16) {
    KvPages p;
    p.table = r->table, p.table_len = mx_kv_table_len(&r->lay), p.n_blocks = mx_kv_blocks(&r->lay);
    p.layer = r->layer, p.n_kv_heads = r->lay.n_kv_heads, p.head_dim = r->lay.head_dim;
    p.n_scales = i16 ? (r->lay.head_dim + MX_KV_SCALE_BLOCK - 1) / MX_KV_SCALE_BLOCK : 0;
    const size_t rows = (size_t)r->lay.n_layers * (size_t)p.n_blocks * 2 * (size_t)p.n_kv_heads * MX_KV_BLOCK;
    p.scales = i16 ? (float *)((unsigned char *)r->kv + rows * (size_t)p.head_dim * sizeof(int16_t)) : NULL;
    return p;
}

// Index of the head_dim-long row of (slot, pos, K (which = 0) or V (1), KV head): its elements start
// at row * head_dim, its I16 scales at row * n_scales. A block's V rows are n_kv_heads * MX_KV_BLOCK
// rows after its K rows.
__device__ __forceinline__ int64_t kv_row_index(const KvPages &p, int slot, int pos, int which, int head) {
    const int i = slot * p.table_len + pos / MX_KV_BLOCK;
    const int64_t b = p.table ? p.table[i] : i;
    return ((((int64_t)p.layer * p.n_blocks + b) * 2 + which) * p.n_kv_heads + head) * MX_KV_BLOCK + pos % MX_KV_BLOCK;
}

// Element d of row `row` as float32. kv points at the cache (int16 codes when I16, else f16 bits).
template <bool I16>
__device__ __forceinline__ float kv_value(const KvPages &p, const uint16_t *__restrict__ kv, int64_t row, int d) {
    if constexpr (I16)
        return (float)((const int16_t *)kv)[row * p.head_dim + d] * p.scales[row * p.n_scales + d / MX_KV_SCALE_BLOCK];
    else
        return f16_to_f32(kv[row * p.head_dim + d]);
}

// Two consecutive elements (the 32-bit word w; the first element in its low half) as float32, codes
// only for I16 (the caller applies the scale of their chunk: chunks have an even length).
template <bool I16>
__device__ __forceinline__ float2 kv_pair(uint32_t w) {
    if constexpr (I16) {
        return make_float2((float)(int16_t)(uint16_t)(w & 0xffffu), (float)(int16_t)(uint16_t)(w >> 16));
    } else {
        return make_float2(f16_to_f32((uint16_t)(w & 0xffffu)), f16_to_f32((uint16_t)(w >> 16)));
    }
}

// Eight consecutive elements (a 16-byte load of a row) as float32, codes only for I16 (the caller
// applies the scale: 8 elements aligned to 8 lie in one MX_KV_SCALE_BLOCK chunk). An int16 code c
// becomes exact float arithmetic without a conversion instruction: the bits 0x4B000000 | (c + 32768)
// are the float 2^23 + c + 32768, so one integer op and one subtraction per element (conversions
// issue at a quarter of the rate of adds on NVIDIA parts, and the decode attention runs one per byte).
template <bool I16>
__device__ __forceinline__ void kv_unpack8(const uint4 &w, float (&x)[8]) {
    const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (I16) {
            const uint32_t u = ws[i] ^ 0x80008000u;  // both codes offset by 32768, now unsigned
            x[2 * i] = __uint_as_float(0x4B000000u | (u & 0xffffu)) - 8421376.0f;  // 2^23 + 32768
            x[2 * i + 1] = __uint_as_float(0x4B000000u | (u >> 16)) - 8421376.0f;
        } else {
            const float2 f = kv_pair<false>(ws[i]);
            x[2 * i] = f.x, x[2 * i + 1] = f.y;
        }
    }
}

// Writes one chunk of at most MX_KV_SCALE_BLOCK values of a row: x[0..len) (x[len..] must be 0) as
// I16 codes at `codes` with their scale at *scale, by the CPU's rule (cpu_attention.c, store_rows):
// s = max|x| / 32767, code = round-to-nearest-even(x * (32767 / max|x|)), in IEEE float32 (no
// fast-math: the build refuses it), so both backends hold the same codes for the same values.
__device__ __forceinline__ void kv_put_chunk(int16_t *codes, float *scale, const float (&x)[MX_KV_SCALE_BLOCK],
                                             int len) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < MX_KV_SCALE_BLOCK; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    const float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
#pragma unroll
    for (int i = 0; i < MX_KV_SCALE_BLOCK; i++)
        if (i < len) codes[i] = (int16_t)__float2int_rn(x[i] * inv);
    *scale = amax / 32767.0f;
}

// Writes chunk c of cache row `row` (layout p) from the row's float32 values src[0..head_dim): its
// MX_KV_SCALE_BLOCK values (fewer at the row's end, zero-padded) by kv_put_chunk.
__device__ __forceinline__ void kv_store_chunk(int16_t *kv, const KvPages &p, int64_t row, int c,
                                               const float *__restrict__ src) {
    const int d0 = c * MX_KV_SCALE_BLOCK, len = min(MX_KV_SCALE_BLOCK, p.head_dim - d0);
    float x[MX_KV_SCALE_BLOCK];
#pragma unroll
    for (int j = 0; j < MX_KV_SCALE_BLOCK; j++) x[j] = j < len ? src[d0 + j] : 0.0f;
    kv_put_chunk(kv + row * p.head_dim + d0, p.scales + row * p.n_scales + c, x, len);
}

#endif
