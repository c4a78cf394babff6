// SPDX-License-Identifier: MIT
// logsumexp (see logsumexp.h). The vector exponential reduces x = k*ln2 + r with |r| <= ln2/2 and
// evaluates e^r with a degree-6 polynomial, then scales by 2^k through the exponent bits. Inputs
// are max-subtracted (all <= 0); anything below -87 contributes nothing at float precision.
#include "core/logsumexp.h"

#include <math.h>

#include "core/avx2_target.h"

static float max_of(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

double mx_logsumexp_ref(const float *x, int64_t n) {
    float m = max_of(x, n);
    if (!isfinite(m)) return m;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

// Elements [from, n) of mx_exp_sum one at a time, added to s in order: the whole job without AVX2,
// the tail after the vector loop with it.
static double exp_sum_scalar(const float *x, int64_t from, int64_t n, float shift, float scale, float *out, double s) {
    for (int64_t i = from; i < n; i++) {
        float t = (x[i] - shift) * scale;
        out[i] = t < -87.0f ? 0.0f : expf(t);
        s += out[i];
    }
    return s;
}

#if defined(__x86_64__)
#include <immintrin.h>

// e^v for eight v in [-87, 0] (see the top of the file).
MX_TARGET_AVX2 static inline __m256 avx2_exp(__m256 v) {
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f), ln2_hi = _mm256_set1_ps(0.693359375f),
                 ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
    const __m256 c1 = _mm256_set1_ps(1.0f), c2 = _mm256_set1_ps(0.5f), c3 = _mm256_set1_ps(1.66666666e-1f),
                 c4 = _mm256_set1_ps(4.16666667e-2f), c5 = _mm256_set1_ps(8.33333333e-3f),
                 c6 = _mm256_set1_ps(1.38888889e-3f);
    __m256 k = _mm256_round_ps(_mm256_mul_ps(v, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, ln2_hi, v);
    r = _mm256_fnmadd_ps(k, ln2_lo, r);
    __m256 p = _mm256_fmadd_ps(c6, r, c5);
    p = _mm256_fmadd_ps(p, r, c4);
    p = _mm256_fmadd_ps(p, r, c3);
    p = _mm256_fmadd_ps(p, r, c2);
    p = _mm256_fmadd_ps(p, r, c1);
    p = _mm256_fmadd_ps(p, r, c1);
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Adds the eight floats of ex to two double accumulators (low and high halves).
MX_TARGET_AVX2 static inline void avx2_accumulate(__m256d *acc0, __m256d *acc1, __m256 ex) {
    *acc0 = _mm256_add_pd(*acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(ex)));
    *acc1 = _mm256_add_pd(*acc1, _mm256_cvtps_pd(_mm256_extractf128_ps(ex, 1)));
}

MX_TARGET_AVX2 static inline double avx2_total(__m256d acc0, __m256d acc1) {
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(acc0, acc1));
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

MX_TARGET_AVX2 static double avx2_logsumexp(const float *x, int64_t n) {
    float m = max_of(x, n);
    if (!isfinite(m)) return m;
    const __m256 vm = _mm256_set1_ps(m), lo = _mm256_set1_ps(-87.0f);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    int64_t i = 0;
    // max(lo, v): a NaN v stays NaN (maxps returns its second operand when one is NaN), so a NaN
    // makes the sum NaN wherever it stands, as in the scalar loop and mx_logsumexp_ref.
    for (; i + 8 <= n; i += 8)
        avx2_accumulate(&acc0, &acc1, avx2_exp(_mm256_max_ps(lo, _mm256_sub_ps(_mm256_loadu_ps(x + i), vm))));
    double s = avx2_total(acc0, acc1);
    for (; i < n; i++) s += exp((double)x[i] - m);
    return m + log(s);
}

MX_TARGET_AVX2 static double avx2_exp_sum(const float *x, int64_t n, float shift, float scale, float *out) {
    const __m256 vs = _mm256_set1_ps(shift), vsc = _mm256_set1_ps(scale), lo = _mm256_set1_ps(-87.0f);
    __m256d acc0 = _mm256_setzero_pd(), acc1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 raw = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs), vsc);
        __m256 under = _mm256_cmp_ps(raw, lo, _CMP_LT_OQ);
        __m256 ex = _mm256_andnot_ps(under, avx2_exp(_mm256_max_ps(raw, lo)));
        _mm256_storeu_ps(out + i, ex);
        avx2_accumulate(&acc0, &acc1, ex);
    }
    return exp_sum_scalar(x, i, n, shift, scale, out, avx2_total(acc0, acc1));
}

double mx_exp_sum(const float *x, int64_t n, float shift, float scale, float *out) {
    return mx_cpu_has_avx2() ? avx2_exp_sum(x, n, shift, scale, out) : exp_sum_scalar(x, 0, n, shift, scale, out, 0.0);
}

double mx_logsumexp(const float *x, int64_t n) {
    return mx_cpu_has_avx2() ? avx2_logsumexp(x, n) : mx_logsumexp_ref(x, n);
}
#else
double mx_logsumexp(const float *x, int64_t n) { return mx_logsumexp_ref(x, n); }

double mx_exp_sum(const float *x, int64_t n, float shift, float scale, float *out) {
    return exp_sum_scalar(x, 0, n, shift, scale, out, 0.0);
}
#endif
