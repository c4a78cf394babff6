// SPDX-License-Identifier: MIT
// Hub cache layout (see hub_cache.h). Everything that names a path inside the cache lives here,
// so the layout is defined once.
#include "hub/hub_cache.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/mapped_file.h"
#include "io/write_file.h"

bool hub_is_commit_hash(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!isxdigit((unsigned char)s[n]) || isupper((unsigned char)s[n])) return false;
    return n == 40;
}

static bool repo_part_ok(const char *s, size_t n) {
    if (n == 0 || n > 96 || s[0] == '.' || s[0] == '-') return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_' && s[i] != '.') return false;
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '.' && s[i + 1] == '.') return false;
    return true;
}

int hub_check_repo_id(const char *repo, mx_error *err) {
    const char *slash = repo ? strchr(repo, '/') : NULL;
    if (!slash || strchr(slash + 1, '/') || !repo_part_ok(repo, (size_t)(slash - repo)) ||
        !repo_part_ok(slash + 1, strlen(slash + 1)))
        return mx_fail(err,
                       "'%s' is not a Hugging Face repo id: expected ORG/NAME made of letters, digits, '-', '_' "
                       "and '.'",
                       repo ? repo : "");
    return 0;
}

bool hub_safe_relative_path(const char *name) {
    if (!name[0] || name[0] == '/') return false;
    for (const char *p = name; *p; p++)
        if (*p == '\\' || (unsigned char)*p < 0x20) return false;
    const char *part = name;
    while (1) {
        size_t n = strcspn(part, "/");
        if (n == 0 || (n == 1 && part[0] == '.') || (n == 2 && part[0] == '.' && part[1] == '.')) return false;
        if (!part[n]) return true;
        part += n + 1;
    }
}

void hub_repo_folder(const char *cache_dir, const char *repo, char *out, size_t cap) {
    const char *slash = strchr(repo, '/');
    if (slash)
        snprintf(out, cap, "%s/models--%.*s--%s", cache_dir, (int)(slash - repo), repo, slash + 1);
    else
        snprintf(out, cap, "%s/models--%s", cache_dir, repo);
}

int hub_read_ref(const char *repo_dir, const char *revision, char *commit, size_t cap) {
    if (!hub_safe_relative_path(revision)) return -1;
    char path[4600];
    snprintf(path, sizeof path, "%s/refs/%s", repo_dir, revision);
    mx_error ignored = {{0}};
    char *text = mx_read_text_file(path, NULL, &ignored);
    if (!text) return -1;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", text);
    free(text);
    buf[strcspn(buf, " \t\r\n")] = 0;
    // huggingface_hub writes full commit ids; any single safe name is accepted, as it is there.
    if (!hub_safe_relative_path(buf) || strchr(buf, '/')) return -1;
    snprintf(commit, cap, "%s", buf);
    return 0;
}

int hub_write_ref(const char *repo_dir, const char *revision, const char *commit, mx_error *err) {
    if (strcmp(revision, commit) == 0) return 0;
    if (!hub_safe_relative_path(revision)) return mx_fail(err, "revision '%s' cannot name a ref file", revision);
    char have[128];
    if (hub_read_ref(repo_dir, revision, have, sizeof have) == 0 && strcmp(have, commit) == 0) return 0;
    char path[4600], tmp[4700];
    snprintf(path, sizeof path, "%s/refs/%s", repo_dir, revision);
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
    if (mx_make_parent_dirs(path, HUB_FOLDER_MODE, err) != 0) return -1;
    if (mx_write_text_file(tmp, commit, err) != 0) {
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return mx_fail(err, "cannot write %s: %s", path, strerror(e));
    }
    return 0;
}

void hub_snapshot_link_target(const char *file, const char *etag, char *out, size_t cap) {
    size_t used = 0;
    out[0] = 0;
    for (const char *p = file; (p = strchr(p, '/')) != NULL; p++)
        used += (size_t)snprintf(out + used, used < cap ? cap - used : 0, "../");
    snprintf(out + (used < cap ? used : cap - 1), used < cap ? cap - used : 1, "../../blobs/%s", etag);
}

int hub_link_snapshot(const char *repo_dir, const char *commit, const char *file, const char *etag, mx_error *err) {
    char link_path[8200], target[4600];
    snprintf(link_path, sizeof link_path, "%s/snapshots/%s/%s", repo_dir, commit, file);
    hub_snapshot_link_target(file, etag, target, sizeof target);
    if (mx_make_parent_dirs(link_path, HUB_FOLDER_MODE, err) != 0) return -1;
    if (unlink(link_path) != 0 && errno != ENOENT)
        return mx_fail(err, "cannot replace %s: %s", link_path, strerror(errno));
    if (symlink(target, link_path) != 0 && errno != EEXIST)
        return mx_fail(err, "cannot create the symlink %s -> %s: %s", link_path, target, strerror(errno));
    return 0;
}

int hub_lock_blob(const char *cache_dir, const char *repo, const char *etag, FILE *note, mx_error *err) {
    char folder[4600], path[4800];
    hub_repo_folder(cache_dir, repo, folder, sizeof folder);
    const char *name = strrchr(folder, '/');
    snprintf(path, sizeof path, "%s/.locks/%s/%s.lock", cache_dir, name ? name + 1 : folder, etag);
    if (mx_make_parent_dirs(path, HUB_FOLDER_MODE, err) != 0) return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return mx_fail(err, "cannot open the lock file %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (note) {
        fprintf(note, "download: waiting for another download of the same file to finish (%s)\n", path);
        fflush(note);
    }
    while (flock(fd, LOCK_EX) != 0) {
        if (errno == EINTR) continue;
        int e = errno;
        close(fd);
        return mx_fail(err, "cannot lock %s: %s", path, strerror(e));
    }
    return fd;
}

void hub_tag_cache_dir(const char *cache_dir) {
    char path[4600];
    snprintf(path, sizeof path, "%s/CACHEDIR.TAG", cache_dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return;  // already there (or not writable: the tag is only a courtesy)
    static const char tag[] = "Signature: 8a477f597d28d172789f06886806bc55\n"
                              "# This file is a cache directory tag created by huggingface_hub.\n"
                              "# For information about cache directory tags, see:\n"
                              "#\thttps://bford.info/cachedir/\n";
    ssize_t w = write(fd, tag, sizeof tag - 1);
    (void)w;
    close(fd);
}

static bool file_exists(const char *dir, const char *name) {
    char path[8400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool hub_snapshot_loadable(const char *snapshot_dir, char *why, size_t cap) {
    static const char *const needed[] = {"config.json", "tokenizer.json"};
    for (size_t i = 0; i < sizeof needed / sizeof needed[0]; i++)
        if (!file_exists(snapshot_dir, needed[i])) {
            snprintf(why, cap, "no %s", needed[i]);
            return false;
        }
    char index[8400];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", snapshot_dir);
    json_t *root = json_load_file(index, 0, NULL);
    if (root) {
        json_t *map = json_object_get(root, "weight_map");
        const char *key;
        json_t *value;
        bool ok = json_is_object(map);
        json_object_foreach(map, key, value) {
            const char *shard = json_string_value(value);
            if (!shard || !hub_safe_relative_path(shard) || !file_exists(snapshot_dir, shard)) {
                snprintf(why, cap, "shard %s is missing", shard ? shard : "?");
                ok = false;
                break;
            }
        }
        json_decref(root);
        return ok;
    }
    DIR *d = opendir(snapshot_dir);
    if (!d) {
        snprintf(why, cap, "cannot list the folder");
        return false;
    }
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        found = n > 12 && strcmp(e->d_name + n - 12, ".safetensors") == 0 && file_exists(snapshot_dir, e->d_name);
    }
    closedir(d);
    if (!found) snprintf(why, cap, "no *.safetensors weights");
    return found;
}

int hub_cached_snapshot(const char *cache_dir, const char *repo, const char *revision, char *out, size_t cap) {
    char repo_dir[4600], commit[128];
    hub_repo_folder(cache_dir, repo, repo_dir, sizeof repo_dir);
    if (hub_is_commit_hash(revision))
        snprintf(commit, sizeof commit, "%s", revision);
    else if (hub_read_ref(repo_dir, revision, commit, sizeof commit) != 0)
        return -1;
    char snap[4800];
    snprintf(snap, sizeof snap, "%s/snapshots/%s", repo_dir, commit);
    struct stat st;
    if (stat(snap, &st) != 0 || !S_ISDIR(st.st_mode)) return -1;
    snprintf(out, cap, "%s", snap);
    return 0;
}
