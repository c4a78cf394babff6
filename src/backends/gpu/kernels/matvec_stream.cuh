// SPDX-License-Identifier: MIT
// The streaming matrix-vector kernel of decode: the default for affine 4/8-bit and mxfp4 weights
// and, for one token, dense bf16/f16 (one-record products of 1-8 tokens in
// kernels/matvec_stream.cu, the fused one-token patterns in
// kernels/matvec_fused.cu); MLXCEL_GPU_NO_STREAM_MATVEC=1 gives the previous kernels
// (kernels/matvec.cuh), which also take every product this one declines.
//
// Why: a one-token product is a stream of weights, so its speed is the bytes in flight. At the
// H200's ~4.3 TB/s and ~0.7-1 us of loaded DRAM latency, Little's law asks for ~3-4 MB in flight
// over the chip, 25-35 KB per multiprocessor. The previous kernel had 64 bytes per lane in flight
// (one chunk ahead on four rows), lived for only four chunks per lane on 4096-wide rows, and every
// block of four warps first staged the whole activation row (16 KB: eight loads per thread and a
// barrier) before its first product: a block's life was a handful of serial round trips.
//
// How:
// - Persistent warps: at most kStreamBlocksPerSm blocks of kStreamThreads per multiprocessor; each
//   block stages the activation rows once (swizzled in shared memory as in matvec.cuh, every
//   thread's staging loads issued before its stores), then each warp walks tasks (R output rows, or
//   R gate rows and the same R up rows) task, task + all warps, ...
// - Deep weight prefetch: a task is read in steps of U chunks per lane (U * 16 bytes per row; U = 4
//   for 4-bit, 2 for 8-bit: 64 bytes), all in registers (buf[U][rows]); each slot is reloaded with
//   the next step's chunk, or with the next task's first step, right after its product, so a lane
//   keeps ~U x rows x 16 bytes in flight at all times (128 bytes with two rows: 64 KB per
//   multiprocessor at 16 warps), across task boundaries, and the first task's loads are issued
//   before the staging. Registers: <= 128 per thread (launch bounds), i.e. 16 warps resident.
// - Two rows per task (R = 2; R = 1 for gate/up, two matrices): each chunk's activations are read
//   from shared memory once for both rows (128 bytes per 32 bytes of weights; one row would make
//   shared memory, not DRAM, the limit at 16.5 bytes per clock per multiprocessor). One token over
//   rows shorter than a step (1024-2560 wide) takes one chunk per lane per step and U x R rows per
//   task (stream_launch): the same registers and bytes in flight. Several tokens: one row per task.
//   Over long rows one token takes R rows and U chunks per step where those tasks fit one wave of
//   the grid's warps, else 2 x R rows and U / 2 chunks per step (stream_four_rows;
//   MLXCEL_GPU_STREAM_ROWS=2 or 4 forces one shape).
// - The dot products are those of the other kernels (kernels/matvec_scaled.cuh for affine 4/8-bit,
//   Fmt::dot_raw for mxfp4 and dense bf16/f16), so the results differ from theirs only in float32
//   summation order.
// - MLXCEL_GPU_STREAM_LEAN=1 (L->stream_lean): the one-token affine 4/8-bit products of up to four
//   rows per task run stream_body_lean (kernels/matvec_stream_lean.cuh, included below the pieces it
//   shares): bit for bit the same outputs, each chunk's sum of x once per block and the rows'
//   addresses once per task instead of in the step loop.
// - L->stream_res_early (on unless MLXCEL_GPU_STREAM_RES_EARLY=0): the residual products (o,
//   down) end in EPI_RESIDUAL_EARLY (kernels/matvec_res_early.cuh): each task's residual and bias
//   rows read into its lanes right after the grid wait or a task ahead, not after the warp sums; the
//   same outputs bit for bit.
// Requirements (stream_fits): rows of at least L->stream_min_cols weights (4096 by default: slower
// than kernels/matvec.cuh on the 0.6B's shorter rows, as measured), or for one token shorter rows in
// a launch of at least L->stream_min_rows rows over its matrices (4096 by default: on an H100 the
// 0.6B's norm + q/k/v, norm + gate/up and lm_head are faster here, its 1,024-row o and down and its
// lone 2,048-3,072-row products slower: few tasks for the grid; run 49), cols a multiple of 32 with aligned rows (matvec_fast), the token rows
// within the 48 KB of default shared memory, at least one chunk per lane. Lanes past the row's last
// chunk in a partial step skip their slot; rows past the matrix load a clamped row and are not
// written.
#ifndef MXG_MATVEC_STREAM_CUH
#define MXG_MATVEC_STREAM_CUH

#include "backends/gpu/kernels/matvec.cuh"
#include "backends/gpu/kernels/matvec_res_early.cuh"

namespace mxg {

constexpr int kStreamThreads = 256;
constexpr int kStreamBlocksPerSm = 2;
constexpr int kStreamStageLoads = 8;  // staging loads in flight per thread (half with a norm: x and its weights)

// Epilogues (kernels_fused.h): out = dot + bias; also res += out; gate/up with act = silu(g) * u;
// EPI_RESIDUAL's values with the residual and bias read ahead (kernels/matvec_res_early.cuh; one
// token; the default, MLXCEL_GPU_STREAM_RES_EARLY=0 turns it off).
enum { EPI_PLAIN, EPI_RESIDUAL, EPI_SWIGLU, EPI_RESIDUAL_EARLY };

// Formats the streaming kernel reads (mxfp4 up to 4 tokens: its generic dot spills at 8; dense
// bf16/f16 for one token: a chunk is 64 bytes), and chunks per lane per step: 64 bytes of a row (2
// or 1 rows per task); from 4 tokens on (mxfp4: from 2), half that, so the NT rows of activations
// and the codes fit the 128 registers without spills (ptxas -v).
template <class F, int NT>
struct Streamed {
    static constexpr bool dense = F::kind == KIND_DENSE && F::st != ST_F32 && NT == 1;
    static constexpr bool on = Scaled<F>::on || (F::kind == KIND_MXFP4 && NT <= 4) || dense;
    static constexpr int U0 = F::kind == KIND_DENSE ? 1 : F::bits == 8 ? 2 : 4;
    static constexpr int U = NT == 1 || (NT == 2 && Scaled<F>::on) ? U0 : U0 / 2;
};

// Up to three matrices with the same columns, their tasks numbered one after the other (q, k, v),
// or (NM = 2) gate and up computed together, task_end counting gate's tasks only.
struct StreamArgs {
    MatView m[3];
    float *out[3];
    const float *bias[3];
    int task_end[3];       // cumulative tasks (row groups of R rows) at the end of each matrix (set at launch)
    const float *x;        // [n, cols]
    int n;                 // token rows (1..NT); rows past n repeat the last one and are not written
    const float *norm_w;   // NORM: RMSNorm weight [cols]; block 0 writes the normalized row
    float norm_eps;
    float *norm_out;
    float *res;            // EPI_RESIDUAL
    float *act;            // EPI_SWIGLU
    unsigned prefetch;     // MLXCEL_GPU_PDL=2: L2 prefetch budget of each warp's first task (set at launch; 0: none)
    bool early;            // MLXCEL_GPU_PDL=2: release the next dependent kernel right after the grid wait
};

template <int R>
__device__ __forceinline__ void stream_task(const StreamArgs &a, int task, int &mi, int64_t &r0) {
    mi = task >= a.task_end[0] ? (task >= a.task_end[1] ? 2 : 1) : 0;
    const int t0 = mi == 0 ? 0 : mi == 1 ? a.task_end[0] : a.task_end[1];
    r0 = (int64_t)(task - t0) * R;
}

// The packed words (and scales) of chunk c of every weight row of a task: rows r0.. of matrix mi,
// or (NM = 2) rows r0.. of gate then of up. Rows past the matrix read its last row.
template <class F, int NM, int R>
__device__ __forceinline__ void stream_load_slot(const StreamArgs &a, int mi, int64_t r0, int c,
                                                 typename F::Raw (&b)[NM * R]) {
#pragma unroll
    for (int j = 0; j < NM * R; j++) {
        const MatView &m = NM == 2 ? (j < R ? a.m[0] : a.m[1]) : mi == 0 ? a.m[0] : mi == 1 ? a.m[1] : a.m[2];
        const int64_t row = min(r0 + (NM == 2 ? j % R : j), m.rows - 1);
        F::load_raw(m, row, c, b[j]);
    }
}

// MLXCEL_GPU_PDL=2: a task's weight rows into L2 before the grid wait (kernels/matvec.cuh,
// prefetch_rows), a.prefetch bytes at most, half each to gate and up (NM = 2).
template <class F, int NM, int R>
__device__ __forceinline__ void stream_prefetch(const StreamArgs &a, int mi, int64_t r0) {
    if constexpr (NM == 2) {
        unsigned g = prefetch_share(a.prefetch, NM), u = g;
        prefetch_rows<F>(a.m[0], r0, R, g);
        prefetch_rows<F>(a.m[1], r0, R, u);
    } else {
        unsigned budget = a.prefetch;
        prefetch_rows<F>(mi == 0 ? a.m[0] : mi == 1 ? a.m[1] : a.m[2], r0, R, budget);
    }
}

// acc[j][t] += dot(row j's chunk c, token t's chunk c) for every row of the task.
template <class F, int NT, int RR>
__device__ __forceinline__ void stream_dot(const float4 *xs4, int n4, int c, const typename F::Raw (&b)[RR],
                                           float (&acc)[RR][NT]) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float xv[32];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 v = xs4[t * n4 + c * 8 + (i ^ (c & 7))];
            xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
        }
        if constexpr (Scaled<F>::on) {
            const float xs = scaled_sum<F::bits>(xv);
#pragma unroll
            for (int j = 0; j < RR; j++) acc[j][t] += scaled_dot<F>(b[j], xv, xs);
        } else {  // mxfp4 and dense: no bias term, so no sum of x
#pragma unroll
            for (int j = 0; j < RR; j++) acc[j][t] += F::dot_raw(b[j], xv, 0.0f);
        }
    }
}

// Copies the NT token rows into shared memory (swizzled; pre-scaled for the scaled dot), with
// kStreamStageLoads loads per thread issued before their stores. NORM (one token): the row is
// RMS-normalized on the way and block 0 (`block`: the caller's block number) writes the normalized
// row to norm_out.
// NORM: the RMSNorm's 1 / rms of the one token row (xs4: the block's reduction scratch); else 1.
template <int W, bool NORM>
__device__ __forceinline__ float stream_norm_scale(const StreamArgs &a, float4 *xs4, int n4) {
    constexpr int kLoads = kStreamStageLoads / 2, step = kLoads * kStreamThreads;
    const int cols = n4 * 4;
    float scale = 1.0f;
    if (NORM) {
        const float4 *x4 = (const float4 *)a.x;
        float ss = 0.0f;
        for (int i0 = 0; i0 < n4; i0 += step) {
            float4 v[kLoads];
#pragma unroll
            for (int k = 0; k < kLoads; k++) {
                const int i = i0 + k * kStreamThreads + (int)threadIdx.x;
                v[k] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int k = 0; k < kLoads; k++) {
                ss = fmaf(v[k].x, v[k].x, ss);
                ss = fmaf(v[k].y, v[k].y, ss);
                ss = fmaf(v[k].z, v[k].z, ss);
                ss = fmaf(v[k].w, v[k].w, ss);
            }
        }
        ss = block_sum<W>(ss, (float *)xs4);  // ends with a barrier: the staging may overwrite it
        scale = 1.0f / sqrtf(ss / (float)cols + a.norm_eps);
    }
    return scale;
}

template <int W, class F, int NT, bool NORM>
__device__ __forceinline__ void stream_stage(const StreamArgs &a, float4 *xs4, int n4, int block) {
    constexpr int kLoads = NORM ? kStreamStageLoads / 2 : kStreamStageLoads, step = kLoads * kStreamThreads;
    const int cols = n4 * 4;
    const float scale = stream_norm_scale<W, NORM>(a, xs4, n4);
#pragma unroll 1
    for (int t = 0; t < NT; t++) {
        const float4 *src = (const float4 *)(a.x + (int64_t)min(t, a.n - 1) * cols);
        for (int i0 = 0; i0 < n4; i0 += step) {
            float4 v[kLoads], w[kLoads];
#pragma unroll
            for (int k = 0; k < kLoads; k++) {
                const int i = i0 + k * kStreamThreads + (int)threadIdx.x;
                if (i < n4) {
                    v[k] = src[i];
                    if (NORM) w[k] = ((const float4 *)a.norm_w)[i];
                }
            }
#pragma unroll
            for (int k = 0; k < kLoads; k++) {
                const int i = i0 + k * kStreamThreads + (int)threadIdx.x;
                if (i >= n4) continue;
                float4 u = v[k];
                if (NORM) {
                    u = make_float4(u.x * scale * w[k].x, u.y * scale * w[k].y, u.z * scale * w[k].z,
                                    u.w * scale * w[k].w);
                    if (block == 0) ((float4 *)a.norm_out)[i] = u;
                }
                const int c = i >> 3, q = i & 7;
                if constexpr (Scaled<F>::on) u = scaled_slot<F::bits>(u, q);
                xs4[t * n4 + c * 8 + (q ^ (c & 7))] = u;
            }
        }
    }
}

// Writes a task's outputs from its finished sums (one lane; rows past the matrix are not written).
template <int NT, int NM, int R, int EPI>
__device__ __forceinline__ void stream_write(const StreamArgs &a, int mi, int64_t r0, const float (&acc)[NM * R][NT]) {
    if constexpr (EPI == EPI_SWIGLU) {
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int64_t r = r0 + j;
            if (r >= a.m[0].rows) continue;
            const float g = acc[j][0] + (a.bias[0] ? a.bias[0][r] : 0.0f);
            const float u = acc[R + j][0] + (a.bias[1] ? a.bias[1][r] : 0.0f);
            a.out[0][r] = g;
            a.out[1][r] = u;
            a.act[r] = silu_mul(g, u);
        }
    } else {
        const int64_t rows = mi == 0 ? a.m[0].rows : mi == 1 ? a.m[1].rows : a.m[2].rows;
        float *out = mi == 0 ? a.out[0] : mi == 1 ? a.out[1] : a.out[2];
        const float *bias = mi == 0 ? a.bias[0] : mi == 1 ? a.bias[1] : a.bias[2];
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int64_t r = r0 + j;
            if (r >= rows) continue;
            const float b = bias ? bias[r] : 0.0f;
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= a.n) continue;
                const float v = acc[j][t] + b;
                out[(int64_t)t * rows + r] = v;
                if (EPI == EPI_RESIDUAL) a.res[r] += v;
            }
        }
    }
}

// Sums a task's lane partials and writes its outputs (lane 0).
template <int W, int NT, int NM, int R, int EPI>
__device__ __forceinline__ void stream_epilogue(const StreamArgs &a, int mi, int64_t r0, float (&acc)[NM * R][NT]) {
#pragma unroll
    for (int j = 0; j < NM * R; j++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[j][t] = warp_sum<W>(acc[j][t]);
    if (threadIdx.x % W != 0) return;
    stream_write<NT, NM, R, EPI>(a, mi, r0, acc);
}

// EPI_RESIDUAL_EARLY: lane `lane`'s held residual and bias of task (mi, r0) (res_early_load; only
// after the grid wait).
template <int R>
__device__ __forceinline__ ResHeld stream_res_load(const StreamArgs &a, int mi, int64_t r0, int lane) {
    const MatView &m = mi == 0 ? a.m[0] : mi == 1 ? a.m[1] : a.m[2];
    const float *bias = mi == 0 ? a.bias[0] : mi == 1 ? a.bias[1] : a.bias[2];
    return res_early_load<R>(a.res, bias, m.rows, r0, lane);
}

// A task's end in either body: EPI_RESIDUAL_EARLY's warp sums and lane-per-row writes from `held`
// (the task's held values), or stream_epilogue (`held` unused).
template <int W, int NT, int NM, int R, int EPI>
__device__ __forceinline__ void stream_finish(const StreamArgs &a, int mi, int64_t r0, float (&acc)[NM * R][NT],
                                              const ResHeld &held) {
    if constexpr (EPI == EPI_RESIDUAL_EARLY) {
        static_assert(NT == 1 && NM == 1, "the residual epilogue is one token, one matrix");
#pragma unroll
        for (int j = 0; j < R; j++) acc[j][0] = warp_sum<W>(acc[j][0]);
        float *out = mi == 0 ? a.out[0] : mi == 1 ? a.out[1] : a.out[2];
        const int64_t rows = mi == 0 ? a.m[0].rows : mi == 1 ? a.m[1].rows : a.m[2].rows;
        res_early_store<R>(out, a.res, rows, r0, (int)threadIdx.x % W, held, [&](int j) { return acc[j][0]; });
    } else {
        (void)held;
        stream_epilogue<W, NT, NM, R, EPI>(a, mi, r0, acc);
    }
}

// The kernel's body as `nblocks` blocks of which the caller is block `block`: the first task's first
// weights are loaded, then it waits for the previous kernel (mxg_grid_wait: the weights do not
// depend on it, the activations do), then the activations are staged and the warps walk their
// tasks; the only block barrier is the one after the staging.
template <int W, class F, int NT, int NM, int R, int U, int EPI, bool NORM>
__device__ __forceinline__ void stream_body(const StreamArgs &a, float4 *xs4, int block, int nblocks) {
    constexpr int RR = NM * R, warps = kStreamThreads / W, span = W * U;
    const int lane = (int)threadIdx.x % W;
    const int nchunks = a.m[0].cols >> 5, n4 = nchunks * 8, steps = (nchunks + span - 1) / span;
    const int ntasks = a.task_end[2], stride = nblocks * warps;
    int task = block * warps + (int)threadIdx.x / W;
    int mi = 0;
    int64_t r0 = 0;
    typename F::Raw buf[U][RR];
    // The first task's first step: its weights do not depend on the previous kernel.
    if (task < ntasks) {
        stream_task<R>(a, task, mi, r0);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (u * W + lane < nchunks) stream_load_slot<F, NM, R>(a, mi, r0, u * W + lane, buf[u]);
        if (a.prefetch && lane == 0) stream_prefetch<F, NM, R>(a, mi, r0);
    }
    mxg_grid_wait_release(a.early);
    // EPI_RESIDUAL_EARLY: the first task's residual and bias, after the wait (res is the previous kernel's).
    ResHeld held = {}, nheld = {};
    if (EPI == EPI_RESIDUAL_EARLY && task < ntasks) held = stream_res_load<R>(a, mi, r0, lane);
    stream_stage<W, F, NT, NORM>(a, xs4, n4, block);
    __syncthreads();  // the only barrier: from here on the warps run independently
    for (; task < ntasks; task += stride) {
        const int ntask = task + stride;
        int nmi = 0;
        int64_t nr0 = 0;
        if (ntask < ntasks) {
            stream_task<R>(a, ntask, nmi, nr0);
            if (EPI == EPI_RESIDUAL_EARLY) nheld = stream_res_load<R>(a, nmi, nr0, lane);
        }
        float acc[RR][NT];
#pragma unroll
        for (int j = 0; j < RR; j++)
#pragma unroll
            for (int t = 0; t < NT; t++) acc[j][t] = 0.0f;
        for (int s = 0; s < steps; s++) {
            // What each slot loads once its product is done: the next step, or the next task's first.
            const bool last = s + 1 == steps, more = !last || ntask < ntasks;
            const int lmi = last ? nmi : mi;
            const int64_t lr0 = last ? nr0 : r0;
            const int c0 = s * span, lc0 = last ? 0 : c0 + span;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * W + lane, lc = lc0 + u * W + lane;
                if (c < nchunks) stream_dot<F, NT, RR>(xs4, n4, c, buf[u], acc);
                if (more && lc < nchunks) stream_load_slot<F, NM, R>(a, lmi, lr0, lc, buf[u]);
            }
        }
        stream_finish<W, NT, NM, R, EPI>(a, mi, r0, acc, held);
        mi = nmi, r0 = nr0, held = nheld;
    }
}

}  // namespace mxg

#include "backends/gpu/kernels/matvec_stream_lean.cuh"

namespace mxg {

// LEAN: the lean one-token form (kernels/matvec_stream_lean.cuh; only where StreamLean<F, NT, NM * R>::on).
template <int W, class F, int NT, int NM, int R, int U, int EPI, bool NORM, bool LEAN>
__global__ void __launch_bounds__(kStreamThreads, kStreamBlocksPerSm) matvec_stream_kernel(StreamArgs a) {
    MXG_WARP_ONLY(W) {
    extern __shared__ float4 xs4[];  // [NT][nchunks * 8]; LEAN: then [nchunks] sums
    if constexpr (LEAN)
        stream_body_lean<W, F, NM, R, U, EPI, NORM>(a, xs4, (int)blockIdx.x, (int)gridDim.x);
    else
        stream_body<W, F, NT, NM, R, U, EPI, NORM>(a, xs4, (int)blockIdx.x, (int)gridDim.x);
    mxg_grid_release();  // the next dependent kernel may start loading its weights
    }
}

// Whether the streaming kernel takes NT token rows over w's columns (format checked by the caller),
// `rows` the launch's rows over all its matrices: rows of at least L->stream_min_cols weights, or
// (one token) shorter rows in a launch of at least L->stream_min_rows rows.
static inline bool stream_fits(const mxg_launch *L, const mx_matrix *w, const float *x, int nt, int64_t rows) {
    const bool wide = w->cols >= L->stream_min_cols, many = nt == 1 && rows >= L->stream_min_rows;
    return L->matvec_stream && !L->matvec_old && (wide || many) && matvec_fast(w, x) &&
           (size_t)nt * w->cols * 4 <= kMatvecStageBytes && w->cols / 32 >= L->warp;
}

// Numbers the tasks of `count` matrices at R rows per task (NM = 2: gate's rows only) into
// a.task_end; returns their count.
template <int NM, int R>
int stream_tasks(StreamArgs &a, int count) {
    int tasks = 0;
    for (int k = 0; k < 3; k++) {
        if (k < count && (NM == 1 || k == 0)) tasks += (int)((a.m[k].rows + R - 1) / R);
        a.task_end[k] = tasks;
    }
    return tasks;
}

// Where a launch needs more than the default 48 KB of dynamic shared memory (the lean form's chunk
// sums after a 12288-wide row), the kernel instance's limit is raised to `most`, what the widest row
// it takes needs, once per instance (`raised`: the caller's static flag; host code, one thread per
// backend).
static inline void stream_allow_smem(const void *kernel, size_t smem, size_t most, bool &raised) {
    if (smem <= kMatvecStageBytes || raised) return;
    (void)gpuFuncSetAttribute(kernel, gpuFuncAttributeMaxDynamicSharedMemorySize, (int)most);
    raised = true;
}

// One launch of R rows per task (per matrix: NM = 2 counts gate's rows only) and U chunks per lane
// per step: as many blocks as the tasks need, at most kStreamBlocksPerSm per multiprocessor.
template <int W, class F, int NT, int NM, int R, int U, int EPI, bool NORM>
void stream_launch_shape(const mxg_launch *L, StreamArgs a, int count) {
    constexpr int warps = kStreamThreads / W;
    const int tasks = stream_tasks<NM, R>(a, count);
    const int64_t want = (tasks + warps - 1) / warps, cap = (int64_t)L->sm_count * kStreamBlocksPerSm;
    const unsigned blocks = (unsigned)(want < cap ? want : cap);
    a.early = L->pdl_early;
    a.prefetch = pdl_warp_budget(L, (int64_t)blocks * warps);
    if constexpr (StreamLean<F, NT, NM * R>::on) {
        if (stream_lean_fits(L, a, count)) {
            const size_t smem = stream_lean_smem(a.m[0].cols);
            auto kernel = matvec_stream_kernel<W, F, NT, NM, R, U, EPI, NORM, true>;
            // Over 48 KB (the sums after a 12288-wide row): stream_allow_smem.
            static bool raised = false;
            stream_allow_smem((const void *)kernel, smem, stream_lean_smem(kMatvecStageBytes / sizeof(float)), raised);
            mxg_launch_dep(kernel, dim3(blocks), dim3(kStreamThreads), smem, (gpuStream_t)L->stream,
                           L->dependent_launch, a);
            return;
        }
    }
    const size_t smem = (size_t)NT * a.m[0].cols * sizeof(float);
    mxg_launch_dep(matvec_stream_kernel<W, F, NT, NM, R, U, EPI, NORM, false>, dim3(blocks), dim3(kStreamThreads), smem,
                   (gpuStream_t)L->stream, L->dependent_launch, a);
}

// Over long rows, one token: whether a launch takes four rows a task (twice R, half the chunks per
// step: half the activation reads and sums per weight) rather than two. L->stream_rows forces one
// shape (MLXCEL_GPU_STREAM_ROWS=2 or 4); by default (0) a launch takes two rows a task when its
// two-row tasks fit one wave of the grid's resident warps, one task a warp (the 8B's o and down:
// 2,048 tasks on an H100's 2,112 warps), and four otherwise (q/k/v, gate/up, lm_head: two-row tasks
// would spill into a second, mostly empty wave). bench/RESULTS.md run 47: the 8B tg128 +8.4% against
// four rows everywhere, -3.7% with two rows everywhere.
template <int W, int NM, int R>
bool stream_four_rows(const mxg_launch *L, const StreamArgs &a, int count) {
    if (L->stream_rows) return L->stream_rows == 4;
    StreamArgs two = a;  // stream_tasks fills task_end
    const int64_t resident = (int64_t)L->sm_count * kStreamBlocksPerSm * (kStreamThreads / W);
    return stream_tasks<NM, R>(two, count) > resident;
}

// The launch for `count` matrices (m, out, bias of `a` filled) at R rows per task. One token over
// rows shorter than a step (fewer than W x U chunks: the 1024-2560-wide models) takes one chunk per
// lane per step and U times the rows per task instead, the same registers and bytes in flight; over
// long rows, stream_four_rows picks R or twice R rows per task.
template <int W, class F, int NT, int NM, int R, int EPI, bool NORM>
void stream_launch(const mxg_launch *L, const StreamArgs &a, int count) {
    constexpr int U = Streamed<F, NT>::U;
    if constexpr (NT == 1 && U > 1) {
        if (a.m[0].cols / 32 < W * U) {
            stream_launch_shape<W, F, NT, NM, R * U, 1, EPI, NORM>(L, a, count);
            return;
        }
        if (stream_four_rows<W, NM, R>(L, a, count)) {
            stream_launch_shape<W, F, NT, NM, R * 2, U / 2, EPI, NORM>(L, a, count);
            return;
        }
    }
    stream_launch_shape<W, F, NT, NM, R, U, EPI, NORM>(L, a, count);
}

// kernels/matvec_stream.cu: one record of n <= 8 tokens; false when the streaming kernel declines.
bool matvec_stream(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n);

}  // namespace mxg

#endif
