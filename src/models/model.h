// SPDX-License-Identifier: MIT
// A loaded model: its config, its weights on a backend, and the forward pass shared by every
// supported family (the family table, family.h). A model is read-only after loading
// and can serve several contexts; a context (mx_ctx) owns a KV cache of n_slots sequences and the
// activation scratch for batches of up to max_batch tokens.
#ifndef MX_MODELS_MODEL_H
#define MX_MODELS_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "core/error.h"
#include "io/hf_config.h"

typedef struct mx_model mx_model;
typedef struct mx_ctx mx_ctx;

// The families this build supports, comma separated, for error messages and `info`.
const char *mx_model_supported_types(void);

// Loads DIR (config.json + model*.safetensors) onto the backend. Every tensor is checked against
// the config (presence, dtype, shape, quantization layout); errors name the tensor.
mx_model *mx_model_load(const char *dir, mx_backend *be, mx_error *err);
void mx_model_free(mx_model *m);

const mx_config *mx_model_config(const mx_model *m);
mx_backend *mx_model_backend(const mx_model *m);
const char *mx_model_dir(const mx_model *m);
int64_t mx_model_weight_bytes(const mx_model *m);  // bytes of weights as stored (quantized)
// Bytes of weights one decoded token reads: every layer's matrices (MoE experts counted for the
// active ones only, num_experts_per_tok / num_experts of each stack) and the output projection;
// the embedding table only when it is the output projection (one row is looked up otherwise).
int64_t mx_model_decode_weight_bytes(const mx_model *m);
// Writes a multi-line description (architecture, sizes, quantization per layer group, memory).
void mx_model_describe(const mx_model *m, char *buf, size_t cap);
bool mx_model_is_eos(const mx_model *m, int32_t id);

// One forward batch: token t has id tokens[t], position pos[t] and KV slot slot[t]. Rows listed in
// out_rows (indices into the batch) produce outputs, in that order.
typedef struct mx_batch {
    int n;
    const int32_t *tokens;
    const int32_t *pos;
    const int32_t *slot;
    int n_out;
    const int32_t *out_rows;
} mx_batch;

// max_batch: tokens per internal step (larger batches are split, in order). Each slot owns the KV
// blocks for max_ctx positions.
mx_ctx *mx_ctx_create(mx_model *m, int n_slots, int max_ctx, int max_batch, mx_error *err);
// A context whose KV cache is a pool of n_blocks blocks of MX_KV_BLOCK positions shared by the slots:
// every slot's block table starts empty and the caller assigns blocks (mx_ctx_set_blocks) before a
// step writes or reads a position (a position without a block is an error of mx_ctx_forward).
mx_ctx *mx_ctx_create_pool(mx_model *m, int n_slots, int max_ctx, int max_batch, int n_blocks, mx_error *err);
void mx_ctx_free(mx_ctx *c);
int mx_ctx_max_ctx(const mx_ctx *c);
int64_t mx_ctx_kv_bytes(const mx_ctx *c);
int mx_ctx_kv_blocks(const mx_ctx *c);
// Bytes of one KV block (MX_KV_BLOCK positions of every layer) of this model on its backend.
int64_t mx_model_kv_block_bytes(const mx_model *m);
// Sets the block table of `slot`: positions [i * MX_KV_BLOCK, (i + 1) * MX_KV_BLOCK) in block
// blocks[i] for i < n, none after. Uploaded to the backend before the next step.
int mx_ctx_set_blocks(mx_ctx *c, int slot, const int32_t *blocks, int n, mx_error *err);
// Copies the keys and values of block src into block dst in every layer (copy-on-write).
int mx_ctx_copy_block(mx_ctx *c, int src, int dst, mx_error *err);

// Runs the batch. For each output row, writes the logits (host, [n_out, vocab]) when logits != NULL
// and/or the argmax (host, [n_out]) when ids != NULL.
int mx_ctx_forward(mx_ctx *c, const mx_batch *b, float *logits, int32_t *ids, mx_error *err);
// The same pass, writing for each output row the final hidden state after the final norm (host,
// [n_out, hidden_size]) instead of logits: what embeddings pool.
int mx_ctx_forward_hidden(mx_ctx *c, const mx_batch *b, float *hidden, mx_error *err);

// MLXCEL_GPU_SPLIT_MIXED (read at creation; unset: 1, on; 0: off, the A/B form): in a step with prompt chunks, the
// leading tokens that are decoding sequences' next tokens (a slot with at most MX_DECODE_SLOT_TOKENS
// tokens in the step) get an attention record of their own with the decode hint, so a GPU runs
// them on its decode kernel instead of the prefill kernel, which takes a 64-token block's rows of
// different sequences one sequence after the other. Rows are computed independently, so the CPU's
// results do not change; a GPU's decode rows in such steps take the decode kernel's rounding. The
// engine puts those tokens first in such steps when this is on. H100, bench/RESULTS.md run 36: the
// server's 64 streams x 4 requests +13% greedy, ITL p99 24 -> 10 ms.
bool mx_ctx_split_mixed(const mx_ctx *c);

// Step plans the context built (one per new step shape, plan_key in forward_internal.h) and freed
// to make room in its cache of PLAN_CACHE shapes (those that ran once first; a freed shape is built
// again, with a new plan id, when it comes back: a GPU backend then runs it directly and records it
// again), and the plan runs whose decode tokens had an attention record of their own
// (mx_ctx_split_mixed).
void mx_ctx_plan_counts(const mx_ctx *c, uint64_t *built, uint64_t *evicted, uint64_t *split);

// True when the backend chooses tokens itself (the `sample` record), so mx_ctx_forward_choose works.
bool mx_ctx_can_choose(const mx_ctx *c);
// Edits one mx_ctx_forward_choose call takes at most (more: choose on the host from logits).
int mx_ctx_max_edits(const mx_ctx *c);
// Runs the batch and chooses the token of every output row on the backend: row i under rows[i]
// (host structs; `allowed` is a host mask, copied to the backend) with its edits in
// mods[0..n_mods) (core/sample_rows.h). outs[n_out] (host) receives ids and logprobs; no logits
// leave the backend.
int mx_ctx_forward_choose(mx_ctx *c, const mx_batch *b, const mx_sample_row *rows, const mx_logit_mod *mods,
                          int n_mods, mx_sample_out *outs, mx_error *err);

#endif
