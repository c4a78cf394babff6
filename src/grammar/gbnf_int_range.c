// SPDX-License-Identifier: MIT
// GBNF for the decimal integers of a range, without leading zeros: split by digit count, and each
// same-length range written digit by digit as the alternatives that keep it between its bounds, so
// a schema's minimum and maximum hold for every generated number.
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "grammar/gbnf_text.h"

static int digits_of(long long v) {
    int d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

// Alternatives for the decimal numbers of exactly len digits between a and b (strings).
static void same_len(FILE *f, const char *a, const char *b, int len) {
    if (len == 0) {
        fputs("\"\"", f);
        return;
    }
    if (a[0] == b[0]) {
        fprintf(f, "\"%c\" ", a[0]);
        same_len(f, a + 1, b + 1, len - 1);
        return;
    }
    bool low_zero = true, high_nine = true;
    for (int i = 1; i < len; i++) low_zero &= a[i] == '0', high_nine &= b[i] == '9';
    if (low_zero && high_nine) {
        fprintf(f, "[%c-%c]", a[0], b[0]);
        if (len > 1) fprintf(f, " [0-9]{%d}", len - 1);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    fprintf(f, "( \"%c\" ", a[0]);
    same_len(f, a + 1, nines, len - 1);
    if (b[0] - a[0] >= 2) {
        fprintf(f, " | [%c-%c]", a[0] + 1, b[0] - 1);
        if (len > 1) fprintf(f, " [0-9]{%d}", len - 1);
    }
    fprintf(f, " | \"%c\" ", b[0]);
    same_len(f, zeros, b + 1, len - 1);
    fputs(" )", f);
}

// Non-negative integers in [a, b] (b < 0: no upper bound) without leading zeros.
void mx_gbnf_nonneg_range(FILE *f, long long a, long long b) {
    int dmax = b < 0 ? (digits_of(a) > 16 ? digits_of(a) : 16) : digits_of(b);
    fputs("( ", f);
    bool first = true;
    for (int d = digits_of(a); d <= dmax; d++) {
        long long lo_d = 1, hi_d;
        for (int i = 1; i < d; i++) lo_d *= 10;
        if (d == 1) lo_d = 0;
        hi_d = d == 1 ? 9 : lo_d * 10 - 1;
        if (a > lo_d) lo_d = a;
        if (b >= 0 && b < hi_d) hi_d = b;
        if (lo_d > hi_d) continue;
        char sa[24], sb[24];
        snprintf(sa, sizeof sa, "%lld", lo_d);
        snprintf(sb, sizeof sb, "%lld", hi_d);
        if (!first) fputs(" | ", f);
        first = false;
        same_len(f, sa, sb, d);
    }
    fputs(" )", f);
}
