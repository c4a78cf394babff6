// SPDX-License-Identifier: MIT
// GPT-2's byte-level alphabet for the tokenizer tests, written here from its definition rather than
// taken from src/tokenizer: the printable bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
// themselves, every other byte for code point 256 + its rank among them; out is that code point in
// UTF-8.
#ifndef MLXCEL_TEST_BYTELEVEL_H
#define MLXCEL_TEST_BYTELEVEL_H

#include <stdbool.h>

static inline bool byte_level_printable(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

static inline void byte_level_char(unsigned b, char out[3]) {
    unsigned cp = b, extra = 0;
    if (!byte_level_printable(b)) {
        for (unsigned x = 0; x < b; x++) extra += !byte_level_printable(x);
        cp = 256 + extra;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

#endif
