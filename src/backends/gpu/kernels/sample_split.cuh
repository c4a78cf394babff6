// SPDX-License-Identifier: MIT
// What the split token choice's two files share: kernels/sample_split.cu (the split form: a row's
// vocabulary over g blocks, seven launches) and kernels/sample_fast.cu (its opt-in fast form, four
// launches that settle most rows' thresholds from a short list). The records a row's launches hand
// each other in L->sample_scratch (a launch's SplitRows, then with the fast form as many FastRows),
// a block's slice of the row, and the row's best token from the slices' keys. No __shared__ here:
// the host emulation (tests/gpu/sample_emulation) includes this file as it is.
#ifndef MXG_KERNELS_SAMPLE_SPLIT_CUH
#define MXG_KERNELS_SAMPLE_SPLIT_CUH

#include "backends/gpu/kernels/sample_rule.cuh"
#include "backends/gpu/kernels_sample.h"

namespace sample_split {

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

// Block b's slice [*lo, *hi) of a row of vocab ids split over g blocks.
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

// The fast form's launches F1-F3 (kernels/sample_fast.cu) for k rows of g blocks each, enqueued
// after split_stats and before the radix passes: logits[k, vocab] (edited by split_stats), rows[k],
// s[k] and f[k] the rows' records.
void launch_fast(const mxg_launch *L, const float *logits, int vocab, const mx_sample_row *rows, SplitRow *s, FastRow *f,
                 int g, unsigned k);

}  // namespace sample_split

#endif
