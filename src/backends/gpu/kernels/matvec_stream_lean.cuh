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
//
// The split form (MLXCEL_GPU_STREAM_SPLIT=1, L->stream_split; off by default until measured) spreads
// the work evenly over every resident warp. Why: with one task per warp the 8B's 4096-row products
// run 1,024 four-row tasks = one warp each, 8 warps per multiprocessor, and its 12288-row ones 1.45
// tasks per resident warp (a half-empty second wave); bench/RESULTS.md runs 35-36: DRAM ~30% busy.
// How: S = 2, 4 or 8 warps of one block share each task, each streaming one slice of the columns
// (the same steps, prefetch and dots over its chunks), and add their partial sums in shared memory in
// slice order (deterministic; no atomics) before one of them runs the epilogue. S per launch
// (stream_split_ways) from the tasks, the row's chunks and the resident warps, so that the waves are
// full; where S = 1 wins the lean kernel itself runs. Outputs differ from the lean form's only in the
// order of the S partial sums (float32 rounding).
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

// The split form's epilogue: every warp of the row group sums its lanes' partials and lane 0 puts
// them in shared memory (`partials`: two sets of [warps][RR], alternating by task so that one barrier
// per task suffices: a set is rewritten two tasks later, after the barrier that its reader reached
// only once done reading); after the barrier, the group's first warp adds the others' partials to
// its own in slice order, a fixed order, and writes the outputs. Every warp of the block calls it
// once per task, active or not (the barrier).
template <int W, int NM, int R, int EPI>
__device__ __forceinline__ void stream_split_epilogue(const StreamArgs &a, int mi, int64_t r0, float (&acc)[NM * R][1],
                                                      float *partials, int set, bool active) {
    constexpr int RR = NM * R, warps = kStreamThreads / W;
    const int warp = (int)threadIdx.x / W, lane = (int)threadIdx.x % W, slice = warp % a.split;
#pragma unroll
    for (int j = 0; j < RR; j++) acc[j][0] = warp_sum<W>(acc[j][0]);
    float *mine = partials + set * warps * RR;
    if (lane == 0) {
#pragma unroll
        for (int j = 0; j < RR; j++) mine[warp * RR + j] = acc[j][0];
    }
    __syncthreads();
    if (!active || slice != 0 || lane != 0) return;
    for (int p = 1; p < a.split; p++)
#pragma unroll
        for (int j = 0; j < RR; j++) acc[j][0] += mine[(warp + p) * RR + j];
    stream_write<1, NM, R, EPI>(a, mi, r0, acc);
}

// stream_body's walk (one token) with the sums staged and the task's rows formed once per task.
// SPLIT: the split form (a.split = S of 2, 4 or 8): a task is a row group and S consecutive warps of
// one block share it, warp k of them taking the k-th of S equal slices of the columns (in chunks;
// the last may be shorter) and its partial sums joining the others' in stream_split_epilogue. The
// block's row groups walk the tasks in step (each iteration ends with the block's barrier), those
// past the last task idle through it. Without SPLIT the slice is the whole row, one warp a task.
template <int W, class F, int NM, int R, int U, int EPI, bool NORM, bool SPLIT = false>
__device__ __forceinline__ void stream_body_lean(const StreamArgs &a, float4 *xs4, int block, int nblocks) {
    constexpr int RR = NM * R, warps = kStreamThreads / W, span = W * U;
    const int lane = (int)threadIdx.x % W, warp = (int)threadIdx.x / W;
    const int ways = SPLIT ? a.split : 1, row_groups = warps / ways;  // per block
    const int nchunks = a.m[0].cols >> 5, n4 = nchunks * 8;
    const int slice_chunks = (nchunks + ways - 1) / ways, steps = (slice_chunks + span - 1) / span;
    const int slice_begin = (warp % ways) * slice_chunks;                // this warp's chunks:
    const int slice_end = min(slice_begin + slice_chunks, nchunks);      // [slice_begin, slice_end)
    const int ntasks = a.task_end[2], stride = nblocks * row_groups;
    const uint32_t row_bytes = (uint32_t)a.m[0].row_bytes;
    const int groups = a.m[0].groups, group_shift = a.m[0].group_shift;
    float *sums = (float *)(xs4 + n4);  // [nchunks]
    float *partials = sums + nchunks;   // SPLIT: [2][warps][RR]
    const int block_first = block * row_groups;  // the block's first row group's task
    int task = block_first + warp / ways;
    int mi = 0;
    int64_t r0 = 0;
    LeanRows<NM, R> rows;
    typename F::Raw buf[U][RR];
    if (task < ntasks) {
        stream_task<R>(a, task, mi, r0);
        stream_lean_rows<NM, R>(a, mi, r0, rows);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (slice_begin + u * W + lane < slice_end)
                stream_lean_load<F, NM, R>(rows, slice_begin + u * W + lane, row_bytes, groups, group_shift, buf[u]);
        if (a.prefetch && lane == 0 && warp % ways == 0) stream_prefetch<F, NM, R>(a, mi, r0);  // MLXCEL_GPU_PDL=2
    }
    mxg_grid_wait_release(a.early);
    stream_stage<W, F, 1, NORM>(a, xs4, n4, block);
    __syncthreads();
    stream_lean_sums<F>(xs4, sums, nchunks);
    __syncthreads();  // from here on the warps run independently (SPLIT: the row groups' warps meet once a task)
    for (int set = 0; (SPLIT ? task - warp / ways : task) < ntasks; task += stride, set ^= 1) {
        const bool active = !SPLIT || task < ntasks;  // SPLIT: a row group past the last task idles
        const int ntask = task + stride;
        int nmi = 0;
        int64_t nr0 = 0;
        if (ntask < ntasks) stream_task<R>(a, ntask, nmi, nr0);
        float acc[RR][1];
#pragma unroll
        for (int j = 0; j < RR; j++) acc[j][0] = 0.0f;
        for (int s = 0; active && s < steps; s++) {
            const bool last = s + 1 == steps, more = !last || ntask < ntasks;
            // The last step's slots load the next task's first step: its rows replace this task's,
            // which the dots below no longer need (they read the slots).
            if (last && ntask < ntasks) stream_lean_rows<NM, R>(a, nmi, nr0, rows);
            const int c0 = slice_begin + s * span, lc0 = last ? slice_begin : c0 + span;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + u * W + lane, lc = lc0 + u * W + lane;
                if (c < slice_end) stream_lean_dot<F, RR>(xs4, sums, c, buf[u], acc);
                if (more && lc < slice_end) stream_lean_load<F, NM, R>(rows, lc, row_bytes, groups, group_shift, buf[u]);
            }
        }
        if constexpr (SPLIT)
            stream_split_epilogue<W, NM, R, EPI>(a, mi, r0, acc, partials, set, active);
        else
            stream_epilogue<W, 1, NM, R, EPI>(a, mi, r0, acc);
        mi = nmi, r0 = nr0;
    }
}

// Dynamic shared memory of the split form: the lean form's, then two sets of partial sums of every
// warp's RR rows.
static inline size_t stream_split_smem(int64_t cols, int warps, int rr) {
    return stream_lean_smem(cols) + (size_t)2 * warps * rr * sizeof(float);
}

// The split form's S for a launch of `tasks` row groups over rows of `nchunks` chunks: of S = 1, 2,
// 4, 8 (at most the block's warps, and at least one chunk per lane in a slice), the one whose
// busiest warp streams the least, counted as waves of row groups over the resident warps (sm_count
// x kStreamBlocksPerSm x warps per block, S of them per row group) times 1 / S of a row; the
// smallest S of equal cost (fewer barriers and partial sums). 1: the unsplit lean form.
static inline int stream_split_ways(const mxg_launch *L, int64_t tasks, int nchunks) {
    const int warps = kStreamThreads / L->warp;
    const int64_t resident = (int64_t)L->sm_count * kStreamBlocksPerSm * warps;
    int best = 1;
    int64_t best_waves = (tasks + resident - 1) / resident;
    for (int ways = 2; ways <= warps && nchunks / ways >= L->warp; ways *= 2) {
        const int64_t row_groups = resident / ways, waves = (tasks + row_groups - 1) / row_groups;
        if (waves * best < best_waves * ways) best = ways, best_waves = waves;  // waves / ways < best's
    }
    return best;
}

}  // namespace mxg

#endif
