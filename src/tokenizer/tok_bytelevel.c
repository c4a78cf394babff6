// SPDX-License-Identifier: MIT
// The GPT-2 byte-level alphabet: every byte is shown as a printable character so BPE vocabularies
// can be stored as text. Printable Latin-1 bytes ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) stand for
// themselves; the other 68 bytes take codepoints 256, 257, ... in byte order. The table is derived
// from that rule on first use (thread-safe via pthread_once) rather than written out.
#include <pthread.h>

#include "core/utf8.h"
#include "tokenizer/tok_internal.h"

static char byte_char[256][3];  // UTF-8 of the character for each byte
static int16_t cp_byte[512];    // codepoint (< 512) -> byte, -1 when unmapped
static pthread_once_t bytelevel_once = PTHREAD_ONCE_INIT;

static bool byte_is_printable(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static void bytelevel_build(void) {
    for (int i = 0; i < 512; i++) cp_byte[i] = -1;
    unsigned extra = 0;
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = byte_is_printable(b) ? b : 256 + extra++;
        cp_byte[cp] = (int16_t)b;
        byte_char[b][mx_utf8_encode(cp, byte_char[b])] = '\0';
    }
}

const char *tok_bytelevel_char(unsigned b) {
    pthread_once(&bytelevel_once, bytelevel_build);
    return byte_char[b & 0xFF];
}

int tok_bytelevel_byte(uint32_t cp) {
    pthread_once(&bytelevel_once, bytelevel_build);
    return cp < 512 ? cp_byte[cp] : -1;
}
