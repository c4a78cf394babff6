// SPDX-License-Identifier: MIT
// The residual epilogue with its reads ahead (EPI_RESIDUAL_EARLY; L->stream_res_early, the default
// since run 49: 8B tg128 +2.0%, 0.6B +2.8% on an H100; MLXCEL_GPU_STREAM_RES_EARLY=0 turns it off) of the one-token products that end in a residual add (o, down):
// the streaming kernel's two bodies (stream_body in kernels/matvec_stream.cuh, stream_body_lean in
// kernels/matvec_stream_lean.cuh) and the fused kernel of kernels/matvec_fused.cu, which takes the
// residual products the streaming kernel declines (the 0.6B's o and down: rows shorter than
// L->stream_min_cols in launches of fewer than L->stream_min_rows rows). Its outputs are bit for bit EPI_RESIDUAL's: out[r] = sum + b and res[r] = res[r] +
// out[r], the same two float additions on the same operands in the same order (b: bias[r], or 0.0f
// without a bias, as there).
//
// Why: EPI_RESIDUAL's lane 0, after the warp sums, reads bias[r] and res[r] and writes out[r] and
// res[r] for each of its task's R rows in turn: a dependent global load (a round trip to L2 or DRAM,
// ~0.6-1 us) at the very end of each warp's last task, then R serial stores from one lane. Most warps
// of these products have one task, so that round trip is the kernel's tail (H100, bench_gpu_matvec
// of the 8B: down + residual 15.3 us against 14.1 for down alone at two rows a task).
// How: lane j < R of the warp holds res[r0 + j] and bias[r0 + j] of its task (ResHeld: two
// registers; rows past the matrix hold nothing), read right after the grid wait for the first task
// (res is written by the previous kernel: never read before the wait) and, where a warp walks
// several tasks, at the top of a task for the next one (two more registers). The butterfly warp sums
// (common.cuh, warp_sum) leave every row's sum in every lane, so lane j picks row j's with an
// unrolled compare (a runtime register index would go to local memory) and writes out[r0 + j] and
// res[r0 + j]: R rows in one store each instead of 2 R stores from lane 0.
// One token, one matrix only: the residual patterns of the plan are (gpu_plan.c: count 1, fused
// launches of one token); the several-token streaming launches never take a residual epilogue.
#ifndef MXG_MATVEC_RES_EARLY_CUH
#define MXG_MATVEC_RES_EARLY_CUH

namespace mxg {

// A lane's held residual and bias of its task's row (0.0f where it holds none).
struct ResHeld {
    float res, bias;
};

// Lane `lane`'s held values of the task of R rows from r0 of a matrix of `rows` rows: res[r0 + lane]
// and bias[r0 + lane] (bias may be NULL) for lanes below R on rows of the matrix.
template <int R>
__device__ __forceinline__ ResHeld res_early_load(const float *res, const float *bias, int64_t rows, int64_t r0,
                                                  int lane) {
    ResHeld h = {0.0f, 0.0f};
    const int64_t r = r0 + lane;
    if (lane < R && r < rows) {
        h.res = res[r];
        if (bias) h.bias = bias[r];
    }
    return h;
}

// Writes the task's rows from the warp's sums, which every lane holds (sum(j): row r0 + j's): lane
// j < R writes out[r0 + j] = sum(j) + bias and res[r0 + j] = res + out from its held values.
template <int R, class Sum>
__device__ __forceinline__ void res_early_store(float *out, float *res, int64_t rows, int64_t r0, int lane,
                                                const ResHeld &h, Sum sum) {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < R; j++)
        if (lane == j) s = sum(j);
    const int64_t r = r0 + lane;
    if (lane >= R || r >= rows) return;
    const float v = s + h.bias;
    out[r] = v;
    res[r] = h.res + v;
}

}  // namespace mxg

#endif
