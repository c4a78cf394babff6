// SPDX-License-Identifier: MIT
// Snapshot downloads (see hub.h): one revision request for the commit and the file list, then for
// each selected file that is not already present a HEAD for its ETag, size and location, and the
// content (hub_fetch) unless a blob with that ETag is already cached. A blob whose sha256 does not
// match is removed and fetched once more before giving up.
#include "hub/hub.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "hub/hub_api.h"
#include "hub/hub_cache.h"
#include "hub/hub_env.h"
#include "hub/hub_fetch.h"
#include "hub/hub_progress.h"
#include "io/mapped_file.h"
#include "io/write_file.h"

static bool path_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static bool folder_has_files(const char *dir) {
    char probe[4600];
    snprintf(probe, sizeof probe, "%s/.cache/huggingface", dir);
    return path_exists(probe);
}

static bool is_sha256(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return false;
    return n == 64;
}

static bool selected(const char *file, const char *const *patterns) {
    for (; *patterns; patterns++)
        if (fnmatch(*patterns, file, 0) == 0) return true;
    return false;
}

static void note(FILE *out, const char *fmt, const char *a, const char *b) {
    if (!out) return;
    fprintf(out, fmt, a, b);
    fflush(out);
}

// Fetches url into dest through partial; on a checksum mismatch (partial removed) tries once more.
static int fetch_verified(const mx_hub_env *env, const hub_file_meta *meta, const char *file, const char *partial,
                          const char *dest, FILE *progress, mx_error *err) {
    hub_fetch_job job = {env, meta->url, partial, dest, meta->size, is_sha256(meta->etag) ? meta->etag : NULL,
                         file, progress};
    int rc = hub_fetch(&job, err);
    if (rc == HUB_FETCH_BAD_CHECKSUM) {
        note(progress, "download: %s: %s; fetching it again\n", file, err->msg);
        rc = hub_fetch(&job, err);
    }
    return rc == HUB_FETCH_OK ? 0 : -1;
}

typedef struct tally {
    int fetched, present;
    int64_t bytes;
} tally;

// --- the hub cache -----------------------------------------------------------------------------

static int cache_file(const mx_hub_env *env, const char *repo, const char *repo_dir, const char *commit,
                      const char *file, FILE *progress, tally *t, mx_error *err) {
    char pointer[8400];
    snprintf(pointer, sizeof pointer, "%s/snapshots/%s/%s", repo_dir, commit, file);
    if (path_exists(pointer)) {  // the snapshot already has it: no request at all
        t->present++;
        return 0;
    }
    hub_file_meta meta;
    if (hub_api_file_meta(env, repo, commit, file, &meta, err) != 0) return -1;
    char blob[4600], partial[4700];
    snprintf(blob, sizeof blob, "%s/blobs/%s", repo_dir, meta.etag);
    snprintf(partial, sizeof partial, "%s.incomplete", blob);
    if (mx_make_parent_dirs(blob, HUB_FOLDER_MODE, err) != 0) return -1;
    int lock = hub_lock_blob(env->cache_dir, repo, meta.etag, progress, err);
    if (lock < 0) return -1;
    int rc = 0;
    if (path_exists(blob)) {  // same content under another commit or file name
        t->present++;
    } else {
        rc = fetch_verified(env, &meta, file, partial, blob, progress, err);
        if (rc == 0) t->fetched++, t->bytes += meta.size;
    }
    close(lock);
    if (rc == 0) rc = hub_link_snapshot(repo_dir, commit, file, meta.etag, err);
    return rc;
}

// --- a plain folder (--local-dir) --------------------------------------------------------------

// DIR/.cache/huggingface/download/<file>.metadata holds "commit\netag\ntimestamp\n".
static int read_local_metadata(const char *path, char *commit, size_t ccap, char *etag, size_t ecap) {
    mx_error ignored = {{0}};
    char *text = mx_read_text_file(path, NULL, &ignored);
    if (!text) return -1;
    char a[256] = "", b[300] = "";
    const char *nl = strchr(text, '\n');
    bool ok = nl && nl[1];
    if (ok) {
        snprintf(a, sizeof a, "%.*s", (int)(nl - text), text);
        snprintf(b, sizeof b, "%s", nl + 1);
    }
    free(text);
    a[strcspn(a, "\r\n")] = 0;
    b[strcspn(b, "\r\n")] = 0;
    if (!ok || !a[0] || !b[0]) return -1;
    snprintf(commit, ccap, "%s", a);
    snprintf(etag, ecap, "%s", b);
    return 0;
}

static int write_local_metadata(const char *path, const char *commit, const char *etag, mx_error *err) {
    if (mx_make_parent_dirs(path, HUB_FOLDER_MODE, err) != 0) return -1;
    char text[700];
    snprintf(text, sizeof text, "%s\n%s\n%.3f\n", commit, etag, mx_wall_now());
    return mx_write_text_file(path, text, err);
}

static int local_prepare(const char *dir, mx_error *err) {
    char path[4600];
    snprintf(path, sizeof path, "%s/.cache/huggingface", dir);
    if (mx_make_dirs(path, HUB_FOLDER_MODE, err) != 0) return -1;
    snprintf(path, sizeof path, "%s/.cache/huggingface/.gitignore", dir);
    mx_error ignored = {{0}};
    if (!path_exists(path)) mx_write_text_file(path, "*\n", &ignored);  // best effort, as huggingface_hub
    return 0;
}

static int local_file(const mx_hub_env *env, const char *repo, const char *dir, const char *commit, const char *file,
                      FILE *progress, tally *t, mx_error *err) {
    char dest[8400], metadata[8500], have_commit[256], have_etag[300];
    snprintf(dest, sizeof dest, "%s/%s", dir, file);
    snprintf(metadata, sizeof metadata, "%s/.cache/huggingface/download/%s.metadata", dir, file);
    bool have = read_local_metadata(metadata, have_commit, sizeof have_commit, have_etag, sizeof have_etag) == 0 &&
                path_exists(dest);
    if (have && strcmp(have_commit, commit) == 0) {
        t->present++;
        return 0;
    }
    hub_file_meta meta;
    if (hub_api_file_meta(env, repo, commit, file, &meta, err) != 0) return -1;
    if (have && strcmp(have_etag, meta.etag) == 0) {  // unchanged since an earlier commit
        t->present++;
        return write_local_metadata(metadata, commit, meta.etag, err);
    }
    char partial[8800];
    snprintf(partial, sizeof partial, "%s/.cache/huggingface/download/%s.%s.incomplete", dir, file, meta.etag);
    if (mx_make_parent_dirs(partial, HUB_FOLDER_MODE, err) != 0 || mx_make_parent_dirs(dest, HUB_FOLDER_MODE, err) != 0)
        return -1;
    if (fetch_verified(env, &meta, file, partial, dest, progress, err) != 0) return -1;
    t->fetched++;
    t->bytes += meta.size;
    return write_local_metadata(metadata, commit, meta.etag, err);
}

// --- without the network -----------------------------------------------------------------------


// --- the download --------------------------------------------------------------------------------

int mx_hub_download(const mx_hub_download_opts *o, char *out, size_t cap, mx_error *err) {
    if (hub_check_repo_id(o->repo, err) != 0) return -1;
    const char *revision = o->revision && *o->revision ? o->revision : "main";
    const char *const *patterns = o->include && o->include[0] ? o->include : mx_hub_default_patterns;
    mx_hub_env env;
    mx_hub_env_load(&env);
    char repo_dir[4600];
    hub_repo_folder(env.cache_dir, o->repo, repo_dir, sizeof repo_dir);

    if (env.offline) {
        if (o->local_dir) {
            if (folder_has_files(o->local_dir)) {
                snprintf(out, cap, "%s", o->local_dir);
                return 0;
            }
            return mx_fail(err, "HF_HUB_OFFLINE=1 is set and %s holds no download of %s; unset it to download",
                           o->local_dir, o->repo);
        }
        if (hub_cached_snapshot(env.cache_dir, o->repo, revision, out, cap) == 0) return 0;
        return mx_fail(err,
                       "HF_HUB_OFFLINE=1 is set and %s (revision %s) is not in the cache (looked in %s); unset "
                       "HF_HUB_OFFLINE to download it",
                       o->repo, revision, repo_dir);
    }

    hub_revision rev;
    if (hub_api_revision(&env, o->repo, revision, &rev, err) != 0) {
        // As huggingface_hub does: when the Hub cannot answer, a cached snapshot still serves.
        if (!o->local_dir && hub_cached_snapshot(env.cache_dir, o->repo, revision, out, cap) == 0) {
            note(o->progress, "download: %s; using the cached snapshot %s\n", err->msg, out);
            return 0;
        }
        return -1;
    }
    int rc = 0, n_selected = 0;
    tally t = {0};
    if (o->local_dir) {
        rc = local_prepare(o->local_dir, err);
    } else {
        rc = mx_make_dirs(repo_dir, HUB_FOLDER_MODE, err);
        if (rc == 0) {
            hub_tag_cache_dir(env.cache_dir);
            rc = hub_write_ref(repo_dir, revision, rev.commit, err);
        }
    }
    for (int i = 0; rc == 0 && i < rev.n_files; i++) {
        if (!selected(rev.files[i], patterns)) continue;
        n_selected++;
        if (o->local_dir)
            rc = local_file(&env, o->repo, o->local_dir, rev.commit, rev.files[i], o->progress, &t, err);
        else
            rc = cache_file(&env, o->repo, repo_dir, rev.commit, rev.files[i], o->progress, &t, err);
    }
    if (rc == 0 && n_selected == 0) {
        char listing[600] = "";
        size_t used = 0;
        for (int i = 0; i < rev.n_files && used < sizeof listing - 80; i++)
            used += (size_t)snprintf(listing + used, sizeof listing - used, "%s%s", i ? ", " : "", rev.files[i]);
        rc = mx_fail(err, "no file of %s at %s matches the %s (the repo has: %s)", o->repo, revision,
                     o->include && o->include[0] ? "--include patterns" : "model file patterns",
                     rev.n_files ? listing : "no files");
    }
    if (rc == 0) {
        if (o->local_dir)
            snprintf(out, cap, "%s", o->local_dir);
        else
            snprintf(out, cap, "%s/snapshots/%s", repo_dir, rev.commit);
        if (o->progress) {
            char size[32];
            hub_format_bytes(t.bytes, size, sizeof size);
            fprintf(o->progress, "download: %s at %.12s: %d file%s fetched (%s), %d already present -> %s\n", o->repo,
                    rev.commit, t.fetched, t.fetched == 1 ? "" : "s", size, t.present, out);
            fflush(o->progress);
        }
    }
    hub_revision_free(&rev);
    return rc;
}
