// SPDX-License-Identifier: MIT
// NVIDIA tensor-core prefill product on affine 4-bit weights with a cp.async pipeline (sm_80+),
// compiled only in CUDA builds: out[n, rows] = x[n, cols] @ w^T (+ bias). The default prefill
// product (MLXCEL_GPU_PREFILL_KERNEL=pipe, kernels.h; faster than the WMMA kernel in run 20) where
// it applies: matmul_mma.cu dispatches here and takes back what this declines (-1): other formats,
// cols not a multiple of 64, unaligned pointers, a scratch too small for 64 tokens.
//
// Two launches per product. First the activations are rounded to bf16 once (not once per block
// column) into L->scratch, each run of 8 columns stored in the order 0 4 1 5 2 6 3 7 (below: why;
// the kernel: vendor/cuda/act_bf16.cuh).
// Then the product: block tile BM tokens x BN rows, 128 x 128 where that gives every
// multiprocessor a block, else 64 x 128, else 64 x 64 (as the WMMA kernel picks), k step 64, 8 warps
// (2 x 4) each owning BM/2 tokens x BN/4 rows as m16n8k16 mma.sync tiles
// (vendor/cuda/mma_m16n8k16.cuh) with float32 accumulators. A 4-stage ring in dynamic shared
// memory holds, per k step, the bf16 activations [BM][64], the packed codes as stored [BN
// rows][32 bytes], and each row's scale and bias words [BN][2 halves]: all three are
// copied with cp.async (vendor/cuda/cp_async.cuh) three steps ahead, so one barrier per k step
// suffices and no thread holds loads in registers. The codes are dequantized from shared memory
// straight into the mma's B registers, with no dequantized tile.
//
// The order of k inside an mma: a sum over k does not depend on which k goes into which of the
// mma's 16 k slots, as long as A and B agree. Lane (g, t) of a warp (g = lane / 4, t = lane % 4)
// feeds B slots 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1) of column g; here it feeds them from one 32-bit
// word of 8 codes of its row: word 2t + P (P = 0, 1) of the row's 8 words of the k step, codes
// (0, 4) and (1, 5) for one mma, (2, 6) and (3, 7) for the next. A pair of codes (c, c + 4) is one
// mask of the word shifted by 4c: OR-ed into 0x4300 it is bf16 128 + code, exactly; minus 128 and
// times scale plus bias (two packed bf16 FMAs, each rounded once) it is the weight in bf16. The
// activations' order 0 4 1 5 2 6 3 7 makes the matching A registers (row g and g + 8, the same k)
// one 16-byte shared load per row for two mmas. Activation chunks are stored with 16-byte chunk c
// of row r at c ^ (r & 1), so the 8 lanes of a shared load phase (rows g, g + 1) hit distinct banks.
//
// Scales: group 32 gives two groups per k step (lanes t < 2 read the first), 64 and 128 one. The
// copy of a 2-byte scale takes the aligned 4-byte word around it (scales and biases are 4-byte
// aligned: checked), the reader picks the half. bf16 scales take the packed path above; f16 and
// f32 scales are dequantized in float32 (s * q + b, then rounded to bf16, as the WMMA kernel), since
// rounding them to bf16 first would add error past the tensor-core bound.
//
// Precision: every weight is bf16(s * q + b), every activation bf16(x), products summed in float32
// (the tensor cores' order): the bound of the tensor-core path (test_gpu_ops, elem_bound).
// tests/gpu/mma_emulation/test_matmul_pipe_emulated.cpp runs this file on the host emulation.
#include "backends/gpu/dequant.cuh"
#include "backends/gpu/vendor/cuda/act_bf16.cuh"
#include "backends/gpu/vendor/cuda/cp_async.cuh"
#include "backends/gpu/vendor/cuda/mma_m16n8k16.cuh"

namespace {

constexpr int BK = 64, kStages = 4, kThreads = 256, kWarpsN = 4;
constexpr int kMinScratchTokens = 64;

template <int BM, int BN>
struct PipeTile {
    static constexpr int FM = BM / 2 / 16;                   // m16 tiles per warp (2 warps over tokens)
    static constexpr int NT = BN / kWarpsN / 8;              // n8 tiles per warp: 4 or 2
    static constexpr int WR = BN / kWarpsN;                  // rows per warp: 32 or 16
    static constexpr int a_bytes = BM * BK * 2;              // bf16 [BM][64], swizzled chunks
    static constexpr int b_bytes = BN * BK / 2;              // codes [BN][32 bytes]
    static constexpr int sb_bytes = BN * 2 * 2 * 4;          // words [BN][2 halves][scale, bias]
    static constexpr int stage_bytes = a_bytes + b_bytes + sb_bytes;
    static constexpr int smem_bytes = kStages * stage_bytes; // 90112 (128 x 128), 57344 (64 x 128), 45056 (64 x 64)
};

// out [n, m.rows], xb [n, m.cols] (bf16, runs reordered), bias [m.rows] or NULL. Two blocks per
// multiprocessor (at most 128 registers).
template <int ST, int BM, int BN>
__global__ void __launch_bounds__(kThreads, 2) pipe_kernel(float *__restrict__ out, const uint16_t *__restrict__ xb,
                                                         MatView m, const float *__restrict__ bias, int n) {
    using T = PipeTile<BM, BN>;
    constexpr int FM = T::FM, NT = T::NT;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / kWarpsN, wn = warp % kWarpsN;  // warp tile: tokens wm * BM/2.., rows wn * WR..
    const int g = lane / 4, t = lane % 4;
    const int t0 = blockIdx.y * BM;
    const int64_t r0 = (int64_t)blockIdx.x * BN;
    const int nk = m.cols / BK;
    const bool two_groups = m.group_size == 32;  // two scale groups per k step

    // Issues the copies of k step kt into ring stage st. Rows past the matrix and tokens past n
    // read the last one (their results are never stored). Each thread copies from one token row (BM
    // 128: its 4 chunks of 8 activations; BM 64: 2), one weight row (one 16-byte chunk of codes) and
    // the scale or the bias word(s) of one weight row (the first 2 BN threads), so it keeps three
    // source pointers.
    constexpr int kAChunks = BM * 8 / kThreads;
    const int arow = tid / (8 / kAChunks), achunk = (tid % (8 / kAChunks)) * kAChunks;
    const uint16_t *asrc = xb + (int64_t)(t0 + arow < n ? t0 + arow : n - 1) * m.cols + achunk * 8;
    const int brow = tid / 2, bchunk = tid % 2, bias_word = tid % 2;
    const int64_t br = r0 + brow < m.rows ? r0 + brow : m.rows - 1;
    const uint8_t *bsrc = m.data + br * m.row_bytes + bchunk * 16;
    const int64_t sb_row = br * m.groups;
    const void *sb_base = bias_word ? m.biases : m.scales;
    auto issue = [&](int st, int kt) {
        unsigned char *stage = smem_raw + st * T::stage_bytes;
        const int k0 = kt * BK;
#pragma unroll
        for (int i = 0; i < kAChunks; i++) {
            const int c = achunk + i;
            mxg_cp_async16(stage + arow * 128 + ((c ^ (arow & 1)) * 16), asrc + k0 + i * 8);
        }
        if (BN * 2 < kThreads && tid >= BN * 2) return;
        mxg_cp_async16(stage + T::a_bytes + brow * 32 + bchunk * 16, bsrc + k0 / 2);
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {  // scale or bias words [row][half][scale, bias]
            if (hh == 1 && !two_groups) continue;
            const int64_t si = sb_row + ((k0 + 32 * hh) >> m.group_shift);
            mxg_cp_async4(stage + T::a_bytes + T::b_bytes + ((brow * 2 + hh) * 2 + bias_word) * 4, sb_word<ST>(sb_base, si));
        }
    };

    float acc[FM][NT][4];
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;

    // This lane's scale half, and bit j: the parity of row * groups for its row of n8 tile j
    // (clamped as the copies are), so (that ^ group) & 1 picks a 2-byte scale's half of its word.
    const int h = two_groups ? t >> 1 : 0;
    int rowpar = 0;
#pragma unroll
    for (int j = 0; j < NT; j++) {
        const int64_t r = r0 + wn * T::WR + j * 8 + g;
        rowpar |= (int)(((r < m.rows ? r : m.rows - 1) * m.groups) & 1) << j;
    }

#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
        if (s < nk) issue(s, s);
        mxg_cp_async_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        mxg_cp_async_wait<kStages - 2>();  // step kt has landed (this thread's copies) ...
        __syncthreads();                   // ... everyone's; and step kt - 1's stage is free
        if (kt + kStages - 1 < nk) issue((kt + kStages - 1) % kStages, kt + kStages - 1);
        mxg_cp_async_commit();

        const unsigned char *stage = smem_raw + (kt % kStages) * T::stage_bytes;
        const int k0 = kt * BK;
        // Per P: each n8 tile's code word 2t + P and its row's scale and bias (from shared memory
        // again for P = 1, which keeps fewer registers live), then the B registers of its two mmas.
        const int gpar = ((k0 + 32 * h) >> m.group_shift) & 1;
#pragma unroll
        for (int P = 0; P < 2; P++) {
            uint32_t b[NT][2][2];  // [tile][mma of the pair][b0, b1]: code pairs (0,4) (1,5) | (2,6) (3,7)
#pragma unroll
            for (int j = 0; j < NT; j++) {
                const int rl = wn * T::WR + j * 8 + g;
                const uint32_t wd = *(const uint32_t *)(stage + T::a_bytes + rl * 32 + t * 8 + P * 4);
                const uint32_t *sbw = (const uint32_t *)(stage + T::a_bytes + T::b_bytes) + (rl * 2 + h) * 2;
                const int par = ((rowpar >> j) & 1) ^ gpar;  // which half of a 2-byte scale's word
                const float sc = sb_value<ST>(sbw[0], par), bi = sb_value<ST>(sbw[1], par);
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    if constexpr (ST == ST_BF16) {
                        const uint32_t s2 = mxg_pack_bf16x2(sc, sc), b2 = mxg_pack_bf16x2(bi, bi);  // exact
                        const uint32_t v = ((wd >> (4 * c)) & 0x000f000fu) | 0x43004300u;  // 128 + code
                        const uint32_t q = mxg_bf16x2_fma(v, 0x3f803f80u, 0xc300c300u);   // v * 1 - 128
                        b[j][c / 2][c % 2] = mxg_bf16x2_fma(s2, q, b2);
                    } else {
                        const float lo = __uint_as_float(0x4b000000u | ((wd >> (4 * c)) & 15u)) - 8388608.0f;
                        const float hi = __uint_as_float(0x4b000000u | ((wd >> (4 * c + 16)) & 15u)) - 8388608.0f;
                        b[j][c / 2][c % 2] = mxg_pack_bf16x2(fmaf(sc, lo, bi), fmaf(sc, hi, bi));
                    }
                }
            }
            // A: per m16 tile one 16-byte load of row g and one of row g + 8 (same swizzle).
            const int pos = ((2 * t + P) ^ (g & 1)) * 16;
#pragma unroll
            for (int i = 0; i < FM; i++) {
                const int ra = wm * (BM / 2) + i * 16 + g;
                const uint4 lo = *(const uint4 *)(stage + ra * 128 + pos);
                const uint4 hi = *(const uint4 *)(stage + (ra + 8) * 128 + pos);
                const uint32_t a0[4] = {lo.x, hi.x, lo.y, hi.y}, a1[4] = {lo.z, hi.z, lo.w, hi.w};
#pragma unroll
                for (int j = 0; j < NT; j++) {
                    mxg_mma_bf16_m16n8k16(acc[i][j], a0, b[j][0][0], b[j][0][1]);
                    mxg_mma_bf16_m16n8k16(acc[i][j], a1, b[j][1][0], b[j][1][1]);
                }
            }
        }
    }

    // Epilogue: accumulator e of tile (i, j) is token g (+8 for e >= 2), rows 2t, 2t + 1 (e & 1).
    const bool pairs = (m.rows & 1) == 0;
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e2 = 0; e2 < 2; e2++) {
                const int tt = t0 + wm * (BM / 2) + i * 16 + g + 8 * e2;
                const int64_t rr = r0 + wn * T::WR + j * 8 + 2 * t;
                if (tt >= n || rr >= m.rows) continue;
                float v0 = acc[i][j][2 * e2], v1 = acc[i][j][2 * e2 + 1];
                float *o = out + (int64_t)tt * m.rows + rr;
                if (bias) v0 += bias[rr];
                if (pairs) {  // rr even, rows even: rr + 1 < rows, 8-byte aligned
                    if (bias) v1 += bias[rr + 1];
                    *(float2 *)o = make_float2(v0, v1);
                } else {
                    o[0] = v0;
                    if (rr + 1 < m.rows) o[1] = v1 + (bias ? bias[rr + 1] : 0.0f);
                }
            }
}

template <int ST, int BM, int BN>
void launch(const mxg_launch *L, float *out, const uint16_t *xb, const MatView &m, const float *bias, int n) {
    using T = PipeTile<BM, BN>;
    static bool allowed = false;  // the attribute once per instance (host code, one thread per backend)
    if (!allowed) {
        mxg_allow_smem(pipe_kernel<ST, BM, BN>, T::smem_bytes);
        allowed = true;
    }
    const dim3 grid((unsigned)((m.rows + BN - 1) / BN), (unsigned)((n + BM - 1) / BM));
    pipe_kernel<ST, BM, BN><<<grid, kThreads, T::smem_bytes, (cudaStream_t)L->stream>>>(out, xb, m, bias, n);
}

int64_t tiles(int64_t rows, int n, int bm, int bn) { return ((rows + bn - 1) / bn) * (((int64_t)n + bm - 1) / bm); }

// The block tile for nt tokens: the largest of 128 x 128, 64 x 128 and 64 x 64 that gives every
// multiprocessor a block.
template <int ST>
void launch_fmt(const mxg_launch *L, float *out, const uint16_t *xb, const MatView &m, const float *bias, int nt) {
    const int64_t fill = L->sm_count > 0 ? L->sm_count : 1;
    if (tiles(m.rows, nt, 128, 128) >= fill)
        launch<ST, 128, 128>(L, out, xb, m, bias, nt);
    else if (tiles(m.rows, nt, 64, 128) >= fill)
        launch<ST, 64, 128>(L, out, xb, m, bias, nt);
    else
        launch<ST, 64, 64>(L, out, xb, m, bias, nt);
}

}  // namespace

// 32 MB holds 1365 tokens of 12288 columns (the 8B's down projection) per launch pair; with less,
// mxg_matmul_pipe runs more launch pairs (it declines below kMinScratchTokens tokens). The wgmma
// product (matmul_wgmma.cu) uses the same scratch the same way, and falls back to this one.
extern "C" size_t mxg_matmul_pipe_scratch_bytes(int prefill_kernel) {
    return prefill_kernel == MXG_PREFILL_PIPE || prefill_kernel == MXG_PREFILL_WGMMA ? (size_t)32 << 20 : 0;
}

// Called by mxg_matmul_mma (matmul_mma.cu) for MXG_PREFILL_PIPE; same contract, -1 when declined
// (nothing enqueued).
int mxg_matmul_pipe(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    if (L->cc < 80 || L->warp != 32 || n < 1) return -1;
    if (w->q.mode != MX_QUANT_AFFINE || w->q.bits != 4 || w->n_experts != 1) return -1;
    if (w->q.group_size != 32 && w->q.group_size != 64 && w->q.group_size != 128) return -1;
    if (w->cols % BK != 0 || w->cols > (1 << 30) || w->rows > (1 << 30)) return -1;
    const int st = w->scale_dtype == MX_DTYPE_BF16 ? ST_BF16 : w->scale_dtype == MX_DTYPE_F16 ? ST_F16
                 : w->scale_dtype == MX_DTYPE_F32  ? ST_F32 : -1;
    if (st < 0) return -1;
    if (((uintptr_t)w->data & 15) || ((uintptr_t)w->scales & 3) || ((uintptr_t)w->biases & 3) ||
        ((uintptr_t)x & 15) || ((uintptr_t)L->scratch & 15) || ((uintptr_t)out & 7))
        return -1;
    int64_t run_tokens = (int64_t)(L->scratch_bytes / ((size_t)w->cols * 2)) / 64 * 64;  // per launch pair
    if (run_tokens < kMinScratchTokens) return -1;
    if (run_tokens > 65535 * 64) run_tokens = 65535 * 64;  // grid y
    const MatView m = mat_view(w);
    uint16_t *xb = (uint16_t *)L->scratch;
    for (int t0 = 0; t0 < n; t0 += (int)run_tokens) {
        const int nt = n - t0 < run_tokens ? n - t0 : (int)run_tokens;
        const int64_t runs = (int64_t)nt * m.cols / 8;
        act_bf16_kernel<<<(unsigned)((runs + 255) / 256), 256, 0, (cudaStream_t)L->stream>>>(
            (uint4 *)xb, (const float4 *)(x + (int64_t)t0 * m.cols), runs);
        float *o = out + (int64_t)t0 * m.rows;
        if (st == ST_BF16)
            launch_fmt<ST_BF16>(L, o, xb, m, bias, nt);
        else if (st == ST_F16)
            launch_fmt<ST_F16>(L, o, xb, m, bias, nt);
        else
            launch_fmt<ST_F32>(L, o, xb, m, bias, nt);
    }
    return 0;
}
