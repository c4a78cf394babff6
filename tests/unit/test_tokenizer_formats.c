// SPDX-License-Identifier: MIT
// Tokenizer tests on small hand-made tokenizer.json files: load errors (missing file, malformed
// JSON, unsupported model / stages, broken merges) must fail with a clear message, and the other
// layouts the engine meets must encode and decode as Hugging Face would: GPT-2 byte-level with
// "a b" merges, ignore_merges (Llama-3), added tokens with lstrip/rstrip, and SentencePiece-style
// BPE with byte_fallback (Mistral-7B: Prepend/Replace normalizers, or the Metaspace pre-tokenizer).
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "test_bytelevel.h"
#include "tokenizer/tokenizer.h"

static char tmp_path[64];

// Writes text to a fresh temporary file; returns its path (valid until the next call).
static const char *write_tmp(const char *text) {
    if (tmp_path[0]) unlink(tmp_path);
    strcpy(tmp_path, "/tmp/mlxcel_tok_XXXXXX");
    int fd = mkstemp(tmp_path);
    if (fd < 0) return "/nonexistent";
    size_t n = strlen(text);
    CHECK(write(fd, text, n) == (ssize_t)n);
    close(fd);
    return tmp_path;
}

// Loads text as a tokenizer.json; returns NULL and the message in err on failure.
static mx_tokenizer *load_text(const char *text, mx_error *err) {
    memset(err, 0, sizeof *err);
    return mx_tokenizer_load(write_tmp(text), err);
}

static void expect_error(const char *text, const char *needle) {
    mx_error err;
    mx_tokenizer *tok = load_text(text, &err);
    CHECK_MSG(tok == NULL, "loaded although expected '%s'", needle);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "message \"%s\" lacks \"%s\"", err.msg, needle);
    CHECK_MSG(strstr(err.msg, tmp_path) != NULL, "message \"%s\" lacks the path", err.msg);
    mx_tokenizer_free(tok);
}

static void test_errors(void) {
    mx_error err = {{0}};
    CHECK(mx_tokenizer_load("/nonexistent/dir/tokenizer.json", &err) == NULL);
    CHECK(strstr(err.msg, "/nonexistent/dir/tokenizer.json") && strstr(err.msg, "cannot open"));
    CHECK(mx_tokenizer_load(NULL, &err) == NULL);
    CHECK(mx_tokenizer_load("/nonexistent", NULL) == NULL); // NULL err is allowed

    expect_error("", "malformed JSON");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0", "malformed JSON");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,, \"b\": 1}, \"merges\": []}}", "malformed JSON");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\" \"b\"]]}}", "malformed JSON");
    expect_error("{\"version\": \"1.0\",\n \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},\n \"x\": [1,}",
                 "line 3");
    expect_error("[1, 2]", "no \"model\" object");
    expect_error("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", "unsupported model type 'WordPiece'");
    expect_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", "unsupported model type 'Unigram'");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": [1]}}", "model.vocab");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
                 "merged token is not in the vocab");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0.5}, \"merges\": []}}", "not an integer");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                 " \"pre_tokenizer\": {\"type\": \"Punctuation\"}}",
                 "unsupported pre_tokenizer type 'Punctuation'");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                 " \"normalizer\": {\"type\": \"Precompiled\"}}",
                 "unsupported normalizer type 'Precompiled'");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                 " \"decoder\": {\"type\": \"WordPiece\"}}",
                 "unsupported decoder type 'WordPiece'");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                 " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}",
                 "does not compile");
}

// ---- a tiny GPT-2 style byte-level tokenizer ---------------------------------------------------

static void append(char **buf, size_t *len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    *buf = realloc(*buf, *len + (size_t)n + 1);
    memcpy(*buf + *len, tmp, (size_t)n + 1);
    *len += (size_t)n;
}

// Vocab: the 256 byte characters (id = byte), then he ll hell hello Ġh Ġhello (256..261).
static char *byte_level_json(bool ignore_merges) {
    char *j = NULL;
    size_t n = 0;
    append(&j, &n, "{\"added_tokens\": [{\"id\": 262, \"content\": \"<|x|>\", \"special\": true, \"lstrip\": true,"
                   " \"rstrip\": false, \"normalized\": false, \"single_word\": false},"
                   " {\"id\": 263, \"content\": \"[R]\", \"special\": false, \"lstrip\": false, \"rstrip\": true,"
                   " \"normalized\": true}],\n");
    append(&j, &n, "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false,"
                   " \"use_regex\": true}, \"decoder\": {\"type\": \"ByteLevel\"},\n");
    append(&j, &n, "\"model\": {\"type\": \"BPE\", \"ignore_merges\": %s, \"vocab\": {", ignore_merges ? "true" : "false");
    for (unsigned b = 0; b < 256; b++) {
        char ch[3];
        byte_level_char(b, ch);
        append(&j, &n, "\"%s%s\": %u, ", ch[0] == '"' || ch[0] == '\\' ? "\\" : "", ch, b);
    }
    append(&j, &n, "\"he\": 256, \"ll\": 257, \"hell\": 258, \"hello\": 259, \"\\u0120h\": 260, \"Ġhello\": 261},\n");
    append(&j, &n, "\"merges\": [\"h e\", \"l l\", \"he ll\", \"hell o\", \"Ġ h\"]}}");
    return j;
}

static void expect_ids(const mx_tokenizer *tok, const char *text, const int32_t *want, size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    mx_error err = {{0}};
    CHECK_MSG(mx_tokenizer_encode(tok, text, strlen(text), &ids, &n, &err) == 0, "%s", err.msg);
    bool same = n == n_want;
    for (size_t i = 0; same && i < n; i++) same = ids[i] == want[i];
    CHECK_MSG(same, "encode \"%s\": got %zu ids", text, n);
    if (!same) {
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
}

static void expect_decode(const mx_tokenizer *tok, const int32_t *ids, size_t n, bool skip, const char *want) {
    char *s = mx_tokenizer_decode(tok, ids, n, skip);
    CHECK_STR(s ? s : "(null)", want);
    // The same through the streaming decoder.
    size_t cap = mx_detok_cap(tok), len = 0;
    char *piece = malloc(cap), all[256] = "";
    mx_detok d;
    mx_detok_init(&d, tok, skip);
    for (size_t i = 0; i <= n; i++) {
        size_t k = i < n ? mx_detok_push(&d, ids[i], piece, cap) : mx_detok_flush(&d, piece, cap);
        if (len + k < sizeof all) memcpy(all + len, piece, k + 1);
        len += k;
    }
    CHECK_STR(all, want);
    free(piece);
    free(s);
}

static void test_byte_level(void) {
    mx_error err;
    char *json = byte_level_json(false);
    mx_tokenizer *tok = load_text(json, &err);
    free(json);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (!tok) return;
    CHECK(mx_tokenizer_vocab_size(tok) == 264);
    expect_ids(tok, "hello hello", (int32_t[]){259, ' ', 259}, 3);
    expect_ids(tok, "hel", (int32_t[]){256, 'l'}, 2);
    // lstrip swallows the space before <|x|>; rstrip swallows the spaces after [R].
    expect_ids(tok, "he <|x|>he", (int32_t[]){256, 262, 256}, 3);
    expect_ids(tok, "he[R]  he", (int32_t[]){256, 263, 256}, 3);
    expect_ids(tok, "<|x|", (int32_t[]){'<', '|', 'x', '|'}, 4);
    expect_decode(tok, (int32_t[]){259, ' ', 259, 262}, 4, false, "hello hello<|x|>");
    expect_decode(tok, (int32_t[]){259, 262, 263}, 3, true, "hello[R]");
    mx_tokenizer_free(tok);

    json = byte_level_json(true); // Llama-3: a piece found whole in the vocab is taken as is
    tok = load_text(json, &err);
    free(json);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (!tok) return;
    expect_ids(tok, "hello hello", (int32_t[]){259, 261}, 2);
    mx_tokenizer_free(tok);
}

// ---- SentencePiece-style BPE with byte fallback -------------------------------------------------

// Vocab: <unk> <s> </s>, <0x00>..<0xFF> (3..258), ▁ h i ▁h ▁hi (259..263).
static char *spm_json(bool metaspace) {
    char *j = NULL;
    size_t n = 0;
    append(&j, &n, "{\"added_tokens\": [");
    const char *names[] = {"<unk>", "<s>", "</s>"};
    for (int k = 0; k < 3; k++)
        append(&j, &n, "%s{\"id\": %d, \"content\": \"%s\", \"special\": true, \"normalized\": false}", k ? ", " : "", k,
               names[k]);
    append(&j, &n, "],\n");
    if (metaspace)
        append(&j, &n, "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"▁\","
                       " \"prepend_scheme\": \"first\", \"split\": false},"
                       " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Metaspace\", \"replacement\": \"▁\","
                       " \"prepend_scheme\": \"first\"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]},\n");
    else
        append(&j, &n, "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"▁\"},"
                       " {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"▁\"}]},"
                       " \"pre_tokenizer\": null,"
                       " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\":"
                       " {\"String\": \"▁\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"},"
                       " {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},\n");
    append(&j, &n, "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": true,"
                   " \"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2, ");
    for (unsigned b = 0; b < 256; b++) append(&j, &n, "\"<0x%02X>\": %u, ", b, b + 3);
    append(&j, &n, "\"▁\": 259, \"h\": 260, \"i\": 261, \"▁h\": 262, \"▁hi\": 263},\n");
    append(&j, &n, "\"merges\": [[\"▁\", \"h\"], [\"▁h\", \"i\"]]}}");
    return j;
}

static void test_sentencepiece(bool metaspace) {
    mx_error err;
    char *json = spm_json(metaspace);
    mx_tokenizer *tok = load_text(json, &err);
    free(json);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (!tok) return;
    expect_ids(tok, "hi hi", (int32_t[]){263, 263}, 2);
    expect_ids(tok, "hé", (int32_t[]){262, 3 + 0xC3, 3 + 0xA9}, 3);
    if (metaspace) // prepend_scheme "first": no ▁ after a leading added token
        expect_ids(tok, "<s>hi", (int32_t[]){1, 260, 261}, 3);
    else // the Prepend normalizer runs on each span between added tokens
        expect_ids(tok, "<s>hi", (int32_t[]){1, 263}, 2);
    CHECK(mx_tokenizer_is_special(tok, 1));
    expect_decode(tok, (int32_t[]){263, 263}, 2, false, "hi hi");
    expect_decode(tok, (int32_t[]){262, 3 + 0xC3, 3 + 0xA9}, 3, false, "hé");
    expect_decode(tok, (int32_t[]){1, 263, 2}, 3, true, "hi");
    expect_decode(tok, (int32_t[]){1, 263}, 2, false, "<s> hi");
    mx_tokenizer_free(tok);
}

// Gemma 3: whitespace runs are non-special added tokens (`▁▁` .. ) and the decoder replaces ▁ with
// a space (no Strip step). Hugging Face passes added tokens through the decoder, so they decode to
// spaces; special added tokens keep their content and are dropped when skipping specials.
static void test_gemma_added_whitespace(void) {
    mx_error err;
    mx_tokenizer *tok = load_text(
        "{\"added_tokens\": ["
        "{\"id\": 0, \"content\": \"<bos>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 5, \"content\": \"▁▁\", \"special\": false, \"normalized\": false},"
        "{\"id\": 6, \"content\": \"▁▁▁▁\", \"special\": false, \"normalized\": false},"
        "{\"id\": 7, \"content\": \"<start_of_turn>\", \"special\": true, \"normalized\": false}],"
        " \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"▁\"},"
        " \"pre_tokenizer\": null,"
        " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\":"
        " {\"String\": \"▁\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}]},"
        " \"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"<bos>\": 0, \"▁\": 1, \"i\": 2,"
        " \"f\": 3, \"if\": 4, \"▁▁\": 5, \"▁▁▁▁\": 6, \"<start_of_turn>\": 7}, \"merges\": [[\"i\", \"f\"]]}}",
        &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (!tok) return;
    expect_decode(tok, (int32_t[]){4, 5, 4}, 3, false, "if  if");
    expect_decode(tok, (int32_t[]){6, 5, 4}, 3, false, "      if");
    expect_decode(tok, (int32_t[]){0, 7, 6, 4}, 4, false, "<bos><start_of_turn>    if");
    expect_decode(tok, (int32_t[]){0, 7, 6, 4}, 4, true, "    if");
    CHECK(!mx_tokenizer_is_special(tok, 5) && mx_tokenizer_is_special(tok, 7));
    mx_tokenizer_free(tok);
}

// Merges before vocab defeats the fast scanner: the jansson path must give the same tokenizer.
static void test_unusual_layout(void) {
    mx_error err;
    mx_tokenizer *tok = load_text("{\"model\": {\"merges\": [\"h e\", [\"he\", \"y\"]], \"type\": \"BPE\","
                                  " \"vocab\": {\"h\": 0, \"e\": 1, \"y\": 2, \"he\": 3, \"hey\": 4}}}",
                                  &err);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    if (!tok) return;
    expect_ids(tok, "heyhe", (int32_t[]){4, 3}, 2);
    expect_ids(tok, "hex", (int32_t[]){3}, 1); // no unk token: unknown characters are dropped
    expect_decode(tok, (int32_t[]){4, 3}, 2, false, "heyhe");
    mx_tokenizer_free(tok);
}

int main(void) {
    test_errors();
    test_unusual_layout();
    test_byte_level();
    test_sentencepiece(false);
    test_sentencepiece(true);
    test_gemma_added_whitespace();
    if (tmp_path[0]) unlink(tmp_path);
    return check_finish();
}
