// SPDX-License-Identifier: MIT
// NVIDIA tensor-core product for decode batches: out[n, rows] = x[n, cols] @ w^T (+ bias) for 2..64
// tokens (server steps of many sequences) on affine 4- and 8-bit weights, with mma.sync m16n8k16
// (vendor/cuda/mma_m16n8k16.cuh; sm_80+). kernels/matvec.cu dispatches batches of 4..64 tokens here
// by default (MLXCEL_GPU_TC_DECODE=N: N..64; 0: never); every other format, and batches of one or
// over 64 tokens, decline (-1) to the float32 kernels. ROCm builds have vendor/hip/matvec_mma.cu, which declines.
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
// Grouped form (the default, off with MLXCEL_GPU_GROUPED=0; mxg_matvec_mma_group, called by gpu_plan.c for 2-3 products
// of one input: q/k/v, gate/up): one launch of the same block code over the row blocks of every
// matrix (matrix k's blocks follow k-1's in blockIdx.x), the column splits chosen for the group's
// rows together (fewer splits than each product alone: the rows already give more blocks), and one
// sum launch for the group, which with gate/up also writes the SwiGLU (silu(gate) * up, the swiglu
// record's formula) from the two sums it holds; such a group is always split (at least 2) so that
// launch exists. Each block's sums are the plain product's; only the split boundaries differ, so a
// result differs from the plain product's by float32 summation order.
// Registers (ptxas, sm_90, 4-bit / 8-bit, no spills): 126 / 150 at 8 tokens, 162 / 166 at 16,
// 218 / 232 at 32, 254 / 255 at 64; the grouped kernel 128 / 130, 150 / 167, 168-174 / 175-178,
// 252 / 252.
#include "backends/gpu/dequant.cuh"
#include "backends/gpu/kernels_fused.h"
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
template <int BITS, int NT, int HS, int LS>
__device__ __forceinline__ void chunk_mma(float (&acc)[kTiles][NT][4], const uint32_t (&q)[kTiles][2][BITS / 4],
                                          const float (&sb)[kTiles][2][2], const uint4 (*xs)[HS],
                                          const uint2 (*xl)[LS], const float *xsum, int slot0, int g, int t) {
    // A fragments of both k steps: step s holds codes 4s, 4s+1 (columns 2t, 2t+1 of the mma) and
    // 4s+2, 4s+3 (columns 2t+8, 2t+9).
    uint32_t a[kTiles][2][4];
#pragma unroll
    for (int i = 0; i < kTiles; i++)
#pragma unroll
        for (int s = 0; s < 2; s++) {
            a[i][s][0] = code_pair<BITS>(q[i][0], 4 * s);
            a[i][s][1] = code_pair<BITS>(q[i][1], 4 * s);
            a[i][s][2] = code_pair<BITS>(q[i][0], 4 * s + 2);
            a[i][s][3] = code_pair<BITS>(q[i][1], 4 * s + 2);
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

// One block of the product: rows row_block * 128.. of m over column range `split` (chunks_per_split
// chunks), all n tokens, written to target.dst() [n, rows] (+ bias[r] when target.bias() is not
// NULL; res, when given: res += the value, res + out per element as the add record). x [n, cols]
// 16-byte aligned; dynamic shared memory smem_bytes(NT). The target is asked for its pointers only
// at the store, so they are read from the kernel's parameters there instead of held in registers
// through the loop (at 64 tokens the loop uses all 255).
template <int BITS, int ST, int NT, class Target>
__device__ __forceinline__ void product_block(const Target &target, const float *__restrict__ x, const MatView &m,
                                              int n, int chunks_per_split, float *__restrict__ res, int64_t row_block,
                                              int split) {
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
    const int64_t row0 = row_block * kBlockRows + warp * (kTiles * 16);
    const int total_chunks = m.cols / 32;
    const int c_begin = split * chunks_per_split;
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

    float *__restrict__ dst = target.dst();
    const float *__restrict__ bias = target.bias();
#pragma unroll
    for (int i = 0; i < kTiles; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = row0 + i * 16 + g + 8 * (e / 2);
                const int tok = j * 8 + 2 * t + e % 2;
                if (r < m.rows && tok < n) {
                    const float v = acc[i][j][e] + (bias ? bias[r] : 0.0f);
                    dst[(int64_t)tok * m.rows + r] = v;
                    if (res) res[(int64_t)tok * m.rows + r] += v;  // res + out, as the add record
                }
            }
}

// grid (ceil(rows / 128), splits). out [n, rows] when gridDim.y == 1, else partial [splits][n][rows]
// (bias added by the sum kernel); res (NULL, or [n, rows]; only unsplit): res += out.
struct PlainTarget {
    float *__restrict__ const &out;
    const float *__restrict__ const &b;
    const int &n;
    const MatView &m;
    __device__ __forceinline__ float *dst() const { return gridDim.y == 1 ? out : out + (int64_t)blockIdx.y * n * m.rows; }
    __device__ __forceinline__ const float *bias() const { return gridDim.y == 1 ? b : nullptr; }
};

template <int BITS, int ST, int NT>
__global__ void __launch_bounds__(kThreads) matvec_mma_kernel(float *__restrict__ out, const float *__restrict__ x,
                                                              MatView m, const float *__restrict__ bias, int n,
                                                              int chunks_per_split, float *__restrict__ res) {
    const PlainTarget target{out, bias, n, m};
    product_block<BITS, ST, NT>(target, x, m, n, chunks_per_split, res, blockIdx.x, blockIdx.y);
}

// A group of up to kMaxGroup products of one input (q/k/v; gate/up), one launch: the row blocks of
// matrix 0, then those of 1, then 2 (block_end: each matrix's end in blockIdx.x). dst[k]: out[k]
// [n, rows_k] when unsplit, else matrix k's partials in the group's scratch (split s at dst[k] + s *
// split_stride); bias[k] only when unsplit (else the sum kernel adds it).
constexpr int kMaxGroup = 3;
struct TcGroup {
    MatView m[kMaxGroup];
    float *dst[kMaxGroup];
    const float *bias[kMaxGroup];
    int block_end[kMaxGroup];
    int64_t split_stride;
};

// The matrix of the group that block b works on.
__device__ __forceinline__ int group_member(const TcGroup &g, int b) {
    return b < g.block_end[0] ? 0 : b < g.block_end[1] ? 1 : 2;
}

struct GroupTarget {
    const TcGroup &g;
    __device__ __forceinline__ float *dst() const {
        return g.dst[group_member(g, blockIdx.x)] + (int64_t)blockIdx.y * g.split_stride;
    }
    __device__ __forceinline__ const float *bias() const {
        return gridDim.y == 1 ? g.bias[group_member(g, blockIdx.x)] : nullptr;
    }
};

template <int BITS, int ST, int NT>
__global__ void __launch_bounds__(kThreads) matvec_mma_group_kernel(const float *__restrict__ x, TcGroup g, int n,
                                                                    int chunks_per_split) {
    const int b = blockIdx.x, k = group_member(g, b);
    const GroupTarget target{g};
    product_block<BITS, ST, NT>(target, x, g.m[k], n, chunks_per_split, nullptr, b - (k == 0 ? 0 : g.block_end[k - 1]),
                                blockIdx.y);
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

// The grouped form's sums (matvec_mma_group): thread i takes outputs 4i..4i+3 of the group's
// concatenated partials (matrix k's [n, rows_k] at n * its first row; rows_k % 4 == 0, so four never
// straddle a matrix or a token), adds the splits in order, then the bias, and stores to its matrix's
// output. With act (gate/up, equal rows; count4 covers the gate's outputs alone): the thread also
// sums the up outputs at the same place, stores them, and act = silu(gate) * up, in that order
// (act may be the gate buffer, as the swiglu record allows).
struct TcGroupSum {
    float4 *out[kMaxGroup];
    const float *bias[kMaxGroup];
    int64_t end4[kMaxGroup];  // each matrix's end, in float4s of one split
    int64_t rows[kMaxGroup];
    float4 *act;
};

__device__ __forceinline__ float4 sum_splits4(const float4 *__restrict__ partial, int64_t i, int64_t stride4, int splits) {
    float4 s = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 8
    for (int k = 0; k < splits; k++) {
        const float4 p = partial[(int64_t)k * stride4 + i];
        s.x += p.x, s.y += p.y, s.z += p.z, s.w += p.w;
    }
    return s;
}

__device__ __forceinline__ void add_bias4(float4 &s, const float *bias, int64_t r) {
    if (bias) s.x += bias[r], s.y += bias[r + 1], s.z += bias[r + 2], s.w += bias[r + 3];
}

__global__ void group_sum4_kernel(const float4 *__restrict__ partial, TcGroupSum g, int64_t count4, int64_t stride4,
                                  int splits) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count4) return;
    const int k = i < g.end4[0] ? 0 : i < g.end4[1] ? 1 : 2;
    const int64_t first4 = k == 0 ? 0 : k == 1 ? g.end4[0] : g.end4[1], local4 = i - first4;
    const int64_t rows = k == 0 ? g.rows[0] : k == 1 ? g.rows[1] : g.rows[2];
    float4 s = sum_splits4(partial, i, stride4, splits);
    add_bias4(s, k == 0 ? g.bias[0] : k == 1 ? g.bias[1] : g.bias[2], (4 * local4) % rows);
    (k == 0 ? g.out[0] : k == 1 ? g.out[1] : g.out[2])[local4] = s;
    if (g.act) {  // k == 0: the gate; its up output sits end4[0] further on
        float4 u = sum_splits4(partial, i + g.end4[0], stride4, splits);
        add_bias4(u, g.bias[1], (4 * local4) % rows);
        g.out[1][local4] = u;
        g.act[local4] = float4{silu_mul(s.x, u.x), silu_mul(s.y, u.y), silu_mul(s.z, u.z), silu_mul(s.w, u.w)};
    }
}

// The kernel instance for n tokens: NT = 1, 2, 4 or 8 token tiles; with g, the grouped kernel over
// g's matrices (m, dst, bias and res unused).
template <int BITS, int ST, int NT>
void launch_nt(const mxg_launch *L, float *dst, const float *x, const MatView &m, const float *bias, int n, dim3 grid,
               int cps, float *res, const TcGroup *g) {
    gpuStream_t s = (gpuStream_t)L->stream;
    if (g)
        matvec_mma_group_kernel<BITS, ST, NT><<<grid, kThreads, smem_bytes(NT), s>>>(x, *g, n, cps);
    else
        matvec_mma_kernel<BITS, ST, NT><<<grid, kThreads, smem_bytes(NT), s>>>(dst, x, m, bias, n, cps, res);
}

template <int BITS, int ST>
void launch_bits_st(const mxg_launch *L, float *dst, const float *x, const MatView &m, const float *bias, int n,
                    dim3 grid, int cps, float *res, const TcGroup *g) {
    if (n <= 8)
        launch_nt<BITS, ST, 1>(L, dst, x, m, bias, n, grid, cps, res, g);
    else if (n <= 16)
        launch_nt<BITS, ST, 2>(L, dst, x, m, bias, n, grid, cps, res, g);
    else if (n <= 32)
        launch_nt<BITS, ST, 4>(L, dst, x, m, bias, n, grid, cps, res, g);
    else
        launch_nt<BITS, ST, 8>(L, dst, x, m, bias, n, grid, cps, res, g);
}

template <int BITS>
void launch_bits(const mxg_launch *L, float *dst, const float *x, const MatView &m, mx_dtype st, const float *bias,
                 int n, dim3 grid, int cps, float *res, const TcGroup *g) {
    if (st == MX_DTYPE_F32)
        launch_bits_st<BITS, ST_F32>(L, dst, x, m, bias, n, grid, cps, res, g);
    else if (st == MX_DTYPE_F16)
        launch_bits_st<BITS, ST_F16>(L, dst, x, m, bias, n, grid, cps, res, g);
    else
        launch_bits_st<BITS, ST_BF16>(L, dst, x, m, bias, n, grid, cps, res, g);
}

void launch_any(const mxg_launch *L, float *dst, const float *x, const MatView &m, int bits, mx_dtype st,
                const float *bias, int n, dim3 grid, int cps, float *res, const TcGroup *g) {
    if (bits == 4)
        launch_bits<4>(L, dst, x, m, st, bias, n, grid, cps, res, g);
    else
        launch_bits<8>(L, dst, x, m, st, bias, n, grid, cps, res, g);
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

// Whether the product has a kernel here: device, format, batch, x alignment.
static bool tc_takes(const mxg_launch *L, const mx_matrix *w, const float *x, int n) {
    if (L->cc < 80 || L->warp != 32 || n < 2 || n > 64) return false;
    if (w->q.mode != MX_QUANT_AFFINE || (w->q.bits != 4 && w->q.bits != 8) || w->cols % 32 != 0) return false;
    if (w->q.group_size != 32 && w->q.group_size != 64 && w->q.group_size != 128) return false;
    if (w->scale_dtype != MX_DTYPE_F32 && w->scale_dtype != MX_DTYPE_F16 && w->scale_dtype != MX_DTYPE_BF16) return false;
    return ((uintptr_t)x & 15) == 0 && w->rows <= INT32_MAX;  // (a lane's rows are ints)
}

// Column splits for row_blocks blocks of rows over `chunks` chunks whose partial sums take
// per_split bytes each: split while the rows give fewer than 2 blocks per multiprocessor, keeping at
// least kMinChunksPerSplit chunks per split, and at most kMaxSplits whose partial sums fit in
// L->scratch; at least min_splits where that many fit (else 1). *cps: chunks per split.
static int column_splits(const mxg_launch *L, int64_t row_blocks, int chunks, int64_t per_split, int min_splits,
                         int *cps) {
    int64_t s = 1;
    const int64_t want = 2 * (int64_t)L->sm_count;
    if (row_blocks < want) s = (want + row_blocks - 1) / row_blocks;
    if (s < min_splits) s = min_splits;
    if (s > 1) {
        s = s < chunks / kMinChunksPerSplit ? s : chunks / kMinChunksPerSplit;
        const int64_t fit = L->scratch ? (int64_t)(L->scratch_bytes / (size_t)per_split) : 0;
        const int64_t cap = kMaxSplits < fit ? kMaxSplits : fit;
        s = s < cap ? s : cap;
    }
    const int splits = s > 1 ? (int)s : 1;
    *cps = (chunks + splits - 1) / splits;
    return (chunks + *cps - 1) / *cps;
}

// Enqueues the product (and with res, res += out: in the product's store when unsplit, else in the
// split-sum kernel); 0, or -1 when it has no kernel for this case
// (kernels.h).
static int matvec_mma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n,
                      float *res) {
    if (!tc_takes(L, w, x, n)) return -1;
    const MatView m = mat_view(w);
    const int64_t row_blocks = (m.rows + kBlockRows - 1) / kBlockRows;
    int cps;
    const int splits = column_splits(L, row_blocks, m.cols / 32, (int64_t)n * m.rows * (int64_t)sizeof(float), 1, &cps);
    const bool split_sum = splits > 1;
    float *dst = split_sum ? (float *)L->scratch : out;
    float *kernel_res = split_sum ? nullptr : res;  // (the split-sum kernel adds the residual)
    const dim3 grid((unsigned)row_blocks, (unsigned)splits);
    launch_any(L, dst, x, m, w->q.bits, w->scale_dtype, bias, n, grid, cps, kernel_res, nullptr);
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

// The grouped form (kernels_fused.h): the row blocks of every matrix in one launch of the product,
// column splits chosen for the group's rows together, and one sum launch for the group (with the
// SwiGLU when f->act; such a group is always split, so the sum kernel writes act).
extern "C" int mxg_matvec_mma_group(const mxg_launch *L, const mxg_fused_matvec *f, int n) {
    if (f->count < 2 || f->count > kMaxGroup || f->norm_w || f->res || (f->act && f->count != 2)) return -1;
    const mx_matrix *w0 = f->w[0];
    const auto aligned16 = [](const void *p) { return ((uintptr_t)p & 15) == 0; };
    TcGroup g{};
    TcGroupSum gs{};
    int64_t blocks = 0, rows = 0;
    for (int k = 0; k < f->count; k++) {
        const mx_matrix *w = f->w[k];
        if (!tc_takes(L, w, f->x, n) || w->q.bits != w0->q.bits || w->scale_dtype != w0->scale_dtype ||
            w->cols != w0->cols || w->rows % 4 != 0 || !aligned16(f->out[k]))
            return -1;
        g.m[k] = mat_view(w);
        gs.rows[k] = w->rows;
        gs.bias[k] = g.bias[k] = f->bias[k];
        gs.out[k] = (float4 *)f->out[k];
        blocks += (w->rows + kBlockRows - 1) / kBlockRows;
        g.block_end[k] = (int)blocks;
        rows += w->rows;
        gs.end4[k] = (int64_t)n * rows / 4;
    }
    if (f->act && (f->w[1]->rows != w0->rows || !aligned16(f->act))) return -1;
    for (int k = f->count; k < kMaxGroup; k++) g.block_end[k] = (int)blocks, gs.end4[k] = gs.end4[f->count - 1];
    int cps;
    const int64_t per_split = (int64_t)n * rows * (int64_t)sizeof(float);
    const int splits = column_splits(L, blocks, (int)(w0->cols / 32), per_split, f->act ? 2 : 1, &cps);
    if (f->act && splits < 2) return -1;  // (no room for two splits: the caller runs the SwiGLU record)
    float *partial = (float *)L->scratch;
    for (int k = 0; k < f->count; k++) {
        g.dst[k] = splits > 1 ? partial + (k == 0 ? 0 : gs.end4[k - 1] * 4) : f->out[k];
        if (splits > 1) g.bias[k] = nullptr;
    }
    g.split_stride = splits > 1 ? (int64_t)n * rows : 0;
    launch_any(L, nullptr, f->x, g.m[0], w0->q.bits, w0->scale_dtype, nullptr, n, dim3((unsigned)blocks, (unsigned)splits),
               cps, nullptr, &g);
    if (splits > 1) {
        gs.act = (float4 *)f->act;
        const int64_t count4 = f->act ? gs.end4[0] : gs.end4[f->count - 1];
        group_sum4_kernel<<<(unsigned)((count4 + 255) / 256), 256, 0, (gpuStream_t)L->stream>>>(
            (const float4 *)partial, gs, count4, (int64_t)n * rows / 4, splits);
    }
    return 0;
}
