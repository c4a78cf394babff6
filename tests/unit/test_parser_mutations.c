// SPDX-License-Identifier: MIT
// Robustness of the file parsers against corrupted input: thousands of deterministic mutations
// (bit flips, byte overwrites, truncations, forged header lengths, JSON fragments spliced in) of a
// real MLX safetensors file and of a real config.json. Each parse must either succeed or fail with
// a message; the sanitizer build turns any out-of-bounds read or leak into a failure.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "io/hf_config.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "test_rng.h"

static test_rng rng = {0x1234567};
static uint32_t next(void) { return (uint32_t)test_rng_next(&rng); }  // the low 32 bits

static void free_parse(mx_st_tensor *t, size_t n, char **meta, size_t n_meta) {
    for (size_t i = 0; i < n; i++) free((char *)t[i].name);
    free(t);
    for (size_t i = 0; i < 2 * n_meta; i++) free(meta[i]);
    free(meta);
}

static void mutate_safetensors(const uint8_t *orig, size_t size, int rounds) {
    uint8_t *buf = malloc(size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | orig[i];
    int ok = 0, failed_with_message = 0;
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, orig, size);
        size_t len = size;
        switch (r % 5) {
        case 0:  // flip bits inside the header
            for (int k = 0; k < 1 + (int)(next() % 4); k++) buf[8 + next() % hlen] ^= (uint8_t)(1u << (next() % 8));
            break;
        case 1:  // overwrite a header byte with a JSON-significant character
            buf[8 + next() % hlen] = (uint8_t)"{}[]\",:0123456789-e"[next() % 19];
            break;
        case 2:  // truncate anywhere
            len = next() % size;
            break;
        case 3: {  // forge the header length
            uint64_t v = (next() % 2) ? hlen + (next() % 64) - 32 : ((uint64_t)next() << 32 | next());
            for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(v >> (8 * i));
            break;
        }
        default:  // change a digit inside the header (shapes and offsets)
            for (int k = 0; k < 8; k++) {
                size_t at = 8 + next() % hlen;
                if (buf[at] >= '0' && buf[at] <= '9') {
                    buf[at] = (uint8_t)('0' + next() % 10);
                    break;
                }
            }
        }
        // Parse from a heap copy of exactly len bytes so ASan sees any read past the end.
        uint8_t *exact = malloc(len ? len : 1);
        memcpy(exact, buf, len);
        mx_st_tensor *t;
        size_t n, n_meta;
        char **meta;
        mx_error err = {{0}};
        if (mx_st_parse(exact, len, "mutant", &t, &n, &meta, &n_meta, &err) == 0) {
            ok++;
            for (size_t i = 0; i < n; i++) CHECK(t[i].data >= exact && t[i].data + t[i].nbytes <= exact + len);
            free_parse(t, n, meta, n_meta);
        } else {
            failed_with_message += err.msg[0] != 0;
            CHECK_MSG(err.msg[0] != 0, "round %d failed without a message", r);
        }
        free(exact);
    }
    printf("safetensors mutants: %d parsed, %d rejected with a message\n", ok, failed_with_message);
    free(buf);
}

static void mutate_config(const char *orig, int rounds) {
    size_t size = strlen(orig);
    char *buf = malloc(size + 64);
    int ok = 0, rejected = 0;
    for (int r = 0; r < rounds; r++) {
        memcpy(buf, orig, size + 1);
        size_t at = next() % size;
        switch (r % 3) {
        case 0: buf[at] = "{}[]\",:0123456789-.tfn"[next() % 22]; break;
        case 1: buf[at] = 0; break;  // truncation
        default: {
            static const char *frag[] = {"null", "-1", "1e309", "\"x\"", "[]", "{}", "false", "99999999999"};
            const char *f = frag[next() % 8];
            char *colon = strchr(buf + at, ':');
            if (colon) {
                size_t rest = strcspn(colon + 1, ",}");
                memmove(colon + 1 + strlen(f), colon + 1 + rest, strlen(colon + 1 + rest) + 1);
                memcpy(colon + 1, f, strlen(f));
            }
        }
        }
        mx_config c;
        mx_error err = {{0}};
        if (mx_config_parse(buf, NULL, "config.json", &c, &err) == 0) {
            ok++;
            mx_config_free(&c);
        } else {
            rejected++;
            CHECK_MSG(err.msg[0] != 0, "config round %d failed without a message", r);
        }
    }
    printf("config mutants: %d parsed, %d rejected with a message\n", ok, rejected);
    free(buf);
}

int main(void) {
    mx_error err = {{0}};
    mx_mapped_file f;
    CHECK_MSG(mx_mapped_file_open(&f, "tests/fixtures/models/qwen3-q4mixed/model.safetensors", &err) == 0, "%s", err.msg);
    if (f.data) mutate_safetensors(f.data, f.size, 4000);
    mx_mapped_file_close(&f);
    char *cfg = mx_read_text_file("tests/fixtures/models/qwen3_moe-q4g64/config.json", NULL, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    if (cfg) mutate_config(cfg, 4000);
    free(cfg);
    return check_finish();
}
