// SPDX-License-Identifier: MIT
// Download progress for one file. On a terminal: one line redrawn in place (percent, bar, bytes,
// rate, time left), at most ten times a second. Otherwise (a log, a pipe): a line when the file
// starts and one when it ends, so logs stay readable. A NULL stream is silent.
#ifndef MX_HUB_PROGRESS_H
#define MX_HUB_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct hub_progress {
    FILE *out;          // NULL: silent
    bool bar;           // out is a terminal
    char name[200];
    int64_t total;      // bytes in the file
    int64_t done;       // bytes on disk so far
    int64_t resumed;    // bytes that were already there when the download started
    double t_start, t_drawn;
} hub_progress;

void hub_progress_begin(hub_progress *p, FILE *out, const char *name, int64_t total, int64_t already);
void hub_progress_advance(hub_progress *p, int64_t bytes);
// Bytes dropped (a restart from zero after a bad checksum or a server ignoring Range).
void hub_progress_rewind(hub_progress *p, int64_t to);
void hub_progress_end(hub_progress *p, bool ok);

// "12.3 MB" style sizes (decimal units, as the Hub shows them).
void hub_format_bytes(int64_t n, char *out, size_t cap);

#endif
