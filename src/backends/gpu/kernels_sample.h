// SPDX-License-Identifier: MIT
// The C interface of the sampling kernels (kernels/sample.cu, kernels/sample_split.cu and its fast
// form kernels/sample_fast.cu), beside
// kernels.h: backend.h `sample` on the device. Arguments are device pointers; the ops enqueue on
// L->stream and return.
#ifndef MXG_KERNELS_SAMPLE_H
#define MXG_KERNELS_SAMPLE_H

#include "backends/gpu/kernels.h"
#include "core/sample_rows.h"

#ifdef __cplusplus
extern "C" {
#endif

// out[n]: the token choice of each row of logits[n, vocab] under rows[n] and mods (see backend.h
// `sample` and core/sample_rows.h); the logits are edited in place.
void mxg_sample(const mxg_launch *L, mx_sample_out *out, float *logits, int n, int vocab, const mx_sample_row *rows,
                const mx_logit_mod *mods);

// Most blocks that share one row (MLXCEL_GPU_SAMPLE_BLOCKS at most this), and the value of
// MLXCEL_GPU_SAMPLE_BLOCKS when unset: the split form wherever the rule takes it (measured on the
// H200 by tests/gpu/sample_on_device.sh: one row of 151,936 logits 0.45 -> 0.05 ms, 8 rows 0.89 ->
// 0.09 ms; bench/RESULTS.md). MLXCEL_GPU_SAMPLE_BLOCKS=1 keeps the one-block form only.
#define MXG_SAMPLE_MAX_BLOCKS 128
#define MXG_SAMPLE_DEFAULT_BLOCKS MXG_SAMPLE_MAX_BLOCKS

// Blocks per row that mxg_sample gives n rows of `vocab` logits: 1 (one block per row, the kernel of
// kernels/sample.cu) or g >= 2 (mxg_sample_split) for n up to the multiprocessor count: four
// blocks per multiprocessor in all, at most L->sample_blocks, at most one per 1,024 tokens, and only
// with L->sample_scratch.
int mxg_sample_split_blocks(const mxg_launch *L, int n, int vocab);

// The same choice as mxg_sample's one-block kernel with each row's vocabulary split over `blocks`
// (2..MXG_SAMPLE_MAX_BLOCKS) blocks: same tokens, thresholds and top ids, logprobs within float
// rounding. Uses L->sample_scratch (mxg_sample_split_row_bytes per row; rows beyond it run in
// further launches).
void mxg_sample_split(const mxg_launch *L, mx_sample_out *out, float *logits, int n, int vocab,
                      const mx_sample_row *rows, const mx_logit_mod *mods, int blocks);
size_t mxg_sample_split_row_bytes(void);

// The fast form of mxg_sample_split (L->sample_fast, MLXCEL_GPU_SAMPLE_FAST, on by default): the same choice
// with the top-k/top-p threshold (and the draw runs) taken from a short list of keys where that
// settles them exactly: the keys near each row's best, or those of the value bin where top-p's
// weight is reached (kernels/sample_fast.cu); the radix passes elsewhere. Its scratch:
// mxg_sample_split_row_bytes() + mxg_sample_fast_row_bytes() per row.
size_t mxg_sample_fast_row_bytes(void);
// Whether mxg_sample_split runs its fast form on L: L->sample_fast and scratch for one row of it.
bool mxg_sample_split_fast(const mxg_launch *L);

// For the host emulation only (L->sample_scratch in host memory): what the last mxg_sample_split
// left for row `row` (rows beyond the scratch's share the record of an earlier row): the kept
// tokens' threshold, the 1,024 draw runs' masses, and with the fast form the way it took (1: a
// list above a cut, 2: a window's bin, 0: the radix passes; -1: not the fast form).
void mxg_sample_split_peek(const mxg_launch *L, int row, float *thr, float *parts, int *fast_status);

#ifdef __cplusplus
}
#endif

#endif
