// SPDX-License-Identifier: MIT
// The fast form of the split token choice (kernels/sample_split.cu; L->sample_fast,
// MLXCEL_GPU_SAMPLE_FAST, on by default; =0 the radix passes alone): the same threshold and draw runs, bit for bit, without
// the radix passes where a short list of keys settles them. The radix passes' 64-bit shared-memory
// atomics pile onto the two or three bins of pass 0 that hold nearly every key (bits 31-24: sign and
// exponent); instead, four launches after split_stats:
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
// The launches read the SplitRows that split_stats wrote and leave their results in the row's
// FastRow (sample_split.cuh); a row's status tells the split form's later launches what is left.
#include "backends/gpu/kernels/sample_split.cuh"

namespace {

using namespace sample_rule;
using namespace sample_split;

constexpr int kSelectThreads = 1024;
static_assert(kSelectThreads == kDrawRuns, "select sums one draw run per thread");
static_assert(kFastCap % kSelectThreads == 0 && kFine % kSplitThreads == 0, "the scans give each thread the same count");

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

// F1. Each slice's candidates by count and top-p weight (mass_weight, as the radix passes add them):
// in all, and at or above each cut. Registers and one block sum each, no atomics. Also clears the
// row's window bins for F2.
template <int W>
__global__ void __launch_bounds__(kSplitThreads) split_mass(const float *logits, int vocab,
                                                            const mx_sample_row *__restrict__ rows,
                                                            const SplitRow *scratch, FastRow *fast, bool rest) {
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
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
                                                           const SplitRow *scratch, FastRow *fast, bool rest) {
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
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
                                                              const SplitRow *scratch, FastRow *fast, bool rest) {
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
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
                                                               SplitRow *scratch, FastRow *fast, int g, bool rest) {
    mxg_grid_wait_release(rest);  // MLXCEL_GPU_PDL=3: nothing before reads what earlier kernels wrote
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

}  // namespace

extern "C" size_t mxg_sample_fast_row_bytes(void) { return sizeof(FastRow); }

void sample_split::launch_fast(const mxg_launch *L, const float *logits, int vocab, const mx_sample_row *rows,
                               SplitRow *s, FastRow *f, int g, unsigned k) {
    gpuStream_t st = (gpuStream_t)L->stream;
    const unsigned gu = (unsigned)g;
    const bool rest = L->pdl_rest;  // MLXCEL_GPU_PDL=3: each launch dependent, its grid wait first
    MXG_WARP_DISPATCH(L->warp, {
        mxg_launch_dep(split_mass<W>, dim3(gu, k), dim3(kSplitThreads), 0, st, rest, logits, vocab, rows, s, f, rest);
        mxg_launch_dep(split_cut<W>, dim3(gu, k), dim3(kSplitThreads), 0, st, rest, logits, vocab, rows, s, f, rest);
        mxg_launch_dep(split_gather<W>, dim3(gu, k), dim3(kSplitThreads), 0, st, rest, logits, vocab, rows, s, f, rest);
        mxg_launch_dep(split_select<W>, dim3(k), dim3(kSelectThreads), 0, st, rest, logits, vocab, rows, s, f, g, rest);
    });
}
