// SPDX-License-Identifier: MIT
// Bit-exactness of `convert` against the MLX-made fixture siblings: converts each <arch>-bf16
// fixture with the sibling's settings and compares every tensor (names, dtypes, shapes, bytes).
//
// The "bf16" fixtures are stored as F16, while the BF16 siblings were quantized by MLX from a bf16
// copy of the same (higher precision) weights. The two agree everywhere except where an F16 value
// lies exactly halfway between two bf16 values: there the true bf16 value is unknowable from the F16
// file (about 1 element in 8). So a group that differs is re-quantized with each such element set
// to whichever of its two bf16 neighbours the sibling's dequantized value is nearer; if that
// reproduces the sibling's group bit for bit, the difference is explained by the source and counted
// as "tie"; anything else is a failure. Pairs in the same float type (q4g64f16) must match exactly.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "convert/convert.h"
#include "convert/fs_util.h"
#include "convert/quantize.h"
#include "core/quant.h"
#include "io/safetensors.h"

typedef struct pair {
    const char *arch, *sibling;
    mx_quant q;
    int dtype;
} pair;

typedef struct tally {
    long tensors, groups, exact, tie, bad, float_elems, float_tie;
} tally;

#define AFF(b, g) {MX_QUANT_AFFINE, b, g}

static const pair pairs[] = {
    {"qwen3", "q2g64", AFF(2, 64), MX_DTYPE_BF16},   {"qwen3", "q3g64", AFF(3, 64), MX_DTYPE_BF16},
    {"qwen3", "q4g64", AFF(4, 64), MX_DTYPE_BF16},   {"qwen3", "q5g64", AFF(5, 64), MX_DTYPE_BF16},
    {"qwen3", "q6g64", AFF(6, 64), MX_DTYPE_BF16},   {"qwen3", "q8g64", AFF(8, 64), MX_DTYPE_BF16},
    {"qwen3", "q4g32", AFF(4, 32), MX_DTYPE_BF16},   {"qwen3", "q4g128", AFF(4, 128), MX_DTYPE_BF16},
    {"qwen3", "q4g64f16", AFF(4, 64), MX_DTYPE_F16}, {"qwen3", "mxfp4", {MX_QUANT_MXFP4, 4, 32}, MX_DTYPE_BF16},
    {"qwen3", "mxfp8", {MX_QUANT_MXFP8, 8, 32}, MX_DTYPE_BF16},
    {"llama", "q4g64", AFF(4, 64), MX_DTYPE_BF16},   {"llama", "q8g64", AFF(8, 64), MX_DTYPE_BF16},
    {"llama31", "q4g64", AFF(4, 64), MX_DTYPE_BF16}, {"llama31", "q8g64", AFF(8, 64), MX_DTYPE_BF16},
    {"mistral", "q4g64", AFF(4, 64), MX_DTYPE_BF16}, {"mistral", "q8g64", AFF(8, 64), MX_DTYPE_BF16},
    {"qwen2", "q4g64", AFF(4, 64), MX_DTYPE_BF16},   {"qwen2", "q8g64", AFF(8, 64), MX_DTYPE_BF16},
    {"qwen3_moe", "q4g64", AFF(4, 64), MX_DTYPE_BF16}, {"qwen3_moe", "q8g64", AFF(8, 64), MX_DTYPE_BF16},
};

// The two bf16 neighbours of an F16 value when it lies exactly between them; else both equal RNE.
static void bf16_candidates(float x, mx_dtype target, float *lo, float *hi) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if (target == MX_DTYPE_BF16 && (u & 0xffffu) == 0x8000u) {
        uint32_t a = u & 0xffff0000u, b = a + 0x10000u;
        memcpy(lo, &a, 4);
        memcpy(hi, &b, 4);
        if (*lo > *hi) {  // negative: the larger magnitude is the lower value
            float t = *lo;
            *lo = *hi;
            *hi = t;
        }
        return;
    }
    float r = target == MX_DTYPE_BF16 ? mx_bf16_to_f32(mx_f32_to_bf16(x))
              : target == MX_DTYPE_F16 ? mx_f16_to_f32(mx_f32_to_f16(x)) : x;
    *lo = *hi = r;
}

// Source row of an output weight row: plain tensors map by name; switch_mlp rows to their expert.
static const uint8_t *source_row(const mx_safetensors *src, const char *name, int64_t row, int64_t rows_per,
                                 mx_dtype *dt) {
    const char *sw = strstr(name, ".mlp.switch_mlp.");
    const mx_st_tensor *t;
    int64_t r = row;
    if (sw) {
        char nm[512];
        snprintf(nm, sizeof nm, "%.*s.mlp.experts.%lld.%s", (int)(sw - name), name, (long long)(row / rows_per),
                 sw + strlen(".mlp.switch_mlp."));
        t = mx_st_find(src, nm);
        r = row % rows_per;
    } else {
        t = mx_st_find(src, name);
    }
    if (!t) return NULL;
    *dt = t->dtype;
    return t->data + r * t->shape[t->ndim - 1] * (int64_t)mx_dtype_size(t->dtype);
}


// One group of the sibling, to be reproduced.
typedef struct group_ref {
    const uint8_t *packed;
    int64_t packed_bytes;
    int affine, bits, gs;
    mx_dtype sdt;
    float scale, bias;  // affine, as stored
    uint8_t sbyte;      // mx
} group_ref;

// Quantizes grp with the library; 1 if the scale (and bias) match the sibling. Codes go to packed.
static int params_match(const group_ref *r, const float *grp, uint8_t *packed) {
    if (r->affine) {
        float s, b;
        cv_quantize_affine_row(grp, r->gs, r->bits, r->gs, packed, &s, &b);
        float s2 = r->sdt == MX_DTYPE_BF16 ? mx_bf16_to_f32(mx_f32_to_bf16(s)) : mx_f16_to_f32(mx_f32_to_f16(s));
        float b2 = r->sdt == MX_DTYPE_BF16 ? mx_bf16_to_f32(mx_f32_to_bf16(b)) : mx_f16_to_f32(mx_f32_to_f16(b));
        return s2 == r->scale && b2 == r->bias;
    }
    uint8_t sb;
    cv_quantize_mx_row(grp, r->gs, r->bits, packed, &sb);
    return sb == r->sbyte;
}

// With the extremes fixed, flips each tie element whose code still differs; 1 if the group then
// matches the sibling exactly.
static int fix_codes(const group_ref *r, float *grp, const float *lo, const float *hi) {
    uint8_t pk[128];
    if (!params_match(r, grp, pk)) return 0;
    for (int j = 0; j < r->gs; j++) {
        if (mx_quant_code(pk, r->bits, j) == mx_quant_code(r->packed, r->bits, j)) continue;
        if (lo[j] == hi[j]) return 0;
        float keep = grp[j];
        grp[j] = keep == lo[j] ? hi[j] : lo[j];
        if (!params_match(r, grp, pk) || mx_quant_code(pk, r->bits, j) != mx_quant_code(r->packed, r->bits, j)) {
            grp[j] = keep;
            return 0;
        }
    }
    return memcmp(pk, r->packed, (size_t)r->packed_bytes) == 0;
}

// Searches the tie elements' bf16 choices for one that reproduces the sibling's group exactly:
// the nearest-value choice first, then every choice of the tie elements that could be extremes.
static int repair_group(const group_ref *r, float *grp, const float *lo, const float *hi) {
    float base[128], work[128];
    memcpy(base, grp, sizeof(float) * (size_t)r->gs);
    memcpy(work, base, sizeof(float) * (size_t)r->gs);
    if (fix_codes(r, work, lo, hi)) return 1;
    float min_hi = INFINITY, max_lo = -INFINITY;
    for (int j = 0; j < r->gs; j++) {
        min_hi = fminf(min_hi, hi[j]);
        max_lo = fmaxf(max_lo, lo[j]);
    }
    int ext[12], n_ext = 0;
    for (int j = 0; j < r->gs && n_ext < 12; j++)
        if (lo[j] != hi[j] && (lo[j] <= min_hi || hi[j] >= max_lo)) ext[n_ext++] = j;
    for (int combo = 0; combo < (1 << n_ext); combo++) {
        memcpy(work, base, sizeof(float) * (size_t)r->gs);
        for (int k = 0; k < n_ext; k++) work[ext[k]] = (combo >> k) & 1 ? hi[ext[k]] : lo[ext[k]];
        if (fix_codes(r, work, lo, hi)) return 1;
    }
    return 0;
}

static void compare_quantized(const mx_safetensors *src, const mx_safetensors *mine, const mx_safetensors *ref,
                              const char *wname, const pair *p, tally *ty) {
    char base[512], sname[520], bname[520];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(wname) - 7), wname);
    snprintf(sname, sizeof sname, "%s.scales", base);
    snprintf(bname, sizeof bname, "%s.biases", base);
    const mx_st_tensor *mw = mx_st_find(mine, wname), *rw = mx_st_find(ref, wname);
    const mx_st_tensor *ms = mx_st_find(mine, sname), *rs = mx_st_find(ref, sname);
    const mx_st_tensor *mb = mx_st_find(mine, bname), *rb = mx_st_find(ref, bname);
    int affine = rb != NULL;
    // Per-layer settings (MoE routers, group sizes) follow from the shapes.
    int64_t cols_packed = rw->shape[rw->ndim - 1], groups = rs->shape[rs->ndim - 1];
    int64_t rows = rw->numel / cols_packed;
    int bits = p->q.bits;
    int64_t cols = cols_packed * 32 / bits;
    if (affine && cols / groups != p->q.group_size) {  // e.g. the 8-bit router
        bits = 8;
        cols = cols_packed * 32 / bits;
    }
    int gs = (int)(cols / groups);
    int64_t rows_per = rw->ndim == 3 ? rw->shape[1] : rows;
    size_t ssz = mx_dtype_size(rs->dtype);
    float *grp = malloc(sizeof(float) * (size_t)gs * 3), *lo = grp + gs, *hi = lo + gs;
    for (int64_t r = 0; r < rows; r++) {
        mx_dtype sdt;
        const uint8_t *srow = source_row(src, wname, r, rows_per, &sdt);
        CHECK_MSG(srow != NULL, "%s: no source row", wname);
        if (!srow) break;
        for (int64_t g = 0; g < groups; g++) {
            ty->groups++;
            int64_t gb = (int64_t)gs * bits / 8, off = r * cols_packed * 4 + g * gb;
            int64_t si = (r * groups + g) * (int64_t)ssz;
            int same = memcmp(mw->data + off, rw->data + off, (size_t)gb) == 0 &&
                       memcmp(ms->data + si, rs->data + si, ssz) == 0 &&
                       (!affine || memcmp(mb->data + si, rb->data + si, ssz) == 0);
            if (same) {
                ty->exact++;
                continue;
            }
            // Repair the tie elements toward the sibling's dequantized values, then re-quantize.
            float scale, bias = 0;
            if (affine) {
                scale = mx_load_float(rs->data, rs->dtype, r * groups + g);
                bias = mx_load_float(rb->data, rb->dtype, r * groups + g);
            } else {
                scale = mx_e8m0_to_f32(rs->data[r * groups + g]);
            }
            for (int j = 0; j < gs; j++) {
                float x = mx_load_float(srow, sdt, g * gs + j);
                bf16_candidates(x, (mx_dtype)p->dtype, &lo[j], &hi[j]);
                uint32_t c = mx_quant_code(rw->data + r * cols_packed * 4, bits, g * gs + j);
                float deq = affine ? scale * (float)c + bias
                            : scale * (bits == 4 ? mx_e2m1_to_f32(c) : mx_e4m3_to_f32((uint8_t)c));
                grp[j] = fabsf(hi[j] - deq) < fabsf(lo[j] - deq) ? hi[j] : lo[j];
            }
            group_ref gr = {rw->data + off, gb, affine, bits, gs, rs->dtype, scale, bias,
                            affine ? 0 : rs->data[r * groups + g]};
            int ok = repair_group(&gr, grp, lo, hi);
            if (ok && p->dtype == MX_DTYPE_BF16) ty->tie++;
            else {
                ty->bad++;
                if (ty->bad <= 3) fprintf(stderr, "  %s row %lld group %lld differs\n", wname, (long long)r, (long long)g);
            }
        }
    }
    free(grp);
}

static void compare_float(const mx_safetensors *src, const mx_st_tensor *m, const mx_st_tensor *r, const pair *p,
                          tally *ty) {
    const mx_st_tensor *s = mx_st_find(src, m->name);
    for (int64_t i = 0; i < m->numel; i++) {
        ty->float_elems++;
        size_t es = mx_dtype_size(m->dtype);
        if (memcmp(m->data + i * es, r->data + i * es, es) == 0) continue;
        float lo, hi, v = mx_load_float(r->data, r->dtype, i);
        if (s) bf16_candidates(mx_load_float(s->data, s->dtype, i), (mx_dtype)p->dtype, &lo, &hi);
        if (s && lo != hi && (v == lo || v == hi)) ty->float_tie++;
        else {
            ty->bad++;
            if (ty->bad <= 3) fprintf(stderr, "  %s element %lld differs\n", m->name, (long long)i);
        }
    }
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
    mx_error err = {{0}};
    int rc = mx_convert(&o, &err);
    CHECK_MSG(rc == 0, "%s: %s", out, err.msg);
    if (rc != 0) return;
    mx_safetensors *src = mx_st_open_dir(in, &err), *mine = mx_st_open_dir(out, &err), *theirs = mx_st_open_dir(ref, &err);
    CHECK_MSG(src && mine && theirs, "%s", err.msg);
    if (src && mine && theirs) {
        tally ty = {0};
        CHECK_MSG(mx_st_count(mine) == mx_st_count(theirs), "%s: %zu tensors vs %zu", out, mx_st_count(mine),
                  mx_st_count(theirs));
        for (size_t i = 0; i < mx_st_count(theirs); i++) {
            const mx_st_tensor *r = mx_st_at(theirs, i), *m = mx_st_find(mine, r->name);
            CHECK_MSG(m != NULL, "%s: missing %s", out, r->name);
            if (!m) continue;
            int same_shape = m->dtype == r->dtype && m->ndim == r->ndim &&
                             memcmp(m->shape, r->shape, sizeof(int64_t) * (size_t)r->ndim) == 0;
            CHECK_MSG(same_shape, "%s: %s dtype/shape differ", out, r->name);
            if (!same_shape) continue;
            ty.tensors++;
            size_t n = strlen(r->name);
            if (r->dtype == MX_DTYPE_U32 && n > 7 && strcmp(r->name + n - 7, ".weight") == 0)
                compare_quantized(src, mine, theirs, r->name, p, &ty);
            else if (strstr(r->name, ".scales") || strstr(r->name, ".biases"))
                continue;  // compared with their weight
            else
                compare_float(src, m, r, p, &ty);
        }
        printf("%-10s %-9s tensors %3ld equal in name/dtype/shape; groups %6ld: exact %6ld, tie %5ld; "
               "float elems %6ld (tie %ld); unexplained %ld\n",
               p->arch, p->sibling, ty.tensors, ty.groups, ty.exact, ty.tie, ty.float_elems, ty.float_tie, ty.bad);
        CHECK_MSG(ty.bad == 0, "%s-%s: %ld unexplained differences", p->arch, p->sibling, ty.bad);
        if (p->dtype == MX_DTYPE_F16) CHECK_MSG(ty.tie == 0 && ty.exact == ty.groups, "%s: not bit-exact", out);
    }
    mx_st_close(src);
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
