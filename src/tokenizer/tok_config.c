// SPDX-License-Identifier: MIT
// Reads the pipeline stages of tokenizer.json (normalizer, pre_tokenizer, decoder) into the flat
// step lists of mx_tokenizer. Only what the Qwen, Llama-3 and Mistral families use is accepted;
// anything else fails with a message naming the stage and type, never silently mis-tokenizes.
// Regexes are the file's own patterns compiled by PCRE2 (UTF + UCP, JIT when available).
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

// The split ByteLevel(use_regex = true) applies: GPT-2's pattern.
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

pcre2_code *tok_regex_compile(const char *pattern, bool is_literal, mx_error *err) {
    int code;
    PCRE2_SIZE offset;
    uint32_t opts = PCRE2_UTF | (is_literal ? PCRE2_LITERAL : PCRE2_UCP); // LITERAL rejects UCP
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &offset, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        mx_fail(err, "regex /%s/ does not compile at offset %zu: %s", pattern, (size_t)offset, (char *)msg);
        return NULL;
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); // falls back to the interpreter if unavailable
    return re;
}

static const char *str_field(json_t *j, const char *key) {
    json_t *v = json_object_get(j, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool bool_field(json_t *j, const char *key, bool dflt) {
    json_t *v = json_object_get(j, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

// Reads {"String": s} or {"Regex": r} into a compiled pattern.
static pcre2_code *pattern_field(json_t *j, const char *where, mx_error *err) {
    json_t *p = json_object_get(j, "pattern");
    const char *s;
    if ((s = str_field(p, "Regex"))) return tok_regex_compile(s, false, err);
    if ((s = str_field(p, "String"))) return tok_regex_compile(s, true, err);
    mx_fail(err, "%s: pattern must be {\"String\": ...} or {\"Regex\": ...}", where);
    return NULL;
}

static void *grow_steps(void *steps, size_t n, size_t size) {
    return realloc(steps, (n + 1) * size);
}

// ---- normalizer ------------------------------------------------------------------------------

static int add_norm(mx_tokenizer *tok, tok_norm_step step, mx_error *err) {
    tok_norm_step *s = grow_steps(tok->norm, tok->n_norm, sizeof *s);
    if (!s) {
        free(step.text);
        if (step.re) pcre2_code_free(step.re);
        return mx_fail(err, "out of memory");
    }
    tok->norm = s;
    tok->norm[tok->n_norm++] = step;
    return 0;
}

int tok_config_normalizer(mx_tokenizer *tok, json_t *j, mx_error *err) {
    if (!j || json_is_null(j)) return 0;
    const char *type = str_field(j, "type");
    if (!type) return mx_fail(err, "normalizer has no type");
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(j, "normalizers");
        if (!json_is_array(list)) return mx_fail(err, "normalizer Sequence has no normalizers array");
        size_t i;
        json_t *item;
        json_array_foreach(list, i, item) {
            if (tok_config_normalizer(tok, item, err) != 0) return -1;
        }
        return 0;
    }
    tok_norm_step step = {0};
    if (strcmp(type, "NFC") == 0) step.kind = TOK_NORM_NFC;
    else if (strcmp(type, "NFD") == 0) step.kind = TOK_NORM_NFD;
    else if (strcmp(type, "NFKC") == 0) step.kind = TOK_NORM_NFKC;
    else if (strcmp(type, "NFKD") == 0) step.kind = TOK_NORM_NFKD;
    else if (strcmp(type, "Lowercase") == 0) step.kind = TOK_NORM_LOWERCASE;
    else if (strcmp(type, "Strip") == 0) {
        step.kind = TOK_NORM_STRIP;
        step.strip_left = bool_field(j, "strip_left", true);
        step.strip_right = bool_field(j, "strip_right", true);
    } else if (strcmp(type, "Prepend") == 0) {
        const char *p = str_field(j, "prepend");
        if (!p) return mx_fail(err, "normalizer Prepend has no prepend string");
        step.kind = TOK_NORM_PREPEND;
        if (!(step.text = strdup(p))) return mx_fail(err, "out of memory");
    } else if (strcmp(type, "Replace") == 0) {
        const char *content = str_field(j, "content");
        if (!content) return mx_fail(err, "normalizer Replace has no content string");
        step.kind = TOK_NORM_REPLACE;
        if (!(step.re = pattern_field(j, "normalizer Replace", err))) return -1;
        if (!(step.text = strdup(content))) {
            pcre2_code_free(step.re);
            return mx_fail(err, "out of memory");
        }
    } else {
        return mx_fail(err, "unsupported normalizer type '%s'", type);
    }
    return add_norm(tok, step, err);
}

// ---- pre-tokenizer ---------------------------------------------------------------------------

static int add_pre(mx_tokenizer *tok, tok_pre_step step, mx_error *err) {
    tok_pre_step *s = grow_steps(tok->pre, tok->n_pre, sizeof *s);
    if (!s) {
        if (step.re) pcre2_code_free(step.re);
        return mx_fail(err, "out of memory");
    }
    tok->pre = s;
    tok->pre[tok->n_pre++] = step;
    return 0;
}

static int add_regex_split(mx_tokenizer *tok, const char *pattern, tok_split_behavior behavior, bool invert,
                           mx_error *err) {
    tok_pre_step step = {.kind = TOK_PRE_SPLIT, .behavior = behavior, .invert = invert};
    if (!(step.re = tok_regex_compile(pattern, false, err))) return -1;
    return add_pre(tok, step, err);
}

static int split_behavior(const char *name, tok_split_behavior *out) {
    static const struct {
        const char *name;
        tok_split_behavior b;
    } table[] = {
        {"Isolated", TOK_SPLIT_ISOLATED},
        {"Removed", TOK_SPLIT_REMOVED},
        {"MergedWithPrevious", TOK_SPLIT_MERGED_PREV},
        {"MergedWithNext", TOK_SPLIT_MERGED_NEXT},
        {"Contiguous", TOK_SPLIT_CONTIGUOUS},
    };
    for (size_t i = 0; name && i < sizeof table / sizeof table[0]; i++)
        if (strcmp(name, table[i].name) == 0) {
            *out = table[i].b;
            return 0;
        }
    return -1;
}

// Metaspace's prepend_scheme, or the older add_prefix_space flag.
static tok_prepend_scheme metaspace_scheme(json_t *j) {
    const char *s = str_field(j, "prepend_scheme");
    if (s && strcmp(s, "first") == 0) return TOK_PREPEND_FIRST;
    if (s && strcmp(s, "never") == 0) return TOK_PREPEND_NEVER;
    if (s) return TOK_PREPEND_ALWAYS;
    return bool_field(j, "add_prefix_space", true) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
}

int tok_config_pre_tokenizer(mx_tokenizer *tok, json_t *j, mx_error *err) {
    if (!j || json_is_null(j)) return 0;
    const char *type = str_field(j, "type");
    if (!type) return mx_fail(err, "pre_tokenizer has no type");
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(j, "pretokenizers");
        if (!json_is_array(list)) return mx_fail(err, "pre_tokenizer Sequence has no pretokenizers array");
        size_t i;
        json_t *item;
        json_array_foreach(list, i, item) {
            if (tok_config_pre_tokenizer(tok, item, err) != 0) return -1;
        }
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        tok_pre_step step = {.kind = TOK_PRE_SPLIT, .invert = bool_field(j, "invert", false)};
        const char *b = str_field(j, "behavior");
        if (split_behavior(b, &step.behavior) != 0)
            return mx_fail(err, "pre_tokenizer Split: unsupported behavior '%s'", b ? b : "(none)");
        if (!(step.re = pattern_field(j, "pre_tokenizer Split", err))) return -1;
        return add_pre(tok, step, err);
    }
    if (strcmp(type, "ByteLevel") == 0) {
        tok->byte_level = true;
        if (bool_field(j, "add_prefix_space", false) &&
            add_pre(tok, (tok_pre_step){.kind = TOK_PRE_PREFIX_SPACE}, err) != 0)
            return -1;
        if (bool_field(j, "use_regex", true)) return add_regex_split(tok, gpt2_pattern, TOK_SPLIT_ISOLATED, false, err);
        return 0;
    }
    if (strcmp(type, "Metaspace") == 0) {
        tok_pre_step step = {.kind = TOK_PRE_METASPACE, .prepend = metaspace_scheme(j), .split = bool_field(j, "split", true)};
        const char *r = str_field(j, "replacement");
        if (!r) r = "\xE2\x96\x81"; // U+2581
        if (strlen(r) >= sizeof step.replacement || !*r)
            return mx_fail(err, "pre_tokenizer Metaspace: replacement must be one character");
        strcpy(step.replacement, r);
        return add_pre(tok, step, err);
    }
    if (strcmp(type, "Digits") == 0)
        return add_regex_split(tok, bool_field(j, "individual_digits", false) ? "\\p{N}" : "\\p{N}+",
                               TOK_SPLIT_ISOLATED, false, err);
    if (strcmp(type, "WhitespaceSplit") == 0) return add_regex_split(tok, "\\s+", TOK_SPLIT_REMOVED, false, err);
    if (strcmp(type, "Whitespace") == 0)
        return add_regex_split(tok, "\\w+|[^\\w\\s]+", TOK_SPLIT_REMOVED, true, err);
    return mx_fail(err, "unsupported pre_tokenizer type '%s'", type);
}

// ---- decoder -----------------------------------------------------------------------------------

static int add_replace(mx_tokenizer *tok, const char *from, const char *to, mx_error *err) {
    if (tok->n_dec_replace == (int)(sizeof tok->dec_replace_from / sizeof tok->dec_replace_from[0]))
        return mx_fail(err, "decoder: too many Replace steps");
    int k = tok->n_dec_replace;
    tok->dec_replace_from[k] = strdup(from);
    tok->dec_replace_to[k] = strdup(to);
    tok->n_dec_replace++;
    if (!tok->dec_replace_from[k] || !tok->dec_replace_to[k]) return mx_fail(err, "out of memory");
    return 0;
}

int tok_config_decoder(mx_tokenizer *tok, json_t *j, mx_error *err) {
    if (!j || json_is_null(j)) return 0;
    const char *type = str_field(j, "type");
    if (!type) return mx_fail(err, "decoder has no type");
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(j, "decoders");
        if (!json_is_array(list)) return mx_fail(err, "decoder Sequence has no decoders array");
        size_t i;
        json_t *item;
        json_array_foreach(list, i, item) {
            if (tok_config_decoder(tok, item, err) != 0) return -1;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        tok->dec_byte_level = true;
        return 0;
    }
    if (strcmp(type, "ByteFallback") == 0) {
        tok->dec_byte_fallback = true;
        return 0;
    }
    if (strcmp(type, "Fuse") == 0) return 0; // decoding concatenates anyway
    if (strcmp(type, "Replace") == 0) {
        const char *from = str_field(json_object_get(j, "pattern"), "String");
        const char *to = str_field(j, "content");
        if (!from || !to) return mx_fail(err, "decoder Replace: only {\"String\": ...} patterns are supported");
        return add_replace(tok, from, to, err);
    }
    if (strcmp(type, "Strip") == 0) {
        const char *content = str_field(j, "content");
        json_int_t start = json_integer_value(json_object_get(j, "start"));
        json_int_t stop = json_integer_value(json_object_get(j, "stop"));
        if (!content || strcmp(content, " ") != 0 || start > 1 || stop != 0)
            return mx_fail(err, "decoder Strip: only content ' ', start <= 1, stop 0 is supported");
        if (start == 1) tok->strip_first_space = true;
        return 0;
    }
    if (strcmp(type, "Metaspace") == 0) {
        const char *r = str_field(j, "replacement");
        if (add_replace(tok, r ? r : "\xE2\x96\x81", " ", err) != 0) return -1;
        if (metaspace_scheme(j) != TOK_PREPEND_NEVER) tok->strip_first_space = true;
        return 0;
    }
    return mx_fail(err, "unsupported decoder type '%s'", type);
}
