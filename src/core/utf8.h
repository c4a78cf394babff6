// SPDX-License-Identifier: MIT
// UTF-8 encoding of one code point: the project's one encoder (the tokenizer's byte table and JSON
// escapes, the Jinja lexer's string escapes, the templates' case methods).
#ifndef MX_CORE_UTF8_H
#define MX_CORE_UTF8_H

#include <stddef.h>
#include <stdint.h>

// Writes code point cp (at most U+10FFFF; a surrogate is written like any other) as UTF-8 into out
// (4 bytes of room); returns its length, 1 to 4.
size_t mx_utf8_encode(uint32_t cp, char *out);

#endif
