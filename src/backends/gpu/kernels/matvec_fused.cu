// SPDX-License-Identifier: MIT
// Fused one-token matrix-vector products for decode (the plan runner, gpu_plan.c, finds the record
// patterns): up to three matrices that read the same input in one launch (q/k/v), optionally with
// the RMSNorm that makes that input folded into the activation staging (every block normalizes the
// row while copying it to shared memory; block 0 also writes the norm's output, so the record's
// buffer holds what the RMSNorm record would have written), and one of three epilogues:
// - plain: out_j[r] = dot + bias_j[r];
// - residual: out[r] = dot + bias[r], then res[r] += out[r] (a matmul followed by the residual add);
// - swiglu: two matrices (gate, up) with the same rows, each warp computing the same R rows of both;
//   gate[r] and up[r] are written, then act[r] = silu(gate[r]) * up[r] (act may be the gate buffer).
// Every buffer the fused records write is written, with the values the records would leave (up to
// float32 summation order). The dot products are those of kernels/matvec.cuh (same Fmt raw path,
// activations staged swizzled in shared memory, the scaled-activation dot for affine 4/8-bit and
// split-K for few rows unless MLXCEL_GPU_OLD_MATVEC=1), so accuracy is that of the one-record kernels.
// Affine 4/8-bit and mxfp4 weights take the streaming kernel (kernels/matvec_stream.cuh, the same
// epilogues and norm staging) unless MLXCEL_GPU_NO_STREAM_MATVEC=1 or MLXCEL_GPU_OLD_MATVEC=1.
// L->stream_res_early (on unless MLXCEL_GPU_STREAM_RES_EARLY=0): the residual epilogue with the residual
// and bias read ahead, in the streaming kernel and here (EPI_RESIDUAL_EARLY, kernels/matvec_res_early.cuh:
// this kernel takes the residual products the streaming kernel declines, the 0.6B's o and down;
// each warp has one row group, so its lanes read theirs right after the grid wait).
#include "backends/gpu/kernels/fused_format.cuh"
#include "backends/gpu/kernels/matvec_stream.cuh"
#include "backends/gpu/kernels_fused.h"

namespace {

using namespace mxg;

struct FusedArgs {
    MatView m[3];
    float *out[3];
    const float *bias[3];
    unsigned block_end[3];  // cumulative blocks per matrix (plain/residual); swiglu uses m[0] rows
    const float *x;
    const float *norm_w;    // NORM: RMSNorm weight [cols]
    float norm_eps;
    float *norm_out;        // NORM: the RMSNorm record's output (written by block 0)
    float *res;             // residual stream (EPI_RESIDUAL)
    float *act;             // silu(gate) * up (EPI_SWIGLU)
    unsigned prefetch;      // MLXCEL_GPU_PDL=2: L2 prefetch budget of each warp's rows (kernels/matvec.cuh; 0: none)
    bool early;             // MLXCEL_GPU_PDL=2: release the next dependent kernel right after the grid wait
};

template <int W, class F, int R, int EPI, bool NORM, bool SCALED>
__global__ void __launch_bounds__(kMatvecThreads) fused_matvec_kernel(FusedArgs a, int ksplit) {
    MXG_WARP_ONLY(W) {
    extern __shared__ float4 xs4[];  // [nchunks * 8], swizzled as in matvec.cuh, then split-K partials
    float *red = (float *)xs4;        // the norm's reduction scratch, before the row is staged
    constexpr int warps = kMatvecThreads / W;
    constexpr int NM = EPI == EPI_SWIGLU ? 2 : 1;  // matrices per warp
    const int warp = threadIdx.x / W, lane = threadIdx.x % W;
    const int kpart = warp % ksplit;  // split-K share (matvec.cuh)
    const int cols = a.m[0].cols, nchunks = cols >> 5, n4 = nchunks * 8;
    const int cstep = ksplit * W, cfirst = kpart * W + lane;
    int mi = 0;
    unsigned b0 = 0;
    if (EPI != EPI_SWIGLU && blockIdx.x >= a.block_end[0]) {
        mi = blockIdx.x >= a.block_end[1] ? 2 : 1;
        b0 = a.block_end[mi - 1];
    }
    const MatView &m = mi == 0 ? a.m[0] : mi == 1 ? a.m[1] : a.m[2];
    const int64_t r0 = ((int64_t)(blockIdx.x - b0) * (warps / ksplit) + warp / ksplit) * R;
    const bool active = r0 < m.rows;
    int64_t rows[R];
#pragma unroll
    for (int rr = 0; rr < R; rr++) rows[rr] = min(r0 + rr, m.rows - 1);
    float acc[NM][R];
#pragma unroll
    for (int k = 0; k < NM; k++)
#pragma unroll
        for (int rr = 0; rr < R; rr++) acc[k][rr] = 0.0f;
    typename F::Raw cur[NM][R], nxt[NM][R];
    if (active && cfirst < nchunks) {
#pragma unroll
        for (int k = 0; k < NM; k++)
#pragma unroll
            for (int rr = 0; rr < R; rr++) F::load_raw(NM == 2 ? a.m[k] : m, rows[rr], cfirst, cur[k][rr]);
    }
    if (a.prefetch && active && lane == 0 && kpart == 0) {  // MLXCEL_GPU_PDL=2: the warp's rows into L2
        const unsigned budget = prefetch_share(a.prefetch, NM);
#pragma unroll
        for (int k = 0; k < NM; k++) {
            unsigned b = budget;
            prefetch_rows<F>(NM == 2 ? a.m[k] : m, r0, R, b);
        }
    }
    mxg_grid_wait_release(a.early);  // a dependent kernel: the weights above did not need the previous one
    // EPI_RESIDUAL_EARLY: the warp's residual and bias rows into its lanes, after the wait (res is the
    // previous kernel's); only the warps that write (kpart 0).
    ResHeld held = {};
    if (EPI == EPI_RESIDUAL_EARLY && active && kpart == 0)
        held = res_early_load<R>(a.res, mi == 0 ? a.bias[0] : mi == 1 ? a.bias[1] : a.bias[2], m.rows, r0, lane);
    const float4 *x4 = (const float4 *)a.x;
    float scale = 1.0f;
    if (NORM) {
        float ss = 0.0f;
        for (int i = threadIdx.x; i < cols; i += blockDim.x) ss = fmaf(a.x[i], a.x[i], ss);
        ss = block_sum<W>(ss, red);
        scale = 1.0f / sqrtf(ss / (float)cols + a.norm_eps);
    }
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = x4[i];
        if (NORM) {
            const float4 w = ((const float4 *)a.norm_w)[i];
            v = make_float4(v.x * scale * w.x, v.y * scale * w.y, v.z * scale * w.z, v.w * scale * w.w);
            if (blockIdx.x == 0) ((float4 *)a.norm_out)[i] = v;
        }
        const int c = i >> 3, q = i & 7;
        if constexpr (SCALED) v = scaled_slot<F::bits>(v, q);
        xs4[c * 8 + (q ^ (c & 7))] = v;
    }
    __syncthreads();
    if (!active && ksplit == 1) return;  // whole warps leave together; no barrier follows
    for (int c = cfirst; active && c < nchunks; c += cstep) {
        if (c + cstep < nchunks) {
#pragma unroll
            for (int k = 0; k < NM; k++)
#pragma unroll
                for (int rr = 0; rr < R; rr++) F::load_raw(NM == 2 ? a.m[k] : m, rows[rr], c + cstep, nxt[k][rr]);
        }
        float xv[32];
        float xs = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 v = xs4[c * 8 + (i ^ (c & 7))];
            xv[4 * i] = v.x, xv[4 * i + 1] = v.y, xv[4 * i + 2] = v.z, xv[4 * i + 3] = v.w;
            if constexpr (!SCALED) xs += (v.x + v.y) + (v.z + v.w);
        }
        if constexpr (SCALED) {
            xs = scaled_sum<F::bits>(xv);
#pragma unroll
            for (int k = 0; k < NM; k++)
#pragma unroll
                for (int rr = 0; rr < R; rr++) acc[k][rr] += scaled_dot<F>(cur[k][rr], xv, xs);
        } else {
#pragma unroll
            for (int k = 0; k < NM; k++)
#pragma unroll
                for (int rr = 0; rr < R; rr++) acc[k][rr] += F::dot_raw(cur[k][rr], xv, xs);
        }
#pragma unroll
        for (int k = 0; k < NM; k++)
#pragma unroll
            for (int rr = 0; rr < R; rr++) cur[k][rr] = nxt[k][rr];
    }
    mxg_grid_release();  // the next dependent kernel may start loading its weights
#pragma unroll
    for (int k = 0; k < NM; k++)
#pragma unroll
        for (int rr = 0; rr < R; rr++) acc[k][rr] = warp_sum<W>(acc[k][rr]);
    if (ksplit > 1) {  // the first warp of each row group adds the other warps' partial sums
        float *part = (float *)(xs4 + n4);  // [warps][NM][R]
        if (lane == 0) {
#pragma unroll
            for (int k = 0; k < NM; k++)
#pragma unroll
                for (int rr = 0; rr < R; rr++) part[(warp * NM + k) * R + rr] = acc[k][rr];
        }
        __syncthreads();
        if (kpart != 0 || !active) return;
        for (int j = 1; j < ksplit; j++)
#pragma unroll
            for (int k = 0; k < NM; k++)
#pragma unroll
                for (int rr = 0; rr < R; rr++) acc[k][rr] += part[((warp + j) * NM + k) * R + rr];
    }
    if constexpr (EPI == EPI_RESIDUAL_EARLY) {  // lane rr writes row r0 + rr (every lane holds every sum)
        float *out = mi == 0 ? a.out[0] : mi == 1 ? a.out[1] : a.out[2];
        if (active) res_early_store<R>(out, a.res, m.rows, r0, lane, held, [&](int rr) { return acc[0][rr]; });
    } else {
#pragma unroll
        for (int rr = 0; rr < R; rr++) {
            const int64_t r = r0 + rr;
            float s[NM];
#pragma unroll
            for (int k = 0; k < NM; k++) s[k] = acc[k][rr];
            if (lane != 0 || r >= m.rows) continue;
            if (EPI == EPI_SWIGLU) {
                const float g = s[0] + (a.bias[0] ? a.bias[0][r] : 0.0f);
                const float u = s[1] + (a.bias[1] ? a.bias[1][r] : 0.0f);
                a.out[0][r] = g;
                a.out[1][r] = u;
                a.act[r] = silu_mul(g, u);
            } else {
                const float *bias = mi == 0 ? a.bias[0] : mi == 1 ? a.bias[1] : a.bias[2];
                float *out = mi == 0 ? a.out[0] : mi == 1 ? a.out[1] : a.out[2];
                const float v = s[0] + (bias ? bias[r] : 0.0f);
                out[r] = v;
                if (EPI == EPI_RESIDUAL) a.res[r] += v;
            }
        }
    }
    }
}

bool same_format(const mx_matrix *a, const mx_matrix *b) {
    return a->q.mode == b->q.mode && a->q.bits == b->q.bits && a->q.group_size == b->q.group_size &&
           a->dtype == b->dtype && a->scale_dtype == b->scale_dtype && a->cols == b->cols && a->n_experts == 1 &&
           b->n_experts == 1;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

// The streaming kernel for the pattern: two rows per task (one gate and one up row for SwiGLU).
// False when it declines (format, switch, staging size).
template <int EPI, bool NORM>
bool launch_stream(const mxg_launch *L, const mxg_fused_matvec *f, const mx_matrix *w0) {
    int64_t rows = 0;  // the launch's rows: gate's and up's for SwiGLU
    for (int k = 0; k < f->count; k++) rows += f->w[k]->rows;
    if (!stream_fits(L, w0, f->x, 1, rows)) return false;
    constexpr int NM = EPI == EPI_SWIGLU ? 2 : 1, R = EPI == EPI_SWIGLU ? 1 : 2;
    StreamArgs a = {};
    for (int k = 0; k < f->count; k++) {
        a.m[k] = mat_view(f->w[k]);
        a.out[k] = f->out[k];
        a.bias[k] = f->bias[k];
    }
    a.x = f->x;
    a.n = 1;
    a.norm_w = f->norm_w;
    a.norm_eps = f->norm_eps;
    a.norm_out = f->norm_out;
    a.res = f->res;
    a.act = f->act;
    bool done = false;
    dispatch_fused_format(w0, [&](auto fmt) {
        using F = decltype(fmt);
        if constexpr (Streamed<F, 1>::on) {
            MXG_WARP_DISPATCH(L->warp, (stream_launch<W, F, 1, NM, R, EPI, NORM>(L, a, f->count)));
            done = true;
        }
    });
    return done;
}

// The pattern on fused_matvec_kernel (what the streaming kernel declines).
template <int EPI, bool NORM>
void launch_fused(const mxg_launch *L, const mxg_fused_matvec *f, const mx_matrix *w0) {
    FusedArgs a = {};
    int64_t total_rows = 0;
    for (int k = 0; k < f->count; k++) total_rows += f->w[k]->rows;
    const int warps = kMatvecThreads / L->warp;
    // Four rows per warp when that still gives at least one block per multiprocessor.
    const int64_t grid_rows = EPI == EPI_SWIGLU ? f->w[0]->rows : total_rows;
    const int r = grid_rows / (warps * 4) >= L->sm_count ? 4 : 1;
    const int nm = EPI == EPI_SWIGLU ? 2 : 1;
    const size_t xbytes = (size_t)(w0->cols / 32) * 128, part_bytes = sizeof(float) * warps * nm * r;
    const int ks = matvec_ksplit(L, (grid_rows + warps * r - 1) / (warps * r), (int)(w0->cols / 32), xbytes, part_bytes);
    const int64_t rows_per_block = (int64_t)(warps / ks) * r;
    unsigned blocks = 0;
    for (int k = 0; k < f->count; k++) {
        a.m[k] = mat_view(f->w[k]);
        a.out[k] = f->out[k];
        a.bias[k] = f->bias[k];
        if (EPI != EPI_SWIGLU || k == 0) blocks += (unsigned)((f->w[k]->rows + rows_per_block - 1) / rows_per_block);
        a.block_end[k] = blocks;
    }
    for (int k = f->count; k < 3; k++) a.block_end[k] = blocks;
    a.x = f->x;
    a.norm_w = f->norm_w;
    a.norm_eps = f->norm_eps;
    a.norm_out = f->norm_out;
    a.res = f->res;
    a.act = f->act;
    a.early = L->pdl_early;
    a.prefetch = pdl_warp_budget(L, (int64_t)blocks * (warps / ks));
    const size_t smem = xbytes + (ks > 1 ? part_bytes : 0);
    dispatch_fused_format(w0, [&](auto fmt) {
        using F = decltype(fmt);
        MXG_WARP_DISPATCH(L->warp, {
            if constexpr (Scaled<F>::on) {
                if (!L->matvec_old) {
                    if (r == 4)
                        mxg_launch_dep(fused_matvec_kernel<W, F, 4, EPI, NORM, true>, dim3(blocks), dim3(kMatvecThreads),
                                       smem, (gpuStream_t)L->stream, L->dependent_launch, a, ks);
                    else
                        mxg_launch_dep(fused_matvec_kernel<W, F, 1, EPI, NORM, true>, dim3(blocks), dim3(kMatvecThreads),
                                       smem, (gpuStream_t)L->stream, L->dependent_launch, a, ks);
                    return;
                }
            }
            if (r == 4)
                mxg_launch_dep(fused_matvec_kernel<W, F, 4, EPI, NORM, false>, dim3(blocks), dim3(kMatvecThreads), smem,
                               (gpuStream_t)L->stream, L->dependent_launch, a, ks);
            else
                mxg_launch_dep(fused_matvec_kernel<W, F, 1, EPI, NORM, false>, dim3(blocks), dim3(kMatvecThreads), smem,
                               (gpuStream_t)L->stream, L->dependent_launch, a, ks);
        });
    });
}

template <int EPI, bool NORM>
void launch(const mxg_launch *L, const mxg_fused_matvec *f, const mx_matrix *w0) {
    if (!launch_stream<EPI, NORM>(L, f, w0)) launch_fused<EPI, NORM>(L, f, w0);
}

}  // namespace

extern "C" bool mxg_fused_matvec_ok(const mxg_fused_matvec *f) {
    if (f->count < 1 || f->count > 3 || (f->act && f->count != 2) || (f->act && f->res)) return false;
    const mx_matrix *w0 = f->w[0];
    if (!dispatch_fused_format(w0, [](auto) {}) || !mxg::matvec_fast(w0, f->x)) return false;
    if ((size_t)(w0->cols / 32) * 128 > mxg::kMatvecStageBytes) return false;
    if (f->norm_w && (!aligned16(f->norm_w) || !aligned16(f->norm_out))) return false;
    for (int k = 0; k < f->count; k++) {
        if (!same_format(f->w[k], w0) || !mxg::matvec_fast(f->w[k], f->x)) return false;
        if (f->act && f->w[k]->rows != w0->rows) return false;
    }
    return true;
}

extern "C" void mxg_run_fused_matvec(const mxg_launch *L, const mxg_fused_matvec *f) {
    MX_ASSERT(mxg_fused_matvec_ok(f));
    const mx_matrix *w0 = f->w[0];
    const bool norm = f->norm_w != NULL;
    if (f->act)
        norm ? launch<EPI_SWIGLU, true>(L, f, w0) : launch<EPI_SWIGLU, false>(L, f, w0);
    else if (f->res && L->stream_res_early)  // the default (kernels/matvec_res_early.cuh)
        norm ? launch<EPI_RESIDUAL_EARLY, true>(L, f, w0) : launch<EPI_RESIDUAL_EARLY, false>(L, f, w0);
    else if (f->res)
        norm ? launch<EPI_RESIDUAL, true>(L, f, w0) : launch<EPI_RESIDUAL, false>(L, f, w0);
    else
        norm ? launch<EPI_PLAIN, true>(L, f, w0) : launch<EPI_PLAIN, false>(L, f, w0);
}
