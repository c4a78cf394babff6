// SPDX-License-Identifier: MIT
// Progress reporting for downloads (see hub_progress.h): sizes in human units, a redrawn bar with
// rate and ETA when stderr is a terminal, plain start and end lines otherwise.
#include "hub/hub_progress.h"

#include <string.h>
#include <unistd.h>

#include "core/clock.h"

void hub_format_bytes(int64_t n, char *out, size_t cap) {
    static const char *units[] = {"B", "kB", "MB", "GB", "TB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1000 && u < 4) v /= 1000, u++;
    if (u == 0)
        snprintf(out, cap, "%lld B", (long long)n);
    else
        snprintf(out, cap, "%.1f %s", v, units[u]);
}

static void draw(hub_progress *p, bool final) {
    double now = mx_now(), elapsed = now - p->t_start;
    double rate = elapsed > 0 ? (double)(p->done - p->resumed) / elapsed : 0;
    int pct = p->total > 0 ? (int)(100.0 * (double)p->done / (double)p->total) : 100;
    char bar[21], done[32], total[32], speed[40], eta[32] = "";
    int fill = pct / 5;
    for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : ' ';
    bar[20] = 0;
    hub_format_bytes(p->done, done, sizeof done);
    hub_format_bytes(p->total, total, sizeof total);
    hub_format_bytes((int64_t)rate, speed, sizeof speed);
    if (!final && rate > 0) {
        long left = (long)((double)(p->total - p->done) / rate + 0.5);
        if (left >= 3600)
            snprintf(eta, sizeof eta, "%ldh%02ldm left", left / 3600, left / 60 % 60);
        else if (left >= 60)
            snprintf(eta, sizeof eta, "%ldm%02lds left", left / 60, left % 60);
        else
            snprintf(eta, sizeof eta, "%lds left", left);
    }
    fprintf(p->out, "\r%-32.32s %3d%% [%s] %s / %s  %s/s  %-12s", p->name, pct, bar, done, total, speed, eta);
    if (final) fputc('\n', p->out);
    fflush(p->out);
    p->t_drawn = now;
}

void hub_progress_begin(hub_progress *p, FILE *out, const char *name, int64_t total, int64_t already) {
    memset(p, 0, sizeof *p);
    p->out = out;
    p->bar = out && isatty(fileno(out));
    snprintf(p->name, sizeof p->name, "%s", name);
    p->total = total;
    p->done = p->resumed = already;
    p->t_start = mx_now();
    if (!out) return;
    if (p->bar) {
        draw(p, false);
        return;
    }
    char size[32], have[32];
    hub_format_bytes(total, size, sizeof size);
    hub_format_bytes(already, have, sizeof have);
    if (already > 0)
        fprintf(out, "download: %s (%s, resuming at %s)\n", name, size, have);
    else
        fprintf(out, "download: %s (%s)\n", name, size);
    fflush(out);
}

void hub_progress_advance(hub_progress *p, int64_t bytes) {
    p->done += bytes;
    if (p->out && p->bar && mx_now() - p->t_drawn >= 0.1) draw(p, false);
}

void hub_progress_rewind(hub_progress *p, int64_t to) {
    p->done = to;
    if (p->resumed > to) p->resumed = to;
}

void hub_progress_end(hub_progress *p, bool ok) {
    if (!p->out) return;
    if (p->bar) {
        if (ok)
            draw(p, true);
        else
            fputc('\n', p->out);
        fflush(p->out);
        return;
    }
    if (!ok) return;
    double elapsed = mx_now() - p->t_start;
    char size[32], speed[32];
    hub_format_bytes(p->done - p->resumed, size, sizeof size);
    hub_format_bytes(elapsed > 0 ? (int64_t)((double)(p->done - p->resumed) / elapsed) : 0, speed, sizeof speed);
    fprintf(p->out, "download: %s done, %s in %.1f s (%s/s)\n", p->name, size, elapsed, speed);
    fflush(p->out);
}
