// SPDX-License-Identifier: MIT
// core/utf8.h's encoder: the byte sequences at each length boundary written out, and every code
// point outside the surrogates decoded back by utf8proc (an independent decoder) to itself, with
// the length it reports.
#include <utf8proc.h>

#include "check.h"
#include "core/utf8.h"

static void expect(uint32_t cp, const char *bytes, size_t n) {
    char out[4] = {0};
    size_t got = mx_utf8_encode(cp, out);
    CHECK_MSG(got == n && memcmp(out, bytes, n) == 0, "U+%04X: %zu bytes %02x %02x %02x %02x", (unsigned)cp, got,
              (unsigned char)out[0], (unsigned char)out[1], (unsigned char)out[2], (unsigned char)out[3]);
}

int main(void) {
    expect(0x00, "\x00", 1);
    expect(0x7F, "\x7F", 1);
    expect(0x80, "\xC2\x80", 2);
    expect(0x7FF, "\xDF\xBF", 2);
    expect(0x800, "\xE0\xA0\x80", 3);
    expect(0xD800, "\xED\xA0\x80", 3);  // a surrogate is written like any code point
    expect(0xFFFF, "\xEF\xBF\xBF", 3);
    expect(0x10000, "\xF0\x90\x80\x80", 4);
    expect(0x10FFFF, "\xF4\x8F\xBF\xBF", 4);
    int bad = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        char out[4];
        size_t n = mx_utf8_encode(cp, out);
        utf8proc_int32_t back = -1;
        utf8proc_ssize_t used = utf8proc_iterate((const utf8proc_uint8_t *)out, (utf8proc_ssize_t)n, &back);
        if (used != (utf8proc_ssize_t)n || back != (utf8proc_int32_t)cp) {
            if (bad++ < 5) fprintf(stderr, "U+%04X: %zu bytes decode to U+%04X (%zd bytes)\n", (unsigned)cp, n,
                                   (unsigned)back, (ssize_t)used);
        }
    }
    CHECK_MSG(bad == 0, "%d code points do not decode back to themselves", bad);
    return check_finish();
}
