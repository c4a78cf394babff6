// SPDX-License-Identifier: MIT
// Bit-exactness of `convert` against the MLX-made fixture siblings (tests/fixtures/README.md): each
// ARCH-bf16 fixture is converted with a sibling's settings (as `mlx_lm.convert` made the sibling
// from that same bf16 folder), and the result must equal the sibling plainly: the same tensor
// names, dtypes and shapes, every tensor's bytes identical, and config.json equal as JSON (numbers
// compared by value; the q8 siblings omit "mode" as older MLX files do, so there convert's
// "mode": "affine" is checked and then set aside). Nothing is re-quantized or explained away; one differing byte fails.
//
// Not covered here: qwen3-q4mixed (hand-written per-layer overrides that no convert recipe
// produces; tests/convert/cli_convert.sh checks the mixed recipes). The phi3 and deepseek_v3
// siblings were written by tests/fixtures/gen/make_family_fixtures.py (its own implementation of
// mlx-lm's layout and MLX's quantizer), so they check convert against a second implementation.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "convert/convert.h"
#include "convert/fs_util.h"
#include "core/quant.h"
#include "io/safetensors.h"

typedef struct pair {
    const char *arch, *sibling;
    mx_quant q;
    int dtype;  // -1: the source's torch_dtype (bf16), as mlx_lm.convert does without --dtype
    mx_quant_mode experts;  // --q-experts-mode (MX_QUANT_NONE: experts as the rest)
} pair;

#define AFF(b, g) {MX_QUANT_AFFINE, b, g}
#define NONE MX_QUANT_NONE

static const pair pairs[] = {
    {"qwen3", "q2g64", AFF(2, 64), -1, NONE},   {"qwen3", "q3g64", AFF(3, 64), -1, NONE},
    {"qwen3", "q4g64", AFF(4, 64), -1, NONE},   {"qwen3", "q5g64", AFF(5, 64), -1, NONE},
    {"qwen3", "q6g64", AFF(6, 64), -1, NONE},   {"qwen3", "q8g64", AFF(8, 64), -1, NONE},
    {"qwen3", "q4g32", AFF(4, 32), -1, NONE},   {"qwen3", "q4g128", AFF(4, 128), -1, NONE},
    {"qwen3", "q4g64f16", AFF(4, 64), MX_DTYPE_F16, NONE},
    {"qwen3", "mxfp4", {MX_QUANT_MXFP4, 4, 32}, -1, NONE},
    {"qwen3", "mxfp8", {MX_QUANT_MXFP8, 8, 32}, -1, NONE},
    {"llama", "q4g64", AFF(4, 64), -1, NONE},   {"llama", "q8g64", AFF(8, 64), -1, NONE},
    {"llama31", "q4g64", AFF(4, 64), -1, NONE}, {"llama31", "q8g64", AFF(8, 64), -1, NONE},
    {"mistral", "q4g64", AFF(4, 64), -1, NONE}, {"mistral", "q8g64", AFF(8, 64), -1, NONE},
    {"qwen2", "q4g64", AFF(4, 64), -1, NONE},   {"qwen2", "q8g64", AFF(8, 64), -1, NONE},
    {"qwen3_moe", "q4g64", AFF(4, 64), -1, NONE}, {"qwen3_moe", "q8g64", AFF(8, 64), -1, NONE},
    {"gemma3", "q4g64", AFF(4, 64), -1, NONE},  {"gemma3", "q8g64", AFF(8, 64), -1, NONE},
    {"phi3", "q4g64", AFF(4, 64), -1, NONE},    {"phi3", "q8g64", AFF(8, 64), -1, NONE},
    // deepseek_v3: experts stacked, kv_b_proj split into embed_q/unembed_out, the router left in
    // float and its e_score_correction_bias kept F32 (mlx-lm's sanitize and predicates).
    {"deepseek_v3", "q4g64", AFF(4, 64), -1, NONE}, {"deepseek_v3", "q8g64", AFF(8, 64), -1, NONE},
    // gpt_oss: the Hub's interleaved gate_up_proj split into gate_proj/up_proj [E, I, H] (with their
    // biases), down_proj transposed to [E, H, I], the router quantized at 8 bits group 64.
    {"gpt_oss", "q4g64", AFF(4, 64), -1, NONE}, {"gpt_oss", "q8g64", AFF(8, 64), -1, NONE},
    // mlx-community's gpt-oss layout: experts mxfp4 (group 32), the rest affine 8-bit group 64.
    {"gpt_oss", "mxfp4", AFF(8, 64), -1, MX_QUANT_MXFP4},
};

// Counts the bytes at which two tensors of equal size differ and reports the first one.
static long differing_bytes(const char *what, const mx_st_tensor *mine, const mx_st_tensor *ref) {
    long n = 0;
    for (size_t i = 0; i < ref->nbytes; i++) {
        if (mine->data[i] == ref->data[i]) continue;
        if (n++ == 0)
            fprintf(stderr, "  %s %s: first difference at byte %zu (0x%02x, sibling 0x%02x)\n", what, ref->name, i,
                    mine->data[i], ref->data[i]);
    }
    return n;
}

// Where the sibling's quantization block has no "mode" (older MLX files), convert's must say
// "affine" (the default such files mean) and is then removed so the rest compares plainly.
static void drop_default_mode(json_t *mine, json_t *sibling, const char *block) {
    json_t *qm = json_object_get(mine, block), *qs = json_object_get(sibling, block);
    if (!json_is_object(qm) || !json_is_object(qs) || json_object_get(qs, "mode")) return;
    const char *mode = json_string_value(json_object_get(qm, "mode"));
    CHECK_MSG(mode && strcmp(mode, "affine") == 0, "%s.mode is %s, expected affine", block, mode ? mode : "missing");
    json_object_del(qm, "mode");
}

static void compare_configs(const char *out, const char *ref) {
    char a[400], b[400];
    snprintf(a, sizeof a, "%s/config.json", out);
    snprintf(b, sizeof b, "%s/config.json", ref);
    json_error_t je;
    json_t *ja = json_load_file(a, 0, &je), *jb = json_load_file(b, 0, &je);
    CHECK_MSG(ja && jb, "%s: %s", ja ? b : a, je.text);
    drop_default_mode(ja, jb, "quantization");
    drop_default_mode(ja, jb, "quantization_config");
    if (ja && jb && !json_equal(ja, jb)) {
        const char *key;
        json_t *v;
        json_object_foreach(jb, key, v) {
            CHECK_MSG(json_equal(v, json_object_get(ja, key)), "%s: config key \"%s\" differs from the sibling", a, key);
        }
        json_object_foreach(ja, key, v) {
            CHECK_MSG(json_object_get(jb, key) != NULL, "%s: config key \"%s\" not in the sibling", a, key);
        }
    }
    CHECK_MSG(ja && jb && json_equal(ja, jb), "%s: config.json differs from %s", a, b);
    json_decref(ja);
    json_decref(jb);
}

static void run_pair(const pair *p, const char *tmpdir) {
    char in[256], ref[256], out[300];
    snprintf(in, sizeof in, "tests/fixtures/models/%s-bf16", p->arch);
    snprintf(ref, sizeof ref, "tests/fixtures/models/%s-%s", p->arch, p->sibling);
    snprintf(out, sizeof out, "%s/%s-%s", tmpdir, p->arch, p->sibling);
    mx_convert_opts o;
    mx_convert_opts_init(&o);
    o.hf_path = in;
    o.mlx_path = out;
    o.quantize = true;
    o.q_mode = p->q.mode;
    o.q_bits = p->q.bits;
    o.q_group_size = p->q.group_size;
    o.dtype = p->dtype;
    o.experts_q_mode = p->experts;
    o.threads = 2;
    mx_error err = {{0}};
    int rc = mx_convert(&o, &err);
    CHECK_MSG(rc == 0, "%s: %s", out, err.msg);
    if (rc != 0) return;
    mx_safetensors *mine = mx_st_open_dir(out, &err), *theirs = mine ? mx_st_open_dir(ref, &err) : NULL;
    CHECK_MSG(mine && theirs, "%s", err.msg);
    long tensors = 0, bytes = 0, bad_bytes = 0;
    if (mine && theirs) {
        CHECK_MSG(mx_st_count(mine) == mx_st_count(theirs), "%s: %zu tensors, sibling %zu", out, mx_st_count(mine),
                  mx_st_count(theirs));
        for (size_t i = 0; i < mx_st_count(theirs); i++) {
            const mx_st_tensor *r = mx_st_at(theirs, i), *m = mx_st_find(mine, r->name);
            CHECK_MSG(m != NULL, "%s: missing %s", out, r->name);
            if (!m) continue;
            int same_shape = m->dtype == r->dtype && m->ndim == r->ndim && m->nbytes == r->nbytes &&
                             memcmp(m->shape, r->shape, sizeof(int64_t) * (size_t)r->ndim) == 0;
            CHECK_MSG(same_shape, "%s: %s dtype/shape differ from the sibling", out, r->name);
            if (!same_shape) continue;
            long d = differing_bytes(out, m, r);
            CHECK_MSG(d == 0, "%s: %s differs in %ld of %zu bytes", out, r->name, d, r->nbytes);
            tensors++;
            bytes += (long)r->nbytes;
            bad_bytes += d;
        }
        compare_configs(out, ref);
    }
    printf("%-10s %-9s %3ld tensors, %7ld bytes compared, %ld differ\n", p->arch, p->sibling, tensors, bytes,
           bad_bytes);
    mx_st_close(mine);
    mx_st_close(theirs);
}

int main(void) {
    char tmpdir[] = "/tmp/mlxcel-test-convert-XXXXXX";
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) run_pair(&pairs[i], tmpdir);
    cv_remove_tree(tmpdir, NULL);
    return check_finish();
}
