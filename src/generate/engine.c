// SPDX-License-Identifier: MIT
// Engine (see engine.h). Every buffer of a step is sized at creation (n_slots output rows, n_slots +
// step_tokens batch tokens), except the edits array, which grows at admission when a sequence may need
// more edits than the others; a step allocates nothing.
//
// Token choice: when every row of a step is plain greedy (no edits, no mask, no logprobs) the
// backend's argmax picks them; otherwise the backend's batched token choice runs every row with its
// own parameters (mx_ctx_forward_choose: only ids and logprobs come back). A backend without that
// record, or a step with more edits than it takes, downloads the logits and the engine's host
// sampler (the same rule, core/sample_rows.h) runs the rows over the engine's threads.
//
// The KV blocks of the sequences (prefix lookups, growth, preemption, resumption, publishing) are
// engine_blocks.c's; admission and the step here decide when they are called.
#include "generate/engine.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "generate/engine_internal.h"

mx_engine *mx_engine_create(mx_model *m, const mx_engine_opts *o, mx_error *err) {
    if (o->n_slots < 1 || o->max_ctx < 2) {
        mx_fail(err, "an engine needs at least one slot and two positions (got %d slots, %d positions)", o->n_slots,
                o->max_ctx);
        return NULL;
    }
    mx_engine *e = calloc(1, sizeof *e);
    if (!e) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    e->m = m;
    e->n_slots = o->n_slots;
    e->max_ctx = o->max_ctx;
    e->chunk = o->prefill_chunk > 0 ? o->prefill_chunk : 256;
    e->vocab = mx_model_config(m)->vocab_size;
    e->prefix_reuse = o->prefix_reuse;
    bool graphs = strcmp(mx_model_backend(m)->ops->name, "cpu") != 0;
    e->step_tokens = o->step_tokens > 0 ? o->step_tokens : graphs ? MX_ENGINE_STEP_TOKENS : e->chunk;
    if (e->step_tokens < e->chunk) e->step_tokens = e->chunk;
    // A sequence puts at most one chunk into a step, so a larger budget would only size buffers.
    if ((long)e->step_tokens > (long)e->n_slots * e->chunk) e->step_tokens = e->n_slots * e->chunk;
    e->pad = o->batch_padding > 0 ? o->batch_padding : graphs ? MX_ENGINE_PAD : 1;
    if (e->pad > MX_KV_BLOCK) e->pad = MX_KV_BLOCK;
    size_t nb = (size_t)(e->n_slots + e->step_tokens + e->pad - 1), ns = (size_t)e->n_slots;
    size_t nr = ns + (size_t)e->pad - 1;
    e->pool = mx_pool_create(o->threads);
    int threads = e->pool ? mx_pool_threads(e->pool) : 1;
    e->slots = calloc(ns, sizeof *e->slots);
    int kv_size = o->kv_size > 0 ? o->kv_size : mx_engine_default_kv_size(m, o->n_slots, o->max_ctx);
    e->n_blocks = (kv_size + MX_KV_BLOCK - 1) / MX_KV_BLOCK;
    e->table_len = (e->max_ctx + MX_KV_BLOCK - 1) / MX_KV_BLOCK;
    e->blocks = calloc(ns, sizeof *e->blocks);
    e->chain = calloc(ns, sizeof *e->chain);
    e->n_held = calloc(ns, sizeof *e->n_held);
    e->age = calloc(ns, sizeof *e->age);
    e->preempted = calloc(ns, sizeof *e->preempted);
    e->fed_before = calloc(ns, sizeof *e->fed_before);
    e->order = calloc(ns, sizeof *e->order);
    e->chunks = calloc(ns, sizeof *e->chunks);
    e->n_hashed = calloc(ns, sizeof *e->n_hashed);
    e->fresh = calloc(ns, sizeof *e->fresh);
    e->b_tok = malloc(4 * nb), e->b_pos = malloc(4 * nb), e->b_slot = malloc(4 * nb), e->b_rows = malloc(4 * nb);
    e->b_end = malloc(sizeof(int) * ns);
    e->row_seq = calloc(ns, sizeof *e->row_seq);
    e->logits = malloc(sizeof(float) * nr * (size_t)e->vocab);
    e->ids = malloc(sizeof(int32_t) * nr);
    e->rows = malloc(sizeof *e->rows * nr);
    e->outs = malloc(sizeof *e->outs * nr);
    e->scratch = malloc(MX_SAMPLE_SCRATCH_BYTES(e->vocab) * (size_t)threads);
    bool ok = e->pool && e->slots && e->blocks && e->chain && e->n_held && e->age && e->preempted && e->fed_before && e->order && e->chunks && e->n_hashed && e->fresh &&
              e->b_tok &&
              e->b_pos && e->b_slot && e->b_rows && e->b_end && e->row_seq && e->logits && e->ids && e->rows && e->outs &&
              e->scratch;
    for (int i = 0; ok && i < e->n_slots; i++)
        ok = (e->blocks[i] = malloc(sizeof(int32_t) * (size_t)e->table_len)) &&
             (e->chain[i] = malloc(sizeof(uint64_t) * (size_t)e->table_len));
    if (!ok) {
        mx_fail(err, "out of memory");
        mx_engine_free(e);
        return NULL;
    }
    // With padding the context has one more slot and one more block (after the pool's): the padding
    // tokens' own, so they never touch a sequence's cache.
    bool padded = e->pad > 1;
    int32_t pad_block = e->n_blocks;
    if (!(e->kvp = mx_kv_pool_create(e->n_blocks, MX_KV_BLOCK, err)) ||
        !(e->ctx = mx_ctx_create_pool(m, e->n_slots + padded, e->max_ctx, (int)nb, e->n_blocks + padded, err)) ||
        (padded && mx_ctx_set_blocks(e->ctx, e->n_slots, &pad_block, 1, err))) {
        mx_engine_free(e);
        return NULL;
    }
    e->decode_first = mx_ctx_split_mixed(e->ctx);
    return e;
}

void mx_engine_free(mx_engine *e) {
    if (!e) return;
    mx_ctx_free(e->ctx);
    mx_pool_free(e->pool);
    mx_kv_pool_free(e->kvp);
    for (int i = 0; e->blocks && i < e->n_slots; i++) free(e->blocks[i]);
    for (int i = 0; e->chain && i < e->n_slots; i++) free(e->chain[i]);
    free(e->blocks), free(e->chain), free(e->n_held), free(e->age), free(e->preempted), free(e->fed_before), free(e->order), free(e->chunks), free(e->n_hashed), free(e->fresh), free(e->slots);
    free(e->b_tok), free(e->b_pos), free(e->b_slot), free(e->b_rows), free(e->b_end), free(e->row_seq);
    free(e->logits), free(e->ids), free(e->rows), free(e->outs), free(e->mods), free(e->scratch);
    free(e);
}

int mx_engine_max_ctx(const mx_engine *e) { return e->max_ctx; }
int mx_engine_slots(const mx_engine *e) { return e->n_slots; }

// Room for the edits of every admitted sequence at once (grown at admission, never in a step).
static int reserve_mods(mx_engine *e, mx_error *err) {
    long need = 0;
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i]) need += mx_sampler_max_mods(e->slots[i]->sampler);
    if (need <= e->cap_mods) return 0;
    mx_logit_mod *g = realloc(e->mods, sizeof *g * (size_t)need);
    if (!g) return mx_fail(err, "out of memory (%ld logit edits)", need);
    e->mods = g;
    e->cap_mods = (int)need;
    return 0;
}

int mx_engine_default_kv_size(const mx_model *m, int n_slots, int max_ctx) {
    int64_t full = (int64_t)n_slots * max_ctx, cap = 2 * full;
    mx_backend *be = mx_model_backend(m);
    size_t free_b = 0, total_b = 0;
    if (be->ops->mem_info && be->ops->mem_info(be, &free_b, &total_b) == 0) {
        int64_t fit = (int64_t)((double)free_b * MX_ENGINE_KV_SHARE / (double)mx_model_kv_block_bytes(m)) * MX_KV_BLOCK;
        cap = fit < cap ? fit : cap;
    }
    if (cap < max_ctx) cap = max_ctx;  // one full sequence at least (the memory check reports what does not fit)
    return cap > INT32_MAX / 2 ? INT32_MAX / 2 : (int)cap;
}

int mx_engine_kv_size(const mx_engine *e) { return e->n_blocks * MX_KV_BLOCK; }

int mx_engine_admit(mx_engine *e, mx_seq *s, mx_error *err) {
    if (s->n_prompt + 1 > e->max_ctx)
        return mx_fail(err, "the prompt has %d tokens but a sequence holds %d (prompt + at least 1 generated token)",
                       s->n_prompt, e->max_ctx);
    int positions = eng_positions_needed(e, s);
    if (eng_blocks_for(positions) > e->n_blocks)
        return mx_fail(err,
                       "the request needs KV room for %d positions (%d prompt tokens + up to %d generated) but the KV "
                       "pool holds %d positions (--kv-size); shorten the prompt or max_tokens",
                       positions, s->n_prompt, positions - s->n_prompt, e->n_blocks * MX_KV_BLOCK);
    if (mx_seq_prepare(s, e->vocab, err)) return -1;
    int slot = -1;
    for (int i = 0; i < e->n_slots && slot < 0; i++)
        if (!e->slots[i]) slot = i;
    if (slot < 0 || eng_any_preempted(e)) return 1;
    int hits = eng_find_prefix(e, slot, s, 0, s->n_prompt / MX_KV_BLOCK);
    // Every prompt block cached: the last prompt token is computed again (it makes the first row),
    // so its block, shared, is copied first; if that copy does not fit, its block is computed instead.
    bool cow = hits > 0 && hits * MX_KV_BLOCK >= s->n_prompt;
    // The prompt's blocks must be free now (plus the watermark while others run); the blocks of the
    // generated tokens are taken as they fill, preempting the youngest sequence when the pool is out.
    int margin = eng_others_running(e, -1) ? eng_watermark(e) : 0, prompt_blocks = eng_blocks_for(s->n_prompt);
    if (cow && 1 + margin > mx_kv_pool_available(e->kvp)) {
        mx_kv_pool_unref(e->kvp, e->blocks[slot][--hits]);
        cow = false;
    }
    e->n_held[slot] = hits;
    if (prompt_blocks - hits + (cow ? 1 : 0) + margin > mx_kv_pool_available(e->kvp)) {  // waits for blocks
        eng_drop_blocks(e, slot);
        return 1;
    }
    if (cow) {
        int from, b = mx_kv_pool_writable(e->kvp, e->blocks[slot][hits - 1], &from, err);
        if (b < 0) {
            eng_drop_blocks(e, slot);
            return -1;
        }
        e->blocks[slot][hits - 1] = b;
        if (from >= 0 && mx_ctx_copy_block(e->ctx, from, b, err)) {
            eng_drop_blocks(e, slot);
            return -1;
        }
    }
    e->n_hashed[slot] = hits;
    e->slots[slot] = s;
    if (mx_ctx_set_blocks(e->ctx, slot, e->blocks[slot], hits, err) || reserve_mods(e, err)) {
        eng_drop_blocks(e, slot);
        e->slots[slot] = NULL;
        return -1;
    }
    int reused = cow ? s->n_prompt - 1 : hits * MX_KV_BLOCK;
    e->fresh[slot] = true;
    e->preempted[slot] = false;
    e->fed_before[slot] = 0;
    e->age[slot] = e->n_admitted++;
    s->slot = slot;
    s->n_fed = s->reused = reused;
    s->t_admit = mx_now();
    e->st.reused_tokens += (uint64_t)reused;
    e->st.prompt_tokens += (uint64_t)(s->n_prompt - reused);
    return 0;
}

void mx_engine_release(mx_engine *e, mx_seq *s) {
    if (s->slot < 0) return;
    mx_seq_end(s, MX_FINISH_CANCELLED);
    eng_drop_blocks(e, s->slot);
    e->preempted[s->slot] = false;
    e->slots[s->slot] = NULL;
    s->slot = -1;
}

void mx_engine_end(mx_engine *e, mx_seq *s, mx_finish why) {
    mx_seq_end(s, why);
    eng_drop_finished(e);
}

int mx_engine_running(const mx_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_slots; i++) n += e->slots[i] && e->slots[i]->finish == MX_FINISH_NONE;
    return n;
}

void mx_engine_forget(mx_engine *e) { mx_kv_pool_forget(e->kvp); }

void mx_engine_stats_get(const mx_engine *e, mx_engine_stats *out) {
    *out = e->st;
    mx_kv_pool_stats ps;
    mx_kv_pool_stats_get(e->kvp, &ps);
    out->kv_blocks = ps.n_blocks;
    out->kv_block_size = MX_KV_BLOCK;
    out->kv_blocks_used = ps.referenced;
    out->kv_blocks_cached = ps.cached;
    out->kv_blocks_free = ps.free;
    out->prefix_hits = ps.hits;
    out->prefix_misses = ps.misses;
    out->prefix_evictions = ps.evictions;
    out->preempted_now = 0;
    for (int i = 0; i < e->n_slots; i++)
        out->preempted_now += e->slots[i] && e->preempted[i] && e->slots[i]->finish == MX_FINISH_NONE;
}

static bool plain_greedy(const mx_sample_row *r) { return r->temp <= 0.0f && r->n_mod == 0 && !r->allowed && r->n_top < 0; }

// Appends token `tok` of sequence s at position pos to the batch.
static void put(mx_engine *e, int *n, mx_seq *s, int32_t tok, int pos) {
    e->b_tok[*n] = tok;
    e->b_pos[*n] = pos;
    e->b_slot[*n] = s->slot;
    (*n)++;
}

static void out_of_blocks(mx_seq *s, const mx_error *err) {
    snprintf(s->error, sizeof s->error, "%s", err->msg);
    mx_seq_end(s, MX_FINISH_ERROR);
}

// Appends positions [start, end) of the sequence in `slot` (a prompt chunk, or tokens fed again
// after a preemption), and its first output row when the chunk ends its prompt.
static void put_chunk(mx_engine *e, int *n, int *n_out, const eng_chunk *ch) {
    mx_seq *s = e->slots[ch->slot];
    for (int t = ch->start; t < ch->end; t++) put(e, n, s, eng_token_at(s, t), t);
    if (ch->end == s->n_prompt && s->n_gen == 0) {
        e->b_rows[*n_out] = *n - 1;
        e->row_seq[(*n_out)++] = s;
    }
}

// Fills e->order with the occupied slots, oldest sequence first; returns their count.
static int slots_by_age(mx_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_slots; i++) {
        if (!e->slots[i]) continue;
        int k = n++;
        for (; k > 0 && e->age[e->order[k - 1]] > e->age[i]; k--) e->order[k] = e->order[k - 1];
        e->order[k] = i;
    }
    return n;
}

// Pads a step of more than MX_ENGINE_PAD tokens to a multiple of e->pad of at most MX_ENGINE_PAD_MAX
// (engine.h: Padding): tokens
// of the padding slot, and when the step's rows are its tokens in order (decode steps), a greedy
// output row for each, so the plan's rows stay in place.
static void pad_step(mx_engine *e, int *n, int *n_out) {
    int target = (*n + e->pad - 1) / e->pad * e->pad;
    if (e->pad <= 1 || *n <= MX_ENGINE_PAD || target > MX_ENGINE_PAD_MAX) return;
    bool in_place = *n_out == *n;
    for (int k = 0; in_place && k < *n_out; k++) in_place = e->b_rows[k] == k;
    e->st.padding_tokens += (uint64_t)(target - *n);
    for (int j = 0; *n < target; j++, (*n)++) {
        e->b_tok[*n] = 0;
        e->b_pos[*n] = j;
        e->b_slot[*n] = e->n_slots;
        if (!in_place) continue;
        e->b_rows[*n_out] = *n;
        e->rows[(*n_out)++] = (mx_sample_row){.temp = 0.0f, .top_p = 1.0f, .n_top = -1};
    }
}

// Adds the plan runs of a step's forward pass (the backend's counters since `before`), the context's
// plan builds so far, and for a decode step (no prompt tokens) its forward and device time.
static void count_plan_runs(mx_engine *e, const mx_plan_runs *before, bool decode, double forward_s) {
    const mx_plan_runs *now = &mx_model_backend(e->m)->plan_runs;
    double device_s = now->device_seconds - before->device_seconds;
    e->st.plan_replays += now->replayed - before->replayed;
    e->st.plan_recordings += now->recorded - before->recorded;
    e->st.plan_direct_runs += now->direct - before->direct;
    e->st.plan_device_seconds += device_s;
    mx_ctx_plan_counts(e->ctx, &e->st.plans_built, &e->st.plans_evicted, &e->st.split_steps);
    if (!decode) return;
    e->st.decode_steps++;
    e->st.t_forward_decode += forward_s;
    e->st.decode_device_seconds += device_s;
}

int mx_engine_step(mx_engine *e, mx_error *err) {
    double t_start = mx_now();
    int n = 0, n_out = 0, prefill = 0, n_chunks = 0;
    for (int i = 0; i < e->n_slots; i++) e->b_end[i] = -1;
    eng_resume_preempted(e);
    // Oldest first: a sequence that needs a block when the pool is out preempts a younger one, which
    // has put nothing in this step yet.
    int n_occ = slots_by_age(e);
    for (int k = 0; k < n_occ; k++) {
        int i = e->order[k];
        mx_seq *s = e->slots[i];
        if (s->finish != MX_FINISH_NONE || e->preempted[i]) continue;
        if (e->fresh[i] && !eng_start_sequence(e, i)) continue;  // waits for another's prompt blocks
        int target = eng_fed_target(s);
        if (s->n_fed < target) {  // the prompt, or after a preemption the tokens fed before it
            int start = s->n_fed, end = (start / e->chunk + 1) * e->chunk;
            if (end > target) end = target;
            if (prefill > 0 && prefill + (end - start) > e->step_tokens) continue;
            int g = eng_grow_blocks(e, i, end, err);
            if (g) {
                if (g < 0) out_of_blocks(s, err);
                continue;
            }
            eng_chunk ch = {i, start, end};
            if (e->decode_first)
                e->chunks[n_chunks++] = ch;  // put after every decode token
            else
                put_chunk(e, &n, &n_out, &ch);
            int redo_end = end < e->fed_before[i] ? end : e->fed_before[i];  // computed before a preemption
            if (redo_end > start) e->st.recomputed_tokens += (uint64_t)(redo_end - start);
            prefill += end - start;
            e->b_end[i] = end;
        } else {
            int g = eng_grow_blocks(e, i, s->n_fed + 1, err);
            if (g) {
                if (g < 0) out_of_blocks(s, err);
                continue;
            }
            put(e, &n, s, s->last, s->n_fed);
            e->b_end[i] = s->n_fed + 1;
            e->b_rows[n_out] = n - 1;
            e->row_seq[n_out++] = s;
        }
    }
    for (int k = 0; k < n_chunks; k++) put_chunk(e, &n, &n_out, &e->chunks[k]);
    if (n == 0) {
        eng_drop_finished(e);  // sequences ended by out_of_blocks
        return 0;
    }
    int n_mods = 0;
    bool greedy = true;
    for (int k = 0; k < n_out; k++) {
        mx_seq *s = e->row_seq[k];
        mx_sampler_row(s->sampler, e->b_pos[e->b_rows[k]], s->o.n_logprobs, &e->rows[k], e->mods, &n_mods);
        greedy = greedy && plain_greedy(&e->rows[k]);
    }
    int n_real = n_out;  // output rows of sequences; padding rows come after them
    pad_step(e, &n, &n_out);
    bool on_backend = !greedy && mx_ctx_can_choose(e->ctx) && n_mods <= mx_ctx_max_edits(e->ctx);
    bool host = !greedy && !on_backend;
    mx_batch b = {n, e->b_tok, e->b_pos, e->b_slot, n_out, e->b_rows};
    const mx_plan_runs runs0 = mx_model_backend(e->m)->plan_runs;
    double t0 = mx_now();
    int rc = on_backend ? mx_ctx_forward_choose(e->ctx, &b, e->rows, e->mods, n_mods, e->outs, err)
                        : mx_ctx_forward(e->ctx, &b, host ? e->logits : NULL, host ? NULL : e->ids, err);
    double t1 = mx_now();
    if (rc == 0 && host) mx_sample_rows_host(e->pool, e->logits, n_real, e->vocab, e->rows, e->mods, e->scratch, e->outs);
    double t2 = mx_now(), dt = t2 - t0;
    e->st.t_prepare += t0 - t_start;
    e->st.t_forward += t1 - t0;
    e->st.t_host_choose += t2 - t1;
    count_plan_runs(e, &runs0, prefill == 0 && rc == 0, t1 - t0);
    if (rc) {
        for (int i = 0; i < e->n_slots; i++)
            if (e->b_end[i] >= 0) mx_seq_end(e->slots[i], MX_FINISH_ERROR);
        eng_drop_finished(e);
        return -1;
    }
    for (int i = 0; i < e->n_slots; i++) {
        if (e->b_end[i] < 0) continue;
        e->slots[i]->n_fed = e->b_end[i];
        eng_publish_full(e, i);
    }
    for (int k = 0; k < n_real; k++) {
        if (greedy) e->outs[k] = (mx_sample_out){.id = e->ids[k]};
        mx_seq_take(e->row_seq[k], e->m, &e->outs[k], e->max_ctx);
    }
    eng_drop_finished(e);
    e->st.t_finish += mx_now() - t2;
    e->st.steps++;
    e->st.decode_rows += prefill == 0 ? (uint64_t)n_real : 0;
    e->st.generated_tokens += (uint64_t)n_real;
    e->st.busy_seconds += dt;
    e->st.last_tok_per_s = dt > 0 ? n_real / dt : 0.0;
    return 0;
}

int mx_engine_run(mx_engine *e, mx_error *err) {
    while (mx_engine_running(e) > 0)
        if (mx_engine_step(e, err)) return -1;
    return 0;
}
