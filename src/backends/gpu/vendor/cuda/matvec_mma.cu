// SPDX-License-Identifier: MIT
// NVIDIA tensor-core product for decode batches: out[n, rows] = x[n, cols] @ w^T (+ bias) for 2..64
// tokens (server steps of many sequences) on affine 4- and 8-bit weights, with mma.sync m16n8k16
// (vendor/cuda/mma_m16n8k16.cuh; sm_80+). kernels/matvec.cu dispatches batches of 4..64 tokens here
// by default (MLXCEL_GPU_TC_DECODE=N: N..64; 0: never); every other format, and batches of one or
// over 64 tokens, decline (-1) to the float32 kernels. ROCm builds have vendor/hip/matvec_mma.cu, which declines.
// MLXCEL_GPU_TC_WIDE=N (default off) runs batches of N..64 tokens on a wide form of the same
// arithmetic instead ("The wide form" below: its design).
//
// Why this shape: a decode batch reads every weight once whatever the batch, so the product should
// cost little more than one token; the float32 matrix-vector kernels instead spend FMAs and shared
// reads per token. Here the weights are the M operand (16 output rows per tile, two tiles per warp,
// four warps: 128 rows per block) and the tokens the N operand in tiles of 8 (NT tiles: 8, 16, 32 or
// 64 tokens, the batch padded with zeros).
//
// Precision (the float32 kernels' sums, in another order): the mma multiplies the weights' integer
// codes q, exact in bf16 (q <= 255), by the activations split in three bf16 parts x = hi + mid + lo
// (hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid): the differences are exact in float32,
// so |x - hi - mid - lo| <= 2^-24 |x|, float32's own rounding, over float32's range), with float32
// accumulation (the small parts first). The scale and bias of each 32-column chunk (a chunk never
// straddles a scale group) are applied after its mma, as the float32 kernels do: out += s * sum(q x)
// + b * sum(x), with sum(x) the float32 sum of the activations. So a result differs from the float32
// kernels' by float32 summation order, and the tests keep the float32 paths' bounds for it (2e-5
// relative L2 in test_gpu_conformance and bench_gpu_matvec); the emulation test
// (tests/gpu/mma_emulation) holds each output to 1e-6 of sum(|s q x| + |b x|) against a double
// reference. Two bf16 parts would give 16 bits (up to 2^-16 |x|: ~1.5e-5 relative L2 on random
// weights, too near those bounds); the third part costs one more mma per two, and the mma is not
// what bounds this kernel.
//
// Work split: a block stages the activations of up to 2 chunks (64 columns) of every token into
// shared memory as bf16 hi/mid/lo in the order the B fragments read them (each lane's 4 consecutive
// columns in one 16-byte hi/mid slot and one 8-byte lo slot: two shared loads per token tile and k
// step, and padded row strides so the loads of a phase hit distinct banks), with each chunk's
// float32 sum per token. Each lane reads, per chunk, 8 codes of its two rows of each tile (one 4- or
// 8-byte load). The block's loop over these slabs is software-pipelined: the next slab's codes,
// scales and biases are loaded into registers before the current slab's mma (so a block waits on
// DRAM about once, not once per slab), and the activations of a slab are loaded up to four float4
// per thread at once (one L2 round trip per 32 tokens). Blocks cover 128 rows x a range of chunks.
//
// Column splits: when the rows alone give fewer than 2 blocks per multiprocessor (a 1024-row product:
// 8 blocks), the columns are split (at least 2 chunks per split) and the splits' float32 partial
// sums are added in a fixed order (s = 0; s += partial[k] for k = 0..S-1; then + bias), so results
// do not depend on timing: up to 32 splits whose partials go to L->scratch and a second kernel
// adding them in that order (four outputs per thread where the rows allow), which with res also
// adds the sum to the residual (mxg_matvec_mma_add, the batched "matmul + residual add" of
// gpu_plan.c: res + out per element, as the add record; an unsplit product does it in its store).
// (An sm_90 variant that added the splits in a thread-block cluster's distributed shared memory
// instead of the second launch measured slower on the H200 and was removed: bench/RESULTS.md.)
// Registers (ptxas, sm_90, 4-bit / 8-bit, no spills): 126 / 150 at 8 tokens, 162 / 166 at 16,
// 218 / 232 at 32, 254 / 255 at 64.
#include "backends/gpu/dequant.cuh"
#include "backends/gpu/vendor/cuda/cp_async.cuh"
#include "backends/gpu/vendor/cuda/mma_m16n8k16.cuh"

namespace {

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kTiles = 2;                           // 16-row tiles per warp
constexpr int kBlockRows = kWarps * kTiles * 16;    // 128
constexpr int kSlabChunks = 2;                      // 32-column chunks staged at once
constexpr int kHmStride = kSlabChunks * 8 + 4;      // 16-byte hi/mid slots per staged token: 320 bytes, 64 mod 128
constexpr int kLoStride = kSlabChunks * 8 + 4;      // 8-byte lo slots per staged token: 160 bytes, 32 mod 128
constexpr int kMinChunksPerSplit = 2;
constexpr int kMaxSplits = 32;                      // partial sums in L->scratch

// Dynamic shared memory of a block of NT token tiles: the activation staging (xs, xl, xsum).
__host__ __device__ constexpr size_t smem_bytes(int nt) {
    return (size_t)nt * 8 * (kHmStride * 16 + kLoStride * 8) + kSlabChunks * nt * 8 * 4;
}

// bf16 bits of f, rounded to nearest even (finite f), in the top half of a word.
__device__ __forceinline__ uint32_t bf16_top(float f) {
    uint32_t u = __float_as_uint(f);
    return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}

// Two floats that are exact in bf16 (integer codes, or values rounded by bf16_top) as one register.
__device__ __forceinline__ uint32_t pack_exact(float lo, float hi) {
    return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);
}

// Codes j, j+1 (j even) of a lane's 8 codes of a chunk as a bf16 pair.
template <int BITS>
__device__ __forceinline__ uint32_t code_pair(const uint32_t (&w)[BITS / 4], int j) {
    const uint32_t mask = (1u << BITS) - 1u;
    const uint32_t word = w[(j * BITS) / 32];
    const int sh = (j * BITS) % 32;
    const float a = __uint_as_float(0x4b000000u | ((word >> sh) & mask)) - 8388608.0f;
    const float b = __uint_as_float(0x4b000000u | ((word >> (sh + BITS)) & mask)) - 8388608.0f;
    return pack_exact(a, b);
}

// The float32 sum of a chunk's 32 activations of one token, whose 8 quads v are held by 8 lanes in
// a row (lane % 8 = the quad), and each activation's three bf16 parts as the B fragments read them
// (hm: hi01, hi23, mid01, mid23; lo: lo01, lo23).
__device__ __forceinline__ float chunk_sum(const float (&v)[4]) {
    float s = (v[0] + v[1]) + (v[2] + v[3]);
    s += mxg_shfl_xor<32>(s, 1);
    s += mxg_shfl_xor<32>(s, 2);
    s += mxg_shfl_xor<32>(s, 4);
    return s;
}

__device__ __forceinline__ void split3(const float (&v)[4], uint4 &hm, uint2 &lo) {
    float hi[4], mid[4], lw[4];
#pragma unroll
    for (int e = 0; e < 4; e++) {
        hi[e] = __uint_as_float(bf16_top(v[e]));
        mid[e] = __uint_as_float(bf16_top(v[e] - hi[e]));
        lw[e] = __uint_as_float(bf16_top((v[e] - hi[e]) - mid[e]));
    }
    hm = make_uint4(pack_exact(hi[0], hi[1]), pack_exact(hi[2], hi[3]), pack_exact(mid[0], mid[1]),
                    pack_exact(mid[2], mid[3]));
    lo = make_uint2(pack_exact(lw[0], lw[1]), pack_exact(lw[2], lw[3]));
}

// One chunk of a warp's product: the A fragments of its two 16-row tiles from the codes q (8 per
// lane and row) and, per token tile j, the B fragments from the staged activations (token rows of
// xs / xl, the chunk's slots from slot0; xsum: the chunk's sums by token), 6 mma per tile pair and
// acc += s * sum(q x) + b * sum(x) per output (the float32 kernels' formula).
// Codes e and e + 4 of a lane's 8 4-bit codes of a chunk (one word, code e in bits 4e..4e+3) as a
// bf16 pair, from the word shifted by 4e: the two nibbles OR-ed into 0x4300 are bf16 128 + code,
// exactly, and the packed fma (v * 1 - 128) leaves the codes, exactly (as matmul_pipe.cu does).
__device__ __forceinline__ uint32_t nibble_pair(uint32_t word, int e) {
    const uint32_t v = ((word >> (4 * e)) & 0x000f000fu) | 0x43004300u;
    return mxg_bf16x2_fma(v, 0x3f803f80u, 0xc300c300u);
}

// PAIRED (4-bit only; the wide form): the mma's k pairs hold codes e, e + 4 of the lane's 8 instead
// of e, e + 1 (step s: codes 2s, 2s + 4 as columns 2t, 2t+1 and 2s+1, 2s+5 as 2t+8, 2t+9), three
// instructions per pair instead of seven; the staged activations follow (stage_paired).
template <int BITS, int NT, int HS, int LS, bool PAIRED = false>
__device__ __forceinline__ void chunk_mma(float (&acc)[kTiles][NT][4], const uint32_t (&q)[kTiles][2][BITS / 4],
                                          const float (&sb)[kTiles][2][2], const uint4 (*xs)[HS],
                                          const uint2 (*xl)[LS], const float *xsum, int slot0, int g, int t) {
    static_assert(!PAIRED || BITS == 4, "paired codes are 4-bit");
    // A fragments of both k steps: step s holds codes 4s, 4s+1 (columns 2t, 2t+1 of the mma) and
    // 4s+2, 4s+3 (columns 2t+8, 2t+9).
    uint32_t a[kTiles][2][4];
#pragma unroll
    for (int i = 0; i < kTiles; i++)
#pragma unroll
        for (int s = 0; s < 2; s++) {
            if constexpr (PAIRED) {
                a[i][s][0] = nibble_pair(q[i][0][0], 2 * s);
                a[i][s][1] = nibble_pair(q[i][1][0], 2 * s);
                a[i][s][2] = nibble_pair(q[i][0][0], 2 * s + 1);
                a[i][s][3] = nibble_pair(q[i][1][0], 2 * s + 1);
            } else {
                a[i][s][0] = code_pair<BITS>(q[i][0], 4 * s);
                a[i][s][1] = code_pair<BITS>(q[i][1], 4 * s);
                a[i][s][2] = code_pair<BITS>(q[i][0], 4 * s + 2);
                a[i][s][3] = code_pair<BITS>(q[i][1], 4 * s + 2);
            }
        }
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const uint4 b0 = xs[j * 8 + g][slot0 + t], b1 = xs[j * 8 + g][slot0 + 4 + t];
        const uint2 l0 = xl[j * 8 + g][slot0 + t], l1 = xl[j * 8 + g][slot0 + 4 + t];
        const float2 xsm = *(const float2 *)&xsum[j * 8 + 2 * t];  // tokens 2t, 2t+1 of tile j
#pragma unroll
        for (int i = 0; i < kTiles; i++) {
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mxg_mma_bf16_m16n8k16(d, a[i][0], l0.x, l0.y);
            mxg_mma_bf16_m16n8k16(d, a[i][1], l1.x, l1.y);
            mxg_mma_bf16_m16n8k16(d, a[i][0], b0.z, b0.w);
            mxg_mma_bf16_m16n8k16(d, a[i][1], b1.z, b1.w);
            mxg_mma_bf16_m16n8k16(d, a[i][0], b0.x, b0.y);
            mxg_mma_bf16_m16n8k16(d, a[i][1], b1.x, b1.y);
            // d[e]: row g + 8 (e / 2), token 2t + e % 2.
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const float *sbe = sb[i][e / 2];
                acc[i][j][e] = fmaf(sbe[0], d[e], fmaf(sbe[1], e % 2 ? xsm.y : xsm.x, acc[i][j][e]));
            }
        }
    }
}

// One slab's weights, held in registers until used: each lane's codes of its rows (8 per chunk, one
// 4- or 8-byte load per row and chunk) with the chunks' scales and biases.
template <int BITS>
struct SlabWeights {
    uint32_t q[kSlabChunks][kTiles][2][BITS / 4];
    float sb[kSlabChunks][kTiles][2][2];
};

template <int BITS, int ST>
__device__ __forceinline__ void load_slab_weights(SlabWeights<BITS> &W, const MatView &m, const int (&lrow)[kTiles][2],
                                                  int c0, int sc, int t) {
#pragma unroll
    for (int cc = 0; cc < kSlabChunks; cc++) {
        if (cc >= sc) break;
        const int c = c0 + cc;
#pragma unroll
        for (int i = 0; i < kTiles; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t *p = m.data + (int64_t)lrow[i][h] * m.row_bytes + (int64_t)c * (4 * BITS) + t * BITS;
                if constexpr (BITS == 4) {
                    W.q[cc][i][h][0] = *(const uint32_t *)p;
                } else {
                    const uint2 v = *(const uint2 *)p;
                    W.q[cc][i][h][0] = v.x, W.q[cc][i][h][1] = v.y;
                }
                const int64_t si = (int64_t)lrow[i][h] * m.groups + ((c * 32) >> m.group_shift);
                W.sb[cc][i][h][0] = load_st<ST>(m.scales, si);
                W.sb[cc][i][h][1] = load_st<ST>(m.biases, si);
            }
    }
}

// grid (ceil(rows / 128), splits). x [n, cols] 16-byte aligned; dynamic shared memory
// smem_bytes(NT). out [n, rows] when gridDim.y == 1, else partial [splits][n][rows] (bias added by
// the sum kernel); res (NULL, or [n, rows]; only unsplit): res += out, res + out per element as the
// add record.
template <int BITS, int ST, int NT>
__global__ void __launch_bounds__(kThreads) matvec_mma_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                              MatView m, const float *__restrict__ bias, int n,
                                                              int chunks_per_split, float *__restrict__ res) {
    constexpr int kTok = NT * 8;
    constexpr int kWords = BITS / 4;  // words holding a lane's 8 codes of one chunk
    constexpr int kGroup = NT < 4 ? NT : 4;  // activation float4 loads per thread in flight
    static_assert(kTok * kSlabChunks * 8 == NT * kThreads, "one float4 per thread per 8 tokens of a slab");
    // [token][chunk * 8 + step * 4 + t]: hi01, hi23, mid01, mid23 and lo01, lo23 of lane t's k step;
    // then the float32 sum of each chunk's 32 activations per token.
    extern __shared__ __align__(16) unsigned char smem_raw[];
    uint4 (*xs)[kHmStride] = reinterpret_cast<uint4 (*)[kHmStride]>(smem_raw);
    uint2 (*xl)[kLoStride] = reinterpret_cast<uint2 (*)[kLoStride]>(smem_raw + kTok * kHmStride * 16);
    float (*xsum)[kTok] = reinterpret_cast<float (*)[kTok]>(smem_raw + kTok * (kHmStride * 16 + kLoStride * 8));
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int64_t row0 = (int64_t)blockIdx.x * kBlockRows + warp * (kTiles * 16);
    const int total_chunks = m.cols / 32;
    const int c_begin = blockIdx.y * chunks_per_split;
    const int c_end = min(total_chunks, c_begin + chunks_per_split);

    // This lane's rows: tile i, half h (row g or g + 8); rows past the end read the last row.
    int lrow[kTiles][2];
#pragma unroll
    for (int i = 0; i < kTiles; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t r = row0 + i * 16 + g + 8 * h;
            lrow[i][h] = (int)(r < m.rows ? r : m.rows - 1);
        }

    float acc[kTiles][NT][4];
#pragma unroll
    for (int i = 0; i < kTiles; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    // Software pipeline: the next slab's weights (DRAM) are loaded before the current slab's mma and
    // land in registers while it runs. Each slab's activations (L2) are loaded kGroup float4 per
    // thread at a time (one round trip per 32 tokens; more at once held too many registers at 64
    // tokens), the first group before the barrier.
    SlabWeights<BITS> next;
    load_slab_weights<BITS, ST>(next, m, lrow, c_begin, min(kSlabChunks, c_end - c_begin), t);
    for (int c0 = c_begin; c0 < c_end; c0 += kSlabChunks) {
        const int sc = min(kSlabChunks, c_end - c0);
        // Item i = k * 128 + thread: token i / 16, chunk (i / 8) % 2, quad i % 8 (zeros past the
        // batch or the slab). Quad qd (columns 4qd..4qd+3 of a chunk) goes to slot
        // (qd % 2) * 4 + qd / 2: lane t's step s reads quad 2t + s, matching its codes 8t + 4s...
#pragma unroll 1
        for (int k0 = 0; k0 < NT; k0 += kGroup) {
            float4 xv[kGroup];
#pragma unroll
            for (int k = 0; k < kGroup; k++) {
                const int i = (k0 + k) * kThreads + tid, qd = i % 8, cc = (i / 8) % kSlabChunks, tok = i / (8 * kSlabChunks);
                xv[k] = float4{0.0f, 0.0f, 0.0f, 0.0f};
                if (tok < n && cc < sc) xv[k] = *(const float4 *)(x + (int64_t)tok * m.cols + (c0 + cc) * 32 + qd * 4);
            }
            if (k0 == 0) __syncthreads();  // the previous slab's readers are done
#pragma unroll
            for (int k = 0; k < kGroup; k++) {
                const int i = (k0 + k) * kThreads + tid, qd = i % 8, cc = (i / 8) % kSlabChunks, tok = i / (8 * kSlabChunks);
                const float v[4] = {xv[k].x, xv[k].y, xv[k].z, xv[k].w};
                const float s = chunk_sum(v);
                if (qd == 0) xsum[cc][tok] = s;
                const int slot = cc * 8 + (qd % 2) * 4 + qd / 2;
                split3(v, xs[tok][slot], xl[tok][slot]);
            }
        }
        // This slab's weights out of the pipeline's registers, then the next slab's loads.
        uint32_t q[kSlabChunks][kTiles][2][kWords];
        float sb[kSlabChunks][kTiles][2][2];
#pragma unroll
        for (int cc = 0; cc < kSlabChunks; cc++) {
            if (cc >= sc) break;
#pragma unroll
            for (int i = 0; i < kTiles; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int w = 0; w < kWords; w++) q[cc][i][h][w] = next.q[cc][i][h][w];
                    sb[cc][i][h][0] = next.sb[cc][i][h][0], sb[cc][i][h][1] = next.sb[cc][i][h][1];
                }
        }
        if (c0 + kSlabChunks < c_end)
            load_slab_weights<BITS, ST>(next, m, lrow, c0 + kSlabChunks, min(kSlabChunks, c_end - c0 - kSlabChunks), t);
        __syncthreads();

#pragma unroll
        for (int cc = 0; cc < kSlabChunks; cc++) {
            if (cc >= sc) break;
            chunk_mma<BITS, NT, kHmStride, kLoStride>(acc, q[cc], sb[cc], xs, xl, xsum[cc], cc * 8, g, t);
        }
    }

    float *dst = gridDim.y == 1 ? out : out + (int64_t)blockIdx.y * n * m.rows;
#pragma unroll
    for (int i = 0; i < kTiles; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = row0 + i * 16 + g + 8 * (e / 2);
                const int tok = j * 8 + 2 * t + e % 2;
                if (r < m.rows && tok < n) {
                    const float v = acc[i][j][e] + (gridDim.y == 1 && bias ? bias[r] : 0.0f);
                    dst[(int64_t)tok * m.rows + r] = v;
                    if (res) res[(int64_t)tok * m.rows + r] += v;  // res + out, as the add record
                }
            }
}

// out[i] = sum over splits of partial[split][i] (in split order) + bias[i % rows]; with res (the
// batched "matmul + residual add"), res[i] = res[i] + out[i], as the add record.
__global__ void split_sum_kernel(float *__restrict__ out, const float *__restrict__ partial,
                                 const float *__restrict__ bias, int64_t rows, int64_t count, int splits,
                                 float *__restrict__ res) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float s = 0.0f;
#pragma unroll 8
    for (int k = 0; k < splits; k++) s += partial[(int64_t)k * count + i];
    const float v = bias ? s + bias[i % rows] : s;  // (as split_sum4_kernel: an exact zero keeps its sign)
    out[i] = v;
    if (res) res[i] = res[i] + v;
}

// The same four outputs per thread (rows % 4 == 0 and out, res 16-byte aligned: the four share a
// token and a bias float4): a quarter of the loads and threads.
__global__ void split_sum4_kernel(float4 *__restrict__ out, const float4 *__restrict__ partial,
                                  const float *__restrict__ bias, int64_t rows, int64_t count4, int splits,
                                  float4 *__restrict__ res) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count4) return;
    float4 s = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
    for (int k = 0; k < splits; k++) {
        const float4 p = partial[(int64_t)k * count4 + i];
        s.x += p.x, s.y += p.y, s.z += p.z, s.w += p.w;
    }
    if (bias) {
        const int64_t r = (4 * i) % rows;
        s.x += bias[r], s.y += bias[r + 1], s.z += bias[r + 2], s.w += bias[r + 3];
    }
    out[i] = s;
    if (res) {
        const float4 a = res[i];
        res[i] = float4{a.x + s.x, a.y + s.y, a.z + s.z, a.w + s.w};
    }
}

// ---- The wide form (MLXCEL_GPU_TC_WIDE=N: batches of N..64 tokens; default off) --------------
// Design (run 16's profile of the kernel above at 64 tokens: 254 registers, 1-2 blocks and 6-12%
// warps active per multiprocessor, each block one 64-column slab of all 64 tokens whose load, mma
// and store do not overlap, then 2-8 MB of float32 partial sums per 1024-row product and a
// split-sum launch; run 26: a cp.async pipelined form, which added an activation-split launch and
// kept the split-sum one, was slower still and was removed). Here:
// 1. Token groups instead of most column splits: a block is 128 rows (the kernel above's warps and
//    tiles) x one group of 16 tokens (kWideTok: 2 n8 tiles, a quarter of the accumulators at 64
//    tokens) x a range of columns. Fewer registers (launch bound at 4-bit: 4 blocks, 16 warps per
//    multiprocessor, 128 registers with 40 bytes spilled; unbounded it takes 164; 8-bit 3 blocks,
//    168, no spills), and the groups give a 1024-row product 8 x 4 blocks at 64 tokens before any
//    split, so it needs a quarter of the splits (their partials: up to 4x less) for the same blocks.
//    The price: each group reads the weights again (from L2 after the first; 4-bit codes are an
//    eighth of the float32 activations' bytes per element, so a group re-reading 1.1 MB of q's codes
//    and scales costs less than a split's 128 KB partial tile written and read back per group).
// 2. No second launch: a split product's blocks write their partial tiles to L->scratch in the
//    threads' register order (coalesced float4, no transposition), then count in on one word per
//    tile (L->tc_wide_count, zero between launches); the block that arrives last adds the S
//    partial tiles in split order (s = p[0]; s += p[k] for k = 1..S-1), adds the bias and stores
//    (with res, res += out as the add record), and sets the word back to zero. Which block arrives
//    last depends on timing, the sum's order does not: results are deterministic.
// 3. One barrier per slab: the staged activations are double-buffered in shared memory (a slab's
//    buffer is written again only two slabs later, after the barrier that follows the other
//    buffer's writes), and the next slab's codes, scales, biases and activations (NT float4 per
//    thread: all of them at once) are loaded into registers before the current slab's mma.
// 4. 4-bit codes paired (e, e + 4) in the mma's k pairs (chunk_mma's PAIRED form): a bf16 pair of
//    codes costs three instructions instead of seven, which matters here because a block converts
//    its codes for 16 tokens, not 64; the staging trades two values between neighbouring lanes to
//    stage the activations in the same order.
// The rest of the arithmetic per chunk is chunk_mma's with the same staging (split3, chunk_sum):
// the same precision contract; an unsplit 8-bit product gives the kernel above's bits (4-bit: the
// same terms summed in another k order).
constexpr int kWideTok = 16;        // tokens per block (NT = 2 n8 tiles)
constexpr int kWideMaxSplits = 16;  // column splits (partials: [tile][split][2 NT][128 threads] float4)
constexpr int kWideBlocksPerSm = 2; // the split rule's target: blocks per multiprocessor (4 fit)
constexpr int kWideSumAhead = 4;    // the last block's partial-tile loads in flight: splits at a time
constexpr int kWideCounters = 1024; // words of L->tc_wide_count: tiles (row blocks x token groups) that may split

// grid (ceil(rows / 128), splits, token groups of NT * 8), 128 threads, dynamic shared memory
// 2 smem_bytes(NT). out [n, rows]; res (NULL, or [n, rows]): res += out, as the add record; with
// splits, partial [row blocks x groups][splits][2 NT][128] float4 and count[row blocks x groups]
// (zero at entry, left zero).
template <int BITS, int ST, int NT>
__global__ void __launch_bounds__(kThreads, BITS == 4 ? 4 : 3)
    matvec_mma_wide_kernel(float *__restrict__ out, const float *__restrict__ x, MatView m,
                           const float *__restrict__ bias, int n, int chunks_per_split, float *__restrict__ res,
                           float4 *__restrict__ partial, unsigned *__restrict__ count) {
    constexpr int kTok = NT * 8;
    constexpr int kWords = BITS / 4;
    constexpr bool kPaired = BITS == 4;  // chunk_mma's paired codes (3 instructions per code pair)
    constexpr size_t kBuf = smem_bytes(NT);
    static_assert(kTok * kSlabChunks * 8 == NT * kThreads, "NT float4 per thread per slab");
    static_assert(kBuf % 16 == 0, "16-byte aligned buffers");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int64_t row0 = (int64_t)blockIdx.x * kBlockRows + warp * (kTiles * 16);
    const int tok0 = blockIdx.z * kTok;
    const int total_chunks = m.cols / 32;
    const int c_begin = blockIdx.y * chunks_per_split;
    const int c_end = min(total_chunks, c_begin + chunks_per_split);

    int lrow[kTiles][2];  // this lane's rows (tile i, half h); rows past the end read the last row
#pragma unroll
    for (int i = 0; i < kTiles; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int64_t r = row0 + i * 16 + g + 8 * h;
            lrow[i][h] = (int)(r < m.rows ? r : m.rows - 1);
        }
    float acc[kTiles][NT][4];
#pragma unroll
    for (int i = 0; i < kTiles; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    // Item k * 128 + tid of a slab: group token i / 16, chunk (i / 8) % 2, quad i % 8 (zeros past the
    // batch or the slab), as the kernel above stages them.
    float4 xv[NT];
    auto load_x = [&](int c0, int sc) {
#pragma unroll
        for (int k = 0; k < NT; k++) {
            const int i = k * kThreads + tid, qd = i % 8, cc = (i / 8) % kSlabChunks, tok = tok0 + i / (8 * kSlabChunks);
            xv[k] = float4{0.0f, 0.0f, 0.0f, 0.0f};
            if (tok < n && cc < sc) xv[k] = *(const float4 *)(x + (int64_t)tok * m.cols + (c0 + cc) * 32 + qd * 4);
        }
    };
    SlabWeights<BITS> next;
    load_slab_weights<BITS, ST>(next, m, lrow, c_begin, min(kSlabChunks, c_end - c_begin), t);
    load_x(c_begin, min(kSlabChunks, c_end - c_begin));
    int buf = 0;
    for (int c0 = c_begin; c0 < c_end; c0 += kSlabChunks, buf ^= 1) {
        const int sc = min(kSlabChunks, c_end - c0);
        unsigned char *base = smem_raw + buf * kBuf;
        uint4 (*xs)[kHmStride] = reinterpret_cast<uint4 (*)[kHmStride]>(base);
        uint2 (*xl)[kLoStride] = reinterpret_cast<uint2 (*)[kLoStride]>(base + kTok * kHmStride * 16);
        float (*xsum)[kTok] = reinterpret_cast<float (*)[kTok]>(base + kTok * (kHmStride * 16 + kLoStride * 8));
#pragma unroll
        for (int k = 0; k < NT; k++) {
            const int i = k * kThreads + tid, qd = i % 8, cc = (i / 8) % kSlabChunks, tok = i / (8 * kSlabChunks);
            const float v[4] = {xv[k].x, xv[k].y, xv[k].z, xv[k].w};
            const float s = chunk_sum(v);
            if (qd == 0) xsum[cc][tok] = s;
            const int slot = cc * 8 + (qd % 2) * 4 + qd / 2;
            if constexpr (kPaired) {
                // Slot (step qd % 2, lane qd / 2) holds columns 2s, 2s+4, 2s+1, 2s+5 of the lane's 8
                // (quads qd & ~1 and qd | 1, this lane's and its neighbour's): two values traded.
                const bool odd = qd & 1;
                const float r0 = mxg_shfl_xor<32>(odd ? v[0] : v[2], 1), r1 = mxg_shfl_xor<32>(odd ? v[1] : v[3], 1);
                const float p[4] = {odd ? r0 : v[0], odd ? v[2] : r0, odd ? r1 : v[1], odd ? v[3] : r1};
                split3(p, xs[tok][slot], xl[tok][slot]);
            } else {
                split3(v, xs[tok][slot], xl[tok][slot]);
            }
        }
        uint32_t q[kSlabChunks][kTiles][2][kWords];
        float sb[kSlabChunks][kTiles][2][2];
#pragma unroll
        for (int cc = 0; cc < kSlabChunks; cc++)
#pragma unroll
            for (int i = 0; i < kTiles; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
#pragma unroll
                    for (int w = 0; w < kWords; w++) q[cc][i][h][w] = next.q[cc][i][h][w];
                    sb[cc][i][h][0] = next.sb[cc][i][h][0], sb[cc][i][h][1] = next.sb[cc][i][h][1];
                }
        if (c0 + kSlabChunks < c_end) {
            const int nsc = min(kSlabChunks, c_end - c0 - kSlabChunks);
            load_slab_weights<BITS, ST>(next, m, lrow, c0 + kSlabChunks, nsc, t);
            load_x(c0 + kSlabChunks, nsc);
        }
        __syncthreads();  // this slab's staging is complete (and the other buffer's readers are done)
#pragma unroll
        for (int cc = 0; cc < kSlabChunks; cc++) {
            if (cc >= sc) break;
            chunk_mma<BITS, NT, kHmStride, kLoStride, kPaired>(acc, q[cc], sb[cc], xs, xl, xsum[cc], cc * 8, g, t);
        }
    }

    if (gridDim.y > 1) {
        // This split's partial tile, then the count; the last block of the tile adds them all.
        const int64_t tile = (int64_t)blockIdx.z * gridDim.x + blockIdx.x;
        float4 *mine = partial + (tile * gridDim.y + blockIdx.y) * (kTiles * NT) * kThreads;
#pragma unroll
        for (int i = 0; i < kTiles; i++)
#pragma unroll
            for (int j = 0; j < NT; j++)
                mine[(i * NT + j) * kThreads + tid] = float4{acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]};
        __threadfence();  // the tile visible device-wide before this block counts in
        __syncthreads();  // (also: every warp is past its last shared-memory read)
        unsigned *last = reinterpret_cast<unsigned *>(smem_raw);
        if (tid == 0) {
            const unsigned before = atomicAdd(&count[tile], 1u);
            *last = before == gridDim.y - 1;
            if (*last) count[tile] = 0;  // every split has counted in: zero for the next launch
        }
        __syncthreads();
        if (!*last) return;
        __threadfence();
        // kWideSumAhead splits' loads in flight at a time (one L2 round trip per kWideSumAhead
        // splits, not per split), added in split order: s = p[0], then s += p[k].
        constexpr int kF = kTiles * NT;
        const int splits = (int)gridDim.y;
        const float4 *tiles = partial + tile * splits * kF * kThreads + tid;
        float4 s[kF];
        for (int k0 = 0; k0 < splits; k0 += kWideSumAhead) {
            float4 p[kWideSumAhead][kF];
#pragma unroll
            for (int u = 0; u < kWideSumAhead; u++)
#pragma unroll
                for (int f = 0; f < kF; f++)
                    if (k0 + u < splits) p[u][f] = __ldcg(tiles + ((int64_t)(k0 + u) * kF + f) * kThreads);
#pragma unroll
            for (int u = 0; u < kWideSumAhead; u++)
#pragma unroll
                for (int f = 0; f < kF; f++) {
                    if (k0 + u >= splits) break;
                    if (k0 + u == 0) s[f] = p[u][f];
                    else s[f].x += p[u][f].x, s[f].y += p[u][f].y, s[f].z += p[u][f].z, s[f].w += p[u][f].w;
                }
        }
#pragma unroll
        for (int i = 0; i < kTiles; i++)
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const float4 v = s[i * NT + j];
                acc[i][j][0] = v.x, acc[i][j][1] = v.y, acc[i][j][2] = v.z, acc[i][j][3] = v.w;
            }
    }
#pragma unroll
    for (int i = 0; i < kTiles; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = row0 + i * 16 + g + 8 * (e / 2);
                const int tok = tok0 + j * 8 + 2 * t + e % 2;
                if (r < m.rows && tok < n) {
                    const float v = acc[i][j][e] + (bias ? bias[r] : 0.0f);  // (as the kernel above)
                    out[(int64_t)tok * m.rows + r] = v;
                    if (res) res[(int64_t)tok * m.rows + r] += v;  // res + out, as the add record
                }
            }
}

template <int BITS, int ST>
void launch_wide_st(const mxg_launch *L, float *out, const float *x, const MatView &m, const float *bias, int n,
                    dim3 grid, int cps, float *res, float4 *partial) {
    constexpr int NT = kWideTok / 8;
    matvec_mma_wide_kernel<BITS, ST, NT><<<grid, kThreads, 2 * smem_bytes(NT), (gpuStream_t)L->stream>>>(
        out, x, m, bias, n, cps, res, partial, L->tc_wide_count);
}

// The kernel instance for n tokens: NT = 1, 2, 4 or 8 token tiles.
template <int BITS, int ST, int NT>
void launch_nt(const mxg_launch *L, float *dst, const float *x, const MatView &m, const float *bias, int n, dim3 grid,
               int cps, float *res) {
    gpuStream_t s = (gpuStream_t)L->stream;
    matvec_mma_kernel<BITS, ST, NT><<<grid, kThreads, smem_bytes(NT), s>>>(dst, x, m, bias, n, cps, res);
}

template <int BITS, int ST>
void launch_bits_st(const mxg_launch *L, float *dst, const float *x, const MatView &m, const float *bias, int n,
                    dim3 grid, int cps, float *res) {
    if (n <= 8)
        launch_nt<BITS, ST, 1>(L, dst, x, m, bias, n, grid, cps, res);
    else if (n <= 16)
        launch_nt<BITS, ST, 2>(L, dst, x, m, bias, n, grid, cps, res);
    else if (n <= 32)
        launch_nt<BITS, ST, 4>(L, dst, x, m, bias, n, grid, cps, res);
    else
        launch_nt<BITS, ST, 8>(L, dst, x, m, bias, n, grid, cps, res);
}

template <int BITS>
void launch_bits(const mxg_launch *L, float *dst, const float *x, const MatView &m, mx_dtype st, const float *bias,
                 int n, dim3 grid, int cps, float *res) {
    if (st == MX_DTYPE_F32)
        launch_bits_st<BITS, ST_F32>(L, dst, x, m, bias, n, grid, cps, res);
    else if (st == MX_DTYPE_F16)
        launch_bits_st<BITS, ST_F16>(L, dst, x, m, bias, n, grid, cps, res);
    else
        launch_bits_st<BITS, ST_BF16>(L, dst, x, m, bias, n, grid, cps, res);
}

}  // namespace

// out = the splits' partial sums added in order (+ bias; with res, res += out): four outputs per
// thread where they share a token and a bias float4 (float4 stores).
static void split_sum_launch(const mxg_launch *L, float *out, const float *partial, const float *bias, int64_t rows,
                             int64_t count, int splits, float *res) {
    gpuStream_t s = (gpuStream_t)L->stream;
    const bool aligned = rows % 4 == 0 && ((uintptr_t)out & 15) == 0 && ((uintptr_t)res & 15) == 0;
    if (aligned)
        split_sum4_kernel<<<(unsigned)((count / 4 + 255) / 256), 256, 0, s>>>(
            (float4 *)out, (const float4 *)partial, bias, rows, count / 4, splits, (float4 *)res);
    else
        split_sum_kernel<<<(unsigned)((count + 255) / 256), 256, 0, s>>>(out, partial, bias, rows, count, splits, res);
}

// The wide form (above) of a product that matvec_mma accepts, same contract (it always enqueues:
// without L->tc_wide_count or room in L->scratch it does not split the columns).
static void matvec_mma_wide(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const MatView &m,
                            const float *bias, int n, float *res) {
    const int64_t row_blocks = (m.rows + kBlockRows - 1) / kBlockRows;
    const int groups = (n + kWideTok - 1) / kWideTok, chunks = m.cols / 32;
    constexpr int64_t kTileBytes = (int64_t)kBlockRows * kWideTok * sizeof(float);  // one split's partial tile
    // Column splits while rows x token groups give fewer than kWideBlocksPerSm blocks per
    // multiprocessor: at least kMinChunksPerSplit chunks per split, at most kWideMaxSplits, their
    // partial tiles within L->scratch and a count word per tile.
    int splits = 1;
    const int64_t base = row_blocks * groups, want = kWideBlocksPerSm * (int64_t)L->sm_count;
    if (base < want && base <= kWideCounters && L->tc_wide_count && L->scratch) {
        int64_t s = (want + base - 1) / base;
        s = s < chunks / kMinChunksPerSplit ? s : chunks / kMinChunksPerSplit;
        const int64_t fit = (int64_t)(L->scratch_bytes / (size_t)(base * kTileBytes));
        const int64_t cap = kWideMaxSplits < fit ? kWideMaxSplits : fit;
        s = s < cap ? s : cap;
        splits = s > 1 ? (int)s : 1;
    }
    const int cps = (chunks + splits - 1) / splits;
    splits = (chunks + cps - 1) / cps;
    const dim3 grid((unsigned)row_blocks, (unsigned)splits, (unsigned)groups);
    float4 *partial = splits > 1 ? (float4 *)L->scratch : nullptr;
    const int st = w->scale_dtype == MX_DTYPE_F32 ? ST_F32 : w->scale_dtype == MX_DTYPE_F16 ? ST_F16 : ST_BF16;
    if (w->q.bits == 4)
        st == ST_F32   ? launch_wide_st<4, ST_F32>(L, out, x, m, bias, n, grid, cps, res, partial)
        : st == ST_F16 ? launch_wide_st<4, ST_F16>(L, out, x, m, bias, n, grid, cps, res, partial)
                       : launch_wide_st<4, ST_BF16>(L, out, x, m, bias, n, grid, cps, res, partial);
    else
        st == ST_F32   ? launch_wide_st<8, ST_F32>(L, out, x, m, bias, n, grid, cps, res, partial)
        : st == ST_F16 ? launch_wide_st<8, ST_F16>(L, out, x, m, bias, n, grid, cps, res, partial)
                       : launch_wide_st<8, ST_BF16>(L, out, x, m, bias, n, grid, cps, res, partial);
}

// Enqueues the product (and with res, res += out: in the product's store when unsplit, else in the
// split-sum kernel); 0, or -1 when it has no kernel for this case
// (kernels.h).
static int matvec_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n,
                      float *res) {
    if (L->cc < 80 || L->warp != 32 || n < 2 || n > 64) return -1;
    if (w->q.mode != MX_QUANT_AFFINE || (w->q.bits != 4 && w->q.bits != 8) || w->cols % 32 != 0) return -1;
    if (w->q.group_size != 32 && w->q.group_size != 64 && w->q.group_size != 128) return -1;
    if (w->scale_dtype != MX_DTYPE_F32 && w->scale_dtype != MX_DTYPE_F16 && w->scale_dtype != MX_DTYPE_BF16) return -1;
    if (((uintptr_t)x & 15) != 0 || w->rows > INT32_MAX) return -1;  // (a lane's rows are ints)
    const MatView m = mat_view(w);
    const int64_t row_blocks = (m.rows + kBlockRows - 1) / kBlockRows;
    const int chunks = m.cols / 32;
    if (L->tc_wide_tokens > 0 && n >= L->tc_wide_tokens) {
        matvec_mma_wide(L, out, x, w, m, bias, n, res);
        return 0;
    }
    // Split the columns while the rows give fewer than 2 blocks per multiprocessor, keeping at least
    // kMinChunksPerSplit chunks per split, and at most kMaxSplits whose partial sums fit in L->scratch.
    int splits = 1;
    const int64_t want = 2 * (int64_t)L->sm_count;
    if (row_blocks < want) {
        int64_t s = (want + row_blocks - 1) / row_blocks;
        s = s < chunks / kMinChunksPerSplit ? s : chunks / kMinChunksPerSplit;
        const int64_t per_split = (int64_t)n * m.rows * (int64_t)sizeof(float);
        const int64_t fit = L->scratch ? (int64_t)(L->scratch_bytes / (size_t)per_split) : 0;
        const int64_t cap = kMaxSplits < fit ? kMaxSplits : fit;
        s = s < cap ? s : cap;
        splits = s > 1 ? (int)s : 1;
    }
    const int cps = (chunks + splits - 1) / splits;
    splits = (chunks + cps - 1) / cps;
    const bool split_sum = splits > 1;
    float *dst = split_sum ? (float *)L->scratch : out;
    float *kernel_res = split_sum ? nullptr : res;  // (the split-sum kernel adds the residual)
    const dim3 grid((unsigned)row_blocks, (unsigned)splits);
    if (w->q.bits == 4)
        launch_bits<4>(L, dst, x, m, w->scale_dtype, bias, n, grid, cps, kernel_res);
    else
        launch_bits<8>(L, dst, x, m, w->scale_dtype, bias, n, grid, cps, kernel_res);
    if (split_sum) split_sum_launch(L, out, dst, bias, m.rows, (int64_t)n * m.rows, splits, res);
    return 0;
}

extern "C" int mxg_matvec_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias,
                              int n) {
    return matvec_mma(L, out, x, w, bias, n, nullptr);
}

extern "C" int mxg_matvec_mma_add(const mxg_launch *L, float *out, const float *x, const mx_matrix *w,
                                  const float *bias, int n, float *res) {
    return matvec_mma(L, out, x, w, bias, n, res);
}
