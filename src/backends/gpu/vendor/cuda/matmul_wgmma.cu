// SPDX-License-Identifier: MIT
// NVIDIA Hopper prefill product on affine 4-bit weights with bf16 scales and biases, on the
// warpgroup tensor-core instruction (wgmma.mma_async, vendor/cuda/wgmma.cuh), compiled only in CUDA
// builds and only for sm_90a (the device code under __CUDA_ARCH_FEAT_SM90_ALL; elsewhere the kernel is
// empty and the launcher declines): out[n, rows] = x[n, cols] @ w^T (+ bias). Selected by
// MLXCEL_GPU_PREFILL_KERNEL=wgmma (kernels.h); matmul_mma.cu dispatches here and, on a decline (-1:
// no sm_90a code for this device, other formats or scale types, cols not a multiple of 64, unaligned
// pointers, a scratch too small for 64 tokens), tries matmul_pipe.cu, then the WMMA kernel.
//
// Why wgmma: mma.sync (matmul_pipe.cu) tops out at 144-165 TFLOP/s on the 8B's products, one warp's
// registers feeding every 16 x 8 x 16 step. One wgmma m64n128k16 reads both operands from shared
// memory and runs asynchronously, so the warps that issued it dequantize the next k step meanwhile.
//
// Two launches per product: the activations rounded to bf16 in L->scratch (act_bf16.cuh, as pipe),
// then the product. Block tile BM tokens x 128 weight rows, k step 64, one warpgroup (128 threads)
// per 64 tokens: BM 128 (two warpgroups) where that gives every multiprocessor a block, else 64.
// No producer/consumer split: every thread copies, dequantizes and issues (a dequantizing producer
// would have to hand over a whole bf16 tile per step anyway; here the same threads do it while
// their own wgmma runs). Shared memory, per block: a 3-stage ring of cp.async copies (the bf16
// activations straight into the wgmma A layout, the packed codes [128 rows][48-byte stride], the
// scale and bias words [row][2 halves][scale, bias] as pipe copies them) and two bf16 B tiles
// (the dequantized weights, [128 rows][64 k] in the wgmma B layout); 104 KB at BM 128 and 80 KB at
// 64, two blocks per multiprocessor (ptxas, sm_90a: 128 registers at BM 128, the cap, 150 at 64;
// 64 of them accumulators; no spills). Per k step kt:
//   wgmma.fence; 4 x wgmma m64n128k16 (A: the ring stage, this warpgroup's 64 tokens; B: tile kt % 2);
//   commit; wait for step kt+1's copies; fence.proxy.async; barrier; dequantize step kt+1 into B tile
//   (kt+1) % 2 (free: step kt-1's products ended before the previous barrier); fence.proxy.async;
//   wgmma.wait_group 0 (step kt's products done: its ring stage and B tile free); barrier; copy step
//   kt+3 into step kt's ring stage.
// so the dequantization of step kt+1 overlaps the products of step kt, and a second block per
// multiprocessor fills the barriers. Layouts (wgmma_layout.cuh: mxg_wg_offset, one definition for
// the writers and the descriptors): [rows][64] tiles of 8 x 8 core matrices of 128 contiguous bytes,
// no swizzle; each 8 threads of a warp write one core matrix (16 bytes each), so the stores and
// the cp.async copies of a quarter warp cover 32 banks once; the code words are read at a 48-byte
// row stride, so a warp's 32 loads (8 rows x 4 words) hit 32 banks.
//
// Dequantization and the order of k, as pipe: code pairs (c, c + 4) of a 32-bit word of 8 codes are
// one mask of the word shifted by 4c, OR-ed into 0x4300 (bf16 128 + code), minus 128 and times the
// scale plus the bias in two packed bf16 FMAs (each rounded once); the 16-byte row chunk of a word is
// its pairs (0,4) (1,5) (2,6) (3,7), the order in which act_bf16.cuh stores each run of 8
// activations, so A and B agree on every k slot. Precision: every weight bf16(s * q + b), every
// activation bf16(x), sums in float32: the tensor-core bound of test_gpu_ops (elem_bound).
// tests/gpu/mma_emulation/test_matmul_wgmma_emulated.cpp runs this file on the host emulation, with
// a wgmma that decodes the descriptors by the PTX ISA's rules (emu_wgmma.h).
#include "backends/gpu/dequant.cuh"
#include "backends/gpu/vendor/cuda/act_bf16.cuh"
#include "backends/gpu/vendor/cuda/cp_async.cuh"
#include "backends/gpu/vendor/cuda/wgmma.cuh"

namespace {

constexpr int BK = 64, BN = 128, kStages = 3, kCodeStride = 48, kMinScratchTokens = 64;

template <int WG>
struct WgTile {
    static constexpr int BM = 64 * WG, kThreads = 128 * WG;
    static constexpr int a_bytes = BM * BK * 2;           // bf16 A tile, wgmma layout
    static constexpr int c_bytes = BN * kCodeStride;      // codes [BN][48 bytes] (32 used)
    static constexpr int sb_bytes = BN * 2 * 2 * 4;       // words [BN][2 halves][scale, bias]
    static constexpr int stage_bytes = a_bytes + c_bytes + sb_bytes;
    static constexpr int b_bytes = BN * BK * 2;           // bf16 B tile, wgmma layout
    static constexpr int smem_bytes = kStages * stage_bytes + 2 * b_bytes;  // 106496 (WG 2), 81920 (WG 1)
    static_assert(a_bytes % 128 == 0 && stage_bytes % 128 == 0, "tiles 128-byte aligned");
};

// Writes 1 where this binary's code for the running device is sm_90a (the wgmma kernel's body).
__global__ void wgmma_probe_kernel(int *flag) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (threadIdx.x == 0) *flag = 1;
#else
    if (threadIdx.x == 0) *flag = 0;
#endif
}

// out [n, m.rows], xb [n, m.cols] (bf16, runs reordered), bias [m.rows] or NULL.
template <int WG>
__global__ void __launch_bounds__(128 * WG, 2) wgmma_kernel(float *__restrict__ out, const uint16_t *__restrict__ xb,
                                                           MatView m, const float *__restrict__ bias, int n) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using T = WgTile<WG>;
    constexpr int BM = T::BM, kThreads = T::kThreads, kWarps = kThreads / 32;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *const btile = smem_raw + kStages * T::stage_bytes;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wg = tid / 128;
    const int t0 = blockIdx.y * BM;
    const int64_t r0 = (int64_t)blockIdx.x * BN;
    const int nk = m.cols / BK;
    const bool two_groups = m.group_size == 32;  // two scale groups per k step

    // Copies of k step kt into ring stage st. Tokens past n and rows past the matrix read the last
    // one (their results are never stored). A: chunk i = p * kThreads + tid is 8 activations (16
    // bytes) of token (i % 8) + 8 (i / 64), run (i / 8) % 8; codes: chunk j of row j / 2; scale and
    // bias words: thread j < 2 BN copies row j / 2's scale (j even) or bias word(s).
    auto issue = [&](int st, int kt) {
        unsigned char *stage = smem_raw + st * T::stage_bytes;
        const int k0 = kt * BK, run = (tid / 8) % 8;
#pragma unroll
        for (int p = 0; p < BM * 8 / kThreads; p++) {
            const int r = tid % 8 + 8 * ((p * kThreads + tid) / 64);
            const int tok = t0 + r < n ? t0 + r : n - 1;
            mxg_cp_async16(stage + mxg_wg_offset(r, run * 8), xb + (int64_t)tok * m.cols + k0 + run * 8);
        }
#pragma unroll
        for (int p = 0; p < BN * 2 / kThreads; p++) {
            const int j = p * kThreads + tid, row = j / 2;
            const int64_t br = r0 + row < m.rows ? r0 + row : m.rows - 1;
            mxg_cp_async16(stage + T::a_bytes + row * kCodeStride + (j % 2) * 16, m.data + br * m.row_bytes + k0 / 2 + (j % 2) * 16);
            const void *base = j % 2 ? m.biases : m.scales;
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                if (hh == 1 && !two_groups) continue;
                const int64_t si = br * m.groups + ((k0 + 32 * hh) >> m.group_shift);
                mxg_cp_async4(stage + T::a_bytes + T::c_bytes + ((row * 2 + hh) * 2 + j % 2) * 4, sb_word<ST_BF16>(base, si));
            }
        }
    };

    // Dequantizes the codes of k step kt (ring stage st) into B tile bt: word kw (k 8 kw..8 kw+7) of
    // row 8 (warp + kWarps (p / 2)) + lane % 8, kw = lane / 8 + 4 (p % 2). Bit p / 2 of rowpar: the
    // parity of that row's first scale index (clamped as the copies are), so (that ^ group) & 1
    // picks a 2-byte scale's half of its copied word.
    int rowpar = 0;
#pragma unroll
    for (int p2 = 0; p2 < BN * 4 / kThreads; p2++) {
        const int64_t r = r0 + 8 * (warp + kWarps * p2) + lane % 8;
        rowpar |= (int)(((r < m.rows ? r : m.rows - 1) * m.groups) & 1) << p2;
    }
    auto dequant = [&](int st, int bt, int kt) {
        const unsigned char *stage = smem_raw + st * T::stage_bytes;
        unsigned char *b = btile + bt * T::b_bytes;
        const int k0 = kt * BK;
#pragma unroll
        for (int p = 0; p < BN * 8 / kThreads; p++) {
            const int row = 8 * (warp + kWarps * (p / 2)) + lane % 8, kw = lane / 8 + 4 * (p % 2);
            const uint32_t wd = *(const uint32_t *)(stage + T::a_bytes + row * kCodeStride + kw * 4);
            const int h = two_groups ? kw >> 2 : 0;
            const uint32_t *sbw = (const uint32_t *)(stage + T::a_bytes + T::c_bytes) + (row * 2 + h) * 2;
            const int sh = (((rowpar >> (p / 2)) ^ ((k0 + 32 * h) >> m.group_shift)) & 1) * 16;  // the half
            const uint32_t s = (sbw[0] >> sh) & 0xffffu, bi = (sbw[1] >> sh) & 0xffffu;
            const uint32_t s2 = s | s << 16, b2 = bi | bi << 16;
            uint32_t v[4];
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const uint32_t q = ((wd >> (4 * c)) & 0x000f000fu) | 0x43004300u;         // 128 + code
                v[c] = mxg_bf16x2_fma(s2, mxg_bf16x2_fma(q, 0x3f803f80u, 0xc300c300u), b2);  // s * code + b
            }
            *(uint4 *)(b + mxg_wg_offset(row, kw * 8)) = make_uint4(v[0], v[1], v[2], v[3]);
        }
    };

    float acc[64];
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < kStages; s++) {
        if (s < nk) issue(s, s);
        mxg_cp_async_commit();
    }
    mxg_cp_async_wait<kStages - 1>();  // step 0 landed (this thread's copies)
    mxg_fence_proxy_async();
    __syncthreads();
    dequant(0, 0, 0);
    mxg_fence_proxy_async();
    __syncthreads();

    const uint32_t a_base = mxg_smem_u32(smem_raw) + wg * 8 * MXG_WG_SBO, b_base = mxg_smem_u32(btile);
    for (int kt = 0; kt < nk; kt++) {
        const int st = kt % kStages;
        mxg_wgmma_touch(acc);
        mxg_wgmma_fence();
#pragma unroll
        for (int s = 0; s < BK / 16; s++) {
            const uint64_t da = mxg_wgmma_desc(a_base + st * T::stage_bytes + s * 2 * MXG_WG_LBO, MXG_WG_LBO, MXG_WG_SBO);
            const uint64_t db = mxg_wgmma_desc(b_base + (kt % 2) * T::b_bytes + s * 2 * MXG_WG_LBO, MXG_WG_LBO, MXG_WG_SBO);
            mxg_wgmma_m64n128k16_bf16(acc, da, db);
        }
        mxg_wgmma_commit();
        if (kt + 1 < nk) {
            mxg_cp_async_wait<kStages - 2>();  // step kt + 1 landed (this thread's copies) ...
            mxg_fence_proxy_async();
            __syncthreads();                    // ... everyone's
            dequant((kt + 1) % kStages, (kt + 1) % 2, kt + 1);
            mxg_fence_proxy_async();
        }
        mxg_wgmma_wait<0>();  // step kt's products done: its ring stage and B tile are free
        mxg_wgmma_touch(acc);
        __syncthreads();      // every warpgroup's; and B tile (kt + 1) % 2 written
        if (kt + kStages < nk) issue(st, kt + kStages);
        mxg_cp_async_commit();
    }

    // Epilogue: accumulator i is token 16 (warp % 4) + g + 8 ((i / 2) % 2) of this warpgroup's 64,
    // rows 8 (i / 4) + 2 t + (0, 1) (i even; wgmma.cuh).
    const int g = lane / 4, t = lane % 4;
    const bool pairs = (m.rows & 1) == 0;
#pragma unroll
    for (int i = 0; i < 64; i += 2) {
        const int tt = t0 + wg * 64 + (warp % 4) * 16 + g + 8 * ((i / 2) % 2);
        const int64_t rr = r0 + 8 * (i / 4) + 2 * t;
        if (tt >= n || rr >= m.rows) continue;
        float v0 = acc[i], v1 = acc[i + 1];
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
#else
    (void)out, (void)xb, (void)m, (void)bias, (void)n;
#endif
}

template <int WG>
void launch(const mxg_launch *L, float *out, const uint16_t *xb, const MatView &m, const float *bias, int n) {
    using T = WgTile<WG>;
    static bool allowed = false;  // the attribute once per instance (host code, one thread per backend)
    if (!allowed) {
        mxg_allow_smem(wgmma_kernel<WG>, T::smem_bytes);
        allowed = true;
    }
    const dim3 grid((unsigned)((m.rows + BN - 1) / BN), (unsigned)((n + T::BM - 1) / T::BM));
    wgmma_kernel<WG><<<grid, T::kThreads, T::smem_bytes, (cudaStream_t)L->stream>>>(out, xb, m, bias, n);
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
    if (w->q.mode != MX_QUANT_AFFINE || w->q.bits != 4 || w->n_experts != 1 || w->scale_dtype != MX_DTYPE_BF16) return -1;
    if (w->q.group_size != 32 && w->q.group_size != 64 && w->q.group_size != 128) return -1;
    if (w->cols % BK != 0 || w->cols > (1 << 30) || w->rows > (1 << 30)) return -1;
    if (((uintptr_t)w->data & 15) || ((uintptr_t)w->scales & 3) || ((uintptr_t)w->biases & 3) ||
        ((uintptr_t)x & 15) || ((uintptr_t)L->scratch & 15) || ((uintptr_t)out & 7))
        return -1;
    int64_t run_tokens = (int64_t)(L->scratch_bytes / ((size_t)w->cols * 2)) / 64 * 64;  // per launch pair
    if (run_tokens < kMinScratchTokens) return -1;
    if (run_tokens > 65535 * 64) run_tokens = 65535 * 64;  // grid y
    const MatView m = mat_view(w);
    uint16_t *xb = (uint16_t *)L->scratch;
    const int64_t fill = L->sm_count > 0 ? L->sm_count : 1;
    for (int t0 = 0; t0 < n; t0 += (int)run_tokens) {
        const int nt = n - t0 < run_tokens ? n - t0 : (int)run_tokens;
        const int64_t runs = (int64_t)nt * m.cols / 8;
        act_bf16_kernel<<<(unsigned)((runs + 255) / 256), 256, 0, (cudaStream_t)L->stream>>>(
            (uint4 *)xb, (const float4 *)(x + (int64_t)t0 * m.cols), runs);
        float *o = out + (int64_t)t0 * m.rows;
        const int64_t tiles128 = ((m.rows + BN - 1) / BN) * (((int64_t)nt + 127) / 128);
        if (tiles128 >= fill)
            launch<2>(L, o, xb, m, bias, nt);
        else
            launch<1>(L, o, xb, m, bias, nt);
    }
    return 0;
}
