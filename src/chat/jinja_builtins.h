// SPDX-License-Identifier: MIT
// The parser's view of the built-in tables: which filter and test names exist, so that a node with
// an unknown one can be marked at load and fail with a clear message when a render reaches it.
#ifndef MX_CHAT_JINJA_BUILTINS_H
#define MX_CHAT_JINJA_BUILTINS_H

#include <stdbool.h>
#include <stddef.h>

bool jinja_filter_known(const char *s, size_t n);
bool jinja_test_known(const char *s, size_t n);

#endif
