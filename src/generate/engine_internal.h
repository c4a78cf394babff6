// SPDX-License-Identifier: MIT
// Private to src/generate: the engine's state (engine.h), shared by the batch step (engine.c) and
// the KV block bookkeeping of its sequences (engine_blocks.c: prefix lookups, growth, preemption,
// resumption, publishing).
#ifndef MX_GENERATE_ENGINE_INTERNAL_H
#define MX_GENERATE_ENGINE_INTERNAL_H

#include "core/thread_pool.h"
#include "generate/engine.h"
#include "generate/kv_pool.h"
#include "generate/seq_internal.h"

// A prompt chunk of a step: positions [start, end) of the sequence in `slot`.
typedef struct eng_chunk {
    int slot, start, end;
} eng_chunk;

struct mx_engine {
    mx_model *m;
    mx_ctx *ctx;
    int n_slots, max_ctx, chunk, step_tokens, vocab;
    int pad;                   // steps of 9..MX_ENGINE_PAD_MAX tokens padded to a multiple (1: none)
    bool prefix_reuse;
    mx_seq **slots;            // [n_slots] admitted sequences
    // KV blocks (kv_pool.h): each slot's block table, as the context has it too
    mx_kv_pool *kvp;
    int n_blocks, table_len;
    int32_t **blocks;          // [n_slots][table_len] blocks of positions [i * MX_KV_BLOCK, ...)
    int *n_held;               // [n_slots] entries of blocks[slot] in use
    uint64_t *age;             // [n_slots] admission order of the slot's sequence (smaller: older)
    uint64_t n_admitted;
    bool *preempted;           // [n_slots] its blocks were taken back; waits to recompute its tokens
    int *fed_before;           // [n_slots] tokens the slot's sequence had fed when last preempted (0: never)
    int *order;                // [n_slots] step scratch: occupied slots, oldest first
    eng_chunk *chunks;         // [n_slots] step scratch: prompt chunks put after the decode tokens
    bool decode_first;         // mx_ctx_split_mixed: a step's decode tokens before its prompt chunks
    uint64_t **chain;          // [n_slots][table_len] hash-chain key of each full block
    int *n_hashed;             // [n_slots] full blocks whose key is in chain (published if prefix_reuse)
    bool *fresh;               // [n_slots] admitted, no step yet: its prefix lookup may still grow
    mx_pool *pool;
    // step buffers (n_rows = n_slots + pad - 1: the output rows of a padded step)
    int32_t *b_tok, *b_pos, *b_slot, *b_rows;  // [n_slots + step_tokens + pad - 1]
    int *b_end;                                // [n_slots] tokens fed after this step, -1: none
    mx_seq **row_seq;                          // [n_slots]
    float *logits;                             // [n_rows, vocab]
    int32_t *ids;                              // [n_rows]
    mx_sample_row *rows;                       // [n_rows]
    mx_sample_out *outs;                       // [n_rows]
    mx_logit_mod *mods;                        // [cap_mods]
    int cap_mods;
    void *scratch;                             // host sampler scratch, per pool thread
    mx_engine_stats st;
};

// Positions a sequence may fill (prompt and max_new tokens but the last, within the context).
int eng_positions_needed(const mx_engine *e, const mx_seq *s);
// Blocks that hold `positions` positions.
int eng_blocks_for(int positions);
// Blocks kept free when admitting or resuming a sequence while others run.
int eng_watermark(const mx_engine *e);
// Tokens a sequence has fed, or must feed again after a preemption, before its next row.
int eng_fed_target(const mx_seq *s);
// Token at position p of a sequence's cache: the prompt, then the generated tokens.
int32_t eng_token_at(const mx_seq *s, int p);
// True when a sequence other than `slot` is running (admitted, unfinished, not preempted).
bool eng_others_running(const mx_engine *e, int slot);
// True while a preempted sequence waits (new sequences queue behind it).
bool eng_any_preempted(const mx_engine *e);
// Gives back every block of a slot.
void eng_drop_blocks(mx_engine *e, int slot);
// Extends the slot's table from `have` blocks with the sequence's next full blocks found in the
// prefix cache, up to `limit` blocks; returns the blocks held now.
int eng_find_prefix(mx_engine *e, int slot, const mx_seq *s, int have, int limit);
// Blocks for positions up to end - 1, preempting the youngest running sequences when the pool is out:
// 0, 1 (the slot's own sequence was preempted) or -1 (it cannot grow; err names the numbers).
int eng_grow_blocks(mx_engine *e, int slot, int end, mx_error *err);
// Resumes preempted sequences, oldest first, while their blocks fit.
void eng_resume_preempted(mx_engine *e);
// Before a sequence's first step: false while another sequence computes its next prompt block.
bool eng_start_sequence(mx_engine *e, int slot);
// Keys the slot's newly filled blocks in the hash chain and publishes them to the prefix cache.
void eng_publish_full(mx_engine *e, int slot);
// Gives back the blocks of every finished sequence.
void eng_drop_finished(mx_engine *e);

#endif
