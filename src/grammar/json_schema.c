// SPDX-License-Identifier: MIT
// JSON schema -> GBNF text accepting exactly the JSON documents that validate (within the subset
// below), for response_format json_schema, tool-call arguments and `generate --json-schema`.
//
// Supported: type (one or a list), const, enum, anyOf, oneOf (generated as anyOf: a document may
// match several branches), allOf with one member, $ref to "#", "#/$defs/..." or
// "#/definitions/..." (recursion allowed); objects: properties, required, additionalProperties
// (false, true or a schema; absent counts as false when properties are given, so generated
// objects hold the declared properties only, in declared order); arrays: items, minItems,
// maxItems; strings: minLength, maxLength, pattern (a regex subset: literals, classes, ., \d \w \s,
// groups, |, quantifiers; unanchored patterns may have up to 32 characters around the match),
// format date, time, date-time, uuid; integers: minimum, maximum, exclusiveMinimum,
// exclusiveMaximum. Annotations (title, description, default, examples, $schema, $id, $comment)
// are ignored. Any other keyword is an error naming it and its path: a constraint the grammar does
// not enforce is never silently dropped.
// Sizes are capped so generation always ends: strings without maxLength hold at most 256
// characters between escapes and 32 escapes, numbers at most 16 integer and 16 fraction digits and
// a two-digit exponent (so every number is a finite double),
// whitespace between tokens at most one newline and 20 indentation characters.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gbnf_text.h"

#define STRING_RUN 256
#define STRING_ESCAPES 32
#define PATTERN_PAD 32

typedef struct ref_entry {
    char *ref;
    int rule;
} ref_entry;

typedef struct compiler {
    FILE *out;
    json_t *root;
    mx_error *err;
    bool failed;
    int failure;  // MX_GRAM_* of the failure in err (MX_GRAM_INVALID until a failure says otherwise)
    int n_rules;
    ref_entry *refs;
    int n_refs;
    int depth;
} compiler;

// The first failure of a compile, at path, of the given kind (MX_GRAM_*); later ones are dropped.
static int fail_kind(compiler *c, int failure, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_kind(compiler *c, int failure, const char *path, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = true;
    c->failure = failure;
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mx_fail(c->err, "json schema at '#%s': %s", path, msg);
}
#define fail(c, path, ...) fail_kind(c, MX_GRAM_INVALID, path, __VA_ARGS__)
#define fail_oom(c, path) fail_kind(c, MX_GRAM_NO_MEMORY, path, "out of memory")

// The JSON text of v (compact) as a GBNF literal.
static void put_json_literal(FILE *f, json_t *v) {
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    mx_gbnf_put_literal(f, t ? t : "", t ? strlen(t) : 0);
    free(t);
}

static int gen(compiler *c, json_t *s, const char *path);

// Starts a new rule; the caller writes its body and a newline.
static int begin_rule(compiler *c) {
    int id = c->n_rules++;
    fprintf(c->out, "r%d ::= ", id);
    return id;
}

// Body writers write into a memory stream so sub-rules can be emitted while a body is built.
typedef struct body {
    char *text;
    size_t len;
    FILE *f;
} body;

// Opens b's stream; a stream that does not open is an out-of-memory failure at path (-1).
static int body_open(compiler *c, body *b, const char *path) {
    b->text = NULL;
    b->len = 0;
    b->f = open_memstream(&b->text, &b->len);
    return b->f ? 0 : fail_oom(c, path);
}

// Emits "rN ::= <body>" and returns N.
static int body_close(compiler *c, body *b) {
    fclose(b->f);
    int id = begin_rule(c);
    fprintf(c->out, "%s\n", b->text ? b->text : "");
    free(b->text);
    return id;
}

static bool is_annotation(const char *k) {
    static const char *const names[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                        "$defs", "definitions", "deprecated", "readOnly", "writeOnly", "example"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(k, names[i]) == 0) return true;
    return false;
}

static int check_keywords(compiler *c, json_t *s, const char *path, const char *const *allowed) {
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (is_annotation(k)) continue;
        bool ok = false;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, k) == 0;
        if (!ok) return fail(c, path, "keyword '%s' is not supported here", k);
    }
    return 0;
}

// ---- integers in a range

static int gen_integer(compiler *c, json_t *s, const char *path) {
    static const char *const kw[] = {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};
    if (check_keywords(c, s, path, kw)) return -1;
    const long long big = 9999999999999999LL;  // 16 digits
    long long lo = -big, hi = big;
    const char *names[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(s, names[i]);
        if (!v) continue;
        if (!json_is_number(v)) return fail(c, path, "'%s' must be a number", names[i]);
        double x = json_number_value(v);
        if (x < -9e15 || x > 9e15) return fail(c, path, "'%s' is outside the supported range (16 digits)", names[i]);
        long long k;
        if (i < 2) {
            k = (long long)x;
            if ((double)k < x) k++;
            if (i == 1 && (double)k == x) k++;
            if (k > lo) lo = k;
        } else {
            k = (long long)x;
            if ((double)k > x) k--;
            if (i == 3 && (double)k == x) k--;
            if (k < hi) hi = k;
        }
    }
    if (lo > hi) return fail(c, path, "no integer satisfies the bounds");
    body b;
    if (body_open(c, &b, path)) return -1;
    bool any = false;
    if (lo < 0) {  // negative part: [lo, min(hi, -1)]
        long long top = hi < 0 ? hi : -1;
        fputs("\"-\" ", b.f);
        mx_gbnf_nonneg_range(b.f, -top, lo == -big ? -1 : -lo);
        any = true;
    }
    if (hi >= 0) {
        if (any) fputs(" | ", b.f);
        mx_gbnf_nonneg_range(b.f, lo > 0 ? lo : 0, hi == big ? -1 : hi);
    }
    return body_close(c, &b);
}

// ---- strings

static int gen_pattern(compiler *c, const char *pattern, const char *path) {
    size_t n = strlen(pattern);
    bool anchored_start = n > 0 && pattern[0] == '^';
    bool anchored_end = n > 0 && pattern[n - 1] == '$' && (n < 2 || pattern[n - 2] != '\\');
    char *core = strndup(pattern + anchored_start, n - anchored_start - (anchored_end && n > (size_t)anchored_start));
    if (!core) return fail_oom(c, path);
    body b;
    if (body_open(c, &b, path)) {
        free(core);
        return -1;
    }
    fputs("\"\\\"\" ", b.f);
    if (!anchored_start) fprintf(b.f, "%s{0,%d} ", GBNF_JSON_STRING_CHAR, PATTERN_PAD);
    char why[300] = "";
    fputs("( ", b.f);
    int rc = mx_gbnf_from_regex(core, b.f, why, sizeof why) == 0 ? 0 : fail(c, path, "%s", why);
    fputs(" )", b.f);
    if (rc == 0) {  // the translation must itself be valid GBNF (bad quantifiers, backwards ranges)
        fflush(b.f);
        char *probe = NULL;
        if (asprintf(&probe, "root ::= %s\n", b.text) < 0) probe = NULL;
        mx_error perr = {{0}};
        int pfail = MX_GRAM_NO_MEMORY;  // the probe's failure kind (no probe: an allocation failed)
        mx_grammar *g = probe ? mx_grammar_parse(probe, &pfail, &perr) : NULL;
        if (!g) rc = fail_kind(c, pfail, path, "pattern '%s' is not supported: %s", pattern, probe ? perr.msg : "out of memory");
        mx_grammar_free(g);
        free(probe);
    }
    if (!anchored_end) fprintf(b.f, " %s{0,%d}", GBNF_JSON_STRING_CHAR, PATTERN_PAD);
    fputs(" \"\\\"\"", b.f);
    free(core);
    int id = body_close(c, &b);
    return rc ? -1 : id;
}

static int gen_string(compiler *c, json_t *s, const char *path) {
    static const char *const kw[] = {"type", "minLength", "maxLength", "pattern", "format", NULL};
    if (check_keywords(c, s, path, kw)) return -1;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    json_t *jmin = json_object_get(s, "minLength"), *jmax = json_object_get(s, "maxLength");
    if ((pat != NULL) + (fmt != NULL) + (jmin != NULL || jmax != NULL) > 1)
        return fail(c, path, "combining pattern, format and min/maxLength is not supported");
    if (pat) {
        if (!json_is_string(pat)) return fail(c, path, "'pattern' must be a string");
        return gen_pattern(c, json_string_value(pat), path);
    }
    body b;
    if (body_open(c, &b, path)) return -1;
    if (fmt) {
        const char *f = json_string_value(fmt);
        const char *date = "[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )";
        const char *time = "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
                           "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
        if (!f) {
            fclose(b.f), free(b.text);
            return fail(c, path, "'format' must be a string");
        } else if (strcmp(f, "date") == 0) {
            fprintf(b.f, "\"\\\"\" %s \"\\\"\"", date);
        } else if (strcmp(f, "time") == 0) {
            fprintf(b.f, "\"\\\"\" %s \"\\\"\"", time);
        } else if (strcmp(f, "date-time") == 0) {
            fprintf(b.f, "\"\\\"\" %s \"T\" %s \"\\\"\"", date, time);
        } else if (strcmp(f, "uuid") == 0) {
            fputs("\"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12} \"\\\"\"", b.f);
        } else {
            fclose(b.f), free(b.text);
            return fail(c, path, "format '%s' is not supported (date, time, date-time, uuid are)", f);
        }
        return body_close(c, &b);
    }
    if (jmin || jmax) {
        if ((jmin && !json_is_integer(jmin)) || (jmax && !json_is_integer(jmax))) {
            fclose(b.f), free(b.text);
            return fail(c, path, "'minLength' and 'maxLength' must be integers");
        }
        long long lo = jmin ? json_integer_value(jmin) : 0;
        long long hi = jmax ? json_integer_value(jmax) : lo + STRING_RUN;
        if (lo < 0 || hi < lo || hi > 100000) {
            fclose(b.f), free(b.text);
            return fail(c, path, "string length bounds must satisfy 0 <= minLength <= maxLength <= 100000");
        }
        // Without escapes each character is one code point, so the bounds are exact.
        fprintf(b.f, "\"\\\"\" %s{%lld,%lld} \"\\\"\"", GBNF_JSON_STRING_CHAR, lo, hi);
        return body_close(c, &b);
    }
    fputs("string", b.f);
    return body_close(c, &b);
}

// ---- objects and arrays

static int gen_object(compiler *c, json_t *s, const char *path) {
    static const char *const kw[] = {"type", "properties", "required", "additionalProperties", NULL};
    if (check_keywords(c, s, path, kw)) return -1;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, path, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, path, "'required' must be an array");
    size_t n = props ? json_object_size(props) : 0;
    char sub[512];
    // required names must be declared (an undeclared required name could never be produced)
    size_t i;
    json_t *rv;
    json_t *required_set = json_object();  // the names, for one lookup per property
    if (!required_set) return fail_oom(c, path);
    json_array_foreach(req, i, rv) {
        if (!json_is_string(rv)) {
            json_decref(required_set);
            return fail(c, path, "'required[%zu]' must be a string", i);
        }
        if (!json_object_get(props, json_string_value(rv))) {
            json_decref(required_set);
            return fail(c, path, "required property '%s' is not in 'properties'", json_string_value(rv));
        }
        json_object_set(required_set, json_string_value(rv), json_true());
    }
    int extra = -1;  // rule of additional property values, -1: none
    if (addl && !json_is_false(addl)) {
        if (json_is_true(addl)) {
            extra = begin_rule(c);
            fputs("value\n", c->out);
        } else if (json_is_object(addl)) {
            snprintf(sub, sizeof sub, "%s/additionalProperties", path);
            if ((extra = gen(c, addl, sub)) < 0) {
                json_decref(required_set);
                return -1;
            }
        } else {
            json_decref(required_set);
            return fail(c, path, "'additionalProperties' must be a boolean or a schema");
        }
    } else if (!props && !addl) {
        extra = begin_rule(c);
        fputs("value\n", c->out);
    }
    int *vr = calloc(n + 1, sizeof *vr);
    const char **names = calloc(n + 1, sizeof *names);
    bool *required = calloc(n + 1, sizeof *required);
    if (!vr || !names || !required) {
        free(vr), free(names), free(required);
        json_decref(required_set);
        return fail_oom(c, path);
    }
    const char *key;
    json_t *pv;
    size_t k = 0;
    int rc = 0;
    json_object_foreach(props, key, pv) {
        snprintf(sub, sizeof sub, "%s/properties/%s", path, key);
        names[k] = key;
        required[k] = json_object_get(required_set, key) != NULL;
        if ((vr[k] = gen(c, pv, sub)) < 0) {
            rc = -1;
            break;
        }
        k++;
    }
    if (rc == 0) {
        // R[i]: properties i.. after at least one was written; F[i]: the first written is >= i.
        int base = c->n_rules;
        c->n_rules += 2 * (int)(n + 1);
        for (size_t j = 0; j <= n; j++) {
            int R = base + 2 * (int)j, F = R + 1;
            fprintf(c->out, "r%d ::= ", R);
            if (j == n) {
                if (extra >= 0) fprintf(c->out, "( \",\" ws string ws \":\" ws r%d ws )*", extra);
            } else {
                fputs(required[j] ? "\",\" ws " : "( \",\" ws ", c->out);
                json_t *nameval = json_string(names[j]);
                put_json_literal(c->out, nameval);
                json_decref(nameval);
                fprintf(c->out, " ws \":\" ws r%d ws", vr[j]);
                fprintf(c->out, required[j] ? " r%d" : " )? r%d", R + 2);
            }
            fprintf(c->out, "\nr%d ::= ", F);
            if (j == n) {
                if (extra >= 0) fprintf(c->out, "( string ws \":\" ws r%d ws r%d )?", extra, R);
            } else {
                json_t *nameval = json_string(names[j]);
                put_json_literal(c->out, nameval);
                json_decref(nameval);
                fprintf(c->out, " ws \":\" ws r%d ws r%d", vr[j], R + 2);
                if (!required[j]) fprintf(c->out, " | r%d", F + 2);
            }
            fputc('\n', c->out);
        }
        int id = begin_rule(c);
        fprintf(c->out, "\"{\" ws r%d \"}\"\n", base + 1);
        rc = id;
    }
    free(vr), free(names), free(required);
    json_decref(required_set);
    return rc;
}

static int gen_array(compiler *c, json_t *s, const char *path) {
    static const char *const kw[] = {"type", "items", "minItems", "maxItems", NULL};
    if (check_keywords(c, s, path, kw)) return -1;
    json_t *items = json_object_get(s, "items");
    json_t *jmin = json_object_get(s, "minItems"), *jmax = json_object_get(s, "maxItems");
    if ((jmin && !json_is_integer(jmin)) || (jmax && !json_is_integer(jmax)))
        return fail(c, path, "'minItems' and 'maxItems' must be integers");
    long long lo = jmin ? json_integer_value(jmin) : 0, hi = jmax ? json_integer_value(jmax) : -1;
    if (lo < 0 || (hi >= 0 && hi < lo) || lo > 1000 || hi > 1000)
        return fail(c, path, "array bounds must satisfy 0 <= minItems <= maxItems <= 1000");
    int item;
    char sub[512];
    snprintf(sub, sizeof sub, "%s/items", path);
    if (!items || json_is_true(items)) {
        item = begin_rule(c);
        fputs("value\n", c->out);
    } else if (json_is_object(items)) {
        if ((item = gen(c, items, sub)) < 0) return -1;
    } else {
        return fail(c, path, "'items' must be a schema (tuple forms are not supported)");
    }
    body b;
    if (body_open(c, &b, path)) return -1;
    if (hi == 0) {
        fputs("\"[\" ws \"]\"", b.f);
    } else {
        fprintf(b.f, "\"[\" ws %sr%d ws ( \",\" ws r%d ws )", lo == 0 ? "( " : "", item, item);
        long long rlo = lo > 0 ? lo - 1 : 0;
        if (hi < 0) fprintf(b.f, "{%lld,}", rlo);
        else fprintf(b.f, "{%lld,%lld}", rlo, hi - 1);
        fputs(lo == 0 ? " )? \"]\"" : " \"]\"", b.f);
    }
    return body_close(c, &b);
}

// ---- dispatch

static int gen_ref(compiler *c, const char *ref, const char *path) {
    for (int i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, ref) == 0) return c->refs[i].rule;
    json_t *target = NULL;
    if (strcmp(ref, "#") == 0) target = c->root;
    else if (strncmp(ref, "#/$defs/", 8) == 0) target = json_object_get(json_object_get(c->root, "$defs"), ref + 8);
    else if (strncmp(ref, "#/definitions/", 14) == 0)
        target = json_object_get(json_object_get(c->root, "definitions"), ref + 14);
    else return fail(c, path, "$ref '%s' is not supported (use #, #/$defs/NAME or #/definitions/NAME)", ref);
    if (!target) return fail(c, path, "$ref '%s' does not resolve", ref);
    ref_entry *p = realloc(c->refs, sizeof *p * (size_t)(c->n_refs + 1));
    if (!p) return fail_oom(c, path);
    c->refs = p;
    // Reserve the rule first so recursive references find it.
    int id = c->n_rules++;
    c->refs[c->n_refs++] = (ref_entry){strdup(ref), id};
    int body = gen(c, target, ref);
    if (body < 0) return -1;
    fprintf(c->out, "r%d ::= r%d\n", id, body);
    return id;
}

static int gen_type(compiler *c, json_t *s, const char *type, const char *path) {
    int id;
    if (strcmp(type, "object") == 0) return gen_object(c, s, path);
    if (strcmp(type, "array") == 0) return gen_array(c, s, path);
    if (strcmp(type, "string") == 0) return gen_string(c, s, path);
    if (strcmp(type, "integer") == 0) return gen_integer(c, s, path);
    static const char *const plain[] = {"type", NULL};
    if (strcmp(type, "number") == 0 || strcmp(type, "boolean") == 0 || strcmp(type, "null") == 0) {
        if (check_keywords(c, s, path, plain)) return -1;
        id = begin_rule(c);
        fprintf(c->out, "%s\n", type);
        return id;
    }
    return fail(c, path, "unknown type '%s'", type);
}

static int gen_alternatives(compiler *c, json_t *list, const char *key, const char *path) {
    if (!json_is_array(list) || json_array_size(list) == 0) return fail(c, path, "'%s' must be a non-empty array", key);
    size_t n = json_array_size(list), i;
    int *ids = malloc(sizeof *ids * n);
    if (!ids) return fail_oom(c, path);
    json_t *v;
    char sub[512];
    json_array_foreach(list, i, v) {
        snprintf(sub, sizeof sub, "%s/%s/%zu", path, key, i);
        if ((ids[i] = gen(c, v, sub)) < 0) {
            free(ids);
            return -1;
        }
    }
    int id = begin_rule(c);
    for (i = 0; i < n; i++) fprintf(c->out, "%sr%d", i ? " | " : "", ids[i]);
    fputc('\n', c->out);
    free(ids);
    return id;
}

// Which type a type-specific keyword belongs to (NULL: not type-specific).
static const char *keyword_type(const char *k) {
    static const char *const map[][2] = {
        {"properties", "object"},     {"required", "object"},  {"additionalProperties", "object"},
        {"items", "array"},           {"minItems", "array"},   {"maxItems", "array"},
        {"minLength", "string"},      {"maxLength", "string"}, {"pattern", "string"},
        {"format", "string"},         {"minimum", "integer"},  {"maximum", "integer"},
        {"exclusiveMinimum", "integer"}, {"exclusiveMaximum", "integer"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (strcmp(map[i][0], k) == 0) return map[i][1];
    return NULL;
}

// A copy of s for one member of a type list: keywords that belong to another listed type dropped.
static json_t *type_keywords(json_t *s, json_t *types, const char *type) {
    json_t *copy = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        const char *kt = keyword_type(k);
        bool other = false;
        if (kt && strcmp(kt, type) != 0) {
            size_t i;
            json_t *t;
            json_array_foreach(types, i, t) other |= json_is_string(t) && strcmp(json_string_value(t), kt) == 0;
        }
        if (!other) json_object_set(copy, k, v);
    }
    json_object_set_new(copy, "type", json_string(type));
    return copy;
}

static int gen(compiler *c, json_t *s, const char *path) {
    if (c->failed) return -1;
    if (++c->depth > 64) return fail_kind(c, MX_GRAM_BOUND, path, "schema nested too deeply");
    int id = -1;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        id = begin_rule(c);
        fputs("value\n", c->out);
    } else if (!json_is_object(s)) {
        fail(c, path, json_is_false(s) ? "the schema false matches nothing" : "a schema must be an object or a boolean");
    } else if (json_object_get(s, "$ref")) {
        static const char *const kw[] = {"$ref", NULL};
        json_t *r = json_object_get(s, "$ref");
        if (!check_keywords(c, s, path, kw)) {
            if (!json_is_string(r)) fail(c, path, "'$ref' must be a string");
            else id = gen_ref(c, json_string_value(r), path);
        }
    } else if (json_object_get(s, "const") || json_object_get(s, "enum")) {
        static const char *const kw[] = {"const", "enum", "type", NULL};
        json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
        if (check_keywords(c, s, path, kw)) {
        } else if (e && k) {
            fail(c, path, "'const' and 'enum' together are not supported");
        } else if (e && (!json_is_array(e) || json_array_size(e) == 0)) {
            fail(c, path, "'enum' must be a non-empty array");
        } else {
            id = begin_rule(c);
            if (k) {
                put_json_literal(c->out, k);
            } else {
                size_t i;
                json_t *v;
                json_array_foreach(e, i, v) {
                    if (i) fputs(" | ", c->out);
                    put_json_literal(c->out, v);
                }
            }
            fputc('\n', c->out);
        }
    } else if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) {
        static const char *const kw[] = {"anyOf", "oneOf", NULL};
        const char *key = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
        if (!check_keywords(c, s, path, kw)) {
            if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf"))
                fail(c, path, "'anyOf' and 'oneOf' together are not supported");
            else id = gen_alternatives(c, json_object_get(s, key), key, path);
        }
    } else if (json_object_get(s, "allOf")) {
        static const char *const kw[] = {"allOf", NULL};
        json_t *a = json_object_get(s, "allOf");
        if (!check_keywords(c, s, path, kw)) {
            if (!json_is_array(a) || json_array_size(a) != 1) fail(c, path, "'allOf' is supported with one schema only");
            else id = gen(c, json_array_get(a, 0), path);
        }
    } else {
        json_t *t = json_object_get(s, "type");
        if (json_is_string(t)) {
            id = gen_type(c, s, json_string_value(t), path);
        } else if (json_is_array(t) && json_array_size(t) > 0) {
            size_t n = json_array_size(t), i;
            int ids[8];
            if (n > 8) n = 8;
            for (i = 0; i < n && !c->failed; i++) {
                json_t *ti = json_array_get(t, i);
                if (!json_is_string(ti)) {
                    fail(c, path, "'type' entries must be strings");
                } else {
                    // Keywords of the other listed types do not apply to this one.
                    json_t *only = type_keywords(s, t, json_string_value(ti));
                    ids[i] = gen_type(c, only, json_string_value(ti), path);
                    json_decref(only);
                }
            }
            if (!c->failed) {
                id = begin_rule(c);
                for (i = 0; i < n; i++) fprintf(c->out, "%sr%d", i ? " | " : "", ids[i]);
                fputc('\n', c->out);
            }
        } else if (t) {
            fail(c, path, "'type' must be a string or an array of strings");
        } else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
                   json_object_get(s, "required")) {
            id = gen_object(c, s, path);
        } else if (json_object_get(s, "items")) {
            id = gen_array(c, s, path);
        } else {
            static const char *const kw[] = {NULL};
            if (!check_keywords(c, s, path, kw)) {
                id = begin_rule(c);
                fputs("value\n", c->out);
            }
        }
    }
    c->depth--;
    return c->failed ? -1 : id;
}

static const char json_base_rules[] =
    "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{0,256} ( esc [^\"\\\\\\x00-\\x1F]{0,256} ){0,32} \"\\\"\"\n"
    "esc ::= \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n";

// A $ref can lead back to itself through $ref, anyOf and allOf alone ({"$ref": "#"}, or
// {"anyOf": [{"$ref": "#"}, ...]}): no object or array consumes input on the way, and the grammar
// is left-recursive. The GBNF parser finds such cycles; its verdict is reported in the schema's terms.
// *failure: the kind of a failure (MX_GRAM_*).
static int check_compiled(const char *text, const char *top, int *failure, mx_error *err) {
    char *whole = NULL;
    if (top) {
        size_t n = strlen(top) + strlen(text) + 16;
        if (!(whole = malloc(n))) return *failure = MX_GRAM_NO_MEMORY, mx_fail(err, "out of memory");
        snprintf(whole, n, "root ::= %s\n%s", top, text);
    }
    mx_error gerr = {{0}};
    mx_grammar *g = mx_grammar_parse(whole ? whole : text, failure, &gerr);
    free(whole);
    if (g) {
        mx_grammar_free(g);
        return 0;
    }
    if (strstr(gerr.msg, "left-recursive") || strstr(gerr.msg, "without consuming input"))
        return *failure = MX_GRAM_INVALID, mx_fail(err, "json schema: a $ref leads back to itself through $ref/anyOf/oneOf/allOf alone (no object "
                       "or array in between); such schemas are not supported");
    return mx_fail(err, "json schema: internal error: the compiled grammar does not parse: %s", gerr.msg);
}

// The grammar text; the schema's value is rule `top` (NULL: root, with whitespace around it).
static char *schema_gbnf(json_t *schema, const char *top, int *failure, mx_error *err) {
    char *text = NULL;
    size_t len = 0;
    compiler c = {.root = schema, .err = err, .failure = MX_GRAM_INVALID};
    c.out = open_memstream(&text, &len);
    if (!c.out) {
        if (failure) *failure = MX_GRAM_NO_MEMORY;
        return mx_fail(err, "out of memory"), NULL;
    }
    int id;
    if (!schema) {
        id = begin_rule(&c);
        fputs("object\n", c.out);
    } else {
        id = gen(&c, schema, "");
    }
    if (id >= 0 && top) fprintf(c.out, "%s ::= r%d\n%s", top, id, json_base_rules);
    else if (id >= 0) fprintf(c.out, "root ::= ws r%d ws\n%s", id, json_base_rules);
    fclose(c.out);
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    if (id < 0 || c.failed || check_compiled(text, top, &c.failure, err) < 0) {
        if (failure) *failure = c.failure;
        free(text);
        return NULL;
    }
    return text;
}

char *mx_json_schema_to_gbnf(json_t *schema, int *failure, mx_error *err) {
    return schema_gbnf(schema, NULL, failure, err);
}

char *mx_json_schema_to_gbnf_rule(json_t *schema, const char *rule, int *failure, mx_error *err) {
    return schema_gbnf(schema, rule, failure, err);
}

char *mx_json_schemas_to_gbnf_rules(json_t *const *schemas, const char *const *rules, int n, int *failure,
                                    mx_error *err) {
    char *text = NULL;
    size_t len = 0;
    compiler c = {.err = err, .failure = MX_GRAM_INVALID};
    c.out = open_memstream(&text, &len);
    if (!c.out) {
        if (failure) *failure = MX_GRAM_NO_MEMORY;
        return mx_fail(err, "out of memory"), NULL;
    }
    for (int i = 0; i < n && !c.failed; i++) {
        // $ref resolves within each schema: the table of resolved references starts empty.
        for (int k = 0; k < c.n_refs; k++) free(c.refs[k].ref);
        c.n_refs = 0;
        c.root = schemas[i];
        int id = gen(&c, schemas[i], "");
        if (id >= 0) fprintf(c.out, "%s ::= r%d\n", rules[i], id);
    }
    if (!c.failed) fputs(json_base_rules, c.out);
    fclose(c.out);
    for (int k = 0; k < c.n_refs; k++) free(c.refs[k].ref);
    free(c.refs);
    // The parser checks every rule for left recursion, reachable from root or not, so any one
    // start rule stands for all the schemas.
    if (c.failed || check_compiled(text, n > 0 ? rules[0] : "value", &c.failure, err) < 0) {
        if (failure) *failure = c.failure;
        free(text);
        return NULL;
    }
    return text;
}
