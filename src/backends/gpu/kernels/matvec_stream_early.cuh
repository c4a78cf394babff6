// SPDX-License-Identifier: MIT
// The early form of the streaming kernel's one-token products over affine 4/8-bit weights
// (MLXCEL_GPU_STREAM_EARLY=1, L->stream_early; off by default): where every warp of the launch has
// at most one task (the 8B's q/k/v and o products: 1,536 and 1,024 four-row tasks for 2,112 resident
// warps on an H100) and rows of at most 4096 columns, each warp copies its WHOLE task's codes into
// shared memory (mxg_copy16_async: cp.async on sm_80+, no registers held) and loads its scales and
// biases before the grid wait; after the wait only the activation row's staging, the products from
// shared memory and the epilogue remain. Its outputs are bit for bit the lean form's
// (kernels/matvec_stream_lean.cuh, which it replaces where it fits): the same tasks, the same chunks
// in the same order per lane (c = lane, lane + W, ... in both), the same dot (stream_dot: the chunk's
// scaled_sum then scaled_dot per row, as stream_lean_dot with its staged sums), the same staging
// arithmetic and the same epilogue.
//
// Why (bench/RESULTS.md, runs 35, 38-40, 43): at grid 128-192 the lean form runs one task per warp in
// two steps; only the first step's codes (half of them) are in registers before the grid wait, so
// after the wait the chain is: the staging (with the RMSNorm: one pass over x for the sum of squares,
// a block sum, a second pass over x and the norm's weights), a barrier, the chunk sums, a barrier,
// the first step's products, THEN the second step's loads (from L2 where MLXCEL_GPU_PDL=2's prefetch
// got there first, else from DRAM) and products, the warp sums, the writes. Splitting the columns
// over more warps (run 39) doubled the occupancy and changed nothing: the time is that chain. Here:
// - the whole task is in flight before the wait (8 KB of codes per warp at four 4-bit rows of 4096:
//   64 KB per block, in shared memory since 16 four-row chunks would take 112 registers a lane);
// - the RMSNorm's weights are loaded before the wait and x once after it (kept in registers from
//   the sum of squares to the normalized store: one round trip instead of two);
// - no chunk-sum pass and its barrier: each lane sums its own chunks (stream_dot), which is the
//   same float as the lean form's staged sum, at four chunks a lane.
// Costs: 64 KB more shared memory per block (80.5 KB at 4096 columns, 4-bit: two blocks still fit
// a multiprocessor of an H100 or A100, L->stream_early is half the opt-in); no L2 prefetch
// (MLXCEL_GPU_PDL=2's; nothing is left to prefetch).
// Requirements (stream_early_fits): what the lean form asks (StreamLean, stream_lean_fits), rows of
// at most kEarlyMaxCols columns (the staging in one pass: four float4 per thread), at most one task
// per warp (the launch's tasks within its blocks' warps), the block's shared memory within
// L->stream_early (two blocks per multiprocessor; 0 on ROCm and before sm_80: the form is off there).
#ifndef MXG_MATVEC_STREAM_EARLY_CUH
#define MXG_MATVEC_STREAM_EARLY_CUH

namespace mxg {

constexpr int kEarlyMaxCols = 4096;
constexpr int kEarlyChunks = kEarlyMaxCols / 32;  // chunk slots per row of a warp's shared memory

// The formats, token counts and rows per task of the early form: the lean form's.
template <class F, int NT, int RR>
struct StreamEarly {
    static constexpr bool on = StreamLean<F, NT, RR>::on;
};

// Dynamic shared memory of the early form: the staged row, then each warp's slots, RR rows x
// kEarlyChunks chunks of raw_words words.
template <int W, class F, int RR>
static inline size_t stream_early_smem(int64_t cols) {
    return (size_t)cols * sizeof(float) + (size_t)(kStreamThreads / W) * RR * kEarlyChunks * F::raw_words * 4;
}

// Whether the early form takes the launch: `tasks` over `warps` warps, `smem` bytes a block.
static inline bool stream_early_fits(const mxg_launch *L, const StreamArgs &a, int count, int64_t tasks, int64_t warps,
                                     size_t smem) {
    return L->stream_early != 0 && smem <= L->stream_early && a.m[0].cols <= kEarlyMaxCols && tasks <= warps &&
           stream_lean_fits(L, a, count);
}

// The RMSNorm staging of stream_stage (one token, NORM) with the norm's weights already loaded
// (nw, before the grid wait) and x loaded once: the same values, the same float operations in the
// same order (stream_norm_scale's sum of squares, block_sum, the scale; stream_stage's products and
// swizzled store), so the same staged row. n4 <= kLoads x kStreamThreads (kEarlyMaxCols).
template <int W, class F>
__device__ __forceinline__ void stream_early_norm_stage(const StreamArgs &a, float4 *xs4, int n4, int block,
                                                        const float4 (&nw)[kStreamStageLoads / 2]) {
    constexpr int kLoads = kStreamStageLoads / 2;
    const float4 *x4 = (const float4 *)a.x;
    float4 v[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; k++) {
        const int i = k * kStreamThreads + (int)threadIdx.x;
        v[k] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kLoads; k++) {
        ss = fmaf(v[k].x, v[k].x, ss);
        ss = fmaf(v[k].y, v[k].y, ss);
        ss = fmaf(v[k].z, v[k].z, ss);
        ss = fmaf(v[k].w, v[k].w, ss);
    }
    ss = block_sum<W>(ss, (float *)xs4);  // ends with a barrier: the staging may overwrite it
    const float scale = 1.0f / sqrtf(ss / (float)(n4 * 4) + a.norm_eps);
#pragma unroll
    for (int k = 0; k < kLoads; k++) {
        const int i = k * kStreamThreads + (int)threadIdx.x;
        if (i >= n4) continue;
        const float4 w = nw[k];
        float4 u = make_float4(v[k].x * scale * w.x, v[k].y * scale * w.y, v[k].z * scale * w.z, v[k].w * scale * w.w);
        if (block == 0) ((float4 *)a.norm_out)[i] = u;
        const int c = i >> 3, q = i & 7;
        u = scaled_slot<F::bits>(u, q);
        xs4[c * 8 + (q ^ (c & 7))] = u;
    }
}

// The body: the warp's one task (if any) copied and its scales and biases loaded, then the grid
// wait, the staging, one barrier (which also publishes nothing of the copies: each lane reads only
// the slots it copied, after its own wait), the products and the epilogue.
template <int W, class F, int NM, int R, int EPI, bool NORM>
__device__ __forceinline__ void stream_body_early(const StreamArgs &a, float4 *xs4, int block) {
    constexpr int RR = NM * R, warps = kStreamThreads / W, UA = kEarlyChunks / W, P = F::raw_words / 4;
    constexpr int kLoads = kStreamStageLoads / 2;
    const int lane = (int)threadIdx.x % W, warp = (int)threadIdx.x / W;
    const int nchunks = a.m[0].cols >> 5, n4 = nchunks * 8;
    const uint32_t row_bytes = (uint32_t)a.m[0].row_bytes;
    const int groups = a.m[0].groups, group_shift = a.m[0].group_shift;
    // Slot (j, u, p) of this lane: row j's chunk u * W + lane, 16-byte piece p.
    uint4 *slots = (uint4 *)(xs4 + n4) + (size_t)warp * RR * kEarlyChunks * P;
    const int task = block * warps + warp;  // the warp's only task (stream_early_fits)
    const bool active = task < a.task_end[2];
    int mi = 0;
    int64_t r0 = 0;
    float sc[UA][RR] = {}, bi[UA][RR] = {};
    if (active) {
        stream_task<R>(a, task, mi, r0);
        LeanRows<NM, R> rows;
        stream_lean_rows<NM, R>(a, mi, r0, rows);
#pragma unroll
        for (int u = 0; u < UA; u++) {
            const int c = u * W + lane;
            if (c >= nchunks) continue;
#pragma unroll
            for (int j = 0; j < RR; j++) {
                const uint8_t *src = rows.data[j / R] + (uint64_t)(uint32_t)rows.row[j % R] * row_bytes +
                                     (size_t)c * F::raw_words * 4;
#pragma unroll
                for (int p = 0; p < P; p++) mxg_copy16_async(&slots[((j * UA + u) * P + p) * W + lane], src + 16 * p);
            }
        }
        // The scales and biases: stream_lean_load's values.
#pragma unroll
        for (int u = 0; u < UA; u++) {
            const int c = u * W + lane, g = (c * 32) >> group_shift;
#pragma unroll
            for (int j = 0; j < RR; j++) {
                if (c >= nchunks) continue;
                const int64_t si = (uint32_t)(rows.row[j % R] * groups + g);
                sc[u][j] = load_st<F::st>(rows.scales[j / R], si);
                bi[u][j] = load_st<F::st>(rows.biases[j / R], si);
            }
        }
    }
    float4 nw[kLoads];  // NORM: the RMSNorm's weights (not written by any kernel)
#pragma unroll
    for (int k = 0; k < kLoads; k++) {
        const int i = k * kStreamThreads + (int)threadIdx.x;
        nw[k] = NORM && i < n4 ? ((const float4 *)a.norm_w)[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    mxg_grid_wait_release(a.early);
    if constexpr (NORM)
        stream_early_norm_stage<W, F>(a, xs4, n4, block, nw);
    else
        stream_stage<W, F, 1, false>(a, xs4, n4, block);
    mxg_copy_async_wait_all();
    __syncthreads();  // the staged row; from here on the warps run independently
    if (!active) return;
    float acc[RR][1];
#pragma unroll
    for (int j = 0; j < RR; j++) acc[j][0] = 0.0f;
#pragma unroll
    for (int u = 0; u < UA; u++) {
        const int c = u * W + lane;
        if (c >= nchunks) continue;
        typename F::Raw b[RR];
#pragma unroll
        for (int j = 0; j < RR; j++) {
#pragma unroll
            for (int p = 0; p < P; p++) {
                const uint4 v = slots[((j * UA + u) * P + p) * W + lane];
                b[j].q[4 * p] = v.x, b[j].q[4 * p + 1] = v.y, b[j].q[4 * p + 2] = v.z, b[j].q[4 * p + 3] = v.w;
            }
            b[j].s0 = b[j].s1 = sc[u][j];
            b[j].b = bi[u][j];
        }
        stream_dot<F, 1, RR>(xs4, n4, c, b, acc);
    }
    stream_epilogue<W, 1, NM, R, EPI>(a, mi, r0, acc);
}

template <int W, class F, int NM, int R, int EPI, bool NORM>
__global__ void __launch_bounds__(kStreamThreads, kStreamBlocksPerSm) matvec_stream_early_kernel(StreamArgs a) {
    MXG_WARP_ONLY(W) {
    extern __shared__ float4 xs4[];  // [nchunks * 8], then each warp's slots
    stream_body_early<W, F, NM, R, EPI, NORM>(a, xs4, (int)blockIdx.x);
    mxg_grid_release();  // the next dependent kernel may start loading its weights
    }
}

// stream_launch_shape's hook: launches the early form on `blocks` blocks and returns true where it
// fits (`tasks`: the launch's, from stream_tasks); false leaves the launch to the other forms.
template <int W, class F, int NT, int NM, int R, int EPI, bool NORM>
bool stream_early_launch(const mxg_launch *L, const StreamArgs &a, int count, int tasks, unsigned blocks) {
    if constexpr (!StreamEarly<F, NT, NM * R>::on) {
        (void)L, (void)a, (void)count, (void)tasks, (void)blocks;
        return false;
    } else {
        const size_t smem = stream_early_smem<W, F, NM * R>(a.m[0].cols);
        if (!stream_early_fits(L, a, count, tasks, (int64_t)blocks * (kStreamThreads / W), smem)) return false;
        auto kernel = matvec_stream_early_kernel<W, F, NM, R, EPI, NORM>;
        static bool raised = false;  // stream_allow_smem: the instance's limit raised to the cap once
        stream_allow_smem((const void *)kernel, smem, L->stream_early, raised);
        mxg_launch_dep(kernel, dim3(blocks), dim3(kStreamThreads), smem, (gpuStream_t)L->stream, L->dependent_launch, a);
        return true;
    }
}

}  // namespace mxg

#endif
