// SPDX-License-Identifier: MIT
// mx_tokenizer_load / mx_tokenizer_free and the small lookups. Loading reads the whole file, reads
// model.vocab and model.merges with the fast scanner (tok_json_scan.c), parses the rest with
// jansson, and builds every table the encoder and decoder need, so that afterwards the tokenizer
// is immutable. The tokenizer owns all its memory: strings live in its arena, tables are freed by
// mx_tokenizer_free.
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "io/mapped_file.h"
#include "tokenizer/tok_internal.h"

typedef struct vocab_entry {
    const char *s;
    uint32_t len;
    int32_t id;
} vocab_entry;

typedef struct load_ctx {
    mx_tokenizer *tok;
    mx_error *err;
    vocab_entry *vocab;
    size_t n_vocab, cap_vocab;
    int32_t max_id;
    size_t n_merges;
    char *concat;
    size_t concat_cap;
} load_ctx;

// Token ids index dense per-id tables, so the largest id sets their size: real vocabularies stay
// below 300k ids, and an id past this bound would ask for gigabytes.
#define TOK_MAX_ID ((1 << 22) - 1)

static int on_vocab(void *p, const char *key, size_t len, int64_t id) {
    load_ctx *c = p;
    if (id < 0 || id > TOK_MAX_ID)
        return mx_fail(c->err, "model.vocab: id %lld of \"%.*s\" is out of range (0 to %d)", (long long)id, (int)len, key,
                       TOK_MAX_ID);
    if (c->n_vocab == c->cap_vocab) {
        size_t cap = c->cap_vocab ? c->cap_vocab * 2 : 1024;
        vocab_entry *v = realloc(c->vocab, cap * sizeof *v);
        if (!v) return mx_fail(c->err, "out of memory");
        c->vocab = v;
        c->cap_vocab = cap;
    }
    char *s = mx_arena_strndup(&c->tok->arena, key, len);
    if (!s || tok_strmap_put(&c->tok->vocab, s, len, (int32_t)id) != 0) return mx_fail(c->err, "out of memory");
    c->vocab[c->n_vocab++] = (vocab_entry){s, (uint32_t)len, (int32_t)id};
    if (id > c->max_id) c->max_id = (int32_t)id;
    return 0;
}

static int on_merge(void *p, const char *a, size_t alen, const char *b, size_t blen) {
    load_ctx *c = p;
    const mx_tokenizer *tok = c->tok;
    size_t index = c->n_merges++;
    if (!c->concat || alen + blen > c->concat_cap) {  // allocated on the first merge, even an empty one
        size_t cap = (alen + blen) * 2 + 64;
        char *s = realloc(c->concat, cap);
        if (!s) return mx_fail(c->err, "out of memory");
        c->concat = s;
        c->concat_cap = cap;
    }
    memcpy(c->concat, a, alen);
    memcpy(c->concat + alen, b, blen);
    int32_t ia = tok_strmap_get(&tok->vocab, a, alen);
    int32_t ib = tok_strmap_get(&tok->vocab, b, blen);
    int32_t im = tok_strmap_get(&tok->vocab, c->concat, alen + blen);
    if (ia < 0 || ib < 0 || im < 0)
        return mx_fail(c->err, "model.merges[%zu] (\"%.*s\" \"%.*s\"): %s not in the vocab", index, (int)alen, a,
                       (int)blen, b, ia < 0 || ib < 0 ? "a part is" : "the merged token is");
    if (tok_pairmap_put(&c->tok->merges, ia, ib, (int32_t)index, im) != 0) return mx_fail(c->err, "out of memory");
    return 0;
}

// Slow path: vocab and merges from a jansson tree (used when the fast scanner gives up).
static int vocab_from_json(load_ctx *c, json_t *vocab) {
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v)) return mx_fail(c->err, "model.vocab: id of \"%s\" is not an integer", key);
        if (on_vocab(c, key, strlen(key), json_integer_value(v)) != 0) return -1;
    }
    return 0;
}

static int merges_from_json(load_ctx *c, json_t *merges) {
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        if (json_is_string(m)) {
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            if (!sp) return mx_fail(c->err, "model.merges[%zu]: \"%s\" is not two tokens", i, s);
            if (on_merge(c, s, (size_t)(sp - s), sp + 1, strlen(sp + 1)) != 0) return -1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
            if (on_merge(c, json_string_value(a), json_string_length(a), json_string_value(b), json_string_length(b)) != 0)
                return -1;
        } else {
            return mx_fail(c->err, "model.merges[%zu] is neither \"a b\" nor [a, b]", i);
        }
    }
    return 0;
}

// Copy of doc with the two spans replaced by "{}" / "[]" plus the newlines they held, so that
// jansson's line numbers still match the file.
static char *compact_doc(const char *doc, size_t n, tok_span a, tok_span b, size_t *out_len) {
    if (a.start > b.start) {
        tok_span t = a;
        a = b;
        b = t;
    }
    char *out = malloc(n + 1);
    if (!out) return NULL;
    size_t w = 0, pos = 0;
    tok_span spans[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        tok_span s = spans[k];
        if (s.start == s.end) continue;
        memcpy(out + w, doc + pos, s.start - pos);
        w += s.start - pos;
        out[w++] = doc[s.start];
        out[w++] = doc[s.start] == '{' ? '}' : ']';
        for (size_t i = s.start; i < s.end; i++)
            if (doc[i] == '\n') out[w++] = '\n';
        pos = s.end;
    }
    memcpy(out + w, doc + pos, n - pos);
    w += n - pos;
    out[w] = '\0';
    *out_len = w;
    return out;
}

static int added_cmp(const void *pa, const void *pb) {
    const tok_added *a = pa, *b = pb;
    unsigned ca = a->len ? (unsigned char)a->content[0] : 0, cb = b->len ? (unsigned char)b->content[0] : 0;
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

static void added_set_index(tok_added_set *set) {
    qsort(set->items, set->n, sizeof *set->items, added_cmp);
    size_t k = 0;
    for (unsigned b = 0; b <= 256; b++) {
        while (k < set->n && (unsigned char)set->items[k].content[0] < b) k++;
        set->first[b] = (uint32_t)k;
    }
}

static int read_added_tokens(load_ctx *c, json_t *list) {
    mx_tokenizer *tok = c->tok;
    if (!list || json_is_null(list)) return 0;
    if (!json_is_array(list)) return mx_fail(c->err, "added_tokens is not an array");
    size_t n = json_array_size(list);
    tok->added_raw.items = calloc(n ? n : 1, sizeof(tok_added));
    tok->added_norm.items = calloc(n ? n : 1, sizeof(tok_added));
    if (!tok->added_raw.items || !tok->added_norm.items) return mx_fail(c->err, "out of memory");
    size_t i;
    json_t *t;
    json_array_foreach(list, i, t) {
        json_t *jid = json_object_get(t, "id"), *jc = json_object_get(t, "content");
        if (!json_is_integer(jid) || !json_is_string(jc) || json_integer_value(jid) < 0 ||
            json_integer_value(jid) > TOK_MAX_ID || json_string_length(jc) == 0)
            return mx_fail(c->err, "added_tokens[%zu]: needs an integer id from 0 to %d and non-empty content", i, TOK_MAX_ID);
        tok_added a = {
            .id = (int32_t)json_integer_value(jid),
            .special = json_is_true(json_object_get(t, "special")),
            .lstrip = json_is_true(json_object_get(t, "lstrip")),
            .rstrip = json_is_true(json_object_get(t, "rstrip")),
            .normalized = json_is_true(json_object_get(t, "normalized")),
            .single_word = json_is_true(json_object_get(t, "single_word")),
        };
        const char *content = mx_arena_strndup(&tok->arena, json_string_value(jc), json_string_length(jc));
        if (!content || tok_strmap_put(&tok->added_map, content, json_string_length(jc), a.id) != 0)
            return mx_fail(c->err, "out of memory");
        a.content = content;
        a.len = (uint32_t)json_string_length(jc);
        if (a.normalized && tok->n_norm) {
            size_t len;
            char *norm = tok_normalize(tok, content, a.len, &len, c->err);
            if (!norm) return -1;
            a.content = mx_arena_strndup(&tok->arena, norm, len);
            a.len = (uint32_t)len;
            free(norm);
            if (!a.content) return mx_fail(c->err, "out of memory");
        }
        if (a.id > c->max_id) c->max_id = a.id;
        tok_added_set *set = a.normalized ? &tok->added_norm : &tok->added_raw;
        if (a.len) set->items[set->n++] = a;
    }
    added_set_index(&tok->added_raw);
    added_set_index(&tok->added_norm);
    return 0;
}

static int read_model_options(load_ctx *c, json_t *model) {
    mx_tokenizer *tok = c->tok;
    json_t *type = json_object_get(model, "type");
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0))
        return mx_fail(c->err, "unsupported model type '%s' (only BPE is supported)",
                       json_is_string(type) ? json_string_value(type) : "?");
    const char *fields[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(model, fields[k]);
        if (json_is_string(v) && json_string_length(v) > 0)
            return mx_fail(c->err, "model.%s \"%s\" is not supported", fields[k], json_string_value(v));
    }
    tok->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    tok->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    tok->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    return 0;
}

static int hex_digit(char h) {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    return -1;
}

// The byte a "<0xAB>" token stands for, or -1.
static int byte_token_value(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Bytes a single token decodes to, per the decoder steps. Special tokens decode to their content;
// every other token, added ones included, goes through the decoder as Hugging Face does (Gemma 3's
// non-special added tokens `▁▁`.. must become runs of spaces).
static int build_token_text(load_ctx *c, int32_t id, char *scratch) {
    mx_tokenizer *tok = c->tok;
    const char *s = tok->id_str[id];
    if (!s) return 0;
    size_t n = strlen(s);
    if (!(tok->id_flags[id] & TOK_ID_SPECIAL)) {
        int hex;
        if (tok->dec_byte_fallback && (hex = byte_token_value(s, n)) >= 0) {
            scratch[0] = (char)hex;
            n = 1;
            s = scratch;
        } else if (tok->n_dec_replace || tok->dec_byte_level) {
            size_t w = 0;
            for (size_t i = 0; i < n;) {
                int k;
                for (k = 0; k < tok->n_dec_replace; k++) {
                    size_t fl = strlen(tok->dec_replace_from[k]);
                    if (fl && strncmp(s + i, tok->dec_replace_from[k], fl) == 0) break;
                }
                if (k < tok->n_dec_replace) {
                    size_t tl = strlen(tok->dec_replace_to[k]);
                    memcpy(scratch + w, tok->dec_replace_to[k], tl);
                    w += tl;
                    i += strlen(tok->dec_replace_from[k]);
                } else {
                    scratch[w++] = s[i++];
                }
            }
            if (tok->dec_byte_level) { // all characters must be in the alphabet, else keep the text
                size_t w2 = 0, i = 0;
                while (i < w) {
                    utf8proc_int32_t cp;
                    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)scratch + i, (utf8proc_ssize_t)(w - i), &cp);
                    int b = k > 0 ? tok_bytelevel_byte((uint32_t)cp) : -1;
                    if (b < 0) break;
                    scratch[w2++] = (char)b; // w2 <= i: writing behind the reader is safe
                    i += (size_t)k;
                }
                if (i == w) w = w2;
                else memcpy(scratch, s, w = n); // replace steps are not mixed with ByteLevel
            }
            n = w;
            s = scratch;
        }
    }
    char *t = mx_arena_strndup(&tok->arena, s, n);
    if (!t) return mx_fail(c->err, "out of memory");
    tok->id_text[id] = t;
    tok->id_text_len[id] = (uint32_t)n;
    if (n > tok->max_text_len) tok->max_text_len = n;
    return 0;
}

static int build_id_tables(load_ctx *c) {
    mx_tokenizer *tok = c->tok;
    tok->n_ids = c->max_id + 1;
    size_t n = (size_t)tok->n_ids;
    tok->id_str = calloc(n ? n : 1, sizeof *tok->id_str);
    tok->id_flags = calloc(n ? n : 1, 1);
    tok->id_text = calloc(n ? n : 1, sizeof *tok->id_text);
    tok->id_text_len = calloc(n ? n : 1, sizeof *tok->id_text_len);
    if (!tok->id_str || !tok->id_flags || !tok->id_text || !tok->id_text_len) return mx_fail(c->err, "out of memory");
    for (size_t i = 0; i < c->n_vocab; i++)
        if (!tok->id_str[c->vocab[i].id]) tok->id_str[c->vocab[i].id] = c->vocab[i].s;
    tok_added_set *sets[2] = {&tok->added_raw, &tok->added_norm};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sets[k]->n; i++) {
            const tok_added *a = &sets[k]->items[i];
            tok->id_flags[a->id] |= TOK_ID_ADDED | (a->special ? TOK_ID_SPECIAL : 0);
        }
    // Added tokens show (and decode to) their original content, whatever their matching form.
    for (size_t j = 0; j < tok->added_map.cap; j++) {
        const tok_str_slot *s = &tok->added_map.slots[j];
        if (s->key) {
            tok->id_str[s->id] = s->key;
            tok->id_flags[s->id] |= TOK_ID_ADDED;
        }
    }
    size_t longest = 0;
    for (int32_t id = 0; id < tok->n_ids; id++)
        if (tok->id_str[id] && strlen(tok->id_str[id]) > longest) longest = strlen(tok->id_str[id]);
    char *scratch = malloc(longest * 4 + 16);
    if (!scratch) return mx_fail(c->err, "out of memory");
    int rc = 0;
    for (int32_t id = 0; id < tok->n_ids && rc == 0; id++) rc = build_token_text(c, id, scratch);
    free(scratch);
    if (rc) return -1;

    for (int b = 0; b < 256; b++) {
        tok->byte_ids[b] = -1;
        if (tok->byte_level) {
            const char *ch = tok_bytelevel_char((unsigned)b);
            tok->byte_ids[b] = tok_strmap_get(&tok->vocab, ch, strlen(ch));
        } else if (tok->byte_fallback) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            tok->byte_ids[b] = tok_strmap_get(&tok->vocab, name, 6);
        }
    }
    return 0;
}

static int init_tables(load_ctx *c, size_t n_vocab_guess, size_t n_merges_guess) {
    mx_tokenizer *tok = c->tok;
    tok_strmap_free(&tok->vocab);
    tok_pairmap_free(&tok->merges);
    c->n_vocab = c->n_merges = 0;
    c->max_id = -1;
    if (tok_strmap_init(&tok->vocab, n_vocab_guess) != 0 || tok_pairmap_init(&tok->merges, n_merges_guess) != 0)
        return mx_fail(c->err, "out of memory");
    return 0;
}

// Fast path: vocab and merges straight from the text, jansson for the (small) rest. When the
// fast path declines or finds an error, everything is redone from a full jansson parse, which
// gives the precise message (and the line number jansson reports).
static int load_json(load_ctx *c, const char *doc, size_t n) {
    mx_tokenizer *tok = c->tok;
    tok_span vspan, mspan;
    json_t *root = NULL;
    mx_error scan_err; // superseded by the slow path's own messages
    // Pretty-printed Hugging Face files spend ~24 bytes per vocab entry and ~46 per merge; the
    // tables grow if the guess is low.
    if (init_tables(c, n / 70 + 64, n / 70 + 64) != 0) return -1;
    if (tok_json_scan_model(doc, n, on_vocab, on_merge, c, &vspan, &mspan, &scan_err) == 0) {
        size_t small_len;
        char *small = compact_doc(doc, n, vspan, mspan, &small_len);
        if (!small) return mx_fail(c->err, "out of memory");
        json_error_t jerr;
        root = json_loadb(small, small_len, JSON_ALLOW_NUL, &jerr);
        free(small);
        if (!root) return mx_fail(c->err, "malformed JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    }
    bool fast = root != NULL;
    if (!fast) {
        json_error_t jerr;
        root = json_loadb(doc, n, JSON_ALLOW_NUL, &jerr);
        if (!root) return mx_fail(c->err, "malformed JSON at line %d column %d: %s", jerr.line, jerr.column, jerr.text);
    }
    int rc = -1;
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(root) || !json_is_object(model)) {
        mx_fail(c->err, "no \"model\" object (not a Hugging Face tokenizer.json?)");
        goto done;
    }
    if (read_model_options(c, model) != 0) goto done;
    if (!fast) {
        json_t *jv = json_object_get(model, "vocab"), *jm = json_object_get(model, "merges");
        if (!json_is_object(jv)) {
            mx_fail(c->err, "model.vocab is missing or not an object");
            goto done;
        }
        if (init_tables(c, json_object_size(jv), json_array_size(jm)) != 0 || vocab_from_json(c, jv) != 0) goto done;
        if (json_is_array(jm) && merges_from_json(c, jm) != 0) goto done;
    }
    if (tok_strmap_init(&tok->added_map, 64) != 0) {
        mx_fail(c->err, "out of memory");
        goto done;
    }

    if (tok_config_normalizer(tok, json_object_get(root, "normalizer"), c->err) != 0 ||
        tok_config_pre_tokenizer(tok, json_object_get(root, "pre_tokenizer"), c->err) != 0 ||
        tok_config_decoder(tok, json_object_get(root, "decoder"), c->err) != 0)
        goto done;
    if (read_added_tokens(c, json_object_get(root, "added_tokens")) != 0) goto done;
    if (build_id_tables(c) != 0) goto done;
    json_t *unk = json_object_get(model, "unk_token");
    tok->unk_id = -1;
    if (json_is_string(unk)) {
        const char *u = json_string_value(unk);
        tok->unk_id = tok_strmap_get(&tok->vocab, u, strlen(u));
        if (tok->unk_id < 0) tok->unk_id = tok_strmap_get(&tok->added_map, u, strlen(u));
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

mx_tokenizer *mx_tokenizer_load(const char *path, mx_error *err) {
    if (!path) {
        mx_fail(err, "tokenizer: no path given");
        return NULL;
    }
    mx_tokenizer *tok = calloc(1, sizeof *tok);
    char *doc = NULL;
    size_t n = 0;
    load_ctx c = {.tok = tok, .err = err, .max_id = -1};
    if (!tok) {
        mx_fail(err, "%s: out of memory", path);
        return NULL;
    }
    mx_arena_init(&tok->arena, SIZE_MAX);
    tok->unk_id = -1;
    bool ok = (tok->path = strdup(path)) != NULL;
    if (!ok) mx_fail(err, "%s: out of memory", path);
    if (ok) ok = (doc = mx_read_text_file(path, &n, err)) != NULL;  // its messages name the path
    if (ok && load_json(&c, doc, n) != 0) {
        mx_fail_prefix(err, "%s: ", path);
        ok = false;
    }
    if (!ok) {
        mx_tokenizer_free(tok);
        tok = NULL;
    }
    free(doc);
    free(c.vocab);
    free(c.concat);
    return tok;
}

void mx_tokenizer_free(mx_tokenizer *tok) {
    if (!tok) return;
    for (size_t i = 0; i < tok->n_norm; i++) {
        free(tok->norm[i].text);
        if (tok->norm[i].re) pcre2_code_free(tok->norm[i].re);
    }
    for (size_t i = 0; i < tok->n_pre; i++)
        if (tok->pre[i].re) pcre2_code_free(tok->pre[i].re);
    for (int k = 0; k < tok->n_dec_replace; k++) {
        free(tok->dec_replace_from[k]);
        free(tok->dec_replace_to[k]);
    }
    free(tok->norm);
    free(tok->pre);
    free(tok->added_raw.items);
    free(tok->added_norm.items);
    free(tok->id_str);
    free(tok->id_flags);
    free(tok->id_text);
    free(tok->id_text_len);
    tok_strmap_free(&tok->vocab);
    tok_strmap_free(&tok->added_map);
    tok_pairmap_free(&tok->merges);
    mx_arena_free(&tok->arena);
    free(tok->path);
    free(tok);
}

int32_t mx_tokenizer_vocab_size(const mx_tokenizer *tok) { return tok ? tok->n_ids : 0; }

int32_t mx_tokenizer_token_id(const mx_tokenizer *tok, const char *token) {
    if (!tok || !token) return -1;
    size_t n = strlen(token);
    int32_t id = tok_strmap_get(&tok->added_map, token, n);
    return id >= 0 ? id : tok_strmap_get(&tok->vocab, token, n);
}

const char *mx_tokenizer_token_str(const mx_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->n_ids ? tok->id_str[id] : NULL;
}

bool mx_tokenizer_is_special(const mx_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->n_ids && (tok->id_flags[id] & TOK_ID_SPECIAL);
}

size_t mx_tokenizer_max_token_bytes(const mx_tokenizer *tok) { return tok ? tok->max_text_len : 0; }

const char *mx_tokenizer_token_bytes(const mx_tokenizer *tok, int32_t id, size_t *len) {
    *len = 0;
    if (!tok || id < 0 || id >= tok->n_ids || !tok->id_str[id]) return NULL;
    *len = tok->id_text_len[id];
    return tok->id_text[id];
}
