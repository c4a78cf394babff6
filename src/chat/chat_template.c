// SPDX-License-Identifier: MIT
// Chat-template glue: locating a model's template and special tokens, and rendering a conversation
// with the variables transformers' apply_chat_template passes (messages, tools, documents,
// add_generation_prompt, the special tokens, and chat_template_kwargs). The parsed templates and
// token strings are owned by the mx_chat_template and never change after load.
#include "chat/chat_template.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat/jinja.h"
#include "io/json_text.h"
#include "io/mapped_file.h"

struct mx_chat_template {
    jinja_template *main;     // "default" (or the only) template
    jinja_template *tool_use; // optional "tool_use" template, used when tools are given
    json_t *bos;              // JSON strings, or NULL
    json_t *eos;
};

void mx_chat_template_free(mx_chat_template *t) {
    if (!t) return;
    jinja_template_free(t->main);
    jinja_template_free(t->tool_use);
    json_decref(t->bos);
    json_decref(t->eos);
    free(t);
}

const char *mx_chat_template_bos(const mx_chat_template *t) { return t->bos ? json_string_value(t->bos) : NULL; }
const char *mx_chat_template_eos(const mx_chat_template *t) { return t->eos ? json_string_value(t->eos) : NULL; }

static jinja_template *parse_source(const char *src, const char *where, mx_error *err) {
    jinja_template *jt = jinja_template_parse(src, strlen(src), err);
    if (!jt) {
        if (where) mx_fail_prefix(err, "%s: chat template ", where);
        else mx_fail_prefix(err, "chat template ");
    }
    return jt;
}

mx_chat_template *mx_chat_template_from_string(const char *source, const char *bos, const char *eos, mx_error *err) {
    mx_chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    if (bos) t->bos = json_string(bos);
    if (eos) t->eos = json_string(eos);
    t->main = parse_source(source, NULL, err);
    if (!t->main || (bos && !t->bos) || (eos && !t->eos)) {
        if (t->main) mx_fail(err, "chat template: special tokens are not valid UTF-8");
        mx_chat_template_free(t);
        return NULL;
    }
    return t;
}

// Reads a whole text file; NULL with err left empty when it does not exist (the template files are
// optional), NULL with a message naming the path when it cannot be read or holds a NUL byte.
static char *read_file(const char *path, mx_error *err) {
    if (access(path, F_OK) != 0 && errno == ENOENT) return NULL;
    size_t n = 0;
    char *buf = mx_read_text_file(path, &n, err);
    if (buf && strlen(buf) != n) {
        free(buf);
        mx_fail(err, "%s: contains a NUL byte", path);
        return NULL;
    }
    return buf;
}

// A special token is a string or {"content": string, ...}; absent or null means none. Anything
// else is an error naming the key (the template would otherwise render a wrong token).
static int special_token(json_t *cfg, const char *key, json_t **out, const char *path, mx_error *err) {
    json_t *v = json_object_get(cfg, key);
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v)) return mx_fail(err, "%s: '%s' must be a string or {\"content\": string}", path, key);
    *out = json_incref(v);
    return 0;
}

// Parses `chat_template` of a config: a string, or a list of {name, template}.
static int load_from_config(mx_chat_template *t, json_t *ct, const char *path, mx_error *err) {
    if (json_is_string(ct)) {
        t->main = parse_source(json_string_value(ct), path, err);
        return t->main ? 0 : -1;
    }
    if (!json_is_array(ct)) return mx_fail(err, "%s: chat_template must be a string or a list of {name, template}", path);
    size_t i;
    json_t *item;
    json_array_foreach(ct, i, item) {
        const char *name = json_string_value(json_object_get(item, "name"));
        const char *src = json_string_value(json_object_get(item, "template"));
        if (!name || !src) return mx_fail(err, "%s: chat_template[%zu] needs string 'name' and 'template'", path, i);
        jinja_template **slot = strcmp(name, "default") == 0 ? &t->main : strcmp(name, "tool_use") == 0 ? &t->tool_use : NULL;
        if (!slot || *slot) continue;
        char where[1100];
        snprintf(where, sizeof where, "%s (template '%s')", path, name);
        if (!(*slot = parse_source(src, where, err))) return -1;
    }
    if (!t->main) return mx_fail(err, "%s: chat_template list has no 'default' template", path);
    return 0;
}

mx_chat_template *mx_chat_template_load(const char *model_dir, mx_error *err) {
    char path[4096];
    if (err) err->msg[0] = 0;
    mx_chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        mx_fail(err, "out of memory");
        return NULL;
    }
    // tokenizer_config.json: special tokens, and the template when there is no .jinja file.
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    json_t *cfg = NULL;
    char *cfg_text = read_file(path, err);
    if (!cfg_text && err && err->msg[0]) goto fail;
    if (cfg_text) {
        json_error_t je;
        cfg = mx_json_loads(cfg_text, 0, &je);
        free(cfg_text);
        if (!json_is_object(cfg)) {
            mx_fail(err, "%s: line %d: %s", path, je.line, cfg ? "not a JSON object" : je.text);
            json_decref(cfg);
            goto fail;
        }
        if (special_token(cfg, "bos_token", &t->bos, path, err) || special_token(cfg, "eos_token", &t->eos, path, err))
            goto fail_cfg;
    }
    char jpath[4096];
    snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", model_dir);
    char *src = read_file(jpath, err);
    if (src) {
        t->main = parse_source(src, jpath, err);
        free(src);
        if (!t->main) goto fail_cfg;
    } else if (err && err->msg[0]) {
        goto fail_cfg;
    } else if (cfg && json_object_get(cfg, "chat_template") && !json_is_null(json_object_get(cfg, "chat_template"))) {
        if (load_from_config(t, json_object_get(cfg, "chat_template"), path, err) < 0) goto fail_cfg;
    } else {
        // Processor-style chat_template.json.
        snprintf(jpath, sizeof jpath, "%s/chat_template.json", model_dir);
        char *text = read_file(jpath, err);
        if (!text) goto fail_cfg; // absent: no template (err->msg empty) or a read error
        json_error_t je;
        json_t *j = mx_json_loads(text, 0, &je);
        free(text);
        json_t *ct = json_object_get(j, "chat_template");
        int rc = ct ? load_from_config(t, ct, jpath, err) : -1;
        if (!j) mx_fail(err, "%s: line %d: %s", jpath, je.line, je.text);
        else if (!ct) mx_fail(err, "%s: no 'chat_template' member", jpath);
        json_decref(j);
        if (rc < 0) goto fail_cfg;
    }
    json_decref(cfg);
    return t;
fail_cfg:
    json_decref(cfg);
fail:
    mx_chat_template_free(t);
    return NULL;
}

char *mx_chat_template_render(const mx_chat_template *t, json_t *messages, json_t *tools, bool add_generation_prompt,
                              json_t *extra_vars, mx_error *err) {
    if (!json_is_array(messages)) {
        mx_fail(err, "chat template: messages must be a JSON array");
        return NULL;
    }
    if (tools && !json_is_array(tools) && !json_is_null(tools)) {
        mx_fail(err, "chat template: tools must be a JSON array");
        return NULL;
    }
    if (extra_vars && !json_is_object(extra_vars)) {
        mx_fail(err, "chat template: extra variables must be a JSON object");
        return NULL;
    }
    bool has_tools = tools && json_is_array(tools);
    // Order matters: later names win, so the explicit arguments override chat_template_kwargs,
    // which override the special tokens (as in transformers).
    size_t cap = 6 + (extra_vars ? json_object_size(extra_vars) : 0), n = 0;
    const char **names = calloc(cap, sizeof *names);
    json_t **values = calloc(cap, sizeof *values);
    char *out = NULL;
    if (!names || !values) {
        mx_fail(err, "out of memory");
        goto done;
    }
    if (t->bos) names[n] = "bos_token", values[n++] = t->bos;
    if (t->eos) names[n] = "eos_token", values[n++] = t->eos;
    if (extra_vars) {
        const char *key;
        json_t *val;
        json_object_foreach(extra_vars, key, val) names[n] = key, values[n++] = val;
    }
    names[n] = "messages", values[n++] = messages;
    names[n] = "tools", values[n++] = has_tools ? tools : json_null();
    names[n] = "documents", values[n++] = json_null();
    names[n] = "add_generation_prompt", values[n++] = add_generation_prompt ? json_true() : json_false();
    const jinja_template *jt = has_tools && t->tool_use ? t->tool_use : t->main;
    out = jinja_template_render_vars(jt, names, values, n, err);
    if (!out) mx_fail_prefix(err, "chat template ");
done:
    free(names);
    free(values);
    return out;
}
