// SPDX-License-Identifier: MIT
// Knuth-Morris-Pratt matching of stop strings (see srv_stop_match.h). border[k] is the length of
// the longest proper border (both a prefix and a suffix) of a stop string's first k bytes; on a
// mismatch the state falls back along borders, and since each byte raises a state by at most one,
// the fall-backs over a text never outnumber its bytes.
#include "server/srv_stop_match.h"

#include <stdlib.h>
#include <string.h>

typedef struct stop_automaton {
    char *pat;       // the stop string
    size_t m;        // its length (> 0)
    size_t *border;  // [m + 1]
    size_t state;    // matched prefix length, < m
} stop_automaton;

struct srv_stop_match {
    stop_automaton *a;
    int n;
    bool spent;
};

srv_stop_match *srv_stop_match_create(const char *const *stops, int n) {
    srv_stop_match *sm = calloc(1, sizeof *sm);
    if (!sm) return NULL;
    if (n > 0 && !(sm->a = calloc((size_t)n, sizeof *sm->a))) {
        free(sm);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        stop_automaton *a = &sm->a[sm->n++];
        a->m = strlen(stops[i]);
        a->pat = strdup(stops[i]);
        a->border = malloc((a->m + 1) * sizeof *a->border);
        if (!a->pat || !a->border) {
            srv_stop_match_free(sm);
            return NULL;
        }
        a->border[0] = a->border[1] = 0;
        size_t b = 0;
        for (size_t k = 1; k < a->m; k++) {
            while (b > 0 && a->pat[k] != a->pat[b]) b = a->border[b];
            if (a->pat[k] == a->pat[b]) b++;
            a->border[k + 1] = b;
        }
    }
    return sm;
}

void srv_stop_match_free(srv_stop_match *sm) {
    if (!sm) return;
    for (int i = 0; i < sm->n; i++) free(sm->a[i].pat), free(sm->a[i].border);
    free(sm->a);
    free(sm);
}

bool srv_stop_match_feed(srv_stop_match *sm, const char *s, size_t n, size_t *tail) {
    if (sm->spent) return false;
    bool found = false;
    size_t best = 0;  // the largest tail: the earliest start
    for (int i = 0; i < sm->n; i++) {
        stop_automaton *a = &sm->a[i];
        size_t q = a->state;
        for (size_t j = 0; j < n; j++) {
            while (q > 0 && s[j] != a->pat[q]) q = a->border[q];
            if (s[j] == a->pat[q]) q++;
            if (q == a->m) {
                size_t t = n - (j + 1) + a->m;
                if (!found || t > best) best = t;
                found = true;
                q = a->border[q];
                break;  // its first occurrence is the earliest one of this stop string
            }
        }
        a->state = q;
    }
    if (found) {
        sm->spent = true;
        *tail = best;
    }
    return found;
}

size_t srv_stop_match_partial(const srv_stop_match *sm) {
    size_t hold = 0;
    for (int i = 0; i < sm->n; i++)
        if (sm->a[i].state > hold) hold = sm->a[i].state;
    return hold;
}
