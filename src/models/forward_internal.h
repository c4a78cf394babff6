// SPDX-License-Identifier: MIT
// Private to src/models: the context (mx_ctx) as its two halves see it: forward_ctx.c creates it
// (KV cache, block tables, activation scratch, every buffer sized for max_batch tokens) and frees it;
// forward.c records and runs the step plans in it.
#ifndef MX_MODELS_FORWARD_INTERNAL_H
#define MX_MODELS_FORWARD_INTERNAL_H

#include "backends/plan.h"
#include "models/forward_mla.h"
#include "models/model_internal.h"

// Output rows per lm_head pass: bounds the logits buffer to [64, vocab] (39 MB for a 151,936-token
// vocabulary). A server step of up to 64 sequences is one pass: one token-choice launch (whose rows
// run in parallel blocks) and one download of the results, instead of one of each per 16 rows.
#define LOGIT_ROWS 64
#define MAX_EDITS 65536  // logit edits per mx_ctx_forward_choose call (1 MiB of backend memory)
// Step shapes kept. A server on a GPU uses 22 decode shapes per token-choice kind (engine.h:
// padding), greedy and sampled, each run many times; nearly every step with prompt chunks has a shape
// of its own (its token count is its decode tokens plus its chunks', which rarely recur) and runs
// once. So beyond PLAN_CACHE plans, the plan freed is the least recently used among those that ran
// once; a plan that ran more than once goes first only after PLAN_KEEP_REUSED plan runs without a
// run of its own (a few 64-stream server levels), so the shapes of a load that stopped make room.
#define PLAN_CACHE 64
#define PLAN_KEEP_REUSED 4096

// What a plan computes: `n` tokens through the model (0: output head only) and `r` output rows,
// read in place (rows 0..r-1) or gathered through d_rows; `ids` picks what the head chooses.
// IDS_HIDDEN: the head stops after the final norm (hidden states for embeddings, no lm_head).
// decode: no KV slot has more than MX_DECODE_SLOT_TOKENS of the n tokens (the attention records' hint).
// split (MLXCEL_GPU_SPLIT_MIXED, on unless 0; mx_ctx_split_mixed): in a step that is not a decode step, the
// first `split` tokens each belong to a slot with at most MX_DECODE_SLOT_TOKENS of them (the next
// tokens of decoding sequences, which the engine then puts first): their attention is a record of
// its own with the decode hint, the prompt chunks' another; 0: one attention record.
typedef enum { IDS_NONE, IDS_ARGMAX, IDS_SAMPLE, IDS_HIDDEN } ids_kind;
typedef struct plan_key {
    int n, r;
    bool gathered;
    ids_kind ids;
    bool decode;
    int split;
} plan_key;

typedef struct cached_plan {
    plan_key key;
    mx_plan *plan;
    uint64_t last_use;  // the context's plan-run count at its last run
    uint64_t runs;
} cached_plan;

struct mx_ctx {
    mx_model *m;
    mx_backend *be;
    mx_kv_layout lay;
    void *kv;
    int max_batch;
    int32_t *table;                      // [n_slots][table_len] host copy of the block tables
    int32_t *d_table;                    // the same in backend memory (uploaded before a step when changed)
    bool table_dirty;
    int32_t *slot_tokens;                // [n_slots] host counts of a step's tokens per slot (zero between steps)
    bool split_mixed;                    // MLXCEL_GPU_SPLIT_MIXED (unset: on): plan_key.split
    // backend scratch
    int32_t *d_tokens, *d_pos, *d_slot;  // [B]
    int32_t *d_rows;                     // [LOGIT_ROWS] output rows of a pass
    float *x, *h, *tmp;                  // [B, H]
    float *q, *att;                      // [B, n_heads*D]
    float *k, *v;                        // [B, n_kv_heads*D]
    float *gate, *up;                    // [B, I] (dense) or [B*k, moe_I] (MoE)
    float *router;                       // [B, E]
    int32_t *moe_ids;                    // [B*k]
    float *moe_w;                        // [B*k]
    float *moe_y;                        // [B*k, H]
    float *out_h;                        // [LOGIT_ROWS, H]
    float *logits;                       // [LOGIT_ROWS, vocab]
    int32_t *d_argmax;                   // [LOGIT_ROWS] chosen tokens
    mx_sample_row *d_srows;              // [LOGIT_ROWS] token-choice rows of a pass
    mx_sample_out *d_outs;               // [LOGIT_ROWS] their results
    mx_logit_mod *d_mods;                // [MAX_EDITS] the edits of a call
    uint32_t *d_masks;                   // [LOGIT_ROWS, ceil(vocab / 32)] allowed-token masks of a pass
    // the current mx_ctx_forward_choose call (host)
    const mx_sample_row *choose_rows;
    mx_sample_out *choose_outs;
    mx_sample_row pass_rows[LOGIT_ROWS];
    mx_mla *mla;                         // latent attention's scratch (deepseek_v3), else NULL
    cached_plan plans[PLAN_CACHE];
    uint64_t uses;
    uint64_t plans_built, plans_evicted, split_runs;  // mx_ctx_plan_counts
    void **bufs;
    int n_bufs;
};

#endif
