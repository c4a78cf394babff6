// SPDX-License-Identifier: MIT
// Private layout of mx_tokenizer and the helpers its files share (tokenizer module only; no other
// module includes this). Everything here is built once by tok_load.c and is read-only afterwards,
// which is what makes concurrent encode/decode safe: per-call state lives in tok_encode.c's
// context or in the caller's mx_detok.
#ifndef MX_TOKENIZER_TOK_INTERNAL_H
#define MX_TOKENIZER_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

// ---- string -> id map (open addressing; keys are borrowed and must outlive the map) -------------
typedef struct tok_str_slot {
    const char *key; // NULL = empty
    uint32_t len;
    uint32_t hash;
    int32_t id;
} tok_str_slot;
typedef struct tok_strmap {
    tok_str_slot *slots;
    size_t cap; // power of two
    size_t count;
} tok_strmap;
int tok_strmap_init(tok_strmap *m, size_t expected);
// Inserts key -> id; an existing key keeps its first id. Returns 0, or -1 when out of memory.
int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t id);
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len); // -1 if absent
void tok_strmap_free(tok_strmap *m);
uint32_t tok_hash_bytes(const void *p, size_t n);
// Grows *p (an array of elem-byte items, capacity *cap) to hold at least `need` items, doubling;
// 0 or -1 when out of memory (then *p is unchanged).
int tok_reserve(void **p, size_t *cap, size_t need, size_t elem);

// ---- (left id, right id) -> merge rank and merged id ---------------------------------------------
typedef struct tok_pair_slot {
    uint64_t key;   // (left << 32) | right
    int32_t rank;   // merge priority + 1 (lower merges first); 0 = empty slot
    int32_t new_id;
} tok_pair_slot;
typedef struct tok_pairmap {
    tok_pair_slot *slots;
    size_t cap;
    size_t count;
} tok_pairmap;
int tok_pairmap_init(tok_pairmap *m, size_t expected);
// rank >= 0 is the merge's index in model.merges; the slot stores rank + 1.
int tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t new_id);
// Returns the slot for the pair or NULL.
const tok_pair_slot *tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right);
void tok_pairmap_free(tok_pairmap *m);

// ---- UTF-8 helpers ---------------------------------------------------------------------------------
// Classifies the sequence at p (n bytes available): returns 1 and *len = character length when a
// well-formed character starts there, 0 when the bytes are a valid but incomplete prefix, -1 and
// *len = length of the maximal invalid subpart (>= 1) otherwise.
int tok_utf8_classify(const unsigned char *p, size_t n, size_t *len);
// True when all n bytes are well-formed UTF-8.
bool tok_utf8_valid(const unsigned char *p, size_t n);
// Copy of s with each maximal invalid subpart (and an incomplete tail) replaced by U+FFFD.
char *tok_utf8_sanitize(const char *s, size_t n, size_t *out_len);

// Unicode whitespace (controls 9-13 and 0x85, categories Zs/Zl/Zp), as char::is_whitespace.
bool tok_utf8_is_space(uint32_t cp);

// ---- byte-level (GPT-2) byte <-> printable character mapping ------------------------------------
// UTF-8 of the character that stands for byte b (1 or 2 bytes), NUL-terminated.
const char *tok_bytelevel_char(unsigned b);
// Byte that codepoint cp stands for, or -1 if cp is not in the mapping.
int tok_bytelevel_byte(uint32_t cp);

// ---- normalizer ----------------------------------------------------------------------------------
typedef enum tok_norm_kind {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_PREPEND, // text = prefix, only on non-empty input
    TOK_NORM_REPLACE, // regex (literal for String patterns) -> text
    TOK_NORM_STRIP,   // strip_left / strip_right whitespace
} tok_norm_kind;
typedef struct tok_norm_step {
    tok_norm_kind kind;
    char *text;
    pcre2_code *re;
    bool strip_left, strip_right;
} tok_norm_step;

// ---- pre-tokenizer -------------------------------------------------------------------------------
typedef enum tok_split_behavior {
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;
typedef enum tok_pre_kind {
    TOK_PRE_SPLIT,        // regex split
    TOK_PRE_PREFIX_SPACE, // ByteLevel add_prefix_space: prepend ' ' to pieces not starting with one
    TOK_PRE_METASPACE,    // ' ' -> replacement, optional prepend, optional split
} tok_pre_kind;
typedef enum tok_prepend_scheme {
    TOK_PREPEND_ALWAYS,
    TOK_PREPEND_FIRST,
    TOK_PREPEND_NEVER,
} tok_prepend_scheme;
typedef struct tok_pre_step {
    tok_pre_kind kind;
    pcre2_code *re;
    tok_split_behavior behavior;
    bool invert;
    char replacement[8]; // Metaspace replacement character (UTF-8)
    tok_prepend_scheme prepend;
    bool split;
} tok_pre_step;

// ---- added tokens --------------------------------------------------------------------------------
typedef struct tok_added {
    const char *content; // as matched (normalized form for normalized tokens)
    uint32_t len;
    int32_t id;
    bool special, lstrip, rstrip, normalized, single_word;
} tok_added;
// Matcher over one class of added tokens (raw-text or normalized-text ones): sorted by first byte,
// then by length descending, so the first hit at a position is the longest.
typedef struct tok_added_set {
    tok_added *items;
    size_t n;
    uint32_t first[257]; // items with first byte b are [first[b], first[b+1])
} tok_added_set;

// ---- the tokenizer -------------------------------------------------------------------------------
enum {
    TOK_ID_SPECIAL = 1,
    TOK_ID_ADDED = 2,
};

struct mx_tokenizer {
    char *path;
    mx_arena arena;  // token strings (core/arena.h: they never move), no limit

    int32_t n_ids;           // max id + 1
    const char **id_str;     // [n_ids] raw token string, NULL for unused ids
    uint8_t *id_flags;       // [n_ids] TOK_ID_*
    const char **id_text;    // [n_ids] decoded bytes of each id (not NUL-terminated)
    uint32_t *id_text_len;   // [n_ids]
    size_t max_text_len;

    tok_strmap vocab;        // model vocabulary
    tok_strmap added_map;    // added-token content -> id
    tok_pairmap merges;

    // model options
    bool ignore_merges, byte_fallback, fuse_unk;
    int32_t unk_id;          // -1 if none
    int32_t byte_ids[256];   // byte-level: id of each byte's character; byte_fallback: <0xXX>

    tok_added_set added_raw;  // matched in the raw text
    tok_added_set added_norm; // matched in normalized text

    tok_norm_step *norm;
    size_t n_norm;
    tok_pre_step *pre;
    size_t n_pre;
    bool byte_level;         // pre-tokenizer maps bytes to GPT-2 characters before the model

    // decoder, applied to each token's string to give id_text
    bool dec_byte_level;     // GPT-2 characters -> bytes
    bool dec_byte_fallback;  // "<0xAB>" -> byte 0xAB
    int n_dec_replace;
    char *dec_replace_from[4], *dec_replace_to[4];
    bool strip_first_space;  // decoder strips one leading ' ' of the first token
};

// tok_config.c: reads normalizer / pre_tokenizer / decoder objects (jansson) into tok.
struct json_t;
int tok_config_normalizer(mx_tokenizer *tok, struct json_t *j, mx_error *err);
int tok_config_pre_tokenizer(mx_tokenizer *tok, struct json_t *j, mx_error *err);
int tok_config_decoder(mx_tokenizer *tok, struct json_t *j, mx_error *err);
// Compiles a PCRE2 pattern with UTF+UCP (JIT when available); literal when is_literal.
pcre2_code *tok_regex_compile(const char *pattern, bool is_literal, mx_error *err);

// tok_normalize.c: applies tok->norm to s; returns a malloc'ed string (or NULL + err).
char *tok_normalize(const mx_tokenizer *tok, const char *s, size_t n, size_t *out_len, mx_error *err);

// ---- per-call encode scratch (never shared between threads) -------------------------------------
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;
int tok_ids_push(tok_ids *ids, int32_t id); // -1 when out of memory

// tok_pretok.c: the pre-tokenizer splits one normalized span into pieces.
typedef struct tok_piece {
    size_t off, len; // in the current buffer
    bool first;      // starts at offset 0 of the whole input (Metaspace prepend_scheme "first")
} tok_piece;
typedef struct tok_pretok_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    tok_piece *pieces[2];
    size_t piece_cap[2];
    char *bufs[2];
    size_t buf_cap[2];
    struct tok_interval *iv;
    size_t iv_cap;
} tok_pretok_scratch;
void tok_pretok_scratch_free(tok_pretok_scratch *s);
// Splits text[0, n) into pieces; on success *buf points at the text the pieces index (text itself
// or a scratch buffer) and *pieces / *n_pieces at scratch storage valid until the next call.
int tok_pretokenize(const mx_tokenizer *tok, tok_pretok_scratch *s, const char *text, size_t n, bool at_start,
                    const char **buf, const tok_piece **pieces, size_t *n_pieces, mx_error *err);

// tok_bpe.c: the BPE model turns one piece into ids (with a bounded per-call word cache).
typedef struct tok_bpe_scratch {
    struct tok_sym *sym;
    size_t sym_cap;
    struct tok_heap_item *heap;
    size_t heap_cap;
    char *str;
    size_t str_cap;
    struct tok_cache_slot *cache;
    size_t cache_cap, cache_count;
    char *cache_keys;
    size_t keys_len, keys_cap;
    tok_ids cache_ids;
} tok_bpe_scratch;
void tok_bpe_scratch_free(tok_bpe_scratch *s);
int tok_bpe_encode_piece(const mx_tokenizer *tok, tok_bpe_scratch *s, const char *piece, size_t n, tok_ids *out,
                         mx_error *err);

// tok_json_scan.c: fast scanning of the two big members (model.vocab, model.merges).
typedef struct tok_span {
    size_t start, end; // [start, end) of the raw JSON value; start == end when absent
} tok_span;
typedef int (*tok_vocab_fn)(void *ctx, const char *key, size_t len, int64_t id);
typedef int (*tok_merge_fn)(void *ctx, const char *a, size_t alen, const char *b, size_t blen);
// Walks the raw vocab object / merges array starting at doc[start] (a '{' / '['), decoding JSON
// strings and calling fn per entry; *end is set past the closing bracket. -1 with err on
// malformed input or when a callback fails.
int tok_json_scan_vocab(const char *doc, size_t n, size_t start, size_t *end, tok_vocab_fn fn, void *ctx,
                        mx_error *err);
int tok_json_scan_merges(const char *doc, size_t n, size_t start, size_t *end, tok_merge_fn fn, void *ctx,
                         mx_error *err);
// One pass over the top-level "model" object: model.vocab entries go to on_vocab, then
// model.merges entries to on_merge, and their raw spans are returned so the caller can cut them
// out before handing the rest to jansson. Returns 0 on success; 1 when the layout is not the
// expected one (no model, type other than "BPE", merges before vocab, ...) and -1 with err on
// malformed content; after a nonzero return the caller starts again from a full jansson parse.
int tok_json_scan_model(const char *doc, size_t n, tok_vocab_fn on_vocab, tok_merge_fn on_merge, void *ctx,
                        tok_span *vocab, tok_span *merges, mx_error *err);

#endif
