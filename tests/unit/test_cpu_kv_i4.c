// SPDX-License-Identifier: MIT
// The 4-bit KV cache's row conversion (cpu_kernels_kv_i4_row, --kv-bits 4) against its description
// in cpu_kernels.h, read back from the nibbles by this test's own decoder: per group of
// MX_KV_I4_GROUP values the scale is m / -8 (m the first value of largest magnitude), m decodes to
// itself exactly, every value is within half a step (|scale| / 2) of its decoded value unless its
// code was clamped at 7 (then within one step), halfway values take the even code, a zero group decodes to zeros, codes fill hd / 2
// bytes (element 2k in the low nibble of byte k) and nothing past the row or its scales is written.
// A code moved by one in a copy (a planted fault) must break the bound. Also: cpu_kv_i4_code reads
// the codes as this decoder does. The attention on I4 codes against the float reference is in
// test_cpu_kernels (compare_attention); the model with the I4 cache in test_model_parity_kv_i4.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_kernels.h"
#include "check.h"
#include "test_rng.h"

enum { MAXD = 272 };
static test_rng rng = {0x9e3779b9};

// This test's decoder: element i of the codes, -8..7.
static int code_of(const uint8_t *codes, int i) { return ((codes[i / 2] >> (i % 2 ? 4 : 0)) & 15) - 8; }

// Row `rep` of the cases for head size hd: random values of three magnitudes with a large one per
// group; a group holding +m and -m (the clamp); values that fall halfway between two codes; signed zeros.
static void case_row(float *x, int hd, int rep) {
    float mag = rep == 0 ? 1e-3f : rep == 1 ? 1.0f : 300.0f;
    for (int i = 0; i < hd; i++) {
        x[i] = test_rng_unit(&rng) * mag;
        if (i % MX_KV_I4_GROUP == 7) x[i] *= 9.0f;
    }
    if (rep == 3)
        for (int i = 0; i < hd; i++) x[i] = i % MX_KV_I4_GROUP == 0 ? 8.0f : i % MX_KV_I4_GROUP == 1 ? -8.0f : 0.5f * (float)(i % 15 - 7);
    if (rep == 4)  // m = -2, so x / s = 4x exactly: every other value halfway between two codes, rounded to the even one
        for (int i = 0; i < hd; i++) x[i] = i % MX_KV_I4_GROUP == 3 ? -2.0f : ((float)(i % 15) - 7.0f + 0.5f * (float)(i % 2)) * 0.25f;
    if (rep == 5)
        for (int i = 0; i < hd; i++) x[i] = i % 2 ? 0.0f : -0.0f;
}

// Values of the row outside their bound (see the top), scales other than m / -8, or m not exact.
static int out_of_bound(const uint8_t *codes, const float *sc, const float *x, int hd) {
    int out = 0;
    for (int g0 = 0; g0 < hd; g0 += MX_KV_I4_GROUP) {
        int len = hd - g0 < MX_KV_I4_GROUP ? hd - g0 : MX_KV_I4_GROUP;
        float m = 0.0f;
        for (int i = 0; i < len; i++) m = fabsf(x[g0 + i]) > fabsf(m) ? x[g0 + i] : m;
        float s = sc[g0 / MX_KV_I4_GROUP];
        out += s != m / -8.0f;
        for (int i = g0; i < g0 + len; i++) {
            int c = code_of(codes, i);
            double err = fabs((double)c * s - x[i]), step = fabs((double)s) * (1 + 1e-6) + 1e-30;
            out += !(err <= 0.5 * step || (c == 7 && x[i] / s > 7.5f && err <= step));
            out += x[i] == m && m != 0.0f && (float)c * s != m;
        }
    }
    return out;
}

int main(void) {
    const int hds[] = {2, 16, 32, 36, 72, 128, 256, 264};
    float x[MAXD], sc[MAXD / MX_KV_I4_GROUP + 2];
    uint8_t codes[MAXD / 2 + 8];
    int ties = 0, ties_bad = 0, outside = 0, past = 0, zeros_bad = 0, reader_bad = 0, planted_missed = 0, clamped = 0, rows = 0;
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
        for (int rep = 0; rep < 6; rep++) {
            int hd = hds[h], nsc = mx_kv_row_scales(MX_DTYPE_I4, hd);
            case_row(x, hd, rep);
            memset(codes, 0x5a, sizeof codes);
            for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) sc[i] = -1.0f;
            cpu_kernels_kv_i4_row(codes, sc, x, hd);
            rows++;
            outside += out_of_bound(codes, sc, x, hd);
            past += codes[hd / 2] != 0x5a || sc[nsc] != -1.0f;
            for (int i = 0; i < hd; i++) {
                reader_bad += cpu_kv_i4_code(codes, i) != code_of(codes, i);
                if (rep == 4 && i % 2 && i % MX_KV_I4_GROUP != 3 && code_of(codes, i) != 7) {
                    ties++;
                    ties_bad += code_of(codes, i) % 2 != 0;
                }
                clamped += code_of(codes, i) == 7 && fabsf(x[i]) > 7.5f * fabsf(sc[i / MX_KV_I4_GROUP]);
                if (rep == 5) zeros_bad += (float)code_of(codes, i) * sc[i / MX_KV_I4_GROUP] != 0.0f;
            }
            // One code moved by one step away from its value (or back from -8 / 7) must break the bound
            // (not on the ties' row, where both neighbours are half a step away: checked above).
            if (rep == 4) continue;
            int at = (int)(h * 13 + (size_t)rep * 5) % hd, c = code_of(codes, at);
            float s = sc[at / MX_KV_I4_GROUP];
            if (s == 0.0f) continue;
            int moved = (float)c * s >= x[at] ? (s > 0 ? c + 1 : c - 1) : (s > 0 ? c - 1 : c + 1);
            if (moved > 7 || moved < -8) moved = 2 * c - moved;
            uint8_t planted[sizeof codes];
            memcpy(planted, codes, sizeof codes);
            planted[at / 2] = (uint8_t)((planted[at / 2] & (at % 2 ? 0x0f : 0xf0)) | ((moved + 8) << (at % 2 ? 4 : 0)));
            planted_missed += out_of_bound(planted, sc, x, hd) == 0;
        }
    CHECK_MSG(outside == 0, "i4 rows: %d values or scales outside the conversion's bound", outside);
    CHECK_MSG(past == 0, "i4 rows: %d rows wrote past their codes or scales", past);
    CHECK_MSG(ties > 0 && ties_bad == 0, "i4 rows: %d of %d values halfway between two codes not rounded to the even one",
              ties_bad, ties);
    CHECK_MSG(zeros_bad == 0, "i4 rows: %d values of a zero row did not decode to zero", zeros_bad);
    CHECK_MSG(reader_bad == 0, "i4 rows: cpu_kv_i4_code differs from the nibble layout at %d values", reader_bad);
    CHECK_MSG(planted_missed == 0, "i4 rows: %d planted one-code faults not caught", planted_missed);
    CHECK_MSG(clamped > 0, "i4 rows: the cases never reached the clamp at code 7");
    printf("%d rows converted, %d values clamped at code 7\n", rows, clamped);
    return check_finish();
}
