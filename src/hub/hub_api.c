// SPDX-License-Identifier: MIT
// Hub protocol requests (see hub_api.h) and the messages for their HTTP errors. The Hub answers
// 401 with X-Error-Code RepoNotFound for a repo that does not exist *or* that needs a token, so
// that case names both causes and how to provide a token.
#include "hub/hub_api.h"

#include <ctype.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hub/hub_cache.h"
#include "hub/hub_http.h"

void hub_url_escape(const char *s, int keep_slash, char *out, size_t cap) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < cap; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/')) {
            out[o++] = (char)*p;
        } else {
            out[o++] = '%';
            out[o++] = hex[*p >> 4];
            out[o++] = hex[*p & 15];
        }
    }
    out[o] = 0;
}

static int token_hint(const mx_hub_env *env, char *out, size_t cap) {
    if (env->token[0])
        return snprintf(out, cap, "the token from %s was sent; check that it is valid and has access to it",
                        env->token_source);
    return snprintf(out, cap,
                    "no token was sent: set HF_TOKEN=hf_... (create one at https://huggingface.co/settings/tokens) "
                    "or write it to %s",
                    env->token_file);
}

static int status_fail(const hub_response *resp, const mx_hub_env *env, const hub_what *what, const char *url,
                       mx_error *err) {
    const char *code = resp->error_code;
    long s = resp->status;
    char hint[1400], server[600] = "";
    token_hint(env, hint, sizeof hint);
    if (resp->error_message[0]) snprintf(server, sizeof server, " (the Hub says: %s)", resp->error_message);
    if (strcmp(code, "GatedRepo") == 0)
        return mx_fail(err,
                       "'%s' is a gated repository (HTTP %ld)%s: accept its conditions at %s/%s while logged in, "
                       "then give mlxcel a token; %s",
                       what->repo, s, server, env->endpoint, what->repo, hint);
    if (strcmp(code, "RevisionNotFound") == 0)
        return mx_fail(err, "revision '%s' not found in %s (HTTP %ld)%s", what->revision, what->repo, s, server);
    if (strcmp(code, "EntryNotFound") == 0 || (s == 404 && what->file && !code[0]))
        return mx_fail(err, "file '%s' not found in %s at revision %s (HTTP %ld)%s", what->file ? what->file : "?",
                       what->repo, what->revision, s, server);
    if (s == 401 || s == 403)
        return mx_fail(err,
                       "access to '%s' on %s denied (HTTP %ld)%s: it does not exist, or it is private or gated; %s",
                       what->repo, env->endpoint, s, server, hint);
    if (s == 404)
        return mx_fail(err, "repository '%s' not found on %s (HTTP 404)%s; check the name", what->repo,
                       env->endpoint, server);
    if (s == 429)
        return mx_fail(err, "%s is rate limiting requests (HTTP 429)%s; wait a little and run again", env->endpoint,
                       server);
    if (s >= 500)
        return mx_fail(err, "%s answered HTTP %ld for %s%s: the server has a problem; try again later",
                       env->endpoint, s, url, server);
    return mx_fail(err, "unexpected HTTP %ld for %s%s", s, url, server);
}

// --- GET /api/models/{repo}/revision/{revision} -------------------------------------------------

typedef struct body_buf {
    char *data;
    size_t len, cap;
} body_buf;

static size_t body_append(const char *data, size_t n, void *user) {
    body_buf *b = user;
    if (b->len + n + 1 > (64u << 20)) return 0;  // no repo listing is this large
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 16384;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) return 0;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = 0;
    return n;
}

void hub_revision_free(hub_revision *rev) {
    for (int i = 0; i < rev->n_files; i++) free(rev->files[i]);
    free(rev->files);
    memset(rev, 0, sizeof *rev);
}

static int parse_revision(const char *body, const char *url, hub_revision *out, mx_error *err) {
    json_error_t jerr;
    json_t *root = json_loads(body, 0, &jerr);
    if (!json_is_object(root)) {
        json_decref(root);
        return mx_fail(err, "%s: the answer is not a JSON object (%s)", url, jerr.text);
    }
    int rc = -1;
    const char *sha = json_string_value(json_object_get(root, "sha"));
    json_t *siblings = json_object_get(root, "siblings");
    if (!sha || !hub_is_commit_hash(sha)) {
        mx_fail(err, "%s: no commit id in \"sha\"", url);
        goto done;
    }
    if (!json_is_array(siblings)) {
        mx_fail(err, "%s: no \"siblings\" file list", url);
        goto done;
    }
    snprintf(out->commit, sizeof out->commit, "%s", sha);
    size_t n = json_array_size(siblings);
    out->files = calloc(n ? n : 1, sizeof *out->files);
    if (!out->files) {
        mx_fail(err, "out of memory for the file list of %s", url);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_object_get(json_array_get(siblings, i), "rfilename"));
        if (!name) {
            mx_fail(err, "%s: siblings[%zu] has no \"rfilename\"", url, i);
            goto done;
        }
        if (!hub_safe_relative_path(name) || strlen(name) > 1000) {
            mx_fail(err, "%s lists the file name '%s', which would land outside the model folder; refusing it", url,
                    name);
            goto done;
        }
        if (!(out->files[out->n_files] = strdup(name))) {
            mx_fail(err, "out of memory for the file list of %s", url);
            goto done;
        }
        out->n_files++;
    }
    rc = 0;
done:
    json_decref(root);
    if (rc != 0) hub_revision_free(out);
    return rc;
}

int hub_api_revision(const mx_hub_env *env, const char *repo, const char *revision, hub_revision *out,
                     mx_error *err) {
    memset(out, 0, sizeof *out);
    char rev[600], url[4096];
    hub_url_escape(revision, 0, rev, sizeof rev);
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s", env->endpoint, repo, rev);
    hub_request req = {0};
    body_buf body = {0};
    hub_what what = {repo, revision, NULL};
    int rc = -1;
    if (hub_request_setup(&req, env, "GET", url, -1, -1, body_append, &body, err) == 0) {
        CURLcode cc = hub_request_perform(&req);
        if (cc != CURLE_OK)
            hub_transport_fail(&req, cc, env, err);
        else if (req.resp.status != 200)
            status_fail(&req.resp, env, &what, url, err);
        else if (!body.data)
            mx_fail(err, "%s: empty answer", url);
        else
            rc = parse_revision(body.data, url, out, err);
    }
    free(body.data);
    hub_request_free(&req);
    return rc;
}

// --- HEAD /{repo}/resolve/{commit}/{file} -------------------------------------------------------

static bool etag_is_safe(const char *e) {
    if (!e[0] || e[0] == '.' || strlen(e) > 200) return false;
    for (; *e; e++)
        if (!isalnum((unsigned char)*e) && *e != '-' && *e != '_' && *e != '.') return false;
    return true;
}

// Joins a relative Location ("/org/name/resolve/...") to the origin of base.
static void join_relative(const char *base, const char *location, char *out, size_t cap) {
    const char *sep = strstr(base, "://");
    const char *path = sep ? strchr(sep + 3, '/') : NULL;
    int origin_len = path ? (int)(path - base) : (int)strlen(base);
    snprintf(out, cap, "%.*s%s", origin_len, base, location);
}

int hub_api_file_meta(const mx_hub_env *env, const char *repo, const char *commit, const char *file,
                      hub_file_meta *out, mx_error *err) {
    memset(out, 0, sizeof *out);
    char escaped[3200], url[4096];
    hub_url_escape(file, 1, escaped, sizeof escaped);
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", env->endpoint, repo, commit, escaped);
    hub_what what = {repo, commit, file};
    hub_request req = {0};
    int rc = -1;
    for (int hops = 0;; hops++) {
        if (hub_request_setup(&req, env, "HEAD", url, -1, -1, NULL, NULL, err)) goto done;
        CURLcode cc = hub_request_perform(&req);
        if (cc != CURLE_OK) {
            hub_transport_fail(&req, cc, env, err);
            goto done;
        }
        long s = req.resp.status;
        bool redirect = s >= 300 && s < 400 && req.resp.location[0];
        if (redirect && req.resp.location[0] == '/') {  // renamed repo: ask again at the new place
            if (hops >= 5) {
                mx_fail(err, "%s: too many redirects", url);
                goto done;
            }
            char next[4096];
            join_relative(url, req.resp.location, next, sizeof next);
            snprintf(url, sizeof url, "%s", next);
            continue;
        }
        if (!redirect && (s < 200 || s >= 300)) {
            status_fail(&req.resp, env, &what, url, err);
            goto done;
        }
        const hub_response *r = &req.resp;
        const char *etag = r->linked_etag[0] ? r->linked_etag : r->etag;
        int64_t size = r->linked_size >= 0 ? r->linked_size : redirect ? -1 : r->content_length;
        if (!r->repo_commit[0]) {
            mx_fail(err,
                    "%s answered without an X-Repo-Commit header: it does not look like a Hugging Face Hub "
                    "(check HF_ENDPOINT, now %s, and any proxy)",
                    url, env->endpoint);
            goto done;
        }
        if (strcmp(r->repo_commit, commit) != 0) {
            mx_fail(err, "%s: asked for commit %s, the Hub answered for commit %s", url, commit, r->repo_commit);
            goto done;
        }
        if (!etag_is_safe(etag)) {
            mx_fail(err, "%s: missing or unusable ETag '%s'", url, etag);
            goto done;
        }
        if (size < 0) {
            mx_fail(err, "%s: the Hub did not give the file size (X-Linked-Size or Content-Length)", url);
            goto done;
        }
        snprintf(out->commit, sizeof out->commit, "%s", r->repo_commit);
        snprintf(out->etag, sizeof out->etag, "%s", etag);
        out->size = size;
        snprintf(out->url, sizeof out->url, "%s", redirect ? r->location : url);
        rc = 0;
        break;
    }
done:
    hub_request_free(&req);
    return rc;
}
