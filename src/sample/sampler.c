// SPDX-License-Identifier: MIT
// Sampler state (see sampler.h). Generated-token counts live in an open-addressing table keyed by
// token id (at most max_generated distinct ids), so nothing is proportional to the vocabulary. A
// row's edits are merged per token id through a second table stamped per call (no clearing).
#include "sample/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

typedef struct id_slot {
    int32_t id;     // -1: empty
    int32_t value;  // count (counts table) or index into the row's mods (merge table)
} id_slot;

struct mx_sampler {
    mx_sampling p;
    uint64_t seed;
    int32_t *history;   // ring of the last repetition_context tokens
    int n_history, history_pos;
    id_slot *counts;    // [cap] generated-token counts
    int32_t *distinct;  // [max_generated] ids present in counts, in first-seen order
    int n_distinct, max_generated;
    uint32_t cap_mask;  // counts capacity - 1
    id_slot *merge;     // [merge_mask + 1] per-row merge table
    uint32_t *stamp;    // [merge_mask + 1] call stamp of each merge slot
    uint32_t merge_mask, cur_stamp;
};

mx_sampling mx_sampling_defaults(void) {
    return (mx_sampling){.temp = 0.0f, .top_p = 1.0f, .min_p = 0.0f, .top_k = 0, .repetition_penalty = 1.0f,
                         .repetition_context = 20, .presence_penalty = 0.0f, .frequency_penalty = 0.0f};
}

bool mx_sampling_has_penalties(const mx_sampling *p) {
    return p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

static uint32_t pow2_at_least(uint32_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

static uint32_t hash_id(int32_t id) { return (uint32_t)id * 2654435761u; }

mx_sampler *mx_sampler_create(const mx_sampling *p, int max_generated) {
    mx_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    if (s->p.repetition_context < 1) s->p.repetition_context = 1;
    if (s->p.n_logit_bias < 0 || !s->p.logit_bias) s->p.n_logit_bias = 0;
    s->max_generated = max_generated > 0 ? max_generated : 1;
    uint32_t cap = pow2_at_least(2u * (uint32_t)s->max_generated);
    uint32_t mcap = pow2_at_least(2u * (uint32_t)mx_sampler_max_mods(s));
    s->cap_mask = cap - 1;
    s->merge_mask = mcap - 1;
    s->history = malloc(sizeof *s->history * (size_t)s->p.repetition_context);
    s->counts = malloc(sizeof *s->counts * cap);
    s->distinct = malloc(sizeof *s->distinct * (size_t)s->max_generated);
    s->merge = malloc(sizeof *s->merge * mcap);
    s->stamp = calloc(mcap, sizeof *s->stamp);
    if (!s->history || !s->counts || !s->distinct || !s->merge || !s->stamp) {
        mx_sampler_free(s);
        return NULL;
    }
    mx_sampler_reset(s);
    return s;
}

void mx_sampler_free(mx_sampler *s) {
    if (!s) return;
    free(s->history);
    free(s->counts);
    free(s->distinct);
    free(s->merge);
    free(s->stamp);
    free(s);
}

void mx_sampler_reset(mx_sampler *s) {
    s->n_history = s->history_pos = 0;
    for (uint32_t i = 0; i <= s->cap_mask; i++) s->counts[i].id = -1;
    s->n_distinct = 0;
    s->seed = s->p.has_seed ? s->p.seed : mx_clock_seed();
}

uint64_t mx_sampler_seed(const mx_sampler *s) { return s->seed; }

void mx_sampler_set_allowed(mx_sampler *s, const uint32_t *allowed) { s->p.allowed = allowed; }

int mx_sampler_max_mods(const mx_sampler *s) {
    return s->p.n_logit_bias + s->p.repetition_context + s->max_generated;
}

void mx_sampler_accept(mx_sampler *s, int32_t id, bool generated) {
    if (id < 0) return;
    s->history[s->history_pos] = id;
    s->history_pos = (s->history_pos + 1) % s->p.repetition_context;
    if (s->n_history < s->p.repetition_context) s->n_history++;
    if (!generated || (s->p.presence_penalty == 0.0f && s->p.frequency_penalty == 0.0f)) return;
    for (uint32_t h = hash_id(id) & s->cap_mask;; h = (h + 1) & s->cap_mask) {
        if (s->counts[h].id == id) {
            s->counts[h].value++;
            return;
        }
        if (s->counts[h].id < 0) {
            if (s->n_distinct == s->max_generated) return;  // beyond the stated bound: not counted
            s->counts[h] = (id_slot){id, 1};
            s->distinct[s->n_distinct++] = id;
            return;
        }
    }
}

static int count_of(const mx_sampler *s, int32_t id) {
    for (uint32_t h = hash_id(id) & s->cap_mask;; h = (h + 1) & s->cap_mask) {
        if (s->counts[h].id == id) return s->counts[h].value;
        if (s->counts[h].id < 0) return 0;
    }
}

// The row's edit for id (created as a no-op edit on first use).
static mx_logit_mod *edit_for(mx_sampler *s, mx_logit_mod *mods, int *n, int32_t id) {
    for (uint32_t h = hash_id(id) & s->merge_mask;; h = (h + 1) & s->merge_mask) {
        if (s->stamp[h] != s->cur_stamp) {
            s->stamp[h] = s->cur_stamp;
            s->merge[h] = (id_slot){id, *n};
            mods[*n] = (mx_logit_mod){.id = id, .bias = 0.0f, .rep = 1.0f, .sub = 0.0f};
            return &mods[(*n)++];
        }
        if (s->merge[h].id == id) return &mods[s->merge[h].value];
    }
}

void mx_sampler_row(mx_sampler *s, int32_t pos, int n_top, mx_sample_row *row, mx_logit_mod *mods, int *n_mods) {
    const mx_sampling *p = &s->p;
    int base = *n_mods;
    if (++s->cur_stamp == 0) {  // the stamp wrapped: clear once every 2^32 calls
        memset(s->stamp, 0, sizeof *s->stamp * (s->merge_mask + 1));
        s->cur_stamp = 1;
    }
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].id >= 0) edit_for(s, mods, n_mods, p->logit_bias[i].id)->bias += p->logit_bias[i].bias;
    if (p->repetition_penalty != 1.0f)
        for (int i = 0; i < s->n_history; i++) edit_for(s, mods, n_mods, s->history[i])->rep = p->repetition_penalty;
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f)
        for (int i = 0; i < s->n_distinct; i++) {
            int32_t id = s->distinct[i];
            edit_for(s, mods, n_mods, id)->sub = p->presence_penalty + p->frequency_penalty * (float)count_of(s, id);
        }
    *row = (mx_sample_row){.temp = p->temp, .top_p = p->top_p, .min_p = p->min_p, .top_k = p->top_k, .seed = s->seed,
                           .pos = pos, .mod_off = base, .n_mod = *n_mods - base, .allowed = p->allowed, .n_top = n_top};
}
