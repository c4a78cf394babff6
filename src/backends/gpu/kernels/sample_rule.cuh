// SPDX-License-Identifier: MIT
// The arithmetic of the device token choice (core/sample_rows.h) that both kernel forms share:
// kernels/sample.cu (one block per row) and kernels/sample_split.cu (a row's vocabulary split over
// many blocks, with its fast form in kernels/sample_fast.cu). Keys, fixed-point weights, a radix
// pass's choice of bin, the filters' threshold and the draw's run masses and walks live here once,
// so the two forms choose the same token from the same logits and noise, bit for bit
// (tests/gpu/sample_emulation checks it on the host).
// The draw splits the vocabulary into kDrawRuns contiguous id runs whatever the form: a run's mass
// is a float sum in id order, a group of 32 runs' a sum in run order, the total a sum of the groups
// in order, so the order of every float addition of the draw is fixed by the vocabulary size alone.
#ifndef MXG_KERNELS_SAMPLE_RULE_CUH
#define MXG_KERNELS_SAMPLE_RULE_CUH

#include <math.h>

#include "backends/gpu/common.cuh"
#include "backends/gpu/kernels/max_key.cuh"
#include "core/sample_noise.h"
#include "core/sample_rows.h"

namespace sample_rule {

constexpr int kBins = 256;                      // radix digit of 8 bits: passes at bits 24, 16, 8, 0
constexpr int kPasses = 4;
constexpr int kCopies = 8;                      // histogram copies in shared memory (by warp)
constexpr int kDrawRuns = 1024;                 // contiguous id runs of the draw
constexpr int kDrawGroups = 32, kGroupRuns = kDrawRuns / kDrawGroups;  // the walk's two levels
constexpr float kFixedOne = 1099511627776.0f;  // 2^40: the fixed-point unit of a mass

__device__ __forceinline__ bool allowed_at(const uint32_t *mask, int i) {
    return !mask || ((mask[i >> 5] >> (i & 31)) & 1u);
}

// A candidate's weight in the top-p histograms: exp(l - m) in fixed point (the fast exponential: a
// threshold's weights need no more than float precision; the same expression in both forms).
__device__ __forceinline__ unsigned long long mass_weight(float v, float m) {
    return (unsigned long long)(__expf(v - m) * kFixedOne);
}

// Where a selection stands between radix passes: the bits chosen so far, the weight of the
// candidates above the current bin range, and the target.
struct RadixState {
    uint32_t prefix;
    unsigned long long above, want;
};

// The lowest logit that no filter cuts below: the margin under the best allowed logit m.
__device__ __forceinline__ float margin_floor(const mx_sample_row &r, float m) { return m - 40.0f * fmaxf(1.0f, r.temp); }
__device__ __forceinline__ bool by_top_k(const mx_sample_row &r) { return r.top_k > 0; }
__device__ __forceinline__ bool by_top_p(const mx_sample_row &r) { return r.top_p > 0.0f && r.top_p < 1.0f; }

// The kept tokens' threshold from the radix selections' final prefixes (each used only when its
// filter is on) and min-p; fmaxf of exact values, so the order does not matter.
__device__ __forceinline__ float filter_threshold(const mx_sample_row &r, float m, uint32_t k_prefix, uint32_t p_prefix) {
    float thr = -INFINITY;
    if (r.min_p > 0.0f) thr = fmaxf(thr, m + logf(r.min_p));
    if (by_top_k(r)) thr = fmaxf(thr, mx_order_value(k_prefix));
    if (by_top_p(r)) thr = fmaxf(thr, mx_order_value(p_prefix));
    return fmaxf(thr, margin_floor(r, m));
}

// The ids of draw run t: [*i0, *i1).
__device__ __forceinline__ void draw_run(int vocab, int t, int *i0, int *i1) {
    const int per = (vocab + kDrawRuns - 1) / kDrawRuns;
    *i0 = t * per < vocab ? t * per : vocab;
    *i1 = *i0 + per < vocab ? *i0 + per : vocab;
}

// The draw weight of the kept tokens of one run, summed in id order.
__device__ __forceinline__ float run_mass(const float *l, int i0, int i1, float thr, const uint32_t *mask, float m,
                                          float inv_t) {
    float part = 0.0f;
    for (int i = i0; i < i1; i++)
        if (l[i] >= thr && allowed_at(mask, i)) part += expf((l[i] - m) * inv_t);
    return part;
}

// The run where u times the runs' total falls (-1: no kept token) and the weight left to walk in it
// (+inf: take the run's last kept token, where rounding leaves the target unreached). Two levels, so
// no thread walks more than 32 values in sequence: each group of 32 runs' mass (a sum in run order,
// one thread per group), the total (a sum of the groups in order), the walk over the groups, then
// within the chosen group. Every thread of the block calls it (it has a barrier); thread 0 gets the
// result. gsum: kDrawGroups floats of shared memory.
__device__ __forceinline__ int parts_pick(const float *parts, float u, float *rest, float *gsum) {
    const int tid = threadIdx.x;
    if (tid < kDrawGroups) {
        float sum = 0.0f;
        for (int t = tid * kGroupRuns; t < (tid + 1) * kGroupRuns; t++) sum += parts[t];
        gsum[tid] = sum;
    }
    __syncthreads();
    int owner = -1;
    if (tid == 0) {
        float total = 0.0f;
        for (int j = 0; j < kDrawGroups; j++) total += gsum[j];
        const float target = u * total;
        float acc = 0.0f;
        int group = -1;
        bool reached = false;
        for (int j = 0; j < kDrawGroups && !reached; j++) {
            if (gsum[j] <= 0.0f) continue;
            group = j;
            if (acc + gsum[j] > target) reached = true;
            else acc += gsum[j];
        }
        if (group >= 0) {
            const float left = target - acc;
            float in = 0.0f;
            bool passed = false;
            for (int t = group * kGroupRuns; t < (group + 1) * kGroupRuns && !passed; t++) {
                if (parts[t] <= 0.0f) continue;
                owner = t;
                if (reached && in + parts[t] > left) passed = true;
                else in += parts[t];
            }
            *rest = passed ? left - in : INFINITY;
        }
    }
    return owner;
}

// The token of a run where the running weight passes `rest` (its last kept token if rounding leaves
// rest unreached); -1 when the run keeps none.
__device__ __forceinline__ int run_pick(const float *l, int i0, int i1, float thr, const uint32_t *mask, float m,
                                        float inv_t, float rest) {
    float acc = 0.0f;
    int last = -1;
    for (int i = i0; i < i1; i++) {
        if (!(l[i] >= thr) || !allowed_at(mask, i)) continue;
        last = i;
        acc += expf((l[i] - m) * inv_t);
        if (acc > rest) break;
    }
    return last;
}

// The chosen token's raw logit: its edited logit with the row's edit undone (exact up to rounding).
__device__ __forceinline__ float raw_logit(float x, int32_t id, const mx_logit_mod *md, int n_mod) {
    for (int k = 0; k < n_mod; k++)
        if (md[k].id == id) {
            float y = x + md[k].sub;
            y = y > 0.0f ? y * md[k].rep : y / md[k].rep;
            x = y - md[k].bias;
        }
    return x;
}

// One edit, in place (ids are distinct within a row).
__device__ __forceinline__ void apply_edit(float *l, const mx_logit_mod &e) {
    float x = l[e.id] + e.bias;
    x = x > 0.0f ? x / e.rep : x * e.rep;
    l[e.id] = x - e.sub;
}

}  // namespace sample_rule

#endif
