// SPDX-License-Identifier: MIT
// Mixed-bit recipes (see recipe.h). The layer arithmetic follows mlx-lm's predicate, including
// Python's non-negative modulo.
#include "convert/recipe.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

const char *const cv_recipe_names[] = {"mixed_2_6", "mixed_3_4", "mixed_3_5", "mixed_3_6",
                                       "mixed_3_8", "mixed_4_6", "mixed_4_8", NULL};
static const int recipe_bits[][2] = {{2, 6}, {3, 4}, {3, 5}, {3, 6}, {3, 8}, {4, 6}, {4, 8}};

static int all_digits(const char *s, size_t len) {
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++)
        if (!isdigit((unsigned char)s[i])) return 0;
    return 1;
}

// Component k of a dotted path: start and length, or -1 if the path is shorter.
static int path_component(const char *path, int k, const char **start, size_t *len) {
    const char *p = path;
    for (int i = 0; i < k; i++) {
        p = strchr(p, '.');
        if (!p) return -1;
        p++;
    }
    const char *end = strchr(p, '.');
    *start = p;
    *len = end ? (size_t)(end - p) : strlen(p);
    return 0;
}

int cv_recipe_init(cv_recipe *r, const char *name, const char *const *modules, size_t n_modules,
                   int num_layers, mx_error *err) {
    int found = -1;
    for (int i = 0; cv_recipe_names[i]; i++)
        if (strcmp(name, cv_recipe_names[i]) == 0) found = i;
    if (found < 0) return mx_fail(err, "unknown quantization recipe '%s'", name);
    const char *down = NULL;
    for (size_t i = 0; i < n_modules && !down; i++)
        if (strstr(modules[i], "down_proj")) down = modules[i];
    if (!down) return mx_fail(err, "recipe %s: the model has no down_proj module", name);
    int loc = 0;
    for (;; loc++) {
        const char *s;
        size_t len;
        if (path_component(down, loc, &s, &len) != 0) {
            loc--;  // no numeric component: Python's loop variable stays on the last index
            break;
        }
        if (all_digits(s, len)) break;
    }
    r->low_bits = recipe_bits[found][0];
    r->high_bits = recipe_bits[found][1];
    r->group_size = 64;
    r->layer_location = loc;
    r->num_layers = num_layers;
    return 0;
}

int cv_recipe_bits(const cv_recipe *r, const char *module, int64_t dim1) {
    if (dim1 % r->group_size != 0) return 0;
    int index = 0;
    const char *s;
    size_t len;
    if (path_component(module, r->layer_location, &s, &len) == 0 && all_digits(s, len))
        index = atoi(s);
    int n = r->num_layers;
    int mid = ((index - n / 8) % 3 + 3) % 3;
    int more = index < n / 8 || index >= 7 * n / 8 || mid == 2;
    if (more && (strstr(module, "v_proj") || strstr(module, "down_proj"))) return r->high_bits;
    if (strstr(module, "lm_head") || strstr(module, "embed_tokens")) return r->high_bits;
    return r->low_bits;
}
