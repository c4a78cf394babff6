// SPDX-License-Identifier: MIT
// The KV blocks of the engine's sequences (engine.h): prefix-cache lookups, on-demand growth,
// preemption of the youngest running sequence when the pool is out, resumption by recompute, and
// publishing of full blocks. The batch step (engine.c) calls these between its own decisions.
#include <string.h>

#include "generate/engine_internal.h"

// Positions a sequence may fill: its prompt and every token it may generate but the last (which is
// never fed back), within the context.
int eng_positions_needed(const mx_engine *e, const mx_seq *s) {
    int64_t n = (int64_t)s->n_prompt + s->max_gen - 1;
    return n < e->max_ctx ? (int)n : e->max_ctx;
}

int eng_blocks_for(int positions) { return (positions + MX_KV_BLOCK - 1) / MX_KV_BLOCK; }

// Blocks kept free beyond a new or resumed sequence's first blocks while others run, so that the
// running ones can grow a while before anyone is preempted.
int eng_watermark(const mx_engine *e) {
    int w = (int)(e->n_blocks * MX_ENGINE_KV_WATERMARK);
    return w > 0 ? w : 1;
}

// Tokens a sequence has fed (or must feed again after a preemption) before its next row: the prompt,
// then every generated token but the last (the last is fed by the next decode step).
int eng_fed_target(const mx_seq *s) { return s->n_prompt + (s->n_gen > 0 ? s->n_gen - 1 : 0); }

// Token at position p of a sequence's cache: the prompt, then the generated tokens.
int32_t eng_token_at(const mx_seq *s, int p) { return p < s->n_prompt ? s->prompt[p] : s->gen[p - s->n_prompt]; }

// True when a sequence other than `slot` is running (admitted, unfinished, not preempted).
bool eng_others_running(const mx_engine *e, int slot) {
    for (int j = 0; j < e->n_slots; j++)
        if (j != slot && e->slots[j] && e->slots[j]->finish == MX_FINISH_NONE && !e->preempted[j]) return true;
    return false;
}

// Gives back every block of a slot.
void eng_drop_blocks(mx_engine *e, int slot) {
    for (int i = 0; i < e->n_held[slot]; i++) mx_kv_pool_unref(e->kvp, e->blocks[slot][i]);
    e->n_held[slot] = e->n_hashed[slot] = 0;
    mx_ctx_set_blocks(e->ctx, slot, NULL, 0, NULL);
}

// Extends the slot's table (holding `have` blocks) with the sequence's next full blocks (prompt, then
// generated tokens) found in the prefix cache, in order, until the first miss or `limit` blocks: one
// reference each, their keys in the slot's chain. Returns the blocks held now.
int eng_find_prefix(mx_engine *e, int slot, const mx_seq *s, int have, int limit) {
    uint64_t parent = have > 0 ? e->chain[slot][have - 1] : MX_KV_HASH_ROOT;
    int32_t toks[MX_KV_BLOCK];
    while (e->prefix_reuse && have < limit) {
        for (int k = 0; k < MX_KV_BLOCK; k++) toks[k] = eng_token_at(s, have * MX_KV_BLOCK + k);
        uint64_t h = mx_kv_hash(parent, toks, MX_KV_BLOCK);
        int b = mx_kv_pool_lookup(e->kvp, h, toks);
        if (b < 0) break;
        e->blocks[slot][have] = b;
        e->chain[slot][have++] = parent = h;
    }
    return have;
}

// True while a preempted sequence waits: new sequences queue behind it.
bool eng_any_preempted(const mx_engine *e) {
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i] && e->preempted[i] && e->slots[i]->finish == MX_FINISH_NONE) return true;
    return false;
}

// The sequence to preempt when `slot` needs a block and the pool has none: the youngest running
// sequence (last admitted) that holds blocks, or `slot` itself when it is the youngest. -1 when
// `slot` is the only running sequence holding blocks (then nothing can be freed for it).
static int pick_victim(const mx_engine *e, int slot) {
    int v = slot;
    bool other = false;
    for (int j = 0; j < e->n_slots; j++) {
        const mx_seq *t = e->slots[j];
        if (j == slot || !t || t->finish != MX_FINISH_NONE || e->preempted[j] || e->n_held[j] == 0) continue;
        other = true;
        if (e->age[j] > e->age[v]) v = j;
    }
    return other ? v : -1;
}

// Takes every block of a running sequence back; it keeps its slot, its sampling state and its
// output, and later recomputes its tokens (resume_preempted). Its full blocks were published as they
// filled, so with the prefix cache they stay cached and the recompute finds them unless evicted.
static void preempt(mx_engine *e, int slot) {
    eng_drop_blocks(e, slot);
    if (e->slots[slot]->n_fed > e->fed_before[slot]) e->fed_before[slot] = e->slots[slot]->n_fed;
    e->slots[slot]->n_fed = 0;
    e->preempted[slot] = true;
    e->fresh[slot] = false;
    e->st.preemptions++;
}

// Gives the slot blocks for positions up to end - 1, preempting the youngest running sequences when
// the pool is out. Returns 0, 1 when the slot's own sequence was preempted, -1 when it cannot grow
// (err names the numbers).
int eng_grow_blocks(mx_engine *e, int slot, int end, mx_error *err) {
    bool grown = false;
    while (e->n_held[slot] * MX_KV_BLOCK < end) {
        int b = mx_kv_pool_alloc(e->kvp, err);
        if (b < 0) {
            int v = pick_victim(e, slot);
            if (v < 0) return -1;
            preempt(e, v);
            if (v == slot) return 1;
            continue;
        }
        e->blocks[slot][e->n_held[slot]++] = b;
        grown = true;
    }
    return grown ? mx_ctx_set_blocks(e->ctx, slot, e->blocks[slot], e->n_held[slot], err) : 0;
}

// Resumes preempted sequences, oldest first, while their cached blocks plus the blocks they must
// recompute (and the watermark, while others run) fit: each takes its cached full blocks and feeds the
// rest of its tokens again from there, without rows (its next row is that of its next token). A
// sequence alone resumes whatever the pool holds (grow_blocks reports what does not fit).
void eng_resume_preempted(mx_engine *e) {
    for (;;) {
        int slot = -1;
        for (int i = 0; i < e->n_slots; i++)
            if (e->slots[i] && e->preempted[i] && e->slots[i]->finish == MX_FINISH_NONE &&
                (slot < 0 || e->age[i] < e->age[slot]))
                slot = i;
        if (slot < 0) return;
        mx_seq *s = e->slots[slot];
        int target = eng_fed_target(s);
        // before its first row the last prompt token is always computed (it makes that row)
        int limit = s->n_gen > 0 ? target / MX_KV_BLOCK : (s->n_prompt - 1) / MX_KV_BLOCK;
        int hits = eng_find_prefix(e, slot, s, 0, limit);
        e->n_held[slot] = hits;
        bool others = eng_others_running(e, slot);
        if (others && eng_blocks_for(target + 1) - hits + eng_watermark(e) > mx_kv_pool_available(e->kvp)) {
            eng_drop_blocks(e, slot);
            return;  // younger preempted sequences wait behind it
        }
        e->n_hashed[slot] = hits;
        mx_ctx_set_blocks(e->ctx, slot, e->blocks[slot], hits, NULL);
        s->n_fed = hits * MX_KV_BLOCK;
        e->preempted[slot] = false;
    }
}

// True when another sequence is computing, in a block of its prompt, the block of s's prompt that s
// would compute next (same tokens from the start): n > 1 choices of one request, or concurrent
// requests with one system prompt. s waits for it and then finds the block in the prefix cache.
static bool block_in_flight(const mx_engine *e, int slot) {
    const mx_seq *s = e->slots[slot];
    int upto = (s->n_fed / MX_KV_BLOCK + 1) * MX_KV_BLOCK;  // end of s's next block
    if (!e->prefix_reuse || s->n_fed % MX_KV_BLOCK != 0 || upto > s->n_prompt - 1) return false;
    for (int j = 0; j < e->n_slots; j++) {
        const mx_seq *t = e->slots[j];
        if (j == slot || !t || e->fresh[j] || e->preempted[j] || t->finish != MX_FINISH_NONE || t->n_fed >= upto || t->n_prompt < upto)
            continue;
        if (memcmp(t->prompt, s->prompt, sizeof *s->prompt * (size_t)upto) == 0) return true;
    }
    return false;
}

// Before a sequence's first step: looks the prompt up again (blocks published since admission or
// the last call); returns false while another sequence computes its next prompt block, else
// counts the prefix-cache outcome and lets it start.
bool eng_start_sequence(mx_engine *e, int slot) {
    mx_seq *s = e->slots[slot];
    int have = e->n_held[slot];
    if (s->n_fed == have * MX_KV_BLOCK && e->n_hashed[slot] == have) {  // not after a copy-on-write
        int now = eng_find_prefix(e, slot, s, have, (s->n_prompt - 1) / MX_KV_BLOCK), more = now - have;
        if (more > 0) {
            e->n_held[slot] = e->n_hashed[slot] = now;
            mx_ctx_set_blocks(e->ctx, slot, e->blocks[slot], now, NULL);
            s->n_fed = s->reused = now * MX_KV_BLOCK;
            e->st.reused_tokens += (uint64_t)more * MX_KV_BLOCK;
            e->st.prompt_tokens -= (uint64_t)more * MX_KV_BLOCK;
        }
    }
    if (block_in_flight(e, slot)) return false;
    if (e->prefix_reuse) mx_kv_pool_count(e->kvp, e->n_hashed[slot], s->n_prompt / MX_KV_BLOCK - e->n_hashed[slot]);
    e->fresh[slot] = false;
    return true;
}

// Keys the slot's newly filled blocks in the hash chain and publishes them to the prefix cache.
void eng_publish_full(mx_engine *e, int slot) {
    const mx_seq *s = e->slots[slot];
    while ((e->n_hashed[slot] + 1) * MX_KV_BLOCK <= s->n_fed) {
        int i = e->n_hashed[slot];
        int32_t toks[MX_KV_BLOCK];
        for (int k = 0; k < MX_KV_BLOCK; k++) toks[k] = eng_token_at(s, i * MX_KV_BLOCK + k);
        uint64_t h = mx_kv_hash(i > 0 ? e->chain[slot][i - 1] : MX_KV_HASH_ROOT, toks, MX_KV_BLOCK);
        e->chain[slot][i] = h;
        if (e->prefix_reuse) mx_kv_pool_publish(e->kvp, e->blocks[slot][i], h, toks);
        e->n_hashed[slot]++;
    }
}

// Gives back the blocks of every finished sequence at once (its full blocks stay in the prefix
// cache), so that they serve the running ones before the consumer releases it.
void eng_drop_finished(mx_engine *e) {
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i] && e->slots[i]->finish != MX_FINISH_NONE && e->n_held[i] > 0) eng_drop_blocks(e, i);
}
