// SPDX-License-Identifier: MIT
// Stop strings found in streamed text in time linear in its length: one Knuth-Morris-Pratt
// automaton per stop string, whose state is the length of the longest suffix of the text fed so far
// that is a prefix of the stop string. A byte costs amortized constant work per stop string,
// whatever the stop strings' lengths (checking every suffix of the held text against every stop
// string after each token cost up to the square of their length per token).
#ifndef MX_SERVER_SRV_STOP_MATCH_H
#define MX_SERVER_SRV_STOP_MATCH_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_stop_match srv_stop_match;

// The automata of stops[0..n) (copied; NULL and empty strings are ignored). NULL when out of
// memory; with no stop string left it is a matcher that never matches.
srv_stop_match *srv_stop_match_create(const char *const *stops, int n);
void srv_stop_match_free(srv_stop_match *sm);
// Feeds s[0..n). Returns true when a stop string ends within it; *tail is then the number of bytes
// from the start of the earliest-starting stop string (of those whose first occurrence ends in s)
// to the end of s, which may reach back into text fed before. Once it has returned true the
// matcher is spent: later feeds return false.
bool srv_stop_match_feed(srv_stop_match *sm, const char *s, size_t n, size_t *tail);
// The longest suffix of the text fed so far that is a proper prefix of some stop string: the text
// to hold back until later bytes decide.
size_t srv_stop_match_partial(const srv_stop_match *sm);

#endif
