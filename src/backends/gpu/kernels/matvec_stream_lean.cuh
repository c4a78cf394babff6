// SPDX-License-Identifier: MIT
// The lean form of the streaming kernel's one-token products over affine 4/8-bit weights
// (MLXCEL_GPU_STREAM_LEAN, L->stream_lean; the default, =0 gives stream_body): the same tasks, steps,
// prefetch, dot products and epilogues as stream_body (kernels/matvec_stream.cuh, which includes this
// file after the pieces both forms share), with the work that does not depend on the weights taken
// out of the loop. Its outputs are bit for bit those of stream_body: every float operation is the
// same, on the same values, in the same order; only where they are computed and how addresses are
// formed change.
//
// Why: the one-token products are issue- and latency-bound (bench/RESULTS.md, run 28: ~5.9 thread
// instructions per weight, 7.9 cycles between a warp's instructions, DRAM 24% busy), and in the SASS
// of stream_body's steady-state loop (sm_90, 4-bit, four rows per task) only ~2.1 of its ~3.9
// instructions per weight are the dot itself. The rest, per chunk of 32 columns and task of R rows:
// - sum(x) of the chunk, ~40 instructions, recomputed by every task although it depends only on the
//   activations: here each block computes it once per chunk right after staging (scaled_sum on the
//   same staged values, so the same float) and keeps it in shared memory after the row (4 bytes per
//   chunk: a 12288-wide row needs 49.5 KB, which the launch allows with the function attribute);
// - the weight addresses, ~130 instructions per slot of four rows: the row's matrix picked from the
//   kernel arguments by index, the row clamped, and 64-bit row * row_bytes and row * groups products,
//   for every chunk; here the task's clamped rows and its matrices' arrays are formed once per task
//   (when the slots turn to the next task's first step) and a chunk's loads cost a few
//   multiply-adds on them;
// - the staged activations' swizzled addresses (slot i of chunk c at c * 8 + (i ^ (c & 7))), formed
//   as (c * 8 + (c & 7)) ^ i, one XOR per slot from a per-chunk base.
// In the SASS (sm_90, bench/RESULTS.md "Lean one-token streaming product") the step loop drops from
// 3.9 to 2.9 instructions per weight, registers stay at 128 or fewer (the same occupancy), no spills.
// Requirements (StreamLean, stream_lean_fits): the scaled formats (Scaled<F>), one token, at most four
// rows per task, every matrix's rows * groups below 2^31 (the scale offsets are 32-bit) and row_bytes
// below 2^32; otherwise stream_body runs.
#ifndef MXG_MATVEC_STREAM_LEAN_CUH
#define MXG_MATVEC_STREAM_LEAN_CUH

namespace mxg {

// Whether the lean form exists for a format, a token count and RR rows per task: up to four (the
// long-row shapes; the eight-row shape of rows shorter than a step would spill its row registers).
template <class F, int NT, int RR>
struct StreamLean {
    static constexpr bool on = Scaled<F>::on && NT == 1 && RR <= 4;
};

// Dynamic shared memory of the lean form over `cols` columns: the staged row, then one float per
// chunk (the chunk's sum of x).
static inline size_t stream_lean_smem(int64_t cols) {
    return (size_t)cols * sizeof(float) + (size_t)(cols / 32) * sizeof(float);
}

// Whether the lean form takes the `count` matrices of `a` (format checked by the caller).
static inline bool stream_lean_fits(const mxg_launch *L, const StreamArgs &a, int count) {
    if (!L->stream_lean) return false;
    for (int k = 0; k < count; k++)
        if (a.m[k].rows * a.m[k].groups >= ((int64_t)1 << 31) || a.m[k].row_bytes >= ((int64_t)1 << 32)) return false;
    return true;
}

// sums[c] = sum(x) of chunk c (scaled_sum of its staged values, exactly as stream_dot computes it),
// one chunk per thread; between the staging barrier and a second one.
template <class F>
__device__ __forceinline__ void stream_lean_sums(const float4 *xs4, float *sums, int nchunks) {
    for (int c = (int)threadIdx.x; c < nchunks; c += kStreamThreads) {
        float xv[32];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 v = xs4[(c * 8 + (c & 7)) ^ i];
            xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
        }
        sums[c] = scaled_sum<F::bits>(xv);
    }
}

// The weight rows of one task, formed once per task: the row numbers r0.. (rows past the matrix
// read its last row, as stream_load_slot does) and the arrays of matrix mi, or (NM = 2) of gate and
// up, whose rows are the same. 6 x NM + R registers; a chunk's addresses cost two multiply-adds
// for the words and one plus two for the scale and the bias.
template <int NM, int R>
struct LeanRows {
    const uint8_t *data[NM];  // [rows, row_bytes] of matrix k
    const void *scales[NM];   // [rows, groups] of matrix k
    const void *biases[NM];
    int row[R];               // the task's rows, clamped
};

template <int NM, int R>
__device__ __forceinline__ void stream_lean_rows(const StreamArgs &a, int mi, int64_t r0, LeanRows<NM, R> &t) {
    const MatView &m0 = NM == 2 ? a.m[0] : mi == 0 ? a.m[0] : mi == 1 ? a.m[1] : a.m[2];
#pragma unroll
    for (int k = 0; k < NM; k++) {
        const MatView &m = k == 0 ? m0 : a.m[1];
        t.data[k] = m.data;
        t.scales[k] = m.scales;
        t.biases[k] = m.biases;
    }
#pragma unroll
    for (int j = 0; j < R; j++) t.row[j] = (int)min(r0 + j, m0.rows - 1);
}

// The packed words, scale and bias of chunk c of every row of the task (F::load_raw's values):
// row j of matrix j / R. row_bytes, groups, group_shift: the matrices' (one format, same columns).
template <class F, int NM, int R>
__device__ __forceinline__ void stream_lean_load(const LeanRows<NM, R> &t, int c, uint32_t row_bytes, int groups,
                                                 int group_shift, typename F::Raw (&b)[NM * R]) {
    const int g = (c * 32) >> group_shift;
#pragma unroll
    for (int j = 0; j < NM * R; j++) {
        const uint32_t row = (uint32_t)t.row[j % R];
        const uint32_t *words = (const uint32_t *)(t.data[j / R] + (uint64_t)row * row_bytes);
        load_chunk_words<F::bits>(words + c * F::raw_words, b[j].q);
        const int64_t si = (uint32_t)((int)row * groups + g);  // below 2^31 (stream_lean_fits): zero extension is free
        b[j].s0 = b[j].s1 = load_st<F::st>(t.scales[j / R], si);
        b[j].b = load_st<F::st>(t.biases[j / R], si);
    }
}

// acc[j] += dot(row j's chunk c, x's chunk c), with the chunk's sum from `sums` (stream_dot's
// operations, one token).
template <class F, int RR>
__device__ __forceinline__ void stream_lean_dot(const float4 *xs4, const float *sums, int c,
                                                const typename F::Raw (&b)[RR], float (&acc)[RR][1]) {
    float xv[32];
    const int base = c * 8 + (c & 7);  // slot i of chunk c sits at base ^ i
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float4 v = xs4[base ^ i];
        xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
    }
    const float xs = sums[c];
#pragma unroll
    for (int j = 0; j < RR; j++) acc[j][0] += scaled_dot<F>(b[j], xv, xs);
}

// stream_body's walk (one token) with the sums staged and the task's rows formed once per task.
template <int W, class F, int NM, int R, int U, int EPI, bool NORM>
__device__ __forceinline__ void stream_body_lean(const StreamArgs &a, float4 *xs4, int block, int nblocks) {
    constexpr int RR = NM * R, warps = kStreamThreads / W, span = W * U;
    const int lane = (int)threadIdx.x % W;
    const int nchunks = a.m[0].cols >> 5, n4 = nchunks * 8, steps = (nchunks + span - 1) / span;
    const int ntasks = a.task_end[2], stride = nblocks * warps;
    const uint32_t row_bytes = (uint32_t)a.m[0].row_bytes;
    const int groups = a.m[0].groups, group_shift = a.m[0].group_shift;
    float *sums = (float *)(xs4 + n4);  // [nchunks]
    int task = block * warps + (int)threadIdx.x / W;
    int mi = 0;
    int64_t r0 = 0;
    LeanRows<NM, R> rows;
    typename F::Raw buf[U][RR];
    if (task < ntasks) {
        stream_task<R>(a, task, mi, r0);
        stream_lean_rows<NM, R>(a, mi, r0, rows);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (u * W + lane < nchunks)
                stream_lean_load<F, NM, R>(rows, u * W + lane, row_bytes, groups, group_shift, buf[u]);
        if (a.prefetch && lane == 0) stream_prefetch<F, NM, R>(a, mi, r0);  // MLXCEL_GPU_PDL=2
    }
    mxg_grid_wait_release(a.early);
    // EPI_RESIDUAL_EARLY (kernels/matvec_res_early.cuh): the first task's residual and bias, after the wait.
    ResHeld held = {}, nheld = {};
    if (EPI == EPI_RESIDUAL_EARLY && task < ntasks) held = stream_res_load<R>(a, mi, r0, lane);
    stream_stage<W, F, 1, NORM>(a, xs4, n4, block);
    __syncthreads();
    stream_lean_sums<F>(xs4, sums, nchunks);
    __syncthreads();  // from here on the warps run independently
    for (; task < ntasks; task += stride) {
        const int ntask = task + stride;
        int nmi = 0;
        int64_t nr0 = 0;
        if (ntask < ntasks) {
            stream_task<R>(a, ntask, nmi, nr0);
            if (EPI == EPI_RESIDUAL_EARLY) nheld = stream_res_load<R>(a, nmi, nr0, lane);  // the next task's, a task ahead
        }
        float acc[RR][1];
#pragma unroll
        for (int j = 0; j < RR; j++) acc[j][0] = 0.0f;
        for (int s = 0; s < steps; s++) {
            const bool last = s + 1 == steps, more = !last || ntask < ntasks;
            // The last step's slots load the next task's first step: its rows replace this task's,
            // which the dots below no longer need (they read the slots).
            if (last && ntask < ntasks) stream_lean_rows<NM, R>(a, nmi, nr0, rows);
            const int c0 = s * span, lc0 = last ? 0 : c0 + span;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * W + lane, lc = lc0 + u * W + lane;
                if (c < nchunks) stream_lean_dot<F, RR>(xs4, sums, c, buf[u], acc);
                if (more && lc < nchunks) stream_lean_load<F, NM, R>(rows, lc, row_bytes, groups, group_shift, buf[u]);
            }
        }
        stream_finish<W, 1, NM, R, EPI>(a, mi, r0, acc, held);
        mi = nmi, r0 = nr0, held = nheld;
    }
}

}  // namespace mxg

#endif
