// SPDX-License-Identifier: MIT
// Batched token choice: the description of one row (one sequence's next token) as every sampler
// reads it, the host implementation, and the reference a device kernel is compared with. Plain C
// that nvcc and hipcc compile too (structs only), so a GPU kernel reads the same records.
//
// Rule, per row, on the logits l[vocab] of that row:
//   1. edits: for each mod of the row, l[id] = rep(l[id] + bias) - sub, where rep(x) = x / rep for
//      x > 0 and x * rep otherwise (logit_bias, then repetition, then presence/frequency penalties);
//   2. tokens outside the optional allowed bitmask (bit i % 32 of word i / 32 set: token i allowed)
//      are never chosen and carry no probability mass;
//   3. temp <= 0: the first maximum among allowed tokens (greedy);
//   4. otherwise the filters act on the temperature-1 probabilities of the allowed tokens: min-p keeps
//      p >= min_p * p_max, top-k the k largest, top-p the smallest top set whose mass reaches top_p.
//      Each keeps a top set of the sorted order, so together they are one threshold on the logits
//      (the largest of the three). Thresholds are found by selection over the float order (radix
//      histograms on the host, bisection on a GPU), never by sorting the vocabulary;
//   5. the token is drawn from the kept tokens with weights exp((l - max) / temp) by inverse CDF in
//      token-id order, with one uniform number keyed by (seed, pos) (core/sample_noise.h): the same
//      seed and positions draw the same tokens, whatever else is in the batch;
//   6. logprobs (n_top >= 0) describe the model's raw distribution (log-softmax of the logits
//      before step 1, as OpenAI-style APIs report them): the chosen token's and the n_top best.
// Tokens more than 40 * max(1, temp) below the best allowed logit are never kept (they carry under
// e^-40 of the mass each). The host implementation takes a NaN logit (after the edits) as -inf:
// no mass, never chosen while another allowed logit is above -inf (logprobs stay raw: NaN).
#ifndef MX_CORE_SAMPLE_ROWS_H
#define MX_CORE_SAMPLE_ROWS_H

#include <stdint.h>

#define MX_SAMPLE_MAX_TOP 20  // top_logprobs at most

// One sparse edit of a row's logits (step 1 above).
typedef struct mx_logit_mod {
    int32_t id;
    float bias;  // added first (logit_bias); 0: none
    float rep;   // repetition penalty factor; 1: none
    float sub;   // subtracted last (presence + frequency * count); 0: none
} mx_logit_mod;

// What decides one row's token. Pointers are in the memory of whoever runs the row (host memory
// for the host sampler and the CPU backend, device memory for a GPU kernel).
typedef struct mx_sample_row {
    float temp;                // <= 0: greedy
    float top_p;               // 1: off
    float min_p;               // 0: off
    int32_t top_k;             // 0: off
    uint64_t seed;
    int32_t pos;               // noise counter: the position of the row's input token
    int32_t mod_off, n_mod;    // the row's edits: mods[mod_off .. mod_off + n_mod), distinct ids
    const uint32_t *allowed;   // NULL: every token; else a bitmask of ceil(vocab / 32) words
    int32_t n_top;             // -1: no logprobs; else the chosen token's and n_top (<= 20) best
} mx_sample_row;

// The result of one row.
typedef struct mx_sample_out {
    int32_t id;
    int32_t n_top;                       // entries of top_* filled (n_top of the row, or 0)
    float logprob;                       // raw log-probability of id (when the row asked)
    int32_t top_id[MX_SAMPLE_MAX_TOP];   // best first
    float top_logprob[MX_SAMPLE_MAX_TOP];
} mx_sample_out;

// Scratch one row needs on the host, in bytes, for a vocabulary.
#define MX_SAMPLE_SCRATCH_BYTES(vocab) ((size_t)(vocab) * 24u + 64u)

// Runs one row on the host. logits[vocab] is modified in place (edits); scratch holds
// MX_SAMPLE_SCRATCH_BYTES(vocab) bytes, 8-byte aligned. Returns the chosen id (also in out->id).
int32_t mx_sample_row_host(float *logits, int vocab, const mx_sample_row *row, const mx_logit_mod *mods,
                           void *scratch, mx_sample_out *out);

struct mx_pool;
// Runs rows 0..n-1 (row r on logits + r * vocab) over the pool's threads (pool NULL: this thread).
// scratch holds MX_SAMPLE_SCRATCH_BYTES(vocab) bytes per pool thread.
void mx_sample_rows_host(struct mx_pool *pool, float *logits, int n, int vocab, const mx_sample_row *rows,
                         const mx_logit_mod *mods, void *scratch, mx_sample_out *out);

#endif
