// SPDX-License-Identifier: MIT
// UTF-8-safe copies for replies (see srv_text.h). Well-formedness is the tokenizer's classifier
// (Unicode Table 3-7), so the server and the decoder agree on what is valid.
#include "server/srv_text.h"

#include <string.h>

#include "tokenizer/tok_internal.h"

size_t srv_text_copy(char *dst, size_t cap, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0, w = 0;
    while (i < n) {
        size_t len;
        int r = tok_utf8_classify(p + i, n - i, &len);
        const char *piece = s + i;
        size_t piece_len = len;
        if (r != 1) {
            if (r == 0) len = n - i;  // incomplete tail
            piece = "\xEF\xBF\xBD";
            piece_len = 3;
        }
        if (w + piece_len + 1 > cap) break;
        memcpy(dst + w, piece, piece_len);
        w += piece_len;
        i += len;
    }
    dst[w] = '\0';
    return w;
}
