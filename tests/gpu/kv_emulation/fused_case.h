// SPDX-License-Identifier: MIT
// The fused one-token cases of the streaming kernel's emulation tests (test_stream_lean_emulated.cpp,
// test_res_early_emulated.cpp):
// the four fused patterns, the buffers one launch writes, the filling of mxg_fused_matvec for a
// pattern (every written buffer starts as a known fill, so that a buffer left unwritten shows), the
// bitwise comparison of two outputs and the check of a launch's outputs against the double-precision
// reference. Included after emu.h, gpu_ref.h and kernels_fused.h.
#ifndef MXG_TEST_FUSED_CASE_H
#define MXG_TEST_FUSED_CASE_H

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

enum Pattern { PLAIN, NORM_QKV, NORM_GATE_UP, DOWN_RESIDUAL };

struct Run {
    std::vector<float> out[3], h, act, res;
    size_t smem = 0;                    // the dynamic shared memory of the launch
    std::vector<emu_range> prefetches;  // MLXCEL_GPU_PDL=2's L2 prefetches, in order
};

// The launch's arguments for `count` matrices of the pattern, pointing into `u`'s fresh buffers.
static inline mxg_fused_matvec fused_case_args(Run &u, Pattern pat, int count, mx_matrix *w, const int64_t *rws,
                                               const std::vector<float> *bs, bool bias, const std::vector<float> &x,
                                               const std::vector<float> &nw, const std::vector<float> &res0) {
    mxg_fused_matvec f = {};
    f.count = count;
    for (int k = 0; k < count; k++) {
        u.out[k].assign(rws[k], 9.0f);
        f.w[k] = &w[k], f.out[k] = u.out[k].data(), f.bias[k] = bias ? bs[k].data() : NULL;
    }
    f.x = x.data();
    u.h.assign(x.size(), 3.0f);
    if (pat == NORM_QKV || pat == NORM_GATE_UP) f.norm_w = nw.data(), f.norm_eps = 1e-6f, f.norm_out = u.h.data();
    if (pat == NORM_GATE_UP) u.act.assign(rws[0], 4.0f), f.act = u.act.data();
    if (pat == DOWN_RESIDUAL) u.res = res0, f.res = u.res.data();
    return f;
}

static inline bool same(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// How far the outputs out[k] of `count` matrices are from the double-precision reference of act_in
// times each (tests/gpu/gpu_ref.c): within when every output lies inside its float32 bound, worst the
// largest error as a share of its bound.
struct RefCheck {
    bool within = true;
    double worst = 0.0;
};

static inline RefCheck fused_case_ref_check(const std::vector<float> *out, int count, const mx_matrix *w,
                                            const int64_t *rws, const std::vector<float> *bs, bool bias,
                                            const float *act_in, int64_t cols) {
    RefCheck c;
    for (int k = 0; k < count; k++) {
        std::vector<float> ref(rws[k]);
        std::vector<ref_scale> sc(rws[k]);
        ref_matmul(ref.data(), sc.data(), act_in, &w[k], bias ? bs[k].data() : NULL, 1, false);
        for (int64_t r = 0; r < rws[k]; r++) {
            const double bound = (double)(cols + 16) / 16777216.0 * sc[r].eval;
            const double err = fabs((double)out[k][r] - ref[r]);
            c.worst = std::max(c.worst, err / bound);
            c.within = c.within && err <= bound;
        }
    }
    return c;
}

#endif
