// SPDX-License-Identifier: MIT
// Text that reaches a reply: every string the server puts into JSON must be valid UTF-8 (the
// encoder refuses anything else, and a refused reply would be a dropped connection). Strings that
// come from clients (paths, the model name, messages quoting them) or that are cut to fit a
// buffer pass through here: invalid bytes become U+FFFD and cuts fall on character boundaries.
#ifndef MX_SERVER_SRV_TEXT_H
#define MX_SERVER_SRV_TEXT_H

#include <stddef.h>

// Copies s[0..n) into dst (cap bytes, cap >= 1, NUL included) as valid UTF-8: each maximal invalid
// subpart becomes U+FFFD; when the result does not fit, it ends before the first character that
// does not fit whole. Returns the bytes written (excluding the NUL).
size_t srv_text_copy(char *dst, size_t cap, const char *s, size_t n);

#endif
