// SPDX-License-Identifier: MIT
// NVIDIA Hopper prefill product on affine 4-bit weights (bf16, f16 or f32 scales and biases), on the
// warpgroup tensor-core instruction with its A operand in registers (wgmma.mma_async,
// vendor/cuda/wgmma.cuh), compiled only in CUDA builds and only for sm_90a (the device code under
// __CUDA_ARCH_FEAT_SM90_ALL; elsewhere the kernel is empty and the launcher declines): out[n, rows]
// = x[n, cols] @ w^T (+ bias), computed as out^T[rows, tokens] = W[rows, k] x X^T. Selected by
// MLXCEL_GPU_PREFILL_KERNEL=wgmma (kernels.h); matmul_mma.cu dispatches here and, on a decline (-1:
// no sm_90a code for this device, other formats, cols not a multiple of 64, unaligned pointers, a
// scratch too small for 64 tokens), tries matmul_pipe.cu, then the WMMA kernel.
//
// The form, and why. The first form of this product dequantized each k step's weights into a bf16
// tile in shared memory (wgmma's B) and then waited for its wgmmas (wait_group 0, two barriers per
// step), so the tensor cores and the dequantization took turns (bench/RESULTS.md, GPU run 32: 13%
// slower than pipe). Here the operands are swapped: the weights are wgmma's A, taken from registers,
// whose per-warp fragment is mma.sync m16n8k16's A, so pipe's dequantization into registers
// (0x4300 OR mask, two packed bf16 FMAs per register, no shared tile, no proxy fence for it) carries
// over; the activations (bf16, K-major per token, the layout wgmma reads for 16-bit types) are B in
// shared memory, N = the token tile. Each warpgroup issues its four k16 wgmmas of step k
// asynchronously, then dequantizes step k + 1's A fragments into a second register set while they
// run, then waits (wait_group 0): the integer work of a step hides under the previous step's tensor
// work, with one barrier per step. A producer warp dequantizing into a swizzled shared tile
// (the alternative) would still write and read a whole bf16 tile per step through shared memory,
// which already bounds this product (activations + tile reads ~ the tensor time, RESULTS), and
// needs mbarriers the host emulation would have to model; registers cost nothing in bandwidth.
//
// Two launches per product: the activations rounded to bf16 into L->scratch in this product's k
// order and in the ring's (act_bf16_wg_kernel, below: each k step of 8 tokens one contiguous
// kilobyte, so the product's 16-byte copies read whole sectors, bench/RESULTS.md), then the product. Block tile 128 weight rows (two warpgroups,
// 64 rows each) x 128 tokens where that gives every multiprocessor a block, else 128 x 64, else 64
// x 64 (one warpgroup); k step 64; wgmma m64n128k16 or m64n64k16 (float32 accumulators, 64 or 32
// per thread). ptxas (nvcc 13, sm_90a): 157-168 registers at 128 x 128 (one block per
// multiprocessor; held to 128 for two blocks it spills), 115-128 at the 64-token tiles (two blocks
// of 128 x 64, up to four of 64 x 64); no spills. A 4-stage cp.async ring (vendor/cuda/cp_async.cuh)
// holds per step the bf16 activations [tokens][64] in the no-swizzle K-major core-matrix layout
// (wgmma_layout.cuh: mxg_wg_offset, one definition for the copies and the descriptors), the packed
// codes as stored [rows][32 bytes] and the scale and bias words [rows][2 halves][scale, bias] (as
// pipe copies them; for 2-byte scales at group 64 on 16-byte aligned rows, instead one 16-byte copy
// per row and array of 8 steps' words into two slots made of those areas: wide_sb below, bench/
// RESULTS.md); copies run three steps ahead. Per k step kt:
//   wgmma.fence; 4 x wgmma (A: registers `cur`, B: ring stage kt % 4); commit;
//   wait for step kt+1's copies; fence.proxy.async; barrier (every thread has waited for its step
//   kt-1 products: that stage is free); copy step kt+3 into it; dequantize step kt+1 into `nxt`;
//   wgmma.wait_group 0 (step kt's products done: `cur` and stage kt free).
// The two register sets alternate by unrolling the k loop by two (no register moves).
//
// The order of k inside a k16 slice: a sum over k does not depend on which k goes into which slot
// as long as A and B agree. Lane (g, t) (g = lane / 4, t = lane % 4) holds A slots 2t, 2t+1 (lower
// half) and 2t+8, 2t+9 (upper) of rows g and g+8 of its warp's 16; it fills them from the code
// words 2t and 2t+1 of each row's 8 words of the step (one 8-byte shared load per row): slice s
// takes pair s, codes (s, s+4), of word 2t for the lower slots and of word 2t+1 for the upper. So
// k16 slice s, 8-slot half e, slot 2j + i is column 16 j + 8 e + s + 4 i of the step; the first
// launch stores every 64 columns as those eight 16-byte halves (chunk 2 s + e), so a 16-byte
// cp.async of the activations lands as one row of one core matrix. Group 32 gives two scale groups
// per step: lanes t < 2 (columns 0-31) take the first. bf16 scales take the packed path; f16 and
// f32 scales are dequantized in float32 (s * q + b, then rounded to bf16, as pipe does).
//
// Precision: every weight bf16(s * q + b), every activation bf16(x), sums in float32: the
// tensor-core bound of test_gpu_ops (elem_bound). tests/gpu/mma_emulation/test_matmul_wgmma_emulated.cpp
// runs this file on the host emulation, with a wgmma that places the register fragments and decodes
// the descriptor by the PTX ISA's rules and checks that neither its A registers nor its shared B
// change while it is in flight (emu_wgmma.h).
#include "backends/gpu/dequant.cuh"
#include "backends/gpu/vendor/cuda/cp_async.cuh"
#include "backends/gpu/vendor/cuda/wgmma.cuh"

namespace {

constexpr int BK = 64, kStages = 4, kMinScratchTokens = 64, kSbSteps = 8;  // kSbSteps: k steps per wide scale copy

template <int WG, int NT>
struct WgTile {
    static constexpr int BR = 64 * WG, kThreads = 128 * WG;  // weight rows, threads
    static constexpr int x_bytes = NT * BK * 2;              // bf16 activations [NT][64], wgmma layout
    static constexpr int c_bytes = BR * BK / 2;              // codes [BR][32 bytes]
    static constexpr int sb_bytes = BR * 2 * 2 * 4;          // words [BR][2 halves][scale, bias]
    static constexpr int stage_bytes = x_bytes + c_bytes + sb_bytes;
    static constexpr int smem_bytes = kStages * stage_bytes;  // 90112 (128 x 128), 57344 (128 x 64), 45056 (64 x 64)
    static_assert(x_bytes % 1024 == 0 && stage_bytes % 128 == 0, "tiles aligned");
    static_assert(sb_bytes >= BR * 16 && kStages >= 4, "a wide scale slot is two stages' word areas, two slots");
};

// xb = bf16(x) in this product's k order and in the ring's layout, so that each k step of 8 tokens
// is one contiguous kilobyte: 16-byte chunk c of token tok's block kb of 64 columns goes to chunk
// ((tok / 8) nkb + kb) 64 + 8 c + tok % 8 (nkb = cols / 64; x 16-byte aligned, [nt, cols]), and its
// word j (j < 4) holds columns 16 j + 8 (c % 2) + c / 2 (lower half) and that + 4 (upper half).
// Thread i writes the 8 chunks of (tok, kb) with i / 8 = (tok / 8) nkb + kb, i % 8 = tok % 8 (8
// lanes: 128 contiguous bytes a store); `blocks` = nkb times nt rounded up to 8, the padding tokens
// copies of token nt - 1 (read by the product's last token group, their results never stored).
__global__ void act_bf16_wg_kernel(uint4 *__restrict__ xb, const float *__restrict__ x, int64_t blocks, int nkb, int nt) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= blocks) return;
    const int64_t q = i / 8, tok = q / nkb * 8 + i % 8, kb = q % nkb;
    const float4 *src = (const float4 *)(x + (tok < nt ? tok : nt - 1) * (int64_t)nkb * 64 + kb * 64);
    float v[64];
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float4 f = src[j];
        v[4 * j] = f.x, v[4 * j + 1] = f.y, v[4 * j + 2] = f.z, v[4 * j + 3] = f.w;
    }
#pragma unroll
    for (int c = 0; c < 8; c++) {
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int k = 16 * j + 8 * (c % 2) + c / 2;
            w[j] = mxg_pack_bf16x2(v[k], v[k + 4]);
        }
        xb[q * 64 + 8 * c + i % 8] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// Writes 1 where this binary's code for the running device is sm_90a (the wgmma kernel's body).
__global__ void wgmma_probe_kernel(int *flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (threadIdx.x == 0) *flag = 1;
#else
    if (threadIdx.x == 0) *flag = 0;
#endif
}

// One k16 product of this warpgroup's 64 rows and the tile's NT tokens.
template <int NT>
__device__ __forceinline__ void wgmma_rs(float (&acc)[NT / 2], const uint32_t (&a)[4], uint64_t db) {
    if constexpr (NT == 128)
        mxg_wgmma_m64n128k16_rs_bf16(acc, a, db);
    else
        mxg_wgmma_m64n64k16_rs_bf16(acc, a, db);
}

// out [n, m.rows], xb [n, m.cols] (bf16, this product's k order), bias [m.rows] or NULL.
template <int ST, int WG, int NT>
__global__ void __launch_bounds__(128 * WG, NT == 128 ? 1 : 2) wgmma_kernel(float *__restrict__ out, const uint16_t *__restrict__ xb,
                                                           MatView m, const float *__restrict__ bias, int n) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using T = WgTile<WG, NT>;
    constexpr int kThreads = T::kThreads;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int t0 = blockIdx.y * NT;
    const int64_t r0 = (int64_t)blockIdx.x * T::BR;
    const int nk = m.cols / BK;
    const bool two_groups = m.group_size == 32;  // two scale groups per k step
    // Wide scale copies: 2-byte scales at group 64 with every row's scales and biases 16-byte
    // aligned (groups a multiple of 8, the arrays 16-byte aligned): one 16-byte copy per row and
    // array brings kSbSteps steps' words, into one of two slots (chunk c of kSbSteps steps: slot c %
    // 2) made of the ring stages' word areas (slot j: scales [BR][16 bytes] in stage 2j's, biases in
    // stage 2j + 1's), copied with the first step of the chunk. Chunk c + 2 overwrites slot c % 2
    // in step 8c + 13 (after its barrier), when every thread has dequantized step 8c + 7 (in step
    // 8c + 6). Elsewhere one 4-byte copy per row, half and step, into the stage's area.
    const bool wide_sb = ST != ST_F32 && m.group_size == 64 && m.groups % kSbSteps == 0 &&
                         !(((uintptr_t)m.scales | (uintptr_t)m.biases) & 15);

    // Copies of k step kt into ring stage st. Token groups of 8 past the last and rows past the
    // matrix read the last one (their results are never stored). Activations: chunk i = p * kThreads
    // + tid is chunk (i / 8) % 8 of token (i % 8) + 8 (i / 64), so a quarter warp reads 128
    // contiguous bytes of the scratch (4 whole sectors; act_bf16_wg_kernel's order) and fills one
    // core matrix (8 tokens x 16 bytes, 32 banks); codes: thread tid copies 16 bytes of row tid / 2;
    // scale and bias words: thread tid copies row tid / 2's scale (tid even) or bias word(s).
    constexpr int kXCopies = NT * 8 / kThreads;  // activation copies per thread and step
    const int xc = (tid / 8) % 8, crow = tid / 2, cpart = tid % 2;
    const uint16_t *xsrc[kXCopies];  // each copy's chunk of step 0 (step kt: + kt 64 chunks of 8 elements)
#pragma unroll
    for (int p = 0; p < kXCopies; p++) {
        const int grp = t0 / 8 + (p * kThreads + tid) / 64, last_group = (n - 1) / 8;  // token groups of 8
        xsrc[p] = xb + (((int64_t)(grp < last_group ? grp : last_group) * nk) * 64 + xc * 8 + tid % 8) * 8;
    }
    const int64_t cr = r0 + crow < m.rows ? r0 + crow : m.rows - 1;
    const uint8_t *csrc = m.data + cr * m.row_bytes + cpart * 16;
    const void *sb_base = cpart ? m.biases : m.scales;
    auto issue = [&](int st, int kt) {
        unsigned char *stage = smem_raw + st * T::stage_bytes;
        const int k0 = kt * BK;
#pragma unroll
        for (int p = 0; p < kXCopies; p++) {
            const int r = tid % 8 + 8 * ((p * kThreads + tid) / 64);
            mxg_cp_async16(stage + mxg_wg_offset(r, xc * 8), xsrc[p] + (int64_t)kt * 512);
        }
        mxg_cp_async16(stage + T::x_bytes + crow * 32 + cpart * 16, csrc + k0 / 2);
        if (wide_sb) {
            if (kt % kSbSteps == 0)
                mxg_cp_async16(smem_raw + (2 * ((kt / kSbSteps) % 2) + cpart) * T::stage_bytes + T::x_bytes + T::c_bytes + crow * 16,
                               (const uint16_t *)sb_base + cr * m.groups + kt);
            return;
        }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            if (hh == 1 && !two_groups) continue;
            const int64_t si = cr * m.groups + ((k0 + 32 * hh) >> m.group_shift);
            mxg_cp_async4(stage + T::x_bytes + T::c_bytes + ((crow * 2 + hh) * 2 + cpart) * 4, sb_word<ST>(sb_base, si));
        }
    };

    // Dequantizes this lane's A fragments of k step kt (ring stage st): rows wrow and wrow + 8 of
    // the block, code words 2t and 2t + 1 of each (one 8-byte load; a half warp reads 4 rows x 32
    // bytes, 32 banks), a[s][j + 2e] = pair s of word 2t + e of row wrow + 8 j. Bit j of rowpar:
    // the parity of that row's first scale index (clamped as the copies are), so (that ^ group) & 1
    // picks a 2-byte scale's half of its copied word; h: this lane's scale group of the step.
    const int wrow = 64 * (warp / 4) + 16 * (warp % 4) + g;
    const int h = two_groups ? t >> 1 : 0;
    int rowpar = 0;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int64_t r = r0 + wrow + 8 * j;
        rowpar |= (int)(((r < m.rows ? r : m.rows - 1) * m.groups) & 1) << j;
    }
    auto dequant = [&](int st, int kt, uint32_t (&a)[4][4]) {
        const unsigned char *stage = smem_raw + st * T::stage_bytes;
        const int gpar = ((kt * BK + 32 * h) >> m.group_shift) & 1;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int rl = wrow + 8 * j;
            const uint2 wd = *(const uint2 *)(stage + T::x_bytes + rl * 32 + t * 8);
            uint2 sbw;
            if (wide_sb) {  // the word of step kt's scale in its chunk's slot (h = 0 at group 64)
                const unsigned char *sp = smem_raw + 2 * ((kt / kSbSteps) % 2) * T::stage_bytes + T::x_bytes + T::c_bytes +
                                          rl * 16 + (kt % kSbSteps) / 2 * 4;
                sbw = make_uint2(*(const uint32_t *)sp, *(const uint32_t *)(sp + T::stage_bytes));
            } else {
                sbw = *(const uint2 *)(stage + T::x_bytes + T::c_bytes + (rl * 2 + h) * 8);
            }
            const int par = ((rowpar >> j) & 1) ^ gpar;  // which half of a 2-byte scale's word
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const uint32_t w = e ? wd.y : wd.x;
#pragma unroll
                for (int s = 0; s < 4; s++) {
                    if constexpr (ST == ST_BF16) {
                        const uint32_t sc = (sbw.x >> (16 * par)) & 0xffffu, bi = (sbw.y >> (16 * par)) & 0xffffu;
                        const uint32_t v = ((w >> (4 * s)) & 0x000f000fu) | 0x43004300u;  // 128 + code
                        const uint32_t q = mxg_bf16x2_fma(v, 0x3f803f80u, 0xc300c300u);  // v * 1 - 128
                        a[s][j + 2 * e] = mxg_bf16x2_fma(sc | sc << 16, q, bi | bi << 16);
                    } else {
                        const float sc = sb_value<ST>(sbw.x, par), bi = sb_value<ST>(sbw.y, par);
                        const float lo = __uint_as_float(0x4b000000u | ((w >> (4 * s)) & 15u)) - 8388608.0f;
                        const float hi = __uint_as_float(0x4b000000u | ((w >> (4 * s + 16)) & 15u)) - 8388608.0f;
                        a[s][j + 2 * e] = mxg_pack_bf16x2(fmaf(sc, lo, bi), fmaf(sc, hi, bi));
                    }
                }
            }
        }
    };

    float acc[NT / 2];
#pragma unroll
    for (int i = 0; i < NT / 2; i++) acc[i] = 0.0f;
    uint32_t a0[4][4], a1[4][4];  // the A fragments of two k steps: one in flight, one being written

#pragma unroll
    for (int s = 0; s < kStages - 1; s++) {
        if (s < nk) issue(s, s);
        mxg_cp_async_commit();
    }
    mxg_cp_async_wait<kStages - 2>();  // step 0 landed (this thread's copies) ...
    mxg_fence_proxy_async();
    __syncthreads();                   // ... everyone's
    dequant(0, 0, a0);

    // Step kt: the products of step kt from `cur` (issued, not awaited); the barrier that publishes
    // step kt + 1's copies (and, every thread having waited for its step kt - 1 products, frees
    // step kt - 1's stage for step kt + 3's copies); step kt + 1's fragments into `nxt` while the
    // products run; then their wait.
    const uint32_t x_base = mxg_smem_u32(smem_raw);
    auto step = [&](int kt, uint32_t (&cur)[4][4], uint32_t (&nxt)[4][4]) {
        const int st = kt % kStages;
        mxg_wgmma_touch(acc);
#pragma unroll
        for (int s = 0; s < 4; s++) mxg_wgmma_touch(cur[s]);
        mxg_wgmma_fence();
#pragma unroll
        for (int s = 0; s < BK / 16; s++)
            wgmma_rs<NT>(acc, cur[s], mxg_wgmma_desc(x_base + st * T::stage_bytes + s * 2 * MXG_WG_LBO, MXG_WG_LBO, MXG_WG_SBO));
        mxg_wgmma_commit();
        if (kt + 1 < nk) {
            mxg_cp_async_wait<kStages - 3>();  // step kt + 1 landed (this thread's copies) ...
            mxg_fence_proxy_async();
            __syncthreads();                   // ... everyone's; step kt - 1's stage free
            if (kt + kStages - 1 < nk) issue((kt + kStages - 1) % kStages, kt + kStages - 1);
            mxg_cp_async_commit();
            dequant((kt + 1) % kStages, kt + 1, nxt);
        }
        mxg_wgmma_wait<0>();  // step kt's products done: `cur` and stage st free
        mxg_wgmma_touch(acc);
#pragma unroll
        for (int s = 0; s < 4; s++) mxg_wgmma_touch(cur[s]);
    };
    for (int kt = 0; kt < nk; kt += 2) {
        step(kt, a0, a1);
        if (kt + 1 < nk) step(kt + 1, a1, a0);
    }

    // Epilogue: accumulator i is row wrow + 8 ((i / 2) % 2), token 8 (i / 4) + 2 t + i % 2 of the tile.
#pragma unroll
    for (int i = 0; i < NT / 2; i++) {
        const int tt = t0 + 8 * (i / 4) + 2 * t + i % 2;
        const int64_t rr = r0 + wrow + 8 * ((i / 2) % 2);
        if (tt < n && rr < m.rows) out[(int64_t)tt * m.rows + rr] = acc[i] + (bias ? bias[rr] : 0.0f);
    }
#else
    (void)out, (void)xb, (void)m, (void)bias, (void)n;
#endif
}

template <int ST, int WG, int NT>
void launch(const mxg_launch *L, float *out, const uint16_t *xb, const MatView &m, const float *bias, int n) {
    using T = WgTile<WG, NT>;
    static bool allowed = false;  // the attribute once per instance (host code, one thread per backend)
    if (!allowed) {
        mxg_allow_smem(wgmma_kernel<ST, WG, NT>, T::smem_bytes);
        allowed = true;
    }
    const dim3 grid((unsigned)((m.rows + T::BR - 1) / T::BR), (unsigned)((n + NT - 1) / NT));
    wgmma_kernel<ST, WG, NT><<<grid, T::kThreads, T::smem_bytes, (cudaStream_t)L->stream>>>(out, xb, m, bias, n);
}

int64_t tiles(int64_t rows, int n, int br, int nt) { return ((rows + br - 1) / br) * (((int64_t)n + nt - 1) / nt); }

// The block tile for nt tokens: the largest of 128 rows x 128 tokens, 128 x 64 and 64 x 64 that
// gives every multiprocessor a block.
template <int ST>
void launch_fmt(const mxg_launch *L, float *out, const uint16_t *xb, const MatView &m, const float *bias, int nt) {
    const int64_t fill = L->sm_count > 0 ? L->sm_count : 1;
    if (tiles(m.rows, nt, 128, 128) >= fill)
        launch<ST, 2, 128>(L, out, xb, m, bias, nt);
    else if (tiles(m.rows, nt, 128, 64) >= fill)
        launch<ST, 2, 64>(L, out, xb, m, bias, nt);
    else
        launch<ST, 1, 64>(L, out, xb, m, bias, nt);
}

}  // namespace

// 1 when this binary has sm_90a code for the current device (the wgmma kernel's body), else 0; runs
// a one-thread kernel on `stream` and waits for it. Called once per backend (gpu_backend.c), never
// inside a graph capture.
extern "C" int mxg_wgmma_probe(void *stream) {
    int *flag = NULL, host = 0;
    if (cudaMalloc((void **)&flag, sizeof(int)) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    wgmma_probe_kernel<<<1, 32, 0, (cudaStream_t)stream>>>(flag);
    const bool ok = cudaGetLastError() == cudaSuccess &&
                    cudaMemcpyAsync(&host, flag, sizeof host, cudaMemcpyDeviceToHost, (cudaStream_t)stream) == cudaSuccess &&
                    cudaStreamSynchronize((cudaStream_t)stream) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();
    cudaFree(flag);
    return ok && host == 1;
}

// Called by mxg_matmul_mma (matmul_mma.cu) for MXG_PREFILL_WGMMA; same contract, -1 when declined
// (nothing enqueued).
int mxg_matmul_wgmma(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    if (!L->wgmma || L->cc != 90 || L->warp != 32 || n < 1) return -1;
    if (w->q.mode != MX_QUANT_AFFINE || w->q.bits != 4 || w->n_experts != 1) return -1;
    if (w->q.group_size != 32 && w->q.group_size != 64 && w->q.group_size != 128) return -1;
    if (w->cols % BK != 0 || w->cols > (1 << 30) || w->rows > (1 << 30)) return -1;
    const int st = w->scale_dtype == MX_DTYPE_BF16 ? ST_BF16 : w->scale_dtype == MX_DTYPE_F16 ? ST_F16
                 : w->scale_dtype == MX_DTYPE_F32  ? ST_F32 : -1;
    if (st < 0) return -1;
    if (((uintptr_t)w->data & 15) || ((uintptr_t)w->scales & 3) || ((uintptr_t)w->biases & 3) ||
        ((uintptr_t)x & 15) || ((uintptr_t)L->scratch & 15))
        return -1;
    int64_t run_tokens = (int64_t)(L->scratch_bytes / ((size_t)w->cols * 2)) / 64 * 64;  // per launch pair
    if (run_tokens < kMinScratchTokens) return -1;
    if (run_tokens > 65535 * 64) run_tokens = 65535 * 64;  // grid y
    const MatView m = mat_view(w);
    uint16_t *xb = (uint16_t *)L->scratch;
    for (int t0 = 0; t0 < n; t0 += (int)run_tokens) {
        const int nt = n - t0 < run_tokens ? n - t0 : (int)run_tokens;
        const int64_t blocks = (int64_t)(nt + 7) / 8 * 8 * (m.cols / 64);  // tokens padded to 8 (<= run_tokens)
        act_bf16_wg_kernel<<<(unsigned)((blocks + 127) / 128), 128, 0, (cudaStream_t)L->stream>>>(
            (uint4 *)xb, x + (int64_t)t0 * m.cols, blocks, m.cols / 64, nt);
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
