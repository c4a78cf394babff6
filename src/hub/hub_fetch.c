// SPDX-License-Identifier: MIT
// Content transfer of one file (see hub_fetch.h): resume, parallel ranged chunks, retries,
// in-order writing with a running sha256, the final size and checksum checks, then rename.
#include "hub/hub_fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "hub/hub_http.h"
#include "hub/hub_progress.h"
#include "hub/sha256.h"
#include "io/write_file.h"

enum {
    WINDOW = 8,                       // ranged requests in flight
    MAX_RETRIES = 5,                  // consecutive failures of one range without progress
    MIN_CHUNK = 1 << 20,              // 1 MiB
    MAX_CHUNK = 8 << 20,              // 8 MiB: at most WINDOW * 8 MiB held in memory
    PARALLEL_THRESHOLD = 4 << 20,     // smaller remainders take one request
};

typedef struct fetch_state {
    const hub_fetch_job *job;
    int fd;
    int64_t written;     // bytes of the partial file (a prefix of the content)
    mx_sha256 hash;      // of those bytes, when job->sha256 is set
    hub_progress progress;
    int write_errno;     // set when a write to the partial file failed
    bool too_long;       // the server sent more than job->size bytes
} fetch_state;

static void pause_before_retry(int attempt) {
    struct timespec ts = {0, 200000000L * attempt};
    nanosleep(&ts, NULL);
}

static int write_out(fetch_state *st, const char *data, size_t n) {
    if (st->written + (int64_t)n > st->job->size) {
        st->too_long = true;
        return -1;
    }
    if (mx_write_all(st->fd, data, n, -1) != 0) {
        st->write_errno = errno;
        return -1;
    }
    if (st->job->sha256) mx_sha256_update(&st->hash, data, n);
    st->written += (int64_t)n;
    hub_progress_advance(&st->progress, (int64_t)n);
    return 0;
}

static int restart_from_zero(fetch_state *st) {
    if (ftruncate(st->fd, 0) != 0 && errno != EINVAL) {
        st->write_errno = errno;
        return -1;
    }
    lseek(st->fd, 0, SEEK_SET);
    st->written = 0;
    mx_sha256_init(&st->hash);
    hub_progress_rewind(&st->progress, 0);
    return 0;
}

static int write_failure(const fetch_state *st, mx_error *err) {
    if (st->too_long)
        return mx_fail(err, "%s: the server sent more than the %" PRId64 " bytes it announced", st->job->display,
                       st->job->size);
    if (st->write_errno == ENOSPC || st->write_errno == EDQUOT)
        return mx_fail(err,
                       "disk full while writing %s (%s); free some space and run again: the %" PRId64
                       " bytes already written are kept and the download resumes from there",
                       st->job->partial, strerror(st->write_errno), st->written);
    return mx_fail(err, "cannot write %s: %s", st->job->partial, strerror(st->write_errno));
}

static int http_status_failure(const fetch_state *st, const hub_request *r, mx_error *err) {
    return mx_fail(err, "downloading %s from %s: HTTP %ld%s%s", st->job->display, r->url, r->resp.status,
                   r->resp.error_message[0] ? ": " : "", r->resp.error_message);
}

// --- one request from the current end of the partial file ---------------------------------------

typedef struct stream_sink {
    fetch_state *st;
    hub_request *req;
    int64_t asked_from;  // -1: no Range sent
    bool checked;        // the response's first bytes were checked against the request
    bool bad_range;      // a 206 starting elsewhere than asked
} stream_sink;

static size_t stream_write(const char *data, size_t n, void *user) {
    stream_sink *s = user;
    if (!s->checked) {
        s->checked = true;
        if (s->req->resp.status == 206 && s->req->resp.range_start != s->asked_from) {
            s->bad_range = true;
            return 0;
        }
        // A server that ignores Range answers 200 with the whole file: start over from byte 0.
        if (s->asked_from > 0 && s->req->resp.status == 200 && restart_from_zero(s->st) != 0) return 0;
    }
    return write_out(s->st, data, n) == 0 ? n : 0;
}

static int fetch_stream(fetch_state *st, mx_error *err) {
    hub_request req = {0};
    int failures = 0, rc = -1;
    while (st->written < st->job->size) {
        int64_t before = st->written;
        stream_sink sink = {st, &req, st->written > 0 ? st->written : -1, false, false};
        if (hub_request_setup(&req, st->job->env, "GET", st->job->url, sink.asked_from, -1, stream_write, &sink, err))
            goto done;
        CURLcode cc = hub_request_perform(&req);
        long status = req.resp.status;
        if (sink.bad_range) {
            mx_fail(err, "%s: asked %s for bytes from %" PRId64 " and got a range starting at %" PRId64,
                    st->job->display, req.url, sink.asked_from, req.resp.range_start);
            goto done;
        }
        if (cc == CURLE_OK && (status < 200 || status >= 300)) {
            http_status_failure(st, &req, err);
            goto done;
        }
        hub_net_class cls = hub_net_classify(cc);
        if (cls == HUB_NET_SINK_FAILED) {
            write_failure(st, err);
            goto done;
        }
        if (cc == CURLE_OK && st->written < st->job->size) cls = HUB_NET_DROPPED;  // a short body
        if (cls == HUB_NET_OK) continue;
        if (cls != HUB_NET_DROPPED) {
            hub_transport_fail(&req, cc, st->job->env, err);
            goto done;
        }
        failures = st->written > before ? 1 : failures + 1;
        if (failures > MAX_RETRIES) {
            if (cc == CURLE_OK)
                mx_fail(err, "%s: the server keeps ending the response at byte %" PRId64 " of %" PRId64,
                        st->job->display, st->written, st->job->size);
            else
                hub_transport_fail(&req, cc, st->job->env, err);
            goto done;
        }
        pause_before_retry(failures);
    }
    rc = 0;
done:
    hub_request_free(&req);
    return rc;
}

// --- parallel ranged chunks --------------------------------------------------------------------

typedef struct chunk_slot {
    hub_request req;
    char *buf;
    int64_t start, len, got;  // the chunk's range and the bytes of it received
    int64_t asked_from;       // first byte of the range asked in the current request
    int failures;             // consecutive failed requests without progress
    bool active, done, checked;
    bool ignored_range;       // the server answered 200 (whole file) to a Range request
    bool bad_range;
} chunk_slot;

static size_t chunk_write(const char *data, size_t n, void *user) {
    chunk_slot *s = user;
    if (!s->checked) {
        s->checked = true;
        if (s->req.resp.status == 200) {
            s->ignored_range = true;
            return 0;
        }
        if (s->req.resp.range_start != s->asked_from) {
            s->bad_range = true;
            return 0;
        }
    }
    if (s->got + (int64_t)n > s->len) {
        s->bad_range = true;
        return 0;
    }
    memcpy(s->buf + s->got, data, n);
    s->got += (int64_t)n;
    return n;
}

static int chunk_start(fetch_state *st, CURLM *multi, chunk_slot *s, mx_error *err) {
    s->asked_from = s->start + s->got;
    s->checked = false;
    if (hub_request_setup(&s->req, st->job->env, "GET", st->job->url, s->asked_from, s->start + s->len - 1,
                          chunk_write, s, err))
        return -1;
    if (curl_multi_add_handle(multi, s->req.curl) != CURLM_OK)
        return mx_fail(err, "libcurl refused a transfer for %s", st->job->display);
    s->active = true;
    return 0;
}

// Returns 0 when every byte is written, 1 when the server ignores Range (the caller falls back to
// one request), -1 on failure.
static int fetch_chunks(fetch_state *st, mx_error *err) {
    const int64_t remaining = st->job->size - st->written;
    int64_t chunk = remaining / (WINDOW * 4);
    chunk = chunk < MIN_CHUNK ? MIN_CHUNK : chunk > MAX_CHUNK ? MAX_CHUNK : (chunk + 65535) / 65536 * 65536;
    const int64_t n_chunks = (remaining + chunk - 1) / chunk, base = st->written;
    chunk_slot slots[WINDOW];
    memset(slots, 0, sizeof slots);
    CURLM *multi = curl_multi_init();
    int rc = -1;
    if (!multi) return mx_fail(err, "libcurl could not start parallel transfers");
    for (int i = 0; i < WINDOW; i++)
        if (!(slots[i].buf = malloc((size_t)chunk))) {
            mx_fail(err, "out of memory for download buffers (%d x %" PRId64 " bytes)", WINDOW, chunk);
            goto done;
        }
    int64_t next_chunk = 0, next_flush = 0;
    int slot_of[WINDOW];  // slot_of[k % WINDOW]: the slot holding chunk k (chunks in the window)
    while (next_flush < n_chunks) {
        for (int i = 0; i < WINDOW && next_chunk < n_chunks && next_chunk < next_flush + WINDOW; i++) {
            chunk_slot *s = &slots[i];
            if (s->active || s->done) continue;
            s->start = base + next_chunk * chunk;
            s->len = st->job->size - s->start < chunk ? st->job->size - s->start : chunk;
            s->got = 0;
            s->failures = 0;
            slot_of[next_chunk % WINDOW] = i;
            next_chunk++;
            if (chunk_start(st, multi, s, err)) goto done;
        }
        int running = 0;
        if (curl_multi_perform(multi, &running) != CURLM_OK) {
            mx_fail(err, "libcurl failed while downloading %s", st->job->display);
            goto done;
        }
        CURLMsg *msg;
        int queued;
        while ((msg = curl_multi_info_read(multi, &queued)) != NULL) {
            if (msg->msg != CURLMSG_DONE) continue;
            chunk_slot *s = NULL;
            for (int i = 0; i < WINDOW; i++)
                if (slots[i].active && slots[i].req.curl == msg->easy_handle) s = &slots[i];
            if (!s) continue;
            CURLcode cc = msg->data.result;
            curl_multi_remove_handle(multi, s->req.curl);
            s->active = false;
            if (s->ignored_range) {
                rc = 1;
                goto done;
            }
            if (s->bad_range) {
                mx_fail(err, "%s: asked %s for bytes %" PRId64 "-%" PRId64 " and got a different range",
                        st->job->display, s->req.url, s->asked_from, s->start + s->len - 1);
                goto done;
            }
            long status = s->req.resp.status;
            if (cc == CURLE_OK && (status < 200 || status >= 300)) {
                http_status_failure(st, &s->req, err);
                goto done;
            }
            if (cc == CURLE_OK && s->got == s->len) {
                s->done = true;
                continue;
            }
            hub_net_class cls = cc == CURLE_OK ? HUB_NET_DROPPED : hub_net_classify(cc);
            if (cls != HUB_NET_DROPPED) {
                hub_transport_fail(&s->req, cc, st->job->env, err);
                goto done;
            }
            s->failures = s->got > s->asked_from - s->start ? 1 : s->failures + 1;
            if (s->failures > MAX_RETRIES) {
                if (cc == CURLE_OK)
                    mx_fail(err, "%s: the server keeps ending responses early (bytes %" PRId64 "-%" PRId64 ")",
                            st->job->display, s->start, s->start + s->len - 1);
                else
                    hub_transport_fail(&s->req, cc, st->job->env, err);
                goto done;
            }
            pause_before_retry(s->failures);
            if (chunk_start(st, multi, s, err)) goto done;
        }
        while (next_flush < next_chunk && slots[slot_of[next_flush % WINDOW]].done) {
            chunk_slot *s = &slots[slot_of[next_flush % WINDOW]];
            if (write_out(st, s->buf, (size_t)s->len) != 0) {
                write_failure(st, err);
                goto done;
            }
            s->done = false;
            next_flush++;
        }
        if (next_flush < n_chunks && curl_multi_poll(multi, NULL, 0, 200, NULL) != CURLM_OK) {
            mx_fail(err, "libcurl failed while waiting for %s", st->job->display);
            goto done;
        }
    }
    rc = 0;
done:
    for (int i = 0; i < WINDOW; i++) {
        if (slots[i].active) curl_multi_remove_handle(multi, slots[i].req.curl);
        hub_request_free(&slots[i].req);
        free(slots[i].buf);
    }
    curl_multi_cleanup(multi);
    return rc;
}

// --- the whole job ------------------------------------------------------------------------------

static int hash_existing_prefix(fetch_state *st, mx_error *err) {
    enum { BLOCK = 1 << 20 };
    char *buf = st->written > 0 ? malloc(BLOCK) : NULL;
    if (st->written > 0 && !buf) return mx_fail(err, "out of memory hashing %s", st->job->partial);
    for (int64_t off = 0; off < st->written;) {
        ssize_t n = pread(st->fd, buf, BLOCK, off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            free(buf);
            return mx_fail(err, "cannot read %s: %s", st->job->partial, n < 0 ? strerror(errno) : "short file");
        }
        mx_sha256_update(&st->hash, buf, (size_t)n);
        off += n;
    }
    free(buf);
    return 0;
}

static int check_disk_space(const fetch_state *st, mx_error *err) {
    char dir[4600];
    snprintf(dir, sizeof dir, "%s", st->job->partial);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    struct statvfs vfs;
    if (statvfs(slash ? dir : ".", &vfs) != 0) return 0;  // unknown: the writes will tell
    int64_t need = st->job->size - st->written, avail = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
    if (avail >= need) return 0;
    char need_s[32], avail_s[32];
    hub_format_bytes(need, need_s, sizeof need_s);
    hub_format_bytes(avail, avail_s, sizeof avail_s);
    return mx_fail(err, "disk full: %s needs %s more in %s, which has %s free", st->job->display, need_s,
                   slash ? dir : ".", avail_s);
}

int hub_fetch(const hub_fetch_job *job, mx_error *err) {
    fetch_state st = {.job = job, .fd = -1};
    mx_sha256_init(&st.hash);
    st.fd = open(job->partial, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (st.fd < 0) return mx_fail(err, "cannot create %s: %s", job->partial, strerror(errno));
    struct stat sb;
    if (fstat(st.fd, &sb) != 0) {
        close(st.fd);
        return mx_fail(err, "cannot stat %s: %s", job->partial, strerror(errno));
    }
    st.written = S_ISREG(sb.st_mode) ? sb.st_size : 0;
    if (st.written > job->size && ftruncate(st.fd, 0) == 0) st.written = 0;
    int rc = HUB_FETCH_FAILED;
    if ((job->sha256 && hash_existing_prefix(&st, err) != 0) || check_disk_space(&st, err) != 0) goto fail;
    lseek(st.fd, st.written, SEEK_SET);
    hub_progress_begin(&st.progress, job->progress, job->display, job->size, st.written);
    int got = 0;
    if (job->size - st.written > PARALLEL_THRESHOLD) got = fetch_chunks(&st, err);
    if (got == 1 || (got == 0 && st.written < job->size)) got = fetch_stream(&st, err);
    if (got != 0) goto fail;
    if (st.written != job->size) {
        mx_fail(err, "%s: got %" PRId64 " bytes, expected %" PRId64, job->display, st.written, job->size);
        goto fail;
    }
    if (job->sha256) {
        char hex[65];
        mx_sha256_hex(&st.hash, hex);
        if (strcmp(hex, job->sha256) != 0) {
            hub_progress_end(&st.progress, false);
            close(st.fd);
            unlink(job->partial);
            mx_fail(err,
                    "checksum mismatch for %s: the Hub names sha256 %s, the downloaded data hashes to %s; "
                    "the bad download was removed",
                    job->display, job->sha256, hex);
            return HUB_FETCH_BAD_CHECKSUM;
        }
    }
    if (close(st.fd) != 0) {
        st.fd = -1;
        mx_fail(err, "cannot write %s: %s", job->partial, strerror(errno));
        goto fail;
    }
    st.fd = -1;
    if (rename(job->partial, job->dest) != 0) {
        mx_fail(err, "cannot rename %s to %s: %s", job->partial, job->dest, strerror(errno));
        goto fail;
    }
    hub_progress_end(&st.progress, true);
    return HUB_FETCH_OK;
fail:
    if (st.progress.t_start > 0) hub_progress_end(&st.progress, false);
    if (st.fd >= 0) close(st.fd);
    return rc;
}
