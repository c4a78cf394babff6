// SPDX-License-Identifier: MIT
// Tokenizer tests against the real Qwen3 tokenizer.json: every case of
// tests/fixtures/tokenizer_cases.json (ids from Hugging Face tokenizers, and the decoded text) must
// match exactly, streaming decode must equal whole decode, the queries must see the added tokens,
// concurrent encodes must agree, and the 1 MB encode time is printed for information.
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "core/clock.h"
#include "test_bytelevel.h"
#include "tokenizer/tokenizer.h"

#define TOKENIZER_PATH "models/qwen3-demo-44m-4bit/tokenizer.json"
#define CASES_PATH "tests/fixtures/tokenizer_cases.json"

// Streams ids one at a time into a malloc'ed string (cap from mx_detok_cap).
static char *stream_decode(const mx_tokenizer *tok, const int32_t *ids, size_t n, bool skip) {
    size_t cap = mx_detok_cap(tok), len = 0, room = 64;
    char *piece = malloc(cap), *all = malloc(room);
    mx_detok d;
    mx_detok_init(&d, tok, skip);
    for (size_t i = 0; i <= n; i++) {
        size_t k = i < n ? mx_detok_push(&d, ids[i], piece, cap) : mx_detok_flush(&d, piece, cap);
        CHECK(piece[k] == '\0');
        while (len + k + 1 > room) all = realloc(all, room *= 2);
        memcpy(all + len, piece, k);
        len += k;
    }
    all[len] = '\0';
    free(piece);
    return all;
}

static void test_fixture_cases(const mx_tokenizer *tok, json_t *cases) {
    size_t passed = 0, i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t text_len = json_string_length(json_object_get(c, "text"));
        const char *want_text = json_string_value(json_object_get(c, "decoded"));
        json_t *want = json_object_get(c, "ids");
        int32_t *ids = NULL;
        size_t n = 0;
        mx_error err = {{0}};
        int rc = mx_tokenizer_encode(tok, text, text_len, &ids, &n, &err);
        CHECK_MSG(rc == 0, "case %zu: %s", i, err.msg);
        bool ok = rc == 0 && n == json_array_size(want);
        for (size_t k = 0; ok && k < n; k++) ok = ids[k] == json_integer_value(json_array_get(want, k));
        CHECK_MSG(ok, "case %zu ids differ (got %zu ids, want %zu): %.60s", i, n, json_array_size(want), text);
        if (!ok) {
            for (size_t k = 0; k < n && k < 40; k++) fprintf(stderr, " %d", ids[k]);
            fprintf(stderr, "\n");
        }
        char *dec = mx_tokenizer_decode(tok, ids, n, false);
        char *streamed = stream_decode(tok, ids, n, false);
        bool dec_ok = dec && strcmp(dec, want_text) == 0;
        CHECK_MSG(dec_ok, "case %zu decode: \"%s\" != \"%s\"", i, dec ? dec : "(null)", want_text);
        CHECK_MSG(dec && strcmp(streamed, dec) == 0, "case %zu stream: \"%s\" != \"%s\"", i, streamed, dec ? dec : "(null)");
        passed += ok && dec_ok && dec && strcmp(streamed, dec) == 0;
        free(dec);
        free(streamed);
        free(ids);
    }
    printf("fixture cases: %zu/%zu passed (ids, decode, streaming decode)\n", passed, json_array_size(cases));
}

static void test_queries(const mx_tokenizer *tok) {
    CHECK(mx_tokenizer_vocab_size(tok) == 151669);
    int32_t im_end = mx_tokenizer_token_id(tok, "<|im_end|>");
    CHECK(im_end == 151645);
    CHECK_STR(mx_tokenizer_token_str(tok, im_end), "<|im_end|>");
    CHECK(mx_tokenizer_is_special(tok, im_end));
    CHECK(mx_tokenizer_token_id(tok, "<think>") == 151667);
    CHECK(!mx_tokenizer_is_special(tok, 151667)); // added but not special
    CHECK(!mx_tokenizer_is_special(tok, 100));
    CHECK(!mx_tokenizer_is_special(tok, -1));
    CHECK(mx_tokenizer_token_id(tok, "Ġthe") == 279);
    CHECK_STR(mx_tokenizer_token_str(tok, 279), "Ġthe");
    CHECK(mx_tokenizer_token_id(tok, "no such token at all") == -1);
    CHECK(mx_tokenizer_token_str(tok, -1) == NULL);
    CHECK(mx_tokenizer_token_str(tok, 151669) == NULL);
    CHECK(mx_tokenizer_max_token_bytes(tok) > 0);

    int32_t ids[] = {151644, 872, 198, 6023, 151645, 151667, 151643};
    char *all = mx_tokenizer_decode(tok, ids, 7, false);
    char *skip = mx_tokenizer_decode(tok, ids, 7, true);
    char *skip_stream = stream_decode(tok, ids, 7, true);
    CHECK_STR(all, "<|im_start|>user\nhi<|im_end|><think><|endoftext|>");
    CHECK_STR(skip, "user\nhi<think>");
    CHECK_STR(skip_stream, skip);
    free(all);
    free(skip);
    free(skip_stream);
}

// GPT-2 byte-level character of byte b (the test's own derivation of the rule).
static int32_t byte_id(const mx_tokenizer *tok, unsigned b) {
    char ch[3];
    byte_level_char(b, ch);
    return mx_tokenizer_token_id(tok, ch);
}

static void test_streaming(const mx_tokenizer *tok) {
    size_t cap = mx_detok_cap(tok);
    char *out = malloc(cap);
    mx_detok d;
    const unsigned char emoji[] = {0xF0, 0x9F, 0x98, 0x80}; // U+1F600
    mx_detok_init(&d, tok, false);
    for (int k = 0; k < 3; k++) {
        CHECK(byte_id(tok, emoji[k]) >= 0);
        CHECK(mx_detok_push(&d, byte_id(tok, emoji[k]), out, cap) == 0 && out[0] == '\0');
    }
    CHECK(mx_detok_push(&d, byte_id(tok, emoji[3]), out, cap) == 4);
    CHECK_STR(out, "\xF0\x9F\x98\x80");

    // CJK 世 (E4 B8 96) then "a": held until complete, then both come out in order.
    CHECK(mx_detok_push(&d, byte_id(tok, 0xE4), out, cap) == 0);
    CHECK(mx_detok_push(&d, byte_id(tok, 0xB8), out, cap) == 0);
    CHECK(mx_detok_push(&d, byte_id(tok, 0x96), out, cap) == 3);
    CHECK_STR(out, "世");

    // An incomplete character followed by ASCII is one U+FFFD, then the ASCII.
    CHECK(mx_detok_push(&d, byte_id(tok, 0xE4), out, cap) == 0);
    CHECK(mx_detok_push(&d, mx_tokenizer_token_id(tok, "a"), out, cap) == 4);
    CHECK_STR(out, "\xEF\xBF\xBD" "a");
    // A stray continuation byte is U+FFFD at once; flush turns held bytes into U+FFFD.
    CHECK(mx_detok_push(&d, byte_id(tok, 0x80), out, cap) == 3);
    CHECK(mx_detok_push(&d, byte_id(tok, 0xF0), out, cap) == 0);
    CHECK(mx_detok_flush(&d, out, cap) == 3);
    CHECK_STR(out, "\xEF\xBF\xBD");
    CHECK(mx_detok_flush(&d, out, cap) == 0);

    // A too-small buffer cuts at a character boundary, never mid-character.
    mx_detok_init(&d, tok, false);
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK(mx_tokenizer_encode(tok, "你好", strlen("你好"), &ids, &n, NULL) == 0);
    char small[5];
    size_t k = n ? mx_detok_push(&d, ids[0], small, sizeof small) : 0;
    CHECK(k % 3 == 0 && k <= 4);
    free(ids);

    // Whole decode of a lone invalid byte sequence matches from_utf8_lossy.
    int32_t bad[] = {byte_id(tok, 0xE4), byte_id(tok, 0xB8), byte_id(tok, 'x')};
    char *s = mx_tokenizer_decode(tok, bad, 3, false);
    CHECK_STR(s, "\xEF\xBF\xBD" "x");
    free(s);
    free(out);
}

static void test_invalid_input(const mx_tokenizer *tok) {
    const char bad[] = "\xff\xfe" "abc\xe4\xb8";
    int32_t *ids = NULL;
    size_t n = 0;
    mx_error err = {{0}};
    CHECK(mx_tokenizer_encode(tok, bad, sizeof bad - 1, &ids, &n, &err) == 0);
    char *s = mx_tokenizer_decode(tok, ids, n, false);
    CHECK_STR(s, "\xEF\xBF\xBD\xEF\xBF\xBD" "abc\xEF\xBF\xBD");
    free(s);
    free(ids);
    CHECK(mx_tokenizer_encode(tok, "", 0, &ids, &n, &err) == 0 && n == 0);
    free(ids);
    CHECK(mx_tokenizer_encode(tok, NULL, 3, &ids, &n, &err) == -1);
    // Embedded NUL is text like any other.
    CHECK(mx_tokenizer_encode(tok, "a\0b", 3, &ids, &n, &err) == 0 && n == 3);
    free(ids);
}

typedef struct thread_job {
    const mx_tokenizer *tok;
    json_t *cases;
    int failures;
} thread_job;

static void *thread_main(void *p) {
    thread_job *job = p;
    for (int rep = 0; rep < 3; rep++) {
        size_t i;
        json_t *c;
        json_array_foreach(job->cases, i, c) {
            json_t *want = json_object_get(c, "ids");
            int32_t *ids = NULL;
            size_t n = 0;
            const char *text = json_string_value(json_object_get(c, "text"));
            if (mx_tokenizer_encode(job->tok, text, json_string_length(json_object_get(c, "text")), &ids, &n, NULL) != 0 || n != json_array_size(want))
                job->failures++;
            for (size_t k = 0; k < n && k < json_array_size(want); k++)
                if (ids[k] != json_integer_value(json_array_get(want, k))) job->failures++;
            char *dec = mx_tokenizer_decode(job->tok, ids, n, false);
            if (!dec || strcmp(dec, json_string_value(json_object_get(c, "decoded"))) != 0) job->failures++;
            free(dec);
            free(ids);
        }
    }
    return NULL;
}

static void test_threads(const mx_tokenizer *tok, json_t *cases) {
    thread_job jobs[4];
    pthread_t th[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (thread_job){tok, cases, 0};
        CHECK(pthread_create(&th[t], NULL, thread_main, &jobs[t]) == 0);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        CHECK_MSG(jobs[t].failures == 0, "thread %d: %d mismatches", t, jobs[t].failures);
    }
}

static void bench_1mb(const mx_tokenizer *tok, json_t *cases) {
    size_t cap = (1 << 20) + 4096, len = 0;
    char *text = malloc(cap);
    while (len < (1 << 20)) {
        for (size_t i = 0; i < 60 && len < (1 << 20); i++) { // the English prose cases
            const char *s = json_string_value(json_object_get(json_array_get(cases, i), "text"));
            size_t n = strlen(s);
            if (len + n + 1 >= cap) break;
            memcpy(text + len, s, n);
            len += n;
            text[len++] = '\n';
        }
        if (len + 2048 >= cap) break;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    mx_error err = {{0}};
    double t0 = mx_now();
    int rc = mx_tokenizer_encode(tok, text, len, &ids, &n, &err);
    double t1 = mx_now();
    CHECK_MSG(rc == 0, "%s", err.msg);
    char *back = mx_tokenizer_decode(tok, ids, n, false);
    double t2 = mx_now();
    CHECK(back && strlen(back) == len && memcmp(back, text, len) == 0); // round trip
    printf("encode %.2f MB English: %.1f ms (%zu tokens, %.1f MB/s); decode %.1f ms\n", len / 1048576.0,
           (t1 - t0) * 1e3, n, len / 1048576.0 / (t1 - t0), (t2 - t1) * 1e3);
    free(back);
    free(ids);
    free(text);
}

int main(void) {
    mx_error err = {{0}};
    double t0 = mx_now();
    mx_tokenizer *tok = mx_tokenizer_load(TOKENIZER_PATH, &err);
    printf("load %s: %.1f ms\n", TOKENIZER_PATH, (mx_now() - t0) * 1e3);
    CHECK_MSG(tok != NULL, "%s", err.msg);
    json_error_t jerr;
    json_t *root = json_load_file(CASES_PATH, JSON_ALLOW_NUL, &jerr);
    CHECK_MSG(root != NULL, "%s: %s", CASES_PATH, jerr.text);
    json_t *cases = json_object_get(root, "cases");
    if (tok && json_is_array(cases)) {
        test_fixture_cases(tok, cases);
        test_queries(tok);
        test_streaming(tok);
        test_invalid_input(tok);
        test_threads(tok, cases);
        bench_1mb(tok, cases);
    }
    json_decref(root);
    mx_tokenizer_free(tok);
    mx_tokenizer_free(NULL);
    return check_finish();
}
