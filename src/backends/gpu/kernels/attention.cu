// SPDX-License-Identifier: MIT
// Attention over the paged KV cache for prefill, decode and mixed batches, without materializing
// the [T, T] score matrix (online softmax, flash-attention style). Decode steps whose shape
// kernels/attn_decode.cu takes go there (unless MLXCEL_GPU_ATTN_DECODE=0: steps of at most 16
// tokens, and of at most 64 when the record's decode hint says no slot has more than a few of
// them); with MLXCEL_GPU_ATTN_MMA=1, records of at least 64 tokens without the decode hint go to
// the tensor-core kernel (vendor/cuda/attn_mma.cu) where it takes them; this kernel does the rest:
// prefill chunks, whose tokens of one slot share each key tile. Each key row of a tile is found through the slot's block table (kv_block.cuh); a 32-key
// tile spans two blocks of 16.
// The cache is int16 with one scale per 16 elements of a row (I16, default) or f16: a tile is copied
// to shared memory as it is stored (2 bytes per element, plus the I16 rows' scales), and dequantized
// in registers: a key's score sums q . codes over each 16-element chunk, then times the chunk's
// scale; a value enters the output as p times its scale times its code.
//
// A block takes ROWS rows (one warp each) and optionally one of `splits` slices of the key range
// (split-KV or flash-decoding, used when there are too few blocks to fill the GPU, i.e. decode; a
// second kernel merges the partial results). Rows are ROWS consecutive tokens of one query head
// (prefill), or, for steps of at most kHeadRowsMaxTokens tokens with grouped query heads, ROWS query
// heads of one KV head's group for one token (decode: the group shares each key tile, and all
// warps compute instead of one). Tokens of a block that share a KV slot
// (the usual case: a prefill chunk) load each K/V tile into shared memory once for all of them; a
// block straddling two sequences handles them one after the other. Inside a tile, lane j scores key
// j (q is broadcast from shared memory), then every lane accumulates its head_dim / W output columns.
// Causality and the sliding window follow from each token's position. GQA: query head h reads KV head
// h / (n_heads / n_kv_heads). Attention sinks (gpt_oss: a logit per query head in the softmax's
// denominator, with no value) enter where the softmax is normalized: the single-split epilogue or
// the merge of the splits.
#include <limits.h>

#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels.h"
#include "backends/gpu/kv_block.cuh"

namespace {

constexpr int ROWS = 4;   // rows (warps) per block: tokens of one head, or heads of one token
constexpr int kHeadRowsMaxTokens = 16;  // steps of at most this many tokens use head rows
constexpr int BK = 32;    // keys per shared-memory tile
constexpr int kMaxHeadDim = 256;
constexpr int kMaxSplits = 64;
constexpr int kMmaMinTokens = 64;  // records of at least this many tokens may take the tensor-core kernel

struct AttnArgs {
    float *out;              // [n, n_heads, D]
    float *part;             // [n, n_heads, splits, D + 2] (m, l, o) when splits > 1
    const float *q;          // [n, n_heads, D]
    const float *sinks;      // [n_heads] or NULL
    const uint16_t *kv;      // int16 codes (I16) or f16 bits
    const int32_t *slot, *pos;
    KvPages pg;  // where a (slot, position)'s keys are (kv_block.cuh)
    int n, n_heads, n_kv_heads, head_dim, max_ctx, window, splits;
    int head_parts;  // head rows: blocks per KV head's group of query heads; 0: token rows
    float scale;
};

// 1 / (l + e^(sink - m)): the end of an online softmax whose scores have maximum m and
// e^(s - m) sum l, with an attention sink (sink -inf: none, 1 / l). No overflow for a large sink.
__device__ __forceinline__ float inv_denominator(float m, float l, float sink) {
    if (sink > m) {
        const float r = expf(m - sink);
        return r / (l * r + 1.0f);
    }
    return 1.0f / (l + expf(sink - m));
}

// Odd stride of a tile's rows of I16 scales in shared memory: lane j reading key j's scale of one
// chunk hits 32 different banks.
__host__ __device__ __forceinline__ int scale_stride(int n_scales) { return n_scales | 1; }

template <int W, int DPL, bool I16>
__global__ void __launch_bounds__(ROWS * 64) attn_kernel(AttnArgs a) {
    MXG_WARP_ONLY(W) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int D = a.head_dim, KST = D + 2;  // K rows padded by one word: conflict-free column reads
    uint16_t *ks = (uint16_t *)smem_raw;    // [BK][D + 2] as stored (int16 codes or f16)
    uint16_t *vs = ks + BK * KST;           // [BK][D]
    float *qs = (float *)(vs + BK * D);     // [ROWS][D]
    const int nsc = a.pg.n_scales, SST = scale_stride(nsc);
    float *kss = qs + ROWS * D;             // I16: [BK][SST] scales of the K rows
    float *vss = kss + BK * SST;            // I16: [BK][SST] scales of the V rows
    __shared__ int s_slot[ROWS], s_lo[ROWS], s_hi[ROWS], s_done[ROWS];
    __shared__ int64_t s_row[BK];  // row indices (kv_block.cuh) of the tile's key rows (values: + vrows)
    const int warp = threadIdx.x / W, lane = threadIdx.x % W, split = blockIdx.z;
    const int group = a.n_heads / a.n_kv_heads;
    int t, h, kvh;
    bool live;
    if (a.head_parts == 0) {  // token rows: ROWS consecutive tokens of query head blockIdx.y
        t = blockIdx.x * ROWS + warp, h = blockIdx.y, kvh = h / group, live = t < a.n;
    } else {  // head rows: ROWS query heads of one KV head's group, for token blockIdx.x
        const int g = (int)(blockIdx.y % a.head_parts) * ROWS + warp;
        t = blockIdx.x, kvh = blockIdx.y / a.head_parts, h = kvh * group + g, live = g < group;
    }
    const int64_t vrows = (int64_t)a.n_kv_heads * MX_KV_BLOCK;  // a block's V rows follow its K rows
    if (lane == 0) {
        if (live) {
            const int p = a.pos[t];
            s_slot[warp] = a.slot[t];
            s_hi[warp] = p;
            s_lo[warp] = a.window > 0 ? max(0, p - a.window + 1) : 0;
            s_done[warp] = 0;
        } else {
            s_slot[warp] = -1, s_hi[warp] = -1, s_lo[warp] = 0, s_done[warp] = 1;
        }
    }
    if (live)
        for (int d = lane; d < D; d += W) qs[warp * D + d] = a.q[((int64_t)t * a.n_heads + h) * D + d] * a.scale;
    __syncthreads();

    int maxhi = -1;
#pragma unroll
    for (int r = 0; r < ROWS; r++) maxhi = max(maxhi, s_hi[r]);
    const int chunk = (maxhi + a.splits) / a.splits;  // ceil((maxhi + 1) / splits)
    const int sp_lo = split * chunk, sp_hi = min(maxhi, (split + 1) * chunk - 1);
    const int my_lo = s_lo[warp], my_hi = s_hi[warp];

    float o[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    for (;;) {
        // The next group: unfinished rows sharing the first unfinished row's slot (block-uniform).
        int r0 = -1;
        for (int r = ROWS - 1; r >= 0; r--)
            if (!s_done[r]) r0 = r;
        if (r0 < 0) break;
        const int cur = s_slot[r0];
        int klo = INT_MAX, khi = -1;
        for (int r = 0; r < ROWS; r++)
            if (!s_done[r] && s_slot[r] == cur) klo = min(klo, s_lo[r]), khi = max(khi, s_hi[r]);
        klo = max(klo, sp_lo);
        khi = min(khi, sp_hi);
        const bool mine = !s_done[warp] && s_slot[warp] == cur;
        __syncthreads();
        if (lane == 0 && mine) s_done[warp] = 1;

        const int words = D / 2;
        for (int k0 = klo; k0 <= khi; k0 += BK) {
            const int nk = min(BK, khi - k0 + 1);
            if ((int)threadIdx.x < nk) s_row[threadIdx.x] = kv_row_index(a.pg, cur, k0 + (int)threadIdx.x, 0, kvh);
            __syncthreads();
            if ((D & 7) == 0) {  // 16-byte loads (8 elements); K rows are padded, so stored as 4 words
                const int vecs = D / 8;
                for (int i = threadIdx.x; i < nk * vecs; i += blockDim.x) {
                    const int j = i / vecs, vq = i % vecs;
                    const uint16_t *krow = a.kv + s_row[j] * D, *vrow = krow + vrows * D;
                    const uint4 kq = ((const uint4 *)krow)[vq];
                    uint32_t *kd = (uint32_t *)(ks + j * KST) + 4 * vq;
                    kd[0] = kq.x, kd[1] = kq.y, kd[2] = kq.z, kd[3] = kq.w;
                    ((uint4 *)(vs + j * D))[vq] = ((const uint4 *)vrow)[vq];
                }
            } else {
                for (int i = threadIdx.x; i < nk * words; i += blockDim.x) {
                    const int j = i / words, wd = i % words;
                    const uint16_t *krow = a.kv + s_row[j] * D, *vrow = krow + vrows * D;
                    ((uint32_t *)(ks + j * KST))[wd] = ((const uint32_t *)krow)[wd];
                    ((uint32_t *)(vs + j * D))[wd] = ((const uint32_t *)vrow)[wd];
                }
            }
            if constexpr (I16) {  // the tile's scales: row r's at r * nsc (kv_block.cuh)
                for (int i = threadIdx.x; i < nk * nsc; i += blockDim.x) {
                    const int j = i / nsc, c = i % nsc;
                    kss[j * SST + c] = a.pg.scales[s_row[j] * nsc + c];
                    vss[j * SST + c] = a.pg.scales[(s_row[j] + vrows) * nsc + c];
                }
            }
            __syncthreads();
            if (mine) {
                const int k = k0 + lane;
                const bool valid = lane < nk && k >= my_lo && k <= my_hi;
                float s = -INFINITY;
                if (valid) {
                    const float *qr = qs + warp * D;
                    const uint32_t *kr = (const uint32_t *)(ks + lane * KST);
                    float acc = 0.0f;
                    if constexpr (I16) {  // per chunk of MX_KV_SCALE_BLOCK / 2 words: q . codes, times its scale
                        const float *ksc = kss + lane * SST;
                        constexpr int CW = MX_KV_SCALE_BLOCK / 2;
                        for (int c = 0; c < nsc; c++) {
                            float part = 0.0f;
                            if ((c + 1) * CW <= words) {  // a whole chunk
#pragma unroll
                                for (int w = 0; w < CW; w++) {
                                    const int d2 = c * CW + w;
                                    const float2 kf = kv_pair<true>(kr[d2]);
                                    part = fmaf(qr[2 * d2], kf.x, part);
                                    part = fmaf(qr[2 * d2 + 1], kf.y, part);
                                }
                            } else {  // the row's last, partial chunk
                                for (int d2 = c * CW; d2 < words; d2++) {
                                    const float2 kf = kv_pair<true>(kr[d2]);
                                    part = fmaf(qr[2 * d2], kf.x, part);
                                    part = fmaf(qr[2 * d2 + 1], kf.y, part);
                                }
                            }
                            acc = fmaf(part, ksc[c], acc);
                        }
                    } else {
                        for (int d2 = 0; d2 < words; d2++) {
                            const float2 kf = kv_pair<false>(kr[d2]);
                            acc = fmaf(qr[2 * d2], kf.x, acc);
                            acc = fmaf(qr[2 * d2 + 1], kf.y, acc);
                        }
                    }
                    s = acc;
                }
                const float tmax = warp_max<W>(s);
                if (tmax != -INFINITY) {  // warp-uniform
                    const float mn = fmaxf(m, tmax);
                    const float corr = expf(m - mn);
                    const float p = valid ? expf(s - mn) : 0.0f;
                    l = l * corr + warp_sum<W>(p);
#pragma unroll
                    for (int i = 0; i < DPL; i++) o[i] *= corr;
                    for (int j = 0; j < nk; j++) {
                        const float pj = mxg_shfl<W>(p, j);
#pragma unroll
                        for (int i = 0; i < DPL; i++) {
                            const int d = lane + i * W;
                            if (d < D) {
                                if constexpr (I16)
                                    o[i] = fmaf(pj * vss[j * SST + d / MX_KV_SCALE_BLOCK],
                                                (float)(int16_t)vs[j * D + d], o[i]);
                                else
                                    o[i] = fmaf(pj, f16_to_f32(vs[j * D + d]), o[i]);
                            }
                        }
                    }
                    m = mn;
                }
            }
            __syncthreads();
        }
        __syncthreads();
    }
    if (!live) return;
    if (a.splits == 1) {
        float *orow = a.out + ((int64_t)t * a.n_heads + h) * D;
        const float inv = inv_denominator(m, l, a.sinks ? a.sinks[h] : -INFINITY);
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + i * W;
            if (d < D) orow[d] = o[i] * inv;
        }
    } else {
        float *pp = a.part + (((int64_t)t * a.n_heads + h) * a.splits + split) * (D + 2);
        if (lane == 0) pp[0] = m, pp[1] = l;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + i * W;
            if (d < D) pp[2 + d] = o[i];
        }
    }
    }
}

// Merges the splits of one (token, head): rescale each partial by exp(m_s - M).
__global__ void attn_combine_kernel(float *out, const float *__restrict__ part, int D, int splits,
                                    const float *__restrict__ sinks, int n_heads) {
    const float *pp = part + (int64_t)blockIdx.x * splits * (D + 2);
    float M = -INFINITY;
    for (int s = 0; s < splits; s++) M = fmaxf(M, pp[s * (D + 2)]);
    float Lsum = 0.0f;
    for (int s = 0; s < splits; s++) {
        const float ms = pp[s * (D + 2)];
        if (ms != -INFINITY) Lsum += pp[s * (D + 2) + 1] * expf(ms - M);
    }
    const float inv = inv_denominator(M, Lsum, sinks ? sinks[blockIdx.x % n_heads] : -INFINITY);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < splits; s++) {
            const float ms = pp[s * (D + 2)];
            if (ms != -INFINITY) acc = fmaf(pp[s * (D + 2) + 2 + d], expf(ms - M), acc);
        }
        out[(int64_t)blockIdx.x * D + d] = acc * inv;
    }
}

template <int W, bool I16>
void launch_attn(const mxg_launch *L, const AttnArgs &a, dim3 grid, size_t smem) {
    const int dpl = (a.head_dim + W - 1) / W;
    gpuStream_t s = (gpuStream_t)L->stream;
    if (dpl <= 1)
        attn_kernel<W, 1, I16><<<grid, ROWS * W, smem, s>>>(a);
    else if (dpl <= 2)
        attn_kernel<W, 2, I16><<<grid, ROWS * W, smem, s>>>(a);
    else if (dpl <= 4)
        attn_kernel<W, 4, I16><<<grid, ROWS * W, smem, s>>>(a);
    else if (W == 32)
        attn_kernel<W, (W == 32 ? 8 : 4), I16><<<grid, ROWS * W, smem, s>>>(a);
}

}  // namespace

extern "C" size_t mxg_attention_scratch_bytes(int sm_count, int head_dim) {
    // n * n_heads * splits <= ROWS * 4 * sm_count by the split rule below.
    return (size_t)ROWS * 4 * (size_t)sm_count * (size_t)(head_dim + 2) * sizeof(float);
}

extern "C" void mxg_attention(const mxg_launch *L, float *out, const float *q, const mx_kv_ref *r, int n, int n_heads,
                              float scale, int window, const float *sinks, bool decode) {
    const mx_kv_layout *lay = &r->lay;
    const int D = lay->head_dim;
    MX_ASSERT(D % 2 == 0 && D <= kMaxHeadDim && n_heads % lay->n_kv_heads == 0 && r->layer < lay->n_layers);
    if (n == 0) return;
    if (L->attn_decode && mxg_attention_decode(L, out, q, r, n, n_heads, scale, window, sinks, decode) == 0) return;
    // Prefill-shaped records (at least kMmaMinTokens tokens, no decode hint) on tensor cores when asked
    // (MLXCEL_GPU_ATTN_MMA=1, vendor/cuda/attn_mma.cu; it declines shapes and devices it has no kernel for).
    if (L->attn_mma && !decode && n >= kMmaMinTokens && mxg_attention_mma(L, out, q, r, n, n_heads, scale, window, sinks) == 0)
        return;
    AttnArgs a;
    a.out = out, a.part = (float *)L->scratch, a.q = q, a.sinks = sinks, a.kv = (const uint16_t *)r->kv, a.slot = r->slot, a.pos = r->pos;
    a.pg = kv_pages(r, L->kv_i16);
    a.n = n, a.n_heads = n_heads, a.n_kv_heads = lay->n_kv_heads, a.head_dim = D, a.max_ctx = lay->max_ctx;
    a.window = window, a.scale = scale;
    // Decode-sized steps with grouped query heads: one block per (token, group of ROWS query heads
    // of one KV head), so each key tile is loaded once for the group and every warp computes; the
    // context is split across blocks (flash-decoding) to fill the GPU. Larger steps (prefill): one
    // block per (ROWS consecutive tokens, query head), sharing tiles between the tokens.
    const int group = n_heads / lay->n_kv_heads, parts = (group + ROWS - 1) / ROWS;
    const bool head_rows = group >= 2 && n <= kHeadRowsMaxTokens && !L->attn_token_rows;
    a.head_parts = head_rows ? parts : 0;
    const int row_blocks = head_rows ? n : (n + ROWS - 1) / ROWS, col_blocks = head_rows ? lay->n_kv_heads * parts : n_heads;
    const int64_t blocks = (int64_t)row_blocks * col_blocks, target = 2 * (int64_t)L->sm_count;
    int splits = 1;
    if (blocks < target) {
        int64_t s = (target + blocks - 1) / blocks, by_ctx = (lay->max_ctx + 2 * BK - 1) / (2 * BK);
        s = s < by_ctx ? s : by_ctx;
        s = s < kMaxSplits ? s : kMaxSplits;
        while (s > 1 && (size_t)n * n_heads * s * (D + 2) * sizeof(float) > L->scratch_bytes) s--;
        splits = (int)(s < 1 ? 1 : s);
    }
    a.splits = splits;
    // Shared memory: the K and V tiles as stored (2 bytes per element), the queries, and for I16
    // the tile's scales (at head_dim 256: 36,992 + 4,352 bytes, under the 48 KB default).
    const size_t smem = (size_t)BK * (D + 2) * 2 + (size_t)BK * D * 2 + (size_t)ROWS * D * sizeof(float) +
                        (L->kv_i16 ? (size_t)2 * BK * scale_stride(a.pg.n_scales) * sizeof(float) : 0);
    dim3 grid((unsigned)row_blocks, (unsigned)col_blocks, (unsigned)splits);
    if (L->kv_i16) {
        MXG_WARP_DISPATCH(L->warp, launch_attn<W, true>(L, a, grid, smem));
    } else {
        MXG_WARP_DISPATCH(L->warp, launch_attn<W, false>(L, a, grid, smem));
    }
    if (splits > 1) {
        int threads = D > 256 ? 256 : (D + 31) / 32 * 32;
        attn_combine_kernel<<<(unsigned)(n * n_heads), threads, 0, (gpuStream_t)L->stream>>>(out, a.part, D, splits,
                                                                                               sinks, n_heads);
    }
}
