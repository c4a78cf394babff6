// SPDX-License-Identifier: MIT
// The dense MLP half of a one-token layer in one launch (MLXCEL_GPU_MLP_ONE=1, L->mlp_one; the plan
// runner, gpu_plan.c, finds the records): rmsnorm(xn, res), gate = wg xn, up = wu xn, act =
// silu(gate) * up, down = wd act, res += down, where today's path takes two dependent launches
// (norm + gate/up + SwiGLU, then down + residual: kernels/matvec_fused.cu) and one-token decode of
// small models is bound by the chain of dependent launches, not by their bytes.
//
// How: block b owns a slice of the intermediate dimension, `cs` chunks of 32 (the last block may
// have fewer). Before its grid wait it loads its first gate/up rows and, on short rows, its first
// down columns (no weight depends on the previous kernel; on the 0.6B that is every weight the
// block reads) and, under MLXCEL_GPU_PDL=2/3, asks L2 for the rest of its first task's rows. Then every block stages the RMS-normalized residual row in shared memory
// (kernels/matvec_stream.cuh's stream_stage: block 0 also writes xn), its warps compute the gate and
// up rows of the slice with the streaming kernel's loads and dot products (stream_load_slot,
// stream_dot: kernels/matvec_scaled.cuh), write gate, up and act, and stage act's slice (pre-scaled
// for the scaled dot) in shared memory; then every thread takes hidden rows t, t + 256, ... and
// multiplies down's COLUMN slice [rows x the block's chunks] by it (stream_dot with the slice as
// the "row"), one partial sum per hidden row and block.
//
// The reduction across blocks must not depend on their order of arrival (bit-identical results run
// to run). Each partial p goes into a 64-bit fixed-point accumulator per hidden row by one integer
// atomic add of round(p * 2^32) (integer addition is associative, so the sum is the same in any
// order; the rounding error is 2^-33 per partial, far below float32's at the magnitudes that
// matter). A partial of magnitude 2^20 or more is split exactly into its integer part (a second
// accumulator, p's float value below 2^52 is exact there) and its fraction (the first); a
// non-finite one or one of 2^52 or more is added as a float into a third array (infinities and NaNs
// sum to the same thing in any order; finite values that large are not deterministic, and no
// model's residual reaches them). Then each block takes a ticket (after __threadfence: its adds are
// visible first); the last block converts every row, down[r] = (float)(lo 2^-32 + hi) + special +
// bias, res[r] += down[r], and leaves the accumulators and the ticket at zero for the next launch.
// Why not the last-arriving block summing float partials in fixed order: that block alone would
// read blocks x hidden partials (96 x 1024 on the 0.6B, ~400 KB from L2: microseconds), where the
// integer adds are spread over every block and overlap their streaming; the last block reads just
// one accumulator per row. Cost: one fire-and-forget 8-byte atomic per hidden row per block (98 K
// on the 0.6B, 524 K on the 8B), then a fence, a ticket and the last block's pass over the rows.
// No grid barrier, no spin-wait: only the last block does the last step.
//
// Takes affine 4/8-bit weights (bf16/f16 scales, groups of 32-128), all three of one format, hidden
// and intermediate multiples of 32, the normalized row and the act slice within 48 KB of shared
// memory; mxg_mlp_decode_ok says no otherwise (the caller runs today's launches).
#include "backends/gpu/kernels/fused_format.cuh"
#include "backends/gpu/kernels/matvec_stream.cuh"
#include "backends/gpu/kernels_fused.h"

namespace {

using namespace mxg;

constexpr float kFixSmall = 1048576.0f;           // 2^20: partials below go whole into the fraction accumulator
constexpr float kFixLarge = 4503599627370496.0f;  // 2^52: partials from here on go to the float array
constexpr unsigned kTicketCount = 0x3fffffffu;    // the ticket's count bits; bit 30: a split partial, bit 31: a float one
constexpr unsigned kTicketSplit = 1u << 30, kTicketFloat = 1u << 31;

struct MlpArgs {
    StreamArgs s;          // gate (m[0], out[0], bias[0]) and up (m[1], ...), x = res, the norm, act
    MatView wd;            // down
    const float *down_bias;
    float *down;           // down's output
    float *res;
    unsigned long long *lo, *hi;  // [hidden] the fixed-point accumulators (L->mlp_acc), zero between launches
    float *special;               // [hidden] the float one, zero between launches
    unsigned *ticket;             // zero between launches
    int cs;                       // intermediate chunks per block
    int inter_chunks;
};

// Adds block partial p of hidden row r to the accumulators (see the top of the file); returns the
// ticket flag it needs (0, kTicketSplit or kTicketFloat).
__device__ __forceinline__ unsigned mlp_add_partial(const MlpArgs &a, int64_t r, float p) {
    const float m = fabsf(p);
    if (m < kFixSmall) {
        atomicAdd(&a.lo[r], (unsigned long long)__float2ll_rn(p * 4294967296.0f));
        return 0;
    }
    if (m < kFixLarge) {  // p = i + f exactly, |f| < 1
        const float i = truncf(p), f = p - i;
        atomicAdd(&a.hi[r], (unsigned long long)(long long)i);
        atomicAdd(&a.lo[r], (unsigned long long)__float2ll_rn(f * 4294967296.0f));
        return kTicketSplit;
    }
    atomicAdd(&a.special[r], p);
    return kTicketFloat;
}

// The staged (scaled_slot) value of act element j of the block's slice, at its swizzled place.
template <class F>
__device__ __forceinline__ void mlp_stage_act(float *hs, int j, float v) {
    const int c = j >> 5, e = j & 31, q = e >> 2;
    hs[(c * 8 + (q ^ (c & 7))) * 4 + (e & 3)] = v * pow2f(kScaledExp - scaled_shift<F::bits>(e));
}

// The G down rows of thread t's group gi (rows t + kStreamThreads (gi G + j), clamped) at the
// block's chunk k.
template <class F, int G>
__device__ __forceinline__ void mlp_load_down(const MlpArgs &a, int gi, int c, typename F::Raw (&b)[G]) {
#pragma unroll
    for (int j = 0; j < G; j++) {
        const int64_t row = (int64_t)threadIdx.x + (int64_t)kStreamThreads * (gi * G + j);
        F::load_raw(a.wd, min(row, a.wd.rows - 1), c, b[j]);
    }
}

// R gate rows and the same R up rows per task, U chunks per lane per step; G down rows per thread
// per step of the down product, the first step loaded before the grid wait where PRE (else after
// the gate/up rows, whose registers it would share).
template <int W, class F, int R, int U, int G, bool PRE>
__global__ void __launch_bounds__(kStreamThreads, 1) mlp_decode_kernel(MlpArgs a) {
    MXG_WARP_ONLY(W) {
    extern __shared__ float4 xs4[];  // [hidden / 32 * 8] the staged row, then [cs * 8] the staged act slice
    __shared__ unsigned last_s;
    constexpr int RR = 2 * R, warps = kStreamThreads / W, span = W * U;
    const int lane = (int)threadIdx.x % W;
    const int nchunks = a.s.m[0].cols >> 5, n4 = nchunks * 8, steps = (nchunks + span - 1) / span;
    const int c0 = (int)blockIdx.x * a.cs, cn = min(a.cs, a.inter_chunks - c0);
    const int64_t j0 = (int64_t)c0 * 32;
    const int ntasks = cn * 32 / R;
    float4 *hs4 = xs4 + n4;
    // Before the grid wait: the first task's first step, and the first down step.
    int task = (int)threadIdx.x / W;
    typename F::Raw buf[U][RR], dcur[G];
    if (task < ntasks) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (u * W + lane < nchunks) stream_load_slot<F, 2, R>(a.s, 0, j0 + (int64_t)task * R, u * W + lane, buf[u]);
        if (a.s.prefetch && lane == 0) stream_prefetch<F, 2, R>(a.s, 0, j0 + (int64_t)task * R);
    }
    if (PRE) mlp_load_down<F, G>(a, 0, c0, dcur);
    mxg_grid_wait_release(a.s.early);
    stream_stage<W, F, 1, true>(a.s, xs4, n4, (int)blockIdx.x);
    __syncthreads();
    // Gate and up rows of the slice (stream_body's loop over this block's tasks).
    for (; task < ntasks; task += warps) {
        const int ntask = task + warps;
        const int64_t r0 = j0 + (int64_t)task * R, nr0 = j0 + (int64_t)ntask * R;
        float acc[RR][1];
#pragma unroll
        for (int j = 0; j < RR; j++) acc[j][0] = 0.0f;
        for (int s = 0; s < steps; s++) {
            const bool last = s + 1 == steps, more = !last || ntask < ntasks;
            const int64_t lr0 = last ? nr0 : r0;
            const int cb = s * span, lcb = last ? 0 : cb + span;
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = cb + u * W + lane, lc = lcb + u * W + lane;
                if (c < nchunks) stream_dot<F, 1, RR>(xs4, n4, c, buf[u], acc);
                if (more && lc < nchunks) stream_load_slot<F, 2, R>(a.s, 0, lr0, lc, buf[u]);
            }
        }
#pragma unroll
        for (int j = 0; j < RR; j++) acc[j][0] = warp_sum<W>(acc[j][0]);
        if (lane == 0) {
#pragma unroll
            for (int j = 0; j < R; j++) {
                const int64_t r = r0 + j;
                const float g = acc[j][0] + (a.s.bias[0] ? a.s.bias[0][r] : 0.0f);
                const float u = acc[R + j][0] + (a.s.bias[1] ? a.s.bias[1][r] : 0.0f);
                const float h = silu_mul(g, u);
                a.s.out[0][r] = g;
                a.s.out[1][r] = u;
                a.s.act[r] = h;
                mlp_stage_act<F>((float *)hs4, task * R + j, h);
            }
        }
    }
    if (!PRE) mlp_load_down<F, G>(a, 0, c0, dcur);
    __syncthreads();
    // Down's column slice times the act slice: thread t's rows, G at a time, chunk by chunk.
    const int hidden = (int)a.wd.rows;
    const int per = (hidden + kStreamThreads - 1) / kStreamThreads, groups = (per + G - 1) / G, units = groups * cn;
    unsigned flags = 0;
    float dacc[G][1];
    for (int un = 0; un < units; un++) {
        const int gi = un / cn, k = un - gi * cn;
        if (k == 0) {
#pragma unroll
            for (int j = 0; j < G; j++) dacc[j][0] = 0.0f;
        }
        typename F::Raw dnxt[G];
        if (un + 1 < units) {
            const int ngi = (un + 1) / cn;
            mlp_load_down<F, G>(a, ngi, c0 + (un + 1 - ngi * cn), dnxt);
        }
        stream_dot<F, 1, G>(hs4, cn * 8, k, dcur, dacc);
#pragma unroll
        for (int j = 0; j < G; j++) dcur[j] = dnxt[j];
        if (k == cn - 1) {
#pragma unroll
            for (int j = 0; j < G; j++) {
                const int64_t row = (int64_t)threadIdx.x + (int64_t)kStreamThreads * (gi * G + j);
                if (row < hidden) flags |= mlp_add_partial(a, row, dacc[j][0]);
            }
        }
    }
    mxg_grid_release();  // the next dependent kernel may start loading its weights
    // The ticket: the last block to take it sums every row.
    if (flags) atomicOr(a.ticket, flags);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned t = atomicAdd(a.ticket, 1u);
        last_s = (t & kTicketCount) == gridDim.x - 1 ? (t & ~kTicketCount) | 1u : 0u;
    }
    __syncthreads();
    const unsigned last = last_s;
    if (!last) return;
    __threadfence();
    for (int r = (int)threadIdx.x; r < hidden; r += kStreamThreads) {
        double d = (double)(long long)atomicExch(&a.lo[r], 0ull) * (1.0 / 4294967296.0);
        if (last & kTicketSplit) d += (double)(long long)atomicExch(&a.hi[r], 0ull);
        float v = (float)d;
        if (last & kTicketFloat) v += atomicExch(&a.special[r], 0.0f);
        v += a.down_bias ? a.down_bias[r] : 0.0f;
        a.down[r] = v;
        a.res[r] += v;
    }
    if (threadIdx.x == 0) atomicExch(a.ticket, 0u);
    }
}

bool same_kind(const mx_matrix *a, const mx_matrix *b) {
    return a->q.mode == b->q.mode && a->q.bits == b->q.bits && a->q.group_size == b->q.group_size &&
           a->dtype == b->dtype && a->scale_dtype == b->scale_dtype && a->n_experts == 1 && b->n_experts == 1;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Intermediate chunks per block: as many blocks as multiprocessors at most (one per multiprocessor:
// each keeps a whole task's rows in flight; kernel bounds allow one resident block of 256 threads),
// never more than the ticket's count bits allow.
int mlp_chunks_per_block(const mxg_launch *L, int inter_chunks) {
    const int sms = L->sm_count > 0 ? L->sm_count : 1;
    int cs = (inter_chunks + sms - 1) / sms;
    while ((inter_chunks + cs - 1) / cs > 4096) cs++;
    return cs;
}

template <int W, class F>
void mlp_launch(const mxg_launch *L, MlpArgs a) {
    constexpr int U0 = Streamed<F, 1>::U0;
    const int hidden = a.s.m[0].cols, blocks = (a.inter_chunks + a.cs - 1) / a.cs;
    const size_t smem = (size_t)hidden * sizeof(float) + (size_t)a.cs * 128;
    a.s.early = L->pdl_early;
    a.s.prefetch = pdl_warp_budget(L, (int64_t)blocks * (kStreamThreads / W));
    // Rows shorter than a step (the 1024-2560-wide models): one chunk per lane per step and U0 rows
    // per task (the streaming kernel's shape), four down rows per thread per step, loaded before the
    // grid wait (the 0.6B: the block's every weight); else two rows per task and a whole step's
    // chunks (64 KB in flight a multiprocessor at one block, the streaming kernel's at two), eight
    // down rows, loaded after the gate/up rows.
    if (hidden / 32 < W * U0)
        mxg_launch_dep(mlp_decode_kernel<W, F, U0, 1, 4, true>, dim3((unsigned)blocks), dim3(kStreamThreads), smem,
                       (gpuStream_t)L->stream, L->dependent_launch, a);
    else
        mxg_launch_dep(mlp_decode_kernel<W, F, 2, U0, 8, false>, dim3((unsigned)blocks), dim3(kStreamThreads), smem,
                       (gpuStream_t)L->stream, L->dependent_launch, a);
}

}  // namespace

extern "C" bool mxg_mlp_decode_ok(const mxg_launch *L, const mxg_mlp *f) {
    if (!L->mlp_one || !L->mlp_acc || L->matvec_old) return false;
    const mx_matrix *g = f->wg, *u = f->wu, *d = f->wd;
    bool scaled = false;
    if (!dispatch_fused_format(g, [&](auto fmt) { scaled = Scaled<decltype(fmt)>::on; }) || !scaled) return false;
    if (!same_kind(g, u) || !same_kind(g, d)) return false;
    const int64_t hidden = g->cols, inter = g->rows;
    if (u->rows != inter || u->cols != hidden || d->rows != hidden || d->cols != inter) return false;
    if (hidden % 32 || inter % 32 || hidden > MXG_MLP_MAX_HIDDEN) return false;
    if (!matvec_fast(g, f->res) || !matvec_fast(u, f->res) || !matvec_fast(d, f->res)) return false;
    if (!aligned16(f->norm_w) || !aligned16(f->norm_out)) return false;
    const int cs = mlp_chunks_per_block(L, (int)(inter / 32));
    return (size_t)hidden * sizeof(float) + (size_t)cs * 128 <= kMatvecStageBytes;
}

extern "C" void mxg_mlp_decode(const mxg_launch *L, const mxg_mlp *f) {
    MX_ASSERT(mxg_mlp_decode_ok(L, f));
    MlpArgs a = {};
    a.s.m[0] = mat_view(f->wg);
    a.s.m[1] = mat_view(f->wu);
    a.s.out[0] = f->gate;
    a.s.out[1] = f->up;
    a.s.bias[0] = f->g_bias;
    a.s.bias[1] = f->u_bias;
    a.s.x = f->res;
    a.s.n = 1;
    a.s.norm_w = f->norm_w;
    a.s.norm_eps = f->eps;
    a.s.norm_out = f->norm_out;
    a.s.act = f->act;
    a.wd = mat_view(f->wd);
    a.down_bias = f->d_bias;
    a.down = f->down;
    a.res = f->res;
    unsigned long long *acc = (unsigned long long *)L->mlp_acc;
    a.lo = acc;
    a.hi = acc + MXG_MLP_MAX_HIDDEN;
    a.special = (float *)(acc + 2 * MXG_MLP_MAX_HIDDEN);
    a.ticket = (unsigned *)(a.special + MXG_MLP_MAX_HIDDEN);
    a.inter_chunks = (int)(f->wg->rows / 32);
    a.cs = mlp_chunks_per_block(L, a.inter_chunks);
    dispatch_fused_format(f->wg, [&](auto fmt) {
        using F = decltype(fmt);
        if constexpr (Scaled<F>::on) {
            MXG_WARP_DISPATCH(L->warp, (mlp_launch<W, F>(L, a)));
        }
    });
}
