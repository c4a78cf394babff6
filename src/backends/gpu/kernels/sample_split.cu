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
// read from device memory. The logsumexp merges slices (max and rescaled sums), so logprobs match
// the one-block kernel to float rounding; tokens, thresholds and top ids are the same bit for bit.
// The fast form (L->sample_fast, MLXCEL_GPU_SAMPLE_FAST=1; off by default) finds the threshold
// without the radix passes, whose 64-bit shared-memory atomics pile onto the two or three bins of
// pass 0 that hold nearly every key (bits 31-24: sign and exponent), in four launches after stats:
//   F1. mass: each slice's candidates (allowed, l >= margin floor) by count and top-p weight in all
//       (pass 0's total; integer sums in registers, no atomics) and at or above kCuts cuts m - depth;
//   F2. cut: every block takes the same way from the row's sums: the highest cut with at most
//       kFastCap keys at or above it that settles a filter (top-p weight, top-k count or min-p bound
//       there), whose keys go to the row's list; or, for top-p without top-k when the kept tokens are
//       too many (flat rows, as the random-weight bench model's), the window between the cuts where
//       the weight from the top reaches want, its candidates added into 1,024 value bins (exact
//       64-bit integer weights);
//   F2b. gather: the window's bin where the weight reaches want; its keys go to the list;
//   F3. select (one block per row): sorts the list, takes the k-th key and the key where the weight
//       from the top reaches want (the radix passes' definitions, so the same bits), and, for a list
//       above a cut, the draw runs' masses from the kept keys sorted by id (run_mass's additions).
// A row that neither way settles (no cut fits and no window, or the window's bin holds more than
// kFastCap keys) takes the radix passes; split_draw runs for window rows and those; for the others
// those launches return at once (the row's FastRow::status).
#include "backends/gpu/kernels/sample_rule.cuh"
#include "backends/gpu/kernels_sample.h"

#include <string.h>

namespace {

using namespace sample_rule;

constexpr int kSplitThreads = 256;
static_assert(kSplitThreads == kBins, "the scans give one bin to each thread");
static_assert(kDrawRuns % kSplitThreads == 0, "draw runs fill whole blocks");
constexpr int kMaxBlocks = MXG_SAMPLE_MAX_BLOCKS;

// What the launches of one row hand each other (global memory).
struct SplitRow {
    float blk_max[kMaxBlocks], blk_sum[kMaxBlocks];                // raw max, sum of exp(l - max) per slice
    unsigned long long blk_best[kMaxBlocks], blk_any[kMaxBlocks];  // best allowed key, best key (edited)
    unsigned long long blk_top[kMaxBlocks][MX_SAMPLE_MAX_TOP];     // a slice's best raw keys (0: none)
    unsigned long long hist[kPasses][2][kBins];                    // per pass: top-k counts, top-p masses
    RadixState st[kPasses][2];                                     // the selections before pass p (p >= 1)
    float parts[kDrawRuns];                                        // each draw run's mass
    float thr;                                                     // the kept tokens' threshold
};

// The fast form's record of a row (global memory, after the launch's SplitRows).
constexpr int kCuts = 8;          // cuts at m - cut_depth(j)
constexpr int kFastCap = 4096;    // most keys in a row's list
constexpr int kFine = 1024;       // value bins of a window between two cuts
constexpr int kSelectThreads = 1024;
static_assert(kSelectThreads == kDrawRuns, "select sums one draw run per thread");
static_assert(kFastCap % kSelectThreads == 0 && kFine % kSplitThreads == 0, "the scans give each thread the same count");
enum { kRadix = 0, kFromList = 1, kThresholdOnly = 2 };  // FastRow::status
enum { kNoList = 0, kAboveCut = 1, kWindowBin = 2 };     // FastRow::mode
struct FastRow {
    int status;  // kFromList: threshold and draw runs from the list; kThresholdOnly: the threshold
                 // from the list, the draw runs by split_draw; kRadix: the radix passes and split_draw
    int mode;    // kAboveCut: the list holds the candidates at or above cut `cut`; kWindowBin: those
                 // of one value bin of the window [cut `cut`, cut `cut` - 1)
    int cut;
    unsigned n_list;                                     // keys appended so far (kWindowBin)
    unsigned long long n, n_all, want;                   // keys in the list, candidates, top-p target
    unsigned long long above_win, above_list;            // the weight above the window, above the list
    unsigned long long blk_total[kMaxBlocks], blk_all[kMaxBlocks];            // per slice: weight, count
    unsigned long long blk_cnt[kMaxBlocks][kCuts], blk_w[kMaxBlocks][kCuts];  // ... at or above cut j
    unsigned long long fine_w[kFine], fine_n[kFine];     // the window's bins: weight, count
    unsigned long long keys[kFastCap];                   // pick_key of the list's candidates, any order
};

__device__ __forceinline__ float cut_depth(int j) {
    switch (j) {
    case 0: return 1.0f;
    case 1: return 2.0f;
    case 2: return 4.0f;
    case 3: return 6.0f;
    case 4: return 9.0f;
    case 5: return 12.0f;
    case 6: return 16.0f;
    default: return 20.0f;
    }
}

// The window below cut j (j = kCuts: down to the margin floor): [*lo, *hi), with *hi = m included
// when j is 0. False when the window is empty in float arithmetic.
__device__ __forceinline__ bool window_of(const mx_sample_row &r, float m, int j, float *lo, float *hi) {
    *lo = j < kCuts ? m - cut_depth(j) : margin_floor(r, m);
    *hi = j > 0 ? m - cut_depth(j - 1) : m;
    return *hi > *lo;
}
__device__ __forceinline__ bool in_window(float v, int j, float lo, float hi) { return v >= lo && (j == 0 || v < hi); }
// A window's value bin: 0 at the top; a larger value never gets a larger bin.
__device__ __forceinline__ int fine_bin(float v, float lo, float hi) {
    return (int)fminf((hi - v) * ((float)kFine / (hi - lo)), (float)(kFine - 1));
}

// Sum of a 64-bit integer over the block (every thread gets it). scratch: blockDim.x / W entries.
template <int W>
__device__ unsigned long long block_sum_u64(unsigned long long v, unsigned long long *scratch) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
        const uint32_t hi = (uint32_t)mxg_shfl_xor<W>((int)(uint32_t)(v >> 32), o);
        const uint32_t lo = (uint32_t)mxg_shfl_xor<W>((int)(uint32_t)v, o);
        v += ((unsigned long long)hi << 32) | lo;
    }
    const int lane = threadIdx.x % W, warp = threadIdx.x / W, nw = blockDim.x / W;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    unsigned long long t = 0;
    for (int i = 0; i < nw; i++) t += scratch[i];
    __syncthreads();
    return t;
}

// Inclusive prefix sum of a 64-bit integer over the block's threads, and the total. sums: blockDim.x.
__device__ unsigned long long block_scan_u64(unsigned long long v, unsigned long long *sums, unsigned long long *total) {
    const int t = threadIdx.x;
    sums[t] = v;
    __syncthreads();
    for (int o = 1; o < (int)blockDim.x; o <<= 1) {
        const unsigned long long add = t >= o ? sums[t - o] : 0ull;
        __syncthreads();
        sums[t] += add;
        __syncthreads();
    }
    const unsigned long long mine = sums[t];
    *total = sums[blockDim.x - 1];
    __syncthreads();
    return mine;
}

__device__ __forceinline__ void slice_of(int vocab, int g, int b, int *lo, int *hi) {
    const int per = (vocab + g - 1) / g;
    *lo = b * per < vocab ? b * per : vocab;
    *hi = *lo + per < vocab ? *lo + per : vocab;
}

// The row's best token after the edits from the slices' keys: the best allowed one, or, when the mask
// allows none, the best of all (and *mask becomes NULL, as in the one-block kernel).
template <int W>
__device__ unsigned long long row_best(const SplitRow *s, int g, const uint32_t **mask, unsigned long long *ks) {
    unsigned long long k = 0, any = 0;
    for (int b = threadIdx.x; b < g; b += blockDim.x) {
        k = s->blk_best[b] > k ? s->blk_best[b] : k;
        any = s->blk_any[b] > any ? s->blk_any[b] : any;
    }
    k = block_max_key<W>(k, ks);
    if (k == 0) {
        *mask = nullptr;
        k = block_max_key<W>(any, ks);
    }
    return k;
}

// A sampled row as the fast kernels (F1-F3) see it: its record, its logits (edited by split_stats),
// its fast record, its mask (NULL when it allows no token: row_best) and its best allowed logit m.
struct FastRowView {
    mx_sample_row r;
    const float *l;
    FastRow *f;
    const uint32_t *mask;
    float m;
};

// Opens row `row` of a launch of g blocks per row for a fast kernel: false when the fast form has
// nothing to do there (a greedy row, or a best logit that is not finite: the token is the best one,
// no filter). Every thread of the block calls it (row_best has barriers) and gets the same answer.
template <int W>
__device__ __forceinline__ bool open_fast_row(int row, int g, const float *logits, int vocab,
                                              const mx_sample_row *__restrict__ rows, const SplitRow *scratch,
                                              FastRow *fast, unsigned long long *ks, FastRowView *v) {
    v->r = rows[row];
    if (!(v->r.temp > 0.0f)) return false;
    v->l = logits + (int64_t)row * vocab;
    v->f = fast + row;
    v->mask = v->r.allowed;
    v->m = v->l[key_index(row_best<W>(scratch + row, g, &v->mask, ks))];
    return isfinite(v->m);
}

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
                                                             const mx_logit_mod *__restrict__ mods, SplitRow *scratch) {
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
        float z = 0.0f;
        if (mb > -INFINITY)
            for (int i = lo + tid; i < hi; i += blockDim.x) z += expf(l[i] - mb);
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

// F1. Each slice's candidates by count and top-p weight (mass_weight, as the radix passes add them):
// in all, and at or above each cut. Registers and one block sum each, no atomics. Also clears the
// row's window bins for F2.
template <int W>
__global__ void __launch_bounds__(kSplitThreads) split_mass(const float *logits, int vocab,
                                                            const mx_sample_row *__restrict__ rows,
                                                            const SplitRow *scratch, FastRow *fast) {
    __shared__ unsigned long long ks[kSplitThreads / 32];
    const int g = gridDim.x, b = blockIdx.x, tid = threadIdx.x;
    FastRowView fr;
    if (!open_fast_row<W>(blockIdx.y, g, logits, vocab, rows, scratch, fast, ks, &fr)) return;
    const auto &[r, l, f, mask, m] = fr;
    for (int i = b * blockDim.x + tid; i < 2 * kFine; i += g * blockDim.x) (i < kFine ? f->fine_w[i] : f->fine_n[i - kFine]) = 0ull;
    if (b == 0 && tid == 0) f->n_list = 0u;
    const float lo_v = margin_floor(r, m);
    float cut[kCuts];
    unsigned long long w_at[kCuts];
    unsigned n_at[kCuts];
#pragma unroll
    for (int j = 0; j < kCuts; j++) cut[j] = m - cut_depth(j), w_at[j] = 0ull, n_at[j] = 0u;
    unsigned long long total = 0ull, n_all = 0ull;
    int lo, hi;
    slice_of(vocab, g, b, &lo, &hi);
    for (int i = lo + tid; i < hi; i += blockDim.x) {
        const float v = l[i];
        if (!(v >= lo_v) || !allowed_at(mask, i)) continue;
        const unsigned long long w = mass_weight(v, m);
        total += w;
        n_all++;
#pragma unroll
        for (int j = 0; j < kCuts; j++)
            if (v >= cut[j]) n_at[j]++, w_at[j] += w;
    }
    total = block_sum_u64<W>(total, ks);
    n_all = block_sum_u64<W>(n_all, ks);
#pragma unroll
    for (int j = 0; j < kCuts; j++) {
        const unsigned long long n = block_sum_u64<W>(n_at[j], ks), w = block_sum_u64<W>(w_at[j], ks);
        if (tid == 0) f->blk_cnt[b][j] = n, f->blk_w[b][j] = w;
    }
    if (tid == 0) f->blk_total[b] = total, f->blk_all[b] = n_all;
}

// F2. The row's way, the same in every block (integer sums of F1's records, in block order):
//   kAboveCut: the highest cut with at most kFastCap keys at or above it that settles a filter there
//     (top-p: the weight at or above it reaches want, the radix passes' target; top-k: k candidates
//     at or above it, or every candidate when there are no more than k; min-p: its bound at or above
//     it), so the kept tokens all lie at or above it: the slice's keys there go to the row's list,
//     each block at its own offset (the counts of the blocks before it);
//   kWindowBin (top-p without top-k, the kept tokens too many for a list): the window between the
//     two cuts where the weight from the top reaches want; the slice's candidates in it are added
//     into the row's kFine value bins (count and weight: two 32-bit shared atomics carry the 64-bit
//     integer sum exactly, then one 64-bit global atomic per bin and block).
template <int W>
__global__ void __launch_bounds__(kSplitThreads) split_cut(const float *logits, int vocab,
                                                           const mx_sample_row *__restrict__ rows,
                                                           const SplitRow *scratch, FastRow *fast) {
    __shared__ unsigned long long ks[kSplitThreads / 32];
    __shared__ unsigned long long at_n[kCuts], at_w[kCuts], sum_total, sum_all, base;
    __shared__ unsigned bin_n[kFine], bin_lo[kFine], bin_hi[kFine];
    __shared__ int mode_sh, cut_sh;
    __shared__ unsigned count;
    const int g = gridDim.x, b = blockIdx.x, tid = threadIdx.x;
    FastRowView fr;
    if (!open_fast_row<W>(blockIdx.y, g, logits, vocab, rows, scratch, fast, ks, &fr)) return;
    const auto &[r, l, f, mask, m] = fr;
    if (tid < kCuts) {
        unsigned long long n = 0, w = 0;
        for (int c = 0; c < g; c++) n += f->blk_cnt[c][tid], w += f->blk_w[c][tid];
        at_n[tid] = n, at_w[tid] = w;
    } else if (tid == kCuts) {
        unsigned long long t = 0, a = 0;
        for (int c = 0; c < g; c++) t += f->blk_total[c], a += f->blk_all[c];
        sum_total = t, sum_all = a;
    }
    __syncthreads();
    if (tid == 0) {
        unsigned long long want = (unsigned long long)((double)sum_total * (double)r.top_p);
        if (want == 0) want = 1;
        const unsigned long long k = by_top_k(r) ? (unsigned long long)r.top_k : 0ull;
        int mode = kNoList, cut = -1;
        for (int j = 0; j < kCuts && at_n[j] <= (unsigned long long)kFastCap; j++) {
            const bool p_ok = by_top_p(r) && at_w[j] >= want;
            const bool k_ok = by_top_k(r) && (sum_all > k ? at_n[j] >= k : at_n[j] == sum_all);
            const bool min_ok = r.min_p > 0.0f && m + logf(r.min_p) >= m - cut_depth(j);
            if (p_ok || k_ok || min_ok) {
                mode = kAboveCut, cut = j;
                break;
            }
        }
        if (mode == kNoList && by_top_p(r) && !by_top_k(r)) {
            int j = 0;  // the first cut with weight want at or above it (the margin floor's is the total)
            while (j < kCuts && at_w[j] < want) j++;
            float lo, hi;
            if (window_of(r, m, j, &lo, &hi)) mode = kWindowBin, cut = j;
        }
        unsigned long long before = 0;
        if (mode == kAboveCut)
            for (int c = 0; c < b; c++) before += f->blk_cnt[c][cut];
        mode_sh = mode, cut_sh = cut, base = before, count = 0u;
        if (b == 0) {
            f->mode = mode, f->cut = cut, f->n_all = sum_all, f->want = want;
            f->n = mode == kAboveCut ? at_n[cut] : 0ull;
            f->above_win = mode == kWindowBin && cut > 0 ? at_w[cut - 1] : 0ull;
        }
    }
    for (int i = tid; i < kFine; i += blockDim.x) bin_n[i] = 0u, bin_lo[i] = 0u, bin_hi[i] = 0u;
    __syncthreads();
    const int mode = mode_sh, cut = cut_sh;
    const float lo_v = margin_floor(r, m);
    int lo, hi;
    slice_of(vocab, g, b, &lo, &hi);
    if (mode == kAboveCut) {
        const float c = m - cut_depth(cut);
        for (int i = lo + tid; i < hi; i += blockDim.x) {
            const float v = l[i];
            if (!(v >= lo_v) || !(v >= c) || !allowed_at(mask, i)) continue;
            const unsigned long long at = base + atomicAdd(&count, 1u);
            if (at < (unsigned long long)kFastCap) f->keys[at] = pick_key(v, i);
        }
    } else if (mode == kWindowBin) {
        float wlo, whi;
        window_of(r, m, cut, &wlo, &whi);
        for (int i = lo + tid; i < hi; i += blockDim.x) {
            const float v = l[i];
            if (!(v >= lo_v) || !in_window(v, cut, wlo, whi) || !allowed_at(mask, i)) continue;
            const int bin = fine_bin(v, wlo, whi);
            const unsigned long long w = mass_weight(v, m);
            atomicAdd(&bin_n[bin], 1u);
            const unsigned low = (unsigned)w, old = atomicAdd(&bin_lo[bin], low);
            const unsigned high = (unsigned)(w >> 32) + (old + low < old ? 1u : 0u);  // with the carry
            if (high) atomicAdd(&bin_hi[bin], high);
        }
        __syncthreads();
        for (int i = tid; i < kFine; i += blockDim.x)
            if (bin_n[i]) {
                atomicAdd(&f->fine_n[i], (unsigned long long)bin_n[i]);
                atomicAdd(&f->fine_w[i], ((unsigned long long)bin_hi[i] << 32) + bin_lo[i]);
            }
    }
}

// F2b (kWindowBin rows). Every block finds the window's bin where the weight from the top reaches
// want (a scan of the bins' integer sums after the weight above the window) and copies its slice's
// candidates of that bin to the row's list (any order; select sorts them), when they fit.
template <int W>
__global__ void __launch_bounds__(kSplitThreads) split_gather(const float *logits, int vocab,
                                                              const mx_sample_row *__restrict__ rows,
                                                              const SplitRow *scratch, FastRow *fast) {
    __shared__ unsigned long long ks[kSplitThreads / 32];
    __shared__ unsigned long long sums[kSplitThreads];
    __shared__ unsigned long long above_sh;
    __shared__ int bin_sh;
    const int g = gridDim.x, b = blockIdx.x, tid = threadIdx.x;
    FastRowView fr;
    if (!open_fast_row<W>(blockIdx.y, g, logits, vocab, rows, scratch, fast, ks, &fr)) return;
    const auto &[r, l, f, mask, m] = fr;
    if (f->mode != kWindowBin) return;
    constexpr int kPer = kFine / kSplitThreads;
    const unsigned long long want = f->want;
    unsigned long long mine = 0ull, total;
    for (int e = 0; e < kPer; e++) mine += f->fine_w[tid * kPer + e];
    if (tid == 0) bin_sh = -1;
    unsigned long long acc = f->above_win + block_scan_u64(mine, sums, &total) - mine;
    for (int e = 0; e < kPer; e++) {
        const unsigned long long before = acc;
        acc += f->fine_w[tid * kPer + e];
        if (before < want && acc >= want) bin_sh = tid * kPer + e, above_sh = before;
    }
    __syncthreads();
    const int bin = bin_sh;
    if (bin < 0) return;  // never: the window holds the crossing (F2)
    const unsigned long long n = f->fine_n[bin];
    if (b == 0 && tid == 0) f->n = n, f->above_list = above_sh;
    if (n > (unsigned long long)kFastCap) return;
    float wlo, whi;
    window_of(r, m, f->cut, &wlo, &whi);
    const float lo_v = margin_floor(r, m);
    int lo, hi;
    slice_of(vocab, g, b, &lo, &hi);
    for (int i = lo + tid; i < hi; i += blockDim.x) {
        const float v = l[i];
        if (!(v >= lo_v) || !in_window(v, f->cut, wlo, whi) || fine_bin(v, wlo, whi) != bin || !allowed_at(mask, i))
            continue;
        const unsigned at = atomicAdd(&f->n_list, 1u);
        if (at < (unsigned)kFastCap) f->keys[at] = pick_key(v, i);
    }
}

// Sorts a[0, size) (size a power of two) in descending order: a bitonic network, every thread of
// the block taking part.
__device__ void sort_desc(unsigned long long *a, int size) {
    for (int k = 2; k <= size; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < size; i += blockDim.x) {
                const int x = i ^ j;
                if (x > i) {
                    const unsigned long long u = a[i], v = a[x];
                    if (((i & k) == 0) == (u < v)) a[i] = v, a[x] = u;
                }
            }
            __syncthreads();
        }
}

// The order key where the weight from the top first reaches want, counting `above` before the
// list (keys[0, n), in descending order); 0 (no real key) when it does not. kSelectThreads threads.
__device__ uint32_t list_crossing(const unsigned long long *keys, int n, float m, unsigned long long above,
                                  unsigned long long want, unsigned long long *sums, uint32_t *p_key) {
    constexpr int kPer = kFastCap / kSelectThreads;
    const int tid = threadIdx.x;
    unsigned long long w[kPer], mine = 0ull, total;
#pragma unroll
    for (int e = 0; e < kPer; e++) {
        const int i = tid * kPer + e;
        w[e] = i < n ? mass_weight(mx_order_value((uint32_t)(keys[i] >> 32)), m) : 0ull;
        mine += w[e];
    }
    if (tid == 0) *p_key = 0u;
    unsigned long long acc = above + block_scan_u64(mine, sums, &total) - mine;
#pragma unroll
    for (int e = 0; e < kPer; e++) {
        const unsigned long long before = acc;
        acc += w[e];
        if (before < want && acc >= want) *p_key = (uint32_t)(keys[tid * kPer + e] >> 32);
    }
    __syncthreads();
    const uint32_t k = *p_key;
    __syncthreads();
    return k;
}

// F3 for one row that open_fast_row opened: its status (FastRow::status), with the threshold (and
// for kFromList the draw runs' masses) written where split_draw writes them. Every thread of the
// block calls it and gets the same answer.
__device__ int select_row(const FastRowView &fr, int vocab, SplitRow *s, unsigned long long *keys,
                          unsigned long long *sums, uint32_t *p_key, int *n_kept) {
    const int tid = threadIdx.x;
    const mx_sample_row &r = fr.r;
    const FastRow *f = fr.f;
    const float m = fr.m;
    if (f->mode == kNoList || f->n == 0 || f->n > (unsigned long long)kFastCap) return kRadix;
    const int n = (int)f->n;
    int size = 1;
    while (size < n) size <<= 1;
    for (int i = tid; i < size; i += blockDim.x) keys[i] = i < n ? f->keys[i] : 0ull;
    __syncthreads();
    sort_desc(keys, size);

    if (f->mode == kWindowBin) {  // top-p alone (and min-p): its key lies in the list
        const uint32_t p_prefix = list_crossing(keys, n, m, f->above_list, f->want, sums, p_key);
        if (p_prefix == 0u) return kRadix;  // never: the bin holds the crossing (F2b)
        if (tid == 0) s->thr = filter_threshold(r, m, 0u, p_prefix);
        return kThresholdOnly;
    }

    // kAboveCut: each filter's key where the list settles it; one it does not settle lies below the cut.
    mx_sample_row q = r;
    uint32_t k_prefix = 0u, p_prefix = 0u;
    if (by_top_k(r)) {  // the k-th largest key, or the smallest when there are no more than k
        const unsigned long long k = (unsigned long long)r.top_k;
        const bool all = f->n_all <= k;
        if (all ? f->n == f->n_all : f->n >= k) k_prefix = (uint32_t)(keys[all ? n - 1 : (int)k - 1] >> 32);
        else q.top_k = 0;
    }
    if (by_top_p(r)) {
        p_prefix = list_crossing(keys, n, m, 0ull, f->want, sums, p_key);
        if (p_prefix == 0u) q.top_p = 1.0f;
    }
    const float thr = filter_threshold(q, m, k_prefix, p_prefix);
    if (!(thr >= m - cut_depth(f->cut))) return kRadix;  // never: the cut settles a filter (F2)

    // The kept keys (l >= thr) are a prefix of the sorted list; sorted again by id, each draw run's
    // kept tokens follow one another, and thread t sums run t's as run_mass does.
    if (tid == 0) *n_kept = 0;
    __syncthreads();
    int mine_kept = 0;
    for (int i = tid; i < n; i += blockDim.x) mine_kept += mx_order_value((uint32_t)(keys[i] >> 32)) >= thr;
    if (mine_kept) atomicAdd(n_kept, mine_kept);
    __syncthreads();
    const int kept = *n_kept;
    int size2 = 1;
    while (size2 < kept) size2 <<= 1;
    for (int i = tid; i < size2; i += blockDim.x) keys[i] = i < kept ? (keys[i] << 32) | (keys[i] >> 32) : 0ull;
    __syncthreads();
    sort_desc(keys, size2);
    int i0, i1;
    draw_run(vocab, tid, &i0, &i1);
    int a = 0, z = kept;  // the first kept id >= i0
    while (a < z) {
        const int mid = (a + z) / 2;
        if (key_index(keys[mid] >> 32) < i0) a = mid + 1;
        else z = mid;
    }
    const float inv_t = 1.0f / r.temp;
    float part = 0.0f;
    for (int i = a; i < kept && key_index(keys[i] >> 32) < i1; i++)
        part += expf((mx_order_value((uint32_t)keys[i]) - m) * inv_t);
    s->parts[tid] = part;
    if (tid == 0) s->thr = thr;
    return kFromList;
}

// F3. One block per row: the row's status, threshold and (kFromList) draw runs.
template <int W>
__global__ void __launch_bounds__(kSelectThreads) split_select(const float *logits, int vocab,
                                                               const mx_sample_row *__restrict__ rows,
                                                               SplitRow *scratch, FastRow *fast, int g) {
    __shared__ unsigned long long keys[kFastCap];
    __shared__ unsigned long long sums[kSelectThreads];
    __shared__ unsigned long long ks[kSelectThreads / 32];
    __shared__ uint32_t p_key;
    __shared__ int n_kept;
    const int row = blockIdx.x;
    FastRowView fr;
    const bool open = open_fast_row<W>(row, g, logits, vocab, rows, scratch, fast, ks, &fr);
    const int status = open ? select_row(fr, vocab, scratch + row, keys, sums, &p_key, &n_kept) : kRadix;
    if (threadIdx.x == 0) fast[row].status = status;
}

// 2-5. Radix pass `pass` of the sampled rows' top-k and top-p selections.
template <int W>
__global__ void __launch_bounds__(kSplitThreads) split_radix(const float *logits, int vocab,
                                                             const mx_sample_row *__restrict__ rows, SplitRow *scratch,
                                                             const FastRow *fast, int pass) {
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
                                                            const FastRow *fast, int g) {
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
                                                              int g) {
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
        for (int b = tid; b < g; b += blockDim.x)
            if (s->blk_sum[b] > 0.0f) z += s->blk_sum[b] * expf(s->blk_max[b] - mx);
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
extern "C" size_t mxg_sample_fast_row_bytes(void) { return sizeof(FastRow); }

// Rows per launch in L->sample_scratch: SplitRows, then (fast form) as many FastRows.
static int rows_per_launch(const mxg_launch *L, bool fast) {
    return (int)(L->sample_scratch_bytes / (sizeof(SplitRow) + (fast ? sizeof(FastRow) : 0)));
}

extern "C" void mxg_sample_split_peek(const mxg_launch *L, int row, float *thr, float *parts, int *fast_status) {
    const bool fast = L->sample_fast && rows_per_launch(L, true) >= 1;
    const int per = rows_per_launch(L, fast);
    const SplitRow *s = (const SplitRow *)L->sample_scratch + row % per;
    *thr = s->thr;
    memcpy(parts, s->parts, sizeof s->parts);
    *fast_status = fast ? ((const FastRow *)((const SplitRow *)L->sample_scratch + per) + row % per)->status : -1;
}

extern "C" void mxg_sample_split(const mxg_launch *L, mx_sample_out *out, float *logits, int n, int vocab,
                                 const mx_sample_row *rows, const mx_logit_mod *mods, int blocks) {
    const bool fast = L->sample_fast && rows_per_launch(L, true) >= 1;
    const int per_launch = rows_per_launch(L, fast);
    if (per_launch < 1) return;  // never: mxg_sample_split_blocks asks for scratch of one row at least
    SplitRow *s = (SplitRow *)L->sample_scratch;
    FastRow *f = fast ? (FastRow *)(s + per_launch) : nullptr;
    gpuStream_t st = (gpuStream_t)L->stream;
    const unsigned g = (unsigned)blocks;
    for (int r0 = 0; r0 < n; r0 += per_launch) {
        const unsigned k = (unsigned)(n - r0 < per_launch ? n - r0 : per_launch);
        float *lg = logits + (int64_t)r0 * vocab;
        const mx_sample_row *rw = rows + r0;
        mx_sample_out *o = out + r0;
        MXG_WARP_DISPATCH(L->warp, {
            split_stats<W><<<dim3(g, k), kSplitThreads, 0, st>>>(lg, vocab, rw, mods, s);
            if (f) {
                split_mass<W><<<dim3(g, k), kSplitThreads, 0, st>>>(lg, vocab, rw, s, f);
                split_cut<W><<<dim3(g, k), kSplitThreads, 0, st>>>(lg, vocab, rw, s, f);
                split_gather<W><<<dim3(g, k), kSplitThreads, 0, st>>>(lg, vocab, rw, s, f);
                split_select<W><<<dim3(k), kSelectThreads, 0, st>>>(lg, vocab, rw, s, f, blocks);
            }
            for (int p = 0; p < kPasses; p++)
                split_radix<W><<<dim3(g, k), kSplitThreads, 0, st>>>(lg, vocab, rw, s, f, p);
            split_draw<W><<<dim3(kDrawRuns / kSplitThreads, k), kSplitThreads, 0, st>>>(lg, vocab, rw, s, f, blocks);
            split_finish<W><<<dim3(k), kSplitThreads, 0, st>>>(o, lg, vocab, rw, mods, s, blocks);
        });
    }
}
