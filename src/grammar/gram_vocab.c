// SPDX-License-Identifier: MIT
// The tokenizer's side of constrained decoding (mx_gram_vocab): each id's decoded bytes (borrowed
// from the tokenizer), a byte trie over them for the matcher's depth-first walks, and the ids that
// end a sequence. Special tokens (control tokens such as <|im_start|>) never match grammar text,
// except those a vocabulary is made with as text (tool-call markers); ids with no bytes are never
// allowed. Also the matcher's incremental UTF-8 reader.
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_internal.h"

int gram_utf8_feed(gram_utf8 *u, uint8_t b, uint32_t *cp) {
    if (u->need == 0) {
        if (b < 0x80) {
            *cp = b;
            return 1;
        }
        if (b >= 0xC2 && b <= 0xDF) u->need = 1, u->value = b & 0x1Fu;
        else if (b >= 0xE0 && b <= 0xEF) u->need = 2, u->value = b & 0x0Fu;
        else if (b >= 0xF0 && b <= 0xF4) u->need = 3, u->value = b & 0x07u;
        else return -1;
        u->have = 1;
        return 0;
    }
    if ((b & 0xC0) != 0x80) return -1;
    // Overlong and surrogate forms are cut at the second byte, as UTF-8 requires.
    if (u->have == 1) {
        uint32_t lead = u->value;
        if (u->need == 2 && ((lead == 0 && b < 0xA0) || (lead == 0x0D && b >= 0xA0))) return -1;
        if (u->need == 3 && ((lead == 0 && b < 0x90) || (lead == 4 && b >= 0x90))) return -1;
    }
    u->value = (u->value << 6) | (b & 0x3Fu);
    u->have++;
    if (--u->need == 0) {
        *cp = u->value;
        *u = (gram_utf8){0};
        return 1;
    }
    return 0;
}

void gram_utf8_range(const gram_utf8 *u, uint32_t *lo, uint32_t *hi) {
    int shift = 6 * u->need;
    *lo = u->value << shift;
    *hi = *lo | ((1u << shift) - 1);
    if (*hi > 0x10FFFF) *hi = 0x10FFFF;
    static const uint32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000};  // by sequence length
    uint32_t floor = smallest[u->have + u->need];
    if (*lo < floor) *lo = floor;
}

static int32_t trie_child(mx_gram_vocab *v, int32_t node, uint8_t b, int32_t *cap) {
    int32_t prev = -1;
    for (int32_t c = v->nodes[node].first_child; c >= 0; prev = c, c = v->nodes[c].next_sibling)
        if (v->nodes[c].byte == b) return c;
    if (v->n_nodes == *cap) {
        int32_t nc = *cap * 2;
        gram_trie_node *n = realloc(v->nodes, sizeof *n * (size_t)nc);
        if (!n) return -1;
        v->nodes = n;
        *cap = nc;
    }
    int32_t id = v->n_nodes++;
    v->nodes[id] = (gram_trie_node){.first_child = -1, .next_sibling = -1, .token = -1, .byte = b};
    if (prev < 0) v->nodes[node].first_child = id;
    else v->nodes[prev].next_sibling = id;
    return id;
}

mx_gram_vocab *mx_gram_vocab_create(const mx_tokenizer *tok, int vocab, const int32_t *stop_ids, int n_stop,
                                    mx_error *err) {
    return mx_gram_vocab_create_with_specials(tok, vocab, stop_ids, n_stop, NULL, 0, err);
}

mx_gram_vocab *mx_gram_vocab_create_with_specials(const mx_tokenizer *tok, int vocab, const int32_t *stop_ids,
                                                  int n_stop, const int32_t *specials, int n_specials, mx_error *err) {
    mx_gram_vocab *v = calloc(1, sizeof *v);
    if (!v) return mx_fail(err, "out of memory"), NULL;
    v->vocab = vocab;
    v->words = (vocab + 31) / 32;
    v->bytes = calloc((size_t)vocab, sizeof *v->bytes);
    v->len = calloc((size_t)vocab, sizeof *v->len);
    v->dup_next = malloc(sizeof *v->dup_next * (size_t)vocab);
    v->stop_ids = malloc(sizeof *v->stop_ids * (size_t)(n_stop + 1));
    int32_t cap = 1 << 16;
    v->nodes = malloc(sizeof *v->nodes * (size_t)cap);
    if (!v->bytes || !v->len || !v->dup_next || !v->stop_ids || !v->nodes) goto oom;
    v->nodes[0] = (gram_trie_node){.first_child = -1, .next_sibling = -1, .token = -1};
    v->n_nodes = 1;
    for (int i = 0; i < n_stop; i++)
        if (stop_ids[i] >= 0 && stop_ids[i] < vocab) v->stop_ids[v->n_stop++] = stop_ids[i];
    int32_t n_tok = mx_tokenizer_vocab_size(tok);
    for (int32_t id = 0; id < vocab; id++) {
        v->dup_next[id] = -1;
        size_t len = 0;
        const char *b = id < n_tok ? mx_tokenizer_token_bytes(tok, id, &len) : NULL;
        bool as_text = false;
        for (int i = 0; i < n_specials; i++) as_text |= specials[i] == id;
        if (!b || len == 0 || (mx_tokenizer_is_special(tok, id) && !as_text)) continue;
        bool is_stop = false;
        for (int i = 0; i < v->n_stop; i++) is_stop |= v->stop_ids[i] == id;
        if (is_stop) continue;
        v->bytes[id] = (const uint8_t *)b;
        v->len[id] = (uint32_t)len;
        int32_t node = 0;
        for (size_t k = 0; k < len; k++)
            if ((node = trie_child(v, node, (uint8_t)b[k], &cap)) < 0) goto oom;
        if (v->nodes[node].token < 0) {
            v->nodes[node].token = id;
        } else {
            v->dup_next[id] = v->dup_next[v->nodes[node].token];
            v->dup_next[v->nodes[node].token] = id;
        }
        int32_t chars = 0;
        for (size_t k = 0; k < len; k++) chars += ((uint8_t)b[k] & 0xC0) != 0x80;
        if (chars > v->max_chars) v->max_chars = chars;
    }
    return v;
oom:
    mx_gram_vocab_free(v);
    mx_fail(err, "out of memory");
    return NULL;
}

void mx_gram_vocab_free(mx_gram_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->len);
    free(v->dup_next);
    free(v->stop_ids);
    free(v->nodes);
    free(v);
}

int mx_gram_vocab_size(const mx_gram_vocab *v) { return v->vocab; }
int mx_gram_vocab_mask_words(const mx_gram_vocab *v) { return v->words; }
