// SPDX-License-Identifier: MIT
// jansson's allocation failures, as the server sees them. jansson does not report every failed
// allocation: a setter returns -1 and the container goes on without the key or element, the parser
// can read a value with bytes left out (its lexer ignores a failed append) or call the failure a
// syntax error. So the server puts a hook in front of jansson's allocator (once, at its first
// start, chained to the functions set before) that counts the failures of each thread; code that
// builds or reads JSON takes srv_json_alloc_failures() before and compares after: a change means
// the result cannot be trusted, and the request ends with an error. Code that sets jansson's
// allocation functions after the server started replaces the hook: the count then stays put.
#ifndef MX_SERVER_SRV_JSON_ALLOC_H
#define MX_SERVER_SRV_JSON_ALLOC_H

// Installs the hook (idempotent, thread-safe).
void srv_json_alloc_install(void);
// jansson allocations that failed on this thread so far.
unsigned long srv_json_alloc_failures(void);

#endif
