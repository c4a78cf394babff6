// SPDX-License-Identifier: MIT
// Token choice on the device (backend.h `sample`), the rule of core/sample_rows.h whose host
// implementation (src/core/sample_rows.c) is the reference, each row with its own parameters,
// edits, allowed-token mask and logprob request, all read from device memory so a recorded graph
// replays with new values. Two forms of one computation (the shared arithmetic is in
// sample_rule.cuh): this file's kernel runs one block per row; kernels/sample_split.cu splits each
// row's vocabulary over many blocks, for batches too small to fill the device (mxg_sample picks,
// see mxg_sample_split_blocks). Steps per row: raw log-softmax and the top alternatives (repeated
// block-wide maxima), the sparse edits in place, the best allowed token, and for sampled rows the
// filters as one threshold on the logits followed by one uniform draw (src/core/sample_noise.h)
// walking the kept tokens' weights in id order (inverse CDF). The chosen token's raw logit, when an
// edit touched it, is recovered by inverting the edit (exact up to float rounding).
// Thresholds (top-k: the k-th largest candidate; top-p: where the mass from the top reaches p) are
// found by radix selection over the 32-bit float order, 8 bits a pass from the top: 4 passes over
// the row, no sort. A pass histograms the weights of the candidates whose higher bits match the
// prefix chosen so far, into 256 bins in shared memory (kCopies copies, so fewer threads collide on
// one bin), and the scan from the top bin picks the bin where the running weight reaches the target.
// Weights are summed as 64-bit fixed point (exp(l - max) times 2^40, or 1 per candidate for
// counts): integer sums do not depend on the order of the atomic adds, so a row's threshold, and so
// its token, is the same on every run, and a bin's weight is exactly the sum of its sub-bins'.
#include "backends/gpu/kernels/sample_rule.cuh"
#include "backends/gpu/kernels_sample.h"

namespace {

using namespace sample_rule;

constexpr int kThreads = 1024;
static_assert(kThreads == kDrawRuns, "one draw run per thread");

// Shared memory of the radix selection.
struct RadixScratch {
    unsigned long long hist[kCopies][kBins];
    unsigned long long bins[kBins];
    unsigned long long want, above;
    uint32_t prefix;
};

// The largest order key t such that the weight of the candidates (allowed, l >= lo_v) with keys >= t
// reaches the target: with MASS the weight is exp(l - m) and the target `frac` of the candidates'
// total mass (top-p), else the weight is 1 and the target `count` (top-k). Radix selection, 8 bits a
// pass (see the top of the file).
template <int W, bool MASS>
__device__ uint32_t radix_threshold(const float *l, int vocab, const uint32_t *mask, float lo_v, float m, float frac,
                                    unsigned long long count, RadixScratch *rs) {
    const int tid = threadIdx.x, copy = (tid / W) % kCopies;
    uint32_t prefix = 0;
    unsigned long long above = 0, want = count;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < kCopies * kBins; i += blockDim.x) (&rs->hist[0][0])[i] = 0ull;
        __syncthreads();
        for (int i = tid; i < vocab; i += blockDim.x) {
            const float v = l[i];
            if (!(v >= lo_v) || !allowed_at(mask, i)) continue;
            const uint32_t key = mx_order_key(v);
            if (shift < 24 && (key >> (shift + 8)) != (prefix >> (shift + 8))) continue;
            const unsigned long long w = MASS ? mass_weight(v, m) : 1ull;
            if (w) atomicAdd(&rs->hist[copy][(key >> shift) & (kBins - 1)], w);
        }
        __syncthreads();
        for (int b = tid; b < kBins; b += blockDim.x) {
            unsigned long long sum = 0;
            for (int c = 0; c < kCopies; c++) sum += rs->hist[c][b];
            rs->bins[b] = sum;
        }
        __syncthreads();
        if (tid == 0) {
            if (MASS && shift == 24) {  // the target from the total, in the same fixed point
                unsigned long long total = 0;
                for (int b = 0; b < kBins; b++) total += rs->bins[b];
                want = (unsigned long long)((double)total * (double)frac);
                if (want == 0) want = 1;
            }
            int b = kBins - 1, lowest = -1;
            unsigned long long acc = above;
            for (; b >= 0; b--) {
                if (rs->bins[b] > 0) lowest = b;
                if (acc + rs->bins[b] >= want) break;
                acc += rs->bins[b];
            }
            if (b < 0) {  // the candidates do not reach the target: keep them all
                b = lowest < 0 ? 0 : lowest;
                acc -= rs->bins[b];
            }
            rs->prefix = prefix | ((uint32_t)b << shift);
            rs->above = acc;
            rs->want = want;
        }
        __syncthreads();
        prefix = rs->prefix;
        above = rs->above;
        want = rs->want;
        __syncthreads();  // rs is rewritten by the next pass
    }
    return prefix;
}

template <int W>
__global__ void __launch_bounds__(kThreads) choose_kernel(mx_sample_out *out, float *logits, int vocab,
                                                          const mx_sample_row *__restrict__ rows,
                                                          const mx_logit_mod *__restrict__ mods, bool rest) {
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
    __shared__ float fs[kThreads / 32];
    __shared__ unsigned long long ks[kThreads / 32];
    __shared__ float parts[kThreads], gsum[kDrawGroups];
    __shared__ int pick_owner, pick_id;
    __shared__ float pick_rest;
    __shared__ RadixScratch rs;
    float *l = logits + (int64_t)blockIdx.x * vocab;
    const mx_sample_row r = rows[blockIdx.x];
    mx_sample_out *o = out + blockIdx.x;
    const int tid = threadIdx.x;

    // 1. Raw logprobs.
    float lse = 0.0f;
    if (r.n_top >= 0) {
        float m = -INFINITY;
        for (int i = tid; i < vocab; i += blockDim.x) m = fmaxf(m, l[i]);
        m = block_max<W>(m, fs);
        float z = 0.0f;
        for (int i = tid; i < vocab; i += blockDim.x) z += expf(l[i] - m);
        lse = m + logf(block_sum<W>(z, fs));
        const int n_top = r.n_top > MX_SAMPLE_MAX_TOP ? MX_SAMPLE_MAX_TOP : r.n_top;
        unsigned long long prev = ~0ull;
        for (int k = 0; k < n_top; k++) {
            unsigned long long best = 0;
            for (int i = tid; i < vocab; i += blockDim.x) {
                const unsigned long long key = pick_key(l[i], i);
                if (key < prev && key > best) best = key;
            }
            best = block_max_key<W>(best, ks);
            if (tid == 0) {
                o->top_id[k] = key_index(best);
                o->top_logprob[k] = l[key_index(best)] - lse;
            }
            prev = best;
        }
        if (tid == 0) o->n_top = n_top;
    } else if (tid == 0) {
        o->n_top = 0;
    }
    __syncthreads();

    // 2. Edits, in place (ids are distinct within a row).
    const mx_logit_mod *md = mods ? mods + r.mod_off : nullptr;
    const int n_mod = md ? r.n_mod : 0;
    for (int k = tid; k < n_mod; k += blockDim.x) {
        const mx_logit_mod e = md[k];
        if (e.id >= 0 && e.id < vocab) apply_edit(l, e);
    }
    __syncthreads();

    // 3. The best allowed token; without any allowed token the mask is ignored.
    const uint32_t *mask = r.allowed;
    unsigned long long best = 0;
    for (int i = tid; i < vocab; i += blockDim.x)
        if (allowed_at(mask, i)) {
            const unsigned long long key = pick_key(l[i], i);
            best = key > best ? key : best;
        }
    best = block_max_key<W>(best, ks);
    if (best == 0) {
        mask = nullptr;
        for (int i = tid; i < vocab; i += blockDim.x) {
            const unsigned long long key = pick_key(l[i], i);
            best = key > best ? key : best;
        }
        best = block_max_key<W>(best, ks);
    }
    int32_t chosen = key_index(best);
    const float m = l[chosen];

    // 4. Sampled rows: filters over the candidates (allowed, within the margin of the best), then
    // an inverse-CDF draw over the kept ones.
    if (r.temp > 0.0f && isfinite(m)) {
        const float lo_v = margin_floor(r, m);
        // Largest t with count(l >= t) >= k (k at least the candidates: their smallest, keeping all).
        const uint32_t k_prefix =
            by_top_k(r) ? radix_threshold<W, false>(l, vocab, mask, lo_v, m, 0.0f, (unsigned long long)r.top_k, &rs) : 0u;
        // Largest t with mass(l >= t) >= top_p times the candidates' mass.
        const uint32_t p_prefix = by_top_p(r) ? radix_threshold<W, true>(l, vocab, mask, lo_v, m, r.top_p, 0ull, &rs) : 0u;
        const float thr = filter_threshold(r, m, k_prefix, p_prefix);
        // Inverse CDF in id order: each thread owns one draw run; thread 0 finds the run where
        // u * total falls (parts_pick), and that run's thread finds the token.
        const float inv_t = 1.0f / r.temp;
        int i0, i1;
        draw_run(vocab, tid, &i0, &i1);
        parts[tid] = run_mass(l, i0, i1, thr, mask, m, inv_t);
        __syncthreads();
        float rest = 0.0f;
        const int owner = parts_pick(parts, mx_uniform_noise(r.seed, r.pos), &rest, gsum);
        if (tid == 0) pick_owner = owner, pick_rest = rest;
        __syncthreads();
        if (tid == pick_owner) {
            const int last = run_pick(l, i0, i1, thr, mask, m, inv_t, pick_rest);
            if (last >= 0) pick_id = last;
        } else if (tid == 0 && pick_owner < 0) {
            pick_id = chosen;
        }
        __syncthreads();
        chosen = pick_id;
    }

    if (tid == 0) {
        o->id = chosen;
        if (r.n_top >= 0) o->logprob = raw_logit(l[chosen], chosen, md, n_mod) - lse;
    }
}

}  // namespace

extern "C" int mxg_sample_split_blocks(const mxg_launch *L, int n, int vocab) {
    if (n <= 0 || n > L->sm_count || L->sample_blocks < 2 || !L->sample_scratch ||
        L->sample_scratch_bytes < mxg_sample_split_row_bytes())
        return 1;
    // Four 256-thread blocks per multiprocessor in all: the threads per multiprocessor of one
    // 1,024-thread block, so a batch of one row per multiprocessor costs what the one-block form does.
    int g = 4 * L->sm_count / n;
    if (g > L->sample_blocks) g = L->sample_blocks;
    if (g > vocab / 1024) g = vocab / 1024;  // a block's slice at least 1024 tokens
    if (g > MXG_SAMPLE_MAX_BLOCKS) g = MXG_SAMPLE_MAX_BLOCKS;
    return g < 2 ? 1 : g;
}

extern "C" void mxg_sample(const mxg_launch *L, mx_sample_out *out, float *logits, int n, int vocab,
                           const mx_sample_row *rows, const mx_logit_mod *mods) {
    if (n <= 0) return;
    const int blocks = mxg_sample_split_blocks(L, n, vocab);
    if (blocks >= 2) {
        mxg_sample_split(L, out, logits, n, vocab, rows, mods, blocks);
        return;
    }
    MXG_WARP_DISPATCH(L->warp, {
        mxg_launch_dep(choose_kernel<W>, dim3((unsigned)n), dim3(kThreads), 0, (gpuStream_t)L->stream, L->pdl_rest, out,
                       logits, vocab, rows, mods, L->pdl_rest);
    });
}
