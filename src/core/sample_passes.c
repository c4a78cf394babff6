// SPDX-License-Identifier: MIT
// The host token choice's best-token and threshold passes, scalar and AVX2 (see sample_passes.h).
// The AVX2 best-token pass takes two reads of the row (the maximum, then its first place) instead of
// a compare-and-branch per logit; both sets keep the scalar pass's order of additions for the mass.
#include "core/sample_passes.h"

#include <math.h>
#include <stddef.h>

#include "core/avx2_target.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static int32_t best_token_scalar(float *l, int vocab) {
    if (isnan(l[0])) l[0] = -INFINITY;
    int32_t best = 0;
    float best_v = l[0];  // in a register: reading l[best] after the store to l[i] waits on memory
    for (int i = 1; i < vocab; i++) {
        float v = l[i];
        if (isnan(v)) l[i] = v = -INFINITY;
        if (v > best_v) best_v = v, best = i;
    }
    return best;
}

static int collect_scalar(const float *l, const float *e, int vocab, float t0, int32_t *cand, double *mass) {
    int nc = 0;
    double s = 0.0;
    for (int i = 0; i < vocab; i++)
        if (l[i] >= t0) cand[nc++] = i, s += e[i];
    *mass = s;
    return nc;
}

static const mx_sample_passes scalar_passes = {
    /* .name = */ "scalar",
    /* .best_token = */ best_token_scalar,
    /* .collect = */ collect_scalar,
};

const mx_sample_passes *mx_sample_passes_scalar(void) { return &scalar_passes; }

#if defined(__x86_64__)
// One pass for the NaNs and the maximum, one for its first place (a compare per 8 logits). Equal
// values compare equal whatever their sign (+0 == -0), so the first place is the scalar pass's.
MX_TARGET_AVX2 static int32_t best_token_avx2(float *l, int vocab) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 mx = ninf;
    int i = 0;
    for (; i + 8 <= vocab; i += 8) {
        __m256 v = _mm256_loadu_ps(l + i), nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        if (_mm256_movemask_ps(nan)) {
            v = _mm256_blendv_ps(v, ninf, nan);
            _mm256_storeu_ps(l + i, v);
        }
        mx = _mm256_max_ps(mx, v);
    }
    float lanes[8], m = -INFINITY;
    _mm256_storeu_ps(lanes, mx);
    for (int k = 0; k < 8; k++) m = lanes[k] > m ? lanes[k] : m;
    for (int k = i; k < vocab; k++) {
        if (isnan(l[k])) l[k] = -INFINITY;
        m = l[k] > m ? l[k] : m;
    }
    const __m256 vm = _mm256_set1_ps(m);  // -inf when every logit is: token 0, as the scalar pass
    for (i = 0; i + 8 <= vocab; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), vm, _CMP_EQ_OQ));
        if (hit) return i + __builtin_ctz((unsigned)hit);
    }
    for (; i < vocab; i++)
        if (l[i] == m) return i;
    return 0;
}

MX_TARGET_AVX2 static int collect_avx2(const float *l, const float *e, int vocab, float t0, int32_t *cand,
                                       double *mass) {
    const __m256 vt = _mm256_set1_ps(t0);
    int nc = 0, i = 0;
    double s = 0.0;
    for (; i + 8 <= vocab; i += 8) {
        unsigned hit = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(l + i), vt, _CMP_GE_OQ));
        for (; hit; hit &= hit - 1) {
            int j = i + __builtin_ctz(hit);
            cand[nc++] = j, s += e[j];
        }
    }
    for (; i < vocab; i++)
        if (l[i] >= t0) cand[nc++] = i, s += e[i];
    *mass = s;
    return nc;
}

static const mx_sample_passes avx2_passes = {
    /* .name = */ "avx2",
    /* .best_token = */ best_token_avx2,
    /* .collect = */ collect_avx2,
};

const mx_sample_passes *mx_sample_passes_avx2(void) { return mx_cpu_has_avx2() ? &avx2_passes : NULL; }
#else
const mx_sample_passes *mx_sample_passes_avx2(void) { return NULL; }
#endif

const mx_sample_passes *mx_sample_passes_host(void) {
    const mx_sample_passes *v = mx_sample_passes_avx2();
    return v ? v : &scalar_passes;
}
