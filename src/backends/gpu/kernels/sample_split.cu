// SPDX-License-Identifier: MIT
// The device token choice with each row's vocabulary split over many blocks (backend.h `sample` for
// batches too small to fill the device; kernels/sample.cu holds the one-block form and mxg_sample
// picks). The same rule and arithmetic as the one-block kernel (sample_rule.cuh), in seven launches
// per group of rows, each block reading only its slice of the row except where noted:
//   1. stats: each slice's raw max and sum of exp(l - max), its best raw keys (top alternatives),
//      the edits of the slice's ids in place, its best allowed and best key; it also clears the
//      row's radix histograms;
//   2-5. radix pass p (bits 31-24, 23-16, 15-8, 7-0): every block first takes pass p - 1's choice
//      of bin from the row's histograms (a parallel scan of integer sums: the bin the one-block
//      kernel's serial scan picks), then adds its slice's candidates into pass p's row histograms
//      (top-k counts and top-p fixed-point masses, both selections in one read of the slice): a
//      block's shared histogram, then 64-bit atomic adds to the row's; integer sums, so the totals do
//      not depend on the order of the adds across blocks either;
//   6. draw: the last pass's choice, the threshold, and the mass of each of the 1,024 draw runs;
//   7. finish (one block per row): log-softmax and top alternatives from the slices' partials, the
//      run where the uniform number falls and the token in it, the output record.
// Blocks hand results to the next launch through SplitRow records in L->sample_scratch; no block
// waits for another, so the launches are ordinary kernels a graph records, with every parameter
// read from device memory. At MLXCEL_GPU_PDL=3 (L->pdl_rest; the fast form's launches too) each is a
// dependent launch whose grid wait comes first, before any read of the logits or the records, with
// the release right after it, so the next launch's blocks are resident while this one runs; levels
// 0-2 launch them plainly. The logsumexp merges slices (max and rescaled sums), so logprobs match
// the one-block kernel to float rounding (NaN in both when a logit is NaN, as in the host rule);
// tokens, thresholds and top ids are the same bit for bit.
// The fast form (kernels/sample_fast.cu; L->sample_fast, MLXCEL_GPU_SAMPLE_FAST, on by default)
// adds four launches after stats that take most sampled rows' thresholds (and draw runs) from a
// short list of keys instead; the radix passes, and the draw for rows it settled in full, return at
// once for those rows (FastRow::status). The records and helpers both files use are in
// sample_split.cuh.
#include "backends/gpu/kernels/sample_split.cuh"

#include <string.h>

namespace {

using namespace sample_rule;
using namespace sample_split;

// One radix pass's choice of bin from the row's histogram `bins` (written by an earlier launch), as
// the one-block kernel's serial scan makes it: the largest bin b with above + weight(bins >= b) >=
// want, or, when all of them fall short, the lowest non-empty bin (every candidate kept). With
// first_mass (pass 0 of top-p) the target is first set to frac of the total. Suffix sums of 64-bit
// integers, so the parallel scan gives the serial one's numbers exactly. blockDim.x == kBins; every
// thread gets the new state.
__device__ RadixState radix_advance(const unsigned long long *bins, RadixState st, int shift, bool first_mass,
                                    float frac, unsigned long long *sums, RadixState *out) {
    const int t = threadIdx.x;
    const unsigned long long mine = bins[t];
    sums[t] = mine;
    __syncthreads();
    for (int o = 1; o < kBins; o <<= 1) {  // sums[t] = bins[t] + ... + bins[kBins - 1]
        const unsigned long long add = t + o < kBins ? sums[t + o] : 0ull;
        __syncthreads();
        sums[t] += add;
        __syncthreads();
    }
    const unsigned long long total = sums[0];
    unsigned long long want = st.want;
    if (first_mass) {
        want = (unsigned long long)((double)total * (double)frac);
        if (want == 0) want = 1;
    }
    bool owner;
    if (st.above + total >= want)  // the bin where the running weight from the top reaches want
        owner = st.above + sums[t] >= want && !(t + 1 < kBins && st.above + sums[t + 1] >= want);
    else  // short of the target: the lowest non-empty bin (bin 0 when all are empty)
        owner = total == 0 ? t == 0 : mine > 0 && sums[t] == total;
    if (owner) *out = RadixState{st.prefix | ((uint32_t)t << shift), st.above + (sums[t] - mine), want};
    __syncthreads();
    const RadixState next = *out;
    __syncthreads();  // sums and out are reused by the next scan
    return next;
}

// 1. Raw statistics, edits and best keys of each slice.
template <int W>
__global__ void __launch_bounds__(kSplitThreads) split_stats(float *logits, int vocab, const mx_sample_row *__restrict__ rows,
                                                             const mx_logit_mod *__restrict__ mods, SplitRow *scratch, bool rest) {
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
    __shared__ float fs[kSplitThreads / 32];
    __shared__ unsigned long long ks[kSplitThreads / 32];
    const int row = blockIdx.y, g = gridDim.x, b = blockIdx.x, tid = threadIdx.x;
    const mx_sample_row r = rows[row];
    SplitRow *s = scratch + row;
    float *l = logits + (int64_t)row * vocab;
    unsigned long long *h = &s->hist[0][0][0];
    for (int i = b * blockDim.x + tid; i < kPasses * 2 * kBins; i += g * blockDim.x) h[i] = 0ull;
    int lo, hi;
    slice_of(vocab, g, b, &lo, &hi);

    if (r.n_top >= 0) {
        float mb = -INFINITY;
        for (int i = lo + tid; i < hi; i += blockDim.x) mb = fmaxf(mb, l[i]);
        mb = block_max<W>(mb, fs);
        // A NaN logit makes the slice's sum NaN (so the row's log-softmax, as in the one-block kernel
        // and the host rule), also in a slice whose other logits are all -inf.
        float z = 0.0f;
        for (int i = lo + tid; i < hi; i += blockDim.x) z += mb > -INFINITY ? expf(l[i] - mb) : isnan(l[i]) ? l[i] : 0.0f;
        z = block_sum<W>(z, fs);
        const int n_top = r.n_top > MX_SAMPLE_MAX_TOP ? MX_SAMPLE_MAX_TOP : r.n_top;
        unsigned long long prev = ~0ull;
        for (int k = 0; k < n_top; k++) {
            unsigned long long best = 0;
            for (int i = lo + tid; i < hi; i += blockDim.x) {
                const unsigned long long key = pick_key(l[i], i);
                if (key < prev && key > best) best = key;
            }
            best = block_max_key<W>(best, ks);
            if (tid == 0) s->blk_top[b][k] = best;
            prev = best;
        }
        if (tid == 0) {
            s->blk_max[b] = mb;
            s->blk_sum[b] = z;
        }
    }
    __syncthreads();  // the slice's raw values are read before its edits

    const mx_logit_mod *md = mods ? mods + r.mod_off : nullptr;
    const int n_mod = md ? r.n_mod : 0;
    for (int k = tid; k < n_mod; k += blockDim.x) {
        const mx_logit_mod e = md[k];
        if (e.id >= lo && e.id < hi) apply_edit(l, e);
    }
    __syncthreads();

    const uint32_t *mask = r.allowed;
    unsigned long long best = 0, any = 0;
    for (int i = lo + tid; i < hi; i += blockDim.x) {
        const unsigned long long key = pick_key(l[i], i);
        any = key > any ? key : any;
        if (allowed_at(mask, i)) best = key > best ? key : best;
    }
    best = block_max_key<W>(best, ks);
    any = block_max_key<W>(any, ks);
    if (tid == 0) {
        s->blk_best[b] = best;
        s->blk_any[b] = any;
    }
}

// 2-5. Radix pass `pass` of the sampled rows' top-k and top-p selections.
template <int W>
__global__ void __launch_bounds__(kSplitThreads) split_radix(const float *logits, int vocab,
                                                             const mx_sample_row *__restrict__ rows, SplitRow *scratch,
                                                             const FastRow *fast, int pass, bool rest) {
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
    __shared__ unsigned long long hist[2][kCopies][kBins];
    __shared__ unsigned long long sums[kBins];
    __shared__ unsigned long long ks[kSplitThreads / 32];
    __shared__ RadixState st_out;
    const int row = blockIdx.y, g = gridDim.x, b = blockIdx.x, tid = threadIdx.x;
    const mx_sample_row r = rows[row];
    const bool use_k = by_top_k(r), use_p = by_top_p(r);
    if (!(r.temp > 0.0f) || (!use_k && !use_p) || (fast && fast[row].status != kRadix)) return;
    SplitRow *s = scratch + row;
    const float *l = logits + (int64_t)row * vocab;
    const uint32_t *mask = r.allowed;
    const float m = l[key_index(row_best<W>(s, g, &mask, ks))];
    if (!isfinite(m)) return;

    RadixState sk = {0u, 0ull, (unsigned long long)r.top_k}, sp = {0u, 0ull, 0ull};
    if (pass > 0) {
        if (pass > 1) {
            sk = s->st[pass - 1][0];
            sp = s->st[pass - 1][1];
        }
        const int prev_shift = 32 - 8 * pass;
        if (use_k) sk = radix_advance(s->hist[pass - 1][0], sk, prev_shift, false, 0.0f, sums, &st_out);
        if (use_p) sp = radix_advance(s->hist[pass - 1][1], sp, prev_shift, pass == 1, r.top_p, sums, &st_out);
        if (b == 0 && tid == 0) {
            s->st[pass][0] = sk;
            s->st[pass][1] = sp;
        }
    }

    const int shift = 24 - 8 * pass, copy = (tid / W) % kCopies;
    for (int i = tid; i < 2 * kCopies * kBins; i += blockDim.x) (&hist[0][0][0])[i] = 0ull;
    __syncthreads();
    int lo, hi;
    slice_of(vocab, g, b, &lo, &hi);
    const float lo_v = margin_floor(r, m);
    for (int i = lo + tid; i < hi; i += blockDim.x) {
        const float v = l[i];
        if (!(v >= lo_v) || !allowed_at(mask, i)) continue;
        const uint32_t key = mx_order_key(v), bin = (key >> shift) & (kBins - 1);
        if (use_k && (pass == 0 || (key >> (shift + 8)) == (sk.prefix >> (shift + 8))))
            atomicAdd(&hist[0][copy][bin], 1ull);
        if (use_p && (pass == 0 || (key >> (shift + 8)) == (sp.prefix >> (shift + 8)))) {
            const unsigned long long w = mass_weight(v, m);
            if (w) atomicAdd(&hist[1][copy][bin], w);
        }
    }
    __syncthreads();
    for (int sel = 0; sel < 2; sel++) {
        unsigned long long sum = 0;
        for (int c = 0; c < kCopies; c++) sum += hist[sel][c][tid];
        if (sum) atomicAdd(&s->hist[pass][sel][tid], sum);
    }
}

// 6. The threshold and the draw runs' masses (thread t of the row's blocks: run t).
template <int W>
__global__ void __launch_bounds__(kSplitThreads) split_draw(const float *logits, int vocab,
                                                            const mx_sample_row *__restrict__ rows, SplitRow *scratch,
                                                            const FastRow *fast, int g, bool rest) {
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
    __shared__ unsigned long long sums[kBins];
    __shared__ unsigned long long ks[kSplitThreads / 32];
    __shared__ RadixState st_out;
    const int row = blockIdx.y, tid = threadIdx.x;
    const mx_sample_row r = rows[row];
    const int status = fast ? fast[row].status : kRadix;
    if (!(r.temp > 0.0f) || status == kFromList) return;
    SplitRow *s = scratch + row;
    const float *l = logits + (int64_t)row * vocab;
    const uint32_t *mask = r.allowed;
    const float m = l[key_index(row_best<W>(s, g, &mask, ks))];
    if (!isfinite(m)) return;
    float thr;
    if (status == kThresholdOnly) {
        thr = s->thr;
    } else {
        RadixState sk = s->st[kPasses - 1][0], sp = s->st[kPasses - 1][1];
        if (by_top_k(r)) sk = radix_advance(s->hist[kPasses - 1][0], sk, 0, false, 0.0f, sums, &st_out);
        if (by_top_p(r)) sp = radix_advance(s->hist[kPasses - 1][1], sp, 0, false, r.top_p, sums, &st_out);
        thr = filter_threshold(r, m, sk.prefix, sp.prefix);
    }
    const int t = blockIdx.x * blockDim.x + tid;
    int i0, i1;
    draw_run(vocab, t, &i0, &i1);
    s->parts[t] = run_mass(l, i0, i1, thr, mask, m, 1.0f / r.temp);
    if (t == 0 && status != kThresholdOnly) s->thr = thr;
}

// 7. Logprobs, the draw's token and the output record (one block per row).
template <int W>
__global__ void __launch_bounds__(kSplitThreads) split_finish(mx_sample_out *out, const float *logits, int vocab,
                                                              const mx_sample_row *__restrict__ rows,
                                                              const mx_logit_mod *__restrict__ mods, SplitRow *scratch,
                                                              int g, bool rest) {
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
    __shared__ float fs[kSplitThreads / 32];
    __shared__ unsigned long long ks[kSplitThreads / 32];
    __shared__ float parts[kDrawRuns], gsum[kDrawGroups];
    const int row = blockIdx.x, tid = threadIdx.x;
    const mx_sample_row r = rows[row];
    const SplitRow *s = scratch + row;
    const float *l = logits + (int64_t)row * vocab;
    mx_sample_out *o = out + row;

    float lse = 0.0f;
    if (r.n_top >= 0) {
        float mx = -INFINITY;
        for (int b = tid; b < g; b += blockDim.x) mx = fmaxf(mx, s->blk_max[b]);
        mx = block_max<W>(mx, fs);
        float z = 0.0f;
        for (int b = tid; b < g; b += blockDim.x)  // a slice without a term adds nothing; a NaN sum stays
            if (s->blk_sum[b] != 0.0f) z += s->blk_sum[b] * expf(s->blk_max[b] - mx);
        lse = mx + logf(block_sum<W>(z, fs));
        const int n_top = r.n_top > MX_SAMPLE_MAX_TOP ? MX_SAMPLE_MAX_TOP : r.n_top;
        unsigned long long prev = ~0ull;
        for (int k = 0; k < n_top; k++) {
            unsigned long long best = 0;
            for (int j = tid; j < g * n_top; j += blockDim.x) {
                const unsigned long long key = s->blk_top[j / n_top][j % n_top];
                if (key < prev && key > best) best = key;
            }
            best = block_max_key<W>(best, ks);
            if (tid == 0) {  // the key holds the raw logit (the row itself is edited by now)
                o->top_id[k] = key_index(best);
                o->top_logprob[k] = mx_order_value((uint32_t)(best >> 32)) - lse;
            }
            prev = best;
        }
        if (tid == 0) o->n_top = n_top;
    } else if (tid == 0) {
        o->n_top = 0;
    }

    const uint32_t *mask = r.allowed;
    int32_t chosen = key_index(row_best<W>(s, g, &mask, ks));
    const float m = l[chosen];
    if (r.temp > 0.0f && isfinite(m)) {
        for (int t = tid; t < kDrawRuns; t += blockDim.x) parts[t] = s->parts[t];
        __syncthreads();
        float rest = 0.0f;
        const int owner = parts_pick(parts, mx_uniform_noise(r.seed, r.pos), &rest, gsum);
        if (tid == 0) {
            if (owner >= 0) {
                int i0, i1;
                draw_run(vocab, owner, &i0, &i1);
                const int last = run_pick(l, i0, i1, s->thr, mask, m, 1.0f / r.temp, rest);
                if (last >= 0) chosen = last;
            }
        }
    }
    if (tid == 0) {
        const mx_logit_mod *md = mods ? mods + r.mod_off : nullptr;
        o->id = chosen;
        if (r.n_top >= 0) o->logprob = raw_logit(l[chosen], chosen, md, md ? r.n_mod : 0) - lse;
    }
}

}  // namespace

extern "C" size_t mxg_sample_split_row_bytes(void) { return sizeof(SplitRow); }

// Rows per launch in L->sample_scratch: SplitRows, then (fast form) as many FastRows.
static int rows_per_launch(const mxg_launch *L, bool fast) {
    return (int)(L->sample_scratch_bytes / (sizeof(SplitRow) + (fast ? sizeof(FastRow) : 0)));
}

extern "C" bool mxg_sample_split_fast(const mxg_launch *L) { return L->sample_fast && rows_per_launch(L, true) >= 1; }

extern "C" void mxg_sample_split_peek(const mxg_launch *L, int row, float *thr, float *parts, int *fast_status) {
    const bool fast = mxg_sample_split_fast(L);
    const int per = rows_per_launch(L, fast);
    const SplitRow *s = (const SplitRow *)L->sample_scratch + row % per;
    *thr = s->thr;
    memcpy(parts, s->parts, sizeof s->parts);
    *fast_status = fast ? ((const FastRow *)((const SplitRow *)L->sample_scratch + per) + row % per)->status : -1;
}

extern "C" void mxg_sample_split(const mxg_launch *L, mx_sample_out *out, float *logits, int n, int vocab,
                                 const mx_sample_row *rows, const mx_logit_mod *mods, int blocks) {
    const bool fast = mxg_sample_split_fast(L);
    const int per_launch = rows_per_launch(L, fast);
    if (per_launch < 1) return;  // never: mxg_sample_split_blocks asks for scratch of one row at least
    SplitRow *s = (SplitRow *)L->sample_scratch;
    FastRow *f = fast ? (FastRow *)(s + per_launch) : nullptr;
    gpuStream_t st = (gpuStream_t)L->stream;
    const unsigned g = (unsigned)blocks;
    const bool rest = L->pdl_rest;  // MLXCEL_GPU_PDL=3: each launch dependent, its grid wait first
    for (int r0 = 0; r0 < n; r0 += per_launch) {
        const unsigned k = (unsigned)(n - r0 < per_launch ? n - r0 : per_launch);
        float *lg = logits + (int64_t)r0 * vocab;
        const mx_sample_row *rw = rows + r0;
        mx_sample_out *o = out + r0;
        MXG_WARP_DISPATCH(L->warp, {
            mxg_launch_dep(split_stats<W>, dim3(g, k), dim3(kSplitThreads), 0, st, rest, lg, vocab, rw, mods, s, rest);
        });
        if (f) launch_fast(L, lg, vocab, rw, s, f, blocks, k);
        MXG_WARP_DISPATCH(L->warp, {
            for (int p = 0; p < kPasses; p++)
                mxg_launch_dep(split_radix<W>, dim3(g, k), dim3(kSplitThreads), 0, st, rest, lg, vocab, rw, s, f, p, rest);
            mxg_launch_dep(split_draw<W>, dim3(kDrawRuns / kSplitThreads, k), dim3(kSplitThreads), 0, st, rest, lg, vocab,
                           rw, s, f, blocks, rest);
            mxg_launch_dep(split_finish<W>, dim3(k), dim3(kSplitThreads), 0, st, rest, o, lg, vocab, rw, mods, s, blocks,
                           rest);
        });
    }
}
