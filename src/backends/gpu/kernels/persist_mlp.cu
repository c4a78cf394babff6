// SPDX-License-Identifier: MIT
// The first piece of a persistent decode path (MLXCEL_GPU_PERSIST=1, L->persist; kernels_fused.h,
// mxg_persist_mlp_run): one token's MLP half, which the plan runner otherwise runs as two or three
// fused launches ([o-proj + residual add,] RMSNorm + gate/up + SwiGLU, down + residual add), as ONE
// launch of persistent blocks whose phases are separated by a grid-wide barrier
// (kernels/grid_barrier.cuh). Batch-1 decode is launch bound (bench/RESULTS.md: ~7 launches per
// layer at ~4 us of fixed cost each against ~3 us of bytes on the 0.6B); a barrier costs the
// arrival of every block at one counter and one release, not a kernel's launch gap, ramp and tail.
//
// Each phase is the streaming matrix-vector kernel's body (kernels/matvec_stream.cuh, stream_body)
// with the task shape the one-record launch would choose for it (stream_launch: R x U rows per task
// and one chunk per lane per step over rows shorter than W x U chunks, else R rows and U chunks),
// run as `gridDim.x` blocks of which this is block `blockIdx.x`. A row's sum depends only on that
// shape (each row is one warp's, its lanes' partials in chunk order, then the warp's reduction),
// not on the grid, so every buffer is bit for bit what the unfused streaming launches write; over
// rows shorter than MLXCEL_GPU_STREAM_MIN_COLS (4096 by default: the 0.6B's) the unfused records
// run the kernels of kernels/matvec.cuh instead, and the two differ in float32 summation order only.
// The next phase's first weights are loaded before the barrier (they do not depend on it), so the
// barrier's wait overlaps that phase's first DRAM round trip.
//
// The grid: the blocks that fit at once (mxg_blocks_per_sm, at most kStreamBlocksPerSm per
// multiprocessor, times the multiprocessors) and no more than the largest phase's tasks need.
// Dependent launch (sm_90, MLXCEL_GPU_PDL): the kernel waits for the previous one before its first
// staging and lets the next one start only after its last barrier, when all its blocks are resident.
// All matrices share one format (affine 4/8-bit, bf16/f16 scales: the decode models' formats), and
// the phases one task shape (both the 0.6B's and the 8B's layers qualify); anything else declines
// and runs as before.
#include "backends/gpu/kernels/grid_barrier.cuh"
#include "backends/gpu/kernels/matvec_stream.cuh"
#include "backends/gpu/kernels_fused.h"

namespace {

using namespace mxg;

struct PersistArgs {
    StreamArgs o, gu, down;  // o: unused without the o-projection phase
    unsigned *bar;
};

// SHORT: every phase over rows shorter than W x U chunks (R x U rows per task, one chunk per lane per
// step); else R rows per task and U chunks per lane per step. R: 2 for one matrix, 1 for gate/up.
// O: with the o-projection phase (MLXCEL_GPU_PERSIST=2). With it ptxas (sm_90) spills 52-364 bytes
// per thread at the 128 registers of two blocks per multiprocessor, though each phase alone fits
// (the kernels without it spill nothing), hence level 1 without it, for the A/B to weigh.
template <int W, class F, bool SHORT, bool O>
__global__ void __launch_bounds__(kStreamThreads, kStreamBlocksPerSm) persist_mlp_kernel(PersistArgs p) {
    MXG_WARP_ONLY(W) {
    constexpr int U = Streamed<F, 1>::U, SU = SHORT ? 1 : U, K = SHORT ? U : 1;
    extern __shared__ float4 xs4[];
    const int b = (int)blockIdx.x, nb = (int)gridDim.x;
    unsigned *const bar = p.bar;
    auto barrier = [bar, nb] { mxg_grid_sync(bar, (unsigned)nb); };  // by value: no local copy of p
    if constexpr (O) {
        stream_body<W, F, 1, 1, 2 * K, SU, EPI_RESIDUAL, false>(p.o, xs4, b, nb, [] { mxg_grid_wait(); });
        stream_body<W, F, 1, 2, K, SU, EPI_SWIGLU, true>(p.gu, xs4, b, nb, barrier);
    } else {
        stream_body<W, F, 1, 2, K, SU, EPI_SWIGLU, true>(p.gu, xs4, b, nb, [] { mxg_grid_wait(); });
    }
    stream_body<W, F, 1, 1, 2 * K, SU, EPI_RESIDUAL, false>(p.down, xs4, b, nb, [barrier] {
        barrier();
        mxg_grid_release();  // every block is resident by now: the next kernel may start
    });
    }
}

// The formats the kernel is built for.
template <class Fn>
bool dispatch_persist_format(const mx_matrix *w, Fn &&fn) {
    if (w->q.mode != MX_QUANT_AFFINE || (w->q.bits != 4 && w->q.bits != 8) || w->n_experts != 1) return false;
    if (w->q.group_size != 32 && w->q.group_size != 64 && w->q.group_size != 128) return false;
    const int st = w->scale_dtype == MX_DTYPE_BF16 ? ST_BF16 : w->scale_dtype == MX_DTYPE_F16 ? ST_F16 : -1;
    if (st < 0) return false;
    if (w->q.bits == 4) {
        if (st == ST_BF16) fn(Fmt<KIND_AFFINE, 4, ST_BF16>{});
        else fn(Fmt<KIND_AFFINE, 4, ST_F16>{});
    } else {
        if (st == ST_BF16) fn(Fmt<KIND_AFFINE, 8, ST_BF16>{});
        else fn(Fmt<KIND_AFFINE, 8, ST_F16>{});
    }
    return true;
}

bool same_format(const mx_matrix *a, const mx_matrix *b) {
    return a->q.mode == b->q.mode && a->q.bits == b->q.bits && a->q.group_size == b->q.group_size &&
           a->dtype == b->dtype && a->scale_dtype == b->scale_dtype && b->n_experts == 1;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Whether a phase over w (input x) streams: aligned rows of whole chunks, at least one chunk per
// lane, the row within the staging.
bool phase_fits(const mxg_launch *L, const mx_matrix *w, const float *x) {
    return matvec_fast(w, x) && (size_t)w->cols * 4 <= kMatvecStageBytes && w->cols / 32 >= L->warp;
}

StreamArgs one_matrix(const mx_matrix *w, float *out, const float *bias, const float *x, float *res) {
    StreamArgs a = {};
    a.m[0] = mat_view(w);
    a.out[0] = out;
    a.bias[0] = bias;
    a.x = x;
    a.n = 1;
    a.res = res;
    return a;
}

// False when the occupancy query gives no block per multiprocessor (then nothing is enqueued). The
// answer at the largest staging (48 KB) is kept per instantiation: it is at most what a smaller
// staging allows, so it is a safe grid for every launch, and a direct launch need not ask again.
template <int W, class F, bool SHORT, bool O>
bool launch(const mxg_launch *L, PersistArgs p, size_t smem) {
    constexpr int U = Streamed<F, 1>::U, K = SHORT ? U : 1, warps = kStreamThreads / W;
    int tasks = stream_tasks<1, 2 * K>(p.down, 1);
    const int gu_tasks = stream_tasks<2, K>(p.gu, 2);
    tasks = gu_tasks > tasks ? gu_tasks : tasks;
    if (O) {
        const int o_tasks = stream_tasks<1, 2 * K>(p.o, 1);
        tasks = o_tasks > tasks ? o_tasks : tasks;
    }
    static int fits = 0;  // blocks per multiprocessor at 48 KB of staging, once asked
    if (fits < 1) fits = mxg_blocks_per_sm(persist_mlp_kernel<W, F, SHORT, O>, kStreamThreads, kMatvecStageBytes);
    int per_sm = fits < 1 ? mxg_blocks_per_sm(persist_mlp_kernel<W, F, SHORT, O>, kStreamThreads, smem) : fits;
    per_sm = per_sm < kStreamBlocksPerSm ? per_sm : kStreamBlocksPerSm;
    if (per_sm < 1) return false;
    const int64_t want = (tasks + warps - 1) / warps, cap = (int64_t)L->sm_count * per_sm;
    const unsigned blocks = (unsigned)(want < cap ? want : cap);
    mxg_launch_coresident(persist_mlp_kernel<W, F, SHORT, O>, dim3(blocks), dim3(kStreamThreads), smem, (gpuStream_t)L->stream,
                   L->dependent_launch, p);
    return true;
}

}  // namespace

extern "C" int mxg_persist_mlp_run(const mxg_launch *L, const mxg_persist_mlp *m) {
    const mx_matrix *wg = m->w_gate, *wu = m->w_up, *wd = m->w_down, *wo = m->w_o;
    if (!L->persist_bar || L->sm_count < 1 || !dispatch_persist_format(wg, [](auto) {})) return -1;
    if (!same_format(wu, wg) || !same_format(wd, wg) || (wo && !same_format(wo, wg))) return -1;
    if (wu->cols != wg->cols || wu->rows != wg->rows || wd->cols != wg->rows) return -1;
    if (!phase_fits(L, wg, m->x) || !phase_fits(L, wd, m->act) || (wo && !phase_fits(L, wo, m->attn))) return -1;
    if (!aligned16(m->norm_w) || !aligned16(m->norm_out)) return -1;
    // One task shape for every phase (the kernel's SHORT): rows shorter than W x U chunks or not.
    int u = 0;
    dispatch_persist_format(wg, [&](auto fmt) { u = Streamed<decltype(fmt), 1>::U; });
    const int64_t step = (int64_t)L->warp * u * 32;
    const bool short_rows = wg->cols < step;
    if ((wd->cols < step) != short_rows || (wo && (wo->cols < step) != short_rows)) return -1;
    PersistArgs p = {};
    if (wo) p.o = one_matrix(wo, m->o_out, m->b_o, m->attn, m->o_res);
    p.gu = one_matrix(wg, m->gate, m->b_gate, m->x, NULL);
    p.gu.m[1] = mat_view(wu);
    p.gu.out[1] = m->up;
    p.gu.bias[1] = m->b_up;
    p.gu.norm_w = m->norm_w;
    p.gu.norm_eps = m->norm_eps;
    p.gu.norm_out = m->norm_out;
    p.gu.act = m->act;
    p.down = one_matrix(wd, m->down_out, m->b_down, m->act, m->res);
    p.bar = L->persist_bar;
    int64_t cols = wg->cols > wd->cols ? wg->cols : wd->cols;
    if (wo && wo->cols > cols) cols = wo->cols;
    const size_t smem = (size_t)cols * sizeof(float);
    bool done = false;
    dispatch_persist_format(wg, [&](auto fmt) {
        using F = decltype(fmt);
        MXG_WARP_DISPATCH(L->warp, {
            if (short_rows) done = wo ? launch<W, F, true, true>(L, p, smem) : launch<W, F, true, false>(L, p, smem);
            else done = wo ? launch<W, F, false, true>(L, p, smem) : launch<W, F, false, false>(L, p, smem);
        });
    });
    return done ? 0 : -1;
}
