// SPDX-License-Identifier: MIT
// Unit tests of the hub client's pure parts: SHA-256 against the FIPS 180-4 / NIST vectors
// (including block-boundary lengths and byte-at-a-time updates), origin comparison for the token,
// ETag normalization, repo id and file name checks, snapshot symlink targets, URL escaping, the
// environment (HF_ENDPOINT, HF_TOKEN, the token file, HF_HUB_OFFLINE, HF_HUB_CACHE/HF_HOME), the
// default file patterns and the loadable-snapshot check.
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../unit/check.h"
#include "hub/hub.h"
#include "hub/hub_api.h"
#include "hub/hub_cache.h"
#include "hub/hub_env.h"
#include "hub/hub_http.h"
#include "hub/sha256.h"

static void sha_of(const void *data, size_t n, char hex[65]) {
    mx_sha256 h;
    mx_sha256_init(&h);
    mx_sha256_update(&h, data, n);
    mx_sha256_hex(&h, hex);
}

static void test_sha256(void) {
    char hex[65];
    sha_of("", 0, hex);
    CHECK_STR(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    sha_of("abc", 3, hex);
    CHECK_STR(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 56 bytes: padding spills
    sha_of(m448, strlen(m448), hex);
    CHECK_STR(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                       "mnopqrstnopqrstu";
    sha_of(m896, strlen(m896), hex);
    CHECK_STR(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    // One million 'a', fed in uneven pieces and byte by byte.
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    mx_sha256 h;
    mx_sha256_init(&h);
    for (size_t off = 0, step = 1; off < 1000000; off += step, step = step * 7 % 1000 + 1)
        mx_sha256_update(&h, million + off, off + step > 1000000 ? 1000000 - off : step);
    mx_sha256_hex(&h, hex);
    CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    sha_of(million, 1000000, hex);
    CHECK_STR(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
    // 64 bytes (exactly one block) and 55 bytes (the longest message padded in one block).
    char block[64];
    memset(block, 'a', 64);
    sha_of(block, 64, hex);
    CHECK_STR(hex, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    sha_of(block, 55, hex);
    CHECK_STR(hex, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
}

static void test_origin_and_etag(void) {
    CHECK(hub_same_origin("https://huggingface.co/api/x", "https://huggingface.co"));
    CHECK(hub_same_origin("https://HuggingFace.co:443/a", "https://huggingface.co"));
    CHECK(hub_same_origin("http://127.0.0.1:8080/a?b", "http://127.0.0.1:8080"));
    CHECK(!hub_same_origin("http://127.0.0.1:8081/a", "http://127.0.0.1:8080"));
    CHECK(!hub_same_origin("https://cdn-lfs.huggingface.co/x", "https://huggingface.co"));
    CHECK(!hub_same_origin("http://huggingface.co/x", "https://huggingface.co"));
    CHECK(!hub_same_origin("https://huggingface.co.evil.com/x", "https://huggingface.co"));
    CHECK(!hub_same_origin("https://huggingface.co@evil.com/x", "https://huggingface.co"));
    CHECK(hub_same_origin("http://[::1]:9000/x", "http://[::1]:9000"));
    char e1[] = "\"abc123\"", e2[] = "W/\"abc\"", e3[] = "plain";
    hub_etag_normalize(e1);
    hub_etag_normalize(e2);
    hub_etag_normalize(e3);
    CHECK_STR(e1, "abc123");
    CHECK_STR(e2, "abc");
    CHECK_STR(e3, "plain");
}

static void test_names(void) {
    mx_error err = {{0}};
    CHECK(hub_check_repo_id("mlx-community/Qwen3-0.6B-4bit", &err) == 0);
    CHECK(hub_check_repo_id("org/name_v1.2", &err) == 0);
    CHECK(hub_check_repo_id("noslash", &err) != 0);
    CHECK(strstr(err.msg, "noslash") != NULL);
    CHECK(hub_check_repo_id("a/b/c", &err) != 0);
    CHECK(hub_check_repo_id("../b", &err) != 0);
    CHECK(hub_check_repo_id("a/..", &err) != 0);
    CHECK(hub_check_repo_id("a/b..c", &err) != 0);
    CHECK(hub_check_repo_id("a/b c", &err) != 0);
    CHECK(hub_check_repo_id("/b", &err) != 0);
    CHECK(hub_check_repo_id("a/", &err) != 0);

    CHECK(hub_safe_relative_path("config.json"));
    CHECK(hub_safe_relative_path("sub/dir/file.txt"));
    CHECK(hub_safe_relative_path("refs/pr/1"));
    CHECK(!hub_safe_relative_path("../x"));
    CHECK(!hub_safe_relative_path("a/../../x"));
    CHECK(!hub_safe_relative_path("/etc/passwd"));
    CHECK(!hub_safe_relative_path("a//b"));
    CHECK(!hub_safe_relative_path("a/./b"));
    CHECK(!hub_safe_relative_path(""));
    CHECK(!hub_safe_relative_path("a\\b"));
    CHECK(!hub_safe_relative_path("a\nb"));

    CHECK(hub_is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
    CHECK(!hub_is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
    CHECK(!hub_is_commit_hash("main"));
    CHECK(!hub_is_commit_hash("0123456789abcdef0123456789abcdef0123456"));

    char target[256], folder[256];
    hub_snapshot_link_target("config.json", "e1", target, sizeof target);
    CHECK_STR(target, "../../blobs/e1");
    hub_snapshot_link_target("a/b/c.txt", "e2", target, sizeof target);
    CHECK_STR(target, "../../../../blobs/e2");
    hub_repo_folder("/cache", "mlx-community/Qwen3-0.6B-4bit", folder, sizeof folder);
    CHECK_STR(folder, "/cache/models--mlx-community--Qwen3-0.6B-4bit");

    char url[256];
    hub_url_escape("refs/pr/1", 0, url, sizeof url);
    CHECK_STR(url, "refs%2Fpr%2F1");
    hub_url_escape("sub dir/ü.json", 1, url, sizeof url);
    CHECK_STR(url, "sub%20dir/%C3%BC.json");
}

static void test_patterns(void) {
    const char *yes[] = {"model.safetensors", "model-00001-of-00002.safetensors", "config.json", "tokenizer.json",
                         "chat_template.jinja", "merges.txt", "tokenizer.model", "sub/x.json", NULL};
    const char *no[] = {"README.md", "pytorch_model.bin", ".gitattributes", "model.gguf", "original/consolidated.pth",
                        NULL};
    for (int i = 0; yes[i]; i++) {
        int hit = 0;
        for (int k = 0; mx_hub_default_patterns[k]; k++) hit |= fnmatch(mx_hub_default_patterns[k], yes[i], 0) == 0;
        CHECK_MSG(hit, "%s should be in the default set", yes[i]);
    }
    for (int i = 0; no[i]; i++) {
        int hit = 0;
        for (int k = 0; mx_hub_default_patterns[k]; k++) hit |= fnmatch(mx_hub_default_patterns[k], no[i], 0) == 0;
        CHECK_MSG(!hit, "%s should not be in the default set", no[i]);
    }
}

static void test_env(const char *tmp) {
    char home[600], token_path[700];
    snprintf(home, sizeof home, "%s/hfhome", tmp);
    mkdir(home, 0777);
    snprintf(token_path, sizeof token_path, "%s/token", home);
    FILE *f = fopen(token_path, "w");
    fputs("  hf_from_file \n", f);
    fclose(f);
    unsetenv("HF_TOKEN");
    unsetenv("HF_TOKEN_PATH");
    unsetenv("HF_HUB_CACHE");
    setenv("HF_HOME", home, 1);
    setenv("HF_ENDPOINT", "http://mirror.example:8080//", 1);
    setenv("HF_HUB_OFFLINE", "0", 1);
    mx_hub_env env;
    mx_hub_env_load(&env);
    CHECK_STR(env.endpoint, "http://mirror.example:8080");
    CHECK_STR(env.token, "hf_from_file");
    CHECK_STR(env.token_source, token_path);
    CHECK(!env.offline);
    char want[700];
    snprintf(want, sizeof want, "%s/hub", home);
    CHECK_STR(env.cache_dir, want);
    setenv("HF_TOKEN", "hf_env", 1);
    setenv("HF_HUB_CACHE", "/elsewhere", 1);
    setenv("HF_HUB_OFFLINE", "TRUE", 1);
    unsetenv("HF_ENDPOINT");
    mx_hub_env_load(&env);
    CHECK_STR(env.token, "hf_env");
    CHECK_STR(env.token_source, "HF_TOKEN");
    CHECK_STR(env.cache_dir, "/elsewhere");
    CHECK_STR(env.endpoint, "https://huggingface.co");
    CHECK(env.offline);
    unsetenv("HF_TOKEN");
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_HUB_OFFLINE");
    unlink(token_path);
    mx_hub_env_load(&env);
    CHECK_STR(env.token, "");
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[900];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_loadable(const char *tmp) {
    char dir[700], why[256];
    snprintf(dir, sizeof dir, "%s/snap", tmp);
    mkdir(dir, 0777);
    CHECK(!hub_snapshot_loadable(dir, why, sizeof why));
    CHECK(strstr(why, "config.json") != NULL);
    write_file(dir, "config.json", "{}");
    CHECK(!hub_snapshot_loadable(dir, why, sizeof why));
    CHECK(strstr(why, "tokenizer.json") != NULL);
    write_file(dir, "tokenizer.json", "{}");
    CHECK(!hub_snapshot_loadable(dir, why, sizeof why));
    CHECK(strstr(why, "safetensors") != NULL);
    write_file(dir, "model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"model-1.safetensors\", \"b\": \"model-2.safetensors\"}}");
    write_file(dir, "model-1.safetensors", "x");
    CHECK(!hub_snapshot_loadable(dir, why, sizeof why));
    CHECK(strstr(why, "model-2.safetensors") != NULL);
    write_file(dir, "model-2.safetensors", "x");
    CHECK(hub_snapshot_loadable(dir, why, sizeof why));

    char repo_dir[800], commit[64];
    snprintf(repo_dir, sizeof repo_dir, "%s/models--a--b", tmp);
    mx_error err = {{0}};
    CHECK(hub_write_ref(repo_dir, "main", "0123456789abcdef0123456789abcdef01234567", &err) == 0);
    CHECK(hub_read_ref(repo_dir, "main", commit, sizeof commit) == 0);
    CHECK_STR(commit, "0123456789abcdef0123456789abcdef01234567");
    CHECK(hub_write_ref(repo_dir, "refs/pr/1", "0123456789abcdef0123456789abcdef01234567", &err) == 0);
    CHECK(hub_read_ref(repo_dir, "refs/pr/1", commit, sizeof commit) == 0);
    CHECK(hub_write_ref(repo_dir, "../x", "0123456789abcdef0123456789abcdef01234567", &err) != 0);
    CHECK(hub_link_snapshot(repo_dir, "0123456789abcdef0123456789abcdef01234567", "sub/f.json", "e9", &err) == 0);
    char link[1000], target[256];
    snprintf(link, sizeof link, "%s/snapshots/0123456789abcdef0123456789abcdef01234567/sub/f.json", repo_dir);
    ssize_t n = readlink(link, target, sizeof target - 1);
    target[n > 0 ? n : 0] = 0;
    CHECK_STR(target, "../../../blobs/e9");
}

int main(void) {
    char tmp[] = "/tmp/mlxcel-hub-unit-XXXXXX";
    if (!mkdtemp(tmp)) return 1;
    test_sha256();
    test_origin_and_etag();
    test_names();
    test_patterns();
    test_env(tmp);
    test_loadable(tmp);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return check_finish();
}
