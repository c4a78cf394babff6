// SPDX-License-Identifier: MIT
// JSON text with oversized integers (see json_text.h). One scan finds integer literals outside
// strings whose value does not fit int64; when there are none the text goes to jansson unchanged,
// otherwise a copy with ".0" appended to each such literal does (so jansson reads it as a real).
#include "io/json_text.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

// Whether the digits d[0, n) (no sign, no leading zeros beyond one) exceed int64 in magnitude
// (for a negative literal the limit is one larger; the difference never matters for real files,
// but it is handled so that INT64_MIN stays an integer).
static bool digits_overflow(const char *d, size_t n, bool negative) {
    static const char max_pos[] = "9223372036854775807", max_neg[] = "9223372036854775808";
    const char *lim = negative ? max_neg : max_pos;
    if (n != sizeof max_pos - 1) return n > sizeof max_pos - 1;
    return memcmp(d, lim, n) > 0;
}

// Finds the oversized integer literals of t[0, n): stores the offset just after each (up to cap) in
// ends and returns how many there are.
static size_t scan_big_integers(const char *t, size_t n, size_t *ends, size_t cap) {
    size_t count = 0;
    bool in_string = false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
            continue;
        }
        if (c != '-' && (c < '0' || c > '9')) continue;
        bool negative = c == '-';
        size_t start = negative ? i + 1 : i, j = start;
        while (j < n && t[j] >= '0' && t[j] <= '9') j++;
        bool is_integer = j == n || (t[j] != '.' && t[j] != 'e' && t[j] != 'E');
        if (is_integer && j > start && digits_overflow(t + start, j - start, negative)) {
            if (count < cap) ends[count] = j;
            count++;
        }
        // Skip the rest of the number (fraction, exponent) so its digits are not rescanned.
        while (j < n && ((t[j] >= '0' && t[j] <= '9') || t[j] == '.' || t[j] == 'e' || t[j] == 'E' ||
                         t[j] == '+' || t[j] == '-'))
            j++;
        i = j - 1;
    }
    return count;
}

json_t *mx_json_loadb(const char *text, size_t n, size_t flags, json_error_t *je) {
    size_t count = scan_big_integers(text, n, NULL, 0);
    if (count == 0) return json_loadb(text, n, flags, je);
    size_t *ends = malloc(count * sizeof *ends);
    char *copy = malloc(n + 2 * count + 1);
    if (!ends || !copy) {
        free(ends);
        free(copy);
        if (je) {
            memset(je, 0, sizeof *je);
            strcpy(je->text, "out of memory");
        }
        return NULL;
    }
    scan_big_integers(text, n, ends, count);
    size_t w = 0, r = 0;
    for (size_t k = 0; k < count; k++) {
        memcpy(copy + w, text + r, ends[k] - r);
        w += ends[k] - r;
        r = ends[k];
        copy[w++] = '.';
        copy[w++] = '0';
    }
    memcpy(copy + w, text + r, n - r);
    w += n - r;
    json_t *root = json_loadb(copy, w, flags, je);
    free(copy);
    free(ends);
    return root;
}

json_t *mx_json_loads(const char *text, size_t flags, json_error_t *je) {
    return mx_json_loadb(text, text ? strlen(text) : 0, flags, je);
}
