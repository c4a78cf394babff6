// SPDX-License-Identifier: MIT
// Fetches one file's content into a partial file and renames it into place when it is whole.
//
// The partial file is always a valid prefix of the content: it is resumed from its size (a Range
// request) and written strictly in order. Large remainders are fetched as several ranged
// requests in parallel (a window of chunks held in memory until the chunks before them are
// written); a dropped connection retries the rest of its range a few times. When an expected
// sha256 is given the content is hashed as it is written (the resumed prefix included) and a
// mismatch removes the partial file.
#ifndef MX_HUB_FETCH_H
#define MX_HUB_FETCH_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "hub/hub_env.h"

typedef struct hub_fetch_job {
    const mx_hub_env *env;
    const char *url;         // where the content is (resolve URL, or the host it redirects to)
    const char *partial;     // the partial file, e.g. blobs/<etag>.incomplete
    const char *dest;        // the final path (rename target)
    int64_t size;            // expected size in bytes
    const char *sha256;      // expected sha256 (64 lowercase hex digits) or NULL
    const char *display;     // name shown in progress and messages
    FILE *progress;          // NULL: silent
} hub_fetch_job;

enum { HUB_FETCH_OK = 0, HUB_FETCH_FAILED = -1, HUB_FETCH_BAD_CHECKSUM = -2 };

// Returns HUB_FETCH_OK, HUB_FETCH_FAILED (message in err; the partial file is kept to resume
// unless it could not be trusted) or HUB_FETCH_BAD_CHECKSUM (message in err; partial removed).
int hub_fetch(const hub_fetch_job *job, mx_error *err);

#endif
