// SPDX-License-Identifier: MIT
// The Hugging Face hub cache, laid out exactly as huggingface_hub lays it out, so that mlxcel,
// huggingface_hub and mlx-lm share one copy of every file:
//
//   <cache>/models--ORG--NAME/blobs/<etag>                 file contents, named by ETag (the sha256
//                                                          of LFS files, the git blob id of others)
//   <cache>/models--ORG--NAME/blobs/<etag>.incomplete      a download in progress (always a valid
//                                                          prefix of the file, so it can be resumed)
//   <cache>/models--ORG--NAME/snapshots/<commit>/<file>    relative symlink ../../blobs/<etag>
//   <cache>/models--ORG--NAME/refs/<revision>              the commit a branch or tag pointed to
//   <cache>/.locks/models--ORG--NAME/<etag>.lock           flock()ed while a blob is written
#ifndef MX_HUB_CACHE_H
#define MX_HUB_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/error.h"
#include "io/folders.h"

// The cache's folders: 0777 less the umask, as huggingface_hub makes them.
#define HUB_FOLDER_MODE 0777

// True for a full 40-hex-digit commit id.
bool hub_is_commit_hash(const char *s);
// "org/name" with each part made of letters, digits, '-', '_' and '.' (not starting with '.'),
// as the Hub allows; otherwise writes why into err and returns -1.
int hub_check_repo_id(const char *repo, mx_error *err);
// A repo file name from the Hub must stay inside its folder: no absolute path, no "..", no "."
// or empty component, no backslash or control character.
bool hub_safe_relative_path(const char *name);

// <cache>/models--ORG--NAME
void hub_repo_folder(const char *cache_dir, const char *repo, char *out, size_t cap);
// Reads refs/<revision> into commit (NUL-terminated, trimmed); 0 when it names a snapshot folder.
int hub_read_ref(const char *repo_dir, const char *revision, char *commit, size_t cap);
// Writes refs/<revision> = commit atomically (temporary file + rename); a no-op when revision is
// the commit itself or the ref already says so.
int hub_write_ref(const char *repo_dir, const char *revision, const char *commit, mx_error *err);
// Creates snapshots/<commit>/<file> as a relative symlink to blobs/<etag> (replacing what is there).
int hub_link_snapshot(const char *repo_dir, const char *commit, const char *file, const char *etag, mx_error *err);
// The relative symlink target for a snapshot file ("../../blobs/<etag>", one more "../" per folder
// in file).
void hub_snapshot_link_target(const char *file, const char *etag, char *out, size_t cap);

// The snapshot folder of a revision (a commit, or a branch or tag through refs/), if it exists.
int hub_cached_snapshot(const char *cache_dir, const char *repo, const char *revision, char *out, size_t cap);

// Opens and flock()s <cache>/.locks/models--ORG--NAME/<etag>.lock (as huggingface_hub does), saying
// on note when another process holds it; returns the fd (close to release) or -1 with a message.
int hub_lock_blob(const char *cache_dir, const char *repo, const char *etag, FILE *note, mx_error *err);
// Writes <cache>/CACHEDIR.TAG once (as huggingface_hub does), so backup tools skip the cache.
void hub_tag_cache_dir(const char *cache_dir);

// A snapshot folder that looks loadable: config.json, tokenizer.json and the weights (every shard
// named by model.safetensors.index.json, else at least one *.safetensors). Writes the reason when
// not (a partial download, or a download limited by --include).
bool hub_snapshot_loadable(const char *snapshot_dir, char *why, size_t cap);

#endif
