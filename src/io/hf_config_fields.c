// SPDX-License-Identifier: MIT
// Typed config.json fields (see hf_config_internal.h): an absent or null field takes its default, a
// field of the wrong type or out of range is an error naming the file and the field.
#include "io/hf_config_internal.h"

// Integer field: absent -> def; present but not an integer (or out of range) -> error.
int mx_config_get_int(json_t *o, const char *key, int def, int lo, int *out, const char *label, mx_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v)) return mx_fail(err, "%s: field '%s' must be an integer", label, key);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > 1 << 30) return mx_fail(err, "%s: field '%s' = %lld is out of range", label, key, (long long)x);
    *out = (int)x;
    return 0;
}

int mx_config_get_num(json_t *o, const char *key, double def, double *out, const char *label, mx_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) return mx_fail(err, "%s: field '%s' must be a number", label, key);
    *out = json_number_value(v);
    return 0;
}

int mx_config_get_bool(json_t *o, const char *key, bool def, bool *out, bool *present, const char *label, mx_error *err) {
    json_t *v = json_object_get(o, key);
    if (present) *present = v && !json_is_null(v);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) return mx_fail(err, "%s: field '%s' must be true or false", label, key);
    *out = json_is_true(v);
    return 0;
}
