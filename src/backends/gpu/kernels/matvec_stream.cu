// SPDX-License-Identifier: MIT
// One matmul record of 1-8 tokens on the streaming matrix-vector kernel (kernels/matvec_stream.cuh):
// the tokens go in one launch as NT = 1, 2, 4 or 8 staged rows (rows past n repeat the last token
// and are not written), two output rows per task for one token (four over long rows by default,
// MLXCEL_GPU_STREAM_ROWS; more over short rows), one for several. Declines (returns false, the caller uses
// kernels/matvec.cuh) formats other than affine 4/8-bit and mxfp4, odd shapes, and token rows that
// do not fit the staging.
#include "backends/gpu/kernels/matvec_stream.cuh"

namespace mxg {

namespace {

template <int NT>
bool launch_nt(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    if (!stream_fits(L, w, x, NT, w->rows)) return false;
    StreamArgs a = {};
    a.m[0] = mat_view(w);
    a.out[0] = out;
    a.bias[0] = bias;
    // Two rows per task for one token; one for several, whose codes (masked once, used for every
    // token) and activation rows would not fit the registers twice.
    constexpr int R = NT == 1 ? 2 : 1;
    a.x = x;
    a.n = n;
    bool done = false;
    dispatch_format(w, [&](auto fmt) {
        using F = decltype(fmt);
        if constexpr (Streamed<F, NT>::on) {
            MXG_WARP_DISPATCH(L->warp, (stream_launch<W, F, NT, 1, R, EPI_PLAIN, false>(L, a, 1)));
            done = true;
        }
    });
    return done;
}

}  // namespace

bool matvec_stream(const mxg_launch *L, float *out, const float *x, const mx_matrix *w, const float *bias, int n) {
    if (n < 1 || n > 8 || w->n_experts != 1) return false;
    if (n == 1) return launch_nt<1>(L, out, x, w, bias, n);
    if (n == 2) return launch_nt<2>(L, out, x, w, bias, n);
    if (n <= 4) return launch_nt<4>(L, out, x, w, bias, n);
    return launch_nt<8>(L, out, x, w, bias, n);
}

}  // namespace mxg
