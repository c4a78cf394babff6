// SPDX-License-Identifier: MIT
// The o projection and its residual add folded into the decode attention (MLXCEL_GPU_ATTN_O=1,
// L->attn_o; kernels/attn_decode.cu's launches, gpu_plan.c's pattern): t = wo att (+ bias), res += t
// for one token. wo is [rows x n_heads * D]; head h's output only meets wo's column slice
// [h D, (h + 1) D), D / 32 whole chunks (and whole quantization groups: D = 128, groups of 32-128),
// so the block that finishes head h multiplies that slice by the head's output, for one row tile
// of the matrix (the launch has a block per head (group) and tile), and leaves the partial sums in
// the scratch, part[h][row]. Across heads the sums must not depend on which block ends first
// (bit-identical runs): each block takes a ticket of its tile (L->attn_o_tickets, zero between
// launches) after a __threadfence, and the block that takes the tile's last ticket adds the heads'
// partials of each of the tile's rows in head order 0, 1, ..., adds the bias, writes t and res, and
// sets the ticket back to 0. The reduction is spread over the tiles (one last block each), not one
// block. (64-bit fixed-point atomics would give order-free sums without the scratch round trip,
// but a float32 result needs a final pass anyway (t and res, written once), whose block must know
// that every head has added: the same ticket, plus a range bound on the activations and a rounding
// of every partial to the fixed grid; the ticket alone keeps float32 sums and costs one atomic per
// block and a read of n_heads x tile floats from L2 by the last one.)
// The products: affine 4-bit only (the scale and bias type read at run time, so the attention
// kernels gain one instantiation each, not one per format), the scaled-activation dot of the
// matrix-vector kernels (kernels/matvec_scaled.cuh): each thread one 32-column chunk of a row, the
// D / 32 chunks of a row on consecutive lanes added by xor shuffles; 4 rows' words loaded before
// their first use. The sums differ from the o product record's only in float32 summation order.
#ifndef MXG_ATTN_O_CUH
#define MXG_ATTN_O_CUH

#include "backends/gpu/kernels/matvec_scaled.cuh"
#include "backends/gpu/kernels_fused.h"

namespace mxg {

constexpr int kAttnOMaxTiles = MXG_ATTN_O_MAX_TILES;  // tickets in L->attn_o_tickets

struct OFold {
    const uint8_t *w;             // wo's packed 4-bit codes [rows, row_bytes]
    const void *scales, *biases;  // [rows, groups] of type st (ST_*)
    int64_t row_bytes;
    int rows, groups, group_shift, st;
    const float *bias;            // the product's bias [rows] or NULL
    float *t, *res;               // the product's output and the residual [rows]
    float *part;                  // [n_heads, rows] scratch: each head's partial sums
    unsigned *tickets;            // [tiles], zero between launches
    int n_heads, tile_rows;
    unsigned arrivals;            // blocks per tile
};

__device__ __forceinline__ float o_scale(const void *p, int64_t i, int st) {
    if (st == ST_F32) return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return st == ST_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// L2 prefetch (MLXCEL_GPU_PDL=3, before the grid wait) of the slices of heads h0..h0+hn-1 in the
// block's tile: row by row (a slice is D / 2 bytes of each row), within budget bytes.
template <int D, int NT>
__device__ void o_fold_prefetch(const OFold &f, int h0, int hn, int tile, unsigned budget) {
    const int r0 = tile * f.tile_rows, r1 = min(f.rows, r0 + f.tile_rows);
    unsigned mine = budget / NT;
    mine &= ~15u;
    for (int i = (int)threadIdx.x; i < (r1 - r0) * hn; i += NT) {
        const int r = r0 + i / hn, h = h0 + i % hn;
        prefetch_span(f.w + (int64_t)r * f.row_bytes + (int64_t)h * (D / 2), D / 2, mine);
    }
}

// part[h][r] for the heads h0..h0+hn-1 (their outputs in xs [hn][D], shared memory) and the rows
// of the tile. Every thread of the block calls it (the loops are block-uniform).
template <int D, int W, int NT>
__device__ void o_fold_heads(const OFold &f, const float *xs, int h0, int hn, int tile) {
    constexpr int CPR = D / 32, RPP = NT / CPR, B = 4;  // chunks per row, rows per pass, passes per batch
    static_assert(CPR <= W && W % CPR == 0 && NT % CPR == 0, "a row's chunks lie in one warp");
    const int c = (int)threadIdx.x % CPR, rr = (int)threadIdx.x / CPR;
    const int r0 = tile * f.tile_rows, r1 = min(f.rows, r0 + f.tile_rows);
    for (int g = 0; g < hn; g++) {
        const int h = h0 + g;
        float xv[32];  // the chunk's staged activations (scaled_slot's form)
#pragma unroll
        for (int e = 0; e < 32; e++) xv[e] = xs[g * D + 32 * c + e] * pow2f(kScaledExp - scaled_shift<4>(e));
        const float xsum = scaled_sum<4>(xv);
        const int64_t col_byte = ((int64_t)h * D + 32 * c) / 2;
        const int group = (h * D + 32 * c) >> f.group_shift;
        for (int p0 = r0; p0 < r1; p0 += B * RPP) {  // block-uniform
            uint32_t q[B][4];
            float s[B], b[B];
#pragma unroll
            for (int k = 0; k < B; k++) {
                const int r = p0 + k * RPP + rr;
                q[k][0] = q[k][1] = q[k][2] = q[k][3] = 0u;
                s[k] = b[k] = 0.0f;
                if (r < r1) {
                    const uint4 v = *(const uint4 *)(f.w + (int64_t)r * f.row_bytes + col_byte);
                    q[k][0] = v.x, q[k][1] = v.y, q[k][2] = v.z, q[k][3] = v.w;
                    s[k] = o_scale(f.scales, (int64_t)r * f.groups + group, f.st);
                    b[k] = o_scale(f.biases, (int64_t)r * f.groups + group, f.st);
                }
            }
#pragma unroll
            for (int k = 0; k < B; k++) {
                float v = fmaf(s[k] * pow2f(149 - kScaledExp), scaled_codes_dot<4>(q[k], xv), b[k] * xsum);
#pragma unroll
                for (int off = 1; off < CPR; off <<= 1) v += mxg_shfl_xor<W>(v, off);
                const int r = p0 + k * RPP + rr;
                if (c == 0 && r < r1) f.part[(int64_t)h * f.rows + r] = v;
            }
        }
    }
}

// The block's ticket of its tile; the last block of the tile sums the heads in order and writes t
// and res. s_last: a shared flag. Every thread of the block calls it.
template <int NT>
__device__ void o_fold_finish(const OFold &f, int tile, bool *s_last) {
    __threadfence();  // this block's partials visible device-wide before its ticket
    __syncthreads();
    if (threadIdx.x == 0) *s_last = atomicAdd(&f.tickets[tile], 1u) == f.arrivals - 1;
    __syncthreads();
    if (!*s_last) return;
    __threadfence();
    const int r0 = tile * f.tile_rows, r1 = min(f.rows, r0 + f.tile_rows);
    const volatile float *part = f.part;  // written by the other blocks: not from L1
    for (int r = r0 + (int)threadIdx.x; r < r1; r += NT) {
        float acc = 0.0f;
        for (int h = 0; h < f.n_heads; h++) acc += part[(int64_t)h * f.rows + r];
        if (f.bias) acc += f.bias[r];
        f.t[r] = acc;
        f.res[r] = f.res[r] + acc;
    }
    if (threadIdx.x == 0) f.tickets[tile] = 0u;  // every block of the tile has taken its ticket
}

}  // namespace mxg

#endif
